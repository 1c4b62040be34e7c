//! Which sets hold dirty pages of each file: one bit per set per file, set
//! when a page of the file turns dirty in that set (or moves there dirty, in
//! a resize), taken by a sync. A sync then visits only those sets, so its
//! cost follows what is dirty, not the size of the cache.
//!
//! A file's bits are made at its first dirty page and kept for the life of
//! the cache (file ids are few and reused; a reused id's leftover bits only
//! cost a sync a look at sets it finds clean). A thread remembers the bits it
//! marked last, so a writer of one file reads no shared map.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

/// The file of a cache tag (its high bits; see `tag_of` in the cache's
/// `mod.rs`, which builds tags this way).
#[inline]
pub(crate) fn file_of(tag: u64) -> u32 {
    (tag >> FILE_SHIFT) as u32
}

/// Where a tag's file id starts.
pub(crate) const FILE_SHIFT: u32 = 40;

/// One bit per set.
struct Bits(Box<[AtomicU64]>);

pub(crate) struct DirtySets {
    /// Names this cache in the threads' memory of their last bits.
    id: u64,
    words: usize,
    files: RwLock<HashMap<u32, Arc<Bits>>>,
}

thread_local! {
    /// The bits this thread marked last: (cache id, file, bits).
    static LAST: RefCell<(u64, u32, Option<Arc<Bits>>)> = const { RefCell::new((0, 0, None)) };
}

impl DirtySets {
    pub(crate) fn new(max_sets: usize) -> DirtySets {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        DirtySets {
            id: NEXT.fetch_add(1, Ordering::Relaxed),
            words: max_sets.div_ceil(64),
            files: RwLock::new(HashMap::new()),
        }
    }

    fn bits(&self, file: u32) -> Arc<Bits> {
        if let Some(b) = self
            .files
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&file)
        {
            return b.clone();
        }
        let mut files = self.files.write().unwrap_or_else(|p| p.into_inner());
        files
            .entry(file)
            .or_insert_with(|| Arc::new(Bits((0..self.words).map(|_| AtomicU64::new(0)).collect())))
            .clone()
    }

    /// A page of `file` turned dirty in set `set`, under the set's lock (a
    /// sync visits the set under that lock after taking the bit, so seeing
    /// the bit set spares the write). A leaf: called under set locks.
    #[inline]
    pub(crate) fn mark(&self, file: u32, set: usize) {
        self.mark_as(file, set, true);
    }

    /// As [`DirtySets::mark`], for a page about to turn dirty without its
    /// set's lock (a store into a pinned frame, marked before the page's
    /// state says dirty): always a read-modify-write, so that either a
    /// sync's take comes after it (and, synchronising with it, sees the page
    /// pinned or dirty) or the bit stays set for the next sync.
    #[inline]
    pub(crate) fn mark_unlocked(&self, file: u32, set: usize) {
        self.mark_as(file, set, false);
    }

    fn mark_as(&self, file: u32, set: usize, locked: bool) {
        let (w, bit) = (set / 64, 1u64 << (set % 64));
        let put = |b: &Bits| {
            // Under the set's lock, read first: a set already marked costs no
            // shared write.
            if !locked || b.0[w].load(Ordering::Relaxed) & bit == 0 {
                b.0[w].fetch_or(bit, Ordering::AcqRel);
            }
        };
        let done = LAST
            .try_with(|l| match &*l.borrow() {
                (id, f, Some(b)) if *id == self.id && *f == file => {
                    put(b);
                    true
                }
                _ => false,
            })
            .unwrap_or(false);
        if done {
            return;
        }
        let b = self.bits(file);
        put(&b);
        let _ = LAST.try_with(|l| *l.borrow_mut() = (self.id, file, Some(b)));
    }

    /// The sets marked for `file`, their bits cleared: pages of the file that
    /// turn dirty from now on mark their sets again.
    pub(crate) fn take(&self, file: u32) -> Vec<usize> {
        let Some(b) = self
            .files
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&file)
            .cloned()
        else {
            return Vec::new();
        };
        let mut sets = Vec::new();
        for (i, w) in b.0.iter().enumerate() {
            if w.load(Ordering::Relaxed) == 0 {
                continue;
            }
            let mut v = w.swap(0, Ordering::AcqRel);
            while v != 0 {
                sets.push(i * 64 + v.trailing_zeros() as usize);
                v &= v - 1;
            }
        }
        sets
    }
}
