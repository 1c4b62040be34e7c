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
//! An application thread's [`PartQueue`] has a home partition, the one of
//! the node it runs on, whose pages it serves itself as the shared cache does
//! (they are local to it). It gathers its requests for every other partition
//! and sends each one bundle per batch over a bounded
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
//! the page is another node's). Partitions are real on a machine of two nodes
//! or more with one partition per cache node; otherwise they are *emulated*:
//! neither workers nor memory are bound. Which nodes cache and which do I/O is a setting: the partitions'
//! workers run on [`PartitionOptions::cache_nodes`], the devices' I/O threads
//! where the store's `cpu_affinity` puts them.

pub(crate) mod link;
pub(crate) mod ring;
mod serve;

use std::collections::{HashMap, VecDeque};
use std::marker::PhantomData;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release, SeqCst};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, fence};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::cached::readahead;
use crate::cached::shared::Shared;
use crate::cached::{CachedFile, CachedStore};
use crate::error::{Error, Result};
use crate::storage::queue::Bell;
pub use crate::util::nodes::{Node, nodes};
use crate::util::slab::Slab;
use link::{Link, Outbox};
use serve::Server;

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
    /// The partitions are real (each worker bound to its node's CPUs, each
    /// partition's memory to the node) when the machine has two nodes or
    /// more and there is one partition per cache node (`cache_nodes`, every
    /// node by default); otherwise they are emulated: the workers are not
    /// bound to CPUs, nor the partitions' memory to nodes.
    pub partitions: Option<usize>,
    /// The nodes whose CPUs run the partitions' workers and hold their
    /// memory (partition `p` on the `p`-th of them; a count of them other
    /// than the partitions' makes the partitions emulated); `None` for
    /// every node. The
    /// devices' I/O threads run where the store's `cpu_affinity` puts them, so
    /// that I/O nodes and caching nodes can be told apart as in the papers.
    pub cache_nodes: Option<Vec<usize>>,
    /// Device operations each worker keeps in flight (0: 256; at most
    /// [`MAX_QUEUE_DEPTH`](crate::MAX_QUEUE_DEPTH), more is refused).
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
    /// Whether the application thread's readahead took it for part of a
    /// sequential stream (reads and tasks): the partition reads its pages
    /// as a stream's, and notes nothing itself.
    stream: bool,
}

/// One message of requests: the files the link has not named before (a
/// handle each, numbered on from the link's last, or from 0 after `forget`),
/// then the requests.
#[derive(Default)]
struct Bundle {
    /// The worker lets go of the files the link named before (no request
    /// naming them is in flight): a queue does not keep every file it ever
    /// named open.
    forget: bool,
    files: Vec<CachedFile>,
    reqs: Vec<Req>,
}

/// Files a queue names to one partition before, at a moment when nothing it
/// sent there is in flight, it lets the partition forget them and numbers
/// anew.
const NAMED_MAX: usize = 64;

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
    /// True while the thread may be asleep waiting for replies.
    sleeping: AtomicBool,
    /// Wakes the thread, parked or waiting on its home partition's queue.
    bell: Arc<Bell>,
}

impl App {
    /// Wake the thread if it sleeps (after a reply was pushed).
    fn wake(&self) {
        fence(SeqCst);
        if self.sleeping.load(Relaxed) {
            self.bell.ring();
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
    /// Set when the worker stopped on a panic: nothing it held will be
    /// answered.
    dead: AtomicBool,
    /// In unit tests: the worker panics at its next batch (an internal fault).
    #[cfg(test)]
    fail_next: AtomicBool,
    /// In unit tests: the worker panics once it has answered every request
    /// it held.
    #[cfg(test)]
    fail_after_replies: AtomicBool,
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
    /// Each partition's node's CPUs, when partitions are real: a queue's
    /// home is the partition whose node runs the thread that makes it.
    part_cpus: Vec<Vec<usize>>,
    /// Why the partitions' memory is not bound to their nodes, when the
    /// kernel refused it.
    unbound: Option<String>,
    /// Why a worker is not bound to its node's CPUs, when the kernel
    /// refused it.
    unpinned: Option<String>,
    /// The next emulated partition to be a queue's home.
    next_home: AtomicUsize,
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
                for (k, id) in ids.iter().enumerate() {
                    if ids[..k].contains(id) {
                        return Err(Error::InvalidArgument(format!(
                            "cache node {id} is given twice"
                        )));
                    }
                }
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
        let depth = match opts.worker_depth {
            0 => 256,
            d if d > crate::storage::queue::MAX_QUEUE_DEPTH => {
                return Err(Error::InvalidArgument(format!(
                    "worker depth {d} is above the most a queue keeps in flight ({})",
                    crate::storage::queue::MAX_QUEUE_DEPTH
                )));
            }
            d => d,
        };
        // The frames' placement is a preference: where the kernel refuses it
        // (a container's seccomp profile refuses `mbind`), the partitions
        // work with their memory where it lies, and say so.
        let mut unbound = None;
        if !emulated {
            for p in 0..n {
                if let Err(e) = cs
                    .inner
                    .cache
                    .prefer_node(p, cache_nodes[p % cache_nodes.len()].id)
                {
                    unbound = Some(e.to_string());
                    break;
                }
            }
        }
        let mut me = Partitions {
            sh: cs.inner.clone(),
            parts: Vec::new(),
            threads: Vec::new(),
            emulated,
            unbound,
            unpinned: None,
            part_cpus: Vec::new(),
            next_home: AtomicUsize::new(0),
            _cs: PhantomData,
        };
        for p in 0..n {
            let part = Arc::new(Part {
                bell: Arc::new(Bell::new()?),
                sleeping: AtomicBool::new(false),
                joining: Mutex::new(Vec::new()),
                joined: AtomicU64::new(0),
                closing: AtomicBool::new(false),
                dead: AtomicBool::new(false),
                #[cfg(test)]
                fail_next: AtomicBool::new(false),
                #[cfg(test)]
                fail_after_replies: AtomicBool::new(false),
            });
            let cpus = (!emulated).then(|| cache_nodes[p % cache_nodes.len()].cpus.clone());
            if let Some(c) = &cpus {
                me.part_cpus.push(c.clone());
            }
            let (sh, pt) = (me.sh.clone(), part.clone());
            let (bound_tx, bound_rx) = std::sync::mpsc::sync_channel(1);
            let t = crate::util::fork_locks::spawn(
                std::thread::Builder::new().name(format!("setcache-part{p}")),
                move || worker(sh, pt, p, depth, cpus, bound_tx),
            )
            .map_err(|e| Error::os_call(format!("cannot start partition {p}'s worker"), e))?;
            me.parts.push(part);
            me.threads.push(t);
            // A worker says at once whether its binding held (an emulated
            // one asks for none); one that ended first said nothing.
            if let Ok(Err(why)) = bound_rx.recv()
                && me.unpinned.is_none()
            {
                me.unpinned = Some(format!("partition {p}'s worker: {why}"));
            }
        }
        Ok(me)
    }

    /// How many partitions.
    pub fn count(&self) -> usize {
        self.parts.len()
    }

    /// Whether the partitions are emulated (the machine has one node, or
    /// their number is not that of the cache nodes): workers not bound.
    pub fn emulated(&self) -> bool {
        self.emulated
    }

    /// Why the partitions' sets and frames are not bound to their nodes'
    /// memory although the partitions are not emulated (the kernel refused
    /// the binding of the partition it names: that one and those after it
    /// are served where their memory lies, those before it stay bound);
    /// `None` when bound, or emulated.
    pub fn memory_unbound(&self) -> Option<&str> {
        self.unbound.as_deref()
    }

    /// Why a partition's worker is not bound to its node's CPUs although the
    /// partitions are not emulated (the kernel refused the affinity: the
    /// worker runs wherever the scheduler puts it); `None` when bound, or
    /// emulated.
    pub fn workers_unbound(&self) -> Option<&str> {
        self.unpinned.as_deref()
    }

    /// The partition that owns the page holding byte `offset` of `file`.
    pub fn partition_of(&self, file: &CachedFile, offset: u64) -> usize {
        let page = offset / self.sh.cache.page_size() as u64;
        self.sh.cache.partition_of(file.id, page)
    }

    /// Bind the calling thread to the CPUs of partition `p`'s node, as its
    /// worker is, so that a queue it makes next ([`Partitions::queue`]) has
    /// `p` for its home and stays on that node. Refused with
    /// `InvalidArgument` when the partitions are emulated (they have no node
    /// of their own), `p` is not a partition or none of its node's CPUs fits
    /// an affinity mask, and with `Os` naming the call (and keeping its
    /// errno) when the kernel refuses the affinity; the thread is not moved.
    pub fn bind_thread(&self, p: usize) -> Result<()> {
        if self.emulated {
            return Err(Error::InvalidArgument(format!(
                "cannot bind a thread to partition {p}: the {} partitions are emulated, with no \
                 node of their own",
                self.parts.len()
            )));
        }
        let cpus = self.part_cpus.get(p).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "cannot bind a thread to partition {p}: there are {} partitions",
                self.parts.len()
            ))
        })?;
        bind_io(cpus).map_err(|e| match e {
            None => Error::InvalidArgument(format!(
                "cannot bind a thread to partition {p}: none of its node's CPUs {cpus:?} fits \
                 an affinity mask of {} CPUs",
                libc::CPU_SETSIZE
            )),
            Some(e) => Error::os_call(
                format!(
                    "cannot bind a thread to partition {p}: sched_setaffinity to CPUs {cpus:?}"
                ),
                e,
            ),
        })
    }

    /// A queue for the calling thread, keeping at most `depth` requests
    /// outstanding (1 to 65,536). Its home is the partition of the node the
    /// thread runs on (bind the thread first: [`Partitions::bind_thread`]),
    /// or with emulated partitions
    /// the next one in turn: the queue serves its home's pages itself and
    /// sends messages for the others'.
    pub fn queue(&self, depth: usize) -> Result<PartQueue<'_>> {
        let home = if self.emulated {
            Some(self.next_home.fetch_add(1, Relaxed) % self.parts.len())
        } else {
            // SAFETY: sched_getcpu has no preconditions.
            let cpu = unsafe { libc::sched_getcpu() };
            let cpu = usize::try_from(cpu).ok();
            cpu.and_then(|c| self.part_cpus.iter().position(|cs| cs.contains(&c)))
        };
        self.queue_on(depth, home)
    }

    /// A queue for the calling thread whose home is partition `home` (its
    /// pages served by the thread itself), or with `None` none: every request
    /// goes by message to its partition's worker.
    pub fn queue_on(&self, depth: usize, home: Option<usize>) -> Result<PartQueue<'_>> {
        if !(1..=crate::storage::queue::MAX_QUEUE_DEPTH).contains(&depth) {
            return Err(Error::InvalidArgument(format!(
                "queue depth {depth} is outside 1..=65536"
            )));
        }
        if let Some(h) = home.filter(|&h| h >= self.parts.len()) {
            return Err(Error::InvalidArgument(format!(
                "home partition {h}, but there are {} partitions (0 to {})",
                self.parts.len(),
                self.parts.len() - 1
            )));
        }
        let bell = Arc::new(Bell::new()?);
        bell.set_owner();
        // Rings as deep as the requests outstanding: never full.
        let bundles = depth.next_power_of_two().max(2);
        let app = Arc::new(App {
            links: (0..self.parts.len())
                .map(|_| Arc::new(Link::new(bundles)))
                .collect(),
            sleeping: AtomicBool::new(false),
            bell: bell.clone(),
        });
        for p in &self.parts {
            // Under the lock a stopping worker clears the list with: a queue
            // is either cleared with it or sees the flag.
            let mut joining = p.joining.lock().unwrap_or_else(|e| e.into_inner());
            if p.dead.load(Acquire) {
                // No worker takes it in: the queue's next `wait` or `poll`
                // with a request counted there panics, naming the partition.
                continue;
            }
            joining.push(app.clone());
            drop(joining);
            p.joined.fetch_add(1, Release);
            p.bell.ring();
        }
        let local = home.map(|_| {
            let mut server = Server::new(&self.sh, depth);
            server.q.set_bell(bell);
            Local {
                server,
                files: Vec::new(),
                batch: Vec::new(),
            }
        });
        Ok(PartQueue {
            parts: self,
            app,
            bundles: (0..self.parts.len()).map(|_| Bundle::default()).collect(),
            named: (0..self.parts.len()).map(|_| HashMap::new()).collect(),
            last: vec![(0, 0); self.parts.len()],
            outstanding: 0,
            sent: vec![0; self.parts.len()],
            waits: 0,
            gathered_at: vec![0; self.parts.len()],
            depth,
            done: Vec::new(),
            refused: 0,
            home,
            local,
            _not_send: PhantomData,
        })
    }
}

impl Drop for Partitions<'_> {
    fn drop(&mut self) {
        if !self.sh.origin.is_here() {
            // A child made by `fork`: the workers are the parent's threads
            // (their bells the parent's eventfds), neither told nor joined.
            std::mem::forget(std::mem::take(&mut self.threads));
            return;
        }
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

/// Fewest requests in a bundle that [`PartQueue::wait`] sends while the
/// thread's own requests keep it busy.
const SEND_AT: usize = 8;

/// Waits a smaller bundle may sit through, while the thread's own requests
/// satisfy them, before it is sent all the same: a request for another
/// partition is not held back for as long as home hits keep coming.
const SEND_AFTER_WAITS: u32 = 4;

/// An application thread's queue of requests to the partitions. Requests
/// gather per partition until [`PartQueue::flush`], [`PartQueue::wait`], or a
/// bundle of 64, and go as one message per partition; those for the queue's
/// home partition are served by the thread itself, on a queue of its own, as
/// the shared cache serves them. A request that would wait for a page guard
/// of this thread (a write of a page it holds, a read or task on a page it
/// holds mutably) completes at once with [`Error::HeldByCaller`]. Not
/// `Send`: it belongs to the thread that made it.
pub struct PartQueue<'p> {
    parts: &'p Partitions<'p>,
    app: Arc<App>,
    bundles: Vec<Bundle>,
    /// Per partition: the files named to its worker (by the address of
    /// their entry, which the worker's handle keeps alive, with the low bit
    /// set for a read-only handle) and their numbers.
    named: Vec<HashMap<usize, u32>>,
    /// Per partition: the last file named in a request to it and its number
    /// (address 0: none yet).
    last: Vec<(usize, u32)>,
    outstanding: usize,
    /// Per partition: requests sent to its worker and not yet answered.
    sent: Vec<usize>,
    /// Calls of [`PartQueue::wait`] so far (wrapping), and per partition
    /// the count when its bundle took its first request.
    waits: u32,
    gathered_at: Vec<u32>,
    depth: usize,
    done: Vec<PartCompletion>,
    /// Requests answered in `done` at once, without being sent (a file of
    /// another store), not yet counted by a `reap`.
    refused: usize,
    home: Option<usize>,
    local: Option<Local<'p>>,
    _not_send: PhantomData<*const ()>,
}

/// What a queue serves itself: its home partition's requests.
struct Local<'p> {
    server: Server<'p, ()>,
    /// The files named in them, by number (as `PartQueue::named` numbers).
    files: Vec<CachedFile>,
    /// Requests gathered and not yet started.
    batch: Vec<((), Req)>,
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

    /// Answer a request at once with `e`, without sending it.
    fn refuse(&mut self, tag: u64, buf: Vec<u8>, e: Error) {
        self.done.push(PartCompletion {
            tag,
            buf,
            value: 0,
            result: Err(e),
        });
        self.refused += 1;
    }

    fn add(&mut self, what: What, file: &CachedFile, offset: u64, buf: Vec<u8>, tag: u64) {
        while self.outstanding >= self.depth {
            self.wait(1);
        }
        // A file of another cached store: its cache ids name other files
        // here, so nothing of it may reach this store's cache, readahead or
        // partitions. Answered at once, as a request the server refuses.
        if !Arc::ptr_eq(&file.shared, &self.parts.sh) {
            let e = Error::InvalidArgument(format!(
                "file {:?} belongs to another cached store than these partitions",
                file.entry.file.name()
            ));
            return self.refuse(tag, buf, e);
        }
        // A page this thread holds a guard of, which the request would wait
        // for (a write: any guard; a read or a task: a mutable one), wherever
        // it is served: refused at once, as the thread's own calls are.
        if (!buf.is_empty() || matches!(what, What::Task(..)))
            && let Err(e) = file.check_held(
                offset,
                offset.saturating_add(buf.len() as u64),
                matches!(what, What::Write),
            )
        {
            return self.refuse(tag, buf, e);
        }
        // Streams are detected here, where the whole sequence of a thread's
        // requests is seen: a partition sees only the pages its hash names,
        // which a scan does not reach in order.
        let sh = &*self.parts.sh;
        let stream = match what {
            What::Read => {
                let in_flight = self.outstanding as u64 * buf.len() as u64;
                readahead::note_read(
                    sh,
                    &file.entry,
                    file.id,
                    offset,
                    buf.len() as u64,
                    in_flight,
                )
            }
            What::Task(..) => {
                let ps = sh.cache.page_size() as u64;
                readahead::note_page(sh, &file.entry, file.id, offset / ps, 0)
            }
            What::Write => false,
        };
        let p = self.parts.partition_of(file, offset);
        // A file's entry, and whether this handle may write: a read-only
        // handle and a writable one of one file are numbered apart, since
        // the server checks each request against the handle it was named by.
        // (An entry's address is aligned, so its low bit is free.)
        let key = Arc::as_ptr(&file.entry) as usize | usize::from(file.read_only);
        // The file of the partition's last request first: a thread mostly
        // reads one file, and this spares it a hash per request.
        let (last_key, last_no) = self.last[p];
        let known = (last_key == key).then_some(last_no);
        if known.is_none() && self.named[p].len() >= NAMED_MAX && !self.named[p].contains_key(&key)
        {
            // A queue that always has requests there (a reader that keeps
            // its depth full, file after file) would never find the moment
            // to forget: make it, once per `NAMED_MAX` files.
            self.settle(p);
            self.forget_named(p);
        }
        let named = &mut self.named[p];
        let n = named.len() as u32;
        self.outstanding += 1;
        if let Some(l) = self.local.as_mut().filter(|_| self.home == Some(p)) {
            let no = known.unwrap_or_else(|| {
                *named.entry(key).or_insert_with(|| {
                    l.files.push(file.clone());
                    n
                })
            });
            self.last[p] = (key, no);
            let req = Req {
                what,
                file: no,
                offset,
                buf,
                tag,
                stream,
            };
            l.batch.push(((), req));
            if l.batch.len() >= MAX_BUNDLE {
                self.start_local();
            }
            return;
        }
        let bundle = &mut self.bundles[p];
        let no = known.unwrap_or_else(|| {
            *named.entry(key).or_insert_with(|| {
                bundle.files.push(file.clone());
                n
            })
        });
        self.last[p] = (key, no);
        if self.bundles[p].reqs.is_empty() {
            self.gathered_at[p] = self.waits;
        }
        self.bundles[p].reqs.push(Req {
            what,
            file: no,
            offset,
            buf,
            tag,
            stream,
        });
        if self.bundles[p].reqs.len() >= MAX_BUNDLE {
            self.send(p);
        }
    }

    /// Start the home partition's requests gathered, and take those that
    /// finished at once (hits); how many.
    fn start_local(&mut self) -> usize {
        if let Some(l) = self.local.as_mut()
            && !l.batch.is_empty()
        {
            let files = &l.files;
            l.server.start(&mut l.batch, |_, no| &files[no as usize]);
        }
        self.take_local()
    }

    /// Take the home partition's finished requests; how many.
    fn take_local(&mut self) -> usize {
        let Some(l) = self.local.as_mut() else {
            return 0;
        };
        let (done, outstanding) = (&mut self.done, &mut self.outstanding);
        l.server.finish(|(), r| {
            *outstanding -= 1;
            done.push(r.into());
        })
    }

    /// Requests of the home partition started and not yet finished.
    fn local_outstanding(&self) -> usize {
        self.local.as_ref().map_or(0, |l| l.server.q.outstanding())
    }

    /// Wait until nothing this queue gave partition `p` is gathered or in
    /// flight (the replies kept for `take_completions`).
    fn settle(&mut self, p: usize) {
        if self.home == Some(p) && self.local.is_some() {
            while self.outstanding > 0
                && self
                    .local
                    .as_ref()
                    .is_some_and(|l| !l.batch.is_empty() || l.server.q.outstanding() > 0)
            {
                self.wait(1);
            }
        } else {
            self.send(p);
            while self.outstanding > 0 && self.sent[p] > 0 {
                self.wait(1);
            }
        }
    }

    /// If nothing this queue gave partition `p` is in flight or gathered,
    /// let go of the files it named there (the partition's worker, or this
    /// queue's own server for its home partition, forgets them too), so
    /// that their handles do not live as long as the queue.
    fn forget_named(&mut self, p: usize) {
        if self.home == Some(p)
            && let Some(l) = self.local.as_mut()
        {
            if !l.batch.is_empty() || l.server.q.outstanding() > 0 {
                return;
            }
            l.files.clear();
        } else {
            let b = &mut self.bundles[p];
            if self.sent[p] > 0 || !b.reqs.is_empty() {
                return;
            }
            b.files.clear();
            b.forget = true;
        }
        self.named[p].clear();
        self.last[p] = (0, 0);
    }

    /// The partition whose pages this queue serves itself, if any.
    pub fn home(&self) -> Option<usize> {
        self.home
    }

    /// Send partition `p`'s bundle.
    fn send(&mut self, p: usize) {
        if self.bundles[p].reqs.is_empty() {
            return;
        }
        self.check_workers();
        let b = std::mem::take(&mut self.bundles[p]);
        self.sent[p] += b.reqs.len();
        let link = self.app.links[p].clone();
        let done = &mut self.done;
        let outstanding = &mut self.outstanding;
        let sent = &mut self.sent[p];
        let part = &self.parts.parts[p];
        link.send(
            b,
            |r| take_replies(r, done, outstanding, sent),
            || {
                if part.dead.load(Acquire) {
                    panic!("partition {p}'s worker stopped on a panic; a bundle to it cannot go");
                }
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

    /// Send every bundle gathered, and start the home partition's requests.
    pub fn flush(&mut self) {
        for p in 0..self.bundles.len() {
            self.send(p);
        }
        self.start_local();
    }

    /// Requests sent or gathered and not yet finished.
    pub fn outstanding(&self) -> usize {
        self.outstanding
    }

    /// Send what is gathered, then take the replies that came back and the
    /// home partition's requests that finished, without blocking; how many.
    pub fn poll(&mut self) -> usize {
        let before = self.outstanding + self.refused;
        self.flush();
        if self.reap() == 0 {
            // A caller that only polls learns of a stopped worker here.
            self.check_workers();
        }
        before - self.outstanding
    }

    /// Take the replies that came back and the home partition's requests
    /// that finished, without blocking or sending; how many.
    fn reap(&mut self) -> usize {
        let before = self.outstanding + std::mem::take(&mut self.refused);
        for (l, sent) in self.app.links.iter().zip(&mut self.sent) {
            while let Some(r) = l.replies.pop() {
                take_replies(r, &mut self.done, &mut self.outstanding, sent);
            }
        }
        if self.local_outstanding() > 0
            && let Some(l) = self.local.as_mut()
        {
            l.server.q.poll();
        }
        self.take_local();
        before - self.outstanding
    }

    /// Send what is gathered, then block until `n` requests have finished
    /// (or nothing is outstanding); how many finished. When the home
    /// partition's requests alone finish `n` at once (hits), bundles smaller
    /// than 8 requests wait for more requests or for a wait that would block.
    pub fn wait(&mut self, n: usize) -> usize {
        let mut got = self.start_local();
        got += self.reap();
        self.waits = self.waits.wrapping_add(1);
        for p in 0..self.bundles.len() {
            let len = self.bundles[p].reqs.len();
            let aged = self.waits.wrapping_sub(self.gathered_at[p]) >= SEND_AFTER_WAITS;
            if got < n || len >= SEND_AT || (len > 0 && aged) {
                self.send(p);
            }
        }
        if got >= n {
            return got;
        }
        // While a worker holding some of them is at work (not waiting for the
        // devices or for bundles), its replies come soon: give the CPU to
        // whoever is ready (that worker, on a machine with few cores) rather
        // than sleep and be woken.
        let mut turns = 0;
        while got < n
            && self.outstanding > self.local_outstanding()
            && turns < YIELDS
            && self.parts.parts.iter().any(|p| !p.sleeping.load(Relaxed))
        {
            std::thread::yield_now();
            got += self.reap();
            turns += 1;
        }
        while got < n && self.outstanding > 0 {
            self.check_workers();
            // Silenced before the flag is set: a worker that pushes after the
            // look below sees the flag and rings again.
            self.app.bell.take();
            self.app.sleeping.store(true, Relaxed);
            fence(SeqCst);
            let more = self.reap();
            if more == 0 {
                match self.local.as_mut() {
                    // Its devices' completions or the bell, whichever first.
                    Some(l) if l.server.q.outstanding() > 0 => {
                        l.server.q.wait_as(1, true);
                    }
                    _ => std::thread::park_timeout(Duration::from_millis(10)),
                }
            }
            self.app.sleeping.store(false, Relaxed);
            got += more + self.reap();
        }
        got
    }

    /// Send what is gathered and block until no request is outstanding (the
    /// completions stay for [`PartQueue::take_completions`]). Requests in
    /// flight together are not ordered with one another, and a `sync` of a
    /// file covers the writes whose completions came back before it: drain
    /// first.
    pub fn drain(&mut self) {
        while self.outstanding > 0 {
            if self.wait(self.outstanding) == 0 && self.outstanding > 0 {
                std::thread::yield_now();
            }
        }
    }

    /// Panics if a worker holding requests of this queue stopped on a panic
    /// (an internal fault: no input makes one panic), rather than wait for
    /// replies that cannot come.
    fn check_workers(&mut self) {
        for (p, part) in self.parts.parts.iter().enumerate() {
            if self.sent[p] > 0 && part.dead.load(Acquire) {
                // Replies it sent before it stopped (seen through the flag's
                // acquire) are answers, not losses.
                while let Some(r) = self.app.links[p].replies.pop() {
                    take_replies(r, &mut self.done, &mut self.outstanding, &mut self.sent[p]);
                }
                if self.sent[p] == 0 {
                    continue;
                }
                panic!(
                    "partition {p}'s worker stopped on a panic with {} requests of this queue unanswered",
                    self.sent[p]
                );
            }
        }
    }

    /// Move the finished requests to the end of `out`.
    pub fn take_completions(&mut self, out: &mut Vec<PartCompletion>) {
        out.append(&mut self.done);
    }
}

fn take_replies(
    r: Vec<Reply>,
    done: &mut Vec<PartCompletion>,
    outstanding: &mut usize,
    sent: &mut usize,
) {
    *outstanding -= r.len();
    *sent -= r.len();
    done.extend(r.into_iter().map(PartCompletion::from));
}

impl From<Reply> for PartCompletion {
    fn from(r: Reply) -> PartCompletion {
        PartCompletion {
            tag: r.tag,
            buf: r.buf,
            value: r.value,
            result: r.result,
        }
    }
}

impl Drop for PartQueue<'_> {
    fn drop(&mut self) {
        if !self.parts.sh.origin.is_here() {
            // A child made by `fork`: the requests out are the parent's
            // (answered to the parent's copy): nothing is drained, closed or
            // rung (the home partition's queue leaves its own in a child).
            return;
        }
        // Unwinding (a worker's stop, say): the requests still out are left
        // to their workers, which own their buffers. The drain panics if a
        // worker holding some of them stopped: the links are closed all the
        // same (a worker keeps serving an open link, and the partitions'
        // drop waits for every worker), then the panic goes on.
        let drained = if std::thread::panicking() {
            Ok(())
        } else {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.drain()))
        };
        for (l, p) in self.app.links.iter().zip(&self.parts.parts) {
            l.close();
            p.bell.ring();
        }
        if let Err(e) = drained {
            std::panic::resume_unwind(e);
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

/// Bind the calling thread to `cpus`; why not, in words.
fn bind(cpus: &[usize]) -> std::result::Result<(), String> {
    bind_io(cpus).map_err(|e| match e {
        None => format!(
            "none of its node's CPUs {cpus:?} fits an affinity mask of {} CPUs",
            libc::CPU_SETSIZE
        ),
        Some(e) => format!("sched_setaffinity to CPUs {cpus:?} failed: {e}"),
    })
}

/// Bind the calling thread to `cpus`: `Err(None)` when none of them fits an
/// affinity mask, else `Err(Some)` with the kernel's error (its errno kept).
fn bind_io(cpus: &[usize]) -> std::result::Result<(), Option<std::io::Error>> {
    // SAFETY: `cpu_set_t` is plain data; zeroed is empty.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let mut any = false;
    for &c in cpus {
        if c < libc::CPU_SETSIZE as usize {
            // SAFETY: `c` is inside the set.
            unsafe { libc::CPU_SET(c, &mut set) };
            any = true;
        }
    }
    if !any {
        return Err(None);
    }
    // SAFETY: a valid set of its own size, for this thread.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) };
    if rc == 0 {
        Ok(())
    } else {
        Err(Some(std::io::Error::last_os_error()))
    }
}

/// Partition `index`'s worker: take bundles from every application's link,
/// serve them on a queue of its own, answer in bundles.
fn worker(
    sh: Arc<Shared>,
    part: Arc<Part>,
    index: usize,
    depth: usize,
    cpus: Option<Vec<usize>>,
    bound: std::sync::mpsc::SyncSender<std::result::Result<(), String>>,
) {
    // Whether the binding held, told before anything is served.
    let _ = bound.send(cpus.as_deref().map_or(Ok(()), bind));
    drop(bound);
    let p = part.clone();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        serve_part(sh, part, index, depth)
    }));
    if let Err(e) = r {
        // The application threads waiting for its replies see the flag and
        // fail: their waits look every 10 ms, or, while the thread's home
        // partition has requests of its own in flight, when one of those
        // ends (within the pin wait, or the I/O wait for a page in I/O).
        p.dead.store(true, Release);
        // Queues that joined and were never taken in: no one will, and
        // each holds its rings and doorbell.
        p.joining.lock().unwrap_or_else(|e| e.into_inner()).clear();
        std::panic::resume_unwind(e);
    }
}

/// [`worker`]'s loop.
fn serve_part(sh: Arc<Shared>, part: Arc<Part>, index: usize, depth: usize) {
    part.bell.set_owner();
    let mut server: Server<'_, usize> = Server::new(&sh, depth);
    server.q.set_bell(part.bell.clone());
    let mut served: Slab<Served> = Slab::new();
    let mut keys: Vec<usize> = Vec::new();
    let mut joined = 0u64;
    let mut batch: Vec<(usize, Req)> = Vec::new();
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
                if b.forget {
                    s.files.clear();
                }
                s.files.extend(b.files);
                s.in_flight += b.reqs.len();
                batch.extend(b.reqs.into_iter().map(|r| (k, r)));
            }
        }
        #[cfg(test)]
        if !batch.is_empty() && part.fail_next.swap(false, SeqCst) {
            panic!("a test's fault in partition {index}'s worker");
        }
        if !batch.is_empty() {
            idle = 0;
            server.start(&mut batch, |k, no| {
                &served.get(k).expect("served").files[no as usize]
            });
        }
        // Finished requests become replies.
        server.finish(|k, reply| {
            let s = served.get_mut(k).expect("served");
            s.in_flight -= 1;
            s.out.push(reply);
        });
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
            // Once the partitions close no queue of them is alive, even one
            // leaked without its drop (which would have closed its link).
            if (link.is_closed() || part.closing.load(Acquire))
                && s.in_flight == 0
                && s.outbox.is_empty()
                && link.requests.is_empty()
            {
                served.remove(k);
                return false;
            }
            true
        });
        #[cfg(test)]
        let replied = !woken.is_empty();
        for k in woken.drain(..) {
            if let Some(s) = served.get(k) {
                s.app.wake();
            }
        }
        #[cfg(test)]
        if replied
            && part.fail_after_replies.load(SeqCst)
            && keys.iter().all(|&k| {
                served
                    .get(k)
                    .is_some_and(|s| s.in_flight == 0 && s.outbox.is_empty())
            })
        {
            panic!("a test's fault in partition {index}'s worker, after its last replies");
        }
        if part.closing.load(Acquire) && keys.is_empty() && server.q.outstanding() == 0 {
            break;
        }
        if stuck {
            // A reply ring was full: its application takes replies soon.
            std::thread::sleep(Duration::from_micros(20));
            continue;
        }
        if idle < YIELDS && server.q.outstanding() == 0 {
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
            if server.q.outstanding() > 0 {
                // Returns early when the bell rings (new bundles).
                server.q.wait_as(1, true);
            } else {
                while !part.bell.rang() && !part.closing.load(Acquire) {
                    std::thread::park();
                }
            }
        }
        part.sleeping.store(false, Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::CacheOptions;
    use crate::storage::layout::LayoutKind;
    use crate::{Store, StoreOptions};

    /// A server whose every round brings only tasks on cached pages, run at
    /// once with nothing submitted (as a worker's rounds are while other
    /// threads keep its rings full and it never reaches its wait), still
    /// finishes the miss it sent to the devices before.
    #[test]
    fn a_server_kept_busy_by_tasks_on_cached_pages_finishes_its_misses() {
        let dir = std::env::temp_dir().join(format!("setcache-part-busy-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let store = Store::open(&[&dir], StoreOptions::default()).unwrap();
        let f = store.create("f", 64 * 4096, LayoutKind::Stripe).unwrap();
        let mut b = crate::AlignedBuf::new(64 * 4096);
        for (i, x) in b.iter_mut().enumerate() {
            *x = (i / 4096 + 1) as u8;
        }
        f.write_at(0, &b).unwrap();
        drop(f);
        let cs = CachedStore::new(
            store,
            CacheOptions {
                size: 4 << 20,
                partitions: 2,
                ..CacheOptions::default()
            },
        )
        .unwrap();
        let file = cs.open_file("f").unwrap();
        let mut one = [0u8; 1];
        file.read_at(0, &mut one).unwrap();
        fn first_byte(page: &[u8], at: usize, _: u64) -> u64 {
            page[at] as u64
        }
        let task = |offset: u64, tag: u64| Req {
            what: What::Task(first_byte, 0),
            file: 0,
            offset,
            buf: Vec::new(),
            tag,
            stream: false,
        };
        let files = [file.clone()];
        let mut server: Server<'_, u32> = Server::new(&cs.inner, 8);
        // A miss whose read is still out when `start` returns (a fast
        // device may finish one within its submission: then the next page).
        let mut out = None;
        for page in 8..64u64 {
            server.start(&mut vec![(0, task(page * 4096, page))], |_, n| {
                &files[n as usize]
            });
            if server.q.outstanding() == 1 {
                out = Some(page);
                break;
            }
            server.finish(|_, r| assert_eq!(r.value, page + 1, "page {page}"));
        }
        let out = out.expect("every miss finished within its submission");
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        let (mut missed, mut hits) = (None, 0u64);
        while missed.is_none() && std::time::Instant::now() < deadline {
            server.start(&mut vec![(0, task(0, 0))], |_, n| &files[n as usize]);
            server.finish(|_, r| {
                r.result.as_ref().unwrap();
                match r.tag {
                    t if t == out => missed = Some(r.value),
                    _ => {
                        assert_eq!(r.value, 1);
                        hits += 1;
                    }
                }
            });
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(
            missed,
            Some(out + 1),
            "a miss left unfinished through {hits} rounds of tasks on cached pages"
        );
        drop(server);
        drop(files);
        drop(file);
        drop(cs);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A queue that reads many files in turn, each let go after its read,
    /// does not keep them all open: past `NAMED_MAX` files named to a
    /// partition, at a moment when nothing is in flight there, the partition
    /// forgets them. Through the workers, and through the queue's own home
    /// partition.
    #[test]
    fn a_queue_lets_go_of_the_files_it_named() {
        let dir = std::env::temp_dir().join(format!("setcache-part-named-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let store = Store::open(&[&dir], StoreOptions::default()).unwrap();
        // Each file's bytes its own, so that a read through a stale number
        // shows.
        let mut b = crate::AlignedBuf::new(8192);
        for i in 0..300 {
            b.fill((i % 251 + 1) as u8);
            let f = store
                .create(&format!("f{i}"), 8192, LayoutKind::Stripe)
                .unwrap();
            f.write_at(0, &b).unwrap();
        }
        let opts = CacheOptions {
            size: 4 << 20,
            partitions: 2,
            ..CacheOptions::default()
        };
        let cs = CachedStore::new(store, opts).unwrap();
        let parts = Partitions::new(&cs, PartitionOptions::default()).unwrap();
        if parts.emulated() {
            let e = parts.bind_thread(0).unwrap_err().to_string();
            assert!(e.contains("emulated"), "{e}");
        }
        // Entries some handle besides the table's still holds.
        let held = || {
            cs.inner
                .files
                .read()
                .unwrap()
                .values()
                .filter(|e| Arc::strong_count(e) > 1)
                .count()
        };
        for home in [None, Some(0)] {
            let mut q = parts.queue_on(16, home).unwrap();
            for i in 0..300 {
                let f = cs.open_file(&format!("f{i}")).unwrap();
                q.read(&f, 0, vec![0; 4096], 0);
                q.read(&f, 4096, vec![0; 4096], 1);
                drop(f);
                q.drain();
                let mut done = Vec::new();
                q.take_completions(&mut done);
                assert_eq!(done.len(), 2);
                for c in &done {
                    c.result.as_ref().unwrap();
                    let want = (i % 251 + 1) as u8;
                    assert!(
                        c.buf.iter().all(|&x| x == want),
                        "f{i}: a stale number read another file"
                    );
                }
            }
            // The drains waited for the replies, so the workers took every
            // bundle, and its forgetting, before.
            let n = held();
            assert!(
                n <= 2 * (NAMED_MAX + 1),
                "{n} of 300 files still held by a queue (home {home:?})"
            );
            drop(q);
            // A reader that keeps requests in flight from one file to the
            // next, never drained: the queue makes the moment to forget.
            let mut q = parts.queue_on(32, home).unwrap();
            let check = |q: &mut PartQueue<'_>| {
                let mut done = Vec::new();
                q.take_completions(&mut done);
                for c in &done {
                    c.result.as_ref().unwrap();
                    let want = ((c.tag / 2) % 251 + 1) as u8;
                    assert!(
                        c.buf.iter().all(|&x| x == want),
                        "f{}: a stale number read another file",
                        c.tag / 2
                    );
                }
            };
            for i in 0..300u64 {
                let f = cs.open_file(&format!("f{i}")).unwrap();
                q.read(&f, 0, vec![0; 4096], 2 * i);
                q.read(&f, 4096, vec![0; 4096], 2 * i + 1);
                drop(f);
                // (A read waits for one to finish when 32 are out.)
                check(&mut q);
            }
            let n = held();
            q.drain();
            check(&mut q);
            assert!(
                n <= 2 * (NAMED_MAX + 1) + 32,
                "{n} of 300 files still held by a queue kept busy (home {home:?})"
            );
            drop(q);
        }
        drop(parts);
        drop(cs);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// On a machine of two nodes whose kernel refuses to bind memory (here:
    /// two nodes given in place of the machine's one, so that binding to
    /// node 1 is refused), the partitions still start, bound to nodes but
    /// with their memory where it lies, say why, and serve reads. A worker
    /// whose node's CPUs the kernel refuses as its affinity (a node given
    /// whose CPU this machine lacks, or past any mask) runs where the
    /// scheduler puts it, and the partitions say so too, naming the worker
    /// and the call; workers whose binding held say nothing.
    #[test]
    fn partitions_whose_memory_or_workers_cannot_be_bound_still_serve() {
        use crate::util::nodes::{FAKE_NODES, Node};
        let dir =
            std::env::temp_dir().join(format!("setcache-part-unbound-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let store = Store::open(&[&dir], StoreOptions::default()).unwrap();
        let f = store.create("f", 1 << 20, LayoutKind::Stripe).unwrap();
        let mut b = crate::AlignedBuf::new(1 << 20);
        b.fill(7);
        f.write_at(0, &b).unwrap();
        drop((f, store));
        for (cpus, workers) in [
            (vec![0], None),
            (vec![1000], Some("sched_setaffinity")),
            (
                vec![libc::CPU_SETSIZE as usize + 3],
                Some("fits an affinity mask"),
            ),
        ] {
            FAKE_NODES.with(|f| {
                *f.borrow_mut() = Some(vec![
                    Node {
                        id: 0,
                        cpus: vec![0],
                    },
                    Node { id: 1, cpus },
                ])
            });
            // The cache's sets divided as the nodes are, when it is made.
            let store = Store::open(&[&dir], StoreOptions::default()).unwrap();
            let opts = CacheOptions {
                size: 4 << 20,
                partitions: 0,
                ..CacheOptions::default()
            };
            let cs = CachedStore::new(store, opts).unwrap();
            let f = cs.open_file("f").unwrap();
            let parts = Partitions::new(&cs, PartitionOptions::default());
            FAKE_NODES.with(|f| *f.borrow_mut() = None);
            let parts = parts.unwrap();
            assert!(!parts.emulated());
            let why = parts
                .memory_unbound()
                .expect("memory bound to a node that is not there");
            assert!(why.contains("NUMA node 1"), "{why}");
            match (workers, parts.workers_unbound()) {
                (None, None) => {}
                (Some(word), Some(why)) => assert!(
                    why.contains("partition 1's worker") && why.contains(word),
                    "{why}"
                ),
                (want, got) => panic!("workers unbound: {got:?}, where {want:?} was due"),
            }
            // A thread bound to a partition's node (on a thread of its own,
            // so that this one keeps its CPUs) has that partition for its
            // queue's home; a binding the kernel refuses names why, and a
            // partition that is not there is refused.
            let (bound, allowed, home) = std::thread::scope(|sc| {
                sc.spawn(|| {
                    let p = if workers.is_none() { 0 } else { 1 };
                    let bound = parts.bind_thread(p).map_err(|e| e.to_string());
                    let status = std::fs::read_to_string("/proc/thread-self/status").unwrap();
                    let allowed = status
                        .lines()
                        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
                        .map(|v| v.trim().to_string());
                    let home = bound.is_ok().then(|| parts.queue(4).unwrap().home());
                    (bound, allowed, home)
                })
                .join()
                .unwrap()
            });
            match workers {
                None => {
                    bound.unwrap();
                    assert_eq!(allowed.as_deref(), Some("0"));
                    assert_eq!(home, Some(Some(0)));
                }
                Some(word) => {
                    let why = bound.unwrap_err();
                    assert!(why.contains("partition 1") && why.contains(word), "{why}");
                }
            }
            let e = parts.bind_thread(2).unwrap_err().to_string();
            assert!(e.contains("there are 2 partitions"), "{e}");
            let mut q = parts.queue_on(16, None).unwrap();
            for k in 0..16u64 {
                q.read(&f, k * 4096, vec![0; 4096], k);
            }
            q.drain();
            let mut done = Vec::new();
            q.take_completions(&mut done);
            assert_eq!(done.len(), 16);
            for c in &done {
                c.result.as_ref().unwrap();
                assert!(c.buf.iter().all(|&b| b == 7), "request {}", c.tag);
            }
            drop(q);
            drop(parts);
            drop((f, cs));
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A cached store over a fresh directory holding file `f` (1 MiB), its
    /// cache of 4 MiB divided in two.
    fn two_partitions(tag: &str) -> (std::path::PathBuf, CachedStore) {
        let dir = std::env::temp_dir().join(format!("setcache-part-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let store = Store::open(&[&dir], StoreOptions::default()).unwrap();
        store.create("f", 1 << 20, LayoutKind::Stripe).unwrap();
        let opts = CacheOptions {
            size: 4 << 20,
            partitions: 2,
            ..CacheOptions::default()
        };
        (dir, CachedStore::new(store, opts).unwrap())
    }

    /// A worker that stops on a panic after it answered every request it
    /// held: its replies are answers, and the queue's look at its workers
    /// takes them instead of reporting the requests lost.
    #[test]
    fn replies_a_worker_sent_before_it_stopped_are_taken() {
        let (dir, cs) = two_partitions("late");
        let f = cs.open_file("f").unwrap();
        let parts = Partitions::new(&cs, PartitionOptions::default()).unwrap();
        parts.parts[1].fail_after_replies.store(true, SeqCst);
        let mut q = parts.queue_on(64, None).unwrap();
        for k in 0..64u64 {
            q.read(&f, k * 4096, vec![1; 4096], k);
        }
        let to_one = q.bundles[1].reqs.len();
        assert!(to_one > 0, "no page of 64 in partition 1");
        q.send(1);
        let t0 = std::time::Instant::now();
        while !parts.parts[1].dead.load(SeqCst) {
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "the worker never stopped"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        // The look every wait and send makes, before any reap of this queue.
        q.check_workers();
        assert_eq!(q.sent[1], 0, "partition 1's replies left in its ring");
        // Partition 0's requests go and come back as usual.
        q.drain();
        let mut done = Vec::new();
        q.take_completions(&mut done);
        assert_eq!(done.len(), 64);
        for c in &done {
            c.result.as_ref().expect("a read");
            assert!(
                c.buf.iter().all(|&b| b == 0),
                "request {} read wrong bytes",
                c.tag
            );
        }
        drop(q);
        drop(parts);
        drop((f, cs));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A caller that only polls, after a worker holding its requests stopped
    /// on a panic, learns of it (the poll panics, as a wait does) instead
    /// of polling for ever.
    #[test]
    fn a_poll_facing_a_stopped_worker_panics() {
        let (dir, cs) = two_partitions("stop-poll");
        let f = cs.open_file("f").unwrap();
        let parts = Partitions::new(&cs, PartitionOptions::default()).unwrap();
        parts.parts[1].fail_next.store(true, SeqCst);
        let mut q = parts.queue_on(16, None).unwrap();
        for k in 0..16u64 {
            q.read(&f, k * 4096, vec![0; 4096], k);
        }
        let t0 = std::time::Instant::now();
        let polled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            while q.outstanding() > 0 {
                q.poll();
                assert!(
                    t0.elapsed() < Duration::from_secs(20),
                    "polled for 20 s facing a stopped worker"
                );
            }
        }));
        let msg = match polled {
            Err(p) => p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default(),
            Ok(()) => panic!("every request was answered by a stopped worker"),
        };
        assert!(msg.contains("stopped on a panic"), "{msg}");
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(q)));
        drop(parts);
        drop((f, cs));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A queue dropped while a worker that stopped on a panic holds some of
    /// its requests panics, as its waits do, but closes its links first: the
    /// partitions then drop, joining every worker, instead of waiting for
    /// ever for the queue's link to close (a worker serves an open link).
    #[test]
    fn a_queue_dropped_facing_a_stopped_worker_lets_the_partitions_close() {
        let (dir, cs) = two_partitions("stop");
        let f = cs.open_file("f").unwrap();
        let parts = Partitions::new(&cs, PartitionOptions::default()).unwrap();
        // Partition 1's worker stops; partition 0's serves on.
        parts.parts[1].fail_next.store(true, SeqCst);
        let mut q = parts.queue_on(16, None).unwrap();
        for k in 0..16u64 {
            q.read(&f, k * 4096, vec![0; 4096], k);
        }
        let dropped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(q)));
        assert!(
            dropped.is_err(),
            "the queue's drop did not see the stopped worker"
        );
        // The partitions' drop, watched: it joins the workers.
        let done = Arc::new(AtomicBool::new(false));
        let seen = done.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs(30));
            if !seen.load(SeqCst) {
                eprintln!("the partitions' drop waited 30 s for a worker");
                std::process::exit(3);
            }
        });
        drop(parts);
        done.store(true, SeqCst);
        drop((f, cs));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
