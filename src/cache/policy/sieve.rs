//! SIEVE (Zhang et al., NSDI '24) within one set.
//!
//! SIEVE keeps the pages in insertion order with one "visited" bit each. New
//! pages enter at the head, unvisited; a hit sets the bit and moves nothing.
//! A hand walks from the tail (oldest) toward the head (newest): a visited page
//! has its bit cleared and is passed, and the first unvisited page is evicted.
//! The hand then rests on the next newer page and resumes from there at the
//! next eviction; past the head it starts again from the tail.
//!
//! Adaptation to one set:
//!
//! - The queue is the set's valid slots ordered by insertion rank: the low five
//!   bits of a slot's byte hold its rank (0 = head, newest), bit 7 is the
//!   visited bit. Ranks are a permutation of `0..n_valid`, so the queue needs
//!   no links.
//! - The set word is the hand: 0 means "at the tail", `slot + 1` means "at the
//!   page in `slot`". Pointing at a slot rather than a rank keeps the hand on
//!   its page while insertions shift the ranks. When the hand's page leaves
//!   (evicted or removed), the hand moves to the next newer page, or to the
//!   tail if it was the head.
//! - Ineligible pages (pinned, busy, or dirty while clean pages exist) are
//!   passed by the hand without being touched: their visited bits survive.
//!   Every eligible bit is cleared within one pass, so a search ends within two.
//! - The victim is remembered as the hand's position, so if the owner does not
//!   evict it after all, the next search starts from it again.
//!
//! The ghost entries are unused; empty slots hold 0.

use super::common::{for_each_slot, rank, slot_at_rank, unlink};
use super::{Fifo, Policy, SetState};

/// The visited bit of a slot byte.
const VISITED: u8 = 0x80;

/// SIEVE within the set (see the [module documentation](self)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Sieve;

impl Policy for Sieve {
    #[inline]
    fn hit_changes(&self, byte: u8) -> bool {
        byte & VISITED == 0
    }

    #[inline]
    fn on_hit(&self, st: &mut SetState<'_>, slot: usize, _valid: u32) {
        st.bytes[slot] |= VISITED;
    }

    #[inline]
    fn on_insert(&self, st: &mut SetState<'_>, slot: usize, tag: u64, valid: u32) -> bool {
        // The page enters the queue at the head, unvisited: a FIFO insertion.
        Fifo.on_insert(st, slot, tag, valid)
    }

    #[inline]
    fn victim(&self, st: &mut SetState<'_>, eligible: u32, valid: u32) -> usize {
        debug_assert_ne!(eligible, 0);
        let n = valid.count_ones() as usize;
        // by_rank[r] = the slot of rank r.
        let mut by_rank = [0u8; super::MAX_ASSOC];
        for_each_slot(valid, |s| by_rank[usize::from(rank(st.bytes[s]))] = s as u8);
        let hand = (*st.word as usize).wrapping_sub(1);
        let mut r = if hand < st.bytes.len() && valid & (1 << hand) != 0 {
            usize::from(rank(st.bytes[hand]))
        } else {
            n - 1
        };
        for _ in 0..=2 * n {
            let s = usize::from(by_rank[r]);
            if eligible & (1 << s) != 0 {
                if st.bytes[s] & VISITED == 0 {
                    *st.word = s as u32 + 1;
                    return s;
                }
                st.bytes[s] &= !VISITED;
            }
            r = if r == 0 { n - 1 } else { r - 1 };
        }
        unreachable!("the eligible mask {eligible:#b} is not within the valid mask {valid:#b}")
    }

    /// The page in `slot` leaves the queue (evicted or removed): move the
    /// hand off it, then unlink.
    #[inline]
    fn on_remove(&self, st: &mut SetState<'_>, slot: usize, valid: u32) {
        if *st.word as usize == slot + 1 {
            let r = rank(st.bytes[slot]);
            *st.word = if r == 0 {
                0
            } else {
                slot_at_rank(st.bytes, valid, r - 1).map_or(0, |s| s as u32 + 1)
            };
        }
        unlink(st.bytes, slot, valid);
    }
}

#[cfg(test)]
mod tests {
    use super::super::model::testing::{self, Follow, Op, Step, evictions, miss, model_with};
    use super::super::{Access, PolicyKind, SetModel};
    use super::VISITED;

    #[test]
    fn visited_page_survives_a_scan() {
        let mut m = model_with(PolicyKind::Sieve, 4, [1, 2, 3, 4, 1]);
        assert_eq!(m.bytes(), [3 | VISITED, 2, 1, 0]);
        // The hand starts at the tail: 1 loses its bit, 2 goes, and the hand
        // rests on 3.
        assert_eq!(m.access(5), miss(1, Some(2)));
        assert_eq!(m.bytes(), [3, 0, 2, 1]);
        assert_eq!(m.word(), 3);
        assert_eq!(m.access(6), miss(2, Some(3)));
        assert_eq!(m.access(7), miss(3, Some(4)));
        // The hand never gets back to 1 while only new pages arrive (LRU
        // would evict 1 at the next miss).
        assert_eq!(evictions(&mut m, 8..20), (5..17).collect::<Vec<_>>());
        assert!(m.contains(1));
        let mut lru = SetModel::new(PolicyKind::Lru, 4);
        assert_eq!(
            evictions(&mut lru, [1, 2, 3, 4, 1, 5, 6, 7, 8]),
            [2, 3, 4, 1]
        );
    }

    #[test]
    fn hand_wraps_from_head_to_tail() {
        let mut m = model_with(PolicyKind::Sieve, 4, [1, 2, 3, 4, 1, 2, 3]);
        // 1..3 lose their bits, the head (4) goes, the hand wraps to the tail.
        assert_eq!(m.access(5), miss(3, Some(4)));
        assert_eq!(m.word(), 0);
        assert_eq!(m.bytes(), [3, 2, 1, 0]);
        assert_eq!(m.access(6), miss(0, Some(1)));
        assert_eq!(m.word(), 2);
        m.access(3);
        // The hand is on 2 (unvisited).
        assert_eq!(m.access(7), miss(1, Some(2)));
        // Now on 3 (visited): cleared; 5 goes.
        assert_eq!(m.access(8), miss(3, Some(5)));
        assert_eq!(m.word(), 1);
    }

    #[test]
    fn twelve_slot_hot_pages_stay() {
        testing::scan_spares_hot_pages(PolicyKind::Sieve);
        // The same under LRU flushes the hot pages.
        let mut lru = model_with(PolicyKind::Lru, 12, (0..12).chain(0..6));
        evictions(&mut lru, 100..162);
        assert!((0..6).all(|t| !lru.contains(t)));
    }

    #[test]
    fn hand_passes_ineligible_pages_untouched() {
        let mut m = model_with(PolicyKind::Sieve, 4, [1, 2, 3, 4, 1, 2]);
        assert!(m.pin(1));
        assert!(m.set_dirty(3, true));
        assert_eq!(m.access(5), miss(3, Some(4)));
        // 1 is still visited; 2 lost its bit; the hand wrapped to the tail.
        assert_eq!(m.bytes(), [3 | VISITED, 2, 1, 0]);
        assert_eq!(m.word(), 0);
        assert_eq!(m.access(6), miss(1, Some(2)));
        for t in [5, 6] {
            assert!(m.pin(t));
        }
        // Only the dirty page can go.
        assert_eq!(m.access(7), miss(2, Some(3)));
        assert!(m.pin(7));
        assert_eq!(m.access(8), Access::AllPinned);
        // Unpinned, 1 gets its second chance first: 1 is cleared, then the
        // hand comes around to it.
        assert!(m.unpin(1));
        assert_eq!(m.access(8), miss(0, Some(1)));
    }

    #[test]
    fn removing_the_hands_page_moves_the_hand() {
        let mut m = model_with(PolicyKind::Sieve, 4, [1, 2, 3, 4, 5]);
        // 1 went; the hand is on 2 (slot 1).
        assert_eq!(m.word(), 2);
        assert!(m.remove(2));
        assert_eq!(m.word(), 3);
        assert!(m.remove(5));
        assert_eq!(m.word(), 3);
        assert!(m.remove(4));
        assert!(m.remove(3));
        assert_eq!(m.word(), 0);
    }

    /// A list-based SIEVE: `queue` from tail (oldest) to head.
    #[derive(Default)]
    struct Reference {
        queue: Vec<(u64, bool)>,
        hand: Option<u64>,
    }

    impl Reference {
        fn pos(&self, t: u64) -> usize {
            self.queue.iter().position(|e| e.0 == t).unwrap()
        }

        fn leave(&mut self, t: u64) {
            let i = self.pos(t);
            if self.hand == Some(t) {
                self.hand = self.queue.get(i + 1).map(|e| e.0);
            }
            self.queue.remove(i);
        }
    }

    impl Follow for Reference {
        fn follow(&mut self, step: &Step<'_>, op: &Op) {
            match (*op, step.access) {
                (Op::Access(t), Some(Access::Hit { .. })) => {
                    let i = self.pos(t);
                    self.queue[i].1 = true;
                }
                (Op::Access(t), Some(Access::Miss { evicted, .. })) => {
                    if let Some(e) = evicted {
                        let eligible = testing::eligible_tags(step.before);
                        let mut i = self.hand.map_or(0, |h| self.pos(h));
                        let victim = loop {
                            let (tag, visited) = self.queue[i];
                            if eligible.contains(&tag) {
                                if !visited {
                                    break tag;
                                }
                                self.queue[i].1 = false;
                            }
                            i = (i + 1) % self.queue.len();
                        };
                        assert_eq!(e, victim);
                        self.hand = Some(victim);
                        self.leave(victim);
                    }
                    self.queue.push((t, false));
                }
                (Op::Remove(t), _) if step.before.contains(t) => self.leave(t),
                _ => {}
            }
            let m = step.after;
            let mut order = testing::by_rank(m);
            order.reverse();
            let tags: Vec<u64> = self.queue.iter().map(|e| e.0).collect();
            assert_eq!(order, tags);
            for &(t, visited) in &self.queue {
                let b = m.bytes()[m.slot_of(t).unwrap()];
                assert_eq!(b & VISITED != 0, visited, "visited bit of {t}");
                assert_eq!(b & 0x60, 0);
            }
            let hand = (m.word() as usize)
                .checked_sub(1)
                .map(|s| m.tag_at(s).unwrap());
            assert_eq!(hand, self.hand);
        }
    }

    testing::property_tests!(consistent_with_reference, small: (10, 400), |assoc, ops| {
        testing::run_ranked(PolicyKind::Sieve, assoc, ops, Reference::default(), 0x1f)
    });
}
