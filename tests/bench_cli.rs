//! `setcache bench` end to end on a small generated file: the in-process
//! engines (direct, direct-copy, setcache) with `--repeat`, reads and writes.

use std::process::Command;

fn bench(dir: &std::path::Path, extra: &[&str]) -> (bool, String, String) {
    let base = ["--cache-size", "4M"];
    bench_on(dir, &[&base, extra].concat())
}

/// `setcache bench` on a 16M file for 0.3 s with `args`: whether it
/// succeeded, its stdout and its stderr.
fn bench_on(dir: &std::path::Path, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_setcache"))
        .arg("bench")
        .arg("--dir")
        .arg(dir)
        .args(["--file-size", "16M", "--runtime", "0.3", "--no-progress"])
        .args(args)
        .output()
        .expect("run the bench binary");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The table's row for `engine`, split into cells.
fn row<'a>(table: &'a str, engine: &str) -> Vec<&'a str> {
    table
        .lines()
        .find(|l| l.split_whitespace().next() == Some(engine))
        .unwrap_or_else(|| panic!("no row for {engine} in\n{table}"))
        .split_whitespace()
        .collect()
}

#[test]
fn repeated_rounds_report_medians_and_ratios_for_every_in_process_engine() {
    let dir = std::env::temp_dir().join(format!("setcache-bench-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (rw, policy) in [("randread", "gclock"), ("randrw", "s3fifo")] {
        let (ok, out, err) = bench(
            &dir,
            &[
                "--engine",
                "direct,direct-copy,setcache",
                "--rw",
                rw,
                "--repeat",
                "3",
                "--policy",
                policy,
            ],
        );
        assert!(ok, "bench failed: {err}\n{out}");
        // Every engine ran three times, taking turns.
        for e in ["direct ", "direct-copy ", "setcache "] {
            assert_eq!(
                err.lines()
                    .filter(|l| l.starts_with(e) && l.contains("round"))
                    .count(),
                3,
                "{e}: {err}"
            );
        }
        let header = row(&out, "engine");
        assert_eq!(header.last(), Some(&"(IOPS)"), "{out}");
        for e in ["direct", "direct-copy", "setcache"] {
            let r = row(&out, e);
            let iops: f64 = r[7].parse().unwrap();
            assert!(iops > 0.0, "{e} made no progress: {out}");
            // Three rounds listed, the median among them.
            let rounds: Vec<f64> = r[r.len() - 3..]
                .iter()
                .map(|v| v.parse().unwrap())
                .collect();
            let mut sorted = rounds.clone();
            sorted.sort_by(f64::total_cmp);
            assert!((sorted[1] - iops).abs() <= 1.0, "{e}: {rounds:?} vs {iops}");
            let ratio = r[r.len() - 4];
            if e == "direct" {
                assert_eq!(ratio, "-");
            } else {
                let x: f64 = ratio.parse().unwrap();
                assert!(x > 0.0, "{e}: ratio {x}");
            }
        }
    }
    // A bad count is refused with the flag named, and nothing runs.
    let (ok, out, err) = bench(&dir, &["--engine", "direct", "--repeat", "0"]);
    assert!(!ok && out.is_empty(), "{out}");
    assert!(err.contains("--repeat"), "{err}");
    let (ok, out, err) = bench(&dir, &["--engine", "setcache", "--policy", "mru"]);
    assert!(!ok && out.is_empty(), "{out}");
    assert!(err.contains("--policy") && err.contains("s3fifo"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Several `--api`s run the setcache engine once with each in every round,
/// in turns with the other engines, each in a row of its own with its ratio
/// to the first engine; an API listed twice runs once.
#[test]
fn several_apis_take_turns_as_engines_do() {
    let dir = std::env::temp_dir().join(format!("setcache-bench-apis-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (ok, out, err) = bench(
        &dir,
        &[
            "--engine",
            "direct,setcache",
            "--api",
            "queue,async,sync,async",
            "--rw",
            "randread",
            "--repeat",
            "2",
        ],
    );
    assert!(ok, "bench failed: {err}\n{out}");
    for e in [
        "direct",
        "setcache/queue",
        "setcache/async",
        "setcache/sync",
    ] {
        assert_eq!(
            err.lines()
                .filter(|l| l.split_whitespace().next() == Some(e) && l.contains("round"))
                .count(),
            2,
            "{e}: {err}"
        );
        let r = row(&out, e);
        let iops: f64 = r[7].parse().unwrap();
        assert!(iops > 0.0, "{e} made no progress: {out}");
        let ratio = r[r.len() - 3];
        if e != "direct" {
            let x: f64 = ratio.parse().unwrap();
            assert!(x > 0.0, "{e}: ratio {x}");
        }
    }
    // The queue and the futures keep --iodepth (32) requests in flight; one
    // synchronous call at a time is depth 1.
    assert_eq!(row(&out, "setcache/queue")[4], "32", "{out}");
    assert_eq!(row(&out, "setcache/async")[4], "32", "{out}");
    assert_eq!(row(&out, "setcache/sync")[4], "1", "{out}");
    // One API alone keeps the engine's plain name.
    let (ok, out, err) = bench(&dir, &["--engine", "setcache", "--api", "async"]);
    assert!(ok, "bench failed: {err}\n{out}");
    row(&out, "setcache");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A cache larger than the machine can give is refused before anything runs
/// (no data file made, no engine run), with both sizes in the message; the
/// Linux engines, whose `--cache-size` is only a cgroup limit, are not held
/// to it.
/// A job's hit ratio is its reads' (a write of whole pages needs no device
/// read, which made a job of writes show nearly every request a hit): a job
/// of writes alone shows none, and a mixed job over a file four times its
/// cache hits about as its reads do.
#[test]
fn a_jobs_hit_ratio_counts_its_reads_alone() {
    let dir = std::env::temp_dir().join(format!("setcache-bench-jobhit-{}", std::process::id()));
    let (ok, out, err) = bench(
        &dir,
        &[
            "--engine",
            "setcache",
            "--job",
            "name=w,rw=randwrite",
            "--job",
            "name=m,rw=randrw",
        ],
    );
    assert!(ok, "{err}\n{out}");
    let hit = |job: &str| {
        let line = out
            .lines()
            .find(|l| l.split_whitespace().next() == Some(job))
            .unwrap_or_else(|| panic!("no job {job} in\n{out}"));
        let at = line.find(" hit ").expect(line) + " hit ".len();
        line[at..].split_whitespace().next().unwrap().to_string()
    };
    assert_eq!(hit("w"), "-", "{out}");
    let m: f64 = hit("m").trim_end_matches('%').parse().unwrap();
    assert!(
        m < 50.0,
        "a 4 MiB cache over 16 MiB hit {m}% of the reads\n{out}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A hot region larger than the cache cannot give the hit ratio asked for:
/// the run goes on (an overflowing hot set is a workload too), and says so.
#[test]
fn a_hot_region_larger_than_the_cache_is_noted() {
    let dir = std::env::temp_dir().join(format!("setcache-bench-hot-{}", std::process::id()));
    let note = "is larger than --cache-size";
    for (hot, noted) in [("8M", true), ("2M", false)] {
        let (ok, out, err) = bench(
            &dir,
            &[
                "--engine",
                "setcache",
                "--rw",
                "randread",
                "--hit-ratio",
                "100",
                "--hot-size",
                hot,
            ],
        );
        assert!(ok, "{err}\n{out}");
        assert_eq!(err.contains(note), noted, "--hot-size {hot}: {err}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_cache_larger_than_memory_is_refused_before_anything_runs() {
    let dir = std::env::temp_dir().join(format!("setcache-bench-mem-{}", std::process::id()));
    let run_sized = |file_size: &str, args: &[&str]| {
        let t0 = std::time::Instant::now();
        let out = Command::new(env!("CARGO_BIN_EXE_setcache"))
            .arg("bench")
            .arg("--dir")
            .arg(&dir)
            .args([
                "--file-size",
                file_size,
                "--runtime",
                "0.3",
                "--no-progress",
            ])
            .args(args)
            .output()
            .expect("run the bench binary");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
            t0.elapsed(),
        )
    };
    let run = |args: &[&str]| run_sized("16M", args);
    for engines in ["direct,setcache", "direct-copy"] {
        let (ok, out, err, took) = run(&["--engine", engines, "--cache-size", "1024T"]);
        assert!(!ok, "{engines}: {out}\n{err}");
        assert!(out.is_empty(), "{engines}: nothing ran: {out}");
        assert!(
            err.contains("error: cache of 1024T (--cache-size;")
                && err.contains("is more than the ")
                && err.contains(" this machine can give (MemAvailable"),
            "{engines}: {err}"
        );
        assert!(!err.contains("round"), "{engines}: no engine ran: {err}");
        assert!(!dir.exists(), "{engines}: no data file was made");
        assert!(took < std::time::Duration::from_secs(5), "{took:?}");
    }
    // The default cache, a quarter of the file, is checked the same way.
    let (ok, _, err, _) = run_sized("2048T", &["--engine", "setcache"]);
    assert!(!ok);
    assert!(
        err.contains("a quarter of --file-size") && err.contains("this machine can give"),
        "{err}"
    );
    // `--job`s' buffers are each job's own (they were counted through
    // `--threads`, `--iodepth` and `--bs` alone: 16 KiB here).
    let (ok, out, err, _) = run(&[
        "--engine",
        "setcache",
        "--cache-size",
        "4M",
        "--job",
        "rw=randread,threads=1024,iodepth=4096,bs=4k",
        "--job",
        "rw=read,threads=1024,iodepth=4096,bs=1M",
    ]);
    assert!(!ok && out.is_empty(), "{out}");
    assert!(
        err.contains("request buffers of 4112G (each --job's threads x iodepth x bs, summed)")
            && err.contains("this machine can give"),
        "{err}"
    );
    // A cache the machine can give passes the check.
    let (ok, out, err, _) = run(&["--engine", "setcache,linux-buffered", "--cache-size", "4M"]);
    assert!(ok, "{err}\n{out}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A field of the first run of `engine` in a bench or sim JSON report.
fn json_field(path: &std::path::Path, engine: &str, field: &str) -> f64 {
    let text = std::fs::read_to_string(path).unwrap();
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    let runs = doc
        .get("runs")
        .or_else(|| doc.get("results"))
        .and_then(|r| r.as_array())
        .unwrap_or_else(|| panic!("no runs in {text}"));
    runs.iter()
        .find(|r| {
            r.get("engine")
                .or_else(|| r.get("policy"))
                .and_then(|e| e.as_str())
                == Some(engine)
        })
        .and_then(|r| r.get(field))
        .and_then(|v| v.as_f64())
        .unwrap_or_else(|| panic!("no {field} for {engine} in {text}"))
}

#[test]
fn a_trace_replayed_once_on_one_thread_hits_as_the_simulator_says() {
    let dir = std::env::temp_dir().join(format!("setcache-bench-trace-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // 30,000 accesses over 3,000 pages: a skewed random part and a loop; in
    // a second trace, the same with one access in 16 a write.
    let trace = dir.join("t.trace");
    let mixed = dir.join("mixed.trace");
    let (mut text, mut text_mixed) = (String::new(), String::new());
    let mut x = 12345u64;
    for i in 0..30_000u64 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let page = if i % 3 == 0 {
            i / 3 % 1500
        } else {
            (x % 3000) * (x % 7 + 1) / 7
        };
        let rw = if x.is_multiple_of(16) { " W" } else { "" };
        text.push_str(&format!("{page}\n"));
        text_mixed.push_str(&format!("{page}{rw}\n"));
    }
    std::fs::write(&trace, text).unwrap();
    std::fs::write(&mixed, text_mixed).unwrap();
    let spec = format!("text:{}", trace.display());
    let sim_json = dir.join("sim.json");
    let sim = Command::new(env!("CARGO_BIN_EXE_setcache"))
        .args(["sim", "--trace", &spec, "--policy", "sa-default"])
        .args([
            "--cache-size",
            "2M",
            "--set-size",
            "12",
            "--warmup",
            "0",
            "--json",
        ])
        .arg(&sim_json)
        .output()
        .unwrap();
    assert!(
        sim.status.success(),
        "{}",
        String::from_utf8_lossy(&sim.stderr)
    );
    let replay = |spec: &str, json: &std::path::Path| {
        let out = Command::new(env!("CARGO_BIN_EXE_setcache"))
            .args(["bench", "--dir"])
            .arg(dir.join("b"))
            .args(["--trace", spec, "--trace-passes", "1", "--cache-size", "2M"])
            .args(["--engine", "setcache,linux-buffered", "--threads", "1"])
            .args(["--iodepth", "1", "--readahead", "off", "--runtime", "60"])
            .args(["--no-progress", "--json"])
            .arg(json)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "bench failed: {stderr}\n{stdout}");
        // Every access replayed once, by each engine, and then the run ended.
        for engine in ["setcache", "linux-buffered"] {
            let ops = json_field(json, engine, "ops");
            assert_eq!(ops, 30_000.0, "{engine}\n{stdout}");
        }
        format!("{stdout}{stderr}")
    };
    let bench_json = dir.join("bench.json");
    let stdout = replay(&spec, &bench_json);
    // The real cache, one thread, no readahead: the simulator's hits exactly.
    let sim_hits = json_field(&sim_json, "sa-adaptive", "hit_ratio");
    let real_hits = json_field(&bench_json, "setcache", "hit_ratio");
    assert!(
        (sim_hits - real_hits).abs() < 1e-9,
        "simulator {sim_hits} against the cache {real_hits}\n{stdout}"
    );
    // Writes replay too (the run's closing sync counts in its time), and
    // every block the trace writes then holds what the replay wrote there.
    let out = replay(
        &format!("text:{}", mixed.display()),
        &dir.join("mixed.json"),
    );
    for engine in ["setcache", "linux-buffered"] {
        let line = format!("{engine}: ");
        let said = out
            .lines()
            .find(|l| l.starts_with(&line) && l.contains("read back"));
        let said = said.unwrap_or_else(|| panic!("no check by {engine}\n{out}"));
        let n: Vec<&str> = said.split_whitespace().collect();
        // "<engine>: N of the N blocks the trace writes read back as written"
        assert!(
            n[1] == n[4] && n[1].parse::<u32>().unwrap() > 1000,
            "{said}"
        );
    }
    // Flags that describe generated requests are refused beside --trace.
    for extra in [
        &["--rw", "read"][..],
        &["--file-size", "64M"],
        &["--hit-ratio", "50"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_setcache"))
            .args(["bench", "--dir"])
            .arg(dir.join("b"))
            .args(["--trace", &spec, "--cache-size", "2M", "--runtime", "0.2"])
            .args(extra)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(extra[0]),
            "{extra:?}: {err}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_block_trace_replays_at_its_own_timing_scaled() {
    let dir = std::env::temp_dir().join(format!("setcache-bench-speed-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // An MSR trace of 101 requests of 8 KiB over 3 s (FILETIME: 100 ns ticks).
    let trace = dir.join("msr.csv");
    let mut text = String::new();
    for r in 0..=100u64 {
        let ticks = 128_000_000_000_000_000 + r * 300_000;
        let rw = if r % 4 == 0 { "Write" } else { "Read" };
        text.push_str(&format!(
            "{ticks},hm,0,{rw},{},8192,100\n",
            (r * 7919 % 400) * 8192
        ));
    }
    std::fs::write(&trace, text).unwrap();
    let spec = format!("msr:{}", trace.display());
    let run = |speed: &str| {
        let json = dir.join(format!("speed-{speed}.json"));
        let t0 = std::time::Instant::now();
        let out = Command::new(env!("CARGO_BIN_EXE_setcache"))
            .args(["bench", "--dir"])
            .arg(dir.join("b"))
            .args([
                "--trace",
                &spec,
                "--trace-passes",
                "1",
                "--replay-speed",
                speed,
            ])
            .args([
                "--cache-size",
                "1M",
                "--engine",
                "setcache",
                "--threads",
                "2",
            ])
            .args(["--runtime", "60", "--no-progress", "--json"])
            .arg(&json)
            .output()
            .unwrap();
        let elapsed = t0.elapsed().as_secs_f64();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let ops = json_field(&json, "setcache", "ops");
        let secs = ops / json_field(&json, "setcache", "iops");
        (ops, secs, elapsed)
    };
    // 202 accesses (two pages a request), at the trace's pace: about 3 s.
    let (ops, secs, _) = run("1");
    assert_eq!(ops, 202.0);
    assert!((2.9..15.0).contains(&secs), "replayed at 1x in {secs} s");
    // Ten times faster: about 0.3 s (a loaded machine's stalls have room).
    let (ops, fast, _) = run("10");
    assert_eq!(ops, 202.0);
    assert!(
        fast < secs / 3.0,
        "10x took {fast} s against {secs} s at 1x"
    );
    // Cut short by the run's end at a tenth of the trace's pace: the writes
    // it never made are not taken for lost ones; the run says it did not
    // check them (a fresh file: the runs above wrote every block).
    let out = Command::new(env!("CARGO_BIN_EXE_setcache"))
        .args(["bench", "--dir"])
        .arg(dir.join("cut"))
        .args(["--trace", &spec, "--replay-speed", "0.1"])
        .args([
            "--cache-size",
            "1M",
            "--engine",
            "setcache",
            "--threads",
            "2",
        ])
        .args(["--ramp", "0", "--runtime", "0.5", "--no-progress"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "a replay cut short: {err}");
    assert!(err.contains("its writes are not checked"), "{err}");
    // A trace without timestamps cannot be paced.
    let text = dir.join("t.trace");
    std::fs::write(&text, "1\n2\n3\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_setcache"))
        .args(["bench", "--dir"])
        .arg(dir.join("b"))
        .arg("--trace")
        .arg(format!("text:{}", text.display()))
        .args([
            "--replay-speed",
            "1",
            "--cache-size",
            "1M",
            "--runtime",
            "0.2",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("no timestamps"),
        "{err}"
    );
    // A timestamp as large as a number of microseconds can be: the second
    // pass's times are past any run's end (no overflow: the run ends).
    let huge = dir.join("huge.csv");
    std::fs::write(
        &huge,
        "Timestamp,Response,IOType,LUN,Offset,Size\n0,0,R,0,0,4096\n20000000000000,0,R,0,4096,4096\n",
    )
    .unwrap();
    // The run lasts its runtime all the same, though its last access came
    // at once: one access in 0.3 s, not in the moment it took.
    let json = dir.join("huge.json");
    let out = Command::new(env!("CARGO_BIN_EXE_setcache"))
        .args(["bench", "--dir"])
        .arg(dir.join("h"))
        .arg("--trace")
        .arg(format!("systor:{}", huge.display()))
        .args([
            "--replay-speed",
            "1",
            "--cache-size",
            "1M",
            "--engine",
            "setcache,setcache-numa",
        ])
        .args(["--ramp", "0", "--runtime", "0.3", "--no-progress", "--json"])
        .arg(&json)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "a replay of a huge timestamp: {err}");
    for engine in ["setcache", "setcache-numa"] {
        let ops = json_field(&json, engine, "ops");
        let secs = ops / json_field(&json, engine, "iops");
        assert_eq!(ops, 1.0, "{engine}");
        assert!(secs >= 0.25, "{engine}: one access timed over {secs} s");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A timed replay's requests are timed from when they go out: an engine
/// that gathers a batch, or keeps requests in flight, submits what is due
/// and waits for the next access's time without holding back, or counting
/// that wait in, the requests it already has.
#[test]
fn a_timed_replay_counts_no_wait_for_later_accesses_in_latency() {
    let dir = std::env::temp_dir().join(format!("setcache-bench-paced-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // Nine reads of 4 KiB, 200 ms apart (FILETIME: 100 ns ticks).
    let trace = dir.join("msr.csv");
    let mut text = String::new();
    for r in 0..9u64 {
        let ticks = 128_000_000_000_000_000 + r * 2_000_000;
        text.push_str(&format!("{ticks},hm,0,Read,{},4096,100\n", r * 3 * 4096));
    }
    std::fs::write(&trace, text).unwrap();
    let spec = format!("msr:{}", trace.display());
    let cases: [&[&str]; 4] = [
        &["--engine", "setcache"],
        &["--engine", "setcache", "--api", "async"],
        &["--engine", "setcache-numa"],
        &["--engine", "direct"],
    ];
    for case in cases {
        let json = dir.join("paced.json");
        let out = Command::new(env!("CARGO_BIN_EXE_setcache"))
            .args(["bench", "--dir"])
            .arg(dir.join("b"))
            .args([
                "--trace",
                &spec,
                "--trace-passes",
                "1",
                "--replay-speed",
                "1",
            ])
            .args(["--cache-size", "1M", "--threads", "1", "--iodepth", "8"])
            .args(case)
            .args(["--runtime", "60", "--no-progress", "--json"])
            .arg(&json)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{case:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = std::fs::read_to_string(&json).unwrap();
        let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
        let run = &doc["runs"][0];
        assert_eq!(run["ops"].as_f64(), Some(9.0), "{case:?}: {text}");
        // Each read alone on an idle device takes well under a millisecond
        // (a busy one, with other tests' benches, has taken 25 ms, and a
        // virtual disk reading a block for the first time 124 ms); reads held
        // back for later accesses would wait 200 ms or more each, most of
        // them: the median says which.
        let p50 = run["lat_us"]["p50"].as_f64().unwrap();
        assert!(
            p50 < 100_000.0,
            "{case:?}: half the reads took {p50} us or more: {text}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Without a budget every backing is measured with the whole graph cached:
/// the mapped runs' warming read touches every list's entries, so their
/// timed parts read nothing from the device (it read only the lists'
/// lengths, from the offsets, and the first timed part then read the
/// graph's lists from disk while setcache's had them cached).
#[test]
fn graph_runs_without_a_budget_read_nothing_while_timed() {
    let dir = std::env::temp_dir().join(format!("setcache-graph-warm-{}", std::process::id()));
    let json = dir.with_extension("json");
    let out = Command::new(env!("CARGO_BIN_EXE_setcache"))
        .arg("graph")
        .arg("--dir")
        .arg(&dir)
        .args(["--scale", "14", "--roots", "1", "--iterations", "1"])
        .args(["--backing", "mmap,mmap-random", "--json"])
        .arg(&json)
        .output()
        .expect("run the graph command");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let runs = doc["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 4, "{doc}");
    for r in runs {
        assert_eq!(r["device_bytes"].as_u64(), Some(0), "{r}");
    }
    // A budget is held to what the mapped runs need: setcache's read
    // buffers and translation tables were counted without a setcache run.
    let out = Command::new(env!("CARGO_BIN_EXE_setcache"))
        .arg("graph")
        .arg("--dir")
        .arg(&dir)
        .args(["--scale", "10", "--roots", "1", "--iterations", "1"])
        .args(["--backing", "mmap", "--budget", "8M"])
        .output()
        .expect("run the graph command");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::remove_file(&json).unwrap();
}

/// Caches the cache engines cannot serve are refused before any engine runs,
/// naming the figures: more than four times as many pages in flight as the
/// cache holds (such a run went on for many times its length and failed
/// "busy"), and a cache too small for a set per partition (refused only once
/// the engines listed before setcache-numa had run); a partitioned cache
/// whose sets were rounded down to a multiple of its partitions says so.
#[test]
fn caches_the_engines_cannot_serve_are_refused_before_anything_runs() {
    let dir = std::env::temp_dir().join(format!("setcache-bench-flight-{}", std::process::id()));
    let run = |args: &[&str]| bench_on(&dir, args);
    // 4M: 1024 pages; 2 threads x 4096 requests of one page.
    let deep = [
        "--engine",
        "setcache",
        "--cache-size",
        "4M",
        "--threads",
        "2",
        "--iodepth",
        "4096",
    ];
    let (ok, out, err) = run(&deep);
    assert!(!ok, "{out}");
    assert!(
        err.contains("setcache engine: 2 threads x --iodepth 4096 x 1 page(s) a request keep 8192 pages in flight, more than four times the 1024 pages"),
        "{err}"
    );
    assert!(!out.contains("IOPS"), "ran before the refusal: {out}");
    let (ok, out, err) = run(&[
        "--engine",
        "setcache,setcache-numa",
        "--partitions",
        "2",
        "--cache-size",
        "64k",
        "--threads",
        "1",
        "--iodepth",
        "4",
    ]);
    assert!(!ok, "{out}");
    assert!(
        err.contains("setcache-numa engine: invalid argument: cache size 65536 bytes is smaller than one set per partition"),
        "{err}"
    );
    assert!(
        !out.contains("IOPS"),
        "setcache ran before the refusal: {out}"
    );
    // 9000k: 187 sets of 12 pages, 128 once a multiple of 64 partitions.
    let (ok, out, err) = run(&[
        "--engine",
        "setcache-numa",
        "--partitions",
        "64",
        "--cache-size",
        "9000k",
        "--threads",
        "1",
        "--iodepth",
        "4",
    ]);
    assert!(ok, "{err}\n{out}");
    assert!(
        err.contains(
            "note: setcache-numa's cache holds 6M (128 sets of 12 pages), not the 9000k asked"
        ),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
