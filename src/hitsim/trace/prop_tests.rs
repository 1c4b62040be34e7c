//! Trace specs and trace files fed arbitrary and near-valid input: `load`
//! returns a trace or an error, never panics, never hangs, and asks for no
//! more memory at once than the input justifies.

use std::io::Write as _;

use proptest::prelude::*;

use super::{MSR_MAX_SIZE, Opts, field_u64, load, path_and_opts};
use crate::hitsim::TempFile;
use crate::test_alloc::{input_bound, largest_alloc};

/// A file for one case, removed on drop: `bytes`, gzip-compressed when `gz`
/// (the name then ends in `.gz`).
fn temp_trace(bytes: &[u8], gz: bool) -> TempFile {
    if gz {
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        enc.write_all(bytes).unwrap();
        TempFile::with("prop.gz", &enc.finish().unwrap())
    } else {
        TempFile::with("prop", bytes)
    }
}

/// Pages an MSR trace of `bytes` can ask for at most: every line with a Size
/// field covering as many pages as a request of that Size (capped as `msr`
/// caps it) can. An MSR line is a run of requests written compactly; the
/// allocation bound counts each page it covers as the 2 bytes (`0\n`) it
/// would take in the densest text trace.
fn msr_pages(bytes: &[u8], page_size: u64) -> u64 {
    if page_size == 0 {
        return 0;
    }
    String::from_utf8_lossy(bytes)
        .lines()
        .filter_map(|l| {
            let size = field_u64("", 0, "", l.split(',').nth(5)?).ok()?;
            Some(size.min(MSR_MAX_SIZE) / page_size + 2)
        })
        .sum()
}

/// Loads `kind:` a file of `bytes` (gzip-compressed when `gz`), with
/// `options` after the path; fails the case on an allocation past the
/// bound. Returns what `load` returned.
fn load_checked(
    kind: &str,
    bytes: &[u8],
    gz: bool,
    options: &str,
    page_size: u64,
) -> Result<Result<super::Trace, String>, TestCaseError> {
    let file = temp_trace(bytes, gz);
    let spec = format!("{kind}:{}{options}", file.0.display());
    let (r, largest) = largest_alloc(|| load(&spec, page_size));
    let file_len = std::fs::metadata(&file.0).unwrap().len() as usize;
    let mut n = bytes.len().max(file_len) + spec.len();
    if kind == "msr" {
        n = n.saturating_add(2 * msr_pages(bytes, page_size) as usize);
    }
    prop_assert!(
        largest <= input_bound(n),
        "{spec}: {largest} bytes asked for at once for {n} bytes of input"
    );
    match &r {
        Ok(t) => {
            prop_assert!(!t.is_empty());
            prop_assert!(t.pages.iter().all(|&p| (p as usize) < t.footprint));
            prop_assert!(t.n_writes <= t.len() as u64);
        }
        Err(e) => prop_assert!(!e.is_empty()),
    }
    Ok(r)
}

fn digits(v: u64) -> Vec<u8> {
    v.to_string().into_bytes()
}

/// A field that reads as a number: decimal, hexadecimal, padded.
fn good_number() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        6 => (0u64..100_000).prop_map(digits),
        1 => any::<u64>().prop_map(digits),
        1 => any::<u64>().prop_map(|v| format!("0x{v:x}").into_bytes()),
        1 => (0u64..1 << 30).prop_map(|v| format!(" {v} ").into_bytes()),
    ]
}

/// A field that does not: past 2^64, negative, hexadecimal without digits,
/// exponent, fraction, empty, a sign, very long, or any bytes (NUL, not
/// UTF-8, a separator, a line end).
fn bad_number() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        1 => any::<i64>().prop_map(|v| format!("-{}", v.unsigned_abs()).into_bytes()),
        2 => prop_oneof![
            Just("18446744073709551616"),
            Just("99999999999999999999999"),
            Just("0x"),
            Just("1e3"),
            Just("1.5"),
            Just(""),
            Just("+7"),
            Just("NaN"),
            Just("7\0"),
        ]
        .prop_map(|s| s.as_bytes().to_vec()),
        1 => (21usize..3000).prop_map(|n| vec![b'9'; n]),
        2 => proptest::collection::vec(any::<u8>(), 0..6),
    ]
}

/// Valid mostly, sometimes not.
fn number() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![3 => good_number(), 1 => bad_number()]
}

/// A read/write field in one of `spellings`, in any case, maybe padded.
fn good_rw(spellings: &'static [&'static str]) -> impl Strategy<Value = Vec<u8>> {
    (
        proptest::sample::select(spellings),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(s, upper, pad)| {
            let s = if upper {
                s.to_ascii_uppercase()
            } else {
                s.to_string()
            };
            if pad { format!(" {s} ") } else { s }.into_bytes()
        })
}

/// A read/write field no format knows, or any bytes.
fn bad_rw() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop_oneof![Just("Erase"), Just(""), Just("\0"), Just("rw"), Just("2")]
            .prop_map(|s| s.as_bytes().to_vec()),
        proptest::collection::vec(any::<u8>(), 0..5),
    ]
}

const MSR_RW: &[&str] = &["Read", "Write"];
const TEXT_RW: &[&str] = &["r", "w", "read", "write"];
const CSV_RW: &[&str] = &["r", "read", "0", "get", "w", "write", "1", "set", "put"];

/// A short word of letters and digits (never a separator or a line end).
fn word() -> impl Strategy<Value = Vec<u8>> {
    "[a-z0-9]{1,6}".prop_map(String::into_bytes)
}

/// Joins fields with `sep` into one line ending in `\n` (`end` 0) or `\r\n`
/// (1), or nothing (2, a last line without its end).
fn line(fields: Vec<Vec<u8>>, sep: &[u8], end: u8) -> Vec<u8> {
    let mut l = fields.join(sep);
    match end {
        0 => l.push(b'\n'),
        1 => l.extend_from_slice(b"\r\n"),
        _ => {}
    }
    l
}

/// A line no format reads: fields of any kind, junk bytes, a very long line,
/// bytes that are not UTF-8.
fn bad_line() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        3 => (proptest::collection::vec(prop_oneof![number(), bad_rw(), word()], 0..8), 0u8..3)
            .prop_map(|(f, end)| line(f, b",", end)),
        2 => proptest::collection::vec(any::<u8>(), 0..40),
        1 => (1000usize..50_000).prop_map(|n| {
            let mut v = vec![b'7'; n];
            v.extend_from_slice(b",x\n");
            v
        }),
    ]
}

/// `lines` with, maybe, one replaced by or added as a bad line.
fn with_damage(lines: impl Strategy<Value = Vec<Vec<u8>>>) -> impl Strategy<Value = Vec<u8>> {
    let damage = proptest::option::weighted(
        0.4,
        (any::<proptest::sample::Index>(), any::<bool>(), bad_line()),
    );
    (lines, damage).prop_map(|(mut lines, damage)| {
        if let Some((at, replace, bad)) = damage {
            let i = at.index(lines.len() + 1);
            if replace && i < lines.len() {
                lines[i] = bad;
            } else {
                lines.insert(i, bad);
            }
        }
        lines.concat()
    })
}

/// MSR lines, mostly valid (6 or 7 fields, any disk, offsets that may run
/// past 2^64 now and then, sizes up to the bound).
fn msr_file() -> impl Strategy<Value = Vec<u8>> {
    let line = (
        (
            good_number(),
            word(),
            prop_oneof![4 => 0u64..4, 1 => any::<u64>()],
        ),
        good_rw(MSR_RW),
        prop_oneof![30 => 0u64..1 << 40, 1 => any::<u64>()],
        prop_oneof![12 => 0u64..1 << 17, 1 => 0u64..=MSR_MAX_SIZE],
        (good_number(), any::<bool>(), 0u8..2),
    )
        .prop_map(|((ts, host, disk), rw, offset, size, (resp, seven, end))| {
            let mut f = vec![ts, host, digits(disk), rw, digits(offset), digits(size)];
            if seven {
                f.push(resp);
            }
            line(f, b",", end)
        });
    with_damage(proptest::collection::vec(line, 0..30))
}

/// Text lines, mostly valid: a page, maybe R or W; markers, comments,
/// blank lines.
fn text_file() -> impl Strategy<Value = Vec<u8>> {
    let sep = prop_oneof![Just(&b" "[..]), Just(&b"\t"[..]), Just(&b"  "[..])];
    let line = prop_oneof![
        8 => (good_number(), proptest::option::of(good_rw(TEXT_RW)), sep, 0u8..2).prop_map(
            |(page, op, sep, end)| {
                let mut fields = vec![page];
                fields.extend(op);
                line(fields, sep, end)
            }
        ),
        1 => prop_oneof![
            Just(&b"*\n"[..]),
            Just(&b"# note\n"[..]),
            Just(&b"\n"[..]),
            Just(&b" \r\n"[..]),
        ]
        .prop_map(|s| s.to_vec()),
    ];
    with_damage(proptest::collection::vec(line, 0..40))
}

/// A CSV file and its options: a page column and maybe a read/write column,
/// named in a header or given by index, under one of the separators; blank
/// lines on top. Mostly consistent; now and then a bad line or a wrong
/// option.
fn csv_file() -> impl Strategy<Value = (Vec<u8>, String)> {
    let cell = (good_number(), good_rw(CSV_RW), word());
    let rows = proptest::collection::vec(proptest::collection::vec(cell, 5), 0..30);
    let sep = prop_oneof![
        Just((b',', "")),
        Just((b';', ",sep=;")),
        Just((b'\t', ",sep=tab")),
        Just((b' ', ",sep=space")),
        Just((b'|', ",sep=|")),
    ];
    let layout = (
        1usize..=5,
        any::<proptest::sample::Index>(),
        proptest::option::of(any::<proptest::sample::Index>()),
    );
    let naming = (any::<bool>(), any::<bool>(), any::<bool>(), 0usize..3);
    let wrong = proptest::option::weighted(
        0.15,
        prop_oneof![
            Just(",col=nope"),
            Just(",col=9"),
            Just(",rw=nope"),
            Just(",sep=ab"),
            Just(",col=99999999999999999999999"),
            Just(",bogus=1"),
        ],
    );
    let bad = proptest::option::weighted(0.3, (any::<proptest::sample::Index>(), bad_line()));
    (rows, sep, layout, naming, wrong, bad).prop_map(
        |(
            rows,
            (sep, sep_opt),
            (ncols, col, rw),
            (header, by_name, rw_by_name, blank_top),
            wrong,
            bad,
        )| {
            let col = col.index(ncols);
            let rw = rw.map(|r| r.index(ncols)).filter(|&r| r != col);
            let names: Vec<Vec<u8>> = (0..ncols)
                .map(|c| match c {
                    c if c == col => b"page".to_vec(),
                    c if Some(c) == rw => b"op".to_vec(),
                    c => format!("c{c}").into_bytes(),
                })
                .collect();
            let mut lines = vec![b"\n".to_vec(); blank_top];
            if header {
                lines.push(line(names, &[sep], 0));
            }
            for row in rows {
                let fields = row
                    .into_iter()
                    .take(ncols)
                    .enumerate()
                    .map(|(c, (n, op, w))| match c {
                        c if c == col => n,
                        c if Some(c) == rw => op,
                        _ => w,
                    })
                    .collect();
                lines.push(line(fields, &[sep], 0));
            }
            if let Some((at, b)) = bad {
                let i = at.index(lines.len() + 1);
                lines.insert(i, b);
            }
            let mut o = String::new();
            if header && by_name {
                o.push_str(",col=page");
            } else {
                o.push_str(&format!(",col={col}"));
                if header {
                    o.push_str(",header=1");
                }
            }
            if let Some(r) = rw {
                if header && rw_by_name {
                    o.push_str(",rw=op");
                } else {
                    o.push_str(&format!(",rw={r}"));
                }
            }
            o.push_str(sep_opt);
            o.push_str(wrong.unwrap_or(""));
            (lines.concat(), o)
        },
    )
}

fn oracle_bytes() -> impl Strategy<Value = Vec<u8>> {
    let record = (
        any::<u32>(),
        prop_oneof![0u64..50, any::<u64>()],
        any::<u32>(),
        any::<i64>(),
    );
    (
        proptest::collection::vec(record, 0..40),
        proptest::collection::vec(any::<u8>(), 0..24),
    )
        .prop_map(|(records, tail)| {
            let mut b = Vec::new();
            for (time, id, size, next) in records {
                b.extend_from_slice(&time.to_le_bytes());
                b.extend_from_slice(&id.to_le_bytes());
                b.extend_from_slice(&size.to_le_bytes());
                b.extend_from_slice(&next.to_le_bytes());
            }
            // Sometimes a truncated last record.
            if tail.len() % 3 == 0 {
                b.extend_from_slice(&tail);
            }
            b
        })
}

fn page_sizes() -> impl Strategy<Value = u64> {
    prop_oneof![
        4 => Just(4096u64),
        1 => Just(512u64),
        1 => Just(1u64 << 20),
        1 => Just(u64::MAX),
        1 => Just(0u64),
    ]
}

/// `good` mostly, `bad` now and then, as option values.
fn value(good: &'static [&'static str], bad: &'static [&'static str]) -> BoxedStrategy<String> {
    prop_oneof![
        6 => proptest::sample::select(good).prop_map(str::to_string),
        1 => proptest::sample::select(bad).prop_map(str::to_string),
    ]
    .boxed()
}

/// A count of requests: at most a few hundred, or zero, past a limit
/// (10^15 requests cannot be held, 2e19 is past 2^64), or malformed.
fn count() -> BoxedStrategy<String> {
    prop_oneof![
        6 => (1u64..300).prop_map(|v| v.to_string()),
        1 => proptest::sample::select(&["0", "1e15", "2e19", "-5", "1_00", "abc", "", "1.5"][..])
            .prop_map(str::to_string),
    ]
    .boxed()
}

/// A count of pages or records: a few thousand at most, or zero, 2^50 and
/// more (ranges of ids that cost nothing until used, or are refused), past
/// 2^64, or malformed.
fn pages() -> BoxedStrategy<String> {
    prop_oneof![
        6 => (1u64..5000).prop_map(|v| v.to_string()),
        1 => proptest::sample::select(
            &["0", "1125899906842624", "18446744073709551615", "18446744073709551616", "x"][..]
        )
        .prop_map(str::to_string),
    ]
    .boxed()
}

/// The generated kinds with their options, each present or not (required
/// ones mostly present), in any order, sometimes with an unknown one. The
/// values are small or fail at once (see `count` and `pages`): nothing here
/// generates for long.
fn generator_spec() -> impl Strategy<Value = String> {
    let opt = |key: &'static str, v: BoxedStrategy<String>, weight: u32| {
        prop_oneof![
            weight => v.prop_map(move |v| Some(format!("{key}={v}"))),
            1 => Just(None),
        ]
    };
    let ycsb = (
        opt("records", pages(), 15),
        opt("ops", count(), 15),
        opt("theta", value(&["0.99"], &["0", "0.5", "1", "nan", "x"]), 1),
        opt("seed", any::<u64>().prop_map(|v| v.to_string()).boxed(), 1),
        opt(
            "per_leaf",
            value(&["1", "4.48", "1e300", "2"], &["0", "nan", "-2", "0.3"]),
            1,
        ),
        opt("fanout", value(&["1", "7", "128"], &["0", "x"]), 1),
        opt(
            "internal",
            value(&["0", "0.3", "1"], &["1.5", "nan", "-2"]),
            1,
        ),
    )
        .prop_map(|(a, b, c, d, e, f, g)| ("ycsb", vec![a, b, c, d, e, f, g]));
    let zipf = (
        opt("pages", pages(), 15),
        opt("ops", count(), 15),
        opt(
            "theta",
            value(
                &["0", "0.5", "0.99", "1", "1.5"],
                &["-1", "nan", "inf", "x"],
            ),
            15,
        ),
        opt("seed", any::<u64>().prop_map(|v| v.to_string()).boxed(), 1),
    )
        .prop_map(|(a, b, c, d)| ("zipf", vec![a, b, c, d]));
    let uniform = (
        opt("pages", pages(), 15),
        opt("ops", count(), 15),
        opt("seed", any::<u64>().prop_map(|v| v.to_string()).boxed(), 1),
    )
        .prop_map(|(a, b, c)| ("uniform", vec![a, b, c]));
    let scan = (
        opt("pages", pages(), 15),
        opt(
            "loops",
            value(&["1", "2", "3"], &["0", "1e15", "x", "-1"]),
            1,
        ),
    )
        .prop_map(|(a, b)| ("SCAN ", vec![a, b]));
    let extra = prop_oneof![
        6 => Just(None),
        1 => proptest::sample::select(&["color=red", "novalue", " ", "ops"][..])
            .prop_map(|s| Some(s.to_string())),
    ];
    (prop_oneof![ycsb, zipf, uniform, scan], extra)
        .prop_flat_map(|((kind, opts), extra)| {
            let mut opts: Vec<String> = opts.into_iter().flatten().collect();
            opts.extend(extra);
            (Just(kind), Just(opts).prop_shuffle())
        })
        .prop_map(|(kind, opts)| format!("{kind}:{}", opts.join(",")))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Any option list parses or is refused; each option reads as a number or an error.
    #[test]
    fn option_lists_parse_or_are_refused(
        items in proptest::collection::vec(
            (
                prop_oneof![
                    prop_oneof![Just("ops"), Just("pages"), Just(" theta ")]
                        .prop_map(str::to_string),
                    "[a-z_]{0,6}",
                ],
                prop_oneof![Just("="), Just(""), Just("=="), Just(" = ")],
                prop_oneof![
                    number().prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
                    prop_oneof![
                        Just("30_000_000"),
                        Just("30e6"),
                        Just("1e400"),
                        Just("-0"),
                        Just("4.5"),
                        Just("inf"),
                        Just("1e19"),
                        Just("_"),
                    ]
                    .prop_map(str::to_string),
                    ".{0,8}",
                ],
            ),
            0..6,
        ),
        raw in ".{0,40}",
        use_raw in any::<bool>(),
    ) {
        let rest = if use_raw {
            raw
        } else {
            items
                .iter()
                .map(|(k, eq, v)| format!("{k}{eq}{v}"))
                .collect::<Vec<_>>()
                .join(",")
        };
        let allowed = ["ops", "pages", "theta"];
        let (parsed, largest) = largest_alloc(|| {
            let o = Opts::parse("spec", &rest, &allowed)?;
            for k in allowed {
                let _ = o.num::<u64>(k, None);
                let _ = o.num::<u32>(k, Some(1));
                let _ = o.num::<usize>(k, None);
                let _ = o.num::<f64>(k, None);
                if let (Some(v), Ok(n)) = (o.raw(k), o.num::<u64>(k, None)) {
                    // An integer read is the integer written, in one of its spellings.
                    let clean = v.replace('_', "");
                    let direct = clean.parse::<u64>().ok();
                    let float = clean.parse::<f64>().ok().map(|f| f as u64);
                    assert!(direct == Some(n) || float == Some(n), "{v:?} read as {n}");
                }
            }
            Ok::<_, String>(o.pairs.len())
        });
        prop_assert!(largest <= input_bound(rest.len() + 64));
        if let Ok(n) = parsed {
            prop_assert!(n <= rest.split(',').count());
        }
        // A path with options after it splits the same way, or is refused.
        let _ = path_and_opts("spec", &rest, &allowed);
    }

    /// Any spec naming no existing file and no runnable generator is refused.
    #[test]
    fn arbitrary_specs_load_or_are_refused(
        spec in prop_oneof![
            ".{0,40}",
            "(text|csv|msr|oracle|ycsb|zipf|uniform|scan|Text| msr|x)?:.{0,30}",
        ],
    ) {
        // Skipped: generated kinds whose options all parse (any counts may come
        // up; `generator_specs_generate_or_are_refused` keeps them small), and
        // file kinds naming a path that exists.
        if let Some((kind, rest)) = spec.split_once(':') {
            let kind = kind.trim().to_ascii_lowercase();
            let generated = ["ycsb", "zipf", "uniform", "scan"].contains(&kind.as_str());
            let all_options = rest
                .split(',')
                .all(|kv| kv.trim().is_empty() || kv.contains('='));
            prop_assume!(!(generated && all_options));
            let exists = |p: &str| std::path::Path::new(p).exists();
            let csv_path = path_and_opts(&spec, rest, &["col", "rw", "sep", "header"]);
            prop_assume!(!exists(rest) && !csv_path.is_ok_and(|(p, _)| exists(p)));
        }
        let (r, largest) = largest_alloc(|| load(&spec, 4096));
        prop_assert!(largest <= input_bound(spec.len()));
        prop_assert!(r.is_err(), "{spec:?} loaded");
    }
}

proptest! {
    // Each case writes and reads a file (well under a millisecond on tmpfs).
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Any bytes as a trace file of any format, plain or gzip: a trace or an error.
    #[test]
    fn arbitrary_files_load_or_are_refused(
        kind in prop_oneof![
            Just("text"),
            Just("csv"),
            Just("msr"),
            Just("systor"),
            Just("cbs"),
            Just("oracle"),
        ],
        bytes in proptest::collection::vec(any::<u8>(), 0..600),
        gz in any::<bool>(),
        page_size in page_sizes(),
    ) {
        let _ = load_checked(kind, &bytes, gz, "", page_size)?;
        if gz {
            // The same bytes where gzip data is expected.
            let file = temp_trace(&bytes, false);
            let gz_name = file.0.with_extension("gz");
            std::fs::rename(&file.0, &gz_name).unwrap();
            let renamed = TempFile(gz_name);
            let spec = format!("{kind}:{}", renamed.0.display());
            let (r, largest) = largest_alloc(|| load(&spec, page_size));
            prop_assert!(largest <= input_bound(bytes.len() + spec.len()));
            if let Err(e) = r {
                prop_assert!(!e.is_empty());
            }
        }
    }

    /// Any bytes where bzip2 data is expected, bare or behind a bzip2
    /// header: an error or a trace, never a panic, and no more memory than
    /// one bzip2 block needs.
    #[test]
    fn arbitrary_bzip2_files_load_or_are_refused(
        bytes in proptest::collection::vec(any::<u8>(), 0..600),
        header in any::<bool>(),
    ) {
        let mut data = if header { b"BZh9".to_vec() } else { Vec::new() };
        data.extend_from_slice(&bytes);
        let file = temp_trace(&data, false);
        let bz = file.0.with_extension("bz2");
        std::fs::rename(&file.0, &bz).unwrap();
        let renamed = TempFile(bz);
        let spec = format!("cbs:{}", renamed.0.display());
        let (r, largest) = largest_alloc(|| load(&spec, 4096));
        // A 900k block's tables: 4 bytes per byte of the block, and more.
        prop_assert!(largest <= input_bound(data.len() + spec.len()).max(8 << 20));
        if let Err(e) = r {
            prop_assert!(!e.is_empty());
        }
    }

    /// Mostly valid MSR files with bad fields and lines: a trace or an error.
    #[test]
    fn near_valid_msr_files_load_or_are_refused(
        b in msr_file(),
        gz in any::<bool>(),
        page_size in page_sizes(),
    ) {
        let r = load_checked("msr", &b, gz, "", page_size)?;
        if page_size == 0 {
            prop_assert!(r.is_err());
        }
    }

    /// Mostly valid text traces with bad lines: a trace or an error.
    #[test]
    fn near_valid_text_files_load_or_are_refused(b in text_file(), gz in any::<bool>()) {
        let _ = load_checked("text", &b, gz, "", 4096)?;
    }

    /// CSV files under every option, with bad lines or options: a trace or an error.
    #[test]
    fn near_valid_csv_files_load_or_are_refused(
        (b, options) in csv_file(),
        gz in any::<bool>(),
    ) {
        let _ = load_checked("csv", &b, gz, &options, 4096)?;
    }

    /// oracleGeneral files load exactly when made of whole records.
    #[test]
    fn oracle_records_load_or_are_refused(b in oracle_bytes(), gz in any::<bool>()) {
        let r = load_checked("oracle", &b, gz, "", 4096)?;
        prop_assert_eq!(r.is_ok(), !b.is_empty() && b.len() % 24 == 0);
    }

    /// Generator specs with small or out-of-range options: a trace or an error, quickly.
    #[test]
    fn generator_specs_generate_or_are_refused(spec in generator_spec()) {
        let start = std::time::Instant::now();
        let (r, largest) = largest_alloc(|| load(&spec, 4096));
        prop_assert!(largest <= input_bound(spec.len()), "{spec}: {largest} bytes at once");
        prop_assert!(start.elapsed().as_secs() < 10, "{spec} took {:?}", start.elapsed());
        if let Ok(t) = r {
            // At most 299 ops (twice that with ycsb's internal pages), or 4999
            // pages scanned 3 times.
            prop_assert!(!t.is_empty() && t.len() <= 15_000, "{spec}: {} requests", t.len());
        }
    }
}

/// A csv header after blank lines is the header (a blank first line used to panic).
#[test]
fn csv_header_may_follow_blank_lines() {
    let f = temp_trace(b"\n  \npage,op\n5,R\n6,W\n5,R\n", false);
    let t = load(&format!("csv:{},col=page,rw=op", f.0.display()), 4096).unwrap();
    assert_eq!(t.pages, [0, 1, 0]);
    assert_eq!(t.n_writes, 1);
    let e = load(&format!("csv:{},col=nope", f.0.display()), 4096).unwrap_err();
    assert!(e.contains("line 3: no column named \"nope\""), "{e}");
}

/// An MSR Size past 16 MiB is refused at once; one at the bound loads.
#[test]
fn msr_sizes_past_the_bound_are_refused() {
    let f = temp_trace(b"1,hm,0,Read,0,9223372036854775808,1\n", false);
    let spec = format!("msr:{}", f.0.display());
    let (r, largest) = largest_alloc(|| load(&spec, 4096));
    let e = r.unwrap_err();
    assert!(
        e.contains("line 1") && e.contains("largest accepted"),
        "{e}"
    );
    assert!(largest <= 1 << 20, "{largest}");
    let f = temp_trace(
        format!("1,hm,0,Write,0,{MSR_MAX_SIZE},1\n").as_bytes(),
        false,
    );
    let t = load(&format!("msr:{}", f.0.display()), 4096).unwrap();
    assert_eq!(t.len() as u64, MSR_MAX_SIZE / 4096);
    assert_eq!(t.n_writes, t.len() as u64);
}

/// An MSR trace with a page size of 0 is refused, not divided by.
#[test]
fn msr_page_size_zero_is_refused() {
    let f = temp_trace(b"1,hm,0,Read,0,4096,1\n", false);
    let e = load(&format!("msr:{}", f.0.display()), 0).unwrap_err();
    assert!(e.contains("page size"), "{e}");
}
