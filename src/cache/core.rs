//! The set protocol: lookup, pin, fill, write-back hand-off, eviction, and
//! linear-hashing resize, generic over the synchronisation [`Model`].
//!
//! # State of a slot
//! One atomic word per slot: flag bits below and a pin count in the high 16
//! bits. Pins are taken under the set's lock, or without it by a hit on a
//! valid page nobody fills or writes (one compare-and-swap of the word, capped
//! at [`MAX_PINS`]); they are dropped without it.
//! A page with a pin, a fill in flight (`PENDING`), a write-back in flight
//! (`WRITEBACK`) or a writer (`WRITER`) is never evicted or moved.
//!
//! # Waiting
//! Anyone who must wait for a slot's state to change sets `WAITERS` and sleeps
//! on the word ([`Model::wait`]); every transition that can end a wait (a fill
//! completing, a writer leaving, the last pin dropping) wakes all sleepers when
//! it finds `WAITERS` set. Waiters re-check their condition, so wake-ups may be
//! spurious.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::hash::BuildHasherDefault;
use std::marker::PhantomData;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release, SeqCst};
use std::sync::atomic::{AtomicU8, AtomicU64, fence};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use super::dirty::{DirtySets, file_of};
use super::place::{self, Clock, Parts};
use super::policy::{Admit, Duel, NO_TAG, Policy, PolicyKind, SetState, low_mask};
use super::region::Region;
use super::setmem::{LINE, SetLayout};
use super::stats::{Stat, StatsHub};
use super::sync::{Model, Word};
use crate::error::{Error, Result};
use crate::storage::io::fixed::FixedChunks;
use crate::storage::layout::mix64;

pub(crate) const VALID: u32 = 1;
pub(crate) const PENDING: u32 = 2;
pub(crate) const DIRTY: u32 = 4;
pub(crate) const WRITEBACK: u32 = 8;
pub(crate) const WRITER: u32 = 16;
pub(crate) const WAITERS: u32 = 32;
/// A generation count in bits 6..15, advanced whenever a slot changes page, so
/// that a lock-free reader can tell that the slot it validated is the one it
/// pinned.
pub(crate) const GEN_ONE: u32 = 1 << 6;
pub(crate) const GEN_MASK: u32 = 0x1ff << 6;
/// The page goes first: it was read ahead, or read only by a sequential
/// stream, or advised away, and nobody else has read or written it since.
/// Among a set's clean idle pages, the victim is one of these if any is.
pub(crate) const COLD: u32 = 1 << 15;
pub(crate) const PIN: u32 = 1 << 16;
pub(crate) const MAX_PINS: u32 = 0xffff;

/// Whether state `v` is a dirty page nobody pins, fills, writes or writes back:
/// one the flusher or a victim write may take.
#[inline]
fn dirty_idle(v: u32) -> bool {
    v & DIRTY != 0 && pins(v) == 0 && v & (PENDING | WRITEBACK | WRITER) == 0
}

#[inline]
pub(crate) fn pins(s: u32) -> u32 {
    s >> 16
}

/// The generation after that of `v`, alone (no flags, no pins).
#[inline]
pub(super) fn next_gen(v: u32) -> u32 {
    (v & GEN_MASK).wrapping_add(GEN_ONE) & GEN_MASK
}

/// Spins, then yields, before a contended lock sleeps.
const SPINS: u32 = 200;
const YIELDS: u32 = 2;

/// Set lock states.
const UNLOCKED: u32 = 0;
const LOCKED: u32 = 1;
const CONTENDED: u32 = 2;

/// Who looks a page up, for what its page becomes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Any reader or writer: a cold page it touches is cold no more.
    Normal,
    /// A sequential stream's reader: a page it reads or brings in stays (or
    /// enters) cold, so that a scan pushes out its own pages first.
    Stream,
    /// Readahead: only a missing page is claimed, cold, from a free slot or a
    /// cold clean victim (never a page somebody used, never a write-back); a
    /// page present is left alone (`Busy`), uncounted.
    Ahead,
    /// A reader that keeps the page (a page guard): as `Normal`, but the page
    /// always gets a slot (never `Pass`).
    Keep,
    /// A caller that wants the page only if it is cached (a future's first
    /// poll, which may not block): as `Keep`, but a page absent is left
    /// alone (`Busy`), uncounted.
    Present,
    /// As `Present`, for a sequential stream's reader: a cold page it finds
    /// stays cold.
    PresentStream,
}

impl Mode {
    /// Whether a page this lookup touches or brings in is warm.
    fn warms(self) -> bool {
        matches!(self, Mode::Normal | Mode::Keep | Mode::Present)
    }

    /// Whether the caller wants the page only if it is cached now.
    fn present_only(self) -> bool {
        matches!(self, Mode::Present | Mode::PresentStream)
    }
}

/// The bits of a slot's state that a sighting must find unchanged.
pub(crate) const SIGHT_MASK: u32 = VALID | PENDING | WRITER | GEN_MASK;

/// Where a cached page was seen (see [`Core::sight`]): the page's bytes are
/// at `frame` for as long as [`still`] says so.
pub(crate) struct Sighting<'a, M: Model> {
    pub(crate) frame: *const u8,
    pub(crate) state: &'a M::W,
    pub(crate) v: u32,
    /// The set's epoch word (see `Core::epoch`) and its value then.
    pub(crate) epoch: &'a AtomicU64,
    pub(crate) ep: u64,
}

/// In unit tests: for a cache (its `Core`'s address) and a set, what a
/// discard pass runs, once, on its thread after it has visited that set.
#[cfg(test)]
#[allow(clippy::type_complexity)]
pub(crate) static AFTER_DISCARD_VISIT: crate::util::hook::TestHook<
    (usize, usize),
    Box<dyn FnOnce() + Send>,
> = crate::util::hook::TestHook::new();

/// In unit tests: run once by a policy call, under its set's lock, of the
/// cache whose policy is at this address.
#[cfg(test)]
pub(crate) static IN_POLICY_CALL: crate::util::hook::TestHook<usize, Box<dyn FnOnce() + Send>> =
    crate::util::hook::TestHook::new();

/// In unit tests: for a cache (its `Core`'s address), what a thread waiting
/// for a slot's state to change runs, once, when it wakes, before it looks
/// at the state again.
#[cfg(test)]
pub(crate) static AFTER_SLOT_WAKE: crate::util::hook::TestHook<usize, Box<dyn FnOnce() + Send>> =
    crate::util::hook::TestHook::new();

/// In unit tests: for a cache (its `Core`'s address) and a set, what a walk
/// of every slot runs, once, on its thread after it has visited that set.
#[cfg(test)]
#[allow(clippy::type_complexity)]
pub(crate) static AFTER_WALK_VISIT: crate::util::hook::TestHook<
    (usize, usize),
    Box<dyn FnOnce() + Send>,
> = crate::util::hook::TestHook::new();

/// In unit tests: for a cache (its `Core`'s address), what its next hit
/// without a pin on a cold page runs between its checks and its warming.
#[cfg(test)]
pub(crate) static BEFORE_COLD_HIT_WARMS: crate::util::hook::TestHook<
    usize,
    Box<dyn FnOnce() + Send>,
> = crate::util::hook::TestHook::new();

/// In unit tests: for a cache (its `Core`'s address), what its next
/// lock-free hit runs (`f(state, set, slot)`) between its checks and its pin.
#[cfg(test)]
#[allow(clippy::type_complexity)]
pub(crate) static BEFORE_FAST_PIN: crate::util::hook::TestHook<
    usize,
    Box<dyn FnOnce(u32, usize, usize) + Send>,
> = crate::util::hook::TestHook::new();

/// In unit tests: for a cache (its `Core`'s address), what its next search
/// of a page's holder runs between its visits of the two candidate sets.
#[cfg(test)]
#[allow(clippy::type_complexity)]
pub(crate) static BETWEEN_HOLDER_VISITS: crate::util::hook::TestHook<
    usize,
    Box<dyn FnOnce() + Send>,
> = crate::util::hook::TestHook::new();

/// Whether a page sighted when its set's epoch word `epoch` read `ep` is
/// still where it was seen, readable, with nobody writing it: bytes read from
/// its frame before this returns true (and after the sighting) are the
/// page's. One load, no write. The epoch is bumped before any byte of a
/// page of the set changes under a writer and before a frame of the set
/// takes another page (see `Core::epochs`).
#[inline(always)]
pub(crate) fn still_at(epoch: &AtomicU64, ep: u64) -> bool {
    fence(Acquire);
    epoch.load(Relaxed) == ep
}

/// What an optimistic read found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Got {
    /// Nothing usable: the page is absent, busy, or changed during the copy.
    Miss,
    /// A hit.
    Hit,
    /// A hit on a cold page, left cold (a stream's read).
    Cold,
}

pub(crate) enum Found {
    /// The page is valid; a pin (and the writer bit for `write`) is held.
    Hit(usize, usize),
    /// The page was absent; a frame is claimed (pending, pinned) for the caller
    /// to fill.
    Miss(usize, usize),
    /// The set has no clean page to give up: this dirty page is now under
    /// write-back (pinned) and must be written before the lookup is retried.
    WriteBack(usize, usize, u64),
    /// `nowait` only: the page is being filled or written, or every page of
    /// its set is pinned; nothing is held.
    Busy,
    /// The page was absent and its sets do not admit it (the policy serves
    /// it without a slot): the caller reads it into a frame of its own;
    /// nothing is held. Only plain reads get this.
    Pass,
    /// A writer waited the pin wait for the readers' pins of this page to
    /// drop (page guards, most likely); nothing is held.
    Held,
    /// The page is in a fill that a request queue of this thread holds in
    /// flight ([`note_queue_fill`]), which only this thread finishes: waiting
    /// for it would never end (`own`). Or it is another thread's fill, waited
    /// for [`CROSS_FILL_WAITS`] pin waits while this thread's queues hold
    /// fills of their own: that thread may be waiting for one of them.
    /// Nothing is held.
    FillHeld { own: bool },
    /// A reader waited [`CROSS_FILL_WAITS`] pin waits for another thread's
    /// writer (a mutable guard) to let go of the page while request queues
    /// of its own thread hold fills or write-backs in flight: the writer
    /// may be waiting for one of them. Nothing is held.
    WriterHeld,
    /// A writer waited [`CROSS_FILL_WAITS`] pin waits for the page's
    /// write-back (another thread's, perhaps its request queue's) while
    /// request queues of its own thread hold fills or write-backs in
    /// flight: the write-back's owner may be waiting for one of them.
    /// Nothing is held.
    WriteBackHeld,
    /// A thread with no request queue I/O of its own waited
    /// [`LONE_IO_WAITS`] pin waits for another thread's read of the page
    /// (`fill`) or its write-back to end: most likely a request queue's,
    /// which ends only when its thread polls, and that thread does not.
    /// Nothing is held.
    IoHeld { fill: bool },
}

/// How many pin waits a blocking lookup waits for another thread's fill,
/// writer or write-back while request queues of its own thread hold fills
/// or write-backs in flight (30 s with the default pin wait). Two threads in
/// that state, each waiting for the other's I/O or guard, would otherwise
/// wait for ever; a fill or write-back that is merely slow ends well within
/// it.
pub(crate) const CROSS_FILL_WAITS: u32 = 30;

/// How many pin waits a blocking lookup of a thread whose request queues
/// hold no I/O waits for another thread's fill or write-back (60 s with the
/// default pin wait): a request queue's ends only when its thread polls,
/// which a thread waiting for this one never does. Twice
/// [`CROSS_FILL_WAITS`], so that when a queue's thread and this one wait for
/// each other, the queue's gives way first (its bound is the shorter), polls,
/// and this one goes on.
pub(crate) const LONE_IO_WAITS: u32 = 2 * CROSS_FILL_WAITS;

thread_local! {
    /// Fills that request queues of this thread hold in flight, by cache (its
    /// core's address) and tag, with how many times each was started and not
    /// yet taken back. Only this thread finishes them (it reaps their reads
    /// when it polls a queue), so a blocking lookup of its own that meets one
    /// of these pages being filled must not wait for it. A queue holds one
    /// entry for every page its requests read in, which for large requests
    /// is many times its depth (a 1 MiB read is 256 pages): kept in a hash
    /// map, since a list, searched at every fill's end, made a deep queue of
    /// large reads quadratic.
    static QUEUE_FILLS: std::cell::RefCell<QueueFills> =
        const { std::cell::RefCell::new(HashMap::with_hasher(BuildHasherDefault::new())) };
    /// Write-backs (and pages held for a queued write) that request queues
    /// of this thread hold in flight, in any cache: these too only this
    /// thread finishes.
    static QUEUE_WRITE_BACKS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Fills in flight by (cache, tag): see `QUEUE_FILLS`.
type QueueFills = HashMap<(usize, u64), u32, BuildHasherDefault<KeyHasher>>;

/// The hasher of `QueueFills`' keys: a cache's address and a tag, each
/// folded in, and one `mix64` at the end (no per-key random state: the keys
/// are this thread's own).
#[derive(Default)]
struct KeyHasher(u64);

impl std::hash::Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        mix64(self.0)
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, x: u64) {
        self.0 = self.0.rotate_left(29) ^ x;
    }

    fn write_usize(&mut self, x: usize) {
        self.write_u64(x as u64);
    }
}

/// A request queue of this thread has started (`started`) or settled a
/// write-back (or a hold of pages for a queued write).
pub(crate) fn note_queue_write_back(started: bool) {
    let _ = QUEUE_WRITE_BACKS.try_with(|n| {
        n.set(if started {
            n.get() + 1
        } else {
            n.get().saturating_sub(1)
        })
    });
}

/// A request queue of this thread has started (`started`) or taken back the
/// fill of `tag` in the cache whose core is at `core`.
pub(crate) fn note_queue_fill(core: usize, tag: u64, started: bool) {
    let _ = QUEUE_FILLS.try_with(|v| {
        let mut v = v.borrow_mut();
        if started {
            *v.entry((core, tag)).or_insert(0) += 1;
        } else if let Entry::Occupied(mut e) = v.entry((core, tag)) {
            if *e.get() > 1 {
                *e.get_mut() -= 1;
            } else {
                e.remove();
            }
        }
    });
}

/// Whether request queues of this thread hold any fill or write-back in
/// flight: I/O that only this thread finishes, which another thread may be
/// waiting for while this one waits for it.
pub(crate) fn queue_io() -> bool {
    QUEUE_FILLS
        .try_with(|v| !v.borrow().is_empty())
        .unwrap_or(false)
        || QUEUE_WRITE_BACKS.try_with(|n| n.get() > 0).unwrap_or(false)
}

impl<M: Model> Core<M> {
    /// The tag of a fill that a request queue of this thread holds in flight
    /// in this cache and that someone waits for (`WAITERS`): only this
    /// thread ends it, by polling that queue.
    pub(crate) fn own_fill_waited_for(&self) -> Option<u64> {
        let me = self as *const Self as usize;
        let tags: Vec<u64> = QUEUE_FILLS
            .try_with(|v| {
                (v.borrow().keys())
                    .filter(|&&(c, _)| c == me)
                    .map(|&(_, t)| t)
                    .collect()
            })
            .unwrap_or_default();
        (tags.into_iter()).find(|&t| {
            self.state_of(t)
                .is_some_and(|v| v & PENDING != 0 && v & WAITERS != 0)
        })
    }
}

impl<M: Model> Core<M> {
    /// A tag in `tags` whose fill a request queue of this thread holds in
    /// flight in this cache (only this thread ends it, by polling).
    pub(crate) fn own_fill_in(&self, tags: std::ops::RangeInclusive<u64>) -> Option<u64> {
        let me = self as *const Self as usize;
        QUEUE_FILLS
            .try_with(|v| {
                (v.borrow().keys())
                    .find(|&&(c, t)| c == me && tags.contains(&t))
                    .map(|&(_, t)| t)
            })
            .ok()
            .flatten()
    }
}

/// Whether a request queue of this thread holds the fill of `tag` in the
/// cache whose core is at `core`.
fn own_queue_fill(core: usize, tag: u64) -> bool {
    QUEUE_FILLS
        .try_with(|v| v.borrow().contains_key(&(core, tag)))
        .unwrap_or(false)
}

/// The cache's shared state.
pub(crate) struct Core<M: Model> {
    pub(crate) lay: SetLayout,
    sets: Region,
    pub(super) frames: Region,
    /// The frame region as I/O rings register it: chunk by chunk, on first use.
    /// Frames are given back to the kernel only through it.
    pub(super) chunks: Arc<FixedChunks>,
    pub(crate) page_size: usize,
    /// Sets at level 0 of linear hashing (the smallest table): the starting
    /// number of sets. A table of `n` sets is that of `L = base * 2^k <= n`
    /// sets with `n - L` sets split: a hash goes to `h mod L`, or to `h mod 2L`
    /// when `h mod L < n - L`. Starting at the requested size (rather than at a
    /// power of two with some sets pre-split) keeps every set's expected load
    /// equal until the cache is resized: a split set holds half the hash space
    /// of an unsplit one, which overloads the unsplit ones and costs conflict
    /// misses (measured: 92.9% instead of about 97% hits on a uniform hot set
    /// filling 3/4 of a 29,127-set cache).
    pub(super) base: usize,
    pub(crate) max_sets: usize,
    /// How the sets divide among partitions (one unless the cache is made for
    /// partitioned mode): which sets a page may use, and where each set lies.
    pub(crate) parts: Parts,
    /// The table now: the level `L` in the high 32 bits, the number of sets `n`
    /// in the low 32, one word so that readers never see one without the other.
    /// Written under the resize mutex.
    pub(super) table: AtomicU64,
    /// Resize steps done (a grow or a shrink of one set), bumped under the
    /// locks of the sets the step moved pages between: a search that visits
    /// the candidate sets one at a time sees whether a step ran meanwhile.
    pub(super) steps: AtomicU64,
    /// Sets ever initialised (grows only): a set below this mark may be locked
    /// by a lookup that raced with a shrink, so it is never re-initialised.
    pub(super) inited: Mutex<usize>,
    /// Held for the whole of a resize: two with different targets would
    /// otherwise undo each other's steps for ever.
    pub(super) resizing: Mutex<()>,
    pub(crate) policy: PolicyKind,
    /// The adaptive policy's duel among its candidates (idle for the others).
    pub(crate) duel: Duel,
    /// Per slot (`set * assoc + slot`), the low byte of the epoch of its
    /// page's last use (see [`place`]). Hints: written under the set's lock,
    /// read by misses of either candidate set.
    stamps: Region,
    /// Per set, the fingerprint ([`place::print_of`]) of each slot's page,
    /// eight to a word: hints, written under the set's lock before the tag,
    /// read by lookups without locks to pick the slots worth a tag compare
    /// in both candidate sets at once.
    prints: Region,
    /// The miss clock the stamps are read from.
    pub(super) clock: Clock,
    pub(crate) stats: StatsHub,
    pub(crate) pin_wait: Duration,
    /// The write-back flusher's hook, if one is installed.
    flusher: OnceLock<FlushHook>,
    /// Per file, the sets that hold its dirty pages.
    pub(crate) dirty: DirtySets,
    /// Per set, its epoch: a word bumped whenever one of the set's pages may
    /// change its bytes or leave its slot (where an eviction or a move bumps
    /// `seq`, and when a writer takes a page), kept apart from the sets, eight bytes each, so
    /// that a reader checking many sightings (the paged arrays' translation
    /// tables) finds them in its own caches, not in each set's first line.
    /// Sixty-four bits, so that no count of bumps between a sighting and
    /// its check brings the word back to the value seen (with 32, about
    /// 10 million writes a second to one set's pages would, in 7 minutes).
    epochs: Region,
    _m: PhantomData<M>,
}

/// How writers tell a flusher that a set has many dirty pages.
struct FlushHook {
    /// Dirty pages in a set that make it due.
    at: usize,
    /// One bit per set: flagged and not yet taken by the flusher.
    marks: Vec<AtomicU64>,
    hook: Box<dyn Fn(usize) + Send + Sync>,
}

impl<M: Model> Core<M> {
    pub(crate) fn new(
        sets: usize,
        max_sets: usize,
        parts: usize,
        assoc: usize,
        page_size: usize,
        policy: PolicyKind,
        pin_wait: Duration,
    ) -> Result<Core<M>> {
        let ghosts = policy.ghosts(assoc);
        let lay = SetLayout::new::<M>(assoc, ghosts);
        let sets_mem = Region::new(max_sets * lay.stride, "set metadata")?;
        let frames_len = max_sets * assoc * page_size;
        let frames = Region::new(frames_len, "page frames")?;
        let chunks = Arc::new(FixedChunks::new(frames.ptr(), frames_len));
        let stamps = Region::new(max_sets * assoc, "page stamps")?;
        let prints = Region::new(
            max_sets * assoc.div_ceil(place::PRINTS_PER_WORD) * 8,
            "page fingerprints",
        )?;
        let epochs = Region::new(max_sets * size_of::<AtomicU64>(), "set epochs")?;
        let core = Core {
            lay,
            sets: sets_mem,
            frames,
            chunks,
            page_size,
            base: sets,
            max_sets,
            parts: Parts::new(parts, max_sets),
            table: AtomicU64::new(pack(sets, sets)),
            steps: AtomicU64::new(0),
            inited: Mutex::new(sets),
            resizing: Mutex::new(()),
            policy,
            duel: if policy == PolicyKind::Adaptive {
                Duel::new(sets, assoc)
            } else {
                Duel::idle()
            },
            stamps,
            prints,
            epochs,
            clock: Clock::new(sets * assoc),
            stats: StatsHub::new(),
            pin_wait,
            flusher: OnceLock::new(),
            dirty: DirtySets::new(max_sets),
            _m: PhantomData,
        };
        for s in 0..sets {
            // SAFETY: set `s` lies inside the region and is not yet shared.
            unsafe { core.lay.init::<M>(core.set_ptr(s)) };
            core.reset_policy(s);
        }
        Ok(core)
    }

    #[inline]
    pub(crate) fn n_sets(&self) -> usize {
        unpack(self.table.load(Acquire)).0
    }

    /// The level of linear hashing for a table of `n` sets: the largest
    /// `base * 2^k` not above `n`.
    pub(super) fn level_of(&self, n: usize) -> usize {
        self.base << (n / self.base).ilog2()
    }

    /// Linear hashing: the set of hash `h` in the table `t` (a packed word).
    #[inline]
    pub(crate) fn index(&self, h: u64, t: u64) -> usize {
        let (n, level) = unpack(t);
        let i = modulo(h, level);
        if i < n - level {
            modulo(h, 2 * level)
        } else {
            i
        }
    }

    /// The packed table word now (see [`Core::index`]).
    #[cfg(test)]
    pub(crate) fn table_word(&self) -> u64 {
        self.table.load(Acquire)
    }

    /// The hash of the second candidate set of a page of hash `h`: with
    /// partitions, one of the sets of the first's partition (see [`Parts`]).
    #[inline]
    pub(crate) fn second(&self, h: u64) -> u64 {
        place::second_in(h, self.parts.n as u64)
    }

    /// The two candidate sets of hash `h` in the table `t` (see [`place`]).
    #[inline]
    pub(crate) fn sets_at(&self, h: u64, t: u64) -> (usize, usize) {
        (self.index(h, t), self.index(self.second(h), t))
    }

    /// The candidate sets of hash `h` in the table now.
    #[inline]
    pub(crate) fn sets_now(&self, h: u64) -> (usize, usize) {
        self.sets_at(h, self.table.load(Acquire))
    }

    /// The first candidate set of hash `h` in the table now.
    #[inline]
    fn first_now(&self, h: u64) -> usize {
        self.index(h, self.table.load(Acquire))
    }

    /// The fingerprint words of set `s`.
    #[inline]
    fn prints(&self, s: usize) -> &[AtomicU64] {
        let words = self.lay.assoc.div_ceil(place::PRINTS_PER_WORD);
        // SAFETY: the region holds `words` aligned u64 words for each of the `max_sets` positions, accessed only atomically; `s < max_sets`.
        unsafe {
            std::slice::from_raw_parts(
                self.prints
                    .ptr()
                    .cast::<AtomicU64>()
                    .add(self.parts.pos(s) * words),
                words,
            )
        }
    }

    /// Record that slot `i` of set `s` is taking page `tag` (under the set's
    /// lock, before the tag is stored).
    #[inline]
    pub(super) fn print(&self, s: usize, i: usize, tag: u64) {
        let w = &self.prints(s)[i / place::PRINTS_PER_WORD];
        let shift = 8 * (i % place::PRINTS_PER_WORD);
        let p = u64::from(place::print_of(mix64(tag)));
        w.store(w.load(Relaxed) & !(0xff << shift) | p << shift, Relaxed);
    }

    /// The slots of set `s` whose fingerprint is `p`, as a mask: those that
    /// may hold the page (the tag decides), a hint read without the lock.
    #[inline]
    fn maybe(&self, s: usize, p: u8) -> u32 {
        let words = self.prints(s);
        let m = if let [lo, hi] = words {
            place::print_matches16(lo.load(Relaxed), hi.load(Relaxed), p)
        } else {
            let mut m = 0;
            for (k, w) in words.iter().enumerate() {
                m |= place::print_matches(w.load(Relaxed), p) << (8 * k);
            }
            m
        };
        m & low_mask(self.lay.assoc)
    }

    /// The candidate slots of page `tag` (hash `h`) in its sets `s1` and
    /// `s2`: bit `i` of the mask for slot `i` of the first set, bit `32 + i`
    /// for slot `i` of the second.
    #[inline]
    fn candidates_in(&self, s1: usize, s2: usize, h: u64) -> u64 {
        let p = place::print_of(h);
        let mut m = u64::from(self.maybe(s1, p));
        if s2 != s1 {
            m |= u64::from(self.maybe(s2, p)) << 32;
        }
        m
    }

    /// The slot named by the lowest bit of candidate mask `m` (see
    /// [`Core::candidates_in`]), whose bit is cleared.
    #[inline]
    fn next_candidate(s1: usize, s2: usize, m: &mut u64) -> (usize, usize) {
        let b = m.trailing_zeros() as usize;
        *m &= *m - 1;
        if b < 32 { (s1, b) } else { (s2, b - 32) }
    }

    /// Where `tag` (hash `h`) is now, read without locks: its first
    /// candidate set, and `(set, slot)` if either set holds it.
    #[inline]
    fn locate(&self, h: u64, tag: u64) -> (usize, Option<(usize, usize)>) {
        let (s1, s2) = self.sets_at(h, self.table.load(Acquire));
        (s1, self.find_in(s1, s2, h, tag))
    }

    /// The `(set, slot)` of sets `s1` and `s2` (the same set twice for one)
    /// that holds `tag` (hash `h`): only the slots whose fingerprint matches
    /// have their tag read. Without the locks a hint; under both sets' locks
    /// exact, as a slot's fingerprint is written under the lock before its
    /// tag ([`Core::print`]).
    #[inline]
    fn find_in(&self, s1: usize, s2: usize, h: u64, tag: u64) -> Option<(usize, usize)> {
        let mut m = self.candidates_in(s1, s2, h);
        while m != 0 {
            let (s, i) = Self::next_candidate(s1, s2, &mut m);
            if self.tags(s)[i].load(Relaxed) == tag {
                return Some((s, i));
            }
        }
        None
    }

    /// Where `tag` is now, read without locks: `(set, slot)`.
    #[inline]
    pub(super) fn find(&self, h: u64, tag: u64) -> Option<(usize, usize)> {
        self.locate(h, tag).1
    }

    /// Whether page `tag` is being filled right now, by a look without locks
    /// (a hint: the answer may change at once).
    pub(crate) fn is_filling(&self, tag: u64) -> bool {
        self.find(mix64(tag), tag)
            .is_some_and(|(s, i)| self.state(s, i).load(Acquire) & PENDING != 0)
    }

    /// Whether the page of `tag` is cached with a read or a write-back of
    /// it in flight: busy for as long as a device takes, not for as long as
    /// a user holds it.
    pub(crate) fn is_in_io(&self, tag: u64) -> bool {
        self.find(mix64(tag), tag)
            .is_some_and(|(s, i)| self.state(s, i).load(Acquire) & (PENDING | WRITEBACK) != 0)
    }

    /// What holds the page of `tag` now, in words, for an error that gave
    /// up waiting for it (a look without a lock: it may have changed since).
    pub(crate) fn why_busy(&self, tag: u64) -> &'static str {
        let Some((s, i)) = self.find(mix64(tag), tag) else {
            return "not cached, and no slot of its sets came free";
        };
        let v = self.state(s, i).load(Acquire);
        if v & PENDING != 0 {
            "being read in"
        } else if v & WRITEBACK != 0 {
            "being written back"
        } else if v & WRITER != 0 {
            "held by a writer"
        } else if pins(v) > 0 {
            "pinned by readers"
        } else {
            "free by the time it was given up"
        }
    }

    /// Whether a request queue of the calling thread holds the fill of `tag`
    /// in flight (only this thread finishes it).
    pub(crate) fn is_own_queue_fill(&self, tag: u64) -> bool {
        queue_io() && own_queue_fill(self as *const Self as usize, tag)
    }

    /// The stamp of slot `i` of set `s`.
    #[inline]
    pub(super) fn stamp(&self, s: usize, i: usize) -> &AtomicU8 {
        debug_assert!(s < self.max_sets && i < self.lay.assoc);
        let at = self
            .stamps
            .ptr()
            .wrapping_add(self.parts.pos(s) * self.lay.assoc + i);
        // SAFETY: `at` is one of the region's `max_sets * assoc` bytes, each used only atomically.
        unsafe { &*at.cast::<AtomicU8>() }
    }

    /// Record a use of slot `(s, i)` now (under the lock of set `s`).
    #[inline]
    fn touch(&self, s: usize, i: usize) {
        let now = self.clock.now();
        let w = self.stamp(s, i);
        if w.load(Relaxed) != now {
            w.store(now, Relaxed);
        }
    }

    #[inline]
    pub(super) fn set_ptr(&self, s: usize) -> *mut u8 {
        debug_assert!(s < self.max_sets);
        // SAFETY: `s < max_sets`, so its position is too: inside the region.
        unsafe { self.sets.ptr().add(self.parts.pos(s) * self.lay.stride) }
    }

    #[inline]
    fn lock_word(&self, s: usize) -> &M::W {
        // SAFETY: every set below `inited` holds an initialised lock word at offset 0, and sets are never de-initialised while the core lives.
        unsafe { &*self.set_ptr(s).cast::<M::W>() }
    }

    #[inline]
    pub(crate) fn state(&self, s: usize, i: usize) -> &M::W {
        // SAFETY: as for the lock word; slot `i < assoc`.
        unsafe {
            &*self
                .set_ptr(s)
                .add(self.lay.off_states)
                .cast::<M::W>()
                .add(i)
        }
    }

    /// Set `s`'s epoch (see `Core::epochs`), at the set's position, as its
    /// other state is, so that a partition's epochs lie in its own span.
    #[inline]
    pub(crate) fn epoch(&self, s: usize) -> &AtomicU64 {
        debug_assert!(s < self.max_sets);
        let at = self.parts.pos(s);
        // SAFETY: the region holds `max_sets` aligned 8-byte words, zero-filled (a valid `AtomicU64`), accessed only atomically, for the core's life; `pos` maps the sets one to one onto them.
        unsafe { AtomicU64::from_ptr(self.epochs.ptr().cast::<u64>().add(at)) }
    }

    /// Bump set `s`'s epoch: before the change it announces (a writer's
    /// bytes, a frame's next page), as `seq` is bumped.
    #[inline]
    pub(super) fn bump_epoch(&self, s: usize) {
        // Under the model checker, other threads may run between the change
        // that comes before the bump (a writer's take, an eviction's choice)
        // and the bump itself.
        M::preempt();
        self.epoch(s).fetch_add(1, AcqRel);
    }

    /// The set's change count: bumped whenever a page of the set may have
    /// changed its bytes (a writer leaving) or left its slot (an eviction, a
    /// move), so that an optimistic reader can tell that what it copied was
    /// stable.
    #[inline]
    pub(super) fn seq(&self, s: usize) -> &M::W {
        // SAFETY: as for the lock word; the change count is initialised with it.
        unsafe { &*self.set_ptr(s).add(self.lay.off_seq).cast::<M::W>() }
    }

    /// Copy `dst.len()` bytes from `offset` in page `tag` into `dst` if the page
    /// is cached and readable now, without pinning it or taking a lock: a
    /// seqlock-style read. The frame is copied, then the slot's state and the
    /// set's change count are checked again; if anything that could have
    /// changed the bytes happened in between, the copy is discarded and false
    /// returned (the caller takes the pinning path). On success nothing shared
    /// was written unless the policy needs to learn of the hit.
    ///
    /// The copy may race with a writer or a fill of the same frame; such a
    /// copy is always discarded, as the writer marks the slot (and fences)
    /// before it touches the bytes and bumps the change count before it leaves.
    ///
    /// A sequential stream's reader (`stream`) leaves a cold page cold (and
    /// its policy state as it was) and learns that it was cold; any other
    /// reader warms it.
    #[inline]
    pub(crate) fn try_read_as(&self, tag: u64, offset: usize, dst: &mut [u8], stream: bool) -> Got {
        debug_assert!(offset + dst.len() <= self.page_size);
        let h = mix64(tag);
        let (s1, s2) = self.sets_at(h, self.table.load(Acquire));
        self.warm_translation(s1);
        let mut m = self.candidates_in(s1, s2, h);
        let mut got = Got::Miss;
        while m != 0 {
            let (s, i) = Self::next_candidate(s1, s2, &mut m);
            if let Some(g) = self.try_read_in(s, i, tag, offset, dst, stream) {
                got = g;
                break;
            }
        }
        if got != Got::Miss {
            self.duel.observe_access(s1, tag);
        }
        got
    }

    /// [`Core::try_read_as`] in slot `i` of set `s`: `None` if the slot does
    /// not hold the page.
    #[inline]
    fn try_read_in(
        &self,
        s: usize,
        i: usize,
        tag: u64,
        offset: usize,
        dst: &mut [u8],
        stream: bool,
    ) -> Option<Got> {
        // The frame's first lines start loading while the tag is checked.
        self.prefetch_frame(s, i);
        let seq = self.seq(s).load(Acquire);
        let tags = self.tags(s);
        if tags[i].load(Relaxed) != tag {
            return None;
        }
        let w = self.state(s, i);
        let v = w.load(Acquire);
        if v & (VALID | PENDING | WRITER) != VALID || tags[i].load(Acquire) != tag {
            return Some(Got::Miss);
        }
        // Under the model checker, let other threads run between the checks
        // and the copy (a plain memory copy is no scheduling point of its own),
        // and between the copy's two halves.
        M::preempt();
        let (src, n) = (self.frame(s, i).wrapping_add(offset), dst.len());
        let first = if M::SPLIT_COPIES { n / 2 } else { n };
        // SAFETY: the frame lies in the mapped frame region whatever happens to the slot, and `offset + len <= page_size`. The bytes may be changing under us; they are used only if the checks below prove they did not.
        unsafe { std::ptr::copy_nonoverlapping(src, dst.as_mut_ptr(), first) };
        if M::SPLIT_COPIES {
            M::preempt();
            // SAFETY: as above, for the bytes after the first `first`.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    src.add(first),
                    dst.as_mut_ptr().add(first),
                    n - first,
                )
            };
        }
        fence(Acquire);
        let v2 = w.load(Acquire);
        if v2 & (VALID | PENDING | WRITER | GEN_MASK) != v & (VALID | PENDING | WRITER | GEN_MASK)
            || self.seq(s).load(Relaxed) != seq
        {
            return Some(Got::Miss);
        }
        if v2 & COLD != 0 && stream {
            return Some(Got::Cold);
        }
        self.note_hit(s, i, tag, v2);
        Some(Got::Hit)
    }

    /// Tell the policy of a hit on slot `i` of set `s` (page `tag`, state
    /// `v` as last seen) made without a pin: warm a cold page, and record the
    /// hit under the set's lock if the policy's state would change (or the
    /// slot's stamp is stale) and the lock is free.
    #[inline(always)]
    fn note_hit(&self, s: usize, i: usize, tag: u64, v: u32) {
        if v & COLD != 0 {
            #[cfg(test)]
            if let Some(f) = BEFORE_COLD_HIT_WARMS.take(self as *const Self as usize) {
                f();
            }
            self.warm_seen(s, i, v);
        }
        if self.hit_to_record(s, i) {
            self.record_hit(s, i, tag);
        }
    }

    /// Whether a hit on slot `i` of set `s` is worth the set's lock: the
    /// policy's state would change, or the slot's stamp is stale.
    #[inline(always)]
    fn hit_to_record(&self, s: usize, i: usize) -> bool {
        // SAFETY: slot `i < assoc`; the byte is only a hint here (read without the lock, re-examined by the policy under it).
        let byte = unsafe { std::ptr::read_volatile(self.set_ptr(s).add(self.lay.off_bytes + i)) };
        let stale = self.stamp(s, i).load(Relaxed) != self.clock.now();
        stale || self.policy.hit_changes(byte)
    }

    /// [`Core::note_hit`]'s update, if the set's lock is free.
    #[inline(never)]
    fn record_hit(&self, s: usize, i: usize, tag: u64) {
        if self.try_lock(s) {
            if self.tags(s)[i].load(Relaxed) == tag {
                // SAFETY: set `s` is locked until the unlock below.
                let g = unsafe { self.locked(s) };
                let valid = *g.valid;
                let mut st = g.st;
                self.under_lock().on_hit_tag(&mut st, i, tag, valid);
                self.touch(s, i);
            }
            self.unlock(s);
        }
    }

    /// Where page `tag` is, if it is cached and readable now: its frame,
    /// and the slot's state and set's change count as they were, for a
    /// reader that keeps the address and checks them after each use (see
    /// `cache::still`). Takes no pin and no lock; the hit is told to the
    /// policy as an optimistic read's is.
    /// A sequential stream's reader (`stream`) leaves a cold page cold.
    pub(crate) fn sight(&self, tag: u64, stream: bool) -> Option<Sighting<'_, M>> {
        let (s1, at) = self.locate(mix64(tag), tag);
        let (s, i) = at?;
        let found = self.sight_in(s, i, tag, stream)?;
        self.duel.observe_access(s1, tag);
        Some(found)
    }

    /// A sighting of the page in slot `i` of set `s`, which the caller holds
    /// pinned (so readable, with no writer): where it is now, as
    /// [`Core::sight`] would say, without a lookup or a word to the policy.
    pub(crate) fn sighting_of(&self, s: usize, i: usize) -> Sighting<'_, M> {
        let w = self.state(s, i);
        Sighting {
            frame: self.frame(s, i),
            state: w,
            v: w.load(Acquire) & SIGHT_MASK,
            epoch: self.epoch(s),
            ep: self.epoch(s).load(Acquire),
        }
    }

    /// [`Core::sight`] of slot `i` of set `s`, which held the page a moment
    /// ago: `None` if it is not readable now.
    fn sight_in(&self, s: usize, i: usize, tag: u64, stream: bool) -> Option<Sighting<'_, M>> {
        let ep = self.epoch(s).load(Acquire);
        // The epochs are plain atomics, no scheduling points of the model
        // checker's: let other threads run between the epoch and the state.
        M::preempt();
        let w = self.state(s, i);
        let v = w.load(Acquire);
        if v & (VALID | PENDING | WRITER) != VALID || self.tags(s)[i].load(Acquire) != tag {
            return None;
        }
        if self.epoch(s).load(Acquire) != ep {
            return None;
        }
        if v & COLD == 0 || !stream {
            self.note_hit(s, i, tag, v);
        }
        Some(Sighting {
            frame: self.frame(s, i),
            state: w,
            v: v & SIGHT_MASK,
            epoch: self.epoch(s),
            ep,
        })
    }

    /// The tags of set `s`, readable without its lock (written under it).
    #[inline]
    pub(super) fn tags(&self, s: usize) -> &[AtomicU64] {
        // SAFETY: the tags of an initialised set are `assoc` aligned u64 words, accessed only atomically.
        unsafe {
            std::slice::from_raw_parts(
                self.set_ptr(s).add(self.lay.off_tags).cast::<AtomicU64>(),
                self.lay.assoc,
            )
        }
    }

    #[inline]
    fn try_lock(&self, s: usize) -> bool {
        self.lock_word(s)
            .compare_exchange(UNLOCKED, LOCKED, Acquire, Relaxed)
            .is_ok()
    }

    /// Read hits without the set lock: find the tag, check the slot is a valid
    /// page nobody writes, and pin it with one compare-and-swap of its state
    /// word, which fails if the slot changed in between (page, flags or pins;
    /// the generation rules out a change and back). The policy learns of the
    /// hit only if the set's lock is free right now: a reader never waits.
    /// `WARMS`: the lookup's mode warms the pages it touches (see
    /// [`Mode::warms`]); a constant, so that the plain readers' hit path has no
    /// test of it.
    #[inline]
    fn fast_hit<const WARMS: bool>(&self, tag: u64, h: u64) -> Option<(usize, usize)> {
        let (s1, s2) = self.sets_now(h);
        self.warm_translation(s1);
        let (s, i) = self.find_in(s1, s2, h, tag)?;
        self.prefetch_set(s);
        let tags = self.tags(s);
        let w = self.state(s, i);
        let v = w.load(Acquire);
        if v & (VALID | PENDING | WRITER) != VALID || pins(v) >= MAX_PINS {
            return None;
        }
        if tags[i].load(Acquire) != tag {
            return None;
        }
        self.prefetch_frame(s, i);
        #[cfg(test)]
        if let Some(f) = BEFORE_FAST_PIN.take(self as *const Self as usize) {
            f(v, s, i);
        }
        w.compare_exchange(v, v + PIN, AcqRel, Relaxed).ok()?;
        // The slot may have changed page and come back to the same word (its
        // generation wraps after 512 changes) between the check and the pin:
        // the tag, written before a page turns valid, tells.
        if tags[i].load(Acquire) != tag {
            self.release(s, i, false);
            return None;
        }
        // A stream's pin leaves a cold page as it came in (its stamp orders
        // the cold pages' eviction: the first in goes first), as its
        // optimistic reads do.
        // The policy hears of the hit, under the set's lock if it is free,
        // only if its state would change or the slot's stamp is stale, as
        // with an optimistic read (`note_hit`).
        if (WARMS || v & COLD == 0) && self.hit_to_record(s, i) {
            self.record_hit(s, i, tag);
        }
        Some((s, i))
    }

    /// Warm the CPU caches for a coming lookup of `tag`: with `frame`, look the
    /// tag up (without any lock or write) and ask for the first lines of its
    /// frame; without, ask for the lines of its set. Batched callers do the
    /// second for every page, then the first, then the lookups, so that the
    /// memory misses of a batch overlap instead of following one another.
    #[inline]
    pub(crate) fn prefetch(&self, tag: u64, frame: bool) {
        if frame {
            self.prefetch_bytes(tag, 0, 8 * LINE);
            return;
        }
        let (s1, s2) = self.sets_now(mix64(tag));
        for s in [s1, s2] {
            super::prefetch(self.set_ptr(s));
            super::prefetch(self.prints(s).as_ptr());
            self.prefetch_set(s);
            // A miss compares the slots' stamps to choose its victim.
            super::prefetch(self.stamp(s, 0));
        }
    }

    /// If page `tag` is cached, ask for the lines of its frame covering bytes
    /// `from..to` (clamped to the page). Changes nothing.
    pub(crate) fn prefetch_bytes(&self, tag: u64, from: usize, to: usize) {
        if let Some((s, i)) = self.find(mix64(tag), tag) {
            let f = self.frame(s, i);
            let mut at = from / LINE * LINE;
            while at < to.min(self.page_size) {
                // SAFETY: `at < page_size`, inside the frame.
                super::prefetch(unsafe { f.add(at) });
                at += LINE;
            }
        }
    }

    /// Ask for every line of set `s` at once: the tags and states then arrive
    /// while the lock word (or the first tag) is still on its way.
    #[inline]
    fn prefetch_set(&self, s: usize) {
        let base = self.set_ptr(s);
        let mut off = LINE;
        while off < self.lay.used {
            // SAFETY: `off < used <= stride`, inside set `s`.
            super::prefetch(unsafe { base.add(off) });
            off += LINE;
        }
    }

    /// A hit on a page of set `s` is about to be looked for: ask for the
    /// first line of the set's first frame, so that the address translation
    /// of its frames (one huge page, most often) is under way while the
    /// set's lines are read.
    #[inline(always)]
    fn warm_translation(&self, s: usize) {
        super::prefetch(self.frame(s, 0));
    }

    /// The caller reads the frame next: start loading its first two lines
    /// while the pin and the policy update run.
    #[inline]
    fn prefetch_frame(&self, s: usize, i: usize) {
        let f = self.frame(s, i);
        super::prefetch(f);
        // SAFETY: a frame is at least 512 bytes, so +64 is inside it.
        super::prefetch(unsafe { f.add(LINE) });
    }

    /// Prefer NUMA node `node` for partition `p`'s spans of the set table,
    /// the frames, the stamps, the epochs and the fingerprints (see
    /// [`Parts`]), moving the pages already touched there.
    pub(crate) fn prefer_node(&self, p: usize, node: usize) -> Result<()> {
        let at = self.parts.span(p);
        let (a, n) = (self.lay.assoc, at.len());
        self.sets
            .prefer_node(at.start * self.lay.stride, n * self.lay.stride, node)?;
        let frame_set = a * self.page_size;
        self.frames
            .prefer_node(at.start * frame_set, n * frame_set, node)?;
        self.stamps.prefer_node(at.start * a, n * a, node)?;
        let ep = size_of::<AtomicU64>();
        self.epochs.prefer_node(at.start * ep, n * ep, node)?;
        let pw = 8 * a.div_ceil(place::PRINTS_PER_WORD);
        self.prints.prefer_node(at.start * pw, n * pw, node)
    }

    /// The frame region cut into chunks for I/O rings to register as fixed
    /// buffers when they first use them; a shrink gives back only the frames
    /// of chunks that no ring holds.
    pub(crate) fn frame_chunks(&self) -> &Arc<FixedChunks> {
        &self.chunks
    }

    /// The frame of slot `i` of set `s`.
    #[inline]
    pub(crate) fn frame(&self, s: usize, i: usize) -> *mut u8 {
        // SAFETY: inside the frames (`s < max_sets`, so its position is; `i < assoc`).
        unsafe {
            self.frames
                .ptr()
                .add((self.parts.pos(s) * self.lay.assoc + i) * self.page_size)
        }
    }

    /// The fields of set `s` that only the lock holder touches.
    ///
    /// # Safety
    /// The caller holds the lock of set `s` and drops the view before unlocking.
    #[allow(clippy::mut_from_ref)]
    pub(super) unsafe fn locked(&self, s: usize) -> Locked<'_> {
        let b = self.set_ptr(s);
        let l = &self.lay;
        // SAFETY: the lock gives exclusive access to these fields; offsets and lengths come from the layout the set was initialised with.
        unsafe {
            Locked {
                valid: &mut *b.add(l.off_valid).cast::<u32>(),
                tags: std::slice::from_raw_parts(b.add(l.off_tags).cast::<AtomicU64>(), l.assoc),
                st: SetState {
                    bytes: std::slice::from_raw_parts_mut(b.add(l.off_bytes), l.assoc),
                    word: &mut *b.add(l.off_word).cast::<u32>(),
                    ghost_tags: std::slice::from_raw_parts_mut(
                        b.add(l.off_gtags).cast::<u64>(),
                        l.ghosts,
                    ),
                    ghost_bytes: std::slice::from_raw_parts_mut(b.add(l.off_gbytes), l.ghosts),
                    duel: &self.duel,
                },
            }
        }
    }

    /// The policy, for a call on a set this thread has locked (see
    /// [`UnderLock`]).
    #[inline]
    pub(super) fn under_lock(&self) -> UnderLock<'_> {
        UnderLock(&self.policy, std::thread::panicking())
    }

    pub(super) fn reset_policy(&self, s: usize) {
        // SAFETY: called on a set nobody else can reach yet, or under its lock.
        let mut g = unsafe { self.locked(s) };
        self.under_lock().reset_set(&mut g.st, s);
    }

    #[inline]
    pub(super) fn lock(&self, s: usize) {
        let w = self.lock_word(s);
        if w.compare_exchange(UNLOCKED, LOCKED, Acquire, Relaxed)
            .is_ok()
        {
            return;
        }
        self.lock_slow(w);
    }

    #[cold]
    fn lock_slow(&self, w: &M::W) {
        // Spin, then yield, then sleep: a holder is inside a few dozen
        // instructions unless its CPU was taken away, and a futex sleep costs a
        // cross-CPU wake-up (tens of microseconds on a VM).
        for k in 0..SPINS + YIELDS {
            if k < SPINS {
                M::spin();
            } else {
                M::backoff(0);
            }
            if w.load(Relaxed) == UNLOCKED
                && w.compare_exchange(UNLOCKED, LOCKED, Acquire, Relaxed)
                    .is_ok()
            {
                return;
            }
        }
        while w.swap(CONTENDED, Acquire) != UNLOCKED {
            M::wait(w, CONTENDED);
        }
    }

    #[inline]
    pub(super) fn unlock(&self, s: usize) {
        let w = self.lock_word(s);
        if w.swap(UNLOCKED, Release) == CONTENDED {
            M::wake_one(w);
        }
    }

    /// Address of the metadata of the set that holds `tag` now, or of its
    /// first candidate set if none does (benchmarks).
    pub(crate) fn set_addr(&self, tag: u64) -> usize {
        let h = mix64(tag);
        let s = self.find(h, tag).map_or(self.first_now(h), |(s, _)| s);
        self.set_ptr(s) as usize
    }

    /// Lock the candidate set of hash `h` that holds `tag`: `Some((set,
    /// slot))` with that set locked, or `None` (nothing locked) if neither
    /// holds it. Each set is checked under its lock with the table unchanged
    /// for `h` (a resize may move pages between the sets of a split); a page
    /// only changes set by a resize, or by leaving and coming back, so a page
    /// found in neither was absent at some moment of the call.
    fn lock_holder(&self, h: u64, tag: u64) -> Option<(usize, usize)> {
        'again: loop {
            // No resize step between the visits: comparing the sets would
            // not do, since a shrink and a grow bring the table back to the
            // same word, the page moved meanwhile from the set not yet
            // visited into the one already visited.
            let steps = self.steps.load(Acquire);
            let t = self.table.load(Acquire);
            let (s1, s2) = self.sets_at(h, t);
            let n = if s1 == s2 { 1 } else { 2 };
            for &s in &[s1, s2][..n] {
                self.prefetch_set(s);
                self.lock(s);
                if self.steps.load(Acquire) != steps {
                    self.unlock(s);
                    continue 'again;
                }
                if let Some(found) = self.find_in(s, s, h, tag) {
                    return Some(found);
                }
                self.unlock(s);
                #[cfg(test)]
                if s == s1
                    && n == 2
                    && let Some(f) = BETWEEN_HOLDER_VISITS.take(self as *const Self as usize)
                {
                    f();
                }
            }
            if self.steps.load(Acquire) == steps {
                return None;
            }
        }
    }

    /// As [`Core::lock_holder`], without waiting: `Err(())` when a set it
    /// would look in is locked by another thread.
    fn try_lock_holder(&self, h: u64, tag: u64) -> std::result::Result<Option<(usize, usize)>, ()> {
        'again: loop {
            let steps = self.steps.load(Acquire);
            let t = self.table.load(Acquire);
            let (s1, s2) = self.sets_at(h, t);
            let n = if s1 == s2 { 1 } else { 2 };
            for &s in &[s1, s2][..n] {
                if !self.try_lock(s) {
                    return Err(());
                }
                if self.steps.load(Acquire) != steps {
                    self.unlock(s);
                    continue 'again;
                }
                if let Some(found) = self.find_in(s, s, h, tag) {
                    return Ok(Some(found));
                }
                self.unlock(s);
            }
            if self.steps.load(Acquire) == steps {
                return Ok(None);
            }
        }
    }

    /// Lock both candidate sets of hash `h` (in index order, as a resize
    /// does; once if they are one set): `(first, second)`, the table unchanged
    /// for `h` while they are held.
    fn lock_pair(&self, h: u64) -> (usize, usize) {
        loop {
            let t = self.table.load(Acquire);
            let (s1, s2) = self.sets_at(h, t);
            self.prefetch_set(s1);
            self.prefetch_set(s2);
            self.lock(s1.min(s2));
            if s1 != s2 {
                self.lock(s1.max(s2));
            }
            if self.sets_at(h, self.table.load(Acquire)) == (s1, s2) {
                return (s1, s2);
            }
            self.unlock_pair(s1, s2);
        }
    }

    /// Bump the epochs of both candidate sets of `tag`, under their locks
    /// (see [`crate::cache::PageCache::unsettle`]).
    pub(crate) fn unsettle(&self, tag: u64) {
        let (s1, s2) = self.lock_pair(mix64(tag));
        self.bump_epoch(s1);
        if s2 != s1 {
            self.bump_epoch(s2);
        }
        self.unlock_pair(s1, s2);
    }

    fn unlock_pair(&self, s1: usize, s2: usize) {
        self.unlock(s1);
        if s2 != s1 {
            self.unlock(s2);
        }
    }

    /// Wait until `done(state)` holds for slot `(s, i)`.
    fn wait_slot(&self, s: usize, i: usize, done: impl Fn(u32) -> bool) {
        self.wait_slot_until(s, i, done, None);
    }

    /// [`Core::wait_slot`], giving up at `deadline` if one is given.
    fn wait_slot_until(
        &self,
        s: usize,
        i: usize,
        done: impl Fn(u32) -> bool,
        deadline: Option<std::time::Instant>,
    ) {
        let w = self.state(s, i);
        let mut spins = 0;
        loop {
            let v = w.load(Acquire);
            if done(v) {
                return;
            }
            if spins < 32 {
                spins += 1;
                M::spin();
                continue;
            }
            let left = match deadline {
                Some(d) => match d.checked_duration_since(M::now()) {
                    Some(left) if !left.is_zero() => Some(left),
                    _ => return,
                },
                None => None,
            };
            if v & WAITERS == 0 && w.compare_exchange(v, v | WAITERS, AcqRel, Relaxed).is_err() {
                continue;
            }
            match left {
                Some(left) => M::wait_for(w, v | WAITERS, left),
                None => M::wait(w, v | WAITERS),
            }
            #[cfg(test)]
            if let Some(f) = AFTER_SLOT_WAKE.take(self as *const Self as usize) {
                f();
            }
        }
    }

    /// Wait until page `tag` is no longer being filled, written back or held
    /// by a writer, or `timeout` has passed (at once if it is absent or none
    /// of those), for a caller that holds none of them and would otherwise
    /// poll: it sleeps on the page's word, which each of those ends wakes.
    /// Holds no pin: should the page leave (and another take the slot), its
    /// generation moves and the wait ends. Returns whether it waited.
    pub(crate) fn wait_busy(&self, tag: u64, timeout: Duration) -> bool {
        const BUSY: u32 = PENDING | WRITEBACK | WRITER;
        let Some((s, i)) = self.lock_holder(mix64(tag), tag) else {
            return false;
        };
        let v = self.state(s, i).load(Acquire);
        self.unlock(s);
        if v & BUSY == 0 {
            return false;
        }
        let gen0 = v & GEN_MASK;
        let deadline = M::now() + timeout;
        let done = |v: u32| v & BUSY == 0 || v & GEN_MASK != gen0;
        self.wait_slot_until(s, i, done, Some(deadline));
        true
    }

    /// Wait until page `tag` is no longer being filled, or `timeout` has
    /// passed (at once if it is absent or not being filled). Takes no fill:
    /// for callers that own none and would otherwise poll. Returns whether
    /// it waited.
    pub(crate) fn wait_fill(&self, tag: u64, timeout: Duration) -> bool {
        let Some((s, i)) = self.lock_holder(mix64(tag), tag) else {
            return false;
        };
        let w = self.state(s, i);
        let v = w.load(Acquire);
        if v & PENDING == 0 || !add_pin::<M>(w) {
            self.unlock(s);
            return false;
        }
        self.unlock(s);
        let deadline = M::now() + timeout;
        self.wait_slot_until(s, i, |v| v & PENDING == 0, Some(deadline));
        self.release(s, i, false);
        true
    }

    /// After a transition whose old value was `old`: wake sleepers if any.
    #[inline]
    pub(super) fn wake_if(&self, s: usize, i: usize, old: u32) {
        wake_word::<M>(self.state(s, i), old);
    }

    /// Drop a pin (and the writer bit with `writer`).
    pub(crate) fn release(&self, s: usize, i: usize, writer: bool) {
        if writer {
            // Optimistic readers that overlapped the writer must see a change.
            // (The epoch moved when the writer took the page, and no sighting
            // is made while the writer bit is set.)
            self.seq(s).fetch_add(1, Release);
        }
        let dec = PIN + if writer { WRITER } else { 0 };
        let old = self.state(s, i).fetch_sub(dec, AcqRel);
        debug_assert!(pins(old) > 0);
        self.wake_if(s, i, old);
    }

    /// Pin the page a sighting saw (its slot's word `state`, its set's epoch
    /// `epoch`, as `v` and `ep` then), without a lock, if it is still there,
    /// readable and with no writer: returns whether it is pinned. A pin taken
    /// while the set's epoch moved is given back (an eviction, a move or a
    /// writer may have come between the sighting and the pin).
    pub(crate) fn pin_seen(&self, state: &M::W, epoch: &AtomicU64, v: u32, ep: u64) -> bool {
        let x = state.load(Acquire);
        if x & SIGHT_MASK != v || pins(x) >= MAX_PINS {
            return false;
        }
        if state.compare_exchange(x, x + PIN, AcqRel, Relaxed).is_err() {
            return false;
        }
        if epoch.load(Acquire) == ep {
            return true;
        }
        let old = state.fetch_sub(PIN, AcqRel);
        wake_word::<M>(state, old);
        false
    }

    /// Drop a pin [`Core::pin_seen`] took to read the frame: the page's
    /// state is left as it was.
    pub(crate) fn release_seen(&self, state: &M::W) {
        let old = state.fetch_sub(PIN, AcqRel);
        debug_assert!(pins(old) > 0);
        wake_word::<M>(state, old);
    }

    /// Drop a pin of the slot whose word is `state` (a word of this core's
    /// sets), after its holder stored into the frame: in one step the page
    /// becomes dirty (and warm) and the pin goes. Only a pin holder sets
    /// `DIRTY` without the set's lock; a write-back that cleared `DIRTY`
    /// before this step wrote the bytes stored before it, and one that
    /// clears it after leaves the page to be written again. `file` is the
    /// page's file (the caller knows it, so a store reads no tag).
    pub(crate) fn release_stored(&self, state: &M::W, file: u32) {
        // The set whose memory holds the word: sets lie in one region.
        let at = state as *const M::W as usize - self.sets.ptr() as usize;
        let s = self.parts.set_at(at / self.lay.stride);
        debug_assert!(s < self.max_sets);
        debug_assert!({
            let i = (at % self.lay.stride - self.lay.off_states) / std::mem::size_of::<M::W>();
            std::ptr::eq(self.state(s, i), state) && file_of(self.tags(s)[i].load(Relaxed)) == file
        });
        // The set is marked before the exchange that makes the page dirty,
        // never after: a later store finds the page dirty and marks nothing,
        // so the mark must already be there for any sync that follows that
        // store. A sync that takes the mark between this one and the
        // exchange finds the page pinned (it synchronises with this mark),
        // and leaves the set marked (`PageCache::take_pending_of`).
        let mut marked = false;
        let mut x = state.load(Relaxed);
        let old = loop {
            debug_assert!(pins(x) > 0);
            if x & DIRTY == 0 && !marked {
                self.dirty.mark_unlocked(file, s);
                marked = true;
            }
            // SeqCst, as the load of the set's mark in `note_dirty`: without
            // the set lock, the two are ordered against the flusher's clear
            // of the mark and the fence after it (`unmark_flush`), so either
            // the flusher's look sees this page dirty or `note_dirty` sees the
            // mark cleared and queues the set again.
            match state.compare_exchange(x, ((x - PIN) | DIRTY) & !COLD, SeqCst, Relaxed) {
                Ok(old) => break old,
                Err(now) => x = now,
            }
        };
        // Every store, as every write hit: a set the flusher passed while the
        // page was pinned is queued again.
        self.note_dirty(s);
        wake_word::<M>(state, old);
    }

    /// A reader's lock-free pin of `tag` (no claim, no wait): the set's lock
    /// is not taken, and the hit is counted and heard by the policy as a
    /// locked lookup's would be. `None` when the page is not cached and
    /// readable at once, or for readahead (which never pins a page present).
    pub(crate) fn fast_read(&self, tag: u64, mode: Mode) -> Option<(usize, usize)> {
        if mode == Mode::Ahead {
            return None;
        }
        let h = mix64(tag);
        let (s, i) = if mode.warms() {
            self.fast_hit::<true>(tag, h)
        } else {
            self.fast_hit::<false>(tag, h)
        }?;
        if mode.warms() {
            self.warm(s, i);
        }
        self.stats.bump(Stat::Hits);
        self.duel.observe_access(self.first_now(h), tag);
        Some((s, i))
    }

    /// Find `tag`, pinning it, or claim a frame for it, on behalf of `mode`'s
    /// kind of reader. Blocks while the page is being filled, while a writer
    /// holds it (or, for `write`, while anyone holds it), and with a bounded
    /// backoff while every page of its set is pinned. With `nowait`, returns
    /// [`Found::Busy`] instead of waiting for a fill or a writer (for callers
    /// that must not block: an asynchronous queue may itself own the fill in
    /// flight).
    pub(crate) fn lookup_as(
        &self,
        tag: u64,
        write: bool,
        nowait: bool,
        mode: Mode,
    ) -> Result<Found> {
        let h = mix64(tag);
        let ahead = mode == Mode::Ahead;
        // A caller that does not wait has just tried the optimistic path
        // (but one that wants only a page present has not).
        if !write
            && (!nowait || mode.present_only())
            && let Some((s, i)) = self.fast_read(tag, mode)
        {
            return Ok(Found::Hit(s, i));
        }
        let mut backoff = Backoff::default();
        loop {
            // A page the sets do not show without locks is most likely
            // absent: go straight to locking both sets (which looks again).
            let held = if self.find(h, tag).is_some() {
                self.lock_holder(h, tag)
            } else {
                None
            };
            let step = if let Some((s, i)) = held {
                if ahead {
                    self.unlock(s);
                    return Ok(Found::Busy);
                }
                // SAFETY: set `s` is locked; `lookup_cached` unlocks it.
                self.lookup_cached(s, i, unsafe { self.locked(s) }, write, nowait, mode)
            } else {
                // Absent a moment ago: lock both sets to place it, unless it
                // came in meanwhile.
                let (s1, s2) = self.lock_pair(h);
                match self.find_in(s1, s2, h, tag) {
                    Some((s, i)) => {
                        if s1 != s2 {
                            self.unlock(if s == s1 { s2 } else { s1 });
                        }
                        if ahead {
                            self.unlock(s);
                            return Ok(Found::Busy);
                        }
                        // SAFETY: set `s` is locked; `lookup_cached` unlocks it.
                        self.lookup_cached(s, i, unsafe { self.locked(s) }, write, nowait, mode)
                    }
                    None if mode.present_only() => {
                        self.unlock_pair(s1, s2);
                        return Ok(Found::Busy);
                    }
                    None => self.lookup_missing(s1, s2, tag, write, nowait, mode, &mut backoff)?,
                }
            };
            if let Step::Done(found) = step {
                if ahead {
                    return Ok(found);
                }
                if let Found::Hit(..) | Found::Miss(..) | Found::Pass = found {
                    self.duel.observe_access(self.first_now(h), tag);
                }
                return Ok(found);
            }
        }
    }

    /// `lookup`, set `s` locked, the page cached in slot `i`: share a fill in
    /// flight, wait for a writer (or, for `write`, any holder), or pin it.
    /// Unlocks the set.
    fn lookup_cached(
        &self,
        s: usize,
        i: usize,
        g: Locked<'_>,
        write: bool,
        nowait: bool,
        mode: Mode,
    ) -> Step {
        self.prefetch_frame(s, i);
        let w = self.state(s, i);
        let v = w.load(Acquire);
        if v & PENDING != 0 && nowait {
            self.unlock(s);
            if !mode.present_only() {
                self.stats.bump(Stat::CoalescedWaits);
            }
            return Step::Done(Found::Busy);
        }
        if v & PENDING != 0 {
            // Share the fill in flight: pin so the slot stays, then wait.
            if !add_pin::<M>(w) {
                self.unlock(s);
                M::backoff(0);
                return Step::Again;
            }
            self.unlock(s);
            self.stats.bump(Stat::CoalescedWaits);
            if !queue_io() {
                // A synchronous reader's fill ends in the device's time, a
                // request queue's only once its thread polls: bounded, so
                // that a queue never polled fails this call instead of
                // hanging it.
                let deadline = M::now() + self.pin_wait * LONE_IO_WAITS;
                self.wait_slot_until(s, i, |v| v & PENDING == 0, Some(deadline));
                if w.load(Acquire) & PENDING != 0 {
                    self.release(s, i, false);
                    return Step::Done(Found::IoHeld { fill: true });
                }
            } else {
                // The fill may be one of this thread's queues', which would
                // never end while the thread waits here: after the pin wait,
                // it is looked for among them (another thread's slow fill is
                // waited for as any other).
                let deadline = M::now() + self.pin_wait;
                self.wait_slot_until(s, i, |v| v & PENDING == 0, Some(deadline));
                if w.load(Acquire) & PENDING != 0 {
                    let tag = self.tags(s)[i].load(Relaxed);
                    let own = own_queue_fill(self as *const Self as usize, tag);
                    if !own {
                        let longer = deadline + self.pin_wait * (CROSS_FILL_WAITS - 1);
                        self.wait_slot_until(s, i, |v| v & PENDING == 0, Some(longer));
                    }
                    if w.load(Acquire) & PENDING != 0 {
                        self.release(s, i, false);
                        return Step::Done(Found::FillHeld { own });
                    }
                }
            }
            self.release(s, i, false);
            return Step::Again; // now a hit (or, after a failed fill, a miss)
        }
        let busy = if write {
            pins(v) > 0 || v & WRITEBACK != 0
        } else {
            v & WRITER != 0 || pins(v) >= MAX_PINS
        };
        if busy && nowait {
            self.unlock(s);
            return Step::Done(Found::Busy);
        }
        if busy {
            self.unlock(s);
            // The waits below hold no pin: the page may leave and another
            // take the slot meanwhile. Its generation then moves, and the
            // wait ends (the page is looked up again) instead of waiting
            // for the newcomer's holders and naming the page asked for.
            let gen0 = v & GEN_MASK;
            let left = |v: u32| v & GEN_MASK != gen0;
            if write {
                // Readers' pins (page guards among them) are waited for up
                // to the pin wait; a write-back in flight, as long as it
                // takes, unless request queues of this thread hold I/O of
                // their own: the write-back may be another thread's queue's,
                // which that thread finishes only once it polls, and it may
                // be waiting for ours.
                let free = |v: u32| pins(v) == 0 && v & WRITEBACK == 0;
                let deadline = M::now() + self.pin_wait;
                self.wait_slot_until(s, i, |v| free(v) || left(v), Some(deadline));
                let v = w.load(Acquire);
                if left(v) {
                    return Step::Again;
                }
                if !free(v) && v & WRITEBACK == 0 && M::now() >= deadline {
                    return Step::Done(Found::Held);
                }
                if v & WRITEBACK != 0 {
                    // As for a fill: a request queue's write-back ends only
                    // once its thread polls.
                    let queued = queue_io();
                    let waits = if queued {
                        CROSS_FILL_WAITS
                    } else {
                        LONE_IO_WAITS
                    };
                    let longer = deadline + self.pin_wait * (waits - 1);
                    let done = |v: u32| v & WRITEBACK == 0 || left(v);
                    self.wait_slot_until(s, i, done, Some(longer));
                    if !done(w.load(Acquire)) {
                        return Step::Done(if queued {
                            Found::WriteBackHeld
                        } else {
                            Found::IoHeld { fill: false }
                        });
                    }
                }
            } else if v & WRITER == 0 {
                // Only the pin count at its top: let a holder run.
                M::backoff(0);
            } else if !queue_io() {
                self.wait_slot(s, i, |v| v & WRITER == 0 || left(v));
            } else {
                // The writer may be waiting for a fill that a queue of this
                // thread holds, which only this thread finishes: a bounded
                // wait, as for another thread's fill.
                let deadline = M::now() + self.pin_wait * CROSS_FILL_WAITS;
                let done = |v: u32| v & WRITER == 0 || left(v);
                self.wait_slot_until(s, i, done, Some(deadline));
                if !done(w.load(Acquire)) {
                    return Step::Done(Found::WriterHeld);
                }
            }
            return Step::Again;
        }
        if write {
            // Exclusive: only if no lock-free reader pinned it meanwhile.
            if w.compare_exchange(v, ((v | WRITER | DIRTY) & !COLD) + PIN, AcqRel, Relaxed)
                .is_err()
            {
                self.unlock(s);
                return Step::Again;
            }
            // Sightings of the set's pages go stale before any byte it
            // writes, and the writer bit is visible before them.
            self.bump_epoch(s);
            fence(Release);
        } else {
            if !add_pin::<M>(w) {
                // Lock-free pinners took the count to its top since `v`.
                self.unlock(s);
                M::backoff(0);
                return Step::Again;
            }
            if mode.warms() {
                self.warm(s, i);
            }
        }
        // A stream's read leaves a cold page as it came in: its stamp (the
        // cold pages' eviction order) and its policy state untouched.
        let tag = g.tags[i].load(Relaxed);
        if write || mode.warms() || v & COLD == 0 {
            let valid = *g.valid;
            let mut st = g.st;
            self.under_lock().on_hit_tag(&mut st, i, tag, valid);
            self.touch(s, i);
        }
        if write {
            self.dirty.mark(file_of(tag), s);
            self.note_dirty(s);
        }
        self.unlock(s);
        self.stats.bump(Stat::Hits);
        Step::Done(Found::Hit(s, i))
    }

    /// `lookup`, both candidate sets `s1` and `s2` locked, the page in
    /// neither: claim a free slot or a clean victim's, hand out a dirty victim
    /// to write back, or back off while every page is pinned (up to
    /// `pin_wait`). Unlocks the sets.
    #[allow(clippy::too_many_arguments)]
    fn lookup_missing(
        &self,
        s1: usize,
        s2: usize,
        tag: u64,
        write: bool,
        nowait: bool,
        mode: Mode,
        backoff: &mut Backoff,
    ) -> Result<Step> {
        let admit = (!write && mode == Mode::Normal).then_some(tag);
        let stale_ok = matches!(mode, Mode::Ahead | Mode::Stream);
        // A page that comes in cold may take a cold page's place in the
        // policy's state (`Choice::Swap`).
        let quiet = !write && !mode.warms();
        match self.choose(s1, s2, mode != Mode::Ahead, admit, stale_ok, quiet) {
            c @ (Choice::Slot(s, i) | Choice::Swap(s, i)) => {
                if s1 != s2 {
                    self.unlock(if s == s1 { s2 } else { s1 });
                }
                // SAFETY: still under the lock of set `s`.
                let g = unsafe { self.locked(s) };
                let before = *g.valid;
                self.print(s, i, tag);
                g.tags[i].store(tag, Release);
                *g.valid |= 1 << i;
                let w = self.state(s, i);
                // A free slot is not valid, so no lock-free reader pins it:
                // the swap publishes the tag with a new generation.
                let fl = PENDING
                    | PIN
                    | if write {
                        WRITER | DIRTY
                    } else if !mode.warms() {
                        COLD
                    } else {
                        0
                    };
                let old = w.swap(fl | next_gen(w.load(Relaxed)), AcqRel);
                let mut st = g.st;
                let ghost = !matches!(c, Choice::Swap(..))
                    && self.under_lock().on_insert(&mut st, i, tag, before);
                self.touch(s, i);
                self.clock.tick();
                if write {
                    self.dirty.mark(file_of(tag), s);
                    self.note_dirty(s);
                }
                self.unlock(s);
                // The claim is visible before the fill writes a byte.
                fence(Release);
                self.wake_if(s, i, old);
                self.stats.bump(if mode == Mode::Ahead {
                    Stat::Readahead
                } else {
                    Stat::Misses
                });
                if ghost {
                    self.stats.bump(Stat::GhostHits);
                }
                Ok(Step::Done(Found::Miss(s, i)))
            }
            Choice::Pass => {
                // SAFETY: set `s1` is locked.
                let mut g = unsafe { self.locked(s1) };
                let valid = *g.valid;
                self.under_lock().on_pass(&mut g.st, tag, valid);
                self.clock.tick();
                self.unlock_pair(s1, s2);
                self.stats.bump(Stat::Misses);
                self.stats.bump(Stat::Passed);
                Ok(Step::Done(Found::Pass))
            }
            Choice::WriteBack(s, i, old_tag) => {
                self.unlock_pair(s1, s2);
                self.stats.bump(Stat::DirtyEvictions);
                Ok(Step::Done(Found::WriteBack(s, i, old_tag)))
            }
            Choice::Retry => {
                self.unlock_pair(s1, s2);
                Ok(Step::Again)
            }
            Choice::None => {
                self.unlock_pair(s1, s2);
                if nowait || mode == Mode::Ahead {
                    // The caller may own the pins (fills in flight).
                    return Ok(Step::Done(Found::Busy));
                }
                if backoff.waited >= self.pin_wait {
                    return Err(Error::AllPinned {
                        set: s1,
                        waited_ms: backoff.waited.as_millis() as u64,
                    });
                }
                M::backoff(backoff.pause_us);
                backoff.waited += Duration::from_micros(backoff.pause_us);
                backoff.pause_us = (backoff.pause_us * 2).min(1000);
                Ok(Step::Again)
            }
        }
    }

    /// Under the lock of set `s`, after a page of it became dirty: if the set
    /// now holds `flush_at` or more dirty pages and nobody flagged it yet, flag
    /// it and tell the flusher (one test-and-set of the set's bit; the hook runs
    /// once per flagging).
    #[inline]
    pub(super) fn note_dirty(&self, s: usize) {
        let Some(f) = self.flusher.get() else {
            return;
        };
        let bit = 1u64 << (s % 64);
        // SeqCst for a store into a pinned frame, which calls this without
        // the set lock (see `release_stored`); a plain load on x86.
        if f.marks[s / 64].load(SeqCst) & bit != 0 {
            return; // queued already
        }
        let dirty = (0..self.lay.assoc)
            .filter(|&i| self.state(s, i).load(Relaxed) & (DIRTY | WRITER) != 0)
            .count();
        if dirty < f.at {
            return;
        }
        if f.marks[s / 64].fetch_or(bit, AcqRel) & bit == 0 {
            (f.hook)(s);
        }
    }

    /// Clear the flag [`Core::note_dirty`] set on set `s`, before the
    /// flusher looks at the set's pages; the fence orders the clear before
    /// that look against a store into a pinned frame (see `release_stored`).
    pub(crate) fn unmark_flush(&self, s: usize) {
        if let Some(f) = self.flusher.get() {
            f.marks[s / 64].fetch_and(!(1u64 << (s % 64)), SeqCst);
            fence(SeqCst);
        }
    }

    /// Install the flusher's hook: `hook(set)` runs (on the writer's thread,
    /// under the set's lock or, after a store into a pinned frame, without
    /// it: it must only queue the set) when a write leaves
    /// `at` or more dirty pages in a set. Returns false if one is installed.
    pub(crate) fn set_flusher(&self, at: usize, hook: Box<dyn Fn(usize) + Send + Sync>) -> bool {
        self.flusher
            .set(FlushHook {
                at: at.max(1),
                marks: (0..self.max_sets.div_ceil(64))
                    .map(|_| AtomicU64::new(0))
                    .collect(),
                hook,
            })
            .is_ok()
    }

    /// The dirty, idle pages of set `s` in the order the policy would evict
    /// them (worked out on a copy of the policy state, so nothing changes), as
    /// tags; with the number of dirty pages in the set. None of a set a
    /// shrink removed (its pages moved to its buddy, which the move marked
    /// due itself). Never waits for the set's lock: `None` when another
    /// thread holds it.
    pub(crate) fn try_dirty_in_order(&self, s: usize) -> Option<(Vec<u64>, usize)> {
        if s >= self.n_sets() {
            return Some((Vec::new(), 0));
        }
        if !self.try_lock(s) {
            return None;
        }
        if s >= self.n_sets() {
            self.unlock(s);
            return Some((Vec::new(), 0));
        }
        // SAFETY: set `s` is locked until the unlock below.
        let g = unsafe { self.locked(s) };
        let valid = *g.valid;
        let mut dirty = 0u32;
        let mut all_dirty = 0;
        for i in 0..self.lay.assoc {
            let v = self.state(s, i).load(Acquire);
            if valid & (1 << i) == 0 {
                continue;
            }
            if v & (DIRTY | WRITER) != 0 {
                all_dirty += 1;
            }
            if dirty_idle(v) {
                dirty |= 1 << i;
            }
        }
        let mut bytes = g.st.bytes.to_vec();
        let mut word = *g.st.word;
        let mut gtags = g.st.ghost_tags.to_vec();
        let mut gbytes = g.st.ghost_bytes.to_vec();
        let tags: Vec<u64> = g.tags.iter().map(|t| t.load(Relaxed)).collect();
        self.unlock(s);
        let mut st = SetState {
            bytes: &mut bytes,
            word: &mut word,
            ghost_tags: &mut gtags,
            ghost_bytes: &mut gbytes,
            duel: &self.duel,
        };
        let mut order = Vec::with_capacity(dirty.count_ones() as usize);
        let mut left = dirty;
        while left != 0 {
            let i = self.under_lock().victim(&mut st, left, valid);
            debug_assert!(left & (1 << i) != 0);
            left &= !(1 << i);
            order.push(tags[i]);
        }
        Some((order, all_dirty))
    }

    /// Whether `tag` is cached, dirty and idle: a hint, read without the lock
    /// of its set (the answer may be stale by the time it is used).
    pub(crate) fn dirty_hint(&self, tag: u64) -> bool {
        self.find(mix64(tag), tag)
            .is_some_and(|(s, i)| dirty_idle(self.state(s, i).load(Relaxed)))
    }

    /// Pick the slot for a new page in locked sets `s1` and `s2` (its two
    /// candidates, perhaps one set): a free slot of the first, then of the
    /// second; else the clean victim of whichever set's policy offers the
    /// older one (see [`place`]), evicted; else the write-back of a dirty page.
    /// With `admit` (a plain read of that tag), full sets whose policies both
    /// refuse the page give `Pass`, and a set that must take it
    /// ([`crate::cache::policy::Admit::Here`], or the only one admitting)
    /// gives the victim if it has a clean page.
    fn choose(
        &self,
        s1: usize,
        s2: usize,
        write_back: bool,
        admit: Option<u64>,
        stale_ok: bool,
        quiet: bool,
    ) -> Choice {
        let sets = if s1 == s2 { &[s1][..] } else { &[s1, s2][..] };
        let now = self.clock.now();
        let mut clean = [0u32; 2];
        let mut cold = [0u32; 2];
        let mut dirty = [0u32; 2];
        let mut stale = [0u32; 2];
        let mut warm = [0usize; 2];
        for (k, &s) in sets.iter().enumerate() {
            // SAFETY: set `s` is locked; the view ends with this iteration.
            let valid = unsafe { *self.locked(s).valid };
            for i in 0..self.lay.assoc {
                let v = self.state(s, i).load(Acquire);
                if valid & (1 << i) == 0 {
                    if v & !(WAITERS | GEN_MASK) == 0 {
                        return Choice::Slot(s, i);
                    }
                    continue;
                }
                if v & COLD == 0 {
                    warm[k] += 1;
                }
                if pins(v) > 0 || v & (PENDING | WRITEBACK | WRITER) != 0 {
                    continue;
                }
                if v & DIRTY != 0 {
                    dirty[k] |= 1 << i;
                } else {
                    clean[k] |= 1 << i;
                    if v & COLD != 0 {
                        cold[k] |= 1 << i;
                    } else if stale_ok
                        && now.wrapping_sub(self.stamp(s, i).load(Relaxed)) >= place::STALE
                    {
                        stale[k] |= 1 << i;
                    }
                }
            }
        }
        // A set whose warm pages leave streams less than a quarter of it
        // gives its stale ones to a stream's miss or to readahead as cold.
        for k in 0..sets.len() {
            if warm[k] * 4 > self.lay.assoc * 3 {
                cold[k] |= stale[k];
            }
        }
        // A plain read asks the policies whether the page may take a slot
        // (when no cold page would go anyway): neither set may admit it (it
        // is then served without a slot), or one set must take it (the one
        // that remembers it, or the only one that admits it).
        let mut allowed = [true; 2];
        if let (Some(tag), [0, 0]) = (admit, cold) {
            let mut a = [Admit::No; 2];
            for (k, &s) in sets.iter().enumerate() {
                // SAFETY: set `s` is locked; the view ends with this iteration.
                let mut g = unsafe { self.locked(s) };
                let valid = *g.valid;
                a[k] = self.under_lock().admits(&mut g.st, tag, valid);
            }
            if a == [Admit::No; 2] {
                return Choice::Pass;
            }
            if let Some(k) = place::only(a[0], a[1])
                && clean[k] != 0
            {
                allowed = [k == 0, k == 1];
            }
        }
        // Cold pages go first, the one that came in first (a cold page's
        // stamp is when it came in: a stream's reads do not touch it), so
        // that a scan drops the pages it has read, not those read ahead of
        // it; between the two sets, a cold victim before a warm one, else
        // the older. For a stream's miss and readahead, a stale page (unused
        // for a cache's worth of misses) of a set that warm pages hold more
        // than three quarters of counts as cold: pages written or read once
        // long ago do not keep a scan out of their sets for ever, and a hot
        // set that leaves scans a quarter of the cache stays whole.
        let mut pick: Option<(usize, usize, bool)> = None;
        for (k, &s) in sets.iter().enumerate() {
            if clean[k] == 0 || !allowed[k] {
                continue;
            }
            let is_cold = cold[k] != 0;
            if !is_cold && !write_back {
                // Readahead takes only cold pages (below): asking the policy
                // for a warm victim would change its state (a clock's
                // reference bits, a hand) for a choice thrown away.
                continue;
            }
            let i = if is_cold {
                let mut best = (0u8, usize::MAX);
                let mut m = cold[k];
                while m != 0 {
                    let i = m.trailing_zeros() as usize;
                    m &= m - 1;
                    let age = now.wrapping_sub(self.stamp(s, i).load(Relaxed));
                    if best.1 == usize::MAX || age > best.0 {
                        best = (age, i);
                    }
                }
                best.1
            } else {
                // SAFETY: set `s` is locked; the view ends with this iteration.
                let mut g = unsafe { self.locked(s) };
                let valid = *g.valid;
                let i = self.under_lock().victim(&mut g.st, clean[k], valid);
                debug_assert!(clean[k] & (1 << i) != 0, "policy chose an ineligible slot");
                i
            };
            pick = match pick {
                Some((ps, pi, pc))
                    if (pc && !is_cold)
                        || (pc == is_cold
                            && !place::evict_second(
                                now,
                                self.stamp(ps, pi).load(Relaxed),
                                self.stamp(s, i).load(Relaxed),
                            )) =>
                {
                    Some((ps, pi, pc))
                }
                _ => Some((s, i, is_cold)),
            };
        }
        // Readahead takes only free slots and cold pages: a page read ahead
        // never pushes out one that somebody used.
        let pick = pick
            .filter(|&(_, _, c)| c || write_back)
            .map(|(s, i, _)| (s, i));
        if let Some((s, i)) = pick {
            // SAFETY: set `s` is locked.
            let mut g = unsafe { self.locked(s) };
            // A cold page (one that came in cold and nobody used since) that
            // gives its slot to a page coming in cold leaves the policy
            // untold: neither page was used, so the policy would learn
            // nothing from either, and readahead's claims skip its work.
            // The word the eviction replaced decides, so a reader that
            // warmed the page just before is not overlooked.
            let how = if quiet {
                Leave::QuietIfCold
            } else {
                Leave::Evicted
            };
            return match self.drop_page_quietly(s, &mut g, i, how) {
                None => Choice::Retry,
                Some(true) => Choice::Swap(s, i),
                Some(false) => Choice::Slot(s, i),
            };
        }
        let Some(k) = (0..sets.len()).find(|&k| dirty[k] != 0 && write_back) else {
            return Choice::None;
        };
        let s = sets[k];
        // SAFETY: set `s` is locked.
        let mut g = unsafe { self.locked(s) };
        let valid = *g.valid;
        // The requester writes the victim with its dirty neighbours in the
        // file: among the dirty pages, prefer those that have one, so that the
        // device operation cleans more than one page.
        let mut runs = 0u32;
        let mut m = dirty[k];
        while m != 0 {
            let i = m.trailing_zeros() as usize;
            m &= m - 1;
            let t = g.tags[i].load(Relaxed);
            let p = t & super::MAX_PAGE;
            if (p < super::MAX_PAGE && self.dirty_hint(t + 1)) || (p > 0 && self.dirty_hint(t - 1))
            {
                runs |= 1 << i;
            }
        }
        let pick = if runs != 0 { runs } else { dirty[k] };
        let i = self.under_lock().victim(&mut g.st, pick, valid);
        debug_assert!(pick & (1 << i) != 0, "policy chose an ineligible slot");
        if !self.begin_writeback(s, i) {
            // Lock-free readers filled its pin count since the look: every
            // candidate is pinned, as far as this lookup can tell.
            return Choice::None;
        }
        Choice::WriteBack(s, i, g.tags[i].load(Relaxed))
    }

    /// A fill of `(s, i)` ended. On success the page becomes valid and the
    /// filler keeps its pin; on failure the page is dropped and the pin released.
    pub(crate) fn fill_done(&self, s: usize, i: usize, ok: bool) {
        if ok {
            let w = self.state(s, i);
            let old = w.fetch_or(VALID, AcqRel);
            let old2 = w.fetch_and(!PENDING, AcqRel);
            self.stats.bump(Stat::Fills);
            self.wake_if(s, i, old | old2);
            return;
        }
        self.lock(s);
        {
            // SAFETY: set `s` is locked.
            let g = unsafe { self.locked(s) };
            let valid = *g.valid;
            let mut st = g.st;
            self.under_lock().on_remove(&mut st, i, valid);
            g.tags[i].store(NO_TAG, Release);
            *g.valid &= !(1 << i);
        }
        // Pending, so no lock-free reader pins it; waiters may unpin meanwhile.
        let old = update::<M>(self.state(s, i), |v| {
            ((v & !(PENDING | VALID | WRITER | DIRTY | COLD | GEN_MASK)) | next_gen(v)) - PIN
        });
        self.unlock(s);
        self.stats.bump(Stat::FillErrors);
        self.wake_if(s, i, old);
    }

    /// A write-back of `(s, i)` ended; on failure the page is dirty again.
    pub(crate) fn writeback_done(&self, s: usize, i: usize, ok: bool) {
        let w = self.state(s, i);
        if !ok {
            // Pinned under write-back: the tag is stable.
            self.dirty.mark(file_of(self.tags(s)[i].load(Relaxed)), s);
            w.fetch_or(DIRTY, AcqRel);
        }
        let old = w.fetch_and(!WRITEBACK, AcqRel);
        let old2 = w.fetch_sub(PIN, AcqRel);
        self.wake_if(s, i, old | old2);
    }

    /// Start the write-back of `tag` if it is cached, dirty and idle: returns
    /// its slot, now pinned under write-back.
    pub(crate) fn start_writeback(&self, tag: u64) -> Option<(usize, usize)> {
        let (s, i) = self.lock_holder(mix64(tag), tag)?;
        self.writeback_held(s, i)
    }

    /// As [`Core::start_writeback`], without waiting for a set's lock:
    /// `Err(())` when another thread holds one it would look in.
    pub(crate) fn try_start_writeback(
        &self,
        tag: u64,
    ) -> std::result::Result<Option<(usize, usize)>, ()> {
        let Some((s, i)) = self.try_lock_holder(mix64(tag), tag)? else {
            return Ok(None);
        };
        Ok(self.writeback_held(s, i))
    }

    /// The write-back of slot `(s, i)`, whose set this thread locked, begun
    /// if the page is dirty and idle; the set unlocked.
    fn writeback_held(&self, s: usize, i: usize) -> Option<(usize, usize)> {
        let v = self.state(s, i).load(Acquire);
        let idle = v & DIRTY != 0 && pins(v) == 0 && v & (PENDING | WRITEBACK | WRITER) == 0;
        let started = idle && self.begin_writeback(s, i);
        self.unlock(s);
        started.then_some((s, i))
    }

    /// Put dirty slot `(s, i)` under write-back, pinned, with DIRTY cleared:
    /// writers wait while WRITEBACK is set, and a failed write sets DIRTY again.
    /// One compare-and-swap, refused (false, nothing changed) while the pin
    /// count is at its top: the caller found the page unpinned under the set's
    /// lock, but lock-free readers may have pinned it since, and an add past
    /// the top would carry out of the count and leave the page looking
    /// unpinned (evictable under its readers once the write-back ends).
    #[must_use]
    fn begin_writeback(&self, s: usize, i: usize) -> bool {
        add_pin_with::<M>(self.state(s, i), |v| (v | WRITEBACK) & !DIRTY)
    }

    /// The state word of `tag` if it is cached.
    pub(crate) fn state_of(&self, tag: u64) -> Option<u32> {
        let (s, i) = self.lock_holder(mix64(tag), tag)?;
        let v = self.state(s, i).load(Acquire);
        self.unlock(s);
        Some(v)
    }

    /// As [`Core::state_of`], without waiting for a set's lock: `Err(())`
    /// when another thread holds one it would look in.
    pub(crate) fn try_state_of(&self, tag: u64) -> std::result::Result<Option<u32>, ()> {
        let Some((s, i)) = self.try_lock_holder(mix64(tag), tag)? else {
            return Ok(None);
        };
        let v = self.state(s, i).load(Acquire);
        self.unlock(s);
        Ok(Some(v))
    }

    /// Mark `tag` dirty if it is cached (not being filled), so that it is
    /// written back again. Returns whether it was.
    pub(crate) fn mark_dirty(&self, tag: u64) -> bool {
        let Some((s, i)) = self.lock_holder(mix64(tag), tag) else {
            return false;
        };
        let w = self.state(s, i);
        // Flags change under the lock we hold (lock-free, readers only pin
        // and a pin holder only sets DIRTY as it lets go); a write-back in
        // flight leaves DIRTY set when it ends, so the page is written once
        // more.
        let marked = w.load(Acquire) & PENDING == 0;
        if marked {
            self.dirty.mark(file_of(tag), s);
            w.fetch_or(DIRTY, AcqRel);
        }
        self.unlock(s);
        marked
    }

    /// Drop `tag` if it is cached, clean and idle. Returns whether it was dropped.
    pub(crate) fn evict(&self, tag: u64) -> bool {
        let Some((s, i)) = self.lock_holder(mix64(tag), tag) else {
            return false;
        };
        // SAFETY: set `s` is locked until the unlock below.
        let mut g = unsafe { self.locked(s) };
        // Only pin holders can change the state meanwhile (a pin, or DIRTY as
        // one goes), and `drop_page`'s CAS from a clean idle state then
        // refuses; other flags change under the lock we hold.
        let dropped = self.state(s, i).load(Acquire) & (PENDING | WRITEBACK | WRITER | DIRTY) == 0
            && self.drop_page(s, &mut g, i);
        self.unlock(s);
        dropped
    }

    /// Drop every cached page whose tag `which` accepts, dirty or not (a dirty
    /// page's bytes are discarded unwritten), if nobody uses it. Returns
    /// `(dropped, busy)`: the pages dropped, and the matching pages left in
    /// place because they were pinned, being filled, written or written back.
    pub(crate) fn discard_where(&self, which: impl Fn(u64) -> bool) -> (usize, usize) {
        // No resize step during the pass: a shrink moves the last set's
        // pages into a set of lower index, maybe one already visited, and
        // the pass would end without seeing them.
        let _no_resize = self.inited.lock().unwrap_or_else(|p| p.into_inner());
        let (mut dropped, mut busy) = (0, 0);
        let mut s = 0;
        while s < self.n_sets() {
            self.lock(s);
            if s < self.n_sets() {
                // SAFETY: set `s` is locked.
                let mut g = unsafe { self.locked(s) };
                for i in 0..self.lay.assoc {
                    if *g.valid & (1 << i) == 0 || !which(g.tags[i].load(Relaxed)) {
                        continue;
                    }
                    let v = self.state(s, i).load(Acquire);
                    // Other flags change only under the lock we hold; a lock-free
                    // reader may still pin, and `drop_page` then refuses.
                    if pins(v) == 0
                        && v & (PENDING | WRITEBACK | WRITER) == 0
                        && self
                            .drop_page_quietly(s, &mut g, i, Leave::Removed)
                            .is_some()
                    {
                        dropped += 1;
                    } else {
                        // Left in place (a pin, a fill, a write): the set's
                        // change count moves all the same, so that a
                        // translation of the page made before (a paged
                        // array's reader) is stale now and looks again,
                        // finding the file's new length or its deletion.
                        self.bump_epoch(s);
                        busy += 1;
                    }
                }
            }
            self.unlock(s);
            #[cfg(test)]
            if let Some(f) = AFTER_DISCARD_VISIT.take((self as *const Self as usize, s)) {
                f();
            }
            s += 1;
        }
        (dropped, busy)
    }

    /// Visit every valid page: `(tag, state, frame)`, each set under its lock.
    /// Call `f(tag, state)` for each valid page of set `s` (nothing if the
    /// set is gone in a shrink), under the set's lock.
    pub(crate) fn for_set(&self, s: usize, mut f: impl FnMut(u64, u32)) {
        if s >= self.n_sets() {
            return;
        }
        self.lock(s);
        if s < self.n_sets() {
            // SAFETY: set `s` is locked.
            let g = unsafe { self.locked(s) };
            for i in 0..self.lay.assoc {
                if *g.valid & (1 << i) != 0 {
                    f(g.tags[i].load(Relaxed), self.state(s, i).load(Acquire));
                }
            }
        }
        self.unlock(s);
    }

    pub(crate) fn for_each(&self, mut f: impl FnMut(u64, u32, *const u8)) {
        self.walk_slots(|s, _, i, tag| f(tag, self.state(s, i).load(Acquire), self.frame(s, i)));
    }

    /// Call `f(set, slot, tag)` for every valid slot, set by set, each under
    /// its lock, with no resize step during the walk (a shrink would move
    /// the last set's pages into a set already visited, and the walk would
    /// miss them: a dirty page left out of `dirty_pages`).
    fn walk_slots(&self, mut f: impl FnMut(usize, &mut Locked<'_>, usize, u64)) {
        let _no_resize = self.inited.lock().unwrap_or_else(|p| p.into_inner());
        let mut s = 0;
        while s < self.n_sets() {
            self.lock(s);
            if s < self.n_sets() {
                // SAFETY: set `s` is locked.
                let mut g = unsafe { self.locked(s) };
                for i in 0..self.lay.assoc {
                    if *g.valid & (1 << i) != 0 {
                        let tag = g.tags[i].load(Relaxed);
                        f(s, &mut g, i, tag);
                    }
                }
            }
            self.unlock(s);
            #[cfg(test)]
            if let Some(f) = AFTER_WALK_VISIT.take((self as *const Self as usize, s)) {
                f();
            }
            s += 1;
        }
    }

    /// A reader other than a sequential stream uses page `(s, i)`, which it
    /// has pinned or validated: if it was cold, it is cold no more.
    #[inline]
    fn warm(&self, s: usize, i: usize) {
        let w = self.state(s, i);
        if w.load(Relaxed) & COLD != 0 {
            w.fetch_and(!COLD, Relaxed);
        }
    }

    /// [`Core::warm`] for a reader that holds no pin, only the slot's state
    /// `v` as it checked it: the page is warmed only while the slot still
    /// holds it (the same sighting bits), so that a page claimed cold into
    /// the slot since (read ahead after an eviction) stays cold.
    #[inline]
    fn warm_seen(&self, s: usize, i: usize, v: u32) {
        let w = self.state(s, i);
        let mut x = w.load(Relaxed);
        while x & COLD != 0 && x & SIGHT_MASK == v & SIGHT_MASK {
            match w.compare_exchange(x, x & !COLD, Relaxed, Relaxed) {
                Ok(_) => break,
                Err(now) => x = now,
            }
        }
    }

    /// Make page `tag` go first if it is cached, clean and idle (a hint
    /// that it will not be needed); returns whether it was marked.
    pub(crate) fn make_cold(&self, tag: u64) -> bool {
        let h = mix64(tag);
        let Some((s, i)) = self.lock_holder(h, tag) else {
            return false;
        };
        // SAFETY: set `s` is locked until the unlock below.
        let mut g = unsafe { self.locked(s) };
        let ok = self.cool(s, &mut g, i);
        self.unlock(s);
        ok
    }

    /// Mark slot `i` of locked set `s` (viewed through `g`) cold if its page
    /// is clean and idle. Its policy history goes, as if it had come in cold:
    /// a page coming in cold may take its slot without telling the policy,
    /// and must not inherit the uses of a page somebody used.
    fn cool(&self, s: usize, g: &mut Locked<'_>, i: usize) -> bool {
        let w = self.state(s, i);
        let v = w.load(Acquire);
        if v & COLD != 0 {
            return v & (VALID | PENDING | DIRTY | WRITEBACK | WRITER) == VALID;
        }
        // A CAS from the clean state: a pin holder that stores meanwhile (and
        // so warms the page as it lets go) wins, and the page stays warm.
        let ok = v & (VALID | PENDING | DIRTY | WRITEBACK | WRITER) == VALID
            && w.compare_exchange(v, v | COLD, AcqRel, Relaxed).is_ok();
        if ok {
            let (valid, tag) = (*g.valid, g.tags[i].load(Relaxed));
            self.under_lock().on_remove(&mut g.st, i, valid);
            self.under_lock()
                .on_insert(&mut g.st, i, tag, valid & !(1 << i));
        }
        ok
    }

    /// [`Core::make_cold`] for every page whose tag `which` accepts, by a
    /// walk of every set (each under its lock, no resize step meanwhile): the
    /// number made cold. A page cached just after the walk is missed.
    pub(crate) fn make_cold_where(&self, which: impl Fn(u64) -> bool) -> usize {
        let mut made = 0;
        self.walk_slots(|s, g, i, tag| {
            if which(tag) && self.cool(s, g, i) {
                made += 1;
            }
        });
        made
    }

    /// Evict idle page `i` of locked set `set` (a clean victim, or a frozen
    /// page of a shrink), leaving a ghost if the policy keeps them. False if a
    /// lock-free reader pinned it first.
    pub(super) fn drop_page(&self, set: usize, g: &mut Locked<'_>, i: usize) -> bool {
        self.drop_page_quietly(set, g, i, Leave::Evicted).is_some()
    }

    /// Drop idle page `i` of locked set `set`, the page leaving `how`: a
    /// page found dirty stays unless it is `Leave::Removed` (a pin holder may
    /// have stored into it and marked it since the caller looked,
    /// `release_stored`); with
    /// `Leave::QuietIfCold`, a page found `COLD` as it is dropped leaves
    /// without a word to the policy (the caller puts a cold page in the slot
    /// at once, under the same lock, and does not tell the policy of that
    /// either). `None` if the page stays, else whether it left quietly.
    fn drop_page_quietly(
        &self,
        set: usize,
        g: &mut Locked<'_>,
        i: usize,
        how: Leave,
    ) -> Option<bool> {
        let w = self.state(set, i);
        let v = w.load(Acquire);
        let dirty_ok = how == Leave::Removed;
        if pins(v) > 0
            || (v & DIRTY != 0 && !dirty_ok)
            || w.compare_exchange(v, next_gen(v), AcqRel, Relaxed).is_err()
        {
            return None;
        }
        self.seq(set).fetch_add(1, Release);
        self.bump_epoch(set);
        let quiet = how == Leave::QuietIfCold && v & COLD != 0;
        let valid = *g.valid;
        if how == Leave::Removed {
            self.under_lock().on_remove(&mut g.st, i, valid);
        } else if !quiet {
            self.under_lock()
                .on_evict(&mut g.st, i, g.tags[i].load(Relaxed), valid);
        }
        g.tags[i].store(NO_TAG, Release);
        *g.valid &= !(1 << i);
        self.wake_if(set, i, v);
        self.stats.bump(Stat::Evictions);
        Some(quiet)
    }
}

/// How a page leaves its slot ([`Core::drop_page_quietly`]).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Leave {
    /// Evicted, if clean: the policy is told (and may keep a ghost).
    Evicted,
    /// Evicted, but a cold page leaves untold (its slot goes to a page
    /// coming in cold, untold too).
    QuietIfCold,
    /// Gone from its file (a truncation, a deleted file): the policy forgets
    /// it, with no ghost.
    Removed,
}

/// Wake everyone sleeping on the state word `w` if its value before a
/// transition, `old`, says someone does (`WAITERS`).
fn wake_word<M: Model>(w: &M::W, old: u32) {
    if old & WAITERS != 0 {
        w.fetch_and(!WAITERS, AcqRel);
        M::wake_all(w);
    }
}

/// Apply `f` to the word atomically; returns the old value.
fn update<M: Model>(w: &M::W, f: impl Fn(u32) -> u32) -> u32 {
    let mut v = w.load(Relaxed);
    loop {
        match w.compare_exchange(v, f(v), AcqRel, Relaxed) {
            Ok(old) => return old,
            Err(now) => v = now,
        }
    }
}

impl<M: Model> Drop for Core<M> {
    fn drop(&mut self) {
        let n = *self.inited.get_mut().unwrap_or_else(|p| p.into_inner());
        for s in 0..n {
            // SAFETY: sets below `inited` were initialised; nothing uses them now.
            unsafe { self.lay.drop_set::<M>(self.set_ptr(s)) };
        }
    }
}

/// A table of `n` sets at level `level`, as one word.
#[inline]
pub(super) fn pack(n: usize, level: usize) -> u64 {
    ((level as u64) << 32) | n as u64
}

/// One more pin on the state word `w`, unless its count is at the top (the
/// set lock does not keep lock-free pinners out, so a count read under it
/// may have grown since): an add past the top would carry into the bits
/// above and leave the page looking unpinned.
#[inline]
fn add_pin<M: Model>(w: &M::W) -> bool {
    add_pin_with::<M>(w, |v| v)
}

/// [`add_pin`], the other bits changed by `flags` in the same
/// compare-and-swap.
#[inline]
fn add_pin_with<M: Model>(w: &M::W, flags: impl Fn(u32) -> u32) -> bool {
    let mut cur = w.load(Acquire);
    loop {
        if pins(cur) >= MAX_PINS {
            return false;
        }
        match w.compare_exchange(cur, flags(cur) + PIN, AcqRel, Acquire) {
            Ok(_) => return true,
            Err(now) => cur = now,
        }
    }
}

/// `(n, level)` of a packed table word.
#[inline]
fn unpack(t: u64) -> (usize, usize) {
    ((t & 0xffff_ffff) as usize, (t >> 32) as usize)
}

/// `h mod m`, with a mask when `m` is a power of two.
#[inline]
pub(super) fn modulo(h: u64, m: usize) -> usize {
    if m.is_power_of_two() {
        h as usize & (m - 1)
    } else {
        (h % m as u64) as usize
    }
}

/// Why a resize step could not be taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Busy {
    /// A page that must move is pinned or under I/O: retry shortly.
    Pinned,
    /// Merging would drop dirty pages: only a write-back makes room.
    Dirty,
}

/// What one locked step of `lookup` came to.
enum Step {
    Done(Found),
    /// Look again (the set is unlocked).
    Again,
}

/// How long `lookup` has backed off while every page of a set was pinned.
struct Backoff {
    waited: Duration,
    pause_us: u64,
}

impl Default for Backoff {
    fn default() -> Backoff {
        Backoff {
            waited: Duration::ZERO,
            pause_us: 1,
        }
    }
}

enum Choice {
    Slot(usize, usize),
    /// As `Slot`, the slot's cold page dropped without a word to the policy:
    /// the new page, cold too, takes its place in the policy's state.
    Swap(usize, usize),
    WriteBack(usize, usize, u64),
    /// A lock-free reader pinned the chosen victim: look again.
    Retry,
    None,
    /// Neither set admits the page.
    Pass,
}

/// The lock-protected fields of one set.
/// The policy while a set's lock is held, for one call. A set's lock is a
/// word, not a guard: a panic inside policy code would leave the set locked,
/// and every thread that reached the set later would wait for ever. A panic
/// unwinding through the call ends the process instead, saying why (a panic
/// there is a defect of the crate; no input of the caller's makes one).
/// A call made while the thread was unwinding already (a drop that gives a
/// claimed page back, after a panic elsewhere) is let be.
pub(crate) struct UnderLock<'a>(&'a PolicyKind, bool);

impl std::ops::Deref for UnderLock<'_> {
    type Target = PolicyKind;
    #[inline]
    fn deref(&self) -> &PolicyKind {
        #[cfg(test)]
        if let Some(f) = IN_POLICY_CALL.take(self.0 as *const PolicyKind as usize) {
            f();
        }
        self.0
    }
}

impl Drop for UnderLock<'_> {
    #[inline]
    fn drop(&mut self) {
        if !self.1 && std::thread::panicking() {
            eprintln!(
                "setcache: a panic in the cache's policy code while a set was locked; \
                 ending the process, which would otherwise wait for ever on that set"
            );
            std::process::abort();
        }
    }
}

pub(crate) struct Locked<'a> {
    pub(super) valid: &'a mut u32,
    pub(super) tags: &'a [AtomicU64],
    pub(super) st: SetState<'a>,
}
