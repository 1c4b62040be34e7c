//! First in, first out within one set.
//!
//! Each valid slot's byte is its insertion rank among the valid slots: 0 for
//! the newest page, `n_valid - 1` for the oldest (a permutation of
//! `0..n_valid`, as for [`Lru`](super::Lru)). Hits change nothing. The victim
//! is the eligible slot with the highest rank: the oldest page the cache allows
//! to evict. A page that is skipped because it is pinned or dirty keeps its
//! place, so it goes first once it becomes eligible. Empty slots hold 0; the
//! set word and the ghost entries are unused.

use super::common::{oldest, push_front, unlink};
use super::{Policy, SetState};

/// FIFO within the set (see the [module documentation](self)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Fifo;

impl Policy for Fifo {
    #[inline]
    fn hit_changes(&self, _byte: u8) -> bool {
        false
    }

    #[inline]
    fn on_hit(&self, _st: &mut SetState<'_>, _slot: usize, _valid: u32) {}

    #[inline]
    fn on_insert(&self, st: &mut SetState<'_>, slot: usize, _tag: u64, valid: u32) -> bool {
        push_front(st.bytes, slot, 0, valid);
        false
    }

    #[inline]
    fn victim(&self, st: &mut SetState<'_>, eligible: u32, _valid: u32) -> usize {
        oldest(st.bytes, eligible)
    }

    #[inline]
    fn on_remove(&self, st: &mut SetState<'_>, slot: usize, valid: u32) {
        unlink(st.bytes, slot, valid);
    }
}

#[cfg(test)]
mod tests {
    use super::super::model::testing::{self, RefList, filled, miss, model_with};
    use super::super::{Access, PolicyKind};

    #[test]
    fn hits_do_not_reorder() {
        let mut m = filled(PolicyKind::Fifo, 4, 1..=4);
        assert_eq!(m.access(1), Access::Hit { slot: 0 });
        assert_eq!(m.access(1), Access::Hit { slot: 0 });
        assert_eq!(m.bytes(), [3, 2, 1, 0]);
        assert_eq!(m.access(5), miss(0, Some(1)));
        assert_eq!(m.access(6), miss(1, Some(2)));
        assert_eq!(m.access(4), Access::Hit { slot: 3 });
        assert_eq!(m.access(7), miss(2, Some(3)));
        assert_eq!(m.access(8), miss(3, Some(4)));
        assert_eq!(m.access(9), miss(0, Some(5)));
        assert_eq!(m.bytes(), [0, 3, 2, 1]);
    }

    #[test]
    fn twelve_slots_cycle_in_insertion_order() {
        let mut m = model_with(PolicyKind::Fifo, 12, 0..12);
        for t in (0..12).rev() {
            assert!(matches!(m.access(t), Access::Hit { .. }));
        }
        for round in 1..3u64 {
            for t in 0..12 {
                let new = round * 100 + t;
                let old = if round == 1 { t } else { 100 + t };
                assert_eq!(m.access(new), miss(t as usize, Some(old)));
            }
        }
    }

    #[test]
    fn skipped_pages_keep_their_place() {
        let mut m = model_with(PolicyKind::Fifo, 4, 1..=4);
        assert!(m.pin(1));
        assert!(m.set_dirty(2, true));
        assert_eq!(m.access(5), miss(2, Some(3)));
        assert_eq!(m.access(6), miss(3, Some(4)));
        assert_eq!(m.access(7), miss(2, Some(5)));
        // Once unpinned, the oldest page is the next victim; the dirty page
        // waits while clean ones remain.
        assert!(m.unpin(1));
        assert_eq!(m.access(8), miss(0, Some(1)));
        assert_eq!(m.access(9), miss(3, Some(6)));
        assert!(m.set_dirty(2, false));
        assert_eq!(m.access(10), miss(1, Some(2)));
        for t in [7, 8, 9, 10] {
            assert!(m.pin(t));
        }
        assert_eq!(m.access(11), Access::AllPinned);
    }

    testing::property_tests!(consistent_with_reference, small: (10, 300), |assoc, ops| {
        testing::run_ranked(PolicyKind::Fifo, assoc, ops, RefList::new(false), 0xff)
    });
}
