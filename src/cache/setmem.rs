//! Where each piece of a page set lives in memory.
//!
//! A set is one cache-line-aligned block of `stride` bytes:
//!
//! | offset | field | size |
//! |---|---|---|
//! | 0 | lock word (atomic) | 4 |
//! | `off_valid` | mask of occupied slots | 4 |
//! | `off_word` | the policy's word | 4 |
//! | `off_seq` | change count: bumped when a page's bytes or identity change (atomic) | 4 |
//! | `off_states` | per slot: state bits and pin count (atomic) | 4 x assoc |
//! | `off_tags` | per slot: page tag | 8 x assoc |
//! | `off_bytes` | per slot: the policy's byte | 1 x assoc |
//! | `off_gtags`, `off_gbytes` | ghost tags and bytes (policies with ghosts) | 9 x ghosts |
//!
//! Per cached page that is 13 bytes (state 4, tag 8, policy 1) plus a twelfth of
//! the 16-byte header; a 12-slot set without ghosts takes 172 bytes, 3 cache
//! lines. Everything but the lock word, the change count, the states and the
//! tags is written only under the set's lock.

use std::mem::{align_of, size_of};

use super::policy::NO_TAG;
use super::sync::Model;

/// Cache line size assumed for alignment.
pub(crate) const LINE: usize = 64;

fn up(x: usize, a: usize) -> usize {
    x.div_ceil(a) * a
}

/// Offsets of a set's fields for one associativity and ghost count.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SetLayout {
    pub(crate) assoc: usize,
    pub(crate) ghosts: usize,
    pub(crate) off_valid: usize,
    pub(crate) off_word: usize,
    pub(crate) off_seq: usize,
    pub(crate) off_states: usize,
    pub(crate) off_tags: usize,
    pub(crate) off_bytes: usize,
    pub(crate) off_gtags: usize,
    pub(crate) off_gbytes: usize,
    /// Bytes the fields occupy.
    pub(crate) used: usize,
    /// Distance between sets: `used` rounded up to whole cache lines.
    pub(crate) stride: usize,
}

impl SetLayout {
    pub(crate) fn new<M: Model>(assoc: usize, ghosts: usize) -> SetLayout {
        let w = size_of::<M::W>();
        let wa = align_of::<M::W>();
        let off_valid = up(w, 4);
        let off_word = off_valid + 4;
        let off_seq = up(off_word + 4, wa);
        let off_states = up(off_seq + w, wa);
        let off_tags = up(off_states + assoc * w, 8);
        let off_bytes = off_tags + 8 * assoc;
        let off_gtags = up(off_bytes + assoc, 8);
        let off_gbytes = off_gtags + 8 * ghosts;
        let used = if ghosts == 0 {
            off_bytes + assoc
        } else {
            off_gbytes + ghosts
        };
        SetLayout {
            assoc,
            ghosts,
            off_valid,
            off_word,
            off_seq,
            off_states,
            off_tags,
            off_bytes,
            off_gtags,
            off_gbytes,
            used,
            stride: up(used, LINE.max(wa)),
        }
    }

    /// Metadata bytes per cached page, header excluded, ghosts excluded.
    pub(crate) fn per_page<M: Model>() -> usize {
        size_of::<M::W>() + size_of::<u64>() + size_of::<u8>()
    }

    /// Write a fresh, empty set at `base`.
    ///
    /// # Safety
    /// `base` points at `stride` writable bytes, aligned to `LINE`, that hold no
    /// live set (nothing else reads or writes them during the call).
    pub(crate) unsafe fn init<M: Model>(&self, base: *mut u8) {
        // SAFETY: the caller gives exclusive, aligned memory of `stride` bytes;
        // every offset below lies inside it and is aligned for its type.
        unsafe {
            base.cast::<M::W>()
                .write(<M::W as super::sync::Word>::new(0));
            base.add(self.off_valid).cast::<u32>().write(0);
            base.add(self.off_word).cast::<u32>().write(0);
            base.add(self.off_seq)
                .cast::<M::W>()
                .write(<M::W as super::sync::Word>::new(0));
            for i in 0..self.assoc {
                base.add(self.off_states)
                    .cast::<M::W>()
                    .add(i)
                    .write(<M::W as super::sync::Word>::new(0));
                base.add(self.off_tags).cast::<u64>().add(i).write(NO_TAG);
                base.add(self.off_bytes).add(i).write(0);
            }
            for i in 0..self.ghosts {
                base.add(self.off_gtags).cast::<u64>().add(i).write(NO_TAG);
                base.add(self.off_gbytes).add(i).write(0);
            }
        }
    }

    /// Drop the atomics of an initialised set (a no-op for plain atomics).
    ///
    /// # Safety
    /// `base` holds a set written by [`SetLayout::init`] that nothing uses any more.
    pub(crate) unsafe fn drop_set<M: Model>(&self, base: *mut u8) {
        if !std::mem::needs_drop::<M::W>() {
            return;
        }
        // SAFETY: the caller guarantees the set was initialised and is unused.
        unsafe {
            std::ptr::drop_in_place(base.cast::<M::W>());
            std::ptr::drop_in_place(base.add(self.off_seq).cast::<M::W>());
            for i in 0..self.assoc {
                std::ptr::drop_in_place(base.add(self.off_states).cast::<M::W>().add(i));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::sync::Os;

    #[test]
    fn metadata_budget_of_a_twelve_slot_set() {
        // Per page: state word + tag + policy byte, at most 16 bytes.
        assert_eq!(SetLayout::per_page::<Os>(), 13);
        assert!(SetLayout::per_page::<Os>() <= 16);
        let plain = SetLayout::new::<Os>(12, 0);
        assert_eq!(plain.used, 172);
        assert!(plain.stride <= 4 * LINE, "stride {}", plain.stride);
        assert_eq!(plain.stride, 3 * LINE);
        // NR-LFU keeps assoc/2 ghosts and still fits in four lines.
        let nrlfu = SetLayout::new::<Os>(12, 6);
        assert!(nrlfu.stride <= 4 * LINE, "stride {}", nrlfu.stride);
        // Header share included, a 12-slot set costs under 16 bytes per page.
        assert!(plain.used / 12 < 16);
        // The widest set still keeps every field inside its stride.
        let wide = SetLayout::new::<Os>(32, 29);
        assert!(wide.used <= wide.stride && wide.stride.is_multiple_of(LINE));
    }
}
