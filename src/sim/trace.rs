//! Traces: where they come from (a spec such as `ycsb:records=30000000,ops=30000000`
//! or `msr:/path/hm_0.csv`) and how they are held (one dense page id per
//! request, reads and writes told apart).

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use super::ycsb::{Rng, YCSB_THETA, YcsbKeys, Zipfian};

/// A page trace: `pages[i]` is the dense id (`0..footprint`, in order of
/// first appearance) of the page the `i`-th request touches.
#[derive(Clone, Debug, Default)]
pub struct Trace {
    /// A short description (the spec).
    pub name: String,
    /// Dense page ids, one per request.
    pub pages: Vec<u32>,
    /// Bit `i` set when request `i` is a write.
    writes: Vec<u64>,
    /// Number of writes.
    pub n_writes: u64,
    /// Number of distinct pages.
    pub footprint: usize,
}

impl Trace {
    /// Number of requests.
    pub fn len(&self) -> usize {
        self.pages.len()
    }

    /// Whether the trace has no request.
    pub fn is_empty(&self) -> bool {
        self.pages.is_empty()
    }

    /// Whether request `i` is a write.
    pub fn is_write(&self, i: usize) -> bool {
        self.writes
            .get(i / 64)
            .is_some_and(|w| w >> (i % 64) & 1 != 0)
    }

    /// The trace restricted to its reads (`writes == false`) or its writes,
    /// with the dense ids renumbered.
    pub fn only(&self, writes: bool) -> Trace {
        let mut b = Builder::new(format!(
            "{} ({})",
            self.name,
            if writes { "writes" } else { "reads" }
        ));
        b.direct(self.footprint as u64);
        for (i, &p) in self.pages.iter().enumerate() {
            if self.is_write(i) == writes {
                b.push(u64::from(p), writes);
            }
        }
        b.finish_unchecked()
    }

    /// A trace of the raw page numbers `pages`, all reads (for tests and
    /// library users).
    pub fn from_pages(name: &str, pages: impl IntoIterator<Item = u64>) -> Trace {
        let mut b = Builder::new(name.to_string());
        for p in pages {
            b.push(p, false);
        }
        b.finish_unchecked()
    }
}

/// A hash map from raw page numbers to dense ids: open addressing with
/// linear probing and a multiplicative (Fibonacci) hash. Raw page numbers
/// are often sequential or strided, which this hash spreads well.
#[derive(Debug)]
struct DenseMap {
    keys: Vec<u64>,
    vals: Vec<u32>,
    shift: u32,
    len: usize,
    /// The dense id of the page `u64::MAX` (the map's empty-slot marker).
    max_key: Option<u32>,
}

const EMPTY: u64 = u64::MAX;

impl DenseMap {
    fn new() -> DenseMap {
        DenseMap {
            keys: vec![EMPTY; 1 << 10],
            vals: vec![0; 1 << 10],
            shift: 64 - 10,
            len: 0,
            max_key: None,
        }
    }

    #[inline]
    fn slot(&self, k: u64) -> usize {
        (k.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> self.shift) as usize
    }

    /// The id of `k`, inserting `next` when absent.
    #[inline]
    fn get_or_insert(&mut self, k: u64, next: u32) -> u32 {
        if k == EMPTY {
            return *self.max_key.get_or_insert(next);
        }
        let mask = self.keys.len() - 1;
        let mut i = self.slot(k);
        loop {
            let key = self.keys[i];
            if key == k {
                return self.vals[i];
            }
            if key == EMPTY {
                self.keys[i] = k;
                self.vals[i] = next;
                self.len += 1;
                if self.len * 2 > self.keys.len() {
                    self.grow();
                }
                return next;
            }
            i = (i + 1) & mask;
        }
    }

    fn grow(&mut self) {
        let keys = std::mem::take(&mut self.keys);
        let vals = std::mem::take(&mut self.vals);
        let n = keys.len() * 2;
        self.keys = vec![EMPTY; n];
        self.vals = vec![0; n];
        self.shift -= 1;
        let mask = n - 1;
        for (k, v) in keys.into_iter().zip(vals) {
            if k != EMPTY {
                let mut i = self.slot(k);
                while self.keys[i] != EMPTY {
                    i = (i + 1) & mask;
                }
                self.keys[i] = k;
                self.vals[i] = v;
            }
        }
    }
}

/// Builds a [`Trace`] from raw page numbers.
#[derive(Debug)]
pub struct Builder {
    trace: Trace,
    map: DenseMap,
    /// When raw pages are known to be below some bound: id by raw page.
    direct: Option<Vec<u32>>,
    /// The id space ran out (more than `u32::MAX - 1` distinct pages).
    overflow: bool,
}

const NO_ID: u32 = u32::MAX;

impl Builder {
    /// An empty trace named `name`.
    pub fn new(name: String) -> Builder {
        Builder {
            trace: Trace {
                name,
                ..Trace::default()
            },
            map: DenseMap::new(),
            direct: None,
            overflow: false,
        }
    }

    /// Raw pages will all be below `n`: map them with a table, not a hash.
    pub fn direct(&mut self, n: u64) {
        self.direct = Some(vec![NO_ID; n as usize]);
    }

    /// Appends a request of raw page `page`.
    #[inline]
    pub fn push(&mut self, page: u64, write: bool) {
        let next = self.trace.footprint as u32;
        let id = match &mut self.direct {
            Some(table) => {
                let e = &mut table[page as usize];
                if *e == NO_ID {
                    *e = next;
                }
                *e
            }
            None => self.map.get_or_insert(page, next),
        };
        if id == next {
            if next == NO_ID - 1 {
                self.overflow = true;
                return;
            }
            self.trace.footprint += 1;
        }
        let i = self.trace.pages.len();
        if i % 64 == 0 {
            self.trace.writes.push(0);
        }
        if write {
            self.trace.writes[i / 64] |= 1 << (i % 64);
            self.trace.n_writes += 1;
        }
        self.trace.pages.push(id);
    }

    /// The trace, or an error when it is empty or has too many pages;
    /// `what` names the source in the message.
    pub fn finish(self, what: &str) -> Result<Trace, String> {
        if self.overflow {
            return Err(format!("{what}: more than {} distinct pages", u32::MAX - 1));
        }
        if self.trace.pages.is_empty() {
            return Err(format!("{what}: the trace is empty (no request)"));
        }
        Ok(self.trace)
    }

    fn finish_unchecked(self) -> Trace {
        self.trace
    }
}

/// Key-value options after the kind: `records=10,ops=20`.
struct Opts<'a> {
    spec: &'a str,
    pairs: Vec<(&'a str, &'a str)>,
}

impl<'a> Opts<'a> {
    fn parse(spec: &'a str, rest: &'a str, allowed: &[&str]) -> Result<Opts<'a>, String> {
        let mut pairs = Vec::new();
        for item in rest.split(',').filter(|s| !s.trim().is_empty()) {
            let (k, v) = item
                .split_once('=')
                .ok_or_else(|| format!("trace {spec:?}: expected key=value, got {item:?}"))?;
            let k = k.trim();
            if !allowed.contains(&k) {
                return Err(format!(
                    "trace {spec:?}: unknown option {k:?} (expected {})",
                    allowed.join(", ")
                ));
            }
            pairs.push((k, v.trim()));
        }
        Ok(Opts { spec, pairs })
    }

    fn raw(&self, key: &str) -> Option<&'a str> {
        self.pairs.iter().rev().find(|p| p.0 == key).map(|p| p.1)
    }

    fn num<T: std::str::FromStr>(&self, key: &str, default: Option<T>) -> Result<T, String> {
        match self.raw(key) {
            Some(v) => {
                // Allow 30_000_000 and 30e6 spellings of integers.
                let clean = v.replace('_', "");
                clean
                    .parse::<T>()
                    .ok()
                    .or_else(|| {
                        clean
                            .parse::<f64>()
                            .ok()
                            .filter(|f| f.fract() == 0.0 && *f >= 0.0)
                            .and_then(|f| format!("{f:.0}").parse::<T>().ok())
                    })
                    .ok_or_else(|| format!("trace {:?}: bad value {v:?} for {key}", self.spec))
            }
            None => default.ok_or_else(|| format!("trace {:?}: {key}= is required", self.spec)),
        }
    }
}

/// The kinds of trace a spec may name.
pub const KINDS: &str = "ycsb, zipf, uniform, scan, msr, oracle, csv, text";

/// Reads or generates the trace that `spec` names, with pages of
/// `page_size` bytes (used by block traces given in bytes).
pub fn load(spec: &str, page_size: u64) -> Result<Trace, String> {
    let (kind, rest) = spec
        .split_once(':')
        .ok_or_else(|| format!("trace {spec:?}: expected KIND:ARGS with KIND one of {KINDS}"))?;
    match kind.trim().to_ascii_lowercase().as_str() {
        "ycsb" => ycsb(spec, rest),
        "zipf" => zipf(spec, rest),
        "uniform" => uniform(spec, rest),
        "scan" => scan(spec, rest),
        "msr" => msr(spec, rest, page_size),
        "oracle" => oracle(spec, rest),
        "csv" => csv(spec, rest),
        "text" => text(spec, rest),
        other => Err(format!(
            "trace {spec:?}: unknown trace format {other:?} (expected one of {KINDS})"
        )),
    }
}

/// How a YCSB table lies on pages: MemcacheDB keeps its records in a
/// Berkeley DB B-tree, so a lookup reads the leaf page that holds the record,
/// and sometimes the internal page above that leaf (when Berkeley DB's own
/// small cache does not hold it). See ARCHITECTURE.md for the calibration.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct YcsbLayout {
    /// Records per leaf page (a fraction: leaves are not all equally full).
    pub per_leaf: f64,
    /// Leaves per internal page.
    pub fanout: u64,
    /// Probability that a lookup also reads its leaf's internal page.
    pub internal: f64,
}

impl Default for YcsbLayout {
    /// Calibrated so that 30 million records and 30 million lookups give
    /// the paper's trace: 39,188,480 reads of 5,748,822 pages.
    fn default() -> Self {
        YcsbLayout {
            per_leaf: 4.48,
            fanout: 128,
            internal: 9_188_480.0 / 30_000_000.0,
        }
    }
}

impl YcsbLayout {
    /// The leaf page of record `key` (records in key order).
    pub fn leaf(&self, key: u64) -> u64 {
        (key as f64 / self.per_leaf) as u64
    }

    /// Number of leaf pages of a table of `records` records.
    pub fn leaves(&self, records: u64) -> u64 {
        self.leaf(records - 1) + 1
    }

    /// The internal page above leaf `leaf`; internal pages are numbered
    /// after the `leaves` leaves.
    pub fn internal_page(&self, leaf: u64, leaves: u64) -> u64 {
        leaves + leaf / self.fanout
    }
}

fn ycsb(spec: &str, rest: &str) -> Result<Trace, String> {
    let o = Opts::parse(
        spec,
        rest,
        &[
            "records", "ops", "theta", "seed", "per_leaf", "fanout", "internal",
        ],
    )?;
    let records: u64 = o.num("records", None)?;
    let ops: u64 = o.num("ops", None)?;
    let theta: f64 = o.num("theta", Some(YCSB_THETA))?;
    let seed: u64 = o.num("seed", Some(1))?;
    let d = YcsbLayout::default();
    let layout = YcsbLayout {
        per_leaf: o.num("per_leaf", Some(d.per_leaf))?,
        fanout: o.num("fanout", Some(d.fanout))?,
        internal: o.num("internal", Some(d.internal))?,
    };
    if records == 0 {
        return Err(format!("trace {spec:?}: records must be positive"));
    }
    if !(0.0..1.0).contains(&theta) {
        return Err(format!("trace {spec:?}: theta must be in [0, 1)"));
    }
    if !(layout.per_leaf >= 1.0 && layout.per_leaf.is_finite())
        || layout.fanout == 0
        || !(0.0..=1.0).contains(&layout.internal)
    {
        return Err(format!(
            "trace {spec:?}: per_leaf must be >= 1, fanout positive, internal in [0, 1]"
        ));
    }
    let keys = YcsbKeys::new(records, theta);
    let mut rng = Rng::new(seed);
    let mut b = Builder::new(spec.to_string());
    let leaves = layout.leaves(records);
    b.direct(layout.internal_page(leaves - 1, leaves) + 1);
    for _ in 0..ops {
        let leaf = layout.leaf(keys.next(&mut rng));
        if layout.internal > 0.0 && rng.next_f64() < layout.internal {
            b.push(layout.internal_page(leaf, leaves), false);
        }
        b.push(leaf, false);
    }
    b.finish(spec)
}

fn zipf(spec: &str, rest: &str) -> Result<Trace, String> {
    let o = Opts::parse(spec, rest, &["pages", "ops", "theta", "seed"])?;
    let pages: u64 = o.num("pages", None)?;
    let ops: u64 = o.num("ops", None)?;
    let theta: f64 = o.num("theta", None)?;
    let seed: u64 = o.num("seed", Some(1))?;
    if pages == 0 {
        return Err(format!("trace {spec:?}: pages must be positive"));
    }
    if !(theta >= 0.0 && theta.is_finite()) {
        return Err(format!("trace {spec:?}: theta must be >= 0"));
    }
    let mut rng = Rng::new(seed);
    let mut b = Builder::new(spec.to_string());
    b.direct(pages);
    if theta < 1.0 {
        let z = Zipfian::new(0, pages - 1, theta, None);
        for _ in 0..ops {
            b.push(z.next(&mut rng).min(pages - 1), false);
        }
    } else {
        // Gray's method needs theta < 1: invert the CDF by binary search.
        let mut cdf = Vec::with_capacity(pages as usize);
        let mut sum = 0.0;
        for i in 1..=pages {
            sum += 1.0 / (i as f64).powf(theta);
            cdf.push(sum);
        }
        for _ in 0..ops {
            let u = rng.next_f64() * sum;
            let i = cdf.partition_point(|&c| c <= u) as u64;
            b.push(i.min(pages - 1), false);
        }
    }
    b.finish(spec)
}

fn uniform(spec: &str, rest: &str) -> Result<Trace, String> {
    let o = Opts::parse(spec, rest, &["pages", "ops", "seed"])?;
    let pages: u64 = o.num("pages", None)?;
    let ops: u64 = o.num("ops", None)?;
    let seed: u64 = o.num("seed", Some(1))?;
    if pages == 0 {
        return Err(format!("trace {spec:?}: pages must be positive"));
    }
    let mut rng = Rng::new(seed);
    let mut b = Builder::new(spec.to_string());
    b.direct(pages);
    for _ in 0..ops {
        b.push(rng.below(pages), false);
    }
    b.finish(spec)
}

fn scan(spec: &str, rest: &str) -> Result<Trace, String> {
    let o = Opts::parse(spec, rest, &["pages", "loops"])?;
    let pages: u64 = o.num("pages", None)?;
    let loops: u64 = o.num("loops", Some(1))?;
    let mut b = Builder::new(spec.to_string());
    b.direct(pages);
    for _ in 0..loops {
        for p in 0..pages {
            b.push(p, false);
        }
    }
    b.finish(spec)
}

/// Splits `PATH[,key=value...]`; a path may itself contain commas when no
/// option follows.
fn path_and_opts<'a>(
    spec: &'a str,
    rest: &'a str,
    allowed: &[&str],
) -> Result<(&'a str, Opts<'a>), String> {
    let mut path = rest;
    let mut opts = "";
    if let Some(i) = rest.find(',') {
        let tail = &rest[i + 1..];
        if tail.split(',').all(|kv| {
            kv.split_once('=')
                .is_some_and(|(k, _)| allowed.contains(&k.trim()))
        }) {
            path = &rest[..i];
            opts = tail;
        }
    }
    if path.is_empty() {
        return Err(format!("trace {spec:?}: no file given"));
    }
    Ok((path, Opts::parse(spec, opts, allowed)?))
}

/// Opens `path`, decompressing `.gz` files.
fn open(path: &str) -> Result<Box<dyn Read>, String> {
    let f = File::open(path).map_err(|e| format!("{path}: {e}"))?;
    if Path::new(path).extension().is_some_and(|e| e == "gz") {
        Ok(Box::new(flate2::read::MultiGzDecoder::new(BufReader::new(
            f,
        ))))
    } else {
        Ok(Box::new(f))
    }
}

/// Calls `each(line_number, line)` for every line of a text file.
fn lines(
    path: &str,
    mut each: impl FnMut(usize, &str) -> Result<(), String>,
) -> Result<(), String> {
    let mut r = BufReader::with_capacity(1 << 20, open(path)?);
    let mut line = String::new();
    let mut n = 0;
    loop {
        line.clear();
        n += 1;
        match r.read_line(&mut line) {
            Ok(0) => return Ok(()),
            Ok(_) => each(n, line.trim_end_matches(['\n', '\r']))?,
            Err(e) => return Err(format!("{path}: line {n}: {e}")),
        }
    }
}

/// Parses an unsigned integer field (decimal, or hexadecimal with `0x`).
fn field_u64(path: &str, n: usize, what: &str, s: &str) -> Result<u64, String> {
    let s = s.trim();
    let v = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => s.parse::<u64>().ok(),
    };
    v.ok_or_else(|| format!("{path}: line {n}: {what} {s:?} is not a non-negative integer"))
}

fn msr(spec: &str, rest: &str, page_size: u64) -> Result<Trace, String> {
    let (path, _) = path_and_opts(spec, rest, &[])?;
    let mut b = Builder::new(spec.to_string());
    lines(path, |n, line| {
        if line.trim().is_empty() {
            return Ok(());
        }
        let f: Vec<&str> = line.split(',').collect();
        if f.len() < 6 {
            return Err(format!(
                "{path}: line {n}: expected 7 MSR columns (Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime), found {}",
                f.len()
            ));
        }
        let disk = field_u64(path, n, "DiskNumber", f[2])?;
        let write = match f[3].trim().to_ascii_lowercase().as_str() {
            "read" => false,
            "write" => true,
            _ => {
                return Err(format!(
                    "{path}: line {n}: Type {:?} is neither Read nor Write",
                    f[3].trim()
                ));
            }
        };
        let offset = field_u64(path, n, "Offset", f[4])?;
        let size = field_u64(path, n, "Size", f[5])?;
        let first = offset / page_size;
        let last = (offset + size.max(1) - 1) / page_size;
        for p in first..=last {
            // Several disks of one host: keep their pages apart.
            b.push(disk << 48 ^ p, write);
        }
        Ok(())
    })?;
    b.finish(path)
}

/// Bytes of one oracleGeneral record.
const ORACLE_RECORD: usize = 24;

fn oracle(spec: &str, rest: &str) -> Result<Trace, String> {
    let (path, _) = path_and_opts(spec, rest, &[])?;
    let mut r = BufReader::with_capacity(1 << 20, open(path)?);
    let mut b = Builder::new(spec.to_string());
    let mut rec = [0u8; ORACLE_RECORD];
    let mut offset = 0u64;
    loop {
        let mut got = 0;
        while got < ORACLE_RECORD {
            match r.read(&mut rec[got..]) {
                Ok(0) => break,
                Ok(k) => got += k,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(format!("{path}: byte {}: {e}", offset + got as u64)),
            }
        }
        if got == 0 {
            break;
        }
        if got < ORACLE_RECORD {
            return Err(format!(
                "{path}: truncated oracleGeneral record at byte {offset}: {got} of {ORACLE_RECORD} bytes"
            ));
        }
        let id = u64::from_le_bytes(rec[4..12].try_into().expect("8 bytes"));
        b.push(id, false);
        offset += ORACLE_RECORD as u64;
    }
    b.finish(path)
}

fn csv(spec: &str, rest: &str) -> Result<Trace, String> {
    let (path, o) = path_and_opts(spec, rest, &["col", "rw", "sep", "header"])?;
    let sep = match o.raw("sep") {
        None => ',',
        Some("tab") | Some("\\t") => '\t',
        Some("space") => ' ',
        Some(s) if s.chars().count() == 1 => s.chars().next().expect("one char"),
        Some(s) => return Err(format!("trace {spec:?}: bad sep {s:?}")),
    };
    let header = matches!(o.raw("header"), Some("1" | "true" | "yes"));
    let col_spec = o.raw("col").unwrap_or("0");
    let rw_spec = o.raw("rw");
    let mut col: Option<usize> = col_spec.parse().ok();
    let mut rw: Option<usize> = rw_spec.and_then(|s| s.parse().ok());
    let mut b = Builder::new(spec.to_string());
    let split = |line: &str| -> Vec<String> {
        if sep == ' ' {
            line.split_whitespace().map(str::to_string).collect()
        } else {
            line.split(sep).map(|s| s.trim().to_string()).collect()
        }
    };
    lines(path, |n, line| {
        if line.trim().is_empty() {
            return Ok(());
        }
        let f = split(line);
        if n == 1 && (header || col.is_none() || (rw_spec.is_some() && rw.is_none())) {
            let find = |name: &str| {
                f.iter()
                    .position(|h| h.eq_ignore_ascii_case(name))
                    .ok_or_else(|| {
                        format!("{path}: line 1: no column named {name:?} in the header {line:?}")
                    })
            };
            if col.is_none() {
                col = Some(find(col_spec)?);
            }
            if let (Some(name), None) = (rw_spec, rw) {
                rw = Some(find(name)?);
            }
            return Ok(());
        }
        let c = col.expect("set from the header");
        let v = f.get(c).ok_or_else(|| {
            format!(
                "{path}: line {n}: no column {c} (the line has {} columns)",
                f.len()
            )
        })?;
        let page = field_u64(path, n, &format!("column {c}"), v)?;
        let write = match rw {
            None => false,
            Some(r) => {
                let v = f.get(r).ok_or_else(|| {
                    format!(
                        "{path}: line {n}: no column {r} (the line has {} columns)",
                        f.len()
                    )
                })?;
                match v.to_ascii_lowercase().as_str() {
                    "r" | "read" | "0" | "get" => false,
                    "w" | "write" | "1" | "set" | "put" => true,
                    other => {
                        return Err(format!(
                            "{path}: line {n}: operation {other:?} is neither a read (R, Read, 0) nor a write (W, Write, 1)"
                        ));
                    }
                }
            }
        };
        b.push(page, write);
        Ok(())
    })?;
    b.finish(path)
}

fn text(spec: &str, rest: &str) -> Result<Trace, String> {
    let (path, _) = path_and_opts(spec, rest, &[])?;
    let mut b = Builder::new(spec.to_string());
    lines(path, |n, line| {
        let t = line.trim();
        if t.is_empty() || t == "*" || t.starts_with('#') {
            return Ok(());
        }
        // A page number, optionally followed by R or W.
        let mut it = t.split_whitespace();
        let page = field_u64(path, n, "page", it.next().unwrap_or(""))?;
        let write = match it.next().map(|s| s.to_ascii_lowercase()) {
            None => false,
            Some(s) if s == "r" || s == "read" => false,
            Some(s) if s == "w" || s == "write" => true,
            Some(s) => {
                return Err(format!(
                    "{path}: line {n}: expected a page number and optionally R or W, found {s:?} after the page"
                ));
            }
        };
        b.push(page, write);
        Ok(())
    })?;
    b.finish(path)
}
