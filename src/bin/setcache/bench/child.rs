//! The child process that runs the Linux engines.
//!
//! The bench re-executes `/proc/self/exe` with the hidden subcommand
//! [`CHILD_SUBCOMMAND`] and moves the child into the run's memory cgroup. Then:
//!
//! 1. the bench writes the job, one line of JSON, to the child's stdin;
//! 2. the child opens the files and allocates everything its threads need, touches
//!    no data, and answers `ready`;
//! 3. the bench reads the cgroup's usage (the child's own memory), sets the limit to
//!    that plus `--cache-size` plus a little slack, and writes `go`;
//! 4. the child runs and answers one line of JSON, `{"ok": <outcome>}` or
//!    `{"error": "<message>"}` (also in place of `ready` if preparing fails).

use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use serde_json::{Value, json};
use setcache::LayoutKind;
use setcache::layout::Layout;

use super::cgroup::{self, MemCgroup};
use super::driver::{Timing, install_sigint};
use super::engine::Engine;
use super::linux::{LinuxJob, prepare};
use super::report::Outcome;
use super::workload::{Dist, HotSpot, Pattern, Replay, Workload};

/// Drop the page cache of the trace file a spec names, if it names one: the
/// child read it inside its memory cgroup, and its pages would count against
/// the data's share of the limit (set from the child's usage once ready).
fn forget_trace_file(spec: &str) {
    let Some((_, path)) = spec.split_once(':') else {
        return;
    };
    let path = path.split(',').next().unwrap_or(path);
    if let Ok(f) = std::fs::File::open(path) {
        use std::os::fd::AsRawFd;
        // SAFETY: plain system call on an open descriptor; advice only.
        unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    }
}

/// The hidden subcommand of the child.
pub(crate) const CHILD_SUBCOMMAND: &str = "__bench-child";

pub(crate) fn job_to_json(job: &LinuxJob) -> Result<Value, String> {
    let w = &job.workload;
    let paths = job
        .paths
        .iter()
        .map(|p| {
            p.to_str()
                .map(str::to_string)
                .ok_or_else(|| format!("path {} is not valid UTF-8", p.display()))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(json!({
        "engine": job.engine.name(), "rw": w.rw.to_string(), "rwmix_read": w.rwmix_read,
        "bs": w.bs, "file_len": w.file_len, "dist": w.dist.to_string(),
        "hot": w.hot.map(|h| json!({"ratio": h.ratio, "hot_blocks": h.hot_blocks})),
        "seed": w.seed, "threads": job.threads,
        "runtime": job.timing.runtime, "ramp": job.timing.ramp, "progress": job.timing.progress,
        "layout": job.layout.kind().to_string(), "devices": job.layout.devices(),
        "block_bytes": job.layout.block_bytes(), "paths": paths, "touch": job.touch,
        "trace": w.replay.as_ref().map(|r| json!({"spec": r.spec, "passes": r.passes, "speed": r.speed})),
    }))
}

/// Field `k` of a job, read by `get` (`Value::as_u64`, ...), or an error
/// naming it.
pub(crate) fn field<'v, T>(
    v: &'v Value,
    k: &str,
    get: impl FnOnce(&'v Value) -> Option<T>,
) -> Result<T, String> {
    v.get(k).and_then(get).ok_or(format!("job: missing {k}"))
}

pub(crate) fn job_from_json(v: &Value) -> Result<LinuxJob, String> {
    let s = |k: &str| {
        v.get(k)
            .and_then(Value::as_str)
            .ok_or(format!("job: missing {k}"))
    };
    let u = |k: &str| {
        v.get(k)
            .and_then(Value::as_u64)
            .ok_or(format!("job: missing {k}"))
    };
    let f = |k: &str| {
        v.get(k)
            .and_then(Value::as_f64)
            .ok_or(format!("job: missing {k}"))
    };
    let engine = Engine::from_name(s("engine")?).ok_or("job: bad engine")?;
    let hot = match v.get("hot") {
        Some(Value::Object(h)) => Some(HotSpot {
            ratio: h
                .get("ratio")
                .and_then(Value::as_f64)
                .ok_or("job: bad hot")?,
            hot_blocks: h
                .get("hot_blocks")
                .and_then(Value::as_u64)
                .ok_or("job: bad hot")?,
        }),
        _ => None,
    };
    let replay = match v.get("trace") {
        Some(Value::Object(t)) => {
            let spec = t
                .get("spec")
                .and_then(Value::as_str)
                .ok_or("job: bad trace")?;
            let passes = t
                .get("passes")
                .and_then(Value::as_u64)
                .ok_or("job: bad trace")?;
            let speed = t.get("speed").and_then(Value::as_f64);
            let trace = setcache::hitsim::load(spec, u("bs")?)?;
            forget_trace_file(spec);
            let passes = u32::try_from(passes).map_err(|_| "job: bad trace passes")?;
            let until = f("ramp")? + f("runtime")?;
            Some(std::sync::Arc::new(
                Replay::new(spec.to_string(), trace, passes, speed).until(until),
            ))
        }
        _ => None,
    };
    let workload = Workload {
        rw: Pattern::parse(s("rw")?)?,
        rwmix_read: u("rwmix_read")?.min(100) as u8,
        bs: u("bs")?,
        file_len: u("file_len")?,
        dist: Dist::parse(s("dist")?)?,
        hot,
        seed: u("seed")?,
        replay,
    };
    let kind: LayoutKind = s("layout")?.parse().map_err(|e| format!("job: {e}"))?;
    let layout = Layout::new(kind, u("devices")? as usize, u("block_bytes")?)
        .map_err(|e| format!("job: {e}"))?;
    let paths = v
        .get("paths")
        .and_then(Value::as_array)
        .ok_or("job: missing paths")?
        .iter()
        .map(|p| {
            p.as_str()
                .map(PathBuf::from)
                .ok_or("job: bad path".to_string())
        })
        .collect::<Result<Vec<_>, _>>()?;
    let bs = workload.bs;
    Ok(LinuxJob {
        engine,
        workload,
        threads: u("threads")?.max(1) as usize,
        timing: Timing {
            runtime: f("runtime")?,
            ramp: f("ramp")?,
            progress: v
                .get("progress")
                .and_then(Value::as_str)
                .map(str::to_string),
            bs,
        },
        layout,
        paths,
        touch: v.get("touch").and_then(Value::as_u64),
    })
}

/// Entry point of the child: read the job, prepare, wait for `go`, run, answer.
/// Returns the exit code.
pub(crate) fn child_main() -> i32 {
    install_sigint();
    // The prepared run borrows its job.
    let job = std::cell::OnceCell::new();
    serve(
        |v| {
            let parsed = job_from_json(v)?;
            prepare(job.get_or_init(|| parsed))
        },
        |prepared| {
            prepared.run().map(|out| {
                let mut v = out.to_json();
                // Whether the replay's writes can be checked: the parent's
                // own count of the threads' passes saw none of this run.
                if let Some(r) = job
                    .get()
                    .and_then(|j: &LinuxJob| j.workload.replay.as_ref())
                {
                    v["replay_whole"] = json!(r.made_a_pass());
                }
                v
            })
        },
    )
}

/// The child's side of the protocol: the job (the first line of stdin) to
/// `prepare`, `ready`, then on `go` the prepared job to `run`, and one line
/// of JSON, `{"ok": <run's value>}` or `{"error": "<message>"}` (also in
/// place of `ready` if preparing fails). Returns the exit code.
pub(crate) fn serve<P>(
    prepare: impl FnOnce(&Value) -> Result<P, String>,
    run: impl FnOnce(P) -> Result<Value, String>,
) -> i32 {
    let answer = (|| {
        let stdin = std::io::stdin();
        let mut lines = stdin.lock().lines();
        let text = match lines.next() {
            Some(Ok(t)) => t,
            _ => return Err("no job on stdin".to_string()),
        };
        let v: Value = serde_json::from_str(&text).map_err(|e| format!("bad job: {e}"))?;
        let prepared = prepare(&v)?;
        out!("ready");
        match lines.next() {
            Some(Ok(l)) if l.trim() == "go" => run(prepared),
            _ => Err("the parent went away before the run started".to_string()),
        }
    })();
    let (doc, code) = match answer {
        Ok(v) => (json!({"ok": v}), 0),
        Err(e) => (json!({"error": e}), 1),
    };
    out!("{doc}");
    code
}

/// The memory cap of a run: its cgroup and the cache size it grants.
pub(crate) struct Cap<'a> {
    pub(crate) cgroup: &'a MemCgroup,
    pub(crate) cache_bytes: u64,
}

/// Run `job` in a child process, inside `cap`'s cgroup if given: what it
/// measured, and for a replay whether every thread replayed its whole share
/// of the trace once (see `Replay::made_a_pass`).
pub(crate) fn run_in_child(
    job: &LinuxJob,
    cap: Option<Cap>,
) -> Result<(Outcome, Option<bool>), String> {
    let text = serde_json::to_string(&job_to_json(job)?).map_err(|e| e.to_string())?;
    let cap = cap.map(|c| (c.cgroup, c.cache_bytes + cgroup::slack(job.threads)));
    let ok = converse(CHILD_SUBCOMMAND, &text, cap, &job.engine.to_string())?;
    let out =
        Outcome::from_json(&ok).ok_or_else(|| "child process: malformed result".to_string())?;
    Ok((out, ok.get("replay_whole").and_then(Value::as_bool)))
}

/// The parent's side: start this executable with `subcommand`, move it into
/// `cap`'s cgroup if given, write `job`, and once the child is `ready`
/// limit the cgroup to the child's memory then plus `cap`'s bytes and say
/// `go`. Returns the value of the child's `ok` answer, or its error; `what`
/// names the child in messages.
pub(crate) fn converse(
    subcommand: &str,
    job: &str,
    cap: Option<(&MemCgroup, u64)>,
    what: &str,
) -> Result<Value, String> {
    let mut child = Command::new("/proc/self/exe")
        .arg(subcommand)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("cannot start the {what} child process: {e}"))?;
    let talk = |child: &mut Child| -> Result<String, String> {
        let mut stdin = child.stdin.take().ok_or("child stdin")?;
        let mut stdout = BufReader::new(child.stdout.take().ok_or("child stdout")?);
        if let Some((cg, _)) = &cap {
            cg.add_pid(child.id())?;
        }
        // A write error means the child died early; its status says more.
        let _ = writeln!(stdin, "{job}");
        let mut first = String::new();
        let _ = stdout.read_line(&mut first);
        if first.trim() != "ready" {
            return Ok(first);
        }
        if let Some((cg, bytes)) = &cap {
            let own = cg.usage()?;
            cg.set_limit(own + bytes)?;
        }
        let _ = writeln!(stdin, "go");
        drop(stdin);
        let mut rest = String::new();
        let _ = stdout.read_to_string(&mut rest);
        Ok(rest)
    };
    // Ctrl-C sent to this process alone (not its group) reaches the child
    // too, so that its run stops and this one can clean up after it.
    let pid = child.id() as libc::pid_t;
    let done = std::sync::atomic::AtomicBool::new(false);
    let talked = std::thread::scope(|s| {
        let watch = std::thread::Builder::new().spawn_scoped(s, || {
            while !done.load(std::sync::atomic::Ordering::Acquire) {
                if super::driver::interrupted() {
                    // SAFETY: a plain system call; the child is reaped after this scope.
                    unsafe { libc::kill(pid, libc::SIGINT) };
                    return;
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        });
        if let Err(e) = watch {
            return Err(format!("the system refused to start a thread: {e}"));
        }
        let r = talk(&mut child);
        done.store(true, std::sync::atomic::Ordering::Release);
        r
    });
    let out = match talked {
        Ok(out) => out,
        Err(e) => {
            let _ = child.kill();
            let _ = child.wait();
            return Err(e);
        }
    };
    let status = child
        .wait()
        .map_err(|e| format!("waiting for the child process: {e}"))?;
    let answer: Option<Value> = out.lines().rev().find_map(|l| serde_json::from_str(l).ok());
    if let Some(a) = answer {
        if let Some(ok) = a.get("ok") {
            return Ok(ok.clone());
        }
        if let Some(e) = a.get("error").and_then(Value::as_str) {
            return Err(e.to_string());
        }
    }
    use std::os::unix::process::ExitStatusExt;
    Err(match status.signal() {
        Some(libc::SIGKILL) if cap.is_some() => format!(
            "{what} child process was killed (SIGKILL), most likely out of memory in its cgroup"
        ),
        Some(sig) => format!("{what} child process died from signal {sig}"),
        None => format!("{what} child process failed ({status}) without an answer"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_round_trips_through_json() {
        let job = LinuxJob {
            engine: Engine::Mmap,
            workload: Workload {
                rw: Pattern::RandRw,
                rwmix_read: 70,
                bs: 8192,
                file_len: 1 << 30,
                dist: Dist::Zipf(0.99),
                hot: Some(HotSpot {
                    ratio: 0.9,
                    hot_blocks: 1000,
                }),
                seed: 99,
                replay: None,
            },
            threads: 3,
            timing: Timing {
                runtime: 2.5,
                ramp: 1.0,
                progress: Some("mmap".into()),
                bs: 8192,
            },
            layout: Layout::new(LayoutKind::Hash, 3, 65536).unwrap(),
            paths: vec!["/a/dev0/bench.scf".into(), "/a/dev1/x".into(), "/b".into()],
            touch: Some(64),
        };
        let back = job_from_json(&job_to_json(&job).unwrap()).unwrap();
        assert_eq!(back.engine, job.engine);
        assert_eq!(back.workload.dist, job.workload.dist);
        assert_eq!(back.workload.hot, job.workload.hot);
        assert_eq!(back.workload.rwmix_read, 70);
        assert_eq!(back.paths, job.paths);
        assert_eq!(back.touch, job.touch);
        assert_eq!(back.layout.map(123_456_789), job.layout.map(123_456_789));
        assert_eq!(back.timing.progress, job.timing.progress);
        assert!(job_from_json(&json!({"engine": "mmap"})).is_err());
    }

    use super::super::outcome::tests::{json_value, mutated};
    use crate::test_alloc::{input_bound, largest_alloc};
    use proptest::prelude::*;

    fn sample() -> LinuxJob {
        LinuxJob {
            engine: Engine::LinuxDirect,
            workload: Workload {
                rw: Pattern::RandRead,
                rwmix_read: 50,
                bs: 4096,
                file_len: 1 << 30,
                dist: Dist::Uniform,
                hot: None,
                seed: 1,
                replay: None,
            },
            threads: 2,
            timing: Timing {
                runtime: 1.0,
                ramp: 0.0,
                progress: None,
                bs: 4096,
            },
            layout: Layout::new(LayoutKind::Stripe, 2, 65536).unwrap(),
            paths: vec!["/a".into(), "/b".into()],
            touch: None,
        }
    }

    const KEYS: &[&str] = &[
        "engine",
        "rw",
        "rwmix_read",
        "bs",
        "file_len",
        "dist",
        "hot",
        "seed",
        "threads",
        "runtime",
        "ramp",
        "progress",
        "layout",
        "devices",
        "block_bytes",
        "paths",
    ];

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// The child's job line with any fields, or any text, is a job or an error.
        #[test]
        fn any_job_line_is_a_job_or_refused(
            text in prop_oneof![
                6 => mutated(job_to_json(&sample()).unwrap(), KEYS).prop_map(|v| v.to_string()),
                1 => json_value().prop_map(|v| v.to_string()),
                1 => ".{0,40}",
            ],
        ) {
            let (r, largest) = largest_alloc(|| {
                let v: Value = serde_json::from_str(&text).map_err(|e| format!("bad job: {e}"))?;
                job_from_json(&v)
            });
            prop_assert!(largest <= input_bound(text.len()));
            match r {
                Ok(job) => {
                    prop_assert!(job.workload.rwmix_read <= 100);
                    prop_assert!(job.threads >= 1);
                }
                Err(e) => prop_assert!(!e.is_empty()),
            }
        }
    }
}
