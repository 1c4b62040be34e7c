//! R-MAT graphs with the Graph500 parameters, stored in CSR form.
//!
//! Edge `k` of a graph comes from the generator of its block of
//! [`BLOCK`] edges (seeded by the graph's seed and the block's number), so
//! the graph is the same for a seed whatever the number of threads. Each
//! edge descends `scale` levels of the adjacency matrix, choosing a quadrant
//! with probabilities a = 0.57, b = c = 0.19, d = 0.05 (no noise), and its
//! endpoints are then relabelled by a bijection of the vertex numbers, so
//! that high degrees do not cluster at low numbers. The graph is made
//! undirected: every edge `u-v` with `u != v` is stored as `u->v` and
//! `v->u` (self-loops are dropped, duplicates kept). The CSR is two arrays:
//! `offsets` (`u64`, one more than the vertices) and `targets` (`u32`, each
//! vertex's neighbours sorted), in the setcache files `<name>.offsets` and
//! `<name>.targets`.

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::time::Instant;

use setcache::{CachedStore, LayoutKind, PagedArray};

use crate::bench::rng::{Rng, mix64};

/// Edges per generator block.
const BLOCK: u64 = 1 << 16;
/// The quadrant thresholds of a = 0.57, b = 0.19, c = 0.19 in 16-bit units.
const T_A: u32 = 37_355;
const T_AB: u32 = T_A + 12_452;
const T_ABC: u32 = T_AB + 12_452;

/// What a graph is made from.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Spec {
    pub(crate) scale: u32,
    pub(crate) edge_factor: u32,
    pub(crate) seed: u64,
}

impl Spec {
    pub(crate) fn vertices(&self) -> u64 {
        1u64 << self.scale
    }

    /// Generated (undirected) edges, before self-loops are dropped.
    pub(crate) fn edges(&self) -> u64 {
        self.vertices() * self.edge_factor as u64
    }

    /// The name of the graph's files (without `.offsets`/`.targets`).
    pub(crate) fn name(&self) -> String {
        format!(
            "rmat-s{}-e{}-seed{}",
            self.scale, self.edge_factor, self.seed
        )
    }
}

/// A bijection of `0..2^scale` that scatters vertex numbers.
struct Relabel {
    mask: u64,
    k1: u64,
    k2: u64,
    shift: u32,
}

impl Relabel {
    fn new(spec: &Spec) -> Relabel {
        let mut s = spec.seed ^ 0x6a09_e667_f3bc_c908;
        Relabel {
            mask: spec.vertices() - 1,
            // Odd multipliers: multiplication modulo 2^scale is a bijection.
            k1: crate::bench::rng::splitmix64(&mut s) | 1,
            k2: crate::bench::rng::splitmix64(&mut s) | 1,
            shift: (spec.scale / 2).max(1),
        }
    }

    #[inline]
    fn apply(&self, v: u64) -> u64 {
        let mut x = v.wrapping_mul(self.k1) & self.mask;
        // `x ^ (x >> s)` is a bijection too (invertible from the top bits down).
        x ^= x >> self.shift;
        x.wrapping_mul(self.k2) & self.mask
    }
}

/// Call `f(u, v)` for every edge of block `b` (self-loops included).
fn block_edges(spec: &Spec, relabel: &Relabel, b: u64, mut f: impl FnMut(u32, u32)) {
    let mut rng = Rng::new(mix64(
        spec.seed
            .wrapping_add(b.wrapping_mul(0x9e37_79b9_7f4a_7c15)),
    ));
    let end = ((b + 1) * BLOCK).min(spec.edges());
    for _ in b * BLOCK..end {
        let (mut u, mut v) = (0u64, 0u64);
        let mut bits = 0u64;
        let mut left = 0u32;
        for _ in 0..spec.scale {
            if left == 0 {
                bits = rng.next_u64();
                left = 4;
            }
            let r = (bits & 0xffff) as u32;
            bits >>= 16;
            left -= 1;
            let (bu, bv) = if r < T_A {
                (0, 0)
            } else if r < T_AB {
                (0, 1)
            } else if r < T_ABC {
                (1, 0)
            } else {
                (1, 1)
            };
            u = u << 1 | bu;
            v = v << 1 | bv;
        }
        f(relabel.apply(u) as u32, relabel.apply(v) as u32);
    }
}

/// Run `f(block)` for every block on `threads` threads; `f` returns the
/// work it did (for the progress line `label`).
fn over_blocks(
    spec: &Spec,
    threads: usize,
    label: &str,
    progress: bool,
    f: impl Fn(u64) + Sync,
) -> Result<(), String> {
    let blocks = spec.edges().div_ceil(BLOCK);
    let next = AtomicU64::new(0);
    let done = AtomicU64::new(0);
    let gate = crate::threads::Gate::default();
    std::thread::scope(|s| {
        crate::threads::spawn_all(&gate, s, threads, |_| {
            || loop {
                let b = next.fetch_add(1, Relaxed);
                if b >= blocks || crate::bench::interrupted() {
                    break;
                }
                f(b);
                done.fetch_add(1, Relaxed);
            }
        })?;
        if progress {
            let t0 = Instant::now();
            while done.load(Relaxed) < blocks && !crate::bench::interrupted() {
                std::thread::sleep(std::time::Duration::from_millis(250));
                let d = done.load(Relaxed);
                say_raw!(
                    "\r\x1b[K{label}: {:>5.1}% of {} edges, {:.0} s",
                    100.0 * d as f64 / blocks as f64,
                    spec.edges(),
                    t0.elapsed().as_secs_f64()
                );
            }
        }
        Ok::<_, String>(())
    })?;
    if progress {
        say_raw!("\r\x1b[K");
    }
    if crate::bench::interrupted() {
        return Err(format!("{label}: interrupted"));
    }
    Ok(())
}

/// A graph in memory, in CSR form.
pub(crate) struct Csr {
    pub(crate) offsets: Vec<u64>,
    pub(crate) targets: Vec<u32>,
}

/// Generate the graph of `spec` in memory on `threads` threads.
pub(crate) fn generate(spec: &Spec, threads: usize, progress: bool) -> Result<Csr, String> {
    if spec.scale == 0 || spec.scale > 31 || spec.edge_factor == 0 {
        return Err(format!(
            "an R-MAT graph needs a scale of 1 to 31 and an edge factor of at least 1 (got {} and {})",
            spec.scale, spec.edge_factor
        ));
    }
    let n = spec.vertices() as usize;
    let relabel = Relabel::new(spec);
    // Pass 1: degrees.
    let degree: Vec<AtomicU32> = (0..n).map(|_| AtomicU32::new(0)).collect();
    over_blocks(spec, threads, "graph: degrees", progress, |b| {
        block_edges(spec, &relabel, b, |u, v| {
            if u != v {
                degree[u as usize].fetch_add(1, Relaxed);
                degree[v as usize].fetch_add(1, Relaxed);
            }
        })
    })?;
    let mut offsets = Vec::with_capacity(n + 1);
    let mut at = 0u64;
    offsets.push(0);
    for d in &degree {
        at += d.load(Relaxed) as u64;
        offsets.push(at);
    }
    drop(degree);
    if at > u32::MAX as u64 * 4 {
        return Err(format!("{at} edge entries are too many for this generator"));
    }
    // Pass 2: the same edges again, each endpoint's entry at its cursor.
    let cursor: Vec<AtomicU64> = offsets[..n].iter().map(|&o| AtomicU64::new(o)).collect();
    let slots: Vec<AtomicU32> = (0..at).map(|_| AtomicU32::new(0)).collect();
    over_blocks(spec, threads, "graph: edges", progress, |b| {
        block_edges(spec, &relabel, b, |u, v| {
            if u != v {
                let i = cursor[u as usize].fetch_add(1, Relaxed);
                slots[i as usize].store(v, Relaxed);
                let j = cursor[v as usize].fetch_add(1, Relaxed);
                slots[j as usize].store(u, Relaxed);
            }
        })
    })?;
    drop(cursor);
    let mut targets: Vec<u32> = slots.into_iter().map(AtomicU32::into_inner).collect();
    // The cursors' races only ordered each list differently: sort them.
    sort_lists(&offsets, &mut targets, threads)?;
    Ok(Csr { offsets, targets })
}

/// Sort every vertex's list of neighbours, on `threads` threads.
fn sort_lists(offsets: &[u64], targets: &mut [u32], threads: usize) -> Result<(), String> {
    let n = offsets.len() - 1;
    let per = n.div_ceil(threads.max(1)).max(1);
    let mut rest = targets;
    let mut parts = Vec::new();
    let mut lo = 0usize;
    while lo < n {
        let hi = (lo + per).min(n);
        let len = (offsets[hi] - offsets[lo]) as usize;
        let (mine, tail) = rest.split_at_mut(len);
        parts.push((lo, hi, mine));
        rest = tail;
        lo = hi;
    }
    let gate = crate::threads::Gate::default();
    std::thread::scope(|s| {
        let start = gate.starting();
        for (lo, hi, part) in parts {
            start.spawn(s, move || {
                let base = offsets[lo];
                for v in lo..hi {
                    let (a, b) = (
                        (offsets[v] - base) as usize,
                        (offsets[v + 1] - base) as usize,
                    );
                    part[a..b].sort_unstable();
                }
            })?;
        }
        start.open();
        Ok(())
    })
}

/// Write `csr` as the files of `spec` in `cs` (replacing them), then sync.
pub(crate) fn store(
    cs: &CachedStore,
    spec: &Spec,
    csr: &Csr,
    progress: bool,
) -> Result<(), String> {
    let err = |e: setcache::Error| format!("graph: writing {}: {e}", spec.name());
    let name = spec.name();
    for ext in ["offsets", "targets"] {
        let _ = cs.delete(&format!("{name}.{ext}"));
    }
    let off = PagedArray::<u64>::create(
        cs,
        &format!("{name}.offsets"),
        csr.offsets.len() as u64,
        LayoutKind::Stripe,
    )
    .map_err(err)?;
    let tgt = PagedArray::<u32>::create(
        cs,
        &format!("{name}.targets"),
        csr.targets.len() as u64,
        LayoutKind::Stripe,
    )
    .map_err(err)?;
    let total = (csr.offsets.len() * 8 + csr.targets.len() * 4) as u64;
    let written = AtomicUsize::new(0);
    let t0 = Instant::now();
    let note = |bytes: usize| {
        let w = written.fetch_add(bytes, Relaxed) + bytes;
        if progress {
            say_raw!(
                "\r\x1b[Kgraph: writing {:>5.1}% of {} MiB, {:.0} s",
                100.0 * w as f64 / total as f64,
                total >> 20,
                t0.elapsed().as_secs_f64()
            );
        }
    };
    const CHUNK: usize = 1 << 20;
    // The last offset goes last, once all else is durable: a graph cut short
    // (a failure, a crash, Ctrl-C) has a last offset of zero and is made
    // again by the next run instead of read.
    let (last, head) = csr
        .offsets
        .split_last()
        .expect("offsets of at least one vertex");
    let stop = || {
        crate::bench::interrupted()
            .then(|| format!("graph: writing {}: interrupted", spec.name()))
            .map_or(Ok(()), Err)
    };
    for (k, c) in head.chunks(CHUNK).enumerate() {
        stop()?;
        off.write_from((k * CHUNK) as u64, c).map_err(err)?;
        note(c.len() * 8);
    }
    for (k, c) in csr.targets.chunks(CHUNK).enumerate() {
        stop()?;
        tgt.write_from((k * CHUNK) as u64, c).map_err(err)?;
        note(c.len() * 4);
    }
    tgt.sync().map_err(err)?;
    off.sync().map_err(err)?;
    off.write_from(head.len() as u64, std::slice::from_ref(last))
        .map_err(err)?;
    note(8);
    off.sync().map_err(err)?;
    if progress {
        say_raw!("\r\x1b[K");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relabelling_is_a_bijection() {
        for scale in [1, 2, 5, 10, 13] {
            let spec = Spec {
                scale,
                edge_factor: 1,
                seed: 7,
            };
            let r = Relabel::new(&spec);
            let mut seen = vec![false; spec.vertices() as usize];
            for v in 0..spec.vertices() {
                let w = r.apply(v) as usize;
                assert!(!seen[w], "scale {scale}: {v} maps onto a taken {w}");
                seen[w] = true;
            }
        }
    }

    #[test]
    fn graphs_are_the_same_for_a_seed_whatever_the_threads() {
        let spec = Spec {
            scale: 12,
            edge_factor: 16,
            seed: 3,
        };
        let a = generate(&spec, 1, false).unwrap();
        let b = generate(&spec, 3, false).unwrap();
        assert_eq!(a.offsets, b.offsets);
        assert_eq!(a.targets, b.targets);
        let c = generate(&Spec { seed: 4, ..spec }, 2, false).unwrap();
        assert_ne!(a.targets, c.targets);
        // Undirected, sorted, no self-loops, and skewed as R-MAT is.
        let n = spec.vertices() as usize;
        let mut max = 0;
        for v in 0..n {
            let l = &a.targets[a.offsets[v] as usize..a.offsets[v + 1] as usize];
            assert!(l.windows(2).all(|w| w[0] <= w[1]));
            assert!(!l.contains(&(v as u32)));
            max = max.max(l.len());
            for &t in l.iter().take(3) {
                let back =
                    &a.targets[a.offsets[t as usize] as usize..a.offsets[t as usize + 1] as usize];
                assert!(back.binary_search(&(v as u32)).is_ok());
            }
        }
        let mean = a.targets.len() / n;
        assert!(max > 20 * mean, "largest degree {max}, mean {mean}");
        assert!(a.targets.len() as u64 > spec.edges() * 19 / 10);
    }
}
