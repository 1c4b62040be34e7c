//! The `setcache` command: `setcache bench ...` benchmarks the storage layer,
//! `setcache hitbench` the page cache's hit path, `setcache sim` the hit ratio
//! of replacement policies on a trace, `setcache arraybench` paged arrays
//! beside a vector, `setcache syncbench` durable writes beside the kernel's,
//! `setcache graph` graph analytics over setcache, mmap and memory,
//! `setcache cp` copies files into and out of a store.
//! Without arguments it runs a short demo bench.

/// `eprintln!` that never panics: stderr may be a pipe whose reader has gone.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

/// `eprint!` plus a flush, never panicking (the progress line).
macro_rules! say_raw {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let mut err = std::io::stderr();
        let _ = write!(err, $($arg)*);
        let _ = err.flush();
    }};
}

/// `println!` that never panics.
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

mod arraybench;
mod bench;
#[cfg(test)]
mod cli_tests;
mod cp;
mod graph;
mod hitbench;
mod simcmd;
mod syncbench;
#[cfg(test)]
#[path = "../../test_alloc.rs"]
mod test_alloc;
mod threads;

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "setcache",
    version,
    about = "A user-space, set-associative page cache over an array of SSDs",
    long_about = "A user-space, set-associative page cache over an array of SSDs.\n\n\
                  Run without arguments for a demo (about a minute): random 4 KiB reads at hit ratios\n\
                  0, 50, 90 and 100% on setcache, the Linux page cache and O_DIRECT, a table\n\
                  and setcache-demo.svg (IOPS against hit ratio)."
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand, Debug)]
enum Command {
    // About and long help come from `BenchArgs`.
    Bench(Box<bench::BenchArgs>),
    /// Measure the page cache's hit path beside a bare memcpy baseline
    Hitbench(hitbench::HitArgs),
    /// Measure a paged array beside a vector in memory
    Arraybench(arraybench::ArrayArgs),
    /// Breadth-first search and PageRank on an R-MAT graph over setcache,
    /// mmap and memory
    Graph(graph::GraphArgs),
    // Its help is `SimArgs`'s own (a doc comment here would replace it).
    Sim(simcmd::SimArgs),
    /// Copy a file into a store, out of it, or within it (store:NAME names a
    /// file of the store)
    Cp(cp::CpArgs),
    /// Time `sync` of a cached file against its dirty pages and the cache size
    Syncbench(syncbench::SyncArgs),
    /// Internal: runs a Linux engine for `bench` (job on stdin, result on stdout)
    #[command(name = bench::CHILD_SUBCOMMAND, hide = true)]
    BenchChild,
    /// Internal: runs an mmap backing for `graph` (job on stdin, result on stdout)
    #[command(name = graph::CHILD_SUBCOMMAND, hide = true)]
    GraphChild,
}

/// The ids of the flags `m` took from the command line (not defaulted).
fn given_in(m: &clap::ArgMatches) -> Vec<String> {
    m.ids()
        .filter(|id| m.value_source(id.as_str()) == Some(clap::parser::ValueSource::CommandLine))
        .map(|id| id.to_string())
        .collect()
}

/// The command line parsed, with the flags each command was given noted
/// (`BenchArgs::given`, `GraphArgs::given`).
fn parse_cli<I, T>(argv: I) -> Result<Cli, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let m = Cli::command().try_get_matches_from(argv)?;
    let mut cli = Cli::from_arg_matches(&m)?;
    match (&mut cli.command, m.subcommand()) {
        (Some(Command::Bench(a)), Some((_, sm))) => a.given = given_in(sm),
        (Some(Command::Graph(a)), Some((_, sm))) => a.given = given_in(sm),
        _ => {}
    }
    Ok(cli)
}

fn main() -> ExitCode {
    // Past the file-size limit a write then fails with EFBIG, which is
    // reported, instead of SIGXFSZ killing the process without a word.
    bench::fsize::ignore_sigxfsz();
    let cli = parse_cli(std::env::args_os()).unwrap_or_else(|e| e.exit());
    let result = match cli.command {
        Some(Command::Bench(args)) => bench::run(*args),
        Some(Command::Hitbench(args)) => hitbench::run(args),
        Some(Command::Arraybench(args)) => arraybench::run(args),
        Some(Command::Graph(args)) => graph::run(args),
        Some(Command::Sim(args)) => simcmd::run(args),
        Some(Command::Cp(args)) => cp::run(args),
        Some(Command::Syncbench(args)) => syncbench::run(args),
        Some(Command::BenchChild) => return ExitCode::from(bench::child_main() as u8),
        Some(Command::GraphChild) => return ExitCode::from(graph::child_main() as u8),
        None => {
            let argv = ["setcache", "bench"].iter().chain(bench::DEMO_ARGS);
            let demo = parse_cli(argv).unwrap_or_else(|e| e.exit());
            say!(
                "no arguments: running a demo, `setcache bench {}` (see `setcache bench --help`)",
                bench::DEMO_ARGS.join(" ")
            );
            match demo.command {
                Some(Command::Bench(args)) => bench::run(*args),
                _ => Err("internal error: the demo arguments do not parse".to_string()),
            }
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            say!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
