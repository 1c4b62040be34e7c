//! Traces: where they come from (a spec such as `ycsb:records=30000000,ops=30000000`
//! or `msr:/path/hm_0.csv`) and how they are held (one dense page id per
//! request, reads and writes told apart).

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

mod bz2;

use super::show_bytes;
use super::ycsb::{Rng, YCSB_MAX_RECORDS, YCSB_THETA, YcsbKeys, Zipfian};

#[cfg(test)]
mod prop_tests;

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
    /// Bit `i` set when access `i` is the first page of a request of a
    /// block trace (empty: every access is a request of its own).
    starts: Vec<u64>,
    /// For a block trace, each access's time: microseconds since the first
    /// request (empty when the trace has no times).
    pub times: Vec<u64>,
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

    /// Whether access `i` starts a request (the first page of a block
    /// trace's request; any access of other traces).
    pub fn starts_request(&self, i: usize) -> bool {
        self.starts.is_empty()
            || self
                .starts
                .get(i / 64)
                .is_some_and(|w| w >> (i % 64) & 1 != 0)
    }

    /// The bytes the trace holds (its page ids, its write bits and its
    /// times).
    pub fn bytes(&self) -> u64 {
        (self.pages.capacity() as u64)
            .saturating_mul(4)
            .saturating_add((self.writes.capacity() as u64).saturating_mul(8))
            .saturating_add((self.times.capacity() as u64).saturating_mul(8))
    }

    /// The trace restricted to its reads (`writes == false`) or its writes,
    /// with the dense ids renumbered.
    ///
    /// # Errors
    ///
    /// When the memory for the new trace cannot be had.
    pub fn only(&self, writes: bool) -> Result<Trace, String> {
        let mut b = Builder::new(format!(
            "{} ({})",
            self.name,
            if writes { "writes" } else { "reads" }
        ));
        let n = if writes {
            self.n_writes
        } else {
            self.len() as u64 - self.n_writes
        };
        b.reserve(n)?;
        b.direct(self.footprint as u64);
        for (i, &p) in self.pages.iter().enumerate() {
            if self.is_write(i) == writes {
                b.push(u64::from(p), writes)?;
            }
        }
        Ok(b.finish_unchecked())
    }

    /// A trace of the raw page numbers `pages`, all reads (for tests and
    /// library users). It ends early, at the first page that does not fit
    /// (more than `u32::MAX - 1` distinct pages, or no memory left).
    pub fn from_pages(name: &str, pages: impl IntoIterator<Item = u64>) -> Trace {
        let mut b = Builder::new(name.to_string());
        for p in pages {
            if b.push(p, false).is_err() {
                break;
            }
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
    /// The bytes the map may take while it grows (old and new table): what
    /// the trace's limit leaves beside the trace's own vectors.
    limit: u64,
}

const EMPTY: u64 = u64::MAX;

impl DenseMap {
    fn new(limit: u64) -> DenseMap {
        DenseMap {
            keys: vec![EMPTY; 1 << 10],
            vals: vec![0; 1 << 10],
            shift: 64 - 10,
            len: 0,
            max_key: None,
            limit,
        }
    }

    #[inline]
    fn slot(&self, k: u64) -> usize {
        (k.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> self.shift) as usize
    }

    /// The id of `k`, inserting `next` when absent; `None` when the map is
    /// full and cannot grow (no memory).
    #[inline]
    fn get_or_insert(&mut self, k: u64, next: u32) -> Option<u32> {
        if k == EMPTY {
            return Some(*self.max_key.get_or_insert(next));
        }
        let mask = self.keys.len() - 1;
        let mut i = self.slot(k);
        loop {
            let key = self.keys[i];
            if key == k {
                return Some(self.vals[i]);
            }
            if key == EMPTY {
                if (self.len + 1) * 2 > self.keys.len() && !self.grow() {
                    return None;
                }
                return Some(self.insert_new(k, next));
            }
            i = (i + 1) & mask;
        }
    }

    /// Inserts `k`, known to be absent, with id `v`.
    fn insert_new(&mut self, k: u64, v: u32) -> u32 {
        let mask = self.keys.len() - 1;
        let mut i = self.slot(k);
        while self.keys[i] != EMPTY {
            i = (i + 1) & mask;
        }
        self.keys[i] = k;
        self.vals[i] = v;
        self.len += 1;
        v
    }

    /// The bytes the map holds.
    fn bytes(&self) -> u64 {
        (self.keys.len() as u64).saturating_mul(12)
    }

    /// The bytes the map would hold after growing.
    fn grown_bytes(&self) -> u64 {
        (self.keys.len() as u64).saturating_mul(2 * 12)
    }

    /// Doubles the table; false, the map unchanged, when the old and the
    /// new table together would pass the limit or the memory cannot be had.
    #[cold]
    fn grow(&mut self) -> bool {
        if self.bytes().saturating_add(self.grown_bytes()) > self.limit {
            return false;
        }
        let n = self.keys.len() * 2;
        let mut new_keys: Vec<u64> = Vec::new();
        let mut new_vals: Vec<u32> = Vec::new();
        if new_keys.try_reserve_exact(n).is_err() || new_vals.try_reserve_exact(n).is_err() {
            return false;
        }
        new_keys.resize(n, EMPTY);
        new_vals.resize(n, 0);
        let keys = std::mem::replace(&mut self.keys, new_keys);
        let vals = std::mem::replace(&mut self.vals, new_vals);
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
        true
    }
}

/// Builds a [`Trace`] from raw page numbers.
///
/// The requests are held in vectors grown with fallible allocation and kept
/// within [`memory_limit`](super::memory_limit): a trace too large for this
/// machine is refused with an error, never aborted on.
#[derive(Debug)]
pub struct Builder {
    trace: Trace,
    map: DenseMap,
    /// When raw pages are known to be below some bound: id by raw page.
    direct: Option<Vec<u32>>,
    /// Requests announced with [`Builder::reserve`].
    expected: u64,
    /// The memory the trace may take.
    limit: u64,
    /// A request begun with [`Builder::begin_request`] whose first page is
    /// not pushed yet, and its time.
    request: Option<Option<u64>>,
    /// The first request's time, in microseconds.
    t0: Option<u64>,
}

const NO_ID: u32 = u32::MAX;

/// The most distinct pages a trace may have (dense ids are `u32`, one value
/// reserved).
pub const MAX_FOOTPRINT: u64 = NO_ID as u64 - 1;

/// The bytes `requests` requests take in a [`Trace`]: a 4-byte page id and
/// a write bit each.
pub fn request_bytes(requests: u64) -> u64 {
    requests.saturating_mul(33) / 8
}

impl Builder {
    /// An empty trace named `name`.
    pub fn new(name: String) -> Builder {
        Builder::with_limit(name, super::memory_limit())
    }

    /// An empty trace that may take `limit` bytes.
    pub(crate) fn with_limit(name: String, limit: u64) -> Builder {
        Builder {
            trace: Trace {
                name,
                ..Trace::default()
            },
            map: DenseMap::new(limit),
            direct: None,
            expected: 0,
            limit,
            request: None,
            t0: None,
        }
    }

    /// The next page pushed starts a request of a block trace, made at
    /// `time_us` microseconds on the trace's clock if it has one; the pages
    /// pushed until the next call belong to it. A trace whose requests all
    /// have times gets [`Trace::times`].
    pub fn begin_request(&mut self, time_us: Option<u64>) {
        self.request = Some(time_us);
    }

    /// Makes room for `requests` requests up front.
    ///
    /// # Errors
    ///
    /// When they would take more memory than this machine allows, or the
    /// memory cannot be had.
    pub fn reserve(&mut self, requests: u64) -> Result<(), String> {
        // The trace and its table of distinct pages share the limit.
        let need = self.bytes_for(requests).saturating_add(self.map.bytes());
        if need > self.limit {
            return Err(format!(
                "{requests} requests would take {} of memory, more than the {} this machine allows",
                show_bytes(need),
                show_bytes(self.limit)
            ));
        }
        let n = usize::try_from(requests).map_err(|_| format!("{requests} requests"))?;
        let cannot = |e| {
            format!(
                "cannot allocate {} for {requests} requests: {e}",
                show_bytes(need)
            )
        };
        let pages = &mut self.trace.pages;
        pages
            .try_reserve_exact(n.saturating_sub(pages.len()))
            .map_err(cannot)?;
        let words = pages.capacity().div_ceil(64);
        let writes = &mut self.trace.writes;
        writes
            .try_reserve_exact(words.saturating_sub(writes.len()))
            .map_err(cannot)?;
        let times = &mut self.trace.times;
        if !times.is_empty() {
            times
                .try_reserve_exact(n.saturating_sub(times.len()))
                .map_err(cannot)?;
        }
        self.expected = self.expected.max(requests);
        self.map.limit = self.limit.saturating_sub(self.trace.bytes());
        Ok(())
    }

    /// The bytes the trace and its table of distinct pages hold now.
    #[cfg(test)]
    pub(crate) fn held(&self) -> u64 {
        self.trace.bytes() + self.map.bytes()
    }

    /// The bytes `requests` accesses take: [`request_bytes`], and 8 more
    /// each while the trace keeps times.
    fn bytes_for(&self, requests: u64) -> u64 {
        let times = if self.trace.times.is_empty() { 0 } else { 8 };
        request_bytes(requests).saturating_add(requests.saturating_mul(times))
    }

    /// Raw pages will all be below `n`: map them with a table rather than a
    /// hash when the table is not much larger than the trace announced with
    /// [`Builder::reserve`] and its memory can be had (either way the ids
    /// are the same).
    pub fn direct(&mut self, n: u64) {
        let table = n.saturating_mul(4);
        let cheap = n <= self.expected.saturating_mul(2).max(1 << 20);
        if !cheap || table.saturating_add(request_bytes(self.expected)) > self.limit {
            return;
        }
        let Ok(n) = usize::try_from(n) else {
            return;
        };
        let mut t: Vec<u32> = Vec::new();
        if t.try_reserve_exact(n).is_ok() {
            t.resize(n, NO_ID);
            self.direct = Some(t);
        }
    }

    /// Appends a request of raw page `page`.
    ///
    /// # Errors
    ///
    /// When the trace would have more than [`MAX_FOOTPRINT`] distinct pages
    /// or need more memory than this machine allows; the builder should then
    /// be dropped.
    #[inline]
    pub fn push(&mut self, page: u64, write: bool) -> Result<(), String> {
        let next = self.trace.footprint as u32;
        let id = match &mut self.direct {
            Some(table) => {
                let e = &mut table[page as usize];
                if *e == NO_ID {
                    *e = next;
                }
                *e
            }
            None => self.map.get_or_insert(page, next).ok_or_else(|| {
                format!(
                    "the table of {} distinct pages cannot grow to {} of memory",
                    self.trace.footprint,
                    show_bytes(self.map.grown_bytes())
                )
            })?,
        };
        if id == next {
            if u64::from(next) == MAX_FOOTPRINT {
                return Err(format!("more than {MAX_FOOTPRINT} distinct pages"));
            }
            self.trace.footprint += 1;
        }
        let i = self.trace.pages.len();
        if i == self.trace.pages.capacity() {
            self.grow()?;
        }
        if i.is_multiple_of(64) {
            self.trace.writes.push(0);
        }
        if write {
            self.trace.writes[i / 64] |= 1 << (i % 64);
            self.trace.n_writes += 1;
        }
        self.trace.pages.push(id);
        self.note_request(i)
    }

    /// Records where requests start and, while every request has one, the
    /// time of access `i`.
    fn note_request(&mut self, i: usize) -> Result<(), String> {
        let cannot = |e| format!("cannot allocate the trace's request marks: {e}");
        let begun = self.request.take();
        if begun.is_some() || !self.trace.starts.is_empty() {
            if self.trace.starts.len() <= i / 64 {
                // Accesses before the first request began were requests each.
                let fill = if self.trace.starts.is_empty() {
                    u64::MAX
                } else {
                    0
                };
                let words = i / 64 + 1 - self.trace.starts.len();
                self.trace.starts.try_reserve(words).map_err(cannot)?;
                self.trace.starts.resize(i / 64 + 1, fill);
                if fill == u64::MAX {
                    // Bits from `i` on are set below as requests begin.
                    self.trace.starts[i / 64] &= (1 << (i % 64)) - 1;
                }
            }
            if begun.is_some() {
                self.trace.starts[i / 64] |= 1 << (i % 64);
            }
        }
        match begun {
            Some(Some(t)) if self.trace.times.len() == i => {
                let t0 = *self.t0.get_or_insert(t);
                self.trace.times.try_reserve(1).map_err(cannot)?;
                self.trace.times.push(t.saturating_sub(t0));
            }
            None if !self.trace.times.is_empty() && self.trace.times.len() == i => {
                let last = self.trace.times[i - 1];
                self.trace.times.try_reserve(1).map_err(cannot)?;
                self.trace.times.push(last);
            }
            // A request without a time (or accesses before the first one
            // with a time): the trace has no times.
            _ => {
                if !self.trace.times.is_empty() {
                    self.trace.times = Vec::new();
                }
            }
        }
        Ok(())
    }

    /// Doubles the room for requests, within the memory limit.
    #[cold]
    fn grow(&mut self) -> Result<(), String> {
        let len = self.trace.pages.len() as u64;
        let bits = if self.trace.times.is_empty() {
            33
        } else {
            33 + 64
        };
        let most = self.limit.saturating_sub(self.map.bytes()) / bits * 8;
        if len >= most {
            return Err(format!(
                "more than {len} requests would take more than the {} of memory this machine allows",
                show_bytes(self.limit)
            ));
        }
        let expected = self.expected;
        self.reserve(len.saturating_add(len.max(1 << 12)).min(most))?;
        self.expected = expected;
        Ok(())
    }

    /// The trace, or an error when it is empty; `what` names the source in
    /// the message.
    pub fn finish(self, what: &str) -> Result<Trace, String> {
        if self.trace.pages.is_empty() {
            return Err(format!("{what}: the trace is empty (no request)"));
        }
        Ok(self.finish_unchecked())
    }

    fn finish_unchecked(mut self) -> Trace {
        self.trace.pages.shrink_to_fit();
        self.trace.writes.shrink_to_fit();
        if self.trace.times.len() != self.trace.pages.len() {
            self.trace.times = Vec::new();
        }
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
                return Err(match allowed {
                    [] => format!("trace {spec:?}: unknown option {k:?} (this kind takes none)"),
                    _ => format!(
                        "trace {spec:?}: unknown option {k:?} (expected {})",
                        allowed.join(", ")
                    ),
                });
            }
            if pairs.iter().any(|p: &(&str, &str)| p.0 == k) {
                return Err(format!("trace {spec:?}: option {k:?} given twice"));
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
pub const KINDS: &str = "ycsb, zipf, uniform, scan, msr, systor, cbs, oracle, csv, text";

/// The options a `csv:` trace takes after its path.
const CSV_OPTS: &[&str] = &["col", "rw", "sep", "header"];

/// The file a trace spec reads, for the kinds read from files (`None` for a
/// generated trace, or a spec that names no file): what a command must not
/// write its results over.
pub fn file_of(spec: &str) -> Option<&str> {
    let (kind, rest) = spec.split_once(':')?;
    let allowed: &[&str] = match kind.trim().to_ascii_lowercase().as_str() {
        "msr" | "systor" | "cbs" | "oracle" | "text" => &[],
        "csv" => CSV_OPTS,
        _ => return None,
    };
    path_and_opts(spec, rest, allowed).ok().map(|(p, _)| p)
}

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
        "systor" => systor(spec, rest, page_size),
        "cbs" => cbs(spec, rest, page_size),
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
/// small cache does not hold it). docs/performance.md gives the calibration
/// (the hit-ratio simulator).
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
    if records > YCSB_MAX_RECORDS {
        return Err(format!(
            "trace {spec:?}: records={records} is above the limit of {YCSB_MAX_RECORDS} \
             (YCSB numbers its keys with a Java long)"
        ));
    }
    if ops == 0 {
        return Err(format!(
            "trace {spec:?}: ops must be positive (the trace would be empty)"
        ));
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
    let leaves = layout.leaves(records);
    // Leaves, then the internal pages above them.
    let page_bound = leaves
        .checked_add((leaves - 1) / layout.fanout)
        .and_then(|n| n.checked_add(1))
        .ok_or_else(|| {
            format!(
                "trace {spec:?}: records={records} makes more pages than 64-bit page numbers can name"
            )
        })?;
    let mut b = Builder::new(spec.to_string());
    // Each lookup reads its leaf, and its internal page with probability
    // `internal`.
    let expected = ops.saturating_add((ops as f64 * layout.internal).ceil() as u64);
    b.reserve(expected)
        .map_err(|e| format!("trace {spec:?}: ops={ops}: {e}"))?;
    b.direct(page_bound);
    let keys = YcsbKeys::new(records, theta);
    let mut rng = Rng::new(seed);
    let full = |e| format!("trace {spec:?}: {e}");
    for _ in 0..ops {
        let leaf = layout.leaf(keys.next(&mut rng));
        if layout.internal > 0.0 && rng.next_f64() < layout.internal {
            b.push(layout.internal_page(leaf, leaves), false)
                .map_err(full)?;
        }
        b.push(leaf, false).map_err(full)?;
    }
    b.finish(spec)
}

/// Checks the `pages` of a generator and its count `key=count` (ops, or
/// loops over the pages), and makes room for `requests` requests.
fn generated(
    spec: &str,
    pages: u64,
    key: &str,
    count: u64,
    requests: u64,
) -> Result<Builder, String> {
    for (k, v) in [("pages", pages), (key, count)] {
        if v == 0 {
            return Err(format!(
                "trace {spec:?}: {k} must be positive (the trace would be empty)"
            ));
        }
    }
    let mut b = Builder::new(spec.to_string());
    b.reserve(requests).map_err(|e| {
        let what = if key == "ops" {
            format!("ops={count}")
        } else {
            format!("pages={pages} times {key}={count}")
        };
        format!("trace {spec:?}: {what}: {e}")
    })?;
    b.direct(pages);
    Ok(b)
}

fn zipf(spec: &str, rest: &str) -> Result<Trace, String> {
    let o = Opts::parse(spec, rest, &["pages", "ops", "theta", "seed"])?;
    let pages: u64 = o.num("pages", None)?;
    let ops: u64 = o.num("ops", None)?;
    let theta: f64 = o.num("theta", None)?;
    let seed: u64 = o.num("seed", Some(1))?;
    if !(theta >= 0.0 && theta.is_finite()) {
        return Err(format!(
            "trace {spec:?}: theta must be a finite number >= 0, not {theta}"
        ));
    }
    let mut b = generated(spec, pages, "ops", ops, ops)?;
    let mut rng = Rng::new(seed);
    let full = |e| format!("trace {spec:?}: {e}");
    if theta < 1.0 {
        let z = Zipfian::new(0, pages - 1, theta, None);
        for _ in 0..ops {
            b.push(z.next(&mut rng).min(pages - 1), false)
                .map_err(full)?;
        }
    } else {
        // Gray's method needs theta < 1: invert the CDF by binary search.
        let need = pages.saturating_mul(8);
        let limit = super::memory_limit();
        let too_big = || {
            format!(
                "trace {spec:?}: pages={pages} with theta >= 1 needs a table of {} \
                 (8 bytes a page) besides the trace; this machine allows {}",
                show_bytes(need),
                show_bytes(limit)
            )
        };
        if need.saturating_add(request_bytes(ops)) > limit {
            return Err(too_big());
        }
        let mut cdf: Vec<f64> = Vec::new();
        usize::try_from(pages)
            .ok()
            .and_then(|n| cdf.try_reserve_exact(n).ok())
            .ok_or_else(too_big)?;
        let mut sum = 0.0;
        for i in 1..=pages {
            sum += 1.0 / (i as f64).powf(theta);
            cdf.push(sum);
        }
        for _ in 0..ops {
            let u = rng.next_f64() * sum;
            let i = cdf.partition_point(|&c| c <= u) as u64;
            b.push(i.min(pages - 1), false).map_err(full)?;
        }
    }
    b.finish(spec)
}

fn uniform(spec: &str, rest: &str) -> Result<Trace, String> {
    let o = Opts::parse(spec, rest, &["pages", "ops", "seed"])?;
    let pages: u64 = o.num("pages", None)?;
    let ops: u64 = o.num("ops", None)?;
    let seed: u64 = o.num("seed", Some(1))?;
    let mut b = generated(spec, pages, "ops", ops, ops)?;
    let mut rng = Rng::new(seed);
    for _ in 0..ops {
        b.push(rng.below(pages), false)
            .map_err(|e| format!("trace {spec:?}: {e}"))?;
    }
    b.finish(spec)
}

fn scan(spec: &str, rest: &str) -> Result<Trace, String> {
    let o = Opts::parse(spec, rest, &["pages", "loops"])?;
    let pages: u64 = o.num("pages", None)?;
    let loops: u64 = o.num("loops", Some(1))?;
    if pages > MAX_FOOTPRINT {
        return Err(format!(
            "trace {spec:?}: pages={pages} is above the limit of {MAX_FOOTPRINT} distinct pages"
        ));
    }
    let requests = pages.checked_mul(loops).ok_or_else(|| {
        format!("trace {spec:?}: pages={pages} times loops={loops} overflows a 64-bit count")
    })?;
    let mut b = generated(spec, pages, "loops", loops, requests)?;
    for _ in 0..loops {
        for p in 0..pages {
            b.push(p, false)
                .map_err(|e| format!("trace {spec:?}: {e}"))?;
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
    // Options follow the path after a comma, unless the whole of `rest`
    // names a file (whose name holds a comma). A tail of key=value items
    // is options, known or not: an unknown key is refused by name rather
    // than making the whole spec a file name that does not exist.
    if let Some(i) = rest.find(',')
        && !Path::new(rest).exists()
    {
        let tail = &rest[i + 1..];
        // Empty items (a trailing comma) are no file name's either.
        if tail
            .split(',')
            .filter(|kv| !kv.is_empty())
            .all(|kv| kv.contains('='))
        {
            path = &rest[..i];
            opts = tail;
        }
    }
    if path.is_empty() {
        return Err(format!("trace {spec:?}: no file given"));
    }
    Ok((path, Opts::parse(spec, opts, allowed)?))
}

/// The error for a file compressed as `name` (undone by `how`), which the
/// simulator does not read.
fn unread(path: &str, name: &str, how: &str) -> String {
    format!(
        "{path}: the file is {name}-compressed, which the simulator does not read: decompress \
         it first ({how}); .gz and .bz2 files are read as they are"
    )
}

/// Opens text trace `path`, decompressing gzip and bzip2 files (known by
/// their first bytes, else by the name). A file in a compressed format the
/// simulator does not read (zstd, xz) is refused, not read as records.
fn open(path: &str) -> Result<Box<dyn Read>, String> {
    open_as(path, true)
}

/// Opens binary trace `path`, decompressing `.gz` and `.bz2` files, known
/// by their name alone: a record's first bytes may be anything, a
/// compressor's magic included.
fn open_binary(path: &str) -> Result<Box<dyn Read>, String> {
    open_as(path, false)
}

/// [`open`] (`sniff`: the first bytes tell the format), or [`open_binary`].
fn open_as(path: &str, sniff: bool) -> Result<Box<dyn Read>, String> {
    let ext = Path::new(path).extension();
    let named = |x: &str| ext.is_some_and(|e| e == x);
    let f = File::open(path).map_err(|e| format!("{path}: {e}"))?;
    if !sniff {
        return if named("gz") {
            Ok(gzip_of(f))
        } else if named("bz2") {
            Ok(bzip2_of(f))
        } else if named("zst") {
            Err(unread(path, "zstd", "zstd -d"))
        } else if named("xz") {
            Err(unread(path, "xz", "xz -d"))
        } else {
            Ok(Box::new(f))
        };
    }
    let mut f = f;
    // The first bytes, read ahead and put back in front (no seek: a pipe,
    // `/dev/stdin`, a process substitution cannot).
    let mut head = Vec::with_capacity(6);
    (&mut f)
        .take(6)
        .read_to_end(&mut head)
        .map_err(|e| format!("{path}: {e}"))?;
    let format = match head[..] {
        [0x28, 0xb5, 0x2f, 0xfd, ..] => Some(("zstd", "zstd -d")),
        [0xfd, b'7', b'z', b'X', b'Z', 0] => Some(("xz", "xz -d")),
        _ => None,
    };
    if let Some((name, how)) = format {
        return Err(unread(path, name, how));
    }
    // Known by their first bytes, as zstd and xz are, whatever the name:
    // gzip's magic, and bzip2's `BZh` and a level digit (plain text that
    // starts so is taken for bzip2, and its decoder refuses it).
    // The first bytes win over the name (bzip2 data named `.gz` is bzip2).
    let gzip = head.starts_with(&[0x1f, 0x8b]);
    let bzip2 = head.len() >= 4 && head.starts_with(b"BZh") && (b'1'..=b'9').contains(&head[3]);
    let f = std::io::Cursor::new(head).chain(f);
    if gzip || (!bzip2 && named("gz")) {
        Ok(gzip_of(f))
    } else if bzip2 || named("bz2") {
        Ok(bzip2_of(f))
    } else {
        Ok(Box::new(f))
    }
}

/// The decompressed bytes of gzip data `r` (its members one after another).
fn gzip_of(r: impl Read + 'static) -> Box<dyn Read> {
    let d = flate2::read::MultiGzDecoder::new(BufReader::new(r));
    Box::new(Unpacking {
        inner: d,
        format: "gzip",
    })
}

/// The decompressed bytes of bzip2 data `r` (its streams one after another).
fn bzip2_of(r: impl Read + 'static) -> Box<dyn Read> {
    Box::new(Unpacking {
        inner: bz2::MultiBz2::new(r),
        format: "bzip2",
    })
}

/// A decompressor whose errors name its format: "line 7: corrupt deflate
/// stream" alone does not say that the file's compressed bytes are at fault.
struct Unpacking<R> {
    inner: R,
    format: &'static str,
}

impl<R: Read> Read for Unpacking<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.inner.read(buf).map_err(|e| {
            std::io::Error::new(
                e.kind(),
                format!("its {} data cannot be decompressed: {e}", self.format),
            )
        })
    }
}

/// The longest line a text trace may have: a record of any format read
/// here is a few dozen bytes, so a longer line is not a trace (and is not
/// read into memory whole).
const MAX_LINE: u64 = 64 << 10;

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
        match (&mut r).take(MAX_LINE + 1).read_line(&mut line) {
            Ok(0) => return Ok(()),
            Ok(k) if k as u64 > MAX_LINE => {
                return Err(format!(
                    "{path}: line {n} is longer than {} KiB: not a trace of this format",
                    MAX_LINE >> 10
                ));
            }
            Ok(_) => {
                let mut l = line.trim_end_matches(['\n', '\r']);
                if n == 1 {
                    // A byte-order mark (spreadsheet exports write one)
                    // is not part of the first field.
                    l = l.strip_prefix('\u{feff}').unwrap_or(l);
                }
                each(n, l)?
            }
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

/// The largest Size an MSR line may give: 256 times the largest request of
/// the MSR Cambridge sample (64 KiB). One line becomes a request per page it
/// covers, so without a bound a line of 40 bytes could ask for 2^52 of them.
pub const MSR_MAX_SIZE: u64 = 16 << 20;

fn msr(spec: &str, rest: &str, page_size: u64) -> Result<Trace, String> {
    // ResponseTime, the 7th column, is not used and may be left out.
    let layout =
        "6 or 7 MSR columns (Timestamp,Hostname,DiskNumber,Type,Offset,Size[,ResponseTime])";
    block_trace(spec, rest, page_size, 6..=7, layout, None, |path, n, f| {
        // Several disks of one host: kept apart.
        let dev = field_u64(path, n, "DiskNumber", f[2])?;
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
        Ok(BlockRequest {
            dev,
            write,
            offset: field_u64(path, n, "Offset", f[4])?,
            size: field_u64(path, n, "Size", f[5])?,
            // Windows file time: ticks of 100 ns.
            time_us: Some(field_u64(path, n, "Timestamp", f[0])? / 10),
        })
    })
}

/// One request of a block trace: `size` bytes at byte `offset` of device
/// `dev`.
struct BlockRequest {
    dev: u64,
    write: bool,
    offset: u64,
    size: u64,
    /// When it was made, in microseconds on the trace's clock, if the
    /// timestamp parses.
    time_us: Option<u64>,
}

/// Reads a block trace of comma-separated lines (blank lines skipped, and
/// the first other line if it starts with `header`, when given): each line must have a
/// number of fields in `columns` (else an error saying "expected {layout}"),
/// and `parse(path, line_number, fields)` makes it a request, which becomes
/// one page request for every page of `page_size` bytes it touches (a
/// request of no bytes touches the page at its offset). Devices are kept
/// apart by `dev << 48` (devices below 2^16, pages below 2^48; others are
/// refused).
fn block_trace(
    spec: &str,
    rest: &str,
    page_size: u64,
    columns: std::ops::RangeInclusive<usize>,
    layout: &str,
    header: Option<&str>,
    parse: impl Fn(&str, usize, &[&str]) -> Result<BlockRequest, String>,
) -> Result<Trace, String> {
    let (path, _) = path_and_opts(spec, rest, &[])?;
    if page_size == 0 {
        return Err(format!("trace {spec:?}: the page size must be positive"));
    }
    let mut b = Builder::new(spec.to_string());
    // The header, if the format has one, is the first line that is not blank.
    let mut first = true;
    lines(path, |n, line| {
        let t = line.trim();
        if t.is_empty() {
            return Ok(());
        }
        if std::mem::take(&mut first) && header.is_some_and(|h| t.starts_with(h)) {
            return Ok(());
        }
        let f: Vec<&str> = t.split(',').collect();
        if !columns.contains(&f.len()) {
            return Err(format!(
                "{path}: line {n}: expected {layout}, found {}",
                f.len()
            ));
        }
        let BlockRequest {
            dev,
            write,
            offset,
            size,
            time_us,
        } = parse(path, n, &f)?;
        if size > MSR_MAX_SIZE {
            return Err(format!(
                "{path}: line {n}: Size {size} is above the largest accepted ({MSR_MAX_SIZE} bytes)"
            ));
        }
        let end = offset.checked_add(size.max(1) - 1).ok_or_else(|| {
            format!("{path}: line {n}: Offset {offset} + Size {size} is past 2^64 bytes")
        })?;
        // A device's pages are told apart from another's by the high 16
        // bits: past either bound two devices' pages would share numbers.
        if dev >= 1 << 16 {
            return Err(format!(
                "{path}: line {n}: device {dev} is past the largest the simulator tells apart ({})",
                (1u64 << 16) - 1
            ));
        }
        if end / page_size >= 1 << 48 {
            return Err(format!(
                "{path}: line {n}: Offset {offset} + Size {size} reaches page {} of {page_size} bytes, past the 2^48 pages a device may have here",
                end / page_size
            ));
        }
        b.begin_request(time_us);
        for p in offset / page_size..=end / page_size {
            b.push(dev << 48 | p, write)
                .map_err(|e| format!("{path}: line {n}: {e}"))?;
        }
        Ok(())
    })?;
    b.finish(path)
}

/// The SYSTOR '17 traces: a header line, then
/// `Timestamp,Response,IOType,LUN,Offset,Size` with IOType `R` or `W` and
/// offsets and sizes in bytes.
fn systor(spec: &str, rest: &str, page_size: u64) -> Result<Trace, String> {
    let layout = "6 SYSTOR columns (Timestamp,Response,IOType,LUN,Offset,Size)";
    block_trace(
        spec,
        rest,
        page_size,
        6..=6,
        layout,
        Some("Timestamp"),
        |path, n, f| {
            let write = match f[2].trim() {
                "R" | "r" => false,
                "W" | "w" => true,
                other => {
                    return Err(format!(
                        "{path}: line {n}: IOType {other:?} is neither R nor W"
                    ));
                }
            };
            Ok(BlockRequest {
                dev: field_u64(path, n, "LUN", f[3])?,
                write,
                offset: field_u64(path, n, "Offset", f[4])?,
                size: field_u64(path, n, "Size", f[5])?,
                time_us: Some(seconds_us(path, n, f[0])?),
            })
        },
    )
}

/// Line `n`'s timestamp `text`, in seconds (an integer or a decimal), as
/// microseconds. A bad one is refused: taken for "no time", it would drop
/// every time of the trace, and a replay at its timing would then blame the
/// trace's format.
fn seconds_us(path: &str, n: usize, text: &str) -> Result<u64, String> {
    let t = text.trim();
    match t.parse::<f64>() {
        // Past 2^64 microseconds, the cast saturates.
        Ok(s) if s.is_finite() && s >= 0.0 => Ok((s * 1e6).round() as u64),
        _ => Err(format!(
            "{path}: line {n}: Timestamp {t:?} is not a number of seconds"
        )),
    }
}

/// The Tencent CBS traces (often `.bz2`): no header, then
/// `Timestamp,Offset,Size,IOType,VolumeID` with offsets and sizes in 512-byte
/// sectors and IOType 0 for a read, 1 for a write.
fn cbs(spec: &str, rest: &str, page_size: u64) -> Result<Trace, String> {
    let layout = "5 Tencent CBS columns (Timestamp,Offset,Size,IOType,VolumeID)";
    block_trace(spec, rest, page_size, 5..=5, layout, None, |path, n, f| {
        let sectors = |what: &str, v: &str| -> Result<u64, String> {
            field_u64(path, n, what, v)?
                .checked_mul(512)
                .ok_or_else(|| format!("{path}: line {n}: {what} {v:?} sectors is past 2^64 bytes"))
        };
        let write = match f[3].trim() {
            "0" => false,
            "1" => true,
            other => {
                return Err(format!(
                    "{path}: line {n}: IOType {other:?} is neither 0 (read) nor 1 (write)"
                ));
            }
        };
        Ok(BlockRequest {
            dev: field_u64(path, n, "VolumeID", f[4])?,
            write,
            offset: sectors("Offset", f[1])?,
            size: sectors("Size", f[2])?,
            time_us: Some(seconds_us(path, n, f[0])?),
        })
    })
}

/// Bytes of one oracleGeneral record.
const ORACLE_RECORD: usize = 24;

fn oracle(spec: &str, rest: &str) -> Result<Trace, String> {
    let (path, _) = path_and_opts(spec, rest, &[])?;
    let mut r = BufReader::with_capacity(1 << 20, open_binary(path)?);
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
        b.push(id, false)
            .map_err(|e| format!("{path}: record at byte {offset}: {e}"))?;
        offset += ORACLE_RECORD as u64;
    }
    b.finish(path)
}

fn csv(spec: &str, rest: &str) -> Result<Trace, String> {
    let (path, o) = path_and_opts(spec, rest, CSV_OPTS)?;
    let sep = match o.raw("sep") {
        None => ',',
        Some("tab") | Some("\\t") => '\t',
        Some("space") => ' ',
        Some("comma") => ',',
        Some(s) if s.chars().count() == 1 => s.chars().next().expect("one char"),
        Some(s) => return Err(format!("trace {spec:?}: bad sep {s:?}")),
    };
    let header = match o.raw("header") {
        None | Some("0" | "false" | "no") => false,
        Some("1" | "true" | "yes") => true,
        Some(v) => {
            return Err(format!(
                "trace {spec:?}: header={v:?}: give 1 (the first line names the columns) or 0"
            ));
        }
    };
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
    // The header, when there is one, is the first line that is not blank.
    let mut first = true;
    lines(path, |n, line| {
        if line.trim().is_empty() {
            return Ok(());
        }
        let f = split(line);
        let at_top = std::mem::take(&mut first);
        if at_top && (header || col.is_none() || (rw_spec.is_some() && rw.is_none())) {
            // A name the header gives twice says nothing of which is meant.
            let find = |name: &str| {
                let mut at = f
                    .iter()
                    .enumerate()
                    .filter(|(_, h)| h.eq_ignore_ascii_case(name))
                    .map(|(i, _)| i);
                match (at.next(), at.next()) {
                    (Some(i), None) => Ok(i),
                    (Some(i), Some(j)) => Err(format!(
                        "{path}: line {n}: the header {line:?} names {name:?} twice (columns {i} \
                         and {j}): give the column's number"
                    )),
                    (None, _) => Err(format!(
                        "{path}: line {n}: no column named {name:?} in the header {line:?}"
                    )),
                }
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
        b.push(page, write)
            .map_err(|e| format!("{path}: line {n}: {e}"))?;
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
        if let Some(extra) = it.next() {
            return Err(format!(
                "{path}: line {n}: expected a page number and optionally R or W, found the extra word {extra:?} in {t:?}"
            ));
        }
        b.push(page, write)
            .map_err(|e| format!("{path}: line {n}: {e}"))?;
        Ok(())
    })?;
    b.finish(path)
}
