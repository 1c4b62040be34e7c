//! LFU with non-resident ("ghost") counters, the SA-cache's NR-LFU.
//!
//! Resident pages are handled exactly as by [`Lfu`]: 1-byte counters starting
//! at 1, halving of the whole set when a counter at 255 is hit, the smallest
//! counter evicted first, ties broken round-robin from the cursor in the set
//! word.
//!
//! In addition the set remembers the counters of its most recently evicted
//! pages: [`Policy::ghosts`] asks for `assoc / 2` ghost entries (2 to 16),
//! each a tag and its counter at eviction, i.e. 9 bytes per entry and at most
//! `9 * assoc / 2` bytes per set (54 bytes for a 12-slot set, 144 bytes for
//! 32). The entries form a FIFO, newest first: an eviction records the victim
//! as the newest ghost and, when the list is full, forgets the oldest one.
//! (Replacing the ghost with the lowest counter instead would let old, high
//! counts squat in the list forever; the SA-cache keeps the *most recently
//! seen* non-resident pages.) Halving the set halves the ghost counters too,
//! so both stay on one scale.
//!
//! When a page is inserted, its tag is looked up among the ghosts; if found,
//! it starts from its old counter plus one (this access), the ghost entry is
//! removed and the insertion reports a ghost hit. A ghost counter of 255
//! halves the set first, like a hit on a saturated counter. Pages that leave
//! the set without being evicted ([`Policy::on_remove`]) leave no ghost.

use super::common::{ghost_push, ghost_take};
use super::lfu::count_hit;
use super::{Lfu, Policy, SetState};

/// LFU with ghost counters (see the [module documentation](self)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct NrLfu;

/// NR-LFU is [`Lfu`] plus the ghosts: only insertion (which looks the page
/// up among the ghosts) and eviction (which records one) differ.
impl Policy for NrLfu {
    #[inline]
    fn ghosts(&self, assoc: usize) -> usize {
        assoc / 2
    }

    #[inline]
    fn on_hit(&self, st: &mut SetState<'_>, slot: usize, valid: u32) {
        Lfu.on_hit(st, slot, valid);
    }

    #[inline]
    fn on_insert(&self, st: &mut SetState<'_>, slot: usize, tag: u64, valid: u32) -> bool {
        match ghost_take(st.ghost_tags, st.ghost_bytes, tag) {
            Some(count) => {
                // The old counter, then this access counted as a hit (which
                // halves the set first if the old counter is saturated).
                st.bytes[slot] = count;
                count_hit(st, slot);
                true
            }
            None => Lfu.on_insert(st, slot, tag, valid),
        }
    }

    #[inline]
    fn victim(&self, st: &mut SetState<'_>, eligible: u32, valid: u32) -> usize {
        Lfu.victim(st, eligible, valid)
    }

    #[inline]
    fn on_evict(&self, st: &mut SetState<'_>, slot: usize, tag: u64, valid: u32) {
        ghost_push(st.ghost_tags, st.ghost_bytes, tag, st.bytes[slot]);
        Lfu.on_evict(st, slot, tag, valid);
    }
}

#[cfg(test)]
mod tests {
    use super::super::model::testing::{self, Step, ghost_miss as miss, model_with};
    use super::super::{Access, NO_TAG, Policy, PolicyKind, SetModel, SetState};
    use super::NrLfu;
    use std::iter::repeat_n;

    /// Fills a 4-slot set with 1..=4 and gives 1 the counter 3 and the others 5.
    fn warmed(kind: PolicyKind) -> SetModel {
        let hits = repeat_n(1, 2).chain((2..=4).flat_map(|t| repeat_n(t, 4)));
        let m = model_with(kind, 4, (1..=4).chain(hits));
        assert_eq!(m.bytes(), [3, 5, 5, 5]);
        m
    }

    #[test]
    fn evicted_page_gets_its_count_back() {
        let mut m = warmed(PolicyKind::NrLfu);
        assert_eq!(m.ghost_tags(), [NO_TAG, NO_TAG]);
        assert_eq!(m.access(9), miss(0, Some(1), false));
        assert_eq!(m.ghost_tags(), [1, NO_TAG]);
        assert_eq!(m.ghost_bytes(), [3, 0]);
        // 1 comes back: 9 (counter 1) goes, 1 resumes at 3 + 1.
        assert_eq!(m.access(1), miss(0, Some(9), true));
        assert_eq!(m.bytes(), [4, 5, 5, 5]);
        assert_eq!(m.ghost_tags(), [9, NO_TAG]);
        assert_eq!(m.ghost_bytes(), [1, 0]);
        // Plain LFU brings 1 back at 1.
        let mut lfu = warmed(PolicyKind::Lfu);
        assert_eq!(lfu.access(9), miss(0, Some(1), false));
        assert_eq!(lfu.access(1), miss(0, Some(9), false));
        assert_eq!(lfu.bytes(), [1, 5, 5, 5]);
    }

    #[test]
    fn ghost_list_keeps_the_most_recent_evictions() {
        let mut m = warmed(PolicyKind::NrLfu);
        assert_eq!(m.access(10), miss(0, Some(1), false));
        assert_eq!(m.access(11), miss(0, Some(10), false));
        assert_eq!(m.access(12), miss(0, Some(11), false));
        // The oldest ghost (1) was dropped.
        assert_eq!(m.ghost_tags(), [11, 10]);
        assert_eq!(m.ghost_bytes(), [1, 1]);
        // The victim (12) becomes a ghost before 11 is looked up, pushing
        // out 10; 11 is still found.
        assert_eq!(m.access(11), miss(0, Some(12), true));
        assert_eq!(m.bytes()[0], 2);
        assert_eq!(m.ghost_tags(), [12, NO_TAG]);
        // 1 was forgotten: it starts over.
        assert_eq!(m.access(1), miss(0, Some(11), false));
        assert_eq!(m.bytes()[0], 1);
        assert_eq!(m.ghost_tags(), [11, 12]);
        assert_eq!(m.ghost_bytes(), [2, 1]);
        // Removal leaves no ghost.
        assert!(m.remove(1));
        assert_eq!(m.ghost_tags(), [11, 12]);
    }

    #[test]
    fn halving_reaches_the_ghosts() {
        let mut m = warmed(PolicyKind::NrLfu);
        m.access(9); // evicts 1 with counter 3
        for _ in 0..250 {
            m.access(2);
        }
        assert_eq!(m.bytes(), [1, 255, 5, 5]);
        m.access(2);
        assert_eq!(m.bytes(), [0, 128, 2, 2]);
        assert_eq!(m.ghost_bytes(), [1, 0]);
        assert_eq!(m.access(1), miss(0, Some(9), true));
        assert_eq!(m.bytes(), [2, 128, 2, 2]);
    }

    #[test]
    fn saturated_ghost_counter_halves_the_set() {
        let mut bytes = [10u8, 20, 0, 0];
        let mut word = 0;
        let mut ghost_tags = [7u64, NO_TAG];
        let mut ghost_bytes = [255u8, 0];
        let mut st = SetState {
            bytes: &mut bytes,
            word: &mut word,
            ghost_tags: &mut ghost_tags,
            ghost_bytes: &mut ghost_bytes,
            duel: &super::super::IDLE_DUEL,
        };
        assert!(NrLfu.on_insert(&mut st, 2, 7, 0b0011));
        assert!(!NrLfu.on_insert(&mut st, 3, 8, 0b0111));
        assert_eq!(bytes, [5, 10, 128, 1]);
        assert_eq!(ghost_tags, [NO_TAG, NO_TAG]);
    }

    #[test]
    fn twelve_slots_remember_six() {
        let mut m = model_with(
            PolicyKind::NrLfu,
            12,
            (0..12).flat_map(|t| repeat_n(t, t as usize + 1)),
        );
        assert_eq!(m.ghost_tags().len(), 6);
        // Counters are t + 1; push out 0..7 with newcomers that each get
        // enough hits to stay.
        for (i, t) in (100..108u64).enumerate() {
            let res = m.access(t);
            assert_eq!(res, miss(i, Some(i as u64), false));
            for _ in 0..20 {
                m.access(t);
            }
        }
        assert_eq!(m.ghost_tags(), [7, 6, 5, 4, 3, 2]);
        assert_eq!(m.ghost_bytes(), [8, 7, 6, 5, 4, 3]);
        // 5 returns with 6 + 1 and displaces 8 (counter 9).
        assert_eq!(m.access(5), miss(8, Some(8), true));
        assert_eq!(m.bytes()[8], 7);
        assert_eq!(m.ghost_tags(), [8, 7, 6, 4, 3, NO_TAG]);
        // 1 fell off the list: it starts over.
        assert_eq!(m.access(1), miss(8, Some(5), false));
        assert_eq!(m.bytes()[8], 1);
        assert_eq!(m.ghost_tags(), [5, 8, 7, 6, 4, 3]);
        assert_eq!(m.ghost_bytes(), [7, 9, 8, 7, 5, 4]);
    }

    #[test]
    fn pins_and_dirty_pages() {
        let mut m = warmed(PolicyKind::NrLfu);
        assert!(m.pin(1));
        assert_eq!(m.access(9), miss(1, Some(2), false));
        assert!(m.set_dirty(9, true));
        assert_eq!(m.access(10), miss(2, Some(3), false));
        for t in [9, 10, 4] {
            assert!(m.pin(t));
        }
        assert_eq!(m.access(11), Access::AllPinned);
        assert_eq!(m.ghost_tags(), [3, 2]);
    }

    fn check(step: &Step<'_>) {
        let (before, after) = (step.before, step.after);
        if let Some(Access::Miss {
            slot,
            evicted,
            ghost_hit,
        }) = step.access
        {
            if let Some(e) = evicted {
                testing::assert_least_counter(before, slot);
                // The victim is now the newest ghost, with its counter.
                assert_eq!(after.ghost_tags()[0], e);
            }
            let t = after.tag_at(slot).unwrap();
            if ghost_hit {
                let i = before.ghost_tags().iter().position(|&g| g == t).unwrap();
                let old = before.ghost_bytes()[i];
                if old < u8::MAX {
                    assert_eq!(after.bytes()[slot], old + 1);
                }
            } else {
                assert_eq!(after.bytes()[slot], 1);
            }
        }
    }

    testing::property_tests!(consistent, small: (10, 400), |assoc, ops| {
        testing::run(PolicyKind::NrLfu, assoc, ops, |step, _| check(step))
    });
}
