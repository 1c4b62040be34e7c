//! The staging area: memory in huge pages that reads of many pages land in
//! before each page is copied to its frame.
//!
//! A cache frame is 4 KiB somewhere in the sets' memory, so a read of a run
//! of pages straight into their frames is one scatter-gather segment per
//! page; the emulated disk here reads into physically contiguous memory about
//! twice as fast (2.1-2.85 GB/s against 0.96-1.77 GB/s for 2 MiB reads,
//! `scripts/direct-contiguity.py`). So the readahead thread and the cached
//! queues read runs of [`MIN_PAGES`] pages or more into a slot of this area
//! and copy them out when the read is done. The area belongs to the cached
//! store, is mapped at the first use (a random reader never makes it), holds
//! at most a quarter of the cache's size ([`SHARE`]) and at most
//! [`MAX_BYTES`] (none at all when less than twice that is free in the
//! machine or the memory cgroup), and a run that finds no free slot is read
//! straight into its frames as before. Its size bounds the bytes of runs in
//! flight that land in it: a quarter of a 256 MiB cache is 64 MiB, the 16
//! reads of 1 MiB in flight of each of four scanning threads.

use std::sync::Mutex;

/// Bytes of one slot: the longest run one read covers.
pub(crate) const SLOT_BYTES: usize = 512 << 10;
/// The fewest pages a run must have to be read through the staging area.
pub(crate) const MIN_PAGES: usize = 8;
/// The most memory the area takes, whatever the cache's size.
pub(crate) const MAX_BYTES: usize = 64 << 20;
/// The area holds at most this fraction of the cache (one in four).
pub(crate) const SHARE: usize = 4;
/// The huge page size slots are aligned to.
const HUGE: usize = 2 << 20;

/// A staging area of equal slots, mapped when first asked for.
pub(crate) struct Staging {
    slots: usize,
    pool: Mutex<Pool>,
}

struct Pool {
    /// The mapping and its length (null until made).
    map: *mut u8,
    map_len: usize,
    /// The first slot, 2 MiB aligned.
    base: *mut u8,
    free: Vec<usize>,
    /// Whether the mapping was tried (it is not tried again if it failed).
    tried: bool,
}

// SAFETY: the pool's pointers name a private mapping owned by the pool; they are only read or changed under its mutex.
unsafe impl Send for Pool {}

/// The most pages of `page_size` bytes one read of a run covers: a slot's.
pub(crate) fn run_pages(page_size: usize) -> usize {
    (SLOT_BYTES / page_size).max(1)
}

/// A slot taken from the area: `SLOT_BYTES` bytes that nobody else uses
/// until the slot is given back (which takes it, so no view of its bytes
/// outlives it).
#[derive(Debug)]
pub(crate) struct Slot {
    index: usize,
    ptr: *mut u8,
}

impl Slot {
    /// Where the slot's memory starts, for a read into it.
    pub(crate) fn ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// The first `len` bytes of the slot, in pieces of `page` bytes (the
    /// last one shorter if `len` ends inside a page): the pages a read left
    /// there, to copy to their frames.
    pub(crate) fn pages(&self, len: usize, page: usize) -> std::slice::Chunks<'_, u8> {
        let len = len.min(SLOT_BYTES);
        // SAFETY: the slot is `SLOT_BYTES` bytes of the live mapping, this holder's alone until given back, which the borrow of `self` prevents.
        unsafe { std::slice::from_raw_parts(self.ptr, len) }.chunks(page)
    }
}

/// The slots of the area of a cache of `cache_bytes`.
fn slots_for(cache_bytes: usize) -> usize {
    (cache_bytes / SHARE).min(MAX_BYTES) / SLOT_BYTES
}

/// The most memory the area of a cache of `cache_bytes` maps (whole huge
/// pages).
pub(crate) fn bytes_for(cache_bytes: usize) -> usize {
    (slots_for(cache_bytes) * SLOT_BYTES).div_ceil(HUGE) * HUGE
}

impl Staging {
    /// An area for a cache of `cache_bytes` (no memory yet).
    pub(crate) fn new(cache_bytes: usize) -> Staging {
        Staging {
            slots: slots_for(cache_bytes),
            pool: Mutex::new(Pool {
                map: std::ptr::null_mut(),
                map_len: 0,
                base: std::ptr::null_mut(),
                free: Vec::new(),
                tried: false,
            }),
        }
    }

    /// A free slot, or `None` (all in use, or no memory to be had).
    pub(crate) fn take(&self) -> Option<Slot> {
        if self.slots == 0 {
            return None;
        }
        let mut p = self.pool.lock().unwrap_or_else(|e| e.into_inner());
        if !p.tried {
            p.tried = true;
            p.map(self.slots);
        }
        let index = p.free.pop()?;
        Some(Slot {
            index,
            ptr: p.base.wrapping_add(index * SLOT_BYTES),
        })
    }

    /// The slots there are and those free now (all of them before the
    /// area is mapped).
    #[cfg(test)]
    pub(crate) fn counts(&self) -> (usize, usize) {
        let p = self.pool.lock().unwrap_or_else(|e| e.into_inner());
        let free = if p.tried { p.free.len() } else { self.slots };
        (self.slots, free)
    }

    /// Give slot `s` back: nothing reads or writes it any more.
    pub(crate) fn give(&self, s: Slot) {
        let mut p = self.pool.lock().unwrap_or_else(|e| e.into_inner());
        debug_assert!(s.index < self.slots && !p.free.contains(&s.index));
        p.free.push(s.index);
    }
}

impl Pool {
    /// Map `slots` slots in huge pages (when the kernel has them), touched
    /// once so that reads never wait for a page fault.
    fn map(&mut self, slots: usize) {
        let len = (slots * SLOT_BYTES).div_ceil(HUGE) * HUGE;
        let map_len = len + HUGE;
        // The area is made after the cache: it never takes the last of the
        // memory the machine or the memory cgroup can give (twice its size
        // must be free), so that it cannot get the process killed.
        if crate::cache::check_memory(2 * map_len as u64, String::new).is_err() {
            return;
        }
        // SAFETY: an anonymous private mapping with no hint; the result is checked before use.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if map == libc::MAP_FAILED {
            return;
        }
        let map = map.cast::<u8>();
        let base = map.wrapping_add((HUGE - map as usize % HUGE) % HUGE);
        // SAFETY: `base..base + len` lies inside the mapping made above.
        unsafe {
            libc::madvise(base.cast(), len, libc::MADV_HUGEPAGE);
            std::ptr::write_bytes(base, 0, len);
        }
        self.map = map;
        self.map_len = map_len;
        self.base = base;
        self.free = (0..slots).rev().collect();
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        if !self.map.is_null() {
            // Every user of a slot (the readahead thread, the queues) holds
            // the shared state that owns the pool, so none is left.
            // SAFETY: the mapping made in `map`, no longer read or written.
            unsafe { libc::munmap(self.map.cast(), self.map_len) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_apart_and_come_back() {
        let st = Staging::new(32 << 20);
        assert_eq!(st.slots, 16);
        let mut all: Vec<Slot> = std::iter::from_fn(|| st.take()).collect();
        assert_eq!(all.len(), 16);
        let mut ptrs: Vec<usize> = all.iter().map(|s| s.ptr as usize).collect();
        ptrs.sort_unstable();
        assert!(ptrs.windows(2).all(|w| w[1] - w[0] >= SLOT_BYTES));
        assert_eq!(ptrs[0] % HUGE, 0);
        let third = all.remove(3);
        let index = third.index;
        assert_eq!(
            third
                .pages(10_000, 4096)
                .map(<[u8]>::len)
                .collect::<Vec<_>>(),
            [4096, 4096, 1808]
        );
        st.give(third);
        assert_eq!(st.take().map(|s| s.index), Some(index));
        assert!(st.take().is_none());
        // A small cache gets no area at all.
        assert!(Staging::new(1 << 20).take().is_none());
    }

    #[test]
    fn the_area_is_a_quarter_of_the_cache_in_whole_huge_pages_up_to_its_cap() {
        assert_eq!(bytes_for(256 << 20), 64 << 20);
        assert_eq!(bytes_for(1 << 30), MAX_BYTES);
        assert_eq!(bytes_for(1 << 20), 0);
        // Five slots of 512 KiB, in two huge pages.
        assert_eq!(bytes_for(10 << 20), 4 << 20);
        for cache in [(3 << 20) + 5, 100 << 20, 300 << 20] {
            let st = Staging::new(cache);
            assert!(st.slots * SLOT_BYTES <= bytes_for(cache));
            assert!(bytes_for(cache) <= cache / SHARE + HUGE);
        }
    }
}
