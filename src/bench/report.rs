//! Results of runs: the final table on stdout and the `--json` file.

use serde_json::{Value, json};

use super::config::Config;
pub(crate) use super::outcome::{Lat, Outcome};
use super::plot;
use super::size::format_size;
use super::workload::Pattern;

/// One row of the report: one engine at one thread count and hit-ratio target.
#[derive(Clone, Debug)]
pub(crate) struct RunResult {
    pub(crate) engine: String,
    pub(crate) rw: Pattern,
    pub(crate) bs: u64,
    pub(crate) threads: usize,
    pub(crate) iodepth: u32,
    pub(crate) cache_size: Option<u64>,
    /// Target hit ratio as a fraction.
    pub(crate) hit_target: Option<f64>,
    pub(crate) out: Outcome,
}

impl RunResult {
    pub(crate) fn iops(&self) -> f64 {
        if self.out.secs > 0.0 {
            self.out.ops as f64 / self.out.secs
        } else {
            0.0
        }
    }

    pub(crate) fn mib_s(&self) -> f64 {
        self.iops() * self.bs as f64 / (1u64 << 20) as f64
    }

    pub(crate) fn to_json(&self) -> Value {
        json!({
            "engine": self.engine, "rw": self.rw.to_string(), "bs": self.bs,
            "threads": self.threads, "iodepth": self.iodepth, "cache_size": self.cache_size,
            "hit_ratio_target": self.hit_target, "hit_ratio": self.out.hit_ratio,
            "iops": self.iops(), "mib_s": self.mib_s(), "lat_us": self.out.lat.to_json(),
            "cpu_user_s": self.out.cpu_user_s, "cpu_sys_s": self.out.cpu_sys_s, "ops": self.out.ops,
        })
    }
}

/// The `--json` document.
pub(crate) fn runs_json(runs: &[RunResult]) -> Value {
    json!({ "runs": runs.iter().map(RunResult::to_json).collect::<Vec<_>>() })
}

/// Microseconds with sensible precision.
fn us(v: f64) -> String {
    if v < 10.0 {
        format!("{v:.2}")
    } else if v < 1000.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.0}")
    }
}

fn pct(v: Option<f64>) -> String {
    v.map_or("-".to_string(), |f| format!("{:.1}%", f * 100.0))
}

/// CPU seconds per million operations.
fn per_mop(secs: f64, ops: u64) -> String {
    if ops == 0 {
        "-".to_string()
    } else {
        format!("{:.2}", secs * 1e6 / ops as f64)
    }
}

/// The final table.
pub(crate) fn table(runs: &[RunResult]) -> String {
    let header = [
        "engine",
        "rw",
        "bs",
        "thr",
        "qd",
        "hit tgt",
        "hit",
        "IOPS",
        "MiB/s",
        "p50 us",
        "p99 us",
        "p99.9 us",
        "p99.99 us",
        "max us",
        "usr s/Mop",
        "sys s/Mop",
    ];
    let mut rows: Vec<Vec<String>> = vec![header.iter().map(|s| s.to_string()).collect()];
    for r in runs {
        let mut engine = r.engine.clone();
        if r.out.interrupted {
            engine.push('*');
        }
        rows.push(vec![
            engine,
            r.rw.to_string(),
            format_size(r.bs),
            r.threads.to_string(),
            r.iodepth.to_string(),
            pct(r.hit_target),
            pct(r.out.hit_ratio),
            format!("{:.0}", r.iops()),
            format!("{:.1}", r.mib_s()),
            us(r.out.lat.p50),
            us(r.out.lat.p99),
            us(r.out.lat.p999),
            us(r.out.lat.p9999),
            us(r.out.lat.max),
            per_mop(r.out.cpu_user_s, r.out.ops),
            per_mop(r.out.cpu_sys_s, r.out.ops),
        ]);
    }
    let cols = header.len();
    let widths: Vec<usize> = (0..cols)
        .map(|c| rows.iter().map(|r| r[c].len()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for (i, row) in rows.iter().enumerate() {
        let cells: Vec<String> = row
            .iter()
            .enumerate()
            .map(|(c, cell)| match c {
                0 | 1 => format!("{cell:<w$}", w = widths[c]),
                _ => format!("{cell:>w$}", w = widths[c]),
            })
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
        if i == 0 {
            let total = widths.iter().sum::<usize>() + 2 * (cols - 1);
            out.push_str(&"-".repeat(total));
            out.push('\n');
        }
    }
    if runs.iter().any(|r| r.out.interrupted) {
        out.push_str("* interrupted: measured for less than the full runtime\n");
    }
    out
}

/// Write `--json` and `--plot`, if asked for.
pub(crate) fn write_outputs(cfg: &Config, runs: &[RunResult]) -> Result<(), String> {
    if let Some(p) = &cfg.a.json {
        let text = serde_json::to_string_pretty(&runs_json(runs)).map_err(|e| e.to_string())?;
        std::fs::write(p, text + "\n").map_err(|e| format!("cannot write {}: {e}", p.display()))?;
        say!("wrote {}", p.display());
    }
    if let Some(p) = &cfg.a.plot {
        if runs.is_empty() {
            say!("note: no runs to plot");
            return Ok(());
        }
        let by_hit = cfg.hit_targets.len() > 1;
        std::fs::write(p, plot::svg(runs, by_hit))
            .map_err(|e| format!("cannot write {}: {e}", p.display()))?;
        say!("wrote {}", p.display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> RunResult {
        RunResult {
            engine: "direct".into(),
            rw: Pattern::RandRead,
            bs: 4096,
            threads: 2,
            iodepth: 32,
            cache_size: Some(64 << 20),
            hit_target: None,
            out: Outcome {
                ops: 2_000_000,
                reads: 2_000_000,
                secs: 2.0,
                lat: Lat {
                    p50: 80.5,
                    p99: 300.0,
                    p999: 900.0,
                    p9999: 2000.0,
                    max: 5123.0,
                },
                cpu_user_s: 1.0,
                cpu_sys_s: 3.0,
                hit_ratio: Some(0.0),
                interrupted: false,
            },
        }
    }

    #[test]
    fn json_has_exactly_the_documented_fields() {
        let doc = runs_json(&[sample()]);
        let text = serde_json::to_string(&doc).unwrap();
        let back: Value = serde_json::from_str(&text).unwrap();
        let run = &back["runs"][0];
        let mut keys: Vec<&str> = run
            .as_object()
            .unwrap()
            .keys()
            .map(|k| k.as_str())
            .collect();
        keys.sort_unstable();
        let mut want = vec![
            "engine",
            "rw",
            "bs",
            "threads",
            "iodepth",
            "cache_size",
            "hit_ratio_target",
            "hit_ratio",
            "iops",
            "mib_s",
            "lat_us",
            "cpu_user_s",
            "cpu_sys_s",
            "ops",
        ];
        want.sort_unstable();
        assert_eq!(keys, want);
        assert_eq!(run["iops"], 1_000_000.0);
        assert_eq!(run["hit_ratio_target"], Value::Null);
        assert_eq!(run["lat_us"]["p999"], 900.0);
        assert_eq!(run["rw"], "randread");
        assert_eq!(run["cache_size"], 64 << 20);
    }

    #[test]
    fn table_lines_up_and_shows_per_mop_cpu() {
        let t = table(&[sample(), sample()]);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 4);
        assert!(lines[2].contains("1000000"));
        assert!(
            lines[2].contains("0.50") && lines[2].contains("1.50"),
            "{}",
            lines[2]
        );
        assert_eq!(lines[2], lines[3]);
    }
}
