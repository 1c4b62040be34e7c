//! Least frequently used in O(1) (Shah, Mitra and Matani, 2010): resident
//! pages sit in one list per access count, and the lists are chained in
//! increasing count. A hit moves a page to the list of the next count
//! (creating it after the current one when missing); the victim is the
//! oldest page of the smallest count (ties go to the page that reached that
//! count first). Counts are kept for resident pages only ("in-cache" LFU): an
//! evicted page comes back with a count of 1.

use super::Global;
use super::list::{Links, List, NIL};

#[derive(Debug, Clone, Copy)]
struct Bucket {
    count: u64,
    pages: List,
    /// Neighbouring buckets (smaller and larger counts).
    lower: u32,
    higher: u32,
}

#[derive(Debug)]
pub(crate) struct Lfu {
    cap: usize,
    resident: usize,
    links: Links,
    /// The bucket of each page, [`NIL`] when not resident.
    bucket_of: Vec<u32>,
    buckets: Vec<Bucket>,
    free: Vec<u32>,
    /// The bucket with the smallest count.
    lowest: u32,
}

impl Lfu {
    pub(crate) fn new(cap: usize, universe: usize) -> Lfu {
        Lfu {
            cap,
            resident: 0,
            links: Links::new(universe),
            bucket_of: vec![NIL; universe],
            buckets: Vec::new(),
            free: Vec::new(),
            lowest: NIL,
        }
    }

    /// A new empty bucket of `count` between `lower` and `higher`.
    fn new_bucket(&mut self, count: u64, lower: u32, higher: u32) -> u32 {
        let b = Bucket {
            count,
            pages: List::new(),
            lower,
            higher,
        };
        let i = match self.free.pop() {
            Some(i) => {
                self.buckets[i as usize] = b;
                i
            }
            None => {
                self.buckets.push(b);
                (self.buckets.len() - 1) as u32
            }
        };
        if lower == NIL {
            self.lowest = i;
        } else {
            self.buckets[lower as usize].higher = i;
        }
        if higher != NIL {
            self.buckets[higher as usize].lower = i;
        }
        i
    }

    fn drop_if_empty(&mut self, b: u32) {
        let Bucket {
            pages,
            lower,
            higher,
            ..
        } = self.buckets[b as usize];
        if !pages.is_empty() {
            return;
        }
        if lower == NIL {
            self.lowest = higher;
        } else {
            self.buckets[lower as usize].higher = higher;
        }
        if higher != NIL {
            self.buckets[higher as usize].lower = lower;
        }
        self.free.push(b);
    }
}

impl Global for Lfu {
    #[inline]
    fn access(&mut self, x: u32) -> bool {
        let b = self.bucket_of[x as usize];
        if b != NIL {
            let Bucket { count, higher, .. } = self.buckets[b as usize];
            let nb = if higher != NIL && self.buckets[higher as usize].count == count + 1 {
                higher
            } else {
                self.new_bucket(count + 1, b, higher)
            };
            self.buckets[b as usize].pages.remove(&mut self.links, x);
            self.buckets[nb as usize]
                .pages
                .push_head(&mut self.links, x);
            self.bucket_of[x as usize] = nb;
            self.drop_if_empty(b);
            return true;
        }
        if self.resident >= self.cap {
            let low = self.lowest;
            let v = self.buckets[low as usize].pages.pop_tail(&mut self.links);
            self.bucket_of[v as usize] = NIL;
            self.resident -= 1;
            self.drop_if_empty(low);
        }
        let low = self.lowest;
        let b = if low != NIL && self.buckets[low as usize].count == 1 {
            low
        } else {
            self.new_bucket(1, NIL, low)
        };
        self.buckets[b as usize].pages.push_head(&mut self.links, x);
        self.bucket_of[x as usize] = b;
        self.resident += 1;
        false
    }
}
