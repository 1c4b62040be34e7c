//! The bench's own small PRNG: xoshiro256** seeded through splitmix64.

/// xoshiro256** seeded through splitmix64.
#[derive(Clone, Debug)]
pub(crate) struct Rng {
    s: [u64; 4],
}

/// One step of splitmix64: advances `state` and returns a well-mixed value.
pub(crate) fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    mix64(*state)
}

/// The splitmix64 finaliser: a bijective 64-bit mix (the library's).
pub(crate) use setcache::layout::mix64;

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        let mut st = seed;
        let s = [
            splitmix64(&mut st),
            splitmix64(&mut st),
            splitmix64(&mut st),
            splitmix64(&mut st),
        ];
        Rng { s }
    }

    #[inline]
    pub(crate) fn next_u64(&mut self) -> u64 {
        let result = self.s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = self.s[1] << 17;
        self.s[2] ^= self.s[0];
        self.s[3] ^= self.s[1];
        self.s[1] ^= self.s[2];
        self.s[0] ^= self.s[3];
        self.s[2] ^= t;
        self.s[3] = self.s[3].rotate_left(45);
        result
    }

    /// Uniform in `[0, n)` (Lemire's multiply-shift; the bias is below 2^-64 * n).
    #[inline]
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }

    /// Uniform in `[0, 1)`.
    #[inline]
    pub(crate) fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Fill `buf` with pseudo-random bytes, none of them zero.
    pub(crate) fn fill_nonzero(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            let v = self.next_u64() | 0x0101_0101_0101_0101;
            chunk.copy_from_slice(&v.to_le_bytes()[..chunk.len()]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rng_is_uniform_enough_and_fills_nonzero() {
        let mut r = Rng::new(1);
        let mut counts = [0u32; 10];
        for _ in 0..100_000 {
            counts[r.below(10) as usize] += 1;
        }
        assert!(
            counts.iter().all(|&c| (9_500..10_500).contains(&c)),
            "{counts:?}"
        );
        let mut buf = vec![0u8; 4099];
        r.fill_nonzero(&mut buf);
        assert!(buf.iter().all(|&b| b != 0));
        let u = r.unit();
        assert!((0.0..1.0).contains(&u));
    }
}
