//! Tests of the set protocol: a model check, a property test against a
//! reference model, and a bounded stress test.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::sync::shuttle_model::Shuttle;
use super::sync::{Model, Os};
use super::*;
use crate::util::mix::mix64;

fn opts(size_pages: usize, max_pages: usize, assoc: usize, policy: PolicyKind) -> CacheOptions {
    CacheOptions {
        size: size_pages * 512,
        max_size: Some(max_pages * 512),
        page_size: 512,
        assoc,
        policy,
        pin_wait: Duration::from_millis(200),
        partitions: 1,
    }
}

/// The bytes a page holds on the "device" before anyone wrote it.
fn initial(file: u32, page: u64) -> Vec<u8> {
    (0..512u64)
        .map(|i| (i.wrapping_mul(31) ^ page.wrapping_mul(7) ^ file as u64) as u8)
        .collect()
}

type Disk = Mutex<HashMap<(u32, u64), Vec<u8>>>;

fn load_from(disk: &Disk) -> impl FnMut(u32, u64, &mut [u8]) -> crate::Result<()> + '_ {
    move |f, p, frame| {
        let g = disk.lock().unwrap();
        match g.get(&(f, p)) {
            Some(v) => frame.copy_from_slice(v),
            None => frame.copy_from_slice(&initial(f, p)),
        }
        Ok(())
    }
}

fn store_to(disk: &Disk) -> impl FnMut(u32, u64, &[u8]) -> crate::Result<()> + '_ {
    move |f, p, bytes| {
        disk.lock().unwrap().insert((f, p), bytes.to_vec());
        Ok(())
    }
}

#[test]
fn options_are_checked_with_clear_errors() {
    let bad = |o: CacheOptions| PageCache::<Os>::new(o).err().unwrap().to_string();
    let e = bad(CacheOptions {
        page_size: 3000,
        ..CacheOptions::default()
    });
    assert!(e.contains("page size 3000"), "{e}");
    let e = bad(CacheOptions {
        assoc: 33,
        ..CacheOptions::default()
    });
    assert!(e.contains("set size 33"), "{e}");
    let c = PageCache::<Os>::new(opts(16, 16, 4, PolicyKind::Lru)).unwrap();
    let e = c.get(MAX_FILE_ID + 1, 0).err().unwrap().to_string();
    assert!(e.contains("file id"), "{e}");
    let e = c.get(0, MAX_PAGE + 1).err().unwrap().to_string();
    assert!(e.contains("page number"), "{e}");
}

#[test]
fn metadata_sizes_from_the_cache() {
    let c = PageCache::<Os>::new(CacheOptions {
        size: 12 * 4096 * 8,
        policy: PolicyKind::Lru,
        ..CacheOptions::default()
    })
    .unwrap();
    assert_eq!(c.assoc(), 12);
    assert!(c.page_metadata_bytes() <= 16);
    let SetMetadataBytes { used, stride } = c.set_metadata_bytes();
    assert!(
        used <= stride && stride <= 4 * 64,
        "used {used} stride {stride}"
    );
    let frame = c.get(0, 1).unwrap();
    let Lookup::Miss(f) = frame else {
        panic!("first lookup must miss")
    };
    assert_eq!(f.frame_ptr() as usize % 4096, 0, "frames are 4096-aligned");
    drop(f);
}

#[test]
fn miss_fill_hit_and_failed_fill() {
    let c = PageCache::<Os>::new(opts(8, 8, 4, PolicyKind::Lru)).unwrap();
    let Lookup::Miss(f) = c.get(1, 5).unwrap() else {
        panic!("expected a miss")
    };
    let e = f
        .finish(Err(Error::InvalidArgument("disk said no".into())))
        .err()
        .unwrap();
    assert!(e.to_string().contains("disk said no"));
    // The failed page is gone; the next lookup is a miss again.
    let Lookup::Miss(mut f) = c.get(1, 5).unwrap() else {
        panic!("expected a miss after a failed fill")
    };
    f.frame_mut().fill(9);
    let p = f.finish(Ok(())).unwrap();
    assert!(p.iter().all(|&b| b == 9));
    drop(p);
    let Lookup::Hit(p) = c.get(1, 5).unwrap() else {
        panic!("expected a hit")
    };
    assert_eq!(p[0], 9);
    drop(p);
    let s = c.stats();
    assert_eq!((s.hits, s.misses, s.fills, s.fill_errors), (1, 2, 1, 1));
}

#[test]
fn every_resident_page_is_read_without_locks_at_every_associativity() {
    // Fingerprints take one word per eight slots: one to four words, and the
    // vector compare of two. Pages of many files and pages far apart share
    // fingerprints within a set; each is still read, with its own bytes.
    for assoc in [4, 8, 9, 12, 16, 17, 24, 32] {
        let c = PageCache::<Os>::new(opts(assoc * 40, assoc * 40, assoc, PolicyKind::Lru)).unwrap();
        let mut resident = Vec::new();
        for k in 0..(assoc as u64 * 60) {
            let (file, page) = ((k % 5) as u32, k * 1_000_003 % 4_000_037);
            if let Lookup::Miss(mut f) = c.get(file, page).unwrap() {
                f.frame_mut().fill((k % 251) as u8);
                drop(f.finish(Ok(())).unwrap());
            }
            resident.push((file, page, (k % 251) as u8));
        }
        let mut read = 0;
        let mut buf = [0u8; 8];
        for &(file, page, b) in &resident {
            let cached = c.pages().iter().any(|p| p.file == file && p.page == page);
            let got = c.try_read(file, page, 100, &mut buf).unwrap();
            assert_eq!(got, cached, "assoc {assoc}: page {page} of file {file}");
            if got {
                assert_eq!(buf, [b; 8], "assoc {assoc}: page {page} of file {file}");
                read += 1;
            }
        }
        assert!(read >= assoc * 30, "assoc {assoc}: only {read} pages read");
    }
}

#[test]
fn clean_pages_go_before_dirty_and_dirty_victims_come_back() {
    // One set of four pages.
    let c = PageCache::<Os>::new(opts(4, 4, 4, PolicyKind::Lru)).unwrap();
    let disk = Disk::default();
    for p in 0..4 {
        let mut g = c
            .get_mut_with(0, p, load_from(&disk), store_to(&disk))
            .unwrap();
        g.fill(p as u8 + 1);
    }
    // Make page 3 clean again by writing it back; every other page is dirty.
    let wb = c.write_back(0, 3).unwrap().unwrap();
    let (f, p, b) = (wb.file(), wb.page(), wb.bytes().to_vec());
    disk.lock().unwrap().insert((f, p), b);
    wb.finish(Ok(())).unwrap();
    // A miss evicts the clean page 3, not the least recently used dirty page 0.
    drop(
        c.get_with(0, 10, load_from(&disk), store_to(&disk))
            .unwrap(),
    );
    let cached: Vec<u64> = c.pages().iter().map(|p| p.page).collect();
    assert!(!cached.contains(&3) && cached.contains(&0), "{cached:?}");
    // No clean page left but page 10: it goes next, for a page that is written.
    drop(
        c.get_mut_with(0, 11, load_from(&disk), store_to(&disk))
            .unwrap(),
    );
    let cached: Vec<u64> = c.pages().iter().map(|p| p.page).collect();
    assert!(!cached.contains(&10) && cached.contains(&11), "{cached:?}");
    // Now only dirty pages remain: the lookup hands one back to be written.
    match c.get(0, 12).unwrap() {
        Lookup::WriteBack(w) => {
            assert_eq!(w.page(), 0, "LRU order among dirty pages");
            assert!(w.bytes().iter().all(|&b| b == 1));
            // While it is written, it stays readable.
            let Lookup::Hit(r) = c.get(0, 0).unwrap() else {
                panic!("a page under write-back is still cached")
            };
            drop(r);
            w.finish(Ok(())).unwrap();
        }
        _ => panic!("expected a write-back"),
    }
    assert_eq!(c.stats().dirty_evictions, 1);
}

/// With only dirty pages left, the victim handed back for write-back is one
/// with a dirty neighbour in its file when there is one (its write can take
/// the neighbour along), in policy order among those.
#[test]
fn dirty_victims_with_dirty_neighbours_go_first() {
    // One set of four pages, LRU, every page dirty; the first is the least
    // recently used.
    let victim_of = |pages: [u64; 4]| {
        let c = PageCache::<Os>::new(opts(4, 4, 4, PolicyKind::Lru)).unwrap();
        let disk = Disk::default();
        for p in pages {
            let mut g = c
                .get_mut_with(0, p, load_from(&disk), store_to(&disk))
                .unwrap();
            g.fill(p as u8);
        }
        match c.get(0, 50).unwrap() {
            Lookup::WriteBack(w) => w.page(),
            _ => panic!("expected a write-back"),
        }
    };
    assert_eq!(
        victim_of([10, 20, 30, 31]),
        30,
        "30 and 31 are neighbours; 30 is older"
    );
    assert_eq!(
        victim_of([10, 20, 30, 40]),
        10,
        "no neighbours: policy order"
    );
}

#[test]
fn all_pinned_is_a_clear_error_not_a_hang() {
    let c = PageCache::<Os>::new(CacheOptions {
        pin_wait: Duration::from_millis(20),
        ..opts(4, 4, 4, PolicyKind::Clock)
    })
    .unwrap();
    let disk = Disk::default();
    let held: Vec<_> = (0..4)
        .map(|p| c.get_with(0, p, load_from(&disk), store_to(&disk)).unwrap())
        .collect();
    let e = c.get(0, 99).err().unwrap();
    assert!(matches!(e, Error::AllPinned { .. }), "{e}");
    assert!(e.to_string().contains("pinned"));
    drop(held);
    assert!(c.get_with(0, 99, load_from(&disk), store_to(&disk)).is_ok());
}

#[test]
fn concurrent_misses_share_one_fill() {
    let c = Arc::new(PageCache::<Os>::new(opts(64, 64, 8, PolicyKind::Lru)).unwrap());
    let loads = Arc::new(AtomicU32::new(0));
    let gate = Arc::new(std::sync::Barrier::new(8));
    std::thread::scope(|s| {
        for _ in 0..8 {
            let (c, loads, gate) = (c.clone(), loads.clone(), gate.clone());
            s.spawn(move || {
                gate.wait();
                let p = c
                    .get_with(
                        3,
                        42,
                        |f, p, frame| {
                            loads.fetch_add(1, Ordering::SeqCst);
                            // Until another requester waits for this fill.
                            let t = std::time::Instant::now();
                            while c.stats().coalesced_waits == 0 {
                                assert!(t.elapsed() < Duration::from_secs(20), "nobody waited");
                                std::thread::sleep(Duration::from_millis(1));
                            }
                            frame.copy_from_slice(&initial(f, p));
                            Ok(())
                        },
                        |_, _, _| Ok(()),
                    )
                    .unwrap();
                assert!(p[..] == initial(3, 42)[..]);
            });
        }
    });
    assert_eq!(
        loads.load(Ordering::SeqCst),
        1,
        "one fill for eight requesters"
    );
    let s = c.stats();
    assert_eq!(s.fills, 1);
    assert_eq!(s.misses, 1);
    assert!(s.coalesced_waits >= 1);
}

#[test]
fn resize_moves_pages_with_their_data_and_dirt() {
    let c = PageCache::<Os>::new(opts(8, 64, 4, PolicyKind::Gclock)).unwrap();
    let disk = Disk::default();
    for p in 0..8 {
        let mut g = c
            .get_mut_with(2, p, load_from(&disk), store_to(&disk))
            .unwrap();
        g.fill(100 + p as u8);
    }
    c.resize(64 * 512).unwrap();
    assert_eq!(c.sets(), 16);
    // Every page written is still there, dirty, with its bytes (growing never
    // evicts), or was handed back for write-back (not possible here).
    let mut dirty = c.dirty_pages();
    dirty.sort();
    let have: Vec<u64> = dirty.iter().map(|d| d.page).collect();
    let mut all: Vec<u64> = (0..8).collect();
    all.retain(|p| !disk.lock().unwrap().contains_key(&(2, *p)));
    assert_eq!(have, all);
    for p in 0..8u64 {
        let g = c.get_with(2, p, load_from(&disk), store_to(&disk)).unwrap();
        assert!(g.iter().all(|&b| b == 100 + p as u8), "page {p}");
    }
    // A pinned page stays put through a shrink (the shrink waits, then fails
    // only if it must move it).
    let pinned = c.get_with(2, 0, load_from(&disk), store_to(&disk)).unwrap();
    let r = c.resize(8 * 512);
    if r.is_err() {
        assert!(matches!(r, Err(Error::ResizeBusy(_))));
    }
    assert!(pinned.iter().all(|&b| b == 100));
    drop(pinned);
    // Shrinking with dirty pages that do not fit fails cleanly; after a
    // write-back it completes.
    for PageId { file: f, page: p } in c.dirty_pages() {
        if let Some(w) = c.write_back(f, p).unwrap() {
            let b = w.bytes().to_vec();
            disk.lock().unwrap().insert((f, p), b);
            w.finish(Ok(())).unwrap();
        }
    }
    c.resize(8 * 512).unwrap();
    assert_eq!(c.sets(), 2);
    for p in 0..8u64 {
        let g = c.get_with(2, p, load_from(&disk), store_to(&disk)).unwrap();
        assert!(
            g.iter().all(|&b| b == 100 + p as u8),
            "page {p} after shrink"
        );
    }
}

/// A slot without a page can still hold pins: those of threads that waited
/// for a fill that failed, until they let go. A shrink must not move a page
/// into it (the move's new state would erase the pins, and the waiters'
/// release would then leave the page pinned for ever, never written back).
#[test]
fn a_shrink_moves_no_page_into_a_slot_that_waiters_still_pin() {
    let c = PageCache::<Os>::new(opts(8, 64, 4, PolicyKind::Gclock)).unwrap();
    c.resize(64 * 512).unwrap();
    let disk = Disk::default();
    let n = c.core.n_sets();
    let t = n - 1;
    let s = t - c.core.level_of(t);
    let in_set = |set: usize| {
        (0..4)
            .filter(|&i| c.core.state(set, i).load(Ordering::Relaxed) & core::VALID != 0)
            .map(|i| untag(c.core.tags(set)[i].load(Ordering::Relaxed)).1)
            .collect::<Vec<u64>>()
    };
    // Dirty pages until one lands in the vanishing set `t`.
    let mut p = 0;
    while in_set(t).is_empty() {
        let mut g = c
            .get_mut_with(2, p, load_from(&disk), store_to(&disk))
            .unwrap();
        g.fill(7);
        p += 1;
    }
    let moving = in_set(t);
    // Every slot of `s` without a page: pinned, as by a failed fill's waiter.
    let empty: Vec<usize> = (0..4)
        .filter(|&i| c.core.state(s, i).load(Ordering::Relaxed) & core::VALID == 0)
        .collect();
    assert!(!empty.is_empty(), "set {s} has room for the test");
    for &i in &empty {
        c.core.state(s, i).fetch_add(core::PIN, Ordering::AcqRel);
    }
    // No room for a dirty page: the shrink stops, moving nothing.
    assert!(matches!(
        c.resize((n - 1) * 4 * 512),
        Err(Error::ResizeBusy(_))
    ));
    for &i in &empty {
        let st = c.core.state(s, i).load(Ordering::Relaxed);
        assert_eq!(
            core::pins(st),
            1,
            "a waiter's pin on slot {i} of set {s} was lost"
        );
        assert_eq!(
            st & core::VALID,
            0,
            "a page moved into slot {i}, still pinned"
        );
    }
    // The waiters let go: the shrink goes through, the pages as they were.
    for &i in &empty {
        c.core.state(s, i).fetch_sub(core::PIN, Ordering::AcqRel);
    }
    c.resize((n - 1) * 4 * 512).unwrap();
    assert_eq!(c.sets(), n - 1);
    let dirty: Vec<u64> = c.dirty_pages().iter().map(|d| d.page).collect();
    for q in moving {
        assert!(dirty.contains(&q), "page {q} stayed dirty");
        let g = c.get_with(2, q, load_from(&disk), store_to(&disk)).unwrap();
        assert!(g.iter().all(|&b| b == 7), "page {q} kept its bytes");
    }
    assert_quiescent(&c);
}

#[derive(Debug, Clone)]
enum Op {
    Read(u64),
    Write(u64, u8),
    Evict(u64),
    Hold(u64),
    Release,
    Resize(usize),
    Flush,
}

fn op() -> impl proptest::strategy::Strategy<Value = Op> {
    use proptest::prelude::*;
    prop_oneof![
        4 => (0..40u64).prop_map(Op::Read),
        3 => (0..40u64, any::<u8>()).prop_map(|(p, b)| Op::Write(p, b)),
        1 => (0..40u64).prop_map(Op::Evict),
        1 => (0..40u64).prop_map(Op::Hold),
        1 => Just(Op::Release),
        1 => (1..9usize).prop_map(Op::Resize),
        1 => Just(Op::Flush),
    ]
}

fn run_model(policy: PolicyKind, ops: &[Op]) {
    run_model_in(policy, 1, ops)
}

/// Each cached page is in a set of the partition its hash names, and that
/// set's metadata, frames and stamps lie in the partition's spans.
fn assert_in_their_partitions<M: Model>(c: &PageCache<M>) {
    let core = &c.core;
    let parts = core.parts;
    for CachedPage { file, page, .. } in c.pages() {
        let tag = tag_of(file, page).unwrap();
        let (s, i) = core.find(mix64(tag), tag).expect("a listed page is found");
        let p = c.partition_of(file, page);
        assert_eq!(
            s % parts.n,
            p,
            "page {page} in set {s}, not of partition {p}"
        );
        let at = parts.pos(s);
        assert!(
            parts.span(p).contains(&at),
            "set {s} at {at} outside partition {p}"
        );
        let frames = core.frames.ptr() as usize;
        let span = parts.span(p);
        let per_set = core.lay.assoc * core.page_size;
        let f = core.frame(s, i) as usize - frames;
        assert!(
            (span.start * per_set..span.end * per_set).contains(&f),
            "frame of page {page} outside partition {p}'s frames"
        );
    }
}

fn run_model_in(policy: PolicyKind, partitions: usize, ops: &[Op]) {
    let c = PageCache::<Os>::new(CacheOptions {
        partitions,
        pin_wait: Duration::from_millis(5),
        // Three sets: a level that is not a power of two (modulo, not mask).
        ..opts(12, 32, 4, policy)
    })
    .unwrap();
    let disk = Disk::default();
    let mut truth: HashMap<u64, Vec<u8>> = HashMap::new();
    let expect = |truth: &HashMap<u64, Vec<u8>>, p: u64| {
        truth.get(&p).cloned().unwrap_or_else(|| initial(7, p))
    };
    let mut held: Vec<(u64, PageRef<'_, Os>)> = Vec::new();
    for op in ops {
        match op {
            Op::Read(p) => match c.get_with(7, *p, load_from(&disk), store_to(&disk)) {
                _ if {
                    let mut b = vec![0u8; 512];
                    let hit = c.try_read(7, *p, 0, &mut b).unwrap();
                    assert!(!hit || b == expect(&truth, *p), "optimistic read {p}");
                    hit
                } => {}
                Ok(g) => assert!(g[..] == expect(&truth, *p)[..], "read {p}"),
                Err(Error::AllPinned { .. }) => {}
                Err(e) => panic!("read {p}: {e}"),
            },
            Op::Write(p, b) => {
                if held.iter().any(|h| h.0 == *p) {
                    continue; // our own reader pin would block the writer
                }
                match c.get_mut_with(7, *p, load_from(&disk), store_to(&disk)) {
                    Ok(mut g) => {
                        assert!(g[..] == expect(&truth, *p)[..], "before write {p}");
                        g.fill(*b);
                        truth.insert(*p, vec![*b; 512]);
                    }
                    Err(Error::AllPinned { .. }) => {}
                    Err(e) => panic!("write {p}: {e}"),
                }
            }
            Op::Evict(p) => {
                if c.evict(7, *p).unwrap() {
                    // Only clean pages are dropped: the device has the truth.
                    let on_disk = disk.lock().unwrap().get(&(7, *p)).cloned();
                    let d = on_disk.unwrap_or_else(|| initial(7, *p));
                    assert!(d == expect(&truth, *p), "evicted {p} while dirty");
                }
            }
            Op::Hold(p) => {
                if held.len() < 2
                    && !held.iter().any(|h| h.0 == *p)
                    && let Ok(g) = c.get_with(7, *p, load_from(&disk), store_to(&disk))
                {
                    held.push((*p, g));
                }
            }
            Op::Release => {
                held.pop();
            }
            Op::Resize(sets) => match c.resize(sets * 4 * 512) {
                Ok(()) | Err(Error::ResizeBusy(_)) => {}
                Err(e) => panic!("resize: {e}"),
            },
            Op::Flush => {
                for PageId { file: f, page: p } in c.dirty_pages() {
                    if let Some(w) = c.write_back(f, p).unwrap() {
                        let b = w.bytes().to_vec();
                        disk.lock().unwrap().insert((f, p), b);
                        w.finish(Ok(())).unwrap();
                    }
                }
            }
        }
        // Pinned pages never change under their pins.
        for (p, g) in &held {
            assert!(g[..] == expect(&truth, *p)[..], "held page {p} changed");
        }
        // No page is cached twice.
        let mut pages: Vec<u64> = c.pages().iter().map(|p| p.page).collect();
        let n = pages.len();
        pages.sort();
        pages.dedup();
        assert_eq!(pages.len(), n, "a page is cached twice");
        assert_in_their_partitions(&c);
    }
    held.clear();
    // Nothing dirty was lost: flush, then the device holds every write.
    for PageId { file: f, page: p } in c.dirty_pages() {
        let w = c.write_back(f, p).unwrap().unwrap();
        let b = w.bytes().to_vec();
        disk.lock().unwrap().insert((f, p), b);
        w.finish(Ok(())).unwrap();
    }
    for (p, v) in &truth {
        assert!(
            disk.lock().unwrap().get(&(7, *p)) == Some(v),
            "write to page {p} lost"
        );
    }
}

proptest::proptest! {
    #![proptest_config(proptest::test_runner::Config::with_cases(48))]

    #[test]
    fn cache_matches_a_reference_model(
        policy in proptest::sample::select(PolicyKind::ALL.to_vec()),
        ops in proptest::collection::vec(op(), 1..160),
    ) {
        run_model(policy, &ops);
    }

    /// The same with the sets divided among two or three partitions (two
    /// or three sets at the start, up to eight).
    #[test]
    fn a_partitioned_cache_matches_the_reference_model(
        policy in proptest::sample::select(PolicyKind::ALL.to_vec()),
        partitions in 2..4usize,
        ops in proptest::collection::vec(op(), 1..160),
    ) {
        run_model_in(policy, partitions, &ops);
    }
}

/// 32 threads on a cache of four 4-page sets: readers check contents, writers
/// add to per-page counters through write-back and eviction, and one more
/// thread grows and shrinks the table the whole time; at the end every
/// increment is in the cache or on the device, and the counters add up.
#[test]
fn stress_32_threads_on_a_few_sets() {
    const PAGES: u64 = 48;
    let c = PageCache::<Os>::new(CacheOptions {
        pin_wait: Duration::from_secs(10),
        ..opts(12, 64, 4, PolicyKind::S3Fifo)
    })
    .unwrap();
    let stop = std::sync::atomic::AtomicBool::new(false);
    let resizes = AtomicU64::new(0);
    let disk: Disk = Mutex::new((0..PAGES).map(|p| ((0, p), vec![0u8; 512])).collect());
    let loads = AtomicU64::new(0);
    let adds: Vec<AtomicU64> = (0..PAGES).map(|_| AtomicU64::new(0)).collect();
    let lookups = AtomicU64::new(0);
    std::thread::scope(|s| {
        let (c, stop, resizes) = (&c, &stop, &resizes);
        s.spawn(move || {
            let mut k = 0usize;
            while !stop.load(Ordering::Relaxed) {
                k += 1;
                let sets = [3, 16, 9, 5, 12][k % 5];
                match c.resize(sets * 4 * 512) {
                    Ok(()) => {
                        resizes.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(Error::ResizeBusy(_)) => {}
                    Err(e) => panic!("resize: {e}"),
                }
            }
        });
        let mut workers = Vec::new();
        for t in 0..32u64 {
            let (disk, loads, adds, lookups) = (&disk, &loads, &adds, &lookups);
            workers.push(s.spawn(move || {
                let mut x = t * 7919 + 1;
                for _ in 0..1000 {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let p = x % PAGES;
                    let load = |f: u32, p: u64, frame: &mut [u8]| {
                        loads.fetch_add(1, Ordering::Relaxed);
                        frame.copy_from_slice(&disk.lock().unwrap()[&(f, p)]);
                        Ok(())
                    };
                    lookups.fetch_add(1, Ordering::Relaxed);
                    if t % 4 == 0 {
                        let mut g = c.get_mut_with(0, p, load, store_to(disk)).unwrap();
                        let v = u64::from_le_bytes(g[..8].try_into().unwrap());
                        g[..8].copy_from_slice(&(v + 1).to_le_bytes());
                        g[8..16].copy_from_slice(&p.to_le_bytes());
                        adds[p as usize].fetch_add(1, Ordering::Relaxed);
                    } else {
                        let g = c.get_with(0, p, load, store_to(disk)).unwrap();
                        let tagp = u64::from_le_bytes(g[8..16].try_into().unwrap());
                        assert!(tagp == p || tagp == 0, "page {p} holds page {tagp}");
                    }
                }
            }));
        }
        for w in workers {
            w.join().unwrap();
        }
        stop.store(true, Ordering::Relaxed);
    });
    assert!(
        resizes.load(Ordering::Relaxed) > 0,
        "the table never resized"
    );
    let st = c.stats();
    let n = lookups.load(Ordering::Relaxed);
    // Each lookup is one hit or one miss, except retries after a write-back,
    // which look up again.
    assert!(st.hits + st.misses >= n, "{st:?} lookups {n}");
    assert_eq!(st.fills, loads.load(Ordering::Relaxed));
    assert_eq!(st.fills, st.misses);
    // A page lives in one of its two sets, never in both.
    let mut held = Vec::new();
    c.core.for_each(|t, _, _| held.push(t));
    let n_held = held.len();
    held.sort_unstable();
    held.dedup();
    assert_eq!(held.len(), n_held, "a page is cached twice");
    for PageId { file: f, page: p } in c.dirty_pages() {
        let w = c.write_back(f, p).unwrap().unwrap();
        let b = w.bytes().to_vec();
        disk.lock().unwrap().insert((f, p), b);
        w.finish(Ok(())).unwrap();
    }
    for p in 0..PAGES {
        let d = disk.lock().unwrap()[&(0, p)].clone();
        let v = u64::from_le_bytes(d[..8].try_into().unwrap());
        assert_eq!(v, adds[p as usize].load(Ordering::Relaxed), "page {p}");
    }
}

/// Optimistic (pin-free) reads race with writers rewriting whole pages, with
/// evictions and refills, and with resizes: a read that reports success never
/// returns a torn page or another page's bytes.
#[test]
fn optimistic_reads_never_return_torn_or_foreign_bytes() {
    const PAGES: u64 = 40;
    let c = PageCache::<Os>::new(CacheOptions {
        pin_wait: Duration::from_secs(10),
        ..opts(16, 64, 4, PolicyKind::Clock)
    })
    .unwrap();
    // Page p: its number in the first 8 bytes, then one repeated version byte.
    let page_bytes = |p: u64, v: u8| {
        let mut b = vec![v; 512];
        b[..8].copy_from_slice(&p.to_le_bytes());
        b
    };
    let disk: Disk = Mutex::new((0..PAGES).map(|p| ((0, p), page_bytes(p, 0))).collect());
    let stop = std::sync::atomic::AtomicBool::new(false);
    let good = AtomicU64::new(0);
    let declined = AtomicU64::new(0);
    std::thread::scope(|s| {
        let (c, disk, stop, good, declined) = (&c, &disk, &stop, &good, &declined);
        for t in 0..3u64 {
            s.spawn(move || {
                let mut x = t * 104_729 + 3;
                let mut k = 0u8;
                while !stop.load(Ordering::Relaxed) {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let p = x % PAGES;
                    k = k.wrapping_add(1);
                    let mut g = c
                        .get_mut_with(0, p, load_from(disk), store_to(disk))
                        .unwrap();
                    // Byte by byte, so a racing copy would catch a half-written page.
                    for b in g[8..].iter_mut() {
                        *b = k;
                        std::hint::black_box(&*b);
                    }
                }
            });
        }
        s.spawn(move || {
            let mut k = 0usize;
            while !stop.load(Ordering::Relaxed) {
                k += 1;
                for PageId { file: f, page: p } in c.dirty_pages().into_iter().take(4) {
                    if let Some(w) = c.write_back(f, p).unwrap() {
                        let b = w.bytes().to_vec();
                        disk.lock().unwrap().insert((f, p), b);
                        w.finish(Ok(())).unwrap();
                    }
                }
                let _ = c.evict(0, k as u64 % PAGES).unwrap();
                if k.is_multiple_of(8) {
                    match c.resize([4, 16, 9][k / 8 % 3] * 4 * 512) {
                        Ok(()) | Err(Error::ResizeBusy(_)) => {}
                        Err(e) => panic!("resize: {e}"),
                    }
                }
            }
        });
        let mut readers = Vec::new();
        for t in 0..6u64 {
            readers.push(s.spawn(move || {
                // A failed check stops the other threads too (no hang).
                struct StopOnPanic<'a>(&'a std::sync::atomic::AtomicBool);
                impl Drop for StopOnPanic<'_> {
                    fn drop(&mut self) {
                        if std::thread::panicking() {
                            self.0.store(true, Ordering::Relaxed);
                        }
                    }
                }
                let _stop = StopOnPanic(stop);
                let mut x = t * 7919 + 11;
                let mut b = vec![0u8; 512];
                for _ in 0..40_000 {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let p = x % PAGES;
                    if c.try_read(0, p, 0, &mut b).unwrap() {
                        let head = u64::from_le_bytes(b[..8].try_into().unwrap());
                        assert_eq!(head, p, "page {p} read as page {head}");
                        assert!(b[8..].iter().all(|&y| y == b[8]), "page {p} read torn");
                        good.fetch_add(1, Ordering::Relaxed);
                    } else {
                        declined.fetch_add(1, Ordering::Relaxed);
                        // Bring it back in, so that later reads can hit.
                        drop(c.get_with(0, p, load_from(disk), store_to(disk)).unwrap());
                    }
                }
            }));
        }
        for r in readers {
            r.join().unwrap();
        }
        stop.store(true, Ordering::Relaxed);
    });
    let (g, d) = (
        good.load(Ordering::Relaxed),
        declined.load(Ordering::Relaxed),
    );
    assert!(
        g > 1000,
        "only {g} optimistic reads succeeded ({d} declined)"
    );
    assert!(
        d > 0,
        "no optimistic read was ever declined: the race was not exercised"
    );
}

/// Model check of the set protocol under Shuttle's random scheduler: three
/// threads hit, miss, fill, pin, write, evict and read optimistically on one
/// four-page set. A pinned page never changes or moves, no page is ever filled
/// twice at once, an optimistic read that succeeds returns one whole version
/// of its page, nothing deadlocks (Shuttle reports a deadlock as a failure).
#[test]
fn shuttle_set_protocol() {
    const PAGES: [u64; 6] = [0, 1, 2, 3, 4, 5];
    shuttle::check_random(|| set_protocol(4, PAGES), 2000);
    shuttle::check_pct(|| set_protocol(4, PAGES), 1000, 3);
}

/// The same on two sets of four pages, where most pages have one candidate
/// set in each: a lookup locks the set that holds its page, or both sets to
/// place it, in the order a resize locks them.
#[test]
fn shuttle_two_set_protocol() {
    let c = PageCache::<Os>::new(opts(8, 8, 4, PolicyKind::Clock)).unwrap();
    assert_eq!(c.sets(), 2);
    // Two pages whose sets are (0, 1), two (1, 0), one (0, 0), one (1, 1):
    // misses lock the two sets in both orders of preference.
    let sets = |p: u64| {
        let h = crate::storage::layout::mix64(tag_of(0, p).unwrap());
        c.core.sets_at(h, c.core.table_word())
    };
    let mut pages = [0u64; 6];
    for (k, want) in [(0, 1), (1, 0), (0, 1), (1, 0), (0, 0), (1, 1)]
        .into_iter()
        .enumerate()
    {
        pages[k] = (0..)
            .find(|&p| sets(p) == want && !pages[..k].contains(&p))
            .unwrap();
    }
    shuttle::check_random(move || set_protocol(8, pages), 2000);
    shuttle::check_pct(move || set_protocol(8, pages), 1000, 3);
}

/// The body of the protocol tests on a cache of `pages` pages in sets of
/// four, with six pages `ids` (named 0 to 5 below).
fn set_protocol(pages: usize, ids: [u64; 6]) {
    {
        let c = Arc::new(
            PageCache::<Shuttle>::new(CacheOptions {
                pin_wait: Duration::from_millis(1),
                ..opts(pages, pages, 4, PolicyKind::Clock)
            })
            .unwrap(),
        );
        let filling: Arc<Vec<AtomicU32>> = Arc::new((0..6).map(|_| AtomicU32::new(0)).collect());
        let disk: Arc<Disk> = Arc::default();
        let mut hs = Vec::new();
        for t in 0..3u64 {
            let (c, filling, disk) = (c.clone(), filling.clone(), disk.clone());
            hs.push(shuttle::thread::spawn(move || {
                let seq = [t, (t + 1) % 6, 5, t + 3, (t + 2) % 6];
                for (k, &l) in seq.iter().enumerate() {
                    let p = ids[l as usize];
                    // The optimistic copy-out read, racing with the fills,
                    // writes and evictions of the other threads: when it
                    // reports a hit, the bytes are one whole version of the
                    // page (its initial bytes, or page 5 as thread 0 writes
                    // it), never a mix and never another page's.
                    let mut b = vec![0u8; c.page_size()];
                    if c.try_read(0, p, 0, &mut b).unwrap() {
                        let whole = b == initial(0, p) || (l == 5 && b.iter().all(|&x| x == 0xAB));
                        assert!(
                            whole,
                            "optimistic read of page {p}: bytes of no version of it"
                        );
                    }
                    let load = |f: u32, p: u64, frame: &mut [u8]| {
                        let n = ids.iter().position(|&i| i == p).unwrap();
                        let was = filling[n].fetch_add(1, Ordering::SeqCst);
                        assert_eq!(was, 0, "page {p} filled twice at once");
                        shuttle::thread::yield_now();
                        load_from(&disk)(f, p, frame)?;
                        filling[n].fetch_sub(1, Ordering::SeqCst);
                        Ok(())
                    };
                    if k == 2 && t == 0 {
                        match c.get_mut_with(0, p, load, store_to(&disk)) {
                            // In two halves, so that an optimistic copy may
                            // fall between them (its copy is split too).
                            Ok(mut g) => {
                                let half = g.len() / 2;
                                g[..half].fill(0xAB);
                                shuttle::thread::yield_now();
                                g[half..].fill(0xAB);
                            }
                            Err(Error::AllPinned { .. }) => {}
                            Err(e) => panic!("{e}"),
                        }
                        continue;
                    }
                    match c.get_with(0, p, load, store_to(&disk)) {
                        Ok(g) => {
                            let snapshot = g.to_vec();
                            shuttle::thread::yield_now();
                            assert!(g[..] == snapshot[..], "pinned page {p} changed");
                            assert_eq!((g.file(), g.page()), (0, p));
                        }
                        Err(Error::AllPinned { .. }) => {}
                        Err(e) => panic!("{e}"),
                    }
                    if k == 3 {
                        let _ = c.evict(0, p);
                    }
                }
            }));
        }
        for h in hs {
            h.join().unwrap();
        }
        // Quiescent: no pins, no I/O left behind.
        assert_quiescent(&c);
    }
}

/// A Shuttle model's cache of one set of four pages (CLOCK, 1 ms pin wait).
fn one_set_under_shuttle() -> Arc<PageCache<Shuttle>> {
    Arc::new(
        PageCache::<Shuttle>::new(CacheOptions {
            pin_wait: Duration::from_millis(1),
            ..opts(4, 4, 4, PolicyKind::Clock)
        })
        .unwrap(),
    )
}

/// No pin, fill, write-back or writer is left in any slot.
fn assert_quiescent<M: Model>(c: &PageCache<M>) {
    c.core.for_each(|_, st, _| {
        assert_eq!(core::pins(st), 0, "a pin leaked");
        assert_eq!(st & (core::PENDING | core::WRITEBACK | core::WRITER), 0);
    });
}

/// Model check of page guards under Shuttle's random scheduler, on one set
/// of four pages: a thread holds a page guard's pin (`Mode::Keep`) across
/// several scheduling points while a second holds the page mutably and
/// writes it in two halves, and a third writes dirty pages back and brings
/// other pages in (so the set must evict). A page with a live guard never
/// changes or moves; a write-back never sees a page half-changed (the writer
/// excludes it); nothing deadlocks and no pin or I/O is left behind.
#[test]
fn shuttle_page_guards() {
    shuttle::check_random(page_guards, 2000);
    shuttle::check_pct(page_guards, 1000, 3);
}

fn page_guards() {
    const P: u64 = 0;
    let c = one_set_under_shuttle();
    let disk: Arc<Disk> = Arc::default();
    let whole = |b: &[u8]| b == initial(0, P) || b.iter().all(|&x| x == 0xAB);
    let reader = {
        let (c, disk) = (c.clone(), disk.clone());
        shuttle::thread::spawn(move || {
            for _ in 0..2 {
                match c.get_with_as(0, P, Mode::Keep, load_from(&disk), store_to(&disk)) {
                    Ok(g) => {
                        let snapshot = g.to_vec();
                        assert!(whole(&snapshot), "a guard shows a half-written page");
                        for _ in 0..3 {
                            shuttle::thread::yield_now();
                            assert!(g[..] == snapshot[..], "a guarded page changed");
                            assert_eq!((g.file(), g.page()), (0, P), "a guarded page moved");
                        }
                    }
                    Err(Error::AllPinned { .. }) => {}
                    Err(e) => panic!("{e}"),
                }
            }
        })
    };
    let writer = {
        let (c, disk) = (c.clone(), disk.clone());
        shuttle::thread::spawn(move || {
            match c.get_mut_with(0, P, load_from(&disk), store_to(&disk)) {
                Ok(mut g) => {
                    let half = g.len() / 2;
                    g[..half].fill(0xAB);
                    shuttle::thread::yield_now();
                    g[half..].fill(0xAB);
                }
                // Readers' pins outlasted the pin wait, or the set was full.
                Err(Error::Busy(_) | Error::AllPinned { .. }) => {}
                Err(e) => panic!("{e}"),
            }
        })
    };
    let flusher = {
        let (c, disk) = (c.clone(), disk.clone());
        shuttle::thread::spawn(move || {
            for q in [P, 1, 2, P, 3, 4, P] {
                if let Some(w) = c.write_back(0, q).unwrap() {
                    let bytes = w.bytes().to_vec();
                    shuttle::thread::yield_now();
                    assert!(
                        w.bytes() == &bytes[..],
                        "a page changed while being written back"
                    );
                    if q == P {
                        assert!(whole(&bytes), "page written back half-changed");
                    }
                    disk.lock().unwrap().insert((0, q), bytes);
                    w.finish(Ok(())).unwrap();
                }
                if q != P {
                    match c.get_with(0, q, load_from(&disk), store_to(&disk)) {
                        Ok(g) => drop(g),
                        Err(Error::AllPinned { .. }) => {}
                        Err(e) => panic!("{e}"),
                    }
                }
            }
        })
    };
    for h in [reader, writer, flusher] {
        h.join().unwrap();
    }
    assert_quiescent(&c);
}

/// Model check of the translation caches' pin-free reads under Shuttle's
/// random scheduler, on one set of four pages: a reader sights page 0, reads
/// its bytes (a scheduling point in between) and keeps them only if the
/// sighting still holds; another thread writes page 0 in two halves and a
/// third brings pages 1 to 5 in and evicts page 0, so the frame is reused.
/// Bytes kept are always one whole version of page 0, never a mix, another
/// page's or a half-written one.
#[test]
fn shuttle_sightings() {
    shuttle::check_random(sightings, 2000);
    shuttle::check_pct(sightings, 1000, 3);
}

/// Bring page `q` of file 0 in and let it go (every page pinned: nothing).
fn bring_in(c: &PageCache<Shuttle>, disk: &Disk, q: u64) {
    match c.get_with(0, q, load_from(disk), store_to(disk)) {
        Ok(g) => drop(g),
        Err(Error::AllPinned { .. }) => {}
        Err(e) => panic!("{e}"),
    }
}

fn sightings() {
    const P: u64 = 0;
    let c = one_set_under_shuttle();
    let disk: Arc<Disk> = Arc::default();
    let whole = |b: &[u8]| b == initial(0, P) || b.iter().all(|&x| x == 0xAB);
    drop(c.get_with(0, P, load_from(&disk), store_to(&disk)).unwrap());
    let reader = {
        let c = c.clone();
        shuttle::thread::spawn(move || {
            for _ in 0..3 {
                if let Some(s) = c.sight(0, P).unwrap() {
                    let mut b = vec![0u8; 512];
                    for half in [0, 256] {
                        // SAFETY: the frame stays mapped; the bytes are kept only if the sighting still holds after the copy.
                        unsafe {
                            std::ptr::copy_nonoverlapping(
                                s.frame.add(half),
                                b.as_mut_ptr().add(half),
                                256,
                            )
                        };
                        shuttle::thread::yield_now();
                    }
                    if core::still_at(s.epoch, s.ep) {
                        assert!(whole(&b), "a sighting kept bytes of no version of page {P}");
                    }
                }
                shuttle::thread::yield_now();
            }
        })
    };
    let writer = {
        let (c, disk) = (c.clone(), disk.clone());
        shuttle::thread::spawn(move || {
            match c.get_mut_with(0, P, load_from(&disk), store_to(&disk)) {
                Ok(mut g) => {
                    g[..256].fill(0xAB);
                    shuttle::thread::yield_now();
                    g[256..].fill(0xAB);
                }
                Err(Error::AllPinned { .. }) => {}
                Err(e) => panic!("{e}"),
            }
        })
    };
    let evictor = {
        let (c, disk) = (c.clone(), disk.clone());
        shuttle::thread::spawn(move || {
            for q in 1..6u64 {
                if let Some(w) = c.write_back(0, P).unwrap() {
                    let b = w.bytes().to_vec();
                    disk.lock().unwrap().insert((0, P), b);
                    w.finish(Ok(())).unwrap();
                }
                let _ = c.evict(0, P);
                bring_in(&c, &disk, q);
            }
        })
    };
    for h in [reader, writer, evictor] {
        h.join().unwrap();
    }
}

#[test]
fn models_differ_only_in_their_word() {
    // The seam is what the Shuttle test swaps: same layout rules for both.
    let a = setmem::SetLayout::new::<Os>(12, 0);
    assert_eq!(a.assoc, 12);
    fn words<M: Model>() -> usize {
        std::mem::size_of::<M::W>()
    }
    assert_eq!(words::<Os>(), 4);
    assert!(words::<Shuttle>() >= 4);
}

/// A table of any size (7 sets here, not a power of two) gives every set an
/// equal share of the hash space; growing by one set splits exactly one.
#[test]
fn sets_of_any_table_size_share_the_hash_space_evenly() {
    let c = PageCache::<Os>::new(opts(28, 64, 4, PolicyKind::Clock)).unwrap();
    assert_eq!(c.sets(), 7);
    let count = |c: &PageCache<Os>| {
        let mut per = vec![0u32; c.sets()];
        for p in 0..70_000u64 {
            let t = tag_of(0, p).unwrap();
            per[c
                .core
                .index(crate::storage::layout::mix64(t), c.core.table_word())] += 1;
        }
        per
    };
    for n in count(&c) {
        assert!(
            (9_000..11_000).contains(&n),
            "a set got {n} of 70000 hashes"
        );
    }
    c.resize(32 * 512).unwrap();
    assert_eq!(c.sets(), 8);
    let per = count(&c);
    // Set 0 split into sets 0 and 7; the others kept their share.
    assert!(
        (4_000..6_000).contains(&per[0]) && (4_000..6_000).contains(&per[7]),
        "{per:?}"
    );
    for n in &per[1..7] {
        assert!((9_000..11_000).contains(n), "{per:?}");
    }
}

/// `PageCache::check` accepts exactly the options `PageCache::new` accepts,
/// with the same error, and makes nothing.
#[test]
fn check_agrees_with_new() {
    let base = CacheOptions::default();
    let set = base.assoc * base.page_size;
    let cases = [
        CacheOptions { size: 0, ..base },
        CacheOptions {
            size: set - 1,
            ..base
        },
        CacheOptions { size: set, ..base },
        CacheOptions {
            size: 1 << 20,
            ..base
        },
        CacheOptions {
            size: 1 << 20,
            assoc: 3,
            ..base
        },
        CacheOptions {
            size: 1 << 20,
            page_size: 3000,
            ..base
        },
        // More than any machine this runs on.
        CacheOptions {
            size: 1 << 60,
            ..base
        },
    ];
    for o in cases {
        let checked = PageCache::<Os>::check(&o).map_err(|e| e.to_string());
        let made = PageCache::<Os>::new(o.clone())
            .map(|_| ())
            .map_err(|e| e.to_string());
        assert_eq!(checked, made, "size {} assoc {}", o.size, o.assoc);
    }
}

/// One thread replaying a trace through the real cache gets exactly the hits
/// that the simulator's model of the same sets gets: the cache runs the very
/// policy code, including the adaptive policy's shared duel. So it does with
/// its sets divided among partitions, whose model moves each page's second
/// set into its partition as the cache does.
#[test]
fn one_thread_hits_equal_the_simulators() {
    // A mix that makes the adaptive policy change its mind: a skewed phase,
    // a loop larger than the cache, then the skewed phase again.
    let mut trace = Vec::new();
    let mut x = 7u64;
    let mut skewed = |n: usize, trace: &mut Vec<u64>| {
        for _ in 0..n {
            x = crate::util::mix::mix64(x);
            trace.push((x % 1000) * (x >> 62) % 700);
        }
    };
    skewed(20_000, &mut trace);
    for _ in 0..30 {
        trace.extend(0..900u64);
    }
    skewed(20_000, &mut trace);
    let kinds = [
        PolicyKind::Adaptive,
        PolicyKind::Lirs,
        PolicyKind::Gclock,
        PolicyKind::S3Fifo,
    ];
    // 40 sets; with three partitions, 39 (a multiple of three).
    for (kind, partitions) in kinds.iter().flat_map(|&k| [(k, 1), (k, 2), (k, 3)]) {
        let c = PageCache::<Os>::new(CacheOptions {
            partitions,
            ..opts(480, 480, 12, kind)
        })
        .unwrap();
        assert_eq!(c.sets(), 40 - 40 % partitions);
        let mut model = policy::SaModel::partitioned(kind, 12, c.sets(), partitions);
        let mut model_hits = 0;
        for &p in &trace {
            drop(
                c.get_with(0, p, |_, _, _| Ok(()), |_, _, _| Ok(()))
                    .unwrap(),
            );
            model_hits += u64::from(model.access(tag_of(0, p).unwrap()));
        }
        let s = c.stats();
        assert_eq!(s.hits + s.misses, trace.len() as u64);
        assert_eq!(s.hits, model_hits, "{kind}, {partitions} partitions");
        assert!(model_hits > 10_000, "{kind}: {model_hits}");
    }
}

/// A loop larger than the cache, read through the real cache with the
/// default policy: LIRS wins the duel and turns admission on, so misses that
/// its sets do not admit are served from frames of their own, with the right
/// bytes, and every slot keeps a page of the loop; the hits equal the
/// simulator's, and a writer's page is still always admitted.
#[test]
fn a_loop_larger_than_the_cache_is_served_without_slots() {
    let c = PageCache::<Os>::new(opts(480, 480, 12, PolicyKind::Adaptive)).unwrap();
    let disk = Disk::default();
    let mut model = policy::SaModel::new(PolicyKind::Adaptive, 12, c.sets());
    let (mut hits, mut late_hits) = (0u64, 0u64);
    let rounds = 40;
    for round in 0..rounds {
        for p in 0..900u64 {
            let before = c.stats().hits;
            let g = c.get_with(0, p, load_from(&disk), store_to(&disk)).unwrap();
            assert_eq!(&g[..], &initial(0, p)[..], "page {p}, round {round}");
            drop(g);
            let hit = model.access(tag_of(0, p).unwrap());
            assert_eq!(
                c.stats().hits - before,
                u64::from(hit),
                "page {p}, round {round}"
            );
            hits += u64::from(hit);
            if round >= rounds - 5 {
                late_hits += u64::from(hit);
            }
        }
    }
    assert!(model.duel().admission(), "admission on for a loop");
    let s = c.stats();
    assert_eq!(s.hits, hits);
    assert!(s.passed > 0 && s.passed < s.misses, "{s:?}");
    // Late rounds: every one of the 480 slots holds a loop page that hits
    // (all but one of each set's 12 without admission: 440).
    assert!(late_hits > 5 * 470, "{late_hits} hits in 5 rounds");
    // A page served without a slot is not cached; a written one always is.
    // (Admission may take some: read absent pages until one is passed.)
    let mut passed = 0;
    for p in 0..900u64 {
        if c.core.state_of(tag_of(0, p).unwrap()).is_some() {
            continue;
        }
        let before = c.stats().passed;
        drop(c.get_with(0, p, load_from(&disk), store_to(&disk)).unwrap());
        if c.stats().passed > before {
            assert!(c.core.state_of(tag_of(0, p).unwrap()).is_none(), "page {p}");
            passed += 1;
            break;
        }
    }
    assert_eq!(
        passed, 1,
        "no loop page out of the cache was served without a slot"
    );
    let q = (0..900u64)
        .find(|&q| c.core.state_of(tag_of(0, q).unwrap()).is_none())
        .unwrap();
    let mut w = c
        .get_mut_with(0, q, load_from(&disk), store_to(&disk))
        .unwrap();
    w[0] ^= 0xff;
    drop(w);
    assert!(c.core.state_of(tag_of(0, q).unwrap()).is_some());
    let mut b = [0u8; 1];
    assert!(c.try_read(0, q, 0, &mut b).unwrap());
    assert_eq!(b[0], initial(0, q)[0] ^ 0xff);
}

/// Cold pages (read ahead, a stream's, advised away) are the victims while
/// any is clean and idle in the candidate sets; a plain read warms one.
#[test]
fn cold_pages_go_first_and_a_plain_read_warms_them() {
    // LRU: without the cold rule, the warm pages (used before the cold ones
    // came in) would be the victims.
    let c = PageCache::<Os>::new(opts(96, 96, 12, PolicyKind::Lru)).unwrap();
    let disk = Disk::default();
    let get = |p: u64| drop(c.get_with(0, p, load_from(&disk), store_to(&disk)).unwrap());
    // Half the cache warm, then a quarter claimed cold by readahead.
    for p in 0..48 {
        get(p);
    }
    for p in 1000..1024 {
        let mut f = c.claim_ahead(0, p).unwrap().expect("absent, room");
        f.frame_mut().copy_from_slice(&initial(0, p));
        drop(f.finish(Ok(())).unwrap());
    }
    assert!(
        c.claim_ahead(0, 5).unwrap().is_none(),
        "present: left alone"
    );
    let cold = |p: u64| {
        c.core
            .state_of(tag_of(0, p).unwrap())
            .is_some_and(|v| v & core::COLD != 0)
    };
    assert!((1000..1024).all(cold) && !(0..48).any(cold));
    // A plain read warms one; advice cools a warm one.
    let mut b = [0u8; 8];
    assert!(c.try_read(0, 1000, 0, &mut b).unwrap());
    assert!(!cold(1000));
    assert!(c.make_cold(0, 7).unwrap() && cold(7));
    // New pages fill the rest of the cache, then evict: the cold ones first.
    for p in 2000..2040 {
        get(p);
    }
    let have: std::collections::HashSet<u64> = c.pages().into_iter().map(|p| p.page).collect();
    let warm_left = (0..48).filter(|p| *p != 7 && have.contains(p)).count();
    let cold_left =
        (1001..1024).filter(|p| have.contains(p)).count() + usize::from(have.contains(&7));
    assert!(
        warm_left >= 44,
        "warm pages left: {warm_left} of 47; cold left: {cold_left} of 24"
    );
}

/// A hit without a pin on a cold page warms it only while its slot still
/// holds it: a page read ahead into the slot between the hit's checks and
/// its warming (the cold page evicted meanwhile) stays cold, first to go.
#[test]
fn a_hit_on_a_cold_page_leaves_the_next_cold_page_in_its_slot_cold() {
    let c = Arc::new(PageCache::<Os>::new(opts(4, 4, 4, PolicyKind::Lru)).unwrap());
    let disk: Disk = Mutex::default();
    let ahead = |c: &PageCache<Os>, p: u64| {
        let mut f = c.claim_ahead(0, p).unwrap().expect("absent, room");
        f.frame_mut().copy_from_slice(&initial(0, p));
        drop(f.finish(Ok(())).unwrap());
    };
    // Pages 1, 2 and 3 stay pinned: page 0, read ahead, has the one free slot.
    let held: Vec<_> = (1..4)
        .map(|p| c.get_with(0, p, load_from(&disk), store_to(&disk)).unwrap())
        .collect();
    ahead(&c, 0);
    let cold = |c: &PageCache<Os>, p: u64| {
        c.core
            .state_of(tag_of(0, p).unwrap())
            .is_some_and(|v| v & core::COLD != 0)
    };
    assert!(cold(&c, 0));
    let ahead_of_warming = c.clone();
    let ran = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let ran2 = ran.clone();
    core::BEFORE_COLD_HIT_WARMS.arm(
        &c.core as *const _ as usize,
        Box::new(move || {
            ran2.store(true, Ordering::Release);
            ahead(&ahead_of_warming, 100);
        }),
    );
    let mut b = [0u8; 8];
    assert!(c.try_read(0, 0, 0, &mut b).unwrap());
    assert!(ran.load(Ordering::Acquire), "the hit took another path");
    assert!(
        c.core.state_of(tag_of(0, 0).unwrap()).is_none(),
        "page 0 was not evicted for page 100"
    );
    assert!(
        cold(&c, 100),
        "a page read ahead into the slot was warmed by a hit on the page before it"
    );
    drop(held);
}

/// A page coming in cold (read ahead, a stream's miss) that takes the slot
/// of a cold page nobody used leaves the set's policy state as it was: the
/// policy is told neither of the eviction nor of the insertion (so keeps no
/// ghost of the page that left). A page that comes in warm goes through the
/// policy as before.
#[test]
fn a_cold_page_taking_a_cold_pages_slot_leaves_the_policy_untold() {
    // One set of 12 slots, under LIRS, which keeps ghosts.
    let c = PageCache::<Os>::new(opts(12, 12, 12, PolicyKind::Lirs)).unwrap();
    let disk = Disk::default();
    let ahead = |p: u64| {
        let mut f = c.claim_ahead(0, p).unwrap().expect("absent, room");
        f.frame_mut().copy_from_slice(&initial(0, p));
        drop(f.finish(Ok(())).unwrap());
    };
    let policy = || {
        c.core.lock(0);
        let state = {
            // SAFETY: set 0 is locked until the unlock below.
            let g = unsafe { c.core.locked(0) };
            (
                g.st.bytes.to_vec(),
                *g.st.word,
                g.st.ghost_tags.to_vec(),
                g.st.ghost_bytes.to_vec(),
            )
        };
        c.core.unlock(0);
        state
    };
    let cached = |p: u64| c.core.state_of(tag_of(0, p).unwrap()).is_some();
    for p in 0..12 {
        ahead(p);
    }
    let before = policy();
    // Six pages read ahead into the full set of cold pages: each takes a
    // cold page's slot (the oldest), and the policy hears of none of it
    // (told, LIRS would have moved the six to the top of its stack).
    for p in 100..106 {
        ahead(p);
    }
    assert!((100..106).all(cached) && !(0..6).any(cached));
    assert_eq!(
        policy(),
        before,
        "a cold page for a cold page changed the policy"
    );
    // A plain miss takes a cold page's slot as a warm page: told.
    drop(c.get_with(0, 0, load_from(&disk), store_to(&disk)).unwrap());
    assert_ne!(policy(), before, "a warm page came in untold");
}

/// A stream's pin of a cold page (a page guard, a paged array's chunk in a
/// scan) leaves the page as it came in: cold, with the stamp of its claim,
/// which orders the cold pages' eviction (the first in goes first); a plain
/// pin warms the page and renews its stamp. Renewed by the stream's pins,
/// the stamps of the pages a scan had just read were younger than those of
/// the pages read ahead of it, which readahead's next claims then evicted.
#[test]
fn a_streams_pin_leaves_a_cold_page_as_it_came_in() {
    let c = PageCache::<Os>::new(opts(960, 960, 12, PolicyKind::Lru)).unwrap();
    let disk = Disk::default();
    for p in [1000, 1001] {
        let mut f = c.claim_ahead(0, p).unwrap().expect("absent, room");
        f.frame_mut().copy_from_slice(&initial(0, p));
        drop(f.finish(Ok(())).unwrap());
    }
    let stamp = |p: u64| {
        let tag = tag_of(0, p).unwrap();
        let (s, i) = c.core.find(mix64(tag), tag).expect("cached");
        c.core.stamp(s, i).load(Ordering::Relaxed)
    };
    let cold = |p: u64| {
        c.core
            .state_of(tag_of(0, p).unwrap())
            .is_some_and(|v| v & core::COLD != 0)
    };
    let claimed = stamp(1000);
    assert_eq!(stamp(1001), claimed);
    // Misses move the clock on by a few epochs (no page is evicted).
    for p in 0..200 {
        drop(c.get_with(0, p, load_from(&disk), store_to(&disk)).unwrap());
    }
    for (p, mode) in [(1000, Mode::Stream), (1001, Mode::Normal)] {
        let g = c
            .get_with_as(0, p, mode, load_from(&disk), store_to(&disk))
            .unwrap();
        assert_eq!(&g[..], &initial(0, p)[..]);
    }
    assert!(
        cold(1000) && stamp(1000) == claimed,
        "the stream's pin changed the page"
    );
    assert!(
        !cold(1001) && stamp(1001) != claimed,
        "a plain pin renews the page"
    );
}

/// Advice over a range longer than the cache holds walks the sets instead
/// of looking up every page of the range: the same pages turn cold as page
/// by page, only those of the file and the range, and never a dirty one.
#[test]
fn a_range_made_cold_by_a_walk_matches_page_by_page() {
    let disk = Disk::default();
    let build = || {
        let c = PageCache::<Os>::new(opts(96, 96, 12, PolicyKind::Lru)).unwrap();
        for p in 0..40 {
            drop(c.get_with(0, p, load_from(&disk), store_to(&disk)).unwrap());
        }
        for p in 0..20 {
            drop(c.get_with(1, p, load_from(&disk), store_to(&disk)).unwrap());
        }
        let mut w = c
            .get_mut_with(0, 30, load_from(&disk), store_to(&disk))
            .unwrap();
        w[0] ^= 1;
        drop(w);
        c
    };
    let cold_of = |c: &PageCache<Os>| -> std::collections::BTreeSet<(u32, u64)> {
        c.pages()
            .into_iter()
            .filter(|p| {
                c.core
                    .state_of(tag_of(p.file, p.page).unwrap())
                    .is_some_and(|v| v & core::COLD != 0)
            })
            .map(|p| (p.file, p.page))
            .collect()
    };
    // Longer than the cache's 96 pages: the walk.
    let walked = build();
    let n_walked = walked.make_cold_range(0, 10, 1 << 30).unwrap();
    // Within it: page by page.
    let looked = build();
    let n_looked = looked.make_cold_range(0, 10, 40).unwrap();
    let want: std::collections::BTreeSet<(u32, u64)> = walked
        .pages()
        .into_iter()
        .filter(|p| p.file == 0 && (10..40).contains(&p.page) && !p.dirty)
        .map(|p| (p.file, p.page))
        .collect();
    assert!(want.len() >= 20, "most of pages 10..40 cached: {want:?}");
    assert_eq!(cold_of(&walked), want);
    assert_eq!(cold_of(&looked), want);
    assert_eq!((n_walked, n_looked), (want.len(), want.len()));
    assert_eq!(
        walked.make_cold_range(0, 7, 7).unwrap(),
        0,
        "an empty range"
    );
}

/// Model check of stores into pinned frames under Shuttle's random
/// scheduler, on one set of four pages: a thread stores three versions of a
/// word of page 0, each under a pin taken on a sighting (`pin_seen`), or by
/// a lookup when the sighting is gone, and let go with `release_stored`;
/// a second writes the page back over and over, evicts it and brings other
/// pages in; a third reads the word twice under a pin taken on a sighting
/// and let go with `release_seen` (a paged array's read in place). Whatever
/// the order, the last version is in the cache or on the disk at the end (no
/// store is lost to a write-back that cleared the dirty flag after it, nor
/// to an eviction that judged the page clean before it), a pinned read sees
/// a version of the word that was stored and never an older one the second
/// time, and no pin or I/O is left behind.
#[test]
fn shuttle_stores_into_pinned_frames() {
    shuttle::check_random(stores_into_pinned_frames, 2000);
    shuttle::check_pct(stores_into_pinned_frames, 1000, 3);
}

fn stores_into_pinned_frames() {
    const P: u64 = 0;
    let c = one_set_under_shuttle();
    let disk: Arc<Disk> = Arc::default();
    drop(c.get_with(0, P, load_from(&disk), store_to(&disk)).unwrap());
    // SAFETY: frames are page-aligned and stay mapped for the cache's life; the word is changed only by atomic stores while pinned.
    let word = |p: *mut u8| unsafe { AtomicU64::from_ptr(p.cast()) };
    let storer = {
        let (c, disk) = (c.clone(), disk.clone());
        shuttle::thread::spawn(move || {
            for k in 1..=3u64 {
                let seen = c.sight(0, P).unwrap();
                match seen {
                    Some(s) if c.pin_seen(s.state, s.epoch, s.v, s.ep) => {
                        word(s.frame.cast_mut()).store(k, Ordering::Relaxed);
                        shuttle::thread::yield_now();
                        c.release_stored(s.state, 0);
                    }
                    _ => loop {
                        match c.get_with(0, P, load_from(&disk), store_to(&disk)) {
                            Ok(g) => {
                                word(g.frame_ptr()).store(k, Ordering::Relaxed);
                                shuttle::thread::yield_now();
                                g.release_stored();
                                break;
                            }
                            Err(Error::AllPinned { .. }) => shuttle::thread::yield_now(),
                            Err(e) => panic!("{e}"),
                        }
                    },
                }
            }
        })
    };
    let evictor = {
        let (c, disk) = (c.clone(), disk.clone());
        shuttle::thread::spawn(move || {
            for q in 1..6u64 {
                if let Some(w) = c.write_back(0, P).unwrap() {
                    // Only the first word changes: read it atomically, as
                    // the stores write it.
                    let mut b = initial(0, P);
                    let x = word(w.frame_ptr()).load(Ordering::Relaxed);
                    b[..8].copy_from_slice(&x.to_le_bytes());
                    shuttle::thread::yield_now();
                    disk.lock().unwrap().insert((0, P), b);
                    w.finish(Ok(())).unwrap();
                }
                let _ = c.evict(0, P);
                bring_in(&c, &disk, q);
            }
        })
    };
    let reader = {
        let c = c.clone();
        let first = u64::from_le_bytes(initial(0, P)[..8].try_into().unwrap());
        shuttle::thread::spawn(move || {
            for _ in 0..2 {
                if let Some(s) = c.sight(0, P).unwrap()
                    && c.pin_seen(s.state, s.epoch, s.v, s.ep)
                {
                    let a = word(s.frame.cast_mut()).load(Ordering::Relaxed);
                    shuttle::thread::yield_now();
                    let b = word(s.frame.cast_mut()).load(Ordering::Relaxed);
                    c.release_seen(s.state);
                    assert!(a == first || (1..=3).contains(&a), "read {a:#x}");
                    assert!(b == a || (a == first || a < b) && b <= 3, "{a} then {b}");
                }
                shuttle::thread::yield_now();
            }
        })
    };
    for h in [storer, evictor, reader] {
        h.join().unwrap();
    }
    let g = c.get_with(0, P, load_from(&disk), store_to(&disk)).unwrap();
    let v = u64::from_le_bytes(g[..8].try_into().unwrap());
    assert_eq!(v, 3, "the last store of page {P} was lost");
    drop(g);
    assert_quiescent(&c);
}

/// Model check of stores into one pinned page racing syncs under Shuttle's
/// random scheduler: each of two threads pins page 0, stores its own value
/// into a word of it, lets go with `release_stored` and syncs (takes the
/// file's marked sets and writes back the pages found), while a third
/// thread syncs twice. Whichever store comes second finds the page dirty
/// already and marks nothing, and a sync can take the first store's mark
/// before that store makes the page dirty; still, after a thread's sync,
/// its value is on the disk unless a later store replaced it in the cache.
#[test]
fn shuttle_a_sync_after_a_store_writes_it_while_other_stores_and_syncs_race() {
    shuttle::check_random(stores_then_syncs, 2000);
    shuttle::check_pct(stores_then_syncs, 1000, 3);
}

fn stores_then_syncs() {
    const P: u64 = 0;
    let c = one_set_under_shuttle();
    let disk: Arc<Disk> = Arc::default();
    drop(c.get_with(0, P, load_from(&disk), store_to(&disk)).unwrap());
    let first_word = |b: &[u8]| u64::from_le_bytes(b[..8].try_into().unwrap());
    assert!(
        first_word(&initial(0, P)) > 2,
        "stored values must differ from the page's own"
    );
    // SAFETY: frames are page-aligned and stay mapped for the cache's life; the word is changed only by atomic stores while pinned.
    let word = |p: *mut u8| unsafe { AtomicU64::from_ptr(p.cast()) };
    // One sync of the file at a time, as `sync` goes, through a lock the
    // scheduler sees. A sync writes back every page it finds, waiting while
    // one is busy (pinned by a storer) until it is written.
    let syncs = Arc::new(shuttle::sync::Mutex::new(()));
    let sync = move |c: &PageCache<Shuttle>, disk: &Disk| {
        let (pages, _) = c.take_pending_of(0);
        for q in pages {
            while c.pending_pages().contains(&(0, q)) {
                match c.write_back(0, q).unwrap() {
                    Some(w) => {
                        let mut b = initial(0, q);
                        let x = word(w.frame_ptr()).load(Ordering::Relaxed);
                        b[..8].copy_from_slice(&x.to_le_bytes());
                        disk.lock().unwrap().insert((0, q), b);
                        w.finish(Ok(())).unwrap();
                    }
                    None => shuttle::thread::yield_now(),
                }
            }
        }
    };
    let storers: Vec<_> = (1..=2u64)
        .map(|k| {
            let (c, disk, syncs) = (c.clone(), disk.clone(), syncs.clone());
            shuttle::thread::spawn(move || {
                let g = c.get_with(0, P, load_from(&disk), store_to(&disk)).unwrap();
                word(g.frame_ptr()).store(k, Ordering::Relaxed);
                g.release_stored();
                let _one = syncs.lock().unwrap();
                sync(&c, &disk);
                let g = c.get_with(0, P, load_from(&disk), store_to(&disk)).unwrap();
                if word(g.frame_ptr()).load(Ordering::Relaxed) == k {
                    let on_disk = disk.lock().unwrap().get(&(0, P)).map(|b| first_word(b));
                    assert_eq!(
                        on_disk,
                        Some(k),
                        "a sync after store {k} left it off the disk"
                    );
                }
            })
        })
        .collect();
    let syncer = {
        let (c, disk, syncs) = (c.clone(), disk.clone(), syncs.clone());
        shuttle::thread::spawn(move || {
            for _ in 0..2 {
                let _one = syncs.lock().unwrap();
                sync(&c, &disk);
            }
        })
    };
    for h in storers.into_iter().chain([syncer]) {
        h.join().unwrap();
    }
    assert_quiescent(&c);
}

/// A sync finds a file's dirty pages through the sets they marked: after any
/// mix of writes, stores in place, write-backs that pass or fail, re-dirtying
/// and resizes, the pages `take_pending_of` returns for a file include every
/// page of it a walk of the whole cache finds dirty or under write-back.
#[test]
fn a_sync_finds_every_dirty_page_through_the_marked_sets() {
    use proptest::prelude::*;
    let cfg = ProptestConfig {
        cases: 64,
        ..ProptestConfig::default()
    };
    let step = prop_oneof![
        (0u32..3, 0u64..200).prop_map(|(f, p)| (0u8, f, p)),
        (0u32..3, 0u64..200).prop_map(|(f, p)| (1u8, f, p)),
        (0u32..3, 0u64..200).prop_map(|(f, p)| (2u8, f, p)),
        (0u32..3, 0u64..200).prop_map(|(f, p)| (3u8, f, p)),
        (0u32..3, 0u64..4).prop_map(|(f, p)| (4u8, f, p)),
        (0u32..3, 0u64..2).prop_map(|(f, p)| (5u8, f, p)),
    ];
    proptest!(cfg, |(steps in proptest::collection::vec(step, 1..300))| {
        let cache = PageCache::<Os>::new(opts(96, 384, 4, PolicyKind::Lru)).unwrap();
        let disk: Disk = Mutex::new(HashMap::new());
        for (op, f, p) in steps {
            match op {
                // A write through a write guard.
                0 => {
                    let mut g = cache.get_mut_with(f, p, load_from(&disk), store_to(&disk)).unwrap();
                    g[0] = g[0].wrapping_add(1);
                }
                // A write-back that passes, or one that fails (the page is dirty again).
                1 | 2 => {
                    if let Some(w) = cache.write_back(f, p).unwrap() {
                        let r = if op == 1 {
                            Ok(())
                        } else {
                            Err(Error::InvalidArgument("a failed write".into()))
                        };
                        let _ = w.finish(r);
                    }
                }
                // Written again after a failed fsync.
                3 => {
                    let _ = cache.mark_dirty(f, p);
                }
                // Grow or shrink by a few sets (pages move with their state).
                4 => {
                    let pages = cache.capacity_pages();
                    let to = if p % 2 == 0 { pages + 8 * p as usize } else { pages.saturating_sub(8 * p as usize) };
                    let _ = cache.resize(to.clamp(96, 384) * 512);
                }
                // A sync of file `f`: everything dirty of it is found.
                _ => {
                    let mut want: Vec<u64> = cache
                        .pending_pages()
                        .into_iter()
                        .filter(|&(x, _)| x == f)
                        .map(|(_, q)| q)
                        .collect();
                    want.sort_unstable();
                    let (found, _) = cache.take_pending_of(f);
                    for q in &want {
                        prop_assert!(found.binary_search(q).is_ok(), "page {q} of file {f} dirty but not found");
                    }
                    // Written back: clean until written again; or the
                    // writes fail, and the pages must be found again.
                    for q in found {
                        if let Some(w) = cache.write_back(f, q).unwrap() {
                            let _ = w.finish(if p == 0 {
                                Ok(())
                            } else {
                                Err(Error::InvalidArgument("a failed write".into()))
                            });
                        }
                    }
                }
            }
        }
        // At the end, each file's marks still lead to all of its dirty pages.
        for f in 0..3 {
            let want: Vec<u64> = cache.pending_pages().into_iter().filter(|&(x, _)| x == f).map(|(_, q)| q).collect();
            let (found, _) = cache.take_pending_of(f);
            for q in &want {
                prop_assert!(found.binary_search(q).is_ok(), "page {q} of file {f} dirty but not found at the end");
            }
        }
    });
}

/// A partition's memory can be placed on a node: here the only node, 0. The
/// kernel then reports the preference for an address inside the partition's
/// frames and none for the other partition's.
#[test]
fn a_partitions_memory_prefers_its_node() {
    let nodes = crate::util::nodes::nodes();
    if nodes.is_empty() {
        eprintln!("skipped: no /sys/devices/system/node");
        return;
    }
    let c = PageCache::<Os>::new(CacheOptions {
        partitions: 2,
        ..opts(8 * 64, 8 * 64, 8, PolicyKind::Gclock)
    })
    .unwrap();
    let node = nodes[0].id;
    c.prefer_node(1, node).unwrap();
    let core = &c.core;
    let policy_at = |set: usize| {
        let (mut mode, mut mask) = (0i32, [0u64; 16]);
        const MPOL_F_ADDR: libc::c_ulong = 2;
        // SAFETY: `mode` and a mask of 1024 bits are ours to write; the address is one of the cache's frames.
        let r = unsafe {
            libc::syscall(
                libc::SYS_get_mempolicy,
                &mut mode as *mut i32,
                mask.as_mut_ptr(),
                1024 as libc::c_ulong,
                core.frame(set, 3),
                MPOL_F_ADDR,
            )
        };
        assert_eq!(r, 0, "{}", std::io::Error::last_os_error());
        (mode, mask[node / 64] >> (node % 64) & 1)
    };
    const MPOL_DEFAULT: i32 = 0;
    const MPOL_PREFERRED: i32 = 1;
    // Sets 1, 3, 5, ... are partition 1's; 0, 2, ... partition 0's.
    for s in [1, 33, 63] {
        assert_eq!(policy_at(s), (MPOL_PREFERRED, 1), "set {s}");
    }
    for s in [0, 32, 62] {
        assert_eq!(policy_at(s).0, MPOL_DEFAULT, "set {s}");
    }
    let e = c.prefer_node(0, 5000).unwrap_err();
    assert!(e.to_string().contains("node 5000"), "{e}");
}

/// A page of file 7 cached in the cache's last set (each other page tried
/// is dropped again).
fn page_in_last_set(c: &PageCache<Os>, disk: &Disk) -> u64 {
    let n = c.sets();
    (0..10_000u64)
        .find(|&p| {
            drop(c.get_with(7, p, load_from(disk), store_to(disk)).unwrap());
            let tag = tag_of(7, p).unwrap();
            if c.core
                .find(mix64(tag), tag)
                .is_some_and(|(s, _)| s == n - 1)
            {
                return true;
            }
            c.discard(7, 0).unwrap();
            false
        })
        .expect("a page of file 7 in the last set")
}

/// A discard pass that a shrink overtakes still finds every page: the shrink
/// moves the last set's pages into a set of lower index, which the pass may
/// have visited already. A page missed so stays cached under a file id the
/// caller was told is free (`discard_idle`), and the id's next file would
/// read it as its own.
#[test]
fn a_discard_pass_finds_the_pages_a_shrink_moves_behind_it() {
    let c = Arc::new(PageCache::<Os>::new(opts(8, 64, 4, PolicyKind::Gclock)).unwrap());
    c.resize(64 * 512).unwrap();
    let n = c.sets();
    let disk: Disk = Mutex::default();
    let page = page_in_last_set(&c, &disk);
    // Once the pass has visited the set before the last, a shrink by one set
    // runs (waited for up to 300 ms: with the fix it waits for the pass).
    let (tx, rx) = std::sync::mpsc::channel();
    let shrinker = {
        let c = c.clone();
        move || {
            std::thread::spawn(move || {
                c.resize((n - 1) * 4 * 512).unwrap();
                let _ = tx.send(());
            })
        }
    };
    let handle: Arc<Mutex<Option<std::thread::JoinHandle<()>>>> = Arc::default();
    let h2 = handle.clone();
    let core_addr = &c.core as *const _ as usize;
    core::AFTER_DISCARD_VISIT.arm(
        (core_addr, n - 2),
        Box::new(move || {
            *h2.lock().unwrap() = Some(shrinker());
            let _ = rx.recv_timeout(Duration::from_millis(300));
        }),
    );
    let none_left = c.discard_idle(7);
    handle
        .lock()
        .unwrap()
        .take()
        .expect("the pass reached the hook")
        .join()
        .unwrap();
    assert_eq!(c.sets(), n - 1);
    let left: Vec<u64> = c
        .pages()
        .iter()
        .filter(|p| p.file == 7)
        .map(|p| p.page)
        .collect();
    assert!(
        !none_left || left.is_empty(),
        "discard_idle said file 7 has no page left, but page {page} is cached: {left:?}"
    );
}

/// A walk of the cache (`dirty_pages`) that a shrink overtakes still lists
/// every dirty page: the shrink moves the last set's pages into a set of
/// lower index, which the walk may have visited already, and a flush that
/// writes what `dirty_pages` lists would leave the page dirty before a sync.
#[test]
fn a_walk_lists_the_dirty_pages_a_shrink_moves_behind_it() {
    let c = Arc::new(PageCache::<Os>::new(opts(8, 64, 4, PolicyKind::Gclock)).unwrap());
    c.resize(64 * 512).unwrap();
    let n = c.sets();
    let disk: Disk = Mutex::default();
    let page = page_in_last_set(&c, &disk);
    assert!(c.mark_dirty(7, page).unwrap());
    // Once the walk has visited the set before the last, a shrink by one set
    // runs (waited for up to 300 ms: with the fix it waits for the walk).
    let (tx, rx) = std::sync::mpsc::channel();
    let handle: Arc<Mutex<Option<std::thread::JoinHandle<()>>>> = Arc::default();
    let h2 = handle.clone();
    let c2 = c.clone();
    core::AFTER_WALK_VISIT.arm(
        (&c.core as *const _ as usize, n - 2),
        Box::new(move || {
            *h2.lock().unwrap() = Some(std::thread::spawn(move || {
                c2.resize((n - 1) * 4 * 512).unwrap();
                let _ = tx.send(());
            }));
            let _ = rx.recv_timeout(Duration::from_millis(300));
        }),
    );
    let dirty = c.dirty_pages();
    handle
        .lock()
        .unwrap()
        .take()
        .expect("the walk reached the hook")
        .join()
        .unwrap();
    assert_eq!(c.sets(), n - 1);
    assert!(
        dirty.contains(&crate::PageId { file: 7, page }),
        "dirty page {page} left out: {dirty:?}"
    );
}

/// A lock-free hit checks a slot's word and tag, then pins it with a
/// compare-and-swap of the word. Between the two the slot may change page
/// often enough for its generation to come back to the same value, with
/// another page in it: the pin must not be handed out as the page asked for.
#[test]
fn a_hit_never_pins_a_slot_whose_generation_came_back_with_another_page() {
    let c = Arc::new(PageCache::<Os>::new(opts(4, 4, 4, PolicyKind::Lru)).unwrap());
    let disk: Disk = Mutex::default();
    // Pages 1, 2 and 3 stay pinned: every miss takes the slot of page 0.
    for p in 0..4 {
        drop(c.get_with(3, p, load_from(&disk), store_to(&disk)).unwrap());
    }
    let held: Vec<_> = (1..4)
        .map(|p| c.get_with(3, p, load_from(&disk), store_to(&disk)).unwrap())
        .collect();
    let cycler = c.clone();
    let ran = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let ran2 = ran.clone();
    core::BEFORE_FAST_PIN.arm(
        &c.core as *const _ as usize,
        Box::new(move |v, s, i| {
            ran2.store(true, Ordering::Release);
            let disk: Disk = Mutex::default();
            for p in 100.. {
                assert!(p < 5000, "the slot's word never came back");
                drop(
                    cycler
                        .get_with(3, p, load_from(&disk), store_to(&disk))
                        .unwrap(),
                );
                if cycler.core.state(s, i).load(Ordering::Acquire) == v {
                    break;
                }
            }
        }),
    );
    let g = c.get_with(3, 0, load_from(&disk), store_to(&disk)).unwrap();
    assert!(ran.load(Ordering::Acquire), "the hit took another path");
    assert!(
        g[..] == initial(3, 0)[..],
        "the guard of page 0 holds another page's bytes"
    );
    drop((g, held));
}

/// A dirty page in the second of its candidate sets, looked for (as a sync
/// asks whether it is still to be written) while a shrink moves it into the
/// first set, already visited, and a grow brings the table back to the same
/// word: the search must still find it, or the sync returns with the page
/// dirty in memory only.
#[test]
fn a_search_for_a_page_is_not_fooled_by_a_shrink_and_a_grow_between_its_visits() {
    // Three sets of four after the grow: set 2 splits from set 0.
    let c = Arc::new(PageCache::<Os>::new(opts(8, 12, 4, PolicyKind::Lru)).unwrap());
    c.resize(12 * 512).unwrap();
    let disk: Disk = Mutex::default();
    let sets = |p: u64| {
        let tag = tag_of(3, p).unwrap();
        c.core.sets_now(crate::storage::layout::mix64(tag))
    };
    // Set 0 full of pages whose both candidates are set 0; then a page whose
    // candidates are sets 0 and 2 lands in set 2.
    let fill: Vec<u64> = (0..100_000)
        .filter(|&p| sets(p) == (0, 0))
        .take(4)
        .collect();
    let page = (0..100_000).find(|&p| sets(p) == (0, 2)).unwrap();
    assert_eq!(fill.len(), 4);
    for &p in &fill {
        drop(c.get_with(3, p, load_from(&disk), store_to(&disk)).unwrap());
    }
    c.get_mut_with(3, page, load_from(&disk), store_to(&disk))
        .unwrap()[0] = 0xAB;
    // Room in set 0 for the shrink to move the page into.
    assert!(c.evict(3, fill[0]).unwrap());
    let resizer = c.clone();
    let ran = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let ran2 = ran.clone();
    core::BETWEEN_HOLDER_VISITS.arm(
        &c.core as *const _ as usize,
        Box::new(move || {
            resizer.resize(8 * 512).unwrap();
            resizer.resize(12 * 512).unwrap();
            ran2.store(true, Ordering::Release);
        }),
    );
    let pending = c.write_pending(3, page).unwrap();
    assert!(ran.load(Ordering::Acquire), "the search took another path");
    assert!(pending, "the dirty page was not found");
}

/// Model check of the top of a page's pin count under Shuttle's random
/// scheduler: the page starts one pin below the top; one thread pins it
/// through the locked path (`try_get`), another through the lock-free hit
/// (`get_with`), each twice. A lock-free pin between the locked path's
/// look at the count and its own add must not carry the count past its
/// field: every pin comes back, the count ends where it began.
#[test]
fn shuttle_pins_never_wrap_at_the_top() {
    shuttle::check_random(pins_at_the_top, 1000);
    shuttle::check_pct(pins_at_the_top, 500, 3);
}

fn pins_at_the_top() {
    const P: u64 = 0;
    let c = one_set_under_shuttle();
    let disk: Arc<Disk> = Arc::default();
    drop(c.get_with(0, P, load_from(&disk), store_to(&disk)).unwrap());
    let tag = tag_of(0, P).unwrap();
    let (s, i) = c
        .core
        .find(crate::storage::layout::mix64(tag), tag)
        .unwrap();
    let start = core::MAX_PINS - 1;
    c.core
        .state(s, i)
        .fetch_add(start * core::PIN, Ordering::AcqRel);
    let locked = {
        let c = c.clone();
        shuttle::thread::spawn(move || {
            for _ in 0..2 {
                if let Some(Lookup::Hit(g)) = c.try_get(0, P).unwrap() {
                    assert_eq!(g[..], initial(0, P)[..]);
                    let st = c.core.state(s, i).load(Ordering::Acquire);
                    assert!(core::pins(st) > 0, "a held page counts no pin");
                }
            }
        })
    };
    let free = {
        let (c, disk) = (c.clone(), disk.clone());
        shuttle::thread::spawn(move || {
            for _ in 0..2 {
                let g = c.get_with(0, P, load_from(&disk), store_to(&disk)).unwrap();
                assert_eq!(g[..], initial(0, P)[..]);
            }
        })
    };
    locked.join().unwrap();
    free.join().unwrap();
    let st = c.core.state(s, i).load(Ordering::Acquire);
    assert_eq!(core::pins(st), start, "the pin count wrapped");
    assert_ne!(st & core::VALID, 0);
}

/// A write-back's pin is capped as every other pin is. Lock-free readers may
/// pin a dirty victim between the look that found it unpinned and the start
/// of its write-back (here the policy's victim call, under the set's lock,
/// fills every page's pin count to the top, as 65,535 readers would); the
/// lookup then waits for a pin to go instead of adding one past the top,
/// which carried out of the count and left the page under write-back
/// looking unpinned (and evictable under its readers once it ended).
#[test]
fn a_write_back_never_carries_a_full_pin_count_past_its_top() {
    let c = Arc::new(PageCache::<Os>::new(opts(4, 4, 4, PolicyKind::Lru)).unwrap());
    let disk = Disk::default();
    for p in 0..4 {
        let mut g = c
            .get_mut_with(0, p, load_from(&disk), store_to(&disk))
            .unwrap();
        g.fill(p as u8 + 1);
    }
    let slots: Vec<(usize, usize)> = (0..4)
        .map(|p| {
            let tag = tag_of(0, p).unwrap();
            c.core.find(mix64(tag), tag).unwrap()
        })
        .collect();
    let top = core::MAX_PINS * core::PIN;
    let key = &c.core.policy as *const PolicyKind as usize;
    let (c2, slots2) = (c.clone(), slots.clone());
    let (tx, rx) = std::sync::mpsc::channel();
    core::IN_POLICY_CALL.arm(
        key,
        Box::new(move || {
            for &(s, i) in &slots2 {
                c2.core.state(s, i).fetch_add(top, Ordering::AcqRel);
            }
            // The readers let go a little later, on another thread.
            let c3 = c2.clone();
            tx.send(std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(50));
                for &(s, i) in &slots2 {
                    let old = c3.core.state(s, i).fetch_sub(top, Ordering::AcqRel);
                    c3.core.wake_if(s, i, old);
                }
            }))
            .unwrap();
        }),
    );
    let Lookup::WriteBack(w) = c.get(0, 12).unwrap() else {
        panic!("expected a write-back of a dirty victim")
    };
    let (s, i) = slots[w.page() as usize];
    let v = c.core.state(s, i).load(Ordering::Acquire);
    assert!(
        core::pins(v) >= 1 && v & core::WRITEBACK != 0,
        "a page under write-back shows {} pins (state {v:#x})",
        core::pins(v)
    );
    w.finish(Ok(())).unwrap();
    rx.recv().unwrap().join().unwrap();
    for &(s, i) in &slots {
        let v = c.core.state(s, i).load(Ordering::Acquire);
        assert_eq!(
            core::pins(v),
            0,
            "slot {i} of set {s} ended with pins: {v:#x}"
        );
    }
}

/// A readahead claim that finds no cold page in its sets leaves the policy
/// as it was: the same reads with and without such a claim in the middle
/// leave the same pages cached (a clock's victim choice once cleared the
/// warm pages' reference bits for the claim, and moved its hand, though
/// the claim took nothing).
#[test]
fn a_failed_readahead_claim_leaves_the_policy_untouched() {
    let run = |claim: bool| {
        let c = PageCache::<Os>::new(opts(4, 4, 4, PolicyKind::Clock)).unwrap();
        let touch = |p: u64| match c.get(0, p).unwrap() {
            Lookup::Miss(f) => drop(f.finish(Ok(())).unwrap()),
            Lookup::Hit(h) => drop(h),
            Lookup::WriteBack(_) => unreachable!("nothing is dirty"),
        };
        for p in [0, 1, 2, 3, 0, 1, 2, 3] {
            touch(p);
        }
        if claim {
            assert!(
                c.claim_ahead(0, 10).unwrap().is_none(),
                "a warm set gave readahead a slot"
            );
        }
        touch(1);
        touch(11);
        let mut left: Vec<u64> = c.pages().into_iter().map(|p| p.page).collect();
        left.sort();
        left
    };
    assert_eq!(run(true), run(false));
}

/// Sets of 32 slots (the most) shrink as sets of 4 do: the mask of a
/// set's slots once shifted a 32-bit one by 32 (a panic with overflow
/// checks; else an empty mask, so that every shrink whose last set had a
/// free slot failed `ResizeBusy`).
#[test]
fn a_cache_of_32_slot_sets_grows_and_shrinks() {
    let c = PageCache::<Os>::new(opts(64, 256, 32, PolicyKind::Clock)).unwrap();
    let disk = Disk::default();
    c.resize(256 * 512).unwrap();
    assert_eq!(c.sets(), 8);
    for p in 0..40u64 {
        let mut g = c
            .get_mut_with(3, p, load_from(&disk), store_to(&disk))
            .unwrap();
        g.fill(p as u8);
    }
    // Written back, so that the shrink may drop what does not fit.
    for PageId { file: f, page: p } in c.dirty_pages() {
        if let Some(w) = c.write_back(f, p).unwrap() {
            disk.lock().unwrap().insert((f, p), w.bytes().to_vec());
            w.finish(Ok(())).unwrap();
        }
    }
    c.resize(64 * 512).unwrap();
    assert_eq!(c.sets(), 2);
    for p in 0..40u64 {
        let g = c.get_with(3, p, load_from(&disk), store_to(&disk)).unwrap();
        assert!(g.iter().all(|&b| b == p as u8), "page {p} after the shrink");
    }
}

/// A growth that moves dirty pages into a new set leaves that set queued for
/// the flusher when it holds as many dirty pages as a write would have
/// queued it for.
#[test]
fn a_growth_queues_the_new_sets_dirty_pages_for_the_flusher() {
    let c = PageCache::<Os>::new(opts(32, 256, 8, PolicyKind::Clock)).unwrap();
    let disk = Disk::default();
    let hooked = Arc::new(Mutex::new(Vec::new()));
    let h = hooked.clone();
    assert!(c.set_flush_hook(2, move |s| h.lock().unwrap().push(s)));
    for p in 0..24u64 {
        let mut g = c
            .get_mut_with(5, p, load_from(&disk), store_to(&disk))
            .unwrap();
        g.fill(p as u8);
    }
    c.resize(256 * 512).unwrap();
    assert_eq!(c.sets(), 32);
    let hooked = hooked.lock().unwrap().clone();
    let dirty = |s: usize| {
        (0..c.assoc())
            .filter(|&i| c.core.state(s, i).load(Ordering::Relaxed) & core::DIRTY != 0)
            .count()
    };
    let grown: Vec<usize> = (4..32).filter(|&s| dirty(s) >= 2).collect();
    assert!(!grown.is_empty(), "no new set got two dirty pages");
    for s in grown {
        assert!(
            hooked.contains(&s),
            "set {s} holds {} dirty pages and was never queued (queued: {hooked:?})",
            dirty(s)
        );
    }
}

/// A page made cold stays cold when a resize moves it to another set, so
/// that it is still the first to go.
#[test]
fn a_cold_page_stays_cold_when_a_resize_moves_it() {
    let c = PageCache::<Os>::new(opts(32, 256, 8, PolicyKind::Clock)).unwrap();
    let disk = Disk::default();
    for p in 0..24u64 {
        drop(c.get_with(6, p, load_from(&disk), store_to(&disk)).unwrap());
        assert!(c.make_cold(6, p).unwrap(), "page {p} made cold");
    }
    let cold = |p: u64| {
        let st = c.core.state_of(tag_of(6, p).unwrap());
        st.map(|v| v & core::COLD != 0)
    };
    c.resize(256 * 512).unwrap();
    assert_eq!(c.sets(), 32);
    let warm: Vec<u64> = (0..24).filter(|&p| cold(p) == Some(false)).collect();
    assert!(warm.is_empty(), "pages warm after the growth: {warm:?}");
    c.resize(32 * 512).unwrap();
    let warm: Vec<u64> = (0..24).filter(|&p| cold(p) == Some(false)).collect();
    assert!(warm.is_empty(), "pages warm after the shrink: {warm:?}");
}

/// A page made cold by advice keeps no policy history: a stream's miss that
/// takes its slot as a swap (telling the policy nothing) must not inherit
/// the counts of a page used many times, which would keep the streamed page
/// over pages used as much.
#[test]
fn a_page_made_cold_leaves_its_history_behind() {
    // One set of four slots (both candidate sets are the one set).
    let c = PageCache::<Os>::new(opts(4, 4, 4, PolicyKind::Lfu)).unwrap();
    let disk = Disk::default();
    let get = |p: u64| drop(c.get_with(7, p, load_from(&disk), store_to(&disk)).unwrap());
    for p in 0..4 {
        get(p);
    }
    for _ in 0..20 {
        get(0);
    }
    assert!(c.make_cold(7, 0).unwrap());
    let streamed = c
        .get_with_as(7, 4, Mode::Stream, load_from(&disk), store_to(&disk))
        .unwrap();
    drop(streamed);
    let cached = |p: u64| c.core.state_of(tag_of(7, p).unwrap()).is_some();
    assert!(
        !cached(0) && cached(4),
        "the stream's miss took the cold page"
    );
    // Page 4 used once more (now warm), pages 1 to 3 three times more: the
    // next miss takes the least used, page 4.
    get(4);
    for p in 1..4 {
        for _ in 0..3 {
            get(p);
        }
    }
    get(5);
    assert!(
        !cached(4),
        "page 4, used twice, outlived pages used four times"
    );
}

/// Pages dropped by a discard (a truncation, a deleted file whose id comes
/// back) leave no ghosts: a page of that id read again later is new to the
/// cache, not a page it remembers evicting.
#[test]
fn discarded_pages_leave_no_ghosts() {
    for policy in [PolicyKind::S3Fifo, PolicyKind::Lirs, PolicyKind::Adaptive] {
        let c = PageCache::<Os>::new(opts(64, 64, 8, policy)).unwrap();
        let disk = Disk::default();
        let get =
            |f: u32, p: u64| drop(c.get_with(f, p, load_from(&disk), store_to(&disk)).unwrap());
        // File 2's pages push some of file 1's out (as ghosts).
        for p in 0..64 {
            get(1, p);
        }
        for p in 0..16 {
            get(2, p);
        }
        let cached = |p: u64| c.core.state_of(tag_of(2, p).unwrap()).is_some();
        let kept: Vec<u64> = (0..16).filter(|&p| cached(p)).collect();
        assert!(kept.len() >= 8, "{policy:?}: {kept:?} of file 2 cached");
        let before = c.stats().ghost_hits;
        c.discard(2, 0).unwrap();
        // The pages the discard dropped, again: no ghost may answer for them.
        for &p in &kept {
            get(2, p);
        }
        let after = c.stats().ghost_hits;
        assert_eq!(after, before, "{policy:?}: ghost hits on discarded pages");
    }
}

/// A writer waiting for readers' pins holds no pin of its own: the page may
/// leave and another take its slot (and be pinned) before the writer looks
/// again. It then looks its page up again, instead of waiting for the
/// newcomer's holders until the pin wait runs out and reporting its own
/// page held.
#[test]
fn a_waiter_whose_page_left_its_slot_looks_the_page_up_again() {
    let mut o = opts(4, 4, 4, PolicyKind::Lru);
    o.pin_wait = Duration::from_secs(30);
    let c = Arc::new(PageCache::<Os>::new(o).unwrap());
    let disk: Disk = Mutex::default();
    for p in 0..4 {
        drop(c.get_with(3, p, load_from(&disk), store_to(&disk)).unwrap());
    }
    let g0 = c.get_with(3, 0, load_from(&disk), store_to(&disk)).unwrap();
    let others: Vec<_> = (1..4)
        .map(|p| c.get_with(3, p, load_from(&disk), store_to(&disk)).unwrap())
        .collect();
    let (woke_tx, woke_rx) = std::sync::mpsc::channel();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    core::AFTER_SLOT_WAKE.arm(
        &c.core as *const _ as usize,
        Box::new(move || {
            woke_tx.send(()).unwrap();
            let _ = go_rx.recv_timeout(Duration::from_secs(60));
        }),
    );
    let c2 = c.clone();
    let writer = std::thread::spawn(move || {
        let t0 = std::time::Instant::now();
        let r = match c2.get_mut(3, 0) {
            Ok(LookupMut::Hit(g)) => {
                drop(g);
                Ok(())
            }
            Ok(LookupMut::Miss(f)) => f.finish(Ok(())).map(drop),
            Ok(LookupMut::WriteBack(_)) => panic!("no page is dirty"),
            Err(e) => Err(e),
        };
        (r, t0.elapsed())
    });
    // The writer sleeps on page 0's slot, waiting for its pin.
    let tag0 = tag_of(3, 0).unwrap();
    let t0 = std::time::Instant::now();
    while c.core.state_of(tag0).unwrap() & core::WAITERS == 0 {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the writer never waited"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    drop(g0);
    woke_rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the writer woke");
    // Before it looks again: page 0 leaves, page 4 takes its slot (the
    // others are pinned) and is held; the others are let go.
    assert!(c.evict(3, 0).unwrap());
    let g4 = c.get_with(3, 4, load_from(&disk), store_to(&disk)).unwrap();
    drop(others);
    go_tx.send(()).unwrap();
    let (r, took) = writer.join().unwrap();
    drop(g4);
    r.unwrap_or_else(|e| panic!("the writer of page 0 failed after {took:?}: {e}"));
    // (Waiting for the newcomer's holders would take the pin wait, 30 s.)
    assert!(took < Duration::from_secs(10), "the writer took {took:?}");
}

/// A panic in policy code, under a set's lock, ends the process saying why,
/// instead of leaving the set locked for the next thread that reaches it to
/// wait on for ever. The test runs itself in a child process, which a panic
/// there ends.
#[test]
fn a_panic_under_a_set_lock_ends_the_process() {
    const CHILD: &str = "SETCACHE_TEST_PANIC_UNDER_LOCK";
    if std::env::var_os(CHILD).is_some() {
        let c = PageCache::<Os>::new(opts(64, 64, 8, PolicyKind::Lru)).unwrap();
        let disk = Disk::default();
        let key = &c.core.policy as *const PolicyKind as usize;
        core::IN_POLICY_CALL.arm(key, Box::new(|| panic!("a policy's defect")));
        let first = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            drop(c.get_with(0, 1, load_from(&disk), store_to(&disk)));
        }));
        eprintln!("the panic came back: {}", first.is_err());
        // The same page again: its set is the one the panic left.
        drop(c.get_with(0, 1, load_from(&disk), store_to(&disk)));
        eprintln!("the set was usable after the panic");
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let mut child = std::process::Command::new(exe)
        .args([
            "--exact",
            "cache::tests::a_panic_under_a_set_lock_ends_the_process",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, "1")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the child waited for ever on the set the panic left locked");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(libc::SIGABRT), "{status:?}: {err}");
    assert!(
        err.contains("policy code while a set was locked"),
        "the child's stderr: {err}"
    );
}
