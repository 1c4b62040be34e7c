//! A bounded single-producer single-consumer ring: the only memory an
//! application thread and a partition's worker share. One thread pushes, one
//! pops; each index is written by one side only and read by the other, on a
//! cache line of its own, so a push and a pop each move at most two lines
//! between cores (the index the other side wrote, and the slot).
//!
//! Written once over the cache's synchronisation [`Model`], so that the model
//! check runs this code.

use std::cell::UnsafeCell;
use std::mem::MaybeUninit;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};

use crate::cache::sync::{Model, Os, Word};

/// A word alone on its cache lines (two, for adjacent-line prefetch).
#[repr(align(128))]
struct Line<W>(W);

/// See the module's comment.
pub(crate) struct Ring<T, M: Model = Os> {
    /// The next slot to pop: written by the consumer only.
    head: Line<M::W>,
    /// The next slot to push: written by the producer only.
    tail: Line<M::W>,
    slots: Box<[UnsafeCell<MaybeUninit<T>>]>,
    mask: u32,
    /// The broken ring the model checks must catch: pushes into a full ring.
    #[cfg(test)]
    pub(crate) skip_full_check: bool,
}

// A slot is written by the producer before the `tail` store that publishes
// it (Release) and read by the consumer after the `tail` load that sees it
// (Acquire), and reused by the producer only after the `head` store (Release)
// that the consumer makes once it has moved the value out.
// SAFETY: so no slot is reached by both threads at once; values cross whole (T: Send).
unsafe impl<T: Send, M: Model> Send for Ring<T, M> {}
// SAFETY: as for Send; shared references only push (one producer) and pop
// (one consumer), as the callers promise.
unsafe impl<T: Send, M: Model> Sync for Ring<T, M> {}

impl<T, M: Model> Ring<T, M> {
    /// A ring of `capacity` slots (a power of two from 2 to 2^30).
    pub(crate) fn new(capacity: usize) -> Ring<T, M> {
        assert!(
            capacity.is_power_of_two() && (2..=1 << 30).contains(&capacity),
            "ring capacity {capacity}"
        );
        Ring {
            head: Line(M::W::new(0)),
            tail: Line(M::W::new(0)),
            slots: (0..capacity)
                .map(|_| UnsafeCell::new(MaybeUninit::uninit()))
                .collect(),
            mask: capacity as u32 - 1,
            #[cfg(test)]
            skip_full_check: false,
        }
    }

    /// Push `v` (the producer only); gives it back when the ring is full.
    #[inline]
    pub(crate) fn push(&self, v: T) -> Result<(), T> {
        #[cfg(test)]
        let check = !self.skip_full_check;
        #[cfg(not(test))]
        let check = true;
        let t = self.tail.0.load(Relaxed);
        let h = self.head.0.load(Acquire);
        if check && t.wrapping_sub(h) > self.mask {
            return Err(v);
        }
        // The consumer moved slot `t`'s last value out before the `head`
        // store seen above (or it was never used); only this producer writes.
        // SAFETY: slot `t` is free.
        unsafe { (*self.slots[(t & self.mask) as usize].get()).write(v) };
        self.tail.0.store(t.wrapping_add(1), Release);
        Ok(())
    }

    /// Pop the oldest value (the consumer only).
    #[inline]
    pub(crate) fn pop(&self) -> Option<T> {
        let h = self.head.0.load(Relaxed);
        let t = self.tail.0.load(Acquire);
        if h == t {
            return None;
        }
        // SAFETY: slot `h` was written before the `tail` store seen above and
        // is read once: `head` moves past it below.
        let v = unsafe { (*self.slots[(h & self.mask) as usize].get()).assume_init_read() };
        self.head.0.store(h.wrapping_add(1), Release);
        Some(v)
    }

    /// Whether nothing is waiting (either side; a hint for the producer).
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.head.0.load(Acquire) == self.tail.0.load(Acquire)
    }
}

impl<T, M: Model> Drop for Ring<T, M> {
    fn drop(&mut self) {
        while self.pop().is_some() {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::sync::shuttle_model::Shuttle;
    use std::sync::Arc;

    /// A producer pushes 0..n through a ring of `cap` slots, `full_check`
    /// telling which push; the consumer must see exactly 0..n in order.
    fn one_way(cap: usize, n: u64, full_check: bool) {
        let mut ring: Ring<u64, Shuttle> = Ring::new(cap);
        ring.skip_full_check = !full_check;
        let r = Arc::new(ring);
        let p = r.clone();
        let producer = shuttle::thread::spawn(move || {
            let mut i = 0;
            while i < n {
                match p.push(i) {
                    Ok(()) => i += 1,
                    Err(_) => shuttle::thread::yield_now(),
                }
            }
        });
        let mut next = 0;
        while next < n {
            match r.pop() {
                Some(v) => {
                    assert_eq!(v, next, "a value lost or repeated");
                    next += 1;
                }
                None => shuttle::thread::yield_now(),
            }
        }
        producer.join().unwrap();
        assert!(r.pop().is_none(), "a value popped twice");
    }

    #[test]
    fn shuttle_ring_delivers_each_value_once_in_order() {
        shuttle::check_random(|| one_way(2, 7, true), 3000);
        shuttle::check_pct(|| one_way(4, 9, true), 2000, 3);
    }

    /// The check above catches a ring that pushes into a full ring.
    #[test]
    #[should_panic(expected = "lost or repeated")]
    fn shuttle_catches_a_ring_without_its_full_check() {
        shuttle::check_random(|| one_way(2, 7, false), 3000);
    }

    #[test]
    fn values_left_in_a_ring_are_dropped_with_it() {
        let v = Arc::new(());
        let r: Ring<Arc<()>> = Ring::new(4);
        r.push(v.clone()).unwrap();
        r.push(v.clone()).unwrap();
        assert_eq!(Arc::strong_count(&v), 3);
        drop(r);
        assert_eq!(Arc::strong_count(&v), 1);
    }
}
