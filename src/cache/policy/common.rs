//! Building blocks shared by several policies: an insertion/recency order kept
//! as ranks in the low bits of the slot bytes, a clock hand sweeping over
//! per-slot counters, and a ghost list kept as a compact FIFO.
//!
//! # Ranks
//!
//! A rank lives in the low five bits of a slot's byte ([`RANK_MASK`]); the
//! policies that use ranks keep their own flags in the three high bits. Over
//! the slots of a mask `ranked` (the valid slots), the ranks are a permutation
//! of `0..ranked.count_ones()`, rank 0 being the front (newest / most recent)
//! and the highest rank the back (oldest). With at most 32 slots a rank never
//! exceeds 31, so incrementing the byte never carries into the flag bits.
//!
//! # Clock sweep
//!
//! The set word is a hand, a slot index, and the slots form the clock face in
//! index order. [`clock_sweep`] moves the hand over the eligible slots,
//! decrementing non-zero counters, up to the first eligible slot whose counter
//! is 0. Ineligible slots are passed untouched.
//!
//! # Ghost FIFO
//!
//! The ghost entries `tags[..k]` are the live ones, newest first; the rest hold
//! [`NO_TAG`]. Pushing shifts everything one place back and drops the last
//! entry (the oldest, or an empty one); taking an entry closes the gap.

use super::{NO_TAG, SetState};

/// The bits of a slot byte that hold its rank.
pub(crate) const RANK_MASK: u8 = 0x1f;

/// The rank stored in slot byte `b`.
#[inline]
pub(crate) fn rank(b: u8) -> u8 {
    b & RANK_MASK
}

/// The mask of the low `n` bits (`n <= 32`): all slots of an `n`-slot set.
#[inline]
pub(crate) fn low_mask(n: usize) -> u32 {
    if n >= 32 { u32::MAX } else { (1u32 << n) - 1 }
}

/// Calls `f(slot)` for every set bit of `mask`, lowest first.
#[inline]
pub(crate) fn for_each_slot(mut mask: u32, mut f: impl FnMut(usize)) {
    while mask != 0 {
        f(mask.trailing_zeros() as usize);
        mask &= mask - 1;
    }
}

// The rank updates below visit every slot and use the masks arithmetically
// rather than branching per slot: which ranks move is data-dependent and would
// defeat branch prediction, and a set has at most 32 slots.

/// Whether bit `j` of `mask` is set, as 0 or 1.
#[inline]
fn bit(mask: u32, j: usize) -> u8 {
    ((mask >> j) & 1) as u8
}

/// Places the unranked `slot` at the front (rank 0), with the flag bits
/// `flags`: every slot of `ranked` moves one place back. `slot` must not be in
/// `ranked`.
#[inline]
pub(crate) fn push_front(bytes: &mut [u8], slot: usize, flags: u8, ranked: u32) {
    let others = ranked & !(1 << slot);
    for (j, b) in bytes.iter_mut().enumerate() {
        *b += bit(others, j);
    }
    bytes[slot] = flags & !RANK_MASK;
}

/// Moves the ranked `slot` to the front; the slots that were ahead of it move
/// one place back.
#[inline]
pub(crate) fn move_to_front(bytes: &mut [u8], slot: usize, ranked: u32) {
    let r = rank(bytes[slot]);
    for (j, b) in bytes.iter_mut().enumerate() {
        *b += bit(ranked, j) & u8::from(rank(*b) < r);
    }
    bytes[slot] &= !RANK_MASK;
}

/// Takes the ranked `slot` out of the order (the slots behind it move one
/// place forward) and clears its byte.
#[inline]
pub(crate) fn unlink(bytes: &mut [u8], slot: usize, ranked: u32) {
    let r = rank(bytes[slot]);
    for (j, b) in bytes.iter_mut().enumerate() {
        *b -= bit(ranked, j) & u8::from(rank(*b) > r);
    }
    bytes[slot] = 0;
}

/// The slot of `mask` (non-empty) with the highest rank: the oldest.
#[inline]
pub(crate) fn oldest(bytes: &[u8], mask: u32) -> usize {
    debug_assert_ne!(mask, 0);
    // Key: rank + 1 for the slots of `mask`, 0 for the others.
    let mut best = 0;
    let mut best_key = 0;
    for (j, &b) in bytes.iter().enumerate() {
        let key = (rank(b) + 1) * bit(mask, j);
        if key > best_key {
            best_key = key;
            best = j;
        }
    }
    best
}

/// The slot of `ranked` whose rank is `r`, if any.
#[inline]
pub(crate) fn slot_at_rank(bytes: &[u8], ranked: u32, r: u8) -> Option<usize> {
    let mut found = None;
    for_each_slot(ranked, |j| {
        if rank(bytes[j]) == r {
            found = Some(j);
        }
    });
    found
}

/// Sweeps the clock hand in the set word over at most `turns` turns of the
/// face: an eligible slot with a non-zero counter (its byte) has it decremented
/// and is passed, and the first eligible slot whose counter is 0 is the victim,
/// returned with the hand left just past it. `eligible` must be non-empty, and
/// `turns` large enough that the sweep stops.
#[inline]
pub(crate) fn clock_sweep(st: &mut SetState<'_>, eligible: u32, turns: usize) -> usize {
    debug_assert_ne!(eligible, 0);
    let n = st.bytes.len();
    let mut s = *st.word as usize % n;
    for _ in 0..turns * n {
        if eligible & (1 << s) != 0 {
            if st.bytes[s] == 0 {
                *st.word = ((s + 1) % n) as u32;
                return s;
            }
            st.bytes[s] -= 1;
        }
        s += 1;
        if s == n {
            s = 0;
        }
    }
    unreachable!("the eligible mask {eligible:#b} has no slot below {n}")
}

/// Records `tag` (with its byte) as the newest ghost, dropping the oldest one
/// when the list is full. Does nothing when the policy keeps no ghosts.
#[inline]
pub(crate) fn ghost_push(tags: &mut [u64], bytes: &mut [u8], tag: u64, b: u8) {
    let n = tags.len();
    if n == 0 {
        return;
    }
    tags.copy_within(..n - 1, 1);
    bytes.copy_within(..n - 1, 1);
    tags[0] = tag;
    bytes[0] = b;
}

/// Removes `tag` from the ghosts, returning its byte if it was there.
#[inline]
pub(crate) fn ghost_take(tags: &mut [u64], bytes: &mut [u8], tag: u64) -> Option<u8> {
    let i = tags.iter().position(|&t| t == tag)?;
    let b = bytes[i];
    let n = tags.len();
    tags.copy_within(i + 1.., i);
    bytes.copy_within(i + 1.., i);
    tags[n - 1] = NO_TAG;
    bytes[n - 1] = 0;
    Some(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ranks(bytes: &[u8], mask: u32) -> Vec<u8> {
        let mut v = Vec::new();
        for_each_slot(mask, |j| v.push(rank(bytes[j])));
        v
    }

    #[test]
    fn rank_operations() {
        let mut b = [0u8; 4];
        push_front(&mut b, 0, 0, 0b0000);
        push_front(&mut b, 1, 0, 0b0001);
        push_front(&mut b, 2, 0, 0b0011);
        push_front(&mut b, 3, 0, 0b0111);
        assert_eq!(ranks(&b, 0b1111), [3, 2, 1, 0]);
        assert_eq!(oldest(&b, 0b1111), 0);
        assert_eq!(oldest(&b, 0b1110), 1);
        move_to_front(&mut b, 1, 0b1111);
        assert_eq!(ranks(&b, 0b1111), [3, 0, 2, 1]);
        assert_eq!(slot_at_rank(&b, 0b1111, 2), Some(2));
        unlink(&mut b, 2, 0b1111);
        assert_eq!(ranks(&b, 0b1011), [2, 0, 1]);
        assert_eq!(b[2], 0);
        // Flag bits survive rank changes.
        b[3] |= 0x80;
        move_to_front(&mut b, 0, 0b1011);
        assert_eq!(ranks(&b, 0b1011), [0, 1, 2]);
        assert_eq!(b[3], 0x82);
    }

    #[test]
    fn ghost_fifo() {
        let mut t = [NO_TAG; 3];
        let mut b = [0u8; 3];
        ghost_push(&mut t, &mut b, 10, 1);
        ghost_push(&mut t, &mut b, 11, 2);
        assert_eq!(t, [11, 10, NO_TAG]);
        ghost_push(&mut t, &mut b, 12, 3);
        ghost_push(&mut t, &mut b, 13, 4);
        assert_eq!(t, [13, 12, 11]);
        assert_eq!(b, [4, 3, 2]);
        assert_eq!(ghost_take(&mut t, &mut b, 12), Some(3));
        assert_eq!(t, [13, 11, NO_TAG]);
        assert_eq!(b, [4, 2, 0]);
        assert_eq!(ghost_take(&mut t, &mut b, 12), None);
        ghost_push(&mut [], &mut [], 1, 1);
    }
}
