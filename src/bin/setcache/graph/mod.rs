//! `setcache graph`: breadth-first search and PageRank on an R-MAT graph,
//! over in-memory vectors, over `PagedArray`s on setcache, and over an
//! mmap of the same files under the kernel's page cache held to the same
//! memory.
//!
//! The graph (see `rmat`) lives in a store whose one device directory is
//! `--dir`; it is generated once and reused. Each run of an algorithm on a
//! backing starts cold, with `--budget` bytes for everything it keeps: the
//! per-vertex arrays (`algo::vertex_bytes`) and, for setcache, the cache
//! (the budget less the arrays); for mmap, the process runs in a memory
//! cgroup limited to the budget (plus its own memory before the run), so
//! that its arrays and the page cache share it. Without `--budget` the
//! graph is read once before the timed part (everything cached). Every run
//! is checked: each search as Graph500 checks one, and its depths against
//! the in-memory run's; the ranks against the in-memory ranks (L1 distance
//! at most 1e-6).

mod algo;
mod child;
mod csr;
mod rmat;

use std::path::{Path, PathBuf};

use clap::Args;
use serde_json::{Value, json};
use setcache::{Advice, CacheOptions, CachedStore, PagedArray, Store, StoreOptions};

use crate::bench::rng::Rng;
use crate::bench::size::parse_size;
use algo::{Measured, run_algo, vertex_bytes};
use csr::{Graph, Paged, Slices};
use rmat::{Csr, Spec};

pub(crate) use child::{CHILD_SUBCOMMAND, child_main};

/// Graph analytics over setcache, mmap and memory.
#[derive(Args, Debug)]
pub(crate) struct GraphArgs {
    /// The flags given on the command line (clap's ids), as against those
    /// left at their defaults.
    #[arg(skip)]
    pub(crate) given: Vec<String>,
    /// Directory of the graph's store (one device directory; the graph is
    /// generated there once and reused)
    #[arg(long)]
    dir: PathBuf,
    /// log2 of the number of vertices
    #[arg(long, default_value_t = 16)]
    scale: u32,
    /// Generated edges per vertex (each stored in both directions)
    #[arg(long, default_value_t = 16)]
    edge_factor: u32,
    /// Seed of the graph and of the roots
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Threads of each run (and of the generator)
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Memory for each run: per-vertex arrays plus cache or page cache
    /// [default: no limit, everything cached before the timed part]
    #[arg(long)]
    budget: Option<String>,
    /// Backings (comma-separated): memory, setcache, mmap (default
    /// readahead), mmap-random (MADV_RANDOM)
    #[arg(
        long,
        default_value = "memory,setcache,mmap,mmap-random",
        value_delimiter = ','
    )]
    backing: Vec<String>,
    /// Algorithms (comma-separated): bfs, pagerank
    #[arg(long, default_value = "bfs,pagerank", value_delimiter = ',')]
    algo: Vec<String>,
    /// Searches, from random roots with at least one edge
    #[arg(long, default_value_t = DEFAULT_ROOTS)]
    roots: usize,
    /// PageRank iterations
    #[arg(long, default_value_t = DEFAULT_ITERATIONS)]
    iterations: usize,
    /// Reads each setcache thread keeps in flight while it expands a
    /// frontier (their buffers at most 8 MiB)
    #[arg(long, default_value_t = DEFAULT_DEPTH)]
    depth: usize,
    /// Generate the graph again even if its files exist
    #[arg(long)]
    regen: bool,
    /// Also write the results as JSON to this file
    #[arg(long)]
    json: Option<PathBuf>,
    /// No progress line while generating
    #[arg(long)]
    no_progress: bool,
}

const BACKINGS: [&str; 4] = ["memory", "setcache", "mmap", "mmap-random"];

/// `--roots` when not given.
const DEFAULT_ROOTS: usize = 4;

/// `--depth` when not given.
const DEFAULT_DEPTH: usize = 512;

/// `--iterations` when not given.
const DEFAULT_ITERATIONS: usize = 10;

impl GraphArgs {
    /// Whether flag `id` (clap's id: the field's name) was given.
    fn given(&self, id: &str) -> bool {
        self.given.iter().any(|g| g == id)
    }
}

/// One line of the report.
struct Row {
    algo: String,
    backing: String,
    memory: String,
    m: Measured,
    /// List entries of the vertices the searches reached, summed (BFS).
    work: u64,
    check: Result<String, String>,
}

impl Row {
    fn secs(&self) -> f64 {
        // From +0.0: an empty f64 sum is -0.0 (a failed run showed
        // "-0.000" seconds).
        self.m.secs.iter().fold(0.0, |s, &x| s + x)
    }

    /// Traversed edges per second of the searches (Graph500: the undirected
    /// edges of the reached component, each listed twice).
    fn rate(&self) -> f64 {
        let w = self.work / 2;
        w as f64 / self.secs().max(1e-9)
    }
}

pub(crate) fn run(a: GraphArgs) -> Result<(), String> {
    for b in &a.backing {
        if !BACKINGS.contains(&b.as_str()) {
            return Err(format!(
                "unknown --backing {b:?}: expected memory, setcache, mmap or mmap-random"
            ));
        }
    }
    for al in &a.algo {
        if al != "bfs" && al != "pagerank" {
            return Err(format!("unknown --algo {al:?}: expected bfs or pagerank"));
        }
    }
    if a.threads == 0 || a.threads > 1024 {
        return Err(format!("--threads {}: give 1 to 1024", a.threads));
    }
    for (n, flag) in [
        (a.roots as u64, "--roots"),
        (a.iterations as u64, "--iterations"),
        (a.depth as u64, "--depth"),
    ] {
        if n == 0 {
            return Err(format!("{flag} 0: it must be at least 1"));
        }
    }
    // Each root is a whole search and each iteration a sweep of the graph:
    // a count past these is a slip, which would run for days.
    if a.roots > 1024 || a.iterations > 10_000 {
        return Err(format!(
            "--roots {} / --iterations {}: give at most 1024 roots and 10000 iterations",
            a.roots, a.iterations
        ));
    }
    if a.depth > 4096 {
        return Err(format!(
            "--depth {}: give 1 to 4096 reads in flight per thread",
            a.depth
        ));
    }
    // Settings no run of the call would use.
    if a.budget.is_some() && a.backing.iter().all(|b| b == "memory") {
        return Err(
            "--budget limits the setcache and mmap backings; the memory backing holds the whole \
             graph: add one of them or drop --budget"
                .into(),
        );
    }
    if a.given("depth") && !a.backing.iter().any(|b| b == "setcache") {
        return Err(format!(
            "--depth {} counts setcache's reads in flight, and --backing names no setcache: add \
             it or drop --depth",
            a.depth
        ));
    }
    if a.given("roots") && !a.algo.iter().any(|al| al == "bfs") {
        return Err(format!(
            "--roots {} counts breadth-first searches, and --algo names no bfs: add it or drop \
             --roots",
            a.roots
        ));
    }
    if a.given("iterations") && !a.algo.iter().any(|al| al == "pagerank") {
        return Err(format!(
            "--iterations {} counts PageRank's sweeps, and --algo names no pagerank: add it or \
             drop --iterations",
            a.iterations
        ));
    }
    let spec = Spec {
        scale: a.scale,
        edge_factor: a.edge_factor,
        seed: a.seed,
    };
    if spec.scale == 0 || spec.scale > 31 || spec.edge_factor == 0 || spec.edge_factor > 1024 {
        return Err(format!(
            "--scale {} --edge-factor {}: give a scale of 1 to 31 and an edge factor of 1 to 1024",
            a.scale, a.edge_factor
        ));
    }
    // A `--json` that cannot be written is refused now, not after the runs.
    crate::bench::check_outputs(a.json.as_deref(), None)?;
    // The generator builds the CSR in memory (degrees, offsets, cursors, and
    // four bytes for each end of every edge): a graph beyond that is refused
    // before anything is made, not aborted on.
    let n = spec.vertices();
    let gen_bytes = n.saturating_mul(20).saturating_add(
        n.saturating_mul(u64::from(spec.edge_factor))
            .saturating_mul(8),
    );
    // Against what the machine (and its memory cgroup) can give now, not
    // its whole memory; a graph stored already is not generated (looked for
    // once, here: its offsets are read whole to be checked).
    if a.dir.exists() && !a.dir.is_dir() {
        return Err(format!("--dir {}: not a directory", a.dir.display()));
    }
    let present = !a.regen && a.dir.is_dir() && stored(&a.dir, &spec)?;
    if !present {
        setcache::cache::check_memory(gen_bytes, || {
            format!(
                "generating the graph of --scale {} --edge-factor {} (about {})",
                a.scale,
                a.edge_factor,
                mib(gen_bytes)
            )
        })
        .map_err(|e| e.to_string())?;
    }
    let budget = a.budget.as_deref().map(parse_size).transpose()?;
    // The per-vertex arrays and read buffers a budget must hold, checked
    // before a graph is generated (the translation tables, which depend on
    // the lists' real number, are checked again below).
    let with_setcache = a.backing.iter().any(|b| b == "setcache");
    let fixed_need = |algo: &str| {
        let buffers = match with_setcache {
            true => a.threads as u64 * algo::read_buffers(algo, a.depth, n),
            false => 0,
        };
        vertex_bytes(algo, n) + buffers
    };
    // In MiB, as every size of the report; below one, in bytes (not "0 MiB").
    let given = budget.map_or_else(String::new, |b| match b < 1 << 20 {
        true => format!("{b} bytes"),
        false => mib(b),
    });
    // Each thread's reader of the lists keeps translation tables sized to
    // the cache: memory of the setcache backing, out of its budget (counted
    // as if the cache had all of it, which it does not), for `entries` list
    // entries. The offsets are read through the thread's queue, without a
    // reader.
    let tables = |budget: u64, entries: u64| {
        let pages = |bytes: u64| bytes.div_ceil(4096);
        let of = |bytes| setcache::reader_table_bytes(pages(budget), pages(bytes));
        a.threads as u64 * of(entries * 4)
    };
    // What a budget must hold for `algo` beside a cache of 1 MiB: its
    // per-vertex arrays, read buffers and translation tables (which grow
    // with the budget), and, in the mmap child's cgroup too, its arrays and
    // the check after each search.
    let need = |algo: &str, b: u64, entries: u64| {
        let tables = if with_setcache { tables(b, entries) } else { 0 };
        let check = if algo == "bfs" {
            algo::CHECK_BYTES * n
        } else {
            0
        };
        (fixed_need(algo) + tables, vertex_bytes(algo, n) + check)
    };
    let fits = |algo: &str, b: u64, entries: u64| {
        let (setcache, arrays) = need(algo, b, entries);
        b >= setcache + (1 << 20) && b >= arrays
    };
    // The least budget that fits (the tables grow with it: looked for from
    // below), in whole MiB, to tell a budget refused.
    let least = |algo: &str, entries: u64| {
        let mut b = fixed_need(algo) + (1 << 20);
        for _ in 0..1 << 12 {
            if fits(algo, b, entries) {
                break;
            }
            let (setcache, arrays) = need(algo, b, entries);
            b = (setcache + (1 << 20)).max(arrays).max(b + (1 << 20));
        }
        format!("{} MiB", b.div_ceil(1 << 20))
    };
    // Before a graph is made its lists' count is not known: at most two
    // entries an edge, which is what the estimate takes.
    if let Some(b) = budget
        && let Some(algo) = a.algo.iter().find(|x| b < fixed_need(x) + (1 << 20))
    {
        return Err(format!(
            "--budget {given}: {algo} needs about {} at least here: its per-vertex arrays and read buffers ({}), translation tables for the graph's lists, and a cache of 1 MiB",
            least(algo, n.saturating_mul(u64::from(spec.edge_factor)) * 2),
            mib(fixed_need(algo))
        ));
    }
    // setcache's runs hold their budget in this process (mmap's are held to
    // theirs by a cgroup): more than the machine can give now is refused
    // before a graph is generated, not after.
    if let Some(b) = budget
        && with_setcache
    {
        setcache::cache::check_memory(b, || format!("--budget {given} for the setcache runs"))
            .map_err(|e| e.to_string())?;
    }
    // Ctrl-C stops at the next step (a chunk written, a search's level, a
    // PageRank iteration, a run) and the command cleans up as after a failure
    // (an mmap run's cgroup and ranks file go with it).
    crate::bench::install_sigint();
    std::fs::create_dir_all(&a.dir).map_err(|e| format!("--dir {}: {e}", a.dir.display()))?;
    let progress = !a.no_progress && std::io::IsTerminal::is_terminal(&std::io::stderr());
    let want_memory = a.backing.iter().any(|b| b == "memory");
    let csr = prepare(&a, &spec, present, want_memory, progress)?;
    let entries = match &csr {
        Some(c) => c.targets.len() as u64,
        None => with_paged(&a.dir, 16 << 20, 1, &spec, |g| Ok(g.targets.len() * 2))?,
    };
    say!(
        "graph {}: {n} vertices, {entries} list entries ({} of CSR), {} threads, budget {}",
        spec.name(),
        mib((n + 1) * 8 + entries * 4),
        a.threads,
        budget.map_or("none (everything cached)".into(), mib)
    );
    if let Some(b) = budget {
        for algo in &a.algo {
            if !fits(algo, b, entries) {
                let (setcache, arrays) = need(algo, b, entries);
                return Err(format!(
                    "--budget {}: {algo} needs {} at least (at this budget: its per-vertex arrays, read buffers and translation tables ({}) and a cache of 1 MiB, and its arrays and checks ({}))",
                    mib(b),
                    least(algo, entries),
                    mib(setcache),
                    mib(arrays)
                ));
            }
        }
    }
    // Roots for the searches only (PageRank alone needs none, and runs on a
    // graph without edges).
    let roots = match a.algo.iter().any(|x| x == "bfs") {
        true => pick_roots(&a, &spec, csr.as_ref())?,
        false => Vec::new(),
    };
    let mut rows = Vec::new();
    out!(
        "{:<9} {:<12} {:<16} {:>9} {:>14} {:>7} {:>9}  check",
        "algo",
        "backing",
        "memory",
        "seconds",
        "rate",
        "hits",
        "read MiB"
    );
    for algo in &a.algo {
        let mut reference: Option<Measured> = None;
        for backing in BACKINGS
            .iter()
            .filter(|b| a.backing.iter().any(|x| x == *b))
        {
            if crate::bench::interrupted() {
                return Err("graph: interrupted".into());
            }
            let per_vertex = vertex_bytes(algo, n);
            let (memory, m) = match *backing {
                "memory" => {
                    let Some(c) = &csr else { continue };
                    let g = Slices {
                        offsets: &c.offsets,
                        targets: &c.targets,
                    };
                    ("all".to_string(), measure(&g, algo, &roots, &a, None))
                }
                "setcache" => {
                    // The threads' read buffers come out of the budget too
                    // (checked above to leave a cache).
                    // So do the readers' translation tables.
                    let per_vertex = per_vertex
                        + a.threads as u64 * algo::read_buffers(algo, a.depth, n)
                        + budget.map_or(0, |b| tables(b, entries));
                    // So does the store's staging area (the sweeps' runs
                    // land there): the cache is what is left.
                    let cache = match budget {
                        Some(b) => cache_within(b - per_vertex),
                        None => (n + 1) * 8 + entries * 4 + (entries * 4) / 4 + (64 << 20),
                    };
                    let m = with_paged(&a.dir, cache, a.depth, &spec, |g| {
                        if algo == "pagerank" {
                            // Its sweeps read both files from end to end.
                            for f in [g.offsets.file(), g.targets.file()] {
                                f.advise(0, 0, Advice::Sequential)
                                    .map_err(|e| format!("graph: {e}"))?;
                            }
                        }
                        Ok(measure(g, algo, &roots, &a, Some(&g.cs)))
                    })?;
                    (format!("cache {}", mib(cache)), m)
                }
                mmap => {
                    let job = child::Job {
                        dir: a.dir.clone(),
                        name: spec.name(),
                        n,
                        entries,
                        algo: algo.clone(),
                        roots: roots.clone(),
                        iterations: a.iterations,
                        threads: a.threads,
                        random: mmap == "mmap-random",
                        warm: budget.is_none(),
                    };
                    let m = child::run(&job, budget);
                    (
                        budget.map_or("unlimited".into(), |b| format!("cgroup {}", mib(b))),
                        m,
                    )
                }
            };
            let row = conclude(algo, backing, memory, m, &mut reference, csr.is_some());
            report_row(&row);
            rows.push(row);
        }
    }
    summary(&a, &spec, n, entries, budget, &rows)
}

/// Open the graph's files (generating them unless `present`: stored whole
/// and not `--regen`); the CSR in memory if `memory` and it fits.
fn prepare(
    a: &GraphArgs,
    spec: &Spec,
    present: bool,
    memory: bool,
    progress: bool,
) -> Result<Option<Csr>, String> {
    let n = spec.vertices();
    if !present {
        say!(
            "graph: generating {} (scale {}, edge factor {})",
            spec.name(),
            spec.scale,
            spec.edge_factor
        );
        let t0 = std::time::Instant::now();
        let csr = rmat::generate(spec, a.threads, progress)?;
        let store =
            Store::open(&[&a.dir], StoreOptions::default()).map_err(|e| format!("graph: {e}"))?;
        let cs = CachedStore::new(
            store,
            CacheOptions {
                size: 64 << 20,
                ..CacheOptions::default()
            },
        )
        .map_err(|e| format!("graph: {e}"))?;
        if let Err(e) = rmat::store(&cs, spec, &csr, progress) {
            // A graph cut short (a full disk, Ctrl-C) would be made again by
            // the next run anyway: its files go now, not the disk's room.
            for ext in ["offsets", "targets"] {
                let _ = cs.delete(&format!("{}.{ext}", spec.name()));
            }
            return Err(e);
        }
        say!(
            "graph: generated and stored in {:.1} s",
            t0.elapsed().as_secs_f64()
        );
        return Ok(memory.then_some(csr));
    }
    if !memory {
        return Ok(None);
    }
    with_paged(&a.dir, 64 << 20, 1, spec, |g| {
        let need = (n + 1) * 8 + g.targets.len() * 8;
        let room = setcache::cache::memory_room().map_or(0, |r| r.bytes);
        if need > room / 2 {
            say!(
                "graph: the CSR ({}) does not fit in memory: no in-memory run",
                mib(need)
            );
            return Ok(None);
        }
        let err = |e: setcache::Error| format!("graph: loading: {e}");
        let mut offsets = Vec::with_capacity(n as usize + 1);
        g.offsets
            .reader()
            .for_each_chunk(0..n + 1, |_, xs| offsets.extend_from_slice(xs))
            .map_err(err)?;
        let mut targets = Vec::with_capacity(g.targets.len() as usize * 2);
        g.targets
            .reader()
            .for_each_chunk(0..g.targets.len(), |_, xs| {
                targets.extend_from_slice(xs.as_flattened())
            })
            .map_err(err)?;
        Ok(Some(Csr { offsets, targets }))
    })
}

/// Bytes in MiB, for the report.
fn mib(bytes: u64) -> String {
    format!("{:.0} MiB", bytes as f64 / (1u64 << 20) as f64)
}

/// Run `f` on the graph's files through a cached store of `cache` bytes.
/// Whether the graph's files are in `dir`, whole: both arrays of the right
/// lengths, and the last offset (written last, once the rest is synced)
/// equal to the number of targets. Files that are absent, or of other
/// lengths, mean no graph; any other failure is an error.
fn stored(dir: &Path, spec: &Spec) -> Result<bool, String> {
    let err = |e: setcache::Error| format!("graph: looking for {}: {e}", spec.name());
    let store = Store::open(&[dir], StoreOptions::default()).map_err(err)?;
    let opts = CacheOptions {
        size: 16 << 20,
        ..CacheOptions::default()
    };
    let cs = CachedStore::new(store, opts).map_err(err)?;
    let name = spec.name();
    let offsets = match PagedArray::<u64>::open_read_only(&cs, &format!("{name}.offsets")) {
        Err(setcache::Error::FileNotFound(_)) => return Ok(false),
        r => r.map_err(err)?,
    };
    let targets = match PagedArray::<u32>::open_read_only(&cs, &format!("{name}.targets")) {
        Err(setcache::Error::FileNotFound(_)) => return Ok(false),
        r => r.map_err(err)?,
    };
    let n = spec.vertices();
    if offsets.len() != n + 1 {
        return Ok(false);
    }
    if offsets.get(n).map_err(err)? != targets.len() {
        return Ok(false);
    }
    // Every list lies inside the targets and after the one before: a
    // damaged offset made the memory backing panic, the mapped one's child
    // end without an answer, and setcache's runs fail their checks with
    // misleading messages (a vertex's list read as empty).
    let mut prev = 0u64;
    let mut bad = None;
    offsets
        .reader()
        .for_each_chunk(0..n + 1, |start, chunk| {
            for (k, &o) in chunk.iter().enumerate() {
                if bad.is_none() && (o < prev || (start == 0 && k == 0 && o != 0)) {
                    bad = Some((start + k as u64, o, prev));
                }
                prev = o;
            }
        })
        .map_err(err)?;
    if let Some((v, o, before)) = bad {
        let why = match v {
            0 => "the first list must start at 0".to_string(),
            _ => format!("before the previous list's start ({before})"),
        };
        return Err(format!(
            "graph: {name}.offsets is damaged: vertex {v}'s list starts at {o}, {why}; run \
             again with --regen to make the graph anew"
        ));
    }
    Ok(true)
}

fn with_paged<R>(
    dir: &Path,
    cache: u64,
    depth: usize,
    spec: &Spec,
    f: impl FnOnce(&Paged) -> Result<R, String>,
) -> Result<R, String> {
    let err = |e: setcache::Error| format!("graph: {e}");
    let store = Store::open(&[dir], StoreOptions::default()).map_err(err)?;
    let cs = CachedStore::new(
        store,
        CacheOptions {
            size: cache as usize,
            ..CacheOptions::default()
        },
    )
    .map_err(err)?;
    let name = spec.name();
    let g = Paged {
        offsets: PagedArray::open_read_only(&cs, &format!("{name}.offsets")).map_err(err)?,
        targets: PagedArray::open_read_only(&cs, &format!("{name}.targets")).map_err(err)?,
        cs,
        depth,
    };
    f(&g)
}

/// `--roots` vertices with at least one edge, drawn from the seed.
fn pick_roots(a: &GraphArgs, spec: &Spec, csr: Option<&Csr>) -> Result<Vec<u32>, String> {
    let n = spec.vertices();
    let degree_of = |g: Option<&Paged>, v: u64| -> Result<u64, String> {
        Ok(match (csr, g) {
            (Some(c), _) => c.offsets[v as usize + 1] - c.offsets[v as usize],
            (None, Some(g)) => {
                let e = |e: setcache::Error| e.to_string();
                g.offsets.get(v + 1).map_err(e)? - g.offsets.get(v).map_err(e)?
            }
            (None, None) => 0,
        })
    };
    let draw = |g: Option<&Paged>| -> Result<Vec<u32>, String> {
        let mut rng = Rng::new(a.seed ^ 0x0b0f_5eed);
        let mut roots = Vec::new();
        for _ in 0..a.roots * 1000 {
            if roots.len() == a.roots {
                break;
            }
            let v = rng.below(n);
            if degree_of(g, v)? > 0 {
                roots.push(v as u32);
            }
        }
        if roots.len() < a.roots {
            return Err("graph: too few vertices with edges to draw roots from".into());
        }
        Ok(roots)
    };
    match csr {
        Some(_) => draw(None),
        None => with_paged(&a.dir, 16 << 20, 1, spec, |g| draw(Some(g))),
    }
}

/// The largest cache whose store fits `bytes` with its staging area
/// (`CachedStore::staging_bytes`), at least `bytes` or 1 MiB, whichever is
/// less (a cache under 2 MiB has no staging area).
fn cache_within(bytes: u64) -> u64 {
    let staged = bytes - CachedStore::staging_bytes(bytes as usize) as u64;
    staged.max(bytes.min((2 << 20) - 4096))
}

/// Run `algo` on `g` in this process (after a warming read without a
/// budget), checking what it can without the reference.
fn measure<G: Graph>(
    g: &G,
    algo: &str,
    roots: &[u32],
    a: &GraphArgs,
    cs: Option<&CachedStore>,
) -> Result<Measured, String> {
    let counters = || {
        cs.map(|c| {
            let s = c.cache().stats();
            (s.hits, s.misses, s.fills * c.cache().page_size() as u64)
        })
    };
    if a.budget.is_none() {
        g.warm()?;
    }
    let before = counters();
    let mut during = (0u64, 0u64, 0u64);
    let mut add = |from: Option<(u64, u64, u64)>| {
        if let (Some(f), Some(t)) = (from, counters()) {
            during = (
                during.0 + t.0 - f.0,
                during.1 + t.1 - f.1,
                during.2 + t.2 - f.2,
            );
        }
    };
    let mut m = run_algo(g, algo, roots, a.iterations, a.threads, &mut add, counters)?;
    if before.is_some() {
        m.hits = Some((during.0, during.1));
        m.device_bytes = Some(during.2);
    }
    Ok(m)
}

/// The row of a run: its check against the in-memory run (which becomes
/// the reference when it is the first). Without an in-memory run the first
/// run that passes the checks it can have (a search's tree rules; ranks
/// that are finite, non-negative and sum to one) is the reference the
/// others must agree with.
fn conclude(
    algo: &str,
    backing: &str,
    memory: String,
    m: Result<Measured, String>,
    reference: &mut Option<Measured>,
    have_memory: bool,
) -> Row {
    let (m, check) = match m {
        Err(e) => (Measured::default(), Err(e)),
        Ok(m) => {
            let check = match (reference.as_ref(), algo) {
                (None, _) if backing == "memory" => Ok("ok (reference)".to_string()),
                (None, "bfs") if !have_memory => {
                    Ok("ok (structure only: no in-memory run; the reference)".into())
                }
                (None, _) if !have_memory => ranks_alone(&m.ranks),
                (None, _) => Err("the in-memory run failed: no reference to compare with".into()),
                (Some(r), "bfs") => {
                    match r.checks.iter().zip(&m.checks).position(|(x, y)| x != y) {
                        None if r.checks.len() == m.checks.len() => Ok("ok".into()),
                        Some(k) => Err(format!(
                            "search {k}: depths differ from the reference run's"
                        )),
                        None => Err("searches missing".into()),
                    }
                }
                (Some(r), _) => {
                    let l1: f64 = r
                        .ranks
                        .iter()
                        .zip(&m.ranks)
                        .map(|(x, y)| (x - y).abs())
                        .sum();
                    if r.ranks.len() != m.ranks.len() {
                        Err("ranks missing".into())
                    } else if l1 <= 1e-6 {
                        Ok(format!("ok (L1 {l1:.1e})"))
                    } else {
                        Err(format!(
                            "L1 distance to the reference run's ranks {l1:.3e} > 1e-6"
                        ))
                    }
                }
            };
            (m, check)
        }
    };
    let work = if algo == "bfs" {
        m.checks.iter().map(|c| c.entries).sum()
    } else {
        0
    };
    let row = Row {
        algo: algo.into(),
        backing: backing.into(),
        memory,
        work,
        check,
        m,
    };
    if (backing == "memory" || !have_memory) && row.check.is_ok() && reference.is_none() {
        *reference = Some(row.m.clone());
    }
    row
}

/// What ranks with nothing to compare them with must be: finite,
/// non-negative, summing to one (the dangling vertices' share is spread).
fn ranks_alone(ranks: &[f64]) -> Result<String, String> {
    if let Some(v) = ranks.iter().position(|r| !r.is_finite() || *r < 0.0) {
        return Err(format!("vertex {v}: rank {}", ranks[v]));
    }
    let sum: f64 = ranks.iter().sum();
    if ranks.is_empty() || (sum - 1.0).abs() > 1e-9 {
        return Err(format!("the ranks sum to {sum}, not 1"));
    }
    Ok("ok (ranks sum to 1; no in-memory run; the reference)".into())
}

fn report_row(r: &Row) {
    let hit = r.m.hits.map_or("-".into(), |(h, mi)| {
        format!("{:.1}%", 100.0 * h as f64 / (h + mi).max(1) as f64)
    });
    let read = r.m.device_bytes.map_or("-".into(), |b| {
        format!("{:.0}", b as f64 / (1 << 20) as f64)
    });
    let rate = if r.algo == "bfs" {
        format!("{:.2} MTEPS", r.rate() / 1e6)
    } else {
        format!("{:.2} it/s", r.m.secs.len() as f64 / r.secs().max(1e-9))
    };
    let check = match &r.check {
        Ok(s) => s.clone(),
        Err(e) => format!("FAILED: {e}"),
    };
    out!(
        "{:<9} {:<12} {:<16} {:>9.3} {:>14} {:>7} {:>9}  {check}",
        r.algo,
        r.backing,
        r.memory,
        r.secs(),
        rate,
        hit,
        read
    );
}

/// Ratios, the JSON document, and the exit status (an error if any run
/// failed its check).
fn summary(
    a: &GraphArgs,
    spec: &Spec,
    n: u64,
    entries: u64,
    budget: Option<u64>,
    rows: &[Row],
) -> Result<(), String> {
    let speed = |algo: &str, backing: &str| {
        rows.iter()
            .find(|r| r.algo == algo && r.backing == backing && r.check.is_ok())
            .map(|r| 1.0 / r.secs().max(1e-9))
    };
    let mut ratios = serde_json::Map::new();
    for algo in &a.algo {
        let Some(s) = speed(algo, "setcache") else {
            continue;
        };
        let mmap = [speed(algo, "mmap"), speed(algo, "mmap-random")]
            .into_iter()
            .flatten()
            .reduce(f64::max);
        if let Some(m) = mmap {
            out!("{algo}: setcache {:.2}x the better mmap run", s / m);
            ratios.insert(format!("{algo}_vs_mmap"), json!(s / m));
        }
        if let Some(m) = speed(algo, "memory") {
            out!("{algo}: setcache {:.2}x the in-memory run", s / m);
            ratios.insert(format!("{algo}_vs_memory"), json!(s / m));
        }
    }
    if let Some(path) = &a.json {
        let runs: Vec<Value> = rows
            .iter()
            .map(|r| {
                json!({
                    "algo": r.algo, "backing": r.backing, "memory": r.memory,
                    "seconds": r.m.secs, "total_seconds": r.secs(),
                    "teps": (r.algo == "bfs").then(|| r.rate()),
                    "iterations_per_second": (r.algo == "pagerank").then(|| r.m.secs.len() as f64 / r.secs().max(1e-9)),
                    "hit_ratio": r.m.hits.map(|(h, m)| h as f64 / (h + m).max(1) as f64),
                    "device_bytes": r.m.device_bytes,
                    "check": match &r.check { Ok(s) => json!({"ok": s}), Err(e) => json!({"error": e}) },
                })
            })
            .collect();
        let doc = json!({
            "graph": {"name": spec.name(), "scale": spec.scale, "edge_factor": spec.edge_factor,
                      "seed": spec.seed, "vertices": n, "entries": entries},
            "threads": a.threads, "budget": budget, "roots": a.roots, "iterations": a.iterations,
            "runs": runs, "ratios": ratios,
        });
        std::fs::write(
            path,
            serde_json::to_string_pretty(&doc).unwrap_or_default() + "\n",
        )
        .map_err(|e| format!("--json {}: {e}", path.display()))?;
    }
    if crate::bench::interrupted() {
        return Err("graph: interrupted".into());
    }
    let failed = rows.iter().filter(|r| r.check.is_err()).count();
    if failed > 0 {
        return Err(format!("{failed} run(s) failed their checks"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use setcache::CachedStore;

    use crate::Command;

    /// The setcache backing's cache and its staging area together stay
    /// within what the budget leaves, and the cache takes most of it.
    #[test]
    fn the_cache_and_its_staging_area_fit_the_budget() {
        for mib in [1u64, 2, 3, 5, 10, 100, 128, 218, 256, 300, 1024] {
            let avail = mib << 20;
            let cache = super::cache_within(avail);
            let staging = CachedStore::staging_bytes(cache as usize) as u64;
            assert!(cache + staging <= avail, "{mib} MiB: {cache} + {staging}");
            assert!(cache >= avail.min(1 << 20), "{mib} MiB: a cache of {cache}");
            assert!(
                cache * 5 >= avail * 3,
                "{mib} MiB: only {cache} for the cache"
            );
        }
    }

    /// Without an in-memory run, PageRank's first run must sum to one and
    /// the others must agree with it (they were not checked at all).
    #[test]
    fn ranks_without_an_in_memory_run_are_checked() {
        let ranks = |r: &[f64]| super::Measured {
            ranks: r.to_vec(),
            ..super::Measured::default()
        };
        let mut reference = None;
        let mut row = |backing: &str, r: &[f64]| {
            let m = Ok(ranks(r));
            super::conclude("pagerank", backing, String::new(), m, &mut reference, false).check
        };
        let bad = row("setcache", &[0.5, 0.4]);
        assert!(
            bad.as_ref().is_err_and(|e| e.contains("sum to 0.9")),
            "{bad:?}"
        );
        let nan = row("setcache", &[f64::NAN, 1.0]);
        assert!(
            nan.as_ref().is_err_and(|e| e.contains("vertex 0")),
            "{nan:?}"
        );
        assert!(row("setcache", &[0.25, 0.75]).is_ok());
        assert!(row("mmap", &[0.25, 0.75]).is_ok());
        let off = row("mmap-random", &[0.75, 0.25]);
        assert!(off.as_ref().is_err_and(|e| e.contains("L1")), "{off:?}");
    }

    /// A stored graph counts only once its last offset is in; a directory
    /// that cannot be opened is an error, not a missing graph.
    #[test]
    fn a_graph_cut_short_is_not_taken_for_a_stored_one() {
        let dir = std::env::temp_dir().join(format!("setcache-graph-cut-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let spec = super::Spec {
            scale: 8,
            edge_factor: 4,
            seed: 3,
        };
        assert_eq!(super::stored(&dir, &spec), Ok(false));
        let csr = super::rmat::generate(&spec, 1, false).unwrap();
        let open = || {
            let store = setcache::Store::open(&[&dir], Default::default()).unwrap();
            CachedStore::new(store, setcache::CacheOptions::default()).unwrap()
        };
        super::rmat::store(&open(), &spec, &csr, false).unwrap();
        assert_eq!(super::stored(&dir, &spec), Ok(true));
        let name = format!("{}.offsets", spec.name());
        // Offset `v` set to `o` (None: read only); its old value.
        let set = |v: u64, o: Option<u64>| {
            let cs = open();
            let off = setcache::PagedArray::<u64>::open(&cs, &name).unwrap();
            let old = off.get(v).unwrap();
            if let Some(o) = o {
                off.set(v, o).unwrap();
                off.sync().unwrap();
            }
            old
        };
        // A damaged offset (a list out of order, or a first list not at 0)
        // is refused by vertex, with the way out.
        let entries = set(spec.vertices(), None);
        for (v, o, want) in [
            (5, entries, "vertex 6's list starts at"),
            (
                0,
                1,
                "vertex 0's list starts at 1, the first list must start at 0",
            ),
        ] {
            let old = set(v, Some(o));
            let e = super::stored(&dir, &spec).unwrap_err();
            assert!(
                e.contains("is damaged") && e.contains(want) && e.contains("--regen"),
                "{e}"
            );
            set(v, Some(old));
        }
        assert_eq!(super::stored(&dir, &spec), Ok(true));
        // As a run stopped before its last write leaves it.
        let cs = open();
        let off = setcache::PagedArray::<u64>::open(&cs, &name).unwrap();
        off.set(spec.vertices(), 0).unwrap();
        off.sync().unwrap();
        drop((off, cs));
        assert_eq!(super::stored(&dir, &spec), Ok(false));
        let not_a_dir = dir.join(format!("{}.offsets", spec.name()));
        std::fs::write(&not_a_dir, b"x").unwrap();
        let e = super::stored(&not_a_dir, &spec).unwrap_err();
        assert!(e.contains("looking for"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn run_args(args: &[&str]) -> Result<(), String> {
        let argv = ["setcache", "graph"].iter().chain(args);
        match crate::parse_cli(argv).map_err(|e| e.to_string())?.command {
            Some(Command::Graph(a)) => super::run(a),
            _ => Err("not the graph command".into()),
        }
    }

    #[test]
    fn bad_arguments_are_refused_by_name() {
        let dir = std::env::temp_dir().join(format!("setcache-graph-args-{}", std::process::id()));
        let d = dir.to_str().unwrap();
        let refused = |args: &[&str], what: &str| {
            let e = run_args(args).unwrap_err();
            assert!(e.contains(what), "{args:?}: {e}");
        };
        refused(&["--dir", d, "--backing", "memory,swap"], "\"swap\"");
        refused(&["--dir", d, "--algo", "sssp"], "\"sssp\"");
        refused(&["--dir", d, "--threads", "0"], "--threads 0");
        refused(&["--dir", d, "--scale", "40"], "--scale 40");
        refused(&["--dir", d, "--edge-factor", "0"], "--edge-factor 0");
        refused(&["--dir", d, "--roots", "0"], "--roots");
        refused(&["--dir", d, "--budget", "12Q"], "12Q");
        // A flag the run would ignore, given at its default value too.
        refused(
            &["--dir", d, "--roots", "4", "--algo", "pagerank"],
            "--algo names no bfs",
        );
        refused(
            &["--dir", d, "--iterations", "10", "--algo", "bfs"],
            "--algo names no pagerank",
        );
        refused(
            &["--dir", d, "--depth", "512", "--backing", "memory"],
            "--backing names no setcache",
        );
        // Before anything is generated, not after every run.
        refused(
            &["--dir", d, "--json", "/nonexistent/r.json"],
            "/nonexistent is not a directory",
        );
        assert!(!dir.exists(), "nothing generated for a run refused");
        // A file where the directory should be, named as such.
        let file = dir.with_extension("file");
        std::fs::write(&file, b"x").unwrap();
        refused(&["--dir", file.to_str().unwrap()], "not a directory");
        std::fs::remove_file(&file).unwrap();
        // A failed run's seconds are 0, not -0.
        let failed = super::Row {
            algo: "bfs".into(),
            backing: "mmap".into(),
            memory: String::new(),
            m: Default::default(),
            work: 0,
            check: Err("failed".into()),
        };
        assert!(failed.secs().is_sign_positive(), "{}", failed.secs());
        // Settings that no run of the call would use.
        refused(
            &["--dir", d, "--backing", "memory", "--budget", "64M"],
            "drop --budget",
        );
        refused(
            &["--dir", d, "--algo", "bfs", "--iterations", "3"],
            "drop --iterations",
        );
        refused(
            &["--dir", d, "--algo", "pagerank", "--roots", "2"],
            "drop --roots",
        );
        // Too small for the search's arrays and checks: refused before any run.
        refused(
            &["--dir", d, "--scale", "10", "--budget", "64k"],
            "--budget",
        );
        // A small graph in a tight budget runs and checks in this process
        // (the mmap runs start this executable as their child: the command's,
        // not a test's; CI runs them through the command).
        let args = [
            "--dir",
            d,
            "--scale",
            "10",
            "--budget",
            "8M",
            "--roots",
            "2",
            "--iterations",
            "2",
            "--backing",
            "memory,setcache",
            "--depth",
            "4",
        ];
        run_args(&args).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A budget too small for the per-vertex arrays is refused before the
    /// graph is generated (a scale-18 graph was made and stored first);
    /// PageRank alone runs on a graph without edges (roots were drawn for
    /// it, and none could be).
    #[test]
    fn budgets_are_checked_first_and_pagerank_needs_no_roots() {
        let dir = std::env::temp_dir().join(format!("setcache-graph-first-{}", std::process::id()));
        let d = dir.to_str().unwrap();
        let e = run_args(&["--dir", d, "--scale", "18", "--budget", "1M"]).unwrap_err();
        assert!(e.contains("--budget 1 MiB: bfs needs"), "{e}");
        assert!(!dir.exists(), "nothing was generated or stored");
        let alone = [
            "--dir",
            d,
            "--scale",
            "1",
            "--edge-factor",
            "1",
            "--algo",
            "pagerank",
            "--backing",
            "memory,setcache",
        ];
        run_args(&alone).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
