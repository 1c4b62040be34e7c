//! A C program's end beside a store's threads, for the libraries that put
//! the crate under C programs (the C interface, the preload library).
//!
//! A process ends when its last thread does. A store's threads (its
//! engines, flusher and readahead) live until the store closes, so a program
//! whose main thread ends by `pthread_exit` with a store still open would
//! never end. Such a library calls [`main_thread_ends`] from its
//! `pthread_exit` and [`store_opened`] after it opens a store: once both
//! have happened (in either order), a thread named as the store's ends the
//! process with `exit(0)` when no thread of the program is left, as the end
//! of its last thread would have (the exit handlers then run, as at any
//! exit).

use std::sync::atomic::{AtomicI32, Ordering, fence};

/// The process (its id) whose main thread ended by `pthread_exit`, or 0. A
/// child made by `fork` has a thread of its own as its main one: the
/// parent's mark, which it inherits, is not its own.
static MAIN_ENDED: AtomicI32 = AtomicI32::new(0);

/// The process (its id) in which the thread that ends it was started, or 0
/// (a child made by `fork` has none, whatever it inherits).
static ENDER: AtomicI32 = AtomicI32::new(0);

fn me() -> i32 {
    // SAFETY: plain getter.
    unsafe { libc::getpid() }
}

/// The main thread is ending by `pthread_exit` (the caller checked that it
/// is the main one); `store_open` says whether a store of the caller's is
/// open in this process now. If one is, the thread that ends the process is
/// started (once); an error is the system's refusal to start it.
pub fn main_thread_ends(store_open: impl FnOnce() -> bool) -> std::io::Result<()> {
    MAIN_ENDED.store(me(), Ordering::Release);
    // Against `store_opened`: the opener sets its store, then looks at
    // `MAIN_ENDED`; this sets that, then looks at the stores. The fences
    // keep both from missing the other.
    fence(Ordering::SeqCst);
    if !store_open() {
        return Ok(());
    }
    start_ender()
}

/// A store was opened (and is now seen by the `store_open` of a later
/// [`main_thread_ends`]): if the main thread has ended already, its threads
/// must not keep the process alive either.
pub fn store_opened() -> std::io::Result<()> {
    fence(Ordering::SeqCst);
    if MAIN_ENDED.load(Ordering::Acquire) == me() {
        return start_ender();
    }
    Ok(())
}

fn start_ender() -> std::io::Result<()> {
    if ENDER.swap(me(), Ordering::AcqRel) == me() {
        return Ok(());
    }
    // Without `/proc` the program's threads cannot be told from the
    // crate's: the process is left to them (it does not end), rather than
    // ended while a thread of the program still works.
    if std::fs::read_dir("/proc/self/task").is_err() {
        return Err(std::io::Error::other(
            "/proc/self/task cannot be read, so the program's threads cannot be told apart",
        ));
    }
    let spawned = crate::util::fork_locks::spawn(
        std::thread::Builder::new().name("setcache-exit".into()),
        || {
            while program_threads_left() {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            // SAFETY: ends the process as its last thread's end would.
            unsafe { libc::exit(0) }
        },
    );
    spawned.map(drop).inspect_err(|_| {
        ENDER.store(0, Ordering::Release);
    })
}

/// The names the crate gives its threads (as `/proc` shows them, cut at 15
/// bytes), and the kernel's io_uring workers' (`iou-*`).
const OURS: [&[u8]; 9] = [
    b"setcache-uring-",
    b"setcache-psync-",
    b"setcache-sim-",
    b"setcache-flush",
    b"setcache-ahead",
    b"setcache-aio",
    b"setcache-part",
    b"setcache-exit",
    b"iou-",
];

/// Whether a thread of the program (not the crate's nor the kernel's
/// io_uring workers, by their names: see [`OURS`]) is alive besides the
/// main thread, which has ended. Whether `/proc` cannot be read any more,
/// too (the threads cannot be told apart).
fn program_threads_left() -> bool {
    let main = me().to_string();
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return true;
    };
    tasks.flatten().any(|t| {
        let tid = t.file_name();
        if tid.to_str() == Some(main.as_str()) {
            return false;
        }
        // A thread that ended since the listing has no name left.
        let comm = std::fs::read(t.path().join("comm")).unwrap_or_default();
        let comm = comm.strip_suffix(b"\n").unwrap_or(&comm);
        !comm.is_empty() && !OURS.iter().any(|p| comm.starts_with(p))
    })
}
