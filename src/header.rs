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
//!
//! Version 2 records the file's length exactly, to the byte. Version 1 (the
//! previous one) had the same fields but only lengths that were multiples of 512;
//! such a header reads as the same length, and the store rewrites it as version 2
//! when it opens the file.

use crate::layout::LayoutKind;

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
        if h.block_bytes == 0 || h.block_bytes % 512 != 0 {
            return Err(format!(
                "block size {} is not a multiple of 512",
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
        if version == V1 && h.len % 512 != 0 {
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
}
