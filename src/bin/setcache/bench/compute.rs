//! The computations `--compute` runs on each block read: what the
//! setcache engine runs on its copy (or page reference) and the
//! setcache-numa engine as a task in the partition that holds the page.

/// The computation `--compute` runs on each block read, 8 bytes of result
/// from a block.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Compute {
    /// The sum of the block's 64-bit words ([`block_sum`]): every byte read.
    Sum,
    /// A binary search of the block's 64-bit words for a key, as in a node
    /// of a B-tree ([`block_search`]): about log2(words) + 1 words read, on
    /// fewer cache lines (the last steps stay in one line).
    Search,
}

impl Compute {
    /// This computation on block `b`.
    pub(crate) fn run(self, b: &[u8]) -> u64 {
        match self {
            Compute::Sum => block_sum(b),
            Compute::Search => block_search(b, SEARCH_KEY),
        }
    }
}

/// The sum of a block's 64-bit little-endian words (a column's sum).
pub(crate) fn block_sum(b: &[u8]) -> u64 {
    b.chunks_exact(8)
        .map(|w| u64::from_le_bytes(w.try_into().expect("8 bytes")))
        .fold(0u64, u64::wrapping_add)
}

/// The key `--compute search` looks for: the middle of the keys' range, so
/// that on the bench file's random words each step of the search goes
/// either way.
pub(crate) const SEARCH_KEY: u64 = 1 << 63;

/// The index of the first of a block's 64-bit little-endian words that is
/// not less than `key`, by binary search, as a search of a B-tree node's
/// sorted keys finds the child to follow. On words that are not sorted the
/// answer is some index the search ends at; the words it reads, and so its
/// cost, are those of a search of sorted ones.
pub(crate) fn block_search(b: &[u8], key: u64) -> u64 {
    let word = |i: usize| u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
    let (mut lo, mut hi) = (0usize, b.len() / 8);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if word(mid) < key {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(w: &[u64]) -> Vec<u8> {
        w.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    /// On sorted words the search finds the first not less than the key,
    /// as the standard library's `partition_point` does, for keys below,
    /// between, on and above them, and in a block of none.
    #[test]
    fn a_block_search_finds_the_first_word_not_less_than_its_key() {
        let sorted: Vec<u64> = (0..512u64).map(|i| i * 3 + 10).collect();
        let b = words(&sorted);
        for key in [0, 9, 10, 11, 12, 13, 700, 1539, 1540, 1541, u64::MAX] {
            let want = sorted.partition_point(|&w| w < key) as u64;
            assert_eq!(block_search(&b, key), want, "key {key}");
        }
        let dup = words(&[1, 5, 5, 5, 9]);
        assert_eq!(block_search(&dup, 5), 1);
        assert_eq!(block_search(&[], 5), 0);
        assert_eq!(Compute::Search.run(&words(&[1, 1 << 63, u64::MAX])), 1);
        assert_eq!(Compute::Sum.run(&words(&[1, 2, u64::MAX])), 2);
    }
}
