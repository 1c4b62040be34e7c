//! The `setcache` engine: the set-associative page cache over the store.
//!
//! One `CachedStore` (cache of `--cache-size`, default a quarter of the file, at least 16 MiB)
//! serves every thread. Each thread owns a `CachedQueue` and keeps `--iodepth`
//! requests in flight: hits complete inside `submit`, misses read straight
//! into cache frames. With `--api sync` each thread makes one `read_at` or
//! `write_at` at a time, or with `--access ref` takes a page reference of
//! each block and copies `--touch` bytes of it out. The hit ratio is the cache's own: hits over hits plus
//! misses of its counters, taken when measuring starts and when it stops.
//! Runs with writes end with a `sync` of the file, counted in the run's time.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use setcache::{
    CacheStats, CachedCompletion, CachedFile, CachedRequest, CachedStore, FlusherCounts, OpKind,
    PolicyKind, Store,
};

use super::compute::Compute;
use super::config::cache_bytes;
use super::driver::{Ctl, Me, StatEdges, ThreadStats, Timing, phase, run_threads};
use super::jobs::{Job, JobResult};
use super::outcome::{Lat, Outcome};
use super::prep::FILE_NAME;
use super::size::format_size;
use super::workload::{OpGen, Rng, Workload, fill_block, mix64, wait_until};

/// An engine's cached store (a cache of `cache_size`, else a quarter of
/// the file of `file_len` bytes) and its bench file; errors name `engine`.
pub(crate) fn open(
    engine: &str,
    store: &Store,
    file_len: u64,
    cache_size: Option<u64>,
    policy: Option<PolicyKind>,
    readahead: Option<u64>,
    partitions: usize,
) -> Result<(CachedStore, CachedFile), String> {
    let cs = CachedStore::new(
        store.clone(),
        super::config::cache_options(cache_size, file_len, policy, partitions),
    )
    .map_err(|e| format!("{engine} engine: {e}"))?;
    if let Some(bytes) = readahead {
        cs.set_readahead(usize::try_from(bytes).unwrap_or(usize::MAX));
    }
    let file = cs
        .open_file(FILE_NAME)
        .map_err(|e| format!("{engine} engine: {e}"))?;
    Ok((cs, file))
}

/// Place the futures' workers (`None`: where the store puts them by default).
fn place_workers(cs: &CachedStore, cpus: Option<setcache::WorkerCpus>) -> Result<(), String> {
    cs.place_futures_workers(cpus.unwrap_or_default())
        .map_err(|e| format!("setcache engine: --futures-cpus: {e}"))
}

/// Say, once a call, where the futures' workers ran and which CPUs take the
/// devices' interrupts.
fn say_placed(cs: &CachedStore, store: &Store, how: &Option<setcache::WorkerCpus>) {
    static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if SAID.swap(true, Ordering::Relaxed) {
        return;
    }
    let busy = store.interrupt_cpus();
    let lists: Vec<String> = cs
        .futures_workers_cpus()
        .iter()
        .map(|c| format!("{c:?}"))
        .collect();
    say!(
        "setcache: futures' workers ({}) on CPUs {}; the devices' interrupts on CPUs {}",
        match how {
            None | Some(setcache::WorkerCpus::OffInterrupts) => "off-interrupts",
            Some(setcache::WorkerCpus::Anywhere) => "anywhere",
            Some(setcache::WorkerCpus::Pinned(_)) => "pinned",
        },
        lists.join(" "),
        if busy.is_empty() {
            "(none found)".to_string()
        } else {
            format!("{busy:?}")
        }
    );
}

/// The cache's hit ratio between two snapshots of its counters.
pub(crate) fn hit_ratio(a: Option<CacheStats>, b: Option<CacheStats>) -> Option<f64> {
    a.zip(b).and_then(|(a, b)| {
        let hits = b.hits.saturating_sub(a.hits);
        let misses = b.misses.saturating_sub(a.misses);
        (hits + misses > 0).then(|| hits as f64 / (hits + misses) as f64)
    })
}

/// Pages read ahead, and of them read by a stream, between two snapshots.
fn ahead(a: Option<CacheStats>, b: Option<CacheStats>) -> (u64, u64) {
    a.zip(b).map_or((0, 0), |(a, b)| {
        (
            b.readahead.saturating_sub(a.readahead),
            b.readahead_used.saturating_sub(a.readahead_used),
        )
    })
}

/// How the engine's threads call the cache.
#[derive(Clone, Debug)]
pub(crate) struct Calls {
    pub(crate) api: Api,
    /// Reads take a page reference and read this many bytes of it.
    pub(crate) touch: Option<usize>,
    /// Each block read is computed on ([`Compute`]): on the copy, or with
    /// `touch`, on the page reference (the whole block, not `touch` bytes).
    pub(crate) compute: Option<Compute>,
    /// Where the futures' workers run (`None`: the store's default).
    pub(crate) futures_cpus: Option<setcache::WorkerCpus>,
}

/// Which API a thread uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Api {
    /// A cached queue with --iodepth requests in flight.
    Queue,
    /// One synchronous call at a time.
    Sync,
    /// --iodepth futures in flight under a small executor.
    Async,
}

/// Run the workload on `threads` threads with `iodepth` requests in flight
/// each (or, with `calls.sync`, one synchronous call at a time).
#[allow(clippy::too_many_arguments)]
pub(crate) fn run(
    store: &Store,
    w: &Workload,
    threads: usize,
    iodepth: u32,
    cache_size: Option<u64>,
    policy: Option<PolicyKind>,
    readahead: Option<u64>,
    calls: Calls,
    timing: &Timing,
) -> Result<(Outcome, (u64, u64)), String> {
    if cache_size.is_none() {
        say!(
            "setcache: no --cache-size given; using {} (a quarter of the file, at least 16 MiB)",
            format_size(cache_bytes(cache_size, w.file_len))
        );
    }
    let (cs, file) = open(
        "setcache", store, w.file_len, cache_size, policy, readahead, 1,
    )?;
    if calls.api == Api::Async {
        place_workers(&cs, calls.futures_cpus.clone())?;
    }
    let edges: Mutex<(Option<CacheStats>, Option<CacheStats>)> = Mutex::new((None, None));
    let hits = AtomicU64::new(0);
    let mut m = run_threads(threads, timing, |t, ctl| {
        let me = Me {
            t,
            threads,
            slot: t,
            base: 0,
            delay: 0.0,
        };
        let depth = iodepth as usize;
        match (calls.api, calls.touch) {
            (Api::Sync, touch) => sync_body(&cs, &file, w, me, touch, ctl, &edges),
            (Api::Queue, None) => {
                thread_body(&cs, &file, w, me, depth, calls.compute, ctl, &edges, &hits)
            }
            (Api::Queue, Some(n)) => {
                let with = match calls.compute {
                    Some(f) => PageUse::Compute(f),
                    None => PageUse::Touch(n),
                };
                page_body(&cs, &file, w, me, depth, with, ctl, &edges)
            }
            (Api::Async, touch) => {
                super::futures::body(&cs, &file, w, me, depth, touch, ctl, &edges)
            }
        }
    })?;
    if calls.api == Api::Async {
        say_placed(&cs, store, &calls.futures_cpus);
    }
    if w.replay.as_ref().is_some_and(|r| r.passes > 0) {
        // A replay's passes end thread by thread: its counters end when the
        // last thread's last request did.
        edges.lock().unwrap_or_else(|p| p.into_inner()).1 = Some(cs.cache().stats());
    }
    if w.rw.writes() {
        // Durability is part of the work: the sync counts in the run's time.
        let t0 = Instant::now();
        file.sync()
            .map_err(|e| format!("setcache engine: sync: {e}"))?;
        m.secs += t0.elapsed().as_secs_f64();
    }
    let (a, b) = edges.into_inner().unwrap_or_else(|p| p.into_inner());
    let hit_ratio = hit_ratio(a, b);
    let ra = ahead(a, b);
    if ra.0 > 0 {
        say!(
            "setcache: read ahead {} pages; a sequential reader read {} of them",
            ra.0,
            ra.1
        );
    }
    let FlusherCounts { pages, writes } = cs.flusher_counts();
    if pages > 0 {
        let st = cs.cache().stats();
        say!(
            "setcache: flusher wrote {pages} pages in {writes} writes; {} dirty victims written by requesters",
            st.dirty_evictions
        );
    }
    Ok((Outcome::from_measured(&m, hit_ratio), ra))
}

/// What a thread of `--access ref` does with each page reference.
#[derive(Clone, Copy, Debug)]
enum PageUse {
    /// Copies out this many bytes of the block.
    Touch(usize),
    /// Computes on the whole block in place (`--compute`).
    Compute(Compute),
}

/// A queue thread of `--access ref`: `depth` page requests in flight, each
/// completing with a guard whose block is used as `with` says.
#[allow(clippy::too_many_arguments)]
fn page_body(
    cs: &CachedStore,
    file: &CachedFile,
    w: &Workload,
    me: Me,
    depth: usize,
    with: PageUse,
    ctl: &Ctl,
    edges: &StatEdges,
) -> Result<ThreadStats, String> {
    let mut stats = ThreadStats::new();
    let mut measuring = false;
    let mut queue = cs.queue(depth);
    let mut ops = OpGen::new(w, me.t, me.threads);
    let mut reqs: Vec<CachedRequest<'_>> = Vec::with_capacity(depth);
    let mut done = Vec::with_capacity(depth);
    let mut buf = vec![
        0u8;
        match with {
            PageUse::Touch(n) => n,
            PageUse::Compute(_) => 0,
        }
    ];
    let bs = w.bs as usize;
    // Each request's tag is its submission time in ns since `epoch`, plus
    // the byte it reads in the page (below 4 KiB) in the low 12 bits.
    let epoch = Instant::now();
    let mut free = depth;
    let mut error = None;
    let mut ended = false;
    while error.is_none() && !ctl.stopped() && !ended {
        measuring = phase(ctl, cs, edges, measuring);
        ctl.publish(me.slot, stats.ops);
        let mut later = None;
        if free > 0 {
            let submitted = (epoch.elapsed().as_nanos() as u64) << 12;
            while free > 0 {
                let Some(op) = ops.next_in_batch(&mut later, &mut ended) else {
                    break;
                };
                let at = me.base + op.offset;
                reqs.push(CachedRequest::page(file, at, submitted | (at & 4095)));
                free -= 1;
            }
            queue.submit_from(&mut reqs);
            queue.take_pages(&mut done);
        }
        if ended {
            break;
        }
        if done.is_empty() {
            match later {
                Some(at) => wait_until(at, || {
                    queue.poll();
                    queue.take_pages(&mut done);
                    !done.is_empty()
                }),
                None => {
                    queue.wait(1);
                    queue.take_pages(&mut done);
                }
            }
        }
        let now = epoch.elapsed().as_nanos() as u64;
        for (tag, g) in done.drain(..) {
            free += 1;
            match g {
                Ok(g) => {
                    let i = (tag & 4095) as usize;
                    match with {
                        PageUse::Touch(n) => {
                            buf.copy_from_slice(&g[i..i + n]);
                            std::hint::black_box(&buf);
                        }
                        PageUse::Compute(f) => {
                            std::hint::black_box(f.run(&g[i..i + bs]));
                        }
                    }
                    if measuring {
                        let lat = Duration::from_nanos(now.saturating_sub(tag >> 12));
                        stats.record(lat, true);
                    }
                }
                Err(e) => {
                    error.get_or_insert_with(|| format!("setcache engine: {e}"));
                }
            }
        }
    }
    if me.slot == 0 {
        edges.lock().unwrap_or_else(|p| p.into_inner()).1 = Some(cs.cache().stats());
    }
    queue.drain();
    match error {
        Some(e) => Err(e),
        None => Ok(stats),
    }
}

#[allow(clippy::too_many_arguments)]
fn thread_body(
    cs: &CachedStore,
    file: &CachedFile,
    w: &Workload,
    me: Me,
    depth: usize,
    compute: Option<Compute>,
    ctl: &Ctl,
    edges: &StatEdges,
    hits: &AtomicU64,
) -> Result<ThreadStats, String> {
    let (t, threads) = (me.t, me.threads);
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
    let mut hit = 0u64;
    let start = Instant::now() + Duration::from_secs_f64(me.delay);
    while Instant::now() < start && !ctl.stopped() {
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut ended = false;
    while error.is_none() && !ctl.stopped() && !ended {
        measuring = phase(ctl, cs, edges, measuring);
        ctl.publish(me.slot, stats.ops);
        let mut later = None;
        if !free.is_empty() {
            let submitted = epoch.elapsed().as_nanos() as u64;
            while let Some(buf) = free.pop() {
                let Some(op) = ops.next_in_batch(&mut later, &mut ended) else {
                    free.push(buf);
                    break;
                };
                let kind = if op.read { OpKind::Read } else { OpKind::Write };
                let at = me.base + op.offset;
                // A graph walk's reads are shorter than `bs`; the buffer keeps
                // its capacity.
                let mut buf = buf;
                buf.resize(op.len as usize, 0);
                if !op.read && w.replay.is_some() {
                    fill_block(op.offset / w.bs, &mut buf);
                }
                reqs.push(CachedRequest::tagged(kind, file, at, buf, submitted));
            }
            queue.submit_from(&mut reqs);
            queue.take_completions(&mut done);
        }
        if ended {
            break;
        }
        if done.is_empty() {
            match later {
                Some(at) => wait_until(at, || {
                    queue.poll();
                    queue.take_completions(&mut done);
                    !done.is_empty()
                }),
                None => {
                    queue.wait(1);
                    queue.take_completions(&mut done);
                }
            }
        }
        if let Some(f) = compute {
            for (_, c) in &done {
                std::hint::black_box(f.run(&c.buf));
            }
        }
        account(
            &mut done, &mut free, &mut stats, &mut hit, measuring, &mut error, epoch,
        );
    }
    if me.slot == 0 {
        edges.lock().unwrap_or_else(|p| p.into_inner()).1 = Some(cs.cache().stats());
    }
    queue.drain();
    queue.take_completions(&mut done);
    // A replay that made its passes counts its last requests too.
    let last = ended && measuring && !ctl.stopped();
    account(
        &mut done, &mut free, &mut stats, &mut hit, last, &mut error, epoch,
    );
    hits.fetch_add(hit, Ordering::Relaxed);
    match error {
        Some(e) => Err(e),
        None => Ok(stats),
    }
}

/// A thread of the synchronous API: one `read_at` or `write_at` at a time,
/// or with `touch`, a page reference of each block read and `touch` bytes of
/// it copied out (what the mmap engine does through its mapping).
#[allow(clippy::too_many_arguments)]
fn sync_body(
    cs: &CachedStore,
    file: &CachedFile,
    w: &Workload,
    me: Me,
    touch: Option<usize>,
    ctl: &Ctl,
    edges: &StatEdges,
) -> Result<ThreadStats, String> {
    let mut buf = vec![0u8; w.bs as usize];
    if w.rw.writes() {
        Rng::new(w.seed ^ mix64(me.t as u64 + 1)).fill_nonzero(&mut buf);
    }
    let mut stats = ThreadStats::new();
    let mut measuring = false;
    let mut ops = OpGen::new(w, me.t, me.threads);
    let fail = |e: setcache::Error| format!("setcache engine: {e}");
    while !ctl.stopped() {
        measuring = phase(ctl, cs, edges, measuring);
        let Some(op) = ops.next_op() else {
            break;
        };
        let at = me.base + op.offset;
        let start = Instant::now();
        match (op.read, touch) {
            (true, Some(n)) => {
                let g = file.page(at).map_err(fail)?;
                let i = (at - g.offset()) as usize;
                buf[..n].copy_from_slice(&g[i..i + n]);
                std::hint::black_box(&buf);
            }
            (true, None) => drop(
                file.read_at(at, &mut buf[..op.len as usize])
                    .map_err(fail)?,
            ),
            (false, _) => {
                if w.replay.is_some() {
                    fill_block(op.offset / w.bs, &mut buf[..op.len as usize]);
                }
                file.write_at(at, &buf[..op.len as usize]).map_err(fail)?
            }
        }
        if measuring {
            stats.record(start.elapsed(), op.read);
            ctl.publish(me.slot, stats.ops);
        }
    }
    if me.slot == 0 {
        edges.lock().unwrap_or_else(|p| p.into_inner()).1 = Some(cs.cache().stats());
    }
    Ok(stats)
}

/// Record the finished requests in `done` and return their buffers to `free`.
fn account(
    done: &mut Vec<(u64, CachedCompletion)>,
    free: &mut Vec<Vec<u8>>,
    stats: &mut ThreadStats,
    hits: &mut u64,
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
                // Reads only, as the cache's own ratio: a write of whole
                // pages needs no device read, which is no hit.
                *hits += u64::from(c.hit && c.kind == OpKind::Read);
            }
            Ok(()) => {}
            Err(e) => {
                error.get_or_insert_with(|| format!("setcache engine: {e}"));
            }
        }
        free.push(c.buf);
    }
}

/// Run `jobs` together on one cache of `cache_size` over the bench file
/// `FILE_NAME` of the store: every job's threads start together and share
/// the cache; each job is measured on its own.
#[allow(clippy::too_many_arguments)]
pub(crate) fn run_jobs(
    store: &Store,
    jobs: &[Job],
    file_len: u64,
    cache_size: Option<u64>,
    policy: Option<PolicyKind>,
    readahead: Option<u64>,
    seed: u64,
    timing: &Timing,
) -> Result<(Vec<JobResult>, (u64, u64)), String> {
    let (cs, file) = open(
        "setcache", store, file_len, cache_size, policy, readahead, 1,
    )?;
    let loads: Vec<Workload> = jobs
        .iter()
        .enumerate()
        .map(|(i, j)| Workload {
            rw: j.rw,
            rwmix_read: 50,
            bs: j.bs,
            file_len: j.size,
            dist: super::workload::Dist::Uniform,
            hot: None,
            seed: seed ^ mix64(i as u64 + 0x10b),
            replay: None,
        })
        .collect();
    // Thread `t` of the run is thread `t - first[j]` of job `j`.
    let mut first = Vec::new();
    let mut n = 0;
    for j in jobs {
        first.push(n);
        n += j.threads;
    }
    let per_job: Vec<Mutex<ThreadStats>> = jobs
        .iter()
        .map(|_| Mutex::new(ThreadStats::new()))
        .collect();
    let hits: Vec<AtomicU64> = jobs.iter().map(|_| AtomicU64::new(0)).collect();
    let edges: Mutex<(Option<CacheStats>, Option<CacheStats>)> = Mutex::new((None, None));
    let m = run_threads(n, timing, |t, ctl| {
        let j = first.iter().rposition(|&f| f <= t).unwrap_or(0);
        let me = Me {
            t: t - first[j],
            threads: jobs[j].threads,
            slot: t,
            base: jobs[j].offset,
            delay: jobs[j].delay,
        };
        let depth = jobs[j].iodepth as usize;
        let st = thread_body(
            &cs, &file, &loads[j], me, depth, None, ctl, &edges, &hits[j],
        )?;
        per_job[j]
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .merge(&st);
        Ok(st)
    })?;
    let (a, b) = edges.into_inner().unwrap_or_else(|p| p.into_inner());
    let ra = ahead(a, b);
    // The jobs' writes are synced after the run, outside its time (each job
    // is measured on its own, and one sync covers them all).
    if jobs.iter().any(|j| j.rw.writes()) {
        file.sync()
            .map_err(|e| format!("setcache engine: the sync after the jobs: {e}"))?;
    }
    let results = jobs
        .iter()
        .zip(per_job)
        .zip(&hits)
        .map(|((j, st), h)| {
            let st = st.into_inner().unwrap_or_else(|p| p.into_inner());
            JobResult {
                job: j.clone(),
                ops: st.ops,
                secs: m.secs,
                hit_ratio: (st.reads > 0)
                    .then(|| h.load(Ordering::Relaxed) as f64 / st.reads as f64),
                lat: Lat::from_hist(&st.hist),
            }
        })
        .collect();
    Ok((results, ra))
}
