//! W-TinyLFU (Einziger, Friedman and Manes, 2017), as in Caffeine: a window
//! LRU of 1% of the cache that new pages enter, a main segmented LRU
//! (probation 20%, protected 80% of the rest), and a count-min sketch of
//! access frequencies (four rows of 4-bit counters, as many per row as the
//! next power of two of the cache size, halved every `10 * cache` accesses).
//! A page leaving the window is admitted to probation when main has room,
//! or when its estimated frequency beats that of main's victim (the oldest
//! probation page); otherwise it is dropped. A probation hit promotes the
//! page to protected, whose overflow goes back to probation.

use super::Global;
use super::list::{Links, List};
use crate::storage::layout::mix64;

const NONE: u8 = 0;
const WINDOW: u8 = 1;
const PROBATION: u8 = 2;
const PROTECTED: u8 = 3;

/// Count-min sketch with 4-bit counters (stored in bytes) and aging.
#[derive(Debug)]
struct Sketch {
    rows: [Vec<u8>; 4],
    mask: usize,
    additions: usize,
    period: usize,
}

impl Sketch {
    fn new(cap: usize) -> Sketch {
        let width = cap.next_power_of_two().max(16);
        Sketch {
            rows: std::array::from_fn(|_| vec![0; width]),
            mask: width - 1,
            additions: 0,
            period: cap.max(1).saturating_mul(10),
        }
    }

    #[inline]
    fn index(&self, x: u32, row: usize) -> usize {
        let h = mix64(u64::from(x) ^ (row as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        h as usize & self.mask
    }

    fn add(&mut self, x: u32) {
        let mut grew = false;
        for r in 0..4 {
            let i = self.index(x, r);
            let c = &mut self.rows[r][i];
            if *c < 15 {
                *c += 1;
                grew = true;
            }
        }
        if grew {
            self.additions += 1;
            if self.additions >= self.period {
                for row in &mut self.rows {
                    for c in row.iter_mut() {
                        *c >>= 1;
                    }
                }
                self.additions /= 2;
            }
        }
    }

    fn estimate(&self, x: u32) -> u8 {
        (0..4)
            .map(|r| self.rows[r][self.index(x, r)])
            .min()
            .unwrap_or(0)
    }
}

#[derive(Debug)]
pub(crate) struct WTinyLfu {
    window_cap: usize,
    main_cap: usize,
    protected_cap: usize,
    links: Links,
    window: List,
    probation: List,
    protected: List,
    state: Vec<u8>,
    sketch: Sketch,
}

impl WTinyLfu {
    pub(crate) fn new(cap: usize, universe: usize) -> WTinyLfu {
        let window_cap = (cap / 100).max(1).min(cap);
        let main_cap = cap - window_cap;
        WTinyLfu {
            window_cap,
            main_cap,
            protected_cap: (main_cap as u128 * 4 / 5) as usize,
            links: Links::new(universe),
            window: List::new(),
            probation: List::new(),
            protected: List::new(),
            state: vec![NONE; universe],
            // A cache larger than the universe never has to choose between
            // a candidate and a victim, so the sketch is never read: size it
            // for the pages there are.
            sketch: Sketch::new(cap.min(universe)),
        }
    }
}

impl Global for WTinyLfu {
    #[inline]
    fn access(&mut self, x: u32) -> bool {
        self.sketch.add(x);
        match self.state[x as usize] {
            WINDOW => {
                self.window.move_to_head(&mut self.links, x);
                true
            }
            PROBATION => {
                self.probation.remove(&mut self.links, x);
                self.protected.push_head(&mut self.links, x);
                self.state[x as usize] = PROTECTED;
                if self.protected.len() > self.protected_cap {
                    let d = self.protected.pop_tail(&mut self.links);
                    self.probation.push_head(&mut self.links, d);
                    self.state[d as usize] = PROBATION;
                }
                true
            }
            PROTECTED => {
                self.protected.move_to_head(&mut self.links, x);
                true
            }
            _ => {
                self.window.push_head(&mut self.links, x);
                self.state[x as usize] = WINDOW;
                if self.window.len() <= self.window_cap {
                    return false;
                }
                let c = self.window.pop_tail(&mut self.links);
                if self.main_cap == 0 {
                    self.state[c as usize] = NONE;
                    return false;
                }
                if self.probation.len() + self.protected.len() < self.main_cap {
                    self.probation.push_head(&mut self.links, c);
                    self.state[c as usize] = PROBATION;
                    return false;
                }
                let from_probation = !self.probation.is_empty();
                let v = if from_probation {
                    self.probation.tail()
                } else {
                    self.protected.tail()
                };
                if self.sketch.estimate(c) > self.sketch.estimate(v) {
                    if from_probation {
                        self.probation.remove(&mut self.links, v);
                    } else {
                        self.protected.remove(&mut self.links, v);
                    }
                    self.state[v as usize] = NONE;
                    self.probation.push_head(&mut self.links, c);
                    self.state[c as usize] = PROBATION;
                } else {
                    self.state[c as usize] = NONE;
                }
                false
            }
        }
    }
}
