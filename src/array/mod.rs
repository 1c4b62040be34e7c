//! Out-of-core arrays: a [`PagedArray<T>`] keeps its elements in a cached
//! file, and each thread reads them through an [`ArrayReader`], which keeps
//! its own translation caches of (page → frame) in front of the shared page
//! cache, as TriCache's software address translation caches do.
//!
//! A reader has two levels: a direct-mapped table with as many entries as the
//! cache has frames (or the array pages, if fewer; a power of two from 512 to
//! 262,144; a hit costs a tag compare, the element's load and one load that
//! checks it) and behind it a 2-way set-associative table of half as many
//! entries (at most 8,192) for pages that collide in the first. An entry holds no pin:
//! it is where the page was seen ([`PageCache::sight_as`]), with the set's epoch
//! (a word the cache bumps before any page of the set changes or leaves its
//! frame) as it was then, and every read through it checks the epoch after
//! loading the element. A page the cache evicts, moves in a
//! resize, or hands to a writer fails the check, and the reader looks it up
//! again. So the cache never waits for a reader, an idle reader holds nothing,
//! and a translation cache can be as large as is useful.
//! [`ArrayReader::get_many`] reads indices known ahead in groups whose
//! memory misses overlap. Every 1,024th hit
//! through the tables tells the cache's policy the page is in use, so pages
//! read only through readers are not taken for unused ones.
//!
//! Elements of 1, 2, 4 or 8 bytes aligned to their size (the integers and
//! floats up to 64 bits) are *word elements*: [`PagedArray::set`] and
//! [`ArrayReader::set`] store one as a single atomic store into the frame
//! under a shared pin (through the reader's translation entry when it has
//! one), not the page's exclusive hold, and the pin's release marks the page
//! dirty in the same step; every read of one is a single atomic load. So a
//! reader sees an element's old or new value, never a mix, and element writes
//! neither wait for readers nor for the page's write-back: a store that lands
//! during a write-back leaves the page dirty for the next one, and `sync`
//! makes durable every store that completed before it began.
//! [`ArrayReader::for_each_chunk`] and [`PagedArray::read_into`] copy word
//! elements out with atomic loads (another thread may store meanwhile); other
//! elements are served in place. [`ArrayReader::for_each_run`] reads every
//! kind in place, in the pinned frame, through a [`Run`] whose reads of word
//! elements are atomic loads.
//!
//! Other elements, and [`PagedArray::write_from`], go through the cache's
//! writer path (the page held exclusively while its bytes change): an element
//! read while a writer held its page fails the check and is read again.
//! Elements larger than a word need the caller's synchronisation to be read
//! whole while another thread writes them, as with a `Vec` behind a lock.
//!
//! [`PageCache::sight_as`]: crate::cache::PageCache

use std::marker::PhantomData;
use std::ops::Range;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicU8, AtomicU16, AtomicU32, AtomicU64};

use crate::cache::{Mode, Sighting, still_at};
use crate::cached::{CachedFile, CachedStore, readahead};
use crate::error::{Error, Result};
use crate::storage::layout::LayoutKind;

/// Plain old data: a `Copy` type for which every bit pattern of its size is
/// a value (integers, floats, arrays of them).
///
/// # Safety
/// Any `size_of::<Self>()` initialised bytes must be a valid `Self`,
/// `align_of::<Self>()` must divide `size_of::<Self>()`, and a value must
/// have no padding (no uninitialised bytes): the array reads its bytes as
/// bytes when it stores it.
pub unsafe trait Element: Copy + Send + Sync + 'static {}

macro_rules! elements {
    ($($t:ty),*) => {
        $(
            // SAFETY: any bits are a value of a primitive number, whose alignment divides its size.
            unsafe impl Element for $t {}
        )*
    };
}
elements!(u8, u16, u32, u64, u128, i8, i16, i32, i64, i128, f32, f64);
// SAFETY: an array of plain old data is plain old data, aligned as its element, which divides its size.
unsafe impl<T: Element, const N: usize> Element for [T; N] {}

/// The largest element a paged array takes, in bytes: `get` returns each
/// element by value, built on the calling thread's stack, and a thread's
/// stack may be as small as 2 MiB.
pub const MAX_ELEMENT_BYTES: usize = 64 << 10;

/// The most threads [`PagedArray::par_chunks`] starts: far above the cores
/// of any machine it is meant for, far below what would run the process
/// out of stacks.
pub const MAX_PAR_THREADS: usize = 4096;

/// Whether `T` is a word element: 1, 2, 4 or 8 bytes, aligned to its size,
/// stored and loaded as one atomic word.
const fn is_word<T>() -> bool {
    matches!(size_of::<T>(), 1 | 2 | 4 | 8) && align_of::<T>() == size_of::<T>()
}

/// Load the word element at `p` atomically.
///
/// # Safety
/// `is_word::<T>()`; `p` is aligned to `T` and points at `size_of::<T>()`
/// bytes of a live frame, changed only by atomic stores or under a writer's
/// hold (a value read then is discarded by the caller's check).
#[inline]
unsafe fn load_word<T: Element>(p: *const u8) -> T {
    let p = p.cast_mut();
    // SAFETY: the caller's contract; `T` is plain old data of the word's size.
    unsafe {
        match size_of::<T>() {
            1 => std::mem::transmute_copy(&AtomicU8::from_ptr(p).load(Relaxed)),
            2 => std::mem::transmute_copy(&AtomicU16::from_ptr(p.cast()).load(Relaxed)),
            4 => std::mem::transmute_copy(&AtomicU32::from_ptr(p.cast()).load(Relaxed)),
            _ => std::mem::transmute_copy(&AtomicU64::from_ptr(p.cast()).load(Relaxed)),
        }
    }
}

/// Store the word element `v` at `p` atomically.
///
/// # Safety
/// As [`load_word`], and the caller holds a pin of the page.
#[inline]
unsafe fn store_word<T: Element>(p: *mut u8, v: T) {
    // SAFETY: the caller's contract; `T` is plain old data of the word's size.
    unsafe {
        match size_of::<T>() {
            1 => AtomicU8::from_ptr(p).store(std::mem::transmute_copy(&v), Relaxed),
            2 => AtomicU16::from_ptr(p.cast()).store(std::mem::transmute_copy(&v), Relaxed),
            4 => AtomicU32::from_ptr(p.cast()).store(std::mem::transmute_copy(&v), Relaxed),
            _ => AtomicU64::from_ptr(p.cast()).store(std::mem::transmute_copy(&v), Relaxed),
        }
    }
}

/// Copy `out.len()` word elements from `p` with atomic loads.
///
/// # Safety
/// As [`load_word`], for every element.
#[inline]
unsafe fn copy_words<T: Element>(p: *const u8, out: &mut [T]) {
    for (k, o) in out.iter_mut().enumerate() {
        // SAFETY: the caller's contract, element `k` of the run.
        *o = unsafe { load_word(p.add(k * size_of::<T>())) };
    }
}

/// An array of `T` in a cached file (`len` elements, the file's length
/// divided by the element's size).
///
/// ```
/// use setcache::{CacheOptions, CachedStore, LayoutKind, PagedArray, Store, StoreOptions};
///
/// let dir = std::env::temp_dir().join(format!("setcache-doc-array-{}", std::process::id()));
/// let roots = [dir.join("ssd0"), dir.join("ssd1")];
/// for r in &roots {
///     std::fs::create_dir_all(r)?;
/// }
/// let store = Store::open(&roots, StoreOptions::default())?;
/// let cs = CachedStore::new(store, CacheOptions { size: 16 << 20, ..CacheOptions::default() })?;
/// // Four million u64s (32 MiB) through a 16 MiB cache.
/// let ranks: PagedArray<u64> = PagedArray::create(&cs, "ranks", 4 << 20, LayoutKind::Stripe)?;
/// ranks.set(3_000_000, 42)?;
/// let mut r = ranks.reader(); // this thread's translation caches
/// assert_eq!(r.get(3_000_000)?, 42);
/// assert_eq!(r.get(0)?, 0);
/// ranks.sync()?;
/// drop(r);
/// drop((ranks, cs));
/// std::fs::remove_dir_all(&dir)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct PagedArray<T: Element> {
    file: CachedFile,
    len: u64,
    _t: PhantomData<fn() -> T>,
}

/// Most entries of the direct-mapped table (2^18: 12 MiB of 48-byte entries).
const L1_MAX: usize = 1 << 18;
/// Fewest entries of the direct-mapped table.
const L1_MIN: usize = 512;
const L2_WAYS: usize = 2;
/// Most sets of the second table (2^12 sets of two: 320 KiB of entries).
const L2_MAX_SETS: usize = 1 << 12;
/// Pages a chunked scan reads through the pinning path after it found a
/// page's entry stale.
const CHUNK_SKIP: u32 = 64;
/// Pages a chunked scan that is no stream reads through the tables between
/// two reports to the cache's policy.
const CHUNK_RENEW: u32 = 16;
/// Hits through the tables between two reports to the cache's policy.
const RENEW: u32 = 1024;
const EMPTY: u64 = u64::MAX;

/// The words empty entries point at.
static NOWHERE: AtomicU32 = AtomicU32::new(0);
static NO_EPOCH: AtomicU64 = AtomicU64::new(0);

/// One translation: page → frame, and what to check after a read.
#[derive(Clone, Copy)]
struct Entry<'a> {
    page: u64,
    frame: *const u8,
    /// The slot's state word and its bits in `SIGHT_MASK` when seen (for a
    /// pin taken on the entry).
    state: &'a AtomicU32,
    v: u32,
    /// The set's epoch word and its value when seen: the check after a read.
    epoch: &'a AtomicU64,
    ep: u64,
}

impl Entry<'_> {
    /// The check after a read through this entry (see [`still_at`]).
    #[inline(always)]
    fn still(&self) -> bool {
        still_at(self.epoch, self.ep)
    }

    /// The `T` at byte `at` of page `page` if this entry is that page's and
    /// the check after the read proves the page was there, readable and
    /// unchanged, while it was read (`ps`: the page size).
    #[inline(always)]
    fn read<T: Element>(&self, page: u64, at: usize, ps: usize) -> Option<T> {
        // A word element never spans two pages: its size, a power of two
        // below the page's, divides the page, and `at` is a multiple of it.
        if self.page != page || (!is_word::<T>() && at + size_of::<T>() > ps) {
            return None;
        }
        let p = self.frame.wrapping_add(at);
        let v = if is_word::<T>() {
            // SAFETY: a filled entry's frame stays mapped for the cache's life, `at + size_of::<T>() <= ps` is inside it, and `at`, a multiple of the size, is aligned; a value read under a writer fails the check below.
            unsafe { load_word::<T>(p) }
        } else {
            // SAFETY: as above; `T` is plain old data, read as bytes.
            unsafe { p.cast::<T>().read_unaligned() }
        };
        self.still().then_some(v)
    }

    const fn empty() -> Entry<'static> {
        Entry {
            page: EMPTY,
            frame: std::ptr::null(),
            state: &NOWHERE,
            v: u32::MAX,
            epoch: &NO_EPOCH,
            // No epoch matches: `NO_EPOCH` stays 0.
            ep: u64::MAX,
        }
    }
}

/// How a reader's element reads were served.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TranslationStats {
    /// Served by the direct-mapped table.
    pub direct: u64,
    /// Served by the set-associative table.
    pub private: u64,
    /// Looked up in the shared cache (found there).
    pub shared: u64,
    /// Read through the cache's pinning path (the page was absent, busy, or
    /// changed while read; or the element spans two pages).
    pub slow: u64,
}

impl TranslationStats {
    /// Reads the two translation tables served, over all reads.
    pub fn hit_ratio(&self) -> f64 {
        let all = self.direct + self.private + self.shared + self.slow;
        if all == 0 {
            0.0
        } else {
            (self.direct + self.private) as f64 / all as f64
        }
    }
}

/// A thread's reader of a [`PagedArray`], with its translation caches (not
/// `Send`: one per thread, cheap to make).
pub struct ArrayReader<'a, T: Element> {
    arr: &'a PagedArray<T>,
    l1: Box<[Entry<'a>]>,
    /// Entries of `l1` less one (a power of two less one).
    l1_mask: usize,
    l2: Box<[Entry<'a>]>,
    /// Sets of `l2`, a power of two.
    l2_sets: usize,
    /// Next way to replace, per set of `l2`.
    next: Box<[u8]>,
    /// `direct` counts only the gets of whole countdowns (see `stats`).
    stats: TranslationStats,
    /// Gets served by the direct-mapped table until the next report to the
    /// cache's policy.
    until_renew: u32,
    /// The same for stores through the tables.
    stores_until_renew: u32,
    /// The array's length in elements.
    len: u64,
    /// log2 of the page size.
    shift: u32,
    /// Word elements copied out of a frame for `for_each_chunk`.
    buf: Vec<T>,
    /// Pages `for_each_chunk` still reads without trying the tables.
    chunk_skip: u32,
    /// Pages `for_each_chunk` reads through the tables before its next
    /// report to the policy.
    chunk_renew: u32,
    /// A zero element.
    zero: T,
    /// The page after the last one `get` found in neither table (0: none).
    after_slow: u64,
    /// That page continued a sequential stream: the pages this reader
    /// sights stay cold, as a stream's reads leave them.
    streaming: bool,
    _thread: PhantomData<*const ()>,
}

impl<T: Element> PagedArray<T> {
    /// Create a file `name` of `len` elements (zeros) in the cached store.
    pub fn create(cs: &CachedStore, name: &str, len: u64, layout: LayoutKind) -> Result<Self> {
        let bytes = len.checked_mul(size_of::<T>() as u64).ok_or_else(|| {
            Error::InvalidArgument(format!("an array of {len} elements does not fit a file"))
        })?;
        // Checked before the file is made: a refused element type leaves
        // no file behind.
        Self::check_element(cs.cache().page_size())?;
        Self::from_file(cs.create(name, bytes, layout)?)
    }

    /// Open the array in file `name`.
    pub fn open(cs: &CachedStore, name: &str) -> Result<Self> {
        Self::from_file(cs.open_file(name)?)
    }

    /// Open the array in file `name` for reading only (writes fail with
    /// [`Error::ReadOnly`]).
    pub fn open_read_only(cs: &CachedStore, name: &str) -> Result<Self> {
        Self::from_file(cs.open_file_read_only(name)?)
    }

    /// Whether elements of `T` can live in frames of a cache of page size
    /// `ps`.
    fn check_element(ps: usize) -> Result<()> {
        if size_of::<T>() == 0 {
            return Err(Error::InvalidArgument(
                "a paged array needs elements of at least one byte".into(),
            ));
        }
        if !ps.is_power_of_two() {
            return Err(Error::InvalidArgument(format!(
                "a paged array needs a cache whose page size is a power of two, not {ps}"
            )));
        }
        if size_of::<T>() > MAX_ELEMENT_BYTES {
            return Err(Error::InvalidArgument(format!(
                "a paged array's elements may be at most {MAX_ELEMENT_BYTES} bytes, not {} \
                 (each is read into a value on the thread's stack; keep larger records as \
                 runs of bytes)",
                size_of::<T>()
            )));
        }
        // Frames are aligned to 4 KiB at least (to 2 MiB in a cache of 2 MiB
        // or more), and to their page size below that: elements are read in
        // place, so none may need more.
        let align = align_of::<T>();
        if align > ps.min(4096) {
            return Err(Error::InvalidArgument(format!(
                "a paged array's elements may be aligned to at most {} bytes (the frames' \
                 alignment), not {align}",
                ps.min(4096)
            )));
        }
        Ok(())
    }

    /// The array over a cached file whose length is a whole number of
    /// elements. A writable array of word elements stores into the file's
    /// frames in place, so shared page references to the file are refused
    /// from then on, and it waits for those taken before it (up to the
    /// cache's pin wait: [`Error::Busy`]; [`Error::HeldByCaller`] if this
    /// thread holds one).
    pub fn from_file(file: CachedFile) -> Result<Self> {
        let size = size_of::<T>() as u64;
        let ps = file.shared.cache.page_size();
        Self::check_element(ps)?;
        if !file.len().is_multiple_of(size) {
            return Err(Error::InvalidArgument(format!(
                "file {:?} holds {} bytes, not a whole number of {size}-byte elements",
                file.file().name(),
                file.len()
            )));
        }
        if is_word::<T>() && !file.read_only {
            // Its stores change frames in place under shared pins: no shared
            // page reference of the file may meet them.
            file.begin_word_stores()?;
        }
        Ok(PagedArray {
            len: file.len() / size,
            file,
            _t: PhantomData,
        })
    }

    /// The number of elements.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the array has no element.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The cached file underneath.
    pub fn file(&self) -> &CachedFile {
        &self.file
    }

    /// A reader for this thread.
    pub fn reader(&self) -> ArrayReader<'_, T> {
        // As many entries as the cache has frames (TriCache's default for
        // its private level), or as the array has pages if fewer: entries
        // hold no pins, so a large table costs the cache nothing.
        let cache = &self.file.shared.cache;
        let pages = (self.len * size_of::<T>() as u64).div_ceil(cache.page_size() as u64);
        let (l1_len, l2_sets) = table_lens(cache.capacity_pages() as u64, pages);
        ArrayReader {
            arr: self,
            l1: table(l1_len),
            l1_mask: l1_len - 1,
            l2: table(l2_sets * L2_WAYS),
            l2_sets,
            next: vec![0u8; l2_sets].into_boxed_slice(),
            stats: TranslationStats::default(),
            until_renew: RENEW,
            stores_until_renew: RENEW,
            len: self.len,
            shift: self.file.shared.cache.page_size().trailing_zeros(),
            buf: Vec::new(),
            chunk_skip: 0,
            chunk_renew: CHUNK_RENEW,
            // SAFETY: `T` is plain old data: all zero bytes are a value.
            zero: unsafe { std::mem::zeroed() },
            after_slow: 0,
            streaming: false,
            _thread: PhantomData,
        }
    }

    fn check(&self, start: u64, n: u64) -> Result<u64> {
        match start.checked_add(n) {
            Some(end) if end <= self.len => Ok(start * size_of::<T>() as u64),
            _ => Err(out_of_range::<T>(
                self.file.file().name(),
                start,
                n,
                self.len,
            )),
        }
    }

    /// Element `i`, copied through the cache (no translation cache; see
    /// [`ArrayReader::get`] for reads in a loop).
    pub fn get(&self, i: u64) -> Result<T> {
        // SAFETY: `T` is plain old data: all zero bytes are a value.
        let mut v = [unsafe { std::mem::zeroed::<T>() }];
        self.read_into(i, &mut v)?;
        Ok(v[0])
    }

    /// Write element `i`: a word element by an atomic store into its pinned
    /// frame (readers see the old or the new value), any other through the
    /// writer path, as [`PagedArray::write_from`].
    pub fn set(&self, i: u64, v: T) -> Result<()> {
        if !is_word::<T>() {
            return self.write_from(i, &[v]);
        }
        let off = self.check(i, 1)?;
        self.file.store_in_place(off, size_of::<T>(), |p| {
            // SAFETY: `p` is element `i`'s address in the frame pinned meanwhile, aligned (word elements never span pages).
            unsafe { store_word(p, v) }
        })
    }

    /// Copy elements `start..start + out.len()` into `out`. Copies in
    /// order are read ahead, as reads of the file are.
    pub fn read_into(&self, start: u64, out: &mut [T]) -> Result<()> {
        self.read_into_as(start, out, None)
    }

    /// [`PagedArray::read_into`]; `noted`: readahead has seen the read
    /// already (word elements only), and whether it continues a stream.
    fn read_into_as(&self, start: u64, out: &mut [T], noted: Option<bool>) -> Result<()> {
        let off = self.check(start, out.len() as u64)?;
        if is_word::<T>() {
            let f = &self.file;
            let sh = &*f.shared;
            let len = size_of_val(out) as u64;
            let stream =
                noted.unwrap_or_else(|| readahead::note_read(sh, &f.entry, f.id, off, len, 0));
            // A stream's pages stay cold, as the file's reads leave them.
            let mode = if stream { Mode::Stream } else { Mode::Keep };
            // Word elements may be stored into meanwhile: atomic loads, a
            // page at a time, each page pinned while it is copied.
            let ps = self.file.shared.cache.page_size() as u64;
            let mut done = 0usize;
            while done < out.len() {
                let pos = off + (done * size_of::<T>()) as u64;
                let n = (((ps - pos % ps) / size_of::<T>() as u64) as usize).min(out.len() - done);
                // The array's own pin, not a shared reference: the words
                // are read with atomic loads.
                let g = self.file.page_as(pos, mode)?;
                let at = (pos - g.offset()) as usize;
                check_inside(&self.file, &g, at, n * size_of::<T>())?;
                // SAFETY: the guard pins the page; the `n` elements from `at` lie in the frame, aligned.
                unsafe { copy_words(g.frame_ptr().add(at), &mut out[done..done + n]) };
                done += n;
            }
            return Ok(());
        }
        // SAFETY: `T` is plain old data: its bytes may be written freely.
        let bytes = unsafe {
            std::slice::from_raw_parts_mut(out.as_mut_ptr().cast::<u8>(), size_of_val(out))
        };
        let want = bytes.len();
        let got = self.file.read_at(off, bytes)?;
        if got < want {
            // The file was cut short under the array.
            return Err(Error::OutOfRange {
                file: self.file.file().name(),
                offset: off,
                len: want as u64,
                file_len: off + got as u64,
            });
        }
        Ok(())
    }

    /// Write `src` over elements `start..start + src.len()`.
    pub fn write_from(&self, start: u64, src: &[T]) -> Result<()> {
        let off = self.check(start, src.len() as u64)?;
        let (p, n) = (src.as_ptr().cast::<u8>(), size_of_val(src));
        // SAFETY: `T` is plain old data: its `n` bytes at `p` are initialised.
        let bytes = unsafe { std::slice::from_raw_parts(p, n) };
        self.file.write_at(off, bytes)
    }

    /// Write the array's dirty pages and make it durable.
    pub fn sync(&self) -> Result<()> {
        self.file.sync()
    }

    /// Run `f` on `threads` threads, each with its own reader and a share of
    /// the elements (consecutive chunks of at least a page); returns the
    /// first error. More than [`MAX_PAR_THREADS`] threads are refused
    /// ([`Error::InvalidArgument`]).
    pub fn par_chunks<F>(&self, threads: usize, f: F) -> Result<()>
    where
        F: Fn(&mut ArrayReader<'_, T>, Range<u64>) -> Result<()> + Sync,
    {
        if threads > MAX_PAR_THREADS {
            return Err(Error::InvalidArgument(format!(
                "par_chunks: {threads} threads asked for, more than the most ({MAX_PAR_THREADS})"
            )));
        }
        let per_page = (self.file.shared.cache.page_size() / size_of::<T>()).max(1) as u64;
        let threads = (threads.max(1) as u64).min(self.len.div_ceil(per_page).max(1));
        let chunk = (self.len.div_ceil(threads).div_ceil(per_page) * per_page).max(1);
        // No thread without elements (the chunks are whole pages).
        let threads = self.len.div_ceil(chunk).max(1);
        std::thread::scope(|s| {
            let mut hs = Vec::new();
            let mut refused = None;
            for k in 0..threads {
                let (f, lo) = (&f, (k * chunk).min(self.len));
                let hi = (lo + chunk).min(self.len);
                let run = move || f(&mut self.reader(), lo..hi);
                match crate::util::fork_locks::spawn_scoped(std::thread::Builder::new(), s, run) {
                    Ok(h) => hs.push(h),
                    Err(e) => {
                        // The threads started finish their shares; the call
                        // fails.
                        refused = Some(Error::Engine(format!(
                            "par_chunks: thread {} of {threads} could not start: {e}",
                            k + 1
                        )));
                        break;
                    }
                }
            }
            let ran = hs
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                .fold(Ok(()), Result::and);
            match refused {
                Some(e) => Err(e),
                None => ran,
            }
        })
    }
}

impl<'a, T: Element> ArrayReader<'a, T> {
    /// How this reader's reads were served so far.
    pub fn stats(&self) -> TranslationStats {
        let mut s = self.stats;
        // A get served by the direct-mapped table counts down, not up: one
        // store a read fewer.
        s.direct += u64::from(RENEW - self.until_renew);
        s
    }

    /// Element `i`. An index past the end is an error ([`Error::OutOfRange`]).
    #[inline(always)]
    pub fn get(&mut self, i: u64) -> Result<T> {
        if i >= self.len {
            return Err(self.out_of_range(i));
        }
        let off = i * size_of::<T>() as u64;
        let page = off >> self.shift;
        let at = (off & ((1 << self.shift) - 1)) as usize;
        // SAFETY: `l1` has `l1_mask + 1` entries.
        let e = unsafe { self.l1.get_unchecked(page as usize & self.l1_mask) };
        if let Some(v) = e.read(page, at, 1 << self.shift) {
            self.until_renew -= 1;
            if self.until_renew == 0 {
                self.stats.direct += u64::from(RENEW);
                self.until_renew = RENEW;
                self.renew(page);
            }
            return Ok(v);
        }
        self.get_private(i, page, at)
    }

    /// An element the direct-mapped table did not serve: the private table
    /// inline (unless the read may continue a run in order, which readahead
    /// is told of), the rest out of line.
    #[inline(always)]
    fn get_private(&mut self, i: u64, page: u64, at: usize) -> Result<T> {
        // As `get_slow`'s `follows`: 0 means no page was found there yet.
        let follows = self.after_slow != 0 && self.after_slow == page;
        if !follows && at + size_of::<T>() <= 1 << self.shift {
            let set = self.l2_set(page);
            // The way is picked without a branch: which of the two holds a
            // page read at random is a coin toss the CPU cannot predict.
            let w = set + (self.l2[set + 1].page == page) as usize;
            let e = self.l2[w];
            if let Some(v) = e.read(page, at, 1 << self.shift) {
                self.stats.private += 1;
                self.after_slow = page + 1;
                // Not a read in order: the next reports to the policy are
                // of pages read at random, which warm a page that came in
                // cold.
                self.streaming = false;
                self.l1[page as usize & self.l1_mask] = e;
                return Ok(v);
            }
        }
        self.get_slow(i, page, at)
    }

    /// Write element `i`, as [`PagedArray::set`]: a word element through this
    /// reader's translation entry of its page when it has one (a pin taken on
    /// the entry's word, the store, the release that marks the page dirty: no
    /// lookup in the shared cache).
    pub fn set(&mut self, i: u64, v: T) -> Result<()> {
        if i >= self.arr.len {
            return Err(self.out_of_range(i));
        }
        if !is_word::<T>() || self.arr.file.read_only {
            return self.arr.set(i, v);
        }
        let off = i * size_of::<T>() as u64;
        let page = off >> self.shift;
        let at = (off & ((1 << self.shift) - 1)) as usize;
        let l1 = self.l1[page as usize & self.l1_mask];
        let set = self.l2_set(page);
        let cache: &'a crate::cache::PageCache = &self.arr.file.shared.cache;
        let e = if l1.page == page {
            Some(l1)
        } else if let Some(e) = self.l2[set..set + L2_WAYS].iter().find(|e| e.page == page) {
            Some(*e)
        } else if let Some(s) = self.sight(page, false)? {
            // Not in the tables: where the shared cache has it, noted.
            let e = entry(page, &s);
            self.install(page, e);
            Some(e)
        } else {
            None
        };
        if let Some(e) = e
            && cache.pin_seen(e.state, e.epoch, e.v, e.ep)
        {
            // SAFETY: the pin keeps the page in this frame; `at` is element `i`'s offset in it, aligned.
            unsafe { store_word(e.frame.cast_mut().wrapping_add(at), v) };
            cache.release_stored(e.state, self.arr.file.id);
            // Stores tell the policy of the page's use as reads do.
            self.stores_until_renew -= 1;
            if self.stores_until_renew == 0 {
                self.stores_until_renew = RENEW;
                self.renew(page);
            }
            return Ok(());
        }
        self.arr.set(i, v)
    }

    /// Elements `idx[k]` into `out[k]`, as many [`ArrayReader::get`] calls,
    /// but in groups whose memory misses overlap: the translation entries of
    /// a group are asked for first, then its frames and slot states, then
    /// the elements are read. For random reads of indices known ahead.
    pub fn get_many(&mut self, idx: &[u64], out: &mut [T]) -> Result<()> {
        if idx.len() != out.len() {
            return Err(Error::InvalidArgument(format!(
                "get_many: {} indices for {} elements",
                idx.len(),
                out.len()
            )));
        }
        const GROUP: usize = 16;
        let ps_mask = (1u64 << self.shift) - 1;
        let group = |k: usize| &idx[(k * GROUP).min(idx.len())..((k + 1) * GROUP).min(idx.len())];
        // A pipeline of three stages, a group apart: the entries of group
        // `k + 2` asked for, then the frames' lines and the sets' epoch
        // words that group `k + 1`'s entries name, then group `k`'s
        // elements read; so each stage's lines have a group's time to come.
        let entries = |r: &Self, ids: &[u64]| {
            for &i in ids {
                let page = (i.min(r.arr.len) * size_of::<T>() as u64) >> r.shift;
                crate::cache::prefetch(&r.l1[page as usize & r.l1_mask]);
                crate::cache::prefetch(&r.l2[r.l2_set(page)]);
            }
        };
        let frames = |r: &Self, ids: &[u64]| {
            for &i in ids {
                let off = i.min(r.arr.len) * size_of::<T>() as u64;
                if let Some(e) = r.find(off >> r.shift) {
                    crate::cache::prefetch(e.frame.wrapping_add((off & ps_mask) as usize));
                    crate::cache::prefetch(e.epoch);
                }
            }
        };
        entries(self, group(0));
        entries(self, group(1));
        frames(self, group(0));
        for (k, (ids, outs)) in idx.chunks(GROUP).zip(out.chunks_mut(GROUP)).enumerate() {
            entries(self, group(k + 2));
            frames(self, group(k + 1));
            for (&i, o) in ids.iter().zip(outs.iter_mut()) {
                *o = self.get_outlined(i)?;
            }
        }
        Ok(())
    }

    /// [`ArrayReader::get`] as a call of its own (`get_many`'s loop runs
    /// faster with it out of line).
    #[inline(never)]
    fn get_outlined(&mut self, i: u64) -> Result<T> {
        self.get(i)
    }

    /// `Ok` if `range` is a range of this array's elements (start not past
    /// its end, end not past the array's).
    fn check_range(&self, range: &Range<u64>) -> Result<()> {
        if range.start > range.end || range.end > self.arr.len {
            return Err(self.out_of_range(range.end.max(range.start)));
        }
        Ok(())
    }

    #[cold]
    fn out_of_range(&self, i: u64) -> Error {
        out_of_range::<T>(self.arr.file.file().name(), i, 1, self.arr.len)
    }

    /// Tell the cache's policy the page is in use, and refresh its entry.
    #[cold]
    fn renew(&mut self, page: u64) {
        if let Ok(Some(s)) = self.sight(page, self.streaming) {
            self.l1[page as usize & self.l1_mask] = entry(page, &s);
        }
    }

    /// Where the shared cache has `page` ([`crate::cache::PageCache::sight_as`]),
    /// if the page lies wholly inside the file now. A page the file ends in,
    /// or was cut short of since the array was made, gets no entry: its
    /// elements go through the array's own calls, which check them against
    /// the file's length (an entry would let `get` and `set` reach bytes past
    /// the end; a shrink makes the entries it overtakes stale).
    #[inline]
    fn sight(
        &self,
        page: u64,
        stream: bool,
    ) -> Result<Option<Sighting<'a, crate::cache::sync::Os>>> {
        let f = &self.arr.file;
        // The part of the page the array's elements take.
        let end = ((page + 1) << self.shift).min(self.arr.len * size_of::<T>() as u64);
        let cache: &'a crate::cache::PageCache = &f.shared.cache;
        let seen = cache.sight_as(f.id, page, stream)?;
        // Asked after the sighting: a shrink stores the new length before
        // it makes the page's entries stale (evicting it, or clearing its
        // tail under the writer bit), so a sighting from after that step
        // sees the new length here.
        if end > f.len() || f.entry.check().is_err() {
            return Ok(None);
        }
        Ok(seen)
    }

    /// An element the direct-mapped table did not serve: the private table,
    /// then the shared cache, then the cache's pinning path.
    #[inline(never)]
    fn get_slow(&mut self, i: u64, page: u64, at: usize) -> Result<T> {
        if at + size_of::<T>() > 1 << self.shift {
            // The element spans two pages.
            self.stats.slow += 1;
            return self.arr.get(i);
        }
        let ps = 1 << self.shift;
        // Gets in order find each page in neither table once: the page
        // after the last one so found is noted for readahead, as a read of
        // the whole page (random gets seldom are, and pay nothing).
        let follows = self.after_slow != 0 && page == self.after_slow;
        self.after_slow = page + 1;
        let f = &self.arr.file;
        let stream =
            follows && is_word::<T>() && readahead::note_page(&f.shared, &f.entry, f.id, page, 0);
        self.streaming = stream;
        let set = self.l2_set(page);
        for w in set..set + L2_WAYS {
            let e = self.l2[w];
            if e.page != page {
                continue;
            }
            // `get_private` tried the entry already unless `follows`.
            if follows && let Some(v) = e.read(page, at, ps) {
                self.stats.private += 1;
                self.l1[page as usize & self.l1_mask] = e;
                return Ok(v);
            }
            self.l2[w] = Entry::empty();
        }
        if let Some(s) = self.sight(page, stream)? {
            let e = entry(page, &s);
            if let Some(v) = e.read(page, at, ps) {
                self.stats.shared += 1;
                self.install(page, e);
                return Ok(v);
            }
        }
        self.stats.slow += 1;
        let got = if follows && is_word::<T>() {
            // SAFETY: `T` is plain old data: all zero bytes are a value.
            let mut v = [unsafe { std::mem::zeroed::<T>() }];
            self.arr.read_into_as(i, &mut v, Some(stream))?;
            v[0]
        } else {
            self.arr.get(i)?
        };
        // The page is cached now (unless evicted already): note where.
        if let Some(s) = self.sight(page, stream)? {
            self.install(page, entry(page, &s));
        }
        Ok(got)
    }

    /// The entry of `page` in either table, if any (not yet checked).
    #[inline]
    fn find(&self, page: u64) -> Option<&Entry<'a>> {
        let l1 = &self.l1[page as usize & self.l1_mask];
        if l1.page == page {
            return Some(l1);
        }
        let set = self.l2_set(page);
        self.l2[set..set + L2_WAYS].iter().find(|e| e.page == page)
    }

    /// The first entry of page `page`'s set in the second table.
    #[inline]
    fn l2_set(&self, page: u64) -> usize {
        (page as usize & (self.l2_sets - 1)) * L2_WAYS
    }

    fn install(&mut self, page: u64, e: Entry<'a>) {
        self.l1[page as usize & self.l1_mask] = e;
        let set = page as usize & (self.l2_sets - 1);
        let w = self.next[set] as usize % L2_WAYS;
        self.next[set] = self.next[set].wrapping_add(1);
        self.l2[set * L2_WAYS + w] = e;
    }

    /// The elements `range` in order, one by one, read a page's worth at a
    /// time as [`ArrayReader::for_each_chunk`] reads them (copied; the reads
    /// count as a sequential stream for readahead). A range past the end is
    /// an error now; a read that fails later is the iterator's last item.
    pub fn iter(&mut self, range: Range<u64>) -> Result<ArrayIter<'_, 'a, T>> {
        self.check_range(&range)?;
        Ok(ArrayIter {
            reader: self,
            next: range.start,
            end: range.end,
            page: Vec::new(),
            at: 0,
            failed: false,
        })
    }

    /// Run `f` on the elements `range` in order, a page's worth at a time:
    /// `f(first index, elements)`. Word elements (which other threads may
    /// store into meanwhile) are copied out of the pinned frame with atomic
    /// loads into the reader's own buffer; others are the slice in the cached
    /// frame itself, pinned while `f` runs (no copy). The reads count as a
    /// sequential stream for readahead.
    pub fn for_each_chunk(&mut self, range: Range<u64>, f: impl FnMut(u64, &[T])) -> Result<()> {
        self.chunks(range, false, f)
    }

    /// [`ArrayReader::for_each_chunk`], for a caller that goes on reading
    /// after `range` (`goes_on`: an iterator refilling a page at a time), so
    /// that its last page's read still asks for the pages after it.
    fn chunks(
        &mut self,
        range: Range<u64>,
        goes_on: bool,
        mut f: impl FnMut(u64, &[T]),
    ) -> Result<()> {
        self.check_range(&range)?;
        let size = size_of::<T>() as u64;
        let ps = 1u64 << self.shift;
        let file: &'a CachedFile = &self.arr.file;
        let sh = &*file.shared;
        let mut i = range.start;
        let mut one = Vec::new();
        while i < range.end {
            let off = i * size;
            let page_end = (off / ps + 1) * ps;
            // Elements wholly inside this page from `i`.
            let n = ((page_end - off) / size).min(range.end - i);
            if n == 0 || !ps.is_multiple_of(size) {
                // An element that spans two pages (or a size that does not
                // divide the page): one at a time, copied.
                one.clear();
                one.push(self.arr.get(i)?);
                f(i, &one);
                i += 1;
                continue;
            }
            let stream = readahead::note_read(sh, &file.entry, file.id, off, n * size, 0);
            let page = off / ps;
            if is_word::<T>() && self.chunk_skip > 0 {
                self.chunk_skip -= 1;
            } else if is_word::<T>() {
                // A page this reader has an entry for: copied out without a
                // pin, kept if the check after the copy holds (as `get`),
                // the next pages' frames asked for through their entries.
                // An entry found stale (a scan larger than the cache evicts
                // its pages before the next pass) sends the next
                // `CHUNK_SKIP` pages straight to the pinning path.
                let e = self.find(page).copied();
                let live = e.filter(|e| e.still());
                if e.is_some() && live.is_none() {
                    self.chunk_skip = CHUNK_SKIP;
                }
                if let Some(e) = live {
                    for ahead in [page + 1, page + 2] {
                        if let Some(x) = self.find(ahead) {
                            for line in (0..512).step_by(64) {
                                crate::cache::prefetch(x.frame.wrapping_add(line));
                            }
                        }
                    }
                    let at = (off & (ps - 1)) as usize;
                    self.buf.resize(n as usize, self.zero);
                    // SAFETY: frames stay mapped for the cache's life, the `n` elements from `at` lie in this one, aligned; values read while the page changed are dropped by the check below.
                    unsafe { copy_words(e.frame.add(at), &mut self.buf[..n as usize]) };
                    if e.still() {
                        // Reads that are no stream tell the policy of the
                        // page's use now and then, as `get`'s do, every
                        // `CHUNK_RENEW`th page (a page is 512 of `get`'s
                        // reads); a stream's leave its pages as they are.
                        if !stream {
                            self.chunk_renew -= 1;
                            if self.chunk_renew == 0 {
                                self.chunk_renew = CHUNK_RENEW;
                                self.renew(page);
                            }
                        }
                        f(i, &self.buf[..n as usize]);
                        i += n;
                        continue;
                    }
                }
            }
            // The frame is page-aligned and `at` a multiple of the size, which
            // `T`'s alignment divides (and the page size, as `ps % size == 0`).
            if is_word::<T>() {
                let more = goes_on || i + n < range.end;
                let (g, at) = self.pin_chunk(off, n, stream, true, more)?;
                self.buf.resize(n as usize, self.zero);
                // SAFETY: the guard pins the page; its `n` elements from `at` lie in the frame, aligned, read through the frame's address (no borrow of bytes other threads may store into).
                unsafe { copy_words(g.frame_ptr().add(at), &mut self.buf[..n as usize]) };
                drop(g);
                f(i, &self.buf[..n as usize]);
            } else {
                // A writable array of word elements over the same file
                // stores into its frames under shared pins: no slice of
                // them may live meanwhile.
                let more = goes_on || i + n < range.end;
                let (g, at) = self.pin_chunk(off, n, stream, false, more)?;
                // After the pin: either the array's making sees it, or
                // this sees the array.
                file.entry.refs_allowed()?;
                let bytes = &g[at..at + (n * size) as usize];
                let first = bytes.as_ptr().cast::<T>();
                // SAFETY: the guard pins the page and excludes writers (non-word elements are written only under the page's exclusive hold) while the slice lives; `T` is plain old data, aligned here.
                let elems = unsafe { std::slice::from_raw_parts(first, n as usize) };
                f(i, elems);
                drop(g);
            }
            i += n;
        }
        Ok(())
    }

    /// The pinning path of a read of `n` elements from byte `off`, all in
    /// one page: the page through the shared cache (`Mode::Stream` for a
    /// stream's reads, which leave it cold), checked to hold them, and the
    /// byte of the first in its frame. Frames of consecutive pages lie
    /// anywhere in the cache's memory, where the CPU's own prefetcher cannot
    /// follow: when the read goes on past this page (`more`), the first
    /// 4 KiB of the frame two pages ahead and the set four ahead are asked
    /// for (within a frame the CPU's prefetcher follows the reads). With
    /// `install`, the page gets an entry in the tables for the next pass (if
    /// it lies wholly inside the file: see `ArrayReader::sight`).
    fn pin_chunk(
        &mut self,
        off: u64,
        n: u64,
        stream: bool,
        install: bool,
        more: bool,
    ) -> Result<(crate::cached::PageGuard<'a>, usize)> {
        let file: &'a CachedFile = &self.arr.file;
        let size = size_of::<T>() as u64;
        let ps = 1u64 << self.shift;
        let page = off / ps;
        if more {
            let cache = &file.shared.cache;
            cache.prefetch(file.id, page + 4, false);
            cache.prefetch_bytes(file.id, page + 2, 0, ps.min(4096) as usize);
        }
        let mode = if stream { Mode::Stream } else { Mode::Keep };
        let g = file.page_as(off, mode).map_err(|e| file.gone_or(e))?;
        let at = (off - g.offset()) as usize;
        check_inside(file, &g, at, (n * size) as usize)?;
        // As `sight` installs: not past the end, nor of a deleted file (a
        // delete whose discard gave up on a held page after this pin).
        if install
            && let Some(s) = g.sighting()
            && ((page + 1) * ps).min(self.arr.len * size) <= file.len()
            && file.entry.check().is_ok()
        {
            self.install(page, entry(page, &s));
        }
        Ok((g, at))
    }

    /// Run `f` on the elements `range` in order, a page's worth at a time
    /// and in place: `f(first index, run)`, where the [`Run`] reads the
    /// elements straight from the cached frame, pinned while `f` runs (no
    /// copy). A word element is read with one atomic load when `f` asks for
    /// it, so another thread's store shows in full or not at all; other
    /// elements are read under the pin, which keeps their writers out. An
    /// element that spans two pages comes alone in a run of its own, copied.
    /// The reads count as a sequential stream for readahead, as
    /// [`ArrayReader::for_each_chunk`]'s do; the frames of the next pages are
    /// asked for while `f` runs, where this reader's tables know them.
    ///
    /// This is the fastest way to read a range: with pages of 256 KiB or
    /// more a sum over it runs at the memory's speed.
    pub fn for_each_run(
        &mut self,
        range: Range<u64>,
        mut f: impl FnMut(u64, Run<'_, T>),
    ) -> Result<()> {
        self.check_range(&range)?;
        let size = size_of::<T>() as u64;
        let ps = 1u64 << self.shift;
        let file: &'a CachedFile = &self.arr.file;
        let sh = &*file.shared;
        let cache: &'a crate::cache::PageCache = &sh.cache;
        let mut i = range.start;
        while i < range.end {
            let off = i * size;
            let page_end = (off / ps + 1) * ps;
            let n = ((page_end - off) / size).min(range.end - i);
            if n == 0 || !ps.is_multiple_of(size) {
                let one = [self.arr.get(i)?];
                f(i, Run::over(&one));
                i += 1;
                continue;
            }
            // A writable array of word elements over the same file stores
            // into its frames under shared pins, which would not keep it out
            // of reads of other elements: checked after the pin, so that
            // either the array's making sees the pin or this sees the array.
            let others_allowed = || {
                if is_word::<T>() {
                    Ok(())
                } else {
                    file.entry.refs_allowed()
                }
            };
            let stream = readahead::note_read(sh, &file.entry, file.id, off, n * size, 0);
            let page = off / ps;
            let at = (off & (ps - 1)) as usize;
            // A page this reader has an entry for: pinned through it, with
            // no lookup in the shared cache (an entry is made only for a page
            // wholly inside the file).
            if let Some(e) = self.find(page).copied()
                && let Ok(hold) = file.hold_shared(page)
                && cache.pin_seen(e.state, e.epoch, e.v, e.ep)
            {
                let pin = SeenPin {
                    cache,
                    state: e.state,
                    _hold: hold,
                };
                others_allowed()?;
                // The next pages' frames, if the range goes on to them.
                for ahead in [page + 1, page + 2] {
                    if i + n == range.end {
                        break;
                    }
                    if let Some(x) = self.find(ahead) {
                        for line in (0..512).step_by(64) {
                            crate::cache::prefetch(x.frame.wrapping_add(line));
                        }
                    }
                }
                if !stream {
                    self.chunk_renew -= 1;
                    if self.chunk_renew == 0 {
                        self.chunk_renew = CHUNK_RENEW;
                        self.renew(page);
                    }
                }
                // SAFETY: the pin keeps the page in this frame until `pin` drops, after `f`; the `n` elements from `at` lie inside the page, aligned (`at` is a multiple of the size, which the alignment divides).
                f(i, unsafe { Run::new(e.frame.wrapping_add(at), n as usize) });
                drop(pin);
                i += n;
                continue;
            }
            let (g, at) = self.pin_chunk(off, n, stream, true, i + n < range.end)?;
            others_allowed()?;
            // SAFETY: the guard pins the page until it drops, after `f`; the `n` elements from `at` lie in the frame (checked above), aligned.
            f(i, unsafe {
                Run::new(g.frame_ptr().add(at).cast_const(), n as usize)
            });
            drop(g);
            i += n;
        }
        Ok(())
    }
}

/// A pin taken through a translation entry, given back when dropped (also
/// when the callback that reads under it panics), with this thread's hold on
/// the page (so that a write of it from the callback is refused, not left to
/// wait for the pin).
struct SeenPin<'a> {
    cache: &'a crate::cache::PageCache,
    state: &'a AtomicU32,
    _hold: crate::cached::SharedHold,
}

impl Drop for SeenPin<'_> {
    fn drop(&mut self) {
        self.cache.release_seen(self.state);
    }
}

/// Consecutive elements of an array in a pinned cached frame, read in place
/// (see [`ArrayReader::for_each_run`]). Each read of a word element is one
/// atomic load, so a run is a view of cells that other threads may store
/// into, never a `&[T]`: copy it out with [`Run::copy_to`] for a slice.
pub struct Run<'r, T: Element> {
    first: *const u8,
    len: usize,
    _frame: PhantomData<&'r [T]>,
}

impl<'r, T: Element> Run<'r, T> {
    /// # Safety
    /// The `len` elements from `first` are aligned and stay in memory that
    /// only atomic stores (word elements) or nobody (other elements) change
    /// for `'r`.
    unsafe fn new(first: *const u8, len: usize) -> Run<'r, T> {
        Run {
            first,
            len,
            _frame: PhantomData,
        }
    }

    /// A run over elements of the caller's own.
    fn over(xs: &'r [T]) -> Run<'r, T> {
        // SAFETY: a shared borrow of `xs` for `'r`: nobody changes it.
        unsafe { Run::new(xs.as_ptr().cast(), xs.len()) }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the run has no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Element `k` of the run. Panics if `k >= self.len()`, as a slice's
    /// index does.
    #[inline]
    pub fn get(&self, k: usize) -> T {
        assert!(k < self.len, "index {k} out of a run of {}", self.len);
        // SAFETY: element `k` of the run (`new`'s contract).
        unsafe { read_elem(self.first.add(k * size_of::<T>())) }
    }

    /// The elements in order.
    pub fn iter(&self) -> RunIter<'r, T> {
        RunIter {
            next: self.first,
            left: self.len,
            _frame: PhantomData,
        }
    }

    /// The elements into `out`. Panics unless `out.len() == self.len()`, as
    /// [`slice::copy_from_slice`] does.
    pub fn copy_to(&self, out: &mut [T]) {
        assert_eq!(out.len(), self.len, "copy_to: lengths differ");
        for (k, o) in out.iter_mut().enumerate() {
            // SAFETY: element `k` of the run.
            *o = unsafe { read_elem(self.first.add(k * size_of::<T>())) };
        }
    }
}

impl<'r, T: Element> IntoIterator for Run<'r, T> {
    type Item = T;
    type IntoIter = RunIter<'r, T>;
    fn into_iter(self) -> RunIter<'r, T> {
        self.iter()
    }
}

/// The elements of a [`Run`] in order.
pub struct RunIter<'r, T: Element> {
    next: *const u8,
    left: usize,
    _frame: PhantomData<&'r [T]>,
}

impl<T: Element> Iterator for RunIter<'_, T> {
    type Item = T;

    #[inline]
    fn next(&mut self) -> Option<T> {
        if self.left == 0 {
            return None;
        }
        // SAFETY: one of the run's elements (`Run::new`'s contract).
        let v = unsafe { read_elem(self.next) };
        self.next = self.next.wrapping_add(size_of::<T>());
        self.left -= 1;
        Some(v)
    }

    #[inline]
    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }

    /// A counted loop, which the compiler unrolls.
    #[inline]
    fn fold<A, F: FnMut(A, T) -> A>(self, init: A, mut f: F) -> A {
        let mut acc = init;
        for k in 0..self.left {
            // SAFETY: element `k` from the next one, inside the run.
            acc = f(acc, unsafe {
                read_elem(self.next.wrapping_add(k * size_of::<T>()))
            });
        }
        acc
    }
}

impl<T: Element> ExactSizeIterator for RunIter<'_, T> {}

/// The element at `p`: one atomic load for a word element, a copy of the
/// bytes otherwise.
///
/// # Safety
/// `p` is aligned to `T` and points at an element of a run (`Run::new`).
#[inline(always)]
unsafe fn read_elem<T: Element>(p: *const u8) -> T {
    if is_word::<T>() {
        // SAFETY: the caller's contract; word elements change only by atomic stores.
        unsafe { load_word::<T>(p) }
    } else {
        // SAFETY: the caller's contract; nobody changes the element meanwhile.
        unsafe { p.cast::<T>().read_unaligned() }
    }
}

/// The elements of a range in order, one by one (see [`ArrayReader::iter`]).
pub struct ArrayIter<'r, 'a, T: Element> {
    reader: &'r mut ArrayReader<'a, T>,
    next: u64,
    end: u64,
    /// The rest of the page being read.
    page: Vec<T>,
    at: usize,
    failed: bool,
}

impl<T: Element> Iterator for ArrayIter<'_, '_, T> {
    type Item = Result<T>;

    fn next(&mut self) -> Option<Result<T>> {
        if self.at == self.page.len() {
            if self.next >= self.end || self.failed {
                return None;
            }
            // The next page's worth (the rest of this page from `next`).
            let ps = 1u64 << self.reader.shift;
            let size = size_of::<T>() as u64;
            let stop = ((self.next * size / ps + 1) * ps).div_ceil(size);
            let stop = stop.clamp(self.next + 1, self.end);
            self.page.clear();
            self.at = 0;
            let page = &mut self.page;
            let goes_on = stop < self.end;
            if let Err(e) = self
                .reader
                .chunks(self.next..stop, goes_on, |_, xs| page.extend_from_slice(xs))
            {
                // The error is the last item: no element read before it in
                // this range comes after it.
                self.failed = true;
                self.page.clear();
                self.at = 0;
                return Some(Err(e));
            }
            self.next = stop;
        }
        let v = self.page[self.at];
        self.at += 1;
        Some(Ok(v))
    }
}

/// A table of `n` empty entries, in huge pages where the kernel gives them:
/// a large table's probes at random then seldom miss the TLB.
/// The entries of a reader's direct-mapped table and the sets of its second
/// table, for a cache of `cache_pages` pages and an array of `pages`.
/// The error for elements `start..start + n` of an array of `len` elements
/// of `T`, in bytes as the error's message says (the file's).
#[cold]
fn out_of_range<T>(file: String, start: u64, n: u64, len: u64) -> Error {
    let size = size_of::<T>() as u64;
    Error::OutOfRange {
        file,
        offset: start.saturating_mul(size),
        len: n.saturating_mul(size),
        file_len: len.saturating_mul(size),
    }
}

fn table_lens(cache_pages: u64, pages: u64) -> (usize, usize) {
    let want = cache_pages.min(pages).clamp(1, L1_MAX as u64) as usize;
    let l1_len = want.next_power_of_two().clamp(L1_MIN, L1_MAX);
    (l1_len, (l1_len / L2_WAYS).min(L2_MAX_SETS))
}

/// Bytes of the translation tables of one reader ([`PagedArray::reader`])
/// of an array of `pages` pages over a cache of `cache_pages` pages: memory
/// of the reader's thread, beside the cache's.
pub fn reader_table_bytes(cache_pages: u64, pages: u64) -> u64 {
    let (l1_len, l2_sets) = table_lens(cache_pages, pages);
    let entries = (l1_len + l2_sets * L2_WAYS) as u64;
    entries * size_of::<Entry<'static>>() as u64 + l2_sets as u64
}

fn table<'a>(n: usize) -> Box<[Entry<'a>]> {
    use crate::util::HUGE_PAGE as HUGE;
    let mut v: Vec<Entry<'a>> = Vec::with_capacity(n);
    let start = v.as_ptr() as usize;
    let (lo, hi) = (
        start.next_multiple_of(HUGE),
        (start + n * size_of::<Entry<'a>>()) / HUGE * HUGE,
    );
    if hi > lo {
        // SAFETY: advice on memory this vector owns and has not touched yet; failure only means small pages.
        unsafe { libc::madvise(lo as *mut libc::c_void, hi - lo, libc::MADV_HUGEPAGE) };
    }
    v.resize(n, Entry::empty());
    v.into_boxed_slice()
}

/// A translation entry for `page` from where it was seen.
/// `Ok` if the `len` bytes from `at` in the page of guard `g` lie inside
/// the file: fewer show if the file was cut short under the array.
fn check_inside(
    file: &CachedFile,
    g: &crate::cached::PageGuard<'_>,
    at: usize,
    len: usize,
) -> Result<()> {
    if at + len <= g.span() {
        return Ok(());
    }
    Err(Error::OutOfRange {
        file: file.file().name(),
        offset: g.offset() + at as u64,
        len: len as u64,
        file_len: g.offset() + g.span() as u64,
    })
}

fn entry<'a>(page: u64, s: &Sighting<'a, crate::cache::sync::Os>) -> Entry<'a> {
    Entry {
        page,
        frame: s.frame,
        state: s.state,
        v: s.v,
        epoch: s.epoch,
        ep: s.ep,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::CacheOptions;

    /// A read the second table serves is not a read in order: it ends the
    /// reader's stream, so that the reader's next reports to the policy warm
    /// the pages they name (a stream's reports leave cold pages cold).
    #[test]
    fn a_read_from_the_second_table_ends_the_stream() {
        let (dir, store) = crate::storage::uring_store_for_tests("array-stream");
        // 512 frames: a direct-mapped table of 512 entries, a 2-way table of
        // 256 sets; pages 100 and 612 share an entry of the first and a set
        // of the second.
        let cs = CachedStore::with_flusher(
            store,
            CacheOptions {
                size: 512 * 4096,
                assoc: 4,
                ..CacheOptions::default()
            },
            None,
        )
        .unwrap();
        let a = PagedArray::<u64>::create(&cs, "a", 2048 * 512, LayoutKind::Stripe).unwrap();
        let mut r = a.reader();
        assert_eq!(r.get(612 * 512).unwrap(), 0);
        for page in 0..=100u64 {
            assert_eq!(r.get(page * 512 + 3).unwrap(), 0);
        }
        assert!(r.streaming, "a scan of 101 pages in order is a stream");
        let before = r.stats();
        assert_eq!(r.get(612 * 512 + 1).unwrap(), 0);
        assert_eq!(r.stats().private, before.private + 1);
        assert!(
            !r.streaming,
            "a read the second table served kept the stream"
        );
        drop(r);
        drop(a);
        drop(cs);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
