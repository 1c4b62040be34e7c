//! Belady's optimal replacement (MIN): on a miss with a full cache, evict
//! the resident page whose next access is farthest in the future (never
//! accessed again counts as infinitely far). Every miss is inserted (no
//! bypass), as in libCacheSim's `Belady`.
//!
//! The next access of every request is computed once, backwards; resident
//! pages sit in a max-heap keyed by their next access, with stale entries
//! (of pages accessed again since) skipped when popped and the heap rebuilt
//! from the resident pages when it grows past three times the cache (or
//! three times the pages there are, when the cache could hold them all).

use std::collections::BinaryHeap;

/// The position of the next access of `pages[i]`, for every `i`
/// (`u64::MAX` when there is none).
pub(crate) fn next_uses(pages: &[u32], universe: usize) -> Vec<u64> {
    let mut last = vec![u64::MAX; universe];
    let mut next = vec![u64::MAX; pages.len()];
    for (i, &p) in pages.iter().enumerate().rev() {
        next[i] = last[p as usize];
        last[p as usize] = i as u64;
    }
    next
}

#[derive(Debug)]
pub(crate) struct Opt {
    cap: usize,
    /// The heap is rebuilt when it grows past this many entries: three per
    /// page the cache can hold (no more than the pages there are), plus 64.
    rebuild_at: usize,
    resident: usize,
    /// The next access of each resident page; `None` when not resident.
    next_of: Vec<Option<u64>>,
    heap: BinaryHeap<(u64, u32)>,
}

impl Opt {
    pub(crate) fn new(cap: usize, universe: usize) -> Opt {
        Opt {
            cap,
            rebuild_at: cap.min(universe).saturating_mul(3).saturating_add(64),
            resident: 0,
            next_of: vec![None; universe],
            heap: BinaryHeap::with_capacity(cap.min(universe) + 1),
        }
    }

    /// Accesses `x`, whose next access after this one is at `next`.
    #[inline]
    pub(crate) fn access(&mut self, x: u32, next: u64) -> bool {
        let hit = self.next_of[x as usize].is_some();
        if !hit && self.resident >= self.cap {
            loop {
                let (n, v) = self.heap.pop().expect("a full cache has pages in the heap");
                if self.next_of[v as usize] == Some(n) {
                    self.next_of[v as usize] = None;
                    self.resident -= 1;
                    break;
                }
            }
        }
        if !hit {
            self.resident += 1;
        }
        self.next_of[x as usize] = Some(next);
        self.heap.push((next, x));
        if self.heap.len() > self.rebuild_at {
            let live: Vec<(u64, u32)> = self
                .heap
                .drain()
                .filter(|&(n, v)| self.next_of[v as usize] == Some(n))
                .collect();
            self.heap = BinaryHeap::from(live);
        }
        hit
    }
}
