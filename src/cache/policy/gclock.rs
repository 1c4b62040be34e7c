//! Generalized CLOCK (GCLOCK) within one set.
//!
//! Like [`Clock`], but each valid slot's byte is a small use counter instead
//! of a bit: a hit adds 1, saturating at [`GCLOCK_MAX`] (3, so a page survives
//! at most three sweeps of the hand without a hit, and a sweep never needs more
//! than four turns). A new page starts at 0 (the hand has just passed its
//! slot). The set word is the hand, a slot index, and the slots form the clock
//! face in index order.
//!
//! To choose a victim, the hand sweeps from its position: an eligible slot
//! with a non-zero counter has it decremented and is passed; the first
//! eligible slot whose counter is 0 is the victim, and the hand stops just past
//! it. Empty and ineligible slots are passed untouched. The sweep is computed
//! in one turn: if every eligible counter is at least `m`, the first `m` turns
//! would only decrement each of them `m` times, so that is done directly.
//! Empty slots hold 0; the ghost entries are unused.

use super::common::{clock_sweep, for_each_slot};
use super::{Clock, Policy, SetState};

/// The largest GCLOCK counter: a hit on a page at this count leaves it there.
pub const GCLOCK_MAX: u8 = 3;

/// GCLOCK within the set (see the [module documentation](self)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Gclock;

/// GCLOCK is [`Clock`] with counters: only hits and the sweep differ.
impl Policy for Gclock {
    #[inline]
    fn hit_changes(&self, byte: u8) -> bool {
        byte < GCLOCK_MAX
    }

    #[inline]
    fn on_hit(&self, st: &mut SetState<'_>, slot: usize, _valid: u32) {
        if st.bytes[slot] < GCLOCK_MAX {
            st.bytes[slot] += 1;
        }
    }

    #[inline]
    fn on_insert(&self, st: &mut SetState<'_>, slot: usize, tag: u64, valid: u32) -> bool {
        Clock.on_insert(st, slot, tag, valid)
    }

    #[inline]
    fn victim(&self, st: &mut SetState<'_>, eligible: u32, _valid: u32) -> usize {
        debug_assert_ne!(eligible, 0);
        // Skip the turns in which no eligible counter reaches 0.
        let mut min = u8::MAX;
        for_each_slot(eligible, |s| min = min.min(st.bytes[s]));
        if min > 0 {
            for_each_slot(eligible, |s| st.bytes[s] -= min);
        }
        clock_sweep(st, eligible, 1)
    }
}

#[cfg(test)]
mod tests {
    use super::super::model::testing::{self, Step, evictions, miss, model_with};
    use super::super::{Policy, PolicyKind, SetState};
    use super::{GCLOCK_MAX, Gclock};
    use std::iter::repeat_n;

    #[test]
    fn counters_buy_extra_turns() {
        let hits = repeat_n(1, 5).chain([2, 2, 3]);
        let mut m = model_with(PolicyKind::Gclock, 4, (1..=4).chain(hits));
        assert_eq!(m.bytes(), [3, 2, 1, 0]);
        // Slots 0..2 are decremented on the way to 4.
        assert_eq!(m.access(5), miss(3, Some(4)));
        assert_eq!(m.bytes(), [2, 1, 0, 0]);
        assert_eq!(m.word(), 0);
        // Slot 0 and 1 decremented again; 3 (now 0) goes.
        assert_eq!(m.access(6), miss(2, Some(3)));
        assert_eq!(m.bytes(), [1, 0, 0, 0]);
        assert_eq!(m.word(), 3);
        assert_eq!(m.access(7), miss(3, Some(5)));
        assert_eq!(m.access(8), miss(1, Some(2)));
        assert_eq!(m.bytes(), [0, 0, 0, 0]);
        assert_eq!(m.access(9), miss(2, Some(6)));
        assert_eq!(m.access(10), miss(3, Some(7)));
        // Page 1 had three hits' worth of protection and is only now the victim.
        assert_eq!(m.access(11), miss(0, Some(1)));
    }

    #[test]
    fn all_counters_high() {
        let hits = (1..=4).flat_map(|t| repeat_n(t, t as usize));
        let mut m = model_with(PolicyKind::Gclock, 4, (1..=4).chain(hits));
        // Capped at GCLOCK_MAX.
        assert_eq!(m.bytes(), [1, 2, 3, 3]);
        // One turn takes slot 0 to zero and the hand comes back to it.
        assert_eq!(m.access(5), miss(0, Some(1)));
        assert_eq!(m.bytes(), [0, 1, 2, 2]);
        assert_eq!(m.word(), 1);
        // The hand lowers slots 1..=3 on its way back to slot 0 (page 5, at 0).
        assert_eq!(m.access(6), miss(0, Some(5)));
        assert_eq!(m.bytes(), [0, 0, 1, 1]);
    }

    #[test]
    fn sweep_matches_a_plain_clock_walk() {
        // Compare the shortcut with a turn-by-turn walk on many states.
        let mut seed = 7u64;
        for _ in 0..2000 {
            seed = crate::storage::layout::mix64(seed);
            let n = 4 + (seed % 29) as usize;
            let mut bytes: Vec<u8> = (0..n)
                .map(|i| ((seed >> (i % 32)) as u8) % (GCLOCK_MAX + 1))
                .collect();
            let eligible = ((seed >> 13) as u32 & super::super::common::low_mask(n)) | 1;
            let hand = (seed >> 40) as usize % n;
            // The walk.
            let mut walk = bytes.clone();
            let mut s = hand;
            let expect = loop {
                if eligible & (1 << s) != 0 {
                    if walk[s] == 0 {
                        break s;
                    }
                    walk[s] -= 1;
                }
                s = (s + 1) % n;
            };
            let mut word = hand as u32;
            let mut st = SetState {
                bytes: &mut bytes,
                word: &mut word,
                ghost_tags: &mut [],
                ghost_bytes: &mut [],
                duel: &super::super::IDLE_DUEL,
            };
            let v = Gclock.victim(&mut st, eligible, eligible);
            assert_eq!(v, expect);
            assert_eq!(bytes, walk);
            assert_eq!(word as usize, (expect + 1) % n);
        }
    }

    #[test]
    fn pinned_and_dirty() {
        let mut m = model_with(PolicyKind::Gclock, 12, 0..12);
        assert!(m.pin(0));
        assert!(m.set_dirty(1, true));
        m.access(2);
        assert_eq!(m.access(100), miss(3, Some(3)));
        assert_eq!(m.bytes()[..4], [0, 0, 0, 0]);
        // Hand at 4: pages 4..11 go in order, then 2 (after losing its count),
        // the dirty page 1 and the pinned page 0 stay.
        assert_eq!(
            evictions(&mut m, 101..111),
            [4, 5, 6, 7, 8, 9, 10, 11, 2, 100]
        );
        assert!(m.contains(0) && m.contains(1));
    }

    fn check(step: &Step<'_>) {
        if let Some(slot) = testing::check_clock(step, GCLOCK_MAX) {
            let (before, after) = (step.before, step.after);
            let eligible = testing::eligible_tags(before);
            for s in 0..before.assoc() {
                let b = (before.bytes()[s], after.bytes()[s]);
                if s == slot {
                    assert_eq!(b.1, 0);
                } else if eligible.contains(&before.tag_at(s).unwrap()) {
                    // The sweep only lowers counters, and never to below 0.
                    assert!(b.1 <= b.0);
                } else {
                    assert_eq!(b.1, b.0);
                }
            }
        }
    }

    testing::property_tests!(consistent, small: (8, 400), |assoc, ops| {
        testing::run(PolicyKind::Gclock, assoc, ops, |step, _| check(step))
    });
}
