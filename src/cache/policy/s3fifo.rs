//! S3-FIFO (Yang et al., SOSP '23) within one set.
//!
//! S3-FIFO runs three FIFO queues: a small one (about 10% of the cache) that
//! new pages enter, a main one, and a ghost queue of pages recently evicted
//! from the small one. Each resident page has a 2-bit access frequency
//! (saturating at 3). A missing page found in the ghost queue goes straight to
//! main; any other goes to small. To evict: while the small queue holds at
//! least its share, its oldest page is examined: if it was accessed again
//! (frequency >= 1; the paper and the global policy ask for two accesses) it
//! moves to the head of main (keeping its frequency, in this set policy),
//! otherwise it is evicted and remembered as a ghost. Otherwise the oldest main
//! page is examined: if its frequency is non-zero it is decremented and the
//! page reinserted at the head of main, otherwise it is evicted (no ghost).
//!
//! Adaptation to one set:
//!
//! - Queue sizes are counted in slots of the set. The small queue's share is
//!   `max(1, round(assoc / 10))` slots: 1 for 4 to 14 slots
//!   (so one slot of a 12-slot set), 2 for 15 to 24, 3 for 25 to 32. Main has
//!   no size of its own: it is whatever the small queue does not use.
//! - Both queues live in one order of the valid slots by "time placed at a
//!   queue's head": the low five bits of a slot's byte are that rank (0 =
//!   newest), bit 5 says the page is in main, bits 6 and 7 hold the frequency.
//!   Restricted to the small pages this order is the small FIFO, restricted to
//!   the main pages it is the main FIFO, so moving a page to main, or
//!   reinserting it, is moving it to rank 0 and setting the bit.
//! - The ghost queue is the set's ghost array, a FIFO newest first, of
//!   `assoc - small_target(assoc)` tags (the size of main, as in the paper):
//!   11 entries, 88 bytes of tags, for a 12-slot set; at most 29 entries
//!   (232 bytes) for 32 slots. The ghost bytes are unused (kept at 0).
//! - Eligibility: the queues are examined for their oldest *eligible* page;
//!   ineligible pages keep their place and frequency. The small queue is
//!   examined when it holds at least its share (counting ineligible pages) and
//!   has an eligible page, or when main has no eligible page; otherwise main is
//!   examined. Each step either evicts, moves a page from small to main for
//!   good, or lowers a frequency, so a search ends after at most `4 * assoc`
//!   steps. The victim itself is not moved: a small page returned as the
//!   victim has a frequency below the promotion's (0, or 1 in
//!   [`S3FifoDuel`]'s second form) and becomes a ghost when evicted.
//! - A page that leaves without eviction ([`Policy::on_remove`]) leaves no
//!   ghost.
//!
//! [`S3FifoReset`] was the adaptive policy's variant: a page moving from small
//! to main (after one access, as above) starts there with frequency 0, as in
//! the paper and the global policy, so that the hits that promoted it do not
//! also buy it reinsertions in main; and frequencies saturate at 2, so that a
//! page whose hits change nothing is the one with bit 7 set (the adaptive
//! policy's flag for such pages). As the adaptive policy's candidate in place of
//! GCLOCK it took the gap table's cache2k-orm-busy rows at 5% and 10% of the
//! footprint from 1.29 and 1.17 points below the best global policy to 0.73
//! and 0.62, and the YCSB generator's at 1% from 1.50 to 0.27 (the
//! project's performance notes, "S3-FIFO in place of GCLOCK"). The adaptive
//! policy now runs [`S3FifoDuel`], which is [`S3FifoReset`] in its first
//! form, and in its second promotes a small page only after two hits, in a
//! small queue of a fifth of the set; its duel chooses the form. In both, a
//! page a set remembers as a ghost must come into that set
//! ([`Admit::Here`]).

use super::common::{RANK_MASK, ghost_push, ghost_take, move_to_front, oldest, push_front, unlink};
use super::{Admit, Policy, SetState};

/// The main-queue bit of a slot byte.
const MAIN: u8 = 0x20;
/// Shift of the frequency within a slot byte.
const FREQ_SHIFT: u32 = 6;
/// The largest frequency.
const FREQ_MAX: u8 = 3;

/// How a variant of the policy promotes and counts.
struct Rules {
    /// Frequencies saturate here.
    max: u8,
    /// A page moving from small to main starts with frequency 0.
    reset: bool,
    /// The frequency at which a small page moves to main when examined.
    promote: u8,
    /// Slots the small queue holds before it is evicted from, in a set of
    /// `assoc` slots.
    small: fn(usize) -> usize,
    /// A page whose ghost the set keeps must come into this set.
    ghost_here: bool,
}

/// The rules of [`S3Fifo`].
const KEEP: Rules = Rules {
    max: FREQ_MAX,
    reset: false,
    promote: 1,
    small: small_target,
    ghost_here: false,
};
/// The rules of [`S3FifoReset`].
const RESET: Rules = Rules {
    max: 2,
    reset: true,
    promote: 1,
    small: small_target,
    ghost_here: false,
};
/// The rules of [`S3FifoDuel`] in its first form: as [`RESET`], and a page
/// a set remembers comes into that set.
const ONCE: Rules = Rules {
    max: 2,
    reset: true,
    promote: 1,
    small: small_target,
    ghost_here: true,
};
/// The rules of [`S3FifoDuel`] in its second form: a small page moves to
/// main after two hits, as in the paper, and the small queue is a fifth of
/// the set, so that a page has time for them.
const TWICE: Rules = Rules {
    max: 2,
    reset: true,
    promote: 2,
    small: small_fifth,
    ghost_here: true,
};

/// A fifth of `assoc`, at least 1: the small queue of [`S3FifoDuel`]'s
/// second form.
fn small_fifth(assoc: usize) -> usize {
    (assoc / 5).max(1)
}

/// The rules [`S3FifoDuel`] runs under in the set `st`.
#[inline]
fn duel_rules(st: &SetState<'_>) -> &'static Rules {
    if st.duel.s3_twice() { &TWICE } else { &ONCE }
}

/// The number of slots the small queue may hold before it is evicted from:
/// about 10% of `assoc`, at least 1.
fn small_target(assoc: usize) -> usize {
    ((assoc + 5) / 10).max(1)
}

#[inline]
fn freq(b: u8) -> u8 {
    b >> FREQ_SHIFT
}

#[inline]
fn with_freq(b: u8, f: u8) -> u8 {
    (b & (RANK_MASK | MAIN)) | (f << FREQ_SHIFT)
}

/// The mask of the slots of `valid` that are in main.
#[inline]
fn main_mask(bytes: &[u8], valid: u32) -> u32 {
    let mut m = 0;
    for (s, &b) in bytes.iter().enumerate() {
        m |= u32::from(b & MAIN != 0) << s;
    }
    m & valid
}

/// S3-FIFO within the set (see the [module documentation](self)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct S3Fifo;

/// S3-FIFO whose pages enter main with frequency 0 and whose frequencies
/// saturate at 2: the first form of the adaptive policy's candidate,
/// [`S3FifoDuel`], but for where a remembered page comes in (see the [module
/// documentation](self)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct S3FifoReset;

/// S3-FIFO as [`S3FifoReset`], in one of two forms that the cache's duel
/// chooses between ([`Duel::s3_twice`](super::Duel::s3_twice)): small pages
/// move to main after one hit (the first form) or after two in a small queue
/// of a fifth of the set (the second); in both, a page whose ghost a set
/// keeps comes into that set. The adaptive policy's candidate (see the
/// [module documentation](self)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct S3FifoDuel;

/// The hit of `slot` under rules `r`.
#[inline]
fn hit(r: &Rules, st: &mut SetState<'_>, slot: usize) {
    let b = st.bytes[slot];
    if freq(b) < r.max {
        st.bytes[slot] = with_freq(b, freq(b) + 1);
    }
}

/// A page placed into the empty `slot`: into main if a ghost remembered it.
#[inline]
fn insert(st: &mut SetState<'_>, slot: usize, tag: u64, valid: u32) -> bool {
    let ghost_hit = ghost_take(st.ghost_tags, st.ghost_bytes, tag).is_some();
    push_front(st.bytes, slot, if ghost_hit { MAIN } else { 0 }, valid);
    ghost_hit
}

/// The victim among `eligible` under rules `r` (see the [module
/// documentation](self)).
#[inline]
fn victim(r: &Rules, st: &mut SetState<'_>, eligible: u32, valid: u32) -> usize {
    debug_assert_ne!(eligible, 0);
    let target = (r.small)(st.bytes.len()) as u32;
    let mut main = main_mask(st.bytes, valid);
    loop {
        let small = valid & !main;
        let small_eligible = small & eligible;
        let main_eligible = main & eligible;
        if small_eligible != 0 && (small.count_ones() >= target || main_eligible == 0) {
            let s = oldest(st.bytes, small_eligible);
            let b = st.bytes[s];
            if freq(b) < r.promote {
                return s;
            }
            st.bytes[s] = if r.reset { with_freq(b, 0) } else { b } | MAIN;
            main |= 1 << s;
            move_to_front(st.bytes, s, valid);
        } else {
            let s = oldest(st.bytes, main_eligible);
            let f = freq(st.bytes[s]);
            if f == 0 {
                return s;
            }
            st.bytes[s] = with_freq(st.bytes[s], f - 1);
            move_to_front(st.bytes, s, valid);
        }
    }
}

/// A removal that remembers a page of the small queue as a ghost.
#[inline]
fn evict(st: &mut SetState<'_>, slot: usize, tag: u64, valid: u32) {
    if st.bytes[slot] & MAIN == 0 {
        ghost_push(st.ghost_tags, st.ghost_bytes, tag, 0);
    }
    unlink(st.bytes, slot, valid);
}

/// The variants' `Policy` implementations, alike but for their rules:
/// `$rules` gives the rules a set runs under, `$hit` those its hits count
/// by and its ghosts are sized by (the same for every form of a variant).
macro_rules! s3fifo_policy {
    ($name:ident, $rules:path, $hit:ident) => {
        impl Policy for $name {
            #[inline]
            fn ghosts(&self, assoc: usize) -> usize {
                assoc - ($hit.small)(assoc)
            }

            #[inline]
            fn hit_changes(&self, byte: u8) -> bool {
                freq(byte) < $hit.max
            }

            #[inline]
            fn admits(&self, st: &mut SetState<'_>, tag: u64, _valid: u32) -> Admit {
                if $rules(st).ghost_here && st.ghost_tags.contains(&tag) {
                    Admit::Here
                } else {
                    Admit::Yes
                }
            }

            #[inline]
            fn on_hit(&self, st: &mut SetState<'_>, slot: usize, _valid: u32) {
                hit(&$hit, st, slot);
            }

            #[inline]
            fn on_insert(&self, st: &mut SetState<'_>, slot: usize, tag: u64, valid: u32) -> bool {
                insert(st, slot, tag, valid)
            }

            #[inline]
            fn victim(&self, st: &mut SetState<'_>, eligible: u32, valid: u32) -> usize {
                victim($rules(st), st, eligible, valid)
            }

            #[inline]
            fn on_remove(&self, st: &mut SetState<'_>, slot: usize, valid: u32) {
                unlink(st.bytes, slot, valid);
            }

            #[inline]
            fn on_evict(&self, st: &mut SetState<'_>, slot: usize, tag: u64, valid: u32) {
                evict(st, slot, tag, valid);
            }
        }
    };
}

/// The rules of [`S3Fifo`], in every set.
fn keep_rules(_: &SetState<'_>) -> &'static Rules {
    &KEEP
}

/// The rules of [`S3FifoReset`], in every set.
fn reset_rules(_: &SetState<'_>) -> &'static Rules {
    &RESET
}

// Both of `S3FifoDuel`'s forms count hits alike (frequencies top out at 2),
// so a hit need not ask the duel which form runs; its ghosts are sized by the
// first form's small queue, a tenth of the set, which is never larger than
// the second's fifth, so they are as many as the larger main.
const _: () = assert!(ONCE.max == TWICE.max && ONCE.reset == TWICE.reset);

s3fifo_policy!(S3Fifo, keep_rules, KEEP);
s3fifo_policy!(S3FifoReset, reset_rules, RESET);
s3fifo_policy!(S3FifoDuel, duel_rules, ONCE);

#[cfg(test)]
mod tests {
    use super::super::model::testing::{self, Follow, Op, Step, ghost_miss as miss, model_with};
    use super::super::{Access, NO_TAG, Policy, PolicyKind, SetState};
    use super::{FREQ_SHIFT, MAIN, S3Fifo, S3FifoReset, freq, small_target};
    use std::collections::VecDeque;

    #[test]
    fn shares() {
        assert_eq!(small_target(4), 1);
        assert_eq!(small_target(12), 1);
        assert_eq!(small_target(14), 1);
        assert_eq!(small_target(15), 2);
        assert_eq!(small_target(24), 2);
        assert_eq!(small_target(25), 3);
        assert_eq!(small_target(32), 3);
        assert_eq!(S3Fifo.ghosts(4), 3);
        assert_eq!(S3Fifo.ghosts(12), 11);
        assert_eq!(S3Fifo.ghosts(32), 29);
    }

    #[test]
    fn queues_and_ghosts_in_a_four_slot_set() {
        let mut m = model_with(PolicyKind::S3Fifo, 4, [1, 2, 3, 4, 1]);
        assert_eq!(m.bytes(), [3 | 1 << FREQ_SHIFT, 2, 1, 0]);
        // 1 was accessed again: it moves to main; 2 is evicted to the ghosts.
        assert_eq!(m.access(5), miss(1, Some(2), false));
        assert_eq!(m.bytes()[0], MAIN | 1 | 1 << FREQ_SHIFT);
        assert_eq!(m.ghost_tags(), [2, NO_TAG, NO_TAG]);
        // One-hit wonders pass through the small queue.
        assert_eq!(m.access(6), miss(2, Some(3), false));
        assert_eq!(m.access(7), miss(3, Some(4), false));
        assert_eq!(m.access(8), miss(1, Some(5), false));
        assert_eq!(m.ghost_tags(), [5, 4, 3]);
        // 4 returns from the ghosts into main (after 6 became a ghost).
        assert_eq!(m.access(4), miss(2, Some(6), true));
        assert_eq!(m.bytes()[2], MAIN);
        assert_eq!(m.ghost_tags(), [6, 5, NO_TAG]);
        assert_eq!(m.access(9), miss(3, Some(7), false));
        assert_eq!(m.ghost_tags(), [7, 6, 5]);
        // Both small pages (8, 9) were used: they move to main, the small
        // queue drops below its share, and main is evicted from: 1 (freq 1)
        // is reinserted with freq 0, and 4 (freq 0) goes, without a ghost.
        m.access(8);
        m.access(9);
        assert_eq!(m.access(10), miss(2, Some(4), false));
        assert_eq!(m.ghost_tags(), [7, 6, 5]);
        assert_eq!(freq(m.bytes()[0]), 0);
        assert!(m.bytes()[0] & MAIN != 0);
        // Main order (oldest first): 8, 9, 1; small: 10.
        assert_eq!(testing::by_rank(&m), [10, 1, 9, 8]);
        assert_eq!(m.access(11), miss(2, Some(10), false));
        assert_eq!(m.ghost_tags(), [10, 7, 6]);
        // Once the small page is used it joins main, and main gives way: 8
        // and 9 spend their frequency on a reinsertion, 1 goes.
        m.access(11);
        assert_eq!(m.access(12), miss(0, Some(1), false));
        assert_eq!(testing::by_rank(&m), [12, 9, 8, 11]);
    }

    #[test]
    fn frequency_saturates_at_three() {
        let m = model_with(PolicyKind::S3Fifo, 4, std::iter::repeat_n(1, 11));
        assert_eq!(m.bytes()[0], 3 << FREQ_SHIFT);
    }

    #[test]
    fn hot_pages_survive_a_scan_in_twelve_slots() {
        let mut m = testing::scan_spares_hot_pages(PolicyKind::S3Fifo);
        let ghosts: Vec<u64> = (145..156).rev().collect();
        assert_eq!(m.ghost_tags(), ghosts);
        // A scanned page that comes back soon enough is a ghost hit.
        // Page 100 + k took slot 6 + k % 6, so 156 (the oldest small page) is in
        // slot 8; it becomes a ghost first, and 150 is still found.
        assert_eq!(m.access(150), miss(8, Some(156), true));
    }

    #[test]
    fn pinned_and_dirty() {
        let mut m = model_with(PolicyKind::S3Fifo, 4, 1..=4);
        assert!(m.pin(1));
        assert!(m.set_dirty(2, true));
        // Small (oldest first): 1 (pinned), 2 (dirty), 3, 4.
        assert_eq!(m.access(5), miss(2, Some(3), false));
        assert_eq!(m.access(6), miss(3, Some(4), false));
        assert_eq!(m.access(7), miss(2, Some(5), false));
        assert!(m.unpin(1));
        assert_eq!(m.access(8), miss(0, Some(1), false));
        for t in [6, 7, 8] {
            assert!(m.set_dirty(t, true));
        }
        // All dirty: the oldest small page, 2, goes.
        assert_eq!(m.access(9), miss(1, Some(2), false));
        for t in [6, 7, 8, 9] {
            assert!(m.pin(t));
        }
        assert_eq!(m.access(10), Access::AllPinned);
    }

    #[test]
    fn small_queue_below_share_with_no_eligible_main_page() {
        // 16 slots (small share 2): slot 0 is the only small page (and the
        // oldest), and it is the only eligible one.
        let mut bytes = [0u8; 16];
        for (s, b) in bytes.iter_mut().enumerate() {
            *b = if s == 0 {
                15 | 1 << FREQ_SHIFT
            } else {
                MAIN | (s as u8 - 1) | 2 << FREQ_SHIFT
            };
        }
        let mut word = 0;
        let mut st = SetState {
            bytes: &mut bytes,
            word: &mut word,
            ghost_tags: &mut [NO_TAG; 14],
            ghost_bytes: &mut [0; 14],
            duel: &super::super::IDLE_DUEL,
        };
        assert_eq!(S3Fifo.victim(&mut st, 0b1, u32::from(u16::MAX)), 0);
        // It was used, so it went through main on the way (freq spent).
        assert_eq!(bytes[0], MAIN);
        // Untouched main pages moved back by one rank.
        assert_eq!(bytes[1], MAIN | 1 | 2 << FREQ_SHIFT);
    }

    /// A list-based S3-FIFO: every queue newest first.
    struct Reference {
        target: usize,
        ghost_cap: usize,
        small: VecDeque<u64>,
        main: VecDeque<u64>,
        ghost: VecDeque<u64>,
        freq: std::collections::HashMap<u64, u8>,
    }

    impl Reference {
        fn new(assoc: usize) -> Self {
            Reference {
                target: small_target(assoc),
                ghost_cap: S3Fifo.ghosts(assoc),
                small: VecDeque::new(),
                main: VecDeque::new(),
                ghost: VecDeque::new(),
                freq: Default::default(),
            }
        }

        fn drop_page(&mut self, t: u64) {
            self.small.retain(|&u| u != t);
            self.main.retain(|&u| u != t);
            self.freq.remove(&t);
        }

        fn victim(&mut self, eligible: &[u64]) -> u64 {
            loop {
                let oldest =
                    |q: &VecDeque<u64>| q.iter().rev().copied().find(|t| eligible.contains(t));
                let (s, m) = (oldest(&self.small), oldest(&self.main));
                if let Some(s) = s.filter(|_| self.small.len() >= self.target || m.is_none()) {
                    if self.freq[&s] == 0 {
                        return s;
                    }
                    self.small.retain(|&u| u != s);
                    self.main.push_front(s);
                } else {
                    let m = m.unwrap();
                    let f = self.freq.get_mut(&m).unwrap();
                    if *f == 0 {
                        return m;
                    }
                    *f -= 1;
                    self.main.retain(|&u| u != m);
                    self.main.push_front(m);
                }
            }
        }
    }

    impl Follow for Reference {
        fn follow(&mut self, step: &Step<'_>, op: &Op) {
            match (*op, step.access) {
                (Op::Access(t), Some(Access::Hit { .. })) => {
                    let f = self.freq.get_mut(&t).unwrap();
                    *f = (*f + 1).min(3);
                }
                (
                    Op::Access(t),
                    Some(Access::Miss {
                        evicted, ghost_hit, ..
                    }),
                ) => {
                    if let Some(e) = evicted {
                        let v = self.victim(&testing::eligible_tags(step.before));
                        assert_eq!(e, v);
                        if self.small.contains(&v) {
                            self.ghost.push_front(v);
                            self.ghost.truncate(self.ghost_cap);
                        }
                        self.drop_page(v);
                    }
                    let in_ghost = self.ghost.contains(&t);
                    assert_eq!(ghost_hit, in_ghost);
                    if in_ghost {
                        self.ghost.retain(|&u| u != t);
                        self.main.push_front(t);
                    } else {
                        self.small.push_front(t);
                    }
                    self.freq.insert(t, 0);
                }
                (Op::Remove(t), _) => self.drop_page(t),
                _ => {}
            }
            let m = step.after;
            let order = testing::by_rank(m);
            let in_main = |t: &u64| m.bytes()[m.slot_of(*t).unwrap()] & MAIN != 0;
            let small: Vec<u64> = order.iter().copied().filter(|t| !in_main(t)).collect();
            let main: Vec<u64> = order.iter().copied().filter(in_main).collect();
            assert_eq!(small, Vec::from(self.small.clone()));
            assert_eq!(main, Vec::from(self.main.clone()));
            for (&t, &f) in &self.freq {
                assert_eq!(freq(m.bytes()[m.slot_of(t).unwrap()]), f);
            }
            let ghosts: Vec<u64> = m
                .ghost_tags()
                .iter()
                .copied()
                .filter(|&g| g != NO_TAG)
                .collect();
            assert_eq!(ghosts, Vec::from(self.ghost.clone()));
            assert!(m.ghost_bytes().iter().all(|&b| b == 0));
        }
    }

    /// Four pages in a four-slot set, all in small, the oldest (slot 0) hit
    /// twice and the others once; then one miss under `p`. Returns the
    /// victim and the bytes after the search for it.
    fn first_victim<P: Policy>(p: P) -> (usize, [u8; 4]) {
        let mut bytes = [0u8; 4];
        let mut word = 0;
        let mut ghost_tags = [NO_TAG; 3];
        let mut ghost_bytes = [0u8; 3];
        let mut st = SetState {
            bytes: &mut bytes,
            word: &mut word,
            ghost_tags: &mut ghost_tags,
            ghost_bytes: &mut ghost_bytes,
            duel: &super::super::IDLE_DUEL,
        };
        let mut valid = 0;
        for slot in 0..4 {
            assert!(!p.on_insert(&mut st, slot, 10 + slot as u64, valid));
            valid |= 1 << slot;
        }
        for slot in [0, 0, 1, 2, 3] {
            p.on_hit(&mut st, slot, valid);
        }
        let v = p.victim(&mut st, valid, valid);
        (v, bytes)
    }

    #[test]
    fn the_reset_variant_promotes_pages_with_their_frequency_cleared() {
        // The miss moves all four pages to main (each was hit in small),
        // oldest first; small is then below its share and main is searched
        // from its oldest, slot 0. The reset variant cleared every
        // frequency on the way: slot 0 goes.
        let (v, bytes) = first_victim(S3FifoReset);
        assert_eq!(v, 0);
        assert!(bytes.iter().all(|&b| b & MAIN != 0 && freq(b) == 0));
        // S3Fifo keeps the hits: slot 0 (frequency 2) is reinserted twice,
        // the others once, and slot 1 is the first found at 0.
        let (v, bytes) = first_victim(S3Fifo);
        assert_eq!(v, 1);
        assert!(bytes.iter().all(|&b| b & MAIN != 0));
        // The reset variant's frequencies saturate at 2, bit 7 alone.
        assert_eq!(2u8 << FREQ_SHIFT, 0x80);
        assert!(!S3FifoReset.hit_changes(2 << FREQ_SHIFT));
        assert!(S3Fifo.hit_changes(2 << FREQ_SHIFT));
        let hit_at_two = |p: &dyn Fn(&mut SetState<'_>)| {
            let mut bytes = [MAIN | 2 << FREQ_SHIFT];
            let mut word = 0;
            p(&mut SetState {
                bytes: &mut bytes,
                word: &mut word,
                ghost_tags: &mut [],
                ghost_bytes: &mut [],
                duel: &super::super::IDLE_DUEL,
            });
            bytes[0]
        };
        assert_eq!(
            hit_at_two(&|st| S3FifoReset.on_hit(st, 0, 1)),
            MAIN | 2 << FREQ_SHIFT
        );
        assert_eq!(
            hit_at_two(&|st| S3Fifo.on_hit(st, 0, 1)),
            MAIN | 3 << FREQ_SHIFT
        );
    }

    testing::property_tests!(consistent_with_reference, small: (12, 400), |assoc, ops| {
        testing::run_ranked(PolicyKind::S3Fifo, assoc, ops, Reference::new(assoc), 0x1f)
    });
}
