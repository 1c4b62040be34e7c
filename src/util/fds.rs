//! The descriptors the crate holds, named process-wide.
//!
//! A program that closes descriptors wholesale (`closefrom`, `close_range`,
//! a loop up to the limit) or duplicates one onto a number it did not open
//! would take the crate's backing files, rings, doorbells and lock files from
//! under it: the next write would fail with `EBADF`, or, once the number is
//! reused, go into an unrelated file. So every descriptor the crate keeps is
//! made and closed here, behind a gate, and named in a map that [`is_ours`]
//! reads without a lock. [`hold`] shuts the gate: while its guard lives the
//! crate opens and closes no descriptor it keeps, so the map's answers stay
//! true. A program (or a library standing in for the C library's calls)
//! closes around the numbers [`is_ours`] names while it holds the gate.
//!
//! A child made by `fork` closes its copies of the roots' lock files at once
//! (a child that outlived its parent would keep the roots locked: the lock is
//! the open file's, shared by every copy); its other copies stay, unused,
//! until its `exec` (the crate makes all of them close-on-exec) or its exit.
//! A child made by the raw system call, which runs no `atfork` handler, may
//! call [`close_locks_in_child`] itself.
//!
//! Descriptor numbers up to [`LIMIT`] are named; one past it (a process with
//! a larger limit than Linux's default maximum) is kept and closed as any
//! other, but unnamed.

use std::cell::{Cell, RefCell};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::sync::atomic::{AtomicI32, AtomicPtr, AtomicU64, Ordering};
use std::sync::{Once, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Words of a chunk of the map (64 descriptors each).
const WORDS: usize = 1024;
/// Chunks of the map, each allocated when a number in it is first named.
const CHUNKS: usize = 1024;
/// Descriptors one chunk names.
const PER_CHUNK: usize = WORDS * 64;
/// The descriptor numbers the map can name: below this.
pub const LIMIT: usize = CHUNKS * PER_CHUNK;

type Chunk = [AtomicU64; WORDS];

/// A set of descriptor numbers, read and changed without a lock.
struct Bits {
    chunks: [AtomicPtr<Chunk>; CHUNKS],
}

impl Bits {
    const fn new() -> Bits {
        Bits {
            chunks: [const { AtomicPtr::new(std::ptr::null_mut()) }; CHUNKS],
        }
    }

    /// The word and bit of `fd`, allocating its chunk if `grow`; None past
    /// the map, or for an absent chunk when not growing.
    fn slot(&self, fd: RawFd, grow: bool) -> Option<(&AtomicU64, u64)> {
        let fd = usize::try_from(fd).ok().filter(|&f| f < LIMIT)?;
        let cell = &self.chunks[fd / PER_CHUNK];
        let mut p = cell.load(Ordering::Acquire);
        if p.is_null() {
            if !grow {
                return None;
            }
            let fresh = Box::into_raw(Box::new([const { AtomicU64::new(0) }; WORDS]));
            p = match cell.compare_exchange(
                std::ptr::null_mut(),
                fresh,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => fresh,
                Err(other) => {
                    // SAFETY: `fresh` came from Box::into_raw above and was never shared.
                    drop(unsafe { Box::from_raw(fresh) });
                    other
                }
            };
        }
        // SAFETY: a published chunk is never freed (the map lives as long as the process).
        let chunk = unsafe { &*p };
        Some((&chunk[fd % PER_CHUNK / 64], 1u64 << (fd % 64)))
    }

    fn insert(&self, fd: RawFd) {
        if let Some((w, bit)) = self.slot(fd, true) {
            w.fetch_or(bit, Ordering::AcqRel);
        }
    }

    /// Remove `fd`; whether it was there.
    fn remove(&self, fd: RawFd) -> bool {
        self.slot(fd, false)
            .is_some_and(|(w, bit)| w.fetch_and(!bit, Ordering::AcqRel) & bit != 0)
    }

    fn contains(&self, fd: RawFd) -> bool {
        self.slot(fd, false)
            .is_some_and(|(w, bit)| w.load(Ordering::Acquire) & bit != 0)
    }

    /// Every number in the set from `from` up, in ascending order.
    fn each_from(&self, from: RawFd, mut f: impl FnMut(RawFd)) {
        let from = from.max(0) as usize;
        for (c, cell) in self.chunks.iter().enumerate().skip(from / PER_CHUNK) {
            let p = cell.load(Ordering::Acquire);
            if p.is_null() {
                continue;
            }
            // SAFETY: as in `slot`.
            let chunk = unsafe { &*p };
            for (i, w) in chunk.iter().enumerate() {
                let mut bits = w.load(Ordering::Acquire);
                while bits != 0 {
                    let fd = c * PER_CHUNK + i * 64 + bits.trailing_zeros() as usize;
                    bits &= bits - 1;
                    if fd >= from {
                        f(fd as RawFd);
                    }
                }
            }
        }
    }
}

/// Descriptors the crate keeps.
static OURS: Bits = Bits::new();
/// Those of them that are lock files (closed in a child made by `fork`).
static LOCKS: Bits = Bits::new();
/// Shut by [`hold`]; passed (shared) by every making and closing of a
/// descriptor the crate keeps.
static GATE: RwLock<()> = RwLock::new(());

thread_local! {
    /// This thread passes or holds the gate: a signal handler that runs on
    /// it meanwhile (a `dup2` in a crash handler) must not wait for the gate,
    /// which its own thread keeps from it.
    static IN_GATE: Cell<bool> = const { Cell::new(false) };
    /// The gate shut for a `fork` by this thread, from the prepare handler
    /// to the parent's or the child's.
    static FORK_HOLD: RefCell<Option<Gate>> = const { RefCell::new(None) };
}

/// The process that first used the gate: in a child made by `fork` (by the
/// raw system call too, which runs no handler) the gate may have been
/// passed by a thread the child does not have, and no thread of the crate
/// is left to open or close anything, so the gate is not waited for there.
static GATE_PID: AtomicI32 = AtomicI32::new(0);

/// A pass of the gate, or its hold; nothing when the gate is not waited for
/// (this thread already passes or holds it, or this is a child process).
pub(crate) struct Gate {
    inner: GateInner,
}

enum GateInner {
    Passed(#[allow(dead_code)] RwLockReadGuard<'static, ()>),
    Held(#[allow(dead_code)] RwLockWriteGuard<'static, ()>),
    Skipped,
}

impl Drop for Gate {
    fn drop(&mut self) {
        if !matches!(self.inner, GateInner::Skipped) {
            IN_GATE.with(|g| g.set(false));
        }
    }
}

/// Whether the gate is not to be waited for here (see [`Gate`]).
fn skip_gate() -> bool {
    if IN_GATE.with(Cell::get) {
        return true;
    }
    // SAFETY: plain getter.
    let pid = unsafe { libc::getpid() };
    match GATE_PID.compare_exchange(0, pid, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => {
            register_atfork();
            false
        }
        Err(first) => first != pid,
    }
}

/// Pass the gate: no [`hold`] is taken while the guard lives. Held only
/// across the system calls that make or close a descriptor and the map's
/// update, never while waiting for anything else (a waiting [`hold`] stops
/// new passes, so a pass held across a wait could stall both).
pub(crate) fn pass() -> Gate {
    enter(false)
}

fn shut() -> Gate {
    enter(true)
}

/// Shut the gate (`shut`) or pass it, unless it is not waited for here.
fn enter(shut: bool) -> Gate {
    if skip_gate() {
        return Gate {
            inner: GateInner::Skipped,
        };
    }
    let inner = if shut {
        GateInner::Held(GATE.write().unwrap_or_else(|p| p.into_inner()))
    } else {
        GateInner::Passed(GATE.read().unwrap_or_else(|p| p.into_inner()))
    };
    IN_GATE.with(|f| f.set(true));
    Gate { inner }
}

/// Shut the gate until the guard drops: meanwhile the crate neither opens
/// nor closes a descriptor it keeps, and [`is_ours`] stays true of each
/// number. Never hold it across a call into the crate (which would wait for
/// it). On a thread that already holds it, or in a signal handler that
/// interrupted a thread passing it, it is not waited for (nor held); nor in
/// a child made by `fork`, where no thread of the crate is left to open or
/// close anything.
pub fn hold() -> Hold {
    Hold { _g: shut() }
}

/// The guard of [`hold`].
#[must_use = "the gate opens again when the guard drops"]
pub struct Hold {
    _g: Gate,
}

/// Whether descriptor `fd` is one the crate keeps (a backing file, a lock
/// file, a ring, a doorbell, a watch): a program must leave it open. Exact
/// while a [`hold`] is held; without one, a number the crate opens or closes
/// meanwhile may be answered either way.
pub fn is_ours(fd: RawFd) -> bool {
    OURS.contains(fd)
}

/// Every descriptor from `from` up that the crate keeps, in ascending order.
/// Exact while a [`hold`] is held.
pub fn ours_from(from: RawFd) -> Vec<RawFd> {
    let mut v = Vec::new();
    OURS.each_from(from, |fd| v.push(fd));
    v
}

/// In a child made by `fork`, where the crate's objects are the parent's
/// and unused: the program takes number `fd` over (closes it, or makes it a
/// copy of another file), and the crate forgets it, so that no drop of the
/// child's copy of an object (a thread's ring at the thread's end) closes
/// what the program put there.
pub fn disown(fd: RawFd) {
    LOCKS.remove(fd);
    OURS.remove(fd);
}

/// In a child made by `fork`: close this process's copies of the roots'
/// lock files, so that the locks go with the parent. Done by the crate's own
/// `atfork` handler after `fork`; a child made by the raw system call (no
/// handlers run) may call it before anything else. Safe to call more than
/// once. Calling it in the process that holds the locks would let them go.
pub fn close_locks_in_child() {
    LOCKS.each_from(0, |fd| {
        if LOCKS.remove(fd) && OURS.remove(fd) {
            close_raw(fd);
        }
    });
}

/// Before a `fork`: the gate is shut, so the child's map holds each
/// descriptor whole (none half made, no lock file unnamed as one).
extern "C" fn before_fork() {
    let g = shut();
    FORK_HOLD.with(|h| *h.borrow_mut() = Some(g));
}

extern "C" fn after_fork_parent() {
    FORK_HOLD.with(|h| h.borrow_mut().take());
}

extern "C" fn after_fork_child() {
    close_locks_in_child();
    FORK_HOLD.with(|h| h.borrow_mut().take());
}

/// Register the `fork` handlers once, at the first use of the gate.
fn register_atfork() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: registers plain `extern "C"` functions with no arguments.
        unsafe {
            libc::pthread_atfork(
                Some(before_fork),
                Some(after_fork_parent),
                Some(after_fork_child),
            )
        };
    });
}

/// A small file of `/proc` or `/sys` as text, read with the gate passed:
/// its descriptor is not one a program's wholesale close takes meanwhile.
pub(crate) fn read_text(p: impl AsRef<std::path::Path>) -> Option<String> {
    let _g = pass();
    std::fs::read_to_string(p).ok()
}

/// The names in directory `dir` (not `.` and `..`), read through a
/// descriptor the crate keeps: the gate is passed to open it and to close
/// it, not across the reads, so that a program's wholesale close
/// ([`hold`]) does not wait for a slow directory's listing.
pub(crate) fn dir_names(dir: &std::path::Path) -> std::io::Result<Vec<std::ffi::OsString>> {
    use std::os::unix::ffi::{OsStrExt, OsStringExt};
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes())?;
    let fd = Fd::make(&mut || {
        // SAFETY: `c` is a NUL-terminated path that outlives the call.
        unsafe {
            libc::open(
                c.as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        }
    })?;
    let mut buf = vec![0u8; 32 << 10];
    let mut names = Vec::new();
    loop {
        #[cfg(test)]
        if let Some(f) = BETWEEN_DIR_READS.take(dir.to_path_buf()) {
            f();
        }
        // SAFETY: the kernel writes at most `buf.len()` bytes into `buf`.
        let n = unsafe {
            libc::syscall(
                libc::SYS_getdents64,
                fd.as_raw_fd(),
                buf.as_mut_ptr(),
                buf.len(),
            )
        };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Ok(names);
        }
        // Records of `struct linux_dirent64`: inode (8 bytes), offset (8),
        // record length (2), type (1), the name ending in a NUL.
        let got = &buf[..n as usize];
        let mut at = 0;
        while at < got.len() {
            let rec = got
                .get(at + 16..at + 18)
                .map(|b| u16::from_ne_bytes([b[0], b[1]]) as usize)
                .filter(|&len| len > 19 && at + len <= got.len())
                .ok_or_else(|| {
                    std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        format!("{}: a malformed directory record", dir.display()),
                    )
                })?;
            let name = &got[at + 19..at + rec];
            let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
            if name != b"." && name != b".." {
                names.push(std::ffi::OsString::from_vec(name.to_vec()));
            }
            at += rec;
        }
    }
}

/// In unit tests: run once between two reads of the listing of this
/// directory by [`dir_names`].
#[cfg(test)]
pub(crate) static BETWEEN_DIR_READS: crate::util::hook::TestHook<
    std::path::PathBuf,
    Box<dyn FnOnce() + Send>,
> = crate::util::hook::TestHook::new();

/// Close by the system call itself: not through a `close` another library
/// stands in with (which may refuse the crate's own numbers).
fn close_raw(fd: RawFd) {
    // SAFETY: closes a descriptor the crate owns and no longer uses.
    unsafe { libc::syscall(libc::SYS_close, fd) };
}

/// The lowest number a kept descriptor is moved to (0: none is moved): half
/// the process's limit of open descriptors, at most 1024. Programs count on
/// low numbers being theirs: a shell's `exec 3< file` takes number 3, a
/// program whose standard output is closed writes to number 1 and expects
/// `EBADF`; a backing file or a lock file there would take those reads and
/// writes. The kernel gives the lowest free number, so each kept
/// descriptor is moved up (close-on-exec, as every one is made).
fn floor() -> RawFd {
    static FLOOR: AtomicI32 = AtomicI32::new(-1);
    let f = FLOOR.load(Ordering::Relaxed);
    if f >= 0 {
        return f;
    }
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid rlimit for the kernel to fill.
    let soft = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 {
        lim.rlim_cur
    } else {
        0
    };
    let half = (soft / 2).min(1024) as RawFd;
    // (A limit this small leaves no room above the program's numbers.)
    let f = if half < 16 { 0 } else { half };
    FLOOR.store(f, Ordering::Relaxed);
    f
}

/// `fd`, moved to the lowest free number from [`floor`] up if it is below
/// it (the low number closed); itself if it is not, or if no number there
/// is free.
fn raised(fd: RawFd) -> RawFd {
    match high_copy(fd) {
        Some(high) => {
            close_raw(fd);
            high
        }
        None => fd,
    }
}

/// A copy of `fd` (close-on-exec) at the lowest free number from [`floor`]
/// up, if `fd` is below it and a number there is free: for a descriptor
/// that its maker must close itself (a ring's).
pub(crate) fn high_copy(fd: RawFd) -> Option<RawFd> {
    let floor = floor();
    if fd >= floor {
        return None;
    }
    // SAFETY: the raw system call (not a stand-in for the C library's
    // `fcntl`) duplicates a descriptor the crate just made.
    let high = unsafe { libc::syscall(libc::SYS_fcntl, fd, libc::F_DUPFD_CLOEXEC, floor) };
    (high >= 0).then_some(high as RawFd)
}

/// Close a copy [`high_copy`] made and that is not used.
pub(crate) fn close_copy(fd: RawFd) {
    close_raw(fd);
}

/// A descriptor the crate keeps: named in the map while it lives, closed
/// when dropped.
#[derive(Debug)]
pub(crate) struct Fd(RawFd);

impl Fd {
    /// Make one with `open`, which returns a fresh descriptor or -1 with
    /// `errno` set.
    pub(crate) fn make(open: &mut dyn FnMut() -> RawFd) -> std::io::Result<Fd> {
        let _g = pass();
        let fd = open();
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let fd = raised(fd);
        OURS.insert(fd);
        Ok(Fd(fd))
    }

    /// As [`Fd::make`], a lock file's: a child made by `fork` closes its
    /// copy at once.
    pub(crate) fn make_lock(open: &mut dyn FnMut() -> RawFd) -> std::io::Result<Fd> {
        let _g = pass();
        let fd = open();
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let fd = raised(fd);
        LOCKS.insert(fd);
        OURS.insert(fd);
        Ok(Fd(fd))
    }
}

impl Drop for Fd {
    fn drop(&mut self) {
        let _g = pass();
        LOCKS.remove(self.0);
        // Not named: past the map (close it), or already closed in a child
        // made by `fork` (the number may be another file's now).
        let named = (self.0 as usize) < LIMIT;
        if OURS.remove(self.0) || !named {
            close_raw(self.0);
        }
    }
}

impl AsRawFd for Fd {
    fn as_raw_fd(&self) -> RawFd {
        self.0
    }
}

impl AsFd for Fd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        // SAFETY: the descriptor stays open while `self` lives.
        unsafe { BorrowedFd::borrow_raw(self.0) }
    }
}

/// Name a descriptor another owner made and will close (a ring's, which the
/// ring closes when dropped); [`forget`] it, under a [`pass`], before that.
pub(crate) fn name(fd: RawFd) {
    OURS.insert(fd);
}

/// Stop naming a descriptor of [`name`]; whether its owner is to close it
/// (it was named, or past the map), not when a child disowned it.
pub(crate) fn forget(fd: RawFd) -> bool {
    OURS.remove(fd) || fd as usize >= LIMIT
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eventfd() -> Fd {
        // SAFETY: eventfd has no memory-safety preconditions.
        Fd::make(&mut || unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) }).unwrap()
    }

    /// A listing passes the gate to open and close its descriptor only: a
    /// wholesale close (`hold`) taken between its reads does not wait for it.
    #[test]
    fn a_listing_does_not_hold_the_gate_between_its_reads() {
        let dir = std::env::temp_dir().join(format!("setcache-fds-list-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        for n in ["a", "b", "c"] {
            std::fs::write(dir.join(n), b"").unwrap();
        }
        let (held_tx, held_rx) = std::sync::mpsc::channel();
        BETWEEN_DIR_READS.arm(
            dir.clone(),
            Box::new(move || {
                // Another thread's wholesale close, while this one lists.
                std::thread::spawn(move || {
                    let _h = hold();
                    let _ = held_tx.send(());
                });
                let got = held_rx.recv_timeout(std::time::Duration::from_secs(30));
                assert!(got.is_ok(), "a hold waited for the listing");
            }),
        );
        let mut names = dir_names(&dir).unwrap();
        names.sort();
        assert_eq!(names, ["a", "b", "c"]);
        assert!(
            dir_names(&dir.join("a")).is_err(),
            "a file listed as a directory"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_kept_descriptor_is_named_until_dropped() {
        let f = eventfd();
        let n = f.as_raw_fd();
        assert!(is_ours(n));
        {
            let _h = hold();
            assert!(ours_from(n).contains(&n));
            assert!(!ours_from(n + 1).contains(&n));
        }
        drop(f);
        assert!(!is_ours(n), "descriptor {n} still named once closed");
        // SAFETY: fcntl on a number, which may be closed.
        assert_eq!(unsafe { libc::fcntl(n, libc::F_GETFD) }, -1);
    }

    #[test]
    fn a_child_made_by_fork_closes_its_copies_of_lock_files_only() {
        let path = std::env::temp_dir().join(format!("setcache-fds-{}", std::process::id()));
        let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
        let open = || {
            // SAFETY: a valid path; the mode is used with O_CREAT.
            Fd::make(&mut || unsafe { libc::open(c.as_ptr(), libc::O_RDWR | libc::O_CREAT, 0o600) })
                .unwrap()
        };
        let plain = open();
        // SAFETY: as above.
        let lock = Fd::make_lock(&mut || unsafe { libc::open(c.as_ptr(), libc::O_RDWR) }).unwrap();
        // SAFETY: fork; the child makes only system calls, then `_exit`.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // SAFETY: plain system calls in the child.
            unsafe {
                let closed = libc::fcntl(lock.as_raw_fd(), libc::F_GETFD) == -1;
                let kept = libc::fcntl(plain.as_raw_fd(), libc::F_GETFD) != -1;
                libc::_exit(if closed && kept { 0 } else { 1 });
            }
        }
        assert!(pid > 0, "fork: {}", std::io::Error::last_os_error());
        let mut status = 0;
        // SAFETY: waits for the child just made.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "the child found its copy of the lock file open, or the other closed (status {status})"
        );
        // The parent's are untouched.
        assert!(is_ours(lock.as_raw_fd()) && is_ours(plain.as_raw_fd()));
        let _ = std::fs::remove_file(&path);
    }

    /// A thread that passes the gate and is interrupted by a signal handler
    /// that shuts it (a `dup2` in a crash handler) does not wait for itself.
    #[test]
    fn a_thread_passing_the_gate_shuts_it_without_waiting() {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _p = pass();
            let _h = hold();
            let _again = pass();
            tx.send(()).unwrap();
        });
        rx.recv_timeout(std::time::Duration::from_secs(20))
            .expect("a thread passing the gate waited for ever to shut it");
        // And the gate works for others once it is open again.
        let _h = hold();
    }

    #[test]
    fn numbers_far_apart_are_named_and_listed_in_order() {
        let b = Bits::new();
        for fd in [3, 64, 65535, 65536, 200_000, 5] {
            b.insert(fd);
        }
        assert!(b.contains(200_000) && !b.contains(200_001) && !b.contains(-1));
        let mut v = Vec::new();
        b.each_from(5, |fd| v.push(fd));
        assert_eq!(v, [5, 64, 65535, 65536, 200_000]);
        assert!(b.remove(64) && !b.remove(64));
        b.insert(LIMIT as RawFd);
        assert!(!b.contains(LIMIT as RawFd));
    }
}
