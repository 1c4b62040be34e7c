//! Command lines for property tests: any subcommand with flags of every
//! subcommand, values of every kind, and junk. Each subcommand's module checks
//! that what parses passes its validation or fails it with a message; this one
//! that any command line parses or fails to, never panicking.

use proptest::prelude::*;

use crate::Cli;
use crate::test_alloc::{input_bound, largest_alloc};

/// A flag of a subcommand and values it takes (and some it refuses); none
/// for a switch.
pub(crate) type Flag = (&'static str, &'static [&'static str]);

/// The flags of `setcache bench`.
pub(crate) const BENCH_FLAGS: &[Flag] = &[
    ("--dir", &["/nonexistent/d", "/tmp"]),
    (
        "--file-size",
        &["1G", "64M", "4k", "0", "4097", "1T", "20000000T"],
    ),
    ("--devices", &["1", "4", "256", "257", "0"]),
    ("--layout", &["stripe", "rotated", "hash", "raid5"]),
    (
        "--engine",
        &[
            "direct",
            "setcache",
            "direct,mmap",
            "linux-buffered,direct-copy",
            "libaio",
            "",
        ],
    ),
    (
        "--rw",
        &["randread", "randwrite", "randrw", "read", "write", "trim"],
    ),
    ("--rwmix-read", &["0", "50", "100", "101"]),
    ("--bs", &["4k", "512", "8k", "3000", "1M", "0"]),
    ("--threads", &["1", "2,4", "1024", "1025", "0"]),
    ("--iodepth", &["1", "32", "4096", "4097"]),
    ("--poll-us", &["0", "10", "1000000", "1000001"]),
    (
        "--cache-size",
        &["128M", "16M", "1G", "0", "1T", "20000000T"],
    ),
    ("--hit-ratio", &["0,50,90,100", "90", "101", "-1", "nan"]),
    ("--hot-size", &["64M", "4k", "0", "2G"]),
    (
        "--dist",
        &["uniform", "zipf:0.99", "zipf:0", "zipf:1.2", "pareto"],
    ),
    ("--runtime", &["3", "0.5", "0.01", "0", "86401", "nan"]),
    ("--ramp", &["0", "1", "-1"]),
    ("--policy", &["gclock", "sa-lru", "arc"]),
    ("--repeat", &["1", "3", "99", "100"]),
    ("--json", &["/nonexistent/x.json", "out.json", "/tmp"]),
    ("--plot", &["/tmp", "x.svg", "/nonexistent/y.svg"]),
    ("--compare-fio", &[]),
    ("--block-pages", &["1", "16", "65536", "65537"]),
    ("--io-engine", &["auto", "uring", "psync", "x"]),
    ("--seed", &["1", "18446744073709551615", "-1"]),
    ("--no-progress", &[]),
    ("--readahead", &["off", "8M", "0", "4k", "1T", "x"]),
    ("--api", &["queue", "sync", "async", "callback"]),
    (
        "--futures-cpus",
        &[
            "off-interrupts",
            "anywhere",
            "0",
            "0,1",
            "1-0",
            "99999",
            "x",
        ],
    ),
    ("--access", &["copy", "ref", "mmap"]),
    ("--compute", &["sum", "search", "max"]),
    ("--touch", &["1", "64", "4096", "4097", "0"]),
    (
        "--job",
        &[
            "rw=read",
            "name=hot,rw=randread,size=64M",
            "rw=read,offset=2G",
            "bs=4k",
            "rw=read,threads=0",
            "rw=read,delay=5",
        ],
    ),
];

/// The flags of `setcache hitbench`.
pub(crate) const HIT_FLAGS: &[Flag] = &[
    ("--cache-size", &["16M", "1G", "4k", "0", "64M,1G"]),
    ("--read-size", &["128", "4096", "4097", "0", "1,4k"]),
    ("--threads", &["1", "2,64", "1024", "1025", "0"]),
    ("--runtime", &["0.01", "2", "86400", "86401", "0", "nan"]),
    ("--rounds", &["1", "5", "1000", "1001", "4294967296", "0"]),
    ("--policy", &["gclock", "lru", "sa-lru", "arc"]),
    ("--assoc", &["4", "12", "32", "33", "3"]),
    ("--independent", &[]),
    ("--sum", &[]),
];

/// The flags of `setcache sim`.
pub(crate) const SIM_FLAGS: &[Flag] = &[
    ("--trace", &["uniform:pages=10,ops=10", "text:/nonexistent"]),
    (
        "--policy",
        &["all", "sa", "global", "lru,sa-lru", "arc", "opt", "x"],
    ),
    (
        "--cache-size",
        &["10%", "65536p", "512M", "1k", "0p", "1e300%", "100%,1%"],
    ),
    ("--set-size", &["12", "4,32", "3", "33"]),
    ("--page-size", &["4k", "512", "3000", "8k", "0"]),
    ("--warmup", &["0.5", "0", "1", "-0.1", "nan"]),
    ("--ops", &["all", "reads", "writes", "x"]),
    ("--json", &["out.json"]),
    ("--plot", &["out.svg"]),
];

/// A flag's value: sizes, counts, ratios, lists, names of every flag's
/// choices (good and bad), paths, and any text.
pub(crate) fn value() -> impl Strategy<Value = String> {
    let words: &[&str] = &[
        // sizes
        "4k",
        "512",
        "1G",
        "16M",
        "3000",
        "1.5G",
        "0",
        "0.3k",
        "20000000T",
        "64kib",
        "1p",
        "65536p",
        "10%",
        "0%",
        "1e300%",
        "nan%",
        // counts and ratios
        "1",
        "4",
        "12",
        "32",
        "33",
        "1024",
        "1025",
        "65536",
        "65537",
        "4294967296",
        "99999999999999999999",
        "-3",
        "1e3",
        "0.5",
        "0.99",
        "1.0",
        "nan",
        "inf",
        "-0",
        "2.5s",
        "86401",
        "100",
        "101",
        "100%",
        // lists
        "1,2,64",
        "0,50,90,100",
        ",",
        "",
        "1,,2",
        "4,32",
        "0,1",
        // names
        "stripe",
        "hash",
        "raid5",
        "gclock",
        "sa-lru",
        "SA-S3FIFO",
        "all",
        "sa",
        "global",
        "lru,arc",
        "opt",
        "direct,mmap",
        "setcache",
        "direct-copy,linux-direct",
        "libaio",
        "randrw",
        "randread",
        "read",
        "write",
        "trim",
        "uniform",
        "zipf:0.99",
        "zipf:0",
        "zipf:1e9",
        "reads",
        "writes",
        "All",
        "auto",
        "uring",
        "psync",
        // traces (never loaded by these tests)
        "uniform:pages=10,ops=10",
        "text:/nonexistent",
        // paths
        "/nonexistent/x.json",
        "/tmp",
        "out.svg",
        "/",
    ];
    prop_oneof![
        6 => proptest::sample::select(words).prop_map(str::to_string),
        1 => any::<u64>().prop_map(|v| v.to_string()),
        1 => ".{0,12}",
    ]
}

/// One token: a flag of `flags` (or made up), a flag with `=value`, or a
/// value.
pub(crate) fn token(flags: &'static [Flag]) -> impl Strategy<Value = String> {
    let name = proptest::sample::select(flags).prop_map(|f| f.0);
    prop_oneof![
        4 => name.clone().prop_map(str::to_string),
        3 => value(),
        2 => (name, value()).prop_map(|(f, v)| format!("{f}={v}")),
        1 => prop_oneof![Just("--help"), Just("-h"), Just("--version"), Just("--"), Just("-")]
            .prop_map(str::to_string),
        1 => "--[a-z-]{0,10}",
    ]
}

/// `flag` with a value: mostly one of its own, sometimes any value; as two
/// tokens or as `--flag=value`. A switch stands alone.
fn with_value(flag: Flag) -> BoxedStrategy<Vec<String>> {
    let (name, values) = flag;
    if values.is_empty() {
        return Just(vec![name.to_string()]).boxed();
    }
    let v = prop_oneof![
        4 => proptest::sample::select(values).prop_map(str::to_string),
        1 => value(),
    ];
    (v, any::<bool>())
        .prop_map(move |(v, eq)| {
            if eq {
                vec![format!("{name}={v}")]
            } else {
                vec![name.to_string(), v]
            }
        })
        .boxed()
}

/// `setcache SUBCOMMAND` and tokens for it: some of `flags`, each once with
/// a value, in any order; `required` flags most of the time; now and then a
/// stray token (which may repeat a flag or lack a value).
pub(crate) fn argv(
    subcommand: &'static str,
    flags: &'static [Flag],
    required: &'static [Flag],
) -> impl Strategy<Value = Vec<String>> {
    let chosen = proptest::sample::subsequence(flags.to_vec(), 0..=flags.len().min(8));
    let keep = proptest::collection::vec(proptest::bool::weighted(0.95), required.len());
    let stray = proptest::option::weighted(0.15, (token(flags), any::<proptest::sample::Index>()));
    (chosen, keep, stray)
        .prop_flat_map(move |(mut chosen, keep, stray)| {
            for (r, k) in required.iter().zip(keep) {
                if k && !chosen.iter().any(|c| c.0 == r.0) {
                    chosen.push(*r);
                }
            }
            let parts: Vec<BoxedStrategy<Vec<String>>> =
                chosen.into_iter().map(with_value).collect();
            (parts.prop_shuffle(), Just(stray))
        })
        .prop_map(move |(parts, stray)| {
            let mut a = vec!["setcache".to_string(), subcommand.to_string()];
            a.extend(parts.into_iter().flatten());
            if let Some((t, at)) = stray {
                let i = 2 + at.index(a.len() - 1);
                a.insert(i, t);
            }
            a
        })
}

/// Parses `argv` with the allocation probe on; fails the case on a
/// panic or an allocation past the bound. An error renders as text.
pub(crate) fn parse(argv: &[String]) -> Result<Result<Cli, String>, TestCaseError> {
    let n: usize = argv.iter().map(|a| a.len() + 1).sum();
    let (r, largest) = largest_alloc(|| crate::parse_cli(argv).map_err(|e| e.to_string()));
    prop_assert!(
        largest <= input_bound(n),
        "{argv:?}: {largest} bytes asked for at once"
    );
    if let Err(e) = &r {
        prop_assert!(!e.is_empty());
    }
    Ok(r)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Any command line, any subcommand, parses or is refused with a message.
    #[test]
    fn any_command_line_parses_or_is_refused(
        subcommand in prop_oneof![
            4 => proptest::sample::select(
                &["bench", "hitbench", "sim", "__bench-child", "", "--help"][..],
            )
            .prop_map(str::to_string),
            1 => "[a-z]{0,6}",
        ],
        tokens in proptest::collection::vec(
            prop_oneof![token(BENCH_FLAGS), token(HIT_FLAGS), token(SIM_FLAGS)],
            0..8,
        ),
    ) {
        let mut argv = vec!["setcache".to_string(), subcommand];
        argv.extend(tokens);
        let _ = parse(&argv)?;
    }
}

/// The demo's arguments parse as bench arguments.
#[test]
fn demo_arguments_parse() {
    let argv = ["setcache", "bench"]
        .iter()
        .chain(crate::bench::DEMO_ARGS)
        .map(|s| s.to_string());
    let cli = crate::parse_cli(argv).unwrap();
    assert!(matches!(cli.command, Some(crate::Command::Bench(_))));
}
