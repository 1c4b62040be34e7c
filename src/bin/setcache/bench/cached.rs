//! The `setcache` engine: the set-associative page cache over the store.
//!
//! One `CachedStore` (cache of `--cache-size`, default a quarter of the file)
//! serves every thread. Each thread owns a `CachedQueue` and keeps `--iodepth`
//! requests in flight: hits complete inside `submit`, misses read straight
//! into cache frames. The hit ratio is the cache's own: hits over hits plus
//! misses of its counters, taken when measuring starts and when it stops.
//! Runs with writes end with a `sync` of the file, counted in the run's time.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use setcache::{
    CacheOptions, CacheStats, CachedCompletion, CachedFile, CachedRequest, CachedStore,
    FlusherCounts, OpKind, PolicyKind, Store,
};

use super::driver::{Ctl, ThreadStats, Timing, run_threads};
use super::outcome::Outcome;
use super::prep::FILE_NAME;
use super::size::format_size;
use super::workload::{OpGen, Rng, Workload, mix64};

/// The cache size a run uses: `--cache-size`, else a quarter of the file.
pub(crate) fn cache_bytes(cache_size: Option<u64>, file_len: u64) -> u64 {
    cache_size.unwrap_or((file_len / 4).max(16 << 20))
}

/// Run the workload on `threads` threads with `iodepth` requests in flight each.
#[allow(clippy::too_many_arguments)]
pub(crate) fn run(
    store: &Store,
    w: &Workload,
    threads: usize,
    iodepth: u32,
    cache_size: Option<u64>,
    policy: Option<PolicyKind>,
    readahead: Option<u64>,
    timing: &Timing,
) -> Result<Outcome, String> {
    let size = cache_bytes(cache_size, w.file_len);
    let defaults = CacheOptions::default();
    if cache_size.is_none() {
        say!(
            "setcache: no --cache-size given; using {} (a quarter of the file)",
            format_size(size)
        );
    }
    let cs = CachedStore::new(
        store.clone(),
        CacheOptions {
            size: size as usize,
            policy: policy.unwrap_or(defaults.policy),
            ..defaults
        },
    )
    .map_err(|e| format!("setcache engine: {e}"))?;
    if let Some(bytes) = readahead {
        cs.set_readahead(usize::try_from(bytes).unwrap_or(usize::MAX));
    }
    let file = cs
        .open_file(FILE_NAME)
        .map_err(|e| format!("setcache engine: {e}"))?;
    let edges: Mutex<(Option<CacheStats>, Option<CacheStats>)> = Mutex::new((None, None));
    let mut m = run_threads(threads, timing, |t, ctl| {
        thread_body(&cs, &file, w, t, threads, iodepth as usize, ctl, &edges)
    })?;
    if w.rw.writes() {
        // Durability is part of the work: the sync counts in the run's time.
        let t0 = Instant::now();
        file.sync()
            .map_err(|e| format!("setcache engine: sync: {e}"))?;
        m.secs += t0.elapsed().as_secs_f64();
    }
    let (a, b) = edges.into_inner().unwrap_or_else(|p| p.into_inner());
    let hit_ratio = a.zip(b).and_then(|(a, b)| {
        let hits = b.hits.saturating_sub(a.hits);
        let misses = b.misses.saturating_sub(a.misses);
        (hits + misses > 0).then(|| hits as f64 / (hits + misses) as f64)
    });
    let FlusherCounts { pages, writes } = cs.flusher_counts();
    if pages > 0 {
        let st = cs.cache().stats();
        say!(
            "setcache: flusher wrote {pages} pages in {writes} writes; {} dirty victims written by requesters",
            st.dirty_evictions
        );
    }
    Ok(Outcome::from_measured(&m, hit_ratio))
}

#[allow(clippy::too_many_arguments)]
fn thread_body(
    cs: &CachedStore,
    file: &CachedFile,
    w: &Workload,
    t: usize,
    threads: usize,
    depth: usize,
    ctl: &Ctl,
    edges: &Mutex<(Option<CacheStats>, Option<CacheStats>)>,
) -> Result<ThreadStats, String> {
    let bs = w.bs as usize;
    let mut free: Vec<Vec<u8>> = (0..depth).map(|_| vec![0u8; bs]).collect();
    if w.rw.writes() {
        let mut rng = Rng::new(w.seed ^ mix64(t as u64 + 1));
        for b in &mut free {
            rng.fill_nonzero(b);
        }
    }
    let mut stats = ThreadStats::new();
    let mut measuring = false;
    let mut error: Option<String> = None;
    let mut queue = cs.queue(depth);
    let mut ops = OpGen::new(w, t, threads);
    let mut reqs: Vec<CachedRequest<'_>> = Vec::with_capacity(depth);
    let mut done: Vec<(u64, CachedCompletion)> = Vec::with_capacity(depth);
    // Each request's tag is its submission time, in ns since `epoch`. Its
    // latency runs until this thread takes the completion, which is when an
    // application sees it: a hit in a batch of 32 is charged the whole batch.
    let epoch = Instant::now();
    while error.is_none() && !ctl.stopped() {
        let now = ctl.measuring();
        if t == 0 && now && !measuring {
            edges.lock().unwrap_or_else(|p| p.into_inner()).0 = Some(cs.cache().stats());
        }
        measuring = now;
        ctl.publish(t, stats.ops);
        if !free.is_empty() {
            let submitted = epoch.elapsed().as_nanos() as u64;
            for buf in free.drain(..) {
                let op = ops.next_op();
                let kind = if op.read { OpKind::Read } else { OpKind::Write };
                reqs.push(CachedRequest::tagged(kind, file, op.offset, buf, submitted));
            }
            queue.submit_from(&mut reqs);
            queue.take_completions(&mut done);
        }
        if done.is_empty() {
            queue.wait(1);
            queue.take_completions(&mut done);
        }
        account(
            &mut done, &mut free, &mut stats, measuring, &mut error, epoch,
        );
    }
    if t == 0 {
        edges.lock().unwrap_or_else(|p| p.into_inner()).1 = Some(cs.cache().stats());
    }
    queue.drain();
    queue.take_completions(&mut done);
    account(&mut done, &mut free, &mut stats, false, &mut error, epoch);
    match error {
        Some(e) => Err(e),
        None => Ok(stats),
    }
}

/// Record the finished requests in `done` and return their buffers to `free`.
fn account(
    done: &mut Vec<(u64, CachedCompletion)>,
    free: &mut Vec<Vec<u8>>,
    stats: &mut ThreadStats,
    measuring: bool,
    error: &mut Option<String>,
    epoch: Instant,
) {
    if done.is_empty() {
        return;
    }
    let now = epoch.elapsed().as_nanos() as u64;
    for (submitted, c) in done.drain(..) {
        match c.result {
            Ok(()) if measuring => {
                let lat = Duration::from_nanos(now.saturating_sub(submitted));
                stats.record(lat, c.kind == OpKind::Read);
            }
            Ok(()) => {}
            Err(e) => {
                error.get_or_insert_with(|| format!("setcache engine: {e}"));
            }
        }
        free.push(c.buf);
    }
}
