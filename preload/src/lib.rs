//! `LD_PRELOAD=libsetcache_preload.so`: every file under `SETCACHE_DIR` is a
//! file of one setcache store, opened in the process at the first call that
//! needs it, on the device directories of `SETCACHE_DEVICES` (comma
//! separated), with a page cache of `SETCACHE_CACHE_SIZE` bytes (default
//! 256M) and pages of `SETCACHE_PAGE_SIZE` (default 4096), its sets divided
//! among `SETCACHE_PARTITIONS` partitions (default 1, the shared cache; 0 for
//! one per NUMA node). Every other path
//! and descriptor goes to the C library untouched.
//!
//! An intercepted `open` returns a real descriptor as a placeholder: the
//! directory `SETCACHE_DIR` opened with `O_PATH`, which the kernel refuses to
//! read, write or map, so a call this library does not stand in for fails
//! with `EBADF` rather than touching other bytes; descriptor numbers, `dup`
//! and close-on-exec stay the kernel's. A table from placeholder to open file
//! description (file, position, status flags) serves the calls the library
//! does stand in for. What cannot be supported on a file of the store
//! (`mmap`, directories inside it, `O_TMPFILE`) fails with an
//! errno and a message on stderr, once per kind.
//!
//! The functions are defined with the C calling convention of x86-64 and
//! AArch64 Linux, where a variadic argument travels as a fixed one does: so
//! `open`'s mode and `fcntl`'s argument are read as fixed arguments.

#[cfg(not(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
)))]
compile_error!(
    "the preload library reads variadic arguments as x86-64 and AArch64 Linux pass them"
);

mod calls;
mod copy;
mod dir;
mod inherit;
mod lock;
mod path;
mod ready;
mod real;
mod state;
mod stdio;

use std::collections::HashSet;
use std::sync::Mutex;

/// Set the calling thread's `errno`.
pub(crate) fn set_errno(e: i32) {
    // SAFETY: __errno_location returns this thread's errno.
    unsafe { *libc::__errno_location() = e };
}

/// Print `msg` on stderr, once per `key` in the process.
pub(crate) fn warn_once(key: &str, msg: &str) {
    static SEEN: Mutex<Option<HashSet<String>>> = Mutex::new(None);
    let mut seen = SEEN.lock().unwrap_or_else(|p| p.into_inner());
    let set = seen.get_or_insert_with(HashSet::new);
    if set.len() < 1024 && set.insert(key.to_string()) {
        say(msg);
    }
}

/// Print `msg` on stderr, prefixed with the library's name, by the system
/// call itself: not through this library's `write` (descriptor 2 may stand
/// for a store file whose locks the caller holds), and with no error of its
/// own (a full disk or a closed pipe loses the message, never the program).
pub(crate) fn say(msg: &str) {
    let line = format!("setcache preload: {msg}\n");
    let mut b = line.as_bytes();
    // SAFETY: reads this thread's errno, which the caller's caller may read.
    let errno = unsafe { *libc::__errno_location() };
    while !b.is_empty() {
        // SAFETY: writes `b`, a live buffer, to descriptor 2.
        let n = unsafe { libc::syscall(libc::SYS_write, 2, b.as_ptr(), b.len()) };
        // SAFETY: as above.
        if n < 0 && unsafe { *libc::__errno_location() } == libc::EINTR {
            continue;
        }
        if n <= 0 {
            break;
        }
        b = &b[n as usize..];
    }
    set_errno(errno);
}

/// Report an error of setcache on a call: its errno, and its message once.
pub(crate) fn fail(call: &str, e: &setcache::Error) -> i32 {
    let errno = e.posix_errno();
    let msg = format!("{call}: {e}");
    warn_once(&msg, &msg);
    errno
}

/// Stop the process: the library cannot work and passing through would
/// touch the wrong files.
pub(crate) fn fatal(msg: &str) -> ! {
    say(msg);
    std::process::abort();
}
