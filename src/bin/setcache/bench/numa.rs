//! The `setcache-numa` engine: the cache's pages divided among
//! `--partitions` partitions, each served by a worker thread; every bench
//! thread serves its home partition's requests itself and sends the others'
//! to their workers in bundles through a `PartQueue`, keeping `--iodepth`
//! outstanding. With `--compute`, each read
//! is a task summing or searching the block in the partition that holds its
//! page (8 bytes come back instead of the block). The hit ratio is the cache's, as for the
//! `setcache` engine.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use setcache::{
    CacheStats, CachedFile, CachedStore, PartCompletion, PartitionOptions, Partitions, PolicyKind,
    Store,
};

use super::cached::{hit_ratio, open};
use super::compute::{Compute, SEARCH_KEY, block_search, block_sum};
use super::driver::{Ctl, Me, StatEdges, ThreadStats, Timing, phase, run_threads};
use super::outcome::Outcome;
use super::workload::{OpGen, Rng, Workload, fill_block, mix64, wait_until};

/// The task of `--compute sum`: the block of `arg` bytes at `at` summed.
fn sum_task(page: &[u8], at: usize, arg: u64) -> u64 {
    block_sum(&page[at..at + arg as usize])
}

/// The task of `--compute search`: the block of `arg` bytes at `at`
/// searched for the bench's key.
fn search_task(page: &[u8], at: usize, arg: u64) -> u64 {
    block_search(&page[at..at + arg as usize], SEARCH_KEY)
}

/// Run the workload on `threads` threads with `iodepth` requests outstanding
/// each, over `partitions` partitions (None: one per node).
#[allow(clippy::too_many_arguments)]
pub(crate) fn run(
    store: &Store,
    w: &Workload,
    threads: usize,
    iodepth: u32,
    cache_size: Option<u64>,
    policy: Option<PolicyKind>,
    partitions: Option<usize>,
    compute: Option<Compute>,
    timing: &Timing,
) -> Result<Outcome, String> {
    // The cache's sets divided as the partitions (0: one per node).
    let (cs, file) = open(
        "setcache-numa",
        store,
        w.file_len,
        cache_size,
        policy,
        None,
        partitions.unwrap_or(0),
    )?;
    let parts = Partitions::new(
        &cs,
        PartitionOptions {
            partitions,
            ..PartitionOptions::default()
        },
    )
    .map_err(|e| format!("setcache-numa engine: {e}"))?;
    say!(
        "setcache-numa: {}{}; {}",
        match parts.count() {
            1 => "1 partition".to_string(),
            n => format!("{n} partitions"),
        },
        if parts.emulated() {
            " (emulated: workers not bound to nodes, threads' homes taken in turn)".to_string()
        } else {
            let workers = match parts.workers_unbound() {
                Some(why) => format!("workers not bound to their nodes ({why})"),
                None => "workers bound to their nodes".to_string(),
            };
            match parts.memory_unbound() {
                Some(why) => format!(", one per node, {workers}, memory not ({why})"),
                None => format!(", one per node, {workers}"),
            }
        },
        if parts.count() == 1 {
            "each thread serves its pages itself"
        } else {
            "each thread serves its home partition's pages itself, the others' by message"
        }
    );
    // The sets are a multiple of the partitions: with many partitions and a
    // small cache, fewer than an undivided cache of the size has.
    let c = cs.cache();
    let set_bytes = (c.assoc() * c.page_size()) as u64;
    let asked = super::config::cache_bytes(cache_size, w.file_len);
    if (c.sets() as u64) < asked / set_bytes {
        say!(
            "note: setcache-numa's cache holds {} ({} sets of {} pages), not the {} asked: its \
             sets are a multiple of its {} partitions (a hit ratio's target may be out of reach)",
            super::size::format_size(c.capacity_pages() as u64 * c.page_size() as u64),
            c.sets(),
            c.assoc(),
            super::size::format_size(asked),
            parts.count()
        );
    }
    let edges: Mutex<(Option<CacheStats>, Option<CacheStats>)> = Mutex::new((None, None));
    let mut m = run_threads(threads, timing, |t, ctl| {
        let me = Me {
            t,
            threads,
            slot: t,
            base: 0,
            delay: 0.0,
        };
        body(
            &cs,
            &parts,
            &file,
            w,
            me,
            iodepth as usize,
            compute,
            ctl,
            &edges,
        )
    })?;
    drop(parts);
    if w.replay.as_ref().is_some_and(|r| r.passes > 0) {
        // A replay's passes end thread by thread: its counters end when the
        // last thread's last request did (as the setcache engine's).
        edges.lock().unwrap_or_else(|p| p.into_inner()).1 = Some(cs.cache().stats());
    }
    if w.rw.writes() {
        let t0 = Instant::now();
        file.sync()
            .map_err(|e| format!("setcache-numa engine: sync: {e}"))?;
        m.secs += t0.elapsed().as_secs_f64();
    }
    let (a, b) = edges.into_inner().unwrap_or_else(|p| p.into_inner());
    let hit_ratio = hit_ratio(a, b);
    Ok(Outcome::from_measured(&m, hit_ratio))
}

#[allow(clippy::too_many_arguments)]
fn body(
    cs: &CachedStore,
    parts: &Partitions<'_>,
    file: &CachedFile,
    w: &Workload,
    me: Me,
    depth: usize,
    compute: Option<Compute>,
    ctl: &Ctl,
    edges: &StatEdges,
) -> Result<ThreadStats, String> {
    let bs = w.bs as usize;
    let mut free: Vec<Vec<u8>> = (0..depth).map(|_| vec![0u8; bs]).collect();
    if w.rw.writes() {
        let mut rng = Rng::new(w.seed ^ mix64(me.t as u64 + 1));
        for b in &mut free {
            rng.fill_nonzero(b);
        }
    }
    // With partitions of real nodes, each thread runs on a node in turn,
    // whose partition is then its queue's home (unless the kernel refused
    // the workers their nodes' CPUs, which the header said).
    if !parts.emulated() && parts.workers_unbound().is_none() {
        parts
            .bind_thread(me.t % parts.count())
            .map_err(|e| format!("setcache-numa engine: {e}"))?;
    }
    let mut q = parts
        .queue(depth)
        .map_err(|e| format!("setcache-numa engine: {e}"))?;
    let mut stats = ThreadStats::new();
    let mut measuring = false;
    let mut error: Option<String> = None;
    let mut ops = OpGen::new(w, me.t, me.threads);
    let mut done: Vec<PartCompletion> = Vec::with_capacity(depth);
    // Each request's tag is its submission time in ns since `epoch`, shifted
    // left by one, and 1 for a read.
    let epoch = Instant::now();
    let mut slots = depth;
    let mut ended = false;
    while error.is_none() && !ctl.stopped() && !ended {
        measuring = phase(ctl, cs, edges, measuring);
        ctl.publish(me.slot, stats.ops);
        let submitted = epoch.elapsed().as_nanos() as u64;
        let mut later = None;
        while slots > 0 {
            let Some(op) = ops.next_in_batch(&mut later, &mut ended) else {
                break;
            };
            slots -= 1;
            let at = me.base + op.offset;
            let tag = submitted << 1 | op.read as u64;
            if let (true, Some(f)) = (op.read, compute) {
                let task = match f {
                    Compute::Sum => sum_task,
                    Compute::Search => search_task,
                };
                q.task(file, at, task, op.len, tag);
                continue;
            }
            let mut buf = free.pop().unwrap_or_default();
            buf.resize(op.len as usize, 0);
            if op.read {
                q.read(file, at, buf, tag);
            } else {
                if w.replay.is_some() {
                    fill_block(op.offset / w.bs, &mut buf);
                }
                q.write(file, at, buf, tag);
            }
        }
        if ended {
            break;
        }
        match later {
            Some(at) => wait_until(at, || {
                q.poll();
                q.take_completions(&mut done);
                !done.is_empty()
            }),
            None => {
                q.wait(1);
                q.take_completions(&mut done);
            }
        }
        let now = epoch.elapsed().as_nanos() as u64;
        for c in done.drain(..) {
            slots += 1;
            match c.result {
                Ok(()) if measuring => {
                    let lat = Duration::from_nanos(now.saturating_sub(c.tag >> 1));
                    stats.record(lat, c.tag & 1 == 1);
                }
                Ok(()) => {}
                Err(e) => {
                    error.get_or_insert_with(|| format!("setcache-numa engine: {e}"));
                }
            }
            std::hint::black_box(c.value);
            if c.buf.capacity() > 0 {
                free.push(c.buf);
            }
        }
    }
    if me.slot == 0 {
        edges.lock().unwrap_or_else(|p| p.into_inner()).1 = Some(cs.cache().stats());
    }
    // The requests still out: a write that failed among them fails the run,
    // and a replay that made its passes counts them too.
    q.drain();
    q.take_completions(&mut done);
    let last = ended && measuring && !ctl.stopped();
    let now = epoch.elapsed().as_nanos() as u64;
    for c in done.drain(..) {
        match c.result {
            Ok(()) if last => {
                let lat = Duration::from_nanos(now.saturating_sub(c.tag >> 1));
                stats.record(lat, c.tag & 1 == 1);
            }
            Ok(()) => {}
            Err(e) => {
                error.get_or_insert_with(|| format!("setcache-numa engine: {e}"));
            }
        }
    }
    drop(q);
    match error {
        Some(e) => Err(e),
        None => Ok(stats),
    }
}
