//! Resizing the cache by linear hashing, one set at a time while other
//! threads keep using it: growing splits the set under the split pointer into
//! a new one, shrinking merges the last set back into its buddy. Pages move
//! with their data and dirty state; pinned pages never move (a busy step is
//! retried later), and a shrink drops clean pages when the merged set
//! overflows.

use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};

use super::core::{
    Busy, COLD, Core, DIRTY, GEN_MASK, Locked, PENDING, VALID, WAITERS, WRITEBACK, WRITER,
    next_gen, pack, pins,
};
use super::dirty::file_of;
use super::policy::{NO_TAG, Policy};
use super::sync::{Model, Word};
use crate::util::mix::mix64;

impl<M: Model> Core<M> {
    /// Add one set by splitting the set under the split pointer. `Ok(false)` at
    /// the maximum; `Err` when a page that must move is busy (retry later).
    pub(crate) fn grow_one(&self) -> std::result::Result<bool, Busy> {
        let mut inited = self.inited.lock().unwrap_or_else(|p| p.into_inner());
        let n = self.n_sets();
        if n >= self.max_sets {
            return Ok(false);
        }
        let level = self.level_of(n);
        let (s, t) = (n - level, n);
        if t >= *inited {
            // SAFETY: set `t` was never initialised, so no lookup can reach it.
            unsafe { self.lay.init::<M>(self.set_ptr(t)) };
            self.reset_policy(t);
            *inited = t + 1;
        }
        self.lock(s);
        self.lock(t);
        // SAFETY: both sets are locked.
        let (gs, gt) = unsafe { (self.locked(s), self.locked(t)) };
        // A page of `s` is there as its first or its second candidate (or
        // both); it stays if one of those candidates is still `s` after the
        // split, else that candidate is now `t`.
        let (old, new) = (self.table.load(Acquire), pack(n + 1, self.level_of(n + 1)));
        let moving = (0..self.lay.assoc)
            .filter(|&i| {
                if *gs.valid & (1 << i) == 0 {
                    return false;
                }
                let h = mix64(gs.tags[i].load(Relaxed));
                let (a, b) = self.sets_at(h, old);
                let (na, nb) = self.sets_at(h, new);
                debug_assert!(a == s || b == s);
                !((a == s && na == s) || (b == s && nb == s))
            })
            .fold(0u32, |m, i| m | 1 << i);
        // A slot of `t` without a page may still hold a pin (a waiter for a
        // fill that failed before the set was removed): not room.
        if self.free_slots(t, *gt.valid).count_ones() < moving.count_ones()
            || !self.freeze(s, moving)
        {
            self.unlock(t);
            self.unlock(s);
            return Err(Busy::Pinned);
        }
        self.move_pages(s, gs, t, gt, moving);
        self.table.store(pack(n + 1, self.level_of(n + 1)), Release);
        // Dirty pages that came to `t` are the flusher's as a write's are
        // (once `t` is in the table, where the flusher looks for it).
        self.note_dirty(t);
        self.clock.resize((n + 1) * self.lay.assoc);
        self.steps.fetch_add(1, Release);
        self.unlock(t);
        self.unlock(s);
        Ok(true)
    }

    /// Remove the last set by merging it into its buddy. `Ok(false)` at the
    /// minimum; `Err` when its pages are busy or the merged pages would not
    /// fit without dropping dirty data (write them back, then retry).
    pub(crate) fn shrink_one(&self) -> std::result::Result<bool, Busy> {
        let _inited = self.inited.lock().unwrap_or_else(|p| p.into_inner());
        let n = self.n_sets();
        if n <= self.base {
            return Ok(false);
        }
        let n2 = n - 1;
        let level = self.level_of(n2);
        let (s, t) = (n2 - level, n2);
        self.lock(s);
        self.lock(t);
        // SAFETY: both sets are locked.
        let (gs, gt) = unsafe { (self.locked(s), self.locked(t)) };
        let busy = |set: usize, i: usize| {
            let v = self.state(set, i).load(Acquire);
            pins(v) > 0 || v & (PENDING | WRITEBACK | WRITER) != 0
        };
        let is_dirty = |set: usize, i: usize| self.state(set, i).load(Acquire) & DIRTY != 0;
        // Pages of `t` in use, or a slot of it without a page that still
        // holds a pin (a waiter for a fill that failed): wait.
        let all = crate::cache::policy::low_mask(self.lay.assoc);
        if (0..self.lay.assoc).any(|i| *gt.valid & (1 << i) != 0 && busy(t, i))
            || self.free_slots(t, *gt.valid) != all & !*gt.valid
        {
            self.unlock(t);
            self.unlock(s);
            return Err(Busy::Pinned);
        }
        let frozen = *gt.valid;
        let count = |m: u32| m.count_ones() as usize;
        // Room in `s`: its slots without a page and without a pin.
        let room_s = count(self.free_slots(s, *gs.valid));
        let mut over = count(*gt.valid).saturating_sub(room_s);
        // Room comes from clean idle pages: first those of the vanishing set,
        // then those of its buddy, each in its policy's order.
        let clean_t: u32 = (0..self.lay.assoc)
            .filter(|&i| *gt.valid & (1 << i) != 0 && !is_dirty(t, i))
            .fold(0, |m, i| m | 1 << i);
        let clean_s: u32 = (0..self.lay.assoc)
            .filter(|&i| *gs.valid & (1 << i) != 0 && !busy(s, i) && !is_dirty(s, i))
            .fold(0, |m, i| m | 1 << i);
        if over > count(clean_t) + count(clean_s) {
            self.unlock(t);
            self.unlock(s);
            // Only a waiter's pin on a slot without a page in the way: it
            // goes soon, and writing back would not help.
            return Err(if count(*gs.valid) + count(*gt.valid) <= self.lay.assoc {
                Busy::Pinned
            } else {
                Busy::Dirty
            });
        }
        if !self.freeze(t, frozen) {
            self.unlock(t);
            self.unlock(s);
            return Err(Busy::Pinned);
        }
        let mut gt = gt;
        let mut gs = gs;
        let mut left = clean_t;
        while over > 0 && left != 0 {
            let i = self.under_lock().victim(&mut gt.st, left, *gt.valid);
            left &= !(1 << i);
            if self.drop_page(t, &mut gt, i) {
                over -= 1;
            }
        }
        let mut left = clean_s;
        while over > 0 && left != 0 {
            let i = self.under_lock().victim(&mut gs.st, left, *gs.valid);
            left &= !(1 << i);
            // May fail: a lock-free reader can pin a page of `s` meanwhile.
            if self.drop_page(s, &mut gs, i) {
                over -= 1;
            }
        }
        let moving = *gt.valid;
        if over > 0 {
            for i in (0..self.lay.assoc).filter(|&i| moving & (1 << i) != 0) {
                self.state(t, i).fetch_and(!PENDING, AcqRel);
            }
            self.unlock(t);
            self.unlock(s);
            return Err(Busy::Pinned);
        }
        self.move_pages(t, gt, s, gs, moving);
        self.note_dirty(s);
        self.reset_policy(t);
        self.table.store(pack(n2, level), Release);
        self.clock.resize(n2 * self.lay.assoc);
        self.steps.fetch_add(1, Release);
        self.unlock(t);
        self.unlock(s);
        let stride = self.lay.assoc * self.page_size;
        self.chunks
            .release(self.parts.pos(t) * stride, stride, |off, len| {
                self.frames.release(off, len)
            });
        Ok(true)
    }

    /// Mark the pages in `mask` of locked set `set` pending, so that no
    /// lock-free reader can pin them while they move. Fails (changing nothing)
    /// if one of them is pinned or under I/O.
    fn freeze(&self, set: usize, mask: u32) -> bool {
        let mut done = 0u32;
        for i in (0..self.lay.assoc).filter(|&i| mask & (1 << i) != 0) {
            let w = self.state(set, i);
            let v = w.load(Acquire);
            let idle = pins(v) == 0 && v & (PENDING | WRITEBACK | WRITER) == 0;
            if !idle || w.compare_exchange(v, v | PENDING, AcqRel, Relaxed).is_err() {
                for j in (0..self.lay.assoc).filter(|&j| done & (1 << j) != 0) {
                    self.state(set, j).fetch_and(!PENDING, AcqRel);
                }
                return false;
            }
            done |= 1 << i;
        }
        true
    }

    /// The slots of locked set `set` (whose valid bits are `valid`) that a
    /// page can move into: no page, and nothing else in the state word but
    /// the generation and waiters (a slot whose fill failed keeps the pins
    /// of the threads that waited for it until they let go).
    fn free_slots(&self, set: usize, valid: u32) -> u32 {
        (0..self.lay.assoc)
            .filter(|&j| {
                valid & (1 << j) == 0
                    && self.state(set, j).load(Acquire) & !(WAITERS | GEN_MASK) == 0
            })
            .fold(0, |m, j| m | 1 << j)
    }

    /// Move the frozen pages in `mask` from locked set `from` to free slots of
    /// locked set `to` (frames copied, state and coldness kept, policy history
    /// restarted);
    /// the caller checked there are enough ([`Core::free_slots`]).
    fn move_pages(&self, from: usize, gf: Locked<'_>, to: usize, gt: Locked<'_>, mask: u32) {
        let (mut gf, mut gt) = (gf, gt);
        let room = self.free_slots(to, *gt.valid);
        let mut free = (0..self.lay.assoc).filter(move |&j| room & (1 << j) != 0);
        for i in 0..self.lay.assoc {
            if mask & (1 << i) == 0 {
                continue;
            }
            let j = free.next().expect("caller checked there is room");
            let src = self.state(from, i).load(Acquire);
            // SAFETY: both frames are in the region, distinct (different sets),
            // and idle: the page is frozen (no pin, no I/O) and both sets locked.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    self.frame(from, i),
                    self.frame(to, j),
                    self.page_size,
                )
            };
            let before = *gt.valid;
            self.stamp(to, j)
                .store(self.stamp(from, i).load(Relaxed), Relaxed);
            let tag = gf.tags[i].load(Relaxed);
            self.print(to, j, tag);
            gt.tags[j].store(tag, Release);
            *gt.valid |= 1 << j;
            let dst = self.state(to, j);
            if src & DIRTY != 0 {
                self.dirty.mark(file_of(tag), to);
            }
            // Announced in `from` before the page can be found in `to`: a
            // reader that sighted it in `from` must not keep bytes that a
            // store into the new copy has since replaced.
            self.seq(from).fetch_add(1, Release);
            self.bump_epoch(from);
            // A free slot holds no pin, so nothing else changes its word but
            // a waiter's flag: kept.
            let mut d = dst.load(Relaxed);
            while let Err(now) = dst.compare_exchange(
                d,
                src & (VALID | DIRTY | COLD) | d & WAITERS | next_gen(d),
                Release,
                Relaxed,
            ) {
                d = now;
            }
            self.under_lock().on_insert(&mut gt.st, j, tag, before);
            let valid = *gf.valid;
            self.under_lock().on_remove(&mut gf.st, i, valid);
            gf.tags[i].store(NO_TAG, Release);
            *gf.valid &= !(1 << i);
            let old = self.state(from, i).swap(next_gen(src), AcqRel);
            self.wake_if(from, i, old);
        }
    }
}
