//! Inputs the command line must refuse cleanly: an error that names the flag,
//! the value and the limit, a non-zero exit code, and no panic, abort, hang
//! or death by signal. Sizes beyond the machine (`sim`), and a file-size
//! limit (`ulimit -f`) below what the bench or the simulator writes.

mod common;

use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::Tmpfs;

/// How a run of the binary ended.
struct Run {
    code: Option<i32>,
    signal: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Limits set in the child before it runs.
#[derive(Clone, Copy, Default)]
struct Limits {
    /// `RLIMIT_FSIZE` (`ulimit -f`), bytes.
    file_size: Option<u64>,
    /// `RLIMIT_AS` (`ulimit -v`), bytes: a runaway allocation fails fast
    /// instead of taking the machine's memory.
    address_space: Option<u64>,
    /// `RUST_MIN_STACK`: the stack, in bytes, of each thread the binary
    /// starts (with `address_space`, a bound on how many it can start).
    min_stack: Option<u64>,
}

/// The address space the `sim` runs get.
const SIM_MEMORY: u64 = 2 << 30;

fn setrlimit_fsize(bytes: u64) -> std::io::Result<()> {
    let r = libc::rlimit {
        rlim_cur: bytes,
        rlim_max: bytes,
    };
    // SAFETY: setrlimit reads the struct it is given.
    if unsafe { libc::setrlimit(libc::RLIMIT_FSIZE, &r) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

fn setrlimit_as(bytes: u64) -> std::io::Result<()> {
    let r = libc::rlimit {
        rlim_cur: bytes,
        rlim_max: bytes,
    };
    // SAFETY: setrlimit reads the struct it is given.
    if unsafe { libc::setrlimit(libc::RLIMIT_AS, &r) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Runs `setcache ARGS` in `dir` under `limits`, killing it after a minute.
fn run(dir: &Path, args: &[&str], limits: Limits) -> Run {
    run_for(dir, args, limits, Duration::from_secs(60))
}

/// Runs `setcache ARGS` in `dir` under `limits`, killing it after `timeout`.
fn run_for(dir: &Path, args: &[&str], limits: Limits, timeout: Duration) -> Run {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_setcache"));
    cmd.args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(b) = limits.min_stack {
        cmd.env("RUST_MIN_STACK", b.to_string());
    }
    // SAFETY: the closure only calls setrlimit, which is async-signal-safe.
    unsafe {
        cmd.pre_exec(move || {
            if let Some(b) = limits.file_size {
                setrlimit_fsize(b)?;
            }
            if let Some(b) = limits.address_space {
                setrlimit_as(b)?;
            }
            Ok(())
        });
    }
    let child = Captured::spawn(&mut cmd);
    child.finish(timeout, &format!("setcache {args:?} hung"))
}

/// A child whose output threads collect its stdout and stderr.
struct Captured {
    child: std::process::Child,
    out: std::thread::JoinHandle<String>,
    err: std::thread::JoinHandle<String>,
}

impl Captured {
    fn spawn(cmd: &mut Command) -> Captured {
        let mut child = cmd.spawn().expect("run the setcache binary");
        let mut out = child.stdout.take().unwrap();
        let mut err = child.stderr.take().unwrap();
        let out = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = out.read_to_string(&mut s);
            s
        });
        let err = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = err.read_to_string(&mut s);
            s
        });
        Captured { child, out, err }
    }

    /// Waits for the child to end, killing it and panicking with `hung`
    /// after `timeout`.
    fn finish(mut self, timeout: Duration, hung: &str) -> Run {
        let start = Instant::now();
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            if start.elapsed() > timeout {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!("{hung} (killed after {timeout:?})");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        Run {
            code: status.code(),
            signal: status.signal(),
            stdout: self.out.join().unwrap(),
            stderr: self.err.join().unwrap(),
        }
    }
}

fn sim(args: &[&str]) -> Run {
    let mut all = vec!["sim"];
    all.extend_from_slice(args);
    let limits = Limits {
        address_space: Some(SIM_MEMORY),
        ..Limits::default()
    };
    run(&std::env::temp_dir(), &all, limits)
}

/// The run failed with exit code 1 and an `error:` line holding every one of
/// `words`, without a panic, an abort or a signal.
fn assert_refused(r: &Run, what: &str, words: &[&str]) {
    let all = format!("stdout:\n{}\nstderr:\n{}", r.stdout, r.stderr);
    assert_eq!(
        r.signal, None,
        "{what}: killed by signal {:?}\n{all}",
        r.signal
    );
    assert_eq!(r.code, Some(1), "{what}: exit code\n{all}");
    for bad in ["panicked", "capacity overflow", "memory allocation"] {
        assert!(!r.stderr.contains(bad), "{what}: {bad:?} in\n{all}");
    }
    let line = r
        .stderr
        .lines()
        .find(|l| l.starts_with("error: "))
        .unwrap_or_else(|| panic!("{what}: no error line\n{all}"));
    for w in words {
        assert!(line.contains(w), "{what}: {w:?} not in {line:?}");
    }
}

/// The run succeeded.
fn assert_ok(r: &Run, what: &str) {
    assert!(
        r.code == Some(0),
        "{what}: code {:?}, signal {:?}\nstdout:\n{}\nstderr:\n{}",
        r.code,
        r.signal,
        r.stdout,
        r.stderr
    );
}

#[test]
fn sim_refuses_a_cache_too_large_for_the_machine() {
    let r = sim(&[
        "--trace",
        "uniform:pages=1000,ops=10000",
        "--cache-size",
        "100T",
    ]);
    assert_refused(
        &r,
        "--cache-size 100T",
        &["--cache-size 100T", "sa-", "26843545600 pages", "allows"],
    );
    // A global policy needs no more than the pages the trace touches.
    for policy in ["fifo", "wtinylfu", "opt", "global"] {
        let r = sim(&[
            "--trace",
            "uniform:pages=1000,ops=10000",
            "--cache-size",
            "100T,18446744073709551615p",
            "--policy",
            policy,
        ]);
        assert_ok(&r, policy);
        assert!(r.stdout.contains("26843545600"), "{}", r.stdout);
    }
}

#[test]
fn sim_refuses_a_ycsb_table_beyond_its_key_space() {
    let spec = "ycsb:records=18446744073709551615,ops=10";
    let r = sim(&["--trace", spec]);
    assert_refused(
        &r,
        spec,
        &[spec, "records=18446744073709551615", "9223372036854775806"],
    );
    // The largest table YCSB can number loads: ten lookups touch at most
    // twenty pages, whatever the size of the table.
    let r = sim(&[
        "--trace",
        "ycsb:records=9223372036854775806,ops=10",
        "--policy",
        "lru",
    ]);
    assert_ok(&r, "records=9223372036854775806");
}

#[test]
fn sim_checks_the_page_size_as_bench_checks_the_block_size() {
    let trace = ["--trace", "uniform:pages=100,ops=1000", "--policy", "lru"];
    let mut args = trace.to_vec();
    args.extend(["--page-size", "3000"]);
    let r = sim(&args);
    assert_refused(
        &r,
        "--page-size 3000",
        &["--page-size 3000", "multiple of 512"],
    );
    let r = run(
        &std::env::temp_dir(),
        &["bench", "--bs", "3000", "--engine", "direct"],
        Limits::default(),
    );
    assert_refused(&r, "bench --bs 3000", &["--bs 3000", "multiple of 512"]);
    for ok in ["512", "4k", "64k"] {
        let mut args = trace.to_vec();
        args.extend(["--page-size", ok]);
        assert_ok(&sim(&args), ok);
    }
}

#[test]
fn sim_refuses_other_sizes_beyond_reach() {
    let cases: [(&[&str], &[&str]); 6] = [
        (
            &["--trace", "uniform:pages=10,ops=100000000000000000"],
            &["ops=100000000000000000", "allows"],
        ),
        (
            &["--trace", "zipf:pages=100000000000000000,ops=10,theta=1.5"],
            &["pages=100000000000000000", "theta >= 1", "allows"],
        ),
        (
            &[
                "--trace",
                "ycsb:records=9223372036854775806,ops=10,per_leaf=1,fanout=1",
            ],
            &["records=9223372036854775806", "64-bit"],
        ),
        (
            &["--trace", "scan:pages=100000,loops=100000000000000000"],
            &["loops=100000000000000000", "overflows"],
        ),
        (
            &["--trace", "uniform:pages=10,ops=0"],
            &["ops must be positive"],
        ),
        (
            &["--trace", "uniform:pages=1000,ops=100", "--set-size", "0"],
            &["--set-size 0"],
        ),
    ];
    for (args, words) in cases {
        assert_refused(&sim(args), &args.join(" "), words);
    }
    let dir = std::env::temp_dir().join(format!("setcache-cli-errors-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let msr = dir.join("far.csv");
    std::fs::write(&msr, "1,hm,0,Read,18446744073709551000,4096,1\n").unwrap();
    let spec = format!("msr:{}", msr.display());
    assert_refused(
        &sim(&["--trace", &spec]),
        &spec,
        &["far.csv: line 1", "2^64"],
    );
    // Sizes that overflowed multiplications now simply run.
    for args in [
        &[
            "--trace",
            "uniform:pages=18446744073709551615,ops=100",
            "--policy",
            "lru",
        ][..],
        &[
            "--trace",
            "uniform:pages=1000,ops=10000",
            "--page-size",
            "1T",
            "--cache-size",
            "1e30%",
            "--policy",
            "linux,lru",
        ],
    ] {
        assert_ok(&sim(args), &args.join(" "));
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A scratch directory for one test.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("setcache-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

const LIMIT: u64 = 256 << 10;

fn bench(dir: &Path, extra: &[&str], file_size: Option<u64>) -> Run {
    let mut args = vec!["bench", "--dir", "data", "--file-size", "1M"];
    args.extend_from_slice(extra);
    args.extend(["--runtime", "0.2", "--no-progress"]);
    let limits = Limits {
        file_size,
        ..Limits::default()
    };
    run(dir, &args, limits)
}

#[test]
fn bench_refuses_a_file_above_the_file_size_limit() {
    let dir = scratch("fsize-bench");
    let r = bench(&dir, &["--engine", "direct"], Some(LIMIT));
    assert_refused(
        &r,
        "bench under ulimit -f",
        &[
            "--file-size 1M",
            "262144 bytes",
            "1052672 bytes",
            "ulimit -f",
        ],
    );
    // A file filled without the limit is read under it, but not written.
    assert_ok(&bench(&dir, &["--engine", "direct"], None), "no limit");
    let r = bench(&dir, &["--engine", "direct,linux-direct"], Some(LIMIT));
    assert_ok(&r, "reads of a filled file under the limit");
    let r = bench(
        &dir,
        &["--engine", "direct", "--rw", "randwrite"],
        Some(LIMIT),
    );
    assert_refused(
        &r,
        "writes under ulimit -f",
        &["--file-size 1M", "262144 bytes", "ulimit -f"],
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_demo_refuses_its_file_under_a_file_size_limit() {
    let dir = scratch("fsize-demo");
    let r = run(
        &dir,
        &[],
        Limits {
            file_size: Some(LIMIT),
            ..Limits::default()
        },
    );
    assert_refused(
        &r,
        "demo under ulimit -f",
        &["--file-size 1G", "262144 bytes", "ulimit -f"],
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn writes_past_the_file_size_limit_are_reported_not_fatal() {
    let dir = scratch("fsize-sim");
    let r = run(
        &dir,
        &[
            "sim",
            "--trace",
            "uniform:pages=100,ops=1000",
            "--policy",
            "lru",
            "--plot",
            "mrc.svg",
        ],
        Limits {
            file_size: Some(1024),
            ..Limits::default()
        },
    );
    assert_refused(
        &r,
        "sim --plot under ulimit -f",
        &["mrc.svg", "File too large", "1024 bytes", "ulimit -f"],
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn thread_counts_beyond_reach_are_refused() {
    let r = run(
        &std::env::temp_dir(),
        &["hitbench", "--threads", "100000", "--cache-size", "16M"],
        Limits::default(),
    );
    assert_refused(
        &r,
        "hitbench --threads 100000",
        &["--threads 100000", "at most 1024"],
    );
}

#[test]
fn threads_the_system_refuses_end_the_command_with_an_error() {
    // Each thread's stack is 256 MiB in an address space of 2,000 MiB: the
    // library's own threads start, and a command's 64 cannot all. Before,
    // each command panicked at the thread refused; the bench, the hit bench
    // and the array bench then hung, their threads already started waiting
    // at barriers or running until a stop that never came.
    let dir = scratch("spawn");
    let limits = Limits {
        address_space: Some(2000 << 20),
        min_stack: Some(256 << 20),
        ..Limits::default()
    };
    let graph = dir.join("graph");
    std::fs::create_dir_all(&graph).unwrap();
    let runs: [&[&str]; 4] = [
        &[
            "bench",
            "--dir",
            "data",
            "--file-size",
            "1M",
            "--engine",
            "direct",
            "--threads",
            "64",
            "--runtime",
            "0.2",
            "--no-progress",
        ],
        &[
            "hitbench",
            "--threads",
            "64",
            "--runtime",
            "0.2",
            "--cache-size",
            "16M",
        ],
        &[
            "arraybench",
            "--size",
            "1M",
            "--threads",
            "64",
            "--rounds",
            "1",
            "--ops",
            "1000",
            "--workload",
            "uniform",
        ],
        &[
            "graph",
            "--dir",
            "graph",
            "--scale",
            "8",
            "--threads",
            "64",
            "--backing",
            "memory",
            "--no-progress",
        ],
    ];
    for args in runs {
        let r = run(&dir, args, limits);
        assert_refused(
            &r,
            &args.join(" "),
            &[
                "the system refused to start thread",
                "of 64",
                "fewer threads",
            ],
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

fn hitbench(args: &[&str]) -> Run {
    let mut all = vec!["hitbench"];
    all.extend_from_slice(args);
    run(&std::env::temp_dir(), &all, Limits::default())
}

#[test]
fn hitbench_refuses_no_threads_no_rounds_and_a_runtime_below_its_floor() {
    let base = [
        "--cache-size",
        "1M",
        "--read-size",
        "128",
        "--runtime",
        "0.1",
        "--rounds",
        "1",
        "--threads",
        "1",
    ];
    let with = |flag: &str, value: &str| {
        let mut args = base.to_vec();
        let i = args.iter().position(|a| *a == flag).unwrap();
        args[i + 1] = value;
        hitbench(&args)
    };
    let cases: [(&str, &str, &[&str]); 7] = [
        (
            "--threads",
            "0",
            &["--threads 0", "at least 1", "at most 1024"],
        ),
        ("--threads", "1,0", &["--threads 0", "at least 1"]),
        ("--rounds", "0", &["--rounds 0", "from 1 to 1000"]),
        ("--rounds", "1001", &["--rounds 1001", "from 1 to 1000"]),
        (
            "--runtime",
            "0.001",
            &["--runtime 0.001", "from 0.1 to 86400"],
        ),
        ("--runtime", "0", &["--runtime 0", "from 0.1 to 86400"]),
        ("--runtime", "NaN", &["--runtime NaN", "from 0.1 to 86400"]),
    ];
    for (flag, value, words) in cases {
        let r = with(flag, value);
        assert_refused(&r, &format!("hitbench {flag} {value}"), words);
        assert!(
            r.stdout.is_empty(),
            "{flag} {value}: measured\n{}",
            r.stdout
        );
    }
    // The bounds themselves run.
    let r = hitbench(&base);
    assert_ok(&r, "hitbench at the lower bounds");
    assert!(r.stdout.lines().count() >= 2, "{}", r.stdout);
}

/// `--sum` adds the two in-place phases: their rates and the ratio to the
/// bare copy come out as three more columns, each a positive number.
#[test]
fn hitbench_sum_measures_the_in_place_phases() {
    let r = hitbench(&[
        "--cache-size",
        "1M",
        "--read-size",
        "4096",
        "--runtime",
        "0.2",
        "--rounds",
        "2",
        "--threads",
        "1",
        "--sum",
        "--independent",
    ]);
    assert_ok(&r, "hitbench --sum");
    let mut lines = r.stdout.lines();
    let head = lines.next().expect("a header");
    for col in ["in place M/s", "pinned in place M/s", "in place x"] {
        assert!(head.contains(col), "{col} missing: {head}");
    }
    let row: Vec<&str> = lines.next().expect("a row").split_whitespace().collect();
    assert_eq!(row.len(), 13, "{row:?}");
    for v in &row[10..] {
        let v: f64 = v.parse().unwrap_or_else(|e| panic!("{v}: {e}"));
        assert!(v > 0.0 && v.is_finite(), "{row:?}");
    }
}

#[test]
fn hitbench_checks_every_listed_size_before_measuring() {
    for sizes in ["128,8k", "8k,128", "128,0", "128,x"] {
        let r = hitbench(&[
            "--cache-size",
            "1M",
            "--read-size",
            sizes,
            "--runtime",
            "0.1",
            "--rounds",
            "1",
            "--threads",
            "1",
        ]);
        let bad = sizes.split(',').find(|s| *s != "128").unwrap();
        assert_refused(
            &r,
            &format!("--read-size {sizes}"),
            &[&format!("--read-size {bad}")],
        );
        assert!(
            r.stdout.is_empty() && !r.stderr.contains("resident"),
            "--read-size {sizes}: measured before the refusal\nstdout:\n{}\nstderr:\n{}",
            r.stdout,
            r.stderr
        );
    }
    // Each cache is made after the one before is measured: a size that
    // cannot be made is refused before the first.
    let cases: [(&str, &[&str]); 3] = [
        ("1M,bogus", &["--cache-size bogus", "invalid size"]),
        ("1M,0", &["--cache-size 0", "smaller than one set"]),
        ("1M,1024T", &["--cache-size 1024T", "more than"]),
    ];
    for (sizes, words) in cases {
        let r = hitbench(&[
            "--cache-size",
            sizes,
            "--runtime",
            "0.1",
            "--rounds",
            "1",
            "--threads",
            "1",
        ]);
        assert_refused(&r, &format!("--cache-size {sizes}"), words);
        assert!(
            r.stdout.is_empty() && !r.stderr.contains("resident"),
            "--cache-size {sizes}: measured before the refusal\nstdout:\n{}\nstderr:\n{}",
            r.stdout,
            r.stderr
        );
    }
}

#[test]
fn sim_checks_its_output_paths_before_simulating() {
    let dir = scratch("sim-outputs");
    let missing = dir.join("missing");
    let json = missing.join("r.json");
    let svg = missing.join("mrc.svg");
    let (json, svg, here) = (
        json.to_str().unwrap(),
        svg.to_str().unwrap(),
        dir.to_str().unwrap(),
    );
    let trace = ["--trace", "uniform:pages=100,ops=1000", "--policy", "lru"];
    // Even root cannot make a file in /sys: found by opening it, before the run.
    let sys = "/sys/setcache-results.json";
    let cases: [(&str, &str, &[&str]); 4] = [
        ("--json", json, &[json, "missing is not a directory"]),
        ("--plot", svg, &[svg, "missing is not a directory"]),
        ("--json", here, &[here, "it is a directory"]),
        ("--json", sys, &["cannot write", sys]),
    ];
    for (flag, path, words) in cases {
        let mut args = trace.to_vec();
        args.extend([flag, path]);
        let r = sim(&args);
        assert_refused(&r, &format!("sim {flag} {path}"), words);
        // Refused before the trace was even loaded.
        assert!(r.stdout.is_empty(), "{flag} {path}: ran\n{}", r.stdout);
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `--json` naming a FIFO a reader already waits on: the results reach the
/// reader (the check before the run opens no FIFO, which would end the
/// reader's wait with nothing and leave the run's write waiting for ever).
#[test]
fn sim_writes_its_json_into_a_fifo_with_a_reader() {
    let dir = scratch("sim-fifo");
    let fifo = dir.join("r.json");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    let path = fifo.clone();
    let reader = std::thread::spawn(move || {
        let mut got = String::new();
        std::fs::File::open(&path)
            .unwrap()
            .read_to_string(&mut got)
            .unwrap();
        got
    });
    let args = [
        "sim",
        "--trace",
        "uniform:pages=100,ops=1000",
        "--policy",
        "lru",
        "--json",
        fifo.to_str().unwrap(),
    ];
    let limits = Limits {
        address_space: Some(SIM_MEMORY),
        ..Limits::default()
    };
    let r = run_for(&dir, &args, limits, Duration::from_secs(30));
    assert_eq!(
        r.code,
        Some(0),
        "stdout:\n{}\nstderr:\n{}",
        r.stdout,
        r.stderr
    );
    let got = reader.join().unwrap();
    assert!(
        got.trim_start().starts_with('{') && got.contains("lru"),
        "the reader got {got:?}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `sim` and `bench` refuse, before they run, results written over the trace
/// they read (the trace would be lost) or `--json` and `--plot` naming one
/// file (one result written over the other), however the paths are spelled.
#[test]
fn results_are_not_written_over_the_trace_or_each_other() {
    let dir = scratch("outputs-clash");
    let trace = dir.join("t.txt");
    std::fs::write(&trace, "1\n2\n3\n1\n2\n").unwrap();
    let t = trace.to_str().unwrap();
    let spec = format!("text:{t}");
    let other = dir.join("r");
    let o = other.to_str().unwrap();
    let o_again = format!(
        "{}/../{}/r",
        dir.display(),
        dir.file_name().unwrap().to_str().unwrap()
    );
    let cases: [(&[&str], &[&str]); 3] = [
        (&["--json", t], &[t, "trace file"]),
        (&["--plot", t], &[t, "trace file"]),
        (&["--json", o, "--plot", &o_again], &["one file", o]),
    ];
    for (outs, words) in cases {
        let mut args = vec!["--trace", &spec, "--policy", "lru", "--cache-size", "2p"];
        args.extend_from_slice(outs);
        let r = sim(&args);
        assert_refused(&r, &format!("sim {outs:?}"), words);
        assert!(r.stdout.is_empty(), "{outs:?}: ran\n{}", r.stdout);
        let mut args = vec![
            "bench", "--dir", "data", "--engine", "setcache", "--trace", &spec,
        ];
        args.extend_from_slice(outs);
        args.extend(["--runtime", "0.2", "--no-progress"]);
        let r = run(&dir, &args, Limits::default());
        assert_refused(&r, &format!("bench {outs:?}"), words);
    }
    assert_eq!(std::fs::read_to_string(&trace).unwrap(), "1\n2\n3\n1\n2\n");
    assert!(!other.exists());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Bytes free to unprivileged users on the file system of `path`.
fn free_bytes(path: &Path) -> u64 {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: `statvfs` is plain data; zeroed is a valid value to overwrite.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a NUL-terminated path and `st` a struct statvfs fills.
    assert_eq!(unsafe { libc::statvfs(c.as_ptr(), &mut st) }, 0);
    st.f_bavail * st.f_frsize
}

/// A bench file larger than the free space is refused before anything is
/// written. Should the check be missing, the file-size limit stops the
/// prefill at once (and the run is killed after 20 s), so this never fills
/// the disk.
#[test]
fn bench_refuses_a_file_larger_than_the_free_space() {
    let dir = scratch("space-bench");
    let free = free_bytes(&dir);
    // Far beyond what is free, whatever else writes meanwhile, in whole GiB
    // (not TiB, so that the message shows it as given).
    let mut gib = (free + (16 << 30)).div_ceil(1 << 30);
    if gib.is_multiple_of(1024) {
        gib += 1;
    }
    let size_arg = format!("{gib}G");
    let r = run_for(
        &dir,
        &[
            "bench",
            "--dir",
            "data",
            "--file-size",
            &size_arg,
            "--engine",
            "direct",
            "--runtime",
            "0.2",
            "--no-progress",
        ],
        Limits {
            file_size: Some(64 << 20),
            ..Limits::default()
        },
        Duration::from_secs(20),
    );
    let data = dir.join("data");
    assert_refused(
        &r,
        "bench beyond the free space",
        &[
            &format!("--file-size {size_arg} needs"),
            "data/dev0",
            "bytes free",
            "smaller --file-size",
        ],
    );
    assert!(
        !data.join("dev0/bench.scf").exists(),
        "a backing file was made"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// On a small file system: a bench file that fits runs; one that does not is
/// refused with both sizes and the directory, and the old bench file (which
/// would be deleted to make the new one) is kept.
#[test]
fn bench_on_a_small_file_system_refuses_a_file_it_cannot_hold() {
    let dir = scratch("space-tmpfs");
    let Some(fs) = Tmpfs::mount(&dir.join("mnt"), 64) else {
        std::fs::remove_dir_all(&dir).unwrap();
        return;
    };
    let bench = |size: &str| {
        run(
            &fs.0,
            &[
                "bench",
                "--dir",
                "data",
                "--file-size",
                size,
                "--engine",
                "direct",
                "--runtime",
                "0.2",
                "--no-progress",
            ],
            Limits::default(),
        )
    };
    let r = bench("16M");
    if r.stderr.contains("does not support O_DIRECT") {
        let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
        assert!(!ci, "CI is set, but this kernel's tmpfs has no O_DIRECT");
        eprintln!("skipped: this kernel's tmpfs has no O_DIRECT");
        drop(fs);
        std::fs::remove_dir_all(&dir).unwrap();
        return;
    }
    assert_ok(&r, "a 16M bench file on a 64 MiB file system");
    let old = fs.0.join("data/dev0/bench.scf");
    let old_len = std::fs::metadata(&old).unwrap().len();
    let r = bench("128M");
    assert_refused(
        &r,
        "a 128M bench file on a 64 MiB file system",
        &[
            "--file-size 128M needs",
            "data/dev0",
            "bytes free",
            "old bench file",
        ],
    );
    assert_eq!(std::fs::metadata(&old).unwrap().len(), old_len);
    assert!(fs.0.join("data/bench.filled").exists());
    // The old file is still whole: reused as it is.
    let r = bench("16M");
    assert_ok(&r, "the 16M bench file again");
    assert!(
        r.stderr.contains("reusing the prefilled bench file"),
        "{}",
        r.stderr
    );
    drop(fs);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The setcache engine's synchronous and async APIs and page references:
/// refused where they do not apply, with the flag named; run where they do
/// (real runs, reading through page references from each API, and the mmap
/// engine touching the same bytes).
#[test]
fn bench_page_references_and_the_sync_api() {
    let dir = scratch("bench-ref");
    for (extra, words) in [
        (
            &[
                "--engine",
                "setcache",
                "--api",
                "sync",
                "--access",
                "ref",
                "--rw",
                "randwrite",
            ][..],
            &["--access ref", "randwrite"][..],
        ),
        (
            &[
                "--engine",
                "setcache",
                "--api",
                "async",
                "--job",
                "name=a,rw=randread",
            ],
            &["--job", "--api async"],
        ),
        (
            &[
                "--engine",
                "setcache",
                "--job",
                "name=a,rw=randrw",
                "--dist",
                "zipf:1.2",
                "--rwmix-read",
                "95",
                "--threads",
                "8",
            ],
            &["--job", "drop --dist, --rwmix-read, --threads"],
        ),
        (
            &["--engine", "linux-buffered", "--policy", "lru"],
            &["--policy", "give --engine setcache"],
        ),
        (
            &["--engine", "direct", "--readahead", "64M"],
            &["--readahead", "give --engine setcache"],
        ),
        (
            &["--engine", "linux-buffered", "--api", "async"],
            &["--api", "give --engine setcache"],
        ),
        (
            &["--engine", "setcache", "--poll-us", "100"],
            &["--poll-us", "give --engine direct"],
        ),
        (
            &["--engine", "setcache", "--touch", "4096"],
            &["--touch", "give --access ref"],
        ),
        (
            &["--engine", "direct,linux-buffered", "--access", "ref"],
            &["--access ref", "give one of them"],
        ),
        (
            &["--engine", "setcache-numa", "--compute", "--access", "ref"],
            &["--access ref", "give one of them"],
        ),
        (
            &[
                "--engine", "setcache", "--api", "sync", "--access", "ref", "--bs", "8k",
            ],
            &["--bs", "divide 4k"],
        ),
        (
            &[
                "--engine", "setcache", "--api", "sync", "--access", "ref", "--bs", "512",
                "--touch", "513",
            ],
            &["--touch 513", "at most --bs"],
        ),
        (
            &[
                "--engine",
                "setcache",
                "--api",
                "async",
                "--access",
                "ref",
                "--iodepth",
                "65",
            ],
            &["--iodepth 65", "may hold 64 at once"],
        ),
        (
            &[
                "--engine",
                "setcache",
                "--api",
                "sync",
                "--job",
                "name=a,rw=randread",
            ],
            &["--job", "--api sync"],
        ),
    ] {
        let what = extra.join(" ");
        assert_refused(&bench(&dir, extra, None), &what, words);
    }
    for extra in [
        &[
            "--engine",
            "setcache,mmap",
            "--api",
            "sync",
            "--access",
            "ref",
            "--touch",
            "64",
            "--rw",
            "randread",
        ][..],
        &[
            "--engine", "setcache", "--api", "sync", "--rw", "randrw", "--bs", "100",
        ],
        // Page references through the queue and through futures; futures
        // that copy, reading and writing.
        &[
            "--engine", "setcache", "--access", "ref", "--rw", "randread",
        ],
        &[
            "--engine", "setcache", "--api", "async", "--access", "ref", "--rw", "randread",
        ],
        &[
            "--engine", "setcache", "--api", "async", "--rw", "randrw", "--bs", "100",
        ],
    ] {
        let r = bench(&dir, extra, None);
        assert_ok(&r, &extra.join(" "));
        assert!(r.stdout.contains("setcache"), "{}", r.stdout);
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The setcache-numa engine and `--compute`: refused where they do not
/// apply, naming the flag; run where they do (real runs over two emulated
/// partitions, reads, writes and tasks).
#[test]
fn bench_partitions_and_compute() {
    let dir = scratch("bench-numa");
    for (extra, words) in [
        (
            &["--engine", "setcache", "--partitions", "2"][..],
            &["--partitions", "setcache-numa"][..],
        ),
        (
            &["--engine", "setcache-numa", "--compute", "--bs", "8k"],
            &["--compute", "--bs 8192"],
        ),
        (
            &["--engine", "direct", "--compute"],
            &["--compute", "not direct"],
        ),
        // Flags one engine would take and the other ignore.
        (
            &["--engine", "setcache", "--compute", "--api", "sync"],
            &["--compute", "--api"],
        ),
        (
            &[
                "--engine",
                "setcache-numa",
                "--compute",
                "--rw",
                "graphwalk",
                "--bs",
                "4k",
            ],
            &["--compute", "graphwalk"],
        ),
        (
            &["--engine", "setcache,setcache-numa", "--access", "ref"],
            &["--access", "not setcache-numa"],
        ),
        (
            &["--engine", "setcache,setcache-numa", "--readahead", "off"],
            &["--readahead", "not setcache-numa"],
        ),
    ] {
        assert_refused(&bench(&dir, extra, None), &extra.join(" "), words);
    }
    // The argument parser's own refusal (its exit code is 2).
    let r = bench(
        &dir,
        &["--engine", "setcache-numa", "--partitions", "65"],
        None,
    );
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    assert!(
        r.stderr.contains("--partitions") && r.stderr.contains("1..=64"),
        "{}",
        r.stderr
    );
    let r = bench(
        &dir,
        &["--engine", "setcache-numa", "--compute", "max"],
        None,
    );
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    assert!(
        r.stderr.contains("--compute") && r.stderr.contains("search"),
        "{}",
        r.stderr
    );
    for extra in [
        &[
            "--engine",
            "setcache-numa",
            "--partitions",
            "2",
            "--rw",
            "randrw",
        ][..],
        &[
            "--engine",
            "setcache-numa,setcache",
            "--partitions",
            "3",
            "--compute",
            "--bs",
            "512",
        ],
        &[
            "--engine",
            "setcache-numa,setcache",
            "--partitions",
            "2",
            "--compute",
            "search",
        ],
    ] {
        let r = bench(&dir, extra, None);
        assert_ok(&r, &extra.join(" "));
        assert!(r.stdout.contains("setcache-numa"), "{}", r.stdout);
    }
    // The search in place, through page references, and the header line
    // saying which computation ran where.
    let extra = [
        "--engine",
        "setcache",
        "--access",
        "ref",
        "--compute=search",
        "--bs",
        "1k",
    ];
    let r = bench(&dir, &extra, None);
    assert_ok(&r, &extra.join(" "));
    assert!(
        r.stderr.contains("searched for a key") && r.stderr.contains("in place"),
        "{}",
        r.stderr
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `arraybench --dir D` keeps its store in `D/arraydev0`: a file there that
/// it did not make is refused and kept, a directory another run holds is
/// left alone, and what it made itself is gone after a run.
#[test]
fn arraybench_leaves_files_it_did_not_make() {
    let dir = scratch("arraybench-dir");
    let args = [
        "arraybench",
        "--dir",
        "d",
        "--size",
        "1M",
        "--ops",
        "512",
        "--rounds",
        "1",
        "--workload",
        "seq",
    ];
    let root = dir.join("d/arraydev0");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("precious.txt"), b"keep me").unwrap();
    let r = run(&dir, &args, Limits::default());
    assert_refused(&r, "a foreign file", &["precious.txt", "did not make"]);
    assert_eq!(
        std::fs::read(root.join("precious.txt")).unwrap(),
        b"keep me"
    );
    std::fs::remove_file(root.join("precious.txt")).unwrap();
    // A store another process holds: refused, and its files stay.
    let held = setcache::Store::open(std::slice::from_ref(&root), Default::default()).unwrap();
    let r = run(&dir, &args, Limits::default());
    assert_refused(&r, "a held store", &["in use"]);
    assert!(
        root.join(".setcache-lock").exists(),
        "the holder's lock went"
    );
    drop(held);
    let r = run(&dir, &args, Limits::default());
    assert_ok(&r, "a run over an earlier run's leftovers");
    assert!(!root.exists(), "the run's own store stayed");
    // A --dir under directories that did not exist: the run makes them and
    // takes them all away again.
    let mut deep = args;
    deep[2] = "new/deeper/d";
    assert_ok(
        &run(&dir, &deep, Limits::default()),
        "a run in new directories",
    );
    assert!(
        !dir.join("new").exists(),
        "the directories the run made stayed"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Inputs the simulator, graph, array and bench commands once took and then
/// misread or died on: each is refused with an error naming what is wrong.
#[test]
fn sim_graph_and_arraybench_refuse_inputs_they_would_misread() {
    let dir = scratch("misread");
    let one = dir.join("one.txt");
    std::fs::write(&one, "5\n").unwrap();
    let spec = format!("text:{}", one.display());
    // The default warm-up takes the trace's one request: nothing to count.
    let r = sim(&["--trace", &spec, "--policy", "lru", "--cache-size", "1p"]);
    assert_refused(
        &r,
        "warm-up of the whole trace",
        &["--warmup", "leaving none"],
    );
    // Two devices whose pages would share numbers.
    let msr = dir.join("dev.csv");
    std::fs::write(&msr, "0,h,0,Read,0,4096\n1,h,65536,Read,0,4096\n").unwrap();
    let spec = format!("msr:{}", msr.display());
    let r = sim(&["--trace", &spec, "--policy", "lru", "--warmup", "0"]);
    assert_refused(&r, "device 65536", &["line 2", "device 65536"]);
    let msr = dir.join("far.csv");
    std::fs::write(&msr, "0,h,1,Read,1152921504606846976,4096\n").unwrap();
    let spec = format!("msr:{}", msr.display());
    let r = sim(&["--trace", &spec, "--policy", "lru", "--warmup", "0"]);
    assert_refused(&r, "page past 2^48", &["line 1", "2^48"]);
    // A zstd-compressed file (its magic, then anything) is not read as records.
    let zst = dir.join("t.oracleGeneral.zst");
    let mut bytes = vec![0x28, 0xb5, 0x2f, 0xfd];
    bytes.resize(48, 0);
    std::fs::write(&zst, bytes).unwrap();
    let spec = format!("oracle:{}", zst.display());
    let r = sim(&["--trace", &spec, "--policy", "lru"]);
    assert_refused(&r, "zstd", &["zstd-compressed", "decompress it first"]);
    // Sizes a run could not hold, and rounds without bound (which would run,
    // keeping each round's figures, for ever), refused before anything is made.
    for (flag, value, want) in [
        ("--ops", "18446744073709551615", "more than"),
        ("--rounds", "18446744073709551615", "at most 100000"),
        ("--page-size", "2M", "from 4k to 1M"),
        ("--page-size", "12k", "power of two"),
    ] {
        let r = run(
            &dir,
            &["arraybench", "--dir", "a", "--size", "1M", flag, value],
            Limits::default(),
        );
        assert_refused(&r, &format!("arraybench {flag}"), &[flag, want]);
        assert!(
            !dir.join("a").exists(),
            "arraybench made its directory first"
        );
    }
    let r = run(
        &dir,
        &[
            "graph",
            "--dir",
            "g",
            "--scale",
            "2",
            "--edge-factor",
            "1",
            "--depth",
            "1000000000000",
        ],
        Limits::default(),
    );
    assert_refused(&r, "graph --depth", &["--depth 1000000000000"]);
    let r = run(
        &dir,
        &["graph", "--dir", "g", "--scale", "31"],
        Limits::default(),
    );
    assert_refused(&r, "graph --scale 31", &["--scale 31", "more than"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Store files the commands did not make are not deleted: a `bench` file
/// in the bench's store without the bench's marker, a `syncbench` file in
/// the sync bench's; and a copy into the store that fails leaves no file
/// under the name it was to take, while one from a file whose length reads
/// 0 (a /proc file) copies to its end.
#[test]
fn store_files_the_commands_did_not_make_are_left_alone() {
    let dir = scratch("foreign-store-files");
    std::fs::write(dir.join("precious"), b"the user's own bytes").unwrap();
    let cp = |args: &[&str]| {
        let mut a = vec!["cp"];
        a.extend_from_slice(args);
        run(&dir, &a, Limits::default())
    };
    // The bench's store: --dir data, one device, data/dev0.
    std::fs::create_dir_all(dir.join("data/dev0")).unwrap();
    assert_ok(
        &cp(&["--devices", "data/dev0", "precious", "store:bench"]),
        "a copy in",
    );
    let r = bench(&dir, &["--engine", "direct"], None);
    assert_refused(&r, "a foreign bench file", &["\"bench\"", "did not make"]);
    assert_ok(
        &cp(&["--devices", "data/dev0", "store:bench", "back"]),
        "a copy out",
    );
    assert_eq!(
        std::fs::read(dir.join("back")).unwrap(),
        b"the user's own bytes"
    );
    // The sync bench's store.
    std::fs::create_dir_all(dir.join("sb")).unwrap();
    assert_ok(
        &cp(&["--devices", "sb", "precious", "store:syncbench"]),
        "a copy in",
    );
    let sync = |d: &str, cache: &str, dirty: &str| {
        let args = [
            "syncbench",
            "--dir",
            d,
            "--cache-size",
            cache,
            "--dirty",
            dirty,
            "--file-size",
            "4M",
            "--rounds",
            "1",
        ];
        run(&dir, &args, Limits::default())
    };
    let r = sync("sb", "1M", "1");
    assert_refused(
        &r,
        "a foreign syncbench file",
        &["\"syncbench\"", "will not delete"],
    );
    assert_ok(
        &cp(&["--devices", "sb", "store:syncbench", "back2"]),
        "a copy out",
    );
    assert_eq!(
        std::fs::read(dir.join("back2")).unwrap(),
        b"the user's own bytes"
    );
    // More dirty pages than half the cache holds: refused before anything.
    std::fs::create_dir_all(dir.join("sb2")).unwrap();
    let r = sync("sb2", "1M", "200");
    assert_refused(
        &r,
        "dirty pages past the cache",
        &["--dirty 200", "half the pages"],
    );
    // A copy that fails (a directory as its source) leaves no file.
    std::fs::create_dir_all(dir.join("cpd")).unwrap();
    let r = cp(&["--devices", "cpd", "data", "store:z"]);
    assert_refused(&r, "a directory copied in", &["is a directory"]);
    let r = cp(&["--devices", "cpd", "store:z", "z-out"]);
    assert_refused(&r, "the failed copy's file", &["not found"]);
    // A /proc file reads as 0 bytes long: copied to its end all the same.
    assert_ok(
        &cp(&["--devices", "cpd", "/proc/self/status", "store:status"]),
        "a /proc file copied in",
    );
    assert_ok(
        &cp(&["--devices", "cpd", "store:status", "status-out"]),
        "its copy out",
    );
    let text = std::fs::read_to_string(dir.join("status-out")).unwrap();
    assert!(text.starts_with("Name:"), "{text}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A set-associative cache holds whole sets: the simulator says how many
/// pages it simulated when that is fewer than asked. Counts of graph
/// searches and iterations past reason are refused, not run for days.
#[test]
fn sim_names_the_pages_it_simulated_and_graph_bounds_its_counts() {
    let r = sim(&[
        "--trace",
        "uniform:pages=100,ops=2000",
        "--policy",
        "sa-lru,lru",
        "--cache-size",
        "23p",
        "--set-size",
        "12",
    ]);
    assert_ok(&r, "a size that is not whole sets");
    let sa = r.stdout.lines().find(|l| l.starts_with("sa-lru")).unwrap();
    assert!(sa.contains("12 of 23"), "{}", r.stdout);
    let lru = r.stdout.lines().find(|l| l.starts_with("lru ")).unwrap();
    assert!(!lru.contains(" of "), "{}", r.stdout);
    let dir = scratch("graph-counts");
    for (flag, n) in [("--roots", "2000"), ("--iterations", "20000")] {
        let args = [
            "graph",
            "--dir",
            "g",
            "--scale",
            "8",
            "--backing",
            "memory",
            flag,
            n,
        ];
        let r = run(&dir, &args, Limits::default());
        assert_refused(&r, flag, &[flag, "at most"]);
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A gzip- or bzip2-compressed trace is known by its first bytes, as zstd
/// and xz ones are, whatever its name: read as the same trace as its plain
/// text (before, a name without `.gz` had its compressed bytes read as lines).
#[test]
fn compressed_traces_are_known_by_their_first_bytes() {
    use std::io::Write;
    let dir = scratch("trace-magic");
    let text: String = (0..500).map(|i| format!("{}\n", i % 37)).collect();
    std::fs::write(dir.join("plain.trace"), &text).unwrap();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(text.as_bytes()).unwrap();
    std::fs::write(dir.join("packed.trace"), gz.finish().unwrap()).unwrap();
    let hits = |name: &str| {
        let spec = format!("text:{}", dir.join(name).display());
        let r = sim(&["--trace", &spec, "--policy", "lru", "--cache-size", "10p"]);
        assert_ok(&r, name);
        r.stdout
            .lines()
            .find(|l| l.starts_with("lru"))
            .unwrap()
            .to_string()
    };
    let plain = hits("plain.trace");
    let packed = hits("packed.trace");
    // The rows agree but for the seconds and the rate.
    let first = |l: &str| l.split_whitespace().take(5).collect::<Vec<_>>().join(" ");
    assert_eq!(first(&plain), first(&packed));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The runtime's floor holds for each slice the phases take turns in: many
/// rounds of a short runtime are refused, not timed in slices of 100 us.
#[test]
fn hitbench_refuses_slices_below_the_floor() {
    let r = hitbench(&[
        "--cache-size",
        "1M",
        "--read-size",
        "128",
        "--runtime",
        "0.1",
        "--rounds",
        "1000",
    ]);
    assert_refused(
        &r,
        "hitbench --runtime 0.1 --rounds 1000",
        &["--rounds 1000", "slices of 0.1 ms"],
    );
    assert!(r.stdout.is_empty(), "measured\n{}", r.stdout);
}

/// Runs `setcache ARGS` in `dir`, sends it SIGINT once `ready` holds (looked
/// at every 10 ms for up to a minute), and returns how it ended.
fn interrupt_when(dir: &Path, args: &[&str], ready: impl Fn() -> bool) -> Run {
    let mut child = Captured::spawn(
        Command::new(env!("CARGO_BIN_EXE_setcache"))
            .args(args)
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    );
    let start = Instant::now();
    while !ready() {
        assert!(
            child.child.try_wait().unwrap().is_none(),
            "setcache {args:?} ended before it was interrupted"
        );
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "setcache {args:?} never got ready"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(100));
    let pid = child.child.id() as i32;
    // SAFETY: plain system call; the child is ours and not yet reaped.
    let sent = unsafe { libc::kill(pid, libc::SIGINT) };
    assert_eq!(sent, 0);
    child.finish(
        Duration::from_secs(60),
        &format!("setcache {args:?} did not stop after SIGINT"),
    )
}

/// `arraybench` and `syncbench` stopped by Ctrl-C end with an error saying
/// so, and leave no store file behind (nor the lock file of a store they
/// made); a whole `syncbench` run leaves its directory as it found it.
#[test]
fn array_and_sync_benches_stopped_by_ctrl_c_leave_no_files() {
    let dir = scratch("interrupted-benches");
    let root = dir.join("a/arraydev0");
    let args = [
        "arraybench",
        "--dir",
        "a",
        "--size",
        "8M",
        "--ops",
        "100000",
        "--rounds",
        "100000",
        "--workload",
        "uniform",
    ];
    let array_file = root.join("array.scf");
    let r = interrupt_when(&dir, &args, || array_file.exists());
    assert_refused(&r, "arraybench stopped by SIGINT", &["interrupted"]);
    assert!(
        !root.exists(),
        "arraybench left {:?}",
        std::fs::read_dir(&root).map(|d| d.flatten().map(|e| e.file_name()).collect::<Vec<_>>())
    );
    let sb = dir.join("s");
    std::fs::create_dir_all(&sb).unwrap();
    let sync = |rounds: &str| {
        vec![
            "syncbench".to_string(),
            "--dir".into(),
            "s".into(),
            "--cache-size".into(),
            "1M".into(),
            "--dirty".into(),
            "0,1".into(),
            "--file-size".into(),
            "4M".into(),
            "--rounds".into(),
            rounds.into(),
        ]
    };
    let listing = || {
        let mut v: Vec<_> = std::fs::read_dir(&sb)
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        v.sort();
        v
    };
    let a = sync("100000");
    let a: Vec<&str> = a.iter().map(|s| s.as_str()).collect();
    let sync_file = sb.join("syncbench.scf");
    let r = interrupt_when(&dir, &a, || sync_file.exists());
    assert_refused(&r, "syncbench stopped by SIGINT", &["interrupted"]);
    assert!(listing().is_empty(), "syncbench left {:?}", listing());
    let a = sync("2");
    let a: Vec<&str> = a.iter().map(|s| s.as_str()).collect();
    assert_ok(&run(&dir, &a, Limits::default()), "a whole syncbench run");
    assert!(listing().is_empty(), "syncbench left {:?}", listing());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The memory cgroup directory the bench's runs make theirs under (v1), if
/// this process has one.
fn own_memory_cgroup() -> Option<PathBuf> {
    let cg = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let mi = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let path = setcache::cache::own_cgroup(&cg, Some("memory"))?;
    let (mount, root) = setcache::cache::mount_of(&mi, true)?;
    let rel = path.strip_prefix(root.as_str()).unwrap_or(&path);
    let dir = Path::new(&mount).join(rel.trim_start_matches('/'));
    dir.join("memory.limit_in_bytes").exists().then_some(dir)
}

/// The bench's cgroups under `dir`.
fn bench_cgroups(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("setcache-bench-"))
                .collect()
        })
        .unwrap_or_default()
}

/// `graph` stopped by SIGINT while an mmap run is under way: it ends with
/// `interrupted` once that run is back, and leaves neither the run's memory
/// cgroup nor its ranks file (before, the signal ended the command at once
/// and both stayed).
#[test]
fn a_graph_run_stopped_by_ctrl_c_leaves_no_cgroup_or_ranks() {
    let Some(cgroups) = own_memory_cgroup() else {
        let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
        assert!(!ci, "CI is set, but there is no memory cgroup (v1) here");
        eprintln!("no memory cgroup (v1) here: the mmap runs need one; skipped");
        return;
    };
    let dir = scratch("interrupted-graph");
    let before = bench_cgroups(&cgroups);
    let args = [
        "graph",
        "--dir",
        "g",
        "--scale",
        "14",
        "--backing",
        "mmap",
        "--algo",
        "pagerank",
        "--iterations",
        "10000",
        "--budget",
        "64M",
        "--no-progress",
    ];
    let r = interrupt_when(&dir, &args, || bench_cgroups(&cgroups).len() > before.len());
    assert_refused(&r, "graph stopped by SIGINT", &["interrupted"]);
    let left: Vec<String> = bench_cgroups(&cgroups)
        .into_iter()
        .filter(|n| !before.contains(n))
        .collect();
    assert!(left.is_empty(), "graph left cgroups {left:?}");
    let files: Vec<_> = std::fs::read_dir(dir.join("g"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .filter(|n| n.to_string_lossy().starts_with(".graph-ranks"))
        .collect();
    assert!(files.is_empty(), "graph left {files:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A budget too small for a graph run is refused with the least one that
/// runs, whole: the readers' translation tables, which grow with the budget
/// and count in it, included (a refusal that named less than that sent the
/// user round again). Before the graph is made its lists are estimated;
/// after, counted.
#[test]
fn a_graph_budget_refused_names_the_least_that_runs() {
    let dir = scratch("least-budget");
    let graph = |budget: &str| {
        let args = [
            "graph",
            "--dir",
            "g",
            "--scale",
            "12",
            "--threads",
            "64",
            "--iterations",
            "1",
            "--algo",
            "pagerank",
            "--backing",
            "setcache",
            "--no-progress",
            "--budget",
            budget,
        ];
        run(&dir, &args, Limits::default())
    };
    // The MiB a refusal names after "needs [about]".
    let least = |r: &Run| -> u64 {
        let line = r.stderr.lines().find(|l| l.starts_with("error: ")).unwrap();
        let at = line.find("needs ").expect(line) + "needs ".len();
        let rest = line[at..].trim_start_matches("about ");
        rest.split(' ').next().unwrap().parse().expect(line)
    };
    let r = graph("1M");
    assert_refused(
        &r,
        "a budget of 1 MiB",
        &["--budget 1 MiB", "pagerank", "at least"],
    );
    let estimate = least(&r);
    // One MiB under the estimate is refused once the graph is made, with
    // the least budget counted (no more than the estimate).
    let r = graph(&format!("{}M", estimate - 1));
    assert_refused(&r, "a budget under the least", &["pagerank", "at least"]);
    let counted = least(&r);
    assert!(
        counted <= estimate && counted >= estimate - 2,
        "counted {counted} MiB, estimated {estimate} MiB"
    );
    assert_ok(&graph(&format!("{counted}M")), "the least budget counted");
    assert_ok(&graph(&format!("{estimate}M")), "the budget estimated");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Inputs found refused too late, or taken to the user's loss: results
/// named as a store's backing file, a store file `cp` put where the array
/// bench keeps its own, a budget beyond the machine and a setting no run
/// uses, sizes checked only when their turn came, an empty output path.
/// Each is refused before anything is written, and the user's files stay.
#[test]
fn refusals_come_first_and_keep_the_users_files() {
    let dir = scratch("refuse-first");
    std::fs::write(dir.join("mine"), b"the user's array").unwrap();
    let root = dir.join("ab/arraydev0");
    std::fs::create_dir_all(&root).unwrap();
    let r = run(
        &dir,
        &["cp", "--devices", "ab/arraydev0", "mine", "store:array"],
        Limits::default(),
    );
    assert_ok(&r, "a copy in");
    let ab = |d: &str, extra: &[&str]| {
        let mut a = vec![
            "arraybench",
            "--dir",
            d,
            "--size",
            "1M",
            "--ops",
            "512",
            "--rounds",
            "1",
            "--workload",
            "seq",
        ];
        a.extend_from_slice(extra);
        run(&dir, &a, Limits::default())
    };
    let r = ab("ab", &[]);
    assert_refused(
        &r,
        "a store file cp made",
        &["\"array.scf\"", "did not make"],
    );
    let r = run(
        &dir,
        &["cp", "--devices", "ab/arraydev0", "store:array", "back"],
        Limits::default(),
    );
    assert_ok(&r, "a copy out");
    assert_eq!(
        std::fs::read(dir.join("back")).unwrap(),
        b"the user's array"
    );
    // A run refused leaves no --dir it made.
    let r = ab("fresh", &["--cache-size", "1000"]);
    assert_refused(&r, "a cache below one set", &["1000"]);
    assert!(
        !dir.join("fresh").exists(),
        "the refused run left its --dir"
    );
    let graph = |extra: &[&str]| {
        let mut a = vec![
            "graph",
            "--dir",
            "g",
            "--scale",
            "8",
            "--no-progress",
            "--roots",
            "1",
        ];
        a.extend_from_slice(extra);
        run(&dir, &a, Limits::default())
    };
    let r = graph(&[
        "--backing",
        "memory",
        "--json",
        "g/rmat-s8-e16-seed1.targets.scf",
    ]);
    assert_refused(&r, "results over a backing file", &["targets.scf", "store"]);
    let r = graph(&["--backing", "setcache", "--budget", "100T"]);
    assert_refused(&r, "a budget beyond the machine", &["--budget", "setcache"]);
    let r = graph(&["--backing", "memory", "--depth", "5"]);
    assert_refused(&r, "a depth no run uses", &["--depth 5", "setcache"]);
    assert!(
        !dir.join("g").exists(),
        "a refused graph run generated its graph"
    );
    let sync = |cache: &str, size: &str| {
        let args = [
            "syncbench",
            "--dir",
            ".",
            "--cache-size",
            cache,
            "--dirty",
            "0",
            "--file-size",
            size,
            "--rounds",
            "1",
        ];
        run(&dir, &args, Limits::default())
    };
    let r = sync("1M,0", "1M");
    assert_refused(&r, "a cache size of none after one", &["--cache-size 0"]);
    assert!(
        r.stdout.is_empty(),
        "rows before the refusal:\n{}",
        r.stdout
    );
    let r = sync("1M", "0");
    assert_refused(&r, "a file of no pages", &["--file-size 0"]);
    let r = sim(&["--trace", "uniform:pages=100,ops=1000", "--json", ""]);
    assert_refused(&r, "an empty --json", &["empty path"]);
    assert!(
        r.stdout.is_empty(),
        "simulated before the refusal:\n{}",
        r.stdout
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `bench --dir` is refused as read-only only where this process may not
/// write: a directory of mode 555 is writable by root (once refused by its
/// mode bits alone), and a run shorter than 0.1 s is refused by name (once
/// run, reporting 0 requests a second).
#[test]
fn bench_asks_whether_it_may_write_in_its_directory_and_refuses_a_blink_of_a_run() {
    let d = std::env::temp_dir().join(format!("setcache-cli-ro-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    let bench = |dir: &Path, runtime: &str| {
        Command::new(env!("CARGO_BIN_EXE_setcache"))
            .args(["bench", "--dir"])
            .arg(dir)
            .args([
                "--file-size",
                "4M",
                "--engine",
                "direct",
                "--rw",
                "randread",
            ])
            .args(["--runtime", runtime, "--ramp", "0", "--no-progress"])
            .output()
            .unwrap()
    };
    let o = bench(&d, "0.0001");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("0.1 s at least"),
        "{err}"
    );
    // SAFETY: plain system call.
    if unsafe { libc::geteuid() } == 0 {
        use std::os::unix::fs::PermissionsExt;
        let ro = d.join("ro");
        std::fs::create_dir_all(&ro).unwrap();
        std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o555)).unwrap();
        let o = bench(&ro, "0.2");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let _ = std::fs::remove_dir_all(&d);
}
