//! Where the futures' I/O workers run: placed before they start and while
//! they run, read back from the kernel (`/proc/self/task/*/status`), and
//! bad placements refused. One test in its own binary, so that the only
//! futures' worker of the process is this test's.

mod common;

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake};

use common::{TempDir, pattern};
use setcache::{Error, WorkerCpus};

/// The CPU list the kernel lets each thread named `name` run on.
fn threads_cpus(name: &str) -> Vec<Vec<usize>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc/self/task").unwrap() {
        let t = e.unwrap().path();
        let Ok(comm) = std::fs::read_to_string(t.join("comm")) else {
            continue; // the thread ended
        };
        if comm.trim_end() != name {
            continue;
        }
        let status = std::fs::read_to_string(t.join("status")).unwrap();
        let line = status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .expect("a Cpus_allowed_list line");
        out.push(cpu_list(line));
    }
    out
}

fn cpu_list(s: &str) -> Vec<usize> {
    let mut v = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        v.extend(a.parse::<usize>().unwrap()..=b.parse::<usize>().unwrap());
    }
    v
}

/// This thread's CPUs (the workers' "anywhere").
fn my_cpus() -> Vec<usize> {
    let status = std::fs::read_to_string("/proc/thread-self/status").unwrap();
    cpu_list(
        status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .unwrap(),
    )
}

struct Unpark(std::thread::Thread);
impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

fn block_on<F: Future>(f: F) -> F::Output {
    let waker = Arc::new(Unpark(std::thread::current())).into();
    let mut cx = Context::from_waker(&waker);
    let mut f = pin!(f);
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::park();
    }
}

#[test]
fn futures_workers_run_where_they_are_placed() {
    let tmp = TempDir::new("placement");
    let cs = common::cached_rig(&tmp, 1 << 20, 64, 4, std::time::Duration::from_secs(2));
    let f = cs.open_file("data").unwrap();
    let allowed = my_cpus();
    let (first, last) = (allowed[0], *allowed.last().unwrap());
    assert!(
        cs.futures_workers_cpus().is_empty(),
        "no worker before a future needs one"
    );

    // Placed before they start: they start there.
    cs.place_futures_workers(WorkerCpus::Pinned(vec![last]))
        .unwrap();
    let read = |page: usize| {
        let (n, got) = block_on(f.read_at_async((page * 4096) as u64, vec![0; 4096]));
        assert_eq!(n.unwrap(), 4096);
        assert_eq!(got, pattern(1, (page * 4096) as u64, 4096), "page {page}");
    };
    read(1);
    let workers = cs.futures_workers_cpus();
    assert!(!workers.is_empty());
    assert!(workers.iter().all(|c| c == &[last]), "{workers:?}");
    let seen = threads_cpus("setcache-aio0");
    assert_eq!(seen, vec![vec![last]], "the kernel's view of the worker");

    // Placed while they run: they move.
    cs.place_futures_workers(WorkerCpus::Pinned(vec![first]))
        .unwrap();
    assert_eq!(threads_cpus("setcache-aio0"), vec![vec![first]]);
    read(2);
    cs.place_futures_workers(WorkerCpus::Anywhere).unwrap();
    assert_eq!(threads_cpus("setcache-aio0"), vec![allowed.clone()]);

    // Refused, naming what was wrong, and nothing moves.
    let far = 1 << 16;
    match cs.place_futures_workers(WorkerCpus::Pinned(vec![first, far])) {
        Err(Error::InvalidArgument(m)) => assert!(m.contains(&format!("CPU {far}")), "{m}"),
        other => panic!("a CPU the process may not use: {other:?}"),
    }
    match cs.place_futures_workers(WorkerCpus::Pinned(Vec::new())) {
        Err(Error::InvalidArgument(m)) => assert!(m.contains("empty"), "{m}"),
        other => panic!("no CPU at all: {other:?}"),
    }
    assert_eq!(threads_cpus("setcache-aio0"), vec![allowed.clone()]);

    // The default: off the CPUs that take the devices' interrupts, where
    // the process has others (the checkout's disk; on the development
    // machine its one vector goes to CPU 1 and the worker runs on CPU 0).
    let busy = cs.store().interrupt_cpus();
    let off: Vec<usize> = allowed
        .iter()
        .copied()
        .filter(|c| !busy.contains(c))
        .collect();
    let want = if off.is_empty() { allowed.clone() } else { off };
    cs.place_futures_workers(WorkerCpus::OffInterrupts).unwrap();
    eprintln!("devices' interrupts on CPUs {busy:?}; the worker placed on {want:?}");
    assert_eq!(threads_cpus("setcache-aio0"), vec![want]);
    read(3);
    drop(f);
    drop(cs);
    assert!(
        threads_cpus("setcache-aio0").is_empty(),
        "the worker ended with its store"
    );
}
