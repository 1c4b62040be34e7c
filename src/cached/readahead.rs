//! Readahead: sequential streams are detected where they read, and the pages
//! ahead of them are read by a background thread.
//!
//! **Detection.** Each thread keeps a small table of the streams it has been
//! reading ([`STREAMS`] of them; a new entry replaces the next one round the
//! table that is not a stream in recent use): file,
//! where its last read ended, how many reads in a row continued it. A read
//! continues a stream when it starts less than a page before where the
//! stream's last read ended, or after it by less than a page and no more
//! than its own length, and goes past it; any other read starts a new entry
//! (small reads wandering about a page skip more than they read). A read
//! that continues a stream counts only if it reaches a page past the one
//! the stream's last read ended in (small reads in order count once a page),
//! and the count starts again when the entry was last used more than
//! [`STREAMS`] reads before: a reader coming back near where it read long
//! ago is not scanning. So several threads scanning their own regions of one file, or
//! one thread interleaving a few scans, each keep their own stream, and
//! detecting costs a random reader a look at a thread-local table, with no
//! write to shared memory. The second read in a row makes a stream
//! (`Advice::Sequential`: the first; `Advice::Random`: never).
//!
//! **Windows.** A new stream asks for a window of pages just past its read:
//! four times the read, at least [`MIN_WINDOW`] pages. When a read enters the
//! last window asked for (the kernel's asynchronous readahead marker sits at
//! its start), the next window is asked for, twice as large, up to the
//! largest window (`max_pages`, [`DEFAULT_MAX_BYTES`] by default, and at most
//! a twenty-fourth of the cache): between one and two windows stay ahead of
//! the reader, and between two and three once they are the largest, so it
//! finds its pages read when it gets there. A reader that outruns the
//! windows (a long read, or a device slower than the reader) restarts them
//! from where it is, with the larger size. A stream that turns random stops asking: its table entry
//! ages out. Windows end at the end of the file.
//!
//! **The readahead thread** (`setcache-ahead`, one per cached store) takes
//! the windows as they come and reads them in turn, one run of each window
//! per turn, so that the front of a stream's new window goes out right
//! after the reads in flight rather than behind other streams' whole
//! windows; a window that continues one being read joins its end, so a
//! stream's runs reach the device in file order. Each page that is absent
//! and whose sets have a free slot or a cold clean idle page to give is
//! claimed cold, as a fill (a page
//! present, being filled, or in sets with no such room is skipped: readahead
//! never waits, never writes a victim back, and never evicts a page that
//! somebody used). Claimed pages that follow
//! one another go out as one read of up to 512 KiB (a staging slot), which
//! the storage layer cuts at stripe blocks into one operation per device
//! (blocks that follow one another on a device stay one operation); up to
//! [`DEPTH`] reads are in flight on the thread's own queue. A run of eight
//! pages or more is read into a slot of the store's staging area (see
//! `cached::staging`) and each page then copied to its frame; a shorter run,
//! or one that finds no free slot, is a vectored read straight into the
//! frames; the copy streams (`util::stream`), so it neither reads the frames
//! first nor fills the thread's caches with them. A reader that gets to a
//! page still being read waits for that fill, as for any other requester's.
//!
//! **Cold pages.** A page read ahead enters the cache *cold*: among the clean
//! idle pages of its sets it is evicted first. A stream's reads leave it cold
//! (and a page a stream misses enters cold too), so a scan that does not fit
//! the cache replaces its own pages, not a hot set that does; any other read
//! or a write makes the page an ordinary one. `CacheStats::readahead` counts
//! the pages read ahead, `readahead_used` those a stream then read.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;

use crate::cache::Fill;
use crate::cached::shared::{Entry, Shared, Window};
use crate::cached::staging::{MIN_PAGES, Slot, run_pages};
use crate::error::{Error, Result};
use crate::storage::file::{DIRECT_ALIGN, Mem, OpKind};
use crate::storage::queue::Queue;
use crate::util::slab::Slab;
use crate::util::stream::{copy_streaming, fence};

/// How a file will be read, after `posix_fadvise`; see
/// [`CachedFile::advise`](crate::CachedFile::advise).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Advice {
    /// Detect sequential streams (the default).
    Normal,
    /// Expect sequential reads: every read starts a stream, with the largest
    /// window at once.
    Sequential,
    /// Expect random reads: no readahead for the file.
    Random,
    /// Start reading the range into the cache now (cold, as read ahead).
    WillNeed,
    /// The range will not be needed soon: its clean cached pages go first.
    DontNeed,
}

/// The largest readahead window by default (the device's own readahead
/// setting here, `read_ahead_kb`, is 8 MiB too).
pub const DEFAULT_MAX_BYTES: usize = 8 << 20;
/// Streams each thread keeps track of.
pub(crate) const STREAMS: usize = 8;
/// The smallest first window, in pages.
pub(crate) const MIN_WINDOW: u64 = 16;
/// Reads the readahead thread keeps in flight: 32 MiB of runs of 512 KiB,
/// enough for four streams' windows at once.
pub(crate) const DEPTH: usize = 64;

/// The advice a file's entry holds, as a number.
pub(crate) fn advice_code(a: Advice) -> u8 {
    match a {
        Advice::Sequential => 1,
        Advice::Random => 2,
        _ => 0,
    }
}

/// What a thread knows of one of its streams, beside its key and position.
#[derive(Clone, Copy)]
struct Stream {
    /// Reads in a row that continued the stream.
    seen: u32,
    /// The page after the last window asked for (0: none yet).
    ahead: u64,
    /// Pages of the last window asked for.
    window: u64,
    /// When the entry was last used (the thread's read count).
    used: u64,
}

const FREE: Stream = Stream {
    seen: 0,
    ahead: 0,
    window: 0,
    used: 0,
};

/// A thread's streams, the positions apart so that a random read's search
/// looks at one cache line of them.
struct Table {
    /// The byte after each stream's last read.
    next: [u64; STREAMS],
    /// The cached store's address (0: a free entry) and the file.
    key: [(usize, u32); STREAMS],
    st: [Stream; STREAMS],
    /// Reads noted so far.
    clock: u64,
    /// Where the next new entry goes.
    hand: usize,
}

/// How many of a stream's largest windows stay ahead of its reader, at
/// least: once its windows are the largest, the next one is asked for when a
/// read enters the last `LEAD` of them (smaller windows, growing, keep one
/// ahead: a stream that stops early reads no more than before). One was too
/// few: a window of 8 MiB takes the readahead thread a few milliseconds to
/// claim and send, and a fast reader crossed the one ahead of it before the
/// next one's pages were all read.
const LEAD: u64 = 2;

/// How many pages ahead of its claim the readahead thread asks for a page's
/// sets.
const PREFETCH_AHEAD: u64 = 4;

/// An entry used within this many reads is not replaced while others are.
const RECENT: u64 = 4 * STREAMS as u64;

/// A thread's last pages counted as read ahead and used, (store, file,
/// page + 1), and where the next goes.
type UsedPages = ([(usize, u32, u64); STREAMS], usize);

#[cfg(test)]
thread_local! {
    /// Windows this thread's reads sent to the readahead thread.
    static SENT: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

thread_local! {
    static TABLE: RefCell<Table> = const {
        RefCell::new(Table {
            next: [0; STREAMS],
            key: [(0, 0); STREAMS],
            st: [FREE; STREAMS],
            clock: 0,
            hand: 0,
        })
    };
    /// The last cold pages counted as used, as many as streams a table holds.
    static USED: RefCell<UsedPages> = const { RefCell::new(([(0, 0, 0); STREAMS], 0)) };
    /// The last page taken as a whole by a page reference, and whether it
    /// belonged to a stream: (store, file, page + 1, stream).
    static LAST_PAGE: Cell<(usize, u32, u64, bool)> = const { Cell::new((0, 0, 0, false)) };
}

/// Note a read of `len` bytes at `offset` of cache file `id` (entry `entry`)
/// by this thread: returns whether it belongs to a sequential stream (its
/// pages are then read as a stream's), and asks for the window due, if any,
/// unless the caller has `in_flight` bytes of reads under way that reach the
/// largest window (it then reads ahead of itself).
pub(crate) fn note_read(
    sh: &Shared,
    entry: &Arc<Entry>,
    id: u32,
    offset: u64,
    len: u64,
    in_flight: u64,
) -> bool {
    let max = sh.ahead.max_pages.load(Ordering::Relaxed) as u64;
    let advice = entry.advice.load(Ordering::Relaxed);
    if max == 0 || len == 0 || advice == advice_code(Advice::Random) {
        return false;
    }
    let ps = sh.cache.page_size() as u64;
    let key = (sh as *const Shared as usize, id);
    let end = offset.saturating_add(len);
    let (stream, want) = TABLE.with(|t| {
        let t = &mut *t.borrow_mut();
        t.clock += 1;
        // A read continues a stream if it starts less than a page before
        // where the stream's last read ended, or after it by less than a page
        // and at most its own length, and goes past it: a reader that skips
        // more than it reads is not scanning (small reads wandering about a
        // page, as a walk over a graph's records does, would be).
        let skip = len.min(ps - 1);
        let near =
            |next: u64| offset.wrapping_add(ps).wrapping_sub(next).wrapping_sub(1) < ps + skip;
        let hit = (0..STREAMS).find(|&k| near(t.next[k]) && end > t.next[k] && t.key[k] == key);
        let k = match hit {
            Some(k) => {
                // Reads in a row that reach a page past the one the stream's
                // last read ended in (small reads in order count once a
                // page; reads wandering about a page, hardly ever). An entry
                // left alone for more reads than the table holds starts
                // counting again: a reader coming back near where it read
                // long ago is not scanning.
                let s = &mut t.st[k];
                if t.clock - s.used > STREAMS as u64 {
                    s.seen = 1;
                } else if (end - 1) & !(ps - 1) != (t.next[k] - 1) & !(ps - 1) {
                    // (`end > next` here, and pages are a power of two.)
                    s.seen = s.seen.saturating_add(1);
                }
                k
            }
            None => {
                // The hand passes streams in recent use (up to a turn).
                let mut k = t.hand;
                for _ in 0..STREAMS {
                    let s = &t.st[k];
                    if s.seen < 2 || t.clock - s.used > RECENT {
                        break;
                    }
                    k = (k + 1) % STREAMS;
                }
                t.hand = (k + 1) % STREAMS;
                t.key[k] = key;
                t.st[k] = Stream { seen: 1, ..FREE };
                k
            }
        };
        t.next[k] = end;
        let clock = t.clock;
        let s = &mut t.st[k];
        s.used = clock;
        let sequential = advice == advice_code(Advice::Sequential);
        if s.seen < 2 && !sequential {
            return (false, None);
        }
        if in_flight >= max * ps {
            return (true, None);
        }
        // At most `LEAD + 1` windows are ahead of a stream: an eighth of
        // the cache.
        let max = max.min((sh.cache.capacity_pages() as u64 / (8 * (LEAD + 1))).max(1));
        let after = end.div_ceil(ps);
        let start = if s.ahead == 0 || after > s.ahead {
            // A new stream, or a reader past every window: start from here.
            s.window = if s.ahead == 0 {
                let first = if sequential {
                    max
                } else {
                    (len.div_ceil(ps) * 4).max(MIN_WINDOW)
                };
                first.min(max)
            } else {
                (s.window * 2).min(max)
            };
            after
        } else if after + s.window * if s.window >= max { LEAD } else { 1 } > s.ahead {
            // The read entered the last window (the last `LEAD` once they
            // are the largest): ask for the next one.
            s.window = (s.window * 2).min(max);
            s.ahead
        } else {
            return (true, None);
        };
        s.ahead = start + s.window;
        (true, Some((start, s.window)))
    });
    if let Some((first, pages)) = want {
        let file_pages = entry.file.len().div_ceil(ps);
        let pages = pages.min(file_pages.saturating_sub(first));
        // A window whose first and last pages are cached already is most
        // likely cached whole (a reader going over what it read before, or
        // two neighbours read in a row by chance among random reads of a few
        // hot pages): not sent, as waking the readahead thread for it would
        // cost more than it saves.
        let cached =
            || sh.cache.is_present(id, first) && sh.cache.is_present(id, first + pages - 1);
        if pages > 0 && !cached() {
            #[cfg(test)]
            SENT.with(|c| c.set(c.get() + 1));
            sh.ahead.push_stream(Window {
                entry: entry.clone(),
                id,
                first,
                pages,
            });
        }
    }
    stream
}

/// Note a page reference to `page` of cache file `id` (entry `entry`) by
/// this thread, as a read of the whole page: returns whether it belongs to
/// a sequential stream, as [`note_read`] (`in_flight` as there). A guard
/// gives its holder the whole page, wherever in it the asked offset lies, so
/// a reader that takes the same page again (a parser walking the records of
/// a page through one reference each) notes it once: the repeats answer as
/// the first did, and change no stream.
pub(crate) fn note_page(
    sh: &Shared,
    entry: &Arc<Entry>,
    id: u32,
    page: u64,
    in_flight: u64,
) -> bool {
    let key = (sh as *const Shared as usize, id, page + 1);
    let (s, f, p, stream) = LAST_PAGE.with(Cell::get);
    if (s, f, p) == key {
        return stream;
    }
    let ps = sh.cache.page_size() as u64;
    let off = page.saturating_mul(ps);
    let len = entry.file.len().saturating_sub(off).min(ps);
    let stream = note_read(sh, entry, id, off, len, in_flight);
    LAST_PAGE.with(|c| c.set((key.0, key.1, key.2, stream)));
    stream
}

/// A stream's read found `page` of cache file `id` cold, brought in by
/// another (readahead): count it as a page read ahead and used, once however
/// many reads it takes, as long as it is among the last pages so counted
/// on this thread (as many as streams a thread's table holds, so that
/// interleaved streams of small reads count each page once).
pub(crate) fn note_used(sh: &Shared, id: u32, page: u64) {
    if remember_used(sh, id, page) {
        sh.cache.count_readahead_used(1);
    }
}

/// A stream's read brought `page` of cache file `id` in itself: not read
/// ahead, and its later reads of the page (which find it cold) count
/// nothing either.
pub(crate) fn note_own(sh: &Shared, id: u32, page: u64) {
    remember_used(sh, id, page);
}

/// Add `page` to this thread's last pages used; whether it was not there.
fn remember_used(sh: &Shared, id: u32, page: u64) -> bool {
    let key = (sh as *const Shared as usize, id, page + 1);
    USED.with(|u| {
        let (keys, next) = &mut *u.borrow_mut();
        if keys.contains(&key) {
            return false;
        }
        keys[*next] = key;
        *next = (*next + 1) % STREAMS;
        true
    })
}

/// The readahead thread of a cached store.
pub(crate) struct Reader {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Reader {
    pub(crate) fn start(shared: Arc<Shared>) -> Result<Reader> {
        let sh = shared.clone();
        let thread = crate::util::fork_locks::spawn(
            std::thread::Builder::new().name("setcache-ahead".to_string()),
            move || run(&sh),
        )
        .map_err(|e| Error::os_call("cannot start the readahead thread", e))?;
        Ok(Reader {
            shared,
            thread: Some(thread),
        })
    }

    /// Stop the thread once its reads in flight are done; windows not yet
    /// started are dropped.
    pub(crate) fn stop(mut self) {
        {
            let mut q = self
                .shared
                .ahead
                .queue
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            q.1 = true;
            q.0.clear();
            self.shared.ahead.cv.notify_all();
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Claimed pages that follow one another, gathered into one read.
struct Run<'a> {
    entry: Arc<Entry>,
    offset: u64,
    next: u64,
    len: usize,
    fills: Vec<Fill<'a>>,
}

/// A read in flight: its fills, its run's length, and its staging slot.
struct Op<'a> {
    fills: Vec<Fill<'a>>,
    len: usize,
    slot: Option<Slot>,
}

/// The readahead thread's state.
struct Worker<'a> {
    sh: &'a Shared,
    q: Queue,
    ops: Slab<Op<'a>>,
    frames: Vec<*mut u8>,
    done: Vec<(usize, Result<()>)>,
    run: Option<Run<'a>>,
}

fn run(sh: &Shared) {
    // No frames registered as fixed buffers: runs of pages are vectored
    // reads, which cannot use them, and a registration would keep the
    // frames' chunks from going back to the kernel when the cache shrinks.
    let mut w = Worker {
        sh,
        q: Queue::new(DEPTH),
        ops: Slab::new(),
        frames: Vec::new(),
        done: Vec::new(),
        run: None,
    };
    // Windows being read, in turn: one run of each per turn, so that the
    // front of a stream's new window goes out after the reads in flight,
    // not after the whole windows of other streams asked for before it.
    let mut active: VecDeque<Window> = VecDeque::new();
    let run_max = run_pages(sh.cache.page_size()) as u64;
    loop {
        {
            let mut g = sh.ahead.queue.lock().unwrap_or_else(|p| p.into_inner());
            while g.0.is_empty() && !g.1 && active.is_empty() && w.q.in_flight() == 0 {
                sh.ahead.waiting.store(true, Ordering::Relaxed);
                g = sh.ahead.cv.wait(g).unwrap_or_else(|p| p.into_inner());
            }
            sh.ahead.waiting.store(false, Ordering::Relaxed);
            if g.1 {
                break;
            }
            // The rest wait in the queue (where a stream's windows then find
            // it full), so that windows asked for faster than they are read
            // cost neither memory nor time without bound.
            while active.len() < ACTIVE_WINDOWS {
                let Some(win) = g.0.pop_front() else {
                    break;
                };
                join_window(&mut active, win);
            }
        }
        // Up to the queue's depth, one run of the next window at a time.
        while w.q.in_flight() < w.q.depth() {
            let Some(mut win) = active.pop_front() else {
                break;
            };
            if w.read(&mut win, run_max) {
                active.push_back(win);
            }
        }
        w.send();
        w.q.flush_now();
        if w.q.in_flight() > 0 {
            let idle = active.is_empty()
                && sh
                    .ahead
                    .queue
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .0
                    .is_empty();
            if idle || w.q.in_flight() >= w.q.depth() {
                w.q.wait(1);
            } else {
                w.q.poll();
            }
        }
        w.finish();
    }
    w.send();
    w.q.drain();
    w.finish();
}

/// Most windows the readahead thread reads in turn.
const ACTIVE_WINDOWS: usize = 256;

/// Add `win` to the windows being read: to the end of the one it continues
/// (a stream's next window), so that a stream's runs reach the device in
/// file order, or as a window of its own.
fn join_window(active: &mut VecDeque<Window>, win: Window) {
    let prev = active.iter_mut().find(|a| {
        a.id == win.id && Arc::ptr_eq(&a.entry, &win.entry) && a.first + a.pages == win.first
    });
    match prev {
        Some(a) => a.pages += win.pages,
        None => active.push_back(win),
    }
}

/// In unit tests: run once by the readahead thread of the cached store whose
/// shared state is at this address, right after it sent a run's read.
#[cfg(test)]
pub(crate) static AFTER_SEND: crate::util::hook::TestHook<usize, Box<dyn FnOnce() + Send>> =
    crate::util::hook::TestHook::new();

/// In unit tests: run once by the readahead thread, between its read of a
/// window's file length and its claims, for the file whose entry is at this
/// address.
#[cfg(test)]
pub(crate) static AFTER_LENGTH: crate::util::hook::TestHook<usize, Box<dyn FnOnce() + Send>> =
    crate::util::hook::TestHook::new();

impl Drop for Worker<'_> {
    /// The thread ends, or unwinds from a panic: its reads in flight end
    /// first (they land in staging slots and frames), then the staging slots
    /// of the reads it had not finished go back to the store, and their
    /// fills are dropped (their pages stay absent, read again by whoever
    /// wants them).
    fn drop(&mut self) {
        // The queue's own drop waits for every read in flight, also when a
        // panic is unwinding.
        drop(std::mem::replace(&mut self.q, Queue::new(1)));
        for op in self.ops.take_all() {
            if let Some(slot) = op.slot {
                self.sh.staging.give(slot);
            }
        }
        // No window is read from now on: the thread looks stopped (idle,
        // and refusing advice), not alive with a queue that only grows.
        let ahead = &self.sh.ahead;
        let mut q = ahead.queue.lock().unwrap_or_else(|p| p.into_inner());
        if !q.1 && std::thread::panicking() {
            ahead.failed.store(true, Ordering::Relaxed);
        }
        q.1 = true;
        q.0.clear();
        ahead.cv.notify_all();
    }
}

impl<'a> Worker<'a> {
    /// Claim the absent pages among the first `turn` pages of window `win`
    /// and send their reads; `win` keeps the rest. Returns whether pages
    /// are left to read.
    fn read(&mut self, win: &mut Window, turn: u64) -> bool {
        if win.entry.check().is_err() {
            return false;
        }
        let cache = &self.sh.cache;
        let ps = cache.page_size() as u64;
        let mut len = win.entry.file.len();
        #[cfg(test)]
        if let Some(between) = AFTER_LENGTH.take(Arc::as_ptr(&win.entry) as usize) {
            between();
        }
        let end = win.first + win.pages.min(turn);
        for page in win.first..end {
            // The claims' sets are scattered over the cache: ask for a later
            // page's lines while this one is claimed.
            if page + PREFETCH_AHEAD < end {
                cache.prefetch(win.id, page + PREFETCH_AHEAD, false);
            }
            let off = page * ps;
            if off >= len {
                return false;
            }
            let n = (len - off).min(ps) as usize;
            if !(n as u64).is_multiple_of(DIRECT_ALIGN) {
                // A tail of part of a sector: left to its reader.
                return false;
            }
            let fill = match cache.claim_ahead(win.id, page) {
                Ok(Some(f)) => f,
                Ok(None) => {
                    self.send();
                    continue;
                }
                Err(_) => return false,
            };
            // The length again, the page claimed: a write that grew the file
            // over this page (which then left the cache) before the claim
            // shows now, and one after it waits for this fill. Sized by the
            // length read before the claim, the page could come in with zeros
            // over those bytes.
            len = win.entry.file.len();
            let n = match len.checked_sub(off) {
                Some(left) if left > 0 && left.min(ps) % DIRECT_ALIGN == 0 => left.min(ps) as usize,
                _ => {
                    drop(fill);
                    self.send();
                    return false;
                }
            };
            self.add(win, page, n, fill);
        }
        self.send();
        win.pages -= end - win.first;
        win.first = end;
        win.pages > 0
    }

    /// Add the claimed `fill` of `page` (`n` bytes inside the file) to the
    /// run being gathered, or start a new run with it.
    fn add(&mut self, win: &Window, page: u64, n: usize, mut fill: Fill<'a>) {
        let ps = self.sh.cache.page_size();
        if n < ps {
            fill.frame_mut()[n..].fill(0);
        }
        win.entry.note_fill(page);
        let ptr = fill.frame_ptr();
        if let Some(run) = self.run.as_mut()
            && Arc::ptr_eq(&run.entry, &win.entry)
            && run.next == page
            && run.len % ps == 0
            && run.fills.len() < run_pages(ps)
        {
            run.fills.push(fill);
            self.frames.push(ptr);
            run.len += n;
            run.next += 1;
            return;
        }
        self.send();
        self.frames.clear();
        self.frames.push(ptr);
        self.run = Some(Run {
            entry: win.entry.clone(),
            offset: page * ps as u64,
            next: page + 1,
            len: n,
            fills: vec![fill],
        });
    }

    /// Send the run being gathered as one read into its frames.
    fn send(&mut self) {
        let Some(run) = self.run.take() else {
            return;
        };
        let ps = self.sh.cache.page_size();
        let slot = (run.fills.len() >= MIN_PAGES)
            .then(|| self.sh.staging.take())
            .flatten();
        let mem = match &slot {
            Some(s) => Mem::One(s.ptr()),
            None => Mem::frames(&self.frames, ps),
        };
        let tag = self.ops.insert(Op {
            fills: run.fills,
            len: run.len,
            slot,
        });
        // The memory is a staging slot taken from the free list, or the
        // frames of the run, claimed by fills held in `self.ops`.
        // SAFETY: nobody else uses either until the operation's tag comes back.
        unsafe {
            self.q
                .submit_raw(OpKind::Read, &run.entry.file, run.offset, mem, run.len, tag);
        }
        // Each run goes at once: the reader may be close behind.
        self.q.flush_now();
        self.frames.clear();
        #[cfg(test)]
        if let Some(after) = AFTER_SEND.take(self.sh as *const Shared as usize) {
            after();
        }
        self.finish();
    }

    /// Publish the pages of the reads that came back (a failed read drops
    /// its pages: their readers read them again and meet the error).
    fn finish(&mut self) {
        self.q.take_tagged(&mut self.done);

        let ps = self.sh.cache.page_size();
        for (tag, r) in self.done.drain(..) {
            let Some(mut op) = self.ops.remove(tag) else {
                continue;
            };
            // The state words' lines arrive while the pages are copied.
            for f in &op.fills {
                f.prefetch_state();
            }
            if let Some(slot) = op.slot {
                if r.is_ok() {
                    for (f, src) in op.fills.iter_mut().zip(slot.pages(op.len, ps)) {
                        copy_streaming(&mut f.frame_mut()[..src.len()], src);
                    }
                    // The pages are published below, after the streamed stores.
                    fence();
                }
                self.sh.staging.give(slot);
            }
            // Last page first: a reader waiting at the run's front is
            // woken when the whole run is there. Woken on this thread's CPU,
            // it runs at once, ahead of this thread (the kernel's wake-up
            // preemption); in file order it found a page or a few, waited for
            // the next and handed the CPU back (measured: a 128 KiB scan made
            // 7,487 context switches in 5 s in file order, 2,468 this way, at
            // the same rate).
            for f in op.fills.into_iter().rev() {
                drop(f.finish(r.clone()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use super::AFTER_LENGTH;
    use crate::{Advice, CachedStore, LayoutKind, Store, StoreOptions};

    /// A window's pages are sized by the file's length read after each
    /// claim: a write that grows the file over its last page, is written back
    /// and leaves the cache between the readahead thread's first look at the
    /// length and its claim of that page must not come back as zeros.
    #[test]
    fn a_page_grown_and_written_before_its_claim_is_read_whole() {
        let dir = crate::cached::scratch_dir("ra-len");
        let store = Store::open(&[&dir], StoreOptions::default()).unwrap();
        let old = 3 * 4096 + 2048;
        let f = store.create("f", 4 * 4096, LayoutKind::Stripe).unwrap();
        let mut b = crate::AlignedBuf::new(4 * 4096);
        b.fill(5);
        f.write_at(0, &b).unwrap();
        f.set_len(old).unwrap();
        f.sync().unwrap();
        drop(f);
        let cs = CachedStore::new(store, crate::cached::small_cache(64)).unwrap();
        let cf = cs.open_file("f").unwrap();
        let other = cf.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        AFTER_LENGTH.arm(
            Arc::as_ptr(&cf.entry) as usize,
            Box::new(move || {
                // Grown, the second half of page 3 written, written back and
                // the page let go: all before the claim.
                let r = other
                    .set_len(4 * 4096)
                    .and_then(|()| other.write_at(old, &[7; 2048]))
                    .and_then(|()| other.sync())
                    .and_then(|()| other.shared.cache.evict(other.id, 3).map(|_| ()));
                tx.send(r).unwrap();
            }),
        );
        cf.advise(0, old, Advice::WillNeed).unwrap();
        rx.recv_timeout(Duration::from_secs(10))
            .expect("the readahead thread never looked at the window")
            .unwrap();
        let t0 = Instant::now();
        while !cs.cache().pages().iter().any(|p| p.page == 3) {
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "page 3 never read ahead"
            );
            std::thread::sleep(Duration::from_millis(2));
        }
        let mut page = vec![0u8; 4096];
        assert_eq!(cf.read_at(3 * 4096, &mut page).unwrap(), 4096);
        assert!(page[..2048].iter().all(|&x| x == 5));
        assert!(
            page[2048..].iter().all(|&x| x == 7),
            "the written half came back as {:?}",
            &page[2048..2056]
        );
        drop((cf, cs));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A stream over pages the cache holds already sends no window to the
    /// readahead thread (whose wake-up would cost more than it saves); over
    /// pages it does not hold, it does.
    #[test]
    fn a_stream_over_cached_pages_sends_no_window() {
        let (dir, cs) = store_of("ra-cached", 64, 256);
        let cf = cs.open_file("f").unwrap();
        let mut b = vec![0u8; 4096];
        let sent = || super::SENT.with(|c| c.get());
        let before = sent();
        for p in 0..32u64 {
            cf.read_at(p * 4096, &mut b).unwrap();
        }
        assert!(
            sent() > before,
            "a stream over pages not cached sent no window"
        );
        let t0 = Instant::now();
        while !cs.readahead_idle() {
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "readahead never ended"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        for p in 0..64u64 {
            cf.read_at(p * 4096, &mut b).unwrap();
        }
        // Everything is cached now: a stream over it again.
        let again = sent();
        for p in 0..64u64 {
            cf.read_at(p * 4096, &mut b).unwrap();
        }
        assert_eq!(sent(), again, "a stream over cached pages sent windows");
        drop((cf, cs));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A cached store of `pages` pages over a file `f` of `file_pages`.
    fn store_of(tag: &str, file_pages: u64, pages: usize) -> (std::path::PathBuf, CachedStore) {
        let dir = crate::cached::scratch_dir(tag);
        let store = Store::open(&[&dir], StoreOptions::default()).unwrap();
        drop(
            store
                .create("f", file_pages * 4096, LayoutKind::Stripe)
                .unwrap(),
        );
        let cs = CachedStore::new(store, crate::cached::small_cache(pages)).unwrap();
        (dir, cs)
    }

    /// Holds the store's readahead thread inside its read of a first window
    /// of `cf` (away from the queue) until the returned sender sends, or 20 s.
    fn hold_readahead(cf: &crate::cached::CachedFile) -> std::sync::mpsc::Sender<()> {
        let (held, release) = (std::sync::mpsc::channel(), std::sync::mpsc::channel::<()>());
        let (tx, rx_release) = (held.0, release.1);
        AFTER_LENGTH.arm(
            Arc::as_ptr(&cf.entry) as usize,
            Box::new(move || {
                tx.send(()).unwrap();
                let _ = rx_release.recv_timeout(Duration::from_secs(20));
            }),
        );
        cf.advise(0, 4096, Advice::WillNeed).unwrap();
        held.1
            .recv_timeout(Duration::from_secs(10))
            .expect("the readahead thread never took the window");
        release.0
    }

    /// A stream's windows wait for the readahead thread in a bounded queue:
    /// a thread asking for them faster than they are read (small reads in
    /// steps on a file advised sequential: each read a new stream with the
    /// largest window) queued one window a read, without bound.
    #[test]
    fn windows_asked_faster_than_they_are_read_are_dropped_past_a_bound() {
        let (dir, cs) = store_of("ra-flood", 64, 64);
        let cf = cs.open_file("f").unwrap();
        let sh = &cf.shared;
        // The readahead thread held inside its first window's read, away
        // from the queue, while the windows come.
        let release = hold_readahead(&cf);
        for i in 0..10_000 {
            sh.ahead.push_stream(super::Window {
                entry: cf.entry.clone(),
                id: cf.id,
                first: i % 64,
                pages: 1,
            });
        }
        let len = sh.ahead.queue.lock().unwrap().0.len();
        release.send(()).unwrap();
        assert_eq!(len, crate::cached::shared::Ahead::STREAM_QUEUE);
        drop((cf, cs));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A readahead thread stopped by a panic (an internal fault) gives its
    /// staging slots back: its reads in flight end first, and the store's
    /// later runs of pages can still land in the area. Its pages were not
    /// published: they read back as the file holds them.
    #[test]
    fn a_readahead_thread_that_panics_gives_its_staging_slots_back() {
        let (dir, cs) = store_of("ra-panic", 64, 2048);
        let cf = cs.open_file("f").unwrap();
        let sh = &cf.shared;
        let (slots, free) = sh.staging.counts();
        assert!(slots >= 1, "an 8 MiB cache has a staging area");
        assert_eq!(free, slots);
        let (tx, rx) = std::sync::mpsc::channel();
        super::AFTER_SEND.arm(
            Arc::as_ptr(sh) as usize,
            Box::new(move || {
                tx.send(()).unwrap();
                panic!("a fault injected into the readahead thread");
            }),
        );
        cf.advise(0, 32 * 4096, Advice::WillNeed).unwrap();
        rx.recv_timeout(Duration::from_secs(10))
            .expect("the readahead thread never sent a run");
        let t0 = Instant::now();
        loop {
            let (_, free) = sh.staging.counts();
            if free == slots {
                break;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "{free} of {slots} staging slots free after the readahead thread's panic"
            );
            std::thread::sleep(Duration::from_millis(2));
        }
        let mut b = vec![1u8; 4096];
        for p in 0..32 {
            assert_eq!(cf.read_at(p * 4096, &mut b).unwrap(), 4096);
            assert!(b.iter().all(|&x| x == 0), "page {p}");
        }
        // The thread that ended is not waited for as if it were alive: the
        // store's readahead is idle, and advice it cannot serve is refused.
        let t0 = Instant::now();
        while !cs.readahead_idle() {
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "readahead still busy 10 s after its thread's panic"
            );
            std::thread::sleep(Duration::from_millis(2));
        }
        match cf.advise(0, 4096, Advice::WillNeed) {
            Err(crate::Error::ThreadEnded(_)) => {}
            other => panic!("advice after the readahead thread's panic: {other:?}"),
        }
        drop((cf, cs));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// `WillNeed` advice waits for the readahead thread in a bounded queue
    /// too: advice asked faster than it is read queued a window per call,
    /// without bound, and kept a stream's windows out meanwhile.
    #[test]
    fn advice_asked_faster_than_it_is_read_is_dropped_past_a_bound() {
        let (dir, cs) = store_of("ra-advice-flood", 64, 64);
        let cf = cs.open_file("f").unwrap();
        let sh = &cf.shared;
        let release = hold_readahead(&cf);
        for i in 0..10_000u64 {
            cf.advise((i % 64) * 4096, 4096, Advice::WillNeed).unwrap();
        }
        let len = sh.ahead.queue.lock().unwrap().0.len();
        release.send(()).unwrap();
        assert_eq!(len, crate::cached::shared::Ahead::STREAM_QUEUE);
        drop((cf, cs));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// `DontNeed` chills the pages wholly inside its range, and the file's
    /// last page when the range reaches the end; a page the range only
    /// touches keeps its place.
    #[test]
    fn dontneed_rounds_inward_but_for_the_last_page() {
        let (dir, cs) = store_of("ra-dontneed-round", 8, 64);
        let cf = cs.open_file("f").unwrap();
        cf.set_len(7 * 4096 + 100).unwrap();
        // Read as no stream (whose pages would come in cold).
        cf.advise(0, 0, Advice::Random).unwrap();
        let mut b = vec![0u8; 4096];
        for p in 0..8 {
            cf.read_at(p * 4096, &mut b).unwrap();
        }
        // The shrink left the last page dirty (its tail cleared): clean it.
        cf.sync().unwrap();
        let cold = |p| {
            let g = cf.shared.cache.try_pin_present(cf.id, p, true).unwrap();
            g.expect("cached").is_cold()
        };
        assert!((0..8).all(|p| !cold(p)), "read pages are warm");
        // Bytes 100 .. 3 pages + 100: page 1 and 2 wholly, 0 and 3 partly.
        cf.advise(100, 3 * 4096, Advice::DontNeed).unwrap();
        let got: Vec<bool> = (0..8).map(cold).collect();
        assert_eq!(got, [false, true, true, false, false, false, false, false]);
        // To the end: the last page, partly in the file, goes too.
        cf.advise(6 * 4096 + 50, 0, Advice::DontNeed).unwrap();
        let got: Vec<bool> = (0..8).map(cold).collect();
        assert_eq!(got, [false, true, true, false, false, false, false, true]);
        drop((cf, cs));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// `WillNeed` reads at most half the cache's pages from the range's
    /// start (the rest would push out its own first pages), and fails
    /// `Closed` once the store is gone.
    #[test]
    fn willneed_reads_half_the_cache_at_most_and_fails_after_the_store() {
        let (dir, cs) = store_of("ra-willneed-cap", 256, 64);
        let cf = cs.open_file("f").unwrap();
        cf.advise(0, 0, Advice::WillNeed).unwrap();
        let t0 = Instant::now();
        while cs.cache().stats().readahead < 32 {
            assert!(t0.elapsed() < Duration::from_secs(10), "never read");
            std::thread::sleep(Duration::from_millis(2));
        }
        std::thread::sleep(Duration::from_millis(200));
        let st = cs.cache().stats();
        assert_eq!(st.readahead, 32, "{st:?}");
        drop(cs);
        assert!(matches!(
            cf.advise(0, 4096, Advice::WillNeed),
            Err(crate::Error::Closed)
        ));
        drop(cf);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
