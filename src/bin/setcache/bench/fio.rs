//! `--compare-fio`: the same workload through fio (io_uring, O_DIRECT) on the same
//! backing files, reported as engine "fio".
//!
//! fio sees the backing files directly: `--offset` skips the store's header and
//! `--size` (divided by fio between the files) covers each device's data. fio does
//! not know the layout, so "the same workload" means the same pattern, block size,
//! depth and threads over the same bytes, not the same offsets.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use setcache::HEADER_BYTES;

use super::report::{Lat, Outcome};
use super::workload::{Dist, Pattern};

/// The fio equivalent of one bench run.
#[derive(Clone, Debug)]
pub(crate) struct FioJob {
    pub(crate) rw: Pattern,
    pub(crate) rwmix_read: u8,
    pub(crate) bs: u64,
    pub(crate) iodepth: u32,
    pub(crate) threads: usize,
    pub(crate) runtime: f64,
    pub(crate) ramp: f64,
    pub(crate) dist: Dist,
    pub(crate) paths: Vec<PathBuf>,
    /// Data bytes per device (after the header).
    pub(crate) per_device: u64,
}

/// fio on PATH, if any.
pub(crate) fn find_fio() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("fio"))
        .find(|p| p.is_file())
}

/// fio's file-name syntax: ':' separates files, so it is escaped inside names.
fn fio_filename(paths: &[PathBuf]) -> String {
    paths
        .iter()
        .map(|p| p.to_string_lossy().replace(':', "\\:"))
        .collect::<Vec<_>>()
        .join(":")
}

pub(crate) fn fio_args(job: &FioJob) -> Vec<String> {
    let ms = |s: f64| format!("{}ms", (s * 1000.0).round() as u64);
    let mut a = vec![
        "--name=setcache".to_string(),
        "--ioengine=io_uring".to_string(),
        "--direct=1".to_string(),
        format!("--rw={}", job.rw),
        format!("--bs={}", job.bs),
        format!("--iodepth={}", job.iodepth),
        format!("--numjobs={}", job.threads),
        "--group_reporting".to_string(),
        "--time_based".to_string(),
        format!("--runtime={}", ms(job.runtime)),
        format!("--ramp_time={}", ms(job.ramp)),
        format!("--filename={}", fio_filename(&job.paths)),
        format!("--offset={HEADER_BYTES}"),
        format!("--size={}", job.per_device * job.paths.len() as u64),
        "--percentile_list=50:99:99.9:99.99".to_string(),
        "--output-format=json".to_string(),
    ];
    if job.rw == Pattern::RandRw {
        a.push(format!("--rwmixread={}", job.rwmix_read));
    }
    if let Dist::Zipf(theta) = job.dist {
        a.push(format!("--random_distribution=zipf:{theta}"));
    }
    a
}

/// Turn fio's JSON report into an outcome.
pub(crate) fn parse_output(text: &str) -> Result<Outcome, String> {
    // fio may print notes before the JSON document.
    let start = text.find('{').ok_or("fio printed no JSON report")?;
    let doc: Value =
        serde_json::from_str(&text[start..]).map_err(|e| format!("fio's JSON report: {e}"))?;
    let job = doc
        .get("jobs")
        .and_then(|j| j.get(0))
        .ok_or("fio's report has no job")?;
    if let Some(err) = job.get("error").and_then(Value::as_i64).filter(|&e| e != 0) {
        return Err(format!("fio job failed with error {err}"));
    }
    let num = |v: &Value, k: &str| v.get(k).and_then(Value::as_f64).unwrap_or(0.0);
    let dirs: Vec<&Value> = ["read", "write"]
        .iter()
        .filter_map(|d| job.get(*d))
        .collect();
    let ios = |d: &Value| d.get("total_ios").and_then(Value::as_u64).unwrap_or(0);
    // Saturating: the counts are fio's, and a sum past 2^64 must not panic.
    let ops = dirs.iter().fold(0u64, |sum, d| sum.saturating_add(ios(d)));
    let reads = job.get("read").map_or(0, ios);
    let iops: f64 = dirs.iter().map(|d| num(d, "iops")).sum();
    // Percentiles of the busier direction; the max over both.
    let main = dirs
        .iter()
        .copied()
        .max_by_key(|d| ios(d))
        .ok_or("fio's report has no data")?;
    let clat = main
        .get("clat_ns")
        .ok_or("fio's report has no completion latencies")?;
    let pct = |k: &str| {
        clat.get("percentile")
            .and_then(|p| p.get(k))
            .and_then(Value::as_f64)
            .unwrap_or(0.0)
            / 1000.0
    };
    let max_ns = dirs
        .iter()
        .map(|d| d.get("clat_ns").map_or(0.0, |c| num(c, "max")))
        .fold(0.0, f64::max);
    // job_runtime sums the runtimes of all jobs in the group; the CPU percentages are
    // of that.
    let job_secs = num(job, "job_runtime") / 1000.0;
    let secs = if iops > 0.0 { ops as f64 / iops } else { 0.0 };
    Ok(Outcome {
        ops,
        reads,
        secs,
        lat: Lat {
            p50: pct("50.000000"),
            p99: pct("99.000000"),
            p999: pct("99.900000"),
            p9999: pct("99.990000"),
            max: max_ns / 1000.0,
        },
        cpu_user_s: num(job, "usr_cpu") / 100.0 * job_secs,
        cpu_sys_s: num(job, "sys_cpu") / 100.0 * job_secs,
        hit_ratio: (reads > 0).then_some(0.0),
        interrupted: false,
    })
}

/// Run fio and parse its report.
pub(crate) fn run(fio: &Path, job: &FioJob) -> Result<Outcome, String> {
    let out = Command::new(fio)
        .args(fio_args(job))
        .output()
        .map_err(|e| format!("cannot run {}: {e}", fio.display()))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let why = stderr
            .lines()
            .chain(stdout.lines())
            .find(|l| !l.trim().is_empty())
            .unwrap_or("");
        return Err(format!("fio failed ({}): {why}", out.status));
    }
    parse_output(&stdout)
}

#[cfg(test)]
mod tests {
    use super::*;

    const REPORT: &str = r#"note: a line before the report
{"fio version": "fio-3.33", "jobs": [{"jobname": "setcache", "error": 0,
 "job_runtime": 4000, "usr_cpu": 5.0, "sys_cpu": 20.0,
 "read": {"iops": 1000.0, "bw": 4000, "runtime": 2000, "total_ios": 2000,
   "clat_ns": {"max": 9000000, "percentile": {"50.000000": 250000, "99.000000": 450000,
   "99.900000": 5000000, "99.990000": 8000000}}},
 "write": {"iops": 0.0, "bw": 0, "runtime": 0, "total_ios": 0,
   "clat_ns": {"max": 0, "percentile": {}}}}]}"#;

    #[test]
    fn parses_a_report() {
        let o = parse_output(REPORT).unwrap();
        assert_eq!(o.ops, 2000);
        assert_eq!(o.reads, 2000);
        assert!((o.secs - 2.0).abs() < 1e-9);
        assert_eq!(o.lat.p50, 250.0);
        assert_eq!(o.lat.p9999, 8000.0);
        assert_eq!(o.lat.max, 9000.0);
        assert!((o.cpu_user_s - 0.2).abs() < 1e-9);
        assert!((o.cpu_sys_s - 0.8).abs() < 1e-9);
        assert_eq!(o.hit_ratio, Some(0.0));
        assert!(parse_output("fio: no json").is_err());
        assert!(parse_output(r#"{"jobs": [{"error": 5}]}"#).is_err());
    }

    #[test]
    fn builds_the_command_line() {
        let job = FioJob {
            rw: Pattern::RandRw,
            rwmix_read: 70,
            bs: 4096,
            iodepth: 32,
            threads: 2,
            runtime: 3.0,
            ramp: 0.5,
            dist: Dist::Zipf(1.2),
            paths: vec!["/d/dev0/bench.scf".into(), "/d:x/dev1/bench.scf".into()],
            per_device: 1 << 20,
        };
        let a = fio_args(&job);
        assert!(a.contains(&"--filename=/d/dev0/bench.scf:/d\\:x/dev1/bench.scf".to_string()));
        assert!(a.contains(&"--size=2097152".to_string()));
        assert!(a.contains(&"--offset=4096".to_string()));
        assert!(a.contains(&"--runtime=3000ms".to_string()));
        assert!(a.contains(&"--ramp_time=500ms".to_string()));
        assert!(a.contains(&"--rwmixread=70".to_string()));
        assert!(a.contains(&"--random_distribution=zipf:1.2".to_string()));
    }

    use super::super::outcome::tests::json_value;
    use crate::test_alloc::{input_bound, largest_alloc};
    use proptest::prelude::*;
    use serde_json::json;

    /// A number field of fio's report: plausible, at a limit, or any JSON.
    fn num() -> impl Strategy<Value = Value> {
        prop_oneof![
            4 => (0u64..1 << 40).prop_map(Value::from),
            1 => prop_oneof![
                Just(json!(u64::MAX)),
                Just(json!(-1)),
                Just(json!(1e308)),
                Just(json!(0.5)),
            ],
            1 => json_value(),
        ]
    }

    /// One direction of a job: counts, rate and latencies, or any JSON.
    fn direction() -> impl Strategy<Value = Value> {
        prop_oneof![
            4 => (num(), num(), num(), proptest::collection::vec(num(), 0..4)).prop_map(
                |(iops, ios, max, pct)| {
                    let keys = ["50.000000", "99.000000", "99.900000", "99.990000"];
                    let p: serde_json::Map<String, Value> =
                        keys.iter().map(|k| k.to_string()).zip(pct).collect();
                    let clat = json!({"max": max, "percentile": p});
                    json!({"iops": iops, "total_ios": ios, "clat_ns": clat})
                }
            ),
            1 => json_value(),
        ]
    }

    /// fio's report with each field plausible, at a limit, or any JSON, some
    /// missing; with notes before it, cut short, or not JSON at all.
    fn report() -> impl Strategy<Value = String> {
        let job = (
            prop_oneof![4 => Just(json!(0)), 1 => num()],
            num(),
            num(),
            num(),
            proptest::option::of(direction()),
            proptest::option::of(direction()),
        )
            .prop_map(|(error, runtime, usr, sys, read, write)| {
                let mut j =
                    json!({"error": error, "job_runtime": runtime, "usr_cpu": usr, "sys_cpu": sys});
                if let Some(r) = read {
                    j["read"] = r;
                }
                if let Some(w) = write {
                    j["write"] = w;
                }
                j
            });
        let doc = prop_oneof![
            4 => proptest::collection::vec(job, 0..3)
                .prop_map(|jobs| json!({"jobs": jobs}).to_string()),
            1 => json_value().prop_map(|v| v.to_string()),
        ];
        prop_oneof![
            6 => (
                prop_oneof![Just(""), Just("note: something\n"), Just("}{")],
                doc,
                any::<proptest::sample::Index>(),
                any::<bool>(),
            )
                .prop_map(|(before, doc, cut, whole)| {
                    let mut end = if whole { doc.len() } else { cut.index(doc.len() + 1) };
                    while !doc.is_char_boundary(end) {
                        end -= 1;
                    }
                    format!("{before}{}", &doc[..end])
                }),
            1 => ".{0,40}",
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// fio's output, plausible or not, is an outcome or an error.
        #[test]
        fn any_fio_output_is_an_outcome_or_refused(text in report()) {
            let (r, largest) = largest_alloc(|| parse_output(&text));
            prop_assert!(largest <= input_bound(text.len()));
            match r {
                Ok(o) => prop_assert!(o.reads <= o.ops),
                Err(e) => prop_assert!(!e.is_empty()),
            }
        }
    }

    /// Counts whose sum passes 2^64 saturate (the sum used to overflow).
    #[test]
    fn counts_past_2_64_saturate() {
        let text = format!(
            r#"{{"jobs": [{{"read": {{"iops": 1.0, "total_ios": {}, "clat_ns": {{}}}},
                 "write": {{"iops": 1.0, "total_ios": 5, "clat_ns": {{}}}}}}]}}"#,
            u64::MAX
        );
        assert_eq!(parse_output(&text).unwrap().ops, u64::MAX);
    }
}
