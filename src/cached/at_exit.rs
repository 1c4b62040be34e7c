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
//! let it go before the process ends): a file whose sync would wait for a
//! page another thread pins or writes back fails at once, and what fails is
//! said on stderr. `_exit`, `abort` or a signal that ends the process lose
//! what no sync covered.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError, Weak};

use super::Hold;
use super::shared::Shared;
use crate::error::Result;

/// The stores made in this process (or, in a child made by `fork`, its
/// parent's, which [`Shared::origin`] tells apart).
static OPEN: Mutex<Vec<Weak<Shared>>> = Mutex::new(Vec::new());

/// The exit handler is registered.
static REGISTERED: AtomicBool = AtomicBool::new(false);

/// The list, or `None` if it stays locked for a second (in a child made by
/// `fork`, by a thread of the parent that held it then).
fn list() -> Option<MutexGuard<'static, Vec<Weak<Shared>>>> {
    for _ in 0..100 {
        match OPEN.try_lock() {
            Ok(g) => return Some(g),
            Err(TryLockError::Poisoned(p)) => return Some(p.into_inner()),
            Err(TryLockError::WouldBlock) => {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
        }
    }
    None
}

/// Note a store just made (and register the exit handler at the first).
pub(crate) fn note(sh: &Arc<Shared>) {
    if let Some(mut l) = list() {
        l.retain(|w| w.strong_count() > 0);
        l.push(Arc::downgrade(sh));
    }
    if !REGISTERED.swap(true, Ordering::AcqRel) {
        // SAFETY: registers a plain `extern "C"` function with no arguments.
        unsafe { libc::atexit(sync_open_stores) };
    }
}

/// The stores made in this process and still open.
pub(crate) fn open_here() -> Vec<Arc<Shared>> {
    list()
        .map(|l| {
            l.iter()
                .filter_map(Weak::upgrade)
                .filter(|sh| sh.origin.is_here())
                .collect()
        })
        .unwrap_or_default()
}

/// Write and sync one store at the process's exit (see the module's text);
/// a store whose pages are to be given up is left.
pub(crate) fn sync_one(sh: &Shared) -> Result<()> {
    if sh.discard.load(Ordering::Acquire) {
        return Ok(());
    }
    Hold::check_store(sh as *const Shared as usize)?;
    sh.sync_all(false, false)
}

extern "C" fn sync_open_stores() {
    for sh in open_here() {
        if let Err(e) = sync_one(&sh) {
            eprintln!("setcache: writing a store's dirty pages at the process's exit failed: {e}");
        }
    }
}
