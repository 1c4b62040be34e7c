//! LIRS (Jiang and Zhang, SIGMETRICS 2002) within one set.
//!
//! LIRS ranks pages by their inter-reference recency (how many other pages
//! were touched between a page's last two accesses) instead of by recency
//! alone. Pages with a short one are LIR pages and stay resident; the others
//! are HIR pages, of which only a few are resident, and those few are the
//! only victims. A page that comes back while its previous access is still
//! remembered (it is in the "stack") has a short inter-reference recency and
//! becomes LIR, pushing the oldest LIR page down to HIR. A loop larger than
//! the set thus keeps `assoc - 1` of its pages resident and hitting, where
//! LRU and CLOCK keep none.
//!
//! Adaptation to one set:
//!
//! - The stack S is a recency order over the resident pages that are in it
//!   and the ghost entries (non-resident HIR pages still in S). Each entry's
//!   rank (0 = the top, the most recent) lives in the low five bits of its
//!   byte: the slot byte for a resident page, the ghost byte for a ghost. The
//!   ranks of all entries are a permutation of `0..entries`, which is why a
//!   set keeps at most `32 - assoc` ghosts (`assoc + ghosts <= 32`).
//! - Slot byte: bit 5 (`IN_STACK`) says the resident page is in S, bit 6
//!   (`LIR`) that it is a LIR page (LIR pages are always in S). Bit 7 is
//!   never used, which lets the adaptive policy keep a flag there.
//! - The bottom of S is always a LIR page: after every change, HIR entries at
//!   the bottom are pruned (a ghost is forgotten; a resident HIR page leaves S
//!   but stays resident).
//! - `assoc - 1` pages may be LIR (one resident HIR slot, two from 32-slot
//!   sets on). With one resident HIR page the queue Q of the
//!   paper holds one page, so it needs no order: the victim is the eligible
//!   resident HIR page (one out of S before one in S, then the oldest in S).
//!   If none is eligible (pinned, busy, dirty), the oldest eligible LIR page
//!   goes instead, and is forgotten as if removed.
//! - When the ghosts are full, the oldest ghost is forgotten to make room.
//! - With admission ([`Duel::admission`](super::Duel::admission), which the
//!   adaptive policy learns), no slot is kept for HIR pages: all `assoc`
//!   pages may be LIR, and a miss on a page that is not a ghost of the set,
//!   when the set holds no HIR page, is not admitted ([`Admit::No`]): the
//!   owner serves it without a slot and the page becomes a ghost on top of
//!   the stack ([`Policy::on_pass`]), so that it comes in as LIR if it comes
//!   back while remembered ([`Admit::Here`]). This is what global LIRS does
//!   with its 1% of resident HIR pages; one HIR slot in 12 would cost a loop
//!   a twelfth of its hits.
//!
//! The set word is unused.

use super::common::for_each_slot;
use super::{Admit, NO_TAG, Policy, SetState};

/// The bits of an entry's byte that hold its rank in the stack.
const RANK: u8 = 0x1f;
/// Slot byte flag: the resident page is in the stack.
pub(crate) const IN_STACK: u8 = 0x20;
/// Slot byte flag: the resident page is a LIR page.
pub(crate) const LIR: u8 = 0x40;

/// Resident HIR slots of a set of `assoc` slots with room for `ghosts`
/// ghosts: one, or two from 32 on; none when the set decides admission
/// (`admission`: see [`Duel::admission`](super::Duel::admission)), whose
/// pages may then all be LIR pages. A set whose stack's ranks leave room for
/// fewer than `assoc / 2` ghosts (more than 21 slots) keeps the shortfall as
/// resident HIR slots, with admission too: with no ghost, a page can become a LIR page only by a
/// hit while resident, and one HIR slot holds no working set of more than
/// one page (a set of 32 kept its first LIR pages for good).
pub(crate) fn hir_slots(assoc: usize, ghosts: usize, admission: bool) -> usize {
    let short = (assoc / 2).saturating_sub(ghosts);
    if admission {
        short
    } else {
        (assoc / 16).max(1).max(short)
    }
}

/// LIRS within the set (see the [module documentation](self)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Lirs;

/// A stack entry: a resident slot or a ghost.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Entry {
    Slot(usize),
    Ghost(usize),
}

/// Calls `f` on the byte of every stack entry.
#[inline]
fn each_entry(st: &mut SetState<'_>, mut f: impl FnMut(&mut u8)) {
    for b in st.bytes.iter_mut() {
        if *b & IN_STACK != 0 {
            f(b);
        }
    }
    for (t, b) in st.ghost_tags.iter().zip(st.ghost_bytes.iter_mut()) {
        if *t != NO_TAG {
            f(b);
        }
    }
}

/// Every entry ranked below `r` moves one place down (to make room on top).
#[inline]
fn bump_below(st: &mut SetState<'_>, r: u8) {
    each_entry(st, |b| *b += u8::from(*b & RANK < r));
}

/// Closes the gap that the entry of rank `r` left.
#[inline]
fn close_gap(st: &mut SetState<'_>, r: u8) {
    each_entry(st, |b| *b -= u8::from(*b & RANK > r));
}

/// The entry at the bottom of the stack (the highest rank), if any.
fn bottom(st: &SetState<'_>) -> Option<(Entry, u8)> {
    let mut best: Option<(Entry, u8)> = None;
    for (i, &b) in st.bytes.iter().enumerate() {
        if b & IN_STACK != 0 && best.is_none_or(|(_, r)| b & RANK > r) {
            best = Some((Entry::Slot(i), b & RANK));
        }
    }
    for (j, (&t, &b)) in st.ghost_tags.iter().zip(st.ghost_bytes.iter()).enumerate() {
        if t != NO_TAG && best.is_none_or(|(_, r)| b & RANK > r) {
            best = Some((Entry::Ghost(j), b & RANK));
        }
    }
    best
}

/// Removes HIR entries from the bottom until a LIR page is there.
fn prune(st: &mut SetState<'_>) {
    while let Some((e, _)) = bottom(st) {
        match e {
            Entry::Slot(i) if st.bytes[i] & LIR != 0 => return,
            Entry::Slot(i) => st.bytes[i] = 0,
            Entry::Ghost(j) => {
                st.ghost_tags[j] = NO_TAG;
                st.ghost_bytes[j] = 0;
            }
        }
    }
}

/// Puts the resident `slot` (not in the stack) on top with `flags`.
#[inline]
fn push(st: &mut SetState<'_>, slot: usize, flags: u8) {
    bump_below(st, RANK + 1);
    st.bytes[slot] = flags | IN_STACK;
}

/// Moves the resident `slot` (in the stack) to the top.
#[inline]
fn to_top(st: &mut SetState<'_>, slot: usize) {
    let r = st.bytes[slot] & RANK;
    bump_below(st, r);
    st.bytes[slot] &= !RANK;
}

/// The number of LIR pages among the slots of `valid`.
#[inline]
fn lir_count(st: &SetState<'_>, valid: u32) -> usize {
    let mut n = 0;
    for_each_slot(valid, |i| n += usize::from(st.bytes[i] & LIR != 0));
    n
}

/// Makes the oldest LIR page (the highest-ranked) a HIR page out of the stack.
fn demote_oldest_lir(st: &mut SetState<'_>) {
    let mut oldest: Option<(usize, u8)> = None;
    for (i, &b) in st.bytes.iter().enumerate() {
        if b & LIR != 0 && oldest.is_none_or(|(_, r)| b & RANK > r) {
            oldest = Some((i, b & RANK));
        }
    }
    if let Some((i, r)) = oldest {
        st.bytes[i] = 0;
        close_gap(st, r);
    }
}

/// Takes the resident `slot` out of the stack (if it is in it) and clears its
/// byte.
fn leave(st: &mut SetState<'_>, slot: usize) {
    let b = st.bytes[slot];
    st.bytes[slot] = 0;
    if b & IN_STACK != 0 {
        close_gap(st, b & RANK);
    }
}

impl Policy for Lirs {
    fn ghosts(&self, assoc: usize) -> usize {
        (assoc / 2).min(32 - assoc)
    }

    #[inline]
    fn hit_changes(&self, byte: u8) -> bool {
        // A LIR page already on top stays there.
        byte & (LIR | RANK) != LIR
    }

    fn on_hit(&self, st: &mut SetState<'_>, slot: usize, valid: u32) {
        let b = st.bytes[slot];
        if b & LIR != 0 {
            if b & RANK == 0 {
                return;
            }
            to_top(st, slot);
            prune(st);
        } else if b & IN_STACK != 0 {
            // A HIR page seen again while in the stack: its reuse is short.
            to_top(st, slot);
            st.bytes[slot] |= LIR;
            let max_lir = st.bytes.len()
                - hir_slots(st.bytes.len(), st.ghost_tags.len(), st.duel.admission());
            if lir_count(st, valid) > max_lir {
                demote_oldest_lir(st);
            }
            prune(st);
        } else {
            push(st, slot, 0);
        }
    }

    fn on_insert(&self, st: &mut SetState<'_>, slot: usize, tag: u64, valid: u32) -> bool {
        let ghost = st.ghost_tags.iter().position(|&t| t == tag);
        if let Some(j) = ghost {
            let r = st.ghost_bytes[j] & RANK;
            st.ghost_tags[j] = NO_TAG;
            st.ghost_bytes[j] = 0;
            close_gap(st, r);
        }
        let lirs = lir_count(st, valid);
        let max_lir =
            st.bytes.len() - hir_slots(st.bytes.len(), st.ghost_tags.len(), st.duel.admission());
        if ghost.is_some() || lirs < max_lir {
            push(st, slot, LIR);
            if lirs + 1 > max_lir {
                demote_oldest_lir(st);
            }
            prune(st);
        } else {
            push(st, slot, 0);
        }
        ghost.is_some()
    }

    fn victim(&self, st: &mut SetState<'_>, eligible: u32, _valid: u32) -> usize {
        debug_assert_ne!(eligible, 0);
        // Key: out-of-stack HIR pages first, then HIR pages in the stack by
        // age, then LIR pages by age.
        let mut best = eligible.trailing_zeros() as usize;
        let mut best_key = 0u16;
        for_each_slot(eligible, |i| {
            let b = st.bytes[i];
            let key = if b & LIR != 0 {
                0x100 + u16::from(b & RANK)
            } else if b & IN_STACK != 0 {
                0x200 + u16::from(b & RANK)
            } else {
                0x300
            };
            if key > best_key {
                best_key = key;
                best = i;
            }
        });
        best
    }

    fn on_evict(&self, st: &mut SetState<'_>, slot: usize, tag: u64, _valid: u32) {
        let b = st.bytes[slot];
        if b & (LIR | IN_STACK) != IN_STACK || st.ghost_tags.is_empty() {
            // Out of the stack, or a LIR page evicted for want of another
            // victim: forgotten.
            leave(st, slot);
            prune(st);
            return;
        }
        // A HIR page in the stack becomes a ghost at its place.
        let j = free_ghost(st);
        st.ghost_tags[j] = tag;
        st.ghost_bytes[j] = st.bytes[slot] & RANK;
        st.bytes[slot] = 0;
        prune(st);
    }

    fn on_remove(&self, st: &mut SetState<'_>, slot: usize, _valid: u32) {
        leave(st, slot);
        prune(st);
    }

    fn admits(&self, st: &mut SetState<'_>, tag: u64, valid: u32) -> Admit {
        if !st.duel.admission() {
            return Admit::Yes;
        }
        if st.ghost_tags.contains(&tag) {
            return Admit::Here;
        }
        let mut hir = false;
        for_each_slot(valid, |i| hir |= st.bytes[i] & LIR == 0);
        if hir { Admit::Yes } else { Admit::No }
    }

    fn on_pass(&self, st: &mut SetState<'_>, tag: u64, _valid: u32) {
        if st.ghost_tags.is_empty() {
            return;
        }
        // A page served without a slot is a HIR page out of the cache, on
        // top of the stack: back soon, it is a ghost hit and comes in as LIR.
        let j = free_ghost(st);
        bump_below(st, RANK + 1);
        st.ghost_tags[j] = tag;
        st.ghost_bytes[j] = 0;
    }
}

/// A free ghost entry (the oldest ghost is forgotten if there is none).
/// The set must have ghost entries.
fn free_ghost(st: &mut SetState<'_>) -> usize {
    if let Some(j) = st.ghost_tags.iter().position(|&t| t == NO_TAG) {
        return j;
    }
    let (j, _) = st
        .ghost_bytes
        .iter()
        .enumerate()
        .max_by_key(|&(_, &g)| g & RANK)
        .expect("ghosts are not empty");
    let r = st.ghost_bytes[j] & RANK;
    st.ghost_tags[j] = NO_TAG;
    st.ghost_bytes[j] = 0;
    close_gap(st, r);
    j
}

#[cfg(test)]
mod tests {
    use super::super::model::testing::{evictions, model_with};
    use super::super::{Access, PolicyKind, SaModel, SetModel};
    use super::{IN_STACK, LIR, RANK};

    /// A set of more than 21 slots, whose stack's ranks leave room for few
    /// ghosts or none, still takes a new working set: before, a set of 32
    /// (no ghost) kept the pages of a loop as LIR pages for good and missed
    /// every read of three pages used over and over after it, and the
    /// adaptive policy's sets, deciding admission, passed them.
    #[test]
    fn a_set_with_room_for_few_ghosts_takes_a_new_working_set() {
        for kind in [PolicyKind::Lirs, PolicyKind::Adaptive] {
            for assoc in [24, 32] {
                let mut m = SaModel::new(kind, assoc, 1);
                m.replay((0..40).flat_map(|_| 0..64u64));
                let hits = m.replay((0..1000).flat_map(|_| [1000u64, 1001, 1002]));
                assert!(hits >= 2990, "{kind:?}, {assoc} slots: {hits} hits of 3000");
            }
        }
    }

    /// The stack ranks of the resident pages in it and of the ghosts form a
    /// permutation, and its bottom entry is a LIR page.
    fn assert_stack(m: &SetModel) {
        let mut ranks: Vec<u8> = m
            .bytes()
            .iter()
            .filter(|&&b| b & IN_STACK != 0)
            .map(|&b| b & RANK)
            .collect();
        let ghosts = m.ghost_tags().iter().zip(m.ghost_bytes());
        ranks.extend(
            ghosts
                .filter(|(t, _)| **t != u64::MAX)
                .map(|(_, b)| b & RANK),
        );
        let mut sorted = ranks.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..ranks.len() as u8).collect::<Vec<_>>(), "{m:?}");
        if let Some(&max) = sorted.last() {
            let bottom = m
                .bytes()
                .iter()
                .find(|&&b| b & IN_STACK != 0 && b & RANK == max);
            assert!(
                bottom.is_some_and(|b| b & LIR != 0),
                "bottom not LIR: {m:?}"
            );
        }
        for &b in m.bytes() {
            assert!(
                b & LIR == 0 || b & IN_STACK != 0,
                "a LIR page out of the stack"
            );
        }
    }

    #[test]
    fn a_loop_larger_than_the_set_keeps_all_but_one_slot_hitting() {
        // 8 slots, a loop of 20 pages: LRU would never hit.
        let mut m = SetModel::new(PolicyKind::Lirs, 8);
        let mut hits = 0;
        for round in 0..50 {
            for p in 0..20u64 {
                let hit = matches!(m.access(p), Access::Hit { .. });
                if round > 0 {
                    hits += usize::from(hit);
                }
                assert_stack(&m);
            }
        }
        // Seven LIR pages hit on every later round.
        assert_eq!(hits, 49 * 7);
        assert_eq!(m.bytes().iter().filter(|&&b| b & LIR != 0).count(), 7);
    }

    #[test]
    fn a_page_back_from_the_ghosts_becomes_lir_and_the_oldest_lir_goes_down() {
        // Fill 4 slots: 1, 2, 3 become LIR, 4 is the HIR page.
        let mut m = model_with(PolicyKind::Lirs, 4, 1..=4);
        let lir = |m: &SetModel, t: u64| m.bytes()[m.slot_of(t).unwrap()] & LIR != 0;
        assert!(lir(&m, 1) && lir(&m, 2) && lir(&m, 3) && !lir(&m, 4));
        // 5 evicts the HIR page 4, which stays in the stack as a ghost.
        assert_eq!(evictions(&mut m, [5]), [4]);
        assert!(m.ghost_tags().contains(&4));
        assert_stack(&m);
        // 4 comes back: a ghost hit, LIR now; the oldest LIR page (1) is demoted.
        assert!(matches!(
            m.access(4),
            Access::Miss {
                evicted: Some(5),
                ghost_hit: true,
                ..
            }
        ));
        assert!(lir(&m, 4) && !lir(&m, 1) && lir(&m, 2));
        assert_stack(&m);
        // So 1 is the next victim, not the recently used LIR pages.
        assert_eq!(evictions(&mut m, [6]), [1]);
        assert_stack(&m);
    }

    #[test]
    fn hits_on_hir_pages_promote_them_and_the_stack_stays_sound() {
        let mut m = SetModel::new(PolicyKind::Lirs, 6);
        let mut x = 99u64;
        for _ in 0..20_000 {
            x = crate::util::mix::mix64(x);
            let tag = (x % 23) * (x >> 61) % 17;
            m.access(tag);
            assert_stack(&m);
        }
    }

    #[test]
    fn lirs_beats_lru_on_a_loop_in_the_whole_cache_model() {
        let (mut lirs, mut lru) = (
            SaModel::new(PolicyKind::Lirs, 12, 16),
            SaModel::new(PolicyKind::Lru, 12, 16),
        );
        let trace: Vec<u64> = (0..30).flat_map(|_| 0..400u64).collect();
        let (a, b) = (
            lirs.replay(trace.iter().copied()),
            lru.replay(trace.iter().copied()),
        );
        assert_eq!(b, 0, "LRU never hits a loop larger than the cache");
        // 16 sets keep 11 of their loop pages each: about 176 of 400 per round.
        assert!(a > 29 * 150, "{a}");
    }
}
