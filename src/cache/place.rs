//! Where a page may live: two candidate sets, and which of the two gives up a
//! page when the page comes in.
//!
//! A page's 64-bit hash `h` names its first set (`h` modulo the table) and its
//! high 32 bits its second: with `h = H * 2^32 + L` and `L` uniform, `h mod m`
//! is independent of `H mod m` for every `m`, a power of two or not. (A
//! rotation of `h` by 32 bits would not do: for `m` dividing `2^32 - 1`, such as
//! 21,845 sets, both halves land in the same set.) A page
//! lives in one of them at a time. A miss takes a free slot of either set,
//! else asks each set's policy for its victim and evicts the one whose last
//! use is older: the cache then keeps what a global cache would keep unless
//! both sets are full of younger pages, and a set that draws more hot pages
//! than it has slots hands the excess to the other set of each.
//!
//! # Age
//! Time is counted in misses, in epochs of [`Clock::epoch_len`] misses (a
//! sixteenth of the cache, at least 64). Each slot keeps the low byte of the
//! epoch of its page's last use (its *stamp*); the age of a page is the epoch
//! now minus its stamp, modulo 256. A page untouched for 256 epochs (sixteen
//! times the cache in misses) looks young again: an aged-out stamp only makes
//! one choice worse, never a wrong result.
//!
//! Misses are counted by each thread and added to the cache's count 64 at a
//! time, so that no shared word is written on every miss; the epoch is a
//! separate word, written once an epoch. With one thread the count, and so
//! every choice, is exact and matches the simulator's.

use std::cell::Cell;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;

use super::policy::Admit;

/// The most misses a thread counts before it adds them to the shared count.
pub(crate) const BATCH: u64 = 64;

/// Misses a thread counts before it adds them to the shared count, for a
/// cache of `pages` pages: a 256th of it, a power of two from 1 to [`BATCH`]
/// (a small cache needs a fine clock, and has few misses to count).
pub(crate) fn batch(pages: usize) -> u64 {
    (pages as u64 / 256).next_power_of_two().clamp(1, BATCH)
}

/// The hash of the second candidate set of a page whose first hash is `h`.
#[inline]
pub(crate) fn second(h: u64) -> u64 {
    h >> 32
}

/// [`second`] in a cache of `partitions` partitions: moved into the class of
/// `h` modulo `partitions`, so that with a table of a multiple of
/// `partitions` sets both candidate sets are in the page's partition.
#[inline]
pub(crate) fn second_in(h: u64, partitions: u64) -> u64 {
    let x = second(h);
    if partitions == 1 {
        x
    } else {
        x - x % partitions + h % partitions
    }
}

/// The fingerprint of a page whose hash is `h`: one byte, kept per slot
/// beside the sets (`Core::prints`) so that a lookup without locks can tell
/// which slots of both candidate sets may hold the page before it reads any
/// tag. Bits 24..31 of `h`: neither candidate set depends on them alone (the
/// first is `h` modulo the table, the second is taken from the high half), so
/// the pages of one set spread over all 256 values.
#[inline]
pub(crate) fn print_of(h: u64) -> u8 {
    (h >> 24) as u8
}

/// Eight fingerprints a word, slot `8k + j` in byte `j` of word `k`.
pub(crate) const PRINTS_PER_WORD: usize = 8;

/// [`print_matches`] of the sixteen bytes of `lo` then `hi`, as a 16-bit mask:
/// one compare of a vector register on x86-64 (the fingerprints of a set of
/// 9 to 16 slots).
#[inline]
pub(crate) fn print_matches16(lo: u64, hi: u64, print: u8) -> u32 {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_cmpeq_epi8, _mm_movemask_epi8, _mm_set_epi64x, _mm_set1_epi8};
        // SAFETY: the intrinsics need SSE2, part of every x86-64 processor's baseline, and touch no memory.
        unsafe {
            let v = _mm_set_epi64x(hi as i64, lo as i64);
            _mm_movemask_epi8(_mm_cmpeq_epi8(v, _mm_set1_epi8(print as i8))) as u32
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        print_matches(lo, print) | print_matches(hi, print) << 8
    }
}

/// The bytes of `word` equal to `print`, as a mask (bit `j` for byte `j`),
/// without a branch: a byte is zero in `x` exactly when adding `0x7f` to its
/// low seven bits leaves the high bit clear and its own high bit is clear.
#[inline]
pub(crate) fn print_matches(word: u64, print: u8) -> u32 {
    const LOW7: u64 = 0x7f7f_7f7f_7f7f_7f7f;
    // Moves bit `8j` to bit `56 + j` for every `j` at once: the partial
    // products land on distinct bits, so no carry disturbs the top byte.
    const GATHER: u64 = 0x0102_0408_1020_4080;
    let x = word ^ (u64::from(print) * 0x0101_0101_0101_0101);
    let zero = !(((x & LOW7) + LOW7) | x | LOW7);
    ((zero >> 7).wrapping_mul(GATHER) >> 56) as u32
}

/// How a cache's sets divide among `n` partitions, and where each set lies in
/// memory.
///
/// Set `s` belongs to partition `s mod n`. The table starts at a multiple of
/// `n` sets, so every table that linear hashing makes sends hash `h` to a set
/// of partition `h mod n` (its level is a multiple of `n`, and so are twice
/// it); the second candidate's hash is taken in the same class
/// (`Core::second`). Both candidate sets of a page are then in the partition
/// its hash names, at every table size, and a resize moves pages only within
/// a partition.
///
/// In memory the sets are grouped by partition: set `s` lies at position
/// `(s mod n) * per + s / n` of the set table, the frames, the stamps, the
/// epochs and the fingerprints (`per = max_sets / n`), so each partition's
/// share of each is one span, which can be bound to a node's memory. With one partition the
/// position is the set.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Parts {
    pub(crate) n: usize,
    per: usize,
}

impl Parts {
    /// `n` partitions of a table of at most `max_sets` sets, a multiple of `n`.
    pub(crate) fn new(n: usize, max_sets: usize) -> Parts {
        assert!(
            n >= 1 && max_sets.is_multiple_of(n),
            "{max_sets} sets, {n} partitions"
        );
        Parts {
            n,
            per: max_sets / n,
        }
    }

    /// The position in memory of set `s`.
    #[inline]
    pub(crate) fn pos(&self, s: usize) -> usize {
        if self.n == 1 {
            s
        } else {
            (s % self.n) * self.per + s / self.n
        }
    }

    /// The set at position `pos` (the inverse of [`Parts::pos`]).
    #[inline]
    pub(crate) fn set_at(&self, pos: usize) -> usize {
        if self.n == 1 {
            pos
        } else {
            (pos % self.per) * self.n + pos / self.per
        }
    }

    /// The positions of partition `p`'s sets.
    pub(crate) fn span(&self, p: usize) -> std::ops::Range<usize> {
        p * self.per..(p + 1) * self.per
    }
}

/// Whether a miss should evict the second set's victim, stamped `s2`, rather
/// than the first set's, stamped `s1`, at epoch `now`: only when it is
/// strictly older (ties keep pages in their first set, where a lookup looks
/// first).
#[inline]
pub(crate) fn evict_second(now: u8, s1: u8, s2: u8) -> bool {
    now.wrapping_sub(s2) > now.wrapping_sub(s1)
}

/// Which of a page's two full sets must take it, by their answers to
/// [`crate::cache::policy::Policy::admits`] (not both `No`): the one that
/// remembers the page, else the only one that admits it (0: the first,
/// 1: the second); `None` when both may, and the older victim decides.
#[inline]
pub(crate) fn only(a1: Admit, a2: Admit) -> Option<usize> {
    match (a1, a2) {
        (Admit::Here, Admit::Here) | (Admit::Yes, Admit::Yes) => None,
        (Admit::Here, _) | (_, Admit::No) => Some(0),
        (_, Admit::Here) | (Admit::No, _) => Some(1),
    }
}

/// Epochs after which a page nobody used is stale: a cache's worth of
/// misses. A stream's miss and readahead may take a stale page as they take
/// a cold one (see `Core::choose`), so that pages written or read once long
/// ago do not keep a scan out of their sets for ever.
pub(crate) const STALE: u8 = 16;

/// Misses per epoch for a cache of `pages` pages: a sixteenth of it, a
/// multiple of its [`batch`], at least one batch.
pub(crate) fn epoch_len(pages: usize) -> u64 {
    let b = batch(pages);
    ((pages as u64 / 16).div_ceil(b) * b).max(b)
}

/// A cache's miss clock, shared by its threads.
pub(crate) struct Clock {
    /// This clock's identity, so that a thread's partial batch is never
    /// credited to another cache.
    id: u64,
    batch: u64,
    /// Misses per epoch (a multiple of the batch): the cache's size as of its
    /// last resize, read when an epoch ends.
    epoch_len: AtomicU64,
    /// Epochs ended, written when it changes; read by every hit.
    epoch: AtomicU64,
    /// Misses credited so far (multiples of the batch) and the count at
    /// which the epoch ends, on lines of their own so that crediting does not
    /// disturb the readers of `epoch`.
    misses: Line,
}

/// Atomic words alone on their cache lines (two, for adjacent-line prefetch).
#[repr(align(128))]
struct Line {
    credited: AtomicU64,
    end: AtomicU64,
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// The clock this thread counts for, and its misses not yet credited.
    static PENDING: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
}

impl Clock {
    pub(crate) fn new(pages: usize) -> Clock {
        let len = epoch_len(pages);
        Clock {
            id: NEXT_ID.fetch_add(1, Relaxed),
            batch: batch(pages),
            epoch_len: AtomicU64::new(len),
            epoch: AtomicU64::new(0),
            misses: Line {
                credited: AtomicU64::new(0),
                end: AtomicU64::new(len),
            },
        }
    }

    /// The cache now holds `pages` pages: epochs from the next one on are a
    /// sixteenth of that (in multiples of the batch the clock was made with).
    pub(crate) fn resize(&self, pages: usize) {
        let len = (pages as u64 / 16).div_ceil(self.batch) * self.batch;
        self.epoch_len.store(len.max(self.batch), Relaxed);
    }

    /// The epoch's low byte, the stamp of a page used now.
    #[inline]
    pub(crate) fn now(&self) -> u8 {
        self.epoch.load(Relaxed) as u8
    }

    /// Count one miss of the calling thread.
    #[inline]
    pub(crate) fn tick(&self) {
        PENDING.with(|p| {
            let (id, n) = p.get();
            let n = if id == self.id { n + 1 } else { 1 };
            if n < self.batch {
                p.set((self.id, n));
                return;
            }
            p.set((self.id, 0));
            let m = self.misses.credited.fetch_add(self.batch, Relaxed) + self.batch;
            let end = self.misses.end.load(Relaxed);
            // One thread ends the epoch; a batch is never longer than one.
            if m >= end {
                let len = self.epoch_len.load(Relaxed);
                if self
                    .misses
                    .end
                    .compare_exchange(end, end + len, Relaxed, Relaxed)
                    .is_ok()
                {
                    self.epoch.fetch_add(1, Relaxed);
                }
            }
        });
    }
}

/// The same clock for one thread without sharing (the simulator).
#[derive(Clone, Debug)]
pub(crate) struct LocalClock {
    batch: u64,
    epoch_len: u64,
    misses: u64,
}

impl LocalClock {
    pub(crate) fn new(pages: usize) -> LocalClock {
        LocalClock {
            batch: batch(pages),
            epoch_len: epoch_len(pages),
            misses: 0,
        }
    }

    /// As [`Clock::now`] for a cache used by one thread.
    #[inline]
    pub(crate) fn now(&self) -> u8 {
        (self.misses / self.batch * self.batch / self.epoch_len) as u8
    }

    /// As [`Clock::tick`].
    #[inline]
    pub(crate) fn tick(&mut self) {
        self.misses += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_thread_counts_as_the_local_clock() {
        for pages in [12, 12 * 100, 262_144] {
            let shared = Clock::new(pages);
            let mut local = LocalClock::new(pages);
            for _ in 0..50_000 {
                assert_eq!(shared.now(), local.now());
                shared.tick();
                local.tick();
            }
            assert!(local.now() > 0);
        }
    }

    #[test]
    fn epochs_follow_the_size_after_a_resize() {
        let pages = 12 * 4096;
        let c = Clock::new(pages);
        let len = epoch_len(pages);
        let epochs_after = |c: &Clock, misses: u64| {
            let before = c.epoch.load(Relaxed);
            for _ in 0..misses {
                c.tick();
            }
            c.epoch.load(Relaxed) - before
        };
        assert_eq!(epochs_after(&c, 4 * len), 4);
        // Eight times the pages: an epoch is eight times as many misses.
        c.resize(8 * pages);
        assert_eq!(
            epochs_after(&c, 4 * len),
            1,
            "the epoch under way ends first"
        );
        assert_eq!(epochs_after(&c, 16 * len), 2);
        c.resize(pages);
        assert_eq!(epochs_after(&c, 8 * len), 1 + 3);
    }

    #[test]
    fn the_two_sets_are_independent_for_any_table() {
        // Set counts that divide 2^32 - 1 (3, 5, 17, 21845 = 65535 / 3), a
        // prime, powers of two: the second set agrees with the first about
        // as often as chance says (1 in m), never always.
        for m in [3u64, 5, 17, 97, 1024, 21_845, 65_537, 100_003] {
            let n = 200_000u64;
            let same = (0..n)
                .filter(|&t| {
                    let h = crate::util::mix::mix64(t);
                    h % m == second(h) % m
                })
                .count() as f64;
            let chance = n as f64 / m as f64;
            assert!(
                same < 2.0 * chance + 50.0,
                "{m} sets: {same} of {n} pages have one set (chance {chance})"
            );
        }
    }

    #[test]
    fn partitions_group_their_sets_and_positions_invert() {
        for (n, max) in [(1, 10), (2, 10), (3, 12), (5, 35)] {
            let parts = Parts::new(n, max);
            let mut seen = vec![false; max];
            for s in 0..max {
                let at = parts.pos(s);
                assert!(parts.span(s % n).contains(&at), "set {s} of {n}");
                assert_eq!(parts.set_at(at), s);
                assert!(!seen[at]);
                seen[at] = true;
            }
        }
    }

    #[test]
    fn print_matches_finds_every_equal_byte_and_no_other() {
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..20_000 {
            rng = crate::util::mix::mix64(rng);
            // Words with repeated bytes and bytes next to the probe's value.
            let p = (rng >> 56) as u8;
            let mut word = 0u64;
            for j in 0..8 {
                let r = (rng >> (j * 7)) & 7;
                let b = match r {
                    0 | 1 => p,
                    2 => p.wrapping_add(1),
                    3 => p.wrapping_sub(1),
                    4 => p ^ 0x80,
                    _ => (rng >> (j * 5 + 3)) as u8,
                };
                word |= u64::from(b) << (8 * j);
            }
            let want = (0..8)
                .filter(|&j| (word >> (8 * j)) as u8 == p)
                .fold(0u32, |m, j| m | 1 << j);
            assert_eq!(print_matches(word, p), want, "{word:#x} {p:#x}");
        }
        for k in 0..20_000u64 {
            let (lo, hi) = (crate::util::mix::mix64(k), crate::util::mix::mix64(!k));
            // A probe that occurs, at least in one byte.
            let p = (lo >> (8 * (k % 8))) as u8;
            assert_eq!(
                print_matches16(lo, hi, p),
                print_matches(lo, p) | print_matches(hi, p) << 8
            );
        }
        assert_eq!(print_matches16(0, u64::MAX, 0xff), 0xff00);
        assert_eq!(print_matches(0, 0), 0xff);
        assert_eq!(print_matches(u64::MAX, 0xff), 0xff);
        assert_eq!(print_matches(0x8000_0000_0000_0080, 0x80), 0x81);
    }

    #[test]
    fn older_victim_loses_ties_stay_first() {
        assert!(evict_second(10, 9, 3));
        assert!(!evict_second(10, 3, 9));
        assert!(!evict_second(10, 4, 4));
        // Across the wrap of the byte.
        assert!(evict_second(2, 255, 250));
        assert_eq!((batch(12), epoch_len(12)), (1, 1));
        assert_eq!((batch(4_096), epoch_len(4_096)), (16, 256));
        assert_eq!((batch(262_144), epoch_len(262_144)), (BATCH, 16_384));
    }
}
