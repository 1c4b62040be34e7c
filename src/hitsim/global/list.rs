//! Intrusive doubly-linked lists over dense page indices.
//!
//! Pages are numbered `0..universe` (the trace's dense ids), so a list needs
//! no allocation per node: one `prev` and one `next` array, indexed by page,
//! are shared by every list of a policy (a page is in at most one list at a
//! time). [`NIL`] ends a list. All operations are O(1).

/// The index that names no page.
pub(crate) const NIL: u32 = u32::MAX;

/// The link arrays shared by the lists of one policy.
#[derive(Clone, Debug)]
pub(crate) struct Links {
    prev: Vec<u32>,
    next: Vec<u32>,
}

impl Links {
    /// Links for pages `0..n`, none in any list.
    pub(crate) fn new(n: usize) -> Links {
        Links {
            prev: vec![NIL; n],
            next: vec![NIL; n],
        }
    }

    /// The page after `x` (towards the tail), or [`NIL`].
    #[cfg(test)]
    pub(crate) fn next(&self, x: u32) -> u32 {
        self.next[x as usize]
    }

    /// The page before `x` (towards the head), or [`NIL`].
    #[inline]
    pub(crate) fn prev(&self, x: u32) -> u32 {
        self.prev[x as usize]
    }
}

/// One list: head is the newest end, tail the oldest.
#[derive(Clone, Copy, Debug)]
pub(crate) struct List {
    head: u32,
    tail: u32,
    len: usize,
}

impl Default for List {
    fn default() -> Self {
        List::new()
    }
}

impl List {
    /// An empty list.
    pub(crate) const fn new() -> List {
        List {
            head: NIL,
            tail: NIL,
            len: 0,
        }
    }

    /// Number of pages in the list.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Whether the list is empty.
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The newest page, or [`NIL`].
    #[cfg(test)]
    pub(crate) fn head(&self) -> u32 {
        self.head
    }

    /// The oldest page, or [`NIL`].
    #[inline]
    pub(crate) fn tail(&self) -> u32 {
        self.tail
    }

    /// Puts `x` (in no list) at the head.
    #[inline]
    pub(crate) fn push_head(&mut self, l: &mut Links, x: u32) {
        l.prev[x as usize] = NIL;
        l.next[x as usize] = self.head;
        if self.head != NIL {
            l.prev[self.head as usize] = x;
        } else {
            self.tail = x;
        }
        self.head = x;
        self.len += 1;
    }

    /// Takes `x`, which must be in this list, out of it.
    #[inline]
    pub(crate) fn remove(&mut self, l: &mut Links, x: u32) {
        let (p, n) = (l.prev[x as usize], l.next[x as usize]);
        if p != NIL {
            l.next[p as usize] = n;
        } else {
            self.head = n;
        }
        if n != NIL {
            l.prev[n as usize] = p;
        } else {
            self.tail = p;
        }
        l.prev[x as usize] = NIL;
        l.next[x as usize] = NIL;
        self.len -= 1;
    }

    /// Takes the tail out of the list and returns it ([`NIL`] when empty).
    #[inline]
    pub(crate) fn pop_tail(&mut self, l: &mut Links) -> u32 {
        let t = self.tail;
        if t != NIL {
            self.remove(l, t);
        }
        t
    }

    /// Moves `x`, which must be in this list, to the head.
    #[inline]
    pub(crate) fn move_to_head(&mut self, l: &mut Links, x: u32) {
        if self.head != x {
            self.remove(l, x);
            self.push_head(l, x);
        }
    }

    /// The pages from head to tail (for tests).
    #[cfg(test)]
    pub(crate) fn pages(&self, l: &Links) -> Vec<u32> {
        let mut v = Vec::new();
        let mut x = self.head;
        while x != NIL {
            v.push(x);
            x = l.next(x);
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_operations() {
        let mut l = Links::new(10);
        let mut a = List::new();
        let mut b = List::new();
        for x in 0..5 {
            a.push_head(&mut l, x);
        }
        assert_eq!(a.pages(&l), [4, 3, 2, 1, 0]);
        a.remove(&mut l, 2);
        a.move_to_head(&mut l, 0);
        assert_eq!(a.pages(&l), [0, 4, 3, 1]);
        assert_eq!(a.pop_tail(&mut l), 1);
        for x in [2, 7, 1, 8] {
            b.push_head(&mut l, x);
        }
        assert_eq!(b.pages(&l), [8, 1, 7, 2]);
        assert_eq!((a.len(), b.len()), (3, 4));
        assert_eq!((a.head(), a.tail(), b.tail()), (0, 3, 2));
        while !b.is_empty() {
            b.pop_tail(&mut l);
        }
        assert_eq!((b.head(), b.tail()), (NIL, NIL));
    }
}
