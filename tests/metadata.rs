//! Bad device roots and damaged headers are refused with errors naming the device;
//! nothing existing is lost. A store's roots are locked while it is open; backing
//! files that vanish are reported by `sync`; older headers and interrupted
//! operations are dealt with at open.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

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
    assert_eq!(e.posix_errno(), libc::ENOTDIR, "{e}");

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
    assert_eq!(e.posix_errno(), libc::EACCES, "{e}");
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o755)).unwrap();

    // A read-only file system (where this process may mount one): EROFS.
    let ro_fs = tmp.path().join("ro-fs");
    std::fs::create_dir(&ro_fs).unwrap();
    let target = std::ffi::CString::new(ro_fs.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: valid C strings; a tmpfs mounted read-only on this test's own directory.
    let mounted = unsafe {
        libc::mount(
            c"none".as_ptr(),
            target.as_ptr(),
            c"tmpfs".as_ptr(),
            libc::MS_RDONLY,
            std::ptr::null(),
        )
    } == 0;
    if mounted {
        let e = Store::open(std::slice::from_ref(&ro_fs), opts()).unwrap_err();
        // SAFETY: the mount made above.
        unsafe { libc::umount(target.as_ptr()) };
        assert!(e.to_string().contains("read-only file system"), "{e}");
        assert_eq!(e.posix_errno(), libc::EROFS, "{e}");
    }

    let e = Store::open(&[roots[0].clone(), roots[0].clone()], opts()).unwrap_err();
    assert!(e.to_string().contains("same directory as device 0"), "{e}");
    assert_eq!(e.posix_errno(), libc::EINVAL, "{e}");
}

/// A device root on a file system whose direct I/O needs 4 KiB alignment is
/// refused at open, naming the alignment (setcache's I/O is aligned to 512
/// bytes, and the first request of a partial sector would fail the device);
/// without direct I/O the same root works.
#[test]
fn a_root_whose_direct_io_needs_more_than_512_byte_alignment_is_refused() {
    let tmp = TempDir::new("sector4k");
    let Some(fs) = common::LoopFs::mount(&tmp.path().join("mnt"), 64, 4096) else {
        return;
    };
    let root = fs.dir.join("dev0");
    std::fs::create_dir(&root).unwrap();
    let e = Store::open(std::slice::from_ref(&root), opts()).unwrap_err();
    assert!(matches!(e, Error::BadDevice { device: 0, .. }), "{e}");
    let msg = e.to_string();
    assert!(msg.contains("aligned to 4096 bytes"), "{msg}");
    assert!(msg.contains("direct_io = false"), "{msg}");
    assert_eq!(
        std::fs::read_dir(&root).unwrap().count(),
        0,
        "the probe stayed"
    );
    let store = Store::open(
        std::slice::from_ref(&root),
        StoreOptions {
            direct_io: false,
            ..opts()
        },
    )
    .unwrap();
    let f = store.create("odd", 10_000, LayoutKind::Stripe).unwrap();
    let mut b = AlignedBuf::new(512);
    b.copy_from_slice(&pattern(3, 9728, 512));
    f.write_at(9728, &b).unwrap();
    f.sync().unwrap();
    let mut back = AlignedBuf::new(512);
    f.read_at(9728, &mut back).unwrap();
    assert!(back[..272] == b[..272]);
    drop((f, store));
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

/// CRC-32C, bit by bit (the store's format uses it for headers and intent records).
fn crc32c(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= b as u32;
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0x82f6_3b78
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// A second `Store` on the same roots in this process is refused at once, naming
/// the root and this process; so is one sharing a single root. The roots stay
/// locked while any handle of the store lives, and are free after.
#[test]
fn a_second_store_in_this_process_is_refused() {
    let tmp = TempDir::new("lock-same");
    let roots = tmp.devices(2);
    let store = Store::open(&roots, opts()).unwrap();
    let f = store.create("f", 4096, LayoutKind::Stripe).unwrap();
    let t = Instant::now();
    let e = Store::open(&roots, opts()).unwrap_err();
    assert!(
        t.elapsed() < Duration::from_secs(1),
        "took {:?}",
        t.elapsed()
    );
    assert!(
        matches!(&e, Error::StoreLocked { device: 0, holder: Some(pid), .. } if *pid == std::process::id()),
        "{e:?}"
    );
    let msg = e.to_string();
    assert!(
        msg.contains(&roots[0].display().to_string()) && msg.contains("in this process"),
        "{msg}"
    );
    let other = tmp.path().join("other");
    std::fs::create_dir_all(&other).unwrap();
    let e = Store::open(&[other.clone(), roots[1].clone()], opts()).unwrap_err();
    assert!(matches!(e, Error::StoreLocked { device: 1, .. }), "{e}");
    // A file handle keeps the store, and its locks, alive.
    drop(store);
    assert!(matches!(
        Store::open(&roots, opts()),
        Err(Error::StoreLocked { .. })
    ));
    drop(f);
    let again = Store::open(&roots, opts()).unwrap();
    assert_eq!(again.list().unwrap(), vec!["f"]);
    // The refused open took nothing: `other` is free.
    Store::open(&[other], opts()).unwrap();
}

/// A tool may take away the lock file a store left (`Store::remove_lock_file`)
/// while another thread opens a store on the same root: the removal happens
/// under the lock, and an opener whose file was removed between its open and
/// its lock opens the new one, so that two stores never hold one root. Three
/// threads open and drop stores, a fourth removes the lock file, for a second.
#[test]
fn a_lock_file_removed_while_stores_open_never_lets_two_hold_a_root() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let tmp = TempDir::new("lock-remove");
    let root = tmp.devices(1).remove(0);
    let open_now = AtomicUsize::new(0);
    let (opened, removed) = (AtomicUsize::new(0), AtomicUsize::new(0));
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        for _ in 0..3 {
            s.spawn(|| {
                while !done.load(Ordering::Relaxed) {
                    match Store::open(std::slice::from_ref(&root), opts()) {
                        Ok(store) => {
                            let before = open_now.fetch_add(1, Ordering::SeqCst);
                            assert_eq!(before, 0, "two stores hold one root at once");
                            opened.fetch_add(1, Ordering::Relaxed);
                            std::thread::sleep(Duration::from_micros(200));
                            open_now.fetch_sub(1, Ordering::SeqCst);
                            drop(store);
                        }
                        Err(Error::StoreLocked { .. }) => {}
                        Err(e) => panic!("open: {e}"),
                    }
                }
            });
        }
        s.spawn(|| {
            while !done.load(Ordering::Relaxed) {
                if Store::remove_lock_file(&root).unwrap() {
                    removed.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
        // A second at least, and on a loaded machine until both have gone
        // round often enough to have met (at most 30 s).
        let t = std::time::Instant::now();
        std::thread::sleep(Duration::from_secs(1));
        while (opened.load(Ordering::Relaxed) <= 10 || removed.load(Ordering::Relaxed) <= 10)
            && t.elapsed() < Duration::from_secs(30)
        {
            std::thread::sleep(Duration::from_millis(10));
        }
        done.store(true, Ordering::Relaxed);
    });
    let (o, r) = (opened.into_inner(), removed.into_inner());
    assert!(o > 10 && r > 10, "opened {o} times, removed {r} times");
}

/// This test binary run again for test `name` alone, with `var` set to `val`
/// (and `unset` removed), its output captured.
fn rerun_self(name: &str, var: &str, val: &Path, unset: &str) -> std::process::Output {
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env_remove(unset)
        .env(var, val)
        .output()
        .unwrap()
}

/// The two device roots a forking test uses under `dir`.
fn fork_roots(dir: &Path) -> Vec<PathBuf> {
    (0..2).map(|i| dir.join(format!("dev{i}"))).collect()
}

/// Forks a child that sleeps `secs` and `nanos`, then ends; its pid.
fn fork_sleeper(secs: i64, nanos: i64) -> libc::pid_t {
    // SAFETY: the child calls only async-signal-safe functions (nanosleep,
    // _exit) before it ends.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let ts = libc::timespec {
            tv_sec: secs,
            tv_nsec: nanos,
        };
        // SAFETY: plain system calls in the forked child.
        unsafe {
            libc::nanosleep(&ts, std::ptr::null_mut());
            libc::_exit(0);
        }
    }
    pid
}

const FORK_CHILD: &str = "SETCACHE_TEST_FORK_CHILD";
const FORK_HOLDER: &str = "SETCACHE_TEST_FORK_HOLDER";
const FORK_OPENER: &str = "SETCACHE_TEST_FORK_OPENER";

/// A child forked while a store was open keeps copies of its descriptors,
/// the root locks' included, until it execs or exits: once the store is
/// dropped, opening the roots again waits for that release rather than
/// reporting the store as held by this very process. Runs in a process of its
/// own (its fork would hold the locks of other tests' stores too).
#[test]
fn a_lock_a_forked_child_still_holds_is_waited_for() {
    let Ok(dir) = std::env::var(FORK_CHILD) else {
        let tmp = TempDir::new("lock-fork");
        let out = rerun_self(
            "a_lock_a_forked_child_still_holds_is_waited_for",
            FORK_CHILD,
            tmp.path(),
            FORK_HOLDER,
        );
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && text.contains("REOPENED"),
            "{text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        return;
    };
    let roots = fork_roots(Path::new(&dir));
    for r in &roots {
        std::fs::create_dir_all(r).unwrap();
    }
    let store = Store::open(&roots, opts()).unwrap();
    let pid = fork_sleeper(0, 300_000_000);
    drop(store);
    let t = Instant::now();
    let again = Store::open(&roots, opts());
    let mut status = 0;
    // SAFETY: waits for our own child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    assert!(again.is_ok(), "{:?} after {:?}", again.err(), t.elapsed());
    println!("REOPENED after {:?}", t.elapsed());
}

/// A store closed while a child forked before (by another thread, say, on
/// its way to exec) still holds copies of its descriptors: another process
/// opens the roots at once, rather than being told they are in use by the
/// process that closed them. Three processes: this test runs itself as the
/// holder, which forks a child that sleeps, closes its store and runs itself
/// again as the opener.
#[test]
fn a_closed_stores_roots_open_in_another_process_while_a_fork_lives() {
    if let Ok(dir) = std::env::var(FORK_OPENER) {
        match Store::open(&fork_roots(Path::new(&dir)), opts()) {
            Ok(_) => println!("OPENED"),
            Err(e) => println!("REFUSED: {e}"),
        }
        return;
    }
    let Ok(dir) = std::env::var(FORK_HOLDER) else {
        let tmp = TempDir::new("lock-fork-other");
        let out = rerun_self(
            "a_closed_stores_roots_open_in_another_process_while_a_fork_lives",
            FORK_HOLDER,
            tmp.path(),
            FORK_OPENER,
        );
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && text.contains("OTHER PROCESS OPENED"),
            "{text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        return;
    };
    let roots = fork_roots(Path::new(&dir));
    for r in &roots {
        std::fs::create_dir_all(r).unwrap();
    }
    let store = Store::open(&roots, opts()).unwrap();
    let pid = fork_sleeper(3, 0);
    drop(store);
    let out = rerun_self(
        "a_closed_stores_roots_open_in_another_process_while_a_fork_lives",
        FORK_OPENER,
        Path::new(&dir),
        FORK_HOLDER,
    );
    let mut status = 0;
    // SAFETY: waits for our own child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("OPENED\n") && !text.contains("REFUSED"),
        "{text}"
    );
    println!("OTHER PROCESS OPENED");
}

const LOCK_CHILD: &str = "SETCACHE_TEST_LOCK_CHILD";

/// A second process opening an open store gets a clear error within a second,
/// naming the root and the process that holds it; once that store is closed, it
/// opens.
#[test]
fn a_second_process_is_refused() {
    if let Ok(dir) = std::env::var(LOCK_CHILD) {
        // The child: open the store and say what happened.
        let roots: Vec<PathBuf> = (0..2)
            .map(|i| Path::new(&dir).join(format!("dev{i}")))
            .collect();
        let t = Instant::now();
        let r = Store::open(&roots, opts());
        let ms = t.elapsed().as_millis();
        match r {
            Ok(s) => println!("OPENED in {ms} ms: {:?}", s.list().unwrap()),
            Err(e) => println!("REFUSED in {ms} ms: {e}"),
        }
        return;
    }
    let tmp = TempDir::new("lock-proc");
    let roots = tmp.devices(2);
    let child = || {
        let t = Instant::now();
        let out = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "a_second_process_is_refused",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(LOCK_CHILD, tmp.path())
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        // The test harness prints its own words before the child's on that line.
        let at = text
            .find("OPENED")
            .or_else(|| text.find("REFUSED"))
            .unwrap_or_else(|| panic!("child said: {text}"));
        let line = text[at..].lines().next().unwrap().to_string();
        (line, t.elapsed())
    };
    let store = Store::open(&roots, opts()).unwrap();
    store.create("held", 4096, LayoutKind::Stripe).unwrap();
    let (line, took) = child();
    assert!(line.starts_with("REFUSED"), "{line}");
    let ms: u64 = line.split_whitespace().nth(2).unwrap().parse().unwrap();
    assert!(ms < 1000, "the refusal took {ms} ms: {line}");
    assert!(took < Duration::from_secs(10), "the child ran {took:?}");
    assert!(
        line.contains(&roots[0].display().to_string())
            && line.contains("in use by another open store")
            && line.contains(&format!("process {}", std::process::id())),
        "{line}"
    );
    drop(store);
    let (line, _) = child();
    assert!(
        line.starts_with("OPENED") && line.contains("held"),
        "{line}"
    );
}

/// `sync` reports a backing file that was replaced, removed with its directory, or
/// deleted, naming the file and the device; a rename through the store is followed.
#[test]
fn sync_reports_backing_files_that_are_gone() {
    let tmp = TempDir::new("gone");
    let roots = tmp.devices(2);
    let store = Store::open(&roots, opts()).unwrap();
    let mut b = AlignedBuf::new(8192);
    b.fill(3);
    let f = store.create("f", 1 << 20, LayoutKind::Stripe).unwrap();
    f.write_at(0, &b).unwrap();
    f.sync().unwrap();
    // Renamed through the store: the handle follows.
    store.rename("f", "g").unwrap();
    f.write_at(0, &b).unwrap();
    f.sync().unwrap();
    // Another file put in place of device 1's backing file.
    store.create("x", 4096, LayoutKind::Stripe).unwrap();
    std::fs::rename(roots[1].join("x.scf"), roots[1].join("g.scf")).unwrap();
    f.write_at(0, &b).unwrap();
    let e = f.sync().unwrap_err();
    assert!(
        matches!(&e, Error::BackingGone { file, device: 1, .. } if file == "g"),
        "{e:?}"
    );
    assert!(
        e.to_string().contains("\"g\"") && e.to_string().contains("device 1"),
        "{e}"
    );
    assert!(e.to_string().contains("replaced"), "{e}");
    // Deleted through the store: the handle still reads and writes, but sync says so.
    let h = store.create("h", 1 << 20, LayoutKind::Stripe).unwrap();
    store.delete("h").unwrap();
    h.write_at(0, &b).unwrap();
    let e = h.sync().unwrap_err();
    assert!(
        matches!(e, Error::BackingGone { device: 0, .. }) && e.to_string().contains("removed"),
        "{e}"
    );
    // A device directory removed under an open file.
    let k = store.create("k", 1 << 20, LayoutKind::Stripe).unwrap();
    k.write_at(0, &b).unwrap();
    k.sync().unwrap();
    std::fs::remove_dir_all(&roots[1]).unwrap();
    k.write_at(0, &b).unwrap();
    let e = k.sync().unwrap_err();
    assert!(
        matches!(&e, Error::BackingGone { file, device: 1, .. } if file == "k"),
        "{e:?}"
    );
    assert!(e.to_string().contains("removed"), "{e}");
}

/// A file written by the previous format version (lengths in whole sectors, no
/// intent records) opens with its data, and its headers are rewritten in the
/// current version; a version from the future is refused naming both.
#[test]
fn version_1_headers_are_migrated() {
    let tmp = TempDir::new("v1");
    let (roots, data) = make(&tmp);
    let set_version = |p: &Path, v: u32| {
        let mut bytes = std::fs::read(p).unwrap();
        bytes[8..12].copy_from_slice(&v.to_le_bytes());
        let crc = crc32c(&bytes[..48]);
        bytes[48..52].copy_from_slice(&crc.to_le_bytes());
        std::fs::write(p, &bytes).unwrap();
    };
    let version =
        |p: &Path| u32::from_le_bytes(std::fs::read(p).unwrap()[8..12].try_into().unwrap());
    for d in 0..3 {
        assert_eq!(version(&backing(&roots, d)), 2);
        set_version(&backing(&roots, d), 1);
    }
    {
        let store = Store::open(&roots, opts()).unwrap();
        assert_eq!(store.info("data").unwrap().len, 1 << 20);
        let f = store.open_file("data").unwrap();
        let mut b = AlignedBuf::new(1 << 20);
        f.read_at(0, &mut b).unwrap();
        assert!(b[..] == data[..], "data lost in the migration");
        f.set_len(1000).unwrap();
    }
    for d in 0..3 {
        assert_eq!(version(&backing(&roots, d)), 2, "device {d} not migrated");
    }
    set_version(&backing(&roots, 2), 7);
    let store = Store::open(&roots, opts()).unwrap();
    let e = store.open_file("data").unwrap_err();
    assert!(matches!(e, Error::BadHeader { device: 2, .. }), "{e}");
    assert!(
        e.to_string().contains("version 7") && e.to_string().contains("version 2"),
        "{e}"
    );
}

/// An intent record as the store writes it (see src/store/intent.rs).
fn intent(op: u32, devices: u32, name: &str, second: &str, version: u32) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(b"SCINTENT");
    b.extend_from_slice(&version.to_le_bytes());
    b.extend_from_slice(&op.to_le_bytes());
    b.extend_from_slice(&devices.to_le_bytes());
    b.extend_from_slice(&[0u8; 4 + 8 * 4]);
    b.extend_from_slice(&(name.len() as u16).to_le_bytes());
    b.extend_from_slice(&(second.len() as u16).to_le_bytes());
    b.extend_from_slice(name.as_bytes());
    b.extend_from_slice(second.as_bytes());
    let crc = crc32c(&b);
    b.extend_from_slice(&crc.to_le_bytes());
    b
}

/// At open, a whole intent record is carried out before anything else, a torn one
/// is dropped, and one that cannot be carried out is refused with a clear error,
/// keeping the record and the files.
#[test]
fn intent_records_are_finished_at_open() {
    let tmp = TempDir::new("intent");
    let (roots, _) = make(&tmp);
    let record = roots[0].join(".setcache-intent");
    // Torn (the process died while writing it): the operation never started.
    std::fs::write(&record, &intent(3, 3, "data", "moved", 2)[..40]).unwrap();
    let store = Store::open(&roots, opts()).unwrap();
    assert_eq!(store.list().unwrap(), vec!["data"]);
    assert!(!record.exists());
    drop(store);
    // A rename recorded for two devices on a store of three.
    std::fs::write(&record, intent(3, 2, "data", "moved", 2)).unwrap();
    let e = Store::open(&roots, opts()).unwrap_err();
    assert!(matches!(e, Error::Recovery { .. }), "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains("rename of \"data\" to \"moved\"")
            && msg.contains("spans 2 devices")
            && msg.contains(".setcache-intent"),
        "{msg}"
    );
    assert!(record.exists() && backing(&roots, 0).exists());
    // From a newer format.
    std::fs::write(&record, intent(3, 3, "data", "moved", 9)).unwrap();
    let e = Store::open(&roots, opts()).unwrap_err();
    assert!(e.to_string().contains("format version 9"), "{e}");
    // From a newer format whose records are laid out otherwise (longer):
    // refused all the same, not taken for a torn record and removed.
    let mut longer = intent(3, 3, "data", "moved", 9);
    longer.extend_from_slice(&[7; 16]);
    std::fs::write(&record, &longer).unwrap();
    let e = Store::open(&roots, opts()).unwrap_err();
    assert!(e.to_string().contains("format version 9"), "{e}");
    assert!(record.exists(), "a newer format's record was removed");
    // Whole and right: the rename is finished, on a device that had done it too.
    std::fs::write(&record, intent(3, 3, "data", "moved", 2)).unwrap();
    std::fs::rename(backing(&roots, 1), roots[1].join("moved.scf")).unwrap();
    let store = Store::open(&roots, opts()).unwrap();
    assert_eq!(store.list().unwrap(), vec!["moved"]);
    assert_eq!(store.info("moved").unwrap().len, 1 << 20);
    assert!(!record.exists());
    drop(store);
    // A delete: every piece goes.
    std::fs::write(&record, intent(2, 3, "moved", "", 2)).unwrap();
    let store = Store::open(&roots, opts()).unwrap();
    assert!(store.list().unwrap().is_empty());
}

/// Lengths too large to be real are refused before anything changes.
#[test]
fn impossible_lengths_are_refused() {
    let tmp = TempDir::new("huge");
    let store = Store::open(&tmp.devices(2), opts()).unwrap();
    let e = store
        .create("big", u64::MAX, LayoutKind::Stripe)
        .unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    assert!(e.to_string().contains("18446744073709551615"), "{e}");
    assert!(store.list().unwrap().is_empty());
    let f = store.create("f", 5000, LayoutKind::Stripe).unwrap();
    let e = f.set_len(1 << 63).unwrap_err();
    assert!(e.to_string().contains("larger than the largest"), "{e}");
    assert_eq!((f.len(), store.info("f").unwrap().len), (5000, 5000));
    // A length the file system cannot hold fails on the devices and changes nothing.
    let e = f.set_len(1 << 61).unwrap_err();
    assert!(e.to_string().contains("device"), "{e}");
    assert_eq!(f.len(), 5000);
    assert_eq!(store.info("f").unwrap().len, 5000);
}

/// `intent` with the record's uid field set (bytes 24..32) and its checksum
/// made again.
fn with_uid(mut rec: Vec<u8>, uid: u64) -> Vec<u8> {
    rec[24..32].copy_from_slice(&uid.to_le_bytes());
    let n = rec.len() - 4;
    let crc = crc32c(&rec[..n]);
    rec[n..].copy_from_slice(&crc.to_le_bytes());
    rec
}

/// `replace` renames a file over another: the name shows the new bytes, a
/// handle of the old file finds it gone, the source name is gone; with no
/// file to replace it is a rename; a missing source is refused. A recorded
/// replacement cut short (one device renamed, the others not) is finished
/// at open.
#[test]
fn replace_renames_over_a_file_and_is_finished_at_open() {
    let tmp = TempDir::new("replace");
    let (roots, data) = make(&tmp);
    let store = Store::open(&roots, opts()).unwrap();
    let mut b = AlignedBuf::new(1 << 20);
    b.copy_from_slice(&pattern(5, 0, 1 << 20));
    let old = store.create("old", 1 << 20, LayoutKind::Stripe).unwrap();
    old.write_at(0, &b).unwrap();
    old.sync().unwrap();
    store.replace("data", "old").unwrap();
    assert_eq!(store.list().unwrap(), vec!["old"]);
    let mut back = AlignedBuf::new(1 << 20);
    store
        .open_file("old")
        .unwrap()
        .read_at(0, &mut back)
        .unwrap();
    assert!(
        back[..] == data[..],
        "the replaced name does not show the new bytes"
    );
    old.write_at(0, &b).unwrap();
    let e = old.sync().unwrap_err();
    assert!(matches!(e, Error::BackingGone { .. }), "{e:?}");
    store.replace("old", "fresh").unwrap();
    assert_eq!(store.list().unwrap(), vec!["fresh"]);
    let e = store.replace("nope", "fresh").unwrap_err();
    assert!(matches!(&e, Error::FileNotFound(n) if n == "nope"), "{e:?}");
    let other = store.create("other", 1 << 20, LayoutKind::Rotated).unwrap();
    other.write_at(0, &b).unwrap();
    other.sync().unwrap();
    drop((old, other, store));
    // Cut short: device 1 renamed "fresh" over "other", devices 0 and 2 not.
    let uid = u64::from_le_bytes(
        std::fs::read(roots[0].join("fresh.scf")).unwrap()[40..48]
            .try_into()
            .unwrap(),
    );
    std::fs::rename(roots[1].join("fresh.scf"), roots[1].join("other.scf")).unwrap();
    let record = roots[0].join(".setcache-intent");
    std::fs::write(&record, with_uid(intent(5, 3, "fresh", "other", 2), uid)).unwrap();
    let store = Store::open(&roots, opts()).unwrap();
    assert!(!record.exists());
    assert_eq!(store.list().unwrap(), vec!["other"]);
    store
        .open_file("other")
        .unwrap()
        .read_at(0, &mut back)
        .unwrap();
    assert!(
        back[..] == data[..],
        "the finished replacement does not show the new bytes"
    );
}

/// A FIFO where the intent record or a backing file should be is refused
/// with an error naming it, never waited on (opening a FIFO to read blocks
/// until a writer comes): at open, and in a `replace` over such a name.
#[test]
fn a_fifo_in_place_of_a_record_or_a_piece_is_refused_not_waited_on() {
    let fifo = |p: &Path| {
        let c = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        let r = unsafe { libc::mkfifo(c.as_ptr(), 0o644) };
        assert_eq!(r, 0, "mkfifo {p:?}");
    };
    let tmp = TempDir::new("fifo");
    let (roots, _) = make(&tmp);
    let (tx, rx) = std::sync::mpsc::channel();
    let r2 = roots.clone();
    std::thread::spawn(move || {
        let intent = r2[0].join(".setcache-intent");
        fifo(&intent);
        let e = Store::open(&r2, opts()).err().map(|e| e.to_string());
        std::fs::remove_file(&intent).unwrap();
        // A piece of the replaced name that is a FIFO.
        let store = Store::open(&r2, opts()).unwrap();
        drop(store.create("other", 4096, LayoutKind::Rotated).unwrap());
        let piece = r2[0].join("other.scf");
        std::fs::remove_file(&piece).unwrap();
        fifo(&piece);
        let e2 = store.replace("other", "data").err().map(|e| e.to_string());
        tx.send((e, e2)).unwrap();
    });
    let (e, e2) = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the store waited on a FIFO");
    let e = e.expect("a store opened over a FIFO as its intent record");
    assert!(
        e.contains(".setcache-intent") && e.contains("not a regular file"),
        "{e}"
    );
    let e2 = e2.expect("a replace over a FIFO piece");
    assert!(
        e2.contains("other.scf") && e2.contains("not a regular file"),
        "{e2}"
    );
}

/// The probe file an opener killed part way left in a device directory
/// (`.setcache-probe-PID`, its process gone) is removed by the next open; a
/// running process's is left alone.
#[test]
fn probes_left_by_killed_openers_are_removed_at_open() {
    let tmp = TempDir::new("stale-probe");
    let roots = tmp.devices(1);
    drop(Store::open(&roots, opts()).unwrap());
    // A process that has ended: a child reaped.
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let dead = child.id();
    child.wait().unwrap();
    let stale = roots[0].join(format!(".setcache-probe-{dead}"));
    let live = roots[0].join(".setcache-probe-1");
    std::fs::write(&stale, [0; 4096]).unwrap();
    std::fs::write(&live, []).unwrap();
    drop(Store::open(&roots, opts()).unwrap());
    assert!(!stale.exists(), "the dead opener's probe stayed");
    assert!(live.exists(), "a live process's probe went");
    std::fs::remove_file(&live).unwrap();
}
