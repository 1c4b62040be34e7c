//! Locks on files of the store: `flock` (by open file description, as Linux
//! keeps them), and POSIX record locks (`fcntl`'s and `lockf`'s), which one
//! process never finds in its own way.
//!
//! The store belongs to one process (its lock file refuses a second), so no
//! other process can hold a lock on a file of it. Record locks are the
//! process's own and never conflict with each other: every one is granted
//! once the descriptor's access mode allows it. `flock` locks belong to
//! open file descriptions, and two descriptions of one file conflict even in
//! one process: each file's node keeps them, and a description's lock goes
//! with its last descriptor.

#![allow(clippy::missing_safety_doc)]
#![allow(unreachable_pub)]

use std::ffi::c_int;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use crate::real;
use crate::set_errno;
use crate::state::{self, Desc};

/// The `flock` locks of one file: by description (its address while it
/// lives).
#[derive(Debug, Default)]
pub(crate) struct Flocks {
    held: Mutex<Held>,
    /// Moved on at every lock let go: a waiter sleeps on it as on a futex,
    /// so that a signal's handler interrupts the wait (`EINTR`), as it
    /// interrupts the kernel's `flock`.
    freed: AtomicU32,
}

#[derive(Debug, Default)]
struct Held {
    exclusive: Option<usize>,
    shared: Vec<usize>,
}

impl Held {
    /// Drops description `me`'s lock, if it has one; true if it had.
    fn drop_of(&mut self, me: usize) -> bool {
        let before = self.shared.len();
        self.shared.retain(|&d| d != me);
        let had = self.exclusive == Some(me) || self.shared.len() != before;
        if self.exclusive == Some(me) {
            self.exclusive = None;
        }
        had
    }

    /// Whether description `me` may take the lock asked for.
    fn free_for(&self, me: usize, exclusive: bool) -> bool {
        match self.exclusive {
            Some(d) if d != me => false,
            _ => !exclusive || self.shared.iter().all(|&d| d == me),
        }
    }
}

impl Flocks {
    /// Lets description `me` go of its lock (its last descriptor closed).
    pub(crate) fn release(&self, me: usize) {
        let mut h = self.held.lock().unwrap_or_else(|p| p.into_inner());
        if h.drop_of(me) {
            self.wake();
        }
    }

    /// Tells the waiters that a lock went (called with `held` locked).
    fn wake(&self) {
        self.freed.fetch_add(1, Ordering::Release);
        // SAFETY: a futex wake on a live word of this struct.
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                self.freed.as_ptr(),
                libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
                i32::MAX,
            )
        };
    }

    /// Sleeps until a lock goes after `seen` was read (under `held`), or a
    /// signal's handler runs (`EINTR`; a handler with `SA_RESTART` has the
    /// kernel wait again, as for `flock`).
    fn wait(&self, seen: u32) -> Result<(), i32> {
        // SAFETY: a futex wait on a live word of this struct, while it still holds `seen`.
        let r = unsafe {
            libc::syscall(
                libc::SYS_futex,
                self.freed.as_ptr(),
                libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
                seen,
                std::ptr::null::<libc::timespec>(),
            )
        };
        let errno = std::io::Error::last_os_error().raw_os_error();
        match (r, errno) {
            (-1, Some(libc::EINTR)) => Err(libc::EINTR),
            _ => Ok(()),
        }
    }

    /// `flock(2)` for description `me`: `op` is one of `LOCK_SH`, `LOCK_EX`
    /// and `LOCK_UN`, with `LOCK_NB` or not.
    fn apply(&self, me: usize, op: c_int) -> Result<(), i32> {
        let nb = op & libc::LOCK_NB != 0;
        let exclusive = match op & !libc::LOCK_NB {
            libc::LOCK_SH => false,
            libc::LOCK_EX => true,
            libc::LOCK_UN => {
                self.release(me);
                return Ok(());
            }
            _ => return Err(libc::EINVAL),
        };
        let mut h = self.held.lock().unwrap_or_else(|p| p.into_inner());
        let holds = if exclusive {
            h.exclusive == Some(me)
        } else {
            h.shared.contains(&me)
        };
        if holds {
            return Ok(());
        }
        // A conversion lets the old lock go first, as Linux does: a waiter
        // may come in between, and a refused conversion leaves none.
        if h.drop_of(me) {
            self.wake();
        }
        while !h.free_for(me, exclusive) {
            if nb {
                return Err(libc::EWOULDBLOCK);
            }
            let seen = self.freed.load(Ordering::Acquire);
            drop(h);
            self.wait(seen)?;
            h = self.held.lock().unwrap_or_else(|p| p.into_inner());
        }
        if exclusive {
            h.exclusive = Some(me);
        } else {
            h.shared.push(me);
        }
        Ok(())
    }
}

/// The address that names description `d` among a file's `flock` holders.
pub(crate) fn holder(d: &Desc) -> usize {
    d as *const Desc as usize
}

fn ret(r: Result<c_int, i32>) -> c_int {
    r.unwrap_or_else(|e| {
        set_errno(e);
        -1
    })
}

/// The kernel's check of a record lock's range: `start` from `whence` (the
/// start of the file, the position, the end) and `len` bytes on (0: to the
/// end and beyond; negative: before `start`). A range that begins before
/// the file fails `EINVAL`, one that ends past the largest offset
/// `EOVERFLOW`.
pub(crate) fn record_lock_range(d: &Desc, whence: c_int, start: i64, len: i64) -> Result<(), i32> {
    let base = match whence {
        libc::SEEK_SET => 0,
        libc::SEEK_CUR => {
            i64::try_from(*d.pos.lock().unwrap_or_else(|p| p.into_inner())).unwrap_or(i64::MAX)
        }
        libc::SEEK_END => i64::try_from(d.node.len()).unwrap_or(i64::MAX),
        _ => return Err(libc::EINVAL),
    };
    let from = base.checked_add(start).ok_or(libc::EOVERFLOW)?;
    if from < 0 {
        return Err(libc::EINVAL);
    }
    if len > 0 && from.checked_add(len - 1).is_none() {
        return Err(libc::EOVERFLOW);
    }
    if len < 0 && from + len < 0 {
        return Err(libc::EINVAL);
    }
    Ok(())
}

/// Whether `d`'s access mode lets it take a record lock of type `kind`
/// (`F_RDLCK` needs reading, `F_WRLCK` writing; `F_UNLCK` anything).
pub(crate) fn record_lock_allowed(d: &Desc, kind: c_int) -> Result<(), i32> {
    match kind {
        libc::F_RDLCK if !d.readable => Err(libc::EBADF),
        libc::F_WRLCK if !d.writable => Err(libc::EBADF),
        libc::F_RDLCK | libc::F_WRLCK | libc::F_UNLCK => Ok(()),
        _ => Err(libc::EINVAL),
    }
}

/// `flock`'s old mandatory-lock bit (`linux/fcntl.h`).
const LOCK_MAND: c_int = 32;

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn flock(fd: c_int, op: c_int) -> c_int {
    match state::desc(fd) {
        // SAFETY: passed through with the caller's arguments.
        None => unsafe { real::flock()(fd, op) },
        // The kernel ignores a request with `LOCK_MAND` (unsupported since
        // Linux 5.15), succeeding before it looks at anything else.
        Some(_) if op & LOCK_MAND != 0 => 0,
        Some(d) if d.path_only() => ret(Err(libc::EBADF)),
        Some(d) => ret(d.node.flocks.apply(holder(&d), op).map(|()| 0)),
    }
}

/// `lockf(3)`: a record lock from the position on, `len` bytes long (to the
/// end of the file and beyond for 0, before the position when negative).
fn lockf_desc(d: &Arc<Desc>, cmd: c_int, len: i64) -> Result<c_int, i32> {
    if !matches!(
        cmd,
        libc::F_ULOCK | libc::F_LOCK | libc::F_TLOCK | libc::F_TEST
    ) {
        return Err(libc::EINVAL);
    }
    let pos = *d.pos.lock().unwrap_or_else(|p| p.into_inner());
    if len < 0 && pos.checked_sub(len.unsigned_abs()).is_none() {
        return Err(libc::EINVAL);
    }
    match cmd {
        libc::F_LOCK | libc::F_TLOCK => record_lock_allowed(d, libc::F_WRLCK)?,
        // Tested as a read lock, as the C library does; nothing but this
        // process can hold one.
        _ => {}
    }
    Ok(0)
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn lockf64(fd: c_int, cmd: c_int, len: libc::off64_t) -> c_int {
    match state::desc(fd) {
        // SAFETY: passed through with the caller's arguments.
        None => unsafe { real::lockf64()(fd, cmd, len) },
        Some(d) if d.path_only() => ret(Err(libc::EBADF)),
        Some(d) => ret(lockf_desc(&d, cmd, len)),
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn lockf(fd: c_int, cmd: c_int, len: libc::off_t) -> c_int {
    // SAFETY: the same function on 64-bit Linux, where the offset types agree.
    unsafe { lockf64(fd, cmd, len) }
}
