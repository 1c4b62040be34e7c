//! Files read and written through the page cache (synchronous path).
//!
//! A [`CachedStore`] joins a [`Store`] and a [`PageCache`]: every file opened
//! through it gets a cache file id, and the cache's pages of that file are
//! loaded from and written back to its backing files. Reads of any length and
//! alignment copy from cached pages; misses read straight into the cache's
//! frames (O_DIRECT, no bounce buffer); writes mark pages dirty (a partial write
//! of an absent page reads it first, a whole-page write does not). A dirty page
//! reaches the devices when its set needs the frame, or at [`CachedFile::sync`],
//! which then makes the devices durable. A failed write-back leaves the page
//! dirty and is reported by the next `sync` of its file.
//!
//! Deleting, renaming or changing the length of a cached file goes through
//! [`CachedStore::delete`], [`CachedStore::rename`] and [`CachedFile::set_len`],
//! which keep the cache right: a deleted file's pages are dropped (dirty ones
//! unwritten) and its cache id retired, and a shrink drops the pages past the
//! new end. The file table never hands out a file that is gone: a file the
//! store deleted or replaced behind the cache's back gets a fresh cache id when
//! it is opened again.
//!
//! ## Errors, retries and fsync
//!
//! A write-back that fails with an error that can pass (ENOSPC, EDQUOT,
//! EFBIG, EINTR, EAGAIN, a write cut short) leaves its page dirty and its device
//! usable: the next `sync` writes the page again and succeeds once the
//! condition has passed. Any other I/O error (EIO above all) fails the device
//! for good; every later operation on it is refused.
//!
//! A failed fsync is never taken as having passed: the kernel may have dropped
//! the pages it could not write. Each cached file remembers which pages were
//! written back since its last good fsync; when an fsync fails, those pages are
//! marked dirty again, so the next `sync` writes every one of them before it
//! fsyncs, and only a good fsync after that clears the failure. If one of those
//! pages has already left the cache, it cannot be written again: the file's
//! syncs then fail ([`Error::SyncLost`]), the failing one first. Each handle
//! open when the loss happened fails with it, and keeps failing until some
//! handle accepts it: an open through [`CachedStore::open_file`] after a sync
//! reported it, or [`CachedFile::accept_loss`]; a handle already told of it
//! then passes, one never told fails once more. A loss lives in the
//! process's memory: a process that ends with one unaccepted leaves no trace
//! of it for the next. Without direct I/O, a page
//! that left and was read back counts as left: it may hold the bytes the
//! failure dropped.

pub(crate) mod aio;
mod at_exit;
mod flusher;
mod queue;
pub(crate) mod readahead;
pub(crate) mod shared;
pub(crate) mod staging;
mod view;
pub(crate) mod writeback;

pub use aio::{PageAt, ReadAt, WorkerCpus, WriteAt};
pub use flusher::{FlushOptions, FlusherCounts};
pub use queue::{CachedCompletion, CachedQueue, CachedRequest};
pub use readahead::{Advice, DEFAULT_MAX_BYTES as DEFAULT_READAHEAD_BYTES};
pub use view::CacheView;

use crate::util::origin::Origin;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use crate::cache::{CacheOptions, Got, Mode, PageCache, PageMut, PageRef};
use crate::error::{Error, Result};
use crate::storage::file::File;
use crate::storage::layout::LayoutKind;
use crate::storage::store::Store;
use flusher::Flusher;
use readahead::Reader;
use shared::{Ahead, Entry, Shared};

/// A store whose files are read and written through one page cache.
///
/// Its files keep the store open: when the last of them and this handle are
/// gone, the pages still dirty are written back and synced (an
/// error then goes to stderr; [`CachedStore::close`] returns it, and
/// [`CachedStore::discard_at_close`] gives the pages up instead).
///
/// ```
/// use setcache::{AlignedBuf, CacheOptions, CachedStore, LayoutKind, Store, StoreOptions};
///
/// let dir = std::env::temp_dir().join(format!("setcache-doc-cachedstore-{}", std::process::id()));
/// let roots = [dir.join("ssd0"), dir.join("ssd1")];
/// for r in &roots {
///     std::fs::create_dir_all(r)?;
/// }
/// let store = Store::open(&roots, StoreOptions::default())?;
/// let cs = CachedStore::new(store, CacheOptions { size: 16 << 20, ..CacheOptions::default() })?;
/// let f = cs.create("kv", 1 << 20, LayoutKind::Stripe)?;
/// f.write_at(10_000, b"through the cache")?;
/// cs.sync()?; // every file: dirty pages written back, then fsync
/// drop(f);
/// cs.close()?; // syncs again, stops the flusher and closes the store
///
/// // The bytes are in the store, read here without a cache.
/// let store = Store::open(&roots, StoreOptions::default())?;
/// let mut page = AlignedBuf::new(4096);
/// store.open_file("kv")?.read_at(8192, &mut page)?;
/// assert_eq!(&page[10_000 - 8192..][..17], b"through the cache");
/// drop(store);
/// std::fs::remove_dir_all(&dir)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct CachedStore {
    pub(crate) inner: Arc<Shared>,
    flusher: Option<Flusher>,
    ahead: Option<Reader>,
}

/// A file of a [`CachedStore`]. Cheap to clone; `Send + Sync`.
///
/// Reads and writes take any offset and length; the cache reads and writes
/// whole pages underneath.
///
/// ```
/// use setcache::{CacheOptions, CachedStore, LayoutKind, Store, StoreOptions};
///
/// let dir = std::env::temp_dir().join(format!("setcache-doc-cachedfile-{}", std::process::id()));
/// std::fs::create_dir_all(&dir)?;
/// let store = Store::open(&[&dir], StoreOptions::default())?;
/// let cs = CachedStore::new(store, CacheOptions { size: 16 << 20, ..CacheOptions::default() })?;
/// let f = cs.create("notes", 10_000, LayoutKind::Stripe)?;
/// f.write_at(4090, b"spans two pages")?;
/// f.sync()?; // written back and durable
/// let mut b = [0u8; 15];
/// assert_eq!(f.read_at(4090, &mut b)?, 15);
/// assert_eq!(&b, b"spans two pages");
/// f.set_len(4096)?; // the cached bytes past the new end go too
/// let mut tail = [0u8; 16];
/// assert_eq!(f.read_at(4090, &mut tail)?, 6); // a read stops at the end
/// assert_eq!(&tail[..6], b"spans ");
/// drop((f, cs));
/// std::fs::remove_dir_all(&dir)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct CachedFile {
    pub(crate) shared: Arc<Shared>,
    pub(crate) entry: Arc<Entry>,
    pub(crate) id: u32,
    pub(crate) read_only: bool,
    /// The losses of failed fsyncs this open accepted and was told of.
    pub(crate) loss: Arc<shared::LossSeen>,
}

/// Most page guards ([`PageGuard`], [`PageGuardMut`]) one thread may hold
/// at once, counting with them the page futures ([`CachedFile::page_async`])
/// it started that have not finished (a worker holds their pages pinned).
/// Each holds a frame; a thread holding many could leave a set with no page
/// to give up (a miss there then waits the cache's pin wait and fails with
/// [`Error::AllPinned`]).
pub const MAX_GUARDS_PER_THREAD: usize = 64;

thread_local! {
    /// The page guards this thread holds. Guards are not `Send`, so a guard
    /// is dropped by the thread that took it and this list is exact.
    static HELD: std::cell::RefCell<Held> = const { std::cell::RefCell::new(Held::new()) };
    /// `HELD`'s count of guards, kept beside it: a plain word with no
    /// destructor, so that the look of every queued request and every read
    /// or write at a thread holding no guard costs one load.
    static HOLDING: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// A hold's key: (store, cache file id, page, mutable).
type HoldKey = (usize, u32, u64, bool);

/// This thread's holds, in slots that a dropped hold frees (so that taking
/// and dropping one costs no search of the others, which a queue keeping
/// many page requests in flight holds), with counts of all and of the
/// mutable ones: a shared guard, the common kind, can clash only with a
/// mutable one, so none is looked for while the thread holds none.
struct Held {
    slots: Vec<Option<HoldKey>>,
    free: Vec<usize>,
    count: usize,
    mutable: usize,
}

impl Held {
    const fn new() -> Held {
        Held {
            slots: Vec::new(),
            free: Vec::new(),
            count: 0,
            mutable: 0,
        }
    }

    /// The guards this thread holds and the page futures it started that
    /// have not ended.
    fn pins(&self) -> usize {
        self.count + writeback::page_futures_unended(None)
    }

    fn iter(&self) -> impl Iterator<Item = &HoldKey> {
        self.slots.iter().flatten()
    }
}

/// This thread's hold on one page: registered when taken, removed on drop.
struct Hold {
    /// Its slot in [`Held`].
    slot: usize,
    mutable: bool,
}

impl Hold {
    /// Registers a guard of `page` of file `id` in store `store`, or says why
    /// this thread may not take it: it holds the page mutably (a shared
    /// guard would wait for itself), holds it at all (for a mutable one), or
    /// holds as many guards as it may.
    fn take(
        store: usize,
        id: u32,
        page: u64,
        mutable: bool,
        name: impl FnOnce() -> String,
    ) -> Result<Hold> {
        let taken = HELD.try_with(|h| {
            let mut h = h.borrow_mut();
            let clash = (mutable || h.mutable > 0)
                && h.iter()
                    .any(|&(s, f, p, m)| s == store && f == id && p == page && (m || mutable));
            if clash {
                return Err(Error::HeldByCaller(format!(
                    "a {} guard of page {page} of {:?}",
                    if mutable { "mutable" } else { "shared" },
                    name()
                )));
            }
            let held = h.pins();
            if held >= MAX_GUARDS_PER_THREAD {
                return Err(Error::TooManyPins { held });
            }
            let key = Some((store, id, page, mutable));
            let slot = match h.free.pop() {
                Some(i) => {
                    h.slots[i] = key;
                    i
                }
                None => {
                    h.slots.push(key);
                    h.slots.len() - 1
                }
            };
            h.count += 1;
            HOLDING.set(h.count);
            h.mutable += usize::from(mutable);
            Ok(Hold { slot, mutable })
        });
        // This thread's locals are gone (it is exiting): no guard outlives them.
        taken.unwrap_or_else(|_| {
            Err(Error::InvalidArgument(
                "a page guard taken while the thread exits (after its locals are gone)".into(),
            ))
        })
    }

    /// Refuses a call that would wait for a guard this thread holds on the
    /// pages `pages()` of file `id` (`writes`: any guard; else mutable ones).
    /// A thread that holds no guard pays one look at its empty list.
    fn check(
        store: usize,
        id: u32,
        pages: impl FnOnce() -> std::ops::Range<u64>,
        writes: bool,
        name: impl FnOnce() -> String,
    ) -> Result<()> {
        if HOLDING.get() == 0 {
            return Ok(());
        }
        // A thread whose locals are gone (it is exiting, or running the
        // process's exit handlers) holds no guard.
        HELD.try_with(|h| {
            let h = h.borrow();
            if h.count == 0 {
                return Ok(());
            }
            let pages = pages();
            match h
                .iter()
                .find(|&&(s, f, p, m)| s == store && f == id && pages.contains(&p) && (m || writes))
            {
                Some(&(_, _, p, m)) => Err(Error::HeldByCaller(format!(
                    "a {} of page {p} of {:?} while holding a {} guard of it",
                    if writes { "write" } else { "read" },
                    name(),
                    if m { "mutable" } else { "shared" }
                ))),
                None => Ok(()),
            }
        })
        .unwrap_or(Ok(()))
    }
}

/// A page future's place in the bound of the thread that started it
/// ([`MAX_GUARDS_PER_THREAD`]), from the moment its page goes to a worker
/// (which pins it) until the future ends: given back when dropped, by
/// whichever thread drops it.
pub(crate) struct FutureClaim(Arc<AtomicUsize>);

impl FutureClaim {
    /// A place for one more page future of this thread, or
    /// [`Error::TooManyPins`] when its guards and unfinished page futures
    /// are at the bound.
    pub(crate) fn take(store: usize, id: u32) -> Result<FutureClaim> {
        let exiting = || {
            Error::InvalidArgument(
                "a page future started while the thread exits (after its locals are gone)".into(),
            )
        };
        let taken = HELD.try_with(|h| {
            let h = h.borrow();
            let held = h.pins();
            if held >= MAX_GUARDS_PER_THREAD {
                return Err(Error::TooManyPins { held });
            }
            // Only this thread adds to its count (others only subtract), so
            // the check above cannot be overtaken.
            let s = writeback::page_futures(store, id).ok_or_else(exiting)?;
            s.fetch_add(1, Ordering::Relaxed);
            Ok(FutureClaim(s))
        });
        taken.unwrap_or_else(|_| Err(exiting()))
    }
}

impl Drop for FutureClaim {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A page (file, page) of `sh`'s cache that this thread holds a mutable
/// guard of and someone waits for (its `WAITERS` mark). Not a shared
/// guard's: only a writer waits for one, and only for the pin wait.
fn guard_waited_for(sh: &Shared) -> Option<(u32, u64)> {
    (held_pages(sh, true).into_iter()).find(|&(f, p)| sh.cache.waited_for(f, p).unwrap_or(false))
}

/// This thread's guards of pages of `sh`'s cache, as the layers below
/// look at them.
fn guards_of(sh: &Shared) -> shared::Guards {
    shared::Guards {
        any: holds_guard_in(sh),
        waited_for: guard_waited_for,
        held: guards_held,
    }
}

/// The pages (file, page) of `sh`'s cache this thread holds guards of.
fn guards_held(sh: &Shared) -> Vec<(u32, u64)> {
    held_pages(sh, false)
}

/// The pages (file, page) of `sh`'s cache this thread holds guards of, or
/// with `mutable_only`, mutable guards of.
fn held_pages(sh: &Shared, mutable_only: bool) -> Vec<(u32, u64)> {
    if HOLDING.get() == 0 {
        return Vec::new();
    }
    let me = sh as *const Shared as usize;
    HELD.try_with(|h| {
        let h = h.borrow();
        if mutable_only && h.mutable == 0 {
            return Vec::new();
        }
        (h.iter())
            .filter(|k| k.0 == me && (k.3 || !mutable_only))
            .map(|&(_, f, p, _)| (f, p))
            .collect()
    })
    .unwrap_or_default()
}

/// Whether this thread holds a guard of a page of `sh`'s cache.
fn holds_guard_in(sh: &Shared) -> bool {
    let me = sh as *const Shared as usize;
    HOLDING.get() > 0
        && HELD
            .try_with(|h| h.borrow().iter().any(|k| k.0 == me))
            .unwrap_or(false)
}

impl Hold {
    /// How holds name the store whose shared state is `shared`.
    fn store_key(shared: &Arc<Shared>) -> usize {
        Arc::as_ptr(shared) as usize
    }

    /// Refuses a sync of the whole store `store` while this thread holds a
    /// guard of one of its pages (the sync would wait for it if dirty).
    fn check_store(store: usize) -> Result<()> {
        HELD.try_with(|h| match h.borrow().iter().find(|&&(s, ..)| s == store) {
            Some(&(_, f, p, _)) => Err(Error::HeldByCaller(format!(
                "a sync of the store while holding a guard of page {p} of cache file {f}"
            ))),
            None => Ok(()),
        })
        .unwrap_or(Ok(()))
    }
}

/// This thread's hold on a page it pinned without a guard (a paged array's
/// read in place through its translation entry), taken by
/// [`CachedFile::hold_shared`] and let go when dropped: a writer of the page
/// in the same thread is then refused with [`Error::HeldByCaller`] as
/// beside a guard, instead of waiting for the pin.
pub(crate) struct SharedHold(#[allow(dead_code)] Hold);

impl Drop for Hold {
    fn drop(&mut self) {
        // After the thread's locals are gone there is no list to leave.
        let _ = HELD.try_with(|h| {
            let mut h = h.borrow_mut();
            if h.slots.get_mut(self.slot).and_then(Option::take).is_some() {
                h.free.push(self.slot);
                h.count -= 1;
                HOLDING.set(h.count);
                h.mutable -= usize::from(self.mutable);
            }
        });
    }
}

/// A page of a cached file held through a page guard of kind `G` (see
/// [`PageGuard`] and [`PageGuardMut`]): the page's bytes inside the file (the
/// last page of a file is shorter), in place. Not `Send`: a guard is dropped
/// by the thread that took it.
pub struct Guarded<G> {
    g: G,
    len: usize,
    offset: u64,
    _hold: Hold,
    _thread: std::marker::PhantomData<*const ()>,
}

/// A page held in the cache for reading: it stays resident (never evicted,
/// moved or written back half-changed) while the guard lives. Any number of
/// shared guards of a page may live at once, in any threads; a writer of the
/// page ([`CachedFile::write_at`], [`CachedFile::page_mut`]) waits for them,
/// up to the cache's pin wait ([`Error::Busy`] after it). The one exception:
/// element stores of a [`crate::PagedArray`] of word elements change a
/// page's words under shared pins (atomically); read such a file through the
/// array, not through page guards, while another thread may store.
pub type PageGuard<'a> = Guarded<PageRef<'a>>;

/// A page held exclusively for writing: while it lives no other guard of the
/// page exists, no read or write of the page proceeds and no write-back
/// takes it. The page is dirty (written back after the guard drops, by the
/// flusher, a set that needs the frame, or `sync`).
pub type PageGuardMut<'a> = Guarded<PageMut<'a>>;

impl<G> Guarded<G> {
    /// The guard `g` of a page whose first byte is at `offset` and whose
    /// `len` bytes are inside the file, held by this thread's `hold`.
    fn new(g: G, len: usize, offset: u64, hold: Hold) -> Self {
        Guarded {
            g,
            len,
            offset,
            _hold: hold,
            _thread: std::marker::PhantomData,
        }
    }

    /// The file offset of the page's first byte.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// How many of the page's bytes are inside the file (the guard's
    /// length), without a borrow of them.
    pub(crate) fn span(&self) -> usize {
        self.len
    }
}

impl<'c> Guarded<PageRef<'c>> {
    /// The address of the page's first byte in its frame, without a borrow
    /// of the bytes (which another thread may store into, atomically, for a
    /// paged array's word elements).
    pub(crate) fn frame_ptr(&self) -> *mut u8 {
        self.g.frame_ptr()
    }

    /// Where the pinned page is, as a sighting (`None` for a page in a
    /// frame of its own).
    pub(crate) fn sighting(&self) -> Option<crate::cache::Sighting<'c, crate::cache::sync::Os>> {
        self.g.sighting()
    }

    /// Let the page go after its holder stored into the frame: it is dirty
    /// after, in the same step as the pin goes.
    fn release_stored(self) {
        let Guarded { g, _hold, .. } = self;
        g.release_stored();
        drop(_hold);
    }
}

impl<G: std::ops::Deref<Target = [u8]>> std::ops::Deref for Guarded<G> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.g[..self.len]
    }
}

impl std::ops::DerefMut for Guarded<PageMut<'_>> {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.g[..self.len]
    }
}

impl CachedStore {
    /// Put a page cache built from `opts` in front of `store`, with a
    /// background flusher (see [`FlushOptions`]). The cache's page size must
    /// be a multiple of 512 bytes (direct I/O reads whole frames).
    pub fn new(store: Store, opts: CacheOptions) -> Result<CachedStore> {
        CachedStore::with_flusher(store, opts, Some(FlushOptions::default()))
    }

    /// As [`CachedStore::new`], with the flusher configured (or, with `None`,
    /// without one: dirty pages then reach the devices only when evicted or
    /// synced).
    pub fn with_flusher(
        store: Store,
        opts: CacheOptions,
        flush: Option<FlushOptions>,
    ) -> Result<CachedStore> {
        store.claim_for_cache()?;
        let cache = match PageCache::new(opts) {
            Ok(c) => c,
            Err(e) => {
                store.release_from_cache();
                return Err(e);
            }
        };
        let store_devices = store.devices();
        let ahead = Ahead::new(readahead::DEFAULT_MAX_BYTES / cache.page_size());
        let staging = staging::Staging::new(cache.capacity_pages() * cache.page_size());
        let inner = Arc::new(Shared {
            finished_seen: AtomicU64::new(store.inner().finished_later()),
            store,
            cache,
            files: RwLock::new(HashMap::new()),
            next_id: AtomicU32::new(0),
            free_ids: Mutex::new(Vec::new()),
            retired: Mutex::new(Vec::new()),
            ahead,
            staging,
            aio: std::sync::OnceLock::new(),
            opens: AtomicU64::new(0),
            idle_keep: AtomicUsize::new(shared::idle_keep(store_devices)),
            trim_at: AtomicUsize::new(shared::idle_keep(store_devices)),
            trimming: Mutex::new(()),
            discard: std::sync::atomic::AtomicBool::new(false),
            origin: Origin::here(),
        });
        let flusher = match flush {
            Some(f) => Some(Flusher::start(inner.clone(), f)?),
            None => None,
        };
        let ahead = match Reader::start(inner.clone()) {
            Ok(r) => r,
            Err(e) => {
                if let Some(f) = flusher {
                    f.stop();
                }
                return Err(e);
            }
        };
        at_exit::note(&inner);
        Ok(CachedStore {
            inner,
            flusher,
            ahead: Some(ahead),
        })
    }

    /// The most memory the staging area of a cached store whose cache holds
    /// `cache_bytes` maps beside the cache, at its first read of a long run
    /// of pages: reads of runs land there before their pages are copied to
    /// their frames (a quarter of the cache, at most 64 MiB, in whole 2 MiB
    /// huge pages; none for a cache under 2 MiB). A memory budget that must
    /// hold the whole store counts it.
    pub fn staging_bytes(cache_bytes: usize) -> usize {
        staging::bytes_for(cache_bytes)
    }

    /// Set the largest readahead window (rounded down to whole pages; 0
    /// turns readahead off for every file of the store). The default is
    /// [`DEFAULT_READAHEAD_BYTES`]. See [`CachedFile::advise`] for hints per
    /// file.
    pub fn set_readahead(&self, max_bytes: usize) {
        let pages = max_bytes / self.inner.cache.page_size();
        self.inner.ahead.max_pages.store(pages, Ordering::Relaxed);
    }

    /// Whether the readahead thread has nothing left to do: every window
    /// asked for so far (by streams and by [`Advice::WillNeed`]) has been
    /// read, or dropped, and no read of one is in flight. A reader's call
    /// asks for its windows before it returns, so after the calls of interest
    /// a caller can wait for this to know that readahead has settled (a
    /// benchmark's warm-up, or a test that readahead left something alone).
    pub fn readahead_idle(&self) -> bool {
        self.inner.ahead.idle()
    }

    /// Pages the flusher has written back, and device writes it issued
    /// (all zero without a flusher).
    pub fn flusher_counts(&self) -> FlusherCounts {
        self.flusher
            .as_ref()
            .map_or(FlusherCounts::default(), Flusher::counts)
    }

    /// The store underneath.
    pub fn store(&self) -> &Store {
        &self.inner.store
    }

    /// The page cache: its shape, counters and pages, a resize and the
    /// eviction of clean pages (a view that cannot lose written bytes).
    pub fn cache(&self) -> CacheView<'_> {
        CacheView::new(&self.inner.cache)
    }

    /// The longest a file of this store may be: the store's largest length
    /// or the most the cache's page numbers reach, whichever is less (2^52
    /// bytes with 4 KiB pages). A longer `create`, `set_len`, `grow` or
    /// extending write is refused with [`Error::InvalidArgument`]; a backing
    /// file system may refuse less ([`Error::Os`] with `EFBIG`).
    pub fn max_file_len(&self) -> u64 {
        self.inner.max_file_len()
    }

    /// The page cache itself, for the crate's own tests.
    #[cfg(test)]
    pub(crate) fn page_cache(&self) -> &PageCache {
        &self.inner.cache
    }

    /// Create a file (as [`Store::create`]) and open it through the cache.
    pub fn create(&self, name: &str, size: u64, layout: LayoutKind) -> Result<CachedFile> {
        self.inner.check_len(name, size)?;
        let f = match self.inner.store.create(name, size, layout) {
            // Idle files' descriptors (one per device each) are given back,
            // and the create is tried again.
            Err(e) if shared::out_of_descriptors(&e) => {
                self.inner.shed_idle();
                self.inner.store.create(name, size, layout)
            }
            r => r,
        };
        self.inner.retire_finished();
        self.attach(f?, false, true)
    }

    /// Open an existing file through the cache. A loss an earlier failed
    /// fsync left ([`Error::SyncLost`]) that some sync has reported is
    /// accepted, as [`CachedFile::accept_loss`] accepts it: this handle's
    /// syncs start afresh, as a new open of a local file does, and so do
    /// those of the handles already told of it. A handle open when the loss
    /// happened and not yet told still fails once (its next sync reports it),
    /// and a loss no sync has reported yet is reported to this handle too.
    pub fn open_file(&self, name: &str) -> Result<CachedFile> {
        self.open_as(name, false, true)
    }

    /// Open an existing file through the cache for writing as
    /// [`open_file`](Self::open_file) does, but leave a loss an earlier
    /// failed fsync left in place: this handle's syncs fail with
    /// [`Error::SyncLost`] until some handle accepts it (then this one fails
    /// once, being told, if it was not told before). For a layer that opens a file on behalf of
    /// something other than a new writer (a length asked for, a reader's
    /// open that later writers share), where the loss belongs to writers
    /// that have not been told.
    pub fn open_file_keeping_loss(&self, name: &str) -> Result<CachedFile> {
        self.open_as(name, false, false)
    }

    /// Open an existing file through the cache for reading only: writes
    /// through this handle fail with [`Error::ReadOnly`].
    pub fn open_file_read_only(&self, name: &str) -> Result<CachedFile> {
        self.open_as(name, true, false)
    }

    /// Open `name`: if the file the store opened is deleted or replaced
    /// before the cache takes it, open the name again (the store then finds
    /// the new file, or none).
    fn open_as(&self, name: &str, read_only: bool, accept_loss: bool) -> Result<CachedFile> {
        let mut tries = 0;
        loop {
            let f = match self.inner.store.open_file(name) {
                // As in `create`: idle files give their descriptors back.
                Err(e) if shared::out_of_descriptors(&e) => {
                    self.inner.shed_idle();
                    self.inner.store.open_file(name)
                }
                r => r,
            };
            self.inner.retire_finished();
            if let Err(Error::FileNotFound(_)) = &f {
                // Deleted through the store itself: its entry (which would
                // fail every sync of the store) goes now.
                self.inner.retire_stale(Some(name));
            }
            let f = f?;
            // A file made through a cache of larger pages may reach past
            // this cache's page numbers: refused here, not at its far end.
            self.inner.check_open_len(name, f.len())?;
            match self.attach(f, read_only, accept_loss) {
                Err(Error::FileGone(_)) if tries < 8 => tries += 1,
                r => return r,
            }
        }
    }

    fn attach(&self, file: File, read_only: bool, accept_loss: bool) -> Result<CachedFile> {
        // A file opened twice shares its cache id: one copy of each page. The
        // table stays locked from the search to the insertion, so two threads
        // opening one file at once get one id. An entry of the same name that
        // is another file (deleted or replaced through the store) is retired.
        // A file the store no longer has under its name (deleted or replaced
        // since the store opened it) gets no handle and retires nothing. The
        // store's metadata lock is held throughout (it comes before the table
        // in the lock order), so no delete or create runs in between.
        let name = file.name();
        let store = file.inner.store.clone();
        let (id, entry, dead, listed, loss) = store.with_current(|current| -> Result<_> {
            let current = current(&name, &file.inner);
            if !current {
                // Deleted or replaced since the store opened it: no handle,
                // and no entry in the table (one would stay there, failing
                // the store's syncs, until the name was opened again).
                return Err(Error::FileGone(name.to_string()));
            }
            let mut files = self.inner.files.write().unwrap_or_else(|p| p.into_inner());
            let mut dead = Vec::new();
            let mut found = None;
            for (&id, e) in files.iter() {
                if Arc::ptr_eq(&e.file.inner, &file.inner) {
                    found = Some((id, e.clone()));
                } else if *e.file.name_arc() == *name {
                    dead.push(id);
                }
            }
            let loss = Arc::new(shared::LossSeen::default());
            let (id, entry) = match found {
                Some((id, e)) => {
                    // Opening again for writing accepts the losses of failed
                    // fsyncs that some sync reported (and what the pages
                    // read back since then hold); a reader's open (or one
                    // that keeps the loss) leaves it for the writers. Either
                    // way, the losses a handle accepted are no news.
                    let mut d = e.durable();
                    if !read_only && accept_loss {
                        let upto = d.reported_gen;
                        d.accept(&loss, upto);
                    } else {
                        loss.accepted.store(d.accepted_gen, Ordering::Release);
                    }
                    drop(d);
                    (id, e)
                }
                None => {
                    let id = self.inner.new_id()?;
                    let entry = Arc::new(Entry::new(file));
                    files.insert(id, entry.clone());
                    (id, entry)
                }
            };
            entry.opened.store(
                self.inner.opens.fetch_add(1, Ordering::Relaxed) + 1,
                Ordering::Release,
            );
            let dead = shared::unlist(&mut files, dead);
            Ok((id, entry, dead, files.len(), loss))
        })?;
        // Write-backs in flight take the table lock as they finish: drop the
        // retired files' pages only once it is let go.
        for (id, e) in dead {
            self.inner.retire(id, e);
        }
        if listed >= self.inner.trim_at.load(Ordering::Relaxed) {
            self.inner.trim_idle();
        }
        Ok(CachedFile {
            shared: self.inner.clone(),
            entry,
            id,
            read_only,
            loss,
        })
    }

    /// Delete a file (as [`Store::delete`]): its cached pages are dropped,
    /// dirty ones unwritten, and handles to it fail with [`Error::FileGone`].
    /// A thread that holds a guard of one of its pages, an unfinished page
    /// future of it, or a request queue's unpolled read or write-back of it
    /// gets [`Error::HeldByCaller`] at once, and the file stays.
    pub fn delete(&self, name: &str) -> Result<()> {
        self.check_unheld(name, "a delete")?;
        let r = self.inner.store.delete(name);
        // Even after a failure: a delete the store has committed (and will
        // finish) no longer names the file.
        self.inner.retire_stale(Some(name));
        self.inner.retire_finished();
        r
    }

    /// Rename a file (as [`Store::rename`]); open handles follow it, and its
    /// cached pages stay.
    pub fn rename(&self, from: &str, to: &str) -> Result<()> {
        let r = self.inner.store.rename(from, to);
        self.inner.retire_finished();
        r
    }

    /// Rename a file over the file `to`, if there is one (as
    /// [`Store::replace`]: `to` names the old file or the new one at every
    /// moment, also after a crash). Handles of `from` follow it with its
    /// cached pages; handles of the replaced file fail as after
    /// [`CachedStore::delete`], and its pages are dropped unwritten. A thread
    /// holding something of the replaced file's pages is refused as by
    /// [`CachedStore::delete`].
    pub fn replace(&self, from: &str, to: &str) -> Result<()> {
        self.check_unheld(to, "a replacement")?;
        let r = self.inner.store.replace(from, to);
        // Even after a failure: a replacement the store has begun (and will
        // finish) no longer names the old file.
        self.inner.retire_stale(Some(to));
        self.inner.retire_finished();
        r
    }

    /// Write every dirty page of every file and make it durable (as
    /// [`CachedFile::sync`] of each: a file with nothing written since its
    /// last good fsync needs none). A thread holding a page guard of this
    /// store gets [`Error::HeldByCaller`].
    ///
    /// Every file is synced; the first error met is returned. A file with a
    /// loss no handle has accepted ([`Error::SyncLost`]) fails it every
    /// time, and only the loss of the error returned counts as reported:
    /// open the file it names with [`CachedStore::open_file`] (which accepts
    /// it) or accept it through a writable handle, and sync again to hear of
    /// the next. Until then the file's entry stays, idle or not.
    pub fn sync(&self) -> Result<()> {
        self.sync_as(true)
    }

    /// As [`CachedStore::sync`], for a caller that cannot pass its error on
    /// to whoever wrote the files (an exit handler; a `sync` that returns
    /// nothing): a loss it meets is not counted as reported, so a later
    /// [`CachedStore::open_file`] does not accept it and the file's next
    /// sync through the new handle fails with it.
    pub fn sync_unheard(&self) -> Result<()> {
        self.sync_as(false)
    }

    /// As [`CachedStore::sync_unheard`], for a process's exit handler, which
    /// must not wait for what other threads hold (they may never let it go
    /// before the process ends): a file's sync writes the pages it can and
    /// makes them durable with the file's length; for pages another thread
    /// holds or writes back it goes again for up to two seconds, then fails
    /// [`Error::Busy`]; one another thread is syncing after that sync ends or five seconds
    /// (whichever comes first), and the error returned is the first met;
    /// what is left dirty stays so. A store whose pages are to be given
    /// up ([`CachedStore::discard_at_close`]) is left as it is.
    pub fn sync_at_exit(&self) -> Result<()> {
        at_exit::sync_one(&self.inner)
    }

    /// Whether a cached store made in this process (not in its parent,
    /// before a `fork`) is open: its threads then keep the process alive
    /// (see [`crate::process`]). What such a store has dirty when the process
    /// exits normally (a return from `main`, `std::process::exit`, the C
    /// library's `exit`) is written and synced then, by an exit handler the
    /// crate registers at the first store, as by [`CachedStore::sync_at_exit`];
    /// what fails is said on stderr.
    pub fn any_open_in_this_process() -> bool {
        !at_exit::open_here().is_empty()
    }

    /// Write and sync every cached store open in this process, as the exit
    /// handler does (on a thread of its own, not waiting for pages other
    /// threads hold, given up after a minute without progress; what fails
    /// is said on stderr). For a process about to end by a way that runs
    /// no exit handler: `_exit`, which a library standing in for the C
    /// library's calls serves so, as a local file system keeps what such a
    /// process wrote.
    pub fn sync_all_open_in_this_process() {
        at_exit::sync_open_stores();
    }

    /// Sync every file ([`CachedStore::sync`]), then close this handle. The
    /// error is the sync's; the handle is closed either way. Dropping a
    /// store's last handle (this one, or the last of its files) writes back
    /// and syncs what is still dirty too, but can only print an error on
    /// stderr: `close` returns it. (After a failed `close` of the last
    /// handle, the drop tries once more, and prints what it meets.)
    pub fn close(self) -> Result<()> {
        self.sync()
    }

    /// Give up the pages still dirty when the store's last handle goes (this
    /// one, or the last of its files and queues): they are then not written
    /// back, and no error is reported. For a store whose devices can no
    /// longer take them, or whose changes are to be dropped; pages written
    /// back before (by eviction, the flusher or a sync) stay written.
    pub fn discard_at_close(&self) {
        self.inner.discard.store(true, Ordering::Release);
    }

    /// Refuses `what` (a delete or replacement) of the file `name`, whose
    /// cached pages it drops, while this thread holds something of them
    /// that the drop would wait for: a page guard, an unfinished page
    /// future, or a request queue's read or write-back not yet polled.
    /// Only this thread can let those go, so the call fails at once (as a
    /// write over a page the thread holds does) and the file stays.
    fn check_unheld(&self, name: &str, what: &str) -> Result<()> {
        let sh = &*self.inner;
        let ids: Vec<u32> = (sh.files.read().unwrap_or_else(|p| p.into_inner()))
            .iter()
            .filter(|(_, e)| *e.file.name_arc() == *name)
            .map(|(&id, _)| id)
            .collect();
        let store = Hold::store_key(&self.inner);
        for id in ids {
            let held = if Hold::check(store, id, || 0..u64::MAX, true, || name.into()).is_err() {
                Some("holds a guard of one of its pages (drop it first)")
            } else if writeback::page_futures_unended(Some((sh, id))) > 0 {
                Some("has a page future of it not yet ended (finish or drop it first)")
            } else if sh.cache.own_fill_from(id, 0).is_some() {
                Some("has a request queue reading one of its pages (poll or drain it first)")
            } else if writeback::owed_page_from(sh, id, 0).is_some() {
                Some("has a request queue writing one of its pages back (poll or drain it first)")
            } else {
                None
            };
            if let Some(why) = held {
                return Err(Error::HeldByCaller(format!(
                    "{what} of {name:?} while this thread {why}"
                )));
            }
        }
        Ok(())
    }

    fn sync_as(&self, told: bool) -> Result<()> {
        Hold::check_store(Hold::store_key(&self.inner))?;
        // (No guard of the store is held: just checked.)
        self.inner.sync_all(told, true)
    }
}

impl Drop for CachedStore {
    fn drop(&mut self) {
        if !self.inner.origin.is_here() {
            // A child made by `fork`: the threads are the parent's (not in
            // this process, nor to be joined), and a lock one of them held
            // at the fork is held here for good. Nothing is stopped or
            // written (the pages are the parent's).
            std::mem::forget(self.ahead.take());
            std::mem::forget(self.flusher.take());
            // Nor is the shared state ever dropped here: its store's drop
            // would take the parent's locks, finish the parent's metadata
            // steps and join the parent's engine threads.
            std::mem::forget(Arc::clone(&self.inner));
            return;
        }
        let on_worker = self.inner.stop_workers();
        if let Some(r) = self.ahead.take() {
            r.stop();
        }
        if let Some(f) = self.flusher.take() {
            f.stop();
        }
        if on_worker {
            // A futures' worker ends the store (a task it woke dropped this
            // handle): the worker's own handle on the shared state goes only
            // once it has finished its requests, on a thread no one waits
            // for, which the process may end first. The store is synced
            // here, before this drop returns; the last handle's drop still
            // runs after it, writes what the worker's last requests left, and
            // reports what still fails (a page the worker holds is `Busy`
            // here, and file handles may still be open, for whose holders
            // the losses a sync meets are: nothing is printed or accepted).
            if !self.inner.discard.load(Ordering::Acquire) {
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    self.inner.sync_all(false, false)
                }));
            }
        }
    }
}

impl CachedFile {
    /// Read page `page` of cache file `file` into `frame`: through this
    /// handle's own entry when it is this file's page (no file-table lookup
    /// on a miss), through the table otherwise.
    fn load(&self, file: u32, page: u64, frame: &mut [u8]) -> Result<()> {
        if file == self.id {
            Shared::load_of(&self.entry, page, frame)
        } else {
            self.shared.load(file, page, frame)
        }
    }

    /// Write page `page` of cache file `file` back (a victim may be another
    /// file's page), through this handle's own entry when it can.
    fn store_page(&self, file: u32, page: u64, bytes: &[u8]) -> Result<()> {
        if file == self.id {
            Shared::store_page_of(&self.entry, page, bytes)
        } else {
            self.shared.store_page(file, page, bytes)
        }
    }

    /// The file underneath. Its length changes only through
    /// [`CachedFile::set_len`] (the file's own `set_len` refuses).
    pub fn file(&self) -> &File {
        &self.entry.file
    }

    /// Its length in bytes. While a [`CachedFile::write_extending`] is under
    /// way, the length before it.
    #[inline]
    pub fn len(&self) -> u64 {
        CachedFile::len_of(&self.entry)
    }

    /// The longest the file may be: its store's
    /// [`CachedStore::max_file_len`].
    pub fn max_len(&self) -> u64 {
        self.shared.max_file_len()
    }

    /// [`CachedFile::len`] of the file whose entry is `entry`.
    #[inline]
    pub(crate) fn len_of(entry: &Entry) -> u64 {
        // The file's length first: a length an extending write set comes
        // after that write's hold on `shown`, which is let go only after
        // its bytes are in.
        let len = entry.file.len();
        len.min(entry.shown.load(Ordering::Acquire))
    }

    /// The file's own length, whatever an extending write shows.
    fn real_len(&self) -> u64 {
        self.entry.file.len()
    }

    /// Whether the file is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Read up to `buf.len()` bytes at `offset` (any alignment); returns how many
    /// (fewer only at the end of the file; 0 at the end). An offset past the
    /// end is an error ([`Error::OutOfRange`]).
    pub fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize> {
        self.read_at_inner(offset, buf).map_err(|e| self.gone_or(e))
    }

    /// `FileGone` if the file was retired meanwhile (its id then no longer
    /// resolves), else `e`.
    pub(crate) fn gone_or(&self, e: Error) -> Error {
        match self.entry.check() {
            Err(gone) => gone,
            Ok(()) => e,
        }
    }

    /// How many of `want` bytes at `offset` a read gets (0 at the end); an
    /// offset past the end is an error.
    fn read_len(&self, offset: u64, want: usize) -> Result<usize> {
        self.entry.check()?;
        let len = self.len();
        if offset > len {
            return Err(Error::OutOfRange {
                file: self.entry.file.name(),
                offset,
                len: want as u64,
                file_len: len,
            });
        }
        Ok((want as u64).min(len - offset) as usize)
    }

    fn read_at_inner(&self, offset: u64, buf: &mut [u8]) -> Result<usize> {
        let n = self.read_len(offset, buf.len())?;
        if n == 0 {
            return Ok(0);
        }
        self.check_held(offset, offset + n as u64, false)?;
        let sh = &*self.shared;
        let stream = readahead::note_read(sh, &self.entry, self.id, offset, n as u64, 0);
        let ps = sh.cache.page_size() as u64;
        let mut done = 0usize;
        while done < n {
            let pos = offset + done as u64;
            let page = pos / ps;
            let in_page = (pos % ps) as usize;
            let take = (ps as usize - in_page).min(n - done);
            let dst = &mut buf[done..done + take];
            let got = if stream {
                sh.cache.try_read_stream(self.id, page, in_page, dst)?
            } else if sh.cache.try_read(self.id, page, in_page, dst)? {
                Got::Hit
            } else {
                Got::Miss
            };
            if got == Got::Miss {
                // A page this thread reads in itself was not read ahead.
                let mut loaded = false;
                let g = sh.cache.get_with_as(
                    self.id,
                    page,
                    if stream { Mode::Stream } else { Mode::Normal },
                    |f, p, frame| {
                        loaded = true;
                        self.load(f, p, frame)
                    },
                    |f, p, bytes| self.store_page(f, p, bytes),
                )?;
                dst.copy_from_slice(&g[in_page..in_page + take]);
                if stream && loaded {
                    readahead::note_own(sh, self.id, page);
                } else if stream && g.is_cold() {
                    readahead::note_used(sh, self.id, page);
                }
            } else if got == Got::Cold {
                readahead::note_used(sh, self.id, page);
            }
            done += take;
        }
        Ok(n)
    }

    /// Say how the file will be read, as `posix_fadvise` does, for the bytes
    /// `offset..offset + len` (`len` 0: to the end of the file):
    ///
    /// * [`Advice::Normal`], [`Advice::Sequential`], [`Advice::Random`] set
    ///   how reads of the file (through any handle) are read ahead: streams
    ///   detected; every read a stream, with the largest window at once; no
    ///   readahead. The range is ignored.
    /// * [`Advice::WillNeed`] starts reading the range's absent pages into the
    ///   cache now, in the background, as readahead does (they enter cold):
    ///   at most half the cache's pages from the range's start, as the
    ///   kernel reads at most its readahead limit (more would push out the
    ///   range's own first pages). After the store is dropped, it fails
    ///   [`Error::Closed`] (no thread is left to read).
    /// * [`Advice::DontNeed`] lets the range's clean cached pages go first
    ///   when their sets need room (dirty pages are left as they are): the
    ///   pages wholly inside the range, and the file's last page if the
    ///   range reaches the end, as the kernel rounds. It costs at most one
    ///   visit of every set, however long the range (fio, for one, advises a
    ///   whole file away as each job starts).
    ///
    /// A range past the end of the file is an error ([`Error::OutOfRange`]).
    pub fn advise(&self, offset: u64, len: u64, advice: Advice) -> Result<()> {
        self.entry.check()?;
        let file_len = self.len();
        let end = if len == 0 {
            file_len
        } else {
            offset.saturating_add(len)
        };
        if offset > file_len || end > file_len {
            return Err(Error::OutOfRange {
                file: self.entry.file.name(),
                offset,
                len,
                file_len,
            });
        }
        let sh = &*self.shared;
        let ps = sh.cache.page_size() as u64;
        match advice {
            Advice::Normal | Advice::Sequential | Advice::Random => {
                let code = readahead::advice_code(advice);
                self.entry.advice.store(code, Ordering::Relaxed);
            }
            Advice::WillNeed => {
                let first = offset / ps;
                let most = (sh.cache.capacity_pages() as u64 / 2).max(1);
                let last = end.div_ceil(ps).min(first.saturating_add(most));
                let chunk = staging::run_pages(ps as usize) as u64 * 8;
                // Windows waiting for the thread, at most about the cache's
                // pages: advice asked faster than the device reads it is
                // dropped past that (it is a hint), as a stream's windows are.
                let bound = (sh.cache.capacity_pages() as u64 / chunk)
                    .max(shared::Ahead::STREAM_QUEUE as u64) as usize;
                let mut p = first;
                while p < last {
                    let n = chunk.min(last - p);
                    let w = shared::Window {
                        entry: self.entry.clone(),
                        id: self.id,
                        first: p,
                        pages: n,
                    };
                    match sh.ahead.push_within(w, bound) {
                        shared::Pushed::Queued => {}
                        shared::Pushed::Full => break,
                        shared::Pushed::Stopped => return Err(sh.ahead.stopped_error()),
                    }
                    p += n;
                }
            }
            Advice::DontNeed => {
                // Pages partly outside the range keep their place (their
                // other bytes may be in use), but for the file's last.
                let first = offset.div_ceil(ps);
                let last = if end == file_len {
                    end.div_ceil(ps)
                } else {
                    end / ps
                };
                if first < last {
                    sh.cache.make_cold_range(self.id, first, last)?;
                }
            }
        }
        Ok(())
    }

    /// The page holding byte `offset`, kept in the cache while the guard
    /// lives (see [`PageGuard`]): no copy, the guard derefs to the cached
    /// frame. A miss reads the page first. Errors: an offset at or past the
    /// end ([`Error::OutOfRange`]); this thread holding the page mutably, or
    /// [`MAX_GUARDS_PER_THREAD`] guards ([`Error::HeldByCaller`],
    /// [`Error::TooManyPins`]); a file with a writable [`PagedArray`] of word
    /// elements, whose stores change its bytes in place
    /// ([`Error::InvalidArgument`]).
    ///
    /// [`PagedArray`]: crate::PagedArray
    pub fn page(&self, offset: u64) -> Result<PageGuard<'_>> {
        self.page_inner(offset).map_err(|e| self.gone_or(e))
    }

    /// The page holding byte `offset`, as [`CachedFile::page`] gives it, if
    /// it is cached and readable now; else `None`, with nothing read,
    /// claimed or waited for (a page being read in or held mutably by
    /// another thread is `None` too; one being written back is readable,
    /// and given). For a reader with reads of
    /// its own in flight, which takes what is cached at once and queues the
    /// rest. A page found counts as a hit; readahead is not told of it.
    /// Errors as [`CachedFile::page`].
    pub fn page_if_cached(&self, offset: u64) -> Result<Option<PageGuard<'_>>> {
        self.page_if_cached_inner(offset)
            .map_err(|e| self.gone_or(e))
    }

    fn page_if_cached_inner(&self, offset: u64) -> Result<Option<PageGuard<'_>>> {
        let (page, start, len) = self.page_span(offset)?;
        let name = || self.entry.file.name();
        let hold = Hold::take(self.store_key(), self.id, page, false, name)?;
        let Some(g) = self.shared.cache.try_pin_present(self.id, page, false)? else {
            return Ok(None);
        };
        // Pinned: now the check that no array stores into it in place.
        self.entry.refs_allowed()?;
        Ok(Some(Guarded::new(g, len, start, hold)))
    }

    fn page_inner(&self, offset: u64) -> Result<PageGuard<'_>> {
        let sh = &*self.shared;
        // References taken page after page are a stream as reads are: read
        // ahead, and their pages left cold.
        let g = self.page_with(offset, |page| {
            if readahead::note_page(sh, &self.entry, self.id, page, 0) {
                Mode::Stream
            } else {
                Mode::Keep
            }
        })?;
        // Pinned: now the check that no array stores into it in place.
        self.entry.refs_allowed()?;
        Ok(g)
    }

    /// Make way for a writable paged array of word elements over this file:
    /// count it (shared page references are refused from now on), then wait
    /// until every page of the file pinned now has been let go once, so that
    /// no reference taken before the count outlives it. Errors: this thread
    /// holds a guard of the file ([`Error::HeldByCaller`]); a page stayed
    /// pinned for the cache's pin wait ([`Error::Busy`]; the count is taken
    /// back).
    pub(crate) fn begin_word_stores(&self) -> Result<()> {
        let e = &self.entry;
        let name = || e.file.name();
        Hold::check(self.store_key(), self.id, || 0..u64::MAX, true, name)?;
        e.word_arrays.fetch_add(1, Ordering::SeqCst);
        // Pairs with the fence in `Entry::refs_allowed`.
        std::sync::atomic::fence(Ordering::SeqCst);
        let cache = &self.shared.cache;
        let deadline = std::time::Instant::now() + cache.pin_wait();
        for page in cache.pinned_pages(self.id) {
            while cache.is_pinned(self.id, page) {
                if std::time::Instant::now() >= deadline {
                    e.word_arrays.fetch_sub(1, Ordering::SeqCst);
                    return Err(Error::Busy(format!(
                        "page {page} of file {:?} stayed referenced for {:?}: drop the \
                         file's page guards before making a writable paged array of it",
                        e.file.name(),
                        cache.pin_wait()
                    )));
                }
                std::thread::sleep(std::time::Duration::from_micros(100));
            }
        }
        Ok(())
    }

    /// Zero `page` from byte `from` on, for a change of length under the
    /// store's metadata lock. A fill or write-back of the page is waited for
    /// at most [`crate::cache::CROSS_FILL_WAITS`] pin waits, a guard on it
    /// one, then `Busy`: the fill may be a request queue's whose thread, the
    /// only one that finishes it, waits for that lock.
    fn zero_tail(&self, page: u64, from: usize) -> Result<()> {
        let cache = &self.shared.cache;
        let start = std::time::Instant::now();
        let mut wait = cache.pin_wait();
        loop {
            match cache.try_get_mut(self.id, page)? {
                Some(crate::cache::LookupMut::Hit(mut g)) => {
                    g[from..].fill(0);
                    return Ok(());
                }
                Some(crate::cache::LookupMut::Miss(mut f)) => {
                    // A page not cached that the devices hold as a hole reads
                    // as zeros there, before the cut and after it: nothing to
                    // clear, and no page to write back (whose space a full
                    // device may not have). The claim goes unfilled; a reader
                    // waiting for it reads the page anew.
                    let ps = cache.page_size() as u64;
                    if !self.entry.file.allocated(page * ps, ps).unwrap_or(true) {
                        drop(f);
                        return Ok(());
                    }
                    let r = self.load(self.id, page, f.frame_mut());
                    f.finish(r)?[from..].fill(0);
                    return Ok(());
                }
                Some(crate::cache::LookupMut::WriteBack(w)) => {
                    let r = self.store_page(w.file(), w.page(), w.bytes());
                    w.finish(r)?;
                }
                None if start.elapsed() >= wait => {
                    // The bytes past the end stay; a translation of the page
                    // must not serve them.
                    cache.unsettle(self.id, page);
                    return Err(Error::Busy(format!(
                        "page {page} of file {:?} stayed in use (being read in, written back \
                         or referenced) for {:.1} s: its bytes past the file's end were not \
                         cleared (the file's next growth clears them first)",
                        self.entry.file.name(),
                        wait.as_secs_f64()
                    )));
                }
                None if cache.is_own_queue_fill(self.id, page) => {
                    cache.unsettle(self.id, page);
                    return Err(Error::HeldByCaller(format!(
                        "page {page} of file {:?} is being read in by a request queue of \
                         this thread, whose reads only this thread finishes: poll, wait for \
                         or drain the queue before changing the file's length",
                        self.entry.file.name()
                    )));
                }
                None => {
                    if cache.is_in_io(self.id, page) {
                        wait = cache.pin_wait() * crate::cache::CROSS_FILL_WAITS;
                    }
                    if !cache.wait_fill(self.id, page, std::time::Duration::from_millis(1)) {
                        std::thread::sleep(std::time::Duration::from_micros(100));
                    }
                }
            }
        }
    }

    /// [`CachedFile::page`] for a reader of kind `mode`: `Keep`, or `Stream`
    /// for a sequential stream's (a page it brings in enters cold, so that
    /// readahead and later misses may take it first). Never `Normal`, whose
    /// misses may be served without a slot.
    pub(crate) fn page_as(&self, offset: u64, mode: Mode) -> Result<PageGuard<'_>> {
        self.page_with(offset, |_| mode)
    }

    /// [`CachedFile::page_as`], the mode chosen by `mode_of(page)` once the
    /// span is checked and the hold taken. A stream's page found cold counts
    /// as read ahead and used.
    fn page_with(&self, offset: u64, mode_of: impl FnOnce(u64) -> Mode) -> Result<PageGuard<'_>> {
        let sh = &*self.shared;
        self.guard(offset, false, |page| {
            let mode = mode_of(page);
            debug_assert!(matches!(mode, Mode::Keep | Mode::Stream));
            let mut loaded = false;
            let g = sh.cache.get_with_as(
                self.id,
                page,
                mode,
                |f, p, frame| {
                    loaded = true;
                    self.load(f, p, frame)
                },
                |f, p, bytes| self.store_page(f, p, bytes),
            )?;
            if mode == Mode::Stream && loaded {
                readahead::note_own(sh, self.id, page);
            } else if mode == Mode::Stream && g.is_cold() {
                readahead::note_used(sh, self.id, page);
            }
            Ok(g)
        })
    }

    /// A guard of the page holding `offset`: the span checked, this thread's
    /// hold taken, then the page by `get(page)`.
    fn guard<G>(
        &self,
        offset: u64,
        mutable: bool,
        get: impl FnOnce(u64) -> Result<G>,
    ) -> Result<Guarded<G>> {
        let (page, start, len) = self.page_span(offset)?;
        let name = || self.entry.file.name();
        let hold = Hold::take(self.store_key(), self.id, page, mutable, name)?;
        Ok(Guarded::new(get(page)?, len, start, hold))
    }

    /// The page holding byte `offset`, held exclusively for writing (see
    /// [`PageGuardMut`]): it waits for other guards and readers of the page,
    /// up to the cache's pin wait ([`Error::Busy`] after it). Errors as
    /// [`CachedFile::page`], and [`Error::ReadOnly`] on a file opened
    /// read-only, [`Error::HeldByCaller`] if this thread holds any guard of
    /// the page, or if the page stayed under another thread's write-back for
    /// 30 pin waits while request queues of this thread hold reads or
    /// write-backs in flight (that thread may be waiting for one of them).
    pub fn page_mut(&self, offset: u64) -> Result<PageGuardMut<'_>> {
        self.page_mut_inner(offset).map_err(|e| self.gone_or(e))
    }

    fn page_mut_inner(&self, offset: u64) -> Result<PageGuardMut<'_>> {
        if self.read_only {
            return Err(Error::ReadOnly(self.entry.file.name()));
        }
        self.guard(offset, true, |page| {
            self.shared.own_write_back(self.id, page)?;
            self.shared.cache.get_mut_with(
                self.id,
                page,
                |f, p, frame| self.load(f, p, frame),
                |f, p, bytes| self.store_page(f, p, bytes),
            )
        })
    }

    /// The page holding `offset`, its first byte's offset and its length
    /// inside the file; an offset at or past the end is an error.
    fn page_span(&self, offset: u64) -> Result<(u64, u64, usize)> {
        self.entry.check()?;
        let len = self.len();
        if offset >= len {
            return Err(Error::OutOfRange {
                file: self.entry.file.name(),
                offset,
                len: 1,
                file_len: len,
            });
        }
        let ps = self.shared.cache.page_size() as u64;
        let page = offset / ps;
        let start = page * ps;
        Ok((page, start, (len - start).min(ps) as usize))
    }

    /// This thread's shared hold on `page`, for a pin taken without a
    /// guard (see [`SharedHold`]): `TooManyPins` past the thread's bound,
    /// `HeldByCaller` if the thread holds the page mutably.
    pub(crate) fn hold_shared(&self, page: u64) -> Result<SharedHold> {
        let name = || self.entry.file.name();
        Hold::take(self.store_key(), self.id, page, false, name).map(SharedHold)
    }

    /// The store this handle belongs to, as page guards name it.
    fn store_key(&self) -> usize {
        Hold::store_key(&self.shared)
    }

    /// Refuses a read (or, with `writes`, a write) of bytes `offset..end`
    /// that would wait for a guard this thread holds.
    pub(crate) fn check_held(&self, offset: u64, end: u64, writes: bool) -> Result<()> {
        let pages = || {
            let ps = self.shared.cache.page_size() as u64;
            offset / ps..end.div_ceil(ps).max(offset / ps + 1)
        };
        Hold::check(self.store_key(), self.id, pages, writes, || {
            self.entry.file.name()
        })
    }

    /// Store into the page holding byte `offset` in place, under a shared
    /// pin, not the page's exclusive hold: `store` gets the address of that
    /// byte in the frame and must change the bytes there only by atomic
    /// stores (other pin holders may read them meanwhile). The page is dirty
    /// after, in the same step as the pin goes; a store that lands during the
    /// page's write-back leaves it dirty for the next one. Errors as
    /// [`CachedFile::page`], and [`Error::ReadOnly`].
    pub(crate) fn store_in_place(
        &self,
        offset: u64,
        len: usize,
        store: impl FnOnce(*mut u8),
    ) -> Result<()> {
        if self.read_only {
            return Err(Error::ReadOnly(self.entry.file.name()));
        }
        let g = self
            .page_as(offset, Mode::Keep)
            .map_err(|e| self.gone_or(e))?;
        let at = (offset - g.offset()) as usize;
        // `at` is inside the page (the guard's span holds `offset`); the
        // `len` bytes from it must be inside the file too.
        if at + len > g.span() {
            return Err(Error::OutOfRange {
                file: self.entry.file.name(),
                offset,
                len: len as u64,
                file_len: g.offset() + g.span() as u64,
            });
        }
        store(g.frame_ptr().wrapping_add(at));
        g.release_stored();
        Ok(())
    }

    /// Write all of `data` at `offset` (any alignment; within the file's length).
    ///
    /// Pages are written one after another: if a page fails (its fill, the
    /// write-back of a victim, a pin wait), the error comes back and the
    /// pages before it keep the new bytes, as with a short `pwrite`. Write
    /// the range again to be sure of it. A page whose write-back a
    /// [`CachedQueue`] of this thread started and has not finished gets
    /// [`Error::HeldByCaller`] at once (poll or drain the queue first); one
    /// under another thread's write-back gets it after 30 pin waits if
    /// request queues of this thread hold reads or write-backs in flight
    /// (that thread may be waiting for one of them).
    pub fn write_at(&self, offset: u64, data: &[u8]) -> Result<()> {
        self.write_at_inner(offset, data, self.len())
            .map_err(|e| self.gone_or(e))
    }

    /// Write all of `data` at `offset`, making the file `offset + data.len()`
    /// bytes long first if it is shorter, as `pwrite` past the end does
    /// (growing as [`CachedFile::grow`] does, durable with the next sync; a
    /// write of no bytes changes nothing).
    /// Readers see the longer length only once the bytes are in: a reader
    /// that follows the file's end never reads zeros where such a write puts
    /// bytes. A write that fails leaves the file as long as it was (unless
    /// its length changed meanwhile through another call, or this thread
    /// holds a guard of the old last page, whose tail the cut back would
    /// clear: then it stays longer), with what
    /// [`CachedFile::write_at`] leaves inside it. Extending writes of one
    /// file run one at a time; a write inside the file is a `write_at`.
    pub fn write_extending(&self, offset: u64, data: &[u8]) -> Result<()> {
        if self.read_only {
            return Err(Error::ReadOnly(self.entry.file.name()));
        }
        let end = offset
            .checked_add(data.len() as u64)
            .ok_or_else(|| Error::InvalidArgument("offset + length overflows".into()))?;
        if data.is_empty() {
            // As `pwrite` of no bytes: the length stays.
            return self.entry.check().map_err(|e| self.gone_or(e));
        }
        // Inside the file: a `write_at`, unless a cut comes between the
        // length read and the write (which then finds the range past the
        // end): then it grows the file as any write past the end.
        if end <= self.len() {
            #[cfg(test)]
            if let Some(between) = INSIDE_WRITE_LENGTH.take(Arc::as_ptr(&self.entry) as usize) {
                between();
            }
            match self.write_at(offset, data) {
                Err(Error::OutOfRange { .. }) => {}
                r => return r,
            }
        }
        let e = &*self.entry;
        let _one = self.lock_beside_sync(&e.extending)?;
        let mut old = self.len();
        // (Bounded: each turn needs another cut to land inside the write.)
        for _ in 0..8 {
            if end > old {
                break;
            }
            match self.write_at(offset, data) {
                Err(Error::OutOfRange { .. }) => old = self.len(),
                r => return r,
            }
        }
        if end <= old {
            return self.write_at(offset, data);
        }
        // Refusals that need no growth come before it: the pages the write
        // fills. (A guard of the old last page does not stand in the way of
        // a write past it: the growth leaves that page alone, but after a
        // shrink, when it clears the page's tail and refuses the guard's
        // holder itself. Should the write fail, the cut back to the old
        // length clears that page's tail too, and is refused then: the file
        // stays longer, as a failed write past the end may leave it.)
        self.entry.check()?;
        let ps = self.shared.cache.page_size() as u64;
        self.check_held(offset, end, true)?;
        /// Lets the length show again however the write ends (a panic too).
        struct Show<'a>(&'a AtomicU64);
        impl Drop for Show<'_> {
            fn drop(&mut self) {
                self.0.store(u64::MAX, Ordering::Release);
            }
        }
        {
            // Under the lock every length change takes: a growth that came
            // after `old` was read is not hidden, even for a moment.
            let _no_resize = self.lock_beside_sync(&e.resizing)?;
            e.shown.store(old.max(self.real_len()), Ordering::Release);
        }
        let _show = Show(&e.shown);
        // A growth by another call that ended before the hold shows (one
        // after it raises the shown length itself).
        e.shown.fetch_max(self.real_len(), Ordering::AcqRel);
        let changes = e.resizes.load(Ordering::Acquire);
        let r = self.grow_to(end).and_then(|from| {
            #[cfg(test)]
            if let Some(between) = GREW.take(Arc::as_ptr(&self.entry) as usize) {
                between();
            }
            let w = self.write_at_inner(offset, data, self.real_len());
            // What this write grew goes again (to the length it grew from),
            // if no other length change came after the count read above
            // (this growth is one); a failure of the cut leaves the longer
            // file, as a failed `pwrite` past the end may.
            if let (Err(_), Some(from)) = (&w, from)
                && self.real_len() == end
            {
                let _ = self.resize_to(from, false, from / ps, Some(changes + 1));
            }
            w
        });
        drop(_show);
        self.shared.retire_finished();
        r.map_err(|x| self.gone_or(x))
    }

    /// Refuses a write of `n` bytes at `offset`: on a read-only handle,
    /// past the end, or of a page this thread holds a guard of.
    /// `len`: the length the write must fit in.
    fn write_check(&self, offset: u64, n: usize, len: u64) -> Result<()> {
        if self.read_only {
            return Err(Error::ReadOnly(self.entry.file.name()));
        }
        self.entry.check()?;
        if offset.checked_add(n as u64).is_none_or(|end| end > len) {
            return Err(Error::OutOfRange {
                file: self.entry.file.name(),
                offset,
                len: n as u64,
                file_len: len,
            });
        }
        self.check_held(offset, offset + n as u64, true)
    }

    fn write_at_inner(&self, offset: u64, data: &[u8], len: u64) -> Result<()> {
        self.write_check(offset, data.len(), len)?;
        let sh = &*self.shared;
        let ps = sh.cache.page_size() as u64;
        let mut done = 0usize;
        while done < data.len() {
            let pos = offset + done as u64;
            let page = pos / ps;
            let in_page = (pos % ps) as usize;
            let take = (ps as usize - in_page).min(data.len() - done);
            let whole = in_page == 0 && take == ps as usize;
            sh.own_write_back(self.id, page)?;
            // A whole-page write needs no read of the old bytes.
            let mut g = sh.cache.get_mut_with(
                self.id,
                page,
                |f, p, frame| {
                    if whole {
                        Ok(())
                    } else {
                        self.load(f, p, frame)
                    }
                },
                |f, p, bytes| self.store_page(f, p, bytes),
            )?;
            g[in_page..in_page + take].copy_from_slice(&data[done..done + take]);
            done += take;
        }
        Ok(())
    }

    /// Sync, then let go of this handle. The file stays known to the cache (its
    /// clean pages may still be cached; dirty pages written later through
    /// another handle are still written back).
    pub fn close(self) -> Result<()> {
        self.sync()
    }

    /// Write every dirty page of this file and make it durable. Returns the
    /// first write-back failure since the last `sync`, if any (the pages stay
    /// dirty, so a later `sync` tries again). Its cost follows the pages
    /// dirtied since the last sync, not the size of the cache; with nothing
    /// written since the last good fsync it does no I/O (the file underneath,
    /// [`CachedFile::file`], refuses writes around the cache). A thread holding a page guard
    /// of this file gets [`Error::HeldByCaller`] (the sync would wait for
    /// the guard), as does one whose sync has waited the pin wait for pages
    /// in use while a [`CachedQueue`] of the same thread holds write-backs it
    /// has not finished (poll, wait for or drain it first), or while another
    /// thread waits for something only this one can end: a page of another
    /// file this thread holds a guard of (waited for by that file's sync, or
    /// a mutable guard waited for by anyone), or a read its queue holds in
    /// flight.
    pub fn sync(&self) -> Result<()> {
        self.sync_asking(shared::Asker::Handle(&self.loss))
    }

    fn sync_asking(&self, who: shared::Asker<'_>) -> Result<()> {
        self.entry.check()?;
        // A dirty page under any guard of this thread would be waited for.
        let name = || self.entry.file.name();
        Hold::check(self.store_key(), self.id, || 0..u64::MAX, true, name)?;
        // Retired meanwhile (a delete finished by a later operation): gone.
        let sh = &*self.shared;
        match sh.sync_file(self.id, who, &guards_of(sh)) {
            // Deleted or replaced through the store while the sync looked at
            // its backing files, its entry not yet retired by the thread that
            // did it: as deleted (nothing is lost that a file without a name
            // would keep).
            Err(Error::BackingGone { .. }) if sh.retired_now(&self.entry) => {
                Err(Error::FileGone(self.entry.file.name()))
            }
            r => r.map_err(|e| self.gone_or(e)),
        }
    }

    /// As [`CachedFile::sync`], for a caller that cannot pass its error on
    /// to whoever wrote the file (a last close whose error goes to stderr, a
    /// descriptor closed as a side effect of another call): it fails on a
    /// loss as `sync` does, but the loss does not count as reported, so a
    /// later open for writing (or [`CachedFile::accept_reported_loss`]) does
    /// not accept it, and the next `sync` that reaches a caller reports it.
    pub fn sync_unheard(&self) -> Result<()> {
        self.sync_asking(shared::Asker::Quiet(&self.loss))
    }

    /// Whether this handle's [`CachedFile::sync`] would fail now with
    /// [`Error::SyncLost`] (a loss it has not accepted, and not been told of
    /// after some handle accepted it), found without a sync and without
    /// counting anyone as told. [`Error::FileGone`] once the file was
    /// deleted, as its other calls.
    pub fn loss_pending(&self) -> Result<bool> {
        self.entry.check()?;
        Ok(self
            .entry
            .durable()
            .loss_for(shared::Asker::Quiet(&self.loss))
            .is_some())
    }

    /// Accept the losses earlier failed fsyncs left ([`Error::SyncLost`])
    /// that some sync has reported (through this handle, another, or the
    /// store's sync): this handle's syncs report only what fails from now
    /// on, and so do those of the other handles once they have been told (a
    /// handle open when a loss happened fails once with it, unless it has
    /// been told already). A loss no sync has reported yet is not accepted:
    /// the next sync reports it. Returns whether this handle had a loss to
    /// accept. [`Error::ReadOnly`] on a read-only handle: a read-only handle
    /// told of a loss keeps failing its syncs until a writable handle
    /// accepts it. [`Error::FileGone`] once the file was deleted, as its
    /// other calls.
    pub fn accept_loss(&self) -> Result<bool> {
        self.entry.check()?;
        self.accept_reported_loss()
    }

    /// Accept the losses some sync has reported to its caller, as a new
    /// [`CachedStore::open_file`] does: for a layer that reuses one handle
    /// for a new writer's open. A loss no sync has reported yet stays, for
    /// this handle's next sync to report. Returns whether this handle had
    /// one to accept. [`Error::ReadOnly`] on a read-only handle.
    pub fn accept_reported_loss(&self) -> Result<bool> {
        if self.read_only {
            return Err(Error::ReadOnly(self.entry.file.name()));
        }
        let mut d = self.entry.durable();
        let upto = d.reported_gen;
        Ok(d.accept(&self.loss, upto))
    }

    /// Change the file's length to `len` bytes (any length). Growing adds
    /// zeros. Shrinking drops the cached pages past the new end, dirty ones
    /// unwritten (as a truncate does), and zeroes the rest of the new last
    /// page, so the bytes past the end read as zeros if the file grows again.
    ///
    /// The change is committed in the store (its intent record durable, I/O
    /// past a shorter end refused) before the cache is touched, so a failed
    /// call leaves the file's bytes inside its old length as they were; once
    /// committed, the change completes even if this returns an error. Writes
    /// racing a shrink may be lost, never shown past the end after a later
    /// growth. The file must not be in use on this thread (a queue not
    /// drained); a thread holding a page guard of the page the shorter of
    /// the two lengths ends in or of a later one (the pages the change drops
    /// or clears), or whose request queue still reads or writes back a page
    /// the shrink drops, gets [`Error::HeldByCaller`] before anything changes
    /// (the change would wait for the guard, or for a read only this thread
    /// ends by polling); one whose queue reads the page the new end cuts
    /// gets it once the change is committed.
    pub fn set_len(&self, len: u64) -> Result<()> {
        let ps = self.shared.cache.page_size() as u64;
        let touched_from = len.min(self.real_len()) / ps;
        let r = self.resize_to(len, false, touched_from, None).map(drop);
        if r.is_ok() {
            // As in `grow`: a set length shows at once.
            self.entry.shown.fetch_max(len, Ordering::AcqRel);
        }
        self.shared.retire_finished();
        r
    }

    /// Make the file at least `len` bytes long (the new bytes read as zeros)
    /// without a logged metadata operation: the growth becomes durable with
    /// the next [`CachedFile::sync`] (one header write per device), and a
    /// crash before that finds the file at its last durable length, as it
    /// finds the bytes written meanwhile. For writes past the end (appends);
    /// a file `len` bytes long or longer is left as it is. Errors as
    /// [`CachedFile::set_len`].
    pub fn grow(&self, len: u64) -> Result<()> {
        let r = self.grow_to(len);
        if let Ok(Some(_)) = r {
            // Shown at once, even while an extending write holds the shown
            // length at an older one. (A file already this long, perhaps
            // only through such a write's growth, is left to show as it
            // does: with that write's bytes.)
            self.entry.shown.fetch_max(len, Ordering::AcqRel);
        }
        self.shared.retire_finished();
        r.map(drop)
    }

    /// Reserve space on the devices for bytes `offset..offset + len`, inside
    /// the file or past its end, so that the write-back of pages written there
    /// cannot fail for want of space: [`File::reserve`] of the whole pages the
    /// range touches (a page is written back whole), which says what it
    /// keeps and for how long. The length and the bytes do not change.
    /// Errors as [`File::reserve`], and [`Error::ReadOnly`] on a read-only
    /// handle; a range past [`CachedStore::max_file_len`] is refused.
    pub fn reserve(&self, offset: u64, len: u64) -> Result<()> {
        self.reserve_as(offset, len, true)
    }

    /// [`CachedFile::reserve`] without making the reservation durable: the
    /// devices' space is taken now (a full device answers `ENOSPC` here),
    /// and a crash before the file's next [`CachedFile::sync`] may give it
    /// back (never data: the pages written there were not durable either).
    /// For a writer that wants a full device to fail its write, as a local
    /// file system's does, rather than the write-back at a later sync or
    /// close: reserve the range, then write it. Costs one `fallocate` per
    /// device the range touches, and no fsync.
    pub fn reserve_unsynced(&self, offset: u64, len: u64) -> Result<()> {
        self.reserve_as(offset, len, false)
    }

    /// Whether the devices hold space for every page that the bytes
    /// `offset..offset + len` touch, so that their write-back cannot fail for want of it: no
    /// backing file has a hole there, as its file system tells (`SEEK_HOLE`;
    /// one that cannot look for holes tells none). Space reserved but not yet
    /// written may be told as a hole. A writer that wants a full device to
    /// fail its write inside the file (into a hole that a growth left) asks
    /// this, and [`CachedFile::reserve_unsynced`] if not. Costs one `lseek`
    /// per device the range touches. Errors: a failed device, the file
    /// deleted.
    pub fn is_allocated(&self, offset: u64, len: u64) -> Result<bool> {
        self.entry.check()?;
        let ps = self.shared.cache.page_size() as u64;
        let from = offset / ps * ps;
        let to = offset.saturating_add(len).div_ceil(ps).saturating_mul(ps);
        if to <= from {
            return Ok(true);
        }
        self.entry.file.allocated(from, to - from)
    }

    /// Give back the devices' space reserved past the file's end (by
    /// [`CachedFile::reserve`] or [`CachedFile::reserve_unsynced`] past it):
    /// each backing file is cut to its own size, which frees what lies past
    /// it and keeps every byte of the file. Errors: a failed device, or the
    /// file deleted.
    pub fn trim_reservations(&self) -> Result<()> {
        if self.read_only {
            return Err(Error::ReadOnly(self.entry.file.name()));
        }
        self.entry.check()?;
        self.entry.file.trim_past_end()
    }

    fn reserve_as(&self, offset: u64, len: u64, durable: bool) -> Result<()> {
        if self.read_only {
            return Err(Error::ReadOnly(self.entry.file.name()));
        }
        self.entry.check()?;
        let take = |from: u64, len: u64| match durable {
            true => self.entry.file.reserve(from, len),
            false => self.entry.file.reserve_unsynced(from, len),
        };
        let Some(end) = offset.checked_add(len).filter(|_| len > 0) else {
            // Refused by the store, with the range in its message.
            return take(offset, len);
        };
        self.shared.check_len(&self.entry.file.name(), end)?;
        // Whole pages: a page is written back whole, not only the bytes of
        // the range in it.
        let ps = self.shared.cache.page_size() as u64;
        let from = offset / ps * ps;
        let to = end.div_ceil(ps).saturating_mul(ps);
        take(from, to - from)
    }

    /// [`CachedFile::grow`], the longer length not shown past an extending
    /// write's hold.
    /// Returns the length it grew the file from (read under the resize
    /// lock), or `None` if the file was `len` bytes long already.
    fn grow_to(&self, len: u64) -> Result<Option<u64>> {
        if self.read_only {
            return Err(Error::ReadOnly(self.entry.file.name()));
        }
        self.entry.check()?;
        self.shared.check_len(&self.entry.file.name(), len)?;
        let e = &*self.entry;
        {
            let _one = self.lock_beside_sync(&e.resizing)?;
            if len <= self.real_len() {
                if len > Self::len_of(e) {
                    // Long enough only through an extending write still under
                    // way: this call counts as a change of length, so that
                    // the write, should it fail, does not cut the file back
                    // below what this call promised.
                    e.resizes.fetch_add(1, Ordering::AcqRel);
                }
                return Ok(None);
            }
            if !e.shrunk.load(Ordering::Acquire) {
                // The length it grows from is the store's, read under its
                // metadata lock (which may first finish an operation that
                // changes it).
                let r = self.entry.file.grow_lazily(len);
                if let Ok(Some(_)) = r {
                    e.resizes.fetch_add(1, Ordering::AcqRel);
                }
                return r.map_err(|x| self.gone_or(x));
            }
        }
        // Pages that a write racing the last shrink may have left past the
        // end must go before the file is longer: the logged path clears them
        // (from the page the end lies in: guards below it are no matter).
        let ps = self.shared.cache.page_size() as u64;
        self.resize_to(len, true, self.real_len() / ps, None)
    }

    /// Lock `m`, one of the file's locks that a length change takes
    /// (`extending`, `resizing`, `syncing`) and whose holder may be waiting
    /// for a sync of the file, or be that sync. A sync holding `syncing`
    /// waits for every dirty page of the file while others use it: a thread
    /// that holds a guard of such a page, or owes its write-back (a request
    /// queue of this thread started it and has not been polled since),
    /// would wait for the sync, and the sync for it, for ever. Such a thread
    /// waits only while the sync waits for none of its pages, then is
    /// refused; a thread holding and owing nothing of the file waits as for
    /// any lock.
    fn lock_beside_sync<'m>(&self, m: &'m Mutex<()>) -> Result<std::sync::MutexGuard<'m, ()>> {
        let (store, id, sh) = (self.store_key(), self.id, &*self.shared);
        let name = || self.entry.file.name();
        // Whether the sync waits for this thread on page `p`: its queue's
        // write-back, or its guard of a page the sync found under no
        // write-back (`wb`). A guard of a page under another's write-back
        // does not count: the page leaves the sync's list when that ends.
        // The sync's finding, not the page's state now: a write-back ended
        // since the sync's latest round leaves the page in the list until
        // its next.
        let holds = |p: u64, wb: bool| {
            writeback::owes_page(sh, id, p)
                || (!wb && Hold::check(store, id, || p..p + 1, true, name).is_err())
        };
        let guards = guards_of(sh);
        if !writeback::holds_anything(&guards) {
            return Ok(m.lock().unwrap_or_else(|p| p.into_inner()));
        }
        writeback::lock_unless_sync_waits_on(sh, &self.entry, m, holds, &guards).map_err(|w| {
            Error::HeldByCaller(match w {
                writeback::WaitedOn::BySync(p) => format!(
                    "a length change of {:?} beside a sync of it, which waits for page {p}, \
                     which this thread holds a guard of or owes the write-back of (poll its \
                     request queues first)",
                    name()
                ),
                writeback::WaitedOn::ByOther(p) => format!(
                    "a length change of {:?} beside another, while a thread waits for {p}, \
                     which this thread holds a guard of or a request queue of this thread has \
                     not finished (poll its request queues, or drop the guard, first)",
                    name()
                ),
            })
        })
    }

    /// `set_len`, or with `grow_only` a growth that leaves a longer file alone;
    /// refused while this thread holds a guard of page `held_from` of the
    /// file or a later one (an extending write's cut back from its own pages).
    /// Returns the length it changed the file from, or `None` if it left
    /// it (a growth of a file long enough already, or with `if_count`, a
    /// count of length changes (`Entry::resizes`) other than that).
    fn resize_to(
        &self,
        len: u64,
        grow_only: bool,
        held_from: u64,
        if_count: Option<u64>,
    ) -> Result<Option<u64>> {
        if self.read_only {
            return Err(Error::ReadOnly(self.entry.file.name()));
        }
        self.entry.check()?;
        self.shared.check_len(&self.entry.file.name(), len)?;
        let name = || self.entry.file.name();
        Hold::check(
            self.store_key(),
            self.id,
            || held_from..u64::MAX,
            true,
            name,
        )?;
        let e = &*self.entry;
        // A shrink waits for the pages it drops; one that a request queue of
        // this thread is reading or writing back only this thread can let go
        // (by polling).
        if !grow_only && len < self.real_len() {
            let from = len.div_ceil(self.shared.cache.page_size() as u64);
            let own = (self
                .shared
                .cache
                .own_fill_from(self.id, from)
                .map(|p| (p, "reads")))
            .or_else(|| {
                writeback::owed_page_from(&self.shared, self.id, from).map(|p| (p, "writes back"))
            });
            if let Some((page, what)) = own {
                return Err(Error::HeldByCaller(format!(
                    "{:?} cut to {len} bytes while a request queue of this thread {what} its \
                     page {page}: poll or drain the queue first",
                    name()
                )));
            }
        }
        let _one = self.lock_beside_sync(&e.resizing)?;
        if grow_only && len <= self.real_len() {
            return Ok(None);
        }
        if if_count.is_some_and(|c| c != e.resizes.load(Ordering::Acquire)) {
            return Ok(None);
        }
        // No sync of the file runs meanwhile: its writes are never cut by a
        // shrink between their preparation and their submission.
        let _no_sync = self.lock_beside_sync(&e.syncing)?;
        let sh = &*self.shared;
        let ps = sh.cache.page_size() as u64;
        // Make the cache hold nothing past `end` and zeros past it in its
        // last page; the store's devices read as zeros there too.
        let clear_past = |end: u64| -> Result<()> {
            // The page the end cuts, if any: its tail is cleared last, and
            // a step that gives up before that moves its sets' change counts
            // all the same, so that no translation made before keeps showing
            // its bytes past the end.
            let cut = (!end.is_multiple_of(ps)).then_some(end / ps);
            let unsettle_cut = |r: Result<()>| {
                if let (Err(_), Some(page)) = (&r, cut) {
                    sh.cache.unsettle(self.id, page);
                }
                r
            };
            let dropped = unsettle_cut(sh.cache.discard(self.id, end.div_ceil(ps)).map(drop));
            {
                // Whether or not every page there could go: nothing past the
                // end is owed to a sync any more (the store refuses I/O
                // there), and a failed fsync must not count such a page as
                // lost.
                let mut d = e.durable();
                d.written.truncate(end.div_ceil(ps));
                d.covering.truncate(end.div_ceil(ps));
                d.refilled.truncate(end.div_ceil(ps));
            }
            dropped?;
            if let Some(page) = cut {
                unsettle_cut(sh.own_write_back(self.id, page))?;
                self.zero_tail(page, (end % ps) as usize)?;
            }
            Ok(())
        };
        // Growing after a shrink whose clearing did not finish (a page
        // guard outlasted the pin wait): what that shrink left past the end
        // must go before the file is longer, or the growth does not happen.
        let now = self.real_len();
        if len > now && e.shrunk.load(Ordering::Acquire) {
            clear_past(now)?;
            e.shrunk.store(false, Ordering::Release);
        }
        let mut from = None;
        let changed = self.entry.file.set_len_cached(len, &mut |old| {
            from = Some(old);
            if len < old {
                // I/O past the new end is refused now; drop what the cache
                // holds there, waiting for fills and write-backs in flight
                // (prepared with the old length) to end before the store cuts.
                e.shrunk.store(true, Ordering::Release);
                clear_past(len)
            } else if e.shrunk.load(Ordering::Acquire) {
                // A write that raced the last shrink may have left bytes past
                // the end it made: they must not show once the file is longer.
                // The flag goes only once they are gone (a page guard that
                // outlasted the pin wait leaves it for the next growth).
                clear_past(old)?;
                e.shrunk.store(false, Ordering::Release);
                Ok(())
            } else {
                Ok(())
            }
        });
        if from.is_some() {
            // Committed (its record is durable): counted even if a later
            // step failed and the store finishes it later.
            e.resizes.fetch_add(1, Ordering::AcqRel);
        }
        // A failed fsync of its steps is answered now, under `syncing`.
        sh.answer_meta_fsyncs(e, self.id);
        changed?;
        if e.shrunk.load(Ordering::Acquire) {
            // Pages a racing writer made past the end meanwhile; a page still
            // in use here is dropped by the next growth.
            let _ = sh.cache.discard(self.id, len.div_ceil(ps));
        }
        Ok(from)
    }
}

/// In unit tests: an empty scratch directory for a store, named by `tag`.
#[cfg(test)]
pub(crate) fn scratch_dir(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("setcache-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// In unit tests: run once by an extending write of the file whose entry is
/// at this address, after it grew the file and before it writes.
#[cfg(test)]
pub(crate) static GREW: crate::util::hook::TestHook<usize, Box<dyn FnOnce() + Send>> =
    crate::util::hook::TestHook::new();

/// In unit tests: a cache of `pages` pages of 4 KiB in sets of 4.
#[cfg(test)]
pub(crate) fn small_cache(pages: usize) -> CacheOptions {
    CacheOptions {
        size: pages * 4096,
        page_size: 4096,
        assoc: 4,
        ..CacheOptions::default()
    }
}

/// Run by `CachedFile::write_extending` on the entry at this address between
/// its look at the file's length and its write inside it.
#[cfg(test)]
pub(crate) static INSIDE_WRITE_LENGTH: crate::util::hook::TestHook<
    usize,
    Box<dyn FnOnce() + Send>,
> = crate::util::hook::TestHook::new();
