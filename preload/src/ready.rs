//! The readiness calls (`poll`, `ppoll`, `select`, `pselect`, `epoll_ctl`)
//! given descriptors of store files: the kernel would see their
//! placeholders (`O_PATH` descriptors: `POLLNVAL`, `EBADF`), where a regular
//! file is always ready for reading and writing and `epoll` refuses it
//! (`EPERM`). The other descriptors of a call go to the kernel, at once (no
//! wait) when a store file is ready.

#![allow(clippy::missing_safety_doc)]
#![allow(unreachable_pub)]

use std::ffi::c_int;

use libc::{fd_set, nfds_t, pollfd, sigset_t, timespec, timeval};

use crate::{real, set_errno, state};

/// What the kernel's poll of a regular file answers.
const FILE_READY: i16 = libc::POLLIN | libc::POLLOUT | libc::POLLRDNORM | libc::POLLWRNORM;

/// No wait: the timeout a call gets when a store file is ready.
static NO_WAIT: timespec = timespec {
    tv_sec: 0,
    tv_nsec: 0,
};

/// `timeout`, or no wait when a store file is ready (`now`).
fn or_now(now: bool, timeout: *const timespec) -> *const timespec {
    if now { &NO_WAIT } else { timeout }
}

fn ours(fd: c_int) -> bool {
    fd >= 0 && state::desc(fd).is_some()
}

/// `poll`'s answer for `fds`: store files answered here, the rest by
/// `wait(copy, now)`, the kernel's call on a copy in which the store files'
/// entries are skipped (`fd` -1), told to return at once (`now`) when a
/// store file is ready.
///
/// # Safety
/// `fds` holds `n` entries, as `poll` requires.
unsafe fn poll_with(
    fds: *mut pollfd,
    n: nfds_t,
    wait: impl FnOnce(*mut pollfd, bool) -> c_int,
) -> c_int {
    if fds.is_null() || n == 0 || n > libc::c_int::MAX as nfds_t {
        return wait(fds, false);
    }
    // SAFETY: the caller's `n` entries.
    let v = unsafe { std::slice::from_raw_parts_mut(fds, n as usize) };
    if !v.iter().any(|p| ours(p.fd)) {
        return wait(fds, false);
    }
    let mut copy = v.to_vec();
    let mut mine = vec![None; v.len()];
    let mut ready = false;
    for (p, m) in copy.iter_mut().zip(&mut mine) {
        if ours(p.fd) {
            let r = p.events & FILE_READY;
            ready |= r != 0;
            *m = Some(r);
            p.fd = -1;
        }
    }
    let rc = wait(copy.as_mut_ptr(), ready);
    if rc < 0 {
        return rc;
    }
    let mut count = 0;
    for ((p, c), m) in v.iter_mut().zip(&copy).zip(&mine) {
        p.revents = m.unwrap_or(c.revents);
        count += (p.revents != 0) as c_int;
    }
    count
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn poll(fds: *mut pollfd, n: nfds_t, timeout: c_int) -> c_int {
    // SAFETY: the caller's entries; passed through with its arguments.
    unsafe {
        poll_with(fds, n, |p, now| {
            real::poll()(p, n, if now { 0 } else { timeout })
        })
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn __poll_chk(
    fds: *mut pollfd,
    n: nfds_t,
    timeout: c_int,
    fdslen: libc::size_t,
) -> c_int {
    if (n as u128) * (std::mem::size_of::<pollfd>() as u128) > fdslen as u128 {
        crate::fatal("buffer overflow detected in poll");
    }
    // SAFETY: the caller's entries, checked as the fortified function does.
    unsafe { poll(fds, n, timeout) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn ppoll(
    fds: *mut pollfd,
    n: nfds_t,
    timeout: *const timespec,
    mask: *const sigset_t,
) -> c_int {
    // SAFETY: the caller's entries; passed through with its arguments.
    unsafe {
        poll_with(fds, n, |p, now| {
            real::ppoll()(p, n, or_now(now, timeout), mask)
        })
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn __ppoll_chk(
    fds: *mut pollfd,
    n: nfds_t,
    timeout: *const timespec,
    mask: *const sigset_t,
    fdslen: libc::size_t,
) -> c_int {
    if (n as u128) * (std::mem::size_of::<pollfd>() as u128) > fdslen as u128 {
        crate::fatal("buffer overflow detected in ppoll");
    }
    // SAFETY: the caller's entries, checked as the fortified function does.
    unsafe { ppoll(fds, n, timeout, mask) }
}

/// `select`'s answer: the store files among the first `n` descriptors of
/// the sets answered here (ready to read and to write, no exception), the
/// rest by `wait`, the kernel's call on copies of the sets without them,
/// told to return at once (`now`) when a store file is ready. Sets past
/// `FD_SETSIZE` go to the kernel as they are.
///
/// # Safety
/// Each non-null set is an `fd_set` of the caller's.
unsafe fn select_with(
    n: c_int,
    sets: [*mut fd_set; 3],
    wait: impl FnOnce([*mut fd_set; 3], bool) -> c_int,
) -> c_int {
    if n <= 0 || n > libc::FD_SETSIZE as c_int {
        return wait(sets, false);
    }
    // SAFETY: each non-null set is the caller's `fd_set`.
    let is_set = |s: *mut fd_set, fd| !s.is_null() && unsafe { libc::FD_ISSET(fd, s) };
    let mine: Vec<c_int> = (0..n)
        .filter(|&fd| sets.iter().any(|&s| is_set(s, fd)) && ours(fd))
        .collect();
    if mine.is_empty() {
        return wait(sets, false);
    }
    // SAFETY: copies of the caller's sets (an all-zero set is a valid one).
    let mut copies: [fd_set; 3] = unsafe { std::mem::zeroed() };
    for (c, &s) in copies.iter_mut().zip(&sets) {
        if !s.is_null() {
            // SAFETY: the caller's set, read whole.
            *c = unsafe { *s };
        }
    }
    let mut ready = 0;
    for &fd in &mine {
        for (k, c) in copies.iter_mut().enumerate() {
            if is_set(sets[k], fd) {
                // SAFETY: a set of ours and a descriptor below FD_SETSIZE.
                unsafe { libc::FD_CLR(fd, c) };
                ready += (k < 2) as c_int;
            }
        }
    }
    let ptrs = [0, 1, 2].map(|k| {
        if sets[k].is_null() {
            std::ptr::null_mut()
        } else {
            &mut copies[k] as *mut fd_set
        }
    });
    let rc = wait(ptrs, ready > 0);
    if rc < 0 {
        return rc;
    }
    for &fd in &mine {
        for k in 0..2 {
            if is_set(sets[k], fd) {
                // SAFETY: as above.
                unsafe { libc::FD_SET(fd, &mut copies[k]) };
            }
        }
    }
    for (c, &s) in copies.iter().zip(&sets) {
        if !s.is_null() {
            // SAFETY: the caller's set, written whole.
            unsafe { *s = *c };
        }
    }
    rc + ready
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn select(
    n: c_int,
    r: *mut fd_set,
    w: *mut fd_set,
    e: *mut fd_set,
    timeout: *mut timeval,
) -> c_int {
    let mut zero = timeval {
        tv_sec: 0,
        tv_usec: 0,
    };
    // SAFETY: the caller's sets; passed through with its arguments.
    unsafe {
        select_with(n, [r, w, e], |[r, w, e], now| {
            real::select()(n, r, w, e, if now { &raw mut zero } else { timeout })
        })
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn pselect(
    n: c_int,
    r: *mut fd_set,
    w: *mut fd_set,
    e: *mut fd_set,
    timeout: *const timespec,
    mask: *const sigset_t,
) -> c_int {
    // SAFETY: the caller's sets; passed through with its arguments.
    unsafe {
        select_with(n, [r, w, e], |[r, w, e], now| {
            real::pselect()(n, r, w, e, or_now(now, timeout), mask)
        })
    }
}

/// `epoll` takes no regular file: `EPERM` for a store file, whatever the
/// operation, as the kernel answers for one.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn epoll_ctl(
    epfd: c_int,
    op: c_int,
    fd: c_int,
    event: *mut libc::epoll_event,
) -> c_int {
    if !ours(fd) {
        // SAFETY: passed through with the caller's arguments.
        return unsafe { real::epoll_ctl()(epfd, op, fd, event) };
    }
    let _ = (epfd, op, event);
    set_errno(libc::EPERM);
    -1
}
