//! What a cached store shows of its page cache.

use std::time::Duration;

use crate::cache::{CacheStats, CachedPage, PageCache, PageId, PolicyKind, SetMetadataBytes};
use crate::error::Result;

/// A cached store's page cache as its users see it: its shape, counters and
/// contents, a resize, and the eviction of clean idle pages.
///
/// Nothing here can change a cached file's bytes or lose a page that is not
/// written back: a [`PageCache`]'s own guards, write-backs and discards would
/// bypass the cached file's write-back bookkeeping, so its files' pages are
/// reached through [`CachedFile`](crate::CachedFile) only.
///
/// ```compile_fail
/// # fn f(cs: &setcache::CachedStore) {
/// cs.cache().discard(0, 0).unwrap(); // dirty pages would go unwritten
/// # }
/// ```
///
/// ```
/// # fn f(cs: &setcache::CachedStore) {
/// let c = cs.cache();
/// println!("{} pages, {} hits", c.capacity_pages(), c.stats().hits);
/// # }
/// ```
#[derive(Clone, Copy)]
pub struct CacheView<'a> {
    cache: &'a PageCache,
}

impl<'a> CacheView<'a> {
    pub(crate) fn new(cache: &'a PageCache) -> Self {
        Self { cache }
    }

    /// Bytes per page.
    pub fn page_size(&self) -> usize {
        self.cache.page_size()
    }

    /// How many partitions the sets are divided into.
    pub fn partitions(&self) -> usize {
        self.cache.partitions()
    }

    /// How long a lookup waits for a pinned set before it gives up.
    pub fn pin_wait(&self) -> Duration {
        self.cache.pin_wait()
    }

    /// Pages per set.
    pub fn assoc(&self) -> usize {
        self.cache.assoc()
    }

    /// The replacement policy.
    pub fn policy(&self) -> PolicyKind {
        self.cache.policy()
    }

    /// Sets now.
    pub fn sets(&self) -> usize {
        self.cache.sets()
    }

    /// Pages the cache holds now.
    pub fn capacity_pages(&self) -> usize {
        self.cache.capacity_pages()
    }

    /// Bytes of metadata one set occupies.
    pub fn set_metadata_bytes(&self) -> SetMetadataBytes {
        self.cache.set_metadata_bytes()
    }

    /// Bytes of metadata per cached page.
    pub fn page_metadata_bytes(&self) -> usize {
        self.cache.page_metadata_bytes()
    }

    /// The counters, summed over threads.
    pub fn stats(&self) -> CacheStats {
        self.cache.stats()
    }

    /// Every cached page that is dirty.
    pub fn dirty_pages(&self) -> Vec<PageId> {
        self.cache.dirty_pages()
    }

    /// Every cached page, with whether it is dirty.
    pub fn pages(&self) -> Vec<CachedPage> {
        self.cache.pages()
    }

    /// Grow or shrink to `bytes` of frames, as [`PageCache::resize`]: dirty
    /// pages move or stop the shrink, never go unwritten.
    pub fn resize(&self, bytes: usize) -> Result<()> {
        self.cache.resize(bytes)
    }

    /// Drop page `page` of cache file `file` if it is cached, clean and
    /// idle; returns whether it was dropped.
    pub fn evict(&self, file: u32, page: u64) -> Result<bool> {
        self.cache.evict(file, page)
    }
}
