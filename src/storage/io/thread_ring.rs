//! A ring owned by one application thread (a [`crate::Queue`]), for one device.
//!
//! The device's I/O thread costs every request two hand-offs between threads: the
//! batch travels to the I/O thread, and the completion travels back. Where the
//! application thread has nothing else to do while it waits, it can drive the
//! device itself, as fio does: a queue keeps a private ring per device it uses,
//! submits its own operations there, and reaps them while it waits. The ring is
//! built on the owner thread with single-issuer deferred task running, so the
//! kernel posts completions only inside the owner's own `io_uring_enter` calls and
//! never interrupts it.
//!
//! The ring holds at most its size in flight; operations beyond that wait in a
//! backlog and go in as completions make room. Registered files and buffer arenas
//! are the device thread's; a private ring uses plain descriptors, and plain
//! addresses except in the memory its queue registered with it (a page cache's
//! frames, cut into chunks: see [`super::fixed`]), which it reads and writes as
//! fixed buffers: the kernel then skips pinning the pages of every request. The
//! ring registers a chunk the first time an operation touches it, so that only
//! the chunks in use are pinned (pinning faults the pages in).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use io_uring::{IoUring, types};

use super::fixed::FixedChunks;
use super::uring::{build_entry, check_kernel, finish_slot};
use super::{DevOp, OpResult, QueueRings, Ring};

/// `IORING_ENTER_GETEVENTS`.
const ENTER_GETEVENTS: u32 = 1;

pub(crate) struct ThreadRing {
    ring: Ring,
    slab: Vec<Option<DevOp>>,
    free: Vec<usize>,
    backlog: VecDeque<DevOp>,
    done: Vec<(usize, i32)>,
    /// Entries pushed and not yet passed to the kernel.
    unsubmitted: u32,
    /// Pass each entry to the kernel as soon as it is pushed.
    eager: bool,
    /// Memory registered as fixed buffers chunk by chunk, if any.
    fixed: Option<RingChunks>,
    /// The owner's doorbell (see `Bell`), read while the ring sleeps.
    bell: Option<BellRead>,
}

/// The read of a doorbell's eventfd that a sleeping ring keeps posted.
struct BellRead {
    fd: std::os::fd::RawFd,
    buf: Box<u64>,
    /// The read is in the kernel.
    armed: bool,
}

/// The doorbell read's token; operation tokens are slab indices below it.
const BELL_TOKEN: u64 = u64::MAX;

/// A ring's side of a [`FixedChunks`]: buffer index = chunk number.
struct RingChunks {
    chunks: Arc<FixedChunks>,
    /// Per chunk: `UNTRIED` or `REGISTERED` (and then held).
    state: Vec<u8>,
    /// The kernel refused a registration: use plain addresses from now on.
    refused: bool,
}

const UNTRIED: u8 = 0;
const REGISTERED: u8 = 1;

impl RingChunks {
    /// The fixed-buffer index for `[p, p + n)`, registering its chunk first
    /// if this ring has not yet.
    #[inline]
    fn index(&mut self, ring: &IoUring, p: usize, n: usize) -> Option<u16> {
        let c = self.chunks.chunk_of(p, n)?;
        if self.state[c] == REGISTERED {
            return Some(c as u16);
        }
        self.register(ring, c)
    }

    #[cold]
    fn register(&mut self, ring: &IoUring, c: usize) -> Option<u16> {
        if self.refused || !self.chunks.hold(c) {
            return None;
        }
        let (start, len) = self.chunks.bounds(c);
        let iov = libc::iovec {
            iov_base: start as *mut libc::c_void,
            iov_len: len,
        };
        // SAFETY: the chunk lies in memory the queue's owner keeps mapped while the queue lives (the promise of `Queue::register_frames`), `hold` keeps its pages from being given back until this ring lets go of it in `drop`, and the slot `c` is inside the sparse table made in `new`.
        let registered = unsafe {
            ring.submitter()
                .register_buffers_update(c as u32, &[iov], None)
        };
        match registered {
            Ok(()) => {
                self.state[c] = REGISTERED;
                Some(c as u16)
            }
            Err(_) => {
                // Most likely the locked-memory limit: it would refuse the next
                // chunk too, after faulting it in.
                self.chunks.unhold(c);
                self.refused = true;
                None
            }
        }
    }
}

impl ThreadRing {
    /// A ring of `entries` (rounded up to a power of two) on the calling thread,
    /// with a sparse fixed-buffer table for the chunks of `frames` if the kernel
    /// allows (else that memory is used at plain addresses). Nothing is pinned
    /// here: each chunk is registered when an operation first touches it.
    pub(crate) fn new(
        entries: usize,
        cfg: QueueRings,
        frames: Option<&Arc<FixedChunks>>,
    ) -> std::io::Result<ThreadRing> {
        let entries = entries.clamp(4, 4096).next_power_of_two();
        let ring = Ring::build(|| {
            IoUring::builder()
                .setup_single_issuer()
                .setup_defer_taskrun()
                .build(entries as u32)
                .or_else(|_| IoUring::builder().build(entries as u32))
        })?;
        check_kernel(&ring, true)?;
        let fixed = frames
            .filter(|f| {
                f.count() > 0
                    && ring
                        .submitter()
                        .register_buffers_sparse(f.count() as u32)
                        .is_ok()
            })
            .map(|f| RingChunks {
                chunks: f.clone(),
                state: vec![UNTRIED; f.count()],
                refused: false,
            });
        Ok(ThreadRing {
            fixed,
            ring,
            slab: (0..entries).map(|_| None).collect(),
            free: (0..entries).rev().collect(),
            backlog: VecDeque::new(),
            done: Vec::with_capacity(entries),
            unsubmitted: 0,
            eager: cfg.eager,
            bell: None,
        })
    }

    /// Wake from a sleep in the kernel when the eventfd `fd` is written (a
    /// doorbell that outlives the ring).
    pub(crate) fn with_bell(mut self, fd: std::os::fd::RawFd) -> ThreadRing {
        self.bell = Some(BellRead {
            fd,
            buf: Box::new(0),
            armed: false,
        });
        self
    }

    /// Post the doorbell read before a sleep, if it is not posted yet.
    fn arm_bell(&mut self) {
        let Some(b) = self.bell.as_mut().filter(|b| !b.armed) else {
            return;
        };
        let e = io_uring::opcode::Read::new(types::Fd(b.fd), (&mut *b.buf as *mut u64).cast(), 8)
            .build()
            .user_data(BELL_TOKEN);
        for _ in 0..2 {
            // SAFETY: the 8-byte buffer is boxed in `self` and outlives the read (`drop` waits for it).
            if unsafe { self.ring.submission().push(&e) }.is_ok() {
                if let Some(b) = self.bell.as_mut() {
                    b.armed = true;
                }
                self.unsubmitted += 1;
                return;
            }
            // The submission queue is full: pass it to the kernel, then retry.
            self.submit_now();
        }
    }

    /// The fixed-buffer index for an operation on one piece of registered
    /// memory (registering its chunk with this ring on first use).
    #[inline]
    fn fixed_index(&mut self, op: &DevOp) -> Option<u16> {
        let fixed = self.fixed.as_mut()?;
        if op.iov.len() != 1 {
            return None;
        }
        let (p, n) = (op.iov[0].iov_base as usize, op.iov[0].iov_len);
        fixed.index(&self.ring, p, n)
    }

    /// Operations handed to this ring and not yet completed.
    pub(crate) fn in_flight(&self) -> usize {
        self.slab.len() - self.free.len() + self.backlog.len()
    }

    /// Whether this ring has a read of the doorbell posted (which a ring of
    /// the bell may take, so that another ring asleep never hears it).
    pub(crate) fn bell_armed(&self) -> bool {
        self.bell.as_ref().is_some_and(|b| b.armed)
    }

    /// Queue operations, emptying `ops` (which keeps its capacity); they go
    /// to the kernel at the next [`ThreadRing::enter`].
    pub(crate) fn push_from(&mut self, ops: &mut Vec<DevOp>) {
        self.backlog.extend(ops.drain(..));
        self.fill();
    }

    fn fill(&mut self) {
        while !self.free.is_empty() {
            let Some(op) = self.backlog.pop_front() else {
                break;
            };
            let idx = self.free.pop().expect("checked non-empty");
            let fixed = self.fixed_index(&op);
            // The entry is built from the operation where it stays until it
            // completes: an iovec array it points at does not move.
            let op = self.slab[idx].insert(op);
            let entry = build_entry(op, None, fixed).user_data(idx as u64);
            // SAFETY: the entry's iovec array lives in `self.slab[idx]`, and the buffers are kept alive by the request's owner until the completion.
            let mut pushed = unsafe { self.ring.submission().push(&entry) };
            if pushed.is_err() {
                // The SQ is as large as the slab, but the doorbell's read
                // takes an entry too, and a refused enter can leave it
                // unsent: pass what is queued to the kernel, then retry.
                self.submit_now();
                // SAFETY: as above.
                pushed = unsafe { self.ring.submission().push(&entry) };
            }
            match pushed {
                Ok(()) => {
                    self.unsubmitted += 1;
                    if self.eager {
                        self.submit_now();
                    }
                }
                Err(_) => {
                    let op = self.slab[idx].take().expect("stored above");
                    self.free.push(idx);
                    op.finish(OpResult::Errno(libc::EAGAIN));
                }
            }
        }
    }

    /// Pass the pushed entries to the kernel without waiting or reaping.
    pub(crate) fn submit_now(&mut self) {
        if self.unsubmitted == 0 {
            return;
        }
        // SAFETY: as in `enter`.
        let r = unsafe {
            self.ring.submitter().enter::<libc::sigset_t>(
                self.unsubmitted,
                0,
                ENTER_GETEVENTS,
                None,
            )
        };
        if let Ok(n) = r {
            self.unsubmitted -= (n as u32).min(self.unsubmitted);
        }
        // An error leaves the entries queued; the next `enter` retries and reports.
    }

    /// Submit what was pushed and post completions. With `wait`, block until at
    /// least one operation completed or `timeout` (if any) passed. Returns how many
    /// operations completed (their requests' sinks were told).
    pub(crate) fn enter(&mut self, wait: bool, timeout: Option<Duration>) -> usize {
        let want = u32::from(wait && self.slab.len() > self.free.len());
        if want == 1 {
            self.arm_bell();
        }
        let to_submit = self.unsubmitted;
        let res = match (want, timeout) {
            (1, Some(t)) => {
                let ts = types::Timespec::from(t);
                let args = types::SubmitArgs::new().timespec(&ts);
                self.ring.submitter().submit_with_args(1, &args)
            }
            // SAFETY: no argument pointer is passed; the SQ tail was published by the push (the queue handle syncs when dropped).
            _ => unsafe {
                self.ring.submitter().enter::<libc::sigset_t>(
                    to_submit,
                    want,
                    ENTER_GETEVENTS,
                    None,
                )
            },
        };
        match res {
            Ok(n) => self.unsubmitted -= (n as u32).min(self.unsubmitted),
            Err(e) => match e.raw_os_error() {
                Some(libc::EINTR) | Some(libc::ETIME) | Some(libc::EAGAIN) | Some(libc::EBUSY) => {}
                // Operations complete only through their CQEs (the kernel may still own
                // their buffers), so a refused enter is reported and retried, like the
                // device thread does; back off so a persistent failure cannot spin.
                _ => {
                    eprintln!("setcache: io_uring_enter failed on a queue's ring: {e}");
                    std::thread::sleep(Duration::from_millis(1));
                }
            },
        }
        self.reap()
    }

    fn reap(&mut self) -> usize {
        let mut done = std::mem::take(&mut self.done);
        let mut bell_done = false;
        done.extend(self.ring.completion().filter_map(|c| {
            if c.user_data() == BELL_TOKEN {
                bell_done = true;
                return None;
            }
            Some((c.user_data() as usize, c.result()))
        }));
        if bell_done && let Some(b) = self.bell.as_mut() {
            b.armed = false;
        }
        let n = done.len();
        for (idx, res) in done.drain(..) {
            finish_slot(&mut self.slab, &mut self.free, idx, res);
        }
        self.done = done;
        if !self.backlog.is_empty() {
            self.fill();
        }
        n
    }
}

impl Drop for ThreadRing {
    fn drop(&mut self) {
        // Buffers of operations in flight belong to their requests; wait for the
        // kernel to let go of them before the ring (and the slab) disappear.
        while self.slab.len() > self.free.len() || !self.backlog.is_empty() {
            if self.enter(true, Some(Duration::from_millis(100))) == 0
                && self.unsubmitted == 0
                && self.slab.len() == self.free.len()
            {
                break;
            }
        }
        // A posted doorbell read writes into `self`: complete it (the eventfd
        // is the owner's, still open) and wait for it to come back.
        for _ in 0..100 {
            let Some(b) = self.bell.as_ref().filter(|b| b.armed) else {
                break;
            };
            let one: u64 = 1;
            // SAFETY: writes 8 bytes from a live u64 to the doorbell's eventfd.
            let _ = unsafe { libc::write(b.fd, (&one as *const u64).cast(), 8) };
            let ts = types::Timespec::from(Duration::from_millis(10));
            let args = types::SubmitArgs::new().timespec(&ts);
            let _ = self.ring.submitter().submit_with_args(1, &args);
            self.reap();
        }
        // Still in the kernel after all that (never seen): its 8 bytes are
        // leaked, not freed, since the read may yet write them.
        if let Some(b) = self.bell.take_if(|b| b.armed) {
            std::mem::forget(b.buf);
        }
        // Nothing of ours is in flight: the owner may give the chunks' pages
        // back again (the ring, closed next, is never used after this).
        if let Some(f) = &self.fixed {
            for (c, _) in f.state.iter().enumerate().filter(|s| *s.1 == REGISTERED) {
                f.chunks.unhold(c);
            }
        }
    }
}
