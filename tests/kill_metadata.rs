//! Metadata operations killed with SIGKILL at random moments.
//!
//! The test re-executes its own binary as a child that opens a store of three
//! devices and runs random creates, deletes, renames (plain and replacing), length
//! changes and whole-file writes in a loop, printing `begin <op>` before each and `done` after. The parent
//! kills it after a random few milliseconds, reopens the store (which finishes or
//! undoes the interrupted operation), and checks the files against a model of what
//! the child did: every name listed opens, and the store is exactly the model, or
//! the model with the interrupted operation done. On some cycles the parent does
//! not look, so that the next child does the recovery and may itself be killed in
//! the middle of it.

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Killer, Rng, TempDir};
use setcache::{AlignedBuf, EngineKind, LayoutKind, Store, StoreOptions};

const CHILD_DIR: &str = "SETCACHE_KILL_CHILD_DIR";
const CHILD_SEED: &str = "SETCACHE_KILL_CHILD_SEED";
const CHILD_DIRECT: &str = "SETCACHE_KILL_CHILD_DIRECT";
const ENTRY: &str = "metadata_operations_survive_sigkill";
const NAMES: [&str; 4] = ["a", "b", "c", "d"];
/// The lengths the child sets: odd ones, whole sectors, whole blocks, several stripes.
const LENS: [u64; 8] = [9, 512, 777, 4096, 5000, 12_289, 65_536, 100_003];
const LAYOUTS: [LayoutKind; 3] = [LayoutKind::Stripe, LayoutKind::Rotated, LayoutKind::Hash];

fn roots(dir: &Path) -> Vec<PathBuf> {
    (0..3).map(|i| dir.join(format!("dev{i}"))).collect()
}

fn opts(direct: bool) -> StoreOptions {
    StoreOptions {
        engine: EngineKind::Psync,
        psync_threads: 1,
        block_pages: 1, // 4 KiB stripe unit: files of a few KiB span the devices
        direct_io: direct,
        ..StoreOptions::default()
    }
}

/// Byte `i` of a file filled with `seed`: never zero, so where the data ends and
/// the zeros begin is plain to see.
fn byte(seed: u64, i: u64) -> u8 {
    (setcache::layout::mix64(seed ^ i.wrapping_mul(0x9e37_79b9_7f4a_7c15)) % 255) as u8 + 1
}

/// Write the whole file with `seed` (zeros past its length in its last sector),
/// then sync.
fn fill(f: &setcache::File, seed: u64) {
    let len = f.len();
    let mut b = AlignedBuf::new(len.next_multiple_of(512) as usize);
    for (i, x) in b.iter_mut().enumerate() {
        *x = if (i as u64) < len {
            byte(seed, i as u64)
        } else {
            0
        };
    }
    f.write_at(0, &b).unwrap();
    f.sync().unwrap();
}

/// The child: random metadata operations until killed (or a time limit, should the
/// parent be gone).
fn child(dir: &Path, seed: u64, direct: bool) {
    let store = Store::open(&roots(dir), opts(direct)).unwrap();
    let mut files: BTreeMap<String, u64> = BTreeMap::new();
    for n in store.list().unwrap() {
        let len = store.info(&n).unwrap().len;
        files.insert(n, len);
    }
    let listing: Vec<String> = files.iter().map(|(n, l)| format!("{n}:{l}")).collect();
    let mut out = std::io::stdout();
    let mut say = |line: String| {
        // One write per line, so a kill never leaves half a line.
        out.write_all(format!("{line}\n").as_bytes()).unwrap();
        out.flush().unwrap();
    };
    say(format!("ready {}", listing.join(" ")));
    let mut rng = Rng(seed.wrapping_mul(0x2545_f491_4f6c_dd1d) | 1);
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(20) {
        let present: Vec<&str> = NAMES
            .iter()
            .copied()
            .filter(|n| files.contains_key(*n))
            .collect();
        let absent: Vec<&str> = NAMES
            .iter()
            .copied()
            .filter(|n| !files.contains_key(*n))
            .collect();
        let pick = |rng: &mut Rng, v: &[&str]| v[rng.below(v.len() as u64) as usize].to_string();
        let len = LENS[rng.below(LENS.len() as u64) as usize];
        match rng.below(11) {
            0..=2 if !absent.is_empty() => {
                let n = pick(&mut rng, &absent);
                let layout = LAYOUTS[rng.below(3) as usize];
                say(format!("begin create {n} {len}"));
                store.create(&n, len, layout).unwrap();
                files.insert(n, len);
            }
            3 if !present.is_empty() => {
                let n = pick(&mut rng, &present);
                say(format!("begin delete {n}"));
                store.delete(&n).unwrap();
                files.remove(&n);
            }
            4 | 5 if !present.is_empty() && !absent.is_empty() => {
                let (from, to) = (pick(&mut rng, &present), pick(&mut rng, &absent));
                say(format!("begin rename {from} {to}"));
                store.rename(&from, &to).unwrap();
                let l = files.remove(&from).unwrap();
                files.insert(to, l);
            }
            6..=8 if !present.is_empty() => {
                let n = pick(&mut rng, &present);
                say(format!("begin setlen {n} {len}"));
                store.open_file(&n).unwrap().set_len(len).unwrap();
                files.insert(n, len);
            }
            9 if !present.is_empty() => {
                let n = pick(&mut rng, &present);
                let s = rng.next();
                say(format!("begin fill {n} {s}"));
                fill(&store.open_file(&n).unwrap(), s);
            }
            10 if present.len() >= 2 => {
                let from = pick(&mut rng, &present);
                let others: Vec<&str> = present.iter().copied().filter(|n| *n != from).collect();
                let to = pick(&mut rng, &others);
                say(format!("begin replace {from} {to}"));
                store.replace(&from, &to).unwrap();
                let l = files.remove(&from).unwrap();
                files.insert(to, l);
            }
            _ => continue,
        }
        say("done".to_string());
    }
}

/// What a file holds: `seed`'s bytes up to `data`, zeros after, to the end of its
/// last sector.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FileModel {
    len: u64,
    seed: u64,
    data: u64,
}

type Model = BTreeMap<String, FileModel>;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Op {
    Create(String, u64),
    Delete(String),
    Rename(String, String),
    Replace(String, String),
    SetLen(String, u64),
    Fill(String, u64),
}

fn parse(line: &str) -> Op {
    let w: Vec<&str> = line.split_whitespace().collect();
    let num = |s: &str| s.parse::<u64>().unwrap();
    match w[..] {
        ["begin", "create", n, l] => Op::Create(n.into(), num(l)),
        ["begin", "delete", n] => Op::Delete(n.into()),
        ["begin", "rename", a, b] => Op::Rename(a.into(), b.into()),
        ["begin", "replace", a, b] => Op::Replace(a.into(), b.into()),
        ["begin", "setlen", n, l] => Op::SetLen(n.into(), num(l)),
        ["begin", "fill", n, s] => Op::Fill(n.into(), num(s)),
        _ => panic!("child said {line:?}"),
    }
}

fn apply(m: &Model, op: &Op) -> Model {
    let mut m = m.clone();
    match op {
        Op::Create(n, len) => {
            assert!(
                m.insert(
                    n.clone(),
                    FileModel {
                        len: *len,
                        seed: 0,
                        data: 0
                    }
                )
                .is_none()
            );
        }
        Op::Delete(n) => {
            m.remove(n).unwrap();
        }
        Op::Rename(a, b) => {
            let f = m.remove(a).unwrap();
            assert!(m.insert(b.clone(), f).is_none());
        }
        Op::Replace(a, b) => {
            let f = m.remove(a).unwrap();
            assert!(m.insert(b.clone(), f).is_some());
        }
        Op::SetLen(n, len) => {
            let f = m.get_mut(n).unwrap();
            f.len = *len;
            f.data = f.data.min(*len);
        }
        Op::Fill(n, seed) => {
            let f = m.get_mut(n).unwrap();
            f.seed = *seed;
            f.data = f.len;
        }
    }
    m
}

/// The store's files: length and every byte to the end of the last sector. Every
/// listed name must open.
fn actual(store: &Store) -> BTreeMap<String, (u64, Vec<u8>)> {
    let mut out = BTreeMap::new();
    for n in store.list().unwrap() {
        let f = store
            .open_file(&n)
            .unwrap_or_else(|e| panic!("{n:?} is listed but does not open: {e}"));
        let mut b = AlignedBuf::new(f.len().next_multiple_of(512) as usize);
        f.read_at(0, &mut b).unwrap();
        out.insert(n, (f.len(), b.to_vec()));
    }
    out
}

/// Whether the store holds exactly `m`; the contents of `torn` (a file whose
/// whole-file write was cut short) are not looked at.
fn holds(a: &BTreeMap<String, (u64, Vec<u8>)>, m: &Model, torn: Option<&str>) -> bool {
    a.len() == m.len()
        && m.iter().all(|(n, f)| {
            let Some((len, bytes)) = a.get(n) else {
                return false;
            };
            *len == f.len
                && (torn == Some(n.as_str())
                    || bytes.iter().enumerate().all(|(i, &x)| {
                        x == if (i as u64) < f.data {
                            byte(f.seed, i as u64)
                        } else {
                            0
                        }
                    }))
        })
}

fn describe(a: &BTreeMap<String, (u64, Vec<u8>)>) -> String {
    a.iter()
        .map(|(n, (l, b))| {
            let data = b.iter().position(|&x| x == 0).unwrap_or(b.len());
            format!("{n}: {l} bytes, first zero at {data}")
        })
        .collect::<Vec<_>>()
        .join("; ")
}

#[derive(Debug, Default)]
struct Tally {
    cycles: u32,
    /// Kills while a create, delete, rename, set_len or fill was in flight.
    in_flight: BTreeMap<&'static str, u32>,
    /// Of those, how many the reopened store (or the next child) showed done.
    finished: BTreeMap<&'static str, u32>,
    /// Children killed before they were ready, after a cycle the parent did not check
    /// (so possibly during their own recovery).
    killed_starting: u32,
    ops_done: u64,
    /// Microseconds from spawning a child to its `ready`, summed over the children
    /// waited for.
    ready_us: (u64, u32),
}

fn kill_loop(dir: &Path, cycles: u32, direct: bool, max_delay_ms: u64) -> Tally {
    for r in roots(dir) {
        std::fs::create_dir_all(r).unwrap();
    }
    let mut rng = Rng(0x5eed ^ cycles as u64);
    // The states the store may be in (two when a cycle was not checked).
    let mut models: Vec<Model> = vec![Model::new()];
    let mut tally = Tally::default();
    let mut checked_last = true;
    // Past `cycles`, up to twice as many, until a quarter of the kills have
    // landed in a metadata operation: on a loaded machine the children do
    // less in the same delays, so fewer kills catch one.
    for cycle in 0..2 * cycles {
        if cycle >= cycles && metadata_kills(&tally) >= cycles / 4 {
            break;
        }
        let cmd = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", ENTRY, "--nocapture", "--test-threads=1"])
            .env(CHILD_DIR, dir)
            .env(CHILD_SEED, cycle.to_string())
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
                        let at = ["ready", "begin", "done"]
                            .iter()
                            .filter_map(|k| s.find(k))
                            .min();
                        if let Some(at) = at {
                            lines.lock().unwrap().push(s[at..].trim_end().to_string());
                        }
                    }
                    buf.clear();
                }
            })
        };
        // Kill a child that follows an unchecked cycle at any moment from its start
        // (it may be recovering); others once they are at work.
        let t = Instant::now();
        if checked_last {
            while !lines.lock().unwrap().iter().any(|l| l.starts_with("ready")) {
                assert!(
                    t.elapsed() < Duration::from_secs(20),
                    "cycle {cycle}: the child never got ready"
                );
                if let Ok(Some(st)) = child.0.try_wait() {
                    panic!("cycle {cycle}: the child exited early: {st}");
                }
                std::thread::sleep(Duration::from_micros(200));
            }
            tally.ready_us.0 += t.elapsed().as_micros() as u64;
            tally.ready_us.1 += 1;
        }
        // A starting child takes a few milliseconds to reach its recovery.
        let window_us = if checked_last {
            max_delay_ms * 1000
        } else {
            // Around the time a child takes to get ready (its recovery is just before).
            2 * tally.ready_us.0 / tally.ready_us.1.max(1) as u64
        };
        std::thread::sleep(Duration::from_micros(rng.below(window_us + 1)));
        drop(child); // SIGKILL, and wait
        reader.join().unwrap();
        let lines = std::mem::take(&mut *lines.lock().unwrap());
        // What the child saw at its start settles which state an unchecked cycle left.
        let mut ops = lines.iter();
        match ops.next() {
            Some(first) => {
                let listing: BTreeMap<String, u64> = first
                    .split_whitespace()
                    .skip(1)
                    .map(|kv| {
                        let (k, v) = kv.split_once(':').unwrap();
                        (k.to_string(), v.parse().unwrap())
                    })
                    .collect();
                models.retain(|m| {
                    m.len() == listing.len()
                        && m.iter().all(|(n, f)| listing.get(n) == Some(&f.len))
                });
                assert!(
                    !models.is_empty(),
                    "cycle {cycle}: the child found {first:?}"
                );
                // Two candidates that list the same hold the same (see `apply`).
                models.truncate(1);
            }
            None => tally.killed_starting += !checked_last as u32,
        }
        let mut in_flight = None;
        for l in ops {
            if l == "done" {
                let op = in_flight.take().expect("done without begin");
                models = models.iter().map(|m| apply(m, &op)).collect();
                tally.ops_done += 1;
            } else {
                assert!(in_flight.is_none(), "cycle {cycle}: begin without done");
                in_flight = Some(parse(l));
            }
        }
        let kind = match &in_flight {
            Some(Op::Create(..)) => "create",
            Some(Op::Delete(..)) => "delete",
            Some(Op::Rename(..)) => "rename",
            Some(Op::Replace(..)) => "replace",
            Some(Op::SetLen(..)) => "set_len",
            Some(Op::Fill(..)) => "fill",
            None => "nothing",
        };
        *tally.in_flight.entry(kind).or_default() += 1;
        let with: Vec<Model> = match &in_flight {
            Some(op) => models.iter().map(|m| apply(m, op)).collect(),
            None => Vec::new(),
        };
        // Sometimes leave the recovery to the next child (never after a torn fill,
        // whose file the parent must rewrite).
        let filling = matches!(in_flight, Some(Op::Fill(..)));
        if checked_last && !filling && in_flight.is_some() && rng.below(3) == 0 {
            models.extend(with);
            models.dedup();
            checked_last = false;
            tally.cycles += 1;
            continue;
        }
        checked_last = true;
        let store = Store::open(&roots(dir), opts(direct))
            .unwrap_or_else(|e| panic!("cycle {cycle}: the store does not open: {e}"));
        let a = actual(&store);
        let torn = match &in_flight {
            Some(Op::Fill(n, _)) => Some(n.as_str()),
            _ => None,
        };
        let before = models.iter().find(|m| holds(&a, m, torn)).cloned();
        let after = with.iter().find(|m| holds(&a, m, torn)).cloned();
        let mut m = match (before, after) {
            (_, Some(m)) => {
                *tally.finished.entry(kind).or_default() += 1;
                m
            }
            (Some(m), None) => m,
            (None, None) => panic!(
                "cycle {cycle}: killed during {in_flight:?}; the store holds {}; expected one of {models:?} or {with:?}",
                describe(&a)
            ),
        };
        if let Some(n) = torn {
            // Rewrite the file whose write was cut short, so its bytes are known again.
            let seed = 1_000_000 + cycle as u64;
            fill(&store.open_file(n).unwrap(), seed);
            let f = m.get_mut(n).unwrap();
            f.seed = seed;
            f.data = f.len;
        }
        for r in roots(dir) {
            for e in std::fs::read_dir(&r).unwrap().flatten() {
                let n = e.file_name().to_string_lossy().to_string();
                // (A child killed while it checked the root may leave its probe.)
                assert!(
                    n == ".setcache-lock"
                        || n.starts_with(".setcache-probe-")
                        || n.ends_with(".scf") && !n.starts_with('.'),
                    "cycle {cycle}: {n} left in {}",
                    r.display()
                );
            }
        }
        models = vec![m];
        tally.cycles += 1;
    }
    tally
}

/// Kills that landed in a create, delete, rename, replace or set_len.
fn metadata_kills(t: &Tally) -> u32 {
    ["create", "delete", "rename", "replace", "set_len"]
        .iter()
        .map(|k| t.in_flight.get(k).copied().unwrap_or(0))
        .sum()
}

fn report(t: &Tally) -> u32 {
    let meta = metadata_kills(t);
    eprintln!(
        "kill loop: {} cycles, {} operations completed; kills with an operation in flight: {:?}; found done when the parent looked: {:?}; {} children killed while starting after an unchecked cycle; a child is ready {} ms after its spawn",
        t.cycles,
        t.ops_done,
        t.in_flight,
        t.finished,
        t.killed_starting,
        t.ready_us.0 / t.ready_us.1.max(1) as u64 / 1000
    );
    meta
}

fn child_role() -> bool {
    let Some((dir, seed, direct)) = common::child_env(CHILD_DIR, CHILD_SEED, CHILD_DIRECT) else {
        return false;
    };
    child(&dir, seed, direct);
    true
}

/// 300 kills (more, up to 600, until 75 landed in a metadata operation), on tmpfs
/// where there is one (fsync is free there, and a killed process loses nothing more
/// on a disk than on tmpfs); SETCACHE_KILL_CYCLES sets the number.
#[test]
fn metadata_operations_survive_sigkill() {
    if child_role() {
        return;
    }
    let cycles = common::kill_cycles(300);
    let dir = common::FastDir::new("kill");
    let t = kill_loop(dir.path(), cycles, false, 6);
    drop(dir);
    let meta = report(&t);
    assert!(
        meta >= cycles / 4,
        "too few kills landed in a metadata operation: {t:?}"
    );
}

/// The same on the target directory's disk with O_DIRECT, real fsyncs and longer
/// waits; 1000 cycles unless SETCACHE_KILL_CYCLES says otherwise.
#[test]
#[ignore = "long: run with --ignored"]
fn metadata_operations_survive_sigkill_on_disk() {
    let cycles = common::kill_cycles(1000);
    let tmp = TempDir::new("kill-disk");
    let t = kill_loop(tmp.path(), cycles, true, 60);
    let meta = report(&t);
    assert!(
        meta >= cycles / 4,
        "too few kills landed in a metadata operation: {t:?}"
    );
}
