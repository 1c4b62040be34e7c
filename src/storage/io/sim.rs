//! The simulated engine: in-memory devices with seeded latency and fault injection.
//!
//! Data lives in a [`SimMedia`] keyed by (device, file identity), which outlives a
//! store when the test keeps it: reopening a store on the same media emulates a
//! restart. Every operation completes after a latency drawn from a seeded generator,
//! so completions reorder as on real devices, and may instead fail: EIO on a read or
//! write, a short read, ENOSPC, or every write after a countdown. A test can also
//! switch faults on and off while the store runs ([`SimSwitches`]): read and write
//! errors, short reads, failed fsyncs, a latency spike, devices that disappear; and
//! it can cut the power ([`SimMedia::cut_power`]), which drops or tears every write
//! that no fsync covered yet. The same seed and the same submissions give the same
//! outcomes.

use crate::util::origin::Origin;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::mailbox::Mailbox;
use super::{DevOp, DevOpKind, DeviceEngine, EngineParams, OpResult};
use crate::error::{Error, Result};
use crate::storage::header::HEADER_BYTES;

/// A file on a simulated device: (device index, file identity).
type Key = (usize, u64);

/// The contents of simulated devices.
#[derive(Debug, Default)]
pub struct SimMedia {
    state: Mutex<MediaState>,
}

#[derive(Debug, Default)]
struct MediaState {
    /// What a read sees: every completed write.
    files: HashMap<Key, Vec<u8>>,
    /// Each tracked file's contents at its last good fsync (see
    /// [`SimSwitches::keep_synced`]).
    synced: HashMap<Key, Vec<u8>>,
    /// Each tracked file's writes since its last good fsync, in completion
    /// order: (byte offset past the header, bytes).
    unflushed: HashMap<Key, Vec<(usize, Vec<u8>)>>,
    /// The power is off: every operation fails.
    off: bool,
}

/// What [`SimMedia::cut_power`] did to the writes no fsync covered.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PowerCut {
    /// Writes that reached the medium whole.
    pub kept: u64,
    /// Writes that left no trace.
    pub dropped: u64,
    /// Writes of which only some 512-byte sectors reached the medium.
    pub torn: u64,
}

/// Faults a test turns on and off while a store runs on the simulated engine.
#[derive(Debug, Default)]
pub struct SimSwitches {
    /// While nonzero, every read fails with this error number.
    pub read_errno: AtomicI32,
    /// While on, every read transfers only half its bytes (rounded down to 512).
    pub short_reads: AtomicBool,
    /// While nonzero, every write fails with this error number (say ENOSPC,
    /// then 0 once space is back).
    pub write_errno: AtomicI32,
    /// The next this many writes transfer only their first half (rounded
    /// down to 512 bytes), as a file system that runs out of room part way.
    pub short_writes: AtomicU32,
    /// The next this many fsyncs fail with `fsync_errno`. A failed fsync
    /// also drops every write to that file since its last good fsync, as a
    /// kernel that lets go of the pages it could not write does (with
    /// `keep_synced` on; otherwise the writes stay).
    pub fsync_failures: AtomicU32,
    /// The error number of a failed fsync (0 means EIO).
    pub fsync_errno: AtomicI32,
    /// Track what is durable: each file's contents at its last good fsync
    /// and its writes since. A file's contents when it is first written with
    /// this on count as durable. Needed for failed fsyncs to drop writes and
    /// for [`SimMedia::cut_power`].
    pub keep_synced: AtomicBool,
    /// While nonzero, every operation a device takes in completes this many
    /// microseconds later than it would (a latency spike).
    pub stall_us: AtomicU64,
    /// Devices that disappeared, one bit each (device 0 is bit 0): every
    /// operation on them fails with ENODEV.
    pub gone_devices: AtomicU64,
    /// Operations the devices have taken in so far (each counted as it is
    /// scheduled, with the latency and stall it will have): a test waits on
    /// it to know an operation reached a device.
    pub taken: AtomicU64,
}

fn lock(m: &Mutex<MediaState>) -> MutexGuard<'_, MediaState> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl SimMedia {
    /// Empty media.
    pub fn new() -> Arc<SimMedia> {
        Arc::new(SimMedia::default())
    }

    /// Cut the power: from now on every operation fails with EIO (the
    /// process is as good as dead), and each write that no good fsync of its
    /// file covered yet is, at random from `seed`, kept whole, dropped, or
    /// torn (each of its 512-byte sectors kept or not). Writes are applied
    /// in the order they completed, over the file's contents at its last
    /// good fsync. Only files written while [`SimSwitches::keep_synced`] was
    /// on are tracked; others keep what they hold. [`SimMedia::power_on`]
    /// lets a new store use the media again.
    pub fn cut_power(&self, seed: u64) -> PowerCut {
        let mut st = lock(&self.state);
        st.off = true;
        let mut rng = seed;
        let mut cut = PowerCut::default();
        let mut keys: Vec<Key> = st.unflushed.keys().copied().collect();
        // The same seed gives the same outcome whatever the map's order.
        keys.sort_unstable();
        for key in keys {
            let writes = st.unflushed.remove(&key).unwrap_or_default();
            let mut image = st.synced.get(&key).cloned().unwrap_or_default();
            for (start, bytes) in writes {
                match next_rand(&mut rng) % 3 {
                    0 => {
                        cut.kept += 1;
                        put(&mut image, start, &bytes);
                    }
                    1 => cut.dropped += 1,
                    _ => {
                        cut.torn += 1;
                        for (i, sector) in bytes.chunks(512).enumerate() {
                            if next_rand(&mut rng) & 1 == 1 {
                                put(&mut image, start + i * 512, sector);
                            }
                        }
                    }
                }
            }
            st.synced.insert(key, image.clone());
            st.files.insert(key, image);
        }
        cut
    }

    /// Power is back: operations work again (on what the cut left).
    pub fn power_on(&self) {
        lock(&self.state).off = false;
    }
}

/// Write `bytes` at `start` of `image`, growing it with zeros as needed.
fn put(image: &mut Vec<u8>, start: usize, bytes: &[u8]) {
    if image.len() < start + bytes.len() {
        image.resize(start + bytes.len(), 0);
    }
    image[start..start + bytes.len()].copy_from_slice(bytes);
}
/// Settings of the simulated engine. Rates are probabilities per operation.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// Seed of the latency and fault generator (mixed with the device index).
    pub seed: u64,
    /// Latency of each operation, drawn uniformly from this range, in microseconds.
    pub latency_us: (u64, u64),
    /// Probability that a read fails with EIO.
    pub read_eio: f64,
    /// Probability that a write fails with EIO.
    pub write_eio: f64,
    /// Probability that a read transfers only part of its bytes.
    pub short_read: f64,
    /// Probability that a write fails with ENOSPC.
    pub enospc: f64,
    /// After this many successful writes on a device, every later write fails with EIO.
    pub fail_writes_after: Option<u64>,
    /// The media; share it between stores to emulate a restart.
    pub media: Arc<SimMedia>,
    /// Faults switched on and off while the store runs.
    pub switches: Arc<SimSwitches>,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            seed: 1,
            latency_us: (5, 50),
            read_eio: 0.0,
            write_eio: 0.0,
            short_read: 0.0,
            enospc: 0.0,
            fail_writes_after: None,
            media: SimMedia::new(),
            switches: Arc::default(),
        }
    }
}

pub(crate) struct SimEngine {
    device: usize,
    media: Arc<SimMedia>,
    mailbox: Arc<Mailbox>,
    thread: Mutex<Option<JoinHandle<()>>>,
    /// The process that started it: in a child made by `fork` the threads
    /// are the parent's, neither stopped nor joined there.
    origin: Origin,
}

/// splitmix64 step: a small, well-mixed, seedable generator.
fn next_rand(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    crate::storage::layout::mix64(*state)
}

fn unit(state: &mut u64) -> f64 {
    (next_rand(state) >> 11) as f64 / (1u64 << 53) as f64
}

impl SimEngine {
    pub(crate) fn start(p: &EngineParams, cfg: &SimConfig) -> Result<Arc<dyn DeviceEngine>> {
        let depth = p.io_depth.max(1) as usize;
        let mailbox = Arc::new(Mailbox::new(depth * 4, None));
        let mb = mailbox.clone();
        let media = cfg.media.clone();
        let cfg = cfg.clone();
        let dev = p.device;
        let h = crate::util::fork_locks::spawn(
            std::thread::Builder::new().name(format!("setcache-sim-{dev}")),
            move || run(dev, depth, &mb, &cfg),
        )
        .map_err(|e| Error::os_call(format!("cannot start the sim thread of device {dev}"), e))?;
        Ok(Arc::new(SimEngine {
            device: dev,
            media,
            mailbox,
            thread: Mutex::new(Some(h)),
            origin: Origin::here(),
        }))
    }
}

fn run(dev: usize, depth: usize, mb: &Mailbox, cfg: &SimConfig) {
    let mut rng = cfg.seed ^ crate::storage::layout::mix64(dev as u64 + 1);
    let mut writes_left = cfg.fail_writes_after;
    // Operations in flight, ordered by due time, then arrival.
    let mut heap: BinaryHeap<Reverse<(Instant, u64, usize)>> = BinaryHeap::new();
    let mut slab: Vec<Option<DevOp>> = Vec::new();
    let mut free: Vec<usize> = Vec::new();
    let mut seq = 0u64;
    let mut ctrl = Vec::new();
    let mut incoming = VecDeque::new();
    let (lo, hi) = (cfg.latency_us.0, cfg.latency_us.1.max(cfg.latency_us.0));
    loop {
        let timeout = heap
            .peek()
            .map(|Reverse((due, _, _))| due.saturating_duration_since(Instant::now()));
        let room = depth.saturating_sub(heap.len());
        let closed = if timeout == Some(Duration::ZERO) || room == 0 {
            mb.take(room, &mut ctrl, &mut incoming)
        } else {
            mb.take_wait(room, timeout, &mut ctrl, &mut incoming)
        };
        ctrl.clear();
        for op in incoming.drain(..) {
            let stall = cfg.switches.stall_us.load(Ordering::Acquire);
            let lat = lo + next_rand(&mut rng) % (hi - lo + 1) + stall;
            cfg.switches.taken.fetch_add(1, Ordering::AcqRel);
            let idx = free.pop().unwrap_or_else(|| {
                slab.push(None);
                slab.len() - 1
            });
            slab[idx] = Some(op);
            seq += 1;
            heap.push(Reverse((
                Instant::now() + Duration::from_micros(lat),
                seq,
                idx,
            )));
        }
        let now = Instant::now();
        while let Some(&Reverse((due, _, idx))) = heap.peek() {
            if due > now {
                break;
            }
            heap.pop();
            let op = slab[idx].take().expect("scheduled operation");
            free.push(idx);
            let r = execute(dev, &op, cfg, &mut rng, &mut writes_left);
            op.finish(r);
        }
        if closed && heap.is_empty() {
            break;
        }
    }
}

fn execute(
    dev: usize,
    op: &DevOp,
    cfg: &SimConfig,
    rng: &mut u64,
    writes_left: &mut Option<u64>,
) -> OpResult {
    let draw = unit(rng);
    let sw = &cfg.switches;
    let key = (dev, op.backing.ino);
    let mut st = lock(&cfg.media.state);
    if st.off {
        return OpResult::Errno(libc::EIO);
    }
    if dev < 64 && sw.gone_devices.load(Ordering::Acquire) & (1 << dev) != 0 {
        return OpResult::Errno(libc::ENODEV);
    }
    let tracking = sw.keep_synced.load(Ordering::Acquire);
    match op.kind {
        DevOpKind::Fsync => {
            let failing = sw
                .fsync_failures
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
                .is_ok();
            if failing {
                st.unflushed.remove(&key);
                if let Some(back) = st.synced.get(&key).filter(|_| tracking).cloned() {
                    st.files.insert(key, back);
                }
                return OpResult::Errno(match sw.fsync_errno.load(Ordering::Acquire) {
                    0 => libc::EIO,
                    e => e,
                });
            }
            st.unflushed.remove(&key);
            if tracking {
                let now = st.files.get(&key).cloned().unwrap_or_default();
                st.synced.insert(key, now);
            }
            OpResult::Done(0)
        }
        DevOpKind::Read => {
            if draw < cfg.read_eio {
                return OpResult::Errno(libc::EIO);
            }
            let switched = sw.read_errno.load(Ordering::Acquire);
            if switched != 0 {
                return OpResult::Errno(switched);
            }
            let mut n = op.len;
            if draw < cfg.read_eio + cfg.short_read || sw.short_reads.load(Ordering::Acquire) {
                n = (op.len / 2) & !511;
            }
            copy_out(
                op,
                st.files.get(&key).map(|v| v.as_slice()).unwrap_or(&[]),
                n,
            );
            OpResult::Done(n)
        }
        DevOpKind::Write => {
            if let Some(left) = writes_left {
                if *left == 0 {
                    return OpResult::Errno(libc::EIO);
                }
                *left -= 1;
            }
            if draw < cfg.write_eio {
                return OpResult::Errno(libc::EIO);
            }
            let switched = sw.write_errno.load(Ordering::Acquire);
            if switched != 0 {
                return OpResult::Errno(switched);
            }
            if draw < cfg.write_eio + cfg.enospc {
                return OpResult::Errno(libc::ENOSPC);
            }
            let short = sw
                .short_writes
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
                .is_ok();
            let len = if short { (op.len / 2) & !511 } else { op.len };
            let st = &mut *st;
            if tracking && !st.synced.contains_key(&key) {
                let before = st.files.get(&key).cloned().unwrap_or_default();
                st.synced.insert(key, before);
            }
            let data = st.files.entry(key).or_default();
            let start = (op.offset - HEADER_BYTES) as usize;
            copy_in(op, start, len, data);
            if tracking {
                let bytes = data[start..start + len].to_vec();
                st.unflushed.entry(key).or_default().push((start, bytes));
            }
            OpResult::Done(len)
        }
    }
}

/// Copy `n` bytes of the device image (zero past its end) into the operation's memory.
fn copy_out(op: &DevOp, data: &[u8], n: usize) {
    let mut pos = (op.offset - HEADER_BYTES) as usize;
    let mut left = n;
    for v in op.iov.iter() {
        let take = v.iov_len.min(left);
        let avail = data.len().saturating_sub(pos).min(take);
        // SAFETY: the iovec points at `iov_len >= take` writable bytes that the request owner keeps alive and untouched until completion.
        let dst = unsafe { std::slice::from_raw_parts_mut(v.iov_base.cast::<u8>(), take) };
        if avail > 0 {
            dst[..avail].copy_from_slice(&data[pos..pos + avail]);
        }
        dst[avail..].fill(0);
        pos += take;
        left -= take;
    }
}

/// Copy the first `n` bytes of the operation's memory into the device image at `start`.
fn copy_in(op: &DevOp, start: usize, n: usize, data: &mut Vec<u8>) {
    if data.len() < start + n {
        data.resize(start + n, 0);
    }
    let mut pos = start;
    for v in op.iov.iter() {
        let take = v.iov_len.min(start + n - pos);
        // SAFETY: the iovec points at `iov_len >= take` readable bytes kept alive until completion.
        let src = unsafe { std::slice::from_raw_parts(v.iov_base.cast::<u8>(), take) };
        data[pos..pos + take].copy_from_slice(src);
        pos += take;
    }
}

impl DeviceEngine for SimEngine {
    fn submit(&self, ops: Vec<DevOp>) {
        self.mailbox.push(ops);
    }
    /// Cuts the file at `from` at once, durable or not (the cut is not
    /// subject to a power cut).
    fn discard(&self, ino: u64, from: u64) {
        let key = (self.device, ino);
        let mut st = lock(&self.media.state);
        let st = &mut *st;
        for image in [st.files.get_mut(&key), st.synced.get_mut(&key)]
            .into_iter()
            .flatten()
        {
            image.truncate(from.min(image.len() as u64) as usize);
        }
        if let Some(writes) = st.unflushed.get_mut(&key) {
            let from = usize::try_from(from).unwrap_or(usize::MAX);
            writes.retain_mut(|(start, bytes)| {
                bytes.truncate(from.saturating_sub(*start).min(bytes.len()));
                !bytes.is_empty()
            });
        }
    }
    fn shutdown(&self) {
        if !self.origin.is_here() {
            // A child made by `fork` (the drop keeps the thread's handle).
            return;
        }
        self.mailbox.close();
        let h = self.thread.lock().ok().and_then(|mut g| g.take());
        if let Some(h) = h {
            let _ = h.join();
        }
    }
}

impl Drop for SimEngine {
    fn drop(&mut self) {
        if !self.origin.is_here() {
            // A child made by `fork`: the thread's handle is not let go of
            // (a detach of a thread the child does not have).
            let h = self.thread.get_mut().map(Option::take);
            std::mem::forget(h.unwrap_or_else(|p| p.into_inner().take()));
            return;
        }
        self.shutdown();
    }
}
