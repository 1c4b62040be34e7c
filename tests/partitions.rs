//! The partitioned mode (NUMA-SA): requests sent in bundles to partitions'
//! workers, against a plain byte array across syncs, evictions, resizes and
//! reopens with 1, 2 and 3 partitions; tasks run in the cache; bad input.

mod common;

use std::time::Duration;

use common::{Rng, TempDir, engines, pattern};
use setcache::{
    AlignedBuf, CacheOptions, CachedStore, Error, FlushOptions, LayoutKind, PartCompletion,
    PartitionOptions, Partitions, PolicyKind, Store,
};

fn cache(pages: usize, max_pages: usize, partitions: usize) -> CacheOptions {
    CacheOptions {
        partitions,
        size: pages * 4096,
        max_size: Some(max_pages * 4096),
        page_size: 4096,
        assoc: 4,
        policy: PolicyKind::Gclock,
        pin_wait: Duration::from_secs(5),
    }
}

fn read_all(store: &Store, name: &str, len: usize) -> Vec<u8> {
    let f = store.open_file(name).unwrap();
    let mut b = AlignedBuf::new(len);
    f.read_at(0, &mut b).unwrap();
    b.to_vec()
}

/// A store on one io_uring device holding file `name` of 64 pages, page `i`
/// all bytes `i`.
fn numbered_store(tag: &str, name: &str) -> (TempDir, Store) {
    let tmp = TempDir::new(tag);
    let roots = tmp.devices(1);
    let (_, opts) = engines().into_iter().find(|e| e.0 == "uring").unwrap();
    let store = common::open(&roots, opts, 1);
    let f = store.create(name, 64 * 4096, LayoutKind::Stripe).unwrap();
    let mut b = AlignedBuf::new(64 * 4096);
    for (i, x) in b.iter_mut().enumerate() {
        *x = (i / 4096) as u8;
    }
    f.write_at(0, &b).unwrap();
    drop(f);
    (tmp, store)
}

/// The sum of the page's bytes from `at` to the end, plus `arg`.
fn sum_from(page: &[u8], at: usize, arg: u64) -> u64 {
    page[at..].iter().map(|&b| b as u64).sum::<u64>() + arg
}

/// The threads that ran [`sum_noting`], by its argument (one test uses it).
static RAN_ON: std::sync::Mutex<Vec<(u64, String)>> = std::sync::Mutex::new(Vec::new());

/// [`sum_from`], noting the thread it runs on.
fn sum_noting(page: &[u8], at: usize, arg: u64) -> u64 {
    let name = std::thread::current().name().unwrap_or("").to_string();
    RAN_ON.lock().unwrap().push((arg, name));
    sum_from(page, at, arg)
}

fn with(n: usize) -> PartitionOptions {
    PartitionOptions {
        partitions: Some(n),
        ..PartitionOptions::default()
    }
}

/// Random synchronous reads and writes, and batches of partitioned reads,
/// writes and tasks, syncs, cache resizes (a cache of 16 to 32 pages over a
/// file of 97: evictions all along) and store reopens, against a plain byte
/// array, with 1, 2 and 3 partitions. Every read and task sees the array's
/// bytes; after each reopen the devices hold every write.
#[test]
fn partitions_against_a_byte_array() {
    // Sizes the cache took: a run in which every resize came back busy
    // would not have tested one.
    let mut sizes = std::collections::BTreeSet::new();
    let (_, opts) = engines()
        .into_iter()
        .find(|e| e.0 == "uring")
        .expect("the io_uring engine");
    for parts in [1, 2, 3] {
        let tmp = TempDir::new("parts-diff");
        let roots = tmp.devices(2);
        const LEN: usize = 96 * 4096 + 1536;
        let mut truth = pattern(13, 0, LEN);
        {
            let store = common::open(&roots, opts.clone(), 2);
            let f = store.create("d", LEN as u64, LayoutKind::Rotated).unwrap();
            let mut b = AlignedBuf::new(LEN);
            b.copy_from_slice(&truth);
            f.write_at(0, &b).unwrap();
        }
        let mut rng = Rng(parts as u64 + 5);
        let mut served = vec![0usize; parts];
        for epoch in 0..3 {
            let store = common::open(&roots, opts.clone(), 2);
            assert!(
                read_all(&store, "d", LEN) == truth,
                "{parts} partitions: epoch {epoch}: the devices lost a write"
            );
            let flush = FlushOptions {
                dirty_at: Some(2),
                ..FlushOptions::default()
            };
            let cs = CachedStore::with_flusher(store, cache(16, 32, parts), Some(flush)).unwrap();
            let cf = cs.open_file("d").unwrap();
            let p = Partitions::new(&cs, with(parts)).unwrap();
            assert_eq!(p.count(), parts);
            assert!(p.emulated(), "one node here: emulated");
            // Every request by message, then a thread at home in the first
            // partition, then one at home in the last (its pages served by
            // the thread itself, the rest by message).
            let home = [None, Some(0), Some(parts - 1)][epoch];
            let mut q = p.queue_on(8, home).unwrap();
            assert_eq!(q.home(), home);
            for step in 0..200 {
                match rng.below(10) {
                    0..=1 => {
                        let off = rng.below(LEN as u64) as usize;
                        let n = (1 + rng.below(2 * 4096) as usize).min(LEN - off);
                        let data: Vec<u8> = (0..n).map(|i| (step * 13 + i + epoch) as u8).collect();
                        cf.write_at(off as u64, &data).unwrap();
                        truth[off..off + n].copy_from_slice(&data);
                    }
                    2 => {
                        let off = rng.below(LEN as u64) as usize;
                        let n = (1 + rng.below(3 * 4096) as usize).min(LEN - off);
                        let mut buf = vec![0u8; n];
                        assert_eq!(cf.read_at(off as u64, &mut buf).unwrap(), n);
                        assert!(buf == truth[off..off + n], "sync read {off}+{n}");
                    }
                    3..=7 => {
                        // A batch on disjoint ranges: reads, writes and tasks.
                        let mut taken: Vec<(usize, usize)> = Vec::new();
                        // tag -> what its completion must show.
                        let mut want: Vec<(u64, Want)> = Vec::new();
                        // A task's tag -> the partition that owns its page.
                        let mut owner: Vec<(u64, usize)> = Vec::new();
                        RAN_ON.lock().unwrap().clear();
                        for k in 0..1 + rng.below(12) as usize {
                            let off = rng.below(LEN as u64) as usize;
                            let kind = rng.below(3);
                            let n = (1 + rng.below(2 * 4096) as usize).min(LEN - off);
                            // A task reads the rest of its page.
                            let page_end = ((off / 4096 + 1) * 4096).min(LEN);
                            let end = if kind == 2 { page_end } else { off + n };
                            if taken.iter().any(|&(a, b)| off < b && a < end) {
                                continue;
                            }
                            taken.push((off, end));
                            let tag = (step * 100 + k) as u64;
                            match kind {
                                0 => {
                                    q.read(&cf, off as u64, vec![0; n], tag);
                                    want.push((tag, Want::Bytes(truth[off..off + n].to_vec())));
                                }
                                1 => {
                                    let data: Vec<u8> =
                                        (0..n).map(|i| (step * 3 + i * 7 + k) as u8).collect();
                                    truth[off..off + n].copy_from_slice(&data);
                                    q.write(&cf, off as u64, data, tag);
                                    want.push((tag, Want::Written));
                                }
                                _ => {
                                    // Past the file's end the page reads as zeros.
                                    let sum: u64 =
                                        truth[off..page_end].iter().map(|&b| b as u64).sum();
                                    q.task(&cf, off as u64, sum_noting, tag, tag);
                                    want.push((tag, Want::Value(sum + tag)));
                                    owner.push((tag, p.partition_of(&cf, off as u64)));
                                }
                            }
                        }
                        q.wait(want.len());
                        assert_eq!(q.outstanding(), 0);
                        let mut done: Vec<PartCompletion> = Vec::new();
                        q.take_completions(&mut done);
                        done.sort_by_key(|d| d.tag);
                        want.sort_by_key(|w| w.0);
                        assert_eq!(
                            done.iter().map(|d| d.tag).collect::<Vec<_>>(),
                            want.iter().map(|w| w.0).collect::<Vec<_>>(),
                            "{parts} partitions: step {step}: every request completes once"
                        );
                        for (c, (tag, w)) in done.iter().zip(&want) {
                            assert!(c.result.is_ok(), "tag {tag}: {:?}", c.result);
                            match w {
                                Want::Bytes(b) => assert!(c.buf == *b, "tag {tag}: wrong bytes"),
                                Want::Written => {}
                                Want::Value(v) => assert_eq!(c.value, *v, "tag {tag}: task"),
                            }
                        }
                        // Each task ran once, in the partition that owns its
                        // page: on that partition's worker, or on this thread
                        // when it is at home there.
                        let mut ran = RAN_ON.lock().unwrap().clone();
                        ran.sort();
                        assert_eq!(ran.len(), owner.len(), "{parts} partitions: tasks run");
                        owner.sort();
                        let me = std::thread::current().name().unwrap_or("").to_string();
                        for ((tag, part), (ran_tag, thread)) in owner.iter().zip(&ran) {
                            assert_eq!(tag, ran_tag);
                            let want = match home == Some(*part) {
                                true => me.clone(),
                                false => format!("setcache-part{part}"),
                            };
                            assert_eq!(*thread, want, "{parts} partitions: task {tag}");
                            served[*part] += 1;
                        }
                    }
                    8 => cf.sync().unwrap(),
                    _ => {
                        let pages = [16, 32, 20, 24][rng.below(4) as usize];
                        match cs.cache().resize(pages * 4096) {
                            Ok(()) => {
                                sizes.insert(cs.cache().capacity_pages());
                            }
                            Err(Error::ResizeBusy(_)) => {}
                            Err(e) => panic!("resize: {e}"),
                        }
                    }
                }
            }
            drop(q);
            drop(p);
            cf.close().unwrap();
            assert!(cs.cache().dirty_pages().is_empty(), "dirty after close");
        }
        assert!(
            served.iter().all(|&n| n > 0),
            "{parts} partitions: each ran some tasks: {served:?}"
        );
    }
    assert!(sizes.len() >= 2, "the cache took too few sizes: {sizes:?}");
}

enum Want {
    Bytes(Vec<u8>),
    Written,
    Value(u64),
}

fn panics_on_odd(page: &[u8], _: usize, arg: u64) -> u64 {
    if arg % 2 == 1 {
        panic!("odd argument {arg}");
    }
    page[0] as u64 + arg
}

/// A task that panics fails its own request, naming file, offset and the
/// panic; the partition goes on serving; many threads' queues share the
/// workers, with queues deeper than the requests and as shallow as one, at
/// home in either partition (panics caught on the thread itself) or none.
#[test]
fn a_panicking_task_fails_alone_and_threads_share_the_workers() {
    let (_tmp, store) = numbered_store("parts-panic", "t");
    let cs = CachedStore::new(store, cache(32, 32, 2)).unwrap();
    let cf = cs.open_file("t").unwrap();
    let p = Partitions::new(&cs, with(2)).unwrap();
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let (p, cf) = (&p, &cf);
            s.spawn(move || {
                let home = [None, Some(1), Some(0), None][t as usize];
                let mut q = p.queue_on([1, 2, 7, 64][t as usize], home).unwrap();
                for round in 0..20u64 {
                    for page in 0..64u64 {
                        q.task(cf, page * 4096, panics_on_odd, page + round * 2, page);
                    }
                    q.wait(64);
                    let mut done = Vec::new();
                    q.take_completions(&mut done);
                    assert_eq!(done.len(), 64);
                    for c in done {
                        let page = c.tag;
                        if page % 2 == 1 {
                            let e = c.result.unwrap_err();
                            assert!(matches!(e, Error::TaskPanicked { .. }), "{e:?}");
                            let text = e.to_string();
                            assert!(
                                text.contains("\"t\"")
                                    && text.contains(&format!("{}", page * 4096))
                                    && text.contains("odd argument"),
                                "{text}"
                            );
                        } else {
                            assert!(c.result.is_ok(), "{:?}", c.result);
                            assert_eq!(c.value, page + page + round * 2);
                        }
                    }
                }
            });
        }
    });
}

/// A panic payload whose own drop panics.
struct PanicsWhenDropped;

impl Drop for PanicsWhenDropped {
    fn drop(&mut self) {
        panic!("the payload's drop");
    }
}

fn panics_with_a_bad_payload(_: &[u8], _: usize, _: u64) -> u64 {
    std::panic::panic_any(PanicsWhenDropped)
}

/// A task whose panic payload panics again when dropped fails its own
/// request like any other panicking task; the worker (and the thread at
/// home in a partition) goes on serving, the page's pin released.
#[test]
fn a_task_whose_panic_payload_panics_when_dropped_fails_alone() {
    let (_tmp, store) = numbered_store("parts-payload", "t");
    let cs = CachedStore::new(store, cache(32, 32, 2)).unwrap();
    let cf = cs.open_file("t").unwrap();
    let p = Partitions::new(&cs, with(2)).unwrap();
    for home in [None, Some(0)] {
        let mut q = p.queue_on(8, home).unwrap();
        for page in 0..8u64 {
            q.task(&cf, page * 4096, panics_with_a_bad_payload, 0, page);
        }
        q.drain();
        let mut done = Vec::new();
        q.take_completions(&mut done);
        assert_eq!(done.len(), 8, "home {home:?}");
        for c in &done {
            match &c.result {
                Err(Error::TaskPanicked { message, .. }) => {
                    assert_eq!(message, "(no message)")
                }
                other => panic!("home {home:?}, page {}: {other:?}", c.tag),
            }
        }
        // Every page still served, and none left pinned: written through.
        for page in 0..8u64 {
            q.task(&cf, page * 4096, sum_from, 1, page);
        }
        q.drain();
        done.clear();
        q.take_completions(&mut done);
        assert!(done.iter().all(|c| c.result.is_ok()), "home {home:?}");
        for page in 0..8u64 {
            cf.write_at(page * 4096, &[9]).unwrap();
        }
    }
}

/// A wait that the home partition's hits satisfy may leave a small bundle
/// for another partition unsent; a caller that then only polls still sees
/// every request finish (a poll sends what is gathered).
#[test]
fn polling_after_a_wait_finishes_every_request() {
    let (_tmp, store) = numbered_store("parts-poll", "p");
    let cs = CachedStore::new(store, cache(512, 512, 2)).unwrap();
    let cf = cs.open_file("p").unwrap();
    // Every page cached: the home's requests finish at once.
    let mut page = vec![0u8; 4096];
    for i in 0..64u64 {
        cf.read_at(i * 4096, &mut page).unwrap();
    }
    let p = Partitions::new(&cs, with(2)).unwrap();
    let home: Vec<u64> = (0..64)
        .filter(|&i| p.partition_of(&cf, i * 4096) == 0)
        .collect();
    let away: Vec<u64> = (0..64)
        .filter(|&i| p.partition_of(&cf, i * 4096) == 1)
        .collect();
    assert!(home.len() >= 4 && away.len() >= 2, "{home:?} {away:?}");
    let mut q = p.queue_on(16, Some(0)).unwrap();
    for &i in home.iter().take(4).chain(away.iter().take(2)) {
        q.read(&cf, i * 4096, vec![0; 4096], i);
    }
    // The home's four hits, at once: the other two may wait unsent.
    assert_eq!(q.wait(1), 4);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while q.outstanding() > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "{} requests never finished",
            q.outstanding()
        );
        q.poll();
    }
    let mut done = Vec::new();
    q.take_completions(&mut done);
    assert_eq!(done.len(), 6);
    for c in done {
        assert!(c.result.is_ok(), "{:?}", c.result);
        assert!(c.buf.iter().all(|&x| x as u64 == c.tag), "page {}", c.tag);
    }
}

/// Partitions dropped after one of their queues was leaked (`mem::forget`,
/// safe Rust) still stop: the workers take the closing for the leaked
/// queue's end as well, instead of serving it for ever.
#[test]
fn partitions_stop_after_a_queue_was_leaked() {
    let (_tmp, store) = numbered_store("parts-leak", "p");
    let cs: &'static CachedStore = Box::leak(Box::new(
        CachedStore::new(store, cache(512, 512, 2)).unwrap(),
    ));
    // Leaked, it would be synced at the process's exit, after its
    // directory went with the test.
    cs.discard_at_close();
    let cf = cs.open_file("p").unwrap();
    let p = Partitions::new(cs, with(2)).unwrap();
    let mut q = p.queue_on(16, Some(0)).unwrap();
    for i in 0..8u64 {
        q.read(&cf, i * 4096, vec![0; 4096], i);
    }
    q.drain();
    std::mem::forget(q);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        drop(p);
        tx.send(()).unwrap();
    });
    assert!(
        rx.recv_timeout(Duration::from_secs(20)).is_ok(),
        "the partitions did not stop within 20 s of their drop"
    );
}

/// One queue's requests alternating between two files, to its home
/// partition and to the other: each completes with its own file's bytes (a
/// queue numbers the files it names to each partition, and remembers the last
/// one it named there).
#[test]
fn requests_alternating_between_two_files_read_each_its_own() {
    let (_tmp, store) = numbered_store("parts-two-files", "a");
    let f = store.create("b", 64 * 4096, LayoutKind::Stripe).unwrap();
    let mut b = AlignedBuf::new(64 * 4096);
    for (i, x) in b.iter_mut().enumerate() {
        *x = 100 + (i / 4096) as u8;
    }
    f.write_at(0, &b).unwrap();
    drop(f);
    let cs = CachedStore::new(store, cache(512, 512, 2)).unwrap();
    let (fa, fb) = (cs.open_file("a").unwrap(), cs.open_file("b").unwrap());
    let p = Partitions::new(&cs, with(2)).unwrap();
    let mut q = p.queue_on(16, Some(0)).unwrap();
    let mut rng = Rng(7);
    let mut done = Vec::new();
    let mut second = false;
    for k in 0..512u64 {
        // Runs of requests to one file, of one or more, then the other's.
        if rng.below(2) == 0 {
            second = !second;
        }
        let page = rng.below(64);
        let (file, tag) = if second {
            (&fb, 100 + page)
        } else {
            (&fa, page)
        };
        q.read(file, page * 4096, vec![0; 4096], tag);
        if k % 8 == 7 {
            q.wait(1);
            q.take_completions(&mut done);
        }
    }
    while q.outstanding() > 0 {
        q.wait(q.outstanding());
    }
    q.take_completions(&mut done);
    assert_eq!(done.len(), 512);
    let seconds = done.iter().filter(|c| c.tag >= 100).count();
    assert!(seconds > 100 && seconds < 412, "{seconds} of 512 to b");
    for c in done {
        assert!(c.result.is_ok(), "{:?}", c.result);
        assert!(
            c.buf.iter().all(|&x| u64::from(x) == c.tag),
            "request {} read another file's page",
            c.tag
        );
    }
}

/// Partition counts, cache nodes and queue depths out of range are refused,
/// naming what was wrong.
#[test]
fn bad_partition_options_are_refused() {
    let tmp = TempDir::new("parts-bad");
    let roots = tmp.devices(1);
    let (_, opts) = engines().into_iter().find(|e| e.0 == "uring").unwrap();
    let store = common::open(&roots, opts, 1);
    // Sets divided one per node, as the partitioned mode's default.
    let cs = CachedStore::new(store.clone(), cache(16, 16, 0)).unwrap();
    for n in [0, 65] {
        let e = Partitions::new(&cs, with(n)).err().expect("refused");
        assert!(e.to_string().contains(&format!("{n} partitions")), "{e}");
    }
    let e = Partitions::new(
        &cs,
        PartitionOptions {
            cache_nodes: Some(vec![999]),
            ..PartitionOptions::default()
        },
    )
    .err()
    .expect("refused");
    assert!(e.to_string().contains("cache node 999"), "{e}");
    let first = setcache::nodes().first().map_or(0, |n| n.id);
    let e = Partitions::new(
        &cs,
        PartitionOptions {
            cache_nodes: Some(vec![first, first]),
            ..PartitionOptions::default()
        },
    )
    .err()
    .expect("refused");
    assert!(e.to_string().contains("given twice"), "{e}");
    let deep = setcache::MAX_QUEUE_DEPTH + 1;
    let e = Partitions::new(
        &cs,
        PartitionOptions {
            worker_depth: deep,
            ..PartitionOptions::default()
        },
    )
    .err()
    .expect("refused");
    assert!(
        e.to_string().contains(&format!("worker depth {deep}")),
        "{e}"
    );
    let p = Partitions::new(&cs, PartitionOptions::default()).unwrap();
    assert_eq!(p.count(), setcache::nodes().len().max(1));
    for d in [0, 1 << 17] {
        let e = p.queue(d).err().expect("refused");
        assert!(e.to_string().contains(&format!("depth {d}")), "{e}");
    }
    let e = p.queue_on(4, Some(p.count())).err().expect("refused");
    assert!(
        e.to_string()
            .contains(&format!("home partition {}", p.count())),
        "{e}"
    );
    drop(p);
    drop(cs);
    // Partitions other than the cache's division, and divisions the cache
    // cannot make.
    let cs = CachedStore::new(store.clone(), cache(16, 16, 1)).unwrap();
    let e = Partitions::new(&cs, with(2)).err().expect("refused");
    assert!(e.to_string().contains("divided into 1"), "{e}");
    drop(cs);
    for (pages, n, what) in [(16, 65, "65 partitions"), (8, 3, "one set per partition")] {
        let e = CachedStore::new(store.clone(), cache(pages, pages, n))
            .err()
            .expect("refused");
        assert!(e.to_string().contains(what), "{e}");
    }
}

/// A read-only handle and a writable one of the same file on one queue, to
/// the home partition and to the other, named in either order: writes
/// through the read-only handle are refused, naming the file, and writes
/// through the writable one land (the queue numbers the two handles apart).
#[test]
fn a_read_only_handle_stays_read_only_beside_a_writable_one() {
    let (_tmp, store) = numbered_store("parts-read-only", "a");
    let cs = CachedStore::new(store, cache(512, 512, 2)).unwrap();
    let p = Partitions::new(&cs, with(2)).unwrap();
    for writable_first in [true, false] {
        let rw = cs.open_file("a").unwrap();
        let ro = cs.open_file_read_only("a").unwrap();
        let mut q = p.queue_on(16, Some(0)).unwrap();
        let (first, second) = if writable_first {
            (&rw, &ro)
        } else {
            (&ro, &rw)
        };
        // Name the first handle to both partitions with reads.
        for page in 0..16u64 {
            q.read(first, page * 4096, vec![0; 4096], page);
        }
        // Then writes through both handles to every page.
        for page in 0..16u64 {
            q.write(second, page * 4096, vec![0xee; 4096], 100 + page);
            q.write(first, page * 4096, vec![0xdd; 4096], 200 + page);
        }
        let mut done = Vec::new();
        while q.outstanding() > 0 {
            q.wait(q.outstanding());
        }
        q.take_completions(&mut done);
        assert_eq!(done.len(), 48);
        let ro_tags = if writable_first { 100..116 } else { 200..216 };
        for c in &done {
            if ro_tags.contains(&c.tag) {
                match &c.result {
                    Err(Error::ReadOnly(name)) => assert_eq!(name, "a"),
                    other => panic!("write {} through the read-only handle: {other:?}", c.tag),
                }
            } else {
                assert!(c.result.is_ok(), "request {}: {:?}", c.tag, c.result);
            }
        }
        drop(q);
        // Every page holds what the writable handle wrote.
        let want = if writable_first { 0xdd } else { 0xee };
        let mut b = vec![0; 16 * 4096];
        rw.read_at(0, &mut b).unwrap();
        assert!(
            b.iter().all(|&x| x == want),
            "a page not written by the writable handle"
        );
    }
}

/// `drain` sends what is gathered (even bundles smaller than a wait sends)
/// and returns once every request finished; a sync after it makes every
/// write durable, including those served by the queue's own thread.
#[test]
fn a_drained_queues_writes_are_durable_after_a_sync() {
    let (tmp, store) = numbered_store("parts-drain", "p");
    let cs = CachedStore::new(store, cache(16, 16, 2)).unwrap();
    let cf = cs.open_file("p").unwrap();
    let p = Partitions::new(&cs, with(2)).unwrap();
    let mut q = p.queue_on(64, Some(0)).unwrap();
    for i in 0..64u64 {
        q.write(&cf, i * 4096 + 100, vec![200 + (i % 50) as u8; 8], i);
    }
    q.drain();
    assert_eq!(q.outstanding(), 0);
    let mut done = Vec::new();
    q.take_completions(&mut done);
    assert_eq!(done.len(), 64);
    for c in &done {
        assert!(c.result.is_ok(), "write {}: {:?}", c.tag, c.result);
    }
    cf.sync().unwrap();
    drop(q);
    drop(p);
    drop(cf);
    drop(cs);
    let (_, opts) = engines().into_iter().find(|e| e.0 == "uring").unwrap();
    let store = common::open(&tmp.devices(1), opts, 1);
    let b = read_all(&store, "p", 64 * 4096);
    for i in 0..64usize {
        let at = i * 4096;
        assert!(
            b[at..at + 100].iter().all(|&x| x == i as u8),
            "page {i} before"
        );
        assert!(
            b[at + 100..at + 108]
                .iter()
                .all(|&x| x == 200 + (i % 50) as u8),
            "page {i}'s write"
        );
        assert!(
            b[at + 108..at + 4096].iter().all(|&x| x == i as u8),
            "page {i} after"
        );
    }
}

/// A request naming a file of another cached store is refused at once:
/// cache ids start at 0 in every store, so nothing of it may reach this
/// store's cache. Reads in order that would start readahead leave this
/// store's file of the same id as it was, and a task on a page this cache
/// holds is refused rather than run on this store's page.
#[test]
fn a_file_of_another_store_is_refused_and_leaves_this_cache_alone() {
    let (_ta, sa) = numbered_store("parts-foreign-a", "a");
    let (_tb, sb) = numbered_store("parts-foreign-b", "b");
    let mut ee = AlignedBuf::new(64 * 4096);
    ee.fill(0xee);
    sb.open_file("b").unwrap().write_at(0, &ee).unwrap();
    let csa = CachedStore::new(sa, cache(512, 512, 1)).unwrap();
    let csb = CachedStore::new(sb, cache(512, 512, 1)).unwrap();
    let fa = csa.open_file("a").unwrap();
    let fb = csb.open_file("b").unwrap();
    let p = Partitions::new(&csa, with(1)).unwrap();
    // Page 5 of this store's file is cached.
    let mut one = [0u8; 1];
    fa.read_at(5 * 4096, &mut one).unwrap();
    assert_eq!(one[0], 5);
    for home in [None, Some(0)] {
        let mut q = p.queue_on(8, home).unwrap();
        for page in 0..32u64 {
            q.read(&fb, page * 4096, vec![0; 4096], page);
        }
        q.task(&fb, 5 * 4096, sum_from, 0, 100);
        q.drain();
        let mut done = Vec::new();
        q.take_completions(&mut done);
        assert_eq!(done.len(), 33, "home {home:?}");
        for c in &done {
            match &c.result {
                Err(Error::InvalidArgument(m)) => {
                    assert!(m.contains("another cached store"), "{m}")
                }
                other => panic!("request {} on the other store's file: {other:?}", c.tag),
            }
        }
    }
    // Whatever readahead would have done is done: windows go to its thread
    // before a request's completion, and it is idle once it read them.
    let since = std::time::Instant::now();
    while !csa.readahead_idle() {
        assert!(
            since.elapsed() < Duration::from_secs(30),
            "readahead never idle"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(50));
    let mut b = vec![0u8; 64 * 4096];
    fa.read_at(0, &mut b).unwrap();
    for (i, page) in b.chunks(4096).enumerate() {
        assert!(
            page.iter().all(|&x| x == i as u8),
            "page {i} of this store's file holds the other store's bytes"
        );
    }
}

/// A task reads its page through a shared reference: on a file with a
/// writable paged array of word elements, whose stores change pages in
/// place, it is refused as `CachedFile::page` is, whether its page is cached
/// or comes from the device.
#[test]
fn a_task_on_a_file_with_a_writable_word_array_is_refused() {
    let (_tmp, store) = numbered_store("parts-task-array", "t");
    let cs = CachedStore::new(store, cache(512, 512, 2)).unwrap();
    let cf = cs.open_file("t").unwrap();
    // Page 1 is cached, page 40 is not.
    let mut one = [0u8; 1];
    cf.read_at(4096, &mut one).unwrap();
    let _arr = setcache::PagedArray::<u64>::from_file(cs.open_file("t").unwrap()).unwrap();
    assert!(matches!(cf.page(0), Err(Error::InvalidArgument(_))));
    let p = Partitions::new(&cs, with(2)).unwrap();
    for home in [None, Some(0), Some(1)] {
        let mut q = p.queue_on(8, home).unwrap();
        q.task(&cf, 4096, sum_from, 0, 1);
        q.task(&cf, 40 * 4096, sum_from, 0, 40);
        q.drain();
        let mut done = Vec::new();
        q.take_completions(&mut done);
        assert_eq!(done.len(), 2);
        for c in &done {
            match &c.result {
                Err(Error::InvalidArgument(m)) => assert!(m.contains("page references"), "{m}"),
                other => panic!("task {} (home {home:?}): {other:?}", c.tag),
            }
        }
    }
}

/// A queue dropped while its thread unwinds, with a task's page still being
/// read for its home partition, releases that page's pin: the page can be
/// written afterwards.
#[test]
fn a_queue_dropped_while_unwinding_leaves_no_page_pinned() {
    let (_tmp, store) = numbered_store("parts-unwind-pin", "u");
    let mut opts = cache(512, 512, 2);
    opts.pin_wait = Duration::from_millis(500);
    let cs = CachedStore::new(store, opts).unwrap();
    let cf = cs.open_file("u").unwrap();
    let p = Partitions::new(&cs, with(2)).unwrap();
    let offs: Vec<u64> = (0..64u64)
        .map(|i| i * 4096)
        .filter(|&o| p.partition_of(&cf, o) == 0)
        .collect();
    assert!(!offs.is_empty());
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut q = p.queue_on(64, Some(0)).unwrap();
        for &o in &offs {
            q.task(&cf, o, sum_from, 0, o);
        }
        q.flush();
        panic!("the application's own fault");
    }));
    assert!(r.is_err());
    for &o in &offs {
        cf.write_at(o, &[0xab])
            .unwrap_or_else(|e| panic!("page at {o} still pinned: {e}"));
    }
}

/// A request that would wait for a guard its own thread holds (a task or a
/// read on a page the thread holds mutably, a write on a page it holds at
/// all) fails `HeldByCaller` at once, whether its page's partition is the
/// queue's home (served by the thread itself) or another's worker.
#[test]
fn a_request_on_a_page_its_own_thread_holds_is_refused_at_once() {
    let (_tmp, store) = numbered_store("parts-own-guard", "g");
    // (A pin wait far above the bound below: waiting for its own guard
    // would take it.)
    let opts = CacheOptions {
        pin_wait: Duration::from_secs(30),
        ..cache(512, 512, 2)
    };
    let cs = CachedStore::new(store, opts).unwrap();
    let cf = cs.open_file("g").unwrap();
    let p = Partitions::new(&cs, with(2)).unwrap();
    let held = |r: &Result<(), Error>| matches!(r, Err(Error::HeldByCaller(_)));
    let t = std::time::Instant::now();
    for home in [None, Some(0), Some(1)] {
        for page in 0..4u64 {
            let off = page * 4096;
            let mut q = p.queue_on(8, home).unwrap();
            let mut done = Vec::new();
            {
                let _m = cf.page_mut(off).unwrap();
                q.task(&cf, off + 10, sum_from, 0, 0);
                q.read(&cf, off, vec![0; 64], 1);
                q.write(&cf, off, vec![page as u8; 64], 2);
                q.task(&cf, off + 4096 * 8, sum_from, 0, 3);
                q.drain();
                q.take_completions(&mut done);
            }
            done.sort_by_key(|c| c.tag);
            let r: Vec<_> = done.iter().map(|c| &c.result).collect();
            assert_eq!(r.len(), 4);
            assert!(
                held(r[0]) && held(r[1]) && held(r[2]),
                "page {page}, home {home:?}: {r:?}"
            );
            assert!(r[3].is_ok(), "page {page}, home {home:?}: {r:?}");
            assert_eq!(done[3].value, 4096 * (page + 8));
            done.clear();
            {
                let _g = cf.page(off).unwrap();
                q.task(&cf, off, sum_from, 0, 0);
                q.write(&cf, off + 100, vec![page as u8; 8], 1);
                q.drain();
                q.take_completions(&mut done);
            }
            done.sort_by_key(|c| c.tag);
            assert!(done[0].result.is_ok(), "{:?}", done[0].result);
            assert_eq!(done[0].value, 4096 * page);
            assert!(held(&done[1].result), "{:?}", done[1].result);
        }
    }
    assert!(
        t.elapsed() < Duration::from_secs(15),
        "a request waited for its own thread's guard: {:?}",
        t.elapsed()
    );
}

/// A task queued for the thread's home partition, then a mutable guard of
/// its page taken by the same thread before the task starts (home requests
/// start at the queue's next flush): the task, which would pin the page
/// under that guard, fails `HeldByCaller` at once, not `Busy` after the pin
/// wait.
#[test]
fn a_home_task_on_a_page_its_thread_took_mutably_since_is_refused_at_once() {
    let (_tmp, store) = numbered_store("parts-own-guard-later", "g");
    // (A pin wait far above the bound below: waiting for its own guard
    // would take it.)
    let opts = CacheOptions {
        pin_wait: Duration::from_secs(30),
        ..cache(512, 512, 2)
    };
    let cs = CachedStore::new(store, opts).unwrap();
    let cf = cs.open_file("g").unwrap();
    let p = Partitions::new(&cs, with(2)).unwrap();
    let t = std::time::Instant::now();
    for page in 0..4u64 {
        let off = page * 4096;
        let mut q = p.queue_on(8, Some(p.partition_of(&cf, off))).unwrap();
        let mut done = Vec::new();
        q.task(&cf, off + 10, sum_from, 0, 0);
        {
            let _m = cf.page_mut(off).unwrap();
            q.drain();
            q.take_completions(&mut done);
        }
        assert_eq!(done.len(), 1);
        assert!(
            matches!(done[0].result, Err(Error::HeldByCaller(_))),
            "page {page}: {:?}",
            done[0].result
        );
    }
    assert!(
        t.elapsed() < Duration::from_secs(10),
        "a task waited for its own thread's guard: {:?}",
        t.elapsed()
    );
}

/// A request for another partition, alone in its bundle, goes out within a
/// few waits even while the thread's own home hits satisfy every wait: it is
/// not held back until seven more come for that partition.
#[test]
fn a_lone_remote_request_is_sent_while_home_hits_satisfy_the_waits() {
    let (_tmp, store) = numbered_store("parts-lone-remote", "r");
    let cs = CachedStore::new(store, cache(512, 512, 2)).unwrap();
    let cf = cs.open_file("r").unwrap();
    // Every page cached: home reads complete at once.
    let mut all = vec![0u8; 64 * 4096];
    cf.read_at(0, &mut all).unwrap();
    let p = Partitions::new(&cs, with(2)).unwrap();
    let of = |page: u64| p.partition_of(&cf, page * 4096);
    let home: Vec<u64> = (0..64).filter(|&pg| of(pg) == 0).collect();
    let remote = (0..64)
        .find(|&pg| of(pg) == 1)
        .expect("a page of partition 1");
    let mut q = p.queue_on(64, Some(0)).unwrap();
    q.read(&cf, remote * 4096, vec![0; 64], u64::MAX);
    let mut done = Vec::new();
    let mut waits = 0;
    let mut found = None;
    // (The worker runs when the scheduler lets it, which on a loaded
    // machine can take many waits: the thread sleeps briefly between its
    // waits, as a thread with work of its own between them would, and the
    // bound is in time. A bundle held back until it fills would never be
    // sent here, since no other request for partition 1 follows.)
    let start = std::time::Instant::now();
    while found.is_none() && start.elapsed() < Duration::from_secs(30) {
        let page = home[waits % home.len()];
        q.read(&cf, page * 4096, vec![0; 64], page);
        q.wait(1);
        waits += 1;
        q.take_completions(&mut done);
        found = done.iter().find(|c| c.tag == u64::MAX).map(|c| c.buf[0]);
        std::thread::sleep(Duration::from_micros(100));
    }
    assert_eq!(
        found,
        Some(remote as u8),
        "the remote read was not answered in {waits} waits ({:?}) that home hits satisfied",
        start.elapsed()
    );
    q.drain();
}

/// A child made by `fork` while the parent's partitioned queue has reads out
/// (at its home partition and at the other), that drops its copies of the
/// queue and of the partitions: it ends at once (nothing drained, no worker
/// told or joined), and the parent's queue gets every answer with the right
/// bytes.
#[test]
fn a_forked_child_dropping_the_partitions_leaves_the_parents_requests_to_them() {
    let (_tmp, store) = numbered_store("parts-fork", "t");
    let cs = CachedStore::new(store, cache(32, 32, 2)).unwrap();
    let cf = cs.open_file("t").unwrap();
    let p = Partitions::new(&cs, with(2)).unwrap();
    let mut q = p.queue_on(64, Some(0)).unwrap();
    for page in 0..64u64 {
        q.read(&cf, page * 4096, vec![0; 4096], page);
    }
    q.flush();
    // (Some may have been answered at once, on this thread, at its home.)
    assert!(q.outstanding() >= 32, "{}", q.outstanding());
    // SAFETY: the child only drops its copies, then `_exit`s.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
    if pid == 0 {
        drop(q);
        drop(p);
        // SAFETY: ends the child at once.
        unsafe { libc::_exit(0) };
    }
    common::child_ends_well(pid, "the child's drop of the partitions");
    let t0 = std::time::Instant::now();
    while q.outstanding() > 0 {
        q.poll();
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "{} of the parent's reads never answered after the child's drop",
            q.outstanding()
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut done: Vec<PartCompletion> = Vec::new();
    q.take_completions(&mut done);
    assert_eq!(done.len(), 64);
    for c in done {
        assert!(c.result.is_ok(), "page {}: {:?}", c.tag, c.result);
        assert!(
            c.buf.iter().all(|&b| b == c.tag as u8),
            "page {}: wrong bytes",
            c.tag
        );
    }
}
