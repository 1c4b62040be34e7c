//! S3-FIFO (Yang et al., SOSP '23), global: a small FIFO `S` (10% of the
//! cache) that new pages enter, a main FIFO `M` (the rest) and a ghost FIFO
//! `G` of pages evicted from `S` (as many entries as `M` holds pages). Each
//! resident page has a 2-bit frequency (saturating at 3), set to 0 when the
//! page enters a queue.
//!
//! A miss on a page remembered in `G` inserts it into `M`, any other miss
//! into `S`. To make room, `S` is examined while it holds at least its share
//! (else `M`): its oldest page moves to `M` when its frequency reached
//! [`MOVE_TO_MAIN`] (and `M`, if over its size, evicts), otherwise it is
//! evicted into `G`. `M`'s oldest page is reinserted with its frequency
//! decremented while non-zero, and evicted otherwise.

use super::Global;
use super::list::{Links, List};

/// The frequency at which a page leaving `S` moves to `M` instead of `G`.
/// The paper's Algorithm 1 says `freq > 1`, libCacheSim's default threshold
/// is 2: the same rule.
pub(crate) const MOVE_TO_MAIN: u8 = 2;

const NONE: u8 = 0;
const SMALL: u8 = 1;
const MAIN: u8 = 2;
const GHOST: u8 = 3;

#[derive(Debug)]
pub(crate) struct S3Fifo {
    cap: usize,
    small_cap: usize,
    main_cap: usize,
    links: Links,
    small: List,
    main: List,
    ghost: List,
    state: Vec<u8>,
    freq: Vec<u8>,
}

impl S3Fifo {
    pub(crate) fn new(cap: usize, universe: usize) -> S3Fifo {
        let small_cap = ((cap as f64 * 0.1).round() as usize).clamp(1, cap.max(1));
        S3Fifo {
            cap,
            small_cap,
            main_cap: cap - small_cap.min(cap),
            links: Links::new(universe),
            small: List::new(),
            main: List::new(),
            ghost: List::new(),
            state: vec![NONE; universe],
            freq: vec![0; universe],
        }
    }

    fn evict_main(&mut self) {
        loop {
            let t = self.main.pop_tail(&mut self.links);
            let f = &mut self.freq[t as usize];
            if *f > 0 {
                *f -= 1;
                self.main.push_head(&mut self.links, t);
            } else {
                self.state[t as usize] = NONE;
                return;
            }
        }
    }

    fn evict_small(&mut self) {
        while !self.small.is_empty() {
            let t = self.small.pop_tail(&mut self.links);
            if self.freq[t as usize] >= MOVE_TO_MAIN {
                self.freq[t as usize] = 0;
                self.main.push_head(&mut self.links, t);
                self.state[t as usize] = MAIN;
                if self.main.len() > self.main_cap {
                    self.evict_main();
                    return;
                }
            } else {
                self.state[t as usize] = GHOST;
                self.ghost.push_head(&mut self.links, t);
                if self.ghost.len() > self.main_cap.max(1) {
                    let g = self.ghost.pop_tail(&mut self.links);
                    self.state[g as usize] = NONE;
                }
                return;
            }
        }
        self.evict_main();
    }
}

impl Global for S3Fifo {
    #[inline]
    fn access(&mut self, x: u32) -> bool {
        let st = self.state[x as usize];
        if st == SMALL || st == MAIN {
            let f = &mut self.freq[x as usize];
            *f = (*f + 1).min(3);
            return true;
        }
        if st == GHOST {
            self.ghost.remove(&mut self.links, x);
            self.state[x as usize] = NONE;
        }
        while self.small.len() + self.main.len() >= self.cap {
            if self.small.len() >= self.small_cap || self.main.is_empty() {
                self.evict_small();
            } else {
                self.evict_main();
            }
        }
        self.freq[x as usize] = 0;
        if st == GHOST {
            self.main.push_head(&mut self.links, x);
            self.state[x as usize] = MAIN;
        } else {
            self.small.push_head(&mut self.links, x);
            self.state[x as usize] = SMALL;
        }
        false
    }
}
