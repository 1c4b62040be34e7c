//! What a program wrote through a store it never closed survives the
//! program's normal exit, as what it wrote to a local file system does (the
//! kernel keeps it): every cached store made in this process is noted here
//! (weakly), and an exit handler, registered with the C library at the
//! first, writes and syncs each one still open when the process exits
//! normally (a return from `main`, `std::process::exit`, the C library's
//! `exit`). A store's drop runs no destructor at those exits when the store
//! is leaked, kept in a static, or owned by a thread still running.
//!
//! The handler does not wait for what other threads hold (they may never
//! let it go before the process ends): a file's sync writes the pages it
//! can, makes them durable with the file's length, and goes again for pages
//! another thread held, for up to two seconds (a thread still writing holds
//! each page only while it copies); what is still held then fails, and is
//! said on stderr. Nor does it wait for the thread that called `exit` (see
//! [`sync_open_stores`]). Another thread's sync of a file, which writes the
//! same pages, is waited for up to five seconds. `_exit`, `abort` or a signal that ends the process
//! lose what no sync covered.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError, Weak};

use super::Hold;
use super::shared::Shared;
use crate::error::{Error, Result};

/// The stores made in this process (or, in a child made by `fork`, its
/// parent's, which [`Shared::origin`] tells apart).
static OPEN: Mutex<Vec<Weak<Shared>>> = Mutex::new(Vec::new());

/// The exit handler is registered.
static REGISTERED: AtomicBool = AtomicBool::new(false);

/// The process whose thread holds [`OPEN`] (0 while nobody does). The
/// forking thread takes the list across a `fork` (see [`note`]); a child
/// made by the raw system call while a thread of its parent held it finds
/// its copy locked for good, and the parent's number here.
static HOLDER: AtomicU32 = AtomicU32::new(0);

/// How long a thread waits for the list before it gives up (it is held for
/// a few steps at a time; a holder this late is stuck).
const LIST_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// [`OPEN`] locked, its holder noted in [`HOLDER`].
struct Listed(MutexGuard<'static, Vec<Weak<Shared>>>);

impl Drop for Listed {
    fn drop(&mut self) {
        HOLDER.store(0, Ordering::Release);
    }
}

/// The list, or `None` if a thread of the process this one was forked from
/// held it at the fork (it stays locked in this copy), or if it stays
/// locked for [`LIST_WAIT`].
fn list() -> Option<Listed> {
    // SAFETY: `getpid` takes no arguments and cannot fail.
    let me = unsafe { libc::getpid() } as u32;
    let start = std::time::Instant::now();
    loop {
        match OPEN.try_lock() {
            Ok(g) => {
                HOLDER.store(me, Ordering::Release);
                return Some(Listed(g));
            }
            Err(TryLockError::Poisoned(p)) => {
                HOLDER.store(me, Ordering::Release);
                return Some(Listed(p.into_inner()));
            }
            Err(TryLockError::WouldBlock) => {
                let holder = HOLDER.load(Ordering::Acquire);
                if (holder != 0 && holder != me) || start.elapsed() > LIST_WAIT {
                    return None;
                }
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        }
    }
}

/// Note a store just made (and register the exit handler at the first).
pub(crate) fn note(sh: &Arc<Shared>) {
    // The forking thread takes the list across a `fork`: a child made while
    // another thread held it finds it free, and notes the stores it opens.
    static LISTED: std::sync::Once = std::sync::Once::new();
    LISTED.call_once(|| {
        crate::util::fork_locks::list(|| list().map(|l| Box::new(l) as Box<dyn std::any::Any>))
    });
    match list() {
        Some(mut l) => {
            l.0.retain(|w| w.strong_count() > 0);
            l.0.push(Arc::downgrade(sh));
        }
        None => eprintln!(
            "setcache: the list of open stores stayed locked: this store is not synced at \
             the process's exit unless it is closed"
        ),
    }
    if !REGISTERED.swap(true, Ordering::AcqRel) {
        // SAFETY: registers a plain `extern "C"` function with no arguments.
        unsafe { libc::atexit(sync_open_stores) };
    }
}

/// The stores made in this process and still open.
pub(crate) fn open_here() -> Vec<Arc<Shared>> {
    // (Upgraded under the lock, sorted out after it: a store whose last
    // other handle went meanwhile is dropped here, with the list free.)
    let all: Vec<Arc<Shared>> = list()
        .map(|l| l.0.iter().filter_map(Weak::upgrade).collect())
        .unwrap_or_default();
    all.into_iter().filter(|sh| sh.origin.is_here()).collect()
}

/// How long the exit's sync waits for another thread's sync of one of the
/// store's files to end (that sync writes the same pages; one that waits for
/// a page held for good is given up after it).
const BESIDE_SYNC: std::time::Duration = std::time::Duration::from_secs(5);

/// Write and sync one store at the process's exit (see the module's text);
/// a store whose pages are to be given up is left. A file another thread is
/// syncing is tried again until that sync ends, up to [`BESIDE_SYNC`].
pub(crate) fn sync_one(sh: &Shared) -> Result<()> {
    if sh.discard.load(Ordering::Acquire) {
        return Ok(());
    }
    Hold::check_store(sh as *const Shared as usize)?;
    let start = std::time::Instant::now();
    loop {
        match sh.sync_all(false, false) {
            Err(Error::Busy(m))
                if m.ends_with(super::writeback::BEING_SYNCED) && start.elapsed() < BESIDE_SYNC =>
            {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            // Pages another thread held (one still writing while the
            // process exits holds each only for its copy): what was written
            // is durable, and the sync goes again for the rest while
            // [`HELD_PAGES`] lasts.
            Err(Error::Busy(m))
                if m.ends_with(super::writeback::IN_USE) && start.elapsed() < HELD_PAGES =>
            {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            r => return r,
        }
    }
}

/// How long the exit's sync goes again for pages other threads held (see
/// [`sync_one`]): a thread writing while the process exits lets each page go
/// after its copy, so every page dirty when the exit began is written in a
/// later round; a page held for good is given up after this.
const HELD_PAGES: std::time::Duration = std::time::Duration::from_secs(2);

/// How long the exit waits for a file's sync before it gives up (see
/// [`sync_open_stores`]).
const STUCK: std::time::Duration = std::time::Duration::from_secs(60);

/// The exit handler. The syncs run on a thread of their own, which the
/// exiting thread waits for: a thread that calls `exit` while it holds one
/// of the store's locks (from a signal handler that interrupted a call of
/// the crate) would wait for itself for ever. A sync that makes no progress
/// (no file finished) for a minute is given up then, said on stderr, and the
/// process ends, its pages unwritten.
pub(crate) extern "C" fn sync_open_stores() {
    let stores = open_here();
    if stores.is_empty() {
        return;
    }
    let say = |e: &Error| {
        eprintln!("setcache: writing a store's dirty pages at the process's exit failed: {e}");
    };
    let done = Arc::new((Mutex::new(0usize), std::sync::Condvar::new()));
    let total = stores.len();
    let d = done.clone();
    let spawned = crate::util::fork_locks::spawn(
        std::thread::Builder::new().name("setcache-exit".into()),
        move || {
            for sh in stores {
                if let Err(e) = sync_one(&sh) {
                    say(&e);
                }
                let (n, cv) = &*d;
                *n.lock().unwrap_or_else(|p| p.into_inner()) += 1;
                cv.notify_all();
            }
        },
    );
    if spawned.is_err() {
        // No thread to be had: the syncs run here.
        for sh in open_here() {
            if let Err(e) = sync_one(&sh) {
                say(&e);
            }
        }
        return;
    }
    let (n, cv) = &*done;
    let mut finished = n.lock().unwrap_or_else(|p| p.into_inner());
    while *finished < total {
        let before = *finished;
        let (g, t) = cv
            .wait_timeout_while(finished, STUCK, |f| *f == before)
            .unwrap_or_else(|p| p.into_inner());
        finished = g;
        if t.timed_out() {
            eprintln!(
                "setcache: the store's sync at the process's exit made no progress in {} s \
                 (a lock held by the thread that called exit, from a signal handler?): \
                 given up, its dirty pages unwritten",
                STUCK.as_secs()
            );
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A child forked while another thread of its parent holds the list of
    /// open stores notes the store it makes (and so syncs it at its exit).
    #[test]
    fn a_child_forked_while_the_list_is_held_notes_its_own_store() {
        let dir = crate::cached::scratch_dir("exit-list");
        let s = crate::Store::open(&[&dir], crate::StoreOptions::default()).unwrap();
        drop(crate::CachedStore::new(s, crate::cached::small_cache(16)).unwrap());
        let code = crate::util::fork_locks::in_child_while_held(list, || {
            let Ok(s) = crate::Store::open(&[&dir], crate::StoreOptions::default()) else {
                return 2;
            };
            let Ok(cs) = crate::CachedStore::new(s, crate::cached::small_cache(16)) else {
                return 3;
            };
            let noted = open_here().len();
            drop(cs);
            i32::from(noted != 1)
        });
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(code, Some(0), "the child did not note its store (or hung)");
    }
}
