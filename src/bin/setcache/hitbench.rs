//! `setcache hitbench`: the page cache's hit path beside a bare baseline.
//!
//! For each cache size the cache is filled, and the pages that stayed resident
//! become the key set (so every lookup hits). Then, for each read size and
//! thread count, two phases of the same length run on the same frames:
//!
//! * `bare`: pick a random resident page and copy `read` bytes from its frame,
//!   with no cache management at all: the limit set by memory;
//! * `cache`: pick a random resident page and copy the same bytes out of the
//!   cache with `PageCache::try_read` (an optimistic, pin-free read that falls
//!   back to `get` if it declines);
//! * `pinned`: the same through a pinned guard (`PageCache::get`, copy, unpin).
//!
//! Both use the same generator and the same copy, so the ratio is the cost of
//! the cache's bookkeeping.
//!
//! With `--sum` every phase also sums the bytes it read, 8 at a time (work on
//! the copy), and two more run: `bare in place` sums the frame's bytes where
//! they lie, with no copy and no cache management, and `pinned in place` does
//! so through a pinned guard. Their ratio to `bare` is the most that running
//! a computation on the cached page, instead of copying the page out first,
//! can gain on this machine.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Args;
use setcache::{CacheOptions, Lookup, PageCache, PolicyKind};

use crate::bench::compute::block_sum;
use crate::bench::size::{format_size, parse_size};

/// Measure the page cache's hit path beside a bare memcpy baseline.
#[derive(Args, Debug)]
pub(crate) struct HitArgs {
    /// Cache sizes (comma-separated): one that fits the CPU's last-level cache
    /// and one that does not.
    #[arg(long, default_value = "16M,1G", value_delimiter = ',')]
    cache_size: Vec<String>,
    /// Bytes copied per hit (comma-separated), at most the page size.
    #[arg(long, default_value = "128,4096", value_delimiter = ',')]
    read_size: Vec<String>,
    /// Thread counts (comma-separated), each from 1 to 1024.
    #[arg(long, default_value = "1,2,64", value_delimiter = ',')]
    threads: Vec<usize>,
    /// Seconds per phase, from 0.1 to 86400.
    #[arg(long, default_value_t = 2.0)]
    runtime: f64,
    /// Slices each phase's time is cut into (1 to 1000); the phases take
    /// turns slice by slice and the medians are reported.
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Replacement policy of the cache.
    #[arg(long, default_value = "default")]
    policy: String,
    /// Pages per set (4..=32).
    #[arg(long, default_value_t = 12)]
    assoc: usize,
    /// Pick each page independently of the bytes read before (the CPU may then
    /// overlap the memory misses of consecutive reads). By default the next
    /// page depends on the bytes just read, as in a traversal, so each read
    /// pays its own memory latency.
    #[arg(long)]
    independent: bool,
    /// Sum the bytes of each read, and add two phases that sum them in
    /// place (no copy): bare, and through a pinned guard.
    #[arg(long)]
    sum: bool,
}

struct Keys {
    pages: Vec<u64>,
    frames: Vec<usize>,
    /// The metadata block of each page's set.
    sets: Vec<usize>,
    /// Cache lines of one set's metadata.
    set_lines: usize,
}

fn fill(cache: &PageCache) -> Result<Keys, String> {
    let cap = cache.capacity_pages() as u64;
    for p in 0..2 * cap {
        let g = cache
            .get_with(
                0,
                p,
                |_, p, frame| {
                    frame.fill(p as u8);
                    Ok(())
                },
                |_, _, _| Ok(()),
            )
            .map_err(|e| format!("warming the cache: {e}"))?;
        drop(g);
    }
    let mut pages: Vec<u64> = cache.pages().into_iter().map(|p| p.page).collect();
    pages.sort_unstable();
    let mut frames = Vec::with_capacity(pages.len());
    let mut sets = Vec::with_capacity(pages.len());
    for &p in &pages {
        sets.push(cache.set_address(0, p).map_err(|e| e.to_string())?);
        match cache.get(0, p).map_err(|e| e.to_string())? {
            Lookup::Hit(g) => frames.push(g.as_ptr() as usize),
            _ => return Err(format!("page {p} left the cache while warming")),
        }
    }
    Ok(Keys {
        pages,
        frames,
        sets,
        set_lines: cache.set_metadata_bytes().used.div_ceil(64),
    })
}

#[derive(Clone, Copy, PartialEq)]
enum Phase {
    Bare,
    /// Bare, plus a read of every line of the page's set metadata that the
    /// copy waits for: the floor for a set-associative lookup, without locks,
    /// pins or policy.
    BareMeta,
    /// The cache's copy-out hit path (`PageCache::try_read`, falling back to
    /// `get` when it declines).
    Cache,
    /// A pinned guard (`PageCache::get`), copy, unpin.
    Pinned,
    /// The frame's bytes summed where they lie: no copy, no cache work.
    BareInPlace,
    /// A pinned guard, its bytes summed in place, unpin.
    PinnedInPlace,
}

/// Run `threads` threads for `runtime`; returns operations per second.
#[allow(clippy::too_many_arguments)]
fn phase(
    cache: &PageCache,
    chained: bool,
    sum: bool,
    keys: &Keys,
    read: usize,
    threads: usize,
    runtime: Duration,
    which: Phase,
) -> Result<f64, String> {
    let stop = AtomicBool::new(false);
    let total = AtomicU64::new(0);
    let misses = AtomicU64::new(0);
    let n = keys.pages.len() as u64;
    let start = Instant::now();
    let gate = crate::threads::Gate::default();
    std::thread::scope(|s| {
        crate::threads::spawn_all(&gate, s, threads, |t| {
            let (stop, total, misses) = (&stop, &total, &misses);
            move || {
                let mut x =
                    0x9e37_79b9_7f4a_7c15u64 ^ (t as u64 + 1).wrapping_mul(0xd1b5_4a32_d192_ed03);
                // A private page-sized-plus buffer, so that two threads' copies
                // never land in one cache line.
                let mut space = vec![0u8; 2 * 4096 + read];
                let off = space.as_ptr().align_offset(4096);
                let buf = &mut space[off..off + read];
                let mut ops = 0u64;
                let zero = std::hint::black_box(0usize);
                while !stop.load(Ordering::Relaxed) {
                    for _ in 0..256 {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        let k = ((x as u128 * n as u128) >> 64) as usize;
                        // The sum of the bytes summed in place.
                        let mut in_place = 0u64;
                        match which {
                            Phase::Bare => {
                                // SAFETY: the frame of a resident page holds a
                                // whole page, `read` is at most that, and no
                                // phase writes to frames.
                                let src = unsafe {
                                    std::slice::from_raw_parts(keys.frames[k] as *const u8, read)
                                };
                                buf.copy_from_slice(src);
                            }
                            Phase::BareMeta => {
                                // Read the first word of every cache line a
                                // lookup touches in the page's set.
                                let mut m = 0u32;
                                for line in 0..keys.set_lines {
                                    let word = (keys.sets[k] + line * 64) as *const AtomicU32;
                                    // SAFETY: the set table stays mapped for the cache's
                                    // life and `line * 64` is inside the set's metadata;
                                    // an atomic load races with nothing harmful.
                                    m |= unsafe { (*word).load(Ordering::Relaxed) };
                                }
                                // A copy address that depends on those reads
                                // through arithmetic (times an opaque zero), not
                                // a branch the CPU could predict past.
                                let skew = m as usize * zero;
                                // SAFETY: as in `Bare`; `skew` is 0.
                                let src = unsafe {
                                    std::slice::from_raw_parts(
                                        (keys.frames[k] + skew) as *const u8,
                                        read,
                                    )
                                };
                                buf.copy_from_slice(src);
                            }
                            Phase::Cache => {
                                if !matches!(cache.try_read(0, keys.pages[k], 0, buf), Ok(true)) {
                                    match cache.get(0, keys.pages[k]) {
                                        Ok(Lookup::Hit(g)) => buf.copy_from_slice(&g[..read]),
                                        _ => {
                                            misses.fetch_add(1, Ordering::Relaxed);
                                        }
                                    }
                                }
                            }
                            Phase::Pinned => match cache.get(0, keys.pages[k]) {
                                Ok(Lookup::Hit(g)) => buf.copy_from_slice(&g[..read]),
                                _ => {
                                    misses.fetch_add(1, Ordering::Relaxed);
                                }
                            },
                            Phase::BareInPlace => {
                                // SAFETY: as in `Bare`.
                                let src = unsafe {
                                    std::slice::from_raw_parts(keys.frames[k] as *const u8, read)
                                };
                                in_place = block_sum(src);
                            }
                            Phase::PinnedInPlace => match cache.get(0, keys.pages[k]) {
                                Ok(Lookup::Hit(g)) => in_place = block_sum(&g[..read]),
                                _ => {
                                    misses.fetch_add(1, Ordering::Relaxed);
                                }
                            },
                        }
                        let last = if !sum {
                            std::hint::black_box(&mut *buf);
                            buf[read - 1] as u64
                        } else if matches!(which, Phase::BareInPlace | Phase::PinnedInPlace) {
                            std::hint::black_box(in_place)
                        } else {
                            std::hint::black_box(block_sum(buf))
                        };
                        if chained {
                            x ^= last & 0xff;
                        }
                    }
                    ops += 256;
                }
                total.fetch_add(ops, Ordering::Relaxed);
            }
        })?;
        std::thread::sleep(runtime);
        stop.store(true, Ordering::Relaxed);
        Ok::<_, String>(())
    })?;
    let secs = start.elapsed().as_secs_f64();
    let m = misses.load(Ordering::Relaxed);
    if m > 0 {
        return Err(format!("{m} lookups missed in a phase meant to hit only"));
    }
    Ok(total.load(Ordering::Relaxed) as f64 / secs)
}

/// Most threads a phase may run.
pub(crate) const MAX_THREADS: usize = 1024;

/// Most slices a phase's time may be cut into.
pub(crate) const MAX_ROUNDS: usize = 1000;
/// Shortest and longest `--runtime`, seconds: below a tenth of a second the
/// threads' start and stop weigh on the rates.
const RUNTIME_RANGE: (f64, f64) = (0.1, 86_400.0);
/// The shortest slice of a phase, in seconds.
const MIN_SLICE: f64 = 0.01;

/// The options of a cache of `bytes` the run makes.
fn cache_options(bytes: usize, assoc: usize, policy: PolicyKind) -> CacheOptions {
    CacheOptions {
        size: bytes,
        assoc,
        policy,
        ..CacheOptions::default()
    }
}

/// The flags of a run, checked.
struct Plan {
    policy: PolicyKind,
    runtime: Duration,
    /// Cache sizes in bytes.
    caches: Vec<usize>,
    /// Bytes copied per hit.
    reads: Vec<usize>,
}

/// Checks the flags, all of them before any cache is made.
fn plan(a: &HitArgs) -> Result<Plan, String> {
    let policy: PolicyKind = a.policy.parse().map_err(|e| format!("--policy: {e}"))?;
    if let Some(&t) = a.threads.iter().find(|&&t| !(1..=MAX_THREADS).contains(&t)) {
        return Err(format!(
            "--threads {t}: at least 1 and at most {MAX_THREADS} threads (oversubscription past that measures the scheduler, not the cache)"
        ));
    }
    let (low, high) = RUNTIME_RANGE;
    if !(a.runtime.is_finite() && a.runtime >= low && a.runtime <= high) {
        return Err(format!(
            "--runtime {}: must be from {low} to {high} seconds (a day)",
            a.runtime
        ));
    }
    if !(1..=MAX_ROUNDS).contains(&a.rounds) {
        return Err(format!(
            "--rounds {}: must be from 1 to {MAX_ROUNDS} slices per phase",
            a.rounds
        ));
    }
    // The floor holds for each slice the phases take turns in, not only for
    // the whole: slices of 100 us measure the switches between phases.
    let slice = a.runtime / a.rounds as f64;
    if slice < MIN_SLICE {
        return Err(format!(
            "--runtime {} over --rounds {}: slices of {:.1} ms, under the {:.0} ms each \
             needs to be timed; give fewer rounds or a longer runtime",
            a.runtime,
            a.rounds,
            slice * 1e3,
            MIN_SLICE * 1e3
        ));
    }
    let (min, max) = (
        setcache::cache::policy::MIN_ASSOC,
        setcache::cache::policy::MAX_ASSOC,
    );
    if !(min..=max).contains(&a.assoc) {
        return Err(format!("--assoc {}: must be within {min}..={max}", a.assoc));
    }
    let caches = a
        .cache_size
        .iter()
        .map(|size| {
            let bytes = parse_size(size).map_err(|e| format!("--cache-size {size}: {e}"))?;
            let bytes = usize::try_from(bytes)
                .map_err(|_| format!("--cache-size {size}: too large for this machine"))?;
            // The caches are made one after another: each must be possible
            // before the first is measured.
            <PageCache>::check(&cache_options(bytes, a.assoc, policy))
                .map_err(|e| format!("--cache-size {size}: {e}"))?;
            Ok(bytes)
        })
        .collect::<Result<Vec<_>, String>>()?;
    // Every cache is made with the default page size.
    let page = CacheOptions::default().page_size;
    let reads = a
        .read_size
        .iter()
        .map(|rs| {
            let read = parse_size(rs).map_err(|e| format!("--read-size {rs}: {e}"))?;
            if read == 0 || read > page as u64 {
                return Err(format!(
                    "--read-size {rs}: must be from 1 byte to the page size ({page})"
                ));
            }
            Ok(read as usize)
        })
        .collect::<Result<Vec<_>, String>>()?;
    Ok(Plan {
        policy,
        runtime: Duration::from_secs_f64(a.runtime),
        caches,
        reads,
    })
}

pub(crate) fn run(a: HitArgs) -> Result<(), String> {
    let Plan {
        policy,
        runtime,
        caches,
        reads,
    } = plan(&a)?;
    say!(
        "reads: {}",
        if a.independent {
            "independent (misses of consecutive reads may overlap)"
        } else {
            "chained (the next page depends on the bytes read)"
        }
    );
    if a.sum {
        say!(
            "--sum: each read's bytes are summed; \"in place\" sums the frame's bytes with no copy, \
             \"in place x\" is its ratio to bare (copy, then sum)"
        );
    }
    out!(
        "{:>8} {:>6} {:>4} {:>10} {:>12} {:>11} {:>10} {:>7} {:>7} {:>9}{}",
        "cache",
        "read",
        "thr",
        "bare M/s",
        "bare+set M/s",
        "cache M/s",
        "pinned M/s",
        "ratio",
        "floor",
        "cache ns",
        if a.sum {
            format!(
                " {:>13} {:>18} {:>11}",
                "in place M/s", "pinned in place M/s", "in place x"
            )
        } else {
            String::new()
        }
    );
    for bytes in caches {
        let cache =
            PageCache::new(cache_options(bytes, a.assoc, policy)).map_err(|e| e.to_string())?;
        let keys = fill(&cache)?;
        say!(
            "cache {}: {} sets of {}, {} pages resident ({:.1}% of frames), policy {}",
            format_size(bytes as u64),
            cache.sets(),
            cache.assoc(),
            keys.pages.len(),
            100.0 * keys.pages.len() as f64 / cache.capacity_pages() as f64,
            policy.name()
        );
        for &read in &reads {
            for &t in &a.threads {
                let chained = !a.independent;
                // The phases take turns in short slices, so that a noisy
                // neighbour slows them alike; each ratio pairs slices run
                // side by side, and the medians are reported.
                let rounds = a.rounds;
                let slice = runtime / rounds as u32;
                let mut phases = vec![Phase::Bare, Phase::BareMeta, Phase::Cache, Phase::Pinned];
                if a.sum {
                    phases.extend([Phase::BareInPlace, Phase::PinnedInPlace]);
                }
                let mut rates: Vec<Vec<f64>> = vec![Vec::new(); phases.len()];
                for _ in 0..rounds {
                    for (j, &ph) in phases.iter().enumerate() {
                        let r = phase(&cache, chained, a.sum, &keys, read, t, slice, ph)?;
                        rates[j].push(r);
                    }
                }
                let median_of = |mut v: Vec<f64>| crate::bench::median(&mut v).unwrap_or(0.0);
                let ratio_of =
                    |j: usize| median_of((0..rounds).map(|r| rates[j][r] / rates[0][r]).collect());
                let (hit_ratio, floor) = (ratio_of(2), ratio_of(1));
                let medians: Vec<f64> = rates.iter().cloned().map(median_of).collect();
                let (bare, meta, hit, pinned) = (medians[0], medians[1], medians[2], medians[3]);
                let in_place = if a.sum {
                    format!(
                        " {:>13.2} {:>18.2} {:>11.2}",
                        medians[4] / 1e6,
                        medians[5] / 1e6,
                        ratio_of(4)
                    )
                } else {
                    String::new()
                };
                out!(
                    "{:>8} {:>6} {:>4} {:>10.2} {:>12.2} {:>11.2} {:>10.2} {:>7.2} {:>7.2} {:>9.1}{}",
                    format_size(bytes as u64),
                    read,
                    t,
                    bare / 1e6,
                    meta / 1e6,
                    hit / 1e6,
                    pinned / 1e6,
                    hit_ratio,
                    floor,
                    1e9 * t as f64 / hit,
                    in_place
                );
            }
        }
        let st = cache.stats();
        say!("  cache counters: {} hits, {} misses", st.hits, st.misses);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli_tests::{HIT_FLAGS, argv, parse};
    use crate::test_alloc::{input_bound, largest_alloc};
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Any `hitbench` flags that parse are checked into a plan or refused, naming the flag.
        #[test]
        fn any_hitbench_flags_plan_or_are_refused(argv in argv("hitbench", HIT_FLAGS, &[])) {
            // The caches are not made here: making them is the run.
            let Ok(cli) = parse(&argv)? else {
                return Ok(());
            };
            let Some(crate::Command::Hitbench(a)) = cli.command else {
                return Err(TestCaseError::fail("hitbench arguments parsed as another command"));
            };
            let n: usize = argv.iter().map(|s| s.len() + 1).sum();
            let (r, largest) = largest_alloc(|| plan(&a));
            prop_assert!(largest <= input_bound(n), "{argv:?}: {largest} bytes at once");
            match r {
                Ok(p) => {
                    prop_assert!(a.threads.iter().all(|&t| t <= MAX_THREADS));
                    prop_assert!(a.rounds <= MAX_ROUNDS);
                    prop_assert!(p.runtime > Duration::ZERO && p.runtime.as_secs() <= 86_400);
                    prop_assert_eq!(p.caches.len(), a.cache_size.len());
                    let page = CacheOptions::default().page_size;
                    prop_assert!(p.reads.iter().all(|&r| (1..=page).contains(&r)));
                    // What the run computes from them does not panic.
                    let slice = p.runtime / a.rounds.max(1) as u32;
                    prop_assert!(slice > Duration::ZERO);
                }
                Err(e) => prop_assert!(e.starts_with("--"), "{e}"),
            }
        }
    }

    /// `--rounds` past 1000 is refused (past 2^32 it divided the run time by zero).
    #[test]
    fn rounds_past_the_limit_are_refused() {
        let a = HitArgs {
            cache_size: vec!["16M".into()],
            read_size: vec!["128".into()],
            threads: vec![1],
            runtime: 1.0,
            rounds: 1 << 32,
            policy: "gclock".into(),
            assoc: 12,
            independent: false,
            sum: false,
        };
        let e = plan(&a).err().expect("refused");
        assert!(e.contains("--rounds 4294967296"), "{e}");
        assert!(plan(&HitArgs { rounds: 5, ..a }).is_ok());
    }
}
