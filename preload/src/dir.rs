//! Listing `SETCACHE_DIR`: `opendir` of it returns a stream of the store's
//! file names (with `.` and `..`); `readdir`, `readdir64`, their `_r` forms,
//! `rewinddir`, `telldir`, `seekdir`, `dirfd` and `closedir` know such streams
//! from the C library's.

#![allow(clippy::missing_safety_doc)]
#![allow(unreachable_pub)]

use std::ffi::{c_char, c_int};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::path::{Place, classify};
use crate::{real, set_errno, state};

/// A listing of the store.
struct Listing {
    names: Vec<Vec<u8>>,
    next: usize,
    /// The entry `readdir` returned last (valid until the next call).
    ent: libc::dirent64,
    /// A real descriptor of the directory, for `dirfd` (and `fsync` of it).
    fd: c_int,
}

/// Streams made here, by address.
static OURS: Mutex<Vec<usize>> = Mutex::new(Vec::new());
static COUNT: AtomicUsize = AtomicUsize::new(0);

fn ours(dir: *mut libc::DIR) -> Option<*mut Listing> {
    if COUNT.load(Ordering::Relaxed) == 0 {
        return None;
    }
    let list = OURS.lock().unwrap_or_else(|p| p.into_inner());
    list.contains(&(dir as usize)).then_some(dir.cast())
}

/// A listing of the store, on a descriptor of its directory: `fd` (the
/// caller's, which the listing then owns, as `fdopendir` takes it), or one
/// opened here.
fn open_listing(fd: Option<c_int>) -> Result<*mut libc::DIR, i32> {
    let s = state::state()?;
    let cfg = state::config().ok_or(libc::EINVAL)?;
    let names =
        s.cs.store()
            .list()
            .map_err(|e| crate::fail("opendir", &e))?;
    let mut all: Vec<Vec<u8>> = vec![b".".to_vec(), b"..".to_vec()];
    all.extend(names.into_iter().map(String::into_bytes));
    let fd = match fd {
        Some(fd) => fd,
        // SAFETY: opens the store's directory by its C string.
        None => unsafe {
            real::openat64()(
                libc::AT_FDCWD,
                cfg.dir_c.as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        },
    };
    if fd < 0 {
        // SAFETY: reads this thread's errno.
        return Err(unsafe { *libc::__errno_location() });
    }
    let l = Box::new(Listing {
        names: all,
        next: 0,
        // SAFETY: a zeroed dirent64 is valid.
        ent: unsafe { std::mem::zeroed() },
        fd,
    });
    let p = Box::into_raw(l);
    OURS.lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(p as usize);
    COUNT.fetch_add(1, Ordering::Relaxed);
    Ok(p.cast())
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn opendir(path: *const c_char) -> *mut libc::DIR {
    match classify(libc::AT_FDCWD, path) {
        Place::Bad(e) => {
            set_errno(e);
            std::ptr::null_mut()
        }
        Place::Root => match open_listing(None) {
            Ok(d) => d,
            Err(e) => {
                set_errno(e);
                std::ptr::null_mut()
            }
        },
        Place::Inside(_) => {
            set_errno(libc::ENOTDIR);
            std::ptr::null_mut()
        }
        // SAFETY: passed through with the caller's arguments.
        Place::Outside => unsafe { real::opendir()(path) },
    }
}

/// `fdopendir` of a descriptor of the store's directory (as `find`, `cp -r`
/// and `fts` open it: `openat` of the directory, then this) lists the store;
/// of a store file's descriptor, `ENOTDIR`; any other goes to the C library.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fdopendir(fd: c_int) -> *mut libc::DIR {
    if state::desc(fd).is_some() {
        set_errno(libc::ENOTDIR);
        return std::ptr::null_mut();
    }
    if let Some(cfg) = state::config()
        && !state::in_setup()
    {
        // SAFETY: a zeroed stat64 is valid, and fstat fills it.
        let mut st: libc::stat64 = unsafe { std::mem::zeroed() };
        // SAFETY: the caller's descriptor and a buffer of ours.
        let ok = unsafe { real::fstat64()(fd, &mut st) } == 0;
        // SAFETY: F_GETFL takes no argument.
        let path_only = unsafe { real::fcntl64()(fd, libc::F_GETFL) } & libc::O_PATH != 0;
        if ok
            && !path_only
            && st.st_mode & libc::S_IFMT == libc::S_IFDIR
            && (st.st_dev, st.st_ino) == cfg.dev_ino
        {
            return match open_listing(Some(fd)) {
                Ok(d) => d,
                Err(e) => {
                    set_errno(e);
                    std::ptr::null_mut()
                }
            };
        }
    }
    // SAFETY: passed through with the caller's arguments.
    unsafe { real::fdopendir()(fd) }
}

fn next(l: &mut Listing) -> *mut libc::dirent64 {
    let Some(name) = l.names.get(l.next) else {
        return std::ptr::null_mut();
    };
    l.next += 1;
    let e = &mut l.ent;
    let n = name.len().min(e.d_name.len() - 1);
    for (d, s) in e.d_name.iter_mut().zip(&name[..n]) {
        *d = *s as c_char;
    }
    e.d_name[n] = 0;
    e.d_ino = l.next as u64;
    e.d_off = l.next as i64;
    e.d_reclen = std::mem::size_of::<libc::dirent64>() as u16;
    e.d_type = if name == b"." || name == b".." {
        libc::DT_DIR
    } else {
        libc::DT_REG
    };
    e
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn readdir64(dir: *mut libc::DIR) -> *mut libc::dirent64 {
    match ours(dir) {
        // SAFETY: a live listing made by open_listing.
        Some(l) => next(unsafe { &mut *l }),
        // SAFETY: passed through with the caller's arguments.
        None => unsafe { real::readdir64()(dir) },
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn readdir(dir: *mut libc::DIR) -> *mut libc::dirent {
    match ours(dir) {
        // SAFETY: a live listing; dirent and dirent64 are one layout on 64-bit Linux.
        Some(l) => next(unsafe { &mut *l }).cast(),
        // SAFETY: passed through with the caller's arguments.
        None => unsafe { real::readdir()(dir) },
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn rewinddir(dir: *mut libc::DIR) {
    match ours(dir) {
        // SAFETY: a live listing made by open_listing.
        Some(l) => unsafe { (*l).next = 0 },
        // SAFETY: passed through with the caller's arguments.
        None => unsafe { real::rewinddir()(dir) },
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn dirfd(dir: *mut libc::DIR) -> c_int {
    match ours(dir) {
        // SAFETY: a live listing made by open_listing.
        Some(l) => unsafe { (*l).fd },
        // SAFETY: passed through with the caller's arguments.
        None => unsafe { real::dirfd()(dir) },
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn closedir(dir: *mut libc::DIR) -> c_int {
    if let Some(l) = ours(dir) {
        OURS.lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|&p| p != dir as usize);
        COUNT.fetch_sub(1, Ordering::Relaxed);
        // SAFETY: made by Box::into_raw in open_listing, and no longer listed.
        let l = unsafe { Box::from_raw(l) };
        // SAFETY: the listing's own descriptor.
        unsafe { real::close()(l.fd) };
        return 0;
    }
    // SAFETY: passed through with the caller's arguments.
    unsafe { real::closedir()(dir) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn telldir(dir: *mut libc::DIR) -> libc::c_long {
    match ours(dir) {
        // SAFETY: a live listing made by open_listing.
        Some(l) => unsafe { (*l).next as libc::c_long },
        // SAFETY: passed through with the caller's arguments.
        None => unsafe { real::telldir()(dir) },
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn seekdir(dir: *mut libc::DIR, pos: libc::c_long) {
    match ours(dir) {
        // SAFETY: a live listing made by open_listing.
        Some(l) => unsafe { (*l).next = usize::try_from(pos).unwrap_or(usize::MAX) },
        // SAFETY: passed through with the caller's arguments.
        None => unsafe { real::seekdir()(dir, pos) },
    }
}

/// `readdir_r` on a listing: the next entry copied to `entry`.
unsafe fn next_into(
    l: *mut Listing,
    entry: *mut libc::dirent64,
    result: *mut *mut libc::dirent64,
) -> c_int {
    // SAFETY: a live listing made by open_listing.
    let e = next(unsafe { &mut *l });
    // SAFETY: the caller passes an entry to fill and a place for the result.
    unsafe {
        if e.is_null() {
            *result = std::ptr::null_mut();
        } else {
            entry.write(e.read());
            *result = entry;
        }
    }
    0
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn readdir64_r(
    dir: *mut libc::DIR,
    entry: *mut libc::dirent64,
    result: *mut *mut libc::dirent64,
) -> c_int {
    match ours(dir) {
        // SAFETY: the caller's arguments, on a listing of ours.
        Some(l) => unsafe { next_into(l, entry, result) },
        // SAFETY: passed through with the caller's arguments.
        None => unsafe { real::readdir64_r()(dir, entry, result) },
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn readdir_r(
    dir: *mut libc::DIR,
    entry: *mut libc::dirent,
    result: *mut *mut libc::dirent,
) -> c_int {
    match ours(dir) {
        // SAFETY: the caller's arguments; dirent and dirent64 are one layout on 64-bit Linux.
        Some(l) => unsafe { next_into(l, entry.cast(), result.cast()) },
        // SAFETY: passed through with the caller's arguments.
        None => unsafe { real::readdir_r()(dir, entry, result) },
    }
}
