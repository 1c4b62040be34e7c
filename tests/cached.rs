//! Files read and written through the page cache.

mod common;

use common::{Rng, TempDir, engines, pattern, small_cache};
use setcache::{CachedStore, EngineKind, Error, LayoutKind, SimConfig, Store, StoreOptions};

/// Random reads and writes of any offset and length through a cache far
/// smaller than the file (so pages are evicted and written back all the time)
/// match a plain byte array; after `sync`, a fresh store reads the same bytes
/// from the devices. Requests span up to 12 pages: with two candidate sets per
/// page, a miss finds a clean page in one of them unless writes fill sets with
/// dirty pages faster than the flusher cleans them, and requesters must then
/// write pages back themselves too.
#[test]
fn random_io_matches_a_reference_and_survives_reopen() {
    for (ename, opts) in engines() {
        let tmp = TempDir::new("cached");
        let roots = tmp.devices(2);
        const LEN: usize = 64 * 4096;
        let mut truth = pattern(5, 0, LEN);
        {
            let store = Store::open(
                &roots,
                StoreOptions {
                    block_pages: 2,
                    ..opts.clone()
                },
            )
            .unwrap();
            let f = store
                .create("data", LEN as u64, LayoutKind::Rotated)
                .unwrap();
            f.write_at(0, &{
                let mut b = setcache::AlignedBuf::new(LEN);
                b.copy_from_slice(&truth);
                b
            })
            .unwrap();
            let cs = CachedStore::new(store, small_cache(16)).unwrap();
            let cf = cs.open_file("data").unwrap();
            let mut rng = Rng(42);
            for step in 0..600 {
                let off = rng.below(LEN as u64) as usize;
                let n = 1 + rng.below(12 * 4096) as usize;
                let n = n.min(LEN - off);
                if rng.below(2) == 0 {
                    let data: Vec<u8> = (0..n).map(|i| (step * 7 + i) as u8).collect();
                    cf.write_at(off as u64, &data).unwrap();
                    truth[off..off + n].copy_from_slice(&data);
                } else {
                    let mut buf = vec![0u8; n];
                    assert_eq!(cf.read_at(off as u64, &mut buf).unwrap(), n);
                    assert!(
                        buf == truth[off..off + n],
                        "{ename}: step {step} read at {off}+{n}"
                    );
                }
            }
            // Reads past the end are short, not errors.
            let mut tail = vec![0u8; 100];
            assert_eq!(cf.read_at(LEN as u64 - 10, &mut tail).unwrap(), 10);
            assert_eq!(cf.read_at(LEN as u64, &mut tail).unwrap(), 0);
            assert!(
                cs.cache().stats().dirty_evictions > 0,
                "{ename}: no write-back under pressure"
            );
            cf.close().unwrap();
            assert!(cs.cache().dirty_pages().is_empty());
        }
        let store = Store::open(&roots, opts.clone()).unwrap();
        let f = store.open_file("data").unwrap();
        let mut back = setcache::AlignedBuf::new(LEN);
        f.read_at(0, &mut back).unwrap();
        assert!(
            back[..] == truth[..],
            "{ename}: the devices lost a synced write"
        );
    }
}

/// A partial write of an absent page reads the page first; a write past the
/// end is refused and changes nothing.
#[test]
fn partial_writes_read_first_and_bounds_are_checked() {
    let tmp = TempDir::new("cached-partial");
    let store = common::open(&tmp.devices(1), engines()[0].1.clone(), 16);
    let f = store.create("p", 8 * 4096, LayoutKind::Stripe).unwrap();
    let mut b = setcache::AlignedBuf::new(8 * 4096);
    b.copy_from_slice(&pattern(9, 0, 8 * 4096));
    f.write_at(0, &b).unwrap();
    let cs = CachedStore::new(store, small_cache(8)).unwrap();
    let cf = cs.open_file("p").unwrap();
    cf.write_at(4096 + 100, b"hello").unwrap();
    let mut page = vec![0u8; 4096];
    cf.read_at(4096, &mut page).unwrap();
    let mut want = pattern(9, 4096, 4096);
    want[100..105].copy_from_slice(b"hello");
    assert!(page == want);
    let e = cf.write_at(8 * 4096 - 2, b"abc").unwrap_err();
    assert!(matches!(e, Error::OutOfRange { .. }), "{e}");
    cf.read_at(8 * 4096 - 4096, &mut page).unwrap();
    assert!(page == pattern(9, 7 * 4096, 4096));
}

/// A pin wait past `MAX_PIN_WAIT` is refused when the cache is made, naming
/// it (before, the first wait that added it to the clock panicked: the first
/// paged array of words made over the cache, say).
#[test]
fn a_pin_wait_past_the_most_is_refused() {
    let tmp = TempDir::new("cached-pin-wait");
    let store = common::open(&tmp.devices(1), engines()[0].1.clone(), 16);
    for wait in [std::time::Duration::MAX, setcache::MAX_PIN_WAIT * 2] {
        let opts = setcache::CacheOptions {
            pin_wait: wait,
            ..small_cache(8)
        };
        let Err(e) = CachedStore::new(store.clone(), opts) else {
            panic!("a pin wait of {wait:?} was taken");
        };
        assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
        assert!(e.to_string().contains("pin wait"), "{e}");
    }
    let opts = setcache::CacheOptions {
        pin_wait: setcache::MAX_PIN_WAIT,
        ..small_cache(8)
    };
    let cs = CachedStore::new(store, opts).unwrap();
    let a = setcache::PagedArray::<u64>::create(&cs, "a", 1024, LayoutKind::Stripe).unwrap();
    a.set(3, 7).unwrap();
    assert_eq!(a.get(3).unwrap(), 7);
}

/// A length past the cache's page numbers (2^40 pages) is refused before
/// any store step, naming the limit: `create`, `set_len`, `grow` and an
/// extending write (before, it was taken where the file system allowed it,
/// and every access past the limit failed naming only a page number).
#[test]
fn a_length_past_the_caches_page_numbers_is_refused() {
    let tmp = TempDir::new("cached-past-pages");
    let store = common::open(&tmp.devices(1), engines()[0].1.clone(), 16);
    let cs = CachedStore::new(store, small_cache(8)).unwrap();
    let most = (1u64 << 40) * 4096;
    let check = |what: &str, r: setcache::Result<()>| match r {
        Err(Error::InvalidArgument(m)) if m.contains("most a cache") => {}
        other => panic!("{what}: {other:?}"),
    };
    check(
        "create",
        cs.create("big", most + 1, LayoutKind::Stripe).map(drop),
    );
    let f = cs.create("f", 4096, LayoutKind::Stripe).unwrap();
    check("set_len", f.set_len(most + 4096));
    check("grow", f.grow(most + 1));
    check("write_extending", f.write_extending(most, b"x"));
    assert_eq!(f.len(), 4096);
    f.write_at(0, b"still works").unwrap();
    f.sync().unwrap();
}

/// A file made through a cache of 1 MiB pages, longer than a cache of 4 KiB
/// pages reaches (2^52 bytes), is refused when such a cache opens it, naming
/// the length and the limit (before, the open was taken and every access
/// past 2^52 failed naming only a page number). On tmpfs, whose files may be
/// that long; the backing files are sparse.
#[test]
fn a_file_past_the_caches_page_numbers_is_refused_at_open() {
    let dir = common::FastDir::new("past-pages-open");
    let dev = dir.path().join("dev0");
    std::fs::create_dir_all(&dev).unwrap();
    let opts = StoreOptions {
        direct_io: false,
        ..StoreOptions::default()
    };
    let store = Store::open(std::slice::from_ref(&dev), opts).unwrap();
    let most = (1u64 << 40) * 4096;
    let big = setcache::CacheOptions {
        size: 8 << 20,
        page_size: 1 << 20,
        ..small_cache(8)
    };
    let cs = CachedStore::new(store.clone(), big).unwrap();
    let f = match cs.create("long", most + (1 << 20), LayoutKind::Stripe) {
        Ok(f) => f,
        // A file system that cannot hold a file that long (not tmpfs).
        Err(e) if e.errno() == Some(libc::EFBIG) => return,
        Err(e) => panic!("a file of 2^52 bytes and 1 MiB through 1 MiB pages: {e}"),
    };
    f.write_at(most, b"far end").unwrap();
    f.sync().unwrap();
    drop(f);
    drop(cs);
    let cs = CachedStore::new(store, small_cache(8)).unwrap();
    for (what, r) in [
        ("open_file", cs.open_file("long")),
        ("open_file_read_only", cs.open_file_read_only("long")),
        ("open_file_keeping_loss", cs.open_file_keeping_loss("long")),
    ] {
        match r {
            Err(Error::InvalidArgument(m)) => {
                assert!(
                    m.contains("\"long\"") && m.contains(&most.to_string()),
                    "{what}: {m}"
                )
            }
            Err(e) => panic!("{what}: {e}"),
            Ok(f) => panic!("{what} was taken, {} bytes long", f.len()),
        }
    }
    cs.sync().unwrap();
}

/// An extending write of nothing past the end changes nothing, as `pwrite`
/// of no bytes does; one of some bytes grows the file to its end.
#[test]
fn an_extending_write_of_nothing_leaves_the_length() {
    let tmp = TempDir::new("cached-extend-empty");
    let store = common::open(&tmp.devices(1), engines()[0].1.clone(), 16);
    drop(store.create("p", 4096, LayoutKind::Stripe).unwrap());
    let cs = CachedStore::new(store, small_cache(8)).unwrap();
    let cf = cs.open_file("p").unwrap();
    cf.write_extending(1 << 20, &[]).unwrap();
    assert_eq!(cf.len(), 4096, "an empty write past the end grew the file");
    cf.write_extending(8192, b"abc").unwrap();
    assert_eq!(cf.len(), 8195);
}

/// A write-back that fails is reported by `sync` (and again later: the page
/// stays dirty and the device's failure is remembered); nothing panics.
#[test]
fn failed_write_back_reaches_sync() {
    let tmp = TempDir::new("cached-fail");
    let cfg = SimConfig {
        fail_writes_after: Some(0),
        ..SimConfig::default()
    };
    let opts = StoreOptions {
        engine: EngineKind::Sim(cfg),
        ..StoreOptions::default()
    };
    let store = Store::open(&tmp.devices(1), opts).unwrap();
    store.create("w", 4 * 4096, LayoutKind::Stripe).unwrap();
    let cs = CachedStore::new(store, small_cache(8)).unwrap();
    let cf = cs.open_file("w").unwrap();
    cf.write_at(0, &[7u8; 4096]).unwrap(); // cached: succeeds
    let e = cf.sync().unwrap_err();
    assert!(
        e.to_string().contains("\"w\""),
        "the error names the file: {e}"
    );
    assert_eq!(cs.cache().dirty_pages().len(), 1, "the page stays dirty");
    assert!(cs.sync().is_err());
    // The cached bytes are still there for readers.
    let mut b = [0u8; 16];
    cf.read_at(0, &mut b).unwrap();
    assert_eq!(b, [7u8; 16]);
}

/// Writers on several threads while another thread syncs over and over; after
/// a final sync every thread's last bytes are on the devices.
#[test]
fn concurrent_writers_and_syncs() {
    let tmp = TempDir::new("cached-conc");
    let roots = tmp.devices(2);
    const PAGES: u64 = 64;
    let opts = engines()[0].1.clone();
    {
        let store = common::open(&roots, opts.clone(), 1);
        store.create("c", PAGES * 4096, LayoutKind::Hash).unwrap();
        let cs = CachedStore::new(store, small_cache(16)).unwrap();
        let cf = cs.open_file("c").unwrap();
        let stop = std::sync::atomic::AtomicBool::new(false);
        let syncs = std::sync::atomic::AtomicU64::new(0);
        std::thread::scope(|s| {
            let (cf2, stop2, syncs2) = (cf.clone(), &stop, &syncs);
            s.spawn(move || {
                while !stop2.load(std::sync::atomic::Ordering::Relaxed) {
                    cf2.sync().unwrap();
                    syncs2.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
                }
            });
            let writers: Vec<_> = (0..4u64)
                .map(|t| {
                    let (cf, syncs) = (cf.clone(), &syncs);
                    s.spawn(move || {
                        // Halfway, wait for two syncs to end after the
                        // first round: the second began after the first
                        // round's writes, so at least one sync runs among
                        // the writes (on two cores the writers could
                        // otherwise finish before the syncer's first look).
                        let mut start = 0;
                        // Thread t owns pages t, t+4, t+8, ...
                        for round in 0..20u8 {
                            if round == 1 {
                                start = syncs.load(std::sync::atomic::Ordering::Acquire);
                            }
                            if round == 10 {
                                while syncs.load(std::sync::atomic::Ordering::Acquire) < start + 2 {
                                    std::thread::yield_now();
                                }
                            }
                            for p in (t..PAGES).step_by(4) {
                                let off = p * 4096 + 17 * t;
                                cf.write_at(off, &[round + t as u8; 300]).unwrap();
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
        cs.sync().unwrap();
    }
    let store = common::open(&roots, opts, 1);
    let f = store.open_file("c").unwrap();
    let mut b = setcache::AlignedBuf::new((PAGES * 4096) as usize);
    f.read_at(0, &mut b).unwrap();
    for p in 0..PAGES {
        let t = p % 4;
        let off = (p * 4096 + 17 * t) as usize;
        assert!(
            b[off..off + 300].iter().all(|&x| x == 19 + t as u8),
            "page {p}: last write lost"
        );
    }
}

/// `sync` writes the dirty pages of a file that ends inside a sector (as a
/// rollback journal of 8,720 bytes does) as one run: one device write
/// covering the last sector whole, not one write per page; and the bytes
/// read back the same from a fresh store.
#[test]
fn a_file_ending_inside_a_sector_syncs_its_pages_in_one_write() {
    const LEN: usize = 2 * 4096 + 528;
    for (ename, opts) in engines() {
        let tmp = TempDir::new("tail-run");
        let roots = tmp.devices(1);
        let data = pattern(11, 0, LEN);
        {
            let store = common::open(&roots, opts.clone(), 16);
            store.create("j", LEN as u64, LayoutKind::Stripe).unwrap();
            let cs = CachedStore::new(store, small_cache(64)).unwrap();
            let f = cs.open_file("j").unwrap();
            f.write_at(0, &data).unwrap();
            let before = cs.store().device_bytes();
            f.sync().unwrap();
            let after = cs.store().device_bytes();
            assert_eq!(
                (after.writes - before.writes, after.written - before.written),
                (1, 2 * 4096 + 1024),
                "{ename}: one write of two pages and the last sector"
            );
        }
        let store = common::open(&roots, opts, 16);
        let cs = CachedStore::new(store, small_cache(64)).unwrap();
        let f = cs.open_file("j").unwrap();
        let mut back = vec![0u8; LEN];
        assert_eq!(f.read_at(0, &mut back).unwrap(), LEN, "{ename}");
        assert!(back == data, "{ename}: the bytes after a reopen");
    }
}
