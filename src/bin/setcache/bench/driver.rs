//! Running N bench threads for a ramp and a measured period, in whatever process
//! the engine lives in (the bench itself or the Linux-engine child).
//!
//! All threads start together on a barrier. A coordinator (the calling thread)
//! flips a shared phase (ramp -> measure -> stop), takes the process's CPU times and
//! I/O counters at the edges of the measured period, and prints the progress line.
//! Each thread keeps its own histogram and counters; the only shared things it
//! touches are the phase (read) and its own cache-line-padded progress counter.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Barrier, Mutex};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use super::progress::Progress;

const RAMP: u8 = 0;
const MEASURE: u8 = 1;
const STOP: u8 = 2;

/// Latencies up to a minute, in nanoseconds, three significant digits.
const MAX_LAT_NS: u64 = 60_000_000_000;

/// Set by SIGINT or SIGTERM: the current run stops early and no further run
/// starts.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_sigint(sig: libc::c_int) {
    if INTERRUPTED.swap(true, Ordering::SeqCst) {
        // A second signal ends the process now, as without the handler:
        // the first may wait on something that never comes (a read of an
        // idle pipe is restarted after the handler).
        // SAFETY: signal and raise are async-signal-safe.
        unsafe {
            libc::signal(sig, libc::SIG_DFL);
            libc::raise(sig);
        }
    }
}

/// Make Ctrl-C (SIGINT) or SIGTERM (`kill`, `timeout`) stop the command
/// cleanly (temporary files and cgroups are removed); a second one ends it
/// at once.
pub(crate) fn install_sigint() {
    let handler: extern "C" fn(libc::c_int) = on_sigint;
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only stores to an atomic and re-raises, both async-signal-safe.
        unsafe { libc::signal(sig, handler as libc::sighandler_t) };
    }
}

pub(crate) fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::Relaxed)
}

/// Latency histogram and counters of one thread (or of a whole run, merged).
pub(crate) struct ThreadStats {
    pub(crate) hist: Histogram<u64>,
    pub(crate) ops: u64,
    pub(crate) reads: u64,
}

impl ThreadStats {
    pub(crate) fn new() -> ThreadStats {
        ThreadStats {
            hist: Histogram::new_with_bounds(1, MAX_LAT_NS, 3)
                .expect("constant histogram bounds are valid"),
            ops: 0,
            reads: 0,
        }
    }

    #[inline]
    pub(crate) fn record(&mut self, lat: Duration, read: bool) {
        let ns = (lat.as_nanos() as u64).clamp(1, MAX_LAT_NS);
        self.hist.saturating_record(ns);
        self.ops += 1;
        self.reads += read as u64;
    }

    pub(crate) fn merge(&mut self, other: &ThreadStats) {
        // Same bounds on both sides, so adding cannot fail.
        let _ = self.hist.add(&other.hist);
        self.ops += other.ops;
        self.reads += other.reads;
    }
}

/// A per-thread progress counter on its own cache lines.
#[repr(align(128))]
#[derive(Default)]
struct Slot {
    ops: AtomicU64,
}

/// What bench threads see of the run.
pub(crate) struct Ctl {
    phase: AtomicU8,
    slots: Vec<Slot>,
    /// Threads whose body returned; the last one ends the run (a replay
    /// that made its passes ends before `--runtime`).
    finished: AtomicUsize,
}

impl Ctl {
    /// Whether completions now count.
    #[inline]
    pub(crate) fn measuring(&self) -> bool {
        self.phase.load(Ordering::Relaxed) == MEASURE
    }

    /// Whether the thread should stop issuing I/O.
    #[inline]
    pub(crate) fn stopped(&self) -> bool {
        self.phase.load(Ordering::Relaxed) == STOP
    }

    /// Publish thread `t`'s measured op count for the progress line.
    #[inline]
    pub(crate) fn publish(&self, t: usize, ops: u64) {
        self.slots[t].ops.store(ops, Ordering::Relaxed);
    }

    /// Measured operations of all threads so far.
    pub(crate) fn total_ops(&self) -> u64 {
        self.slots
            .iter()
            .map(|s| s.ops.load(Ordering::Relaxed))
            .sum()
    }

    fn stop(&self) {
        self.phase.store(STOP, Ordering::SeqCst);
    }
}

/// Length of the run and how to show it.
#[derive(Clone, Debug)]
pub(crate) struct Timing {
    pub(crate) runtime: f64,
    pub(crate) ramp: f64,
    /// Label of the progress line; `None` for no progress line.
    pub(crate) progress: Option<String>,
    pub(crate) bs: u64,
}

/// The outcome of the measured period, merged over threads.
pub(crate) struct Measured {
    pub(crate) stats: ThreadStats,
    pub(crate) secs: f64,
    pub(crate) cpu_user_s: f64,
    pub(crate) cpu_sys_s: f64,
    /// Bytes this process made the block layer read (`/proc/self/io`), if known.
    pub(crate) read_bytes: Option<u64>,
    pub(crate) interrupted: bool,
}

/// CPU user and system seconds of this process so far.
pub(crate) fn cpu_times() -> (f64, f64) {
    // SAFETY: `rusage` is plain data; zeroed is a valid value to be overwritten.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid, writable rusage.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    (secs(ru.ru_utime), secs(ru.ru_stime))
}

/// `read_bytes` of `/proc/self/io`.
pub(crate) fn proc_read_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/io").ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("read_bytes:"))
        .and_then(|v| v.trim().parse().ok())
}

/// Run `body(thread, ctl)` on `threads` threads for `timing`, and merge their stats.
pub(crate) fn run_threads<F>(threads: usize, timing: &Timing, body: F) -> Result<Measured, String>
where
    F: Fn(usize, &Ctl) -> Result<ThreadStats, String> + Sync,
{
    run_threads_prepared(threads, timing, |_| Ok(()), |t, (), ctl| body(t, ctl))
}

/// As [`run_threads`], each thread first making its state with
/// `prepare(thread)` (buffers, rings), outside the measured time and CPU
/// even without a ramp; `body(thread, state, ctl)` then runs.
pub(crate) fn run_threads_prepared<S, P, F>(
    threads: usize,
    timing: &Timing,
    prepare: P,
    body: F,
) -> Result<Measured, String>
where
    P: Fn(usize) -> Result<S, String> + Sync,
    F: Fn(usize, S, &Ctl) -> Result<ThreadStats, String> + Sync,
{
    let ctl = Ctl {
        phase: AtomicU8::new(RAMP),
        slots: (0..threads).map(|_| Slot::default()).collect(),
        finished: AtomicUsize::new(0),
    };
    let (prepared, barrier) = (Barrier::new(threads + 1), Barrier::new(threads + 1));
    let results: Mutex<Vec<Result<ThreadStats, String>>> = Mutex::new(Vec::new());
    let mut edges = None;
    let gate = crate::threads::Gate::default();
    std::thread::scope(|s| {
        crate::threads::spawn_all(&gate, s, threads, |t| {
            let (ctl, prepared, barrier, results) = (&ctl, &prepared, &barrier, &results);
            let (prepare, body) = (&prepare, &body);
            move || {
                let state = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| prepare(t)))
                    .unwrap_or_else(|_| Err(format!("thread {t} panicked while preparing")));
                prepared.wait();
                barrier.wait();
                let r = state.and_then(|st| body(t, st, ctl));
                let last = ctl.finished.fetch_add(1, Ordering::AcqRel) + 1 == threads;
                if r.is_err() || last {
                    ctl.stop();
                }
                results.lock().unwrap_or_else(|p| p.into_inner()).push(r);
            }
        })?;
        // Without a ramp, measuring starts once the threads are prepared
        // and before they run, so that their first requests count (a
        // replay's passes count every access).
        prepared.wait();
        let started = (timing.ramp <= 0.0).then(|| {
            let start = (cpu_times(), proc_read_bytes(), Instant::now());
            ctl.phase.store(MEASURE, Ordering::SeqCst);
            start
        });
        barrier.wait();
        edges = Some(coordinate(&ctl, timing, started));
        Ok::<_, String>(())
    })?;
    let (secs, (u0, s0), (u1, s1), rb0, rb1) = edges.expect("coordinator ran");
    let mut stats = ThreadStats::new();
    for r in results.into_inner().unwrap_or_else(|p| p.into_inner()) {
        stats.merge(&r?);
    }
    Ok(Measured {
        stats,
        secs,
        cpu_user_s: (u1 - u0).max(0.0),
        cpu_sys_s: (s1 - s0).max(0.0),
        read_bytes: rb0.zip(rb1).map(|(a, b)| b.saturating_sub(a)),
        interrupted: interrupted(),
    })
}

type Edges = (f64, (f64, f64), (f64, f64), Option<u64>, Option<u64>);

/// The coordinator's part: ramp, measure, stop; returns the measured period's edges.
/// `started`: the CPU times, bytes read and time at which measuring started,
/// if it started before the threads did.
fn coordinate(
    ctl: &Ctl,
    timing: &Timing,
    started: Option<((f64, f64), Option<u64>, Instant)>,
) -> Edges {
    let mut progress = timing
        .progress
        .as_ref()
        .filter(|_| std::io::stderr().is_terminal())
        .map(|label| Progress::new(label, timing.runtime, timing.bs));
    let tick = Duration::from_millis(50);
    let (cpu0, rb0, t0) = match started {
        Some(s) => s,
        None => {
            let ramp_end = Instant::now() + Duration::from_secs_f64(timing.ramp);
            while Instant::now() < ramp_end && !ctl.stopped() && !interrupted() {
                if let Some(p) = progress.as_mut() {
                    p.update(|| ctl.total_ops(), None);
                }
                std::thread::sleep(tick.min(ramp_end.saturating_duration_since(Instant::now())));
            }
            let start = (cpu_times(), proc_read_bytes(), Instant::now());
            // Nobody else writes the phase except `stop`, which must win.
            let _ = ctl
                .phase
                .compare_exchange(RAMP, MEASURE, Ordering::SeqCst, Ordering::SeqCst);
            start
        }
    };
    if let Some(p) = progress.as_mut() {
        // The first measured figure after a second of measuring, not at once.
        p.restart(t0);
    }
    let end = t0 + Duration::from_secs_f64(timing.runtime);
    while Instant::now() < end && !ctl.stopped() && !interrupted() {
        if let Some(p) = progress.as_mut() {
            p.update(|| ctl.total_ops(), Some(t0));
        }
        std::thread::sleep(tick.min(end.saturating_duration_since(Instant::now())));
    }
    ctl.stop();
    let secs = t0.elapsed().as_secs_f64();
    let cpu1 = cpu_times();
    let rb1 = proc_read_bytes();
    if progress.is_some() {
        say_raw!("\r\x1b[K");
    }
    (secs, cpu0, cpu1, rb0, rb1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_run_and_merge() {
        let timing = Timing {
            runtime: 0.2,
            ramp: 0.05,
            progress: None,
            bs: 4096,
        };
        let m = run_threads(3, &timing, |t, ctl| {
            let mut st = ThreadStats::new();
            while !ctl.stopped() {
                if ctl.measuring() {
                    st.record(Duration::from_micros(10 + t as u64), t == 0);
                    ctl.publish(t, st.ops);
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            Ok(st)
        })
        .unwrap();
        assert!(m.stats.ops > 30, "{}", m.stats.ops);
        assert!(m.stats.reads > 0 && m.stats.reads < m.stats.ops);
        assert!(m.secs >= 0.2 && m.secs < 5.0, "{}", m.secs);
        assert_eq!(m.stats.hist.len(), m.stats.ops);
    }

    #[test]
    fn a_failing_thread_fails_the_run_early() {
        let timing = Timing {
            runtime: 30.0,
            ramp: 0.0,
            progress: None,
            bs: 512,
        };
        let t0 = Instant::now();
        let r = run_threads(2, &timing, |t, ctl| {
            if t == 1 {
                return Err("boom".to_string());
            }
            while !ctl.stopped() {
                std::thread::sleep(Duration::from_millis(1));
            }
            Ok(ThreadStats::new())
        });
        assert_eq!(r.err().as_deref(), Some("boom"));
        // (Running on to the runtime would take 30 s.)
        assert!(t0.elapsed() < Duration::from_secs(15));
    }

    /// Without a ramp, the threads' preparation (300 ms of CPU each here)
    /// is outside the measured period (so neither timed nor charged), and a
    /// failed one fails the run.
    #[test]
    fn preparation_is_outside_the_measured_time_and_cpu() {
        let timing = Timing {
            runtime: 0.5,
            ramp: 0.0,
            progress: None,
            bs: 4096,
        };
        let spin = |d: Duration| {
            let t = Instant::now();
            let mut x = 0u64;
            while t.elapsed() < d {
                x = std::hint::black_box(x.wrapping_add(1));
            }
            x
        };
        let prepare = |_| Ok(spin(Duration::from_millis(300)));
        // A body counts an operation for each millisecond it has run.
        let m = run_threads_prepared(2, &timing, prepare, |t, _, ctl| {
            let (mut st, start) = (ThreadStats::new(), Instant::now());
            while !ctl.stopped() {
                std::thread::sleep(Duration::from_millis(1));
                while (st.ops as u128) < start.elapsed().as_millis() {
                    st.record(Duration::from_micros(10), true);
                }
                ctl.publish(t, st.ops);
            }
            Ok(st)
        })
        .unwrap();
        assert!(m.secs < 5.0, "measured {} s", m.secs);
        // Each body ran for the whole measured half second, not 200 ms of it
        // (about 400 operations each if the preparation were measured).
        assert!(m.stats.ops > 2 * 300, "{} ops in {} s", m.stats.ops, m.secs);
        let r = run_threads_prepared(
            2,
            &timing,
            |t| {
                if t == 1 {
                    Err("no buffers".to_string())
                } else {
                    Ok(())
                }
            },
            |_, (), ctl| {
                while !ctl.stopped() {
                    std::thread::sleep(Duration::from_millis(1));
                }
                Ok(ThreadStats::new())
            },
        );
        assert_eq!(r.err().as_deref(), Some("no buffers"));
    }
}

/// Which thread this is: its number among `threads` of its workload, its
/// progress slot among all, and where its workload's region starts.
#[derive(Clone, Copy)]
pub(crate) struct Me {
    pub(crate) t: usize,
    pub(crate) threads: usize,
    pub(crate) slot: usize,
    pub(crate) base: u64,
    /// Seconds to wait before the first request.
    pub(crate) delay: f64,
}

/// Cache statistics when measuring starts and when it stops.
pub(crate) type StatEdges =
    std::sync::Mutex<(Option<setcache::CacheStats>, Option<setcache::CacheStats>)>;

/// The run's phase for this thread: whether it is measuring now. The first
/// thread to see measuring start snapshots the cache's counters (thread 0
/// alone did: one that waited for its requests through the whole measured
/// period left the run without a hit ratio).
pub(crate) fn phase(ctl: &Ctl, cs: &setcache::CachedStore, edges: &StatEdges, was: bool) -> bool {
    let now = ctl.measuring();
    if now && !was {
        let mut e = edges.lock().unwrap_or_else(|p| p.into_inner());
        if e.0.is_none() {
            e.0 = Some(cs.cache().stats());
        }
    }
    now
}
