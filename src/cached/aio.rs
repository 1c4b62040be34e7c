//! Futures on cached files: [`CachedFile::read_at_async`],
//! [`CachedFile::write_at_async`] and [`CachedFile::page_async`].
//!
//! A future's first poll tries the page in the cache on the polling thread,
//! without blocking: a hit completes there (an optimistic copy for a read of
//! one page, a pin for a page reference, the writer's hold for a write of one
//! page). Anything else goes to one of the store's I/O workers: threads, each
//! with a [`CachedQueue`] of its own, started on first use and stopped when
//! the [`CachedStore`](super::CachedStore) drops. A worker takes requests in
//! batches from its inbox, keeps them in flight on its queue, and on
//! completion hands the outcome to the future's slot and wakes its waker. So
//! the futures need no runtime of setcache's: any executor that polls them
//! when woken runs them (tokio, smol, or ten lines over `std::thread::park`).
//!
//! The worker owns everything the I/O uses: a future's buffer moves into its
//! request, and the frame a miss reads into is claimed by the worker's queue
//! until the read is back. Dropping a future only lets go of its slot; the
//! request finishes on the worker (a write is still made), its buffer is freed
//! then, and a page pin that nobody takes is released.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::thread::JoinHandle;

use crate::cache::{Got, RawPin};
use crate::cached::queue::{CachedQueue, CachedRequest};
use crate::cached::readahead;
use crate::cached::shared::{Entry, Shared, Workers};
use crate::cached::{CachedFile, CachedStore, FutureClaim, Guarded, Hold, PageGuard};
use crate::error::{Error, Result};
use crate::storage::file::OpKind;
use crate::storage::queue::Bell;
use crate::util::slab::Slab;

/// A worker's requests in flight by tag: where the outcome goes, what was
/// asked, and the file's entry (which counts the pins parked for futures).
type Slots = Slab<(Arc<Slot>, What, Arc<Entry>)>;

/// Device operations each worker keeps in flight at most.
const WORKER_DEPTH: usize = 256;

/// What a worker hands a future.
enum Outcome {
    Bytes(Result<()>, Vec<u8>),
    Pin(Result<OwnedPin>),
}

/// The cache a raw pin belongs to.
trait PinHome {
    /// Release `pin`.
    ///
    /// # Safety
    /// `pin` came from `into_raw` of a guard of this cache and is used once.
    unsafe fn release(&self, pin: RawPin);
}

impl PinHome for Arc<Shared> {
    unsafe fn release(&self, pin: RawPin) {
        // SAFETY: the caller's promise.
        drop(unsafe { self.cache.restore_pin(pin) });
    }
}

/// A page's pin on its way to a future; released if nobody takes it.
struct OwnedPin<H: PinHome = Arc<Shared>> {
    home: H,
    pin: Option<RawPin>,
    /// The file whose `parked_pins` counts this pin while it is owned here.
    parked: Option<Arc<Entry>>,
}

impl<H: PinHome> OwnedPin<H> {
    /// The pin, no longer counted as parked.
    fn take(&mut self) -> Option<RawPin> {
        let p = self.pin.take();
        if let Some(e) = self.parked.take() {
            e.parked_pins.fetch_sub(1, Ordering::AcqRel);
        }
        p
    }
}

impl<H: PinHome> Drop for OwnedPin<H> {
    fn drop(&mut self) {
        if let Some(p) = self.take() {
            // SAFETY: the pin came from `into_raw` of a guard of this cache (the worker's) and is used once, here.
            unsafe { self.home.release(p) };
        }
    }
}

enum State<O> {
    /// In flight; the waker of the task to wake.
    Waiting(Option<Waker>),
    Ready(O),
    Taken,
}

/// Where a worker leaves the outcome of one future's request.
struct Slot<O = Outcome> {
    st: Mutex<State<O>>,
}

impl<O> Slot<O> {
    fn new(w: &Waker) -> Arc<Slot<O>> {
        Arc::new(Slot {
            st: Mutex::new(State::Waiting(Some(w.clone()))),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State<O>> {
        self.st.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Leave the outcome and wake the task (outside the lock).
    fn complete(&self, o: O) {
        if let Some(w) = self.fill(o) {
            w.wake();
        }
    }

    /// Leave the outcome; the task's waker, for the caller to wake.
    fn fill(&self, o: O) -> Option<Waker> {
        match std::mem::replace(&mut *self.lock(), State::Ready(o)) {
            State::Waiting(w) => w,
            _ => None,
        }
    }

    /// The outcome, or `Pending` with the task's current waker kept.
    fn poll(&self, cx: &Context<'_>) -> Poll<O> {
        let mut g = self.lock();
        match std::mem::replace(&mut *g, State::Taken) {
            State::Ready(o) => Poll::Ready(o),
            State::Waiting(w) => {
                let w = match w {
                    Some(w) if w.will_wake(cx.waker()) => w,
                    _ => cx.waker().clone(),
                };
                *g = State::Waiting(Some(w));
                Poll::Pending
            }
            State::Taken => unreachable!("a future's outcome is taken once"),
        }
    }
}

#[derive(Clone, Copy)]
enum What {
    Read,
    Write,
    Pin,
}

/// One request for a worker.
struct Op {
    what: What,
    file: CachedFile,
    offset: u64,
    buf: Vec<u8>,
    /// Readahead saw the read already (as a stream's).
    stream: Option<bool>,
    slot: Arc<Slot>,
}

/// A worker's inbox: requests not yet taken, and whether the worker has
/// ended (after which requests are refused); and the wakers the worker left
/// for the tasks it wakes first to call (see [`deliver`]).
struct Inbox {
    ops: Mutex<(Vec<Op>, bool)>,
    closing: AtomicBool,
    bell: Arc<Bell>,
    /// The wakers left, and the message of the first of them that panicked
    /// on the thread that called it (the worker ends with it).
    left: Mutex<(Vec<Waker>, Option<String>)>,
    /// Whether `left` holds wakers (a hint: read without its lock).
    has_left: AtomicBool,
    /// The worker's thread id once it runs (0 before and after), and the
    /// CPUs it is to run on. Both change under this lock only, so a
    /// placement made while the worker starts is never lost.
    placed: Mutex<(libc::pid_t, Vec<usize>)>,
}

impl Inbox {
    fn new() -> Result<Inbox> {
        Ok(Inbox {
            ops: Mutex::new((Vec::new(), false)),
            closing: AtomicBool::new(false),
            bell: Arc::new(Bell::new()?),
            left: Mutex::new((Vec::new(), None)),
            has_left: AtomicBool::new(false),
            placed: Mutex::new((0, Vec::new())),
        })
    }

    /// Run the worker on `cpus` (none: leave it where it is), now if it
    /// runs, else once it starts.
    fn place(&self, cpus: Vec<usize>) -> std::io::Result<()> {
        let mut g = self.placed.lock().unwrap_or_else(|p| p.into_inner());
        g.1 = cpus;
        if g.0 != 0 && !g.1.is_empty() {
            crate::storage::io::set_thread_cpus(g.0, &g.1)?;
        }
        Ok(())
    }

    /// Called by the worker as it starts (`Some(tid)`) and as it ends (`None`).
    fn started(&self, tid: Option<libc::pid_t>) {
        let mut g = self.placed.lock().unwrap_or_else(|p| p.into_inner());
        g.0 = tid.unwrap_or(0);
        if tid.is_some()
            && !g.1.is_empty()
            && let Err(e) = crate::storage::io::set_thread_cpus(0, &g.1)
        {
            eprintln!(
                "setcache: the futures' I/O worker cannot run on CPUs {} as placed: {e}",
                crate::storage::io::cpu_list(&g.1)
            );
        }
    }

    /// Call the wakers the worker left. A waker that panics is reported to
    /// the worker, which ends with its message as if it had called it.
    fn wake_left(&self) {
        if !self.has_left.load(Ordering::Acquire) {
            return;
        }
        let left = {
            let mut g = self.left.lock().unwrap_or_else(|p| p.into_inner());
            self.has_left.store(false, Ordering::Release);
            std::mem::take(&mut g.0)
        };
        for w in left {
            if let Err(p) = std::panic::catch_unwind(AssertUnwindSafe(|| w.wake())) {
                let mut g = self.left.lock().unwrap_or_else(|p| p.into_inner());
                g.1.get_or_insert_with(|| panic_message(&*p));
                drop(g);
                self.bell.ring();
            }
        }
    }
}

/// The message a panic's payload carries.
fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".into())
}

/// Where a cached store's futures' I/O workers run
/// ([`CachedStore::place_futures_workers`](crate::CachedStore::place_futures_workers)).
///
/// A worker looks each page up, submits its device reads and copies pages
/// out: with many futures in flight it is the busiest thread of a futures
/// run. A CPU that also takes the device's completion interrupts spends part
/// of its time on their softirqs, and the scheduler tends to put the worker
/// there, where each completion wakes it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum WorkerCpus {
    /// On the CPUs the process may use that take none of the store's
    /// devices' completion interrupts ([`Store::interrupt_cpus`](crate::Store::interrupt_cpus)),
    /// looked up when the workers start or are placed. Where every CPU
    /// takes some (an NVMe device with a queue per CPU) or none can be
    /// found (tmpfs, a loop device), this is [`WorkerCpus::Anywhere`]. The
    /// default.
    #[default]
    OffInterrupts,
    /// On every CPU the process may use, wherever the scheduler puts them.
    Anywhere,
    /// Worker `k` on CPU `cpus[k % len]`. Every CPU must be one the process
    /// may use; an empty list is refused.
    Pinned(Vec<usize>),
}

/// The store's I/O workers for futures, started on first use.
struct Driver {
    inboxes: std::sync::OnceLock<Vec<Arc<Inbox>>>,
    /// The workers' threads, whether the driver was stopped, and where the
    /// workers are to run.
    threads: Mutex<(Vec<JoinHandle<()>>, bool, WorkerCpus)>,
}

/// A future's page hinted at (see `CachedFile::hint`): its store's shared
/// state as an address, the file, the page, and the bytes to ask for.
type Hinted = (usize, u32, u64, u32, u32);

/// Numbers threads, to spread them over the workers.
static NEXT_THREAD: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static THREAD_NO: usize = NEXT_THREAD.fetch_add(1, Ordering::Relaxed);
    /// The page of the last future this thread made, whose frame's lines
    /// its next future's hint asks for (see `CachedFile::hint`): the
    /// store's shared state (as an address, only compared), the file, the
    /// page and the bytes.
    static LAST_HINT: std::cell::Cell<Option<Hinted>> = const { std::cell::Cell::new(None) };
}

/// The store's driver (made on first use); `None` once the store closed
/// before any was made.
fn driver(sh: &Shared) -> Option<&Driver> {
    sh.aio
        .get_or_init(|| Box::new(Driver::new()))
        .as_any()
        .downcast_ref()
}

impl Workers for Driver {
    fn stop(&self) -> bool {
        Driver::stop(self)
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

impl Driver {
    fn new() -> Driver {
        Driver {
            inboxes: std::sync::OnceLock::new(),
            threads: Mutex::new((Vec::new(), false, WorkerCpus::default())),
        }
    }

    /// This thread's worker's inbox and its number, starting the workers if
    /// need be.
    fn inbox(&self, sh: &Arc<Shared>) -> Result<(usize, &Arc<Inbox>)> {
        let all = match self.inboxes.get() {
            Some(v) => v,
            None => self.start(sh)?,
        };
        let k = THREAD_NO.with(|n| *n) % all.len();
        Ok((k, &all[k]))
    }

    /// One worker per eight CPUs the process may use (at least one): a
    /// worker takes a few microseconds of CPU per device operation.
    fn start(&self, sh: &Arc<Shared>) -> Result<&Vec<Arc<Inbox>>> {
        let mut g = self.threads.lock().unwrap_or_else(|p| p.into_inner());
        if g.1 {
            return Err(Error::Closed);
        }
        if let Some(v) = self.inboxes.get() {
            return Ok(v);
        }
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let mut inboxes = Vec::new();
        for _ in 0..(cpus / 8).max(1) {
            inboxes.push(Arc::new(Inbox::new()?));
        }
        // Not started yet: this only records where each is to run.
        for (inbox, cpus) in inboxes.iter().zip(placements(sh, &g.2, inboxes.len())) {
            let _ = inbox.place(cpus);
        }
        for (k, inbox) in inboxes.iter().enumerate() {
            let (sh, ib) = (sh.clone(), inbox.clone());
            let spawned = crate::util::fork_locks::spawn(
                std::thread::Builder::new().name(format!("setcache-aio{k}")),
                move || run(sh, ib),
            );
            match spawned {
                Ok(t) => g.0.push(t),
                Err(e) => {
                    // Stop the workers already started: nobody will send them work.
                    for i in &inboxes[..k] {
                        i.closing.store(true, Ordering::Release);
                        i.bell.ring();
                    }
                    for t in g.0.drain(..) {
                        let _ = t.join();
                    }
                    return Err(Error::os_call("cannot start an I/O worker", e));
                }
            }
        }
        let _ = self.inboxes.set(inboxes);
        Ok(self.inboxes.get().expect("set above"))
    }

    /// Run the workers on `cpus` from now on (see [`WorkerCpus`]); those
    /// not started yet, once they start.
    fn place(&self, sh: &Arc<Shared>, cpus: WorkerCpus) -> Result<()> {
        let mut g = self.threads.lock().unwrap_or_else(|p| p.into_inner());
        if g.1 {
            return Err(Error::Closed);
        }
        if let Some(v) = self.inboxes.get() {
            for (k, (inbox, c)) in v.iter().zip(placements(sh, &cpus, v.len())).enumerate() {
                inbox.place(c).map_err(|e| {
                    Error::os_call(format!("cannot place the futures' I/O worker {k}"), e)
                })?;
            }
        }
        g.2 = cpus;
        Ok(())
    }

    /// The CPUs each started worker is placed on (empty before they start).
    fn placed(&self) -> Vec<Vec<usize>> {
        self.inboxes.get().map_or_else(Vec::new, |v| {
            v.iter()
                .map(|i| i.placed.lock().unwrap_or_else(|p| p.into_inner()).1.clone())
                .collect()
        })
    }

    /// Hand `op` to this thread's worker; its number, or on refusal, the
    /// error and the op's buffer.
    fn send(&self, sh: &Arc<Shared>, op: Op) -> std::result::Result<usize, (Error, Vec<u8>)> {
        let (k, inbox) = match self.inbox(sh) {
            Ok(i) => i,
            Err(e) => return Err((e, op.buf)),
        };
        {
            let mut g = inbox.ops.lock().unwrap_or_else(|p| p.into_inner());
            if g.1 {
                return Err((Error::Closed, op.buf));
            }
            g.0.push(op);
        }
        inbox.bell.ring();
        Ok(k)
    }

    /// Call the wakers worker `k` left (see [`deliver`]).
    fn wake_left(&self, k: usize) {
        if let Some(i) = self.inboxes.get().and_then(|v| v.get(k)) {
            i.wake_left();
        }
    }

    /// Stop the workers once every request they hold is done; later requests
    /// fail with [`Error::Closed`]. Whether the caller is one of them.
    fn stop(&self) -> bool {
        let mut g = self.threads.lock().unwrap_or_else(|p| p.into_inner());
        g.1 = true;
        if let Some(v) = self.inboxes.get() {
            for i in v {
                i.closing.store(true, Ordering::Release);
                i.bell.ring();
            }
        }
        // A worker that ends the store (a task it woke dropped the last
        // handle) cannot wait for itself: it stops on its own once idle.
        let me = std::thread::current().id();
        let mut mine = false;
        for t in g.0.drain(..) {
            if t.thread().id() != me {
                let _ = t.join();
            } else {
                mine = true;
            }
        }
        mine
    }
}

/// The CPUs each of `n` workers is to run on under `how`; empty when the
/// CPUs the process may use cannot be read (the workers stay where they are).
fn placements(sh: &Shared, how: &WorkerCpus, n: usize) -> Vec<Vec<usize>> {
    let allowed = crate::storage::io::allowed_cpus().unwrap_or_default();
    match how {
        WorkerCpus::Pinned(list) if !list.is_empty() => {
            (0..n).map(|k| vec![list[k % list.len()]]).collect()
        }
        WorkerCpus::OffInterrupts => {
            let busy = sh.store.interrupt_cpus();
            let off: Vec<usize> = allowed
                .iter()
                .copied()
                .filter(|c| busy.binary_search(c).is_err())
                .collect();
            let cpus = if off.is_empty() { allowed } else { off };
            vec![cpus; n]
        }
        _ => vec![allowed; n],
    }
}

/// See [`CachedStore::place_futures_workers`](crate::CachedStore::place_futures_workers).
fn place(sh: &Arc<Shared>, cpus: WorkerCpus) -> Result<()> {
    if let WorkerCpus::Pinned(list) = &cpus {
        if list.is_empty() {
            return Err(Error::InvalidArgument(
                "futures' workers pinned to an empty list of CPUs".into(),
            ));
        }
        crate::storage::store::check_cpus("WorkerCpus::Pinned", list)?;
    }
    match driver(sh) {
        Some(d) => d.place(sh, cpus),
        None => Err(Error::Closed),
    }
}

/// See [`CachedStore::futures_workers_cpus`](crate::CachedStore::futures_workers_cpus).
fn placed(sh: &Shared) -> Vec<Vec<usize>> {
    driver(sh).map_or_else(Vec::new, Driver::placed)
}

/// A worker: take requests from the inbox in batches, run them on its own
/// queue, hand each outcome to its slot. Should it panic (a task's waker
/// that panics when woken, say), the inbox closes and every request it held
/// or had yet to take fails with the panic's message: no future waits for a
/// worker that is gone.
fn run(sh: Arc<Shared>, inbox: Arc<Inbox>) {
    let mut slots: Slots = Slab::new();
    let mut batch: Vec<Op> = Vec::new();
    // SAFETY: `gettid` has no preconditions.
    inbox.started(Some(unsafe { libc::gettid() }));
    let served = std::panic::catch_unwind(AssertUnwindSafe(|| {
        serve(&sh, &inbox, &mut slots, &mut batch)
    }));
    inbox.started(None);
    let Err(p) = served else {
        return;
    };
    let message = panic_message(&*p);
    let waiting = {
        let mut g = inbox.ops.lock().unwrap_or_else(|p| p.into_inner());
        g.1 = true;
        std::mem::take(&mut g.0)
    };
    // A request not yet handed to the queue gets its buffer back; one the
    // queue had lost its buffer with the queue.
    let failed = |what: What, buf: Vec<u8>| {
        let e = Error::Engine(format!("the futures' I/O worker panicked: {message}"));
        match what {
            What::Pin => Outcome::Pin(Err(e)),
            What::Read | What::Write => Outcome::Bytes(Err(e), buf),
        }
    };
    let sent = slots
        .take_all()
        .into_iter()
        .map(|(slot, what, _)| (slot, what, Vec::new()));
    let ops = batch
        .drain(..)
        .chain(waiting)
        .map(|op| (op.slot, op.what, op.buf));
    for (slot, what, buf) in sent.chain(ops) {
        // A waker that panics again is this slot's task's own trouble.
        let _ = std::panic::catch_unwind(AssertUnwindSafe(|| slot.complete(failed(what, buf))));
    }
}

/// The worker's loop (see [`run`]).
fn serve(sh: &Arc<Shared>, inbox: &Arc<Inbox>, slots: &mut Slots, batch: &mut Vec<Op>) {
    inbox.bell.set_owner();
    let mut q = CachedQueue::on(sh, WORKER_DEPTH);
    q.set_bell(inbox.bell.clone());
    // Each device read goes to the kernel as soon as it is prepared, as the
    // store's `eager_submit` says (its default), not once per batch taken
    // from the inbox: the device starts on a batch's first reads while the
    // worker prepares the rest. Measured with one executor thread and 64
    // futures in flight at 0% hits: 0.91-0.93x `direct` against 0.85-0.89x
    // batched, for about 1.5 us more system CPU a read.
    let mut done = Vec::new();
    let mut pins = Vec::new();
    let mut wakers = Vec::new();
    loop {
        inbox.bell.take();
        std::mem::swap(
            &mut inbox.ops.lock().unwrap_or_else(|p| p.into_inner()).0,
            batch,
        );
        if !batch.is_empty() {
            let mut reqs = Vec::with_capacity(batch.len());
            for op in batch.iter_mut() {
                let tag = slots.insert((op.slot.clone(), op.what, op.file.entry.clone())) as u64;
                let r = match op.what {
                    What::Read | What::Write => {
                        let kind = match op.what {
                            What::Read => OpKind::Read,
                            _ => OpKind::Write,
                        };
                        let buf = std::mem::take(&mut op.buf);
                        CachedRequest::tagged(kind, &op.file, op.offset, buf, tag)
                    }
                    What::Pin => CachedRequest::pin(&op.file, op.offset, tag),
                };
                reqs.push(match op.stream {
                    Some(s) => r.noted(s),
                    None => r,
                });
            }
            #[cfg(test)]
            if let Some(f) = BEFORE_SUBMIT.take(Arc::as_ptr(sh) as usize) {
                f();
            }
            q.submit_from(&mut reqs);
            drop(reqs);
            batch.clear();
        }
        deliver(&mut q, sh, inbox, slots, &mut done, &mut pins, &mut wakers);
        if q.outstanding() > 0 {
            // Returns early when the bell rings (new requests). With many
            // requests in flight, a round waits for a quarter of them (at
            // most 16): the device keeps the rest, and the tasks polled in
            // a round share its context switches (see `deliver`). But while
            // a request waits for a page another holds, each finished one is
            // handed over at once: its task may be what holds that page (a
            // guard it drops once woken), and holding it back for others
            // would keep the waiters waiting until they give up.
            let k = if q.has_parked() {
                1
            } else {
                (q.outstanding() / 4).clamp(1, 16)
            };
            q.wait_as(k, true);
            deliver(&mut q, sh, inbox, slots, &mut done, &mut pins, &mut wakers);
            continue;
        }
        if inbox.closing.load(Ordering::Acquire) {
            let mut g = inbox.ops.lock().unwrap_or_else(|p| p.into_inner());
            if g.0.is_empty() {
                g.1 = true;
                break;
            }
            continue;
        }
        while !inbox.bell.rang() && !inbox.closing.load(Ordering::Acquire) {
            std::thread::park();
        }
    }
}

/// Hand the outcomes of finished requests to their slots, then wake their
/// tasks: the first itself, the others through the first.
///
/// A task woken from here is most often run on this worker's CPU at once,
/// ahead of the worker (the kernel's wake-up preemption). Had the worker
/// woken each task itself, an executor thread running many of them would be
/// woken, and the worker preempted, once for each: the thread polls the one
/// task, parks, and the worker wakes the next (measured: one-thread
/// executors with 64 futures in flight, about two context switches a
/// request). So the worker leaves every waker but the first in the inbox,
/// wakes the first, and any poll of a future sent to it calls those left
/// (`Inbox::wake_left`): the woken thread wakes its other tasks itself, with
/// no system call, and polls them all in one go. The worker then calls
/// those still left, so that none waits for a poll that may not come. A
/// waker that panics here ends the worker after the others are called (see
/// [`run`]); one that panics in a poll's call does too, at the worker's next
/// round.
#[allow(clippy::too_many_arguments)]
fn deliver(
    q: &mut CachedQueue<'_>,
    sh: &Arc<Shared>,
    inbox: &Inbox,
    slots: &mut Slots,
    done: &mut Vec<(u64, crate::cached::CachedCompletion)>,
    pins: &mut Vec<(u64, Result<RawPin>)>,
    wakers: &mut Vec<Waker>,
) {
    fill_slots(q, sh, slots, done, pins, wakers);
    if wakers.len() > 1 {
        let mut g = inbox.left.lock().unwrap_or_else(|p| p.into_inner());
        g.0.extend(wakers.drain(1..));
        inbox.has_left.store(true, Ordering::Release);
    }
    #[cfg(test)]
    let left = inbox.has_left.load(Ordering::Acquire);
    let mut first = None;
    if let Some(w) = wakers.pop()
        && let Err(p) = std::panic::catch_unwind(AssertUnwindSafe(|| w.wake()))
    {
        first = Some(p);
    }
    #[cfg(test)]
    if left && let Some(f) = AFTER_FIRST_WAKE.take(Arc::as_ptr(sh) as usize) {
        f();
    }
    inbox.wake_left();
    if let Some(p) = first {
        std::panic::resume_unwind(p);
    }
    let panicked = inbox
        .left
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .1
        .take();
    if let Some(m) = panicked {
        panic!("{m}");
    }
}

/// In unit tests: run once by a worker of the store whose `Shared` is at the
/// key's address, after it woke the first task of a round that left others'
/// wakers, before it calls those still left.
#[cfg(test)]
pub(crate) static AFTER_FIRST_WAKE: crate::util::hook::TestHook<usize, Box<dyn FnOnce() + Send>> =
    crate::util::hook::TestHook::new();

/// In unit tests: run once by a worker of the store whose `Shared` is at the
/// key's address, before it submits a batch of requests it took.
#[cfg(test)]
pub(crate) static BEFORE_SUBMIT: crate::util::hook::TestHook<usize, Box<dyn FnOnce() + Send>> =
    crate::util::hook::TestHook::new();

/// The first half of [`deliver`]: the outcomes into their slots, the wakers
/// of the tasks to wake into `wakers`.
fn fill_slots(
    q: &mut CachedQueue<'_>,
    sh: &Arc<Shared>,
    slots: &mut Slots,
    done: &mut Vec<(u64, crate::cached::CachedCompletion)>,
    pins: &mut Vec<(u64, Result<RawPin>)>,
    wakers: &mut Vec<Waker>,
) {
    q.take_completions(done);
    for (tag, c) in done.drain(..) {
        let (slot, _, _) = slots.remove(tag as usize).expect("a request in flight");
        wakers.extend(slot.fill(Outcome::Bytes(c.result, c.buf)));
    }
    q.take_pins(pins);
    if pins.is_empty() {
        return;
    }
    // Each pin owned as it is taken: one whose slot's future is gone is
    // released when the slot drops it.
    for (tag, p) in pins.drain(..) {
        let (slot, _, entry) = slots.remove(tag as usize).expect("a request in flight");
        // Counted before its future can see it: a sync of the file that
        // finds its pages held by parked pins then knows why.
        let p = p.map(|pin| {
            entry.parked_pins.fetch_add(1, Ordering::AcqRel);
            OwnedPin {
                home: sh.clone(),
                pin: Some(pin),
                parked: Some(entry),
            }
        });
        wakers.extend(slot.fill(Outcome::Pin(p)));
    }
}

/// The future of [`CachedFile::read_at_async`]: `(bytes read or the error,
/// the buffer)`.
#[must_use = "futures do nothing unless polled"]
pub struct ReadAt<'f> {
    file: &'f CachedFile,
    offset: u64,
    st: Stage,
    /// Reads sent again after a shrink cut the file under the one sent.
    again: u8,
}

/// Reads a future sends again after shrinks cut the file under them, before
/// it reports the cut (`OutOfRange`).
const READ_AGAIN: u8 = 8;

/// The future of [`CachedFile::write_at_async`]: `(the outcome, the
/// buffer)`.
#[must_use = "futures do nothing unless polled"]
pub struct WriteAt<'f> {
    file: &'f CachedFile,
    offset: u64,
    st: Stage,
}

/// The future of [`CachedFile::page_async`]: the page's guard.
#[must_use = "futures do nothing unless polled"]
pub struct PageAt<'f> {
    file: &'f CachedFile,
    offset: u64,
    st: Stage,
    /// Its place in the starting thread's bound while a worker has it.
    claim: Option<FutureClaim>,
}

enum Stage {
    /// Not yet polled: the buffer.
    Start(Vec<u8>),
    /// With a worker: the slot, the buffer's length, the bytes asked for,
    /// the worker's number.
    Sent(Arc<Slot>, usize, usize, usize),
    Done,
}

impl Stage {
    /// Poll a request sent to a worker; `Start` and `Done` go back to the
    /// caller as they are (`Err`).
    fn poll_sent(
        &mut self,
        f: &CachedFile,
        cx: &Context<'_>,
    ) -> std::result::Result<Poll<(Outcome, usize, usize)>, Stage> {
        match std::mem::replace(self, Stage::Done) {
            Stage::Sent(slot, want, n, k) => {
                // The tasks woken with this one (see `deliver`).
                if let Some(d) = driver(&f.shared) {
                    d.wake_left(k);
                }
                match slot.poll(cx) {
                    Poll::Ready(o) => Ok(Poll::Ready((o, want, n))),
                    Poll::Pending => {
                        *self = Stage::Sent(slot, want, n, k);
                        Ok(Poll::Pending)
                    }
                }
            }
            other => Err(other),
        }
    }
}

/// Send `op` to a worker; `Sent` or, refused, the outcome to report now.
fn send(
    file: &CachedFile,
    op: Op,
    want: usize,
    n: usize,
) -> std::result::Result<Stage, (Error, Vec<u8>)> {
    let slot = op.slot.clone();
    let Some(driver) = driver(&file.shared) else {
        return Err((Error::Closed, op.buf));
    };
    match driver.send(&file.shared, op) {
        Ok(k) => Ok(Stage::Sent(slot, want, n, k)),
        Err(refused) => Err(refused),
    }
}

impl Future for ReadAt<'_> {
    type Output = (Result<usize>, Vec<u8>);

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let f = this.file;
        match this.st.poll_sent(f, cx) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready((Outcome::Bytes(Err(Error::OutOfRange { .. }), mut buf), want, _)))
                if this.again < READ_AGAIN =>
            {
                // A shrink cut the file between the length taken at the
                // first poll and the worker's read: read what is left, as
                // `read_at` returns fewer bytes (or none past the end).
                this.again += 1;
                buf.resize(want, 0);
                match this.start(buf, cx) {
                    Ok(Some(st)) => {
                        this.st = st;
                        Poll::Pending
                    }
                    Ok(None) => unreachable!("a read that is not sent is done"),
                    Err(done) => Poll::Ready(done),
                }
            }
            Ok(Poll::Ready((Outcome::Bytes(r, mut buf), want, n))) => {
                buf.resize(want, 0);
                Poll::Ready((r.map(|()| n).map_err(|e| f.gone_or(e)), buf))
            }
            Ok(Poll::Ready((Outcome::Pin(_), ..))) => unreachable!("a read gets bytes"),
            Err(Stage::Start(buf)) => match this.start(buf, cx) {
                Ok(Some(st)) => {
                    this.st = st;
                    Poll::Pending
                }
                Ok(None) => unreachable!("a read that is not sent is done"),
                Err(done) => Poll::Ready(done),
            },
            Err(_) => panic!("ReadAt polled after it completed"),
        }
    }
}

impl ReadAt<'_> {
    /// The first poll: checks, the hit path, else the worker. `Err` carries
    /// the finished output.
    #[allow(clippy::type_complexity)]
    fn start(
        &mut self,
        mut buf: Vec<u8>,
        cx: &Context<'_>,
    ) -> std::result::Result<Option<Stage>, (Result<usize>, Vec<u8>)> {
        let (f, offset) = (self.file, self.offset);
        let want = buf.len();
        let n = match f.read_len(offset, want) {
            Ok(0) => return Err((Ok(0), buf)),
            Ok(n) => n,
            Err(e) => return Err((Err(f.gone_or(e)), buf)),
        };
        if let Err(e) = f.check_held(offset, offset + n as u64, false) {
            return Err((Err(e), buf));
        }
        let sh = &*f.shared;
        let stream = readahead::note_read(sh, &f.entry, f.id, offset, n as u64, 0);
        let ps = sh.cache.page_size() as u64;
        let (page, in_page) = (offset / ps, (offset % ps) as usize);
        if in_page + n <= ps as usize {
            let dst = &mut buf[..n];
            let got = if stream {
                sh.cache.try_read_stream(f.id, page, in_page, dst)
            } else {
                let hit = sh.cache.try_read(f.id, page, in_page, dst);
                hit.map(|h| if h { Got::Hit } else { Got::Miss })
            };
            match got {
                Ok(Got::Miss) => {}
                Ok(g) => {
                    if g == Got::Cold {
                        readahead::note_used(sh, f.id, page);
                    }
                    return Err((Ok(n), buf));
                }
                Err(e) => return Err((Err(f.gone_or(e)), buf)),
            }
        }
        // A page this thread's queue is reading in would keep the worker
        // waiting for this thread: refused at once, as a synchronous read is.
        for p in page..=(offset + n as u64 - 1) / ps {
            if let Err(e) = sh.own_io(f.id, p, false) {
                return Err((Err(e), buf));
            }
        }
        buf.truncate(n);
        let op = Op {
            what: What::Read,
            file: f.clone(),
            offset,
            buf,
            stream: Some(stream),
            slot: Slot::new(cx.waker()),
        };
        match send(f, op, want, n) {
            Ok(st) => Ok(Some(st)),
            Err((e, mut buf)) => {
                buf.resize(want, 0);
                Err((Err(e), buf))
            }
        }
    }
}

impl Future for WriteAt<'_> {
    type Output = (Result<()>, Vec<u8>);

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let f = this.file;
        match this.st.poll_sent(f, cx) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready((Outcome::Bytes(r, buf), ..))) => {
                Poll::Ready((r.map_err(|e| f.gone_or(e)), buf))
            }
            Ok(Poll::Ready((Outcome::Pin(_), ..))) => unreachable!("a write gets bytes"),
            Err(Stage::Start(buf)) => match this.start(buf, cx) {
                Ok(st) => {
                    this.st = st;
                    Poll::Pending
                }
                Err(done) => Poll::Ready(done),
            },
            Err(_) => panic!("WriteAt polled after it completed"),
        }
    }
}

impl WriteAt<'_> {
    /// The first poll: checks, a write of one cached page at once, else the
    /// worker. `Err` carries the finished output.
    fn start(
        &mut self,
        buf: Vec<u8>,
        cx: &Context<'_>,
    ) -> std::result::Result<Stage, (Result<()>, Vec<u8>)> {
        let (f, offset) = (self.file, self.offset);
        if let Err(e) = f.write_check(offset, buf.len(), f.len()) {
            return Err((Err(f.gone_or(e)), buf));
        }
        if buf.is_empty() {
            return Err((Ok(()), buf));
        }
        let sh = &*f.shared;
        let ps = sh.cache.page_size() as u64;
        let (page, in_page) = (offset / ps, (offset % ps) as usize);
        if in_page + buf.len() <= ps as usize {
            match sh.cache.try_get_mut_present(f.id, page) {
                Ok(Some(mut g)) => {
                    g[in_page..in_page + buf.len()].copy_from_slice(&buf);
                    return Err((Ok(()), buf));
                }
                Ok(None) => {}
                Err(e) => return Err((Err(f.gone_or(e)), buf)),
            }
        }
        // A page whose write-back or fill a request queue of this thread
        // holds would keep the worker waiting for this thread: refused at
        // once, as a synchronous write is.
        for p in page..=(offset + buf.len() as u64 - 1) / ps {
            if let Err(e) = sh.own_io(f.id, p, true) {
                return Err((Err(e), buf));
            }
        }
        let n = buf.len();
        let op = Op {
            what: What::Write,
            file: f.clone(),
            offset,
            buf,
            stream: None,
            slot: Slot::new(cx.waker()),
        };
        send(f, op, n, n).map_err(|(e, buf)| (Err(e), buf))
    }
}

impl<'f> Future for PageAt<'f> {
    type Output = Result<PageGuard<'f>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let f: &'f CachedFile = this.file;
        match this.st.poll_sent(f, cx) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready((Outcome::Pin(p), ..))) => {
                // The pin becomes this thread's guard: the starting thread's
                // place is given back first, as the guard takes one here.
                this.claim = None;
                Poll::Ready(
                    p.and_then(|p| guard_of(f, this.offset, p))
                        .map_err(|e| f.gone_or(e)),
                )
            }
            Ok(Poll::Ready((Outcome::Bytes(..), ..))) => unreachable!("a page request gets a pin"),
            Err(Stage::Start(_)) => match this.start(cx) {
                Ok(st) => {
                    this.st = st;
                    Poll::Pending
                }
                Err(done) => Poll::Ready(done.map_err(|e| f.gone_or(e))),
            },
            Err(_) => panic!("PageAt polled after it completed"),
        }
    }
}

impl<'f> PageAt<'f> {
    /// The first poll: checks, a pin of the page if it is cached, else the
    /// worker. `Err` carries the finished output.
    fn start(&mut self, cx: &Context<'_>) -> std::result::Result<Stage, Result<PageGuard<'f>>> {
        let (f, offset): (&'f CachedFile, u64) = (self.file, self.offset);
        let (page, start, len) = f.page_span(offset).map_err(Err)?;
        // A page this thread holds mutably would be waited for.
        f.check_held(start, start + 1, false).map_err(Err)?;
        // Noted here, on the task's thread, where its stream is.
        let sh = &*f.shared;
        let stream = readahead::note_page(sh, &f.entry, f.id, page, 0);
        match sh.cache.try_pin_present(f.id, page, stream) {
            Ok(Some(g)) => {
                if stream && g.is_cold() {
                    readahead::note_used(sh, f.id, page);
                }
                let name = || f.entry.file.name();
                let hold = Hold::take(f.store_key(), f.id, page, false, name).map_err(Err)?;
                // Pinned: now the check that no array stores into it in place.
                f.entry.refs_allowed().map_err(Err)?;
                return Err(Ok(Guarded::new(g, len, start, hold)));
            }
            Ok(None) => {}
            Err(e) => return Err(Err(e)),
        }
        sh.own_io(f.id, page, false).map_err(Err)?;
        // The worker will pin the page for this future: it counts against
        // this thread's bound until the future ends.
        self.claim = Some(FutureClaim::take(f.store_key(), f.id).map_err(Err)?);
        let op = Op {
            what: What::Pin,
            file: f.clone(),
            offset,
            buf: Vec::new(),
            stream: Some(stream),
            slot: Slot::new(cx.waker()),
        };
        send(f, op, 0, 0).map_err(|(e, _)| {
            self.claim = None;
            Err(e)
        })
    }
}

/// A guard of the page holding `offset` of `f` on this thread, from the pin
/// a worker took (released if this thread may not hold another guard).
fn guard_of(f: &CachedFile, offset: u64, mut p: OwnedPin) -> Result<PageGuard<'_>> {
    let (page, start, len) = f.page_span(offset)?;
    let name = || f.entry.file.name();
    let hold = Hold::take(f.store_key(), f.id, page, false, name)?;
    let raw = p.take().expect("a pin not yet taken");
    // SAFETY: the pin came from `into_raw` of a guard of this file's cache and is used once: taken out of `p` above.
    let g = unsafe { f.shared.cache.restore_pin(raw) };
    // Pinned: now the check that no array stores into it in place.
    f.entry.refs_allowed()?;
    Ok(Guarded::new(g, len, start, hold))
}

impl CachedStore {
    /// Place the I/O workers that serve this store's futures (see
    /// [`WorkerCpus`]; the default is [`WorkerCpus::OffInterrupts`]).
    /// Workers already running move at once; the others start there. A CPU
    /// this process may not use is refused with [`Error::InvalidArgument`]
    /// naming it, and nothing changes.
    ///
    /// ```
    /// use setcache::{CachedStore, CacheOptions, Store, StoreOptions, WorkerCpus};
    ///
    /// let dir = std::env::temp_dir().join(format!("setcache-doc-place-{}", std::process::id()));
    /// std::fs::create_dir_all(&dir)?;
    /// let cs = CachedStore::new(Store::open(&[&dir], StoreOptions::default())?, CacheOptions::default())?;
    /// cs.place_futures_workers(WorkerCpus::Anywhere)?;
    /// assert!(cs.place_futures_workers(WorkerCpus::Pinned(vec![usize::MAX >> 1])).is_err());
    /// drop(cs);
    /// # std::fs::remove_dir_all(&dir)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn place_futures_workers(&self, cpus: WorkerCpus) -> Result<()> {
        place(&self.inner, cpus)
    }

    /// The CPUs each of the futures' I/O workers is placed on, one list per
    /// worker; empty before the first future that needs a worker starts them.
    pub fn futures_workers_cpus(&self) -> Vec<Vec<usize>> {
        placed(&self.inner)
    }
}

impl CachedFile {
    /// Read up to `buf.len()` bytes at `offset`, as [`CachedFile::read_at`],
    /// without blocking the task: the future gives back `(bytes read or the
    /// error, buf)` (bytes of `buf` past those read are unspecified). A read
    /// of one cached page completes in its first poll; others go to the
    /// store's I/O workers, which wake the task when they are done. Dropping
    /// the future before then is safe (the read ends on the worker, which then
    /// frees the buffer).
    pub fn read_at_async(&self, offset: u64, buf: Vec<u8>) -> ReadAt<'_> {
        self.hint(offset, buf.len());
        ReadAt {
            file: self,
            offset,
            st: Stage::Start(buf),
            again: 0,
        }
    }

    /// Write all of `data` at `offset`, as [`CachedFile::write_at`], without
    /// blocking the task: the future gives back `(the outcome, data)`. A
    /// write within one cached page completes in its first poll. A future
    /// dropped before it completes may or may not have written (once sent
    /// to a worker, the write is made), and its write is ordered with no
    /// later one: it may land after a write to the same bytes made later,
    /// even by the same task. Await a write before writing its bytes again.
    pub fn write_at_async(&self, offset: u64, data: Vec<u8>) -> WriteAt<'_> {
        self.hint(offset, 0);
        WriteAt {
            file: self,
            offset,
            st: Stage::Start(data),
        }
    }

    /// The page holding byte `offset`, as [`CachedFile::page`], without
    /// blocking the task: a cached page's guard comes in the first poll, a
    /// missing page's once a worker has read it (pinned, so it is not
    /// evicted on the way). The guard belongs to the thread that polled the
    /// future to completion. Dropping the future before then releases the
    /// page.
    pub fn page_async(&self, offset: u64) -> PageAt<'_> {
        self.hint(offset, 64);
        PageAt {
            file: self,
            offset,
            st: Stage::Start(Vec::new()),
            claim: None,
        }
    }

    /// Start loading the page holding `offset` into the CPU's cache (a
    /// hint, which changes nothing), in two steps a future apart: its set's
    /// metadata now, and the lines of its frame holding bytes
    /// `offset..offset + len` (if it is cached) when this thread makes its
    /// next future of the same store, by which time the set's lines have
    /// arrived and the frame can be found without waiting for them. An
    /// executor that makes several futures before polling them (a join of
    /// many, a task queue) then finds their pages in the CPU's cache at the
    /// first polls, their memory misses overlapped as a queue's batch's are.
    #[inline]
    fn hint(&self, offset: u64, len: usize) {
        let sh = &*self.shared;
        let ps = sh.cache.page_size() as u64;
        let (page, at) = (offset / ps, (offset % ps) as usize);
        sh.cache.prefetch(self.id, page, false);
        let home = Arc::as_ptr(&self.shared) as usize;
        let to = (at + len).min(ps as usize);
        let last = LAST_HINT.replace(Some((home, self.id, page, at as u32, to as u32)));
        // Another store's page is not looked for (its cache may be gone); a
        // store made where a dropped one was finds some page or none, and
        // a hint changes nothing either way.
        if let Some((h, id, p, from, to)) = last
            && h == home
            && to > from
        {
            sh.cache.prefetch_bytes(id, p, from as usize, to as usize);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::sync::shuttle_model::Shuttle;
    use crate::cache::{CacheOptions, Lookup, Mode, PageCache, PolicyKind};
    use std::time::Duration;

    impl PinHome for Arc<PageCache<Shuttle>> {
        unsafe fn release(&self, pin: RawPin) {
            // SAFETY: the caller's promise.
            drop(unsafe { self.restore_pin(pin) });
        }
    }

    type ShuttlePin = OwnedPin<Arc<PageCache<Shuttle>>>;

    /// A waker that counts its calls and notes the threads that made them.
    struct Noted {
        calls: AtomicUsize,
        by: Mutex<Vec<std::thread::ThreadId>>,
    }

    impl std::task::Wake for Noted {
        fn wake(self: Arc<Self>) {
            self.wake_by_ref();
        }
        fn wake_by_ref(self: &Arc<Self>) {
            self.by.lock().unwrap().push(std::thread::current().id());
            self.calls.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn noted() -> Arc<Noted> {
        Arc::new(Noted {
            calls: AtomicUsize::new(0),
            by: Mutex::new(Vec::new()),
        })
    }

    /// A cached store over a new scratch directory with a file of 64 pages,
    /// no readahead; the file's reads are all misses.
    fn store_of_64(tag: &str) -> (std::path::PathBuf, crate::CachedStore, CachedFile) {
        let dir = crate::cached::scratch_dir(tag);
        let store = crate::Store::open(&[&dir], crate::StoreOptions::default()).unwrap();
        let f = store
            .create("f", 64 * 4096, crate::LayoutKind::Stripe)
            .unwrap();
        f.sync().unwrap();
        drop(f);
        let cs = crate::CachedStore::new(store, crate::cached::small_cache(256)).unwrap();
        cs.set_readahead(0);
        let cf = cs.open_file("f").unwrap();
        (dir, cs, cf)
    }

    /// 32 reads of pages not cached, each polled once with a waker of its
    /// own (so sent to the worker): the wakers and the futures.
    fn sent_32(cf: &CachedFile) -> (Vec<Arc<Noted>>, Vec<Pin<Box<ReadAt<'_>>>>) {
        let wakers: Vec<_> = (0..32).map(|_| noted()).collect();
        let mut futs: Vec<_> = (0..32u64)
            .map(|k| Box::pin(cf.read_at_async(k * 2 * 4096, vec![0; 100])))
            .collect();
        for (fut, w) in futs.iter_mut().zip(&wakers) {
            let w = Waker::from(w.clone());
            assert!(fut.as_mut().poll(&mut Context::from_waker(&w)).is_pending());
        }
        (wakers, futs)
    }

    /// The worker wakes the first task of a round and leaves the others'
    /// wakers to the polls of futures sent to it; when no task polls, it
    /// calls them itself: every task is woken once, none is left waiting.
    #[test]
    fn left_wakers_are_called_when_nobody_polls() {
        let (dir, cs, cf) = store_of_64("aio-left");
        let (wakers, futs) = sent_32(&cf);
        let t0 = std::time::Instant::now();
        while wakers.iter().any(|w| w.calls.load(Ordering::SeqCst) == 0) {
            let woken = wakers.iter().filter(|w| w.calls.load(Ordering::SeqCst) > 0);
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "{} of 32 tasks woken after 20 s",
                woken.count()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        for w in &wakers {
            assert_eq!(w.calls.load(Ordering::SeqCst), 1);
        }
        drop(futs);
        drop((cf, cs));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A task woken first that polls its future calls the wakers the worker
    /// left, on its own thread, before the worker gets to them.
    #[test]
    fn the_first_task_polled_wakes_the_others() {
        let (dir, cs, cf) = store_of_64("aio-handoff");
        let (woke_tx, woke_rx) = std::sync::mpsc::channel();
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        AFTER_FIRST_WAKE.arm(
            Arc::as_ptr(&cf.shared) as usize,
            Box::new(move || {
                woke_tx.send(()).unwrap();
                let _ = go_rx.recv_timeout(Duration::from_secs(20));
            }),
        );
        let (wakers, mut futs) = sent_32(&cf);
        woke_rx
            .recv_timeout(Duration::from_secs(20))
            .expect("no round of the worker woke more than one task");
        let first: Vec<usize> = (0..32)
            .filter(|&k| wakers[k].calls.load(Ordering::SeqCst) > 0)
            .collect();
        assert_eq!(first.len(), 1, "the worker woke {first:?} before the hook");
        let k = first[0];
        let w = Waker::from(wakers[k].clone());
        let r = futs[k].as_mut().poll(&mut Context::from_waker(&w));
        assert!(matches!(r, Poll::Ready((Ok(100), _))), "{r:?}");
        let me = std::thread::current().id();
        let here = wakers
            .iter()
            .filter(|w| w.by.lock().unwrap().contains(&me))
            .count();
        go_tx.send(()).unwrap();
        assert!(here >= 1, "no other task was woken by the first one's poll");
        drop(futs);
        drop((cf, cs));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A read future whose file a shrink cuts between its first poll (which
    /// took the length) and the worker's read reads what is left, as
    /// `read_at` does, instead of failing `OutOfRange`.
    #[test]
    fn a_read_future_a_shrink_cuts_reads_what_is_left() {
        let (dir, cs, cf) = store_of_64("aio-cut");
        let (at_tx, at_rx) = std::sync::mpsc::channel();
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        BEFORE_SUBMIT.arm(
            Arc::as_ptr(&cf.shared) as usize,
            Box::new(move || {
                at_tx.send(()).unwrap();
                let _ = go_rx.recv_timeout(Duration::from_secs(20));
            }),
        );
        let mut fut = Box::pin(cf.read_at_async(62 * 4096, vec![0; 2 * 4096]));
        let w = Waker::from(noted());
        let mut cx = Context::from_waker(&w);
        assert!(fut.as_mut().poll(&mut cx).is_pending());
        at_rx
            .recv_timeout(Duration::from_secs(20))
            .expect("the worker never took the read");
        cf.set_len(62 * 4096 + 100).unwrap();
        go_tx.send(()).unwrap();
        let t0 = std::time::Instant::now();
        let r = loop {
            if let Poll::Ready((r, _)) = fut.as_mut().poll(&mut cx) {
                break r;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "the read never ended"
            );
            std::thread::sleep(Duration::from_millis(1));
        };
        assert_eq!(r.unwrap(), 100, "the bytes left past the read's start");
        drop(fut);
        drop((cf, cs));
        let _ = std::fs::remove_dir_all(&dir);
    }

    const PS: usize = 512;
    const P: u64 = 0;

    /// Model check, under Shuttle's random scheduler, of a page future that
    /// may be dropped at any point: the worker claims page `P`'s frame,
    /// "reads" it in two halves (a scheduling point between), publishes it
    /// and hands its pin to the future's slot; the future polls the slot
    /// a few times and then either takes the pin or is dropped; a third
    /// thread brings the set's other pages in (forcing evictions) and reads
    /// `P` optimistically. The frame is never reused or shown while its read
    /// is in flight (no torn or foreign bytes), the guard the future takes
    /// shows the whole page, and however the future ends, its pin is
    /// released (the page can be evicted at the end).
    #[test]
    fn shuttle_dropped_page_futures() {
        shuttle::check_random(dropped_future, 2000);
        shuttle::check_pct(dropped_future, 1000, 3);
    }

    fn dropped_future() {
        let c = Arc::new(
            PageCache::<Shuttle>::new(CacheOptions {
                size: 4 * PS,
                max_size: Some(4 * PS),
                page_size: PS,
                assoc: 4,
                policy: PolicyKind::Clock,
                pin_wait: Duration::from_millis(1),
                partitions: 1,
            })
            .unwrap(),
        );
        let slot: Arc<Slot<Result<ShuttlePin>>> = Slot::new(Waker::noop());
        let worker = {
            let (c, slot) = (c.clone(), slot.clone());
            shuttle::thread::spawn(move || {
                let got = loop {
                    match c.try_get_as(0, P, Mode::Keep).unwrap() {
                        Some(Lookup::Miss(f)) => break f,
                        Some(_) => panic!("page {P} was cached before its read"),
                        None => shuttle::thread::yield_now(),
                    }
                };
                let mut f = got;
                let frame = f.frame_mut();
                frame[..PS / 2].fill(1);
                shuttle::thread::yield_now();
                frame[PS / 2..].fill(1);
                let g = f.finish(Ok(())).unwrap();
                let pin = g.into_raw().expect("a guard's page is in the cache");
                slot.complete(Ok(OwnedPin {
                    home: c.clone(),
                    pin: Some(pin),
                    parked: None,
                }));
            })
        };
        let future = {
            let slot = slot.clone();
            shuttle::thread::spawn(move || {
                let cx = Context::from_waker(Waker::noop());
                for _ in 0..2 {
                    if let Poll::Ready(p) = slot.poll(&cx) {
                        let mut p = p.unwrap();
                        let raw = p.pin.take().unwrap();
                        // SAFETY: the pin came from `into_raw` of this cache.
                        let g = unsafe { p.home.restore_pin(raw) };
                        assert!(g.iter().all(|&b| b == 1), "the guard shows a torn page");
                        shuttle::thread::yield_now();
                        assert!(g.iter().all(|&b| b == 1), "a guarded page changed");
                        return;
                    }
                    shuttle::thread::yield_now();
                }
                // Dropped before completion: the slot's outcome, when it
                // comes, is nobody's.
            })
        };
        drop(slot);
        let other = {
            let c = c.clone();
            shuttle::thread::spawn(move || {
                for q in 1..7u64 {
                    let mut b = vec![0u8; PS];
                    if c.try_read(0, P, 0, &mut b).unwrap() {
                        assert!(b.iter().all(|&x| x == 1), "page {P} read torn");
                    }
                    let zeros = |_: u32, p: u64, fr: &mut [u8]| {
                        fr.fill(p as u8 + 10);
                        Ok(())
                    };
                    match c.get_with(0, q, zeros, |_, _, _| Ok(())) {
                        Ok(g) => {
                            shuttle::thread::yield_now();
                            assert!(
                                g.iter().all(|&x| x == q as u8 + 10),
                                "frame of page {q} reused"
                            );
                        }
                        Err(Error::AllPinned { .. }) => {}
                        Err(e) => panic!("{e}"),
                    }
                }
            })
        };
        for h in [worker, future, other] {
            h.join().unwrap();
        }
        // Whatever the future did, no pin is left on page `P`.
        let cached = c.pages().iter().any(|p| (p.file, p.page) == (0, P));
        assert!(
            !cached || c.evict(0, P).unwrap(),
            "page {P} still pinned after its future ended"
        );
    }
}
