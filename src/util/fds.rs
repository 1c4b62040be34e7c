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

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
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

/// Pass the gate: no [`hold`] is taken while the guard lives. Held only
/// across the system calls that make or close a descriptor and the map's
/// update, never while waiting for anything else (a waiting [`hold`] stops
/// new passes, so a pass held across a wait could stall both).
pub(crate) fn pass() -> RwLockReadGuard<'static, ()> {
    GATE.read().unwrap_or_else(|p| p.into_inner())
}

/// Shut the gate until the guard drops: meanwhile the crate neither opens
/// nor closes a descriptor it keeps, and [`is_ours`] stays true of each
/// number. Never take it in a thread that is inside a call to the crate, and
/// never in a child made by `fork` (the gate may have been passed by a thread
/// the child does not have): there, with no other threads of the crate,
/// [`is_ours`] alone is true.
pub fn hold() -> Hold {
    Hold {
        _g: GATE.write().unwrap_or_else(|p| p.into_inner()),
    }
}

/// The guard of [`hold`].
#[must_use = "the gate opens again when the guard drops"]
pub struct Hold {
    _g: RwLockWriteGuard<'static, ()>,
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

extern "C" fn after_fork_child() {
    close_locks_in_child();
}

/// Register [`after_fork_child`] once, before the first lock file is kept.
fn register_atfork() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: registers a plain `extern "C"` function with no arguments.
        unsafe { libc::pthread_atfork(None, None, Some(after_fork_child)) };
    });
}

/// Close by the system call itself: not through a `close` another library
/// stands in with (which may refuse the crate's own numbers).
fn close_raw(fd: RawFd) {
    // SAFETY: closes a descriptor the crate owns and no longer uses.
    unsafe { libc::syscall(libc::SYS_close, fd) };
}

/// A descriptor the crate keeps: named in the map while it lives, closed
/// when dropped.
#[derive(Debug)]
pub(crate) struct Fd(RawFd);

impl Fd {
    /// Make one with `open`, which returns a fresh descriptor or -1 with
    /// `errno` set.
    pub(crate) fn make(open: impl FnOnce() -> RawFd) -> std::io::Result<Fd> {
        let _g = pass();
        let fd = open();
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        OURS.insert(fd);
        Ok(Fd(fd))
    }

    /// Name this descriptor a lock file's: a child made by `fork` closes its
    /// copy at once.
    pub(crate) fn mark_lock(&self) {
        register_atfork();
        LOCKS.insert(self.0);
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

/// Stop naming a descriptor of [`name`].
pub(crate) fn forget(fd: RawFd) {
    OURS.remove(fd);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eventfd() -> Fd {
        // SAFETY: eventfd has no memory-safety preconditions.
        Fd::make(|| unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) }).unwrap()
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
            Fd::make(|| unsafe { libc::open(c.as_ptr(), libc::O_RDWR | libc::O_CREAT, 0o600) })
                .unwrap()
        };
        let (lock, plain) = (open(), open());
        lock.mark_lock();
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
