//! The fault matrix: one test per fault the simulated media can produce, each
//! asserting what the store's own calls, cached files, the cached queue and
//! `sync` report while the fault lasts, and what a reopened store shows once
//! it is gone. The expected outcomes are the table in docs/reliability.md.
//!
//! Every row uses 2 devices striped in 4 KiB blocks: page `p` of a file lives
//! on device `p % 2`. Each phase opens its own store on the same media (a
//! failed device stays failed only within one store).

mod common;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Rng, TempDir, pattern, small_cache};
use setcache::{
    AlignedBuf, CachedFile, CachedQueue, CachedRequest, CachedStore, EngineKind, Error,
    FlushOptions, LayoutKind, OpKind, SimConfig, SimMedia, SimSwitches, Store, StoreOptions,
};

const PAGE: usize = 4096;
/// Pages of the cached file `f` and of the uncached file `raw`.
const PAGES: usize = 64;

struct Rig {
    _tmp: TempDir,
    roots: Vec<PathBuf>,
    media: Arc<SimMedia>,
    sw: Arc<SimSwitches>,
    /// What `f` and `raw` hold after the setup's sync.
    data: Vec<u8>,
}

impl Rig {
    /// Two devices with `f` and `raw` written and synced (no fault yet).
    fn new(tag: &str) -> Rig {
        let tmp = TempDir::new(tag);
        let roots = tmp.devices(2);
        let rig = Rig {
            _tmp: tmp,
            roots,
            media: SimMedia::new(),
            sw: Arc::new(SimSwitches::default()),
            data: pattern(tag.len() as u64, 0, PAGES * PAGE),
        };
        rig.sw.keep_synced.store(true, Ordering::Release);
        let store = rig.store();
        let raw = store
            .create("raw", (PAGES * PAGE) as u64, LayoutKind::Stripe)
            .unwrap();
        raw.write_at(0, &aligned(&rig.data)).unwrap();
        raw.sync().unwrap();
        let cs = CachedStore::with_flusher(store, small_cache(256), None).unwrap();
        let f = cs
            .create("f", (PAGES * PAGE) as u64, LayoutKind::Stripe)
            .unwrap();
        f.write_at(0, &rig.data).unwrap();
        f.sync().unwrap();
        rig
    }

    fn store(&self) -> Store {
        Store::open(
            &self.roots,
            StoreOptions {
                engine: EngineKind::Sim(SimConfig {
                    media: self.media.clone(),
                    switches: self.sw.clone(),
                    latency_us: (1, 20),
                    ..SimConfig::default()
                }),
                block_pages: 1,
                ..StoreOptions::default()
            },
        )
        .unwrap()
    }

    /// A cached store of `pages` pages (cold) without a flusher.
    fn cached(&self, pages: usize) -> CachedStore {
        let cs = CachedStore::with_flusher(self.store(), small_cache(pages), None).unwrap();
        // Each row knows which pages it cached: nothing is read ahead (the
        // readahead row turns it back on).
        cs.set_readahead(0);
        cs
    }

    /// A cached store of 256 pages whose flusher writes back every dirty
    /// page, with `f` open.
    fn flushing(&self) -> (CachedStore, CachedFile) {
        let flush = FlushOptions {
            dirty_at: Some(1),
            ..FlushOptions::default()
        };
        let cs = CachedStore::with_flusher(self.store(), small_cache(256), Some(flush)).unwrap();
        cs.set_readahead(0);
        let f = cs.open_file("f").unwrap();
        (cs, f)
    }

    /// A cached store with `f` open and its pages `hits` read (so cached).
    fn warm(&self, hits: &[usize]) -> (CachedStore, CachedFile) {
        let cs = self.cached(256);
        let f = cs.open_file("f").unwrap();
        for &p in hits {
            assert_eq!(page(&f, p), self.page(p));
        }
        (cs, f)
    }

    fn page(&self, p: usize) -> &[u8] {
        &self.data[p * PAGE..(p + 1) * PAGE]
    }

    /// What `name` holds in a new store once every fault is off.
    fn reopened(&self, name: &str) -> Vec<u8> {
        let sw = &self.sw;
        sw.read_errno.store(0, Ordering::Release);
        sw.write_errno.store(0, Ordering::Release);
        sw.short_reads.store(false, Ordering::Release);
        sw.gone_devices.store(0, Ordering::Release);
        sw.stall_us.store(0, Ordering::Release);
        sw.fsync_failures.store(0, Ordering::Release);
        self.media.power_on();
        let cs = self.cached(256);
        let f = cs.open_file(name).unwrap();
        let mut b = vec![0u8; f.len() as usize];
        f.read_at(0, &mut b).unwrap();
        b
    }
}

fn aligned(data: &[u8]) -> AlignedBuf {
    let mut b = AlignedBuf::new(data.len());
    b.copy_from_slice(data);
    b
}

fn page(f: &CachedFile, p: usize) -> Vec<u8> {
    let mut b = vec![0u8; PAGE];
    f.read_at((p * PAGE) as u64, &mut b).unwrap();
    b
}

fn raw_read(f: &setcache::File, p: usize) -> setcache::Result<Vec<u8>> {
    let mut b = AlignedBuf::new(PAGE);
    f.read_at((p * PAGE) as u64, &mut b)?;
    Ok(b.to_vec())
}

/// Runs `reqs` on a cached queue; their results, in order.
fn queued(
    cs: &CachedStore,
    reqs: Vec<CachedRequest<'_>>,
) -> Vec<(u64, setcache::Result<()>, Vec<u8>)> {
    let n = reqs.len();
    let mut q: CachedQueue<'_> = cs.queue(8);
    q.submit(reqs);
    q.drain();
    let mut done = Vec::new();
    q.take_completions(&mut done);
    assert_eq!(done.len(), n, "every request completes once");
    done.sort_by_key(|d| d.0);
    done.into_iter()
        .map(|(tag, c)| (tag, c.result, c.buf))
        .collect()
}

fn read_req(f: &CachedFile, p: usize, tag: u64) -> CachedRequest<'_> {
    CachedRequest::tagged(OpKind::Read, f, (p * PAGE) as u64, vec![0; PAGE], tag)
}

fn write_req(f: &CachedFile, p: usize, byte: u8, tag: u64) -> CachedRequest<'_> {
    CachedRequest::tagged(OpKind::Write, f, (p * PAGE) as u64, vec![byte; PAGE], tag)
}

/// `e` is an I/O error of `op` with `errno`, on `device` when given.
fn is_io(e: &Error, want_op: &str, want_errno: i32, want_device: Option<usize>) -> bool {
    match e {
        Error::Io {
            op, errno, device, ..
        } => *op == want_op && *errno == want_errno && want_device.is_none_or(|d| d == *device),
        _ => false,
    }
}

/// `e` refuses a failed device (`device` when given) whose first error had `errno`.
fn is_failed(e: &Error, want_errno: i32, want_device: Option<usize>) -> bool {
    match e {
        Error::DeviceFailed { device, first } => {
            first.errno() == Some(want_errno) && want_device.is_none_or(|d| d == *device)
        }
        _ => false,
    }
}

#[test]
fn eio_on_read() {
    let rig = Rig::new("eio_on_read");
    // The store's own calls.
    {
        let store = rig.store();
        let raw = store.open_file("raw").unwrap();
        rig.sw.read_errno.store(libc::EIO, Ordering::Release);
        let e = raw_read(&raw, 6).unwrap_err();
        assert!(is_io(&e, "read", libc::EIO, Some(0)), "{e}");
        assert!(e.to_string().contains("offset 24576"), "{e}");
        let e = raw
            .write_at(6 * PAGE as u64, &AlignedBuf::new(PAGE))
            .unwrap_err();
        assert!(is_failed(&e, libc::EIO, Some(0)), "device 0 is failed: {e}");
        rig.sw.read_errno.store(0, Ordering::Release);
        // Device 1 still works.
        assert_eq!(raw_read(&raw, 7).unwrap(), rig.page(7));
        let e = raw_read(&raw, 6).unwrap_err();
        assert!(is_failed(&e, libc::EIO, Some(0)), "failed for good: {e}");
    }
    // Cached files, the cached queue and sync.
    {
        let (cs, f) = rig.warm(&[0, 1, 2, 3]);
        rig.sw.read_errno.store(libc::EIO, Ordering::Release);
        for p in 0..4 {
            assert_eq!(page(&f, p), rig.page(p), "a cached page is served");
        }
        let mut b = vec![0u8; PAGE];
        let e = f.read_at(9 * PAGE as u64, &mut b).unwrap_err();
        assert!(is_io(&e, "read", libc::EIO, Some(1)), "{e}");
        f.write_at(10 * PAGE as u64, &[0x5A; PAGE]).unwrap();
        let e = f.write_at(20 * PAGE as u64 + 100, &[1; 10]).unwrap_err();
        assert!(
            is_io(&e, "read", libc::EIO, Some(0)) || is_failed(&e, libc::EIO, Some(0)),
            "a partial write of a missing page reads it first: {e}"
        );
        let res = queued(
            &cs,
            vec![
                read_req(&f, 12, 0),
                read_req(&f, 2, 1),
                write_req(&f, 14, 0x6B, 2),
            ],
        );
        let e = res[0].1.as_ref().unwrap_err();
        assert!(
            is_io(e, "read", libc::EIO, Some(0)) || is_failed(e, libc::EIO, Some(0)),
            "{e}"
        );
        assert!(
            res[1].1.is_ok() && res[1].2 == rig.page(2),
            "a hit completes"
        );
        assert!(
            res[2].1.is_ok(),
            "a whole-page write completes: {:?}",
            res[2].1
        );
        // Both devices are failed: the dirty pages cannot be written.
        for _ in 0..2 {
            let e = f.sync().unwrap_err();
            assert!(is_failed(&e, libc::EIO, None), "{e}");
        }
        assert_eq!(
            page(&f, 10),
            vec![0x5A; PAGE],
            "a dirty page stays readable"
        );
        assert_eq!(page(&f, 14), vec![0x6B; PAGE]);
        // After a miss failed, the page is not cached: with reads back on,
        // the store still refuses the failed device rather than show garbage.
        rig.sw.read_errno.store(0, Ordering::Release);
        assert!(f.read_at(9 * PAGE as u64, &mut b).is_err());
    }
    same(
        &rig.reopened("f"),
        &rig.data,
        "bytes synced before the fault",
    );
    same(&rig.reopened("raw"), &rig.data, "after reopen");
}

/// The flusher's count of pages written back leaves out its writes that
/// failed (out of room here); the page stays dirty, and a sync writes it.
#[test]
fn the_flushers_page_count_leaves_out_failed_writes() {
    let rig = Rig::new("flush_count");
    let mut want = rig.data.clone();
    {
        let (cs, f) = rig.flushing();
        rig.sw.write_errno.store(libc::ENOSPC, Ordering::Release);
        f.write_at(3 * PAGE as u64, &[0x44; PAGE]).unwrap();
        want[3 * PAGE..4 * PAGE].fill(0x44);
        let t = Instant::now();
        while cs.flusher_counts().writes < 1 {
            assert!(t.elapsed() < Duration::from_secs(30), "no write tried");
            std::thread::sleep(Duration::from_millis(1));
        }
        // The write's pages are counted, or not, when it is settled.
        std::thread::sleep(Duration::from_millis(100));
        let c = cs.flusher_counts();
        assert_eq!(c.pages, 0, "a failed write counted as pages written: {c:?}");
        assert!(
            cs.cache().dirty_pages().iter().any(|p| p.page == 3),
            "the page is dirty still"
        );
        rig.sw.write_errno.store(0, Ordering::Release);
        f.sync().unwrap();
    }
    same(
        &rig.reopened("f"),
        &want,
        "the page written after the failures",
    );
}

#[test]
fn eio_on_write() {
    let rig = Rig::new("eio_on_write");
    {
        let store = rig.store();
        let raw = store.open_file("raw").unwrap();
        rig.sw.write_errno.store(libc::EIO, Ordering::Release);
        let e = raw
            .write_at(3 * PAGE as u64, &AlignedBuf::new(PAGE))
            .unwrap_err();
        assert!(is_io(&e, "write", libc::EIO, Some(1)), "{e}");
        let e = raw_read(&raw, 3).unwrap_err();
        assert!(is_failed(&e, libc::EIO, Some(1)), "device 1 is failed: {e}");
        assert_eq!(raw_read(&raw, 4).unwrap(), rig.page(4), "device 0 works");
        rig.sw.write_errno.store(0, Ordering::Release);
    }
    {
        let (cs, f) = rig.warm(&[]);
        rig.sw.write_errno.store(libc::EIO, Ordering::Release);
        f.write_at(3 * PAGE as u64, &[0x11; PAGE]).unwrap();
        f.write_at(4 * PAGE as u64 + 7, &[0x22; 100]).unwrap();
        let res = queued(&cs, vec![write_req(&f, 5, 0x33, 0)]);
        assert!(res[0].1.is_ok(), "{:?}", res[0].1);
        assert_eq!(page(&f, 3), vec![0x11; PAGE]);
        let e = f.sync().unwrap_err();
        assert!(is_io(&e, "write", libc::EIO, None), "{e}");
        assert!(e.to_string().contains("\"f\""), "names the file: {e}");
        let e = f.sync().unwrap_err();
        assert!(is_failed(&e, libc::EIO, None), "{e}");
        assert_eq!(page(&f, 3), vec![0x11; PAGE], "dirty pages stay readable");
        assert_eq!(page(&f, 5), vec![0x33; PAGE]);
    }
    // A cache far smaller than the writes: victims must be written back,
    // and their failure reaches a writer or the next sync, never nobody.
    {
        let cs = rig.cached(16);
        let f = cs.open_file("f").unwrap();
        let mut writes_failed = 0;
        for p in 0..PAGES {
            if f.write_at((p * PAGE) as u64, &[0x44; PAGE]).is_err() {
                writes_failed += 1;
            }
        }
        let e = f.sync().unwrap_err();
        assert_eq!(
            e.errno(),
            Some(libc::EIO),
            "{e} ({writes_failed} writes failed)"
        );
        rig.sw.write_errno.store(0, Ordering::Release);
    }
    same(
        &rig.reopened("f"),
        &rig.data,
        "bytes synced before the fault",
    );
    same(&rig.reopened("raw"), &rig.data, "after reopen");
}

#[test]
fn short_read() {
    let rig = Rig::new("short_read");
    {
        let store = rig.store();
        let raw = store.open_file("raw").unwrap();
        rig.sw.short_reads.store(true, Ordering::Release);
        let e = raw_read(&raw, 5).unwrap_err();
        match &e {
            Error::ShortTransfer {
                expected,
                got,
                offset,
                ..
            } => assert_eq!((*expected, *got, *offset), (4096, 2048, 5 * 4096)),
            other => panic!("{other}"),
        }
        assert!(store.device_errors().iter().all(Option::is_none));
        rig.sw.short_reads.store(false, Ordering::Release);
        assert_eq!(raw_read(&raw, 5).unwrap(), rig.page(5));
    }
    {
        let (cs, f) = rig.warm(&[0]);
        rig.sw.short_reads.store(true, Ordering::Release);
        let mut b = vec![0u8; PAGE];
        let e = f.read_at(8 * PAGE as u64, &mut b).unwrap_err();
        assert!(matches!(e, Error::ShortTransfer { .. }), "{e}");
        let res = queued(&cs, vec![read_req(&f, 9, 0), read_req(&f, 0, 1)]);
        let e = res[0].1.as_ref().unwrap_err();
        assert!(matches!(e, Error::ShortTransfer { .. }), "{e}");
        assert!(res[1].1.is_ok() && res[1].2 == rig.page(0));
        f.write_at(11 * PAGE as u64, &[0x77; PAGE]).unwrap();
        f.sync().unwrap();
        assert!(cs.store().device_errors().iter().all(Option::is_none));
        rig.sw.short_reads.store(false, Ordering::Release);
        assert_eq!(page(&f, 8), rig.page(8), "nothing half-read was cached");
        assert_eq!(page(&f, 9), rig.page(9));
    }
    let mut want = rig.data.clone();
    want[11 * PAGE..12 * PAGE].fill(0x77);
    same(&rig.reopened("f"), &want, "after reopen");
}

/// A write cut short (a file system that ran out of room part way) fails
/// only its request at the store; a cached file's write-back writes the run
/// again, so `sync` passes once the rewrite does.
#[test]
fn short_write() {
    let rig = Rig::new("short_write");
    {
        let store = rig.store();
        let raw = store.open_file("raw").unwrap();
        rig.sw.short_writes.store(1, Ordering::Release);
        let e = raw
            .write_at(2 * PAGE as u64, &aligned(&[0x12; PAGE]))
            .unwrap_err();
        match &e {
            Error::ShortTransfer {
                op, expected, got, ..
            } => assert_eq!((*op, *expected, *got), ("write", 4096, 2048)),
            other => panic!("{other}"),
        }
        // To a POSIX caller: out of space part way, not an I/O error.
        assert_eq!(e.posix_errno(), libc::ENOSPC, "{e}");
        assert!(store.device_errors().iter().all(Option::is_none));
    }
    let mut want = rig.data.clone();
    {
        let (cs, f) = rig.warm(&[]);
        f.write_at(6 * PAGE as u64, &[0x61; 4 * PAGE]).unwrap();
        want[6 * PAGE..10 * PAGE].fill(0x61);
        let res = queued(&cs, vec![write_req(&f, 20, 0x62, 0)]);
        assert!(res[0].1.is_ok());
        want[20 * PAGE..21 * PAGE].fill(0x62);
        rig.sw.short_writes.store(2, Ordering::Release);
        f.sync()
            .unwrap_or_else(|e| panic!("a write cut short was not written again: {e}"));
        assert_eq!(rig.sw.short_writes.load(Ordering::Acquire), 0);
        assert!(cs.store().device_errors().iter().all(Option::is_none));
    }
    same(&rig.reopened("f"), &want, "after reopen");
}

#[test]
fn enospc_then_space_back() {
    let rig = Rig::new("enospc_then_space_back");
    {
        let store = rig.store();
        let raw = store.open_file("raw").unwrap();
        rig.sw.write_errno.store(libc::ENOSPC, Ordering::Release);
        let b = aligned(&[0x12; PAGE]);
        let e = raw.write_at(2 * PAGE as u64, &b).unwrap_err();
        assert!(is_io(&e, "write", libc::ENOSPC, Some(0)), "{e}");
        assert!(store.device_errors().iter().all(Option::is_none));
        rig.sw.write_errno.store(0, Ordering::Release);
        raw.write_at(2 * PAGE as u64, &b).unwrap();
        raw.sync().unwrap();
    }
    let mut want = rig.data.clone();
    {
        let (cs, f) = rig.warm(&[]);
        rig.sw.write_errno.store(libc::ENOSPC, Ordering::Release);
        f.write_at(6 * PAGE as u64 + 1, &[0x21; 2 * PAGE]).unwrap();
        want[6 * PAGE + 1..8 * PAGE + 1].fill(0x21);
        let res = queued(&cs, vec![write_req(&f, 20, 0x22, 0)]);
        assert!(res[0].1.is_ok(), "{:?}", res[0].1);
        want[20 * PAGE..21 * PAGE].fill(0x22);
        for _ in 0..2 {
            let e = f.sync().unwrap_err();
            assert_eq!(e.errno(), Some(libc::ENOSPC), "{e}");
        }
        assert!(cs.store().device_errors().iter().all(Option::is_none));
        assert_eq!(page(&f, 30), rig.page(30), "reads go on");
        rig.sw.write_errno.store(0, Ordering::Release);
        f.sync().unwrap();
    }
    let mut raw_want = rig.data.clone();
    raw_want[2 * PAGE..3 * PAGE].fill(0x12);
    same(&rig.reopened("raw"), &raw_want, "after reopen");
    same(
        &rig.reopened("f"),
        &want,
        "writes made while the disk was full",
    );
}

#[test]
fn latency_spike() {
    const SPIKE: Duration = Duration::from_secs(3);
    // Calls that wait out the spike take at least this long.
    let waited = SPIKE - Duration::from_millis(100);
    let rig = Rig::new("latency_spike");
    let (cs, f) = rig.warm(&[0, 1]);
    let raw = cs.store().open_file("raw").unwrap();
    rig.sw
        .stall_us
        .store(SPIKE.as_micros() as u64, Ordering::Release);
    let stalled = AtomicBool::new(true);
    let slowest_hit = Mutex::new(Duration::ZERO);
    std::thread::scope(|s| {
        let raw_miss = s.spawn(|| {
            let t = Instant::now();
            assert_eq!(raw_read(&raw, 40).unwrap(), rig.page(40));
            t.elapsed()
        });
        let cached_miss = s.spawn(|| {
            let t = Instant::now();
            assert_eq!(page(&f, 41), rig.page(41));
            t.elapsed()
        });
        let queue = s.spawn(|| {
            let t = Instant::now();
            let res = queued(&cs, vec![read_req(&f, 42, 0), write_req(&f, 43, 0x43, 1)]);
            assert!(
                res[0].1.is_ok() && res[0].2 == rig.page(42),
                "{:?}",
                res[0].1
            );
            assert!(res[1].1.is_ok(), "{:?}", res[1].1);
            t.elapsed()
        });
        let sync = s.spawn(|| {
            f.write_at(44 * PAGE as u64, &[0x44; PAGE]).unwrap();
            let t = Instant::now();
            f.sync().unwrap();
            t.elapsed()
        });
        // Hits meanwhile are served without waiting for the devices.
        while stalled.load(Ordering::Acquire) {
            let t = Instant::now();
            assert_eq!(page(&f, 0), rig.page(0));
            assert_eq!(page(&f, 1), rig.page(1));
            let mut w = slowest_hit.lock().unwrap();
            *w = (*w).max(t.elapsed());
            drop(w);
            std::thread::sleep(Duration::from_millis(10));
            if [&raw_miss, &cached_miss, &queue, &sync]
                .iter()
                .all(|h| h.is_finished())
            {
                stalled.store(false, Ordering::Release);
            }
        }
        for (what, h) in [
            ("store read", raw_miss),
            ("cached miss", cached_miss),
            ("queue", queue),
        ] {
            let took = h.join().unwrap();
            assert!(took >= waited, "{what} took {took:?}, under the spike");
        }
        // A write-back, then an fsync: two waits.
        let took = sync.join().unwrap();
        assert!(took >= 2 * waited, "sync took {took:?}: it did not wait");
    });
    rig.sw.stall_us.store(0, Ordering::Release);
    let hit = *slowest_hit.lock().unwrap();
    assert!(hit < Duration::from_secs(2), "a hit waited {hit:?}");
    assert!(cs.store().device_errors().iter().all(Option::is_none));
    f.sync().unwrap();
    drop((f, raw, cs));
    let mut want = rig.data.clone();
    want[43 * PAGE..44 * PAGE].fill(0x43);
    want[44 * PAGE..45 * PAGE].fill(0x44);
    same(&rig.reopened("f"), &want, "after reopen");
}

#[test]
fn device_disappears() {
    let rig = Rig::new("device_disappears");
    let gone = 1u64 << 1;
    {
        let store = rig.store();
        let raw = store.open_file("raw").unwrap();
        rig.sw.gone_devices.store(gone, Ordering::Release);
        let e = raw_read(&raw, 5).unwrap_err();
        assert!(is_io(&e, "read", libc::ENODEV, Some(1)), "{e}");
        let e = raw
            .write_at(5 * PAGE as u64, &AlignedBuf::new(PAGE))
            .unwrap_err();
        assert!(is_failed(&e, libc::ENODEV, Some(1)), "{e}");
        assert_eq!(raw_read(&raw, 4).unwrap(), rig.page(4), "device 0 works");
        raw.write_at(4 * PAGE as u64, &aligned(rig.page(4)))
            .unwrap();
        rig.sw.gone_devices.store(0, Ordering::Release);
    }
    {
        let (cs, f) = rig.warm(&[0, 1]);
        rig.sw.gone_devices.store(gone, Ordering::Release);
        assert_eq!(page(&f, 0), rig.page(0));
        assert_eq!(page(&f, 1), rig.page(1), "a hit on the gone device");
        assert_eq!(page(&f, 2), rig.page(2), "a miss on device 0");
        let mut b = vec![0u8; PAGE];
        let e = f.read_at(3 * PAGE as u64, &mut b).unwrap_err();
        assert!(is_io(&e, "read", libc::ENODEV, Some(1)), "{e}");
        f.write_at(7 * PAGE as u64, &[0x70; PAGE]).unwrap();
        let res = queued(
            &cs,
            vec![
                read_req(&f, 9, 0),
                read_req(&f, 10, 1),
                write_req(&f, 11, 0x71, 2),
            ],
        );
        let e = res[0].1.as_ref().unwrap_err();
        assert!(is_failed(e, libc::ENODEV, Some(1)), "{e}");
        assert!(res[1].1.is_ok() && res[1].2 == rig.page(10));
        assert!(res[2].1.is_ok());
        let e = f.sync().unwrap_err();
        assert!(is_failed(&e, libc::ENODEV, Some(1)), "{e}");
        // The device is back, but this store does not trust it again.
        rig.sw.gone_devices.store(0, Ordering::Release);
        let e = f.sync().unwrap_err();
        assert!(is_failed(&e, libc::ENODEV, Some(1)), "{e}");
        assert_eq!(page(&f, 7), vec![0x70; PAGE]);
    }
    same(
        &rig.reopened("f"),
        &rig.data,
        "bytes synced before it vanished",
    );
    same(&rig.reopened("raw"), &rig.data, "after reopen");
}

#[test]
fn fsync_fails() {
    let rig = Rig::new("fsync_fails");
    // EIO: the device lost writes; it is failed, as for any EIO.
    {
        let store = rig.store();
        let raw = store.open_file("raw").unwrap();
        rig.sw.fsync_failures.store(1, Ordering::Release);
        let e = raw.sync().unwrap_err();
        assert!(is_io(&e, "sync", libc::EIO, None), "{e}");
        let e = raw.sync().unwrap_err();
        assert!(is_failed(&e, libc::EIO, None), "{e}");
    }
    {
        let (cs, f) = rig.warm(&[]);
        f.write_at(2 * PAGE as u64 + 5, &[0x25; 3 * PAGE]).unwrap();
        let res = queued(&cs, vec![write_req(&f, 30, 0x30, 0)]);
        assert!(res[0].1.is_ok());
        rig.sw.fsync_failures.store(1, Ordering::Release);
        let e = f.sync().unwrap_err();
        assert!(is_io(&e, "sync", libc::EIO, None), "{e}");
        for _ in 0..2 {
            let e = f.sync().unwrap_err();
            assert!(is_failed(&e, libc::EIO, None), "{e}");
        }
        assert_eq!(page(&f, 30), vec![0x30; PAGE], "dirty pages stay readable");
    }
    // Each page holds what the last good sync left, or the failed one's bytes
    // where its device's fsync passed.
    let got = rig.reopened("f");
    for (p, (g, w)) in got.chunks(PAGE).zip(rig.data.chunks(PAGE)).enumerate() {
        // The failed sync's write of 0x25 over bytes 2 * PAGE + 5 .. 5 * PAGE + 5.
        let mut written = w.to_vec();
        let (from, to) = (2 * PAGE + 5, 5 * PAGE + 5);
        for (i, b) in written.iter_mut().enumerate() {
            if (from..to).contains(&(p * PAGE + i)) {
                *b = 0x25;
            }
        }
        let new = match p {
            30 => vec![0x30; PAGE],
            _ => written,
        };
        assert!(g == w || g == new, "page {p} holds bytes nobody wrote");
    }
    // An error that can pass (out of space): the device stays in use, and
    // the next sync writes the pages again and returns Ok.
    rig.sw.fsync_errno.store(libc::ENOSPC, Ordering::Release);
    {
        let store = rig.store();
        let raw = store.open_file("raw").unwrap();
        rig.sw.fsync_failures.store(1, Ordering::Release);
        let e = raw.sync().unwrap_err();
        assert!(is_io(&e, "sync", libc::ENOSPC, None), "{e}");
        raw.sync().unwrap();
    }
    let mut want = rig.reopened("f");
    {
        let (cs, f) = rig.warm(&[]);
        f.write_at(2 * PAGE as u64 + 5, &[0x25; 3 * PAGE]).unwrap();
        want[2 * PAGE + 5..5 * PAGE + 5].fill(0x25);
        let res = queued(&cs, vec![write_req(&f, 30, 0x31, 0)]);
        assert!(res[0].1.is_ok());
        want[30 * PAGE..31 * PAGE].fill(0x31);
        rig.sw.fsync_failures.store(1, Ordering::Release);
        let e = f.sync().unwrap_err();
        assert!(is_io(&e, "sync", libc::ENOSPC, None), "{e}");
        f.sync().unwrap();
    }
    same(
        &rig.reopened("f"),
        &want,
        "the pages a failed fsync dropped",
    );
    // Pages that left the cache before the failed fsync cannot be written
    // again: every sync fails until the file is opened again.
    {
        let cs = rig.cached(16);
        let f = cs.open_file("f").unwrap();
        for p in 0..PAGES {
            f.write_at((p * PAGE) as u64, &[0x5F; PAGE]).unwrap();
        }
        rig.sw.fsync_failures.store(1, Ordering::Release);
        assert!(f.sync().is_err());
        for _ in 0..2 {
            let e = f.sync().unwrap_err();
            assert!(matches!(e, Error::SyncLost { .. }), "{e}");
            assert!(e.to_string().contains("opened again"), "{e}");
        }
        let again = cs.open_file("f").unwrap();
        again.sync().unwrap();
    }
    // Opened again, syncs pass; each page holds the last good sync's bytes
    // or the later write (the failed fsync may have dropped it).
    let got = rig.reopened("f");
    for (p, (g, w)) in got.chunks(PAGE).zip(want.chunks(PAGE)).enumerate() {
        assert!(
            g == w || g.iter().all(|&x| x == 0x5F),
            "page {p} holds bytes nobody wrote"
        );
    }
}

/// A failed fsync through the file under a cached file (`CachedFile::file`,
/// then `File::sync`) may have cost pages the cache wrote back: the kernel
/// reports a failed write-back once, so the cache's next fsync passes. The
/// cache's next sync must not pass without them: pages still cached are
/// written again; one that left the cache makes its syncs fail `SyncLost`.
#[test]
fn a_failed_fsync_through_the_file_under_a_cache_counts_for_its_sync() {
    let rig = Rig::new("fsync_under");
    rig.sw.fsync_errno.store(libc::ENOSPC, Ordering::Release);
    let mut want = rig.data.clone();
    {
        // The flusher writes each dirty page back; it stays cached.
        let (cs, f) = rig.flushing();
        // A page on each device: the failed fsync is the first device's.
        f.write_at(2 * PAGE as u64, &[0x43; 2 * PAGE]).unwrap();
        want[2 * PAGE..4 * PAGE].fill(0x43);
        let t = Instant::now();
        while cs.flusher_counts().pages < 2 {
            assert!(t.elapsed() < Duration::from_secs(30), "never written back");
            std::thread::sleep(Duration::from_millis(1));
        }
        rig.sw.fsync_failures.store(1, Ordering::Release);
        let e = f.file().sync().unwrap_err();
        assert!(is_io(&e, "sync", libc::ENOSPC, None), "{e}");
        f.sync().unwrap();
    }
    same(
        &rig.reopened("f"),
        &want,
        "the pages a failed fsync under the cache dropped",
    );
    {
        // Pages written back and pushed out of a cache of 16 pages.
        let cs = rig.cached(16);
        let f = cs.open_file("f").unwrap();
        for p in 0..PAGES {
            f.write_at((p * PAGE) as u64, &[0x5E; PAGE]).unwrap();
        }
        rig.sw.fsync_failures.store(1, Ordering::Release);
        assert!(f.file().sync().is_err());
        let e = f.sync().unwrap_err();
        assert!(matches!(e, Error::SyncLost { .. }), "{e}");
    }
}

/// `got` equals `want`, or the first differing byte is named.
#[track_caller]
fn same(got: &[u8], want: &[u8], what: &str) {
    if let Some(i) = (0..got.len().max(want.len())).find(|&i| got.get(i) != want.get(i)) {
        panic!(
            "{what}: byte {i} (page {}) is {:?}, expected {:?}",
            i / PAGE,
            got.get(i),
            want.get(i)
        );
    }
}

/// Record `k` of thread `t`: where it lies (unaligned, 1,000 to 4,400 bytes
/// long, so most cross a page boundary; records never overlap).
fn record_span(t: usize, k: usize) -> (usize, usize) {
    let slot = (k * THREADS + t) * 5003 + (k * 131 + t * 17) % 512;
    (slot, 1000 + (k * 977 + t * 389) % 3400)
}

/// Version `v` of a record in cycle `cycle`; version 0 is what `base` holds.
fn record_bytes(base: &[u8], cycle: u64, t: usize, k: usize, v: u32) -> Vec<u8> {
    let (off, len) = record_span(t, k);
    if v == 0 {
        return base[off..off + len].to_vec();
    }
    let id = (cycle << 40) ^ ((t as u64) << 32) ^ ((k as u64) << 20) ^ v as u64;
    pattern(setcache::layout::mix64(id), 0, len)
}

const THREADS: usize = 1;
/// Records per thread: they fit in the file without overlapping.
const RECORDS: usize = 24;

/// One writer: rewrites its records at random, syncs at random points and
/// keeps, per record, the last version a sync confirmed and the last written.
fn power_cut_writer(
    f: &CachedFile,
    base: &[u8],
    cycle: u64,
    t: usize,
    versions: &Mutex<Vec<(u32, u32)>>,
) {
    let mut rng = Rng(cycle * 7 + t as u64);
    let mut written = vec![0u32; RECORDS];
    loop {
        let k = rng.below(RECORDS as u64) as usize;
        let v = written[k] + 1;
        let (off, _) = record_span(t, k);
        // A write that fails (after the cut) may have reached some pages:
        // the version is possible from the moment it is tried.
        versions.lock().unwrap()[k].1 = v;
        if f.write_at(off as u64, &record_bytes(base, cycle, t, k, v))
            .is_err()
        {
            return;
        }
        written[k] = v;
        if rng.below(6) == 0 {
            let before = written.clone();
            if f.sync().is_err() {
                return;
            }
            let mut g = versions.lock().unwrap();
            for (slot, v) in g.iter_mut().zip(before) {
                slot.0 = slot.0.max(v);
            }
        }
    }
}

/// With the power off, every API fails rather than report bytes that are not
/// on the medium: the store's own reads and writes, a queue's reads of pages
/// the cache lacks, and a cached `sync` of a page written after the cut (page
/// 40 lies past every record, so what it holds is never checked).
fn after_the_cut(cycle: u64, cs: &CachedStore, f: &CachedFile, raw: &setcache::File, data: &[u8]) {
    // EIO, or the device that EIO failed (by the writer, or an earlier call).
    let eio = |e: &Error| is_io(e, "read", libc::EIO, None) || is_failed(e, libc::EIO, None);
    let e = raw_read(raw, (cycle % PAGES as u64) as usize).unwrap_err();
    assert!(eio(&e), "cycle {cycle}: {e}");
    let same = aligned(&data[..PAGE]);
    assert!(
        raw.write_at(0, &same).is_err(),
        "cycle {cycle}: a raw write after the cut"
    );
    assert!(
        raw.sync().is_err(),
        "cycle {cycle}: a raw sync after the cut"
    );
    // The cache holds 16 of the 64 pages: most of these reads miss.
    let reads = (0..PAGES).map(|p| read_req(f, p, p as u64)).collect();
    let failed = queued(cs, reads).iter().filter(|r| r.1.is_err()).count();
    assert!(
        failed > 0,
        "cycle {cycle}: every queued read after the cut passed"
    );
    if f.write_at((40 * PAGE) as u64, &[0x5A; PAGE]).is_ok() {
        let r = f.sync();
        assert!(
            r.is_err(),
            "cycle {cycle}: a sync after the cut returned Ok"
        );
    }
}

#[test]
fn power_cut() {
    let cycles: u64 = std::env::var("SETCACHE_POWER_CUTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(12);
    let rig = Rig::new("power_cut");
    assert!(record_span(THREADS - 1, RECORDS - 1).0 + 4400 <= PAGES * PAGE);
    let mut base = rig.data.clone();
    let mut totals = setcache::PowerCut::default();
    let mut confirmed_checked = 0u64;
    for cycle in 0..cycles {
        let versions: Vec<Mutex<Vec<(u32, u32)>>> = (0..THREADS)
            .map(|_| Mutex::new(vec![(0, 0); RECORDS]))
            .collect();
        {
            // A small cache with a flusher: write-backs by eviction, by the
            // flusher and by sync all race the cut.
            let cs = CachedStore::with_flusher(
                rig.store(),
                small_cache(16),
                Some(FlushOptions::default()),
            )
            .unwrap();
            let f = cs.open_file("f").unwrap();
            let raw = cs.store().open_file("raw").unwrap();
            let mut rng = Rng(cycle + 1);
            let delay = Duration::from_millis(20 + rng.below(150));
            std::thread::scope(|s| {
                for (t, v) in versions.iter().enumerate() {
                    let (f, base) = (&f, &base);
                    s.spawn(move || power_cut_writer(f, base, cycle, t, v));
                }
                // The delay runs from the first record a sync confirmed, so
                // that writers starting late on a loaded machine still give
                // the cut something confirmed to check.
                let t0 = std::time::Instant::now();
                while !versions
                    .iter()
                    .any(|v| v.lock().unwrap().iter().any(|&(c, _)| c > 0))
                {
                    assert!(
                        t0.elapsed() < Duration::from_secs(20),
                        "no write was ever confirmed"
                    );
                    std::thread::sleep(Duration::from_millis(1));
                }
                std::thread::sleep(delay);
                let cut = rig.media.cut_power(cycle ^ 0xC07);
                totals.kept += cut.kept;
                totals.dropped += cut.dropped;
                totals.torn += cut.torn;
            });
            after_the_cut(cycle, &cs, &f, &raw, &rig.data);
        }
        rig.media.power_on();
        let got = rig.reopened("f");
        for (t, v) in versions.iter().enumerate() {
            for (k, &(confirmed, last)) in v.lock().unwrap().iter().enumerate() {
                confirmed_checked += u64::from(confirmed > 0);
                let (off, len) = record_span(t, k);
                let have = &got[off..off + len];
                let allowed: Vec<Vec<u8>> = (confirmed..=last)
                    .map(|v| record_bytes(&base, cycle, t, k, v))
                    .collect();
                if let Some(i) = (0..len).find(|&i| !allowed.iter().any(|a| a[i] == have[i])) {
                    // Which versions each piece (up to a page or sector edge) holds.
                    let mut pieces = Vec::new();
                    let mut at = 0;
                    while at < len {
                        let end = ((off + at) / 512 + 1) * 512 - off;
                        let end = end.min(len);
                        let from: Vec<u32> = (0..=last)
                            .filter(|&v| {
                                record_bytes(&base, cycle, t, k, v)[at..end] == have[at..end]
                            })
                            .collect();
                        pieces.push(format!("{}..{}: {from:?}", off + at, off + end));
                        at = end;
                    }
                    panic!(
                        "cycle {cycle}: thread {t} record {k} at {off} (+{len}) byte {i} is \
                         {:#x}, not from versions {confirmed}..={last}; pieces: {}",
                        have[i],
                        pieces.join(", ")
                    );
                }
            }
        }
        // What this cycle left is the next cycle's version 0.
        base = got;
    }
    assert!(
        confirmed_checked > 0 && totals.dropped + totals.torn > 0,
        "the cuts never caught a write unflushed: {totals:?}"
    );
    eprintln!(
        "power cut loop: {cycles} cuts; {confirmed_checked} confirmed records checked; \
         writes no fsync covered: {} kept, {} dropped, {} torn",
        totals.kept, totals.dropped, totals.torn
    );
}

/// Queue requests on pages that readahead is reading while the device
/// stalls for longer than the pin wait: they wait for those reads, as a
/// synchronous read waits for another's fill, instead of giving up `Busy`.
#[test]
fn a_queue_waits_out_a_slow_readahead_read() {
    const SPIKE: Duration = Duration::from_secs(2);
    let rig = Rig::new("slow_readahead");
    let opts = setcache::CacheOptions {
        pin_wait: Duration::from_millis(300),
        ..small_cache(256)
    };
    let cs = CachedStore::with_flusher(rig.store(), opts, None).unwrap();
    let f = cs.open_file("f").unwrap();
    rig.sw
        .stall_us
        .store(SPIKE.as_micros() as u64, Ordering::Release);
    // Readahead claims pages 40-47 and its reads stall.
    let before = rig.sw.taken.load(Ordering::Acquire);
    f.advise(
        40 * PAGE as u64,
        8 * PAGE as u64,
        setcache::Advice::WillNeed,
    )
    .unwrap();
    // Claimed once the device has taken a read in.
    let t0 = Instant::now();
    while rig.sw.taken.load(Ordering::Acquire) == before {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "the readahead never read"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    let t = Instant::now();
    let res = queued(&cs, vec![read_req(&f, 44, 0), write_req(&f, 45, 0x45, 1)]);
    rig.sw.stall_us.store(0, Ordering::Release);
    assert!(
        res[0].1.is_ok() && res[0].2 == rig.page(44),
        "read of a page being read ahead: {:?}",
        res[0].1
    );
    assert!(
        res[1].1.is_ok(),
        "write to a page being read ahead: {:?}",
        res[1].1
    );
    assert!(
        t.elapsed() > Duration::from_millis(300),
        "the requests did not meet the readahead's reads ({:?})",
        t.elapsed()
    );
    assert_eq!(page(&f, 45), vec![0x45; PAGE]);
}

/// An extending write whose first page must be read first, and whose read
/// comes back short, fails and leaves the file as long as it was: the
/// growth it made goes again, and readers never saw it. Once reads are
/// whole again the same write lands and the file is longer by it.
#[test]
fn an_extending_write_that_fails_leaves_the_length() {
    let rig = Rig::new("extending_fails");
    let cs = rig.cached(64);
    let f = cs.open_file("f").unwrap();
    let old = f.len();
    assert_eq!(old, (PAGES * PAGE) as u64);
    rig.sw.short_reads.store(true, Ordering::Release);
    // From 100 bytes before the end (a page not cached) to two pages on.
    let run = vec![0x3C; 100 + 2 * PAGE];
    let e = f.write_extending(old - 100, &run).unwrap_err();
    assert!(matches!(e, Error::ShortTransfer { .. }), "{e}");
    assert_eq!(f.len(), old, "the length after the failed write");
    assert_eq!(f.file().len(), old, "the file's own length");
    rig.sw.short_reads.store(false, Ordering::Release);
    f.write_extending(old - 100, &run).unwrap();
    assert_eq!(f.len(), old + 2 * PAGE as u64);
    f.sync().unwrap();
    let mut back = vec![0u8; 3 * PAGE];
    assert_eq!(f.read_at(old - PAGE as u64, &mut back).unwrap(), 3 * PAGE);
    assert_eq!(
        back[..PAGE - 100],
        rig.data[(PAGES - 1) * PAGE..PAGES * PAGE - 100]
    );
    assert!(back[PAGE - 100..].iter().all(|&b| b == 0x3C));
    // A failure part way: the first page past the old end is written whole
    // (no read), the next one in part needs a read, which comes back short.
    // The cut takes the written page with it: grown again later, it reads
    // as zeros.
    let old = f.len();
    rig.sw.short_reads.store(true, Ordering::Release);
    let run = vec![0x5D; PAGE + 2000];
    let e = f.write_extending(old, &run).unwrap_err();
    rig.sw.short_reads.store(false, Ordering::Release);
    assert!(matches!(e, Error::ShortTransfer { .. }), "{e}");
    assert_eq!(f.len(), old, "the length after the failure part way");
    f.grow(old + 2 * PAGE as u64).unwrap();
    let mut back = vec![1u8; 2 * PAGE];
    assert_eq!(f.read_at(old, &mut back).unwrap(), 2 * PAGE);
    assert!(
        back.iter().all(|&b| b == 0),
        "the pages the failed write reached read as zeros after a growth"
    );
}
