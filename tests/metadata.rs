//! Bad device roots and damaged headers are refused with errors naming the device;
//! nothing existing is lost.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

use common::{TempDir, pattern};
use setcache::{AlignedBuf, EngineKind, Error, LayoutKind, Store, StoreOptions};

fn opts() -> StoreOptions {
    StoreOptions {
        engine: EngineKind::Psync,
        ..Default::default()
    }
}

#[test]
fn bad_device_roots() {
    let tmp = TempDir::new("roots");
    let roots = tmp.devices(2);
    let none: [PathBuf; 0] = [];
    assert!(matches!(Store::open(&none, opts()), Err(Error::NoDevices)));

    let missing = tmp.path().join("nope");
    let e = Store::open(&[roots[0].clone(), missing], opts()).unwrap_err();
    assert!(matches!(e, Error::BadDevice { device: 1, .. }), "{e}");
    assert!(e.to_string().contains("does not exist"), "{e}");

    let file = tmp.path().join("plain");
    std::fs::write(&file, b"keep me").unwrap();
    let e = Store::open(std::slice::from_ref(&file), opts()).unwrap_err();
    assert!(e.to_string().contains("not a directory"), "{e}");
    assert_eq!(std::fs::read(&file).unwrap(), b"keep me");

    let ro = tmp.path().join("ro");
    std::fs::create_dir(&ro).unwrap();
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o555)).unwrap();
    let e = Store::open(std::slice::from_ref(&ro), opts()).unwrap_err();
    assert!(e.to_string().contains("read-only"), "{e}");
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o755)).unwrap();

    let e = Store::open(&[roots[0].clone(), roots[0].clone()], opts()).unwrap_err();
    assert!(e.to_string().contains("same directory as device 0"), "{e}");
}

fn make(tmp: &TempDir) -> (Vec<PathBuf>, Vec<u8>) {
    let roots = tmp.devices(3);
    let store = Store::open(&roots, opts()).unwrap();
    let f = store.create("data", 1 << 20, LayoutKind::Rotated).unwrap();
    let mut b = AlignedBuf::new(1 << 20);
    b.copy_from_slice(&pattern(11, 0, 1 << 20));
    f.write_at(0, &b).unwrap();
    f.sync().unwrap();
    (roots, b.to_vec())
}

fn backing(roots: &[PathBuf], dev: usize) -> PathBuf {
    roots[dev].join("data.scf")
}

#[test]
fn corrupt_header_names_the_device_and_keeps_data() {
    let tmp = TempDir::new("corrupt");
    let (roots, data) = make(&tmp);
    let p = backing(&roots, 1);
    let mut bytes = std::fs::read(&p).unwrap();
    let saved = bytes[20];
    bytes[20] ^= 0x40; // inside the block size field
    std::fs::write(&p, &bytes).unwrap();
    let store = Store::open(&roots, opts()).unwrap();
    let e = store.open_file("data").unwrap_err();
    assert!(matches!(e, Error::BadHeader { device: 1, .. }), "{e}");
    assert!(e.to_string().contains("checksum"), "{e}");
    // Nothing was rewritten: repairing the byte gives the data back.
    bytes[20] = saved;
    std::fs::write(&p, &bytes).unwrap();
    let f = store.open_file("data").unwrap();
    let mut b = AlignedBuf::new(1 << 20);
    f.read_at(0, &mut b).unwrap();
    assert!(b[..] == data[..]);
}

#[test]
fn missing_piece_and_wrong_order_are_refused() {
    let tmp = TempDir::new("missing");
    let (roots, _) = make(&tmp);
    // Devices given in another order.
    let swapped = vec![roots[1].clone(), roots[0].clone(), roots[2].clone()];
    let store = Store::open(&swapped, opts()).unwrap();
    let e = store.open_file("data").unwrap_err();
    assert!(matches!(e, Error::BadHeader { device: 0, .. }), "{e}");
    assert!(e.to_string().contains("belongs to device 1"), "{e}");
    drop(store);
    // Fewer devices than the file spans.
    let store = Store::open(&roots[..2], opts()).unwrap();
    let e = store.open_file("data").unwrap_err();
    assert!(e.to_string().contains("spans 3 devices"), "{e}");
    drop(store);
    // A piece is gone.
    std::fs::rename(backing(&roots, 2), tmp.path().join("saved")).unwrap();
    let store = Store::open(&roots, opts()).unwrap();
    let e = store.open_file("data").unwrap_err();
    assert!(matches!(e, Error::BadHeader { device: 2, .. }), "{e}");
    assert!(e.to_string().contains("missing"), "{e}");
}

#[test]
fn sibling_from_another_file_is_refused() {
    let tmp = TempDir::new("sibling");
    let (roots, _) = make(&tmp);
    let store = Store::open(&roots, opts()).unwrap();
    store.create("other", 1 << 20, LayoutKind::Rotated).unwrap();
    drop(store);
    std::fs::copy(roots[2].join("other.scf"), backing(&roots, 2)).unwrap();
    let store = Store::open(&roots, opts()).unwrap();
    let e = store.open_file("data").unwrap_err();
    assert!(matches!(e, Error::BadHeader { device: 2, .. }), "{e}");
    assert!(e.to_string().contains("file identity"), "{e}");
}

#[test]
fn truncated_backing_file_is_refused() {
    let tmp = TempDir::new("trunc");
    let (roots, _) = make(&tmp);
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(backing(&roots, 0))
        .unwrap();
    f.set_len(8192).unwrap();
    let store = Store::open(&roots, opts()).unwrap();
    let e = store.open_file("data").unwrap_err();
    assert!(e.to_string().contains("truncated"), "{e}");
}
