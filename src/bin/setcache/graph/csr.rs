//! The three backings of a CSR graph, behind one interface.
//!
//! A [`Graph`] gives each thread an [`Access`], through which the algorithms
//! read adjacency lists: in-memory vectors and an mmap of the files are
//! [`Slices`] (a list is a slice; a page fault is the kernel's business);
//! [`Paged`] reads the same bytes through setcache: `expand` reads the
//! offsets of its vertices in order, then their lists in spans of nearby
//! lists (one read each, up to [`MAX_SPAN`] entries), keeping up to `depth`
//! reads in flight on the thread's own queue; `sweep` reads the arrays in
//! order through `ArrayReader::for_each_chunk`, so that readahead runs
//! ahead of it.

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
}

/// One thread's way to a graph's lists.
pub(crate) trait Access {
    /// Call `f(u, neighbours of u)` for every `u` of `vs` (increasing), in
    /// any order.
    fn expand(&mut self, vs: &[u32], f: impl FnMut(u32, &[u32])) -> Result<(), String>;
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
    offsets: ArrayReader<'a, u64>,
    targets: ArrayReader<'a, [u32; 2]>,
    q: CachedQueue<'a>,
    reqs: Vec<CachedRequest<'a>>,
    done: Vec<(u64, CachedCompletion)>,
    spare: Vec<Vec<u8>>,
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
            offsets: self.offsets.reader(),
            targets: self.targets.reader(),
            q: self.cs.queue(self.depth),
            reqs: Vec::new(),
            done: Vec::new(),
            spare: Vec::new(),
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
/// Reads of offsets a thread keeps asked for at most.
pub(crate) const EARLY_MAX: usize = 2;

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
            if let Some(k) = self.early.iter().position(wanted) {
                if let (_, _, Some(buf)) = self.early.remove(k) {
                    out.clear();
                    let words = buf
                        .chunks_exact(8)
                        .map(|w| u64::from_ne_bytes(w.try_into().unwrap()));
                    out.extend(words);
                    give_back(&mut self.spare, buf);
                    return Ok(());
                }
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

    /// Read the lists of `vs` (increasing; `offs` their offsets from
    /// `vs[0]` on) in spans of nearby lists, up to the depth in flight.
    fn read_spans(
        &mut self,
        vs: &[u32],
        offs: &[u64],
        f: &mut impl FnMut(u32, &[u32]),
    ) -> Result<(), String> {
        let lo = vs[0];
        let at = |u: u32| (offs[(u - lo) as usize], offs[(u - lo) as usize + 1]);
        // (first vertex, end vertex) as indices of `vs`, first entry.
        let mut spans: Vec<(usize, usize, u64)> = Vec::new();
        let mut i = 0;
        while i < vs.len() {
            let (s, e) = at(vs[i]);
            if s == e {
                f(vs[i], &[]);
                i += 1;
                continue;
            }
            let (mut j, mut end) = (i + 1, e);
            while let Some(&u) = vs.get(j) {
                let (s2, e2) = at(u);
                if s2 > end + GAP || e2 - s > MAX_SPAN {
                    break;
                }
                end = end.max(e2);
                j += 1;
            }
            spans.push((i, j, s));
            i = j;
        }
        let file: &'a setcache::CachedFile = self.g.targets.file();
        let mut next = 0usize;
        let mut failed = None;
        let mut done = std::mem::take(&mut self.done);
        loop {
            while failed.is_none() && next < spans.len() && self.spans_out < self.g.depth {
                let (_, b, s) = spans[next];
                let end = at(vs[b - 1]).1;
                let buf = buffer(&mut self.spare, ((end - s) * 4) as usize);
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
                    continue;
                }
                let (a, b, s) = spans[tag as usize];
                for &u in &vs[a..b] {
                    let (ls, le) = at(u);
                    let bytes = &c.buf[((ls - s) * 4) as usize..((le - s) * 4) as usize];
                    self.list.clear();
                    let words = bytes
                        .chunks_exact(4)
                        .map(|w| u32::from_ne_bytes(w.try_into().unwrap()));
                    self.list.extend(words);
                    f(u, &self.list);
                }
                give_back(&mut self.spare, c.buf);
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
    fn expand(&mut self, vs: &[u32], mut f: impl FnMut(u32, &[u32])) -> Result<(), String> {
        let (Some(&lo), Some(&hi)) = (vs.first(), vs.last()) else {
            return Ok(());
        };
        let mut offs = std::mem::take(&mut self.offs);
        let r = self.offsets_of(lo, hi, &mut offs);
        let r = r.and_then(|()| self.read_spans(vs, &offs, &mut f));
        self.offs = offs;
        r
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
        self.settle(|_| false);
        out.clear();
        self.offsets
            .for_each_chunk(vs.start as u64..vs.end as u64 + 1, |_, xs| {
                out.extend_from_slice(xs)
            })
            .map_err(|e| format!("graph: reading offsets: {e}"))
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
}
