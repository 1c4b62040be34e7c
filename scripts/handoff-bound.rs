//! The ceiling of emulated partitions on this machine: what handing half of
//! each thread's page copies to another thread and back costs when there are
//! more threads than CPUs, with nothing of the cache. Two application
//! threads pick random 4 KiB blocks of a 1 GiB buffer on huge pages (as a
//! cache's frames are) and copy each into one of 32 buffers of their own.
//! `shared`: each thread copies every block itself. `partitioned`: a block's
//! partition is its number's low bit; a thread copies its home partition's
//! blocks itself and sends the others, in bundles, over a single-producer
//! single-consumer ring to that partition's worker thread, which copies each
//! block straight into the sender's buffer and sends the bundle back; each
//! thread keeps 32 copies outstanding, as the bench's `--iodepth 32`. Two
//! workers, four threads on the machine's CPUs. A thread with nothing to do
//! yields the CPU (the cheapest hand-off when every CPU is busy: no sleep,
//! no wake-up). No lookup, no pin, no allocation per request: what is left is
//! the copies and the hand-offs.
//!
//! With `compute`, the line of computing in the cache: `shared` copies each
//! block and sums the copy's 64-bit words, `partitioned` sums each block in
//! place (its home partition's itself, the others' in the worker, which
//! sends back 8 bytes, not the block). With `compute search`, the same with
//! a binary search of the block's words for a key (the bench's `--compute
//! search`) in place of the sum: a task that reads a few lines of a block.
//!
//! With `coop`, no worker threads: each application thread, between its own
//! requests, serves the bundles the other thread sent to its home partition
//! (two threads on two CPUs, so nothing is handed over through the
//! scheduler). What is left is the requests' and the copies' cache lines
//! moving between the CPUs.
//!
//! Run: `rustc --edition 2021 -C opt-level=3 scripts/handoff-bound.rs -o /tmp/handoff-bound && /tmp/handoff-bound [compute [search]] [coop]`

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const BLOCK: usize = 4096;
const DEPTH: usize = 32;
/// Most requests in one bundle.
const BUNDLE: usize = 16;

fn next(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

extern "C" {
    fn mmap(addr: *mut u8, len: usize, prot: i32, flags: i32, fd: i32, off: i64) -> *mut u8;
    fn madvise(addr: *mut u8, len: usize, advice: i32) -> i32;
}

/// A request: the block to copy and the slot of the sender's buffers.
#[derive(Clone, Copy)]
struct Req {
    block: u64,
    slot: u32,
}

/// A bounded single-producer single-consumer ring of bundles.
struct Ring {
    slots: Vec<UnsafeCell<Vec<Req>>>,
    head: AtomicUsize,
    tail: AtomicUsize,
}

unsafe impl Sync for Ring {}

impl Ring {
    fn new(n: usize) -> Ring {
        Ring {
            slots: (0..n).map(|_| UnsafeCell::new(Vec::new())).collect(),
            head: AtomicUsize::new(0),
            tail: AtomicUsize::new(0),
        }
    }

    /// Push `b` (the producer only); gives it back when the ring is full.
    fn push(&self, b: Vec<Req>) -> Result<(), Vec<Req>> {
        let t = self.tail.load(Ordering::Relaxed);
        if t - self.head.load(Ordering::Acquire) == self.slots.len() {
            return Err(b);
        }
        unsafe { *self.slots[t % self.slots.len()].get() = b };
        self.tail.store(t + 1, Ordering::Release);
        Ok(())
    }

    /// Pop a bundle (the consumer only).
    fn pop(&self) -> Option<Vec<Req>> {
        let h = self.head.load(Ordering::Relaxed);
        if h == self.tail.load(Ordering::Acquire) {
            return None;
        }
        let b = unsafe { std::mem::take(&mut *self.slots[h % self.slots.len()].get()) };
        self.head.store(h + 1, Ordering::Release);
        Some(b)
    }
}

/// One application thread's links: requests to each partition, replies back.
struct App {
    to: [Ring; 2],
    back: [Ring; 2],
    bufs: UnsafeCell<Vec<u8>>,
}

unsafe impl Sync for App {}

struct Mem(*const u8);
unsafe impl Send for Mem {}
unsafe impl Sync for Mem {}

fn copy_block(mem: &Mem, block: u64, dst: *mut u8) {
    unsafe { std::ptr::copy_nonoverlapping(mem.0.add(block as usize * BLOCK), dst, BLOCK) };
}

#[inline(never)]
fn block_sum(b: &[u8]) -> u64 {
    b.chunks_exact(8)
        .map(|w| u64::from_le_bytes(w.try_into().unwrap()))
        .fold(0u64, u64::wrapping_add)
}

/// The first of the block's words not less than `key`, by binary search.
#[inline(never)]
fn block_search(b: &[u8], key: u64) -> u64 {
    let word = |i: usize| u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().unwrap());
    let (mut lo, mut hi) = (0usize, b.len() / 8);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if word(mid) < key {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo as u64
}

/// What is computed on a block with `compute`.
#[derive(Clone, Copy, PartialEq)]
enum Task {
    Sum,
    Search,
}

fn run_task(task: Task, b: &[u8]) -> u64 {
    match task {
        Task::Sum => block_sum(b),
        Task::Search => block_search(b, 1 << 63),
    }
}

fn block_of(mem: &Mem, block: u64) -> &[u8] {
    unsafe { std::slice::from_raw_parts(mem.0.add(block as usize * BLOCK), BLOCK) }
}

/// One request's work where it is served: a copy into `dst`, or with
/// `compute` the task's result on the block in place, its 8 bytes stored at
/// `dst`.
fn serve(mem: &Mem, block: u64, dst: *mut u8, compute: Option<Task>) {
    if let Some(task) = compute {
        let v = run_task(task, block_of(mem, block));
        unsafe { (dst as *mut u64).write_unaligned(v) };
    } else {
        copy_block(mem, block, dst);
    }
}

/// Serve every bundle `app` sent to partition `p`, as its worker (or, with
/// `coop`, the thread at home there) does: each block straight into the
/// sender's buffer, the bundle back as the reply. Whether there was any.
fn serve_bundles(mem: &Mem, app: &App, p: usize, compute: Option<Task>) -> bool {
    let mut any = false;
    while let Some(mut b) = app.to[p].pop() {
        any = true;
        let base = unsafe { (*app.bufs.get()).as_mut_ptr() };
        for r in &b {
            serve(
                mem,
                r.block,
                unsafe { base.add(r.slot as usize * BLOCK) },
                compute,
            );
        }
        while let Err(back) = app.back[p].push(b) {
            b = back;
            std::thread::yield_now();
        }
    }
    any
}

/// Copies a second by two threads, each copying every block itself.
fn shared(mem: &Arc<Mem>, blocks: u64, secs: f64, compute: Option<Task>) -> f64 {
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let hs: Vec<_> = (0..2u64)
        .map(|t| {
            let (mem, stop, done) = (mem.clone(), stop.clone(), done.clone());
            std::thread::spawn(move || {
                let mut bufs = vec![0u8; DEPTH * BLOCK];
                let mut x = 0x9E37_79B9_7F4A_7C15 ^ (t + 1);
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    for _ in 0..256 {
                        let b = next(&mut x) % blocks;
                        let slot = (n as usize) % DEPTH;
                        copy_block(&mem, b, bufs[slot * BLOCK..].as_mut_ptr());
                        if let Some(task) = compute {
                            std::hint::black_box(run_task(task, &bufs[slot * BLOCK..][..BLOCK]));
                        }
                        n += 1;
                    }
                }
                std::hint::black_box(&bufs);
                done.fetch_add(n, Ordering::Relaxed);
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs_f64(secs));
    stop.store(true, Ordering::Relaxed);
    for h in hs {
        h.join().unwrap();
    }
    done.load(Ordering::Relaxed) as f64 / secs
}

/// Copies a second with two emulated partitions (see the module's comment).
fn partitioned(mem: &Arc<Mem>, blocks: u64, secs: f64, compute: Option<Task>, coop: bool) -> f64 {
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let apps: Vec<Arc<App>> = (0..2)
        .map(|_| {
            Arc::new(App {
                to: [Ring::new(DEPTH), Ring::new(DEPTH)],
                back: [Ring::new(DEPTH), Ring::new(DEPTH)],
                bufs: UnsafeCell::new(vec![0u8; DEPTH * BLOCK]),
            })
        })
        .collect();
    let workers: Vec<_> = (0..if coop { 0 } else { 2usize })
        .map(|p| {
            let (mem, stop, apps) = (mem.clone(), stop.clone(), apps.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let mut any = false;
                    for a in &apps {
                        any |= serve_bundles(&mem, a, p, compute);
                    }
                    if !any {
                        std::thread::yield_now();
                    }
                }
            })
        })
        .collect();
    let hs: Vec<_> = (0..2usize)
        .map(|home| {
            let (mem, stop, done, app) =
                (mem.clone(), stop.clone(), done.clone(), apps[home].clone());
            let peer = apps[1 - home].clone();
            std::thread::spawn(move || {
                let other = 1 - home;
                let mut x = 0x9E37_79B9_7F4A_7C15 ^ (home as u64 + 1);
                let mut free: Vec<u32> = (0..DEPTH as u32).collect();
                let mut bundle: Vec<Req> = Vec::with_capacity(BUNDLE);
                let mut n = 0u64;
                let base = unsafe { (*app.bufs.get()).as_mut_ptr() };
                while !stop.load(Ordering::Relaxed) {
                    // With `coop`, the other thread's bundles to this
                    // thread's home partition first, as its worker would.
                    if coop {
                        serve_bundles(&mem, &peer, home, compute);
                    }
                    // Replies first: their slots are free again.
                    while let Some(b) = app.back[other].pop() {
                        n += b.len() as u64;
                        free.extend(b.iter().map(|r| r.slot));
                    }
                    while let Some(slot) = free.pop() {
                        let b = next(&mut x) % blocks;
                        if (b & 1) as usize == home {
                            serve(&mem, b, unsafe { base.add(slot as usize * BLOCK) }, compute);
                            n += 1;
                            free.push(slot);
                        } else {
                            bundle.push(Req { block: b, slot });
                            if bundle.len() == BUNDLE {
                                break;
                            }
                        }
                    }
                    if !bundle.is_empty() {
                        let mut b = std::mem::replace(&mut bundle, Vec::with_capacity(BUNDLE));
                        while let Err(back) = app.to[other].push(b) {
                            b = back;
                            std::thread::yield_now();
                        }
                    }
                    if free.is_empty() && !coop {
                        // Every slot is out with the worker: give it the CPU.
                        std::thread::yield_now();
                    }
                }
                done.fetch_add(n, Ordering::Relaxed);
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs_f64(secs));
    stop.store(true, Ordering::Relaxed);
    for h in hs.into_iter().chain(workers) {
        h.join().unwrap();
    }
    done.load(Ordering::Relaxed) as f64 / secs
}

fn main() {
    let size: usize = 1 << 30;
    let blocks = (size / BLOCK) as u64;
    // Anonymous, private, read and write; MADV_HUGEPAGE (14).
    let p = unsafe { mmap(std::ptr::null_mut(), size, 3, 0x22, -1, 0) };
    assert!(!p.is_null() && p as isize != -1, "mmap failed");
    unsafe {
        madvise(p, size, 14);
        for i in (0..size).step_by(4096) {
            *p.add(i) = i as u8;
        }
    }
    let mem = Arc::new(Mem(p));
    let args: Vec<String> = std::env::args().skip(1).collect();
    let given = |w: &str| args.iter().any(|a| a == w);
    if let Some(a) = args
        .iter()
        .find(|a| !["compute", "search", "coop"].contains(&a.as_str()))
    {
        eprintln!("handoff-bound: unknown argument {a:?}: give compute, search, coop or none");
        std::process::exit(2);
    }
    let compute = match (given("compute"), given("search")) {
        (false, false) => None,
        (true, false) => Some(Task::Sum),
        (true, true) => Some(Task::Search),
        (false, true) => {
            eprintln!("handoff-bound: search is a kind of compute: give compute search");
            std::process::exit(2);
        }
    };
    let coop = given("coop");
    let secs = 2.0;
    let mut ratios = Vec::new();
    let t0 = Instant::now();
    // A round of each first, not counted: the first partitioned round of a
    // process runs at a fifth of the later ones.
    shared(&mem, blocks, secs / 2.0, compute);
    partitioned(&mem, blocks, secs / 2.0, compute, coop);
    for round in 1..=7 {
        let s = shared(&mem, blocks, secs, compute);
        let q = partitioned(&mem, blocks, secs, compute, coop);
        println!(
            "round {round}: shared {:.2} M blocks/s, partitioned {:.2} M, ratio {:.3}",
            s / 1e6,
            q / 1e6,
            q / s
        );
        ratios.push(q / s);
    }
    ratios.sort_by(|a, b| a.partial_cmp(b).unwrap());
    println!(
        "median ratio {:.3} (min {:.3}, max {:.3}) in {:.0} s",
        ratios[3],
        ratios[0],
        ratios[6],
        t0.elapsed().as_secs_f64()
    );
}
