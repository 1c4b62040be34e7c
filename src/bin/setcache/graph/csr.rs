//! The three backings of a CSR graph, behind one interface.
//!
//! A [`Graph`] gives each thread an [`Access`], through which the algorithms
//! read adjacency lists: in-memory vectors and an mmap of the files are
//! [`Slices`] (a list is a slice; a page fault is the kernel's business);
//! [`Paged`] reads the same bytes through setcache: `expand` reads the
//! offsets of its vertices in order, hands over in place the lists whose
//! pages are cached (`expand_parts` also those that cross pages, a page at
//! a time), and reads the rest in spans of nearby lists (one read each, up
//! to [`MAX_SPAN`] entries), keeping up to `depth` reads and
//! [`span_bytes`] of their buffers in flight on the thread's own queue
//! (many small reads where the frontier is sparse, a few long ones where
//! it is dense); `sweep` reads its offsets with one read on the same queue
//! and the lists in order through `ArrayReader::for_each_chunk`, so that
//! readahead runs ahead of it.

use std::ops::Range;

use setcache::{
    ArrayReader, CachedCompletion, CachedQueue, CachedRequest, CachedStore, OpKind, PagedArray,
};

/// A graph the algorithms can run on from several threads.
pub(crate) trait Graph: Sync {
    type Access<'a>: Access
    where
        Self: 'a;
    /// A reader for the calling thread.
    fn access(&self) -> Result<Self::Access<'_>, String>;
    /// The number of vertices.
    fn vertices(&self) -> u64;

    /// Read every list once, every entry of it, so that a backing that
    /// caches brings the whole graph in (a list's length alone comes from
    /// the offsets, and reads none of a mapping's list pages).
    fn warm(&self) -> Result<(), String> {
        let mut sum = 0u64;
        self.access()?.sweep(0..self.vertices() as u32, |_, l| {
            sum = l.iter().fold(sum, |s, &x| s.wrapping_add(u64::from(x)));
        })?;
        std::hint::black_box(sum);
        Ok(())
    }
}

/// One thread's way to a graph's lists.
pub(crate) trait Access {
    /// Call `f(u, neighbours of u)` for every `u` of `vs` (increasing), in
    /// any order.
    fn expand(&mut self, vs: &[u32], f: impl FnMut(u32, &[u32])) -> Result<(), String>;
    /// [`Access::expand`] for a caller to whom a list may come in parts:
    /// `f(u, part)` for consecutive parts of each list, in order, each
    /// once (a backing that holds a long list in pieces hands them over
    /// where they are rather than copy them together).
    fn expand_parts(&mut self, vs: &[u32], f: impl FnMut(u32, &[u32])) -> Result<(), String> {
        self.expand(vs, f)
    }
    /// Call `f(v, neighbours of v)` for every `v` of `vs`, in order.
    fn sweep(&mut self, vs: Range<u32>, f: impl FnMut(u32, &[u32])) -> Result<(), String>;
    /// Say that `expand(vs)` comes soon (`vs` increasing, maybe empty).
    fn prefetch(&mut self, vs: &[u32]) {
        let _ = vs;
    }
    /// Finish whatever this thread's reads still have in flight and
    /// forget what `prefetch` asked for: before a thread waits for others
    /// (a page its queue is filling would hold up any thread reading it).
    fn quiesce(&mut self) {}
    /// Put the offsets `vs.start..=vs.end` into `out` (replacing its contents).
    fn offsets(&mut self, vs: Range<u32>, out: &mut Vec<u64>) -> Result<(), String>;
}

/// A CSR whose arrays are slices: vectors, or a mapping of the files.
#[derive(Clone, Copy)]
pub(crate) struct Slices<'a> {
    pub(crate) offsets: &'a [u64],
    pub(crate) targets: &'a [u32],
}

impl Slices<'_> {
    #[inline]
    fn list(&self, v: u32) -> &[u32] {
        let (s, e) = (self.offsets[v as usize], self.offsets[v as usize + 1]);
        &self.targets[s as usize..e as usize]
    }
}

impl Graph for Slices<'_> {
    type Access<'b>
        = Slices<'b>
    where
        Self: 'b;

    fn access(&self) -> Result<Slices<'_>, String> {
        Ok(*self)
    }

    fn vertices(&self) -> u64 {
        self.offsets.len() as u64 - 1
    }
}

impl Access for Slices<'_> {
    fn expand(&mut self, vs: &[u32], mut f: impl FnMut(u32, &[u32])) -> Result<(), String> {
        for &u in vs {
            f(u, self.list(u));
        }
        Ok(())
    }

    fn sweep(&mut self, vs: Range<u32>, mut f: impl FnMut(u32, &[u32])) -> Result<(), String> {
        for v in vs {
            f(v, self.list(v));
        }
        Ok(())
    }

    fn offsets(&mut self, vs: Range<u32>, out: &mut Vec<u64>) -> Result<(), String> {
        out.clear();
        out.extend_from_slice(&self.offsets[vs.start as usize..=vs.end as usize]);
        Ok(())
    }
}

/// The CSR in setcache files, through a cached store.
pub(crate) struct Paged {
    pub(crate) cs: CachedStore,
    pub(crate) offsets: PagedArray<u64>,
    /// The lists' entries in pairs (their number is even: every edge is
    /// stored both ways), so that a sweep reads them in place, without a
    /// copy (elements of two words are not read atomically).
    pub(crate) targets: PagedArray<[u32; 2]>,
    /// Reads a thread keeps in flight in `expand`.
    pub(crate) depth: usize,
}

/// A thread's access to a [`Paged`] graph.
pub(crate) struct PagedAccess<'a> {
    g: &'a Paged,
    targets: ArrayReader<'a, [u32; 2]>,
    q: CachedQueue<'a>,
    reqs: Vec<CachedRequest<'a>>,
    done: Vec<(u64, CachedCompletion)>,
    spare: Vec<Vec<u8>>,
    /// Buffers of list reads.
    spans: Pool,
    list: Vec<u32>,
    offs: Vec<u64>,
    /// Offsets asked for by `prefetch`: (first vertex, last vertex, the
    /// bytes once read); the newest last.
    early: Vec<(u32, u32, Option<Vec<u8>>)>,
    /// List reads in flight.
    spans_out: usize,
}

impl Graph for Paged {
    type Access<'a> = PagedAccess<'a>;

    fn access(&self) -> Result<PagedAccess<'_>, String> {
        Ok(PagedAccess {
            g: self,

            targets: self.targets.reader(),
            q: self.cs.queue(self.depth),
            reqs: Vec::new(),
            done: Vec::new(),
            spare: Vec::new(),
            spans: Pool::new(span_bytes(self.depth)),
            list: Vec::new(),
            offs: Vec::new(),
            early: Vec::new(),
            spans_out: 0,
        })
    }

    fn vertices(&self) -> u64 {
        self.offsets.len() - 1
    }
}

/// List entries between two lists that one read still spans.
const GAP: u64 = 4096;
/// Most list entries one read spans (a longer list is read alone).
pub(crate) const MAX_SPAN: u64 = 64 << 10;
/// The tag bit of reads of offsets (the rest of the tag: the first vertex).
const EARLY: u64 = 1 << 63;
/// The tag of a read of offsets waited for at once (`offsets`).
const OFFSETS: u64 = EARLY - 1;
/// Reads of offsets a thread keeps asked for at most.
pub(crate) const EARLY_MAX: usize = 2;

/// Most bytes of list read buffers a thread holds: enough to keep the
/// device streaming where the frontier is dense (32 spans of the longest),
/// while a sparse frontier's many small reads fill the depth.
const SPAN_BYTES: u64 = 8 << 20;

/// Bytes of list read buffers a thread holds at most (in flight and
/// spare) with `depth` reads in flight: `depth` spans of the longest, up to
/// [`SPAN_BYTES`] (a list longer than that is read alone, in a buffer of
/// its own, beyond them).
pub(crate) fn span_bytes(depth: usize) -> u64 {
    (depth as u64 * MAX_SPAN * 4).min(SPAN_BYTES)
}

/// The smallest buffer of a list read: a page.
const MIN_CLASS: u32 = 12;
/// Buffer sizes: powers of two from a page to a span of the longest.
const CLASSES: usize = (MAX_SPAN * 4).trailing_zeros() as usize - MIN_CLASS as usize + 1;

/// Buffers of list reads, at most `cap` bytes of them held (in flight and
/// spare) but for a read alone, which may be a list longer than `cap`.
/// Each buffer of a span holds a power of two of bytes, from a page to
/// [`MAX_SPAN`] entries, and is kept for reads of its size: a read reuses
/// one without clearing it (the read overwrites the bytes it is given). A
/// list longer than [`MAX_SPAN`] entries is read in a buffer of its own,
/// counted while it is in flight and dropped after.
struct Pool {
    /// Spare buffers by size, the smallest first.
    spare: [Vec<Vec<u8>>; CLASSES],
    /// Bytes of the buffers taken and not dropped (spare or in flight).
    held: u64,
    /// Bytes of the spare buffers.
    spare_bytes: u64,
    cap: u64,
}

impl Pool {
    fn new(cap: u64) -> Pool {
        Pool {
            spare: Default::default(),
            held: 0,
            spare_bytes: 0,
            cap: cap.max(MAX_SPAN * 4),
        }
    }

    /// The size class of a buffer for `len` bytes (at most `MAX_SPAN * 4`).
    fn class(len: usize) -> usize {
        (len.next_power_of_two().trailing_zeros().max(MIN_CLASS) - MIN_CLASS) as usize
    }

    /// A buffer of `len` bytes, or `None` while the buffers held leave no
    /// room for it (a read completing gives room back; `alone`: no read is
    /// in flight, so that the buffers held are all spare).
    fn take(&mut self, len: usize, alone: bool) -> Option<Vec<u8>> {
        let long = len as u64 > MAX_SPAN * 4;
        let (k, size) = if long {
            (CLASSES, len)
        } else {
            let k = Pool::class(len);
            (k, 1usize << (k as u32 + MIN_CLASS))
        };
        if let Some(mut b) = self.spare.get_mut(k).and_then(Vec::pop) {
            self.spare_bytes -= b.capacity() as u64;
            // Bytes past its last read's end, zeroed when it grows.
            if b.len() >= len {
                b.truncate(len);
            } else {
                b.resize(len, 0);
            }
            return Some(b);
        }
        // Room from spare buffers of other sizes, the largest first, if
        // they make enough.
        let in_flight = self.held - self.spare_bytes;
        if in_flight + size as u64 > self.cap && !alone {
            return None;
        }
        for j in (0..CLASSES).rev() {
            while self.held + size as u64 > self.cap {
                let Some(b) = self.spare[j].pop() else { break };
                self.held -= b.capacity() as u64;
                self.spare_bytes -= b.capacity() as u64;
            }
        }
        let mut b = Vec::with_capacity(size);
        b.resize(len, 0);
        self.held += b.capacity() as u64;
        Some(b)
    }

    /// Give back a buffer `take` gave.
    fn give(&mut self, buf: Vec<u8>) {
        let bytes = buf.capacity() as u64;
        if bytes > MAX_SPAN * 4 {
            // A long list's: dropped.
            self.held -= bytes;
        } else {
            self.spare_bytes += bytes;
            self.spare[Pool::class(buf.capacity())].push(buf);
        }
    }
}

/// Give `buf` back to `spare`, unless it grew past the largest span (a
/// long list's), so that the read buffers stay within what the budget
/// counts for them.
fn give_back(spare: &mut Vec<Vec<u8>>, buf: Vec<u8>) {
    if buf.capacity() <= MAX_SPAN as usize * 4 {
        spare.push(buf);
    }
}

/// A buffer of `len` bytes, from `spare` if it has one.
fn buffer(spare: &mut Vec<Vec<u8>>, len: usize) -> Vec<u8> {
    let mut b = spare.pop().unwrap_or_default();
    b.clear();
    b.resize(len, 0);
    b
}

impl<'a> PagedAccess<'a> {
    /// Keep a finished read of offsets for `offsets_of`.
    fn keep_early(&mut self, tag: u64, c: CachedCompletion) {
        let lo = (tag & !EARLY) as u32;
        // The entry this read was for: its first vertex and its length (a
        // later ask from the same vertex may be longer).
        let len = c.buf.len();
        let mine = |e: &(u32, u32, Option<Vec<u8>>)| {
            e.0 == lo && e.2.is_none() && (e.1 - e.0) as usize * 8 + 16 == len
        };
        match self.early.iter_mut().find(|e| mine(e)) {
            Some(e) if c.result.is_ok() => e.2 = Some(c.buf),
            // Failed: read again when needed.
            Some(_) => {
                self.early.retain(|e| !mine(e));
                give_back(&mut self.spare, c.buf);
            }
            // Asked for and forgotten.
            None => give_back(&mut self.spare, c.buf),
        }
    }

    /// The offsets of vertices `lo..=hi + 1` into `out`: those `prefetch`
    /// asked for (waiting for them if they are still on their way), or
    /// read now.
    fn offsets_of(&mut self, lo: u32, hi: u32, out: &mut Vec<u64>) -> Result<(), String> {
        let wanted = |e: &(u32, u32, Option<Vec<u8>>)| e.0 == lo && e.1 == hi;
        if self.early.iter().any(wanted) {
            self.settle(|early| early.iter().any(|e| wanted(e) && e.2.is_some()));
            if let Some(k) = self.early.iter().position(wanted)
                && let (_, _, Some(buf)) = self.early.remove(k)
            {
                out.clear();
                let words = buf
                    .chunks_exact(8)
                    .map(|w| u64::from_ne_bytes(w.try_into().unwrap()));
                out.extend(words);
                give_back(&mut self.spare, buf);
                return Ok(());
            }
        }
        self.offsets(lo..hi + 1, out)
    }

    /// Take this queue's finished reads of offsets until `enough` says so
    /// or none is left in flight. Before any read through the readers: a
    /// page this thread's queue is filling would wait for this thread.
    fn settle(&mut self, enough: impl Fn(&[(u32, u32, Option<Vec<u8>>)]) -> bool) {
        let mut done = std::mem::take(&mut self.done);
        loop {
            self.q.take_completions(&mut done);
            for (tag, c) in done.drain(..) {
                // No list read is in flight between two expansions.
                debug_assert!(tag & EARLY != 0);
                self.keep_early(tag, c);
            }
            if enough(&self.early) || self.q.outstanding() == 0 {
                break;
            }
            self.q.wait(1);
        }
        self.done = done;
    }

    /// `expand` (with `parts`, `expand_parts`).
    fn expand_with(
        &mut self,
        vs: &[u32],
        parts: bool,
        mut f: impl FnMut(u32, &[u32]),
    ) -> Result<(), String> {
        let (Some(&lo), Some(&hi)) = (vs.first(), vs.last()) else {
            return Ok(());
        };
        let mut offs = std::mem::take(&mut self.offs);
        let r = self.offsets_of(lo, hi, &mut offs);
        let r = r.and_then(|()| self.read_spans(vs, &offs, parts, &mut f));
        self.offs = offs;
        r
    }

    /// Read the lists of `vs` (increasing; `offs` their offsets from
    /// `vs[0]` on): in place where their pages are cached, the rest in
    /// spans of nearby lists, up to the depth in flight. With `parts`, a
    /// list that crosses pages may be handed over in parts (consecutive,
    /// in order, each once): its cached pages in place, the rest read.
    fn read_spans(
        &mut self,
        vs: &[u32],
        offs: &[u64],
        parts: bool,
        f: &mut impl FnMut(u32, &[u32]),
    ) -> Result<(), String> {
        let lo = vs[0];
        let at = |u: u32| (offs[(u - lo) as usize], offs[(u - lo) as usize + 1]);
        let file: &'a setcache::CachedFile = self.g.targets.file();
        let ps = self.g.cs.cache().page_size() as u64;
        let per_page = ps / 4;
        // Lists, or their ends, left to read: (vertex, first entry, end).
        let mut pending: Vec<(u32, u64, u64)> = Vec::new();
        // The page of the last list read in place, pinned if it is cached.
        let mut here: Option<(u64, Option<setcache::PageGuard<'a>>)> = None;
        let err = |e: setcache::Error| format!("graph: reading lists: {e}");
        for &u in vs {
            let (s, e) = at(u);
            if s == e {
                f(u, &[]);
                continue;
            }
            let (first, last) = (s / per_page, (e - 1) / per_page);
            if first != last && !parts {
                pending.push((u, s, e));
                continue;
            }
            // Page by page, in place while the pages are cached.
            let mut from = s;
            while from < e {
                let page = from / per_page;
                if here.as_ref().is_none_or(|h| h.0 != page) {
                    // The page before let go first.
                    drop(here.take());
                    here = Some((page, file.page_if_cached(page * ps).map_err(err)?));
                }
                let Some((_, Some(g))) = &here else { break };
                // SAFETY: any four bytes are a `u32`; `align_to` gives only aligned words.
                let (_, words, _) = unsafe { g.align_to::<u32>() };
                // The frame is page-aligned: word `k` is entry `page * per_page + k`.
                let to = e.min((page + 1) * per_page);
                let base = page * per_page;
                let Some(part) = words.get((from - base) as usize..(to - base) as usize) else {
                    return Err(format!(
                        "graph: the list of vertex {u} runs past the end of the lists' file"
                    ));
                };
                f(u, part);
                from = to;
            }
            if from < e {
                pending.push((u, from, e));
            }
        }
        drop(here);
        // Spans of nearby pending lists: (first item, end item, first entry).
        let mut spans: Vec<(usize, usize, u64)> = Vec::new();
        let mut i = 0;
        while i < pending.len() {
            let (_, s, mut end) = pending[i];
            let mut j = i + 1;
            while let Some(&(_, s2, e2)) = pending.get(j) {
                if s2 > end + GAP || e2 - s > MAX_SPAN {
                    break;
                }
                end = end.max(e2);
                j += 1;
            }
            spans.push((i, j, s));
            i = j;
        }
        let mut next = 0usize;
        let mut failed = None;
        let mut done = std::mem::take(&mut self.done);
        loop {
            while failed.is_none() && next < spans.len() && self.spans_out < self.g.depth {
                let (_, b, s) = spans[next];
                let end = pending[b - 1].2;
                let len = ((end - s) * 4) as usize;
                let Some(buf) = self.spans.take(len, self.spans_out == 0) else {
                    break;
                };
                let tag = next as u64;
                self.reqs
                    .push(CachedRequest::tagged(OpKind::Read, file, s * 4, buf, tag));
                self.spans_out += 1;
                next += 1;
            }
            if !self.reqs.is_empty() {
                self.q.submit_from(&mut self.reqs);
            }
            self.q.take_completions(&mut done);
            if done.is_empty() {
                if self.spans_out == 0 && (next >= spans.len() || failed.is_some()) {
                    break;
                }
                self.q.wait(1);
                continue;
            }
            for (tag, c) in done.drain(..) {
                if tag & EARLY != 0 {
                    self.keep_early(tag, c);
                    continue;
                }
                self.spans_out -= 1;
                if let Err(e) = c.result {
                    failed.get_or_insert(format!("graph: reading lists at byte {}: {e}", c.offset));
                    self.spans.give(c.buf);
                    continue;
                }
                let (a, b, s) = spans[tag as usize];
                // SAFETY: any four bytes are a `u32`; `align_to` gives only aligned words.
                let (_, words, _) = unsafe { c.buf.align_to::<u32>() };
                let whole = words.len() * 4 == c.buf.len();
                for &(u, ls, le) in &pending[a..b] {
                    let (from, to) = ((ls - s) as usize, (le - s) as usize);
                    if whole {
                        // The buffer is aligned (as the allocator gives
                        // it): the list in place.
                        f(u, &words[from..to]);
                        continue;
                    }
                    let bytes = &c.buf[from * 4..to * 4];
                    self.list.clear();
                    let words = bytes
                        .chunks_exact(4)
                        .map(|w| u32::from_ne_bytes(w.try_into().unwrap()));
                    self.list.extend(words);
                    f(u, &self.list);
                }
                self.spans.give(c.buf);
            }
        }
        self.done = done;
        match failed {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

impl Access for PagedAccess<'_> {
    fn expand(&mut self, vs: &[u32], f: impl FnMut(u32, &[u32])) -> Result<(), String> {
        self.expand_with(vs, false, f)
    }

    fn expand_parts(&mut self, vs: &[u32], f: impl FnMut(u32, &[u32])) -> Result<(), String> {
        self.expand_with(vs, true, f)
    }

    fn quiesce(&mut self) {
        self.settle(|_| false);
        for (_, _, buf) in std::mem::take(&mut self.early) {
            if let Some(b) = buf {
                give_back(&mut self.spare, b);
            }
        }
    }

    fn prefetch(&mut self, vs: &[u32]) {
        // Their offsets are read on this thread's queue while it expands
        // the vertices before them (a failure shows when they are needed:
        // they are read again then).
        let (Some(&lo), Some(&hi)) = (vs.first(), vs.last()) else {
            return;
        };
        if self.early.len() >= EARLY_MAX {
            self.early.remove(0);
        }
        let buf = buffer(&mut self.spare, (hi - lo) as usize * 8 + 16);
        let tag = EARLY | lo as u64;
        let r = CachedRequest::tagged(OpKind::Read, self.g.offsets.file(), lo as u64 * 8, buf, tag);
        self.early.push((lo, hi, None));
        self.reqs.push(r);
        self.q.submit_from(&mut self.reqs);
    }

    fn sweep(&mut self, vs: Range<u32>, mut f: impl FnMut(u32, &[u32])) -> Result<(), String> {
        let mut offs = std::mem::take(&mut self.offs);
        self.offsets(vs.clone(), &mut offs)?;
        let (first, last) = (offs[0], offs[offs.len() - 1]);
        let mut v = vs.start;
        // A list that spans chunks, gathered.
        let carry = &mut self.list;
        carry.clear();
        let end_of = |v: u32| offs[(v - vs.start) as usize + 1];
        self.targets
            .for_each_chunk(first / 2..last.div_ceil(2), |pair, xs| {
                let xs = xs.as_flattened();
                let at = pair * 2;
                let end = at + xs.len() as u64;
                while v < vs.end {
                    let (s, e) = (offs[(v - vs.start) as usize], end_of(v));
                    if carry.is_empty() && s >= at && e <= end {
                        f(v, &xs[(s - at) as usize..(e - at) as usize]);
                        v += 1;
                        continue;
                    }
                    let from = s.max(at);
                    let to = e.min(end);
                    carry.extend_from_slice(&xs[(from - at) as usize..(to - at) as usize]);
                    if e > end {
                        break;
                    }
                    f(v, carry);
                    carry.clear();
                    v += 1;
                }
            })
            .map_err(|e| format!("graph: reading lists: {e}"))?;
        // Vertices without neighbours after the last list.
        while v < vs.end {
            f(v, &[]);
            v += 1;
        }
        self.offs = offs;
        Ok(())
    }

    fn offsets(&mut self, vs: Range<u32>, out: &mut Vec<u64>) -> Result<(), String> {
        // One read on the thread's queue, whose misses go out as runs of
        // pages at once: read page by page (as `for_each_chunk` does), a
        // copy of the offsets outruns any readahead and waits for each page
        // in turn.
        self.settle(|_| false);
        out.clear();
        let end = vs
            .end
            .checked_add(1)
            .filter(|&e| e as u64 <= self.g.offsets.len());
        let Some(end) = end.filter(|&e| e > vs.start) else {
            return Err(format!(
                "graph: no offsets {}..={} in the graph",
                vs.start, vs.end
            ));
        };
        let len = (end - vs.start) as usize * 8;
        let buf = buffer(&mut self.spare, len);
        let file = self.g.offsets.file();
        self.reqs.push(CachedRequest::tagged(
            OpKind::Read,
            file,
            vs.start as u64 * 8,
            buf,
            OFFSETS,
        ));
        self.q.submit_from(&mut self.reqs);
        let mut done = std::mem::take(&mut self.done);
        let mut got = None;
        while got.is_none() {
            self.q.take_completions(&mut done);
            for (tag, c) in done.drain(..) {
                // Nothing else is in flight after `settle`.
                debug_assert_eq!(tag, OFFSETS);
                got = Some(c);
            }
            if got.is_none() {
                self.q.wait(1);
            }
        }
        self.done = done;
        let c = got.expect("the read of offsets completed");
        let r = match c.result {
            Ok(()) => {
                let words = c.buf[..len]
                    .chunks_exact(8)
                    .map(|w| u64::from_ne_bytes(w.try_into().unwrap()));
                out.extend(words);
                Ok(())
            }
            Err(e) => Err(format!("graph: reading offsets at byte {}: {e}", c.offset)),
        };
        give_back(&mut self.spare, c.buf);
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::rmat::{Spec, generate, store};
    use setcache::{CacheOptions, Store, StoreOptions};

    /// Every access of the paged backing gives the lists the vectors hold,
    /// with a cache far smaller than the graph (reads in flight, evictions).
    #[test]
    fn paged_lists_are_the_vectors_lists() {
        let dir = std::env::temp_dir().join(format!("setcache-graph-csr-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let spec = Spec {
            scale: 13,
            edge_factor: 16,
            seed: 9,
        };
        let csr = generate(&spec, 2, false).unwrap();
        let opts = |size| CacheOptions {
            size,
            ..CacheOptions::default()
        };
        let cs = CachedStore::new(
            Store::open(&[&dir], StoreOptions::default()).unwrap(),
            opts(8 << 20),
        )
        .unwrap();
        store(&cs, &spec, &csr, false).unwrap();
        drop(cs);
        let cs = CachedStore::new(
            Store::open(&[&dir], StoreOptions::default()).unwrap(),
            opts(1 << 20),
        )
        .unwrap();
        let name = spec.name();
        let g = Paged {
            offsets: PagedArray::open_read_only(&cs, &format!("{name}.offsets")).unwrap(),
            targets: PagedArray::open_read_only(&cs, &format!("{name}.targets")).unwrap(),
            cs,
            depth: 8,
        };
        let mem = Slices {
            offsets: &csr.offsets,
            targets: &csr.targets,
        };
        let n = mem.vertices() as u32;
        assert_eq!(g.vertices(), n as u64);
        let mut a = g.access().unwrap();
        // Two vertices of three expanded once, in increasing runs whose
        // spans of lists are cut by the gap and by the longest span.
        // The next run's offsets are asked for before each expansion, as
        // a search does; every fifth run also asks for one never expanded.
        let all: Vec<u32> = (0..n).collect();
        let runs: Vec<Vec<u32>> = all
            .chunks(3000)
            .map(|run| run.iter().copied().filter(|v| v % 3 != 1).collect())
            .collect();
        let mut seen = vec![0u32; n as usize];
        for (k, run) in runs.iter().enumerate() {
            if let Some(next) = runs.get(k + 1) {
                a.prefetch(next);
            }
            if k % 5 == 0 {
                a.prefetch(&[3, 4, 5]);
            }
            a.expand(run, |u, l| {
                assert_eq!(l, mem.list(u), "vertex {u}");
                seen[u as usize] += 1;
            })
            .unwrap();
        }
        assert!(
            (0..n).all(|v| seen[v as usize] == (v % 3 != 1) as u32),
            "each picked vertex once"
        );
        // In parts: each list whole once its parts are put together (each
        // part once, in order: the cached pages in place, the rest read),
        // twice over, the second time with more of the pages cached.
        let long = (0..n).filter(|&v| mem.list(v).len() > 1024).count();
        assert!(long > 0, "lists that cross pages");
        for _ in 0..2 {
            let mut got = vec![Vec::new(); n as usize];
            for run in &runs {
                a.expand_parts(run, |u, part| got[u as usize].extend_from_slice(part))
                    .unwrap();
            }
            for &u in runs.iter().flatten() {
                assert_eq!(got[u as usize], mem.list(u), "vertex {u}");
            }
        }
        // Sweeps of ranges that start and end anywhere.
        for r in [0..n, 0..1, 5..900, n - 3..n, 17..17] {
            let mut next = r.start;
            a.sweep(r.clone(), |v, l| {
                assert_eq!(v, next);
                assert_eq!(l, mem.list(v), "vertex {v}");
                next += 1;
            })
            .unwrap();
            assert_eq!(next, r.end);
            let mut o = Vec::new();
            a.offsets(r.clone(), &mut o).unwrap();
            assert_eq!(o, &csr.offsets[r.start as usize..=r.end as usize]);
        }
        drop(a);
        drop(g);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The span buffers a thread holds, in flight and spare, stay within
    /// the pool's bytes but for a read alone; a buffer given back serves
    /// the next read of its size.
    #[test]
    fn span_buffers_stay_within_their_bytes() {
        let cap = 1 << 20;
        let mut p = Pool::new(cap);
        let mut out = Vec::new();
        let mut rng = crate::bench::rng::Rng::new(7);
        // Reads of any size up to a span's, taken until the pool refuses.
        loop {
            let len = 1 + rng.below(MAX_SPAN * 4) as usize;
            let Some(b) = p.take(len, false) else { break };
            assert_eq!(b.len(), len);
            out.push(b);
            let held: u64 = out.iter().map(|b| b.capacity() as u64).sum();
            assert_eq!(p.held, held);
            assert!(p.held <= cap, "{} bytes held past {cap}", p.held);
        }
        assert!(!out.is_empty());
        // A list longer than a span counts while it is in flight: refused
        // while the others hold the bytes, taken alone even past them.
        let held = p.held;
        assert!(p.take(MAX_SPAN as usize * 4 + 4, false).is_none());
        let long = p.take(cap as usize + 4, true).unwrap();
        assert!(p.held >= cap + 4);
        p.give(long);
        assert!(p.held <= held);
        // Given back, a buffer serves a read of its size without a new one
        // (and without clearing what it held).
        let mut b = out.pop().unwrap();
        b.fill(0xab);
        let (len, at) = (b.len(), b.as_ptr());
        p.give(b);
        let b = p.take(len, false).unwrap();
        assert_eq!((b.as_ptr(), p.held), (at, held));
        assert!(b.iter().all(|&x| x == 0xab));
        out.push(b);
        // With every buffer spare, a read of another size makes room by
        // dropping spares.
        for b in out.drain(..) {
            p.give(b);
        }
        let b = p.take(4096, false).unwrap();
        assert!(p.held <= cap);
        out.push(b);
        while let Some(b) = p.take(4096, false) {
            out.push(b);
        }
        assert_eq!(p.held, cap);
        assert_eq!(out.len() as u64, cap / 4096);
        // A read alone (the caller's buffers all spare) is never refused.
        for b in out.drain(..) {
            p.give(b);
        }
        assert!(p.take(MAX_SPAN as usize * 4, true).is_some());
    }
}
