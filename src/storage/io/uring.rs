//! The io_uring engine: one thread and one ring per device.
//!
//! The thread owns the ring, so submission needs no lock. It keeps up to `io_depth`
//! operations in flight, takes new work from the device's mailbox only when it has
//! room (the backlog stays in the bounded mailbox and holds back producers), and
//! sleeps in `io_uring_enter` when it has nothing to submit: an eventfd read kept
//! armed in the ring wakes it when a batch arrives. It never spins.
//!
//! Backing files are registered in a sparse fixed-file table and buffer arenas in a
//! sparse fixed-buffer table where the kernel allows; operations fall back to plain
//! descriptors and buffers when a registration failed.

use crate::util::origin::Origin;
use std::collections::VecDeque;
use std::os::fd::RawFd;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use io_uring::{IoUring, opcode, squeue, types};

use super::mailbox::{Ctrl, Mailbox};
use super::{DevOp, DevOpKind, DeviceEngine, EngineParams, OpResult, Ring};
use crate::error::{Error, Result};
use crate::util::fds::Fd;

/// Slots of the fixed-file table: bounds the files open at once on one device.
const MAX_FILES: u32 = 4096;
/// Slots of the fixed-buffer table.
const MAX_BUFS: u16 = 1024;
/// `IORING_ENTER_GETEVENTS`: process completions during `io_uring_enter`.
const ENTER_GETEVENTS: u32 = 1;
/// The eventfd read's token; operation tokens are slab indices below it.
const WAKE_TOKEN: u64 = u64::MAX;

pub(crate) struct UringEngine {
    queue_rings: Option<super::QueueRings>,
    mailbox: Arc<Mailbox>,
    thread: Mutex<Option<JoinHandle<()>>>,
    file_slots: Option<Arc<Mutex<Vec<u32>>>>,
    buf_slots: Option<Arc<Mutex<Vec<u16>>>>,
    /// The process that started it: in a child made by `fork` the threads
    /// are the parent's, neither stopped nor joined there.
    origin: Origin,
}

impl UringEngine {
    pub(crate) fn start(p: &EngineParams) -> Result<Arc<dyn super::DeviceEngine>> {
        let depth = p.io_depth.clamp(1, 4096);
        // SAFETY: eventfd has no memory-safety preconditions.
        let efd = Fd::make(&mut || unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) })
            .map_err(|e| Error::Engine(format!("eventfd for device {}: {e}", p.device)))?;
        let mailbox = Arc::new(Mailbox::new(depth as usize * 4, Some(efd)));
        let file_slots: Arc<Mutex<Vec<u32>>> = Arc::new(Mutex::new((0..MAX_FILES).rev().collect()));
        let buf_slots: Arc<Mutex<Vec<u16>>> = Arc::new(Mutex::new((0..MAX_BUFS).rev().collect()));
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let cpu = p.cpu;
        let dev = p.device;
        let mb = mailbox.clone();
        let (fs, bs) = (file_slots.clone(), buf_slots.clone());
        let handle = crate::util::fork_locks::spawn(
            std::thread::Builder::new().name(format!("setcache-uring-{dev}")),
            move || {
                if let Some(c) = cpu
                    && let Err(e) = super::pin_to_cpu(c)
                {
                    eprintln!(
                        "setcache: could not pin the I/O thread of device {dev} to CPU {c}: {e}"
                    );
                }
                // The ring is built on the thread that will be its only submitter, so
                // the kernel can defer completion work to our own io_uring_enter calls.
                let ring = match build_ring(depth) {
                    Ok(r) => r,
                    Err(e) => {
                        let _ = tx.send(Err(e));
                        return;
                    }
                };
                let sub = ring.submitter();
                let files_ok = sub.register_files_sparse(MAX_FILES).is_ok();
                let bufs_ok = sub.register_buffers_sparse(MAX_BUFS as u32).is_ok();
                let _ = tx.send(Ok((files_ok, bufs_ok)));
                let mut worker = Worker {
                    ring,
                    mailbox: mb,
                    depth: depth as usize,
                    slab: (0..depth).map(|_| None).collect(),
                    free: (0..depth as usize).rev().collect(),
                    files: vec![false; MAX_FILES as usize],
                    bufs: vec![false; MAX_BUFS as usize],
                    file_slots: Some(fs),
                    buf_slots: Some(bs),
                    wake_buf: Box::new(0),
                    wake_armed: false,
                    done: Vec::with_capacity(depth as usize),
                };
                worker.run();
            },
        )
        .map_err(|e| Error::os_call(format!("cannot start the I/O thread of device {dev}"), e))?;
        let setup = rx
            .recv()
            .unwrap_or_else(|_| Err(std::io::Error::other("the I/O thread died during setup")));
        let (files_ok, bufs_ok) = match setup {
            Ok(v) => v,
            Err(e) => {
                let _ = handle.join();
                return Err(Error::Engine(format!(
                    "io_uring is unavailable on device {dev}: {e}"
                )));
            }
        };
        Ok(Arc::new(UringEngine {
            queue_rings: p.queue_rings,
            mailbox,
            thread: Mutex::new(Some(handle)),
            file_slots: files_ok.then_some(file_slots),
            buf_slots: bufs_ok.then_some(buf_slots),
            origin: Origin::here(),
        }))
    }
}

/// A ring of at least `depth + 1` entries (the +1 is the eventfd read). Asks for
/// single-issuer deferred task running (kernel 6.1+): completions are processed when
/// this thread waits, not by interrupting it; falls back to a plain ring.
fn build_ring(depth: u32) -> std::io::Result<Ring> {
    let entries = (depth + 1).next_power_of_two();
    let ring = Ring::build(|| {
        IoUring::builder()
            .setup_single_issuer()
            .setup_defer_taskrun()
            .build(entries)
            .or_else(|_| IoUring::builder().build(entries))
    })?;
    check_kernel(&ring, false)?;
    Ok(ring)
}

/// Refuse a ring whose kernel lacks what this engine sends: plain, fixed and
/// vectored reads and writes and fsync (all there from Linux 5.6), and, with
/// `timed_waits`, waits with a timeout (`IORING_FEAT_EXT_ARG`, Linux 5.11).
/// Without them the first such request would fail its device for good, and
/// the engine thread's wake-up read would fail at every turn: refused here,
/// the store uses its psync threads instead (or a queue the device threads).
pub(super) fn check_kernel(ring: &IoUring, timed_waits: bool) -> std::io::Result<()> {
    let unsupported = |what: String| std::io::Error::new(std::io::ErrorKind::Unsupported, what);
    let mut probe = io_uring::Probe::new();
    ring.submitter().register_probe(&mut probe).map_err(|e| {
        unsupported(format!(
            "the kernel's io_uring cannot list its operations ({e})"
        ))
    })?;
    let needed = [
        ("read", opcode::Read::CODE),
        ("write", opcode::Write::CODE),
        ("read fixed", opcode::ReadFixed::CODE),
        ("write fixed", opcode::WriteFixed::CODE),
        ("readv", opcode::Readv::CODE),
        ("writev", opcode::Writev::CODE),
        ("fsync", opcode::Fsync::CODE),
    ];
    if let Some((name, _)) = needed.iter().find(|(_, c)| !probe.is_supported(*c)) {
        return Err(unsupported(format!(
            "the kernel's io_uring lacks the {name} operation"
        )));
    }
    if timed_waits && !ring.params().is_feature_ext_arg() {
        return Err(unsupported(
            "the kernel's io_uring lacks waits with a timeout (Linux 5.11)".into(),
        ));
    }
    Ok(())
}

impl DeviceEngine for UringEngine {
    fn blocking_in_caller(&self) -> bool {
        true
    }
    fn submit(&self, ops: Vec<DevOp>) {
        self.mailbox.push(ops);
    }

    fn register_file(&self, fd: RawFd) -> Option<u32> {
        let slot = self.file_slots.as_ref()?.lock().ok()?.pop()?;
        self.mailbox.push_ctrl(Ctrl::RegisterFile { slot, fd });
        Some(slot)
    }

    fn unregister_file(&self, slot: u32) {
        if !self.origin.is_here() {
            return;
        }
        self.mailbox.push_ctrl(Ctrl::UnregisterFile { slot });
    }

    fn settle(&self, bound: std::time::Duration) {
        if !self.origin.is_here() || self.file_slots.is_none() || IN_WORKER.get() {
            // The ring's own thread applies the update at its next turn.
            return;
        }
        // Control messages are applied in order, each update by a system
        // call whose release of the file (the kernel's deferred close) runs
        // before that call returns to the ring's thread.
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        self.mailbox.push_ctrl(Ctrl::Fence(tx));
        let _ = rx.recv_timeout(bound);
    }

    fn register_buffer(&self, ptr: *mut u8, len: usize) -> Option<u16> {
        if len > (1 << 30) {
            return None; // the kernel refuses fixed buffers above 1 GiB
        }
        let index = self.buf_slots.as_ref()?.lock().ok()?.pop()?;
        self.mailbox.push_ctrl(Ctrl::RegisterBuf {
            index,
            addr: ptr as usize,
            len,
        });
        Some(index)
    }

    fn unregister_buffer(&self, index: u16) {
        if !self.origin.is_here() {
            return;
        }
        self.mailbox.push_ctrl(Ctrl::UnregisterBuf { index });
    }

    fn queue_rings(&self) -> Option<super::QueueRings> {
        self.queue_rings
    }

    fn shutdown(&self) {
        if !self.origin.is_here() {
            // A child made by `fork` (the drop keeps the thread's handle).
            return;
        }
        self.mailbox.close();
        let h = self.thread.lock().ok().and_then(|mut g| g.take());
        if let Some(h) = h {
            let _ = h.join();
        }
    }
}

impl Drop for UringEngine {
    fn drop(&mut self) {
        if !self.origin.is_here() {
            // A child made by `fork`: the thread's handle is not let go of
            // (a detach of a thread the child does not have).
            let h = self.thread.get_mut().map(Option::take);
            std::mem::forget(h.unwrap_or_else(|p| p.into_inner().take()));
            return;
        }
        self.shutdown();
    }
}

struct Worker {
    ring: Ring,
    mailbox: Arc<Mailbox>,
    depth: usize,
    slab: Vec<Option<DevOp>>,
    free: Vec<usize>,
    files: Vec<bool>,
    bufs: Vec<bool>,
    file_slots: Option<Arc<Mutex<Vec<u32>>>>,
    buf_slots: Option<Arc<Mutex<Vec<u16>>>>,
    wake_buf: Box<u64>,
    wake_armed: bool,
    /// Completions reaped in one pass (kept to avoid an allocation per pass).
    done: Vec<(usize, i32)>,
}

thread_local! {
    /// Whether this thread is a device's ring thread (which must not wait
    /// for its own turn).
    static IN_WORKER: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

impl Worker {
    fn in_flight(&self) -> usize {
        self.depth - self.free.len()
    }

    fn run(&mut self) {
        IN_WORKER.set(true);
        let mut ctrl = Vec::new();
        let mut pending: VecDeque<DevOp> = VecDeque::new();
        loop {
            if !self.wake_armed {
                self.arm_wake();
            }
            // Take only what fits in the ring now; the backlog stays in the bounded
            // mailbox, holding producers back.
            let room = self.free.len().saturating_sub(pending.len());
            let closed = self.mailbox.take(room, &mut ctrl, &mut pending);
            for c in ctrl.drain(..) {
                self.apply(c);
            }
            while !self.free.is_empty() {
                let Some(op) = pending.pop_front() else { break };
                self.push(op);
            }
            if closed && pending.is_empty() && self.in_flight() == 0 {
                break;
            }
            self.enter(closed);
            self.reap();
        }
        self.settle_wake();
    }

    /// The wake-up read posted last writes into `self.wake_buf`: make it
    /// complete (the eventfd is the mailbox's, still open) and reap it before
    /// the ring and the buffer go; should it stay in the kernel after all
    /// that, its 8 bytes are leaked, not freed.
    fn settle_wake(&mut self) {
        for _ in 0..100 {
            if !self.wake_armed {
                return;
            }
            let Some(fd) = self.mailbox.wake_fd() else {
                break;
            };
            let one: u64 = 1;
            // SAFETY: writes 8 bytes from a live u64 to the mailbox's eventfd.
            let _ = unsafe { libc::write(fd, (&one as *const u64).cast(), 8) };
            let ts = types::Timespec::from(std::time::Duration::from_millis(10));
            let args = types::SubmitArgs::new().timespec(&ts);
            let _ = self.ring.submitter().submit_with_args(1, &args);
            self.reap();
        }
        if self.wake_armed {
            std::mem::forget(std::mem::take(&mut self.wake_buf));
        }
    }

    fn arm_wake(&mut self) {
        let Some(fd) = self.mailbox.wake_fd() else {
            return;
        };
        let e = opcode::Read::new(types::Fd(fd), (&mut *self.wake_buf as *mut u64).cast(), 8)
            .build()
            .user_data(WAKE_TOKEN);
        // SAFETY: the 8-byte buffer is boxed in `self` and outlives the ring.
        if unsafe { self.ring.submission().push(&e) }.is_ok() {
            self.wake_armed = true;
        }
    }

    fn apply(&mut self, c: Ctrl) {
        let sub = self.ring.submitter();
        match c {
            Ctrl::RegisterFile { slot, fd } => {
                self.files[slot as usize] = sub.register_files_update(slot, &[fd]).is_ok();
            }
            Ctrl::UnregisterFile { slot } => {
                if self.files[slot as usize] {
                    let _ = sub.register_files_update(slot, &[-1]);
                }
                self.files[slot as usize] = false;
                if let Some(s) = &self.file_slots
                    && let Ok(mut g) = s.lock()
                {
                    g.push(slot);
                }
            }
            Ctrl::Fence(tx) => {
                let _ = tx.try_send(());
            }
            Ctrl::RegisterBuf { index, addr, len } => {
                let iov = libc::iovec {
                    iov_base: addr as *mut libc::c_void,
                    iov_len: len,
                };
                // An arena dropped before this message is applied has sent
                // `UnregisterBuf` behind it (the mailbox keeps their order),
                // which clears the slot in this same pass: the pages of freed
                // memory are pinned for that moment and never read or written
                // through the index.
                // SAFETY: the kernel only pins the range; no operation names the index once its arena is gone (see above).
                let ok = unsafe { sub.register_buffers_update(index as u32, &[iov], None) }.is_ok();
                self.bufs[index as usize] = ok;
            }
            Ctrl::UnregisterBuf { index } => {
                if self.bufs[index as usize] {
                    let iov = libc::iovec {
                        iov_base: std::ptr::null_mut(),
                        iov_len: 0,
                    };
                    // SAFETY: an empty entry clears the slot.
                    let _ = unsafe { sub.register_buffers_update(index as u32, &[iov], None) };
                }
                self.bufs[index as usize] = false;
                if let Some(s) = &self.buf_slots
                    && let Ok(mut g) = s.lock()
                {
                    g.push(index);
                }
            }
        }
    }

    fn push(&mut self, op: DevOp) {
        let idx = self.free.pop().expect("caller checked for a free slot");
        let slot = &mut self.slab[idx];
        *slot = Some(op);
        let op = slot.as_ref().expect("just stored");
        let fixed_file = op.backing.slot.filter(|&s| self.files[s as usize]);
        let fixed_buf = op
            .fixed
            .filter(|&b| op.iov.len() == 1 && self.bufs[b as usize]);
        let entry = build_entry(op, fixed_file, fixed_buf).user_data(idx as u64);
        // SAFETY: every pointer in the entry (iovec array, buffers) stays valid until
        // the completion: the operation lives in `self.slab[idx]` until then and the
        // request owner keeps the buffers alive until the request completes.
        let pushed = unsafe { self.ring.submission().push(&entry) };
        if pushed.is_err() {
            // The SQ is sized above the depth; flush and retry once.
            let _ = self.ring.submit();
            // SAFETY: as above.
            if unsafe { self.ring.submission().push(&entry) }.is_err() {
                let op = self.slab[idx].take().expect("stored above");
                self.free.push(idx);
                op.finish(OpResult::Errno(libc::EAGAIN));
            }
        }
    }

    /// Submit without blocking, and post completions that are ready: with deferred
    /// task running they appear in the ring only on an enter with GETEVENTS.
    fn submit_getevents(&mut self) -> std::io::Result<usize> {
        let n = self.ring.submission().len() as u32;
        // SAFETY: the submission queue tail is published (pushes sync on drop of the
        // queue handle); no argument pointer is passed.
        unsafe {
            self.ring
                .submitter()
                .enter::<libc::sigset_t>(n, 0, ENTER_GETEVENTS, None)
        }
    }

    fn enter(&mut self, closed: bool) {
        let ready = !self.ring.completion().is_empty();
        let res = if ready {
            self.submit_getevents()
        } else if closed {
            if self.in_flight() > 0 {
                self.ring.submit_and_wait(1)
            } else {
                self.ring.submit()
            }
        } else if self.mailbox.prepare_sleep() {
            let r = self.ring.submit_and_wait(1);
            self.mailbox.woke();
            r
        } else if self.free.is_empty() {
            // Work is waiting but the ring is full: only a completion makes room.
            // (With deferred task running, completions are posted only while we
            // wait for them, so a non-waiting loop here would spin forever.)
            self.ring.submit_and_wait(1)
        } else {
            self.submit_getevents()
        };
        if let Err(e) = res {
            match e.raw_os_error() {
                Some(libc::EINTR) | Some(libc::EBUSY) | Some(libc::EAGAIN) => {}
                _ => {
                    eprintln!("setcache: io_uring_enter failed: {e}");
                    // A lasting failure must not spin a CPU (nor flood stderr).
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
            }
        }
    }

    fn reap(&mut self) {
        let mut done = std::mem::take(&mut self.done);
        for cqe in self.ring.completion() {
            if cqe.user_data() == WAKE_TOKEN {
                self.wake_armed = false;
                continue;
            }
            done.push((cqe.user_data() as usize, cqe.result()));
        }
        for (idx, res) in done.drain(..) {
            finish_slot(&mut self.slab, &mut self.free, idx, res);
        }
        self.done = done;
    }
}

/// Complete the operation in slab slot `idx` with a CQE result and free the slot
/// (a stale or unknown index is ignored).
pub(super) fn finish_slot(slab: &mut [Option<DevOp>], free: &mut Vec<usize>, idx: usize, res: i32) {
    let Some(op) = slab.get_mut(idx).and_then(Option::take) else {
        return;
    };
    free.push(idx);
    let res = if res < 0 {
        if kernel_could_not_run(-res) {
            // Not the device's answer: the kernel found no way to run the
            // operation (no worker thread could start, the process at its
            // thread limit; or no memory for it). Done here as a blocking
            // call instead, the device then answering for itself.
            super::psync::execute(&op)
        } else {
            OpResult::Errno(-res)
        }
    } else {
        OpResult::Done(res as usize)
    };
    op.finish(res);
}

/// Whether a completion's error `errno` says that io_uring could not run the
/// operation at all, rather than that the device failed it: `ECANCELED`
/// (an operation handed to a worker thread that could not be started), and
/// `EAGAIN` or `ENOMEM` (the kernel short of resources for it). No operation
/// of the engines is linked or cancelled, so none ends so otherwise.
pub(super) fn kernel_could_not_run(errno: i32) -> bool {
    matches!(errno, libc::ECANCELED | libc::EAGAIN | libc::ENOMEM)
}

/// The submission entry of one operation.
pub(super) fn build_entry(
    op: &DevOp,
    fixed_file: Option<u32>,
    fixed_buf: Option<u16>,
) -> squeue::Entry {
    macro_rules! with_fd {
        ($fd:expr) => {{
            let fd = $fd;
            let iov0 = op.iov.first().copied().unwrap_or(libc::iovec {
                iov_base: std::ptr::null_mut(),
                iov_len: 0,
            });
            match (op.kind, fixed_buf, op.iov.len()) {
                // Data and the length (the metadata needed to read them
                // back), not timestamps: what a sync promises.
                (DevOpKind::Fsync, _, _) => opcode::Fsync::new(fd)
                    .flags(io_uring::types::FsyncFlags::DATASYNC)
                    .build(),
                (DevOpKind::Read, Some(b), _) => {
                    opcode::ReadFixed::new(fd, iov0.iov_base.cast(), iov0.iov_len as u32, b)
                        .offset(op.offset)
                        .build()
                }
                (DevOpKind::Write, Some(b), _) => {
                    opcode::WriteFixed::new(fd, iov0.iov_base.cast(), iov0.iov_len as u32, b)
                        .offset(op.offset)
                        .build()
                }
                (DevOpKind::Read, None, 1) => {
                    opcode::Read::new(fd, iov0.iov_base.cast(), iov0.iov_len as u32)
                        .offset(op.offset)
                        .build()
                }
                (DevOpKind::Write, None, 1) => {
                    opcode::Write::new(fd, iov0.iov_base.cast(), iov0.iov_len as u32)
                        .offset(op.offset)
                        .build()
                }
                (DevOpKind::Read, None, n) => opcode::Readv::new(fd, op.iov.as_ptr(), n as u32)
                    .offset(op.offset)
                    .build(),
                (DevOpKind::Write, None, n) => opcode::Writev::new(fd, op.iov.as_ptr(), n as u32)
                    .offset(op.offset)
                    .build(),
            }
        }};
    }
    match fixed_file {
        Some(slot) => with_fd!(types::Fixed(slot)),
        None => with_fd!(types::Fd(op.backing.raw_fd())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This machine's kernel has every operation and wait the engines send:
    /// the check passes here, so that a refusal elsewhere is the kernel's.
    /// (A kernel without them cannot be had here: the refusal itself is not
    /// exercised.)
    #[test]
    fn the_kernel_check_passes_a_kernel_with_every_feature() {
        let ring = build_ring(8).expect("an io_uring ring on this machine");
        check_kernel(&ring, true).unwrap();
    }
}
