//! The Linux page cache's classic two-list reclaim (mm/vmscan.c,
//! mm/swap.c, mm/workingset.c, before the multi-generational LRU), for
//! unmapped file pages read with `read()`:
//!
//! - a new page enters the head of the inactive list;
//! - `mark_page_accessed`: the first access of an inactive page sets its
//!   referenced flag, the second activates it (head of the active list, flag
//!   cleared); an access of an active page sets the flag;
//! - reclaim first rebalances: while `inactive * ratio < active`
//!   (`ratio = int_sqrt(10 * cache_GiB)`, 1 below 1 GiB), the active list's
//!   tail moves to the inactive head (`shrink_active_list` deactivates
//!   unmapped file pages whatever their flag); then the inactive tail is
//!   evicted (an unmapped clean page is reclaimed even when referenced);
//! - an eviction leaves a shadow entry holding the "non-resident age", a
//!   counter advanced by every eviction and every activation (the eviction
//!   reads it, then advances it, as 6.x kernels do; 5.x kernels advanced it
//!   first, which makes every distance one shorter); on a refault
//!   whose distance (age now minus age at eviction) is at most the size of
//!   the active list, the page is activated at once (`workingset_refault`).
//!
//! Shadow entries are kept for every evicted page (the kernel bounds them by
//! memory pressure on its radix-tree nodes).

use super::Global;
use super::list::{Links, List};

const NONE: u8 = 0;
const INACTIVE: u8 = 1;
const ACTIVE: u8 = 2;
const REFERENCED: u8 = 4;

#[derive(Debug)]
pub(crate) struct Linux {
    cap: usize,
    ratio: usize,
    links: Links,
    inactive: List,
    active: List,
    state: Vec<u8>,
    /// Non-resident age at eviction, plus one; 0 when there is no shadow.
    shadow: Vec<u64>,
    age: u64,
}

fn int_sqrt(n: u64) -> u64 {
    let square = |r: u64| u128::from(r) * u128::from(r);
    let mut r = (n as f64).sqrt() as u64;
    while square(r) > u128::from(n) {
        r -= 1;
    }
    while square(r + 1) <= u128::from(n) {
        r += 1;
    }
    r
}

impl Linux {
    /// A cache of `cap` pages of `page_size` bytes.
    pub(crate) fn new(cap: usize, universe: usize, page_size: u64) -> Linux {
        let gib = (cap as u64).saturating_mul(page_size) >> 30;
        let ratio = if gib > 0 {
            int_sqrt(gib.saturating_mul(10))
        } else {
            1
        };
        Linux {
            cap,
            ratio: ratio as usize,
            links: Links::new(universe),
            inactive: List::new(),
            active: List::new(),
            state: vec![NONE; universe],
            shadow: vec![0; universe],
            age: 0,
        }
    }

    /// Whether `x` is on the active list.
    #[cfg(test)]
    pub(crate) fn is_active(&self, x: u32) -> bool {
        self.state[x as usize] & ACTIVE != 0
    }

    fn activate(&mut self, x: u32) {
        self.active.push_head(&mut self.links, x);
        self.state[x as usize] = ACTIVE;
        self.age += 1;
    }

    fn reclaim(&mut self) {
        while self.inactive.len() * self.ratio < self.active.len() || self.inactive.is_empty() {
            let d = self.active.pop_tail(&mut self.links);
            self.inactive.push_head(&mut self.links, d);
            self.state[d as usize] = INACTIVE | (self.state[d as usize] & REFERENCED);
        }
        let v = self.inactive.pop_tail(&mut self.links);
        self.state[v as usize] = NONE;
        self.shadow[v as usize] = self.age + 1;
        self.age += 1;
    }
}

impl Global for Linux {
    #[inline]
    fn access(&mut self, x: u32) -> bool {
        let s = self.state[x as usize];
        if s & ACTIVE != 0 {
            self.state[x as usize] |= REFERENCED;
            return true;
        }
        if s & INACTIVE != 0 {
            if s & REFERENCED != 0 {
                self.inactive.remove(&mut self.links, x);
                self.activate(x);
            } else {
                self.state[x as usize] |= REFERENCED;
            }
            return true;
        }
        if self.inactive.len() + self.active.len() >= self.cap {
            self.reclaim();
        }
        let shadow = std::mem::take(&mut self.shadow[x as usize]);
        if shadow != 0 && self.age - (shadow - 1) <= self.active.len() as u64 {
            self.activate(x);
        } else {
            self.inactive.push_head(&mut self.links, x);
            self.state[x as usize] = INACTIVE;
        }
        false
    }
}
