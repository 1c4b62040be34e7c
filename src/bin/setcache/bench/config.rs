//! Validation of the bench flags, all together, into a [`Config`].

use std::path::Path;
use std::sync::Arc;

use setcache::EngineKind;

use super::args::{AccessArg, ApiArg, BenchArgs, IoEngineArg};
use super::engine::Engine;
use super::jobs::{Job, resolve};
use super::size::format_size;
use super::workload::{Dist, HotSpot, Pattern, Replay, WALK_MAX_READ};

/// Page size the block size is checked against.
const PAGE: u64 = 4096;

/// The validated bench settings.
#[derive(Clone, Debug)]
pub(crate) struct Config {
    pub(crate) a: BenchArgs,
    /// Engines, duplicates removed, in the order given.
    pub(crate) engines: Vec<Engine>,
    /// The setcache engine's APIs (`--api`), duplicates removed, in the
    /// order given: the engine runs once with each in every round.
    pub(crate) apis: Vec<ApiArg>,
    /// Hit-ratio targets as fractions; `[None]` when not given.
    pub(crate) hit_targets: Vec<Option<f64>>,
    pub(crate) rwmix_read: u8,
    /// `--job` runs, defaults filled in (empty without `--job`).
    pub(crate) jobs: Vec<Job>,
    /// The trace of `--trace`, loaded.
    pub(crate) replay: Option<Arc<Replay>>,
}

impl Config {
    /// The runs of one round, in turn: each engine, and the setcache engine
    /// once with each API.
    pub(crate) fn runs(&self) -> Vec<(Engine, ApiArg)> {
        let mut runs = Vec::new();
        for &e in &self.engines {
            if e == Engine::Setcache {
                runs.extend(self.apis.iter().map(|&p| (e, p)));
            } else {
                runs.push((e, self.apis[0]));
            }
        }
        runs
    }

    pub(crate) fn io_engine(&self) -> EngineKind {
        match self.a.io_engine {
            IoEngineArg::Auto => EngineKind::Auto,
            IoEngineArg::Uring => EngineKind::Uring,
            IoEngineArg::Psync => EngineKind::Psync,
        }
    }

    /// Bytes read from each block with `--access ref`.
    pub(crate) fn touch(&self) -> Option<u64> {
        (self.a.access == AccessArg::Ref).then_some(self.a.touch)
    }

    pub(crate) fn max_threads(&self) -> usize {
        self.a.threads.iter().copied().max().unwrap_or(1)
    }

    /// The hot region of a hit-ratio run.
    pub(crate) fn hot_spot(&self, target: Option<f64>) -> Result<Option<HotSpot>, String> {
        let (Some(ratio), Some(cache)) = (target, self.a.cache_size) else {
            return Ok(None);
        };
        let blocks = self.a.file_size / self.a.bs;
        match self.a.hot_size {
            Some(hot) => HotSpot::sized(ratio, hot, self.a.bs, blocks).map(Some),
            None => HotSpot::for_cache(ratio, cache, self.a.bs, blocks).map(Some),
        }
    }
}

/// Check that a block size suits uncached I/O and whole pages.
pub(crate) fn check_bs(bs: u64) -> Result<(), String> {
    check_io_unit("--bs", "block size", bs)
}

/// Check that `bytes`, the value of `flag` (a size of `what`), suits uncached
/// I/O and whole pages: a multiple of 512 that divides the 4k page or is a
/// multiple of it. `bench --bs` and `sim --page-size` share this rule.
pub(crate) fn check_io_unit(flag: &str, what: &str, bytes: u64) -> Result<(), String> {
    let divides = bytes > 0 && bytes <= PAGE && PAGE.is_multiple_of(bytes);
    if bytes < 512 || !bytes.is_multiple_of(512) || !(divides || bytes.is_multiple_of(PAGE)) {
        return Err(format!(
            "{flag} {} ({bytes} bytes) is not usable: the {what} must be a multiple of 512 \
             that divides the 4k page (512, 1k, 2k) or is a multiple of it (4k, 8k, 12k, ...)",
            format_size(bytes)
        ));
    }
    Ok(())
}

/// Whether `a` and `b` name one file: the same file if both exist, else the
/// same name in the same directory.
fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    if let (Ok(x), Ok(y)) = (std::fs::metadata(a), std::fs::metadata(b)) {
        return (x.dev(), x.ino()) == (y.dev(), y.ino());
    }
    let place = |p: &Path| {
        let dir = p.parent().filter(|d| !d.as_os_str().is_empty());
        let dir = dir.map_or_else(|| Path::new(".").canonicalize(), Path::canonicalize);
        dir.ok().map(|d| d.join(p.file_name().unwrap_or_default()))
    };
    place(a).is_some_and(|x| Some(x) == place(b))
}

/// Open `out` for writing as the run's end will, changing nothing: an
/// existing regular file is opened without truncating it; a new one is
/// created and removed again. Finds a read-only file system, a file or
/// directory without write permission and a name too long before the run,
/// not after it. Anything else that exists (a FIFO, a terminal, a device) is
/// left unopened: an open and close would end a reader already waiting on a
/// FIFO, or block for one.
fn try_write(out: &Path) -> std::io::Result<()> {
    use std::fs::OpenOptions;
    match std::fs::metadata(out) {
        Ok(m) if !m.is_file() => Ok(()),
        Ok(_) => OpenOptions::new().write(true).open(out).map(drop),
        // A link to a missing file is left as it is: the run's end creates its target.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && out.is_symlink() => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            OpenOptions::new().write(true).create_new(true).open(out)?;
            std::fs::remove_file(out)
        }
        Err(e) => Err(e),
    }
}

/// The name of the marker of a completely prefilled bench file, beside the
/// device roots (`prep` writes it; results must not).
pub(crate) const MARKER: &str = "bench.filled";

/// Refuse output files that cannot be written, before anything runs: an
/// empty path, one whose parent is not a directory, one that is a
/// directory or that cannot be opened for writing; one that is the trace file `input` or another of the outputs
/// (the results would be written over what was read, or over each other);
/// and one named as a setcache store names its files (a backing `.scf`, the
/// store's `.setcache-*`), which results would overwrite. `bench`, `sim` and
/// `graph` share this check.
pub(crate) fn check_outputs<'a>(
    outs: impl IntoIterator<Item = &'a Path>,
    input: Option<&Path>,
) -> Result<(), String> {
    let outs: Vec<&Path> = outs.into_iter().collect();
    for (k, &out) in outs.iter().enumerate() {
        if out.as_os_str().is_empty() {
            return Err("cannot write to an empty path: give the output a file name".into());
        }
        let name = out.file_name().map(|n| n.to_string_lossy().into_owned());
        if let Some(n) = name.filter(|n| n.ends_with(".scf") || n.starts_with(".setcache")) {
            return Err(format!(
                "cannot write {}: {n} is named as a setcache store names its files (a backing \
                 .scf, the store's .setcache-*), which the results would overwrite",
                out.display()
            ));
        }
        if let Some(i) = input.filter(|&i| same_file(out, i)) {
            return Err(format!(
                "cannot write {}: it is the trace file {}, which the run reads",
                out.display(),
                i.display()
            ));
        }
        if let Some(other) = outs[..k].iter().find(|&&o| same_file(out, o)) {
            return Err(format!(
                "cannot write both --json and --plot to one file ({} and {})",
                other.display(),
                out.display()
            ));
        }
        let parent = out.parent().filter(|p| !p.as_os_str().is_empty());
        if let Some(p) = parent
            && !p.is_dir()
        {
            return Err(format!(
                "cannot write {}: {} is not a directory",
                out.display(),
                p.display()
            ));
        }
        if out.is_dir() {
            return Err(format!("cannot write {}: it is a directory", out.display()));
        }
        try_write(out).map_err(|e| format!("cannot write {}: {e}", out.display()))?;
    }
    Ok(())
}

/// Frames of `bs` bytes each of `threads` threads gets of `direct-copy`'s pool
/// of `pool` bytes.
pub(crate) fn frames_per_thread(pool: u64, threads: usize, bs: u64) -> u64 {
    pool / threads.max(1) as u64 / bs
}

/// The cache size a run uses: `--cache-size`, else a quarter of the file.
pub(crate) fn cache_bytes(cache_size: Option<u64>, file_len: u64) -> u64 {
    cache_size.unwrap_or((file_len / 4).max(16 << 20))
}

/// The options of an engine's cache: `cache_size`, else a quarter of the file
/// of `file_len` bytes; its sets divided among `partitions` (0: one per node).
pub(crate) fn cache_options(
    cache_size: Option<u64>,
    file_len: u64,
    policy: Option<setcache::PolicyKind>,
    partitions: usize,
) -> setcache::CacheOptions {
    let defaults = setcache::CacheOptions::default();
    setcache::CacheOptions {
        size: cache_bytes(cache_size, file_len) as usize,
        policy: policy.unwrap_or(defaults.policy),
        partitions,
        ..defaults
    }
}

/// Over `--job`'s jobs, the sum of threads x iodepth x `each(bs)` (a
/// request's bytes, or its pages).
fn jobs_in_flight(a: &BenchArgs, each: impl Fn(u64) -> u64) -> u64 {
    a.job.iter().fold(0u64, |sum, j| {
        (j.threads as u64)
            .saturating_mul(u64::from(j.iodepth.unwrap_or(a.iodepth)))
            .saturating_mul(each(j.bs.unwrap_or(a.bs)))
            .saturating_add(sum)
    })
}

/// Refuse a cache that the in-process engines (setcache's cache, direct-copy's
/// frame pool) could not hold, before anything runs: the memory is reserved
/// up front and touched as the run goes, so it would fail only once the
/// kernel kills the process. The Linux engines' `--cache-size` is a cgroup
/// limit, which no process allocates, so they are not checked.
fn check_cache_memory(a: &BenchArgs, engines: &[Engine]) -> Result<(), String> {
    let holders: Vec<&str> = engines
        .iter()
        .filter(|e| {
            matches!(
                e,
                Engine::Setcache | Engine::SetcacheNuma | Engine::DirectCopy
            )
        })
        .map(|e| e.name())
        .collect();
    // Every engine's requests have buffers: threads x depth x block size,
    // or with `--job` the sum of that over the jobs, each with its own.
    let (buffers, buffer_text) = if a.job.is_empty() {
        let threads = a.threads.iter().copied().max().unwrap_or(1) as u64;
        let b = threads
            .saturating_mul(u64::from(a.iodepth))
            .saturating_mul(a.bs);
        let text = format!(
            "request buffers of {} ({threads} threads x --iodepth {} x --bs {})",
            format_size(b),
            a.iodepth,
            format_size(a.bs)
        );
        (b, text)
    } else {
        let b = jobs_in_flight(a, |bs| bs);
        let text = format!(
            "request buffers of {} (each --job's threads x iodepth x bs, summed)",
            format_size(b)
        );
        (b, text)
    };
    if holders.is_empty() {
        return setcache::cache::check_memory(buffers, || buffer_text).map_err(|e| e.to_string());
    }
    let bytes = cache_bytes(a.cache_size, a.file_size);
    let origin = match a.cache_size {
        Some(_) => "--cache-size",
        None => "a quarter of --file-size, no --cache-size given",
    };
    setcache::cache::check_memory(bytes.saturating_add(buffers), || {
        format!(
            "cache of {} ({origin}; held in this process by {}) and {buffer_text}",
            format_size(bytes),
            holders.join(" and ")
        )
    })
    .map_err(|e| e.to_string())
}

/// Refuse, before any engine runs, a cache that an engine could not make (one
/// too small for a set per partition), and more than four times as many
/// pages in flight as an engine's cache holds: each miss in flight holds a
/// frame until its request ends, so requests wait for frames that others
/// hold, each up to the cache's pin wait, and such a run went on many times
/// longer than asked and failed `busy` (up to twice as many ran, on a fast
/// device).
fn check_cache_engines(a: &BenchArgs, engines: &[Engine]) -> Result<(), String> {
    for &e in engines {
        let partitions = match e {
            Engine::Setcache => 1,
            Engine::SetcacheNuma => a.partitions.map_or(0, |n| n as usize),
            _ => continue,
        };
        let opts = cache_options(a.cache_size, a.file_size, a.policy, partitions);
        setcache::PageCache::<setcache::cache::sync::Os>::check(&opts)
            .map_err(|err| format!("{} engine: {err}", e.name()))?;
        let page = opts.page_size as u64;
        // A request's pages: one more for a block that may cross a page.
        let pages = |bs: u64| {
            bs.div_ceil(page) + u64::from(!bs.is_multiple_of(page) && !page.is_multiple_of(bs))
        };
        let sync = e == Engine::Setcache && a.api.iter().all(|&p| p == ApiArg::Sync);
        let (in_flight, how) = if a.job.is_empty() {
            let threads = a.threads.iter().copied().max().unwrap_or(1) as u64;
            let depth = if sync { 1 } else { u64::from(a.iodepth) };
            let n = threads.saturating_mul(depth).saturating_mul(pages(a.bs));
            let depth_text = if sync {
                "1 call (--api sync)".to_string()
            } else {
                format!("--iodepth {}", a.iodepth)
            };
            let text = format!(
                "{threads} threads x {depth_text} x {} page(s) a request",
                pages(a.bs)
            );
            (n, text)
        } else {
            let n = jobs_in_flight(a, pages);
            (
                n,
                "each --job's threads x iodepth x pages a request, summed".to_string(),
            )
        };
        let cache_pages = opts.size as u64 / page;
        if in_flight > cache_pages.saturating_mul(4) {
            return Err(format!(
                "{} engine: {how} keep {in_flight} pages in flight, more than four times the \
                 {cache_pages} pages of its cache of {} ({}): each miss holds a frame until its \
                 request ends, so requests would wait for frames that others hold and fail \
                 busy; give a smaller --iodepth or fewer threads, or a larger --cache-size",
                e.name(),
                format_size(opts.size as u64),
                if a.cache_size.is_some() {
                    "--cache-size"
                } else {
                    "no --cache-size: a quarter of the file, at least 16M"
                },
            ));
        }
    }
    Ok(())
}

/// Load the trace of `--trace` and size the file to it; refuse the flags
/// that describe generated requests.
fn load_trace(a: &mut BenchArgs) -> Result<Option<Arc<Replay>>, String> {
    let Some(spec) = a.trace.clone() else {
        if a.trace_passes > 0 || a.replay_speed.is_some() {
            return Err("--trace-passes and --replay-speed apply to --trace runs only".to_string());
        }
        return Ok(None);
    };
    let clash = [
        (a.given("rw"), "--rw"),
        (a.rwmix_read.is_some(), "--rwmix-read"),
        (a.given("dist"), "--dist"),
        (!a.hit_ratio.is_empty(), "--hit-ratio"),
        (a.hot_size.is_some(), "--hot-size"),
        (!a.job.is_empty(), "--job"),
        (a.compare_fio, "--compare-fio"),
        (a.access == AccessArg::Ref, "--access ref"),
        (a.given("file_size"), "--file-size"),
    ];
    if let Some((_, flag)) = clash.iter().find(|c| c.0) {
        return Err(format!(
            "--trace replays the trace's own requests over a file sized to its footprint: drop {flag}"
        ));
    }
    if a.trace_passes > 0 && a.ramp > 0.0 {
        return Err(
            "--trace-passes counts every access from the start: drop --ramp (or --trace-passes)"
                .to_string(),
        );
    }
    if let Some(x) = a.replay_speed
        && !(1e-6..=1e6).contains(&x)
    {
        return Err(format!(
            "--replay-speed {x:?}: give a multiple of the trace's timing from 0.000001 to 1000000"
        ));
    }
    let trace = setcache::hitsim::load(&spec, a.bs).map_err(|e| format!("--trace: {e}"))?;
    if a.replay_speed.is_some() && trace.times.is_empty() {
        return Err(format!(
            "--replay-speed: trace {spec} has no timestamps (only msr, systor and cbs traces do)"
        ));
    }
    let bytes = (trace.footprint as u64)
        .checked_mul(a.bs)
        .map(|b| b.div_ceil(PAGE) * PAGE)
        .ok_or_else(|| {
            format!(
                "--trace: {} pages of {} bytes overflow",
                trace.footprint, a.bs
            )
        })?;
    a.file_size = bytes;
    if trace.n_writes > 0 {
        // The engines fill write buffers for patterns that write.
        a.rw = Pattern::RandRw;
    }
    say!(
        "trace {spec}: {} accesses ({} writes) to {} pages of {} bytes; file {}",
        trace.len(),
        trace.n_writes,
        trace.footprint,
        a.bs,
        format_size(bytes)
    );
    Ok(Some(Arc::new(
        Replay::new(spec, trace, a.trace_passes, a.replay_speed).until(a.ramp + a.runtime),
    )))
}

pub(crate) fn validate(mut a: BenchArgs) -> Result<Config, String> {
    // The cached engines take requests of any size; the others need whole
    // sectors (and whole pages, or a part of one).
    let uncached: Vec<&str> = a
        .engine
        .iter()
        .filter(|e| !e.is_cached())
        .map(|e| e.name())
        .collect();
    if a.bs == 0 {
        return Err("--bs 0: a request needs at least one byte".to_string());
    }
    let job_bs = a.job.iter().filter_map(|j| j.bs);
    for bs in job_bs.filter(|_| !uncached.is_empty()) {
        check_bs(bs)?;
    }
    if !uncached.is_empty() {
        check_bs(a.bs).map_err(|e| {
            format!(
                "{e}; the uncached engines ({}) need this, the cached ones (setcache, \
                 setcache-numa, linux-buffered, mmap) take any size",
                uncached.join(", ")
            )
        })?;
    }
    if a.rw == Pattern::GraphWalk {
        if !uncached.is_empty() {
            return Err(format!(
                "--rw graphwalk reads 16 to {WALK_MAX_READ} bytes anywhere: the cached engines \
                 (setcache, setcache-numa, linux-buffered, mmap) only, not {}",
                uncached.join(", ")
            ));
        }
        if a.bs < WALK_MAX_READ {
            return Err(format!(
                "--rw graphwalk needs --bs of at least {WALK_MAX_READ} (its longest read), not {}",
                a.bs
            ));
        }
        if a.access == AccessArg::Ref {
            return Err("--rw graphwalk copies its reads: drop --access ref".to_string());
        }
    }
    let replay = load_trace(&mut a)?;
    if a.file_size == 0 || !a.file_size.is_multiple_of(PAGE) {
        return Err(format!(
            "--file-size {} is not a positive multiple of 4k",
            format_size(a.file_size)
        ));
    }
    let max_threads = a.threads.iter().copied().max().unwrap_or(1) as u64;
    if a.file_size / a.bs < max_threads {
        return Err(format!(
            "--file-size {} holds fewer {}-byte blocks than threads ({max_threads})",
            format_size(a.file_size),
            a.bs
        ));
    }
    if a.cache_size == Some(0) {
        return Err("--cache-size must be above 0".to_string());
    }
    if a.cache_size.is_some()
        && a.hit_ratio.is_empty()
        && a.engine.iter().all(|e| *e == Engine::Direct)
    {
        // A note, as for --rwmix-read: scripts pass one set of flags to
        // several engines in turn.
        say!(
            "note: --cache-size sizes the caches and the hot region of --hit-ratio; --engine \
             direct without --hit-ratio uses neither; ignored"
        );
    }
    if a.rwmix_read.is_some() && a.rw != Pattern::RandRw && a.job.is_empty() {
        say!("note: --rwmix-read only applies to --rw randrw; ignored");
    }
    if !a.rw.is_random() && a.dist != Dist::Uniform {
        return Err(format!(
            "--dist {} needs a random --rw (randread, randwrite or randrw)",
            a.dist
        ));
    }
    if a.hot_size.is_some() && a.hit_ratio.is_empty() {
        return Err("--hot-size only applies to --hit-ratio runs".to_string());
    }
    if let Some(hot) = a.hot_size.filter(|h| h % a.bs != 0) {
        return Err(format!(
            "--hot-size {} is not a whole number of --bs {} blocks (the hot region is made of \
             blocks): give a multiple of {}",
            format_size(hot),
            format_size(a.bs),
            a.bs
        ));
    }
    let mut hit_targets: Vec<Option<f64>> = Vec::new();
    if !a.hit_ratio.is_empty() {
        let Some(cache) = a.cache_size else {
            return Err("--hit-ratio needs --cache-size (the hot region is 3/4 of it)".to_string());
        };
        if !matches!(a.rw, Pattern::RandRead | Pattern::RandRw) {
            return Err(format!(
                "--hit-ratio needs --rw randread or randrw, not {}",
                a.rw
            ));
        }
        if a.dist != Dist::Uniform {
            return Err("--hit-ratio and --dist zipf cannot be combined".to_string());
        }
        match a.hot_size {
            Some(hot) => HotSpot::sized(0.5, hot, a.bs, a.file_size / a.bs)?,
            None => HotSpot::for_cache(0.5, cache, a.bs, a.file_size / a.bs)?,
        };
        if let Some(hot) = a.hot_size.filter(|&h| h > cache) {
            say!(
                "note: --hot-size {} is larger than --cache-size {}: the hot region does not fit, \
                 so a cache's hit ratio stays under the target (the measured one is in the table)",
                format_size(hot),
                format_size(cache)
            );
        }
        for &p in &a.hit_ratio {
            let f = p / 100.0;
            if !hit_targets.contains(&Some(f)) {
                hit_targets.push(Some(f));
            }
        }
    } else {
        hit_targets.push(None);
    }
    // The bench's own marker of a filled bench file, beside the device
    // roots: results written over it would have the next run fill again.
    if let Some(dir) = &a.dir {
        let marker = dir.join(MARKER);
        if let Some(out) = [&a.json, &a.plot]
            .into_iter()
            .flatten()
            .find(|o| same_file(o, &marker) || *o == &marker)
        {
            return Err(format!(
                "cannot write {}: it is the bench's marker of a filled bench file in {}",
                out.display(),
                dir.display()
            ));
        }
    }
    check_outputs(
        [&a.json, &a.plot]
            .into_iter()
            .flatten()
            .map(|p| p.as_path()),
        a.trace
            .as_deref()
            .and_then(setcache::hitsim::trace::file_of)
            .map(Path::new),
    )?;
    let mut engines = Vec::new();
    for &e in &a.engine {
        e.available()?;
        if !engines.contains(&e) {
            engines.push(e);
        }
    }
    if engines.is_empty() {
        return Err("--engine lists no engine".to_string());
    }
    check_cache_memory(&a, &engines)?;
    let rwmix_read = a.rwmix_read.unwrap_or(50);
    if a.access == AccessArg::Ref {
        if a.rw.writes() {
            return Err(format!(
                "--access ref reads: give a read-only --rw, not {}",
                a.rw
            ));
        }
        if a.bs > PAGE || !PAGE.is_multiple_of(a.bs) || a.touch > a.bs {
            return Err(format!(
                "--access ref reads --touch {} bytes at the start of each --bs {} block inside one \
                 4k page: --bs must divide 4k and --touch be at most --bs",
                a.touch, a.bs
            ));
        }
        // Each request in flight holds its page from the moment it is sent.
        if engines.contains(&Engine::Setcache)
            && a.api.iter().any(|&p| p != ApiArg::Sync)
            && a.iodepth as usize > setcache::MAX_GUARDS_PER_THREAD
        {
            return Err(format!(
                "--access ref holds a page reference for each request in flight, and a thread \
                 may hold {} at once: --iodepth {} is more",
                setcache::MAX_GUARDS_PER_THREAD,
                a.iodepth
            ));
        }
    }
    if a.compute.is_some() {
        if a.rw.writes() {
            return Err(format!(
                "--compute sums the blocks it reads (or searches them): give a read-only --rw, not {}",
                a.rw
            ));
        }
        if a.bs > PAGE || !PAGE.is_multiple_of(a.bs) || !a.bs.is_multiple_of(8) {
            return Err(format!(
                "--compute sums (or searches) each --bs {} block inside one 4k page as 64-bit words: --bs must divide 4k and be a multiple of 8",
                a.bs
            ));
        }
        if let Some(e) = engines
            .iter()
            .find(|e| !matches!(e, Engine::Setcache | Engine::SetcacheNuma))
        {
            return Err(format!(
                "--compute runs on the setcache and setcache-numa engines, not {}",
                e.name()
            ));
        }
        if a.rw == Pattern::GraphWalk {
            return Err(
                "--compute sums whole blocks inside one page; --rw graphwalk reads records \
                 across pages: drop one of them"
                    .to_string(),
            );
        }
        if a.api.iter().any(|&p| p != ApiArg::Queue) {
            return Err(
                "--compute runs with the queue API (a callback per block): drop --api".to_string(),
            );
        }
    }
    // The setcache-numa engine copies whole blocks (or, with --compute, sums
    // them in place, as the setcache engine does through page references)
    // with its own readahead: flags that change what the setcache engine
    // does would leave the two rows doing different work under one heading.
    if engines.contains(&Engine::SetcacheNuma) {
        let setcache_only = [
            (
                a.access != AccessArg::Copy && a.compute.is_none(),
                "--access",
            ),
            (a.readahead.is_some(), "--readahead"),
        ];
        if let Some((_, flag)) = setcache_only.iter().find(|c| c.0) {
            return Err(format!(
                "{flag} applies to the setcache engine, not setcache-numa: run them in \
                 separate calls"
            ));
        }
    }
    // Flags of one kind of engine, in a call where none runs, would be taken
    // and ignored: refused, as --partitions is.
    let cached = engines
        .iter()
        .any(|e| matches!(e, Engine::Setcache | Engine::SetcacheNuma));
    let unused = [
        (
            a.policy.is_some() && !cached,
            "--policy sets the cache's policy of the setcache engines: give --engine setcache or setcache-numa",
        ),
        (
            a.readahead.is_some() && !engines.contains(&Engine::Setcache),
            "--readahead sets the setcache engine's readahead: give --engine setcache",
        ),
        (
            a.api.iter().any(|&p| p != ApiArg::Queue) && !engines.contains(&Engine::Setcache),
            "--api chooses how the setcache engine is called: give --engine setcache",
        ),
        (
            a.futures_cpus.is_some()
                && !(engines.contains(&Engine::Setcache) && a.api.contains(&ApiArg::Async)),
            "--futures-cpus places the setcache engine's futures' workers: give --engine setcache --api async",
        ),
        (
            a.given("poll_us")
                && !engines
                    .iter()
                    .any(|e| matches!(e, Engine::Direct | Engine::DirectCopy)),
            "--poll-us sets how long a direct engine's thread polls: give --engine direct or direct-copy",
        ),
        (
            a.access == AccessArg::Ref
                && !engines
                    .iter()
                    .any(|e| matches!(e, Engine::Setcache | Engine::DirectCopy | Engine::Mmap)),
            "--access ref changes what the setcache, direct-copy and mmap engines do with a \
             block: give one of them",
        ),
        (
            a.given("touch") && a.access != AccessArg::Ref,
            "--touch is the bytes an --access ref read touches: give --access ref",
        ),
    ];
    if let Some((_, why)) = unused.iter().find(|u| u.0) {
        return Err((*why).to_string());
    }
    if engines.contains(&Engine::DirectCopy) {
        // Each thread's share of the frame pool must hold its requests in
        // flight; a smaller pool would be raised, measuring another size.
        let pool = cache_bytes(a.cache_size, a.file_size);
        let threads = a.threads.iter().copied().max().unwrap_or(1);
        let frames = frames_per_thread(pool, threads, a.bs);
        if frames < u64::from(a.iodepth) {
            return Err(format!(
                "direct-copy's frame pool of {} ({}) gives each of its {threads} threads \
                 {frames} frames of --bs {}, fewer than its --iodepth {} requests in flight: \
                 give a larger --cache-size or a smaller --iodepth",
                format_size(pool),
                if a.cache_size.is_some() {
                    "--cache-size"
                } else {
                    "no --cache-size: a quarter of the file, at least 16M"
                },
                format_size(a.bs),
                a.iodepth
            ));
        }
    }
    check_cache_engines(&a, &engines)?;
    if a.partitions.is_some() && !engines.contains(&Engine::SetcacheNuma) {
        return Err(
            "--partitions sets the setcache-numa engine's partitions: give --engine setcache-numa"
                .to_string(),
        );
    }
    if let Some(&p) = a.api.iter().find(|&&p| p != ApiArg::Queue)
        && !a.job.is_empty()
    {
        return Err(format!(
            "--job runs use the queue API: drop --api {}",
            if p == ApiArg::Sync { "sync" } else { "async" }
        ));
    }
    let jobs = if a.job.is_empty() {
        Vec::new()
    } else {
        if engines != [Engine::Setcache] {
            return Err(
                "--job runs on the setcache engine alone: give --engine setcache".to_string(),
            );
        }
        if !a.hit_ratio.is_empty() || a.compare_fio || a.plot.is_some() {
            return Err(
                "--job cannot be combined with --hit-ratio, --compare-fio or --plot".to_string(),
            );
        }
        // A job's workload is its own: uniform offsets, half reads for randrw,
        // one thread, copies; flags for the generated workload would be
        // ignored, and the figures would name what was not run.
        let ignored: Vec<&str> = [
            (a.given("dist"), "--dist"),
            (a.rwmix_read.is_some(), "--rwmix-read"),
            (a.given("threads"), "--threads"),
            (a.access != AccessArg::Copy, "--access"),
            (a.compute.is_some(), "--compute"),
        ]
        .into_iter()
        .filter_map(|(given, flag)| given.then_some(flag))
        .collect();
        if !ignored.is_empty() {
            return Err(format!(
                "--job runs have workloads of their own (uniform offsets, half reads for \
                 randrw, copies; threads, depth and region from each job's keys): drop {}",
                ignored.join(", ")
            ));
        }
        let jobs = resolve(&a.job, a.bs, a.iodepth, a.file_size)?;
        // A job that starts after the run ends would report a row of zeros.
        if let Some(j) = jobs.iter().find(|j| j.delay >= a.ramp + a.runtime) {
            return Err(format!(
                "job {}: delay={}s would never start inside --ramp {} + --runtime {} s: \
                 lower the delay or lengthen the run",
                j.name, j.delay, a.ramp, a.runtime
            ));
        }
        if let Some(j) = jobs
            .iter()
            .find(|j| j.rw == Pattern::GraphWalk && j.bs < WALK_MAX_READ)
        {
            return Err(format!(
                "job {}: rw=graphwalk needs bs= of at least {WALK_MAX_READ} (its longest read), \
                 not {}",
                j.name, j.bs
            ));
        }
        // Each job names its own pattern.
        if a.given("rw") {
            return Err(format!(
                "--job runs take each job's rw=, and --rw {} would be ignored: drop --rw",
                a.rw
            ));
        }
        jobs
    };
    let mut apis = Vec::new();
    for &p in &a.api {
        if !apis.contains(&p) {
            apis.push(p);
        }
    }
    if apis.is_empty() {
        apis.push(ApiArg::Queue);
    }
    Ok(Config {
        a,
        engines,
        apis,
        hit_targets,
        rwmix_read,
        jobs,
        replay,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_sizes() {
        for ok in [512u64, 1024, 2048, 4096, 8192, 12288, 65536, 1 << 20] {
            assert!(check_bs(ok).is_ok(), "{ok}");
        }
        for bad in [0u64, 256, 1000, 1536, 3072, 5120, 4097] {
            assert!(check_bs(bad).is_err(), "{bad}");
        }
        assert!(check_bs(3072).unwrap_err().contains("--bs 3k"));
        let e = check_io_unit("--page-size", "page size", 3000).unwrap_err();
        assert!(
            e.contains("--page-size 3000") && e.contains("page size must"),
            "{e}"
        );
    }

    use crate::cli_tests::{BENCH_FLAGS, argv, parse};
    use crate::test_alloc::{input_bound, largest_alloc};
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Any `bench` flags that parse are validated into a configuration or refused.
        #[test]
        fn any_bench_flags_validate_or_are_refused(argv in argv("bench", BENCH_FLAGS, &[])) {
            let Ok(cli) = parse(&argv)? else {
                return Ok(());
            };
            let Some(crate::Command::Bench(mut a)) = cli.command else {
                return Err(TestCaseError::fail("bench arguments parsed as another command"));
            };
            // `--rwmix-read` without randrw only prints a note (to the real
            // stderr): leave it out.
            if a.rw != Pattern::RandRw {
                a.rwmix_read = None;
            }
            let n: usize = argv.iter().map(|s| s.len() + 1).sum();
            let (r, largest) = largest_alloc(|| validate(*a));
            prop_assert!(largest <= input_bound(n), "{argv:?}: {largest} bytes at once");
            match r {
                Ok(cfg) => {
                    // Whole sectors for the uncached engines; the cached ones
                    // take requests of any size.
                    if cfg.engines.iter().any(|e| !e.is_cached()) {
                        prop_assert!(check_bs(cfg.a.bs).is_ok());
                    } else {
                        prop_assert!(cfg.a.bs > 0);
                    }
                    prop_assert!(cfg.a.file_size > 0 && cfg.a.file_size % PAGE == 0);
                    prop_assert!(cfg.a.file_size / cfg.a.bs >= cfg.max_threads() as u64);
                    prop_assert!(!cfg.engines.is_empty());
                    prop_assert!(cfg.rwmix_read <= 100);
                    for t in &cfg.hit_targets {
                        prop_assert!(t.is_none_or(|f| (0.0..=1.0).contains(&f)));
                        // The hot region each run will use can be had.
                        prop_assert!(cfg.hot_spot(*t).is_ok());
                    }
                }
                Err(e) => prop_assert!(!e.is_empty()),
            }
        }
    }

    /// A bench command line on an 8 MiB file with a 4 MiB cache and a short
    /// run, then `args`.
    fn bench_argv(args: &[&str]) -> Vec<String> {
        ["setcache", "bench", "--dir", "/tmp/x", "--file-size"]
            .iter()
            .chain(&["8M", "--cache-size", "4M", "--runtime", "1", "--ramp", "0"])
            .chain(args)
            .map(|s| s.to_string())
            .collect()
    }

    /// Flags that would do nothing in the run they are given for are refused,
    /// naming what to change.
    #[test]
    fn flags_that_would_do_nothing_are_refused() {
        let refused = |args: &[&str], want: &str| {
            let argv = bench_argv(args);
            // Refused when parsed (a bad value) or when validated.
            let e = match parse(&argv).unwrap() {
                Err(e) => e,
                Ok(cli) => {
                    let Some(crate::Command::Bench(a)) = cli.command else {
                        panic!("not bench arguments");
                    };
                    validate(*a)
                        .err()
                        .unwrap_or_else(|| panic!("{args:?} accepted"))
                }
            };
            assert!(e.contains(want), "{args:?}: {e}");
        };
        let job = |spec| ["--engine", "setcache", "--rw", "read", "--job", spec];
        refused(
            &["--engine", "setcache", "--compute", "--rw", "randwrite"],
            "--compute sums the blocks it reads",
        );
        refused(
            &job("name=a,rw=read,delay=5"),
            "job a: delay=5s would never start",
        );
        refused(&job("rw=read,rw=randwrite"), "job key \"rw\" given twice");
        // A flag the run would ignore, given at its default value too.
        refused(
            &["--engine", "setcache", "--touch", "64"],
            "--touch is the bytes an --access ref read touches",
        );
        refused(
            &[
                "--engine",
                "setcache",
                "--job",
                "rw=randread",
                "--threads",
                "1",
            ],
            "drop --threads",
        );
        refused(
            &[
                "--engine",
                "setcache",
                "--job",
                "rw=randread",
                "--rw",
                "randread",
            ],
            "drop --rw",
        );
        refused(
            &["--engine", "setcache", "--json", "/tmp/x/bench.filled"],
            "the bench's marker of a filled bench file",
        );
        // (`bench_argv` gives --file-size; these give the default, 1G.)
        for (flag, value) in [("--file-size", "1G"), ("--rw", "randread")] {
            let argv: Vec<String> = ["setcache", "bench", "--dir", "/tmp/x", "--engine"]
                .iter()
                .chain(&[
                    "setcache",
                    "--trace",
                    "uniform:pages=100,ops=1000",
                    flag,
                    value,
                ])
                .map(|s| s.to_string())
                .collect();
            let Ok(Ok(cli)) = parse(&argv) else {
                panic!("{argv:?} did not parse");
            };
            let Some(crate::Command::Bench(a)) = cli.command else {
                panic!("not bench arguments");
            };
            let Err(e) = validate(*a) else {
                panic!("--trace with {flag} {value} accepted");
            };
            assert!(e.contains(&format!("drop {flag}")), "{flag}: {e}");
        }
        refused(
            &["--engine", "setcache", "--poll-us", "0"],
            "--poll-us sets how long a direct engine's thread polls",
        );
    }

    /// Settings the run would round or leave unused are refused, naming the
    /// flag; the same calls without them are taken.
    #[test]
    fn settings_that_would_be_rounded_or_ignored_are_refused() {
        let check = |args: &[&str]| -> Result<(), String> {
            let argv = bench_argv(args);
            let cli = parse(&argv).unwrap()?;
            let Some(crate::Command::Bench(a)) = cli.command else {
                panic!("not bench arguments");
            };
            validate(*a).map(|_| ())
        };
        let hot = ["--engine", "setcache", "--hit-ratio", "90", "--hot-size"];
        let walk = [
            "--engine",
            "setcache",
            "--job",
            "name=w,rw=graphwalk,bs=512",
        ];
        for (args, want) in [
            (
                &[&hot[..], &["6k"]].concat()[..],
                "is not a whole number of --bs",
            ),
            (
                &["--engine", "direct-copy", "--threads", "64"],
                "fewer than its --iodepth 32",
            ),
            (&walk, "job w: rw=graphwalk needs bs= of at least 640"),
            (
                &["--engine", "setcache", "--rw", "read", "--job", "rw=read"],
                "drop --rw",
            ),
            (
                &["--engine", "setcache", "--readahead", "100"],
                "whole number of 4k pages",
            ),
            (
                &["--engine", "setcache", "--readahead", "6k"],
                "whole number of 4k pages",
            ),
            (
                &["--engine", "setcache", "--futures-cpus", "0"],
                "give --engine setcache --api async",
            ),
            (
                &[
                    "--engine",
                    "direct",
                    "--api",
                    "async",
                    "--futures-cpus",
                    "0",
                ],
                "--api chooses",
            ),
            (
                &[
                    "--engine",
                    "setcache",
                    "--api",
                    "async",
                    "--futures-cpus",
                    "3-1",
                ],
                "`3-1` is not a CPU or a range",
            ),
            (
                &[
                    "--engine",
                    "setcache",
                    "--api",
                    "async",
                    "--futures-cpus",
                    "any",
                ],
                "`any` is not a CPU or a range",
            ),
        ] {
            let e = check(args)
                .err()
                .unwrap_or_else(|| panic!("{args:?} accepted"));
            assert!(e.contains(want), "{args:?}: {e}");
        }
        for args in [
            &["--engine", "setcache", "--api", "sync", "--iodepth", "8"][..],
            &["--engine", "linux-buffered", "--iodepth", "8"],
            &[&hot[..], &["8k"]].concat(),
            &["--engine", "direct-copy", "--threads", "32"],
            &["--engine", "setcache", "--job", "rw=read"],
            &["--engine", "setcache", "--readahead", "4k"],
            &["--engine", "setcache", "--readahead", "0k"],
            &[
                "--engine",
                "setcache",
                "--api",
                "async",
                "--futures-cpus",
                "0,2-3",
            ],
            &[
                "--engine",
                "setcache",
                "--api",
                "queue,async",
                "--futures-cpus",
                "anywhere",
            ],
            &["--engine", "direct,direct-copy"],
            &["--engine", "direct"],
            &["--engine", "direct", "--hit-ratio", "50"],
        ] {
            check(args).unwrap_or_else(|e| panic!("{args:?} refused: {e}"));
        }
    }
}
