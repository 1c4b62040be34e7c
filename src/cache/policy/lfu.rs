//! Least frequently used within one set, with 1-byte counters (the SA-cache
//! policy).
//!
//! Each valid slot's byte is its page's access counter. A new page starts at
//! 1; a hit adds 1. When a counter at 255 is hit, every counter of the set is
//! first halved (shifted right by one), which also ages the set: old
//! frequencies lose weight against new ones. The victim is the eligible slot
//! with the smallest counter.
//!
//! Ties are broken round-robin: the set word holds a cursor, the slot after
//! the previous victim, and among the slots with the smallest counter the first
//! one at or after the cursor (cyclically) is chosen. Since a missing page is
//! placed into the victim's slot, this spreads evictions over the slots
//! instead of always reusing the same one as a lowest-index rule would;
//! among equally used pages it takes the one inserted longest ago only while
//! their counts have been equal all along (pages whose counts differed and
//! then evened out go in slot order from the cursor). Empty slots
//! hold 0; the ghost entries are unused.

use super::{Policy, SetState};

/// LFU within the set (see the [module documentation](self)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Lfu;

/// Halves every counter in `bytes`.
#[inline]
fn halve(bytes: &mut [u8]) {
    for b in bytes {
        *b >>= 1;
    }
}

/// A hit on `slot`: adds one to its counter, halving all counters of the set
/// (and `ghost_bytes`, the counters of non-resident pages) first if the counter
/// is saturated.
#[inline]
pub(crate) fn count_hit(st: &mut SetState<'_>, slot: usize) {
    if st.bytes[slot] == u8::MAX {
        halve(st.bytes);
        halve(st.ghost_bytes);
    }
    st.bytes[slot] += 1;
}

/// The eligible slot with the smallest counter, ties going to the first one
/// at or after the cursor in the set word; advances the cursor past it.
#[inline]
fn least_used(st: &mut SetState<'_>, eligible: u32) -> usize {
    debug_assert_ne!(eligible, 0);
    let n = st.bytes.len();
    let cursor = *st.word as usize % n;
    // Key: the counter, then the distance from the cursor going forward; the
    // ineligible slots get a key above every eligible one. Taking the minimum
    // without a data-dependent branch per slot keeps this predictable.
    let mut best = 0;
    let mut best_key = u32::MAX;
    for (j, &c) in st.bytes.iter().enumerate() {
        let dist = if j >= cursor {
            j - cursor
        } else {
            j + n - cursor
        };
        let ineligible = u32::from((eligible >> j) & 1 == 0);
        let key = (ineligible << 16) | (u32::from(c) << 8) | dist as u32;
        if key < best_key {
            best_key = key;
            best = j;
        }
    }
    *st.word = ((best + 1) % n) as u32;
    best
}

impl Policy for Lfu {
    #[inline]
    fn on_hit(&self, st: &mut SetState<'_>, slot: usize, _valid: u32) {
        count_hit(st, slot);
    }

    #[inline]
    fn on_insert(&self, st: &mut SetState<'_>, slot: usize, _tag: u64, _valid: u32) -> bool {
        st.bytes[slot] = 1;
        false
    }

    #[inline]
    fn victim(&self, st: &mut SetState<'_>, eligible: u32, _valid: u32) -> usize {
        least_used(st, eligible)
    }
}

#[cfg(test)]
mod tests {
    use super::super::model::testing::{self, Step, filled, miss, model_with};
    use super::super::{Access, PolicyKind};

    #[test]
    fn least_used_goes_first_ties_round_robin() {
        let mut m = filled(PolicyKind::Lfu, 4, 1..=4);
        m.access(1);
        m.access(1);
        m.access(2);
        assert_eq!(m.bytes(), [3, 2, 1, 1]);
        // 3 and 4 tie at 1; the cursor is at slot 0, so slot 2 comes first.
        assert_eq!(m.access(5), miss(2, Some(3)));
        assert_eq!(m.word(), 3);
        // 5 (slot 2) and 4 (slot 3) tie; the cursor is at slot 3.
        assert_eq!(m.access(6), miss(3, Some(4)));
        assert_eq!(m.word(), 0);
        assert_eq!(m.access(7), miss(2, Some(5)));
        assert_eq!(m.access(8), miss(3, Some(6)));
        // A page used more often outlives the newcomers.
        m.access(8);
        m.access(8);
        m.access(8);
        assert_eq!(m.bytes(), [3, 2, 1, 4]);
        assert_eq!(m.access(9), miss(2, Some(7)));
        assert_eq!(m.access(10), miss(2, Some(9)));
        m.access(10);
        m.access(10);
        assert_eq!(m.access(11), miss(1, Some(2)));
    }

    #[test]
    fn saturated_counter_halves_the_set() {
        // 1 gets 254 more accesses, 2 three more.
        let hits = std::iter::repeat_n(1, 254).chain(std::iter::repeat_n(2, 3));
        let mut m = model_with(PolicyKind::Lfu, 4, (1..=4).chain(hits));
        assert_eq!(m.bytes(), [255, 4, 1, 1]);
        m.access(1);
        assert_eq!(m.bytes(), [128, 2, 0, 0]);
        m.access(2);
        assert_eq!(m.bytes(), [128, 3, 0, 0]);
        // Halved-to-zero pages are the first victims; a newcomer at 1 beats them.
        assert_eq!(m.access(5), miss(2, Some(3)));
        assert_eq!(m.access(6), miss(3, Some(4)));
        assert_eq!(m.bytes(), [128, 3, 1, 1]);
    }

    #[test]
    fn twelve_slots_by_frequency() {
        // Page t gets t more accesses (counter t + 1), except page 5.
        let hits = (0..12u64)
            .filter(|&t| t != 5)
            .flat_map(|t| std::iter::repeat_n(t, t as usize));
        let mut m = model_with(PolicyKind::Lfu, 12, (0..12).chain(hits));
        assert_eq!(m.access(100), miss(0, Some(0)));
        // 100 (slot 0) and 5 (slot 5) both count 1; the cursor is at slot 1.
        assert_eq!(m.access(101), miss(5, Some(5)));
        // Now 100 (slot 0) and 101 (slot 5); cursor at 6, wraps to slot 0.
        assert_eq!(m.access(102), miss(0, Some(100)));
        assert_eq!(m.access(103), miss(5, Some(101)));
        for _ in 0..2 {
            m.access(102);
            m.access(103);
        }
        // Counters: 102 and 103 at 3; page 1 at 2 is now the least used.
        assert_eq!(m.access(104), miss(1, Some(1)));
    }

    #[test]
    fn pinned_and_dirty_are_respected() {
        let mut m = model_with(PolicyKind::Lfu, 4, [1, 2, 3, 4, 4]);
        assert!(m.pin(1));
        assert!(m.set_dirty(2, true));
        // Clean unpinned: 3 (1), 4 (2).
        assert_eq!(m.access(5), miss(2, Some(3)));
        assert!(m.set_dirty(5, true));
        assert_eq!(m.access(6), miss(3, Some(4)));
        assert!(m.pin(6));
        // Only dirty unpinned pages remain: 2 and 5 at 1; cursor at slot 0.
        assert_eq!(m.access(7), miss(1, Some(2)));
        assert!(m.pin(7));
        assert!(m.pin(5));
        assert_eq!(m.access(8), Access::AllPinned);
        assert_eq!(m.bytes(), [1, 1, 1, 1]);
    }

    fn check(step: &Step<'_>) {
        let (before, after) = (step.before, step.after);
        if let Some(slot) = testing::victim_slot(step) {
            // The victim had the smallest counter among the eligible pages.
            testing::assert_least_counter(before, slot);
            assert_eq!(after.bytes()[slot], 1);
        }
        for s in 0..after.assoc() {
            if after.tag_at(s).is_some() && !matches!(step.access, Some(Access::Hit { .. })) {
                // Counters only change on hits (insertions start at 1).
                let fresh = matches!(step.access, Some(Access::Miss { slot, .. }) if slot == s);
                if !fresh {
                    assert_eq!(after.bytes()[s], before.bytes()[s]);
                }
            }
        }
        assert!((after.word() as usize) < after.assoc());
    }

    testing::property_tests!(consistent, small: (8, 400), |assoc, ops| {
        testing::run(PolicyKind::Lfu, assoc, ops, |step, _| check(step))
    });
}
