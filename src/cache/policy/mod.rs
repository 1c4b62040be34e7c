//! Per-set replacement policies.
//!
//! A policy never owns memory. The page set (or the simulator's model of one)
//! owns, for each of its `assoc` slots, one policy byte, plus one 32-bit policy
//! word for the whole set and an optional small array of ghost entries. A
//! policy reads and writes only those, through [`SetState`]. That is what lets
//! the cache (under the set's lock) and the simulator (with no lock and no
//! frames) run the very same policy code.
//!
//! Eligibility is passed as a bit mask over slots (bit `i` = slot `i`), so the
//! cache decides what may be evicted (valid, not pinned, no I/O in flight, and
//! clean on the first sweep) and the policy decides only the order.
//!
//! # Policies
//!
//! Each policy is a zero-sized type in a module of its own, whose
//! documentation says how the policy uses the per-slot bytes, the set word and
//! the ghosts, and how it was adapted to a set of 4 to 32 slots:
//!
//! | [`PolicyKind`] | type      | slot byte                  | set word     | ghosts per set            |
//! |----------------|-----------|----------------------------|--------------|---------------------------|
//! | `lru`          | [`Lru`]   | recency rank               | unused       | none                      |
//! | `lfu`          | [`Lfu`]   | access counter             | tie cursor   | none                      |
//! | `fifo`         | [`Fifo`]  | insertion rank             | unused       | none                      |
//! | `clock`        | [`Clock`] | reference bit              | hand         | none                      |
//! | `gclock`       | [`Gclock`]| counter, 0..=3             | hand         | none                      |
//! | `nrlfu`        | [`NrLfu`] | access counter             | tie cursor   | `assoc / 2`, tag + counter|
//! | `sieve`        | [`Sieve`] | rank + visited bit         | hand         | none                      |
//! | `s3fifo`       | [`S3Fifo`]| rank + queue bit + freq    | unused       | `assoc - small`, tag only |
//!
//! A ghost entry costs 9 bytes (a tag and a byte), so a set never needs more
//! than `9 * assoc` bytes of ghosts (`ghosts(assoc) <= assoc`): 54 bytes for a
//! 12-slot NR-LFU set, 99 for a 12-slot S3-FIFO set.
//!
//! [`PolicyKind`] selects a policy at run time without a trait object;
//! [`SetModel`] and [`SaModel`] run the policies without a page cache around
//! them (for tests and for hit-rate simulation of traces).

/// Largest number of slots in one set.
pub const MAX_ASSOC: usize = 32;
/// Smallest number of slots in one set.
pub const MIN_ASSOC: usize = 4;

/// The policy state of one set, borrowed from whoever owns the set.
#[derive(Debug)]
pub struct SetState<'a> {
    /// One byte per slot (`len() == assoc`). Meaning is private to the policy.
    pub bytes: &'a mut [u8],
    /// One word for the whole set (a clock hand, an insertion counter...).
    pub word: &'a mut u32,
    /// Ghost (non-resident) tags; `len()` is what [`Policy::ghosts`] asked for.
    /// The value [`NO_TAG`] marks an empty ghost entry.
    pub ghost_tags: &'a mut [u64],
    /// One byte per ghost entry.
    pub ghost_bytes: &'a mut [u8],
    /// The cache's shared duel state (only the adaptive policy uses it).
    pub duel: &'a Duel,
}

/// A duel that no set takes part in, for owners of sets whose policy is not
/// adaptive (and for tests).
pub static IDLE_DUEL: Duel = Duel::idle();

/// A full set's answer to a miss ([`Policy::admits`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admit {
    /// The page is not kept here.
    No,
    /// The page may replace this set's victim.
    Yes,
    /// The page is remembered here (a ghost hit): it replaces this set's
    /// victim rather than the other set's.
    Here,
}

/// Tag value that never names a page; marks empty ghost entries.
pub const NO_TAG: u64 = u64::MAX;

/// A replacement policy for one set of at most [`MAX_ASSOC`] slots.
///
/// The owner calls, for every access of a resident page, [`Policy::on_hit`];
/// for a page placed into a slot, [`Policy::on_insert`] (after the slot's
/// previous page, if any, went through [`Policy::on_evict`]); and to choose a
/// victim, [`Policy::victim`] with a non-empty mask of eligible, valid slots.
/// One exception: a page that comes into the cache cold (read ahead, or a
/// stream's miss) in place of a cold page nobody used is a swap the policy
/// is not told of; the new page takes the old one's state as it stands.
/// A slot that becomes empty without eviction (a page dropped by a file
/// truncation, or moved out by a resize) goes through [`Policy::on_remove`].
pub trait Policy {
    /// Number of ghost entries this policy keeps for a set of `assoc` slots.
    fn ghosts(&self, assoc: usize) -> usize {
        let _ = assoc;
        0
    }
    /// Fresh state for the empty set of index `set` (no policy looks at the
    /// index now; the adaptive one sets the set's candidate from its duel).
    fn reset_set(&self, st: &mut SetState<'_>, set: usize) {
        let _ = set;
        self.reset(st);
    }
    /// Fresh state for an empty set.
    fn reset(&self, st: &mut SetState<'_>) {
        st.bytes.fill(0);
        *st.word = 0;
        st.ghost_tags.fill(NO_TAG);
        st.ghost_bytes.fill(0);
    }
    /// A resident page in `slot` was accessed. `valid` is the mask of valid
    /// slots (some policies keep an order among the valid slots).
    fn on_hit(&self, st: &mut SetState<'_>, slot: usize, valid: u32);
    /// [`Policy::on_hit`] for the page `tag`: what owners call, so that a
    /// policy that learns from the pages themselves (the adaptive policy's
    /// sampled sets) sees which page it was.
    fn on_hit_tag(&self, st: &mut SetState<'_>, slot: usize, tag: u64, valid: u32) {
        let _ = tag;
        self.on_hit(st, slot, valid);
    }
    /// Whether [`Policy::on_hit`] on a slot whose byte is `byte` could change
    /// the set's state. False lets a lock-free reader skip the set's lock (and
    /// so write nothing shared) on a hit that would change nothing, such as a
    /// second hit on a page whose CLOCK bit is already set. Must never return
    /// false for a hit that would change something.
    fn hit_changes(&self, byte: u8) -> bool {
        let _ = byte;
        true
    }
    /// Page `tag` was placed into the empty `slot`. `valid` is the mask of
    /// valid slots *before* this insertion. Returns true when the page was
    /// found among the ghosts (a ghost hit).
    fn on_insert(&self, st: &mut SetState<'_>, slot: usize, tag: u64, valid: u32) -> bool;
    /// Choose a victim among the slots in `eligible` (non-empty, a subset of
    /// `valid`). May age other slots as a side effect (a clock sweep).
    fn victim(&self, st: &mut SetState<'_>, eligible: u32, valid: u32) -> usize;
    /// The page `tag` in `slot` is being evicted (the slot becomes empty).
    /// `valid` still includes `slot`. By default an eviction is a removal
    /// ([`Policy::on_remove`]): the policy keeps no ghost of the page.
    fn on_evict(&self, st: &mut SetState<'_>, slot: usize, tag: u64, valid: u32) {
        let _ = tag;
        self.on_remove(st, slot, valid);
    }
    /// Whether a miss of page `tag` may take a slot of this set, which is
    /// full (`valid`: every slot), and whether the page must come here.
    /// Asked of both of a page's sets; when neither admits it, the miss is
    /// served without a slot and [`Policy::on_pass`] tells the first set.
    fn admits(&self, st: &mut SetState<'_>, tag: u64, valid: u32) -> Admit {
        let _ = (st, tag, valid);
        Admit::Yes
    }
    /// The page `tag`, which no set admitted, was served without a slot.
    fn on_pass(&self, st: &mut SetState<'_>, tag: u64, valid: u32) {
        let _ = (st, tag, valid);
    }
    /// The page in `slot` leaves the set without being a victim (no ghost).
    fn on_remove(&self, st: &mut SetState<'_>, slot: usize, valid: u32) {
        let _ = valid;
        st.bytes[slot] = 0;
    }
}

/// Evaluates `$call` with `$p` bound to the zero-sized policy type of the
/// [`PolicyKind`] `$kind`: one `match`, after which the code is monomorphic.
/// Defined before the submodules so that they can use it too.
macro_rules! dispatch {
    ($kind:expr, $p:ident => $call:expr) => {
        match $kind {
            $crate::cache::policy::PolicyKind::Lru => {
                let $p = $crate::cache::policy::Lru;
                $call
            }
            $crate::cache::policy::PolicyKind::Lfu => {
                let $p = $crate::cache::policy::Lfu;
                $call
            }
            $crate::cache::policy::PolicyKind::Fifo => {
                let $p = $crate::cache::policy::Fifo;
                $call
            }
            $crate::cache::policy::PolicyKind::Clock => {
                let $p = $crate::cache::policy::Clock;
                $call
            }
            $crate::cache::policy::PolicyKind::Gclock => {
                let $p = $crate::cache::policy::Gclock;
                $call
            }
            $crate::cache::policy::PolicyKind::NrLfu => {
                let $p = $crate::cache::policy::NrLfu;
                $call
            }
            $crate::cache::policy::PolicyKind::Sieve => {
                let $p = $crate::cache::policy::Sieve;
                $call
            }
            $crate::cache::policy::PolicyKind::S3Fifo => {
                let $p = $crate::cache::policy::S3Fifo;
                $call
            }
            $crate::cache::policy::PolicyKind::Lirs => {
                let $p = $crate::cache::policy::Lirs;
                $call
            }
            $crate::cache::policy::PolicyKind::Adaptive => {
                let $p = $crate::cache::policy::Adaptive;
                $call
            }
        }
    };
}

pub mod adaptive;
pub mod clock;
mod common;
pub mod fifo;
pub mod gclock;
pub mod lfu;
pub mod lirs;
pub mod lru;
mod model;
pub mod nrlfu;
pub mod s3fifo;
pub mod sieve;

pub use adaptive::{Adaptive, Duel};
pub use clock::Clock;
pub(crate) use common::low_mask;
pub use fifo::Fifo;
pub use gclock::{GCLOCK_MAX, Gclock};
pub use lfu::Lfu;
pub use lirs::Lirs;
pub use lru::Lru;
pub use model::{Access, SaModel, SetModel};
pub use nrlfu::NrLfu;
pub use s3fifo::{S3Fifo, S3FifoDuel, S3FifoReset};
pub use sieve::Sieve;

use std::fmt;
use std::str::FromStr;

/// The replacement policies, as a plain value: an enum that implements
/// [`Policy`] by dispatching to the zero-sized policy types, so callers can
/// choose a policy at run time without a trait object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PolicyKind {
    /// Exact least-recently-used order ([`Lru`]).
    Lru,
    /// Least frequently used with 1-byte counters ([`Lfu`]).
    Lfu,
    /// First in, first out ([`Fifo`]).
    Fifo,
    /// Second-chance clock ([`Clock`]).
    Clock,
    /// Generalized clock with small counters ([`Gclock`]).
    Gclock,
    /// LFU with counters kept for recently evicted pages ([`NrLfu`]).
    NrLfu,
    /// SIEVE ([`Sieve`]).
    Sieve,
    /// S3-FIFO ([`S3Fifo`]).
    S3Fifo,
    /// LIRS ([`Lirs`]).
    Lirs,
    /// LRU, SIEVE, LIRS or S3-FIFO, whichever sampled sets show the workload
    /// rewards ([`Adaptive`]): the default.
    Adaptive,
}

impl PolicyKind {
    /// Every policy, in declaration order.
    pub const ALL: [PolicyKind; 10] = [
        PolicyKind::Lru,
        PolicyKind::Lfu,
        PolicyKind::Fifo,
        PolicyKind::Clock,
        PolicyKind::Gclock,
        PolicyKind::NrLfu,
        PolicyKind::Sieve,
        PolicyKind::S3Fifo,
        PolicyKind::Lirs,
        PolicyKind::Adaptive,
    ];

    /// The policy a cache runs unless told otherwise (`"default"` names it).
    pub const DEFAULT: PolicyKind = PolicyKind::Adaptive;

    /// The short lower-case name, as accepted by [`FromStr`].
    pub const fn name(self) -> &'static str {
        match self {
            PolicyKind::Lru => "lru",
            PolicyKind::Lfu => "lfu",
            PolicyKind::Fifo => "fifo",
            PolicyKind::Clock => "clock",
            PolicyKind::Gclock => "gclock",
            PolicyKind::NrLfu => "nrlfu",
            PolicyKind::Sieve => "sieve",
            PolicyKind::S3Fifo => "s3fifo",
            PolicyKind::Lirs => "lirs",
            PolicyKind::Adaptive => "adaptive",
        }
    }
}

impl fmt::Display for PolicyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The error of parsing a [`PolicyKind`] from an unknown name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParsePolicyKindError {
    value: String,
}

impl ParsePolicyKindError {
    /// The string that named no policy.
    pub fn value(&self) -> &str {
        &self.value
    }
}

impl fmt::Display for ParsePolicyKindError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown replacement policy {:?}; valid policies are ",
            self.value
        )?;
        for (i, kind) in PolicyKind::ALL.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            f.write_str(kind.name())?;
        }
        f.write_str(", or default (optionally prefixed with \"sa-\")")
    }
}

impl std::error::Error for ParsePolicyKindError {}

impl FromStr for PolicyKind {
    type Err = ParsePolicyKindError;

    /// Parses a policy name (`"lru"`, ..., `"adaptive"`, or `"default"` for
    /// [`PolicyKind::DEFAULT`]), case-insensitively and with or without an
    /// `sa-` prefix (`"sa-lfu"`).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let trimmed = s.trim();
        let lower = trimmed.to_ascii_lowercase();
        let bare = lower.strip_prefix("sa-").unwrap_or(&lower);
        if bare == "default" {
            return Ok(PolicyKind::DEFAULT);
        }
        PolicyKind::ALL
            .into_iter()
            .find(|kind| kind.name() == bare)
            .ok_or_else(|| ParsePolicyKindError {
                value: s.to_owned(),
            })
    }
}

impl Policy for PolicyKind {
    #[inline]
    fn ghosts(&self, assoc: usize) -> usize {
        dispatch!(self, p => p.ghosts(assoc))
    }
    fn admits(&self, st: &mut SetState<'_>, tag: u64, valid: u32) -> Admit {
        dispatch!(self, p => p.admits(st, tag, valid))
    }
    fn on_pass(&self, st: &mut SetState<'_>, tag: u64, valid: u32) {
        dispatch!(self, p => p.on_pass(st, tag, valid))
    }
    #[inline]
    fn reset_set(&self, st: &mut SetState<'_>, set: usize) {
        dispatch!(self, p => p.reset_set(st, set))
    }
    #[inline]
    fn reset(&self, st: &mut SetState<'_>) {
        dispatch!(self, p => p.reset(st))
    }
    #[inline]
    fn on_hit(&self, st: &mut SetState<'_>, slot: usize, valid: u32) {
        dispatch!(self, p => p.on_hit(st, slot, valid))
    }
    #[inline]
    fn on_hit_tag(&self, st: &mut SetState<'_>, slot: usize, tag: u64, valid: u32) {
        dispatch!(self, p => p.on_hit_tag(st, slot, tag, valid))
    }
    #[inline]
    fn hit_changes(&self, byte: u8) -> bool {
        dispatch!(self, p => p.hit_changes(byte))
    }
    #[inline]
    fn on_insert(&self, st: &mut SetState<'_>, slot: usize, tag: u64, valid: u32) -> bool {
        dispatch!(self, p => p.on_insert(st, slot, tag, valid))
    }
    #[inline]
    fn victim(&self, st: &mut SetState<'_>, eligible: u32, valid: u32) -> usize {
        dispatch!(self, p => p.victim(st, eligible, valid))
    }
    #[inline]
    fn on_evict(&self, st: &mut SetState<'_>, slot: usize, tag: u64, valid: u32) {
        dispatch!(self, p => p.on_evict(st, slot, tag, valid))
    }
    #[inline]
    fn on_remove(&self, st: &mut SetState<'_>, slot: usize, valid: u32) {
        dispatch!(self, p => p.on_remove(st, slot, valid))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for kind in PolicyKind::ALL {
            assert_eq!(kind.name().parse::<PolicyKind>(), Ok(kind));
            assert_eq!(format!("sa-{kind}").parse::<PolicyKind>(), Ok(kind));
            assert_eq!(kind.name().to_uppercase().parse::<PolicyKind>(), Ok(kind));
        }
        assert_eq!("SA-NRLFU".parse::<PolicyKind>(), Ok(PolicyKind::NrLfu));
        let names: Vec<&str> = PolicyKind::ALL.iter().map(|k| k.name()).collect();
        assert_eq!(
            names,
            [
                "lru", "lfu", "fifo", "clock", "gclock", "nrlfu", "sieve", "s3fifo", "lirs",
                "adaptive"
            ]
        );
    }

    #[test]
    fn bad_name_is_reported_with_the_valid_ones() {
        let err = "arc".parse::<PolicyKind>().unwrap_err();
        assert_eq!(err.value(), "arc");
        let msg = err.to_string();
        assert!(msg.contains("\"arc\""), "{msg}");
        for kind in PolicyKind::ALL {
            assert!(msg.contains(kind.name()), "{msg}");
        }
        assert!("sa-".parse::<PolicyKind>().is_err());
        assert!("".parse::<PolicyKind>().is_err());
        assert!("lru2".parse::<PolicyKind>().is_err());
    }

    #[test]
    fn ghost_counts() {
        for assoc in MIN_ASSOC..=MAX_ASSOC {
            for kind in PolicyKind::ALL {
                let g = kind.ghosts(assoc);
                assert!(g <= assoc, "{kind} keeps {g} ghosts for {assoc} slots");
                match kind {
                    PolicyKind::NrLfu => assert_eq!(g, assoc / 2),
                    PolicyKind::S3Fifo => assert!(g > 0),
                    PolicyKind::Lirs | PolicyKind::Adaptive => {
                        assert_eq!(g, (assoc / 2).min(32 - assoc))
                    }
                    _ => assert_eq!(g, 0),
                }
            }
        }
        assert_eq!(PolicyKind::S3Fifo.ghosts(12), 11);
        assert_eq!(PolicyKind::NrLfu.ghosts(12), 6);
    }

    /// Runs 20,000 random accesses of 24 pages through one set of 8 slots
    /// under `p` and `duel`, and checks that every hit `hit_changes` calls
    /// a no-op leaves every byte, the word and the ghosts as they were.
    /// Returns the set word at the end and the number of such hits.
    pub(super) fn no_op_hits<P: Policy>(p: &P, duel: &Duel, what: &str) -> (u32, usize) {
        let assoc = 8;
        let ghosts = p.ghosts(assoc);
        let (mut bytes, mut word) = (vec![0u8; assoc], 0u32);
        let (mut gtags, mut gbytes) = (vec![NO_TAG; ghosts], vec![0u8; ghosts]);
        let mut tags = vec![NO_TAG; assoc];
        let mut valid = 0u32;
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut noops = 0;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let tag = x % 24;
            let mut st = SetState {
                bytes: &mut bytes,
                word: &mut word,
                ghost_tags: &mut gtags,
                ghost_bytes: &mut gbytes,
                duel,
            };
            if let Some(i) = tags.iter().position(|&t| t == tag) {
                let before = (st.bytes.to_vec(), *st.word, st.ghost_tags.to_vec());
                let noop = !p.hit_changes(st.bytes[i]);
                p.on_hit(&mut st, i, valid);
                if noop {
                    noops += 1;
                    let after = (st.bytes.to_vec(), *st.word, st.ghost_tags.to_vec());
                    assert_eq!(
                        before, after,
                        "{what}: a hit called a no-op changed the set"
                    );
                }
                continue;
            }
            let i = match (0..assoc).find(|&i| valid & (1 << i) == 0) {
                Some(i) => i,
                None => {
                    let v = p.victim(&mut st, valid, valid);
                    p.on_evict(&mut st, v, tags[v], valid);
                    valid &= !(1 << v);
                    v
                }
            };
            p.on_insert(&mut st, i, tag, valid);
            valid |= 1 << i;
            tags[i] = tag;
        }
        (word, noops)
    }

    /// A hit that `hit_changes` calls a no-op leaves every byte, the word and
    /// the ghosts as they were, in every state a random run reaches.
    #[test]
    fn hits_called_no_ops_change_nothing() {
        for kind in PolicyKind::ALL {
            let (_, noops) = no_op_hits(&kind, &IDLE_DUEL, kind.name());
            if kind != PolicyKind::Lfu && kind != PolicyKind::NrLfu {
                assert!(noops > 0, "{kind}: no hit was ever a no-op");
            }
        }
    }
}
