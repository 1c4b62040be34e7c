//! `fopen` of a file of the store: stdio opens files inside the C library,
//! out of this library's reach, so the stream is made with `fopencookie`
//! over a placeholder descriptor and this library's `read`, `write`,
//! `lseek64` and `close`. `fileno` of such a stream is its placeholder, so
//! `fsync(fileno(f))` syncs the file.

#![allow(clippy::missing_safety_doc)]
#![allow(unreachable_pub)]

use std::ffi::{CStr, c_char, c_int, c_void};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use libc::{off64_t, size_t, ssize_t};

use crate::path::{Place, classify_as};
use crate::{calls, real, set_errno};

type ReadFn = unsafe extern "C" fn(*mut c_void, *mut c_char, size_t) -> ssize_t;
type WriteFn = unsafe extern "C" fn(*mut c_void, *const c_char, size_t) -> ssize_t;
type SeekFn = unsafe extern "C" fn(*mut c_void, *mut off64_t, c_int) -> c_int;
type CloseFn = unsafe extern "C" fn(*mut c_void) -> c_int;

/// glibc's `cookie_io_functions_t`.
#[repr(C)]
struct CookieIo {
    read: Option<ReadFn>,
    write: Option<WriteFn>,
    seek: Option<SeekFn>,
    close: Option<CloseFn>,
}

unsafe extern "C" {
    fn fopencookie(cookie: *mut c_void, mode: *const c_char, io: CookieIo) -> *mut libc::FILE;
}

fn fd_of(cookie: *mut c_void) -> c_int {
    cookie as usize as c_int
}

unsafe extern "C" fn cookie_read(cookie: *mut c_void, buf: *mut c_char, n: size_t) -> ssize_t {
    // SAFETY: stdio passes its buffer of `n` bytes.
    unsafe { calls::read(fd_of(cookie), buf.cast(), n) }
}

unsafe extern "C" fn cookie_write(cookie: *mut c_void, buf: *const c_char, n: size_t) -> ssize_t {
    // SAFETY: stdio passes its buffer of `n` bytes.
    let r = unsafe { calls::write(fd_of(cookie), buf.cast(), n) };
    // A failed write is 0 bytes written (errno set): glibc takes the count
    // as unsigned, and a -1 would make it copy past the caller's buffer.
    r.max(0)
}

unsafe extern "C" fn cookie_seek(cookie: *mut c_void, pos: *mut off64_t, whence: c_int) -> c_int {
    // SAFETY: stdio passes the position to move by and to update.
    let r = unsafe { calls::lseek64(fd_of(cookie), *pos, whence) };
    if r < 0 {
        return -1;
    }
    // SAFETY: as above.
    unsafe { *pos = r };
    0
}

/// Streams made here and their placeholders, for `fileno`.
static STREAMS: Mutex<Vec<(usize, c_int)>> = Mutex::new(Vec::new());
/// `STREAMS`' length: none, and `fileno` costs one load.
static STREAM_COUNT: AtomicUsize = AtomicUsize::new(0);

fn forget_stream(fd: c_int) {
    // In a child made by `fork` while another thread held the list: left.
    let Some(mut s) = crate::state::lock_unless_held_at_fork(&STREAMS) else {
        return;
    };
    s.retain(|&(_, d)| d != fd);
    STREAM_COUNT.store(s.len(), Ordering::Relaxed);
}

unsafe extern "C" fn cookie_close(cookie: *mut c_void) -> c_int {
    forget_stream(fd_of(cookie));
    // SAFETY: the stream's own placeholder.
    unsafe { calls::close(fd_of(cookie)) }
}

/// The placeholder of a stream made here.
fn placeholder_of(f: *mut libc::FILE) -> Option<c_int> {
    if STREAM_COUNT.load(Ordering::Relaxed) == 0 {
        return None;
    }
    // In a child made by `fork` while another thread held the list, the
    // stream is not known (the store is the parent's: its calls fail there).
    let s = crate::state::lock_unless_held_at_fork(&STREAMS)?;
    s.iter().find(|&&(p, _)| p == f as usize).map(|&(_, fd)| fd)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn fileno(f: *mut libc::FILE) -> c_int {
    match placeholder_of(f) {
        Some(fd) => fd,
        // SAFETY: passed through with the caller's arguments.
        None => unsafe { real::fileno()(f) },
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn fileno_unlocked(f: *mut libc::FILE) -> c_int {
    match placeholder_of(f) {
        Some(fd) => fd,
        // SAFETY: passed through with the caller's arguments.
        None => unsafe { real::fileno_unlocked()(f) },
    }
}

/// `open` flags of an `fopen` mode; `None` for a mode `fopen` refuses.
fn flags_of(mode: &[u8]) -> Option<c_int> {
    let plus = mode.contains(&b'+');
    let mut f = match (mode.first()?, plus) {
        (b'r', false) => libc::O_RDONLY,
        (b'r', true) => libc::O_RDWR,
        (b'w', false) => libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC,
        (b'w', true) => libc::O_RDWR | libc::O_CREAT | libc::O_TRUNC,
        (b'a', false) => libc::O_WRONLY | libc::O_CREAT | libc::O_APPEND,
        (b'a', true) => libc::O_RDWR | libc::O_CREAT | libc::O_APPEND,
        _ => return None,
    };
    if mode.contains(&b'x') {
        f |= libc::O_EXCL;
    }
    if mode.contains(&b'e') {
        f |= libc::O_CLOEXEC;
    }
    Some(f)
}

fn open_stream(name: &str, mode: *const c_char) -> *mut libc::FILE {
    // SAFETY: fopen's mode is a C string.
    let m = unsafe { CStr::from_ptr(mode) }.to_bytes();
    let Some(flags) = flags_of(m) else {
        set_errno(libc::EINVAL);
        return std::ptr::null_mut();
    };
    match calls::open_inside(name, flags) {
        Ok(fd) => {
            at_end_for_appending(fd, m);
            stream_of(fd, flags, true)
        }
        Err(e) => {
            set_errno(e);
            std::ptr::null_mut()
        }
    }
}

/// A stream over placeholder `fd`; `fclose` closes `fd`. On failure `fd` is
/// closed if `own`, left open otherwise (`fdopen`'s caller keeps it).
fn stream_of(fd: c_int, flags: c_int, own: bool) -> *mut libc::FILE {
    // The mode `fopencookie` parses, from the flags the caller's parsed to:
    // its own parser finds a `+` only second or third (`"rbe+"` would make a
    // stream for reading only over a descriptor open for both).
    let mode = match (flags & libc::O_ACCMODE, flags & libc::O_APPEND != 0) {
        (libc::O_RDONLY, _) => c"r",
        (libc::O_WRONLY, false) => c"w",
        (libc::O_WRONLY, true) => c"a",
        (_, false) => c"r+",
        (_, true) => c"a+",
    }
    .as_ptr();
    let io = CookieIo {
        read: Some(cookie_read),
        write: Some(cookie_write),
        seek: Some(cookie_seek),
        close: Some(cookie_close),
    };
    // SAFETY: the cookie is the descriptor's number; the functions match glibc's types.
    let f = unsafe { fopencookie(fd as usize as *mut c_void, mode, io) };
    if f.is_null() {
        if own {
            // SAFETY: closes the placeholder just made.
            unsafe { calls::close(fd) };
        }
    } else {
        let mut s = STREAMS.lock().unwrap_or_else(|p| p.into_inner());
        s.push((f as usize, fd));
        STREAM_COUNT.store(s.len(), Ordering::Relaxed);
    }
    f
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn fopen(path: *const c_char, mode: *const c_char) -> *mut libc::FILE {
    // SAFETY: the same function on 64-bit Linux.
    unsafe { fopen64(path, mode) }
}

/// Whether `fopen` with `mode` follows a link its path ends in: not when it
/// creates exclusively (`w` or `a` with `x`: `O_CREAT | O_EXCL`, the
/// kernel's `EEXIST` for any link). The C library reads the mode's letters
/// up to a `,` (`,ccs=` follows).
fn follows_fopen(mode: *const c_char) -> bool {
    if mode.is_null() {
        return false;
    }
    // SAFETY: the caller passes a C string, as `fopen` requires (null checked).
    let m = unsafe { CStr::from_ptr(mode) }.to_bytes();
    let m = m.split(|&b| b == b',').next().unwrap_or_default();
    let creates = matches!(m.first(), Some(b'w' | b'a'));
    !(creates && m.contains(&b'x'))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn fopen64(path: *const c_char, mode: *const c_char) -> *mut libc::FILE {
    match classify_as(libc::AT_FDCWD, path, follows_fopen(mode)) {
        Place::Bad(e) => {
            set_errno(e);
            std::ptr::null_mut()
        }
        Place::Inside(name) => open_stream(&name, mode),
        // SAFETY: passed through with the caller's arguments.
        _ => unsafe { real::fopen64()(path, mode) },
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn fdopen(fd: c_int, mode: *const c_char) -> *mut libc::FILE {
    let Some(d) = crate::state::desc(fd) else {
        // SAFETY: passed through with the caller's arguments.
        return unsafe { real::fdopen()(fd, mode) };
    };
    // SAFETY: fdopen's mode is a C string.
    let Some(flags) = flags_of(unsafe { CStr::from_ptr(mode) }.to_bytes()) else {
        set_errno(libc::EINVAL);
        return std::ptr::null_mut();
    };
    // As the C library's: a mode the descriptor's access cannot serve is
    // refused, and "a" sets O_APPEND on the descriptor (the stream's writes
    // rely on it to go to the end).
    let (has, wants) = (
        d.status.load(Ordering::Relaxed) & libc::O_ACCMODE,
        flags & libc::O_ACCMODE,
    );
    if (has == libc::O_RDONLY && wants != libc::O_RDONLY)
        || (has == libc::O_WRONLY && wants != libc::O_WRONLY)
    {
        set_errno(libc::EINVAL);
        return std::ptr::null_mut();
    }
    if flags & libc::O_APPEND != 0
        && d.status.fetch_or(libc::O_APPEND, Ordering::Relaxed) & libc::O_APPEND == 0
    {
        // SAFETY: fdopen's mode is a C string.
        at_end_for_appending(fd, unsafe { CStr::from_ptr(mode) }.to_bytes());
    }
    stream_of(fd, flags, false)
}

/// As the C library's `fopen` (and `fdopen` when it adds `O_APPEND`): a
/// stream opened to append only (`"a"`, no `+`) starts at the file's end,
/// so that `ftell` before the first write gives the file's length.
fn at_end_for_appending(fd: c_int, mode: &[u8]) {
    if mode.first() == Some(&b'a') && !mode.contains(&b'+') {
        // SAFETY: a placeholder of ours; the position moves to the end.
        unsafe { calls::lseek64(fd, 0, libc::SEEK_END) };
    }
}

fn refuse_freopen() -> *mut libc::FILE {
    set_errno(crate::calls::unsupported(
        "freopen of a file in SETCACHE_DIR (the stream is reopened inside the C library)",
        libc::EOPNOTSUPP,
    ));
    std::ptr::null_mut()
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn freopen(
    path: *const c_char,
    mode: *const c_char,
    stream: *mut libc::FILE,
) -> *mut libc::FILE {
    // SAFETY: the same function on 64-bit Linux.
    unsafe { freopen64(path, mode, stream) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn freopen64(
    path: *const c_char,
    mode: *const c_char,
    stream: *mut libc::FILE,
) -> *mut libc::FILE {
    match classify_as(libc::AT_FDCWD, path, follows_fopen(mode)) {
        Place::Bad(e) => {
            set_errno(e);
            std::ptr::null_mut()
        }
        Place::Inside(_) => refuse_freopen(),
        // SAFETY: passed through with the caller's arguments.
        _ => unsafe { real::freopen64()(path, mode, stream) },
    }
}
