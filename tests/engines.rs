//! One test suite, run against every engine: uring, psync and sim.

mod common;

use std::cell::RefCell;
use std::rc::Rc;

use common::{Rng, TempDir, engines, open, pattern};
use setcache::{AlignedBuf, EngineKind, Error, LayoutKind, Queue, Request, Store, StoreOptions};

const LAYOUTS: [LayoutKind; 3] = [LayoutKind::Stripe, LayoutKind::Rotated, LayoutKind::Hash];

/// Random writes and reads of random aligned sizes, many crossing stripe units,
/// checked against an in-memory model of the file.
#[test]
fn random_io_matches_a_model() {
    for (ename, engine) in engines() {
        for layout in LAYOUTS {
            for devices in [1, 3] {
                let tmp = TempDir::new("model");
                let store = open(&tmp.devices(devices), engine.clone(), 2); // 8 KiB stripe unit
                let len = 1 << 20;
                let f = store.create("m", len, layout).unwrap();
                let mut model = vec![0u8; len as usize];
                let mut rng = Rng(devices as u64 * 7 + 1);
                for step in 0..60 {
                    let sectors = 1 + rng.below(80) as usize; // up to 40 KiB: crosses units
                    let n = sectors * 512;
                    let off = rng.below((len - n as u64) / 512) * 512;
                    if step % 2 == 0 {
                        let mut b = AlignedBuf::new(n);
                        b.copy_from_slice(&pattern(step, off, n));
                        f.write_at(off, &b).unwrap();
                        model[off as usize..off as usize + n].copy_from_slice(&b);
                    } else {
                        let mut b = AlignedBuf::new(n);
                        f.read_at(off, &mut b).unwrap();
                        assert!(
                            b[..] == model[off as usize..off as usize + n],
                            "{ename} {layout} {devices} devices: read at {off} len {n} differs"
                        );
                    }
                }
                let mut all = AlignedBuf::new(len as usize);
                f.read_at(0, &mut all).unwrap();
                assert!(
                    all[..] == model[..],
                    "{ename} {layout}: whole-file read differs"
                );
            }
        }
    }
}

/// Batches of asynchronous requests: each callback runs once with its buffer, the
/// bound on requests in flight holds, and data round-trips.
#[test]
fn async_batches_complete_once_each() {
    for (ename, engine) in engines() {
        let tmp = TempDir::new("async");
        let store = open(&tmp.devices(2), engine, 1);
        let f = store.create("a", 256 * 4096, LayoutKind::Rotated).unwrap();
        let done = Rc::new(RefCell::new(vec![0u32; 256]));
        let mut q = Queue::new(8);
        let mut reqs = Vec::new();
        for i in 0..256u64 {
            let mut b = AlignedBuf::new(4096);
            b.copy_from_slice(&pattern(9, i * 4096, 4096));
            let d = done.clone();
            reqs.push(Request::write(&f, i * 4096, b, move |c| {
                c.result.unwrap();
                d.borrow_mut()[i as usize] += 1;
            }));
        }
        q.submit(reqs);
        assert!(q.in_flight() <= 8, "{ename}: bound exceeded");
        q.drain();
        assert!(
            done.borrow().iter().all(|&c| c == 1),
            "{ename}: a callback ran twice or never"
        );
        // Read back with 12 KiB requests crossing stripe units.
        let bad = Rc::new(RefCell::new(0));
        for i in 0..85u64 {
            let b = bad.clone();
            q.submit(vec![Request::read(
                &f,
                i * 12288,
                AlignedBuf::new(12288),
                move |c| {
                    c.result.unwrap();
                    if c.buf[..] != pattern(9, c.offset, 12288)[..] {
                        *b.borrow_mut() += 1;
                    }
                },
            )]);
            assert!(q.in_flight() <= 8);
        }
        q.drain();
        assert_eq!(*bad.borrow(), 0, "{ename}: reassembled reads differ");
    }
}

/// A file reopens after the store is closed, with its data.
#[test]
fn reopen_after_restart() {
    for (ename, engine) in engines() {
        let tmp = TempDir::new("reopen");
        let roots = tmp.devices(3);
        // The sim engine keeps data in its media, which the cloned options share
        // across the "restart".
        {
            let store = open(&roots, engine.clone(), 4);
            let f = store.create("keep", 64 * 4096, LayoutKind::Hash).unwrap();
            let mut b = AlignedBuf::new(64 * 4096);
            b.copy_from_slice(&pattern(3, 0, 64 * 4096));
            f.write_at(0, &b).unwrap();
            f.sync().unwrap();
        }
        let store = open(&roots, engine, 4);
        assert_eq!(store.list().unwrap(), vec!["keep".to_string()]);
        let info = store.info("keep").unwrap();
        assert_eq!(
            (info.len, info.layout, info.devices),
            (64 * 4096, LayoutKind::Hash, 3)
        );
        let f = store.open_file("keep").unwrap();
        let mut b = AlignedBuf::new(64 * 4096);
        f.read_at(0, &mut b).unwrap();
        assert!(
            b[..] == pattern(3, 0, 64 * 4096)[..],
            "{ename}: data lost across reopen"
        );
    }
}

/// Misaligned requests and requests past the end are refused with clear errors.
#[test]
fn bad_requests_are_refused() {
    for (ename, engine) in engines() {
        let tmp = TempDir::new("bad");
        let store = open(&tmp.devices(2), engine, 16);
        let f = store.create("f", 1 << 20, LayoutKind::Stripe).unwrap();
        let mut b = AlignedBuf::new(8192);
        let e = f.read_at(100, &mut b[..4096]).unwrap_err();
        assert!(
            matches!(e, Error::Misaligned { what: "offset", .. }),
            "{ename}: {e}"
        );
        let e = f.read_at(0, &mut b[..1000]).unwrap_err();
        assert!(
            matches!(e, Error::Misaligned { what: "length", .. }),
            "{ename}: {e}"
        );
        let e = f.read_at(0, &mut b[8..520]).unwrap_err();
        assert!(
            matches!(
                e,
                Error::Misaligned {
                    what: "buffer address",
                    ..
                }
            ),
            "{ename}: {e}"
        );
        let e = f.read_at((1 << 20) - 4096, &mut b).unwrap_err();
        assert!(matches!(e, Error::OutOfRange { .. }), "{ename}: {e}");
        assert!(e.to_string().contains("past the end"), "{e}");
        let e = f.write_at(u64::MAX - 511, &b[..512]).unwrap_err();
        assert!(matches!(e, Error::OutOfRange { .. }), "{ename}: {e}");
        // An async request that is invalid completes through its callback.
        let got = Rc::new(RefCell::new(None));
        let g = got.clone();
        let mut q = Queue::new(4);
        q.submit(vec![Request::read(
            &f,
            1 << 20,
            AlignedBuf::new(4096),
            move |c| {
                *g.borrow_mut() = Some(c.result);
            },
        )]);
        q.drain();
        assert!(matches!(
            got.borrow_mut().take(),
            Some(Err(Error::OutOfRange { .. }))
        ));
        // Nothing failed on the devices.
        assert!(store.device_errors().iter().all(Option::is_none));
        // An empty request is fine.
        f.read_at(0, &mut b[..0]).unwrap();
    }
}

/// Files: create, list, rename, set_len, delete.
#[test]
fn file_operations() {
    for (ename, engine) in engines() {
        let tmp = TempDir::new("ops");
        let store = open(&tmp.devices(2), engine, 16);
        let f = store.create("one", 8192, LayoutKind::Stripe).unwrap();
        assert!(matches!(
            store.create("one", 8192, LayoutKind::Stripe),
            Err(Error::FileExists(_))
        ));
        assert!(matches!(
            store.create("", 8192, LayoutKind::Stripe),
            Err(Error::InvalidName { .. })
        ));
        assert!(matches!(
            store.create("a/b", 8192, LayoutKind::Stripe),
            Err(Error::InvalidName { .. })
        ));
        // Any length is a length: exact to the byte.
        let odd = store.create("odd", 1000, LayoutKind::Stripe).unwrap();
        assert_eq!(odd.len(), 1000, "{ename}");
        assert_eq!(store.info("odd").unwrap().len, 1000, "{ename}");
        drop(odd);
        store.delete("odd").unwrap();
        let mut b = AlignedBuf::new(8192);
        b.fill(7);
        f.write_at(0, &b).unwrap();
        store.create("two", 4096, LayoutKind::Hash).unwrap();
        assert_eq!(store.list().unwrap(), vec!["one", "two"]);
        assert!(matches!(
            store.rename("one", "two"),
            Err(Error::FileExists(_))
        ));
        store.rename("one", "three").unwrap();
        assert_eq!(f.name(), "three");
        assert_eq!(store.list().unwrap(), vec!["three", "two"]);
        f.set_len(1 << 20).unwrap();
        let mut r = AlignedBuf::new(8192);
        f.read_at((1 << 20) - 8192, &mut r).unwrap();
        assert!(r.iter().all(|&x| x == 0), "{ename}: grown region not zero");
        f.read_at(0, &mut r).unwrap();
        assert!(r.iter().all(|&x| x == 7), "{ename}: data lost by set_len");
        f.set_len(4096).unwrap();
        assert!(f.read_at(0, &mut r).is_err());
        drop(f);
        let f = store.open_file("three").unwrap();
        assert_eq!(f.len(), 4096);
        store.delete("three").unwrap();
        assert!(matches!(
            store.open_file("three"),
            Err(Error::FileNotFound(_))
        ));
        assert!(matches!(store.delete("three"), Err(Error::FileNotFound(_))));
        assert_eq!(store.list().unwrap(), vec!["two"]);
    }
}

/// One handle shared by many threads (more than cores) doing synchronous and
/// asynchronous I/O on disjoint regions at once.
#[test]
fn many_threads_share_one_handle() {
    for (ename, engine) in engines() {
        let tmp = TempDir::new("threads");
        let store = open(&tmp.devices(2), engine, 1);
        let f = store
            .create("t", 32 * 64 * 4096, LayoutKind::Rotated)
            .unwrap();
        std::thread::scope(|s| {
            for t in 0..32u64 {
                let f = f.clone();
                s.spawn(move || {
                    let base = t * 64 * 4096;
                    let mut q = Queue::new(4);
                    for i in 0..64u64 {
                        let mut b = AlignedBuf::new(4096);
                        b.copy_from_slice(&pattern(t, base + i * 4096, 4096));
                        if i % 2 == 0 {
                            f.write_at(base + i * 4096, &b).unwrap();
                        } else {
                            q.submit(vec![Request::write(&f, base + i * 4096, b, |c| {
                                c.result.unwrap()
                            })]);
                        }
                    }
                    q.drain();
                    let mut b = AlignedBuf::new(64 * 4096);
                    f.read_at(base, &mut b).unwrap();
                    assert!(
                        b[..] == pattern(t, base, 64 * 4096)[..],
                        "{ename}: thread {t} data differs"
                    );
                });
            }
        });
    }
}

/// Registered buffers work like any other.
#[test]
fn registered_buffers_round_trip() {
    for (ename, engine) in engines() {
        let tmp = TempDir::new("reg");
        let store = open(&tmp.devices(1), engine, 16);
        let f = store.create("r", 1 << 20, LayoutKind::Stripe).unwrap();
        let bufs = store.alloc_registered(8, 65536).unwrap();
        let mut q = Queue::new(8);
        for (i, mut b) in bufs.into_iter().enumerate() {
            b.copy_from_slice(&pattern(5, i as u64 * 65536, 65536));
            q.submit(vec![Request::write(&f, i as u64 * 65536, b, |c| {
                c.result.unwrap()
            })]);
        }
        q.drain();
        let back = store.alloc_registered(1, 8 * 65536).unwrap().pop().unwrap();
        let ok = Rc::new(RefCell::new(false));
        let o = ok.clone();
        q.submit(vec![Request::read(&f, 0, back, move |c| {
            c.result.unwrap();
            *o.borrow_mut() = c.buf[..] == pattern(5, 0, 8 * 65536)[..];
        })]);
        q.drain();
        assert!(*ok.borrow(), "{ename}: registered-buffer data differs");
    }
}

/// A buffer registered with one store's engines works in a request to another
/// store's file: the other store's engines did not register it, so it must
/// not travel with the first store's buffer index (the kernel would refuse
/// the address, or use another buffer's).
#[test]
fn a_buffer_registered_with_one_store_works_with_another() {
    for (ename, engine) in engines() {
        let (ta, tb) = (TempDir::new("reg-a"), TempDir::new("reg-b"));
        let a = open(&ta.devices(1), engine.clone(), 16);
        let b = open(&tb.devices(1), engine, 16);
        // Both stores' engines have a buffer at their first index.
        let mut mine = a.alloc_registered(2, 65536).unwrap();
        let _theirs = b.alloc_registered(2, 65536).unwrap();
        let f = b.create("x", 1 << 20, LayoutKind::Stripe).unwrap();
        let mut w = mine.pop().unwrap();
        w.copy_from_slice(&pattern(9, 4096, 65536));
        let mut r = mine.pop().unwrap();
        let mut q = Queue::new(4);
        q.submit(vec![Request::write(&f, 4096, w, |c| {
            c.result
                .expect("write with another store's registered buffer")
        })]);
        q.drain();
        let ok = Rc::new(RefCell::new(None));
        let o = ok.clone();
        r.fill(0);
        q.submit(vec![Request::read(&f, 4096, r, move |c| {
            *o.borrow_mut() = Some(c.result.is_ok() && c.buf[..] == pattern(9, 4096, 65536)[..]);
        })]);
        q.drain();
        assert_eq!(
            *ok.borrow(),
            Some(true),
            "{ename}: read back differs or failed"
        );
        let mut plain = AlignedBuf::new(65536);
        f.read_at(4096, &mut plain).unwrap();
        assert!(
            plain[..] == pattern(9, 4096, 65536)[..],
            "{ename}: data differs"
        );
    }
}

/// Store options out of range are refused.
#[test]
fn bad_options_are_refused() {
    let tmp = TempDir::new("opts");
    let roots = tmp.devices(1);
    for opts in [
        StoreOptions {
            page_size: 3000,
            ..Default::default()
        },
        StoreOptions {
            block_pages: 0,
            ..Default::default()
        },
        StoreOptions {
            io_depth: 0,
            ..Default::default()
        },
    ] {
        let e = Store::open(&roots, opts).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    }
}

/// Registered buffers the process cannot have are refused with an error
/// naming them, not an abort: more bytes than the address space holds, and
/// more than the machine can give (a pebibyte). Then a small request works.
#[test]
fn registered_buffers_too_large_are_refused() {
    let tmp = TempDir::new("bigbufs");
    let store = Store::open(&tmp.devices(1), StoreOptions::default()).unwrap();
    let e = store.alloc_registered(1, isize::MAX as usize).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    assert!(e.to_string().contains("address space"), "{e}");
    let e = store.alloc_registered(4, 1 << 48).unwrap_err();
    assert!(matches!(e, Error::NotEnoughMemory { .. }), "{e}");
    assert!(
        e.to_string()
            .contains("4 registered buffers of 281474976710656 bytes"),
        "{e}"
    );
    let bufs = store.alloc_registered(2, 4096).unwrap();
    assert_eq!(bufs.len(), 2);
}

/// Inputs at the edges of their types: buffers whose rounded length
/// overflows are refused (before, the stride wrapped to 0 and a buffer of
/// `usize::MAX` bytes pointed at one byte); a queue's poll time is cut to
/// `MAX_POLL` (before, a wait panicked adding it to the clock); empty slices
/// move nothing, whatever their dangling address.
#[test]
fn inputs_at_the_edges_of_their_types_get_errors_or_work() {
    let tmp = TempDir::new("edges");
    let store = Store::open(
        &tmp.devices(1),
        StoreOptions {
            engine: EngineKind::Uring,
            ..StoreOptions::default()
        },
    )
    .unwrap();
    for len in [usize::MAX, usize::MAX - 4000] {
        let e = store.alloc_registered(1, len).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
        assert!(e.to_string().contains("overflow"), "{e}");
    }
    let file = store.create("f", 1 << 16, LayoutKind::Stripe).unwrap();
    let mut q = Queue::new(4);
    q.set_poll(std::time::Duration::MAX);
    let done = Rc::new(RefCell::new(0));
    let d = done.clone();
    q.submit(vec![Request::read(
        &file,
        0,
        AlignedBuf::new(4096),
        move |c| {
            c.result.unwrap();
            *d.borrow_mut() += 1;
        },
    )]);
    q.wait(1);
    q.drain();
    assert_eq!(*done.borrow(), 1);
    file.read_at(0, &mut []).unwrap();
    file.write_at(0, &[]).unwrap();
    // A buffer's length as input: errors, not a panic or an abort.
    let e = AlignedBuf::try_new(usize::MAX).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    let e = AlignedBuf::try_new(1 << 60).unwrap_err();
    assert!(matches!(e, Error::NotEnoughMemory { .. }), "{e}");
    let b = AlignedBuf::try_new(3 * 4096).unwrap();
    assert!(b.len() == 3 * 4096 && b.iter().all(|&x| x == 0));
    // A name the store would refuse names no backing file.
    for bad in ["../f", "a/b", ""] {
        let e = store.backing_paths(bad).unwrap_err();
        assert!(matches!(e, Error::InvalidName { .. }), "{bad:?}: {e}");
    }
    assert_eq!(store.backing_paths("f").unwrap().len(), 1);
}

/// A device depth far below the offered load keeps the ring full and the mailbox
/// backed up; everything must still complete (no livelock, no lost request).
#[test]
fn full_ring_under_oversubscription() {
    for (ename, engine) in engines() {
        let tmp = TempDir::new("full");
        let opts = StoreOptions {
            block_pages: 1,
            io_depth: 2,
            ..engine
        };
        let store = Store::open(&tmp.devices(2), opts).unwrap();
        let f = store
            .create("full", 16 * 128 * 4096, LayoutKind::Hash)
            .unwrap();
        std::thread::scope(|s| {
            for t in 0..16u64 {
                let f = f.clone();
                s.spawn(move || {
                    let base = t * 128 * 4096;
                    let mut q = Queue::new(16);
                    for i in 0..128u64 {
                        let mut b = AlignedBuf::new(4096);
                        b.copy_from_slice(&pattern(t + 100, base + i * 4096, 4096));
                        q.submit(vec![Request::write(&f, base + i * 4096, b, |c| {
                            c.result.unwrap()
                        })]);
                    }
                    q.drain();
                    let mut b = AlignedBuf::new(128 * 4096);
                    f.read_at(base, &mut b).unwrap();
                    assert!(
                        b[..] == pattern(t + 100, base, 128 * 4096)[..],
                        "{ename}: thread {t} data differs"
                    );
                });
            }
        });
    }
}

/// Every sync of a file, plain or through the cache, sends an fsync to each
/// device the file spans, on every engine (the kill loops cannot tell a
/// sync that skips them: the kernel keeps what was written across a kill).
#[test]
fn every_sync_fsyncs_each_device_of_the_file() {
    for (ename, engine) in engines() {
        let tmp = TempDir::new("fsyncs");
        let store = open(&tmp.devices(2), engine, 4);
        let f = store.create("s", 1 << 20, LayoutKind::Stripe).unwrap();
        let fsyncs = |s: &Store| s.device_bytes().fsyncs;
        let before = fsyncs(&store);
        let mut b = AlignedBuf::new(64 << 10);
        b.copy_from_slice(&pattern(3, 0, 64 << 10));
        f.write_at(0, &b).unwrap();
        f.sync().unwrap();
        assert_eq!(fsyncs(&store) - before, 2, "{ename}: File::sync");
        drop(f);
        let cs = setcache::CachedStore::new(store, setcache::CacheOptions::default()).unwrap();
        let cf = cs.open_file("s").unwrap();
        let before = fsyncs(cs.store());
        cf.write_at(100, b"synced").unwrap();
        cf.sync().unwrap();
        assert_eq!(fsyncs(cs.store()) - before, 2, "{ename}: CachedFile::sync");
    }
}

/// This process's threads whose name starts with `prefix` and that may run
/// on CPU `cpu` alone.
fn threads_pinned_to(prefix: &str, cpu: usize) -> usize {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    tasks
        .flatten()
        .filter(|t| {
            let read = |f: &str| std::fs::read_to_string(t.path().join(f)).unwrap_or_default();
            read("comm").starts_with(prefix)
                && read("status").lines().any(|l| {
                    l.split_whitespace().collect::<Vec<_>>()
                        == ["Cpus_allowed_list:", &cpu.to_string()]
                })
        })
        .count()
}

/// I/O threads pinned to a CPU still serve requests, and are pinned (the
/// check names them; another test's may add to the count, never take away).
#[test]
fn pinned_io_threads_work() {
    let cpu = *allowed_cpus().last().expect("a CPU to run on");
    for (ename, engine) in engines() {
        let tmp = TempDir::new("pin");
        let opts = StoreOptions {
            cpu_affinity: Some(vec![cpu]),
            ..engine
        };
        let store = Store::open(&tmp.devices(2), opts).unwrap();
        let f = store.create("p", 1 << 20, LayoutKind::Stripe).unwrap();
        let mut b = AlignedBuf::new(1 << 20);
        b.copy_from_slice(&pattern(1, 0, 1 << 20));
        f.write_at(0, &b).unwrap();
        let mut r = AlignedBuf::new(1 << 20);
        f.read_at(0, &mut r).unwrap();
        assert!(r[..] == b[..], "{ename}: pinned engine lost data");
        // One I/O thread a device at least (the simulator's are not pinned).
        let prefix = match ename {
            "psync" => "setcache-psync-",
            "sim" => continue,
            _ => "setcache-uring-",
        };
        let pinned = threads_pinned_to(prefix, cpu);
        assert!(
            pinned >= 2,
            "{ename}: {pinned} I/O threads on CPU {cpu} alone"
        );
        drop(store);
    }
}

/// The CPUs this process may run on, among the first 1024.
fn allowed_cpus() -> Vec<usize> {
    // SAFETY: `cpu_set_t` is plain data; zeroed is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: the kernel writes at most the size passed into `set`.
    let rc = unsafe { libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) };
    assert_eq!(
        rc,
        0,
        "sched_getaffinity: {}",
        std::io::Error::last_os_error()
    );
    (0..1024)
        .filter(|&c| {
            // SAFETY: CPU_ISSET reads inside `set`; every CPU asked is below its size.
            unsafe { libc::CPU_ISSET(c, &set) }
        })
        .collect()
}

/// A CPU this process may not use (one that does not exist, or is outside its
/// affinity), and one past the 1024 of a `cpu_set_t` (which once wrapped
/// around to CPU 1), are refused, as are psync thread counts outside 1..=64.
#[test]
fn store_open_refuses_cpus_it_cannot_use_and_psync_thread_counts_out_of_range() {
    let allowed = allowed_cpus();
    let absent = (0..1024).find(|c| !allowed.contains(c));
    for (ename, engine) in engines() {
        let tmp = TempDir::new("badcpu");
        let devs = tmp.devices(2);
        for cpu in absent.into_iter().chain([1024 + allowed[0], 1 << 40]) {
            let opts = StoreOptions {
                cpu_affinity: Some(vec![allowed[0], cpu]),
                ..engine.clone()
            };
            match Store::open(&devs, opts) {
                Err(Error::InvalidArgument(m)) => assert!(
                    m.contains(&format!("CPU {cpu},")) && m.contains("may use CPUs"),
                    "{ename}: {m}"
                ),
                Err(e) => panic!("{ename}: CPU {cpu}: {e}"),
                Ok(_) => panic!("{ename}: CPU {cpu} accepted"),
            }
        }
        for threads in [0, 65, usize::MAX] {
            let opts = StoreOptions {
                psync_threads: threads,
                ..engine.clone()
            };
            match Store::open(&devs, opts) {
                Err(Error::InvalidArgument(m)) => assert!(
                    m.contains(&format!("psync_threads {threads} ")) && m.contains("1..=64"),
                    "{ename}: {m}"
                ),
                Err(e) => panic!("{ename}: psync_threads {threads}: {e}"),
                Ok(_) => panic!("{ename}: psync_threads {threads} accepted"),
            }
        }
        // The limits themselves, and every CPU the process may use, are fine.
        for threads in [1, 64] {
            let opts = StoreOptions {
                psync_threads: threads,
                cpu_affinity: Some(allowed.clone()),
                ..engine.clone()
            };
            let store = Store::open(&devs, opts)
                .unwrap_or_else(|e| panic!("{ename}: psync_threads {threads}: {e}"));
            drop(store);
        }
    }
}

/// A queue whose requests split into more device operations than its rings hold
/// (a backlog), that polls before sleeping, and that mixes devices it drives
/// itself with devices served by I/O threads, completes every request once with
/// the right bytes.
#[test]
fn queue_rings_backlog_poll_and_mixed_engines() {
    let tmp = TempDir::new("qring");
    let ring_store = open(
        &tmp.devices(2),
        StoreOptions {
            engine: EngineKind::Uring,
            ..StoreOptions::default()
        },
        1,
    );
    let root = tmp.path().join("psync-dev");
    std::fs::create_dir_all(&root).unwrap();
    let psync_store = open(
        &[root],
        StoreOptions {
            engine: EngineKind::Psync,
            ..StoreOptions::default()
        },
        1,
    );
    const REQ: usize = 64 * 1024; // 16 stripe units: 8 operations per device
    const N: u64 = 48;
    let a = ring_store
        .create("a", N * REQ as u64, LayoutKind::Rotated)
        .unwrap();
    let b = psync_store
        .create("b", N * REQ as u64, LayoutKind::Stripe)
        .unwrap();
    for (i, f) in [&a, &b].into_iter().enumerate() {
        let mut buf = AlignedBuf::new(N as usize * REQ);
        buf.copy_from_slice(&pattern(i as u64 + 7, 0, N as usize * REQ));
        f.write_at(0, &buf).unwrap();
    }
    for poll_us in [0u64, 200] {
        let mut q = Queue::new(40);
        q.set_poll(std::time::Duration::from_micros(poll_us));
        let done = std::rc::Rc::new(std::cell::Cell::new(0u32));
        let mut reqs = Vec::new();
        for k in 0..N {
            for (i, f) in [&a, &b].into_iter().enumerate() {
                let d = done.clone();
                let off = k * REQ as u64;
                reqs.push(Request::read(f, off, AlignedBuf::new(REQ), move |c| {
                    c.result.unwrap();
                    assert!(
                        c.buf[..] == pattern(i as u64 + 7, off, REQ)[..],
                        "file {i} offset {off}: wrong bytes"
                    );
                    d.set(d.get() + 1);
                }));
            }
        }
        q.submit(reqs);
        q.drain();
        assert_eq!(done.get(), 2 * N as u32, "poll {poll_us} us");
        assert_eq!(q.in_flight(), 0);
    }
}

/// Lengths are exact to the byte; uncached I/O may cover the last sector whole;
/// after any `set_len` the bytes past the length read as zeros, so a file that
/// shrinks and grows again never shows its old bytes; the length survives a reopen.
#[test]
fn exact_lengths_and_zeros_past_the_end() {
    for (ename, engine) in engines() {
        let tmp = TempDir::new("exact");
        let roots = tmp.devices(2);
        let store = open(&roots, engine.clone(), 1); // 4 KiB stripe unit
        let f = store.create("t", 10_000, LayoutKind::Hash).unwrap();
        assert_eq!((f.len(), store.info("t").unwrap().len), (10_000, 10_000));
        // The last sector, [9728, 10240), may be read and written whole; no more.
        let mut sector = AlignedBuf::new(1024);
        f.read_at(9728, &mut sector[..512]).unwrap();
        for (off, n) in [(10_240, 512), (9728, 1024)] {
            let e = f.read_at(off, &mut sector[..n]).unwrap_err();
            assert!(
                matches!(
                    e,
                    Error::OutOfRange {
                        file_len: 10_000,
                        ..
                    }
                ),
                "{ename}: {e}"
            );
        }
        // Data, and bytes past the length in the last sector (a write may put them there).
        let mut all = AlignedBuf::new(10_240);
        all[..10_000].copy_from_slice(&pattern(4, 0, 10_000));
        all[10_000..].fill(0xee);
        f.write_at(0, &all).unwrap();
        let check = |f: &setcache::File, keep: usize, what: &str| {
            let mut b = AlignedBuf::new(f.len().next_multiple_of(512) as usize);
            f.read_at(0, &mut b).unwrap();
            assert!(
                b[..keep] == pattern(4, 0, keep)[..],
                "{ename}: {what}: data lost"
            );
            if let Some(at) = b[keep..].iter().position(|&x| x != 0) {
                panic!(
                    "{ename}: {what}: byte {} is {:#x}, not zero",
                    keep + at,
                    b[keep + at]
                );
            }
        };
        f.set_len(10_000).unwrap();
        check(&f, 10_000, "same length");
        f.set_len(10_300).unwrap();
        check(&f, 10_000, "grown by 300");
        f.set_len(700).unwrap();
        check(&f, 700, "shrunk to 700");
        f.set_len(300_001).unwrap();
        check(&f, 700, "grown again to 300001");
        drop(f);
        drop(store);
        let store = open(&roots, engine, 1);
        let f = store.open_file("t").unwrap();
        assert_eq!(f.len(), 300_001, "{ename}: length after reopen");
        check(&f, 700, "after reopen");
    }
}

/// A request longer than the kernel moves in one read or write is refused at
/// once, naming the limit (on one device it came back short every time, an
/// error that tells a caller to retry).
#[test]
fn a_request_past_the_kernels_limit_is_refused() {
    let (_, engine) = engines().into_iter().find(|e| e.0 == "uring").unwrap();
    let tmp = TempDir::new("huge");
    let store = open(&tmp.devices(1), engine, 16);
    let f = store.create("f", 3 << 30, LayoutKind::Stripe).unwrap();
    // Memory the kernel gives only where touched: nothing is.
    let mut b = AlignedBuf::new(setcache::MAX_REQUEST + 4096);
    let e = f.read_at(0, &mut b).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    assert!(e.to_string().contains("split it"), "{e}");
    let e = f.write_at(0, &b).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    assert!(store.device_errors().iter().all(Option::is_none));
    f.read_at(0, &mut b[..4096]).unwrap();
}
