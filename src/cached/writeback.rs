//! Writing dirty pages back: the toolkit that requesters writing a victim,
//! `sync` and the flusher share. A page to write is extended into a run with
//! its dirty, idle neighbours in the file ([`with_neighbours`]) and the run goes
//! to the devices as one vectored write straight from the frames ([`Writer`]);
//! the other dirty pages of its 256 KiB region follow ([`dirty_in_region`]).
//! A failed write leaves its pages dirty and is remembered for the file's next
//! `sync`. `sync` itself ([`Shared::sync_file`]) writes a file's dirty pages this
//! way, waits for the write-backs others have in flight, then fsyncs.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::cache::{PageCache, WriteBack};
use crate::cached::shared::{Asker, Durable, Entry, Guards, PageSet, Shared};
use crate::error::{Error, Result};
use crate::storage::file::{DIRECT_ALIGN, MAX_REQUEST, Mem, OpKind};
use crate::storage::queue::Queue;
use crate::util::slab::Slab;

/// Extend the write-back of one dirty page into a run: its neighbours in the
/// file (`p+1, p+2, ...` then `p-1, ...`) that are cached, dirty and idle join
/// it, due or not, up to `max` pages in all. Returns the run's first page and
/// the guards in file order. Never waits, not even for a set's lock: a busy
/// neighbour ends the run (the pages held so far are under write-back, and
/// writers of them wait until the run is written).
pub(crate) fn with_neighbours<'a>(
    cache: &'a PageCache,
    first: WriteBack<'a>,
    file_len: u64,
    max: usize,
) -> (u64, Vec<WriteBack<'a>>) {
    let (file, page) = (first.file(), first.page());
    let pages_in_file = file_len.div_ceil(cache.page_size() as u64);
    let mut after = Vec::new();
    let mut p = page + 1;
    while after.len() + 1 < max && p < pages_in_file {
        match cache.try_write_back(file, p) {
            Ok(Ok(Some(w))) => after.push(w),
            _ => break,
        }
        p += 1;
    }
    let mut before = Vec::new();
    let mut p = page;
    while before.len() + after.len() + 1 < max && p > 0 {
        p -= 1;
        match cache.try_write_back(file, p) {
            Ok(Ok(Some(w))) => before.push(w),
            _ => break,
        }
    }
    let start = page - before.len() as u64;
    let mut pages: Vec<WriteBack<'a>> = before.into_iter().rev().collect();
    pages.push(first);
    pages.extend(after);
    (start, pages)
}

/// A write in flight: its pages' write-back guards and their file.
struct Run<'a> {
    /// The file (its entry, so that finishing needs no table lookup).
    entry: Arc<Entry>,
    pages: Vec<WriteBack<'a>>,
    /// The file's fsync epoch when the write was sent.
    epoch: u64,
}

/// The pages one write may merge: at least one, and no more than fit in one
/// request (`MAX_REQUEST`, which the storage refuses past: a run that long
/// would fail every time, and each sync after it).
fn merge_limit(max_merge: usize, page_size: usize) -> usize {
    max_merge.clamp(1, (MAX_REQUEST / page_size).max(1))
}

/// Writes dirty pages back through an asynchronous queue, each page merged
/// with its dirty neighbours in the file into one write; used by the flusher
/// and by `sync`. Failures are remembered for the file's next `sync` (and the
/// pages stay dirty).
pub(crate) struct Writer<'a> {
    shared: &'a Shared,
    q: Queue,
    /// Writes finished: (run, result).
    done: Vec<(usize, Result<()>)>,
    /// Frames of the run being sent.
    frames: Vec<*mut u8>,
    runs: Slab<Run<'a>>,
    max_merge: usize,
    /// Pages written (by writes that passed, and that no fsync failed
    /// since), and device writes issued, successful or not.
    pub(crate) pages: u64,
    pub(crate) writes: u64,
    /// The first failure seen.
    pub(crate) failed: Option<Error>,
    /// A page whose set's lock another thread holds is skipped (`write`
    /// returns false) instead of waited for: the flusher's choice, which
    /// looks at such pages again later.
    pub(crate) skip_locked: bool,
}

impl<'a> Writer<'a> {
    /// A writer with `depth` writes in flight. With `register`, its rings
    /// register the cache's frames as fixed buffers (worth it for a
    /// long-lived writer such as the flusher; a `sync` skips it).
    pub(crate) fn new(
        shared: &'a Shared,
        depth: usize,
        max_merge: usize,
        register: bool,
    ) -> Writer<'a> {
        Writer::with_queue(shared, Queue::new(depth), max_merge, register)
    }

    /// A writer on queue `q` (see [`Writer::into_queue`]).
    pub(crate) fn with_queue(
        shared: &'a Shared,
        mut q: Queue,
        max_merge: usize,
        register: bool,
    ) -> Writer<'a> {
        if register {
            // SAFETY: the frames stay mapped while the cache lives, the cache outlives this writer, and it gives frames back to the kernel only through the chunk table.
            unsafe { q.register_frames(shared.cache.frame_chunks()) };
        }
        q.set_batched();
        Writer {
            shared,
            q,
            done: Vec::new(),
            frames: Vec::new(),
            runs: Slab::new(),
            max_merge: merge_limit(max_merge, shared.cache.page_size()),
            pages: 0,
            writes: 0,
            failed: None,
            skip_locked: false,
        }
    }

    /// Writes in flight.
    pub(crate) fn in_flight(&self) -> usize {
        self.q.in_flight()
    }

    /// Start writing `page` of `file` back, with its dirty neighbours, if it is
    /// cached, dirty and idle. Returns whether a write was started.
    /// The queue back, for another writer: the caller drained this one.
    pub(crate) fn into_queue(self) -> Queue {
        debug_assert_eq!(self.in_flight(), 0);
        self.q
    }

    pub(crate) fn write(&mut self, file: u32, page: u64) -> bool {
        let cache = &self.shared.cache;
        let ps = cache.page_size() as u64;
        // The runs queued before this one hold their pages under write-back
        // until they are sent: before a wait for a set's lock (whose holder
        // may be a writer waiting for one of those pages), they go.
        let first = match cache.try_write_back(file, page) {
            Ok(Ok(w)) => w,
            Ok(Err(_)) if self.skip_locked => return false,
            Ok(Err(_)) => {
                self.q.flush_now();
                cache.write_back(file, page).ok().flatten()
            }
            Err(_) => None,
        };
        let Some(first) = first else {
            return false; // clean now, busy, or not cached
        };
        let entry = match self.shared.entry(file) {
            Ok(e) if page * ps < e.file.len() => e,
            // The file is gone, or the page is past its end (a shrink is
            // dropping it): nothing to write.
            _ => {
                let _ = first.finish(Ok(()));
                return true;
            }
        };
        // The length bounds the search for neighbours; the write's length is
        // read again once every page of the run is held: a writer that grew
        // the file and stored past its old end into the last page before the
        // search took that page must find those bytes in the write, since
        // finishing it leaves the page clean.
        let search_len = entry.file.len();
        #[cfg(test)]
        if let Some(between) = SEARCH_LENGTH.take(Arc::as_ptr(&entry) as usize) {
            between();
        }
        let (start, pages) = with_neighbours(cache, first, search_len, self.max_merge);
        let file_len = entry.file.len();
        let off = start * ps;
        // A run that reaches a file ending inside a sector covers that sector
        // whole (the file takes writes up to its length rounded up to the
        // sector; past the end the frame holds zeros), as a page written
        // alone does: one vectored write, not a write per page.
        let len = file_len
            .saturating_sub(off)
            .min(pages.len() as u64 * ps)
            .next_multiple_of(DIRECT_ALIGN)
            .min(pages.len() as u64 * ps) as usize;
        self.frames.clear();
        self.frames
            .extend(pages.iter().map(|w| w.bytes().as_ptr() as *mut u8));
        let mem = if pages.len() == 1 {
            Mem::One(self.frames[0])
        } else {
            Mem::Pieces(&self.frames, ps as usize)
        };
        let slot = self.runs.insert(Run {
            entry: entry.clone(),
            pages,
            epoch: entry.fsync_epoch(),
        });
        // The write-back guards in `runs` under `slot` keep every page in its
        // frame and keep writers out until the write's tag comes back.
        // SAFETY: the frames stay valid and unwritten for the write (above).
        unsafe {
            self.q
                .submit_raw(OpKind::Write, &entry.file, off, mem, len, slot);
        }
        self.settle();
        true
    }

    /// Finish the runs whose writes completed.
    pub(crate) fn settle(&mut self) {
        self.q.take_tagged(&mut self.done);
        for (slot, r) in std::mem::take(&mut self.done) {
            let run = self.runs.remove(slot).expect("a write in flight");
            let mut kept = false;
            let r = if let Err(Error::ShortTransfer { op: "write", .. }) = &r {
                // Cut short: the file system ran out of room part way (or a
                // signal came). Write the run again page by page: it passes,
                // or fails with the error itself (ENOSPC, say) rather than a
                // count. `store_page_of` notes each page's outcome for the file.
                let again = run
                    .pages
                    .iter()
                    .try_for_each(|w| Shared::store_page_of(&run.entry, w.page(), w.bytes()));
                if let Err(e) = &again
                    && !matches!(e, Error::OutOfRange { .. })
                {
                    self.failed.get_or_insert_with(|| e.clone());
                }
                again
            } else {
                match &r {
                    // The file shrank after the write was prepared: the pages
                    // stay dirty, and their next write-back writes what is
                    // still inside the file.
                    Err(Error::OutOfRange { .. }) => {}
                    Err(e) => {
                        run.entry.remember(e.clone());
                        self.failed.get_or_insert_with(|| e.clone());
                    }
                    Ok(()) => {
                        kept = !run
                            .entry
                            .written_at(run.epoch, run.pages.iter().map(|w| w.page()));
                    }
                }
                r
            };
            // Pages that reached the device: not those of a failed write,
            // nor those a failed fsync since left dirty.
            if r.is_ok() && !kept {
                self.pages += run.pages.len() as u64;
            }
            self.writes += 1;
            // The file's entry goes before the pages are let go: a `sync`
            // that waits for them may be followed at once by the file's
            // delete, whose space must not stay held by this thread's last
            // reference to the file.
            let Run { entry, pages, .. } = run;
            drop(entry);
            for wb in pages {
                if kept {
                    // Written before an fsync that failed since: dirty still.
                    drop(wb);
                } else {
                    let _ = wb.finish(r.clone());
                }
            }
        }
    }

    /// Send what is queued and reap completions without blocking.
    pub(crate) fn poll(&mut self) {
        self.q.flush_now();
        self.q.poll();
        self.settle();
    }

    /// Block until at least one write completes (if any is in flight).
    pub(crate) fn wait_one(&mut self) {
        self.q.wait(1);
        self.settle();
    }

    /// Wait for every write in flight.
    pub(crate) fn drain(&mut self) {
        self.q.drain();
        self.settle();
    }
}

/// A file of a store's cache, as `OWED` names it: the address of the
/// store's shared state, and the file's cache id.
type FileKey = (usize, u32);

thread_local! {
    /// Write-backs that this thread's queues started and have not yet
    /// settled, per file (how many holds, and the pages under write-back):
    /// only this thread can finish them, by polling its queue.
    static OWED: std::cell::RefCell<Vec<(FileKey, usize, Vec<u64>)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

thread_local! {
    /// How many page futures this thread started still hold their pages
    /// pinned (with a worker, or in the future until it is polled to its
    /// end or dropped), per file (`FileKey`): only this thread adds to a
    /// count, whichever thread ends a future subtracts.
    static PAGE_FUTURES: std::cell::RefCell<Vec<(FileKey, Arc<std::sync::atomic::AtomicUsize>)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// This thread's count of page futures not yet ended on file `id` of the
/// cache whose shared state is at `store` (see `PAGE_FUTURES`), made at the
/// first call; `None` once the thread's locals are gone.
pub(crate) fn page_futures(store: usize, id: u32) -> Option<Arc<std::sync::atomic::AtomicUsize>> {
    PAGE_FUTURES
        .try_with(|c| {
            let mut v = c.borrow_mut();
            // Counts at zero that no future holds any more go.
            v.retain(|(k, n)| *k == (store, id) || Arc::strong_count(n) > 1);
            if let Some((_, n)) = v.iter().find(|(k, _)| *k == (store, id)) {
                return n.clone();
            }
            let n = Arc::new(std::sync::atomic::AtomicUsize::new(0));
            v.push(((store, id), n.clone()));
            n
        })
        .ok()
}

/// How many page futures this thread started have not ended: on every file
/// (`None`), or on file `id` of `sh`'s cache.
pub(crate) fn page_futures_unended(on: Option<(&Shared, u32)>) -> usize {
    let key = on.map(|(sh, id)| (sh as *const Shared as usize, id));
    PAGE_FUTURES
        .try_with(|c| {
            c.borrow()
                .iter()
                .filter(|(k, _)| key.is_none_or(|key| *k == key))
                .map(|(_, n)| n.load(Ordering::Relaxed))
                .sum()
        })
        .unwrap_or(0)
}

/// Write-back guards of one file that a request queue holds until its write
/// comes back, counted in `OWED` while it lives.
pub(crate) struct Owed<'a> {
    key: FileKey,
    pages: Vec<WriteBack<'a>>,
    /// The pages' numbers, counted in `OWED` while this lives.
    nums: Vec<u64>,
    /// The file's fsync epoch when the write was sent.
    pub(crate) epoch: u64,
}

impl<'a> Owed<'a> {
    pub(crate) fn new(sh: &Shared, file: u32, pages: Vec<WriteBack<'a>>) -> Owed<'a> {
        let epoch = if pages.is_empty() {
            0
        } else {
            sh.fsync_epoch(file)
        };
        let key = (sh as *const Shared as usize, file);
        let nums: Vec<u64> = pages.iter().map(|w| w.page()).collect();
        // The cache's blocking lookups of this thread bound their waits for
        // other threads while this lives.
        crate::cache::note_queue_write_back(true);
        let _ = OWED.try_with(|o| {
            let mut o = o.borrow_mut();
            match o.iter_mut().find(|(k, ..)| *k == key) {
                Some((_, n, p)) => {
                    *n += 1;
                    p.extend_from_slice(&nums);
                }
                None => o.push((key, 1, nums.clone())),
            }
        });
        Owed {
            key,
            pages,
            nums,
            epoch,
        }
    }

    pub(crate) fn take(&mut self) -> Vec<WriteBack<'a>> {
        std::mem::take(&mut self.pages)
    }
}

impl Drop for Owed<'_> {
    fn drop(&mut self) {
        crate::cache::note_queue_write_back(false);
        let _ = OWED.try_with(|o| {
            let mut o = o.borrow_mut();
            if let Some(i) = o.iter().position(|(k, ..)| *k == self.key) {
                o[i].1 -= 1;
                if o[i].1 == 0 {
                    o.swap_remove(i);
                } else {
                    let p = &mut o[i].2;
                    for n in &self.nums {
                        if let Some(j) = p.iter().position(|x| x == n) {
                            p.swap_remove(j);
                        }
                    }
                }
            }
        });
    }
}

/// Whether this thread's request queues hold write-backs of file `id` of
/// `sh`'s cache they have not yet settled, or pages of it held for a write
/// whose page is being read first (a `sync` of it waiting for those
/// pages would wait for itself).
pub(crate) fn owes_write_backs(sh: &Shared, id: u32) -> bool {
    let key = (sh as *const Shared as usize, id);
    OWED.try_with(|o| o.borrow().iter().any(|(k, ..)| *k == key))
        .unwrap_or(false)
}

/// Who waits for a thread that wants one of a file's length-change locks
/// (see [`lock_unless_sync_waits_on`]).
pub(crate) enum WaitedOn {
    /// The sync holding the file's sync lock waits for this page.
    BySync(u64),
    /// Another thread waits for this page (named so), which this thread
    /// holds a guard of, or whose write-back or read a request queue of this
    /// thread has not finished.
    ByOther(String),
}

/// Lock `m`, one of the file's locks that a sync of the file may hold or
/// wait behind, for a thread the sync may be waiting for: while the sync
/// that holds `e.syncing` waits for none of the pages `mine` says are this
/// thread's to let go (given each page and whether the sync waits for its
/// write-back), and no thread waits for what only this thread can end (see
/// [`this_thread_waited_for`]: a writer holding `extending` may, and would
/// hold it until this thread ends it), it polls; once either happens, it
/// gives up with that page (waiting on would wait for ever, the other for
/// it and it for the other). The second look cannot tell the lock's holder
/// from any other waiter, nor a waiter from one that gave up and left its
/// mark: a thread that something of its own is waited for by anyone is
/// refused even where the holder would have ended.
pub(crate) fn lock_unless_sync_waits_on<'m>(
    sh: &Shared,
    e: &Entry,
    m: &'m std::sync::Mutex<()>,
    mine: impl Fn(u64, bool) -> bool,
    g: &Guards,
) -> std::result::Result<std::sync::MutexGuard<'m, ()>, WaitedOn> {
    let mut pause = 1u64;
    let polled = Instant::now();
    loop {
        match m.try_lock() {
            Ok(g) => return Ok(g),
            Err(std::sync::TryLockError::Poisoned(p)) => return Ok(p.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => {}
        }
        let waits = e
            .sync_waits
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        if let Some((p, _)) = waits.into_iter().find(|&(p, wb)| mine(p, wb)) {
            return Err(WaitedOn::BySync(p));
        }
        if let Some((f, p)) = this_thread_waited_for(sh, g) {
            let name = sh.entry(f).map(|e| e.file.name()).unwrap_or_default();
            return Err(WaitedOn::ByOther(format!("page {p} of {name:?}")));
        }
        // A sync of another file waiting for this thread, whose own lock may
        // be what another thread holding what this one waits for wants:
        // looked at once the lock has been polled for the pin wait (a cycle
        // never clears; a holder merely slow lets go before that).
        if polled.elapsed() >= sh.cache.pin_wait()
            && let Some((f, p)) = waited_for_by_another_sync(sh, u32::MAX, g)
        {
            let name = sh.entry(f).map(|e| e.file.name()).unwrap_or_default();
            return Err(WaitedOn::ByOther(format!(
                "page {p} of {name:?} (its sync waits for it)"
            )));
        }
        std::thread::sleep(Duration::from_micros(pause));
        pause = (pause * 2).min(1000);
    }
}

/// A page (file, page) of `sh`'s cache that another thread waits for and
/// only this thread can let go: one it holds a guard of (`g`), whose
/// write-back a request queue of this thread owes, or whose fill one holds
/// in flight (the page's `WAITERS` mark). Such a thread must not wait for a
/// lock whose holder may be that waiter.
pub(crate) fn this_thread_waited_for(sh: &Shared, g: &Guards) -> Option<(u32, u64)> {
    let me = sh as *const Shared as usize;
    let owed: Vec<(u32, u64)> = OWED
        .try_with(|o| {
            (o.borrow().iter())
                .filter(|(k, ..)| k.0 == me)
                .flat_map(|((_, f), _, p)| p.iter().map(|&p| (*f, p)))
                .collect()
        })
        .unwrap_or_default();
    (g.waited_for)(sh)
        .or_else(|| (owed.into_iter()).find(|&(f, p)| sh.cache.waited_for(f, p).unwrap_or(false)))
        .or_else(|| sh.cache.own_fill_waited_for())
}

/// A page (file, page) of a file other than `id` (any file, given
/// `u32::MAX`) of `sh`'s cache that the sync of that file waits for and
/// only this thread can let go: one it
/// holds a guard of (that the sync found under no write-back), or whose
/// write-back a request queue of this thread owes. Two threads each
/// syncing a file the other holds a guard of would wait for ever.
fn waited_for_by_another_sync(sh: &Shared, id: u32, g: &Guards) -> Option<(u32, u64)> {
    let me = sh as *const Shared as usize;
    let mut mine: Vec<(u32, u64, bool)> = ((g.held)(sh).into_iter())
        .map(|(f, p)| (f, p, true))
        .collect();
    let _ = OWED.try_with(|o| {
        for ((s, f), _, pages) in o.borrow().iter() {
            if *s == me {
                mine.extend(pages.iter().map(|&p| (*f, p, false)));
            }
        }
    });
    (mine.into_iter())
        .filter(|&(f, ..)| f != id)
        // A guarded page clean now stays clean while the guard lives (a
        // write waits for it): the sync no longer waits for it, whatever its
        // list, renewed once a round, still says.
        .filter(|&(f, p, guard)| !guard || sh.cache.dirty(f, p).unwrap_or(false))
        .find(|&(f, p, guard)| {
            sh.entry(f).is_ok_and(|e| {
                (e.sync_waits
                    .lock()
                    .unwrap_or_else(|x| x.into_inner())
                    .iter())
                .any(|&(q, wb)| q == p && !(guard && wb))
            })
        })
        .map(|(f, p, _)| (f, p))
}

/// Whether this thread holds anything another thread may wait for that
/// only this thread can let go: a guard of a page of the cache (`g`), or
/// request queues' I/O in flight (in any cache).
pub(crate) fn holds_anything(g: &Guards) -> bool {
    g.any || crate::cache::queue_io()
}

/// Whether a request queue of this thread holds page `page` of file `id` of
/// `sh`'s cache under a write-back it has not settled.
pub(crate) fn owes_page(sh: &Shared, id: u32, page: u64) -> bool {
    let key = (sh as *const Shared as usize, id);
    OWED.try_with(|o| {
        o.borrow()
            .iter()
            .any(|(k, _, p)| *k == key && p.contains(&page))
    })
    .unwrap_or(false)
}

/// A page of file `id` from `from` on whose write-back (or hold for a
/// write) a request queue of this thread has not settled.
pub(crate) fn owed_page_from(sh: &Shared, id: u32, from: u64) -> Option<u64> {
    let key = (sh as *const Shared as usize, id);
    OWED.try_with(|o| {
        o.borrow()
            .iter()
            .filter(|(k, ..)| *k == key)
            .flat_map(|(_, _, p)| p.iter().copied())
            .find(|&p| p >= from)
    })
    .ok()
    .flatten()
}

impl Shared {
    /// Refuses a synchronous write of `page` of file `id` whose write-back
    /// a request queue of this thread started and has not settled: the
    /// write would wait for it, and only this thread, polling that queue,
    /// can finish it. A thread whose queues owe no write-back pays one look
    /// at an empty list; another thread's write-back (the flusher's, say)
    /// is waited for as before.
    pub(crate) fn own_write_back(&self, id: u32, page: u64) -> Result<()> {
        if !owes_page(self, id, page) || !self.cache.writing_back(id, page)? {
            return Ok(());
        }
        let name = self.entry(id).map(|e| e.file.name()).unwrap_or_default();
        Err(Error::HeldByCaller(format!(
            "a write of page {page} of {name:?}, whose write-back a request queue of this \
             thread started and has not finished: poll, wait for or drain the queue first"
        )))
    }

    /// For a future, which a worker serves while the polling thread waits:
    /// the refusal of [`Shared::own_write_back`] for a `write`, and for any
    /// request on a page a request queue of this thread is reading in (the
    /// worker would wait for that read, which only this thread finishes).
    pub(crate) fn own_io(&self, id: u32, page: u64, write: bool) -> Result<()> {
        if self.cache.is_own_queue_fill(id, page) {
            let name = self.entry(id).map(|e| e.file.name()).unwrap_or_default();
            return Err(Error::HeldByCaller(format!(
                "a request for page {page} of {name:?}, which a request queue of this thread \
                 is reading in: poll, wait for or drain the queue first"
            )));
        }
        if write {
            self.own_write_back(id, page)?;
        }
        Ok(())
    }
}

/// How a sync that does not wait says that another sync of the file holds
/// it (the end of its [`Error::Busy`] message).
pub(crate) const BEING_SYNCED: &str = "is being synced";

/// How a sync that does not wait says that pages of the file were held by
/// others (the end of its [`Error::Busy`] message); what it could write it
/// made durable.
pub(crate) const IN_USE: &str = "are in use";

/// Bytes of the file region whose dirty pages are written together.
///
/// The disk here (and SSDs generally, whose mapping units and write buffers
/// span many pages) takes writes that land close together in time and offset
/// much faster than scattered ones: fio on the bench file, random 4 KiB writes
/// at depth 32 in a replayed log, 85-87k/s scattered against 157k/s when the
/// writes come as eight to a random 256 KiB region. So whenever a page is
/// written back, the other dirty pages of its region go right behind it.
pub(crate) const REGION_BYTES: u64 = 256 << 10;

/// The pages of the write-back region of `page` of `file` below page `end`
/// that look dirty and idle (a lock-free hint per page), in file order.
pub(crate) fn dirty_in_region(
    cache: &PageCache,
    file: u32,
    page: u64,
    end: u64,
) -> impl Iterator<Item = u64> + '_ {
    let r = (REGION_BYTES / cache.page_size() as u64).max(1);
    let first = page / r * r;
    (first..(first + r).min(end)).filter(move |&q| cache.dirty_hint(file, q))
}

impl Shared {
    /// Write back every dirty page of file `id` (32 writes in flight, dirty
    /// neighbours merged into one write), waiting for pages that are busy (a
    /// writer holds them, or another write-back runs), then fsync.
    pub(crate) fn sync_file(&self, id: u32, who: Asker<'_>, g: &Guards) -> Result<()> {
        self.sync_file_as(id, true, who, g)
    }

    /// As [`Shared::sync_file`]; without `wait`, fails [`Error::Busy`] at
    /// once where it would wait for another sync of the file or for pages
    /// others hold (what is left dirty stays marked for the next sync).
    /// `who` asks: the loss a failed fsync left that it has not accepted
    /// fails the sync ([`Error::SyncLost`]).
    pub(crate) fn sync_file_as(
        &self,
        id: u32,
        wait: bool,
        who: Asker<'_>,
        g: &Guards,
    ) -> Result<()> {
        self.retire_finished();
        let e = self.entry(id)?;
        // One sync of a file at a time: a sync whose fsync failed has made its
        // pages dirty again before the next one starts writing, so the next
        // one's good fsync (the kernel reports a failure once) covers them.
        let _one = if wait && holds_anything(g) {
            // This thread's request queue owes write-backs of the file, or
            // it holds what another may wait for: a sync holding the lock may
            // wait for them, which only this thread can finish (by polling
            // the queue, or letting its guards go).
            lock_unless_sync_waits_on(self, &e, &e.syncing, |p, _| owes_page(self, id, p), g)
                .map_err(|w| {
                    let by = match w {
                        WaitedOn::BySync(p) => format!("another, which waits for page {p}"),
                        WaitedOn::ByOther(p) => format!(
                            "a thread holding one of its locks, which perhaps waits for {p}"
                        ),
                    };
                    Error::HeldByCaller(format!(
                        "a sync of {:?} beside {by}, which this thread holds a guard of or a \
                         request queue of this thread has not finished: poll, wait for or \
                         drain the queue, or drop the guard, first",
                        e.file.name()
                    ))
                })?
        } else if wait {
            e.syncing.lock().unwrap_or_else(|p| p.into_inner())
        } else {
            match e.syncing.try_lock() {
                Ok(g) => g,
                Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
                Err(std::sync::TryLockError::WouldBlock) => {
                    return Err(Error::Busy(format!("{:?} {BEING_SYNCED}", e.file.name())));
                }
            }
        };
        // The pages this sync waits for, shown while it waits (emptied
        // however it ends).
        struct Waits<'a>(&'a std::sync::Mutex<Vec<(u64, bool)>>);
        impl Drop for Waits<'_> {
            fn drop(&mut self) {
                self.0.lock().unwrap_or_else(|p| p.into_inner()).clear();
            }
        }
        let _waits = Waits(&e.sync_waits);
        self.answer_meta_fsyncs(&e, id);
        // Only the sets where the file's pages turned dirty since the last
        // sync: the cost follows what is dirty, not the cache.
        let (pending, sets) = self.cache.take_pending_of(id);
        #[cfg(test)]
        if let Some(took) = TOOK_PENDING.take(Arc::as_ptr(&e) as usize) {
            took();
        }
        // Unless this sync ends well (an error or a panic on the way), the
        // sets go back, so that the next sync finds what it left dirty.
        struct Remark<'a> {
            sh: &'a Shared,
            id: u32,
            sets: Vec<usize>,
            done: bool,
        }
        impl Drop for Remark<'_> {
            fn drop(&mut self) {
                if !self.done {
                    self.sh.cache.remark(self.id, &self.sets);
                }
            }
        }
        let mut remark = Remark {
            sh: self,
            id,
            sets,
            done: false,
        };
        let r = self.write_and_fsync(id, &e, pending, wait, who, g);
        remark.done = r.is_ok();
        r
    }

    /// `sync_file`'s work once the file's dirty pages are known: write them,
    /// then fsync if anything was written since the last good fsync.
    fn write_and_fsync(
        &self,
        id: u32,
        e: &Entry,
        mut pending: Vec<u64>,
        wait: bool,
        who: Asker<'_>,
        g: &Guards,
    ) -> Result<()> {
        // This thread's sync queue, kept from its last sync: its ring is set
        // up once, not for every sync (a database syncs at every commit).
        // (Not one kept by the thread `fork` copied into this process: its
        // rings are the parent's.)
        let q = SYNC_QUEUE
            .try_with(|c| c.borrow_mut().take())
            .ok()
            .flatten()
            .filter(Queue::made_here)
            .unwrap_or_else(|| Queue::new(SYNC_DEPTH));
        let mut w = Writer::with_queue(self, q, SYNC_MERGE, false);
        w.q.set_lone_in_caller();
        let mut pause = 1u64;
        // Since this sync last wrote a page or saw one come free.
        let mut since = Instant::now();
        // Whether `Entry::sync_waits` shows pages.
        let mut shown = false;
        // Without `wait`: the pages others held when this sync gave up.
        let mut held = None;
        while !pending.is_empty() {
            let mut busy = Vec::new();
            let mut why = Vec::new();
            let mut started = false;
            let pending_len = pending.len();
            for p in pending {
                if w.write(id, p) {
                    started = true;
                } else if let Some(wb) = self.cache.write_pending_why(id, p)? {
                    // Busy (a writer holds it, or a write-back is in flight,
                    // perhaps our own): wait for it, so that the fsync below
                    // covers the bytes.
                    busy.push(p);
                    why.push((p, wb));
                }
            }
            w.poll();
            if started || busy.len() < pending_len {
                since = Instant::now();
            }
            pending = busy;
            // Shown while it waits, as it is each round (a page written
            // since leaves the list; none left, the list empties).
            if shown || !pending.is_empty() {
                *e.sync_waits.lock().unwrap_or_else(|p| p.into_inner()) = why;
                shown = !pending.is_empty();
            }
            if !pending.is_empty() {
                if w.in_flight() == 0 && since.elapsed() >= self.cache.pin_wait() {
                    // Perhaps the write-backs of a request queue of this
                    // thread, or the pins of page futures it started, which
                    // only this thread may end (by polling the queue, or the
                    // futures to their end): waiting could be for ever. The
                    // sets go back (see `Remark`).
                    let why = if owes_write_backs(self, id) {
                        Some(
                            "a request queue of this thread holds write-backs or writes it has \
                             not yet finished: poll, wait for or drain the queue first"
                                .to_string(),
                        )
                    } else {
                        match page_futures_unended(Some((self, id))) {
                            0 => None,
                            n => Some(format!(
                                "this thread started {n} page futures of the file not yet \
                                 ended, whose pages stay pinned until they are polled to \
                                 their end or dropped: end them first"
                            )),
                        }
                    };
                    // Or another file's sync waits for this thread (its
                    // guard, its queue's write-back), and perhaps holds what
                    // this sync waits for.
                    let why = why.or_else(|| {
                        let (f, p) = waited_for_by_another_sync(self, id, g)?;
                        let name = self.entry(f).map(|e| e.file.name()).unwrap_or_default();
                        Some(format!(
                            "a sync of {name:?} waits for its page {p}, which this thread holds \
                             a guard of or a request queue of this thread owes the write-back \
                             of: drop the guard, or poll, wait for or drain the queue, first"
                        ))
                    });
                    // Or another thread waits for what only this one can
                    // let go (its mutable guard, its queue's fill), and may
                    // be what this sync waits for.
                    let why = why.or_else(|| {
                        let (f, p) = holds_anything(g)
                            .then(|| this_thread_waited_for(self, g))
                            .flatten()?;
                        let name = self.entry(f).map(|e| e.file.name()).unwrap_or_default();
                        Some(format!(
                            "another thread waits for page {p} of {name:?}, which this thread \
                             holds a guard of or a request queue of this thread has not \
                             finished: poll, wait for or drain the queue, or drop the guard, \
                             first"
                        ))
                    });
                    if let Some(why) = why {
                        let q = w.into_queue();
                        let _ = SYNC_QUEUE.try_with(|c| *c.borrow_mut() = Some(q));
                        return Err(Error::HeldByCaller(format!(
                            "a sync of {:?} waited {} ms for pages in use while {why}",
                            e.file.name(),
                            self.cache.pin_wait().as_millis()
                        )));
                    }
                    // Pins parked for page futures that a task (perhaps
                    // this one, moved to this thread) has not polled to their
                    // end: whether it ever will cannot be told from here.
                    let parked = e.parked_pins.load(Ordering::Acquire);
                    if parked > 0 {
                        let q = w.into_queue();
                        let _ = SYNC_QUEUE.try_with(|c| *c.borrow_mut() = Some(q));
                        return Err(Error::Busy(format!(
                            "a sync of {:?} waited {} ms for pages in use while page futures \
                             hold {parked} of its pages pinned (polled on another thread, or \
                             moved here): poll them to their end or drop them first",
                            e.file.name(),
                            self.cache.pin_wait().as_millis()
                        )));
                    }
                }
                if w.in_flight() > 0 {
                    w.wait_one();
                } else if started {
                    // This round's writes are done (a lone one runs in
                    // `poll`): the pages they covered are clean now, so
                    // look again at once.
                } else if !wait {
                    // A page found busy under a write-back of this sync's
                    // own, which this round's poll then ended, is not in use:
                    // only the pages still pending now are held by others.
                    let before = pending.len();
                    let mut still = Vec::with_capacity(before);
                    for &p in &pending {
                        if let Some(wb) = self.cache.write_pending_why(id, p)? {
                            still.push((p, wb));
                        }
                    }
                    if still.len() < before {
                        pending = still.iter().map(|&(p, _)| p).collect();
                        // What `Entry::sync_waits` shows follows (others
                        // read it while this sync goes on to its fsync).
                        if shown {
                            shown = !still.is_empty();
                            *e.sync_waits.lock().unwrap_or_else(|p| p.into_inner()) = still;
                        }
                        continue;
                    }
                    // Held by others: what this sync wrote is still made
                    // durable below, with the headers of a growth (the
                    // length of the writes that ended is not lost with the
                    // pages others hold), and then the sync fails; the sets
                    // go back (see `Remark`).
                    held = Some(pending.len());
                    break;
                } else {
                    std::thread::sleep(Duration::from_micros(pause));
                    pause = (pause * 2).min(1000);
                }
            }
        }
        let r = self.fsync_written(id, e, w, who);
        match held {
            Some(n) if r.is_ok() => Err(Error::Busy(format!(
                "{n} pages of {:?} {IN_USE}",
                e.file.name()
            ))),
            _ => r,
        }
    }

    /// The end of [`Shared::write_and_fsync`] once its writes are sent:
    /// wait for them, then fsync (and write a growth's headers) if anything
    /// was written since the last good fsync.
    fn fsync_written(&self, id: u32, e: &Entry, mut w: Writer<'_>, who: Asker<'_>) -> Result<()> {
        w.drain();
        let failed = w.failed.take();
        let q = w.into_queue();
        let _ = SYNC_QUEUE.try_with(|c| *c.borrow_mut() = Some(q));
        // Failures of this sync's writes were remembered for the file too. An
        // earlier failure that can pass (out of space, say) left its page
        // dirty, and this sync wrote that page again: only this sync's own
        // failures count for it. Any other earlier failure is reported.
        let earlier = e.failed.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(err) = failed.or(earlier.filter(|x| !x.can_pass())) {
            return Err(err);
        }
        // The pages written since the last good fsync, up to now: the fsync
        // below must cover them. Pages written from here on belong to the next
        // (should the fsync fail, those written before it are written again
        // too: see below).
        let nothing = {
            let mut d = e.durable();
            if let Some(lost) = d.loss_for(who) {
                let newest = d.lost_gen;
                d.reported(newest, who);
                return Err(Error::SyncLost {
                    file: e.file.name(),
                    first: Box::new(lost),
                });
            }
            // (`covering` is empty here, as syncs of the file take turns,
            // unless one was unwound part way.)
            let taken = std::mem::take(&mut d.written);
            if d.covering.is_empty() {
                d.covering = taken;
            } else {
                for p in taken.iter() {
                    d.covering.insert(p);
                }
            }
            d.covering.is_empty()
        };
        if nothing && !e.file.header_stale() {
            // Nothing written since the last good fsync, no fsync failed
            // since (a failure leaves its pages here), and no growth waits
            // for its headers: no I/O, but the same checks of the devices
            // and the backing files as after an fsync.
            return e.file.check_live();
        }
        // A metadata step's fsync that failed since this sync answered the
        // last ones (a growth on another thread, while this sync wrote) may
        // have taken the report this fsync would give: this sync then fails
        // as if its own had.
        let told = match e.file.sync_again_told() {
            Ok(())
                if e.file.meta_fsync_failures() != e.meta_fsyncs_seen.load(Ordering::Acquire) =>
            {
                let err = e.file.meta_fsync_error().unwrap_or_else(|| {
                    Error::InvalidArgument("a metadata step's fsync failed".into())
                });
                Err((err, true))
            }
            r => r,
        };
        match told {
            Ok(()) => {
                // What this fsync covered is on the devices, and pages read
                // back before it read what they hold.
                let mut d = e.durable();
                d.covering = PageSet::default();
                let Durable {
                    written, refilled, ..
                } = &mut *d;
                refilled.retain_in(written);
                if written.is_empty() {
                    e.tracked.store(false, Ordering::Release);
                }
                Ok(())
            }
            Err((err, false)) => {
                // Failed before any fsync (the headers of a lazy growth): no
                // page the kernel held was dropped; the pages taken stay to
                // be covered by the next sync's fsync.
                let mut d = e.durable();
                let covered = std::mem::take(&mut d.covering);
                for p in covered.iter() {
                    d.written.insert(p);
                }
                Err(err)
            }
            Err((err, true)) => {
                // This answers every failed metadata fsync so far too (the
                // pages written before it are all written again below);
                // later ones are answered by the next sync.
                let now = e.file.meta_fsync_failures();
                e.meta_fsyncs_seen.fetch_max(now, Ordering::AcqRel);
                // The kernel may have dropped what it could not write. That
                // includes pages whose writes finished after `covered` was
                // taken but before this fsync (the flusher's, a victim's):
                // the kernel reports its failure once, so the next fsync
                // would pass without them.
                match self.rewrite_since_good_fsync(e, id, Some(err.clone())) {
                    Some(lost) => {
                        // This failure is how the caller hears of the loss:
                        // as a loss, not as an error a retry can pass.
                        let mut d = e.durable();
                        d.reported(lost, who);
                        let first = d.lost.clone().unwrap_or(err);
                        Err(Error::SyncLost {
                            file: e.file.name(),
                            first: Box::new(first),
                        })
                    }
                    None => Err(err),
                }
            }
        }
    }
}

impl Shared {
    /// A metadata step's fsync of the file failed since its last sync (a
    /// `set_len`'s, a growth's headers'): in buffered mode it may have taken
    /// the kernel's report of pages dropped, which this sync's fsync will
    /// not see. As after a sync's own failed fsync, every page written since
    /// the last good fsync is written again: marked dirty if still cached,
    /// else the file's later syncs fail `SyncLost`. Under `syncing`.
    pub(crate) fn answer_meta_fsyncs(&self, e: &Entry, id: u32) {
        let failures = e.file.meta_fsync_failures();
        if failures == e.meta_fsyncs_seen.load(Ordering::Acquire) {
            return;
        }
        e.meta_fsyncs_seen.store(failures, Ordering::Release);
        // (A loss recorded here is reported by the sync's check of it.)
        self.rewrite_since_good_fsync(e, id, e.file.meta_fsync_error());
    }

    /// After an fsync that may have cost pages (the kernel reports a failed
    /// write-back once): every page written since the last good fsync, those
    /// a sync's fsync covered (which go back into `written`) and those in
    /// `written`, is written again before the next fsync can pass (marked
    /// dirty); if one has left the cache since, even if it was read back
    /// (`Durable::refilled`: it may hold what the failure dropped), the
    /// file's syncs fail with `err` from now on. Write-backs sent before this
    /// and reaped after it keep their pages dirty (`Entry::written_at`).
    /// Returns the number of the loss it recorded, if any.
    fn rewrite_since_good_fsync(&self, e: &Entry, id: u32, err: Option<Error>) -> Option<u64> {
        e.fsync_failures.fetch_add(1, Ordering::AcqRel);
        let (since, notes, mut left) = {
            let mut d = e.durable();
            let covered = std::mem::take(&mut d.covering);
            for p in covered.iter() {
                d.written.insert(p);
            }
            let since: Vec<_> = d.written.iter().collect();
            (since, d.notes, !d.refilled.is_empty())
        };
        let mut gone = Vec::new();
        for p in since {
            if !self.cache.mark_dirty(id, p).unwrap_or(false) {
                gone.push(p);
            }
        }
        left |= !gone.is_empty();
        // A page that left the cache and was read back while the loop went
        // on came back with what the failed fsync left, and was marked dirty
        // with those bytes: lost too.
        let mut d = e.durable();
        left |= !d.refilled.is_empty();
        match err {
            Some(err) if left => {
                // The pages that had left the cache are this loss's: written
                // no more, they are not the next fsync's to cover, and a
                // failure of it must not count them as lost again. (Only if
                // no write-back was noted meanwhile: one of those pages may
                // have come back, been written and noted, and must stay.)
                if d.notes == notes {
                    for p in gone {
                        d.written.remove(p);
                    }
                }
                Some(d.record_loss(err))
            }
            _ => None,
        }
    }
}

/// Writes in flight during `sync`.
const SYNC_DEPTH: usize = 32;

thread_local! {
    /// The queue of this thread's last sync, idle, for its next.
    static SYNC_QUEUE: std::cell::RefCell<Option<Queue>> = const { std::cell::RefCell::new(None) };
}
/// Most pages `sync` merges into one write.
const SYNC_MERGE: usize = 32;

/// In unit tests: run once by a write-back of the file whose entry is at
/// this address, between its read of the file's length for the neighbour
/// search and that search.
#[cfg(test)]
pub(crate) static SEARCH_LENGTH: crate::util::hook::TestHook<usize, Box<dyn FnOnce() + Send>> =
    crate::util::hook::TestHook::new();

/// In unit tests: run once by a sync of the file whose entry is at this
/// address, as soon as it has taken the pages it will write.
#[cfg(test)]
pub(crate) static TOOK_PENDING: crate::util::hook::TestHook<usize, Box<dyn FnOnce() + Send>> =
    crate::util::hook::TestHook::new();

#[cfg(test)]
mod merge_tests {
    use super::*;

    #[test]
    fn a_merged_write_never_exceeds_one_request() {
        // 2,048 pages of 1 MiB would be 2 GiB, past what one request moves.
        assert_eq!(merge_limit(4096, 1 << 20), 2047);
        assert!(merge_limit(4096, 1 << 20) * (1 << 20) <= MAX_REQUEST);
        assert_eq!(merge_limit(1 << 20, 4096), MAX_REQUEST / 4096);
        assert_eq!(merge_limit(32, 4096), 32);
        assert_eq!(merge_limit(0, 4096), 1);
    }
}

#[cfg(test)]
mod sync_tests {
    use std::sync::Arc;
    use std::sync::atomic::Ordering;
    use std::time::Duration;

    use crate::cache::{CacheOptions, PolicyKind};
    use crate::cached::{CachedRequest, CachedStore, FlushOptions};
    use crate::{EngineKind, LayoutKind, OpKind, SimConfig, SimMedia, SimSwitches, Store};
    use crate::{StoreOptions, storage::buf::AlignedBuf};

    fn sim_store(dir: &std::path::Path, media: &Arc<SimMedia>, sw: &Arc<SimSwitches>) -> Store {
        // Operations take 20-30 ms: the queue's write-back is still in flight
        // when its submit returns, and done (not yet reaped) when the other
        // thread's fsync fails 50 ms later.
        let (media, switches) = (media.clone(), sw.clone());
        let sim = SimConfig {
            media,
            switches,
            latency_us: (20_000, 30_000),
            ..SimConfig::default()
        };
        let engine = EngineKind::Sim(sim);
        Store::open(
            &[dir],
            StoreOptions {
                engine,
                ..StoreOptions::default()
            },
        )
        .unwrap()
    }

    /// A file `f` of 64 pages on simulated devices whose fsyncs fail
    /// `ENOSPC` when told to (dropping what was written since the last good
    /// one), under a cache of one set of four pages with no flusher and
    /// nothing read ahead.
    pub(super) fn four_pages(
        tag: &str,
        pin_wait: Duration,
    ) -> (
        std::path::PathBuf,
        Arc<SimMedia>,
        Arc<SimSwitches>,
        CachedStore,
    ) {
        let dir = crate::cached::scratch_dir(tag);
        let media = SimMedia::new();
        let sw = Arc::new(SimSwitches::default());
        sw.keep_synced.store(true, Ordering::Release);
        sw.fsync_errno.store(libc::ENOSPC, Ordering::Release);
        let store = sim_store(&dir, &media, &sw);
        drop(store.create("f", 64 * 4096, LayoutKind::Stripe).unwrap());
        let opts = CacheOptions {
            size: 4 * 4096,
            max_size: Some(4 * 4096),
            page_size: 4096,
            assoc: 4,
            partitions: 1,
            policy: PolicyKind::Clock,
            pin_wait,
        };
        let cs = CachedStore::with_flusher(store, opts, None::<FlushOptions>).unwrap();
        cs.set_readahead(0);
        (dir, media, sw, cs)
    }

    /// A victim write-back a request queue sent before another thread's sync
    /// fsynced, and reaped only after that fsync failed, may have been dropped
    /// by it: its pages must stay dirty, so that the next sync writes them
    /// again before it can pass (the kernel reports a failure once: that next
    /// fsync passes either way). The sync is known to have taken the pages it
    /// writes (page 0 alone) before pages 1-3 turn dirty.
    #[test]
    fn a_write_back_reaped_after_a_failed_fsync_is_written_again() {
        let (dir, media, sw, cs) = four_pages("fsync-reaped-late", Duration::from_secs(5));
        let f = cs.open_file("f").unwrap();
        f.sync().unwrap();
        let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
        let (held_tx, held_rx) = std::sync::mpsc::channel::<()>();
        let (took_tx, took_rx) = std::sync::mpsc::channel::<()>();
        std::thread::scope(|s| {
            // V holds page 0 for writing, so that U's sync waits on it.
            let f = &f;
            s.spawn(move || {
                let mut g = f.page_mut(0).unwrap();
                g[0] = 0xAA;
                held_tx.send(()).unwrap();
                release_rx.recv().unwrap();
            });
            held_rx.recv().unwrap();
            super::TOOK_PENDING.arm(
                Arc::as_ptr(&f.entry) as usize,
                Box::new(move || took_tx.send(()).unwrap()),
            );
            let u = s.spawn(|| f.sync());
            took_rx.recv().unwrap();
            // Pages 1-3 dirty (the set full), then a read of page 10 that
            // sends them to the device as victims; this thread does not poll.
            for p in 1..4u64 {
                f.write_at(p * 4096, &[0xBB; 4096]).unwrap();
            }
            let mut q = cs.queue(4);
            q.submit(vec![CachedRequest::tagged(
                OpKind::Read,
                f,
                10 * 4096,
                vec![0; 4096],
                1,
            )]);
            std::thread::sleep(Duration::from_millis(50));
            // U's fsync fails; only then does the queue reap the victims' write.
            sw.fsync_failures.store(1, Ordering::Release);
            release_tx.send(()).unwrap();
            let r = u.join().unwrap();
            assert!(r.is_err(), "the sync's fsync did not fail: {r:?}");
            q.drain();
            let mut done = Vec::new();
            q.take_completions(&mut done);
            drop(q);
            f.sync().unwrap();
        });
        drop(f);
        drop(cs);
        let store = sim_store(&dir, &media, &sw);
        let g = store.open_file("f").unwrap();
        let mut b = AlignedBuf::new(4096);
        g.read_at(4096, &mut b).unwrap();
        assert!(
            b.iter().all(|&x| x == 0xBB),
            "page 1, written before a sync that returned Ok, is not on the device"
        );
        drop(g);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A sync's run takes the file's last page as a neighbour after reading
    /// the file's length for its search. A writer that grows the file and
    /// stores past the old end into that page in between must find its bytes
    /// on the device after the sync: the run's write is sized by the length
    /// read once its pages are held, not by the one the search used, which
    /// would write the page only to the old end and leave it clean.
    #[test]
    fn a_run_is_sized_by_the_length_read_after_its_pages_are_held() {
        let dir = crate::cached::scratch_dir("run-length-held");
        let store = Store::open(std::slice::from_ref(&dir), StoreOptions::default()).unwrap();
        drop(store.create("f", 0, LayoutKind::Stripe).unwrap());
        let cs =
            CachedStore::with_flusher(store, crate::cached::small_cache(64), None::<FlushOptions>)
                .unwrap();
        cs.set_readahead(0);
        let f = cs.open_file("f").unwrap();
        // Page 0 whole and the first 100 bytes of page 1, synced; then page
        // 0 dirty again, so that the sync below starts its run there.
        f.write_extending(0, &[0x11; 4096 + 100]).unwrap();
        f.sync().unwrap();
        f.write_at(0, &[0x11; 4096]).unwrap();
        let g = f.clone();
        super::SEARCH_LENGTH.arm(
            Arc::as_ptr(&f.entry) as usize,
            Box::new(move || {
                // Another thread grows the file to two pages and fills the
                // rest of page 1, cached and idle: no guard waits.
                std::thread::spawn(move || g.write_extending(4096 + 100, &[0x22; 4096 - 100]))
                    .join()
                    .unwrap()
                    .unwrap();
            }),
        );
        f.sync().unwrap();
        assert_eq!(f.len(), 2 * 4096);
        // The writer's own sync after its write passes either way.
        f.sync().unwrap();
        drop(f);
        drop(cs);
        let store = Store::open(std::slice::from_ref(&dir), StoreOptions::default()).unwrap();
        let g = store.open_file("f").unwrap();
        let mut b = AlignedBuf::new(4096);
        g.read_at(4096, &mut b).unwrap();
        assert!(b[..100].iter().all(|&x| x == 0x11), "page 1's first bytes");
        let lost = b[100..].iter().filter(|&&x| x != 0x22).count();
        assert_eq!(
            lost, 0,
            "bytes of page 1 past the old end not on the device after the sync"
        );
        drop(g);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A store-level sync of a cached file whose fsync failed (taking the
    /// kernel's one report of the pages it dropped) and has not yet counted
    /// its failure when the cache's sync fsyncs: the cache's fsync passes,
    /// and the cache's sync must not. Pages 0-3 were written back as victims
    /// and left the cache; the failed fsync dropped them.
    #[test]
    fn a_cache_sync_waits_for_a_failed_fsync_to_be_counted() {
        let (dir, _media, sw, cs) = four_pages("fsync-counted", Duration::from_secs(5));
        let f = cs.open_file("f").unwrap();
        f.sync().unwrap();
        for p in 0..8u64 {
            f.write_at(p * 4096, &[0x5A; 4096]).unwrap();
        }
        let (paused_tx, paused_rx) = std::sync::mpsc::channel::<()>();
        crate::storage::file::FAILED_BEFORE_COUNTED.arm(
            Arc::as_ptr(&f.file().inner) as usize,
            Box::new(move || {
                paused_tx.send(()).unwrap();
                std::thread::sleep(Duration::from_millis(500));
            }),
        );
        sw.fsync_failures.store(1, Ordering::Release);
        let (store_level, cached) = std::thread::scope(|s| {
            let t = s.spawn(|| f.file().sync());
            paused_rx
                .recv_timeout(Duration::from_secs(60))
                .expect("the store-level fsync did not reach its count");
            let cached = f.sync();
            (t.join().unwrap(), cached)
        });
        assert!(store_level.is_err(), "the store-level fsync did not fail");
        assert!(
            cached.is_err(),
            "the cache's sync passed though pages it wrote were dropped"
        );
        match f.sync() {
            Err(crate::Error::SyncLost { .. }) => {}
            other => panic!("the next sync: {other:?}"),
        }
        drop(f);
        drop(cs);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A shrink whose dropping of the pages past its end gives up (a page
    /// there is held past the pin wait) still takes those pages out of the
    /// pages owed to the next fsync: a failed fsync then counts nothing as
    /// lost (pages 4-11 were written back past the new end and left the
    /// cache; page 0, written after the shrink, is still cached: the failed
    /// fsync fails its sync, and the next sync writes it again and passes).
    #[test]
    fn a_shrink_that_gives_up_leaves_nothing_past_its_end_to_lose() {
        let (dir, _media, sw, cs) = four_pages("shrink-gave-up", Duration::from_millis(300));
        let f = cs.open_file("f").unwrap();
        f.sync().unwrap();
        for p in 4..12u64 {
            f.write_at(p * 4096, &[0x5A; 4096]).unwrap();
        }
        let (held_tx, held_rx) = std::sync::mpsc::channel::<()>();
        let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
        std::thread::scope(|s| {
            let f = &f;
            s.spawn(move || {
                let g = f.page(12 * 4096).unwrap();
                held_tx.send(()).unwrap();
                release_rx.recv().unwrap();
                drop(g);
            });
            held_rx.recv().unwrap();
            let r = f.set_len(4 * 4096);
            assert!(r.is_err(), "the shrink's dropping did not give up: {r:?}");
            release_tx.send(()).unwrap();
        });
        assert_eq!(f.len(), 4 * 4096);
        f.write_at(0, &[0x5B; 4096]).unwrap();
        sw.fsync_failures.store(1, Ordering::Release);
        let first = f.sync();
        let left = sw.fsync_failures.swap(0, Ordering::AcqRel);
        let second = f.sync();
        assert_eq!(left, 0, "the sync did not fsync");
        assert!(
            matches!(first, Err(crate::Error::Io { .. })),
            "the failed fsync's own error, no loss: {first:?}"
        );
        assert!(
            second.is_ok(),
            "a page past the end counted as lost: {second:?}"
        );
        drop(f);
        drop(cs);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// Write-back never holds pages under write-back, unsent, while it waits for
/// a set's lock: the lock's holder may be a thread whose writer waits for one
/// of those pages (64 threads writing through a small cache stalled for
/// seconds, then failed busy).
#[cfg(test)]
mod lock_wait_tests {
    use std::sync::atomic::Ordering;
    use std::sync::mpsc::channel;
    use std::time::{Duration, Instant};

    use super::{Writer, with_neighbours};

    /// Pages 0-3 of `f` dirty, in a cache of one set of four pages.
    fn dirty_four(
        tag: &str,
    ) -> (
        std::path::PathBuf,
        std::sync::Arc<crate::SimSwitches>,
        crate::cached::CachedStore,
    ) {
        let (dir, _media, sw, cs) = super::sync_tests::four_pages(tag, Duration::from_secs(5));
        let f = cs.open_file("f").unwrap();
        for p in 0..4u64 {
            f.write_at(p * 4096, &[p as u8 + 1; 4096]).unwrap();
        }
        drop(f);
        (dir, sw, cs)
    }

    #[test]
    fn a_run_is_extended_without_waiting_for_a_sets_lock() {
        let (dir, _sw, cs) = dirty_four("neighbours-nowait");
        let f = cs.open_file("f").unwrap();
        let cache = &f.shared.cache;
        let first = cache.write_back(f.id, 0).unwrap().expect("page 0 dirty");
        let (held_tx, held_rx) = channel::<()>();
        let (go_tx, go_rx) = channel::<()>();
        let waited = std::thread::scope(|s| {
            let holder = s.spawn(move || {
                let mut waited = false;
                cache.holding_sets_of(f.id, 1, || {
                    held_tx.send(()).unwrap();
                    // Told to let go once the run is made; a run that waits
                    // for this lock is let go after two seconds.
                    waited = go_rx.recv_timeout(Duration::from_secs(2)).is_err();
                });
                waited
            });
            held_rx.recv().unwrap();
            let (start, pages) = with_neighbours(cache, first, 4 * 4096, 4);
            let _ = go_tx.send(());
            assert_eq!(start, 0);
            // Page 1's set was locked: the run ends at page 0.
            assert_eq!(pages.len(), 1, "a neighbour joined through a held lock");
            for w in pages {
                w.finish(Ok(())).unwrap();
            }
            holder.join().unwrap()
        });
        assert!(!waited, "the run waited for the set's lock");
        drop(f);
        drop(cs);
        let _ = std::fs::remove_dir_all(dir);
    }

    /// The flusher's writer skips a page whose set's lock is held, at once
    /// (the flusher looks at it again later).
    #[test]
    fn a_writer_that_skips_locked_pages_does_not_wait() {
        let (dir, _sw, cs) = dirty_four("skip-locked");
        let f = cs.open_file("f").unwrap();
        let cache = &f.shared.cache;
        let mut w = Writer::new(&f.shared, 8, 4, false);
        w.skip_locked = true;
        let (held_tx, held_rx) = channel::<()>();
        let (go_tx, go_rx) = channel::<()>();
        let waited = std::thread::scope(|s| {
            let holder = s.spawn(move || {
                let mut waited = false;
                cache.holding_sets_of(f.id, 0, || {
                    held_tx.send(()).unwrap();
                    waited = go_rx.recv_timeout(Duration::from_secs(2)).is_err();
                });
                waited
            });
            held_rx.recv().unwrap();
            assert!(!w.write(f.id, 0), "a write began through a held lock");
            let _ = go_tx.send(());
            holder.join().unwrap()
        });
        assert!(!waited, "the writer waited for the set's lock");
        // Free again: the page and its neighbours go in one write.
        assert!(w.write(f.id, 0));
        w.drain();
        assert!(w.failed.is_none(), "{:?}", w.failed);
        assert_eq!((w.pages, w.writes), (4, 1));
        drop(w);
        drop(f);
        drop(cs);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn queued_runs_are_sent_before_a_wait_for_a_sets_lock() {
        let (dir, sw, cs) = dirty_four("sent-before-wait");
        let f = cs.open_file("f").unwrap();
        let cache = &f.shared.cache;
        // Runs of one page each, sent only when the writer flushes.
        let mut w = Writer::new(&f.shared, 8, 1, false);
        assert!(w.write(f.id, 0));
        assert_eq!(w.q.unsent(), 1, "the run went before a flush");
        let before = sw.taken.load(Ordering::Acquire);
        let (held_tx, held_rx) = channel::<()>();
        let reached = std::thread::scope(|s| {
            let holder = s.spawn(|| {
                let mut reached = false;
                cache.holding_sets_of(f.id, 1, || {
                    held_tx.send(()).unwrap();
                    // While the lock is held (the writer waiting for it),
                    // page 0's write must reach the device.
                    let until = Instant::now() + Duration::from_secs(2);
                    while Instant::now() < until {
                        if sw.taken.load(Ordering::Acquire) > before {
                            reached = true;
                            break;
                        }
                        std::thread::sleep(Duration::from_millis(1));
                    }
                });
                reached
            });
            held_rx.recv().unwrap();
            assert!(w.write(f.id, 1));
            holder.join().unwrap()
        });
        w.drain();
        assert!(w.failed.is_none(), "{:?}", w.failed);
        assert_eq!(w.pages, 2);
        assert!(
            reached,
            "the queued run stayed unsent while the writer waited for a set's lock"
        );
        drop(w);
        drop(f);
        drop(cs);
        let _ = std::fs::remove_dir_all(dir);
    }
}
