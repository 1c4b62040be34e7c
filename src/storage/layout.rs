//! Data placement: logical byte offsets of a file to (device, offset in that device's data).
//!
//! Pure math, no I/O and no locks, so it is property-tested in isolation.
//!
//! A file is cut into blocks of `block_bytes` (the stripe unit). Blocks are grouped in
//! stripes of `devices` consecutive blocks; stripe `s` occupies block `s` of every
//! device's backing file, so every device holds `ceil(blocks / devices)` blocks and each
//! backing file stays dense. The three layouts differ only in which device gets which
//! block of a stripe:
//!
//! * `Stripe` (RAID-0): position `p` of every stripe goes to device `p`.
//! * `Rotated`: the first device of stripe `s` is `s mod n`, as RAID-5 rotates its parity,
//!   so a stride equal to the stripe width does not hammer one device.
//! * `Hash`: a permutation of the positions drawn from a hash of the stripe number
//!   (`p -> a*p + c mod n` with `a` a unit modulo `n`), which declusters hot spots while
//!   keeping the mapping a bijection without any table.

pub use crate::util::mix::mix64;
use std::fmt;
use std::str::FromStr;

use crate::error::{Error, Result};

/// The most devices a store may have. Bounds the unit table of the hash layout.
pub const MAX_DEVICES: usize = 256;

/// The largest stripe unit, in bytes: the largest a store makes (65536 pages of
/// 1 MiB). With lengths of at most 2^62 bytes, no size or offset computed from a
/// layout can then overflow.
pub const MAX_BLOCK_BYTES: u64 = 1 << 36;

/// How blocks of a file are spread over the devices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LayoutKind {
    /// RAID-0 striping.
    Stripe,
    /// Striping with the first device rotating per stripe.
    Rotated,
    /// Each block placed by a hash of its stripe number.
    Hash,
}

impl LayoutKind {
    /// The on-disk code of the layout.
    pub(crate) fn code(self) -> u32 {
        match self {
            LayoutKind::Stripe => 1,
            LayoutKind::Rotated => 2,
            LayoutKind::Hash => 3,
        }
    }

    pub(crate) fn from_code(code: u32) -> Option<Self> {
        match code {
            1 => Some(LayoutKind::Stripe),
            2 => Some(LayoutKind::Rotated),
            3 => Some(LayoutKind::Hash),
            _ => None,
        }
    }
}

impl fmt::Display for LayoutKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LayoutKind::Stripe => "stripe",
            LayoutKind::Rotated => "rotated",
            LayoutKind::Hash => "hash",
        })
    }
}

impl FromStr for LayoutKind {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "stripe" => Ok(LayoutKind::Stripe),
            "rotated" => Ok(LayoutKind::Rotated),
            "hash" => Ok(LayoutKind::Hash),
            other => Err(Error::InvalidArgument(format!(
                "unknown layout {other:?}: expected stripe, rotated or hash"
            ))),
        }
    }
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// One contiguous piece of a request on one device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    /// The device.
    pub device: usize,
    /// Offset in the device's data area (add the header size for the backing file).
    pub dev_offset: u64,
    /// Offset of this piece in the caller's buffer.
    pub buf_offset: usize,
    /// Length in bytes.
    pub len: usize,
}

/// The placement function of one file.
#[derive(Clone, Copy)]
pub struct Layout {
    kind: LayoutKind,
    devices: u32,
    block_bytes: u64,
    /// Units modulo `devices` (for `Hash`); `units_len` of them are valid.
    units: [u8; MAX_DEVICES],
    inverses: [u8; MAX_DEVICES],
    units_len: u16,
}

impl fmt::Debug for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Layout")
            .field("kind", &self.kind)
            .field("devices", &self.devices)
            .field("block_bytes", &self.block_bytes)
            .finish()
    }
}

/// Where a logical byte of a file lives: a device, and an offset in that
/// device's data area (after its header).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceOffset {
    /// The device's index in the store.
    pub device: usize,
    /// Bytes from the start of the device's data area.
    pub offset: u64,
}

/// Where a logical block of a file lives: a device, and a block index on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceBlock {
    /// The device's index in the store.
    pub device: usize,
    /// The block's index among the file's blocks on that device.
    pub block: u64,
}

impl Layout {
    /// A layout over `devices` devices with a stripe unit of `block_bytes`.
    pub fn new(kind: LayoutKind, devices: usize, block_bytes: u64) -> Result<Self> {
        if devices == 0 || devices > MAX_DEVICES {
            return Err(Error::InvalidArgument(format!(
                "device count {devices} is outside 1..={MAX_DEVICES}"
            )));
        }
        if block_bytes == 0 || !block_bytes.is_multiple_of(512) {
            return Err(Error::InvalidArgument(format!(
                "block size {block_bytes} bytes is not a positive multiple of 512"
            )));
        }
        if block_bytes > MAX_BLOCK_BYTES {
            return Err(Error::InvalidArgument(format!(
                "block size {block_bytes} bytes is above the largest supported ({MAX_BLOCK_BYTES} bytes)"
            )));
        }
        let mut units = [0u8; MAX_DEVICES];
        let mut inverses = [0u8; MAX_DEVICES];
        let n = devices as u64;
        let mut k = 0usize;
        for a in 1..=n.max(1) {
            let a = a % n.max(1);
            if n == 1 || (a != 0 && gcd(a, n) == 1) {
                // The inverse exists because gcd(a, n) == 1; find it by search (n <= 256).
                let inv = (0..n).find(|&x| (a * x) % n == 1 % n).unwrap_or(0);
                units[k] = a as u8;
                inverses[k] = inv as u8;
                k += 1;
            }
            if n == 1 {
                break;
            }
        }
        Ok(Layout {
            kind,
            devices: devices as u32,
            block_bytes,
            units,
            inverses,
            units_len: k as u16,
        })
    }

    /// The layout kind.
    pub fn kind(&self) -> LayoutKind {
        self.kind
    }

    /// Number of devices.
    pub fn devices(&self) -> usize {
        self.devices as usize
    }

    /// The stripe unit in bytes.
    pub fn block_bytes(&self) -> u64 {
        self.block_bytes
    }

    /// The (multiplier index, shift) of the hash permutation of stripe `stripe`.
    #[inline]
    fn hash_params(&self, stripe: u64) -> (usize, u64) {
        let h = mix64(stripe ^ 0x05ca_1ab1_e0dd_ba11);
        let idx = (h % self.units_len as u64) as usize;
        let shift = (h >> 32) % self.devices as u64;
        (idx, shift)
    }

    /// The device and the block index within that device of logical block `block`.
    #[inline]
    pub fn locate_block(&self, block: u64) -> DeviceBlock {
        let n = self.devices as u64;
        let stripe = block / n;
        let pos = block % n;
        let dev = match self.kind {
            LayoutKind::Stripe => pos,
            LayoutKind::Rotated => (pos + stripe) % n,
            LayoutKind::Hash => {
                let (i, c) = self.hash_params(stripe);
                (self.units[i] as u64 * pos + c) % n
            }
        };
        DeviceBlock {
            device: dev as usize,
            block: stripe,
        }
    }

    /// The logical block stored at block `dev_block` of device `device` (inverse of
    /// [`Layout::locate_block`]). For blocks of files up to the largest length a
    /// store takes; past that the answer saturates at `u64::MAX`. `device` is
    /// taken modulo the layout's device count.
    pub fn logical_block(&self, device: usize, dev_block: u64) -> u64 {
        let n = self.devices as u64;
        let d = device as u64 % n;
        let stripe = dev_block;
        let pos = match self.kind {
            LayoutKind::Stripe => d,
            LayoutKind::Rotated => (d + n - stripe % n) % n,
            LayoutKind::Hash => {
                let (i, c) = self.hash_params(stripe);
                (self.inverses[i] as u64 * ((d + n - c) % n)) % n
            }
        };
        stripe.saturating_mul(n).saturating_add(pos)
    }

    /// Device and offset within that device's data area of logical byte `offset`.
    #[inline]
    pub fn map(&self, offset: u64) -> DeviceOffset {
        let block = offset / self.block_bytes;
        let within = offset % self.block_bytes;
        let at = self.locate_block(block);
        DeviceOffset {
            device: at.device,
            offset: at.block * self.block_bytes + within,
        }
    }

    /// Bytes of data each device holds for a file of `len` bytes (saturating at
    /// `u64::MAX` for lengths far past the largest a store takes).
    pub fn device_bytes(&self, len: u64) -> u64 {
        let blocks = len.div_ceil(self.block_bytes);
        blocks
            .div_ceil(self.devices as u64)
            .saturating_mul(self.block_bytes)
    }

    /// Where the data of a file of `len` bytes ends on device `device`: every byte of
    /// the device's data area before it lies before `len` in the file, and every byte
    /// at or after it lies at or past `len`. Not a multiple of 512 on the device that
    /// holds the file's last byte when `len` is not.
    pub fn device_end(&self, device: usize, len: u64) -> u64 {
        if len == 0 {
            return 0;
        }
        let bb = self.block_bytes;
        let last = (len - 1) / bb;
        let stripe = last / self.devices as u64;
        let block = self.logical_block(device, stripe);
        match block.cmp(&last) {
            std::cmp::Ordering::Less => (stripe + 1).saturating_mul(bb),
            std::cmp::Ordering::Equal => stripe * bb + (len - last * bb),
            std::cmp::Ordering::Greater => stripe * bb,
        }
    }

    /// Split the request `[offset, offset + len)` into per-device pieces, one per block
    /// crossed, in logical order. `f` is called once per piece.
    pub fn split(&self, offset: u64, len: usize, mut f: impl FnMut(Segment)) {
        let mut done = 0usize;
        while done < len {
            let off = offset + done as u64;
            let within = off % self.block_bytes;
            let take = ((self.block_bytes - within) as usize).min(len - done);
            let DeviceOffset {
                device,
                offset: dev_offset,
            } = self.map(off);
            f(Segment {
                device,
                dev_offset,
                buf_offset: done,
                len: take,
            });
            done += take;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn kinds() -> impl Strategy<Value = LayoutKind> {
        prop_oneof![
            Just(LayoutKind::Stripe),
            Just(LayoutKind::Rotated),
            Just(LayoutKind::Hash)
        ]
    }

    proptest! {
        /// Any text names a layout or is refused; a layout's name names it.
        #[test]
        fn layout_names_parse_or_are_refused(
            text in prop_oneof![".{0,12}", "(stripe|rotated|hash|Stripe|raid5)[ ]?"],
        ) {
            if let Ok(k) = text.parse::<LayoutKind>() {
                prop_assert_eq!(k.to_string().parse::<LayoutKind>().ok(), Some(k));
                prop_assert_eq!(LayoutKind::from_code(k.code()), Some(k));
            }
        }

        /// Any device count and block size make a layout whose sizes cannot overflow, or an error.
        #[test]
        fn any_parameters_make_a_layout_or_an_error(
            kind in kinds(),
            devices in prop_oneof![0usize..=MAX_DEVICES + 1, any::<usize>()],
            block_bytes in prop_oneof![
                (0u64..=MAX_BLOCK_BYTES / 512 + 1).prop_map(|k| k * 512),
                any::<u64>(),
            ],
            len in prop_oneof![0u64..1 << 20, 0u64..=crate::storage::header::MAX_LEN],
        ) {
            if let Ok(l) = Layout::new(kind, devices, block_bytes) {
                prop_assert!((1..=MAX_DEVICES).contains(&devices));
                prop_assert!(block_bytes % 512 == 0 && block_bytes <= MAX_BLOCK_BYTES);
                let size = crate::storage::header::HEADER_BYTES.checked_add(l.device_bytes(len));
                prop_assert!(size.is_some());
                if len > 0 {
                    let DeviceOffset { device: d, offset: off } = l.map(len - 1);
                    prop_assert!(d < devices && off < l.device_bytes(len));
                    prop_assert!(l.device_end(d, len) <= l.device_bytes(len));
                }
            }
        }

        #[test]
        fn block_mapping_is_a_bijection(kind in kinds(), n in 1usize..=24, stripes in 1u64..40) {
            let l = Layout::new(kind, n, 4096).unwrap();
            let blocks = stripes * n as u64;
            let mut seen = std::collections::HashSet::new();
            for b in 0..blocks {
                let DeviceBlock { device: d, block: db } = l.locate_block(b);
                prop_assert!(d < n);
                prop_assert!(db < stripes, "device block {db} beyond {stripes} stripes");
                prop_assert!(seen.insert((d, db)), "two blocks at ({d}, {db})");
                prop_assert_eq!(l.logical_block(d, db), b);
            }
            prop_assert_eq!(seen.len() as u64, blocks);
        }

        #[test]
        fn byte_mapping_round_trips(kind in kinds(), n in 1usize..=9, bpages in 1u64..8, off in 0u64..(1 << 30)) {
            let bb = bpages * 512;
            let l = Layout::new(kind, n, bb).unwrap();
            let DeviceOffset { device: d, offset: doff } = l.map(off);
            let back = l.logical_block(d, doff / bb) * bb + doff % bb;
            prop_assert_eq!(back, off);
        }

        /// Any input at all, far past the largest file length, gives an answer
        /// (saturated), never an overflow.
        #[test]
        fn any_input_gives_an_answer(kind in kinds(), n in 1usize..=8, bpages in 1u64..64, device in any::<usize>(), x in any::<u64>()) {
            let l = Layout::new(kind, n, bpages * 512).unwrap();
            let _ = l.logical_block(device, x);
            let _ = l.device_bytes(x);
            let _ = l.device_end(device % n, x);
            let _ = l.locate_block(x);
            prop_assert_eq!(l.device_bytes(u64::MAX), u64::MAX.div_ceil(bpages * 512).div_ceil(n as u64).saturating_mul(bpages * 512));
        }

        #[test]
        fn device_end_separates_the_file_from_the_rest(kind in kinds(), n in 1usize..=5, bpages in 1u64..4, len in 0u64..12_000) {
            let bb = bpages * 512;
            let l = Layout::new(kind, n, bb).unwrap();
            for d in 0..n {
                let end = l.device_end(d, len);
                prop_assert!(end <= l.device_bytes(len));
                for x in 0..l.device_bytes(len) {
                    let logical = l.logical_block(d, x / bb) * bb + x % bb;
                    prop_assert_eq!(logical < len, x < end, "device {} offset {} end {}", d, x, end);
                }
            }
        }

        #[test]
        fn split_covers_the_request_exactly(kind in kinds(), n in 1usize..=6, off in 0u64..100_000, len in 0usize..70_000) {
            let l = Layout::new(kind, n, 4096).unwrap();
            let mut next = 0usize;
            l.split(off, len, |s| {
                assert_eq!(s.buf_offset, next);
                assert!(s.len > 0);
                // A piece never crosses a block of its device.
                assert!(s.dev_offset % 4096 + s.len as u64 <= 4096);
                assert_eq!(l.map(off + s.buf_offset as u64), DeviceOffset { device: s.device, offset: s.dev_offset });
                next += s.len;
            });
            prop_assert_eq!(next, len);
        }
    }

    #[test]
    fn rotated_moves_first_device() {
        let l = Layout::new(LayoutKind::Rotated, 4, 4096).unwrap();
        let firsts: Vec<usize> = (0..4).map(|s| l.locate_block(s * 4).device).collect();
        assert_eq!(firsts, vec![0, 1, 2, 3]);
    }

    #[test]
    fn hash_spreads_a_strided_walk() {
        // Reading block 0 of every stripe puts all load on one device under Stripe,
        // but Hash spreads it.
        let l = Layout::new(LayoutKind::Hash, 4, 4096).unwrap();
        let mut per = [0u32; 4];
        for s in 0..4000 {
            per[l.locate_block(s * 4).device] += 1;
        }
        for c in per {
            assert!((700..1300).contains(&c), "uneven hash placement: {per:?}");
        }
    }

    #[test]
    fn bad_parameters_are_refused() {
        assert!(Layout::new(LayoutKind::Stripe, 0, 4096).is_err());
        assert!(Layout::new(LayoutKind::Stripe, 1, 1000).is_err());
        assert!(Layout::new(LayoutKind::Stripe, 1, MAX_BLOCK_BYTES).is_ok());
        assert!(Layout::new(LayoutKind::Stripe, 1, MAX_BLOCK_BYTES + 512).is_err());
        assert!("raid5".parse::<LayoutKind>().is_err());
        assert_eq!(
            Layout::new(LayoutKind::Stripe, 3, 4096)
                .unwrap()
                .device_bytes(5 * 4096),
            2 * 4096
        );
    }
}
