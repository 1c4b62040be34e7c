//! A cache costs memory only for what it uses, and a cache larger than the
//! machine can give is refused when it is made: a real 6 GiB cache, opened and
//! read once through a queue, stays far below 200 MB resident; caches above
//! the machine's available memory (1 PiB, and just above `MemAvailable`) fail
//! at once naming both sizes, and so does a resize growing past it.
//!
//! The resident-memory test reads this process's peak (`VmHWM`), so it lives
//! in its own test binary, and the tests here run one at a time.

mod common;

use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use common::TempDir;
use setcache::{
    AlignedBuf, CacheOptions, CachedStore, EngineKind, Error, LayoutKind, OpKind, PageCache, Store,
    StoreOptions,
};

const GIB: u64 = 1 << 30;

/// Taken by every test here: none runs beside the resident-memory one.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn one_at_a_time() -> MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

/// A field of /proc/self/status in bytes (it is given in kB).
fn status_bytes(field: &str) -> u64 {
    let text = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = text
        .lines()
        .find(|l| l.starts_with(&format!("{field}:")))
        .unwrap_or_else(|| panic!("no {field} in /proc/self/status"));
    let kb: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kb * 1024
}

/// `MemAvailable + SwapFree` from /proc/meminfo, in bytes.
fn machine_available() -> u64 {
    let text = std::fs::read_to_string("/proc/meminfo").unwrap();
    let kb = |name: &str| -> u64 {
        text.lines()
            .find(|l| l.starts_with(&format!("{name}:")))
            .and_then(|l| l.split_whitespace().nth(1))
            .map_or(0, |v| v.parse().unwrap())
    };
    (kb("MemAvailable") + kb("SwapFree")) * 1024
}

/// A size printed as "22.8 GiB" or "100 GiB" back in bytes (approximately).
fn parse_human(s: &str) -> f64 {
    let (num, unit) = s
        .trim()
        .split_once(' ')
        .unwrap_or_else(|| panic!("size {s:?}"));
    let shift = match unit {
        "B" => 0,
        "KiB" => 10,
        "MiB" => 20,
        "GiB" => 30,
        "TiB" => 40,
        "PiB" => 50,
        "EiB" => 60,
        _ => panic!("unit of {s:?}"),
    };
    num.parse::<f64>().unwrap() * (1u64 << shift) as f64
}

/// Check a refusal: `NotEnoughMemory`, its figures, and a message that says
/// what was asked (`asked`, as printed) and how much the machine can give.
fn check_refusal(e: &Error, asked: &str, needed_at_least: u64) {
    let Error::NotEnoughMemory {
        needed, available, ..
    } = e
    else {
        panic!("expected NotEnoughMemory, got: {e}");
    };
    assert!(*needed >= needed_at_least, "{e}");
    assert!(needed > available, "{e}");
    let msg = e.to_string();
    assert!(msg.starts_with(&format!("cache of {asked}")), "{msg}");
    // "... is more than the 22.8 GiB this machine can give (MemAvailable ...)"
    let shown = msg
        .split_once("is more than the ")
        .and_then(|(_, rest)| rest.split_once(" this machine can give ("))
        .unwrap_or_else(|| panic!("no available figure in: {msg}"))
        .0;
    let shown = parse_human(shown);
    let real = *available as f64;
    assert!(
        (shown - real).abs() <= real * 0.05 + 1024.0,
        "shown {shown} vs available {real}: {msg}"
    );
    assert!(msg.contains("MemAvailable"), "{msg}");
}

fn uring_store(tmp: &TempDir) -> Store {
    let opts = StoreOptions {
        engine: EngineKind::Uring,
        ..StoreOptions::default()
    };
    Store::open(&tmp.devices(2), opts).unwrap()
}

/// A real 6 GiB cache costs memory for what one read uses, not for the whole
/// cache: opened with `CachedStore::new` and read once through `queue(32)`,
/// the process's peak resident memory stays far below 200 MB (registering the
/// whole frame region with the queue's ring pinned 6 GiB here).
#[test]
fn a_six_gib_cache_read_once_stays_far_below_200_mb_resident() {
    let _serial = one_at_a_time();
    let tmp = TempDir::new("memory-6g");
    let store = uring_store(&tmp);
    const FILE: u64 = 4 << 20;
    let f = store.create("f", FILE, LayoutKind::Stripe).unwrap();
    let mut data = AlignedBuf::new(FILE as usize);
    for (i, b) in data.iter_mut().enumerate() {
        *b = (i / 4096 * 7 + i % 251) as u8;
    }
    f.write_at(0, &data).unwrap();
    drop(f);

    let mut size = 6 * GIB;
    let room = machine_available();
    if room < size + GIB {
        // Leave other users of a busy machine their memory; the cache is still
        // far larger than the bound.
        size = (room / 2).max(GIB);
        eprintln!(
            "note: only {} MiB available; using a cache of {} MiB",
            room >> 20,
            size >> 20
        );
    }
    let rss0 = status_bytes("VmRSS");
    let t0 = Instant::now();
    let cs = CachedStore::new(
        store,
        CacheOptions {
            size: size as usize,
            ..CacheOptions::default()
        },
    )
    .unwrap();
    let made = t0.elapsed();
    let cf = cs.open_file("f").unwrap();
    let t1 = Instant::now();
    let mut q = cs.queue(32);
    // One page: read with READ_FIXED into its frame, whose chunk the ring
    // registers (pins) first.
    let offset = 123 * 4096;
    q.submit(vec![setcache::CachedRequest::tagged(
        OpKind::Read,
        &cf,
        offset,
        vec![0; 4096],
        1,
    )]);
    while q.outstanding() > 0 {
        q.wait(1);
    }
    let mut done = Vec::new();
    q.take_completions(&mut done);
    let read = t1.elapsed();
    assert_eq!(done.len(), 1);
    let c = &done[0].1;
    assert!(c.result.is_ok(), "{:?}", c.result);
    assert!(!c.hit, "the page came from the device");
    let at = offset as usize;
    assert!(c.buf[..] == data[at..at + 4096], "wrong bytes");
    let (rss, hwm) = (status_bytes("VmRSS"), status_bytes("VmHWM"));
    eprintln!(
        "cache of {} MiB: new {:?}, queue and one read {:?}; VmRSS {} MiB (before the cache {} MiB), VmHWM {} MiB",
        size >> 20,
        made,
        read,
        rss >> 20,
        rss0 >> 20,
        hwm >> 20
    );
    assert!(
        hwm < 200_000_000,
        "peak resident memory {} MB with a {} MiB cache after one read",
        hwm / 1_000_000,
        size >> 20
    );
    drop(q);
    drop(cf);
}

/// A cache of 1 PiB is refused at once, naming both sizes.
#[test]
fn a_one_pib_cache_is_refused_at_once() {
    let _serial = one_at_a_time();
    let tmp = TempDir::new("memory-pib");
    let store = uring_store(&tmp);
    let t0 = Instant::now();
    let e = CachedStore::new(
        store,
        CacheOptions {
            size: 1 << 50,
            ..CacheOptions::default()
        },
    )
    .err()
    .expect("a 1 PiB cache is refused");
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
    check_refusal(&e, "1 PiB", 1 << 50);
}

/// A cache just above what the machine has available is refused at once,
/// through `CachedStore::new` and `PageCache::new` alike; one well below is
/// not.
#[test]
fn a_cache_just_above_mem_available_is_refused() {
    let _serial = one_at_a_time();
    // 1 GiB above MemAvailable + SwapFree: other processes freeing memory
    // meanwhile cannot make it fit.
    let size = machine_available() + GIB;
    let asked = format!("{:.1} GiB", size as f64 / GIB as f64);
    let asked = asked
        .strip_suffix(".0 GiB")
        .map_or(asked.clone(), |n| format!("{n} GiB"));
    let tmp = TempDir::new("memory-above");
    let store = uring_store(&tmp);
    let t0 = Instant::now();
    let opts = CacheOptions {
        size: size as usize,
        ..CacheOptions::default()
    };
    let e = CachedStore::new(store.clone(), opts.clone())
        .err()
        .expect("a cache above MemAvailable is refused");
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
    check_refusal(&e, &asked, size);
    let e = PageCache::<setcache::cache::sync::Os>::new(opts)
        .err()
        .expect("refused");
    check_refusal(&e, &asked, size);
    // A small cache is fine.
    CachedStore::new(
        store,
        CacheOptions {
            size: 64 << 20,
            ..CacheOptions::default()
        },
    )
    .unwrap();
}

/// `max_size` only reserves address space, so a cache may be made with one
/// above the machine's memory; growing past what the machine can give is then
/// refused at once, leaving the cache as it was, and a modest growth works.
#[test]
fn growing_past_the_machines_memory_is_refused() {
    let _serial = one_at_a_time();
    let max = (machine_available() + 4 * GIB) as usize;
    let c: PageCache = PageCache::new(CacheOptions {
        size: 16 << 20,
        max_size: Some(max),
        assoc: 4,
        ..CacheOptions::default()
    })
    .unwrap();
    let sets = c.sets();
    let t0 = Instant::now();
    let e = c.resize(max).expect_err("growing to max_size is refused");
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
    let Error::NotEnoughMemory {
        needed, available, ..
    } = &e
    else {
        panic!("expected NotEnoughMemory, got: {e}");
    };
    assert!(needed > available, "{e}");
    let msg = e.to_string();
    assert!(
        msg.starts_with("growing the cache from 16 MiB to "),
        "{msg}"
    );
    assert!(msg.contains("this machine can give (MemAvailable"), "{msg}");
    assert_eq!(c.sets(), sets, "a refused growth changes nothing");
    c.resize(32 << 20).unwrap();
    assert_eq!(c.sets(), 2 * sets);
}
