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
    let ops: u64 = dirs.iter().map(|d| ios(d)).sum();
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
}
