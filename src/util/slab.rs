//! A vector of values addressed by small integer keys that are reused after
//! removal: the bookkeeping of things in flight (requests, fills, writes).

/// Values under reusable keys.
pub(crate) struct Slab<T> {
    items: Vec<Option<T>>,
    free: Vec<usize>,
}

impl<T> Slab<T> {
    pub(crate) fn new() -> Slab<T> {
        Slab {
            items: Vec::new(),
            free: Vec::new(),
        }
    }

    /// Store `v`; returns its key.
    pub(crate) fn insert(&mut self, v: T) -> usize {
        match self.free.pop() {
            Some(k) => {
                self.items[k] = Some(v);
                k
            }
            None => {
                self.items.push(Some(v));
                self.items.len() - 1
            }
        }
    }

    pub(crate) fn get(&self, k: usize) -> Option<&T> {
        self.items.get(k).and_then(Option::as_ref)
    }

    pub(crate) fn get_mut(&mut self, k: usize) -> Option<&mut T> {
        self.items.get_mut(k).and_then(Option::as_mut)
    }

    /// Take the value under `k` out; the key becomes free.
    pub(crate) fn remove(&mut self, k: usize) -> Option<T> {
        let v = self.items.get_mut(k)?.take()?;
        self.free.push(k);
        Some(v)
    }

    /// The values, in key order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &T> {
        self.items.iter().flatten()
    }

    /// Take every value out, leaving the slab empty.
    pub(crate) fn take_all(&mut self) -> Vec<T> {
        self.free.clear();
        std::mem::take(&mut self.items)
            .into_iter()
            .flatten()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::Slab;

    #[test]
    fn keys_are_reused_after_removal() {
        let mut s = Slab::new();
        let a = s.insert("a");
        let b = s.insert("b");
        assert_eq!((a, b), (0, 1));
        assert_eq!(s.remove(a), Some("a"));
        assert_eq!(s.remove(a), None);
        assert_eq!(s.insert("c"), a);
        assert_eq!(s.get(a), Some(&"c"));
        *s.get_mut(b).unwrap() = "d";
        assert_eq!(s.get(b), Some(&"d"));
        assert_eq!(s.get(9), None);
    }
}
