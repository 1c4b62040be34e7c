//! Keeping panics of user code (callbacks, tasks) for later: a queue that
//! runs callbacks goes on with its other requests after one panics, and
//! passes the first panic on once they are done.

use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};

/// A caught panic's payload.
pub(crate) type Payload = Box<dyn Any + Send + 'static>;

/// Drop a panic payload whose own `Drop` may panic (a `panic_any` value):
/// that second panic is caught and its payload leaked, so nothing unwinds
/// out of the caller, which may be a destructor or hold requests in flight.
pub(crate) fn drop_payload(p: Payload) {
    if let Err(again) = catch_unwind(AssertUnwindSafe(move || drop(p))) {
        std::mem::forget(again);
    }
}

/// Keep `p` if it is the first panic caught, else drop it safely.
pub(crate) fn keep_first(first: &mut Option<Payload>, p: Payload) {
    if first.is_none() {
        *first = Some(p);
    } else {
        drop_payload(p);
    }
}

/// Pass the kept panic on, unless this thread is already unwinding (a
/// second unwind out of a destructor would abort the process): the payload
/// is then dropped safely.
pub(crate) fn resume_first(first: Option<Payload>) {
    if let Some(p) = first {
        if std::thread::panicking() {
            drop_payload(p);
        } else {
            resume_unwind(p);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A payload whose drop panics.
    struct Bomb;
    impl Drop for Bomb {
        fn drop(&mut self) {
            panic!("the payload's drop panics");
        }
    }

    #[test]
    fn payloads_whose_drop_panics_are_dropped_without_unwinding() {
        let p = catch_unwind(|| std::panic::panic_any(Bomb)).unwrap_err();
        drop_payload(p);
        let mut first = None;
        keep_first(&mut first, Box::new("first"));
        let p = catch_unwind(|| std::panic::panic_any(Bomb)).unwrap_err();
        keep_first(&mut first, p);
        let got = catch_unwind(AssertUnwindSafe(|| resume_first(first))).unwrap_err();
        assert_eq!(got.downcast_ref::<&str>(), Some(&"first"));
    }
}
