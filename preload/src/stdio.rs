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

/// Forget the streams `gone` picks (by stream and placeholder).
fn forget_streams(gone: impl Fn(usize, c_int) -> bool) {
    // In a child made by `fork` while another thread held the list: left.
    let Some(mut s) = crate::state::lock_unless_held_at_fork(&STREAMS) else {
        return;
    };
    s.retain(|&(p, d)| !gone(p, d));
    STREAM_COUNT.store(s.len(), Ordering::Relaxed);
}

/// Forget the stream at `f` (its placeholder may serve another stream).
fn forget_stream_at(f: *mut libc::FILE) {
    forget_streams(|p, _| p == f as usize);
}

fn forget_stream(fd: c_int) {
    forget_streams(|_, d| d == fd);
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
pub unsafe extern "C-unwind" fn fileno(f: *mut libc::FILE) -> c_int {
    match placeholder_of(f) {
        Some(fd) => fd,
        // SAFETY: passed through with the caller's arguments.
        None => unsafe { real::fileno()(f) },
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn fileno_unlocked(f: *mut libc::FILE) -> c_int {
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
pub unsafe extern "C-unwind" fn fopen(path: *const c_char, mode: *const c_char) -> *mut libc::FILE {
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
pub unsafe extern "C-unwind" fn fopen64(
    path: *const c_char,
    mode: *const c_char,
) -> *mut libc::FILE {
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
pub unsafe extern "C-unwind" fn fdopen(fd: c_int, mode: *const c_char) -> *mut libc::FILE {
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

// ---- standard streams over files of the store ----------------------------
//
// glibc's `stdin`, `stdout` and `stderr` read and write their descriptors
// inside the C library, out of this library's reach: once `dup2` or `dup3`
// makes 0, 1 or 2 a copy of a store file's placeholder (a shell's `echo x >
// file` in its own process, `2>&1` after it), the stream would meet the
// placeholder itself (`EBADF`). So the C library's stream pointer is turned,
// for that while, to a stream of this library's over the same number,
// unbuffered for output (nothing waits in it for an exit that syncs the
// store before the C library's last flush), and turned back before the
// number is closed or made a copy of a descriptor not of the store.

unsafe extern "C" {
    static mut stdin: *mut libc::FILE;
    static mut stdout: *mut libc::FILE;
    static mut stderr: *mut libc::FILE;
}

/// For 0, 1 and 2: the C library's own stream, and the stand-in in its
/// place, while the number is a copy of a store file's placeholder.
static STD_SWAPS: Mutex<[Option<(usize, usize)>; 3]> = Mutex::new([None; 3]);
/// Which of 0, 1 and 2 have a stand-in (a bit each): one load otherwise.
static STD_SWAPPED: AtomicUsize = AtomicUsize::new(0);

/// The C library's pointer to the standard stream of `n` (0, 1 or 2).
fn std_pointer(n: c_int) -> *mut *mut libc::FILE {
    match n {
        0 => &raw mut stdin,
        1 => &raw mut stdout,
        _ => &raw mut stderr,
    }
}

fn is_std(n: c_int) -> bool {
    (0..3).contains(&n)
}

/// Before `n` becomes a copy of a store file's placeholder: what the C
/// library's stream of that number holds goes where it was written to.
pub(crate) fn before_std_copy(n: c_int) {
    if !is_std(n) || n == 0 || STD_SWAPPED.load(Ordering::Acquire) & (1 << n) != 0 {
        return;
    }
    // SAFETY: reads the C library's pointer to its own stream.
    let f = unsafe { *std_pointer(n) };
    if !f.is_null() {
        // SAFETY: the C library's own open stream.
        unsafe { libc::fflush(f) };
    }
}

/// `n` became a copy of a store file's placeholder: its standard stream
/// reads or writes through this library from now on, with a buffer of its
/// own when `buffered` (the caller has an exit flush for it: the store's
/// exit sync flushes every stream first, and so does the handler for
/// descriptors inherited across `exec`), unbuffered otherwise.
pub(crate) fn after_std_copy(n: c_int, buffered: bool) {
    if !is_std(n) {
        return;
    }
    let Some(mut g) = crate::state::lock_unless_held_at_fork(&STD_SWAPS) else {
        return;
    };
    if g[n as usize].is_some() {
        // A stand-in already: it follows the number to the new file.
        return;
    }
    let io = CookieIo {
        read: Some(cookie_read),
        write: Some(cookie_write),
        seek: Some(cookie_seek),
        close: Some(std_cookie_close),
    };
    let mode = if n == 0 { c"r" } else { c"w" };
    // SAFETY: the cookie is the descriptor's number; the functions match glibc's types.
    let f = unsafe { fopencookie(n as usize as *mut c_void, mode.as_ptr(), io) };
    if f.is_null() {
        return;
    }
    // Standard error is unbuffered, as the C library's own.
    if n == 2 || (n == 1 && !buffered) {
        // SAFETY: a stream just made, not yet used.
        unsafe { libc::setvbuf(f, std::ptr::null_mut(), libc::_IONBF, 0) };
    }
    {
        let mut st = STREAMS.lock().unwrap_or_else(|p| p.into_inner());
        st.push((f as usize, n));
        STREAM_COUNT.store(st.len(), Ordering::Relaxed);
    }
    let ptr = std_pointer(n);
    // SAFETY: the C library's pointer to its standard stream; swapped under `STD_SWAPS`.
    let own = unsafe { std::mem::replace(&mut *ptr, f) };
    g[n as usize] = Some((own as usize, f as usize));
    STD_SWAPPED.fetch_or(1 << n, Ordering::AcqRel);
}

/// Flush the stand-ins of the standard streams.
pub(crate) fn flush_stand_ins() {
    if STD_SWAPPED.load(Ordering::Acquire) == 0 {
        return;
    }
    let stand_ins: Vec<usize> = match crate::state::lock_unless_held_at_fork(&STD_SWAPS) {
        Some(g) => g.iter().flatten().map(|&(_, f)| f).collect(),
        None => return,
    };
    for f in stand_ins {
        // SAFETY: a stand-in of ours, open while listed.
        unsafe { libc::fflush(f as *mut libc::FILE) };
    }
}

/// Before `n` is closed, or made a copy of a descriptor not of the store:
/// the C library's own stream comes back in its place.
pub(crate) fn std_released(n: c_int) {
    if !is_std(n) || STD_SWAPPED.load(Ordering::Acquire) & (1 << n) == 0 {
        return;
    }
    let Some(stand_in) = take_swap(n) else {
        return;
    };
    forget_stream_at(stand_in as *mut libc::FILE);
    // SAFETY: the stand-in made in `after_std_copy`, its swap taken, so its close leaves `n` open.
    unsafe { libc::fclose(stand_in as *mut libc::FILE) };
}

/// Put the C library's stream of `n` back; the stand-in, if there was one.
fn take_swap(n: c_int) -> Option<usize> {
    let mut g = crate::state::lock_unless_held_at_fork(&STD_SWAPS)?;
    let (own, stand_in) = g[n as usize].take()?;
    STD_SWAPPED.fetch_and(!(1 << n), Ordering::AcqRel);
    // SAFETY: the C library's pointer to its standard stream; swapped under `STD_SWAPS`.
    unsafe { *std_pointer(n) = own as *mut libc::FILE };
    Some(stand_in)
}

/// A stand-in's close: by the program's `fclose` (the number closes, as
/// the C library's own stream's would, and that stream is back in the
/// pointer), or by `std_released` (the number stays).
unsafe extern "C" fn std_cookie_close(cookie: *mut c_void) -> c_int {
    let n = fd_of(cookie);
    match take_swap(n) {
        Some(f) => {
            forget_stream_at(f as *mut libc::FILE);
            // SAFETY: the program closes its standard stream, and so the number.
            unsafe { calls::close(n) }
        }
        // `std_released`'s close: the number stays.
        None => 0,
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
pub unsafe extern "C-unwind" fn freopen(
    path: *const c_char,
    mode: *const c_char,
    stream: *mut libc::FILE,
) -> *mut libc::FILE {
    // SAFETY: the same function on 64-bit Linux.
    unsafe { freopen64(path, mode, stream) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn freopen64(
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

// ---- wide characters ---------------------------------------------------
//
// A stream made by `fopencookie` has no wide-character area: glibc's
// `fgetwc` and `fgetws` on it read through a null pointer, and its
// `fputwc` and `fputws` fail without an errno. On a stream of the store
// these read and write the characters' multibyte forms (in the locale's
// encoding) through the narrow calls, which the stream serves; `fwprintf`
// and `vfwprintf` (and their fortified forms) format into a wide memory
// stream of the C library's, and write that so.

/// glibc's `WEOF`.
const WEOF: u32 = u32::MAX;
/// The longest multibyte character of any locale (glibc's `MB_LEN_MAX`).
const MB_LEN_MAX: usize = 16;

unsafe extern "C" {
    fn mbrtowc(
        pwc: *mut libc::wchar_t,
        s: *const c_char,
        n: size_t,
        ps: *mut libc::mbstate_t,
    ) -> size_t;
    fn wcrtomb(s: *mut c_char, wc: libc::wchar_t, ps: *mut libc::mbstate_t) -> size_t;
}

fn fresh_state() -> libc::mbstate_t {
    // SAFETY: the all-zero state is the initial conversion state.
    unsafe { std::mem::zeroed() }
}

/// The next character of stream `f` of the store, `None` at the end
/// (`Err(EILSEQ)` for bytes that are no character, or one cut by the end).
fn get_wide(f: *mut libc::FILE) -> Result<Option<u32>, i32> {
    let mut st = fresh_state();
    let mut got = false;
    loop {
        // SAFETY: a stream of this library, open (the caller's to keep so).
        let c = unsafe { libc::fgetc(f) };
        if c == libc::EOF {
            return if got { Err(libc::EILSEQ) } else { Ok(None) };
        }
        got = true;
        let byte = c as u8 as c_char;
        let mut wc: libc::wchar_t = 0;
        // SAFETY: one byte at `&byte`; `wc` and `st` are valid.
        let n = unsafe { mbrtowc(&mut wc, &byte, 1, &mut st) };
        match n {
            // The character goes on in the next byte.
            n if n == (-2isize) as size_t => continue,
            n if n == (-1isize) as size_t => return Err(libc::EILSEQ),
            _ => return Ok(Some(wc as u32)),
        }
    }
}

/// The multibyte form of `wc` in the locale's encoding.
fn multibyte(wc: u32) -> Result<([c_char; MB_LEN_MAX], usize), i32> {
    let mut buf = [0 as c_char; MB_LEN_MAX];
    let mut st = fresh_state();
    // SAFETY: `buf` holds any character's form; `st` is valid.
    let n = unsafe { wcrtomb(buf.as_mut_ptr(), wc as libc::wchar_t, &mut st) };
    if n == (-1isize) as size_t {
        return Err(libc::EILSEQ);
    }
    Ok((buf, n))
}

fn put_wide(wc: u32, f: *mut libc::FILE) -> Result<(), i32> {
    let (buf, n) = multibyte(wc)?;
    // SAFETY: `n` bytes of `buf`, to a stream of this library.
    if unsafe { libc::fwrite(buf.as_ptr().cast(), 1, n, f) } != n {
        // SAFETY: reads this thread's errno, which the failed write set.
        return Err(unsafe { *libc::__errno_location() });
    }
    Ok(())
}

fn wide_ret(r: Result<Option<u32>, i32>) -> u32 {
    match r {
        Ok(Some(wc)) => wc,
        Ok(None) => WEOF,
        Err(e) => {
            set_errno(e);
            WEOF
        }
    }
}

/// Is `f` a stream of the store? (Then the wide calls are served here.)
fn ours(f: *mut libc::FILE) -> bool {
    placeholder_of(f).is_some()
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn fgetwc(f: *mut libc::FILE) -> u32 {
    if ours(f) {
        return wide_ret(get_wide(f));
    }
    // SAFETY: passed through with the caller's arguments.
    unsafe { real::fgetwc()(f) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn getwc(f: *mut libc::FILE) -> u32 {
    // SAFETY: the same function, as in the C library.
    unsafe { fgetwc(f) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn fgetwc_unlocked(f: *mut libc::FILE) -> u32 {
    if ours(f) {
        return wide_ret(get_wide(f));
    }
    // SAFETY: passed through with the caller's arguments.
    unsafe { real::fgetwc_unlocked()(f) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn getwc_unlocked(f: *mut libc::FILE) -> u32 {
    // SAFETY: the same function, as in the C library.
    unsafe { fgetwc_unlocked(f) }
}

/// `fgetws` on a stream of the store: up to `n - 1` characters, to the end
/// of a line.
fn get_line_wide(ws: *mut libc::wchar_t, n: c_int, f: *mut libc::FILE) -> *mut libc::wchar_t {
    if n <= 0 {
        set_errno(libc::EINVAL);
        return std::ptr::null_mut();
    }
    let mut i = 0usize;
    while i + 1 < n as usize {
        match get_wide(f) {
            Ok(Some(wc)) => {
                // SAFETY: the caller's buffer holds `n` characters; i < n - 1.
                unsafe { *ws.add(i) = wc as libc::wchar_t };
                i += 1;
                if wc == u32::from(b'\n') {
                    break;
                }
            }
            Ok(None) if i == 0 => return std::ptr::null_mut(),
            Ok(None) => break,
            Err(e) => {
                set_errno(e);
                return std::ptr::null_mut();
            }
        }
    }
    // SAFETY: i < n.
    unsafe { *ws.add(i) = 0 };
    ws
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn fgetws(
    ws: *mut libc::wchar_t,
    n: c_int,
    f: *mut libc::FILE,
) -> *mut libc::wchar_t {
    if ours(f) {
        return get_line_wide(ws, n, f);
    }
    // SAFETY: passed through with the caller's arguments.
    unsafe { real::fgetws()(ws, n, f) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn fgetws_unlocked(
    ws: *mut libc::wchar_t,
    n: c_int,
    f: *mut libc::FILE,
) -> *mut libc::wchar_t {
    if ours(f) {
        return get_line_wide(ws, n, f);
    }
    // SAFETY: passed through with the caller's arguments.
    unsafe { real::fgetws_unlocked()(ws, n, f) }
}

unsafe extern "C" {
    /// The C library's end of a program whose fortified call found its
    /// buffer too small.
    fn __chk_fail() -> !;
}

/// The fortified `fgetws` on a stream of the store: `size` is the buffer's
/// room in characters, which `n` must not pass (as the C library's check).
fn get_line_wide_chk(
    ws: *mut libc::wchar_t,
    size: size_t,
    n: c_int,
    f: *mut libc::FILE,
) -> *mut libc::wchar_t {
    if n > 0 && n as size_t > size {
        // SAFETY: the C library's own end for an overflow it was told of.
        unsafe { __chk_fail() }
    }
    get_line_wide(ws, n, f)
}

/// The checked `fgetws` and its unlocked form, as a fortified build calls
/// them.
macro_rules! checked_get_lines {
    ($($name:ident),*) => {$(
        #[unsafe(no_mangle)]
        pub unsafe extern "C-unwind" fn $name(
            ws: *mut libc::wchar_t,
            size: size_t,
            n: c_int,
            f: *mut libc::FILE,
        ) -> *mut libc::wchar_t {
            if ours(f) {
                return get_line_wide_chk(ws, size, n, f);
            }
            // SAFETY: passed through with the caller's arguments.
            unsafe { real::$name()(ws, size, n, f) }
        }
    )*};
}

checked_get_lines!(__fgetws_chk, __fgetws_unlocked_chk);

fn put_ret(wc: u32, r: Result<(), i32>) -> u32 {
    match r {
        Ok(()) => wc,
        Err(e) => {
            set_errno(e);
            WEOF
        }
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn fputwc(wc: u32, f: *mut libc::FILE) -> u32 {
    if ours(f) {
        return put_ret(wc, put_wide(wc, f));
    }
    // SAFETY: passed through with the caller's arguments.
    unsafe { real::fputwc()(wc, f) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn putwc(wc: u32, f: *mut libc::FILE) -> u32 {
    // SAFETY: the same function, as in the C library.
    unsafe { fputwc(wc, f) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn fputwc_unlocked(wc: u32, f: *mut libc::FILE) -> u32 {
    if ours(f) {
        return put_ret(wc, put_wide(wc, f));
    }
    // SAFETY: passed through with the caller's arguments.
    unsafe { real::fputwc_unlocked()(wc, f) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn putwc_unlocked(wc: u32, f: *mut libc::FILE) -> u32 {
    // SAFETY: the same function, as in the C library.
    unsafe { fputwc_unlocked(wc, f) }
}

/// The C library's `stdin` or `stdout` as it stands now (a stand-in of this
/// library's while 0 or 1 is a copy of a store file's placeholder).
fn std_stream(n: c_int) -> *mut libc::FILE {
    // SAFETY: reads the C library's pointer to its own stream.
    unsafe { *std_pointer(n) }
}

// `getwchar`, `putwchar` and the other calls on the standard streams read
// the C library's stream pointer inside the C library, where a stand-in
// over a store file would meet the wide calls of its own: they are served
// as their stream forms on the stream the pointer names.

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn getwchar() -> u32 {
    // SAFETY: the C library's standard input stream.
    unsafe { fgetwc(std_stream(0)) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn getwchar_unlocked() -> u32 {
    // SAFETY: the C library's standard input stream.
    unsafe { fgetwc_unlocked(std_stream(0)) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn putwchar(wc: u32) -> u32 {
    // SAFETY: the C library's standard output stream.
    unsafe { fputwc(wc, std_stream(1)) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn putwchar_unlocked(wc: u32) -> u32 {
    // SAFETY: the C library's standard output stream.
    unsafe { fputwc_unlocked(wc, std_stream(1)) }
}

/// `fputws` on a stream of the store: 1, or -1 with `errno`.
fn put_string_wide(ws: *const libc::wchar_t, f: *mut libc::FILE) -> c_int {
    let mut i = 0usize;
    loop {
        // SAFETY: the caller's string ends with a null character.
        let wc = unsafe { *ws.add(i) };
        if wc == 0 {
            return 1;
        }
        if let Err(e) = put_wide(wc as u32, f) {
            set_errno(e);
            return -1;
        }
        i += 1;
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn fputws(ws: *const libc::wchar_t, f: *mut libc::FILE) -> c_int {
    if ours(f) {
        return put_string_wide(ws, f);
    }
    // SAFETY: passed through with the caller's arguments.
    unsafe { real::fputws()(ws, f) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn fputws_unlocked(
    ws: *const libc::wchar_t,
    f: *mut libc::FILE,
) -> c_int {
    if ours(f) {
        return put_string_wide(ws, f);
    }
    // SAFETY: passed through with the caller's arguments.
    unsafe { real::fputws_unlocked()(ws, f) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn ungetwc(wc: u32, f: *mut libc::FILE) -> u32 {
    if !ours(f) {
        // SAFETY: passed through with the caller's arguments.
        return unsafe { real::ungetwc()(wc, f) };
    }
    if wc == WEOF {
        return WEOF;
    }
    let (buf, n) = match multibyte(wc) {
        Ok(b) => b,
        Err(e) => {
            set_errno(e);
            return WEOF;
        }
    };
    // The bytes back in reverse, so that they are read again in order.
    for &b in buf[..n].iter().rev() {
        // SAFETY: a stream of this library.
        if unsafe { libc::ungetc(c_int::from(b as u8), f) } == libc::EOF {
            return WEOF;
        }
    }
    wc
}

/// A stream of the store reads and writes wide characters as above, bytes
/// as ever: it takes the orientation asked for, and has none until asked.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn fwide(f: *mut libc::FILE, mode: c_int) -> c_int {
    if ours(f) {
        return mode.signum();
    }
    // SAFETY: passed through with the caller's arguments.
    unsafe { real::fwide()(f, mode) }
}

// ---- fwprintf, vfwprintf ----------------------------------------------------

unsafe extern "C" {
    fn open_wmemstream(ptr: *mut *mut libc::wchar_t, size: *mut size_t) -> *mut libc::FILE;
}

/// `vfwprintf` on a stream of the store: `print` (the C library's own
/// `vfwprintf` or its fortified form) formats into a wide memory stream,
/// whose characters are then written as `fputws` writes. The number of
/// characters, or -1 with `errno`.
fn print_wide(f: *mut libc::FILE, print: impl FnOnce(*mut libc::FILE) -> c_int) -> c_int {
    let mut buf: *mut libc::wchar_t = std::ptr::null_mut();
    let mut len: size_t = 0;
    // SAFETY: `buf` and `len` outlive the stream, which is closed below.
    let ms = unsafe { open_wmemstream(&mut buf, &mut len) };
    if ms.is_null() {
        return -1;
    }
    let n = print(ms);
    // SAFETY: the memory stream made above; closing it sets `buf` and `len`.
    let closed = unsafe { libc::fclose(ms) };
    let mut r = if n >= 0 && closed == 0 { n } else { -1 };
    if r >= 0 {
        for i in 0..len {
            // SAFETY: the stream left `len` characters at `buf`.
            let wc = unsafe { *buf.add(i) };
            if let Err(e) = put_wide(wc as u32, f) {
                set_errno(e);
                r = -1;
                break;
            }
        }
    }
    // SAFETY: the memory stream's buffer, the caller's to free.
    unsafe { libc::free(buf.cast()) };
    r
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn vfwprintf(
    f: *mut libc::FILE,
    fmt: *const libc::wchar_t,
    ap: *mut c_void,
) -> c_int {
    if ours(f) {
        // SAFETY: the caller's format and arguments, to a stream of the C library.
        return print_wide(f, |ms| unsafe { real::vfwprintf()(ms, fmt, ap) });
    }
    // SAFETY: passed through with the caller's arguments.
    unsafe { real::vfwprintf()(f, fmt, ap) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn __vfwprintf_chk(
    f: *mut libc::FILE,
    flag: c_int,
    fmt: *const libc::wchar_t,
    ap: *mut c_void,
) -> c_int {
    if ours(f) {
        // SAFETY: the caller's format and arguments, to a stream of the C library.
        return print_wide(f, |ms| unsafe {
            real::__vfwprintf_chk()(ms, flag, fmt, ap)
        });
    }
    // SAFETY: passed through with the caller's arguments.
    unsafe { real::__vfwprintf_chk()(f, flag, fmt, ap) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn vwprintf(fmt: *const libc::wchar_t, ap: *mut c_void) -> c_int {
    // SAFETY: the caller's format and arguments, to the standard output stream.
    unsafe { vfwprintf(std_stream(1), fmt, ap) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn __vwprintf_chk(
    flag: c_int,
    fmt: *const libc::wchar_t,
    ap: *mut c_void,
) -> c_int {
    // SAFETY: the caller's format and arguments, to the standard output stream.
    unsafe { __vfwprintf_chk(std_stream(1), flag, fmt, ap) }
}

// ---- the wide scanf family --------------------------------------------------
//
// A wide scan of a stream of the store would need the wide area the stream
// lacks, and reads ahead of what it converts: it is refused (`EOF`, errno
// `EOPNOTSUPP`, and a line on stderr naming the call), where the C library's
// own would read through a null pointer or fail saying nothing. Wide scans
// of other streams are the C library's.

/// `vfwscanf` (`real`: the C library's form of the same name) on `f`.
fn scan_wide(name: &str, f: *mut libc::FILE, real: impl FnOnce(*mut libc::FILE) -> c_int) -> c_int {
    if ours(f) {
        crate::warn_once(
            name,
            &format!(
                "{name} on a stream of a file of the store is not served (a wide scan \
                 needs the C library's wide-character area, which such a stream has \
                 not): EOF, EOPNOTSUPP; read its bytes and convert them with mbrtowc"
            ),
        );
        set_errno(libc::EOPNOTSUPP);
        return libc::EOF;
    }
    real(f)
}

/// The wide scans of a stream (`$stream`, refused on a store file's) and of
/// the standard input (`$std`), one pair per name the C library gives them.
macro_rules! wide_scans {
    ($($stream:ident, $std:ident;)*) => {$(
        #[unsafe(no_mangle)]
        pub unsafe extern "C-unwind" fn $stream(
            f: *mut libc::FILE,
            fmt: *const libc::wchar_t,
            ap: *mut c_void,
        ) -> c_int {
            // SAFETY: passed through with the caller's arguments.
            scan_wide("fwscanf", f, |f| unsafe { real::$stream()(f, fmt, ap) })
        }

        #[unsafe(no_mangle)]
        pub unsafe extern "C-unwind" fn $std(fmt: *const libc::wchar_t, ap: *mut c_void) -> c_int {
            // SAFETY: the standard input stream, with the caller's arguments.
            unsafe { $stream(std_stream(0), fmt, ap) }
        }
    )*};
}

wide_scans! {
    vfwscanf, vwscanf;
    __isoc99_vfwscanf, __isoc99_vwscanf;
    __isoc23_vfwscanf, __isoc23_vwscanf;
}

// `fwprintf` and `__fwprintf_chk` (and `dprintf` and `__dprintf_chk`, below)
// take their arguments as C variadic ones, which a stable Rust function
// cannot declare. Each is a naked function that makes the `va_list` the C
// compiler's own `va_start` would (the argument registers stored in a save
// area, the caller's stack arguments beside it, the named arguments counted
// as taken) and calls its `v` form with it, the named arguments left where
// they arrived.

/// A trampoline for a function of `$named` named pointer-or-integer
/// arguments followed by variadic ones: `$body(named..., va_list)`, the
/// `va_list` passed as the argument after the named ones.
macro_rules! wprintf_trampoline {
    ($name:ident, $body:ident, named = $named:literal, x86_ap = $xap:literal, arm_ap = $aap:literal) => {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a naked function of assembly only, which keeps the ABI's
        // stack alignment and passes the C caller's arguments on unchanged.
        #[unsafe(naked)]
        // SAFETY: the C library's own name, which this library stands in for
        // with the same signature.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name() -> c_int {
            // The frame: the save area (six general registers, eight vector
            // ones: 176 bytes) at rsp, the `va_list` (gp_offset, fp_offset,
            // overflow_arg_area, reg_save_area) at rsp + 176; 200 bytes,
            // which leave rsp 16-byte aligned (it is 8 past at entry). The
            // caller's stack arguments start 8 above the frame's top.
            core::arch::naked_asm!(
                "sub rsp, 200",
                "mov [rsp], rdi",
                "mov [rsp + 8], rsi",
                "mov [rsp + 16], rdx",
                "mov [rsp + 24], rcx",
                "mov [rsp + 32], r8",
                "mov [rsp + 40], r9",
                "movaps [rsp + 48], xmm0",
                "movaps [rsp + 64], xmm1",
                "movaps [rsp + 80], xmm2",
                "movaps [rsp + 96], xmm3",
                "movaps [rsp + 112], xmm4",
                "movaps [rsp + 128], xmm5",
                "movaps [rsp + 144], xmm6",
                "movaps [rsp + 160], xmm7",
                "mov dword ptr [rsp + 176], {gp}",
                "mov dword ptr [rsp + 180], 48",
                "lea rax, [rsp + 208]",
                "mov [rsp + 184], rax",
                "mov [rsp + 192], rsp",
                concat!("lea ", $xap, ", [rsp + 176]"),
                "call {body}",
                "add rsp, 200",
                "ret",
                gp = const $named * 8,
                body = sym $body,
            )
        }

        #[cfg(target_arch = "aarch64")]
        // SAFETY: as for x86-64: assembly only, the stack kept aligned.
        #[unsafe(naked)]
        // SAFETY: as for x86-64: the C library's name and signature.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name() -> c_int {
            // The frame: x0-x7 at sp (64 bytes), q0-q7 at sp + 64 (128), the
            // `va_list` (__stack, __gr_top, __vr_top, __gr_offs, __vr_offs)
            // at sp + 192 (32), the link register at sp + 224; 240 bytes in
            // all, sp kept 16-byte aligned. The caller's stack arguments
            // start at the frame's top.
            core::arch::naked_asm!(
                "sub sp, sp, #240",
                "stp x0, x1, [sp]",
                "stp x2, x3, [sp, #16]",
                "stp x4, x5, [sp, #32]",
                "stp x6, x7, [sp, #48]",
                "stp q0, q1, [sp, #64]",
                "stp q2, q3, [sp, #96]",
                "stp q4, q5, [sp, #128]",
                "stp q6, q7, [sp, #160]",
                "add x9, sp, #240",
                "str x9, [sp, #192]",
                "add x9, sp, #64",
                "str x9, [sp, #200]",
                "add x9, sp, #192",
                "str x9, [sp, #208]",
                "mov w9, #{gr_offs}",
                "str w9, [sp, #216]",
                "mov w9, #-128",
                "str w9, [sp, #220]",
                "str x30, [sp, #224]",
                concat!("add ", $aap, ", sp, #192"),
                "bl {body}",
                "ldr x30, [sp, #224]",
                "add sp, sp, #240",
                "ret",
                gr_offs = const -(8 - $named) * 8,
                body = sym $body,
            )
        }
    };
}

wprintf_trampoline!(
    fwprintf,
    vfwprintf,
    named = 2,
    x86_ap = "rdx",
    arm_ap = "x2"
);
wprintf_trampoline!(
    __fwprintf_chk,
    __vfwprintf_chk,
    named = 3,
    x86_ap = "rcx",
    arm_ap = "x3"
);

wprintf_trampoline!(wprintf, vwprintf, named = 1, x86_ap = "rsi", arm_ap = "x1");
wprintf_trampoline!(
    __wprintf_chk,
    __vwprintf_chk,
    named = 2,
    x86_ap = "rdx",
    arm_ap = "x2"
);
wprintf_trampoline!(fwscanf, vfwscanf, named = 2, x86_ap = "rdx", arm_ap = "x2");
wprintf_trampoline!(
    __isoc99_fwscanf,
    __isoc99_vfwscanf,
    named = 2,
    x86_ap = "rdx",
    arm_ap = "x2"
);
wprintf_trampoline!(
    __isoc23_fwscanf,
    __isoc23_vfwscanf,
    named = 2,
    x86_ap = "rdx",
    arm_ap = "x2"
);
wprintf_trampoline!(wscanf, vwscanf, named = 1, x86_ap = "rsi", arm_ap = "x1");
wprintf_trampoline!(
    __isoc99_wscanf,
    __isoc99_vwscanf,
    named = 1,
    x86_ap = "rsi",
    arm_ap = "x1"
);
wprintf_trampoline!(
    __isoc23_wscanf,
    __isoc23_vwscanf,
    named = 1,
    x86_ap = "rsi",
    arm_ap = "x1"
);

// ---- dprintf, vdprintf ------------------------------------------------------

/// `vdprintf` onto a descriptor of the store: `print` (the C library's own
/// `vasprintf` or its fortified form) formats into memory, and the bytes are
/// written as `write` writes them, at the description's position. The bytes
/// written, or -1 with `errno` (some may have been written, as the C
/// library's own `dprintf` may leave part of its output behind).
fn print_fd(fd: c_int, print: impl FnOnce(*mut *mut c_char) -> c_int) -> c_int {
    let mut buf: *mut c_char = std::ptr::null_mut();
    let n = print(&mut buf);
    if n < 0 {
        // `vasprintf` leaves nothing to free when it fails.
        return -1;
    }
    let len = n as usize;
    let mut done = 0usize;
    let mut r = n;
    while done < len {
        // SAFETY: `buf` holds the `len` bytes `vasprintf` made.
        let w = unsafe { calls::write(fd, buf.add(done).cast(), len - done) };
        if w <= 0 {
            if w == 0 {
                set_errno(libc::EIO);
            }
            r = -1;
            break;
        }
        done += w as usize;
    }
    // SAFETY: the buffer `vasprintf` allocated, the caller's to free.
    unsafe { libc::free(buf.cast()) };
    r
}

/// Whether `fd` is a descriptor of the store (its own `write` serves it).
fn ours_fd(fd: c_int) -> bool {
    crate::state::desc(fd).is_some()
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn vdprintf(fd: c_int, fmt: *const c_char, ap: *mut c_void) -> c_int {
    if ours_fd(fd) {
        // SAFETY: the caller's format and arguments, formatted into memory.
        return print_fd(fd, |out| unsafe { real::vasprintf()(out, fmt, ap) });
    }
    // SAFETY: passed through with the caller's arguments.
    unsafe { real::vdprintf()(fd, fmt, ap) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn __vdprintf_chk(
    fd: c_int,
    flag: c_int,
    fmt: *const c_char,
    ap: *mut c_void,
) -> c_int {
    if ours_fd(fd) {
        // SAFETY: the caller's format and arguments, formatted into memory.
        return print_fd(fd, |out| unsafe {
            real::__vasprintf_chk()(out, flag, fmt, ap)
        });
    }
    // SAFETY: passed through with the caller's arguments.
    unsafe { real::__vdprintf_chk()(fd, flag, fmt, ap) }
}

wprintf_trampoline!(dprintf, vdprintf, named = 2, x86_ap = "rdx", arm_ap = "x2");
wprintf_trampoline!(
    __dprintf_chk,
    __vdprintf_chk,
    named = 3,
    x86_ap = "rcx",
    arm_ap = "x3"
);
