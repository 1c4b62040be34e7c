//! The synchronisation seam of the page cache.
//!
//! The set protocol is written once, generic over a [`Model`] that supplies its
//! atomic word and its way to wait. The cache runs on [`Os`] (std atomics and
//! Linux futexes); the model-checking tests run the same code on a Shuttle
//! model, whose scheduler controls every atomic operation and explores thread
//! interleavings.

use std::sync::atomic::{AtomicU32, Ordering};

/// Seals [`Word`] and [`Model`]: the set protocol's safety rests on their
/// being real atomics and real waits (a `compare_exchange` that lied would
/// give two writers one frame), so only this crate implements them.
mod sealed {
    pub trait Sealed {}
}

/// A 32-bit atomic word, as the set protocol uses it (implemented in this
/// crate only).
pub trait Word: sealed::Sealed + Send + Sync + 'static {
    /// A word holding `v`.
    fn new(v: u32) -> Self;
    /// As `AtomicU32::load`.
    fn load(&self, o: Ordering) -> u32;
    /// As `AtomicU32::store`.
    fn store(&self, v: u32, o: Ordering);
    /// As `AtomicU32::swap`.
    fn swap(&self, v: u32, o: Ordering) -> u32;
    /// As `AtomicU32::compare_exchange`.
    fn compare_exchange(&self, cur: u32, new: u32, ok: Ordering, err: Ordering)
    -> Result<u32, u32>;
    /// As `AtomicU32::fetch_add`.
    fn fetch_add(&self, v: u32, o: Ordering) -> u32;
    /// As `AtomicU32::fetch_sub`.
    fn fetch_sub(&self, v: u32, o: Ordering) -> u32;
    /// As `AtomicU32::fetch_or`.
    fn fetch_or(&self, v: u32, o: Ordering) -> u32;
    /// As `AtomicU32::fetch_and`.
    fn fetch_and(&self, v: u32, o: Ordering) -> u32;
}

/// Atomics plus blocking: what the set protocol needs from the platform
/// (implemented in this crate only).
///
/// ```compile_fail
/// // A model of one's own would let a caller break the protocol: refused.
/// use std::sync::atomic::AtomicU32;
/// struct Mine;
/// impl setcache::cache::sync::Model for Mine {
///     type W = AtomicU32;
///     fn spin() {}
///     fn wait(_: &AtomicU32, _: u32) {}
///     fn wake_all(_: &AtomicU32) {}
///     fn wake_one(_: &AtomicU32) {}
///     fn backoff(_: u64) {}
/// }
/// ```
///
/// ```
/// // The same with the crate's own model compiles: the test above fails
/// // for the seal alone.
/// fn takes<M: setcache::cache::sync::Model>() {}
/// takes::<setcache::cache::sync::Os>();
/// ```
pub trait Model: sealed::Sealed + Send + Sync + 'static {
    /// The atomic word.
    type W: Word;
    /// A short pause inside a spin loop.
    fn spin();
    /// Block while `w` holds `expected` (may return spuriously).
    fn wait(w: &Self::W, expected: u32);
    /// As [`Model::wait`], for at most `timeout`.
    fn wait_for(w: &Self::W, expected: u32, _timeout: std::time::Duration) {
        Self::wait(w, expected);
    }
    /// Wake every thread blocked in [`Model::wait`] on `w`.
    fn wake_all(w: &Self::W);
    /// Wake one thread blocked in [`Model::wait`] on `w`.
    fn wake_one(w: &Self::W);
    /// Back off for roughly `micros` microseconds (a retry loop).
    fn backoff(micros: u64);
    /// The time now, for waits bounded by a deadline. A model checker's model
    /// stops the clock: its waits end by the other threads' steps alone, so
    /// that what it explores does not hang on how fast the real machine runs.
    #[inline]
    fn now() -> std::time::Instant {
        std::time::Instant::now()
    }
    /// A point where a model checker may run another thread: marks steps
    /// that touch no model atomic but race with other threads (the
    /// optimistic read's copy). Nothing on the real platform.
    #[inline]
    fn preempt() {}
    /// Whether plain copies that race other threads (the optimistic read's)
    /// are made in two steps with a [`Model::preempt`] between them, so that
    /// a model checker can put another thread's stores in the middle of one.
    /// False on the real platform, where the copy is one call.
    const SPLIT_COPIES: bool = false;
}

/// Implement [`Word`] for an atomic type with std's `AtomicU32` methods.
macro_rules! word_impl {
    ($t:ty) => {
        impl $crate::cache::sync::sealed::Sealed for $t {}
        impl Word for $t {
            #[inline]
            fn new(v: u32) -> Self {
                <$t>::new(v)
            }
            #[inline]
            fn load(&self, o: Ordering) -> u32 {
                <$t>::load(self, o)
            }
            #[inline]
            fn store(&self, v: u32, o: Ordering) {
                <$t>::store(self, v, o)
            }
            #[inline]
            fn swap(&self, v: u32, o: Ordering) -> u32 {
                <$t>::swap(self, v, o)
            }
            #[inline]
            fn compare_exchange(
                &self,
                cur: u32,
                new: u32,
                ok: Ordering,
                err: Ordering,
            ) -> Result<u32, u32> {
                <$t>::compare_exchange(self, cur, new, ok, err)
            }
            #[inline]
            fn fetch_add(&self, v: u32, o: Ordering) -> u32 {
                <$t>::fetch_add(self, v, o)
            }
            #[inline]
            fn fetch_sub(&self, v: u32, o: Ordering) -> u32 {
                <$t>::fetch_sub(self, v, o)
            }
            #[inline]
            fn fetch_or(&self, v: u32, o: Ordering) -> u32 {
                <$t>::fetch_or(self, v, o)
            }
            #[inline]
            fn fetch_and(&self, v: u32, o: Ordering) -> u32 {
                <$t>::fetch_and(self, v, o)
            }
        }
    };
}

word_impl!(AtomicU32);

/// The real platform: std atomics, futex waits.
#[derive(Debug)]
pub struct Os;

impl sealed::Sealed for Os {}

impl Model for Os {
    type W = AtomicU32;

    #[inline]
    fn spin() {
        std::hint::spin_loop();
    }

    fn wait(w: &AtomicU32, expected: u32) {
        futex_wait(w, expected, None);
    }

    fn wait_for(w: &AtomicU32, expected: u32, timeout: std::time::Duration) {
        futex_wait(w, expected, Some(timeout));
    }

    fn wake_all(w: &AtomicU32) {
        // SAFETY: FUTEX_WAKE only uses the address as a key.
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                w.as_ptr(),
                libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
                i32::MAX,
            );
        }
    }

    fn wake_one(w: &AtomicU32) {
        // SAFETY: as in `wake_all`.
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                w.as_ptr(),
                libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
                1,
            );
        }
    }

    fn backoff(micros: u64) {
        if micros == 0 {
            std::thread::yield_now();
        } else {
            std::thread::sleep(std::time::Duration::from_micros(micros));
        }
    }
}

/// Sleep while `w` holds `expected`, for at most `timeout` if given (may
/// return early, as a futex wait does).
fn futex_wait(w: &AtomicU32, expected: u32, timeout: Option<std::time::Duration>) {
    let ts = timeout.map(|t| libc::timespec {
        tv_sec: t.as_secs().min(i32::MAX as u64) as libc::time_t,
        tv_nsec: t.subsec_nanos() as libc::c_long,
    });
    let tsp = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // FUTEX_WAIT sleeps only while the word equals `expected`; a null
    // timeout means no deadline.
    // SAFETY: the word is a live, aligned AtomicU32; `tsp` is null or points at `ts`, alive here.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            w.as_ptr(),
            libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
            expected,
            tsp,
        );
    }
}

/// The Shuttle model: every operation is a scheduling point of the checker.
#[cfg(test)]
pub(crate) mod shuttle_model {
    use super::{Model, Word};
    use shuttle::sync::atomic::AtomicU32;
    use std::sync::atomic::Ordering;

    word_impl!(AtomicU32);

    /// Blocking becomes yielding to the checker's scheduler.
    #[derive(Debug)]
    pub(crate) struct Shuttle;

    impl super::sealed::Sealed for Shuttle {}

    impl Model for Shuttle {
        type W = AtomicU32;
        const SPLIT_COPIES: bool = true;
        fn spin() {
            shuttle::thread::yield_now();
        }
        fn wait(w: &AtomicU32, expected: u32) {
            if w.load(Ordering::SeqCst) == expected {
                shuttle::thread::yield_now();
            }
        }
        fn wake_all(_: &AtomicU32) {}
        fn wake_one(_: &AtomicU32) {}
        fn backoff(_: u64) {
            shuttle::thread::yield_now();
        }
        fn now() -> std::time::Instant {
            static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
            *START.get_or_init(std::time::Instant::now)
        }
        fn preempt() {
            // Several chances in a row, so that another thread can get
            // through a whole eviction and fill of the slot meanwhile.
            for _ in 0..8 {
                shuttle::thread::yield_now();
            }
        }
    }
}
