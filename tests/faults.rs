//! Fault injection with the sim engine: every injected error reaches its caller,
//! named with file, offset and device, and a failed device stays failed.

mod common;

use std::cell::RefCell;
use std::rc::Rc;

use common::{TempDir, open};
use setcache::{
    AlignedBuf, EngineKind, Error, LayoutKind, Queue, Request, SimConfig, StoreOptions,
};

fn sim(cfg: SimConfig) -> StoreOptions {
    StoreOptions {
        engine: EngineKind::Sim(cfg),
        ..StoreOptions::default()
    }
}

#[test]
fn read_eio_reaches_sync_caller_and_sticks() {
    let tmp = TempDir::new("eio");
    let store = open(
        &tmp.devices(2),
        sim(SimConfig {
            read_eio: 1.0,
            ..Default::default()
        }),
        1,
    );
    let f = store.create("f", 1 << 20, LayoutKind::Stripe).unwrap();
    let mut b = AlignedBuf::new(4096);
    // Block 3 of a 2-device stripe lives on device 1.
    let e = f.read_at(3 * 4096, &mut b).unwrap_err();
    match &e {
        Error::Io {
            op,
            file,
            offset,
            device,
            errno,
        } => {
            assert_eq!(
                (*op, file.as_str(), *offset, *device, *errno),
                ("read", "f", 3 * 4096, 1, libc::EIO)
            );
        }
        other => panic!("wrong error {other:?}"),
    }
    assert!(
        e.to_string().contains("offset 12288") && e.to_string().contains("device 1"),
        "{e}"
    );
    // Device 1 is now refused without I/O; device 0 still fails on its own.
    let e2 = f.write_at(3 * 4096, &b).unwrap_err();
    assert!(matches!(e2, Error::DeviceFailed { device: 1, .. }), "{e2}");
    assert_eq!(e2.errno(), Some(libc::EIO));
    let errs = store.device_errors();
    assert!(errs[0].is_none() && errs[1].is_some());
    // Writes on device 0 are fine (only reads fail).
    f.write_at(0, &b).unwrap();
}

#[test]
fn write_errors_reach_async_callbacks() {
    for (cfg, errno) in [
        (
            SimConfig {
                write_eio: 1.0,
                ..Default::default()
            },
            libc::EIO,
        ),
        (
            SimConfig {
                enospc: 1.0,
                ..Default::default()
            },
            libc::ENOSPC,
        ),
    ] {
        let tmp = TempDir::new("werr");
        let store = open(&tmp.devices(1), sim(cfg), 16);
        let f = store.create("w", 1 << 20, LayoutKind::Stripe).unwrap();
        let seen = Rc::new(RefCell::new(Vec::new()));
        let mut q = Queue::new(4);
        for i in 0..10u64 {
            let s = seen.clone();
            q.submit(vec![Request::write(
                &f,
                i * 8192,
                AlignedBuf::new(8192),
                move |c| {
                    s.borrow_mut().push((c.offset, c.result));
                },
            )]);
        }
        q.drain();
        let seen = seen.borrow();
        assert_eq!(seen.len(), 10, "every request completes exactly once");
        for (off, r) in seen.iter() {
            match r {
                Err(Error::Io {
                    errno: e, offset, ..
                }) => {
                    assert_eq!((*e, *offset), (errno, *off));
                }
                // Later requests are refused because the device failed earlier.
                Err(Error::DeviceFailed { first, .. }) => assert_eq!(first.errno(), Some(errno)),
                other => panic!("write at {off} got {other:?}"),
            }
        }
    }
}

#[test]
fn short_read_is_an_error_not_silent_truncation() {
    let tmp = TempDir::new("short");
    let store = open(
        &tmp.devices(1),
        sim(SimConfig {
            short_read: 1.0,
            ..Default::default()
        }),
        16,
    );
    let f = store.create("s", 1 << 20, LayoutKind::Stripe).unwrap();
    let mut b = AlignedBuf::new(16384);
    let e = f.read_at(0, &mut b).unwrap_err();
    match e {
        Error::ShortTransfer {
            expected,
            got,
            offset,
            ..
        } => {
            assert_eq!((expected, got, offset), (16384, 8192, 0));
        }
        other => panic!("wrong error {other:?}"),
    }
}

#[test]
fn writes_fail_after_countdown_and_reads_still_work() {
    let tmp = TempDir::new("count");
    let cfg = SimConfig {
        fail_writes_after: Some(3),
        ..Default::default()
    };
    let store = open(&tmp.devices(1), sim(cfg), 16);
    let f = store.create("c", 1 << 20, LayoutKind::Stripe).unwrap();
    let mut b = AlignedBuf::new(4096);
    b.fill(0xab);
    for i in 0..3 {
        f.write_at(i * 4096, &b).unwrap();
    }
    assert!(matches!(
        f.write_at(3 * 4096, &b),
        Err(Error::Io {
            errno: libc::EIO,
            offset: 12288,
            ..
        })
    ));
    // The device is failed for good: even reads are now refused, naming the first failure.
    let mut r = AlignedBuf::new(4096);
    let e = f.read_at(0, &mut r).unwrap_err();
    assert!(e.to_string().contains("failed earlier"), "{e}");
}

#[test]
fn a_split_request_reports_the_failing_device_once() {
    // A 64 KiB read over 4 devices with 4 KiB units touches every device; only reads
    // on some devices fail (seeded): the request still completes exactly once.
    let tmp = TempDir::new("split");
    let store = open(
        &tmp.devices(4),
        sim(SimConfig {
            read_eio: 0.5,
            seed: 7,
            ..Default::default()
        }),
        1,
    );
    let f = store.create("x", 1 << 20, LayoutKind::Hash).unwrap();
    let count = Rc::new(RefCell::new(0));
    let mut q = Queue::new(2);
    let c = count.clone();
    q.submit(vec![Request::read(
        &f,
        0,
        AlignedBuf::new(65536),
        move |comp| {
            *c.borrow_mut() += 1;
            assert!(
                matches!(comp.result, Err(Error::Io { offset: 0, .. })),
                "{:?}",
                comp.result
            );
        },
    )]);
    q.drain();
    assert_eq!(*count.borrow(), 1);
}

#[test]
fn seeded_faults_are_deterministic() {
    let run = || {
        let tmp = TempDir::new("det");
        let cfg = SimConfig {
            read_eio: 0.3,
            seed: 42,
            ..Default::default()
        };
        let store = open(&tmp.devices(1), sim(cfg), 16);
        let f = store.create("d", 1 << 20, LayoutKind::Stripe).unwrap();
        let mut b = AlignedBuf::new(4096);
        (0..20)
            .map(|i| f.read_at(i * 4096, &mut b).is_ok())
            .collect::<Vec<_>>()
    };
    let first = run();
    // The faults happen (about three reads in ten), and the same ones again:
    // a simulator that ignored `read_eio` gave two equal runs of successes.
    assert!(first.contains(&true) && first.contains(&false), "{first:?}");
    assert_eq!(first, run());
}

#[test]
fn a_queues_errors_name_the_file_as_it_is_named_now() {
    // Real files, so that the queue's reads run on its own ring and finish on
    // its thread: each request then finds its slot's joiner free for reuse.
    let tmp = TempDir::new("qname");
    let store = open(&tmp.devices(1), StoreOptions::default(), 16);
    let a = store.create("a", 1 << 20, LayoutKind::Stripe).unwrap();
    let c = store.create("c", 1 << 20, LayoutKind::Stripe).unwrap();
    // Cut both backing files short behind the store's back: a read of the
    // first 16 KiB comes back short, an error naming the file.
    for name in ["a", "c"] {
        let p = &store.backing_paths(name).unwrap()[0];
        let f = std::fs::OpenOptions::new().write(true).open(p).unwrap();
        f.set_len(f.metadata().unwrap().len() - (1 << 20) + 8192)
            .unwrap();
    }
    // One slot: every request reuses what the one before it left there.
    let mut q = Queue::new(1);
    let named = Rc::new(RefCell::new(Vec::new()));
    let read = |q: &mut Queue, f: &setcache::File| {
        let n = named.clone();
        q.submit(vec![Request::read(
            f,
            0,
            AlignedBuf::new(16384),
            move |c| match c.result {
                Err(Error::ShortTransfer { file, .. }) => n.borrow_mut().push(file),
                other => panic!("a short read expected, got {other:?}"),
            },
        )]);
        q.drain();
    };
    read(&mut q, &a);
    read(&mut q, &a);
    read(&mut q, &c);
    read(&mut q, &a);
    store.rename("a", "b").unwrap();
    read(&mut q, &a);
    read(&mut q, &c);
    read(&mut q, &a);
    assert_eq!(*named.borrow(), ["a", "a", "c", "a", "b", "c", "b"]);
}
