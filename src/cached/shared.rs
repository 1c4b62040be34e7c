//! The state a cached store shares with its files, queues, `sync` and the
//! flusher: the page cache, the table of open files by cache id, and each
//! file's entry (its store file, first unreported write-back failure, and the
//! pages written since its last good fsync). Loading a page from the devices
//! and storing one back start here.

use crate::cache::{MAX_FILE_ID, PageCache};
use crate::cached::staging::Staging;
use crate::error::{Error, Result};
use crate::storage::file::{DIRECT_ALIGN, File};
use crate::storage::store::Store;
use crate::util::origin::Origin;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock};

pub(crate) struct Shared {
    pub(crate) store: Store,
    /// The store's count of operations finished later
    /// (`StoreInner::finished_later`) when this cache last looked for files
    /// they took the name from.
    pub(crate) finished_seen: AtomicU64,
    pub(crate) cache: PageCache,
    pub(crate) files: RwLock<HashMap<u32, Arc<Entry>>>,
    pub(crate) next_id: AtomicU32,
    /// Retired ids whose pages are all gone, for reuse.
    pub(crate) free_ids: Mutex<Vec<u32>>,
    /// Retired ids that a handle (or a page in use) still held at their
    /// retirement: freed by a later [`Shared::new_id`] once nothing does.
    pub(crate) retired: Mutex<Vec<(u32, std::sync::Weak<Entry>)>>,
    /// Readahead windows on their way to the readahead thread.
    pub(crate) ahead: Ahead,
    /// Where reads of runs of pages land before their frames.
    pub(crate) staging: Staging,
    /// The futures' I/O workers: state of the layer above, which this layer
    /// only stops.
    pub(crate) aio: std::sync::OnceLock<Box<dyn Workers>>,
    /// Counts opens, to stamp `Entry::opened`.
    pub(crate) opens: AtomicU64,
    /// Entries without a handle kept in the table, at most (past it,
    /// [`Shared::trim_idle`] syncs and retires the least recently opened).
    pub(crate) idle_keep: AtomicUsize,
    /// The table's size at which an open next looks for idle entries.
    pub(crate) trim_at: AtomicUsize,
    /// One trim at a time.
    pub(crate) trimming: Mutex<()>,
    /// Set by `CachedStore::discard_at_close`: the last handle's drop gives
    /// the dirty pages up instead of writing them back.
    pub(crate) discard: AtomicBool,
    /// The process that made the cache: a child made by `fork` that drops
    /// the last handle writes nothing back (its pages are the parent's).
    pub(crate) origin: Origin,
}

/// Threads a layer above keeps for the store (the futures' I/O workers):
/// stopped with the store, otherwise opaque here.
pub(crate) trait Workers: Send + Sync {
    /// Stop the threads once the requests they hold are done; later requests
    /// fail with [`Error::Closed`]. Whether the caller is one of them (a
    /// task it woke dropped the store's handle), which stops on its own once
    /// idle and is not waited for.
    fn stop(&self) -> bool;
    /// The concrete type, for its owner.
    fn as_any(&self) -> &dyn std::any::Any;
}

/// In place of workers that were never started when the store closes: its
/// presence refuses a later start.
struct NoWorkers;

impl Workers for NoWorkers {
    fn stop(&self) -> bool {
        false
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// Pages to read ahead: `pages` pages of cache file `id` from `first`.
pub(crate) struct Window {
    pub(crate) entry: Arc<Entry>,
    pub(crate) id: u32,
    pub(crate) first: u64,
    pub(crate) pages: u64,
}

/// The hand-off between readers and the readahead thread.
pub(crate) struct Ahead {
    /// Windows not yet started, and whether the thread is to stop.
    pub(crate) queue: Mutex<(VecDeque<Window>, bool)>,
    pub(crate) cv: Condvar,
    /// The largest window in pages; 0 turns readahead off.
    pub(crate) max_pages: AtomicUsize,
    /// The thread waits for work: no window queued or being read and no
    /// read in flight (written under `queue`'s lock).
    pub(crate) waiting: AtomicBool,
    /// The thread ended by a panic (set with the queue's stop flag).
    pub(crate) failed: AtomicBool,
}

/// What became of a window handed to the readahead thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pushed {
    /// It waits for the thread.
    Queued,
    /// As many windows as the bound allows wait already: it was dropped.
    Full,
    /// The thread has stopped: it was dropped.
    Stopped,
}

impl Ahead {
    pub(crate) fn new(max_pages: usize) -> Ahead {
        Ahead {
            queue: Mutex::new((VecDeque::new(), false)),
            cv: Condvar::new(),
            max_pages: AtomicUsize::new(max_pages),
            waiting: AtomicBool::new(false),
            failed: AtomicBool::new(false),
        }
    }

    /// No window waits and the thread has none to read (or has stopped).
    pub(crate) fn idle(&self) -> bool {
        let q = self.queue.lock().unwrap_or_else(|p| p.into_inner());
        q.1 || (q.0.is_empty() && self.waiting.load(Ordering::Relaxed))
    }

    /// The error for work the stopped thread will not do: the store is
    /// closing, or the thread ended by a panic.
    pub(crate) fn stopped_error(&self) -> Error {
        if self.failed.load(Ordering::Relaxed) {
            Error::ThreadEnded("the store's readahead thread".into())
        } else {
            Error::Closed
        }
    }

    /// Hand a stream's window `w` to the readahead thread, unless
    /// [`Ahead::STREAM_QUEUE`] windows wait already (then `w` is dropped:
    /// readahead is a hint, and a thread that asks for windows faster than
    /// the device reads them, such as small reads in steps on a file
    /// advised sequential, must not queue work and memory without bound).
    pub(crate) fn push_stream(&self, w: Window) {
        self.push_within(w, Self::STREAM_QUEUE);
    }

    /// Most windows waiting for the readahead thread that a stream adds to.
    pub(crate) const STREAM_QUEUE: usize = 256;

    /// Hand `w` to the readahead thread unless `limit` windows wait already.
    pub(crate) fn push_within(&self, w: Window, limit: usize) -> Pushed {
        let mut q = self.queue.lock().unwrap_or_else(|p| p.into_inner());
        if q.1 {
            return Pushed::Stopped;
        }
        if q.0.len() >= limit {
            return Pushed::Full;
        }
        q.0.push_back(w);
        self.cv.notify_one();
        Pushed::Queued
    }
}

/// What the cache needs of an open file: where its pages go, and its first
/// write-back failure not yet reported.
pub(crate) struct Entry {
    pub(crate) file: File,
    /// The most the file's length shows through the cache (`u64::MAX`: its
    /// own length). An extending write keeps it at the old length while it
    /// grows the file and writes, so that readers see the new length only
    /// with the bytes in ([`crate::CachedFile::write_extending`]).
    pub(crate) shown: AtomicU64,
    /// Serialises extending writes.
    pub(crate) extending: Mutex<()>,
    /// Length changes made through the cache, counted under `resizing`: a
    /// failed extending write cuts back only what it grew, only if nothing
    /// else changed the length since.
    pub(crate) resizes: AtomicU64,
    pub(crate) failed: Mutex<Option<Error>>,
    /// The file was deleted or replaced: its cache id is retired.
    pub(crate) gone: AtomicBool,
    /// What its fsyncs have covered.
    pub(crate) durable: Mutex<Durable>,
    /// Set once `durable` holds a page written back, and cleared by a good
    /// fsync that leaves none: a fill of the file looks at `durable` only
    /// while it is set (`Entry::note_fill`). Never set in direct I/O, where
    /// no kernel cache can drop a page between its write and the fsync.
    pub(crate) tracked: AtomicBool,
    /// Failed fsyncs of the cache's syncs of the file. A write-back sent
    /// before one and reaped after it may have been dropped by it, unseen by
    /// that sync (which rewrites the pages reaped before it): such a page
    /// stays dirty, to be written again.
    pub(crate) fsync_failures: AtomicU64,
    /// The file's count of failed metadata fsyncs its syncs have answered
    /// (`File::meta_fsync_failures`).
    pub(crate) meta_fsyncs_seen: AtomicU64,
    /// Serialises length changes through the cache.
    pub(crate) resizing: Mutex<()>,
    /// Set by a shrink: writes that raced it may have left pages past the end,
    /// which the next growth drops first.
    pub(crate) shrunk: AtomicBool,
    /// Serialises the file's syncs: a sync that met a failed fsync makes its
    /// pages dirty again before the next sync starts writing.
    pub(crate) syncing: Mutex<()>,
    /// The pages the sync that holds `syncing` waits for while others use
    /// them (empty while it waits for none), each with whether it waited for
    /// the page's write-back (true) or for its writer or readers, as it found
    /// them in its latest round: a thread that holds a guard of one it waits
    /// for the readers of, or owes the write-back of one, and would wait for
    /// `syncing` (or a lock whose holder waits for it) is refused instead of
    /// waiting for ever.
    pub(crate) sync_waits: Mutex<Vec<(u64, bool)>>,
    /// How the file will be read (`readahead::Advice` as a number).
    pub(crate) advice: AtomicU8,
    /// Writable paged arrays of word elements made (or being made) over the
    /// file. Such an array stores elements into the frames in place under
    /// shared pins, which no shared page reference (a `&[u8]` of a frame) may
    /// outlive or meet: while this is above zero, shared references are
    /// refused ([`Entry::refs_allowed`]). It never falls once an array is made.
    pub(crate) word_arrays: AtomicUsize,
    /// Pins the futures' workers have handed to page futures of this file
    /// that no guard has taken yet nor a drop released: a sync that finds
    /// pages held past the pin wait while some are parked fails `Busy`
    /// instead of waiting for tasks that may be waiting for it.
    pub(crate) parked_pins: AtomicUsize,
    /// When it was last opened (`Shared::opens`), set under the table's
    /// lock: a trim retires only an entry not opened since it synced it.
    pub(crate) opened: AtomicU64,
}

/// The pages of a file written back since its last good fsync, and whether a
/// failed fsync left pages that can no longer be written again.
#[derive(Default)]
pub(crate) struct Durable {
    pub(crate) written: PageSet,
    /// The pages a sync took from `written` for its fsync, while that fsync
    /// has not answered: back into `written` if it fails.
    pub(crate) covering: PageSet,
    /// Pages of `written` or `covering` read into the cache again since
    /// (they had left it after their write-back), since the last loss was
    /// recorded. What the devices returned may be what a failed write-back
    /// dropped: should an fsync fail before a good one covers them, they
    /// count as lost, as pages that never came back do. A loss recorded
    /// takes them with it (what they hold is the loss's, accepted with it).
    pub(crate) refilled: PageSet,
    /// Set when an fsync failed after a page that has since left the cache
    /// was written: the error of the oldest loss no handle has accepted
    /// (number `lost_at`). A handle's syncs fail with it until the handle
    /// accepts the loss (see `LossSeen`).
    pub(crate) lost: Option<Error>,
    pub(crate) lost_at: u64,
    /// The errors of the unaccepted losses after `lost`'s, oldest first (at
    /// most `LATER_LOSSES`; past that a loss's error is not kept, and the
    /// last kept one stands for it): an acceptance of some of them reports
    /// the next one's own error.
    pub(crate) later: std::collections::VecDeque<(u64, Error)>,
    /// Losses recorded so far (each failed fsync that left one counts, on
    /// top of those before): a loss is known by this number.
    pub(crate) lost_gen: u64,
    /// The newest loss some sync reported to its caller (a handle's, or the
    /// store's; not the idle-file trim's, which tells no one).
    pub(crate) reported_gen: u64,
    /// The newest loss some handle accepted: handles already told of it
    /// (`LossSeen::told`) pass, and the store's sync does.
    pub(crate) accepted_gen: u64,
    /// Write-backs noted in `written` so far (wrapping): a look that lets
    /// the lock go and takes it again knows whether any came meanwhile.
    pub(crate) notes: u64,
}

/// One open's view of the losses failed fsyncs left in its file
/// (`Durable::lost`), shared by the handle's clones: a sync through the
/// handle fails with a loss newer than the last it accepted, unless it was
/// told of it and some handle accepted it. So a loss reaches every handle
/// that was open when it happened, and a later open for writing accepts only
/// what some sync has reported (a loss no one was told of reaches it too).
#[derive(Default)]
pub(crate) struct LossSeen {
    /// The newest loss this handle accepted (by its open, or explicitly).
    pub(crate) accepted: AtomicU64,
    /// The newest loss a sync through this handle reported.
    pub(crate) told: AtomicU64,
}

/// Most errors of unaccepted losses kept after the oldest's (`Durable::later`).
const LATER_LOSSES: usize = 16;

/// Who asks for a sync of a file, for the losses it is told of.
#[derive(Clone, Copy)]
pub(crate) enum Asker<'a> {
    /// A handle of the file.
    Handle(&'a LossSeen),
    /// A handle of the file whose caller cannot pass the error on (a last
    /// close by a layer that reports it on stderr only): fails as `Handle`
    /// does, and counts no one as told.
    Quiet(&'a LossSeen),
    /// The store's sync, which reports one file's error of all it met: told
    /// of the losses no handle accepted. The number of the loss it met is
    /// left here; the loss counts as reported only if the store's sync
    /// returns that file's error (`Durable::heard`).
    Store(&'a AtomicU64),
    /// A sync whose error reaches no one (the trimming of idle files; a
    /// store sync whose caller cannot pass an error on): fails on the
    /// losses no handle accepted, and tells no one of them (a later open
    /// does not accept them, and the trim keeps the entry).
    NoOne,
}

impl Durable {
    /// Record a loss; its number. Its error is the file's unless an earlier
    /// loss is still to be accepted (that one's error stays: the first).
    /// The pages read back so far go with it (see `refilled`).
    pub(crate) fn record_loss(&mut self, err: Error) -> u64 {
        let number = self.lost_gen + 1;
        if self.lost.is_none() || self.accepted_gen >= self.lost_gen {
            self.lost = Some(err);
            self.lost_at = number;
            self.later.clear();
        } else if self.later.len() < LATER_LOSSES {
            self.later.push_back((number, err));
        }
        self.lost_gen = number;
        self.refilled = Default::default();
        self.lost_gen
    }

    /// The loss `who` is to be told of, if any.
    pub(crate) fn loss_for(&self, who: Asker<'_>) -> Option<Error> {
        let newest = self.lost_gen;
        let passes = match who {
            Asker::Handle(h) | Asker::Quiet(h) => {
                h.accepted.load(Ordering::Acquire) >= newest
                    || (h.told.load(Ordering::Acquire) >= newest && self.accepted_gen >= newest)
            }
            Asker::Store(_) | Asker::NoOne => self.accepted_gen >= newest,
        };
        if passes { None } else { self.lost.clone() }
    }

    /// A sync asked by `who` is reporting loss number `loss` to its caller.
    pub(crate) fn reported(&mut self, loss: u64, who: Asker<'_>) {
        match who {
            Asker::Handle(h) => {
                h.told.fetch_max(loss, Ordering::AcqRel);
                self.heard(loss);
            }
            Asker::Store(met) => {
                met.fetch_max(loss, Ordering::AcqRel);
            }
            Asker::Quiet(_) | Asker::NoOne => {}
        }
    }

    /// Loss number `loss` reached the caller of a sync: a later open for
    /// writing accepts it.
    pub(crate) fn heard(&mut self, loss: u64) {
        self.reported_gen = self.reported_gen.max(loss);
    }

    /// Handle `h` accepts the losses up to `upto`. Returns whether it had
    /// one to accept.
    pub(crate) fn accept(&mut self, h: &LossSeen, upto: u64) -> bool {
        let had =
            self.loss_for(Asker::Handle(h)).is_some() && upto > h.accepted.load(Ordering::Acquire);
        h.accepted.fetch_max(upto, Ordering::AcqRel);
        self.accepted_gen = self.accepted_gen.max(upto);
        self.reported_gen = self.reported_gen.max(upto);
        // The oldest loss still unaccepted gives the error from now on.
        while self.lost_at <= self.accepted_gen {
            let Some((number, err)) = self.later.pop_front() else {
                break;
            };
            self.lost = Some(err);
            self.lost_at = number;
        }
        had
    }
}

/// A set of page numbers: a bitmap of 4096 pages (512 bytes) per chunk that
/// holds any, so that memory follows the pages written, not the file's size.
#[derive(Default)]
pub(crate) struct PageSet {
    pub(crate) chunks: std::collections::BTreeMap<u64, Box<[u64; PAGESET_WORDS]>>,
}

const PAGESET_WORDS: usize = 64;
const PAGESET_PAGES: u64 = PAGESET_WORDS as u64 * 64;

impl PageSet {
    pub(crate) fn insert(&mut self, page: u64) {
        let c = self
            .chunks
            .entry(page / PAGESET_PAGES)
            .or_insert_with(|| Box::new([0; PAGESET_WORDS]));
        let i = page % PAGESET_PAGES;
        c[(i / 64) as usize] |= 1 << (i % 64);
    }

    pub(crate) fn remove(&mut self, page: u64) {
        let i = page % PAGESET_PAGES;
        if let Some(c) = self.chunks.get_mut(&(page / PAGESET_PAGES)) {
            c[(i / 64) as usize] &= !(1 << (i % 64));
        }
    }

    pub(crate) fn contains(&self, page: u64) -> bool {
        let i = page % PAGESET_PAGES;
        self.chunks
            .get(&(page / PAGESET_PAGES))
            .is_some_and(|c| c[(i / 64) as usize] & (1 << (i % 64)) != 0)
    }

    /// Keep only the pages that `other` holds too.
    pub(crate) fn retain_in(&mut self, other: &PageSet) {
        self.chunks.retain(|k, c| {
            let Some(o) = other.chunks.get(k) else {
                return false;
            };
            for (w, &ow) in c.iter_mut().zip(o.iter()) {
                *w &= ow;
            }
            c.iter().any(|&w| w != 0)
        });
    }

    /// Whether no page is in the set.
    pub(crate) fn is_empty(&self) -> bool {
        self.chunks.values().all(|c| c.iter().all(|&w| w == 0))
    }

    /// Drop the pages from `from` on.
    pub(crate) fn truncate(&mut self, from: u64) {
        let first = from / PAGESET_PAGES;
        let _ = self.chunks.split_off(&(first + 1));
        if let Some(c) = self.chunks.get_mut(&first) {
            let i = from % PAGESET_PAGES;
            for (w, word) in c.iter_mut().enumerate() {
                let base = w as u64 * 64;
                if base >= i {
                    *word = 0;
                } else if base + 64 > i {
                    *word &= (1u64 << (i - base)) - 1;
                }
            }
        }
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = u64> + '_ {
        self.chunks.iter().flat_map(|(&c, words)| {
            words.iter().enumerate().flat_map(move |(w, &b)| {
                (0..64)
                    .filter(move |i| b & (1 << i) != 0)
                    .map(move |i| c * PAGESET_PAGES + w as u64 * 64 + i)
            })
        })
    }
}

impl Drop for Entry {
    fn drop(&mut self) {
        // One cache fewer holds the file's pages.
        self.file.inner.cached.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Entry {
    pub(crate) fn new(file: File) -> Entry {
        file.inner.cached.fetch_add(1, Ordering::AcqRel);
        // Failed fsyncs from before the cache held the file concern no page
        // of its.
        let seen = file.meta_fsync_failures();
        Entry {
            file,
            shown: AtomicU64::new(u64::MAX),
            extending: Mutex::new(()),
            resizes: AtomicU64::new(0),
            failed: Mutex::new(None),
            gone: AtomicBool::new(false),
            durable: Mutex::new(Durable::default()),
            tracked: AtomicBool::new(false),
            fsync_failures: AtomicU64::new(0),
            meta_fsyncs_seen: AtomicU64::new(seen),
            resizing: Mutex::new(()),
            shrunk: AtomicBool::new(false),
            syncing: Mutex::new(()),
            sync_waits: Mutex::new(Vec::new()),
            advice: AtomicU8::new(0),
            word_arrays: AtomicUsize::new(0),
            parked_pins: AtomicUsize::new(0),
            opened: AtomicU64::new(0),
        }
    }

    /// `Ok` unless a writable paged array of word elements lives on the file,
    /// for a caller that has just pinned one of its pages to hand out a shared
    /// reference. The fence pairs with the one in
    /// `CachedFile::begin_word_stores`: either that call's wait sees the
    /// caller's pin, or this sees its count.
    pub(crate) fn refs_allowed(&self) -> Result<()> {
        std::sync::atomic::fence(Ordering::SeqCst);
        if self.word_arrays.load(Ordering::Relaxed) > 0 {
            return Err(Error::InvalidArgument(format!(
                "file {:?} holds a writable paged array of word elements, whose \
                 stores change its pages in place: shared page references to it \
                 are refused (read it through the array, or open the array read-only)",
                self.file.name()
            )));
        }
        Ok(())
    }

    /// `Err` if the file is gone.
    pub(crate) fn check(&self) -> Result<()> {
        if self.gone.load(Ordering::Acquire) {
            Err(Error::FileGone(self.file.name()))
        } else {
            Ok(())
        }
    }

    /// Remember that `pages` reached the devices (for the fsync that must
    /// cover them).
    /// The count of failed fsyncs now, for a write-back being sent.
    pub(crate) fn fsync_epoch(&self) -> u64 {
        self.fsync_failures.load(Ordering::Acquire)
    }

    /// Note `pages`, written back by a write sent at fsync epoch `epoch`, as
    /// written since the last good fsync; false, noting nothing, if an fsync
    /// failed since it was sent: then it may have been dropped, and its pages
    /// must stay dirty. (Checked under the lock a failed sync takes to look at
    /// what was written: a write noted before its failure is written again
    /// by it.)
    pub(crate) fn written_at(&self, epoch: u64, pages: impl IntoIterator<Item = u64>) -> bool {
        let mut d = self.durable();
        if self.fsync_failures.load(Ordering::Acquire) != epoch {
            return false;
        }
        for p in pages {
            self.note_written(&mut d, p);
        }
        true
    }

    /// Note page `p` written back since the last good fsync; `d` is this
    /// entry's `durable`, locked.
    pub(crate) fn note_written(&self, d: &mut Durable, p: u64) {
        d.written.insert(p);
        d.notes = d.notes.wrapping_add(1);
        if !self.tracked.load(Ordering::Relaxed) && !self.file.inner.store.direct_io() {
            self.tracked.store(true, Ordering::Release);
        }
    }

    /// Page `page` is about to be read into the cache from the devices. If
    /// it was written back since the last good fsync, it has left the cache
    /// since: note it (`Durable::refilled`). One load when the file has no
    /// such page, or is read with direct I/O: there the devices return what
    /// was written (a failed fsync leaves it unknown whether it is durable,
    /// and writing it again settles that).
    #[inline]
    pub(crate) fn note_fill(&self, page: u64) {
        if self.tracked.load(Ordering::Acquire) {
            self.note_refill(page);
        }
    }

    #[cold]
    fn note_refill(&self, page: u64) {
        let mut d = self.durable();
        if d.written.contains(page) || d.covering.contains(page) {
            d.refilled.insert(page);
        }
    }

    /// Remember a failed write-back for the next `sync`. A write refused
    /// because the file shrank after it was prepared is no failure: its pages
    /// stay dirty and the next write-back writes what is still inside.
    pub(crate) fn remember(&self, err: Error) {
        if matches!(err, Error::OutOfRange { .. }) {
            return;
        }
        self.failed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_or_insert(err);
    }

    pub(crate) fn durable(&self) -> std::sync::MutexGuard<'_, Durable> {
        self.durable.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // The last handle of the store (its `CachedStore`, a file, a page
        // future's pin) is gone: what is still dirty is written back and
        // synced now, as a close of the store would, unless the store was
        // discarded or this is a child made by `fork`.
        if !self.origin.is_here() {
            // A child made by `fork`: the futures' workers are the parent's
            // threads (their handles are not let go of here), and the store's
            // drop leaves the parent's steps and engines alone.
            if let Some(w) = self.aio.take() {
                std::mem::forget(w);
            }
            return;
        }
        if !self.discard.load(Ordering::Acquire) {
            self.sync_at_close();
        }
        self.store.release_from_cache();
    }
}

impl Shared {
    /// The sync of a store whose last handle goes (see `Drop`), run where no
    /// handle is left to let go of a page: a page still held (a guard leaked
    /// with `mem::forget`) fails its file's sync at once instead of being
    /// waited for. The errors have no caller to go to: stderr. A loss no
    /// handle accepted fails its file's sync before the fsync; each such
    /// file's oldest unaccepted loss is printed, every one is then accepted
    /// (no handle is left to), and the
    /// store is synced again, so that the pages written since are made
    /// durable.
    pub(crate) fn sync_at_close(&self) {
        let say = |e: &Error| {
            let said = format!(
                "setcache: a cached store closed by its last handle's drop: its sync failed: \
                 {e} (CachedStore::close reports this)"
            );
            use std::io::Write;
            let _ = writeln!(std::io::stderr(), "{said}");
        };
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let Err(e) = self.sync_all(false, false) else {
                return;
            };
            if !matches!(e, Error::SyncLost { .. }) {
                say(&e);
            }
            let losses = self.accept_every_loss();
            for loss in &losses {
                say(loss);
            }
            if losses.is_empty() {
                return;
            }
            if let Err(again) = self.sync_all(false, false)
                && again.to_string() != e.to_string()
            {
                say(&again);
            }
        }));
    }

    /// Accept every file's losses (see [`Shared::sync_at_close`]); the
    /// error of each file that had one.
    fn accept_every_loss(&self) -> Vec<Error> {
        let entries: Vec<Arc<Entry>> = self
            .files
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect();
        let mut had = Vec::new();
        for e in entries {
            let mut d = e.durable();
            let newest = d.lost_gen;
            if d.accepted_gen < newest {
                if let Some(lost) = d.loss_for(Asker::NoOne) {
                    had.push(Error::SyncLost {
                        file: e.file.name(),
                        first: Box::new(lost),
                    });
                }
                d.accept(&LossSeen::default(), newest);
            }
        }
        had
    }
}

/// How many entries without a handle a cache of a store of `devices`
/// devices keeps (`Shared::idle_keep`): a quarter of the descriptors the
/// process may open, one per device each, between 1 and 1,024 entries (a
/// floor above what the limit allows would spend descriptors the program
/// needs: 16 idle files of 24 devices are 384 of 1,024).
pub(crate) fn idle_keep(devices: usize) -> usize {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the limit into `lim`, which outlives the call.
    let nofile = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 {
        lim.rlim_cur
    } else {
        1024
    };
    let per = nofile / 4 / devices.max(1) as u64;
    per.clamp(1, 1024) as usize
}

/// Whether `e` says the process (or the system) is out of descriptors.
pub(crate) fn out_of_descriptors(e: &Error) -> bool {
    matches!(e.errno(), Some(libc::EMFILE | libc::ENFILE))
}

/// Retired ids still held at their retirement that gather before a
/// [`Shared::new_id`] looks whether they can be freed.
const RECLAIM_AT: usize = 32;

/// Take the entries of `ids` out of the file table `files`, marked gone
/// (their handles fail from now on), for [`Shared::retire`] once the table's
/// lock is let go (write-backs in flight take it as they finish).
pub(crate) fn unlist(
    files: &mut HashMap<u32, Arc<Entry>>,
    ids: Vec<u32>,
) -> Vec<(u32, Arc<Entry>)> {
    let dead: Vec<(u32, Arc<Entry>)> = ids
        .into_iter()
        .filter_map(|id| files.remove(&id).map(|e| (id, e)))
        .collect();
    for (_, e) in &dead {
        e.gone.store(true, Ordering::Release);
    }
    dead
}

impl Shared {
    /// Stop the workers a layer above started for this store, and refuse
    /// their start from now on if none were started. Whether the caller is
    /// one of them (see [`Workers::stop`]).
    pub(crate) fn stop_workers(&self) -> bool {
        self.aio.get_or_init(|| Box::new(NoWorkers)).stop()
    }

    /// Sync every file of the store (see `CachedStore::sync`); `told`: the
    /// first error's loss counts as reported. The caller holds no guard of
    /// the store.
    /// Without `wait`, a file whose sync would wait for pages others hold
    /// fails `Busy` at once (see [`Shared::sync_file_as`]).
    pub(crate) fn sync_all(&self, told: bool, wait: bool) -> Result<()> {
        self.retire_finished();
        // Files deleted or replaced through the store itself, not the
        // cache: nothing of them is to be synced (their backing files are
        // gone, and each sync would fail on them).
        self.retire_stale(None);
        // With their entries: a file deleted meanwhile is told by its own
        // entry, retired, not by its id, which may name another file by then.
        let files: Vec<(u32, Arc<Entry>)> = self
            .files
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(&id, e)| (id, e.clone()))
            .collect();
        let mut first = None;
        for (id, entry) in files {
            // The loss this file's sync met, if any: reported only if its
            // error is the one returned (another file's loss stays unheard,
            // for its next open to meet).
            let met = AtomicU64::new(0);
            let who = if told && first.is_none() {
                Asker::Store(&met)
            } else {
                Asker::NoOne
            };
            // (The caller holds no guard of the store.)
            match self.sync_file_as(id, wait, who, &Guards::NONE) {
                // Deleted meanwhile: nothing of it is to be synced.
                Err(_) if entry.gone.load(Ordering::Acquire) => {}
                // Deleted or replaced through the store while this sync
                // looked at its backing files, its entry not yet retired by
                // the thread that did it: as deleted.
                Err(Error::FileGone(_) | Error::BackingGone { .. }) if self.retired_now(&entry) => {
                }
                Err(e) => {
                    if first.is_none() {
                        let loss = met.load(Ordering::Acquire);
                        if loss > 0 {
                            entry.durable().heard(loss);
                        }
                        first = Some(e);
                    }
                }
                Ok(()) => {}
            }
        }
        first.map_or(Ok(()), Err)
    }

    /// Whether the file of entry `e` is retired once the store is asked whether
    /// it still names that file (a delete or replacement the store has
    /// committed retires it here, as the thread that made it is about to).
    pub(crate) fn retired_now(&self, e: &Entry) -> bool {
        self.retire_stale(Some(&e.file.name()));
        e.gone.load(Ordering::Acquire)
    }

    /// Retire the entries that are no longer the store's file of their name
    /// (a delete or a replace took it), of the name `name` or, with `None`,
    /// of any name.
    pub(crate) fn retire_stale(&self, name: Option<&str>) {
        let dead = self.store.inner().with_current(|current| {
            let mut files = self.files.write().unwrap_or_else(|p| p.into_inner());
            let ids: Vec<u32> = files
                .iter()
                .filter(|(_, e)| {
                    let n = e.file.name_arc();
                    name.is_none_or(|name| *n == *name) && !current(&n, &e.file.inner)
                })
                .map(|(&id, _)| id)
                .collect();
            unlist(&mut files, ids)
        });
        for (id, e) in dead {
            self.retire(id, e);
        }
    }

    /// If the store finished an operation that had failed part-way since
    /// this cache last looked (a later operation finishes it), retire the
    /// files it took the name from: a delete or replace finished that way
    /// leaves no handle of the old file working on its unlinked pieces, and
    /// no sync of the store failing on them. One atomic load otherwise.
    pub(crate) fn retire_finished(&self) {
        let n = self.store.inner().finished_later();
        if n == self.finished_seen.load(Ordering::Acquire) {
            return;
        }
        // Counted as seen only after the sweep: a thread that finds it
        // counted finds the files retired (two sweeps at once do no harm).
        self.retire_stale(None);
        self.finished_seen.fetch_max(n, Ordering::AcqRel);
    }

    /// Retire a file's cache id (its entry already left the table): handles
    /// fail from now on, and its pages are dropped. Pages still in use are
    /// left; should one of them be dirty, its write-back finds no file and
    /// drops it.
    pub(crate) fn retire(&self, id: u32, e: Arc<Entry>) {
        e.gone.store(true, Ordering::Release);
        // The id may name another file once no page of it is left and no
        // handle could still use it (this is the last reference: the entry
        // left the table, so nobody can take a new one). A handle's whole-page
        // write that passed its check before `gone` may have brought a page
        // in after the first pass; once no handle is left nothing more can,
        // so a second pass then finds what did, before the id is freed.
        if self.cache.discard(id, 0).is_ok() && Arc::strong_count(&e) == 1 {
            std::sync::atomic::fence(Ordering::Acquire);
            if self.cache.discard(id, 0).is_ok() {
                self.free_ids
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(id);
                return;
            }
        }
        // Held still: a later `new_id` frees it once nothing holds it.
        self.retired
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((id, Arc::downgrade(&e)));
    }

    /// The longest file: the cache's page numbers' reach, within the store's
    /// largest length.
    pub(crate) fn max_file_len(&self) -> u64 {
        let ps = self.cache.page_size() as u64;
        (crate::cache::MAX_PAGE + 1)
            .saturating_mul(ps)
            .min(crate::storage::header::MAX_LEN)
    }

    /// `Ok` if a file of `len` bytes fits the cache's page numbers
    /// (`cache::MAX_PAGE`), refused before any store step otherwise: its pages
    /// past them could never be cached.
    pub(crate) fn check_len(&self, name: &str, len: u64) -> Result<()> {
        let ps = self.cache.page_size() as u64;
        let most = self.max_file_len();
        if len > most {
            return Err(Error::InvalidArgument(format!(
                "file {name:?}: a length of {len} bytes is past the most a cache of \
                 {ps}-byte pages holds, {most} bytes"
            )));
        }
        Ok(())
    }

    /// As [`Shared::check_len`], for a file being opened whose length is
    /// `len`: one made through a cache of larger pages may be longer than
    /// this cache's page numbers reach.
    pub(crate) fn check_open_len(&self, name: &str, len: u64) -> Result<()> {
        let ps = self.cache.page_size() as u64;
        let most = self.max_file_len();
        if len > most {
            return Err(Error::InvalidArgument(format!(
                "file {name:?} is {len} bytes long, past the most a cache of {ps}-byte \
                 pages holds, {most} bytes: open it through a cache of larger pages"
            )));
        }
        Ok(())
    }

    /// If more entries than `idle_keep` have no handle, sync the least
    /// recently opened of them (without waiting for pages in use or another
    /// sync) and retire those that synced and were not opened meanwhile,
    /// down to three quarters of `idle_keep`: each holds its file's
    /// descriptors, and a process that opens many files in turn would run
    /// out of them. Their pages go (clean, after the sync); an entry whose
    /// sync fails stays, with the failure its next sync reports. The table
    /// is looked at again once it has grown by a quarter of `idle_keep`.
    pub(crate) fn trim_idle(&self) {
        self.trim_idle_to(self.idle_keep.load(Ordering::Relaxed));
    }

    /// Out of descriptors: retire every entry without a handle that syncs
    /// without waiting (their descriptors go), so that an open or create
    /// can be tried again.
    pub(crate) fn shed_idle(&self) {
        self.trim_idle_to(0);
    }

    /// [`Shared::trim_idle`] down to three quarters of `keep` entries
    /// without a handle.
    fn trim_idle_to(&self, keep: usize) {
        let Ok(_one) = self.trimming.try_lock() else {
            return;
        };
        let mut idle: Vec<(u64, u32)> = self
            .files
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|(_, e)| Arc::strong_count(e) == 1)
            .map(|(&id, e)| (e.opened.load(Ordering::Acquire), id))
            .collect();
        if idle.len() > keep {
            idle.sort_unstable();
            idle.truncate(idle.len() - keep * 3 / 4);
            // Synced now: nothing of theirs is owed to a later sync.
            // (A loss no handle accepted fails the sync: the entry stays
            // with it, for the file's next open to be told.)
            idle.retain(|&(_, id)| {
                self.sync_file_as(id, false, Asker::NoOne, &Guards::NONE)
                    .is_ok()
            });
            let dead = {
                let mut files = self.files.write().unwrap_or_else(|p| p.into_inner());
                let ids: Vec<u32> = idle
                    .iter()
                    .filter(|&&(opened, id)| {
                        files.get(&id).is_some_and(|e| {
                            Arc::strong_count(e) == 1 && e.opened.load(Ordering::Acquire) == opened
                        })
                    })
                    .map(|&(_, id)| id)
                    .collect();
                unlist(&mut files, ids)
            };
            self.retire_idle(dead);
        }
        let len = self.files.read().unwrap_or_else(|p| p.into_inner()).len();
        let every = self.idle_keep.load(Ordering::Relaxed) / 4;
        self.trim_at.store(len + every.max(1), Ordering::Relaxed);
    }

    /// Retire entries that had no handle when they left the table: as
    /// [`Shared::retire`], with one walk of the cache for them all (no handle
    /// can bring a page of theirs in any more).
    fn retire_idle(&self, mut dead: Vec<(u32, Arc<Entry>)>) {
        if dead.is_empty() {
            return;
        }
        dead.sort_unstable_by_key(|&(id, _)| id);
        let ids: Vec<u32> = dead.iter().map(|&(id, _)| id).collect();
        let dropped = self.cache.discard_files(&ids).is_ok();
        let mut free = self.free_ids.lock().unwrap_or_else(|p| p.into_inner());
        let mut held = Vec::new();
        for (id, e) in dead {
            if dropped && Arc::strong_count(&e) == 1 {
                free.push(id);
            } else {
                held.push((id, Arc::downgrade(&e)));
            }
        }
        drop(free);
        self.retired
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(held);
    }

    /// Free the retired ids that no handle holds any more and whose pages
    /// are all gone (without waiting for pages in use); how many. Each id
    /// looked at costs a walk of the cache, under the file table's lock: so
    /// only once `RECLAIM_AT` have gathered, or the ids run short.
    fn reclaim(&self) -> usize {
        let held = {
            let mut r = self.retired.lock().unwrap_or_else(|p| p.into_inner());
            let short = self.next_id.load(Ordering::Relaxed) > MAX_FILE_ID / 2;
            if r.is_empty() || (r.len() < RECLAIM_AT && !short) {
                return 0;
            }
            std::mem::take(&mut *r)
        };
        let (mut freed, mut kept) = (Vec::new(), Vec::new());
        for (id, w) in held {
            // No handle left: none can bring a page in any more (the
            // argument of `retire`'s second pass).
            if w.strong_count() == 0 && {
                std::sync::atomic::fence(Ordering::Acquire);
                self.cache.discard_idle(id)
            } {
                freed.push(id);
            } else {
                kept.push((id, w));
            }
        }
        self.retired
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(kept);
        let n = freed.len();
        self.free_ids
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(freed);
        n
    }

    /// A cache id for a newly opened file: a retired one whose pages are all
    /// gone (and that no handle holds), or the next unused one.
    pub(crate) fn new_id(&self) -> Result<u32> {
        let pop = || {
            self.free_ids
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .pop()
        };
        if let Some(id) = pop() {
            return Ok(id);
        }
        if self.reclaim() > 0
            && let Some(id) = pop()
        {
            return Ok(id);
        }
        self.next_id
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (n <= MAX_FILE_ID).then_some(n + 1)
            })
            .map_err(|_| {
                Error::InvalidArgument(format!(
                    "more than {} files open through one cache",
                    MAX_FILE_ID as u64 + 1
                ))
            })
    }

    /// Remember that `pages` of file `id` reached the devices (for the fsync
    /// that must cover them).
    /// As [`Entry::written_at`] for the file of cache id `id` (true if the
    /// file is no longer open).
    pub(crate) fn written_at(
        &self,
        id: u32,
        epoch: u64,
        pages: impl IntoIterator<Item = u64>,
    ) -> bool {
        self.entry(id).map_or(true, |e| e.written_at(epoch, pages))
    }

    /// The fsync epoch of the file of cache id `id` (0 if not open).
    pub(crate) fn fsync_epoch(&self, id: u32) -> u64 {
        self.entry(id).map_or(0, |e| e.fsync_epoch())
    }

    pub(crate) fn entry(&self, id: u32) -> Result<Arc<Entry>> {
        self.files
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&id)
            .cloned()
            .ok_or_else(|| Error::InvalidArgument(format!("cache file id {id} is not open")))
    }

    /// Read page `page` of file `id` into `frame` (zeros past the end). A
    /// file that ends inside a sector is read to the end of that sector, and
    /// the bytes past its end are zeroed: a frame never holds bytes past the
    /// end of its file.
    pub(crate) fn load(&self, id: u32, page: u64, frame: &mut [u8]) -> Result<()> {
        Shared::load_of(&*self.entry(id)?, page, frame)
    }

    /// [`Shared::load`] for a file whose entry the caller holds (no table lookup).
    pub(crate) fn load_of(e: &Entry, page: u64, frame: &mut [u8]) -> Result<()> {
        e.check()?;
        e.note_fill(page);
        let ps = frame.len() as u64;
        let off = page * ps;
        loop {
            let len = e.file.len();
            let n = len.saturating_sub(off).min(ps) as usize;
            #[cfg(test)]
            if let Some(between) = AFTER_LOAD_LENGTH.take(e as *const Entry as usize) {
                between();
            }
            if n > 0 {
                let whole = n.next_multiple_of(DIRECT_ALIGN as usize).min(frame.len());
                match e.file.read_at(off, &mut frame[..whole]) {
                    // A shrink between the length read and the read: read
                    // what is still inside the file.
                    Err(Error::OutOfRange { .. }) if e.file.len() != len => continue,
                    r => r?,
                };
            }
            frame[n..].fill(0);
            return Ok(());
        }
    }

    /// Write page `page` of file `id` (the part inside the file, to the end of
    /// its last sector: the frame holds zeros past the end). A failure is
    /// remembered for the file's next `sync`. A page of a file that is gone,
    /// or wholly past its end, has nowhere to go: it counts as written.
    pub(crate) fn store_page(&self, id: u32, page: u64, bytes: &[u8]) -> Result<()> {
        match self.entry(id) {
            Ok(e) => Shared::store_page_of(&e, page, bytes),
            Err(_) => Ok(()),
        }
    }

    /// [`Shared::store_page`] for a file whose entry the caller holds (no
    /// table lookup). A write that an fsync of the file failed after (and
    /// before it was noted as written) is made again.
    pub(crate) fn store_page_of(e: &Entry, page: u64, bytes: &[u8]) -> Result<()> {
        if e.check().is_err() {
            return Ok(()); // the file is gone: nowhere to go
        }
        let ps = bytes.len() as u64;
        let off = page * ps;
        let r = loop {
            let epoch = e.fsync_epoch();
            let len = e.file.len();
            let n = len.saturating_sub(off).min(ps) as usize;
            let r = if n > 0 {
                let whole = n.next_multiple_of(DIRECT_ALIGN as usize).min(bytes.len());
                e.file.write_at_raw(off, &bytes[..whole])
            } else {
                Ok(())
            };
            #[cfg(test)]
            if let Some(between) = AFTER_STORE.take(e as *const Entry as usize) {
                between();
            }
            match r {
                // A shrink between the length read and the write: write what
                // is still inside the file.
                Err(Error::OutOfRange { .. }) if e.file.len() != len => continue,
                // Noted as written under the fsync epoch it was sent at, as
                // the queues' write-backs are: an fsync of the file that
                // failed since may have dropped it (and did not write it
                // again, not knowing of it), so it is written again.
                Ok(()) if n > 0 && !e.written_at(epoch, [page]) => continue,
                r => break r,
            }
        };
        if let Err(err) = &r {
            // (Not a refusal by a length that a shrink and a growth back
            // to it changed meanwhile: the page stays dirty, no failure.)
            e.remember(err.clone());
        }
        r
    }

    /// Remember a failed write-back of file `id` for its next `sync`. A write
    /// refused because the file shrank after it was prepared is no failure:
    /// its pages stay dirty and the next write-back writes what is still
    /// inside the file.
    pub(crate) fn remember_failure(&self, id: u32, err: Error) {
        if let Ok(e) = self.entry(id) {
            e.remember(err);
        }
    }
}

/// In unit tests: run once by a synchronous write-back of the file whose
/// entry is at this address, between its write and its note as written.
#[cfg(test)]
pub(crate) static AFTER_STORE: crate::util::hook::TestHook<usize, Box<dyn FnOnce() + Send>> =
    crate::util::hook::TestHook::new();

/// In unit tests: run once by a fill of the file whose entry is at this
/// address (synchronous or a request queue's), between its look at the
/// file's length and its read.
#[cfg(test)]
pub(crate) static AFTER_LOAD_LENGTH: crate::util::hook::TestHook<usize, Box<dyn FnOnce() + Send>> =
    crate::util::hook::TestHook::new();

/// This thread's page guards, which the layer above keeps: whether it holds
/// one in the cache, a look for a mutable one another thread waits for, and
/// the pages of all it holds.
#[derive(Clone, Copy)]
pub(crate) struct Guards {
    pub(crate) any: bool,
    pub(crate) waited_for: fn(&Shared) -> Option<(u32, u64)>,
    pub(crate) held: fn(&Shared) -> Vec<(u32, u64)>,
}

impl Guards {
    /// A thread that holds no guard of the cache.
    pub(crate) const NONE: Guards = Guards {
        any: false,
        waited_for: |_| None,
        held: |_| Vec::new(),
    };
}

#[cfg(test)]
mod tests {
    use crate::cache::{CacheOptions, PolicyKind};
    use crate::{CachedStore, LayoutKind, Store, StoreOptions};
    use std::sync::Arc;
    use std::sync::atomic::Ordering;

    /// A synchronous write-back (a victim's, written by the thread that needs
    /// its slot) that an fsync of its file failed after, before the write
    /// was noted as written, is written again: the failed fsync may have
    /// dropped it and, not knowing of it, did not write it again. The hook
    /// puts the page's old bytes back on the device (what a dropped write
    /// leaves) and counts a failed fsync between the write and its note.
    #[test]
    fn a_synchronous_write_back_a_failed_fsync_overtook_is_written_again() {
        use std::sync::Arc;
        use std::sync::atomic::Ordering;
        let dir = crate::cached::scratch_dir("sync-wb");
        let store = Store::open(&[&dir], StoreOptions::default()).unwrap();
        let f = store.create("f", 4 * 4096, LayoutKind::Stripe).unwrap();
        let mut old = crate::AlignedBuf::new(4096);
        old.fill(1);
        f.write_at(4096, &old).unwrap();
        f.sync().unwrap();
        drop(f);
        let cs = CachedStore::new(store, crate::cached::small_cache(64)).unwrap();
        let cf = cs.open_file("f").unwrap();
        let e = cf.entry.clone();
        let e2 = e.clone();
        super::AFTER_STORE.arm(
            Arc::as_ptr(&e) as usize,
            Box::new(move || {
                e2.file.write_at_raw(4096, &old).unwrap();
                e2.fsync_failures.fetch_add(1, Ordering::AcqRel);
            }),
        );
        let mut new = crate::AlignedBuf::new(4096);
        new.fill(2);
        super::Shared::store_page_of(&e, 1, &new).unwrap();
        let mut back = crate::AlignedBuf::new(4096);
        e.file.read_at(4096, &mut back).unwrap();
        assert!(
            back.iter().all(|&x| x == 2),
            "the device holds {:?} after the write-back",
            &back[..4]
        );
        drop((cf, e, cs));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// An extending write whose range was inside the file when it looked,
    /// but which a shrink then cut, grows the file as a write past the end
    /// does, instead of failing `OutOfRange`.
    #[test]
    fn a_write_inside_the_file_that_a_shrink_overtakes_grows_it() {
        let dir = crate::cached::scratch_dir("write-shrink");
        let store = Store::open(&[&dir], StoreOptions::default()).unwrap();
        drop(store.create("f", 100_000, LayoutKind::Stripe).unwrap());
        let cs = CachedStore::new(store, crate::cached::small_cache(64)).unwrap();
        let cf = cs.open_file("f").unwrap();
        let e = cf.entry.clone();
        crate::cached::INSIDE_WRITE_LENGTH.arm(
            Arc::as_ptr(&cf.entry) as usize,
            Box::new(move || {
                e.file
                    .set_len_cached(1000, &mut |_| Ok(()))
                    .map(drop)
                    .unwrap()
            }),
        );
        let data = vec![7u8; 8192];
        cf.write_extending(60_000, &data)
            .unwrap_or_else(|e| panic!("a write a shrink overtook: {e}"));
        assert_eq!(cf.len(), 60_000 + 8192);
        let mut back = vec![0u8; 8192];
        cf.read_at(60_000, &mut back).unwrap();
        assert!(back == data);
        cf.sync().unwrap();
        drop((cf, cs));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A request queue's fill of a last page that ends inside a sector (read
    /// at once, not queued), whose file is deleted between the queue's look
    /// at the length and the read, fails as a deleted file's read does
    /// (`FileGone`), not as one of an unknown cache id.
    #[test]
    fn a_queued_fill_of_a_deleted_files_last_sector_says_it_is_gone() {
        let dir = crate::cached::scratch_dir("fill-gone");
        let store = Store::open(&[&dir], StoreOptions::default()).unwrap();
        drop(store.create("f", 5000, LayoutKind::Stripe).unwrap());
        let cs = CachedStore::new(store, crate::cached::small_cache(64)).unwrap();
        let cf = cs.open_file("f").unwrap();
        let (sh, id) = (cf.shared.clone(), cf.id);
        super::AFTER_LOAD_LENGTH.arm(
            Arc::as_ptr(&cf.entry) as usize,
            Box::new(move || {
                // What a delete does: out of the table, and gone.
                let gone = sh.files.write().unwrap().remove(&id).unwrap();
                gone.gone.store(true, Ordering::Release);
            }),
        );
        let mut q = cs.queue(4);
        let req = crate::CachedRequest::tagged(crate::OpKind::Read, &cf, 4096, vec![0; 10], 0);
        q.submit(vec![req]);
        q.wait(1);
        let mut done = Vec::new();
        q.take_completions(&mut done);
        let (_, c) = done.pop().expect("a completion");
        assert!(
            matches!(c.result, Err(crate::Error::FileGone(_))),
            "{:?}",
            c.result
        );
        drop(q);
        drop((cf, cs));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A fill that read the file's length before a shrink cut it reads what
    /// is still inside the file instead of failing `OutOfRange` (a
    /// synchronous read, then a request queue's); the bytes the reader asked
    /// for were inside the file before and after.
    #[test]
    fn a_fill_racing_a_shrink_reads_what_is_left() {
        use std::sync::Arc;
        let dir = crate::cached::scratch_dir("fill-shrink");
        let store = Store::open(&[&dir], StoreOptions::default()).unwrap();
        let f = store.create("f", 8 * 4096, LayoutKind::Stripe).unwrap();
        let mut ones = crate::AlignedBuf::new(8 * 4096);
        ones.fill(1);
        f.write_at(0, &ones).unwrap();
        f.sync().unwrap();
        drop(f);
        let cs = CachedStore::new(store, crate::cached::small_cache(64)).unwrap();
        let cf = cs.open_file("f").unwrap();
        let shrink_to = |e: &Arc<super::Entry>, len: u64| {
            let e2 = e.clone();
            super::AFTER_LOAD_LENGTH.arm(
                Arc::as_ptr(e) as usize,
                Box::new(move || {
                    e2.file
                        .set_len_cached(len, &mut |_| Ok(()))
                        .map(drop)
                        .unwrap()
                }),
            );
        };
        shrink_to(&cf.entry, 4096 + 100);
        let mut b = [0u8; 10];
        let r = cf.read_at(4096 + 10, &mut b);
        assert_eq!(
            (r.as_ref().ok(), b),
            (Some(&10), [1; 10]),
            "a read of page 1: {r:?}"
        );
        shrink_to(&cf.entry, 100);
        let mut q = cs.queue(4);
        let req = crate::CachedRequest::tagged(crate::OpKind::Read, &cf, 10, vec![0; 10], 0);
        q.submit(vec![req]);
        q.wait(1);
        let mut done = Vec::new();
        q.take_completions(&mut done);
        let (_, c) = done.pop().expect("a completion");
        let got = (c.result.as_ref().ok(), &c.buf[..]);
        assert_eq!(
            got,
            (Some(&()), &[1u8; 10][..]),
            "a queue's read: {:?}",
            c.result
        );
        drop(q);
        drop((cf, cs));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A file deleted while a handle holds it keeps its cache id only as
    /// long as the handle: once the handle is gone, a later open gets that
    /// id back (ids are few: 2^24 in a cache).
    #[test]
    fn a_deleted_files_id_comes_back_once_its_last_handle_is_gone() {
        let dir = crate::cached::scratch_dir("ids");
        let store = Store::open(&[&dir], StoreOptions::default()).unwrap();
        let opts = CacheOptions {
            policy: PolicyKind::Clock,
            ..crate::cached::small_cache(64)
        };
        let cs = CachedStore::new(store, opts).unwrap();
        let mut seen = std::collections::HashSet::new();
        for k in 0..100 {
            let name = format!("tmp{k}");
            let f = cs.create(&name, 64 << 10, LayoutKind::Stripe).unwrap();
            f.write_at(0, b"some bytes").unwrap();
            seen.insert(f.id);
            cs.delete(&name).unwrap();
            drop(f);
        }
        // Retired ids are looked at once 32 have gathered.
        assert!(
            seen.len() <= 40,
            "{} ids used for 100 files in turn",
            seen.len()
        );
        drop(cs);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A `replace` through the cache that fails part way, and that a later
    /// operation finishes, leaves no handle of the replaced file working (it
    /// fails `FileGone`, as after a replace that ended well) and no sync of
    /// the store failing on the replaced file's unlinked pieces.
    #[test]
    fn a_replace_finished_by_a_later_operation_retires_the_replaced_file() {
        use crate::storage::store::crash_after;
        let mut finished_later = 0;
        for k in 0..40 {
            let dir = std::env::temp_dir()
                .join(format!("setcache-replace-later-{}-{k}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(dir.join("d0")).unwrap();
            std::fs::create_dir_all(dir.join("d1")).unwrap();
            let store =
                Store::open(&[dir.join("d0"), dir.join("d1")], StoreOptions::default()).unwrap();
            let opts = CacheOptions {
                size: 64 * 4096,
                page_size: 4096,
                assoc: 4,
                ..CacheOptions::default()
            };
            let cs = CachedStore::new(store, opts).unwrap();
            let a = cs.create("a", 8192, LayoutKind::Stripe).unwrap();
            let old = cs.create("b", 8192, LayoutKind::Stripe).unwrap();
            a.write_at(0, &[1; 100]).unwrap();
            old.write_at(0, &[2; 100]).unwrap();
            cs.sync().unwrap();
            crash_after(Some(k));
            let r = cs.replace("a", "b");
            crash_after(None);
            let done = r.is_ok();
            if !done {
                // The next operation finishes it (or it never began).
                drop(cs.create("c", 4096, LayoutKind::Stripe).unwrap());
            }
            let mut one = [0u8; 1];
            if a.file().name() == "b" {
                if !done {
                    finished_later += 1;
                }
                match old.read_at(0, &mut one) {
                    Err(crate::Error::FileGone(_)) => {}
                    other => panic!("step {k}: the replaced file's handle read {other:?}"),
                }
                cs.sync()
                    .unwrap_or_else(|e| panic!("step {k}: the store's sync: {e}"));
                let b = cs.open_file("b").unwrap();
                b.read_at(0, &mut one).unwrap();
                assert_eq!(one[0], 1, "step {k}: b is a's bytes");
            } else {
                // Never began: the old file is still `b`.
                old.read_at(0, &mut one).unwrap();
                assert_eq!(one[0], 2, "step {k}");
                cs.sync().unwrap();
            }
            drop((a, old));
            drop(cs);
            let _ = std::fs::remove_dir_all(&dir);
            if done {
                break;
            }
        }
        assert!(
            finished_later > 0,
            "no step left the replace to be finished later"
        );
    }

    /// A store in a directory of its own (`setcache-<tag>-<pid>`, made
    /// empty) and a cache of sixteen pages over it in four sets, without a
    /// flusher or readahead.
    fn sixteen_pages(tag: &str, direct_io: bool) -> (std::path::PathBuf, CachedStore) {
        let dir = std::env::temp_dir().join(format!("setcache-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let so = StoreOptions {
            direct_io,
            ..StoreOptions::default()
        };
        let store = Store::open(&[&dir], so).unwrap();
        let opts = CacheOptions {
            size: 16 * 4096,
            page_size: 4096,
            assoc: 4,
            policy: PolicyKind::Clock,
            ..CacheOptions::default()
        };
        let cs = CachedStore::with_flusher(store, opts, None).unwrap();
        cs.set_readahead(0);
        (dir, cs)
    }

    /// A failed fsync of a `set_len` after pages were written back and let
    /// go of (the kernel may have dropped them, and reports it once) makes
    /// the file's next cache sync fail `SyncLost` instead of passing; pages
    /// still cached are written again.
    /// A cache of 16 pages with files `f` and `g`: pages of `f` written,
    /// then pushed out (written back, not fsynced) by writes of `g`, then a
    /// `set_len` of `f` whose fsync failed.
    fn written_then_an_fsync_failed(
        tag: &str,
    ) -> (
        std::path::PathBuf,
        CachedStore,
        crate::CachedFile,
        crate::CachedFile,
    ) {
        use crate::storage::store::FSYNC_FD_ERRNO;
        let (dir, cs) = sixteen_pages(tag, false);
        let f = cs.create("f", 64 * 4096, LayoutKind::Stripe).unwrap();
        let g = cs.create("g", 64 * 4096, LayoutKind::Stripe).unwrap();
        f.sync().unwrap();
        g.sync().unwrap();
        for p in 0..8u64 {
            f.write_at(p * 4096, &[7; 4096]).unwrap();
        }
        for p in 0..64u64 {
            g.write_at(p * 4096, &[8; 4096]).unwrap();
        }
        FSYNC_FD_ERRNO.set(libc::ENOSPC);
        let e = f.set_len(80 * 4096);
        FSYNC_FD_ERRNO.set(0);
        assert!(e.is_err(), "the set_len's fsync failed: {e:?}");
        (dir, cs, f, g)
    }

    #[test]
    fn a_failed_fsync_of_a_length_change_counts_for_the_next_sync() {
        use crate::storage::store::FSYNC_FD_ERRNO;
        let (dir, cs, f, g) = written_then_an_fsync_failed("metafs");
        match f.sync() {
            Err(crate::Error::SyncLost { .. }) => {}
            other => panic!("the sync after the failed fsync: {other:?}"),
        }
        // The other file's syncs are untouched.
        g.sync().unwrap();
        // A file whose writes a good cache sync covered loses nothing to a
        // failed fsync of a later `set_len`: its syncs, and its own file's,
        // pass. (The next metadata operation first finishes `f`'s.)
        drop(cs.create("x", 4096, LayoutKind::Stripe).unwrap());
        g.write_at(0, &[9; 4096]).unwrap();
        g.sync().unwrap();
        FSYNC_FD_ERRNO.set(libc::ENOSPC);
        assert!(g.set_len(80 * 4096).is_err());
        FSYNC_FD_ERRNO.set(0);
        g.sync().unwrap();
        g.file().sync().unwrap();
        drop((f, g));
        drop(cs);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Pages written back, pushed out and read into the cache again before
    /// an fsync fails may hold what the failure dropped (the kernel can let
    /// go of a page whose write-back failed long before an fsync reports
    /// it): they count as lost, as pages that never came back do, though
    /// the cache holds them. A good fsync in between clears them.
    #[test]
    fn pages_read_back_before_a_failed_fsync_count_as_lost() {
        read_back_before_a_failed_fsync(false);
    }

    /// With direct I/O no kernel cache holds the pages between their
    /// write and the fsync: pages read back hold what was written, and are
    /// written again as pages that never left are.
    #[test]
    fn with_direct_io_pages_read_back_are_written_again() {
        read_back_before_a_failed_fsync(true);
    }

    fn read_back_before_a_failed_fsync(direct_io: bool) {
        use crate::storage::store::FSYNC_FD_ERRNO;
        let (dir, cs) = sixteen_pages(&format!("refill-{direct_io}"), direct_io);
        let f = cs.create("f", 64 * 4096, LayoutKind::Stripe).unwrap();
        let g = cs.create("g", 64 * 4096, LayoutKind::Stripe).unwrap();
        f.sync().unwrap();
        g.sync().unwrap();
        // `g`'s pages, synced so that they go without a write-back.
        let push_out = |fill: u8| {
            for p in 0..64u64 {
                g.write_at(p * 4096, &[fill; 4096]).unwrap();
            }
            g.sync().unwrap();
        };
        // Pages 0-3 of `f` read back by synchronous reads, or through a queue.
        let read_back = |f: &crate::CachedFile, queued: bool| {
            if !queued {
                let mut b = [0u8; 4096];
                for p in 0..4u64 {
                    f.read_at(p * 4096, &mut b).unwrap();
                }
                return;
            }
            let mut q = cs.queue(4);
            q.submit(
                (0..4u64)
                    .map(|p| {
                        let buf = vec![0; 4096];
                        crate::CachedRequest::tagged(crate::OpKind::Read, f, p * 4096, buf, p)
                    })
                    .collect(),
            );
            q.drain();
            let mut done = Vec::new();
            q.take_completions(&mut done);
            assert_eq!(done.len(), 4);
            for (_, c) in done {
                c.result.unwrap();
                assert!(!c.hit, "page {} was still cached", c.offset / 4096);
            }
        };
        let cached = |f: &crate::CachedFile| {
            (0..4u64)
                .filter(|&p| {
                    cs.page_cache()
                        .try_pin_present(f.id, p, false)
                        .unwrap()
                        .is_some()
                })
                .count()
        };
        let fail_set_len = |f: &crate::CachedFile, len: u64| {
            FSYNC_FD_ERRNO.set(libc::ENOSPC);
            let e = f.set_len(len);
            FSYNC_FD_ERRNO.set(0);
            assert!(e.is_err(), "the set_len's fsync failed: {e:?}");
        };
        let mut f = f;
        for (round, queued) in [false, true].into_iter().enumerate() {
            // Written, written back and pushed out by `g`'s writes, then
            // read back: all four pages are in the cache when the fsync fails.
            for p in 0..4u64 {
                f.write_at(p * 4096, &[7; 4096]).unwrap();
            }
            push_out(8);
            read_back(&f, queued);
            assert_eq!(cached(&f), 4, "the pages were not read back");
            fail_set_len(&f, (80 + 16 * round as u64) * 4096);
            match f.sync() {
                Err(crate::Error::SyncLost { .. }) if !direct_io => {}
                Ok(()) if direct_io => {}
                other => panic!(
                    "the sync after the failed fsync (direct I/O {direct_io}, queued {queued}): \
                     {other:?}"
                ),
            }
            // Opening again accepts the loss.
            f = cs.open_file("f").unwrap();
            f.sync().unwrap();
        }
        // Pages read back before a good fsync covered their write-back are
        // no loss after it.
        for p in 0..4u64 {
            f.write_at(p * 4096, &[9; 4096]).unwrap();
        }
        push_out(10);
        read_back(&f, false);
        assert_eq!(cached(&f), 4, "the pages were not read back");
        f.sync().unwrap();
        fail_set_len(&f, 128 * 4096);
        f.sync().unwrap();
        drop((f, g));
        drop(cs);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A `grow` that returns while an extending write of the same file is
    /// under way, to a length inside that write's growth, holds even if the
    /// write then fails: the write's cut-back on failure must count the grow
    /// as a change of length and leave the file as long as the grow said.
    /// The write fails because another thread holds its first page for
    /// writing past the pin wait.
    #[test]
    fn a_grow_inside_a_failing_extending_write_holds() {
        use std::sync::Arc;
        use std::time::Duration;
        let dir = crate::cached::scratch_dir("grow-in-extending");
        let store = Store::open(&[&dir], StoreOptions::default()).unwrap();
        drop(store.create("f", 0, LayoutKind::Stripe).unwrap());
        let opts = CacheOptions {
            pin_wait: Duration::from_millis(100),
            ..crate::cached::small_cache(64)
        };
        let cs = CachedStore::new(store, opts).unwrap();
        cs.set_readahead(0);
        let f = cs.open_file("f").unwrap();
        f.write_extending(0, &[1; 4096]).unwrap();
        let (held_tx, held_rx) = std::sync::mpsc::channel::<()>();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        std::thread::scope(|s| {
            let h = &f;
            s.spawn(move || {
                let _g = h.page_mut(0).unwrap();
                held_tx.send(()).unwrap();
                done_rx.recv().unwrap();
            });
            held_rx.recv().unwrap();
            let g = f.clone();
            crate::cached::GREW.arm(
                Arc::as_ptr(&f.entry) as usize,
                Box::new(move || {
                    std::thread::spawn(move || g.grow(6000))
                        .join()
                        .unwrap()
                        .unwrap();
                }),
            );
            let r = f.write_extending(0, &[2; 8192]);
            done_tx.send(()).unwrap();
            assert!(r.is_err(), "the write did not fail: {r:?}");
        });
        assert!(
            f.len() >= 6000,
            "a grow to 6000 bytes that passed left {} bytes",
            f.len()
        );
        drop(f);
        drop(cs);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A reader's open of a file whose written pages a failed fsync may
    /// have cost leaves the loss to the writers: their next sync reports
    /// it. Before, any open of the file accepted the loss, a read-only one
    /// too, and the writer's next sync passed. A writer's open still
    /// accepts it.
    #[test]
    fn a_read_only_open_leaves_a_loss_to_the_writers() {
        let (dir, cs, f, g) = written_then_an_fsync_failed("loss-ro");
        let reader = cs.open_file_read_only("f").unwrap();
        match f.sync() {
            Err(crate::Error::SyncLost { .. }) => {}
            other => panic!("the writer's sync after a reader's open: {other:?}"),
        }
        drop(reader);
        let again = cs.open_file("f").unwrap();
        f.sync().unwrap();
        drop((f, g, again));
        drop(cs);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A file deleted through the store itself, not the cache, leaves no
    /// entry failing the store's syncs: before, every `sync` of the cached
    /// store failed on its backing files, and opening the name again (not
    /// found) did not clear it.
    #[test]
    fn a_file_deleted_behind_the_cache_does_not_fail_its_syncs() {
        let (dir, cs) = sixteen_pages("deleted-behind", false);
        let x = cs.create("x", 4 * 4096, LayoutKind::Stripe).unwrap();
        x.write_at(0, &[3; 4096]).unwrap();
        x.sync().unwrap();
        drop(x);
        cs.store().delete("x").unwrap();
        cs.sync().unwrap();
        assert!(matches!(
            cs.open_file("x"),
            Err(crate::Error::FileNotFound(_))
        ));
        cs.sync().unwrap();
        drop(cs);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Files opened, written and let go one after another do not keep their
    /// entries (and descriptors): past `idle_keep` entries without a handle,
    /// the least recently opened are synced and leave the table. Their bytes
    /// survive a power cut (simulated devices; no flusher, so only the
    /// trim's sync wrote them). A file still held stays usable, and while
    /// fsyncs fail no entry leaves.
    #[test]
    fn files_let_go_in_turn_leave_the_table_synced() {
        use crate::{EngineKind, SimConfig, SimMedia, SimSwitches};
        use std::sync::Arc;
        use std::sync::atomic::Ordering;
        let dir = crate::cached::scratch_dir("idle-trim");
        let media = SimMedia::new();
        let sw = Arc::new(SimSwitches::default());
        sw.keep_synced.store(true, Ordering::Release);
        let open = || {
            let opts = StoreOptions {
                engine: EngineKind::Sim(SimConfig {
                    media: media.clone(),
                    switches: sw.clone(),
                    ..SimConfig::default()
                }),
                ..StoreOptions::default()
            };
            let store = Store::open(&[&dir], opts).unwrap();
            CachedStore::with_flusher(store, crate::cached::small_cache(64), None).unwrap()
        };
        let cs = open();
        cs.inner.idle_keep.store(4, Ordering::Relaxed);
        cs.inner.trim_at.store(4, Ordering::Relaxed);
        let listed = |cs: &CachedStore| cs.inner.files.read().unwrap().len();
        let write = |cs: &CachedStore, i: usize| {
            let f = cs
                .create(&format!("f{i}"), 4096, LayoutKind::Stripe)
                .unwrap();
            f.write_at(0, format!("file {i}").as_bytes()).unwrap();
        };
        let held = cs.create("held", 4096, LayoutKind::Stripe).unwrap();
        held.write_at(0, b"held").unwrap();
        (0..40).for_each(|i| write(&cs, i));
        assert!(
            listed(&cs) <= 8,
            "{} entries for 41 files, 1 held",
            listed(&cs)
        );
        held.write_at(4, b"!").unwrap();
        let mut b = [0u8; 5];
        held.read_at(0, &mut b).unwrap();
        assert_eq!(&b, b"held!");
        // Twenty more let go with no trim, then a trim whose fsyncs fail:
        // nothing synced, so nothing leaves.
        cs.inner.idle_keep.store(1000, Ordering::Relaxed);
        (40..60).for_each(|i| write(&cs, i));
        let before = listed(&cs);
        cs.inner.idle_keep.store(4, Ordering::Relaxed);
        sw.fsync_failures.store(1000, Ordering::Release);
        cs.inner.trim_idle();
        sw.fsync_failures.store(0, Ordering::Release);
        assert_eq!(listed(&cs), before, "entries left the table unsynced");
        media.cut_power(7);
        drop((held, cs));
        media.power_on();
        let cs = open();
        for i in 0..30 {
            let f = cs.open_file(&format!("f{i}")).unwrap();
            let want = format!("file {i}");
            let mut got = vec![0u8; want.len()];
            f.read_at(0, &mut got).unwrap();
            assert_eq!(got, want.as_bytes(), "f{i} after a power cut");
        }
        drop(cs);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A cache of 16 pages over simulated devices whose fsyncs fail
    /// `ENOSPC` when told to (dropping what was written since the last good
    /// one), and a file `f` of 64 pages.
    fn sim_cache(tag: &str) -> (std::path::PathBuf, Arc<crate::SimSwitches>, CachedStore) {
        use crate::{EngineKind, SimConfig, SimMedia, SimSwitches};
        let dir = crate::cached::scratch_dir(tag);
        let sw = Arc::new(SimSwitches::default());
        sw.keep_synced.store(true, Ordering::Release);
        sw.fsync_errno.store(libc::ENOSPC, Ordering::Release);
        let opts = StoreOptions {
            engine: EngineKind::Sim(SimConfig {
                media: SimMedia::new(),
                switches: sw.clone(),
                ..SimConfig::default()
            }),
            ..StoreOptions::default()
        };
        let store = Store::open(&[&dir], opts).unwrap();
        drop(store.create("f", 64 * 4096, LayoutKind::Stripe).unwrap());
        let cs = CachedStore::with_flusher(store, crate::cached::small_cache(16), None).unwrap();
        cs.set_readahead(0);
        (dir, sw, cs)
    }

    /// A loss a failed fsync left reaches every handle open when it
    /// happened: a later open for writing, or an explicit acceptance, takes
    /// it for the accepting handle and for handles already told, not for a
    /// handle never told (its next sync fails once with it).
    #[test]
    fn a_loss_reaches_each_handle_open_when_it_happened() {
        let (dir, sw, cs) = sim_cache("loss-per-handle");
        let a = cs.open_file("f").unwrap();
        let c = cs.open_file("f").unwrap();
        let d = cs.open_file("f").unwrap();
        for p in 0..64u64 {
            a.write_at(p * 4096, &[0x3C; 4096]).unwrap();
        }
        sw.fsync_failures.store(1, Ordering::Release);
        assert!(a.file().sync().is_err(), "the store-level fsync passed");
        // C's sync records the loss and is told.
        assert!(c.sync().is_err(), "a sync passed after the loss");
        let b = cs.open_file("f").unwrap();
        b.sync().unwrap();
        c.sync().unwrap();
        match a.sync() {
            Err(crate::Error::SyncLost { .. }) => {}
            other => panic!("a handle never told passed after another open: {other:?}"),
        }
        a.sync().unwrap();
        // A second loss, reported to A: A fails until some handle accepts
        // it; B's explicit acceptance lets A (told) pass and leaves D, never
        // told, to be told too.
        for p in 0..64u64 {
            b.write_at(p * 4096, &[0x3E; 4096]).unwrap();
        }
        sw.fsync_failures.store(1, Ordering::Release);
        assert!(b.file().sync().is_err(), "the store-level fsync passed");
        match a.sync() {
            Err(crate::Error::SyncLost { .. }) => {}
            other => panic!("the second loss was not reported: {other:?}"),
        }
        assert!(a.sync().is_err(), "a told handle passed with no acceptance");
        assert!(b.accept_loss().unwrap(), "B had the second loss to accept");
        a.sync().unwrap();
        match d.sync() {
            Err(crate::Error::SyncLost { .. }) => {}
            other => panic!("a handle never told passed after an acceptance: {other:?}"),
        }
        d.sync().unwrap();
        cs.sync().unwrap();
        drop((a, b, c, d));
        drop(cs);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A loss the idle-file trim's sync met is reported to no one there: the
    /// entry stays, and the file's next open for writing is told of it (its
    /// sync fails until it accepts the loss).
    #[test]
    fn a_loss_the_trim_met_reaches_the_next_open() {
        let (dir, sw, cs) = sim_cache("loss-trimmed");
        let a = cs.open_file("f").unwrap();
        for p in 0..64u64 {
            a.write_at(p * 4096, &[0x3D; 4096]).unwrap();
        }
        drop(a);
        cs.inner.idle_keep.store(0, Ordering::Relaxed);
        sw.fsync_failures.store(1, Ordering::Release);
        // (The trim's sync does not wait for pages in use: a write-back of
        // the last writes may still be in flight; it tries again.)
        let t = std::time::Instant::now();
        while t.elapsed() < std::time::Duration::from_secs(30) {
            cs.inner.trim_idle();
            if sw.fsync_failures.load(Ordering::Acquire) == 0 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_eq!(
            sw.fsync_failures.load(Ordering::Acquire),
            0,
            "the trim did not fsync"
        );
        assert_eq!(cs.inner.files.read().unwrap().len(), 1, "the entry left");
        let b = cs.open_file("f").unwrap();
        match b.sync() {
            Err(crate::Error::SyncLost { .. }) => {}
            other => panic!("the loss the trim met was not reported: {other:?}"),
        }
        assert!(b.sync().is_err(), "the loss passed unaccepted");
        assert!(b.accept_loss().unwrap());
        b.sync().unwrap();
        drop(b);
        drop(cs);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Write 64 pages of `name` through a 16-page cache and have the
    /// store-level fsync take the kernel's report of their failure (the next
    /// cache sync of the file records a loss).
    fn lose(cs: &CachedStore, sw: &crate::SimSwitches, name: &str, byte: u8) {
        let f = cs.open_file(name).unwrap();
        for p in 0..64u64 {
            f.write_at(p * 4096, &[byte; 4096]).unwrap();
        }
        sw.fsync_failures.store(1, Ordering::Release);
        assert!(f.file().sync().is_err(), "the store-level fsync passed");
    }

    /// The pages a loss took are that loss's: once it is accepted, a later
    /// fsync that fails (out of space, say) with every page it covers still
    /// cached is a failure a retry can pass, not a second loss.
    #[test]
    fn a_failed_fsync_after_an_accepted_loss_counts_no_page_twice() {
        let (dir, sw, cs) = sim_cache("loss-not-twice");
        lose(&cs, &sw, "f", 0x43);
        let a = cs.open_file("f").unwrap();
        assert!(
            matches!(a.sync(), Err(crate::Error::SyncLost { .. })),
            "the loss, to begin with"
        );
        assert!(a.accept_loss().unwrap());
        // A page still cached (the last written): nothing leaves the cache.
        a.write_at(63 * 4096, &[0x44; 4096]).unwrap();
        sw.fsync_failures.store(1, Ordering::Release);
        match a.sync() {
            Err(crate::Error::Io { .. }) => {}
            r => panic!("a failed fsync with its page cached: {r:?}"),
        }
        a.sync().unwrap();
        let mut b = [0u8; 4096];
        a.read_at(63 * 4096, &mut b).unwrap();
        assert_eq!(b, [0x44; 4096]);
        drop((a, cs));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A handle accepts the losses some sync reported, not one recorded
    /// since that no caller was told of (here: met by a store sync whose
    /// caller passes nothing on): its next sync reports that one.
    #[test]
    fn an_acceptance_takes_no_loss_that_was_never_reported() {
        let (dir, sw, cs) = sim_cache("loss-untold");
        lose(&cs, &sw, "f", 0x45);
        let a = cs.open_file("f").unwrap();
        assert!(matches!(a.sync(), Err(crate::Error::SyncLost { .. })));
        lose(&cs, &sw, "f", 0x46);
        assert!(cs.sync_unheard().is_err(), "the second loss was not met");
        assert!(a.accept_loss().unwrap());
        match a.sync() {
            Err(crate::Error::SyncLost { .. }) => {}
            r => panic!("a loss never reported was accepted with the one reported: {r:?}"),
        }
        assert!(a.accept_loss().unwrap());
        assert!(!a.accept_loss().unwrap(), "nothing left to accept");
        a.sync().unwrap();
        drop((a, cs));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A backing file found away from its path after good fsyncs fails the
    /// sync (`BackingGone`) but costs nothing the fsyncs covered: no loss is
    /// recorded, and once the file is back the next sync passes, with every
    /// page, including those written back before and evicted, readable.
    #[test]
    fn a_backing_file_away_after_a_good_fsync_records_no_loss() {
        let dir = crate::cached::scratch_dir("away-after-fsync");
        let store = Store::open(&[&dir], StoreOptions::default()).unwrap();
        drop(store.create("f", 64 * 4096, LayoutKind::Stripe).unwrap());
        let path = store.backing_paths("f").unwrap().remove(0);
        let cs = CachedStore::with_flusher(store, crate::cached::small_cache(16), None).unwrap();
        cs.set_readahead(0);
        let f = cs.open_file("f").unwrap();
        for p in 0..64u64 {
            f.write_at(p * 4096, &[p as u8 + 1; 4096]).unwrap();
        }
        let aside = path.with_extension("aside");
        std::fs::rename(&path, &aside).unwrap();
        match f.sync() {
            Err(crate::Error::BackingGone { .. }) => {}
            r => panic!("a sync with the backing file away: {r:?}"),
        }
        std::fs::rename(&aside, &path).unwrap();
        f.sync().unwrap();
        let mut b = [0u8; 4096];
        for p in 0..64u64 {
            f.read_at(p * 4096, &mut b).unwrap();
            assert!(b.iter().all(|&x| x == p as u8 + 1), "page {p}");
        }
        drop((f, cs));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The store's sync returns one file's error: the other files' losses
    /// are not counted as reported, so an open of one of them is told.
    #[test]
    fn a_store_sync_reports_only_the_loss_it_returns() {
        let (dir, sw, cs) = sim_cache("loss-store-sync");
        drop(cs.create("g", 64 * 4096, LayoutKind::Stripe).unwrap());
        lose(&cs, &sw, "f", 0x41);
        lose(&cs, &sw, "g", 0x42);
        let named = match cs.sync() {
            Err(crate::Error::SyncLost { file, .. }) => file,
            other => panic!("the store's sync did not report a loss: {other:?}"),
        };
        let other = if named == "f" { "g" } else { "f" };
        match cs.open_file(other).unwrap().sync() {
            Err(crate::Error::SyncLost { .. }) => {}
            r => panic!("the loss of {other:?}, never returned, was accepted by an open: {r:?}"),
        }
        // The one reported is accepted by the next open.
        cs.open_file(&named).unwrap().sync().unwrap();
        drop(cs);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A sync whose own failed fsync records a loss reports it as a loss
    /// (the fsync's errno kept), not as an error a retry could pass; and a
    /// later loss, once the first is accepted, reports its own error.
    #[test]
    fn a_sync_whose_fsync_fails_reports_the_loss_with_its_own_error() {
        let (dir, sw, cs) = sim_cache("loss-own-fsync");
        let a = cs.open_file("f").unwrap();
        for p in 0..64u64 {
            a.write_at(p * 4096, &[0x43; 4096]).unwrap();
        }
        sw.fsync_failures.store(1, Ordering::Release);
        match a.sync() {
            Err(e @ crate::Error::SyncLost { .. }) => {
                assert_eq!(e.posix_errno(), libc::ENOSPC, "{e}")
            }
            other => panic!("the failed fsync's loss was not reported as one: {other:?}"),
        }
        assert!(a.accept_loss().unwrap());
        a.sync().unwrap();
        sw.fsync_errno.store(libc::EDQUOT, Ordering::Release);
        for p in 0..64u64 {
            a.write_at(p * 4096, &[0x44; 4096]).unwrap();
        }
        sw.fsync_failures.store(1, Ordering::Release);
        match a.sync() {
            Err(e @ crate::Error::SyncLost { .. }) => {
                assert_eq!(
                    e.posix_errno(),
                    libc::EDQUOT,
                    "the second loss's error: {e}"
                )
            }
            other => panic!("the second loss was not reported: {other:?}"),
        }
        drop(a);
        drop(cs);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A page read back after a loss was recorded is not the loss's: the
    /// loss's acceptance keeps it counted, for a later failed fsync. Pages
    /// read back before it go with the loss.
    #[test]
    fn pages_read_back_after_a_loss_stay_counted_when_it_is_accepted() {
        use super::{Asker, Durable, LossSeen};
        let mut d = Durable::default();
        let h = LossSeen::default();
        d.refilled.insert(1);
        let first = d.record_loss(crate::Error::InvalidArgument("one".into()));
        assert!(
            d.refilled.is_empty(),
            "a page read back before the loss stayed"
        );
        d.refilled.insert(2);
        d.heard(first);
        assert!(d.accept(&h, first));
        assert!(
            d.refilled.contains(2),
            "a page read back after the loss was dropped"
        );
        let second = d.record_loss(crate::Error::InvalidArgument("two".into()));
        match d.loss_for(Asker::Handle(&h)) {
            Some(crate::Error::InvalidArgument(m)) => assert_eq!(m, "two"),
            other => panic!("the second loss's error: {other:?}"),
        }
        assert_eq!(second, first + 1);
    }

    /// After an acceptance of some losses, a handle is told of the oldest
    /// one left with that loss's own error, not the error of one accepted.
    #[test]
    fn a_partial_acceptance_reports_the_next_losss_own_error() {
        use super::{Asker, Durable, LossSeen};
        let mut d = Durable::default();
        let (a, b) = (LossSeen::default(), LossSeen::default());
        let named = |d: &Durable, h: &LossSeen| match d.loss_for(Asker::Handle(h)) {
            Some(crate::Error::InvalidArgument(m)) => m,
            other => panic!("no loss's error: {other:?}"),
        };
        let one = d.record_loss(crate::Error::InvalidArgument("one".into()));
        d.heard(one);
        d.record_loss(crate::Error::InvalidArgument("two".into()));
        d.record_loss(crate::Error::InvalidArgument("three".into()));
        assert_eq!(named(&d, &b), "one");
        assert!(d.accept(&a, one));
        assert_eq!(named(&d, &b), "two", "after the first loss was accepted");
        assert!(d.accept(&a, one + 1));
        assert_eq!(named(&d, &b), "three", "after the second");
        assert!(d.accept(&a, one + 2));
        assert!(d.loss_for(Asker::Handle(&a)).is_none());
        // A new loss once all are accepted gives its own error.
        d.record_loss(crate::Error::InvalidArgument("four".into()));
        assert_eq!(named(&d, &a), "four");
    }
}
