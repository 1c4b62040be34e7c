//! CLOCK (second chance) within one set.
//!
//! Each valid slot's byte is its reference bit (0 or 1) and the set word is
//! the clock hand, a slot index. The slots form the clock face in index order.
//! A hit sets the bit. A new page starts with the bit clear: the hand has just
//! passed its slot, so the page gets one full turn of the hand to be hit
//! before it is considered again.
//!
//! To choose a victim, the hand sweeps from its position: an eligible slot
//! with the bit set has it cleared (its second chance) and is passed; the first
//! eligible slot with the bit clear is the victim, and the hand stops just past
//! it, where it resumes next time. Slots that are empty or not eligible
//! (pinned, busy, or dirty while clean pages exist) are passed without being
//! touched: their bits are kept, so a page does not lose its reference for
//! having been pinned. Every eligible bit is clear after one turn, so a sweep
//! ends within two turns. Empty slots hold 0; the ghost entries are unused.

use super::common::clock_sweep;
use super::{Policy, SetState};

/// CLOCK within the set (see the [module documentation](self)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Clock;

impl Policy for Clock {
    #[inline]
    fn hit_changes(&self, byte: u8) -> bool {
        byte == 0
    }

    #[inline]
    fn on_hit(&self, st: &mut SetState<'_>, slot: usize, _valid: u32) {
        st.bytes[slot] = 1;
    }

    #[inline]
    fn on_insert(&self, st: &mut SetState<'_>, slot: usize, _tag: u64, _valid: u32) -> bool {
        st.bytes[slot] = 0;
        false
    }

    #[inline]
    fn victim(&self, st: &mut SetState<'_>, eligible: u32, _valid: u32) -> usize {
        // A bit is a counter that is at most 1: the first turn clears every
        // eligible bit, so the second one stops.
        clock_sweep(st, eligible, 2)
    }
}

#[cfg(test)]
mod tests {
    use super::super::model::testing::{self, Step, miss, model_with};
    use super::super::{Access, PolicyKind};

    #[test]
    fn second_chance_order() {
        let mut m = model_with(PolicyKind::Clock, 4, 1..=4);
        assert_eq!(m.word(), 0);
        // No bits set: the hand takes slot 0 and moves on.
        assert_eq!(m.access(5), miss(0, Some(1)));
        assert_eq!(m.word(), 1);
        m.access(2);
        m.access(3);
        assert_eq!(m.bytes(), [0, 1, 1, 0]);
        // 2 and 3 get a second chance; 4 goes.
        assert_eq!(m.access(6), miss(3, Some(4)));
        assert_eq!(m.bytes(), [0, 0, 0, 0]);
        assert_eq!(m.word(), 0);
        m.access(5);
        assert_eq!(m.access(7), miss(1, Some(2)));
        assert_eq!(m.bytes(), [0, 0, 0, 0]);
        assert_eq!(m.access(8), miss(2, Some(3)));
        // All bits set: a full turn clears them, then the hand's slot goes.
        for t in [5, 7, 8, 6] {
            m.access(t);
        }
        assert_eq!(m.bytes(), [1, 1, 1, 1]);
        assert_eq!(m.access(9), miss(3, Some(6)));
        assert_eq!(m.bytes(), [0, 0, 0, 0]);
        assert_eq!(m.word(), 0);
    }

    #[test]
    fn twelve_slots() {
        let mut m = model_with(PolicyKind::Clock, 12, (0..12).chain([0, 1, 2, 5, 11]));
        assert_eq!(m.access(100), miss(3, Some(3)));
        assert_eq!(m.bytes()[..4], [0, 0, 0, 0]);
        assert_eq!(m.access(101), miss(4, Some(4)));
        assert_eq!(m.access(102), miss(6, Some(6)));
        assert_eq!(m.bytes()[5], 0);
        assert_eq!(m.access(103), miss(7, Some(7)));
        m.access(8);
        assert_eq!(m.access(104), miss(9, Some(9)));
        assert_eq!(m.access(105), miss(10, Some(10)));
        // 11's bit is cleared, then the hand wraps around.
        assert_eq!(m.access(106), miss(0, Some(0)));
        assert_eq!(m.bytes()[11], 0);
    }

    #[test]
    fn ineligible_slots_keep_their_bits() {
        let mut m = model_with(PolicyKind::Clock, 4, [1, 2, 3, 4, 1, 2]);
        assert!(m.pin(1));
        assert!(m.set_dirty(3, true));
        // Slot 0 (pinned) keeps its bit; 2 loses it; 3 (dirty) is passed; 4 goes.
        assert_eq!(m.access(5), miss(3, Some(4)));
        assert_eq!(m.bytes(), [1, 0, 0, 0]);
        assert_eq!(m.word(), 0);
        assert_eq!(m.access(6), miss(1, Some(2)));
        assert!(m.pin(6));
        assert!(m.pin(5));
        // Only the dirty page is left.
        assert_eq!(m.access(7), miss(2, Some(3)));
        assert!(m.pin(7));
        assert_eq!(m.access(8), Access::AllPinned);
        assert!(m.unpin(1));
        assert_eq!(m.access(8), miss(0, Some(1)));
    }

    fn check(step: &Step<'_>) {
        let (before, after) = (step.before, step.after);
        if let Some(slot) = testing::check_clock(step, 1) {
            let n = before.assoc();
            let eligible = testing::eligible_tags(before);
            let hand = before.word() as usize;
            // Every eligible slot the hand passed had its bit set and lost it,
            // unless the hand went all the way round.
            let passed: Vec<usize> = (0..n)
                .map(|i| (hand + i) % n)
                .take_while(|&s| s != slot)
                .filter(|&s| eligible.contains(&before.tag_at(s).unwrap()))
                .collect();
            let full_turn =
                passed.iter().all(|&s| before.bytes()[s] == 1) && before.bytes()[slot] == 1;
            if !full_turn {
                assert_eq!(before.bytes()[slot], 0);
                for s in passed {
                    assert_eq!(before.bytes()[s], 1);
                    assert_eq!(after.bytes()[s], 0);
                }
            }
            for s in 0..n {
                let t = before.tag_at(s).unwrap();
                if !eligible.contains(&t) {
                    assert_eq!(after.bytes()[s], before.bytes()[s]);
                }
            }
        }
    }

    testing::property_tests!(consistent, small: (8, 400), |assoc, ops| {
        testing::run(PolicyKind::Clock, assoc, ops, |step, _| check(step))
    });
}
