//! Zipfian ranks: P(rank k) proportional to 1 / (k + 1)^theta over `0..n`.
//!
//! Sampled by rejection-inversion (Hörmann and Derflinger, 1996): O(1) set-up and
//! expected O(1) per sample for any n and any theta > 0 (YCSB's closed form needs
//! theta < 1 and an O(n) zeta sum). Let h(x) = x^-theta and H its integral from 1;
//! a uniform u over H's range is inverted to x, rounded to the rank k, and accepted
//! when u lands in a sub-interval of width h(k) under H(k + 1/2): each rank is then
//! accepted with probability proportional to h(k).
//!
//! The rank is 0 for the most popular item; callers scramble it to spread the hot
//! items over the file.

use super::rng::Rng;

#[derive(Clone, Debug)]
pub(crate) struct Zipf {
    n: u64,
    theta: f64,
    h_int_x1: f64,
    h_int_n: f64,
    /// Quick-acceptance threshold on `k - x`.
    squeeze: f64,
}

/// `ln(1 + x) / x`, continuous at 0.
fn log1p_over(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        x.ln_1p() / x
    } else {
        1.0 - x * (0.5 - x / 3.0)
    }
}

/// `(e^x - 1) / x`, continuous at 0.
fn expm1_over(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        x.exp_m1() / x
    } else {
        1.0 + x * (0.5 + x / 6.0)
    }
}

impl Zipf {
    /// A generator over `n >= 1` ranks with exponent `theta > 0`.
    pub(crate) fn new(n: u64, theta: f64) -> Zipf {
        let n = n.max(1);
        let mut z = Zipf {
            n,
            theta,
            h_int_x1: 0.0,
            h_int_n: 0.0,
            squeeze: 0.0,
        };
        z.h_int_x1 = z.h_int(1.5) - 1.0;
        z.h_int_n = z.h_int(n as f64 + 0.5);
        z.squeeze = 2.0 - z.h_int_inv(z.h_int(2.5) - z.h(2.0));
        z
    }

    /// h(x) = x^-theta.
    fn h(&self, x: f64) -> f64 {
        (-self.theta * x.ln()).exp()
    }

    /// H(x) = integral of h from 1 to x (ln x when theta = 1).
    fn h_int(&self, x: f64) -> f64 {
        let lx = x.ln();
        expm1_over((1.0 - self.theta) * lx) * lx
    }

    /// The inverse of H.
    fn h_int_inv(&self, y: f64) -> f64 {
        let t = (y * (1.0 - self.theta)).max(-1.0);
        (log1p_over(t) * y).exp()
    }

    /// A rank in `0..n`, 0 the most popular.
    pub(crate) fn sample(&self, rng: &mut Rng) -> u64 {
        loop {
            let u = self.h_int_n + rng.unit() * (self.h_int_x1 - self.h_int_n);
            let x = self.h_int_inv(u);
            let k = ((x + 0.5).floor() as u64).clamp(1, self.n);
            let kf = k as f64;
            if kf - x <= self.squeeze || u >= self.h_int(kf + 0.5) - self.h(kf) {
                return k - 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exact_pmf(n: u64, theta: f64) -> Vec<f64> {
        let w: Vec<f64> = (1..=n).map(|k| (k as f64).powf(-theta)).collect();
        let sum: f64 = w.iter().sum();
        w.into_iter().map(|x| x / sum).collect()
    }

    #[test]
    fn matches_the_exact_distribution() {
        for theta in [0.5, 0.99, 1.0, 1.2, 2.0] {
            let n = 200;
            let z = Zipf::new(n, theta);
            let mut rng = Rng::new(7);
            let samples = 400_000;
            let mut counts = vec![0u64; n as usize];
            for _ in 0..samples {
                let r = z.sample(&mut rng);
                assert!(r < n);
                counts[r as usize] += 1;
            }
            let pmf = exact_pmf(n, theta);
            for k in 0..10 {
                let got = counts[k] as f64 / samples as f64;
                let want = pmf[k];
                let tol = 4.0 * (want * (1.0 - want) / samples as f64).sqrt() + 1e-4;
                assert!(
                    (got - want).abs() < tol,
                    "theta {theta} rank {k}: got {got:.5}, want {want:.5}"
                );
            }
        }
    }

    #[test]
    fn handles_degenerate_and_huge_ranges() {
        let mut rng = Rng::new(3);
        let one = Zipf::new(1, 0.99);
        assert!((0..1000).all(|_| one.sample(&mut rng) == 0));
        let big = Zipf::new(1 << 40, 0.99);
        let mut top = 0;
        for _ in 0..10_000 {
            let r = big.sample(&mut rng);
            assert!(r < 1 << 40);
            if r < 10 {
                top += 1;
            }
        }
        // Heavily skewed even over 2^40 items.
        assert!(top > 300, "{top}");
    }
}
