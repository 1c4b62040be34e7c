//! The I/O engines: one per device, behind one trait.
//!
//! The storage layer cuts every request into per-device operations ([`DevOp`]) and
//! hands each device's share of a batch to that device's engine in one message. An
//! engine completes each operation exactly once through [`DevOp::finish`], which
//! records a device's first failure and counts the operation down on the request's
//! [`Joiner`]; the last one delivers the request's single result.
//!
//! * `uring`: one thread per device owning an io_uring (O_DIRECT backing files,
//!   registered files and buffers). The default.
//! * `psync`: a few threads per device doing `preadv`/`pwritev`; the fallback.
//! * `sim`: in-memory media with seeded latency and fault injection, for tests.

pub(crate) mod fixed;
pub(crate) mod irq;
mod joiner;
mod mailbox;
pub(crate) mod psync;
mod sim;
mod thread_ring;
mod uring;

use std::os::fd::{AsRawFd, RawFd};
use std::sync::{Arc, OnceLock};

pub(crate) use joiner::{Joiner, QueueShared, Sink};
pub use sim::{PowerCut, SimConfig, SimMedia, SimSwitches};
pub(crate) use thread_ring::ThreadRing;

use crate::error::{Error, Result, error_can_pass};
use crate::util::fds::{self, Fd};

/// Which I/O engine a store uses.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub enum EngineKind {
    /// io_uring where the kernel allows it, else psync with a one-line notice.
    #[default]
    Auto,
    /// io_uring or an error.
    Uring,
    /// A pool of pread/pwrite threads per device.
    Psync,
    /// Simulated in-memory devices (tests).
    Sim(SimConfig),
}

/// Per-device settings given to an engine.
#[derive(Debug, Clone)]
pub(crate) struct EngineParams {
    pub(crate) device: usize,
    pub(crate) io_depth: u32,
    /// Queues may drive this device through rings of their own.
    pub(crate) queue_rings: Option<QueueRings>,
    pub(crate) psync_threads: usize,
    pub(crate) cpu: Option<usize>,
}

/// How queues drive a device through rings of their own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct QueueRings {
    /// Enter the kernel for each operation as soon as it is queued.
    pub(crate) eager: bool,
}

/// The kind of a device operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DevOpKind {
    Read,
    Write,
    Fsync,
}

impl DevOpKind {
    pub(crate) fn name(self) -> &'static str {
        match self {
            DevOpKind::Read => "read",
            DevOpKind::Write => "write",
            DevOpKind::Fsync => "sync",
        }
    }
}

/// Health of one device: its first failure, remembered for good.
#[derive(Debug, Default)]
pub(crate) struct DeviceState {
    pub(crate) device: usize,
    failed: OnceLock<Error>,
    /// Bytes read from and written to the device, and the operations that
    /// did it (counted as operations end, on the lines of the threads that
    /// reap them): see the `COUNT_*` indices.
    pub(crate) counts: crate::util::spread::Spread<5>,
}

/// [`DeviceState::counts`]: bytes read.
pub(crate) const COUNT_READ_BYTES: usize = 0;
/// Bytes written.
pub(crate) const COUNT_WRITTEN_BYTES: usize = 1;
/// Read operations.
pub(crate) const COUNT_READS: usize = 2;
/// Write operations.
pub(crate) const COUNT_WRITES: usize = 3;
/// Fsyncs (of files' data).
pub(crate) const COUNT_FSYNCS: usize = 4;

impl DeviceState {
    pub(crate) fn new(device: usize) -> Self {
        DeviceState {
            device,
            failed: OnceLock::new(),
            counts: Default::default(),
        }
    }

    /// `Err` if the device failed earlier.
    #[inline]
    pub(crate) fn check(&self) -> Result<()> {
        match self.failed.get() {
            None => Ok(()),
            Some(first) => Err(Error::DeviceFailed {
                device: self.device,
                first: Box::new(first.clone()),
            }),
        }
    }

    pub(crate) fn fail(&self, e: &Error) {
        let _ = self.failed.set(e.clone());
    }
}

/// An io_uring whose descriptor is named as one the crate keeps while it
/// lives (see `util::fds`).
pub(crate) struct Ring(std::mem::ManuallyDrop<io_uring::IoUring>);

impl Ring {
    /// A ring made by `build`.
    pub(crate) fn build(
        build: impl FnOnce() -> std::io::Result<io_uring::IoUring>,
    ) -> std::io::Result<Ring> {
        let _g = fds::pass();
        let mut ring = build()?;
        // Moved up from the low numbers a program counts on (see
        // `util::fds`): the same ring, mapped again through a copy of its
        // descriptor at a high number, before anything is registered on it.
        if let Some(high) = fds::high_copy(ring.as_raw_fd()) {
            // SAFETY: `high` is a fresh descriptor of this ring, owned by the
            // new handle from here, and the parameters are the kernel's own
            // for the ring.
            match unsafe { io_uring::IoUring::from_fd(high, ring.params().clone()) } {
                Ok(moved) => ring = moved,
                Err(_) => fds::close_copy(high),
            }
        }
        fds::name(ring.as_raw_fd());
        Ok(Ring(std::mem::ManuallyDrop::new(ring)))
    }
}

impl std::ops::Deref for Ring {
    type Target = io_uring::IoUring;
    fn deref(&self) -> &io_uring::IoUring {
        &self.0
    }
}

impl std::ops::DerefMut for Ring {
    fn deref_mut(&mut self) -> &mut io_uring::IoUring {
        &mut self.0
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        let _g = fds::pass();
        // Not named any more: in a child made by `fork`, the program took
        // the number over (the ring's memory is left mapped, unused).
        if fds::forget(self.0.as_raw_fd()) {
            // SAFETY: dropped once, here; the field is not used again.
            unsafe { std::mem::ManuallyDrop::drop(&mut self.0) };
        }
    }
}

/// One backing file on one device, as the engine sees it.
pub(crate) struct Backing {
    pub(crate) fd: Fd,
    pub(crate) device: usize,
    /// Identity of the media contents (the file's uid), used by the sim engine.
    pub(crate) ino: u64,
    /// The file system's identity of the backing file when it was opened (`st_dev`,
    /// `st_ino`), to tell whether its path still leads to it.
    pub(crate) fs_id: (u64, u64),
    /// Registered-file slot in the device's engine, if any.
    pub(crate) slot: Option<u32>,
    /// The store's path-watch sequence number when `sync` last found this file
    /// at its path (0: not yet).
    pub(crate) seen: std::sync::atomic::AtomicU64,
    /// A write to this backing file was prepared or completed since the last
    /// `File::sync` began: only then can a failed fsync have cost data a
    /// caller was told is written. Set at completion as well as at
    /// preparation, so that a write still in flight when another thread's
    /// sync began (which its fsync may not cover) is counted for the next
    /// sync too.
    pub(crate) written: std::sync::atomic::AtomicBool,
    /// The bytes past the file's data on this device, up to the backing
    /// file's size, read as zeros and are durably so: a growth found them
    /// so or cleared them and fsynced, and no write since put bytes there
    /// (a write of the last sector whole with bytes past the end clears
    /// it). False when opened (a crash may have left bytes there) and after
    /// a shrink. A growth with it set neither clears that range nor fsyncs.
    pub(crate) tail_clear: std::sync::atomic::AtomicBool,
    pub(crate) state: Arc<DeviceState>,
    /// The device's engine; operations on this file are sent to it.
    pub(crate) engine: Arc<dyn DeviceEngine>,
    /// The process that opened it: a child made by `fork` dropping its copy
    /// leaves the file as it is.
    origin: crate::util::origin::Origin,
}

impl Backing {
    pub(crate) fn new(
        fd: Fd,
        ino: u64,
        fs_id: (u64, u64),
        state: Arc<DeviceState>,
        engine: &Arc<dyn DeviceEngine>,
    ) -> Backing {
        let slot = engine.register_file(fd.as_raw_fd());
        Backing {
            device: state.device,
            fd,
            ino,
            fs_id,
            slot,
            seen: std::sync::atomic::AtomicU64::new(0),
            written: std::sync::atomic::AtomicBool::new(false),
            tail_clear: std::sync::atomic::AtomicBool::new(false),
            state,
            engine: engine.clone(),
            origin: crate::util::origin::Origin::here(),
        }
    }

    pub(crate) fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

impl Drop for Backing {
    fn drop(&mut self) {
        let fd = self.fd.as_raw_fd();
        let gone = unlinked(fd);
        // The last handle of a deleted file: its space comes back now, whoever
        // else still holds the file (see [`cut_if_unnamed`]).
        if gone && self.origin.is_here() {
            cut(fd);
        }
        if let Some(slot) = self.slot {
            // The engine drops the registration before it looks at later messages; the
            // descriptor itself closes when `fd` drops right after this.
            self.engine.unregister_file(slot);
            // An unlinked file's space comes back only with its last reference,
            // which may be the registration: wait for the engine to let go, so that
            // the last handle of a deleted file gives its space back before its
            // drop returns, as a close of a deleted local file does. The ring's
            // thread answers in microseconds; the bound is for a machine so
            // loaded that it does not run for seconds.
            if gone {
                self.engine.settle(std::time::Duration::from_secs(5));
            }
        }
    }
}

/// Give back the space of the open file `fd` if no name leads to it any more
/// (`st_nlink` 0), by cutting it to length 0: its space otherwise comes back
/// only with the kernel's last reference to the file, which the store does
/// not control (a registration the ring lets go of, a request the kernel
/// finishes on a worker of its own, a descriptor copied into a child by
/// `fork`), and may come back after the delete or the close returned. Only
/// for a file no handle of the store reads any more: nothing can read the
/// cut bytes.
pub(crate) fn cut_if_unnamed(fd: RawFd) {
    if unlinked(fd) {
        cut(fd);
    }
}

/// Cut the open file `fd` to length 0.
fn cut(fd: RawFd) {
    // SAFETY: `ftruncate` on an open descriptor; a failure (a file system
    // that cannot) leaves the space to the last reference.
    let _ = unsafe { libc::ftruncate(fd, 0) };
}

/// Whether the open file `fd` has no name left (`st_nlink` 0).
fn unlinked(fd: RawFd) -> bool {
    // SAFETY: `stat` is plain data, for which all zeros is a valid value.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `fstat` fills `st`, which lives across the call; `fd` is open.
    unsafe { libc::fstat(fd, &mut st) == 0 && st.st_nlink == 0 }
}

/// How a device operation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OpResult {
    /// Transferred this many bytes.
    Done(usize),
    /// Failed with this OS error number.
    Errno(i32),
}

/// The memory pieces of a device operation: one kept in place (most
/// operations: no allocation), or a list.
pub(crate) enum Iovs {
    One(libc::iovec),
    Many(Vec<libc::iovec>),
}

impl Iovs {
    /// No pieces (an fsync).
    pub(crate) fn none() -> Iovs {
        Iovs::Many(Vec::new())
    }

    /// Append a piece.
    pub(crate) fn push(&mut self, v: libc::iovec) {
        match self {
            Iovs::One(a) => *self = Iovs::Many(vec![*a, v]),
            Iovs::Many(list) => list.push(v),
        }
    }
}

impl std::ops::Deref for Iovs {
    type Target = [libc::iovec];

    fn deref(&self) -> &[libc::iovec] {
        match self {
            Iovs::One(a) => std::slice::from_ref(a),
            Iovs::Many(list) => list,
        }
    }
}

impl std::ops::DerefMut for Iovs {
    fn deref_mut(&mut self) -> &mut [libc::iovec] {
        match self {
            Iovs::One(a) => std::slice::from_mut(a),
            Iovs::Many(list) => list,
        }
    }
}

/// One operation on one device: a contiguous range of one backing file, gathered
/// from or scattered to one or more memory pieces.
pub(crate) struct DevOp {
    pub(crate) kind: DevOpKind,
    pub(crate) backing: Arc<Backing>,
    /// Offset in the backing file (header included).
    pub(crate) offset: u64,
    pub(crate) iov: Iovs,
    /// Total bytes of `iov`.
    pub(crate) len: usize,
    /// Fixed-buffer index on this device, when `iov` is one piece of a registered arena.
    pub(crate) fixed: Option<u16>,
    pub(crate) done: Arc<Joiner>,
}

// SAFETY: the iovecs point at memory the request's owner keeps alive and untouched until the request completes (the `Joiner` reports completion only after every operation finished); nothing else in a `DevOp` is thread-bound.
unsafe impl Send for DevOp {}

impl DevOp {
    /// Complete the operation. An error reaches the request; one that cannot pass
    /// ([`error_can_pass`]) also fails the device for good. A short transfer fails
    /// only the request.
    pub(crate) fn finish(self, res: OpResult) {
        if self.kind == DevOpKind::Write {
            let w = &self.backing.written;
            if !w.load(std::sync::atomic::Ordering::Relaxed) {
                w.store(true, std::sync::atomic::Ordering::Release);
            }
        }
        if let OpResult::Done(n) = res {
            let counters = match self.kind {
                DevOpKind::Read => Some((COUNT_READ_BYTES, COUNT_READS)),
                DevOpKind::Write => Some((COUNT_WRITTEN_BYTES, COUNT_WRITES)),
                DevOpKind::Fsync => None,
            };
            match counters {
                Some((bytes, ops)) => self.backing.state.counts.add2((bytes, n as u64), (ops, 1)),
                None => self.backing.state.counts.add(COUNT_FSYNCS, 1),
            }
        }
        let err = match res {
            OpResult::Done(n) if n == self.len || self.kind == DevOpKind::Fsync => None,
            OpResult::Done(n) => {
                Some(
                    self.done
                        .short_error(self.kind, self.backing.device, self.len, n),
                )
            }
            OpResult::Errno(e) => Some(self.done.io_error(self.kind, self.backing.device, e)),
        };
        if let Some(e) = &err {
            // An error that can pass (the file system was full, a quota was
            // reached, a call was interrupted) leaves the device usable: the
            // request fails and its caller may retry. A short write is the
            // file system running out of space part way. Anything else fails
            // the device for good.
            // A short transfer on a regular file means the file is shorter
            // than the store expects (a racing truncate, an outside change) or
            // the file system ran out of space: a problem of the request, not
            // of the device.
            let passes = match res {
                OpResult::Errno(errno) => error_can_pass(errno),
                OpResult::Done(_) => true,
            };
            if !passes {
                self.backing.state.fail(e);
            }
        }
        // The operation's hold on its backing file goes before its request
        // is told: the request's owner may then delete the file, whose space
        // comes back when the last hold goes (a drop here, on an engine's
        // thread, would come after the delete returned).
        let DevOp { backing, done, .. } = self;
        drop(backing);
        done.piece_done(err);
    }
}

/// What every engine does for one device.
pub(crate) trait DeviceEngine: Send + Sync {
    /// Queue a batch of operations (one message); blocks while the device's bounded
    /// queue is full.
    fn submit(&self, ops: Vec<DevOp>);
    /// Register an open backing file; returns its slot where the engine uses slots
    /// (engines of plain system calls have none).
    fn register_file(&self, _fd: RawFd) -> Option<u32> {
        None
    }
    fn unregister_file(&self, _slot: u32) {}
    /// Wait, up to `bound`, until the engine has let go of every file
    /// unregistered before this call (a registered file's last reference
    /// may be the engine's: an unlinked file's space comes back only then).
    fn settle(&self, _bound: std::time::Duration) {}
    /// Register a buffer arena; returns its fixed-buffer index where supported.
    fn register_buffer(&self, _ptr: *mut u8, _len: usize) -> Option<u16> {
        None
    }
    fn unregister_buffer(&self, _index: u16) {}
    /// Forget the data of the file with media identity `ino` from offset `from` of
    /// its data area on, so that it reads as zeros. Engines over real files have
    /// nothing to do (the store punches the backing file itself).
    fn discard(&self, _ino: u64, _from: u64) {}
    /// Whether (and how) a queue may submit this device's operations to a ring of
    /// its own ([`ThreadRing`]) instead of this engine.
    fn queue_rings(&self) -> Option<QueueRings> {
        None
    }
    /// Whether a synchronous call's single operation may run on the calling
    /// thread as a blocking system call ([`psync::execute`]) instead of going
    /// through the engine's thread: true for engines over real files. The
    /// caller then waits in the kernel, as `pread` on an O_DIRECT file does,
    /// with no hand-off to the device thread and back (two wake-ups).
    fn blocking_in_caller(&self) -> bool {
        false
    }
    /// Finish queued and in-flight work and stop the engine's threads.
    fn shutdown(&self);
}

/// Start the engines of all devices. Returns the engines and the engine's name.
pub(crate) fn start_engines(
    kind: &EngineKind,
    params: &[EngineParams],
) -> Result<(Vec<Arc<dyn DeviceEngine>>, &'static str)> {
    let mut out: Vec<Arc<dyn DeviceEngine>> = Vec::with_capacity(params.len());
    match kind {
        EngineKind::Psync => {
            for p in params {
                out.push(psync::PsyncEngine::start(p)?);
            }
            Ok((out, "psync"))
        }
        EngineKind::Sim(cfg) => {
            for p in params {
                out.push(sim::SimEngine::start(p, cfg)?);
            }
            Ok((out, "sim"))
        }
        EngineKind::Uring | EngineKind::Auto => {
            for p in params {
                match uring::UringEngine::start(p) {
                    Ok(e) => out.push(e),
                    Err(err) => {
                        for e in &out {
                            e.shutdown();
                        }
                        if matches!(kind, EngineKind::Uring) {
                            return Err(err);
                        }
                        eprintln!("setcache: {err}; using the psync engine instead");
                        return start_engines(&EngineKind::Psync, params);
                    }
                }
            }
            Ok((out, "uring"))
        }
    }
}

/// A CPU mask as the kernel reads and writes it: bit `c % W` of word `c / W`
/// is CPU `c`, with `W` the bits of a C `unsigned long`.
type MaskWord = libc::c_ulong;
const MASK_BITS: usize = MaskWord::BITS as usize;
/// Words of the first mask tried: the 1024 CPUs of a `cpu_set_t`.
const MASK_WORDS: usize = std::mem::size_of::<libc::cpu_set_t>() / std::mem::size_of::<MaskWord>();
/// Largest mask asked for: a million CPUs.
const MAX_MASK_WORDS: usize = (1 << 20) / MASK_BITS;

/// The CPUs the calling thread may run on (`sched_getaffinity`), ascending.
pub(crate) fn allowed_cpus() -> std::io::Result<Vec<usize>> {
    let mut words = MASK_WORDS;
    loop {
        let mut mask: Vec<MaskWord> = vec![0; words];
        // SAFETY: the kernel writes at most `words` words into `mask`, which holds that many; the mask has the layout of a (longer) `cpu_set_t`.
        let rc = unsafe {
            libc::sched_getaffinity(
                0,
                words * std::mem::size_of::<MaskWord>(),
                mask.as_mut_ptr().cast::<libc::cpu_set_t>(),
            )
        };
        if rc == 0 {
            return Ok((0..words * MASK_BITS)
                .filter(|&c| (mask[c / MASK_BITS] >> (c % MASK_BITS)) & 1 == 1)
                .collect());
        }
        let e = std::io::Error::last_os_error();
        // EINVAL: the kernel's mask is longer than ours.
        if e.raw_os_error() != Some(libc::EINVAL) || words >= MAX_MASK_WORDS {
            return Err(e);
        }
        words *= 2;
    }
}

/// `cpus` (ascending) as a list of ranges: `0-3,8,10-11`.
pub(crate) fn cpu_list(cpus: &[usize]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let mut j = i;
        while j + 1 < cpus.len() && cpus[j + 1] == cpus[j] + 1 {
            j += 1;
        }
        out.push(if j == i {
            cpus[i].to_string()
        } else {
            format!("{}-{}", cpus[i], cpus[j])
        });
        i = j + 1;
    }
    out.join(",")
}

/// Pin the calling thread to one CPU (best effort; the error is returned for a notice).
pub(crate) fn pin_to_cpu(cpu: usize) -> std::io::Result<()> {
    set_thread_cpus(0, &[cpu])
}

/// Let thread `tid` (0: the calling thread) run on `cpus` only.
pub(crate) fn set_thread_cpus(tid: libc::pid_t, cpus: &[usize]) -> std::io::Result<()> {
    let top = cpus.iter().copied().max().unwrap_or(0);
    if cpus.is_empty() || top / MASK_BITS >= MAX_MASK_WORDS {
        return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
    }
    let mut mask: Vec<MaskWord> = vec![0; (top / MASK_BITS + 1).max(MASK_WORDS)];
    for &c in cpus {
        mask[c / MASK_BITS] |= 1 << (c % MASK_BITS);
    }
    // SAFETY: the kernel reads the `mask.len()` words passed, which `mask` holds; the mask has the layout of a (longer) `cpu_set_t`.
    let rc = unsafe {
        libc::sched_setaffinity(
            tid,
            mask.len() * std::mem::size_of::<MaskWord>(),
            mask.as_ptr().cast::<libc::cpu_set_t>(),
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// The calling thread's errno after a failed libc call.
pub(crate) fn last_errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}
