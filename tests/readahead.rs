//! Readahead: which reads make a stream, what is read ahead of it, and how
//! the pages read ahead leave the cache; the access hints.

mod common;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use common::{TempDir, pattern};
use setcache::{
    Advice, CacheOptions, CachedFile, CachedRequest, CachedStore, Error, LayoutKind, OpKind,
    PartQueue, PartitionOptions, Partitions, Store, StoreOptions,
};

const PAGE: usize = 4096;

/// A cached store of `cache_pages` pages (default policy and set size) with a
/// file `f` of `file_pages` pages of pattern bytes on two devices.
fn rig(tag: &str, file_pages: usize, cache_pages: usize) -> (TempDir, CachedStore, CachedFile) {
    rig_on(tag, file_pages, cache_pages, StoreOptions::default())
}

/// [`rig`] on a store opened with `opts`.
fn rig_on(
    tag: &str,
    file_pages: usize,
    cache_pages: usize,
    opts: StoreOptions,
) -> (TempDir, CachedStore, CachedFile) {
    rig_parts_on(tag, file_pages, cache_pages, 1, opts)
}

/// [`rig`] with the cache's sets divided into `partitions`.
fn rig_parts(
    tag: &str,
    file_pages: usize,
    cache_pages: usize,
    partitions: usize,
) -> (TempDir, CachedStore, CachedFile) {
    rig_parts_on(
        tag,
        file_pages,
        cache_pages,
        partitions,
        StoreOptions::default(),
    )
}

fn rig_parts_on(
    tag: &str,
    file_pages: usize,
    cache_pages: usize,
    partitions: usize,
    opts: StoreOptions,
) -> (TempDir, CachedStore, CachedFile) {
    let tmp = TempDir::new(tag);
    let store = Store::open(&tmp.devices(2), opts).unwrap();
    let len = file_pages * PAGE;
    let f = store.create("f", len as u64, LayoutKind::Stripe).unwrap();
    let mut b = setcache::AlignedBuf::new(len);
    b.copy_from_slice(&pattern(3, 0, len));
    f.write_at(0, &b).unwrap();
    let cs = CachedStore::new(
        store,
        CacheOptions {
            size: cache_pages * PAGE,
            partitions,
            ..CacheOptions::default()
        },
    )
    .unwrap();
    let cf = cs.open_file("f").unwrap();
    (tmp, cs, cf)
}

/// [`rig`] on simulated devices, with the switches that inject their faults.
fn sim_rig(
    tag: &str,
    file_pages: usize,
    cache_pages: usize,
) -> (
    TempDir,
    CachedStore,
    CachedFile,
    std::sync::Arc<setcache::SimSwitches>,
) {
    use setcache::{EngineKind, SimConfig, SimMedia, SimSwitches};
    let sw = std::sync::Arc::new(SimSwitches::default());
    let opts = StoreOptions {
        engine: EngineKind::Sim(SimConfig {
            media: SimMedia::new(),
            switches: sw.clone(),
            latency_us: (1, 20),
            ..SimConfig::default()
        }),
        ..StoreOptions::default()
    };
    let (t, cs, f) = rig_on(tag, file_pages, cache_pages, opts);
    (t, cs, f, sw)
}

/// Read page `p` through the synchronous call and check its bytes.
fn read_page(f: &CachedFile, p: usize) {
    let mut b = vec![0u8; PAGE];
    assert_eq!(f.read_at((p * PAGE) as u64, &mut b).unwrap(), PAGE);
    assert!(b == pattern(3, (p * PAGE) as u64, PAGE), "page {p}");
}

/// The cached pages (of the only file).
fn cached(cs: &CachedStore, _f: &CachedFile) -> HashSet<u64> {
    cs.cache().pages().into_iter().map(|p| p.page).collect()
}

/// Wait (up to 10 s) until every page of `pages` is cached.
fn wait_cached(cs: &CachedStore, f: &CachedFile, pages: std::ops::Range<u64>) {
    let t0 = Instant::now();
    loop {
        let have = cached(cs, f);
        let missing: Vec<u64> = pages.clone().filter(|p| !have.contains(p)).collect();
        if missing.is_empty() {
            return;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "pages never read ahead: {missing:?}"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Wait until the readahead thread has acted on everything asked of it
/// (a sleep instead let a slow thread make the negative checks pass
/// without testing anything).
fn idle(cs: &CachedStore) {
    let t0 = Instant::now();
    while !cs.readahead_idle() {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the readahead thread never settled"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Once the readahead thread is idle, every window asked for is read: the
/// pages are cached at that moment, not some time later; and a store that
/// read nothing ahead is idle.
#[test]
fn an_idle_readahead_thread_has_read_every_window_asked_for() {
    let (_t, cs, f) = rig("ra-idle", 2048, 1024);
    idle(&cs);
    for round in 0..100usize {
        let base = round * 20;
        read_page(&f, base);
        read_page(&f, base + 1);
        idle(&cs);
        let have = cached(&cs, &f);
        let first = base as u64;
        let missing: Vec<u64> = (first + 2..first + 18)
            .filter(|p| !have.contains(p))
            .collect();
        assert!(
            missing.is_empty(),
            "round {round}: idle with {missing:?} not read"
        );
    }
}

#[test]
fn a_sequential_reader_finds_the_pages_ahead_of_it_read() {
    let (_t, cs, f) = rig("ra-seq", 2048, 1024);
    read_page(&f, 0);
    assert_eq!(cs.cache().stats().readahead, 0, "one read is no stream");
    read_page(&f, 1);
    // The second read makes a stream: a first window of 16 pages after it.
    wait_cached(&cs, &f, 2..18);
    let st = cs.cache().stats();
    assert!(st.readahead >= 16, "{st:?}");
    let misses = st.misses;
    for p in 2..18 {
        read_page(&f, p);
    }
    let st = cs.cache().stats();
    assert_eq!(st.misses, misses, "every page was read ahead: {st:?}");
    assert!(st.readahead_used >= 16, "{st:?}");
    // Reading on, the windows keep ahead and the bytes are right.
    for p in 18..1500 {
        read_page(&f, p);
    }
    let st = cs.cache().stats();
    assert!(st.readahead > 1000, "{st:?}");
    assert!(st.readahead_used > 16, "{st:?}");
}

#[test]
fn a_stream_at_its_largest_windows_keeps_two_ahead() {
    let (_t, cs, f) = rig("ra-lead", 2048, 1024);
    // Windows of at most 16 pages: the first is already the largest.
    cs.set_readahead(16 * PAGE);
    for p in 0..2 {
        read_page(&f, p);
    }
    wait_cached(&cs, &f, 2..18);
    // Page 2 is in the only window: the next is asked for. Page 3 is in the
    // last two: the one after that too, so two whole windows are ahead.
    read_page(&f, 2);
    read_page(&f, 3);
    wait_cached(&cs, &f, 18..50);
    // Page 4 is not in the last two (34..50 and 18..34 are ahead of it).
    read_page(&f, 4);
    idle(&cs);
    assert_eq!(cs.cache().stats().readahead, 48);
    assert!(!cached(&cs, &f).contains(&50), "a fourth window too early");
}

#[test]
fn interleaved_streams_each_get_their_windows() {
    let (_t, cs, f) = rig("ra-interleaved", 4096, 2048);
    for i in 0..3 {
        read_page(&f, i);
        read_page(&f, 2000 + i);
        read_page(&f, 3000 + 2 * i);
    }
    // Two streams (the third strides, so it is none).
    wait_cached(&cs, &f, 3..19);
    wait_cached(&cs, &f, 2003..2019);
    idle(&cs);
    let have = cached(&cs, &f);
    let strided: Vec<u64> = (3000..3100).filter(|p| have.contains(p)).collect();
    assert_eq!(
        strided,
        [3000, 3002, 3004],
        "no window for a strided reader"
    );
    // Per stream a first window of 16 pages, and at once the next one of
    // 32, as the third read enters the first.
    assert!(cs.cache().stats().readahead <= 2 * (16 + 32));
}

#[test]
fn pages_a_reader_reads_in_itself_do_not_count_as_read_ahead_and_used() {
    // The reads of pages 0 and 1 bring them in (page 1 as a stream's, cold)
    // and start the stream; nothing it read was read ahead.
    let (_t, cs, f) = rig("ra-own", 64, 1024);
    read_page(&f, 0);
    read_page(&f, 1);
    wait_cached(&cs, &f, 2..18);
    idle(&cs);
    let st = cs.cache().stats();
    assert_eq!(st.readahead_used, 0, "{st:?}");
    assert!(st.readahead >= 16, "{st:?}");
}

#[test]
fn interleaved_streams_of_small_reads_count_each_page_used_once() {
    // One thread, two streams of 64-byte reads, a read of each in turn:
    // each page read ahead counts once as used, not once a read.
    let (_t, cs, f) = rig("ra-used-once", 1024, 4096);
    let mut b = [0u8; 64];
    let far = 512 * PAGE as u64;
    for i in 0..4096u64 {
        for base in [0, far] {
            f.read_at(base + i * 64, &mut b).unwrap();
        }
    }
    idle(&cs);
    let st = cs.cache().stats();
    assert!(st.readahead_used > 0, "{st:?}");
    assert!(
        st.readahead_used <= st.readahead,
        "more pages used than read ahead: {st:?}"
    );
}

#[test]
fn random_reads_never_read_ahead() {
    let (_t, cs, f) = rig("ra-random", 2048, 1024);
    // Consecutive reads are 997 pages apart (mod 2048): never neighbours
    // within the last eight.
    for i in 0..600 {
        read_page(&f, i * 997 % 2048);
    }
    idle(&cs);
    assert_eq!(cs.cache().stats().readahead, 0);
}

#[test]
fn small_reads_wandering_about_a_page_never_read_ahead_and_small_records_in_order_do() {
    let (_t, cs, f) = rig("ra-wander", 2048, 1024);
    // A walk over 64-byte records: each step up to 48 records either way
    // (within 3 KiB), reads of 16 to 80 bytes; many steps go forward by less
    // than a page, but each skips more than it reads.
    let mut x = 99u64;
    let mut at: u64 = 1000 * PAGE as u64;
    let mut buf = [0u8; 80];
    for _ in 0..3000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let step = (x % 97) as i64 - 48;
        let len = 16 + (x >> 8) as usize % 65;
        at = (at as i64 + step * 64).clamp(0, 2047 * PAGE as i64) as u64;
        f.read_at(at, &mut buf[..len]).unwrap();
    }
    idle(&cs);
    // Rarely, two steps in a row still look like a scan: at most one first
    // window in 3,000 reads (the detection before this rule read 47 pages).
    let st = cs.cache().stats();
    assert!(
        st.readahead <= 16,
        "a wandering reader is no stream: {st:?}"
    );
    // 64-byte records read in order, the first from a page boundary: a stream.
    let base = 100 * PAGE as u64;
    for r in 0..128 {
        f.read_at(base + r * 64, &mut buf[..64]).unwrap();
    }
    wait_cached(&cs, &f, 102..118);
}

#[test]
fn a_stream_that_turns_random_stops() {
    let (_t, cs, f) = rig("ra-turns", 2048, 1024);
    // The windows these reads ask for: 16 pages from page 2 (read before
    // the reader gets there, so that it does not claim pages 2 and 3
    // itself), then 32.
    for p in 0..2 {
        read_page(&f, p);
    }
    wait_cached(&cs, &f, 2..18);
    for p in 2..4 {
        read_page(&f, p);
    }
    wait_cached(&cs, &f, 2..50);
    idle(&cs);
    let before = cs.cache().stats().readahead;
    assert_eq!(before, 48);
    for i in 1..400 {
        read_page(&f, 100 + i * 997 % 1900);
    }
    idle(&cs);
    assert_eq!(
        cs.cache().stats().readahead,
        before,
        "no window after the turn"
    );
}

#[test]
fn a_reader_that_outruns_its_windows_gets_new_ones_from_where_it_is() {
    let (_t, cs, f) = rig("ra-outrun", 4096, 2048);
    let mut b = vec![0u8; 16 * PAGE];
    // 64 KiB reads: far faster than the device once started, so the reader
    // is often past its windows; reads of 512 KiB jump past them for sure.
    let mut p = 0;
    for round in 0..40 {
        let n = if round % 8 == 7 { 128 } else { 16 };
        let mut big = vec![0u8; n * PAGE];
        let buf = if n == 16 { &mut b[..] } else { &mut big[..] };
        assert_eq!(f.read_at((p * PAGE) as u64, buf).unwrap(), n * PAGE);
        assert!(
            buf == &pattern(3, (p * PAGE) as u64, n * PAGE)[..],
            "at page {p}"
        );
        p += n;
    }
    // Whatever the last read outran, the pages right after it are asked for.
    wait_cached(&cs, &f, p as u64..p as u64 + 32);
    assert!(cs.cache().stats().readahead_used > 0);
}

#[test]
fn pages_read_ahead_go_before_a_hot_set() {
    let (_t, cs, f) = rig("ra-hot", 8192, 1024);
    // A hot set of 3/8 of the cache, read in an order no stream follows
    // (229 pages apart mod 384), twice.
    for i in 0..768 {
        read_page(&f, i * 229 % 384);
    }
    let hot: HashSet<u64> = (0..384).collect();
    assert!(hot.is_subset(&cached(&cs, &f)));
    // A scan of four times the cache.
    for p in 1000..5096 {
        read_page(&f, p);
    }
    idle(&cs);
    let have = cached(&cs, &f);
    let kept = hot.iter().filter(|p| have.contains(p)).count();
    assert!(kept >= 380, "the scan pushed out {} hot pages", 384 - kept);
    let st = cs.cache().stats();
    assert!(st.readahead > 3000, "{st:?}");
}

#[test]
fn pages_written_once_long_ago_make_room_for_a_scan() {
    // The file written through the cache: its last pages fill the cache,
    // warm (written), and nobody uses them again.
    let (_t, cs, f) = rig("ra-stale", 4096, 1024);
    let b = pattern(3, 0, 4096 * PAGE);
    for (k, chunk) in b.chunks(64 * PAGE).enumerate() {
        f.write_at((k * 64 * PAGE) as u64, chunk).unwrap();
    }
    f.sync().unwrap();
    // Two scans of the file, four times the cache. Pages unused for a
    // cache's worth of misses in sets that warm pages fill give way to
    // the scan's readahead as cold ones do: the second scan finds nearly
    // all of its pages read ahead.
    for p in 0..4096 {
        read_page(&f, p);
    }
    let before = cs.cache().stats();
    for p in 0..4096 {
        read_page(&f, p);
    }
    let st = cs.cache().stats();
    let (misses, ahead) = (st.misses - before.misses, st.readahead - before.readahead);
    assert!(misses < 200, "{misses} misses, {ahead} pages read ahead");
    assert!(ahead > 3000, "{misses} misses, {ahead} pages read ahead");
}

#[test]
fn advice_random_turns_readahead_off_and_sequential_starts_at_once() {
    // A cache large enough for the largest window (at most a sixteenth of
    // the cache).
    let (_t, cs, f) = rig("ra-advice", 4096, 16384);
    cs.set_readahead(2 << 20);
    f.advise(0, 0, Advice::Random).unwrap();
    for p in 0..20 {
        read_page(&f, p);
    }
    idle(&cs);
    assert_eq!(cs.cache().stats().readahead, 0, "random: no readahead");
    f.advise(0, 0, Advice::Sequential).unwrap();
    read_page(&f, 1000);
    // One read, and the largest window (2 MiB) at once.
    wait_cached(&cs, &f, 1001..1001 + 512);
    f.advise(0, 0, Advice::Normal).unwrap();
    let ra = cs.cache().stats().readahead;
    read_page(&f, 3000);
    idle(&cs);
    assert_eq!(
        cs.cache().stats().readahead,
        ra,
        "normal: one read is no stream"
    );
    assert!(matches!(
        f.advise(4096 * PAGE as u64, 1, Advice::WillNeed),
        Err(Error::OutOfRange { .. })
    ));
    assert!(matches!(
        f.advise(0, 4097 * PAGE as u64, Advice::DontNeed),
        Err(Error::OutOfRange { .. })
    ));
}

#[test]
fn advice_willneed_reads_the_range_without_a_reader() {
    let (_t, cs, f) = rig("ra-willneed", 4096, 2048);
    f.advise(100 * PAGE as u64, 700 * PAGE as u64, Advice::WillNeed)
        .unwrap();
    wait_cached(&cs, &f, 100..800);
    let st = cs.cache().stats();
    assert_eq!(st.misses, 0, "{st:?}");
    assert_eq!(st.readahead, 700, "{st:?}");
    for p in 100..800 {
        read_page(&f, p);
    }
    assert_eq!(cs.cache().stats().misses, 0);
    // A range that ends inside a page covers that page; len 0 runs to the end.
    f.advise(4000 * PAGE as u64 + 10, 0, Advice::WillNeed)
        .unwrap();
    wait_cached(&cs, &f, 4000..4096);
}

#[test]
fn advice_dontneed_lets_those_pages_go_first() {
    let (_t, cs, f) = rig("ra-dontneed", 4096, 256);
    // 128 pages cached, read in no stream's order.
    for i in 0..128 {
        read_page(&f, i * 37 % 128);
    }
    f.advise(0, 64 * PAGE as u64, Advice::DontNeed).unwrap();
    // 200 more pages: 72 must go.
    for i in 0..200 {
        read_page(&f, 1000 + i * 37 % 200);
    }
    let have = cached(&cs, &f);
    let cold_left = (0..64).filter(|p| have.contains(p)).count();
    let warm_left = (64..128).filter(|p| have.contains(p)).count();
    assert!(
        cold_left <= 16 && warm_left >= 48,
        "advised away: {cold_left} of 64 left; others: {warm_left} of 64 left"
    );
}

#[test]
fn a_queue_reader_gets_readahead_too() {
    let (_t, cs, f) = rig("ra-queue", 2048, 1024);
    let mut q = cs.queue(4);
    for p in 0..3u64 {
        let r = CachedRequest::tagged(OpKind::Read, &f, p * PAGE as u64, vec![0; PAGE], p);
        q.submit(vec![r]);
        q.drain();
        let mut done = Vec::new();
        q.take_completions(&mut done);
        let (_, c) = done.pop().unwrap();
        c.result.unwrap();
        assert!(c.buf == pattern(3, p * PAGE as u64, PAGE));
    }
    wait_cached(&cs, &f, 3..19);
    drop(q);
}

#[test]
fn readahead_can_be_turned_off() {
    let (_t, cs, f) = rig("ra-off", 2048, 1024);
    cs.set_readahead(0);
    for p in 0..100 {
        read_page(&f, p);
    }
    idle(&cs);
    assert_eq!(cs.cache().stats().readahead, 0);
}

/// A readahead read that fails leaves nothing behind: its pages are dropped
/// (a staged run copies nothing), and their readers read them again.
#[test]
fn a_failed_readahead_read_drops_its_pages_and_readers_read_them_again() {
    use std::sync::atomic::Ordering;
    // 1024 pages: room for a staging area of two slots.
    let (_t, cs, f, sw) = sim_rig("ra-fail", 256, 1024);
    // EAGAIN fails a request and leaves the device usable.
    sw.read_errno.store(libc::EAGAIN, Ordering::Release);
    let mut b = vec![0u8; PAGE];
    assert!(f.read_at(0, &mut b).is_err());
    assert!(f.read_at(PAGE as u64, &mut b).is_err());
    // The second read asked for a window; its reads fail too.
    let t0 = Instant::now();
    while cs.cache().stats().readahead < 16 {
        assert!(t0.elapsed() < Duration::from_secs(10), "no readahead");
        std::thread::sleep(Duration::from_millis(2));
    }
    // (Pages being read are listed too: until the failed reads are back.)
    let t0 = Instant::now();
    while !cs.cache().pages().is_empty() && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(2));
    }
    assert!(cs.cache().pages().is_empty(), "failed fills are dropped");
    sw.read_errno.store(0, Ordering::Release);
    for p in 2..40 {
        read_page(&f, p);
    }
}

/// Cached queue reads of runs of missing pages (half of them landing in the
/// staging area's four slots, half in their frames) that fail report the
/// error and publish nothing; once the device answers again, reads of runs
/// return the file's bytes, round after round.
#[test]
fn a_failed_staged_queue_read_publishes_nothing() {
    use std::sync::atomic::Ordering;
    // An 8 MiB cache: a staging area of four slots.
    let (_t, cs, f, sw) = sim_rig("ra-qfail", 2048, 2048);
    cs.set_readahead(0);
    let read = |q: &mut setcache::CachedQueue<'_>, first: usize, pages: usize| {
        let reqs = (0..8)
            .map(|k| {
                let off = ((first + k * pages) * PAGE) as u64;
                CachedRequest::tagged(OpKind::Read, &f, off, vec![0; pages * PAGE], k as u64)
            })
            .collect();
        q.submit(reqs);
        q.drain();
        let mut done = Vec::new();
        q.take_completions(&mut done);
        assert_eq!(done.len(), 8);
        done
    };
    let mut q = cs.queue(8);
    sw.read_errno.store(libc::EAGAIN, Ordering::Release);
    for (k, c) in read(&mut q, 0, 32) {
        assert!(c.result.is_err(), "read {k} of a failing device succeeded");
    }
    assert!(cs.cache().pages().is_empty(), "failed fills are dropped");
    sw.read_errno.store(0, Ordering::Release);
    for round in 0..3 {
        for (k, c) in read(&mut q, round * 256, 32) {
            assert!(c.result.is_ok(), "round {round}, read {k}: {:?}", c.result);
            let off = (round * 256 + k as usize * 32) * PAGE;
            assert!(
                c.buf == pattern(3, off as u64, 32 * PAGE),
                "round {round}, read {k}"
            );
        }
    }
    assert_eq!(cs.cache().stats().fills, 3 * 256, "every page read once");
}

/// Run `fut` to its end on this thread, parking between polls (the
/// futures need no runtime: their worker wakes this thread).
fn block_on<F: std::future::Future>(fut: F) -> F::Output {
    use std::sync::Arc;
    use std::task::{Context, Poll, Wake, Waker};
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut fut = std::pin::pin!(fut);
    loop {
        if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::park_timeout(Duration::from_millis(100));
    }
}

/// The three ways of taking a page reference.
#[derive(Clone, Copy, Debug)]
enum RefWay {
    Sync,
    Queue,
    Future,
}

/// Take a reference to the page holding byte `off` of `f` the way `way`
/// says, and check the page's bytes.
fn ref_page(cs: &CachedStore, f: &CachedFile, way: RefWay, off: u64) {
    let p = off / PAGE as u64;
    let want = pattern(3, p * PAGE as u64, PAGE);
    match way {
        RefWay::Sync => assert!(*f.page(off).unwrap() == want[..], "page {p}"),
        RefWay::Future => assert!(
            *block_on(f.page_async(off)).unwrap() == want[..],
            "page {p}"
        ),
        RefWay::Queue => {
            let mut q = cs.queue(2);
            q.submit(vec![CachedRequest::page(f, off, 7)]);
            q.drain();
            let mut got = Vec::new();
            q.take_pages(&mut got);
            let (tag, g) = got.pop().expect("a page request completes");
            assert_eq!(tag, 7);
            assert!(*g.unwrap() == want[..], "page {p}");
        }
    }
}

#[test]
fn page_references_taken_in_order_are_a_stream_in_every_form() {
    for way in [RefWay::Sync, RefWay::Queue, RefWay::Future] {
        let (_t, cs, f) = rig("ra-refs", 2048, 1024);
        ref_page(&cs, &f, way, 0);
        assert_eq!(
            cs.cache().stats().readahead,
            0,
            "{way:?}: one page is no stream"
        );
        // A parser walking page 1's records, a reference to each: the
        // second page makes the stream, and the repeats leave it as it is.
        for k in 0..64 {
            ref_page(&cs, &f, way, (PAGE + 64 * k) as u64);
        }
        wait_cached(&cs, &f, 2..18);
        let st = cs.cache().stats();
        assert!(st.readahead >= 16, "{way:?}: {st:?}");
        let misses = st.misses;
        for p in 2..400 {
            ref_page(&cs, &f, way, (p * PAGE) as u64);
        }
        assert_read_ahead(&cs, misses, &format!("{way:?}"));
        let st = cs.cache().stats();
        assert!(st.readahead_used > 300, "{way:?}: {st:?}");
    }
}

/// A cache of 1,024 pages holding a hot set of 384 (the hot set of
/// `pages_read_ahead_go_before_a_hot_set`, read the same way), then `scan`
/// of four times the cache: the scan, read ahead, leaves the hot set.
fn scan_leaves_the_hot_set(what: &str, scan: impl FnOnce(&CachedStore, &CachedFile)) {
    scan_leaves_the_hot_set_of(what, 1, scan);
}

/// [`scan_leaves_the_hot_set`] with the cache's sets divided into
/// `partitions`.
fn scan_leaves_the_hot_set_of(
    what: &str,
    partitions: usize,
    scan: impl FnOnce(&CachedStore, &CachedFile),
) {
    let (_t, cs, f) = rig_parts("ra-hot-scan", 8192, 1024, partitions);
    for i in 0..768 {
        read_page(&f, i * 229 % 384);
    }
    let hot: HashSet<u64> = (0..384).collect();
    assert!(hot.is_subset(&cached(&cs, &f)));
    scan(&cs, &f);
    idle(&cs);
    let have = cached(&cs, &f);
    let kept = hot.iter().filter(|p| have.contains(p)).count();
    assert!(
        kept >= 380,
        "{what}: the scan pushed out {} hot pages",
        384 - kept
    );
    assert!(cs.cache().stats().readahead > 3000, "{what}");
}

/// After `misses` misses counted before some 400 pages were read in order:
/// those pages were read ahead, and their reads hardly ever waited.
fn assert_read_ahead(cs: &CachedStore, misses: u64, what: &str) {
    let st = cs.cache().stats();
    assert!(st.readahead > 300, "{what}: {st:?}");
    assert!(
        st.misses - misses < 40,
        "{what}: the reads waited for the device: {st:?}"
    );
}

#[test]
fn a_scan_through_page_references_leaves_a_hot_set_in_every_form() {
    for way in [RefWay::Sync, RefWay::Queue, RefWay::Future] {
        scan_leaves_the_hot_set(&format!("{way:?}"), |cs, f| {
            for p in 1000..5096u64 {
                ref_page(cs, f, way, p * PAGE as u64);
            }
        });
    }
}

/// The ways of reading a paged array's elements in order.
#[derive(Clone, Copy, Debug)]
enum ArrayWay {
    /// `ArrayReader::get`, element by element.
    ReaderGet,
    /// `PagedArray::get`, element by element.
    ArrayGet,
    /// `PagedArray::read_into`, a page's elements at a time.
    Copy,
}

/// Read the elements of pages `pages` of `a` (of `u64`, over the rig's
/// file) in order the way `way` says, and check them.
fn read_elements(
    a: &setcache::PagedArray<u64>,
    r: &mut setcache::ArrayReader<'_, u64>,
    way: ArrayWay,
    pages: std::ops::Range<u64>,
) {
    let per = (PAGE / 8) as u64;
    for p in pages {
        let want = pattern(3, p * PAGE as u64, PAGE);
        let want: Vec<u64> = want
            .chunks(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
            .collect();
        let got: Vec<u64> = match way {
            ArrayWay::ReaderGet => (0..per).map(|k| r.get(p * per + k).unwrap()).collect(),
            ArrayWay::ArrayGet => (0..per).map(|k| a.get(p * per + k).unwrap()).collect(),
            ArrayWay::Copy => {
                let mut out = vec![0u64; per as usize];
                a.read_into(p * per, &mut out).unwrap();
                out
            }
        };
        assert!(got == want, "{way:?}: page {p}");
    }
}

#[test]
fn a_paged_array_read_in_order_is_read_ahead_in_every_form() {
    for way in [ArrayWay::ReaderGet, ArrayWay::ArrayGet, ArrayWay::Copy] {
        let (_t, cs, f) = rig("ra-array", 2048, 1024);
        let a = setcache::PagedArray::<u64>::open(&cs, "f").unwrap();
        let mut r = a.reader();
        read_elements(&a, &mut r, way, 0..3);
        wait_cached(&cs, &f, 3..19);
        let misses = cs.cache().stats().misses;
        read_elements(&a, &mut r, way, 3..400);
        assert_read_ahead(&cs, misses, &format!("{way:?}"));
    }
}

#[test]
fn a_scan_of_a_paged_array_leaves_a_hot_set_in_every_form() {
    for way in [ArrayWay::ReaderGet, ArrayWay::ArrayGet, ArrayWay::Copy] {
        scan_leaves_the_hot_set(&format!("{way:?}"), |cs, _| {
            let a = setcache::PagedArray::<u64>::open(cs, "f").unwrap();
            let mut r = a.reader();
            read_elements(&a, &mut r, way, 1000..5096);
        });
    }
}

/// The ways of taking a page through a partition queue.
#[derive(Clone, Copy, Debug)]
enum PartWay {
    /// `PartQueue::read` of the whole page.
    Read,
    /// `PartQueue::task` summing the page's bytes.
    Task,
}

/// The sum of the page's bytes from `at` on, plus `arg`.
fn byte_sum(page: &[u8], at: usize, arg: u64) -> u64 {
    page[at..].iter().map(|&b| u64::from(b)).sum::<u64>() + arg
}

/// Take page `p` of `f` through `q` as `way`, wait for it, and check what
/// came back against the file's bytes.
fn part_page(q: &mut PartQueue<'_>, f: &CachedFile, way: PartWay, p: usize) {
    let at = (p * PAGE) as u64;
    match way {
        PartWay::Read => q.read(f, at, vec![0; PAGE], p as u64),
        PartWay::Task => q.task(f, at, byte_sum, 0, p as u64),
    }
    assert_eq!(q.wait(1), 1, "{way:?}: page {p} never finished");
    let mut done = Vec::new();
    q.take_completions(&mut done);
    assert_eq!(done.len(), 1);
    let c = &done[0];
    assert!(c.result.is_ok(), "{way:?}: page {p}: {:?}", c.result);
    let want = pattern(3, at, PAGE);
    match way {
        PartWay::Read => assert!(c.buf == want, "{way:?}: page {p}"),
        PartWay::Task => assert_eq!(c.value, byte_sum(&want, 0, 0), "{way:?}: page {p}"),
    }
}

fn two_partitions() -> PartitionOptions {
    PartitionOptions {
        partitions: Some(2),
        ..PartitionOptions::default()
    }
}

/// With the cache's pages divided between two partitions, consecutive pages
/// belong to either: a scan through a partition queue is a stream all the
/// same, seen where its requests are made, not where they are served.
#[test]
fn reads_and_tasks_in_order_through_partitions_are_a_stream() {
    for way in [PartWay::Read, PartWay::Task] {
        let (_t, cs, f) = rig_parts("ra-parts", 2048, 1024, 2);
        let parts = Partitions::new(&cs, two_partitions()).unwrap();
        let mut q = parts.queue(8).unwrap();
        part_page(&mut q, &f, way, 0);
        assert_eq!(
            cs.cache().stats().readahead,
            0,
            "{way:?}: one page is no stream"
        );
        part_page(&mut q, &f, way, 1);
        wait_cached(&cs, &f, 2..18);
        let misses = cs.cache().stats().misses;
        for p in 2..400 {
            part_page(&mut q, &f, way, p);
        }
        assert_read_ahead(&cs, misses, &format!("{way:?}"));
        let st = cs.cache().stats();
        assert!(st.readahead_used > 300, "{way:?}: {st:?}");
    }
}

#[test]
fn a_scan_through_partitions_leaves_a_hot_set() {
    for way in [PartWay::Read, PartWay::Task] {
        scan_leaves_the_hot_set_of(&format!("{way:?}"), 2, |cs, f| {
            let parts = Partitions::new(cs, two_partitions()).unwrap();
            let mut q = parts.queue(8).unwrap();
            for p in 1000..5096 {
                part_page(&mut q, f, way, p);
            }
        });
    }
}
