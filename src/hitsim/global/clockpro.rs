//! CLOCK-Pro (Jiang, Chen and Zhang, USENIX ATC '05).
//!
//! One circular list holds hot pages, resident cold pages and non-resident
//! cold pages that are still in their test period, at most `m` of those
//! (`m` is the cache size). Three hands walk it in the same direction; "the
//! list head" is the place just behind `HAND_hot`, where pages are (re)inserted.
//! A hit only sets the page's reference bit.
//!
//! - `HAND_cold` finds a resident cold page to evict: a referenced one in its
//!   test period becomes hot (and `HAND_hot` runs if there are too many hot
//!   pages); a referenced one out of its test period starts a new one; both
//!   lose the bit and move to the head. An unreferenced one is evicted and,
//!   if in its test period, stays as a non-resident cold page.
//! - `HAND_hot` turns the first unreferenced hot page into a cold page
//!   (clearing the bits of the referenced ones it passes) and ends the test
//!   periods of the cold pages it passes, dropping non-resident ones.
//! - `HAND_test` ends test periods (dropping non-resident pages) when more
//!   than `m` non-resident pages are kept.
//!
//! The target number of resident cold pages `m_c` (start: `m / 2`, as
//! libCacheSim) grows by one on each miss that finds the page in its test
//! period and shrinks by one whenever a test period ends without a reuse;
//! it stays within `1..=m-1`. There are at most `m - m_c` hot pages.

use super::Global;
use super::list::NIL;

const RESIDENT: u8 = 1;
const HOT: u8 = 2;
const TEST: u8 = 4;
const REF: u8 = 8;
const IN_CLOCK: u8 = 16;

#[derive(Debug)]
pub(crate) struct ClockPro {
    m: usize,
    mc: usize,
    n_hot: usize,
    n_cold: usize,
    n_nonres: usize,
    next: Vec<u32>,
    prev: Vec<u32>,
    flags: Vec<u8>,
    hand_hot: u32,
    hand_cold: u32,
    hand_test: u32,
}

impl ClockPro {
    pub(crate) fn new(cap: usize, universe: usize) -> ClockPro {
        ClockPro {
            m: cap,
            mc: (cap / 2).clamp(1, cap.saturating_sub(1).max(1)),
            n_hot: 0,
            n_cold: 0,
            n_nonres: 0,
            next: vec![NIL; universe],
            prev: vec![NIL; universe],
            flags: vec![0; universe],
            hand_hot: NIL,
            hand_cold: NIL,
            hand_test: NIL,
        }
    }

    #[inline]
    fn f(&self, x: u32) -> u8 {
        self.flags[x as usize]
    }

    #[inline]
    fn set(&mut self, x: u32, bits: u8) {
        self.flags[x as usize] |= bits;
    }

    #[inline]
    fn clear(&mut self, x: u32, bits: u8) {
        self.flags[x as usize] &= !bits;
    }

    /// Inserts `x` at the list head (just behind `HAND_hot`).
    fn insert_head(&mut self, x: u32) {
        self.set(x, IN_CLOCK);
        if self.hand_hot == NIL {
            self.next[x as usize] = x;
            self.prev[x as usize] = x;
            self.hand_hot = x;
            self.hand_cold = x;
            self.hand_test = x;
            return;
        }
        let h = self.hand_hot;
        let p = self.prev[h as usize];
        self.next[p as usize] = x;
        self.prev[x as usize] = p;
        self.next[x as usize] = h;
        self.prev[h as usize] = x;
    }

    /// Takes `x` out of the list; hands on it move to the next page.
    fn unlink(&mut self, x: u32) {
        let n = self.next[x as usize];
        let p = self.prev[x as usize];
        let n = if n == x { NIL } else { n };
        for h in [&mut self.hand_hot, &mut self.hand_cold, &mut self.hand_test] {
            if *h == x {
                *h = n;
            }
        }
        if n != NIL {
            self.next[p as usize] = n;
            self.prev[n as usize] = p;
        }
        self.next[x as usize] = NIL;
        self.prev[x as usize] = NIL;
        self.clear(x, IN_CLOCK);
    }

    fn move_to_head(&mut self, x: u32) {
        self.unlink(x);
        self.insert_head(x);
    }

    /// A test period ends without a reuse.
    fn end_test(&mut self, x: u32) {
        self.clear(x, TEST);
        self.mc = self.mc.saturating_sub(1).max(1);
        if self.f(x) & RESIDENT == 0 {
            self.unlink(x);
            self.flags[x as usize] = 0;
            self.n_nonres -= 1;
        }
    }

    /// Runs `HAND_hot` until one hot page became cold.
    fn run_hand_hot(&mut self) {
        while self.n_hot > 0 {
            let x = self.hand_hot;
            let f = self.f(x);
            if f & HOT != 0 {
                if f & REF != 0 {
                    self.clear(x, REF);
                    self.hand_hot = self.next[x as usize];
                } else {
                    self.clear(x, HOT);
                    self.n_hot -= 1;
                    self.n_cold += 1;
                    self.hand_hot = self.next[x as usize];
                    return;
                }
            } else {
                // Advance first: ending a test period may unlink `x`.
                self.hand_hot = self.next[x as usize];
                if f & TEST != 0 {
                    self.end_test(x);
                }
            }
        }
    }

    /// Runs `HAND_test` until one non-resident page is dropped.
    fn run_hand_test(&mut self) {
        while self.n_nonres > 0 {
            let x = self.hand_test;
            let f = self.f(x);
            self.hand_test = self.next[x as usize];
            if f & HOT == 0 && f & TEST != 0 {
                self.end_test(x);
                if f & RESIDENT == 0 {
                    return;
                }
            }
        }
    }

    /// Runs `HAND_cold` until one resident cold page is evicted.
    fn run_hand_cold(&mut self) {
        loop {
            if self.n_cold == 0 {
                self.run_hand_hot();
            }
            let x = self.hand_cold;
            let f = self.f(x);
            if f & (HOT | RESIDENT) != RESIDENT {
                self.hand_cold = self.next[x as usize];
                continue;
            }
            if f & REF != 0 {
                self.clear(x, REF);
                if f & TEST != 0 {
                    self.clear(x, TEST);
                    self.set(x, HOT);
                    self.n_cold -= 1;
                    self.n_hot += 1;
                    self.move_to_head(x);
                    while self.n_hot > self.m - self.mc {
                        self.run_hand_hot();
                    }
                } else {
                    self.set(x, TEST);
                    self.move_to_head(x);
                }
                continue;
            }
            self.hand_cold = self.next[x as usize];
            self.clear(x, RESIDENT);
            self.n_cold -= 1;
            if f & TEST != 0 {
                self.n_nonres += 1;
                while self.n_nonres > self.m {
                    self.run_hand_test();
                }
            } else {
                self.unlink(x);
                self.flags[x as usize] = 0;
            }
            return;
        }
    }
}

impl Global for ClockPro {
    #[inline]
    fn access(&mut self, x: u32) -> bool {
        let f = self.f(x);
        if f & RESIDENT != 0 {
            self.set(x, REF);
            return true;
        }
        if self.n_hot + self.n_cold >= self.m {
            self.run_hand_cold();
        }
        // The eviction may have ended `x`'s test period.
        let f = self.f(x);
        if f & IN_CLOCK != 0 {
            // A non-resident cold page in its test period: a short reuse.
            self.mc = (self.mc + 1).min(self.m.saturating_sub(1).max(1));
            self.unlink(x);
            self.n_nonres -= 1;
            self.flags[x as usize] = RESIDENT | HOT;
            self.n_hot += 1;
            self.insert_head(x);
            while self.n_hot > self.m - self.mc {
                self.run_hand_hot();
            }
        } else {
            self.flags[x as usize] = RESIDENT | TEST;
            self.n_cold += 1;
            self.insert_head(x);
        }
        false
    }
}
