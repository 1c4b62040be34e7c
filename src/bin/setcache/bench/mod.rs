//! `setcache bench`: a fio-like benchmark of the storage layer against the Linux
//! I/O paths on the same data.
//!
//! One run is one engine at one thread count and one hit-ratio target. Runs go in
//! order threads -> hit ratio -> engine, each from a cold page cache; with
//! `--repeat N` the engines of one thread count and hit ratio take turns N times
//! and the table keeps each engine's median run, with the median of its per-round
//! ratio to the first engine. fio (with `--compare-fio`) runs once per thread count. The table goes to stdout, notices
//! and progress to stderr.

mod args;
pub(crate) mod cached;
pub(crate) mod cgroup;
pub(crate) mod child;
pub(crate) mod compute;
mod config;
mod direct;
mod driver;
mod engine;
mod fio;
pub(crate) mod fsize;
mod futures;
mod jobs;
mod linux;
pub(crate) mod mmap;
mod numa;
mod outcome;
mod pattern;
mod plot;
pub(crate) mod prep;
mod progress;
mod report;
pub(crate) use report::median;
pub(crate) mod rng;
pub(crate) mod size;
pub(crate) mod svg;
mod workload;
pub(crate) mod zipf;

use std::path::{Path, PathBuf};

use setcache::{File, Store};

pub(crate) use args::BenchArgs;
pub(crate) use child::{CHILD_SUBCOMMAND, child_main};
pub(crate) use config::{check_io_unit, check_outputs};

use cgroup::{Hierarchy, MemCgroup};
use config::Config;
use driver::Timing;
pub(crate) use driver::{install_sigint, interrupted};
use engine::Engine;
use linux::LinuxJob;
use report::RunResult;
use size::format_size;
use workload::{Workload, mix64};

/// Arguments of the demo that `setcache` runs when given no arguments.
pub(crate) const DEMO_ARGS: &[&str] = &[
    "--file-size",
    "1G",
    "--rw",
    "randread",
    "--bs",
    "4k",
    "--engine",
    "setcache,linux-buffered,direct",
    "--hit-ratio",
    "0,50,90,100",
    "--cache-size",
    "128M",
    "--threads",
    "1",
    "--iodepth",
    "32",
    "--runtime",
    "3",
    "--ramp",
    "1",
    "--plot",
    "setcache-demo.svg",
];

/// What every run shares.
struct Bench<'a> {
    cfg: &'a Config,
    store: &'a Store,
    file: &'a File,
    paths: Vec<PathBuf>,
    cgroups: Option<Hierarchy>,
}

/// Run the bench; errors come back as one line for `error: ...`.
pub(crate) fn run(args: BenchArgs) -> Result<(), String> {
    let cfg = config::validate(args)?;
    driver::install_sigint();
    let ws = prep::Workspace::new(cfg.a.dir.as_deref())?;
    let roots = prep::device_roots(&ws.dir, cfg.a.devices)?;
    let store = prep::open_store(&cfg, &roots)?;
    let paths = store
        .backing_paths(prep::FILE_NAME)
        .map_err(|e| e.to_string())?;
    // A write past the file-size limit fails with EFBIG: say which limit.
    let explain = |e: String| fsize::explain(e, &paths);
    let file = prep::bench_file(&store, &cfg, &ws.dir).map_err(explain)?;
    let cgroups = if cfg.engines.iter().any(|e| e.is_linux()) {
        cgroup_setup(&cfg)
    } else {
        None
    };
    let fio = if cfg.a.compare_fio {
        let found = fio::find_fio();
        if found.is_none() {
            say!("note: fio is not on PATH; --compare-fio skipped");
        }
        found
    } else {
        None
    };
    let bench = Bench {
        cfg: &cfg,
        store: &store,
        file: &file,
        paths: paths.clone(),
        cgroups,
    };
    let n_runs = cfg.a.threads.len()
        * cfg.hit_targets.len()
        * cfg.engines.len()
        * cfg.a.repeat.max(1) as usize
        + fio.as_ref().map_or(0, |_| cfg.a.threads.len());
    say!(
        "{n_runs} runs of {} s{} each; store engine {}, {} device(s), layout {}, {} file",
        cfg.a.runtime,
        if cfg.a.ramp > 0.0 {
            format!(" (+{} s ramp)", cfg.a.ramp)
        } else {
            String::new()
        },
        store.engine_name(),
        cfg.a.devices,
        cfg.a.layout,
        format_size(file.len())
    );
    if let Some(f) = cfg.a.compute {
        say!(
            "compute: each block read is {}, 8 bytes back a block ({})",
            match f {
                compute::Compute::Sum => "summed as 64-bit words",
                compute::Compute::Search =>
                    "searched for a key among its 64-bit words (binary search)",
            },
            if cfg.a.access == args::AccessArg::Ref {
                "setcache: in place, through a page reference"
            } else {
                "setcache: on its copy; setcache-numa: in place, a task in its partition"
            }
        );
    }
    if !cfg.jobs.is_empty() {
        return run_jobs(&bench).map_err(explain);
    }
    let mut runs: Vec<RunResult> = Vec::new();
    let result = run_all(&bench, fio.as_deref(), &mut runs);
    if !runs.is_empty() {
        out!("{}", report::table(&runs));
        for n in report::unsteady(&runs) {
            out!("{n}");
        }
    }
    result.map_err(explain)?;
    report::write_outputs(&cfg, &runs).map_err(|e| fsize::explain(e, &[]))?;
    if interrupted() {
        return Err("interrupted".to_string());
    }
    Ok(())
}

/// The `--job` runs: all jobs together, `--repeat` times; each round's
/// lines, then each job's median round (by IOPS), and the JSON.
fn run_jobs(b: &Bench) -> Result<(), String> {
    let a = &b.cfg.a;
    let mut rounds: Vec<Vec<jobs::JobResult>> = Vec::new();
    let mut ahead = Vec::new();
    for round in 0..a.repeat.max(1) as usize {
        if interrupted() {
            break;
        }
        prep::cold(&b.paths)?;
        let timing = Timing {
            runtime: a.runtime,
            ramp: a.ramp,
            progress: (!a.no_progress).then(|| format!("{} jobs", b.cfg.jobs.len())),
            bs: b.cfg.jobs[0].bs,
        };
        let (res, ra) = cached::run_jobs(
            b.store,
            &b.cfg.jobs,
            b.file.len(),
            a.cache_size,
            a.policy,
            a.readahead,
            a.seed,
            &timing,
        )?;
        for r in &res {
            say!("round {}  {}", round + 1, r.line());
        }
        ahead.push(ra);
        rounds.push(res);
    }
    let mut json_rounds = Vec::new();
    for (i, (res, ra)) in rounds.iter().zip(&ahead).enumerate() {
        json_rounds.push(serde_json::json!({
            "round": i + 1,
            "jobs": res.iter().map(|r| r.to_json(i + 1)).collect::<Vec<_>>(),
            "readahead_pages": ra.0,
            "readahead_used": ra.1,
        }));
    }
    out!("job medians over {} round(s):", rounds.len());
    for k in 0..b.cfg.jobs.len() {
        let mut all: Vec<&jobs::JobResult> = rounds.iter().filter_map(|r| r.get(k)).collect();
        all.sort_by(|x, y| x.iops().total_cmp(&y.iops()));
        if let Some(m) = all.get((all.len().max(1) - 1) / 2) {
            out!("{}", m.line());
        }
    }
    if let Some(p) = &a.json {
        let doc = serde_json::json!({ "job_rounds": json_rounds });
        let text = serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())?;
        std::fs::write(p, text + "\n").map_err(|e| format!("cannot write {}: {e}", p.display()))?;
        say!("wrote {}", p.display());
    }
    if interrupted() {
        return Err("interrupted".to_string());
    }
    Ok(())
}

fn run_all(b: &Bench, fio: Option<&Path>, runs: &mut Vec<RunResult>) -> Result<(), String> {
    let repeat = b.cfg.a.repeat.max(1) as usize;
    for &threads in &b.cfg.a.threads {
        for &hit in &b.cfg.hit_targets {
            // Every engine once per round, rounds back to back: a device that
            // drifts during the call drifts under every engine alike.
            let mut rounds: Vec<Vec<RunResult>> = Vec::new();
            for round in 0..repeat {
                let mut this = Vec::new();
                for (engine, api) in b.cfg.runs() {
                    if interrupted() {
                        break;
                    }
                    prep::cold(&b.paths)?;
                    let r = run_one(b, engine, api, threads, hit)?;
                    say!(
                        "{:<15} threads {threads:<3}{}{}  {:>10.0} IOPS  {:>8} MiB/s  p99 {:.1} us",
                        r.engine,
                        hit.map_or(String::new(), |h| format!(" hit target {:.0}%", h * 100.0)),
                        if repeat > 1 {
                            format!(" round {}/{repeat}", round + 1)
                        } else {
                            String::new()
                        },
                        r.iops(),
                        r.mib_s().map_or("-".to_string(), |m| format!("{m:.1}")),
                        r.out.lat.p99
                    );
                    this.push(r);
                }
                rounds.push(this);
            }
            runs.extend(report::medians(rounds));
        }
        if let Some(fio) = fio {
            if interrupted() {
                return Ok(());
            }
            prep::cold(&b.paths)?;
            match run_fio(b, fio, threads) {
                Ok(r) => runs.push(r),
                Err(e) => say!("note: {e}; fio run skipped"),
            }
        }
    }
    Ok(())
}

fn run_one(
    b: &Bench,
    engine: Engine,
    api: args::ApiArg,
    threads: usize,
    hit: Option<f64>,
) -> Result<RunResult, String> {
    let a = &b.cfg.a;
    let w = Workload {
        rw: a.rw,
        rwmix_read: b.cfg.rwmix_read,
        bs: a.bs,
        file_len: b.file.len(),
        dist: a.dist,
        hot: b.cfg.hot_spot(hit)?,
        seed: a.seed ^ mix64(threads as u64),
        replay: b.cfg.replay.clone(),
    };
    if let Some(r) = &b.cfg.replay {
        r.begin_run();
    }
    let label = format!(
        "{engine} {} {} x{threads}{}",
        if b.cfg.replay.is_some() {
            "trace".to_string()
        } else {
            a.rw.to_string()
        },
        format_size(a.bs),
        hit.map_or(String::new(), |h| format!(" hit {:.0}%", h * 100.0))
    );
    let timing = Timing {
        runtime: a.runtime,
        ramp: a.ramp,
        progress: (!a.no_progress).then_some(label),
        // A graph walk's reads are not --bs blocks: no MiB/s.
        bs: if a.rw == workload::Pattern::GraphWalk {
            0
        } else {
            a.bs
        },
    };
    let mut readahead = None;
    // Whether a replay made in a child process replayed its whole trace once.
    let mut replay_whole = None;
    let out = match engine {
        Engine::Direct | Engine::DirectCopy => direct::run(
            b.store,
            b.file,
            &w,
            threads,
            a.iodepth,
            std::time::Duration::from_micros(a.poll_us),
            (engine == Engine::DirectCopy).then(|| config::cache_bytes(a.cache_size, b.file.len())),
            b.cfg.touch(),
            &timing,
        )?,
        Engine::LinuxBuffered | Engine::LinuxDirect | Engine::Mmap => {
            let job = LinuxJob {
                engine,
                workload: w,
                threads,
                timing,
                layout: b.file.layout(),
                paths: b.paths.clone(),
                touch: b.cfg.touch(),
            };
            let cg = match (&b.cgroups, a.cache_size) {
                (Some(h), Some(_)) => Some(MemCgroup::create(h)?),
                _ => None,
            };
            let cap = cg
                .as_ref()
                .zip(a.cache_size)
                .map(|(cgroup, cache_bytes)| child::Cap {
                    cgroup,
                    cache_bytes,
                });
            let (out, whole) = child::run_in_child(&job, cap)?;
            replay_whole = whole;
            out
        }
        Engine::Setcache => {
            let calls = cached::Calls {
                api: match api {
                    args::ApiArg::Queue => cached::Api::Queue,
                    args::ApiArg::Sync => cached::Api::Sync,
                    args::ApiArg::Async => cached::Api::Async,
                },
                touch: b.cfg.touch().map(|n| n as usize),
                compute: a.compute,
                futures_cpus: a.futures_cpus.clone(),
            };
            let (out, ra) = cached::run(
                b.store,
                &w,
                threads,
                a.iodepth,
                a.cache_size,
                a.policy,
                a.readahead,
                calls,
                &timing,
            )?;
            readahead = Some(ra);
            out
        }
        Engine::SetcacheNuma => numa::run(
            b.store,
            &w,
            threads,
            a.iodepth,
            a.cache_size,
            a.policy,
            a.partitions.map(|n| n as usize),
            a.compute,
            &timing,
        )?,
    };
    if let Some(r) = b.cfg.replay.as_ref().filter(|r| r.trace.n_writes > 0) {
        if replay_whole.unwrap_or_else(|| r.made_a_pass()) {
            check_replay_writes(b, engine, r, a.bs)?;
        } else {
            say!(
                "note: {engine}: the run ended before every thread had replayed its whole share of \
                 the trace once, so which blocks it wrote is not known: its writes are not checked"
            );
        }
    }
    // A run in which no request finished measured nothing: its row of zeros
    // would read as a figure.
    if out.ops == 0 && !out.interrupted {
        return Err(format!(
            "{}: no request finished in the measured {:.2} s ({threads} threads, {} requests \
             in flight each): give a longer --runtime or --ramp, or fewer requests in flight",
            engine.name(),
            out.secs,
            if engine.is_async() { a.iodepth } else { 1 }
        ));
    }
    Ok(RunResult {
        // With several APIs, the setcache engine's rows say which.
        engine: if engine == Engine::Setcache && b.cfg.apis.len() > 1 {
            format!("{}/{}", engine.name(), api_name(api))
        } else {
            engine.name().to_string()
        },
        rw: a.rw,
        bs: a.bs,
        threads,
        iodepth: if engine.is_async() && !(engine == Engine::Setcache && api == args::ApiArg::Sync)
        {
            a.iodepth
        } else {
            1
        },
        cache_size: a.cache_size,
        hit_target: hit,
        out,
        rounds: Vec::new(),
        vs_first: None,
        readahead,
    })
}

/// `--api`'s name for `api`.
fn api_name(api: args::ApiArg) -> &'static str {
    match api {
        args::ApiArg::Queue => "queue",
        args::ApiArg::Sync => "sync",
        args::ApiArg::Async => "async",
    }
}

/// Most written blocks a replay's check reads back.
const CHECKED_BLOCKS: usize = 4096;

/// After a replay that wrote (and made its writes durable), read back from
/// the device a spread of the blocks the trace writes (every one, up to
/// [`CHECKED_BLOCKS`]) and check each holds what every write of it wrote.
fn check_replay_writes(
    b: &Bench,
    engine: Engine,
    r: &workload::Replay,
    bs: u64,
) -> Result<(), String> {
    let blocks = workload::written_blocks(r);
    let step = blocks.len().div_ceil(CHECKED_BLOCKS).max(1);
    let mut want = vec![0u8; bs as usize];
    let mut checked = 0;
    for &block in blocks.iter().step_by(step) {
        let at = block * bs;
        // Whole 4 KiB pages around the block, for the uncached read.
        let from = at / 4096 * 4096;
        let to = (at + bs).div_ceil(4096) * 4096;
        let mut got = setcache::AlignedBuf::new((to - from) as usize);
        b.file
            .read_at(from, &mut got)
            .map_err(|e| format!("replay check: read of block {block}: {e}"))?;
        workload::fill_block(block, &mut want);
        let i = (at - from) as usize;
        if got[i..i + bs as usize] != want[..] {
            return Err(format!(
                "replay check ({engine}): block {block} (bytes {at}..{}) does not hold what the \
                 replay wrote there",
                at + bs
            ));
        }
        checked += 1;
    }
    say!(
        "{engine}: {checked} of the {} blocks the trace writes read back as written",
        blocks.len()
    );
    Ok(())
}

fn run_fio(b: &Bench, fio: &Path, threads: usize) -> Result<RunResult, String> {
    let a = &b.cfg.a;
    let job = fio::FioJob {
        rw: a.rw,
        rwmix_read: b.cfg.rwmix_read,
        bs: a.bs,
        iodepth: a.iodepth,
        threads,
        runtime: a.runtime,
        ramp: a.ramp,
        dist: a.dist,
        paths: b.paths.clone(),
        per_device: b.file.layout().device_bytes(b.file.len()),
    };
    say!("fio {}", fio::fio_args(&job).join(" "));
    let out = fio::run(fio, &job)?;
    Ok(RunResult {
        engine: "fio".to_string(),
        rw: a.rw,
        bs: a.bs,
        threads,
        iodepth: a.iodepth,
        cache_size: a.cache_size,
        hit_target: None,
        out,
        rounds: Vec::new(),
        vs_first: None,
        readahead: None,
    })
}

/// Find the memory cgroup for the Linux engines, or say the cache is unconstrained.
fn cgroup_setup(cfg: &Config) -> Option<Hierarchy> {
    let Some(cache) = cfg.a.cache_size else {
        say!("page cache unconstrained (no --cache-size given)");
        return None;
    };
    let trial = cgroup::detect().and_then(|h| {
        let cg = MemCgroup::create(&h)?;
        cg.set_limit(u64::MAX / 2)?;
        say!(
            "Linux engines run in memory cgroups under {} limited to {} + their own memory",
            cg.path()
                .parent()
                .map_or(String::new(), |p| p.display().to_string()),
            format_size(cache)
        );
        Ok(h)
    });
    match trial {
        Ok(h) => Some(h),
        Err(why) => {
            say!("page cache unconstrained ({why})");
            None
        }
    }
}
