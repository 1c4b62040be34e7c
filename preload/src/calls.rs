//! The functions that stand in for the C library's. Each one's contract is
//! that of the C function of its name: the caller passes what that function
//! requires (valid C strings, buffers of the given lengths). A call on a path
//! outside `SETCACHE_DIR`, or on a descriptor that is no placeholder, goes to
//! the C library's function unchanged.

#![allow(clippy::missing_safety_doc)]
#![allow(unreachable_pub)]

use std::ffi::{CStr, c_char, c_int, c_uint, c_ulong, c_void};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use libc::{iovec, off_t, off64_t, size_t, ssize_t};
use setcache::{Advice, Error};

use crate::path::{Place, classify, classify_as};
use crate::state::{self, Desc, State};
use crate::{fail, set_errno, warn_once};
use crate::{real, stdio};

fn int_ret(r: Result<c_int, i32>) -> c_int {
    match r {
        Ok(v) => v,
        Err(e) => {
            set_errno(e);
            -1
        }
    }
}

fn size_ret(r: Result<usize, i32>) -> ssize_t {
    match r {
        Ok(v) => v as ssize_t,
        Err(e) => {
            set_errno(e);
            -1
        }
    }
}

fn off_ret(r: Result<u64, i32>) -> off64_t {
    match r {
        Ok(v) => v as off64_t,
        Err(e) => {
            set_errno(e);
            -1
        }
    }
}

/// An error on a call that the store cannot support: its errno, and a
/// message on stderr once.
pub(crate) fn unsupported(what: &str, errno: i32) -> i32 {
    warn_once(
        what,
        &format!("{what}: not supported on a file of the store"),
    );
    errno
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// O_DIRECT on a local file system wants offset, length and buffer address
/// aligned to the logical block (512 bytes here).
fn check_direct(d: &Desc, addr: usize, len: usize, off: u64) -> Result<(), i32> {
    if d.direct()
        && (!addr.is_multiple_of(512) || !len.is_multiple_of(512) || !off.is_multiple_of(512))
    {
        return Err(libc::EINVAL);
    }
    Ok(())
}

/// A caller's buffer of `n` bytes at `p` can be made a slice: `EFAULT` for a
/// null pointer with bytes to move, `EINVAL` for a length no slice can have
/// (the kernel's answers).
fn user_buf<T>(p: *const T, n: usize) -> Result<(), i32> {
    if n > isize::MAX as usize {
        return Err(libc::EINVAL);
    }
    if n > 0 && p.is_null() {
        return Err(libc::EFAULT);
    }
    Ok(())
}

/// A caller's buffer of `n` bytes at `p` for `read`, `write`, `pread` or
/// `pwrite`, as the kernel takes it: `EFAULT` for a null pointer with bytes
/// to move or a span past 2^63 (the kernel's `access_ok` refuses that on
/// every kernel, and on some a lower end, at the top of its user space,
/// which this does not know); then the count one call moves, at
/// most `MAX_RW`.
fn user_data<T>(p: *const T, n: usize) -> Result<usize, i32> {
    if n > 0 && p.is_null() {
        return Err(libc::EFAULT);
    }
    user_dest(p, n)
}

/// [`user_data`] for a buffer a read fills: a null one passes here (the
/// kernel finds it unreachable only when it copies, and a read at the end
/// copies nothing: see [`null_read`]).
fn user_dest<T>(p: *const T, n: usize) -> Result<usize, i32> {
    if (p as usize)
        .checked_add(n)
        .is_none_or(|end| end > i64::MAX as usize)
    {
        return Err(libc::EFAULT);
    }
    Ok(n.min(MAX_RW))
}

/// The kernel's check of a positioned call's range: `n` bytes from `off` must
/// end at an offset a file can have.
fn span(off: u64, n: usize) -> Result<(), i32> {
    if off
        .checked_add(n as u64)
        .is_none_or(|end| end > i64::MAX as u64)
    {
        return Err(libc::EINVAL);
    }
    Ok(())
}

fn offset(off: i64) -> Result<u64, i32> {
    u64::try_from(off).map_err(|_| libc::EINVAL)
}

// ---- data --------------------------------------------------------------

fn read_at(d: &Desc, buf: &mut [u8], off: u64) -> Result<usize, i32> {
    if !d.readable {
        return Err(libc::EBADF);
    }
    check_direct(d, buf.as_ptr() as usize, buf.len(), off)?;
    let len = d.node.len();
    if buf.is_empty() || off >= len {
        return Ok(0);
    }
    // Not past the length writes have finished: a longer file's last part
    // is a write's still on its way.
    let n = buf.len().min((len - off).try_into().unwrap_or(usize::MAX));
    let buf = &mut buf[..n];
    match d.node.file.read_at(off, buf) {
        Ok(n) => Ok(n),
        // Shortened meanwhile: a read at or past the end reads nothing.
        Err(Error::OutOfRange { .. }) => Ok(0),
        Err(e) => Err(fail("read", &e)),
    }
}

/// Take the devices' space for bytes `from..end` that a write past the end
/// puts in (with `grow` held), before it grows the file: a device without
/// that room fails the write now with `ENOSPC` (or `EDQUOT`), as a local
/// file system's write does, instead of the write-back at a later `fsync`
/// or `close`, which a program may not check (or never make: an exit
/// syncs). Whole pages, and an eighth of the file more (at most 8 MiB),
/// so that a file written in small appends takes its space in a few calls,
/// not one a page: the node keeps where its reservations reach, and its
/// last close gives back what lies past the end. The bytes between the old
/// end and `from` (a write that leaves a hole) are not taken, nor are holes
/// inside the file that writes fill later: their write-back may still find
/// the devices full. A device whose file system cannot allocate ahead takes
/// nothing, as before.
fn reserve_growth(d: &Desc, from: u64, end: u64) -> Result<(), i32> {
    let n = &d.node;
    let from = from.max(n.reserved.load(Ordering::Acquire));
    if from >= end {
        return Ok(());
    }
    let ahead = end
        .saturating_add((end / 8).min(8 << 20))
        .min(state::largest());
    // The room for this write alone, when there is none for more.
    let r = n
        .file
        .reserve_unsynced(from, ahead - from)
        .map(|()| ahead)
        .or_else(|e| match e.errno() {
            // (Other files' reservations past their ends yield to it.)
            Some(libc::ENOSPC | libc::EDQUOT) => {
                with_room(d, || n.file.reserve_unsynced(from, end - from)).map(|()| end)
            }
            _ => Err(e),
        });
    match r {
        Ok(to) => {
            let ps = page_size();
            n.reserved
                .fetch_max(to.div_ceil(ps).saturating_mul(ps), Ordering::AcqRel);
            Ok(())
        }
        Err(e) => match e.errno() {
            Some(libc::EOPNOTSUPP) => Ok(()),
            // Space the devices lack is the caller's to handle, with no
            // warning, as the kernel's answer would be.
            Some(x @ (libc::ENOSPC | libc::EDQUOT)) => Err(x),
            _ => Err(fail("write past the end", &e)),
        },
    }
}

/// The store's page size.
fn page_size() -> u64 {
    state::state().map_or(1, |s| s.cs.cache().page_size() as u64)
}

/// Take the devices' space for the pages of bytes `at..end`, inside the file,
/// that lie in a hole (one a growth by `ftruncate` or a write past the end
/// left, or one the file had when it was opened), with `grow` held: a device
/// without that room fails the write now with `ENOSPC` (or `EDQUOT`), as a
/// local file system's write into a hole does, instead of the write-back. The
/// node's `whole` says how far from the start the file is known to have its
/// space; a write that ends below it looks at nothing. The first write past
/// it looks at the rest of the file (`lseek` with `SEEK_HOLE` on each
/// backing file): a file written out whole is then known whole. In a file
/// with holes, a write that goes on from `whole` takes the space from there
/// to its end and a little more (up to 16 times its own length, an eighth of
/// the file, 8 MiB, inside the length), so that a file filled in order takes
/// its space in few calls; one further in looks at its own pages and takes
/// the space of those alone, so that a sparse file stays sparse. A file
/// system that cannot allocate ahead takes nothing, as before.
fn reserve_holes(d: &Desc, at: u64, end: u64) -> Result<(), i32> {
    let n = &d.node;
    let f = &n.file;
    let whole = n.whole.load(Ordering::Acquire);
    if end <= whole {
        return Ok(());
    }
    let ps = page_size();
    let up = |x: u64| x.div_ceil(ps).saturating_mul(ps);
    let len = f.len().max(end);
    let whole_to = |to: u64| {
        n.whole.fetch_max(up(to), Ordering::AcqRel);
    };
    let look = |from: u64, to: u64| {
        f.is_allocated(from, to - from)
            .map_err(|e| fail("write into a hole", &e))
    };
    // Whether it took the space (false: the file system cannot).
    let take = |from: u64, to: u64| match with_room(d, || f.reserve_unsynced(from, to - from)) {
        Ok(()) => Ok(true),
        Err(e) => match e.errno() {
            Some(libc::EOPNOTSUPP) => Ok(false),
            // Space the devices lack is the caller's to handle, with no
            // warning, as the kernel's answer would be.
            Some(x @ (libc::ENOSPC | libc::EDQUOT)) => Err(x),
            _ => Err(fail("write into a hole", &e)),
        },
    };
    if !n.holey.load(Ordering::Acquire) {
        if look(whole, len)? {
            whole_to(len);
            return Ok(());
        }
        n.holey.store(true, Ordering::Release);
    }
    if at > whole {
        if !look(at, end)? {
            take(at, end)?;
        }
        return Ok(());
    }
    // On from the part known whole: a file filled in order.
    let more = (end - at).saturating_mul(16).min(end / 8).min(8 << 20);
    let ahead = end.saturating_add(more).min(len);
    let to = match take(whole, ahead) {
        Ok(_) => ahead,
        // The room for this write alone, when there is none for more.
        Err(libc::ENOSPC | libc::EDQUOT) if ahead > end => {
            take(whole, end)?;
            end
        }
        Err(x) => return Err(x),
    };
    whole_to(to);
    Ok(())
}

/// Give back the space other open files of the store reserved past their
/// ends (their writes' eighth more), for a reservation the devices refused:
/// whether any was given. A local file system's preallocation yields to
/// other files' writes; this does too. Waits for nothing: the table of open
/// files and each other file's `grow` are taken only if free now (the
/// caller holds its own `grow`).
fn yield_reservations(d: &Desc) -> bool {
    let Ok(s) = state::state() else {
        return false;
    };
    let others: Vec<Arc<state::Node>> = match s.nodes.try_lock() {
        Ok(m) => m
            .values()
            .filter_map(std::sync::Weak::upgrade)
            .filter(|n| !Arc::ptr_eq(n, &d.node))
            .collect(),
        Err(_) => return false,
    };
    let mut any = false;
    for n in &others {
        if n.reserved.load(Ordering::Acquire) > n.file.len()
            && !n.kept_past.load(Ordering::Acquire)
            && let Ok(_g) = n.grow.try_lock()
            && n.file.trim_reservations().is_ok()
        {
            n.reserved.fetch_min(n.file.len(), Ordering::AcqRel);
            any = true;
        }
    }
    any
}

/// `take()`, once more after other files gave back what they reserved past
/// their ends, if the devices lacked the room for it.
fn with_room<T>(d: &Desc, take: impl Fn() -> setcache::Result<T>) -> setcache::Result<T> {
    match take() {
        Err(e)
            if matches!(e.errno(), Some(libc::ENOSPC | libc::EDQUOT)) && yield_reservations(d) =>
        {
            take()
        }
        r => r,
    }
}

/// Grow the file to at least `end` bytes (with `grow` held), without
/// showing readers the longer length.
fn grow_to(d: &Desc, end: u64) -> Result<(), i32> {
    let f = &d.node.file;
    // Past the largest file: the kernel's answer there (a write is cut at
    // it before it comes here).
    if end > state::largest() {
        return Err(libc::EFBIG);
    }
    if end > f.len() {
        d.node.note_written();
        f.grow(end).map_err(|e| fail("write past the end", &e))?;
    }
    Ok(())
}

/// Write `data` at `off`, or at the end when `off` is `None` or the file is
/// open for appending; returns how many bytes it wrote (all of them, but
/// for a write cut at the largest file) and where the write ended.
fn write_at(d: &Desc, data: &[u8], off: Option<u64>) -> Result<(usize, u64), i32> {
    write_at_as(d, data, off, d.append())
}

/// [`write_at`], with the descriptor's `O_APPEND` taken as `appending` says
/// (`pwritev2`'s `RWF_NOAPPEND` writes at its offset on an appending one).
fn write_at_as(
    d: &Desc,
    data: &[u8],
    off: Option<u64>,
    appending: bool,
) -> Result<(usize, u64), i32> {
    let (written, end) = write_unsynced(d, data, off, appending)?;
    if !data.is_empty() {
        d.node.note_written();
        if d.status.load(Ordering::Relaxed) & (libc::O_SYNC | libc::O_DSYNC) != 0 || state::exited()
        {
            // O_SYNC and O_DSYNC: the write is durable when it returns (and
            // so is any write after the exit handler's sync).
            d.node.file.sync().map_err(|e| fail("write (O_SYNC)", &e))?;
        }
    }
    Ok((written, end))
}

fn write_unsynced(
    d: &Desc,
    data: &[u8],
    off: Option<u64>,
    appending: bool,
) -> Result<(usize, u64), i32> {
    if !d.writable {
        return Err(libc::EBADF);
    }
    let append = appending || off.is_none();
    // (An append's offset is checked at the end, below.)
    let checked_at = if append { 0 } else { off.unwrap_or(0) };
    check_direct(d, data.as_ptr() as usize, data.len(), checked_at)?;
    let f = &d.node.file;
    let n = data.len() as u64;
    let what = if append { "append" } else { "write" };
    let end_of = |at: u64| {
        at.checked_add(n)
            .filter(|&e| e <= i64::MAX as u64)
            .ok_or(libc::EFBIG)
    };
    if !append {
        let at = off.unwrap_or(0);
        let end = end_of(at)?;
        if n == 0 {
            return Ok((0, at));
        }
        if end <= d.node.len() {
            // Inside the file: no length changes. A write into a hole takes
            // its space first (under `grow`, as the length's changes).
            if end > d.node.whole.load(Ordering::Acquire) {
                let _g = lock(&d.node.grow);
                if end <= d.node.len() {
                    reserve_holes(d, at, end)?;
                }
            }
            match f.write_at(at, data) {
                Ok(_) => return Ok((data.len(), end)),
                // A shrink (another thread's `ftruncate`) cut the file
                // meanwhile: the write reaches past the new end, and grows
                // the file as below, as a local file system's would.
                Err(Error::OutOfRange { .. }) => {}
                Err(e) => return Err(fail(what, &e)),
            }
        }
    }
    // Past the end: one such write at a time, as a local file system's
    // writes take the file's lock, so that each grows the file once, in
    // order, and shows the new length only with its bytes in.
    let _g = lock(&d.node.grow);
    let size = d.node.len();
    let at = if append { size } else { off.unwrap_or(0) };
    if append {
        // An `O_DIRECT` append's offset is the end: aligned there, as the
        // kernel checks it.
        check_direct(d, data.as_ptr() as usize, data.len(), at)?;
    }
    end_of(at)?;
    if n == 0 {
        return Ok((0, at));
    }
    // As the kernel: a write from the largest file's end on fails, and one
    // that only ends past it writes the part before it (a short count).
    let largest = state::largest();
    if at >= largest {
        return Err(libc::EFBIG);
    }
    let data = &data[..(largest - at).min(n) as usize];
    let end = at + data.len() as u64;
    if at < size {
        // The part inside the file may lie in a hole.
        reserve_holes(d, at, size)?;
    }
    reserve_growth(d, at.max(size), end)?;
    // A file known whole up to its end stays so through a growth with no
    // hole before it.
    if at <= size && d.node.whole.load(Ordering::Acquire) >= size {
        let ps = page_size();
        d.node
            .whole
            .fetch_max(end.div_ceil(ps).saturating_mul(ps), Ordering::AcqRel);
    }
    grow_to(d, end)?;
    match f.write_at(at, data) {
        Ok(_) => {
            d.node.publish_end(end);
            Ok((data.len(), end))
        }
        Err(e) => {
            // A failed write leaves the file as long as it was: the growth
            // goes, with whatever part of the write lay past the old end (a
            // retried append then follows the last one whole, with no hole).
            if f.len() > size && f.set_len(size).is_err() {
                d.node.publish_len();
            }
            // The cut gave the space past the old end back.
            d.node.reserved.fetch_min(f.len(), Ordering::AcqRel);
            d.node.whole.fetch_min(f.len(), Ordering::AcqRel);
            Err(fail(what, &e))
        }
    }
}

/// The buffers of an iovec array; with `reading`, for a read, those up to
/// and with the first null buffer with bytes to move (which
/// [`read_iov`] reads nothing into).
unsafe fn iovs<'a>(iov: *const iovec, cnt: c_int, reading: bool) -> Result<&'a [iovec], i32> {
    if !(0..=libc::UIO_MAXIOV).contains(&cnt) {
        return Err(libc::EINVAL);
    }
    if cnt == 0 {
        return Ok(&[]);
    }
    user_buf(iov, cnt as usize)?;
    // SAFETY: the caller passes `cnt` iovecs at `iov`.
    let v = unsafe { std::slice::from_raw_parts(iov, cnt as usize) };
    let mut total = 0usize;
    for x in v {
        total = total
            .checked_add(x.iov_len)
            .filter(|&t| t <= isize::MAX as usize)
            .ok_or(libc::EINVAL)?;
    }
    // The kernel copies the buffers in order and stops at the first it
    // cannot reach: the ones before a null buffer with bytes to move are
    // moved (a short count), and with none of them to move it is `EFAULT`.
    let reachable = v
        .iter()
        .position(|x| x.iov_len > 0 && x.iov_base.is_null())
        .unwrap_or(v.len());
    if reading {
        return Ok(&v[..(reachable + 1).min(v.len())]);
    }
    let v = &v[..reachable];
    if reachable < cnt as usize && v.iter().all(|x| x.iov_len == 0) {
        return Err(libc::EFAULT);
    }
    Ok(v)
}

/// The bytes an iovec array asks to move, at most what one call moves (the
/// kernel's check of a positioned call's range counts those).
fn iov_total(iov: &[iovec]) -> usize {
    iov.iter()
        .fold(0usize, |t, v| t.saturating_add(v.iov_len))
        .min(MAX_RW)
}

unsafe fn read_iov(d: &Desc, iov: &[iovec], off: u64) -> Result<usize, i32> {
    // A descriptor not open for reading refuses even a read of nothing.
    if !d.readable {
        return Err(libc::EBADF);
    }
    // O_DIRECT's rule holds for each buffer, all checked before any is read
    // (a later misaligned one failed nothing: the read came back short).
    for v in iov.iter().filter(|v| v.iov_len > 0) {
        check_direct(d, v.iov_base as usize, v.iov_len, off)?;
    }
    let mut done = 0usize;
    for v in iov {
        if v.iov_len == 0 {
            continue;
        }
        if v.iov_base.is_null() {
            // The buffers before it are the call's (a short read); with none,
            // a read at the end reads nothing and one before it fails.
            if done > 0 {
                break;
            }
            return null_read(d, off);
        }
        // SAFETY: each iovec describes a writable buffer of the caller.
        let buf = unsafe { std::slice::from_raw_parts_mut(v.iov_base.cast::<u8>(), v.iov_len) };
        let n = match read_at(d, buf, off + done as u64) {
            Ok(n) => n,
            // What the earlier buffers got is the call's result, as the
            // kernel's short read.
            Err(_) if done > 0 => break,
            Err(e) => return Err(e),
        };
        done += n;
        if n < v.iov_len {
            break;
        }
    }
    Ok(done)
}

/// The most one call reads or writes, as the kernel's `MAX_RW_COUNT`: a
/// longer request is cut short there.
const MAX_RW: usize = 0x7fff_f000;

unsafe fn write_iov(
    d: &Desc,
    iov: &[iovec],
    off: Option<u64>,
    appending: bool,
) -> Result<(usize, u64), i32> {
    let total: usize = iov.iter().map(|v| v.iov_len).sum::<usize>().min(MAX_RW);
    let mut space: Vec<u8>;
    let joined: &[u8] = match iov.iter().filter(|v| v.iov_len > 0).count() {
        0 => &[],
        1 => {
            let v = iov.iter().find(|v| v.iov_len > 0).expect("one buffer");
            // SAFETY: the iovec describes a readable buffer of the caller.
            unsafe { std::slice::from_raw_parts(v.iov_base.cast::<u8>(), v.iov_len.min(MAX_RW)) }
        }
        _ => {
            // O_DIRECT's rule holds for each of the caller's buffers.
            for v in iov {
                check_direct(d, v.iov_base as usize, v.iov_len, 0)?;
            }
            // The copy that joins them is aligned to 4 KiB, so an `O_DIRECT`
            // descriptor's check of the joined bytes passes too; memory the
            // system refuses is `ENOMEM`, not an abort of the program.
            space = Vec::new();
            space
                .try_reserve_exact(total + 4096)
                .map_err(|_| libc::ENOMEM)?;
            space.resize(total + 4096, 0);
            let start = space.as_ptr().align_offset(4096);
            let all = &mut space[start..start + total];
            let mut at = 0;
            for v in iov {
                let n = v.iov_len.min(total - at);
                if n == 0 {
                    // An empty buffer may have no address at all.
                    continue;
                }
                // SAFETY: each iovec describes a readable buffer of the caller.
                let src = unsafe { std::slice::from_raw_parts(v.iov_base.cast::<u8>(), n) };
                all[at..at + n].copy_from_slice(src);
                at += n;
            }
            &all[..]
        }
    };
    let (written, end) = write_at_as(d, joined, off, appending)?;
    Ok((written.min(total), end))
}

/// A read into a null buffer at `off`: nothing to copy at or past the end
/// (0, as the kernel), `EFAULT` where there are bytes to copy.
fn null_read(d: &Desc, off: u64) -> Result<usize, i32> {
    if off >= d.node.len() {
        Ok(0)
    } else {
        Err(libc::EFAULT)
    }
}

fn pread_desc(d: &Desc, buf: *mut c_void, n: size_t, off: i64) -> Result<usize, i32> {
    let off = offset(off)?;
    if !d.readable {
        return Err(libc::EBADF);
    }
    let whole = n;
    let n = user_dest(buf, n)?;
    span(off, whole)?;
    if n == 0 {
        // A descriptor not open for reading refuses even a read of nothing.
        return if d.readable { Ok(0) } else { Err(libc::EBADF) };
    }
    if buf.is_null() {
        return null_read(d, off);
    }
    // SAFETY: the caller passes a writable buffer of `n` bytes.
    let buf = unsafe { std::slice::from_raw_parts_mut(buf.cast::<u8>(), n) };
    read_at(d, buf, off)
}

fn pwrite_desc(d: &Desc, buf: *const c_void, n: size_t, off: i64) -> Result<usize, i32> {
    let off = offset(off)?;
    if !d.writable {
        return Err(libc::EBADF);
    }
    let whole = n;
    let n = user_data(buf, n)?;
    span(off, whole)?;
    if n == 0 {
        return write_at(d, &[], Some(off)).map(|_| 0);
    }
    // SAFETY: the caller passes a readable buffer of `n` bytes.
    let data = unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), n) };
    write_at(d, data, Some(off)).map(|(written, _)| written)
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn pread64(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    off: off64_t,
) -> ssize_t {
    let r = match state::desc(fd) {
        // SAFETY: passed through with the caller's arguments.
        None => unsafe { real::pread64()(fd, buf, n, off) },
        Some(d) => size_ret(pread_desc(&d, buf, n, off)),
    };
    // A cancel sent while the store held cancellation off.
    state::cancel_point();
    r
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn pread(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    off: off_t,
) -> ssize_t {
    // SAFETY: the same function on 64-bit Linux, where the offset types agree.
    unsafe { pread64(fd, buf, n, off) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn __pread_chk(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    off: off_t,
    buflen: size_t,
) -> ssize_t {
    // SAFETY: the same function on 64-bit Linux, where the offset types agree.
    unsafe { __pread64_chk(fd, buf, n, off, buflen) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn pwrite64(
    fd: c_int,
    buf: *const c_void,
    n: size_t,
    off: off64_t,
) -> ssize_t {
    let r = match state::desc(fd) {
        // SAFETY: passed through with the caller's arguments.
        None => unsafe { real::pwrite64()(fd, buf, n, off) },
        Some(d) => size_ret(pwrite_desc(&d, buf, n, off)),
    };
    // A cancel sent while the store held cancellation off.
    state::cancel_point();
    r
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn pwrite(
    fd: c_int,
    buf: *const c_void,
    n: size_t,
    off: off_t,
) -> ssize_t {
    // SAFETY: the same function on 64-bit Linux, where the offset types agree.
    unsafe { pwrite64(fd, buf, n, off) }
}

fn read_pos(d: &Desc, buf: *mut c_void, n: size_t) -> Result<usize, i32> {
    if !d.readable {
        // As the kernel: the access mode first, even for no bytes.
        return Err(libc::EBADF);
    }
    let n = user_dest(buf, n)?;
    let mut pos = lock(&d.pos);
    if n == 0 {
        return Ok(0);
    }
    if buf.is_null() {
        return null_read(d, *pos);
    }
    // SAFETY: the caller passes a writable buffer of `n` bytes.
    let buf = unsafe { std::slice::from_raw_parts_mut(buf.cast::<u8>(), n) };
    let got = read_at(d, buf, *pos)?;
    *pos += got as u64;
    Ok(got)
}

fn write_pos(d: &Desc, data: &[u8]) -> Result<usize, i32> {
    let mut pos = lock(&d.pos);
    let at = if d.append() { None } else { Some(*pos) };
    let (written, end) = write_at(d, data, at)?;
    // A write of nothing leaves the position, even when appending (as Linux).
    if !data.is_empty() {
        *pos = end;
    }
    Ok(written)
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn read(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t {
    let r = match state::desc(fd) {
        // SAFETY: passed through with the caller's arguments.
        None => unsafe { real::read()(fd, buf, n) },
        Some(d) => size_ret(read_pos(&d, buf, n)),
    };
    // A cancel sent while the store held cancellation off.
    state::cancel_point();
    r
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn write(fd: c_int, buf: *const c_void, n: size_t) -> ssize_t {
    let r = match state::desc(fd) {
        // SAFETY: passed through with the caller's arguments.
        None => unsafe { real::write()(fd, buf, n) },
        Some(d) if !d.writable => size_ret(Err(libc::EBADF)),
        Some(d) => {
            let n = match user_data(buf, n) {
                Ok(n) => n,
                Err(e) => return size_ret(Err(e)),
            };
            let data: &[u8] = if n == 0 {
                &[]
            } else {
                // SAFETY: the caller passes a readable buffer of `n` bytes.
                unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), n) }
            };
            size_ret(write_pos(&d, data))
        }
    };
    // A cancel sent while the store held cancellation off.
    state::cancel_point();
    r
}

unsafe fn readv_desc(d: &Desc, iov: *const iovec, cnt: c_int, off: Option<i64>) -> ssize_t {
    // SAFETY: the caller's iovec array.
    let r = unsafe { iovs(iov, cnt, true) }.and_then(|v| match off {
        Some(o) => offset(o).and_then(|o| {
            if d.readable {
                span(o, iov_total(v))?;
            }
            // SAFETY: the caller's buffers.
            unsafe { read_iov(d, v, o) }
        }),
        None => {
            let mut pos = lock(&d.pos);
            // SAFETY: the caller's buffers.
            let n = unsafe { read_iov(d, v, *pos) }?;
            *pos += n as u64;
            Ok(n)
        }
    });
    size_ret(r)
}

/// A vectored write at `off` (the position when `None`), the descriptor's
/// `O_APPEND` taken as `appending` says.
unsafe fn writev_desc(
    d: &Desc,
    iov: *const iovec,
    cnt: c_int,
    off: Option<i64>,
    appending: bool,
) -> ssize_t {
    // SAFETY: the caller's iovec array.
    let r = unsafe { iovs(iov, cnt, false) }.and_then(|v| match off {
        Some(o) => offset(o).and_then(|o| {
            if d.writable {
                span(o, iov_total(v))?;
            }
            // SAFETY: the caller's buffers.
            unsafe { write_iov(d, v, Some(o), appending) }.map(|r| r.0)
        }),
        None => {
            let mut pos = lock(&d.pos);
            let at = if appending { None } else { Some(*pos) };
            // SAFETY: the caller's buffers.
            let (n, end) = unsafe { write_iov(d, v, at, appending) }?;
            if n > 0 {
                *pos = end;
            }
            Ok(n)
        }
    });
    size_ret(r)
}

/// `RWF_NOAPPEND` (Linux 6.9 on), which the libc crate does not name.
const RWF_NOAPPEND: c_int = 0x20;

/// The `preadv2`/`pwritev2` flags the store honours: a write with
/// `RWF_DSYNC` or `RWF_SYNC` is synced; `RWF_HIPRI` is a hint; `RWF_APPEND`
/// appends; `RWF_NOAPPEND` writes at the offset on a descriptor open for
/// appending (`EINVAL` beside `RWF_APPEND`, as in the kernel). Others
/// (`RWF_NOWAIT`, newer ones) are refused `EOPNOTSUPP`, as a file system
/// without them does, naming them. Returns whether to sync, and whether the
/// write appends.
fn rwf(d: &Desc, flags: c_int, write: bool) -> Result<(bool, bool), i32> {
    let known =
        libc::RWF_HIPRI | libc::RWF_DSYNC | libc::RWF_SYNC | libc::RWF_APPEND | RWF_NOAPPEND;
    let other = flags & !known;
    if other != 0 {
        let name = match other {
            libc::RWF_NOWAIT => " (RWF_NOWAIT)",
            _ => "",
        };
        return Err(unsupported(
            &format!("preadv2/pwritev2 with flags {other:#x}{name}"),
            libc::EOPNOTSUPP,
        ));
    }
    if flags & libc::RWF_APPEND != 0 && flags & RWF_NOAPPEND != 0 {
        return Err(libc::EINVAL);
    }
    let sync = write && flags & (libc::RWF_DSYNC | libc::RWF_SYNC) != 0;
    let append = if flags & RWF_NOAPPEND != 0 {
        false
    } else {
        flags & libc::RWF_APPEND != 0 || d.append()
    };
    Ok((sync, write && append))
}

macro_rules! vector_calls {
    ($($read:ident, $write:ident, $off:ty, $real_read:ident, $real_write:ident;)*) => {$(
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $read(fd: c_int, iov: *const iovec, cnt: c_int, off: $off) -> ssize_t {
            match state::desc(fd) {
                // SAFETY: passed through with the caller's arguments.
                None => unsafe { real::$real_read()(fd, iov, cnt, off) },
                // SAFETY: the caller's iovecs.
                Some(d) => unsafe { readv_desc(&d, iov, cnt, Some(off as i64)) },
            }
        }

        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $write(fd: c_int, iov: *const iovec, cnt: c_int, off: $off) -> ssize_t {
            match state::desc(fd) {
                // SAFETY: passed through with the caller's arguments.
                None => unsafe { real::$real_write()(fd, iov, cnt, off) },
                // SAFETY: the caller's iovecs.
                Some(d) => unsafe { writev_desc(&d, iov, cnt, Some(off as i64), d.append()) },
            }
        }
    )*};
}

vector_calls! {
    preadv, pwritev, off_t, preadv, pwritev;
    preadv64, pwritev64, off64_t, preadv64, pwritev64;
}

/// `preadv2`'s and `pwritev2`'s checks, in the kernel's order: a negative
/// offset other than -1, the access mode, the iovecs, a call that moves
/// nothing (`None`: it returns 0, whatever its flags), then the flags
/// ([`rwf`]).
unsafe fn vector2_checks(
    d: &Desc,
    iov: *const iovec,
    cnt: c_int,
    off: i64,
    flags: c_int,
    write: bool,
) -> Result<Option<(bool, bool)>, i32> {
    if off < -1 {
        return Err(libc::EINVAL);
    }
    if !(if write { d.writable } else { d.readable }) {
        return Err(libc::EBADF);
    }
    // SAFETY: the caller's iovec array.
    let v = unsafe { iovs(iov, cnt, !write) }?;
    if v.iter().all(|x| x.iov_len == 0) {
        return Ok(None);
    }
    rwf(d, flags, write).map(Some)
}

macro_rules! vector2_calls {
    ($($read:ident, $write:ident, $off:ty;)*) => {$(
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $read(fd: c_int, iov: *const iovec, cnt: c_int, off: $off, flags: c_int) -> ssize_t {
            match state::desc(fd) {
                // SAFETY: passed through with the caller's arguments.
                None => unsafe { real::$read()(fd, iov, cnt, off, flags) },
                // SAFETY: the caller's iovecs.
                Some(d) => match unsafe { vector2_checks(&d, iov, cnt, off as i64, flags, false) } {
                    Err(e) => size_ret(Err(e)),
                    Ok(None) => 0,
                    // SAFETY: the caller's iovecs.
                    Ok(Some(_)) => unsafe { readv_desc(&d, iov, cnt, (off != -1).then_some(off as i64)) },
                },
            }
        }

        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $write(fd: c_int, iov: *const iovec, cnt: c_int, off: $off, flags: c_int) -> ssize_t {
            match state::desc(fd) {
                // SAFETY: passed through with the caller's arguments.
                None => unsafe { real::$write()(fd, iov, cnt, off, flags) },
                // SAFETY: the caller's iovecs.
                Some(d) => match unsafe { vector2_checks(&d, iov, cnt, off as i64, flags, true) } {
                    Err(e) => size_ret(Err(e)),
                    Ok(None) => 0,
                    Ok(Some((sync, append))) => {
                        let at = if append || off == -1 { None } else { Some(off as i64) };
                        let n = if append {
                            // At the end; with offset -1 the file position
                            // moves past what was written, as on Linux.
                            let pos = (off == -1).then(|| lock(&d.pos));
                            // SAFETY: the caller's iovecs.
                            match unsafe { iovs(iov, cnt, false) }.and_then(|v| unsafe { write_iov(&d, v, None, true) }) {
                                Ok((n, end)) => {
                                    // Nothing written: the position stays, as on Linux.
                                    if let Some(mut pos) = pos.filter(|_| n > 0) {
                                        *pos = end;
                                    }
                                    n as ssize_t
                                }
                                Err(e) => size_ret(Err(e)),
                            }
                        } else {
                            // SAFETY: the caller's iovecs.
                            unsafe { writev_desc(&d, iov, cnt, at, false) }
                        };
                        if n >= 0 && sync {
                            if let Err(e) = d.node.file.sync() {
                                return size_ret(Err(fail("pwritev2 (RWF_SYNC)", &e)));
                            }
                        }
                        n
                    }
                },
            }
        }
    )*};
}

vector2_calls! {
    preadv2, pwritev2, off_t;
    preadv64v2, pwritev64v2, off64_t;
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn readv(fd: c_int, iov: *const iovec, cnt: c_int) -> ssize_t {
    let r = match state::desc(fd) {
        // SAFETY: passed through with the caller's arguments.
        None => unsafe { real::readv()(fd, iov, cnt) },
        // SAFETY: the caller's iovecs.
        Some(d) => unsafe { readv_desc(&d, iov, cnt, None) },
    };
    // A cancel sent while the store held cancellation off.
    state::cancel_point();
    r
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn writev(fd: c_int, iov: *const iovec, cnt: c_int) -> ssize_t {
    let r = match state::desc(fd) {
        // SAFETY: passed through with the caller's arguments.
        None => unsafe { real::writev()(fd, iov, cnt) },
        // SAFETY: the caller's iovecs.
        Some(d) => unsafe { writev_desc(&d, iov, cnt, None, d.append()) },
    };
    // A cancel sent while the store held cancellation off.
    state::cancel_point();
    r
}

fn seek(d: &Desc, off: i64, whence: c_int) -> Result<u64, i32> {
    if d.path_only() {
        return Err(libc::EBADF);
    }
    let mut pos = lock(&d.pos);
    let len = d.node.len() as i64;
    let new = match whence {
        libc::SEEK_SET => off,
        // As the kernel's `vfs_setpos`: past the largest offset is EINVAL.
        libc::SEEK_CUR => (*pos as i64).checked_add(off).ok_or(libc::EINVAL)?,
        libc::SEEK_END => len.checked_add(off).ok_or(libc::EINVAL)?,
        libc::SEEK_DATA | libc::SEEK_HOLE if off < 0 || off >= len => return Err(libc::ENXIO),
        libc::SEEK_DATA => off,
        libc::SEEK_HOLE => len,
        _ => return Err(libc::EINVAL),
    };
    // Past the largest file too, as `vfs_setpos` answers past a file
    // system's largest.
    if new < 0 || new as u64 > state::largest() {
        return Err(libc::EINVAL);
    }
    *pos = new as u64;
    Ok(*pos)
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn lseek64(fd: c_int, off: off64_t, whence: c_int) -> off64_t {
    match state::desc(fd) {
        // SAFETY: passed through with the caller's arguments.
        None => unsafe { real::lseek64()(fd, off, whence) },
        Some(d) => off_ret(seek(&d, off, whence)),
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn lseek(fd: c_int, off: off_t, whence: c_int) -> off_t {
    // SAFETY: the same function on 64-bit Linux, where the offset types agree.
    unsafe { lseek64(fd, off, whence) }
}

// ---- durability, length, hints ----------------------------------------

fn sync_desc(d: &Desc) -> c_int {
    if d.path_only() {
        return int_ret(Err(libc::EBADF));
    }
    int_ret(d.node.file.sync().map(|_| 0).map_err(|e| fail("fsync", &e)))
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn fsync(fd: c_int) -> c_int {
    let r = match state::desc(fd) {
        // SAFETY: passed through with the caller's arguments.
        None => unsafe { real::fsync()(fd) },
        Some(d) => sync_desc(&d),
    };
    // A cancel sent while the store held cancellation off.
    state::cancel_point();
    r
}

/// `pthread_exit`: from the main thread of a process whose store is open,
/// the process would otherwise never end (the store's own threads live on
/// after the program's last thread); a thread of the store's ends it, as the
/// program's last thread ending would, once only the store's threads are
/// left. Any other call goes to the C library.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn pthread_exit(retval: *mut c_void) -> ! {
    // SAFETY: plain getters.
    if unsafe { libc::gettid() == libc::getpid() } {
        state::end_with_the_program();
    }
    // SAFETY: the caller's argument, passed on.
    unsafe { real::pthread_exit()(retval) }
}

/// `_exit` (and `_Exit`): no exit handler runs, yet a local file system
/// keeps what the process wrote (the kernel holds it): the store's dirty
/// pages and lengths are written and synced first (`sh` ends every script
/// so, after its `echo`s into files). Stdio's buffers are dropped, as the
/// C library's `_exit` drops them.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn _exit(status: c_int) -> ! {
    state::sync_before_exit();
    // SAFETY: the caller's argument, passed on.
    unsafe { real::_exit()(status) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn _Exit(status: c_int) -> ! {
    state::sync_before_exit();
    // SAFETY: the caller's argument, passed on.
    unsafe { real::_Exit()(status) }
}

/// `quick_exit` runs the handlers `at_quick_exit` registered and then the C
/// library's own `_exit`, which this library cannot stand in for: the
/// store's sync is registered as the first of those handlers (so that it
/// runs last, after any that write files), before the program's first
/// `at_quick_exit` or at `quick_exit` itself.
fn quick_sync_registered() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        unsafe extern "C" fn quick_sync() {
            state::sync_before_exit();
        }
        // SAFETY: registers a plain function with no arguments, as the main program's.
        unsafe { real::__cxa_at_quick_exit()(Some(quick_sync), std::ptr::null_mut()) };
    });
}

/// `at_quick_exit` (which the C library's static part turns into this).
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn __cxa_at_quick_exit(
    f: Option<unsafe extern "C" fn()>,
    dso: *mut c_void,
) -> c_int {
    quick_sync_registered();
    // SAFETY: the caller's arguments, passed on.
    unsafe { real::__cxa_at_quick_exit()(f, dso) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn quick_exit(status: c_int) -> ! {
    quick_sync_registered();
    // SAFETY: the caller's argument, passed on.
    unsafe { real::quick_exit()(status) }
}

/// `chdir` into a file of the store: it is no directory (`ENOTDIR`), or
/// not there (`ENOENT`), as the kernel says of a path through a regular
/// file; anywhere else, the kernel's.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn chdir(path: *const c_char) -> c_int {
    match classify(libc::AT_FDCWD, path) {
        Place::Inside(name) => {
            let there = state::state().is_ok_and(|s| state::len_of(&s, &name).is_ok());
            int_ret(Err(if there { libc::ENOTDIR } else { libc::ENOENT }))
        }
        Place::Bad(e) => int_ret(Err(e)),
        // SAFETY: passed through with the caller's argument.
        Place::Outside | Place::Root => unsafe { real::chdir()(path) },
    }
}

/// `sync`: the store's dirty pages and lengths too, as a local file
/// system's would be.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn sync() {
    let _ = state::sync_store("sync");
    // SAFETY: no arguments.
    unsafe { real::sync()() };
}

/// `syncfs` of a store file's descriptor syncs the store; any other goes to
/// the kernel.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn syncfs(fd: c_int) -> c_int {
    match state::desc(fd) {
        // SAFETY: passed through with the caller's arguments.
        None => unsafe { real::syncfs()(fd) },
        // The kernel takes no `O_PATH` descriptor here.
        Some(d) if d.path_only() => int_ret(Err(libc::EBADF)),
        Some(_) => int_ret(state::sync_store("syncfs").map(|()| 0)),
    }
}

// ---- exec ----------------------------------------------------------------
//
// An `exec` ends this image without its exit handlers: the store's dirty
// pages and lazy growths would go with it, where a local file system keeps
// what a process wrote for the program it becomes. So each `exec` function
// syncs the store first (`execl`, `execle` and `execlp` below).

/// `vfork` is served as `fork`, which POSIX allows: a child of `vfork`
/// shares this process's memory, so its calls before its `exec` (the
/// `close_range` and `dup2` a subprocess module makes, the `exec` itself)
/// would change the parent's descriptor table and store, and a sync there
/// would run on the parent's rings. A child of `fork` has its own copy,
/// which this library knows to leave alone.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn vfork() -> libc::pid_t {
    // SAFETY: no arguments.
    unsafe { real::fork()() }
}

/// `posix_spawn`'s file actions run inside the C library, in the child,
/// where this library does not stand in: an open of a store file there
/// would make a real file in `SETCACHE_DIR` that no call of the store sees.
/// Refused with `EINVAL`, with a message (the store's files are the
/// process's own: a program started by `posix_spawn` opens them itself,
/// under the library in its turn).
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn posix_spawn_file_actions_addopen(
    actions: *mut libc::posix_spawn_file_actions_t,
    fd: c_int,
    path: *const c_char,
    flags: c_int,
    mode: libc::mode_t,
) -> c_int {
    if !matches!(
        classify_as(libc::AT_FDCWD, path, follows_open(flags)),
        Place::Outside | Place::Root
    ) {
        warn_once(
            "spawn open",
            "posix_spawn_file_actions_addopen of a file in SETCACHE_DIR refused (EINVAL): the spawned program would open a real file there, outside the store",
        );
        return libc::EINVAL;
    }
    // SAFETY: passed through with the caller's arguments.
    unsafe { real::posix_spawn_file_actions_addopen()(actions, fd, path, flags, mode) }
}

/// `_Fork` runs no `atfork` handler: its child is marked here.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn _Fork() -> libc::pid_t {
    // SAFETY: no arguments.
    let pid = unsafe { real::_Fork()() };
    if pid == 0 {
        state::mark_forked();
    }
    pid
}

/// Before the image is replaced: what this process wrote is synced. A
/// failure refuses the `exec` with its error number (`EIO`, `ENOSPC`), also
/// reported on stderr: the new image would drop the pages the sync could
/// not write, which this one still holds (a later sync may write them, or
/// the program decides). (Not safe in a signal handler, which `execve`
/// alone is: a handler that `exec`s while the thread it interrupted holds
/// one of the locks a sync takes waits for ever.)
fn before_exec() -> Result<(), i32> {
    state::sync_store("exec (writing the store's data first)")
}

/// Whether `path` (from `dirfd`) names a program the kernel could not run
/// because it is in the store: a store file is no executable (`EACCES`, as
/// the kernel says of a file without execute permission), a missing name
/// `ENOENT`. `None` for a path outside the store.
fn store_exec(dirfd: c_int, path: *const c_char) -> Option<c_int> {
    if path.is_null() {
        return None;
    }
    match classify(dirfd, path) {
        Place::Inside(name) => {
            let there = state::state().is_ok_and(|s| state::len_of(&s, &name).is_ok());
            Some(if there { libc::EACCES } else { libc::ENOENT })
        }
        Place::Bad(e) => Some(e),
        Place::Outside | Place::Root => None,
    }
}

/// As [`store_exec`] for a name `execvp` searches `PATH` for unless it
/// holds a slash (a search is the C library's own).
fn store_exec_searched(file: *const c_char) -> Option<c_int> {
    // SAFETY: the caller's name, a C string.
    if file.is_null() || !unsafe { CStr::from_ptr(file) }.to_bytes().contains(&b'/') {
        return None;
    }
    store_exec(libc::AT_FDCWD, file)
}

/// As [`store_exec`] for `execveat`: with `AT_EMPTY_PATH` and an empty
/// path, the descriptor itself is the program.
fn store_exec_at(dirfd: c_int, path: *const c_char, flags: c_int) -> Option<c_int> {
    // SAFETY: the caller's path, a C string.
    if flags & libc::AT_EMPTY_PATH != 0 && !path.is_null() && unsafe { *path } == 0 {
        return state::desc(dirfd).map(|_| libc::EACCES);
    }
    store_exec(dirfd, path)
}

unsafe extern "C" {
    /// The process's environment, which `execv` and `execvp` pass on.
    static environ: *const *const c_char;
}

/// The `exec` functions: a store file refused as the kernel refuses a file
/// it cannot run (`check`), else the store synced, then the C library's own,
/// with the store descriptors the new image inherits named in its
/// environment (`inherit`): `env` is the environment the call passes on,
/// `call` the C library's call given the new one as `$e`.
macro_rules! exec_after_sync {
    ($($name:ident($($arg:ident: $ty:ty),*) if $check:expr; env $env:expr => |$e:ident| $call:expr;)*) => {$(
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> c_int {
            if let Some(e) = $check {
                return int_ret(Err(e));
            }
            if let Err(e) = before_exec() {
                return int_ret(Err(e));
            }
            // SAFETY: the environment the call passes on, a null-ended array of C strings.
            match unsafe { crate::inherit::env_for($env) } {
                Some(new) => {
                    let $e = new.as_ptr();
                    // SAFETY: the caller's arguments, with the new environment.
                    unsafe { $call }
                }
                // SAFETY: passed through with the caller's arguments.
                None => unsafe { real::$name()($($arg),*) },
            }
        }
    )*};
}

exec_after_sync! {
    execve(path: *const c_char, argv: *const *const c_char, envp: *const *const c_char)
        if store_exec(libc::AT_FDCWD, path);
        env envp => |e| real::execve()(path, argv, e);
    execv(path: *const c_char, argv: *const *const c_char)
        if store_exec(libc::AT_FDCWD, path);
        env environ => |e| real::execve()(path, argv, e);
    execvp(file: *const c_char, argv: *const *const c_char)
        if store_exec_searched(file);
        env environ => |e| real::execvpe()(file, argv, e);
    execvpe(file: *const c_char, argv: *const *const c_char, envp: *const *const c_char)
        if store_exec_searched(file);
        env envp => |e| real::execvpe()(file, argv, e);
    fexecve(fd: c_int, argv: *const *const c_char, envp: *const *const c_char)
        if state::desc(fd).map(|_| libc::EACCES);
        env envp => |e| real::fexecve()(fd, argv, e);
    execveat(
        dirfd: c_int,
        path: *const c_char,
        argv: *const *const c_char,
        envp: *const *const c_char,
        flags: c_int
    ) if store_exec_at(dirfd, path, flags);
        env envp => |e| real::execveat()(dirfd, path, argv, e, flags);
}

// ---- execl, execle, execlp --------------------------------------------------
//
// These take their list as C variadic arguments, which a stable Rust function
// cannot declare. Each is a naked function instead: it stores the argument
// registers that may hold the list's first entries beside the address of the
// caller's stack arguments (where the x86-64 and AArch64 Linux conventions
// put the rest, in 8-byte slots, named or variadic alike) and calls
// `exec_listed`, which reads the entries one by one up to the list's null end
// (and, for `execle`, the environment after it), no further, and passes them
// to the `v` form above, which syncs the store first.

/// Which `execl` function a trampoline stands for.
const EXECL: c_int = 0;
const EXECLP: c_int = 1;
const EXECLE: c_int = 2;

/// The list entries that arrive in registers: x86-64 passes the path and the
/// first five entries in registers, AArch64 the path and the first seven.
#[cfg(target_arch = "x86_64")]
const IN_REGISTERS: usize = 5;
#[cfg(target_arch = "aarch64")]
const IN_REGISTERS: usize = 7;

/// Entry `i` of a list whose first `IN_REGISTERS` entries the trampoline
/// stored at `regs` and whose others are at `stack`.
///
/// # Safety
/// `i` is at most one past the list's null end (`execle`'s environment).
unsafe fn list_entry(
    regs: *const *const c_char,
    stack: *const *const c_char,
    i: usize,
) -> *const c_char {
    // SAFETY: the caller's list reaches entry `i` (see above); each entry is
    // read only once the ones before it were found not null.
    unsafe {
        if i < IN_REGISTERS {
            regs.add(i).read()
        } else {
            stack.add(i - IN_REGISTERS).read()
        }
    }
}

/// The body of `execl`, `execlp` and `execle` (`which`): the list copied out
/// up to and with its null end, then the `v` form.
///
/// # Safety
/// Called only by the trampolines below: `regs` holds the list's entries
/// passed in registers, `stack` points at the caller's stack arguments.
// SAFETY: the contract above is the trampolines' to keep; each read of the
// list inside is its own unsafe block.
unsafe extern "C" fn exec_listed(
    path: *const c_char,
    regs: *const *const c_char,
    stack: *const *const c_char,
    which: c_int,
) -> c_int {
    let mut argv = Vec::with_capacity(16);
    loop {
        // SAFETY: entries up to the null end are the caller's.
        let a = unsafe { list_entry(regs, stack, argv.len()) };
        argv.push(a);
        if a.is_null() {
            break;
        }
    }
    // SAFETY: the caller's path, its list with its null end, and for
    // `execle` the environment that follows the null end.
    unsafe {
        match which {
            EXECLP => execvp(path, argv.as_ptr()),
            EXECLE => {
                let envp = list_entry(regs, stack, argv.len()).cast::<*const c_char>();
                execve(path, argv.as_ptr(), envp)
            }
            _ => execv(path, argv.as_ptr()),
        }
    }
}

/// A trampoline: the list's register entries stored in a frame of its own,
/// `exec_listed(path, frame, caller's stack arguments, which)` called.
macro_rules! execl_trampoline {
    ($name:ident, $which:expr) => {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a naked function of assembly only, which keeps the ABI's
        // stack alignment and passes the C caller's arguments on unchanged.
        #[unsafe(naked)]
        // SAFETY: the C library's own name, which this library stands in for
        // with the same signature.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name() -> c_int {
            // At entry the stack pointer is 8 past a 16-byte boundary (the
            // return address); 56 bytes keep the call below aligned. rdi
            // (the path) stays as the first argument.
            core::arch::naked_asm!(
                "sub rsp, 56",
                "mov [rsp], rsi",
                "mov [rsp + 8], rdx",
                "mov [rsp + 16], rcx",
                "mov [rsp + 24], r8",
                "mov [rsp + 32], r9",
                "mov rsi, rsp",
                "lea rdx, [rsp + 64]",
                "mov ecx, {which}",
                "call {body}",
                "add rsp, 56",
                "ret",
                which = const $which,
                body = sym exec_listed,
            )
        }

        #[cfg(target_arch = "aarch64")]
        // SAFETY: as for x86-64: assembly only, the stack kept aligned.
        #[unsafe(naked)]
        // SAFETY: as for x86-64: the C library's name and signature.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name() -> c_int {
            // x1-x7 stored, the link register beside them; sp stays 16-byte
            // aligned. x0 (the path) stays as the first argument.
            core::arch::naked_asm!(
                "sub sp, sp, #64",
                "stp x1, x2, [sp]",
                "stp x3, x4, [sp, #16]",
                "stp x5, x6, [sp, #32]",
                "stp x7, x30, [sp, #48]",
                "mov x1, sp",
                "add x2, sp, #64",
                "mov w3, #{which}",
                "bl {body}",
                "ldr x30, [sp, #56]",
                "add sp, sp, #64",
                "ret",
                which = const $which,
                body = sym exec_listed,
            )
        }
    };
}

execl_trampoline!(execl, EXECL);
execl_trampoline!(execlp, EXECLP);
execl_trampoline!(execle, EXECLE);

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn fdatasync(fd: c_int) -> c_int {
    let r = match state::desc(fd) {
        // SAFETY: passed through with the caller's arguments.
        None => unsafe { real::fdatasync()(fd) },
        Some(d) => sync_desc(&d),
    };
    // A cancel sent while the store held cancellation off.
    state::cancel_point();
    r
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn sync_file_range(
    fd: c_int,
    off: off64_t,
    n: off64_t,
    flags: c_uint,
) -> c_int {
    match state::desc(fd) {
        // SAFETY: passed through with the caller's arguments.
        None => unsafe { real::sync_file_range()(fd, off, n, flags) },
        // In the kernel's order: the descriptor, then the flags and range.
        Some(d) if d.path_only() => int_ret(Err(libc::EBADF)),
        Some(_)
            if off < 0
                || n < 0
                || off.checked_add(n).is_none()
                || flags
                    & !(libc::SYNC_FILE_RANGE_WAIT_BEFORE
                        | libc::SYNC_FILE_RANGE_WRITE
                        | libc::SYNC_FILE_RANGE_WAIT_AFTER)
                    != 0 =>
        {
            int_ret(Err(libc::EINVAL))
        }
        // Waiting for the range's write-back: the whole file is synced.
        Some(d) if flags & libc::SYNC_FILE_RANGE_WAIT_AFTER != 0 => sync_desc(&d),
        // Starting write-back: the flusher does that on its own.
        Some(_) => 0,
    }
}

fn set_len(d: &Desc, len: i64) -> Result<c_int, i32> {
    if d.path_only() {
        return Err(libc::EBADF);
    }
    let len = offset(len)?;
    if !d.writable {
        return Err(libc::EINVAL);
    }
    if len > state::largest() {
        return Err(libc::EFBIG);
    }
    let _g = lock(&d.node.grow);
    d.node.note_written();
    let f = &d.node.file;
    // Growing needs no logged operation: the next fsync makes it durable.
    let r = if len > f.len() {
        f.grow(len)
    } else {
        f.set_len(len)
    };
    d.node.publish_len();
    r.map_err(|e| fail("ftruncate", &e))?;
    synced_after_exit(d, "ftruncate")?;
    Ok(0)
}

/// After the exit handler's sync, a growth (lazy: durable with the next
/// sync, which no exit will make now) is synced before its call returns,
/// as every write then is.
fn synced_after_exit(d: &Desc, what: &str) -> Result<(), i32> {
    if state::exited() {
        d.node.file.sync().map_err(|e| fail(what, &e))?;
    }
    Ok(())
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn ftruncate64(fd: c_int, len: off64_t) -> c_int {
    match state::desc(fd) {
        // SAFETY: passed through with the caller's arguments.
        None => unsafe { real::ftruncate64()(fd, len) },
        Some(d) => int_ret(set_len(&d, len)),
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn ftruncate(fd: c_int, len: off_t) -> c_int {
    // SAFETY: the same function on 64-bit Linux, where the offset types agree.
    unsafe { ftruncate64(fd, len) }
}

fn truncate_path(s: &State, name: &str, len: i64) -> Result<c_int, i32> {
    let len = offset(len)?;
    let n =
        state::node(s, name, false, false, false).map_err(missing_is_enoent("truncate", name))?;
    if len > s.cs.max_file_len() {
        return Err(libc::EFBIG);
    }
    let _g = lock(&n.grow);
    n.note_written();
    let r = n.file.set_len(len);
    n.publish_len();
    match r {
        // The name named this file when it was looked up (a rename or an
        // unlink changes the table of names and the store together): one
        // that took the file away since came after this truncate, whose
        // file it then replaced or removed, as the kernel's would have.
        Err(Error::FileGone(_)) => Ok(0),
        r => r.map(|()| 0).map_err(|e| fail("truncate", &e)),
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn truncate(path: *const c_char, len: off_t) -> c_int {
    // SAFETY: the same function on 64-bit Linux, where the offset types agree.
    unsafe { truncate64(path, len) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn truncate64(path: *const c_char, len: off64_t) -> c_int {
    match classify_as(libc::AT_FDCWD, path, true) {
        Place::Bad(e) => int_ret(Err(e)),
        Place::Inside(name) => int_ret(state::state().and_then(|s| truncate_path(&s, &name, len))),
        Place::Root => int_ret(Err(libc::EISDIR)),
        // SAFETY: passed through with the caller's arguments.
        Place::Outside => unsafe { real::truncate64()(path, len) },
    }
}

/// The `fallocate` mode bits Linux knows (keep size, punch, no hide stale,
/// collapse, zero, insert, unshare, write zeroes).
const FALLOC_FL_KNOWN: c_int = 0xff;

/// `fallocate`: the range's space is reserved on the devices (so that
/// writes there cannot fail later for want of it), and mode 0 grows the file
/// to cover the range, which `FALLOC_FL_KEEP_SIZE` does not; holes and ranges
/// (punch, zero, collapse, insert) are refused. With `posix`
/// (`posix_fallocate`), devices whose file system cannot allocate ahead get
/// the growth alone, as the C library's own emulation would give them.
fn allocate(d: &Desc, mode: c_int, off: i64, len: i64, posix: bool) -> Result<c_int, i32> {
    // In the kernel's order (`vfs_fallocate`): the range, mode bits no
    // kernel knows, the access mode, a range past the largest file; then
    // the modes this file system refuses.
    if off < 0 || len <= 0 {
        return Err(libc::EINVAL);
    }
    if mode & !FALLOC_FL_KNOWN != 0 {
        return Err(libc::EOPNOTSUPP);
    }
    if !d.writable {
        return Err(libc::EBADF);
    }
    let end = (off as u64)
        .checked_add(len as u64)
        .filter(|&e| e <= state::largest())
        .ok_or(libc::EFBIG)?;
    if mode & !libc::FALLOC_FL_KEEP_SIZE != 0 {
        return Err(unsupported(
            "fallocate with punch, zero, collapse or insert ranges",
            libc::EOPNOTSUPP,
        ));
    }
    // Under the growth lock, as the kernel's is under the inode's: no cut
    // comes between the reservation and the growth.
    let _g = lock(&d.node.grow);
    match d.node.file.reserve(off as u64, len as u64) {
        Ok(()) => {}
        Err(e) if posix && e.errno() == Some(libc::EOPNOTSUPP) => {}
        // Space the devices lack is the caller's to handle, as the kernel's
        // answer would be: no warning.
        Err(e) => {
            return Err(match e.errno() {
                Some(
                    n
                    @ (libc::ENOSPC | libc::EDQUOT | libc::EFBIG | libc::EOPNOTSUPP | libc::EINTR),
                ) => n,
                _ => fail("fallocate", &e),
            });
        }
    }
    if mode & libc::FALLOC_FL_KEEP_SIZE != 0 {
        if end > d.node.len() {
            d.node.kept_past.store(true, Ordering::Release);
        }
        return Ok(0);
    }
    let r = grow_to(d, end);
    d.node.publish_len();
    r?;
    synced_after_exit(d, "fallocate")?;
    Ok(0)
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn fallocate64(
    fd: c_int,
    mode: c_int,
    off: off64_t,
    len: off64_t,
) -> c_int {
    match state::desc(fd) {
        // SAFETY: passed through with the caller's arguments.
        None => unsafe { real::fallocate64()(fd, mode, off, len) },
        Some(d) => int_ret(allocate(&d, mode, off, len, false)),
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn fallocate(fd: c_int, mode: c_int, off: off_t, len: off_t) -> c_int {
    // SAFETY: the same function on 64-bit Linux, where the offset types agree.
    unsafe { fallocate64(fd, mode, off, len) }
}

/// `posix_fallocate` returns the error instead of setting errno.
fn allocate_posix(d: &Desc, off: i64, len: i64) -> c_int {
    match allocate(d, 0, off, len, true) {
        Ok(_) => 0,
        Err(e) => e,
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn posix_fallocate64(fd: c_int, off: off64_t, len: off64_t) -> c_int {
    match state::desc(fd) {
        // SAFETY: passed through with the caller's arguments.
        None => unsafe { real::posix_fallocate64()(fd, off, len) },
        Some(d) => allocate_posix(&d, off, len),
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn posix_fallocate(fd: c_int, off: off_t, len: off_t) -> c_int {
    // SAFETY: the same function on 64-bit Linux, where the offset types agree.
    unsafe { posix_fallocate64(fd, off, len) }
}

/// `posix_fadvise` on a file of the store: the hints of
/// [`setcache::CachedFile::advise`]; returns the error number.
fn fadvise(d: &Desc, off: i64, len: i64, advice: c_int) -> c_int {
    if d.path_only() {
        return libc::EBADF;
    }
    // The kernel refuses a negative length, not a negative offset (a range
    // advice there concerns no page of the file).
    if len < 0 {
        return libc::EINVAL;
    }
    let a = match advice {
        libc::POSIX_FADV_NORMAL => Advice::Normal,
        libc::POSIX_FADV_SEQUENTIAL => Advice::Sequential,
        libc::POSIX_FADV_RANDOM => Advice::Random,
        libc::POSIX_FADV_WILLNEED => Advice::WillNeed,
        libc::POSIX_FADV_DONTNEED => Advice::DontNeed,
        libc::POSIX_FADV_NOREUSE => return 0,
        _ => return libc::EINVAL,
    };
    if off < 0 && matches!(a, Advice::WillNeed | Advice::DontNeed) {
        return 0;
    }
    let off = off.max(0);
    let f = &d.node.file;
    let file_len = f.len();
    let (off, len) = (off as u64, len as u64);
    if off >= file_len && !matches!(a, Advice::Normal | Advice::Sequential | Advice::Random) {
        return 0;
    }
    let off = off.min(file_len);
    let len = if len == 0 { 0 } else { len.min(file_len - off) };
    let len = if len == 0 && off < file_len {
        file_len - off
    } else {
        len
    };
    match f.advise(off, len, a) {
        Ok(()) => 0,
        Err(e) => fail("posix_fadvise", &e),
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn posix_fadvise64(
    fd: c_int,
    off: off64_t,
    len: off64_t,
    advice: c_int,
) -> c_int {
    match state::desc(fd) {
        // SAFETY: passed through with the caller's arguments.
        None => unsafe { real::posix_fadvise64()(fd, off, len, advice) },
        Some(d) => fadvise(&d, off, len, advice),
    }
}

/// `readahead` of a file of the store: its `WillNeed` hint, as the kernel's
/// is `POSIX_FADV_WILLNEED`'s (a descriptor not open for reading refused).
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn readahead(fd: c_int, off: off64_t, n: size_t) -> ssize_t {
    match state::desc(fd) {
        // SAFETY: passed through with the caller's arguments.
        None => unsafe { real::readahead()(fd, off, n) },
        Some(d) if d.path_only() || !d.readable => size_ret(Err(libc::EBADF)),
        Some(d) => {
            // The count becomes the advice's signed length, as in the
            // kernel: one from 2^63 on is negative, and refused.
            match fadvise(&d, off, n as i64, libc::POSIX_FADV_WILLNEED) {
                0 => 0,
                e => size_ret(Err(e)),
            }
        }
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn posix_fadvise(
    fd: c_int,
    off: off_t,
    len: off_t,
    advice: c_int,
) -> c_int {
    // SAFETY: the same function on 64-bit Linux, where the offset types agree.
    unsafe { posix_fadvise64(fd, off, len, advice) }
}

// ---- open and close ----------------------------------------------------

/// Open file `name` of the store with `flags`: a placeholder descriptor.
pub(crate) fn open_inside(name: &str, flags: c_int) -> Result<c_int, i32> {
    if flags & libc::O_DIRECTORY != 0 && flags & libc::O_CREAT != 0 {
        // Refused by the kernel before anything else.
        return Err(libc::EINVAL);
    }
    let s = state::state()?;
    if flags & libc::O_TMPFILE == libc::O_TMPFILE {
        return Err(unsupported("O_TMPFILE in SETCACHE_DIR", libc::EOPNOTSUPP));
    }
    if flags & libc::O_DIRECTORY != 0 {
        return Err(crate::path::not_a_directory(name));
    }
    // The placeholder first, as the kernel takes a descriptor number before
    // it creates or truncates anything: an open that fails for want of a
    // descriptor leaves the file as it was.
    let cfg = state::config().ok_or(libc::EINVAL)?;
    // SAFETY: opens the store's directory by its C string.
    let fd = unsafe {
        real::openat64()(
            libc::AT_FDCWD,
            cfg.dir_c.as_ptr(),
            libc::O_PATH | (flags & libc::O_CLOEXEC),
        )
    };
    if fd < 0 {
        // SAFETY: reads this thread's errno.
        return Err(unsafe { *libc::__errno_location() });
    }
    let r = usize::try_from(fd)
        .ok()
        .filter(|&f| f < state::MAX_FD)
        .ok_or(libc::EMFILE)
        .and_then(|_| open_as(&s, name, flags, fd));
    if r.is_err() {
        // SAFETY: closes the placeholder just made.
        unsafe { real::close()(fd) };
    } else if fd < 3 {
        // At a free 0, 1 or 2 (after its `close`): the standard stream
        // follows, as the kernel's number would carry it.
        stdio::after_std_copy(fd, true);
    }
    r.map(|()| fd)
}

/// The rest of [`open_inside`], once placeholder `fd` is made: the file
/// found or made, truncated with `O_TRUNC`, and `fd` standing for it.
pub(crate) fn open_as(s: &state::State, name: &str, flags: c_int, fd: c_int) -> Result<(), i32> {
    let path_only = flags & libc::O_PATH != 0;
    let acc = flags & libc::O_ACCMODE;
    let create = flags & libc::O_CREAT != 0 && !path_only;
    let excl = flags & libc::O_EXCL != 0;
    let writable = !path_only && (acc == libc::O_WRONLY || acc == libc::O_RDWR);
    let node = state::node(s, name, create, excl, writable).map_err(|e| match e {
        Error::FileNotFound(_) | Error::FileExists(_) => e.posix_errno(),
        // A name the store cannot hold names no file of it; a create of one
        // is refused with the store's reason.
        Error::InvalidName { .. } if !create => no_such_name(name),
        e => fail("open", &e),
    })?;
    let readable = !path_only && (acc == libc::O_RDONLY || acc == libc::O_RDWR);
    // As Linux: `O_TRUNC` empties the file whatever the access mode (an
    // `O_RDONLY` open too), but not through `O_PATH`.
    if flags & libc::O_TRUNC != 0 && !path_only && !node.file.is_empty() {
        let _g = lock(&node.grow);
        node.note_written();
        let r = node.file.set_len(0);
        node.publish_len();
        r.map_err(|e| fail("open with O_TRUNC", &e))?;
    }
    let status = acc
        | (flags
            & (libc::O_APPEND
                | libc::O_NONBLOCK
                | libc::O_DIRECT
                | libc::O_SYNC
                | libc::O_DSYNC
                | libc::O_NOATIME));
    let status = if path_only { libc::O_PATH } else { status };
    let d = Arc::new(Desc::new(node, readable, writable, status));
    state::insert(fd, d)
}

/// Whether an open with `flags` follows a link its path ends in: not with
/// `O_NOFOLLOW` (the kernel's `ELOOP`), nor with `O_CREAT | O_EXCL` (its
/// `EEXIST`, whatever the link names).
fn follows_open(flags: c_int) -> bool {
    let excl = libc::O_CREAT | libc::O_EXCL;
    flags & libc::O_NOFOLLOW == 0 && flags & excl != excl
}

/// `open`-like calls: inside the store, a placeholder; else `pass()`.
fn open_via(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    pass: impl FnOnce() -> c_int,
) -> c_int {
    let both = libc::O_DIRECTORY | libc::O_CREAT;
    match classify_as(dirfd, path, follows_open(flags)) {
        // The kernel refuses these flags before it looks at the path.
        Place::Bad(_) | Place::Inside(_) if flags & both == both => int_ret(Err(libc::EINVAL)),
        // `name/` to create: the kernel's answer whatever `name` is (but
        // `f/.` and `f/..` walk through `f`, which must be a directory).
        Place::Bad(_) if flags & libc::O_CREAT != 0 && ends_in_slash(path) => {
            int_ret(Err(libc::EISDIR))
        }
        Place::Bad(e) => int_ret(Err(e)),
        Place::Inside(name) => int_ret(open_inside(&name, flags)),
        // An unnamed file in the store's directory would be the kernel's,
        // outside the store, and could never be linked into it: refused as
        // inside the store.
        Place::Root if flags & libc::O_TMPFILE == libc::O_TMPFILE => int_ret(Err(unsupported(
            "O_TMPFILE in SETCACHE_DIR",
            libc::EOPNOTSUPP,
        ))),
        // The directory itself is a real one (listing is served by opendir).
        Place::Root | Place::Outside => pass(),
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn open(path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    // SAFETY: the same function on 64-bit Linux (O_LARGEFILE is implied).
    unsafe { open64(path, flags, mode) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn open64(path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    // SAFETY: passed through with the caller's arguments.
    open_via(libc::AT_FDCWD, path, flags, || unsafe {
        real::open64()(path, flags, mode)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn openat(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mode: c_uint,
) -> c_int {
    // SAFETY: the same function on 64-bit Linux (O_LARGEFILE is implied).
    unsafe { openat64(dirfd, path, flags, mode) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn openat64(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mode: c_uint,
) -> c_int {
    // SAFETY: passed through with the caller's arguments.
    open_via(dirfd, path, flags, || unsafe {
        real::openat64()(dirfd, path, flags, mode)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn __open_2(path: *const c_char, flags: c_int) -> c_int {
    // SAFETY: the same function on 64-bit Linux (O_LARGEFILE is implied).
    unsafe { __open64_2(path, flags) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn __open64_2(path: *const c_char, flags: c_int) -> c_int {
    // SAFETY: passed through with the caller's arguments.
    open_via(libc::AT_FDCWD, path, flags, || unsafe {
        real::__open64_2()(path, flags)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn __openat_2(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
) -> c_int {
    // SAFETY: the same function on 64-bit Linux (O_LARGEFILE is implied).
    unsafe { __openat64_2(dirfd, path, flags) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn __openat64_2(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
) -> c_int {
    // SAFETY: passed through with the caller's arguments.
    open_via(dirfd, path, flags, || unsafe {
        real::__openat64_2()(dirfd, path, flags)
    })
}

const CREAT: c_int = libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC;

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn creat(path: *const c_char, mode: libc::mode_t) -> c_int {
    // SAFETY: the same function on 64-bit Linux (O_LARGEFILE is implied).
    unsafe { creat64(path, mode) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn creat64(path: *const c_char, mode: libc::mode_t) -> c_int {
    // SAFETY: passed through with the caller's arguments.
    open_via(libc::AT_FDCWD, path, CREAT, || unsafe {
        real::creat64()(path, mode)
    })
}

/// Shut the store's gate: while the guard lives the store neither opens nor
/// closes a descriptor of its own, so `setcache::fds::is_ours` is exact. Not
/// in a child made by `fork`, where a thread the child does not have may
/// have been passing the gate, and no other thread of the store is left.
/// Never held across a call into the store.
fn hold_store_fds() -> Option<setcache::fds::Hold> {
    (!state::forked()).then(setcache::fds::hold)
}

/// Whether `fd` is one of the store's own descriptors (a backing file, a
/// ring, a doorbell, a root's lock file), which `call` must not close or
/// replace: then `errno` is `EBADF`, as for a number the program never
/// opened, and stderr says why once.
fn refused_ours(call: &str, fd: c_int) -> bool {
    if !setcache::fds::is_ours(fd) {
        return false;
    }
    // Exact under the gate (the store may be closing it this moment).
    let _h = hold_store_fds();
    ours_refused(call, fd)
}

/// `refused_ours` with the gate held.
fn ours_refused(call: &str, fd: c_int) -> bool {
    if !setcache::fds::is_ours(fd) {
        return false;
    }
    if state::forked() {
        // The parent's store, unused here: the number is the program's.
        setcache::fds::disown(fd);
        return false;
    }
    warn_once(
        &format!("ours {call}"),
        &format!(
            "{call} of descriptor {fd} refused: it is one of the store's own (a backing file, ring or lock file), which it needs open"
        ),
    );
    set_errno(libc::EBADF);
    true
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn close(fd: c_int) -> c_int {
    if refused_ours("close", fd) {
        return -1;
    }
    stdio::std_released(fd);
    let gone = state::remove(fd);
    let rc = {
        // Cancellation off while the description may be the last one's:
        // its drop writes the file's data.
        let _off = gone.as_ref().map(|_| setcache::cancel::off());
        // SAFETY: passed through with the caller's arguments (a placeholder is a real descriptor).
        let rc = unsafe { real::close()(fd) };
        match gone {
            Some(d) => last_close(d, rc),
            None => rc,
        }
    };
    // A cancel sent while the store held cancellation off.
    state::cancel_point();
    rc
}

/// A descriptor closed: if it held its file's last description, that
/// description's drop synced the file (see `Desc`'s drop); the sync's error
/// is `close`'s.
fn last_close(d: Arc<Desc>, rc: c_int) -> c_int {
    match state::drop_closed(d) {
        Err(errno) if rc == 0 => {
            set_errno(errno);
            -1
        }
        _ => rc,
    }
}

/// A descriptor closed as a side effect (`dup2` over it, `close_range`,
/// `closefrom`): if it was its file's last, the file's data goes to the
/// devices as at a `close`, but the call's own result and `errno` stand (a
/// failure stays noted for the exit's sync, and is reported on stderr).
fn implicit_close(d: Arc<Desc>) {
    // SAFETY: __errno_location returns this thread's errno.
    let saved = unsafe { *libc::__errno_location() };
    last_close(d, 0);
    crate::set_errno(saved);
}

/// The ranges of `first..=last` around the store's own descriptors, in
/// ascending order, with whether each is the last (open above); with the
/// gate held (see `refused_ours`) so that the store neither opens nor closes
/// one meanwhile, and the table's entries in the range removed first, as
/// `close` does (once the kernel frees a number, another thread may get it
/// back for a new file). The removed entries are returned, to be closed
/// implicitly once the kernel has closed their placeholders and the gate is
/// open again (their last close syncs through the store).
fn close_around(
    first: c_uint,
    last: c_uint,
    mut close: impl FnMut(c_uint, c_uint, bool),
) -> Vec<Arc<Desc>> {
    for n in first..=last.min(2) {
        stdio::std_released(n as c_int);
    }
    let hold = hold_store_fds();
    let gone = state::remove_range(first as usize, last as usize);
    let mut lo = first;
    if let Ok(from) = c_int::try_from(first) {
        let mut ours = setcache::fds::ours_from(from);
        if state::forked() {
            // The parent's store, unused here: every number is the program's.
            ours.iter().for_each(|&o| setcache::fds::disown(o));
            ours.clear();
        }
        for o in ours {
            let o = o as c_uint;
            if o > last {
                break;
            }
            if o > lo {
                close(lo, o - 1, false);
            }
            lo = o + 1;
        }
    }
    if lo <= last {
        close(lo, last, true);
    }
    drop(hold);
    gone
}

/// Close each number of `lo..=hi` below the limit of descriptors, one at a
/// time (where `close_range` is missing).
fn close_each(lo: c_uint, hi: c_uint) {
    // SAFETY: a zeroed rlimit is valid, and getrlimit fills it.
    let mut lim: libc::rlimit = unsafe { std::mem::zeroed() };
    // SAFETY: a buffer of ours.
    let max = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 {
        lim.rlim_cur.min(c_uint::MAX as u64) as c_uint
    } else {
        state::MAX_FD as c_uint
    };
    for fd in lo..=hi.min(max.saturating_sub(1)) {
        // SAFETY: closes one number of a range holding none of the store's.
        unsafe { real::close()(fd as c_int) };
    }
}

/// `close_range` leaves the store's own descriptors open (see
/// `refused_ours`), closing the ranges around them. With
/// CLOSE_RANGE_CLOEXEC nothing closes now (the store's are close-on-exec
/// already). CLOSE_RANGE_UNSHARE gives the calling thread a private copy of
/// the descriptor table, where the store's threads would not see the
/// backing files it opens for this thread: it is refused with `EINVAL`, as
/// a kernel without the flag refuses it, in a process that holds the
/// store; elsewhere (before the store opens, in a child made by `fork`
/// before its `exec`) the range closes in the private copy and the
/// library's table follows it.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn close_range(first: c_uint, last: c_uint, flags: c_int) -> c_int {
    let known = (libc::CLOSE_RANGE_CLOEXEC | libc::CLOSE_RANGE_UNSHARE) as c_int;
    if flags & !known != 0 || first > last {
        set_errno(libc::EINVAL);
        return -1;
    }
    if flags & libc::CLOSE_RANGE_UNSHARE as c_int != 0 && state::store_opened() {
        warn_once(
            "close_range unshare",
            "close_range with CLOSE_RANGE_UNSHARE refused (EINVAL): a thread with a descriptor table of its own would not share the store's",
        );
        set_errno(libc::EINVAL);
        return -1;
    }
    if flags & libc::CLOSE_RANGE_CLOEXEC as c_int != 0 {
        // SAFETY: passed through with the caller's arguments.
        return unsafe { real::close_range()(first, last, flags) };
    }
    let mut rc = 0;
    let mut err = 0;
    let gone = close_around(first, last, |lo, hi, _| {
        // SAFETY: closes a range holding none of the store's descriptors.
        if rc == 0 && unsafe { real::close_range()(lo, hi, flags) } != 0 {
            // SAFETY: __errno_location returns this thread's errno.
            let e = unsafe { *libc::__errno_location() };
            if e == libc::ENOSYS && flags == 0 {
                // A kernel before 5.9: one number at a time, up to the
                // limit of descriptors (the library's table is gone for
                // the whole range already).
                close_each(lo, hi);
            } else {
                rc = -1;
                err = e;
            }
        }
    });
    gone.into_iter().for_each(implicit_close);
    if rc != 0 {
        set_errno(err);
    }
    rc
}

/// `closefrom` leaves the store's own descriptors open, as `close_range`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn closefrom(first: c_int) {
    let gone = close_around(first.max(0) as c_uint, c_uint::MAX, |lo, hi, open_above| {
        if open_above {
            // SAFETY: closes from a number above the store's descriptors.
            unsafe { real::closefrom()(lo as c_int) };
            return;
        }
        // SAFETY: closes a range holding none of the store's descriptors.
        if unsafe { real::close_range()(lo, hi, 0) } != 0 {
            close_each(lo, hi);
        }
    });
    gone.into_iter().for_each(implicit_close);
}

/// A copy of a store file's placeholder asked for at `new`, a number past
/// the library's table: refused (`EBADF`, as for a number past the limit)
/// before the kernel closes what the caller has there.
fn past_the_table(d: &Option<state::Held>, new: c_int) -> bool {
    if d.is_none() || (new as usize) < state::MAX_FD {
        return false;
    }
    warn_once(
        "dup past",
        &format!(
            "a copy of a store file's descriptor at {new} refused (EBADF): the library stands in for descriptors below {}",
            state::MAX_FD
        ),
    );
    set_errno(libc::EBADF);
    true
}

/// After the kernel made `new` a copy of `old`: the table follows.
fn dup_follow(old: Option<Arc<Desc>>, new: c_int) -> c_int {
    if new < 0 {
        return new;
    }
    let replaced = match old {
        // Replaced in one step: a call on `new` meanwhile on another thread
        // finds the file it stood for or this one, never no file.
        Some(d) => match state::insert_replacing(new, d) {
            Ok(r) => {
                // A store file's copy at 0, 1 or 2 (`dup2`, `dup3`, or `dup`
                // and `F_DUPFD` onto a free one): its standard stream follows.
                // The store is open, and its exit sync flushes the stream.
                stdio::after_std_copy(new, true);
                r
            }
            Err(e) => {
                let replaced = state::remove(new);
                // SAFETY: closes the copy just made.
                unsafe { real::close()(new) };
                replaced.into_iter().for_each(implicit_close);
                set_errno(e);
                return -1;
            }
        },
        None => state::remove(new),
    };
    replaced.into_iter().for_each(implicit_close);
    new
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn dup(fd: c_int) -> c_int {
    let d = state::desc(fd);
    // SAFETY: passed through with the caller's arguments.
    let new = unsafe { real::dup()(fd) };
    dup_follow(d.as_ref().map(state::Held::arc), new)
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn dup2(fd: c_int, new: c_int) -> c_int {
    if fd == new {
        // SAFETY: passed through with the caller's arguments.
        return unsafe { real::dup2()(fd, new) };
    }
    let d = state::desc(fd);
    if past_the_table(&d, new) {
        return -1;
    }
    let rc = {
        // Under the gate: `new` may be free, and the store about to open a
        // descriptor there.
        let _h = hold_store_fds();
        if ours_refused("dup2", new) {
            return -1;
        }
        std_before_copy(d.is_some(), new);
        // SAFETY: passed through with the caller's arguments.
        unsafe { real::dup2()(fd, new) }
    };
    dup_follow(d.as_ref().map(state::Held::arc), rc)
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn dup3(fd: c_int, new: c_int, flags: c_int) -> c_int {
    let d = state::desc(fd);
    if past_the_table(&d, new) {
        return -1;
    }
    let rc = {
        // As in `dup2`.
        let _h = hold_store_fds();
        if fd != new && ours_refused("dup3", new) {
            return -1;
        }
        if fd != new {
            std_before_copy(d.is_some(), new);
        }
        // SAFETY: passed through with the caller's arguments.
        unsafe { real::dup3()(fd, new, flags) }
    };
    dup_follow(d.as_ref().map(state::Held::arc), rc)
}

/// Before `new` becomes a copy of another descriptor (`ours`: a store
/// file's): its standard stream, if it is 0, 1 or 2, is readied (see
/// `stdio`'s standard streams).
fn std_before_copy(ours: bool, new: c_int) {
    if ours {
        stdio::before_std_copy(new);
    } else {
        stdio::std_released(new);
    }
}

/// `O_LARGEFILE` as the kernel reports it in `F_GETFL`: set by every open
/// of a 64-bit process but one with `O_PATH` (the C library's headers have
/// it 0 on 64-bit targets).
#[cfg(target_arch = "x86_64")]
const KERNEL_O_LARGEFILE: c_int = 0o100000;
#[cfg(target_arch = "aarch64")]
const KERNEL_O_LARGEFILE: c_int = 0o400000;
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
const KERNEL_O_LARGEFILE: c_int = libc::O_LARGEFILE;

/// `fcntl` on a placeholder.
/// `fcntl` commands the `libc` crate does not name on every target
/// (`linux/fcntl.h`), and the largest write-lifetime hint.
const F_GETSIG: c_int = 11;
const F_GET_RW_HINT: c_int = 1035;
const F_SET_RW_HINT: c_int = 1036;
const RWH_WRITE_LIFE_EXTREME: u64 = 5;
const DN_MULTISHOT: u32 = 0x8000_0000;

const F_SETSIG: c_int = 10;
/// `struct f_owner_ex`'s kinds of owner (`fcntl.h`).
const F_OWNER_TID: c_int = 0;
const F_OWNER_PID: c_int = 1;
const F_OWNER_PGRP: c_int = 2;
const F_SETOWN_EX: c_int = 15;
const F_GETOWN_EX: c_int = 16;

/// `struct f_owner_ex` (`fcntl.h`).
#[repr(C)]
struct FOwnerEx {
    kind: c_int,
    pid: libc::pid_t,
}
/// The kernel's highest signal number (`_NSIG`).
const NSIG: c_int = 64;

/// Whether a task (a process or a thread) numbered `id` exists, as the
/// kernel's `F_SETOWN` and `F_SETOWN_EX` look an owner up (by number only,
/// whatever its kind): `ESRCH` if not.
fn task_exists(id: libc::pid_t) -> Result<(), i32> {
    if id > 0 && std::path::Path::new(&format!("/proc/{id}")).exists() {
        Ok(())
    } else {
        Err(libc::ESRCH)
    }
}

/// Whether the owner `(kind, id)` set before still names a task of its kind,
/// as the kernel's `F_GETOWN` and `F_GETOWN_EX` ask (0 is reported if not):
/// a process by its leader, a thread by its id, a group by a member.
fn owner_alive(kind: c_int, id: libc::pid_t) -> bool {
    if id <= 0 {
        return false;
    }
    match kind {
        F_OWNER_PGRP if id == 1 => {
            // (`kill(-1, ..)` asks of every process, not of group 1.)
            // SAFETY: plain getter.
            unsafe { libc::getpgid(1) == 1 }
        }
        F_OWNER_PGRP => {
            // SAFETY: signal 0 only asks whether the group has a member.
            let rc = unsafe { libc::kill(-id, 0) };
            rc == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
        }
        F_OWNER_PID => {
            std::fs::read_to_string(format!("/proc/{id}/status"))
                .ok()
                .and_then(|t| {
                    t.lines()
                        .find_map(|l| l.strip_prefix("Tgid:"))
                        .and_then(|v| v.trim().parse::<libc::pid_t>().ok())
                })
                == Some(id)
        }
        _ => task_exists(id).is_ok(),
    }
}

/// `F_SETOWN`'s argument (the low 32 bits, as the kernel reads it): a
/// process, or negated, a process group; 0 none.
fn set_owner(d: &Desc, who: c_int) -> Result<(), i32> {
    if who == c_int::MIN {
        return Err(libc::EINVAL);
    }
    let (kind, id) = if who < 0 {
        (F_OWNER_PGRP, -who)
    } else {
        (F_OWNER_PID, who)
    };
    if id != 0 {
        task_exists(id)?;
    }
    *lock(&d.owner) = (kind, id);
    Ok(())
}

/// `F_SETOWN_EX`'s owner: a thread, a process or a process group.
fn set_owner_ex(d: &Desc, kind: c_int, id: libc::pid_t) -> Result<(), i32> {
    if !matches!(kind, F_OWNER_TID | F_OWNER_PID | F_OWNER_PGRP) {
        return Err(libc::EINVAL);
    }
    if id != 0 {
        task_exists(id)?;
    }
    *lock(&d.owner) = (kind, id);
    Ok(())
}

/// The owner `F_GETOWN_EX` reports: 0 for one no task of its kind has now.
fn owner_now(d: &Desc) -> (c_int, libc::pid_t) {
    let (kind, id) = *lock(&d.owner);
    (kind, if owner_alive(kind, id) { id } else { 0 })
}

fn fcntl_desc(fd: c_int, d: Arc<Desc>, cmd: c_int, arg: c_ulong) -> c_int {
    match cmd {
        libc::F_DUPFD | libc::F_DUPFD_CLOEXEC => {
            // SAFETY: duplicates the placeholder, as asked.
            let new = unsafe { real::fcntl64()(fd, cmd, arg) };
            dup_follow(Some(d), new)
        }
        // SAFETY: the descriptor flags (close-on-exec) are the placeholder's own.
        libc::F_GETFD | libc::F_SETFD => unsafe { real::fcntl64()(fd, cmd, arg) },
        libc::F_GETFL if d.path_only() => d.status.load(Ordering::Relaxed),
        libc::F_GETFL => d.status.load(Ordering::Relaxed) | KERNEL_O_LARGEFILE,
        // The kernel's `fcntl` takes only the commands above on an `O_PATH`
        // descriptor.
        _ if d.path_only() => int_ret(Err(libc::EBADF)),
        libc::F_SETFL => {
            let changeable = libc::O_APPEND | libc::O_NONBLOCK | libc::O_DIRECT | libc::O_NOATIME;
            let new = arg as c_int & changeable;
            let _ = d
                .status
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |s| {
                    Some((s & !changeable) | new)
                });
            0
        }
        // One store belongs to one process, and a process never conflicts
        // with its own record locks: every lock the access mode allows is
        // granted, and none is found in the way.
        libc::F_SETLK | libc::F_SETLKW | libc::F_GETLK if d.path_only() => {
            int_ret(Err(libc::EBADF))
        }
        libc::F_SETLK | libc::F_SETLKW | libc::F_GETLK => {
            let p = arg as *mut libc::flock;
            if p.is_null() {
                return int_ret(Err(libc::EFAULT));
            }
            // SAFETY: these commands pass a struct flock, read here and filled by F_GETLK.
            let (kind, whence) = unsafe { (c_int::from((*p).l_type), c_int::from((*p).l_whence)) };
            // SAFETY: as above.
            let (start, len) = unsafe { ((*p).l_start, (*p).l_len) };
            // In the kernel's order: a lock's range, then its type and the
            // access mode; a test's type, then its range.
            let range = || crate::lock::record_lock_range(&d, whence, start, len);
            if cmd != libc::F_GETLK {
                let r = range().and_then(|()| crate::lock::record_lock_allowed(&d, kind));
                return int_ret(r.map(|()| 0));
            }
            if !matches!(kind, libc::F_RDLCK | libc::F_WRLCK) {
                return int_ret(Err(libc::EINVAL));
            }
            if let Err(e) = range() {
                return int_ret(Err(e));
            }
            // SAFETY: as above.
            unsafe { (*p).l_type = libc::F_UNLCK as libc::c_short };
            0
        }
        // The owner and signal for I/O events (which a regular file never
        // has): kept with the description and read back, checked as the
        // kernel checks them.
        libc::F_SETOWN => int_ret(set_owner(&d, arg as c_int).map(|()| 0)),
        libc::F_GETOWN => {
            let (kind, id) = owner_now(&d);
            if kind == F_OWNER_PGRP { -id } else { id }
        }
        F_SETOWN_EX | F_GETOWN_EX => {
            let p = arg as *mut FOwnerEx;
            if p.is_null() {
                return int_ret(Err(libc::EFAULT));
            }
            if cmd == F_GETOWN_EX {
                let (kind, id) = owner_now(&d);
                // SAFETY: the command passes a struct f_owner_ex to fill.
                unsafe { p.write_unaligned(FOwnerEx { kind, pid: id }) };
                return 0;
            }
            // SAFETY: the command passes a struct f_owner_ex to read.
            let o = unsafe { p.read_unaligned() };
            int_ret(set_owner_ex(&d, o.kind, o.pid).map(|()| 0))
        }
        F_SETSIG => {
            // The low 32 bits, as the kernel reads the argument.
            let sig = arg as c_int;
            if !(0..=NSIG).contains(&sig) {
                return int_ret(Err(libc::EINVAL));
            }
            d.signal.store(sig, Ordering::Relaxed);
            0
        }
        F_GETSIG => d.signal.load(Ordering::Relaxed),
        // What the kernel answers of a regular file nothing was asked of: no
        // lease; the write-lifetime hint given last (kept with the file,
        // read back, used for nothing); no directory to watch (a request that
        // drops the watches is done); no pipe.
        libc::F_GETLEASE => libc::F_UNLCK,
        F_GET_RW_HINT | F_SET_RW_HINT => {
            let p = arg as *mut u64;
            if p.is_null() {
                return int_ret(Err(libc::EFAULT));
            }
            if cmd == F_GET_RW_HINT {
                let hint = d.node.rw_hint.load(Ordering::Relaxed);
                // SAFETY: the command passes a pointer to a u64, written here.
                unsafe { p.write_unaligned(hint) };
                return 0;
            }
            // SAFETY: the command passes a pointer to a u64, read here.
            let hint = unsafe { p.read_unaligned() };
            if hint > RWH_WRITE_LIFE_EXTREME {
                return int_ret(Err(libc::EINVAL));
            }
            d.node.rw_hint.store(hint, Ordering::Relaxed);
            0
        }
        libc::F_NOTIFY if arg as u32 & !DN_MULTISHOT == 0 => 0,
        libc::F_NOTIFY => int_ret(Err(libc::ENOTDIR)),
        libc::F_GETPIPE_SZ | libc::F_SETPIPE_SZ => int_ret(Err(libc::EBADF)),
        libc::F_OFD_SETLK | libc::F_OFD_SETLKW | libc::F_OFD_GETLK => int_ret(Err(unsupported(
            "open file description locks (F_OFD_*)",
            libc::EINVAL,
        ))),
        _ => int_ret(Err(unsupported(
            &format!("fcntl command {cmd}"),
            libc::EINVAL,
        ))),
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn fcntl(fd: c_int, cmd: c_int, arg: c_ulong) -> c_int {
    // SAFETY: the same function on 64-bit Linux, where the offset types agree.
    unsafe { fcntl64(fd, cmd, arg) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn fcntl64(fd: c_int, cmd: c_int, arg: c_ulong) -> c_int {
    match state::desc(fd) {
        // The descriptor's own flags and copies are the kernel's; what it
        // would say of the placeholder's file is not the store file's.
        None if !matches!(
            cmd,
            libc::F_GETFD | libc::F_SETFD | libc::F_DUPFD | libc::F_DUPFD_CLOEXEC
        ) && state::parents_placeholder(fd) =>
        {
            int_ret(Err(libc::EBADF))
        }
        // SAFETY: passed through with the caller's arguments.
        None => unsafe { real::fcntl64()(fd, cmd, arg) },
        Some(d) => fcntl_desc(fd, d.arc(), cmd, arg),
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn ioctl(fd: c_int, req: c_ulong, arg: c_ulong) -> c_int {
    match state::desc(fd) {
        // SAFETY: passed through with the caller's arguments.
        None => unsafe { real::ioctl()(fd, req, arg) },
        Some(d) => int_ret(ioctl_desc(fd, &d, req, arg)),
    }
}

/// The `ioctl`s of a regular file that a file of the store answers: the
/// bytes left to read, and close-on-exec (the placeholder's own flag).
fn ioctl_desc(fd: c_int, d: &Desc, req: c_ulong, arg: c_ulong) -> Result<c_int, i32> {
    if d.path_only() {
        return Err(libc::EBADF);
    }
    match req {
        libc::FIONREAD => {
            let p = arg as *mut c_int;
            if p.is_null() {
                return Err(libc::EFAULT);
            }
            let left = d.node.len().saturating_sub(*lock(&d.pos));
            // SAFETY: FIONREAD passes an int to fill.
            unsafe { *p = left.min(c_int::MAX as u64) as c_int };
            Ok(0)
        }
        libc::FIOCLEX | libc::FIONCLEX => {
            let flag = if req == libc::FIOCLEX {
                libc::FD_CLOEXEC
            } else {
                0
            };
            // SAFETY: sets the placeholder's descriptor flags, as asked.
            match unsafe { real::fcntl64()(fd, libc::F_SETFD, flag as c_ulong) } {
                -1 => Err(std::io::Error::last_os_error()
                    .raw_os_error()
                    .unwrap_or(libc::EBADF)),
                _ => Ok(0),
            }
        }
        // Non-blocking I/O: the description's `O_NONBLOCK`, as `F_SETFL`
        // sets it (reads and writes of a regular file never block on it).
        libc::FIONBIO => {
            let on = read_int_arg(arg)?;
            let flag = if on != 0 { libc::O_NONBLOCK } else { 0 };
            let _ = d
                .status
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |s| {
                    Some((s & !libc::O_NONBLOCK) | flag)
                });
            Ok(0)
        }
        // Signal-driven I/O: a regular file has none to turn on (the
        // kernel's `ENOTTY`); turning it off is done (it never was on).
        libc::FIOASYNC => match read_int_arg(arg)? {
            0 => Ok(0),
            _ => Err(libc::ENOTTY),
        },
        // Blocks shared with another file (`cp --reflink`): the store shares
        // none, as a file system without them says (`EOPNOTSUPP`, ext4's).
        FICLONE | FICLONERANGE | FIDEDUPERANGE => Err(libc::EOPNOTSUPP),
        _ => Err(libc::ENOTTY),
    }
}

/// A file of the store is no terminal: the terminal calls get the kernel's
/// answer for a regular file (`ENOTTY`; `EBADF` on an `O_PATH` descriptor).
/// The C library makes their `ioctl`s inside itself, where the placeholder
/// would answer `EBADF`.
fn no_tty(d: &Desc) -> i32 {
    if d.path_only() {
        libc::EBADF
    } else {
        libc::ENOTTY
    }
}

/// Stand-ins for the terminal calls that return -1 and set errno: passed
/// through for other descriptors, [`no_tty`] for the store's.
macro_rules! tty_calls {
    ($($name:ident($($arg:ident: $ty:ty),*) -> $ret:ty;)*) => {
        $(
            #[unsafe(no_mangle)]
            pub unsafe extern "C-unwind" fn $name(fd: c_int $(, $arg: $ty)*) -> $ret {
                match state::desc(fd) {
                    // SAFETY: passed through with the caller's arguments.
                    None => unsafe { real::$name()(fd $(, $arg)*) },
                    Some(d) => {
                        set_errno(no_tty(&d));
                        -1
                    }
                }
            }
        )*
    };
}

tty_calls! {
    tcgetattr(t: *mut libc::termios) -> c_int;
    tcsetattr(when: c_int, t: *const libc::termios) -> c_int;
    tcgetpgrp() -> libc::pid_t;
    tcsetpgrp(pgrp: libc::pid_t) -> c_int;
    tcgetsid() -> libc::pid_t;
    tcflush(queue: c_int) -> c_int;
    tcdrain() -> c_int;
    tcflow(action: c_int) -> c_int;
    tcsendbreak(duration: c_int) -> c_int;
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn isatty(fd: c_int) -> c_int {
    match state::desc(fd) {
        // SAFETY: passed through with the caller's argument.
        None => unsafe { real::isatty()(fd) },
        Some(d) => {
            set_errno(no_tty(&d));
            0
        }
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn ttyname(fd: c_int) -> *mut c_char {
    match state::desc(fd) {
        // SAFETY: passed through with the caller's argument.
        None => unsafe { real::ttyname()(fd) },
        Some(d) => {
            set_errno(no_tty(&d));
            std::ptr::null_mut()
        }
    }
}

/// `ttyname_r` returns the error instead of setting errno.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn ttyname_r(fd: c_int, buf: *mut c_char, len: size_t) -> c_int {
    match state::desc(fd) {
        // SAFETY: passed through with the caller's arguments.
        None => unsafe { real::ttyname_r()(fd, buf, len) },
        Some(d) => no_tty(&d),
    }
}

/// The block-sharing requests (`linux/fs.h`).
const FICLONE: c_ulong = 0x4004_9409;
const FICLONERANGE: c_ulong = 0x4020_940d;
const FIDEDUPERANGE: c_ulong = 0xc018_9436;

/// The `int` an `ioctl` passes a pointer to.
fn read_int_arg(arg: c_ulong) -> Result<c_int, i32> {
    let p = arg as *const c_int;
    if p.is_null() {
        return Err(libc::EFAULT);
    }
    // SAFETY: the request passes a pointer to an int, read here.
    Ok(unsafe { p.read_unaligned() })
}

// ---- mapping: refused ----------------------------------------------------

fn refuse_map() -> *mut c_void {
    set_errno(unsupported(
        "mmap of a file in SETCACHE_DIR (its pages live in the setcache cache, not the kernel's)",
        libc::ENODEV,
    ));
    libc::MAP_FAILED
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn mmap(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off_t,
) -> *mut c_void {
    // SAFETY: the same function on 64-bit Linux, where the offset types agree.
    unsafe { mmap64(addr, len, prot, flags, fd, off) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn mmap64(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off64_t,
) -> *mut c_void {
    if flags & libc::MAP_ANONYMOUS == 0
        && let Some(d) = state::desc(fd)
    {
        if d.path_only() {
            set_errno(libc::EBADF);
            return libc::MAP_FAILED;
        }
        return refuse_map();
    }
    // SAFETY: passed through with the caller's arguments.
    unsafe { real::mmap64()(addr, len, prot, flags, fd, off) }
}

// ---- names -----------------------------------------------------------------

/// The store, or why not; for calls on names.
fn with_state<T>(f: impl FnOnce(&State) -> Result<T, i32>) -> Result<T, i32> {
    let s = state::state()?;
    f(&s)
}

/// A store error as call `what` on `name` answers it: `ENOENT` for a name
/// the store has no file of (or could not have: see [`no_such_name`]), the
/// error's own errno (and a message) otherwise.
fn missing_is_enoent<'a>(what: &'a str, name: &'a str) -> impl FnOnce(Error) -> i32 + 'a {
    move |e| match e {
        Error::FileNotFound(_) => libc::ENOENT,
        Error::InvalidName { .. } => no_such_name(name),
        e => fail(what, &e),
    }
}

/// The kernel's answer for a lookup of a name the store cannot hold: no
/// such file (`ENOENT`), but a name longer than a file system's names may
/// be is `ENAMETOOLONG` first.
fn no_such_name(name: &str) -> i32 {
    if name.len() > libc::NAME_MAX as usize {
        libc::ENAMETOOLONG
    } else {
        libc::ENOENT
    }
}

/// The length of store file `name`, `ENOENT` for none (see
/// [`missing_is_enoent`]).
fn len_or_enoent(s: &State, name: &str, what: &str) -> Result<u64, i32> {
    state::len_of(s, name).map_err(missing_is_enoent(what, name))
}

/// Whether the store still lists `name`, after an operation on it failed
/// (which the store may have begun, and finishes at its next operation: this
/// one); `None` when that cannot be told.
fn still_listed(s: &State, name: &str) -> Option<bool> {
    s.cs.store()
        .list()
        .ok()
        .map(|names| names.iter().any(|n| n == name))
}

fn unlink_name(name: &str) -> Result<c_int, i32> {
    with_state(|s| unlink_in(s, name))
}

/// `unlink` of a name of the store's directory.
pub(crate) fn unlink_in(s: &State, name: &str) -> Result<c_int, i32> {
    // Nodes forgotten go after the table's lock (declared first, dropped
    // last): the last holder's drop syncs the file.
    let mut gone = Vec::new();
    let mut nodes = state::lock_nodes(s);
    if let Err(e) = s.cs.delete(name) {
        // A name the store cannot hold names no file of it.
        match e {
            Error::FileNotFound(_) => return Err(libc::ENOENT),
            Error::InvalidName { .. } => return Err(no_such_name(name)),
            _ => {}
        }
        // Begun and finished later, or not begun: the table of names
        // follows the store, and forgets the name when it cannot tell.
        if still_listed(s, name) != Some(true) {
            state::forget(s, &mut nodes, &mut gone, name);
        }
        return Err(fail("unlink", &e));
    }
    state::forget(s, &mut nodes, &mut gone, name);
    Ok(0)
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn unlink(path: *const c_char) -> c_int {
    match classify(libc::AT_FDCWD, path) {
        Place::Bad(e) => int_ret(Err(e)),
        Place::Inside(name) => int_ret(unlink_name(&name)),
        Place::Root => int_ret(Err(libc::EISDIR)),
        // SAFETY: passed through with the caller's arguments.
        Place::Outside => unsafe { real::unlink()(path) },
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn unlinkat(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    match classify(dirfd, path) {
        Place::Bad(e) => int_ret(Err(e)),
        Place::Inside(name) if flags & libc::AT_REMOVEDIR != 0 => {
            int_ret(Err(crate::path::not_a_directory(&name)))
        }
        Place::Inside(name) => int_ret(unlink_name(&name)),
        Place::Root if flags & libc::AT_REMOVEDIR != 0 => int_ret(rmdir_root(path)),
        // An empty path names nothing (`unlinkat` takes no `AT_EMPTY_PATH`).
        Place::Root if ending(path) == Ending::Empty => int_ret(Err(libc::ENOENT)),
        Place::Root => int_ret(Err(libc::EISDIR)),
        // SAFETY: passed through with the caller's arguments.
        Place::Outside => unsafe { real::unlinkat()(dirfd, path, flags) },
    }
}

fn rename_names(from: &str, to: &str, replace: bool) -> Result<c_int, i32> {
    with_state(|s| rename_in(s, from, to, replace))
}

/// `rename` of two names of the store's directory: over a file `to` when
/// `replace`, else (`RENAME_NOREPLACE`) refused `EEXIST` if there is one,
/// in the same step as the rename (a file made under `to` by another thread
/// meanwhile is never replaced).
pub(crate) fn rename_in(s: &State, from: &str, to: &str, replace: bool) -> Result<c_int, i32> {
    if from == to {
        return state::len_of(s, from)
            .and_then(|_| match replace {
                true => Ok(0),
                false => Err(Error::FileExists(to.to_string())),
            })
            .map_err(|e| e.posix_errno());
    }
    // The source must exist before the target is replaced; the target
    // names the old file or the new one at every moment (the store's
    // replacement is one logged operation).
    state::len_of(s, from).map_err(|e| e.posix_errno())?;
    // Nodes forgotten go after the table's lock (declared first, dropped
    // last): the last holder's drop syncs the file.
    let mut gone = Vec::new();
    let mut nodes = state::lock_nodes(s);
    // Without `replace`, the store's `rename`, which refuses an existing
    // target in the same step.
    let r = if replace {
        s.cs.replace(from, to)
    } else {
        s.cs.rename(from, to)
    };
    match r {
        Ok(()) => {}
        Err(e @ (Error::FileExists(_) | Error::FileNotFound(_))) if !replace => {
            return Err(e.posix_errno());
        }
        Err(e) => {
            // Begun (the store finishes it at its next operation: the
            // listing) or not: the table of names follows the store, and
            // forgets both names when it cannot tell, so that a later open
            // of either finds what the store has under it.
            match still_listed(s, from) {
                Some(true) => {}
                Some(false) => {
                    state::forget(s, &mut nodes, &mut gone, to);
                    state::renamed(&mut nodes, from, to);
                }
                None => {
                    state::forget(s, &mut nodes, &mut gone, from);
                    state::forget(s, &mut nodes, &mut gone, to);
                }
            }
            return Err(fail("rename", &e));
        }
    }
    state::forget(s, &mut nodes, &mut gone, to);
    state::renamed(&mut nodes, from, to);
    Ok(0)
}

fn rename_at(
    dir1: c_int,
    from: *const c_char,
    dir2: c_int,
    to: *const c_char,
    flags: c_uint,
) -> Option<c_int> {
    let places = (classify(dir1, from), classify(dir2, to));
    if matches!(places, (Place::Outside, Place::Outside)) {
        return None;
    }
    // The kernel's checks of the flags, before any of the names: bits it
    // does not know, and the two that exclude each other.
    let known = libc::RENAME_NOREPLACE | libc::RENAME_EXCHANGE | libc::RENAME_WHITEOUT;
    let both = libc::RENAME_NOREPLACE | libc::RENAME_EXCHANGE;
    if flags & !known != 0
        || flags & both == both
        || (flags & libc::RENAME_WHITEOUT != 0 && flags & libc::RENAME_EXCHANGE != 0)
    {
        return Some(int_ret(Err(libc::EINVAL)));
    }
    // An empty path names nothing (without `AT_EMPTY_PATH`, which rename
    // does not take): the kernel's answer before any other about the names.
    if ending(from) == Ending::Empty || ending(to) == Ending::Empty {
        return Some(int_ret(Err(libc::ENOENT)));
    }
    match places {
        (Place::Inside(a), Place::Inside(b)) => {
            if flags & libc::RENAME_EXCHANGE != 0 {
                return Some(int_ret(Err(unsupported(
                    "renameat2 with RENAME_EXCHANGE",
                    libc::EINVAL,
                ))));
            }
            if flags & libc::RENAME_WHITEOUT != 0 {
                return Some(int_ret(Err(unsupported(
                    "renameat2 with RENAME_WHITEOUT",
                    libc::EINVAL,
                ))));
            }
            let replace = flags & libc::RENAME_NOREPLACE == 0;
            Some(int_ret(rename_names(&a, &b, replace)))
        }
        (Place::Bad(e), _) | (_, Place::Bad(e)) => Some(int_ret(Err(e))),
        (Place::Inside(_) | Place::Root, Place::Inside(_) | Place::Root) => {
            Some(int_ret(rename_with_root(&places, from, to, flags)))
        }
        (Place::Root, _) | (_, Place::Root) => Some(int_ret(Err(libc::EBUSY))),
        _ => Some(int_ret(Err(libc::EXDEV))),
    }
}

/// How a path the library took for the store's directory itself ends, as
/// given: the kernel answers an empty path, and one ending in `.` or `..`,
/// before it looks at what they name.
#[derive(Clone, Copy, PartialEq)]
enum Ending {
    Empty,
    Dot,
    DotDot,
    Name,
}

fn ending(p: *const c_char) -> Ending {
    if p.is_null() {
        return Ending::Name;
    }
    // SAFETY: a non-null path is the caller's C string.
    let b = unsafe { std::ffi::CStr::from_ptr(p) }.to_bytes();
    match b.rsplit(|&c| c == b'/').next() {
        _ if b.is_empty() => Ending::Empty,
        Some(b".") => Ending::Dot,
        Some(b"..") => Ending::DotDot,
        _ => Ending::Name,
    }
}

/// Whether the caller's path ends in `/`.
fn ends_in_slash(p: *const c_char) -> bool {
    // SAFETY: a non-null path is the caller's C string.
    !p.is_null()
        && unsafe { std::ffi::CStr::from_ptr(p) }
            .to_bytes()
            .ends_with(b"/")
}

/// A rename between a store file and the store's directory itself, in the
/// kernel's order: an empty path names nothing (`ENOENT`), a `.` or `..`
/// cannot be renamed nor renamed over (`EBUSY`), the source must exist, a
/// target there refuses `RENAME_NOREPLACE`, a file does not take a name
/// ending in `/` (`ENOTDIR`), a directory does not go into itself (`EINVAL`)
/// nor a file over the directory it is in (`ENOTEMPTY`); the directory
/// renamed to itself stays.
fn rename_with_root(
    places: &(Place, Place),
    from: *const c_char,
    to: *const c_char,
    flags: c_uint,
) -> Result<c_int, i32> {
    let (a, b) = (ending(from), ending(to));
    if a == Ending::Empty || b == Ending::Empty {
        return Err(libc::ENOENT);
    }
    if [a, b]
        .iter()
        .any(|e| matches!(e, Ending::Dot | Ending::DotDot))
    {
        return Err(libc::EBUSY);
    }
    let s = state::state()?;
    let exists = |p: &Place| match p {
        Place::Inside(n) => state::len_of(&s, n).is_ok(),
        _ => true,
    };
    if !exists(&places.0) {
        return Err(libc::ENOENT);
    }
    if flags & libc::RENAME_NOREPLACE != 0 && exists(&places.1) {
        return Err(libc::EEXIST);
    }
    if matches!(places.0, Place::Inside(_)) && ends_in_slash(to) {
        return Err(libc::ENOTDIR);
    }
    match places {
        (Place::Root, Place::Root) => Ok(0),
        (Place::Root, _) => Err(libc::EINVAL),
        _ if flags & libc::RENAME_EXCHANGE != 0 => Err(libc::EINVAL),
        _ => Err(libc::ENOTEMPTY),
    }
}

/// `rmdir` of the store's directory by `path`: an empty path names nothing
/// (`ENOENT`), a `.` is refused (`EINVAL`) and a `..` is never empty
/// (`ENOTEMPTY`), as the kernel answers before it looks further; not while
/// the store holds files (`ENOTEMPTY`, as of any directory); empty, it is
/// still the store's, in use as a mount point is (`EBUSY`).
fn rmdir_root(path: *const c_char) -> Result<c_int, i32> {
    match ending(path) {
        Ending::Empty => return Err(libc::ENOENT),
        Ending::Dot => return Err(libc::EINVAL),
        Ending::DotDot => return Err(libc::ENOTEMPTY),
        Ending::Name => {}
    }
    let s = state::state()?;
    match s.cs.store().list() {
        Ok(names) if !names.is_empty() => Err(libc::ENOTEMPTY),
        _ => Err(libc::EBUSY),
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn rename(from: *const c_char, to: *const c_char) -> c_int {
    rename_at(libc::AT_FDCWD, from, libc::AT_FDCWD, to, 0)
        // SAFETY: passed through with the caller's arguments.
        .unwrap_or_else(|| unsafe { real::rename()(from, to) })
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn renameat(
    d1: c_int,
    from: *const c_char,
    d2: c_int,
    to: *const c_char,
) -> c_int {
    rename_at(d1, from, d2, to, 0)
        // SAFETY: passed through with the caller's arguments.
        .unwrap_or_else(|| unsafe { real::renameat()(d1, from, d2, to) })
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn renameat2(
    d1: c_int,
    from: *const c_char,
    d2: c_int,
    to: *const c_char,
    flags: c_uint,
) -> c_int {
    rename_at(d1, from, d2, to, flags)
        // SAFETY: passed through with the caller's arguments.
        .unwrap_or_else(|| unsafe { real::renameat2()(d1, from, d2, to, flags) })
}

/// A call that makes a name `what` at `path` (relative to `dir`): refused
/// inside the store, which holds files it makes itself, not directories,
/// nodes or links; `None` outside it (the C library's call runs).
fn make_at(dir: c_int, path: *const c_char, what: &str) -> Option<c_int> {
    match classify(dir, path) {
        Place::Outside => None,
        Place::Bad(e) => Some(int_ret(Err(e))),
        // A name a file of the store has is taken, as any name is on a
        // local file system (`mkdir -p` and the like look for `EEXIST`).
        Place::Inside(name) if state::state().is_ok_and(|s| state::len_of(&s, &name).is_ok()) => {
            Some(int_ret(Err(libc::EEXIST)))
        }
        Place::Inside(_) => Some(int_ret(Err(unsupported(what, libc::EPERM)))),
        Place::Root if ending(path) == Ending::Empty => Some(int_ret(Err(libc::ENOENT))),
        Place::Root => Some(int_ret(Err(libc::EEXIST))),
    }
}

// The C library makes FIFOs and temporary directories by its own calls to
// the kernel, past this library's `mknodat` and `mkdir`: they are taken
// here.

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn mkfifo(path: *const c_char, mode: libc::mode_t) -> c_int {
    make_at(libc::AT_FDCWD, path, MKNOD)
        // SAFETY: passed through with the caller's arguments.
        .unwrap_or_else(|| unsafe { real::mkfifo()(path, mode) })
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn mkfifoat(
    dir: c_int,
    path: *const c_char,
    mode: libc::mode_t,
) -> c_int {
    make_at(dir, path, MKNOD)
        // SAFETY: passed through with the caller's arguments.
        .unwrap_or_else(|| unsafe { real::mkfifoat()(dir, path, mode) })
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn mkdtemp(template: *mut c_char) -> *mut c_char {
    // SAFETY: a non-null template is the caller's C string.
    let six_x = !template.is_null()
        && unsafe { std::ffi::CStr::from_ptr(template) }
            .to_bytes()
            .ends_with(b"XXXXXX");
    if !six_x {
        // SAFETY: the C library's answer to a template it refuses.
        return unsafe { real::mkdtemp()(template) };
    }
    match classify(libc::AT_FDCWD, template) {
        Place::Inside(_) => {
            set_errno(unsupported(MKDIR, libc::EPERM));
            std::ptr::null_mut()
        }
        Place::Bad(e) => {
            set_errno(e);
            std::ptr::null_mut()
        }
        // SAFETY: passed through with the caller's arguments (the store's
        // directory itself as a template names a sibling of it).
        Place::Outside | Place::Root => unsafe { real::mkdtemp()(template) },
    }
}

const MKDIR: &str = "mkdir in SETCACHE_DIR (the store holds files, not directories)";
const MKNOD: &str = "mknod in SETCACHE_DIR (the store holds regular files only)";
const SYMLINK: &str = "symlink in SETCACHE_DIR (the store holds regular files only)";

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn mkdir(path: *const c_char, mode: libc::mode_t) -> c_int {
    make_at(libc::AT_FDCWD, path, MKDIR)
        // SAFETY: passed through with the caller's arguments.
        .unwrap_or_else(|| unsafe { real::mkdir()(path, mode) })
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn mkdirat(
    dir: c_int,
    path: *const c_char,
    mode: libc::mode_t,
) -> c_int {
    make_at(dir, path, MKDIR)
        // SAFETY: passed through with the caller's arguments.
        .unwrap_or_else(|| unsafe { real::mkdirat()(dir, path, mode) })
}

/// `mknod` of `path` with `mode` taken here, or `None` for the kernel: a
/// regular file (type `S_IFREG` or none) is made in the store, empty, as
/// `open` with `O_CREAT | O_EXCL` makes it; other types are refused. The
/// type is looked at first, before the name, as the kernel does.
fn mknod_at(dir: c_int, path: *const c_char, mode: libc::mode_t) -> Option<c_int> {
    let place = match classify(dir, path) {
        Place::Outside => return None,
        p => p,
    };
    match mode & libc::S_IFMT {
        0 | libc::S_IFREG => {}
        libc::S_IFCHR | libc::S_IFBLK | libc::S_IFIFO | libc::S_IFSOCK => {
            return make_at(dir, path, MKNOD);
        }
        libc::S_IFDIR => return Some(int_ret(Err(libc::EPERM))),
        _ => return Some(int_ret(Err(libc::EINVAL))),
    }
    Some(int_ret(match place {
        Place::Inside(name) => state::state().and_then(|s| {
            let n = state::node(&s, &name, true, true, true).map_err(|e| match e {
                Error::FileExists(_) => libc::EEXIST,
                e => fail("mknod", &e),
            })?;
            state::keep(&s, n);
            Ok(0)
        }),
        Place::Bad(e) => Err(e),
        Place::Root if ending(path) == Ending::Empty => Err(libc::ENOENT),
        Place::Root | Place::Outside => Err(libc::EEXIST),
    }))
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn mknod(
    path: *const c_char,
    mode: libc::mode_t,
    dev: libc::dev_t,
) -> c_int {
    mknod_at(libc::AT_FDCWD, path, mode)
        // SAFETY: passed through with the caller's arguments.
        .unwrap_or_else(|| unsafe { real::mknod()(path, mode, dev) })
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn mknodat(
    dir: c_int,
    path: *const c_char,
    mode: libc::mode_t,
    dev: libc::dev_t,
) -> c_int {
    mknod_at(dir, path, mode)
        // SAFETY: passed through with the caller's arguments.
        .unwrap_or_else(|| unsafe { real::mknodat()(dir, path, mode, dev) })
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn symlink(target: *const c_char, path: *const c_char) -> c_int {
    if ending(target) == Ending::Empty {
        // The kernel's answer to an empty target, before it looks at `path`.
        return int_ret(Err(libc::ENOENT));
    }
    make_at(libc::AT_FDCWD, path, SYMLINK)
        // SAFETY: passed through with the caller's arguments.
        .unwrap_or_else(|| unsafe { real::symlink()(target, path) })
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn symlinkat(
    target: *const c_char,
    dir: c_int,
    path: *const c_char,
) -> c_int {
    if ending(target) == Ending::Empty {
        return int_ret(Err(libc::ENOENT));
    }
    make_at(dir, path, SYMLINK)
        // SAFETY: passed through with the caller's arguments.
        .unwrap_or_else(|| unsafe { real::symlinkat()(target, dir, path) })
}

/// A file of the store is no directory: its descriptor's placeholder (the
/// store's directory) would otherwise become the working directory.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn fchdir(fd: c_int) -> c_int {
    match state::desc(fd) {
        Some(_) => int_ret(Err(libc::ENOTDIR)),
        None if state::parents_placeholder(fd) => int_ret(Err(libc::EBADF)),
        // SAFETY: passed through with the caller's arguments.
        None => unsafe { real::fchdir()(fd) },
    }
}

/// A hard link from `from` to `to`: refused when either is in the store (a
/// file of the store has one name; one outside cannot be linked into it, as
/// across file systems); `None` when neither is.
/// `follow`: `from` is followed should it be a link (`linkat`'s
/// `AT_SYMLINK_FOLLOW`), to a file of the store as to any other.
fn link_at(
    d1: c_int,
    from: *const c_char,
    d2: c_int,
    to: *const c_char,
    follow: bool,
) -> Option<c_int> {
    let (src, dst) = (classify_as(d1, from, follow), classify(d2, to));
    match (&src, &dst) {
        (Place::Outside, Place::Outside) => None,
        // An empty path names nothing (`AT_EMPTY_PATH` is looked for before).
        _ if ending(from) == Ending::Empty || ending(to) == Ending::Empty => {
            Some(int_ret(Err(libc::ENOENT)))
        }
        (Place::Bad(e), _) | (_, Place::Bad(e)) => Some(int_ret(Err(*e))),
        _ => {
            // As the kernel: a missing source, then a name taken, then the
            // refusal (a second name in the store, or across file systems).
            let at = |place: &Place, dir: c_int, path: *const c_char, follow: bool| {
                link_end(place, dir, path, follow)
            };
            let r = at(&src, d1, from, follow).and_then(|there| {
                if !there || ending(to) == Ending::Empty {
                    return Err(libc::ENOENT);
                }
                if at(&dst, d2, to, false)? {
                    return Err(libc::EEXIST);
                }
                Err(match (&src, &dst) {
                    (Place::Inside(_) | Place::Root, Place::Inside(_) | Place::Root) => {
                        unsupported(
                            "link in SETCACHE_DIR (a file of the store has one name)",
                            libc::EPERM,
                        )
                    }
                    _ => libc::EXDEV,
                })
            });
            Some(int_ret(r))
        }
    }
}

/// Whether an end of a `link` names something: a file of the store, the
/// store's directory, or (outside) whatever the kernel finds; an error other
/// than `ENOENT` from the kernel's look is the answer.
fn link_end(place: &Place, dir: c_int, path: *const c_char, follow: bool) -> Result<bool, i32> {
    match place {
        Place::Root => Ok(true),
        Place::Inside(name) => {
            let s = state::state()?;
            Ok(state::len_of(&s, name).is_ok())
        }
        Place::Bad(e) => Err(*e),
        Place::Outside => {
            // SAFETY: an all-zero stat is a valid value for the kernel to fill.
            let mut st: libc::stat64 = unsafe { std::mem::zeroed() };
            let flags = if follow { 0 } else { libc::AT_SYMLINK_NOFOLLOW };
            // SAFETY: the caller's path, passed as given; `st` is valid.
            if unsafe { real::fstatat64()(dir, path, &mut st, flags) } == 0 {
                return Ok(true);
            }
            // SAFETY: reads this thread's errno.
            match unsafe { *libc::__errno_location() } {
                libc::ENOENT => Ok(false),
                e => Err(e),
            }
        }
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn link(from: *const c_char, to: *const c_char) -> c_int {
    link_at(libc::AT_FDCWD, from, libc::AT_FDCWD, to, false)
        // SAFETY: passed through with the caller's arguments.
        .unwrap_or_else(|| unsafe { real::link()(from, to) })
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn linkat(
    d1: c_int,
    from: *const c_char,
    d2: c_int,
    to: *const c_char,
    flags: c_int,
) -> c_int {
    // The kernel refuses flags it does not know before it looks at a name.
    if flags & !(libc::AT_SYMLINK_FOLLOW | libc::AT_EMPTY_PATH) != 0 {
        return int_ret(Err(libc::EINVAL));
    }
    if flags & libc::AT_EMPTY_PATH != 0
        && empty(from)
        && let Some(r) = link_descriptor(d1, d2, to)
    {
        return int_ret(r);
    }
    link_at(d1, from, d2, to, flags & libc::AT_SYMLINK_FOLLOW != 0)
        // SAFETY: passed through with the caller's arguments.
        .unwrap_or_else(|| unsafe { real::linkat()(d1, from, d2, to, flags) })
}

/// `linkat(fd, "", d2, to, AT_EMPTY_PATH)`, a second name for what `fd`
/// is open on, when either end is the store's: refused in the kernel's
/// order (a deleted file has none to give, then the new name's errors,
/// then a directory has no second name, then the refusal a `link` of a
/// name gets); `None` when neither end is the store's.
fn link_descriptor(d1: c_int, d2: c_int, to: *const c_char) -> Option<Result<c_int, i32>> {
    enum Source {
        File,
        Deleted,
        StoreDir,
        Other,
    }
    let src = match state::desc(d1) {
        Some(d) if d.node.forgotten.load(std::sync::atomic::Ordering::Acquire) => Source::Deleted,
        Some(_) => Source::File,
        None if d1 >= 0 && matches!(classify(d1, c".".as_ptr()), Place::Root) => Source::StoreDir,
        None => Source::Other,
    };
    let dst = classify(d2, to);
    if matches!((&src, &dst), (Source::Other, Place::Outside)) {
        return None;
    }
    Some((|| {
        if matches!(src, Source::Deleted) || ending(to) == Ending::Empty {
            return Err(libc::ENOENT);
        }
        if let Place::Bad(e) = dst {
            return Err(e);
        }
        if link_end(&dst, d2, to, false)? {
            return Err(libc::EEXIST);
        }
        Err(match (src, dst) {
            (Source::StoreDir, _) => libc::EPERM,
            (Source::File, Place::Inside(_) | Place::Root) => unsupported(
                "link in SETCACHE_DIR (a file of the store has one name)",
                libc::EPERM,
            ),
            _ => libc::EXDEV,
        })
    })())
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn rmdir(path: *const c_char) -> c_int {
    match classify(libc::AT_FDCWD, path) {
        Place::Bad(e) => int_ret(Err(e)),
        Place::Inside(name) => int_ret(with_state(|s| {
            state::len_of(s, &name).map_err(|e| e.posix_errno())?;
            Err(libc::ENOTDIR)
        })),
        Place::Root => int_ret(rmdir_root(path)),
        // SAFETY: passed through with the caller's arguments.
        Place::Outside => unsafe { real::rmdir()(path) },
    }
}

/// `remove`: the C library's calls `unlink` (and `rmdir` for a directory)
/// inside itself, past this library's `unlink`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn remove(path: *const c_char) -> c_int {
    match classify(libc::AT_FDCWD, path) {
        Place::Bad(e) => int_ret(Err(e)),
        Place::Inside(name) => int_ret(unlink_name(&name)),
        Place::Root => int_ret(rmdir_root(path)),
        // SAFETY: passed through with the caller's arguments.
        Place::Outside => unsafe { real::remove()(path) },
    }
}

/// The `mkstemp` family, whose C library forms open their file inside the
/// C library, past this library's `open`: the six `X`s before the last
/// `suffix_len` bytes of `template` replaced by letters and digits until an
/// exclusive create through this library's `open` succeeds (mode 0600), as
/// the C library does; `flags` may add `O_APPEND`, `O_CLOEXEC`, `O_SYNC`.
///
/// # Safety
/// `template` is a NUL-terminated string the caller lets this write into.
unsafe fn make_temp(template: *mut c_char, suffix_len: c_int, flags: c_int) -> c_int {
    if template.is_null() {
        return int_ret(Err(libc::EINVAL));
    }
    // SAFETY: the caller's NUL-terminated string.
    let len = unsafe { libc::strlen(template) };
    let Some(at) = usize::try_from(suffix_len)
        .ok()
        .and_then(|s| len.checked_sub(s))
        .and_then(|end| end.checked_sub(6))
    else {
        return int_ret(Err(libc::EINVAL));
    };
    // SAFETY: `at + 6 <= len`, inside the caller's string.
    let xs = unsafe { std::slice::from_raw_parts_mut(template.add(at).cast::<u8>(), 6) };
    if xs.iter().any(|&b| b != b'X') {
        return int_ret(Err(libc::EINVAL));
    }
    const LETTERS: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    let flags = (flags & !libc::O_ACCMODE) | libc::O_RDWR | libc::O_CREAT | libc::O_EXCL;
    for _ in 0..10_000 {
        let mut r = [0u8; 6];
        // SAFETY: fills the six bytes of `r`.
        let got = unsafe { libc::getrandom(r.as_mut_ptr().cast(), r.len(), 0) };
        if got != r.len() as isize {
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64)
                ^ ((std::process::id() as u64) << 32);
            r = t.to_le_bytes()[..6].try_into().unwrap_or_default();
        }
        for (x, b) in xs.iter_mut().zip(r) {
            *x = LETTERS[b as usize % LETTERS.len()];
        }
        // SAFETY: the caller's string, now a name; mode for the create.
        let fd = unsafe { open64(template, flags, 0o600) };
        // SAFETY: reads this thread's errno.
        if fd >= 0 || unsafe { *libc::__errno_location() } != libc::EEXIST {
            return fd;
        }
    }
    int_ret(Err(libc::EEXIST))
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn mkstemp(template: *mut c_char) -> c_int {
    // SAFETY: the caller's template.
    unsafe { make_temp(template, 0, 0) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn mkstemp64(template: *mut c_char) -> c_int {
    // SAFETY: the caller's template.
    unsafe { make_temp(template, 0, 0) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn mkostemp(template: *mut c_char, flags: c_int) -> c_int {
    // SAFETY: the caller's template.
    unsafe { make_temp(template, 0, flags) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn mkostemp64(template: *mut c_char, flags: c_int) -> c_int {
    // SAFETY: the caller's template.
    unsafe { make_temp(template, 0, flags) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn mkstemps(template: *mut c_char, suffix_len: c_int) -> c_int {
    // SAFETY: the caller's template.
    unsafe { make_temp(template, suffix_len, 0) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn mkstemps64(template: *mut c_char, suffix_len: c_int) -> c_int {
    // SAFETY: the caller's template.
    unsafe { make_temp(template, suffix_len, 0) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn mkostemps(
    template: *mut c_char,
    suffix_len: c_int,
    flags: c_int,
) -> c_int {
    // SAFETY: the caller's template.
    unsafe { make_temp(template, suffix_len, flags) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn mkostemps64(
    template: *mut c_char,
    suffix_len: c_int,
    flags: c_int,
) -> c_int {
    // SAFETY: the caller's template.
    unsafe { make_temp(template, suffix_len, flags) }
}

// ---- attributes ---------------------------------------------------------

/// An inode number for a name: stable while the name is.
pub(crate) fn name_ino(name: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in name {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h | 1
}

/// The inode number of store file `name`: its first backing file's (device
/// and inode mixed into one number), which a rename keeps, as a local file
/// system keeps a renamed file's, and which a file made anew under the name
/// does not share. A name whose backing file cannot be examined (deleted
/// meanwhile) gets one from the name.
pub(crate) fn ino_of(s: &State, name: &str) -> u64 {
    use std::os::unix::ffi::OsStrExt;
    let first =
        s.cs.store()
            .backing_paths(name)
            .ok()
            .and_then(|p| p.into_iter().next());
    if let Some(c) = first.and_then(|p| std::ffi::CString::new(p.as_os_str().as_bytes()).ok()) {
        // SAFETY: a zeroed stat64 is valid.
        let mut st: libc::stat64 = unsafe { std::mem::zeroed() };
        // SAFETY: a NUL-terminated path and a stat buffer, both live here.
        if unsafe { real::stat64()(c.as_ptr(), &mut st) } == 0 {
            let mixed = (st.st_ino ^ st.st_dev.rotate_left(40)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            return mixed | 1;
        }
    }
    name_ino(name.as_bytes())
}

fn fill_stat(s: &State, name: &str, len: u64, out: *mut libc::stat64) -> Result<c_int, i32> {
    fill_stat_as(s, ino_of(s, name), len, out)
}

fn fill_stat_as(s: &State, ino: u64, len: u64, out: *mut libc::stat64) -> Result<c_int, i32> {
    if out.is_null() {
        return Err(libc::EFAULT);
    }
    let cfg = state::config().ok_or(libc::EINVAL)?;
    // SAFETY: a zeroed stat64 is valid.
    let mut st: libc::stat64 = unsafe { std::mem::zeroed() };
    st.st_dev = cfg.dev_ino.0;
    st.st_ino = ino;
    st.st_nlink = 1;
    st.st_mode = libc::S_IFREG | 0o644;
    (st.st_uid, st.st_gid) = s.owner;
    st.st_size = len as i64;
    st.st_blksize = s.cs.cache().page_size() as i64;
    st.st_blocks = len.div_ceil(512) as i64;
    st.st_atime = s.opened;
    st.st_mtime = s.opened;
    st.st_ctime = s.opened;
    // SAFETY: the caller passes a stat buffer.
    unsafe { out.write(st) };
    Ok(0)
}

fn stat_desc(d: &Desc, out: *mut libc::stat64) -> Result<c_int, i32> {
    let s = state::state()?;
    let ino = d.node.ino();
    fill_stat_as(&s, ino, d.node.len(), out)
}

fn stat_name(name: &str, out: *mut libc::stat64) -> Result<c_int, i32> {
    let s = state::state()?;
    let len = len_or_enoent(&s, name, "stat")?;
    fill_stat(&s, name, len, out)
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn fstat64(fd: c_int, out: *mut libc::stat64) -> c_int {
    match state::desc(fd) {
        None if state::parents_placeholder(fd) => int_ret(Err(libc::EBADF)),
        // SAFETY: passed through with the caller's arguments.
        None => unsafe { real::fstat64()(fd, out) },
        Some(d) => int_ret(stat_desc(&d, out)),
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn fstat(fd: c_int, out: *mut libc::stat64) -> c_int {
    // SAFETY: the same function on 64-bit Linux, where the offset types agree.
    unsafe { fstat64(fd, out) }
}

macro_rules! path_stat {
    ($($name:ident($follow:expr);)*) => {$(
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(path: *const c_char, out: *mut libc::stat64) -> c_int {
            match classify_as(libc::AT_FDCWD, path, $follow) {
                Place::Bad(e) => int_ret(Err(e)),
                Place::Inside(name) => int_ret(stat_name(&name, out)),
                // SAFETY: passed through with the caller's arguments.
                _ => unsafe { real::$name()(path, out) },
            }
        }
    )*};
}

path_stat! {
    stat(true);
    stat64(true);
    lstat(false);
    lstat64(false);
}

/// Whether a path given with `AT_EMPTY_PATH` names the descriptor itself:
/// an empty one, or a null one (Linux takes it so since 6.11).
fn empty(path: *const c_char) -> bool {
    // SAFETY: a non-null path is a C string.
    path.is_null() || unsafe { *path } == 0
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn fstatat64(
    dirfd: c_int,
    path: *const c_char,
    out: *mut libc::stat64,
    flags: c_int,
) -> c_int {
    if flags & !STAT_FLAGS != 0 {
        return int_ret(Err(libc::EINVAL));
    }
    if flags & libc::AT_EMPTY_PATH != 0 && empty(path) {
        if let Some(d) = state::desc(dirfd) {
            return int_ret(stat_desc(&d, out));
        }
        if state::parents_placeholder(dirfd) {
            return int_ret(Err(libc::EBADF));
        }
    } else {
        match classify_as(dirfd, path, flags & libc::AT_SYMLINK_NOFOLLOW == 0) {
            Place::Inside(name) => return int_ret(stat_name(&name, out)),
            Place::Bad(e) => return int_ret(Err(e)),
            Place::Root | Place::Outside => {}
        }
    }
    // SAFETY: passed through with the caller's arguments.
    unsafe { real::fstatat64()(dirfd, path, out, flags) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn fstatat(
    dirfd: c_int,
    path: *const c_char,
    out: *mut libc::stat64,
    flags: c_int,
) -> c_int {
    // SAFETY: the same function on 64-bit Linux, where the offset types agree.
    unsafe { fstatat64(dirfd, path, out, flags) }
}

// The `stat` entry points of C libraries before 2.33, which programs built
// against them still call (`stat` was a macro over these): the version
// argument names the structure's layout, the one `stat64` has here, so it is
// not looked at. Calls outside the store go to the functions that replaced
// them.

macro_rules! old_stat {
    ($($name:ident($($arg:ident: $ty:ty),*) => $now:ident;)*) => {$(
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(_ver: c_int, $($arg: $ty),*) -> c_int {
            // SAFETY: passed on with the caller's arguments.
            unsafe { $now($($arg),*) }
        }
    )*};
}

old_stat! {
    __fxstat64(fd: c_int, out: *mut libc::stat64) => fstat64;
    __fxstat(fd: c_int, out: *mut libc::stat64) => fstat64;
    __xstat64(path: *const c_char, out: *mut libc::stat64) => stat64;
    __xstat(path: *const c_char, out: *mut libc::stat64) => stat64;
    __lxstat64(path: *const c_char, out: *mut libc::stat64) => lstat64;
    __lxstat(path: *const c_char, out: *mut libc::stat64) => lstat64;
    __fxstatat64(dirfd: c_int, path: *const c_char, out: *mut libc::stat64, flags: c_int) => fstatat64;
    __fxstatat(dirfd: c_int, path: *const c_char, out: *mut libc::stat64, flags: c_int) => fstatat64;
}

fn statx_of(st: &libc::stat64, out: *mut libc::statx) -> Result<c_int, i32> {
    if out.is_null() {
        return Err(libc::EFAULT);
    }
    // SAFETY: a zeroed statx is valid.
    let mut x: libc::statx = unsafe { std::mem::zeroed() };
    x.stx_mask = libc::STATX_BASIC_STATS;
    x.stx_blksize = st.st_blksize as u32;
    x.stx_nlink = st.st_nlink as u32;
    x.stx_uid = st.st_uid;
    x.stx_gid = st.st_gid;
    x.stx_mode = st.st_mode as u16;
    x.stx_ino = st.st_ino;
    x.stx_size = st.st_size as u64;
    x.stx_blocks = st.st_blocks as u64;
    // SAFETY: a zeroed statx_timestamp is valid.
    let mut t: libc::statx_timestamp = unsafe { std::mem::zeroed() };
    t.tv_sec = st.st_mtime;
    (x.stx_atime, x.stx_mtime, x.stx_ctime, x.stx_btime) = (t, t, t, t);
    x.stx_dev_major = libc::major(st.st_dev);
    x.stx_dev_minor = libc::minor(st.st_dev);
    // SAFETY: the caller passes a statx buffer.
    unsafe { out.write(x) };
    Ok(0)
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn statx(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mask: c_uint,
    out: *mut libc::statx,
) -> c_int {
    // The kernel's checks, before any path is looked at: known flags, one
    // sync type, no reserved bit in the mask.
    let sync = libc::AT_STATX_FORCE_SYNC | libc::AT_STATX_DONT_SYNC;
    if flags & !STAT_FLAGS != 0 || flags & sync == sync || mask & STATX_RESERVED != 0 {
        return int_ret(Err(libc::EINVAL));
    }
    // SAFETY: a zeroed stat64 is valid.
    let mut st: libc::stat64 = unsafe { std::mem::zeroed() };
    let r = if flags & libc::AT_EMPTY_PATH != 0 && empty(path) {
        match state::desc(dirfd) {
            Some(d) => stat_desc(&d, &mut st),
            None if state::parents_placeholder(dirfd) => Err(libc::EBADF),
            // SAFETY: passed through with the caller's arguments.
            None => return unsafe { real::statx()(dirfd, path, flags, mask, out) },
        }
    } else {
        match classify_as(dirfd, path, flags & libc::AT_SYMLINK_NOFOLLOW == 0) {
            Place::Bad(e) => Err(e),
            Place::Inside(name) => stat_name(&name, &mut st),
            // SAFETY: passed through with the caller's arguments.
            _ => return unsafe { real::statx()(dirfd, path, flags, mask, out) },
        }
    };
    int_ret(r.and_then(|_| statx_of(&st, out)))
}

/// The flags the kernel's `fstatat` and `statx` take; others fail `EINVAL`.
const STAT_FLAGS: c_int = libc::AT_SYMLINK_NOFOLLOW
    | libc::AT_NO_AUTOMOUNT
    | libc::AT_EMPTY_PATH
    | libc::AT_STATX_FORCE_SYNC
    | libc::AT_STATX_DONT_SYNC;

/// `statx`'s mask bit kept for a later extension (`STATX__RESERVED`).
const STATX_RESERVED: c_uint = 0x8000_0000;

/// The modes `access` and `faccessat` know: `F_OK` or any of `R_OK`, `W_OK`
/// and `X_OK`.
const ACCESS_MODES: c_int = libc::R_OK | libc::W_OK | libc::X_OK;

fn access_name(name: &str, mode: c_int) -> Result<c_int, i32> {
    with_state(|s| {
        len_or_enoent(s, name, "access")?;
        if mode & libc::X_OK != 0 {
            return Err(libc::EACCES);
        }
        Ok(0)
    })
}

/// `access` of `path`, or `outside` (the C library's call) for a path
/// outside the store.
fn access_path(path: *const c_char, mode: c_int, outside: impl FnOnce() -> c_int) -> c_int {
    if mode & !ACCESS_MODES != 0 {
        return int_ret(Err(libc::EINVAL));
    }
    match classify_as(libc::AT_FDCWD, path, true) {
        Place::Bad(e) => int_ret(Err(e)),
        Place::Inside(name) => int_ret(access_name(&name, mode)),
        _ => outside(),
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn access(path: *const c_char, mode: c_int) -> c_int {
    // SAFETY: passed through with the caller's arguments.
    access_path(path, mode, || unsafe { real::access()(path, mode) })
}

/// `euidaccess` and `eaccess`: `access` with the effective ids, which the
/// C library answers by its own `fstatat`, past this library's.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn euidaccess(path: *const c_char, mode: c_int) -> c_int {
    // SAFETY: passed through with the caller's arguments.
    access_path(path, mode, || unsafe { real::euidaccess()(path, mode) })
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn eaccess(path: *const c_char, mode: c_int) -> c_int {
    // SAFETY: the same call, as the C library's `eaccess` is.
    unsafe { euidaccess(path, mode) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn faccessat(
    dirfd: c_int,
    path: *const c_char,
    mode: c_int,
    flags: c_int,
) -> c_int {
    let known = libc::AT_EACCESS | libc::AT_SYMLINK_NOFOLLOW | libc::AT_EMPTY_PATH;
    if mode & !ACCESS_MODES != 0 || flags & !known != 0 {
        return int_ret(Err(libc::EINVAL));
    }
    if flags & libc::AT_EMPTY_PATH != 0 && empty(path) {
        // The descriptor itself: an open file of the store is there, and
        // none is executable.
        if state::desc(dirfd).is_some() {
            return int_ret(if mode & libc::X_OK != 0 {
                Err(libc::EACCES)
            } else {
                Ok(0)
            });
        }
        if state::parents_placeholder(dirfd) {
            return int_ret(Err(libc::EBADF));
        }
    }
    match classify_as(dirfd, path, flags & libc::AT_SYMLINK_NOFOLLOW == 0) {
        Place::Bad(e) => int_ret(Err(e)),
        Place::Inside(name) => int_ret(access_name(&name, mode)),
        // SAFETY: passed through with the caller's arguments.
        _ => unsafe { real::faccessat()(dirfd, path, mode, flags) },
    }
}

/// A file of the store is no symbolic link.
fn readlink_name(name: &str) -> ssize_t {
    size_ret(with_state(|s| {
        state::len_of(s, name).map_err(|e| e.posix_errno())?;
        Err(libc::EINVAL)
    }))
}

/// `readlink` of a store descriptor's link: `text` into `buf` (`n` bytes at
/// most, cut short as the kernel's, no NUL).
fn readlink_text(text: &[u8], buf: *mut c_char, n: size_t) -> ssize_t {
    // The kernel takes the size as an `int`, and refuses one not above 0.
    if n == 0 || n > c_int::MAX as size_t {
        return size_ret(Err(libc::EINVAL));
    }
    if buf.is_null() {
        return size_ret(Err(libc::EFAULT));
    }
    let k = text.len().min(n);
    // SAFETY: the caller's buffer holds `n` bytes (readlink's contract), and `k` is at most `n`.
    unsafe { std::ptr::copy_nonoverlapping(text.as_ptr(), buf.cast::<u8>(), k) };
    k as ssize_t
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn readlink(
    path: *const c_char,
    buf: *mut c_char,
    n: size_t,
) -> ssize_t {
    if let Some(t) = crate::path::descriptor_link_text(path) {
        return readlink_text(&t, buf, n);
    }
    match classify(libc::AT_FDCWD, path) {
        Place::Bad(e) => size_ret(Err(e)),
        Place::Inside(name) => readlink_name(&name),
        // SAFETY: passed through with the caller's arguments.
        _ => unsafe { real::readlink()(path, buf, n) },
    }
}

/// The fortified forms that a caller built with `_FORTIFY_SOURCE` calls for
/// a buffer of known size (`buflen`): the C library's check of the length
/// asked for against it (fatal past it, as the C library's), then this
/// library's function (the C library's forms call its own, past this
/// library's).
macro_rules! fortified {
    ($($name:ident => $plain:ident($($a:ident: $t:ty),*) asking $n:ident;)*) => {$(
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name($($a: $t,)* buflen: size_t) -> ssize_t {
            if $n > buflen {
                crate::fatal(concat!("buffer overflow detected in ", stringify!($plain)));
            }
            // SAFETY: the caller's arguments, checked as the fortified function does.
            unsafe { $plain($($a),*) }
        }
    )*};
}

fortified! {
    __read_chk => read(fd: c_int, buf: *mut c_void, n: size_t) asking n;
    __pread64_chk => pread64(fd: c_int, buf: *mut c_void, n: size_t, off: off64_t) asking n;
    __readlink_chk => readlink(path: *const c_char, buf: *mut c_char, n: size_t) asking n;
    __readlinkat_chk => readlinkat(
        dirfd: c_int, path: *const c_char, buf: *mut c_char, n: size_t
    ) asking n;
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn readlinkat(
    dirfd: c_int,
    path: *const c_char,
    buf: *mut c_char,
    n: size_t,
) -> ssize_t {
    if let Some(t) = crate::path::descriptor_link_text(path) {
        return readlink_text(&t, buf, n);
    }
    match classify(dirfd, path) {
        Place::Bad(e) => size_ret(Err(e)),
        Place::Inside(name) => readlink_name(&name),
        // SAFETY: passed through with the caller's arguments.
        _ => unsafe { real::readlinkat()(dirfd, path, buf, n) },
    }
}

// Owners, modes and times are not kept by the store: changing them on a
// file of the store succeeds and changes nothing.

/// Calls on a descriptor that change its file's owner, mode or times.
macro_rules! fd_meta {
    ($($name:ident($($a:ident: $t:ty),*);)*) => {$(
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(fd: c_int $(, $a: $t)*) -> c_int {
            match state::desc(fd) {
                // SAFETY: passed through with the caller's arguments.
                None => unsafe { real::$name()(fd $(, $a)*) },
                // The kernel refuses an O_PATH descriptor here.
                Some(d) if d.path_only() => int_ret(Err(libc::EBADF)),
                Some(_) => 0,
            }
        }
    )*};
}

fd_meta! {
    fchmod(mode: libc::mode_t);
    fchown(uid: libc::uid_t, gid: libc::gid_t);
    futimens(times: *const libc::timespec);
    futimes(times: *const libc::timeval);
}

/// Calls on a path that change its file's owner, mode or times: on a file
/// of the store, they succeed if it exists.
macro_rules! path_meta {
    ($($name:ident($($a:ident: $t:ty),*) $flags:expr;)*) => {$(
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(path: *const c_char $(, $a: $t)*) -> c_int {
            match meta_at(libc::AT_FDCWD, path, $flags, false) {
                Some(rc) => rc,
                // SAFETY: passed through with the caller's arguments.
                None => unsafe { real::$name()(path $(, $a)*) },
            }
        }
    )*};
}

path_meta! {
    chmod(mode: libc::mode_t) 0;
    chown(uid: libc::uid_t, gid: libc::gid_t) 0;
    lchown(uid: libc::uid_t, gid: libc::gid_t) libc::AT_SYMLINK_NOFOLLOW;
    utime(times: *const libc::utimbuf) 0;
    utimes(times: *const libc::timeval) 0;
    lutimes(times: *const libc::timeval) libc::AT_SYMLINK_NOFOLLOW;
    lchmod(mode: libc::mode_t) libc::AT_SYMLINK_NOFOLLOW;
}

/// An owner, mode or times change of `path` relative to `dirfd`, or of
/// `dirfd` itself (`AT_EMPTY_PATH` with an empty path; a null path where
/// `null_is_fd`, as `utimensat` and `futimesat` take it): its result when
/// the file is the store's, `None` to pass the call through.
fn meta_at(dirfd: c_int, path: *const c_char, flags: c_int, null_is_fd: bool) -> Option<c_int> {
    let on_fd = (null_is_fd && path.is_null()) || (flags & libc::AT_EMPTY_PATH != 0 && empty(path));
    if on_fd {
        if state::parents_placeholder(dirfd) {
            return Some(int_ret(Err(libc::EBADF)));
        }
        return state::desc(dirfd).map(|_| 0);
    }
    match classify_as(dirfd, path, flags & libc::AT_SYMLINK_NOFOLLOW == 0) {
        Place::Bad(e) => Some(int_ret(Err(e))),
        Place::Inside(name) => Some(int_ret(access_name(&name, 0))),
        _ => None,
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn fchownat(
    dirfd: c_int,
    path: *const c_char,
    uid: libc::uid_t,
    gid: libc::gid_t,
    flags: c_int,
) -> c_int {
    match meta_at(dirfd, path, flags, false) {
        Some(rc) => rc,
        // SAFETY: passed through with the caller's arguments.
        None => unsafe { real::fchownat()(dirfd, path, uid, gid, flags) },
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn fchmodat(
    dirfd: c_int,
    path: *const c_char,
    mode: libc::mode_t,
    flags: c_int,
) -> c_int {
    match meta_at(dirfd, path, flags, false) {
        Some(rc) => rc,
        // SAFETY: passed through with the caller's arguments.
        None => unsafe { real::fchmodat()(dirfd, path, mode, flags) },
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn utimensat(
    dirfd: c_int,
    path: *const c_char,
    times: *const libc::timespec,
    flags: c_int,
) -> c_int {
    // The C library's refuses a null path (`EINVAL`): only `futimesat`
    // takes it for the descriptor itself.
    match meta_at(dirfd, path, flags, false) {
        Some(rc) => rc,
        // SAFETY: passed through with the caller's arguments.
        None => unsafe { real::utimensat()(dirfd, path, times, flags) },
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn futimesat(
    dirfd: c_int,
    path: *const c_char,
    times: *const libc::timeval,
) -> c_int {
    match meta_at(dirfd, path, 0, true) {
        Some(rc) => rc,
        // SAFETY: passed through with the caller's arguments.
        None => unsafe { real::futimesat()(dirfd, path, times) },
    }
}

// ---- extended attributes: a file of the store has none ------------------

fn no_xattr(name: &str, list: bool) -> ssize_t {
    size_ret(with_state(|s| {
        len_or_enoent(s, name, "getxattr")?;
        if list { Ok(0) } else { Err(libc::ENODATA) }
    }))
}

macro_rules! path_xattr {
    ($($name:ident($follow:expr);)*) => {$(
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(
            path: *const c_char,
            attr: *const c_char,
            value: *mut c_void,
            size: size_t,
        ) -> ssize_t {
            match classify_as(libc::AT_FDCWD, path, $follow) {
                Place::Bad(e) => size_ret(Err(e)),
                Place::Inside(name) => no_xattr(&name, false),
                // SAFETY: passed through with the caller's arguments.
                _ => unsafe { real::$name()(path, attr, value, size) },
            }
        }
    )*};
}

path_xattr! {
    getxattr(true);
    lgetxattr(false);
}

macro_rules! path_listxattr {
    ($($name:ident($follow:expr);)*) => {$(
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(path: *const c_char, list: *mut c_char, size: size_t) -> ssize_t {
            match classify_as(libc::AT_FDCWD, path, $follow) {
                Place::Bad(e) => size_ret(Err(e)),
                Place::Inside(name) => no_xattr(&name, true),
                // SAFETY: passed through with the caller's arguments.
                _ => unsafe { real::$name()(path, list, size) },
            }
        }
    )*};
}

path_listxattr! {
    listxattr(true);
    llistxattr(false);
}

/// Setting or removing an attribute of a file of the store: `EOPNOTSUPP`,
/// as a file system without extended attributes answers (callers such as
/// the ACL library's then fall back to `fchmod`), or `ENOENT` for a missing
/// file.
fn xattr_refused(name: &str, args: Result<(), i32>) -> c_int {
    int_ret(args.and_then(|()| {
        with_state(|s| {
            len_or_enoent(s, name, "setxattr")?;
            Err(libc::EOPNOTSUPP)
        })
    }))
}

/// The kernel's checks of an attribute call's arguments, made before it
/// looks at the file: the flags (`EINVAL`), the name (`EFAULT` for none,
/// `ERANGE` for an empty one or one past 255 bytes), the value's size past
/// 64 KiB (`E2BIG`). `value` is `None` for a removal.
fn xattr_args(attr: *const c_char, value: Option<(size_t, c_int)>) -> Result<(), i32> {
    if let Some((_, flags)) = value
        && flags & !(libc::XATTR_CREATE | libc::XATTR_REPLACE) != 0
    {
        return Err(libc::EINVAL);
    }
    if attr.is_null() {
        return Err(libc::EFAULT);
    }
    // SAFETY: a non-null attribute name is the caller's C string.
    let n = unsafe { std::ffi::CStr::from_ptr(attr) }.to_bytes().len();
    if n == 0 || n > 255 {
        return Err(libc::ERANGE);
    }
    match value {
        Some((size, _)) if size > 65536 => Err(libc::E2BIG),
        _ => Ok(()),
    }
}

macro_rules! path_setxattr {
    ($($name:ident($follow:expr);)*) => {$(
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(
            path: *const c_char,
            attr: *const c_char,
            value: *const c_void,
            size: size_t,
            flags: c_int,
        ) -> c_int {
            match classify_as(libc::AT_FDCWD, path, $follow) {
                Place::Bad(e) => int_ret(Err(e)),
                Place::Inside(name) => xattr_refused(&name, xattr_args(attr, Some((size, flags)))),
                // SAFETY: passed through with the caller's arguments.
                _ => unsafe { real::$name()(path, attr, value, size, flags) },
            }
        }
    )*};
}

path_setxattr! {
    setxattr(true);
    lsetxattr(false);
}

macro_rules! path_removexattr {
    ($($name:ident($follow:expr);)*) => {$(
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(path: *const c_char, attr: *const c_char) -> c_int {
            match classify_as(libc::AT_FDCWD, path, $follow) {
                Place::Bad(e) => int_ret(Err(e)),
                Place::Inside(name) => xattr_refused(&name, xattr_args(attr, None)),
                // SAFETY: passed through with the caller's arguments.
                _ => unsafe { real::$name()(path, attr) },
            }
        }
    )*};
}

path_removexattr! {
    removexattr(true);
    lremovexattr(false);
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn fsetxattr(
    fd: c_int,
    attr: *const c_char,
    value: *const c_void,
    size: size_t,
    flags: c_int,
) -> c_int {
    match state::desc(fd) {
        // SAFETY: passed through with the caller's arguments.
        None => unsafe { real::fsetxattr()(fd, attr, value, size, flags) },
        Some(d) if d.path_only() => int_ret(Err(libc::EBADF)),
        Some(_) => int_ret(xattr_args(attr, Some((size, flags))).and(Err(libc::EOPNOTSUPP))),
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn fremovexattr(fd: c_int, attr: *const c_char) -> c_int {
    match state::desc(fd) {
        // SAFETY: passed through with the caller's arguments.
        None => unsafe { real::fremovexattr()(fd, attr) },
        Some(d) if d.path_only() => int_ret(Err(libc::EBADF)),
        Some(_) => int_ret(xattr_args(attr, None).and(Err(libc::EOPNOTSUPP))),
    }
}

// ---- file system figures: a file of the store's are its directory's ------

/// The longest name a file of the store may have: the store's own limit,
/// below the 255 bytes of the file systems under it. A file system's
/// figures asked of the store or of one of its files say this.
const STORE_NAME_MAX: u64 = 200;

/// The real path to ask for the figures of `path`'s file system, and
/// whether it is the store's: the store's directory for a file of the store
/// that exists (`Err(ENOENT)` for one that does not), `path` itself for the
/// store's directory and outside the store.
fn figures_path(path: *const c_char) -> Result<(*const c_char, bool), i32> {
    match classify_as(libc::AT_FDCWD, path, true) {
        Place::Bad(e) => Err(e),
        Place::Inside(name) => with_state(|s| {
            len_or_enoent(s, &name, "statvfs")?;
            Ok((state::config().ok_or(libc::EINVAL)?.dir_c.as_ptr(), true))
        }),
        Place::Root => Ok((path, true)),
        Place::Outside => Ok((path, false)),
    }
}

/// Where the figures of descriptor `fd`'s file system come from: the
/// store's directory for a descriptor of a file of the store or of that
/// directory, `None` for any other (asked of the kernel as it is).
fn figures_desc(fd: c_int) -> Option<Result<*const c_char, i32>> {
    if state::desc(fd).is_some() || (fd >= 0 && matches!(classify(fd, c".".as_ptr()), Place::Root))
    {
        return Some(state::config().map(|c| c.dir_c.as_ptr()).ok_or(libc::EBADF));
    }
    state::parents_placeholder(fd).then_some(Err(libc::EBADF))
}

/// A file system's figures as the store's: its names' limit.
trait StoreFigures {
    fn store_names(&mut self);
}

impl StoreFigures for libc::statvfs {
    fn store_names(&mut self) {
        self.f_namemax = self.f_namemax.min(STORE_NAME_MAX as _);
    }
}

impl StoreFigures for libc::statvfs64 {
    fn store_names(&mut self) {
        self.f_namemax = self.f_namemax.min(STORE_NAME_MAX as _);
    }
}

impl StoreFigures for libc::statfs {
    fn store_names(&mut self) {
        self.f_namelen = self.f_namelen.min(STORE_NAME_MAX as _);
    }
}

impl StoreFigures for libc::statfs64 {
    fn store_names(&mut self) {
        self.f_namelen = self.f_namelen.min(STORE_NAME_MAX as _);
    }
}

/// `pathconf`'s answer `r` for `what`, of the store's when `store`.
fn store_conf(r: libc::c_long, what: c_int, store: bool) -> libc::c_long {
    if store && what == libc::_PC_NAME_MAX && r > STORE_NAME_MAX as libc::c_long {
        STORE_NAME_MAX as libc::c_long
    } else {
        r
    }
}

macro_rules! figures {
    ($($name:ident, $fname:ident($buf:ty);)*) => {$(
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(path: *const c_char, buf: *mut $buf) -> c_int {
            match figures_path(path) {
                Err(e) => int_ret(Err(e)),
                Ok((p, store)) => {
                    // SAFETY: the caller's buffer, and a path that lives as
                    // long as the store's settings.
                    let r = unsafe { real::$name()(p, buf) };
                    if r == 0 && store && !buf.is_null() {
                        // SAFETY: filled by the call that passed.
                        unsafe { (*buf).store_names() };
                    }
                    r
                }
            }
        }

        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $fname(fd: c_int, buf: *mut $buf) -> c_int {
            match figures_desc(fd) {
                // SAFETY: passed through with the caller's arguments.
                None => unsafe { real::$fname()(fd, buf) },
                Some(Err(e)) => int_ret(Err(e)),
                Some(Ok(p)) => {
                    // SAFETY: as above.
                    let r = unsafe { real::$name()(p, buf) };
                    if r == 0 && !buf.is_null() {
                        // SAFETY: filled by the call that passed.
                        unsafe { (*buf).store_names() };
                    }
                    r
                }
            }
        }
    )*};
}

figures! {
    statvfs, fstatvfs(libc::statvfs);
    statvfs64, fstatvfs64(libc::statvfs64);
    statfs, fstatfs(libc::statfs);
    statfs64, fstatfs64(libc::statfs64);
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn pathconf(path: *const c_char, what: c_int) -> libc::c_long {
    match figures_path(path) {
        Err(e) => {
            set_errno(e);
            -1
        }
        // SAFETY: a path that lives as long as the store's settings.
        Ok((p, store)) => store_conf(unsafe { real::pathconf()(p, what) }, what, store),
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn fpathconf(fd: c_int, what: c_int) -> libc::c_long {
    match figures_desc(fd) {
        // SAFETY: passed through with the caller's arguments.
        None => unsafe { real::fpathconf()(fd, what) },
        Some(Err(e)) => {
            set_errno(e);
            -1
        }
        // SAFETY: as above.
        Some(Ok(p)) => store_conf(unsafe { real::pathconf()(p, what) }, what, true),
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn fgetxattr(
    fd: c_int,
    attr: *const c_char,
    value: *mut c_void,
    size: size_t,
) -> ssize_t {
    match state::desc(fd) {
        // SAFETY: passed through with the caller's arguments.
        None => unsafe { real::fgetxattr()(fd, attr, value, size) },
        Some(_) => size_ret(Err(libc::ENODATA)),
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn flistxattr(fd: c_int, list: *mut c_char, size: size_t) -> ssize_t {
    match state::desc(fd) {
        // SAFETY: passed through with the caller's arguments.
        None => unsafe { real::flistxattr()(fd, list, size) },
        Some(_) => 0,
    }
}

// ---- realpath: a file of the store is at its lexical path ----------------

/// `realpath` of file `name` of the store: `SETCACHE_DIR/name` when it exists.
fn realpath_name(name: &str, resolved: *mut c_char) -> *mut c_char {
    let r = with_state(|s| {
        len_or_enoent(s, name, "realpath")?;
        let cfg = state::config().ok_or(libc::EINVAL)?;
        // Resolved, as the C library's is (and as `readlink` of a store
        // descriptor's link reads).
        let mut full = cfg.canonical.clone().unwrap_or_else(|| cfg.dir.clone());
        full.push(b'/');
        full.extend_from_slice(name.as_bytes());
        if full.len() >= libc::PATH_MAX as usize {
            return Err(libc::ENAMETOOLONG);
        }
        Ok(full)
    });
    let full = match r {
        Ok(f) => f,
        Err(e) => {
            set_errno(e);
            return std::ptr::null_mut();
        }
    };
    let out = if resolved.is_null() {
        // SAFETY: a fresh allocation the caller frees, as realpath's is.
        let p = unsafe { libc::malloc(full.len() + 1) }.cast::<c_char>();
        if p.is_null() {
            set_errno(libc::ENOMEM);
            return p;
        }
        p
    } else {
        resolved
    };
    // SAFETY: `out` holds PATH_MAX bytes (the caller's) or full.len() + 1 (ours).
    unsafe {
        std::ptr::copy_nonoverlapping(full.as_ptr().cast::<c_char>(), out, full.len());
        *out.add(full.len()) = 0;
    }
    out
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn realpath(
    path: *const c_char,
    resolved: *mut c_char,
) -> *mut c_char {
    match classify_as(libc::AT_FDCWD, path, true) {
        Place::Bad(e) => {
            set_errno(e);
            std::ptr::null_mut()
        }
        Place::Inside(name) => realpath_name(&name, resolved),
        // SAFETY: passed through with the caller's arguments.
        _ => unsafe { real::realpath()(path, resolved) },
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn __realpath_chk(
    path: *const c_char,
    resolved: *mut c_char,
    len: size_t,
) -> *mut c_char {
    if !resolved.is_null() && len < libc::PATH_MAX as usize {
        crate::fatal("buffer overflow detected in realpath");
    }
    // SAFETY: the caller's arguments, checked as the fortified function does.
    unsafe { realpath(path, resolved) }
}

/// `realpath(path, NULL)`, which the C library's calls inside itself, past
/// this library's `realpath`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn canonicalize_file_name(path: *const c_char) -> *mut c_char {
    // SAFETY: the caller's path; the result is allocated for the caller.
    unsafe { realpath(path, std::ptr::null_mut()) }
}
