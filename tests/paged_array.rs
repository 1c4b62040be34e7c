//! Paged arrays: elements in a cached file, read through per-thread
//! translation caches that hold no pins.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use common::{Rng, TempDir};
use setcache::{
    CacheOptions, CachedStore, Error, LayoutKind, PagedArray, PolicyKind, Store, StoreOptions,
    TranslationStats,
};

/// A cache of `pages` pages that grows to `max_pages`, whose pin wait is `wait`.
fn store_with(tmp: &TempDir, pages: usize, max_pages: usize, wait: Duration) -> CachedStore {
    let s = Store::open(&tmp.devices(2), StoreOptions::default()).unwrap();
    CachedStore::new(
        s,
        CacheOptions {
            size: pages * 4096,
            max_size: Some(max_pages * 4096),
            page_size: 4096,
            assoc: 8,
            policy: PolicyKind::Clock,
            pin_wait: wait,
            partitions: common::partitions_upto(pages / 8),
        },
    )
    .unwrap()
}

/// A cache of `pages` pages that does not grow, whose pin wait is `wait`.
fn store_waiting(tmp: &TempDir, pages: usize, wait: Duration) -> CachedStore {
    store_with(tmp, pages, pages, wait)
}

fn store(tmp: &TempDir, pages: usize, max_pages: usize) -> CachedStore {
    store_with(tmp, pages, max_pages, Duration::from_secs(5))
}

/// Elements written through the array read back through a reader, a copy
/// and chunks; repeated reads are served by the translation tables.
#[test]
fn elements_read_back_through_readers_copies_and_chunks() {
    let tmp = TempDir::new("array-basic");
    let cs = store(&tmp, 512, 512);
    let n = 300_000u64;
    let a = PagedArray::<u64>::create(&cs, "a", n, LayoutKind::Stripe).unwrap();
    assert_eq!(a.len(), n);
    let vals: Vec<u64> = (0..n).map(|i| i * 3 + 1).collect();
    a.write_from(0, &vals).unwrap();
    let mut r = a.reader();
    for i in (0..n).step_by(7) {
        assert_eq!(r.get(i).unwrap(), i * 3 + 1);
    }
    for _ in 0..3 {
        for i in 0..512 {
            assert_eq!(r.get(i).unwrap(), i * 3 + 1);
        }
    }
    let st = r.stats();
    assert!(st.direct > 1000, "{st:?}");
    // Batches: the same values, in the order asked; a bad index fails.
    let mut rng = Rng(3);
    let idx: Vec<u64> = (0..1000).map(|_| rng.below(n)).collect();
    let mut got = vec![0u64; 1000];
    r.get_many(&idx, &mut got).unwrap();
    assert!(idx.iter().zip(&got).all(|(&i, &x)| x == i * 3 + 1));
    assert!(matches!(
        r.get_many(&[1, n], &mut [0, 0]),
        Err(Error::OutOfRange { .. })
    ));
    assert!(matches!(
        r.get_many(&[1], &mut [0, 0]),
        Err(Error::InvalidArgument(_))
    ));
    let mut sum = 0u64;
    let mut next = 0;
    r.for_each_chunk(0..n, |first, xs| {
        assert_eq!(first, next);
        next += xs.len() as u64;
        sum = xs.iter().fold(sum, |s, &x| s.wrapping_add(x));
    })
    .unwrap();
    assert_eq!(next, n);
    assert_eq!(sum, vals.iter().fold(0u64, |s, &x| s.wrapping_add(x)));
    let mut out = vec![0u64; 1000];
    a.read_into(5000, &mut out).unwrap();
    assert_eq!(out, vals[5000..6000]);
    // Two threads, each its own reader over half.
    let total = std::sync::Mutex::new(0u64);
    a.par_chunks(2, |r, range| {
        let mut s = 0u64;
        r.for_each_chunk(range, |_, xs| {
            s = xs.iter().fold(s, |s, &x| s.wrapping_add(x))
        })?;
        let mut t = total.lock().unwrap();
        *t = t.wrapping_add(s);
        Ok(())
    })
    .unwrap();
    assert_eq!(*total.lock().unwrap(), sum);
    // More threads than the most: refused before any starts.
    let e = a
        .par_chunks(setcache::MAX_PAR_THREADS + 1, |_, _| {
            panic!("a thread started")
        })
        .unwrap_err();
    assert!(matches!(e, setcache::Error::InvalidArgument(_)), "{e}");
    a.sync().unwrap();
}

/// Two cached pages whose entries collide in the direct-mapped table are
/// both served by the tables: the one displaced from the first by the
/// second, 2-way table (whichever of its ways holds it).
#[test]
fn pages_colliding_in_the_direct_table_are_served_by_the_second() {
    let tmp = TempDir::new("array-collide");
    // 512 frames: a direct-mapped table of 512 entries, and pages 512
    // apart share an entry.
    let cs = store(&tmp, 512, 512);
    let n = 2048 * 512u64;
    let a = PagedArray::<u64>::create(&cs, "a", n, LayoutKind::Stripe).unwrap();
    let vals: Vec<u64> = (0..n).map(|i| i ^ 0x5a5a).collect();
    a.write_from(0, &vals).unwrap();
    let mut r = a.reader();
    for p in [3u64, 7, 100] {
        let (x, y) = (p * 512 + 5, (p + 512) * 512 + 9);
        for _ in 0..50 {
            assert_eq!(r.get(x).unwrap(), x ^ 0x5a5a);
            assert_eq!(r.get(y).unwrap(), y ^ 0x5a5a);
        }
    }
    let st = r.stats();
    // Each pair's first two reads look the pages up; the rest alternate
    // between the tables.
    assert!(st.private >= 3 * 90, "{st:?}");
    assert!(st.shared + st.slow <= 3 * 4, "{st:?}");
}

/// A fresh reader's first read of page 0 is served by the second table when
/// a store through the reader put the page's entry there and another page
/// then took its place in the first (no page was found by a lookup yet, so
/// the read cannot be one in order).
#[test]
fn a_fresh_readers_page_zero_is_served_by_the_second_table() {
    let tmp = TempDir::new("array-zero");
    let cs = store(&tmp, 512, 512);
    let n = 1024 * 512u64;
    let a = PagedArray::<u64>::create(&cs, "a", n, LayoutKind::Stripe).unwrap();
    // Page 0 and page 512 share an entry of the 512-entry first table.
    let (x, y) = (5u64, 512 * 512 + 9);
    a.set(x, 50).unwrap();
    a.set(y, 90).unwrap();
    let mut r = a.reader();
    r.set(x, 51).unwrap();
    r.set(y, 91).unwrap();
    let before = r.stats();
    assert_eq!(r.get(x).unwrap(), 51);
    let st = r.stats();
    assert_eq!(st.private, before.private + 1, "{st:?}");
    assert_eq!(st.shared + st.slow, before.shared + before.slow, "{st:?}");
}

/// Every read the direct-mapped table serves is counted, across the
/// reader's reports to the cache's policy (one per 1,024 such reads).
#[test]
fn direct_hits_are_counted_exactly() {
    let tmp = TempDir::new("array-count");
    let cs = store(&tmp, 64, 64);
    let a = PagedArray::<u32>::create(&cs, "a", 4096, LayoutKind::Stripe).unwrap();
    a.set(7, 70).unwrap();
    let mut r = a.reader();
    assert_eq!(r.get(7).unwrap(), 70);
    let first = r.stats();
    assert_eq!(first.direct + first.private, 0, "{first:?}");
    for k in 0..3000u64 {
        assert_eq!(
            r.get(7 + (k % 5) * 9).unwrap(),
            if k % 5 == 0 { 70 } else { 0 }
        );
    }
    let st = r.stats();
    assert_eq!(st.direct, 3000, "{st:?}");
    assert_eq!((st.shared + st.slow), (first.shared + first.slow), "{st:?}");
}

/// Elements of sizes that do not divide the page span two pages.
#[test]
fn elements_spanning_pages_read_whole() {
    let tmp = TempDir::new("array-span");
    let cs = store(&tmp, 64, 64);
    let n = 5000u64;
    let a = PagedArray::<[u8; 12]>::create(&cs, "s", n, LayoutKind::Stripe).unwrap();
    let el = |i: u64| -> [u8; 12] { std::array::from_fn(|k| (i as u8).wrapping_mul(7) ^ k as u8) };
    for i in 0..n {
        a.set(i, el(i)).unwrap();
    }
    let mut r = a.reader();
    for i in 0..n {
        assert_eq!(r.get(i).unwrap(), el(i), "element {i}");
    }
    let mut k = 0;
    r.for_each_chunk(0..n, |first, xs| {
        for (j, x) in xs.iter().enumerate() {
            assert_eq!(*x, el(first + j as u64));
        }
        k += xs.len();
    })
    .unwrap();
    assert_eq!(k as u64, n);
}

/// Misuse gets clear errors.
#[test]
fn misuse_gets_clear_errors() {
    let tmp = TempDir::new("array-misuse");
    let cs = store(&tmp, 64, 64);
    cs.create("odd", 1001, LayoutKind::Stripe).unwrap();
    match PagedArray::<u64>::open(&cs, "odd") {
        Err(Error::InvalidArgument(m)) => assert!(m.contains("1001"), "{m}"),
        other => panic!("{:?}", other.err()),
    }
    let a = PagedArray::<u32>::create(&cs, "a", 100, LayoutKind::Stripe).unwrap();
    let mut r = a.reader();
    assert!(matches!(r.get(100), Err(Error::OutOfRange { .. })));
    assert!(matches!(a.set(100, 1), Err(Error::OutOfRange { .. })));
    // In bytes, as the message says (element 100 of 100 `u32`s was "a request
    // of 1 bytes at offset 100" of "100 bytes").
    for e in [r.get(100).unwrap_err(), a.set(100, 1).unwrap_err()] {
        let m = e.to_string();
        assert!(
            m.contains("request of 4 bytes at offset 400") && m.contains("(400 bytes)"),
            "{m}"
        );
    }
    assert!(matches!(
        a.write_from(99, &[1, 2]),
        Err(Error::OutOfRange { .. })
    ));
    assert!(matches!(
        r.for_each_chunk(50..101, |_, _| {}),
        Err(Error::OutOfRange { .. })
    ));
    let ro = PagedArray::<u32>::open_read_only(&cs, "a").unwrap();
    assert!(matches!(ro.set(1, 5), Err(Error::ReadOnly(_))));
    assert!(matches!(
        PagedArray::<u64>::open(&cs, "missing"),
        Err(Error::FileNotFound(_))
    ));
}

/// A thread reading `reads` elements of `a` (element `i` holds `i << 24`
/// and a version), half on the first 4,096, each checked against the model:
/// its own index (no torn element, no other page's bytes) and a version no
/// older than `done[i]`, the last write of it that completed before the
/// read began.
fn model_reader(
    a: &Arc<PagedArray<u64>>,
    done: &Arc<Vec<AtomicU64>>,
    seed: u64,
    reads: u64,
) -> std::thread::JoinHandle<TranslationStats> {
    let (a, done) = (a.clone(), done.clone());
    std::thread::spawn(move || {
        let n = a.len();
        let mut r = a.reader();
        let mut rng = Rng(seed);
        for k in 0..reads {
            let i = if k % 2 == 0 {
                rng.below(4096)
            } else {
                rng.below(n)
            };
            let before = done[i as usize].load(Ordering::Acquire);
            let x = r.get(i).unwrap();
            assert_eq!(x >> 24, i, "element {i} read {x:#x}: not its own");
            assert!(
                x & 0xff_ffff >= before,
                "element {i}: version {} after {before} completed",
                x & 0xff_ffff
            );
        }
        r.stats()
    })
}

/// Two threads update and read one array through a cache of 32 pages (the
/// array has 512) that is resized meanwhile: every element read holds its
/// own index (no torn element, no other page's bytes) and a version no
/// older than the last write of it that completed before the read began.
#[test]
fn updates_and_reads_under_eviction_and_resize_match_a_model() {
    let tmp = TempDir::new("array-race");
    let cs = Arc::new(store(&tmp, 32, 128));
    let n = 512 * 512u64;
    let a = Arc::new(PagedArray::<u64>::create(&cs, "r", n, LayoutKind::Stripe).unwrap());
    let init: Vec<u64> = (0..n).map(|i| i << 24).collect();
    a.write_from(0, &init).unwrap();
    let done: Arc<Vec<AtomicU64>> = Arc::new((0..n).map(|_| AtomicU64::new(0)).collect());
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (a, done, stop) = (a.clone(), done.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut rng = Rng(5);
            let mut ver = vec![0u64; 4096];
            let mut writes = 0;
            while !stop.load(Ordering::Relaxed) || writes < 20_000 {
                // Updates fall on the first 4,096 elements (eight pages) and
                // a few random ones.
                let i = if writes % 4 == 0 {
                    rng.below(n)
                } else {
                    rng.below(4096)
                };
                let v = if i < 4096 {
                    ver[i as usize] += 1;
                    ver[i as usize]
                } else {
                    1
                };
                a.set(i, (i << 24) | v).unwrap();
                done[i as usize].fetch_max(v, Ordering::Release);
                writes += 1;
                if writes >= 60_000 {
                    break;
                }
            }
        })
    };
    let reader = model_reader(&a, &done, 9, 150_000);
    // Grow and shrink the cache meanwhile. A shrink that would drop dirty
    // pages stops with `ResizeBusy`: write them back and try again.
    let mut shrunk = 0;
    for k in 0..20 {
        std::thread::sleep(Duration::from_millis(10));
        if k % 2 == 0 {
            cs.cache().resize(128 * 4096).unwrap();
            continue;
        }
        for _ in 0..50 {
            match cs.cache().resize(32 * 4096) {
                Ok(()) => {
                    shrunk += 1;
                    break;
                }
                Err(Error::ResizeBusy(_)) => a.sync().unwrap(),
                Err(e) => panic!("{e}"),
            }
        }
    }
    assert!(shrunk > 0, "no shrink went through");
    let st = reader.join().unwrap();
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    assert!(
        st.direct + st.private > 0 && st.shared + st.slow > 0,
        "{st:?}"
    );
}

/// Element stores through a reader's translation entries (no exclusive
/// hold, no wait for write-backs) while another thread reads, a third syncs
/// over and over (so stores land during write-backs) and the cache of 32
/// pages (the array has 512) is resized: reads see whole elements no older
/// than the last completed store, and after a final `sync` and a reopen of
/// the store every element holds its last store.
#[test]
fn reader_stores_survive_write_backs_eviction_resize_and_reopen() {
    let tmp = TempDir::new("array-stores");
    let cs = Arc::new(store(&tmp, 32, 128));
    let n = 512 * 512u64;
    let a = Arc::new(PagedArray::<u64>::create(&cs, "s", n, LayoutKind::Stripe).unwrap());
    let init: Vec<u64> = (0..n).map(|i| i << 24).collect();
    a.write_from(0, &init).unwrap();
    let done: Arc<Vec<AtomicU64>> = Arc::new((0..n).map(|_| AtomicU64::new(0)).collect());
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (a, done) = (a.clone(), done.clone());
        std::thread::spawn(move || {
            let mut w = a.reader();
            let mut rng = Rng(11);
            let mut last = std::collections::HashMap::new();
            for k in 0..60_000u64 {
                // Most stores on eight hot pages, whose translation entries
                // the writer keeps; a few anywhere.
                let i = if k % 4 == 0 {
                    rng.below(n)
                } else {
                    rng.below(4096)
                };
                let v = last.get(&i).copied().unwrap_or(0) + 1;
                w.set(i, (i << 24) | v).unwrap();
                last.insert(i, v);
                done[i as usize].fetch_max(v, Ordering::Release);
                // Read it back through the same reader: its own store.
                assert_eq!(w.get(i).unwrap(), (i << 24) | v, "element {i}");
            }
            (last, w.stats())
        })
    };
    let reader = model_reader(&a, &done, 13, 100_000);
    // A scan of the whole array in chunks meanwhile: each element its own.
    let scanner = {
        let a = a.clone();
        std::thread::spawn(move || {
            let mut r = a.reader();
            for _ in 0..3 {
                r.for_each_chunk(0..a.len(), |first, xs| {
                    for (k, &x) in xs.iter().enumerate() {
                        let i = first + k as u64;
                        assert_eq!(x >> 24, i, "chunk element {i} read {x:#x}: not its own");
                    }
                })
                .unwrap();
            }
        })
    };
    let syncer = {
        let (a, stop) = (a.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut syncs = 0;
            while !stop.load(Ordering::Relaxed) {
                a.sync().unwrap();
                syncs += 1;
                std::thread::sleep(Duration::from_millis(1));
            }
            syncs
        })
    };
    for k in 0..20 {
        std::thread::sleep(Duration::from_millis(10));
        let size = if k % 2 == 0 { 128 } else { 32 };
        for _ in 0..50 {
            match cs.cache().resize(size * 4096) {
                Ok(()) => break,
                Err(Error::ResizeBusy(_)) => a.sync().unwrap(),
                Err(e) => panic!("{e}"),
            }
        }
    }
    let (last, st) = writer.join().unwrap();
    reader.join().unwrap();
    scanner.join().unwrap();
    stop.store(true, Ordering::Relaxed);
    assert!(syncer.join().unwrap() > 0);
    assert!(st.direct + st.private > 0, "{st:?}");
    a.sync().unwrap();
    drop(a);
    drop(Arc::into_inner(cs).expect("the last handle of the cached store"));
    // Reopened: every element holds its last store, the others their first
    // value.
    let cs = store(&tmp, 64, 64);
    let a = PagedArray::<u64>::open(&cs, "s").unwrap();
    let mut got = vec![0u64; n as usize];
    a.read_into(0, &mut got).unwrap();
    for (i, &x) in got.iter().enumerate() {
        let want = (i as u64) << 24 | last.get(&(i as u64)).copied().unwrap_or(0);
        assert_eq!(x, want, "element {i} after reopening");
    }
}

/// Stores of every word size and of a larger element, through the array and
/// through a reader, read back before and after a reopen; a store refused
/// on a read-only view and by a thread that holds the page mutably (an
/// error, not a hang).
#[test]
fn stores_of_each_size_and_their_refusals() {
    let tmp = TempDir::new("array-sizes");
    {
        let cs = store(&tmp, 64, 64);
        let a8 = PagedArray::<u8>::create(&cs, "u8", 10_000, LayoutKind::Stripe).unwrap();
        let a16 = PagedArray::<i16>::create(&cs, "i16", 10_000, LayoutKind::Stripe).unwrap();
        let a32 = PagedArray::<f32>::create(&cs, "f32", 10_000, LayoutKind::Stripe).unwrap();
        let a3 = PagedArray::<[u64; 3]>::create(&cs, "x3", 3_000, LayoutKind::Stripe).unwrap();
        let (mut r8, mut r16, mut r32, mut r3) =
            (a8.reader(), a16.reader(), a32.reader(), a3.reader());
        // Every element, from the last down (a store wider than its element
        // would clobber the one above, written already), and every seventh.
        for i in (0..10_000u64).rev() {
            a8.set(i, i as u8).unwrap();
            r16.set(i, -(i as i16)).unwrap();
            if i % 7 == 0 {
                r32.set(i, i as f32 * 0.5).unwrap();
            }
        }
        for i in (0..3_000u64).step_by(5) {
            r3.set(i, [i, !i, i * 3]).unwrap();
        }
        for i in 0..10_000u64 {
            assert_eq!(r8.get(i).unwrap(), i as u8);
            assert_eq!(a16.get(i).unwrap(), -(i as i16));
        }
        for i in (0..10_000u64).step_by(7) {
            assert_eq!(r32.get(i).unwrap(), i as f32 * 0.5);
        }
        assert_eq!(r3.get(5).unwrap(), [5, !5, 15]);
        // A thread holding the page mutably gets an error from a store.
        let g = a16.file().page_mut(0).unwrap();
        assert!(matches!(r16.set(1, 9), Err(Error::HeldByCaller { .. })));
        assert!(matches!(a16.set(1, 9), Err(Error::HeldByCaller { .. })));
        drop(g);
        r16.set(1, 9).unwrap();
        for a in [a8.file(), a16.file(), a32.file(), a3.file()] {
            a.sync().unwrap();
        }
        let ro = PagedArray::<f32>::open_read_only(&cs, "f32").unwrap();
        let mut rr = ro.reader();
        assert_eq!(rr.get(7).unwrap(), 3.5);
        assert!(matches!(rr.set(7, 1.0), Err(Error::ReadOnly(_))));
        assert!(matches!(ro.set(7, 1.0), Err(Error::ReadOnly(_))));
    }
    let cs = store(&tmp, 64, 64);
    let a8 = PagedArray::<u8>::open(&cs, "u8").unwrap();
    let a16 = PagedArray::<i16>::open(&cs, "i16").unwrap();
    let a32 = PagedArray::<f32>::open(&cs, "f32").unwrap();
    let a3 = PagedArray::<[u64; 3]>::open(&cs, "x3").unwrap();
    for i in 0..10_000u64 {
        let hit = i % 7 == 0;
        assert_eq!(a8.get(i).unwrap(), i as u8, "u8 {i}");
        let want16 = if i == 1 { 9 } else { -(i as i16) };
        assert_eq!(a16.get(i).unwrap(), want16, "i16 {i}");
        assert_eq!(
            a32.get(i).unwrap(),
            if hit { i as f32 * 0.5 } else { 0.0 },
            "f32 {i}"
        );
    }
    for i in 0..3_000u64 {
        let want = if i % 5 == 0 { [i, !i, i * 3] } else { [0; 3] };
        assert_eq!(a3.get(i).unwrap(), want, "[u64; 3] {i}");
    }
}

/// In-order iteration, element by element: every element of a range that
/// starts and ends inside pages, of word elements and of elements that span
/// pages; a range past the end refused at once.
#[test]
fn iteration_in_order_matches_the_elements() {
    let tmp = TempDir::new("array-iter");
    let cs = store(&tmp, 64, 64);
    let n = 5 * 512 + 77;
    let a = PagedArray::<u64>::create(&cs, "w", n, LayoutKind::Stripe).unwrap();
    let v: Vec<u64> = (0..n).map(|i| i * 3 + 1).collect();
    a.write_from(0, &v).unwrap();
    let mut r = a.reader();
    let got: Vec<u64> = r.iter(300..n - 5).unwrap().map(|x| x.unwrap()).collect();
    assert_eq!(got, v[300..(n - 5) as usize]);
    assert_eq!(r.iter(7..7).unwrap().count(), 0);
    assert!(matches!(r.iter(0..n + 1), Err(Error::OutOfRange { .. })));
    let b = PagedArray::<[u64; 3]>::create(&cs, "x", 1000, LayoutKind::Stripe).unwrap();
    let w: Vec<[u64; 3]> = (0..1000u64).map(|i| [i, i + 1, !i]).collect();
    b.write_from(0, &w).unwrap();
    let mut rb = b.reader();
    let got: Vec<[u64; 3]> = rb.iter(1..999).unwrap().map(|x| x.unwrap()).collect();
    assert_eq!(got, w[1..999]);
}

/// Poll `f` to its end on this thread (the futures' workers wake nothing
/// that this loop needs: it polls again after a short sleep).
fn poll_to_end<F: std::future::Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    loop {
        if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// A writable array of word elements stores into its frames in place under
/// shared pins, so it and a shared page reference (a `&[u8]` of a frame)
/// never meet: the array waits for references taken before it (and is
/// refused if one outlives the pin wait, or is this thread's own), and once
/// it is made, `page`, page requests and page futures on its file are
/// refused with a clear error while the array reads and writes on. A
/// read-only array leaves references alone.
#[test]
fn shared_page_references_and_in_place_stores_never_meet() {
    let tmp = TempDir::new("array-refs");
    let cs = store_waiting(&tmp, 256, Duration::from_millis(300));
    cs.create("a", 64 * 4096, LayoutKind::Stripe).unwrap();
    cs.create("b", 64 * 4096, LayoutKind::Stripe).unwrap();
    let f = cs.open_file("a").unwrap();
    // A reference another thread holds past the pin wait: refused, and
    // references stay allowed.
    std::thread::scope(|sc| {
        let (held, got_held) = std::sync::mpsc::channel();
        let (free, go) = std::sync::mpsc::channel::<()>();
        let f = &f;
        sc.spawn(move || {
            let g = f.page(4096).unwrap();
            held.send(()).unwrap();
            go.recv().unwrap();
            drop(g);
        });
        got_held.recv().unwrap();
        let e = PagedArray::<u64>::open(&cs, "a").err().expect("refused");
        assert!(
            matches!(&e, Error::Busy(m) if m.contains("page guards")),
            "{e:?}"
        );
        free.send(()).unwrap();
    });
    drop(f.page(0).expect("references allowed after the refusal"));
    // The rest on a store with a long pin wait, so that a late thread on a
    // loaded machine is waited for where the test needs it to be.
    let tmp = TempDir::new("array-refs-long");
    let cs = store_waiting(&tmp, 256, Duration::from_secs(20));
    cs.create("a", 64 * 4096, LayoutKind::Stripe).unwrap();
    cs.create("b", 64 * 4096, LayoutKind::Stripe).unwrap();
    let f = cs.open_file("a").unwrap();
    // This thread's own reference: refused at once.
    let g = f.page(0).unwrap();
    assert!(matches!(
        PagedArray::<u64>::open(&cs, "a"),
        Err(Error::HeldByCaller(_))
    ));
    drop(g);
    // A reference let go while the array waits: the array is made.
    let a = std::thread::scope(|sc| {
        let (held, got_held) = std::sync::mpsc::channel();
        let f = &f;
        sc.spawn(move || {
            let g = f.page(8192).unwrap();
            held.send(()).unwrap();
            // Until the array has begun (it refuses new references while it
            // waits for the old ones), then at once, inside its pin wait.
            let t = std::time::Instant::now();
            loop {
                match f.page(40 * 4096) {
                    Ok(other) => drop(other),
                    Err(Error::InvalidArgument(m)) if m.contains("paged array") => break,
                    Err(e) => panic!("{e}"),
                }
                assert!(
                    t.elapsed() < Duration::from_secs(20),
                    "the array never began"
                );
                std::thread::sleep(Duration::from_millis(1));
            }
            drop(g);
        });
        got_held.recv().unwrap();
        PagedArray::<u64>::open(&cs, "a").expect("made once the reference is gone")
    });
    a.set(3, 7).unwrap();
    let refused = |r: Result<setcache::PageGuard<'_>, Error>| {
        let e = r.err().expect("refused");
        assert!(
            matches!(&e, Error::InvalidArgument(m) if m.contains("paged array")),
            "{e:?}"
        );
    };
    refused(f.page(0));
    refused(a.file().page(0));
    refused(poll_to_end(f.page_async(0)));
    refused(poll_to_end(f.page_async(40 * 4096)));
    let mut q = cs.queue(4);
    let mut reqs = vec![setcache::CachedRequest::page(&f, 0, 1)];
    q.submit_from(&mut reqs);
    q.drain();
    let mut got = Vec::new();
    q.take_pages(&mut got);
    assert_eq!(got.len(), 1);
    refused(got.pop().unwrap().1);
    assert_eq!(a.get(3).unwrap(), 7, "the array reads and writes on");
    let mut r = a.reader();
    r.set(5, 9).unwrap();
    assert_eq!(r.get(5).unwrap(), 9);
    // A read-only array stores nothing: references to its file stay.
    let fb = cs.open_file("b").unwrap();
    let ro = PagedArray::<u64>::open_read_only(&cs, "b").unwrap();
    let gb = fb.page(0).expect("allowed beside a read-only array");
    assert_eq!(ro.get(0).unwrap(), 0);
    drop(gb);
}

/// An element aligned to more than the frames are (8 KiB, where frames are
/// 4 KiB-aligned) is refused when the array is made: its elements would be
/// read in place at addresses their type forbids.
#[test]
fn elements_aligned_past_the_frames_are_refused() {
    #[derive(Clone, Copy)]
    #[repr(C, align(8192))]
    struct Wide([u8; 8192]);
    // SAFETY: any bytes are a value; no padding; the alignment is the size.
    unsafe impl setcache::Element for Wide {}
    let tmp = TempDir::new("array-align");
    let cs = store(&tmp, 64, 64);
    let got = PagedArray::<Wide>::create(&cs, "wide", 4, LayoutKind::Stripe);
    match got {
        Err(Error::InvalidArgument(m)) => assert!(m.contains("aligned to at most 4096"), "{m}"),
        other => panic!(
            "an 8 KiB-aligned element accepted: {:?}",
            other.map(|a| a.len())
        ),
    }
    let ok = PagedArray::<[u64; 512]>::create(&cs, "page", 4, LayoutKind::Stripe);
    assert!(ok.is_ok(), "a page-sized element of words refused");
}

/// A cut that gives up because another thread holds a page past the new end
/// longer than the pin wait (a reader's run pinned while its callback waits;
/// the file is cut all the same, and the cut says `Busy`) leaves no reader's
/// translation of that page in use: the reader's
/// get past the end fails `OutOfRange` instead of reading the page's old
/// bytes, and its set stores nothing.
#[test]
fn a_cut_that_gives_up_on_a_held_page_leaves_no_translation_past_the_end() {
    let tmp = TempDir::new("array-cut-held");
    let cs = store_waiting(&tmp, 64, Duration::from_millis(200));
    // Five pages: the page the cut falls in (elements 1536-2047: its tail is
    // not cleared) and the one page wholly past it (2048-2559: not dropped).
    let n = 2560u64;
    for (name, held) in [("w3", 2000u64), ("w4", 2100)] {
        let a = PagedArray::<u64>::create(&cs, name, n, LayoutKind::Stripe).unwrap();
        let vals: Vec<u64> = (0..n).map(|i| i + 1).collect();
        a.write_from(0, &vals).unwrap();
        let mut r = a.reader();
        assert_eq!(r.get(held).unwrap(), held + 1);
        let (cut, got, set) = while_held(&a, held, || {
            let cut = a.file().set_len(1600 * 8);
            (cut, r.get(held), r.set(held, 7))
        });
        assert!(matches!(cut, Err(Error::Busy(_))), "{name}: {cut:?}");
        assert_eq!(a.file().len(), 1600 * 8);
        assert!(
            matches!(got, Err(Error::OutOfRange { .. })),
            "{name}: get {held} after the cut: {got:?}"
        );
        assert!(
            matches!(set, Err(Error::OutOfRange { .. })),
            "{name}: set {held} after the cut: {set:?}"
        );
    }
    // A delete while another thread holds a page: the reader's get of that
    // page fails as the deleted file's reads do.
    let a = PagedArray::<u64>::create(&cs, "d", n, LayoutKind::Stripe).unwrap();
    a.write_from(0, &vec![9; n as usize]).unwrap();
    let mut r = a.reader();
    assert_eq!(r.get(2000).unwrap(), 9);
    let (deleted, got) = while_held(&a, 2000, || (cs.delete("d"), r.get(2000)));
    deleted.unwrap();
    assert!(
        matches!(got, Err(Error::FileGone(_))),
        "get after the delete: {got:?}"
    );
}

/// An element type the frames cannot hold is refused before the file is
/// made: the name stays free for an array of another type. Before, the file
/// was made first and left behind.
#[test]
fn a_refused_element_type_leaves_no_file() {
    #[derive(Clone, Copy)]
    #[repr(C, align(8192))]
    struct Wide([u8; 8192]);
    // SAFETY: any bytes are a value; no padding; the alignment is the size.
    unsafe impl setcache::Element for Wide {}
    let tmp = TempDir::new("array-refused-type");
    let cs = store(&tmp, 64, 64);
    for refused in [
        PagedArray::<Wide>::create(&cs, "a", 4, LayoutKind::Stripe).map(drop),
        PagedArray::<[u8; 0]>::create(&cs, "a", 4, LayoutKind::Stripe).map(drop),
        // Read by value on the stack: several MiB would overflow a thread's.
        PagedArray::<[u8; setcache::MAX_ELEMENT_BYTES + 1]>::create(
            &cs,
            "a",
            4,
            LayoutKind::Stripe,
        )
        .map(drop),
        PagedArray::<[u64; 512 << 10]>::create(&cs, "a", 4, LayoutKind::Stripe).map(drop),
    ] {
        assert!(
            matches!(refused, Err(Error::InvalidArgument(_))),
            "{refused:?}"
        );
        assert!(
            matches!(cs.open_file("a"), Err(Error::FileNotFound(_))),
            "a file left behind"
        );
    }
    let a = PagedArray::<u64>::create(&cs, "a", 4, LayoutKind::Stripe).unwrap();
    assert_eq!(a.len(), 4);
    let big =
        PagedArray::<[u8; setcache::MAX_ELEMENT_BYTES]>::create(&cs, "big", 2, LayoutKind::Stripe)
            .unwrap();
    assert_eq!(big.get(1).unwrap()[100], 0);
}

/// A cut inside a page that gives up on a later page another thread holds
/// leaves the cut page's tail as it was: a reader's translation of the cut
/// page made before must not keep showing (or taking stores into) the
/// elements past the new end. Before, only the held page's sets had their
/// change counts moved.
#[test]
fn a_cut_that_gives_up_leaves_no_translation_of_the_page_it_cuts() {
    let tmp = TempDir::new("array-cut-page");
    // A cache large enough that the cut page and the held one lie apart.
    let cs = store_waiting(&tmp, 4096, Duration::from_millis(200));
    let n = 2560u64;
    let a = PagedArray::<u64>::create(&cs, "a", n, LayoutKind::Stripe).unwrap();
    let vals: Vec<u64> = (0..n).map(|i| i + 1).collect();
    a.write_from(0, &vals).unwrap();
    let mut r = a.reader();
    // Page 3 (elements 1536-2047) translated; page 4 (2048-2559) held.
    assert_eq!(r.get(1700).unwrap(), 1701);
    let (cut, got, set, chunk) = while_held(&a, 2100, || {
        let cut = a.file().set_len(1600 * 8);
        let chunk = r.for_each_chunk(1536..2048, |_, _| {});
        (cut, r.get(1700), r.set(1700, 7), chunk)
    });
    assert!(matches!(cut, Err(Error::Busy(_))), "{cut:?}");
    assert_eq!(a.file().len(), 1600 * 8);
    for (what, r) in [
        ("get", got.map(drop)),
        ("set", set),
        ("for_each_chunk", chunk),
    ] {
        assert!(
            matches!(r, Err(Error::OutOfRange { .. })),
            "{what} past the cut through an old translation: {r:?}"
        );
    }
}

/// Run `during` while another thread holds the page of element `i` of `a`
/// (a run of it, pinned while its callback waits); the run goes before this
/// returns, so that a failed check after it ends the test.
fn while_held<T>(a: &PagedArray<u64>, i: u64, during: impl FnOnce() -> T) -> T {
    let (held_tx, held_rx) = std::sync::mpsc::channel::<()>();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    std::thread::scope(|sc| {
        sc.spawn(move || {
            let mut rb = a.reader();
            // Ends with an error once the page is cut away or deleted.
            let _ = rb.for_each_run(i..i + 1, |_, _run| {
                held_tx.send(()).unwrap();
                done_rx.recv().unwrap();
            });
        });
        held_rx.recv().unwrap();
        let out = during();
        done_tx.send(()).unwrap();
        out
    })
}

/// The file cut short under an array: a reader's gets and sets of elements
/// past the new end fail `OutOfRange` (a set stores nothing that a later
/// growth could show), and so do chunks and copies of elements that are not
/// words reaching past it (no panic, no short copy taken as whole).
#[test]
fn an_array_whose_file_is_cut_short_refuses_elements_past_the_end() {
    let tmp = TempDir::new("array-cut");
    let cs = store(&tmp, 512, 512);
    let n = 4096u64;
    let a = PagedArray::<u64>::create(&cs, "w", n, LayoutKind::Stripe).unwrap();
    let vals: Vec<u64> = (0..n).map(|i| i + 1).collect();
    a.write_from(0, &vals).unwrap();
    let mut r = a.reader();
    for i in 0..n {
        assert_eq!(r.get(i).unwrap(), i + 1);
    }
    // Cut inside the fourth page: elements from 1600 on are past the end.
    a.file().set_len(1600 * 8).unwrap();
    for i in [1600u64, 1700, 2047, 2048, 4095] {
        assert!(
            matches!(r.get(i), Err(Error::OutOfRange { .. })),
            "get {i}: {:?}",
            r.get(i)
        );
        assert!(
            matches!(r.set(i, 77), Err(Error::OutOfRange { .. })),
            "set {i}"
        );
    }
    for i in [0u64, 1000, 1536, 1599] {
        assert_eq!(r.get(i).unwrap(), i + 1);
        r.set(i, 2 * i).unwrap();
        assert_eq!(r.get(i).unwrap(), 2 * i);
    }
    // Copies, chunks and iteration of word elements across the cut.
    let mut out = vec![0u64; 512];
    let got = a.read_into(1536, &mut out);
    assert!(matches!(got, Err(Error::OutOfRange { .. })), "{got:?}");
    let got = r.for_each_chunk(1536..2048, |_, _| {});
    assert!(matches!(got, Err(Error::OutOfRange { .. })), "{got:?}");
    let items: Vec<_> = r.iter(1590..1610).unwrap().collect();
    assert!(
        items
            .iter()
            .any(|x| matches!(x, Err(Error::OutOfRange { .. }))),
        "{items:?}"
    );
    assert!(items.iter().all(|x| !matches!(x, Ok(0))), "{items:?}");
    // A cut inside an element: that element is past the end too.
    a.file().set_len(1599 * 8 + 4).unwrap();
    assert!(matches!(r.get(1599), Err(Error::OutOfRange { .. })));
    assert!(matches!(r.set(1599, 1), Err(Error::OutOfRange { .. })));
    assert!(matches!(a.set(1599, 1), Err(Error::OutOfRange { .. })));
    assert_eq!(r.get(1598).unwrap(), 1599);
    drop(r);
    // Grown back: what lies past the cut reads as zeros.
    a.file().set_len(n * 8).unwrap();
    let mut r = a.reader();
    assert!((1600..n).all(|i| r.get(i).unwrap() == 0));
    // Element 1599 kept its low four bytes (the whole of 3198).
    assert_eq!(r.get(1599).unwrap(), 2 * 1599);
    assert_eq!(r.get(1598).unwrap(), 1599);
    drop(r);
    // An array whose last page is part full, never cut: its last page's
    // elements are served by the tables as the others are.
    let c = PagedArray::<u64>::create(&cs, "c", 1000, LayoutKind::Stripe).unwrap();
    c.set(999, 5).unwrap();
    let mut r = c.reader();
    for _ in 0..10_000 {
        assert_eq!(r.get(999).unwrap(), 5);
    }
    assert!(r.stats().direct > 9_000, "{:?}", r.stats());
    // Elements that are not words, read in place by chunks and copied.
    let b = PagedArray::<[u32; 2]>::create(&cs, "b", n, LayoutKind::Stripe).unwrap();
    b.write_from(0, &vec![[1, 2]; n as usize]).unwrap();
    b.file().set_len(1600 * 8).unwrap();
    let mut rb = b.reader();
    let mut seen = 0u64;
    let got = rb.for_each_chunk(0..n, |_, c| seen += c.len() as u64);
    assert!(matches!(got, Err(Error::OutOfRange { .. })), "{got:?}");
    assert!(seen <= 1600, "{seen} elements seen");
    let mut out = vec![[0u32; 2]; 100];
    let got = b.read_into(1550, &mut out);
    assert!(matches!(got, Err(Error::OutOfRange { .. })), "{got:?}");
}

/// A writable array of word elements stores into its file's frames in place:
/// an array of other elements over the same file cannot borrow those frames
/// for its chunks meanwhile (it gets an error, not a slice that changes).
#[test]
fn chunks_in_place_are_refused_beside_a_writable_word_array() {
    let tmp = TempDir::new("array-beside");
    let cs = store(&tmp, 512, 512);
    let w = PagedArray::<u64>::create(&cs, "f", 1024, LayoutKind::Stripe).unwrap();
    w.set(5, 9).unwrap();
    let pairs = PagedArray::<[u32; 2]>::open(&cs, "f").unwrap();
    let mut r = pairs.reader();
    let got = r.for_each_chunk(0..1024, |_, _| {});
    assert!(matches!(got, Err(Error::InvalidArgument(_))), "{got:?}");
    let got = r.for_each_run(0..1024, |_, _| {});
    assert!(matches!(got, Err(Error::InvalidArgument(_))), "{got:?}");
    // Copies are still served.
    let mut out = [[0u32; 2]; 8];
    pairs.read_into(0, &mut out).unwrap();
    assert_eq!(out[5], [9, 0]);
}

/// Runs read the elements in place, in order and whole: words through both
/// of the run's paths (a page the reader's tables know, pinned through its
/// entry, and one looked up in the shared cache), elements that span two
/// pages one at a time; a range past the end is refused. Every pin comes
/// back, also from a callback that panics: the pages can all be evicted
/// afterwards.
#[test]
fn runs_read_in_place_and_give_every_pin_back() {
    let tmp = TempDir::new("array-runs");
    let cs = store(&tmp, 64, 64);
    let n = 64 * 512u64;
    let a = PagedArray::<u64>::create(&cs, "w", n, LayoutKind::Stripe).unwrap();
    let vals: Vec<u64> = (0..n)
        .map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15))
        .collect();
    a.write_from(0, &vals).unwrap();
    let mut r = a.reader();
    for pass in 0..2 {
        for range in [0..n, 700..701, 511..1537, n - 3..n, 5..5] {
            let mut next = range.start;
            r.for_each_run(range.clone(), |first, run| {
                assert_eq!(first, next, "pass {pass}: runs in order");
                let want = &vals[first as usize..first as usize + run.len()];
                assert!(
                    run.iter().eq(want.iter().copied()),
                    "pass {pass} at {first}"
                );
                assert_eq!(run.iter().len(), run.len());
                let mut out = vec![0; run.len()];
                run.copy_to(&mut out);
                assert_eq!(out, want);
                assert_eq!(run.get(run.len() - 1), want[run.len() - 1]);
                assert!(run.len() <= 512 && !run.is_empty());
                next += run.len() as u64;
            })
            .unwrap();
            assert_eq!(next, range.end, "pass {pass}: every element");
        }
    }
    assert!(matches!(
        r.for_each_run(n - 1..n + 1, |_, _| {}),
        Err(Error::OutOfRange { .. })
    ));
    // A panic on a page the tables know (just read), and on one they do not.
    r.for_each_run(512..1024, |_, _| {}).unwrap();
    for range in [512..1024, 40 * 512..n] {
        let hit = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            r.for_each_run(range, |_, _| panic!("a callback panics"))
        }));
        assert!(hit.is_err(), "the callback's panic passes through");
    }
    drop(r);
    // A writer waits for every pin of the pages it writes: none is left.
    a.write_from(0, &vals).unwrap();
    // Any pin left would keep its page from every eviction: the other
    // array's writes, four times the cache, evict all of the first one.
    let b = PagedArray::<u64>::create(&cs, "other", 4 * n, LayoutKind::Stripe).unwrap();
    b.write_from(0, &vec![7u64; 4 * n as usize]).unwrap();

    let s = PagedArray::<[u8; 12]>::create(&cs, "s", 5000, LayoutKind::Stripe).unwrap();
    let el = |i: u64| -> [u8; 12] { std::array::from_fn(|k| (i as u8).wrapping_mul(7) ^ k as u8) };
    for i in 0..5000 {
        s.set(i, el(i)).unwrap();
    }
    let mut r = s.reader();
    let mut k = 0u64;
    r.for_each_run(0..5000, |first, run| {
        assert_eq!(first, k);
        for (j, x) in run.iter().enumerate() {
            assert_eq!(x, el(first + j as u64), "element {}", first + j as u64);
        }
        k += run.len() as u64;
    })
    .unwrap();
    assert_eq!(k, 5000);
}

/// A run's word elements are read whole while another thread stores into
/// them: each value seen is one the element held, never a mix of two.
#[test]
fn runs_see_whole_words_under_concurrent_stores() {
    let tmp = TempDir::new("array-run-stores");
    let cs = store(&tmp, 64, 64);
    let n = 16 * 512u64;
    let a = PagedArray::<u64>::create(&cs, "w", n, LayoutKind::Stripe).unwrap();
    let vals: Vec<u64> = (0..n).collect();
    a.write_from(0, &vals).unwrap();
    let stop = AtomicBool::new(false);
    std::thread::scope(|sc| {
        sc.spawn(|| {
            let mut w = a.reader();
            let mut rng = Rng(5);
            let mut round = 1u64;
            while !stop.load(Ordering::Relaxed) {
                for _ in 0..4096 {
                    let i = rng.below(n);
                    // The low half is the index, the high half two equal
                    // 16-bit halves.
                    w.set(i, i | (((round & 0xffff) * 0x1_0001) << 32)).unwrap();
                }
                round += 1;
            }
        });
        let mut r = a.reader();
        for _ in 0..200 {
            r.for_each_run(0..n, |first, run| {
                for (j, x) in run.iter().enumerate() {
                    let i = first + j as u64;
                    assert_eq!(x & 0xffff_ffff, i, "element {i} read as {x:#x}");
                    let hi = x >> 32;
                    assert_eq!(hi >> 16, hi & 0xffff, "element {i} read torn: {x:#x}");
                }
            })
            .unwrap();
        }
        stop.store(true, Ordering::Relaxed);
    });
}

/// A write of a page from inside a run's callback over it is refused at
/// once (`HeldByCaller`), whichever way the run pinned the page: through the
/// shared cache (the first pass) or through the reader's entry (the next),
/// not left to wait for the thread's own pin.
#[test]
fn a_write_from_inside_a_run_of_its_page_is_refused_at_once() {
    let tmp = TempDir::new("array-run-write");
    let cs = store(&tmp, 64, 64);
    let a = PagedArray::<u64>::create(&cs, "w", 4 * 512, LayoutKind::Stripe).unwrap();
    let mut r = a.reader();
    for pass in 0..3 {
        let t = std::time::Instant::now();
        let mut got = None;
        r.for_each_run(512..1024, |_, _| got = Some(a.write_from(600, &[1, 2, 3])))
            .unwrap();
        let got = got.unwrap();
        assert!(
            matches!(got, Err(Error::HeldByCaller(_))),
            "pass {pass}: {got:?}"
        );
        assert!(
            t.elapsed() < Duration::from_secs(4),
            "pass {pass} waited {:?}",
            t.elapsed()
        );
    }
    // Outside the run the write goes through.
    a.write_from(600, &[1, 2, 3]).unwrap();
    assert_eq!(r.get(601).unwrap(), 2);
}
