//! Process-wide locks that a `fork` does not leave locked in the child.
//!
//! A child made by `fork` has one thread, the one that called it; a lock
//! another thread held at that instant stays held in the child's copy for
//! good, and the child's first use of it waits for ever. Each lock listed
//! here is taken by the forking thread just before the fork (the C library's
//! `atfork` prepare step) and let go on both sides after it, so that the
//! child's copy is free and its contents whole.
//!
//! Only leaf locks belong here: held for a few steps, never while waiting
//! for another lock of the crate or for I/O, so the prepare step's wait is
//! short and cannot close a cycle. A lock is taken with a bounded wait (a
//! holder stuck beyond [`WAIT`] is left to it); a `fork` made by the raw
//! system call runs no handler at all.

use std::any::Any;
use std::cell::RefCell;
use std::sync::Once;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// How long the prepare step waits for one lock.
pub(crate) const WAIT: Duration = Duration::from_secs(10);

/// A function that takes one lock (with a bounded wait) and returns its
/// guard, or `None` if it could not.
pub(crate) type Take = fn() -> Option<Box<dyn Any>>;

/// Most locks listed.
const SLOTS: usize = 8;

/// The listed takers, as function addresses (0: empty), in listing order.
static TAKERS: [AtomicUsize; SLOTS] = [const { AtomicUsize::new(0) }; SLOTS];

thread_local! {
    /// The guards the forking thread holds across a `fork`.
    static HELD: RefCell<Vec<Box<dyn Any>>> = const { RefCell::new(Vec::new()) };
}

/// List `take` (once per lock: call it from a `Once`). The locks are taken
/// in listing order before each later `fork` and let go in reverse order.
pub(crate) fn list(take: Take) {
    register();
    for slot in &TAKERS {
        if slot
            .compare_exchange(0, take as usize, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            return;
        }
    }
    // Only the crate lists locks, a fixed few.
    debug_assert!(false, "more than {SLOTS} fork locks listed");
}

/// Try `try_lock` until it gives a guard or [`WAIT`] has passed.
pub(crate) fn take_within<G>(mut try_lock: impl FnMut() -> Option<G>) -> Option<G> {
    let start = Instant::now();
    let mut spins = 0u32;
    loop {
        if let Some(g) = try_lock() {
            return Some(g);
        }
        if start.elapsed() > WAIT {
            return None;
        }
        spins += 1;
        if spins < 64 {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
}

extern "C" fn prepare() {
    let mut guards = Vec::new();
    for slot in &TAKERS {
        let f = slot.load(Ordering::Acquire);
        if f == 0 {
            break;
        }
        // SAFETY: every non-zero slot holds a `Take` stored by `list`.
        let take: Take = unsafe { std::mem::transmute::<usize, Take>(f) };
        if let Some(g) = take() {
            guards.push(g);
        }
    }
    let _ = HELD.try_with(|h| *h.borrow_mut() = guards);
}

extern "C" fn after() {
    let _ = HELD.try_with(|h| {
        let mut guards = std::mem::take(&mut *h.borrow_mut());
        while let Some(g) = guards.pop() {
            drop(g);
        }
    });
}

/// Register the handlers with the C library once.
fn register() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: registers plain `extern "C"` functions with no arguments.
        unsafe { libc::pthread_atfork(Some(prepare), Some(after), Some(after)) };
    });
}

/// Fork; the child runs `child` and ends with the code it returns. Returns
/// the child's exit code, or `None` if it did not end within 20 s (it is
/// killed) or ended otherwise. For tests of what a forked child finds.
#[cfg(test)]
pub(crate) fn in_child(child: impl FnOnce() -> i32) -> Option<i32> {
    // SAFETY: the child runs `child` and `_exit`s.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
    if pid == 0 {
        let code = child();
        // SAFETY: ends the child at once.
        unsafe { libc::_exit(code) };
    }
    let start = Instant::now();
    let mut status = 0;
    loop {
        // SAFETY: waits for this test's child.
        if unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) } == pid {
            break;
        }
        if start.elapsed() > Duration::from_secs(20) {
            // SAFETY: this test's child.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            // SAFETY: reaps it.
            unsafe { libc::waitpid(pid, &mut status, 0) };
            return None;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status))
}

/// Run `child` in a child forked while another thread holds a lock for
/// 300 ms: `hold` takes it (and returns its guard), on that thread.
#[cfg(test)]
pub(crate) fn in_child_while_held<G>(
    hold: impl FnOnce() -> G + Send + 'static,
    child: impl FnOnce() -> i32,
) -> Option<i32> {
    let (tx, rx) = std::sync::mpsc::channel();
    let holder = std::thread::spawn(move || {
        let g = hold();
        tx.send(()).unwrap();
        std::thread::sleep(Duration::from_millis(300));
        drop(g);
    });
    rx.recv().unwrap();
    let code = in_child(child);
    holder.join().unwrap();
    code
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    static M: Mutex<u32> = Mutex::new(0);

    fn take_m() -> Option<Box<dyn Any>> {
        take_within(|| M.try_lock().ok()).map(|g| Box::new(g) as Box<dyn Any>)
    }

    /// A child forked while another thread holds a listed lock finds it
    /// free (and the parent's holder goes on).
    #[test]
    fn a_lock_held_by_another_thread_at_the_fork_is_free_in_the_child() {
        static ONCE: Once = Once::new();
        ONCE.call_once(|| list(take_m));
        let code = in_child_while_held(
            || {
                let mut g = M.lock().unwrap();
                *g += 1;
                g
            },
            || match M.try_lock() {
                Ok(g) if *g == 1 => 0,
                _ => 1,
            },
        );
        assert_eq!(code, Some(0), "the child found the lock held");
        assert_eq!(*M.lock().unwrap(), 1);
    }
}
