//! Command-line flags of `setcache bench` and their validation into a [`Config`].

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use setcache::LayoutKind;

use super::engine::{Engine, engine_arg};
use super::size::size_arg;
use super::workload::{Dist, Pattern};

const ABOUT: &str = "Benchmark the storage layer against Linux I/O paths, fio-style";

const LONG_ABOUT: &str = "\
Benchmark the storage layer against Linux I/O paths, fio-style.

A file named `bench` is created in a store whose device roots are DIR/dev0 .. DIR/devN-1
and prefilled with pseudo-random data (reused on later runs while DIR/bench.filled
exists and the size, layout and device count match). Every combination of engine,
thread count and hit ratio is one run; each run starts with a cold page cache.

Engines:
  direct          the storage layer without a cache; each thread keeps --iodepth
                  requests in flight on its own queue
  direct-copy     direct, reading into a pool of 4 KiB-aligned frames the size of
                  --cache-size and copying each read out to the caller's buffer
                  (each write in): the least any copying cache adds to a miss;
                  with --access ref it reads --touch bytes of each frame instead,
                  the least a cache that hands out page references adds
  linux-buffered  pread/pwrite on the backing files through the kernel page cache
  linux-direct    O_DIRECT pread/pwrite, one request at a time per thread
  mmap            loads/stores through MAP_SHARED mappings of the backing files
  setcache        the set-associative page cache over the same store; each thread
                  keeps --iodepth requests in flight on its own cached queue (with
                  --api sync: one call at a time; --access ref: page references)
  setcache-numa   the same cache in --partitions partitions, each with its own
                  worker thread; each thread keeps --iodepth requests in flight on
                  a partition queue (its home partition's pages served itself, the
                  others' by bundled messages; --compute: a task in the partition)

The Linux engines run in a child process. As root with a memory cgroup controller,
that process is confined to --cache-size plus its own memory (measured once it is
set up, just before it touches data) plus a slack of 256 KiB + 64 KiB per thread, so
the page cache cannot grow past the cache size; otherwise the bench says
`page cache unconstrained`.";

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum IoEngineArg {
    /// io_uring, falling back to psync with a notice
    Auto,
    /// io_uring only
    Uring,
    /// a pool of pread/pwrite threads per device
    Psync,
}

/// How the setcache engine's threads call it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum ApiArg {
    /// a cached queue per thread, --iodepth requests in flight
    Queue,
    /// one synchronous call at a time
    Sync,
    /// futures under a small executor, --iodepth in flight per thread
    Async,
}

/// How the setcache engine reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum AccessArg {
    /// into the request's buffer
    Copy,
    /// a page reference, --touch bytes read from it
    Ref,
}

#[derive(Args, Clone, Debug)]
#[command(about = ABOUT, long_about = LONG_ABOUT)]
pub(crate) struct BenchArgs {
    /// The flags given on the command line (clap's ids), as against those
    /// left at their defaults: a flag the run would ignore is refused when
    /// given, whatever its value.
    #[arg(skip)]
    pub(crate) given: Vec<String>,
    /// Directory for the device roots and the bench file [default: a fresh temporary
    /// directory, removed at the end]
    #[arg(long, value_name = "DIR")]
    pub(crate) dir: Option<PathBuf>,
    /// Size of the bench file (e.g. 4G, 512M, 64k)
    #[arg(long, value_name = "SIZE", default_value = "1G", value_parser = size_arg)]
    pub(crate) file_size: u64,
    /// Number of devices (directories DIR/dev0 .. DIR/devN-1)
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=256))]
    pub(crate) devices: u32,
    /// Placement of blocks on devices: stripe, rotated or hash
    #[arg(long, value_name = "LAYOUT", default_value = "stripe", value_parser = layout_arg)]
    pub(crate) layout: LayoutKind,
    /// Engines to compare, comma-separated: direct, direct-copy, linux-buffered, linux-direct, mmap, setcache, setcache-numa
    #[arg(long, value_name = "LIST", value_delimiter = ',',
          default_value = "direct,linux-buffered,linux-direct,mmap", value_parser = engine_arg)]
    pub(crate) engine: Vec<Engine>,
    /// I/O pattern: randread, randwrite, randrw, read or write (sequential: each
    /// thread walks its own region), or graphwalk: a graph store's small reads
    /// (16-80 bytes, a few of 640; mean about 57) of 64-byte node records along
    /// a walk, three steps in four to a record stored nearby, the fourth to a
    /// Zipf-drawn hub (cached engines; --bs at least 640)
    #[arg(long, value_name = "PATTERN", default_value = "randread", value_parser = Pattern::parse)]
    pub(crate) rw: Pattern,
    /// Percentage of reads in a randrw workload [default: 50]
    #[arg(long, value_name = "PCT", value_parser = clap::value_parser!(u8).range(0..=100))]
    pub(crate) rwmix_read: Option<u8>,
    /// Block size of each request: for the cached engines (setcache, setcache-numa,
    /// linux-buffered, mmap) any size from 1 byte; for the others (direct, direct-copy,
    /// linux-direct) a multiple of 512 that divides 4k or is a multiple of it
    #[arg(long, value_name = "SIZE", default_value = "4k", value_parser = size_arg)]
    pub(crate) bs: u64,
    /// Thread counts to run, comma-separated (one run per count)
    #[arg(long, value_name = "N[,N...]", value_delimiter = ',', default_value = "1",
          value_parser = count_arg)]
    pub(crate) threads: Vec<usize>,
    /// Requests in flight per thread for the asynchronous engines (direct, direct-copy,
    /// setcache, setcache-numa)
    #[arg(long, value_name = "N", default_value_t = 32,
          value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub(crate) iodepth: u32,
    /// Microseconds a waiting `direct` thread polls its rings for completions
    /// before it sleeps (0: sleep at once, the library's default; polling burns
    /// a core while I/O is in flight)
    #[arg(long, value_name = "US", default_value_t = 0,
          value_parser = clap::value_parser!(u64).range(0..=1_000_000))]
    pub(crate) poll_us: u64,
    /// Memory the Linux engines' page cache may use (enforced with a memory cgroup
    /// when possible), and the size of the setcache engine's cache and of
    /// direct-copy's frame pool, which this process holds (a size above what the
    /// machine can give them is refused) [default: unconstrained; setcache: a
    /// quarter of the file, at least 16 MiB]
    #[arg(long, value_name = "SIZE", value_parser = size_arg)]
    pub(crate) cache_size: Option<u64>,
    /// Target hit ratios in percent, comma-separated: that share of reads falls in a hot
    /// region of 3/4 of --cache-size, the rest in the rest of the file
    #[arg(long, value_name = "PCT[,PCT...]", value_delimiter = ',', value_parser = percent_arg)]
    pub(crate) hit_ratio: Vec<f64>,
    /// Size of the hot region of --hit-ratio runs [default: 3/4 of --cache-size]
    #[arg(long, value_name = "SIZE", value_parser = size_arg)]
    pub(crate) hot_size: Option<u64>,
    /// Distribution of random offsets: uniform or zipf:THETA (THETA > 0, e.g. zipf:0.99)
    #[arg(long, value_name = "DIST", default_value = "uniform", value_parser = Dist::parse)]
    pub(crate) dist: Dist,
    /// Replay a trace instead of generating requests: KIND:ARGS as `setcache sim
    /// --trace` takes it (msr, systor, cbs, oracle, csv, text files; ycsb, zipf,
    /// uniform, scan generators). Its pages of --bs bytes are numbered densely in
    /// the order first seen and the file holds exactly them; reads and writes as
    /// the trace says; the threads share the trace in chunks of 64 accesses
    #[arg(long, value_name = "KIND:ARGS")]
    pub(crate) trace: Option<String>,
    /// With --trace: each thread replays its share this many times, and the run
    /// ends when all have (or --runtime ends); 0 loops until --runtime ends
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub(crate) trace_passes: u32,
    /// With --trace: replay at X times the trace's own timing (a block trace's
    /// timestamps; each access waits for its time) instead of as fast as possible
    #[arg(long, value_name = "X")]
    pub(crate) replay_speed: Option<f64>,
    /// Measured seconds per run (0.1 at least)
    #[arg(long, value_name = "SECS", default_value = "10", value_parser = runtime_arg)]
    pub(crate) runtime: f64,
    /// Seconds run before measuring (warms the cache)
    #[arg(long, value_name = "SECS", default_value = "0", value_parser = ramp_arg)]
    pub(crate) ramp: f64,
    /// Replacement policy of the setcache engine's sets: lru, lfu, fifo, clock,
    /// gclock, nrlfu, sieve, s3fifo, lirs or adaptive [default: the cache's
    /// default, adaptive]
    #[arg(long, value_name = "POLICY", value_parser = policy_arg)]
    pub(crate) policy: Option<setcache::PolicyKind>,
    /// Largest readahead window of the setcache engine, or `off` [default:
    /// the cache's default, 8M]
    #[arg(long, value_name = "SIZE|off", value_parser = readahead_arg)]
    pub(crate) readahead: Option<u64>,
    /// How the setcache engine's threads call it: `queue`, a cached queue each
    /// with --iodepth requests in flight; `sync`, one `read_at`/`write_at` (or
    /// page reference) at a time; `async`, --iodepth futures in flight each
    /// under a small executor. Several (comma-separated) run the setcache
    /// engine once with each in every round, in turns, as the engines take
    /// turns
    #[arg(
        long,
        value_name = "API[,API...]",
        value_enum,
        value_delimiter = ',',
        default_value = "queue"
    )]
    pub(crate) api: Vec<ApiArg>,
    /// Where the futures' I/O workers of `--api async` run: `off-interrupts`
    /// (the default: on CPUs that take none of the bench directory's
    /// device's completion interrupts, where there are such CPUs),
    /// `anywhere`, or a CPU list (`0`, `0,2-3`: worker k on the k-th CPU)
    #[arg(long, value_name = "off-interrupts|anywhere|CPUS", value_parser = futures_cpus_arg)]
    pub(crate) futures_cpus: Option<setcache::WorkerCpus>,
    /// How the setcache engine reads: `copy`, into the request's buffer; `ref`,
    /// a page reference (no copy) of which --touch bytes are read. Needs a
    /// read-only --rw
    #[arg(long, value_name = "ACCESS", value_enum, default_value_t = AccessArg::Copy)]
    pub(crate) access: AccessArg,
    /// Bytes read from each block with --access ref, at its start (the mmap
    /// engine then reads the same bytes through its mapping)
    #[arg(long, value_name = "BYTES", default_value = "64", value_parser = touch_arg)]
    pub(crate) touch: u64,
    /// Partitions of the setcache-numa engine [default: one per NUMA node]
    #[arg(long, value_name = "N",
          value_parser = clap::value_parser!(u64).range(1..=setcache::MAX_PARTITIONS as u64))]
    pub(crate) partitions: Option<u64>,
    /// A computation on each block read, 8 bytes of result per block: `sum`
    /// (the default) adds its 64-bit words, `search` looks for a key among
    /// them by binary search (as in a B-tree node). By setcache-numa as a
    /// task in the partition that holds the page, by setcache on the copy
    /// (or with --access ref on the page reference). Needs a --bs dividing
    /// 4k, a multiple of 8
    #[arg(long, value_enum, value_name = "TASK", num_args = 0..=1,
          default_missing_value = "sum")]
    pub(crate) compute: Option<super::compute::Compute>,
    /// A job of a run of several at once on the setcache engine, sharing
    /// its cache (repeat the flag): comma-separated key=value of name, rw,
    /// bs, threads, iodepth, offset, size (its region of the file), delay
    /// (seconds before it starts), e.g.
    /// `name=scan,rw=read,bs=128k,iodepth=1` and
    /// `name=hot,rw=randread,size=192M`. Replaces --threads and --hit-ratio;
    /// bs and iodepth default to --bs and --iodepth. Writes are synced after
    /// the run, outside the jobs' times
    #[arg(long = "job", value_name = "SPEC", value_parser = super::jobs::job_arg)]
    pub(crate) job: Vec<super::jobs::JobSpec>,
    /// Run every engine N times, taking turns (engine A, B, A, B, ...), and report
    /// each engine's median run: the device's drift then falls on all engines alike
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=99))]
    pub(crate) repeat: u32,
    /// Write the results as JSON to FILE
    #[arg(long, value_name = "FILE")]
    pub(crate) json: Option<PathBuf>,
    /// Draw IOPS against threads (or against hit ratio) as an SVG chart
    #[arg(long, value_name = "FILE.svg")]
    pub(crate) plot: Option<PathBuf>,
    /// Also run fio (io_uring, O_DIRECT) on the same data, if fio is installed
    #[arg(long)]
    pub(crate) compare_fio: bool,
    /// Stripe unit of the bench file, in 4 KiB pages
    #[arg(long, value_name = "N", default_value_t = 16,
          value_parser = clap::value_parser!(u32).range(1..=65536))]
    pub(crate) block_pages: u32,
    /// I/O engine of the storage layer
    #[arg(long, value_name = "ENGINE", value_enum, default_value_t = IoEngineArg::Auto)]
    pub(crate) io_engine: IoEngineArg,
    /// Seed of the offset generators and of the prefill data
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub(crate) seed: u64,
    /// No live progress line (it is only shown on a terminal anyway)
    #[arg(long)]
    pub(crate) no_progress: bool,
}

fn policy_arg(s: &str) -> Result<setcache::PolicyKind, String> {
    s.parse::<setcache::PolicyKind>().map_err(|e| e.to_string())
}

fn readahead_arg(s: &str) -> Result<u64, String> {
    match s.trim() {
        "off" | "0" => Ok(0),
        t => match size_arg(t) {
            // The window is counted in the cache's 4 KiB pages: a part of
            // one would be dropped (and less than one turn readahead off).
            Ok(n) if n % 4096 != 0 => Err(format!(
                "readahead window of {n} bytes is not a whole number of 4k pages: give a \
                 multiple of 4k, or `off`"
            )),
            Ok(n) => Ok(n),
            Err(e) => Err(format!("{e} (or `off`)")),
        },
    }
}

fn futures_cpus_arg(s: &str) -> Result<setcache::WorkerCpus, String> {
    match s.trim() {
        "off-interrupts" => Ok(setcache::WorkerCpus::OffInterrupts),
        "anywhere" => Ok(setcache::WorkerCpus::Anywhere),
        t => {
            let mut cpus = Vec::new();
            for part in t.split(',') {
                let bad = || {
                    format!(
                        "`{part}` is not a CPU or a range of CPUs (give off-interrupts, \
                         anywhere or a list such as 0,2-3)"
                    )
                };
                let (a, b) = part.split_once('-').unwrap_or((part, part));
                let (a, b): (usize, usize) = (
                    a.trim().parse().map_err(|_| bad())?,
                    b.trim().parse().map_err(|_| bad())?,
                );
                if a > b || b - a >= 4096 {
                    return Err(bad());
                }
                cpus.extend(a..=b);
            }
            Ok(setcache::WorkerCpus::Pinned(cpus))
        }
    }
}

fn layout_arg(s: &str) -> Result<LayoutKind, String> {
    s.parse::<LayoutKind>().map_err(|e| e.to_string())
}

fn count_arg(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(0) => Err("thread count must be at least 1".to_string()),
        Ok(n) if n > 1024 => Err(format!("thread count {n} is above the limit of 1024")),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("{s:?} is not a thread count")),
    }
}

fn percent_arg(s: &str) -> Result<f64, String> {
    match s.trim().trim_end_matches('%').parse::<f64>() {
        Ok(p) if (0.0..=100.0).contains(&p) => Ok(p),
        Ok(p) => Err(format!("hit ratio {p} is outside 0..100 (percent)")),
        Err(_) => Err(format!("{s:?} is not a percentage")),
    }
}

fn secs(s: &str, min_exclusive: bool) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .trim_end_matches('s')
        .parse()
        .map_err(|_| format!("{s:?} is not a number of seconds"))?;
    let ok = v.is_finite() && v <= 86_400.0 && if min_exclusive { v > 0.0 } else { v >= 0.0 };
    if ok {
        Ok(v)
    } else if min_exclusive {
        Err(format!("{s} seconds: must be above 0 and at most a day"))
    } else {
        Err(format!("{s} seconds: must be 0 or more and at most a day"))
    }
}

fn runtime_arg(s: &str) -> Result<f64, String> {
    let v = secs(s, true)?;
    // A run shorter than this completes no request on a slow disk, and its
    // figures would be zeros.
    if v < 0.1 {
        return Err(format!("{s} seconds: a run must last 0.1 s at least"));
    }
    Ok(v)
}

fn ramp_arg(s: &str) -> Result<f64, String> {
    secs(s, false)
}

/// `--touch`: a size (suffixes as `--bs`), at least one byte.
fn touch_arg(text: &str) -> Result<u64, String> {
    match size_arg(text)? {
        0 => Err("it must be at least 1 byte".to_string()),
        n => Ok(n),
    }
}

impl BenchArgs {
    /// Whether flag `id` (clap's id: the field's name) was given.
    pub(crate) fn given(&self, id: &str) -> bool {
        self.given.iter().any(|g| g == id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_parsers() {
        assert!(count_arg("0").is_err());
        assert_eq!(count_arg("4"), Ok(4));
        assert!(percent_arg("101").is_err());
        assert!(percent_arg("-1").is_err());
        assert_eq!(percent_arg("90%"), Ok(90.0));
        assert!(runtime_arg("0").is_err());
        assert!(runtime_arg("0.0001").is_err());
        assert_eq!(ramp_arg("0"), Ok(0.0));
        assert_eq!(runtime_arg("2.5s"), Ok(2.5));
        assert!(layout_arg("raid5").is_err());
    }

    use crate::test_alloc::{input_bound, largest_alloc};
    use proptest::prelude::*;

    /// Text as flags get it: numbers of every kind with and without units,
    /// names, and anything at all.
    fn flag_text() -> impl Strategy<Value = String> {
        prop_oneof![
            ".{0,16}",
            "[-+ ]?[0-9]{0,25}(\\.[0-9]{0,4})?(e[-+]?[0-9]{1,4})?[s% ]?",
            prop_oneof![
                Just("nan"),
                Just("inf"),
                Just("-0"),
                Just("1e309"),
                Just("86400"),
                Just("86400.0001s"),
                Just("100%"),
                Just("100.0000001"),
                Just("stripe"),
                Just("HASH"),
                Just("sa-lru"),
                Just(" gclock "),
            ]
            .prop_map(str::to_string),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// The bench's value parsers give a value in range or an error for any text.
        #[test]
        fn flag_values_are_in_range_or_refused(text in flag_text()) {
            let (r, largest) = largest_alloc(|| {
                (
                    count_arg(&text),
                    percent_arg(&text),
                    runtime_arg(&text),
                    ramp_arg(&text),
                    layout_arg(&text),
                    policy_arg(&text),
                )
            });
            prop_assert!(largest <= input_bound(text.len()));
            let (count, percent, runtime, ramp, layout, policy) = r;
            if let Ok(n) = count {
                prop_assert!((1..=1024).contains(&n));
            }
            if let Ok(p) = percent {
                prop_assert!((0.0..=100.0).contains(&p));
            }
            if let Ok(s) = runtime {
                prop_assert!((0.1..=86_400.0).contains(&s));
            }
            if let Ok(s) = ramp {
                prop_assert!((0.0..=86_400.0).contains(&s));
            }
            if let Ok(l) = layout {
                prop_assert_eq!(layout_arg(&l.to_string()), Ok(l));
            }
            if let Ok(p) = policy {
                prop_assert_eq!(policy_arg(p.name()), Ok(p));
            }
        }
    }
}
