//! The intent record: what a metadata operation is about to do, written and made
//! durable before it changes anything, removed once all of it is durable.
//!
//! One record at a time (metadata operations are serialised), in the file
//! [`INTENT_FILE`] of device 0's root. Format (little endian):
//!
//! | bytes | field |
//! |---|---|
//! | 0..8 | magic `SCINTENT` |
//! | 8..12 | format version (the header's) |
//! | 12..16 | operation: 1 create, 2 delete, 3 rename, 4 set_len |
//! | 16..20 | devices of the store |
//! | 20..24 | layout code (set_len; 0 otherwise) |
//! | 24..32 | file uid (create, set_len; 0 otherwise) |
//! | 32..40 | block bytes (set_len) |
//! | 40..48 | old length (set_len) |
//! | 48..56 | new length (set_len) |
//! | 56..58 | length of the name |
//! | 58..60 | length of the second name (rename's target; 0 otherwise) |
//! | 60.. | the name, then the second name (UTF-8) |
//! | last 4 | CRC-32C of everything before it |
//!
//! A record that is empty, short, or fails its checksum was being written when the
//! process died, so its operation had not started: it is simply removed.

use crate::header::{FORMAT_VERSION, MAX_LEN, crc32c};
use crate::layout::LayoutKind;

/// The intent record's file name in device 0's root.
pub(crate) const INTENT_FILE: &str = ".setcache-intent";

const MAGIC: &[u8; 8] = b"SCINTENT";
const FIXED: usize = 60;

/// A metadata operation in progress.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Op {
    /// Making the backing files of `name`, which carry `uid`. Rolled back.
    Create { name: String, uid: u64 },
    /// Removing the backing files of `name`. Rolled forward.
    Delete { name: String },
    /// Renaming the backing files of `from` to `to`. Rolled forward.
    Rename { from: String, to: String },
    /// Changing the length of `name` (identity `uid`) from `old_len` to `new_len`.
    /// Rolled forward.
    SetLen {
        name: String,
        uid: u64,
        layout: LayoutKind,
        block_bytes: u64,
        old_len: u64,
        new_len: u64,
    },
}

/// An operation and the number of devices it spans.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Intent {
    pub(crate) devices: u32,
    pub(crate) op: Op,
}

/// What a record on disk turned out to be.
#[derive(Debug)]
pub(crate) enum Decoded {
    /// A whole record.
    Whole(Intent),
    /// Empty, short or failing its checksum: written only in part, so the operation
    /// never started.
    Torn,
    /// Whole but not understood (a newer format, or damage the checksum missed).
    Unknown(String),
}

impl std::fmt::Display for Op {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Op::Create { name, .. } => write!(f, "create of {name:?}"),
            Op::Delete { name } => write!(f, "delete of {name:?}"),
            Op::Rename { from, to } => write!(f, "rename of {from:?} to {to:?}"),
            Op::SetLen {
                name,
                old_len,
                new_len,
                ..
            } => write!(
                f,
                "length change of {name:?} from {old_len} to {new_len} bytes"
            ),
        }
    }
}

impl Intent {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let (code, name, second, layout, uid, block_bytes, old_len, new_len) = match &self.op {
            Op::Create { name, uid } => (1u32, name, "", 0, *uid, 0, 0, 0),
            Op::Delete { name } => (2, name, "", 0, 0, 0, 0, 0),
            Op::Rename { from, to } => (3, from, to.as_str(), 0, 0, 0, 0, 0),
            Op::SetLen {
                name,
                uid,
                layout,
                block_bytes,
                old_len,
                new_len,
            } => (
                4,
                name,
                "",
                layout.code(),
                *uid,
                *block_bytes,
                *old_len,
                *new_len,
            ),
        };
        let mut b = Vec::with_capacity(FIXED + name.len() + second.len() + 4);
        b.extend_from_slice(MAGIC);
        b.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        b.extend_from_slice(&code.to_le_bytes());
        b.extend_from_slice(&self.devices.to_le_bytes());
        b.extend_from_slice(&layout.to_le_bytes());
        b.extend_from_slice(&uid.to_le_bytes());
        b.extend_from_slice(&block_bytes.to_le_bytes());
        b.extend_from_slice(&old_len.to_le_bytes());
        b.extend_from_slice(&new_len.to_le_bytes());
        // Names are at most 200 bytes (validated before any record is written).
        b.extend_from_slice(&(name.len() as u16).to_le_bytes());
        b.extend_from_slice(&(second.len() as u16).to_le_bytes());
        b.extend_from_slice(name.as_bytes());
        b.extend_from_slice(second.as_bytes());
        let crc = crc32c(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        b
    }

    pub(crate) fn decode(b: &[u8]) -> Decoded {
        if b.len() < FIXED + 4 {
            return Decoded::Torn;
        }
        let u16_at = |i: usize| u16::from_le_bytes(b[i..i + 2].try_into().unwrap()) as usize;
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap());
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap());
        let (n1, n2) = (u16_at(56), u16_at(58));
        let end = FIXED + n1 + n2;
        if &b[0..8] != MAGIC || b.len() != end + 4 {
            return Decoded::Torn;
        }
        let stored = u32_at(end);
        if stored != crc32c(&b[..end]) {
            return Decoded::Torn;
        }
        let version = u32_at(8);
        if version != FORMAT_VERSION {
            return Decoded::Unknown(format!(
                "written by format version {version}; this build writes version {FORMAT_VERSION}"
            ));
        }
        let text = |r: std::ops::Range<usize>| String::from_utf8(b[r].to_vec()).ok();
        let (Some(name), Some(second)) = (text(FIXED..FIXED + n1), text(FIXED + n1..end)) else {
            return Decoded::Unknown("a name is not UTF-8".into());
        };
        let (uid, block_bytes, old_len, new_len) = (u64_at(24), u64_at(32), u64_at(40), u64_at(48));
        let op = match u32_at(12) {
            1 => Op::Create { name, uid },
            2 => Op::Delete { name },
            3 => Op::Rename {
                from: name,
                to: second,
            },
            4 => match LayoutKind::from_code(u32_at(20)) {
                Some(layout) => Op::SetLen {
                    name,
                    uid,
                    layout,
                    block_bytes,
                    old_len,
                    new_len,
                },
                None => return Decoded::Unknown(format!("unknown layout code {}", u32_at(20))),
            },
            other => return Decoded::Unknown(format!("unknown operation code {other}")),
        };
        // A whole record names only valid files and lengths (a record from a
        // broken writer must not reach outside the roots).
        let names: &[&str] = match &op {
            Op::Rename { from, to } => &[from, to],
            Op::Create { name, .. } | Op::Delete { name } | Op::SetLen { name, .. } => &[name],
        };
        for n in names {
            if let Err(e) = crate::store::validate_name(n) {
                return Decoded::Unknown(e.to_string());
            }
        }
        if let Op::SetLen {
            old_len,
            new_len,
            block_bytes,
            ..
        } = &op
        {
            if *old_len > MAX_LEN || *new_len > MAX_LEN {
                return Decoded::Unknown(format!(
                    "a length of {} is above the largest supported ({MAX_LEN} bytes)",
                    old_len.max(new_len)
                ));
            }
            if *block_bytes == 0 || block_bytes % 512 != 0 {
                return Decoded::Unknown(format!(
                    "block size {block_bytes} is not a positive multiple of 512"
                ));
            }
        }
        Decoded::Whole(Intent {
            devices: u32_at(16),
            op,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn samples() -> Vec<Intent> {
        let ops = vec![
            Op::Create {
                name: "a".into(),
                uid: 0x1234_5678_9abc,
            },
            Op::Delete { name: "b.c".into() },
            Op::Rename {
                from: "from".into(),
                to: "to-\u{e9}".into(),
            },
            Op::SetLen {
                name: "n".into(),
                uid: 7,
                layout: LayoutKind::Hash,
                block_bytes: 65536,
                old_len: 1001,
                new_len: 1 << 40,
            },
        ];
        ops.into_iter()
            .map(|op| Intent { devices: 3, op })
            .collect()
    }

    #[test]
    fn records_round_trip() {
        for i in samples() {
            match Intent::decode(&i.encode()) {
                Decoded::Whole(d) => assert_eq!(d, i),
                other => panic!("{i:?} decoded as {other:?}"),
            }
        }
    }

    #[test]
    fn every_prefix_and_flipped_bit_is_torn() {
        for i in samples() {
            let e = i.encode();
            for n in 0..e.len() {
                assert!(
                    matches!(Intent::decode(&e[..n]), Decoded::Torn),
                    "{n}-byte prefix of {i:?}"
                );
            }
            for byte in 0..e.len() {
                for bit in 0..8 {
                    let mut f = e.clone();
                    f[byte] ^= 1 << bit;
                    assert!(
                        !matches!(Intent::decode(&f), Decoded::Whole(_)),
                        "flip at {byte}.{bit} of {i:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn unknown_operations_are_not_torn() {
        let mut e = samples()[0].encode();
        e[12] = 9;
        let n = e.len() - 4;
        let crc = crc32c(&e[..n]);
        e[n..].copy_from_slice(&crc.to_le_bytes());
        assert!(matches!(Intent::decode(&e), Decoded::Unknown(_)));
    }

    #[test]
    fn whole_records_with_bad_names_or_lengths_are_refused() {
        let bad = [
            Op::Delete {
                name: "../outside".into(),
            },
            Op::Rename {
                from: "a".into(),
                to: ".hidden".into(),
            },
            Op::SetLen {
                name: "a".into(),
                uid: 1,
                layout: LayoutKind::Stripe,
                block_bytes: 65536,
                old_len: 0,
                new_len: u64::MAX,
            },
        ];
        for op in bad {
            let i = Intent { devices: 2, op };
            assert!(
                matches!(Intent::decode(&i.encode()), Decoded::Unknown(_)),
                "{i:?}"
            );
        }
    }
}
