//! Crash points: every metadata operation is stopped at each of its steps in turn
//! (the step and all later ones fail, as if the process had died there), the store
//! is reopened, and the files must be as before the operation or as after it, whole.
//! The recovery is then itself stopped at each of its steps, and the next open must
//! still end in one of the two states.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::intent::{Intent, Op};
use super::{
    FSYNC_FD_CALLS, HEADERS_PAUSE, INTENT_FILE, NEW_SUFFIX, NO_PUNCH, Store, StoreOptions,
    TAIL_SECTOR_READ, crash_after, drop_as_if_dead, intent_no_space, open_raw, read_header,
};
use crate::error::Error;
use crate::storage::buf::AlignedBuf;
use crate::storage::io::EngineKind;
use crate::storage::layout::LayoutKind;

/// A directory of three device roots, removed on drop. On tmpfs when there is one:
/// a simulated crash loses nothing a real one would keep, and fsync is free there.
struct Dir(PathBuf);

impl Dir {
    fn new(tag: &str) -> Dir {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let shm = Path::new("/dev/shm");
        let base = if shm.is_dir() {
            shm.to_path_buf()
        } else {
            std::env::temp_dir()
        };
        let p = base.join(format!(
            "setcache-crash-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&p);
        for i in 0..3 {
            std::fs::create_dir_all(p.join(format!("dev{i}"))).unwrap();
        }
        Dir(p)
    }

    fn roots(&self) -> Vec<PathBuf> {
        (0..3).map(|i| self.0.join(format!("dev{i}"))).collect()
    }

    fn open(&self) -> crate::error::Result<Store> {
        let opts = StoreOptions {
            engine: EngineKind::Psync,
            psync_threads: 1,
            block_pages: 1,
            direct_io: false,
            ..StoreOptions::default()
        };
        Store::open(&self.roots(), opts)
    }

    /// Every file's length and bytes (the whole last sector), and whether a
    /// record or a half-made file is left over.
    fn state(&self) -> BTreeMap<String, (u64, Vec<u8>)> {
        let store = self.open().expect("open after a crash");
        let mut out = BTreeMap::new();
        for name in store.list().unwrap() {
            let f = store
                .open_file(&name)
                .unwrap_or_else(|e| panic!("{name} is listed but does not open: {e}"));
            let mut b = AlignedBuf::new(f.len().next_multiple_of(512) as usize);
            f.read_at(0, &mut b).unwrap();
            out.insert(name, (f.len(), b.to_vec()));
        }
        for r in self.roots() {
            for e in std::fs::read_dir(&r).unwrap().flatten() {
                let n = e.file_name().to_string_lossy().to_string();
                assert!(
                    n != INTENT_FILE && !n.ends_with(NEW_SUFFIX),
                    "{n} left in {}",
                    r.display()
                );
            }
        }
        out
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8 ^ seed | 1).collect()
}

/// Make a file of `len` bytes holding `pattern(seed)`, zeros past `len` in its
/// last sector.
fn make(store: &Store, name: &str, len: u64, seed: u8) {
    let f = store.create(name, len, LayoutKind::Rotated).unwrap();
    let mut b = AlignedBuf::new(len.next_multiple_of(512) as usize);
    b[..len as usize].copy_from_slice(&pattern(seed, len as usize));
    f.write_at(0, &b).unwrap();
    f.sync().unwrap();
}

fn is_simulated(e: &Error) -> bool {
    e.to_string().contains("simulated crash")
}

/// Runs `op` on a store made by `setup`, crashing at each step in turn, and checks
/// every crash (and every crash of the recovery after it) ends before or after.
fn every_crash_point(tag: &str, setup: impl Fn(&Store), op: impl Fn(&Store) -> crate::Result<()>) {
    let fresh = || {
        let d = Dir::new(tag);
        setup(&d.open().unwrap());
        d
    };
    // A store whose operation crashed at step `k`, or None if it needs fewer steps.
    let crashed = |k: u32| {
        let d = fresh();
        let store = d.open().unwrap();
        crash_after(Some(k));
        let r = op(&store);
        crash_after(None);
        drop_as_if_dead(store);
        match r {
            Ok(()) => (d, false),
            Err(e) => {
                assert!(is_simulated(&e), "{tag}: step {k}: {e}");
                (d, true)
            }
        }
    };
    // The states before and after, from runs without a crash.
    let d = fresh();
    let before = d.state();
    op(&d.open().unwrap()).unwrap();
    let after = d.state();
    assert_ne!(before, after, "{tag}: the operation changes nothing");
    let mut ended = (0, 0);
    for k in 0.. {
        let (d, crashed_op) = crashed(k);
        if !crashed_op {
            assert_eq!(d.state(), after, "{tag}: finished without a crash");
            assert!(
                ended.0 > 0 && ended.1 > 0,
                "{tag}: some crashes must end before and some after ({ended:?})"
            );
            return;
        }
        let s = d.state();
        assert!(
            s == before || s == after,
            "{tag}: crash at step {k}: neither before nor after: {s:?}"
        );
        let end = s == after;
        if end {
            ended.1 += 1;
        } else {
            ended.0 += 1;
        }
        // Crash the recovery at each of its steps too: the next open finishes it
        // the same way.
        for j in 0.. {
            let (d, _) = crashed(k);
            crash_after(Some(j));
            let opened = d.open();
            crash_after(None);
            let recovered = match opened {
                Ok(store) => {
                    drop(store);
                    true
                }
                Err(e) => {
                    assert!(is_simulated(&e), "{tag}: step {k}, recovery step {j}: {e}");
                    false
                }
            };
            let s = d.state();
            assert!(
                &s == if end { &after } else { &before },
                "{tag}: crash at step {k} then at recovery step {j}: {s:?}"
            );
            if recovered {
                break;
            }
        }
    }
}

#[test]
fn create_is_whole_or_absent() {
    every_crash_point(
        "create",
        |s| make(s, "a", 5000, 1),
        |s| s.create("c", 3001, LayoutKind::Hash).map(drop),
    );
}

#[test]
fn delete_is_whole_or_absent() {
    every_crash_point(
        "delete",
        |s| {
            make(s, "a", 5000, 1);
            make(s, "b", 70_000, 2);
        },
        |s| s.delete("b"),
    );
}

#[test]
fn rename_is_whole_or_absent() {
    every_crash_point(
        "rename",
        |s| {
            make(s, "a", 5000, 1);
            make(s, "b", 70_000, 2);
        },
        |s| s.rename("b", "c"),
    );
}

#[test]
fn shrink_is_whole_or_absent() {
    every_crash_point(
        "shrink",
        |s| make(s, "b", 70_000, 2),
        |s| s.open_file("b")?.set_len(9_000 + 7),
    );
}

#[test]
fn grow_after_shrink_is_whole_or_absent() {
    // The old bytes past the shrunk length must not come back with the growth.
    every_crash_point(
        "grow",
        |s| {
            make(s, "b", 70_000, 2);
            s.open_file("b").unwrap().set_len(3).unwrap();
        },
        |s| s.open_file("b")?.set_len(65_000),
    );
}

/// A lazy growth is durable only once a sync wrote the headers: a store
/// dropped before that (as a crash would leave it) opens the file at its old
/// length, with the bytes past it reading as zeros when it grows again; after
/// a sync it opens at the new length with the bytes written.
#[test]
fn a_lazy_growth_lasts_from_the_next_sync_on() {
    let d = Dir::new("grow");
    {
        let s = d.open().unwrap();
        let f = s.create("g", 1000, LayoutKind::Stripe).unwrap();
        f.grow_lazily(300_000).unwrap();
        assert_eq!(f.len(), 300_000);
        let mut b = AlignedBuf::new(4096);
        b.fill(7);
        f.write_at(200_704, &b).unwrap();
        // No sync: the headers still say 1000.
    }
    {
        let s = d.open().unwrap();
        let f = s.open_file("g").unwrap();
        assert_eq!(f.len(), 1000, "a growth never synced outlived the store");
        // Growing again (lazily or not) shows zeros, not the unsynced bytes.
        f.grow_lazily(300_000).unwrap();
        let mut b = AlignedBuf::new(4096);
        f.read_at(200_704, &mut b).unwrap();
        assert!(
            b.iter().all(|&x| x == 0),
            "bytes past the durable length came back"
        );
        b.fill(9);
        f.write_at(200_704, &b).unwrap();
        f.sync().unwrap();
    }
    let s = d.open().unwrap();
    let f = s.open_file("g").unwrap();
    assert_eq!(f.len(), 300_000);
    let mut b = AlignedBuf::new(4096);
    f.read_at(200_704, &mut b).unwrap();
    assert!(b.iter().all(|&x| x == 9));
}

/// A sync stopped at each step of writing a lazy growth's headers (the sizes
/// made durable, then one header per device): the store opens the file at
/// the old length or the new one, never refuses it, and the bytes inside
/// the old length are intact.
#[test]
fn a_lazy_growth_stopped_at_any_step_of_its_headers_opens() {
    // Which steps crashed, and the lengths the file opened at.
    let mut crashed = Vec::new();
    let mut lengths = Vec::new();
    for k in 0..8 {
        let d = Dir::new("grow-crash");
        {
            let s = d.open().unwrap();
            let f = s.create("g", 4096, LayoutKind::Stripe).unwrap();
            let mut b = AlignedBuf::new(4096);
            b.fill(3);
            f.write_at(0, &b).unwrap();
            f.sync().unwrap();
            f.grow_lazily(1_000_000).unwrap();
            crash_after(Some(k));
            let r = f.sync();
            crash_after(None);
            if let Err(e) = &r {
                assert!(is_simulated(e), "step {k}: {e}");
            }
            crashed.push(r.is_err());
        }
        let s = d.open().unwrap();
        let f = s.open_file("g").unwrap_or_else(|e| panic!("step {k}: {e}"));
        assert!(
            f.len() == 4096 || f.len() == 1_000_000,
            "step {k}: length {}",
            f.len()
        );
        lengths.push(f.len());
        let mut b = AlignedBuf::new(4096);
        f.read_at(0, &mut b).unwrap();
        assert!(b.iter().all(|&x| x == 3), "step {k}: the old bytes changed");
    }
    // The steps cover the whole sync: the first ones stop it (at the old
    // length), the last ones come after its end (it succeeds, at the new).
    let stopped = crashed.iter().take_while(|&&c| c).count();
    assert!(
        stopped >= 2 && crashed[stopped..].iter().all(|&c| !c) && stopped < crashed.len(),
        "{crashed:?}"
    );
    assert_eq!(lengths[0], 4096, "{lengths:?}");
    assert!(
        lengths[stopped..].iter().all(|&l| l == 1_000_000),
        "{lengths:?}"
    );
}

/// A sync that comes while another thread writes the headers a lazy growth
/// left behind returns only once they are written: else its caller, told
/// that bytes past the old length are durable, could lose them to a crash
/// before the other thread writes the headers (the file comes back at the
/// old length).
#[test]
fn a_sync_during_anothers_header_write_waits_for_the_headers() {
    let d = Dir::new("stale-headers");
    let s = d.open().unwrap();
    let f = s.create("g", 4096, LayoutKind::Stripe).unwrap();
    f.grow_lazily(1 << 20).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    HEADERS_PAUSE.arm(&*f.inner as *const _ as usize, tx);
    std::thread::scope(|sc| {
        let a = sc.spawn(|| f.sync());
        rx.recv().unwrap();
        // Thread A is writing the headers: this sync must not return before
        // they are, whatever it finds.
        f.sync().unwrap();
        for (i, root) in d.roots().iter().enumerate() {
            let bytes = std::fs::read(root.join("g.scf")).unwrap();
            let h = crate::storage::header::Header::decode(&bytes[..4096])
                .unwrap()
                .0;
            assert_eq!(
                h.len,
                1 << 20,
                "device {i}: the header still has the old length"
            );
        }
        a.join().unwrap().unwrap();
    });
}

/// An operation whose intent record was written whole but which failed
/// before it began, and whose record could not be withdrawn then, is not
/// carried out later: the next metadata operation withdraws the record, or
/// closing the store does, so that the next open finds none to replay.
#[test]
fn a_failed_operations_record_that_could_not_be_withdrawn_is_withdrawn_next() {
    let d = Dir::new("withdraw");
    let s = d.open().unwrap();
    let f = s.create("keep", 4096, LayoutKind::Stripe).unwrap();
    let mut b = AlignedBuf::new(4096);
    b.fill(7);
    f.write_at(0, &b).unwrap();
    f.sync().unwrap();
    drop(f);
    // The record is written, its fsync never comes, and the withdrawal fails
    // as well.
    crash_after(Some(2));
    assert!(s.delete("keep").is_err());
    crash_after(None);
    assert!(
        d.roots()[0].join(INTENT_FILE).exists(),
        "the test needs a record left"
    );
    // No other operation comes: closing the store withdraws it.
    drop(s);
    let s = d.open().unwrap();
    let f = s
        .open_file("keep")
        .expect("the failed delete was carried out at open");
    let mut back = AlignedBuf::new(4096);
    f.read_at(0, &mut back).unwrap();
    assert!(back.iter().all(|&x| x == 7));
}

/// A replace whose renames are done but whose end fails (a directory fsync,
/// the record's removal) is finished again by the next metadata operation;
/// that second pass must keep the moved file's open handle as the store's
/// file of the new name (else a later open makes a second handle of it,
/// whose length and name go their own way).
#[test]
fn a_replace_finished_again_keeps_the_moved_files_handle() {
    let mut finished_again = 0;
    for k in 0..40 {
        let d = Dir::new("replace-again");
        let s = d.open().unwrap();
        let a = s.create("a", 4096, LayoutKind::Stripe).unwrap();
        drop(s.create("b", 4096, LayoutKind::Stripe).unwrap());
        crash_after(Some(k));
        let r = s.replace("a", "b");
        crash_after(None);
        if r.is_ok() {
            break;
        }
        // The next operation finishes it (or it never began).
        s.list().unwrap();
        if a.name() == "b" {
            finished_again += 1;
            let b = s.open_file("b").unwrap();
            assert!(
                std::sync::Arc::ptr_eq(&a.inner, &b.inner),
                "step {k}: open_file(\"b\") made a second handle of the moved file"
            );
        }
    }
    assert!(
        finished_again > 0,
        "no step left the replace to be finished again"
    );
}

/// A metadata path's fsync of a backing file (a `set_len`'s, a lazy
/// growth's headers') that fails after writes to the file took the kernel's
/// one report of what a failed write-back lost, in buffered mode: the file's
/// next `sync` must not pass as if nothing had. An error that can pass
/// (ENOSPC) makes later syncs fail `SyncLost`; one the device does not
/// survive (EIO) fails the device. A file not written since its last sync
/// began keeps syncing.
#[test]
fn a_failed_fsync_of_a_metadata_step_fails_the_files_later_syncs() {
    use super::FSYNC_FD_ERRNO;
    let d = Dir::new("meta-fsync");
    let s = d.open().unwrap();
    make(&s, "a", 8192, 1);
    make(&s, "b", 8192, 2);
    make(&s, "c", 8192, 3);
    let mut b = AlignedBuf::new(4096);
    b.fill(5);
    // A `set_len` after a write: ENOSPC.
    let a = s.open_file("a").unwrap();
    a.write_at(0, &b).unwrap();
    FSYNC_FD_ERRNO.set(libc::ENOSPC);
    let e = a.set_len(16384).unwrap_err();
    FSYNC_FD_ERRNO.set(0);
    assert!(e.to_string().contains("set length"), "{e}");
    let e = a.sync().unwrap_err();
    assert!(
        matches!(e, Error::SyncLost { .. }),
        "after the failed set_len: {e}"
    );
    // A lazy growth's headers after a write: EIO fails the device.
    let bf = s.open_file("b").unwrap();
    bf.grow_lazily(20_000).unwrap();
    bf.write_at(4096, &b).unwrap();
    FSYNC_FD_ERRNO.set(libc::EIO);
    let e = bf.sync().unwrap_err();
    FSYNC_FD_ERRNO.set(0);
    assert!(e.to_string().contains("sync the size"), "{e}");
    let e = bf.sync().unwrap_err();
    assert!(
        matches!(e, Error::DeviceFailed { .. }),
        "after the failed header sync: {e}"
    );
    drop((a, bf));
    drop(s);
    // Nothing written since the last sync: a failed `set_len` fsync costs
    // nothing, and later syncs pass.
    let s = d.open().unwrap();
    let c = s.open_file("c").unwrap();
    FSYNC_FD_ERRNO.set(libc::ENOSPC);
    assert!(c.set_len(16384).is_err());
    FSYNC_FD_ERRNO.set(0);
    c.sync().unwrap();
}

/// A growth stopped part-way whose rollback fails too (every step from some
/// point on fails, and the process lives on) was reported failed: the next
/// metadata operation undoes it rather than finish it. Stopped at each step
/// in turn; the file keeps its old length and bytes wherever the growth
/// failed, and has the new length where it succeeded. (A store closed before
/// that is as after a crash: see `grow_after_shrink_is_whole_or_absent`.)
#[test]
fn a_growth_neither_finished_nor_rolled_back_is_undone_next() {
    let (old, new) = (3 * 512 + 100, 40 * 512);
    let mut failed = 0;
    for k in 0..40 {
        let d = Dir::new("undo-growth");
        let s = d.open().unwrap();
        make(&s, "g", old, 5);
        let f = s.open_file("g").unwrap();
        crash_after(Some(k));
        let r = f.set_len(new);
        crash_after(None);
        if let Err(e) = &r {
            assert!(is_simulated(e), "step {k}: {e}");
            failed += 1;
        }
        let want = if r.is_ok() { new } else { old };
        s.create("other", 512, LayoutKind::Stripe)
            .unwrap_or_else(|e| panic!("step {k}: the next operation: {e}"));
        assert_eq!(f.len(), want, "step {k}: after the next operation");
        drop((f, s));
        let st = d.state();
        let (len, bytes) = &st["g"];
        assert_eq!(*len, want, "step {k}: after reopening");
        assert_eq!(
            &bytes[..old as usize],
            &pattern(5, old as usize)[..],
            "step {k}"
        );
        assert!(bytes[old as usize..].iter().all(|&x| x == 0), "step {k}");
        if r.is_ok() {
            break;
        }
    }
    assert!(failed > 4, "only {failed} growths failed");
}

/// A device 0 too full for an intent record refused every delete, the one
/// operation that makes room. A delete goes on without its record now:
/// stopped at any step, the store opens, the other file is whole, and the
/// deleted one is gone, or whole, or listed and opening as damaged, and goes
/// with a second delete. Other operations still need their record.
#[test]
fn a_device_too_full_for_an_intent_record_still_deletes() {
    for k in 0.. {
        let d = Dir::new("nospace");
        let s = d.open().unwrap();
        make(&s, "a", 5000, 1);
        make(&s, "b", 70_000, 2);
        intent_no_space(true);
        crash_after(Some(k));
        let r = s.delete("b");
        crash_after(None);
        let renamed = s.rename("a", "c");
        intent_no_space(false);
        assert!(renamed.is_err(), "a rename went on without its record");
        drop(s);
        let s = d.open().expect("open after the delete");
        let whole = pattern(1, 5000);
        let mut b = AlignedBuf::new(5120);
        s.open_file("a").unwrap().read_at(0, &mut b).unwrap();
        assert_eq!(&b[..5000], &whole[..], "step {k}: the other file changed");
        // What is left of b is listed, so that it can be deleted again.
        let listed = s.list().unwrap().iter().any(|n| n == "b");
        let pieces = d.roots().iter().any(|r| r.join("b.scf").exists());
        assert_eq!(
            listed, pieces,
            "step {k}: pieces of b the store does not list"
        );
        match s.open_file("b") {
            Err(Error::FileNotFound(_)) => {}
            Ok(f) => assert_eq!(f.len(), 70_000, "step {k}: b is not whole"),
            Err(Error::BadHeader { .. }) => s.delete("b").unwrap(),
            Err(e) => panic!("step {k}: b: {e}"),
        }
        drop(s);
        if let Err(e) = r {
            assert!(is_simulated(&e), "step {k}: {e}");
            continue;
        }
        // The run without a crash: b is gone from every device.
        for root in d.roots() {
            assert!(
                !root.join("b.scf").exists(),
                "a piece of b in {}",
                root.display()
            );
        }
        assert_eq!(d.state().keys().collect::<Vec<_>>(), ["a"]);
        assert!(k > 1, "the delete took {k} steps");
        break;
    }
}

/// A device 0 too full for an intent record refused a cut too, though it
/// makes room (a program rolling back a write that found the devices full
/// cuts its file back, and was refused, so that its file kept the space and
/// it could not open it again). A cut goes on without its record now:
/// stopped at any step, the file opens at its old length, whole, or at the
/// new one with the bytes below it, and a growth then reads zeros past it.
#[test]
fn a_device_too_full_for_an_intent_record_still_cuts() {
    for k in 0.. {
        let d = Dir::new("nospace-cut");
        let s = d.open().unwrap();
        make(&s, "a", 5000, 1);
        make(&s, "b", 70_000, 2);
        let f = s.open_file("b").unwrap();
        intent_no_space(true);
        crash_after(Some(k));
        let r = f.set_len(30_001);
        crash_after(None);
        if r.is_ok() {
            let grown = f.set_len(100_000);
            assert!(grown.is_err(), "a growth went on without its record");
        }
        intent_no_space(false);
        drop(f);
        drop_as_if_dead(s);
        let s = d.open().expect("open after the cut");
        let mut b = AlignedBuf::new(5120);
        s.open_file("a").unwrap().read_at(0, &mut b).unwrap();
        assert_eq!(&b[..5000], &pattern(1, 5000)[..], "step {k}: a changed");
        let f = s.open_file("b").expect("b opens");
        let whole = pattern(2, 70_000);
        let len = f.len();
        assert!(len == 70_000 || len == 30_001, "step {k}: b is {len} bytes");
        if len == 30_001 {
            f.set_len(70_000).unwrap();
        }
        let mut b = AlignedBuf::new(70_144);
        f.read_at(0, &mut b).unwrap();
        assert_eq!(&b[..30_001], &whole[..30_001], "step {k}: below the cut");
        if len == 70_000 {
            assert_eq!(&b[..70_000], &whole[..], "step {k}: b not whole");
        } else {
            assert!(
                b[30_001..70_000].iter().all(|&x| x == 0),
                "step {k}: cut bytes came back"
            );
        }
        drop((f, s));
        if let Err(e) = r {
            assert!(is_simulated(&e), "step {k}: {e}");
            continue;
        }
        assert!(k > 3, "the cut took {k} steps");
        break;
    }
}

/// On a file system that cannot punch holes, a growth clears the rest of the
/// sector the old end lies in by reading it and writing it back: a write of
/// that sector's bytes below the end, landing between the two, was undone.
/// The sector is now written only when its tail holds something; a tail that
/// does is still cleared.
#[test]
fn a_growth_without_hole_punching_keeps_a_write_to_its_end_sector() {
    let d = Dir::new("nopunch");
    let s = d.open().unwrap();
    let f = s.create("g", 1000, LayoutKind::Stripe).unwrap();
    let sector = |fill: u8, tail: u8| {
        let mut b = AlignedBuf::new(512);
        b[..1000 - 512].fill(fill);
        b[1000 - 512..].fill(tail);
        b
    };
    f.write_at(512, &sector(1, 0)).unwrap();
    // Between the growth's read of the sector and its decision, a write of
    // the sector's bytes below the end.
    let g = f.clone();
    TAIL_SECTOR_READ.arm(
        (),
        Box::new(move || g.write_at(512, &sector(2, 0)).unwrap()),
    );
    NO_PUNCH.set(true);
    let r = f.grow_lazily(100_000);
    NO_PUNCH.set(false);
    r.unwrap();
    let mut b = AlignedBuf::new(512);
    f.read_at(512, &mut b).unwrap();
    assert!(
        b[..1000 - 512].iter().all(|&x| x == 2),
        "the write landing inside the growth was undone"
    );
    assert!(b[1000 - 512..].iter().all(|&x| x == 0));
    // A tail that holds bytes is cleared, without holes as with them.
    f.set_len(1000).unwrap();
    f.write_at(512, &sector(3, 9)).unwrap();
    NO_PUNCH.set(true);
    let r = f.grow_lazily(100_000);
    NO_PUNCH.set(false);
    r.unwrap();
    f.read_at(512, &mut b).unwrap();
    assert!(b[..1000 - 512].iter().all(|&x| x == 3));
    assert!(
        b[1000 - 512..].iter().all(|&x| x == 0),
        "bytes past the old end came back"
    );
}

/// A logged length change whose geometry disagrees with the file it names
/// (a block size twice the file's, as damage its checksum missed could
/// leave) is refused at open, with the record kept and the file untouched;
/// the same record with the file's own geometry is finished.
#[test]
fn a_length_change_logged_with_another_geometry_is_refused() {
    let d = Dir::new("geometry");
    let s = d.open().unwrap();
    s.create("f", 1 << 20, LayoutKind::Stripe).unwrap();
    drop(s);
    let piece = d.roots()[0].join("f.scf");
    let fd = open_raw(&piece, libc::O_RDONLY).unwrap();
    let (h, _) = read_header(&fd).unwrap().unwrap();
    drop(fd);
    let record = |block_bytes: u64| Intent {
        devices: 3,
        op: Op::SetLen {
            name: "f".into(),
            uid: h.file_uid,
            layout: h.layout,
            block_bytes,
            old_len: 1 << 20,
            new_len: 2 << 20,
        },
    };
    let at = d.roots()[0].join(INTENT_FILE);
    std::fs::write(&at, record(h.block_bytes * 2).encode()).unwrap();
    let e = d.open().unwrap_err();
    assert!(matches!(e, Error::Recovery { .. }), "{e}");
    assert!(e.to_string().contains("logged length change says"), "{e}");
    assert!(at.exists(), "the refused record was removed");
    for (i, root) in d.roots().iter().enumerate() {
        let fd = open_raw(&root.join("f.scf"), libc::O_RDONLY).unwrap();
        let (g, _) = read_header(&fd).unwrap().unwrap();
        assert_eq!(
            (g.block_bytes, g.len),
            (h.block_bytes, 1 << 20),
            "device {i}'s header changed"
        );
    }
    std::fs::write(&at, record(h.block_bytes).encode()).unwrap();
    let s = d.open().unwrap();
    assert_eq!(s.info("f").unwrap().len, 2 << 20);
    assert!(!at.exists());
}

/// A create that fails after its record was unlinked (the directory's sync
/// failing) is left to the next operation to undo; a store closed before
/// one kept the file, though the caller was told the create failed (the
/// next open found no record to roll back). The close now undoes it.
#[test]
fn a_create_failed_after_its_record_went_is_undone_at_close() {
    for k in 0.. {
        let d = Dir::new("create-gone");
        let s = d.open().unwrap();
        crash_after(Some(k));
        let r = s.create("c", 3001, LayoutKind::Stripe).map(drop);
        crash_after(None);
        assert!(r.is_err(), "no step failed with the record gone");
        // The record gone, the file's pieces made.
        let gone = !d.roots()[0].join(INTENT_FILE).exists() && d.roots()[0].join("c.scf").exists();
        drop(s);
        if !gone {
            continue;
        }
        let s = d.open().unwrap();
        assert!(
            !s.list().unwrap().iter().any(|n| n == "c"),
            "the create that failed (step {k}) is there after a close and an open"
        );
        return;
    }
}

/// A lazy growth clears what lies past the old end and fsyncs it once per
/// backing file opened (a crash may have left bytes there), not at every
/// growth: appends growing a file again and again made an fsync (and a hole
/// punched) per device each time. A write of the last sector whole with
/// bytes past the end makes the next growth clear them again.
#[test]
fn lazy_growths_clear_past_the_end_once_and_after_a_write_there() {
    let d = Dir::new("tailclear");
    let s = d.open().unwrap();
    let f = s.create("g", 1000, LayoutKind::Stripe).unwrap();
    let fsyncs = |len: u64| {
        let before = FSYNC_FD_CALLS.get();
        f.grow_lazily(len).unwrap();
        FSYNC_FD_CALLS.get() - before
    };
    assert!(fsyncs(1100) > 0, "the first growth cleared nothing");
    for k in 1..20u64 {
        assert_eq!(fsyncs(1100 + 100 * k), 0, "growth {k} made fsyncs");
    }
    // The last sector written whole, with bytes past the end (3000).
    let mut b = AlignedBuf::new(512);
    b.fill(7);
    f.write_at(2560, &b).unwrap();
    f.grow_lazily(4000).unwrap();
    f.read_at(2560, &mut b).unwrap();
    assert!(b[..3000 - 2560].iter().all(|&x| x == 7));
    assert!(
        b[3000 - 2560..].iter().all(|&x| x == 0),
        "bytes written past the end came back with the growth"
    );
}

/// A store on simulated devices under `d` whose failed fsyncs (`ENOSPC`)
/// drop the file's writes since its last good one, as the kernel may.
fn sim_open(d: &Dir) -> (Store, std::sync::Arc<crate::storage::io::SimSwitches>) {
    use crate::storage::io::{SimConfig, SimMedia, SimSwitches};
    use std::sync::atomic::Ordering;
    let sw = std::sync::Arc::new(SimSwitches::default());
    sw.keep_synced.store(true, Ordering::Release);
    sw.fsync_errno.store(libc::ENOSPC, Ordering::Release);
    let opts = StoreOptions {
        engine: EngineKind::Sim(SimConfig {
            media: SimMedia::new(),
            switches: sw.clone(),
            ..SimConfig::default()
        }),
        block_pages: 1,
        ..StoreOptions::default()
    };
    (Store::open(&d.roots(), opts).unwrap(), sw)
}

/// Pages 0 and 1 of `f` (on two devices), each byte of each page `v`.
fn write_two(f: &crate::storage::file::File, v: u8) {
    let mut b = AlignedBuf::new(4096);
    b.fill(v);
    f.write_at(0, &b).unwrap();
    f.write_at(4096, &b).unwrap();
}

/// The first bytes of pages 0 and 1 of `f`.
fn read_two(f: &crate::storage::file::File) -> [u8; 2] {
    let mut b = AlignedBuf::new(8192);
    f.read_at(0, &mut b).unwrap();
    [b[0], b[4096]]
}

/// Two syncs of one file at once, through two handles: the first's fsync
/// fails (and the kernel, here the simulation, drops the writes it was to
/// cover, the second's among them) and takes the one report of it; the
/// second's fsync then passes. The second must not return `Ok` for writes
/// that are gone: it waits for the first's failure to be counted and fails
/// with the loss.
#[test]
fn a_sync_beside_anothers_failed_fsync_does_not_pass() {
    use std::sync::atomic::Ordering;
    let d = Dir::new("sync-beside");
    let (s, sw) = sim_open(&d);
    let f = s.create("f", 8192, LayoutKind::Stripe).unwrap();
    let g = f.clone();
    write_two(&f, 1);
    f.sync().unwrap();
    write_two(&g, 2);
    sw.fsync_failures.store(1, Ordering::Release);
    let (paused_tx, paused_rx) = std::sync::mpsc::channel::<()>();
    crate::storage::file::FAILED_BEFORE_COUNTED.arm(
        std::sync::Arc::as_ptr(&f.inner) as usize,
        Box::new(move || {
            paused_tx.send(()).unwrap();
            std::thread::sleep(std::time::Duration::from_millis(300));
        }),
    );
    let (first, second) = std::thread::scope(|sc| {
        let t = sc.spawn(|| f.sync());
        paused_rx
            .recv_timeout(std::time::Duration::from_secs(60))
            .expect("the first sync's fsync did not fail");
        let second = g.sync();
        (t.join().unwrap(), second)
    });
    assert!(first.is_err(), "the first sync passed");
    assert!(
        second.is_err(),
        "a sync passed beside another's failed fsync of the file, which may have cost its writes (pages read {:?})",
        read_two(&g)
    );
    match g.sync() {
        Err(Error::SyncLost { .. }) => {}
        other => panic!("the next sync: {other:?}"),
    }
}

/// A write that completes while a sync writes a lazy growth's headers is
/// covered by that sync's fsync (its flag is taken after the headers); when
/// the fsync fails, the write may be gone, so the loss sticks as it does for
/// writes made before the sync began: the writer's own next sync, whose
/// fsync passes, must not return `Ok`.
#[test]
fn a_write_during_a_failing_sync_is_not_passed_by_the_next() {
    use std::sync::atomic::Ordering;
    let d = Dir::new("write-during-sync");
    let (s, sw) = sim_open(&d);
    let f = s.create("f", 8192, LayoutKind::Stripe).unwrap();
    let g = f.clone();
    write_two(&f, 1);
    f.sync().unwrap();
    f.grow_lazily(1 << 20).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    HEADERS_PAUSE.arm(&*f.inner as *const _ as usize, tx);
    sw.fsync_failures.store(1, Ordering::Release);
    let first = std::thread::scope(|sc| {
        let t = sc.spawn(|| f.sync());
        rx.recv().unwrap();
        // The first sync took no writes; this one completes while it
        // writes the headers, before its fsync.
        write_two(&g, 2);
        t.join().unwrap()
    });
    assert!(first.is_err(), "the sync's fsync did not fail");
    sw.fsync_failures.store(0, Ordering::Release);
    let next = g.sync();
    assert!(
        matches!(next, Err(Error::SyncLost { .. })),
        "the writer's sync after the failed one: {next:?} (pages read {:?})",
        read_two(&g)
    );
}

/// A `set_len` whose fsync fails (`ENOSPC`) after a write: the step counts
/// the failure and marks the loss. A `File::sync` that began between the two
/// (the count already moved, the written flags taken before the step looked
/// at them) found neither and passed. The loss is marked before the count.
#[test]
fn a_sync_between_a_failed_steps_count_and_its_stick_does_not_pass() {
    use super::{FSYNC_FD_ERRNO, META_FSYNC_COUNTED};
    let d = Dir::new("meta-beside");
    let s = d.open().unwrap();
    make(&s, "a", 8192, 1);
    let f = s.open_file("a").unwrap();
    let g = f.clone();
    let mut b = AlignedBuf::new(4096);
    b.fill(5);
    g.write_at(0, &b).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    META_FSYNC_COUNTED.arm(
        &*f.inner as *const _ as usize,
        Box::new(move || {
            // (On the step's thread: its later fsyncs pass, so that this
            // failure is the only one counted.)
            FSYNC_FD_ERRNO.set(0);
            std::thread::spawn(move || tx.send(g.sync()).unwrap());
            // The sync takes the flags and waits for the counting meanwhile.
            std::thread::sleep(std::time::Duration::from_millis(300));
        }),
    );
    FSYNC_FD_ERRNO.set(libc::ENOSPC);
    let r = f.set_len(16384);
    FSYNC_FD_ERRNO.set(0);
    assert!(r.is_err(), "the set_len's fsync did not fail");
    let synced = rx
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("the sync did not end");
    assert!(
        matches!(synced, Err(Error::SyncLost { .. })),
        "a sync beside a failed set_len fsync that took the report of its write: {synced:?}"
    );
}

/// A failed metadata fsync the device does not survive (`EIO`), beside a
/// `File::sync` that had found the devices well and covered a write: the
/// step fails the device and sticks nothing; the sync's own fsync then
/// passes (the report went to the step). It must fail, not pass.
#[test]
fn a_sync_beside_a_failed_steps_device_failure_does_not_pass() {
    use super::FSYNC_FD_ERRNO;
    let d = Dir::new("meta-eio-beside");
    let s = d.open().unwrap();
    make(&s, "a", 8192, 1);
    let f = s.open_file("a").unwrap();
    let step = f.clone();
    let mut b = AlignedBuf::new(4096);
    b.fill(5);
    f.write_at(0, &b).unwrap();
    crate::storage::file::BEFORE_FSYNCS.arm(
        std::sync::Arc::as_ptr(&f.inner) as usize,
        Box::new(move || {
            std::thread::spawn(move || {
                FSYNC_FD_ERRNO.set(libc::EIO);
                let r = step.set_len(16384);
                FSYNC_FD_ERRNO.set(0);
                assert!(r.is_err(), "the set_len's fsync did not fail");
            })
            .join()
            .unwrap();
        }),
    );
    let r = f.sync();
    assert!(
        r.is_err(),
        "a sync passed beside a failed fsync that failed the device"
    );
}
