//! Page guards: a cached file's pages handed out in place, shared or
//! exclusive, with the rules that keep them sound.

mod common;

use std::time::{Duration, Instant};

use common::{Rng, TempDir, pattern};
use setcache::{
    CachedRequest, CachedStore, Error, MAX_GUARDS_PER_THREAD, OpKind, Store, StoreOptions,
};

const PS: usize = 4096;

/// A store with one file `data` of `len` bytes holding `pattern(1, ..)`,
/// behind a 4-way cache of `pages` pages with this pin wait.
fn rig(tmp: &TempDir, len: usize, pages: usize, pin_wait: Duration) -> CachedStore {
    common::cached_rig(tmp, len, pages, 4, pin_wait)
}

/// A shared guard shows the page's bytes in place (the last page cut at the
/// end of the file) and keeps the page resident while a scan far larger
/// than the cache evicts everything else; a mutable guard's changes are read
/// by copies after it drops, and reach the devices at `sync`.
#[test]
fn guards_show_pages_in_place_and_keep_them_resident() {
    let tmp = TempDir::new("guards");
    let len = 40 * PS + 100;
    let cs = rig(&tmp, len, 16, Duration::from_secs(5));
    let cf = cs.open_file("data").unwrap();
    let truth = pattern(1, 0, len);
    let g = cf.page(3 * PS as u64 + 17).unwrap();
    assert_eq!(g.offset(), 3 * PS as u64);
    assert_eq!(&g[..], &truth[3 * PS..4 * PS]);
    let last = cf.page(len as u64 - 1).unwrap();
    assert_eq!(last.len(), 100);
    assert_eq!(&last[..], &truth[40 * PS..]);
    let frame = g.as_ptr() as usize;
    // Every other page, three times over: far more than 16 pages.
    let mut buf = vec![0u8; PS];
    for _ in 0..3 {
        for p in 0..40u64 {
            cf.read_at(p * PS as u64, &mut buf).unwrap();
        }
    }
    assert_eq!(
        g.as_ptr() as usize,
        frame,
        "the guarded page stayed in its frame"
    );
    assert_eq!(&g[..], &truth[3 * PS..4 * PS]);
    // A second shared guard of the same page, in this thread and another.
    let g2 = cf.page(3 * PS as u64).unwrap();
    assert_eq!(g2.as_ptr() as usize, frame);
    std::thread::scope(|s| {
        s.spawn(|| {
            let g3 = cf.page(3 * PS as u64).unwrap();
            assert_eq!(g3.as_ptr() as usize, frame);
        });
    });
    drop((g, g2, last));
    {
        let mut m = cf.page_mut(5 * PS as u64).unwrap();
        m[..4].copy_from_slice(b"MINE");
    }
    let mut b = [0u8; 6];
    cf.read_at(5 * PS as u64, &mut b).unwrap();
    assert_eq!(&b[..4], b"MINE");
    assert_eq!(b[4..], truth[5 * PS + 4..5 * PS + 6]);
    cf.sync().unwrap();
    drop(cf);
    drop(cs);
    let store = Store::open(&tmp.devices(2), StoreOptions::default()).unwrap();
    let f = store.open_file("data").unwrap();
    let mut a = setcache::AlignedBuf::new(PS);
    f.read_at(5 * PS as u64, &mut a).unwrap();
    assert_eq!(&a[..4], b"MINE");
}

/// What would make a thread wait for its own guard is an error, at once: a
/// write or a mutable guard of a page it holds, a read or a shared guard of
/// a page it holds mutably, a sync of a file it holds a page of mutably.
/// Other pages and other files go on; once the guard drops, all is allowed.
#[test]
fn waiting_for_ones_own_guard_is_an_error() {
    let tmp = TempDir::new("guards-self");
    let cs = rig(&tmp, 8 * PS, 16, Duration::from_secs(30));
    let cf = cs.open_file("data").unwrap();
    let held = |r: Result<(), Error>| matches!(r, Err(Error::HeldByCaller(_)));
    let t = Instant::now();
    {
        let _g = cf.page(PS as u64).unwrap();
        assert!(held(cf.write_at(PS as u64 + 10, b"x")));
        // A write spanning the page and the next one.
        assert!(held(cf.write_at(2 * PS as u64 - 1, b"xy")));
        assert!(held(cf.page_mut(PS as u64).map(drop)));
        // A sync would wait for the guard if the page were dirty.
        cf.write_at(0, b"dirty").unwrap();
        assert!(held(cf.sync()));
        assert!(held(cs.sync()));
        // Reads and other pages are fine.
        let mut b = [0u8; 8];
        cf.read_at(PS as u64, &mut b).unwrap();
        cf.write_at(3 * PS as u64, b"other").unwrap();
    }
    {
        let _m = cf.page_mut(2 * PS as u64).unwrap();
        let mut b = [0u8; 8];
        assert!(held(cf.read_at(2 * PS as u64, &mut b).map(drop)));
        assert!(held(cf.page(2 * PS as u64).map(drop)));
        assert!(held(cf.sync()));
        cf.read_at(4 * PS as u64, &mut b).unwrap();
    }
    assert!(t.elapsed() < Duration::from_secs(10), "nothing waited");
    cf.write_at(PS as u64, b"free").unwrap();
    cf.sync().unwrap();
}

/// A guard of a file's last, partial page does not keep its own thread from
/// growing the file by a write past that page (nor by `set_len`): the
/// growth leaves the page alone, and the guard still shows what it showed.
/// A write into the guarded page itself is still refused.
#[test]
fn a_guard_of_the_last_page_lets_its_thread_write_past_it() {
    let tmp = TempDir::new("guards-tail");
    let len = PS + 1904;
    let cs = rig(&tmp, len, 16, Duration::from_secs(30));
    let cf = cs.open_file("data").unwrap();
    let truth = pattern(1, 0, len);
    let t = Instant::now();
    let g = cf.page(PS as u64 + 5).unwrap();
    assert_eq!(g.len(), 1904);
    cf.write_extending(2 * PS as u64, b"A").unwrap();
    assert_eq!(cf.len(), 2 * PS as u64 + 1);
    cf.write_extending(10 * PS as u64, b"B").unwrap();
    cf.set_len(12 * PS as u64).unwrap();
    assert_eq!(&g[..], &truth[PS..]);
    let e = cf.write_extending(PS as u64 + 1000, b"C").unwrap_err();
    assert!(matches!(e, Error::HeldByCaller(_)), "{e}");
    drop(g);
    assert!(t.elapsed() < Duration::from_secs(10), "nothing waited");
    let mut b = vec![0u8; 2 * PS + 1];
    cf.read_at(0, &mut b).unwrap();
    assert_eq!(&b[..len], &truth[..]);
    assert!(b[len..2 * PS].iter().all(|&x| x == 0));
    assert_eq!(b[2 * PS], b'A');
    cf.sync().unwrap();
}

/// A delete or replacement of a file drops its pages, and would wait for
/// what this thread holds of them: a guard (shared or mutable) or a read its
/// request queue has not polled. Each is refused at once and the file stays
/// whole; once let go, the same call passes. Another file's guard does not
/// stand in the way.
#[test]
fn deleting_a_file_one_holds_a_page_of_is_refused_at_once() {
    let tmp = TempDir::new("guards-delete-self");
    let len = 8 * PS;
    // Slow simulated devices: the queue's read below is still in flight when
    // the delete comes, however fast the disk under the test answers (a
    // read the kernel's page cache served at the submit, reaped there, left
    // nothing for the delete to be refused for).
    let cs = common::cached_rig_on(
        &tmp,
        len,
        16,
        4,
        Duration::from_secs(30),
        common::sim_devices(20_000, 30_000),
    );
    let cf = cs.open_file("data").unwrap();
    let other = cs
        .create("other", PS as u64, setcache::LayoutKind::Stripe)
        .unwrap();
    let held = |r: Result<(), Error>| matches!(r, Err(Error::HeldByCaller(_)));
    let t = Instant::now();
    {
        let g = cf.page(PS as u64).unwrap();
        assert!(held(cs.delete("data")));
        assert!(held(cs.replace("other", "data")));
        assert_eq!(&g[..], &pattern(1, 0, len)[PS..2 * PS]);
    }
    {
        let mut m = cf.page_mut(2 * PS as u64).unwrap();
        m[..4].copy_from_slice(b"MINE");
        let e = cs.delete("data").unwrap_err();
        assert!(matches!(e, Error::HeldByCaller(_)), "{e}");
        assert!(e.to_string().contains("\"data\""), "{e}");
    }
    assert!(t.elapsed() < Duration::from_secs(10), "nothing waited");
    let mut b = [0u8; 4];
    cf.read_at(2 * PS as u64, &mut b).unwrap();
    assert_eq!(&b, b"MINE");
    // A read the thread's queue has not polled: the page's fill is its own.
    let mut q = cs.queue(4);
    q.submit(vec![CachedRequest::tagged(
        OpKind::Read,
        &cf,
        6 * PS as u64,
        vec![0; 16],
        0,
    )]);
    assert!(held(cs.delete("data")));
    q.drain();
    let mut out = Vec::new();
    q.take_completions(&mut out);
    assert!(out[0].1.result.is_ok(), "{:?}", out[0].1.result);
    // A guard of another file is no reason.
    {
        let _g = other.page(0).unwrap();
        cs.delete("data").unwrap();
    }
    let e = cf.read_at(0, &mut b).unwrap_err();
    assert!(matches!(e, Error::FileGone(_)), "{e}");
    assert!(matches!(cs.open_file("data"), Err(Error::FileNotFound(_))));
}

/// Another thread's writer waits for the shared guards of its page, and
/// gives up with `Busy` after the pin wait while one stays; a mutable guard
/// excludes readers of its page in other threads until it drops.
#[test]
fn writers_wait_for_other_threads_guards_up_to_the_pin_wait() {
    let tmp = TempDir::new("guards-wait");
    let cs = rig(&tmp, 8 * PS, 16, Duration::from_millis(300));
    let cf = cs.open_file("data").unwrap();
    let g = cf.page(0).unwrap();
    std::thread::scope(|s| {
        let t = s.spawn(|| {
            let t0 = Instant::now();
            let r = cf.write_at(10, b"late");
            (r, t0.elapsed())
        });
        let (r, waited) = t.join().unwrap();
        assert!(matches!(r, Err(Error::Busy(_))), "{r:?}");
        assert!(waited >= Duration::from_millis(250), "{waited:?}");
    });
    drop(g);
    // Released in time: the writer goes on. (A store with a long pin wait,
    // so that a late wake of this thread cannot make the writer give up.)
    let tmp2 = TempDir::new("guards-wait-long");
    let cs = rig(&tmp2, 8 * PS, 16, Duration::from_secs(30));
    let cf = cs.open_file("data").unwrap();
    let g = cf.page(0).unwrap();
    std::thread::scope(|s| {
        let t = s.spawn(|| cf.write_at(10, b"soon"));
        std::thread::sleep(Duration::from_millis(50));
        drop(g);
        t.join().unwrap().unwrap();
    });
    let mut m = cf.page_mut(0).unwrap();
    m[10..14].copy_from_slice(b"MUT!");
    std::thread::scope(|s| {
        let t = s.spawn(|| {
            let mut b = [0u8; 4];
            cf.read_at(10, &mut b).unwrap();
            b
        });
        std::thread::sleep(Duration::from_millis(100));
        assert!(!t.is_finished(), "a reader got past a mutable guard");
        drop(m);
        assert_eq!(&t.join().unwrap(), b"MUT!");
    });
}

/// Bad input: offsets at or past the end, a mutable guard of a read-only
/// file, more guards than a thread may hold; each is a clear error and the
/// guards already taken stay good.
#[test]
fn bad_guard_requests_get_clear_errors() {
    let tmp = TempDir::new("guards-bad");
    let len = 200 * PS;
    let cs = rig(&tmp, len, 256, Duration::from_secs(5));
    let cf = cs.open_file("data").unwrap();
    for off in [len as u64, len as u64 + 1, u64::MAX] {
        let e = cf.page(off).map(drop).unwrap_err();
        assert!(matches!(e, Error::OutOfRange { .. }), "{e}");
        assert!(e.to_string().contains("data"), "{e}");
    }
    let ro = cs.open_file_read_only("data").unwrap();
    let e = ro.page_mut(0).map(drop).unwrap_err();
    assert!(matches!(e, Error::ReadOnly(_)), "{e}");
    assert_eq!(ro.page(0).unwrap()[..8], pattern(1, 0, 8)[..]);
    let mut rng = Rng(3);
    let mut guards = Vec::new();
    for i in 0..MAX_GUARDS_PER_THREAD {
        let p = (i as u64 * 3 + rng.below(3)) % 200;
        guards.push((p, cf.page(p * PS as u64).unwrap()));
    }
    let e = cf.page(199 * PS as u64).map(drop).unwrap_err();
    assert!(
        matches!(e, Error::TooManyPins { held } if held == MAX_GUARDS_PER_THREAD),
        "{e}"
    );
    assert!(e.to_string().contains("page guards"), "{e}");
    let truth = pattern(1, 0, len);
    for (p, g) in &guards {
        let at = *p as usize * PS;
        assert_eq!(&g[..], &truth[at..at + PS]);
    }
    guards.truncate(1);
    cf.page(199 * PS as u64).unwrap();
}

/// Shared and mutable guards, copies, writes, syncs and evictions (a cache
/// of 64 pages over a file of 96 pages with pages 0..24 prefilled) in a
/// random mix, against a byte array: every guard shows the model's bytes
/// while it lives, every refusal (`HeldByCaller`) changes nothing, and
/// after a sync and a reopen the devices hold the model.
#[test]
fn guards_copies_writes_and_syncs_match_a_model() {
    let tmp = TempDir::new("guards-model");
    let len = 96 * PS - 300;
    // Sets of 8: the test holds up to 6 guards at once, and a page whose two
    // candidate sets are the same set (in a table of a few sets, as each
    // partition of a partitioned one is) has that set's slots only. With 4,
    // the test's own guards could fill them, and a write of that page would
    // rightly wait for them until the pin wait ran out.
    let cs = common::cached_rig(&tmp, len, 64, 8, Duration::from_secs(5));
    let cf = cs.open_file("data").unwrap();
    let mut model = pattern(1, 0, len);
    let mut rng = Rng(11);
    // Held guards: (page, shared guard) or (page, mutable guard).
    let mut shared: Vec<(usize, setcache::PageGuard<'_>)> = Vec::new();
    let mut mutable: Vec<(usize, setcache::PageGuardMut<'_>)> = Vec::new();
    let held_by = |p: usize,
                   s: &[(usize, setcache::PageGuard<'_>)],
                   m: &[(usize, setcache::PageGuardMut<'_>)]| {
        (
            s.iter().any(|(q, _)| *q == p),
            m.iter().any(|(q, _)| *q == p),
        )
    };
    let pages = len.div_ceil(PS);
    let (mut refused, mut ops) = (0, 0);
    for step in 0..4000 {
        ops += 1;
        match rng.below(9) {
            0 | 1 if shared.len() + mutable.len() < 6 => {
                let off = rng.below(len as u64) as usize;
                let p = off / PS;
                let (_, m) = held_by(p, &shared, &mutable);
                match cf.page(off as u64) {
                    Ok(g) => {
                        assert!(!m, "step {step}");
                        let end = (p * PS + PS).min(len);
                        assert_eq!(&g[..], &model[p * PS..end], "step {step}: page {p}");
                        shared.push((p, g));
                    }
                    Err(Error::HeldByCaller(_)) => {
                        assert!(m, "step {step}");
                        refused += 1;
                    }
                    Err(e) => panic!("step {step}: {e}"),
                }
            }
            2 if shared.len() + mutable.len() < 6 => {
                let p = rng.below(pages as u64) as usize;
                let (s, m) = held_by(p, &shared, &mutable);
                match cf.page_mut((p * PS) as u64) {
                    Ok(mut g) => {
                        assert!(!s && !m, "step {step}");
                        let at = rng.below(g.len() as u64) as usize;
                        let n = (1 + rng.below(64) as usize).min(g.len() - at);
                        for i in 0..n {
                            g[at + i] = (step + i) as u8;
                            model[p * PS + at + i] = (step + i) as u8;
                        }
                        mutable.push((p, g));
                    }
                    Err(Error::HeldByCaller(_)) => {
                        assert!(s || m, "step {step}");
                        refused += 1;
                    }
                    Err(e) => panic!("step {step}: {e}"),
                }
            }
            3 | 4 => {
                let off = rng.below(len as u64) as usize;
                let n = (1 + rng.below(3 * PS as u64) as usize).min(len - off);
                let data: Vec<u8> = (0..n).map(|i| (step * 3 + i) as u8).collect();
                let any = (off / PS..=(off + n - 1) / PS).any(|p| {
                    let (s, m) = held_by(p, &shared, &mutable);
                    s || m
                });
                match cf.write_at(off as u64, &data) {
                    Ok(()) => {
                        assert!(!any, "step {step}");
                        model[off..off + n].copy_from_slice(&data);
                    }
                    Err(Error::HeldByCaller(_)) => {
                        assert!(any, "step {step}");
                        refused += 1;
                    }
                    Err(e) => panic!("step {step}: {e}"),
                }
            }
            5 | 6 => {
                let off = rng.below(len as u64) as usize;
                let n = (1 + rng.below(3 * PS as u64) as usize).min(len - off);
                let mut buf = vec![0u8; n];
                let any_mut =
                    (off / PS..=(off + n - 1) / PS).any(|p| held_by(p, &shared, &mutable).1);
                match cf.read_at(off as u64, &mut buf) {
                    Ok(got) => {
                        assert!(!any_mut, "step {step}");
                        assert_eq!(got, n);
                        assert!(buf == model[off..off + n], "step {step}: read {off}+{n}");
                    }
                    Err(Error::HeldByCaller(_)) => {
                        assert!(any_mut, "step {step}");
                        refused += 1;
                    }
                    Err(e) => panic!("step {step}: {e}"),
                }
            }
            7 => {
                let any = !shared.is_empty() || !mutable.is_empty();
                match cf.sync() {
                    Ok(()) => assert!(!any, "step {step}"),
                    Err(Error::HeldByCaller(_)) => {
                        assert!(any, "step {step}");
                        refused += 1;
                    }
                    Err(e) => panic!("step {step}: {e}"),
                }
            }
            _ => {
                // Drop a guard; the shared ones still show the model.
                for (p, g) in &shared {
                    let end = (p * PS + PS).min(len);
                    assert_eq!(&g[..], &model[p * PS..end], "step {step}: held page {p}");
                }
                if !mutable.is_empty() && rng.below(2) == 0 {
                    let i = rng.below(mutable.len() as u64) as usize;
                    mutable.swap_remove(i);
                } else if !shared.is_empty() {
                    let i = rng.below(shared.len() as u64) as usize;
                    shared.swap_remove(i);
                }
            }
        }
    }
    assert!(
        refused > 100 && refused < ops / 2,
        "{refused} refusals of {ops}"
    );
    drop(shared);
    drop(mutable);
    cf.sync().unwrap();
    drop(cf);
    drop(cs);
    let store = Store::open(&tmp.devices(2), StoreOptions::default()).unwrap();
    let f = store.open_file("data").unwrap();
    let mut a = setcache::AlignedBuf::new(96 * PS);
    f.read_at(0, &mut a[..len.div_ceil(512) * 512]).unwrap();
    assert!(
        a[..len] == model[..],
        "the devices hold the model after sync"
    );
}

/// Four threads on a file twice the cache: shared guards, mutable guards
/// that fill their page in two halves with a yield between, whole-page
/// writes and reads. Every page always holds one byte value throughout: a
/// shared guard sees it whole and unchanged while it lives, a read never
/// sees half a mutable guard's fill, and nothing waits for the pin wait.
#[test]
fn guards_of_many_threads_see_whole_pages_only() {
    let tmp = TempDir::new("guards-threads");
    let pages = 32usize;
    let cs = rig(&tmp, pages * PS, 16, Duration::from_secs(10));
    let cf = cs.open_file("data").unwrap();
    for p in 0..pages {
        cf.write_at((p * PS) as u64, &vec![p as u8; PS]).unwrap();
    }
    let uniform = |b: &[u8]| b.iter().all(|&x| x == b[0]);
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let cf = &cf;
            s.spawn(move || {
                let mut rng = Rng(100 + t);
                for step in 0..1500 {
                    let p = rng.below(pages as u64) as usize;
                    let at = (p * PS) as u64;
                    match rng.below(4) {
                        0 => {
                            let g = cf.page(at).unwrap();
                            assert!(uniform(&g), "t{t} step {step}: page {p} torn");
                            let v = g[0];
                            std::thread::yield_now();
                            assert!(
                                g.iter().all(|&x| x == v),
                                "t{t} step {step}: page {p} changed under a guard"
                            );
                        }
                        1 => {
                            let mut m = cf.page_mut(at).unwrap();
                            let v = rng.below(256) as u8;
                            m[..PS / 2].fill(v);
                            std::thread::yield_now();
                            m[PS / 2..].fill(v);
                        }
                        2 => {
                            let v = rng.below(256) as u8;
                            cf.write_at(at, &vec![v; PS]).unwrap();
                        }
                        _ => {
                            let mut b = vec![0u8; PS];
                            cf.read_at(at, &mut b).unwrap();
                            assert!(uniform(&b), "t{t} step {step}: read a torn page {p}");
                        }
                    }
                }
            });
        }
    });
    cf.sync().unwrap();
    let mut b = vec![0u8; PS];
    for p in 0..pages {
        cf.read_at((p * PS) as u64, &mut b).unwrap();
        assert!(uniform(&b), "page {p} torn at the end");
    }
}

/// A queue's write to a page another thread holds a guard on gives up with
/// `Busy`, naming the page and file, after the pin wait, even while the
/// queue's other reads keep finishing (each `wait(1)` returns after one).
#[test]
fn a_parked_write_gives_up_after_the_pin_wait_while_other_requests_finish() {
    let tmp = TempDir::new("guards-queue-wait");
    // Devices that answer in 20-30 ms, so that the reads below stay in
    // flight after their submits however fast the disk under the test is.
    let slow = common::sim_devices(20_000, 30_000);
    let cs = common::cached_rig_on(&tmp, 256 * PS, 16, 4, Duration::from_millis(200), slow);
    let cf = cs.open_file("data").unwrap();
    let (held_tx, held_rx) = std::sync::mpsc::channel();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    std::thread::scope(|s| {
        let cf2 = &cf;
        s.spawn(move || {
            let g = cf2.page(0).unwrap();
            held_tx.send(()).unwrap();
            // Held until the queue's write has given up (or 20 s).
            let _ = done_rx.recv_timeout(Duration::from_secs(20));
            drop(g);
        });
        held_rx.recv().unwrap();
        let mut q = cs.queue(8);
        q.submit(vec![CachedRequest::tagged(
            OpKind::Write,
            &cf,
            10,
            b"late".to_vec(),
            u64::MAX,
        )]);
        let t0 = Instant::now();
        let mut out = Vec::new();
        let mut page = 1u64;
        let failed = loop {
            // Reads of pages not cached keep the queue's I/O in flight.
            while q.outstanding() < 4 {
                let r =
                    CachedRequest::tagged(OpKind::Read, &cf, page * PS as u64, vec![0; 16], page);
                q.submit(vec![r]);
                page = 1 + page % 255;
            }
            q.wait(1);
            q.take_completions(&mut out);
            if let Some(i) = out.iter().position(|(tag, _)| *tag == u64::MAX) {
                break out.swap_remove(i).1.result;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "the write is still waiting after 10 s"
            );
        };
        let waited = t0.elapsed();
        done_tx.send(()).unwrap();
        match failed {
            Err(Error::Busy(m)) => {
                assert!(m.contains("page 0") && m.contains("data"), "{m}");
            }
            other => panic!("{other:?}"),
        }
        assert!(waited >= Duration::from_millis(150), "{waited:?}");
        q.drain();
    });
}

/// Requests of no bytes complete at once, at any offset, without reading or
/// dirtying a page; a request whose end does not fit in 64 bits is refused.
#[test]
fn empty_and_overflowing_queue_requests_move_nothing() {
    let tmp = TempDir::new("guards-queue-empty");
    let cs = rig(&tmp, 64 * PS, 16, Duration::from_millis(200));
    let cf = cs.open_file("data").unwrap();
    let before = cs.cache().stats();
    let mut q = cs.queue(8);
    q.submit(vec![
        CachedRequest::tagged(OpKind::Write, &cf, 100, Vec::new(), 1),
        CachedRequest::tagged(OpKind::Read, &cf, 4196, Vec::new(), 2),
        CachedRequest::tagged(OpKind::Read, &cf, u64::MAX - 10, vec![0; 100], 3),
    ]);
    q.drain();
    let mut out = Vec::new();
    q.take_completions(&mut out);
    out.sort_by_key(|(t, _)| *t);
    assert_eq!(out.len(), 3);
    assert!(
        out[0].1.result.is_ok() && out[1].1.result.is_ok(),
        "{out:?}"
    );
    assert!(out[2].1.result.is_err(), "{:?}", out[2].1.result);
    let after = cs.cache().stats();
    assert_eq!(after.misses, before.misses, "a page was read");
    assert!(cs.cache().dirty_pages().is_empty(), "a page was dirtied");
}

/// A shrink whose clearing of the new last page fails (another thread's
/// guard outlasts the pin wait) leaves that page's old bytes past the end;
/// a growth while they are still there fails without growing, and once the
/// guard is gone the file grows with zeros there, never the old bytes.
#[test]
fn growing_after_a_shrink_that_could_not_clear_shows_zeros() {
    let tmp = TempDir::new("guards-regrow");
    let len = 5 * PS;
    let cs = rig(&tmp, len, 16, Duration::from_millis(100));
    let cf = cs.open_file("data").unwrap();
    let truth = pattern(1, 0, len);
    let (held_tx, held_rx) = std::sync::mpsc::channel();
    let (drop_tx, drop_rx) = std::sync::mpsc::channel::<()>();
    std::thread::scope(|s| {
        let cf = &cf;
        s.spawn(move || {
            let g = cf.page(2 * PS as u64).unwrap();
            held_tx.send(()).unwrap();
            drop_rx.recv().unwrap();
            drop(g);
        });
        held_rx.recv().unwrap();
        // The shrink is made; zeroing the rest of page 2 waits for the
        // guard and gives up.
        let cut = 2 * PS as u64 + 808;
        assert!(cf.set_len(cut).is_err());
        assert_eq!(cf.len(), cut);
        let grown = 3 * PS as u64;
        // Growing now would show page 2's old bytes past `cut`.
        let r = cf.set_len(grown);
        assert!(
            r.is_err() || cf.len() == cut,
            "a growth that could not clear went through: {r:?}"
        );
        drop_tx.send(()).unwrap();
    });
    cf.set_len(3 * PS as u64).unwrap();
    let mut b = vec![0u8; PS];
    cf.read_at(2 * PS as u64, &mut b).unwrap();
    assert_eq!(&b[..808], &truth[2 * PS..2 * PS + 808]);
    assert!(
        b[808..].iter().all(|&x| x == 0),
        "the old bytes past the cut show after growing"
    );
}

/// `page_if_cached` gives a guard of a cached page (its bytes in place, the
/// last page cut at the end of the file), and `None` at once for a page not
/// cached, without reading it in, and for one another thread holds
/// mutably; its errors are `page`'s.
#[test]
fn pages_are_taken_if_cached_and_never_read_in() {
    let tmp = TempDir::new("guards-present");
    let len = 20 * PS + 50;
    let cs = rig(&tmp, len, 64, Duration::from_secs(30));
    let cf = cs.open_file("data").unwrap();
    let truth = pattern(1, 0, len);
    let misses = cs.cache().stats().misses;
    for p in 0..=20u64 {
        assert!(cf.page_if_cached(p * PS as u64 + 7).unwrap().is_none());
    }
    assert!(cf.page_if_cached(3 * PS as u64).unwrap().is_none());
    assert_eq!(cs.cache().stats().misses, misses, "nothing was read in");
    drop(cf.page(3 * PS as u64).unwrap());
    drop(cf.page(len as u64 - 1).unwrap());
    let g = cf.page_if_cached(3 * PS as u64 + 9).unwrap().unwrap();
    assert_eq!(g.offset(), 3 * PS as u64);
    assert_eq!(&g[..], &truth[3 * PS..4 * PS]);
    let last = cf.page_if_cached(len as u64 - 1).unwrap().unwrap();
    assert_eq!(&last[..], &truth[20 * PS..]);
    assert!(cf.page_if_cached(4 * PS as u64).unwrap().is_none());
    drop((g, last));
    // Held mutably by another thread: `None`, not a wait for the guard.
    let (held_tx, held_rx) = std::sync::mpsc::channel();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    std::thread::scope(|s| {
        let cf = &cf;
        s.spawn(move || {
            let _m = cf.page_mut(3 * PS as u64).unwrap();
            held_tx.send(()).unwrap();
            let _ = done_rx.recv();
        });
        held_rx.recv().unwrap();
        let t = Instant::now();
        assert!(cf.page_if_cached(3 * PS as u64).unwrap().is_none());
        assert!(t.elapsed() < Duration::from_secs(10), "not waited for");
        done_tx.send(()).unwrap();
    });
    assert!(cf.page_if_cached(3 * PS as u64).unwrap().is_some());
    // Held mutably by this thread: an error at once.
    {
        let _m = cf.page_mut(3 * PS as u64).unwrap();
        let e = cf.page_if_cached(3 * PS as u64).map(drop).unwrap_err();
        assert!(matches!(e, Error::HeldByCaller(_)), "{e}");
    }
    for off in [len as u64, u64::MAX] {
        let e = cf.page_if_cached(off).map(drop).unwrap_err();
        assert!(matches!(e, Error::OutOfRange { .. }), "{e}");
        assert!(e.to_string().contains("data"), "{e}");
    }
}

/// A request on this thread's queue that would wait for a guard the thread
/// holds (a write of a page it holds at all, a read of a page it holds
/// mutably) fails `HeldByCaller` at once, not `Busy` after the pin wait;
/// the same requests on other pages, and a read beside a shared guard, pass.
#[test]
fn a_queued_request_on_ones_own_guard_is_refused_at_once() {
    let tmp = TempDir::new("guards-queue-self");
    let cs = rig(&tmp, 8 * PS, 16, Duration::from_secs(20));
    let cf = cs.open_file("data").unwrap();
    let mut q = cs.queue(8);
    let t = Instant::now();
    let mut run = |reqs: Vec<CachedRequest<'_>>| {
        q.submit(reqs);
        q.drain();
        let mut out = Vec::new();
        q.take_completions(&mut out);
        out.sort_by_key(|c| c.0);
        out.into_iter().map(|c| c.1.result).collect::<Vec<_>>()
    };
    let held = |r: &Result<(), Error>| matches!(r, Err(Error::HeldByCaller(_)));
    {
        let _m = cf.page_mut(PS as u64).unwrap();
        let r = run(vec![
            CachedRequest::tagged(OpKind::Read, &cf, PS as u64 + 8, vec![0; 16], 0),
            CachedRequest::tagged(OpKind::Write, &cf, PS as u64, vec![1; 16], 1),
            // Crossing from page 0 into the held page.
            CachedRequest::tagged(OpKind::Read, &cf, PS as u64 - 4, vec![0; 8], 2),
            CachedRequest::tagged(OpKind::Read, &cf, 3 * PS as u64, vec![0; 16], 3),
        ]);
        assert!(held(&r[0]) && held(&r[1]) && held(&r[2]), "{r:?}");
        assert!(r[3].is_ok(), "{r:?}");
    }
    {
        let _g = cf.page(2 * PS as u64).unwrap();
        let r = run(vec![
            CachedRequest::tagged(OpKind::Read, &cf, 2 * PS as u64, vec![0; 16], 0),
            CachedRequest::tagged(OpKind::Write, &cf, 2 * PS as u64 + 1, vec![1; 16], 1),
            CachedRequest::tagged(OpKind::Write, &cf, 4 * PS as u64, vec![1; 16], 2),
        ]);
        assert!(r[0].is_ok() && held(&r[1]) && r[2].is_ok(), "{r:?}");
    }
    assert!(
        t.elapsed() < Duration::from_secs(10),
        "a request waited for its own thread's guard: {:?}",
        t.elapsed()
    );
    // The guards gone, the same write passes.
    let r = run(vec![CachedRequest::tagged(
        OpKind::Write,
        &cf,
        PS as u64,
        vec![1; 16],
        0,
    )]);
    assert!(r[0].is_ok(), "{r:?}");
}
