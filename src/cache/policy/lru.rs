//! Exact least-recently-used order within one set.
//!
//! Each valid slot's byte is its recency rank among the valid slots: 0 for the
//! most recently used page, `n_valid - 1` for the least recently used one; the
//! ranks of the valid slots are always a permutation of `0..n_valid`. A hit
//! moves the slot to rank 0, an insertion enters at rank 0, and an eviction or
//! removal closes the gap. The victim is the eligible slot with the highest
//! rank, i.e. the least recently used page that the cache allows to evict.
//! Empty slots hold 0. The set word and the ghost entries are unused.

use super::common::{move_to_front, oldest, push_front, unlink};
use super::{Policy, SetState};

/// Exact LRU within the set (see the [module documentation](self)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Lru;

impl Policy for Lru {
    #[inline]
    fn on_hit(&self, st: &mut SetState<'_>, slot: usize, valid: u32) {
        move_to_front(st.bytes, slot, valid);
    }

    #[inline]
    fn on_insert(&self, st: &mut SetState<'_>, slot: usize, _tag: u64, valid: u32) -> bool {
        st.bytes[slot] = 0;
        push_front(st.bytes, slot, valid);
        false
    }

    #[inline]
    fn victim(&self, st: &mut SetState<'_>, eligible: u32, _valid: u32) -> usize {
        oldest(st.bytes, eligible)
    }

    #[inline]
    fn on_evict(&self, st: &mut SetState<'_>, slot: usize, _tag: u64, valid: u32) {
        unlink(st.bytes, slot, valid);
    }

    #[inline]
    fn on_remove(&self, st: &mut SetState<'_>, slot: usize, valid: u32) {
        unlink(st.bytes, slot, valid);
    }
}

#[cfg(test)]
mod tests {
    use super::super::model::testing::{self, Op, RefList, Step};
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
    fn hit_protects_from_eviction() {
        let mut m = SetModel::new(PolicyKind::Lru, 4);
        for (i, t) in [1, 2, 3, 4].into_iter().enumerate() {
            assert_eq!(m.access(t), miss(i, None));
        }
        assert_eq!(m.bytes(), [3, 2, 1, 0]);
        assert_eq!(m.access(1), Access::Hit { slot: 0 });
        assert_eq!(m.bytes(), [0, 3, 2, 1]);
        // 2 is now the least recent.
        assert_eq!(m.access(5), miss(1, Some(2)));
        assert_eq!(m.access(3), Access::Hit { slot: 2 });
        assert_eq!(m.access(6), miss(3, Some(4)));
        assert_eq!(m.access(7), miss(0, Some(1)));
        assert_eq!(m.access(8), miss(1, Some(5)));
        assert_eq!(m.access(9), miss(2, Some(3)));
        assert_eq!(m.bytes(), [2, 1, 0, 3]);
    }

    #[test]
    fn larger_set_follows_recency() {
        let mut m = SetModel::new(PolicyKind::Lru, 12);
        for t in 0..12 {
            assert_eq!(m.access(t), miss(t as usize, None));
        }
        // Touch the even pages, newest last: 0, 2, ..., 10.
        for t in (0..12).step_by(2) {
            assert_eq!(m.access(t), Access::Hit { slot: t as usize });
        }
        // The odd pages go first, oldest first, then the even ones in the
        // order they were touched.
        let mut evicted = Vec::new();
        for t in 100..112 {
            match m.access(t) {
                Access::Miss {
                    evicted: Some(e), ..
                } => evicted.push(e),
                other => panic!("unexpected {other:?}"),
            }
        }
        assert_eq!(evicted, [1, 3, 5, 7, 9, 11, 0, 2, 4, 6, 8, 10]);
    }

    #[test]
    fn pinned_and_dirty_pages() {
        let mut m = SetModel::new(PolicyKind::Lru, 4);
        for t in 1..=4 {
            m.access(t);
        }
        // LRU order: 1, 2, 3, 4. Pin 1, dirty 2: 3 goes first.
        assert!(m.pin(1));
        assert!(m.set_dirty(2, true));
        assert_eq!(m.access(5), miss(2, Some(3)));
        // Order 1, 2, 4, 5; clean unpinned: 4, 5.
        assert_eq!(m.access(6), miss(3, Some(4)));
        // Dirty everything: 2 (dirty, oldest unpinned) goes.
        for t in [5, 6] {
            assert!(m.set_dirty(t, true));
        }
        assert_eq!(m.access(7), miss(1, Some(2)));
        for t in [5, 6, 7] {
            assert!(m.pin(t));
        }
        assert_eq!(m.access(8), Access::AllPinned);
        assert!(m.unpin(6));
        assert_eq!(m.access(8), miss(3, Some(6)));
    }

    #[test]
    fn remove_keeps_ranks_dense() {
        let mut m = SetModel::new(PolicyKind::Lru, 4);
        for t in 1..=4 {
            m.access(t);
        }
        assert!(m.remove(2));
        assert_eq!(m.bytes(), [2, 0, 1, 0]);
        // The freed slot is filled without an eviction.
        assert_eq!(m.access(9), miss(1, None));
        assert_eq!(m.access(10), miss(0, Some(1)));
    }

    fn check(step: &Step<'_>) {
        testing::assert_ranks_permutation(step.after, 0xff);
    }

    proptest! {
        #[test]
        fn consistent_with_reference(assoc in 4usize..=32, ops in testing::ops(64, 300)) {
            let mut reference = RefList::default();
            testing::run(PolicyKind::Lru, assoc, &ops, |step, op| {
                reference.follow(step, op, true);
                check(step);
            })?;
        }

        #[test]
        fn consistent_small(ops in testing::ops(10, 300)) {
            let mut reference = RefList::default();
            testing::run(PolicyKind::Lru, 4, &ops, |step, op: &Op| {
                reference.follow(step, op, true);
                check(step);
            })?;
        }
    }
}
