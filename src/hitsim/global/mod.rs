//! Global (fully associative) replacement policies, textbook versions, for
//! comparison with the cache's set-associative ones.
//!
//! Pages are the trace's dense ids `0..universe`, so every per-page datum
//! (list links, flags, counters, shadow entries) lives in a plain `Vec`
//! indexed by page: no hash table on the access path, and every policy but
//! `opt` (O(log n)) does O(1) work per access (amortized for the clock hands
//! and LIRS's stack pruning).

mod basic;
mod clockpro;
mod lfu;
pub(crate) mod linux;
mod lirs;
pub(crate) mod list;
pub(crate) mod opt;
mod queues;
mod s3fifo;
mod wtinylfu;

use std::fmt;
use std::str::FromStr;

pub(crate) use opt::next_uses;

/// One global policy over pages `0..universe`.
pub(crate) trait Global {
    /// Accesses page `x`; returns true on a hit. A miss inserts the page,
    /// evicting as the policy says when the cache is full.
    fn access(&mut self, x: u32) -> bool;
}

/// The global policies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GlobalKind {
    /// Least recently used.
    Lru,
    /// First in, first out.
    Fifo,
    /// CLOCK (second chance).
    Clock,
    /// Generalized CLOCK with the counters of `sa-gclock` (0..=3).
    Gclock,
    /// In-cache LFU, O(1), ties to the oldest.
    Lfu,
    /// Full 2Q.
    TwoQ,
    /// ARC.
    Arc,
    /// LIRS.
    Lirs,
    /// CLOCK-Pro.
    ClockPro,
    /// S3-FIFO.
    S3Fifo,
    /// SIEVE.
    Sieve,
    /// W-TinyLFU.
    WTinyLfu,
    /// Linux's active/inactive lists with refault activation.
    Linux,
    /// Belady's optimal (MIN).
    Opt,
}

impl GlobalKind {
    /// Every global policy.
    pub const ALL: [GlobalKind; 14] = [
        GlobalKind::Lru,
        GlobalKind::Fifo,
        GlobalKind::Clock,
        GlobalKind::Gclock,
        GlobalKind::Lfu,
        GlobalKind::TwoQ,
        GlobalKind::Arc,
        GlobalKind::Lirs,
        GlobalKind::ClockPro,
        GlobalKind::S3Fifo,
        GlobalKind::Sieve,
        GlobalKind::WTinyLfu,
        GlobalKind::Linux,
        GlobalKind::Opt,
    ];

    /// The name on the command line.
    pub const fn name(self) -> &'static str {
        match self {
            GlobalKind::Lru => "lru",
            GlobalKind::Fifo => "fifo",
            GlobalKind::Clock => "clock",
            GlobalKind::Gclock => "gclock",
            GlobalKind::Lfu => "lfu",
            GlobalKind::TwoQ => "2q",
            GlobalKind::Arc => "arc",
            GlobalKind::Lirs => "lirs",
            GlobalKind::ClockPro => "clockpro",
            GlobalKind::S3Fifo => "s3fifo",
            GlobalKind::Sieve => "sieve",
            GlobalKind::WTinyLfu => "wtinylfu",
            GlobalKind::Linux => "linux",
            GlobalKind::Opt => "opt",
        }
    }
}

impl fmt::Display for GlobalKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for GlobalKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let lower = s.trim().to_ascii_lowercase();
        GlobalKind::ALL
            .into_iter()
            .find(|k| k.name() == lower)
            .ok_or_else(|| format!("unknown global policy {s:?}"))
    }
}

/// Hits of `p` on `pages`: (hits among `pages[warm..]`, hits overall).
fn replay<P: Global>(mut p: P, pages: &[u32], warm: usize) -> (u64, u64) {
    let (a, b) = pages.split_at(warm.min(pages.len()));
    let mut early = 0u64;
    for &x in a {
        early += u64::from(p.access(x));
    }
    let mut late = 0u64;
    for &x in b {
        late += u64::from(p.access(x));
    }
    (late, early + late)
}

/// Runs `kind` with a cache of `cap` pages (of `page_size` bytes, which only
/// `linux` looks at) over `pages` (dense ids below `universe`); returns
/// (hits after the first `warm` requests, hits overall).
pub(crate) fn run(
    kind: GlobalKind,
    cap: usize,
    page_size: u64,
    pages: &[u32],
    universe: usize,
    warm: usize,
) -> (u64, u64) {
    let cap = cap.max(1);
    let u = universe;
    match kind {
        GlobalKind::Lru => replay(basic::Lru::new(cap, u), pages, warm),
        GlobalKind::Fifo => replay(basic::Fifo::new(cap, u), pages, warm),
        GlobalKind::Clock => replay(basic::Clock::second_chance(cap, u), pages, warm),
        GlobalKind::Gclock => replay(basic::Clock::gclock(cap, u), pages, warm),
        GlobalKind::Lfu => replay(lfu::Lfu::new(cap, u), pages, warm),
        GlobalKind::TwoQ => replay(queues::TwoQ::new(cap, u), pages, warm),
        GlobalKind::Arc => replay(queues::Arc::new(cap, u), pages, warm),
        GlobalKind::Lirs => replay(lirs::Lirs::new(cap, u), pages, warm),
        GlobalKind::ClockPro => replay(clockpro::ClockPro::new(cap, u), pages, warm),
        GlobalKind::S3Fifo => replay(s3fifo::S3Fifo::new(cap, u), pages, warm),
        GlobalKind::Sieve => replay(basic::Sieve::new(cap, u), pages, warm),
        GlobalKind::WTinyLfu => replay(wtinylfu::WTinyLfu::new(cap, u), pages, warm),
        GlobalKind::Linux => replay(linux::Linux::new(cap, u, page_size), pages, warm),
        GlobalKind::Opt => {
            let next = next_uses(pages, u);
            let mut p = opt::Opt::new(cap, u);
            let (mut early, mut late) = (0u64, 0u64);
            for (i, (&x, &n)) in pages.iter().zip(&next).enumerate() {
                let hit = u64::from(p.access(x, n));
                if i < warm {
                    early += hit;
                } else {
                    late += hit;
                }
            }
            (late, early + late)
        }
    }
}

/// The bytes `kind` allocates for a cache of `cap` pages over `universe`
/// pages and a trace of `requests` requests: per-page state (links, flags,
/// counters, shadow entries) plus what grows with the cache, which is capped
/// at the universe (a cache never holds more pages than there are). An
/// estimate from above; saturates instead of overflowing.
pub(crate) fn bytes(kind: GlobalKind, cap: usize, universe: usize, requests: usize) -> u64 {
    let u = universe as u64;
    let held = cap.min(universe) as u64;
    // Links are two u32 a page; rings hold a u32 a resident page.
    let per_page: u64 = match kind {
        GlobalKind::Lru | GlobalKind::Sieve | GlobalKind::ClockPro => 9,
        GlobalKind::TwoQ | GlobalKind::Arc => 9,
        GlobalKind::Fifo | GlobalKind::Clock | GlobalKind::Gclock => 1,
        GlobalKind::S3Fifo => 10,
        GlobalKind::Lirs => 18,
        GlobalKind::Linux => 17,
        GlobalKind::WTinyLfu => 9,
        // Links, the bucket of each page, and at most a bucket (32 bytes)
        // per resident page.
        GlobalKind::Lfu => 12,
        // The next access of each resident page, the last access of each
        // page while the next uses are computed.
        GlobalKind::Opt => 24,
    };
    let by_cap: u64 = match kind {
        GlobalKind::Fifo | GlobalKind::Clock | GlobalKind::Gclock => held.saturating_mul(4),
        GlobalKind::Lfu => held.saturating_add(1).saturating_mul(32),
        // Four rows of one byte a counter.
        GlobalKind::WTinyLfu => held.next_power_of_two().max(16).saturating_mul(4),
        // The heap (16 bytes an entry) grows to 3 entries a resident page
        // plus 64 before it is rebuilt, and a Vec may double.
        GlobalKind::Opt => held.saturating_mul(3).saturating_add(65).saturating_mul(32),
        _ => 0,
    };
    // Opt keeps the next use (8 bytes) of every request.
    let by_request = if kind == GlobalKind::Opt {
        (requests as u64).saturating_mul(8)
    } else {
        0
    };
    u.saturating_mul(per_page)
        .saturating_add(by_cap)
        .saturating_add(by_request)
}

/// Hits of `kind` on every request of `pages` (for tests).
#[cfg(test)]
pub(crate) fn hits(kind: GlobalKind, cap: usize, pages: &[u32]) -> u64 {
    let universe = pages.iter().map(|&p| p as usize + 1).max().unwrap_or(0);
    run(kind, cap, 4096, pages, universe, 0).1
}

#[cfg(test)]
mod tests;
