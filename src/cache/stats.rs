//! Per-thread statistics counters, summed when read.
//!
//! Each thread that touches a cache gets its own block of counters (padded to
//! two cache lines) the first time; only that thread writes it, with a plain
//! load and store, so counting a hit costs no shared atomic operation.

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// What the cache counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stat {
    Hits = 0,
    Misses,
    Evictions,
    DirtyEvictions,
    GhostHits,
    CoalescedWaits,
    Fills,
    FillErrors,
    Readahead,
    ReadaheadUsed,
    Passed,
}

const N: usize = 11;

/// A snapshot of a cache's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Lookups that found the page valid in the cache.
    pub hits: u64,
    /// Lookups that found the page absent and claimed a frame to fill it.
    pub misses: u64,
    /// Clean pages evicted to make room (including pages dropped by a shrink).
    pub evictions: u64,
    /// Dirty pages handed back to be written before their frame could be reused.
    pub dirty_evictions: u64,
    /// Misses on pages the policy still remembered in a ghost entry.
    pub ghost_hits: u64,
    /// Lookups that found the page being filled and waited for that one fill.
    pub coalesced_waits: u64,
    /// Fills completed successfully.
    pub fills: u64,
    /// Fills that failed (the page was dropped and the error returned).
    pub fill_errors: u64,
    /// Pages claimed by readahead (not counted as misses).
    pub readahead: u64,
    /// Pages read ahead that a sequential reader then read.
    pub readahead_used: u64,
    /// Misses served without a slot, the policy not admitting the page
    /// (counted in `misses` too).
    pub passed: u64,
}

impl CacheStats {
    /// Hits over hits plus misses (0 when there was no lookup).
    pub fn hit_ratio(&self) -> f64 {
        let all = self.hits + self.misses;
        if all == 0 {
            0.0
        } else {
            self.hits as f64 / all as f64
        }
    }
}

#[repr(align(128))]
#[derive(Default)]
struct Block {
    v: [AtomicU64; N],
}

/// The counters of one cache.
pub(crate) struct StatsHub {
    id: u64,
    blocks: Mutex<Blocks>,
    /// Events of threads whose locals are gone (exiting, or running the
    /// process's exit handlers), counted with atomic adds.
    orphan: Block,
}

/// The blocks of the threads that touched a cache. A block whose thread
/// has ended (the list holds its only handle) is folded into the orphan
/// block and let go, when the list has doubled since the last fold: a
/// program that starts many short threads keeps a block per live thread,
/// not one per thread it ever ran.
struct Blocks {
    all: Vec<Arc<Block>>,
    /// The length at which the next fold is tried.
    fold_at: usize,
}

/// The fewest blocks a fold is tried at.
const FOLD_FROM: usize = 64;

/// A thread's blocks, by cache id. Its drop (at the thread's end) forgets
/// the block in `LAST` first, so that no later count of the ending thread
/// writes through it to a block a fold has let go.
struct Locals(Vec<(u64, Arc<Block>)>);

impl Drop for Locals {
    fn drop(&mut self) {
        LAST.with(|c| c.set((0, std::ptr::null())));
    }
}

thread_local! {
    /// This thread's blocks, by cache id.
    static LOCAL: RefCell<Locals> = const { RefCell::new(Locals(Vec::new())) };
    /// The block this thread used last, and its cache's id: a hot path that
    /// counts into one cache finds its block without the lookup above.
    static LAST: Cell<(u64, *const Block)> = const { Cell::new((0, std::ptr::null())) };
}

impl StatsHub {
    pub(crate) fn new() -> StatsHub {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        StatsHub {
            id: NEXT.fetch_add(1, Ordering::Relaxed),
            blocks: Mutex::new(Blocks {
                all: Vec::new(),
                fold_at: FOLD_FROM,
            }),
            orphan: Block::default(),
        }
    }

    /// Count one event on the calling thread's block.
    #[inline]
    pub(crate) fn bump(&self, s: Stat) {
        self.add(s, 1);
    }

    #[inline]
    pub(crate) fn add(&self, s: Stat, n: u64) {
        let (id, b) = LAST.with(Cell::get);
        if id == self.id {
            // SAFETY: `LAST` names a block of a cache with this id; ids are never
            // reused, and a block stays alive while its cache (which holds it)
            // does, which it does while `self` is borrowed.
            let c = unsafe { &(*b).v[s as usize] };
            c.store(c.load(Ordering::Relaxed) + n, Ordering::Relaxed);
            return;
        }
        self.add_slow(s, n);
    }

    #[cold]
    fn add_slow(&self, s: Stat, n: u64) {
        let counted = LOCAL.try_with(|l| {
            let l = &mut l.borrow_mut().0;
            let b = match l.iter().position(|(id, _)| *id == self.id) {
                Some(p) => &l[p].1,
                None => {
                    let b = self.register(l);
                    &l[b].1
                }
            };
            LAST.with(|c| c.set((self.id, Arc::as_ptr(b))));
            let c = &b.v[s as usize];
            // Only this thread writes this block: no read-modify-write needed.
            c.store(c.load(Ordering::Relaxed) + n, Ordering::Relaxed);
        });
        if counted.is_err() {
            // The thread's locals are gone (it is exiting, or running the
            // process's exit handlers): the event goes to the shared block.
            self.orphan.v[s as usize].fetch_add(n, Ordering::Relaxed);
        }
    }

    #[cold]
    fn register(&self, l: &mut Vec<(u64, Arc<Block>)>) -> usize {
        // Forget blocks of caches that are gone (only this thread holds them).
        l.retain(|(_, b)| Arc::strong_count(b) > 1);
        let b = Arc::new(Block::default());
        let mut blocks = self.blocks.lock().unwrap_or_else(|p| p.into_inner());
        if blocks.all.len() >= blocks.fold_at {
            self.fold(&mut blocks.all);
            blocks.fold_at = (blocks.all.len() * 2).max(FOLD_FROM);
        }
        blocks.all.push(b.clone());
        drop(blocks);
        l.push((self.id, b));
        l.len() - 1
    }

    /// Fold the blocks of ended threads into the orphan block (under the
    /// list's lock, so a snapshot sees each count once).
    fn fold(&self, all: &mut Vec<Arc<Block>>) {
        all.retain(|b| {
            if Arc::strong_count(b) > 1 {
                return true;
            }
            // The thread's last writes happened before its handle's drop.
            std::sync::atomic::fence(Ordering::Acquire);
            for (o, c) in self.orphan.v.iter().zip(b.v.iter()) {
                o.fetch_add(c.load(Ordering::Relaxed), Ordering::Relaxed);
            }
            false
        });
    }

    /// How many threads' blocks the cache keeps.
    #[cfg(test)]
    fn blocks_kept(&self) -> usize {
        self.blocks.lock().unwrap().all.len()
    }

    pub(crate) fn snapshot(&self) -> CacheStats {
        let mut sum = [0u64; N];
        for (s, c) in sum.iter_mut().zip(self.orphan.v.iter()) {
            *s += c.load(Ordering::Relaxed);
        }
        for b in self
            .blocks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .all
            .iter()
        {
            for (s, c) in sum.iter_mut().zip(b.v.iter()) {
                *s += c.load(Ordering::Relaxed);
            }
        }
        CacheStats {
            hits: sum[Stat::Hits as usize],
            misses: sum[Stat::Misses as usize],
            evictions: sum[Stat::Evictions as usize],
            dirty_evictions: sum[Stat::DirtyEvictions as usize],
            ghost_hits: sum[Stat::GhostHits as usize],
            coalesced_waits: sum[Stat::CoalescedWaits as usize],
            fills: sum[Stat::Fills as usize],
            fill_errors: sum[Stat::FillErrors as usize],
            readahead: sum[Stat::Readahead as usize],
            readahead_used: sum[Stat::ReadaheadUsed as usize],
            passed: sum[Stat::Passed as usize],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Many short threads that each count into one cache leave it a block
    /// per live thread, not one per thread it ever ran, and no count is
    /// lost in the fold.
    #[test]
    fn ended_threads_blocks_are_folded_and_their_counts_kept() {
        let hub = Arc::new(StatsHub::new());
        let threads = 1000u64;
        for t in 0..threads {
            let h = hub.clone();
            std::thread::spawn(move || {
                h.bump(Stat::Hits);
                h.add(Stat::Misses, t);
            })
            .join()
            .unwrap();
        }
        hub.bump(Stat::Hits);
        let s = hub.snapshot();
        assert_eq!(s.hits, threads + 1);
        assert_eq!(s.misses, threads * (threads - 1) / 2);
        assert!(
            hub.blocks_kept() <= 2 * FOLD_FROM,
            "{} blocks kept for one live thread",
            hub.blocks_kept()
        );
    }
}
