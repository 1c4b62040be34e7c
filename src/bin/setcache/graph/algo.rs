//! Breadth-first search and PageRank on any [`Graph`], and their checks.
//!
//! Both run on `threads` threads, each with its own [`Access`], taking
//! chunks of work from a shared cursor; levels and iterations end at a
//! barrier. The code is the same for every backing: only how a list is
//! fetched differs.
//!
//! * BFS is level-synchronous and direction-optimizing. A top-down level
//!   expands the frontier's vertices in chunks of [`BFS_WORDS`] words of
//!   its bitmap; a neighbour not yet in the visited bitmap (a bit per
//!   vertex, small enough to stay in the processor's caches where the
//!   parents would not) is claimed by setting its bit, gets its parent
//!   and joins the next frontier. A bottom-up level reads instead the
//!   lists of the vertices not yet visited, each up to its first
//!   neighbour in the frontier. The parent a vertex gets depends on
//!   timing and on the way of each level; its depth does not.
//! * PageRank (damping 0.85) pulls: each iteration first sets every
//!   vertex's contribution (rank over degree; the ranks of vertices without
//!   edges are spread over all), then sums each vertex's neighbours'
//!   contributions in list order, so that the ranks are the same bits for
//!   every backing and thread count.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Barrier, Mutex};
use std::time::Instant;

use super::csr::{Access, EARLY_MAX, Graph, MAX_SPAN, span_bytes};

/// Words of the frontier's bitmap a thread takes at a time (64 vertices
/// each).
const BFS_WORDS: usize = 1024;
/// The vertices of those words.
const BFS_VERTICES: u64 = BFS_WORDS as u64 * 64;
/// Vertices a thread takes at a time in PageRank.
const PR_CHUNK: u32 = 1 << 18;
/// The same, as a count.
const PR_VERTICES: u64 = PR_CHUNK as u64;
/// PageRank's damping factor.
pub(crate) const DAMPING: f64 = 0.85;
/// A parent slot not claimed yet.
pub(crate) const NONE: u32 = u32::MAX;

/// Bytes of per-vertex memory each algorithm needs while it runs: BFS the
/// parents, two frontier bitmaps and the visited one; PageRank ranks and
/// contributions.
/// (The check after each search needs [`CHECK_BYTES`] per vertex more.)
pub(crate) fn vertex_bytes(algo: &str, n: u64) -> u64 {
    match algo {
        "bfs" => 4 * n + n.div_ceil(64) * 24,
        _ => 16 * n,
    }
}

/// Bytes of read buffers a thread of `algo` keeps at most with `depth`
/// reads in flight on a graph of `n` vertices: the spans' ([`span_bytes`]),
/// the offsets asked for early and those read now for BFS; for PageRank a
/// chunk's offsets three times (the algorithm's, the access's own, and
/// the read that brings them) and a list gathered across pages.
pub(crate) fn read_buffers(algo: &str, depth: usize, n: u64) -> u64 {
    if algo == "bfs" {
        span_bytes(depth) + (EARLY_MAX as u64 + 1) * (BFS_VERTICES * 8 + 16)
    } else {
        3 * (PR_VERTICES.min(n) + 1) * 8 + MAX_SPAN * 4
    }
}

/// Bytes per vertex the check of a search adds to its per-vertex memory
/// (the depths).
pub(crate) const CHECK_BYTES: u64 = 4;

/// A per-vertex array of `n` values `init()`, advised into transparent huge
/// pages (from 4 MiB on) before it is filled: the searches and iterations
/// touch it at random, and with 4 KiB pages nearly every touch of a large
/// graph's array would also miss the processor's address translation
/// cache.
fn per_vertex<T>(n: usize, init: impl Fn() -> T) -> Vec<T> {
    let mut v = Vec::with_capacity(n);
    let bytes = n * size_of::<T>();
    if bytes >= 4 << 20 {
        // The whole 2 MiB pages inside the allocation (not yet touched).
        let start = (v.as_mut_ptr() as usize).next_multiple_of(2 << 20);
        let end = (v.as_mut_ptr() as usize + bytes) & !((2 << 20) - 1);
        if end > start {
            // Whole pages inside this allocation, which the vector owns.
            // SAFETY: advice on the vector's own pages; `MADV_HUGEPAGE` changes no contents.
            unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE) };
        }
    }
    v.extend((0..n).map(|_| init()));
    v
}

/// Run `body(thread, access)` on `threads` threads; the first error wins,
/// and `stop` tells the others to finish their rounds without work.
fn on_threads<G: Graph>(
    g: &G,
    threads: usize,
    body: impl Fn(usize, Option<&mut G::Access<'_>>, &Fail) + Sync,
) -> Result<(), String> {
    let fail = Fail::default();
    let gate = crate::threads::Gate::default();
    std::thread::scope(|s| {
        crate::threads::spawn_all(&gate, s, threads, |k| {
            let (fail, body) = (&fail, &body);
            move || match g.access() {
                Ok(mut a) => body(k, Some(&mut a), fail),
                Err(e) => {
                    fail.set(e);
                    body(k, None, fail)
                }
            }
        })
        .map(drop)
    })?;
    match fail.first.into_inner().unwrap_or_else(|p| p.into_inner()) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// The first error of a run, and whether there was one.
#[derive(Default)]
struct Fail {
    failed: AtomicBool,
    first: Mutex<Option<String>>,
}

impl Fail {
    fn set(&self, e: String) {
        self.failed.store(true, Relaxed);
        let mut f = self.first.lock().unwrap_or_else(|p| p.into_inner());
        f.get_or_insert(e);
    }

    fn any(&self) -> bool {
        self.failed.load(Relaxed)
    }
}

/// Which way a level of a search goes.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Way {
    /// The frontier's lists are read; each unvisited neighbour joins.
    TopDown,
    /// The unvisited vertices' lists are read; each joins at its first
    /// neighbour in the frontier.
    BottomUp,
}

/// Chooses each level's way from what the levels before found: bottom-up
/// once the frontier holds a quarter of the vertices not yet reached (a
/// bound on those with edges: vertices without edges are counted too),
/// and back to top-down once a frontier has fewer vertices than the
/// unreached ones with edges (known exactly after a bottom-up level) and
/// the offsets a bottom-up level reads (one per vertex, 512 to a page).
#[derive(Clone, Copy, Debug)]
struct Steer {
    n: u64,
    reached: u64,
    /// Unreached vertices with edges, once a bottom-up level counted them.
    open: Option<u64>,
    way: Way,
}

impl Steer {
    fn new(n: u64) -> Steer {
        Steer {
            n,
            reached: 1,
            open: None,
            way: Way::TopDown,
        }
    }

    /// The way of the next level, after one that reached `claimed`
    /// vertices (its frontier) and, if it went bottom-up, left `left`
    /// vertices with edges unreached.
    fn next(&mut self, claimed: u64, left: u64) -> Way {
        self.reached += claimed;
        match self.way {
            Way::BottomUp => self.open = Some(left),
            Way::TopDown => self.open = self.open.map(|o| o.saturating_sub(claimed)),
        }
        let unreached = self.n - self.reached.min(self.n);
        self.way = match self.open {
            Some(open) if claimed >= open + self.n / 512 => Way::BottomUp,
            Some(_) => Way::TopDown,
            None if claimed >= unreached / 4 && claimed > 0 => Way::BottomUp,
            None => Way::TopDown,
        };
        self.way
    }
}

/// Search from each of `roots` in turn; `parents` ends with the last
/// search's tree. Returns each search's seconds and its levels that went
/// bottom-up.
///
/// Direction-optimizing: a level goes top-down or bottom-up as [`Steer`]
/// says. Bottom-up reads the lists of the vertices not yet reached (a
/// frontier holding most of the graph's vertices would read nearly every
/// list top-down, while those left to reach are few) and stops at the
/// first neighbour found in the frontier's bitmap, which it reads and does
/// not clear (it is cleared after the level).
pub(crate) fn bfs<G: Graph>(
    g: &G,
    roots: &[u32],
    threads: usize,
    parents: &[AtomicU32],
) -> Result<Vec<(f64, u32)>, String> {
    let n = parents.len();
    let words = n.div_ceil(64);
    // The frontier of level `l` is `maps[l % 2]`; it is empty again when it
    // is next filled: top-down each thread clears the words it took,
    // bottom-up each clears its share after the level.
    let maps: [Vec<AtomicU64>; 2] =
        std::array::from_fn(|_| per_vertex(words, || AtomicU64::new(0)));
    // The vertices given a parent in this search.
    let visited = per_vertex(words, || AtomicU64::new(0));
    let cursor = AtomicUsize::new(0);
    let found = AtomicU64::new(0);
    let left = AtomicU64::new(0);
    let level = AtomicUsize::new(0);
    let bottom_up = AtomicBool::new(false);
    let finished = AtomicBool::new(false);
    let times = Mutex::new(Vec::new());
    let start = Mutex::new(Instant::now());
    let steer = Mutex::new(Steer::new(n as u64));
    let ups = AtomicU32::new(0);
    let barrier = Barrier::new(threads);
    on_threads(g, threads, |k, mut acc, fail| {
        let (mut vs, mut ahead) = (Vec::new(), Vec::new());
        let share = |k: usize| words * k / threads..words * (k + 1) / threads;
        for &root in roots {
            for p in &parents[n * k / threads..n * (k + 1) / threads] {
                p.store(NONE, Relaxed);
            }
            for w in &visited[share(k)] {
                w.store(0, Relaxed);
            }
            if barrier.wait().is_leader() {
                parents[root as usize].store(root, Relaxed);
                visited[root as usize / 64].store(1 << (root % 64), Relaxed);
                maps[0][root as usize / 64].store(1 << (root % 64), Relaxed);
                level.store(0, Relaxed);
                cursor.store(0, Relaxed);
                bottom_up.store(false, Relaxed);
                finished.store(false, Relaxed);
                *steer.lock().unwrap_or_else(|p| p.into_inner()) = Steer::new(n as u64);
                ups.store(0, Relaxed);
                *start.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
            }
            loop {
                barrier.wait();
                if finished.load(Relaxed) {
                    break;
                }
                if crate::bench::interrupted() {
                    fail.set("interrupted".into());
                }
                let l = level.load(Relaxed);
                let (cur, next) = (&maps[l % 2], &maps[(l + 1) % 2]);
                let up = bottom_up.load(Relaxed);
                let (mut claimed, mut open) = (0u64, 0u64);
                // The vertices of the chunk taken next, taken before this
                // one is expanded so that the access can start reading
                // their offsets: top-down the frontier's (its bits cleared),
                // bottom-up the unvisited ones.
                let take = |vs: &mut Vec<u32>| {
                    vs.clear();
                    let w = cursor.fetch_add(BFS_WORDS, Relaxed);
                    for (i, word) in cur.get(w..(w + BFS_WORDS).min(words))?.iter().enumerate() {
                        let mut bits = if up {
                            let mut b = !visited[w + i].load(Relaxed);
                            if (w + i + 1) * 64 > n {
                                b &= (1u64 << (n % 64)) - 1;
                            }
                            b
                        } else {
                            word.swap(0, Relaxed)
                        };
                        while bits != 0 {
                            vs.push(((w + i) * 64) as u32 + bits.trailing_zeros());
                            bits &= bits - 1;
                        }
                    }
                    Some(())
                };
                let mut more = take(&mut vs).is_some();
                if let Some(a) = acc.as_deref_mut() {
                    a.prefetch(&vs);
                }
                while more {
                    more = take(&mut ahead).is_some();
                    let Some(a) = acc.as_deref_mut().filter(|_| !fail.any()) else {
                        std::mem::swap(&mut vs, &mut ahead);
                        continue;
                    };
                    a.prefetch(&ahead);
                    let past = |u: u32, t: u32| {
                        fail.set(format!(
                            "vertex {u} has a neighbour {t} past the last vertex: the graph's targets are damaged (run again with --regen to make the graph anew)"
                        ));
                    };
                    let r = if up {
                        a.expand(&vs, |v, list| {
                            for &t in list {
                                if t as usize >= n {
                                    return past(v, t);
                                }
                                if cur[t as usize / 64].load(Relaxed) & 1 << (t % 64) != 0 {
                                    parents[v as usize].store(t, Relaxed);
                                    visited[v as usize / 64].fetch_or(1 << (v % 64), Relaxed);
                                    next[v as usize / 64].fetch_or(1 << (v % 64), Relaxed);
                                    claimed += 1;
                                    return;
                                }
                            }
                            open += !list.is_empty() as u64;
                        })
                    } else {
                        // A neighbour claimed is claimed once, however the
                        // list comes.
                        a.expand_parts(&vs, |u, list| {
                            for &t in list {
                                if t as usize >= n {
                                    return past(u, t);
                                }
                                let (w, bit) = (&visited[t as usize / 64], 1 << (t % 64));
                                if w.load(Relaxed) & bit == 0 && w.fetch_or(bit, Relaxed) & bit == 0
                                {
                                    parents[t as usize].store(u, Relaxed);
                                    next[t as usize / 64].fetch_or(bit, Relaxed);
                                    claimed += 1;
                                }
                            }
                        })
                    };
                    if let Err(e) = r {
                        fail.set(e);
                    }
                    std::mem::swap(&mut vs, &mut ahead);
                }
                found.fetch_add(claimed, Relaxed);
                left.fetch_add(open, Relaxed);
                if let Some(a) = acc.as_deref_mut() {
                    a.quiesce();
                }
                if barrier.wait().is_leader() {
                    cursor.store(0, Relaxed);
                    level.store(l + 1, Relaxed);
                    let claimed = found.swap(0, Relaxed);
                    let open = left.swap(0, Relaxed);
                    let mut s = steer.lock().unwrap_or_else(|p| p.into_inner());
                    ups.fetch_add(up as u32, Relaxed);
                    bottom_up.store(s.next(claimed, open) == Way::BottomUp, Relaxed);
                    if claimed == 0 || fail.any() {
                        finished.store(true, Relaxed);
                        let t = start.lock().unwrap_or_else(|p| p.into_inner()).elapsed();
                        times
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .push((t.as_secs_f64(), ups.load(Relaxed)));
                        // A failed search may leave bits behind.
                        for m in &maps {
                            m.iter().for_each(|w| w.store(0, Relaxed));
                        }
                    }
                }
                // A bottom-up level's frontier, read by every thread until
                // the barrier above, cleared before the next level fills it
                // (past the barrier at the top of the loop).
                if up {
                    for w in &cur[share(k)] {
                        w.store(0, Relaxed);
                    }
                }
            }
        }
    })?;
    Ok(times.into_inner().unwrap_or_else(|p| p.into_inner()))
}

/// `iterations` of PageRank from the uniform vector; `rank` ends with the
/// ranks (as `f64` bits) and `contrib` is scratch. Returns each iteration's
/// seconds.
pub(crate) fn pagerank<G: Graph>(
    g: &G,
    iterations: usize,
    threads: usize,
    rank: &[AtomicU64],
    contrib: &[AtomicU64],
) -> Result<Vec<f64>, String> {
    let n = rank.len() as u32;
    let chunks = n.div_ceil(PR_CHUNK) as usize;
    let dangling: Vec<AtomicU64> = (0..chunks).map(|_| AtomicU64::new(0)).collect();
    let (spread, gather) = (AtomicUsize::new(0), AtomicUsize::new(0));
    let base = AtomicU64::new(0);
    let times = Mutex::new(Vec::new());
    let start = Mutex::new(Instant::now());
    let barrier = Barrier::new(threads);
    let range = |c: usize| c as u32 * PR_CHUNK..((c as u32 + 1) * PR_CHUNK).min(n);
    for r in rank {
        r.store((1.0 / n as f64).to_bits(), Relaxed);
    }
    on_threads(g, threads, |_, mut acc, fail| {
        let mut offs = Vec::new();
        for _ in 0..iterations {
            if barrier.wait().is_leader() {
                *start.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
            }
            if crate::bench::interrupted() {
                fail.set("interrupted".into());
            }
            // Contributions, and the rank of vertices without edges per chunk.
            while let Some(a) = acc.as_deref_mut().filter(|_| !fail.any()) {
                let c = spread.fetch_add(1, Relaxed);
                if c >= chunks {
                    break;
                }
                let r = range(c);
                if let Err(e) = a.offsets(r.clone(), &mut offs) {
                    fail.set(e);
                    break;
                }
                let mut lost = 0.0;
                for v in r.clone() {
                    let i = (v - r.start) as usize;
                    let deg = offs[i + 1] - offs[i];
                    let x = f64::from_bits(rank[v as usize].load(Relaxed));
                    let share = if deg == 0 {
                        lost += x;
                        0.0
                    } else {
                        x / deg as f64
                    };
                    contrib[v as usize].store(share.to_bits(), Relaxed);
                }
                dangling[c].store(lost.to_bits(), Relaxed);
            }
            if barrier.wait().is_leader() {
                let lost: f64 = dangling
                    .iter()
                    .map(|d| f64::from_bits(d.load(Relaxed)))
                    .sum();
                let b = (1.0 - DAMPING) / n as f64 + DAMPING * lost / n as f64;
                base.store(b.to_bits(), Relaxed);
                spread.store(0, Relaxed);
            }
            barrier.wait();
            let b = f64::from_bits(base.load(Relaxed));
            while let Some(a) = acc.as_deref_mut().filter(|_| !fail.any()) {
                let c = gather.fetch_add(1, Relaxed);
                if c >= chunks {
                    break;
                }
                let r = a.sweep(range(c), |v, list| {
                    let mut s = 0.0;
                    for &t in list {
                        let Some(c) = contrib.get(t as usize) else {
                            fail.set(format!(
                                "vertex {v} has a neighbour {t} past the last vertex: the graph's targets are damaged (run again with --regen to make the graph anew)"
                            ));
                            return;
                        };
                        s += f64::from_bits(c.load(Relaxed));
                    }
                    rank[v as usize].store((b + DAMPING * s).to_bits(), Relaxed);
                });
                if let Err(e) = r {
                    fail.set(e);
                }
            }
            if barrier.wait().is_leader() {
                gather.store(0, Relaxed);
                let t = start.lock().unwrap_or_else(|p| p.into_inner()).elapsed();
                times
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(t.as_secs_f64());
            }
        }
    })?;
    Ok(times.into_inner().unwrap_or_else(|p| p.into_inner()))
}

/// What a checked search found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct BfsCheck {
    /// A hash of every vertex's depth (the same for every valid search from
    /// the root).
    pub(crate) depth_hash: u64,
    /// Vertices reached.
    pub(crate) reached: u64,
    /// List entries of the reached vertices (each undirected edge twice).
    pub(crate) entries: u64,
}

/// Check `parents` as Graph500 checks a search tree from `root`: the root
/// is its own parent; following parents from any reached vertex ends at the
/// root; each vertex's parent is one of its neighbours; the two ends of
/// every edge are both reached or both not, and their depths differ by at
/// most one. Reads the graph through `g` on `threads` threads.
pub(crate) fn check_bfs<G: Graph>(
    g: &G,
    threads: usize,
    root: u32,
    parents: &[AtomicU32],
) -> Result<BfsCheck, String> {
    let n = g.vertices() as u32;
    let p = |v: u32| parents[v as usize].load(Relaxed);
    if p(root) != root {
        return Err(format!(
            "the root {root} has parent {}, not itself",
            p(root)
        ));
    }
    let mut depth = vec![NONE; n as usize];
    depth[root as usize] = 0;
    let mut path = Vec::new();
    for v in 0..n {
        if p(v) == NONE || depth[v as usize] != NONE {
            continue;
        }
        // Up to a vertex of known depth, then back down.
        let mut u = v;
        while depth[u as usize] == NONE {
            path.push(u);
            if path.len() > n as usize {
                return Err(format!("the parents of vertex {v} form a cycle"));
            }
            u = p(u);
            if u >= n || p(u) == NONE {
                let w = path[path.len() - 1];
                return Err(format!("vertex {w} has parent {u}, which was not reached"));
            }
        }
        let mut d = depth[u as usize];
        while let Some(w) = path.pop() {
            d += 1;
            depth[w as usize] = d;
        }
    }
    let total = Mutex::new((
        BfsCheck {
            depth_hash: 0,
            reached: 0,
            entries: 0,
        },
        None,
    ));
    let cursor = AtomicUsize::new(0);
    let chunks = n.div_ceil(PR_CHUNK) as usize;
    on_threads(g, threads, |_, acc, fail| {
        let Some(a) = acc else { return };
        let mut mine = BfsCheck {
            depth_hash: 0,
            reached: 0,
            entries: 0,
        };
        let mut bad = None;
        loop {
            let c = cursor.fetch_add(1, Relaxed);
            if c >= chunks || fail.any() {
                break;
            }
            let range = c as u32 * PR_CHUNK..((c as u32 + 1) * PR_CHUNK).min(n);
            let r = a.sweep(range, |v, list| {
                let dv = depth[v as usize];
                let mut has_parent = v == root;
                for &t in list {
                    let Some(&dt) = depth.get(t as usize) else {
                        bad.get_or_insert(format!(
                            "vertex {v} has a neighbour {t} past the last vertex: the graph's targets are damaged (run again with --regen to make the graph anew)"
                        ));
                        continue;
                    };
                    if (dv == NONE) != (dt == NONE) {
                        bad.get_or_insert(format!(
                            "edge {v}-{t} joins a reached and an unreached vertex"
                        ));
                    } else if dv != NONE && dv.abs_diff(dt) > 1 {
                        bad.get_or_insert(format!("edge {v}-{t} joins depths {dv} and {dt}"));
                    }
                    has_parent |= t == p(v);
                }
                if dv != NONE {
                    if !has_parent {
                        bad.get_or_insert(format!(
                            "vertex {v}'s parent {} is not a neighbour",
                            p(v)
                        ));
                    }
                    mine.reached += 1;
                    mine.entries += list.len() as u64;
                }
                // A sum, so that the order of the chunks does not matter.
                let h = crate::bench::rng::mix64((dv as u64) << 32 ^ v as u64);
                mine.depth_hash = mine.depth_hash.wrapping_add(h);
            });
            if let Err(e) = r {
                fail.set(e);
            }
        }
        let mut t = total.lock().unwrap_or_else(|p| p.into_inner());
        t.0.depth_hash = t.0.depth_hash.wrapping_add(mine.depth_hash);
        t.0.reached += mine.reached;
        t.0.entries += mine.entries;
        if t.1.is_none() {
            t.1 = bad;
        }
    })?;
    match total.into_inner().unwrap_or_else(|p| p.into_inner()) {
        (_, Some(e)) => Err(format!("search from {root}: {e}")),
        (check, None) => Ok(check),
    }
}

/// What one run measured and found.
#[derive(Clone, Debug, Default)]
pub(crate) struct Measured {
    /// Seconds of each search or iteration.
    pub(crate) secs: Vec<f64>,
    /// Each search's check.
    pub(crate) checks: Vec<BfsCheck>,
    /// The ranks (PageRank).
    pub(crate) ranks: Vec<f64>,
    /// Shared-cache hits and misses during the timed parts (setcache).
    pub(crate) hits: Option<(u64, u64)>,
    /// Bytes read from the devices during the timed parts.
    pub(crate) device_bytes: Option<u64>,
}

/// The timed runs of `algo` and their structural checks, shared with the
/// mmap child: `timed(before)` is called after each timed part with what
/// `mark()` gave before it.
pub(crate) fn run_algo<G: Graph, C: Copy>(
    g: &G,
    algo: &str,
    roots: &[u32],
    iterations: usize,
    threads: usize,
    mut timed: impl FnMut(C),
    mark: impl Fn() -> C,
) -> Result<Measured, String> {
    let n = g.vertices() as usize;
    let mut m = Measured::default();
    if algo == "bfs" {
        let parents: Vec<AtomicU32> = per_vertex(n, || AtomicU32::new(NONE));
        for &root in roots {
            let from = mark();
            m.secs
                .extend(bfs(g, &[root], threads, &parents)?.iter().map(|s| s.0));
            timed(from);
            m.checks.push(check_bfs(g, threads, root, &parents)?);
        }
    } else {
        let rank: Vec<AtomicU64> = per_vertex(n, || AtomicU64::new(0));
        let contrib: Vec<AtomicU64> = per_vertex(n, || AtomicU64::new(0));
        let from = mark();
        m.secs = pagerank(g, iterations, threads, &rank, &contrib)?;
        timed(from);
        drop(contrib);
        m.ranks = rank
            .into_iter()
            .map(|r| f64::from_bits(r.into_inner()))
            .collect();
    }
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::csr::Slices;

    fn path_and_star() -> (Vec<u64>, Vec<u32>) {
        // 0-1-2-3 a path, 4 joined to 0 and 3 (a cycle of five), 5 alone.
        let lists: [&[u32]; 6] = [&[1, 4], &[0, 2], &[1, 3], &[2, 4], &[0, 3], &[]];
        let mut off = vec![0u64];
        let mut t = Vec::new();
        for l in lists {
            t.extend_from_slice(l);
            off.push(t.len() as u64);
        }
        (off, t)
    }

    #[test]
    fn searches_are_checked_and_bad_trees_refused() {
        let (off, t) = path_and_star();
        let g = Slices {
            offsets: &off,
            targets: &t,
        };
        let parents: Vec<AtomicU32> = (0..6).map(|_| AtomicU32::new(0)).collect();
        for threads in [1, 3] {
            let times = bfs(&g, &[0, 2], threads, &parents).unwrap();
            // Five vertices of six reached at the second level: bottom-up.
            assert!(times.iter().all(|t| t.1 > 0), "{times:?}");
            assert_eq!(times.len(), 2);
            let c = check_bfs(&g, threads, 2, &parents).unwrap();
            assert_eq!((c.reached, c.entries), (5, 10));
            assert_eq!(parents[5].load(Relaxed), NONE);
        }
        let good = check_bfs(&g, 2, 2, &parents).unwrap();
        // Depths from 2: 1 and 3 at one, 0 and 4 at two.
        let set = |v: &[u32]| {
            for (i, &p) in v.iter().enumerate() {
                parents[i].store(p, Relaxed);
            }
        };
        set(&[1, 2, 2, 2, 3, NONE]);
        assert_eq!(check_bfs(&g, 1, 2, &parents).unwrap(), good);
        let refused = |v: &[u32], what: &str| {
            set(v);
            let e = check_bfs(&g, 2, 2, &parents).unwrap_err();
            assert!(e.contains(what), "{e}");
        };
        refused(&[3, 2, 2, 2, 3, NONE], "not a neighbour");
        refused(&[1, 2, 2, 2, NONE, NONE], "reached and an unreached");
        refused(&[4, 2, 2, 2, 0, NONE], "cycle");
        refused(&[1, 2, 1, 2, 3, NONE], "root");
        refused(&[1, 2, 2, 2, 0, NONE], "depths");
    }

    /// The ways chosen for the levels of two searches of the scale-23
    /// graph (figures of a run): bottom-up from the level whose frontier
    /// holds a quarter of the unreached vertices, top-down again once a
    /// frontier is smaller than the unreached vertices with edges and the
    /// offsets' pages.
    #[test]
    fn searches_go_bottom_up_while_the_frontier_outweighs_the_rest() {
        use Way::{BottomUp as U, TopDown as T};
        let n = 1 << 23;
        // (vertices claimed, unreached with edges left, the way after).
        let searches: [&[(u64, u64, Way)]; 2] = [
            &[
                (2, 0, T),
                (17_881, 0, T),
                (3_011_965, 0, U),
                (1_565_641, 13_300, U),
                (10_300, 3_000, T),
                (26, 0, T),
            ],
            &[
                (498, 0, T),
                (887_923, 0, T),
                (3_598_930, 0, U),
                (118_085, 3_353, U),
                (377, 2_976, T),
                (2, 0, T),
            ],
        ];
        for levels in searches {
            let mut s = Steer::new(n);
            for &(claimed, left, way) in levels {
                assert_eq!(s.next(claimed, left), way, "{levels:?} at {claimed}");
            }
        }
        // Nothing claimed (the last level) goes top-down.
        assert_eq!(Steer::new(4).next(0, 0), T);
    }

    /// Searches of an R-MAT graph, on one thread and on three, find every
    /// vertex at the depth a plain queue-driven search finds, and pass the
    /// check, with levels of both ways.
    #[test]
    fn searches_of_both_ways_find_a_plain_searchs_depths() {
        let spec = crate::graph::rmat::Spec {
            scale: 12,
            edge_factor: 16,
            seed: 5,
        };
        let csr = crate::graph::rmat::generate(&spec, 2, false).unwrap();
        let g = Slices {
            offsets: &csr.offsets,
            targets: &csr.targets,
        };
        let n = g.vertices() as usize;
        let list = |v: usize| &csr.targets[csr.offsets[v] as usize..csr.offsets[v + 1] as usize];
        let roots: Vec<u32> = (0..n as u32)
            .filter(|&v| !list(v as usize).is_empty())
            .step_by(997)
            .take(4)
            .collect();
        assert_eq!(roots.len(), 4);
        let parents: Vec<AtomicU32> = (0..n).map(|_| AtomicU32::new(0)).collect();
        let mut ups = 0;
        for &root in &roots {
            let mut depth = vec![NONE; n];
            depth[root as usize] = 0;
            let mut queue = std::collections::VecDeque::from([root]);
            while let Some(u) = queue.pop_front() {
                for &t in list(u as usize) {
                    if depth[t as usize] == NONE {
                        depth[t as usize] = depth[u as usize] + 1;
                        queue.push_back(t);
                    }
                }
            }
            let hash = (0..n as u32).fold(0u64, |h, v| {
                let d = depth[v as usize];
                h.wrapping_add(crate::bench::rng::mix64((d as u64) << 32 ^ v as u64))
            });
            for threads in [1, 3] {
                let s = bfs(&g, &[root], threads, &parents).unwrap();
                ups += s[0].1;
                let c = check_bfs(&g, threads, root, &parents).unwrap();
                assert_eq!(c.depth_hash, hash, "root {root}, {threads} threads");
                let reached = depth.iter().filter(|&&d| d != NONE).count() as u64;
                assert_eq!(c.reached, reached);
            }
        }
        assert!(ups > 0, "some levels went bottom-up");
    }

    /// Any number of iterations, on one thread or two, gives the bits of a
    /// plain sequential PageRank.
    #[test]
    fn pagerank_gives_a_plain_pageranks_bits() {
        let spec = crate::graph::rmat::Spec {
            scale: 10,
            edge_factor: 8,
            seed: 2,
        };
        let csr = crate::graph::rmat::generate(&spec, 2, false).unwrap();
        let g = Slices {
            offsets: &csr.offsets,
            targets: &csr.targets,
        };
        let n = g.vertices() as usize;
        let deg = |v: usize| (csr.offsets[v + 1] - csr.offsets[v]) as usize;
        assert!((0..n).any(|v| deg(v) == 0), "some vertices without edges");
        for iterations in [1, 2, 3, 6] {
            let mut rank = vec![1.0 / n as f64; n];
            for _ in 0..iterations {
                // Per chunk, in order, as the chunks' sums are added.
                let lost: f64 = (0..n)
                    .collect::<Vec<_>>()
                    .chunks(PR_CHUNK as usize)
                    .map(|c| {
                        c.iter()
                            .filter(|&&v| deg(v) == 0)
                            .map(|&v| rank[v])
                            .sum::<f64>()
                    })
                    .sum();
                let contrib: Vec<f64> = (0..n)
                    .map(|v| {
                        if deg(v) == 0 {
                            0.0
                        } else {
                            rank[v] / deg(v) as f64
                        }
                    })
                    .collect();
                let b = (1.0 - DAMPING) / n as f64 + DAMPING * lost / n as f64;
                for (v, r) in rank.iter_mut().enumerate() {
                    let list = &csr.targets[csr.offsets[v] as usize..csr.offsets[v + 1] as usize];
                    let s = list.iter().fold(0.0, |s, &t| s + contrib[t as usize]);
                    *r = b + DAMPING * s;
                }
            }
            for threads in [1, 2] {
                let got: Vec<AtomicU64> = (0..n).map(|_| AtomicU64::new(0)).collect();
                let scratch: Vec<AtomicU64> = (0..n).map(|_| AtomicU64::new(0)).collect();
                let secs = pagerank(&g, iterations, threads, &got, &scratch).unwrap();
                assert_eq!(secs.len(), iterations);
                for v in 0..n {
                    let x = f64::from_bits(got[v].load(Relaxed));
                    assert_eq!(
                        x.to_bits(),
                        rank[v].to_bits(),
                        "{iterations} iterations, vertex {v}"
                    );
                }
            }
        }
    }

    #[test]
    fn pagerank_sums_to_one_and_is_the_same_on_any_threads() {
        let (off, t) = path_and_star();
        let g = Slices {
            offsets: &off,
            targets: &t,
        };
        let run = |threads| {
            let rank: Vec<AtomicU64> = (0..6).map(|_| AtomicU64::new(0)).collect();
            let contrib: Vec<AtomicU64> = (0..6).map(|_| AtomicU64::new(0)).collect();
            pagerank(&g, 20, threads, &rank, &contrib).unwrap();
            rank.iter()
                .map(|r| f64::from_bits(r.load(Relaxed)))
                .collect::<Vec<_>>()
        };
        let one = run(1);
        assert_eq!(one, run(2));
        assert!((one.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        // A cycle of five: equal ranks; the lone vertex gets only the base.
        assert!(one[..5].iter().all(|&r| (r - one[0]).abs() < 1e-12));
        assert!(one[5] < one[0]);
    }
}
