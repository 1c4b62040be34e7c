//! YCSB's key choosers, re-implemented from their published semantics
//! (`site.ycsb.generator.ZipfianGenerator` and `ScrambledZipfianGenerator`,
//! `site.ycsb.Utils.fnvhash64`, `site.ycsb.workloads.CoreWorkload`), and a
//! small seeded random number generator in place of Java's
//! `ThreadLocalRandom` (whose stream cannot be reproduced anyway).

/// xoshiro256** seeded through splitmix64.
#[derive(Clone, Debug)]
pub struct Rng {
    s: [u64; 4],
}

impl Rng {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Rng {
        let mut x = seed;
        let mut next = || {
            x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
            crate::util::mix::mix64(x)
        };
        Rng {
            s: [next(), next(), next(), next()],
        }
    }

    /// A uniform 64-bit value.
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        let s = &mut self.s;
        let result = s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        result
    }

    /// A uniform double in `[0, 1)` with 53 random bits (as Java's
    /// `nextDouble`).
    #[inline]
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// A uniform value in `0..n` (`n > 0`), without modulo bias worth
    /// speaking of (Lemire's multiply-shift).
    #[inline]
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }
}

/// `Utils.fnvhash64`: FNV-1a over the 8 bytes of `val`, low byte first,
/// then `Math.abs` of the signed result.
pub fn fnvhash64(val: i64) -> i64 {
    const FNV_OFFSET_BASIS_64: u64 = 0xCBF2_9CE4_8422_2325;
    const FNV_PRIME_64: u64 = 1_099_511_628_211;
    let mut v = val as u64;
    let mut h = FNV_OFFSET_BASIS_64;
    for _ in 0..8 {
        h ^= v & 0xff;
        h = h.wrapping_mul(FNV_PRIME_64);
        v >>= 8;
    }
    (h as i64).wrapping_abs()
}

/// `zeta(n, theta)`: the sum of `1 / i^theta` for `i` in `1..=n`. Exact
/// summation up to a million terms, then the Euler-Maclaurin expansion of the
/// tail (relative error far below 1e-12), because YCSB's loop over 10^10
/// terms would take minutes.
pub fn zeta(n: u64, theta: f64) -> f64 {
    const EXACT: u64 = 1_000_000;
    let head = n.min(EXACT);
    let mut sum = 0.0;
    for i in 1..=head {
        sum += 1.0 / (i as f64).powf(theta);
    }
    if n <= EXACT {
        return sum;
    }
    // Sum over i in (a, b] of f(i), f(x) = x^-theta, a = EXACT, b = n:
    // integral + (f(b) - f(a)) / 2 + (f'(b) - f'(a)) / 12 - ...
    let (a, b) = (EXACT as f64, n as f64);
    let f = |x: f64| x.powf(-theta);
    let f1 = |x: f64| -theta * x.powf(-theta - 1.0);
    let f3 = |x: f64| -theta * (theta + 1.0) * (theta + 2.0) * x.powf(-theta - 3.0);
    let integral = if (theta - 1.0).abs() < 1e-12 {
        (b / a).ln()
    } else {
        (b.powf(1.0 - theta) - a.powf(1.0 - theta)) / (1.0 - theta)
    };
    sum + integral + (f(b) - f(a)) / 2.0 + (f1(b) - f1(a)) / 12.0 - (f3(b) - f3(a)) / 720.0
}

/// `ZipfianGenerator` (Gray et al., "Quickly generating billion-record
/// synthetic databases"): values `base..base + items`, value `base + i` with
/// probability proportional to `1 / (i + 1)^theta`; `theta < 1`.
#[derive(Clone, Debug)]
pub struct Zipfian {
    items: u64,
    base: u64,
    theta: f64,
    alpha: f64,
    zetan: f64,
    eta: f64,
    half_pow_theta: f64,
}

impl Zipfian {
    /// Values `min..=max` with constant `theta`, and `zetan` given (as YCSB
    /// does for its scrambled generator) or computed.
    pub fn new(min: u64, max: u64, theta: f64, zetan: Option<f64>) -> Zipfian {
        let items = max - min + 1;
        let zetan = zetan.unwrap_or_else(|| zeta(items, theta));
        let zeta2theta = zeta(2, theta);
        Zipfian {
            items,
            base: min,
            theta,
            alpha: 1.0 / (1.0 - theta),
            zetan,
            eta: (1.0 - (2.0 / items as f64).powf(1.0 - theta)) / (1.0 - zeta2theta / zetan),
            half_pow_theta: 0.5f64.powf(theta),
        }
    }

    /// `nextLong(items)`.
    #[inline]
    pub fn next(&self, rng: &mut Rng) -> u64 {
        let u = rng.next_f64();
        let uz = u * self.zetan;
        if uz < 1.0 {
            return self.base;
        }
        if uz < 1.0 + self.half_pow_theta {
            return self.base + 1;
        }
        // Java: (long) (itemcount * Math.pow(eta * u - eta + 1, alpha)).
        self.base + (self.items as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64
    }

    /// The constant.
    pub fn theta(&self) -> f64 {
        self.theta
    }
}

/// `ScrambledZipfianGenerator.ITEM_COUNT`.
pub const YCSB_ITEM_COUNT: u64 = 10_000_000_000;
/// `ScrambledZipfianGenerator.ZETAN`: zeta(10^10, 0.99), precomputed by YCSB.
pub const YCSB_ZETAN: f64 = 26.469_028_201_783_02;
/// `ScrambledZipfianGenerator.USED_ZIPFIAN_CONSTANT`.
pub const YCSB_THETA: f64 = 0.99;

/// `ScrambledZipfianGenerator(min, max, theta)`: a Zipfian draw over
/// `0..=10^10` (with the precomputed zeta for theta 0.99), hashed with
/// FNV-1a and reduced modulo the item count `max - min + 1`.
#[derive(Clone, Debug)]
pub struct ScrambledZipfian {
    zipf: Zipfian,
    min: i64,
    itemcount: i64,
}

impl ScrambledZipfian {
    /// Values `min..=max`.
    pub fn new(min: u64, max: u64, theta: f64) -> ScrambledZipfian {
        let zetan = (theta == YCSB_THETA).then_some(YCSB_ZETAN);
        ScrambledZipfian {
            zipf: Zipfian::new(0, YCSB_ITEM_COUNT, theta, zetan),
            min: min as i64,
            itemcount: (max - min + 1) as i64,
        }
    }

    /// `nextValue()`: may be negative in the one case Java's `Math.abs`
    /// leaves negative (probability 2^-64), exactly as YCSB.
    #[inline]
    pub fn next(&self, rng: &mut Rng) -> i64 {
        let v = self.zipf.next(rng) as i64;
        self.min + fnvhash64(v) % self.itemcount
    }
}

/// The most records a [`YcsbKeys`] takes: YCSB counts its `records + 1`
/// items in a Java long.
pub const YCSB_MAX_RECORDS: u64 = i64::MAX as u64 - 1;

/// The read-only workload's key chooser (`CoreWorkload` with
/// `requestdistribution=zipfian`, `insertproportion=0`): a scrambled Zipfian
/// over `0..=records` (YCSB adds the expected new keys, here none, to the
/// key space and draws again any key not inserted yet, i.e. `records`).
#[derive(Clone, Debug)]
pub struct YcsbKeys {
    zipf: ScrambledZipfian,
    records: u64,
}

impl YcsbKeys {
    /// Keys of a table of `records` records (`0 < records <=
    /// YCSB_MAX_RECORDS`).
    pub fn new(records: u64, theta: f64) -> YcsbKeys {
        YcsbKeys {
            zipf: ScrambledZipfian::new(0, records, theta),
            records,
        }
    }

    /// The next key number, in `0..records`.
    #[inline]
    pub fn next(&self, rng: &mut Rng) -> u64 {
        loop {
            let k = self.zipf.next(rng);
            if k >= 0 && (k as u64) < self.records {
                return k as u64;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv_matches_the_reference_values() {
        // FNV-1a 64 of eight zero bytes, and of 1 as little-endian bytes,
        // computed independently byte by byte.
        let mut h: u64 = 0xCBF2_9CE4_8422_2325;
        for b in 1u64.to_le_bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(1_099_511_628_211);
        }
        assert_eq!(fnvhash64(1), (h as i64).wrapping_abs());
        // 0xA8C7_F832_281A_39C5, as an i64 made positive (computed apart,
        // in Python: offset basis, then xor and multiply per byte).
        assert_eq!(fnvhash64(0), 6_284_781_860_667_377_211);
        assert_ne!(fnvhash64(0), fnvhash64(1));
    }

    #[test]
    fn zeta_of_the_ycsb_item_count() {
        // YCSB's constant is zeta(10^10, 0.99).
        let z = zeta(YCSB_ITEM_COUNT, 0.99);
        assert!((z - YCSB_ZETAN).abs() < 1e-6, "{z}");
        let exact: f64 = (1..=1000u64).map(|i| 1.0 / (i as f64).powf(0.8)).sum();
        assert_eq!(zeta(1000, 0.8), exact);
    }

    #[test]
    fn zipfian_head_probabilities() {
        let z = Zipfian::new(0, 999, 0.99, None);
        let mut rng = Rng::new(7);
        let n = 200_000;
        let mut c = [0u32; 3];
        for _ in 0..n {
            let v = z.next(&mut rng);
            assert!(v < 1000);
            if v < 3 {
                c[v as usize] += 1;
            }
        }
        let zn = zeta(1000, 0.99);
        for (i, &ci) in c.iter().enumerate() {
            let expect = 1.0 / ((i + 1) as f64).powf(0.99) / zn;
            let got = f64::from(ci) / n as f64;
            assert!((got - expect).abs() < 0.01, "{i}: {got} vs {expect}");
        }
    }

    #[test]
    fn ycsb_keys_stay_in_range_and_are_skewed() {
        let keys = YcsbKeys::new(1000, YCSB_THETA);
        let mut rng = Rng::new(1);
        let mut count = vec![0u32; 1000];
        for _ in 0..100_000 {
            count[keys.next(&mut rng) as usize] += 1;
        }
        // The hottest key is the hash of item 0.
        let hot = (fnvhash64(0) % 1001) as usize;
        let max = count.iter().enumerate().max_by_key(|c| c.1).unwrap().0;
        assert_eq!(max, hot);
    }
}
