//! The functions this library stands in for, as the next object in the
//! lookup order (the C library) defines them: resolved once with
//! `dlsym(RTLD_NEXT, ..)` and kept.

use std::ffi::{c_char, c_int, c_uint, c_ulong, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};

use libc::{off64_t, size_t, ssize_t};

/// The address of `name` (NUL-terminated) in the next object, cached in
/// `slot`. Exits the process when the C library lacks it: nothing can be
/// passed through then.
fn resolve(slot: &AtomicUsize, name: &'static [u8]) -> usize {
    let p = slot.load(Ordering::Relaxed);
    if p != 0 {
        return p;
    }
    // SAFETY: `name` is a NUL-terminated literal; RTLD_NEXT asks for the next definition.
    let p = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr().cast()) } as usize;
    if p == 0 {
        let n = String::from_utf8_lossy(&name[..name.len() - 1]).into_owned();
        crate::fatal(&format!("the C library does not define {n}"));
    }
    slot.store(p, Ordering::Relaxed);
    p
}

macro_rules! real {
    ($($name:ident: fn($($arg:ty),*) -> $ret:ty;)*) => {
        $(
            #[allow(dead_code, non_snake_case)]
            pub(crate) fn $name() -> unsafe extern "C-unwind" fn($($arg),*) -> $ret {
                static SLOT: AtomicUsize = AtomicUsize::new(0);
                let p = resolve(&SLOT, concat!(stringify!($name), "\0").as_bytes());
                // SAFETY: the C library's symbol of this name has this C signature.
                unsafe { std::mem::transmute::<usize, unsafe extern "C-unwind" fn($($arg),*) -> $ret>(p) }
            }
        )*
    };
}

/// As `real!`, for functions whose last argument is variadic.
macro_rules! real_variadic {
    ($($name:ident: fn($($arg:ty),*) -> $ret:ty;)*) => {
        $(
            pub(crate) fn $name() -> unsafe extern "C" fn($($arg),*, ...) -> $ret {
                static SLOT: AtomicUsize = AtomicUsize::new(0);
                let p = resolve(&SLOT, concat!(stringify!($name), "\0").as_bytes());
                // SAFETY: the C library's symbol of this name has this C signature.
                unsafe { std::mem::transmute::<usize, unsafe extern "C" fn($($arg),*, ...) -> $ret>(p) }
            }
        )*
    };
}

/// The C library's `glob_t` (`glob.h`): the paths found, and the functions
/// `GLOB_ALTDIRFUNC` has `glob` list directories and look at paths with.
#[repr(C)]
pub(crate) struct GlobT {
    pub(crate) gl_pathc: size_t,
    pub(crate) gl_pathv: *mut *mut c_char,
    pub(crate) gl_offs: size_t,
    pub(crate) gl_flags: c_int,
    pub(crate) gl_closedir: Option<unsafe extern "C" fn(*mut c_void)>,
    pub(crate) gl_readdir: Option<unsafe extern "C" fn(*mut c_void) -> *mut libc::dirent>,
    pub(crate) gl_opendir: Option<unsafe extern "C" fn(*const c_char) -> *mut c_void>,
    pub(crate) gl_lstat: Option<unsafe extern "C" fn(*const c_char, *mut libc::stat64) -> c_int>,
    pub(crate) gl_stat: Option<unsafe extern "C" fn(*const c_char, *mut libc::stat64) -> c_int>,
}

/// `glob`'s error callback.
pub(crate) type GlobError = unsafe extern "C" fn(*const c_char, c_int) -> c_int;

/// `scandir`'s filter and order.
pub(crate) type ScanFilter = unsafe extern "C" fn(*const libc::dirent) -> c_int;
pub(crate) type ScanOrder =
    unsafe extern "C" fn(*mut *const libc::dirent, *mut *const libc::dirent) -> c_int;
/// `scandir64`'s filter and order.
pub(crate) type ScanFilter64 = unsafe extern "C" fn(*const libc::dirent64) -> c_int;
pub(crate) type ScanOrder64 =
    unsafe extern "C" fn(*mut *const libc::dirent64, *mut *const libc::dirent64) -> c_int;

real_variadic! {
    open64: fn(*const c_char, c_int) -> c_int;
    openat64: fn(c_int, *const c_char, c_int) -> c_int;
    fcntl64: fn(c_int, c_int) -> c_int;
    ioctl: fn(c_int, c_ulong) -> c_int;
}

real! {
    pthread_exit: fn(*mut c_void) -> !;
    isatty: fn(c_int) -> c_int;
    tcgetattr: fn(c_int, *mut libc::termios) -> c_int;
    tcsetattr: fn(c_int, c_int, *const libc::termios) -> c_int;
    ttyname: fn(c_int) -> *mut c_char;
    ttyname_r: fn(c_int, *mut c_char, size_t) -> c_int;
    tcgetpgrp: fn(c_int) -> libc::pid_t;
    tcsetpgrp: fn(c_int, libc::pid_t) -> c_int;
    tcgetsid: fn(c_int) -> libc::pid_t;
    tcflush: fn(c_int, c_int) -> c_int;
    tcdrain: fn(c_int) -> c_int;
    tcflow: fn(c_int, c_int) -> c_int;
    tcsendbreak: fn(c_int, c_int) -> c_int;
    _exit: fn(c_int) -> !;
    _Exit: fn(c_int) -> !;
    quick_exit: fn(c_int) -> !;
    __cxa_at_quick_exit: fn(Option<unsafe extern "C" fn()>, *mut c_void) -> c_int;
    __open64_2: fn(*const c_char, c_int) -> c_int;
    __openat64_2: fn(c_int, *const c_char, c_int) -> c_int;
    creat64: fn(*const c_char, libc::mode_t) -> c_int;
    close: fn(c_int) -> c_int;
    close_range: fn(c_uint, c_uint, c_int) -> c_int;
    closefrom: fn(c_int) -> ();
    read: fn(c_int, *mut c_void, size_t) -> ssize_t;
    write: fn(c_int, *const c_void, size_t) -> ssize_t;
    pread64: fn(c_int, *mut c_void, size_t, off64_t) -> ssize_t;
    pwrite64: fn(c_int, *const c_void, size_t, off64_t) -> ssize_t;
    readv: fn(c_int, *const libc::iovec, c_int) -> ssize_t;
    writev: fn(c_int, *const libc::iovec, c_int) -> ssize_t;
    preadv: fn(c_int, *const libc::iovec, c_int, libc::off_t) -> ssize_t;
    preadv64: fn(c_int, *const libc::iovec, c_int, off64_t) -> ssize_t;
    pwritev: fn(c_int, *const libc::iovec, c_int, libc::off_t) -> ssize_t;
    pwritev64: fn(c_int, *const libc::iovec, c_int, off64_t) -> ssize_t;
    preadv2: fn(c_int, *const libc::iovec, c_int, libc::off_t, c_int) -> ssize_t;
    preadv64v2: fn(c_int, *const libc::iovec, c_int, off64_t, c_int) -> ssize_t;
    pwritev2: fn(c_int, *const libc::iovec, c_int, libc::off_t, c_int) -> ssize_t;
    pwritev64v2: fn(c_int, *const libc::iovec, c_int, off64_t, c_int) -> ssize_t;
    lseek64: fn(c_int, off64_t, c_int) -> off64_t;
    fsync: fn(c_int) -> c_int;
    sync: fn() -> ();
    fork: fn() -> libc::pid_t;
    posix_spawn_file_actions_addopen: fn(*mut libc::posix_spawn_file_actions_t, c_int, *const c_char, c_int, libc::mode_t) -> c_int;
    _Fork: fn() -> libc::pid_t;
    syncfs: fn(c_int) -> c_int;
    execve: fn(*const c_char, *const *const c_char, *const *const c_char) -> c_int;
    execv: fn(*const c_char, *const *const c_char) -> c_int;
    execvp: fn(*const c_char, *const *const c_char) -> c_int;
    execvpe: fn(*const c_char, *const *const c_char, *const *const c_char) -> c_int;
    fexecve: fn(c_int, *const *const c_char, *const *const c_char) -> c_int;
    execveat: fn(c_int, *const c_char, *const *const c_char, *const *const c_char, c_int) -> c_int;
    fdatasync: fn(c_int) -> c_int;
    sync_file_range: fn(c_int, off64_t, off64_t, c_uint) -> c_int;
    readahead: fn(c_int, off64_t, size_t) -> ssize_t;
    ftruncate64: fn(c_int, off64_t) -> c_int;
    truncate64: fn(*const c_char, off64_t) -> c_int;
    fallocate64: fn(c_int, c_int, off64_t, off64_t) -> c_int;
    posix_fallocate64: fn(c_int, off64_t, off64_t) -> c_int;
    posix_fadvise64: fn(c_int, off64_t, off64_t, c_int) -> c_int;
    fstat64: fn(c_int, *mut libc::stat64) -> c_int;
    stat: fn(*const c_char, *mut libc::stat64) -> c_int;
    stat64: fn(*const c_char, *mut libc::stat64) -> c_int;
    lstat: fn(*const c_char, *mut libc::stat64) -> c_int;
    lstat64: fn(*const c_char, *mut libc::stat64) -> c_int;
    fstatat64: fn(c_int, *const c_char, *mut libc::stat64, c_int) -> c_int;
    statx: fn(c_int, *const c_char, c_int, c_uint, *mut libc::statx) -> c_int;
    access: fn(*const c_char, c_int) -> c_int;
    faccessat: fn(c_int, *const c_char, c_int, c_int) -> c_int;
    readlink: fn(*const c_char, *mut c_char, size_t) -> ssize_t;
    readlinkat: fn(c_int, *const c_char, *mut c_char, size_t) -> ssize_t;
    fchmod: fn(c_int, libc::mode_t) -> c_int;
    fchown: fn(c_int, libc::uid_t, libc::gid_t) -> c_int;
    chmod: fn(*const c_char, libc::mode_t) -> c_int;
    utime: fn(*const c_char, *const libc::utimbuf) -> c_int;
    futimens: fn(c_int, *const libc::timespec) -> c_int;
    futimes: fn(c_int, *const libc::timeval) -> c_int;
    chown: fn(*const c_char, libc::uid_t, libc::gid_t) -> c_int;
    lchown: fn(*const c_char, libc::uid_t, libc::gid_t) -> c_int;
    utimes: fn(*const c_char, *const libc::timeval) -> c_int;
    lutimes: fn(*const c_char, *const libc::timeval) -> c_int;
    fchownat: fn(c_int, *const c_char, libc::uid_t, libc::gid_t, c_int) -> c_int;
    fchmodat: fn(c_int, *const c_char, libc::mode_t, c_int) -> c_int;
    utimensat: fn(c_int, *const c_char, *const libc::timespec, c_int) -> c_int;
    futimesat: fn(c_int, *const c_char, *const libc::timeval) -> c_int;
    unlink: fn(*const c_char) -> c_int;
    unlinkat: fn(c_int, *const c_char, c_int) -> c_int;
    rename: fn(*const c_char, *const c_char) -> c_int;
    renameat: fn(c_int, *const c_char, c_int, *const c_char) -> c_int;
    renameat2: fn(c_int, *const c_char, c_int, *const c_char, c_uint) -> c_int;
    mkdir: fn(*const c_char, libc::mode_t) -> c_int;
    mkdirat: fn(c_int, *const c_char, libc::mode_t) -> c_int;
    mknod: fn(*const c_char, libc::mode_t, libc::dev_t) -> c_int;
    mknodat: fn(c_int, *const c_char, libc::mode_t, libc::dev_t) -> c_int;
    mkfifo: fn(*const c_char, libc::mode_t) -> c_int;
    poll: fn(*mut libc::pollfd, libc::nfds_t, c_int) -> c_int;
    ppoll: fn(*mut libc::pollfd, libc::nfds_t, *const libc::timespec, *const libc::sigset_t) -> c_int;
    select: fn(c_int, *mut libc::fd_set, *mut libc::fd_set, *mut libc::fd_set, *mut libc::timeval) -> c_int;
    pselect: fn(c_int, *mut libc::fd_set, *mut libc::fd_set, *mut libc::fd_set, *const libc::timespec, *const libc::sigset_t) -> c_int;
    epoll_ctl: fn(c_int, c_int, c_int, *mut libc::epoll_event) -> c_int;
    mkfifoat: fn(c_int, *const c_char, libc::mode_t) -> c_int;
    mkdtemp: fn(*mut c_char) -> *mut c_char;
    euidaccess: fn(*const c_char, c_int) -> c_int;
    lchmod: fn(*const c_char, libc::mode_t) -> c_int;
    statvfs: fn(*const c_char, *mut libc::statvfs) -> c_int;
    statvfs64: fn(*const c_char, *mut libc::statvfs64) -> c_int;
    statfs: fn(*const c_char, *mut libc::statfs) -> c_int;
    statfs64: fn(*const c_char, *mut libc::statfs64) -> c_int;
    pathconf: fn(*const c_char, c_int) -> libc::c_long;
    fstatvfs: fn(c_int, *mut libc::statvfs) -> c_int;
    fstatvfs64: fn(c_int, *mut libc::statvfs64) -> c_int;
    fstatfs: fn(c_int, *mut libc::statfs) -> c_int;
    fstatfs64: fn(c_int, *mut libc::statfs64) -> c_int;
    fpathconf: fn(c_int, c_int) -> libc::c_long;
    setxattr: fn(*const c_char, *const c_char, *const c_void, size_t, c_int) -> c_int;
    lsetxattr: fn(*const c_char, *const c_char, *const c_void, size_t, c_int) -> c_int;
    fsetxattr: fn(c_int, *const c_char, *const c_void, size_t, c_int) -> c_int;
    removexattr: fn(*const c_char, *const c_char) -> c_int;
    lremovexattr: fn(*const c_char, *const c_char) -> c_int;
    fremovexattr: fn(c_int, *const c_char) -> c_int;
    link: fn(*const c_char, *const c_char) -> c_int;
    linkat: fn(c_int, *const c_char, c_int, *const c_char, c_int) -> c_int;
    symlink: fn(*const c_char, *const c_char) -> c_int;
    symlinkat: fn(*const c_char, c_int, *const c_char) -> c_int;
    rmdir: fn(*const c_char) -> c_int;
    remove: fn(*const c_char) -> c_int;
    fchdir: fn(c_int) -> c_int;
    dup: fn(c_int) -> c_int;
    dup2: fn(c_int, c_int) -> c_int;
    dup3: fn(c_int, c_int, c_int) -> c_int;
    mmap64: fn(*mut c_void, size_t, c_int, c_int, c_int, off64_t) -> *mut c_void;
    opendir: fn(*const c_char) -> *mut libc::DIR;
    scandir: fn(*const c_char, *mut *mut *mut libc::dirent, Option<ScanFilter>, Option<ScanOrder>) -> c_int;
    scandir64: fn(*const c_char, *mut *mut *mut libc::dirent64, Option<ScanFilter64>, Option<ScanOrder64>) -> c_int;
    fdopendir: fn(c_int) -> *mut libc::DIR;
    readdir: fn(*mut libc::DIR) -> *mut libc::dirent;
    readdir64: fn(*mut libc::DIR) -> *mut libc::dirent64;
    closedir: fn(*mut libc::DIR) -> c_int;
    rewinddir: fn(*mut libc::DIR) -> ();
    dirfd: fn(*mut libc::DIR) -> c_int;
    telldir: fn(*mut libc::DIR) -> libc::c_long;
    seekdir: fn(*mut libc::DIR, libc::c_long) -> ();
    readdir_r: fn(*mut libc::DIR, *mut libc::dirent, *mut *mut libc::dirent) -> c_int;
    readdir64_r: fn(*mut libc::DIR, *mut libc::dirent64, *mut *mut libc::dirent64) -> c_int;
    fopen64: fn(*const c_char, *const c_char) -> *mut libc::FILE;
    fdopen: fn(c_int, *const c_char) -> *mut libc::FILE;
    fileno: fn(*mut libc::FILE) -> c_int;
    fileno_unlocked: fn(*mut libc::FILE) -> c_int;
    fgetwc: fn(*mut libc::FILE) -> u32;
    fgetwc_unlocked: fn(*mut libc::FILE) -> u32;
    fgetws: fn(*mut libc::wchar_t, c_int, *mut libc::FILE) -> *mut libc::wchar_t;
    fgetws_unlocked: fn(*mut libc::wchar_t, c_int, *mut libc::FILE) -> *mut libc::wchar_t;
    fputwc: fn(u32, *mut libc::FILE) -> u32;
    fputwc_unlocked: fn(u32, *mut libc::FILE) -> u32;
    fputws: fn(*const libc::wchar_t, *mut libc::FILE) -> c_int;
    fputws_unlocked: fn(*const libc::wchar_t, *mut libc::FILE) -> c_int;
    ungetwc: fn(u32, *mut libc::FILE) -> u32;
    fwide: fn(*mut libc::FILE, c_int) -> c_int;
    vfwprintf: fn(*mut libc::FILE, *const libc::wchar_t, *mut c_void) -> c_int;
    __fgetws_chk: fn(*mut libc::wchar_t, size_t, c_int, *mut libc::FILE) -> *mut libc::wchar_t;
    __fgetws_unlocked_chk: fn(*mut libc::wchar_t, size_t, c_int, *mut libc::FILE) -> *mut libc::wchar_t;
    vfwscanf: fn(*mut libc::FILE, *const libc::wchar_t, *mut c_void) -> c_int;
    __isoc99_vfwscanf: fn(*mut libc::FILE, *const libc::wchar_t, *mut c_void) -> c_int;
    __isoc23_vfwscanf: fn(*mut libc::FILE, *const libc::wchar_t, *mut c_void) -> c_int;
    __vfwprintf_chk: fn(*mut libc::FILE, c_int, *const libc::wchar_t, *mut c_void) -> c_int;
    vdprintf: fn(c_int, *const c_char, *mut c_void) -> c_int;
    __vdprintf_chk: fn(c_int, c_int, *const c_char, *mut c_void) -> c_int;
    vasprintf: fn(*mut *mut c_char, *const c_char, *mut c_void) -> c_int;
    __vasprintf_chk: fn(*mut *mut c_char, c_int, *const c_char, *mut c_void) -> c_int;
    freopen64: fn(*const c_char, *const c_char, *mut libc::FILE) -> *mut libc::FILE;
    realpath: fn(*const c_char, *mut c_char) -> *mut c_char;
    chdir: fn(*const c_char) -> c_int;
    getxattr: fn(*const c_char, *const c_char, *mut c_void, size_t) -> ssize_t;
    lgetxattr: fn(*const c_char, *const c_char, *mut c_void, size_t) -> ssize_t;
    fgetxattr: fn(c_int, *const c_char, *mut c_void, size_t) -> ssize_t;
    listxattr: fn(*const c_char, *mut c_char, size_t) -> ssize_t;
    llistxattr: fn(*const c_char, *mut c_char, size_t) -> ssize_t;
    flistxattr: fn(c_int, *mut c_char, size_t) -> ssize_t;
    flock: fn(c_int, c_int) -> c_int;
    lockf64: fn(c_int, c_int, off64_t) -> c_int;
    sendfile64: fn(c_int, c_int, *mut off64_t, size_t) -> ssize_t;
    copy_file_range: fn(c_int, *mut off64_t, c_int, *mut off64_t, size_t, c_uint) -> ssize_t;
    splice: fn(c_int, *mut off64_t, c_int, *mut off64_t, size_t, c_uint) -> ssize_t;
    tee: fn(c_int, c_int, size_t, c_uint) -> ssize_t;
    glob: fn(*const c_char, c_int, Option<GlobError>, *mut GlobT) -> c_int;
    glob64: fn(*const c_char, c_int, Option<GlobError>, *mut GlobT) -> c_int;
    nftw: fn(*const c_char, Option<crate::dir::NftwFn>, c_int, c_int) -> c_int;
    nftw64: fn(*const c_char, Option<crate::dir::NftwFn>, c_int, c_int) -> c_int;
    ftw: fn(*const c_char, Option<crate::dir::FtwFn>, c_int) -> c_int;
    ftw64: fn(*const c_char, Option<crate::dir::FtwFn>, c_int) -> c_int;
}
