//! Listing `SETCACHE_DIR`: `opendir` of it returns a stream of the store's
//! file names (with `.` and `..`); `readdir`, `readdir64`, their `_r` forms,
//! `rewinddir`, `telldir`, `seekdir`, `dirfd` and `closedir` know such streams
//! from the C library's; `scandir` and `scandir64` list it too, `glob` and
//! `glob64` list directories and look at paths through these, and `nftw`,
//! `nftw64`, `ftw` and `ftw64` walk it when they start there, and show its
//! files when they pass through it.

#![allow(clippy::missing_safety_doc)]
#![allow(unreachable_pub)]

use std::ffi::{c_char, c_int, c_void};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::path::{Place, classify, classify_as};
use crate::{real, set_errno, state};

/// [`Listing::magic`] of a live listing.
const MAGIC: u64 = 0x5345_5443_4143_4845;

/// A listing of the store.
#[repr(C)]
struct Listing {
    /// [`MAGIC`] while the listing lives: what tells it from the C library's
    /// streams in a child made by `fork` while another thread held [`OURS`]
    /// (a stream of the C library is longer than this word).
    magic: u64,
    names: Vec<Vec<u8>>,
    next: usize,
    /// The entry `readdir` returned last (valid until the next call).
    ent: libc::dirent64,
    /// A real descriptor of the directory, for `dirfd` (and `fsync` of it).
    fd: c_int,
    /// The inode numbers of `.` and `..` (a file's is its `stat`'s).
    dots: [u64; 2],
}

/// Streams made here, by address.
static OURS: Mutex<Vec<usize>> = Mutex::new(Vec::new());
static COUNT: AtomicUsize = AtomicUsize::new(0);

fn ours(dir: *mut libc::DIR) -> Option<*mut Listing> {
    if COUNT.load(Ordering::Relaxed) == 0 {
        return None;
    }
    let Some(list) = state::lock_unless_held_at_fork(&OURS) else {
        // SAFETY: `dir` is a live stream, ours or the C library's, at least a word long.
        let magic = unsafe { *(dir as *const u64) };
        return (magic == MAGIC).then_some(dir.cast());
    };
    list.contains(&(dir as usize)).then_some(dir.cast())
}

/// The store's names as the directory lists them now, `.` and `..` first.
fn names_now(call: &str) -> Result<Vec<Vec<u8>>, i32> {
    let s = state::state()?;
    let names = s.cs.store().list().map_err(|e| crate::fail(call, &e))?;
    let mut all: Vec<Vec<u8>> = vec![b".".to_vec(), b"..".to_vec()];
    all.extend(names.into_iter().map(String::into_bytes));
    Ok(all)
}

/// A listing of the store, on a descriptor of its directory: `fd` (the
/// caller's, which the listing then owns, as `fdopendir` takes it), or one
/// opened here.
fn open_listing(fd: Option<c_int>) -> Result<*mut libc::DIR, i32> {
    let cfg = state::config().ok_or(libc::EINVAL)?;
    let all = names_now("opendir")?;
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
    let parent = {
        // SAFETY: a zeroed stat64 is valid, and fstatat fills it.
        let mut st: libc::stat64 = unsafe { std::mem::zeroed() };
        // SAFETY: the directory's descriptor, a C string and a buffer of ours.
        let ok = unsafe { real::fstatat64()(fd, c"..".as_ptr(), &mut st, 0) } == 0;
        if ok { st.st_ino } else { 0 }
    };
    let l = Box::new(Listing {
        dots: [cfg.dev_ino.1, parent],
        magic: MAGIC,
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
pub unsafe extern "C-unwind" fn opendir(path: *const c_char) -> *mut libc::DIR {
    // A link to the store's directory is that directory (the kernel's
    // `opendir` follows links).
    match classify_as(libc::AT_FDCWD, path, true) {
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
        Place::Inside(name) => {
            set_errno(crate::path::not_a_directory(&name));
            std::ptr::null_mut()
        }
        // SAFETY: passed through with the caller's arguments.
        Place::Outside => unsafe { real::opendir()(path) },
    }
}

/// `fdopendir` of a descriptor of the store's directory (as `find`, `cp -r`
/// and gnulib's `fts` open it: `openat` of the directory, then this) lists the store;
/// of a store file's descriptor, `ENOTDIR`; any other goes to the C library.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn fdopendir(fd: c_int) -> *mut libc::DIR {
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
    e.d_ino = match name.as_slice() {
        b"." => l.dots[0],
        b".." => l.dots[1],
        n => match (state::state(), std::str::from_utf8(n)) {
            (Ok(s), Ok(name)) => crate::calls::ino_of(&s, name),
            _ => crate::calls::name_ino(n),
        },
    };
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
pub unsafe extern "C-unwind" fn readdir64(dir: *mut libc::DIR) -> *mut libc::dirent64 {
    match ours(dir) {
        // SAFETY: a live listing made by open_listing.
        Some(l) => next(unsafe { &mut *l }),
        // SAFETY: passed through with the caller's arguments.
        None => unsafe { real::readdir64()(dir) },
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn readdir(dir: *mut libc::DIR) -> *mut libc::dirent {
    match ours(dir) {
        // SAFETY: a live listing; dirent and dirent64 are one layout on 64-bit Linux.
        Some(l) => next(unsafe { &mut *l }).cast(),
        // SAFETY: passed through with the caller's arguments.
        None => unsafe { real::readdir()(dir) },
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn rewinddir(dir: *mut libc::DIR) {
    match ours(dir) {
        Some(l) => {
            // SAFETY: a live listing made by open_listing.
            let l = unsafe { &mut *l };
            // The directory as it is now, as POSIX asks of `rewinddir`
            // (which reports nothing: a listing that fails keeps the last).
            // SAFETY: reads and restores this thread's errno.
            let saved = unsafe { *libc::__errno_location() };
            if let Ok(all) = names_now("rewinddir") {
                l.names = all;
            }
            set_errno(saved);
            l.next = 0;
        }
        // SAFETY: passed through with the caller's arguments.
        None => unsafe { real::rewinddir()(dir) },
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn dirfd(dir: *mut libc::DIR) -> c_int {
    match ours(dir) {
        // SAFETY: a live listing made by open_listing.
        Some(l) => unsafe { (*l).fd },
        // SAFETY: passed through with the caller's arguments.
        None => unsafe { real::dirfd()(dir) },
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn closedir(dir: *mut libc::DIR) -> c_int {
    if let Some(l) = ours(dir) {
        if let Some(mut list) = state::lock_unless_held_at_fork(&OURS) {
            list.retain(|&p| p != dir as usize);
        }
        COUNT.fetch_sub(1, Ordering::Relaxed);
        // SAFETY: made by Box::into_raw in open_listing, and no longer listed.
        let mut l = unsafe { Box::from_raw(l) };
        l.magic = 0;
        // SAFETY: the listing's own descriptor.
        unsafe { real::close()(l.fd) };
        return 0;
    }
    // SAFETY: passed through with the caller's arguments.
    unsafe { real::closedir()(dir) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn telldir(dir: *mut libc::DIR) -> libc::c_long {
    match ours(dir) {
        // SAFETY: a live listing made by open_listing.
        Some(l) => unsafe { (*l).next as libc::c_long },
        // SAFETY: passed through with the caller's arguments.
        None => unsafe { real::telldir()(dir) },
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn seekdir(dir: *mut libc::DIR, pos: libc::c_long) {
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
pub unsafe extern "C-unwind" fn readdir64_r(
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
pub unsafe extern "C-unwind" fn readdir_r(
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

/// `scandir` of the store's directory: its listing, through the caller's
/// filter and order, each entry and the array from `malloc` as the C
/// library's are (the caller frees them). The C library's own `scandir`
/// opens the directory without the `opendir` above, so it would list the
/// directory on the disk, which holds none of the store's files.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn scandir64(
    path: *const c_char,
    out: *mut *mut *mut libc::dirent64,
    filter: Option<real::ScanFilter64>,
    order: Option<real::ScanOrder64>,
) -> c_int {
    match classify_as(libc::AT_FDCWD, path, true) {
        Place::Root => {}
        Place::Bad(e) => {
            set_errno(e);
            return -1;
        }
        Place::Inside(name) => {
            set_errno(crate::path::not_a_directory(&name));
            return -1;
        }
        // SAFETY: passed through with the caller's arguments.
        Place::Outside => return unsafe { real::scandir64()(path, out, filter, order) },
    }
    let dir = match open_listing(None) {
        Ok(d) => d,
        Err(e) => {
            set_errno(e);
            return -1;
        }
    };
    let mut got: Vec<*mut libc::dirent64> = Vec::new();
    let size = std::mem::size_of::<libc::dirent64>();
    let fail = |got: &[*mut libc::dirent64], e: i32| {
        for &p in got {
            // SAFETY: each came from malloc below and was not handed out.
            unsafe { libc::free(p.cast()) };
        }
        set_errno(e);
        -1
    };
    loop {
        // SAFETY: a live listing made by open_listing.
        let e = next(unsafe { &mut *ours(dir).expect("a listing of ours") });
        if e.is_null() {
            break;
        }
        if let Some(f) = filter {
            // SAFETY: the caller's filter, given the listing's entry (valid until the next call).
            let keep = unsafe { f(e) };
            if keep == 0 {
                continue;
            }
        }
        // SAFETY: plain allocation.
        let p = unsafe { libc::malloc(size) }.cast::<libc::dirent64>();
        if p.is_null() {
            // SAFETY: the listing made above.
            unsafe { closedir(dir) };
            return fail(&got, libc::ENOMEM);
        }
        // SAFETY: both hold one dirent64; the copy is the caller's from now on.
        unsafe { std::ptr::copy_nonoverlapping(e, p, 1) };
        got.push(p);
    }
    // SAFETY: the listing made above.
    unsafe { closedir(dir) };
    // SAFETY: plain allocation (one slot at least, as a count of 0 may be freed).
    let arr = unsafe { libc::malloc(got.len().max(1) * std::mem::size_of::<usize>()) }
        .cast::<*mut libc::dirent64>();
    if arr.is_null() {
        return fail(&got, libc::ENOMEM);
    }
    // SAFETY: `arr` holds `got.len()` pointers.
    unsafe { std::ptr::copy_nonoverlapping(got.as_ptr(), arr, got.len()) };
    if let Some(cmp) = order {
        // The C library's `qsort` passes the order pointers to the array's slots.
        // SAFETY: the caller's order over `got.len()` pointers to entries, as scandir's.
        unsafe {
            libc::qsort(
                arr.cast(),
                got.len(),
                std::mem::size_of::<usize>(),
                Some(std::mem::transmute::<
                    real::ScanOrder64,
                    unsafe extern "C" fn(*const libc::c_void, *const libc::c_void) -> c_int,
                >(cmp)),
            )
        };
    }
    // SAFETY: the caller's output pointer.
    unsafe { *out = arr };
    got.len() as c_int
}

/// `scandir`: as [`scandir64`] (one layout on 64-bit Linux).
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn scandir(
    path: *const c_char,
    out: *mut *mut *mut libc::dirent,
    filter: Option<real::ScanFilter>,
    order: Option<real::ScanOrder>,
) -> c_int {
    if matches!(classify_as(libc::AT_FDCWD, path, true), Place::Outside) {
        // SAFETY: passed through with the caller's arguments.
        return unsafe { real::scandir()(path, out, filter, order) };
    }
    // One layout on 64-bit Linux: dirent and dirent64, and the functions taking them.
    // SAFETY: the caller's arguments, as scandir64 takes them.
    unsafe {
        scandir64(
            path,
            out.cast(),
            std::mem::transmute::<Option<real::ScanFilter>, Option<real::ScanFilter64>>(filter),
            std::mem::transmute::<Option<real::ScanOrder>, Option<real::ScanOrder64>>(order),
        )
    }
}

// ---- glob: the C library's, listing through this library ----------------

/// `glob.h`'s flag for a caller's own directory functions.
const GLOB_ALTDIRFUNC: c_int = 1 << 9;

unsafe extern "C" fn glob_opendir(path: *const c_char) -> *mut c_void {
    // SAFETY: `glob` passes a C string.
    unsafe { opendir(path) }.cast()
}

unsafe extern "C" fn glob_readdir(dir: *mut c_void) -> *mut libc::dirent {
    // SAFETY: `dir` is a stream `glob_opendir` opened.
    unsafe { readdir(dir.cast()) }
}

unsafe extern "C" fn glob_closedir(dir: *mut c_void) {
    // SAFETY: as above.
    unsafe { closedir(dir.cast()) };
}

unsafe extern "C" fn glob_stat(path: *const c_char, out: *mut libc::stat64) -> c_int {
    // SAFETY: `glob` passes a C string and a struct stat to fill.
    unsafe { crate::calls::stat64(path, out) }
}

unsafe extern "C" fn glob_lstat(path: *const c_char, out: *mut libc::stat64) -> c_int {
    // SAFETY: as above.
    unsafe { crate::calls::lstat64(path, out) }
}

/// The C library's `glob` lists directories with its own `opendir`, which
/// this library cannot stand in for: asked to use the caller's functions
/// (`GLOB_ALTDIRFUNC`), it lists and looks through this library's, so that
/// `SETCACHE_DIR` shows the store's files. A caller that passes its own
/// functions keeps them.
unsafe fn glob_with(
    real: unsafe extern "C-unwind" fn(
        *const c_char,
        c_int,
        Option<real::GlobError>,
        *mut real::GlobT,
    ) -> c_int,
    pattern: *const c_char,
    flags: c_int,
    errfunc: Option<real::GlobError>,
    pglob: *mut real::GlobT,
) -> c_int {
    if pglob.is_null() || flags & GLOB_ALTDIRFUNC != 0 || state::config().is_none() {
        // SAFETY: passed through with the caller's arguments.
        return unsafe { real(pattern, flags, errfunc, pglob) };
    }
    // SAFETY: `pglob` is the caller's glob_t, which `glob` fills.
    let g = unsafe { &mut *pglob };
    g.gl_opendir = Some(glob_opendir);
    g.gl_readdir = Some(glob_readdir);
    g.gl_closedir = Some(glob_closedir);
    g.gl_stat = Some(glob_stat);
    g.gl_lstat = Some(glob_lstat);
    // SAFETY: the caller's arguments, with the listing functions set above.
    let rc = unsafe { real(pattern, flags | GLOB_ALTDIRFUNC, errfunc, pglob) };
    // SAFETY: as above.
    unsafe { (*pglob).gl_flags &= !GLOB_ALTDIRFUNC };
    rc
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn glob(
    pattern: *const c_char,
    flags: c_int,
    errfunc: Option<real::GlobError>,
    pglob: *mut real::GlobT,
) -> c_int {
    // SAFETY: the caller's arguments.
    unsafe { glob_with(real::glob(), pattern, flags, errfunc, pglob) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn glob64(
    pattern: *const c_char,
    flags: c_int,
    errfunc: Option<real::GlobError>,
    pglob: *mut real::GlobT,
) -> c_int {
    // SAFETY: the caller's arguments.
    unsafe { glob_with(real::glob64(), pattern, flags, errfunc, pglob) }
}

// ---- nftw and ftw: walks that start at the store --------------------------

/// `ftw.h`'s `struct FTW`: where the name starts in the path, and the depth.
#[repr(C)]
pub struct Ftw {
    base: c_int,
    level: c_int,
}

pub(crate) type NftwFn =
    unsafe extern "C" fn(*const c_char, *const libc::stat64, c_int, *mut Ftw) -> c_int;
pub(crate) type FtwFn = unsafe extern "C" fn(*const c_char, *const libc::stat64, c_int) -> c_int;

const FTW_F: c_int = 0;
const FTW_D: c_int = 1;
const FTW_NS: c_int = 3;
const FTW_DP: c_int = 5;
const FTW_CHDIR: c_int = 4;
const FTW_DEPTH: c_int = 8;
const FTW_ACTIONRETVAL: c_int = 16;
const FTW_SKIP_SUBTREE: c_int = 2;
/// Every flag `nftw` takes: `FTW_PHYS`, `FTW_MOUNT`, `FTW_CHDIR`,
/// `FTW_DEPTH`, `FTW_ACTIONRETVAL`.
const FTW_FLAGS: c_int = 1 | 2 | FTW_CHDIR | FTW_DEPTH | FTW_ACTIONRETVAL;
const FTW_SKIP_SIBLINGS: c_int = 3;

/// What a walk calls for each entry: its path, stat, type and `struct FTW`.
type Visit<'a> = dyn FnMut(&[u8], &libc::stat64, c_int, Ftw) -> c_int + 'a;

/// The C library's `nftw` and `ftw` read directories with its own
/// `opendir`, which lists the store's directory on the disk (empty). A walk
/// that starts at the store's directory, or at a file of it, is walked here:
/// the directory, then each file of the listing (the store has no
/// subdirectories), with the C library's order of calls, path forms, levels
/// and flags. A walk that starts above it is the C library's, with the
/// callback wrapped (`Above`).
struct Walk<'a> {
    visit: &'a mut Visit<'a>,
    flags: c_int,
}

/// The result of a visit: go on, skip what is left of this directory, or
/// stop the walk with this value.
enum Next {
    On,
    SkipRest,
    Stop(c_int),
}

impl Walk<'_> {
    fn call(&mut self, path: &[u8], st: &libc::stat64, kind: c_int, ftw: Ftw) -> Next {
        let r = (self.visit)(path, st, kind, ftw);
        if self.flags & FTW_ACTIONRETVAL == 0 {
            return if r == 0 { Next::On } else { Next::Stop(r) };
        }
        // As the C library's walk: skipping a subtree skips a directory's
        // entries (a file has none); skipping siblings skips the rest of the
        // directory the entry is in, or, from the start directory, its
        // entries.
        match r {
            0 => Next::On,
            FTW_SKIP_SUBTREE if kind == FTW_D => Next::SkipRest,
            FTW_SKIP_SUBTREE => Next::On,
            FTW_SKIP_SIBLINGS => Next::SkipRest,
            // FTW_STOP, or a value of the caller's own: the walk ends with it.
            r => Next::Stop(r),
        }
    }
}

/// `path`'s stat by this library's `stat64`, or the errno.
fn stat_of(path: &[u8]) -> Result<libc::stat64, i32> {
    let c = std::ffi::CString::new(path).map_err(|_| libc::EINVAL)?;
    // SAFETY: an all-zero stat is a valid value to be filled.
    let mut st: libc::stat64 = unsafe { std::mem::zeroed() };
    // SAFETY: a C string and a struct stat to fill.
    if unsafe { crate::calls::stat64(c.as_ptr(), &mut st) } < 0 {
        return Err(std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO));
    }
    Ok(st)
}

/// Where the last component of `path` starts (trailing slashes aside).
fn base_of(path: &[u8]) -> c_int {
    let mut end = path.len();
    while end > 1 && path[end - 1] == b'/' {
        end -= 1;
    }
    path[..end]
        .iter()
        .rposition(|&b| b == b'/')
        .map_or(0, |i| i + 1) as c_int
}

/// Changes the working directory to `dir` (`FTW_CHDIR`).
fn chdir_to(dir: &[u8]) -> Result<(), i32> {
    let c = std::ffi::CString::new(dir).map_err(|_| libc::EINVAL)?;
    // SAFETY: a C string.
    if unsafe { libc::chdir(c.as_ptr()) } < 0 {
        return Err(std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO));
    }
    Ok(())
}

/// Walks `start` (the store's directory, or a file of it: `place`).
fn walk_store(start: &[u8], place: &Place, w: &mut Walk<'_>) -> Result<c_int, i32> {
    // The callbacks get the start as given, its trailing slashes aside (as
    // the C library's walk gives them); the walk itself reads through the
    // absolute path, which `FTW_CHDIR`'s changes of directory leave true.
    let mut shown = start.to_vec();
    while shown.len() > 1 && shown.last() == Some(&b'/') {
        shown.pop();
    }
    let here = std::env::current_dir()
        .map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?
        .into_os_string()
        .into_encoded_bytes();
    let real = if shown.first() == Some(&b'/') {
        shown.clone()
    } else {
        [&here[..], b"/", &shown[..]].concat()
    };
    let root = stat_of(&real)?;
    let base = base_of(&shown);
    let chdir = w.flags & FTW_CHDIR != 0;
    if chdir {
        // The start is visited from the directory that holds it.
        let up = &real[..base_of(&real) as usize];
        chdir_to(if up.is_empty() { b"/" } else { up })?;
    }
    let r = walk_from(&shown, &real, place, &root, base, w);
    if chdir {
        chdir_to(&here)?;
    }
    r
}

fn walk_from(
    start: &[u8],
    real: &[u8],
    place: &Place,
    root: &libc::stat64,
    base: c_int,
    w: &mut Walk<'_>,
) -> Result<c_int, i32> {
    if !matches!(place, Place::Root) {
        let ftw = Ftw { base, level: 0 };
        return Ok(match w.call(start, root, FTW_F, ftw) {
            Next::Stop(r) => r,
            _ => 0,
        });
    }
    let depth = w.flags & FTW_DEPTH != 0;
    if !depth {
        match w.call(start, root, FTW_D, Ftw { base, level: 0 }) {
            Next::Stop(r) => return Ok(r),
            Next::SkipRest => return Ok(0),
            Next::On => {}
        }
    }
    let names = store_names(real)?;
    if w.flags & FTW_CHDIR != 0 {
        chdir_to(real)?;
    }
    if let Some(r) = visit_files(start, real, &names, 1, w) {
        return Ok(r);
    }
    // The directory's own visit after its entries is made from inside it,
    // as the C library's.
    if depth && let Next::Stop(r) = w.call(start, root, FTW_DP, Ftw { base, level: 0 }) {
        return Ok(r);
    }
    Ok(0)
}

/// The names of the store's files, listed through `real`, its directory.
fn store_names(real: &[u8]) -> Result<Vec<Vec<u8>>, i32> {
    let c = std::ffi::CString::new(real).map_err(|_| libc::EINVAL)?;
    let mut names = Vec::new();
    // SAFETY: a C string; the listing is read to its end and closed.
    unsafe {
        let d = opendir(c.as_ptr());
        if d.is_null() {
            return Err(std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO));
        }
        loop {
            let e = readdir(d);
            if e.is_null() {
                break;
            }
            let name = std::ffi::CStr::from_ptr((*e).d_name.as_ptr()).to_bytes();
            if name != b"." && name != b".." {
                names.push(name.to_vec());
            }
        }
        closedir(d);
    }
    Ok(names)
}

/// Visits the store's files `names` as entries of its directory, shown as
/// `shown` and read through `real`, at `level`: `Some` with the value that
/// ends the walk, `None` to go on.
fn visit_files(
    shown: &[u8],
    real: &[u8],
    names: &[Vec<u8>],
    level: c_int,
    w: &mut Walk<'_>,
) -> Option<c_int> {
    let mut prefix = shown.to_vec();
    if prefix.last() != Some(&b'/') {
        prefix.push(b'/');
    }
    for name in names {
        let mut path = prefix.clone();
        path.extend_from_slice(name);
        let ftw = Ftw {
            base: prefix.len() as c_int,
            level,
        };
        let next = match stat_of(&[real, b"/", &name[..]].concat()) {
            Ok(st) => w.call(&path, &st, FTW_F, ftw),
            // Gone since the listing: as the C library, a file whose stat fails.
            // SAFETY: an all-zero stat is what the C library passes then too.
            Err(_) => w.call(&path, &unsafe { std::mem::zeroed() }, FTW_NS, ftw),
        };
        match next {
            Next::Stop(r) => return Some(r),
            Next::SkipRest => break,
            Next::On => {}
        }
    }
    None
}

// ---- walks that pass the store on their way ---------------------------------

/// A walk that starts above the store's directory is the C library's, with
/// its callback wrapped: the store's directory, recognised by its device and
/// inode, gets the store's files as its entries (after its own visit, or
/// before it with `FTW_DEPTH`), and whatever the C library finds in the
/// directory on the disk is not shown.
struct Above<'a> {
    walk: Walk<'a>,
    /// Device and inode of the store's directory.
    dev_ino: (u64, u64),
    /// The store's directory, absolute: its files are listed and looked at
    /// through it.
    real: Vec<u8>,
    /// The store's directory as the walk's paths name it, cleaned
    /// lexically (see `normalise`), when it is known: entries under it are
    /// the disk's, hidden.
    inside: Option<Vec<u8>>,
}

/// Walks that pass the store one thread may have under way at once (a
/// callback may start a walk of its own, and coroutines may interleave
/// walks on one thread).
const SLOTS: usize = 16;

thread_local! {
    /// This thread's walks that pass the store, each in a slot of its own
    /// whose number its callback carries (`NFTW_AT`, `FTW_AT`): a callback
    /// finds its own walk whatever other walks do on the thread. A walk left
    /// by `longjmp` keeps its slot, which nothing reads again.
    static ABOVE: [std::cell::Cell<*mut Above<'static>>; SLOTS] =
        const { [const { std::cell::Cell::new(std::ptr::null_mut()) }; SLOTS] };
}

/// The callbacks the C library's walks are given, one per slot.
macro_rules! slot_callbacks {
    ($($k:literal)*) => {
        const NFTW_AT: [NftwFn; SLOTS] = [$({
            unsafe extern "C" fn at(
                path: *const c_char,
                st: *const libc::stat64,
                kind: c_int,
                ftw: *mut Ftw,
            ) -> c_int {
                // SAFETY: the C library's arguments for this call.
                unsafe { above_nftw($k, path, st, kind, ftw) }
            }
            at
        }),*];
        const FTW_AT: [FtwFn; SLOTS] = [$({
            unsafe extern "C" fn at(path: *const c_char, st: *const libc::stat64, kind: c_int) -> c_int {
                above_visit($k, path, st, kind, Ftw { base: 0, level: 0 })
            }
            at
        }),*];
    };
}

slot_callbacks!(0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15);

impl Above<'_> {
    fn visit(&mut self, path: &[u8], st: &libc::stat64, kind: c_int, ftw: Ftw) -> c_int {
        let dir = matches!(kind, FTW_D | FTW_DP) && (st.st_dev, st.st_ino) == self.dev_ino;
        if !dir {
            if let Some(inside) = &self.inside {
                let p = crate::path::normalise(b"", path);
                if p.len() > inside.len() && crate::path::under(&p, inside) {
                    return 0;
                }
            }
            // The C library reads the callback's value as it would the caller's.
            return (self.walk.visit)(path, st, kind, ftw);
        }
        let level = ftw.level + 1;
        let ftw_again = Ftw {
            base: ftw.base,
            level: ftw.level,
        };
        if kind == FTW_D {
            let r = (self.walk.visit)(path, st, kind, ftw);
            if r != 0 {
                return r;
            }
            return self.files(path, level).unwrap_or(0);
        }
        if let Some(r) = self.files(path, level) {
            return r;
        }
        (self.walk.visit)(path, st, kind, ftw_again)
    }

    /// Visits the store's files under `shown`, from inside the directory
    /// with `FTW_CHDIR` (and back to where the walk was after): `Some` with
    /// the value that ends the walk.
    fn files(&mut self, shown: &[u8], level: c_int) -> Option<c_int> {
        // A directory the store cannot list is shown empty, as the disk's is.
        let names = store_names(&self.real).ok()?;
        let back = if self.walk.flags & FTW_CHDIR != 0 {
            // SAFETY: a C string naming the working directory.
            let fd = unsafe {
                libc::open(
                    c".".as_ptr(),
                    // Only to come back to: a directory the caller may
                    // search but not read is enough.
                    libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
                )
            };
            if fd < 0 || chdir_to(&self.real).is_err() {
                if fd >= 0 {
                    // SAFETY: our own descriptor.
                    unsafe { libc::close(fd) };
                }
                return Some(-1);
            }
            Some(fd)
        } else {
            None
        };
        let r = visit_files(shown, &self.real, &names, level, &mut self.walk);
        if let Some(fd) = back {
            // SAFETY: our own descriptor of the directory the walk was in, closed once.
            let ok = unsafe { libc::fchdir(fd) } == 0;
            // SAFETY: as above.
            unsafe { libc::close(fd) };
            if !ok {
                return Some(-1);
            }
        }
        r
    }
}

/// A callback of the walk in slot `k` of this thread.
fn above_visit(
    k: usize,
    path: *const c_char,
    st: *const libc::stat64,
    kind: c_int,
    ftw: Ftw,
) -> c_int {
    let top = ABOVE.with(|a| a[k].get());
    if top.is_null() || path.is_null() || st.is_null() {
        return 0;
    }
    // SAFETY: the C library's path, a C string, for this call.
    let p = unsafe { std::ffi::CStr::from_ptr(path) }.to_bytes();
    // SAFETY: slot `k` names the entry of the walk that calls this callback: it lives on the frame of that walk's entry, which waits in the C library's walk until this call returns.
    unsafe { (*top).visit(p, &*st, kind, ftw) }
}

/// `nftw`'s callback for slot `k`.
///
/// # Safety
/// The C library's arguments for one call: `ftw` null or its `struct FTW`.
unsafe fn above_nftw(
    k: usize,
    path: *const c_char,
    st: *const libc::stat64,
    kind: c_int,
    ftw: *mut Ftw,
) -> c_int {
    let f = if ftw.is_null() {
        Ftw { base: 0, level: 0 }
    } else {
        // SAFETY: the C library's struct FTW for this call.
        unsafe {
            Ftw {
                base: (*ftw).base,
                level: (*ftw).level,
            }
        }
    };
    above_visit(k, path, st, kind, f)
}

/// For a walk of `dir` that would pass the store's directory (which lies
/// under it): `Some`, with the directory as the walk will name it when that
/// is known.
fn passes_store(cfg: &state::Config, dir: *const c_char) -> Option<Option<Vec<u8>>> {
    if dir.is_null() {
        return None;
    }
    // SAFETY: the caller's C string.
    let start = unsafe { std::ffi::CStr::from_ptr(dir) }.to_bytes();
    if start.is_empty() {
        return None;
    }
    let here = std::env::current_dir()
        .ok()?
        .into_os_string()
        .into_encoded_bytes();
    let abs = crate::path::normalise(&here, start);
    let strictly = |d: &[u8], s: &[u8]| d.len() > s.len() && crate::path::under(d, s);
    // A `..` in the start follows the links before it (`q/..` is the parent
    // of `q`'s target), which a lexical cleaning does not: such a start is
    // resolved as the kernel resolves it, below.
    let dotdot = start.split(|&b| b == b'/').any(|c| c == b"..");
    let abs = if dotdot {
        match std::fs::canonicalize(
            <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(start),
        ) {
            Ok(p) => p.into_os_string().into_encoded_bytes(),
            Err(_) => return None,
        }
    } else {
        abs
    };
    if !dotdot && strictly(&cfg.dir, &abs) {
        let rel = &cfg.dir[if abs == b"/" { 0 } else { abs.len() }..];
        let inside = crate::path::normalise(b"", &[start, rel].concat());
        return Some(Some(inside));
    }
    // Through a symbolic link: the walk's names for it are not known
    // (and it may be the store's directory itself, by another name).
    let resolved =
        std::fs::canonicalize(<std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(&abs))
            .ok()?
            .into_os_string()
            .into_encoded_bytes();
    let store = cfg.canonical.as_deref().unwrap_or(&cfg.dir);
    crate::path::under(store, &resolved).then_some(None)
}

/// Runs the C library's walk `run` (given the slot whose callback it is to
/// call) with `visit` as the callback of a walk that passes the store;
/// `None` when `dir` does not lead to the store. With every slot taken the
/// walk fails (`ENOMEM`), with a message.
fn above_walk(
    dir: *const c_char,
    flags: c_int,
    visit: &mut Visit<'_>,
    run: impl FnOnce(usize) -> c_int,
) -> Option<c_int> {
    let cfg = state::config()?;
    let inside = passes_store(cfg, dir)?;
    let mut above = Above {
        walk: Walk { visit, flags },
        dev_ino: cfg.dev_ino,
        real: cfg.dir.clone(),
        inside,
    };
    let ptr: *mut Above<'_> = &mut above;
    // The entry lives on this frame until the walk below returns, and its
    // slot is emptied before it goes.
    let Some(k) = ABOVE.with(|a| {
        let k = a.iter().position(|c| c.get().is_null())?;
        a[k].set(ptr.cast());
        Some(k)
    }) else {
        crate::warn_once(
            "walks",
            &format!(
                "a walk through the store's directory refused: {SLOTS} such walks are already \
                 under way on this thread (or were left by longjmp)"
            ),
        );
        set_errno(libc::ENOMEM);
        return Some(-1);
    };
    let r = run(k);
    ABOVE.with(|a| a[k].set(std::ptr::null_mut()));
    Some(r)
}

/// The walk of `dir` when it starts at the store (its directory or a file of
/// it): `None` to leave it to the C library.
fn store_walk(dir: *const c_char, flags: c_int, visit: &mut Visit<'_>) -> Option<c_int> {
    let place = classify(libc::AT_FDCWD, dir);
    if !matches!(place, Place::Root | Place::Inside(_)) {
        return None;
    }
    // SAFETY: `classify` found a C string.
    let start = unsafe { std::ffi::CStr::from_ptr(dir) }.to_bytes().to_vec();
    let mut w = Walk { visit, flags };
    Some(match walk_store(&start, &place, &mut w) {
        Ok(r) => r,
        Err(e) => {
            set_errno(e);
            -1
        }
    })
}

/// Calls `f` as `nftw`'s callback.
fn nftw_visit(f: NftwFn) -> impl FnMut(&[u8], &libc::stat64, c_int, Ftw) -> c_int {
    move |path, st, kind, mut ftw| {
        let Ok(c) = std::ffi::CString::new(path) else {
            return 0;
        };
        // SAFETY: the caller's callback, with a C string, a stat and a struct FTW that live through the call.
        unsafe { f(c.as_ptr(), st, kind, &mut ftw) }
    }
}

/// Calls `f` as `ftw`'s callback (no `struct FTW`).
fn ftw_visit(f: FtwFn) -> impl FnMut(&[u8], &libc::stat64, c_int, Ftw) -> c_int {
    move |path, st, kind, _| {
        let Ok(c) = std::ffi::CString::new(path) else {
            return 0;
        };
        // SAFETY: the caller's callback, with a C string and a stat that live through the call.
        unsafe { f(c.as_ptr(), st, kind) }
    }
}

macro_rules! nftw_entry {
    ($($name:ident;)*) => {$(
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(
            dir: *const c_char,
            f: Option<NftwFn>,
            nopenfd: c_int,
            flags: c_int,
        ) -> c_int {
            // As the C library's: flags it does not know are refused first.
            if flags & !FTW_FLAGS != 0 {
                set_errno(libc::EINVAL);
                return -1;
            }
            if let Some(g) = f {
                if let Some(r) = store_walk(dir, flags, &mut nftw_visit(g)) {
                    return r;
                }
                // SAFETY: the caller's arguments, the callback wrapped.
                let run = |k: usize| unsafe { real::$name()(dir, Some(NFTW_AT[k]), nopenfd, flags) };
                if let Some(r) = above_walk(dir, flags, &mut nftw_visit(g), run) {
                    return r;
                }
            }
            // SAFETY: passed through with the caller's arguments.
            unsafe { real::$name()(dir, f, nopenfd, flags) }
        }
    )*};
}

nftw_entry! {
    nftw;
    nftw64;
}

macro_rules! ftw_entry {
    ($($name:ident;)*) => {$(
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(dir: *const c_char, f: Option<FtwFn>, nopenfd: c_int) -> c_int {
            if let Some(g) = f {
                if let Some(r) = store_walk(dir, 0, &mut ftw_visit(g)) {
                    return r;
                }
                // SAFETY: the caller's arguments, the callback wrapped.
                let run = |k: usize| unsafe { real::$name()(dir, Some(FTW_AT[k]), nopenfd) };
                if let Some(r) = above_walk(dir, 0, &mut ftw_visit(g), run) {
                    return r;
                }
            }
            // SAFETY: passed through with the caller's arguments.
            unsafe { real::$name()(dir, f, nopenfd) }
        }
    )*};
}

ftw_entry! {
    ftw;
    ftw64;
}
