//! LIRS (Jiang and Zhang, SIGMETRICS '02).
//!
//! Resident pages are LIR (low inter-reference recency, at most `Llirs` of
//! them) or resident HIR (`Lhirs` = 1% of the cache, at least one page). The
//! stack `S` holds pages in recency order (LIR pages, resident HIR pages and
//! non-resident HIR pages that are still "recent"), its bottom always an LIR
//! page (stack pruning); the queue `Q` holds the resident HIR pages in the
//! order they entered it, and the victim is its front. A page found in `S`
//! when accessed has a reuse distance smaller than the oldest LIR page's
//! recency: it becomes LIR and the bottom LIR page becomes resident HIR.
//! Non-resident HIR entries in `S` are not bounded except by the pruning
//! (the footprint bounds them).

use super::Global;
use super::list::{Links, List, NIL};

const NONE: u8 = 0;
const LIR: u8 = 1;
const HIR: u8 = 2;
/// A non-resident HIR page that is still in `S`.
const GHOST: u8 = 3;

#[derive(Debug)]
pub(crate) struct Lirs {
    cap: usize,
    llirs: usize,
    n_lir: usize,
    n_hir: usize,
    s_links: Links,
    s: List,
    q_links: Links,
    q: List,
    state: Vec<u8>,
    in_s: Vec<bool>,
}

impl Lirs {
    pub(crate) fn new(cap: usize, universe: usize) -> Lirs {
        let lhirs = (cap / 100).max(1).min(cap.saturating_sub(1).max(1));
        Lirs {
            cap,
            llirs: cap - lhirs.min(cap),
            n_lir: 0,
            n_hir: 0,
            s_links: Links::new(universe),
            s: List::new(),
            q_links: Links::new(universe),
            q: List::new(),
            state: vec![NONE; universe],
            in_s: vec![false; universe],
        }
    }

    /// Removes HIR pages (resident or not) from the bottom of `S` until an
    /// LIR page is at the bottom.
    fn prune(&mut self) {
        loop {
            let b = self.s.tail();
            if b == NIL || self.state[b as usize] == LIR {
                return;
            }
            self.s.remove(&mut self.s_links, b);
            self.in_s[b as usize] = false;
            if self.state[b as usize] == GHOST {
                self.state[b as usize] = NONE;
            }
        }
    }

    /// Moves `x` to the top of `S` (pushing it if absent).
    fn raise(&mut self, x: u32) {
        if self.in_s[x as usize] {
            self.s.move_to_head(&mut self.s_links, x);
        } else {
            self.s.push_head(&mut self.s_links, x);
            self.in_s[x as usize] = true;
        }
    }

    /// Turns the LIR page at the bottom of `S` into a resident HIR page at
    /// the end of `Q`, then prunes.
    fn demote_bottom(&mut self) {
        let b = self.s.pop_tail(&mut self.s_links);
        self.in_s[b as usize] = false;
        self.state[b as usize] = HIR;
        self.n_lir -= 1;
        self.n_hir += 1;
        self.q.push_head(&mut self.q_links, b);
        self.prune();
    }

    /// `x` (a resident HIR page, or a ghost being loaded) becomes LIR.
    fn promote(&mut self, x: u32) {
        if self.state[x as usize] == HIR {
            self.q.remove(&mut self.q_links, x);
            self.n_hir -= 1;
        }
        self.state[x as usize] = LIR;
        self.n_lir += 1;
        self.raise(x);
        while self.n_lir > self.llirs.max(1) {
            self.demote_bottom();
        }
    }
}

impl Global for Lirs {
    #[inline]
    fn access(&mut self, x: u32) -> bool {
        match self.state[x as usize] {
            LIR => {
                let was_bottom = self.s.tail() == x;
                self.s.move_to_head(&mut self.s_links, x);
                if was_bottom {
                    self.prune();
                }
                true
            }
            HIR => {
                if self.in_s[x as usize] {
                    self.promote(x);
                } else {
                    self.raise(x);
                    self.q.move_to_head(&mut self.q_links, x);
                }
                true
            }
            st => {
                // A miss: free a frame first (the front of Q).
                if self.n_lir + self.n_hir >= self.cap {
                    if self.n_hir == 0 {
                        // A cache of one page, held by an LIR page that a
                        // promotion left above other entries of S: it
                        // becomes the resident HIR page that goes.
                        self.prune();
                        self.demote_bottom();
                    }
                    let v = self.q.pop_tail(&mut self.q_links);
                    self.n_hir -= 1;
                    self.state[v as usize] = if self.in_s[v as usize] { GHOST } else { NONE };
                }
                if self.n_lir < self.llirs && self.n_hir == 0 {
                    // Warm-up: the first Llirs pages become LIR directly.
                    self.state[x as usize] = LIR;
                    self.n_lir += 1;
                    self.raise(x);
                } else if st == GHOST {
                    self.promote(x);
                } else {
                    self.state[x as usize] = HIR;
                    self.n_hir += 1;
                    self.raise(x);
                    self.q.push_head(&mut self.q_links, x);
                }
                false
            }
        }
    }
}
