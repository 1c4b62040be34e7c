//! The `direct` engine: the storage layer without a cache.
//!
//! Each bench thread owns a `Queue` and a pool of `iodepth` registered buffers. It
//! keeps every buffer in flight: completions (callbacks on the same thread) record
//! the latency from submission and hand the buffer back; the loop resubmits freed
//! buffers with fresh offsets and waits for the next completion.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;
use std::time::Instant;

use setcache::{AlignedBuf, Completion, File, OpKind, Queue, Request, Store};

use super::driver::{Ctl, ThreadStats, Timing, run_threads_prepared};
use super::report::Outcome;
use super::workload::{Op, OpGen, Rng, Workload, fill_block, mix64, wait_until};

/// State a thread shares with its own callbacks.
struct Local {
    stats: ThreadStats,
    /// Buffers not in flight, oldest first (with a frame pool they rotate
    /// through all of it, as a cache's frames do).
    free: VecDeque<AlignedBuf>,
    in_flight: usize,
    /// `direct-copy`: the caller's buffer each completed read is copied into
    /// (all of it, or with `--access ref` its first `--touch` bytes).
    copy_out: Option<Vec<u8>>,
    /// Whether completions count (copied from the run's phase by the thread loop).
    measuring: bool,
    error: Option<String>,
}

fn on_complete(local: &RefCell<Local>, c: Completion, submitted: Instant) {
    let lat = submitted.elapsed();
    let mut l = local.borrow_mut();
    match c.result {
        Ok(()) => {
            if l.measuring {
                l.stats.record(lat, c.kind == OpKind::Read);
            }
        }
        Err(e) => {
            if l.error.is_none() {
                l.error = Some(format!("direct engine: {e}"));
            }
        }
    }
    if let Some(out) = l.copy_out.as_mut().filter(|_| c.kind == OpKind::Read) {
        // What a copying cache adds to a read miss: the bytes go from the
        // frame the device filled to the caller's buffer (a write's were
        // copied into its frame before it was sent).
        let n = out.len().min(c.buf.len());
        out[..n].copy_from_slice(&c.buf[..n]);
        std::hint::black_box(&out[..n]);
    }
    l.in_flight -= 1;
    l.free.push_back(c.buf);
}

/// Run the workload on `threads` threads with `iodepth` requests in flight each.
#[allow(clippy::too_many_arguments)]
pub(crate) fn run(
    store: &Store,
    file: &File,
    w: &Workload,
    threads: usize,
    iodepth: u32,
    poll: std::time::Duration,
    pool: Option<u64>,
    touch: Option<u64>,
    timing: &Timing,
) -> Result<Outcome, String> {
    let per_thread = pool.map(|p| super::config::frames_per_thread(p, threads, w.bs) as usize);
    let depth = iodepth as usize;
    let prepare = |t| buffers(store, w, t, depth, per_thread);
    let m = run_threads_prepared(threads, timing, prepare, |t, bufs, ctl| {
        thread_body(
            file, w, bufs, t, threads, depth, poll, per_thread, touch, ctl,
        )
    })?;
    // Nothing is cached: every read goes to a device.
    Ok(Outcome::from_measured(&m, Some(0.0)))
}

/// Thread `t`'s buffers (its frame pool, for `direct-copy`), registered
/// with the rings and, for writes, filled: made before the measured time.
fn buffers(
    store: &Store,
    w: &Workload,
    t: usize,
    depth: usize,
    pool: Option<usize>,
) -> Result<Vec<AlignedBuf>, String> {
    let mut bufs = store
        .alloc_registered(pool.unwrap_or(depth).max(depth), w.bs as usize)
        .map_err(|e| format!("direct engine: cannot allocate buffers: {e}"))?;
    if w.rw.writes() {
        let mut rng = Rng::new(w.seed ^ mix64(t as u64 + 1));
        for b in &mut bufs {
            rng.fill_nonzero(b);
        }
    }
    Ok(bufs)
}

#[allow(clippy::too_many_arguments)]
fn thread_body(
    file: &File,
    w: &Workload,
    bufs: Vec<AlignedBuf>,
    t: usize,
    threads: usize,
    depth: usize,
    poll: std::time::Duration,
    pool: Option<usize>,
    touch: Option<u64>,
    ctl: &Ctl,
) -> Result<ThreadStats, String> {
    let local = Rc::new(RefCell::new(Local {
        stats: ThreadStats::new(),
        free: bufs.into(),
        in_flight: 0,
        copy_out: pool.map(|_| vec![0u8; touch.unwrap_or(w.bs) as usize]),
        measuring: false,
        error: None,
    }));
    let mut queue = Queue::new(depth);
    queue.set_poll(poll);
    let mut ops = OpGen::new(w, t, threads);
    let mut batch: Vec<AlignedBuf> = Vec::with_capacity(depth);
    let mut next: Vec<Op> = Vec::with_capacity(depth);
    let mut ended = false;
    loop {
        let mut later = None;
        {
            let mut l = local.borrow_mut();
            if l.error.is_some() || ctl.stopped() || ended {
                break;
            }
            l.measuring = ctl.measuring();
            ctl.publish(t, l.stats.ops);
            let room = depth - l.in_flight;
            let want = room.min(l.free.len());
            while next.len() < want {
                let Some(op) = ops.next_in_batch(&mut later, &mut ended) else {
                    break;
                };
                next.push(op);
            }
            let take = next.len();
            batch.extend(l.free.drain(..take));
            l.in_flight += take;
        }
        if !batch.is_empty() {
            let submitted = Instant::now();
            let reqs: Vec<Request> = batch
                .drain(..)
                .zip(next.drain(..))
                .map(|(buf, op)| {
                    let l = Rc::clone(&local);
                    let cb = move |c: Completion| on_complete(&l, c, submitted);
                    if op.read {
                        Request::read(file, op.offset, buf, cb)
                    } else {
                        let mut buf = buf;
                        if w.replay.is_some() {
                            fill_block(op.offset / w.bs, &mut buf);
                        }
                        if let Some(out) = local.borrow_mut().copy_out.as_mut() {
                            if w.replay.is_some() {
                                fill_block(op.offset / w.bs, out);
                            }
                            // A copying cache's write: caller's bytes into the frame.
                            let n = out.len().min(buf.len());
                            buf[..n].copy_from_slice(&out[..n]);
                        }
                        Request::write(file, op.offset, buf, cb)
                    }
                })
                .collect();
            queue.submit(reqs);
        }
        if ended {
            break;
        }
        match later {
            Some(at) => wait_until(at, || queue.poll() > 0),
            None => {
                queue.wait(1);
            }
        }
    }
    // A replay that made its passes counts its last requests too.
    if !(ended && ctl.measuring()) {
        local.borrow_mut().measuring = false;
    }
    queue.drain();
    let mut l = local.borrow_mut();
    if let Some(e) = l.error.take() {
        return Err(e);
    }
    Ok(std::mem::replace(&mut l.stats, ThreadStats::new()))
}
