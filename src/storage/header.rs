//! The header at the start of every backing file.
//!
//! Every device holds one backing file per named file; each starts with the same
//! 4 KiB header (only `device_index` differs), so the file can be reopened after a
//! restart and a missing, foreign or damaged piece is detected. Data begins right
//! after the header, which keeps data offsets aligned for O_DIRECT.
//!
//! Format (little endian): magic[8] "SETCACHE", version u32, layout u32,
//! block_bytes u64, len u64, devices u32, device_index u32, file_uid u64,
//! crc32c u32 over the preceding 48 bytes. The rest of the 4 KiB is zero.
//! A header is accepted only with every field in range (block size a multiple of
//! 512 up to 2^36, length up to 2^62, device index below the device count): a
//! header can be damaged in a way its checksum misses, or written by someone
//! else, and the sizes computed from it must not overflow.
//!
//! Version 2 records the file's length exactly, to the byte. Version 1 (the
//! previous one) had the same fields but only lengths that were multiples of 512;
//! such a header reads as the same length, and the store rewrites it as version 2
//! when it opens the file.

use crate::storage::layout::{LayoutKind, MAX_BLOCK_BYTES};

/// Size of the header, in bytes; data of a backing file starts at this offset.
pub const HEADER_BYTES: u64 = 4096;

const MAGIC: &[u8; 8] = b"SETCACHE";
/// The format version this code writes. It also reads [`V1`] headers.
pub(crate) const FORMAT_VERSION: u32 = 2;
/// The previous format version: lengths were multiples of 512, and the store kept no
/// lock file and no intent record.
pub(crate) const V1: u32 = 1;
/// The largest file length accepted, so that no size computation can overflow.
pub(crate) const MAX_LEN: u64 = 1 << 62;
const BODY: usize = 48;

/// The decoded header of one backing file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Header {
    pub(crate) layout: LayoutKind,
    pub(crate) block_bytes: u64,
    pub(crate) len: u64,
    pub(crate) devices: u32,
    pub(crate) device_index: u32,
    /// A random identity shared by the backing files of one named file, so that pieces
    /// of two different files are never mixed.
    pub(crate) file_uid: u64,
}

/// CRC-32C (Castagnoli), bitwise-reflected, computed with a 256-entry table.
pub(crate) fn crc32c(data: &[u8]) -> u32 {
    const fn table() -> [u32; 256] {
        let mut t = [0u32; 256];
        let mut i = 0;
        while i < 256 {
            let mut c = i as u32;
            let mut k = 0;
            while k < 8 {
                c = if c & 1 != 0 {
                    (c >> 1) ^ 0x82f6_3b78
                } else {
                    c >> 1
                };
                k += 1;
            }
            t[i] = c;
            i += 1;
        }
        t
    }
    static TABLE: [u32; 256] = table();
    let mut crc = !0u32;
    for &b in data {
        crc = TABLE[((crc ^ b as u32) & 0xff) as usize] ^ (crc >> 8);
    }
    !crc
}

impl Header {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; HEADER_BYTES as usize];
        b[0..8].copy_from_slice(MAGIC);
        b[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        b[12..16].copy_from_slice(&self.layout.code().to_le_bytes());
        b[16..24].copy_from_slice(&self.block_bytes.to_le_bytes());
        b[24..32].copy_from_slice(&self.len.to_le_bytes());
        b[32..36].copy_from_slice(&self.devices.to_le_bytes());
        b[36..40].copy_from_slice(&self.device_index.to_le_bytes());
        b[40..48].copy_from_slice(&self.file_uid.to_le_bytes());
        let crc = crc32c(&b[..BODY]);
        b[48..52].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decode a header and return it with the format version it was written in;
    /// the error says what is wrong.
    pub(crate) fn decode(b: &[u8]) -> Result<(Header, u32), String> {
        if b.len() < BODY + 4 {
            return Err(format!(
                "file too short for a header ({} bytes, need {HEADER_BYTES})",
                b.len()
            ));
        }
        if &b[0..8] != MAGIC {
            return Err("wrong magic: not a setcache backing file".into());
        }
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap());
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap());
        let stored = u32_at(48);
        let computed = crc32c(&b[..BODY]);
        if stored != computed {
            return Err(format!(
                "checksum mismatch (stored {stored:#010x}, computed {computed:#010x}): header is corrupt"
            ));
        }
        let version = u32_at(8);
        if version != FORMAT_VERSION && version != V1 {
            return Err(format!(
                "format version {version} is not supported (this build writes version {FORMAT_VERSION} and reads versions {V1} and {FORMAT_VERSION})"
            ));
        }
        let layout = LayoutKind::from_code(u32_at(12))
            .ok_or_else(|| format!("unknown layout code {}", u32_at(12)))?;
        let h = Header {
            layout,
            block_bytes: u64_at(16),
            len: u64_at(24),
            devices: u32_at(32),
            device_index: u32_at(36),
            file_uid: u64_at(40),
        };
        if h.block_bytes == 0 || !h.block_bytes.is_multiple_of(512) {
            return Err(format!(
                "block size {} is not a multiple of 512",
                h.block_bytes
            ));
        }
        if h.block_bytes > MAX_BLOCK_BYTES {
            return Err(format!(
                "block size {} is larger than the largest supported ({MAX_BLOCK_BYTES})",
                h.block_bytes
            ));
        }
        if h.devices == 0 || h.device_index >= h.devices {
            return Err(format!(
                "device index {} out of range for {} devices",
                h.device_index, h.devices
            ));
        }
        if h.len > MAX_LEN {
            return Err(format!(
                "length {} is larger than the largest supported ({MAX_LEN})",
                h.len
            ));
        }
        if version == V1 && !h.len.is_multiple_of(512) {
            return Err(format!(
                "format version {V1} header with length {} (version {V1} lengths are multiples of 512)",
                h.len
            ));
        }
        Ok((h, version))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Header {
        Header {
            layout: LayoutKind::Rotated,
            block_bytes: 65536,
            len: 123 << 20,
            devices: 4,
            device_index: 2,
            file_uid: 0xdead_beef_1234,
        }
    }

    #[test]
    fn round_trip() {
        let h = sample();
        assert_eq!(Header::decode(&h.encode()).unwrap(), (h, FORMAT_VERSION));
        let odd = Header { len: 1001, ..h };
        assert_eq!(
            Header::decode(&odd.encode()).unwrap(),
            (odd, FORMAT_VERSION)
        );
    }

    /// `h` encoded as a version 1 header.
    fn v1(h: &Header) -> Vec<u8> {
        let mut b = h.encode();
        b[8..12].copy_from_slice(&V1.to_le_bytes());
        let crc = crc32c(&b[..BODY]);
        b[48..52].copy_from_slice(&crc.to_le_bytes());
        b
    }

    #[test]
    fn version_1_is_read_and_others_are_refused() {
        let h = sample();
        assert_eq!(Header::decode(&v1(&h)).unwrap(), (h, V1));
        // Version 1 never wrote a length that is not whole sectors.
        let e = Header::decode(&v1(&Header { len: 1001, ..h })).unwrap_err();
        assert!(e.contains("multiples of 512"), "{e}");
        let mut b = h.encode();
        b[8..12].copy_from_slice(&3u32.to_le_bytes());
        let crc = crc32c(&b[..BODY]);
        b[48..52].copy_from_slice(&crc.to_le_bytes());
        let e = Header::decode(&b).unwrap_err();
        assert!(
            e.contains("version 3") && e.contains("writes version 2"),
            "{e}"
        );
        let e = Header::decode(&Header { len: u64::MAX, ..h }.encode()).unwrap_err();
        assert!(e.contains("largest"), "{e}");
        // A stripe unit near 2^64 made the backing file's size overflow.
        let huge = Header {
            block_bytes: u64::MAX / 512 * 512,
            ..h
        };
        let e = Header::decode(&huge.encode()).unwrap_err();
        assert!(e.contains("block size") && e.contains("largest"), "{e}");
    }

    #[test]
    fn every_flipped_bit_is_caught() {
        let enc = sample().encode();
        for byte in 0..52 {
            for bit in 0..8 {
                let mut e = enc.clone();
                e[byte] ^= 1 << bit;
                assert!(
                    Header::decode(&e).is_err(),
                    "flip at {byte}.{bit} not caught"
                );
            }
        }
    }

    #[test]
    fn crc_matches_known_vector() {
        // The standard check value of CRC-32C.
        assert_eq!(crc32c(b"123456789"), 0xe306_9283);
    }

    use crate::storage::layout::Layout;
    use crate::test_alloc::{input_bound, largest_alloc};
    use proptest::prelude::*;

    fn kinds() -> impl Strategy<Value = LayoutKind> {
        prop_oneof![
            Just(LayoutKind::Stripe),
            Just(LayoutKind::Rotated),
            Just(LayoutKind::Hash)
        ]
    }

    /// Any header `decode` accepts: every field within its limits.
    fn valid() -> impl Strategy<Value = Header> {
        let blocks = prop_oneof![1u64..=4096, 1u64..=MAX_BLOCK_BYTES / 512];
        let lens = prop_oneof![0u64..=1 << 20, 0u64..=MAX_LEN, Just(MAX_LEN)];
        let devices = prop_oneof![1u32..=64, 1u32..=u32::MAX];
        (kinds(), blocks, lens, devices, any::<u32>(), any::<u64>()).prop_map(
            |(layout, blocks, len, devices, index, file_uid)| Header {
                layout,
                block_bytes: blocks * 512,
                len,
                devices,
                device_index: index % devices,
                file_uid,
            },
        )
    }

    /// Decodes `b` with the allocation probe on; fails the case if `decode`
    /// asked for more memory than `b` justifies, or accepted a header that
    /// breaks a limit, or one that does not encode back to itself.
    fn decode_checked(b: &[u8]) -> Result<Result<(Header, u32), String>, TestCaseError> {
        let (r, largest) = largest_alloc(|| Header::decode(b));
        prop_assert!(
            largest <= input_bound(b.len()),
            "{largest} bytes asked for at once while decoding {} bytes",
            b.len()
        );
        if let Ok((h, version)) = &r {
            prop_assert!(*version == FORMAT_VERSION || *version == V1);
            prop_assert!(h.block_bytes > 0 && h.block_bytes % 512 == 0, "{h:?}");
            prop_assert!(h.block_bytes <= MAX_BLOCK_BYTES, "{h:?}");
            prop_assert!(h.device_index < h.devices, "{h:?}");
            prop_assert!(h.len <= MAX_LEN, "{h:?}");
            prop_assert!(*version == FORMAT_VERSION || h.len % 512 == 0, "{h:?}");
            prop_assert_eq!(Header::decode(&h.encode()), Ok((*h, FORMAT_VERSION)));
            // What opening the file computes from it stays in range.
            if let Ok(l) = Layout::new(h.layout, h.devices as usize, h.block_bytes) {
                let need = HEADER_BYTES.checked_add(l.device_bytes(h.len));
                prop_assert!(need.is_some(), "{h:?}: backing file size overflows");
                let end = l.device_end(h.device_index as usize, h.len);
                prop_assert!(end <= l.device_bytes(h.len), "{h:?}");
            }
        }
        Ok(r)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Any bytes decode to an in-range header that re-encodes to itself, or to an error.
        #[test]
        fn arbitrary_bytes_decode_or_are_refused(
            magic in any::<bool>(),
            tail in proptest::collection::vec(any::<u8>(), 0..160),
        ) {
            let mut b = if magic { MAGIC.to_vec() } else { Vec::new() };
            b.extend_from_slice(&tail);
            let _ = decode_checked(&b)?;
        }

        /// Any fields under a right checksum decode to exactly those fields, or to an error.
        #[test]
        fn any_checksummed_fields_decode_to_themselves_or_are_refused(
            version in prop_oneof![2 => Just(V1), 4 => Just(FORMAT_VERSION), 1 => any::<u32>()],
            code in prop_oneof![4 => 0u32..5, 1 => any::<u32>()],
            block_bytes in prop_oneof![
                2 => (0u64..64).prop_map(|k| k * 256),
                2 => (0u64..16).prop_map(|k| (u64::MAX - k * 512) / 512 * 512),
                1 => any::<u64>(),
            ],
            len in prop_oneof![0u64..=1 << 20, MAX_LEN - 2..=MAX_LEN + 2, any::<u64>()],
            devices in prop_oneof![4 => 0u32..6, 1 => any::<u32>()],
            index in prop_oneof![4 => 0u32..6, 1 => any::<u32>()],
            file_uid in any::<u64>(),
            padding in any::<u8>(),
        ) {
            let mut b = vec![padding; HEADER_BYTES as usize];
            b[0..8].copy_from_slice(MAGIC);
            b[8..12].copy_from_slice(&version.to_le_bytes());
            b[12..16].copy_from_slice(&code.to_le_bytes());
            b[16..24].copy_from_slice(&block_bytes.to_le_bytes());
            b[24..32].copy_from_slice(&len.to_le_bytes());
            b[32..36].copy_from_slice(&devices.to_le_bytes());
            b[36..40].copy_from_slice(&index.to_le_bytes());
            b[40..48].copy_from_slice(&file_uid.to_le_bytes());
            let crc = crc32c(&b[..BODY]);
            b[48..52].copy_from_slice(&crc.to_le_bytes());
            if let Ok((h, v)) = decode_checked(&b)? {
                prop_assert_eq!(v, version);
                prop_assert_eq!(h.layout.code(), code);
                prop_assert_eq!(
                    (h.block_bytes, h.len, h.devices, h.device_index, h.file_uid),
                    (block_bytes, len, devices, index, file_uid)
                );
            }
        }

        /// Every valid header decodes to itself, in the current version.
        #[test]
        fn valid_headers_round_trip(h in valid()) {
            let b = h.encode();
            prop_assert_eq!(b.len() as u64, HEADER_BYTES);
            prop_assert_eq!(decode_checked(&b)?, Ok((h, FORMAT_VERSION)));
        }

        /// A valid header with bits flipped, padding changed, cut or run on: an error or itself.
        #[test]
        fn damaged_headers_are_refused_or_read_unchanged(
            h in valid(),
            flips in proptest::collection::btree_set(0usize..52 * 8, 0..=5),
            padding in proptest::collection::vec((52usize..4096, any::<u8>()), 0..8),
            cut in prop_oneof![Just(None), (0usize..=4096).prop_map(Some)],
            run_on in proptest::collection::vec(any::<u8>(), 0..16),
        ) {
            // CRC-32C has Hamming distance 6 at this length: up to 5 flipped bits
            // are always caught, so this holds for every case, not just most.
            let mut b = h.encode();
            for &bit in &flips {
                b[bit / 8] ^= 1 << (bit % 8);
            }
            for &(i, v) in &padding {
                b[i] = v;
            }
            if let Some(n) = cut {
                b.truncate(n);
            }
            b.extend_from_slice(&run_on);
            match decode_checked(&b)? {
                Ok(got) => prop_assert_eq!(got, (h, FORMAT_VERSION)),
                Err(e) => prop_assert!(!e.is_empty()),
            }
        }
    }
}
