//! Asynchronous batches with callbacks.
//!
//! A [`Queue`] belongs to one thread. Requests own their buffers while in flight and
//! get them back in their [`Completion`]. Callbacks run on the queue's own thread,
//! inside [`Queue::submit`], [`Queue::wait`] or [`Queue::poll`], never on an I/O
//! thread: a slow callback cannot stall a device, and callbacks need not be `Send`.
//! At most `depth` requests are in flight; `submit` runs callbacks of finished
//! requests to make room before it sends more.

use crate::util::origin::Origin;
use std::marker::PhantomData;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::storage::buf::AlignedBuf;
use crate::storage::file::{File, Mem, OpKind};
use crate::storage::io::fixed::FixedChunks;
use crate::storage::io::{DevOp, Joiner, QueueRings, QueueShared, Sink, ThreadRing};
use crate::util::fds::Fd;
use crate::util::panics;

/// How long [`Queue::wait`] polls its own rings before it sleeps in the kernel:
/// zero. On the development machine polling bought nothing at depth 32 (the
/// sleeping wait already matches fio) and costs a core while I/O is in flight.
pub const DEFAULT_POLL: Duration = Duration::ZERO;

/// The longest [`Queue::set_poll`] keeps: one second (the command line's
/// bound too), after which a wait sleeps in the kernel.
pub const MAX_POLL: Duration = Duration::from_secs(1);

/// The most requests a queue keeps in flight: a larger depth is taken as this
/// (each slot is allocated when the queue is made), as 0 is taken as 1.
pub const MAX_QUEUE_DEPTH: usize = 1 << 16;

/// A device this queue drives through a ring of its own (or failed to).
struct OwnRing {
    /// Identity of the device's engine.
    engine: usize,
    /// `None` when the ring could not be built: use the I/O thread.
    ring: Option<ThreadRing>,
}

/// The outcome of a request, with its buffer.
#[derive(Debug)]
pub struct Completion {
    /// What the request did.
    pub kind: OpKind,
    /// The file offset of the request.
    pub offset: u64,
    /// The request's buffer (for a read, filled on success).
    pub buf: AlignedBuf,
    /// `Ok` or the error, naming file, offset and device.
    pub result: Result<()>,
}

type Callback = Box<dyn FnOnce(Completion)>;

/// One read or write of a whole buffer at a file offset, with its callback.
pub struct Request {
    kind: OpKind,
    file: File,
    offset: u64,
    buf: AlignedBuf,
    callback: Callback,
}

impl Request {
    /// Read `buf.len()` bytes at `offset` into `buf`.
    pub fn read(
        file: &File,
        offset: u64,
        buf: AlignedBuf,
        callback: impl FnOnce(Completion) + 'static,
    ) -> Request {
        Request {
            kind: OpKind::Read,
            file: file.clone(),
            offset,
            buf,
            callback: Box::new(callback),
        }
    }

    /// Write all of `buf` at `offset`.
    pub fn write(
        file: &File,
        offset: u64,
        buf: AlignedBuf,
        callback: impl FnOnce(Completion) + 'static,
    ) -> Request {
        Request {
            kind: OpKind::Write,
            file: file.clone(),
            offset,
            buf,
            callback: Box::new(callback),
        }
    }
}

/// Who hears of a finished request.
enum Done {
    /// A [`Request`]: its buffer goes back with the completion.
    User { buf: AlignedBuf, callback: Callback },
    /// A crate-internal request into memory the caller owns (cache frames):
    /// its tag and result go to the queue's tagged list (no allocation).
    Tag(usize),
}

struct Pending {
    kind: OpKind,
    offset: u64,
    done: Done,
    /// Keeps the file (and its backing descriptors) alive while in flight.
    _file: File,
}

/// A doorbell other threads ring to cut a queue owner's [`Queue::wait`] short
/// (a worker serving requests that arrive from other threads): an eventfd
/// that the owner's rings keep a read posted on while they sleep, and a flag.
/// Ringing an already rung bell costs one atomic operation.
pub(crate) struct Bell {
    fd: Fd,
    rang: AtomicBool,
    /// The thread that waits (unparked too, for queues waiting on I/O
    /// threads rather than in a ring).
    owner: OnceLock<std::thread::Thread>,
}

impl Bell {
    pub(crate) fn new() -> Result<Bell> {
        // SAFETY: eventfd has no memory-safety preconditions.
        let fd = Fd::make(&mut || unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) })
            .map_err(|e| Error::Engine(format!("eventfd for a queue's doorbell: {e}")))?;
        Ok(Bell {
            fd,
            rang: AtomicBool::new(false),
            owner: OnceLock::new(),
        })
    }

    /// Name the calling thread as the one that waits.
    pub(crate) fn set_owner(&self) {
        let _ = self.owner.set(std::thread::current());
    }

    /// Wake the owner if the bell was not already rung since it last looked.
    pub(crate) fn ring(&self) {
        if self.rang.swap(true, Ordering::AcqRel) {
            return;
        }
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to an eventfd we own.
        let _ = unsafe { libc::write(self.fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
        if let Some(t) = self.owner.get() {
            t.unpark();
        }
    }

    /// Whether the bell rang since the last `take`.
    pub(crate) fn rang(&self) -> bool {
        self.rang.load(Ordering::Acquire)
    }

    /// Whether the bell rang, and silence it.
    pub(crate) fn take(&self) -> bool {
        self.rang.swap(false, Ordering::AcqRel)
    }

    pub(crate) fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// A per-thread asynchronous request queue with a bound on requests in flight.
///
/// A batch of requests is sent to the devices at once; each request's
/// callback gets its buffer back with the result, on this thread, from
/// [`Queue::poll`], [`Queue::wait`] or [`Queue::drain`].
///
/// ```
/// use std::cell::Cell;
/// use std::rc::Rc;
/// use setcache::{AlignedBuf, LayoutKind, Queue, Request, Store, StoreOptions};
///
/// let dir = std::env::temp_dir().join(format!("setcache-doc-queue-{}", std::process::id()));
/// std::fs::create_dir_all(&dir)?;
/// let store = Store::open(&[&dir], StoreOptions::default())?;
/// let file = store.create("blocks", 1 << 20, LayoutKind::Stripe)?;
/// let mut q = Queue::new(32); // up to 32 requests in flight
/// let writes: Vec<Request> = (0..16u8)
///     .map(|i| {
///         let mut buf = AlignedBuf::new(4096);
///         buf.fill(i);
///         Request::write(&file, i as u64 * 4096, buf, |c| c.result.expect("write failed"))
///     })
///     .collect();
/// q.submit(writes);
/// q.drain(); // every callback has run
/// let first = Rc::new(Cell::new(0));
/// let seen = first.clone();
/// q.submit(vec![Request::read(&file, 5 * 4096, AlignedBuf::new(4096), move |c| {
///     c.result.expect("read failed");
///     seen.set(c.buf[0]);
/// })]);
/// q.drain();
/// assert_eq!(first.get(), 5);
/// drop((q, file, store));
/// std::fs::remove_dir_all(&dir)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Queue {
    depth: usize,
    slots: Vec<Option<Pending>>,
    /// Each slot's joiner, kept for its next request, with the serial and
    /// rename count of the file whose name it holds: a request whose joiner
    /// nothing else holds any more allocates none and, on the same file,
    /// takes no lock on its name and no reference to it.
    joiners: Vec<Option<(Arc<Joiner>, u64, u64)>>,
    free: Vec<u32>,
    shared: Arc<QueueShared>,
    in_flight: usize,
    ready: Vec<(u32, Option<Error>)>,
    /// Per-device batches being assembled.
    batches: Vec<Vec<DevOp>>,
    /// Rings of this queue, one per device it drives itself.
    rings: Vec<OwnRing>,
    /// Some request in flight went through a device's I/O thread.
    via_threads: bool,
    /// How long `wait` polls before it blocks.
    poll: Duration,
    /// Memory the queue's own rings register as fixed buffers, chunk by chunk.
    frames: Option<Arc<FixedChunks>>,
    /// Enter the kernel once per flush rather than once per operation.
    batched: bool,
    /// Finished tagged requests: (tag, result), taken by `take_tagged`.
    tagged: Vec<(usize, Result<()>)>,
    /// A doorbell that ends `wait` early when rung.
    bell: Option<Arc<Bell>>,
    /// A flush of one operation with nothing else in flight performs it on
    /// the calling thread (see [`Queue::set_lone_in_caller`]).
    lone_in_caller: bool,
    /// The process that made it: a child made by `fork` that drops its copy
    /// neither waits for the parent's requests nor enters the parent's rings
    /// (whose completion queues the two processes share).
    origin: Origin,
    /// The queue belongs to the thread that made it (callbacks are not `Send`).
    _not_send: PhantomData<*const ()>,
}

impl Queue {
    /// Whether this process made the queue (not a copy a child made by
    /// `fork` inherited, whose rings are the parent's).
    pub(crate) fn made_here(&self) -> bool {
        self.origin.is_here()
    }

    /// A queue allowing `depth` requests in flight (taken into
    /// `1..=`[`MAX_QUEUE_DEPTH`]).
    pub fn new(depth: usize) -> Queue {
        let depth = depth.clamp(1, MAX_QUEUE_DEPTH);
        Queue {
            depth,
            slots: (0..depth).map(|_| None).collect(),
            joiners: (0..depth).map(|_| None).collect(),
            free: (0..depth as u32).rev().collect(),
            shared: Arc::new(QueueShared {
                done: Mutex::new(Vec::with_capacity(depth)),
                owner: std::thread::current(),
                waiting: AtomicBool::new(false),
            }),
            in_flight: 0,
            ready: Vec::with_capacity(depth),
            batches: Vec::new(),
            rings: Vec::new(),
            via_threads: false,
            poll: DEFAULT_POLL,
            frames: None,
            batched: false,
            tagged: Vec::new(),
            bell: None,
            lone_in_caller: false,
            origin: Origin::here(),
            _not_send: PhantomData,
        }
    }

    /// The most requests this queue keeps in flight.
    pub fn depth(&self) -> usize {
        self.depth
    }

    /// How long [`Queue::wait`] polls the queue's own rings for completions before
    /// it sleeps (default [`DEFAULT_POLL`]; zero sleeps at once; at most
    /// [`MAX_POLL`], a longer time is cut to it). Polling only happens while
    /// requests are in flight, never when idle.
    pub fn set_poll(&mut self, poll: Duration) {
        self.poll = poll.min(MAX_POLL);
    }

    /// Requests sent and not yet completed.
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// Send a batch. Requests for one device travel in one message per device. Blocks,
    /// running callbacks, while `depth` requests are in flight. A request that is
    /// invalid (misaligned, past the end, on a failed device, a write of a file open
    /// through a [`crate::CachedStore`]) completes at once with its error through its
    /// callback. A callback that panics while `submit` waits
    /// for room does not stop the batch: the rest is sent, then the panic goes on.
    pub fn submit(&mut self, reqs: Vec<Request>) {
        // A callback run to make room may panic: the requests not yet sent
        // go out all the same (dropped with the unwind, they would never
        // complete), and the first panic goes on after them.
        let mut first = None;
        for r in reqs {
            if self.free.is_empty() {
                self.flush();
                let waited = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    self.wait(1);
                }));
                if let Err(p) = waited {
                    panics::keep_first(&mut first, p);
                }
            }
            // A callback's panic freed its slot before it ran; a panic that
            // freed none (an internal fault) goes on as it is.
            let Some(token) = self.free.pop() else {
                panics::resume_first(first);
                panic!("no slot is free after waiting");
            };
            let Request {
                kind,
                file,
                offset,
                mut buf,
                callback,
            } = r;
            let joiner = self.joiner_for(token, &file, offset);
            let ptr = buf.as_mut_ptr();
            let len = buf.len();
            let fixed = &buf;
            let sent = if kind == OpKind::Write && file.inner.cached.load(Ordering::Acquire) > 0 {
                // As `File::write_at`: a write around the cache would leave
                // its pages stale, and its fsyncs would not answer for it.
                Err(Error::InvalidArgument(format!(
                    "file {:?} is open through a page cache: write it through a CachedQueue",
                    file.name()
                )))
            } else {
                file.prepare(
                    kind,
                    offset,
                    ptr,
                    len,
                    Some(fixed),
                    &joiner,
                    &mut self.batches,
                )
            };
            self.slots[token as usize] = Some(Pending {
                kind,
                offset,
                done: Done::User { buf, callback },
                _file: file,
            });
            self.in_flight += 1;
            match sent {
                Ok(0) => joiner.deliver_now(None),
                Ok(_) => {}
                Err(e) => joiner.deliver_now(Some(e)),
            }
        }
        self.flush();
        panics::resume_first(first);
    }

    /// Queue one read or write of `len` bytes at `offset` of `file` from or into
    /// `mem`, memory the caller owns (one buffer, or equal pieces such as cache
    /// frames, read or written with vectored I/O); when it finishes, `(tag,
    /// result)` joins the list [`Queue::take_tagged`] hands out. Like
    /// [`Queue::submit`] it may run other callbacks first to make room, and the
    /// request travels with the next flush (`flush_now`, `wait`, `submit`).
    ///
    /// # Safety
    /// The `len` bytes of `mem` stay valid, and are not otherwise accessed (for
    /// a read) or not written (for a write), until its tag is handed out.
    pub(crate) unsafe fn submit_raw(
        &mut self,
        kind: OpKind,
        file: &File,
        offset: u64,
        mem: Mem<'_>,
        len: usize,
        tag: usize,
    ) {
        if self.free.is_empty() {
            self.flush();
            self.wait(1);
        }
        let token = self.free.pop().expect("a slot is free after waiting");
        let joiner = self.joiner_for(token, file, offset);
        let sent = file.prepare_mem(kind, offset, mem, len, None, &joiner, &mut self.batches);
        self.slots[token as usize] = Some(Pending {
            kind,
            offset,
            done: Done::Tag(tag),
            _file: file.clone(),
        });
        self.in_flight += 1;
        match sent {
            Ok(0) => joiner.deliver_now(None),
            Ok(_) => {}
            Err(e) => joiner.deliver_now(Some(e)),
        }
    }

    /// A joiner for a request of slot `token` on `file` at `offset`: the
    /// slot's last one if nothing else holds it any more, else a new one.
    fn joiner_for(&mut self, token: u32, file: &File, offset: u64) -> Arc<Joiner> {
        let inner = &*file.inner;
        let renames = inner.renames.load(Ordering::Acquire);
        let kept = &mut self.joiners[token as usize];
        if let Some((j, serial, seen)) = kept
            && let Some(m) = Arc::get_mut(j)
        {
            let same = *serial == inner.serial && *seen == renames;
            m.reuse((!same).then(|| file.name_arc()), offset);
            (*serial, *seen) = (inner.serial, renames);
            return j.clone();
        }
        let j = Joiner::new(
            file.name_arc(),
            offset,
            Sink::Queue(self.shared.clone(), token),
        );
        *kept = Some((j.clone(), inner.serial, renames));
        j
    }

    /// Move the finished tagged requests (see [`Queue::submit_raw`]) to `out`.
    pub(crate) fn take_tagged(&mut self, out: &mut Vec<(usize, Result<()>)>) {
        out.append(&mut self.tagged);
    }

    /// Let the rings this queue creates from now on register the memory of
    /// `frames` as fixed buffers, each chunk when an operation first touches it,
    /// so that I/O into that memory skips the kernel's page pinning.
    ///
    /// # Safety
    /// The memory stays mapped for the queue's life, and its pages are given
    /// back to the kernel (`madvise(DONTNEED)`) only through
    /// [`FixedChunks::release`].
    pub(crate) unsafe fn register_frames(&mut self, frames: Arc<FixedChunks>) {
        self.frames = Some(frames);
    }

    /// Enter the kernel once per flush (per `submit`, `flush_now` or `wait`)
    /// rather than once per operation, on the rings this queue creates from
    /// now on: fewer system calls and device notifications for
    /// throughput-bound work such as write-back.
    pub(crate) fn set_batched(&mut self) {
        self.batched = true;
    }

    /// Perform a flush's only operation on the calling thread, as a system
    /// call, when nothing else is in flight and the device's engine allows
    /// it: a latency-bound caller that waits for it anyway (a `sync` writing
    /// one run) then makes one system call and no hand-off to the kernel's
    /// workers and back. More operations still go together through the ring.
    pub(crate) fn set_lone_in_caller(&mut self) {
        self.lone_in_caller = true;
    }

    /// Let `bell` end [`Queue::wait_as`] early: its rings (those made from
    /// now on) wake when it rings, and such a wait returns once it has.
    pub(crate) fn set_bell(&mut self, bell: Arc<Bell>) {
        self.bell = Some(bell);
    }

    /// Whether this queue's doorbell rang (and was not yet taken).
    pub(crate) fn bell_rang(&self) -> bool {
        self.bell.as_ref().is_some_and(|b| b.rang())
    }

    /// Send what `submit_raw` queued.
    pub(crate) fn flush_now(&mut self) {
        self.flush();
    }

    /// Send what `submit_raw` queued now if each operation would enter the
    /// kernel on its own anyway (the queue's rings are eager, the store's
    /// default), so that a caller preparing a batch request by request has the
    /// device start on the first while it prepares the next. Batched rings,
    /// device threads and a lone operation run in the caller wait for the
    /// flush.
    pub(crate) fn send_eager(&mut self) {
        if self.batched || self.lone_in_caller {
            return;
        }
        let mut any = false;
        for b in &self.batches {
            let Some(op) = b.first() else {
                continue;
            };
            if !op.backing.engine.queue_rings().is_some_and(|c| c.eager) {
                return;
            }
            any = true;
        }
        if any {
            self.flush();
        }
    }

    /// Operations queued by `submit_raw` and not yet passed on.
    #[cfg(test)]
    pub(crate) fn unsent(&self) -> usize {
        self.batches.iter().map(Vec::len).sum()
    }

    /// Send the assembled per-device batches: to the queue's own ring of the
    /// device where it drives the device itself, else to the device's engine.
    fn flush(&mut self) {
        if self.lone_in_caller && self.in_flight == 1 {
            let mut ops = self.batches.iter().filter(|b| !b.is_empty());
            if let (Some(b), None) = (ops.next(), ops.next())
                && b.len() == 1
                && b[0].backing.engine.blocking_in_caller()
            {
                let i = self
                    .batches
                    .iter()
                    .position(|b| !b.is_empty())
                    .expect("a batch");
                let op = self.batches[i].pop().expect("one operation");
                let res = crate::storage::io::psync::execute(&op);
                // Delivered to this queue's list, as from a device thread.
                op.finish(res);
                return;
            }
        }
        let mut pushed = false;
        for i in 0..self.batches.len() {
            let Some(first) = self.batches[i].first() else {
                continue;
            };
            let engine = &first.backing.engine;
            let key = Arc::as_ptr(engine) as *const () as usize;
            if let Some(mut cfg) = engine.queue_rings() {
                if self.batched {
                    cfg.eager = false;
                }
                // The batch is emptied into the ring and keeps its capacity
                // for the next one (no allocation a flush).
                let mut ops = std::mem::take(&mut self.batches[i]);
                if let Some(ring) = self.ring_for(key, ops.len(), cfg) {
                    ring.push_from(&mut ops);
                    self.batches[i] = ops;
                    pushed = true;
                    continue;
                }
                self.batches[i] = ops;
            }
            let ops = std::mem::take(&mut self.batches[i]);
            let engine = ops[0].backing.engine.clone();
            self.via_threads = true;
            engine.submit(ops);
        }
        if pushed {
            for r in self.rings.iter_mut().filter_map(|r| r.ring.as_mut()) {
                r.submit_now();
            }
        }
    }

    fn ring_for(&mut self, engine: usize, hint: usize, cfg: QueueRings) -> Option<&mut ThreadRing> {
        let pos = match self.rings.iter().position(|r| r.engine == engine) {
            Some(p) => p,
            None => {
                let ring = ThreadRing::new(self.depth.max(hint), cfg, self.frames.as_ref())
                    .ok()
                    .map(|r| match &self.bell {
                        Some(b) => r.with_bell(b.raw_fd()),
                        None => r,
                    });
                self.rings.push(OwnRing { engine, ring });
                self.rings.len() - 1
            }
        };
        self.rings[pos].ring.as_mut()
    }

    /// Operations in flight on this queue's own rings.
    fn ring_ops(&self) -> usize {
        self.rings
            .iter()
            .filter_map(|r| r.ring.as_ref())
            .map(ThreadRing::in_flight)
            .sum()
    }

    /// One pass over the queue's own rings: submit, post and reap completions.
    /// With `block`, sleep in the kernel until one completes (or a short timeout
    /// when other completions may arrive from elsewhere).
    fn drive(&mut self, block: bool) -> usize {
        let busy = self
            .rings
            .iter()
            .filter(|r| r.ring.as_ref().is_some_and(|r| r.in_flight() > 0))
            .count();
        // An idle ring with the doorbell's read posted may take a ring of the
        // bell that the ring asleep below then never hears (this queue
        // reaps only rings with I/O): sleep in short spells then, too.
        // Looked at only where the sleep would have no deadline.
        let stray_bell = block
            && busy == 1
            && !self.via_threads
            && self.rings.iter().any(|r| {
                r.ring
                    .as_ref()
                    .is_some_and(|r| r.in_flight() == 0 && r.bell_armed())
            });
        let mut got = 0;
        for r in self.rings.iter_mut().filter_map(|r| r.ring.as_mut()) {
            if r.in_flight() == 0 {
                continue;
            }
            got += if block && got == 0 {
                // Sleep without a deadline only where every completion this queue
                // waits for comes from this one ring.
                let timeout = (busy > 1 || self.via_threads || stray_bell)
                    .then(|| Duration::from_micros(200));
                r.enter(true, timeout)
            } else {
                r.enter(false, None)
            };
        }
        got
    }

    /// Run callbacks of finished requests without blocking; returns how many ran.
    pub fn poll(&mut self) -> usize {
        if self.ring_ops() > 0 {
            self.drive(false);
        }
        self.run_ready()
    }

    /// Block until `n` callbacks have run (or nothing is left in flight); returns how
    /// many ran, which may exceed `n` when more were ready.
    pub fn wait(&mut self, n: usize) -> usize {
        self.wait_as(n, false)
    }

    /// [`Queue::wait`], or with `bell`, returning early once the queue's
    /// doorbell rang (after reaping what had completed, without sleeping).
    /// Waits that must free a slot or drain ignore the bell.
    pub(crate) fn wait_as(&mut self, n: usize, bell: bool) -> usize {
        self.flush();
        if bell && self.ring_ops() > 0 {
            self.drive(false);
        }
        let mut ran = self.run_ready();
        let mut poll_until: Option<Instant> = None;
        while ran < n && self.in_flight > 0 && !(bell && self.bell_rang()) {
            if self.ring_ops() > 0 {
                // Poll the own rings for a short while (completions of a busy device
                // arrive every few microseconds), then sleep in the kernel.
                let deadline = *poll_until.get_or_insert_with(|| Instant::now() + self.poll);
                let block = Instant::now() >= deadline;
                if self.drive(block) > 0 {
                    poll_until = None;
                }
            } else {
                self.park();
            }
            ran += self.run_ready();
        }
        if self.in_flight == 0 {
            self.via_threads = false;
        }
        ran
    }

    /// Sleep until an I/O thread reports a completion.
    fn park(&self) {
        self.shared.waiting.store(true, Ordering::SeqCst);
        let empty = self
            .shared
            .done
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_empty();
        if empty {
            std::thread::park();
        }
        self.shared.waiting.store(false, Ordering::SeqCst);
    }

    /// Wait for every request in flight.
    pub fn drain(&mut self) {
        while self.in_flight > 0 {
            self.wait(self.in_flight);
        }
    }

    fn run_ready(&mut self) -> usize {
        {
            let mut g = self.shared.done.lock().unwrap_or_else(|p| p.into_inner());
            if g.is_empty() {
                return 0;
            }
            std::mem::swap(&mut *g, &mut self.ready);
        }
        let mut ran = 0;
        let mut ready = std::mem::take(&mut self.ready);
        let mut left = ready.drain(..);
        while let Some((token, err)) = left.next() {
            let p = self.slots[token as usize]
                .take()
                .expect("completion of a live request");
            self.free.push(token);
            self.in_flight -= 1;
            let result = match err {
                None => Ok(()),
                Some(e) => Err(e),
            };
            match p.done {
                Done::User { buf, callback } => {
                    let c = Completion {
                        kind: p.kind,
                        offset: p.offset,
                        buf,
                        result,
                    };
                    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| callback(c)));
                    if let Err(e) = r {
                        // The completions taken with this one go back to the
                        // shared list: dropped with the unwind, their requests
                        // would stay in flight for ever, and this queue's
                        // drain (its drop's) would wait for them for ever.
                        let rest: Vec<_> = left.collect();
                        self.shared
                            .done
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .extend(rest);
                        std::panic::resume_unwind(e);
                    }
                }
                Done::Tag(tag) => self.tagged.push((tag, result)),
            }
            ran += 1;
        }
        drop(left);
        self.ready = ready;
        ran
    }
}

impl Drop for Queue {
    fn drop(&mut self) {
        if !self.origin.is_here() {
            // A child made by `fork`: the requests in flight are the
            // parent's, whose completions the child must not take from the
            // rings they share. Their buffers, callbacks and the rings are
            // left as they are (no callback runs, nothing is waited for).
            std::mem::forget(std::mem::take(&mut self.rings));
            std::mem::forget(std::mem::take(&mut self.slots));
            std::mem::forget(std::mem::take(&mut self.batches));
            return;
        }
        // Buffers of requests in flight are owned here: they must outlive the
        // I/O, even when a callback this drain runs panics (unwinding out of
        // here at the first one would free the buffers, with the fields, under
        // the reads still in flight). Each panic consumed a request, so the
        // drain goes on after it; the first panic is passed on once every
        // request has finished.
        let mut first = None;
        loop {
            let before = self.in_flight;
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                self.flush();
                self.drain();
            }));
            match r {
                Ok(()) => break,
                Err(e) => {
                    panics::keep_first(&mut first, e);
                    if self.in_flight >= before {
                        // A panic that finished nothing (not a callback's):
                        // another round would end the same way.
                        break;
                    }
                }
            }
        }
        if self.in_flight > 0 {
            // Requests the drain could not see finish: their buffers are
            // leaked rather than freed under I/O that may still write them.
            for p in self.slots.iter_mut().filter_map(Option::take) {
                std::mem::forget(p);
            }
        }
        // Unwinding out of a drop that runs during another panic's unwinding
        // would abort the process: the queue's own panic is then dropped.
        panics::resume_first(first);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{EngineKind, LayoutKind, Store, StoreOptions};

    /// A callback that panics takes nothing with it: the completions that
    /// came back with its own are run by the next wait, and the queue
    /// drains (before, they were dropped with the unwind, their requests
    /// stayed in flight, and the drain of the queue's drop waited for ever).
    #[test]
    fn a_panicking_callback_leaves_the_other_completions_to_run() {
        let dir = std::env::temp_dir().join(format!("setcache-cb-panic-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let store = Store::open(&[&dir], StoreOptions::default()).unwrap();
        let file = store.create("f", 1 << 16, LayoutKind::Stripe).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let f = file.clone();
        std::thread::spawn(move || {
            let ran = std::rc::Rc::new(std::cell::Cell::new(0));
            let mut q = Queue::new(8);
            let reqs = (0..8u64)
                .map(|k| {
                    let ran = ran.clone();
                    Request::read(&f, k * 4096, AlignedBuf::new(4096), move |c| {
                        c.result.unwrap();
                        ran.set(ran.get() + 1);
                        panic!("callback {k}");
                    })
                })
                .collect();
            q.submit(reqs);
            // Every read back before the first wait takes them all at once.
            std::thread::sleep(std::time::Duration::from_millis(100));
            let mut panics = 0;
            while q.in_flight > 0 {
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| q.wait(1)));
                panics += usize::from(r.is_err());
            }
            q.drain();
            drop(q);
            tx.send((ran.get(), panics)).unwrap();
        });
        let (ran, panics) = rx
            .recv_timeout(std::time::Duration::from_secs(30))
            .expect("the queue waited for ever for completions a panic took");
        assert_eq!((ran, panics), (8, 8));
        drop((file, store));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A callback run to make room in `submit` may panic: the requests after
    /// it are sent all the same and the panic comes out of `submit` after
    /// them (they used to be dropped with the unwind, never completing).
    #[test]
    fn a_callback_panicking_while_submit_makes_room_leaves_the_rest_to_go() {
        let dir =
            std::env::temp_dir().join(format!("setcache-submit-panic-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let store = Store::open(&[&dir], StoreOptions::default()).unwrap();
        let file = store.create("f", 1 << 16, LayoutKind::Stripe).unwrap();
        let ran = std::rc::Rc::new(std::cell::Cell::new(0));
        // One slot: each request after the first waits for the one before.
        let mut q = Queue::new(1);
        let reqs = (0..3u64)
            .map(|k| {
                let ran = ran.clone();
                let mut buf = AlignedBuf::new(4096);
                buf.fill(k as u8 + 1);
                Request::write(&file, k * 4096, buf, move |c| {
                    c.result.unwrap();
                    ran.set(ran.get() + 1);
                    if k == 0 {
                        panic!("callback {k}");
                    }
                })
            })
            .collect();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| q.submit(reqs)));
        assert!(r.is_err(), "the callback's panic comes out of submit");
        q.drain();
        assert_eq!(ran.get(), 3, "every write completed");
        let mut b = AlignedBuf::new(3 * 4096);
        file.read_at(0, &mut b).unwrap();
        for k in 0..3 {
            assert_eq!(b[k * 4096], k as u8 + 1, "block {k}");
        }
        drop((q, file, store));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A queue dropped with reads in flight whose callbacks panic waits for
    /// every read and runs every callback before it passes the first panic on
    /// (it used to unwind at the first, freeing the other reads' buffers while
    /// the devices still had them); dropped while its thread already unwinds,
    /// it drains the same way and lets the thread's own panic go on.
    #[test]
    fn a_queue_dropped_with_panicking_callbacks_waits_for_every_read() {
        use crate::storage::io::SimConfig;
        let dir = std::env::temp_dir().join(format!("setcache-drop-panic-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let opts = StoreOptions {
            // Reads of 5 to 150 ms: the first callback runs while the
            // others are still with the devices.
            engine: EngineKind::Sim(SimConfig {
                latency_us: (5_000, 150_000),
                ..SimConfig::default()
            }),
            ..StoreOptions::default()
        };
        let store = Store::open(&[&dir], opts).unwrap();
        let file = store.create("f", 1 << 16, LayoutKind::Stripe).unwrap();
        for outer in [false, true] {
            let ran = std::rc::Rc::new(std::cell::Cell::new(0));
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let mut q = Queue::new(8);
                let reqs = (0..8u64)
                    .map(|k| {
                        let ran = ran.clone();
                        Request::read(&file, k * 4096, AlignedBuf::new(4096), move |c| {
                            c.result.unwrap();
                            ran.set(ran.get() + 1);
                            panic!("callback {k}");
                        })
                    })
                    .collect();
                q.submit(reqs);
                if outer {
                    panic!("the thread's own panic");
                }
                drop(q);
            }));
            let e = r.expect_err("a panic comes out");
            let msg = e
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            assert_eq!(ran.get(), 8, "callbacks run before the drop returned");
            if outer {
                assert_eq!(msg, "the thread's own panic");
            } else {
                assert!(msg.starts_with("callback "), "{msg}");
            }
        }
        drop((file, store));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// With `set_lone_in_caller`, a flush of one write with nothing else in
    /// flight performs it there and then (its tag is ready without a wait,
    /// and the queue made no ring); two writes still go through the ring.
    #[test]
    fn a_lone_operation_runs_in_the_caller_and_more_go_through_the_ring() {
        let dir = std::env::temp_dir().join(format!("setcache-lone-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let opts = StoreOptions {
            engine: EngineKind::Uring,
            queue_rings: true,
            direct_io: false,
            ..StoreOptions::default()
        };
        let store = Store::open(&[&dir], opts).unwrap();
        let file = store.create("f", 1 << 16, LayoutKind::Stripe).unwrap();
        let mut buf = AlignedBuf::new(3 * 4096);
        buf.fill(9);
        let mut q = Queue::new(8);
        q.set_lone_in_caller();
        let mut got = Vec::new();
        // SAFETY: `buf` outlives the writes (drained below), unwritten meanwhile.
        unsafe { q.submit_raw(OpKind::Write, &file, 0, Mem::One(buf.as_mut_ptr()), 4096, 7) };
        q.flush_now();
        q.run_ready();
        q.take_tagged(&mut got);
        assert_eq!(got.len(), 1, "done in the flush, without a wait");
        assert!(got[0].0 == 7 && got[0].1.is_ok());
        assert!(q.rings.is_empty(), "no ring made for a lone write");
        got.clear();
        for (i, tag) in [(1u64, 8usize), (2, 9)] {
            // SAFETY: as above.
            unsafe {
                q.submit_raw(
                    OpKind::Write,
                    &file,
                    i * 4096,
                    Mem::One(buf.as_mut_ptr()),
                    4096,
                    tag,
                )
            };
        }
        q.drain();
        q.take_tagged(&mut got);
        got.sort_by_key(|g| g.0);
        assert_eq!(got.iter().map(|g| g.0).collect::<Vec<_>>(), [8, 9]);
        assert!(got.iter().all(|g| g.1.is_ok()));
        assert_eq!(q.rings.len(), 1, "two writes go through the queue's ring");
        drop((q, file, store));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A write request of a file open through a page cache completes at once
    /// with an error naming the cache (it would leave the cache's pages
    /// stale, and the cache's fsyncs would not answer for it); a read of it
    /// goes through, and once the cache lets go of the file a write does.
    #[test]
    fn a_queued_write_around_a_cache_is_refused() {
        let dir = crate::cached::scratch_dir("queue-around-cache");
        let store = Store::open(&[&dir], StoreOptions::default()).unwrap();
        drop(store.create("f", 1 << 16, LayoutKind::Stripe).unwrap());
        let cs = crate::CachedStore::new(store.clone(), crate::cached::small_cache(16)).unwrap();
        let cf = cs.open_file("f").unwrap();
        let file = cf.file().clone();
        let results = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
        let mut q = Queue::new(4);
        let mut buf = AlignedBuf::new(4096);
        buf.fill(0xEE);
        let (w, r) = (results.clone(), results.clone());
        q.submit(vec![
            Request::write(&file, 0, buf, move |c| w.borrow_mut().push(c.result)),
            Request::read(&file, 0, AlignedBuf::new(4096), move |c| {
                r.borrow_mut().push(c.result)
            }),
        ]);
        q.drain();
        let got = std::mem::take(&mut *results.borrow_mut());
        match &got[..] {
            [Err(Error::InvalidArgument(m)), Ok(())] if m.contains("page cache") => {}
            other => panic!("a write around the cache: {other:?}"),
        }
        let mut b = [0u8; 4096];
        cf.read_at(0, &mut b).unwrap();
        assert!(b.iter().all(|&x| x == 0), "the refused write landed");
        drop(cf);
        drop(cs);
        let w = results.clone();
        q.submit(vec![Request::write(
            &file,
            0,
            AlignedBuf::new(4096),
            move |c| w.borrow_mut().push(c.result),
        )]);
        q.drain();
        assert!(
            matches!(&results.borrow()[..], [Ok(())]),
            "{:?}",
            results.borrow()
        );
        drop(file);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
