//! Cached files across deletes, renames, length changes, out-of-space errors
//! and failed fsyncs: nothing a `sync` confirmed is lost, and nothing deleted
//! or truncated comes back.

mod common;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use common::{TempDir, engines, pattern, small_cache as cache};
use setcache::{
    AlignedBuf, CacheOptions, CachedRequest, CachedStore, EngineKind, Error, FlushOptions,
    LayoutKind, OpKind, PolicyKind, SimConfig, SimMedia, SimSwitches, Store, StoreOptions,
};

const MIB: u64 = 1 << 20;

fn read_all(cf: &setcache::CachedFile) -> Vec<u8> {
    let mut b = vec![0xEEu8; cf.len() as usize];
    assert_eq!(cf.read_at(0, &mut b).unwrap(), b.len());
    b
}

/// Delete a file through the store, create a new one of the same name through
/// the same cached store: the new file shows zeros (not the old file's bytes),
/// and its synced writes survive a reopen.
#[test]
fn delete_then_create_same_name_is_a_new_file() {
    for (ename, opts) in engines() {
        let tmp = TempDir::new("recreate");
        let roots = tmp.devices(2);
        {
            let cs =
                CachedStore::new(Store::open(&roots, opts.clone()).unwrap(), cache(64)).unwrap();
            let a = cs.create("x", MIB, LayoutKind::Stripe).unwrap();
            a.write_at(0, b"OLD").unwrap();
            a.sync().unwrap();
            drop(a);
            cs.store().delete("x").unwrap();
            let b = cs.create("x", MIB, LayoutKind::Stripe).unwrap();
            let mut got = [0xAAu8; 3];
            b.read_at(0, &mut got).unwrap();
            assert_eq!(
                &got,
                &[0, 0, 0],
                "{ename}: the new file shows the old file's bytes"
            );
            b.write_at(0, b"NEW").unwrap();
            b.sync().unwrap();
        }
        if matches!(opts.engine, EngineKind::Sim(_)) {
            continue; // the simulated media does not outlive this store
        }
        let cs = CachedStore::new(Store::open(&roots, opts.clone()).unwrap(), cache(64)).unwrap();
        let b = cs.open_file("x").unwrap();
        let mut got = [0u8; 3];
        b.read_at(0, &mut got).unwrap();
        assert_eq!(
            &got, b"NEW",
            "{ename}: a synced write to the new file was lost"
        );
    }
}

/// `CachedStore::delete` drops the file's pages, dirty ones unwritten, and the
/// handles made before it fail with a clear error; a file created again under
/// the name starts from zeros.
#[test]
fn cached_delete_retires_the_file() {
    let tmp = TempDir::new("cdelete");
    let roots = tmp.devices(2);
    let cs = CachedStore::new(
        Store::open(&roots, StoreOptions::default()).unwrap(),
        cache(64),
    )
    .unwrap();
    let a = cs.create("x", MIB, LayoutKind::Stripe).unwrap();
    a.write_at(0, &[7u8; 20000]).unwrap(); // dirty, never synced
    let before = cs.cache().pages().len();
    assert!(before >= 5);
    cs.delete("x").unwrap();
    assert!(
        cs.cache().pages().is_empty(),
        "pages of a deleted file stay cached: {:?}",
        cs.cache().pages()
    );
    assert!(matches!(
        cs.store().open_file("x"),
        Err(Error::FileNotFound(_))
    ));
    let e = a.read_at(0, &mut [0u8; 4]).unwrap_err();
    assert!(matches!(e, Error::FileGone(_)), "{e}");
    assert!(e.to_string().contains("\"x\""), "{e}");
    assert!(matches!(a.write_at(0, b"z"), Err(Error::FileGone(_))));
    assert!(matches!(a.sync(), Err(Error::FileGone(_))));
    let b = cs.create("x", MIB, LayoutKind::Stripe).unwrap();
    assert!(read_all(&b).iter().all(|&x| x == 0));
    cs.sync().unwrap();
    // Deleting a file that does not exist is an error that names it.
    let e = cs.delete("nope").unwrap_err();
    assert!(matches!(e, Error::FileNotFound(_)), "{e}");
}

/// Renaming through the cached store keeps handles and cached pages.
#[test]
fn cached_rename_keeps_handles() {
    let tmp = TempDir::new("crename");
    let roots = tmp.devices(2);
    let cs = CachedStore::new(
        Store::open(&roots, StoreOptions::default()).unwrap(),
        cache(64),
    )
    .unwrap();
    let a = cs.create("a", MIB, LayoutKind::Stripe).unwrap();
    a.write_at(100, b"hello").unwrap();
    cs.rename("a", "b").unwrap();
    a.write_at(200, b"world").unwrap();
    a.sync().unwrap();
    let b = cs.open_file("b").unwrap();
    let mut got = [0u8; 5];
    b.read_at(100, &mut got).unwrap();
    assert_eq!(&got, b"hello");
    b.read_at(200, &mut got).unwrap();
    assert_eq!(&got, b"world");
    // A new "a" is a new file.
    let a2 = cs.create("a", MIB, LayoutKind::Stripe).unwrap();
    a2.read_at(100, &mut got).unwrap();
    assert_eq!(got, [0; 5]);
}

/// Shrink a file with cached and dirty pages past the new end, grow it again:
/// the bytes past the old end read as zeros, every sync succeeds, and the
/// devices agree after a reopen.
#[test]
fn shrink_then_grow_shows_zeros() {
    for (ename, opts) in engines() {
        let tmp = TempDir::new("shrink");
        let roots = tmp.devices(2);
        let len = 64 * 4096u64;
        let data = pattern(3, 0, len as usize);
        let cut = 5 * 4096u64 + 1536; // inside a page, on a sector boundary
        {
            let store = Store::open(
                &roots,
                StoreOptions {
                    block_pages: 2,
                    ..opts.clone()
                },
            )
            .unwrap();
            let cs = CachedStore::new(store, cache(32)).unwrap();
            let cf = cs.create("f", len, LayoutKind::Rotated).unwrap();
            cf.write_at(0, &data).unwrap();
            cf.sync().unwrap();
            // Dirty pages on both sides of the cut.
            cf.write_at(4 * 4096, &vec![9u8; 8 * 4096]).unwrap();
            cf.set_len(cut).unwrap();
            assert_eq!(cf.len(), cut);
            let mut b = vec![0u8; 100];
            assert_eq!(cf.read_at(cut, &mut b).unwrap(), 0, "{ename}");
            assert!(
                cf.write_at(cut, b"x").is_err(),
                "{ename}: a write past the end"
            );
            cf.sync()
                .unwrap_or_else(|e| panic!("{ename}: sync after shrink: {e}"));
            cf.set_len(len).unwrap();
            let all = read_all(&cf);
            assert_eq!(&all[..4 * 4096], &data[..4 * 4096], "{ename}");
            assert!(
                all[4 * 4096..cut as usize].iter().all(|&x| x == 9),
                "{ename}"
            );
            assert!(
                all[cut as usize..].iter().all(|&x| x == 0),
                "{ename}: old bytes past the old end came back"
            );
            cf.write_at(len - 10, b"tail").unwrap();
            cf.sync()
                .unwrap_or_else(|e| panic!("{ename}: sync after grow: {e}"));
            cf.sync().unwrap();
        }
        if matches!(opts.engine, EngineKind::Sim(_)) {
            continue;
        }
        let cs = CachedStore::new(Store::open(&roots, opts.clone()).unwrap(), cache(32)).unwrap();
        let cf = cs.open_file("f").unwrap();
        let all = read_all(&cf);
        assert_eq!(all.len() as u64, len);
        assert!(
            all[cut as usize..len as usize - 10].iter().all(|&x| x == 0),
            "{ename}"
        );
        assert_eq!(&all[len as usize - 10..len as usize - 6], b"tail");
    }
}

/// Two caches of one store in one process would each cache pages the other
/// changes: the second is refused, naming the directories; once the first is
/// gone, another may take its place.
#[test]
fn a_second_cache_of_one_store_is_refused() {
    let tmp = TempDir::new("twocaches");
    let roots = tmp.devices(2);
    let store = Store::open(&roots, StoreOptions::default()).unwrap();
    let first = CachedStore::new(store.clone(), cache(16)).unwrap();
    let f = first.create("f", MIB, LayoutKind::Stripe).unwrap();
    let e = CachedStore::new(store.clone(), cache(16))
        .err()
        .expect("a second cache");
    let msg = e.to_string();
    assert!(msg.contains("already has a page cache"), "{msg}");
    assert!(msg.contains(&roots[0].display().to_string()), "{msg}");
    // A second store on the same directories is refused by their locks.
    match Store::open(&roots, StoreOptions::default()) {
        Err(Error::StoreLocked { holder, .. }) => {
            assert_eq!(holder, Some(std::process::id()), "the lock's holder")
        }
        other => panic!("a second store on locked roots: {:?}", other.err()),
    }
    drop(f);
    drop(first);
    let second = CachedStore::new(store, cache(16)).unwrap();
    second.open_file("f").unwrap();
}

/// The length of a file open through the cache changes only through the
/// cache (the store's own `set_len` would leave stale pages past the end).
#[test]
fn raw_set_len_of_a_cached_file_is_refused() {
    let tmp = TempDir::new("rawlen");
    let roots = tmp.devices(1);
    let store = Store::open(&roots, StoreOptions::default()).unwrap();
    let cs = CachedStore::new(store.clone(), cache(16)).unwrap();
    let cf = cs.create("f", MIB, LayoutKind::Stripe).unwrap();
    cf.write_at(0, &[3u8; 8192]).unwrap();
    let e = cf.file().set_len(4096).unwrap_err();
    assert!(e.to_string().contains("CachedFile::set_len"), "{e}");
    assert_eq!(cf.len(), MIB);
    cf.set_len(4096).unwrap();
    cf.sync().unwrap();
    drop(cf);
    drop(cs);
    // Without a cache, the store's own call works again.
    let f = store.open_file("f").unwrap();
    f.set_len(8192).unwrap();
    assert_eq!(f.len(), 8192);
}

/// A write through the store's file of a cached file is refused, as its
/// `set_len` is: it would leave the cached pages stale, and a read-only
/// handle's file took writes. Without the cache, it works again.
#[test]
fn raw_writes_of_a_cached_file_are_refused() {
    let tmp = TempDir::new("rawwrite");
    let roots = tmp.devices(1);
    let store = Store::open(&roots, StoreOptions::default()).unwrap();
    let cs = CachedStore::new(store.clone(), cache(16)).unwrap();
    let cf = cs.create("f", MIB, LayoutKind::Stripe).unwrap();
    cf.write_at(0, &[3u8; 4096]).unwrap();
    cf.sync().unwrap();
    let ro = cs.open_file_read_only("f").unwrap();
    let mut b = setcache::AlignedBuf::new(4096);
    b.fill(9);
    for handle in [&ro, &cf] {
        let e = handle.file().write_at(0, &b).unwrap_err();
        assert!(e.to_string().contains("CachedFile::write_at"), "{e}");
    }
    let mut got = [0u8; 4096];
    ro.read_at(0, &mut got).unwrap();
    assert!(got.iter().all(|&x| x == 3), "the bytes changed");
    drop((ro, cf));
    drop(cs);
    let f = store.open_file("f").unwrap();
    f.write_at(0, &b).unwrap();
}

/// A growth after a shrink (which takes the logged path, clearing what a
/// racing write may have left past the old end) is refused only for guards
/// of the pages it clears: before, any guard of the file on this thread
/// made it fail `HeldByCaller`.
#[test]
fn a_growth_after_a_shrink_waits_only_for_guards_past_the_end() {
    let tmp = TempDir::new("grow-after-shrink");
    let cs = CachedStore::new(
        Store::open(&tmp.devices(1), StoreOptions::default()).unwrap(),
        cache(16),
    )
    .unwrap();
    let cf = cs.create("f", MIB, LayoutKind::Stripe).unwrap();
    cf.set_len(4 * 4096).unwrap();
    let g = cf.page(0).unwrap();
    cf.write_extending(4 * 4096, &[1; 10]).unwrap();
    assert_eq!(cf.len(), 4 * 4096 + 10);
    drop(g);
}

/// A store with file `f`, cut from 1 MiB to 4 pages (so that its next
/// growth takes the logged path) and its page 0 written (dirty).
fn shrunk_file_with_a_dirty_page(name: &str) -> (TempDir, CachedStore, setcache::CachedFile) {
    let tmp = TempDir::new(name);
    let cs = CachedStore::new(
        Store::open(&tmp.devices(1), StoreOptions::default()).unwrap(),
        CacheOptions {
            pin_wait: Duration::from_millis(300),
            ..cache(16)
        },
    )
    .unwrap();
    let cf = cs.create("f", MIB, LayoutKind::Stripe).unwrap();
    cf.set_len(4 * 4096).unwrap();
    cf.write_at(0, &[7; 4096]).unwrap();
    (tmp, cs, cf)
}

/// Ends the process (exit code 3, `what` on stderr) unless the flag it
/// returns is set within 60 s: a test whose threads would wait for each
/// other for ever fails instead of hanging the run.
fn watchdog(what: &'static str) -> Arc<std::sync::atomic::AtomicBool> {
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let seen = done.clone();
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(60));
        if !seen.load(Ordering::SeqCst) {
            eprintln!("{what}");
            std::process::exit(3);
        }
    });
    done
}

/// A growth after a shrink (the logged path, which takes the file's sync
/// lock) by a thread holding a guard of a dirty page below the end, while
/// another thread's sync of the file waits for that page: the growth is
/// refused (`HeldByCaller`) instead of waiting for ever beside the sync, and
/// the sync ends once the guard goes. An extending write takes the same
/// path.
#[test]
fn a_growth_beside_a_sync_waiting_for_this_threads_guard_is_refused() {
    // A sync that had not yet taken its lock when the growth came (a loaded
    // machine) lets the growth through: tried again.
    for attempt in 0.. {
        let (_tmp, _cs, cf) = shrunk_file_with_a_dirty_page("grow-beside-sync");
        let g = cf.page(0).unwrap();
        let done = watchdog("a growth and a sync waited 60 s for each other");
        let syncer = {
            let cf = cf.clone();
            std::thread::spawn(move || cf.sync())
        };
        // The sync waits for page 0 (dirty, pinned by the guard) under its lock.
        std::thread::sleep(Duration::from_millis(300));
        let r = cf.grow(5 * 4096);
        assert!(
            matches!(r, Err(Error::HeldByCaller(_)) | Ok(())),
            "growth: {r:?}"
        );
        if r.is_ok() {
            drop(g);
            let _ = syncer.join().unwrap();
            done.store(true, Ordering::SeqCst);
            assert!(
                attempt < 5,
                "the sync never took its lock before the growth"
            );
            continue;
        }
        let r = cf.write_extending(4 * 4096, &[1; 10]);
        assert!(
            matches!(r, Err(Error::HeldByCaller(_))),
            "extending write: {r:?}"
        );
        drop(g);
        syncer.join().unwrap().unwrap();
        done.store(true, Ordering::SeqCst);
        // With the sync done, both go through while a guard is held.
        let g = cf.page(0).unwrap();
        cf.write_extending(4 * 4096, &[1; 10]).unwrap();
        assert_eq!(cf.len(), 4 * 4096 + 10);
        drop(g);
        break;
    }
}

/// As above with a third thread between them: a `set_len` (holding no
/// guard) that holds the length-change lock while it waits for the sync,
/// which waits for the guard of the thread whose growth waits for that
/// lock. The growth is refused, as the sync waits for a page its thread
/// holds; the sync and the `set_len` end once the guard goes.
#[test]
fn a_growth_behind_a_set_len_waiting_for_a_sync_waiting_for_its_guard_is_refused() {
    // A sync or a `set_len` not yet at its lock when the growth came (a
    // loaded machine) lets the growth through: tried again.
    for attempt in 0.. {
        let (_tmp, _cs, cf) = shrunk_file_with_a_dirty_page("grow-behind-set-len");
        let g = cf.page(0).unwrap();
        let done = watchdog("a growth, a set_len and a sync waited 60 s for each other");
        let syncer = {
            let cf = cf.clone();
            std::thread::spawn(move || cf.sync())
        };
        std::thread::sleep(Duration::from_millis(300));
        let cutter = {
            let cf = cf.clone();
            std::thread::spawn(move || cf.set_len(3 * 4096))
        };
        std::thread::sleep(Duration::from_millis(300));
        let t = std::time::Instant::now();
        let r = cf.grow(5 * 4096);
        assert!(
            matches!(r, Err(Error::HeldByCaller(_)) | Ok(())),
            "growth: {r:?}"
        );
        if r.is_ok() {
            drop(g);
            let _ = syncer.join().unwrap();
            let _ = cutter.join().unwrap();
            done.store(true, Ordering::SeqCst);
            assert!(
                attempt < 5,
                "the sync never took its lock before the growth"
            );
            continue;
        }
        // (Waiting for the sync would take until the watchdog.)
        assert!(t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
        drop(g);
        syncer.join().unwrap().unwrap();
        cutter.join().unwrap().unwrap();
        done.store(true, Ordering::SeqCst);
        assert_eq!(cf.len(), 3 * 4096);
        break;
    }
}

/// Lengths are exact to the byte: a file of 1000 bytes reads 1000 bytes, a
/// shrink to an odd length and a grow show zeros past the cut, and the length
/// survives a reopen.
#[test]
fn lengths_are_exact_to_the_byte() {
    let tmp = TempDir::new("exact");
    let roots = tmp.devices(2);
    let opts = StoreOptions {
        block_pages: 1,
        ..StoreOptions::default()
    };
    {
        let cs = CachedStore::new(Store::open(&roots, opts.clone()).unwrap(), cache(16)).unwrap();
        let cf = cs.create("odd", 1000, LayoutKind::Stripe).unwrap();
        assert_eq!(cf.len(), 1000);
        cf.write_at(0, &[5u8; 1000]).unwrap();
        assert!(cf.write_at(999, b"ab").is_err());
        let mut b = vec![0u8; 4096];
        assert_eq!(cf.read_at(0, &mut b).unwrap(), 1000);
        cf.sync().unwrap();
        let g = cs
            .create("grow", 3 * 4096 + 77, LayoutKind::Stripe)
            .unwrap();
        g.write_at(0, &vec![1u8; 3 * 4096 + 77]).unwrap();
        g.set_len(4096 + 333).unwrap();
        g.sync().unwrap();
        g.set_len(3 * 4096 + 5).unwrap();
        let all = read_all(&g);
        assert!(all[..4096 + 333].iter().all(|&x| x == 1));
        assert!(
            all[4096 + 333..].iter().all(|&x| x == 0),
            "old bytes past an odd cut came back"
        );
        g.sync().unwrap();
        // An uncached reopen of the same bytes sees the same.
        cs.sync().unwrap();
    }
    let cs = CachedStore::new(Store::open(&roots, opts).unwrap(), cache(16)).unwrap();
    let cf = cs.open_file("odd").unwrap();
    assert_eq!(cf.len(), 1000);
    assert_eq!(cs.store().info("odd").unwrap().len, 1000);
    assert!(read_all(&cf).iter().all(|&x| x == 5));
    let g = cs.open_file("grow").unwrap();
    assert_eq!(g.len(), 3 * 4096 + 5);
    let all = read_all(&g);
    assert!(all[..4096 + 333].iter().all(|&x| x == 1));
    assert!(all[4096 + 333..].iter().all(|&x| x == 0));
}

fn sim_store(roots: &[std::path::PathBuf], media: &Arc<SimMedia>, sw: &Arc<SimSwitches>) -> Store {
    Store::open(
        roots,
        StoreOptions {
            engine: EngineKind::Sim(SimConfig {
                media: media.clone(),
                switches: sw.clone(),
                latency_us: (1, 5),
                ..SimConfig::default()
            }),
            ..StoreOptions::default()
        },
    )
    .unwrap()
}

/// Out of space: the write stays dirty, the device is not failed (reads of
/// clean pages go on), and once space is back the next `sync` writes it and
/// succeeds.
#[test]
fn enospc_passes_once_space_is_back() {
    let tmp = TempDir::new("enospc");
    let roots = tmp.devices(2);
    let media = SimMedia::new();
    let sw = Arc::new(SimSwitches::default());
    let data = pattern(11, 0, 256 * 1024);
    {
        // Room for every page: no write needs a victim written first.
        let cs = CachedStore::with_flusher(
            sim_store(&roots, &media, &sw),
            cache(1024),
            Some(FlushOptions::default()),
        )
        .unwrap();
        let cf = cs.create("f", MIB, LayoutKind::Stripe).unwrap();
        cf.write_at(0, &data).unwrap();
        cf.sync().unwrap();
        // Clean pages on both devices, then writes that find no space.
        sw.write_errno.store(libc::ENOSPC, Ordering::Release);
        cf.write_at(512 * 1024, &data).unwrap();
        let e = cf.sync().unwrap_err();
        assert_eq!(e.errno(), Some(libc::ENOSPC), "{e}");
        assert!(
            cs.store().device_errors().iter().all(Option::is_none),
            "out of space failed a device for good: {:?}",
            cs.store().device_errors()
        );
        let e = cf.sync().unwrap_err();
        assert_eq!(e.errno(), Some(libc::ENOSPC), "{e}");
        // Reads of clean pages (evicted ones are read again) go on.
        let mut b = vec![0u8; data.len()];
        cf.read_at(0, &mut b).unwrap();
        assert_eq!(b, data);
        // Space is back: the next sync writes the dirty pages and succeeds.
        sw.write_errno.store(0, Ordering::Release);
        cf.sync()
            .unwrap_or_else(|e| panic!("sync after space came back: {e}"));
        cf.sync().unwrap();
    }
    let cs = CachedStore::new(sim_store(&roots, &media, &sw), cache(256)).unwrap();
    let cf = cs.open_file("f").unwrap();
    let mut b = vec![0u8; data.len()];
    cf.read_at(512 * 1024, &mut b).unwrap();
    assert!(b == data, "writes made while the disk was full were lost");
}

/// A failed fsync is never taken as passed: the pages written since the last
/// good fsync (which the simulated kernel drops, as Linux may) are written
/// again before the next fsync, so that sync's success means they are durable.
#[test]
fn failed_fsync_writes_pages_again() {
    let tmp = TempDir::new("fsyncfail");
    // One device: the one failing fsync is the one that held the writes.
    let roots = tmp.devices(1);
    let media = SimMedia::new();
    let sw = Arc::new(SimSwitches::default());
    sw.keep_synced.store(true, Ordering::Release);
    sw.fsync_errno.store(libc::ENOSPC, Ordering::Release);
    let a = vec![0xA1u8; 64 * 1024];
    let b = vec![0xB2u8; 64 * 1024];
    {
        let cs =
            CachedStore::with_flusher(sim_store(&roots, &media, &sw), cache(256), None).unwrap();
        let cf = cs.create("f", MIB, LayoutKind::Stripe).unwrap();
        cf.write_at(0, &a).unwrap();
        cf.sync().unwrap();
        cf.write_at(0, &b).unwrap();
        sw.fsync_failures.store(1, Ordering::Release);
        let e = cf.sync().unwrap_err();
        assert_eq!(e.errno(), Some(libc::ENOSPC), "{e}");
        cf.sync()
            .unwrap_or_else(|e| panic!("the sync after a failed fsync: {e}"));
    }
    let cs = CachedStore::new(sim_store(&roots, &media, &sw), cache(256)).unwrap();
    let cf = cs.open_file("f").unwrap();
    let mut got = vec![0u8; b.len()];
    cf.read_at(0, &mut got).unwrap();
    assert!(
        got == b,
        "a write the kernel dropped at a failed fsync was taken as durable"
    );
}

/// A plain file (no cache) whose fsync failed cannot write again what the
/// kernel may have dropped: the handle's later syncs fail, naming the first
/// failure, instead of passing with the writes gone; a handle opened again
/// starts afresh.
#[test]
fn a_plain_files_failed_fsync_fails_its_later_syncs() {
    let tmp = TempDir::new("plainfsync");
    let roots = tmp.devices(1);
    let media = SimMedia::new();
    let sw = Arc::new(SimSwitches::default());
    sw.keep_synced.store(true, Ordering::Release);
    // An error a device survives (EIO would fail the device itself).
    sw.fsync_errno.store(libc::ENOSPC, Ordering::Release);
    let store = sim_store(&roots, &media, &sw);
    let f = store.create("f", MIB, LayoutKind::Stripe).unwrap();
    let mut a = setcache::AlignedBuf::new(64 * 1024);
    a.fill(0xA1);
    f.write_at(0, &a).unwrap();
    f.sync().unwrap();
    let mut b = setcache::AlignedBuf::new(64 * 1024);
    b.fill(0xB2);
    f.write_at(0, &b).unwrap();
    sw.fsync_failures.store(1, Ordering::Release);
    let first = f.sync().unwrap_err();
    assert_eq!(first.errno(), Some(libc::ENOSPC), "{first}");
    for _ in 0..2 {
        let e = f.sync().unwrap_err();
        assert!(matches!(e, Error::SyncLost { .. }), "{e}");
        assert_eq!(e.errno(), Some(libc::ENOSPC), "{e}");
    }
    drop(f);
    let f = store.open_file("f").unwrap();
    f.write_at(0, &b).unwrap();
    f.sync().unwrap();
    let mut got = setcache::AlignedBuf::new(64 * 1024);
    f.read_at(0, &mut got).unwrap();
    assert!(got.iter().all(|&x| x == 0xB2));
}

/// A cached store of 16 pages on simulated media whose file `f` lost pages:
/// far more pages than the cache holds were written, so the early ones were
/// written back and evicted before a sync whose fsync then failed.
fn a_file_with_a_loss(
    roots: &[std::path::PathBuf],
    media: &Arc<SimMedia>,
) -> (Arc<SimSwitches>, CachedStore, setcache::CachedFile) {
    let sw = Arc::new(SimSwitches::default());
    sw.keep_synced.store(true, Ordering::Release);
    sw.fsync_errno.store(libc::ENOSPC, Ordering::Release);
    let cs = CachedStore::with_flusher(sim_store(roots, media, &sw), cache(16), None).unwrap();
    let cf = cs.create("f", MIB, LayoutKind::Stripe).unwrap();
    cf.write_at(0, &pattern(4, 0, 128 * 4096)).unwrap();
    sw.fsync_failures.store(1, Ordering::Release);
    assert!(cf.sync().is_err());
    (sw, cs, cf)
}

/// If a page written before a failed fsync has left the cache, it cannot be
/// written again: the file's syncs fail until it is opened again.
#[test]
fn failed_fsync_after_pages_left_the_cache_fails_until_reopened() {
    let tmp = TempDir::new("fsynclost");
    let roots = tmp.devices(1);
    let media = SimMedia::new();
    let (_sw, cs, cf) = a_file_with_a_loss(&roots, &media);
    for _ in 0..2 {
        let e = cf.sync().unwrap_err();
        assert!(matches!(e, Error::SyncLost { .. }), "{e}");
        assert!(e.to_string().contains("opened again"), "{e}");
    }
    let again = cs.open_file("f").unwrap();
    again.sync().unwrap();
    cf.sync().unwrap();
}

/// Free bytes of the file system holding `p`.
fn free_bytes(p: &std::path::Path) -> u64 {
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: `statvfs` is plain data; zeroed is a valid value to overwrite.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: statvfs fills the struct; `c` is a valid path.
    let r = unsafe { libc::statvfs(c.as_ptr(), &mut st) };
    assert_eq!(r, 0);
    st.f_bavail * st.f_frsize
}

/// A reserved range takes its space on the devices at once, past the file's
/// end too, and keeps it through the store's close and open and a growth
/// over it (lazy or by `set_len`), so that its pages are written back after
/// everything else on the file system was taken; a reservation larger than
/// the room fails with `ENOSPC` naming the device, and bad ranges and
/// read-only handles are refused.
#[test]
fn a_reserved_range_is_written_back_on_a_full_file_system() {
    let tmp = TempDir::new("reserve");
    let Some(fs) = common::Tmpfs::mount(&tmp.path().join("mnt"), 24) else {
        return;
    };
    let roots: Vec<_> = (0..2).map(|i| fs.0.join(format!("dev{i}"))).collect();
    for r in &roots {
        std::fs::create_dir_all(r).unwrap();
    }
    let opts = StoreOptions {
        engine: EngineKind::Uring,
        direct_io: false,
        ..StoreOptions::default()
    };
    let open = || {
        let roomy = CacheOptions {
            size: 64 << 20,
            ..CacheOptions::default()
        };
        CachedStore::new(Store::open(&roots, opts.clone()).unwrap(), roomy).unwrap()
    };
    // Files ending inside a block, ranges from an odd offset past their ends
    // across both devices' blocks.
    let (at, n) = (10_000u64, 4 * MIB + 100_000);
    {
        let cs = open();
        for name in ["lazy", "set"] {
            let cf = cs.create(name, at, LayoutKind::Stripe).unwrap();
            let e = cf.reserve(at, 64 * MIB).unwrap_err();
            assert_eq!(e.errno(), Some(libc::ENOSPC), "{e}");
            assert!(e.to_string().contains("reserve"), "{e}");
            let before = free_bytes(&fs.0);
            cf.reserve(at, n).unwrap();
            let taken = before.saturating_sub(free_bytes(&fs.0));
            assert!(
                taken >= n - 64 * 1024,
                "a reservation of {n} bytes took {taken} bytes of the file system"
            );
            assert_eq!(cf.len(), at, "a reservation changed the length");
        }
        cs.close().unwrap();
    }
    // Opened again (the growths then clear each backing file's tail first).
    let cs = open();
    let lazy = cs.open_file("lazy").unwrap();
    let set = cs.open_file("set").unwrap();
    lazy.grow(at + n).unwrap();
    set.set_len(at + n).unwrap();
    common::take_the_rest(&fs.0);
    assert!(free_bytes(&fs.0) < 64 * 1024, "the ballast left room");
    let data: Vec<u8> = (0..n).map(|i| (i % 253) as u8).collect();
    for cf in [&lazy, &set] {
        cf.write_at(at, &data).unwrap();
        cf.sync().unwrap_or_else(|e| {
            panic!(
                "sync of a reserved range on a full file system ({}): {e}",
                cf.file().name()
            )
        });
        let mut back = vec![0u8; n as usize];
        cf.read_at(at, &mut back).unwrap();
        assert!(back == data);
    }
    // Bad input.
    let e = lazy.reserve(0, 0).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    let e = lazy.reserve(u64::MAX - 1, 10).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    let ro = cs.open_file_read_only("lazy").unwrap();
    let e = ro.reserve(0, 4096).unwrap_err();
    assert!(matches!(e, Error::ReadOnly(_)), "{e}");
    drop((ro, lazy, set));
    cs.close().unwrap();
}

/// A reservation of a few bytes inside a page of a cache of pages larger
/// than the file system's blocks covers the whole page, which the
/// write-back writes: those bytes written on a full file system are synced.
#[test]
fn a_reservation_inside_a_large_page_covers_the_page() {
    let tmp = TempDir::new("reserve-page");
    let Some(fs) = common::Tmpfs::mount(&tmp.path().join("mnt"), 16) else {
        return;
    };
    let root = fs.0.join("dev0");
    std::fs::create_dir_all(&root).unwrap();
    let ps = 16384usize;
    let opts = StoreOptions {
        engine: EngineKind::Uring,
        direct_io: false,
        page_size: ps as u32,
        ..StoreOptions::default()
    };
    let cache = CacheOptions {
        size: 4 << 20,
        page_size: ps,
        ..CacheOptions::default()
    };
    let cs = CachedStore::new(Store::open(&[&root], opts).unwrap(), cache).unwrap();
    let cf = cs.create("f", 4 * MIB, LayoutKind::Stripe).unwrap();
    let at = 3 * ps as u64 + 100;
    cf.reserve(at, 100).unwrap();
    common::take_the_rest(&fs.0);
    cf.write_at(at, &[9u8; 100]).unwrap();
    cf.sync()
        .unwrap_or_else(|e| panic!("sync of 100 reserved bytes in a 16 KiB page: {e}"));
    drop(cf);
    cs.close().unwrap();
}

/// On a real, small file system: fill it until the flusher gets ENOSPC, free
/// space, and the next `sync` writes everything and succeeds; then fill it
/// again until `sync` itself gets ENOSPC, free space, and sync again. Reads of
/// clean pages go on meanwhile, and the device is never failed for good.
#[test]
fn a_full_file_system_recovers_when_space_is_freed() {
    let tmp = TempDir::new("fullfs");
    let Some(fs) = common::Tmpfs::mount(&tmp.path().join("mnt"), 24) else {
        return;
    };
    let root = fs.0.join("dev0");
    std::fs::create_dir_all(&root).unwrap();
    let opts = StoreOptions {
        engine: EngineKind::Uring,
        direct_io: false,
        ..StoreOptions::default()
    };
    let len = 16 * MIB;
    let data: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
    let ballast = fs.0.join("ballast");
    let free = free_bytes;
    let leave = |mib: u64| {
        let fill = free(&fs.0).saturating_sub(mib * MIB);
        std::fs::write(&ballast, vec![1u8; fill as usize]).unwrap();
    };
    {
        // Room for every page (writes only dirty pages); the flusher writes
        // each dirty page at once.
        let roomy = CacheOptions {
            size: 128 << 20,
            ..CacheOptions::default()
        };
        let flush = FlushOptions {
            dirty_at: Some(1),
            ..FlushOptions::default()
        };
        let store = Store::open(&[&root], opts.clone()).unwrap();
        let cs = CachedStore::with_flusher(store, roomy, Some(flush)).unwrap();
        // Creating is cheap (a sparse file); its first MiB is written at once.
        let cf = cs.create("f", len, LayoutKind::Stripe).unwrap();
        cf.write_at(0, &data[..MIB as usize]).unwrap();
        cf.sync().unwrap();
        // The flusher meets the full file system.
        leave(4);
        cf.write_at(MIB, &data[MIB as usize..8 * MIB as usize])
            .unwrap();
        let t = std::time::Instant::now();
        while cs.flusher_counts().pages < 4 * 256 && t.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(10));
        }
        // Until the flusher has stopped (no page written for 300 ms): pages
        // still dirty then are pages it could not write, not pages a slow
        // flusher had yet to reach.
        let mut last = (cs.flusher_counts().pages, std::time::Instant::now());
        while last.1.elapsed() < Duration::from_millis(300) && t.elapsed() < Duration::from_secs(30)
        {
            std::thread::sleep(Duration::from_millis(10));
            let now = cs.flusher_counts().pages;
            if now != last.0 {
                last = (now, std::time::Instant::now());
            }
        }
        assert!(
            last.1.elapsed() >= Duration::from_millis(300),
            "the flusher never stopped writing"
        );
        assert!(
            !cs.cache().dirty_pages().is_empty(),
            "the flusher wrote everything: it never met the full file system"
        );
        assert!(
            cs.store().device_errors().iter().all(Option::is_none),
            "a full file system failed the device for good: {:?}",
            cs.store().device_errors()
        );
        let mut b = vec![0u8; MIB as usize];
        cf.read_at(0, &mut b).unwrap();
        assert!(b == data[..MIB as usize]);
        std::fs::remove_file(&ballast).unwrap();
        cf.sync()
            .unwrap_or_else(|e| panic!("sync once space is back (flusher): {e}"));
        // Now sync itself meets it.
        leave(2);
        cf.write_at(8 * MIB, &data[8 * MIB as usize..]).unwrap();
        let e = cf.sync().unwrap_err();
        assert_eq!(e.errno(), Some(libc::ENOSPC), "{e}");
        assert!(cs.store().device_errors().iter().all(Option::is_none));
        std::fs::remove_file(&ballast).unwrap();
        cf.sync()
            .unwrap_or_else(|e| panic!("sync once space is back: {e}"));
    }
    let cs = CachedStore::new(Store::open(&[&root], opts).unwrap(), cache(64)).unwrap();
    let cf = cs.open_file("f").unwrap();
    let mut b = vec![0u8; len as usize];
    cf.read_at(0, &mut b).unwrap();
    assert!(
        b == data,
        "writes made while the file system was full were lost"
    );
}

/// A write still in flight when another thread's sync began is not covered
/// by that sync: if the next sync's fsync fails, the write may be gone, so
/// that failure sticks (the syncs after it fail) as for any write the
/// failed fsync should have covered.
#[test]
fn a_failed_fsync_after_a_write_that_outlived_anothers_sync_fails_later_syncs() {
    let tmp = TempDir::new("fsync-inflight");
    let roots = tmp.devices(1);
    let media = SimMedia::new();
    let sw = Arc::new(SimSwitches::default());
    sw.keep_synced.store(true, Ordering::Release);
    sw.fsync_errno.store(libc::ENOSPC, Ordering::Release);
    let store = sim_store(&roots, &media, &sw);
    let f = store.create("f", MIB, LayoutKind::Stripe).unwrap();
    f.sync().unwrap();
    let mut x = setcache::AlignedBuf::new(64 * 1024);
    x.fill(0xC3);
    // The write waits 3 s in the device; the sync that starts once the
    // device has taken it in does not.
    sw.stall_us.store(3_000_000, Ordering::Release);
    let before = sw.taken.load(Ordering::Acquire);
    std::thread::scope(|s| {
        let w = s.spawn(|| f.write_at(0, &x).unwrap());
        let t0 = std::time::Instant::now();
        while sw.taken.load(Ordering::Acquire) == before {
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "the write never reached the device"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        sw.stall_us.store(0, Ordering::Release);
        f.sync().unwrap();
        assert!(!w.is_finished(), "the write ended before the other sync");
        w.join().unwrap();
    });
    sw.fsync_failures.store(1, Ordering::Release);
    let first = f.sync().unwrap_err();
    assert_eq!(first.errno(), Some(libc::ENOSPC), "{first}");
    let e = f.sync().unwrap_err();
    assert!(matches!(e, Error::SyncLost { .. }), "{e}");
}

/// A store whose last handle goes while a page of it is held for good (a
/// guard leaked with `mem::forget`, so that nothing can let go of it) is
/// closed all the same: its drop's sync fails that file at once rather
/// than wait for ever, writes the other files, and gives the store back
/// for another cache.
#[test]
fn the_last_handles_drop_beside_a_leaked_guard_ends() {
    let tmp = TempDir::new("drop-leaked");
    let roots = tmp.devices(2);
    let store = Store::open(&roots, StoreOptions::default()).unwrap();
    let again = store.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let cs = CachedStore::new(store, cache(64)).unwrap();
        let f = cs.create("held", MIB, LayoutKind::Stripe).unwrap();
        let g = cs.create("free", MIB, LayoutKind::Stripe).unwrap();
        f.write_at(0, b"dirty").unwrap();
        g.write_at(8192, b"other").unwrap();
        std::mem::forget(f.page_mut(0).unwrap());
        drop((f, g, cs));
        tx.send(()).unwrap();
    });
    rx.recv_timeout(Duration::from_secs(60))
        .expect("the drop waited for a page nothing can let go of");
    let cs = CachedStore::new(again, cache(64)).expect("the store given back");
    let mut b = [0u8; 5];
    cs.open_file("free").unwrap().read_at(8192, &mut b).unwrap();
    assert_eq!(&b, b"other", "the other file written back");
}

/// The bytes at `at` of file `name`, read through a new store on `roots`
/// without a cache.
fn on_the_devices(roots: &[std::path::PathBuf], name: &str, at: u64, len: usize) -> Vec<u8> {
    let store = Store::open(roots, StoreOptions::default()).unwrap();
    let mut page = setcache::AlignedBuf::new(4096);
    let first = at / 4096 * 4096;
    store
        .open_file(name)
        .unwrap()
        .read_at(first, &mut page)
        .unwrap();
    page[(at - first) as usize..][..len].to_vec()
}

/// A store whose last handle is dropped with pages still dirty writes them
/// back and syncs them, whichever handle goes last (the store's, or a file's
/// written through after the store's went); `discard_at_close` gives them up.
/// One dirty page only: the flusher leaves a set with fewer than half its
/// pages dirty alone, so only the close can have written it.
#[test]
fn the_last_handles_drop_writes_dirty_pages_back() {
    let tmp = TempDir::new("drop-dirty");
    let roots = tmp.devices(2);
    let open = || {
        CachedStore::new(
            Store::open(&roots, StoreOptions::default()).unwrap(),
            cache(64),
        )
    };

    // The store's handle last.
    let cs = open().unwrap();
    let f = cs.create("a", MIB, LayoutKind::Stripe).unwrap();
    f.write_at(100, b"hello").unwrap();
    drop(f);
    drop(cs);
    assert_eq!(
        on_the_devices(&roots, "a", 100, 5),
        b"hello",
        "the store's drop"
    );

    // A file's handle last, written through after the store's drop.
    let cs = open().unwrap();
    let f = cs.create("b", MIB, LayoutKind::Stripe).unwrap();
    drop(cs);
    f.write_at(70_000, b"after").unwrap();
    drop(f);
    assert_eq!(
        on_the_devices(&roots, "b", 70_000, 5),
        b"after",
        "the file's drop"
    );

    // `close` reports what the sync met; here nothing.
    let cs = open().unwrap();
    let f = cs.create("c", MIB, LayoutKind::Stripe).unwrap();
    f.write_at(5, b"closed").unwrap();
    drop(f);
    cs.close().unwrap();
    assert_eq!(on_the_devices(&roots, "c", 5, 6), b"closed", "close");

    // Discarded: the page written is not.
    let cs = open().unwrap();
    let f = cs.open_file("a").unwrap();
    f.write_at(100, b"HELLO").unwrap();
    cs.discard_at_close();
    drop((f, cs));
    assert_eq!(
        on_the_devices(&roots, "a", 100, 5),
        b"hello",
        "a discarded store"
    );
}

/// A loss no handle accepted fails the drop's sync of its file before the
/// fsync; the drop prints it, accepts it (no handle is left to) and syncs
/// again, so that the pages written after the loss are made durable: a power
/// cut right after the drop finds no write that no fsync covered.
#[test]
fn the_last_handles_drop_syncs_the_pages_written_after_a_loss() {
    let tmp = TempDir::new("drop-after-loss");
    let roots = tmp.devices(1);
    let media = SimMedia::new();
    let (sw, cs, f) = a_file_with_a_loss(&roots, &media);
    let e = f.sync().unwrap_err();
    assert!(matches!(e, Error::SyncLost { .. }), "{e}");
    f.write_at(200 * 4096, b"after").unwrap();
    drop((f, cs));
    let cut = media.cut_power(7);
    assert_eq!(
        (cut.kept, cut.dropped, cut.torn),
        (0, 0, 0),
        "writes the drop's sync left without an fsync"
    );
    media.power_on();
    let cs = CachedStore::new(sim_store(&roots, &media, &sw), cache(64)).unwrap();
    let mut b = [0u8; 5];
    cs.open_file("f")
        .unwrap()
        .read_at(200 * 4096, &mut b)
        .unwrap();
    assert_eq!(&b, b"after");
}

/// A futures' worker that ends the store (the task it woke dropped the
/// store's handle) syncs it before that drop returns: the worker's own
/// handle on the shared state goes only once it has finished, on a thread no
/// one waits for, which the process may end first.
#[test]
fn a_store_dropped_by_a_woken_task_is_synced_before_the_drop_returns() {
    use std::future::Future;
    use std::sync::Mutex;
    use std::task::{Context, Wake, Waker};

    struct Ender {
        cs: Mutex<Option<CachedStore>>,
        raw: Store,
        tx: Mutex<Option<std::sync::mpsc::Sender<Vec<u8>>>>,
    }
    impl Wake for Ender {
        fn wake(self: Arc<Self>) {
            self.wake_by_ref();
        }
        fn wake_by_ref(self: &Arc<Self>) {
            let Some(cs) = self.cs.lock().unwrap().take() else {
                return;
            };
            drop(cs);
            // What the devices hold once the drop has returned.
            let mut page = setcache::AlignedBuf::new(4096);
            self.raw
                .open_file("w")
                .unwrap()
                .read_at(0, &mut page)
                .unwrap();
            if let Some(tx) = self.tx.lock().unwrap().take() {
                let _ = tx.send(page[100..105].to_vec());
            }
        }
    }

    let tmp = TempDir::new("drop-in-wake");
    let roots = tmp.devices(2);
    let store = Store::open(&roots, StoreOptions::default()).unwrap();
    let raw = store.clone();
    let cs = CachedStore::new(store, cache(64)).unwrap();
    let f = cs.create("w", MIB, LayoutKind::Stripe).unwrap();
    f.write_at(100, b"hello").unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let ender = Arc::new(Ender {
        cs: Mutex::new(Some(cs)),
        raw,
        tx: Mutex::new(Some(tx)),
    });
    let waker = Waker::from(ender.clone());
    {
        // A miss: the worker reads it, then wakes the task.
        let mut read = std::pin::pin!(f.read_at_async(16 * 4096, vec![0; 4096]));
        let mut cx = Context::from_waker(&waker);
        assert!(read.as_mut().poll(&mut cx).is_pending(), "a miss at once");
        let got = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("the worker woke the task");
        assert_eq!(got, b"hello", "the page written when the drop returned");
    }
    drop(f);
}

/// The last handle's drop writes back and syncs every dirty page of a long
/// run: its sync, which does not wait for pages others hold, took pages that
/// its own write-backs of their neighbours held when it looked, and that a
/// poll then ended, for pages in use, and gave up (`Busy`) before the fsync.
/// A power cut right after the drop finds no write that no fsync covered.
#[test]
fn the_last_handles_drop_syncs_a_long_run_of_dirty_pages() {
    let len = 8 << 20;
    for round in 0..8u64 {
        let tmp = TempDir::new("drop-long-run");
        let roots = tmp.devices(2);
        let media = SimMedia::new();
        let sw = Arc::new(SimSwitches::default());
        sw.keep_synced.store(true, Ordering::Release);
        let cs = CachedStore::new(
            sim_store(&roots, &media, &sw),
            CacheOptions {
                size: 64 << 20,
                ..CacheOptions::default()
            },
        )
        .unwrap();
        let f = cs.create("run", len as u64, LayoutKind::Stripe).unwrap();
        f.write_at(0, &pattern(round, 0, len)).unwrap();
        drop((f, cs));
        let cut = media.cut_power(round);
        assert_eq!(
            (cut.kept, cut.dropped, cut.torn),
            (0, 0, 0),
            "round {round}: writes the drop's sync left without an fsync"
        );
    }
}

/// A child made by `fork` while the parent's queue has reads in flight, that
/// drops its copy of the queue: it neither waits for the parent's reads nor
/// takes their completions from the rings the two processes share, so it ends
/// at once and the parent's queue finishes every read with the right bytes.
#[test]
fn a_forked_child_dropping_a_queue_leaves_the_parents_reads_to_it() {
    let tmp = TempDir::new("fork-drop-queue");
    let roots = tmp.devices(2);
    let store = Store::open(&roots, StoreOptions::default()).unwrap();
    let len = 4 * MIB;
    {
        let f = store.create("q", len, LayoutKind::Stripe).unwrap();
        let mut b = AlignedBuf::new(len as usize);
        b.copy_from_slice(&pattern(7, 0, len as usize));
        f.write_at(0, &b).unwrap();
        f.sync().unwrap();
    }
    let cs = CachedStore::new(store, cache(256)).unwrap();
    let f = cs.open_file("q").unwrap();
    let mut q = cs.queue(32);
    // Some may be read at once, on this thread, all of them on a loaded
    // machine that let the thread go in its submit: then 32 more pages,
    // not read before, are asked for, until some are in flight.
    let mut pages: Vec<u64> = Vec::new();
    for round in 0..32u64 {
        let more: Vec<u64> = (0..32u64).map(|i| (round * 32 + i) * 31 % 1024).collect();
        q.submit(
            more.iter()
                .map(|&p| CachedRequest::tagged(OpKind::Read, &f, p * 4096, vec![0; 4096], p))
                .collect(),
        );
        pages.extend(more);
        if q.outstanding() >= 1 {
            break;
        }
    }
    assert!(q.outstanding() >= 1, "{}", q.outstanding());
    // SAFETY: the child only drops its copy of the queue, then `_exit`s.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
    if pid == 0 {
        drop(q);
        // SAFETY: ends the child at once.
        unsafe { libc::_exit(0) };
    }
    common::child_ends_well(pid, "the child's drop of the queue");
    let t0 = std::time::Instant::now();
    while q.outstanding() > 0 {
        q.poll();
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "{} of the parent's reads never finished after the child's drop",
            q.outstanding()
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut done = Vec::new();
    q.take_completions(&mut done);
    assert_eq!(done.len(), pages.len());
    for (p, c) in done {
        assert!(c.result.is_ok(), "page {p}: {:?}", c.result);
        assert!(c.buf == pattern(7, p * 4096, 4096), "page {p}: wrong bytes");
    }
}

/// As above when the last handle the child drops is a file's (the parent
/// dropped its `CachedStore` before the fork, and the file kept the store):
/// the child neither finishes the parent's metadata steps nor stops the
/// parent's engines, and the parent's file goes on.
#[test]
fn a_forked_child_dropping_the_last_file_handle_ends_at_once() {
    let tmp = TempDir::new("fork-drop-file");
    let roots = tmp.devices(2);
    let cs = CachedStore::new(
        Store::open(&roots, StoreOptions::default()).unwrap(),
        cache(64),
    )
    .unwrap();
    let f = cs.create("p", MIB, LayoutKind::Stripe).unwrap();
    f.write_at(0, b"parent").unwrap();
    drop(cs);
    // SAFETY: the child only drops its copy of the file, then `_exit`s.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
    if pid == 0 {
        drop(f);
        // SAFETY: ends the child at once.
        unsafe { libc::_exit(0) };
    }
    common::child_ends_well(pid, "the child's drop of the file");
    // The parent's engines still run: a miss is read and a write made durable.
    f.write_at(MIB - 6, b"later!").unwrap();
    f.sync().unwrap();
    let mut b = [0u8; 6];
    f.read_at(0, &mut b).unwrap();
    assert_eq!(&b, b"parent");
    f.read_at(MIB - 6, &mut b).unwrap();
    assert_eq!(&b, b"later!");
}

/// A child made by `fork` that drops its copy of the store's last handle
/// neither stops nor joins the parent's threads, nor drops the store (whose
/// drop would finish the parent's metadata steps and join its engine
/// threads): it ends at once, and the parent's store goes on.
#[test]
fn a_forked_child_dropping_the_store_ends_at_once() {
    let tmp = TempDir::new("fork-drop");
    let roots = tmp.devices(2);
    let cs = CachedStore::new(
        Store::open(&roots, StoreOptions::default()).unwrap(),
        cache(64),
    )
    .unwrap();
    let f = cs.create("p", MIB, LayoutKind::Stripe).unwrap();
    f.write_at(0, b"parent").unwrap();
    drop(f);
    // SAFETY: the child only drops its copy of the store, then `_exit`s.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
    if pid == 0 {
        drop(cs);
        // SAFETY: ends the child at once.
        unsafe { libc::_exit(0) };
    }
    common::child_ends_well(pid, "the child's drop of the store");
    let f = cs.open_file("p").unwrap();
    let mut b = [0u8; 6];
    f.read_at(0, &mut b).unwrap();
    assert_eq!(&b, b"parent");
    f.sync().unwrap();
}

/// The devices of the store a child run of
/// `a_store_left_open_is_synced_at_the_programs_exit` writes to.
const EXIT_CHILD: &str = "SETCACHE_TEST_EXIT_CHILD";

/// A program that ends with a store still open (leaked, as one kept in a
/// static is never dropped) keeps what it wrote through it, as on a local
/// file system: the child run of this test writes through a store it
/// leaks and ends with `std::process::exit`, which runs no destructor, and
/// the data and the file's growth are on the devices after it. A page the
/// child's other thread holds for good is not waited for (the child ends).
#[test]
fn a_store_left_open_is_synced_at_the_programs_exit() {
    if let Ok(dir) = std::env::var(EXIT_CHILD) {
        let roots: Vec<std::path::PathBuf> = std::env::split_paths(&dir).collect();
        let store = Store::open(&roots, StoreOptions::default()).unwrap();
        let cs: &'static CachedStore =
            Box::leak(Box::new(CachedStore::new(store, cache(64)).unwrap()));
        let f = cs.create("kept", 0, LayoutKind::Stripe).unwrap();
        f.write_extending(0, b"written before the exit").unwrap();
        let held = cs.create("held", 4096, LayoutKind::Stripe).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut g = held.page_mut(0).unwrap();
            g[..5].copy_from_slice(b"dirty");
            tx.send(()).unwrap();
            // Held until the process ends.
            std::thread::park();
            drop(g);
        });
        rx.recv().unwrap();
        std::process::exit(0);
    }
    let tmp = TempDir::new("exit-sync");
    let roots = tmp.devices(2);
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_store_left_open_is_synced_at_the_programs_exit",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(EXIT_CHILD, std::env::join_paths(&roots).unwrap())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let t = std::time::Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if t.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("the child's exit waited 60 s for a page its other thread holds");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(status.success(), "the child failed: {err}");
    let store = Store::open(&roots, StoreOptions::default()).unwrap();
    let cs = CachedStore::new(store, cache(64)).unwrap();
    let f = cs.open_file("kept").unwrap();
    assert_eq!(f.len(), 23, "the growth was lost");
    let mut b = [0u8; 23];
    f.read_at(0, &mut b).unwrap();
    assert_eq!(&b, b"written before the exit");
}

/// A store's sync beside deletes of closed files succeeds: a file deleted
/// while the sync looked at its backing files is skipped as deleted, not
/// reported as a file whose data is not in the store (before, one sync in
/// some hundreds failed `BackingGone`: "was removed (it is linked in no
/// directory)", or "was replaced" when the name was made again).
#[test]
fn a_stores_sync_beside_deletes_of_closed_files_succeeds() {
    let tmp = TempDir::new("sync-delete");
    let cs = Arc::new(
        CachedStore::new(
            Store::open(&tmp.devices(2), StoreOptions::default()).unwrap(),
            cache(64),
        )
        .unwrap(),
    );
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let syncer = {
        let (cs, stop) = (cs.clone(), stop.clone());
        std::thread::spawn(move || {
            let (mut syncs, mut failed) = (0u64, Vec::new());
            while !stop.load(Ordering::Acquire) {
                if let Err(e) = cs.sync() {
                    failed.push(e.to_string());
                }
                syncs += 1;
            }
            (syncs, failed)
        })
    };
    let t0 = std::time::Instant::now();
    let mut rounds = 0u64;
    while rounds < 3000 && t0.elapsed() < Duration::from_secs(8) {
        // The same name again and again, and a new one each time.
        for name in ["same".to_string(), format!("new{rounds}")] {
            let f = cs.create(&name, 0, LayoutKind::Stripe).unwrap();
            f.write_extending(100, &[rounds as u8; 10_000]).unwrap();
            // Closed clean: the sync finds nothing to write, and looks at
            // the backing files as after an fsync.
            f.sync().unwrap();
            drop(f);
            cs.delete(&name).unwrap();
        }
        rounds += 1;
    }
    stop.store(true, Ordering::Release);
    let (syncs, failed) = syncer.join().unwrap();
    assert!(syncs > 0 && rounds > 100, "{syncs} syncs, {rounds} rounds");
    assert!(
        failed.is_empty(),
        "{} of {syncs} syncs beside {rounds} rounds of deletes failed, the first: {}",
        failed.len(),
        failed[0]
    );
    cs.sync().unwrap();
}

/// The devices of the store a child run of
/// `files_made_and_closed_one_by_one_never_run_out_of_descriptors` uses.
const FDS_CHILD: &str = "SETCACHE_TEST_FDS_CHILD";

/// A program under a small descriptor limit that makes, writes and closes
/// files one after another on a store of many devices never runs out of
/// descriptors: closed files kept open for a later open (one descriptor per
/// device each) are fewer than the limit allows, and an open or create that
/// meets the limit gives the idle ones back and tries again. Before, the
/// cache kept at least 16 closed files whatever the limit (16 of 8 devices
/// are 128 descriptors), and the creates failed with EMFILE.
#[test]
fn files_made_and_closed_one_by_one_never_run_out_of_descriptors() {
    if let Ok(dir) = std::env::var(FDS_CHILD) {
        let lim = libc::rlimit {
            rlim_cur: 96,
            rlim_max: 96,
        };
        // SAFETY: sets this child process's own descriptor limit.
        assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) }, 0);
        let roots: Vec<std::path::PathBuf> = std::env::split_paths(&dir).collect();
        let cs = CachedStore::new(
            Store::open(&roots, StoreOptions::default()).unwrap(),
            cache(64),
        )
        .unwrap();
        // Descriptors the program itself holds meanwhile: enough that the
        // idle files' meet the limit, and must be given back.
        let mine: Vec<std::fs::File> = (0..44)
            .map(|_| std::fs::File::open("/dev/null").unwrap())
            .collect();
        for i in 0..300u32 {
            let name = format!("f{i}");
            let f = cs
                .create(&name, 0, LayoutKind::Stripe)
                .unwrap_or_else(|e| panic!("create of file {i}: {e}"));
            f.write_extending(0, &i.to_le_bytes()).unwrap();
            drop(f);
            if i % 7 == 0 {
                // And an open of an older one now and then.
                let g = cs
                    .open_file(&format!("f{}", i / 2))
                    .unwrap_or_else(|e| panic!("open of file {}: {e}", i / 2));
                let mut b = [0u8; 4];
                g.read_at(0, &mut b).unwrap();
                assert_eq!(u32::from_le_bytes(b), i / 2);
            }
        }
        drop(mine);
        cs.close().unwrap();
        return;
    }
    let tmp = TempDir::new("fd-limit");
    let roots = tmp.devices(8);
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "files_made_and_closed_one_by_one_never_run_out_of_descriptors",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(FDS_CHILD, std::env::join_paths(&roots).unwrap())
        .stdout(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the child failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let cs = CachedStore::new(
        Store::open(&roots, StoreOptions::default()).unwrap(),
        cache(64),
    )
    .unwrap();
    for i in (0..300u32).step_by(37) {
        let f = cs.open_file(&format!("f{i}")).unwrap();
        let mut b = [0u8; 4];
        f.read_at(0, &mut b).unwrap();
        assert_eq!(u32::from_le_bytes(b), i);
    }
}

/// The devices of the store a child run of
/// `what_a_thread_appended_before_the_exit_is_kept` appends to.
const APPEND_CHILD: &str = "SETCACHE_TEST_APPEND_CHILD";

/// Bytes of one record of that test.
const RECORD: usize = 1000;

/// A program whose other thread is still appending records to a file when
/// the main thread calls `exit` keeps every record whose write returned
/// before the exit: the exit's sync meets pages that thread holds (each
/// while it copies into it), writes the others and the file's grown length,
/// and goes again for the rest. Before, the sync of that file failed `Busy`
/// at the first page held and left the growth's length unwritten: the file
/// came back at its old length, often empty. Small pages and a small cache,
/// so that the writer holds pages and evicts often.
#[test]
fn what_a_thread_appended_before_the_exit_is_kept() {
    let small = || CacheOptions {
        size: 16 * 512,
        page_size: 512,
        assoc: 4,
        policy: PolicyKind::Clock,
        ..CacheOptions::default()
    };
    let store_opts = || StoreOptions {
        page_size: 512,
        ..StoreOptions::default()
    };
    if let Ok(dir) = std::env::var(APPEND_CHILD) {
        let roots: Vec<std::path::PathBuf> = std::env::split_paths(&dir).collect();
        let store = Store::open(&roots, store_opts()).unwrap();
        let cs: &'static CachedStore =
            Box::leak(Box::new(CachedStore::new(store, small()).unwrap()));
        let f = cs.create("log", 0, LayoutKind::Stripe).unwrap();
        let done = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let d = done.clone();
        std::thread::spawn(move || {
            for k in 0u64.. {
                let rec = [(k % 251) as u8 + 1; RECORD];
                f.write_extending(k * RECORD as u64, &rec).unwrap();
                d.store(k + 1, Ordering::Release);
            }
        });
        std::thread::sleep(Duration::from_millis(200));
        let n = done.load(Ordering::Acquire);
        eprintln!("records returned before the exit: {n}");
        std::process::exit(0);
    }
    for round in 0..4 {
        let tmp = TempDir::new(&format!("exit-append{round}"));
        let roots = tmp.devices(1);
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "what_a_thread_appended_before_the_exit_is_kept",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(APPEND_CHILD, std::env::join_paths(&roots).unwrap())
            .stdout(std::process::Stdio::null())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "the child failed: {err}");
        let n: u64 = err
            .lines()
            .find_map(|l| l.strip_prefix("records returned before the exit: "))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or_else(|| panic!("no count from the child: {err}"));
        assert!(n > 0, "the child wrote nothing: {err}");
        let cs = CachedStore::new(Store::open(&roots, store_opts()).unwrap(), small()).unwrap();
        let f = cs.open_file("log").unwrap();
        assert!(
            f.len() >= n * RECORD as u64,
            "round {round}: {n} records returned before the exit, the file holds {} bytes \
             (the child said: {err})",
            f.len()
        );
        let mut b = vec![0u8; RECORD];
        for k in 0..n {
            f.read_at(k * RECORD as u64, &mut b).unwrap();
            assert!(
                b.iter().all(|&x| x == (k % 251) as u8 + 1),
                "round {round}: record {k} of {n} differs"
            );
        }
    }
}

/// Children made by `fork` while other threads open and close stores (and
/// so hold, a few steps at a time, the process's lists of the roots it
/// locked and of the stores it made) open stores of their own, write
/// through them and end by `exit` without closing them: none waits for
/// ever for a list a thread of its parent held at the fork, and each keeps
/// what it wrote (its exit syncs the store it noted). A stress form: the
/// unit tests of the two lists hold each one across the fork on purpose.
/// The stores' engine and flusher threads start and end all the while: the
/// standard library's lock of its threads' stack-guard records, which each
/// thread takes as it starts and as it ends, must not be held in a child by
/// one of them (without the crate's gate for its threads' starts and ends, a
/// child in one run of several of the whole file waited in its first engine
/// thread's start for good).
#[test]
fn children_forked_while_stores_open_and_close_open_their_own_and_keep_their_writes() {
    let tmp = TempDir::new("fork-lists");
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let busy: Vec<_> = (0..2)
        .map(|t| {
            let roots = vec![tmp.path().join(format!("busy{t}"))];
            std::fs::create_dir_all(&roots[0]).unwrap();
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut rounds = 0u64;
                while !stop.load(Ordering::Acquire) {
                    let s = Store::open(&roots, StoreOptions::default()).unwrap();
                    drop(CachedStore::new(s, cache(16)).unwrap());
                    rounds += 1;
                }
                rounds
            })
        })
        .collect();
    let t0 = std::time::Instant::now();
    let mut children = Vec::new();
    while children.len() < 120 && t0.elapsed() < Duration::from_secs(30) {
        let roots = vec![tmp.path().join(format!("child{}", children.len()))];
        std::fs::create_dir_all(&roots[0]).unwrap();
        // SAFETY: the child opens its own store, writes, and ends by `exit`.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
        if pid == 0 {
            let s = Store::open(&roots, StoreOptions::default()).unwrap();
            let cs = Box::leak(Box::new(CachedStore::new(s, cache(16)).unwrap()));
            let f = cs.create("f", 0, LayoutKind::Stripe).unwrap();
            f.write_extending(0, b"kept").unwrap();
            std::process::exit(0);
        }
        common::child_ends_well(pid, &format!("child {}", children.len()));
        children.push(roots);
    }
    stop.store(true, Ordering::Release);
    let rounds: u64 = busy.into_iter().map(|t| t.join().unwrap()).sum();
    assert!(rounds > 0);
    for (i, roots) in children.iter().enumerate() {
        let cs = CachedStore::new(
            Store::open(roots, StoreOptions::default()).unwrap(),
            cache(16),
        )
        .unwrap();
        let f = cs
            .open_file("f")
            .unwrap_or_else(|e| panic!("child {i} of {}: {e}", children.len()));
        let mut b = [0u8; 4];
        assert_eq!(
            f.len(),
            4,
            "child {i} of {}: its write was lost",
            children.len()
        );
        f.read_at(0, &mut b).unwrap();
        assert_eq!(&b, b"kept", "child {i}");
    }
}

/// The exit's sync of a store (`CachedStore::sync_at_exit`) beside another
/// thread's sync of one of its files waits for that sync to end instead of
/// failing `Busy` ("is being synced", which the exit handler printed as a
/// failure though that sync wrote the pages): on devices slow enough that
/// the other sync is still running when the exit's comes.
#[test]
fn the_exits_sync_beside_another_threads_sync_waits_for_it() {
    let tmp = TempDir::new("exit-beside-sync");
    let store = Store::open(&tmp.devices(2), common::sim_devices(20_000, 30_000)).unwrap();
    // No flusher: a page it wrote back at that moment would be `Busy` too.
    let cs = CachedStore::with_flusher(store, cache(256), None).unwrap();
    let f = cs.create("f", 0, LayoutKind::Stripe).unwrap();
    for round in 0..3u64 {
        // Dirty pages in many regions, so that the sync writes for a while.
        for p in 0..32u64 {
            f.write_extending(p * 64 * 1024, &[round as u8 + 1; 4096])
                .unwrap();
        }
        let (tx, rx) = std::sync::mpsc::channel();
        let g = f.clone();
        let other = std::thread::spawn(move || {
            tx.send(()).unwrap();
            g.sync()
        });
        rx.recv().unwrap();
        std::thread::sleep(Duration::from_millis(5));
        let r = cs.sync_at_exit();
        other.join().unwrap().unwrap();
        assert!(r.is_ok(), "round {round}: {r:?}");
    }
}

/// `is_allocated` tells the holes a growth left (on two devices), pages
/// written back as having their space, a range with any hole as not, an
/// empty range as whole, and a deleted file's look as an error.
#[test]
fn holes_are_told_until_their_pages_are_written_back() {
    let tmp = TempDir::new("holes");
    let cs = CachedStore::new(
        Store::open(&tmp.devices(2), StoreOptions::default()).unwrap(),
        cache(16),
    )
    .unwrap();
    let cf = cs.create("h", 0, LayoutKind::Stripe).unwrap();
    cf.set_len(4 * MIB).unwrap();
    assert!(
        !cf.is_allocated(0, 4 * MIB).unwrap(),
        "a grown file told whole"
    );
    assert!(
        cf.is_allocated(MIB, 0).unwrap(),
        "an empty range told a hole"
    );
    cf.write_at(MIB + 100, &[7; 8000]).unwrap();
    cf.sync().unwrap();
    assert!(cf.is_allocated(MIB + 100, 8000).unwrap());
    assert!(cf.is_allocated(MIB, 8192).unwrap());
    assert!(
        !cf.is_allocated(MIB, 8193).unwrap(),
        "the next page told whole"
    );
    assert!(!cf.is_allocated(0, 4096).unwrap());
    cf.write_at(0, &vec![9; 4 * MIB as usize]).unwrap();
    cf.sync().unwrap();
    assert!(
        cf.is_allocated(0, 4 * MIB).unwrap(),
        "a file written out told a hole"
    );
    let ro = cs.open_file_read_only("h").unwrap();
    assert!(ro.is_allocated(3 * MIB, 4096).unwrap());
    drop(ro);
    cs.delete("h").unwrap();
    assert!(cf.is_allocated(0, 4096).is_err(), "a deleted file's look");
}
