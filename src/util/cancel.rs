//! Thread cancellation around the crate's calls, for the libraries that put
//! the crate under C programs (the C interface, the preload library).
//!
//! The crate's own blocking calls (a doorbell's `write`, a watch's `poll`, a
//! probe's `pwrite`, a sleep) are cancellation points of the C library. A
//! `pthread_cancel` of a program's thread acted on inside one would unwind
//! through frames that cannot unwind, and the process would abort; were the
//! unwind let through, it would leave the store's locks and claims behind
//! (a frame claimed for a fill, a page held for writing), which other threads
//! would then wait for. While an [`Off`] guard lives, cancellation is off on
//! its thread (guards nest: the outermost one turns it back to what it was);
//! a cancel sent meanwhile is acted on at the thread's next cancellation
//! point outside the crate, or at [`point`].

use std::cell::Cell;
use std::marker::PhantomData;

thread_local! {
    /// Guards alive on this thread, and the state the first one found.
    static DEPTH: Cell<(u32, libc::c_int)> = const { Cell::new((0, 0)) };
}

/// Cancellation held off on this thread while this lives ([`off`]).
#[must_use = "cancellation is back on when the guard drops"]
pub struct Off {
    /// Held off on this thread only.
    _here: PhantomData<*const ()>,
    /// Whether this guard counted (not during the thread's end).
    counted: bool,
}

/// Hold cancellation off on the calling thread until the guard drops.
pub fn off() -> Off {
    let counted = DEPTH
        .try_with(|d| {
            let (n, old) = d.get();
            if n == 0 {
                let mut was = 0;
                // SAFETY: sets this thread's state; `was` is a valid out-pointer.
                unsafe { pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &mut was) };
                d.set((1, was));
            } else {
                d.set((n + 1, old));
            }
        })
        .is_ok();
    Off {
        _here: PhantomData,
        counted,
    }
}

impl Drop for Off {
    fn drop(&mut self) {
        if !self.counted {
            return;
        }
        let _ = DEPTH.try_with(|d| {
            let (n, old) = d.get();
            if n <= 1 {
                d.set((0, 0));
                // SAFETY: sets this thread's state back to what the first
                // guard found.
                unsafe { pthread_setcancelstate(old, std::ptr::null_mut()) };
            } else {
                d.set((n - 1, old));
            }
        });
    }
}

unsafe extern "C-unwind" {
    fn pthread_testcancel();
}

unsafe extern "C" {
    fn pthread_setcancelstate(state: libc::c_int, old: *mut libc::c_int) -> libc::c_int;
}

/// The C library's value for cancellation off (Linux, glibc and musl).
const PTHREAD_CANCEL_DISABLE: libc::c_int = 1;

/// A cancellation point: a cancel sent to this thread (with cancellation
/// on) is acted on here, by unwinding the thread through the C library;
/// while an [`Off`] guard lives it does nothing (cancellation is off). Call
/// it only where nothing is left to drop in any Rust frame between here and
/// the C caller, from a function of the `"C-unwind"` ABI: the stand-in for a
/// function that is a cancellation point, at its end.
pub fn point() {
    // SAFETY: no arguments; the unwind it may start is the caller's to let
    // through (see above).
    unsafe { pthread_testcancel() };
}
