//! NUMA-SA: the cache's pages divided among partitions, one per NUMA node by
//! default, each served by worker threads of its own; application threads
//! reach a partition's pages by messages to its workers instead of touching
//! them.
//!
//! The cache's sets are divided among the partitions when it is made
//! ([`CacheOptions::partitions`](crate::CacheOptions::partitions)): a page
//! belongs to the partition its hash names ([`Partitions::partition_of`]),
//! both its candidate sets are that partition's at every table size, and each
//! partition's set metadata and frames lie together in memory.
//! An application thread's [`PartQueue`] gathers its requests per partition
//! and sends each partition one bundle per batch over a bounded
//! single-producer single-consumer ring ([`link`]); the partition's worker
//! serves the bundle on a [`CachedQueue`] of its own (a hit is copied by the
//! worker straight into the buffer the request carries; a miss goes to the
//! devices, the worker keeping many in flight) and answers in bundles over a
//! ring the other way. A request may instead carry a [`Task`]: a function the
//! worker runs on the cached page, pinned, in the partition that owns it (on
//! a miss, once the page has arrived), sending back its 8-byte result instead
//! of the page. A task that panics fails its own request with
//! [`Error::TaskPanicked`] and the worker goes on.
//!
//! On a machine with several nodes each partition's worker is bound to its
//! node's CPUs and the partition's memory prefers that node, so the frames a
//! worker touches are local. Every other interface of the cached store goes
//! on reaching pages directly, through the same sets (remote accesses, where
//! the page is another node's). Partitions in a number other than the
//! machine's nodes are *emulated*: neither workers nor memory are bound. Which nodes cache and which do I/O is a setting: the partitions'
//! workers run on [`PartitionOptions::cache_nodes`], the devices' I/O threads
//! where the store's `cpu_affinity` puts them.

pub(crate) mod link;
pub(crate) mod ring;

use std::collections::{HashMap, VecDeque};
use std::marker::PhantomData;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release, SeqCst};
use std::sync::atomic::{AtomicBool, AtomicU64, fence};
use std::sync::{Arc, Mutex};
use std::thread::{JoinHandle, Thread};
use std::time::Duration;

use crate::cache::RawPin;
use crate::cached::shared::Shared;
use crate::cached::{CachedCompletion, CachedFile, CachedQueue, CachedRequest, CachedStore};
use crate::error::{Error, Result};
use crate::storage::file::OpKind;
use crate::storage::queue::Bell;
pub use crate::util::nodes::{Node, nodes};
use crate::util::slab::Slab;
use link::{Link, Outbox};

/// A function run on a cached page inside the partition that owns it:
/// `task(page, offset_in_page, arg)`, its result sent back in the reply.
/// Plain functions only (no captured state): what it needs comes in `arg`.
pub type Task = fn(&[u8], usize, u64) -> u64;

/// How to divide a cached store's pages among partitions.
#[derive(Clone, Debug, Default)]
pub struct PartitionOptions {
    /// Partitions: `None` for as many as the cache's sets are divided into
    /// ([`CacheOptions::partitions`](crate::CacheOptions::partitions), which
    /// is one per NUMA node when given as 0); a number must be that one.
    /// A number other than the machine's nodes is emulated: the workers are
    /// not bound to CPUs, nor the partitions' memory to nodes.
    pub partitions: Option<usize>,
    /// The nodes whose CPUs run the partitions' workers (partition `p` on the
    /// `p`-th of them, modulo their number); `None` for every node. The
    /// devices' I/O threads run where the store's `cpu_affinity` puts them, so
    /// that I/O nodes and caching nodes can be told apart as in the papers.
    pub cache_nodes: Option<Vec<usize>>,
    /// Device operations each worker keeps in flight (0: 256).
    pub worker_depth: usize,
}

pub use crate::cache::MAX_PARTITIONS;

/// A request on its way to a worker.
struct Req {
    what: What,
    /// The file's number in its link (see [`Bundle::files`]).
    file: u32,
    offset: u64,
    buf: Vec<u8>,
    tag: u64,
}

/// One message of requests: the files the link has not named before (a
/// handle each, numbered on from the link's last), then the requests.
#[derive(Default)]
struct Bundle {
    files: Vec<CachedFile>,
    reqs: Vec<Req>,
}

#[derive(Clone, Copy)]
enum What {
    Read,
    Write,
    Task(Task, u64),
}

/// A reply on its way back.
struct Reply {
    tag: u64,
    buf: Vec<u8>,
    value: u64,
    result: Result<()>,
}

type PartLink = Link<Bundle, Vec<Reply>>;

/// An application thread as its workers see it: its links' rings, and how to
/// wake it.
struct App {
    /// One link per partition.
    links: Vec<Arc<PartLink>>,
    /// True while the thread may be parked waiting for replies.
    sleeping: AtomicBool,
    thread: Thread,
}

impl App {
    /// Wake the thread if it sleeps (after a reply was pushed).
    fn wake(&self) {
        fence(SeqCst);
        if self.sleeping.load(Relaxed) {
            self.thread.unpark();
        }
    }
}

/// One partition's shared state.
struct Part {
    bell: Arc<Bell>,
    /// True while the worker may block: a sender rings the bell only then.
    sleeping: AtomicBool,
    /// Applications that joined since the worker last looked, and their
    /// count so far (the worker compares it with its own).
    joining: Mutex<Vec<Arc<App>>>,
    joined: AtomicU64,
    closing: AtomicBool,
}

/// A cached store's pages divided among partitions, each with a worker
/// thread. See the module's comment.
///
/// ```
/// use setcache::{CacheOptions, CachedStore, LayoutKind, PartitionOptions, Partitions, Store, StoreOptions};
///
/// let dir = std::env::temp_dir().join(format!("setcache-doc-numa-{}", std::process::id()));
/// std::fs::create_dir_all(&dir)?;
/// let store = Store::open(&[&dir], StoreOptions::default())?;
/// store.create("f", 1 << 20, LayoutKind::Stripe)?;
/// // The cache's sets divided in two, each half served by a worker.
/// let opts = CacheOptions { size: 4 << 20, partitions: 2, ..CacheOptions::default() };
/// let cs = CachedStore::new(store, opts)?;
/// let f = cs.open_file("f")?;
/// f.write_at(4096 + 10, &[7u8; 3])?;
/// let parts = Partitions::new(&cs, PartitionOptions { partitions: Some(2), ..Default::default() })?;
/// let mut q = parts.queue(32)?;
/// q.read(&f, 4096, vec![0u8; 4096], 1); // a copy into this buffer
/// // A task run on the cached page: the sum of the page's bytes.
/// q.task(&f, 4096, |page, _, _| page.iter().map(|&b| b as u64).sum(), 0, 2);
/// q.wait(2);
/// let mut done = Vec::new();
/// q.take_completions(&mut done);
/// done.sort_by_key(|c| c.tag);
/// assert_eq!(done[0].buf[10..13], [7, 7, 7]);
/// assert_eq!(done[1].value, 21);
/// drop(q);
/// drop(parts); // its workers stop
/// drop(f);
/// drop(cs);
/// std::fs::remove_dir_all(&dir)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Partitions<'cs> {
    sh: Arc<Shared>,
    parts: Vec<Arc<Part>>,
    threads: Vec<JoinHandle<()>>,
    emulated: bool,
    _cs: PhantomData<&'cs CachedStore>,
}

/// A finished request of a [`PartQueue`].
#[derive(Debug)]
pub struct PartCompletion {
    /// The tag it was sent with.
    pub tag: u64,
    /// Its buffer: for a read, filled on success; empty for a task.
    pub buf: Vec<u8>,
    /// A task's result (0 for reads and writes).
    pub value: u64,
    /// `Ok`, or the error (naming file and offset).
    pub result: Result<()>,
}

impl<'cs> Partitions<'cs> {
    /// Divide `cs`'s pages among partitions as `opts` says and start a worker
    /// for each.
    pub fn new(cs: &'cs CachedStore, opts: PartitionOptions) -> Result<Partitions<'cs>> {
        let found = nodes();
        let n = match opts.partitions {
            Some(p) if p == 0 || p > MAX_PARTITIONS => {
                return Err(Error::InvalidArgument(format!(
                    "{p} partitions: give 1 to {MAX_PARTITIONS}"
                )));
            }
            Some(p) if p != cs.inner.cache.partitions() => {
                return Err(Error::InvalidArgument(format!(
                    "{p} partitions, but the cache's sets are divided into {} (CacheOptions::partitions)",
                    cs.inner.cache.partitions()
                )));
            }
            _ => cs.inner.cache.partitions(),
        };
        let cache_nodes: Vec<&Node> = match &opts.cache_nodes {
            None => found.iter().collect(),
            Some(ids) => {
                let mut v = Vec::new();
                for id in ids {
                    match found.iter().find(|nd| nd.id == *id) {
                        Some(nd) => v.push(nd),
                        None => {
                            return Err(Error::InvalidArgument(format!(
                                "cache node {id} is not a node of this machine (nodes: {:?})",
                                found.iter().map(|nd| nd.id).collect::<Vec<_>>()
                            )));
                        }
                    }
                }
                if v.is_empty() {
                    return Err(Error::InvalidArgument("no cache nodes given".into()));
                }
                v
            }
        };
        // Bound to nodes only when each partition has a node of its own.
        let emulated = found.len() < 2 || n != cache_nodes.len();
        let depth = if opts.worker_depth == 0 {
            256
        } else {
            opts.worker_depth
        };
        if !emulated {
            for p in 0..n {
                cs.inner
                    .cache
                    .prefer_node(p, cache_nodes[p % cache_nodes.len()].id)?;
            }
        }
        let mut me = Partitions {
            sh: cs.inner.clone(),
            parts: Vec::new(),
            threads: Vec::new(),
            emulated,
            _cs: PhantomData,
        };
        for p in 0..n {
            let part = Arc::new(Part {
                bell: Arc::new(Bell::new()?),
                sleeping: AtomicBool::new(false),
                joining: Mutex::new(Vec::new()),
                joined: AtomicU64::new(0),
                closing: AtomicBool::new(false),
            });
            let cpus = (!emulated).then(|| cache_nodes[p % cache_nodes.len()].cpus.clone());
            let (sh, pt) = (me.sh.clone(), part.clone());
            let t = std::thread::Builder::new()
                .name(format!("setcache-part{p}"))
                .spawn(move || worker(sh, pt, p, depth, cpus))
                .map_err(|e| Error::Engine(format!("cannot start partition {p}'s worker: {e}")))?;
            me.parts.push(part);
            me.threads.push(t);
        }
        Ok(me)
    }

    /// How many partitions.
    pub fn count(&self) -> usize {
        self.parts.len()
    }

    /// Whether the partitions are emulated (their number is not the
    /// machine's nodes', or the machine has one node): workers not bound.
    pub fn emulated(&self) -> bool {
        self.emulated
    }

    /// The partition that owns the page holding byte `offset` of `file`.
    pub fn partition_of(&self, file: &CachedFile, offset: u64) -> usize {
        let page = offset / self.sh.cache.page_size() as u64;
        self.sh.cache.partition_of(file.id, page)
    }

    /// A queue for the calling thread, keeping at most `depth` requests
    /// outstanding (1 to 65,536).
    pub fn queue(&self, depth: usize) -> Result<PartQueue<'_>> {
        if !(1..=1 << 16).contains(&depth) {
            return Err(Error::InvalidArgument(format!(
                "queue depth {depth} is outside 1..=65536"
            )));
        }
        // Rings as deep as the requests outstanding: never full.
        let bundles = depth.next_power_of_two().max(2);
        let app = Arc::new(App {
            links: (0..self.parts.len())
                .map(|_| Arc::new(Link::new(bundles)))
                .collect(),
            sleeping: AtomicBool::new(false),
            thread: std::thread::current(),
        });
        for p in &self.parts {
            p.joining
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(app.clone());
            p.joined.fetch_add(1, Release);
            p.bell.ring();
        }
        Ok(PartQueue {
            parts: self,
            app,
            bundles: (0..self.parts.len()).map(|_| Bundle::default()).collect(),
            named: (0..self.parts.len()).map(|_| HashMap::new()).collect(),
            outstanding: 0,
            depth,
            done: Vec::new(),
            _not_send: PhantomData,
        })
    }
}

impl Drop for Partitions<'_> {
    fn drop(&mut self) {
        for p in &self.parts {
            p.closing.store(true, Release);
            p.bell.ring();
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Times a thread with nothing to do yields the CPU before it sleeps: a
/// reply or a bundle arriving meanwhile costs no wake-up.
const YIELDS: u32 = 32;

/// Most requests in one bundle before it is sent without waiting for
/// [`PartQueue::flush`].
const MAX_BUNDLE: usize = 64;

/// An application thread's queue of requests to the partitions. Requests
/// gather per partition until [`PartQueue::flush`], [`PartQueue::wait`], or a
/// bundle of 64, and go as one message per partition. Not `Send`: it belongs
/// to the thread that made it.
pub struct PartQueue<'p> {
    parts: &'p Partitions<'p>,
    app: Arc<App>,
    bundles: Vec<Bundle>,
    /// Per partition: the files named to its worker (by the address of
    /// their entry, which the worker's handle keeps alive) and their numbers.
    named: Vec<HashMap<usize, u32>>,
    outstanding: usize,
    depth: usize,
    done: Vec<PartCompletion>,
    _not_send: PhantomData<*const ()>,
}

impl PartQueue<'_> {
    /// Read `buf.len()` bytes at `offset` of `file` into `buf`, sent to the
    /// partition of the page holding `offset` (which also serves the rest of
    /// a read that crosses into the next page).
    pub fn read(&mut self, file: &CachedFile, offset: u64, buf: Vec<u8>, tag: u64) {
        self.add(What::Read, file, offset, buf, tag);
    }

    /// Write all of `buf` at `offset` of `file`.
    pub fn write(&mut self, file: &CachedFile, offset: u64, buf: Vec<u8>, tag: u64) {
        self.add(What::Write, file, offset, buf, tag);
    }

    /// Run `task(page, offset % page size, arg)` on the cached page holding
    /// `offset`, in its partition; the completion's `value` is its result.
    pub fn task(&mut self, file: &CachedFile, offset: u64, task: Task, arg: u64, tag: u64) {
        self.add(What::Task(task, arg), file, offset, Vec::new(), tag);
    }

    fn add(&mut self, what: What, file: &CachedFile, offset: u64, buf: Vec<u8>, tag: u64) {
        while self.outstanding >= self.depth {
            self.wait(1);
        }
        let p = self.parts.partition_of(file, offset);
        let key = Arc::as_ptr(&file.entry) as usize;
        let named = &mut self.named[p];
        let n = named.len() as u32;
        let no = *named.entry(key).or_insert_with(|| {
            self.bundles[p].files.push(file.clone());
            n
        });
        self.bundles[p].reqs.push(Req {
            what,
            file: no,
            offset,
            buf,
            tag,
        });
        self.outstanding += 1;
        if self.bundles[p].reqs.len() >= MAX_BUNDLE {
            self.send(p);
        }
    }

    /// Send partition `p`'s bundle.
    fn send(&mut self, p: usize) {
        if self.bundles[p].reqs.is_empty() {
            return;
        }
        let b = std::mem::take(&mut self.bundles[p]);
        let link = self.app.links[p].clone();
        let done = &mut self.done;
        let outstanding = &mut self.outstanding;
        let part = &self.parts.parts[p];
        link.send(
            b,
            |r| take_replies(r, done, outstanding),
            || {
                part.bell.ring();
                std::thread::yield_now();
            },
        );
        // The worker looks at its rings before it sleeps, after saying so.
        fence(SeqCst);
        if part.sleeping.load(Relaxed) {
            part.bell.ring();
        }
    }

    /// Send every bundle gathered.
    pub fn flush(&mut self) {
        for p in 0..self.bundles.len() {
            self.send(p);
        }
    }

    /// Requests sent or gathered and not yet finished.
    pub fn outstanding(&self) -> usize {
        self.outstanding
    }

    /// Take the replies that came back, without blocking; how many.
    pub fn poll(&mut self) -> usize {
        let before = self.outstanding;
        for l in &self.app.links {
            while let Some(r) = l.replies.pop() {
                take_replies(r, &mut self.done, &mut self.outstanding);
            }
        }
        before - self.outstanding
    }

    /// Send what is gathered, then block until `n` requests have finished
    /// (or nothing is outstanding); how many finished.
    pub fn wait(&mut self, n: usize) -> usize {
        self.flush();
        let mut got = self.poll();
        // While a worker holding some of them is at work (not waiting for the
        // devices or for bundles), its replies come soon: give the CPU to
        // whoever is ready (that worker, on a machine with few cores) rather
        // than sleep and be woken.
        let mut turns = 0;
        while got < n
            && self.outstanding > 0
            && turns < YIELDS
            && self.parts.parts.iter().any(|p| !p.sleeping.load(Relaxed))
        {
            std::thread::yield_now();
            got += self.poll();
            turns += 1;
        }
        while got < n && self.outstanding > 0 {
            self.app.sleeping.store(true, Relaxed);
            fence(SeqCst);
            let more = self.poll();
            if more == 0 {
                std::thread::park_timeout(Duration::from_millis(10));
            }
            self.app.sleeping.store(false, Relaxed);
            got += more + self.poll();
        }
        got
    }

    /// Move the finished requests to the end of `out`.
    pub fn take_completions(&mut self, out: &mut Vec<PartCompletion>) {
        out.append(&mut self.done);
    }
}

fn take_replies(r: Vec<Reply>, done: &mut Vec<PartCompletion>, outstanding: &mut usize) {
    *outstanding -= r.len();
    done.extend(r.into_iter().map(|r| PartCompletion {
        tag: r.tag,
        buf: r.buf,
        value: r.value,
        result: r.result,
    }));
}

impl Drop for PartQueue<'_> {
    fn drop(&mut self) {
        while self.outstanding > 0 {
            if self.wait(self.outstanding) == 0 && self.outstanding > 0 {
                std::thread::yield_now();
            }
        }
        for (l, p) in self.app.links.iter().zip(&self.parts.parts) {
            l.close();
            p.bell.ring();
        }
    }
}

/// An application as one worker serves it.
struct Served {
    app: Arc<App>,
    /// The files its link named, by number.
    files: Vec<CachedFile>,
    /// Requests of it in flight here.
    in_flight: usize,
    /// Replies gathered for its next bundle.
    out: Vec<Reply>,
    outbox: Outbox<Vec<Reply>>,
}

/// A request in flight on a worker's queue.
struct Flight {
    served: usize,
    tag: u64,
    what: What,
    offset: u64,
    /// A task's file, for its error.
    file: Option<CachedFile>,
}

/// Run `task` on `page` (holding byte `offset` of `file`, at `at`), catching
/// a panic as the request's error.
fn run_task(
    file: &CachedFile,
    offset: u64,
    page: &[u8],
    at: usize,
    task: Task,
    arg: u64,
) -> (u64, Result<()>) {
    match std::panic::catch_unwind(AssertUnwindSafe(|| task(page, at, arg))) {
        Ok(v) => (v, Ok(())),
        Err(e) => {
            let message = e
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| e.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "(no message)".into());
            let err = Error::TaskPanicked {
                file: file.entry.file.name(),
                offset,
                message,
            };
            (0, Err(err))
        }
    }
}

/// A task on a page that is cached now, run at once: `None` when the page
/// is not cached (or the request must take the queue's way, which reports
/// its errors: out of range, file gone, page references refused).
fn task_on_present(
    sh: &Shared,
    file: &CachedFile,
    offset: u64,
    ps: u64,
    task: Task,
    arg: u64,
) -> Option<(u64, Result<()>)> {
    if offset >= file.len() || file.entry.check().is_err() {
        return None;
    }
    let page = sh.cache.try_pin_present(file.id, offset / ps).ok()??;
    // After the pin, as the queue's page requests check.
    file.entry.refs_allowed().ok()?;
    Some(run_task(
        file,
        offset,
        &page,
        (offset % ps) as usize,
        task,
        arg,
    ))
}

/// Bind the calling thread to `cpus`.
fn bind(cpus: &[usize]) {
    // SAFETY: `cpu_set_t` is plain data; zeroed is empty.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &c in cpus {
        if c < libc::CPU_SETSIZE as usize {
            // SAFETY: `c` is inside the set.
            unsafe { libc::CPU_SET(c, &mut set) };
        }
    }
    // SAFETY: a valid set of its own size, for this thread.
    unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) };
}

/// Partition `index`'s worker: take bundles from every application's link,
/// serve them on a queue of its own, answer in bundles.
fn worker(sh: Arc<Shared>, part: Arc<Part>, index: usize, depth: usize, cpus: Option<Vec<usize>>) {
    if let Some(c) = &cpus {
        bind(c);
    }
    part.bell.set_owner();
    let mut q = CachedQueue::on(&sh, depth);
    q.set_bell(part.bell.clone());
    let ps = sh.cache.page_size() as u64;
    let mut served: Slab<Served> = Slab::new();
    let mut keys: Vec<usize> = Vec::new();
    let mut joined = 0u64;
    let mut flights: Slab<Flight> = Slab::new();
    let mut batch: Vec<(usize, Req)> = Vec::new();
    let mut quick: Vec<(usize, u64, (u64, Result<()>))> = Vec::new();
    let mut done: Vec<(u64, CachedCompletion)> = Vec::new();
    let mut pins: Vec<(u64, Result<RawPin>)> = Vec::new();
    let mut woken: VecDeque<usize> = VecDeque::new();
    // Looks in a row that found nothing to do.
    let mut idle = 0;
    loop {
        part.bell.take();
        if part.joined.load(Acquire) != joined {
            let mut j = part.joining.lock().unwrap_or_else(|e| e.into_inner());
            joined += j.len() as u64;
            for app in j.drain(..) {
                keys.push(served.insert(Served {
                    app,
                    files: Vec::new(),
                    in_flight: 0,
                    out: Vec::new(),
                    outbox: Outbox::new(),
                }));
            }
        }
        // Take every bundle waiting.
        for &k in &keys {
            let s = served.get_mut(k).expect("served");
            while let Some(b) = s.app.links[index].requests.pop() {
                s.files.extend(b.files);
                s.in_flight += b.reqs.len();
                batch.extend(b.reqs.into_iter().map(|r| (k, r)));
            }
        }
        if !batch.is_empty() {
            idle = 0;
            // Hints for the tasks first, as the queue gives its batches: the
            // sets' metadata of every page, then the first lines of the
            // frames of those cached, so that the memory misses overlap.
            for frame in [false, true] {
                for (k, r) in batch
                    .iter()
                    .filter(|(_, r)| matches!(r.what, What::Task(..)))
                {
                    let id = served.get(*k).expect("served").files[r.file as usize].id;
                    sh.cache.prefetch(id, r.offset / ps, frame);
                }
            }
            let mut reqs = Vec::with_capacity(batch.len());
            for (k, r) in batch.iter_mut() {
                let file = &served.get(*k).expect("served").files[r.file as usize];
                if let What::Task(task, arg) = r.what {
                    // A cached page: run the task at once, no queue.
                    if let Some(out) = task_on_present(&sh, file, r.offset, ps, task, arg) {
                        quick.push((*k, r.tag, out));
                        continue;
                    }
                }
                let f = flights.insert(Flight {
                    served: *k,
                    tag: r.tag,
                    what: r.what,
                    offset: r.offset,
                    file: None,
                });
                reqs.push(match r.what {
                    What::Read | What::Write => {
                        let kind = match r.what {
                            What::Read => OpKind::Read,
                            _ => OpKind::Write,
                        };
                        let buf = std::mem::take(&mut r.buf);
                        CachedRequest::tagged(kind, file, r.offset, buf, f as u64)
                    }
                    What::Task(..) => {
                        flights.get_mut(f).expect("flight").file = Some(file.clone());
                        CachedRequest::pin(file, r.offset, f as u64)
                    }
                });
            }
            q.submit_from(&mut reqs);
            drop(reqs);
            batch.clear();
            for (k, tag, (value, result)) in quick.drain(..) {
                let s = served.get_mut(k).expect("served");
                s.in_flight -= 1;
                s.out.push(Reply {
                    tag,
                    buf: Vec::new(),
                    value,
                    result,
                });
            }
        }
        // Finished requests become replies.
        q.take_completions(&mut done);
        for (f, c) in done.drain(..) {
            let fl = flights.remove(f as usize).expect("a request in flight");
            let s = served.get_mut(fl.served).expect("served");
            s.in_flight -= 1;
            s.out.push(Reply {
                tag: fl.tag,
                buf: c.buf,
                value: 0,
                result: c.result,
            });
        }
        q.take_pins(&mut pins);
        for (f, p) in pins.drain(..) {
            let fl = flights.remove(f as usize).expect("a request in flight");
            let (value, result) = match (p, fl.what) {
                (Ok(pin), What::Task(task, arg)) => {
                    // SAFETY: the pin came from this cache's queue, once.
                    let page = unsafe { sh.cache.restore_pin(pin) };
                    let file = fl.file.as_ref().expect("a task's file");
                    run_task(file, fl.offset, &page, (fl.offset % ps) as usize, task, arg)
                }
                (Err(e), _) => (0, Err(e)),
                (Ok(pin), _) => {
                    // SAFETY: as above; only tasks ask for pins.
                    drop(unsafe { sh.cache.restore_pin(pin) });
                    (0, Ok(()))
                }
            };
            let s = served.get_mut(fl.served).expect("served");
            s.in_flight -= 1;
            s.out.push(Reply {
                tag: fl.tag,
                buf: Vec::new(),
                value,
                result,
            });
        }
        // One bundle of replies per application.
        let mut stuck = false;
        keys.retain(|&k| {
            let s = served.get_mut(k).expect("served");
            let link = &s.app.links[index];
            let mut sent = s.outbox.retry(&**link);
            if !s.out.is_empty() {
                sent |= s.outbox.send(&**link, std::mem::take(&mut s.out));
            }
            if sent {
                woken.push_back(k);
            }
            stuck |= !s.outbox.is_empty();
            if link.is_closed()
                && s.in_flight == 0
                && s.outbox.is_empty()
                && link.requests.is_empty()
            {
                served.remove(k);
                return false;
            }
            true
        });
        for k in woken.drain(..) {
            if let Some(s) = served.get(k) {
                s.app.wake();
            }
        }
        if part.closing.load(Acquire) && keys.is_empty() && q.outstanding() == 0 {
            break;
        }
        if stuck {
            // A reply ring was full: its application takes replies soon.
            std::thread::sleep(Duration::from_micros(20));
            continue;
        }
        if idle < YIELDS && q.outstanding() == 0 {
            // Nothing for the devices: the next bundle comes from a thread
            // at work; give it the CPU rather than sleep and be woken.
            idle += 1;
            std::thread::yield_now();
            continue;
        }
        idle = 0;
        // Say so before the last look at the rings: a sender that pushes
        // after the look sees it and rings the bell.
        part.sleeping.store(true, Relaxed);
        fence(SeqCst);
        let waiting = part.joined.load(Acquire) != joined
            || keys.iter().any(|&k| {
                !served.get(k).expect("served").app.links[index]
                    .requests
                    .is_empty()
            });
        if !waiting {
            if q.outstanding() > 0 {
                // Returns early when the bell rings (new bundles).
                q.wait_as(1, true);
            } else {
                while !part.bell.rang() && !part.closing.load(Acquire) {
                    std::thread::park();
                }
            }
        }
        part.sleeping.store(false, Relaxed);
    }
}
