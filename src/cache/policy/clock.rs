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

use super::{Policy, SetState};

/// CLOCK within the set (see the [module documentation](self)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Clock;

impl Policy for Clock {
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
        debug_assert_ne!(eligible, 0);
        let n = st.bytes.len();
        let mut s = *st.word as usize % n;
        // The first turn clears every eligible bit, so the second one stops.
        for _ in 0..2 * n {
            if eligible & (1 << s) != 0 {
                if st.bytes[s] == 0 {
                    *st.word = ((s + 1) % n) as u32;
                    return s;
                }
                st.bytes[s] = 0;
            }
            s += 1;
            if s == n {
                s = 0;
            }
        }
        unreachable!("the eligible mask {eligible:#b} has no slot below {n}")
    }

    #[inline]
    fn on_evict(&self, st: &mut SetState<'_>, slot: usize, _tag: u64, _valid: u32) {
        st.bytes[slot] = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::super::model::testing::{self, Step};
    use super::super::{Access, PolicyKind, SetModel};
    use proptest::prelude::*;

    fn miss(slot: usize, evicted: Option<u64>) -> Access {
        Access::Miss {
            slot,
            evicted,
            ghost_hit: false,
        }
    }

    #[test]
    fn second_chance_order() {
        let mut m = SetModel::new(PolicyKind::Clock, 4);
        for t in 1..=4 {
            m.access(t);
        }
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
        let mut m = SetModel::new(PolicyKind::Clock, 12);
        for t in 0..12 {
            m.access(t);
        }
        for t in [0, 1, 2, 5, 11] {
            m.access(t);
        }
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
        let mut m = SetModel::new(PolicyKind::Clock, 4);
        for t in 1..=4 {
            m.access(t);
        }
        m.access(1);
        m.access(2);
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
        assert!(after.bytes().iter().all(|&b| b <= 1));
        assert!((after.word() as usize) < after.assoc());
        if let Some(Access::Miss {
            slot,
            evicted: Some(_),
            ..
        }) = step.access
        {
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
            assert_eq!(after.word() as usize, (slot + 1) % n);
            for s in 0..n {
                let t = before.tag_at(s).unwrap();
                if !eligible.contains(&t) {
                    assert_eq!(after.bytes()[s], before.bytes()[s]);
                }
            }
        }
    }

    proptest! {
        #[test]
        fn consistent(assoc in 4usize..=32, ops in testing::ops(64, 300)) {
            testing::run(PolicyKind::Clock, assoc, &ops, |step, _| check(step))?;
        }

        #[test]
        fn consistent_small(ops in testing::ops(8, 400)) {
            testing::run(PolicyKind::Clock, 4, &ops, |step, _| check(step))?;
        }
    }
}
