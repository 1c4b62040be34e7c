//! The adaptive policy, the cache's default: each set runs whichever of LRU,
//! SIEVE, LIRS and S3-FIFO the workload rewards, learned from a sample of the
//! sets.
//!
//! No single policy wins everywhere: LRU wins on recency-friendly access and
//! on loops that change direction, SIEVE where popularity is skewed and
//! one-hit wonders abound, LIRS on loops and scans larger than the cache,
//! S3-FIFO where pages used twice soon come back and pages used once do not
//! (the YCSB generator's skewed key-value load; the cache2k trace of an
//! ORM). The
//! adaptive policy learns which one the workload rewards by set sampling with
//! shadow tags, as processor caches measure a policy's worth on a few sets
//! (Qureshi and Patt, "Utility-based cache partitioning", MICRO 2006; the set
//! dueling of Qureshi et al., ISCA 2007, runs the candidates on leader sets
//! instead, which costs hits: measured here, 8 rows of the gap table):
//!
//! - Some sets are *sampled* ([`Duel::sample_of`]: one in 64, and set 0
//!   in a smaller cache). Every access to a
//!   sampled set is also replayed through a *shadow* set, tags and
//!   policy state only, one per candidate, kept in the cache's [`Duel`]. The
//!   accesses wait in the sample in batches of 16 and replay a batch at a
//!   time, one shadow after the other, so that each shadow's lines and its
//!   policy's code stay in the CPU's caches through the batch. The
//!   shadows count their misses; every 64 sampled accesses (four batches)
//!   the counts go to
//!   the duel's totals, which halve when the accesses reach [`DECAY_AT`], so
//!   the choice follows the recent past. All candidates see the same
//!   accesses, so their misses compare directly.
//! - A new cache starts *cold*, running LRU. Whichever comes first ends
//!   the cold start: a hit (the workload reuses pages before the cache is
//!   full: LIRS holds, until the shadows say otherwise), or an eviction (a
//!   set filled before anything came back: LRU holds if every sample saw
//!   its pages in one order, up or down, as a pass over a range brings
//!   them; else LIRS). Until then the shadows replay each sampled access at
//!   once, not in batches, and a shadow's hit ends the cold start as a hit
//!   does. A workload whose first pass is longer than the cache and then
//!   turns back (up and down a range) finds the latest pages of that pass
//!   resident, as LRU leaves them; one that mixes reuse into its first pages
//!   (a hot set among scans) gets LIRS from its first hits, and one that
//!   fills the cache in no order keeps its first pages as LIRS does. The
//!   rule for a workload that reuses nothing ends the cold start too (SIEVE
//!   holds, below): with two candidate sets per page a set fills only when
//!   the cache is nearly full, while that rule needs 1,024 sampled accesses
//!   (about 65,000 in all), so in a cache of more than some 70,000 pages a
//!   first pass without reuse meets that rule first, as before the cold
//!   start (measured: the gap table's backf and zigzag traces
//!   at half their footprint, 6.93 and 4.02 points below LRU with LIRS from
//!   the start, 2.81 and 2.27 with the cold start; the scan trace, a loop
//!   that LIRS wins, at half its footprint +0.07 and -1.91 points, whose
//!   first pass LRU now holds; every row of the other traces within 0.5
//!   points).
//! - The candidate with the fewest misses is the winner, with hysteresis: a
//!   challenger takes over only with misses 0.8 points (2/256 of the
//!   accesses) below the holder's. The winner is
//!   chosen again at every report, from the totals, and, while the totals
//!   hold fewer than `DECAY_AT / 2` accesses, after every batch that ends no
//!   report, from the totals and the sample's own counts since its last
//!   report: only a report writes the shared counts, but a small cache,
//!   whose one sampled set reaches its first report only after some
//!   thousands of accesses, leaves a wrong start sooner (measured, 2 rows
//!   fewer beyond target in the gap table).
//! - When every shadow (the admitting LIRS and S3-FIFO's second form too)
//!   hits at most 1.6% of the accesses, after the duel's first 1,024, the
//!   winner is SIEVE, whose misses cost least (`IDLE_HITS`): no candidate
//!   could win more there, and such a cache spends its time on misses
//!   (measured: random reads over a file 128 times the cache, 1.3 µs less
//!   CPU a miss than with LIRS's stack and ghosts). A candidate that finds
//!   reuse takes over from it by the margin, as from any holder.
//! - A fifth shadow runs LIRS with admission ([`Duel::admission`]): when it
//!   misses less than plain LIRS by 1.2 points, the sets running LIRS
//!   decide admission, and LIRS competes with those misses; when its lead
//!   falls below the margin, admission stops.
//! - A sixth shadow runs S3-FIFO's second form ([`Duel::s3_twice`]): a small
//!   page moves to main after two hits, in a small queue of a fifth of the
//!   set, where the first form moves it after one, in a tenth. The sets
//!   running S3-FIFO change form when the other one misses less by the
//!   margin, and S3-FIFO competes with the misses of the form it runs
//!   (measured: the cache2k web server's trace at 1% and 5% of its
//!   footprint, 1.67 and 1.31 points below the best global policy with the
//!   first form alone, 0.89 and 0.51 with both; the YCSB generator at 1%,
//!   which keeps the first form, 0.45 and 0.56).
//! - Every set, sampled or not, runs the winner. A set notices a new winner at
//!   its next miss and then rebuilds its state for it: the state is reset and
//!   its resident pages are entered in slot order, as if just inserted.
//!   Switches are rare (hysteresis; in a new cache's first 128 sampled
//!   accesses the margin is below one miss, and a lead of one miss switches),
//!   so the lost order costs little.
//!
//! Only accesses to sampled sets touch the duel, and only every 64th of them
//! writes its shared counts. A set running LRU moves a page to the top at
//! its first hit since the set's last miss and sets bit 7 of its byte; later
//! hits on it change nothing and take no lock until the next miss (or a
//! removal) clears the bits (hits on A, B, A leave B on top, where LRU would put A; measured,
//! 0.3 to 0.4 points of the backf and zigzag traces at half their footprint
//! against the hit log below). A set running LIRS defers its hits: a hit
//! sets bit 7 of the page's byte and enters the slot in the set's *hit log*
//! (under the set's lock, once), and the set's next miss applies the deferred
//! hits before choosing a victim: first the pages the log no longer names, in
//! the order of their ranks, then the last three pages first hit, in the order
//! of those first hits since the last miss (a page hit again later keeps the
//! place of its first hit: hits on A, B, A leave B on top, where LRU would
//! put A), so that the page first hit last ends on top (a set whose hits
//! came up and then down a range loses less to
//! the deferral: measured, 1.3 points of the gap table's zigzag trace at
//! half its footprint and 1.0 of backf). Later hits on a page whose bit 7 is set change nothing
//! and take no lock, as with SIEVE's visited bit and an S3-FIFO frequency at
//! its top. Sampled sets defer and skip hits as the others do: their shadows
//! are fed by the accesses themselves, not by the set's policy.
//!
//! # State
//!
//! The set word: the candidate that the set's state belongs to in bits 28..30,
//! the candidate's own word in the low 6 bits (SIEVE's hand), and
//! in bits 6..24, while the set runs LIRS, the hit log: three 6-bit
//! entries, each a slot number plus one (0: none), the newest in the low
//! bits. The
//! slot bytes are
//! the candidate's in bits 0..7 (SIEVE's visited bit moved from bit 7 to bit
//! 6), and bit 7 means "a hit changes nothing" (a page moved or a hit
//! deferred since the last miss, a visited page or an S3-FIFO frequency at
//! its top, 2: S3-FIFO runs as [`S3FifoDuel`], whose frequencies are bits 6 and 7 and
//! saturate at 2), so that
//! [`Policy::hit_changes`] can answer
//! from the byte alone.
//!
//! The ghost entries are LIRS's or S3-FIFO's, as many as LIRS asks for
//! (`assoc / 2`, 6 in a 12-slot set). Both keep three ghosts to an entry.
//! S3-FIFO's are fingerprints in its queue's order, two thirds of the set
//! (`s3_ghosts`: 8 in a 12-slot set; its shadows keep as many, with whole
//! tags; at most three to each of LIRS's ghost entries, so fewer from 27
//! slots on, and none in a 32-slot set, which has no ghost entries), and a
//! set that remembers a page takes it back ([`Admit::Here`]): a plain read of
//! a page whose two sets are full and hold no cold page then comes into the
//! set that remembers it, if that set has a clean page to give, and enters
//! main, whichever set's victim is older. A fingerprint another page shares
//! brings that page into main in the same way: with 8 ghosts of 16 bits, in
//! about one miss in 8,000 of such a set.
//! LIRS's: each 21-bit
//! third of the 64-bit entry holds a 16-bit fingerprint of the page (a hash;
//! all ones means no ghost) and the ghost's 5-bit rank in the stack; the
//! ghost bytes are unused. A 12-slot set so remembers 18 pages it no longer
//! holds where LIRS on its own keeps 6 (at most `32 - assoc`, for the ranks),
//! in the same bytes: LIRS then tells more pages whose reuse is only somewhat
//! longer than the set apart from pages never seen again. Measured in the gap
//! table: two to an entry (12 ghosts of 27-bit fingerprints) left 2 rows
//! fewer beyond target than LIRS's own 6 (lirs-multi2 at 10% -5.37 to -2.18;
//! YCSB at 1% and two traces that LRU wins, lirs-backf and lirs-zigzag at
//! half their footprint, lost 0.2 to 2.8 points); three to an entry, one row
//! fewer again (lirs-gli at 25% -3.28 to -2.93). A fingerprint shared by two
//! pages makes the second one's miss look like a ghost hit (it comes in as
//! a LIR page): with 18 ghosts of 16 bits, about one miss in 3,600. The
//! shadows keep LIRS's 6 ghosts, with whole tags.

use std::cell::UnsafeCell;
use std::sync::atomic::{
    AtomicBool, AtomicU8, AtomicU32, Ordering::Acquire, Ordering::Relaxed, Ordering::Release,
};

use super::common::{for_each_slot, low_mask, move_to_front};
use super::{Admit, IDLE_DUEL, Lirs, Lru, MAX_ASSOC, NO_TAG, Policy, S3FifoDuel, SetState, Sieve};

/// Number of candidate policies: LRU, SIEVE, LIRS and S3-FIFO, in candidate
/// order (a set word holds the index).
pub const CANDIDATES: usize = 4;

/// Runs `$call` with `$p` bound to candidate `$k`'s policy (S3-FIFO is
/// [`S3FifoDuel`], the variant whose frequencies fit the slot byte's bit 7
/// and whose form the duel chooses).
macro_rules! candidate {
    ($k:expr, $p:ident => $call:expr) => {
        match $k {
            LRU => {
                let $p = Lru;
                $call
            }
            SIEVE => {
                let $p = Sieve;
                $call
            }
            LIRS => {
                let $p = Lirs;
                $call
            }
            _ => {
                let $p = S3FifoDuel;
                $call
            }
        }
    };
}

/// The candidate the sets run during the cold start: LRU, which keeps the
/// latest pages (see the module documentation).
const START: u8 = 0;
/// The holder when a hit ends the cold start: LIRS, until the shadows say
/// otherwise.
const FIRST_HOLDER: usize = 2;
/// A challenger takes over when its misses are below the holder's by this
/// many 256ths of the accesses (0.8 points).
const MARGIN: u64 = 2;
/// LIRS starts admission when its shadow with admission misses this many
/// 256ths of the accesses (1.2 points) below plain LIRS's, and stops when the
/// difference falls below [`MARGIN`]. More than the margin, because a
/// one-set shadow rates admission higher than a cache with two sets per page
/// gets from it (measured: random reads with 90% on a hot region of three
/// quarters of the cache, 0.8 points better in the shadows, 0.2 worse in the
/// cache).
const ADMIT_MARGIN: u64 = 3;
/// Sampled accesses the duel needs before it may judge that the workload
/// reuses nothing at this cache's size.
const IDLE_AFTER: u64 = 1024;
/// When every shadow hits at most this many 256ths of the accesses (1.6
/// points), the sets run SIEVE, whose misses cost least: no candidate can
/// then win more than that, and a cache that holds nothing the workload
/// comes back to spends its time on misses.
const IDLE_HITS: u64 = 4;
/// One set in this many is sampled. The candidates' shadows see the same
/// accesses, so a few sampled sets tell them apart (the gap table changes by
/// a row or two between one set in 4 and one in 64), while every access of
/// a sampled set's pages replays through the shadows.
const SPACING: usize = 64;
/// Sampled accesses between two reports of a sample's counts to the duel.
const REPORT_EVERY: u32 = 64;
/// Sampled accesses that wait in a sample to be replayed together (a
/// divisor of [`REPORT_EVERY`], so that reports come at the same accesses
/// as with a replay of each access at once).
const BATCH: usize = 16;
const _: () = assert!((REPORT_EVERY as usize).is_multiple_of(BATCH));

/// The access count at which all counts halve.
pub const DECAY_AT: u32 = 1 << 16;

/// A slot byte's "a hit changes nothing" flag: a page an LRU set moved to
/// the top since its last miss, a deferred hit in a LIRS set, a visited page
/// in a SIEVE set, or an S3-FIFO page at frequency 2, its top.
const HOT: u8 = 0x80;
/// LRU's candidate number.
const LRU: usize = 0;
/// SIEVE's candidate number.
const SIEVE: usize = 1;
/// LIRS's candidate number.
const LIRS: usize = 2;
/// The duel the shadow of LIRS with admission runs under.
static ADMITTING: Duel = Duel::admitting();
/// The duel the shadow of S3-FIFO's second form runs under.
static TWICE: Duel = Duel::twice();
/// S3-FIFO's candidate number.
const S3FIFO: usize = 3;
const ARM_SHIFT: u32 = 28;
/// The candidate's own word: SIEVE's hand, at most 32 + 1.
const OWN_MASK: u32 = (1 << 6) - 1;
/// The hit log's place in the set word (see the module documentation).
const LOG_SHIFT: u32 = 6;
/// Bits of one hit log entry: a slot number plus one.
const LOG_BITS: u32 = 6;
/// Entries in the hit log.
const LOG_LEN: u32 = 3;
/// The hit log's bits, shifted down.
const LOG_ALL: u32 = (1 << (LOG_BITS * LOG_LEN)) - 1;
const _: () = assert!(LOG_SHIFT + LOG_BITS * LOG_LEN <= ARM_SHIFT);
const _: () = assert!(MAX_ASSOC < 1 << LOG_BITS);
/// Ghosts a shadow set can hold (LIRS keeps `assoc / 2`).
const SHADOW_GHOSTS: usize = MAX_ASSOC;

/// One candidate's copy of a sampled set: tags and policy state, no frames.
#[derive(Clone, Debug)]
struct Shadow {
    tags: [u64; MAX_ASSOC],
    bytes: [u8; MAX_ASSOC],
    word: u32,
    valid: u32,
    ghost_tags: [u64; SHADOW_GHOSTS],
    ghost_bytes: [u8; SHADOW_GHOSTS],
}

impl Shadow {
    const EMPTY: Shadow = Shadow {
        tags: [NO_TAG; MAX_ASSOC],
        bytes: [0; MAX_ASSOC],
        word: 0,
        valid: 0,
        ghost_tags: [NO_TAG; SHADOW_GHOSTS],
        ghost_bytes: [0; SHADOW_GHOSTS],
    };

    /// Accesses `tag` under policy `p` with `assoc` slots and `ghosts`
    /// ghosts, as a set model would; true on a hit.
    fn access<P: Policy>(
        &mut self,
        p: &P,
        duel: &Duel,
        assoc: usize,
        ghosts: usize,
        tag: u64,
    ) -> bool {
        let mut st = SetState {
            bytes: &mut self.bytes[..assoc],
            word: &mut self.word,
            ghost_tags: &mut self.ghost_tags[..ghosts],
            ghost_bytes: &mut self.ghost_bytes[..ghosts],
            duel,
        };
        if let Some(i) = self.tags[..assoc].iter().position(|&t| t == tag) {
            p.on_hit(&mut st, i, self.valid);
            return true;
        }
        let slot = if self.valid != low_mask(assoc) {
            (!self.valid).trailing_zeros() as usize
        } else if p.admits(&mut st, tag, self.valid) == Admit::No {
            p.on_pass(&mut st, tag, self.valid);
            return false;
        } else {
            let v = p.victim(&mut st, self.valid, self.valid);
            p.on_evict(&mut st, v, self.tags[v], self.valid);
            self.valid &= !(1 << v);
            v
        };
        p.on_insert(&mut st, slot, tag, self.valid);
        self.tags[slot] = tag;
        self.valid |= 1 << slot;
        false
    }
}

/// The shadows of one sampled set and their counts since the last report.
#[derive(Clone, Debug)]
struct SampleState {
    shadows: [Shadow; CANDIDATES],
    misses: [u32; CANDIDATES],
    /// LIRS with admission (see [`Duel::admission`]).
    admitting: Shadow,
    admitting_misses: u32,
    /// S3-FIFO in its second form (see [`Duel::s3_twice`]).
    twice: Shadow,
    twice_misses: u32,
    /// Accesses since the last report, replayed or waiting in `batch`.
    accesses: u32,
    /// Accesses not yet replayed, in order (the first `pending`).
    batch: [u64; BATCH],
    /// Accesses waiting in `batch`.
    pending: u32,
    /// During the cold start: the last access's tag, and the direction of
    /// the tags so far (1 up, -1 down, 0 not known yet).
    last: u64,
    dir: i8,
}

/// A sampled set's shadows, behind a flag that makes their user exclusive.
#[derive(Debug)]
struct Sample {
    busy: AtomicBool,
    state: UnsafeCell<SampleState>,
}

impl Sample {
    fn new() -> Sample {
        Sample {
            busy: AtomicBool::new(false),
            state: UnsafeCell::new(SampleState {
                shadows: [const { Shadow::EMPTY }; CANDIDATES],
                misses: [0; CANDIDATES],
                admitting: Shadow::EMPTY,
                admitting_misses: 0,
                twice: Shadow::EMPTY,
                twice_misses: 0,
                accesses: 0,
                batch: [NO_TAG; BATCH],
                pending: 0,
                last: NO_TAG,
                dir: 0,
            }),
        }
    }

    /// Runs `f` on the state if nobody else is in it; else does nothing
    /// (an access lost to the sample, as a counter would lose it).
    fn with<R>(&self, f: impl FnOnce(&mut SampleState) -> R) -> Option<R> {
        if self.busy.swap(true, Acquire) {
            return None;
        }
        // Until `busy` is cleared below, no other thread gets past the swap.
        // SAFETY: `busy` is ours, so this is the only reference to the state.
        let r = f(unsafe { &mut *self.state.get() });
        self.busy.store(false, Release);
        Some(r)
    }
}

/// The shared state of the duel of one cache: the shadows of the sampled
/// sets, the candidates' miss counts and the sampled accesses, and the
/// winner.
#[derive(Debug)]
pub struct Duel {
    /// One set in every `spacing` is sampled (0: none).
    spacing: usize,
    assoc: usize,
    ghosts: usize,
    /// Ghosts of the S3-FIFO shadow: as many as a set running it keeps.
    s3_ghosts: usize,
    samples: Vec<Sample>,
    misses: [AtomicU32; CANDIDATES],
    /// The misses of LIRS with admission, in the same accesses.
    admitting_misses: AtomicU32,
    /// The misses of S3-FIFO's second form, in the same accesses.
    twice_misses: AtomicU32,
    accesses: AtomicU32,
    winner: AtomicU8,
    /// Whether the cold start is under way: no hit and no eviction yet,
    /// in the cache or in the shadows (see the module documentation).
    cold: AtomicBool,
    /// Whether every sample has seen its tags in one order (up or down)
    /// during the cold start.
    ordered: AtomicBool,
    /// Whether the sets running LIRS admit (see [`Duel::admission`]).
    admission: AtomicBool,
    /// Whether the sets running S3-FIFO run its second form (see
    /// [`Duel::s3_twice`]).
    twice: AtomicBool,
}

// The only field that is not `Sync` is each sample's `UnsafeCell`.
// SAFETY: `Sample::with` hands a sample's state to one thread at a time.
unsafe impl Sync for Duel {}

impl Clone for Duel {
    fn clone(&self) -> Duel {
        Duel {
            spacing: self.spacing,
            assoc: self.assoc,
            ghosts: self.ghosts,
            s3_ghosts: self.s3_ghosts,
            samples: self
                .samples
                .iter()
                .map(|s| {
                    let mut copy = Sample::new();
                    if let Some(state) = s.with(|st| st.clone()) {
                        copy.state = UnsafeCell::new(state);
                    }
                    copy
                })
                .collect(),
            misses: std::array::from_fn(|k| AtomicU32::new(self.misses[k].load(Relaxed))),
            admitting_misses: AtomicU32::new(self.admitting_misses.load(Relaxed)),
            twice_misses: AtomicU32::new(self.twice_misses.load(Relaxed)),
            accesses: AtomicU32::new(self.accesses.load(Relaxed)),
            winner: AtomicU8::new(self.winner.load(Relaxed)),
            cold: AtomicBool::new(self.cold.load(Relaxed)),
            ordered: AtomicBool::new(self.ordered.load(Relaxed)),
            admission: AtomicBool::new(self.admission.load(Relaxed)),
            twice: AtomicBool::new(self.twice.load(Relaxed)),
        }
    }
}

impl Duel {
    /// The duel of a cache of `sets` sets of `assoc` slots: one set in every
    /// 64 is sampled (set 0 alone in a cache of fewer).
    pub fn new(sets: usize, assoc: usize) -> Duel {
        let spacing = SPACING;
        Duel {
            spacing,
            assoc,
            ghosts: Lirs.ghosts(assoc).min(SHADOW_GHOSTS),
            s3_ghosts: arm_ghosts(S3FIFO, assoc, Lirs.ghosts(assoc)).min(SHADOW_GHOSTS),
            samples: (0..sets.div_ceil(spacing)).map(|_| Sample::new()).collect(),
            misses: [const { AtomicU32::new(0) }; CANDIDATES],
            admitting_misses: AtomicU32::new(0),
            twice_misses: AtomicU32::new(0),
            accesses: AtomicU32::new(0),
            winner: AtomicU8::new(START),
            cold: AtomicBool::new(true),
            ordered: AtomicBool::new(true),
            admission: AtomicBool::new(false),
            twice: AtomicBool::new(false),
        }
    }

    /// A duel that samples nothing (for caches of other policies, and
    /// tests): the winner stays LRU.
    pub const fn idle() -> Duel {
        Duel {
            spacing: 0,
            assoc: 0,
            ghosts: 0,
            s3_ghosts: 0,
            samples: Vec::new(),
            misses: [const { AtomicU32::new(0) }; CANDIDATES],
            admitting_misses: AtomicU32::new(0),
            twice_misses: AtomicU32::new(0),
            accesses: AtomicU32::new(0),
            winner: AtomicU8::new(0),
            cold: AtomicBool::new(false),
            ordered: AtomicBool::new(false),
            admission: AtomicBool::new(false),
            twice: AtomicBool::new(false),
        }
    }

    /// An idle duel whose LIRS sets admit (for the shadows of LIRS with
    /// admission).
    const fn admitting() -> Duel {
        let mut d = Duel::idle();
        d.admission = AtomicBool::new(true);
        d
    }

    /// An idle duel whose S3-FIFO sets run the second form (for the shadows
    /// of that form).
    const fn twice() -> Duel {
        let mut d = Duel::idle();
        d.twice = AtomicBool::new(true);
        d
    }

    /// Whether sets running S3-FIFO run its second form
    /// ([`S3FifoDuel`]): a small page moves to main after two hits instead
    /// of one, and the small queue is a fifth of the set instead of a tenth.
    /// One hit suits skewed key-value loads, where a page used twice soon
    /// comes back (the YCSB generator); two suit loads where many pages are
    /// used a few times close together and never again (the cache2k trace
    /// of a web server). Chosen as the winner is: by the shadows' misses,
    /// with a margin.
    #[inline]
    pub fn s3_twice(&self) -> bool {
        self.twice.load(Relaxed)
    }

    /// Whether sets running LIRS decide admission: a miss that is not a
    /// ghost hit is then served without a slot when the set's pages are all
    /// LIR pages, and a set keeps no slot for HIR pages. A loop or a scan
    /// larger than the cache then keeps a whole set's worth of itself
    /// resident in every set, where LIRS with one HIR slot keeps all but
    /// one. Chosen as the winner is: by the shadows' misses, with a margin.
    #[inline]
    pub fn admission(&self) -> bool {
        self.admission.load(Relaxed)
    }

    /// Ends the cold start: `holder` holds.
    #[cold]
    fn warm(&self, holder: usize) {
        if self.cold.swap(false, Relaxed) {
            self.winner.store(holder as u8, Relaxed);
        }
    }

    /// The sample number of set `set`, if it is sampled.
    #[inline]
    pub fn sample_of(&self, set: usize) -> Option<usize> {
        if self.spacing == 0 || !set.is_multiple_of(SPACING) {
            return None;
        }
        let i = set / self.spacing;
        (i < self.samples.len()).then_some(i)
    }

    /// The candidate the sets run now.
    #[inline]
    pub fn winner(&self) -> usize {
        usize::from(self.winner.load(Relaxed))
    }

    /// The shadows' reported misses, in candidate order.
    pub fn misses(&self) -> [u32; CANDIDATES] {
        std::array::from_fn(|k| self.misses[k].load(Relaxed))
    }

    /// The sampled accesses reported (the same for every candidate).
    pub fn accesses(&self) -> u32 {
        self.accesses.load(Relaxed)
    }

    /// Replays an access of `tag`, whose first candidate set is `first`,
    /// through the shadows, if that set is sampled. The cache and the
    /// simulator call this once per access, hit or miss, wherever the page
    /// lives: the shadows then see every access of a fixed part of the pages,
    /// whatever the sets' policy decided about them.
    #[inline]
    pub fn observe_access(&self, first: usize, tag: u64) {
        if let Some(i) = self.sample_of(first) {
            self.observe(i, tag);
        }
    }

    /// Adds an access of `tag` to sample `i`'s batch, and replays the batch
    /// through the sample's shadows once it is full.
    fn observe(&self, i: usize, tag: u64) {
        let Some(sample) = self.samples.get(i) else {
            return;
        };
        let cold = self.cold.load(Relaxed);
        let report = sample.with(|st| {
            if cold {
                if st.last != NO_TAG && tag != st.last {
                    let d = if tag > st.last { 1 } else { -1 };
                    if st.dir == 0 {
                        st.dir = d;
                    } else if st.dir != d {
                        self.ordered.store(false, Relaxed);
                    }
                }
                st.last = tag;
            }
            st.batch[st.pending as usize] = tag;
            st.pending += 1;
            st.accesses += 1;
            if !cold && st.pending < BATCH as u32 && st.accesses < REPORT_EVERY {
                return None;
            }
            let batch = &st.batch[..st.pending as usize];
            st.pending = 0;
            for (k, sh) in st.shadows.iter_mut().enumerate() {
                let ghosts = if k == S3FIFO {
                    self.s3_ghosts
                } else {
                    self.ghosts
                };
                candidate!(k, p => {
                    for &t in batch {
                        let hit = sh.access(&p, &IDLE_DUEL, self.assoc, ghosts, t);
                        st.misses[k] += u32::from(!hit);
                    }
                });
            }
            for &t in batch {
                let hit = st
                    .admitting
                    .access(&Lirs, &ADMITTING, self.assoc, self.ghosts, t);
                st.admitting_misses += u32::from(!hit);
            }
            for &t in batch {
                let hit = st
                    .twice
                    .access(&S3FifoDuel, &TWICE, self.assoc, self.s3_ghosts, t);
                st.twice_misses += u32::from(!hit);
            }
            let counts = (st.misses, st.admitting_misses, st.twice_misses, st.accesses);
            let full = st.accesses >= REPORT_EVERY;
            if full {
                st.misses = [0; CANDIDATES];
                st.admitting_misses = 0;
                st.twice_misses = 0;
                st.accesses = 0;
            }
            Some((full, counts))
        });
        let Some(Some((full, (misses, admitting, twice, accesses)))) = report else {
            return;
        };
        if full {
            self.report(misses, admitting, twice, accesses);
        } else {
            let total = self.accesses();
            if total < DECAY_AT / 2 {
                // Between reports of a young duel: the winner as the totals
                // would make it with this sample's counts added, which stay
                // the sample's. Once the totals have half the accesses at
                // which they halve, a sample's own counts change little, and
                // no halving (which stores the counts one after another) is
                // ever under way while they are read here.
                let m =
                    std::array::from_fn(|k| u64::from(self.misses[k].load(Relaxed) + misses[k]));
                let a = u64::from(self.admitting_misses.load(Relaxed) + admitting);
                let t = u64::from(self.twice_misses.load(Relaxed) + twice);
                self.choose(m, a, t, u64::from(total + accesses));
            }
        }
    }

    /// Adds a sample's report and chooses the winner, as if LIRS with
    /// admission had missed as often as plain LIRS (the tests' reports of
    /// made-up counts: a real report always has that shadow's count too).
    #[cfg(test)]
    fn tally(&self, misses: [u32; CANDIDATES], accesses: u32) {
        self.tally_with(misses, misses[LIRS], accesses);
    }

    /// Adds a sample's report (with the misses of LIRS with admission) and
    /// chooses the winner and LIRS's admission, as if S3-FIFO's second form
    /// had missed as often as its first (the tests' reports).
    #[cfg(test)]
    fn tally_with(&self, misses: [u32; CANDIDATES], admitting: u32, accesses: u32) {
        self.report(misses, admitting, misses[S3FIFO], accesses);
    }

    /// Adds a sample's report (with the misses of LIRS with admission and of
    /// S3-FIFO's second form) and chooses the winner, LIRS's admission and
    /// S3-FIFO's form.
    fn report(&self, misses: [u32; CANDIDATES], admitting: u32, twice: u32, accesses: u32) {
        for (m, add) in self.misses.iter().zip(misses) {
            m.fetch_add(add, Relaxed);
        }
        self.admitting_misses.fetch_add(admitting, Relaxed);
        self.twice_misses.fetch_add(twice, Relaxed);
        let n = self.accesses.fetch_add(accesses, Relaxed) + accesses;
        if n >= DECAY_AT {
            // Concurrent reports may be lost here; the counts are a trend.
            let all = self.misses.iter().chain([
                &self.admitting_misses,
                &self.twice_misses,
                &self.accesses,
            ]);
            for c in all {
                c.store(c.load(Relaxed) / 2, Relaxed);
            }
        }
        let a = u64::from(self.admitting_misses.load(Relaxed));
        let t = u64::from(self.twice_misses.load(Relaxed));
        self.choose(
            self.misses().map(u64::from),
            a,
            t,
            u64::from(self.accesses()),
        );
    }

    /// Chooses the winner, LIRS's admission and S3-FIFO's form from the
    /// candidates' misses `m` (S3-FIFO's in its first form), LIRS with
    /// admission's `a`, S3-FIFO's second form's `t` and the accesses they
    /// are of.
    fn choose(&self, mut m: [u64; CANDIDATES], a: u64, t: u64, accesses: u64) {
        let margin = MARGIN * accesses / 256;
        // S3-FIFO changes form when the other one misses less by the margin;
        // it competes with the misses of the form it runs.
        let twice = self.s3_twice();
        let (now_m, other) = if twice {
            (t, m[S3FIFO])
        } else {
            (m[S3FIFO], t)
        };
        if other + margin < now_m {
            self.twice.store(!twice, Relaxed);
        }
        if self.s3_twice() {
            m[S3FIFO] = t;
        }
        // LIRS runs with admission once that misses less by ADMIT_MARGIN,
        // and until it misses less by less than the margin; it competes with
        // the misses of the way it runs.
        let on = self.admission();
        let start = ADMIT_MARGIN * accesses / 256;
        let now = if on {
            a + margin < m[LIRS]
        } else {
            a + start < m[LIRS]
        };
        if now != on {
            self.admission.store(now, Relaxed);
        }
        if now {
            m[LIRS] = a;
        }
        let most = IDLE_HITS * accesses / 256;
        let hits = |x: u64| accesses.saturating_sub(x);
        let all = m.iter().chain([&a, &t]);
        if accesses >= IDLE_AFTER && all.clone().all(|&x| hits(x) <= most) {
            self.cold.store(false, Relaxed);
            if self.winner() != SIEVE {
                self.winner.store(SIEVE as u8, Relaxed);
            }
            return;
        }
        if self.cold.load(Relaxed) {
            if all.clone().all(|&x| hits(x) == 0) {
                return;
            }
            self.warm(FIRST_HOLDER);
        }
        // Read after the cold start's end, which another thread's hit may
        // have made just now.
        let holder = self.winner();
        let best = (0..CANDIDATES)
            .min_by_key(|&k| (m[k], k != holder))
            .unwrap_or(holder);
        let win = if m[best] + margin < m[holder] {
            best
        } else {
            holder
        };
        if win != self.winner() {
            self.winner.store(win as u8, Relaxed);
        }
    }
}

/// The adaptive policy (see the [module documentation](self)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Adaptive;

/// Whether candidate `k` defers hits to the set's next miss (LIRS, whose
/// every hit would reorder its stack); LRU applies a page's first hit since
/// the last miss at once, SIEVE and S3-FIFO apply hits until a page's hits
/// change nothing.
#[inline]
fn defers(k: usize) -> bool {
    k == LIRS
}

/// The candidate whose state set word `w` holds.
#[inline]
fn arm(w: u32) -> usize {
    ((w >> ARM_SHIFT) & 3) as usize
}

/// Runs `f` on candidate `k`'s view of the set: its own word, and its
/// bytes as the candidate keeps them (LRU's and LIRS's without bit 7;
/// SIEVE's with its visited bit, kept in bit 6, moved to bit 7; S3-FIFO's as
/// they are, bit 7 set exactly when a page's frequency is at its top); then
/// restores the adaptive layout. For SIEVE, bit 7 is then set on the visited
/// pages of `valid` (the pages resident afterwards), whose hits change
/// nothing.
#[inline]
fn as_arm<R>(
    st: &mut SetState<'_>,
    k: usize,
    valid: u32,
    f: impl FnOnce(&mut SetState<'_>) -> R,
) -> R {
    as_arm_with::<true, R>(st, k, valid, f)
}

/// [`as_arm`], with the candidate's ghosts unpacked only if `GHOSTS` (a hit
/// reads none).
#[inline]
fn as_arm_with<const GHOSTS: bool, R>(
    st: &mut SetState<'_>,
    k: usize,
    valid: u32,
    f: impl FnOnce(&mut SetState<'_>) -> R,
) -> R {
    let mut own = *st.word & OWN_MASK;
    if k != S3FIFO {
        for b in st.bytes.iter_mut() {
            *b = if k == SIEVE {
                (*b & 0x3f) | ((*b & 0x40) << 1)
            } else {
                *b & !HOT
            };
        }
    }
    let r = if GHOSTS && (k == LIRS || k == S3FIFO) {
        // LIRS's and S3-FIFO's ghosts, three to a ghost entry (see the
        // module documentation).
        let n = arm_ghosts(k, st.bytes.len(), st.ghost_tags.len());
        let mut tags = [NO_TAG; MAX_ASSOC];
        let mut ranks = [0u8; MAX_ASSOC];
        for j in 0..n {
            (tags[j], ranks[j]) = unpack_ghost(st.ghost_tags[j / PER_ENTRY], j % PER_ENTRY);
        }
        let r = f(&mut SetState {
            bytes: &mut *st.bytes,
            word: &mut own,
            ghost_tags: &mut tags[..n],
            ghost_bytes: &mut ranks[..n],
            duel: st.duel,
        });
        for (e, g) in st.ghost_tags.iter_mut().enumerate() {
            *g = pack_ghosts(std::array::from_fn::<_, PER_ENTRY, _>(|h| {
                let j = PER_ENTRY * e + h;
                if j < n {
                    (tags[j], ranks[j])
                } else {
                    (NO_TAG, 0)
                }
            }));
        }
        r
    } else {
        f(&mut SetState {
            bytes: &mut *st.bytes,
            word: &mut own,
            ghost_tags: &mut *st.ghost_tags,
            ghost_bytes: &mut *st.ghost_bytes,
            duel: st.duel,
        })
    };
    *st.word = (*st.word & !OWN_MASK) | (own & OWN_MASK);
    if k == SIEVE {
        for (i, b) in st.bytes.iter_mut().enumerate() {
            let hot = valid & (1 << i) != 0 && !Sieve.hit_changes(*b);
            *b = (*b & 0x3f) | ((*b & 0x80) >> 1);
            if hot {
                *b |= HOT;
            }
        }
    }
    r
}

/// LIRS ghosts a set of `assoc` slots and `entries` ghost entries keeps:
/// three to an entry, as long as the stack's ranks fit in five bits.
#[inline]
fn packed_ghosts(assoc: usize, entries: usize) -> usize {
    (PER_ENTRY * entries).min(32 - assoc).min(MAX_ASSOC)
}

/// Ghosts a set running candidate `k` (LIRS or S3-FIFO) keeps in its
/// `entries` ghost entries.
#[inline]
fn arm_ghosts(k: usize, assoc: usize, entries: usize) -> usize {
    if k == LIRS {
        packed_ghosts(assoc, entries)
    } else {
        (PER_ENTRY * entries).min(s3_ghosts(assoc))
    }
}

/// S3-FIFO's ghosts in a set of `assoc` slots: two thirds of the set (8 of
/// 12), fewer than the paper's ghost queue, as large as main (measured in
/// the gap table: with 7 or 8 of 12, one row fewer beyond target than with
/// 6, 9, 10 or 11).
#[inline]
fn s3_ghosts(assoc: usize) -> usize {
    (assoc * 2 / 3).min(S3FifoDuel.ghosts(assoc))
}

/// Whether a set running candidate `k` (LIRS or S3-FIFO) keeps page `tag`
/// among its packed ghosts, read in place.
#[inline]
fn remembers(st: &SetState<'_>, k: usize, tag: u64) -> bool {
    let n = arm_ghosts(k, st.bytes.len(), st.ghost_tags.len());
    let f = key(k, tag);
    (0..n).any(|j| unpack_ghost(st.ghost_tags[j / PER_ENTRY], j % PER_ENTRY).0 == f)
}

/// LIRS or S3-FIFO ghosts to a ghost entry.
const PER_ENTRY: usize = 3;
/// Bits of a packed ghost: its fingerprint, then its 5-bit rank.
const GHOST_BITS: u32 = 21;
const _: () = assert!(PER_ENTRY as u32 * GHOST_BITS <= 64);
/// A packed ghost that is none.
const NO_GHOST: u64 = (1 << GHOST_BITS) - 1;
/// Bits of a ghost's fingerprint.
const PRINT_BITS: u32 = GHOST_BITS - 5;

/// What stands for page `tag` among a LIRS or S3-FIFO set's ghosts: 16 bits of a hash
/// of it, never all ones (so that a packed ghost is never [`NO_GHOST`]).
#[inline]
fn fingerprint(tag: u64) -> u64 {
    (crate::util::mix::mix64(tag ^ 0x6a09_e667_f3bc_c909) >> (64 - PRINT_BITS))
        % ((1 << PRINT_BITS) - 1)
}

/// The key that candidate `k`'s policy sees for page `tag`: LIRS and S3-FIFO
/// keep their ghosts by fingerprint.
#[inline]
fn key(k: usize, tag: u64) -> u64 {
    if k == LIRS || k == S3FIFO {
        fingerprint(tag)
    } else {
        tag
    }
}

/// Ghost `i` (below [`PER_ENTRY`]) of ghost entry `e`: its fingerprint and
/// rank, or ([`NO_TAG`], 0).
#[inline]
fn unpack_ghost(e: u64, i: usize) -> (u64, u8) {
    let g = (e >> (GHOST_BITS as usize * i)) & NO_GHOST;
    if g == NO_GHOST {
        (NO_TAG, 0)
    } else {
        (g >> 5, (g & 0x1f) as u8)
    }
}

/// A ghost entry holding the ghosts `g` (as [`unpack_ghost`] gives them) in
/// its first `N` places, none in the others: a whole entry of none is
/// [`NO_TAG`].
#[inline]
fn pack_ghosts<const N: usize>(g: [(u64, u8); N]) -> u64 {
    const { assert!(N <= PER_ENTRY) };
    let mut e = u64::MAX;
    for (i, (t, r)) in g.into_iter().enumerate() {
        if t != NO_TAG {
            debug_assert!(t < (1 << PRINT_BITS) - 1, "not a fingerprint: {t:#x}");
            let at = GHOST_BITS as usize * i;
            e &= !(NO_GHOST << at);
            e |= ((t << 5) | u64::from(r & 0x1f)) << at;
        }
    }
    e
}

/// Enters `slot`, just hit for the first time since the set's last miss, in
/// the hit log of the set word `w`; the oldest entry falls out.
#[inline]
fn log_hit(w: u32, slot: usize) -> u32 {
    let log = ((((w >> LOG_SHIFT) & LOG_ALL) << LOG_BITS) | (slot as u32 + 1)) & LOG_ALL;
    (w & !(LOG_ALL << LOG_SHIFT)) | (log << LOG_SHIFT)
}

/// Where slot `i` comes in the order that hits are applied in, by the hit
/// log `log`: 0 if the log does not name it, else 1 for the oldest entry up
/// to [`LOG_LEN`] for the newest.
#[inline]
fn logged(log: u32, i: u8) -> u32 {
    let entry = |j: u32| (log >> (LOG_BITS * j)) & ((1 << LOG_BITS) - 1);
    (0..LOG_LEN)
        .find(|&j| entry(j) == u32::from(i) + 1)
        .map_or(0, |j| LOG_LEN - j)
}

/// At a miss: clears the bit 7 of a set running LRU (its pages' next hits
/// move them again); applies the hits a set running LIRS deferred (bit 7
/// set) and clears bit 7 and the hit log: first the pages hit that the log
/// does not name, in the order of their ranks, the deepest first, so that
/// they keep their order among themselves; then the pages it names, in the
/// order of their first hits, so that the last one ends on top.
fn apply_deferred(st: &mut SetState<'_>, k: usize, valid: u32) {
    if k == LRU {
        for b in st.bytes.iter_mut() {
            *b &= !HOT;
        }
        return;
    }
    if !defers(k) {
        return;
    }
    let mut hit = [0u8; 32];
    let mut n = 0;
    for_each_slot(valid, |i| {
        if st.bytes[i] & HOT != 0 {
            hit[n] = i as u8;
            n += 1;
        }
    });
    if n == 0 {
        return;
    }
    let log = (*st.word >> LOG_SHIFT) & LOG_ALL;
    *st.word &= !(LOG_ALL << LOG_SHIFT);
    let bytes = &*st.bytes;
    hit[..n].sort_unstable_by_key(|&i| {
        (
            logged(log, i),
            std::cmp::Reverse(bytes[usize::from(i)] & 0x1f),
        )
    });
    as_arm(st, k, valid, |v| {
        candidate!(k, p => {
            for &i in &hit[..n] {
                p.on_hit(v, usize::from(i), valid);
            }
        })
    });
}

/// The candidate set `st` should run now, the winner; a set whose state
/// belongs to another candidate is rebuilt for it first (`valid`: its pages).
fn settle(st: &mut SetState<'_>, valid: u32) -> usize {
    let w = *st.word;
    let want = st.duel.winner();
    if arm(w) != want {
        st.bytes.fill(0);
        st.ghost_tags.fill(NO_TAG);
        st.ghost_bytes.fill(0);
        let clear = OWN_MASK | LOG_ALL << LOG_SHIFT | 3 << ARM_SHIFT;
        *st.word = (w & !clear) | ((want as u32) << ARM_SHIFT);
        as_arm(st, want, valid, |v| {
            candidate!(want, p => {
                let mut before = 0;
                for_each_slot(valid, |i| {
                    // No ghosts are left, so no tag can be taken for one.
                    p.on_insert(v, i, 0, before);
                    before |= 1 << i;
                });
            })
        });
    }
    want
}

impl Policy for Adaptive {
    fn ghosts(&self, assoc: usize) -> usize {
        Lirs.ghosts(assoc)
    }

    fn reset_set(&self, st: &mut SetState<'_>, _set: usize) {
        self.reset(st);
        *st.word = (st.duel.winner() as u32) << ARM_SHIFT;
    }

    #[inline]
    fn hit_changes(&self, byte: u8) -> bool {
        byte & HOT == 0
    }

    #[inline]
    fn on_hit(&self, st: &mut SetState<'_>, slot: usize, valid: u32) {
        if st.bytes[slot] & HOT != 0 {
            return;
        }
        let k = arm(*st.word);
        if k == LRU {
            // Only a set running LRU can hit during the cold start (every
            // set runs it then): the other candidates' hits never read the
            // duel's line.
            if st.duel.cold.load(Relaxed) {
                // Reuse before the cache filled a set: LIRS holds.
                st.duel.warm(FIRST_HOLDER);
            }
            // The page's first hit since the set's last miss: to the top
            // (the ranks ignore bit 7); its later hits are then free.
            move_to_front(st.bytes, slot, valid);
            st.bytes[slot] |= HOT;
            return;
        }
        if defers(k) {
            // A set running LIRS defers the hit to its next miss: later
            // hits on the page are then free.
            st.bytes[slot] |= HOT;
            *st.word = log_hit(*st.word, slot);
            return;
        }
        as_arm_with::<false, _>(
            st,
            k,
            valid,
            |v| candidate!(k, p => p.on_hit(v, slot, valid)),
        );
    }

    fn on_insert(&self, st: &mut SetState<'_>, slot: usize, tag: u64, valid: u32) -> bool {
        let k = settle(st, valid);
        apply_deferred(st, k, valid);
        as_arm(
            st,
            k,
            valid | 1 << slot,
            |v| candidate!(k, p => p.on_insert(v, slot, key(k, tag), valid)),
        )
    }

    fn victim(&self, st: &mut SetState<'_>, eligible: u32, valid: u32) -> usize {
        let k = settle(st, valid);
        apply_deferred(st, k, valid);
        as_arm(
            st,
            k,
            valid,
            |v| candidate!(k, p => p.victim(v, eligible, valid)),
        )
    }

    fn on_evict(&self, st: &mut SetState<'_>, slot: usize, tag: u64, valid: u32) {
        if st.duel.cold.load(Relaxed) {
            // The cache filled a set before it saw any reuse: LRU holds if
            // the pages came in order.
            let ordered = st.duel.ordered.load(Relaxed);
            st.duel.warm(if ordered { LRU } else { FIRST_HOLDER });
        }
        let k = arm(*st.word);
        apply_deferred(st, k, valid);
        as_arm(
            st,
            k,
            valid & !(1 << slot),
            |v| candidate!(k, p => p.on_evict(v, slot, key(k, tag), valid)),
        );
    }

    fn admits(&self, st: &mut SetState<'_>, tag: u64, valid: u32) -> Admit {
        let k = arm(*st.word);
        if k == S3FIFO && st.duel.winner() == S3FIFO {
            // Both of S3-FIFO's forms take back a page they remember.
            return if remembers(st, k, tag) {
                Admit::Here
            } else {
                Admit::Yes
            };
        }
        if k != LIRS || st.duel.winner() != LIRS {
            return Admit::Yes;
        }
        apply_deferred(st, k, valid);
        as_arm(st, k, valid, |v| Lirs.admits(v, key(k, tag), valid))
    }

    fn on_pass(&self, st: &mut SetState<'_>, tag: u64, valid: u32) {
        let k = settle(st, valid);
        apply_deferred(st, k, valid);
        as_arm(
            st,
            k,
            valid,
            |v| candidate!(k, p => p.on_pass(v, key(k, tag), valid)),
        );
    }

    fn on_remove(&self, st: &mut SetState<'_>, slot: usize, valid: u32) {
        let k = arm(*st.word);
        apply_deferred(st, k, valid);
        as_arm(
            st,
            k,
            valid & !(1 << slot),
            |v| candidate!(k, p => p.on_remove(v, slot, valid)),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::super::{PolicyKind, SaModel};
    use super::*;

    fn replay(m: &mut SaModel, trace: &[u64]) -> u64 {
        m.replay(trace.iter().copied())
    }

    #[test]
    fn a_set_running_lirs_remembers_more_ghosts_than_lirs() {
        // One set of 12 running LIRS (a page read twice before the set
        // filled ended the cold start with LIRS; 23 accesses are too few for
        // the duel to report): 0..11 fill it, 11 of them LIR pages, and each
        // of 100..109 then takes the HIR slot and leaves as a ghost.
        let mut m = SaModel::new(PolicyKind::Adaptive, 12, 1);
        replay(
            &mut m,
            &[0].into_iter()
                .chain(0..12)
                .chain(100..109)
                .collect::<Vec<_>>(),
        );
        assert_eq!(m.duel().winner(), LIRS);
        assert_eq!(m.ghost_hits(), 0);
        // 100 left eight misses ago: LIRS alone (6 ghosts) has forgotten it,
        // the adaptive set still has it among its 18.
        assert_eq!(replay(&mut m, &[100]), 0);
        assert_eq!(m.ghost_hits(), 1);
        let mut lirs = SaModel::new(PolicyKind::Lirs, 12, 1);
        replay(
            &mut lirs,
            &(0..12).chain(100..109).chain([100]).collect::<Vec<_>>(),
        );
        assert_eq!(lirs.ghost_hits(), 0);
        // Packing keeps what a ghost entry holds.
        let g = [(fingerprint(7), 3), (NO_TAG, 0)];
        let e = pack_ghosts(g);
        assert_eq!([unpack_ghost(e, 0), unpack_ghost(e, 1)], g);
        assert_eq!(pack_ghosts([(NO_TAG, 0); 2]), NO_TAG);
        assert!((0..100_000).all(|t| fingerprint(t) < (1 << PRINT_BITS) - 1));
    }

    #[test]
    fn a_set_running_lirs_remembers_three_ghosts_to_an_entry() {
        // Twelve pages fill a set of 12 (11 LIR, one HIR; a page read twice
        // first ended the cold start with LIRS); then seventeen new pages
        // pass through the HIR slot, each leaving as a ghost: the HIR page
        // and 100..116 are 17 ghosts of the set's 6 entries.
        let mut m = SaModel::new(PolicyKind::Adaptive, 12, 1);
        replay(
            &mut m,
            &[0].into_iter()
                .chain(0..12)
                .chain(100..117)
                .collect::<Vec<_>>(),
        );
        assert_eq!(m.duel().winner(), LIRS);
        assert_eq!(m.ghost_hits(), 0);
        // 100 left sixteen misses ago, which two ghosts to an entry (12)
        // would have forgotten.
        assert_eq!(replay(&mut m, &[100]), 0);
        assert_eq!(m.ghost_hits(), 1);
        // Three to an entry, each kept.
        let g = [(fingerprint(7), 3), (NO_TAG, 0), (fingerprint(9), 31)];
        let e = pack_ghosts(g);
        assert_eq!([0, 1, 2].map(|i| unpack_ghost(e, i)), g);
        assert_eq!(packed_ghosts(12, 6), 18);
    }

    #[test]
    fn deferred_hits_end_in_the_order_of_the_last_three_first_hits() {
        use super::super::model::testing::{evictions, model_with};
        // A lone set's duel is idle: it runs LRU, deferring its hits.
        let mut m = model_with(PolicyKind::Adaptive, 4, 1..=4);
        for t in [3, 1, 2, 1] {
            assert!(matches!(m.access(t), super::super::Access::Hit { .. }));
        }
        // As LRU with each hit applied at once: 4 was not hit, then 3 went
        // first of the pages hit, 2 last.
        assert_eq!(evictions(&mut m, 5..9), [4, 3, 1, 2]);
        // Four first hits: the log names the last three, and the one it no
        // longer names (5, the oldest) goes under them, as in LRU.
        let mut m = model_with(PolicyKind::Adaptive, 6, 1..=6);
        for t in [5, 1, 2, 3] {
            m.access(t);
        }
        assert_eq!(evictions(&mut m, 7..13), [4, 6, 5, 1, 2, 3]);
    }

    #[test]
    fn a_set_running_s3fifo_lets_one_hit_wonders_pass_its_used_pages() {
        // One set of 12: twelve pages, each hit twice, then twenty pages
        // seen once (56 accesses: the sample has not reported yet).
        let trace: Vec<u64> = (0..12).chain(0..12).chain(0..12).chain(100..120).collect();
        let kept = |winner: usize| {
            let mut m = SaModel::new(PolicyKind::Adaptive, 12, 1);
            let mut misses = [900; CANDIDATES];
            misses[winner] = 500;
            m.duel().tally(misses, 1000);
            assert_eq!(m.duel().winner(), winner);
            replay(&mut m, &trace);
            assert_eq!(m.duel().accesses(), 1000);
            (0..12).filter(|&t| m.contains(t)).count()
        };
        // S3-FIFO moves the used pages to main at the first new page and
        // gives up one of them, then passes each new page through its
        // one-slot small queue.
        assert_eq!(kept(S3FIFO), 11);
        // LRU gives up all twelve.
        assert_eq!(kept(LRU), 0);
    }

    /// A one-set cache whose sets run S3-FIFO, in its second form if
    /// `twice`: reports by made-up shadows that S3-FIFO misses far less than
    /// the others, so that the few accesses a test makes cannot change that.
    fn s3fifo_cache(twice: bool) -> SaModel {
        let m = SaModel::new(PolicyKind::Adaptive, 12, 1);
        m.duel().report(
            [900, 900, 900, 500],
            900,
            if twice { 100 } else { 900 },
            1000,
        );
        assert_eq!(m.duel().winner(), S3FIFO);
        assert_eq!(m.duel().s3_twice(), twice);
        m
    }

    #[test]
    fn s3fifos_second_form_moves_only_pages_hit_twice_to_main() {
        // Twelve pages fill the set's small queue; 0..6 are hit twice, 6..12
        // once; then twenty pages seen once.
        let trace: Vec<u64> = (0..12).chain(0..6).chain(0..12).chain(100..120).collect();
        let kept = |twice: bool| {
            let mut m = s3fifo_cache(twice);
            replay(&mut m, &trace);
            (0..12).filter(|&t| m.contains(t)).collect::<Vec<u64>>()
        };
        // The first form moves all twelve to main at the first new page (each
        // was hit) and main gives up its oldest, 0; the new pages then pass
        // through the one-slot small queue.
        assert_eq!(kept(false), (1..12).collect::<Vec<_>>());
        // The second form moves 0..6 and lets the pages hit once leave
        // with the new ones through its small queue.
        assert_eq!(kept(true), (0..6).collect::<Vec<_>>());
    }

    #[test]
    fn s3fifos_form_follows_the_shadows_with_a_margin() {
        let d = Duel::new(100, 12);
        assert!(!d.s3_twice());
        // The second form misses 0.5 points less than the first: within the
        // margin.
        d.report([450, 900, 400, 420], 900, 415, 1000);
        assert!(!d.s3_twice());
        assert_eq!(d.winner(), LIRS);
        // 5 points less over both reports: the second form, and S3-FIFO
        // competes with its misses (815), fewer than LRU's (870), where the
        // first form's (920) are not.
        d.report([420, 900, 900, 500], 900, 400, 1000);
        assert!(d.s3_twice());
        assert_eq!(d.winner(), S3FIFO, "{:?}", d.misses());
        // The first form ahead by less than the margin: the second stays.
        d.report([900, 900, 900, 400], 900, 510, 1000);
        assert!(d.s3_twice());
        assert_eq!(d.winner(), S3FIFO, "{:?}", d.misses());
        // The first form by the margin: back to it, and LRU, which misses
        // less than that, takes over.
        d.report([0, 900, 900, 900], 900, 1200, 2000);
        assert!(!d.s3_twice());
        assert_eq!(d.winner(), LRU, "{:?}", d.misses());
    }

    #[test]
    fn a_page_a_set_running_s3fifo_remembers_must_come_into_that_set() {
        let mut tags = [NO_TAG; 6];
        tags[2] = 42;
        let mut bytes = [0u8; 12];
        let mut word = 0;
        let mut ghost_bytes = [0u8; 6];
        let mut st = SetState {
            bytes: &mut bytes,
            word: &mut word,
            ghost_tags: &mut tags,
            ghost_bytes: &mut ghost_bytes,
            duel: &IDLE_DUEL,
        };
        assert_eq!(S3FifoDuel.admits(&mut st, 42, 0xfff), Admit::Here);
        assert_eq!(S3FifoDuel.admits(&mut st, 43, 0xfff), Admit::Yes);
        // So a page whose ghost one of its two sets keeps goes to that set
        // whichever set's victim is older: in a cache of two sets, pages
        // evicted from the small queues and seen again at once, the last
        // one first, are all ghost hits.
        let mut m = SaModel::new(PolicyKind::Adaptive, 12, 2);
        m.duel().report([900, 900, 900, 500], 900, 900, 1000);
        replay(&mut m, &(0..24).collect::<Vec<_>>());
        let mut left = Vec::new();
        for t in 100..124 {
            replay(&mut m, &[t]);
            let now: Vec<u64> = (0..24)
                .filter(|&p| !m.contains(p) && !left.contains(&p))
                .collect();
            left.extend(now);
        }
        assert_eq!(left.len(), 24, "{left:?}");
        assert_eq!(m.ghost_hits(), 0);
        let back: Vec<u64> = left.iter().rev().take(6).copied().collect();
        assert_eq!(replay(&mut m, &back), 0);
        assert_eq!(m.ghost_hits(), 6, "{back:?}");
    }

    #[test]
    fn a_set_running_s3fifo_remembers_more_ghosts_than_its_entries() {
        // Twelve pages fill the set's small queue, then seven new pages each
        // evict the oldest small page, 0 to 6, as a ghost.
        let mut m = s3fifo_cache(false);
        replay(&mut m, &(0..12).chain(100..107).collect::<Vec<_>>());
        assert_eq!(s3_ghosts(12), 8);
        assert!(!m.contains(0));
        assert_eq!(m.ghost_hits(), 0);
        // 0 comes back: its miss evicts 7, the eighth ghost of the set's 6
        // ghost entries, and 0, the oldest, is still remembered: it comes
        // into main.
        assert_eq!(replay(&mut m, &[0]), 0);
        assert_eq!(m.ghost_hits(), 1);
    }

    #[test]
    fn hits_called_no_ops_change_nothing_under_every_candidate() {
        for k in 0..CANDIDATES {
            // A lone set whose duel holds candidate `k` (no access is
            // observed in this run, so it keeps it).
            let duel = Duel::new(1, 8);
            let mut misses = [1_000_000; CANDIDATES];
            misses[k] = 0;
            duel.tally(misses, 1_000_000);
            assert_eq!(duel.winner(), k);
            let (word, noops) =
                super::super::tests::no_op_hits(&Adaptive, &duel, &format!("candidate {k}"));
            assert_eq!(arm(word), k);
            assert!(noops > 100, "candidate {k}: {noops} no-op hits");
        }
    }

    #[test]
    fn one_set_in_64_is_sampled() {
        let count = |d: &Duel, n: usize| (0..n).filter(|&s| d.sample_of(s).is_some()).count();
        assert_eq!(
            count(&Duel::new(10_000, 12), 10_000),
            10_000usize.div_ceil(64)
        );
        assert_eq!(count(&Duel::new(320, 12), 320), 5);
        // A small cache samples its first set.
        assert_eq!(count(&Duel::new(12, 12), 12), 1);
        assert_eq!(count(&Duel::idle(), 100), 0);
        let d = Duel::new(1000, 12);
        assert_eq!(d.sample_of(64 * 2), Some(2));
        assert_eq!(d.sample_of(64 * 2 + 1), None);
    }

    #[test]
    fn a_loop_makes_lirs_win_and_every_set_keeps_part_of_it() {
        let trace: Vec<u64> = (0..60).flat_map(|_| 0..1000u64).collect();
        let mut m = SaModel::new(PolicyKind::Adaptive, 12, 40);
        let hits = replay(&mut m, &trace);
        assert_eq!(
            m.duel().winner(),
            2,
            "{:?} {}",
            m.duel().misses(),
            m.duel().accesses()
        );
        let mut lru = SaModel::new(PolicyKind::Lru, 12, 40);
        assert_eq!(replay(&mut lru, &trace), 0);
        assert!(hits as f64 > 0.4 * trace.len() as f64, "{hits}");
    }

    #[test]
    fn a_loop_turns_admission_on_and_then_every_slot_hits() {
        let trace: Vec<u64> = (0..60).flat_map(|_| 0..1000u64).collect();
        let mut m = SaModel::new(PolicyKind::Adaptive, 12, 40);
        replay(&mut m, &trace[..50 * 1000]);
        assert!(m.duel().admission());
        assert_eq!(m.duel().winner(), LIRS);
        // 480 slots: with admission each holds a loop page that hits every
        // round; LIRS without it keeps one slot a set for HIR pages (440).
        let late = replay(&mut m, &trace[50 * 1000..]);
        assert!(late > 10 * 470, "{late}");
        let mut classic = SaModel::new(PolicyKind::Lirs, 12, 40);
        replay(&mut classic, &trace[..50 * 1000]);
        let classic_late = replay(&mut classic, &trace[50 * 1000..]);
        assert!(classic_late <= 10 * 440, "{classic_late}");
    }

    #[test]
    fn admission_follows_the_shadows_with_a_margin() {
        let d = Duel::new(100, 12);
        assert!(!d.admission());
        // LIRS with admission misses 0.5 points less: within the margin.
        d.tally_with([900, 900, 420, 900], 415, 1000);
        assert!(!d.admission());
        // 5 points less over both reports: on, and LIRS competes with its
        // misses with admission.
        d.tally_with([900, 900, 500, 900], 400, 1000);
        assert!(d.admission());
        assert_eq!(d.winner(), LIRS);
        // LRU below LIRS without admission (1,900 against 2,420), not below
        // LIRS with it (1,815): LIRS stays.
        d.tally_with([100, 900, 1500, 900], 1000, 2000);
        assert!(d.admission());
        assert_eq!(d.winner(), LIRS, "{:?}", d.misses());
        // Without admission by the margin again: off.
        d.tally_with([900, 900, 100, 900], 900, 4000);
        assert!(!d.admission());
    }

    #[test]
    fn a_cache_that_fills_before_any_reuse_keeps_lrus_pages() {
        // A pass over twice the cache (40 sets of 12) with nothing read
        // twice, then back down: the cold start ends at the first eviction
        // with LRU, which holds the pass's latest pages when it turns.
        let up: Vec<u64> = (0..960).collect();
        let mut m = SaModel::new(PolicyKind::Adaptive, 12, 40);
        assert_eq!(m.duel().winner(), LRU);
        replay(&mut m, &up);
        assert_eq!(m.duel().winner(), LRU, "{:?}", m.duel().misses());
        let down: Vec<u64> = (0..960).rev().collect();
        let hits = replay(&mut m, &down);
        let mut lru = SaModel::new(PolicyKind::Lru, 12, 40);
        replay(&mut lru, &up);
        let h_lru = replay(&mut lru, &down);
        assert!(h_lru > 400, "{h_lru}");
        assert!(hits * 20 >= h_lru * 19, "{hits} against LRU's {h_lru}");
    }

    #[test]
    fn a_cache_filled_in_no_order_keeps_lirs_after_its_first_eviction() {
        // The same pages as above in a scattered order: nothing says the
        // pass may turn back, and LIRS holds, as after a hit.
        let mut m = SaModel::new(PolicyKind::Adaptive, 12, 40);
        replay(&mut m, &(0..960).map(|i| i * 37 % 960).collect::<Vec<_>>());
        assert_eq!(m.duel().winner(), LIRS, "{:?}", m.duel().misses());
    }

    #[test]
    fn reuse_before_the_cache_fills_ends_the_cold_start_with_lirs() {
        let mut m = SaModel::new(PolicyKind::Adaptive, 12, 40);
        replay(&mut m, &(0..100).collect::<Vec<_>>());
        assert_eq!(m.duel().winner(), LRU);
        assert_eq!(replay(&mut m, &[50]), 1);
        assert_eq!(m.duel().winner(), LIRS);
        // A sampled set's shadows see the cold start's accesses at once: a
        // page read twice ends it without waiting for a batch of 16.
        let d = Duel::new(64, 12);
        d.observe_access(0, 7);
        assert_eq!(d.winner(), LRU);
        d.observe_access(0, 7);
        assert_eq!(d.winner(), LIRS);
        // Reports still come every 64 accesses.
        for t in 0..61 {
            d.observe_access(0, 100 + t);
        }
        assert_eq!(d.accesses(), 0);
        d.observe_access(0, 1000);
        assert_eq!(d.accesses(), 64);
    }

    #[test]
    fn loops_that_turn_back_make_lru_win() {
        // Up and down a range larger than the cache: LRU hits what it just
        // saw on the way back, LIRS keeps a fixed part.
        let mut trace = Vec::new();
        for _ in 0..100 {
            trace.extend(0..1000u64);
            trace.extend((0..1000u64).rev());
        }
        let mut m = SaModel::new(PolicyKind::Adaptive, 12, 40);
        let hits = replay(&mut m, &trace);
        let mut lirs = SaModel::new(PolicyKind::Lirs, 12, 40);
        let mut lru = SaModel::new(PolicyKind::Lru, 12, 40);
        let (h_lirs, h_lru) = (replay(&mut lirs, &trace), replay(&mut lru, &trace));
        assert!(h_lru > h_lirs, "{h_lru} {h_lirs}");
        assert_eq!(
            m.duel().winner(),
            0,
            "{:?} {}",
            m.duel().misses(),
            m.duel().accesses()
        );
        assert!(hits > h_lirs, "{hits} {h_lirs}");
    }

    #[test]
    fn the_winner_changes_only_by_a_margin() {
        let d = Duel::new(100, 12);
        assert_eq!(d.winner(), usize::from(START));
        // LRU misses half a point less than LIRS: within the margin.
        d.tally([415, 900, 420, 900], 1000);
        assert_eq!(d.winner(), 2);
        // Now 5 points less over all reports: LRU takes over.
        d.tally([400, 900, 500, 900], 1000);
        assert_eq!(d.winner(), 0, "{:?} {}", d.misses(), d.accesses());
        // Counts halve once the accesses reach the decay point.
        d.tally([0; CANDIDATES], DECAY_AT);
        assert_eq!(d.misses(), [407, 900, 460, 900]);
        assert_eq!(d.accesses(), (2000 + DECAY_AT) / 2);
    }

    #[test]
    fn a_workload_no_candidate_finds_reuse_in_runs_sieve() {
        let d = Duel::new(100, 12);
        // Every shadow hits 1% of the accesses, but the duel has seen fewer
        // than IDLE_AFTER: LIRS, the start, holds.
        d.tally([990; CANDIDATES], 1000);
        assert_eq!(d.winner(), LIRS);
        // Past IDLE_AFTER with no more reuse: SIEVE, whose misses cost least.
        d.tally([990; CANDIDATES], 1000);
        assert_eq!(d.winner(), SIEVE, "{:?} {}", d.misses(), d.accesses());
        // LIRS with admission finding reuse is reuse too: SIEVE holds while
        // no candidate leads it by the margin.
        d.tally_with([995; CANDIDATES], 960, 1000);
        assert_eq!(d.winner(), SIEVE);
        // Reuse that LIRS finds, 10% of the next 4,000 accesses: LIRS leads
        // by more than the margin and takes over.
        d.tally([3900, 3900, 3600, 3900], 4000);
        assert_eq!(d.winner(), LIRS, "{:?} {}", d.misses(), d.accesses());
    }

    #[test]
    fn a_sample_reports_after_every_64th_access_with_its_misses() {
        let d = Duel::new(64, 12);
        // 63 accesses of distinct pages: nothing reported yet (three whole
        // batches replayed, the fourth waiting).
        for t in 0..63 {
            d.observe_access(0, t);
        }
        assert_eq!(d.accesses(), 0);
        // The 64th: one report of 64 accesses, all of them misses in every
        // shadow (each page seen once).
        d.observe_access(0, 63);
        assert_eq!(d.accesses(), 64);
        assert_eq!(d.misses(), [64; CANDIDATES]);
        // The same 8 pages again and again: LRU, SIEVE and S3-FIFO hold them
        // after their first access, so their next report adds 8 misses.
        // (LIRS keeps its first 11 pages as LIR pages and cycles the 8
        // through its one HIR slot: they come back too late for its ghosts.)
        for t in 0..64 {
            d.observe_access(0, 100 + t % 8);
        }
        assert_eq!(d.accesses(), 128);
        assert_eq!(d.misses(), [64 + 8, 64 + 8, 128, 64 + 8]);
    }

    #[test]
    fn the_winner_changes_between_reports_without_reporting() {
        let d = Duel::new(64, 12);
        // 12 pages fill every shadow; then 8 pages again and again, which
        // LRU keeps after their first access and LIRS cycles through its one
        // HIR slot (see the test above). After 48 accesses (three batches,
        // no report) LRU has missed 20 times and LIRS 48.
        for t in 0..12 {
            d.observe_access(0, t);
        }
        for t in 0..36 {
            d.observe_access(0, 100 + t % 8);
        }
        assert_eq!(d.accesses(), 0);
        assert_eq!(d.misses(), [0; CANDIDATES]);
        assert_eq!(d.winner(), LRU);
    }

    #[test]
    fn sampled_sets_report_every_access_and_others_none() {
        let mut m = SaModel::new(PolicyKind::Adaptive, 12, 320);
        let trace: Vec<u64> = (0..400_000).map(|i| (i * 7919) % 5000).collect();
        replay(&mut m, &trace);
        // 5 of 320 sets sampled: a 64th of the accesses, reported in whole
        // reports of 64.
        let reported = f64::from(m.duel().accesses());
        let expect = trace.len() as f64 / 64.0;
        assert!(
            (reported - expect).abs() < expect * 0.2,
            "{reported} vs {expect}"
        );
    }
}
