//! The adaptive policy: set dueling among LRU, SIEVE and LIRS, each set run by
//! whichever of them serves the workload best.
//!
//! No single policy wins everywhere: LRU wins on recency-friendly access and
//! on loops that change direction, SIEVE where popularity is skewed and
//! one-hit wonders abound, LIRS on loops and scans larger than the cache. The
//! adaptive policy learns which one the workload rewards with the set dueling
//! of processor caches (Qureshi et al., "Adaptive insertion policies for high
//! performance caching", ISCA 2007), extended to three candidates:
//!
//! - A few *leader* sets always run one candidate each ([`Duel::role`]: of
//!   every `spacing` consecutive sets, 64 or fewer in a small cache, one leads
//!   for each candidate). A leader counts its hits in its set word and, at
//!   each miss that evicts (a fill of an empty slot tells the candidates
//!   nothing apart), adds them and the miss to its candidate's counts in the
//!   cache's [`Duel`]. The counts halve when one candidate's accesses reach
//!   [`DECAY_AT`], so the choice follows the recent past.
//! - The candidate whose leaders miss least often (misses over accesses) is
//!   the winner, with hysteresis: a challenger takes over only with a miss
//!   ratio 3 points (8/256) below the holder's. LIRS holds at the start.
//! - Every other set (a *follower*) runs the winner. A follower notices a new
//!   winner at its next miss and then rebuilds its state for it: the state is
//!   reset and its resident pages are entered in slot order, as if just
//!   inserted. Switches are rare (hysteresis), so the lost order costs little.
//!
//! Only misses read or write the shared counts; a hit touches nothing outside
//! its set. A follower running LRU or LIRS defers its hits: a hit sets bit 7
//! of the page's byte (under the set's lock, once), and the set's next miss
//! applies the deferred hits in the order of the pages' ranks before choosing
//! a victim. Later hits on a page whose bit 7 is set change nothing and take
//! no lock, as with SIEVE's visited bit. Leaders apply and count every hit.
//!
//! # State
//!
//! The set word: the candidate that the set's state belongs to in bits 28..30,
//! the set's role in bits 30..32 (0 follower, `1 + k` leader of candidate
//! `k`), a leader's hits since its last miss in bits 6..28, and the
//! candidate's own word in the low 6 bits (SIEVE's hand). The slot bytes are
//! the candidate's in bits 0..7 (SIEVE's visited bit moved from bit 7 to bit
//! 6), and bit 7 means "a hit changes nothing" (a deferred hit, or a visited
//! page in a SIEVE follower), so that [`Policy::hit_changes`] can answer from
//! the byte alone. The ghost entries are LIRS's.

use std::sync::atomic::{AtomicU8, AtomicU32, Ordering::Relaxed};

use super::common::for_each_slot;
use super::{Lirs, Lru, NO_TAG, Policy, SetState, Sieve};

/// Number of candidate policies.
pub const CANDIDATES: usize = 3;
/// The candidates' names, in candidate order.
pub const CANDIDATE_NAMES: [&str; CANDIDATES] = ["lru", "sieve", "lirs"];

/// The candidate the followers run until the leaders say otherwise.
const START: u8 = 2;
/// A challenger takes over when its miss ratio is below the holder's by this
/// many 256ths (3 points).
const MARGIN: u64 = 8;

/// The access count at which all counts halve.
pub const DECAY_AT: u32 = 1 << 16;

/// A slot byte's "a hit changes nothing" flag: a deferred hit, or a visited
/// page in a SIEVE follower.
const HOT: u8 = 0x80;
/// SIEVE's candidate number.
const SIEVE: usize = 1;
const ARM_SHIFT: u32 = 28;
const ROLE_SHIFT: u32 = 30;
/// The candidate's own word: SIEVE's hand, at most 32 + 1.
const OWN_MASK: u32 = (1 << HITS_SHIFT) - 1;
/// A leader set's hits since its last miss, in bits 6..28.
const HITS_SHIFT: u32 = 6;
const HITS_MAX: u32 = (1 << (ARM_SHIFT - HITS_SHIFT)) - 1;

/// The shared state of the duel of one cache: the candidates' miss and
/// access counts in their leader sets, and the winner. Written only at
/// misses in leader sets.
#[derive(Debug)]
#[repr(align(64))]
pub struct Duel {
    /// Of every `spacing` consecutive sets, one leads for each candidate.
    spacing: usize,
    misses: [AtomicU32; CANDIDATES],
    /// Accesses (hits and misses) in each candidate's leader sets.
    accesses: [AtomicU32; CANDIDATES],
    winner: AtomicU8,
}

impl Clone for Duel {
    fn clone(&self) -> Duel {
        Duel {
            spacing: self.spacing,
            misses: std::array::from_fn(|k| AtomicU32::new(self.misses[k].load(Relaxed))),
            accesses: std::array::from_fn(|k| AtomicU32::new(self.accesses[k].load(Relaxed))),
            winner: AtomicU8::new(self.winner.load(Relaxed)),
        }
    }
}

impl Duel {
    /// The duel of a cache of `sets` sets: one leader per candidate in every
    /// 64 sets, or among all of them when there are fewer than 64 (at least
    /// one follower stays).
    pub fn new(sets: usize) -> Duel {
        Duel {
            spacing: sets.clamp(CANDIDATES + 1, 64),
            misses: [const { AtomicU32::new(0) }; CANDIDATES],
            accesses: [const { AtomicU32::new(0) }; CANDIDATES],
            winner: AtomicU8::new(START),
        }
    }

    /// A duel with no leaders' say (for tests of other policies): every set
    /// follows candidate 0.
    pub const fn idle() -> Duel {
        Duel {
            spacing: usize::MAX,
            misses: [const { AtomicU32::new(0) }; CANDIDATES],
            accesses: [const { AtomicU32::new(0) }; CANDIDATES],
            winner: AtomicU8::new(0),
        }
    }

    /// The candidate that set `set` leads for, if it is a leader.
    pub fn role(&self, set: usize) -> Option<usize> {
        if self.spacing == usize::MAX {
            return None;
        }
        let at = set % self.spacing;
        (0..CANDIDATES).find(|&k| at == k * self.spacing / CANDIDATES)
    }

    /// The candidate the followers run now.
    #[inline]
    pub fn winner(&self) -> usize {
        usize::from(self.winner.load(Relaxed))
    }

    /// The leaders' miss counts, in candidate order.
    pub fn misses(&self) -> [u32; CANDIDATES] {
        std::array::from_fn(|k| self.misses[k].load(Relaxed))
    }

    /// The leaders' access counts, in candidate order.
    pub fn accesses(&self) -> [u32; CANDIDATES] {
        std::array::from_fn(|k| self.accesses[k].load(Relaxed))
    }

    /// A miss in a leader set of candidate `k`, after `hits` hits in it since
    /// its previous miss.
    fn note_miss(&self, k: usize, hits: u32) {
        self.misses[k].fetch_add(1, Relaxed);
        let n = self.accesses[k].fetch_add(hits + 1, Relaxed) + hits + 1;
        if n >= DECAY_AT {
            // Concurrent updates may be lost here; the counts are a trend.
            for c in self.misses.iter().chain(&self.accesses) {
                c.store(c.load(Relaxed) / 2, Relaxed);
            }
        }
        let m = self.misses();
        let a = self.accesses();
        // Miss ratio m/a, compared without division; no accesses yet counts
        // as all misses.
        let worse = |j: usize, k: usize, margin: u64| {
            let (mj, aj) = (u64::from(m[j]), u64::from(a[j]).max(1));
            let (mk, ak) = (u64::from(m[k]), u64::from(a[k]).max(1));
            // mj/aj > mk/ak + margin/256
            mj * ak * 256 > mk * aj * 256 + margin * aj * ak
        };
        let holder = self.winner();
        let mut best = holder;
        for j in 0..CANDIDATES {
            if worse(best, j, 0) {
                best = j;
            }
        }
        // A challenger must miss less often than the holder by a margin.
        if best != holder && worse(holder, best, MARGIN) {
            self.winner.store(best as u8, Relaxed);
        }
    }
}

/// The adaptive policy (see the [module documentation](self)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Adaptive;

/// Calls `$call` with `$p` bound to candidate `$k`'s policy.
macro_rules! with_arm {
    ($k:expr, $p:ident => $call:expr) => {
        match $k {
            0 => {
                let $p = Lru;
                $call
            }
            1 => {
                let $p = Sieve;
                $call
            }
            _ => {
                let $p = Lirs;
                $call
            }
        }
    };
}

/// The candidate whose state set word `w` holds.
#[inline]
fn arm(w: u32) -> usize {
    ((w >> ARM_SHIFT) & 3) as usize
}

/// The role in set word `w`: `Some(k)` for a leader of candidate `k`.
#[inline]
fn role(w: u32) -> Option<usize> {
    match w >> ROLE_SHIFT {
        0 => None,
        r => Some(r as usize - 1),
    }
}

/// Runs `f` on candidate `k`'s view of the set: its own word, and its
/// bytes without bit 7 (SIEVE's visited bit, kept in bit 6, moved to bit 7
/// where SIEVE keeps it); then restores the adaptive layout. For SIEVE in a
/// follower, bit 7 is then set on the visited pages of `valid` (the pages
/// resident afterwards), whose hits change nothing.
#[inline]
fn as_arm<R>(
    st: &mut SetState<'_>,
    k: usize,
    valid: u32,
    f: impl FnOnce(&mut SetState<'_>) -> R,
) -> R {
    let mut own = *st.word & OWN_MASK;
    for b in st.bytes.iter_mut() {
        *b = if k == SIEVE {
            (*b & 0x3f) | ((*b & 0x40) << 1)
        } else {
            *b & !HOT
        };
    }
    let r = {
        let mut view = SetState {
            bytes: &mut *st.bytes,
            word: &mut own,
            ghost_tags: &mut *st.ghost_tags,
            ghost_bytes: &mut *st.ghost_bytes,
            duel: st.duel,
        };
        f(&mut view)
    };
    *st.word = (*st.word & !OWN_MASK) | (own & OWN_MASK);
    if k == SIEVE {
        let follower = role(*st.word).is_none();
        for (i, b) in st.bytes.iter_mut().enumerate() {
            let visited = *b & 0x80 != 0;
            *b = (*b & 0x3f) | ((*b & 0x80) >> 1);
            if follower && visited && valid & (1 << i) != 0 {
                *b |= HOT;
            }
        }
    }
    r
}

/// Applies the hits a follower running LRU or LIRS deferred (bit 7 set), in
/// the order of the pages' ranks, the deepest first, so that the pages hit
/// keep their order among themselves on top; clears bit 7.
fn apply_deferred(st: &mut SetState<'_>, k: usize, valid: u32) {
    if k == SIEVE {
        return;
    }
    let mut hit = [0u8; 32];
    let mut n = 0;
    for_each_slot(valid, |i| {
        if st.bytes[i] & HOT != 0 {
            hit[n] = i as u8;
            n += 1;
        }
    });
    if n == 0 {
        return;
    }
    let bytes = &*st.bytes;
    hit[..n].sort_unstable_by_key(|&i| std::cmp::Reverse(bytes[usize::from(i)] & 0x1f));
    as_arm(st, k, valid, |v| {
        with_arm!(k, p => {
            for &i in &hit[..n] {
                p.on_hit(v, usize::from(i), valid);
            }
        })
    });
}

/// The candidate set `st` should run now; a follower whose state belongs to
/// another candidate is rebuilt for the winner first (`valid`: its pages).
fn settle(st: &mut SetState<'_>, valid: u32) -> usize {
    let w = *st.word;
    let want = match role(w) {
        Some(k) => k,
        None => st.duel.winner(),
    };
    if arm(w) != want {
        st.bytes.fill(0);
        st.ghost_tags.fill(NO_TAG);
        st.ghost_bytes.fill(0);
        *st.word = (w & !(OWN_MASK | (3 << ARM_SHIFT))) | ((want as u32) << ARM_SHIFT);
        as_arm(st, want, valid, |v| {
            with_arm!(want, p => {
                let mut before = 0;
                for_each_slot(valid, |i| {
                    // No ghosts are left, so no tag can be taken for one.
                    p.on_insert(v, i, 0, before);
                    before |= 1 << i;
                });
            })
        });
    }
    want
}

impl Policy for Adaptive {
    fn ghosts(&self, assoc: usize) -> usize {
        Lirs.ghosts(assoc)
    }

    fn reset_set(&self, st: &mut SetState<'_>, set: usize) {
        self.reset(st);
        let (arm, role) = match st.duel.role(set) {
            Some(k) => (k, k + 1),
            None => (st.duel.winner(), 0),
        };
        *st.word = ((role as u32) << ROLE_SHIFT) | ((arm as u32) << ARM_SHIFT);
    }

    #[inline]
    fn hit_changes(&self, byte: u8) -> bool {
        byte & HOT == 0
    }

    #[inline]
    fn on_hit(&self, st: &mut SetState<'_>, slot: usize, valid: u32) {
        if st.bytes[slot] & HOT != 0 {
            return;
        }
        let w = *st.word;
        let k = arm(w);
        if role(w).is_some() {
            // A leader applies every hit at once, and counts it.
            let hits = ((w >> HITS_SHIFT) & HITS_MAX)
                .saturating_add(1)
                .min(HITS_MAX);
            *st.word = (w & !(HITS_MAX << HITS_SHIFT)) | (hits << HITS_SHIFT);
        } else if k != SIEVE {
            // A follower running LRU or LIRS defers the hit to the set's next
            // miss: later hits on the page are then free.
            st.bytes[slot] |= HOT;
            return;
        }
        as_arm(
            st,
            k,
            valid,
            |v| with_arm!(k, p => p.on_hit(v, slot, valid)),
        );
    }

    fn on_insert(&self, st: &mut SetState<'_>, slot: usize, tag: u64, valid: u32) -> bool {
        let k = settle(st, valid);
        apply_deferred(st, k, valid);
        let w = *st.word;
        if let Some(l) = role(w) {
            // A page placed into a set that was not full is a miss under
            // every candidate: it tells nothing apart.
            if valid.count_ones() as usize + 1 >= st.bytes.len() {
                st.duel.note_miss(l, (w >> HITS_SHIFT) & HITS_MAX);
                *st.word = w & !(HITS_MAX << HITS_SHIFT);
            }
        }
        as_arm(
            st,
            k,
            valid | 1 << slot,
            |v| with_arm!(k, p => p.on_insert(v, slot, tag, valid)),
        )
    }

    fn victim(&self, st: &mut SetState<'_>, eligible: u32, valid: u32) -> usize {
        let k = settle(st, valid);
        apply_deferred(st, k, valid);
        as_arm(
            st,
            k,
            valid,
            |v| with_arm!(k, p => p.victim(v, eligible, valid)),
        )
    }

    fn on_evict(&self, st: &mut SetState<'_>, slot: usize, tag: u64, valid: u32) {
        let k = arm(*st.word);
        apply_deferred(st, k, valid);
        as_arm(
            st,
            k,
            valid & !(1 << slot),
            |v| with_arm!(k, p => p.on_evict(v, slot, tag, valid)),
        );
    }

    fn on_remove(&self, st: &mut SetState<'_>, slot: usize, valid: u32) {
        let k = arm(*st.word);
        apply_deferred(st, k, valid);
        as_arm(
            st,
            k,
            valid & !(1 << slot),
            |v| with_arm!(k, p => p.on_remove(v, slot, valid)),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::super::{PolicyKind, SaModel};
    use super::*;

    fn replay(m: &mut SaModel, trace: &[u64]) -> u64 {
        m.replay(trace.iter().copied())
    }

    #[test]
    fn leaders_are_spread_one_per_candidate() {
        let d = Duel::new(1000);
        let roles: Vec<Option<usize>> = (0..64).map(|s| d.role(s)).collect();
        for k in 0..CANDIDATES {
            assert_eq!(
                roles.iter().filter(|r| **r == Some(k)).count(),
                1,
                "{roles:?}"
            );
        }
        // A small cache still has a leader of each.
        let small = Duel::new(5);
        for k in 0..CANDIDATES {
            assert!((0..5).any(|s| small.role(s) == Some(k)));
        }
        assert!((0..100).all(|s| Duel::idle().role(s).is_none()));
    }

    #[test]
    fn a_loop_makes_lirs_win_and_the_followers_keep_part_of_it() {
        let trace: Vec<u64> = (0..60).flat_map(|_| 0..1000u64).collect();
        let mut m = SaModel::new(PolicyKind::Adaptive, 12, 40);
        let hits = replay(&mut m, &trace);
        assert_eq!(
            m.duel().winner(),
            2,
            "{:?} {:?}",
            m.duel().misses(),
            m.duel().accesses()
        );
        let mut lru = SaModel::new(PolicyKind::Lru, 12, 40);
        assert_eq!(replay(&mut lru, &trace), 0);
        // 40 sets of which 37 follow LIRS: well over a third of the loop hits.
        assert!(hits as f64 > 0.35 * trace.len() as f64, "{hits}");
    }

    #[test]
    fn the_winner_changes_only_by_a_margin() {
        let d = Duel::new(100);
        assert_eq!(d.winner(), usize::from(START));
        // LRU's and LIRS's leaders miss half of the time, SIEVE's always:
        // the holder stays.
        for _ in 0..40 {
            d.note_miss(0, 1);
            d.note_miss(1, 0);
            d.note_miss(2, 1);
        }
        // LRU a little better (1 point): within the margin.
        d.note_miss(0, 3);
        assert_eq!(d.winner(), 2, "{:?} {:?}", d.misses(), d.accesses());
        // LIRS's leaders now miss far more often: LRU takes over.
        for _ in 0..100 {
            d.note_miss(2, 0);
        }
        assert_eq!(d.winner(), 0, "{:?} {:?}", d.misses(), d.accesses());
        // Counts halve once a candidate's accesses reach the decay point.
        d.note_miss(1, DECAY_AT);
        assert_eq!(d.accesses(), [84 / 2, (40 + DECAY_AT).div_ceil(2), 180 / 2]);
    }

    #[test]
    fn a_follower_defers_hits_and_counts_none() {
        let mut m = SaModel::new(PolicyKind::Adaptive, 12, 200);
        let hot: Vec<u64> = (0..1000).collect();
        replay(&mut m, &hot);
        let before = m.duel().accesses();
        // Hits only: the leaders count theirs, locally, until their next miss.
        replay(&mut m, &hot);
        assert_eq!(m.duel().accesses(), before);
        assert!(m.hits() > 900);
        // New pages: each leader's next miss reports the hits it saw.
        let (a0, m0) = (m.duel().accesses(), m.duel().misses());
        replay(&mut m, &(5000..9000).collect::<Vec<u64>>());
        let (a1, m1) = (m.duel().accesses(), m.duel().misses());
        let hits: u32 = (0..CANDIDATES)
            .map(|k| (a1[k] - a0[k]) - (m1[k] - m0[k]))
            .sum();
        assert!(hits > 20, "{hits} hits reported");
    }
}
