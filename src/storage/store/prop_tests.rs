//! What the store reads from its roots besides headers (src/storage/header.rs tests
//! those): the lock file's holder, directory entries, and the intent record
//! file, fed arbitrary bytes.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use proptest::prelude::*;

use super::intent::{Decoded, INTENT_FILE, Intent, MAX_RECORD, Op};
use super::{
    LOCK_FILE, NEW_SUFFIX, SUFFIX, Store, StoreOptions, listed_name, lock_holder, read_intent,
};
use crate::error::Error;
use crate::storage::io::EngineKind;
use crate::storage::layout::LayoutKind;
use crate::test_alloc::{input_bound, largest_alloc};

/// Device roots in a fresh directory (on tmpfs when there is one), removed on drop.
struct Roots(PathBuf, usize);

impl Roots {
    fn new(tag: &str, devices: usize) -> Roots {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let shm = Path::new("/dev/shm");
        let base = if shm.is_dir() {
            shm.to_path_buf()
        } else {
            std::env::temp_dir()
        };
        let p = base.join(format!(
            "setcache-prop-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&p);
        for i in 0..devices {
            std::fs::create_dir_all(p.join(format!("dev{i}"))).unwrap();
        }
        Roots(p, devices)
    }

    fn roots(&self) -> Vec<PathBuf> {
        (0..self.1)
            .map(|i| self.0.join(format!("dev{i}")))
            .collect()
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
}

impl Drop for Roots {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Opens a store whose device 0 holds `record` as its intent record file: a
/// store, or a recovery error naming the record; never a panic. A store that
/// opens has removed the record.
fn open_with_record(devices: usize, record: &[u8]) -> Result<(), TestCaseError> {
    let dir = Roots::new("intent", devices);
    let path = dir.roots()[0].join(INTENT_FILE);
    std::fs::write(&path, record).unwrap();
    match dir.open() {
        Ok(_) => prop_assert!(!path.exists(), "the record outlived the recovery"),
        Err(Error::Recovery { path: p, .. }) => prop_assert_eq!(p, path),
        Err(e) => prop_assert!(false, "not a recovery error: {e}"),
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// A lock file of any bytes names a holder or none; a pid written reads back.
    #[test]
    fn lock_files_name_their_holder_or_none(
        b in proptest::collection::vec(any::<u8>(), 0..32),
        pid in any::<u32>(),
    ) {
        let (holder, largest) = largest_alloc(|| lock_holder(&b));
        prop_assert!(largest <= input_bound(b.len()));
        if let Some(h) = holder {
            prop_assert_eq!(lock_holder(format!("{h}\n").as_bytes()), Some(h));
        }
        prop_assert_eq!(lock_holder(format!("{pid}\n").as_bytes()), Some(pid));
    }

    /// Only entries `<valid name>.scf` are listed, each under its name.
    #[test]
    fn only_backing_files_of_valid_names_are_listed(
        b in prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..40),
            "[^/\\u{0}]{0,12}(\\.scf)?(\\.new)?".prop_map(String::into_bytes),
        ],
        name in "[^./\\u{0}][^/\\u{0}]{0,24}",
    ) {
        let entry = OsStr::from_bytes(&b);
        if let Some(n) = listed_name(entry) {
            prop_assert!(super::validate_name(n).is_ok(), "{n:?}");
            let backing = format!("{n}{SUFFIX}");
            prop_assert_eq!(backing.as_bytes(), &b[..]);
        }
        let backing = format!("{name}{SUFFIX}");
        prop_assert_eq!(listed_name(OsStr::new(&backing)), Some(&*name));
        let temporary = format!(".{name}{NEW_SUFFIX}");
        prop_assert_eq!(listed_name(OsStr::new(&temporary)), None);
    }
}

proptest! {
    // Each case opens a store (an I/O thread per device): fewer cases.
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// An intent file of any bytes is removed at open, or open fails with a recovery error.
    #[test]
    fn arbitrary_intent_files_are_recovered_or_refused(
        b in proptest::collection::vec(any::<u8>(), 0..160),
    ) {
        open_with_record(1, &b)?;
    }

    /// Any whole record is carried out at open, or open fails with a recovery error.
    #[test]
    fn whole_intent_records_are_carried_out_or_refused(
        i in super::intent::tests::valid(),
        devices in 1usize..=2,
    ) {
        open_with_record(devices, &i.encode())?;
    }
}

/// A huge intent file is read only to one byte past the longest record, as torn.
#[test]
fn oversized_intent_files_are_not_read_whole() {
    let dir = Roots::new("big-intent", 1);
    let path = dir.roots()[0].join(INTENT_FILE);
    let f = std::fs::File::create(&path).unwrap();
    // Sparse: 256 MiB of zeros that take no space.
    f.set_len(256 << 20).unwrap();
    drop(f);
    let (b, largest) = largest_alloc(|| read_intent(&path).unwrap());
    assert_eq!(b.len(), MAX_RECORD + 1);
    assert!(largest <= 1 << 20, "{largest} bytes asked for at once");
    assert!(matches!(Intent::decode(&b), Decoded::Torn));
    drop(dir.open().unwrap());
    assert!(!path.exists());
    assert!(dir.roots()[0].join(LOCK_FILE).exists());
}

/// A record with a stripe unit near 2^64 is refused at open (it overflowed a size).
#[test]
fn intent_records_with_huge_block_sizes_are_refused() {
    let dir = Roots::new("huge-block", 1);
    let store = dir.open().unwrap();
    drop(store.create("f", 4096, LayoutKind::Stripe).unwrap());
    drop(store);
    let header = std::fs::read(dir.roots()[0].join(format!("f{SUFFIX}"))).unwrap();
    let uid = u64::from_le_bytes(header[40..48].try_into().unwrap());
    let record = Intent {
        devices: 1,
        op: Op::SetLen {
            name: "f".into(),
            uid,
            layout: LayoutKind::Stripe,
            block_bytes: u64::MAX / 512 * 512,
            old_len: 4096,
            new_len: 8192,
        },
    };
    std::fs::write(dir.roots()[0].join(INTENT_FILE), record.encode()).unwrap();
    match dir.open() {
        Err(Error::Recovery { problem, .. }) => {
            assert!(problem.contains("block size"), "{problem}")
        }
        Ok(_) => panic!("a record with a block size near 2^64 was carried out"),
        Err(e) => panic!("not a recovery error: {e}"),
    }
}
