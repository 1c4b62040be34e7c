//! The background flusher of a [`CachedStore`](crate::CachedStore).
//!
//! Writers tell the flusher about sets that hold many dirty pages: when a write
//! leaves `dirty_at` or more dirty pages in a set, the cache runs a hook that
//! queues the set (once, until the flusher is done with it). The flusher thread
//! takes queued sets and, for each, writes back the dirty pages its policy
//! would evict soonest, until the set is down to half the threshold, so that
//! evictions find clean pages and requesters rarely write a victim themselves.
//!
//! The due pages of a batch are written in file order, region by region: each
//! brings the other dirty, idle pages of its 256 KiB region of the file
//! ([`REGION_BYTES`]), due or not, so that the device gets writes that land
//! close together. Each page to write is extended into a run with its dirty neighbours in the
//! file (pages `p+1, p+2, ...` and `p-1, ...` that are cached, dirty and idle,
//! due or not), up to `max_merge` pages, and the run goes to the devices as one
//! write, straight from the frames (a vectored write: the frames of a run are
//! in different sets, so they are not contiguous). A requester that must write
//! a dirty victim itself extends it the same way ([`with_neighbours`]) and
//! writes the rest of the victim's region too. Up to
//! `depth` writes are in flight, through the flusher's own
//! asynchronous queue. A failed write leaves its pages dirty and is remembered
//! for the file's next `sync`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::cache::{PageCache, WriteBack};
use crate::cached::{Entry, Shared};
use crate::error::{Error, Result};
use crate::storage::file::OpKind;
use crate::storage::file::{DIRECT_ALIGN, Mem};
use crate::storage::queue::Queue;
use crate::util::slab::Slab;

/// How the flusher of a cached store works.
#[derive(Debug, Clone)]
pub struct FlushOptions {
    /// Dirty pages in one set that make the set due; `None` means half the
    /// set's pages.
    pub dirty_at: Option<usize>,
    /// Writes in flight at once.
    pub depth: usize,
    /// Most pages merged into one write.
    pub max_merge: usize,
}

impl Default for FlushOptions {
    fn default() -> Self {
        FlushOptions {
            dirty_at: None,
            depth: 64,
            max_merge: 32,
        }
    }
}

struct State {
    due: Mutex<Vec<usize>>,
    cv: Condvar,
    stop: AtomicBool,
    pages: AtomicU64,
    writes: AtomicU64,
}

pub(crate) struct Flusher {
    state: Arc<State>,
    thread: Option<JoinHandle<()>>,
}

impl Flusher {
    pub(crate) fn start(shared: Arc<Shared>, opts: FlushOptions) -> Result<Flusher> {
        let assoc = shared.cache.assoc();
        let at = opts.dirty_at.unwrap_or(assoc / 2).clamp(1, assoc);
        if opts.depth == 0 || opts.max_merge == 0 {
            return Err(Error::InvalidArgument(
                "flusher depth and max_merge must be at least 1".to_string(),
            ));
        }
        let state = Arc::new(State {
            due: Mutex::new(Vec::new()),
            cv: Condvar::new(),
            stop: AtomicBool::new(false),
            pages: AtomicU64::new(0),
            writes: AtomicU64::new(0),
        });
        let st = state.clone();
        // The hook runs under a set lock on a writer's thread: queue and wake.
        let installed = shared.cache.set_flush_hook(at, move |set| {
            st.due.lock().unwrap_or_else(|p| p.into_inner()).push(set);
            st.cv.notify_one();
        });
        if !installed {
            return Err(Error::InvalidArgument(
                "the cache already has a flusher".to_string(),
            ));
        }
        let st = state.clone();
        let low = at / 2;
        let thread = std::thread::Builder::new()
            .name("setcache-flush".to_string())
            .spawn(move || run(&shared, &st, low, opts))
            .map_err(|e| Error::InvalidArgument(format!("cannot start the flusher thread: {e}")))?;
        Ok(Flusher {
            state,
            thread: Some(thread),
        })
    }

    pub(crate) fn counts(&self) -> (u64, u64) {
        (
            self.state.pages.load(Ordering::Relaxed),
            self.state.writes.load(Ordering::Relaxed),
        )
    }

    pub(crate) fn stop(mut self) {
        self.state.stop.store(true, Ordering::SeqCst);
        {
            let _g = self.state.due.lock().unwrap_or_else(|p| p.into_inner());
            self.state.cv.notify_all();
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Extend the write-back of one dirty page into a run: its neighbours in the
/// file (`p+1, p+2, ...` then `p-1, ...`) that are cached, dirty and idle join
/// it, due or not, up to `max` pages in all. Returns the run's first page and
/// the guards in file order. Never waits: a busy neighbour ends the run.
pub(crate) fn with_neighbours<'a>(
    cache: &'a PageCache,
    first: WriteBack<'a>,
    file_len: u64,
    max: usize,
) -> (u64, Vec<WriteBack<'a>>) {
    let (file, page) = (first.file(), first.page());
    let pages_in_file = file_len.div_ceil(cache.page_size() as u64);
    let mut after = Vec::new();
    let mut p = page + 1;
    while after.len() + 1 < max && p < pages_in_file {
        match cache.write_back(file, p) {
            Ok(Some(w)) => after.push(w),
            _ => break,
        }
        p += 1;
    }
    let mut before = Vec::new();
    let mut p = page;
    while before.len() + after.len() + 1 < max && p > 0 {
        p -= 1;
        match cache.write_back(file, p) {
            Ok(Some(w)) => before.push(w),
            _ => break,
        }
    }
    let start = page - before.len() as u64;
    let mut pages: Vec<WriteBack<'a>> = before.into_iter().rev().collect();
    pages.push(first);
    pages.extend(after);
    (start, pages)
}

/// A write in flight: its pages' write-back guards and their file.
struct Run<'a> {
    /// The file (its entry, so that finishing needs no table lookup).
    entry: Arc<Entry>,
    pages: Vec<WriteBack<'a>>,
}

/// Writes dirty pages back through an asynchronous queue, each page merged
/// with its dirty neighbours in the file into one write; used by the flusher
/// and by `sync`. Failures are remembered for the file's next `sync` (and the
/// pages stay dirty).
pub(crate) struct Writer<'a> {
    shared: &'a Shared,
    q: Queue,
    /// Writes finished: (run, result).
    done: Vec<(usize, Result<()>)>,
    /// Frames of the run being sent.
    frames: Vec<*mut u8>,
    runs: Slab<Run<'a>>,
    max_merge: usize,
    /// Pages written and device writes issued, successful or not.
    pub(crate) pages: u64,
    pub(crate) writes: u64,
    /// The first failure seen.
    pub(crate) failed: Option<Error>,
}

impl<'a> Writer<'a> {
    /// A writer with `depth` writes in flight. With `register`, its rings
    /// register the cache's frames as fixed buffers (worth it for a
    /// long-lived writer such as the flusher; a `sync` skips it).
    pub(crate) fn new(
        shared: &'a Shared,
        depth: usize,
        max_merge: usize,
        register: bool,
    ) -> Writer<'a> {
        let mut q = Queue::new(depth);
        if register {
            // SAFETY: the frames stay mapped while the cache lives, the cache
            // outlives this writer, and it gives frames back to the kernel
            // only through the chunk table.
            unsafe { q.register_frames(shared.cache.frame_chunks()) };
        }
        q.set_batched();
        Writer {
            shared,
            q,
            done: Vec::new(),
            frames: Vec::new(),
            runs: Slab::new(),
            max_merge: max_merge.max(1),
            pages: 0,
            writes: 0,
            failed: None,
        }
    }

    /// Writes in flight.
    pub(crate) fn in_flight(&self) -> usize {
        self.q.in_flight()
    }

    /// Start writing `page` of `file` back, with its dirty neighbours, if it is
    /// cached, dirty and idle. Returns whether a write was started.
    pub(crate) fn write(&mut self, file: u32, page: u64) -> bool {
        let cache = &self.shared.cache;
        let ps = cache.page_size() as u64;
        let Ok(Some(first)) = cache.write_back(file, page) else {
            return false; // clean now, busy, or not cached
        };
        let entry = match self.shared.entry(file) {
            Ok(e) if page * ps < e.file.len() => e,
            // The file is gone, or the page is past its end (a shrink is
            // dropping it): nothing to write.
            _ => {
                let _ = first.finish(Ok(()));
                return true;
            }
        };
        let file_len = entry.file.len();
        let (start, pages) = with_neighbours(cache, first, file_len, self.max_merge);
        let off = start * ps;
        let len = file_len.saturating_sub(off).min(pages.len() as u64 * ps) as usize;
        if len as u64 % DIRECT_ALIGN != 0 {
            // The file ends inside a sector: write through the cache's own
            // path, which handles the tail.
            let r = pages
                .iter()
                .try_for_each(|w| self.shared.store_page(file, w.page(), w.bytes()));
            let slot = self.runs.insert(Run {
                entry: entry.clone(),
                pages,
            });
            self.done.push((slot, r));
        } else {
            self.frames.clear();
            self.frames
                .extend(pages.iter().map(|w| w.bytes().as_ptr() as *mut u8));
            let mem = if pages.len() == 1 {
                Mem::One(self.frames[0])
            } else {
                Mem::Pieces(&self.frames, ps as usize)
            };
            let slot = self.runs.insert(Run {
                entry: entry.clone(),
                pages,
            });
            // SAFETY: the write-back guards in `runs` under `slot` keep every
            // page in its frame and keep writers out until the write's tag
            // comes back; the device only reads the frames.
            unsafe {
                self.q
                    .submit_raw(OpKind::Write, &entry.file, off, mem, len, slot);
            }
        }
        self.settle();
        true
    }

    /// Finish the runs whose writes completed.
    pub(crate) fn settle(&mut self) {
        self.q.take_tagged(&mut self.done);
        for (slot, r) in std::mem::take(&mut self.done) {
            let run = self.runs.remove(slot).expect("a write in flight");
            match &r {
                // The file shrank after the write was prepared: the pages
                // stay dirty, and their next write-back writes what is still
                // inside the file.
                Err(Error::OutOfRange { .. }) => {}
                Err(e) => {
                    run.entry.remember(e.clone());
                    self.failed.get_or_insert_with(|| e.clone());
                }
                Ok(()) => run.entry.written(run.pages.iter().map(|w| w.page())),
            }
            self.pages += run.pages.len() as u64;
            self.writes += 1;
            for wb in run.pages {
                let _ = wb.finish(r.clone());
            }
        }
    }

    /// Send what is queued and reap completions without blocking.
    pub(crate) fn poll(&mut self) {
        self.q.flush_now();
        self.q.poll();
        self.settle();
    }

    /// Block until at least one write completes (if any is in flight).
    pub(crate) fn wait_one(&mut self) {
        self.q.wait(1);
        self.settle();
    }

    /// Wait for every write in flight.
    pub(crate) fn drain(&mut self) {
        self.q.drain();
        self.settle();
    }
}

/// Bytes of the file region whose dirty pages are written together.
///
/// The disk here (and SSDs generally, whose mapping units and write buffers
/// span many pages) takes writes that land close together in time and offset
/// much faster than scattered ones: fio on the bench file, random 4 KiB writes
/// at depth 32 in a replayed log, 85-87k/s scattered against 157k/s when the
/// writes come as eight to a random 256 KiB region. So whenever a page is
/// written back, the other dirty pages of its region go right behind it.
pub(crate) const REGION_BYTES: u64 = 256 << 10;

/// The pages of the write-back region of `page` of `file` below page `end`
/// that look dirty and idle (a lock-free hint per page), in file order.
pub(crate) fn dirty_in_region(
    cache: &PageCache,
    file: u32,
    page: u64,
    end: u64,
) -> impl Iterator<Item = u64> + '_ {
    let r = (REGION_BYTES / cache.page_size() as u64).max(1);
    let first = page / r * r;
    (first..(first + r).min(end)).filter(move |&q| cache.dirty_hint(file, q))
}

/// Due sets the flusher lets gather while its writes keep the device busy.
const GATHER: usize = 4096;

fn run(shared: &Shared, st: &State, low: usize, opts: FlushOptions) {
    let cache = &shared.cache;
    let mut w = Writer::new(shared, opts.depth, opts.max_merge, true);
    let (mut pages, mut writes) = (0, 0);
    let mut report = |w: &Writer<'_>| {
        st.pages.fetch_add(w.pages - pages, Ordering::Relaxed);
        st.writes.fetch_add(w.writes - writes, Ordering::Relaxed);
        (pages, writes) = (w.pages, w.writes);
    };
    loop {
        // While the device is busy, let due sets gather: a larger batch,
        // sorted, gives longer ascending runs and more merged neighbours.
        while w.in_flight() > opts.depth / 2
            && st.due.lock().unwrap_or_else(|p| p.into_inner()).len() < GATHER
            && !st.stop.load(Ordering::SeqCst)
        {
            w.wait_one();
            report(&w);
        }
        let due: Vec<usize> = {
            let mut g = st.due.lock().unwrap_or_else(|p| p.into_inner());
            while g.is_empty() && !st.stop.load(Ordering::SeqCst) && w.in_flight() == 0 {
                g = st
                    .cv
                    .wait_timeout(g, Duration::from_millis(100))
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
            }
            std::mem::take(&mut *g)
        };
        if st.stop.load(Ordering::SeqCst) {
            break;
        }
        // The pages each due set's policy would evict soonest, written in
        // file order: the device sees ascending offsets, and neighbours that
        // are both due end up in one write.
        let mut pages = Vec::new();
        for set in due {
            let (order, dirty) = cache.dirty_in_eviction_order(set);
            let want = dirty.saturating_sub(low).max(1);
            pages.extend(order.into_iter().take(want));
            cache.flushed(set);
        }
        pages.sort_unstable();
        // Each due page brings the other dirty pages of its region, due or
        // not, in file order (see `REGION_BYTES`).
        let r = (REGION_BYTES / cache.page_size() as u64).max(1);
        let mut swept: Option<(u32, u64)> = None;
        for (file, page) in pages {
            if swept == Some((file, page / r)) {
                continue;
            }
            swept = Some((file, page / r));
            for q in dirty_in_region(cache, file, page, u64::MAX) {
                w.write(file, q);
            }
        }
        w.poll();
        if w.in_flight() > 0 && st.due.lock().unwrap_or_else(|p| p.into_inner()).is_empty() {
            w.wait_one();
        }
        report(&w);
    }
    w.drain();
    report(&w);
}
