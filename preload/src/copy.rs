//! Copies between descriptors inside the kernel (`sendfile`,
//! `copy_file_range`, `splice`), where one side is a file of the store: the
//! kernel cannot reach the store's bytes, so the copy goes through a
//! buffer, by this library's own reads and writes, with the kernel's rules
//! for offsets, access modes and (for `splice`) the pipe's room.

#![allow(clippy::missing_safety_doc)]
#![allow(unreachable_pub)]

use std::ffi::{c_int, c_uint, c_void};

use libc::{off64_t, size_t, ssize_t};

use crate::calls;
use crate::real;
use crate::set_errno;
use crate::state;

/// The most one call moves, as Linux bounds a read or a write.
const MAX_RW: usize = 0x7fff_f000;
/// The buffer a copy goes through, at most.
const CHUNK: usize = 1 << 20;

fn last_errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// A descriptor's status flags, by this library's `fcntl` (a placeholder's
/// are its description's).
fn status(fd: c_int) -> Result<c_int, i32> {
    // SAFETY: F_GETFL takes no argument.
    match unsafe { calls::fcntl(fd, libc::F_GETFL, 0) } {
        -1 => Err(last_errno()),
        s => Ok(s),
    }
}

/// Both descriptors' status flags, or the first one's error.
fn statuses(a: c_int, b: c_int) -> Result<(c_int, c_int), i32> {
    Ok((status(a)?, status(b)?))
}

/// Where a side of the copy reads or writes: at an offset the caller keeps
/// (advanced as bytes move), or at the descriptor's position.
enum At<'a> {
    Offset(&'a mut i64),
    Position,
}

/// Reads up to `buf.len()` bytes from `fd`.
fn read_side(fd: c_int, at: &mut At<'_>, buf: &mut [u8]) -> Result<usize, i32> {
    let p = buf.as_mut_ptr().cast::<c_void>();
    let n = match at {
        // SAFETY: `buf` is a live buffer of `buf.len()` bytes.
        At::Offset(off) => unsafe { calls::pread64(fd, p, buf.len(), **off) },
        // SAFETY: as above.
        At::Position => unsafe { calls::read(fd, p, buf.len()) },
    };
    if n < 0 {
        Err(last_errno())
    } else {
        Ok(n as usize)
    }
}

/// Writes all of `data` to `fd`, unless a write fails or writes nothing:
/// returns the bytes written and the error that stopped it, if any.
fn write_side(fd: c_int, at: &mut At<'_>, data: &[u8]) -> (usize, Option<i32>) {
    let mut done = 0;
    while done < data.len() {
        let rest = &data[done..];
        let p = rest.as_ptr().cast::<c_void>();
        let n = match at {
            // SAFETY: `rest` is a live buffer of `rest.len()` bytes.
            At::Offset(off) => unsafe { calls::pwrite64(fd, p, rest.len(), **off + done as i64) },
            // SAFETY: as above.
            At::Position => unsafe { calls::write(fd, p, rest.len()) },
        };
        match n {
            n if n < 0 => return (done, Some(last_errno())),
            0 => return (done, Some(libc::EIO)),
            n => done += n as usize,
        }
    }
    (done, None)
}

/// Moves up to `len` bytes from `fd_in` to `fd_out` through a buffer.
/// Returns the bytes moved, or the error of a copy that moved none.
fn copy(fd_in: c_int, mut src: At<'_>, fd_out: c_int, mut dst: At<'_>, len: usize) -> ssize_t {
    let len = len.min(MAX_RW);
    // Aligned, so that an O_DIRECT side (which wants 512-byte alignment of
    // the buffer) takes it.
    let mut buf = setcache::AlignedBuf::new(len.clamp(1, CHUNK));
    let mut moved = 0usize;
    let mut failure = None;
    while moved < len {
        let want = (len - moved).min(buf.len());
        let got = match read_side(fd_in, &mut src, &mut buf[..want]) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) => {
                failure = Some(e);
                break;
            }
        };
        let short = got < want;
        let (put, err) = write_side(fd_out, &mut dst, &buf[..got]);
        moved += put;
        if let At::Offset(off) = &mut src {
            **off += put as i64;
        } else if put < got {
            // The input's position moves by what was written only.
            // SAFETY: moves a position back by bytes it was moved past.
            unsafe { calls::lseek64(fd_in, -((got - put) as i64), libc::SEEK_CUR) };
        }
        if let At::Offset(off) = &mut dst {
            **off += put as i64;
        }
        if let Some(e) = err {
            failure = Some(e);
            break;
        }
        if short {
            // The end of the file (or, from a pipe, what it had): the
            // kernel's copy returns there too.
            break;
        }
    }
    match failure {
        Some(e) if moved == 0 => {
            set_errno(e);
            -1
        }
        _ => moved as ssize_t,
    }
}

/// The file type bits of `fd` (not a store file), by the kernel's `fstat`.
fn file_type(fd: c_int) -> Result<libc::mode_t, i32> {
    // SAFETY: an all-zero stat is a valid value to be filled.
    let mut st: libc::stat64 = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is a live struct stat to fill.
    if unsafe { real::fstat64()(fd, &mut st) } < 0 {
        return Err(last_errno());
    }
    Ok(st.st_mode & libc::S_IFMT)
}

/// Where a copy's side starts: the offset given, or the descriptor's
/// position (a store file's own, or the kernel's for another file).
fn start_of(fd: c_int, given: Option<i64>, d: &Option<state::Held>) -> Result<i64, i32> {
    match (given, d) {
        (Some(o), _) => Ok(o),
        (None, Some(d)) => Ok(*d.pos.lock().unwrap_or_else(|p| p.into_inner()) as i64),
        (None, None) => {
            // SAFETY: plain system call; moves nothing (SEEK_CUR by 0).
            let at = unsafe { real::lseek64()(fd, 0, libc::SEEK_CUR) };
            if at < 0 { Err(last_errno()) } else { Ok(at) }
        }
    }
}

/// `EINVAL` unless `fd` (not a store file) is a regular file (`EISDIR` for
/// a directory), as the kernel's `copy_file_range` answers.
fn regular(fd: c_int) -> Result<(), i32> {
    match file_type(fd)? {
        libc::S_IFREG => Ok(()),
        libc::S_IFDIR => Err(libc::EISDIR),
        _ => Err(libc::EINVAL),
    }
}

/// Whether a descriptor is one of the store's.
fn ours(fd: c_int) -> bool {
    state::desc(fd).is_some()
}

fn fail(e: i32) -> ssize_t {
    set_errno(e);
    -1
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn sendfile64(
    out_fd: c_int,
    in_fd: c_int,
    offset: *mut off64_t,
    count: size_t,
) -> ssize_t {
    if !ours(out_fd) && !ours(in_fd) {
        // SAFETY: passed through with the caller's arguments.
        return unsafe { real::sendfile64()(out_fd, in_fd, offset, count) };
    }
    // Linux's checks, in its order: the source's access mode; an offset
    // given for a source that cannot be read at one (a pipe, a socket, a
    // terminal: `ESPIPE`), or a negative one; the output's access mode; no
    // appending output; and a source it can splice from (seekable: `EINVAL`
    // for the rest, where reading it here would wait on an idle one).
    let (si, so) = match statuses(in_fd, out_fd) {
        Ok(f) => f,
        Err(e) => return fail(e),
    };
    if si & libc::O_ACCMODE == libc::O_WRONLY {
        return fail(libc::EBADF);
    }
    let seekable = ours(in_fd) || {
        // SAFETY: plain system call; moves nothing (SEEK_CUR by 0).
        let at = unsafe { real::lseek64()(in_fd, 0, libc::SEEK_CUR) };
        at >= 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESPIPE)
    };
    let mut off = 0i64;
    let src = if offset.is_null() {
        At::Position
    } else {
        if !seekable {
            return fail(libc::ESPIPE);
        }
        // SAFETY: a non-null offset points at the caller's offset, read and updated.
        off = unsafe { *offset };
        if off < 0 {
            return fail(libc::EINVAL);
        }
        At::Offset(&mut off)
    };
    // The count, checked against the source's range as Linux does: one
    // negative as a signed size, or passing the largest offset from the
    // given one, is `EINVAL`.
    let Ok(signed) = i64::try_from(count) else {
        return fail(libc::EINVAL);
    };
    // SAFETY: as above (read again: `off` is lent to `src`).
    if !offset.is_null() && unsafe { *offset }.checked_add(signed).is_none() {
        return fail(libc::EINVAL);
    }
    if so & libc::O_ACCMODE == libc::O_RDONLY {
        return fail(libc::EBADF);
    }
    if so & libc::O_APPEND != 0 || !seekable {
        return fail(libc::EINVAL);
    }
    let rc = copy(in_fd, src, out_fd, At::Position, count);
    if !offset.is_null() {
        // SAFETY: as above.
        unsafe { *offset = off };
    }
    rc
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn sendfile(
    out_fd: c_int,
    in_fd: c_int,
    offset: *mut libc::off_t,
    count: size_t,
) -> ssize_t {
    // SAFETY: the same function on 64-bit Linux, where the offset types agree.
    unsafe { sendfile64(out_fd, in_fd, offset, count) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn copy_file_range(
    fd_in: c_int,
    off_in: *mut off64_t,
    fd_out: c_int,
    off_out: *mut off64_t,
    len: size_t,
    flags: c_uint,
) -> ssize_t {
    let (din, dout) = (state::desc(fd_in), state::desc(fd_out));
    if din.is_none() && dout.is_none() {
        // SAFETY: passed through with the caller's arguments.
        return unsafe { real::copy_file_range()(fd_in, off_in, fd_out, off_out, len, flags) };
    }
    // In the kernel's order: a bad descriptor, then the flags, then what
    // the files are, then how they are open.
    let (si, so) = match statuses(fd_in, fd_out) {
        Ok(f) => f,
        Err(e) => return fail(e),
    };
    if flags != 0 {
        return fail(libc::EINVAL);
    }
    // Both sides regular files, as the kernel's copy wants (a store file is
    // one; the other side is asked).
    for (fd, d) in [(fd_in, &din), (fd_out, &dout)] {
        if d.is_none()
            && let Err(e) = regular(fd)
        {
            return fail(e);
        }
    }
    if si & libc::O_ACCMODE == libc::O_WRONLY
        || so & libc::O_ACCMODE == libc::O_RDONLY
        || so & libc::O_APPEND != 0
    {
        return fail(libc::EBADF);
    }
    // The offsets as given (negative ones too), and where each side starts:
    // its offset, or the descriptor's position.
    let given = |p: *mut off64_t| -> Option<i64> {
        // SAFETY: a non-null offset points at the caller's offset.
        (!p.is_null()).then(|| unsafe { *p })
    };
    let (mut a, mut b) = (given(off_in), given(off_out));
    let (from, to) = match (start_of(fd_in, a, &din), start_of(fd_out, b, &dout)) {
        (Ok(x), Ok(y)) => (x, y),
        (Err(e), _) | (_, Err(e)) => return fail(e),
    };
    // The kernel's checks, in its order: a range that wraps past 2^64
    // (`EOVERFLOW`); the input cut at its end (a store file's: another
    // file is read until its reads end, as one of `/proc`, whose size says
    // nothing of what it reads, must be); an output from the store's
    // largest file length on (`EFBIG`), cut there; overlapping ranges in one
    // file; then a negative offset (`EINVAL`).
    let wraps = |at: i64| (at as u64).checked_add(len as u64).is_none();
    if wraps(from) || wraps(to) {
        return fail(libc::EOVERFLOW);
    }
    let mut n = match (&din, u64::try_from(from)) {
        (Some(i), Ok(x)) => {
            let size_in = i.node.len();
            len.min(usize::try_from(size_in.saturating_sub(x)).unwrap_or(usize::MAX))
        }
        _ => len,
    };
    if dout.is_some()
        && let Ok(y) = u64::try_from(to)
    {
        let most = state::largest();
        if y >= most {
            return fail(libc::EFBIG);
        }
        n = n.min(usize::try_from(most - y).unwrap_or(usize::MAX));
    }
    // Within one file the two ranges must not overlap.
    if let (Some(i), Some(o)) = (&din, &dout)
        && std::sync::Arc::ptr_eq(&i.node, &o.node)
    {
        let m = i64::try_from(n).unwrap_or(i64::MAX);
        if m > 0 && from < to.saturating_add(m) && to < from.saturating_add(m) {
            return fail(libc::EINVAL);
        }
    }
    if from < 0 || to < 0 {
        return fail(libc::EINVAL);
    }
    if n == 0 {
        return 0;
    }
    let src = a.as_mut().map_or(At::Position, At::Offset);
    let dst = b.as_mut().map_or(At::Position, At::Offset);
    let rc = copy(fd_in, src, fd_out, dst, n);
    for (p, v) in [(off_in, a), (off_out, b)] {
        if let Some(v) = v {
            // SAFETY: as above; the offset moves by the bytes copied.
            unsafe { *p = v };
        }
    }
    rc
}

/// The flags `splice` and `tee` know (the kernel's `SPLICE_F_ALL`).
const SPLICE_F_ALL: c_uint =
    libc::SPLICE_F_MOVE | libc::SPLICE_F_NONBLOCK | libc::SPLICE_F_MORE | libc::SPLICE_F_GIFT;

/// Whether `fd` (not a store file) is a pipe or a FIFO.
fn is_pipe(fd: c_int) -> bool {
    file_type(fd) == Ok(libc::S_IFIFO)
}

/// A `splice` offset: `None` for the descriptor's position, `EINVAL` for a
/// negative one or one whose range passes the largest offset (the kernel's
/// check of a range).
fn splice_offset(p: *const off64_t, len: usize) -> Result<Option<i64>, i32> {
    if p.is_null() {
        return Ok(None);
    }
    // SAFETY: a non-null offset points at the caller's offset.
    let o = unsafe { *p };
    if o < 0 || o.checked_add(len as i64).is_none() {
        return Err(libc::EINVAL);
    }
    Ok(Some(o))
}

/// Bytes a pipe has room for, in whole buffers as the kernel counts them:
/// its buffers less those its bytes fill (fewer than the kernel's count
/// when its bytes lie in more buffers than they need, never more).
fn pipe_room(pipe: c_int) -> Result<usize, i32> {
    // SAFETY: F_GETPIPE_SZ takes no argument.
    let size = unsafe { real::fcntl64()(pipe, libc::F_GETPIPE_SZ) };
    if size < 0 {
        return Err(last_errno());
    }
    let mut held: c_int = 0;
    // SAFETY: FIONREAD fills the int it is given.
    if unsafe { real::ioctl()(pipe, libc::FIONREAD, &mut held as *mut c_int) } < 0 {
        return Err(last_errno());
    }
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(512) as usize;
    let used = (held.max(0) as usize).div_ceil(page);
    Ok((size as usize / page).saturating_sub(used) * page)
}

/// The events `fd` is ready for, waiting up to `ms` milliseconds (-1: until
/// one comes).
fn poll_one(fd: c_int, events: i16, ms: c_int) -> Result<i16, i32> {
    let mut p = libc::pollfd {
        fd,
        events,
        revents: 0,
    };
    // SAFETY: `p` is one live pollfd.
    if unsafe { libc::poll(&mut p, 1, ms) } < 0 {
        return Err(last_errno());
    }
    Ok(p.revents)
}

/// A pipe with no reader: `EPIPE`, with SIGPIPE raised on this thread, as
/// the kernel answers a write to it.
fn broken_pipe() -> ssize_t {
    // SAFETY: raises a signal on the calling thread; its disposition decides.
    unsafe { libc::raise(libc::SIGPIPE) };
    fail(libc::EPIPE)
}

/// One read or write of a pipe that does not wait: `RWF_NOWAIT`, or, where
/// the pipe does not take the flag (a FIFO; a kernel before 6.4), the same
/// pipe opened again without blocking for the one call. The bytes moved, or
/// the error (`EPIPE`, with SIGPIPE, for a write with no reader).
fn pipe_nowait(pipe: c_int, buf: *mut u8, len: usize, write: bool) -> Result<usize, i32> {
    let iov = libc::iovec {
        iov_base: buf.cast(),
        iov_len: len,
    };
    // SAFETY: `iov` names `len` live bytes at `buf`; offset -1 is the pipe's stream.
    let n = unsafe {
        if write {
            real::pwritev2()(pipe, &iov, 1, -1, libc::RWF_NOWAIT)
        } else {
            real::preadv2()(pipe, &iov, 1, -1, libc::RWF_NOWAIT)
        }
    };
    if n >= 0 {
        return Ok(n as usize);
    }
    let e = last_errno();
    if e != libc::EOPNOTSUPP {
        return Err(e);
    }
    let path = format!("/proc/self/fd/{pipe}\0");
    let mode = if write {
        libc::O_WRONLY
    } else {
        libc::O_RDONLY
    };
    // SAFETY: a NUL-terminated path; the descriptor is this call's own.
    let fd = unsafe {
        real::open64()(
            path.as_ptr().cast(),
            mode | libc::O_NONBLOCK | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return match last_errno() {
            // A FIFO opened for writing with no reader: as a write to it.
            libc::ENXIO => {
                // SAFETY: raises a signal on the calling thread.
                unsafe { libc::raise(libc::SIGPIPE) };
                Err(libc::EPIPE)
            }
            e => Err(e),
        };
    }
    // SAFETY: as above, on the descriptor just opened.
    let n = unsafe {
        if write {
            real::write()(fd, buf.cast(), len)
        } else {
            real::read()(fd, buf.cast(), len)
        }
    };
    let r = if n < 0 {
        Err(last_errno())
    } else {
        Ok(n as usize)
    };
    // SAFETY: closes the descriptor opened above.
    unsafe { real::close()(fd) };
    r
}

/// `splice` from a store file into a pipe: up to `len` bytes, no more than
/// the pipe has room for, waiting for room unless `nonblock`. The file's
/// offset or position moves by what the pipe took.
fn splice_to_pipe(
    fd_in: c_int,
    mut src: At<'_>,
    pipe: c_int,
    len: usize,
    nonblock: bool,
) -> ssize_t {
    let room = loop {
        // No reader: refused before the file is read, as the kernel's wait
        // for room refuses it (also at the file's end).
        match poll_one(pipe, libc::POLLOUT, 0) {
            Err(e) => return fail(e),
            Ok(ev) if ev & libc::POLLERR != 0 => return broken_pipe(),
            Ok(_) => {}
        }
        match pipe_room(pipe) {
            Err(e) => return fail(e),
            Ok(0) if nonblock => return fail(libc::EAGAIN),
            Ok(0) => {
                if let Err(e) = poll_one(pipe, libc::POLLOUT, -1) {
                    return fail(e);
                }
            }
            Ok(n) => break n,
        }
    };
    let want = len.min(room).min(CHUNK);
    let mut buf = setcache::AlignedBuf::new(want);
    let got = match read_side(fd_in, &mut src, &mut buf[..want]) {
        Ok(0) => return 0,
        Ok(n) => n,
        Err(e) => return fail(e),
    };
    let mut put = 0;
    let mut failure = None;
    while put < got {
        match pipe_nowait(pipe, buf[put..got].as_mut_ptr(), got - put, true) {
            Ok(n) if n > 0 => put += n,
            // The pipe filled meanwhile: wait for room before anything moved.
            Ok(_) | Err(libc::EAGAIN) if put == 0 && !nonblock => {
                if let Err(e) = poll_one(pipe, libc::POLLOUT, -1) {
                    failure = Some(e);
                    break;
                }
            }
            Ok(_) => {
                failure = Some(libc::EAGAIN);
                break;
            }
            Err(e) => {
                failure = Some(e);
                break;
            }
        }
    }
    match &mut src {
        At::Offset(off) => **off += put as i64,
        At::Position if put < got => {
            // SAFETY: moves a position back by bytes it was moved past.
            unsafe { calls::lseek64(fd_in, -((got - put) as i64), libc::SEEK_CUR) };
        }
        At::Position => {}
    }
    match failure {
        Some(e) if put == 0 => fail(e),
        _ => put as ssize_t,
    }
}

/// A pipe of this library's own, closed when dropped.
struct SidePipe([c_int; 2]);

impl Drop for SidePipe {
    fn drop(&mut self) {
        for fd in self.0 {
            // SAFETY: closes a descriptor this value made and owns.
            unsafe { real::close()(fd) };
        }
    }
}

/// `splice` from a pipe into a store file: what the pipe holds, up to `len`
/// bytes, waiting for its first bytes unless `flags` or the pipe say not to.
/// The bytes are first looked at (`tee` into a pipe of this call's own) and
/// taken from the caller's pipe only as far as the file took them, so a
/// write that fails leaves them in the pipe, as the kernel's splice does.
fn splice_from_pipe(
    pipe: c_int,
    fd_out: c_int,
    mut dst: At<'_>,
    len: usize,
    flags: c_uint,
) -> ssize_t {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return fail(last_errno());
    }
    let side = SidePipe(fds);
    // As large as the caller's pipe, so that one look sees all it holds.
    // SAFETY: F_GETPIPE_SZ takes no argument; F_SETPIPE_SZ an int.
    unsafe {
        let size = real::fcntl64()(pipe, libc::F_GETPIPE_SZ);
        if size > real::fcntl64()(side.0[1], libc::F_GETPIPE_SZ) {
            real::fcntl64()(side.0[1], libc::F_SETPIPE_SZ, size);
        }
    }
    let want = len.min(CHUNK);
    // SAFETY: both are pipes; the kernel waits or refuses as its splice would.
    let n = unsafe { libc::tee(pipe, side.0[1], want, flags & libc::SPLICE_F_NONBLOCK) };
    if n <= 0 {
        return if n < 0 { fail(last_errno()) } else { 0 };
    }
    let n = n as usize;
    let mut buf = setcache::AlignedBuf::new(n);
    let mut seen = 0;
    while seen < n {
        match pipe_nowait(side.0[0], buf[seen..n].as_mut_ptr(), n - seen, false) {
            Ok(0) => return fail(libc::EIO),
            Ok(k) => seen += k,
            Err(e) => return fail(e),
        }
    }
    let (put, err) = write_side(fd_out, &mut dst, &buf[..n]);
    if let At::Offset(off) = &mut dst {
        **off += put as i64;
    }
    // Take from the caller's pipe the bytes the file took.
    let mut taken = 0;
    while taken < put {
        match pipe_nowait(pipe, buf[taken..put].as_mut_ptr(), put - taken, false) {
            Ok(k) if k > 0 => taken += k,
            _ => break,
        }
    }
    match err {
        Some(e) if put == 0 => fail(e),
        _ => put as ssize_t,
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn splice(
    fd_in: c_int,
    off_in: *mut off64_t,
    fd_out: c_int,
    off_out: *mut off64_t,
    len: size_t,
    flags: c_uint,
) -> ssize_t {
    let (din, dout) = (ours(fd_in), ours(fd_out));
    if !din && !dout {
        // SAFETY: passed through with the caller's arguments.
        return unsafe { real::splice()(fd_in, off_in, fd_out, off_out, len, flags) };
    }
    // In the kernel's order: nothing to move, the flags, a bad descriptor,
    // an offset given for a pipe, the access modes, then what the sides are.
    if len == 0 {
        return 0;
    }
    if flags & !SPLICE_F_ALL != 0 {
        return fail(libc::EINVAL);
    }
    let (si, so) = match statuses(fd_in, fd_out) {
        Ok(f) => f,
        Err(e) => return fail(e),
    };
    let (pin, pout) = (!din && is_pipe(fd_in), !dout && is_pipe(fd_out));
    if (pin && !off_in.is_null()) || (pout && !off_out.is_null()) {
        return fail(libc::ESPIPE);
    }
    if si & libc::O_ACCMODE == libc::O_WRONLY || so & libc::O_ACCMODE == libc::O_RDONLY {
        return fail(libc::EBADF);
    }
    if len > isize::MAX as usize {
        return fail(libc::EINVAL);
    }
    let len = len.min(MAX_RW);
    if pin {
        if so & libc::O_APPEND != 0 {
            return fail(libc::EINVAL);
        }
        let mut off = match splice_offset(off_out, len) {
            Ok(o) => o,
            Err(e) => return fail(e),
        };
        let dst = off.as_mut().map_or(At::Position, At::Offset);
        let rc = splice_from_pipe(fd_in, fd_out, dst, len, flags);
        if let Some(o) = off {
            // SAFETY: as in `splice_offset`; the offset moves by the bytes moved.
            unsafe { *off_out = o };
        }
        rc
    } else if pout {
        let mut off = match splice_offset(off_in, len) {
            Ok(o) => o,
            Err(e) => return fail(e),
        };
        let nonblock = flags & libc::SPLICE_F_NONBLOCK != 0 || so & libc::O_NONBLOCK != 0;
        let src = off.as_mut().map_or(At::Position, At::Offset);
        let rc = splice_to_pipe(fd_in, src, fd_out, len, nonblock);
        if let Some(o) = off {
            // SAFETY: as above.
            unsafe { *off_in = o };
        }
        rc
    } else {
        fail(libc::EINVAL)
    }
}

/// `tee` between pipes only: a store file on either side is refused as the
/// kernel refuses a regular file (`EINVAL`, after the flags and the access
/// modes).
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn tee(
    fd_in: c_int,
    fd_out: c_int,
    len: size_t,
    flags: c_uint,
) -> ssize_t {
    if !ours(fd_in) && !ours(fd_out) {
        // SAFETY: passed through with the caller's arguments.
        return unsafe { real::tee()(fd_in, fd_out, len, flags) };
    }
    if flags & !SPLICE_F_ALL != 0 {
        return fail(libc::EINVAL);
    }
    if len == 0 {
        return 0;
    }
    match (status(fd_in), status(fd_out)) {
        (Err(e), _) | (_, Err(e)) => fail(e),
        (Ok(i), Ok(o))
            if i & libc::O_ACCMODE == libc::O_WRONLY || o & libc::O_ACCMODE == libc::O_RDONLY =>
        {
            fail(libc::EBADF)
        }
        _ => fail(libc::EINVAL),
    }
}
