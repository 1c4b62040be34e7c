//! Frame-free models of one set ([`SetModel`]) and of a whole set-associative
//! cache ([`SaModel`]) that drive the real policy code. They hold tags and
//! policy state only (no page frames, no locks), so they serve as the
//! reference in tests and as a fast hit-rate simulator for traces.

use super::common::low_mask;
use super::{Admit, Duel, IDLE_DUEL, MAX_ASSOC, MIN_ASSOC, NO_TAG, Policy, PolicyKind, SetState};
use crate::cache::place::{self, LocalClock};
use crate::cache::prefetch;
use crate::storage::layout::mix64;

/// The outcome of [`SetModel::access`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// The page was resident in `slot`.
    Hit {
        /// The slot holding the page.
        slot: usize,
    },
    /// The page was not resident and now occupies `slot`.
    Miss {
        /// The slot the page was placed into.
        slot: usize,
        /// The page that was evicted from `slot`, or `None` when the set had
        /// an empty slot.
        evicted: Option<u64>,
        /// The policy found the page among its ghost entries.
        ghost_hit: bool,
    },
    /// The page was not resident, the set was full and every page in it was
    /// pinned; nothing changed.
    AllPinned,
}

fn check_assoc(assoc: usize) {
    assert!(
        (MIN_ASSOC..=MAX_ASSOC).contains(&assoc),
        "associativity {assoc} is outside {MIN_ASSOC}..={MAX_ASSOC}"
    );
}

/// A model of one set: tags, pins and dirty bits, plus the policy state,
/// without page frames and without a lock.
///
/// A miss fills the first empty slot if there is one; otherwise the policy
/// chooses a victim among the clean unpinned pages, or, when there is none,
/// among all unpinned pages. When every page is pinned the access fails with
/// [`Access::AllPinned`]. Pins are flags (pinning twice and unpinning once
/// leaves the page unpinned); a page placed by a miss starts unpinned and
/// clean.
#[derive(Clone, Debug)]
pub struct SetModel {
    kind: PolicyKind,
    tags: Vec<u64>,
    bytes: Vec<u8>,
    word: u32,
    ghost_tags: Vec<u64>,
    ghost_bytes: Vec<u8>,
    valid: u32,
    pinned: u32,
    dirty: u32,
}

impl SetModel {
    /// An empty set of `assoc` slots managed by `kind`.
    ///
    /// # Panics
    ///
    /// If `assoc` is outside `MIN_ASSOC..=MAX_ASSOC`.
    pub fn new(kind: PolicyKind, assoc: usize) -> Self {
        check_assoc(assoc);
        let g = kind.ghosts(assoc);
        let mut m = SetModel {
            kind,
            tags: vec![NO_TAG; assoc],
            bytes: vec![0; assoc],
            word: 0,
            ghost_tags: vec![NO_TAG; g],
            ghost_bytes: vec![0; g],
            valid: 0,
            pinned: 0,
            dirty: 0,
        };
        let kind = m.kind;
        kind.reset(&mut m.state());
        m
    }

    fn state(&mut self) -> SetState<'_> {
        SetState {
            bytes: &mut self.bytes,
            word: &mut self.word,
            ghost_tags: &mut self.ghost_tags,
            ghost_bytes: &mut self.ghost_bytes,
            duel: &IDLE_DUEL,
        }
    }

    /// The policy.
    pub fn kind(&self) -> PolicyKind {
        self.kind
    }

    /// The number of slots.
    pub fn assoc(&self) -> usize {
        self.tags.len()
    }

    /// Accesses page `tag`: a hit, or a miss that places it (evicting a page
    /// if the set is full).
    ///
    /// # Panics
    ///
    /// If `tag` is [`NO_TAG`], or if the policy returns a victim outside the
    /// eligible mask (a policy bug).
    pub fn access(&mut self, tag: u64) -> Access {
        assert_ne!(tag, NO_TAG, "NO_TAG names no page");
        let kind = self.kind;
        if let Some(slot) = self.slot_of(tag) {
            let valid = self.valid;
            kind.on_hit_tag(&mut self.state(), slot, tag, valid);
            return Access::Hit { slot };
        }
        let full = low_mask(self.assoc());
        let (slot, evicted) = if self.valid != full {
            ((!self.valid).trailing_zeros() as usize, None)
        } else {
            let unpinned = self.valid & !self.pinned;
            let clean = unpinned & !self.dirty;
            let eligible = if clean != 0 { clean } else { unpinned };
            if eligible == 0 {
                return Access::AllPinned;
            }
            let valid = self.valid;
            let v = kind.victim(&mut self.state(), eligible, valid);
            assert!(
                v < self.assoc() && eligible & (1 << v) != 0,
                "{kind} chose slot {v} outside the eligible mask {eligible:#b}"
            );
            let old = self.tags[v];
            kind.on_evict(&mut self.state(), v, old, valid);
            self.valid &= !(1 << v);
            self.dirty &= !(1 << v);
            self.tags[v] = NO_TAG;
            (v, Some(old))
        };
        let valid = self.valid;
        let ghost_hit = kind.on_insert(&mut self.state(), slot, tag, valid);
        self.tags[slot] = tag;
        self.valid |= 1 << slot;
        Access::Miss {
            slot,
            evicted,
            ghost_hit,
        }
    }

    /// The slot holding `tag`, if it is resident.
    pub fn slot_of(&self, tag: u64) -> Option<usize> {
        if tag == NO_TAG {
            return None;
        }
        self.tags.iter().position(|&t| t == tag)
    }

    /// Whether `tag` is resident.
    pub fn contains(&self, tag: u64) -> bool {
        self.slot_of(tag).is_some()
    }

    /// The page in `slot`, if any.
    pub fn tag_at(&self, slot: usize) -> Option<u64> {
        Some(self.tags[slot]).filter(|&t| t != NO_TAG)
    }

    /// Pins resident page `tag` so it is never chosen as a victim. Returns
    /// false (and does nothing) when the page is not resident.
    pub fn pin(&mut self, tag: u64) -> bool {
        self.slot_of(tag).map(|s| self.pinned |= 1 << s).is_some()
    }

    /// Unpins resident page `tag`. Returns false when it is not resident.
    pub fn unpin(&mut self, tag: u64) -> bool {
        self.slot_of(tag)
            .map(|s| self.pinned &= !(1 << s))
            .is_some()
    }

    /// Marks resident page `tag` dirty or clean. Returns false when it is not
    /// resident.
    pub fn set_dirty(&mut self, tag: u64, dirty: bool) -> bool {
        let Some(s) = self.slot_of(tag) else {
            return false;
        };
        if dirty {
            self.dirty |= 1 << s;
        } else {
            self.dirty &= !(1 << s);
        }
        true
    }

    /// Drops resident page `tag` without evicting it (as a file truncation
    /// does): the policy forgets it and keeps no ghost. Returns false when it
    /// is not resident.
    pub fn remove(&mut self, tag: u64) -> bool {
        let Some(s) = self.slot_of(tag) else {
            return false;
        };
        let (kind, valid) = (self.kind, self.valid);
        kind.on_remove(&mut self.state(), s, valid);
        self.tags[s] = NO_TAG;
        let bit = 1 << s;
        self.valid &= !bit;
        self.pinned &= !bit;
        self.dirty &= !bit;
        true
    }

    /// The mask of occupied slots.
    pub fn valid_mask(&self) -> u32 {
        self.valid
    }

    /// The mask of pinned slots.
    pub fn pinned_mask(&self) -> u32 {
        self.pinned
    }

    /// The mask of dirty slots.
    pub fn dirty_mask(&self) -> u32 {
        self.dirty
    }

    /// The policy's per-slot bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The policy's set word.
    pub fn word(&self) -> u32 {
        self.word
    }

    /// The ghost tags ([`NO_TAG`] marks an empty entry).
    pub fn ghost_tags(&self) -> &[u64] {
        &self.ghost_tags
    }

    /// The ghost bytes.
    pub fn ghost_bytes(&self) -> &[u8] {
        &self.ghost_bytes
    }
}

/// A model of a whole set-associative cache: `n_sets` sets of `assoc` slots,
/// page `tag` living in one of its two candidate sets,
/// placed as the cache places it, each set managed by the same policy. No
/// pins, no dirty pages: every resident page is eligible.
///
/// Built for replaying long traces: the state lives in two flat arrays (per
/// set, the tags then the ghost tags in one; the set word, the valid mask,
/// the slot bytes and the ghost bytes in the other), and an access allocates
/// nothing.
#[derive(Clone, Debug)]
pub struct SaModel {
    kind: PolicyKind,
    assoc: usize,
    n_sets: usize,
    ghosts: usize,
    tag_stride: usize,
    meta_stride: usize,
    tags: Vec<u64>,
    meta: Vec<u8>,
    hits: u64,
    misses: u64,
    ghost_hits: u64,
    /// The adaptive policy's duel (idle for the others), as in the cache.
    duel: Duel,
    /// Per slot, the low byte of the epoch of its page's last use.
    stamps: Vec<u8>,
    clock: LocalClock,
    /// Whether a page may live in its second set too (as in the cache).
    two_choice: bool,
    /// The partitions the sets are divided into, as in a cache made with
    /// that many (`CacheOptions::partitions`): a page's second set is in its
    /// first set's partition.
    partitions: u64,
}

/// Bytes at the start of a set's metadata record: the set word, then the
/// valid mask, both little-endian.
const META_HEAD: usize = 8;

impl SaModel {
    /// An empty cache of `n_sets` sets of `assoc` slots managed by `kind`.
    ///
    /// # Panics
    ///
    /// If `assoc` is outside `MIN_ASSOC..=MAX_ASSOC` or `n_sets` is 0.
    pub fn new(kind: PolicyKind, assoc: usize, n_sets: usize) -> Self {
        check_assoc(assoc);
        assert!(n_sets > 0, "a cache needs at least one set");
        let ghosts = kind.ghosts(assoc);
        let tag_stride = assoc + ghosts;
        // Round the record up so that small records do not straddle lines.
        let meta_stride = (META_HEAD + assoc + ghosts).next_power_of_two();
        let mut m = SaModel {
            kind,
            assoc,
            n_sets,
            ghosts,
            tag_stride,
            meta_stride,
            tags: vec![NO_TAG; tag_stride * n_sets],
            meta: vec![0; meta_stride * n_sets],
            hits: 0,
            misses: 0,
            ghost_hits: 0,
            duel: if kind == PolicyKind::Adaptive {
                Duel::new(n_sets, assoc)
            } else {
                Duel::idle()
            },
            stamps: vec![0; assoc * n_sets],
            clock: LocalClock::new(assoc * n_sets),
            two_choice: true,
            partitions: 1,
        };
        for set in 0..n_sets {
            m.reset_set(set);
        }
        m
    }

    /// As [`SaModel::new`], with the sets divided among `partitions`
    /// partitions as a cache made with that many divides them: the model of
    /// such a cache, which gives a page's two candidate sets in one partition.
    ///
    /// # Panics
    ///
    /// As [`SaModel::new`], and if `partitions` is outside 1 to
    /// [`MAX_PARTITIONS`](crate::cache::MAX_PARTITIONS) or does not divide
    /// `n_sets` (a cache rounds its sets down to a multiple of its partitions).
    pub fn partitioned(kind: PolicyKind, assoc: usize, n_sets: usize, partitions: usize) -> Self {
        assert!(
            (1..=crate::cache::MAX_PARTITIONS).contains(&partitions)
                && n_sets.is_multiple_of(partitions),
            "{n_sets} sets cannot be divided among {partitions} partitions"
        );
        SaModel {
            partitions: partitions as u64,
            ..SaModel::new(kind, assoc, n_sets)
        }
    }

    /// As [`SaModel::new`], but each page may live in its first set only: a
    /// plain set-associative cache, to measure what the second choice gains.
    ///
    /// # Panics
    ///
    /// As [`SaModel::new`].
    pub fn one_set_per_page(kind: PolicyKind, assoc: usize, n_sets: usize) -> Self {
        SaModel {
            two_choice: false,
            ..SaModel::new(kind, assoc, n_sets)
        }
    }

    fn reset_set(&mut self, set: usize) {
        let (assoc, kind) = (self.assoc, self.kind);
        let rec = &mut self.meta[set * self.meta_stride..][..self.meta_stride];
        let (head, rest) = rec.split_at_mut(META_HEAD);
        let (bytes, rest) = rest.split_at_mut(assoc);
        let ghost_bytes = &mut rest[..self.ghosts];
        let gtags = &mut self.tags[set * self.tag_stride + assoc..][..self.ghosts];
        let mut word = 0;
        kind.reset_set(
            &mut SetState {
                bytes,
                word: &mut word,
                ghost_tags: gtags,
                ghost_bytes,
                duel: &self.duel,
            },
            set,
        );
        head[..4].copy_from_slice(&word.to_le_bytes());
        head[4..].copy_from_slice(&0u32.to_le_bytes());
    }

    /// The policy.
    pub fn kind(&self) -> PolicyKind {
        self.kind
    }

    /// Slots per set.
    pub fn assoc(&self) -> usize {
        self.assoc
    }

    /// Number of sets.
    pub fn n_sets(&self) -> usize {
        self.n_sets
    }

    /// Total number of slots (pages the cache can hold).
    pub fn capacity(&self) -> usize {
        self.assoc * self.n_sets
    }

    /// The first of the two sets page `tag` may live in.
    #[inline]
    pub fn set_of(&self, tag: u64) -> usize {
        (mix64(tag) % self.n_sets as u64) as usize
    }

    /// The two sets page `tag` may live in (equal now and then).
    #[inline]
    pub(crate) fn sets_of(&self, tag: u64) -> (usize, usize) {
        let h = mix64(tag);
        let n = self.n_sets as u64;
        let first = (h % n) as usize;
        if self.two_choice {
            (first, (place::second_in(h, self.partitions) % n) as usize)
        } else {
            (first, first)
        }
    }

    /// Accesses page `tag`; returns true on a hit. A miss places the page,
    /// evicting the policy's victim if the set is full.
    ///
    /// # Panics
    ///
    /// If `tag` is [`NO_TAG`].
    #[inline]
    pub fn access(&mut self, tag: u64) -> bool {
        dispatch!(self.kind, p => self.access_with(&p, tag))
    }

    /// Accesses every page of `tags` in order and returns the number of hits.
    ///
    /// The outcome is the same as calling [`SaModel::access`] for each tag,
    /// but the policy is dispatched once for the whole run, and the state of
    /// the sets a few accesses ahead is prefetched into the CPU cache. On a
    /// cache whose state does not fit in the CPU cache this is several times
    /// faster than single accesses.
    ///
    /// # Panics
    ///
    /// If a tag is [`NO_TAG`].
    pub fn replay(&mut self, tags: impl IntoIterator<Item = u64>) -> u64 {
        /// Accesses are taken in chunks, with their sets computed up front...
        const CHUNK: usize = 256;
        /// ... so that the sets this many accesses ahead can be fetched early.
        const AHEAD: usize = 12;
        dispatch!(self.kind, p => {
            let mut hits = 0;
            let mut tags = tags.into_iter();
            let mut buf = [(0u64, (0usize, 0usize)); CHUNK];
            loop {
                let mut n = 0;
                for (entry, tag) in buf.iter_mut().zip(tags.by_ref()) {
                    *entry = (tag, self.sets_of(tag));
                    n += 1;
                }
                for i in 0..n {
                    if let Some(&(_, (a, b))) = buf[..n].get(i + AHEAD) {
                        self.fetch(a);
                        self.fetch(b);
                    }
                    let (tag, sets) = buf[i];
                    hits += u64::from(self.access_in(&p, tag, sets));
                }
                if n < CHUNK {
                    break hits;
                }
            }
        })
    }

    /// Starts loading the state of `set` (every line of its tags and ghost
    /// tags, and its metadata record) into the CPU cache.
    #[inline]
    fn fetch(&self, set: usize) {
        let tags = self.tags[set * self.tag_stride..].as_ptr();
        for i in (0..self.tag_stride).step_by(8) {
            prefetch(tags.wrapping_add(i));
        }
        prefetch(tags.wrapping_add(self.tag_stride - 1));
        prefetch(self.meta[set * self.meta_stride..].as_ptr());
        prefetch(self.stamps[set * self.assoc..].as_ptr());
    }

    #[inline]
    fn access_with<P: Policy>(&mut self, p: &P, tag: u64) -> bool {
        let sets = self.sets_of(tag);
        self.access_in(p, tag, sets)
    }

    /// Runs `f` on the tags, policy state and valid mask of `set`.
    #[inline]
    fn with_set<R>(
        &mut self,
        set: usize,
        f: impl FnOnce(&mut [u64], &mut SetState<'_>, &mut u32) -> R,
    ) -> R {
        let assoc = self.assoc;
        let tags = &mut self.tags[set * self.tag_stride..][..self.tag_stride];
        let (tags, ghost_tags) = tags.split_at_mut(assoc);
        let rec = &mut self.meta[set * self.meta_stride..][..self.meta_stride];
        let (head, rest) = rec.split_at_mut(META_HEAD);
        let (bytes, rest) = rest.split_at_mut(assoc);
        let ghost_bytes = &mut rest[..self.ghosts];
        let (word_bytes, valid_bytes) = head.split_at_mut(4);
        let mut word =
            u32::from_le_bytes([word_bytes[0], word_bytes[1], word_bytes[2], word_bytes[3]]);
        let mut valid = u32::from_le_bytes([
            valid_bytes[0],
            valid_bytes[1],
            valid_bytes[2],
            valid_bytes[3],
        ]);
        let mut st = SetState {
            bytes,
            word: &mut word,
            ghost_tags,
            ghost_bytes,
            duel: &self.duel,
        };
        let r = f(tags, &mut st, &mut valid);
        valid_bytes.copy_from_slice(&valid.to_le_bytes());
        word_bytes.copy_from_slice(&word.to_le_bytes());
        r
    }

    fn valid_of(&self, set: usize) -> u32 {
        let h = &self.meta[set * self.meta_stride + 4..][..4];
        u32::from_le_bytes([h[0], h[1], h[2], h[3]])
    }

    #[inline]
    fn access_in<P: Policy>(&mut self, p: &P, tag: u64, (s1, s2): (usize, usize)) -> bool {
        assert_ne!(tag, NO_TAG, "NO_TAG names no page");
        let assoc = self.assoc;
        let now = self.clock.now();
        // Empty slots hold NO_TAG, which no page uses, so a match is a hit.
        let find = |m: &Self, s: usize| {
            m.tags[s * m.tag_stride..][..assoc]
                .iter()
                .position(|&t| t == tag)
        };
        let hit = find(self, s1).map(|i| (s1, i)).or_else(|| {
            if s2 != s1 {
                find(self, s2).map(|i| (s2, i))
            } else {
                None
            }
        });
        if let Some((set, slot)) = hit {
            self.with_set(set, |_, st, valid| p.on_hit_tag(st, slot, tag, *valid));
            self.stamps[set * assoc + slot] = now;
            self.hits += 1;
            self.duel.observe_access(s1, tag);
            return true;
        }
        self.misses += 1;
        let full = low_mask(assoc);
        // A free slot of the first set, then of the second; else the older of
        // the two sets' victims.
        let (set, victim) = if self.valid_of(s1) != full {
            (s1, None)
        } else if s2 != s1 && self.valid_of(s2) != full {
            (s2, None)
        } else {
            let a1 = self.with_set(s1, |_, st, valid| p.admits(st, tag, *valid));
            let a2 = if s2 == s1 {
                Admit::No
            } else {
                self.with_set(s2, |_, st, valid| p.admits(st, tag, *valid))
            };
            if a1 == Admit::No && a2 == Admit::No {
                self.with_set(s1, |_, st, valid| p.on_pass(st, tag, *valid));
                self.clock.tick();
                self.duel.observe_access(s1, tag);
                return false;
            }
            if let Some(s) = place::only(a1, a2) {
                let s = if s == 0 { s1 } else { s2 };
                let v = self.with_set(s, |_, st, valid| p.victim(st, *valid, *valid));
                (s, Some(v))
            } else {
                let v1 = self.with_set(s1, |_, st, valid| p.victim(st, *valid, *valid));
                if s2 == s1 {
                    (s1, Some(v1))
                } else {
                    let v2 = self.with_set(s2, |_, st, valid| p.victim(st, *valid, *valid));
                    let (a, b) = (self.stamps[s1 * assoc + v1], self.stamps[s2 * assoc + v2]);
                    if place::evict_second(now, a, b) {
                        (s2, Some(v2))
                    } else {
                        (s1, Some(v1))
                    }
                }
            }
        };
        let (slot, ghost) = self.with_set(set, |tags, st, valid| {
            let slot = match victim {
                Some(v) => {
                    p.on_evict(st, v, tags[v], *valid);
                    *valid &= !(1 << v);
                    v
                }
                None => (!*valid).trailing_zeros() as usize,
            };
            let ghost = p.on_insert(st, slot, tag, *valid);
            tags[slot] = tag;
            *valid |= 1 << slot;
            (slot, ghost)
        });
        if ghost {
            self.ghost_hits += 1;
        }
        self.stamps[set * assoc + slot] = now;
        self.clock.tick();
        self.duel.observe_access(s1, tag);
        false
    }

    /// Whether page `tag` is resident (does not count as an access).
    pub fn contains(&self, tag: u64) -> bool {
        let (s1, s2) = self.sets_of(tag);
        tag != NO_TAG
            && (self.tags[s1 * self.tag_stride..][..self.assoc].contains(&tag)
                || self.tags[s2 * self.tag_stride..][..self.assoc].contains(&tag))
    }

    /// Hits so far.
    pub fn hits(&self) -> u64 {
        self.hits
    }

    /// The adaptive policy's duel (idle for the other policies).
    pub fn duel(&self) -> &Duel {
        &self.duel
    }

    /// Misses so far.
    pub fn misses(&self) -> u64 {
        self.misses
    }

    /// Misses whose page the policy found among its ghosts.
    pub fn ghost_hits(&self) -> u64 {
        self.ghost_hits
    }

    /// Hits over accesses (0 before any access).
    pub fn hit_ratio(&self) -> f64 {
        let total = self.hits + self.misses;
        if total == 0 {
            0.0
        } else {
            self.hits as f64 / total as f64
        }
    }

    /// Zeroes the hit, miss and ghost-hit counters (the cache content stays),
    /// e.g. after a warm-up.
    pub fn reset_stats(&mut self) {
        self.hits = 0;
        self.misses = 0;
        self.ghost_hits = 0;
    }
}

/// Shared test machinery: random operation sequences, a runner that checks the
/// policy-independent invariants after every step, and reference models.
#[cfg(test)]
pub(crate) mod testing {
    use super::super::common::{RANK_MASK, rank};
    use super::*;
    use proptest::prelude::*;
    use std::collections::VecDeque;

    /// One step of a random test.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub(crate) enum Op {
        Access(u64),
        Pin(u64),
        Unpin(u64),
        Dirty(u64, bool),
        Remove(u64),
    }

    /// Random sequences of up to `max_len` operations on tags `0..universe`,
    /// mostly accesses.
    pub(crate) fn ops(universe: u64, max_len: usize) -> impl Strategy<Value = Vec<Op>> {
        let op = prop_oneof![
            14 => (0..universe).prop_map(Op::Access),
            2 => (0..universe).prop_map(Op::Pin),
            2 => (0..universe).prop_map(Op::Unpin),
            2 => (0..universe, any::<bool>()).prop_map(|(t, d)| Op::Dirty(t, d)),
            1 => (0..universe).prop_map(Op::Remove),
        ];
        proptest::collection::vec(op, 1..max_len)
    }

    /// A miss into `slot` that evicted `evicted` (or filled an empty slot),
    /// with `ghost_hit` saying whether the page was found among the ghosts.
    pub(crate) fn ghost_miss(slot: usize, evicted: Option<u64>, ghost_hit: bool) -> Access {
        Access::Miss {
            slot,
            evicted,
            ghost_hit,
        }
    }

    /// A miss into `slot` that evicted `evicted`, with no ghost hit.
    pub(crate) fn miss(slot: usize, evicted: Option<u64>) -> Access {
        ghost_miss(slot, evicted, false)
    }

    /// A fresh model of `kind` with `assoc` slots after accessing `tags` in
    /// order, handing `seen` the index, the tag and the result of each access.
    fn model_after(
        kind: PolicyKind,
        assoc: usize,
        tags: impl IntoIterator<Item = u64>,
        mut seen: impl FnMut(usize, u64, Access),
    ) -> SetModel {
        let mut m = SetModel::new(kind, assoc);
        for (i, t) in tags.into_iter().enumerate() {
            seen(i, t, m.access(t));
        }
        m
    }

    /// A fresh model of `kind` with `assoc` slots after accessing `tags` in
    /// order.
    pub(crate) fn model_with(
        kind: PolicyKind,
        assoc: usize,
        tags: impl IntoIterator<Item = u64>,
    ) -> SetModel {
        model_after(kind, assoc, tags, |_, _, _| {})
    }

    /// Like [`model_with`], asserting that each tag misses into the next slot,
    /// evicting nothing.
    pub(crate) fn filled(
        kind: PolicyKind,
        assoc: usize,
        tags: impl IntoIterator<Item = u64>,
    ) -> SetModel {
        model_after(kind, assoc, tags, |i, t, res| {
            assert_eq!(res, miss(i, None), "access of {t}");
        })
    }

    /// Accesses `tags` in order and returns the pages that were evicted.
    pub(crate) fn evictions(m: &mut SetModel, tags: impl IntoIterator<Item = u64>) -> Vec<u64> {
        tags.into_iter()
            .filter_map(|t| match m.access(t) {
                Access::Miss { evicted, .. } => evicted,
                _ => None,
            })
            .collect()
    }

    /// Fills a 12-slot set of `kind` with pages 0..12, hits 0..6 once more,
    /// then scans 62 new pages: asserts that the scan evicts the cold pages
    /// (6..12) and then its own pages, oldest first, while the hot pages stay.
    pub(crate) fn scan_spares_hot_pages(kind: PolicyKind) -> SetModel {
        let mut m = model_with(kind, 12, (0..12).chain(0..6));
        let expect: Vec<u64> = (6..12).chain(100..156).collect();
        assert_eq!(evictions(&mut m, 100..162), expect);
        assert!((0..6).all(|t| m.contains(t)));
        m
    }

    /// What one step did: the model before and after, and the access result.
    pub(crate) struct Step<'a> {
        pub(crate) before: &'a SetModel,
        pub(crate) after: &'a SetModel,
        pub(crate) access: Option<Access>,
    }

    /// Applies `ops` to a fresh model, checks the generic invariants after
    /// every step and hands each step to `check` for the policy's own.
    pub(crate) fn run(
        kind: PolicyKind,
        assoc: usize,
        ops: &[Op],
        mut check: impl FnMut(&Step<'_>, &Op),
    ) -> Result<(), TestCaseError> {
        let mut m = SetModel::new(kind, assoc);
        for op in ops {
            let before = m.clone();
            let access = match *op {
                Op::Access(t) => Some(m.access(t)),
                Op::Pin(t) => {
                    prop_assert_eq!(m.pin(t), before.contains(t));
                    None
                }
                Op::Unpin(t) => {
                    prop_assert_eq!(m.unpin(t), before.contains(t));
                    None
                }
                Op::Dirty(t, d) => {
                    prop_assert_eq!(m.set_dirty(t, d), before.contains(t));
                    None
                }
                Op::Remove(t) => {
                    prop_assert_eq!(m.remove(t), before.contains(t));
                    prop_assert!(!m.contains(t));
                    None
                }
            };
            if let (Op::Access(t), Some(res)) = (*op, access) {
                check_access(&before, &m, t, res)?;
            } else if !matches!(op, Op::Remove(_)) {
                // Pins and dirty bits are not the policy's business.
                prop_assert_eq!(m.bytes(), before.bytes());
                prop_assert_eq!(m.word(), before.word());
            }
            check_structure(&m)?;
            check(
                &Step {
                    before: &before,
                    after: &m,
                    access,
                },
                op,
            );
        }
        Ok(())
    }

    fn check_access(
        before: &SetModel,
        m: &SetModel,
        t: u64,
        res: Access,
    ) -> Result<(), TestCaseError> {
        let full = low_mask(before.assoc());
        if let Some(s) = before.slot_of(t) {
            prop_assert_eq!(res, Access::Hit { slot: s });
            prop_assert_eq!(m.tags.clone(), before.tags.clone());
            return Ok(());
        }
        let unpinned = before.valid & !before.pinned;
        let clean = unpinned & !before.dirty;
        match res {
            Access::Hit { .. } => prop_assert!(false, "hit on a non-resident page"),
            Access::AllPinned => {
                prop_assert_eq!(before.valid, full);
                prop_assert_eq!(unpinned, 0);
                prop_assert_eq!(m.bytes(), before.bytes());
                prop_assert_eq!(m.word(), before.word());
                prop_assert_eq!(m.ghost_tags(), before.ghost_tags());
                prop_assert!(!m.contains(t));
            }
            Access::Miss {
                slot,
                evicted,
                ghost_hit,
            } => {
                prop_assert_eq!(m.slot_of(t), Some(slot));
                prop_assert_eq!(m.pinned & (1 << slot), 0);
                prop_assert_eq!(m.dirty & (1 << slot), 0);
                let ghosts = before.ghost_tags();
                if ghost_hit {
                    prop_assert!(ghosts.contains(&t), "ghost hit on a non-ghost");
                } else if ghosts.contains(&t) {
                    // Only possible if the victim, recorded first, pushed the
                    // oldest ghost, `t`, out of a full list.
                    prop_assert!(evicted.is_some());
                    prop_assert_eq!(ghosts.last(), Some(&t));
                }
                if before.valid != full {
                    prop_assert_eq!(slot, (!before.valid).trailing_zeros() as usize);
                    prop_assert_eq!(evicted, None);
                } else {
                    let e = evicted.expect("a full set evicts");
                    prop_assert_eq!(before.slot_of(e), Some(slot));
                    prop_assert!(!m.contains(e));
                    let tier = if clean != 0 { clean } else { unpinned };
                    prop_assert!(tier & (1 << slot) != 0, "victim slot {} not eligible", slot);
                }
                // Everything else stays where it was.
                for s in (0..m.assoc()).filter(|&s| s != slot) {
                    prop_assert_eq!(m.tags[s], before.tags[s]);
                }
            }
        }
        Ok(())
    }

    fn check_structure(m: &SetModel) -> Result<(), TestCaseError> {
        let mut valid = 0u32;
        for (s, &t) in m.tags.iter().enumerate() {
            if t != NO_TAG {
                valid |= 1 << s;
                prop_assert_eq!(m.tags.iter().filter(|&&u| u == t).count(), 1);
            } else {
                prop_assert_eq!(m.bytes[s], 0, "empty slot {} has a policy byte", s);
            }
        }
        prop_assert_eq!(valid, m.valid);
        prop_assert_eq!(m.pinned & !m.valid, 0);
        prop_assert_eq!(m.dirty & !m.valid, 0);
        // Ghosts: live entries first, distinct, never resident.
        let live = m.ghost_tags.iter().take_while(|&&t| t != NO_TAG).count();
        for (i, &g) in m.ghost_tags.iter().enumerate() {
            if i < live {
                prop_assert!(!m.contains(g), "ghost {} is resident", g);
                prop_assert_eq!(m.ghost_tags.iter().filter(|&&u| u == g).count(), 1);
            } else {
                prop_assert_eq!(g, NO_TAG);
                prop_assert_eq!(m.ghost_bytes[i], 0);
            }
        }
        Ok(())
    }

    /// Asserts that the ranks (the `mask` bits of the bytes) of the valid
    /// slots are a permutation of `0..n_valid`.
    pub(crate) fn assert_ranks_permutation(m: &SetModel, mask: u8) {
        let mut seen = 0u32;
        let n = m.valid.count_ones();
        for s in 0..m.assoc() {
            if m.valid & (1 << s) != 0 {
                let r = u32::from(m.bytes[s] & mask);
                assert!(r < n, "rank {r} with {n} valid slots: {:?}", m.bytes);
                assert_eq!(seen & (1 << r), 0, "rank {r} twice: {:?}", m.bytes);
                seen |= 1 << r;
            }
        }
    }

    /// The valid slots in rank order (rank 0 first), using the rank bits.
    pub(crate) fn by_rank(m: &SetModel) -> Vec<u64> {
        let mut v: Vec<(u8, u64)> = (0..m.assoc())
            .filter_map(|s| m.tag_at(s).map(|t| (rank(m.bytes[s] & RANK_MASK), t)))
            .collect();
        v.sort_unstable();
        v.into_iter().map(|(_, t)| t).collect()
    }

    /// The eligible tags of the model for a victim choice, per the cache rule.
    pub(crate) fn eligible_tags(m: &SetModel) -> Vec<u64> {
        let unpinned = m.valid & !m.pinned;
        let clean = unpinned & !m.dirty;
        let tier = if clean != 0 { clean } else { unpinned };
        (0..m.assoc())
            .filter(|&s| tier & (1 << s) != 0)
            .map(|s| m.tags[s])
            .collect()
    }

    /// The slot of the victim, when the step was a miss that evicted a page.
    pub(crate) fn victim_slot(step: &Step<'_>) -> Option<usize> {
        match step.access {
            Some(Access::Miss {
                slot,
                evicted: Some(_),
                ..
            }) => Some(slot),
            _ => None,
        }
    }

    /// Asserts that the victim `slot` of `before` held the smallest byte (an
    /// access counter) among the eligible pages.
    pub(crate) fn assert_least_counter(before: &SetModel, slot: usize) {
        let min = eligible_tags(before)
            .iter()
            .map(|&t| before.bytes()[before.slot_of(t).unwrap()])
            .min()
            .unwrap();
        assert_eq!(before.bytes()[slot], min);
    }

    /// The checks common to the clock policies: every counter is at most
    /// `max` and the hand is a slot; after an eviction the hand rests just
    /// past the victim. Returns the victim's slot, if there was one.
    pub(crate) fn check_clock(step: &Step<'_>, max: u8) -> Option<usize> {
        let after = step.after;
        assert!(after.bytes().iter().all(|&b| b <= max));
        assert!((after.word() as usize) < after.assoc());
        let slot = victim_slot(step)?;
        assert_eq!(after.word() as usize, (slot + 1) % after.assoc());
        Some(slot)
    }

    /// A list-based reference that a policy is checked against, step by step.
    pub(crate) trait Follow {
        /// Follows one step, checking the model's victim and state.
        fn follow(&mut self, step: &Step<'_>, op: &Op);
    }

    /// Runs `ops` on a set of `assoc` slots managed by `kind`, following
    /// `reference` and checking that the ranks (the `rank_mask` bits of the
    /// slot bytes) are a permutation.
    pub(crate) fn run_ranked(
        kind: PolicyKind,
        assoc: usize,
        ops: &[Op],
        mut reference: impl Follow,
        rank_mask: u8,
    ) -> Result<(), TestCaseError> {
        run(kind, assoc, ops, |step, op| {
            reference.follow(step, op);
            assert_ranks_permutation(step.after, rank_mask);
        })
    }

    /// Defines a policy's two property tests: `$name`, on sets of 4 to 32
    /// slots with 64 tags and up to 300 operations, and `consistent_small`, on
    /// 4 slots with `$tags` tags and up to `$len` operations. Each calls
    /// `$run(assoc, ops)`, which returns the outcome of [`run`] on them.
    macro_rules! property_tests {
        ($name:ident, small: ($tags:expr, $len:expr), $run:expr) => {
            proptest::proptest! {
                #[test]
                fn $name(
                    assoc in 4usize..=32,
                    ops in $crate::cache::policy::model::testing::ops(64, 300),
                ) {
                    ($run)(assoc, ops.as_slice())?;
                }

                #[test]
                fn consistent_small(
                    ops in $crate::cache::policy::model::testing::ops($tags, $len),
                ) {
                    ($run)(4, ops.as_slice())?;
                }
            }
        };
    }
    pub(crate) use property_tests;

    /// A list-based LRU (`lru == true`) or FIFO reference: front = newest.
    pub(crate) struct RefList {
        lru: bool,
        order: VecDeque<u64>,
    }

    impl RefList {
        /// An empty LRU (`lru == true`) or FIFO list.
        pub(crate) fn new(lru: bool) -> Self {
            RefList {
                lru,
                order: VecDeque::new(),
            }
        }
    }

    impl Follow for RefList {
        /// Follows one step and checks the model's victim and order.
        fn follow(&mut self, step: &Step<'_>, op: &Op) {
            match (*op, step.access) {
                (Op::Access(t), Some(Access::Hit { .. })) if self.lru => {
                    self.order.retain(|&u| u != t);
                    self.order.push_front(t);
                }
                (Op::Access(t), Some(Access::Miss { evicted, .. })) => {
                    if let Some(e) = evicted {
                        let eligible = eligible_tags(step.before);
                        let expect = *self
                            .order
                            .iter()
                            .rev()
                            .find(|u| eligible.contains(u))
                            .expect("some eligible page");
                        assert_eq!(e, expect, "victim; order {:?}", self.order);
                        self.order.retain(|&u| u != e);
                    }
                    self.order.push_front(t);
                }
                (Op::Remove(t), _) => self.order.retain(|&u| u != t),
                _ => {}
            }
            assert_eq!(by_rank(step.after), Vec::from(self.order.clone()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sa_model_matches_set_models() {
        // The adaptive policy's sets share a duel, so they are not
        // independent set models (its own tests check the model).
        for kind in PolicyKind::ALL
            .into_iter()
            .filter(|&k| k != PolicyKind::Adaptive)
        {
            let n_sets = 7;
            let mut sa = SaModel::one_set_per_page(kind, 4, n_sets);
            let mut sets: Vec<SetModel> = (0..n_sets).map(|_| SetModel::new(kind, 4)).collect();
            let mut x = 12345u64;
            for _ in 0..20_000 {
                x = mix64(x);
                // Skewed tags: small ones are far more frequent.
                let tag = (x % 97) * (x >> 60) % 200;
                let set = sa.set_of(tag);
                let hit = matches!(sets[set].access(tag), Access::Hit { .. });
                assert_eq!(sa.access(tag), hit, "{kind}");
                assert!(sa.contains(tag));
            }
            assert_eq!(sa.hits() + sa.misses(), 20_000);
            let ghost_hits = sa.ghost_hits();
            assert_eq!(ghost_hits > 0, kind.ghosts(4) > 0, "{kind}");
            assert!(sa.hits() > 0 && sa.misses() > 0);
            assert_eq!(sa.capacity(), 28);
        }
    }

    #[test]
    fn replay_equals_single_accesses() {
        for kind in PolicyKind::ALL {
            let mut x = 99u64;
            let trace: Vec<u64> = (0..3000)
                .map(|_| {
                    x = mix64(x);
                    (x % 61) * (x >> 62) % 150
                })
                .collect();
            let mut one = SaModel::new(kind, 5, 9);
            let mut all = SaModel::new(kind, 5, 9);
            let hits: u64 = trace.iter().map(|&t| u64::from(one.access(t))).sum();
            assert_eq!(all.replay(trace.iter().copied()), hits, "{kind}");
            assert_eq!(
                (all.hits(), all.misses(), all.ghost_hits()),
                (one.hits(), one.misses(), one.ghost_hits())
            );
            assert!((0..150).all(|t| one.contains(t) == all.contains(t)));
            assert_eq!(all.replay(std::iter::empty()), 0);
        }
    }

    #[test]
    fn sa_model_set_choice() {
        let sa = SaModel::new(PolicyKind::Lru, 12, 1000);
        for tag in 0..100 {
            assert_eq!(sa.set_of(tag), (mix64(tag) % 1000) as usize);
        }
        let mut one = SaModel::new(PolicyKind::Fifo, 32, 1);
        for tag in 0..32 {
            assert!(!one.access(tag));
        }
        for tag in 0..32 {
            assert!(one.access(tag));
        }
        assert!(!one.access(99));
        assert!(!one.contains(0));
        assert_eq!(one.hit_ratio(), 32.0 / 65.0);
        one.reset_stats();
        assert_eq!((one.hits(), one.misses()), (0, 0));
    }

    #[test]
    #[should_panic(expected = "outside")]
    fn rejects_bad_assoc() {
        let _ = SetModel::new(PolicyKind::Lru, 33);
    }

    /// Throughput of the trace simulator; run with
    /// `cargo test --release --lib sa_model_speed -- --ignored --nocapture`.
    #[test]
    #[ignore = "benchmark"]
    fn sa_model_speed() {
        let n = 20_000_000usize;
        for (assoc, n_sets) in [(12usize, 1usize << 14), (12, 1 << 18)] {
            // Roughly Zipf-like tags (a power of a uniform variate) over four
            // times the cache size.
            let universe = (assoc * n_sets * 4) as f64;
            let mut x = 1u64;
            let trace: Vec<u64> = (0..n)
                .map(|_| {
                    x = x
                        .wrapping_mul(6_364_136_223_846_793_005)
                        .wrapping_add(1_442_695_040_888_963_407);
                    let u = (x >> 11) as f64 / (1u64 << 53) as f64;
                    (u * u * u * universe) as u64
                })
                .collect();
            for kind in PolicyKind::ALL {
                let mut sa = SaModel::new(kind, assoc, n_sets);
                sa.replay(trace[..n / 4].iter().copied());
                sa.reset_stats();
                let start = std::time::Instant::now();
                let hits = sa.replay(trace.iter().copied());
                let replay = start.elapsed().as_secs_f64();
                assert_eq!(hits, sa.hits());
                let start = std::time::Instant::now();
                for &t in &trace[..n / 4] {
                    sa.access(t);
                }
                let single = start.elapsed().as_secs_f64();
                println!(
                    "{kind:>7} assoc {assoc} sets {n_sets:>7}: replay {:5.1} M/s, access {:5.1} M/s, hit ratio {:.3}",
                    n as f64 / replay / 1e6,
                    (n / 4) as f64 / single / 1e6,
                    hits as f64 / n as f64
                );
            }
        }
    }
}
