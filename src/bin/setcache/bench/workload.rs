//! What a bench thread does next: read or write, and where.
//!
//! Everything here is pure and seeded, so a run is reproducible and the generators
//! are unit-tested. Offsets are always multiples of `bs` and `offset + bs <= len`.
//!
//! With `--trace` a thread replays its share of a trace instead: the trace's
//! page accesses cut into chunks of [`REPLAY_CHUNK`] or a few more (a chunk
//! ends where a request starts, so a request's pages stay together), chunk `c`
//! replayed by thread `c mod threads`, in trace order within each thread, so
//! that the threads together walk the trace about in its order. At a replay
//! speed, each access waits for its time on the trace's clock (scaled).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::time::{Duration, Instant};

use setcache::hitsim::Trace;

pub(crate) use super::pattern::{Dist, Pattern};
pub(crate) use super::rng::{Rng, mix64};
use super::zipf::Zipf;

/// The hot region of a `--hit-ratio` run: the first `hot_blocks` blocks of the file
/// get fraction `ratio` of the accesses.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct HotSpot {
    pub(crate) ratio: f64,
    pub(crate) hot_blocks: u64,
}

impl HotSpot {
    /// A hot region of `hot_bytes` (whole blocks of `bs`), which must hold at
    /// least one block and leave at least one block cold.
    pub(crate) fn sized(
        ratio: f64,
        hot_bytes: u64,
        bs: u64,
        file_blocks: u64,
    ) -> Result<HotSpot, String> {
        let hot_blocks = hot_bytes / bs;
        if hot_blocks == 0 {
            return Err(format!(
                "--hot-size {hot_bytes} bytes holds no {bs}-byte block"
            ));
        }
        if hot_blocks >= file_blocks {
            return Err(format!(
                "--hot-size {} bytes must be smaller than the file ({} bytes)",
                hot_blocks * bs,
                file_blocks * bs
            ));
        }
        Ok(HotSpot { ratio, hot_blocks })
    }

    /// The hot region for a cache of `cache_bytes`: 3/4 of it, whole blocks of `bs`.
    /// It must hold at least one block and leave at least one block cold.
    pub(crate) fn for_cache(
        ratio: f64,
        cache_bytes: u64,
        bs: u64,
        file_blocks: u64,
    ) -> Result<HotSpot, String> {
        let hot_blocks = cache_bytes / 4 * 3 / bs;
        if hot_blocks == 0 {
            return Err(format!(
                "--cache-size {cache_bytes} bytes is too small for --hit-ratio: 3/4 of it must hold at least one {bs}-byte block"
            ));
        }
        if hot_blocks >= file_blocks {
            return Err(format!(
                "--hit-ratio needs a file larger than the hot region (3/4 of --cache-size = {} bytes); the file has {} bytes: raise --file-size or lower --cache-size",
                hot_blocks * bs,
                file_blocks * bs
            ));
        }
        Ok(HotSpot { ratio, hot_blocks })
    }
}

/// The bytes a replay writes to block `block` (of `buf.len()` bytes): the
/// same whoever writes it and whenever, so that after a run every block the
/// trace wrote can be checked ([`written_blocks`]).
pub(crate) fn fill_block(block: u64, buf: &mut [u8]) {
    let base = mix64(block ^ 0x7265_706c_6179_0000);
    for (j, word) in buf.chunks_mut(8).enumerate() {
        let v = mix64(base ^ j as u64).to_le_bytes();
        word.copy_from_slice(&v[..word.len()]);
    }
}

/// The blocks a replay's trace writes, in block order.
pub(crate) fn written_blocks(r: &Replay) -> Vec<u64> {
    let t = &r.trace;
    let mut mark = vec![false; t.footprint];
    for (i, &p) in t.pages.iter().enumerate() {
        if t.is_write(i) {
            mark[p as usize] = true;
        }
    }
    (0..t.footprint as u64)
        .filter(|&b| mark[b as usize])
        .collect()
}

/// Page accesses a thread replays in order, at most, before the next thread's.
pub(crate) const REPLAY_CHUNK: usize = 64;

/// A trace replayed instead of generated operations.
#[derive(Debug)]
pub(crate) struct Replay {
    /// The trace's spec, as `setcache sim --trace` takes it.
    pub(crate) spec: String,
    /// The trace, its pages numbered densely (page `p` is block `p` of the file).
    pub(crate) trace: Trace,
    /// Times each thread replays its share; 0: until the run ends.
    pub(crate) passes: u32,
    /// Replay at this multiple of the trace's own timing (`None`: as fast
    /// as possible).
    pub(crate) speed: Option<f64>,
    /// Where each chunk starts (then the trace's length).
    chunks: Vec<usize>,
    /// At a replay speed: accesses due this long after a thread's first are
    /// not made (the run's ramp and runtime: the run has ended by then).
    deadline: Option<Duration>,
    /// Threads' cursors made over the replay since the run began
    /// ([`Replay::begin_run`]), and those of them that have taken every
    /// access of their first pass (or were given none): every write of the
    /// trace was made once the two agree.
    cursors: AtomicUsize,
    first_passes: AtomicUsize,
}

impl Replay {
    pub(crate) fn new(spec: String, trace: Trace, passes: u32, speed: Option<f64>) -> Replay {
        let mut chunks = vec![0];
        for i in 1..trace.len() {
            if i - chunks[chunks.len() - 1] >= REPLAY_CHUNK && trace.starts_request(i) {
                chunks.push(i);
            }
        }
        chunks.push(trace.len());
        Replay {
            spec,
            trace,
            passes,
            speed,
            chunks,
            deadline: None,
            cursors: AtomicUsize::new(0),
            first_passes: AtomicUsize::new(0),
        }
    }

    /// A run begins: no cursor has replayed anything yet.
    pub(crate) fn begin_run(&self) {
        self.cursors.store(0, Relaxed);
        self.first_passes.store(0, Relaxed);
    }

    /// Whether every thread of the run has taken every access of its share
    /// of the trace at least once (a run cut short by its runtime, or a
    /// timed replay by its deadline, may not have).
    pub(crate) fn made_a_pass(&self) -> bool {
        let n = self.cursors.load(Relaxed);
        n > 0 && self.first_passes.load(Relaxed) == n
    }

    /// The same replay, whose timed accesses stop `secs` seconds after each
    /// thread's first (a run's ramp and runtime), instead of keeping a
    /// thread asleep past the run's end until the next one is due.
    pub(crate) fn until(mut self, secs: f64) -> Replay {
        self.deadline = Duration::try_from_secs_f64(secs).ok();
        self
    }

    /// Number of chunks.
    fn n_chunks(&self) -> usize {
        self.chunks.len() - 1
    }

    /// The trace's length in microseconds of its clock, and a little: a
    /// looped replay's next pass starts this much later.
    fn span_us(&self) -> u64 {
        // Saturating: a timestamp may be as large as a u64 holds.
        self.trace.times.last().map_or(0, |&t| t.saturating_add(1))
    }
}

/// Everything a thread needs to generate its operations.
#[derive(Clone, Debug)]
pub(crate) struct Workload {
    pub(crate) rw: Pattern,
    /// Percent of reads for `randrw`.
    pub(crate) rwmix_read: u8,
    pub(crate) bs: u64,
    pub(crate) file_len: u64,
    pub(crate) dist: Dist,
    pub(crate) hot: Option<HotSpot>,
    pub(crate) seed: u64,
    /// The trace to replay, if any (then `rw`, `dist` and `hot` are unused).
    pub(crate) replay: Option<Arc<Replay>>,
}

impl Workload {
    /// Number of whole `bs` blocks in the file.
    pub(crate) fn blocks(&self) -> u64 {
        self.file_len / self.bs
    }
}

/// One operation: read or write `len` bytes at `offset` (`len` is `bs`
/// except in a graph walk).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Op {
    pub(crate) read: bool,
    pub(crate) offset: u64,
    pub(crate) len: u64,
}

/// Bytes per node record of a graph walk.
pub(crate) const WALK_RECORD: u64 = 64;
/// The largest read of a graph walk (a node with its long property chain).
pub(crate) const WALK_MAX_READ: u64 = 640;

/// A walk over a graph database's node records (`--rw graphwalk`), shaped
/// like the small reads of a graph query: records of [`WALK_RECORD`] bytes,
/// node `n` at `n * 64`. Three steps in four go to a neighbour stored near
/// the current node (within 48 records, as a graph laid out by locality
/// keeps most edges); the fourth jumps to a node drawn from a Zipf
/// distribution (theta 0.99, ranks scrambled over the file): the hubs many
/// paths go through. A read is 16 to 80 bytes (uniform) of the record, and
/// one in 66 a 640-byte one (the record and those after it): mean about 57
/// bytes, most under 100, a few large, as a graph store's reads are.
struct Walk {
    nodes: u64,
    hubs: Zipf,
    cur: u64,
}

impl Walk {
    fn new(file_len: u64, rng: &mut Rng) -> Walk {
        let nodes = (file_len / WALK_RECORD).max(1);
        Walk {
            nodes,
            hubs: Zipf::new(nodes, 0.99),
            cur: rng.below(nodes),
        }
    }

    fn step(&mut self, rng: &mut Rng, file_len: u64) -> Op {
        self.cur = if rng.below(4) < 3 {
            let d = rng.below(97) as i64 - 48;
            (self.cur as i64 + d).rem_euclid(self.nodes as i64) as u64
        } else {
            mix64(self.hubs.sample(rng) ^ 0x9e37_79b9_7f4a_7c15) % self.nodes
        };
        let len = if rng.below(66) == 0 {
            WALK_MAX_READ
        } else {
            16 + rng.below(65)
        };
        let offset = (self.cur * WALK_RECORD).min(file_len.saturating_sub(len));
        Op {
            read: true,
            offset,
            len: len.min(file_len),
        }
    }
}

/// Where a thread is in its share of a trace.
struct Cursor {
    r: Arc<Replay>,
    /// The thread's first chunk, and the distance to its next.
    first: usize,
    stride: usize,
    chunk: usize,
    /// The next access.
    i: usize,
    pass: u32,
    /// When the thread's replay started (at a replay speed).
    start: Option<Instant>,
    /// An access taken from the trace that is not due yet, and when it is.
    held: Option<(Op, Instant)>,
    /// At a replay speed, once the next access falls after the run's end:
    /// that end, until which the thread idles instead of ending at once (the
    /// run's time is its runtime, not the moment the accesses inside it ran
    /// out, so that its rate is not that of a shorter run).
    idle_until: Option<Instant>,
}

/// What a thread does next ([`OpGen::next_due`]).
pub(crate) enum Next {
    Op(Op),
    /// A timed replay's next access is due then, not yet.
    Later(Instant),
    /// The replay has made its passes.
    End,
}

impl Cursor {
    fn new(r: &Arc<Replay>, thread: usize, threads: usize) -> Cursor {
        r.cursors.fetch_add(1, Relaxed);
        if thread >= r.n_chunks() {
            // No share of the trace: nothing to replay.
            r.first_passes.fetch_add(1, Relaxed);
        }
        Cursor {
            r: Arc::clone(r),
            first: thread,
            stride: threads.max(1),
            chunk: thread,
            i: r.chunks.get(thread).copied().unwrap_or(0),
            pass: 0,
            start: None,
            held: None,
            idle_until: None,
        }
    }

    /// The next access, at once if it is due, else (`wait`) after sleeping
    /// until it is.
    fn next(&mut self, bs: u64, wait: bool) -> Next {
        if self.idle_until.is_some() {
            return self.idle(wait);
        }
        let (op, due) = match self.held.take() {
            Some(h) => h,
            None => match self.take(bs) {
                Some(h) => h,
                None => return self.idle(wait),
            },
        };
        let now = Instant::now();
        if due > now {
            if !wait {
                self.held = Some((op, due));
                return Next::Later(due);
            }
            std::thread::sleep(due - now);
        }
        Next::Op(op)
    }

    /// The replay has nothing more to make: the run's end, once it has come
    /// (at once, without `wait`, when it has not: `Later` it).
    fn idle(&mut self, wait: bool) -> Next {
        if let Some(until) = self.idle_until {
            let now = Instant::now();
            if until > now {
                if !wait {
                    return Next::Later(until);
                }
                std::thread::sleep(until - now);
            }
        }
        Next::End
    }

    /// The next access from the trace and when it is due (now for an
    /// untimed replay); `None` when the passes are made, or when the next
    /// access falls after the run's end (`idle_until` then set).
    fn take(&mut self, bs: u64) -> Option<(Op, Instant)> {
        let r = &*self.r;
        if self.first >= r.n_chunks() {
            // More threads than chunks: this one has none.
            return None;
        }
        if self.i >= r.chunks[self.chunk + 1] {
            self.chunk += self.stride;
            if self.chunk >= r.n_chunks() {
                self.pass += 1;
                if self.pass == 1 {
                    r.first_passes.fetch_add(1, Relaxed);
                }
                if r.passes > 0 && self.pass >= r.passes {
                    return None;
                }
                self.chunk = self.first;
            }
            self.i = r.chunks[self.chunk];
        }
        let i = self.i;
        self.i += 1;
        let mut due = None;
        if let (Some(speed), Some(&t)) = (r.speed, r.trace.times.get(i)) {
            let start = *self.start.get_or_insert_with(Instant::now);
            let at_us =
                t.saturating_add(u64::from(self.pass).saturating_mul(r.span_us())) as f64 / speed;
            // Due past what a Duration holds, or after the run has ended:
            // never, so the replay ends, at the run's end.
            let after = Duration::try_from_secs_f64(at_us / 1e6)
                .ok()
                .filter(|a| r.deadline.is_none_or(|d| *a <= d))
                .and_then(|a| start.checked_add(a));
            if after.is_none() {
                self.idle_until = r.deadline.and_then(|d| start.checked_add(d));
            }
            due = Some(after?);
        }
        let op = Op {
            read: !r.trace.is_write(i),
            offset: u64::from(r.trace.pages[i]) * bs,
            len: bs,
        };
        Some((op, due.unwrap_or_else(Instant::now)))
    }
}

/// The operation stream of one thread.
pub(crate) struct OpGen {
    w: Workload,
    replay: Option<Cursor>,
    walk: Option<Walk>,
    rng: Rng,
    zipf: Option<Zipf>,
    /// Sequential runs: this thread's block range and cursor.
    seq_start: u64,
    seq_len: u64,
    seq_pos: u64,
}

impl OpGen {
    pub(crate) fn new(w: &Workload, thread: usize, threads: usize) -> OpGen {
        let blocks = w.blocks().max(1);
        let t = thread as u64;
        let n = threads.max(1) as u64;
        let seq_start = blocks * t / n;
        let seq_end = (blocks * (t + 1) / n).max(seq_start + 1);
        let zipf = match (w.dist, w.hot) {
            (Dist::Zipf(theta), None) => Some(Zipf::new(blocks, theta)),
            _ => None,
        };
        let replay = w.replay.as_ref().map(|r| Cursor::new(r, thread, threads));
        let mut rng = Rng::new(w.seed ^ mix64(t.wrapping_add(0x7e57)));
        let walk = (w.rw == Pattern::GraphWalk).then(|| Walk::new(w.file_len, &mut rng));
        OpGen {
            replay,
            walk,
            rng,
            w: w.clone(),
            zipf,
            seq_start,
            seq_len: seq_end - seq_start,
            seq_pos: 0,
        }
    }

    /// The next operation; `None` when a replay has made its passes. A
    /// timed replay sleeps until it is due: for engines that make one
    /// request at a time and time it from here.
    #[inline]
    pub(crate) fn next_op(&mut self) -> Option<Op> {
        match &mut self.replay {
            Some(c) => match c.next(self.w.bs, true) {
                Next::Op(op) => Some(op),
                _ => None,
            },
            None => Some(self.generate()),
        }
    }

    /// The next operation if it is due. For engines that gather a batch
    /// before they submit it, or keep requests in flight: they submit what
    /// they have and wait for completions until the time given
    /// ([`wait_until`]), so that no request's latency counts a wait for a
    /// later one's time.
    #[inline]
    pub(crate) fn next_due(&mut self) -> Next {
        match &mut self.replay {
            Some(c) => c.next(self.w.bs, false),
            None => Next::Op(self.generate()),
        }
    }

    /// [`OpGen::next_due`] for a loop gathering a batch: the operation if
    /// one is due; else `None`, with `later` set to when the next one is due,
    /// or `ended` set when the replay has made its passes.
    #[inline]
    pub(crate) fn next_in_batch(
        &mut self,
        later: &mut Option<Instant>,
        ended: &mut bool,
    ) -> Option<Op> {
        match self.next_due() {
            Next::Op(op) => Some(op),
            Next::Later(at) => {
                *later = Some(at);
                None
            }
            Next::End => {
                *ended = true;
                None
            }
        }
    }

    #[inline]
    fn generate(&mut self) -> Op {
        if let Some(walk) = &mut self.walk {
            return walk.step(&mut self.rng, self.w.file_len);
        }
        let read = match self.w.rw {
            Pattern::RandRead | Pattern::Read | Pattern::GraphWalk => true,
            Pattern::RandWrite | Pattern::Write => false,
            Pattern::RandRw => self.rng.below(100) < self.w.rwmix_read as u64,
        };
        let block = if self.w.rw.is_random() {
            self.random_block()
        } else {
            let b = self.seq_start + self.seq_pos;
            self.seq_pos = (self.seq_pos + 1) % self.seq_len;
            b
        };
        Op {
            read,
            offset: block * self.w.bs,
            len: self.w.bs,
        }
    }

    fn random_block(&mut self) -> u64 {
        let blocks = self.w.blocks().max(1);
        if let Some(hot) = self.w.hot {
            return if self.rng.unit() < hot.ratio {
                self.rng.below(hot.hot_blocks)
            } else {
                hot.hot_blocks + self.rng.below(blocks - hot.hot_blocks)
            };
        }
        match &self.zipf {
            // Scramble the rank so the hottest blocks are spread over the file.
            Some(z) => mix64(z.sample(&mut self.rng) ^ 0x005e_ed2a_110f_f5e7) % blocks,
            None => self.rng.below(blocks),
        }
    }
}

/// Wait until `due`, or until `done` (a look at the engine's completions
/// that does not block) finds some, sleeping in spells of 20 us between
/// looks: a completion is seen up to a spell late (the thread's timer slack
/// is set to 1 us, from the kernel's 50, so that a spell is not stretched).
pub(crate) fn wait_until(due: Instant, mut done: impl FnMut() -> bool) {
    thread_local! {
        static SLACK_SET: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }
    if !SLACK_SET.get() {
        SLACK_SET.set(true);
        // SAFETY: PR_SET_TIMERSLACK takes a plain integer and changes only this thread's timer slack.
        unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1000 as libc::c_ulong, 0, 0, 0) };
    }
    loop {
        if done() {
            return;
        }
        let now = Instant::now();
        if now >= due {
            return;
        }
        std::thread::sleep((due - now).min(Duration::from_micros(20)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wl(rw: Pattern, dist: Dist, hot: Option<HotSpot>) -> Workload {
        Workload {
            rw,
            rwmix_read: 70,
            bs: 4096,
            file_len: 1000 * 4096 + 100,
            dist,
            hot,
            seed: 42,
            replay: None,
        }
    }

    fn replayed(pages: &[u64], writes: &[usize], passes: u32) -> Workload {
        let mut b = setcache::hitsim::trace::Builder::new("test".to_string());
        for (i, &p) in pages.iter().enumerate() {
            b.push(p, writes.contains(&i)).unwrap();
        }
        let mut w = wl(Pattern::RandRead, Dist::Uniform, None);
        w.replay = Some(Arc::new(Replay::new(
            "text:test".to_string(),
            b.finish("test").unwrap(),
            passes,
            None,
        )));
        w
    }

    #[test]
    fn threads_replay_the_trace_once_per_pass_in_order_within_each() {
        // Distinct pages, so an access's page id is its index in the trace.
        let pages: Vec<u64> = (0..1000u64).map(|i| i * 7 + 3).collect();
        let writes = [3, 64, 65, 999];
        for threads in [1, 2, 3, 7, 16] {
            let w = replayed(&pages, &writes, 2);
            let mut seen = vec![0u32; pages.len()];
            for t in 0..threads {
                let mut g = OpGen::new(&w, t, threads);
                let mut order = Vec::new();
                while let Some(op) = g.next_op() {
                    let i = (op.offset / 4096) as usize;
                    assert_eq!(op.read, !writes.contains(&i), "access {i}");
                    seen[i] += 1;
                    order.push(i);
                }
                // Two passes over the same accesses, each in trace order.
                let (a, b) = order.split_at(order.len() / 2);
                assert_eq!(a, b, "{threads} threads, thread {t}");
                assert!(
                    a.windows(2).all(|p| p[0] < p[1]),
                    "{threads} threads, thread {t}"
                );
            }
            assert!(
                seen.iter().all(|&n| n == 2),
                "{threads} threads: every access twice"
            );
        }
    }

    #[test]
    fn a_requests_pages_stay_together_on_one_thread() {
        // Requests of 50 pages (distinct pages, so a page id is its index):
        // chunks end where a request starts, after 64 accesses or more.
        let mut b = setcache::hitsim::trace::Builder::new("blocks".to_string());
        for r in 0..20u64 {
            b.begin_request(Some(r * 1000));
            for p in 0..50 {
                b.push(r * 50 + p, r % 3 == 0).unwrap();
            }
        }
        let trace = b.finish("blocks").unwrap();
        assert_eq!(trace.times[..3], [0, 0, 0]);
        assert_eq!(trace.times[50], 1000);
        let mut w = wl(Pattern::RandRead, Dist::Uniform, None);
        w.replay = Some(Arc::new(Replay::new("blocks".to_string(), trace, 1, None)));
        for threads in [1, 3, 4] {
            let mut seen = 0;
            for t in 0..threads {
                let mut g = OpGen::new(&w, t, threads);
                let pages: Vec<u64> = std::iter::from_fn(|| g.next_op())
                    .map(|op| op.offset / 4096)
                    .collect();
                seen += pages.len();
                // Whole requests, each in order, two per chunk.
                assert_eq!(pages.len() % 100, 0, "{threads} threads, thread {t}");
                for req in pages.chunks(50) {
                    assert_eq!(req[0] % 50, 0);
                    assert!(req.windows(2).all(|p| p[1] == p[0] + 1));
                }
            }
            assert_eq!(seen, 1000);
        }
    }

    #[test]
    fn a_replay_without_passes_loops_and_chunks_alternate() {
        let pages: Vec<u64> = (0..200).collect();
        let w = replayed(&pages, &[], 0);
        let mut g = OpGen::new(&w, 1, 2);
        let got: Vec<u64> = (0..250)
            .map(|_| g.next_op().unwrap().offset / 4096)
            .collect();
        // Thread 1 of 2 with chunks of 64: 64..128, then 192..200, then again.
        let want: Vec<u64> = (64..128).chain(192..200).cycle().take(250).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn offsets_stay_aligned_and_in_range() {
        for rw in [
            Pattern::RandRead,
            Pattern::RandWrite,
            Pattern::RandRw,
            Pattern::Read,
            Pattern::Write,
        ] {
            for dist in [Dist::Uniform, Dist::Zipf(0.99), Dist::Zipf(1.5)] {
                let w = wl(rw, dist, None);
                for t in 0..3 {
                    let mut g = OpGen::new(&w, t, 3);
                    for _ in 0..20_000 {
                        let op = g.next_op().unwrap();
                        assert_eq!(op.offset % w.bs, 0);
                        assert!(op.offset + w.bs <= w.file_len, "{rw} {dist} {op:?}");
                        assert!(rw.reads() || !op.read, "{rw} read");
                        assert!(rw.writes() || op.read, "{rw} wrote");
                    }
                }
            }
        }
    }

    #[test]
    fn sequential_threads_walk_disjoint_regions() {
        let w = wl(Pattern::Read, Dist::Uniform, None);
        let mut seen = std::collections::HashSet::new();
        for t in 0..4 {
            let mut g = OpGen::new(&w, t, 4);
            let first = g.next_op().unwrap().offset;
            assert_eq!(first, 250 * 4096 * t as u64);
            for i in 1..250u64 {
                assert_eq!(g.next_op().unwrap().offset, first + i * 4096);
            }
            assert_eq!(
                g.next_op().unwrap().offset,
                first,
                "wraps to its region start"
            );
            assert!(seen.insert(first));
        }
    }

    #[test]
    fn a_graph_walk_reads_small_records_near_each_other_and_sometimes_far() {
        let w = wl(Pattern::GraphWalk, Dist::Uniform, None);
        let mut g = OpGen::new(&w, 0, 1);
        let n = 200_000;
        let (mut bytes, mut small, mut large, mut near) = (0u64, 0, 0, 0);
        let mut last = g.next_op().unwrap();
        for _ in 0..n {
            let op = g.next_op().unwrap();
            assert!(
                op.read && op.len >= 16 && op.offset + op.len <= w.file_len,
                "{op:?}"
            );
            bytes += op.len;
            small += usize::from(op.len < 100);
            large += usize::from(op.len == WALK_MAX_READ);
            near += usize::from(op.offset.abs_diff(last.offset) <= 48 * WALK_RECORD);
            last = op;
        }
        let mean = bytes as f64 / n as f64;
        assert!((54.0..60.0).contains(&mean), "mean read {mean}");
        assert!(
            small > n * 97 / 100 && large > n / 100,
            "{small} small, {large} large"
        );
        // Three steps in four stay near (a jump may land near too).
        assert!((n * 73 / 100..n * 80 / 100).contains(&near), "{near} near");
    }

    #[test]
    fn rwmix_is_respected() {
        let mut g = OpGen::new(&wl(Pattern::RandRw, Dist::Uniform, None), 0, 1);
        let reads = (0..100_000).filter(|_| g.next_op().unwrap().read).count();
        assert!((69_000..71_000).contains(&reads), "{reads}");
    }

    #[test]
    fn hot_region_gets_its_share() {
        let hot = HotSpot::for_cache(0.9, 400 * 4096, 4096, 1000).unwrap();
        assert_eq!(hot.hot_blocks, 300);
        let mut g = OpGen::new(&wl(Pattern::RandRead, Dist::Uniform, Some(hot)), 1, 2);
        let n = 100_000;
        let in_hot = (0..n)
            .filter(|_| g.next_op().unwrap().offset < hot.hot_blocks * 4096)
            .count();
        let share = in_hot as f64 / n as f64;
        assert!((share - 0.9).abs() < 0.01, "{share}");
    }

    #[test]
    fn hot_region_math_refuses_impossible_setups() {
        // 3/4 of 4 MiB is 3 MiB = 768 blocks of 4k.
        assert_eq!(
            HotSpot::for_cache(0.5, 4 << 20, 4096, 10_000)
                .unwrap()
                .hot_blocks,
            768
        );
        // 3/4 of 12k with bs 8k: one block.
        assert_eq!(
            HotSpot::for_cache(0.5, 12288, 8192, 10).unwrap().hot_blocks,
            1
        );
        assert!(HotSpot::for_cache(0.5, 4096, 4096, 10).is_err());
        assert!(HotSpot::for_cache(0.5, 1 << 30, 4096, 1000).is_err());
    }
}
