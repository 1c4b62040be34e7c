//! Writes through the page cache killed with SIGKILL at random moments.
//!
//! The test re-executes its own binary as a child that opens a store of two
//! devices behind a small page cache (so pages are evicted, victims written and
//! the flusher busy all the time) and writes self-checking records at random,
//! unaligned offsets of one file, some with `CachedFile::write_at`, some through
//! a `CachedQueue` (whose requests in flight together have no order among
//! themselves, so a queued batch's records never overlap each other). It prints `@w <seq> <offset> <length>` before each record, so
//! the parent knows every record that may have reached the file, and `@sync`
//! before each `CachedFile::sync`. Only after a sync returned Ok does it append
//! one line to a side log (write + fdatasync) naming the records that sync made
//! durable. The parent kills it after a random few milliseconds, reopens the
//! store and the cache, and checks every byte of the file against a model:
//! a byte whose last confirmed record no later record overlaps holds exactly
//! that record's value; any other byte holds its value from before the cycle or
//! the value of a record started in the cycle that covers it (old, new or torn,
//! nothing else). Then it takes what it read as the model for the next cycle (a
//! killed process loses nothing the kernel already has).

mod common;

use std::fs::OpenOptions;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Killer, Rng, TempDir, small_cache};
use setcache::layout::mix64;
use setcache::{CachedRequest, CachedStore, EngineKind, LayoutKind, Store, StoreOptions};

const CHILD_DIR: &str = "SETCACHE_KILL_DATA_DIR";
const CHILD_SEED: &str = "SETCACHE_KILL_DATA_SEED";
const CHILD_DIRECT: &str = "SETCACHE_KILL_DATA_DIRECT";
const ENTRY: &str = "cached_writes_survive_sigkill";
const NAME: &str = "data";
/// Three MiB and a bit: not a whole number of pages.
const FILE_LEN: u64 = 3 * 1024 * 1024 + 1234;
/// 128 pages of 4 KiB: a sixth of the file.
const CACHE_PAGES: usize = 128;
const MAGIC: u32 = 0x4b44_4353;
const HEADER: usize = 32;
/// The side log of confirmed records, next to the devices.
const LOG: &str = "confirmed.log";

fn roots(dir: &Path) -> Vec<PathBuf> {
    (0..2).map(|i| dir.join(format!("dev{i}"))).collect()
}

fn opts(direct: bool) -> StoreOptions {
    StoreOptions {
        engine: EngineKind::Psync,
        psync_threads: 2,
        block_pages: 2, // 8 KiB stripe unit: records span both devices
        direct_io: direct,
        ..StoreOptions::default()
    }
}

fn open(dir: &Path, direct: bool) -> CachedStore {
    let store = Store::open(&roots(dir), opts(direct)).unwrap();
    CachedStore::new(store, small_cache(CACHE_PAGES)).unwrap()
}

/// Checksum of a record's payload.
fn checksum(payload: &[u8]) -> u64 {
    payload
        .iter()
        .fold(0x1234_5678_9abc_def1, |h, &b| mix64(h ^ b as u64))
}

/// The bytes of record `seq` of `len` bytes at `off`: a header (magic, length,
/// sequence number, offset, checksum of the payload), then the payload.
fn record(seq: u64, off: u64, len: usize) -> Vec<u8> {
    assert!(len > HEADER);
    let mut r = vec![0u8; len];
    let mut x = mix64(seq ^ 0x7e57_da7a);
    for (i, b) in r[HEADER..].iter_mut().enumerate() {
        if i % 8 == 0 {
            x = mix64(x.wrapping_add(i as u64));
        }
        *b = (x >> (8 * (i % 8))) as u8;
    }
    let sum = checksum(&r[HEADER..]);
    r[0..4].copy_from_slice(&MAGIC.to_le_bytes());
    r[4..8].copy_from_slice(&(len as u32).to_le_bytes());
    r[8..16].copy_from_slice(&seq.to_le_bytes());
    r[16..24].copy_from_slice(&off.to_le_bytes());
    r[24..32].copy_from_slice(&sum.to_le_bytes());
    r
}

/// The child: records written until killed (or a time limit, should the parent be
/// gone). Sequence numbers start at `seed << 32`.
fn child(dir: &Path, seed: u64, direct: bool) {
    let cs = open(dir, direct);
    let f = cs.open_file(NAME).unwrap();
    assert_eq!(f.len(), FILE_LEN);
    let mut log = OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(LOG))
        .unwrap();
    let mut out = std::io::stdout();
    let mut say = |line: String| {
        // One write per line, so a kill never leaves half a line.
        out.write_all(format!("{line}\n").as_bytes()).unwrap();
        out.flush().unwrap();
    };
    say("@ready".to_string());
    let mut rng = Rng(seed.wrapping_mul(0x2545_f491_4f6c_dd1d) | 1);
    let mut seq = seed << 32;
    // Records written since the last good sync: (offset, length, seq, checksum).
    let mut since: Vec<(u64, usize, u64, u64)> = Vec::new();
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(20) {
        let batch = 1 + rng.below(12) as usize;
        let queued = rng.below(3) == 0;
        say(format!("@b {}", if queued { "queue" } else { "write_at" }));
        let mut q = queued.then(|| cs.queue(8));
        let mut reqs = Vec::new();
        for in_batch in 0..batch {
            let len = match rng.below(10) {
                0..=5 => HEADER + 1 + rng.below(600) as usize,
                6..=8 => HEADER + 1 + rng.below(9000) as usize,
                _ => HEADER + 1 + rng.below(40_000) as usize,
            };
            // Requests in flight on one queue at once have no order among
            // themselves: a queued batch's records do not overlap each other.
            let off = loop {
                let off = rng.below(FILE_LEN - len as u64 + 1);
                let clear = |&&(o, l, _, _): &&(u64, usize, u64, u64)| {
                    off + len as u64 <= o || o + l as u64 <= off
                };
                if !queued || since[since.len() - in_batch..].iter().all(|x| clear(&x)) {
                    break off;
                }
            };
            seq += 1;
            let r = record(seq, off, len);
            since.push((off, len, seq, checksum(&r[HEADER..])));
            say(format!("@w {seq} {off} {len}"));
            if q.is_some() {
                reqs.push(CachedRequest::write(&f, off, r, |c| {
                    c.result.unwrap();
                }));
            } else {
                f.write_at(off, &r).unwrap();
            }
        }
        if let Some(q) = q.as_mut() {
            q.submit(reqs);
            q.drain();
            assert_eq!(q.outstanding(), 0);
        }
        drop(q);
        if rng.below(3) == 0 {
            say("@sync".to_string());
            f.sync().unwrap();
            say("@synced".to_string());
            let mut line = String::from("c");
            for (off, len, s, sum) in since.drain(..) {
                line.push_str(&format!(" {off}:{len}:{s}:{sum}"));
            }
            line.push('\n');
            log.write_all(line.as_bytes()).unwrap();
            log.sync_data().unwrap();
        }
    }
}

#[derive(Debug, Default)]
struct Tally {
    cycles: u32,
    reopen_failures: u32,
    records_started: u64,
    records_confirmed: u64,
    syncs_confirmed: u64,
    /// Bytes last written by a confirmed record no later record overlaps, checked.
    bytes_confirmed_verified: u64,
    /// Bytes checked in all (every byte of the file, every cycle).
    bytes_verified: u64,
    /// Bytes that a record started but not confirmed left new (or torn).
    bytes_unconfirmed_new: u64,
    kills_during_sync: u32,
    kills_after_sync: u32,
    kills_while_writing: u32,
    kills_starting: u32,
}

#[derive(Debug, Clone, Copy)]
struct Rec {
    seq: u64,
    off: u64,
    len: usize,
}

fn read_all(cs: &CachedStore) -> Vec<u8> {
    let f = cs.open_file(NAME).unwrap();
    assert_eq!(f.len(), FILE_LEN, "the file's length changed");
    let mut b = vec![0u8; FILE_LEN as usize];
    assert_eq!(f.read_at(0, &mut b).unwrap(), b.len());
    b
}

fn kill_loop(dir: &Path, cycles: u32, direct: bool, max_delay_ms: u64) -> Tally {
    for r in roots(dir) {
        std::fs::create_dir_all(r).unwrap();
    }
    {
        let cs = open(dir, direct);
        let f = cs.create(NAME, FILE_LEN, LayoutKind::Stripe).unwrap();
        f.sync().unwrap();
    }
    let mut model = vec![0u8; FILE_LEN as usize];
    let mut rng = Rng(0xda7a ^ cycles as u64);
    let mut tally = Tally::default();
    let mut ready_us = (0u64, 0u32);
    for cycle in 0..cycles {
        let _ = std::fs::remove_file(dir.join(LOG));
        let cmd = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", ENTRY, "--nocapture", "--test-threads=1"])
            .env(CHILD_DIR, dir)
            .env(CHILD_SEED, (cycle + 1).to_string())
            .env(CHILD_DIRECT, if direct { "1" } else { "0" })
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut child = Killer(cmd);
        let lines = Arc::new(Mutex::new(Vec::<String>::new()));
        let reader = {
            let out = child.0.stdout.take().unwrap();
            let lines = lines.clone();
            std::thread::spawn(move || {
                let mut r = BufReader::new(out);
                let mut buf = Vec::new();
                while r.read_until(b'\n', &mut buf).unwrap_or(0) > 0 {
                    if buf.ends_with(b"\n") {
                        let s = String::from_utf8_lossy(&buf).to_string();
                        // The harness prints its own words before the child's first line.
                        if let Some(at) = s.find('@') {
                            lines.lock().unwrap().push(s[at..].trim_end().to_string());
                        }
                    }
                    buf.clear();
                }
            })
        };
        // Most kills once the child is at work; some at any moment of its start.
        let t = Instant::now();
        let early = rng.below(8) == 0;
        if !early {
            while lines.lock().unwrap().is_empty() {
                assert!(
                    t.elapsed() < Duration::from_secs(20),
                    "cycle {cycle}: the child never got ready"
                );
                if let Ok(Some(st)) = child.0.try_wait() {
                    panic!("cycle {cycle}: the child exited early: {st}");
                }
                std::thread::sleep(Duration::from_micros(200));
            }
            ready_us.0 += t.elapsed().as_micros() as u64;
            ready_us.1 += 1;
        }
        let window_us = if early {
            2 * ready_us.0 / ready_us.1.max(1) as u64
        } else {
            max_delay_ms * 1000
        };
        std::thread::sleep(Duration::from_micros(rng.below(window_us + 1)));
        drop(child); // SIGKILL, and wait
        reader.join().unwrap();
        let lines = std::mem::take(&mut *lines.lock().unwrap());

        // What the child started, in order.
        let mut started: Vec<Rec> = Vec::new();
        for l in &lines {
            let w: Vec<&str> = l.split_whitespace().collect();
            if w[0] == "@w" {
                started.push(Rec {
                    seq: w[1].parse().unwrap(),
                    off: w[2].parse().unwrap(),
                    len: w[3].parse().unwrap(),
                });
            }
        }
        match lines.last().map(String::as_str) {
            None => tally.kills_starting += 1,
            Some("@sync") => tally.kills_during_sync += 1,
            Some("@synced") => tally.kills_after_sync += 1,
            Some(_) => tally.kills_while_writing += 1,
        }
        tally.records_started += started.len() as u64;
        // What the side log confirms: whole lines only (a kill may cut the last).
        let log = std::fs::read(dir.join(LOG)).unwrap_or_default();
        let whole = log.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        let mut confirmed = 0usize;
        for line in String::from_utf8(log[..whole].to_vec()).unwrap().lines() {
            let mut w = line.split_whitespace();
            assert_eq!(w.next(), Some("c"), "cycle {cycle}: log line {line:?}");
            for item in w {
                let v: Vec<u64> = item.split(':').map(|x| x.parse().unwrap()).collect();
                let r = started
                    .get(confirmed)
                    .unwrap_or_else(|| panic!("cycle {cycle}: {item} confirmed, never started"));
                assert_eq!(
                    (r.off, r.len as u64, r.seq),
                    (v[0], v[1], v[2]),
                    "cycle {cycle}: the log confirms records out of order"
                );
                let bytes = record(r.seq, r.off, r.len);
                assert_eq!(checksum(&bytes[HEADER..]), v[3], "cycle {cycle}: checksum");
                confirmed += 1;
            }
            tally.syncs_confirmed += 1;
        }
        tally.records_confirmed += confirmed as u64;

        // The model: `base` is the value before the cycle overwritten by the
        // confirmed records in order; `floor` the index (plus one) in `started` of
        // the last confirmed record covering each byte.
        let mut base = model.clone();
        let mut floor = vec![0u32; FILE_LEN as usize];
        for (i, r) in started[..confirmed].iter().enumerate() {
            let bytes = record(r.seq, r.off, r.len);
            let at = r.off as usize;
            base[at..at + r.len].copy_from_slice(&bytes);
            floor[at..at + r.len].fill(i as u32 + 1);
        }
        // Bytes some record after the last confirmed one covering them overlaps.
        let mut touched = vec![false; FILE_LEN as usize];
        let later: Vec<(usize, Rec, Vec<u8>)> = started
            .iter()
            .enumerate()
            .map(|(i, r)| (i, *r, record(r.seq, r.off, r.len)))
            .filter(|(i, r, _)| {
                let at = r.off as usize;
                (at..at + r.len).any(|b| floor[b] as usize <= *i)
            })
            .collect();
        for (i, r, _) in &later {
            let at = r.off as usize;
            for b in at..at + r.len {
                if floor[b] as usize <= *i {
                    touched[b] = true;
                }
            }
        }

        let cs = match Store::open(&roots(dir), opts(direct)) {
            Ok(s) => CachedStore::new(s, small_cache(CACHE_PAGES)).unwrap(),
            Err(e) => {
                tally.reopen_failures += 1;
                report(&tally);
                panic!("cycle {cycle}: the store does not reopen: {e}");
            }
        };
        let actual = read_all(&cs);
        drop(cs);
        for b in 0..FILE_LEN as usize {
            let x = actual[b];
            if !touched[b] {
                if x != base[b] {
                    let by = match floor[b] {
                        0 => "from before the cycle".to_string(),
                        i => format!("of confirmed record {:?}", started[i as usize - 1]),
                    };
                    let wrong = (b..FILE_LEN as usize)
                        .take_while(|&c| !touched[c] && actual[c] != base[c])
                        .count();
                    let old = (b..b + wrong).all(|c| actual[c] == model[c]);
                    let batch = lines
                        .iter()
                        .take_while(|l| {
                            !l.starts_with(&format!(
                                "@w {} ",
                                started[floor[b].max(1) as usize - 1].seq
                            ))
                        })
                        .filter(|l| l.starts_with("@b"))
                        .last();
                    panic!(
                        "cycle {cycle}: byte {b} is {x}, not {} {by}; {wrong} bytes wrong from there (all as before the cycle: {old}); the record was written by {batch:?}; {} records started, {confirmed} confirmed; last line {:?}",
                        base[b],
                        started.len(),
                        lines.last()
                    );
                }
                if floor[b] > 0 {
                    tally.bytes_confirmed_verified += 1;
                }
                continue;
            }
            if x == base[b] {
                continue;
            }
            let ok = later.iter().any(|(i, r, bytes)| {
                let at = r.off as usize;
                *i + 1 > floor[b] as usize && (at..at + r.len).contains(&b) && bytes[b - at] == x
            });
            assert!(
                ok,
                "cycle {cycle}: byte {b} is {x}: neither {} (before) nor the value of any record started after the last confirmed one covering it",
                base[b]
            );
            tally.bytes_unconfirmed_new += 1;
        }
        tally.bytes_verified += FILE_LEN;
        model = actual;
        tally.cycles += 1;
    }
    tally
}

fn report(t: &Tally) {
    eprintln!(
        "data kill loop: {} cycles, {} failed reopens; {} records started, {} confirmed by {} syncs; {} bytes verified, {} of them of confirmed records; {} bytes left new by unconfirmed records; kills: {} during sync, {} after a sync before its log line, {} while writing, {} while starting",
        t.cycles,
        t.reopen_failures,
        t.records_started,
        t.records_confirmed,
        t.syncs_confirmed,
        t.bytes_verified,
        t.bytes_confirmed_verified,
        t.bytes_unconfirmed_new,
        t.kills_during_sync,
        t.kills_after_sync,
        t.kills_while_writing,
        t.kills_starting,
    );
}

fn child_role() -> bool {
    let Some((dir, seed, direct)) = common::child_env(CHILD_DIR, CHILD_SEED, CHILD_DIRECT) else {
        return false;
    };
    child(&dir, seed, direct);
    true
}

fn check(t: &Tally, cycles: u32) {
    report(t);
    assert_eq!(t.reopen_failures, 0);
    assert!(
        t.records_confirmed > 0 && t.bytes_confirmed_verified > 0,
        "no confirmed record was checked: {t:?}"
    );
    assert!(
        t.kills_during_sync + t.kills_while_writing >= cycles / 4,
        "too few kills landed while the child was at work: {t:?}"
    );
}

/// 100 kills, on tmpfs where there is one (a killed process loses nothing more on
/// a disk than on tmpfs); SETCACHE_KILL_CYCLES sets the number.
#[test]
fn cached_writes_survive_sigkill() {
    if child_role() {
        return;
    }
    let cycles = common::kill_cycles(100);
    let dir = common::FastDir::new("kill-data");
    let t = kill_loop(dir.path(), cycles, false, 30);
    drop(dir);
    check(&t, cycles);
}

/// The same on the target directory's disk with O_DIRECT, real fsyncs and longer
/// waits; 1000 cycles unless SETCACHE_KILL_CYCLES says otherwise.
#[test]
#[ignore = "long: run with --ignored"]
fn cached_writes_survive_sigkill_on_disk() {
    let cycles = common::kill_cycles(1000);
    let tmp = TempDir::new("kill-data-disk");
    let t = kill_loop(tmp.path(), cycles, true, 60);
    check(&t, cycles);
}
