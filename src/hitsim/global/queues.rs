//! 2Q and ARC: a recency queue, a frequency queue and ghost lists.

use super::Global;
use super::list::{Links, List};

const NONE: u8 = 0;

/// 2Q, the full version (Johnson and Shasha, VLDB '94): new pages enter
/// `A1in`, a FIFO of `Kin` = 25% of the cache; pages pushed out of it are
/// remembered in the ghost FIFO `A1out` (`Kout` = 50% of the cache, in
/// pages); a miss on a page remembered there goes to `Am`, an LRU of the rest.
/// To make room, `A1in`'s oldest page goes to `A1out` when `A1in` holds more
/// than `Kin`, otherwise `Am`'s least recent page is dropped.
#[derive(Debug)]
pub(crate) struct TwoQ {
    cap: usize,
    kin: usize,
    kout: usize,
    links: Links,
    a1in: List,
    a1out: List,
    am: List,
    /// NONE, or which list the page is in.
    state: Vec<u8>,
}

const A1IN: u8 = 1;
const A1OUT: u8 = 2;
const AM: u8 = 3;

impl TwoQ {
    pub(crate) fn new(cap: usize, universe: usize) -> TwoQ {
        TwoQ {
            cap,
            kin: (cap / 4).max(1),
            kout: (cap / 2).max(1),
            links: Links::new(universe),
            a1in: List::new(),
            a1out: List::new(),
            am: List::new(),
            state: vec![NONE; universe],
        }
    }

    fn make_room(&mut self) {
        if self.a1in.len() + self.am.len() < self.cap {
            return;
        }
        if self.a1in.len() > self.kin || self.am.is_empty() {
            let y = self.a1in.pop_tail(&mut self.links);
            self.a1out.push_head(&mut self.links, y);
            self.state[y as usize] = A1OUT;
            if self.a1out.len() > self.kout {
                let z = self.a1out.pop_tail(&mut self.links);
                self.state[z as usize] = NONE;
            }
        } else {
            let y = self.am.pop_tail(&mut self.links);
            self.state[y as usize] = NONE;
        }
    }
}

impl Global for TwoQ {
    #[inline]
    fn access(&mut self, x: u32) -> bool {
        match self.state[x as usize] {
            AM => {
                self.am.move_to_head(&mut self.links, x);
                true
            }
            A1IN => true,
            A1OUT => {
                self.a1out.remove(&mut self.links, x);
                self.state[x as usize] = NONE;
                self.make_room();
                self.am.push_head(&mut self.links, x);
                self.state[x as usize] = AM;
                false
            }
            _ => {
                self.make_room();
                self.a1in.push_head(&mut self.links, x);
                self.state[x as usize] = A1IN;
                false
            }
        }
    }
}

/// ARC (Megiddo and Modha, FAST '03), as in the paper's Figure 4: resident
/// lists `T1` (seen once recently) and `T2` (at least twice), ghost lists
/// `B1` and `B2` of their evictions, and the target size `p` of `T1`, which a
/// ghost hit in `B1` raises by `max(1, |B2| / |B1|)` and one in `B2` lowers by
/// `max(1, |B1| / |B2|)` (integer division).
#[derive(Debug)]
pub(crate) struct Arc {
    c: usize,
    p: usize,
    links: Links,
    t1: List,
    t2: List,
    b1: List,
    b2: List,
    state: Vec<u8>,
}

const T1: u8 = 1;
const T2: u8 = 2;
const B1: u8 = 3;
const B2: u8 = 4;

impl Arc {
    pub(crate) fn new(cap: usize, universe: usize) -> Arc {
        Arc {
            c: cap,
            p: 0,
            links: Links::new(universe),
            t1: List::new(),
            t2: List::new(),
            b1: List::new(),
            b2: List::new(),
            state: vec![NONE; universe],
        }
    }

    /// REPLACE(x, p): demote the LRU page of T1 to B1 or that of T2 to B2.
    fn replace(&mut self, in_b2: bool) {
        let t1 = self.t1.len();
        if t1 >= 1 && ((in_b2 && t1 == self.p) || t1 > self.p) {
            let y = self.t1.pop_tail(&mut self.links);
            self.b1.push_head(&mut self.links, y);
            self.state[y as usize] = B1;
        } else {
            let y = self.t2.pop_tail(&mut self.links);
            self.b2.push_head(&mut self.links, y);
            self.state[y as usize] = B2;
        }
    }
}

impl Global for Arc {
    #[inline]
    fn access(&mut self, x: u32) -> bool {
        match self.state[x as usize] {
            T1 => {
                self.t1.remove(&mut self.links, x);
                self.t2.push_head(&mut self.links, x);
                self.state[x as usize] = T2;
                true
            }
            T2 => {
                self.t2.move_to_head(&mut self.links, x);
                true
            }
            B1 => {
                let d = (self.b2.len() / self.b1.len()).max(1);
                self.p = self.p.saturating_add(d).min(self.c);
                self.replace(false);
                self.b1.remove(&mut self.links, x);
                self.t2.push_head(&mut self.links, x);
                self.state[x as usize] = T2;
                false
            }
            B2 => {
                let d = (self.b1.len() / self.b2.len()).max(1);
                self.p = self.p.saturating_sub(d);
                self.replace(true);
                self.b2.remove(&mut self.links, x);
                self.t2.push_head(&mut self.links, x);
                self.state[x as usize] = T2;
                false
            }
            _ => {
                let l1 = self.t1.len() + self.b1.len();
                let total = l1 + self.t2.len() + self.b2.len();
                if l1 == self.c {
                    if self.t1.len() < self.c {
                        let y = self.b1.pop_tail(&mut self.links);
                        self.state[y as usize] = NONE;
                        self.replace(false);
                    } else {
                        let y = self.t1.pop_tail(&mut self.links);
                        self.state[y as usize] = NONE;
                    }
                } else if total >= self.c {
                    if total == self.c.saturating_mul(2) {
                        let y = self.b2.pop_tail(&mut self.links);
                        self.state[y as usize] = NONE;
                    }
                    self.replace(false);
                }
                self.t1.push_head(&mut self.links, x);
                self.state[x as usize] = T1;
                false
            }
        }
    }
}
