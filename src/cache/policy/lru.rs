//! Exact least-recently-used order within one set.
//!
//! Each valid slot's byte is its recency rank among the valid slots: 0 for the
//! most recently used page, `n_valid - 1` for the least recently used one; the
//! ranks of the valid slots are always a permutation of `0..n_valid`. A hit
//! moves the slot to rank 0, an insertion enters at rank 0, and an eviction or
//! removal closes the gap. The victim is the eligible slot with the highest
//! rank, i.e. the least recently used page that the cache allows to evict.
//! Empty slots hold 0. The set word and the ghost entries are unused.

use super::common::{move_to_front, rank};
use super::{Fifo, Policy, SetState};

/// Exact LRU within the set (see the [module documentation](self)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Lru;

/// LRU is [`Fifo`] (insertion at rank 0, the oldest eligible slot as the
/// victim, the gap closed on eviction and removal) plus a move to the front on
/// every hit.
impl Policy for Lru {
    #[inline]
    fn hit_changes(&self, byte: u8) -> bool {
        // Already the most recent: moving it to the front changes nothing.
        rank(byte) != 0
    }

    #[inline]
    fn on_hit(&self, st: &mut SetState<'_>, slot: usize, valid: u32) {
        move_to_front(st.bytes, slot, valid);
    }

    #[inline]
    fn on_insert(&self, st: &mut SetState<'_>, slot: usize, tag: u64, valid: u32) -> bool {
        Fifo.on_insert(st, slot, tag, valid)
    }

    #[inline]
    fn victim(&self, st: &mut SetState<'_>, eligible: u32, valid: u32) -> usize {
        Fifo.victim(st, eligible, valid)
    }

    #[inline]
    fn on_remove(&self, st: &mut SetState<'_>, slot: usize, valid: u32) {
        Fifo.on_remove(st, slot, valid);
    }
}

#[cfg(test)]
mod tests {
    use super::super::model::testing::{self, RefList, evictions, filled, miss, model_with};
    use super::super::{Access, PolicyKind};

    #[test]
    fn hit_protects_from_eviction() {
        let mut m = filled(PolicyKind::Lru, 4, [1, 2, 3, 4]);
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
        let mut m = filled(PolicyKind::Lru, 12, 0..12);
        // Touch the even pages, newest last: 0, 2, ..., 10.
        for t in (0..12).step_by(2) {
            assert_eq!(m.access(t), Access::Hit { slot: t as usize });
        }
        // The odd pages go first, oldest first, then the even ones in the
        // order they were touched (every one of the 12 misses evicts).
        assert_eq!(
            evictions(&mut m, 100..112),
            [1, 3, 5, 7, 9, 11, 0, 2, 4, 6, 8, 10]
        );
    }

    #[test]
    fn pinned_and_dirty_pages() {
        // LRU order: 1, 2, 3, 4. Pin 1, dirty 2: 3 goes first.
        let mut m = model_with(PolicyKind::Lru, 4, 1..=4);
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
        let mut m = model_with(PolicyKind::Lru, 4, 1..=4);
        assert!(m.remove(2));
        assert_eq!(m.bytes(), [2, 0, 1, 0]);
        // The freed slot is filled without an eviction.
        assert_eq!(m.access(9), miss(1, None));
        assert_eq!(m.access(10), miss(0, Some(1)));
    }

    testing::property_tests!(consistent_with_reference, small: (10, 300), |assoc, ops| {
        testing::run_ranked(PolicyKind::Lru, assoc, ops, RefList::new(true), 0xff)
    });
}
