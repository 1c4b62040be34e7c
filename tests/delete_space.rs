//! A deleted file's space, back when the delete returns: alone in its
//! binary, so that no other test's fork holds the deleted file open.

mod common;

use common::{TempDir, small_cache as cache};
use setcache::{CachedStore, EngineKind, LayoutKind, Store, StoreOptions};

/// A deleted file's space is back when its delete (or, for a file still
/// open, its last handle's drop) returns, as a local file system's: the
/// ring's registration of its backing file, which may be the last reference,
/// is let go first (before, a write right after a delete on a full file
/// system failed `ENOSPC` about one time in three: the space came back a
/// moment later). In a binary of its own: a test beside it that forks (or
/// starts a program) gives the child a copy of every descriptor the process
/// holds, this store's backing files among them, and the space stays taken
/// until that child ends or execs.
#[test]
fn a_deleted_files_space_is_back_when_the_delete_returns() {
    use std::io::Write;
    let tmp = TempDir::new("delete-space");
    let Some(fs) = common::Tmpfs::mount(&tmp.path().join("mnt"), 16) else {
        return;
    };
    let root = fs.0.join("dev0");
    std::fs::create_dir_all(&root).unwrap();
    let opts = StoreOptions {
        engine: EngineKind::Uring,
        direct_io: false,
        ..StoreOptions::default()
    };
    let cs = CachedStore::new(Store::open(&[&root], opts).unwrap(), cache(256)).unwrap();
    let chunk = vec![5u8; 64 << 10];
    let mut late = Vec::new();
    for round in 0..40 {
        let name = format!("f{round}");
        let cf = cs.create(&name, 0, LayoutKind::Stripe).unwrap();
        cf.write_extending(0, &vec![7u8; 2 << 20]).unwrap();
        cf.sync().unwrap();
        // Half the rounds delete a closed file, half drop an open one's last
        // handle after its delete.
        let mut cf = Some(cf);
        if round % 2 == 0 {
            drop(cf.take());
        }
        common::take_the_rest(&fs.0);
        let mut b = std::fs::OpenOptions::new()
            .append(true)
            .open(fs.0.join("ballast"))
            .unwrap();
        cs.delete(&name).unwrap();
        drop(cf);
        if b.write_all(&chunk).is_err() {
            late.push(round);
        }
        drop(b);
        std::fs::remove_file(fs.0.join("ballast")).unwrap();
    }
    // Before the ring let go first, 34 of 40 rounds found no room; since, up
    // to three in some runs still do, their holder not found (see "What is not
    // promised" in docs/reliability.md): up to eight are let pass.
    assert!(
        late.len() <= 8,
        "rounds whose space came back late: {late:?}"
    );
    cs.close().unwrap();
}
