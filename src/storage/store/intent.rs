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

use crate::storage::header::{FORMAT_VERSION, MAX_LEN, crc32c};
use crate::storage::layout::{LayoutKind, MAX_BLOCK_BYTES};

/// The intent record's file name in device 0's root.
pub(crate) const INTENT_FILE: &str = ".setcache-intent";

const MAGIC: &[u8; 8] = b"SCINTENT";
const FIXED: usize = 60;
/// The longest record there can be: both names at the most their 16-bit lengths
/// can say. Longer bytes are never a whole record.
pub(crate) const MAX_RECORD: usize = FIXED + 2 * u16::MAX as usize + 4;

/// A metadata operation in progress.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Op {
    /// Making the backing files of `name`, which carry `uid`. Rolled back.
    Create { name: String, uid: u64 },
    /// Removing the backing files of `name`. Rolled forward.
    Delete { name: String },
    /// Renaming the backing files of `from` to `to`. Rolled forward.
    Rename { from: String, to: String },
    /// Renaming the backing files of `from` (identity `uid`) to `to` over
    /// those of the file `to` named, whose pieces on devices where `from` has
    /// none are removed. Rolled forward.
    Replace { from: String, to: String, uid: u64 },
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
            Op::Replace { from, to, .. } => {
                write!(f, "rename of {from:?} to {to:?} replacing it")
            }
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
            Op::Replace { from, to, uid } => (5, from, to.as_str(), 0, *uid, 0, 0, 0),
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
        let u16_at = |i: usize| u16::from_le_bytes(b[i..i + 2].try_into().unwrap()) as usize;
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap());
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap());
        // The version before the layout: a record of another format may be
        // laid out otherwise, and taken for a torn one it would be removed
        // with its operation unfinished. (A torn record of this format still
        // carries this version; a withdrawn one is empty.)
        if b.len() >= 12 && &b[0..8] == MAGIC && u32_at(8) != FORMAT_VERSION {
            let version = u32_at(8);
            return Decoded::Unknown(format!(
                "written by format version {version}; this build writes version {FORMAT_VERSION}"
            ));
        }
        if b.len() < FIXED + 4 {
            return Decoded::Torn;
        }
        let (n1, n2) = (u16_at(56), u16_at(58));
        let end = FIXED + n1 + n2;
        if &b[0..8] != MAGIC || b.len() != end + 4 {
            return Decoded::Torn;
        }
        let stored = u32_at(end);
        if stored != crc32c(&b[..end]) {
            return Decoded::Torn;
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
            5 => Op::Replace {
                from: name,
                to: second,
                uid,
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
            Op::Rename { from, to } | Op::Replace { from, to, .. } => &[from, to],
            Op::Create { name, .. } | Op::Delete { name } | Op::SetLen { name, .. } => &[name],
        };
        for n in names {
            if let Err(e) = crate::storage::store::validate_name(n) {
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
            if *block_bytes == 0 || block_bytes % 512 != 0 || *block_bytes > MAX_BLOCK_BYTES {
                return Decoded::Unknown(format!(
                    "block size {block_bytes} is not a positive multiple of 512 up to {MAX_BLOCK_BYTES}"
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
pub(in crate::storage::store) mod tests {
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
            Op::Replace {
                from: "new".into(),
                to: "old".into(),
                uid: u64::MAX - 3,
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

    use crate::test_alloc::{input_bound, largest_alloc};
    use proptest::prelude::*;

    /// Names `validate_name` accepts, up to its 200-byte limit.
    fn names() -> impl Strategy<Value = String> {
        prop_oneof!["[^./\u{0}][^/\u{0}]{0,24}", "[a-z]{190,200}"]
    }

    fn layouts() -> impl Strategy<Value = LayoutKind> {
        prop_oneof![
            Just(LayoutKind::Stripe),
            Just(LayoutKind::Rotated),
            Just(LayoutKind::Hash)
        ]
    }

    /// Any record `decode` accepts as whole.
    pub(in crate::storage::store) fn valid() -> impl Strategy<Value = Intent> {
        let lens = || prop_oneof![0u64..=1 << 20, 0u64..=MAX_LEN];
        let op = prop_oneof![
            (names(), any::<u64>()).prop_map(|(name, uid)| Op::Create { name, uid }),
            names().prop_map(|name| Op::Delete { name }),
            (names(), names()).prop_map(|(from, to)| Op::Rename { from, to }),
            (names(), names(), any::<u64>()).prop_map(|(from, to, uid)| Op::Replace {
                from,
                to,
                uid
            }),
            (
                names(),
                any::<u64>(),
                layouts(),
                1u64..=MAX_BLOCK_BYTES / 512,
                lens(),
                lens()
            )
                .prop_map(|(name, uid, layout, blocks, old_len, new_len)| Op::SetLen {
                    name,
                    uid,
                    layout,
                    block_bytes: blocks * 512,
                    old_len,
                    new_len,
                }),
        ];
        (any::<u32>(), op).prop_map(|(devices, op)| Intent { devices, op })
    }

    /// Decodes `b` with the allocation probe on; fails the case if `decode`
    /// asked for more memory than `b` justifies, or called whole a record that
    /// names an invalid file or length, or one that does not encode back to
    /// a record that decodes to itself.
    fn decode_checked(b: &[u8]) -> Result<Decoded, TestCaseError> {
        let (d, largest) = largest_alloc(|| Intent::decode(b));
        prop_assert!(
            largest <= input_bound(b.len()),
            "{largest} bytes asked for at once while decoding {} bytes",
            b.len()
        );
        match &d {
            Decoded::Whole(i) => {
                let names: Vec<&String> = match &i.op {
                    Op::Rename { from, to } | Op::Replace { from, to, .. } => vec![from, to],
                    Op::Create { name, .. } | Op::Delete { name } | Op::SetLen { name, .. } => {
                        vec![name]
                    }
                };
                for n in names {
                    prop_assert!(crate::storage::store::validate_name(n).is_ok(), "{n:?}");
                }
                if let Op::SetLen {
                    block_bytes,
                    old_len,
                    new_len,
                    ..
                } = &i.op
                {
                    prop_assert!(*block_bytes > 0 && block_bytes % 512 == 0);
                    prop_assert!(*block_bytes <= MAX_BLOCK_BYTES);
                    prop_assert!(*old_len <= MAX_LEN && *new_len <= MAX_LEN);
                    // What carrying it out computes stays in range.
                    let Op::SetLen { layout, .. } = &i.op else {
                        unreachable!()
                    };
                    for devices in 1..=4 {
                        let l = crate::storage::layout::Layout::new(*layout, devices, *block_bytes)
                            .expect("a whole record's layout");
                        for len in [*old_len, *new_len] {
                            let size = crate::storage::header::HEADER_BYTES
                                .checked_add(l.device_bytes(len));
                            prop_assert!(size.is_some(), "{i:?}: backing file size overflows");
                            for d in 0..devices {
                                prop_assert!(l.device_end(d, len) <= l.device_bytes(len));
                            }
                        }
                    }
                }
                match Intent::decode(&i.encode()) {
                    Decoded::Whole(again) => prop_assert_eq!(&again, i),
                    other => prop_assert!(false, "{i:?} re-encoded decodes as {other:?}"),
                }
            }
            Decoded::Unknown(problem) => prop_assert!(!problem.is_empty()),
            Decoded::Torn => {}
        }
        Ok(d)
    }

    /// A record of arbitrary fields and name bytes, with lengths and
    /// checksum made right.
    #[allow(clippy::too_many_arguments)]
    fn record(
        version: u32,
        code: u32,
        devices: u32,
        layout: u32,
        fields: [u64; 4],
        name: &[u8],
        second: &[u8],
    ) -> Vec<u8> {
        let mut b = MAGIC.to_vec();
        for v in [version, code, devices, layout] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        for v in fields {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.extend_from_slice(&(name.len() as u16).to_le_bytes());
        b.extend_from_slice(&(second.len() as u16).to_le_bytes());
        b.extend_from_slice(name);
        b.extend_from_slice(second);
        let crc = crc32c(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        b
    }

    fn name_bytes() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            4 => names().prop_map(String::into_bytes),
            1 => proptest::collection::vec(any::<u8>(), 0..24),
            1 => (190usize..260).prop_map(|n| vec![b'a'; n]),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Any bytes are torn, unknown, or a whole record of valid names and lengths.
        #[test]
        fn arbitrary_bytes_are_torn_unknown_or_whole(
            magic in any::<bool>(),
            tail in proptest::collection::vec(any::<u8>(), 0..200),
        ) {
            let mut b = if magic { MAGIC.to_vec() } else { Vec::new() };
            b.extend_from_slice(&tail);
            decode_checked(&b)?;
        }

        /// Any fields under a right checksum: unknown, or whole with exactly those fields.
        #[test]
        fn any_checksummed_record_is_whole_or_unknown(
            version in prop_oneof![4 => Just(FORMAT_VERSION), 1 => any::<u32>()],
            code in prop_oneof![4 => 0u32..7, 1 => any::<u32>()],
            devices in any::<u32>(),
            layout in prop_oneof![4 => 0u32..5, 1 => any::<u32>()],
            fields in prop_oneof![
                any::<[u64; 4]>(),
                (any::<u64>(), 0u64..8, 0u64..=MAX_LEN + 1, 0u64..=MAX_LEN + 1)
                    .prop_map(|(uid, k, a, b)| [uid, k * 512, a, b]),
                (any::<u64>(), 0u64..16, 0u64..=MAX_LEN, 0u64..=MAX_LEN)
                    .prop_map(|(uid, k, a, b)| [uid, (u64::MAX - k * 512) / 512 * 512, a, b]),
            ],
            name in name_bytes(),
            second in name_bytes(),
        ) {
            let b = record(version, code, devices, layout, fields, &name, &second);
            match decode_checked(&b)? {
                Decoded::Torn => prop_assert!(false, "a checksummed record read as torn"),
                Decoded::Unknown(_) => {}
                Decoded::Whole(i) => {
                    prop_assert_eq!(i.devices, devices);
                    let text = |v: &[u8]| String::from_utf8(v.to_vec()).unwrap();
                    let (n1, n2) = (text(&name), text(&second));
                    let [uid, block_bytes, old_len, new_len] = fields;
                    let want = match code {
                        1 => Op::Create { name: n1, uid },
                        2 => Op::Delete { name: n1 },
                        3 => Op::Rename { from: n1, to: n2 },
                        5 => Op::Replace { from: n1, to: n2, uid },
                        _ => Op::SetLen {
                            name: n1,
                            uid,
                            layout: LayoutKind::from_code(layout).unwrap(),
                            block_bytes,
                            old_len,
                            new_len,
                        },
                    };
                    prop_assert_eq!(i.op, want);
                }
            }
        }

        /// Every valid record decodes to itself.
        #[test]
        fn valid_records_round_trip(i in valid()) {
            let b = i.encode();
            prop_assert!(b.len() <= MAX_RECORD);
            match decode_checked(&b)? {
                Decoded::Whole(d) => prop_assert_eq!(d, i),
                other => prop_assert!(false, "{i:?} decoded as {other:?}"),
            }
        }

        /// A valid record with bits flipped, cut or run on is torn, unknown, or itself.
        #[test]
        fn damaged_records_are_never_read_as_another(
            i in valid(),
            flips in proptest::collection::vec(any::<proptest::sample::Index>(), 0..=5),
            cut in prop_oneof![Just(None), any::<proptest::sample::Index>().prop_map(Some)],
            run_on in proptest::collection::vec(any::<u8>(), 0..8),
        ) {
            let mut b = i.encode();
            for f in &flips {
                let bit = f.index(b.len() * 8);
                b[bit / 8] ^= 1 << (bit % 8);
            }
            if let Some(c) = cut {
                b.truncate(c.index(b.len() + 1));
            }
            b.extend_from_slice(&run_on);
            if let Decoded::Whole(d) = decode_checked(&b)? {
                prop_assert_eq!(d, i);
            }
        }
    }
}
