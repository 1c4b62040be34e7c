//! Asynchronous batches on cached files.
//!
//! A [`CachedQueue`] belongs to one thread, like [`Queue`], and keeps up to
//! `depth` device operations in flight. Each [`CachedRequest`] reads or writes
//! any range of a [`CachedFile`] through the page cache:
//!
//! * a page that is cached is copied at once (an optimistic, pin-free copy for
//!   reads), so a request made only of hits completes inside `submit`;
//! * a missing page is claimed through the cache's fill protocol and read
//!   straight into its frame (O_DIRECT, no bounce buffer); missing pages that
//!   follow one another in the file join one read of up to 512 KiB, and a
//!   run of eight pages or more lands in a slot of the store's staging area
//!   (huge pages, which the device fills faster than scattered frames) and is
//!   copied to its frames when it is back; the missing pages of every request
//!   submitted together travel in one batch per device;
//! * a page another requester is filling is not waited for: the request
//!   parks the page and retries it after later completions (the queue may
//!   itself own that fill, so blocking could deadlock);
//! * a whole-page write of a missing page needs no read; a partial one reads
//!   the page first;
//! * when a set has no clean page, the requester writes the dirty victim
//!   back through this queue, with the victim's dirty neighbours in the file
//!   in the same write, and retries the page when that write is done (the
//!   flusher keeps this rare); the other dirty pages of the victim's 256 KiB
//!   region are written at the same time, and the request completes only
//!   once those writes are done too (so a request that completed holds no
//!   page).
//!
//! Requests in flight at the same time complete in no fixed order, as on a
//! device queue: two writes of overlapping bytes submitted before either
//! completes leave the bytes of one or the other (or of each in different
//! pages). To order them, wait for the first before submitting the second.
//!
//! Pages a queue has claimed (fills, victim writes) stay claimed until the
//! queue's thread calls `submit`, `wait`, `poll` or `drain` again: drain the
//! queue before the same thread uses the synchronous `read_at`, `write_at` or
//! `sync` of the same file, which would wait for those pages.
//!
//! A request reports once, on this thread, after every page of it is done,
//! with the first error if any: through its callback, or, for a request made
//! with [`CachedRequest::tagged`], as a (tag, completion) pair that
//! [`CachedQueue::take_completions`] hands over. Tags cost no allocation, and
//! a one-page read that hits borrows its file instead of cloning it (a shared
//! reference count would bounce between threads on every request).

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::cache::{
    Fill, FillMut, Got, Lookup, LookupMut, Mode, PageCache, PageRef, RawPin, WriteBack,
};
use crate::cached::readahead;
use crate::cached::shared::{Entry, Shared};
use crate::cached::staging::{MIN_PAGES, Slot, run_pages};
use crate::cached::writeback::{Owed, dirty_in_region, with_neighbours};
use crate::cached::{CachedFile, CachedStore, Guarded, Hold, PageGuard};
use crate::error::{Error, Result};
use crate::storage::file::OpKind;
use crate::storage::file::{DIRECT_ALIGN, File, Mem};
use crate::storage::queue::{Bell, Queue};
use crate::util::panics;
use crate::util::slab::Slab;
use crate::util::stream::{copy_streaming, fence};

/// The outcome of a [`CachedRequest`].
#[derive(Debug)]
pub struct CachedCompletion {
    /// Read or write.
    pub kind: OpKind,
    /// File offset of the request.
    pub offset: u64,
    /// The request's buffer: for a read, filled on success.
    pub buf: Vec<u8>,
    /// Whether every page was found in the cache (no device read).
    pub hit: bool,
    /// `Ok`, or the first error of any page (naming file, offset and device).
    pub result: Result<()>,
}

type Callback = Box<dyn FnOnce(CachedCompletion)>;

/// How a finished request is reported.
enum Notify {
    /// Run this closure.
    Callback(Callback),
    /// Keep the completion under this tag for [`CachedQueue::take_completions`].
    Tag(u64),
}

/// A read or write of a whole buffer at any offset of a cached file. It
/// borrows the file: a one-page read that hits costs no reference count;
/// any other request holds the file's entry (one reference count of that
/// file, none of the store's) while it is in the queue.
pub struct CachedRequest<'f> {
    kind: OpKind,
    file: &'f CachedFile,
    offset: u64,
    buf: Vec<u8>,
    notify: Notify,
    want: Want,
    /// Readahead has seen this read already: as a stream's (`Some(true)`).
    noted: Option<bool>,
}

/// What a request hands back.
enum Want {
    /// Its buffer (read into, or written from).
    Bytes,
    /// A page guard for this thread ([`CachedRequest::page`]).
    Guard,
    /// The page's pin, for another thread (the futures' worker).
    Pin,
}

impl<'f> CachedRequest<'f> {
    /// Read `buf.len()` bytes at `offset` into `buf`.
    pub fn read(
        file: &'f CachedFile,
        offset: u64,
        buf: Vec<u8>,
        callback: impl FnOnce(CachedCompletion) + 'static,
    ) -> CachedRequest<'f> {
        let notify = Notify::Callback(Box::new(callback));
        CachedRequest::new(OpKind::Read, file, offset, buf, notify)
    }

    /// Write all of `buf` at `offset`.
    pub fn write(
        file: &'f CachedFile,
        offset: u64,
        buf: Vec<u8>,
        callback: impl FnOnce(CachedCompletion) + 'static,
    ) -> CachedRequest<'f> {
        let notify = Notify::Callback(Box::new(callback));
        CachedRequest::new(OpKind::Write, file, offset, buf, notify)
    }

    /// A reference to the page holding byte `offset`: when the request is
    /// done, [`CachedQueue::take_pages`] hands over `(tag, guard)`, a
    /// [`PageGuard`] as [`CachedFile::page`] returns (no copy: a miss reads
    /// the device straight into the cached frame the guard shows). The guard
    /// counts against this thread's [`MAX_GUARDS_PER_THREAD`] from `submit`
    /// on.
    ///
    /// [`MAX_GUARDS_PER_THREAD`]: crate::MAX_GUARDS_PER_THREAD
    pub fn page(file: &'f CachedFile, offset: u64, tag: u64) -> CachedRequest<'f> {
        let mut r = CachedRequest::new(OpKind::Read, file, offset, Vec::new(), Notify::Tag(tag));
        r.want = Want::Guard;
        r
    }

    /// A page request whose completion is the page's raw pin (see
    /// [`CachedQueue::take_pins`]), for a thread other than the queue's.
    pub(crate) fn pin(file: &'f CachedFile, offset: u64, tag: u64) -> CachedRequest<'f> {
        let mut r = CachedRequest::new(OpKind::Read, file, offset, Vec::new(), Notify::Tag(tag));
        r.want = Want::Pin;
        r
    }

    /// Readahead has seen this read already (`stream`: as part of a stream).
    pub(crate) fn noted(mut self, stream: bool) -> CachedRequest<'f> {
        self.noted = Some(stream);
        self
    }

    /// A read or write that reports through [`CachedQueue::take_completions`]
    /// under `tag` instead of a callback: no allocation per request, for
    /// callers that keep many small requests in flight.
    pub fn tagged(
        kind: OpKind,
        file: &'f CachedFile,
        offset: u64,
        buf: Vec<u8>,
        tag: u64,
    ) -> CachedRequest<'f> {
        CachedRequest::new(kind, file, offset, buf, Notify::Tag(tag))
    }

    fn new(
        kind: OpKind,
        file: &'f CachedFile,
        offset: u64,
        buf: Vec<u8>,
        notify: Notify,
    ) -> CachedRequest<'f> {
        CachedRequest {
            kind,
            file,
            offset,
            buf,
            notify,
            want: Want::Bytes,
            noted: None,
        }
    }
}

/// A request that waits for the device: it holds its file's entry.
struct Req {
    kind: OpKind,
    file: ReqFile,
    offset: u64,
    buf: Vec<u8>,
    notify: Notify,
}

/// What a live request keeps of its file: the entry (which keeps the file
/// open) and its cache id. Not a whole [`CachedFile`], whose handle on the
/// store's shared state would make every request of every thread add to
/// one reference count (the queue borrows that state for its life).
struct ReqFile {
    entry: Arc<Entry>,
    id: u32,
}

impl ReqFile {
    fn of(f: &CachedFile) -> ReqFile {
        ReqFile {
            entry: f.entry.clone(),
            id: f.id,
        }
    }

    /// The file's length, as [`CachedFile::len`] says it.
    fn len(&self) -> u64 {
        CachedFile::len_of(&self.entry)
    }
}

/// What a page request keeps while it is live.
enum PageWant {
    /// This thread's hold, taken at submit, for the guard.
    Guard(Hold),
    /// A raw pin for another thread.
    Pin,
}

/// What the completion of a request needs of it.
struct Finished {
    kind: OpKind,
    offset: u64,
    buf: Vec<u8>,
    notify: Notify,
    want: Want,
}

impl From<CachedRequest<'_>> for Finished {
    fn from(r: CachedRequest<'_>) -> Finished {
        Finished {
            kind: r.kind,
            offset: r.offset,
            buf: r.buf,
            notify: r.notify,
            want: r.want,
        }
    }
}

impl From<Req> for Finished {
    fn from(r: Req) -> Finished {
        Finished {
            kind: r.kind,
            offset: r.offset,
            buf: r.buf,
            notify: r.notify,
            want: Want::Bytes,
        }
    }
}

/// A request with pages still to do.
struct Live<'a> {
    req: Req,
    /// For a page request: what it hands over, and the page once pinned.
    page: Option<(PageWant, Option<PageRef<'a>>)>,
    /// It continues a sequential stream (see `readahead`).
    stream: bool,
    /// Pages not yet done.
    left: usize,
    /// The next page to start, and the page after the request's last: a
    /// request of more pages than [`CachedQueue::pages_at_once`] starts the
    /// rest as its first ones finish.
    next: u64,
    end: u64,
    hit: bool,
    err: Option<Error>,
}

/// A fill or victim write this queue owns, waiting for its device operation.
enum Job<'a> {
    Read(Fill<'a>),
    /// A partial write's page, read first: dirty and held for writing until
    /// this queue reaps the read (counted as owed, so that a sync on this
    /// thread does not wait for it for ever).
    Write(FillMut<'a>, Owed<'a>),
    /// The dirty victim a page of the request must wait for: once written,
    /// the page is looked up again.
    /// It is written with its dirty neighbours in the file, first page first.
    Victim(Owed<'a>),
    /// Dirty pages of the victim's region, written along with it; the request
    /// that met the victim completes once they are written.
    Near(Owed<'a>),
}

impl Job<'_> {
    /// A read into a frame is counted for the thread while it is in flight
    /// (`Fill::note_queued`): a blocking lookup of this thread that meets
    /// its page fails rather than wait for it.
    fn note_queued(&self, held: bool) {
        match self {
            Job::Read(f) => f.note_queued(held),
            Job::Write(f, _) => f.note_queued(held),
            Job::Victim(_) | Job::Near(_) => {}
        }
    }

    /// See [`Fill::prefetch_state`].
    fn prefetch_state(&self) {
        match self {
            Job::Read(f) => f.prefetch_state(),
            Job::Write(f, _) => f.prefetch_state(),
            Job::Victim(_) | Job::Near(_) => {}
        }
    }

    fn frame(&mut self) -> &mut [u8] {
        match self {
            Job::Read(f) => f.frame_mut(),
            Job::Write(f, _) => f.frame_mut(),
            Job::Victim(_) | Job::Near(_) => &mut [],
        }
    }
}

struct Waiting<'a> {
    job: Job<'a>,
    req: usize,
    page: u64,
}

/// Settle the pages of a finished write-back: clean on success; on failure
/// they stay dirty and the error is kept for the file's next `sync`. Every
/// guard is finished, whatever the first one returns.
fn written(sh: &Shared, pages: Vec<WriteBack<'_>>, epoch: u64, r: Result<()>) -> Result<()> {
    if let Err(Error::OutOfRange { .. }) = &r {
        // The file shrank after the write was prepared: the pages stay dirty
        // (their next write-back writes what is still inside the file), and
        // the request that met the victim looks its page up again.
        for w in pages {
            let _ = w.finish(r.clone());
        }
        return Ok(());
    }
    if let Some(w) = pages.first() {
        match &r {
            Err(e) => sh.remember_failure(w.file(), e.clone()),
            Ok(()) => {
                let id = w.file();
                if !sh.written_at(id, epoch, pages.iter().map(|w| w.page())) {
                    // Written before an fsync of the file that failed since:
                    // the pages stay dirty, to be written again.
                    drop(pages);
                    return Ok(());
                }
            }
        }
    }
    let all = pages.into_iter().map(|w| w.finish(r.clone()));
    all.fold(Ok(()), Result::and)
}

/// Most pages a requester's write of a dirty victim covers (the victim and
/// its dirty neighbours in the file).
const VICTIM_RUN: usize = 32;

/// Consecutive missing pages of one file, read together.
struct MissRun {
    fid: u32,
    /// The live request of the run's first page, whose entry keeps the file
    /// open until the run's read is back.
    req: usize,
    offset: u64,
    /// The page after the last one in the run.
    next: u64,
    len: usize,
    /// Their fills' slots, in file order.
    slots: Slots,
}

/// The fills one device operation serves: one inline, more in a vector
/// (taken from a pool, so that a run of one page allocates nothing).
struct Slots {
    first: usize,
    more: Vec<usize>,
    /// The staging slot a read of a run went into, and the run's length.
    staged: Option<(Slot, usize)>,
}

/// Whether a page write could be done at once.
enum Now<'c> {
    /// Done, with this outcome.
    Done(Result<()>),
    /// Not a hit, nor a missing page wholly overwritten: go on with the lookup.
    Later(Option<LookupMut<'c>>),
}

/// Copy `src` to `in_page` of a page whose lookup found it cached, or missing
/// and wholly overwritten (no need for the old bytes); else hand the lookup
/// back.
fn write_now<'c>(found: Option<LookupMut<'c>>, in_page: usize, src: &[u8], ps: usize) -> Now<'c> {
    match found {
        Some(LookupMut::Hit(mut g)) => {
            g[in_page..in_page + src.len()].copy_from_slice(src);
            Now::Done(Ok(()))
        }
        Some(LookupMut::Miss(f)) if src.len() == ps => {
            Now::Done(f.finish(Ok(())).map(|mut g| g.copy_from_slice(src)))
        }
        other => Now::Later(other),
    }
}

/// Copy the `len` bytes of a run's read from staging slot `slot` to the
/// frames of its fills, `s` (slots of `fills`, in file order).
fn copy_out(fills: &mut Slab<Waiting<'_>>, s: &Slots, slot: &Slot, len: usize, ps: usize) {
    let all = std::iter::once(&s.first).chain(s.more.iter());
    for (&k, src) in all.zip(slot.pages(len, ps)) {
        let w = fills.get_mut(k).expect("a fill in flight");
        copy_streaming(&mut w.job.frame()[..src.len()], src);
    }
    // The pages are published after this returns, after the streamed stores.
    fence();
}

/// The longest a queue's request waits for a page whose read or write-back
/// is in flight (unless the pin wait is longer): then it fails `Busy`.
const IO_WAIT: Duration = Duration::from_secs(30);

/// The first and the longest nap of a queue waiting for parked pages that no
/// wait on a page covers.
const NAP_MIN: Duration = Duration::from_micros(20);
const NAP_MAX: Duration = Duration::from_millis(1);

/// What became of one page of a request.
enum Step {
    Done,
    /// A device read is in flight for it.
    Pending,
    /// Another requester fills or writes it: try again later.
    Busy,
}

/// A per-thread queue of asynchronous requests on cached files.
///
/// Requests whose pages are all cached complete inside `submit`; the others
/// read their missing pages from the devices, and finish (their callback
/// runs, or their completion is kept under its tag) on this thread, in
/// [`CachedQueue::poll`], [`CachedQueue::wait`] or [`CachedQueue::drain`].
/// Poll or drain it before a synchronous call on a page it reads: only this
/// thread finishes those reads. Such a call waits for a page being read in
/// at most the cache's pin wait while a queue of the thread has reads in
/// flight, then fails with [`crate::Error::HeldByCaller`]. The other way
/// round, a request that would wait for a page guard of this thread (a
/// write of a page it holds, a read of a page it holds mutably) completes at
/// once with [`crate::Error::HeldByCaller`].
///
/// ```
/// use setcache::{
///     CacheOptions, CachedRequest, CachedStore, LayoutKind, OpKind, Store, StoreOptions,
/// };
///
/// let dir = std::env::temp_dir().join(format!("setcache-doc-cachedqueue-{}", std::process::id()));
/// std::fs::create_dir_all(&dir)?;
/// let store = Store::open(&[&dir], StoreOptions::default())?;
/// let cs = CachedStore::new(store, CacheOptions { size: 16 << 20, ..CacheOptions::default() })?;
/// let f = cs.create("log", 1 << 20, LayoutKind::Stripe)?;
/// let mut q = cs.queue(32); // this thread's queue, 32 device operations in flight
/// let writes: Vec<CachedRequest> = (0..8u8)
///     .map(|i| CachedRequest::write(&f, i as u64 * 100, vec![i; 100], |c| c.result.unwrap()))
///     .collect();
/// q.submit(writes);
/// q.drain(); // every callback has run
/// // Tagged requests: no callback, no allocation per request.
/// let mut reads = vec![CachedRequest::tagged(OpKind::Read, &f, 300, vec![0; 100], 7)];
/// q.submit_from(&mut reads);
/// q.wait(1);
/// let mut done = Vec::new();
/// q.take_completions(&mut done);
/// let (tag, c) = done.pop().expect("one completion");
/// assert_eq!((tag, c.hit), (7, true)); // the writes left the page cached
/// assert_eq!(c.buf, [3; 100]);
/// drop(q);
/// f.sync()?;
/// drop((f, cs));
/// std::fs::remove_dir_all(&dir)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct CachedQueue<'a> {
    sh: &'a Shared,
    shared_arc: Arc<Shared>,
    q: Queue,
    live: Slab<Live<'a>>,
    fills: Slab<Waiting<'a>>,
    /// Device operations in flight: the fills each serves (its tag is the key).
    ops: Slab<Slots>,
    /// Emptied `Slots::more` vectors for reuse.
    spare: Vec<Vec<usize>>,
    /// Frames of the run being gathered, in file order.
    frames: Vec<*mut u8>,
    /// Frames of a victim write being sent.
    victim_frames: Vec<*mut u8>,
    /// Device operations that finished: (tag, result).
    tagged: Vec<(usize, Result<()>)>,
    /// Fills whose device operation finished: (slot, result).
    finished: Vec<(usize, Result<()>)>,
    /// Pages that were busy: (request, page).
    /// Pages of live requests that were busy: (request, page, when it was
    /// first found busy), retried as other requests finish; each gives up
    /// after the cache's pin wait.
    parked: Vec<(usize, u64, Instant)>,
    /// Parked pages being retried now, last first: kept here, not in a local,
    /// so that a callback that panics (and is caught by the queue's user)
    /// leaves the rest to be retried, never forgotten.
    retrying: Vec<(usize, u64, Instant)>,
    /// Parked pages given up on and being failed now, last first (kept here
    /// for the same reason as `retrying`): (request, page, first found busy).
    giving_up: Vec<(usize, u64, Instant)>,
    /// Parked pages whose wait started again because their read or
    /// write-back was in flight: when they were first found busy.
    io_waits: Vec<((usize, u64), Instant)>,
    /// Missing pages being gathered into one read.
    run: Option<MissRun>,
    /// Live requests that may start another page (one entry per page done),
    /// and whether they are being started now.
    to_start: Vec<usize>,
    starting: bool,
    /// Requests submitted and not yet completed.
    outstanding: usize,
    /// Requests finished since the last `wait` started counting.
    ran: usize,
    /// Finished tagged requests not yet taken.
    done: Vec<(u64, CachedCompletion)>,
    /// Finished page requests not yet taken.
    guards: Vec<(u64, Result<PageGuard<'a>>)>,
    /// Finished pin requests not yet taken.
    pins: Vec<(u64, Result<RawPin>)>,
    /// Pages this queue has sent device reads for (fills started).
    loads: u64,
    /// Most pages of the last batch submitted missed.
    missing: bool,
    /// Device operations not yet passed on after each request's start.
    #[cfg(test)]
    unsent_after_start: Vec<usize>,
    /// Times a wait looked again at parked pages after a nap or a wait on
    /// one of them.
    #[cfg(test)]
    parked_looks: usize,
}

impl CachedStore {
    /// A queue for asynchronous requests on this store's cached files, keeping
    /// up to `depth` device operations in flight (taken into
    /// `1..=`[`MAX_QUEUE_DEPTH`](crate::MAX_QUEUE_DEPTH), as
    /// [`Queue::new`](crate::Queue::new) takes it). It belongs to the calling
    /// thread.
    pub fn queue(&self, depth: usize) -> CachedQueue<'_> {
        CachedQueue::on(&self.inner, depth)
    }

    /// [`CachedStore::queue`], refused with an error of `ENOMEM` instead of
    /// ending the process when the memory its tables take for `depth`
    /// requests (less than 1 KiB a slot) cannot be had now: the process's
    /// address space at its limit (`ulimit -v`), say. An allocation failure
    /// would abort the process, not return; this asks for that much at once
    /// first, and gives it back.
    pub fn try_queue(&self, depth: usize) -> Result<CachedQueue<'_>> {
        let depth = depth.clamp(1, crate::MAX_QUEUE_DEPTH);
        let needed = depth * QUEUE_BYTES_PER_SLOT;
        let mut probe: Vec<u8> = Vec::new();
        if probe.try_reserve_exact(needed).is_err() {
            return Err(Error::os_call(
                format!("cannot allocate the {needed} bytes of a request queue of depth {depth}"),
                std::io::Error::from_raw_os_error(libc::ENOMEM),
            ));
        }
        drop(probe);
        Ok(self.queue(depth))
    }
}

/// More than the bytes a request queue's tables take per slot of its depth,
/// up front and at its fullest (its slots, joiners, free lists, completions
/// and its ring's entries): what [`CachedStore::try_queue`] makes sure of.
const QUEUE_BYTES_PER_SLOT: usize = 1024;

impl<'a> CachedQueue<'a> {
    /// A queue on the cached store whose shared state is `sh`.
    pub(crate) fn on(sh: &'a Arc<Shared>, depth: usize) -> CachedQueue<'a> {
        let mut q = Queue::new(depth);
        // The cache outlives the queue: the queue borrows its shared state.
        // SAFETY: the frames stay mapped while the cache lives, and it gives them back to the kernel only through the chunk table.
        unsafe { q.register_frames(sh.cache.frame_chunks()) };
        CachedQueue {
            sh,
            shared_arc: sh.clone(),
            q,
            live: Slab::new(),
            fills: Slab::new(),
            ops: Slab::new(),
            spare: Vec::new(),
            frames: Vec::new(),
            victim_frames: Vec::new(),
            tagged: Vec::new(),
            finished: Vec::new(),
            parked: Vec::new(),
            retrying: Vec::new(),
            giving_up: Vec::new(),
            io_waits: Vec::new(),
            run: None,
            to_start: Vec::new(),
            starting: false,
            outstanding: 0,
            ran: 0,
            done: Vec::new(),
            guards: Vec::new(),
            pins: Vec::new(),
            loads: 0,
            missing: false,
            #[cfg(test)]
            unsent_after_start: Vec::new(),
            #[cfg(test)]
            parked_looks: 0,
        }
    }

    /// Let `bell` end [`CachedQueue::wait`] early (see `Bell`).
    pub(crate) fn set_bell(&mut self, bell: Arc<Bell>) {
        self.q.set_bell(bell);
    }

    /// Whether a page of a request waits for another's fill, write-back or
    /// pins (parked, looked up again as requests finish).
    pub(crate) fn has_parked(&self) -> bool {
        !self.parked.is_empty()
    }

    /// Requests submitted and not yet finished (callback run or completion
    /// queued for `take_completions`).
    pub fn outstanding(&self) -> usize {
        self.outstanding
    }

    /// Start a batch of requests. Requests made only of cached pages complete
    /// (their callbacks run) before this returns; the others' device reads are
    /// sent, one batch per device, before it returns. A request that is out of
    /// range, or a write to a read-only file, completes at once with its error.
    /// A callback that panics here does not stop the batch: the requests after
    /// it are started, then the panic comes out of `submit`; the queue stays
    /// usable (so it does out of `wait`, `poll` and `drain`, and a dropped
    /// queue finishes every request before the panic goes on).
    pub fn submit(&mut self, mut reqs: Vec<CachedRequest<'_>>) {
        self.submit_from(&mut reqs);
    }

    /// As [`CachedQueue::submit`], taking the requests out of `reqs` (left
    /// empty, its capacity kept for the caller's next batch).
    pub fn submit_from(&mut self, reqs: &mut Vec<CachedRequest<'_>>) {
        // Two passes of hints before the lookups: the sets' metadata of every
        // page, then the first lines of the frames of those cached, so that
        // the batch's memory misses overlap.
        let cache = &self.sh.cache;
        let ps = cache.page_size() as u64;
        // The second pass looks each page up to find its frame, so it waits
        // for the lines the first asked for: worth it when pages are cached,
        // a delay before the first device read when they are not. It runs
        // unless most pages of this queue's last batch missed.
        let passes: &[bool] = if self.missing {
            &[false]
        } else {
            &[false, true]
        };
        let n = reqs.len();
        let loads = self.loads;
        for &pass in passes {
            for r in reqs.iter() {
                let first = r.offset / ps;
                // A page request (no buffer) still looks its page up. Out-of-
                // range requests are refused later; the hint only must not
                // overflow.
                let len = (r.buf.len() as u64).max(1);
                let end = (r.offset.saturating_add(len)).div_ceil(ps).min(first + 4);
                for page in first..end {
                    cache.prefetch(r.file.id, page, pass);
                }
            }
        }
        // While one request copies, the rest of the next one's first frame
        // streams in (the hints above asked for its first 512 bytes only).
        let mut it = reqs.drain(..).peekable();
        // A callback of a request finished here may panic: the requests
        // after it are started all the same (dropped with the unwind, they
        // would never complete), and the first panic goes on at the end.
        let mut first = None;
        loop {
            let started = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                while let Some(r) = it.next() {
                    if let Some(next) = it.peek()
                        && next.kind == OpKind::Read
                    {
                        let at = (next.offset % ps) as usize;
                        let end = (at + next.buf.len()).min(ps as usize);
                        cache.prefetch_bytes(next.file.id, next.offset / ps, at + 512, end);
                    }
                    self.start(r);
                    // Each miss goes to the device before the next request's
                    // lookup: a batch's first read is not held behind the
                    // others' claims.
                    self.q.send_eager();
                    #[cfg(test)]
                    self.unsent_after_start.push(self.q.unsent());
                }
            }));
            match started {
                Ok(()) => break,
                Err(p) => panics::keep_first(&mut first, p),
            }
        }
        drop(it);
        self.missing = 2 * (self.loads - loads) > n as u64;
        self.q.flush_now();
        // A page this queue fills stays busy for every other thread until the
        // queue reaps the fill: reap what has finished now, so that a caller
        // whose batches keep hitting (and so never waits) does not hold other
        // threads' readers of those pages, nor its own misses, unanswered.
        if self.q.in_flight() > 0 {
            self.q.poll();
        }
        // A callback `collect` runs may panic too: the one kept goes on
        // first, the other is dropped safely.
        let collected = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.collect()));
        if let Err(p) = collected {
            panics::keep_first(&mut first, p);
        }
        panics::resume_first(first);
    }

    /// Move the completions of finished tagged requests (see
    /// [`CachedRequest::tagged`]) to the end of `out`, as (tag, completion).
    pub fn take_completions(&mut self, out: &mut Vec<(u64, CachedCompletion)>) {
        out.append(&mut self.done);
    }

    /// Move the guards of finished page requests (see
    /// [`CachedRequest::page`]) to the end of `out`, as (tag, guard or the
    /// error that kept the request from one).
    pub fn take_pages(&mut self, out: &mut Vec<(u64, Result<PageGuard<'a>>)>) {
        out.append(&mut self.guards);
    }

    /// Move the pins of finished pin requests to the end of `out`.
    pub(crate) fn take_pins(&mut self, out: &mut Vec<(u64, Result<RawPin>)>) {
        out.append(&mut self.pins);
    }

    /// Block until `n` requests have finished since this call began (or nothing is
    /// outstanding); returns how many ran.
    pub fn wait(&mut self, n: usize) -> usize {
        self.wait_as(n, false)
    }

    /// [`CachedQueue::wait`], or with `bell`, returning early (without
    /// sleeping again) once the queue's doorbell rang.
    pub(crate) fn wait_as(&mut self, n: usize, bell: bool) -> usize {
        self.ran = 0;
        self.collect();
        let limit = self.sh.cache.pin_wait();
        // The nap between looks at parked pages that no wait covers (pinned
        // by readers, or a miss whose sets are full): doubled while nothing
        // finishes, so that many threads waiting so do not take the CPUs
        // from the threads that would free those pages.
        let mut nap = NAP_MIN;
        let mut ran = self.ran;
        while self.ran < n && self.outstanding > 0 && !(bell && self.q.bell_rang()) {
            if self.ran > ran {
                (nap, ran) = (NAP_MIN, self.ran);
            }
            // A page busy for longer than the pin wait gives up, whether or
            // not the queue's other requests keep finishing meanwhile.
            let oldest = self.parked.iter().map(|p| p.2).min();
            let waited = oldest.map_or(Duration::ZERO, |t| t.elapsed());
            if waited > limit {
                self.fail_parked(limit);
            } else if self.q.in_flight() > 0 {
                self.q.wait_as(1, bell);
            } else if !self.parked.is_empty() {
                // Every page left is being filled or written by another thread,
                // or its set is pinned by others; this queue owns no fill, but
                // another queue that does may never be polled: the wait is
                // bounded (the pin wait, `IO_WAIT` for I/O in flight).
                if let Some(&(req, page, _)) = self.parked.first() {
                    // Most often another thread's fill (readahead), the
                    // flusher's write-back or another writer: sleep until it
                    // ends rather than poll (pages a write-back holds wait for
                    // a device, and threads polling for them would take the
                    // CPU the kernel's completion of that write needs).
                    let fid = self.live.get(req).map(|l| l.req.file.id);
                    let cache = &self.sh.cache;
                    // A queue with a doorbell looks at it every millisecond.
                    let slice = if bell {
                        (limit - waited).min(Duration::from_millis(1))
                    } else {
                        limit - waited
                    };
                    if !fid.is_some_and(|fid| cache.wait_busy(fid, page, slice)) {
                        std::thread::sleep(nap.min(slice));
                        nap = (nap * 2).min(NAP_MAX);
                    }
                    #[cfg(test)]
                    {
                        self.parked_looks += 1;
                    }
                }
            } else {
                // Nothing in flight and nothing parked: no request can move
                // (only after a panic unwound through the queue); do not spin.
                break;
            }
            self.collect();
        }
        self.ran
    }

    /// Run what is ready without blocking; returns how many requests finished.
    pub fn poll(&mut self) -> usize {
        self.ran = 0;
        self.q.poll();
        self.collect();
        self.ran
    }

    /// Wait for every outstanding request.
    pub fn drain(&mut self) {
        while self.outstanding > 0 {
            if self.wait(self.outstanding) == 0 && self.q.in_flight() == 0 && self.parked.is_empty()
            {
                break;
            }
        }
    }

    fn check(&self, r: &CachedRequest<'_>) -> Result<()> {
        if !Arc::ptr_eq(&r.file.shared, &self.shared_arc) {
            return Err(Error::InvalidArgument(format!(
                "file {:?} belongs to another cached store than this queue",
                r.file.entry.file.name()
            )));
        }
        if r.kind == OpKind::Write && r.file.read_only {
            return Err(Error::ReadOnly(r.file.entry.file.name()));
        }
        r.file.entry.check()?;
        let len = r.file.len();
        if r.offset
            .checked_add(r.buf.len() as u64)
            .is_none_or(|end| end > len)
        {
            return Err(Error::OutOfRange {
                file: r.file.entry.file.name(),
                offset: r.offset,
                len: r.buf.len() as u64,
                file_len: len,
            });
        }
        // A page this thread holds a guard of, which the request would wait
        // for until the pin wait ends (a write: any guard; a read: a mutable
        // one): refused at once, as the thread's synchronous calls are.
        if !r.buf.is_empty() {
            let end = r.offset + r.buf.len() as u64;
            r.file.check_held(r.offset, end, r.kind == OpKind::Write)?;
        }
        Ok(())
    }

    fn start(&mut self, mut r: CachedRequest<'_>) {
        self.outstanding += 1;
        if !matches!(r.want, Want::Bytes) {
            return self.start_page(r);
        }
        if let Err(e) = self.check(&r) {
            self.complete(r.into(), false, Some(e));
            return;
        }
        let ps = self.sh.cache.page_size() as u64;
        let (first, end) = (r.offset / ps, (r.offset + r.buf.len() as u64).div_ceil(ps));
        let pages = (end - first) as usize;
        if r.buf.is_empty() {
            // Nothing to move (at any offset, aligned or not): no page is
            // looked up, read or dirtied.
            self.complete(r.into(), true, None);
            return;
        }
        // A queue with the largest window's worth of reads in flight reads
        // ahead of itself: it asks for no window.
        let in_flight = self.outstanding as u64 * r.buf.len() as u64;
        let stream = r.kind == OpKind::Read
            && r.noted.unwrap_or_else(|| {
                readahead::note_read(
                    self.sh,
                    &r.file.entry,
                    r.file.id,
                    r.offset,
                    r.buf.len() as u64,
                    in_flight,
                )
            });
        if pages == 1 && r.kind == OpKind::Read {
            // The common small read: an optimistic copy that needs no state
            // of the request here and no clone of its file.
            let in_page = (r.offset - first * ps) as usize;
            let cache = &self.sh.cache;
            let got = if stream {
                cache.try_read_stream(r.file.id, first, in_page, &mut r.buf)
            } else {
                let hit = cache.try_read(r.file.id, first, in_page, &mut r.buf);
                hit.map(|h| if h { Got::Hit } else { Got::Miss })
            };
            match got {
                Ok(Got::Miss) => {}
                Ok(g) => {
                    if g == Got::Cold {
                        readahead::note_used(self.sh, r.file.id, first);
                    }
                    return self.complete(r.into(), true, None);
                }
                Err(e) => return self.complete(r.into(), false, Some(e)),
            }
        }
        // A one-page write whose page is cached, or missing and wholly
        // written, completes here too, without a clone of its file (a shared
        // reference count would bounce between threads on every request).
        let mut found = None;
        if pages == 1 && r.kind == OpKind::Write {
            let cache: &'a PageCache = &self.sh.cache;
            let in_page = (r.offset - first * ps) as usize;
            match cache.try_get_mut(r.file.id, first) {
                Ok(f) => match write_now(f, in_page, &r.buf, ps as usize) {
                    Now::Done(res) => {
                        return self.complete(r.into(), true, res.err());
                    }
                    Now::Later(f) => found = Some(f),
                },
                Err(e) => return self.complete(r.into(), false, Some(e)),
            }
        }
        let id = self.live.insert(Live {
            req: Req {
                kind: r.kind,
                file: ReqFile::of(r.file),
                offset: r.offset,
                buf: r.buf,
                notify: r.notify,
            },
            page: None,
            stream,
            left: pages,
            next: end,
            end,
            hit: true,
            err: None,
        });
        if let Some(found) = found {
            // The lookup above stands: a busy page, a victim to write, or a
            // partial write of a missing page (claimed, to be read first).
            let res = self.write_found(id, first, found);
            self.settle(id, first, res);
        } else {
            // At most `pages_at_once` pages started now; each page done
            // starts the next. A request larger than the cache would
            // otherwise claim every free frame with its first pages while
            // the rest, parked behind its own reads, ran out the pin wait.
            let now = end.min(first + self.pages_at_once());
            if let Some(l) = self.live.get_mut(id) {
                l.next = now;
            }
            self.starting = true;
            for page in first..now {
                self.run_page(id, page);
            }
            self.starting = false;
            self.start_more();
        }
        self.send_run();
    }

    /// Most pages of one request started at once: an eighth of the cache
    /// (at least one, at most 1,024).
    fn pages_at_once(&self) -> u64 {
        (self.sh.cache.capacity_pages() as u64 / 8).clamp(1, 1024)
    }

    /// Start the next page of each request a page of which finished (one
    /// each time), until none is left to start; then send what they read.
    /// A page done while this runs (a hit) only adds its request to the
    /// list, so that a long request of cached pages loops here instead of
    /// recursing.
    fn start_more(&mut self) {
        if self.starting {
            return;
        }
        self.starting = true;
        let mut any = false;
        while let Some(id) = self.to_start.pop() {
            let Some(l) = self.live.get_mut(id) else {
                continue;
            };
            if l.next >= l.end {
                continue;
            }
            let page = l.next;
            l.next += 1;
            any = true;
            self.run_page(id, page);
        }
        self.starting = false;
        if any {
            self.send_run();
        }
    }

    /// Start a page request (a guard or a pin): the hold taken for a guard,
    /// then the page looked up as a page guard's reader.
    fn start_page(&mut self, r: CachedRequest<'_>) {
        let f = r.file;
        let checked = if Arc::ptr_eq(&f.shared, &self.shared_arc) {
            f.page_span(r.offset)
        } else {
            self.check(&r).map(|()| (0, 0, 0))
        };
        let page = match checked {
            Ok((page, ..)) => page,
            Err(e) => return self.complete(r.into(), false, Some(e)),
        };
        let want = match r.want {
            Want::Guard => {
                let name = || f.entry.file.name();
                match Hold::take(f.store_key(), f.id, page, false, name) {
                    Ok(h) => PageWant::Guard(h),
                    Err(e) => return self.complete(r.into(), false, Some(e)),
                }
            }
            _ => {
                // A pin (a task's) of a page this thread holds mutably
                // would wait for that guard until the pin wait ends (taken
                // after the request was added, before this start): refused
                // at once, as a guard's hold is.
                let ps = f.shared.cache.page_size() as u64;
                if let Err(e) = f.check_held(page * ps, page * ps + 1, false) {
                    return self.complete(r.into(), false, Some(e));
                }
                PageWant::Pin
            }
        };
        // Page references in order are a stream as reads are (a future's
        // was noted on its own thread).
        let ps = self.sh.cache.page_size() as u64;
        let in_flight = self.outstanding as u64 * ps;
        let stream = r
            .noted
            .unwrap_or_else(|| readahead::note_page(self.sh, &f.entry, f.id, page, in_flight));
        let id = self.live.insert(Live {
            req: Req {
                kind: r.kind,
                file: ReqFile::of(f),
                offset: r.offset,
                buf: r.buf,
                notify: r.notify,
            },
            page: Some((want, None)),
            stream,
            left: 1,
            next: page + 1,
            end: page + 1,
            hit: true,
            err: None,
        });
        self.run_page(id, page);
        self.send_run();
    }

    /// Try page `page` of live request `id`, and account for the outcome.
    fn run_page(&mut self, id: usize, page: u64) {
        let res = self.step(id, page);
        self.settle(id, page, res);
    }

    /// Account for the outcome `res` of page `page` of live request `id`.
    fn settle(&mut self, id: usize, page: u64, res: Result<Step>) {
        match res {
            Ok(Step::Done) => self.page_done(id, None),
            Ok(Step::Pending) => {
                if let Some(l) = self.live.get_mut(id) {
                    l.hit = false;
                }
            }
            Ok(Step::Busy) => self.parked.push((id, page, Instant::now())),
            Err(e) => self.page_done(id, Some(e)),
        }
    }

    /// The byte ranges page `page` shares with request `id`:
    /// (offset in the page, offset in the buffer, length).
    fn span(&self, id: usize, page: u64) -> (usize, usize, usize) {
        let r = &self.live.get(id).expect("live request").req;
        let ps = self.sh.cache.page_size() as u64;
        let start = (page * ps).max(r.offset);
        let end = ((page + 1) * ps).min(r.offset + r.buf.len() as u64);
        (
            (start - page * ps) as usize,
            (start - r.offset) as usize,
            (end - start) as usize,
        )
    }

    fn step(&mut self, id: usize, page: u64) -> Result<Step> {
        let (in_page, in_buf, n) = self.span(id, page);
        let l = self.live.get_mut(id).expect("live request");
        let fid = l.req.file.id;
        let cache: &'a PageCache = &self.sh.cache;
        if let Some((_, pin)) = l.page.as_mut() {
            if cache.is_filling(fid, page) {
                return Ok(Step::Busy);
            }
            let mode = if l.stream { Mode::Stream } else { Mode::Keep };
            return match cache.try_get_as(fid, page, mode)? {
                None => Ok(Step::Busy),
                Some(Lookup::Hit(g)) => {
                    if l.stream && g.is_cold() {
                        readahead::note_used(self.sh, fid, page);
                    }
                    *pin = Some(g);
                    Ok(Step::Done)
                }
                Some(Lookup::WriteBack(wb)) => self.write_back(wb, id, page),
                Some(Lookup::Miss(f)) => {
                    let ptr = f.frame_ptr();
                    self.load(fid, page, Job::Read(f), ptr, id)
                }
            };
        }
        if l.req.kind == OpKind::Read {
            let stream = l.stream;
            let dst = &mut l.req.buf[in_buf..in_buf + n];
            if stream {
                match cache.try_read_stream(fid, page, in_page, dst)? {
                    Got::Miss => {}
                    got => {
                        if got == Got::Cold {
                            readahead::note_used(self.sh, fid, page);
                        }
                        return Ok(Step::Done);
                    }
                }
            } else if cache.try_read(fid, page, in_page, dst)? {
                return Ok(Step::Done);
            }
            if cache.is_filling(fid, page) {
                // Another requester's fill (readahead, most often): no lookup
                // until it is done.
                return Ok(Step::Busy);
            }
            let found = if stream {
                cache.try_get_stream(fid, page)?
            } else {
                cache.try_get(fid, page)?
            };
            match found {
                None => Ok(Step::Busy),
                Some(Lookup::Hit(g)) => {
                    dst.copy_from_slice(&g[in_page..in_page + n]);
                    if stream && g.is_cold() {
                        readahead::note_used(self.sh, fid, page);
                    }
                    Ok(Step::Done)
                }
                Some(Lookup::WriteBack(wb)) => self.write_back(wb, id, page),
                Some(Lookup::Miss(f)) => {
                    let ptr = f.frame_ptr();
                    self.load(fid, page, Job::Read(f), ptr, id)
                }
            }
        } else {
            let found = cache.try_get_mut(fid, page)?;
            self.write_found(id, page, found)
        }
    }

    /// Go on with page `page` of write request `id`, given what its lookup
    /// found.
    fn write_found(&mut self, id: usize, page: u64, found: Option<LookupMut<'a>>) -> Result<Step> {
        let (in_page, in_buf, n) = self.span(id, page);
        let ps = self.sh.cache.page_size();
        let l = self.live.get_mut(id).expect("live request");
        let fid = l.req.file.id;
        let src = &l.req.buf[in_buf..in_buf + n];
        match write_now(found, in_page, src, ps) {
            Now::Done(r) => r.map(|()| Step::Done),
            Now::Later(None) => Ok(Step::Busy),
            Now::Later(Some(LookupMut::WriteBack(wb))) => self.write_back(wb, id, page),
            Now::Later(Some(LookupMut::Miss(f))) => {
                let ptr = f.frame_ptr();
                let owed = Owed::new(self.sh, fid, Vec::new());
                self.load(fid, page, Job::Write(f, owed), ptr, id)
            }
            Now::Later(Some(LookupMut::Hit(_))) => unreachable!("write_now takes every hit"),
        }
    }

    /// Start the device read of a claimed frame (`ptr`), or read it at once
    /// when the page's part inside the file is not a whole number of sectors.
    fn load(
        &mut self,
        fid: u32,
        page: u64,
        mut job: Job<'a>,
        ptr: *mut u8,
        req: usize,
    ) -> Result<Step> {
        let entry = &self.live.get(req).expect("live request").req.file.entry;
        let ps = self.sh.cache.page_size() as u64;
        let off = page * ps;
        let n = entry.file.len().saturating_sub(off).min(ps) as usize;
        #[cfg(test)]
        if let Some(between) =
            super::shared::AFTER_LOAD_LENGTH.take(std::sync::Arc::as_ptr(entry) as usize)
        {
            between();
        }
        let f = job.frame();
        if n < f.len() {
            f[n..].fill(0);
        }
        if !(n as u64).is_multiple_of(DIRECT_ALIGN) {
            // Through the request's own entry: a file deleted meanwhile is
            // no longer in the table, and is told as gone.
            let r = Shared::load_of(entry, page, f);
            return self.complete_fill(job, req, page, r);
        }
        entry.note_fill(page);
        job.note_queued(true);
        self.loads += 1;
        let slot = self.fills.insert(Waiting { job, req, page });
        // Whole pages that follow one another in the file join one read (into
        // a staging slot or their frames); the run goes out at `send_run`.
        if let Some(run) = self.run.as_mut()
            && run.fid == fid
            && run.next == page
            && n as u64 == ps
            && run.len % ps as usize == 0
            && self.frames.len() < run_pages(ps as usize)
        {
            run.slots.more.push(slot);
            self.frames.push(ptr);
            run.len += n;
            run.next += 1;
            return Ok(Step::Pending);
        }
        self.send_run();
        self.frames.clear();
        self.frames.push(ptr);
        self.run = Some(MissRun {
            fid,
            req,
            offset: off,
            next: page + 1,
            len: n,
            slots: Slots {
                first: slot,
                more: self.spare.pop().unwrap_or_default(),
                staged: None,
            },
        });
        Ok(Step::Pending)
    }

    /// Send the run of missing pages being gathered, as one request.
    fn send_run(&mut self) {
        let Some(run) = self.run.take() else {
            return;
        };
        let ps = self.sh.cache.page_size();
        let mut slots = run.slots;
        // A long run lands in the staging area and is copied to its frames
        // when it is back (see `take_finished`).
        slots.staged = (self.frames.len() >= MIN_PAGES)
            .then(|| self.sh.staging.take())
            .flatten()
            .map(|s| (s, run.len));
        let mem = match &slots.staged {
            Some((s, _)) => Mem::One(s.ptr()),
            None => Mem::frames(&self.frames, ps),
        };
        let tag = self.ops.insert(slots);
        // A request with a page in flight stays live.
        let file = &self
            .live
            .get(run.req)
            .expect("live request")
            .req
            .file
            .entry
            .file;
        // SAFETY: the staging slot is taken from the area for this read alone, and every frame of the run is claimed by a fill held in `self.fills`, which nobody else reads or writes and which is only finished after the operation's tag comes back.
        unsafe {
            self.q
                .submit_raw(OpKind::Read, file, run.offset, mem, run.len, tag);
        }
    }

    /// The set of page `page` of request `req` has no clean page: write its
    /// dirty victim `wb` back through the queue with its dirty neighbours in
    /// the file (one write straight from their frames), and look the page up
    /// again when that write is done.
    fn write_back(&mut self, wb: WriteBack<'a>, req: usize, page: u64) -> Result<Step> {
        let (vf, vp) = (wb.file(), wb.page());
        let ps = self.sh.cache.page_size() as u64;
        let entry = match self.sh.entry(vf) {
            Ok(e) if vp * ps < e.file.len() => e,
            // The victim's file is gone, or the victim is past its end (a
            // shrink is dropping it): nothing to write.
            _ => {
                wb.finish(Ok(()))?;
                self.parked.push((req, page, Instant::now()));
                return Ok(Step::Pending);
            }
        };
        let file_len = entry.file.len();
        let n = file_len.saturating_sub(vp * ps).min(ps) as usize;
        if !(n as u64).is_multiple_of(DIRECT_ALIGN) {
            let r = self.sh.store_page(vf, vp, wb.bytes());
            wb.finish(r)?;
            self.parked.push((req, page, Instant::now()));
            return Ok(Step::Pending);
        }
        // The victim takes its dirty neighbours along, as the flusher does:
        // the device counts operations, not pages, and every neighbour cleaned
        // here is a victim another set will not have to write. The store keeps
        // file sizes whole sectors; should a file end inside one, only whole
        // pages join (that tail page is written on its own, above, when it is
        // the victim), so a run is always whole sectors.
        let limit = if file_len % DIRECT_ALIGN == 0 {
            file_len
        } else {
            file_len / ps * ps
        };
        let (start, pages) = with_neighbours(&self.sh.cache, wb, limit, VICTIM_RUN);
        let end = start + pages.len() as u64;
        self.send_write_back(&entry.file, vf, start, pages, false, req, page);
        // The disk takes writes that land close together much faster than
        // scattered ones: the other dirty pages of the victim's region go now,
        // right behind it.
        let cache = &self.sh.cache;
        for q in dirty_in_region(cache, vf, vp, limit / ps) {
            if (start..end).contains(&q) {
                continue;
            }
            // Never waiting for a set's lock here: the runs sent so far hold
            // their pages under write-back, and the lock's holder may be a
            // writer waiting for one of them.
            let Ok(Ok(Some(wb))) = cache.try_write_back(vf, q) else {
                continue;
            };
            let (s0, near) = with_neighbours(cache, wb, limit, VICTIM_RUN);
            // The request waits for this write as for one of its pages.
            self.live.get_mut(req).expect("live request").left += 1;
            self.send_write_back(&entry.file, vf, s0, near, true, req, q);
        }
        Ok(Step::Pending)
    }

    /// Send one write of the run `pages` (first page `start`, of cache file
    /// `id`) straight from their frames: the victim run of page `page` of
    /// request `req`, or, with `near`, a run of the victim's region that the
    /// request also waits for.
    #[allow(clippy::too_many_arguments)]
    fn send_write_back(
        &mut self,
        file: &File,
        id: u32,
        start: u64,
        pages: Vec<WriteBack<'a>>,
        near: bool,
        req: usize,
        page: u64,
    ) {
        let ps = self.sh.cache.page_size() as u64;
        let off = start * ps;
        let run = pages.len() as u64 * ps;
        // A shrink since the run was built may have ended the file inside a
        // sector: the run then covers that sector whole, as the flusher's
        // runs do (a write of part of one is refused as misaligned).
        let len = file.len().saturating_sub(off).min(run);
        let len = (len.div_ceil(DIRECT_ALIGN) * DIRECT_ALIGN).min(run) as usize;
        debug_assert_eq!(
            len as u64 % DIRECT_ALIGN,
            0,
            "a victim run of whole sectors"
        );
        // Not `self.frames`: a run of missing pages may be gathering there.
        self.victim_frames.clear();
        self.victim_frames
            .extend(pages.iter().map(|w| w.bytes().as_ptr() as *mut u8));
        let job = if near {
            Job::Near(Owed::new(self.sh, id, pages))
        } else {
            Job::Victim(Owed::new(self.sh, id, pages))
        };
        let slot = self.fills.insert(Waiting { job, req, page });
        let tag = self.ops.insert(Slots {
            first: slot,
            more: Vec::new(),
            staged: None,
        });
        let mem = Mem::frames(&self.victim_frames, ps as usize);
        // The device only reads the frames.
        // SAFETY: the write-back guards in `self.fills[slot]` keep the pages in their frames and writers out until the write's tag comes back.
        unsafe {
            self.q.submit_raw(OpKind::Write, file, off, mem, len, tag);
        }
    }

    /// Publish a filled frame and finish the page of its request.
    fn complete_fill(
        &mut self,
        job: Job<'a>,
        req: usize,
        page: u64,
        r: Result<()>,
    ) -> Result<Step> {
        let fill = match job {
            Job::Victim(mut pages) => {
                let epoch = pages.epoch;
                written(self.sh, pages.take(), epoch, r)?;
                return Ok(Step::Busy);
            }
            // A failure reaches the request that caused the write (and the
            // file's next sync); the pages stay dirty.
            Job::Near(mut pages) => {
                let epoch = pages.epoch;
                return written(self.sh, pages.take(), epoch, r).map(|()| Step::Done);
            }
            fill => fill,
        };
        let (in_page, in_buf, n) = self.span(req, page);
        let l = self.live.get_mut(req).expect("live request");
        match fill {
            Job::Read(f) => {
                let g = f.finish(r)?;
                if l.stream {
                    // Read in by this queue, not ahead: its later reads on
                    // this thread count nothing as read ahead and used.
                    readahead::note_own(self.sh, l.req.file.id, page);
                }
                match l.page.as_mut() {
                    Some((_, pin)) => *pin = Some(g),
                    None => l.req.buf[in_buf..in_buf + n].copy_from_slice(&g[in_page..in_page + n]),
                }
            }
            Job::Write(f, _owed) => {
                let mut g = f.finish(r)?;
                g[in_page..in_page + n].copy_from_slice(&l.req.buf[in_buf..in_buf + n]);
            }
            Job::Victim(_) | Job::Near(_) => unreachable!("write-backs are settled above"),
        }
        Ok(Step::Done)
    }

    /// Finish the fills whose reads completed, retry parked pages, and run
    /// the callbacks of requests that are done.
    fn collect(&mut self) {
        // Left by a callback that panicked in the last round: pages being
        // retried, pages being given up on, and a run of misses gathered
        // but not sent.
        self.parked.append(&mut self.retrying);
        if self.run.is_some() {
            self.send_run();
            self.q.flush_now();
        }
        self.give_up_pending();
        loop {
            self.take_finished();
            let mut done = std::mem::take(&mut self.finished);
            if done.is_empty() && self.parked.is_empty() {
                self.finished = done;
                return;
            }
            // The frames just read are not in the CPU caches, nor the lines
            // of their slots' states, which finishing writes: ask for all of
            // them before finishing any, so that their misses overlap. A
            // request that copies wants the frame's first lines; the caller
            // of a page request for a guard most likely reads first at the
            // offset it asked for, so that line comes in while the queue
            // finishes (a pin is for another thread, whose caches it would
            // not reach).
            let ps = self.sh.cache.page_size() as u64;
            for &(slot, _) in &done {
                let Some(w) = self.fills.get_mut(slot) else {
                    continue;
                };
                w.job.prefetch_state();
                let Some(l) = self.live.get(w.req) else {
                    continue;
                };
                let f = w.job.frame();
                if l.page.is_none() {
                    for line in f.chunks(64).take(8) {
                        crate::cache::prefetch(line.as_ptr());
                    }
                } else if let Some((PageWant::Guard(_), _)) = &l.page
                    && let Some(line) = f.get((l.req.offset % ps) as usize & !63)
                {
                    crate::cache::prefetch(line);
                }
            }
            // Taken from the queue's own list one at a time (last first), so
            // that a callback that panics leaves the others there.
            done.reverse();
            self.finished = done;
            while let Some((slot, r)) = self.finished.pop() {
                let mut w = self.fills.remove(slot).expect("a fill in flight");
                w.job.note_queued(false);
                // A read sent with a length a shrink then cut: read again
                // what is still inside the file (a victim's write that a
                // shrink refused keeps its error: its pages stay dirty).
                let reads = matches!(w.job, Job::Read(_) | Job::Write(..));
                let r = match r {
                    Err(Error::OutOfRange { .. }) if reads => {
                        let entry = &self.live.get(w.req).expect("live request").req.file.entry;
                        Shared::load_of(entry, w.page, w.job.frame())
                    }
                    r => r,
                };
                match self.complete_fill(w.job, w.req, w.page, r) {
                    // A victim was written: look the page up again.
                    Ok(Step::Busy) => self.parked.push((w.req, w.page, Instant::now())),
                    res => self.page_done(w.req, res.err()),
                }
            }
            let mut parked = std::mem::take(&mut self.parked);
            let had = parked.len();
            parked.reverse();
            self.retrying = parked;
            while let Some((id, page, since)) = self.retrying.pop() {
                let n = self.parked.len();
                self.run_page(id, page);
                // Still busy: it keeps the time it was first found busy.
                if self.parked.len() == n + 1
                    && let Some(p) = self.parked.last_mut()
                    && (p.0, p.1) == (id, page)
                {
                    p.2 = since;
                }
            }
            self.send_run();
            self.q.flush_now();
            // Stop when retrying made no progress and nothing new finished.
            self.take_finished();
            if self.parked.len() == had && self.finished.is_empty() {
                return;
            }
        }
    }

    /// Turn the queue's finished operations into finished fills.
    fn take_finished(&mut self) {
        self.q.take_tagged(&mut self.tagged);
        for (tag, r) in self.tagged.drain(..) {
            let mut s = self.ops.remove(tag).expect("an operation in flight");
            if let Some((slot, len)) = s.staged.take() {
                if r.is_ok() {
                    copy_out(&mut self.fills, &s, &slot, len, self.sh.cache.page_size());
                }
                self.sh.staging.give(slot);
            }
            if s.more.is_empty() {
                self.finished.push((s.first, r));
            } else {
                self.finished.push((s.first, r.clone()));
                for slot in s.more.drain(..) {
                    self.finished.push((slot, r.clone()));
                }
            }
            if s.more.capacity() > 0 {
                self.spare.push(s.more);
            }
        }
    }

    /// Give up on the parked pages busy for longer than `limit`, but for
    /// those whose read or write-back is in flight: a slow device ends
    /// those, so they are waited for longer, as a synchronous read waits for
    /// another's fill (their wait starts again), up to [`IO_WAIT`] in all
    /// (or the pin wait, if longer): such I/O may belong to a queue whose
    /// thread never polls it again, and that wait must end too.
    fn fail_parked(&mut self, limit: Duration) {
        let (late, mut wait): (Vec<_>, Vec<_>) = std::mem::take(&mut self.parked)
            .into_iter()
            .partition(|p| p.2.elapsed() > limit);
        let cache = &self.sh.cache;
        let io_limit = limit.max(IO_WAIT);
        // Write-backs of victims this queue's own requests made, still in
        // flight: the slots they hold come free when they end, so a page
        // waiting for a set they fill waits as for I/O, not as for pins
        // others hold (a write larger than the cache, over a device slower
        // than the pin wait).
        let own_write_backs = self
            .fills
            .iter()
            .any(|w| matches!(w.job, Job::Victim(_) | Job::Near(_)));
        let mut given_up = Vec::with_capacity(late.len());
        for (id, page, since) in late {
            let fid = self.live.get(id).map(|l| l.req.file.id);
            let at = self.io_waits.iter().position(|(k, _)| *k == (id, page));
            let first = at.map_or(since, |i| self.io_waits[i].1);
            let in_io = own_write_backs || fid.is_some_and(|fid| cache.is_in_io(fid, page));
            if in_io && first.elapsed() < io_limit {
                if at.is_none() {
                    self.io_waits.push(((id, page), since));
                }
                wait.push((id, page, Instant::now()));
            } else {
                if let Some(i) = at {
                    self.io_waits.swap_remove(i);
                }
                given_up.push((id, page, first));
            }
        }
        // Pages no longer parked (done, or given up) are forgotten.
        self.io_waits
            .retain(|(k, _)| wait.iter().any(|p| (p.0, p.1) == *k));
        self.parked = wait;
        given_up.reverse();
        self.giving_up.append(&mut given_up);
        self.give_up_pending();
    }

    /// Fail the pages given up on, one at a time from the queue's own list,
    /// so that a callback that panics leaves the others there for the next
    /// `collect`.
    fn give_up_pending(&mut self) {
        while let Some((id, page, since)) = self.giving_up.pop() {
            let file = self.live.get(id).map(|l| &l.req.file);
            let name = file.map(|f| f.entry.file.name());
            let why = file.map_or("", |f| self.sh.cache.why_busy(f.id, page));
            let e = Error::Busy(format!(
                "page {page} of file {:?} stayed busy for {} ms ({why} when given up; a \
                 page waits while it is read in, written back, held by a writer or pinned, \
                 and a miss while every slot of its sets is)",
                name.unwrap_or_default(),
                since.elapsed().as_millis()
            ));
            self.page_done(id, Some(e));
        }
    }

    fn page_done(&mut self, id: usize, err: Option<Error>) {
        let l = self.live.get_mut(id).expect("live request");
        if let Some(e) = err {
            l.err.get_or_insert(e);
        }
        l.left -= 1;
        if l.next < l.end {
            // A page of a long request finished: the next one may start.
            self.to_start.push(id);
            self.start_more();
            return;
        }
        if l.left == 0 {
            let l = self.live.remove(id).expect("live request");
            if let Some((want, pin)) = l.page {
                return self.complete_page(l.req, want, pin, l.err);
            }
            let r = l.req;
            self.complete(r.into(), l.hit, l.err);
        }
    }

    /// Hand over a finished page request: its guard or pin, or its error.
    fn complete_page(
        &mut self,
        r: Req,
        want: PageWant,
        pin: Option<PageRef<'a>>,
        err: Option<Error>,
    ) {
        self.outstanding -= 1;
        self.ran += 1;
        let Notify::Tag(tag) = r.notify else {
            unreachable!("page requests are tagged")
        };
        let got = match (err, pin) {
            (Some(e), _) => Err(e),
            (None, Some(g)) => Ok(g),
            (None, None) => unreachable!("a page request done without error holds its page"),
        };
        match want {
            PageWant::Guard(hold) => {
                let ps = self.sh.cache.page_size() as u64;
                let start = r.offset / ps * ps;
                let len = r.file.len().saturating_sub(start).min(ps) as usize;
                // Pinned: now the check that no array stores into it in place.
                let g = got
                    .and_then(|g| r.file.entry.refs_allowed().map(|()| g))
                    .map(|g| Guarded::new(g, len, start, hold));
                self.guards.push((tag, g));
            }
            PageWant::Pin => {
                let p = got.map(|g| g.into_raw().expect("a page guard's page is in the cache"));
                self.pins.push((tag, p));
            }
        }
    }

    /// Report a finished request (`hit` when no device read was needed) to its
    /// callback or under its tag.
    fn complete(&mut self, r: Finished, hit: bool, err: Option<Error>) {
        if !matches!(r.want, Want::Bytes) {
            // A page request refused at submit.
            self.outstanding -= 1;
            self.ran += 1;
            let Notify::Tag(tag) = r.notify else {
                unreachable!("page requests are tagged")
            };
            let e = err.unwrap_or_else(|| Error::InvalidArgument("page request".into()));
            match r.want {
                Want::Guard => self.guards.push((tag, Err(e))),
                _ => self.pins.push((tag, Err(e))),
            }
            return;
        }
        self.outstanding -= 1;
        self.ran += 1;
        let c = CachedCompletion {
            kind: r.kind,
            offset: r.offset,
            buf: r.buf,
            hit,
            result: err.map_or(Ok(()), Err),
        };
        match r.notify {
            Notify::Callback(f) => f(c),
            Notify::Tag(t) => self.done.push((t, c)),
        }
    }
}

impl Drop for CachedQueue<'_> {
    fn drop(&mut self) {
        if !self.sh.origin.is_here() {
            // A child made by `fork`: the fills in flight are the parent's
            // (their device queue's drop leaves them be), and nothing is
            // drained or released here. The fills and the write-backs owed
            // are left unfinished (finishing them would take cache locks a
            // parent's thread may have held at the fork, held in the child
            // for good), but this thread's counts of them are undone, as
            // their drops would: the thread may go on with a store of the
            // child's own. The requests' callbacks are neither run nor
            // dropped (what they hold is the parent's too: a channel's
            // sender, a buffered writer); their pages, holds and buffers go,
            // as the guards do (a pin's and a hold's release take no lock).
            for l in self.live.take_all() {
                let Live { req, page, .. } = l;
                drop(page);
                let Req {
                    file, buf, notify, ..
                } = req;
                drop((file, buf));
                if let Notify::Callback(c) = notify {
                    std::mem::forget(c);
                }
            }
            for w in self.fills.take_all() {
                w.job.note_queued(false);
                match w.job {
                    Job::Read(f) => std::mem::forget(f),
                    Job::Write(f, mut owed) => {
                        std::mem::forget(f);
                        std::mem::forget(owed.take());
                    }
                    Job::Victim(mut owed) | Job::Near(mut owed) => {
                        std::mem::forget(owed.take());
                    }
                }
            }
            std::mem::forget(std::mem::take(&mut self.pins));
            return;
        }
        // Frames of fills in flight are claimed until their reads finish, and
        // only this queue finishes them: a callback that panics in the drain
        // consumed its request, so the drain goes on after it, and the first
        // panic is passed on once every request has finished (unwinding at
        // the first would leave the other requests' pages claimed for ever).
        let mut first = None;
        loop {
            let before = self.outstanding;
            match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.drain())) {
                Ok(()) => break,
                Err(p) => {
                    panics::keep_first(&mut first, p);
                    if self.outstanding >= before {
                        // A panic that finished nothing (not a callback's).
                        break;
                    }
                }
            }
        }
        // Fills still in flight (only after such a panic) stop counting for
        // the thread all the same.
        for w in self.fills.iter() {
            w.job.note_queued(false);
        }
        // Pins of page requests nobody took (a queue dropped while its user
        // unwinds): released, or their pages could never be evicted or
        // written back again.
        for (_, p) in self.pins.drain(..) {
            if let Ok(pin) = p {
                // SAFETY: the pin came from `into_raw` of a guard of this queue's cache and leaves `pins` here, once.
                drop(unsafe { self.sh.cache.restore_pin(pin) });
            }
        }
        // Unwinding out of a drop that runs during another panic's unwinding
        // would abort the process: the queue's own panic is then dropped.
        panics::resume_first(first);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::cache::{CacheOptions, PolicyKind};
    use crate::{AlignedBuf, LayoutKind, Store};

    /// A child made by `fork` while this thread's queue had fills in flight
    /// drops its copy of the queue: the fills are left to the parent, but
    /// the thread's own count of them is undone, so that the thread (the
    /// child's only one) goes on as one with no queued I/O, as it may with
    /// a store of the child's own.
    #[test]
    fn a_forked_childs_queue_drop_undoes_the_threads_counts() {
        let dir = crate::cached::scratch_dir("fork-counts");
        // A device slow enough that the fills are still in flight at the
        // fork, however loaded the machine (the kernel's page cache answers
        // a real device's reads of this file at once, and a fill reaped by
        // the submit itself leaves nothing for the child to undo).
        let opts = crate::StoreOptions {
            engine: crate::EngineKind::Sim(crate::SimConfig {
                latency_us: (200_000, 300_000),
                ..crate::SimConfig::default()
            }),
            ..crate::StoreOptions::default()
        };
        let store = Store::open(&[&dir], opts).unwrap();
        let f = store.create("f", 256 * 4096, LayoutKind::Stripe).unwrap();
        let mut b = AlignedBuf::new(256 * 4096);
        b.fill(5);
        f.write_at(0, &b).unwrap();
        f.sync().unwrap();
        drop(f);
        let cs = CachedStore::new(store, crate::cached::small_cache(64)).unwrap();
        let cf = cs.open_file("f").unwrap();
        let mut q = cs.queue(32);
        q.submit(
            (0..32u64)
                .map(|p| CachedRequest::tagged(OpKind::Read, &cf, p * 4 * 4096, vec![0; 4096], p))
                .collect(),
        );
        assert!(crate::cache::queue_io(), "no fill counted for the thread");
        // SAFETY: the child only drops its copy of the queue and reads a
        // thread-local count, then `_exit`s.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            drop(q);
            let code = if crate::cache::queue_io() { 3 } else { 0 };
            // SAFETY: ends the child at once.
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        // SAFETY: waits for this test's child.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "the child's thread still counted queued fills after the queue's drop (status {status})"
        );
        q.drain();
        let mut done = Vec::new();
        q.take_completions(&mut done);
        assert_eq!(done.len(), 32);
        assert!(
            done.iter()
                .all(|(_, c)| c.result.is_ok() && c.buf.iter().all(|&x| x == 5))
        );
        drop(q);
        drop(cf);
        drop(cs);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A queued write of a page another thread writes back sleeps until the
    /// write-back ends, and is woken by its end: it does not poll the page
    /// meanwhile. (Many threads polling pages a write-back held took the
    /// CPUs from the kernel's completion of that very write, on two cores
    /// for up to 30 s.)
    #[test]
    fn a_write_to_a_page_under_write_back_sleeps_until_it_ends() {
        let dir = crate::cached::scratch_dir("wait-write-back");
        let store = Store::open(&[&dir], crate::StoreOptions::default()).unwrap();
        let cs = CachedStore::new(store, crate::cached::small_cache(64)).unwrap();
        let f = cs.create("f", 4096, LayoutKind::Stripe).unwrap();
        f.write_at(0, &[1; 4096]).unwrap();
        let cache = &f.shared.cache;
        let wb = cache.write_back(f.id, 0).unwrap().expect("page 0 dirty");
        let held = Duration::from_millis(300);
        let (ended, looks, done_at) = std::thread::scope(|s| {
            let ender = s.spawn(move || {
                std::thread::sleep(held);
                let at = std::time::Instant::now();
                wb.finish(Ok(())).unwrap();
                at
            });
            let mut q = cs.queue(4);
            q.submit(vec![CachedRequest::tagged(
                OpKind::Write,
                &f,
                0,
                vec![2; 4096],
                9,
            )]);
            assert_eq!(q.wait(1), 1, "the write did not finish");
            let done_at = std::time::Instant::now();
            let mut done = Vec::new();
            q.take_completions(&mut done);
            assert!(done[0].1.result.is_ok(), "{:?}", done[0].1.result);
            (ender.join().unwrap(), q.parked_looks, done_at)
        });
        assert!(done_at >= ended, "the write finished during the write-back");
        let late = done_at - ended;
        assert!(
            late < Duration::from_millis(100),
            "woken {late:?} after the write-back ended"
        );
        // One look when the write-back ends (a wake-up of the futex for
        // another change of the page's word may add a few).
        assert!(
            looks <= 5,
            "looked at the page {looks} times in {held:?} while it was written back"
        );
        let mut b = [0; 4096];
        f.read_at(0, &mut b).unwrap();
        assert_eq!(b, [2; 4096]);
        drop(f);
        drop(cs);
        let _ = std::fs::remove_dir_all(&dir);
    }

    const PAGES: u64 = 8192;

    /// Page `p` of the file in version `v`.
    fn page_bytes(p: u64, v: u8) -> impl Iterator<Item = u8> {
        (0..4096u64).map(move |i| (p * 31 + i * 7 + v as u64 * 101) as u8)
    }

    fn write_version(store: &Store, v: u8) {
        let f = store.open_file("f").unwrap();
        let mut buf = AlignedBuf::new((PAGES * 4096) as usize);
        for p in 0..PAGES {
            let at = (p * 4096) as usize;
            for (d, s) in buf[at..at + 4096].iter_mut().zip(page_bytes(p, v)) {
                *d = s;
            }
        }
        f.write_at_raw(0, &buf).unwrap();
    }

    /// Read every page through `q`, one page per request, and check it.
    fn read_all(q: &mut CachedQueue<'_>, cf: &CachedFile, v: u8, what: &str) {
        let mut done = Vec::new();
        for first in (0..PAGES).step_by(32) {
            let reqs = (first..first + 32)
                .map(|p| CachedRequest::tagged(OpKind::Read, cf, p * 4096, vec![0; 4096], p))
                .collect();
            q.submit(reqs);
        }
        q.drain();
        q.take_completions(&mut done);
        assert_eq!(done.len(), PAGES as usize, "{what}");
        for (p, c) in &done {
            assert!(c.result.is_ok(), "{what}: page {p}: {:?}", c.result);
            assert!(
                c.buf.iter().copied().eq(page_bytes(*p, v)),
                "{what}: page {p} has the wrong bytes"
            );
        }
    }

    /// Submit page requests for eight pages, every other one (reads that no
    /// run joins), wait for them, check them and let them go; returns how
    /// many device operations were left unsent after each request's start.
    fn eight_pages(q: &mut CachedQueue<'_>, cf: &CachedFile) -> Vec<usize> {
        q.unsent_after_start.clear();
        let mut reqs: Vec<_> = (0..8)
            .map(|i| CachedRequest::page(cf, i * 2 * 4096, i))
            .collect();
        q.submit_from(&mut reqs);
        q.drain();
        let mut got = Vec::new();
        q.take_pages(&mut got);
        assert!(got.len() == 8 && got.iter().all(|(_, g)| g.is_ok()));
        std::mem::take(&mut q.unsent_after_start)
    }

    /// A batch's misses go to the device one by one as they are claimed, not
    /// after the whole batch's lookups (on a store that batches submissions,
    /// at the batch's end); and a batch that mostly missed skips the frame
    /// pass of the next batch's hints, which one that hit keeps.
    #[test]
    fn a_batchs_misses_are_sent_as_they_are_claimed() {
        for eager in [true, false] {
            let dir = crate::cached::scratch_dir(&format!("sent-as-claimed-{eager}"));
            let opts = crate::StoreOptions {
                engine: crate::EngineKind::Uring,
                eager_submit: eager,
                ..crate::StoreOptions::default()
            };
            let store = Store::open(std::slice::from_ref(&dir), opts).unwrap();
            store.create("f", 64 * 4096, LayoutKind::Stripe).unwrap();
            let cs = CachedStore::with_flusher(store, CacheOptions::default(), None).unwrap();
            cs.set_readahead(0);
            let cf = cs.open_file("f").unwrap();
            let mut q = cs.queue(32);
            let unsent = eight_pages(&mut q, &cf);
            if eager {
                assert_eq!(
                    unsent,
                    vec![0; 8],
                    "each miss's read left the queue before the next request started"
                );
            } else {
                assert_eq!(
                    unsent,
                    (1..=8).collect::<Vec<_>>(),
                    "sent at the batch's end"
                );
            }
            assert!(q.missing, "a batch of misses");
            eight_pages(&mut q, &cf);
            assert!(!q.missing, "a batch of hits");
            drop(q);
            drop(cf);
            drop(cs);
            let _ = std::fs::remove_dir_all(&dir);
        }
    }

    /// Frames of sets added by a resize are read as fixed buffers too: each
    /// chunk of the frame region a queue's ring reads into is registered with
    /// it and held until the queue goes. A shrink meanwhile leaves the held
    /// chunks' pages mapped, so reads into them after the cache grows again
    /// still land in the memory the cache reads (giving those pages back
    /// under the registration would leave the device writing into pages the
    /// process no longer maps).
    #[test]
    fn frames_of_grown_sets_are_fixed_buffers_and_held_chunks_survive_a_shrink() {
        let (dir, store) = crate::storage::uring_store_for_tests("chunks");
        store.create("f", PAGES * 4096, LayoutKind::Stripe).unwrap();
        write_version(&store, 1);
        // The starting sets fill chunk 0 exactly; growth adds chunks 1 and 2.
        let chunk = crate::storage::io::fixed::CHUNK_BYTES;
        let cs = CachedStore::with_flusher(
            store,
            CacheOptions {
                size: chunk,
                max_size: Some(3 * chunk),
                page_size: 4096,
                assoc: 4,
                policy: PolicyKind::Gclock,
                pin_wait: Duration::from_secs(5),
                partitions: 1,
            },
            None,
        )
        .unwrap();
        // The queue's reads in order would start readahead, whose reads land
        // in the staging area: a chunk whose pages it all brought would not
        // be read into by the queue, nor registered (a flaky failure below).
        cs.set_readahead(0);
        let cache = cs.page_cache();
        let chunks = cache.frame_chunks();
        assert_eq!((chunks.count(), chunks.chunk_bytes()), (3, chunk));
        cache.resize(3 * chunk).unwrap();
        let cf = cs.open_file("f").unwrap();
        let mut q = cs.queue(32);
        read_all(&mut q, &cf, 1, "grown");
        assert!(
            (0..3).all(|c| chunks.held(c)),
            "every chunk, the grown sets' too, is registered with the queue's ring"
        );
        // Shrink (the grown sets' pages move into their buddies or are
        // dropped) and grow again while the ring holds the chunks.
        cache.resize(chunk).unwrap();
        cache.resize(3 * chunk).unwrap();
        for p in 0..PAGES {
            cache.evict(cf.id, p).unwrap();
        }
        assert!(cache.pages().is_empty());
        write_version(cs.store(), 2);
        read_all(&mut q, &cf, 2, "after a shrink under the registration");
        drop(q);
        assert!(
            (0..3).all(|c| !chunks.held(c)),
            "a queue lets go of its chunks when it goes"
        );
        // Now a shrink gives the grown sets' frames back, and a new queue
        // registers them again.
        cache.resize(chunk).unwrap();
        cache.resize(3 * chunk).unwrap();
        for p in 0..PAGES {
            cache.evict(cf.id, p).unwrap();
        }
        write_version(cs.store(), 3);
        let mut q = cs.queue(32);
        read_all(
            &mut q,
            &cf,
            3,
            "a new queue after the frames were given back",
        );
        assert!((0..3).all(|c| chunks.held(c)));
        drop(q);
        drop(cf);
        drop(cs);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
