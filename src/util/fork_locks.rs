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
//!
//! The standard library takes a process-wide lock of its own in each new
//! thread before the thread's function runs and again after it returns (its
//! record of the thread's stack guard, for the stack-overflow message); a
//! thread forked while another was inside it hangs at its own first thread's
//! start. The crate's threads are started through [`spawn`] and
//! [`spawn_scoped`], which count a thread as passing from its creation to its
//! function's first step and from its function's end to its thread-local
//! destructors (which run after that lock is let go). The prepare step,
//! having taken the listed locks, closes the gate to new passages and waits
//! (within [`WAIT`]) until none is under way. Threads the program starts
//! itself are beyond the crate's reach.

use std::any::Any;
use std::cell::{Cell, RefCell};
use std::sync::Once;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::{JoinHandle, Scope, ScopedJoinHandle};
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
        back_off(&mut spins);
    }
}

/// The crate's threads passing their start or their end (see the module's
/// text), with [`CLOSED`] set while a fork's prepare step holds the gate.
static PASSING: AtomicUsize = AtomicUsize::new(0);

/// The bit of [`PASSING`] that closes the gate to new passages.
const CLOSED: usize = 1 << (usize::BITS - 1);

/// Wait (yielding, then sleeping) as `take_within` does.
fn back_off(spins: &mut u32) {
    *spins += 1;
    if *spins < 64 {
        std::thread::yield_now();
    } else {
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// Count a passage, once the gate is open.
fn enter() {
    let mut spins = 0u32;
    loop {
        let s = PASSING.load(Ordering::Acquire);
        if s & CLOSED == 0 {
            if PASSING
                .compare_exchange_weak(s, s + 1, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                return;
            }
            continue;
        }
        back_off(&mut spins);
    }
}

/// A passage ended.
fn leave() {
    PASSING.fetch_sub(1, Ordering::AcqRel);
}

/// Marks, in a thread-local destructor, the end of a thread's last
/// passage: those destructors run after the standard library's end-of-thread
/// step.
struct EndMark(Cell<bool>);

impl Drop for EndMark {
    fn drop(&mut self) {
        if self.0.get() {
            leave();
        }
    }
}

thread_local! {
    static END: EndMark = const { EndMark(Cell::new(false)) };
    /// Whether this thread's prepare step closed the gate.
    static CLOSED_HERE: Cell<bool> = const { Cell::new(false) };
}

/// Dropped when a thread's function ends (returns or unwinds): counts the
/// passage out, ended by [`EndMark`].
struct Ending;

impl Drop for Ending {
    fn drop(&mut self) {
        enter();
        if END.try_with(|m| m.0.set(true)).is_err() {
            leave();
        }
    }
}

/// `f` wrapped to count its thread's passages.
fn counted<T>(f: impl FnOnce() -> T) -> impl FnOnce() -> T {
    move || {
        leave();
        let _end = Ending;
        f()
    }
}

/// Start a thread of the crate (see the module's text).
pub(crate) fn spawn<T, F>(b: std::thread::Builder, f: F) -> std::io::Result<JoinHandle<T>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    register();
    enter();
    b.spawn(counted(f)).inspect_err(|_| leave())
}

/// Start a scoped thread of the crate (see the module's text).
pub(crate) fn spawn_scoped<'scope, 'env, T, F>(
    b: std::thread::Builder,
    s: &'scope Scope<'scope, 'env>,
    f: F,
) -> std::io::Result<ScopedJoinHandle<'scope, T>>
where
    F: FnOnce() -> T + Send + 'scope,
    T: Send + 'scope,
{
    register();
    enter();
    b.spawn_scoped(s, counted(f)).inspect_err(|_| leave())
}

/// Close the gate and wait until no passage is under way (both within
/// [`WAIT`]); whether this thread closed it.
fn close_gate() -> bool {
    let closed = take_within(|| {
        let s = PASSING.load(Ordering::Acquire);
        (s & CLOSED == 0
            && PASSING
                .compare_exchange(s, s | CLOSED, Ordering::AcqRel, Ordering::Acquire)
                .is_ok())
        .then_some(())
    });
    if closed.is_none() {
        return false;
    }
    let start = Instant::now();
    let mut spins = 0u32;
    while PASSING.load(Ordering::Acquire) & !CLOSED != 0 && start.elapsed() <= WAIT {
        back_off(&mut spins);
    }
    true
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
    let closed = close_gate();
    let _ = CLOSED_HERE.try_with(|c| c.set(closed));
}

/// Let go of what the prepare step took.
fn let_go() {
    let _ = HELD.try_with(|h| {
        let mut guards = std::mem::take(&mut *h.borrow_mut());
        while let Some(g) = guards.pop() {
            drop(g);
        }
    });
}

extern "C" fn after_in_parent() {
    if CLOSED_HERE.try_with(|c| c.replace(false)) == Ok(true) {
        PASSING.fetch_and(!CLOSED, Ordering::AcqRel);
    }
    let_go();
}

extern "C" fn after_in_child() {
    // The child's only thread is this one: no passage is under way in it
    // (the count may hold one the prepare step stopped waiting for).
    let _ = CLOSED_HERE.try_with(|c| c.set(false));
    PASSING.store(0, Ordering::Release);
    let_go();
}

/// Register the handlers with the C library once.
fn register() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: registers plain `extern "C"` functions with no arguments.
        unsafe { libc::pthread_atfork(Some(prepare), Some(after_in_parent), Some(after_in_child)) };
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

    /// A child forked while the crate's threads start and end in another
    /// thread of its parent starts threads of its own (without the gate, the
    /// standard library's start-of-thread lock, held in the parent at the
    /// fork, stayed held in some children and their first thread hung).
    #[test]
    fn a_child_forked_while_the_crates_threads_start_and_end_starts_its_own() {
        use std::sync::atomic::AtomicBool;
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let churn: Vec<_> = (0..2)
            .map(|_| {
                let s = stop.clone();
                std::thread::spawn(move || {
                    let mut started = 0u64;
                    while !s.load(Ordering::Acquire) {
                        let hs: Vec<_> = (0..4)
                            .map(|_| spawn(std::thread::Builder::new(), || ()).unwrap())
                            .collect();
                        for h in hs {
                            h.join().unwrap();
                        }
                        started += 4;
                    }
                    started
                })
            })
            .collect();
        for i in 0..400 {
            let code =
                in_child(
                    || match spawn(std::thread::Builder::new(), || 7).map(|h| h.join()) {
                        Ok(Ok(7)) => 0,
                        _ => 1,
                    },
                );
            assert_eq!(code, Some(0), "child {i} could not run a thread");
        }
        stop.store(true, Ordering::Release);
        for c in churn {
            assert!(c.join().unwrap() > 0);
        }
        assert_eq!(PASSING.load(Ordering::Acquire), 0);
    }
}
