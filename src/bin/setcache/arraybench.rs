//! `setcache arraybench`: a `PagedArray<u64>` beside a `Vec<u64>` in memory.
//!
//! Both hold the same elements (element `i` is `i`). Each workload runs on
//! both in turns, round by round, on `--threads` threads (each with its own
//! reader, kept from round to round, and its own indices):
//!
//! * `seq`: the sum of every element in order, each thread its share of the
//!   array (the array through `ArrayReader::for_each_run`: each page's
//!   elements read in place, in the pinned frame);
//! * `seq-chunk`: the same sum through `ArrayReader::for_each_chunk`, which
//!   copies each page's elements into the reader's buffer first (not in the
//!   default list);
//! * `seq-get`: the same sum through `ArrayReader::get`, element by element
//!   (not in the default list);
//! * `zipf`: reads at Zipf 0.99 ranks, scrambled over the array as `bench
//!   --dist zipf` scrambles them (`ArrayReader::get` per element);
//! * `uniform`: reads at uniformly random indices;
//! * `pages`: a random 4 KiB run's 512 elements, read one by one in order
//!   (`ArrayReader::get` each);
//! * `pages-run`: the same runs read in place through
//!   `ArrayReader::for_each_run` (an atomic load per element);
//! * `zipf-batch`, `uniform-batch`: the reads of `zipf` and `uniform`, 64 at
//!   a time through `ArrayReader::get_many` (the vector reads them as before:
//!   its loads overlap anyway, the indices being known);
//! * `scattered`: no array at all, the floor for any cache whose frames
//!   (of `--page-size`) lie anywhere in memory: the vector summed in order
//!   (the vector column) and in pieces of a page's elements taken in a
//!   shuffled order, the next piece's first lines prefetched (the array
//!   column);
//! * `updates`: writes of element `i` (its own value again) at uniformly
//!   random indices (`ArrayReader::set`: an atomic store through the
//!   reader's translation entry; the vector's elements as atomic words,
//!   stored with relaxed order, so that threads may share them).
//!
//! Indices are drawn before the timed part, the same for both. The array's
//! cache holds the whole array with room to spare unless `--cache-size`
//! says otherwise (out of core: every run then starts with a cold cache);
//! the report gives element operations per second (all threads), the median
//! per-round ratio of the array to the vector, the share of the array's
//! reads its translation caches served (and each thread's), and the cache's
//! misses during the workload's array rounds.

use std::path::Path;
use std::sync::Barrier;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use clap::Args;
use setcache::{
    ArrayReader, CacheOptions, CachedStore, LayoutKind, PagedArray, Store, StoreOptions,
    TranslationStats,
};

use crate::bench::median;
use crate::bench::rng::Rng;
use crate::bench::size::{format_size, parse_size};
use crate::bench::zipf::Zipf;
use crate::bench::{install_sigint, interrupted};

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
    /// Cache size [default: one and a half times the array's size: all
    /// cached, with room for the sets that draw more than their share]
    #[arg(long)]
    cache_size: Option<String>,
    /// The cache's page size: a power of two from 4k to 1M. Larger pages
    /// put more consecutive elements together in memory (a sequential sum
    /// crosses a frame boundary less often) and give the translation caches
    /// a longer reach; out of core, each miss then reads more.
    #[arg(long, default_value = "4k")]
    page_size: String,
    /// Workloads (comma-separated): seq, seq-chunk (the sum through
    /// `ArrayReader::for_each_chunk`, copied), seq-get (the sum element by
    /// element through `ArrayReader::get`), scattered (the floor of a sum over
    /// frames that lie anywhere: no array), zipf, uniform, pages, pages-run
    /// (the pages' runs through `ArrayReader::for_each_run`), zipf-batch, uniform-batch (the reads of zipf and uniform, 64 at a time
    /// through `ArrayReader::get_many`), updates
    #[arg(
        long,
        default_value = "seq,scattered,zipf,uniform,pages,pages-run,zipf-batch,uniform-batch,updates",
        value_delimiter = ','
    )]
    workload: Vec<String>,
    /// Rounds; each runs every workload on the vector and on the array in turns
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Element operations per random workload per round and thread (pages:
    /// reads of 512)
    #[arg(long, default_value_t = 4_000_000)]
    ops: usize,
    /// Threads, each with its own reader and indices
    #[arg(long, default_value_t = 1)]
    threads: usize,
}

const WORKLOADS: [&str; 11] = [
    "seq",
    "seq-chunk",
    "seq-get",
    "zipf",
    "uniform",
    "pages",
    "pages-run",
    "zipf-batch",
    "uniform-batch",
    "updates",
    "scattered",
];

/// The first elements of the pieces of `piece` in `part`, in a shuffled
/// order.
fn shuffled_pieces(part: std::ops::Range<u64>, piece: u64, seed: u64) -> Vec<u64> {
    let mut p: Vec<u64> = part.step_by(piece as usize).collect();
    let mut rng = Rng::new(seed);
    for i in (1..p.len()).rev() {
        p.swap(i, rng.below(i as u64 + 1) as usize);
    }
    p
}

/// Ask for the cache line at `p`.
#[inline]
fn prefetch(p: *const u64) {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: a prefetch never faults and reads nothing into the program.
        unsafe { std::arch::x86_64::_mm_prefetch(p.cast::<i8>(), std::arch::x86_64::_MM_HINT_T0) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

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
        "uniform" | "updates" => (0..ops).map(|_| rng.below(n)).collect(),
        "pages" | "pages-run" => (0..ops / 512).map(|_| rng.below(n / 512) * 512).collect(),
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
                "unknown --workload {w:?}: expected seq, seq-chunk, seq-get, zipf, uniform, pages, pages-run, zipf-batch, uniform-batch, updates or scattered"
            ));
        }
    }
    if a.rounds == 0 {
        return Err("--rounds 0: it must be at least 1".into());
    }
    if a.ops < 512 {
        return Err(format!("--ops {}: it must be at least 512", a.ops));
    }
    // A bound far above any real run's, below what would never end.
    const MAX_ROUNDS: usize = 100_000;
    if a.rounds > MAX_ROUNDS {
        return Err(format!(
            "--rounds {}: at most {MAX_ROUNDS} (each round runs every workload)",
            a.rounds
        ));
    }
    if a.threads == 0 || a.threads > 1024 {
        return Err(format!("--threads {}: give 1 to 1024", a.threads));
    }
    let page = parse_size(&a.page_size)?;
    if !(4096..=1 << 20).contains(&page) || !page.is_power_of_two() {
        return Err(format!(
            "--page-size {}: give a power of two from 4k to 1M",
            a.page_size
        ));
    }
    let cache = match &a.cache_size {
        Some(s) => parse_size(s)?,
        None => bytes + bytes / 2,
    };
    <setcache::PageCache>::check(&CacheOptions {
        size: usize::try_from(cache).unwrap_or(usize::MAX),
        page_size: page as usize,
        ..CacheOptions::default()
    })
    .map_err(|e| match &a.cache_size {
        Some(s) => format!("--cache-size {s}: {e}"),
        None => format!("the array's cache of {cache} bytes (no --cache-size): {e}"),
    })?;
    // What the run holds at once: the vector, the cache with its staging
    // area, one workload's indices and an array reader's translation tables
    // for every thread (checked before anything is made).
    let per_thread = (a.ops as u64)
        .saturating_mul(8)
        .saturating_add(setcache::reader_table_bytes(
            cache.div_ceil(page),
            bytes.div_ceil(page),
        ));
    let indices = per_thread.saturating_mul(a.threads as u64);
    let staging = CachedStore::staging_bytes(usize::try_from(cache).unwrap_or(usize::MAX)) as u64;
    let need = bytes
        .saturating_add(cache)
        .saturating_add(staging)
        .saturating_add(indices);
    let limit = setcache::hitsim::memory_limit();
    if need > limit {
        return Err(format!(
            "--size {} (the vector, {}), a cache of {} (and its staging area) and --ops {} indices and the translation tables for each of {} threads ({}) need {}, more than the {} this machine allows",
            a.size,
            format_size(bytes),
            format_size(cache),
            a.ops,
            a.threads,
            format_size(indices),
            format_size(need),
            format_size(limit)
        ));
    }
    let n = bytes / 8;
    // Ctrl-C ends the run between steps, and the files it made are taken
    // away as after any other ending.
    install_sigint();
    let tmp;
    let dir = match &a.dir {
        Some(d) => d.clone(),
        None => {
            tmp = std::env::temp_dir().join(format!("setcache-arraybench-{}", std::process::id()));
            tmp.clone()
        }
    };
    let root = dir.join("arraydev0");
    if dir.exists() && !dir.is_dir() {
        return Err(format!("--dir {}: not a directory", dir.display()));
    }
    // A --dir this run makes goes again at its end (if nothing else is in
    // it), with the directories above it that it made too, deepest first.
    let dirs_made: Vec<&Path> = dir.ancestors().take_while(|d| !d.exists()).collect();
    let unmake = || {
        for d in &dirs_made {
            if std::fs::remove_dir(d).is_err() {
                break;
            }
        }
    };
    std::fs::create_dir_all(&dir).map_err(|e| format!("--dir {}: {e}", dir.display()))?;
    let made = match claim_root(&dir, &root) {
        Ok(made) => made,
        Err(e) => {
            unmake();
            return Err(e);
        }
    };
    let err = |e: setcache::Error| format!("arraybench: {e}");
    let store = match Store::open(&[&root], StoreOptions::default()) {
        Ok(s) => s,
        Err(e) => {
            // Another run may hold it: leave it as it is.
            if made {
                let _ = std::fs::remove_dir(&root);
            }
            if a.dir.is_none() {
                let _ = std::fs::remove_dir_all(&dir);
            } else {
                unmake();
            }
            return Err(err(e));
        }
    };
    // The store is the bench's now: its array is marked as the bench's, so
    // that a run killed before it cleared up leaves files the next takes.
    let mark = root.join(MARK);
    // Durable before the array is made: after a crash, an array without its
    // mark would be taken for the user's.
    let marked = std::fs::File::create(&mark)
        .and_then(|f| f.sync_all())
        .and_then(|()| std::fs::File::open(&root)?.sync_all());
    let result = match marked {
        Ok(()) => measure(&a, store, n, cache, page),
        Err(e) => {
            drop(store);
            Err(format!("{}: {e}", mark.display()))
        }
    };
    // The store is closed: take away what it made, and the directory if
    // nothing else is left in it.
    if let Ok(entries) = std::fs::read_dir(&root) {
        for entry in entries.flatten() {
            let name = entry.file_name();
            if name != ".setcache-lock" && name != MARK && ours(&name.to_string_lossy()) {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
    // The mark last: stopped before, the next run still takes what is left.
    let _ = std::fs::remove_file(&mark);
    // The lock file under its lock: a store another run opened meanwhile
    // keeps it (its other files are not safe from this sweep: two runs on one
    // directory at once are not supported).
    let _ = Store::remove_lock_file(&root);
    let _ = std::fs::remove_dir(&root);
    if a.dir.is_none() {
        let _ = std::fs::remove_dir_all(&dir);
    } else {
        unmake();
    }
    result
}

/// The file that marks a store's directory as one an arraybench made: only
/// there are `array.scf` and the store's files an earlier run's, killed
/// before it cleared up (a store the user made there with `cp` holds the
/// same names, and is theirs).
const MARK: &str = ".arraybench";

/// Makes the store's directory `root` under `dir` (true), or takes an
/// existing one that holds only what an arraybench makes (false): the array's
/// files count as its only where the bench's mark is (the store's own files,
/// its lock and intent record, are any store's). Anything else there is the
/// user's, and is neither used nor removed.
fn claim_root(dir: &Path, root: &Path) -> Result<bool, String> {
    match std::fs::create_dir(root) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let names: Vec<String> = std::fs::read_dir(root)
                .map_err(|e| format!("{}: {e}", root.display()))?
                .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
                .collect::<Result<_, _>>()
                .map_err(|e| format!("{}: {e}", root.display()))?;
            let marked = names.iter().any(|n| n == MARK);
            let data = |n: &str| matches!(n, "array.scf" | ".array.scf.new");
            if let Some(n) = names.iter().find(|n| !ours(n) || (data(n) && !marked)) {
                return Err(format!(
                    "--dir {}: {} holds {n:?}, which arraybench did not make: remove it or choose another --dir",
                    dir.display(),
                    root.display(),
                ));
            }
            Ok(false)
        }
        Err(e) => Err(format!("{}: {e}", root.display())),
    }
}

/// Whether a name in the store's directory is one an arraybench's store
/// makes: the array's backing file (also while it is being made), the
/// store's lock, intent record and probe.
fn ours(name: &str) -> bool {
    matches!(
        name,
        "array.scf" | ".array.scf.new" | ".setcache-lock" | ".setcache-intent" | MARK
    ) || name.starts_with(".setcache-probe-")
}

fn measure(a: &ArrayArgs, store: Store, n: u64, cache: u64, page: u64) -> Result<(), String> {
    let err = |e: setcache::Error| format!("arraybench: {e}");
    let _ = store.delete("array");
    let cs = CachedStore::new(
        store,
        CacheOptions {
            size: cache as usize,
            page_size: page as usize,
            ..CacheOptions::default()
        },
    )
    .map_err(err)?;
    let arr = PagedArray::<u64>::create(&cs, "array", n, LayoutKind::Stripe).map_err(err)?;
    // Atomic words, so that the `updates` workload's threads may store into
    // them; the other workloads read them as plain words (`words`).
    let v: Vec<AtomicU64> = (0..n).map(AtomicU64::new).collect();
    for (k, chunk) in words(&v).chunks(1 << 20).enumerate() {
        if interrupted() {
            return Err(STOPPED.into());
        }
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
    // Warm: every page read once, in order.
    let mut s = 0u64;
    let mut r = arr.reader();
    for from in (0..n).step_by(1 << 20) {
        if interrupted() {
            return Err(STOPPED.into());
        }
        r.for_each_chunk(from..n.min(from + (1 << 20)), |_, xs| {
            s = xs.iter().fold(s, |s, &x| s.wrapping_add(x))
        })
        .map_err(err)?;
    }
    drop(r);
    std::hint::black_box(s);
    out!(
        "{:<13} {:>14} {:>14} {:>9} {:>8} {:>9}  rounds (array / vector)",
        "workload",
        "vector /s",
        "array /s",
        "x vector",
        "tc hits",
        "misses"
    );
    let piece = page / 8;
    for w in &a.workload {
        if interrupted() {
            return Err(STOPPED.into());
        }
        let t = a.threads;
        let idx: Vec<Vec<u64>> = (0..t)
            .map(|k| {
                let seed = 0x5eed ^ n ^ ((k as u64) << 32);
                if w == "scattered" {
                    shuffled_pieces(share(n, t, k), piece, seed)
                } else {
                    indices(w, n, a.ops, seed)
                }
            })
            .collect();
        let misses = cs.cache().stats().misses;
        let (times, stats) = rounds(&arr, &v, w, &idx, piece, a.rounds)?;
        if interrupted() {
            return Err(STOPPED.into());
        }
        let misses = cs.cache().stats().misses - misses;
        let ops: u64 = (0..t).map(|k| ops_of(w, n, t, k, &idx[k])).sum();
        let mut vr: Vec<f64> = times.iter().map(|&(vt, _)| ops as f64 / vt).collect();
        let mut ar: Vec<f64> = times.iter().map(|&(_, at)| ops as f64 / at).collect();
        let mut ratios: Vec<f64> = times.iter().map(|&(vt, at)| vt / at).collect();
        let rounds: Vec<String> = ratios.iter().map(|x| format!("{x:.3}")).collect();
        let all = stats
            .iter()
            .fold(TranslationStats::default(), |a, s| TranslationStats {
                direct: a.direct + s.direct,
                private: a.private + s.private,
                shared: a.shared + s.shared,
                slow: a.slow + s.slow,
            });
        let share = |s: &TranslationStats| {
            if s.direct + s.private + s.shared + s.slow == 0 {
                "-".to_string()
            } else {
                format!("{:.1}%", 100.0 * s.hit_ratio())
            }
        };
        out!(
            "{:<13} {:>14.0} {:>14.0} {:>9.3} {:>8} {:>9}  {}",
            w,
            median(&mut vr).unwrap_or(0.0),
            median(&mut ar).unwrap_or(0.0),
            median(&mut ratios).unwrap_or(0.0),
            share(&all),
            misses,
            rounds.join(" ")
        );
        if t > 1 && all != TranslationStats::default() {
            let each: Vec<String> = stats.iter().map(share).collect();
            out!("{:<13} tc hits per thread: {}", "", each.join(" "));
        }
    }
    Ok(())
}

/// Element operations thread `k` of `t` does in a round of `w`.
fn ops_of(w: &str, n: u64, t: usize, k: usize, idx: &[u64]) -> u64 {
    match w {
        "seq" | "seq-chunk" | "seq-get" | "scattered" => share(n, t, k).count() as u64,
        "pages" | "pages-run" => idx.len() as u64 * 512,
        _ => idx.len() as u64,
    }
}

/// Thread `k`'s share of `0..n` for `t` threads: consecutive elements, a
/// whole number of pages of `u64` each but the last.
fn share(n: u64, t: usize, k: usize) -> std::ops::Range<u64> {
    let per = n.div_ceil(t as u64).div_ceil(512) * 512;
    (per * k as u64).min(n)..(per * (k as u64 + 1)).min(n)
}

/// Run `rounds` rounds of workload `w`, the vector then the array on
/// `idx.len()` threads at once: each round's (vector, array) seconds, and
/// each thread's translation statistics over its array rounds.
#[allow(clippy::type_complexity)]
fn rounds(
    arr: &PagedArray<u64>,
    v: &[AtomicU64],
    w: &str,
    idx: &[Vec<u64>],
    piece: u64,
    rounds: usize,
) -> Result<(Vec<(f64, f64)>, Vec<TranslationStats>), String> {
    let t = idx.len();
    let n = arr.len();
    let gate = Barrier::new(t + 1);
    // Whether the round about to start is skipped (Ctrl-C): set by the
    // timing thread before the round's first barrier, read by every thread
    // after it, so that all leave at the same round and none waits alone.
    let stop = AtomicBool::new(false);
    let start = crate::threads::Gate::default();
    std::thread::scope(|sc| {
        let hs = crate::threads::spawn_all(&start, sc, t, |k| {
            let (gate, stop, idx) = (&gate, &stop, &idx[k]);
            move || -> setcache::Result<TranslationStats> {
                let mut r = arr.reader();
                let before = r.stats();
                let mut failed = None;
                for _ in 0..rounds {
                    gate.wait();
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    run_vec(w, v, share(n, t, k), idx);
                    gate.wait();
                    gate.wait();
                    if failed.is_none()
                        && let Err(e) = run_array(w, &mut r, v, share(n, t, k), idx, piece)
                    {
                        failed = Some(e);
                    }
                    gate.wait();
                }
                if let Some(e) = failed {
                    return Err(e);
                }
                let after = r.stats();
                Ok(TranslationStats {
                    direct: after.direct - before.direct,
                    private: after.private - before.private,
                    shared: after.shared - before.shared,
                    slow: after.slow - before.slow,
                })
            }
        })?;
        let mut times = Vec::new();
        for _ in 0..rounds {
            stop.store(interrupted(), Ordering::Relaxed);
            gate.wait();
            if stop.load(Ordering::Relaxed) {
                break;
            }
            let t0 = Instant::now();
            gate.wait();
            let vt = t0.elapsed().as_secs_f64();
            gate.wait();
            let t0 = Instant::now();
            gate.wait();
            times.push((vt, t0.elapsed().as_secs_f64()));
        }
        let stats = hs
            .into_iter()
            .map(|h| crate::threads::ran(h.join().unwrap_or_else(|p| std::panic::resume_unwind(p))))
            .collect::<setcache::Result<Vec<_>>>()
            .map_err(|e| format!("arraybench: {e}"))?;
        Ok((times, stats))
    })
}

/// What a run stopped by Ctrl-C returns.
const STOPPED: &str = "interrupted";

/// The vector as plain words, for a workload that only reads it.
fn words(v: &[AtomicU64]) -> &[u64] {
    // SAFETY: `AtomicU64` has the size and alignment of `u64` on x86-64, and no thread stores into the vector while a reading workload (one at a time) holds this view.
    unsafe { &*(v as *const [AtomicU64] as *const [u64]) }
}

/// One thread's part of a round of `w` on the vector (`part`: its share
/// of a sequential sum).
fn run_vec(w: &str, atomics: &[AtomicU64], part: std::ops::Range<u64>, idx: &[u64]) {
    if w == "updates" {
        for &i in idx {
            atomics[i as usize].store(i, Ordering::Relaxed);
        }
        return;
    }
    let v = words(atomics);
    let mut s = 0u64;
    match w {
        "seq" | "seq-chunk" | "seq-get" | "scattered" => {
            let part = &v[part.start as usize..part.end as usize];
            s = part.iter().fold(0u64, |s, &x| s.wrapping_add(x));
        }
        "pages" | "pages-run" => {
            for &p in idx {
                for x in &v[p as usize..p as usize + 512] {
                    s = s.wrapping_add(*x);
                }
            }
        }
        _ => {
            for &i in idx {
                s = s.wrapping_add(v[i as usize]);
            }
        }
    }
    std::hint::black_box(s);
}

/// The same on the array, through this thread's reader `r`.
fn run_array(
    w: &str,
    r: &mut ArrayReader<'_, u64>,
    v: &[AtomicU64],
    part: std::ops::Range<u64>,
    idx: &[u64],
    piece: u64,
) -> setcache::Result<()> {
    let mut s = 0u64;
    match w {
        "scattered" => {
            let v = words(v);
            for (k, &p) in idx.iter().enumerate() {
                if let Some(&q) = idx.get(k + 1) {
                    for line in 0..8 {
                        prefetch(v[q as usize + line * 8..].as_ptr());
                    }
                }
                s = v[p as usize..(p + piece).min(part.end) as usize]
                    .iter()
                    .fold(s, |s, &x| s.wrapping_add(x));
            }
        }
        "seq" => {
            r.for_each_run(part, |_, run| {
                s = run.iter().fold(s, |s, x| s.wrapping_add(x))
            })?;
        }
        "seq-chunk" => {
            r.for_each_chunk(part, |_, xs| {
                s = xs.iter().fold(s, |s, &x| s.wrapping_add(x))
            })?;
        }
        "seq-get" => {
            for i in part {
                s = s.wrapping_add(r.get(i)?);
            }
        }
        "pages-run" => {
            for &p in idx {
                r.for_each_run(p..p + 512, |_, run| {
                    s = run.iter().fold(s, |s, x| s.wrapping_add(x))
                })?;
            }
        }
        "pages" => {
            for &p in idx {
                for i in p..p + 512 {
                    s = s.wrapping_add(r.get(i)?);
                }
            }
        }
        "updates" => {
            for &i in idx {
                r.set(i, i)?;
            }
        }
        w if w.ends_with("-batch") => {
            let mut out = [0u64; 64];
            for ids in idx.chunks(64) {
                let out = &mut out[..ids.len()];
                r.get_many(ids, out)?;
                s = out.iter().fold(s, |s, &x| s.wrapping_add(x));
            }
        }
        _ => {
            for &i in idx {
                s = s.wrapping_add(r.get(i)?);
            }
        }
    }
    std::hint::black_box(s);
    Ok(())
}
