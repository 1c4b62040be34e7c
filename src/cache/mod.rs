//! The set-associative page cache.
//!
//! Pages live in small sets (4 to 32 pages, 12 by default). A strong 64-bit mix
//! of (file, page) picks the set; each set has its own lock word and a few cache
//! lines of metadata, and eviction runs inside one set with a per-set
//! [`policy`]. Nothing hot is shared between sets, so threads touching
//! different sets never serialise.
//!
//! A lookup returns one of three things ([`Lookup`]): a pinned page (a hit), a
//! claimed frame that the caller fills (a miss: exactly one requester gets it,
//! the others wait for that one fill), or a dirty page the caller must write
//! back before the set has room. [`PageCache::get_with`] runs that loop with
//! two closures for callers that just want the page.

mod core;
mod dirty;
mod place;
pub mod policy;
mod region;
mod resize;
mod setmem;
mod stats;
pub mod sync;

use std::time::Duration;

pub(crate) use self::core::Mode;
pub(crate) use self::core::{
    CROSS_FILL_WAITS, Got, Sighting, note_queue_write_back, queue_io, still_at,
};
use self::core::{Core, Found};
use self::policy::Policy as _;
pub use self::policy::PolicyKind;
pub use crate::util::room::{MemoryRoom, check_memory, memory_room};
// Hidden: the bench (the `setcache` binary, a separate crate) finds the
// memory cgroups it makes with the same parsers as `memory_room`; they read
// `/proc` text and are no part of the cache's interface.
pub use self::stats::CacheStats;
use self::sync::{Model, Os};
use crate::error::{Error, Result};
pub(crate) use crate::util::human_size;
#[doc(hidden)]
pub use crate::util::room::{mount_of, own_cgroup};

/// Hint the CPU to load the cache line at `p` (no effect on other targets).
#[inline(always)]
pub(crate) fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SSE, which provides the prefetch, is part of the x86-64 baseline.
    // SAFETY: a prefetch is only a hint that never faults, whatever the address.
    unsafe {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        _mm_prefetch::<_MM_HINT_T0>(p.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Largest file id a cache accepts.
pub const MAX_FILE_ID: u32 = (1 << 24) - 2;
/// Largest page number a cache accepts (2^40 - 1).
pub const MAX_PAGE: u64 = (1 << 40) - 1;

/// How to build a [`PageCache`].
#[derive(Debug, Clone)]
pub struct CacheOptions {
    /// Bytes of page frames at start (rounded down to whole sets, at least one).
    pub size: usize,
    /// Largest size [`PageCache::resize`] may grow to (address space is
    /// reserved for it, memory is used only as sets are added). Defaults to
    /// `size`. It is not checked against the machine's memory, which may
    /// well be free by the time the cache grows: each growth is (see
    /// [`PageCache::resize`]).
    pub max_size: Option<usize>,
    /// Page size: a power of two from 512 bytes to 1 MiB.
    pub page_size: usize,
    /// Pages per set, 4 to 32. 12 is the paper's measured choice.
    pub assoc: usize,
    /// The per-set replacement policy.
    pub policy: PolicyKind,
    /// How long a lookup backs off while every page of its set is pinned
    /// before it fails with [`Error::AllPinned`]. At most [`MAX_PIN_WAIT`]
    /// (the waits that follow it several times over stay far from any clock's
    /// end).
    pub pin_wait: Duration,
    /// Partitions the sets are divided into, for partitioned mode
    /// ([`Partitions`](crate::Partitions)): 1 (the default) for the shared
    /// cache, 0 for one per NUMA node of the machine (one on a machine of
    /// one node), or a number from 1 to 64. A page's two candidate sets are
    /// in the partition its hash names, and each partition's sets and frames
    /// lie together in memory. Any partition count serves every interface;
    /// only partitioned mode's workers use the division. The number of sets
    /// is rounded down to a multiple of it.
    pub partitions: usize,
}

impl Default for CacheOptions {
    fn default() -> Self {
        CacheOptions {
            size: 64 << 20,
            max_size: None,
            page_size: 4096,
            assoc: 12,
            policy: PolicyKind::DEFAULT,
            pin_wait: Duration::from_secs(1),
            partitions: 1,
        }
    }
}

/// A set-associative page cache. `Send + Sync`: share it by reference or `Arc`.
///
/// The type parameter is the synchronisation model; applications use the
/// default, [`sync::Os`].
///
/// The cache knows pages by a cache file id and a page number, and does no
/// I/O itself: the caller loads missing pages and writes dirty ones back, here
/// through two closures over a store's file ([`CachedStore`](crate::CachedStore)
/// does all of that for you).
///
/// ```
/// use setcache::{AlignedBuf, CacheOptions, LayoutKind, PageCache, Store, StoreOptions};
///
/// let dir = std::env::temp_dir().join(format!("setcache-doc-pagecache-{}", std::process::id()));
/// std::fs::create_dir_all(&dir)?;
/// let store = Store::open(&[&dir], StoreOptions::default())?;
/// let file = store.create("pages", 1 << 20, LayoutKind::Stripe)?;
/// let cache: PageCache = PageCache::new(CacheOptions::default())?; // pages of 4 KiB
/// // Page `p` of cache file 0 is bytes `p * 4096..` of `file`.
/// let load = |_, p: u64, frame: &mut [u8]| file.read_at(p * 4096, frame);
/// let store_back = |_, p: u64, bytes: &[u8]| file.write_at(p * 4096, bytes);
///
/// let mut page = cache.get_mut_with(0, 3, load, store_back)?; // exclusive, dirty
/// page[..5].copy_from_slice(b"hello");
/// drop(page);
/// assert_eq!(&cache.get_with(0, 3, load, store_back)?[..5], b"hello"); // a hit
/// for setcache::PageId { file: f, page: p } in cache.dirty_pages() {
///     let w = cache.write_back(f, p)?.expect("dirty and idle");
///     let written = store_back(f, p, w.bytes());
///     w.finish(written)?; // clean now
/// }
/// file.sync()?;
/// let mut disk = AlignedBuf::new(4096);
/// file.read_at(3 * 4096, &mut disk)?;
/// assert_eq!(&disk[..5], b"hello");
/// drop((cache, file, store));
/// std::fs::remove_dir_all(&dir)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct PageCache<M: Model = Os> {
    core: Core<M>,
}

#[inline]
fn tag_of(file: u32, page: u64) -> Result<u64> {
    if file > MAX_FILE_ID || page > MAX_PAGE {
        return Err(bad_tag(file, page));
    }
    Ok(((file as u64) << dirty::FILE_SHIFT) | page)
}

/// Why `(file, page)` names no page of the cache.
#[cold]
#[inline(never)]
fn bad_tag(file: u32, page: u64) -> Error {
    Error::InvalidArgument(if file > MAX_FILE_ID {
        format!("cache file id {file} is above the largest, {MAX_FILE_ID}")
    } else {
        format!("cache page number {page} is above the largest, {MAX_PAGE}")
    })
}

/// A page of a file, as the cache names it: the file's cache id and the
/// page's index in the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PageId {
    /// The file's id in the cache.
    pub file: u32,
    /// The page's index in the file.
    pub page: u64,
}

/// The most partitions a cache's sets may be divided into.
pub const MAX_PARTITIONS: usize = 64;

/// The longest [`CacheOptions::pin_wait`]: one day.
pub const MAX_PIN_WAIT: Duration = Duration::from_secs(24 * 60 * 60);

fn untag(tag: u64) -> (u32, u64) {
    (dirty::file_of(tag), tag & MAX_PAGE)
}

impl<M: Model> PageCache<M> {
    /// A cache as `opts` describe, or an error naming the bad option.
    ///
    /// A cache whose frames and set metadata at `size` need more memory than
    /// the machine, or the memory cgroup the process runs in, can give now
    /// ([`memory_room`]) is refused with [`Error::NotEnoughMemory`]: the
    /// memory is reserved, not allocated, so it would be accepted and the
    /// process killed once the cache fills.
    pub fn new(opts: CacheOptions) -> Result<Self> {
        // The machine's nodes read once: the set counts must divide among
        // the same number of partitions the cache is made with.
        let opts = CacheOptions {
            partitions: Self::partitions_of(&opts),
            ..opts
        };
        let (sets, max_sets) = Self::sets_of(&opts)?;
        let core = Core::new(
            sets,
            max_sets,
            opts.partitions,
            opts.assoc,
            opts.page_size,
            opts.policy,
            opts.pin_wait,
        )?;
        Ok(PageCache { core })
    }

    /// Whether [`PageCache::new`] would accept `opts` (the same error if
    /// not), without making the cache: a caller with several caches to make
    /// can check them all first.
    pub fn check(opts: &CacheOptions) -> Result<()> {
        Self::sets_of(opts).map(|_| ())
    }

    /// The sets a cache of `opts` starts with and may grow to, once `opts`
    /// are checked.
    fn sets_of(opts: &CacheOptions) -> Result<(usize, usize)> {
        let bad = |s: String| Err(Error::InvalidArgument(s));
        if !opts.page_size.is_power_of_two() || !(512..=1 << 20).contains(&opts.page_size) {
            return bad(format!(
                "cache page size {} is not a power of two from 512 B to 1 MiB",
                opts.page_size
            ));
        }
        if !(policy::MIN_ASSOC..=policy::MAX_ASSOC).contains(&opts.assoc) {
            return bad(format!(
                "cache set size {} is outside {}..={} pages",
                opts.assoc,
                policy::MIN_ASSOC,
                policy::MAX_ASSOC
            ));
        }
        if opts.pin_wait > MAX_PIN_WAIT {
            return bad(format!(
                "cache pin wait {:?} is above the most, {:?}",
                opts.pin_wait, MAX_PIN_WAIT
            ));
        }
        if opts.partitions > MAX_PARTITIONS {
            return bad(format!(
                "cache of {} partitions: give 0 (one per NUMA node) or 1 to {MAX_PARTITIONS}",
                opts.partitions
            ));
        }
        let parts = Self::partitions_of(opts);
        let set_bytes = opts.assoc * opts.page_size;
        if opts.size < set_bytes * parts {
            if parts > 1 {
                return bad(format!(
                    "cache size {} bytes is smaller than one set per partition ({parts} x {} pages of {} bytes)",
                    opts.size, opts.assoc, opts.page_size
                ));
            }
            return bad(format!(
                "cache size {} bytes is smaller than one set ({} pages of {} bytes = {set_bytes} bytes)",
                opts.size, opts.assoc, opts.page_size
            ));
        }
        let sets = (opts.size / set_bytes / parts * parts).max(1);
        let meta = setmem::SetLayout::new::<M>(opts.assoc, opts.policy.ghosts(opts.assoc)).stride;
        let need = (sets as u64).saturating_mul((set_bytes + meta) as u64);
        check_memory(need, || {
            let (asked, with_meta) = (human_size(opts.size as u64), human_size(need));
            if asked == with_meta {
                format!("cache of {asked}")
            } else {
                format!("cache of {asked} ({with_meta} with its set metadata)")
            }
        })?;
        let max = opts.max_size.unwrap_or(opts.size).max(opts.size);
        let max_sets = (max / set_bytes).max(sets) / parts * parts;
        if max_sets > u32::MAX as usize / 2 {
            return bad(format!("cache size {max} bytes needs too many sets"));
        }
        Ok((sets, max_sets))
    }

    /// The partitions `opts` ask for, 0 resolved to the machine's nodes.
    fn partitions_of(opts: &CacheOptions) -> usize {
        match opts.partitions {
            0 => crate::util::nodes::nodes().len().clamp(1, MAX_PARTITIONS),
            p => p,
        }
    }

    /// Bytes per page.
    pub fn page_size(&self) -> usize {
        self.core.page_size
    }

    /// How many partitions the sets are divided into
    /// ([`CacheOptions::partitions`]).
    pub fn partitions(&self) -> usize {
        self.core.parts.n
    }

    /// The partition whose sets may hold page `page` of cache file `file`:
    /// its hash modulo the partitions (see `place::Parts`).
    pub(crate) fn partition_of(&self, file: u32, page: u64) -> usize {
        // A page the cache would refuse lives nowhere: partition 0 serves its error.
        tag_of(file, page).map_or(0, |tag| {
            (crate::util::mix::mix64(tag) % self.core.parts.n as u64) as usize
        })
    }

    /// Ask the kernel to place partition `p`'s set metadata, frames and
    /// stamps on NUMA node `node` (a preference: a full node spills to the
    /// others rather than failing). Pages already in memory stay where
    /// they are; the rest go to `node` when first touched.
    pub(crate) fn prefer_node(&self, p: usize, node: usize) -> Result<()> {
        self.core.prefer_node(p, node)
    }

    /// The frames, cut into chunks that a queue's rings register as fixed
    /// buffers when they first read or write a frame in one (registering pins,
    /// and so allocates, the whole chunk). A shrink gives back the frames of
    /// removed sets only in chunks no ring holds.
    pub(crate) fn frame_chunks(&self) -> std::sync::Arc<crate::storage::io::fixed::FixedChunks> {
        self.core.frame_chunks().clone()
    }

    /// How long a lookup waits for a pinned set before it gives up.
    pub fn pin_wait(&self) -> std::time::Duration {
        self.core.pin_wait
    }

    /// Pages per set.
    pub fn assoc(&self) -> usize {
        self.core.lay.assoc
    }

    /// The replacement policy.
    pub fn policy(&self) -> PolicyKind {
        self.core.policy
    }

    /// Sets now.
    pub fn sets(&self) -> usize {
        self.core.n_sets()
    }

    /// Pages the cache holds now.
    pub fn capacity_pages(&self) -> usize {
        self.sets() * self.assoc()
    }

    /// Bytes of metadata one set occupies.
    pub fn set_metadata_bytes(&self) -> SetMetadataBytes {
        SetMetadataBytes {
            used: self.core.lay.used,
            stride: self.core.lay.stride,
        }
    }

    /// Bytes of metadata per cached page (state word, tag, policy byte), not
    /// counting the set header or ghosts.
    pub fn page_metadata_bytes(&self) -> usize {
        setmem::SetLayout::per_page::<M>()
    }

    /// The counters, summed over threads.
    pub fn stats(&self) -> CacheStats {
        self.core.stats.snapshot()
    }

    /// Look `page` of `file` up for reading.
    pub fn get(&self, file: u32, page: u64) -> Result<Lookup<'_, M>> {
        Ok(self
            .lookup_read(file, page, false, Mode::Normal)?
            .expect("a waiting lookup is never busy"))
    }

    /// The read lookup behind [`PageCache::get`] and [`PageCache::try_get`].
    fn lookup_read(
        &self,
        file: u32,
        page: u64,
        nowait: bool,
        mode: Mode,
    ) -> Result<Option<Lookup<'_, M>>> {
        let tag = tag_of(file, page)?;
        let at = |s, i, t| At::new(&self.core, s, i, t);
        Ok(Some(
            match self.core.lookup_as(tag, false, nowait, mode)? {
                Found::Hit(s, i) => Lookup::Hit(PageRef { at: at(s, i, tag) }),
                Found::Miss(s, i) => Lookup::Miss(Fill {
                    at: at(s, i, tag),
                    done: false,
                }),
                Found::WriteBack(s, i, t) => Lookup::WriteBack(WriteBack {
                    at: at(s, i, t),
                    done: false,
                }),
                Found::Busy => return Ok(None),
                Found::Pass => Lookup::Miss(Fill {
                    at: At::own(&self.core, tag),
                    done: false,
                }),
                Found::Held | Found::WriteBackHeld => {
                    unreachable!("only a writer waits for pins and write-backs")
                }
                Found::FillHeld { own } => return Err(self.fill_held(file, page, own)),
                Found::IoHeld { fill } => return Err(self.io_held(file, page, fill)),
                Found::WriterHeld => {
                    return Err(Error::HeldByCaller(format!(
                        "page {page} of cache file {file} was still held by a writer of another \
                         thread after {:.1} s, while request queues of this thread hold reads or \
                         write-backs in flight that only this thread finishes (and that thread \
                         may be waiting for one): poll, wait for or drain the queue before a \
                         synchronous call",
                        (self.core.pin_wait * self::core::CROSS_FILL_WAITS).as_secs_f64()
                    )));
                }
            },
        ))
    }

    /// The write lookup behind [`PageCache::get_mut`] and
    /// [`PageCache::try_get_mut`].
    fn lookup_write(
        &self,
        file: u32,
        page: u64,
        nowait: bool,
        mode: Mode,
    ) -> Result<Option<LookupMut<'_, M>>> {
        let tag = tag_of(file, page)?;
        let at = |s, i, t| At::new(&self.core, s, i, t);
        Ok(Some(
            match self.core.lookup_as(tag, true, nowait, mode)? {
                Found::Hit(s, i) => LookupMut::Hit(PageMut { at: at(s, i, tag) }),
                Found::Miss(s, i) => LookupMut::Miss(FillMut(Fill {
                    at: at(s, i, tag),
                    done: false,
                })),
                Found::WriteBack(s, i, t) => LookupMut::WriteBack(WriteBack {
                    at: at(s, i, t),
                    done: false,
                }),
                Found::Busy => return Ok(None),
                Found::Pass => unreachable!("a writer's page is always admitted"),
                Found::WriterHeld => unreachable!("only a reader waits for a writer"),
                Found::WriteBackHeld => {
                    return Err(Error::HeldByCaller(format!(
                        "page {page} of cache file {file} was still being written back by \
                         another thread after {:.1} s, while request queues of this thread hold \
                         reads or write-backs in flight that only this thread finishes (and that \
                         thread may be waiting for one): poll, wait for or drain the queue before \
                         a synchronous call",
                        (self.core.pin_wait * self::core::CROSS_FILL_WAITS).as_secs_f64()
                    )));
                }
                Found::Held => {
                    return Err(Error::Busy(format!(
                        "page {page} of cache file {file} stayed pinned by page guards (readers, or a writer) for {} ms",
                        self.core.pin_wait.as_millis()
                    )));
                }
                Found::FillHeld { own } => return Err(self.fill_held(file, page, own)),
                Found::IoHeld { fill } => return Err(self.io_held(file, page, fill)),
            },
        ))
    }

    fn io_held(&self, file: u32, page: u64, fill: bool) -> Error {
        Error::Busy(format!(
            "page {page} of cache file {file} was still being {} by another thread after \
             {:.1} s: a request queue's I/O ends only when its thread polls the queue",
            if fill { "read in" } else { "written back" },
            (self.core.pin_wait * self::core::LONE_IO_WAITS).as_secs_f64()
        ))
    }

    fn fill_held(&self, file: u32, page: u64, own: bool) -> Error {
        Error::HeldByCaller(if own {
            format!(
                "page {page} of cache file {file} was still being read in after {} ms by a \
                 request queue of this thread, whose reads only this thread finishes: poll, \
                 wait for or drain the queue before a synchronous call",
                self.core.pin_wait.as_millis()
            )
        } else {
            format!(
                "page {page} of cache file {file} was still being read in by another thread \
                 after {:.1} s, while request queues of this thread hold reads or write-backs \
                 in flight that only this thread finishes (and that thread may be waiting for \
                 one): poll, wait for or drain the queue before a synchronous call",
                (self.core.pin_wait * self::core::CROSS_FILL_WAITS).as_secs_f64()
            )
        })
    }

    /// Copy `dst.len()` bytes at `offset` of `page` of `file` into `dst` if the
    /// page is cached and readable right now, without pinning it: the hit path
    /// of readers that copy bytes out (docs/design.md, the hit path, step 2).
    /// Nothing shared is written unless the policy needs to record the
    /// hit. `Ok(false)` means the page is absent, being filled or written, or
    /// changed during the copy (`dst` then holds garbage): use [`PageCache::get`]
    /// or [`PageCache::get_with`].
    #[inline]
    pub fn try_read(&self, file: u32, page: u64, offset: usize, dst: &mut [u8]) -> Result<bool> {
        Ok(self.try_read_as(file, page, offset, dst, false)? != Got::Miss)
    }

    /// [`PageCache::try_read`] as a sequential stream's reader (`stream`:
    /// see [`PageCache::try_read_stream`]) or any other.
    #[inline]
    fn try_read_as(
        &self,
        file: u32,
        page: u64,
        offset: usize,
        dst: &mut [u8],
        stream: bool,
    ) -> Result<Got> {
        let tag = tag_of(file, page)?;
        if offset
            .checked_add(dst.len())
            .is_none_or(|e| e > self.core.page_size)
        {
            return Err(Error::InvalidArgument(format!(
                "cache read of {} bytes at offset {offset} does not fit a page of {} bytes",
                dst.len(),
                self.core.page_size
            )));
        }
        let got = self.core.try_read_as(tag, offset, dst, stream);
        if got != Got::Miss {
            self.core.stats.bump(stats::Stat::Hits);
        }
        Ok(got)
    }

    /// A hint that `page` of `file` will be looked up soon: with `frame` false,
    /// start loading its set's metadata into the CPU caches; with `frame`
    /// true, if the page is cached, start loading the first lines of its
    /// frame (best after the set was prefetched). Changes nothing; invalid
    /// numbers are ignored.
    #[inline]
    pub fn prefetch(&self, file: u32, page: u64, frame: bool) {
        if let Ok(tag) = tag_of(file, page) {
            self.core.prefetch(tag, frame);
        }
    }

    /// A hint that bytes `from..to` of `page` of `file` will be read soon: if
    /// the page is cached, start loading those lines of its frame. Changes
    /// nothing; invalid numbers are ignored.
    #[inline]
    pub fn prefetch_bytes(&self, file: u32, page: u64, from: usize, to: usize) {
        if let Ok(tag) = tag_of(file, page) {
            self.core.prefetch_bytes(tag, from, to);
        }
    }

    /// Look `page` of `file` up for writing: the guard is exclusive and marks
    /// the page dirty.
    pub fn get_mut(&self, file: u32, page: u64) -> Result<LookupMut<'_, M>> {
        Ok(self
            .lookup_write(file, page, false, Mode::Normal)?
            .expect("a waiting lookup is never busy"))
    }

    /// As [`PageCache::get`], but never waits for another requester's fill, for
    /// a writer, or for a pin in a set whose pages are all pinned: `Ok(None)`
    /// means try again later (after some of your own I/O completed; give up
    /// after [`PageCache::pin_wait`] without progress). For asynchronous callers, which may
    /// themselves own the fill in flight.
    pub fn try_get(&self, file: u32, page: u64) -> Result<Option<Lookup<'_, M>>> {
        self.lookup_read(file, page, true, Mode::Normal)
    }

    /// [`PageCache::try_get`] for a reader of kind `mode` (a page guard's:
    /// [`Mode::Keep`]).
    pub(crate) fn try_get_as(
        &self,
        file: u32,
        page: u64,
        mode: Mode,
    ) -> Result<Option<Lookup<'_, M>>> {
        // A page request's first look takes the lock-free pin, as a
        // synchronous reader's does (the locked lookup after it assumes that
        // a caller that does not wait has tried that already).
        let tag = tag_of(file, page)?;
        if let Some((s, i)) = self.core.fast_read(tag, mode) {
            return Ok(Some(Lookup::Hit(PageRef {
                at: At::new(&self.core, s, i, tag),
            })));
        }
        self.lookup_read(file, page, true, mode)
    }

    /// The page pinned for reading if it is cached and readable now; else
    /// `None`, with nothing claimed, waited for or counted. For a sequential
    /// stream's reader (`stream`), a cold page stays cold.
    pub(crate) fn try_pin_present(
        &self,
        file: u32,
        page: u64,
        stream: bool,
    ) -> Result<Option<PageRef<'_, M>>> {
        let mode = if stream {
            Mode::PresentStream
        } else {
            Mode::Present
        };
        match self.lookup_read(file, page, true, mode)? {
            Some(Lookup::Hit(p)) => Ok(Some(p)),
            None => Ok(None),
            Some(_) => unreachable!("a lookup of a present page claims nothing"),
        }
    }

    /// The page held for writing if it is cached and free now; else `None`,
    /// with nothing claimed, waited for or counted.
    pub(crate) fn try_get_mut_present(
        &self,
        file: u32,
        page: u64,
    ) -> Result<Option<PageMut<'_, M>>> {
        match self.lookup_write(file, page, true, Mode::Present)? {
            Some(LookupMut::Hit(p)) => Ok(Some(p)),
            None => Ok(None),
            Some(_) => unreachable!("a lookup of a present page claims nothing"),
        }
    }

    /// Where `page` of `file` is, if it is cached and readable now, for a
    /// reader that checks `cache::still` after each use of its bytes (a
    /// translation cache's entry). Counts a hit; takes no pin.
    #[cfg(test)]
    pub(crate) fn sight(&self, file: u32, page: u64) -> Result<Option<Sighting<'_, M>>> {
        self.sight_as(file, page, false)
    }

    /// Where `page` of `file` is, if it is cached and readable now, for a
    /// reader that checks `cache::still` after each use of its bytes (a
    /// translation cache's entry). Counts a hit; takes no pin. A sequential
    /// stream's reader (`stream`) leaves a cold page cold.
    #[inline]
    pub(crate) fn sight_as(
        &self,
        file: u32,
        page: u64,
        stream: bool,
    ) -> Result<Option<Sighting<'_, M>>> {
        let found = self.core.sight(tag_of(file, page)?, stream);
        if found.is_some() {
            self.core.stats.bump(stats::Stat::Hits);
        }
        Ok(found)
    }

    /// Pin the page `s` saw if it is still there, readable and with no
    /// writer (see `Core::pin_seen`): returns whether it is pinned; the pin
    /// goes back through [`PageCache::release_stored`] after a store, or
    /// [`PageCache::release_seen`] after reads only.
    pub(crate) fn pin_seen(
        &self,
        state: &M::W,
        epoch: &std::sync::atomic::AtomicU64,
        v: u32,
        ep: u64,
    ) -> bool {
        self.core.pin_seen(state, epoch, v, ep)
    }

    /// Drop a pin of the slot whose word is `state` (from a sighting of
    /// this cache) taken only to read the frame (see `Core::release_seen`).
    pub(crate) fn release_seen(&self, state: &M::W) {
        self.core.release_seen(state)
    }

    /// Drop a pin of the slot whose word is `state` (from a sighting of
    /// this cache), taken to store into the frame: the page is dirty after
    /// (see `Core::release_stored`).
    pub(crate) fn release_stored(&self, state: &M::W, file: u32) {
        self.core.release_stored(state, file)
    }

    /// The pinned page of `pin` (see [`PageRef::into_raw`]) as a guard again.
    ///
    /// # Safety
    /// `pin` came from `into_raw` of a guard of this cache, and is used once.
    pub(crate) unsafe fn restore_pin(&self, pin: RawPin) -> PageRef<'_, M> {
        PageRef {
            at: At::new(&self.core, pin.set, pin.slot, pin.tag),
        }
    }

    /// [`PageCache::try_get`] for a sequential stream's reader: a page it
    /// finds cold stays cold, and a page it brings in enters cold.
    pub(crate) fn try_get_stream(&self, file: u32, page: u64) -> Result<Option<Lookup<'_, M>>> {
        self.lookup_read(file, page, true, Mode::Stream)
    }

    /// Claim `page` of `file` for readahead: `Some` (a cold page, pending,
    /// for the caller to fill) only if it is absent and its sets have a free
    /// slot or a cold clean idle page to evict. A page present is left as it is, and
    /// nothing is counted but the claim.
    pub(crate) fn claim_ahead(&self, file: u32, page: u64) -> Result<Option<Fill<'_, M>>> {
        match self.lookup_read(file, page, true, Mode::Ahead)? {
            Some(Lookup::Miss(f)) => Ok(Some(f)),
            Some(Lookup::Hit(_)) | None => Ok(None),
            Some(Lookup::WriteBack(_)) => unreachable!("readahead never writes a victim back"),
        }
    }

    /// [`PageCache::try_read`] for a sequential stream's reader: a cold page
    /// stays cold, and the answer says whether it was ([`Got::Cold`]).
    #[inline]
    pub(crate) fn try_read_stream(
        &self,
        file: u32,
        page: u64,
        offset: usize,
        dst: &mut [u8],
    ) -> Result<Got> {
        self.try_read_as(file, page, offset, dst, true)
    }

    /// Wait until `page` of `file` is no longer being filled, written back
    /// or held by a writer, for at most `timeout` (at once if it is absent
    /// or none of those): for a caller that holds none of them, instead of
    /// polling. Returns whether it waited.
    pub(crate) fn wait_busy(&self, file: u32, page: u64, timeout: std::time::Duration) -> bool {
        tag_of(file, page).is_ok_and(|tag| self.core.wait_busy(tag, timeout))
    }

    /// Wait until `page` of `file` is no longer being filled, for at most
    /// `timeout` (at once if it is absent or not being filled). For a caller
    /// that owns no fill, instead of polling. Returns whether it waited.
    pub(crate) fn wait_fill(&self, file: u32, page: u64, timeout: std::time::Duration) -> bool {
        tag_of(file, page).is_ok_and(|tag| self.core.wait_fill(tag, timeout))
    }

    /// Whether `page` of `file` is in the cache (valid, or being filled) right
    /// now: a hint, by a look without locks.
    pub(crate) fn is_present(&self, file: u32, page: u64) -> bool {
        tag_of(file, page)
            .is_ok_and(|tag| self.core.find(crate::util::mix::mix64(tag), tag).is_some())
    }

    /// Whether `page` of `file` is being filled right now (a hint, by a look
    /// without locks): a caller that does not wait can leave it for later
    /// without a lookup.
    pub(crate) fn is_filling(&self, file: u32, page: u64) -> bool {
        tag_of(file, page).is_ok_and(|tag| self.core.is_filling(tag))
    }

    /// Whether a request queue of the calling thread is reading `page` of
    /// `file` in (only this thread finishes that read).
    pub(crate) fn is_own_queue_fill(&self, file: u32, page: u64) -> bool {
        tag_of(file, page).is_ok_and(|tag| self.core.is_own_queue_fill(tag))
    }

    /// Whether `page` of `file` is cached with a read or a write-back of it
    /// in flight.
    pub(crate) fn is_in_io(&self, file: u32, page: u64) -> bool {
        tag_of(file, page).is_ok_and(|tag| self.core.is_in_io(tag))
    }

    /// What holds `page` of `file` now, in words (see [`core::Core::why_busy`]).
    pub(crate) fn why_busy(&self, file: u32, page: u64) -> &'static str {
        tag_of(file, page).map_or("past the cache's pages", |tag| self.core.why_busy(tag))
    }

    /// Make every translation made before now of a page of the sets `page`
    /// of `file` may live in stale (their change counts move), so that a
    /// paged array's reader looks the page up again: for a change that could
    /// not be made to the page itself (its tail past a new end not cleared
    /// while another thread held it).
    pub(crate) fn unsettle(&self, file: u32, page: u64) {
        if let Ok(tag) = tag_of(file, page) {
            self.core.unsettle(tag);
        }
    }

    /// Count `n` pages read ahead that a sequential reader then read.
    pub(crate) fn count_readahead_used(&self, n: u64) {
        self.core.stats.add(stats::Stat::ReadaheadUsed, n);
    }

    /// Let `page` of `file` go first if it is cached, clean and idle;
    /// returns whether it was marked.
    pub(crate) fn make_cold(&self, file: u32, page: u64) -> Result<bool> {
        Ok(self.core.make_cold(tag_of(file, page)?))
    }

    /// The cached pages of `file` pinned now (by guards or in-flight work).
    pub(crate) fn pinned_pages(&self, file: u32) -> Vec<u64> {
        let mut out = Vec::new();
        self.core.for_each(|tag, st, _| {
            let (f, p) = untag(tag);
            if f == file && core::pins(st) > 0 {
                out.push(p);
            }
        });
        out
    }

    /// Whether page `page` of `file` is cached and pinned now.
    pub(crate) fn is_pinned(&self, file: u32, page: u64) -> bool {
        tag_of(file, page)
            .ok()
            .and_then(|t| self.core.state_of(t))
            .is_some_and(|v| core::pins(v) > 0)
    }

    /// [`PageCache::make_cold`] for pages `first..last` of `file`: how many
    /// turned cold. A range longer than the cache holds pages is done by one
    /// walk of the sets, so the cost is bounded by the cache, not by the range
    /// (advice over a whole large file, as fio gives at every job's start).
    pub(crate) fn make_cold_range(&self, file: u32, first: u64, last: u64) -> Result<usize> {
        if first >= last {
            return Ok(0);
        }
        if last - first <= self.capacity_pages() as u64 {
            let mut made = 0;
            for p in first..last {
                made += usize::from(self.make_cold(file, p)?);
            }
            return Ok(made);
        }
        let lo = tag_of(file, first)?;
        let hi = tag_of(file, (last - 1).min(MAX_PAGE))?;
        Ok(self.core.make_cold_where(|t| (lo..=hi).contains(&t)))
    }

    /// As [`PageCache::get_mut`], but `Ok(None)` instead of waiting while the
    /// page is filled, pinned or written back.
    pub fn try_get_mut(&self, file: u32, page: u64) -> Result<Option<LookupMut<'_, M>>> {
        self.lookup_write(file, page, true, Mode::Normal)
    }

    /// Install a write-back flusher's hook: after a write leaves `at` or more
    /// dirty pages in a set, `hook(set)` runs once (on the writer's thread,
    /// with the set locked, or unlocked after a store into a pinned frame: it
    /// must only queue the set somewhere) until the
    /// flusher calls [`PageCache::flushed`] for that set. Returns false if a
    /// hook is installed already. For the crate's flusher only.
    pub(crate) fn set_flush_hook(
        &self,
        at: usize,
        hook: impl Fn(usize) + Send + Sync + 'static,
    ) -> bool {
        self.core.set_flusher(at, Box::new(hook))
    }

    /// The flusher takes `set`, before it looks at the set's pages: a later
    /// write may flag it again.
    pub(crate) fn flushed(&self, set: usize) {
        self.core.unmark_flush(set);
    }

    /// The dirty, idle pages of `set`, soonest evicted first by its policy (the
    /// policy state is not changed), and how many pages of the set are dirty;
    /// never waiting for the set's lock: `None` when another thread holds it.
    pub(crate) fn try_dirty_in_eviction_order(
        &self,
        set: usize,
    ) -> Option<(Vec<(u32, u64)>, usize)> {
        let (tags, n) = self.core.try_dirty_in_order(set)?;
        Some((tags.into_iter().map(untag).collect(), n))
    }

    /// The page for reading, loading it with `load(file, page, frame)` on a miss
    /// and writing dirty pages back with `store(file, page, bytes)` when its set
    /// has no clean page to give up.
    pub fn get_with(
        &self,
        file: u32,
        page: u64,
        load: impl FnMut(u32, u64, &mut [u8]) -> Result<()>,
        store: impl FnMut(u32, u64, &[u8]) -> Result<()>,
    ) -> Result<PageRef<'_, M>> {
        self.get_with_as(file, page, Mode::Normal, load, store)
    }

    /// [`PageCache::get_with`] for a reader of kind `mode`: a sequential
    /// stream's ([`Mode::Stream`], see [`PageCache::try_get_stream`]), or one
    /// that keeps the page ([`Mode::Keep`], a page guard: the page always
    /// gets a slot, never a frame of its own).
    pub(crate) fn get_with_as(
        &self,
        file: u32,
        page: u64,
        mode: Mode,
        mut load: impl FnMut(u32, u64, &mut [u8]) -> Result<()>,
        mut store: impl FnMut(u32, u64, &[u8]) -> Result<()>,
    ) -> Result<PageRef<'_, M>> {
        loop {
            let found = self
                .lookup_read(file, page, false, mode)?
                .expect("a waiting lookup is never busy");
            match found {
                Lookup::Hit(p) => return Ok(p),
                Lookup::Miss(mut f) => {
                    let r = load(file, page, f.frame_mut());
                    return f.finish(r);
                }
                Lookup::WriteBack(w) => {
                    let r = store(w.file(), w.page(), w.bytes());
                    w.finish(r)?;
                }
            }
        }
    }

    /// The page for writing; see [`PageCache::get_with`]. On a miss, `load`
    /// runs first (a caller overwriting the whole page may make it a no-op).
    pub fn get_mut_with(
        &self,
        file: u32,
        page: u64,
        mut load: impl FnMut(u32, u64, &mut [u8]) -> Result<()>,
        mut store: impl FnMut(u32, u64, &[u8]) -> Result<()>,
    ) -> Result<PageMut<'_, M>> {
        loop {
            match self.get_mut(file, page)? {
                LookupMut::Hit(p) => return Ok(p),
                LookupMut::Miss(mut f) => {
                    let r = load(file, page, f.frame_mut());
                    return f.finish(r);
                }
                LookupMut::WriteBack(w) => {
                    let r = store(w.file(), w.page(), w.bytes());
                    w.finish(r)?;
                }
            }
        }
    }

    /// Drop a cached page if it is clean and nobody uses it; returns whether it
    /// was dropped.
    pub fn evict(&self, file: u32, page: u64) -> Result<bool> {
        Ok(self.core.evict(tag_of(file, page)?))
    }

    /// If `page` of `file` is cached, dirty and idle, hand it out to be written
    /// back (it counts as clean once the write-back finishes successfully).
    pub fn write_back(&self, file: u32, page: u64) -> Result<Option<WriteBack<'_, M>>> {
        let tag = tag_of(file, page)?;
        Ok(self.core.start_writeback(tag).map(|(s, i)| WriteBack {
            at: At::new(&self.core, s, i, tag),
            done: false,
        }))
    }

    /// As [`PageCache::write_back`], never waiting for a set's lock:
    /// `Ok(Err(SetLocked))` when another thread holds a set the page may be
    /// in. For a writer that holds other pages under write-back meanwhile,
    /// whose writers wait for it.
    pub(crate) fn try_write_back(
        &self,
        file: u32,
        page: u64,
    ) -> Result<std::result::Result<Option<WriteBack<'_, M>>, SetLocked>> {
        let tag = tag_of(file, page)?;
        Ok(match self.core.try_start_writeback(tag) {
            Ok(found) => Ok(found.map(|(s, i)| WriteBack {
                at: At::new(&self.core, s, i, tag),
                done: false,
            })),
            Err(()) => Err(SetLocked),
        })
    }

    /// Hold the locks of the sets `page` of `file` may be in while `during`
    /// runs (tests of code that must never wait for a set's lock).
    #[cfg(test)]
    pub(crate) fn holding_sets_of(&self, file: u32, page: u64, during: impl FnOnce()) {
        let h = crate::util::mix::mix64(tag_of(file, page).expect("a page number in range"));
        let (a, b) = self.core.sets_now(h);
        let (a, b) = (a.min(b), a.max(b));
        self.core.lock(a);
        if b != a {
            self.core.lock(b);
        }
        during();
        if b != a {
            self.core.unlock(b);
        }
        self.core.unlock(a);
    }

    /// Whether `page` of `file` is cached, dirty and idle, read without a lock:
    /// a hint that may be stale by the time it is used (the flusher uses it to
    /// find the dirty pages near one it writes).
    pub(crate) fn dirty_hint(&self, file: u32, page: u64) -> bool {
        tag_of(file, page).is_ok_and(|tag| self.core.dirty_hint(tag))
    }

    /// Address of the metadata block of the set `page` of `file` maps to now,
    /// for benchmarks that measure what reaching a set costs (never
    /// dereference it while the cache is in use).
    // Hidden: only the binary's `hitbench` uses it (the binary is a separate
    // crate, so it cannot be `pub(crate)`); an address is no use to a program.
    #[doc(hidden)]
    pub fn set_address(&self, file: u32, page: u64) -> Result<usize> {
        Ok(self.core.set_addr(tag_of(file, page)?))
    }

    /// Whether `page` of `file` is cached with data not yet on the device:
    /// dirty, or its write-back still in flight.
    #[cfg(test)]
    pub(crate) fn write_pending(&self, file: u32, page: u64) -> Result<bool> {
        Ok(self.write_pending_why(file, page)?.is_some())
    }

    /// Whether `page` of `file` is cached with data not yet on the device,
    /// and why: `Some(true)` while its write-back is in flight, `Some(false)` while it is dirty with none
    /// (held by a writer or pinned, say), `None` when nothing is pending.
    pub(crate) fn write_pending_why(&self, file: u32, page: u64) -> Result<Option<bool>> {
        Ok(self
            .core
            .state_of(tag_of(file, page)?)
            .filter(|v| v & (core::DIRTY | core::WRITEBACK) != 0)
            .map(|v| v & core::WRITEBACK != 0))
    }

    /// As [`PageCache::write_pending_why`], never waiting for a set's lock:
    /// `Ok(Err(SetLocked))` when another thread holds one the page may be in.
    pub(crate) fn try_write_pending_why(
        &self,
        file: u32,
        page: u64,
    ) -> Result<std::result::Result<Option<bool>, SetLocked>> {
        Ok(match self.core.try_state_of(tag_of(file, page)?) {
            Ok(v) => Ok(v
                .filter(|v| v & (core::DIRTY | core::WRITEBACK) != 0)
                .map(|v| v & core::WRITEBACK != 0)),
            Err(()) => Err(SetLocked),
        })
    }

    /// Whether `page` of `file` is cached with someone waiting for its state
    /// to change (`WAITERS`: for its write-back, its fill, its writer or its
    /// readers to end; a waiter that gave up may leave the mark until the
    /// next such change).
    pub(crate) fn waited_for(&self, file: u32, page: u64) -> Result<bool> {
        Ok(self
            .core
            .state_of(tag_of(file, page)?)
            .is_some_and(|v| v & core::WAITERS != 0))
    }

    /// A page (file, page) whose fill a request queue of this thread holds in
    /// flight in this cache and that someone waits for.
    pub(crate) fn own_fill_waited_for(&self) -> Option<(u32, u64)> {
        let tag = self.core.own_fill_waited_for()?;
        Some((dirty::file_of(tag), tag & ((1 << dirty::FILE_SHIFT) - 1)))
    }

    /// A page of `file` from `from` on whose fill a request queue of this
    /// thread holds in flight (only this thread ends it, by polling).
    pub(crate) fn own_fill_from(&self, file: u32, from: u64) -> Option<u64> {
        let first = tag_of(file, from.min(MAX_PAGE)).ok()?;
        let last = ((file as u64) << 40) | MAX_PAGE;
        let tag = self.core.own_fill_in(first..=last)?;
        Some(tag & ((1 << dirty::FILE_SHIFT) - 1))
    }

    /// Whether `page` of `file` is cached and dirty (its state word now).
    pub(crate) fn dirty(&self, file: u32, page: u64) -> Result<bool> {
        Ok(self
            .core
            .state_of(tag_of(file, page)?)
            .is_some_and(|v| v & core::DIRTY != 0))
    }

    /// Whether `page` of `file` is cached with its write-back in flight.
    pub(crate) fn writing_back(&self, file: u32, page: u64) -> Result<bool> {
        Ok(self
            .core
            .state_of(tag_of(file, page)?)
            .is_some_and(|v| v & core::WRITEBACK != 0))
    }

    /// Drop every cached page of `file` without waiting: whether none is
    /// left (a page in use stays, and the answer is no).
    pub(crate) fn discard_idle(&self, file: u32) -> bool {
        let Ok(first) = tag_of(file, 0) else {
            return true;
        };
        let which = |t: u64| t >> 40 == first >> 40;
        loop {
            let (dropped, busy) = self.core.discard_where(which);
            if busy > 0 {
                return false;
            }
            // A resize may have moved a page into a set already visited.
            if dropped == 0 {
                return true;
            }
        }
    }

    /// Mark `page` of `file` dirty if it is cached, so that it is written back
    /// again (after a failed fsync, whose pages the kernel may have dropped).
    /// Returns whether the page was cached.
    pub(crate) fn mark_dirty(&self, file: u32, page: u64) -> Result<bool> {
        Ok(self.core.mark_dirty(tag_of(file, page)?))
    }

    /// Drop the cached pages of `file` from page `from` on, as a truncate or a
    /// delete does: dirty pages are discarded unwritten. Pages in use (pinned,
    /// being filled, written or written back) are waited for, up to the pin
    /// wait for each stretch in which none of them is let go; then the call
    /// fails with [`Error::Busy`] and the pages still cached stay as they are.
    /// Returns the number of pages dropped.
    ///
    /// Visits every set, so its cost grows with the cache, not the file: meant
    /// for metadata operations, not for a data path. A thread must not hold a
    /// page of `file` (or have claimed one through a queue it has not drained)
    /// while it calls this.
    pub fn discard(&self, file: u32, from: u64) -> Result<usize> {
        if from > MAX_PAGE {
            tag_of(file, 0)?;
            return Ok(0); // no page can be cached there
        }
        tag_of(file, from)?;
        let first = ((file as u64) << 40) | from;
        let last = ((file as u64) << 40) | MAX_PAGE;
        self.discard_matching(
            |t: u64| (first..=last).contains(&t),
            || format!("cache file {file}"),
        )
    }

    /// Drop every cached page of the cache files `files` (sorted), as
    /// [`PageCache::discard`] does, in one walk of the cache for them all.
    pub(crate) fn discard_files(&self, files: &[u32]) -> Result<usize> {
        debug_assert!(files.is_sorted());
        self.discard_matching(
            |t: u64| files.binary_search(&((t >> 40) as u32)).is_ok(),
            || format!("{} cache files", files.len()),
        )
    }

    /// `discard`'s loop for the pages whose tags `which` picks; `what` names
    /// them in its error.
    fn discard_matching(
        &self,
        which: impl Fn(u64) -> bool,
        what: impl Fn() -> String,
    ) -> Result<usize> {
        let mut total = 0;
        let mut since = std::time::Instant::now();
        let mut pause = 1u64;
        loop {
            let (dropped, busy) = self.core.discard_where(&which);
            total += dropped;
            if busy == 0 {
                // A resize may have moved a page into a set already visited:
                // a pass that finds nothing at all ends it.
                if dropped == 0 {
                    return Ok(total);
                }
                continue;
            }
            if dropped > 0 {
                since = std::time::Instant::now();
            } else if since.elapsed() > self.core.pin_wait {
                return Err(Error::Busy(format!(
                    "{busy} cached pages of {} stayed in use for {:?} while they were being \
                     dropped",
                    what(),
                    self.core.pin_wait
                )));
            }
            std::thread::sleep(Duration::from_micros(pause));
            pause = (pause * 2).min(1000);
        }
    }

    /// Every cached page that is dirty.
    pub fn dirty_pages(&self) -> Vec<PageId> {
        let mut out = Vec::new();
        self.core.for_each(|tag, st, _| {
            if st & core::DIRTY != 0 {
                let (file, page) = untag(tag);
                out.push(PageId { file, page });
            }
        });
        out
    }

    /// The pages of `file` that are dirty or under write-back, sorted, found
    /// by visiting only the sets where its pages turned dirty since the last
    /// call (their marks are taken); with those sets, to give back through
    /// [`PageCache::remark`] if the caller cannot write every page. Pages
    /// that turn dirty meanwhile mark their sets again; a set where a clean
    /// page of the file is pinned keeps its mark (its pin holder may be
    /// storing into it).
    pub(crate) fn take_pending_of(&self, file: u32) -> (Vec<u64>, Vec<usize>) {
        // No resize step between the take and the visits: a page moved out
        // of a taken set meanwhile would mark a set this visit never sees.
        let _no_resize = self.core.inited.lock().unwrap_or_else(|p| p.into_inner());
        let sets = self.core.dirty.take(file);
        let mut pages = Vec::new();
        for &s in &sets {
            let mut pinned = false;
            self.core.for_set(s, |tag, st| {
                let (f, p) = untag(tag);
                if f != file {
                    return;
                }
                if st & (core::DIRTY | core::WRITEBACK) != 0 {
                    pages.push(p);
                }
                // (A dirty page is written back only once no pin is left.)
                pinned |= core::pins(st) > 0 && st & core::DIRTY == 0;
            });
            if pinned {
                // A pin holder may be storing into the page: it marked the
                // set before its store makes the page dirty, and a store
                // after that one finds the page dirty and marks nothing (see
                // `Core::release_stored`). The mark stays for the next sync.
                self.core.dirty.mark_unlocked(file, s);
            }
        }
        pages.sort_unstable();
        pages.dedup();
        (pages, sets)
    }

    /// Mark `sets` again for `file` (a sync that took them failed part way).
    pub(crate) fn remark(&self, file: u32, sets: &[usize]) {
        for &s in sets {
            self.core.dirty.mark_unlocked(file, s);
        }
    }

    /// Every page dirty or under write-back, by a walk of the whole cache
    /// (the reference the tests hold [`PageCache::take_pending_of`] to).
    #[cfg(test)]
    pub(crate) fn pending_pages(&self) -> Vec<(u32, u64)> {
        let mut out = Vec::new();
        self.core.for_each(|tag, st, _| {
            if st & (core::DIRTY | core::WRITEBACK) != 0 {
                out.push(untag(tag));
            }
        });
        out
    }

    /// Every cached page, with whether it is dirty.
    pub fn pages(&self) -> Vec<CachedPage> {
        let mut out = Vec::new();
        self.core.for_each(|tag, st, _| {
            let (file, page) = untag(tag);
            out.push(CachedPage {
                file,
                page,
                dirty: st & core::DIRTY != 0,
            });
        });
        out
    }

    /// Grow or shrink to `bytes` of frames (whole sets, between the starting
    /// size and `max_size`), one set at a time by linear hashing while other
    /// threads keep using the cache. Pages move with their data and dirty state;
    /// pinned pages never move (the resize waits for them, up to `pin_wait` per
    /// step). Shrinking drops clean pages when the merged sets overflow; if
    /// dirty pages leave no room it stops with [`Error::ResizeBusy`]: write them
    /// back and retry.
    ///
    /// Growing by more than the machine (or the process's memory cgroup) can
    /// give now is refused at once with [`Error::NotEnoughMemory`]; the memory
    /// the cache already holds is not counted again. Resizes from several
    /// threads run one after another.
    pub fn resize(&self, bytes: usize) -> Result<()> {
        let set_bytes = self.assoc() * self.page_size();
        let target = (bytes / set_bytes).clamp(1, self.core.max_sets);
        let mut waited = Duration::ZERO;
        let mut pause = 1u64;
        // One resize at a time, each to its own target in turn (a model
        // checker's thread yields while it waits rather than block).
        let _one = loop {
            match self.core.resizing.try_lock() {
                Ok(g) => break g,
                Err(std::sync::TryLockError::Poisoned(p)) => break p.into_inner(),
                Err(std::sync::TryLockError::WouldBlock) => M::backoff(100),
            }
        };
        // The size as the resizes before this one left it.
        let now = self.sets();
        if target > now {
            let per_set = (set_bytes + self.core.lay.stride) as u64;
            let more = (target - now) as u64 * per_set;
            check_memory(more, || {
                format!(
                    "growing the cache from {} to {} ({} more with its set metadata)",
                    human_size((now * set_bytes) as u64),
                    human_size((target * set_bytes) as u64),
                    human_size(more)
                )
            })?;
        }
        loop {
            let n = self.sets();
            let step = if n < target {
                self.core.grow_one()
            } else if n > target {
                self.core.shrink_one()
            } else {
                return Ok(());
            };
            match step {
                Ok(true) => {
                    waited = Duration::ZERO;
                    pause = 1;
                }
                Ok(false) => return Ok(()), // at a bound
                Err(core::Busy::Dirty) => {
                    return Err(Error::ResizeBusy(format!(
                        "stopped at {n} sets (target {target}): merging sets would drop dirty pages; write them back and retry"
                    )));
                }
                Err(core::Busy::Pinned) => {
                    if waited >= self.core.pin_wait {
                        return Err(Error::ResizeBusy(format!(
                            "stuck at {n} sets (target {target}): pages to move stayed pinned for {} ms",
                            waited.as_millis()
                        )));
                    }
                    M::backoff(pause);
                    waited += Duration::from_micros(pause);
                    pause = (pause * 2).min(1000);
                }
            }
        }
    }
}

/// The size of one set's metadata block, from
/// [`PageCache::set_metadata_bytes`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SetMetadataBytes {
    /// Bytes the block uses: the set header, the per-slot words, tags and
    /// policy bytes, and the policy's ghosts.
    pub used: usize,
    /// Bytes the block occupies: `used` rounded up to whole cache lines (the
    /// distance from one set's block to the next).
    pub stride: usize,
}

/// One page the cache holds, from [`PageCache::pages`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CachedPage {
    /// The cache file id.
    pub file: u32,
    /// The page number in the file.
    pub page: u64,
    /// Whether it holds bytes not yet written back.
    pub dirty: bool,
}

/// The result of [`PageCache::get`].
pub enum Lookup<'a, M: Model = Os> {
    /// The page, pinned for reading.
    Hit(PageRef<'a, M>),
    /// The page is absent: fill the frame and call [`Fill::finish`]. Every other
    /// requester of the page waits for this fill.
    Miss(Fill<'a, M>),
    /// No clean page in the set: write this dirty page back, call
    /// [`WriteBack::finish`], then look up again.
    WriteBack(WriteBack<'a, M>),
}

/// The result of [`PageCache::get_mut`].
pub enum LookupMut<'a, M: Model = Os> {
    /// The page, held exclusively for writing (marked dirty).
    Hit(PageMut<'a, M>),
    /// The page is absent: fill the frame and call [`FillMut::finish`].
    Miss(FillMut<'a, M>),
    /// As [`Lookup::WriteBack`].
    WriteBack(WriteBack<'a, M>),
}

/// Where a guard's page is: the cache, its set and slot, and its tag; or,
/// for a page the cache did not admit, a frame of its own.
struct At<'a, M: Model> {
    core: &'a Core<M>,
    set: usize,
    slot: usize,
    tag: u64,
    own: Option<crate::storage::AlignedBuf>,
}

impl<'a, M: Model> At<'a, M> {
    fn new(core: &'a Core<M>, set: usize, slot: usize, tag: u64) -> Self {
        At {
            core,
            set,
            slot,
            tag,
            own: None,
        }
    }

    /// A page served without a slot, in a frame of its own.
    fn own(core: &'a Core<M>, tag: u64) -> Self {
        At {
            core,
            set: usize::MAX,
            slot: usize::MAX,
            tag,
            own: Some(crate::storage::AlignedBuf::new(core.page_size)),
        }
    }

    /// Whether the page is in the cache (not in a frame of its own).
    fn in_cache(&self) -> bool {
        self.own.is_none()
    }

    /// Moves the guard's hold to a new guard's `At`.
    fn take(&mut self) -> Self {
        At {
            core: self.core,
            set: self.set,
            slot: self.slot,
            tag: self.tag,
            own: self.own.take(),
        }
    }

    fn frame(&self) -> *mut u8 {
        match &self.own {
            Some(b) => b.raw(),
            None => self.core.frame(self.set, self.slot),
        }
    }

    /// The page's bytes.
    ///
    /// # Safety
    /// The caller's guard keeps the page in this frame and excludes writers.
    unsafe fn bytes(&self) -> &[u8] {
        // SAFETY: the frame holds `page_size` bytes; the caller rules out writers.
        unsafe { std::slice::from_raw_parts(self.frame(), self.core.page_size) }
    }

    /// The page's bytes, writable.
    ///
    /// # Safety
    /// The caller's guard is the page's only user.
    #[allow(clippy::mut_from_ref)]
    unsafe fn bytes_mut(&self) -> &mut [u8] {
        // SAFETY: as above, and the caller rules out every other user.
        unsafe { std::slice::from_raw_parts_mut(self.frame(), self.core.page_size) }
    }
}

/// `file()` and `page()` for a guard holding an `At` in field `at`.
macro_rules! page_ids {
    ($t:ident) => {
        impl<M: Model> $t<'_, M> {
            /// The file of the page.
            pub fn file(&self) -> u32 {
                untag(self.at.tag).0
            }

            /// The page number.
            pub fn page(&self) -> u64 {
                untag(self.at.tag).1
            }
        }
    };
}

page_ids!(PageRef);
page_ids!(PageMut);
page_ids!(Fill);
page_ids!(WriteBack);

/// A pinned page, readable. The pin drops with the guard.
pub struct PageRef<'a, M: Model = Os> {
    at: At<'a, M>,
}

impl<'c, M: Model> PageRef<'c, M> {
    /// Where the pinned page is, as a sighting (see `Core::sighting_of`);
    /// `None` for a page in a frame of its own.
    pub(crate) fn sighting(&self) -> Option<Sighting<'c, M>> {
        let core: &'c Core<M> = self.at.core;
        self.at
            .in_cache()
            .then(|| core.sighting_of(self.at.set, self.at.slot))
    }
}

impl<M: Model> PageRef<'_, M> {
    /// Whether the page is cold (read ahead, or read only by a stream, and
    /// not used by anyone else since).
    pub(crate) fn is_cold(&self) -> bool {
        use self::sync::Word;
        if !self.at.in_cache() {
            return false;
        }
        let w = self.at.core.state(self.at.set, self.at.slot);
        w.load(std::sync::atomic::Ordering::Relaxed) & self::core::COLD != 0
    }
}

/// A pin of a cached page taken out of its [`PageRef`], to travel to another
/// thread (plain numbers: the pin stays counted in the page's state until a
/// guard made again from it drops).
#[derive(Debug)]
pub(crate) struct RawPin {
    set: usize,
    slot: usize,
    tag: u64,
}

impl<M: Model> PageRef<'_, M> {
    /// The frame's address, for a pin holder's atomic stores into it (see
    /// [`PageRef::release_stored`]).
    pub(crate) fn frame_ptr(&self) -> *mut u8 {
        self.at.frame()
    }

    /// Let the page go after storing into its frame through
    /// [`PageRef::frame_ptr`]: it is dirty (and warm) after, in the same step
    /// as the pin goes (see `Core::release_stored`).
    pub(crate) fn release_stored(self) {
        debug_assert!(self.at.in_cache(), "a store into a page without a slot");
        if self.at.in_cache() {
            let this = std::mem::ManuallyDrop::new(self);
            let core = this.at.core;
            core.release_stored(core.state(this.at.set, this.at.slot), untag(this.at.tag).0);
        }
    }

    /// The pin without its guard; `None` (the guard dropped) for a page in a
    /// frame of its own, which has no pin to carry.
    pub(crate) fn into_raw(self) -> Option<RawPin> {
        if !self.at.in_cache() {
            return None;
        }
        let this = std::mem::ManuallyDrop::new(self);
        Some(RawPin {
            set: this.at.set,
            slot: this.at.slot,
            tag: this.at.tag,
        })
    }
}

impl<M: Model> std::ops::Deref for PageRef<'_, M> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: the pin keeps the page in this frame and excludes writers (a writer needs zero pins), so the bytes are stable while borrowed, but for a paged array's atomic word stores (see `PageGuard`).
        unsafe { self.at.bytes() }
    }
}

impl<M: Model> Drop for PageRef<'_, M> {
    fn drop(&mut self) {
        if self.at.in_cache() {
            self.at.core.release(self.at.set, self.at.slot, false);
        }
    }
}

/// A page held exclusively for writing; it was marked dirty when taken.
pub struct PageMut<'a, M: Model = Os> {
    at: At<'a, M>,
}

impl<M: Model> std::ops::Deref for PageMut<'_, M> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: the writer bit makes this guard the page's only user.
        unsafe { self.at.bytes() }
    }
}

impl<M: Model> std::ops::DerefMut for PageMut<'_, M> {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: the writer bit makes this guard the page's only user; `&mut self` makes the borrow unique.
        unsafe { self.at.bytes_mut() }
    }
}

impl<M: Model> Drop for PageMut<'_, M> {
    fn drop(&mut self) {
        self.at.core.release(self.at.set, self.at.slot, true);
    }
}

/// The job of filling a claimed frame (a miss). Dropping it unfinished counts
/// as a failed fill: the page is dropped and its waiters retry.
pub struct Fill<'a, M: Model = Os> {
    at: At<'a, M>,
    done: bool,
}

impl<'a, M: Model> Fill<'a, M> {
    /// The frame to load the page into (page-size bytes, 4096-aligned, so
    /// O_DIRECT can read straight into it).
    pub fn frame_mut(&mut self) -> &mut [u8] {
        // SAFETY: the frame is claimed (pending): nobody else reads or writes it until `finish`.
        unsafe { self.at.bytes_mut() }
    }

    /// The address of the frame, for asynchronous I/O into it.
    pub fn frame_ptr(&self) -> *mut u8 {
        self.at.frame()
    }

    /// Count this fill among those a request queue of the calling thread
    /// holds in flight (`held`), or stop counting it: a blocking lookup of
    /// this thread that meets the page then fails instead of waiting for a
    /// fill only this thread can finish.
    pub(crate) fn note_queued(&self, held: bool) {
        self::core::note_queue_fill(self.at.core as *const Core<M> as usize, self.at.tag, held);
    }

    /// A hint that the fill is about to finish: start loading the line of
    /// its state word, which `finish` updates. Changes nothing.
    pub(crate) fn prefetch_state(&self) {
        if self.at.in_cache() {
            prefetch(self.at.core.state(self.at.set, self.at.slot));
        }
    }

    fn end(&mut self, ok: bool) {
        self.done = true;
        if self.at.in_cache() {
            self.at.core.fill_done(self.at.set, self.at.slot, ok);
        }
    }

    /// Whether the page will be cached: false for a page its sets did not
    /// admit, which the frame holds for this reader alone (the
    /// [`PageRef`] that `finish` returns is its only copy).
    pub fn is_cached(&self) -> bool {
        self.at.in_cache()
    }

    /// Publish the filled page (waiters see it) and keep it pinned for reading;
    /// or, with an error, drop the page and return the error.
    pub fn finish(mut self, r: Result<()>) -> Result<PageRef<'a, M>> {
        self.end(r.is_ok());
        r?;
        Ok(PageRef { at: self.at.take() })
    }
}

impl<M: Model> Drop for Fill<'_, M> {
    fn drop(&mut self) {
        if !self.done {
            self.end(false);
        }
    }
}

/// The job of filling a claimed frame for a writer; see [`Fill`].
pub struct FillMut<'a, M: Model = Os>(Fill<'a, M>);

impl<'a, M: Model> FillMut<'a, M> {
    /// The frame to load the page into.
    pub fn frame_mut(&mut self) -> &mut [u8] {
        self.0.frame_mut()
    }

    /// The address of the frame, for asynchronous I/O into it.
    pub fn frame_ptr(&self) -> *mut u8 {
        self.0.frame_ptr()
    }

    /// See [`Fill::note_queued`].
    pub(crate) fn note_queued(&self, held: bool) {
        self.0.note_queued(held);
    }

    /// See [`Fill::prefetch_state`].
    pub(crate) fn prefetch_state(&self) {
        self.0.prefetch_state();
    }

    /// Publish the page and keep it for writing (it is dirty); or drop it.
    pub fn finish(mut self, r: Result<()>) -> Result<PageMut<'a, M>> {
        self.0.end(r.is_ok());
        r?;
        Ok(PageMut {
            at: At::new(self.0.at.core, self.0.at.set, self.0.at.slot, self.0.at.tag),
        })
    }
}

/// A set's lock another thread held when [`PageCache::try_write_back`]
/// looked.
#[derive(Debug)]
pub(crate) struct SetLocked;

/// A dirty page handed back to be written. The page stays cached and readable;
/// writers wait until [`WriteBack::finish`]. Dropping it unfinished counts as a
/// failed write (the page stays dirty).
pub struct WriteBack<'a, M: Model = Os> {
    at: At<'a, M>,
    done: bool,
}

impl<'a, M: Model> WriteBack<'a, M> {
    /// The bytes to write.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: the write-back pin keeps the page here and excludes writers (a paged array's atomic word stores aside: see `PageGuard`).
        unsafe { self.at.bytes() }
    }

    /// The frame's address (for a test that reads stored words atomically).
    #[cfg(test)]
    pub(crate) fn frame_ptr(&self) -> *mut u8 {
        self.at.frame()
    }

    /// Report the write: on success the page is clean (unless a writer came
    /// since); on failure it is dirty again and the error is returned.
    pub fn finish(mut self, r: Result<()>) -> Result<()> {
        self.done = true;
        self.at
            .core
            .writeback_done(self.at.set, self.at.slot, r.is_ok());
        r
    }
}

impl<M: Model> Drop for WriteBack<'_, M> {
    fn drop(&mut self) {
        if !self.done {
            self.at
                .core
                .writeback_done(self.at.set, self.at.slot, false);
        }
    }
}

#[cfg(test)]
mod tests;
