//! The one 64-bit mix function the crate uses to hash and to seed.

/// A 64-bit finaliser (the splitmix64 mix): every input bit affects every output bit.
#[inline]
pub fn mix64(mut x: u64) -> u64 {
    x ^= x >> 30;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}
