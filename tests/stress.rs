//! Many threads on the same pages of one file behind a small cache, with the
//! flusher, evictions and syncs running all the time, through every way a
//! page is read or written: queued reads, writes and page requests,
//! synchronous copies, shared guards and mutable guards, futures (some
//! dropped before they finish), and partitioned queues whose tasks read pages
//! in the partition that owns them; meanwhile the cache is grown and shrunk
//! over and over. A second test does the same with the elements of an
//! out-of-core array, each an 8-byte stamp.
//!
//! Every write fills a whole page with a stamp (its thread and number), the
//! page's number and words derived from the stamp, so a page read shows which
//! write it holds, or that it is torn. Each thread logs when each of its
//! requests began and when it saw it end. The checks, after the threads stop:
//!
//! * no request failed, and no page read was torn or held another page's
//!   bytes;
//! * every read shows a write to its page that began before the read ended,
//!   and that no other write to the page superseded (began after it ended and
//!   ended before the read began): an atomic register per page;
//! * no thread went longer than [`STALL`] without a request of its own
//!   ending;
//! * after a sync, a close and a reopen, every page holds a write that no
//!   other write superseded (none began after it ended).
//!
//! `SETCACHE_STRESS_SECS` (default 3) and `SETCACHE_STRESS_THREADS` (default
//! 32) make the run longer and wider; CI runs it again at 64 threads for
//! 20 s.

mod common;

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use common::{Rng, TempDir};
use setcache::layout::mix64;
use setcache::{
    CacheOptions, CachedCompletion, CachedFile, CachedQueue, CachedRequest, CachedStore, Error,
    LayoutKind, OpKind, PageGuard, PagedArray, PartitionOptions, Partitions, PolicyKind, Store,
    StoreOptions,
};

const PS: usize = 4096;
const WORDS: usize = PS / 8;
/// The file: three times the cache.
const FILE_PAGES: u64 = 768;
const CACHE_PAGES: usize = 256;
/// Half of all requests go to these first pages, so that several threads
/// are on one page at once.
const HOT_PAGES: u64 = 24;
const DEPTH: usize = 4;
/// How long a page may stay busy before a request gives up: far longer than
/// any request should wait, so that a failure is a defect, not a slow run.
const PIN_WAIT: Duration = Duration::from_secs(10);
/// The longest a thread may go without one of its requests ending.
const STALL: Duration = Duration::from_secs(5);
const NAME: &str = "stress";

fn env_or(var: &str, default: u64) -> u64 {
    match std::env::var(var) {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("{var}={v:?} is not a whole number")),
        Err(_) => default,
    }
}

/// The bytes of the write `stamp` to `page`.
fn fill(buf: &mut [u8], stamp: u64, page: u64) {
    for (i, w) in buf.chunks_exact_mut(8).enumerate() {
        let v = match i {
            0 => stamp,
            1 => page,
            _ => mix64(stamp ^ (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)),
        };
        w.copy_from_slice(&v.to_le_bytes());
    }
}

/// The stamp of the write a page read of `page` shows (0: never written), or
/// what is wrong with it.
fn decode(buf: &[u8], page: u64) -> Result<u64, String> {
    assert_eq!(buf.len(), PS);
    let word = |i: usize| u64::from_le_bytes(buf[i * 8..i * 8 + 8].try_into().unwrap());
    let stamp = word(0);
    if stamp == 0 {
        return match (0..WORDS).find(|&i| word(i) != 0) {
            None => Ok(0),
            Some(i) => Err(format!(
                "page {page}: word 0 is 0 (never written) but word {i} is {:#x}: torn",
                word(i)
            )),
        };
    }
    if word(1) != page {
        return Err(format!(
            "page {page}: holds page {}'s bytes (stamp {stamp:#x})",
            word(1)
        ));
    }
    let mut want = vec![0u8; PS];
    fill(&mut want, stamp, page);
    match (0..WORDS).find(|&i| buf[i * 8..i * 8 + 8] != want[i * 8..i * 8 + 8]) {
        None => Ok(stamp),
        Some(i) => Err(format!(
            "page {page}: torn, word {i} is not stamp {stamp:#x}'s"
        )),
    }
}

/// One request as its thread saw it: times in nanoseconds since the start.
#[derive(Clone, Copy)]
struct Op {
    page: u64,
    stamp: u64,
    begin: u64,
    end: u64,
}

#[derive(Default)]
struct Log {
    writes: Vec<Op>,
    reads: Vec<Op>,
    errors: Vec<String>,
    longest_gap: Duration,
    ops: u64,
}

/// What a thread does.
#[derive(Clone, Copy, Debug)]
enum Style {
    /// A queue of tagged reads and writes.
    Queue,
    /// A queue of page requests and tagged writes.
    QueuePages,
    /// `read_at` and `write_at`.
    Copies,
    /// `page` and `page_mut`.
    Guards,
    /// Futures of reads, writes and pages, [`DEPTH`] at a time under a
    /// minimal executor; one batch in eight dropped after its first poll.
    Futures,
    /// A partitioned mode's queue: reads, writes, and tasks that read the
    /// page's stamp in the partition that owns it.
    Parts,
}

/// The task of [`Style::Parts`]: the stamp of the write page `arg` holds, or
/// `u64::MAX` if it is torn or another page's.
fn stamp_task(page: &[u8], _at: usize, arg: u64) -> u64 {
    decode(page, arg).unwrap_or(u64::MAX)
}

/// What a future of [`Style::Futures`] gives back: a page's bytes, or a
/// write's outcome.
enum Done {
    Read(setcache::Result<Vec<u8>>),
    Wrote(setcache::Result<()>),
}

type Task<'a> = Pin<Box<dyn Future<Output = Done> + 'a>>;

/// The minimal executor's waker: unparks the thread, and says it was woken.
struct Flag(AtomicBool, std::thread::Thread);

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.0.store(true, Ordering::Release);
        self.1.unpark();
    }
}

struct Run<'a> {
    t: u64,
    rng: Rng,
    seq: u64,
    start: Instant,
    deadline: Instant,
    last_end: Instant,
    log: Log,
    cs: &'a CachedStore,
    cf: &'a CachedFile,
    parts: &'a Partitions<'a>,
}

impl Run<'_> {
    fn now(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    fn page(&mut self) -> u64 {
        if self.rng.below(2) == 0 {
            self.rng.below(HOT_PAGES)
        } else {
            self.rng.below(FILE_PAGES)
        }
    }

    fn stamp(&mut self) -> u64 {
        self.seq += 1;
        (self.t + 1) << 40 | self.seq
    }

    fn ended(&mut self) {
        let now = Instant::now();
        self.log.longest_gap = self.log.longest_gap.max(now - self.last_end);
        self.last_end = now;
        self.log.ops += 1;
    }

    fn read_done(&mut self, page: u64, bytes: &[u8], begin: u64, how: &str) {
        let end = self.now();
        self.ended();
        match decode(bytes, page) {
            Ok(stamp) => self.log.reads.push(Op {
                page,
                stamp,
                begin,
                end,
            }),
            Err(e) => self
                .log
                .errors
                .push(format!("thread {} ({how}): {e}", self.t)),
        }
    }

    fn failed(&mut self, what: String) {
        self.ended();
        self.log.errors.push(format!("thread {}: {what}", self.t));
    }

    fn go(&mut self, style: Style) {
        match style {
            Style::Queue | Style::QueuePages => self.queued(matches!(style, Style::QueuePages)),
            Style::Copies | Style::Guards => self.calls(matches!(style, Style::Guards)),
            Style::Futures => self.futures(),
            Style::Parts => self.partitioned(),
        }
    }

    fn partitioned(&mut self) {
        let cf = self.cf;
        let mut q = match self.parts.queue(DEPTH) {
            Ok(q) => q,
            Err(e) => return self.failed(format!("a partitioned queue: {e}")),
        };
        // Tag: index into `pending`: (page, stamp or 0, begin, a task).
        let mut pending: Vec<Option<(u64, u64, u64, bool)>> = vec![None; DEPTH];
        let mut done = Vec::new();
        loop {
            let open = Instant::now() < self.deadline && self.log.errors.is_empty();
            if open {
                for (tag, slot) in pending.iter_mut().enumerate() {
                    if slot.is_some() {
                        continue;
                    }
                    let page = self.page();
                    let at = page * PS as u64;
                    let begin = self.now();
                    let tagged = tag as u64;
                    *slot = Some(match self.rng.below(3) {
                        0 => {
                            let stamp = self.stamp();
                            let mut buf = vec![0u8; PS];
                            fill(&mut buf, stamp, page);
                            q.write(cf, at, buf, tagged);
                            (page, stamp, begin, false)
                        }
                        1 => {
                            q.read(cf, at, vec![0u8; PS], tagged);
                            (page, 0, begin, false)
                        }
                        _ => {
                            q.task(cf, at, stamp_task, page, tagged);
                            (page, 0, begin, true)
                        }
                    });
                }
                q.flush();
            }
            if q.outstanding() > 0 {
                q.wait(1);
            }
            q.take_completions(&mut done);
            for c in done.drain(..) {
                let (page, stamp, begin, task) =
                    pending[c.tag as usize].take().expect("a tag in use");
                match c.result {
                    Err(e) => self.failed(format!("partitioned request of page {page}: {e}")),
                    Ok(()) if stamp != 0 => self.wrote(page, stamp, begin),
                    Ok(()) if task && c.value == u64::MAX => {
                        self.failed(format!("a task found page {page} torn or another's"))
                    }
                    Ok(()) if task => {
                        // The task's stamp, as a read of it.
                        let mut whole = vec![0u8; PS];
                        if c.value != 0 {
                            fill(&mut whole, c.value, page);
                        }
                        self.read_done(page, &whole, begin, "task")
                    }
                    Ok(()) => self.read_done(page, &c.buf, begin, "partitioned read"),
                }
            }
            if !open && q.outstanding() == 0 {
                break;
            }
        }
    }

    fn futures(&mut self) {
        let cf = self.cf;
        let me = std::thread::current();
        while Instant::now() < self.deadline && self.log.errors.is_empty() {
            let cancel = self.rng.below(8) == 0;
            let mut tasks = Vec::new();
            for _ in 0..DEPTH {
                let page = self.page();
                let at = page * PS as u64;
                let begin = self.now();
                let (stamp, task): (u64, Task<'_>) = match self.rng.below(3) {
                    0 => {
                        let stamp = self.stamp();
                        let mut buf = vec![0u8; PS];
                        fill(&mut buf, stamp, page);
                        let task = async move { Done::Wrote(cf.write_at_async(at, buf).await.0) };
                        (stamp, Box::pin(task))
                    }
                    1 => {
                        let task = async move {
                            let (n, buf) = cf.read_at_async(at, vec![0u8; PS]).await;
                            Done::Read(n.map(|n| buf[..n].to_vec()))
                        };
                        (0, Box::pin(task))
                    }
                    _ => {
                        let task =
                            async move { Done::Read(cf.page_async(at).await.map(|g| g.to_vec())) };
                        (0, Box::pin(task))
                    }
                };
                let flag = Arc::new(Flag(AtomicBool::new(true), me.clone()));
                tasks.push(Some((page, stamp, begin, task, flag)));
            }
            let mut left = tasks.len();
            let mut first = true;
            while left > 0 {
                let mut polled = false;
                for slot in tasks.iter_mut() {
                    let Some((page, stamp, begin, task, flag)) = slot else {
                        continue;
                    };
                    if !flag.0.swap(false, Ordering::AcqRel) {
                        continue;
                    }
                    polled = true;
                    let waker = Waker::from(flag.clone());
                    let Poll::Ready(done) = task.as_mut().poll(&mut Context::from_waker(&waker))
                    else {
                        continue;
                    };
                    let (page, stamp, begin) = (*page, *stamp, *begin);
                    *slot = None;
                    left -= 1;
                    match done {
                        Done::Wrote(Ok(())) => self.wrote(page, stamp, begin),
                        Done::Read(Ok(b)) if b.len() == PS => {
                            self.read_done(page, &b, begin, "future")
                        }
                        Done::Read(Ok(b)) => {
                            self.failed(format!("future read of page {page}: {} bytes", b.len()))
                        }
                        Done::Wrote(Err(e)) | Done::Read(Err(e)) => {
                            self.failed(format!("future of page {page}: {e}"))
                        }
                    }
                }
                if first && cancel {
                    // Dropped unfinished: a write may still land at any time
                    // (it ends, for the checks, never), a read is forgotten.
                    for (page, stamp, begin, _, _) in tasks.iter().flatten() {
                        if *stamp != 0 {
                            self.log.writes.push(Op {
                                page: *page,
                                stamp: *stamp,
                                begin: *begin,
                                end: u64::MAX,
                            });
                        }
                    }
                    break;
                }
                first = false;
                if !polled {
                    std::thread::park_timeout(Duration::from_millis(100));
                }
            }
        }
    }

    fn calls(&mut self, guards: bool) {
        let cf = self.cf;
        let mut buf = vec![0u8; PS];
        while Instant::now() < self.deadline && self.log.errors.is_empty() {
            let page = self.page();
            let at = page * PS as u64;
            let begin = self.now();
            let write = self.rng.below(2) == 0;
            match (guards, write) {
                (false, false) => match cf.read_at(at, &mut buf) {
                    Ok(n) if n == PS => self.read_done(page, &buf, begin, "read_at"),
                    Ok(n) => self.failed(format!("read_at page {page}: {n} bytes, not {PS}")),
                    Err(e) => self.failed(format!("read_at page {page}: {e}")),
                },
                (false, true) => {
                    let stamp = self.stamp();
                    fill(&mut buf, stamp, page);
                    match cf.write_at(at, &buf) {
                        Ok(()) => self.wrote(page, stamp, begin),
                        Err(e) => self.failed(format!("write_at page {page}: {e}")),
                    }
                }
                (true, false) => match cf.page(at) {
                    Ok(g) => {
                        let bytes: &[u8] = &g;
                        let copy = bytes.to_vec();
                        std::thread::yield_now();
                        if g[..] != copy[..] {
                            self.log.errors.push(format!(
                                "thread {}: page {page} changed under a shared guard",
                                self.t
                            ));
                        }
                        drop(g);
                        self.read_done(page, &copy, begin, "page");
                    }
                    Err(e) => self.failed(format!("page {page}: {e}")),
                },
                (true, true) => match cf.page_mut(at) {
                    Ok(mut g) => {
                        let stamp = self.stamp();
                        // In two halves with a yield between: nobody may see
                        // the half-filled page.
                        let mut whole = vec![0u8; PS];
                        fill(&mut whole, stamp, page);
                        g[..PS / 2].copy_from_slice(&whole[..PS / 2]);
                        std::thread::yield_now();
                        g[PS / 2..].copy_from_slice(&whole[PS / 2..]);
                        drop(g);
                        self.wrote(page, stamp, begin);
                    }
                    Err(e) => self.failed(format!("page_mut page {page}: {e}")),
                },
            }
        }
    }

    fn wrote(&mut self, page: u64, stamp: u64, begin: u64) {
        let end = self.now();
        self.ended();
        self.log.writes.push(Op {
            page,
            stamp,
            begin,
            end,
        });
    }

    fn queued(&mut self, pages: bool) {
        let cf = self.cf;
        let mut q = self.cs.queue(DEPTH);
        // Tag: index into `pending`, which holds (page, stamp or 0 for a
        // read, begin).
        let mut pending: Vec<Option<(u64, u64, u64)>> = vec![None; DEPTH];
        let mut done = Vec::new();
        let mut guards = Vec::new();
        let mut batch = Vec::new();
        loop {
            let open = Instant::now() < self.deadline && self.log.errors.is_empty();
            if open {
                for tag in 0..DEPTH {
                    if pending[tag].is_some() {
                        continue;
                    }
                    // A page request's guard is this thread's until the
                    // batch is reaped, and a write by its holder to that page
                    // is refused (it would wait for itself): with page
                    // requests, no two requests in flight share a page.
                    let page = loop {
                        let page = self.page();
                        if !pages || pending.iter().flatten().all(|&(p, _, _)| p != page) {
                            break page;
                        }
                    };
                    let slot = &mut pending[tag];
                    let at = page * PS as u64;
                    let begin = self.now();
                    let tag = tag as u64;
                    if self.rng.below(2) == 0 {
                        let stamp = self.stamp();
                        let mut buf = vec![0u8; PS];
                        fill(&mut buf, stamp, page);
                        batch.push(CachedRequest::tagged(OpKind::Write, cf, at, buf, tag));
                        *slot = Some((page, stamp, begin));
                    } else if pages {
                        batch.push(CachedRequest::page(cf, at, tag));
                        *slot = Some((page, 0, begin));
                    } else {
                        batch.push(CachedRequest::tagged(
                            OpKind::Read,
                            cf,
                            at,
                            vec![0u8; PS],
                            tag,
                        ));
                        *slot = Some((page, 0, begin));
                    }
                }
                q.submit_from(&mut batch);
            }
            // Requests that found their pages cached ended inside the submit.
            self.reap(&mut q, &mut pending, &mut done, &mut guards);
            if q.outstanding() == 0 {
                if !open {
                    break;
                }
                continue;
            }
            q.wait(1);
            self.reap(&mut q, &mut pending, &mut done, &mut guards);
        }
    }

    fn reap<'q>(
        &mut self,
        q: &mut CachedQueue<'q>,
        pending: &mut [Option<(u64, u64, u64)>],
        done: &mut Vec<(u64, CachedCompletion)>,
        guards: &mut Vec<(u64, setcache::Result<PageGuard<'q>>)>,
    ) {
        q.take_completions(done);
        q.take_pages(guards);
        for (tag, c) in done.drain(..) {
            let (page, stamp, begin) = pending[tag as usize].take().expect("a tag in use");
            match (c.kind, c.result) {
                (_, Err(e)) => self.failed(format!("queued {:?} of page {page}: {e}", c.kind)),
                (OpKind::Write, Ok(())) => self.wrote(page, stamp, begin),
                (OpKind::Read, Ok(())) => self.read_done(page, &c.buf, begin, "queued read"),
            }
        }
        for (tag, g) in guards.drain(..) {
            let (page, _, begin) = pending[tag as usize].take().expect("a tag in use");
            match g {
                Ok(g) => {
                    let copy = g.to_vec();
                    drop(g);
                    self.read_done(page, &copy, begin, "queued page");
                }
                Err(e) => self.failed(format!("queued page request of page {page}: {e}")),
            }
        }
    }
}

/// For each (key, stamp) of a write: when it began, and when it was
/// superseded (see [`superseded`]).
type Ends = HashMap<(u64, u64), (u64, u64)>;

/// For each key (a page, or an element), each write's stamp and the time
/// the first write to the key that began after it ended ended (`u64::MAX`:
/// none did): from then on, no read may show it. Every key starts as written
/// by stamp 0 at time 0.
fn superseded(writes: &[Op], keys: impl Iterator<Item = u64>) -> Ends {
    let mut by_key: HashMap<u64, Vec<Op>> = keys.map(|k| (k, Vec::new())).collect();
    for w in writes {
        by_key.entry(w.page).or_default().push(*w);
    }
    let mut out = HashMap::new();
    for (key, mut ws) in by_key {
        ws.push(Op {
            page: key,
            stamp: 0,
            begin: 0,
            end: 0,
        });
        ws.sort_by_key(|w| w.begin);
        // Earliest end among the writes from index i on.
        let mut min_end = vec![u64::MAX; ws.len() + 1];
        for i in (0..ws.len()).rev() {
            min_end[i] = min_end[i + 1].min(ws[i].end);
        }
        for w in &ws {
            let first_after = ws.partition_point(|x| x.begin <= w.end);
            out.insert((key, w.stamp), (w.begin, min_end[first_after]));
        }
    }
    out
}

/// The checks of the threads' logs (named by their style): no error, no
/// stall, every read a write not superseded before it began. Returns the
/// writes' ends by key and stamp, and the counts of writes and reads.
fn check_logs(
    logs: &[(String, Log)],
    keys: impl Iterator<Item = u64>,
    what: &str,
) -> (Ends, usize, usize) {
    let mut errors = Vec::new();
    let mut writes = Vec::new();
    let mut reads = Vec::new();
    for (t, (style, log)) in logs.iter().enumerate() {
        assert!(log.ops > 0, "thread {t} ({style}) finished no request");
        errors.extend(log.errors.iter().cloned());
        if log.longest_gap > STALL {
            errors.push(format!(
                "thread {t} ({style}) went {:?} without a request ending",
                log.longest_gap
            ));
        }
        writes.extend_from_slice(&log.writes);
        reads.extend_from_slice(&log.reads);
    }
    assert!(
        errors.is_empty(),
        "{} errors, the first: {:?}",
        errors.len(),
        &errors[..errors.len().min(5)]
    );
    let ends = superseded(&writes, keys);
    let mut stale = 0u64;
    let mut first = None;
    for r in &reads {
        let Some(&(w_begin, gone)) = ends.get(&(r.page, r.stamp)) else {
            panic!(
                "a read of {what} {} showed stamp {:#x}, which no thread wrote there",
                r.page, r.stamp
            );
        };
        assert!(
            w_begin <= r.end,
            "a read of {what} {} showed stamp {:#x}, which began after the read ended",
            r.page,
            r.stamp
        );
        if gone < r.begin {
            stale += 1;
            first.get_or_insert(*r);
        }
    }
    if let Some(r) = first {
        panic!(
            "{stale} of {} reads showed a superseded write; the first: {what} {}, stamp {:#x}, \
             read from {} to {} ns, that write superseded at {} ns",
            reads.len(),
            r.page,
            r.stamp,
            r.begin,
            r.end,
            ends[&(r.page, r.stamp)].1
        );
    }
    (ends, writes.len(), reads.len())
}

/// What a reopened store holds for `key`, `stamp`: a write no other write
/// began after.
fn check_last(ends: &Ends, what: &str, key: u64, stamp: u64) {
    let Some(&(_, gone)) = ends.get(&(key, stamp)) else {
        panic!("after the reopen, {what} {key} holds stamp {stamp:#x}, never written there");
    };
    assert_eq!(
        gone,
        u64::MAX,
        "after the reopen, {what} {key} holds stamp {stamp:#x}, superseded by a later write"
    );
}

/// Requests finished by each style of thread, in the order first seen.
fn by_style(logs: &[(String, Log)]) -> Vec<(&str, u64)> {
    let mut out: Vec<(&str, u64)> = Vec::new();
    for (style, log) in logs {
        match out.iter_mut().find(|(n, _)| *n == style) {
            Some((_, ops)) => *ops += log.ops,
            None => out.push((style, log.ops)),
        }
    }
    out
}

/// A hang fails the test instead of holding CI until its own limit: the
/// process ends unless the flag is set within `secs` and the margins.
fn watchdog(start: Instant, secs: u64) -> Arc<AtomicBool> {
    let finished = Arc::new(AtomicBool::new(false));
    let watch = finished.clone();
    let limit = Duration::from_secs(secs) + 2 * STALL + Duration::from_secs(60);
    std::thread::spawn(move || {
        while start.elapsed() < limit {
            std::thread::sleep(Duration::from_millis(100));
            if watch.load(Ordering::Relaxed) {
                return;
            }
        }
        eprintln!("stress: not finished after {limit:?}: a request or a sync hangs");
        std::process::exit(101);
    });
    finished
}

/// Sync with `sync` every 20 ms until `stop`, so that write-back runs
/// beside the flusher's: how many, and the errors.
fn syncs_until(stop: &AtomicBool, sync: impl Fn() -> setcache::Result<()>) -> (u64, Vec<String>) {
    let mut n = 0u64;
    let mut errors = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        if let Err(e) = sync() {
            errors.push(format!("sync: {e}"));
        }
        n += 1;
        std::thread::sleep(Duration::from_millis(20));
    }
    (n, errors)
}

/// Grow the cache to twice its size and shrink it to half, in turns, every
/// 30 ms until `stop`, so that pages move between sets under their users:
/// resizes done, resizes that found dirty pages in the way, errors.
fn resizes_until(stop: &AtomicBool, cs: &CachedStore) -> (u64, u64, Vec<String>) {
    let (mut done, mut busy) = (0u64, 0u64);
    let mut errors = Vec::new();
    let sizes = [2 * CACHE_PAGES, CACHE_PAGES / 2, CACHE_PAGES];
    while !stop.load(Ordering::Relaxed) {
        match cs.cache().resize(sizes[(done + busy) as usize % 3] * PS) {
            Ok(()) => done += 1,
            // Dirty pages left no room: the next size in turn.
            Err(Error::ResizeBusy(_)) => busy += 1,
            Err(e) => errors.push(format!("resize: {e}")),
        }
        std::thread::sleep(Duration::from_millis(30));
    }
    (done, busy, errors)
}

/// Join the syncer and the resizer, checking them.
fn join_helpers(
    syncer: std::thread::ScopedJoinHandle<'_, (u64, Vec<String>)>,
    resizer: std::thread::ScopedJoinHandle<'_, (u64, u64, Vec<String>)>,
) -> (u64, (u64, u64)) {
    let (n, errors) = syncer.join().unwrap();
    assert!(errors.is_empty(), "syncs failed: {errors:?}");
    let (done, busy, errors) = resizer.join().unwrap();
    assert!(errors.is_empty(), "resizes failed: {errors:?}");
    assert!(
        done > 0,
        "no resize went through ({busy} found the cache busy)"
    );
    (n, (done, busy))
}

fn open(roots: &[std::path::PathBuf]) -> CachedStore {
    let store = Store::open(roots, StoreOptions::default()).unwrap();
    let sets = CACHE_PAGES / 12;
    CachedStore::new(
        store,
        CacheOptions {
            size: CACHE_PAGES * PS,
            page_size: PS,
            policy: PolicyKind::DEFAULT,
            max_size: Some(2 * CACHE_PAGES * PS),
            pin_wait: PIN_WAIT,
            // Two partitions at least, so that the partitioned queues send
            // requests to a worker as well as serve their own.
            partitions: common::partitions().max(2).min(sets),
            ..CacheOptions::default()
        },
    )
    .unwrap()
}

fn run_settings() -> (u64, u64) {
    let secs = env_or("SETCACHE_STRESS_SECS", 3);
    let threads = env_or("SETCACHE_STRESS_THREADS", 32).max(4);
    (secs, threads)
}

#[test]
fn many_threads_on_the_same_pages_see_whole_pages_in_order_and_never_stall() {
    let (secs, threads) = run_settings();
    let tmp = TempDir::new("stress");
    let roots = tmp.devices(2);
    {
        let store = Store::open(&roots, StoreOptions::default()).unwrap();
        store
            .create(NAME, FILE_PAGES * PS as u64, LayoutKind::Stripe)
            .unwrap();
    }
    let start = Instant::now();
    let deadline = start + Duration::from_secs(secs);
    let finished = watchdog(start, secs);
    let cs = open(&roots);
    let cf = cs.open_file(NAME).unwrap();
    let parts = Partitions::new(&cs, PartitionOptions::default()).unwrap();
    let stop = AtomicBool::new(false);
    let mut logs: Vec<(String, Log)> = Vec::new();
    let (syncs, resizes) = std::thread::scope(|s| {
        let syncer = s.spawn(|| syncs_until(&stop, || cf.sync()));
        let resizer = s.spawn(|| resizes_until(&stop, &cs));
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let style = [
                    Style::Queue,
                    Style::QueuePages,
                    Style::Copies,
                    Style::Guards,
                    Style::Futures,
                    Style::Parts,
                ][t as usize % 6];
                let (cs, cf, parts) = (&cs, &cf, &parts);
                s.spawn(move || {
                    let mut run = Run {
                        t,
                        rng: Rng(0x5eed ^ t),
                        seq: 0,
                        start,
                        deadline,
                        last_end: Instant::now(),
                        log: Log::default(),
                        cs,
                        cf,
                        parts,
                    };
                    run.go(style);
                    (format!("{style:?}"), run.log)
                })
            })
            .collect();
        for w in workers {
            logs.push(w.join().unwrap());
        }
        stop.store(true, Ordering::Relaxed);
        join_helpers(syncer, resizer)
    });
    drop(parts);
    cs.sync().unwrap();
    drop(cf);
    cs.close().unwrap();
    let (ends, writes, reads) = check_logs(&logs, 0..FILE_PAGES, "page");

    // What a fresh store reads: a write no other write began after.
    let cs = open(&roots);
    let cf = cs.open_file(NAME).unwrap();
    let mut buf = vec![0u8; PS];
    for page in 0..FILE_PAGES {
        assert_eq!(cf.read_at(page * PS as u64, &mut buf).unwrap(), PS);
        let stamp = decode(&buf, page).unwrap_or_else(|e| panic!("after the reopen: {e}"));
        check_last(&ends, "page", page, stamp);
    }
    finished.store(true, Ordering::Relaxed);
    eprintln!(
        "{threads} threads, {secs} s: {writes} writes, {reads} reads, {syncs} syncs, resizes \
         {resizes:?} (done, busy); requests by style {:?}; the longest wait {:?}",
        by_style(&logs),
        logs.iter().map(|(_, l)| l.longest_gap).max().unwrap()
    );
}

/// The elements of the array test: on each page of the file, [`SLOTS`]
/// elements of 8 bytes, 64 apart.
const SLOTS: u64 = 8;
const PER_PAGE: u64 = PS as u64 / 8;

fn element(page: u64, slot: u64) -> u64 {
    page * PER_PAGE + slot * (PER_PAGE / SLOTS)
}

/// What a thread of the array test does.
#[derive(Clone, Copy, Debug)]
enum ArrayStyle {
    /// A reader's `get` and `set` (its translation tables).
    Reader,
    /// The array's own `get` and `set` (the shared cache).
    Array,
    /// A reader's `get_many` of a page's elements, and `set`.
    Many,
    /// A reader's runs over a page, in place, and the array's `set`.
    Runs,
}

/// Many threads store and load the same 8-byte elements of an out-of-core
/// array (a file three times the cache) through readers' translation tables,
/// the shared cache, grouped loads and runs in place, while the cache is
/// synced, resized and evicts: every load is an element's store no other
/// store superseded before the load began, and after a reopen every element
/// holds a store no later store superseded.
#[test]
fn many_threads_on_the_same_array_elements_load_them_in_order() {
    let (secs, threads) = run_settings();
    let tmp = TempDir::new("stress-array");
    let roots = tmp.devices(2);
    let start = Instant::now();
    let deadline = start + Duration::from_secs(secs);
    let finished = watchdog(start, secs);
    let cs = open(&roots);
    let n = FILE_PAGES * PER_PAGE;
    let a = PagedArray::<u64>::create(&cs, NAME, n, LayoutKind::Stripe).unwrap();
    let stop = AtomicBool::new(false);
    let mut logs: Vec<(String, Log)> = Vec::new();
    let (syncs, resizes) = std::thread::scope(|s| {
        let syncer = s.spawn(|| syncs_until(&stop, || a.sync()));
        let resizer = s.spawn(|| resizes_until(&stop, &cs));
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let style = [
                    ArrayStyle::Reader,
                    ArrayStyle::Array,
                    ArrayStyle::Many,
                    ArrayStyle::Runs,
                ][t as usize % 4];
                let a = &a;
                s.spawn(move || {
                    let mut log = Log::default();
                    let mut rng = Rng(0xa77a ^ t);
                    let mut seq = 0u64;
                    let mut last_end = Instant::now();
                    let mut r = a.reader();
                    let now = || start.elapsed().as_nanos() as u64;
                    let mut ended = |log: &mut Log| {
                        let at = Instant::now();
                        log.longest_gap = log.longest_gap.max(at - last_end);
                        last_end = at;
                        log.ops += 1;
                    };
                    while Instant::now() < deadline && log.errors.is_empty() {
                        let page = if rng.below(2) == 0 {
                            rng.below(HOT_PAGES)
                        } else {
                            rng.below(FILE_PAGES)
                        };
                        let i = element(page, rng.below(SLOTS));
                        let begin = now();
                        if rng.below(2) == 0 {
                            seq += 1;
                            let stamp = (t + 1) << 40 | seq;
                            let set = match style {
                                ArrayStyle::Reader | ArrayStyle::Many => r.set(i, stamp),
                                ArrayStyle::Array | ArrayStyle::Runs => a.set(i, stamp),
                            };
                            let end = now();
                            ended(&mut log);
                            match set {
                                Ok(()) => log.writes.push(Op {
                                    page: i,
                                    stamp,
                                    begin,
                                    end,
                                }),
                                Err(e) => log.errors.push(format!("thread {t}: set {i}: {e}")),
                            }
                            continue;
                        }
                        // The elements loaded: one, or each of the page's.
                        let mut got: Vec<(u64, u64)> = Vec::new();
                        let load = match style {
                            ArrayStyle::Reader => r.get(i).map(|v| got.push((i, v))),
                            ArrayStyle::Array => a.get(i).map(|v| got.push((i, v))),
                            ArrayStyle::Many => {
                                let idx: Vec<u64> = (0..SLOTS).map(|k| element(page, k)).collect();
                                let mut out = vec![0u64; idx.len()];
                                r.get_many(&idx, &mut out)
                                    .map(|()| got.extend(idx.iter().copied().zip(out)))
                            }
                            ArrayStyle::Runs => {
                                let first = page * PER_PAGE;
                                r.for_each_run(first..first + PER_PAGE, |at, run| {
                                    for k in 0..run.len() {
                                        let e = at + k as u64;
                                        if (e % PER_PAGE).is_multiple_of(PER_PAGE / SLOTS) {
                                            got.push((e, run.get(k)));
                                        }
                                    }
                                })
                            }
                        };
                        let end = now();
                        ended(&mut log);
                        match load {
                            Ok(()) => log.reads.extend(got.into_iter().map(|(e, stamp)| Op {
                                page: e,
                                stamp,
                                begin,
                                end,
                            })),
                            Err(e) => log.errors.push(format!("thread {t}: load at {i}: {e}")),
                        }
                    }
                    (format!("{style:?}"), log)
                })
            })
            .collect();
        for w in workers {
            logs.push(w.join().unwrap());
        }
        stop.store(true, Ordering::Relaxed);
        join_helpers(syncer, resizer)
    });
    a.sync().unwrap();
    drop(a);
    cs.close().unwrap();
    let keys = (0..FILE_PAGES).flat_map(|p| (0..SLOTS).map(move |k| element(p, k)));
    let (ends, writes, reads) = check_logs(&logs, keys.clone(), "element");

    let cs = open(&roots);
    let a = PagedArray::<u64>::open(&cs, NAME).unwrap();
    for i in keys {
        check_last(&ends, "element", i, a.get(i).unwrap());
    }
    finished.store(true, Ordering::Relaxed);
    eprintln!(
        "{threads} threads, {secs} s: {writes} stores, {reads} loads, {syncs} syncs, resizes \
         {resizes:?} (done, busy); requests by style {:?}; the longest wait {:?}",
        by_style(&logs),
        logs.iter().map(|(_, l)| l.longest_gap).max().unwrap()
    );
}
