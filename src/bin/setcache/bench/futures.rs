//! `--api async`: each thread keeps `--iodepth` futures of the setcache
//! engine in flight under a small executor of its own. A finished future's
//! slot gets the next request's future at once, polled after the other
//! slots ready in the round, as a task queue polls a task it was handed
//! (the future asks for its page's set as it is made, and finds it in the
//! CPU's cache by then); a future that completes in its first poll (a hit)
//! is followed by the next without a wake. The thread parks when no future
//! is ready, and a waker unparks it.
//!
//! The clock is read once per round (up to 64 completions), not twice per
//! request, as the queue's loop reads it once per batch: a request's
//! latency runs from the end of the round before the one that started it
//! to the end of the round that saw it complete (never less than the truth).

use std::collections::VecDeque;
use std::future::Future as _;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use setcache::{CachedFile, CachedStore, PageAt, PageGuard, ReadAt, WriteAt};

use super::driver::{Ctl, Me, StatEdges, ThreadStats, phase};
use super::workload::{Op, OpGen, Rng, Workload, fill_block, mix64};

/// The futures a slot may hold (none is boxed).
enum Fut<'f> {
    Read(ReadAt<'f>),
    Write(WriteAt<'f>),
    Page(PageAt<'f>, usize),
}

enum Out<'f> {
    Bytes(setcache::Result<()>, Vec<u8>),
    Page(setcache::Result<PageGuard<'f>>, usize),
}

impl<'f> Fut<'f> {
    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<Out<'f>> {
        match self {
            Fut::Read(f) => Pin::new(f)
                .poll(cx)
                .map(|(r, b)| Out::Bytes(r.map(drop), b)),
            Fut::Write(f) => Pin::new(f).poll(cx).map(|(r, b)| Out::Bytes(r, b)),
            Fut::Page(f, i) => {
                let i = *i;
                Pin::new(f).poll(cx).map(|g| Out::Page(g, i))
            }
        }
    }
}

/// The slots woken since the thread last looked.
struct Ready {
    list: Mutex<Vec<usize>>,
    thread: std::thread::Thread,
}

/// One slot's waker.
struct SlotWaker {
    slot: usize,
    ready: Arc<Ready>,
    /// Woken and not yet taken (a slot is listed once).
    woken: AtomicBool,
}

impl Wake for SlotWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        if !self.woken.swap(true, Ordering::AcqRel) {
            self.ready
                .list
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(self.slot);
            self.ready.thread.unpark();
        }
    }
}

/// A thread of `--api async`: `depth` futures in flight; reads copy into a
/// buffer, or with `touch` take a page guard and read `touch` bytes of it.
#[allow(clippy::too_many_arguments)]
pub(crate) fn body(
    cs: &CachedStore,
    file: &CachedFile,
    w: &Workload,
    me: Me,
    depth: usize,
    touch: Option<usize>,
    ctl: &Ctl,
    edges: &StatEdges,
) -> Result<ThreadStats, String> {
    let depth = depth.max(1);
    let bs = w.bs as usize;
    let mut spare: Vec<Vec<u8>> = (0..depth).map(|_| vec![0u8; bs]).collect();
    if w.rw.writes() {
        let mut rng = Rng::new(w.seed ^ mix64(me.t as u64 + 1));
        for b in &mut spare {
            rng.fill_nonzero(b);
        }
    }
    let ready = Arc::new(Ready {
        list: Mutex::new(Vec::with_capacity(depth)),
        thread: std::thread::current(),
    });
    let wakers: Vec<Arc<SlotWaker>> = (0..depth)
        .map(|slot| {
            Arc::new(SlotWaker {
                slot,
                ready: ready.clone(),
                woken: AtomicBool::new(false),
            })
        })
        .collect();
    let wakers_std: Vec<Waker> = wakers.iter().map(|w| Waker::from(w.clone())).collect();
    let mut slots: Vec<Option<(Fut<'_>, Instant, bool)>> = (0..depth).map(|_| None).collect();
    let mut stats = ThreadStats::new();
    let mut ops = OpGen::new(w, me.t, me.threads);
    let mut measuring = false;
    let mut todo: VecDeque<usize> = (0..depth).collect();
    let mut woken = Vec::with_capacity(depth);
    let mut touched = vec![0u8; touch.unwrap_or(0)];
    let mut error: Option<String> = None;
    let mut live = 0usize;
    let mut start_new = true;
    let mut ended = false;
    let mut replayed = false;
    // Slots left empty until a timed replay's next access is due.
    let mut held: Vec<usize> = Vec::new();
    let mut hold_until: Option<Instant> = None;
    // The clock at the end of the last run (or wait), and the requests a
    // run saw complete: (started, read).
    let mut now = Instant::now();
    let mut finished: Vec<(Instant, bool)> = Vec::with_capacity(64);
    loop {
        measuring = phase(ctl, cs, edges, measuring);
        ctl.publish(me.slot, stats.ops);
        if start_new && (ctl.stopped() || error.is_some() || ended) {
            replayed = ended && error.is_none() && !ctl.stopped();
            start_new = false;
            if me.slot == 0 {
                edges.lock().unwrap_or_else(|p| p.into_inner()).1 = Some(cs.cache().stats());
            }
        }
        if !start_new && live == 0 {
            break;
        }
        {
            let mut l = ready.list.lock().unwrap_or_else(|p| p.into_inner());
            std::mem::swap(&mut *l, &mut woken);
        }
        for &k in &woken {
            wakers[k].woken.store(false, Ordering::Release);
        }
        todo.extend(woken.drain(..));
        if hold_until.is_some_and(|t| Instant::now() >= t) {
            hold_until = None;
            todo.extend(held.drain(..));
        }
        if todo.is_empty() {
            let nap = Duration::from_millis(10);
            let nap = hold_until.map_or(nap, |t| {
                t.saturating_duration_since(Instant::now()).min(nap)
            });
            std::thread::park_timeout(nap);
            now = Instant::now();
            continue;
        }
        // Each slot in `todo` is polled in turn. A slot whose future
        // completed gets its next request's future at once and goes to the
        // back of `todo`, polled after the slots before it, as a task queue
        // polls a task it was just handed: the new future's hint (its
        // page's set, asked for as the future is made) has time to arrive.
        // A round ends after 64 completions (the clock, the wakers' list
        // and the end of the run get their turn) or when `todo` is empty.
        let mut completed = 0;
        while let Some(k) = todo.pop_front() {
            if slots[k].is_none() {
                if !start_new {
                    continue;
                }
                match next_op(&mut ops, &mut hold_until, &mut ended) {
                    Some(op) => {
                        slots[k] = Some((make(file, op, &me, w, touch, &mut spare), now, op.read));
                        live += 1;
                    }
                    None => {
                        if hold_until.is_some() {
                            held.push(k);
                        }
                        continue;
                    }
                }
            }
            let mut cx = Context::from_waker(&wakers_std[k]);
            let (fut, t0, read) = slots[k].as_mut().expect("a future");
            let (t0, read) = (*t0, *read);
            let Poll::Ready(out) = fut.poll(&mut cx) else {
                continue;
            };
            slots[k] = None;
            live -= 1;
            let r = match out {
                Out::Bytes(r, b) => {
                    spare.push(b);
                    r
                }
                Out::Page(g, i) => g.map(|g| {
                    let n = touched.len();
                    touched.copy_from_slice(&g[i..i + n]);
                    std::hint::black_box(&touched);
                }),
            };
            match r {
                // A replay that made its passes counts its last
                // requests too.
                Ok(()) if measuring && (start_new || replayed) => finished.push((t0, read)),
                Ok(()) => {}
                Err(e) => {
                    error.get_or_insert_with(|| format!("setcache engine: {e}"));
                }
            }
            if start_new {
                match next_op(&mut ops, &mut hold_until, &mut ended) {
                    Some(op) => {
                        slots[k] = Some((make(file, op, &me, w, touch, &mut spare), now, op.read));
                        live += 1;
                        todo.push_back(k);
                    }
                    None if hold_until.is_some() => held.push(k),
                    None => {}
                }
            }
            completed += 1;
            if completed == 64 {
                break;
            }
        }
        now = Instant::now();
        for (t0, read) in finished.drain(..) {
            stats.record(now.saturating_duration_since(t0), read);
        }
    }
    match error {
        Some(e) => Err(e),
        None => Ok(stats),
    }
}

/// The next request, unless a timed replay holds it until later
/// (`hold_until` set) or has ended (`ended` set; it is not asked again).
fn next_op(ops: &mut OpGen, hold_until: &mut Option<Instant>, ended: &mut bool) -> Option<Op> {
    if hold_until.is_some() || *ended {
        return None;
    }
    ops.next_in_batch(hold_until, ended)
}

/// The future of request `op`: a page reference with `touch`, else a read
/// or write of a spare buffer.
fn make<'f>(
    file: &'f CachedFile,
    op: Op,
    me: &Me,
    w: &Workload,
    touch: Option<usize>,
    spare: &mut Vec<Vec<u8>>,
) -> Fut<'f> {
    let at = me.base + op.offset;
    match (op.read, touch) {
        (true, Some(_)) => Fut::Page(file.page_async(at), (at % 4096) as usize),
        (true, None) => {
            let mut buf = spare.pop().expect("a buffer");
            buf.resize(op.len as usize, 0);
            Fut::Read(file.read_at_async(at, buf))
        }
        (false, _) => {
            let mut buf = spare.pop().expect("a buffer");
            if w.replay.is_some() {
                fill_block(op.offset / w.bs, &mut buf);
            }
            Fut::Write(file.write_at_async(at, buf))
        }
    }
}
