//! Writes past the end through the C interface, called from Rust: the new
//! length shows only with the bytes in, and a write that fails leaves the
//! length as it was.

use setcache_c::*;
use std::ffi::{CString, c_void};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

fn scratch(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("setcache-capi-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A store on one device directory under `d`, a file `name` of `len` bytes
/// made in it, and a second handle of that file.
fn open(d: &Path, name: &str, len: u64) -> (*mut setcache_store, [*mut setcache_file; 2]) {
    let dev = CString::new(d.to_str().unwrap()).unwrap();
    let devs = [dev.as_ptr()];
    let mut store = std::ptr::null_mut();
    let mut a = std::ptr::null_mut();
    let mut b = std::ptr::null_mut();
    let name = CString::new(name).unwrap();
    // SAFETY: valid pointers to live values.
    unsafe {
        assert_eq!(
            setcache_store_open(devs.as_ptr(), 1, std::ptr::null(), &mut store),
            0
        );
        assert_eq!(setcache_create(store, name.as_ptr(), len, &mut a), 0);
        assert_eq!(setcache_open(store, name.as_ptr(), &mut b), 0);
    }
    (store, [a, b])
}

struct Handle(*mut setcache_file);
// SAFETY: a file handle may be used from any thread (the header's contract).
unsafe impl Send for Handle {}
// SAFETY: as above: its calls may run on several threads at once.
unsafe impl Sync for Handle {}

/// One thread appends runs of bytes that are never zero; another follows the
/// file's end and reads the last bytes below the length it sees. A length
/// shown before its bytes are in reads as zeros.
#[test]
fn a_reader_following_the_end_never_reads_zeros() {
    let d = scratch("follow");
    let (store, [w, r]) = open(&d, "log", 0);
    let (w, r) = (Handle(w), Handle(r));
    let stop = AtomicBool::new(false);
    // The reader's reads so far: the writer waits for some in its first
    // appends and again in its last (on two cores the reader could
    // otherwise start after the writer ends and find nothing to race).
    let reads = AtomicU64::new(0);
    let wait_for_reads = |past: u64| {
        let t0 = std::time::Instant::now();
        while reads.load(Ordering::Acquire) <= past {
            assert!(t0.elapsed().as_secs() < 60, "the reader made no read");
            std::thread::yield_now();
        }
    };
    let zeros = std::thread::scope(|s| {
        let reader = s.spawn(|| {
            let r = &r;
            let mut zeros = 0u64;
            let mut buf = [0u8; 64];
            while !stop.load(Ordering::Acquire) {
                // SAFETY: a live handle and a buffer of 64 bytes.
                let len = unsafe { setcache_len(r.0) };
                assert!(len >= 0, "len: {len}");
                let len = len as u64;
                if len == 0 {
                    continue;
                }
                let n = len.min(64);
                // SAFETY: as above.
                let got = unsafe {
                    setcache_pread(r.0, buf.as_mut_ptr().cast::<c_void>(), n as usize, len - n)
                };
                assert_eq!(got, n as i64, "pread of the last {n} bytes of {len}");
                if buf[..n as usize].contains(&0) {
                    zeros += 1;
                }
                reads.fetch_add(1, Ordering::Release);
            }
            zeros
        });
        let w = &w;
        let mut off = 0u64;
        let mut halfway = 0;
        for i in 0..3000u64 {
            match i {
                1 => wait_for_reads(0),
                1500 => halfway = reads.load(Ordering::Acquire),
                2999 => wait_for_reads(halfway),
                _ => {}
            }
            // Runs of 1 to 12,000 bytes: within a page, across pages and
            // into pages not yet cached.
            let n = 1 + (i * 7919) % 12_000;
            let run = vec![(i % 255 + 1) as u8; n as usize];
            let bytes = run.as_ptr().cast::<c_void>();
            // SAFETY: a live handle and a buffer of `n` bytes.
            let put = unsafe { setcache_pwrite(w.0, bytes, run.len(), off) };
            assert_eq!(put, n as i64, "append {i}");
            off += n;
        }
        stop.store(true, Ordering::Release);
        reader.join().unwrap()
    });
    assert_eq!(zeros, 0, "reads of the file's last bytes found zeros");
    // SAFETY: live handles, closed once.
    unsafe {
        assert_eq!(setcache_close(w.0), 0);
        assert_eq!(setcache_close(r.0), 0);
        assert_eq!(setcache_store_close(store), 0);
    }
    let _ = std::fs::remove_dir_all(&d);
}

/// A write past the end that fails (the thread holds a pin of a page the
/// write covers, which the write would wait for) leaves the file as long as
/// it was; a write past the end of nothing grows nothing.
#[test]
fn a_failed_write_past_the_end_leaves_the_length() {
    let d = scratch("failed");
    let (store, [f, g]) = open(&d, "f", 10_000);
    let mut data: *const c_void = std::ptr::null();
    let mut len = 0usize;
    let mut pin = std::ptr::null_mut();
    let run = vec![9u8; 10_000];
    // SAFETY: live handles and valid out-pointers; the pin is let go below.
    unsafe {
        assert_eq!(setcache_pin(f, 8192, &mut data, &mut len, &mut pin), 0);
        let r = setcache_pwrite(f, run.as_ptr().cast::<c_void>(), run.len(), 5_000);
        assert_eq!(r, -(libc::EDEADLK as i64), "a write over its own pin");
        assert_eq!(setcache_len(f), 10_000, "the length after the failed write");
        assert_eq!(setcache_len(g), 10_000, "the length through another handle");
        assert_eq!(
            setcache_pwrite(f, run.as_ptr().cast::<c_void>(), 0, 50_000),
            0
        );
        assert_eq!(
            setcache_len(f),
            10_000,
            "the length after a write of nothing"
        );
        assert_eq!(setcache_unpin(pin), 0);
        // Now the write lands, and the file is as long as it says.
        assert_eq!(
            setcache_pwrite(f, run.as_ptr().cast::<c_void>(), run.len(), 5_000),
            10_000
        );
        assert_eq!(setcache_len(g), 15_000);
        let mut back = vec![0u8; 15_000];
        assert_eq!(
            setcache_pread(g, back.as_mut_ptr().cast::<c_void>(), 15_000, 0),
            15_000
        );
        assert!(back[..5_000].iter().all(|&b| b == 0));
        assert!(back[5_000..].iter().all(|&b| b == 9));
        assert_eq!(setcache_close(f), 0);
        assert_eq!(setcache_close(g), 0);
        assert_eq!(setcache_store_close(store), 0);
    }
    let _ = std::fs::remove_dir_all(&d);
}

/// A write that only ends past the store's largest file writes the part
/// before it and returns that count, as the kernel's; one from there on
/// fails `EFBIG` and writes nothing. The device is on tmpfs, whose files
/// reach the store's largest (ext4's stop at 16 TiB).
#[test]
fn a_write_ending_past_the_largest_file_is_cut_there() {
    let shm = Path::new("/dev/shm");
    if !shm.is_dir() {
        eprintln!("skipped: no /dev/shm for a device that holds the largest file");
        return;
    }
    let d = shm.join(format!("setcache-capi-largest-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    let (store, [f, g]) = open(&d, "f", 0);
    let most: u64 = 1 << 52;
    let data = *b"abcd";
    // SAFETY: live handles and buffers of the lengths given.
    unsafe {
        assert_eq!(
            setcache_pwrite(f, data.as_ptr().cast::<c_void>(), 4, most - 3),
            3
        );
        assert_eq!(setcache_len(g), most as i64);
        let mut back = [0u8; 4];
        assert_eq!(
            setcache_pread(g, back.as_mut_ptr().cast::<c_void>(), 4, most - 3),
            3
        );
        assert_eq!(&back[..3], b"abc");
        assert_eq!(
            setcache_pwrite(f, data.as_ptr().cast::<c_void>(), 1, most),
            -(libc::EFBIG as i64)
        );
        assert_eq!(setcache_len(g), most as i64);
        assert_eq!(setcache_set_len(f, 0), 0);
        assert_eq!(setcache_close(f), 0);
        assert_eq!(setcache_close(g), 0);
        assert_eq!(setcache_store_close(store), 0);
    }
    let _ = std::fs::remove_dir_all(&d);
}
