//! `--job`: several workloads at once on one setcache engine, as fio runs
//! several jobs, so that (for example) a scan and a random reader share one
//! cache. Each job has its own pattern, request size, threads, depth and
//! region of the bench file; the report gives each job's IOPS, hit ratio and
//! latency.

use serde_json::{Value, json};

use super::outcome::Lat;
use super::pattern::Pattern;
use super::size::{format_size, parse_size};

/// One `--job` as given.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct JobSpec {
    pub(crate) name: String,
    pub(crate) rw: Pattern,
    /// Request size (default `--bs`).
    pub(crate) bs: Option<u64>,
    pub(crate) threads: usize,
    /// Requests in flight per thread (default `--iodepth`).
    pub(crate) iodepth: Option<u32>,
    /// Where its region of the file starts.
    pub(crate) offset: u64,
    /// Its region's length (default: to the end of the file).
    pub(crate) size: Option<u64>,
    /// Seconds after the others start that it starts (fio's `startdelay`).
    pub(crate) delay: f64,
}

const KEYS: &str = "name, rw, bs, threads, iodepth, offset, size, delay";

/// Parse `key=value,...` (keys: name, rw, bs, threads, iodepth, offset, size).
pub(crate) fn job_arg(text: &str) -> Result<JobSpec, String> {
    let mut j = JobSpec {
        name: String::new(),
        rw: Pattern::RandRead,
        bs: None,
        threads: 1,
        iodepth: None,
        offset: 0,
        size: None,
        delay: 0.0,
    };
    let mut rw = None;
    let mut seen: Vec<&str> = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (k, v) = part
            .split_once('=')
            .ok_or_else(|| format!("job part {part:?} is not key=value (keys: {KEYS})"))?;
        let (k, v) = (k.trim(), v.trim());
        // A key given twice would silently take its last value.
        if seen.contains(&k) {
            return Err(format!("job key {k:?} given twice in {text:?}"));
        }
        seen.push(k);
        let num = |v: &str| -> Result<u64, String> {
            v.parse::<u64>()
                .map_err(|_| format!("job {k}={v}: not a whole number"))
        };
        match k {
            "name" => j.name = v.to_string(),
            "rw" => rw = Some(Pattern::parse(v)?),
            "bs" => j.bs = Some(parse_size(v)?),
            "threads" => match num(v)? {
                n @ 1..=1024 => j.threads = n as usize,
                n => return Err(format!("job threads={n}: must be 1 to 1024")),
            },
            "iodepth" => match num(v)? {
                n @ 1..=4096 => j.iodepth = Some(n as u32),
                n => return Err(format!("job iodepth={n}: must be 1 to 4096")),
            },
            "offset" => j.offset = parse_size(v)?,
            "size" => j.size = Some(parse_size(v)?),
            "delay" => match v.trim_end_matches('s').parse::<f64>() {
                Ok(d) if (0.0..=86_400.0).contains(&d) => j.delay = d,
                _ => return Err(format!("job delay={v}: seconds from 0 to a day")),
            },
            _ => return Err(format!("job key {k:?} is not one of {KEYS}")),
        }
    }
    j.rw = rw.ok_or_else(|| format!("job {text:?} has no rw=PATTERN"))?;
    if j.bs == Some(0) {
        return Err("job bs=0: a request needs at least one byte".to_string());
    }
    Ok(j)
}

/// A job with every default filled in and checked against the file.
#[derive(Clone, Debug)]
pub(crate) struct Job {
    pub(crate) name: String,
    pub(crate) rw: Pattern,
    pub(crate) bs: u64,
    pub(crate) threads: usize,
    pub(crate) iodepth: u32,
    pub(crate) offset: u64,
    pub(crate) size: u64,
    pub(crate) delay: f64,
}

/// Fill in the defaults of `specs` and check each region against a file of
/// `file_len` bytes.
pub(crate) fn resolve(
    specs: &[JobSpec],
    bs: u64,
    iodepth: u32,
    file_len: u64,
) -> Result<Vec<Job>, String> {
    let mut jobs = Vec::new();
    for (i, s) in specs.iter().enumerate() {
        let name = if s.name.is_empty() {
            format!("job{}", i + 1)
        } else {
            s.name.clone()
        };
        if jobs.iter().any(|j: &Job| j.name == name) {
            return Err(format!(
                "job {name}: two jobs have this name (given, or job<N> for the N-th unnamed \
                 one): name each job differently, its rows and records are told apart by it"
            ));
        }
        let bs = s.bs.unwrap_or(bs);
        if s.offset >= file_len {
            return Err(format!(
                "job {name}: offset {} is not inside the {} file",
                format_size(s.offset),
                format_size(file_len)
            ));
        }
        let size = s.size.unwrap_or(file_len - s.offset);
        if s.offset.checked_add(size).is_none_or(|e| e > file_len) {
            return Err(format!(
                "job {name}: offset {} + size {} runs past the {} file",
                format_size(s.offset),
                format_size(size),
                format_size(file_len)
            ));
        }
        if size / bs < s.threads as u64 {
            return Err(format!(
                "job {name}: its region of {} holds fewer {bs}-byte requests than its {} threads",
                format_size(size),
                s.threads
            ));
        }
        jobs.push(Job {
            name,
            rw: s.rw,
            bs,
            threads: s.threads,
            iodepth: s.iodepth.unwrap_or(iodepth),
            offset: s.offset,
            size,
            delay: s.delay,
        });
    }
    Ok(jobs)
}

/// What one job did in one run.
#[derive(Clone, Debug)]
pub(crate) struct JobResult {
    pub(crate) job: Job,
    pub(crate) ops: u64,
    pub(crate) secs: f64,
    /// Requests served wholly from the cache, over all requests.
    pub(crate) hit_ratio: Option<f64>,
    pub(crate) lat: Lat,
}

impl JobResult {
    pub(crate) fn iops(&self) -> f64 {
        if self.secs > 0.0 {
            self.ops as f64 / self.secs
        } else {
            0.0
        }
    }

    pub(crate) fn line(&self) -> String {
        let j = &self.job;
        format!(
            "{:<10} {:<9} {:>5} thr {:<3} qd {:<4} region {}+{}  {:>9.0} IOPS  {:>8.1} MiB/s  hit {}  p50 {:.1} us  p99 {:.1} us  p99.9 {:.1} us",
            j.name,
            j.rw.to_string(),
            format_size(j.bs),
            j.threads,
            j.iodepth,
            format_size(j.offset),
            format_size(j.size),
            self.iops(),
            self.iops() * j.bs as f64 / (1u64 << 20) as f64,
            self.hit_ratio
                .map_or("-".to_string(), |h| format!("{:.1}%", h * 100.0)),
            self.lat.p50,
            self.lat.p99,
            self.lat.p999,
        )
    }

    pub(crate) fn to_json(&self, round: usize) -> Value {
        let j = &self.job;
        json!({
            "round": round, "job": j.name, "rw": j.rw.to_string(), "bs": j.bs,
            "threads": j.threads, "iodepth": j.iodepth, "offset": j.offset, "size": j.size,
            "iops": self.iops(), "ops": self.ops, "secs": self.secs,
            "hit_ratio": self.hit_ratio, "lat_us": self.lat.to_json(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_with_clear_errors() {
        let j = job_arg("name=scan,rw=read,bs=128k,threads=2,iodepth=1,offset=1G,size=2G").unwrap();
        assert_eq!(j.name, "scan");
        assert_eq!(j.rw, Pattern::Read);
        assert_eq!((j.bs, j.threads, j.iodepth), (Some(128 << 10), 2, Some(1)));
        assert_eq!((j.offset, j.size), (1 << 30, Some(2 << 30)));
        assert!(job_arg("bs=4k").unwrap_err().contains("no rw="));
        assert!(job_arg("rw=read,speed=9").unwrap_err().contains("speed"));
        assert!(
            job_arg("rw=read,threads=0")
                .unwrap_err()
                .contains("threads=0")
        );
        assert!(job_arg("rw=read,bs=0").unwrap_err().contains("bs=0"));
        assert!(job_arg("rw=read,oops").unwrap_err().contains("key=value"));
        assert!(job_arg("rw=read,delay=-1").unwrap_err().contains("delay"));
        assert_eq!(job_arg("rw=read,delay=2.5s").unwrap().delay, 2.5);
        let file = 1 << 20;
        let r = |t: &str| resolve(&[job_arg(t).unwrap()], 4096, 32, file);
        assert!(r("rw=read,offset=1M").unwrap_err().contains("not inside"));
        assert!(
            r("rw=read,offset=512k,size=768k")
                .unwrap_err()
                .contains("past")
        );
        assert!(
            r("rw=read,size=4k,threads=2")
                .unwrap_err()
                .contains("fewer")
        );
        let ok = r("rw=randread,offset=256k,bs=100").unwrap();
        assert_eq!((ok[0].bs, ok[0].size, ok[0].iodepth), (100, 768 << 10, 32));
        assert_eq!(ok[0].name, "job1");
        // Two jobs of one name, given or the default of an unnamed one.
        let two =
            |a: &str, b: &str| resolve(&[job_arg(a).unwrap(), job_arg(b).unwrap()], 4096, 32, file);
        let e = two("name=scan,rw=read", "name=scan,rw=randread").unwrap_err();
        assert!(e.contains("job scan: two jobs have this name"), "{e}");
        let e = two("rw=read", "name=job1,rw=randread").unwrap_err();
        assert!(e.contains("job job1: two jobs"), "{e}");
        assert_eq!(two("rw=read", "name=job1x,rw=read").unwrap().len(), 2);
    }

    use crate::test_alloc::{input_bound, largest_alloc};
    use proptest::prelude::*;

    /// Pieces a spec is made of: each key with values in and around its
    /// bounds, unknown keys, and junk.
    fn part() -> impl Strategy<Value = String> {
        let kv = |k: &'static str, vs: &'static [&'static str]| {
            proptest::sample::select(vs).prop_map(move |v| format!("{k}={v}"))
        };
        prop_oneof![
            kv("name", &["scan", "", "a=b"]),
            kv("rw", &["read", "randrw", "trim", ""]),
            kv("bs", &["0", "1", "4k", "3000", "1M", "x"]),
            kv(
                "threads",
                &["0", "1", "2", "1024", "1025", "-1", "18446744073709551616"]
            ),
            kv("iodepth", &["0", "1", "4096", "4097", "1.5"]),
            kv("offset", &["0", "512M", "1G", "2G", "1T"]),
            kv("size", &["0", "4k", "64M", "1G", "20000000T"]),
            kv(
                "delay",
                &["0", "2.5s", "86400", "86401s", "-1", "nan", "inf"]
            ),
            kv("speed", &["9"]),
            ".{0,16}",
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// Any spec is a job within the documented bounds or an error that
        /// names the job; no input allocates beyond its own size.
        #[test]
        fn any_spec_is_a_job_or_refused(
            parts in proptest::collection::vec(part(), 0..8),
            junk in ".{0,40}",
            use_junk in any::<bool>(),
            with_rw in any::<bool>(),
        ) {
            // Half the specs name a pattern first, so that many parse.
            let lead = if with_rw { "rw=randread," } else { "" };
            let text = if use_junk { junk } else { format!("{lead}{}", parts.join(",")) };
            let (r, largest) = largest_alloc(|| job_arg(&text));
            prop_assert!(largest <= input_bound(text.len()));
            match r {
                Ok(j) => {
                    prop_assert!((1..=1024).contains(&j.threads));
                    prop_assert!(j.iodepth.is_none_or(|d| (1..=4096).contains(&d)));
                    prop_assert!(j.bs != Some(0));
                    prop_assert!((0.0..=86_400.0).contains(&j.delay));
                    // A job that parses resolves against a file or says why.
                    let file = 1u64 << 30;
                    if let Err(e) = resolve(&[j], 4096, 32, file) {
                        prop_assert!(e.starts_with("job "), "{e}");
                    }
                }
                // Every refusal says what was wrong: a job part, a size or a pattern.
                Err(e) => prop_assert!(
                    e.starts_with("job ") || e.contains("invalid size") || e.contains("unknown --rw"),
                    "{e}"
                ),
            }
        }
    }
}
