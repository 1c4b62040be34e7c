//! Futures on cached files (`read_at_async`, `write_at_async`,
//! `page_async`) under a minimal executor and under tokio, page requests on
//! the queue, and what dropping a future leaves behind.

mod common;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use common::{Rng, TempDir, pattern};
use setcache::{CachedRequest, CachedStore, Error, MAX_GUARDS_PER_THREAD, Store, StoreOptions};

const PS: usize = 4096;

/// The file's initial bytes at `off`.
fn pat(off: usize, n: usize) -> Vec<u8> {
    pattern(1, off as u64, n)
}

/// A store with one file `data` of `len` bytes holding `pattern(1, ..)`,
/// written past the cache, behind an 8-way cache of `pages` pages.
fn rig(tmp: &TempDir, len: usize, pages: usize) -> CachedStore {
    common::cached_rig(tmp, len, pages, 8, Duration::from_secs(2))
}

/// The ten-line executor: a task is woken by unparking the thread that runs
/// it; a flag says whether it was woken since its last poll.
struct Flag(AtomicBool, std::thread::Thread);

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.0.store(true, Ordering::Release);
        self.1.unpark();
    }
}

/// Run `futs` together on this thread until all are done; returns their
/// outputs and the most that were pending at once.
fn run_all<F: Future>(futs: Vec<F>) -> (Vec<F::Output>, usize) {
    let me = std::thread::current();
    let mut tasks: Vec<(Pin<Box<F>>, Arc<Flag>)> = futs
        .into_iter()
        .map(|f| {
            (
                Box::pin(f),
                Arc::new(Flag(AtomicBool::new(true), me.clone())),
            )
        })
        .collect();
    let mut out: Vec<Option<F::Output>> = tasks.iter().map(|_| None).collect();
    let (mut left, mut most) = (tasks.len(), 0);
    while left > 0 {
        let mut polled = false;
        for (k, (f, flag)) in tasks.iter_mut().enumerate() {
            if out[k].is_some() || !flag.0.swap(false, Ordering::AcqRel) {
                continue;
            }
            polled = true;
            let w = Waker::from(flag.clone());
            if let Poll::Ready(v) = f.as_mut().poll(&mut Context::from_waker(&w)) {
                out[k] = Some(v);
                left -= 1;
            }
        }
        most = most.max(left);
        if !polled {
            std::thread::park_timeout(Duration::from_millis(100));
        }
    }
    (out.into_iter().map(Option::unwrap).collect(), most)
}

fn block_on<F: Future>(f: F) -> F::Output {
    run_all(vec![f]).0.pop().unwrap()
}

/// One thread keeps 64 reads of missing pages in flight under the minimal
/// executor: every one is pending at once (none is served on the polling
/// thread), each returns its page's bytes, and each counts one miss.
#[test]
fn one_thread_keeps_64_misses_in_flight_under_a_minimal_executor() {
    let tmp = TempDir::new("futures-64");
    let len = 16 << 20;
    let cs = rig(&tmp, len, 1024);
    // Random pages may neighbour each other: no readahead, so that each
    // read is one miss.
    cs.set_readahead(0);
    let f = cs.open_file("data").unwrap();
    let mut rng = Rng(7);
    let mut pages: Vec<u64> = (0..(len / PS) as u64).collect();
    for i in (1..pages.len()).rev() {
        pages.swap(i, rng.below(i as u64 + 1) as usize);
    }
    let before = cs.cache().stats();
    let mut most = 0;
    for round in pages[..64 * 8].chunks(64) {
        let futs: Vec<_> = round
            .iter()
            .map(|&p| f.read_at_async(p * PS as u64 + 100, vec![0u8; 300]))
            .collect();
        let (outs, m) = run_all(futs);
        most = most.max(m);
        for (&p, (r, buf)) in round.iter().zip(outs) {
            assert_eq!(r.unwrap(), 300);
            let off = p as usize * PS + 100;
            assert_eq!(buf, pat(off, 300), "page {p}");
        }
    }
    assert_eq!(most, 64, "64 futures were never pending at once");
    let after = cs.cache().stats();
    assert_eq!(after.misses - before.misses, 512, "one miss per read");
    assert_eq!(after.hits - before.hits, 0);
    // Now cached: a read of one page completes in its first poll.
    let p = pages[0];
    let mut fut = Box::pin(f.read_at_async(p * PS as u64, vec![0u8; PS]));
    let w = Waker::from(Arc::new(Flag(
        AtomicBool::new(false),
        std::thread::current(),
    )));
    match fut.as_mut().poll(&mut Context::from_waker(&w)) {
        Poll::Ready((r, b)) => {
            assert_eq!(r.unwrap(), PS);
            assert_eq!(b, pat(p as usize * PS, PS));
        }
        Poll::Pending => panic!("a cached page was not served in the first poll"),
    }
}

/// Writes and reads of any span through futures match a model, across
/// page boundaries and the end of the file, with sync in between; the
/// bytes are on the devices after sync.
#[test]
fn future_writes_and_reads_match_a_model() {
    let tmp = TempDir::new("futures-model");
    let len = 2 << 20;
    let cs = rig(&tmp, len, 64);
    let f = cs.open_file("data").unwrap();
    let mut model = pat(0, len);
    let mut rng = Rng(11);
    for round in 0..20 {
        let mut futs = Vec::new();
        let mut spans = Vec::new();
        for k in 0..16 {
            let off = rng.below(len as u64 - 1) as usize;
            let n = (1 + rng.below(3 * PS as u64) as usize).min(len - off);
            // Writes of one round do not overlap (their order is not fixed).
            if spans
                .iter()
                .any(|&(o, m): &(usize, usize)| off < o + m && o < off + n)
            {
                continue;
            }
            spans.push((off, n));
            let data: Vec<u8> = (0..n).map(|i| (round * 31 + k * 7 + i) as u8).collect();
            model[off..off + n].copy_from_slice(&data);
            futs.push(f.write_at_async(off as u64, data));
        }
        for (r, _) in run_all(futs).0 {
            r.unwrap();
        }
        let reads: Vec<_> = (0..16)
            .map(|_| {
                let off = rng.below(len as u64) as usize;
                (off, f.read_at_async(off as u64, vec![0u8; 2 * PS + 5]))
            })
            .collect();
        let (offs, futs): (Vec<_>, Vec<_>) = reads.into_iter().unzip();
        for (off, (r, buf)) in offs.into_iter().zip(run_all(futs).0) {
            let n = r.unwrap();
            assert_eq!(n, (2 * PS + 5).min(len - off));
            assert_eq!(&buf[..n], &model[off..off + n], "read at {off}");
        }
        if round % 5 == 4 {
            f.sync().unwrap();
        }
    }
    f.sync().unwrap();
    drop(f);
    drop(cs);
    let store = Store::open(&tmp.devices(2), StoreOptions::default()).unwrap();
    let g = store.open_file("data").unwrap();
    let mut b = setcache::AlignedBuf::new(len);
    g.read_at(0, &mut b).unwrap();
    assert!(b[..] == model[..], "the devices differ from the model");
}

/// Bad input gets a clear error from the future, with the buffer back.
#[test]
fn futures_report_bad_input() {
    let tmp = TempDir::new("futures-bad");
    let cs = rig(&tmp, 1 << 20, 1024);
    let f = cs.open_file("data").unwrap();
    let (r, b) = block_on(f.read_at_async((1 << 20) + 1, vec![7u8; 10]));
    assert!(matches!(r, Err(Error::OutOfRange { .. })), "{r:?}");
    assert_eq!(b, vec![7u8; 10]);
    let (r, _) = block_on(f.read_at_async(1 << 20, vec![0u8; 10]));
    assert_eq!(r.unwrap(), 0, "a read at the end reads nothing");
    let (r, b) = block_on(f.write_at_async((1 << 20) - 5, vec![1u8; 10]));
    assert!(matches!(r, Err(Error::OutOfRange { .. })), "{r:?}");
    assert_eq!(b.len(), 10);
    let ro = cs.open_file_read_only("data").unwrap();
    let (r, _) = block_on(ro.write_at_async(0, vec![1u8; 10]));
    assert!(matches!(r, Err(Error::ReadOnly(_))), "{r:?}");
    let r = block_on(f.page_async(1 << 20));
    assert!(matches!(r, Err(Error::OutOfRange { .. })));
    // A page this thread holds mutably: an error, not a wait for itself.
    let m = f.page_mut(0).unwrap();
    let r = block_on(f.read_at_async(10, vec![0u8; 10])).0;
    assert!(matches!(r, Err(Error::HeldByCaller(_))), "{r:?}");
    assert!(matches!(
        block_on(f.page_async(0)),
        Err(Error::HeldByCaller(_))
    ));
    drop(m);
    // Too many guards: the future's guard is refused, the page not kept.
    let held: Vec<_> = (0..MAX_GUARDS_PER_THREAD)
        .map(|k| f.page((k * PS) as u64).unwrap())
        .collect();
    let far = (100 * PS) as u64;
    let r = block_on(f.page_async(far));
    assert!(matches!(r, Err(Error::TooManyPins { .. })), "{:?}", r.err());
    drop(held);
    let g = block_on(f.page_async(far)).unwrap();
    assert_eq!(&g[..], &pat(far as usize, PS)[..]);
    drop(g);
    // After the store is dropped, futures fail with `Closed`.
    drop(cs);
    let (r, _) = block_on(f.read_at_async(200 * PS as u64, vec![0u8; 10]));
    assert!(matches!(r, Err(Error::Closed)), "{r:?}");
}

/// Page guards from futures: a missing page comes pinned from a worker and
/// shows the page's bytes; 64 at once from one thread.
#[test]
fn page_futures_hand_over_pinned_pages() {
    let tmp = TempDir::new("futures-pages");
    let len = 8 << 20;
    let cs = rig(&tmp, len, 256);
    let f = cs.open_file("data").unwrap();
    let futs: Vec<_> = (0..64u64)
        .map(|k| f.page_async(k * 17 * PS as u64 + 9))
        .collect();
    let (guards, most) = run_all(futs);
    assert_eq!(most, 64);
    for (k, g) in guards.iter().enumerate() {
        let g = g.as_ref().unwrap();
        let off = k * 17 * PS;
        assert_eq!(g.offset(), off as u64);
        assert_eq!(&g[..], &pat(off, PS)[..]);
    }
    // While held, a scan of the whole file cannot evict them.
    let mut b = vec![0u8; PS];
    for p in 0..(len / PS) as u64 {
        f.read_at(p * PS as u64, &mut b).unwrap();
    }
    for (k, g) in guards.iter().enumerate() {
        assert_eq!(&g.as_ref().unwrap()[..], &pat(k * 17 * PS, PS)[..]);
    }
}

/// Page futures count against the bound of the thread that started them
/// until they end, finished on a worker or not: past it, the next page
/// future and `page` are refused; futures polled to their end on another
/// thread, or dropped, give their places back.
#[test]
fn unfinished_page_futures_count_against_their_threads_bound() {
    let tmp = TempDir::new("futures-claims");
    let len = 8 << 20;
    let cs = rig(&tmp, len, 1024);
    let f = cs.open_file("data").unwrap();
    let start = |base: u64| {
        let mut futs: Vec<_> = (0..MAX_GUARDS_PER_THREAD as u64)
            .map(|k| Box::pin(f.page_async((base + k * 3) * PS as u64)))
            .collect();
        for p in &mut futs {
            let poll = p.as_mut().poll(&mut Context::from_waker(Waker::noop()));
            assert!(poll.is_pending(), "a missing page went to a worker");
        }
        futs
    };
    let far = (1500 * PS) as u64;
    let futs = start(0);
    // The worker reads and pins them all; nobody polls them yet.
    std::thread::sleep(Duration::from_millis(300));
    let r = block_on(f.page_async(far));
    assert!(
        matches!(r, Err(Error::TooManyPins { held }) if held == MAX_GUARDS_PER_THREAD),
        "{:?}",
        r.err()
    );
    let r = f.page(far);
    assert!(matches!(r, Err(Error::TooManyPins { .. })), "{:?}", r.err());
    // Another thread polls them to their end: its guards, this thread's
    // places given back.
    std::thread::scope(|s| {
        s.spawn(|| {
            let (guards, _) = run_all(futs);
            for (k, g) in guards.iter().enumerate() {
                let off = k * 3 * PS;
                assert_eq!(&g.as_ref().unwrap()[..], &pat(off, PS)[..]);
            }
        })
        .join()
        .unwrap();
    });
    let g = block_on(f.page_async(far)).unwrap();
    assert_eq!(&g[..], &pat(far as usize, PS)[..]);
    drop(g);
    // Dropped before they end: their places come back too.
    drop(start(600));
    let g = f.page(far + PS as u64).unwrap();
    assert_eq!(&g[..], &pat(far as usize + PS, PS)[..]);
}

/// Futures dropped before they complete: reads end on the worker and free
/// their buffers, writes are made, pins are released, and the count of
/// misses is one per page read (nothing counted twice).
#[test]
fn dropped_futures_lose_nothing_and_hold_nothing() {
    let tmp = TempDir::new("futures-drop");
    let len = 8 << 20;
    let cs = rig(&tmp, len, 128);
    let f = cs.open_file("data").unwrap();
    let w = Waker::from(Arc::new(Flag(
        AtomicBool::new(false),
        std::thread::current(),
    )));
    let mut cx = Context::from_waker(&w);
    let before = cs.cache().stats();
    let mut sent = 0;
    for k in 0..200u64 {
        let off = k * 9 * PS as u64;
        let mut r = Box::pin(f.read_at_async(off, vec![0u8; 64]));
        if r.as_mut().poll(&mut cx).is_pending() {
            sent += 1;
        }
        drop(r);
        let mut p = Box::pin(f.page_async(off + 4 * PS as u64));
        let _ = p.as_mut().poll(&mut cx);
        drop(p);
        let mut wr = Box::pin(f.write_at_async(off + 2 * PS as u64 + 10, vec![0xEE; 20]));
        let _ = wr.as_mut().poll(&mut cx);
        drop(wr);
    }
    assert!(sent > 100, "only {sent} reads went to a worker");
    // Every page the dropped futures touched is readable, the writes made
    // (a dropped write still queued goes on in its worker: waited for, up to
    // ten seconds).
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    for k in 0..200u64 {
        let off = k * 9 * PS as u64;
        let mut b = vec![0u8; 64];
        f.read_at(off, &mut b).unwrap();
        assert_eq!(b, pat(off as usize, 64));
        let mut w = vec![0u8; 20];
        loop {
            f.read_at(off + 2 * PS as u64 + 10, &mut w).unwrap();
            if w == [0xEE; 20] || std::time::Instant::now() > deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(w, vec![0xEE; 20], "dropped write {k} was not made");
    }
    // No pin is left: every page can be dropped from the cache.
    f.sync().unwrap();
    for p in cs.cache().pages() {
        assert!(
            cs.cache().evict(p.file, p.page).unwrap(),
            "page {} still held after its future was dropped",
            p.page
        );
    }
    let after = cs.cache().stats();
    let (misses, fills) = (after.misses - before.misses, after.fills - before.fills);
    assert_eq!(misses, fills, "every miss filled once");
    assert!(misses >= 600, "{misses} misses for 600 pages");
}

/// Page requests on a queue: the completion is a guard of the page in
/// place; a miss reads into the frame it shows; bad requests get errors.
#[test]
fn queue_page_requests_complete_with_guards() {
    let tmp = TempDir::new("futures-queue-pages");
    let len = 4 << 20;
    let cs = rig(&tmp, len, 256);
    let f = cs.open_file("data").unwrap();
    let mut q = cs.queue(32);
    let mut reqs: Vec<_> = (0..32u64)
        .map(|k| CachedRequest::page(&f, k * 5 * PS as u64 + 1, k))
        .collect();
    reqs.push(CachedRequest::page(&f, len as u64, 99));
    q.submit_from(&mut reqs);
    q.drain();
    let mut got = Vec::new();
    q.take_pages(&mut got);
    assert_eq!(got.len(), 33);
    got.sort_by_key(|(t, _)| *t);
    for (t, g) in &got[..32] {
        let g = g.as_ref().unwrap();
        let off = *t as usize * 5 * PS;
        assert_eq!((g.offset(), g.len()), (off as u64, PS));
        assert_eq!(&g[..], &pat(off, PS)[..]);
    }
    assert!(matches!(got[32].1, Err(Error::OutOfRange { .. })));
    // 32 guards are held: 32 more requests, and the 33rd is refused.
    let mut reqs: Vec<_> = (0..33u64)
        .map(|k| CachedRequest::page(&f, (k * 5 + 2) * PS as u64, 100 + k))
        .collect();
    q.submit_from(&mut reqs);
    q.drain();
    let mut more = Vec::new();
    q.take_pages(&mut more);
    let refused = more
        .iter()
        .filter(|(_, g)| matches!(g, Err(Error::TooManyPins { .. })))
        .count();
    assert_eq!(refused, 33 + 32 - MAX_GUARDS_PER_THREAD);
    drop(more);
    drop(got);
    drop(q);
}

/// Under tokio's multi-threaded runtime: 64 tasks, each reading missing
/// pages through futures (the tasks move between tokio's threads), and a
/// task keeping 64 page futures in flight at once with `join`-like polling.
#[test]
fn futures_run_under_tokio() {
    let tmp = TempDir::new("futures-tokio");
    let len = 16 << 20;
    let cs = rig(&tmp, len, 512);
    cs.set_readahead(0);
    let f = cs.open_file("data").unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    let before = cs.cache().stats();
    rt.block_on(async {
        let tasks: Vec<_> = (0..64u64)
            .map(|k| {
                let f = f.clone();
                tokio::spawn(async move {
                    for i in 0..8u64 {
                        let page = (k * 8 + i) * 7 % (len / PS) as u64;
                        let off = page * PS as u64 + 33;
                        let (r, buf) = f.read_at_async(off, vec![0u8; 200]).await;
                        assert_eq!(r.unwrap(), 200);
                        assert_eq!(buf, pat(off as usize, 200), "read at {off}");
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
    });
    let after = cs.cache().stats();
    assert_eq!(after.misses - before.misses, 512, "each page missed once");
    // One task, 64 page futures polled together by a task-local join.
    let f2 = f.clone();
    let most = rt.block_on(async move {
        let mut futs: Vec<_> = (0..64u64)
            .map(|k| Box::pin(f2.page_async((3600 + k) * PS as u64)))
            .collect();
        let mut done: Vec<Option<usize>> = vec![None; 64];
        let mut most = 0;
        std::future::poll_fn(|cx| {
            let mut pending = 0;
            for (k, fut) in futs.iter_mut().enumerate() {
                if done[k].is_some() {
                    continue;
                }
                match fut.as_mut().poll(cx) {
                    Poll::Ready(g) => {
                        let g = g.unwrap();
                        let off = (3600 + k) * PS;
                        assert_eq!(&g[..], &pat(off, PS)[..]);
                        done[k] = Some(g.len());
                    }
                    Poll::Pending => pending += 1,
                }
            }
            most = most.max(pending);
            if pending == 0 {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
        .await;
        most
    });
    assert_eq!(
        most, 64,
        "the 64 page futures were not all in flight at once"
    );
}

/// Four threads keep 200 misses each in flight on one I/O worker, more than
/// its queue takes at once: the worker's queue waits for room while new
/// requests keep ringing its doorbell; every read completes with its bytes.
#[test]
fn more_misses_than_a_worker_queue_holds() {
    let tmp = TempDir::new("futures-many");
    let len = 32 << 20;
    let cs = rig(&tmp, len, 4096);
    cs.set_readahead(0);
    let f = cs.open_file("data").unwrap();
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let f = &f;
            s.spawn(move || {
                for round in 0..3u64 {
                    let futs: Vec<_> = (0..200u64)
                        .map(|k| {
                            let page = ((round * 800 + k * 4 + t) * 97) % (len / PS) as u64;
                            f.read_at_async(page * PS as u64 + 8, vec![0u8; 64])
                        })
                        .collect();
                    let (outs, _) = run_all(futs);
                    for (k, (r, b)) in outs.into_iter().enumerate() {
                        let page = ((round * 800 + k as u64 * 4 + t) * 97) % (len / PS) as u64;
                        assert_eq!(r.unwrap(), 64);
                        assert_eq!(b, pat(page as usize * PS + 8, 64));
                    }
                }
            });
        }
    });
}

/// A waker that panics when woken.
struct Bomb;

impl Wake for Bomb {
    fn wake(self: Arc<Self>) {
        panic!("a waker that panics, on purpose");
    }
}

/// A task whose waker panics takes the futures' I/O worker down when the
/// worker wakes it: every request the worker held or had yet to take fails
/// (with the panic's message), later ones fail at once, and none waits
/// forever.
#[test]
fn a_worker_that_panics_fails_its_requests_instead_of_leaving_them_waiting() {
    let tmp = TempDir::new("futures-bomb");
    let cs = rig(&tmp, 256 * PS, 64);
    // Nothing read ahead: the last read must be a miss, which needs the
    // worker (a window begun by the 32 reads in order could have brought it
    // in, and the read then passed as a hit).
    cs.set_readahead(0);
    let (tx, rx) = std::sync::mpsc::channel();
    // On a thread of its own, so that a hang fails the test instead of
    // stopping it.
    std::thread::spawn(move || {
        let f = cs.open_file("data").unwrap();
        let mut bomb = Box::pin(f.read_at_async(0, vec![0; 100]));
        let w = Waker::from(Arc::new(Bomb));
        assert!(
            bomb.as_mut()
                .poll(&mut Context::from_waker(&w))
                .is_pending()
        );
        let futs: Vec<_> = (1..33)
            .map(|k| f.read_at_async(k * PS as u64, vec![0; 100]))
            .collect();
        let (outs, _) = run_all(futs);
        for (r, _) in &outs {
            if let Err(e) = r {
                let m = e.to_string();
                assert!(m.contains("panicked") || matches!(e, Error::Closed), "{m}");
            }
        }
        // The bomb's own outcome was left before its wake panicked.
        let (r, _) = block_on(bomb);
        assert!(r.is_ok(), "{r:?}");
        // The worker is gone: a miss now fails, at once or from the inbox.
        let (r, _) = block_on(f.read_at_async(100 * PS as u64, vec![0; 100]));
        tx.send(r.map(drop)).unwrap();
    });
    let r = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the futures still wait after 30 s");
    assert!(r.is_err(), "{r:?}");
}

/// Page futures in flight on the worker when a task's waker takes it down:
/// the pins their reads took are released (with the futures, or by the
/// worker's queue as it goes), so every page can be written afterwards.
#[test]
fn a_worker_that_panics_leaves_no_page_pinned() {
    let tmp = TempDir::new("futures-bomb-pins");
    let cs = rig(&tmp, 256 * PS, 64);
    cs.set_readahead(0);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let f = cs.open_file("data").unwrap();
        let bomb_waker = Waker::from(Arc::new(Bomb));
        let mut bomb = Box::pin(f.read_at_async(0, vec![0; 100]));
        assert!(
            bomb.as_mut()
                .poll(&mut Context::from_waker(&bomb_waker))
                .is_pending()
        );
        let mut pages: Vec<_> = (1..17u64)
            .map(|k| Box::pin(f.page_async(k * PS as u64)))
            .collect();
        for p in &mut pages {
            let _ = p.as_mut().poll(&mut Context::from_waker(Waker::noop()));
        }
        // The worker takes them, the bomb's wake takes it down.
        std::thread::sleep(Duration::from_millis(500));
        drop(pages);
        drop(bomb);
        let r: Vec<_> = (1..17u64)
            .map(|k| f.write_at(k * PS as u64, &[1]).map_err(|e| (k, e)))
            .collect();
        tx.send(r).unwrap();
    });
    let r = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the writes still wait after 60 s");
    for x in r {
        if let Err((k, e)) = x {
            panic!("page {k} stayed pinned: {e}");
        }
    }
}

/// A future on a page that a request queue of the polling thread is reading
/// in fails at once with `HeldByCaller` (a read, a write and a page guard):
/// the worker serving it would wait for that read, which only this thread
/// finishes, for as long as the queue's I/O wait. Drained, all three land.
#[test]
fn futures_on_a_page_this_threads_queue_reads_in_fail_at_once() {
    let tmp = TempDir::new("futures-own-fill");
    // Simulated devices that take 100 ms a read: the queue's first read is
    // in flight when its submit returns, however fast the disk under the
    // test and however the test's thread is scheduled.
    let sim = common::sim_devices(100_000, 100_000);
    let cs = common::cached_rig_on(&tmp, 1 << 20, 1024, 8, Duration::from_secs(30), sim);
    let f = cs.open_file("data").unwrap();
    // Reads in order would start readahead, whose thread may then be the one
    // reading the page found in flight (the queue parks its request behind
    // that fill), and the futures would rightly wait for it.
    f.advise(0, 0, setcache::Advice::Random).unwrap();
    let mut q = cs.queue(4);
    let mut done = Vec::new();
    let mut p = 0;
    // What the last read done at once came back with (for the message).
    let mut last = None;
    for page in 16..256u64 {
        let r = CachedRequest::tagged(
            setcache::OpKind::Read,
            &f,
            page * PS as u64,
            vec![0; PS],
            page,
        );
        q.submit(vec![r]);
        done.clear();
        q.take_completions(&mut done);
        if done.is_empty() {
            p = page;
            break;
        }
        last = done.pop().map(|(_, c)| (c.hit, c.result));
    }
    assert!(
        p > 0,
        "every read was done before its submit returned; the last (hit, result): {last:?}; \
         the cache's counters: {:?}",
        cs.cache().stats()
    );
    let at = p * PS as u64 + 10;
    let t = std::time::Instant::now();
    let (r, _) = block_on(f.read_at_async(at, vec![0u8; 10]));
    assert!(matches!(r, Err(Error::HeldByCaller(_))), "read: {r:?}");
    let (r, _) = block_on(f.write_at_async(at, vec![5u8; 10]));
    assert!(matches!(r, Err(Error::HeldByCaller(_))), "write: {r:?}");
    let r = block_on(f.page_async(at));
    assert!(
        matches!(r, Err(Error::HeldByCaller(_))),
        "page: {:?}",
        r.err()
    );
    // (Waiting would take the pin wait, 30 s.)
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    q.drain();
    let (r, b) = block_on(f.read_at_async(at, vec![0u8; 10]));
    assert_eq!(r.unwrap(), 10);
    assert_eq!(b, pat(at as usize, 10));
    let (r, _) = block_on(f.write_at_async(at, vec![5u8; 10]));
    r.unwrap();
    let g = block_on(f.page_async(at)).unwrap();
    assert_eq!(&g[10..20], &[5u8; 10]);
}

/// While futures wait for a page another thread holds, a future that
/// finishes is woken at once: its task may be what holds the page. Before,
/// the worker held a finished future back until a quarter of the others
/// finished too, and those waited for the page until the pin wait ran out.
#[test]
fn a_finished_future_is_woken_while_others_wait_for_a_held_page() {
    let tmp = TempDir::new("fut-held-page");
    let cs = common::cached_rig(&tmp, 64 * PS, 256, 8, Duration::from_secs(30));
    let cf = cs.open_file("data").unwrap();
    let held = cf.page(0).unwrap();
    let (polled_tx, polled_rx) = std::sync::mpsc::channel();
    let (woke, writes) = std::thread::scope(|s| {
        let t = s.spawn(|| {
            let me = std::thread::current();
            let mut writes: Vec<_> = (0..8)
                .map(|_| Box::pin(cf.write_at_async(0, vec![1u8; 16])))
                .collect();
            let nobody = Waker::from(Arc::new(Flag(AtomicBool::new(false), me.clone())));
            for w in &mut writes {
                let r = w.as_mut().poll(&mut Context::from_waker(&nobody));
                assert!(r.is_pending(), "a write to a held page finished");
            }
            // A miss elsewhere, sent after the writes.
            let flag = Arc::new(Flag(AtomicBool::new(false), me));
            let waker = Waker::from(flag.clone());
            let mut read = Box::pin(cf.read_at_async(40 * PS as u64, vec![0u8; 64]));
            let t0 = std::time::Instant::now();
            if read
                .as_mut()
                .poll(&mut Context::from_waker(&waker))
                .is_pending()
            {
                while !flag.0.load(Ordering::Acquire) && t0.elapsed() < Duration::from_secs(20) {
                    std::thread::park_timeout(Duration::from_millis(5));
                }
            }
            let woke = t0.elapsed();
            polled_tx.send(()).unwrap();
            let (got, _) = run_all(writes);
            (woke, got)
        });
        polled_rx.recv().unwrap();
        drop(held);
        t.join().unwrap()
    });
    assert!(
        woke < Duration::from_secs(10),
        "the read's task was woken after {woke:?}, with writes waiting for a page"
    );
    for w in writes {
        w.0.unwrap();
    }
}

/// A read far larger than the cache goes through it, as `read_at` does,
/// whether as a future or as one queue request. Before, the request
/// claimed every free frame with its first pages, and the rest, parked
/// behind its own reads, gave up `Busy` once the pin wait ran out.
#[test]
fn a_request_larger_than_the_cache_reads_through_it() {
    let tmp = TempDir::new("fut-larger");
    let len = 32 << 20;
    let cs = common::cached_rig(&tmp, len, 64, 8, Duration::from_millis(50));
    let cf = cs.open_file("data").unwrap();
    let (r, buf) = block_on(cf.read_at_async(0, vec![0u8; len]));
    assert_eq!(r.unwrap(), len);
    assert!(buf == pat(0, len), "the future's bytes");
    let mut q = cs.queue(256);
    let req = CachedRequest::tagged(setcache::OpKind::Read, &cf, 0, vec![0u8; len], 1);
    q.submit_from(&mut vec![req]);
    q.wait(1);
    let mut done = Vec::new();
    q.take_completions(&mut done);
    let (tag, c) = done.pop().expect("a completion");
    assert_eq!(tag, 1);
    c.result.unwrap();
    assert!(c.buf == pat(0, len), "the queue request's bytes");
}

/// A write far larger than the cache, as one queue request, goes through it
/// and reads back. Its pages wait for the write-backs of the dirty pages
/// before them, which a busy machine may take longer than a short pin wait
/// to finish: the default wait here.
#[test]
fn a_write_larger_than_the_cache_goes_through_it() {
    let tmp = TempDir::new("fut-larger-write");
    let len = 32 << 20;
    let cs = common::cached_rig(&tmp, len, 64, 8, Duration::from_secs(5));
    let cf = cs.open_file("data").unwrap();
    let mut q = cs.queue(256);
    let mut done = Vec::new();
    let mut w = vec![CachedRequest::tagged(
        setcache::OpKind::Write,
        &cf,
        0,
        vec![7u8; len],
        2,
    )];
    q.submit_from(&mut w);
    q.wait(1);
    q.take_completions(&mut done);
    done.pop().expect("a completion").1.result.unwrap();
    let mut back = vec![0u8; len];
    cf.read_at(0, &mut back).unwrap();
    assert!(back.iter().all(|&b| b == 7));
}

/// The same write over devices slower than the pin wait (each write 20 ms,
/// the pin wait 5 ms): the pages that wait for the write-backs of the dirty
/// victims the request itself made wait as for I/O, not as for pins that
/// others hold, and the write goes through instead of failing `Busy`: as a
/// future, and on a request queue.
#[test]
fn a_write_waiting_on_its_own_write_backs_is_not_given_up() {
    let tmp = TempDir::new("fut-own-write-backs");
    let len = 1 << 20;
    let cs = common::cached_rig_on(
        &tmp,
        len,
        64,
        8,
        Duration::from_millis(5),
        common::sim_devices(20_000, 20_000),
    );
    let cf = cs.open_file("data").unwrap();
    // As a future (its worker's queue parks the pages), then through a
    // queue of the test's own.
    let (r, _) = block_on(cf.write_at_async(0, vec![9u8; len]));
    r.expect("the write as a future");
    let mut back = vec![0u8; len];
    cf.read_at(0, &mut back).unwrap();
    assert!(back.iter().all(|&b| b == 9));
    let mut q = cs.queue(64);
    q.submit_from(&mut vec![CachedRequest::tagged(
        setcache::OpKind::Write,
        &cf,
        0,
        vec![5u8; len],
        3,
    )]);
    let mut done = Vec::new();
    q.wait(1);
    q.take_completions(&mut done);
    done.pop()
        .expect("a completion")
        .1
        .result
        .expect("the write through a queue");
    cf.read_at(0, &mut back).unwrap();
    assert!(back.iter().all(|&b| b == 5));
}

/// Page 0 of `data` made dirty by another thread's mutable guard while a
/// page future of it, polled once on this test's thread, waits for it: the
/// worker then pins the dirty page for the future. `then` gets the file and
/// the pending future; what it returns comes back, or the process ends
/// after 60 s (a sync that waits for ever). The guard wrote `byte` into the
/// page's first four bytes, which a read after `then` checks.
fn with_a_parked_page_future<T: Send + 'static>(
    tag: &str,
    byte: u8,
    then: impl for<'f> FnOnce(
        &'f setcache::CachedFile,
        Pin<Box<dyn Future<Output = setcache::Result<setcache::PageGuard<'f>>> + Send + 'f>>,
    ) -> T
    + Send
    + 'static,
) -> T {
    let tmp = TempDir::new(tag);
    let cs = Arc::new(common::cached_rig(
        &tmp,
        64 * PS,
        256,
        8,
        Duration::from_millis(500),
    ));
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let (polled_tx, polled_rx) = std::sync::mpsc::channel();
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let writer = {
        let cs = cs.clone();
        std::thread::spawn(move || {
            let cf = cs.open_file("data").unwrap();
            let mut g = cf.page_mut(0).unwrap();
            g[..4].copy_from_slice(&[byte; 4]);
            ready_tx.send(()).unwrap();
            polled_rx.recv().unwrap();
            drop(g);
        })
    };
    let cs2 = cs.clone();
    std::thread::spawn(move || {
        let cf = cs2.open_file("data").unwrap();
        ready_rx.recv().unwrap();
        let flag = Arc::new(Flag(AtomicBool::new(false), std::thread::current()));
        let waker = Waker::from(flag.clone());
        let mut fut = Box::pin(cf.page_async(0));
        let first = fut.as_mut().poll(&mut Context::from_waker(&waker));
        assert!(
            first.is_pending(),
            "a page another thread holds was handed over"
        );
        polled_tx.send(()).unwrap();
        let t = std::time::Instant::now();
        while !flag.0.load(Ordering::Acquire) {
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "the future was never woken"
            );
            std::thread::park_timeout(Duration::from_millis(5));
        }
        done_tx.send(then(&cf, fut)).unwrap();
    });
    let Ok(out) = done_rx.recv_timeout(Duration::from_secs(60)) else {
        eprintln!("a sync waited 60 s for a page a page future holds");
        std::process::exit(3);
    };
    writer.join().unwrap();
    let cf = cs.open_file("data").unwrap();
    let mut b = [0u8; 4];
    cf.read_at(0, &mut b).unwrap();
    assert_eq!(b, [byte; 4]);
    out
}

/// A sync on a thread whose page future holds a dirty page of the file (the
/// worker pinned it for the future, which the thread has not yet polled to
/// its end) fails `HeldByCaller` once the pin wait has passed: only this
/// thread can end that pin. Before, the sync waited for ever. With the
/// future dropped, the sync passes.
#[test]
fn a_sync_facing_its_threads_unended_page_future_fails_instead_of_hanging() {
    let (r, waited, after) = with_a_parked_page_future("fut-sync-own", 9, |cf, fut| {
        let t = std::time::Instant::now();
        let r = cf.sync();
        let waited = t.elapsed();
        drop(fut);
        (r, waited, cf.sync())
    });
    match r {
        Err(Error::HeldByCaller(m)) => assert!(m.contains("page futures"), "{m}"),
        other => panic!("expected HeldByCaller, got {other:?} after {waited:?}"),
    }
    after.unwrap();
}

/// A page future polled on one thread and moved to another (a task resumed
/// on another worker of an executor), whose pin holds a dirty page of the
/// file: a sync on the second thread fails `Busy` once the pin wait has
/// passed, where it waited for ever (the first thread's count of unended
/// futures is not the second's). With the future dropped, the sync passes.
#[test]
fn a_sync_facing_a_page_future_moved_from_another_thread_fails_instead_of_hanging() {
    let (r, waited, after) = with_a_parked_page_future("fut-sync-moved", 7, |cf, fut| {
        std::thread::scope(|sc| {
            sc.spawn(move || {
                let t = std::time::Instant::now();
                let r = cf.sync();
                let waited = t.elapsed();
                drop(fut);
                (r, waited, cf.sync())
            })
            .join()
            .unwrap()
        })
    });
    match r {
        Err(Error::Busy(m)) => assert!(m.contains("page futures"), "{m}"),
        other => panic!("expected Busy, got {other:?} after {waited:?}"),
    }
    after.unwrap();
}

/// That refusal counts only the page futures of the file the sync syncs: a
/// sync that waits for another thread's guard, on a thread with a page
/// future pending on another file, waits it out and passes.
#[test]
fn a_sync_waits_out_another_threads_guard_beside_a_future_on_another_file() {
    let tmp = TempDir::new("fut-sync-other");
    let cs = Arc::new(common::cached_rig(
        &tmp,
        64 * PS,
        256,
        8,
        Duration::from_millis(300),
    ));
    drop(
        cs.create("other", 64 * PS as u64, setcache::LayoutKind::Stripe)
            .unwrap(),
    );
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let holder = {
        let cs = cs.clone();
        std::thread::spawn(move || {
            let cf = cs.open_file("data").unwrap();
            let mut g = cf.page_mut(0).unwrap();
            g[..4].copy_from_slice(&[8; 4]);
            ready_tx.send(()).unwrap();
            // Three pin waits.
            std::thread::sleep(Duration::from_millis(900));
            drop(g);
        })
    };
    ready_rx.recv().unwrap();
    let other = cs.open_file("other").unwrap();
    let flag = Arc::new(Flag(AtomicBool::new(false), std::thread::current()));
    let waker = Waker::from(flag.clone());
    let mut fut = Box::pin(other.page_async(5 * PS as u64));
    let first = fut.as_mut().poll(&mut Context::from_waker(&waker));
    assert!(first.is_pending(), "a page never read was cached");
    let cf = cs.open_file("data").unwrap();
    let t = std::time::Instant::now();
    let r = cf.sync();
    assert!(r.is_ok(), "{r:?} after {:?}", t.elapsed());
    drop(fut);
    holder.join().unwrap();
    let mut b = [0u8; 4];
    cf.read_at(0, &mut b).unwrap();
    assert_eq!(b, [8; 4]);
}
