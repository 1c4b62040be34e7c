//! `setcache sim`: replays a trace through the cache's set-associative
//! policies and through global ones, and prints the hit ratios.

use std::time::Instant;

use clap::Args;
use setcache::hitsim::{self as sim, HitPolicy, HitResult, Trace};

use crate::bench::fsize::explain;
use crate::bench::size::{format_size, parse_size};
use crate::bench::svg::{Doc, nice_step, short_num, trim};
use crate::bench::{check_io_unit, check_outputs};

/// Simulate the hit ratio of replacement policies on a trace.
#[derive(Args, Debug)]
#[command(
    long_about = "Simulate the hit ratio of replacement policies on a trace.\n\n\
    Set-associative policies (sa-lru, sa-lfu, sa-fifo, sa-clock, sa-gclock, sa-nrlfu, sa-sieve, \
    sa-s3fifo, sa-lirs, sa-adaptive; sa-default is the cache's default) run the cache's own \
    per-set policy code; global policies (lru, fifo, clock, gclock, \
    lfu, 2q, arc, lirs, clockpro, s3fifo, sieve, wtinylfu, linux, opt) are textbook versions.\n\n\
    Traces: ycsb:records=N,ops=M[,theta=0.99][,seed=S][,per_leaf=4.4][,fanout=128][,internal=0.306] | \
    zipf:pages=N,ops=M,theta=T[,seed=S] | uniform:pages=N,ops=M[,seed=S] | scan:pages=N,loops=L | \
    msr:PATH | systor:PATH | cbs:PATH (Tencent CBS) | oracle:PATH | csv:PATH[,col=N|NAME][,rw=N|NAME][,sep=C][,header=1] | text:PATH \
    (files ending in .gz or .bz2 are decompressed)."
)]
pub(crate) struct SimArgs {
    /// The trace, KIND:ARGS (see the long help).
    #[arg(long)]
    trace: String,
    /// Policies, comma-separated; `all`, `sa` and `global` expand.
    #[arg(long, default_value = "all")]
    policy: String,
    /// Cache sizes, comma-separated: bytes (512M), pages (65536p) or a share
    /// of the trace's footprint (10%).
    #[arg(long, default_value = "10%", value_delimiter = ',')]
    cache_size: Vec<String>,
    /// Pages per set of the set-associative policies, comma-separated (4..=32).
    #[arg(long, default_values_t = [DEFAULT_SET_SIZE], value_delimiter = ',')]
    set_size: Vec<usize>,
    /// Partitions the set-associative policies' sets are divided into, as a
    /// cache made with that many (`CacheOptions::partitions`, the bench's
    /// `--partitions`) divides them: a page's two candidate sets lie in one
    /// partition, and the sets are rounded down to a multiple (1 to 64).
    #[arg(long, default_value_t = 1)]
    partitions: usize,
    /// Page size: block traces are cut into pages of this size, byte cache
    /// sizes are divided by it. As `bench --bs`: a multiple of 512 that
    /// divides 4k or is a multiple of it.
    #[arg(long, default_value = "4k")]
    page_size: String,
    /// Share of the requests that only warm the cache (the hit ratio counts
    /// the rest); the whole-trace hit ratio is reported too.
    #[arg(long, default_value_t = 0.5)]
    warmup: f64,
    /// Which requests to replay: all, reads or writes.
    #[arg(long, default_value = "all")]
    ops: String,
    /// Write the results as JSON to this file.
    #[arg(long)]
    json: Option<String>,
    /// Draw the miss-ratio curves (miss ratio against cache size) as SVG.
    #[arg(long)]
    plot: Option<String>,
}

/// `--set-size` when not given: PPC's set size, the cache's default.
const DEFAULT_SET_SIZE: usize = 12;

/// Resolves one `--cache-size` item to pages.
fn cache_pages(text: &str, footprint: usize, page_size: u64) -> Result<usize, String> {
    let t = text.trim();
    let pages = if let Some(pct) = t.strip_suffix('%') {
        let p: f64 = pct
            .trim()
            .parse()
            .map_err(|_| format!("invalid cache size {text:?}: bad percentage"))?;
        if !(p > 0.0 && p.is_finite()) {
            return Err(format!("invalid cache size {text:?}: must be positive"));
        }
        (footprint as f64 * p / 100.0).round() as usize
    } else if let Some(n) = t.strip_suffix(['p', 'P']) {
        n.trim()
            .replace('_', "")
            .parse()
            .map_err(|_| format!("invalid cache size {text:?}: bad page count"))?
    } else {
        let bytes = parse_size(t)?;
        if bytes % page_size != 0 {
            return Err(format!(
                "--cache-size {t}: not a whole number of {page_size}-byte pages: give a \
                 multiple of the page size, a page count (such as 100p) or a share of the \
                 footprint (such as 10%)"
            ));
        }
        (bytes / page_size) as usize
    };
    if pages == 0 {
        return Err(format!("cache size {text:?} is less than one page"));
    }
    Ok(pages)
}

/// The flags that need no trace, checked.
struct Settings {
    page_size: u64,
    policies: Vec<HitPolicy>,
    /// `None`: replay every request; `Some(writes)`: only the writes, or only
    /// the reads.
    only: Option<bool>,
}

/// Checks every flag that can be checked before the trace is loaded.
fn settings(args: &SimArgs) -> Result<Settings, String> {
    let page_size =
        parse_size(&args.page_size).map_err(|e| format!("--page-size {}: {e}", args.page_size))?;
    check_io_unit("--page-size", "page size", page_size)?;
    if !(0.0..1.0).contains(&args.warmup) {
        return Err("--warmup must be in [0, 1)".into());
    }
    let policies = sim::parse_policies(&args.policy)?;
    check_outputs(
        [&args.json, &args.plot]
            .into_iter()
            .flatten()
            .map(std::path::Path::new),
        sim::trace::file_of(&args.trace).map(std::path::Path::new),
    )?;
    for &s in &args.set_size {
        if !(setcache::cache::policy::MIN_ASSOC..=setcache::cache::policy::MAX_ASSOC).contains(&s) {
            return Err(format!("--set-size {s}: must be within 4..=32"));
        }
    }
    // Byte sizes are checked before the trace is loaded (shares of its
    // footprint need it).
    for s in &args.cache_size {
        let t = s.trim();
        if !t.ends_with(['%', 'p', 'P']) {
            cache_pages(t, 0, page_size)?;
        }
    }
    if !(1..=setcache::MAX_PARTITIONS).contains(&args.partitions) {
        return Err(format!(
            "--partitions {}: give 1 to {}",
            args.partitions,
            setcache::MAX_PARTITIONS
        ));
    }
    if args.partitions != 1 && !policies.iter().any(|p| p.is_sa()) {
        return Err(format!(
            "--partitions divides the sets of the set-associative policies (sa-*), and \
             --policy {} names none: add one or drop --partitions",
            args.policy
        ));
    }
    if args.set_size != [DEFAULT_SET_SIZE] && !policies.iter().any(|p| p.is_sa()) {
        return Err(format!(
            "--set-size applies to the set-associative policies (sa-*), and --policy {} names \
             none: add one or drop --set-size",
            args.policy
        ));
    }
    let only = match args.ops.to_ascii_lowercase().as_str() {
        "all" => None,
        "reads" | "read" => Some(false),
        "writes" | "write" => Some(true),
        other => return Err(format!("--ops {other:?}: expected all, reads or writes")),
    };
    Ok(Settings {
        page_size,
        policies,
        only,
    })
}

pub(crate) fn run(args: SimArgs) -> Result<(), String> {
    let Settings {
        page_size,
        policies,
        only,
    } = settings(&args)?;
    let start = Instant::now();
    let mut trace = sim::load(&args.trace, page_size)?;
    if let Some(writes) = only {
        trace = trace.only(writes)?;
    }
    if trace.is_empty() {
        return Err(format!("{}: no request left to replay", trace.name));
    }
    if sim::warm_requests(trace.len(), args.warmup) == trace.len() {
        // hit% would be 0 of 0, printed as a hit ratio of 0.
        return Err(format!(
            "{}: --warmup {} takes all {} requests of the trace, leaving none for hit% to count: lower --warmup (0 counts every request)",
            trace.name,
            args.warmup,
            trace.len()
        ));
    }
    let load_s = start.elapsed().as_secs_f64();
    let writes = trace.n_writes;
    out!(
        "trace {}: {} requests ({} reads, {} writes), footprint {} pages ({}), loaded in {:.1} s",
        trace.name,
        trace.len(),
        trace.len() as u64 - writes,
        writes,
        trace.footprint,
        format_size((trace.footprint as u64).saturating_mul(page_size)),
        load_s
    );
    let mut sizes = Vec::new();
    for s in &args.cache_size {
        let p = cache_pages(s, trace.footprint, page_size)?;
        if !sizes.contains(&p) {
            sizes.push(p);
        }
        // Every run this size makes, checked before any runs: a size the
        // machine cannot simulate is refused up front, not aborted on.
        for &policy in &policies {
            let sets = if policy.is_sa() {
                &args.set_size[..]
            } else {
                &[0]
            };
            for &set in sets {
                sim::check(&trace, policy, p, set).map_err(|e| format!("--cache-size {s}: {e}"))?;
                if policy.is_sa() {
                    sim::check_partitions(p, set, args.partitions)
                        .map_err(|e| format!("--cache-size {s} with --partitions: {e}"))?;
                }
            }
        }
    }
    out!(
        "warm-up: first {:.0}% of the requests; hit% counts the rest, full% the whole trace",
        args.warmup * 100.0
    );
    if args.partitions > 1 {
        out!(
            "sa-* sets divided among {} partitions, as a partitioned cache divides them",
            args.partitions
        );
    }
    out!(
        "{:<12} {:>4} {:>12} {:>9} {:>8} {:>9} {:>8}",
        "policy",
        "set",
        "cache pages",
        "hit%",
        "full%",
        "Mreq/s",
        "seconds"
    );
    let mut results: Vec<HitResult> = Vec::new();
    for &size in &sizes {
        for &p in &policies {
            let set_sizes: Vec<usize> = if p.is_sa() {
                // Each size once, in the order given, as the policies and
                // cache sizes are.
                let mut once = Vec::new();
                for &s in &args.set_size {
                    if !once.contains(&s) {
                        once.push(s);
                    }
                }
                once
            } else {
                vec![0]
            };
            for set in set_sizes {
                let r = sim::simulate_partitioned(
                    &trace,
                    p,
                    size,
                    set,
                    args.partitions,
                    page_size,
                    args.warmup,
                )?;
                // The pages simulated: a set-associative cache holds whole
                // sets, as many as divide among its partitions, so fewer than
                // asked when the size is not a multiple.
                let pages = if r.pages_simulated() == r.cache_pages {
                    r.cache_pages.to_string()
                } else {
                    format!("{} of {}", r.pages_simulated(), r.cache_pages)
                };
                out!(
                    "{:<12} {:>4} {:>12} {:>9.3} {:>8.3} {:>9.1} {:>8.2}",
                    r.policy.to_string(),
                    r.set_size.map_or("-".to_string(), |s| s.to_string()),
                    pages,
                    r.hit_ratio() * 100.0,
                    r.hit_ratio_full() * 100.0,
                    r.requests_per_second() / 1e6,
                    r.seconds
                );
                results.push(r);
            }
        }
    }
    out!(
        "total {:.1} s (trace load included)",
        start.elapsed().as_secs_f64()
    );
    if let Some(path) = &args.json {
        let mut doc = sim::to_json(&trace, &results);
        // What the hit ratios are of: the requests after the warm-up, of the
        // kind asked for, in pages of this size.
        doc["warmup"] = args.warmup.into();
        doc["page_size"] = page_size.into();
        doc["ops"] = args.ops.to_ascii_lowercase().into();
        let text = serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())?;
        std::fs::write(path, text + "\n").map_err(|e| write_error(path, e))?;
        say!("wrote {path}");
    }
    if let Some(path) = &args.plot {
        std::fs::write(path, plot(&trace, &results)).map_err(|e| write_error(path, e))?;
        say!("wrote {path}");
    }
    Ok(())
}

/// The message of a failed write of `path`, with the file-size limit named
/// when that is what stopped it.
fn write_error(path: &str, e: std::io::Error) -> String {
    explain(format!("cannot write {path}: {e}"), &[])
}

const COLORS: [&str; 10] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
    "#7f7f7f", "#bcbd22",
];
const DASHES: [&str; 3] = ["", "8 4", "3 3"];

/// The miss-ratio curves: miss ratio (after the warm-up) against the cache
/// size in pages, one line per policy and set size.
pub(crate) fn plot(trace: &Trace, results: &[HitResult]) -> String {
    const W: f64 = 860.0;
    const H: f64 = 520.0;
    const LEFT: f64 = 70.0;
    const RIGHT: f64 = 190.0;
    const TOP: f64 = 50.0;
    const BOTTOM: f64 = 60.0;
    let mut lines: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
    for r in results {
        let name = match r.set_size {
            Some(s) => format!("{} /{s}", r.policy),
            None => r.policy.to_string(),
        };
        // A set-associative cache at the pages it holds (whole sets only).
        let pt = (r.pages_simulated() as f64, (1.0 - r.hit_ratio()) * 100.0);
        match lines.iter_mut().find(|l| l.0 == name) {
            Some(l) => l.1.push(pt),
            None => lines.push((name, vec![pt])),
        }
    }
    for l in &mut lines {
        l.1.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    let xmax = results
        .iter()
        .map(|r| r.cache_pages as f64)
        .fold(1.0, f64::max);
    let xstep = nice_step(xmax, 6.0);
    let xmax = (xmax / xstep).ceil() * xstep;
    let ymax = results
        .iter()
        .map(|r| (1.0 - r.hit_ratio()) * 100.0)
        .fold(1.0, f64::max);
    let ystep = nice_step(ymax, 5.0);
    let ymax = ((ymax / ystep).ceil() * ystep).min(100.0).max(ystep);
    let (pw, ph) = (W - LEFT - RIGHT, H - TOP - BOTTOM);
    let x = |v: f64| LEFT + v / xmax * pw;
    let y = |v: f64| TOP + ph - v / ymax * ph;
    let mut d = Doc::new(W, H);
    d.text(
        (LEFT + pw / 2.0, 25.0),
        "middle",
        r#" font-size="14""#,
        &format!("Miss ratio after warm-up: {}", trace.name),
    );
    let mut v = 0.0;
    while v <= ymax + 1e-9 {
        d.line((LEFT, y(v)), (LEFT + pw, y(v)), "#ddd", 1.0, "");
        d.text(
            (LEFT - 6.0, y(v) + 4.0),
            "end",
            "",
            &format!("{}%", trim(v)),
        );
        v += ystep;
    }
    let mut v = 0.0;
    while v <= xmax + 1e-9 {
        d.line((x(v), TOP), (x(v), TOP + ph), "#eee", 1.0, "");
        d.text((x(v), TOP + ph + 18.0), "middle", "", &short_num(v));
        v += xstep;
    }
    d.line((LEFT, TOP + ph), (LEFT + pw, TOP + ph), "black", 1.0, "");
    d.line((LEFT, TOP), (LEFT, TOP + ph), "black", 1.0, "");
    d.text(
        (LEFT + pw / 2.0, H - 15.0),
        "middle",
        "",
        "cache size (pages)",
    );
    d.text(
        (18.0, TOP + ph / 2.0),
        "middle",
        &format!(r#" transform="rotate(-90 18 {})""#, TOP + ph / 2.0),
        "miss ratio",
    );
    for (i, (name, pts)) in lines.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let dash = DASHES[(i / COLORS.len()) % DASHES.len()];
        let scaled: Vec<(f64, f64)> = pts.iter().map(|&(a, b)| (x(a), y(b))).collect();
        if scaled.len() > 1 {
            d.polyline(&scaled, color, dash);
        }
        for (&(a, b), &p) in pts.iter().zip(&scaled) {
            d.circle(p, color, &format!("{name}: {} pages, miss {:.2}%", a, b));
        }
        let ly = TOP + 10.0 + i as f64 * 17.0;
        d.line(
            (W - RIGHT + 15.0, ly),
            (W - RIGHT + 45.0, ly),
            color,
            2.0,
            dash,
        );
        d.text((W - RIGHT + 50.0, ly + 4.0), "start", "", name);
    }
    d.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_sizes_in_bytes_pages_and_percent() {
        assert_eq!(cache_pages("512M", 10, 4096), Ok(131_072));
        assert_eq!(cache_pages("65536p", 10, 4096), Ok(65_536));
        assert_eq!(cache_pages("10%", 5000, 4096), Ok(500));
        assert!(cache_pages("1k", 10, 4096).is_err());
        // Bytes that are not whole pages are refused rather than rounded.
        let e = cache_pages("6k", 10, 4096).unwrap_err();
        assert!(e.contains("not a whole number of 4096-byte pages"), "{e}");
        assert_eq!(cache_pages("200%", 1000, 4096), Ok(2000));
        assert!(cache_pages("x%", 10, 4096).is_err());
        assert!(cache_pages("0p", 10, 4096).is_err());
    }

    fn settings_of(args: &[&str]) -> Result<(), String> {
        let argv: Vec<String> = ["setcache", "sim", "--trace", "zipf:pages=100,ops=1000"]
            .iter()
            .chain(args)
            .map(|s| s.to_string())
            .collect();
        let Some(crate::Command::Sim(a)) = parse(&argv).unwrap().unwrap().command else {
            panic!("not sim arguments");
        };
        settings(&a).map(|_| ())
    }

    /// `--set-size` with no set-associative policy to apply it to is
    /// refused; with one, or with the default, it is taken.
    #[test]
    fn a_set_size_needs_a_set_associative_policy() {
        let e = settings_of(&["--policy", "lru,arc", "--set-size", "8"]).unwrap_err();
        assert!(
            e.contains("--set-size") && e.contains("drop --set-size"),
            "{e}"
        );
        for ok in [
            &["--policy", "lru,sa-lru", "--set-size", "8"][..],
            &["--policy", "lru"],
            &["--set-size", "8,16"],
        ] {
            settings_of(ok).unwrap_or_else(|e| panic!("{ok:?} refused: {e}"));
        }
    }

    /// `--partitions` outside 1..=64, or with no set-associative policy to
    /// divide, is refused naming the flag; a partitioned simulation rounds
    /// its sets down to a multiple of the partitions, as the cache does.
    #[test]
    fn partitions_are_checked_and_round_the_sets() {
        for (args, want) in [
            (&["--partitions", "0"][..], "--partitions 0: give 1 to 64"),
            (&["--partitions", "65"], "--partitions 65: give 1 to 64"),
            (
                &["--policy", "lru,arc", "--partitions", "2"],
                "drop --partitions",
            ),
        ] {
            let e = settings_of(args).unwrap_err();
            assert!(e.contains(want), "{args:?}: {e}");
        }
        settings_of(&["--policy", "lru,sa-lru", "--partitions", "3"]).unwrap();
        let trace = Trace::from_pages("t", (0..4000u64).map(|i| i * 7 % 301));
        let sa: HitPolicy = "sa-lru".parse().unwrap();
        // 13 sets of 4 among 3 partitions: 12 sets.
        let r = sim::simulate_partitioned(&trace, sa, 52, 4, 3, 4096, 0.0).unwrap();
        assert_eq!((r.partitions, r.pages_simulated()), (3, 48));
        let json = sim::to_json(&trace, std::slice::from_ref(&r));
        assert_eq!(json["results"][0]["partitions"], 3);
        let one = sim::simulate_partitioned(&trace, sa, 52, 4, 1, 4096, 0.0).unwrap();
        let plain = sim::simulate(&trace, sa, 52, 4, 4096, 0.0).unwrap();
        assert_eq!(
            (one.hits_full, one.pages_simulated()),
            (plain.hits_full, 52)
        );
        let e = sim::simulate_partitioned(&trace, sa, 52, 4, 14, 4096, 0.0).unwrap_err();
        assert!(
            e.contains("13 sets of 4, fewer than its 14 partitions"),
            "{e}"
        );
        // The global policies have no sets to divide.
        let lru: HitPolicy = "lru".parse().unwrap();
        let g = sim::simulate_partitioned(&trace, lru, 52, 4, 3, 4096, 0.0).unwrap();
        assert_eq!((g.partitions, g.pages_simulated()), (1, 52));
    }

    #[test]
    fn plot_is_well_formed() {
        let trace = Trace::from_pages("t", (0..400u64).map(|i| i * 7 % 61));
        let mut results = Vec::new();
        for p in ["lru", "sa-lru", "opt"] {
            for size in [8, 16, 32] {
                let p: HitPolicy = p.parse().unwrap();
                results.push(sim::simulate(&trace, p, size, 4, 4096, 0.5).unwrap());
            }
        }
        let svg = plot(&trace, &results);
        crate::bench::svg::assert_well_formed(&svg);
        assert!(svg.contains("sa-lru /4") && svg.contains("opt"));
    }

    /// The `--json` document of `sim` on a small zipf trace with `flags`
    /// (the file named by `tag`, removed after).
    fn sim_json(tag: &str, flags: &[&str]) -> serde_json::Value {
        let path = std::env::temp_dir().join(format!("setcache-sim-{tag}-{}", std::process::id()));
        let p = path.to_str().unwrap();
        let trace = [
            "setcache",
            "sim",
            "--trace",
            "zipf:pages=100,ops=1000,theta=0.9",
        ];
        let argv: Vec<String> = trace
            .iter()
            .chain(flags)
            .chain(&["--json", p])
            .map(|s| s.to_string())
            .collect();
        let Some(crate::Command::Sim(a)) = parse(&argv).unwrap().unwrap().command else {
            panic!("not sim arguments");
        };
        run(a).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        serde_json::from_str(&text).unwrap()
    }

    /// A set size listed twice runs once, as a policy or cache size listed
    /// twice does.
    #[test]
    fn a_set_size_listed_twice_runs_once() {
        let doc = sim_json("sets", &["--policy", "sa-lru", "--set-size", "4,8,4"]);
        let sets: Vec<u64> = doc["results"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|r| r["set_size"].as_u64())
            .collect();
        assert_eq!(sets, [4, 8]);
    }

    /// `sim --help` gives the trace syntax its `--trace` refers to (a doc
    /// comment on the subcommand once replaced the long help).
    #[test]
    fn the_long_help_gives_the_trace_syntax() {
        use clap::CommandFactory;
        let mut cmd = crate::Cli::command();
        let sim = cmd.find_subcommand_mut("sim").expect("a sim subcommand");
        let help = sim.render_long_help().to_string();
        for kind in [
            "ycsb:records=N",
            "zipf:pages=N",
            "csv:PATH",
            "msr:PATH",
            "oracle:PATH",
        ] {
            assert!(help.contains(kind), "{kind} not in:\n{help}");
        }
    }

    /// A set-associative cache holds whole sets only: its point and its
    /// JSON row name the pages it held (32 of the 63 asked for, sets of 32),
    /// so that it is not compared with a global cache of 63.
    #[test]
    fn a_set_associative_run_is_shown_at_the_pages_it_held() {
        let trace = Trace::from_pages("t", (0..4000u64).map(|i| i * 7 % 301));
        let sa: HitPolicy = "sa-lru".parse().unwrap();
        let r = sim::simulate(&trace, sa, 63, 32, 4096, 0.0).unwrap();
        let svg = plot(&trace, std::slice::from_ref(&r));
        assert!(svg.contains("sa-lru /32: 32 pages"), "{svg}");
        let json = sim::to_json(&trace, std::slice::from_ref(&r));
        assert_eq!(json["results"][0]["cache_pages"], 63);
        assert_eq!(json["results"][0]["pages_simulated"], 32);
        // The command's document says what its hit ratios are of.
        let flags = ["--policy", "lru", "--warmup", "0.25", "--ops", "Reads"];
        let doc = sim_json("json", &flags);
        assert_eq!(
            (&doc["warmup"], &doc["page_size"], &doc["ops"]),
            (&0.25.into(), &4096.into(), &"reads".into())
        );
    }

    use crate::cli_tests::{SIM_FLAGS, argv, parse};
    use crate::test_alloc::{input_bound, largest_alloc};
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Any `sim` flags that parse, and each run they make, are checked or refused.
        #[test]
        fn any_sim_flags_check_or_are_refused(
            argv in argv("sim", SIM_FLAGS, &SIM_FLAGS[..1]),
            footprint in prop_oneof![0usize..1000, Just(usize::MAX), any::<usize>()],
        ) {
            // Cache sizes resolve against a small trace (and any footprint); the
            // trace spec itself is `load`'s, tested with the trace readers.
            let Ok(cli) = parse(&argv)? else {
                return Ok(());
            };
            let Some(crate::Command::Sim(a)) = cli.command else {
                return Err(TestCaseError::fail("sim arguments parsed as another command"));
            };
            let n: usize = argv.iter().map(|s| s.len() + 1).sum();
            let trace = Trace::from_pages("t", (0..5000u64).map(|i| i * 7 % 2003));
            let (r, largest) = largest_alloc(|| -> Result<(), String> {
                let s = settings(&a)?;
                for size in &a.cache_size {
                    let _ = cache_pages(size, footprint, s.page_size);
                    let pages = cache_pages(size, trace.footprint, s.page_size)?;
                    for &policy in &s.policies {
                        for &set in &a.set_size {
                            sim::check(&trace, policy, pages, set)?;
                        }
                    }
                }
                Ok(())
            });
            prop_assert!(largest <= input_bound(n), "{argv:?}: {largest} bytes at once");
            if let Err(e) = r {
                prop_assert!(!e.is_empty());
            }
        }
    }
}
