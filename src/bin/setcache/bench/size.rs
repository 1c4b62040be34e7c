//! Byte sizes as people type them ("4k", "512M", "1G", "1.5g", "4KiB", "512") and
//! as the reports print them.
//!
//! Suffixes are binary (k = 1024) and case-insensitive; an optional "i" and "b"
//! may follow ("KiB", "kb"). A fraction is allowed when the result is a whole
//! number of bytes.

/// Parse a size in bytes.
pub(crate) fn parse_size(text: &str) -> Result<u64, String> {
    let bad =
        |why: &str| format!("invalid size {text:?}: {why} (expected e.g. 512, 64k, 512M, 4G)");
    let s = text.trim();
    if s.is_empty() {
        return Err(bad("empty"));
    }
    let num_end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, suffix) = s.split_at(num_end);
    if num.is_empty() {
        return Err(bad("no number"));
    }
    let shift = match suffix.to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => return Err(bad(&format!("unknown suffix {suffix:?}"))),
    };
    let unit = 1u64 << shift;
    match num.split_once('.') {
        None => {
            let n: u64 = num.parse().map_err(|_| bad("not a number"))?;
            n.checked_mul(unit).ok_or_else(|| bad("too large"))
        }
        Some((whole, frac)) => {
            if frac.is_empty() || frac.contains('.') || frac.len() > 12 {
                return Err(bad("malformed fraction"));
            }
            let whole: u64 = if whole.is_empty() {
                0
            } else {
                whole.parse().map_err(|_| bad("not a number"))?
            };
            let frac_num: u128 = frac.parse().map_err(|_| bad("not a number"))?;
            let frac_den = 10u128.pow(frac.len() as u32);
            let scaled = frac_num * unit as u128;
            if !scaled.is_multiple_of(frac_den) {
                return Err(bad("not a whole number of bytes"));
            }
            let frac_bytes = (scaled / frac_den) as u64;
            whole
                .checked_mul(unit)
                .and_then(|w| w.checked_add(frac_bytes))
                .ok_or_else(|| bad("too large"))
        }
    }
}

/// Print a size compactly: exact binary units where they fit ("4k", "256M"), else
/// plain bytes.
pub(crate) fn format_size(bytes: u64) -> String {
    const UNITS: [(u32, &str); 4] = [(40, "T"), (30, "G"), (20, "M"), (10, "k")];
    for (shift, name) in UNITS {
        let unit = 1u64 << shift;
        if bytes >= unit && bytes.is_multiple_of(unit) {
            return format!("{}{name}", bytes >> shift);
        }
    }
    bytes.to_string()
}

/// clap value parser for sizes.
pub(crate) fn size_arg(text: &str) -> Result<u64, String> {
    parse_size(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_plain_and_suffixed_sizes() {
        assert_eq!(parse_size("512"), Ok(512));
        assert_eq!(parse_size("4k"), Ok(4096));
        assert_eq!(parse_size("4K"), Ok(4096));
        assert_eq!(parse_size("64KiB"), Ok(65536));
        assert_eq!(parse_size("512M"), Ok(512 << 20));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert_eq!(parse_size("4g"), Ok(4 << 30));
        assert_eq!(parse_size("2T"), Ok(2 << 40));
        assert_eq!(parse_size("1.5G"), Ok(3 << 29));
        assert_eq!(parse_size("0.5k"), Ok(512));
        assert_eq!(parse_size(" 8mb "), Ok(8 << 20));
        assert_eq!(parse_size("0"), Ok(0));
    }

    #[test]
    fn refuses_garbage_with_a_reason() {
        for bad in ["", "k", "4x", "1.2.3", "-4k", "1.", "4kk", "0.3", "abc"] {
            let e = parse_size(bad).unwrap_err();
            assert!(e.contains("invalid size"), "{bad}: {e}");
        }
        assert!(parse_size("99999999999999999999").is_err());
        assert!(parse_size("20000000T").unwrap_err().contains("too large"));
    }

    #[test]
    fn formats_round_trip() {
        for n in [512u64, 4096, 3072, 65536, 256 << 20, 1 << 30, 5 << 40, 1000] {
            assert_eq!(parse_size(&format_size(n)), Ok(n));
        }
        assert_eq!(format_size(4096), "4k");
        assert_eq!(format_size(256 << 20), "256M");
        assert_eq!(format_size(1000), "1000");
    }

    use crate::test_alloc::{input_bound, largest_alloc};
    use proptest::prelude::*;

    /// What `parse_size` should give for `whole.frac` (either may be empty,
    /// `frac` `None` for no point) times `2^shift`, computed in 128 bits.
    fn model(whole: &str, frac: Option<&str>, shift: u32) -> Option<u64> {
        if whole.is_empty() && frac.is_none_or(str::is_empty) {
            return None;
        }
        let w: u128 = if whole.is_empty() {
            0
        } else {
            whole.parse::<u64>().ok()?.into()
        };
        let unit = 1u128 << shift;
        let Some(frac) = frac else {
            return u64::try_from(w * unit).ok();
        };
        if frac.is_empty() || frac.len() > 12 {
            return None;
        }
        let den = 10u128.pow(frac.len() as u32);
        let scaled = frac.parse::<u128>().ok()? * unit;
        if !scaled.is_multiple_of(den) {
            return None;
        }
        u64::try_from(w * unit + scaled / den).ok()
    }

    fn digits() -> impl Strategy<Value = String> {
        prop_oneof![
            "[0-9]{0,4}",
            any::<u64>().prop_map(|v| v.to_string()),
            "[0-9]{19,22}",
            Just("5".to_string()),
            Just("25".to_string()),
            Just("0".to_string()),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Any text is a size that prints back to itself, or an error saying why.
        #[test]
        fn any_text_is_a_size_or_refused(
            text in prop_oneof![".{0,24}", "[0-9. kKmMgGtTiIbB+-]{0,12}"],
        ) {
            let (r, largest) = largest_alloc(|| size_arg(&text));
            prop_assert!(largest <= input_bound(text.len()));
            match r {
                Ok(v) => prop_assert_eq!(parse_size(&format_size(v)), Ok(v)),
                Err(e) => prop_assert!(e.contains("invalid size"), "{e}"),
            }
        }

        /// Numbers with fractions and suffixes read as their exact byte value, or are refused.
        #[test]
        fn sizes_read_as_their_exact_value(
            whole in digits(),
            frac in proptest::option::of(digits()),
            suffix in prop_oneof![
                Just(("", 0u32)), Just(("b", 0)), Just(("B", 0)),
                Just(("k", 10)), Just(("KiB", 10)), Just(("kb", 10)),
                Just(("M", 20)), Just(("mib", 20)), Just(("G", 30)), Just(("gB", 30)),
                Just(("t", 40)), Just(("TiB", 40)),
            ],
            pad in prop_oneof![Just(""), Just(" "), Just("\t")],
        ) {
            let (name, shift) = suffix;
            let text = match &frac {
                Some(f) => format!("{pad}{whole}.{f}{name}{pad}"),
                None => format!("{pad}{whole}{name}{pad}"),
            };
            let want = model(&whole, frac.as_deref(), shift);
            prop_assert_eq!(parse_size(&text).ok(), want, "{:?}", text);
        }

        /// Every size prints as text that reads back as that size.
        #[test]
        fn printed_sizes_read_back(
            v in prop_oneof![any::<u64>(), (0u64..1 << 24, 0u32..41).prop_map(|(m, s)| m << s)],
        ) {
            prop_assert_eq!(parse_size(&format_size(v)), Ok(v));
        }
    }
}
