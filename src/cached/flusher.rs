//! The background flusher of a [`CachedStore`](crate::CachedStore).
//!
//! Writers tell the flusher about sets that hold many dirty pages: when a write
//! leaves `dirty_at` or more dirty pages in a set, the cache runs a hook that
//! queues the set (once, until the flusher takes it). The flusher thread
//! takes queued sets and, for each, writes back the dirty pages its policy
//! would evict soonest, until the set is down to half the threshold, so that
//! evictions find clean pages and requesters rarely write a victim themselves.
//!
//! The due pages of a batch are written in file order, region by region: each
//! brings the other dirty, idle pages of its 256 KiB region of the file
//! ([`REGION_BYTES`]), due or not, so that the device gets writes that land
//! close together. Each page to write is extended into a run with its dirty neighbours in the
//! file (pages `p+1, p+2, ...` and `p-1, ...` that are cached, dirty and idle,
//! due or not), up to `max_merge` pages, and the run goes to the devices as one
//! write, straight from the frames (a vectored write: the frames of a run are
//! in different sets, so they are not contiguous). A requester that must write
//! a dirty victim itself extends it the same way ([`with_neighbours`]) and
//! writes the rest of the victim's region too. Up to
//! `depth` writes are in flight, through the flusher's own
//! asynchronous queue. A failed write leaves its pages dirty and is remembered
//! for the file's next `sync`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::cache::PageCache;
use crate::cached::shared::Shared;
use crate::cached::writeback::{REGION_BYTES, Writer, dirty_in_region};
use crate::error::{Error, Result};

/// How the flusher of a cached store works.
#[derive(Debug, Clone)]
pub struct FlushOptions {
    /// Dirty pages in one set that make the set due; `None` means half the
    /// set's pages.
    pub dirty_at: Option<usize>,
    /// Writes in flight at once.
    pub depth: usize,
    /// Most pages merged into one write (fewer if they would pass
    /// [`MAX_REQUEST`](crate::MAX_REQUEST) bytes, what one request moves).
    pub max_merge: usize,
}

impl Default for FlushOptions {
    fn default() -> Self {
        FlushOptions {
            dirty_at: None,
            depth: 64,
            max_merge: 32,
        }
    }
}

/// What the flusher of a cached store has done so far, from
/// [`CachedStore::flusher_counts`](crate::CachedStore::flusher_counts).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FlusherCounts {
    /// Pages written back (not those of a write that failed, nor those that
    /// an fsync failed since left dirty).
    pub pages: u64,
    /// Device writes issued, failed ones too: fewer than `pages` when
    /// neighbouring dirty pages were merged into one write.
    pub writes: u64,
}

struct State {
    due: Mutex<Vec<usize>>,
    cv: Condvar,
    stop: AtomicBool,
    pages: AtomicU64,
    writes: AtomicU64,
}

pub(crate) struct Flusher {
    state: Arc<State>,
    thread: Option<JoinHandle<()>>,
}

impl Flusher {
    pub(crate) fn start(shared: Arc<Shared>, opts: FlushOptions) -> Result<Flusher> {
        let assoc = shared.cache.assoc();
        let at = opts.dirty_at.unwrap_or(assoc / 2).clamp(1, assoc);
        if opts.depth == 0 || opts.max_merge == 0 {
            return Err(Error::InvalidArgument(
                "flusher depth and max_merge must be at least 1".to_string(),
            ));
        }
        let state = Arc::new(State {
            due: Mutex::new(Vec::new()),
            cv: Condvar::new(),
            stop: AtomicBool::new(false),
            pages: AtomicU64::new(0),
            writes: AtomicU64::new(0),
        });
        let st = state.clone();
        // The hook runs on a writer's thread, under a set lock (or after a
        // store into a pinned frame, without one): queue and wake.
        let installed = shared.cache.set_flush_hook(at, move |set| {
            st.due.lock().unwrap_or_else(|p| p.into_inner()).push(set);
            st.cv.notify_one();
        });
        if !installed {
            return Err(Error::InvalidArgument(
                "the cache already has a flusher".to_string(),
            ));
        }
        let st = state.clone();
        let low = at / 2;
        let thread = crate::util::fork_locks::spawn(
            std::thread::Builder::new().name("setcache-flush".to_string()),
            move || run(&shared, &st, low, opts),
        )
        .map_err(|e| Error::os_call("cannot start the flusher thread", e))?;
        Ok(Flusher {
            state,
            thread: Some(thread),
        })
    }

    pub(crate) fn counts(&self) -> FlusherCounts {
        FlusherCounts {
            pages: self.state.pages.load(Ordering::Relaxed),
            writes: self.state.writes.load(Ordering::Relaxed),
        }
    }

    pub(crate) fn stop(mut self) {
        self.state.stop.store(true, Ordering::SeqCst);
        {
            let _g = self.state.due.lock().unwrap_or_else(|p| p.into_inner());
            self.state.cv.notify_all();
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Due sets the flusher lets gather while its writes keep the device busy.
const GATHER: usize = 4096;

/// Add to `pages` the dirty pages of due set `set` that its policy would
/// evict soonest, as many as bring it down to `low` (at least one). The set's
/// flag is cleared first: a write that dirties a page of the set after the
/// clear flags and queues it again (under the set's lock, or, for a store
/// into a pinned frame, by sequentially consistent accesses), while one
/// between a look at the set and a later clear would leave it unqueued, its
/// dirty pages waiting for the set's next write or an eviction.
/// Returns whether the set holds more dirty pages than `low` that were not
/// idle (a writer inside them, or a pin) and so were not taken, or its lock
/// was held by another thread: its flag is cleared, so the flusher must look
/// at it again itself. Never waits for the set's lock: the flusher's writes
/// in flight hold their pages under write-back until it reaps them, and the
/// lock's holder may be waiting for one.
fn due_pages(
    cache: &PageCache,
    set: usize,
    low: usize,
    pages: &mut Vec<(u32, u64, usize)>,
) -> bool {
    cache.flushed(set);
    let Some((order, dirty)) = cache.try_dirty_in_eviction_order(set) else {
        return true;
    };
    #[cfg(test)]
    if let Some(between) = AFTER_LOOK.take(cache as *const PageCache as usize) {
        between();
    }
    let want = dirty.saturating_sub(low).max(1);
    let short = order.len() < dirty.saturating_sub(low);
    pages.extend(order.into_iter().take(want).map(|(f, p)| (f, p, set)));
    short
}

/// For unit tests: runs once, in [`due_pages`] of the cache at the address
/// armed, after the look at the set.
#[cfg(test)]
static AFTER_LOOK: crate::util::hook::TestHook<usize, Box<dyn FnOnce() + Send>> =
    crate::util::hook::TestHook::new();

/// How often the flusher looks again at due sets it found busy.
const LATER: Duration = Duration::from_millis(50);

fn run(shared: &Shared, st: &State, low: usize, opts: FlushOptions) {
    let cache = &shared.cache;
    let mut w = Writer::new(shared, opts.depth, opts.max_merge, true);
    w.skip_locked = true;
    let (mut pages, mut writes) = (0, 0);
    let mut report = |w: &Writer<'_>| {
        st.pages.fetch_add(w.pages - pages, Ordering::Relaxed);
        st.writes.fetch_add(w.writes - writes, Ordering::Relaxed);
        (pages, writes) = (w.pages, w.writes);
    };
    // Due sets one of whose pages was dirty but busy when the flusher came
    // (a writer inside it, or a pin): their flags are cleared, so no write
    // would queue them again before the set's next one. Looked at again
    // every `LATER` (at the next idle tick, or with the next due sets once
    // that long has passed: a steady stream of other writes never lets
    // the flusher idle).
    let mut later: Vec<usize> = Vec::new();
    let mut later_at = Instant::now();
    loop {
        // While the device is busy, let due sets gather: a larger batch,
        // sorted, gives longer ascending runs and more merged neighbours.
        while w.in_flight() > opts.depth / 2
            && st.due.lock().unwrap_or_else(|p| p.into_inner()).len() < GATHER
            && !st.stop.load(Ordering::SeqCst)
        {
            w.wait_one();
            report(&w);
        }
        let due: Vec<usize> = {
            let mut g = st.due.lock().unwrap_or_else(|p| p.into_inner());
            if !later.is_empty() && later_at.elapsed() >= LATER {
                g.append(&mut later);
                later_at = Instant::now();
            }
            while g.is_empty() && !st.stop.load(Ordering::SeqCst) && w.in_flight() == 0 {
                let (next, waited) = st
                    .cv
                    .wait_timeout(
                        g,
                        if later.is_empty() {
                            Duration::from_millis(100)
                        } else {
                            LATER
                        },
                    )
                    .unwrap_or_else(|p| p.into_inner());
                g = next;
                if waited.timed_out() && g.is_empty() {
                    g.append(&mut later);
                    later_at = Instant::now();
                }
            }
            std::mem::take(&mut *g)
        };
        if st.stop.load(Ordering::SeqCst) {
            break;
        }
        // The pages each due set's policy would evict soonest, written in
        // file order: the device sees ascending offsets, and neighbours that
        // are both due end up in one write.
        let mut pages = Vec::new();
        for set in due {
            if due_pages(cache, set, low, &mut pages) && !later.contains(&set) {
                later.push(set);
            }
        }
        pages.sort_unstable();
        // Each due page brings the other dirty pages of its region, due or
        // not, in file order (see `REGION_BYTES`).
        let r = (REGION_BYTES / cache.page_size() as u64).max(1);
        let mut swept: Option<(u32, u64)> = None;
        for &(file, page, _) in &pages {
            if swept == Some((file, page / r)) {
                continue;
            }
            swept = Some((file, page / r));
            for q in dirty_in_region(cache, file, page, u64::MAX) {
                w.write(file, q);
            }
        }
        for (file, page, set) in pages {
            // Dirty with no write-back (a writer or a pin held it, or its
            // set's lock was held), or its set's lock held now: later.
            let busy = matches!(
                cache.try_write_pending_why(file, page),
                Ok(Ok(Some(false)) | Err(_))
            );
            if busy && !later.contains(&set) {
                later.push(set);
            }
        }
        w.poll();
        if w.in_flight() > 0 && st.due.lock().unwrap_or_else(|p| p.into_inner()).is_empty() {
            w.wait_one();
        }
        report(&w);
    }
    w.drain();
    report(&w);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::{CacheOptions, PolicyKind};

    /// One set of eight 512-byte slots.
    fn one_set() -> PageCache {
        PageCache::new(CacheOptions {
            size: 8 * 512,
            max_size: Some(8 * 512),
            page_size: 512,
            assoc: 8,
            policy: PolicyKind::Lru,
            pin_wait: Duration::from_millis(200),
            partitions: 1,
        })
        .unwrap()
    }

    /// A miss's load: the page reads as zeros.
    fn zeros(_: u32, _: u64, f: &mut [u8]) -> crate::Result<()> {
        f.fill(0);
        Ok(())
    }

    /// A due set that a shrink removed before the flusher came to it gives
    /// no pages (its pages moved to its buddy, due by the move), nor those
    /// of another set in its name.
    #[test]
    fn a_due_set_a_shrink_removed_gives_no_pages() {
        // Two sets of eight 512-byte slots (grown from one, so that it may
        // shrink back), due at one dirty page.
        let cache = PageCache::new(CacheOptions {
            size: 8 * 512,
            max_size: Some(16 * 512),
            page_size: 512,
            assoc: 8,
            policy: PolicyKind::Lru,
            pin_wait: Duration::from_millis(200),
            partitions: 1,
        })
        .unwrap();
        cache.resize(16 * 512).unwrap();
        assert_eq!(cache.sets(), 2);
        let queued = Arc::new(Mutex::new(Vec::new()));
        let q = queued.clone();
        assert!(cache.set_flush_hook(1, move |s| q.lock().unwrap().push(s)));
        let mut p = 0;
        while queued.lock().unwrap().last() != Some(&1) {
            dirty_page(&cache, p);
            p += 1;
            assert!(p < 64, "no page of set 1 among {p}");
        }
        cache.resize(8 * 512).unwrap();
        assert_eq!(cache.sets(), 1);
        let mut pages = Vec::new();
        assert!(!due_pages(&cache, 1, 0, &mut pages));
        assert!(pages.is_empty(), "set 1, removed, gave {pages:?}");
    }

    fn dirty_page(cache: &PageCache, page: u64) {
        let mut g = cache
            .get_mut_with(1, page, zeros, |_, _, _| Ok(()))
            .expect("a page of the one set");
        g.fill(page as u8 + 1);
    }

    /// A due set whose lock another thread holds is left for a later look
    /// at once, not waited for: the flusher's writes in flight hold their
    /// pages under write-back until it reaps them, and the lock's holder may
    /// be waiting for one of them.
    #[test]
    fn a_due_set_whose_lock_is_held_is_left_for_later() {
        let cache = one_set();
        dirty_page(&cache, 0);
        let (held_tx, held_rx) = std::sync::mpsc::channel::<()>();
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let waited = std::thread::scope(|s| {
            let cache = &cache;
            let holder = s.spawn(move || {
                let mut waited = false;
                cache.holding_sets_of(1, 0, || {
                    held_tx.send(()).unwrap();
                    waited = go_rx.recv_timeout(Duration::from_secs(2)).is_err();
                });
                waited
            });
            held_rx.recv().unwrap();
            let mut pages = Vec::new();
            assert!(due_pages(cache, 0, 0, &mut pages), "not left for later");
            let _ = go_tx.send(());
            assert!(pages.is_empty(), "{pages:?}");
            holder.join().unwrap()
        });
        assert!(!waited, "the look waited for the set's lock");
        // Once the lock is free, the page is there to write.
        let mut pages = Vec::new();
        assert!(!due_pages(&cache, 0, 0, &mut pages));
        assert_eq!(pages, [(1, 0, 0)]);
    }

    /// A page dirtied while the flusher takes the pages of a due set, after
    /// its look at the set, flags and queues the set again: the set is not
    /// left holding as many dirty pages as make it due, and unqueued, until
    /// its next write.
    #[test]
    fn a_write_while_the_flusher_takes_a_due_set_queues_it_again() {
        // One set of eight 512-byte slots, due at two dirty pages.
        let cache = Arc::new(one_set());
        assert_eq!(cache.sets(), 1);
        let queued = Arc::new(Mutex::new(Vec::new()));
        let q = queued.clone();
        assert!(cache.set_flush_hook(2, move |s| q.lock().unwrap().push(s)));
        dirty_page(&cache, 0);
        dirty_page(&cache, 1);
        assert_eq!(
            *queued.lock().unwrap(),
            [0],
            "two dirty pages queue the set"
        );
        let c = cache.clone();
        AFTER_LOOK.arm(
            Arc::as_ptr(&cache) as usize,
            Box::new(move || dirty_page(&c, 2)),
        );
        let mut pages = Vec::new();
        assert!(!due_pages(&cache, 0, 1, &mut pages));
        let (dirty_pages, _) = cache
            .try_dirty_in_eviction_order(0)
            .expect("the set's lock free");
        let pages: Vec<(u32, u64)> = pages.into_iter().map(|(f, p, _)| (f, p)).collect();
        let left = dirty_pages.iter().filter(|p| !pages.contains(p)).count();
        assert_eq!(left, 2, "taken {pages:?} of {dirty_pages:?}");
        assert_eq!(
            *queued.lock().unwrap(),
            [0, 0],
            "the set kept {left} dirty pages the flusher did not take, and was not queued again"
        );
    }

    /// A due set whose dirty page a writer still holds when the flusher
    /// looks (the writer that made it due, say, still storing) has that page
    /// left out of the pages taken, and its flag cleared: the look says so,
    /// and the flusher looks at the set again later. Before, the set stayed
    /// unqueued, its page dirty until the set's next write or a sync.
    #[test]
    fn a_due_page_a_writer_holds_is_looked_at_again() {
        let cache = one_set();
        assert!(cache.set_flush_hook(1, |_| {}));
        let g = cache
            .get_mut_with(1, 0, zeros, |_, _, _| Ok(()))
            .expect("a page of the one set");
        let mut pages = Vec::new();
        assert!(
            due_pages(&cache, 0, 0, &mut pages),
            "a held dirty page was not reported"
        );
        assert!(pages.is_empty(), "{pages:?}");
        drop(g);
        assert!(!due_pages(&cache, 0, 0, &mut pages));
        assert_eq!(pages, [(1, 0, 0)]);
    }
}
