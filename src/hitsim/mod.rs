//! Hit-ratio simulation of traces (`setcache sim`): the cache's own
//! set-associative policies, run through [`SaModel`] (the very policy code
//! the cache runs), beside textbook global policies and Belady's optimum.
//!
//! A [`Trace`] is loaded once and its page numbers renumbered densely
//! (`0..footprint`, by first appearance), so that the global policies keep
//! their per-page state in plain vectors. Every run replays the whole trace:
//! the first `warmup` fraction of the requests warms the cache and the rest
//! is counted (the papers' method), and the whole-trace hit ratio is kept too.

mod global;
pub mod trace;
pub mod ycsb;

use std::fmt;
use std::str::FromStr;
use std::time::Instant;

use crate::cache::policy::{MAX_ASSOC, MIN_ASSOC, Policy, PolicyKind, SaModel};

pub use global::GlobalKind;
pub use trace::{Trace, load};

/// A policy to simulate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HitPolicy {
    /// A set-associative cache whose sets run the cache's policy.
    Sa(PolicyKind),
    /// A global policy.
    Global(GlobalKind),
}

impl HitPolicy {
    /// Every policy: the set-associative ones, then the global ones.
    pub fn all() -> Vec<HitPolicy> {
        PolicyKind::ALL
            .into_iter()
            .map(HitPolicy::Sa)
            .chain(GlobalKind::ALL.into_iter().map(HitPolicy::Global))
            .collect()
    }

    /// Whether the policy is set-associative.
    pub fn is_sa(self) -> bool {
        matches!(self, HitPolicy::Sa(_))
    }
}

impl fmt::Display for HitPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HitPolicy::Sa(k) => write!(f, "sa-{}", k.name()),
            HitPolicy::Global(k) => f.write_str(k.name()),
        }
    }
}

impl FromStr for HitPolicy {
    type Err = String;

    /// `sa-NAME` for a set-associative policy, `NAME` for a global one.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let lower = s.trim().to_ascii_lowercase();
        if lower.starts_with("sa-") {
            return lower
                .parse::<PolicyKind>()
                .map(HitPolicy::Sa)
                .map_err(|e| e.to_string());
        }
        lower
            .parse::<GlobalKind>()
            .map(HitPolicy::Global)
            .map_err(|_| {
                let sa: Vec<String> = PolicyKind::ALL.iter().map(|k| format!("sa-{k}")).collect();
                let gl: Vec<&str> = GlobalKind::ALL.iter().map(|k| k.name()).collect();
                format!(
                    "unknown policy {s:?}; set-associative: {}; global: {}; or \"all\"",
                    sa.join(", "),
                    gl.join(", ")
                )
            })
    }
}

/// Parses a comma-separated policy list (`all`, `sa`, `global` expand).
pub fn parse_policies(list: &str) -> Result<Vec<HitPolicy>, String> {
    let mut out: Vec<HitPolicy> = Vec::new();
    for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let add: Vec<HitPolicy> = match item.to_ascii_lowercase().as_str() {
            "all" => HitPolicy::all(),
            "sa" | "sa-all" => PolicyKind::ALL.into_iter().map(HitPolicy::Sa).collect(),
            "global" => GlobalKind::ALL.into_iter().map(HitPolicy::Global).collect(),
            _ => vec![item.parse()?],
        };
        for p in add {
            if !out.contains(&p) {
                out.push(p);
            }
        }
    }
    if out.is_empty() {
        return Err("no policy given".into());
    }
    Ok(out)
}

/// The outcome of one simulation (made by [`simulate`] only: fields may be
/// added).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct HitResult {
    /// The policy.
    pub policy: HitPolicy,
    /// Pages per set (set-associative policies only).
    pub set_size: Option<usize>,
    /// The cache size asked for, in pages. A set-associative cache has
    /// `cache_pages / set_size` sets (rounded down), rounded down again to a
    /// multiple of `partitions`.
    pub cache_pages: usize,
    /// Hits among the counted requests (after the warm-up).
    pub hits: u64,
    /// Requests counted (after the warm-up).
    pub counted: u64,
    /// Hits over the whole trace.
    pub hits_full: u64,
    /// Requests in the whole trace.
    pub requests: u64,
    /// Wall time of the replay, in seconds.
    pub seconds: f64,
    /// The partitions the set-associative cache's sets were divided into
    /// (1 for the shared cache and for the global policies).
    pub partitions: usize,
}

impl HitResult {
    /// The pages the cache really had: a set-associative cache holds whole
    /// sets, `cache_pages` rounded down to a multiple of the set size, and
    /// its sets rounded down to a multiple of its partitions.
    pub fn pages_simulated(&self) -> usize {
        match self.set_size {
            Some(s) if s > 0 => sets_in(self.cache_pages, s, self.partitions) * s,
            _ => self.cache_pages,
        }
    }

    /// Hits over counted requests.
    pub fn hit_ratio(&self) -> f64 {
        ratio(self.hits, self.counted)
    }

    /// Hits over all requests.
    pub fn hit_ratio_full(&self) -> f64 {
        ratio(self.hits_full, self.requests)
    }

    /// Requests replayed per second.
    pub fn requests_per_second(&self) -> f64 {
        if self.seconds > 0.0 {
            self.requests as f64 / self.seconds
        } else {
            0.0
        }
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 { 0.0 } else { a as f64 / b as f64 }
}

/// The number of requests that warm the cache: `fraction` of the trace.
pub fn warm_requests(len: usize, fraction: f64) -> usize {
    ((len as f64 * fraction.clamp(0.0, 1.0)).round() as usize).min(len)
}

/// The memory, in bytes, that the simulator plans to stay within: what this
/// process could still get ([`crate::cache::memory_room`]: the machine's available
/// memory and swap, and its memory cgroup's room), or less when the
/// machine's physical memory, the process's address-space or data limit
/// (`ulimit -v`, `ulimit -d`) or its cgroup's `memory.max` is lower. Sizes
/// that come from the user (trace lengths, cache sizes) are checked against
/// it before anything of that size is allocated.
pub fn memory_limit() -> u64 {
    let room = crate::util::room::memory_room().map_or(u64::MAX, |r| r.bytes);
    static_limit().min(room)
}

/// [`memory_limit`] without what the machine has free now: its physical
/// memory, the process's limits and its cgroup's `memory.max`.
fn static_limit() -> u64 {
    // SAFETY: sysconf only reads system constants.
    let (pages, page) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    let mut limit = if pages > 0 && page > 0 {
        (pages as u64).saturating_mul(page as u64)
    } else {
        u64::MAX
    };
    for resource in [libc::RLIMIT_AS, libc::RLIMIT_DATA] {
        let mut r = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes the struct it is given.
        if unsafe { libc::getrlimit(resource, &mut r) } == 0 && r.rlim_cur != libc::RLIM_INFINITY {
            limit = limit.min(r.rlim_cur);
        }
    }
    limit.min(cgroup_memory_max())
}

/// The smallest `memory.max` of this process's cgroup (v2) and its
/// ancestors; `u64::MAX` when none is set or readable.
fn cgroup_memory_max() -> u64 {
    let Ok(text) = std::fs::read_to_string("/proc/self/cgroup") else {
        return u64::MAX;
    };
    let Some(rel) = text.lines().find_map(|l| l.strip_prefix("0::")) else {
        return u64::MAX;
    };
    let mut dir = std::path::Path::new("/sys/fs/cgroup").join(rel.trim_start_matches('/'));
    let mut limit = u64::MAX;
    loop {
        if let Ok(v) = std::fs::read_to_string(dir.join("memory.max"))
            && let Ok(n) = v.trim().parse::<u64>()
        {
            limit = limit.min(n);
        }
        if dir == std::path::Path::new("/sys/fs/cgroup") || !dir.pop() {
            return limit;
        }
    }
}

/// `bytes` for a message: "1.5 GiB", "300 B".
pub fn show_bytes(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut v = bytes as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1} {}", UNITS[unit])
}

/// The bytes the replay of `policy` allocates besides the trace, for a
/// cache of `cache_pages` pages, sets of `set_size` pages (set-associative
/// policies), a trace of `requests` requests over `universe` pages. An
/// estimate from above; saturates instead of overflowing.
pub fn model_bytes(
    policy: HitPolicy,
    cache_pages: usize,
    set_size: usize,
    universe: usize,
    requests: usize,
) -> u64 {
    match policy {
        HitPolicy::Sa(kind) => {
            let set_size = set_size.max(1);
            let slots = set_size + kind.ghosts(set_size);
            // SaModel: a tag per slot and ghost, and a metadata record
            // (head, a byte per slot and ghost) rounded up to a power of two.
            let per_set = slots as u64 * 8 + (8 + slots as u64).next_power_of_two();
            ((cache_pages / set_size) as u64).saturating_mul(per_set)
        }
        HitPolicy::Global(kind) => global::bytes(kind, cache_pages, universe, requests),
    }
}

/// Checks that `trace` can be replayed through `policy` with a cache of
/// `cache_pages` pages and sets of `set_size` pages: the arguments
/// [`simulate`] needs, and the memory the replay would allocate against
/// [`memory_limit`].
///
/// # Errors
///
/// A set size outside 4..=32 for a set-associative policy, a cache smaller
/// than one set, a cache of no page, or a replay that needs more memory than
/// this machine allows.
pub fn check(
    trace: &Trace,
    policy: HitPolicy,
    cache_pages: usize,
    set_size: usize,
) -> Result<(), String> {
    if cache_pages == 0 {
        return Err("the cache must hold at least one page".into());
    }
    if policy.is_sa() {
        if !(MIN_ASSOC..=MAX_ASSOC).contains(&set_size) {
            return Err(format!(
                "set size {set_size} is outside {MIN_ASSOC}..={MAX_ASSOC}"
            ));
        }
        if cache_pages < set_size {
            return Err(format!(
                "a cache of {cache_pages} pages is smaller than one set of {set_size}"
            ));
        }
    }
    let model = model_bytes(policy, cache_pages, set_size, trace.footprint, trace.len());
    let held = trace.bytes();
    // The trace is in memory already (what is free now does not count it).
    let limit = memory_limit().saturating_add(held).min(static_limit());
    if model.saturating_add(held) > limit {
        let what = if policy.is_sa() {
            format!("{policy} (sets of {set_size})")
        } else {
            policy.to_string()
        };
        return Err(format!(
            "{what} with a cache of {cache_pages} pages needs about {} for its metadata, \
             besides the {} the trace holds; this machine allows {}",
            show_bytes(model),
            show_bytes(held),
            show_bytes(limit)
        ));
    }
    Ok(())
}

/// The sets of a set-associative cache of `cache_pages` pages in sets of
/// `set_size`, divided among `partitions`: rounded down to a multiple of
/// them, as the cache rounds its table.
fn sets_in(cache_pages: usize, set_size: usize, partitions: usize) -> usize {
    let p = partitions.max(1);
    cache_pages / set_size / p * p
}

/// Checks that a set-associative cache of `cache_pages` pages in sets of
/// `set_size` can be divided among `partitions` partitions (1 to
/// [`MAX_PARTITIONS`](crate::cache::MAX_PARTITIONS), at least one set each).
///
/// # Errors
///
/// A count outside that range, or a cache with fewer sets than partitions.
pub fn check_partitions(
    cache_pages: usize,
    set_size: usize,
    partitions: usize,
) -> Result<(), String> {
    if !(1..=crate::cache::MAX_PARTITIONS).contains(&partitions) {
        return Err(format!(
            "{partitions} partitions: give 1 to {}",
            crate::cache::MAX_PARTITIONS
        ));
    }
    let sets = cache_pages / set_size.max(1);
    if sets < partitions {
        return Err(format!(
            "a cache of {cache_pages} pages has {sets} sets of {set_size}, fewer than its \
             {partitions} partitions"
        ));
    }
    Ok(())
}

/// Replays `trace` through `policy` with a cache of `cache_pages` pages
/// (of `page_size` bytes; only the `linux` policy looks at bytes), sets of
/// `set_size` pages for a set-associative policy, the first `warmup`
/// fraction of the requests uncounted.
///
/// # Errors
///
/// What [`check`] refuses: a set size outside 4..=32 for a set-associative
/// policy, a cache smaller than one set, a cache of no page, or a replay
/// that needs more memory than this machine allows.
pub fn simulate(
    trace: &Trace,
    policy: HitPolicy,
    cache_pages: usize,
    set_size: usize,
    page_size: u64,
    warmup: f64,
) -> Result<HitResult, String> {
    simulate_partitioned(trace, policy, cache_pages, set_size, 1, page_size, warmup)
}

/// [`simulate`] with a set-associative cache's sets divided among
/// `partitions` partitions, as a cache made with
/// [`CacheOptions::partitions`](crate::cache::CacheOptions::partitions) divides
/// them: the sets rounded down to a multiple of the partitions, and each
/// page's two candidate sets in its partition. The global policies ignore it.
///
/// # Errors
///
/// As [`simulate`], and what [`check_partitions`] refuses for a
/// set-associative policy.
pub fn simulate_partitioned(
    trace: &Trace,
    policy: HitPolicy,
    cache_pages: usize,
    set_size: usize,
    partitions: usize,
    page_size: u64,
    warmup: f64,
) -> Result<HitResult, String> {
    check(trace, policy, cache_pages, set_size)?;
    let partitions = if policy.is_sa() {
        check_partitions(cache_pages, set_size, partitions)?;
        partitions
    } else {
        1
    };
    let warm = warm_requests(trace.len(), warmup);
    let start = Instant::now();
    let (hits, hits_full, set) = match policy {
        HitPolicy::Sa(kind) => {
            let n_sets = sets_in(cache_pages, set_size, partitions);
            let mut m = SaModel::partitioned(kind, set_size, n_sets, partitions);
            let (a, b) = trace.pages.split_at(warm);
            let early = m.replay(a.iter().map(|&p| u64::from(p)));
            let late = m.replay(b.iter().map(|&p| u64::from(p)));
            (late, early + late, Some(set_size))
        }
        HitPolicy::Global(kind) => {
            let (late, full) = global::run(
                kind,
                cache_pages,
                page_size,
                &trace.pages,
                trace.footprint,
                warm,
            );
            (late, full, None)
        }
    };
    Ok(HitResult {
        policy,
        set_size: set,
        cache_pages,
        hits,
        counted: (trace.len() - warm) as u64,
        hits_full,
        requests: trace.len() as u64,
        seconds: start.elapsed().as_secs_f64(),
        partitions,
    })
}

/// The `--json` document: the trace, its size, and one object per run (with
/// `partitions` when the run's sets were divided, and `pages_simulated` when
/// its sets hold fewer pages than `cache_pages` asked for: whole sets only).
pub fn to_json(trace: &Trace, results: &[HitResult]) -> serde_json::Value {
    let rows: Vec<serde_json::Value> = results
        .iter()
        .map(|r| {
            let mut row = serde_json::json!({
                "policy": r.policy.to_string(),
                "set_size": r.set_size,
                "cache_pages": r.cache_pages,
                "hit_ratio": r.hit_ratio(),
                "hit_ratio_full": r.hit_ratio_full(),
                "seconds": r.seconds,
            });
            // Named only for a divided cache: a shared one's rows keep their shape.
            if r.partitions > 1 {
                row["partitions"] = r.partitions.into();
            }
            if r.pages_simulated() != r.cache_pages {
                row["pages_simulated"] = r.pages_simulated().into();
            }
            row
        })
        .collect();
    serde_json::json!({
        "trace": trace.name,
        "requests": trace.len(),
        "footprint_pages": trace.footprint,
        "results": rows,
    })
}

#[cfg(test)]
mod tests;

/// Trace files for the tests: a temporary file, removed when dropped.
#[cfg(test)]
pub(crate) struct TempFile(pub(crate) std::path::PathBuf);

#[cfg(test)]
impl TempFile {
    /// A fresh file holding `bytes` straight in the temporary directory (so
    /// that nothing is left once it is gone), its name ending in `name`,
    /// whose extension the trace readers go by.
    pub(crate) fn with(name: &str, bytes: &[u8]) -> TempFile {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let path =
            std::env::temp_dir().join(format!("setcache-sim-{}-{n}-{name}", std::process::id()));
        std::fs::write(&path, bytes).unwrap();
        TempFile(path)
    }
}

#[cfg(test)]
impl std::ops::Deref for TempFile {
    type Target = std::path::Path;
    fn deref(&self) -> &std::path::Path {
        &self.0
    }
}

#[cfg(test)]
impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}
