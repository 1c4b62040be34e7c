//! Counters spread over cache lines, so that threads counting the same
//! events (every device operation that ends, on whichever thread reaps it)
//! do not pass one line between their cores.
//!
//! A thread is given a shard number the first time it counts (round robin
//! over [`SHARDS`]) and adds to that shard's line; reading sums every
//! shard. Threads beyond [`SHARDS`] share shards, so the adds stay atomic,
//! but two threads meet on a line only once there are more of them than
//! shards. A sum taken while others add is a moment's approximation, as a
//! single counter read with `Relaxed` would be.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Shards of each counter set: as many as the threads of a large machine.
pub(crate) const SHARDS: usize = 64;

/// One shard: `N` counters on lines of their own.
#[repr(align(128))]
struct Shard<const N: usize> {
    v: [AtomicU64; N],
}

/// `N` counters, each spread over [`SHARDS`] lines.
pub(crate) struct Spread<const N: usize> {
    shards: Box<[Shard<N>]>,
}

thread_local! {
    /// This thread's shard number (`usize::MAX`: not given yet).
    static MINE: std::cell::Cell<usize> = const { std::cell::Cell::new(usize::MAX) };
}

/// The calling thread's shard number.
#[inline]
fn mine() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    // A thread whose locals are gone (it is exiting) counts on shard 0.
    MINE.try_with(|m| {
        let s = m.get();
        if s != usize::MAX {
            return s;
        }
        let s = NEXT.fetch_add(1, Ordering::Relaxed) % SHARDS;
        m.set(s);
        s
    })
    .unwrap_or(0)
}

impl<const N: usize> Default for Spread<N> {
    fn default() -> Self {
        Spread {
            shards: (0..SHARDS)
                .map(|_| Shard {
                    v: std::array::from_fn(|_| AtomicU64::new(0)),
                })
                .collect(),
        }
    }
}

impl<const N: usize> std::fmt::Debug for Spread<N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries((0..N).map(|i| self.sum(i))).finish()
    }
}

impl<const N: usize> Spread<N> {
    /// Adds to two counters, `(i, n)` each, on the calling thread's shard
    /// (found once).
    #[inline]
    pub(crate) fn add2(&self, a: (usize, u64), b: (usize, u64)) {
        let s = &self.shards[mine()];
        s.v[a.0].fetch_add(a.1, Ordering::Relaxed);
        s.v[b.0].fetch_add(b.1, Ordering::Relaxed);
    }

    /// Adds `n` to counter `i` on the calling thread's shard.
    #[inline]
    pub(crate) fn add(&self, i: usize, n: u64) {
        self.shards[mine()].v[i].fetch_add(n, Ordering::Relaxed);
    }

    /// Counter `i`: the sum of its shards.
    pub(crate) fn sum(&self, i: usize) -> u64 {
        self.shards
            .iter()
            .map(|s| s.v[i].load(Ordering::Relaxed))
            .fold(0u64, u64::wrapping_add)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn adds_from_more_threads_than_shards_all_count() {
        let c: Arc<Spread<2>> = Arc::new(Spread::default());
        let threads = SHARDS + 7;
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let c = c.clone();
                std::thread::spawn(move || {
                    for _ in 0..1000 {
                        c.add2((0, 1), (1, t as u64));
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().expect("a counting thread");
        }
        assert_eq!(c.sum(0), threads as u64 * 1000);
        let want: u64 = (0..threads as u64).map(|t| t * 1000).sum();
        assert_eq!(c.sum(1), want);
    }

    #[test]
    fn a_thread_keeps_its_shard_and_shards_are_lines_apart() {
        let (a, b) = std::thread::spawn(|| (mine(), mine()))
            .join()
            .expect("a thread");
        assert_eq!(a, b);
        assert!(a < SHARDS);
        // Threads are spread over shards (all on one would be one line
        // bouncing between cores): eight threads, at least two shards, even
        // with other tests' threads taking shards meanwhile.
        let mut seen: Vec<usize> = (0..8)
            .map(|_| std::thread::spawn(mine).join().expect("a thread"))
            .collect();
        seen.sort_unstable();
        seen.dedup();
        assert!(seen.len() >= 2, "{seen:?}");
        assert_eq!(std::mem::align_of::<Shard<4>>(), 128);
        let c: Spread<4> = Spread::default();
        let p0 = &c.shards[0] as *const Shard<4> as usize;
        let p1 = &c.shards[1] as *const Shard<4> as usize;
        assert!(p1 - p0 >= 128);
    }
}
