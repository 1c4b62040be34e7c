//! The memory-bound ceiling of computing on a cached block in place against
//! copying it out first: two threads pick random 4 KiB blocks of a 1 GiB
//! buffer on huge pages (as a cache's frames are) and sum each block's
//! 64-bit words, in place or on a copy. No cache, no lookup, no message:
//! what is left is the copy's own cost.
//!
//! Run: `rustc --edition 2021 -C opt-level=3 scripts/block-sum-bound.rs -o /tmp/block-sum-bound && /tmp/block-sum-bound`

use std::time::Instant;

const BLOCK: usize = 4096;

#[inline(never)]
fn block_sum(b: &[u8]) -> u64 {
    b.chunks_exact(8)
        .map(|w| u64::from_le_bytes(w.try_into().unwrap()))
        .fold(0u64, u64::wrapping_add)
}

fn next(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

extern "C" {
    fn mmap(addr: *mut u8, len: usize, prot: i32, flags: i32, fd: i32, off: i64) -> *mut u8;
    fn madvise(addr: *mut u8, len: usize, advice: i32) -> i32;
}

fn main() {
    let size: usize = 1 << 30;
    let blocks = size / BLOCK;
    // Anonymous, private, read and write; MADV_HUGEPAGE (14).
    let mem: &mut [u8] = unsafe {
        let p = mmap(std::ptr::null_mut(), size, 3, 0x22, -1, 0);
        assert!(!p.is_null() && p as isize != -1, "mmap failed");
        madvise(p, size, 14);
        std::slice::from_raw_parts_mut(p, size)
    };
    mem.fill(1);
    let mem = &mem[..];
    let n = 3_000_000usize;
    for round in 0..3u64 {
        let mut rates = [0.0; 2];
        for (mode, rate) in rates.iter_mut().enumerate() {
            let t = Instant::now();
            std::thread::scope(|sc| {
                for th in 0..2u64 {
                    sc.spawn(move || {
                        let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ (th * 7919 + round);
                        let mut copy = vec![0u8; BLOCK];
                        let mut s = 0u64;
                        for _ in 0..n {
                            let at = (next(&mut x) as usize % blocks) * BLOCK;
                            let b = &mem[at..at + BLOCK];
                            if mode == 0 {
                                s = s.wrapping_add(block_sum(b));
                            } else {
                                copy.copy_from_slice(b);
                                s = s.wrapping_add(block_sum(std::hint::black_box(&copy)));
                            }
                        }
                        std::hint::black_box(s);
                    });
                }
            });
            *rate = 2.0 * n as f64 / t.elapsed().as_secs_f64();
        }
        println!(
            "round {round}: in place {:.2} M blocks/s, on a copy {:.2} M blocks/s, ratio {:.3}",
            rates[0] / 1e6,
            rates[1] / 1e6,
            rates[0] / rates[1]
        );
    }
}
