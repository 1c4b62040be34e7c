//! Cached files through the asynchronous queue and the flusher: a
//! differential test against a byte array across syncs, resizes and reopens; a
//! crash test (SIGKILL after sync); merging write-back; bad input.

mod common;

use std::cell::RefCell;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::rc::Rc;
use std::time::{Duration, Instant};

use common::{Rng, TempDir, engines, pattern};
use setcache::{
    AlignedBuf, CacheOptions, CachedFile, CachedQueue, CachedRequest, CachedStore, Error,
    FlushOptions, FlusherCounts, LayoutKind, OpKind, PolicyKind, Store, StoreOptions,
};

fn cache(pages: usize, max_pages: usize) -> CacheOptions {
    CacheOptions {
        size: pages * 4096,
        max_size: Some(max_pages * 4096),
        page_size: 4096,
        assoc: 4,
        policy: PolicyKind::Gclock,
        pin_wait: Duration::from_secs(5),
        partitions: common::partitions_upto(pages / 4),
    }
}

/// The real engine and the fault-injecting one.
fn uring_and_sim() -> Vec<(&'static str, StoreOptions)> {
    let keep = |e: &(&str, StoreOptions)| e.0 == "uring" || e.0 == "sim";
    engines().into_iter().filter(keep).collect()
}

/// Write one page through a queue as a tagged request and wait until no
/// request is outstanding (not `drain`: a completed request must hold no
/// page, including the write-backs it started). Returns the queue, undropped.
fn queued_page_write<'a>(
    cs: &'a CachedStore,
    cf: &CachedFile,
    page: u64,
    byte: u8,
    ename: &str,
) -> CachedQueue<'a> {
    let mut q = cs.queue(8);
    q.submit(vec![CachedRequest::tagged(
        OpKind::Write,
        cf,
        page * 4096,
        vec![byte; 4096],
        1,
    )]);
    while q.outstanding() > 0 {
        q.wait(1);
    }
    let mut done = Vec::new();
    q.take_completions(&mut done);
    assert_eq!(done.len(), 1);
    assert!(done[0].1.result.is_ok(), "{ename}: {:?}", done[0].1.result);
    q
}

fn read_all(store: &Store, name: &str, len: usize) -> Vec<u8> {
    let f = store.open_file(name).unwrap();
    let mut b = AlignedBuf::new(len);
    f.read_at(0, &mut b).unwrap();
    b.to_vec()
}

/// Random synchronous and asynchronous reads and writes of any offset and
/// length, syncs, cache resizes and store reopens, against a plain byte array.
/// Every read returns the array's bytes; after each reopen the devices hold
/// every write.
#[test]
fn differential_against_a_byte_array() {
    // Sizes the cache took: a run in which every resize came back busy
    // would not have tested one.
    let mut sizes = std::collections::BTreeSet::new();
    for (ename, opts) in uring_and_sim() {
        let tmp = TempDir::new("cached-diff");
        let roots = tmp.devices(2);
        const LEN: usize = 96 * 4096 + 1536;
        let mut truth = pattern(11, 0, LEN);
        {
            let store = common::open(&roots, opts.clone(), 2);
            let f = store.create("d", LEN as u64, LayoutKind::Rotated).unwrap();
            let mut b = AlignedBuf::new(LEN);
            b.copy_from_slice(&truth);
            f.write_at(0, &b).unwrap();
        }
        let mut rng = Rng(7);
        for epoch in 0..4 {
            let store = common::open(&roots, opts.clone(), 2);
            assert!(
                read_all(&store, "d", LEN) == truth,
                "{ename}: epoch {epoch}: the devices lost a write"
            );
            let flush = FlushOptions {
                dirty_at: Some(2),
                ..FlushOptions::default()
            };
            let cs = CachedStore::with_flusher(store, cache(16, 32), Some(flush)).unwrap();
            let cf = cs.open_file("d").unwrap();
            let mut q = cs.queue(8);
            for step in 0..250 {
                match rng.below(10) {
                    0..=2 => {
                        let off = rng.below(LEN as u64) as usize;
                        let n = (1 + rng.below(2 * 4096) as usize).min(LEN - off);
                        let data: Vec<u8> = (0..n).map(|i| (step * 13 + i + epoch) as u8).collect();
                        cf.write_at(off as u64, &data).unwrap();
                        truth[off..off + n].copy_from_slice(&data);
                    }
                    3..=4 => {
                        let off = rng.below(LEN as u64) as usize;
                        let n = (1 + rng.below(3 * 4096) as usize).min(LEN - off);
                        let mut buf = vec![0u8; n];
                        assert_eq!(cf.read_at(off as u64, &mut buf).unwrap(), n);
                        assert!(buf == truth[off..off + n], "{ename}: sync read {off}+{n}");
                    }
                    5..=7 => {
                        // A batch of requests on disjoint ranges, half reads;
                        // half report through callbacks, half through tags.
                        let mut taken: Vec<(usize, usize)> = Vec::new();
                        let mut reqs = Vec::new();
                        let bad = Rc::new(RefCell::new(Vec::<String>::new()));
                        // Tagged requests: tag -> bytes a read must return.
                        let mut tagged: Vec<(u64, Option<Vec<u8>>)> = Vec::new();
                        for k in 0..1 + rng.below(6) as usize {
                            let off = rng.below(LEN as u64) as usize;
                            let n = (1 + rng.below(2 * 4096) as usize).min(LEN - off);
                            if taken.iter().any(|&(a, b)| off < b && a < off + n) {
                                continue;
                            }
                            taken.push((off, off + n));
                            let bad = bad.clone();
                            let by_tag = rng.below(2) == 0;
                            let tag = (step * 100 + k) as u64;
                            if rng.below(2) == 0 {
                                let want = truth[off..off + n].to_vec();
                                if by_tag {
                                    reqs.push(CachedRequest::tagged(
                                        OpKind::Read,
                                        &cf,
                                        off as u64,
                                        vec![0; n],
                                        tag,
                                    ));
                                    tagged.push((tag, Some(want)));
                                    continue;
                                }
                                reqs.push(CachedRequest::read(
                                    &cf,
                                    off as u64,
                                    vec![0; n],
                                    move |c| {
                                        if let Err(e) = &c.result {
                                            bad.borrow_mut().push(format!("read {off}+{n}: {e}"));
                                        } else if c.buf != want {
                                            bad.borrow_mut()
                                                .push(format!("read {off}+{n}: wrong bytes"));
                                        }
                                    },
                                ));
                            } else {
                                let data: Vec<u8> =
                                    (0..n).map(|i| (step * 3 + i * 7 + k) as u8).collect();
                                truth[off..off + n].copy_from_slice(&data);
                                if by_tag {
                                    let at = off as u64;
                                    reqs.push(CachedRequest::tagged(
                                        OpKind::Write,
                                        &cf,
                                        at,
                                        data,
                                        tag,
                                    ));
                                    tagged.push((tag, None));
                                    continue;
                                }
                                reqs.push(CachedRequest::write(&cf, off as u64, data, move |c| {
                                    if let Err(e) = &c.result {
                                        bad.borrow_mut().push(format!("write {off}+{n}: {e}"));
                                    }
                                }));
                            }
                        }
                        q.submit_from(&mut reqs);
                        assert!(reqs.is_empty());
                        q.drain();
                        let mut done = Vec::new();
                        q.take_completions(&mut done);
                        done.sort_by_key(|d| d.0);
                        assert_eq!(
                            done.iter().map(|d| d.0).collect::<Vec<_>>(),
                            tagged.iter().map(|t| t.0).collect::<Vec<_>>(),
                            "{ename}: step {step}: every tagged request completes once"
                        );
                        for ((tag, c), (_, want)) in done.iter().zip(&tagged) {
                            assert!(c.result.is_ok(), "{ename}: tag {tag}: {:?}", c.result);
                            if let Some(want) = want {
                                assert!(c.buf == *want, "{ename}: tag {tag}: wrong bytes");
                            }
                        }
                        let bad = bad.borrow();
                        assert!(bad.is_empty(), "{ename}: step {step}: {bad:?}");
                    }
                    8 => cf.sync().unwrap(),
                    _ => {
                        let pages = [16, 32, 20, 24][rng.below(4) as usize];
                        match cs.cache().resize(pages * 4096) {
                            Ok(()) => {
                                sizes.insert(cs.cache().capacity_pages());
                            }
                            Err(Error::ResizeBusy(_)) => {}
                            Err(e) => panic!("{ename}: resize: {e}"),
                        }
                    }
                }
            }
            drop(q);
            cf.close().unwrap();
            assert!(
                cs.cache().dirty_pages().is_empty(),
                "{ename}: dirty after close"
            );
        }
    }
    assert!(sizes.len() >= 2, "the cache took too few sizes: {sizes:?}");
}

/// A page the flusher found under a mutable guard (its set due, its flag
/// cleared) is written back soon after the guard goes, while another
/// thread keeps writing another page (so the flusher never idles).
#[test]
fn a_page_the_flusher_found_busy_is_written_back_beside_a_steady_stream_of_writes() {
    let tmp = TempDir::new("flush-busy-later");
    let store = Store::open(&tmp.devices(2), slow_devices()).unwrap();
    drop(store.create("f", 1024 * 4096, LayoutKind::Stripe).unwrap());
    let flush = FlushOptions {
        dirty_at: Some(1),
        ..FlushOptions::default()
    };
    let cs = CachedStore::with_flusher(store, cache(256, 256), Some(flush)).unwrap();
    cs.set_readahead(0);
    let cf = cs.open_file("f").unwrap();
    let stop = std::sync::atomic::AtomicBool::new(false);
    let dirty_still = std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                cf.write_at(600 * 4096, &[1; 4096]).unwrap();
                std::thread::sleep(Duration::from_millis(10));
            }
        });
        let g = cf.page_mut(7 * 4096).unwrap();
        std::thread::sleep(Duration::from_millis(300));
        drop(g);
        let t = Instant::now();
        let dirty = || cs.cache().dirty_pages().iter().any(|p| p.page == 7);
        while dirty() && t.elapsed() < Duration::from_secs(20) {
            std::thread::sleep(Duration::from_millis(10));
        }
        let d = dirty();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        d
    });
    assert!(!dirty_still, "page 7 still dirty 20 s after its guard went");
}

/// The flusher writes back sets that fill with dirty pages, merging dirty
/// neighbours in the file into one write; `sync` finds little left to do.
#[test]
fn flusher_writes_back_and_merges_neighbours() {
    let tmp = TempDir::new("cached-flush");
    let store = common::open(&tmp.devices(1), engines()[0].1.clone(), 16);
    const PAGES: u64 = 256;
    store.create("f", PAGES * 4096, LayoutKind::Stripe).unwrap();
    let flush = FlushOptions {
        dirty_at: Some(2),
        ..FlushOptions::default()
    };
    let cs = CachedStore::with_flusher(store, cache(128, 128), Some(flush)).unwrap();
    let cf = cs.open_file("f").unwrap();
    // Sequential whole-page writes: neighbours are dirty together.
    for p in 0..PAGES {
        cf.write_at(p * 4096, &[p as u8 | 1; 4096]).unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while cs.flusher_counts().pages < 64 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let FlusherCounts { pages, writes } = cs.flusher_counts();
    assert!(pages >= 64, "the flusher wrote only {pages} pages");
    assert!(
        writes * 2 <= pages,
        "neighbours were not merged: {pages} pages in {writes} writes"
    );
    cf.sync().unwrap();
    let b = read_all(cs.store(), "f", (PAGES * 4096) as usize);
    for p in 0..PAGES as usize {
        assert!(
            b[p * 4096..(p + 1) * 4096]
                .iter()
                .all(|&x| x == p as u8 | 1),
            "page {p}"
        );
    }
}

/// What a new user gets wrong gets a clear error and changes nothing.
#[test]
fn bad_input_gets_clear_errors() {
    let tmp = TempDir::new("cached-bad");
    let roots = tmp.devices(1);
    let store = common::open(&roots, engines()[0].1.clone(), 16);
    store.create("b", 8 * 4096, LayoutKind::Stripe).unwrap();
    // A cache smaller than one set, a page size that is not a power of two.
    let e = CachedStore::new(
        store.clone(),
        CacheOptions {
            size: 4096,
            ..CacheOptions::default()
        },
    )
    .err()
    .expect("a cache smaller than a set is refused");
    assert!(e.to_string().contains("smaller than one set"), "{e}");
    let e = CachedStore::new(
        store.clone(),
        CacheOptions {
            page_size: 3000,
            ..CacheOptions::default()
        },
    )
    .err()
    .expect("page size 3000 is refused");
    assert!(e.to_string().contains("power of two"), "{e}");
    let cs = CachedStore::new(store, cache(16, 16)).unwrap();
    let cf = cs.open_file("b").unwrap();
    cf.write_at(0, b"keep").unwrap();
    // Reading past the end.
    let mut buf = vec![0u8; 10];
    let e = cf.read_at(9 * 4096, &mut buf).unwrap_err();
    assert!(matches!(e, Error::OutOfRange { .. }), "{e}");
    assert!(e.to_string().contains("past the end"), "{e}");
    let got = Rc::new(RefCell::new(None));
    let mut q = cs.queue(4);
    let g = got.clone();
    q.submit(vec![CachedRequest::read(
        &cf,
        8 * 4096 - 4,
        vec![0; 8],
        move |c| *g.borrow_mut() = Some(c.result),
    )]);
    q.drain();
    let r = got.borrow_mut().take().expect("the callback ran");
    assert!(matches!(r, Err(Error::OutOfRange { .. })), "{r:?}");
    // The same through a tag: the error comes back with the buffer.
    q.submit(vec![CachedRequest::tagged(
        OpKind::Read,
        &cf,
        8 * 4096 - 4,
        vec![0; 8],
        77,
    )]);
    let mut done = Vec::new();
    q.take_completions(&mut done);
    assert_eq!(done.len(), 1, "an invalid request completes inside submit");
    let (tag, c) = done.pop().unwrap();
    assert_eq!((tag, c.buf.len()), (77, 8));
    assert!(
        matches!(c.result, Err(Error::OutOfRange { .. })),
        "{:?}",
        c.result
    );
    // Writing through a read-only handle, synchronously and asynchronously.
    let ro = cs.open_file_read_only("b").unwrap();
    let e = ro.write_at(0, b"lost").unwrap_err();
    assert!(
        matches!(e, Error::ReadOnly(_)) && e.to_string().contains("read-only"),
        "{e}"
    );
    let g = got.clone();
    q.submit(vec![CachedRequest::write(
        &ro,
        0,
        b"lost".to_vec(),
        move |c| *g.borrow_mut() = Some(c.result),
    )]);
    q.drain();
    let r = got.borrow_mut().take().expect("the callback ran");
    assert!(matches!(r, Err(Error::ReadOnly(_))), "{r:?}");
    // Depths past the bounds are taken into 1..=MAX_QUEUE_DEPTH, not
    // allocated whole (a depth of usize::MAX aborted the process).
    assert_eq!(
        setcache::Queue::new(usize::MAX).depth(),
        setcache::MAX_QUEUE_DEPTH
    );
    assert_eq!(setcache::Queue::new(0).depth(), 1);
    for depth in [0, usize::MAX] {
        let mut wide = cs.queue(depth);
        wide.submit(vec![CachedRequest::tagged(
            OpKind::Read,
            &cf,
            0,
            vec![0; 4],
            5,
        )]);
        wide.drain();
        let mut done = Vec::new();
        wide.take_completions(&mut done);
        assert_eq!(done.len(), 1, "depth {depth}");
        assert_eq!(&done[0].1.buf, b"keep", "depth {depth}");
    }
    // Nothing was lost or changed.
    let mut head = [0u8; 4];
    ro.read_at(0, &mut head).unwrap();
    assert_eq!(&head, b"keep");
    drop(q);
    cf.sync().unwrap();
    assert_eq!(&read_all(cs.store(), "b", 8 * 4096)[..4], b"keep");
}

const CRASH_ENV: &str = "SETCACHE_CRASH_CHILD";
const CRASH_PAGES: u64 = 48;

/// Page `p` as written in round `r`: every byte the same, and different from
/// the round before.
fn crash_byte(r: u64, p: u64) -> u8 {
    ((r * 37 + p) % 251) as u8 + 1
}

/// The writer a crash test kills: rounds of whole-file writes through the
/// cache, each followed by `sync` and a line on stdout.
fn crash_child(dir: &str) {
    let roots: Vec<std::path::PathBuf> = (0..2)
        .map(|i| std::path::Path::new(dir).join(format!("dev{i}")))
        .collect();
    let store = Store::open(&roots, StoreOptions::default()).unwrap();
    // A cache larger than the file and no flusher: no dirty page is written
    // back to make room or ahead of time, so what reaches the disk is what
    // `sync` wrote.
    let cs = CachedStore::with_flusher(store, cache(1024, 1024), None).unwrap();
    let cf = cs.open_file("c").unwrap();
    let mut go = String::new();
    for round in 1..10_000u64 {
        for p in 0..CRASH_PAGES {
            cf.write_at(p * 4096, &[crash_byte(round, p); 4096])
                .unwrap();
        }
        cf.sync().unwrap();
        // Part of the next round lands before the kill.
        for p in 0..CRASH_PAGES / 2 {
            cf.write_at(p * 4096, &[crash_byte(round + 1, p); 4096])
                .unwrap();
        }
        // Straight to the pipe: the test harness captures `println!`, and
        // printed lines would reach the parent only once this process ended.
        let mut out = std::io::stdout();
        writeln!(out, "synced {round}").unwrap();
        out.flush().unwrap();
        // The parent says when to go on, or kills this process here.
        go.clear();
        if std::io::stdin().read_line(&mut go).unwrap() == 0 {
            return;
        }
    }
}

/// A writer killed with SIGKILL after `sync` returned loses nothing it synced:
/// after a reopen, every page holds the last synced round or a later one.
#[test]
fn synced_data_survives_sigkill() {
    if let Ok(dir) = std::env::var(CRASH_ENV) {
        crash_child(&dir);
        return;
    }
    let tmp = TempDir::new("cached-crash");
    let roots = tmp.devices(2);
    {
        let store = Store::open(&roots, StoreOptions::default()).unwrap();
        store
            .create("c", CRASH_PAGES * 4096, LayoutKind::Stripe)
            .unwrap();
    }
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "synced_data_survives_sigkill",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CRASH_ENV, tmp.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut to_child = child.stdin.take().unwrap();
    let out = BufReader::new(child.stdout.take().unwrap());
    let mut last = 0u64;
    for line in out.lines() {
        let Ok(line) = line else { break };
        // The harness's "test ... " may begin the first line, unended.
        if let Some((_, r)) = line.rsplit_once("synced ") {
            last = r.trim().parse().unwrap();
            if last >= 5 {
                break;
            }
            writeln!(to_child, "go").unwrap();
        }
    }
    // Killed while it waits, its last round synced and half of the next
    // written to the cache only.
    child.kill().unwrap(); // SIGKILL
    let _ = child.wait();
    assert!(last >= 5, "the writer stopped after round {last}");
    let store = Store::open(&roots, StoreOptions::default()).unwrap();
    let b = read_all(&store, "c", (CRASH_PAGES * 4096) as usize);
    for p in 0..CRASH_PAGES {
        let page = &b[(p * 4096) as usize..((p + 1) * 4096) as usize];
        let ok = (last..10_001).any(|r| page.iter().all(|&x| x == crash_byte(r, p)));
        assert!(
            ok,
            "page {p} lost round {last}, which was synced (first byte {})",
            page[0]
        );
    }
}

/// A large read of pages that are not cached, on every engine and across
/// stripe units: each run of missing pages is read into the frames together,
/// and the bytes arrive in order; a second read of the same range hits.
#[test]
fn large_reads_of_missing_pages() {
    for (ename, opts) in engines() {
        let tmp = TempDir::new("cached-large");
        let store = common::open(&tmp.devices(3), opts, 4);
        const LEN: usize = 200 * 4096;
        let f = store.create("l", LEN as u64, LayoutKind::Rotated).unwrap();
        let truth = pattern(23, 0, LEN);
        let mut b = AlignedBuf::new(LEN);
        b.copy_from_slice(&truth);
        f.write_at(0, &b).unwrap();
        let cs = CachedStore::new(store, cache(1024, 1024)).unwrap();
        let cf = cs.open_file("l").unwrap();
        // Page 10 cached already: the read is two runs around it.
        let mut one = [0u8; 1];
        cf.read_at(10 * 4096, &mut one).unwrap();
        let mut q = cs.queue(8);
        for round in 0..2 {
            let got = Rc::new(RefCell::new(None));
            let g = got.clone();
            let (off, n) = (4096 + 100, 40 * 4096);
            q.submit(vec![CachedRequest::read(
                &cf,
                off as u64,
                vec![0; n],
                move |c| *g.borrow_mut() = Some((c.result.map(|_| c.buf), c.hit)),
            )]);
            q.drain();
            let (r, hit) = got.borrow_mut().take().expect("the callback ran");
            let buf = r.unwrap_or_else(|e| panic!("{ename}: {e}"));
            assert!(
                buf == truth[off..off + n],
                "{ename}: round {round}: wrong bytes"
            );
            assert_eq!(hit, round == 1, "{ename}: round {round}");
        }
        let st = cs.cache().stats();
        assert_eq!(st.fills, 41, "{ename}: every page filled once");
    }
}

/// A requester that must write a dirty victim takes the victim's dirty
/// neighbours along in the same write: with one set of four dirty pages
/// 0..=3 and no flusher, writing page 10 cleans all four, and the devices
/// hold every byte.
#[test]
fn victim_writes_take_dirty_neighbours() {
    for (ename, opts) in uring_and_sim() {
        let tmp = TempDir::new("cached-victim");
        let store = common::open(&tmp.devices(1), opts, 4);
        store.create("v", 16 * 4096, LayoutKind::Stripe).unwrap();
        let cs = CachedStore::with_flusher(store, cache(4, 4), None).unwrap();
        assert_eq!(cs.cache().sets(), 1, "{ename}: one set of four pages");
        let cf = cs.open_file("v").unwrap();
        for p in 0..4u64 {
            cf.write_at(p * 4096, &[p as u8 + 1; 4096]).unwrap();
        }
        assert_eq!(cs.cache().dirty_pages().len(), 4);
        let _q = queued_page_write(&cs, &cf, 10, 11, ename);
        let dirty: Vec<u64> = cs.cache().dirty_pages().iter().map(|d| d.page).collect();
        assert_eq!(
            dirty,
            vec![10],
            "{ename}: the victim's dirty neighbours were written with it"
        );
        cf.sync().unwrap();
        let bytes = read_all(cs.store(), "v", 16 * 4096);
        for p in 0..4 {
            assert!(
                bytes[p * 4096..(p + 1) * 4096]
                    .iter()
                    .all(|&b| b == p as u8 + 1)
            );
        }
        assert!(bytes[10 * 4096..11 * 4096].iter().all(|&b| b == 11));
    }
}

/// A requester that writes a dirty victim also writes the other dirty pages
/// of the victim's 256 KiB region, adjacent or not, and every one of them
/// reaches the devices.
#[test]
fn victim_writes_take_their_region_along() {
    for (ename, opts) in uring_and_sim() {
        let tmp = TempDir::new("cached-victim-region");
        let store = common::open(&tmp.devices(1), opts, 4);
        store.create("r", 128 * 4096, LayoutKind::Stripe).unwrap();
        let cs = CachedStore::with_flusher(store, cache(4, 4), None).unwrap();
        assert_eq!(cs.cache().sets(), 1, "{ename}: one set of four pages");
        let cf = cs.open_file("r").unwrap();
        // Four dirty pages of the first region, none adjacent to another.
        let scattered = [0u64, 9, 30, 63];
        for &p in &scattered {
            cf.write_at(p * 4096, &[p as u8 + 1; 4096]).unwrap();
        }
        assert_eq!(cs.cache().dirty_pages().len(), 4);
        let _q = queued_page_write(&cs, &cf, 100, 101, ename);
        let dirty: Vec<u64> = cs.cache().dirty_pages().iter().map(|d| d.page).collect();
        assert_eq!(
            dirty,
            vec![100],
            "{ename}: the victim's region went with it"
        );
        // Written before any sync: the devices already hold the region.
        let bytes = read_all(cs.store(), "r", 128 * 4096);
        for &p in &scattered {
            let page = &bytes[p as usize * 4096..(p as usize + 1) * 4096];
            assert!(page.iter().all(|&b| b == p as u8 + 1), "{ename}: page {p}");
        }
        cf.sync().unwrap();
        let bytes = read_all(cs.store(), "r", 128 * 4096);
        assert!(bytes[100 * 4096..101 * 4096].iter().all(|&b| b == 101));
    }
}

/// Victim writes near the end of a file whose last page is partial (whole
/// sectors, as the store requires): a run may end with the short page, its
/// length stays whole sectors, and every byte reaches the devices.
#[test]
fn victim_runs_end_at_a_partial_tail() {
    let tmp = TempDir::new("cached-victim-tail");
    let store = common::open(&tmp.devices(1), engines()[0].1.clone(), 4);
    const LEN: usize = 5 * 4096 + 1536;
    store.create("t", LEN as u64, LayoutKind::Stripe).unwrap();
    let cs = CachedStore::with_flusher(store, cache(4, 4), None).unwrap();
    let cf = cs.open_file("t").unwrap();
    let mut truth = vec![0u8; LEN];
    for p in 2..6usize {
        let n = (LEN - p * 4096).min(4096);
        let data = vec![p as u8 + 1; n];
        cf.write_at((p * 4096) as u64, &data).unwrap();
        truth[p * 4096..p * 4096 + n].copy_from_slice(&data);
    }
    let mut q = cs.queue(4);
    for p in [0usize, 1] {
        truth[p * 4096..(p + 1) * 4096].fill(9 + p as u8);
        q.submit(vec![CachedRequest::tagged(
            OpKind::Write,
            &cf,
            (p * 4096) as u64,
            vec![9 + p as u8; 4096],
            p as u64,
        )]);
        q.drain();
    }
    let mut done = Vec::new();
    q.take_completions(&mut done);
    assert_eq!(done.len(), 2);
    for (tag, c) in &done {
        assert!(c.result.is_ok(), "write {tag}: {:?}", c.result);
    }
    drop(q);
    cf.sync().unwrap();
    assert!(cs.cache().dirty_pages().is_empty());
    assert!(
        read_all(cs.store(), "t", LEN) == truth,
        "the devices hold every byte"
    );
}

/// Four threads, each with its own queue, write interleaved pages through a
/// cache of 16 pages while a fifth syncs: nearly every write meets a set full
/// of dirty pages, so victims and their regions (pages of the other threads)
/// are written by whichever queue meets them. Every thread's last write of
/// every page reaches the devices.
#[test]
fn concurrent_queues_through_a_small_cache() {
    const PAGES: u64 = 256;
    const ROUNDS: u8 = 12;
    for (ename, opts) in uring_and_sim() {
        let tmp = TempDir::new("cached-conc-queues");
        let store = common::open(&tmp.devices(2), opts, 4);
        store.create("q", PAGES * 4096, LayoutKind::Stripe).unwrap();
        let cs = CachedStore::new(store, cache(16, 16)).unwrap();
        let cf = cs.open_file("q").unwrap();
        let stop = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            let (cf2, stop2) = (&cf, &stop);
            s.spawn(move || {
                while !stop2.load(std::sync::atomic::Ordering::Relaxed) {
                    cf2.sync().unwrap();
                }
            });
            let writers: Vec<_> = (0..4u64)
                .map(|t| {
                    let (cs, cf) = (&cs, &cf);
                    s.spawn(move || {
                        let mut q = cs.queue(8);
                        let mut done = Vec::new();
                        for round in 0..ROUNDS {
                            // Thread t owns pages t, t+4, ...: whole-page
                            // writes in even rounds, partial ones in odd.
                            let reqs = (t..PAGES).step_by(4).map(|p| {
                                let fill = round * 4 + t as u8 + 1;
                                let (off, len) = if round % 2 == 0 {
                                    (p * 4096, 4096)
                                } else {
                                    (p * 4096 + 512, 1024)
                                };
                                CachedRequest::tagged(OpKind::Write, cf, off, vec![fill; len], p)
                            });
                            q.submit(reqs.collect());
                            while q.outstanding() > 0 {
                                q.wait(1);
                            }
                            q.take_completions(&mut done);
                            for (p, c) in done.drain(..) {
                                assert!(c.result.is_ok(), "{ename}: page {p}: {:?}", c.result);
                            }
                        }
                    })
                })
                .collect();
            for w in writers {
                w.join().unwrap();
            }
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
        });
        let victims = cs.cache().stats().dirty_evictions;
        assert!(victims > 0, "{ename}: the requesters wrote victims");
        cf.sync().unwrap();
        let bytes = read_all(cs.store(), "q", (PAGES * 4096) as usize);
        for p in 0..PAGES {
            let t = (p % 4) as u8;
            // The last whole-page write, then the last partial one on top.
            let whole = (ROUNDS - 2) * 4 + t + 1;
            let part = (ROUNDS - 1) * 4 + t + 1;
            let page = &bytes[(p * 4096) as usize..((p + 1) * 4096) as usize];
            for (i, &b) in page.iter().enumerate() {
                let want = if (512..1536).contains(&i) {
                    part
                } else {
                    whole
                };
                assert_eq!(b, want, "{ename}: page {p} byte {i}");
            }
        }
    }
}

/// A queue whose batches keep hitting never waits, yet its fills finish:
/// each submit reaps the fills that have completed. So another thread reading
/// a page the queue is filling gets it rather than failing after the pin
/// wait, and the queue's own miss completes.
#[test]
fn a_queue_that_only_hits_still_finishes_its_fills() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let tmp = TempDir::new("cached-lazy-reap");
    let roots = tmp.devices(1);
    let (_, opts) = engines().into_iter().find(|e| e.0 == "uring").unwrap();
    let store = common::open(&roots, opts, 1);
    let f = store.create("r", 64 * 4096, LayoutKind::Stripe).unwrap();
    let mut b = AlignedBuf::new(64 * 4096);
    b.copy_from_slice(&pattern(3, 0, 64 * 4096));
    f.write_at(0, &b).unwrap();
    let opts = CacheOptions {
        pin_wait: Duration::from_millis(300),
        ..cache(32, 32)
    };
    let cs = CachedStore::new(store, opts).unwrap();
    let cf = cs.open_file("r").unwrap();
    let mut page = vec![0u8; 4096];
    cf.read_at(0, &mut page).unwrap();
    let (sent, stop) = (AtomicBool::new(false), AtomicBool::new(false));
    std::thread::scope(|s| {
        let hitter = s.spawn(|| {
            let mut q = cs.queue(8);
            let read = |page: u64| {
                CachedRequest::tagged(OpKind::Read, &cf, page * 4096, vec![0u8; 4096], page)
            };
            q.submit(vec![read(9)]);
            sent.store(true, Ordering::Release);
            let (mut done, mut filled) = (Vec::new(), None);
            let t0 = Instant::now();
            while t0.elapsed() < Duration::from_secs(3) {
                // Hits of page 0 only; never a wait or a poll.
                q.submit(vec![read(0)]);
                q.take_completions(&mut done);
                if let Some(c) = done.iter().find(|c| c.0 == 9) {
                    filled = Some(c.1.buf.clone());
                }
                done.clear();
                if filled.is_some() && stop.load(Ordering::Acquire) {
                    break;
                }
            }
            let filled = filled.expect("the queue's miss of page 9 never finished");
            assert!(filled[..] == pattern(3, 9 * 4096, 4096)[..]);
            q.drain();
        });
        while !sent.load(Ordering::Acquire) {
            std::thread::yield_now();
        }
        let mut page = vec![0u8; 4096];
        let r = cf.read_at(9 * 4096, &mut page);
        stop.store(true, Ordering::Release);
        r.expect("page 9, filled by the other thread's queue");
        assert!(page[..] == pattern(3, 9 * 4096, 4096)[..]);
        hitter.join().unwrap();
    });
}

/// A sync that would wait for pages that a request queue of the same thread
/// is writing back (only that thread, polling its queue, can finish them)
/// fails after the pin wait with `HeldByCaller` instead of waiting for ever;
/// once the queue is drained, the sync writes everything.
#[test]
fn a_sync_waiting_for_its_own_queues_write_backs_fails_instead_of_hanging() {
    let tmp = TempDir::new("sync-own-queue");
    // Devices that answer in 20-30 ms: the queue's write-backs are still in
    // flight when its submit returns, however fast the disk under the test.
    let slow = slow_devices();
    let store = Store::open(&tmp.devices(2), slow.clone()).unwrap();
    drop(store.create("f", 64 * 4096, LayoutKind::Stripe).unwrap());
    let opts = CacheOptions {
        pin_wait: Duration::from_millis(100),
        ..cache(16, 16)
    };
    let cs = CachedStore::with_flusher(store, opts, None).unwrap();
    let cf = cs.open_file("f").unwrap();
    // Every page dirty; the cache, a quarter of the file, full of them.
    for p in 0..64u64 {
        cf.write_at(p * 4096, &[p as u8 + 1; 4096]).unwrap();
    }
    // Reads that must evict dirty victims: the queue writes them back, and
    // nothing here polls it.
    let mut q = cs.queue(16);
    let reqs = (0..64u64)
        .map(|p| CachedRequest::tagged(OpKind::Read, &cf, p * 4096, vec![0; 4096], p))
        .collect();
    q.submit(reqs);
    // A watchdog: a sync that waits for ever fails the test rather than
    // hanging it.
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    {
        let done = done.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs(60));
            if !done.load(std::sync::atomic::Ordering::SeqCst) {
                eprintln!("a sync waited 60 s for its own queue's write-backs");
                std::process::exit(3);
            }
        });
    }
    let t = Instant::now();
    let r = cf.sync();
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    match r {
        Err(Error::HeldByCaller(m)) => assert!(m.contains("drain the queue"), "{m}"),
        other => panic!("expected HeldByCaller, got {other:?}"),
    }
    assert!(t.elapsed() < Duration::from_secs(10));
    q.drain();
    let mut done = Vec::new();
    q.take_completions(&mut done);
    assert_eq!(done.len(), 64);
    for (p, c) in done {
        // A read parked behind a victim for longer than the pin wait (the
        // thread was in the sync meanwhile) gives up; none reads wrong bytes.
        match c.result {
            Ok(_) => assert!(
                c.buf.iter().all(|&b| b == p as u8 + 1),
                "page {p} read back"
            ),
            Err(Error::Busy(_)) => {}
            Err(e) => panic!("page {p}: {e}"),
        }
    }
    drop(q);
    cf.sync().unwrap();
    drop(cf);
    drop(cs);
    let store = Store::open(&tmp.devices(2), slow).unwrap();
    let f = store.open_file("f").unwrap();
    let mut b = AlignedBuf::new(64 * 4096);
    f.read_at(0, &mut b).unwrap();
    for p in 0..64usize {
        assert!(
            b[p * 4096..(p + 1) * 4096]
                .iter()
                .all(|&x| x == p as u8 + 1),
            "page {p} on the devices"
        );
    }
}

/// A store on devices that answer in 20-30 ms with file `f` of 64 pages,
/// each written (dirty) through a cache of 16 pages, readahead off: a
/// request queue's reads of it evict dirty victims, whose write-backs the
/// queue owes until it is polled.
fn every_page_dirty_on_slow_devices(name: &str) -> (TempDir, CachedStore) {
    let tmp = TempDir::new(name);
    let store = Store::open(&tmp.devices(2), slow_devices()).unwrap();
    drop(store.create("f", 64 * 4096, LayoutKind::Stripe).unwrap());
    let cs = CachedStore::with_flusher(store, cache(16, 16), None).unwrap();
    cs.set_readahead(0);
    let cf = cs.open_file("f").unwrap();
    for p in 0..64u64 {
        cf.write_at(p * 4096, &[p as u8 + 1; 4096]).unwrap();
    }
    (tmp, cs)
}

/// A growth after a shrink (which takes the file's sync lock) by a thread
/// whose request queue owes the write-backs of dirty pages (started for its
/// reads' victims, not polled since), while another thread's sync waits for
/// those pages under that lock: the growth fails `HeldByCaller` instead of
/// waiting for the sync, which waits for the queue, for ever; once the
/// queue is drained the sync ends and the growth goes through.
#[test]
fn a_growth_beside_a_sync_waiting_for_its_own_queues_write_backs_is_refused() {
    // A sync that had not yet taken its lock when the growth came (a loaded
    // machine) lets the growth through: tried again.
    for attempt in 0.. {
        let (_tmp, cs) = every_page_dirty_on_slow_devices("grow-own-queue");
        let cf = cs.open_file("f").unwrap();
        cf.set_len(63 * 4096).unwrap();
        let mut q = cs.queue(16);
        q.submit(
            (0..63u64)
                .map(|p| CachedRequest::tagged(OpKind::Read, &cf, p * 4096, vec![0; 4096], p))
                .collect(),
        );
        let watchdog = Watchdog::new("a growth and a sync waited 60 s for each other");
        let syncer = {
            let cf = cf.clone();
            std::thread::spawn(move || cf.sync())
        };
        std::thread::sleep(Duration::from_millis(300));
        let r = cf.grow(64 * 4096);
        assert!(
            matches!(r, Err(Error::HeldByCaller(_)) | Ok(())),
            "growth: {r:?}"
        );
        q.drain();
        syncer.join().unwrap().unwrap();
        if r.is_ok() {
            drop(watchdog);
            assert!(
                attempt < 5,
                "the sync never took its lock before the growth"
            );
            continue;
        }
        cf.grow(64 * 4096).unwrap();
        drop(watchdog);
        assert_eq!(cf.len(), 64 * 4096);
        break;
    }
}

/// A sync by a thread whose request queue owes the write-backs of dirty
/// pages, beside another thread's sync that waits for those pages under the
/// file's sync lock: it fails `HeldByCaller` instead of waiting for that
/// sync, which waits for the queue, for ever; once the queue is drained
/// both syncs pass.
#[test]
fn a_sync_beside_a_sync_waiting_for_its_own_queues_write_backs_is_refused() {
    let (_tmp, cs) = every_page_dirty_on_slow_devices("sync-beside-own-queue");
    let cf = cs.open_file("f").unwrap();
    let mut q = cs.queue(16);
    q.submit(
        (0..64u64)
            .map(|p| CachedRequest::tagged(OpKind::Read, &cf, p * 4096, vec![0; 4096], p))
            .collect(),
    );
    let watchdog = Watchdog::new("two syncs and a queue waited 60 s for each other");
    let syncer = {
        let cf = cf.clone();
        std::thread::spawn(move || cf.sync())
    };
    std::thread::sleep(Duration::from_millis(300));
    let r = cf.sync();
    assert!(matches!(r, Err(Error::HeldByCaller(_))), "sync: {r:?}");
    q.drain();
    syncer.join().unwrap().unwrap();
    cf.sync().unwrap();
    drop(watchdog);
}

/// A growth after a shrink by a thread holding a guard of a page that
/// another thread's request queue is writing back (the guard taken after
/// that write-back began), while a sync waits for the write-back under the
/// file's sync lock: the sync waits for the other thread, not for the
/// guard (the page is clean once its write-back ends), so the growth waits
/// for the sync instead of being refused, and goes through once the other
/// thread drains its queue.
#[test]
fn a_growth_holding_a_guard_of_a_page_under_another_threads_write_back_waits_for_the_sync() {
    let (_tmp, cs) = every_page_dirty_on_slow_devices("grow-guard-under-write-back");
    let cf = cs.open_file("f").unwrap();
    cf.set_len(63 * 4096).unwrap();
    let dirty_before: Vec<u64> = (cs.cache().pages().into_iter())
        .filter(|p| p.dirty && p.page < 60)
        .map(|p| p.page)
        .collect();
    assert!(!dirty_before.is_empty(), "no dirty page below 60 is cached");
    let (submitted_tx, submitted_rx) = std::sync::mpsc::channel();
    let watchdog = Watchdog::new("a growth and a sync waited 60 s for each other");
    std::thread::scope(|s| {
        s.spawn(|| {
            // Reads of pages no longer cached: their victims are dirty, and
            // their write-backs (with the region's other dirty pages) stay
            // this thread's until it polls.
            let mut q = cs.queue(16);
            q.submit(
                (0..4u64)
                    .map(|p| CachedRequest::tagged(OpKind::Read, &cf, p * 4096, vec![0; 4096], p))
                    .collect(),
            );
            submitted_tx.send(()).unwrap();
            std::thread::sleep(Duration::from_millis(1500));
            q.drain();
        });
        submitted_rx.recv().unwrap();
        // A page dirty before and clean now is under that queue's write-back.
        let clean: Vec<u64> = (cs.cache().pages().into_iter())
            .filter(|p| !p.dirty && dirty_before.contains(&p.page))
            .map(|p| p.page)
            .collect();
        let guard = clean
            .iter()
            .find_map(|&p| cf.page_if_cached(p * 4096).unwrap())
            .expect("a guard of a page under the queue's write-back");
        let syncer = s.spawn(|| cf.sync());
        std::thread::sleep(Duration::from_millis(300));
        let r = cf.grow(64 * 4096);
        assert!(r.is_ok(), "growth: {r:?}");
        drop(guard);
        syncer.join().unwrap().unwrap();
    });
    drop(watchdog);
    assert_eq!(cf.len(), 64 * 4096);
}

/// An extending write by a thread whose request queue owes the write-back of
/// a dirty page, while another thread's extending write (holding the file's
/// lock for extending writes) waits for that write-back: it fails
/// `HeldByCaller` instead of waiting for the lock, whose holder waits for
/// the queue, for ever; once the queue is drained the other write lands and
/// this one goes through.
#[test]
fn an_extending_write_beside_one_waiting_for_its_own_queues_write_back_is_refused() {
    // A write-back the queue's submit already reaped (the machine slow to
    // come back to this thread) leaves nothing to wait for: tried again.
    for attempt in 0.. {
        let (_tmp, cs) = every_page_dirty_on_slow_devices("extend-beside-own-queue");
        let cf = cs.open_file("f").unwrap();
        let dirty_before: Vec<u64> = (cs.cache().pages().into_iter())
            .filter(|p| p.dirty && p.page >= 8)
            .map(|p| p.page)
            .collect();
        let mut q = cs.queue(16);
        q.submit(
            (0..4u64)
                .map(|p| CachedRequest::tagged(OpKind::Read, &cf, p * 4096, vec![0; 4096], p))
                .collect(),
        );
        // A page dirty before and clean now is under the queue's write-back.
        let owed = (cs.cache().pages().into_iter())
            .filter(|p| !p.dirty && dirty_before.contains(&p.page))
            .map(|p| p.page)
            .min()
            .expect("a page under the queue's write-back");
        let watchdog = Watchdog::new("two extending writes and a queue waited 60 s for each other");
        let waited = std::thread::scope(|s| {
            let writer =
                s.spawn(|| cf.write_extending(owed * 4096, &vec![9; (65 - owed as usize) * 4096]));
            let waited = writer_waits(&writer, &cf, 65 * 4096);
            if waited {
                let r = cf.write_extending(65 * 4096, &[7; 4096]);
                assert!(
                    matches!(r, Err(Error::HeldByCaller(_))),
                    "extending write: {r:?}"
                );
            }
            q.drain();
            writer.join().unwrap().unwrap();
            waited
        });
        drop(watchdog);
        if !waited {
            assert!(attempt < 5, "the other write never waited for the queue");
            continue;
        }
        cf.write_extending(65 * 4096, &[7; 4096]).unwrap();
        assert_eq!(cf.len(), 66 * 4096);
        let mut b = vec![0; 4096];
        cf.read_at(owed * 4096, &mut b).unwrap();
        assert!(
            b.iter().all(|&x| x == 9),
            "the other extending write's bytes"
        );
        cf.read_at(65 * 4096, &mut b).unwrap();
        assert!(b.iter().all(|&x| x == 7), "this write's bytes");
        return;
    }
}

/// Whether `writer`, an extending write of `cf` to `len` bytes, is waiting
/// (its growth done, the write itself not ended 200 ms later).
fn writer_waits<T>(
    writer: &std::thread::ScopedJoinHandle<'_, T>,
    cf: &CachedFile,
    len: u64,
) -> bool {
    let t = Instant::now();
    while cf.file().len() < len && !writer.is_finished() {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "the extending write never grew the file"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(200));
    !writer.is_finished()
}

/// An extending write by a thread whose request queue holds the read of a
/// page in flight (a read, or a write of part of a page not cached, which
/// reads it first), while another thread's extending write (holding the
/// file's lock for extending writes) waits for that read: it fails
/// `HeldByCaller` instead of waiting for the lock for ever; once the queue
/// is drained both go through.
#[test]
fn an_extending_write_beside_one_waiting_for_its_own_queues_read_is_refused() {
    for kind in ["read", "write of part of a page"] {
        for attempt in 0.. {
            let tmp = TempDir::new("extend-beside-own-fill");
            let (cs, cf) = threes_behind_a_small_cache(&tmp, 16);
            let mut q = cs.queue(4);
            q.submit(vec![if kind == "read" {
                CachedRequest::tagged(OpKind::Read, &cf, 100 * 4096, vec![0; 4096], 0)
            } else {
                CachedRequest::tagged(OpKind::Write, &cf, 100 * 4096 + 8, vec![5; 100], 0)
            }]);
            let watchdog = Watchdog::new("two extending writes and a queue's read waited 60 s");
            let waited = std::thread::scope(|s| {
                let writer = s.spawn(|| cf.write_extending(100 * 4096, &vec![9; 29 * 4096]));
                let waited = writer_waits(&writer, &cf, 129 * 4096);
                if waited {
                    let r = cf.write_extending(129 * 4096, &[7; 4096]);
                    assert!(matches!(r, Err(Error::HeldByCaller(_))), "{kind}: {r:?}");
                }
                q.drain();
                writer.join().unwrap().unwrap();
                waited
            });
            drop(watchdog);
            if !waited {
                assert!(
                    attempt < 5,
                    "{kind}: the other write never waited for the queue"
                );
                continue;
            }
            cf.write_extending(129 * 4096, &[7; 4096]).unwrap();
            assert_eq!(cf.len(), 130 * 4096);
            break;
        }
    }
}

/// A thread holding a mutable guard of a page another thread waits to read,
/// that other thread holding a mutable guard of a dirty page a sync waits
/// for: a growth after a shrink by the first thread (which takes the sync's
/// lock) fails `HeldByCaller` instead of waiting for ever (it for the sync,
/// the sync for the reader, the reader for it), though the sync waits for
/// none of its pages; once its guard goes, all three end.
#[test]
fn a_growth_by_a_guard_holder_another_thread_waits_for_beside_a_sync_is_refused() {
    // A sync that had not yet taken its lock when the growth came lets the
    // growth through: tried again.
    for attempt in 0.. {
        let tmp = TempDir::new("grow-guard-chain");
        let (_cs, cf) = threes_behind_a_small_cache(&tmp, 16);
        cf.set_len(127 * 4096).unwrap();
        cf.write_at(5 * 4096, &[1; 4096]).unwrap();
        let mut b = vec![0; 4096];
        cf.read_at(9 * 4096, &mut b).unwrap();
        let (held_tx, held_rx) = std::sync::mpsc::channel();
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let watchdog = Watchdog::new("a growth, a sync and a reader waited 60 s for each other");
        let refused = std::thread::scope(|s| {
            let cf = &cf;
            let reader = s.spawn(move || {
                let g = cf.page_mut(5 * 4096).unwrap();
                held_tx.send(()).unwrap();
                go_rx.recv().unwrap();
                let mut b = vec![0; 4096];
                let r = cf.read_at(9 * 4096, &mut b);
                drop(g);
                r
            });
            held_rx.recv().unwrap();
            let syncer = s.spawn(|| cf.sync());
            std::thread::sleep(Duration::from_millis(200));
            let mine = cf.page_mut(9 * 4096).unwrap();
            go_tx.send(()).unwrap();
            std::thread::sleep(Duration::from_millis(300));
            let r = cf.grow(128 * 4096);
            assert!(
                matches!(r, Err(Error::HeldByCaller(_)) | Ok(())),
                "growth: {r:?}"
            );
            drop(mine);
            reader.join().unwrap().unwrap();
            syncer.join().unwrap().unwrap();
            r.is_err()
        });
        drop(watchdog);
        if !refused {
            assert!(
                attempt < 5,
                "the sync never took its lock before the growth"
            );
            continue;
        }
        cf.grow(128 * 4096).unwrap();
        assert_eq!(cf.len(), 128 * 4096);
        break;
    }
}

/// A sync by a thread whose request queue holds the read of a page in
/// flight, while another thread holds a mutable guard of a dirty page of
/// the file (which the sync waits for) and waits to read that page: the
/// sync fails `HeldByCaller` after the pin wait instead of waiting for ever
/// (it for the reader, the reader for its queue); once the queue is drained
/// the reader and a sync go through.
#[test]
fn a_sync_waiting_for_a_reader_of_its_own_queues_read_is_refused() {
    for attempt in 0.. {
        let tmp = TempDir::new("sync-beside-own-fill");
        let (cs, cf) = threes_behind_a_small_cache(&tmp, 16);
        cf.write_at(5 * 4096, &[1; 4096]).unwrap();
        let mut q = cs.queue(4);
        q.submit(vec![CachedRequest::tagged(
            OpKind::Read,
            &cf,
            100 * 4096,
            vec![0; 4096],
            0,
        )]);
        let (held_tx, held_rx) = std::sync::mpsc::channel();
        let watchdog = Watchdog::new("a sync and a reader of its queue's read waited 60 s");
        let waited = std::thread::scope(|s| {
            let cf = &cf;
            let reader = s.spawn(move || {
                let g = cf.page_mut(5 * 4096).unwrap();
                held_tx.send(()).unwrap();
                let mut b = vec![0; 4096];
                let r = cf.read_at(100 * 4096, &mut b);
                drop(g);
                r
            });
            held_rx.recv().unwrap();
            std::thread::sleep(Duration::from_millis(300));
            // The read was still in flight when the reader came (else it
            // read the page at once, and there is nothing to wait for).
            let waited = !reader.is_finished();
            if waited {
                let r = cf.sync();
                assert!(matches!(r, Err(Error::HeldByCaller(_))), "sync: {r:?}");
            }
            q.drain();
            reader.join().unwrap().unwrap();
            waited
        });
        drop(watchdog);
        if !waited {
            assert!(attempt < 5, "the reader never waited for the queue's read");
            continue;
        }
        cf.sync().unwrap();
        break;
    }
}

/// Two threads, each holding a mutable guard of a page of the file the other
/// syncs: at least one sync fails `HeldByCaller` once it has waited the pin
/// wait (each waited for the other's guard for ever); then both files sync.
#[test]
fn two_syncs_each_waiting_for_the_others_guard_do_not_wait_for_ever() {
    let tmp = TempDir::new("sync-cross-guards");
    let (cs, cf) = threes_behind_a_small_cache(&tmp, 16);
    let cg = cs.create("g", 16 * 4096, LayoutKind::Stripe).unwrap();
    let both = std::sync::Barrier::new(2);
    let watchdog = Watchdog::new("two syncs waited 60 s for each other's guards");
    let (ra, rb) = std::thread::scope(|s| {
        let a = s.spawn(|| {
            let g = cf.page_mut(0).unwrap();
            both.wait();
            let r = cg.sync();
            drop(g);
            r
        });
        let b = s.spawn(|| {
            let g = cg.page_mut(0).unwrap();
            both.wait();
            let r = cf.sync();
            drop(g);
            r
        });
        (a.join().unwrap(), b.join().unwrap())
    });
    drop(watchdog);
    for r in [&ra, &rb] {
        assert!(
            matches!(r, Ok(()) | Err(Error::HeldByCaller(_))),
            "{ra:?} {rb:?}"
        );
    }
    assert!(ra.is_err() || rb.is_err(), "{ra:?} {rb:?}");
    cf.sync().unwrap();
    cg.sync().unwrap();
}

/// Two threads, each holding a mutable guard of a page of a file whose sync
/// (by a third and a fourth thread) waits for it, each then syncing the
/// other file, whose sync lock is taken: at least one fails `HeldByCaller`
/// instead of all four waiting for ever; then every sync ends.
#[test]
fn syncs_of_each_others_guarded_files_behind_other_syncs_do_not_wait_for_ever() {
    let tmp = TempDir::new("sync-cross-guards-four");
    let (cs, cf) = threes_behind_a_small_cache(&tmp, 16);
    let cg = cs.create("g", 16 * 4096, LayoutKind::Stripe).unwrap();
    let (held_tx, held_rx) = std::sync::mpsc::channel();
    let go = std::sync::Barrier::new(3);
    let watchdog = Watchdog::new("four syncs waited 60 s for each other's guards");
    let (ra, rt) = std::thread::scope(|s| {
        let guarded_sync = |mine: &'static str| {
            let (held_tx, go, cf, cg) = (held_tx.clone(), &go, &cf, &cg);
            move || {
                let (guarded, synced) = if mine == "f" { (cf, cg) } else { (cg, cf) };
                let g = guarded.page_mut(0).unwrap();
                held_tx.send(()).unwrap();
                go.wait();
                let r = synced.sync();
                drop(g);
                r
            }
        };
        let a = s.spawn(guarded_sync("f"));
        let t = s.spawn(guarded_sync("g"));
        held_rx.recv().unwrap();
        held_rx.recv().unwrap();
        let u = s.spawn(|| cf.sync());
        let v = s.spawn(|| cg.sync());
        std::thread::sleep(Duration::from_millis(300));
        go.wait();
        let (ra, rt) = (a.join().unwrap(), t.join().unwrap());
        u.join().unwrap().unwrap();
        v.join().unwrap().unwrap();
        (ra, rt)
    });
    drop(watchdog);
    for r in [&ra, &rt] {
        assert!(
            matches!(r, Ok(()) | Err(Error::HeldByCaller(_))),
            "{ra:?} {rt:?}"
        );
    }
    assert!(ra.is_err() || rt.is_err(), "{ra:?} {rt:?}");
    cf.sync().unwrap();
    cg.sync().unwrap();
}

/// Ends the process (exit code 3) unless dropped within 60 s, so that a call
/// that would wait for ever fails its test instead of hanging the run.
/// Dropped, as unwinding from a failed assertion drops it, it stands down.
struct Watchdog(std::sync::Arc<std::sync::atomic::AtomicBool>);

impl Watchdog {
    fn new(what: &'static str) -> Watchdog {
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let seen = done.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs(60));
            if !seen.load(std::sync::atomic::Ordering::SeqCst) {
                eprintln!("{what}");
                std::process::exit(3);
            }
        });
        Watchdog(done)
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

/// A synchronous write of a page whose write-back a request queue of the
/// same thread started (a victim of the queue's reads of the file) waits
/// for that write-back, which only this thread can finish by polling: it
/// fails at once with `HeldByCaller` instead of waiting for ever, and
/// changes nothing; once the queue is drained the write lands.
#[test]
fn a_write_waiting_for_its_own_queues_write_back_fails_instead_of_hanging() {
    let tmp = TempDir::new("write-own-queue");
    // Devices that answer in 20-30 ms: the queue's write-backs are still in
    // flight when its submit returns, however fast the disk under the test.
    let slow = slow_devices();
    let store = Store::open(&tmp.devices(2), slow.clone()).unwrap();
    drop(store.create("f", 64 * 4096, LayoutKind::Stripe).unwrap());
    let opts = CacheOptions {
        pin_wait: Duration::from_millis(100),
        ..cache(16, 16)
    };
    let cs = CachedStore::with_flusher(store, opts, None).unwrap();
    cs.set_readahead(0);
    let cf = cs.open_file("f").unwrap();
    for p in 0..64u64 {
        cf.write_at(p * 4096, &[p as u8 + 1; 4096]).unwrap();
    }
    // Reads that evict dirty victims: the queue writes them back, and
    // nothing here polls it.
    let mut q = cs.queue(16);
    q.submit(
        (0..64u64)
            .map(|p| CachedRequest::tagged(OpKind::Read, &cf, p * 4096, vec![0; 4096], p))
            .collect(),
    );
    let watchdog = Watchdog::new("a write waited 60 s for its own queue's write-back");
    // Every page written again, whole and in part: the ones under the
    // queue's write-back are refused, the others land.
    let t = Instant::now();
    let mut refused = Vec::new();
    let mut held = 0;
    for p in 0..64u64 {
        let r = if p % 2 == 0 {
            cf.write_at(p * 4096, &[200; 4096])
        } else {
            cf.write_at(p * 4096 + 100, &[200; 100])
        };
        match r {
            Ok(()) => {}
            Err(Error::HeldByCaller(m)) => {
                assert!(m.contains("drain the queue"), "{m}");
                held += 1;
                refused.push(p);
            }
            // A page not cached whose set the queue's fills and
            // write-backs fill: refused after the pin wait, as it was.
            Err(Error::AllPinned { .. }) => refused.push(p),
            Err(e) => panic!("page {p}: {e}"),
        }
    }
    drop(watchdog);
    assert!(held > 0, "no page was under the queue's write-back");
    assert!(t.elapsed() < Duration::from_secs(30));
    q.drain();
    let mut c = Vec::new();
    q.take_completions(&mut c);
    assert_eq!(c.len(), 64);
    drop(q);
    // The refused writes again, now that nothing waits on this thread.
    for &p in &refused {
        if p % 2 == 0 {
            cf.write_at(p * 4096, &[200; 4096]).unwrap();
        } else {
            cf.write_at(p * 4096 + 100, &[200; 100]).unwrap();
        }
    }
    cf.sync().unwrap();
    drop(cf);
    drop(cs);
    let store = Store::open(&tmp.devices(2), slow).unwrap();
    let f = store.open_file("f").unwrap();
    let mut b = AlignedBuf::new(64 * 4096);
    f.read_at(0, &mut b).unwrap();
    for p in 0..64usize {
        let page = &b[p * 4096..(p + 1) * 4096];
        let ok = if p % 2 == 0 {
            page.iter().all(|&x| x == 200)
        } else {
            page.iter().enumerate().all(|(i, &x)| {
                x == if (100..200).contains(&i) {
                    200
                } else {
                    p as u8 + 1
                }
            })
        };
        assert!(ok, "page {p} on the devices");
    }
}

/// A partial write of a page the cache does not hold reads the page first,
/// and the page is held for writing (and dirty) until the queue reaps that
/// read. A sync of the file on the same thread, before the queue is polled
/// (other written pages lead the sync to that page's set),
/// fails `HeldByCaller` after the pin wait instead of waiting for ever; the
/// write lands once the queue is drained.
#[test]
fn a_sync_waiting_for_its_own_queues_partial_write_fails_instead_of_hanging() {
    let tmp = TempDir::new("sync-own-write");
    // A device slow enough that the reads are still in flight at the sync.
    let slow = slow_devices();
    let store = Store::open(&tmp.devices(2), slow).unwrap();
    drop(store.create("f", 64 * 4096, LayoutKind::Stripe).unwrap());
    let opts = CacheOptions {
        pin_wait: Duration::from_millis(100),
        ..cache(64, 64)
    };
    let cs = CachedStore::with_flusher(store, opts, None).unwrap();
    cs.set_readahead(0);
    let cf = cs.open_file("f").unwrap();
    // Written pages in every set (16 sets of four; no page evicted), so
    // that the sync visits the set of each page the queue claims.
    for p in 1..33u64 {
        cf.write_at(p * 4096, &[1; 4096]).unwrap();
    }
    // Partial writes of four pages not cached: each reads its page first
    // (together in flight, not one run on the caller).
    let mut q = cs.queue(4);
    let w = [0u64, 40, 50, 60];
    q.submit(
        w.iter()
            .map(|&p| CachedRequest::tagged(OpKind::Write, &cf, p * 4096 + 512, vec![7; 512], p))
            .collect(),
    );
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    {
        let done = done.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs(60));
            if !done.load(std::sync::atomic::Ordering::SeqCst) {
                eprintln!("a sync waited 60 s for its own queue's write");
                std::process::exit(3);
            }
        });
    }
    assert!(q.outstanding() > 0, "the reads came back within submit");
    let r = cf.sync();
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    match r {
        Err(Error::HeldByCaller(m)) => assert!(m.contains("drain the queue"), "{m}"),
        other => panic!("expected HeldByCaller, got {other:?}"),
    }
    q.drain();
    let mut c = Vec::new();
    q.take_completions(&mut c);
    assert_eq!(c.len(), 4);
    for (p, x) in &c {
        assert!(x.result.is_ok(), "page {p}: {:?}", x.result);
    }
    drop(q);
    cf.sync().unwrap();
    let mut b = vec![0u8; 4096];
    for p in w {
        cf.read_at(p * 4096, &mut b).unwrap();
        assert!(b[512..1024].iter().all(|&x| x == 7), "page {p}");
        assert!(
            b[..512].iter().chain(&b[1024..]).all(|&x| x == 0),
            "page {p}"
        );
    }
    cf.read_at(4096, &mut b).unwrap();
    assert!(b.iter().all(|&x| x == 1));
}

/// Reads of eight missing pages, read as one run: the first callback that
/// runs panics, and the queue's user catches it. The other seven still
/// complete (once, with their bytes) at the next drain, and no page stays
/// claimed: another thread reads every page.
#[test]
fn a_callback_that_panics_leaves_the_other_requests_to_finish() {
    let tmp = TempDir::new("callback-panic");
    let (cs, cf) = numbered_pages(&tmp, StoreOptions::default(), 64, Duration::from_secs(5));
    type Got = Vec<(u64, setcache::Result<()>, u8)>;
    let got: Rc<RefCell<Got>> = Rc::default();
    let fired = Rc::new(std::cell::Cell::new(false));
    let mut q = cs.queue(16);
    let reqs = (0..8u64)
        .map(|p| {
            let (got, fired) = (got.clone(), fired.clone());
            CachedRequest::read(&cf, p * 4096, vec![0; 4096], move |c| {
                if !fired.replace(true) {
                    panic!("the first callback panics, on purpose");
                }
                got.borrow_mut().push((p, c.result, c.buf[0]));
            })
        })
        .collect();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        q.submit(reqs);
        q.drain();
    }));
    assert!(r.is_err(), "no callback panicked");
    q.drain();
    assert_eq!(q.outstanding(), 0);
    let got = got.borrow();
    assert_eq!(got.len(), 7, "{got:?}");
    for (p, r, byte) in got.iter() {
        assert!(r.is_ok(), "page {p}: {r:?}");
        assert_eq!(*byte, *p as u8 + 1, "page {p}");
    }
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut one = [0u8; 1];
            for p in 0..8u64 {
                cf.read_at(p * 4096, &mut one).unwrap();
                assert_eq!(one[0], p as u8 + 1);
            }
        });
    });
}

/// A store opened with `opts` of one 16-page file whose page `p` holds bytes
/// `p + 1`, under a cache of `pages` pages (4-way) with pin wait `pin_wait`
/// and no readahead.
fn numbered_pages(
    tmp: &TempDir,
    opts: StoreOptions,
    pages: usize,
    pin_wait: Duration,
) -> (CachedStore, CachedFile) {
    let store = Store::open(&tmp.devices(2), opts).unwrap();
    let f = store.create("f", 16 * 4096, LayoutKind::Stripe).unwrap();
    let mut b = AlignedBuf::new(16 * 4096);
    for (i, x) in b.iter_mut().enumerate() {
        *x = (i / 4096) as u8 + 1;
    }
    f.write_at(0, &b).unwrap();
    drop(f);
    let opts = CacheOptions {
        pin_wait,
        ..cache(pages, pages)
    };
    let cs = CachedStore::with_flusher(store, opts, None).unwrap();
    cs.set_readahead(0);
    let cf = cs.open_file("f").unwrap();
    (cs, cf)
}

/// A callback of a request that completes inside `submit` (a hit) may
/// panic: the requests after it in the batch are started all the same, and
/// the panic comes out of `submit` after them (they used to be dropped with
/// the unwind: a write never made, no completion ever).
#[test]
fn a_callback_panicking_inside_submit_leaves_the_rest_of_the_batch_to_run() {
    let tmp = TempDir::new("submit-callback-panic");
    let (cs, cf) = numbered_pages(&tmp, StoreOptions::default(), 64, Duration::from_secs(5));
    let mut one = [0u8; 1];
    cf.read_at(0, &mut one).unwrap();
    let wrote = Rc::new(std::cell::Cell::new(0));
    let mut q = cs.queue(16);
    let w = wrote.clone();
    let reqs = vec![
        CachedRequest::read(&cf, 0, vec![0; 4096], |_| {
            panic!("the hit's callback panics, on purpose")
        }),
        CachedRequest::write(&cf, 4096, vec![0xab; 4096], move |c| {
            c.result.unwrap();
            w.set(w.get() + 1);
        }),
        CachedRequest::write(&cf, 2 * 4096, vec![0xcd; 4096], {
            let w = wrote.clone();
            move |c| {
                c.result.unwrap();
                w.set(w.get() + 1);
            }
        }),
    ];
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| q.submit(reqs)));
    assert!(r.is_err(), "the callback's panic comes out of submit");
    q.drain();
    assert_eq!(q.outstanding(), 0);
    assert_eq!(wrote.get(), 2, "writes after the panicking hit completed");
    cf.read_at(4096, &mut one).unwrap();
    assert_eq!(one[0], 0xab);
    cf.read_at(2 * 4096, &mut one).unwrap();
    assert_eq!(one[0], 0xcd);
}

/// Two reads parked on pages another thread holds for writing give up
/// together after the pin wait; the first one's callback panics, and the
/// second still completes at the next wait (it used to be dropped with the
/// unwind: its request stayed outstanding and a drain returned without it).
#[test]
fn requests_given_up_together_survive_a_panicking_callback() {
    let tmp = TempDir::new("give-up-panic");
    let (cs, cf) = numbered_pages(
        &tmp,
        StoreOptions::default(),
        64,
        Duration::from_millis(100),
    );
    let (held_tx, held_rx) = std::sync::mpsc::channel();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let holder = &cf;
    std::thread::scope(|s| {
        s.spawn(move || {
            let g0 = holder.page_mut(0).unwrap();
            let g1 = holder.page_mut(4096).unwrap();
            held_tx.send(()).unwrap();
            // Bounded, so that a failed assertion below ends the test.
            let _ = done_rx.recv_timeout(Duration::from_secs(120));
            drop((g0, g1));
        });
        held_rx.recv().unwrap();
        let errs: Rc<RefCell<Vec<String>>> = Rc::default();
        let fired = Rc::new(std::cell::Cell::new(false));
        let mut q = cs.queue(16);
        let reqs = (0..2u64)
            .map(|p| {
                let (errs, fired) = (errs.clone(), fired.clone());
                CachedRequest::read(&cf, p * 4096, vec![0; 4096], move |c| {
                    if !fired.replace(true) {
                        panic!("the first callback panics, on purpose");
                    }
                    errs.borrow_mut().push(format!("{:?}", c.result));
                })
            })
            .collect();
        q.submit(reqs);
        // Both past the pin wait before the queue looks again: given up in
        // one go.
        std::thread::sleep(Duration::from_millis(250));
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| q.wait(2)));
        assert!(r.is_err(), "no callback panicked");
        q.drain();
        assert_eq!(q.outstanding(), 0, "a request given up on was lost");
        let errs = errs.borrow();
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(errs[0].contains("Busy"), "{errs:?}");
        drop(q);
        done_tx.send(()).unwrap();
    });
}

/// A parked read retried as a miss is gathered into a run of reads; if the
/// next retried request's callback panics before the run goes out, the next
/// wait sends it (it used to stay unsent: the request outstanding, its page
/// claimed by a fill nobody would finish, and a drain returning without it).
#[test]
fn a_miss_gathered_before_a_callback_panics_is_still_read() {
    let tmp = TempDir::new("retry-run-panic");
    // One set of four slots.
    let (cs, cf) = numbered_pages(&tmp, StoreOptions::default(), 4, Duration::from_secs(5));
    let (held_tx, held_rx) = std::sync::mpsc::channel();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let (freed_tx, freed_rx) = std::sync::mpsc::channel();
    let holder = &cf;
    std::thread::scope(|s| {
        s.spawn(move || {
            // Pages 1 to 4 fill the set: page 1 held for writing, the others
            // pinned by shared guards, so no slot can be claimed.
            let g1 = holder.page_mut(4096).unwrap();
            let others: Vec<_> = (2..5u64).map(|p| holder.page(p * 4096).unwrap()).collect();
            held_tx.send(()).unwrap();
            // Bounded, so that a failed assertion below ends the test.
            let _ = go_rx.recv_timeout(Duration::from_secs(120));
            drop(others);
            drop(g1);
            freed_tx.send(()).unwrap();
        });
        held_rx.recv().unwrap();
        let got: Rc<RefCell<Vec<(u64, u8)>>> = Rc::default();
        let mut q = cs.queue(16);
        let reqs = [5u64, 1]
            .into_iter()
            .map(|p| {
                let got = got.clone();
                CachedRequest::read(&cf, p * 4096, vec![0; 4096], move |c| {
                    c.result.unwrap();
                    if p == 1 {
                        panic!("page 1's callback panics, on purpose");
                    }
                    got.borrow_mut().push((p, c.buf[0]));
                })
            })
            .collect();
        q.submit(reqs);
        assert_eq!(q.outstanding(), 2, "both parked");
        go_tx.send(()).unwrap();
        freed_rx.recv().unwrap();
        // Page 5 is retried first: a miss, gathered; then page 1 hits and
        // its callback panics.
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| q.wait(2)));
        assert!(r.is_err(), "no callback panicked");
        q.drain();
        assert_eq!(q.outstanding(), 0, "the gathered miss was never read");
        assert_eq!(*got.borrow(), vec![(5, 6)]);
    });
}

/// A queue dropped with reads in flight whose callbacks panic finishes every
/// request before the first panic comes out of the drop: every callback runs,
/// and every page it was reading is left cached, not claimed by a fill nobody
/// will finish (the drop used to unwind at the first panic).
#[test]
fn a_queue_dropped_while_its_callbacks_panic_finishes_every_request() {
    let tmp = TempDir::new("drop-callback-panic");
    // Reads of 5 to 150 ms: the first callback runs while the others are
    // still with the devices.
    let slow = common::sim_devices(5_000, 150_000);
    let (cs, cf) = numbered_pages(&tmp, slow, 64, Duration::from_secs(2));
    let ran = Rc::new(std::cell::Cell::new(0));
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut q = cs.queue(16);
        let reqs = (0..8u64)
            .map(|p| {
                let ran = ran.clone();
                CachedRequest::read(&cf, p * 4096, vec![0; 4096], move |c| {
                    assert_eq!(c.buf[0], p as u8 + 1, "page {p}");
                    ran.set(ran.get() + 1);
                    panic!("callback {p} panics, on purpose");
                })
            })
            .collect();
        q.submit(reqs);
        drop(q);
    }));
    let e = r.expect_err("the callbacks' panic comes out of the drop");
    let msg = e.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(msg.ends_with("panics, on purpose"), "{msg}");
    assert_eq!(ran.get(), 8, "callbacks run before the drop returned");
    let before = cs.cache().stats();
    let mut one = [0u8; 1];
    for p in 0..8u64 {
        cf.read_at(p * 4096, &mut one).unwrap();
        assert_eq!(one[0], p as u8 + 1, "page {p}");
    }
    let after = cs.cache().stats();
    assert_eq!(after.hits - before.hits, 8, "every page read stays cached");
}

/// A synchronous read or write of a page that a request queue of the same
/// thread is reading in waits for that read, which only this thread can
/// finish by polling: it fails with `HeldByCaller` after the pin wait
/// instead of waiting for ever, and once the queue is drained both land.
#[test]
fn a_call_waiting_for_its_own_queues_fill_fails_instead_of_hanging() {
    let tmp = TempDir::new("fill-own-queue");
    let (cs, cf) = threes_behind_a_small_cache(&tmp, 16);
    let mut q = cs.queue(4);
    let mut done = Vec::new();
    let page = a_read_left_in_flight(&mut q, &cf, 0);
    let outstanding = q.outstanding();
    let watchdog = Watchdog::new("a call waited 60 s for its own queue's fill");
    let t = Instant::now();
    let mut b = vec![0u8; 4096];
    match cf.read_at(page * 4096, &mut b) {
        Err(Error::HeldByCaller(m)) => assert!(m.contains("drain the queue"), "{m}"),
        other => panic!("a read of page {page} while the queue reads it: {other:?}"),
    }
    match cf.write_at(page * 4096 + 100, &[7; 100]) {
        Err(Error::HeldByCaller(m)) => assert!(m.contains("drain the queue"), "{m}"),
        other => panic!("a write of page {page} while the queue reads it: {other:?}"),
    }
    q.drain();
    done.clear();
    q.take_completions(&mut done);
    assert_eq!(done.len(), outstanding);
    assert!(done.iter().all(|(_, c)| c.result.is_ok()));
    // A callback that runs inside `submit` (a hit's) and reads a page the
    // same call sent for: refused too.
    let seen = Rc::new(RefCell::new(None));
    let (cf2, seen2) = (cf.clone(), seen.clone());
    q.submit(vec![
        CachedRequest::tagged(OpKind::Read, &cf, 100 * 4096, vec![0; 4096], 100),
        CachedRequest::read(&cf, page * 4096, vec![0; 4096], move |c| {
            assert!(c.hit, "page {page} was not cached");
            let mut b = vec![0u8; 4096];
            *seen2.borrow_mut() = Some(cf2.read_at(100 * 4096, &mut b));
        }),
    ]);
    match seen.borrow_mut().take() {
        Some(Err(Error::HeldByCaller(m))) => assert!(m.contains("drain the queue"), "{m}"),
        other => panic!("a callback's read of a page its queue reads: {other:?}"),
    }
    drop(watchdog);
    assert!(t.elapsed() < Duration::from_secs(30));
    q.drain();
    drop(q);
    cf.write_at(page * 4096 + 100, &[7; 100]).unwrap();
    cf.read_at(page * 4096, &mut b).unwrap();
    assert!(b[100..200].iter().all(|&x| x == 7) && b[..100].iter().all(|&x| x == 3));
}

/// Store options of simulated devices that answer in 20 to 30 ms.
fn slow_devices() -> StoreOptions {
    common::sim_devices(20_000, 30_000)
}

/// A store of one 128-page file of bytes 3 on simulated devices that answer
/// in 20 to 30 ms (so that a read is still in flight when its submit
/// returns), under a cache of `pages` pages with a pin wait of 100 ms and no
/// readahead.
fn threes_behind_a_small_cache(tmp: &TempDir, pages: usize) -> (CachedStore, CachedFile) {
    threes_behind_a_small_cache_waiting(tmp, pages, Duration::from_millis(100))
}

/// [`threes_behind_a_small_cache`] with a pin wait of `pin_wait`.
fn threes_behind_a_small_cache_waiting(
    tmp: &TempDir,
    pages: usize,
    pin_wait: Duration,
) -> (CachedStore, CachedFile) {
    // A read is still in flight when its submit returns (a fast disk, or the
    // host's cache of it, may answer at once).
    let slow = slow_devices();
    let store = Store::open(&tmp.devices(2), slow).unwrap();
    let f = store.create("f", 128 * 4096, LayoutKind::Stripe).unwrap();
    let mut bytes = setcache::AlignedBuf::new(128 * 4096);
    bytes.fill(3);
    f.write_at(0, &bytes).unwrap();
    f.sync().unwrap();
    drop(f);
    let opts = CacheOptions {
        pin_wait,
        ..cache(pages, pages)
    };
    let cs = CachedStore::with_flusher(store, opts, None).unwrap();
    cs.set_readahead(0);
    let cf = cs.open_file("f").unwrap();
    (cs, cf)
}

/// Submits reads of four pages `base + first + 16 k` for growing `first` until
/// some of them are still in flight when `submit` returns; returns those pages
/// in increasing order (every read submitted before is done).
fn reads_left_in_flight(q: &mut CachedQueue<'_>, cf: &CachedFile, base: u64) -> Vec<u64> {
    let mut done = Vec::new();
    for first in 0..16u64 {
        let pages: Vec<u64> = (0..4).map(|k| base + first + 16 * k).collect();
        q.submit(
            pages
                .iter()
                .map(|&p| CachedRequest::tagged(OpKind::Read, cf, p * 4096, vec![0; 4096], p))
                .collect(),
        );
        done.clear();
        q.take_completions(&mut done);
        let left: Vec<u64> = pages
            .into_iter()
            .filter(|&p| done.iter().all(|(t, _)| *t != p))
            .collect();
        if !left.is_empty() {
            return left;
        }
    }
    panic!("every read was done before its submit returned");
}

/// A page whose read is still in flight (see [`reads_left_in_flight`]).
fn a_read_left_in_flight(q: &mut CachedQueue<'_>, cf: &CachedFile, base: u64) -> u64 {
    reads_left_in_flight(q, cf, base)[0]
}

/// The highest page whose read is still in flight: no page above it is
/// being read (a shrink into it waits for no other).
fn the_highest_read_left_in_flight(q: &mut CachedQueue<'_>, cf: &CachedFile, base: u64) -> u64 {
    *reads_left_in_flight(q, cf, base)
        .last()
        .expect("a read in flight")
}

/// A synchronous read of a page that another thread's request queue is
/// reading in waits for that read, longer than the pin wait if need be, even
/// while a request queue of the reading thread holds fills of its own: only
/// a page its own queues are filling fails it with `HeldByCaller`.
#[test]
fn a_call_waits_for_another_threads_fill_while_its_own_queue_reads() {
    let tmp = TempDir::new("fill-other-queue");
    let (cs, cf) = threes_behind_a_small_cache(&tmp, 16);
    let watchdog = Watchdog::new("a call waited 60 s for another thread's fill");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::scope(|s| {
        // The other thread: a fill its queue holds for 600 ms.
        s.spawn(|| {
            let mut q = cs.queue(4);
            tx.send(a_read_left_in_flight(&mut q, &cf, 0)).unwrap();
            std::thread::sleep(Duration::from_millis(600));
            q.drain();
        });
        let theirs = rx.recv().unwrap();
        let mut q = cs.queue(4);
        let ours = a_read_left_in_flight(&mut q, &cf, 64);
        let mut b = vec![0u8; 4096];
        let t = Instant::now();
        match cf.read_at(theirs * 4096, &mut b) {
            Ok(4096) => assert!(b.iter().all(|&x| x == 3)),
            other => panic!(
                "a read of page {theirs}, which another thread's queue reads, after {:?}: {other:?}",
                t.elapsed()
            ),
        }
        match cf.read_at(ours * 4096, &mut b) {
            Err(Error::HeldByCaller(m)) => assert!(m.contains("drain the queue"), "{m}"),
            other => panic!("a read of page {ours} while this thread's queue reads it: {other:?}"),
        }
        q.drain();
        cf.read_at(ours * 4096, &mut b).unwrap();
        assert!(b.iter().all(|&x| x == 3));
    });
    drop(watchdog);
}

/// Two threads, each with a fill of its own queue in flight, each reading
/// the page the other's queue is reading: neither fill can end while both
/// wait. Each waits 30 pin waits for the other's fill, then fails with
/// `HeldByCaller` instead of waiting for ever; drained, both reads land.
#[test]
fn two_threads_waiting_for_each_others_queue_fills_both_fail_in_time() {
    let tmp = TempDir::new("fill-cross-queues");
    // Room for both queues' reads without a request waiting for a slot (a
    // request parked so is no fill in flight).
    let (cs, cf) = threes_behind_a_small_cache(&tmp, 64);
    let watchdog = Watchdog::new("two threads waited 60 s for each other's fills");
    let (txs, rxs): (Vec<_>, Vec<_>) = (0..2).map(|_| std::sync::mpsc::channel()).unzip();
    let txs: Vec<std::sync::mpsc::Sender<u64>> = txs;
    std::thread::scope(|s| {
        for (me, rx) in rxs.into_iter().enumerate() {
            let (cs, cf) = (&cs, &cf);
            let tx = txs[1 - me].clone();
            s.spawn(move || {
                // The threads meet through the channels, with a bound: one
                // that fails ends the other's wait instead of hanging it.
                let hear = || rx.recv_timeout(Duration::from_secs(20)).unwrap();
                let mut q = cs.queue(4);
                tx.send(a_read_left_in_flight(&mut q, cf, 64 * me as u64))
                    .unwrap();
                let theirs = hear();
                let mut b = vec![0u8; 4096];
                let t = Instant::now();
                match cf.read_at(theirs * 4096, &mut b) {
                    Err(Error::HeldByCaller(m)) => {
                        assert!(m.contains("another thread"), "{m}")
                    }
                    other => panic!("thread {me}: a read of page {theirs}: {other:?}"),
                }
                assert!(
                    t.elapsed() >= Duration::from_millis(2900),
                    "{:?}",
                    t.elapsed()
                );
                // Both failed before either drains: the other's fill is still
                // in flight until it does.
                tx.send(u64::MAX).unwrap();
                hear();
                q.drain();
                cf.read_at(theirs * 4096, &mut b).unwrap();
                assert!(b.iter().all(|&x| x == 3));
            });
        }
    });
    drop(watchdog);
}

/// A thread holding a page's writer (a mutable guard) reads a page that
/// another thread's request queue is reading in, and that thread, before it
/// polls its queue, reads the page the first one holds: the second's wait for
/// the writer is bounded while its queue holds fills, so it fails with
/// `HeldByCaller`, drains its queue, and both go on.
#[test]
fn a_reader_meeting_a_writer_while_its_queue_reads_does_not_wait_for_ever() {
    let tmp = TempDir::new("writer-queue-fill");
    let (cs, cf) = threes_behind_a_small_cache(&tmp, 64);
    let watchdog = Watchdog::new("a writer and a queue's thread waited 60 s for each other");
    let held = 100u64;
    let (p_tx, p_rx) = std::sync::mpsc::channel();
    let (g_tx, g_rx) = std::sync::mpsc::channel::<()>();
    std::thread::scope(|s| {
        let (cs, cf) = (&cs, &cf);
        s.spawn(move || {
            let mut q = cs.queue(4);
            p_tx.send(a_read_left_in_flight(&mut q, cf, 0)).unwrap();
            g_rx.recv_timeout(Duration::from_secs(20)).unwrap();
            a_read_under_another_threads_writer_fails_after_the_bound(cf, held);
            q.drain();
        });
        let p = p_rx.recv_timeout(Duration::from_secs(20)).unwrap();
        let mut g = cf.page_mut(held * 4096).unwrap();
        g.fill(7);
        g_tx.send(()).unwrap();
        // Waits for the other thread's fill, which it finishes once its own
        // read has failed.
        let mut b = vec![0u8; 4096];
        cf.read_at(p * 4096, &mut b).unwrap();
        assert!(b.iter().all(|&x| x == 3));
        drop(g);
    });
    let mut b = vec![0u8; 4096];
    cf.read_at(held * 4096, &mut b).unwrap();
    assert!(b.iter().all(|&x| x == 7));
    drop(watchdog);
}

/// A 16-page cache of 4-slot sets (a pin wait of 100 ms, no flusher: dirty
/// pages leave only as victims) over file `f` of `pages` pages on devices
/// that answer in 20-30 ms, so that a queue's write-backs are still in
/// flight when its submit returns.
fn sixteen_slots_without_a_flusher(tmp: &TempDir, pages: u64) -> (CachedStore, CachedFile) {
    let store = Store::open(&tmp.devices(2), slow_devices()).unwrap();
    drop(store.create("f", pages * 4096, LayoutKind::Stripe).unwrap());
    let opts = CacheOptions {
        pin_wait: Duration::from_millis(100),
        ..cache(16, 16)
    };
    let cs = CachedStore::with_flusher(store, opts, None).unwrap();
    cs.set_readahead(0);
    let cf = cs.open_file("f").unwrap();
    (cs, cf)
}

/// A read of page `held`, which another thread holds mutably while this
/// thread's queues hold I/O, fails `HeldByCaller` after the bounded wait (30
/// pin waits of 100 ms), not sooner.
fn a_read_under_another_threads_writer_fails_after_the_bound(cf: &CachedFile, held: u64) {
    let mut b = vec![0u8; 4096];
    let t = Instant::now();
    match cf.read_at(held * 4096, &mut b) {
        Err(Error::HeldByCaller(m)) => assert!(m.contains("writer"), "{m}"),
        other => panic!("a read of page {held} under another thread's writer: {other:?}"),
    }
    assert!(
        t.elapsed() >= Duration::from_millis(2900),
        "{:?}",
        t.elapsed()
    );
}

/// As above with a write-back in place of the fill: a thread holding a
/// page's writer writes a page under another thread's queue write-back (a
/// victim its reads evicted), and that thread, before polling its queue,
/// reads the page the first one holds. Its queue holds no fill (every miss
/// waits for a victim's write), only the write-back that the writer waits
/// for: its wait for the writer is bounded all the same, so neither waits
/// for ever.
#[test]
fn a_reader_meeting_a_writer_while_its_queue_writes_back_does_not_wait_for_ever() {
    let tmp = TempDir::new("writer-queue-writeback");
    let (cs, cf) = sixteen_slots_without_a_flusher(&tmp, 128);
    let held = 100u64;
    // The writer's page first, then every other slot dirty (three times as
    // many pages as slots: each set is full, with no free or clean slot).
    let mut g = cf.page_mut(held * 4096).unwrap();
    g.fill(7);
    for p in 0..48u64 {
        cf.write_at(p * 4096, &[p as u8 + 1; 4096]).unwrap();
    }
    let watchdog = Watchdog::new("a writer and a queue's write-back waited 60 s for each other");
    let (p_tx, p_rx) = std::sync::mpsc::channel();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    std::thread::scope(|s| {
        let (cs, cf) = (&cs, &cf);
        s.spawn(move || {
            // Reads that evict the dirty pages: the queue writes them back,
            // and nothing polls it until the read below fails.
            let mut q = cs.queue(16);
            q.submit(
                (64..80u64)
                    .map(|p| CachedRequest::tagged(OpKind::Read, cf, p * 4096, vec![0; 4096], p))
                    .collect(),
            );
            // A page under this queue's write-back: this thread's own write
            // of it is refused at once.
            let owed = (0..48u64)
                .find(|&p| {
                    matches!(
                        cf.write_at(p * 4096, &[p as u8 + 1; 4096]),
                        Err(Error::HeldByCaller(_))
                    )
                })
                .expect("no page under the queue's write-back");
            p_tx.send(owed).unwrap();
            go_rx.recv_timeout(Duration::from_secs(20)).unwrap();
            // Give the other thread the time to begin its write.
            std::thread::sleep(Duration::from_millis(200));
            a_read_under_another_threads_writer_fails_after_the_bound(cf, held);
            q.drain();
        });
        let owed = p_rx.recv_timeout(Duration::from_secs(20)).unwrap();
        go_tx.send(()).unwrap();
        // Waits for the other thread's write-back, which it finishes once
        // its own read has failed.
        cf.write_at(owed * 4096, &[99; 4096]).unwrap();
        drop(g);
    });
    drop(watchdog);
    let mut b = vec![0u8; 4096];
    cf.read_at(held * 4096, &mut b).unwrap();
    assert!(b.iter().all(|&x| x == 7));
}

/// Two threads whose request queues each hold write-backs of victims, each
/// writing a page under the other's queue write-back before polling its
/// own: each writer's wait is bounded while its own queue holds I/O, so
/// neither waits for ever, and every write lands once the queues are
/// drained.
#[test]
fn writers_meeting_each_others_queue_write_backs_do_not_wait_for_ever() {
    let tmp = TempDir::new("queue-write-backs-crossed");
    let (cs, cf) = sixteen_slots_without_a_flusher(&tmp, 4096);
    // Every slot dirty, one dirty page to a write-back region (256 KiB): a
    // queue's victim is written back alone, not with the dirty pages of its
    // region.
    let dirty = || (0..48u64).map(|k| k * 64);
    for p in dirty() {
        cf.write_at(p * 4096, &[p as u8 + 1; 4096]).unwrap();
    }
    // The pages under this thread's queue write-backs (its own writes of
    // them are refused at once), leaving alone those of `skip`.
    let owed = |skip: &[u64]| -> Vec<u64> {
        let mut owed = Vec::new();
        for p in dirty().filter(|p| !skip.contains(p)) {
            match cf.write_at(p * 4096, &[p as u8 + 1; 4096]) {
                Err(Error::HeldByCaller(m)) if m.contains("queue of this thread started") => {
                    owed.push(p)
                }
                Ok(()) | Err(Error::AllPinned { .. }) => {}
                Err(e) => panic!("page {p}: {e}"),
            }
        }
        owed
    };
    // Reads of `n` pages, none cached: each evicts a dirty victim unless
    // every slot its sets offer is under the other queue's write-back. The
    // second queue reads a few, since the first holds a slot (and with the
    // sets divided among partitions, a page has fewer to choose from).
    let reads = |first: u64, n: u64| -> Vec<CachedRequest<'_>> {
        (0..n)
            .map(|k| {
                let p = first + 64 * k;
                CachedRequest::tagged(OpKind::Read, &cf, p * 4096, vec![0; 4096], p)
            })
            .collect()
    };
    // A write of a page under the other thread's queue write-back: refused
    // after the bounded wait, or done if the other thread drained first.
    let cross_write = |p: u64| -> bool {
        let t = Instant::now();
        let r = cf.write_at(p * 4096, &[99; 4096]);
        assert!(t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
        match r {
            Ok(()) => false,
            Err(Error::HeldByCaller(m)) => {
                assert!(m.contains("written back by another thread"), "{m}");
                true
            }
            Err(e) => panic!("page {p}: {e}"),
        }
    };
    let watchdog = Watchdog::new("two writers waited 60 s for each other's queue write-backs");
    let (a_tx, a_rx) = std::sync::mpsc::channel::<Vec<u64>>();
    let (b_tx, b_rx) = std::sync::mpsc::channel::<Vec<u64>>();
    let (refused_a, refused_b) = std::thread::scope(|s| {
        let (owed, reads, cross_write, cs) = (&owed, &reads, &cross_write, &cs);
        let a = s.spawn(move || {
            let mut q = cs.queue(16);
            q.submit(reads(97, 1));
            let mine = owed(&[]);
            assert!(
                !mine.is_empty(),
                "no page under the first queue's write-back"
            );
            a_tx.send(mine).unwrap();
            let theirs = b_rx.recv_timeout(Duration::from_secs(30)).unwrap();
            let refused = cross_write(theirs[0]);
            q.drain();
            (refused, theirs[0])
        });
        let b = s.spawn(move || {
            let theirs = a_rx.recv_timeout(Duration::from_secs(30)).unwrap();
            let mut q = cs.queue(16);
            q.submit(reads(99, 4));
            let mine = owed(&theirs);
            assert!(
                !mine.is_empty(),
                "no page under the second queue's write-back"
            );
            b_tx.send(mine).unwrap();
            let refused = cross_write(theirs[0]);
            q.drain();
            (refused, theirs[0])
        });
        (a.join().unwrap(), b.join().unwrap())
    });
    drop(watchdog);
    assert!(
        refused_a.0 || refused_b.0,
        "neither write waited for the other's queue"
    );
    // Nothing holds the pages now: the refused writes land.
    for (_, p) in [refused_a, refused_b] {
        cf.write_at(p * 4096, &[99; 4096]).unwrap();
        let mut b = vec![0u8; 4096];
        cf.read_at(p * 4096, &mut b).unwrap();
        assert!(b.iter().all(|&x| x == 99));
    }
}

/// A shrink that cuts a page another thread's request queue is reading in,
/// while that thread waits for the store (here, to create a file) before it
/// polls the queue: the shrink's wait for the fill is bounded, so neither
/// hangs; the bytes it could not clear are cleared by the next growth.
#[test]
fn a_shrink_cutting_a_page_a_queue_reads_in_does_not_hang_the_store() {
    let tmp = TempDir::new("shrink-queue-fill");
    let (cs, cf) = threes_behind_a_small_cache(&tmp, 64);
    let watchdog = Watchdog::new("a shrink and a queue's thread waited 60 s for each other");
    let (tx, rx) = std::sync::mpsc::channel();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    std::thread::scope(|s| {
        let (cs, cf) = (&cs, &cf);
        s.spawn(move || {
            let mut q = cs.queue(4);
            let p = the_highest_read_left_in_flight(&mut q, cf, 8);
            tx.send(p).unwrap();
            go_rx.recv_timeout(Duration::from_secs(20)).unwrap();
            // The shrink sets the new length under the store's metadata lock
            // before it cuts the cached pages: once it shows, the create
            // waits for that lock.
            let t = Instant::now();
            while cf.len() != p * 4096 + 4 {
                assert!(
                    t.elapsed() < Duration::from_secs(20),
                    "the shrink never began"
                );
                std::thread::sleep(Duration::from_millis(1));
            }
            cs.create("g", 4096, LayoutKind::Stripe).unwrap();
            q.drain();
        });
        let p = rx.recv_timeout(Duration::from_secs(20)).unwrap();
        go_tx.send(()).unwrap();
        let t = Instant::now();
        match cf.set_len(p * 4096 + 4) {
            Err(Error::Busy(m)) => assert!(m.contains(&format!("page {p}")), "{m}"),
            other => panic!("a shrink into page {p} while it is read in: {other:?}"),
        }
        assert!(t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
        assert_eq!(cf.len(), p * 4096 + 4);
    });
    drop(watchdog);
    // The queue's read brought the old bytes; the growth clears them.
    cf.set_len((cf.len() / 4096 + 1) * 4096).unwrap();
    let end = cf.len();
    let mut b = vec![9u8; 4096];
    cf.read_at(end - 4096, &mut b).unwrap();
    assert_eq!(&b[..4], &[3; 4]);
    assert!(
        b[4..].iter().all(|&x| x == 0),
        "bytes past the old cut came back"
    );
}

/// A shrink into a page this thread's own request queue is reading in fails
/// `HeldByCaller` at once (only this thread finishes that read), instead of
/// waiting for it under the store's metadata lock.
#[test]
fn a_shrink_into_a_page_this_threads_queue_reads_in_fails_at_once() {
    let tmp = TempDir::new("shrink-own-fill");
    let (cs, cf) = threes_behind_a_small_cache(&tmp, 64);
    let mut q = cs.queue(4);
    let p = the_highest_read_left_in_flight(&mut q, &cf, 8);
    let t = Instant::now();
    match cf.set_len(p * 4096 + 4) {
        Err(Error::HeldByCaller(m)) => assert!(m.contains("drain the queue"), "{m}"),
        other => panic!("a shrink into page {p} this thread reads in: {other:?}"),
    }
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    q.drain();
    // The next growth clears what the shrink could not.
    cf.set_len((p + 1) * 4096).unwrap();
    let mut b = vec![9u8; 4096];
    cf.read_at(p * 4096, &mut b).unwrap();
    assert!(b[..4].iter().all(|&x| x == 3) && b[4..].iter().all(|&x| x == 0));
}

/// A thread that cuts a file while a request queue of its own still reads
/// pages past the new end is refused at once (`HeldByCaller`), as a wait
/// for its own pins is: only it can end those reads, by polling. The file
/// keeps its length, and the queue's read completes whole.
#[test]
fn cutting_a_file_under_this_threads_own_queued_read_is_refused_at_once() {
    let tmp = TempDir::new("cut-own-read");
    let roots = tmp.devices(2);
    let store = Store::open(&roots, StoreOptions::default()).unwrap();
    let data = pattern(9, 0, 64 * 4096);
    {
        let cs = CachedStore::new(store.clone(), cache(256, 256)).unwrap();
        let f = cs
            .create("cut", data.len() as u64, LayoutKind::Stripe)
            .unwrap();
        f.write_at(0, &data).unwrap();
        f.sync().unwrap();
    }
    // A cold cache: the queued read's pages are filled from the devices.
    let cs = CachedStore::new(store, cache(256, 256)).unwrap();
    let f = cs.open_file("cut").unwrap();
    let mut q = cs.queue(4);
    q.submit(vec![CachedRequest::tagged(
        OpKind::Read,
        &f,
        0,
        vec![0; data.len()],
        1,
    )]);
    let t0 = Instant::now();
    let e = f.set_len(10).unwrap_err();
    assert!(matches!(e, Error::HeldByCaller(_)), "{e}");
    assert!(
        // (A wait for its own pins would take the pin wait, 5 s.)
        t0.elapsed() < Duration::from_secs(3),
        "refused after {:?}, not at once",
        t0.elapsed()
    );
    assert_eq!(f.len(), data.len() as u64, "the length stays");
    q.drain();
    let mut done = Vec::new();
    q.take_completions(&mut done);
    let (_, c) = done.pop().expect("the read completed");
    c.result.unwrap();
    assert!(c.buf == data, "the read's bytes");
    drop(q);
    f.set_len(10).unwrap();
}

/// As a read, a write-back this thread's request queue started of a page the
/// shrink drops (the victim of a miss of another file) is this thread's to
/// end: the shrink fails `HeldByCaller` at once, changing nothing.
#[test]
fn cutting_a_file_under_this_threads_own_queued_write_back_is_refused_at_once() {
    let tmp = TempDir::new("cut-own-wb");
    let roots = tmp.devices(1);
    let store = Store::open(&roots, StoreOptions::default()).unwrap();
    // One set of four pages, no flusher: only the queue writes them back.
    let cs = CachedStore::with_flusher(store, cache(4, 4), None).unwrap();
    let x = cs.create("x", 4 * 4096, LayoutKind::Stripe).unwrap();
    let y = cs.create("y", 4 * 4096, LayoutKind::Stripe).unwrap();
    x.write_at(0, &pattern(3, 0, 4 * 4096)).unwrap();
    let mut q = cs.queue(4);
    // A miss of y: its frame is a dirty page of x, written back first.
    q.submit(vec![CachedRequest::tagged(
        OpKind::Read,
        &y,
        0,
        vec![0; 4096],
        1,
    )]);
    let t0 = Instant::now();
    let e = x.set_len(0).unwrap_err();
    assert!(matches!(e, Error::HeldByCaller(_)), "{e}");
    assert!(
        // (A wait for its own pins would take the pin wait, 5 s.)
        t0.elapsed() < Duration::from_secs(3),
        "refused after {:?}, not at once",
        t0.elapsed()
    );
    assert_eq!(x.len(), 4 * 4096, "the length stays");
    q.drain();
    drop(q);
    x.set_len(0).unwrap();
}

/// A page another thread's request queue is reading in stays so until that
/// thread polls. A thread with no queue I/O of its own that writes the page,
/// reads it or takes a guard of it waits 60 pin waits, then fails `Busy`
/// saying why, instead of hanging while the queue's thread waits for it;
/// once the queue is polled, the same calls go through.
#[test]
fn calls_over_a_page_another_threads_unpolled_queue_reads_in_fail_busy() {
    let tmp = TempDir::new("unpolled-queue-fill");
    let (cs, cf) = threes_behind_a_small_cache_waiting(&tmp, 16, Duration::from_millis(20));
    let mut q = cs.queue(4);
    q.submit(vec![CachedRequest::tagged(
        OpKind::Read,
        &cf,
        5 * 4096,
        vec![0; 4096],
        5,
    )]);
    assert_eq!(q.outstanding(), 1, "the read is in flight");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::scope(|s| {
        s.spawn(|| {
            let t = Instant::now();
            let w = cf.write_at(5 * 4096 + 100, &[9; 100]);
            let r = cf.read_at(5 * 4096, &mut [0; 64]).map(|_| ());
            let g = cf.page(5 * 4096).map(|_| ());
            tx.send(([("write", w), ("read", r), ("page", g)], t.elapsed()))
                .unwrap();
        });
        let got = rx.recv_timeout(Duration::from_secs(20));
        // Polled now either way: a thread waiting for ever goes on.
        q.drain();
        let (results, took) =
            got.expect("calls over a page an unpolled queue reads in waited 20 s");
        for (what, r) in results {
            match r {
                Err(Error::Busy(m)) => assert!(m.contains("being read in"), "{what}: {m}"),
                other => panic!("{what}: expected Busy, got {other:?}"),
            }
        }
        // Each waited its 60 pin waits of 20 ms.
        assert!(took >= Duration::from_millis(3 * 1200), "{took:?}");
    });
    let mut done = Vec::new();
    q.take_completions(&mut done);
    assert!(done[0].1.result.is_ok(), "{:?}", done[0].1.result);
    assert!(done[0].1.buf.iter().all(|&b| b == 3));
    cf.write_at(5 * 4096 + 100, &[9; 100]).unwrap();
    let mut b = [0; 4096];
    cf.read_at(5 * 4096, &mut b).unwrap();
    assert!(b[..100].iter().all(|&x| x == 3) && b[100..200].iter().all(|&x| x == 9));
    assert!(cf.page(5 * 4096).unwrap()[100..200].iter().all(|&x| x == 9));
}

/// Pages whose write-backs another thread's request queue started (victims
/// of its reads, on slow devices) stay under write-back until that thread
/// polls. A thread with no queue I/O of its own writing over them waits 60
/// pin waits for each, then fails `Busy` saying why, instead of hanging;
/// its writes over the other pages go through, and none is lost.
#[test]
fn writes_over_pages_another_threads_unpolled_queue_writes_back_fail_busy() {
    let tmp = TempDir::new("unpolled-queue-write-back");
    let (cs, cf) = threes_behind_a_small_cache_waiting(&tmp, 32, Duration::from_millis(20));
    for p in 0..8u64 {
        cf.write_at(p * 4096, &[p as u8 + 10; 4096]).unwrap();
    }
    let mut q = cs.queue(32);
    q.submit(
        (16..48u64)
            .map(|p| CachedRequest::tagged(OpKind::Read, &cf, p * 4096, vec![0; 4096], p))
            .collect(),
    );
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::scope(|s| {
        s.spawn(|| {
            let r: Vec<_> = (0..8u64)
                .map(|p| cf.write_at(p * 4096, &[p as u8 + 100; 4096]))
                .collect();
            tx.send(r).unwrap();
        });
        let got = rx.recv_timeout(Duration::from_secs(40));
        q.drain();
        let results = got.expect("writes over pages an unpolled queue writes back waited 40 s");
        let mut busy = 0;
        for (p, r) in results.into_iter().enumerate() {
            match r {
                Ok(()) => {}
                // (Or its set full of pages under I/O, if it was evicted.)
                Err(Error::Busy(m)) if m.contains("under I/O") => {}
                Err(Error::Busy(m)) => {
                    assert!(m.contains("being written back"), "page {p}: {m}");
                    busy += 1;
                }
                Err(e) => panic!("page {p}: {e}"),
            }
        }
        assert!(busy > 0, "no write met a write-back in flight");
    });
    drop(q);
    // Every page holds its first bytes or the later write's, none lost.
    for p in 0..8u64 {
        let mut b = [0; 4096];
        cf.read_at(p * 4096, &mut b).unwrap();
        assert!(
            b.iter().all(|&x| x == p as u8 + 10) || b.iter().all(|&x| x == p as u8 + 100),
            "page {p}: {}",
            b[0]
        );
    }
}

const PIDS_ENV: &str = "SETCACHE_TEST_PIDS_CHILD";

/// The child of `writes_go_through_while_the_kernel_can_start_no_io_thread`,
/// in a pids cgroup (`SETCACHE_TEST_PIDS_CHILD` names its `cgroup.procs`):
/// takes every thread the cgroup allows, then writes 1 MiB through a cached
/// store on io_uring and syncs, and says what the sync returned.
fn pids_child(procs: &str, dir: &str) {
    std::fs::write(procs, std::process::id().to_string()).unwrap();
    let roots = [std::path::PathBuf::from(dir)];
    let store = Store::open(&roots, StoreOptions::default()).unwrap();
    drop(store.create("v", 0, LayoutKind::Stripe).unwrap());
    let cs = CachedStore::new(store, cache(1024, 1024)).unwrap();
    let cf = cs.open_file("v").unwrap();
    let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
    let stop_rx = std::sync::Arc::new(std::sync::Mutex::new(stop_rx));
    let mut held = Vec::new();
    loop {
        let rx = stop_rx.clone();
        match std::thread::Builder::new().spawn(move || {
            let _ = rx.lock().unwrap().recv();
        }) {
            Ok(h) => held.push(h),
            Err(_) => break,
        }
        assert!(held.len() < 4096, "the cgroup's limit took no hold");
    }
    cf.write_extending(0, &vec![0x5a; 1 << 20]).unwrap();
    let r = cf.sync();
    println!("threads held {}; sync: {r:?}", held.len());
    drop(stop_tx);
    for h in held {
        h.join().unwrap();
    }
    cf.sync().unwrap();
}

/// A process at its thread limit (a pids cgroup) whose store runs on
/// io_uring: operations the kernel hands to a worker thread of its own, which
/// it cannot start, come back cancelled (`ECANCELED`). They are done in a
/// blocking call instead: the sync succeeds, no device is failed, and the
/// data is there for the next process.
#[test]
fn writes_go_through_while_the_kernel_can_start_no_io_thread() {
    if let (Ok(procs), Ok(dir)) = (std::env::var(PIDS_ENV), std::env::var("SETCACHE_TEST_DIR")) {
        pids_child(&procs, &dir);
        return;
    }
    let group = std::path::PathBuf::from(format!(
        "/sys/fs/cgroup/pids/setcache-test-{}",
        std::process::id()
    ));
    if std::fs::create_dir(&group).is_err() || std::fs::write(group.join("pids.max"), "30").is_err()
    {
        let _ = std::fs::remove_dir(&group);
        let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
        assert!(
            !ci,
            "CI is set, but no pids cgroup could be made (root and cgroup v1 needed)"
        );
        eprintln!("skipped: no pids cgroup could be made (root and cgroup v1 needed)");
        return;
    }
    let tmp = TempDir::new("pids-limit");
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "writes_go_through_while_the_kernel_can_start_no_io_thread",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(PIDS_ENV, group.join("cgroup.procs"))
        .env("SETCACHE_TEST_DIR", tmp.path())
        .output()
        .unwrap();
    let _ = std::fs::remove_dir(&group);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("sync: Ok(())"), "{text}");
    let store = Store::open(&[tmp.path()], StoreOptions::default()).unwrap();
    assert_eq!(read_all(&store, "v", 1 << 20), vec![0x5a; 1 << 20]);
}

const AS_ENV: &str = "SETCACHE_TEST_AS_CHILD";

/// A request queue asked for when the address space is at its limit
/// (`RLIMIT_AS` a little above what the process maps) is refused with
/// `ENOMEM` by `try_queue`, instead of the process ending on a failed
/// allocation; without the limit it is made.
#[test]
fn a_queue_without_the_memory_for_its_tables_is_refused() {
    let tmp = TempDir::new("queue-memory");
    let store = Store::open(&tmp.devices(1), StoreOptions::default()).unwrap();
    let cs = CachedStore::new(store, cache(64, 64)).unwrap();
    if std::env::var(AS_ENV).is_ok() {
        // The store's threads started first: none starts under the limit.
        drop(cs.create("f", 4096, LayoutKind::Stripe).unwrap());
        let cf = cs.open_file("f").unwrap();
        cf.write_at(0, &[1; 4096]).unwrap();
        cf.sync().unwrap();
        let mut old = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: plain system calls with valid pointers.
        assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut old) }, 0);
        let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
        let pages: u64 = statm.split_whitespace().next().unwrap().parse().unwrap();
        // Room for the queue's tables at depth 16 (16 KiB), not at 65536.
        let rl = libc::rlimit {
            rlim_cur: pages * 4096 + (16 << 20),
            rlim_max: old.rlim_max,
        };
        // SAFETY: as above.
        assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_AS, &rl) }, 0);
        let big = cs.try_queue(65536).map(drop);
        let small = cs.try_queue(16).map(drop);
        // SAFETY: as above.
        assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_AS, &old) }, 0);
        match big {
            Err(e) => {
                assert_eq!(e.posix_errno(), libc::ENOMEM, "{e}");
                println!("refused: {e}");
            }
            Ok(()) => println!("made"),
        }
        small.unwrap();
        return;
    }
    drop(cs.try_queue(65536).unwrap());
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_queue_without_the_memory_for_its_tables_is_refused",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(AS_ENV, "1")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("refused: "), "{text}");
}

/// A queued read that gives up on a page says what held it when it gave up:
/// here another thread's mutable guard, held past the pin wait; then a read
/// of the page once the guard is gone passes.
#[test]
fn a_queued_read_given_up_says_what_held_the_page() {
    let tmp = TempDir::new("busy-why");
    let cs = common::cached_rig(&tmp, 64 * 4096, 64, 4, Duration::from_millis(200));
    let cf = cs.open_file("data").unwrap();
    let (held_tx, held_rx) = std::sync::mpsc::channel::<()>();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    std::thread::scope(|s| {
        let cf = &cf;
        s.spawn(move || {
            let g = cf.page_mut(3 * 4096).unwrap();
            held_tx.send(()).unwrap();
            let _ = go_rx.recv_timeout(Duration::from_secs(20));
            drop(g);
        });
        held_rx.recv_timeout(Duration::from_secs(20)).unwrap();
        let mut q = cs.queue(4);
        q.submit(vec![CachedRequest::tagged(
            OpKind::Read,
            cf,
            3 * 4096,
            vec![0; 4096],
            7,
        )]);
        let t = Instant::now();
        while q.outstanding() > 0 {
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "the read never ended"
            );
            q.wait(1);
        }
        go_tx.send(()).unwrap();
        let mut done = Vec::new();
        q.take_completions(&mut done);
        assert_eq!(done.len(), 1);
        match &done[0].1.result {
            Err(Error::Busy(m)) => {
                assert!(m.contains("page 3 of file \"data\""), "{m}");
                assert!(m.contains("(held by a writer when given up"), "{m}");
            }
            other => panic!("a read of a page a writer holds: {other:?}"),
        }
    });
    let mut b = vec![0; 4096];
    assert_eq!(cf.read_at(3 * 4096, &mut b).unwrap(), 4096);
    assert_eq!(b, pattern(1, 3 * 4096, 4096));
}
