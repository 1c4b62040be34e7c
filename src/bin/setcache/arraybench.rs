//! `setcache arraybench`: a `PagedArray<u64>` beside a `Vec<u64>` in memory.
//!
//! Both hold the same elements (element `i` is `i`). Each workload runs on
//! both in turns, round by round, on one thread per `--threads`:
//!
//! * `seq`: the sum of every element in order (the array through
//!   `ArrayReader::for_each_chunk`, page slices in place);
//! * `zipf`: reads at Zipf 0.99 ranks, scrambled over the array as `bench
//!   --dist zipf` scrambles them (`ArrayReader::get` per element);
//! * `uniform`: reads at uniformly random indices;
//! * `pages`: a random page's 512 elements, read one by one in order;
//! * `zipf-batch`, `uniform-batch`: the reads of `zipf` and `uniform`, 64 at
//!   a time through `ArrayReader::get_many` (the vector reads them as before:
//!   its loads overlap anyway, the indices being known).
//!
//! Indices are drawn before the timed part, the same for both. The array's
//! cache holds the whole array unless `--cache-size` says otherwise (out of
//! core: every run then starts with a cold cache); the report gives element
//! reads per second, the median per-round ratio of the array to the vector,
//! and the share of the array's reads its translation caches served.

use std::time::Instant;

use clap::Args;
use setcache::{CacheOptions, CachedStore, LayoutKind, PagedArray, Store, StoreOptions};

use crate::bench::rng::Rng;
use crate::bench::size::{format_size, parse_size};
use crate::bench::zipf::Zipf;

/// A paged array beside a vector in memory.
#[derive(Args, Debug)]
pub(crate) struct ArrayArgs {
    /// Directory for the array's device and file [default: a fresh temporary
    /// directory, removed at the end]
    #[arg(long)]
    dir: Option<std::path::PathBuf>,
    /// Bytes of `u64` elements (a power of two, at least 1M)
    #[arg(long, default_value = "1G")]
    size: String,
    /// Cache size [default: the array's size and an eighth more: all cached]
    #[arg(long)]
    cache_size: Option<String>,
    /// Workloads (comma-separated): seq, zipf, uniform, pages, and
    /// zipf-batch, uniform-batch (the same reads, 64 at a time through
    /// `ArrayReader::get_many`)
    #[arg(
        long,
        default_value = "seq,zipf,uniform,pages,zipf-batch,uniform-batch",
        value_delimiter = ','
    )]
    workload: Vec<String>,
    /// Rounds; each runs every workload on the vector and on the array in turns
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Element reads per random workload per round (pages: reads of 512)
    #[arg(long, default_value_t = 4_000_000)]
    ops: usize,
}

const WORKLOADS: [&str; 6] = [
    "seq",
    "zipf",
    "uniform",
    "pages",
    "zipf-batch",
    "uniform-batch",
];

/// One workload's indices (for `pages`, first elements of pages).
fn indices(w: &str, n: u64, ops: usize, seed: u64) -> Vec<u64> {
    let mut rng = Rng::new(seed);
    match w.trim_end_matches("-batch") {
        "zipf" => {
            let z = Zipf::new(n, 0.99);
            // A bijection of 0..n (n a power of two): hot ranks spread out.
            (0..ops)
                .map(|_| z.sample(&mut rng).wrapping_mul(0x9e37_79b9_7f4a_7c15 | 1) & (n - 1))
                .collect()
        }
        "uniform" => (0..ops).map(|_| rng.below(n)).collect(),
        "pages" => (0..ops / 512).map(|_| rng.below(n / 512) * 512).collect(),
        _ => Vec::new(),
    }
}

pub(crate) fn run(a: ArrayArgs) -> Result<(), String> {
    let bytes = parse_size(&a.size)?;
    if bytes < 1 << 20 || !bytes.is_power_of_two() {
        return Err(format!(
            "--size {}: give a power of two of at least 1M",
            a.size
        ));
    }
    for w in &a.workload {
        if !WORKLOADS.contains(&w.as_str()) {
            return Err(format!(
                "unknown --workload {w:?}: expected seq, zipf, uniform, pages, zipf-batch or uniform-batch"
            ));
        }
    }
    if a.rounds == 0 || a.ops < 512 {
        return Err("--rounds must be at least 1 and --ops at least 512".into());
    }
    let cache = match &a.cache_size {
        Some(s) => parse_size(s)?,
        None => bytes + bytes / 8,
    };
    let n = bytes / 8;
    let tmp;
    let dir = match &a.dir {
        Some(d) => d.clone(),
        None => {
            tmp = std::env::temp_dir().join(format!("setcache-arraybench-{}", std::process::id()));
            tmp.clone()
        }
    };
    let root = dir.join("arraydev0");
    std::fs::create_dir_all(&root).map_err(|e| format!("{}: {e}", root.display()))?;
    let result = measure(&a, &root, n, cache);
    let _ = std::fs::remove_dir_all(&root);
    if a.dir.is_none() {
        let _ = std::fs::remove_dir_all(&dir);
    }
    result
}

fn measure(a: &ArrayArgs, root: &std::path::Path, n: u64, cache: u64) -> Result<(), String> {
    let err = |e: setcache::Error| format!("arraybench: {e}");
    let store = Store::open(&[root], StoreOptions::default()).map_err(err)?;
    let _ = store.delete("array");
    let cs = CachedStore::new(
        store,
        CacheOptions {
            size: cache as usize,
            ..CacheOptions::default()
        },
    )
    .map_err(err)?;
    let arr = PagedArray::<u64>::create(&cs, "array", n, LayoutKind::Stripe).map_err(err)?;
    let v: Vec<u64> = (0..n).collect();
    for (k, chunk) in v.chunks(1 << 20).enumerate() {
        arr.write_from((k << 20) as u64, chunk).map_err(err)?;
    }
    arr.sync().map_err(err)?;
    say!(
        "arraybench: {} elements ({}), cache {}, {} rounds",
        n,
        format_size(n * 8),
        format_size(cache),
        a.rounds
    );
    let mut r = arr.reader();
    // Warm: every page read once, in order.
    let mut s = 0u64;
    r.for_each_chunk(0..n, |_, xs| {
        s = xs.iter().fold(s, |s, &x| s.wrapping_add(x))
    })
    .map_err(err)?;
    std::hint::black_box(s);
    println!(
        "{:<8} {:>14} {:>14} {:>9} {:>10}  rounds (array / vector)",
        "workload", "vector /s", "array /s", "x vector", "tc hits"
    );
    for w in &a.workload {
        let idx = indices(w, n, a.ops, 0x5eed ^ n);
        let mut vr = Vec::new();
        let mut ar = Vec::new();
        let mut ratios = Vec::new();
        let before = r.stats();
        for _ in 0..a.rounds {
            let (vc, vt) = run_vec(w, &v, &idx);
            let (ac, at) = run_array(w, &mut r, n, &idx).map_err(err)?;
            let (vrate, arate) = (vc as f64 / vt, ac as f64 / at);
            vr.push(vrate);
            ar.push(arate);
            ratios.push(arate / vrate);
        }
        let after = r.stats();
        let tc = (after.direct - before.direct) + (after.private - before.private);
        let all = tc + (after.shared - before.shared) + (after.slow - before.slow);
        let hits = if all > 0 {
            format!("{:.1}%", 100.0 * tc as f64 / all as f64)
        } else {
            "-".into()
        };
        let rounds: Vec<String> = ratios.iter().map(|x| format!("{x:.3}")).collect();
        println!(
            "{:<8} {:>14.0} {:>14.0} {:>9.3} {:>10}  {}",
            w,
            median(&mut vr),
            median(&mut ar),
            median(&mut ratios),
            hits,
            rounds.join(" ")
        );
    }
    Ok(())
}

fn median(x: &mut [f64]) -> f64 {
    x.sort_by(|a, b| a.total_cmp(b));
    x[x.len() / 2]
}

/// Element reads done and seconds taken on the vector.
fn run_vec(w: &str, v: &[u64], idx: &[u64]) -> (u64, f64) {
    let t0 = Instant::now();
    let mut s = 0u64;
    let reads = match w {
        "seq" => {
            s = v.iter().fold(0u64, |s, &x| s.wrapping_add(x));
            v.len() as u64
        }
        "pages" => {
            for &p in idx {
                for x in &v[p as usize..p as usize + 512] {
                    s = s.wrapping_add(*x);
                }
            }
            idx.len() as u64 * 512
        }
        _ => {
            for &i in idx {
                s = s.wrapping_add(v[i as usize]);
            }
            idx.len() as u64
        }
    };
    std::hint::black_box(s);
    (reads, t0.elapsed().as_secs_f64())
}

/// The same on the array.
fn run_array(
    w: &str,
    r: &mut setcache::ArrayReader<'_, u64>,
    n: u64,
    idx: &[u64],
) -> setcache::Result<(u64, f64)> {
    let t0 = Instant::now();
    let mut s = 0u64;
    let reads = match w {
        "seq" => {
            r.for_each_chunk(0..n, |_, xs| {
                s = xs.iter().fold(s, |s, &x| s.wrapping_add(x))
            })?;
            n
        }
        "pages" => {
            for &p in idx {
                for i in p..p + 512 {
                    s = s.wrapping_add(r.get(i)?);
                }
            }
            idx.len() as u64 * 512
        }
        w if w.ends_with("-batch") => {
            let mut out = [0u64; 64];
            for ids in idx.chunks(64) {
                let out = &mut out[..ids.len()];
                r.get_many(ids, out)?;
                s = out.iter().fold(s, |s, &x| s.wrapping_add(x));
            }
            idx.len() as u64
        }
        _ => {
            for &i in idx {
                s = s.wrapping_add(r.get(i)?);
            }
            idx.len() as u64
        }
    };
    std::hint::black_box(s);
    Ok((reads, t0.elapsed().as_secs_f64()))
}
