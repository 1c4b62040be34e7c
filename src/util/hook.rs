//! One-shot hooks for unit tests: a test arms a hook for a key (a cache's
//! address, a file's), and the first code path that reaches it with that key
//! takes it, so that tests running at once in one process never take each
//! other's.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

/// A hook holding `T` for key `K`, taken once.
pub(crate) struct TestHook<K, T> {
    /// Set while armed: an unarmed hook costs its caller one load.
    armed: AtomicBool,
    slot: Mutex<Option<(K, T)>>,
}

impl<K: PartialEq, T> TestHook<K, T> {
    pub(crate) const fn new() -> TestHook<K, T> {
        TestHook {
            armed: AtomicBool::new(false),
            slot: Mutex::new(None),
        }
    }

    /// Arm the hook: the next `take` with `key` gets `value`.
    pub(crate) fn arm(&self, key: K, value: T) {
        *self.slot.lock().unwrap_or_else(|p| p.into_inner()) = Some((key, value));
        self.armed.store(true, Ordering::Release);
    }

    /// The armed value, if armed for `key` (then the hook is disarmed).
    pub(crate) fn take(&self, key: K) -> Option<T> {
        if !self.armed.load(Ordering::Acquire) {
            return None;
        }
        let mut slot = self.slot.lock().unwrap_or_else(|p| p.into_inner());
        if !slot.as_ref().is_some_and(|(k, _)| *k == key) {
            return None;
        }
        self.armed.store(false, Ordering::Release);
        slot.take().map(|(_, v)| v)
    }
}
