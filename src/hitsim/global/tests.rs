//! Hand-derived miss counts on small traces, and cross-checks.

use super::*;
use crate::cache::policy::{PolicyKind, SaModel};

/// The trace most hand derivations below use (12 requests, 5 pages).
const T1: [u32; 12] = [1, 2, 3, 1, 4, 1, 2, 5, 1, 2, 3, 4];

fn misses(kind: GlobalKind, cap: usize, trace: &[u32]) -> u64 {
    trace.len() as u64 - hits(kind, cap, trace)
}

#[test]
fn hand_derived_misses_on_t1_with_three_pages() {
    // Derivations (cache of 3 pages):
    // lru: 1 2 3 miss, 1 hit, 4 evicts 2, 1 hit, 2 evicts 3, 5 evicts 4,
    //   1 2 hit, 3 evicts 5, 4 evicts 1: 8 misses.
    // fifo: 4 evicts 1, then 1, 2, 5 miss (evicting 2, 3, 4), 1 2 hit,
    //   3 and 4 miss: 9.
    // clock: same victims as LRU on this trace: 8. gclock: 8.
    // sieve: 4 clears 1's bit, evicts 2; 2 evicts 3; 5 evicts 4; 3 clears
    //   2, evicts 5; 4 clears 1, evicts 2: 8.
    // lfu: 1 reaches count 2 early and is never evicted; the others leave
    //   in the order they reached count 1: 8.
    // 2q (Kin = 1, Kout = 1): 1 2 3 miss, 1 hit (A1in), 4 pushes 1 to A1out,
    //   1 (A1out) miss to Am, 2 (A1out) miss to Am, 5 evicts Am's 1,
    //   1 miss, 2 hit (Am), 3 miss, 4 miss: 10.
    // arc: 1 2 3 miss, 1 hit, 4 miss (2 to B1), 1 hit, 2 (B1, p=1) miss,
    //   5 miss (1 to B2), 1 (B2, p=0) miss, 2 hit, 3 (B1) miss, 4 (B1) miss: 9.
    // lirs (Llirs 2, Lhirs 1): 1 2 LIR, 3 HIR, 1 hit, 4 evicts 3, 1 2 hit,
    //   5 evicts 4, 1 2 hit, 3 evicts 5, 4 evicts 3: 7.
    // clockpro (m 3, m_c 1): 4 makes 1 hot and evicts 2 (kept in test);
    //   2 evicts 3 and comes back hot; 5 evicts 4; 3 evicts 5; 4 evicts 2: 8.
    // s3fifo (S 1, M 2, G 2): 4 drops 1 to G, 1 and 2 come back from G to M,
    //   5 drops 4, 1 2 hit, 3 and 4 come back from G: 9.
    // wtinylfu (window 1, main 2): 3 and 4 lose the admission to 2 and 1,
    //   5, 3, 4 lose to 1: 7.
    // linux: every page enters inactive and none is activated: as FIFO, 9.
    // opt: 4 evicts 3, 5 evicts 4, 3 and 4 miss: 7.
    let expect = [
        (GlobalKind::Lru, 8),
        (GlobalKind::Fifo, 9),
        (GlobalKind::Clock, 8),
        (GlobalKind::Gclock, 8),
        (GlobalKind::Sieve, 8),
        (GlobalKind::Lfu, 8),
        (GlobalKind::TwoQ, 10),
        (GlobalKind::Arc, 9),
        (GlobalKind::Lirs, 7),
        (GlobalKind::ClockPro, 8),
        (GlobalKind::S3Fifo, 9),
        (GlobalKind::WTinyLfu, 7),
        (GlobalKind::Linux, 9),
        (GlobalKind::Opt, 7),
    ];
    assert_eq!(expect.len(), GlobalKind::ALL.len());
    for (kind, m) in expect {
        assert_eq!(misses(kind, 3, &T1), m, "{kind}");
    }
}

#[test]
fn frequency_and_counters_on_t2_with_two_pages() {
    // 1 three times, then 2 3 4, then 1 again; two pages.
    let t2 = [1, 1, 1, 2, 3, 4, 1];
    // lru/clock: 3 evicts 1 (clock: 1's bit is cleared first, 2 goes, then
    // 4 finds 1 unreferenced), so the last 1 misses: 5 misses.
    assert_eq!(misses(GlobalKind::Lru, 2, &t2), 5);
    assert_eq!(misses(GlobalKind::Clock, 2, &t2), 5);
    // gclock: 1's counter is 2, so it survives two sweeps: 4 misses.
    assert_eq!(misses(GlobalKind::Gclock, 2, &t2), 4);
    // lfu: 1 has count 3 and stays: 4 misses.
    assert_eq!(misses(GlobalKind::Lfu, 2, &t2), 4);
}

#[test]
fn linux_activates_on_the_second_hit_and_on_a_near_refault() {
    // Three accesses of 1 activate it (miss, referenced, activated): then
    // 2..6 stream through the inactive list and 1 still hits. FIFO misses it.
    let t4 = [1, 1, 1, 2, 3, 4, 5, 6, 1];
    assert_eq!(misses(GlobalKind::Linux, 3, &t4), 6);
    assert_eq!(misses(GlobalKind::Fifo, 3, &t4), 7);
    // Refault: 1 and 2 active (age 2), 3 and 4 inactive; 5 evicts 3 (shadow
    // age 2, age becomes 3); 3 evicts 4 (age 4) and refaults at distance 2,
    // at most the 2 active pages: 3 is activated.
    let mut l = linux::Linux::new(4, 8, 4096);
    for x in [1, 1, 1, 2, 2, 2, 3, 4, 5] {
        l.access(x);
    }
    assert!(!l.is_active(3) && l.is_active(1) && l.is_active(2));
    assert!(!l.access(3));
    assert!(l.is_active(3));
    // 6 far from any eviction: inactive.
    assert!(!l.access(6));
    assert!(!l.is_active(6));
}

/// Caches of one to three pages: every policy runs a skewed trace to its
/// end (LIRS with one page emptied its queue of resident HIR pages and
/// indexed past its tables) and hits no more than OPT.
#[test]
fn the_smallest_caches_run_every_policy() {
    let trace = skewed_trace(5_000, 20, 7);
    for cap in 1..=3 {
        let best = hits(GlobalKind::Opt, cap, &trace);
        for kind in GlobalKind::ALL {
            let h = hits(kind, cap, &trace);
            assert!(h <= best, "{kind} with {cap} pages: {h} hits, OPT {best}");
        }
    }
}

#[test]
fn policies_never_exceed_the_cache() {
    // Fill with distinct pages, then every earlier page misses for the
    // policies that keep nothing of them (a scan of 2 * cap pages, twice).
    for kind in GlobalKind::ALL {
        let scan: Vec<u32> = (0..16).chain(0..16).collect();
        let h = hits(kind, 8, &scan);
        assert!(h <= 8, "{kind}: {h} hits on a scan twice the cache");
        // A cache larger than the footprint misses only cold misses.
        assert_eq!(misses(kind, 16, &scan), 16, "{kind}");
        assert_eq!(misses(kind, 100, &T1), 5, "{kind}");
    }
    // At any point of a skewed trace, a read of every page once hits at
    // most `cap` times: only pages resident when it began can hit (each
    // miss brings in a page not read again). A policy keeping a page past
    // its capacity gets more (a scan of twice the cache cannot tell). The
    // pages are read most recent first, so that hits come before misses
    // push anything out.
    let trace = skewed_trace(20_000, 200, 11);
    for cap in [4, 16, 64] {
        for cut in [500, 5_000, 20_000] {
            let before = &trace[..cut];
            let mut seen = [false; 200];
            let mut order: Vec<u32> = Vec::new();
            for &p in before.iter().rev() {
                if !std::mem::replace(&mut seen[p as usize], true) {
                    order.push(p);
                }
            }
            let probed: Vec<u32> = before.iter().copied().chain(order).collect();
            for kind in GlobalKind::ALL {
                let h = hits(kind, cap, &probed) - hits(kind, cap, before);
                assert!(
                    h <= cap as u64,
                    "{kind}, {cap} pages, after {cut}: {h} hits"
                );
            }
        }
    }
}

/// A naive Belady: scans the future for every resident page.
fn naive_opt(cap: usize, trace: &[u32]) -> u64 {
    let mut res: Vec<u32> = Vec::new();
    let mut hits = 0;
    for (i, &x) in trace.iter().enumerate() {
        if res.contains(&x) {
            hits += 1;
            continue;
        }
        if res.len() == cap {
            let next = |p: u32| {
                trace[i + 1..]
                    .iter()
                    .position(|&y| y == p)
                    .unwrap_or(usize::MAX)
            };
            let far = (0..res.len()).max_by_key(|&j| next(res[j])).unwrap();
            res.swap_remove(far);
        }
        res.push(x);
    }
    hits
}

fn skewed_trace(n: usize, universe: u64, seed: u64) -> Vec<u32> {
    let mut x = seed;
    (0..n)
        .map(|_| {
            x = crate::storage::layout::mix64(x);
            let u = (x >> 11) as f64 / (1u64 << 53) as f64;
            (u * u * universe as f64) as u32
        })
        .collect()
}

#[test]
fn opt_matches_a_naive_belady() {
    for (cap, seed) in [(3, 1), (10, 2), (25, 3)] {
        let t = skewed_trace(3000, 120, seed);
        assert_eq!(
            hits(GlobalKind::Opt, cap, &t),
            naive_opt(cap, &t),
            "cap {cap}"
        );
    }
    // A heap rebuild (more than 3 * cap + 64 pushes) keeps the result.
    let t = skewed_trace(20_000, 50, 9);
    assert_eq!(hits(GlobalKind::Opt, 4, &t), naive_opt(4, &t));
}

#[test]
fn opt_is_an_upper_bound() {
    let t = skewed_trace(20_000, 400, 5);
    for cap in [10, 50, 200] {
        let best = hits(GlobalKind::Opt, cap, &t);
        for kind in GlobalKind::ALL {
            assert!(hits(kind, cap, &t) <= best, "{kind} beats opt at {cap}");
        }
    }
}

#[test]
fn one_set_equals_the_global_policy() {
    // A set-associative cache of one set of `cap` slots is a global cache:
    // the cache's LRU and FIFO must agree with the textbook ones exactly.
    let t = skewed_trace(20_000, 200, 11);
    for cap in [4, 12, 32] {
        for (sa, global) in [
            (PolicyKind::Lru, GlobalKind::Lru),
            (PolicyKind::Fifo, GlobalKind::Fifo),
        ] {
            let mut m = SaModel::new(sa, cap, 1);
            let sa_hits = m.replay(t.iter().map(|&p| u64::from(p)));
            assert_eq!(
                sa_hits,
                hits(global, cap, &t),
                "{sa} vs {global}, {cap} pages"
            );
        }
    }
}

#[test]
fn warm_up_splits_the_counts() {
    let t = skewed_trace(5000, 100, 3);
    for kind in GlobalKind::ALL {
        let (late, full) = run(kind, 20, 4096, &t, 100, 2500);
        let (late0, full0) = run(kind, 20, 4096, &t, 100, 0);
        assert_eq!(full, full0, "{kind}");
        assert_eq!(late0, full0, "{kind}");
        assert!(late <= full, "{kind}");
    }
}

#[test]
fn caches_larger_than_the_trace_miss_each_page_once_and_cost_no_more() {
    // 2000 requests over 101 pages; caches up to usize::MAX pages (the
    // command line takes `--cache-size 18446744073709551615p`), pages up to
    // 2^64 - 1 bytes (`linux` multiplies them).
    let pages: Vec<u32> = (0..2000u32).map(|i| i * 7 % 101).collect();
    for kind in GlobalKind::ALL {
        let small = bytes(kind, 101, 101, pages.len());
        for cap in [1 << 20, 1 << 40, usize::MAX / 2, usize::MAX - 1, usize::MAX] {
            for page_size in [4096, u64::MAX] {
                let (_, full) = run(kind, cap, page_size, &pages, 101, 0);
                assert_eq!(full, 2000 - 101, "{kind}, {cap} pages of {page_size}");
            }
            assert_eq!(
                bytes(kind, cap, 101, pages.len()),
                small,
                "{kind}, {cap} pages"
            );
        }
    }
}
