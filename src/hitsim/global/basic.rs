//! The single-queue policies: LRU, FIFO, CLOCK, GCLOCK and SIEVE.

use super::Global;
use super::list::{Links, List, NIL};
use crate::cache::policy::GCLOCK_MAX;

/// Least recently used: one list, hits move to the head, the tail is evicted.
#[derive(Debug)]
pub(crate) struct Lru {
    cap: usize,
    links: Links,
    list: List,
    resident: Vec<bool>,
}

impl Lru {
    pub(crate) fn new(cap: usize, universe: usize) -> Lru {
        Lru {
            cap,
            links: Links::new(universe),
            list: List::new(),
            resident: vec![false; universe],
        }
    }
}

impl Global for Lru {
    #[inline]
    fn access(&mut self, x: u32) -> bool {
        if self.resident[x as usize] {
            self.list.move_to_head(&mut self.links, x);
            return true;
        }
        if self.list.len() >= self.cap {
            let v = self.list.pop_tail(&mut self.links);
            self.resident[v as usize] = false;
        }
        self.list.push_head(&mut self.links, x);
        self.resident[x as usize] = true;
        false
    }
}

/// First in, first out: a ring of `cap` slots; a miss replaces the oldest.
#[derive(Debug)]
pub(crate) struct Fifo {
    cap: usize,
    ring: Vec<u32>,
    hand: usize,
    resident: Vec<bool>,
}

impl Fifo {
    pub(crate) fn new(cap: usize, universe: usize) -> Fifo {
        Fifo {
            cap,
            ring: Vec::with_capacity(cap.min(universe)),
            hand: 0,
            resident: vec![false; universe],
        }
    }
}

impl Global for Fifo {
    #[inline]
    fn access(&mut self, x: u32) -> bool {
        if self.resident[x as usize] {
            return true;
        }
        if self.ring.len() < self.cap {
            self.ring.push(x);
        } else {
            let v = std::mem::replace(&mut self.ring[self.hand], x);
            self.resident[v as usize] = false;
            self.hand = if self.hand + 1 == self.cap {
                0
            } else {
                self.hand + 1
            };
        }
        self.resident[x as usize] = true;
        false
    }
}

/// CLOCK (`max == 1`, a reference bit) and GCLOCK (`max == GCLOCK_MAX`, a
/// saturating use counter): a ring of `cap` slots and a hand. A hit raises
/// the page's counter (up to `max`); a new page starts at 0 in the slot of the
/// page it replaces, just behind the hand. To evict, the hand decrements and
/// passes non-zero counters and stops at the first zero.
#[derive(Debug)]
pub(crate) struct Clock {
    cap: usize,
    max: u8,
    ring: Vec<u32>,
    hand: usize,
    /// 0: not resident; otherwise 1 + the counter.
    state: Vec<u8>,
}

impl Clock {
    /// CLOCK with a reference bit.
    pub(crate) fn second_chance(cap: usize, universe: usize) -> Clock {
        Clock::with_max(cap, universe, 1)
    }

    /// GCLOCK with the counters of the cache's `sa-gclock` (0..=GCLOCK_MAX).
    pub(crate) fn gclock(cap: usize, universe: usize) -> Clock {
        Clock::with_max(cap, universe, GCLOCK_MAX)
    }

    fn with_max(cap: usize, universe: usize, max: u8) -> Clock {
        Clock {
            cap,
            max,
            ring: Vec::with_capacity(cap.min(universe)),
            hand: 0,
            state: vec![0; universe],
        }
    }
}

impl Global for Clock {
    #[inline]
    fn access(&mut self, x: u32) -> bool {
        let s = &mut self.state[x as usize];
        if *s != 0 {
            if *s <= self.max {
                *s += 1;
            }
            return true;
        }
        *s = 1;
        if self.ring.len() < self.cap {
            self.ring.push(x);
            return false;
        }
        loop {
            let v = self.ring[self.hand] as usize;
            let here = self.hand;
            self.hand = if self.hand + 1 == self.cap {
                0
            } else {
                self.hand + 1
            };
            if self.state[v] > 1 {
                self.state[v] -= 1;
            } else {
                self.state[v] = 0;
                self.ring[here] = x;
                return false;
            }
        }
    }
}

/// SIEVE (Zhang et al., NSDI '24): a FIFO list with a visited bit per page.
/// New pages enter at the head; a hit sets the bit. The hand walks from the
/// tail towards the head, clearing bits, and evicts the first unvisited page;
/// it keeps its place between evictions (wrapping to the tail).
#[derive(Debug)]
pub(crate) struct Sieve {
    cap: usize,
    links: Links,
    list: List,
    hand: u32,
    /// 0: not resident, 1: resident, 2: resident and visited.
    state: Vec<u8>,
}

impl Sieve {
    pub(crate) fn new(cap: usize, universe: usize) -> Sieve {
        Sieve {
            cap,
            links: Links::new(universe),
            list: List::new(),
            hand: NIL,
            state: vec![0; universe],
        }
    }
}

impl Global for Sieve {
    #[inline]
    fn access(&mut self, x: u32) -> bool {
        let s = &mut self.state[x as usize];
        if *s != 0 {
            *s = 2;
            return true;
        }
        if self.list.len() >= self.cap {
            let mut o = if self.hand == NIL {
                self.list.tail()
            } else {
                self.hand
            };
            while self.state[o as usize] == 2 {
                self.state[o as usize] = 1;
                o = self.links.prev(o);
                if o == NIL {
                    o = self.list.tail();
                }
            }
            self.hand = self.links.prev(o);
            self.list.remove(&mut self.links, o);
            self.state[o as usize] = 0;
        }
        self.list.push_head(&mut self.links, x);
        self.state[x as usize] = 1;
        false
    }
}
