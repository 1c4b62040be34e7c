//! Results of runs: the final table on stdout and the `--json` file.

use serde_json::{Value, json};

use super::config::Config;
pub(crate) use super::outcome::{Lat, Outcome, RunResult};
use super::plot;
use super::size::format_size;

/// The median of `v` (sorted in place): the mean of the two middle values
/// for an even count; `None` for none.
pub(crate) fn median(v: &mut [f64]) -> Option<f64> {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => None,
        n if n % 2 == 1 => Some(v[n / 2]),
        n => Some((v[n / 2 - 1] + v[n / 2]) / 2.0),
    }
}

/// One row per engine from rounds of runs (each round: every engine once, in
/// the same order): the run with the median IOPS (the lower middle one for an
/// even count), with every round's IOPS and the median ratio to the first
/// engine of each round. A single round comes back as it is.
pub(crate) fn medians(rounds: Vec<Vec<RunResult>>) -> Vec<RunResult> {
    if rounds.len() <= 1 {
        return rounds.into_iter().flatten().collect();
    }
    let engines = rounds.iter().map(Vec::len).max().unwrap_or(0);
    let mut out = Vec::new();
    for e in 0..engines {
        let mut runs: Vec<&RunResult> = rounds.iter().filter_map(|r| r.get(e)).collect();
        let all: Vec<f64> = runs.iter().map(|r| r.iops()).collect();
        let mut ratios: Vec<f64> = rounds
            .iter()
            .filter_map(|r| Some((r.get(e)?, r.first()?)))
            .filter(|(_, f)| f.iops() > 0.0)
            .map(|(x, f)| x.iops() / f.iops())
            .collect();
        runs.sort_by(|a, b| a.iops().total_cmp(&b.iops()));
        let mut row = runs[(runs.len() - 1) / 2].clone();
        row.rounds = all;
        row.vs_first = if e == 0 { None } else { median(&mut ratios) };
        out.push(row);
    }
    out
}

/// A round this far below an engine's median marks its rounds as unsteady.
const SLOW_ROUND: f64 = 0.6;
/// Rounds that rise from first to last by this factor or more, never
/// falling, mark them as warming.
const WARMING: f64 = 1.3;

/// Notes on engines whose rounds were not steady, one line each: rounds
/// that only rose (by [`WARMING`] or more from the first to the last), or a
/// round below [`SLOW_ROUND`] of the engine's median. On a virtual disk
/// whose blocks the host fetches or caches on first read, the rate of the
/// same offsets climbs over the first rounds of a call, and the per-round
/// ratios then compare engines at different speeds of the device: such a
/// call's medians are not a steady figure.
pub(crate) fn unsteady(runs: &[RunResult]) -> Vec<String> {
    let mut notes = Vec::new();
    for r in runs {
        let v = &r.rounds;
        if v.len() < 3 || v.iter().any(|x| !x.is_finite()) {
            continue;
        }
        let mut sorted = v.clone();
        let Some(mid) = median(&mut sorted) else {
            continue;
        };
        let (first, last) = (v[0], v[v.len() - 1]);
        let rising = v.windows(2).all(|w| w[1] >= w[0]) && last >= WARMING * first;
        let low = sorted[0];
        let what = if rising {
            format!("its rounds only rose, from {first:.0} to {last:.0} a second")
        } else if mid > 0.0 && low < SLOW_ROUND * mid {
            format!(
                "a round ran at {low:.0} a second, {:.0}% of its median",
                100.0 * low / mid
            )
        } else {
            continue;
        };
        notes.push(format!(
            "note: {} ({} threads, hit target {}): {what}; the device's rate changed during the call, so its median and ratios are not a steady figure",
            r.engine,
            r.threads,
            pct(r.hit_target)
        ));
    }
    notes
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
        "x first",
        "rounds (IOPS)",
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
            r.mib_s().map_or("-".to_string(), |m| format!("{m:.1}")),
            us(r.out.lat.p50),
            us(r.out.lat.p99),
            us(r.out.lat.p999),
            us(r.out.lat.p9999),
            us(r.out.lat.max),
            per_mop(r.out.cpu_user_s, r.out.ops),
            per_mop(r.out.cpu_sys_s, r.out.ops),
            r.vs_first.map_or("-".to_string(), |x| format!("{x:.3}")),
            if r.rounds.is_empty() {
                "-".to_string()
            } else {
                r.rounds
                    .iter()
                    .map(|v| format!("{v:.0}"))
                    .collect::<Vec<_>>()
                    .join(" ")
            },
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
    use crate::bench::workload::Pattern;

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
            rounds: Vec::new(),
            vs_first: None,
            readahead: None,
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
            "rounds_iops",
            "vs_first_engine",
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
    fn a_setcache_run_adds_the_readahead_counters() {
        let mut r = sample();
        r.readahead = Some((1000, 900));
        let v = r.to_json();
        assert_eq!(v["readahead_pages"], 1000);
        assert_eq!(v["readahead_used"], 900);
        assert!(sample().to_json().get("readahead_pages").is_none());
    }

    fn with(engine: &str, ops: u64) -> RunResult {
        let mut r = sample();
        r.engine = engine.into();
        r.out.ops = ops; // over 2 s
        r
    }

    #[test]
    fn medians_keep_each_engines_middle_run_and_the_median_round_ratio() {
        let rounds = vec![
            vec![with("a", 200), with("b", 100)],
            vec![with("a", 100), with("b", 90)],
            vec![with("a", 300), with("b", 330)],
        ];
        let rows = medians(rounds);
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].engine, "a");
        assert_eq!(rows[0].iops(), 100.0);
        assert_eq!(rows[0].rounds, vec![100.0, 50.0, 150.0]);
        assert_eq!(rows[0].vs_first, None);
        assert_eq!(rows[1].engine, "b");
        assert_eq!(rows[1].iops(), 50.0);
        // Per-round ratios 0.5, 0.9, 1.1: the median is 0.9, not the ratio of
        // the median rows (0.5).
        let r = rows[1].vs_first.unwrap();
        assert!((r - 0.9).abs() < 1e-12, "{r}");
        let t = table(&rows);
        assert!(t.contains("0.900"), "{t}");
        assert!(t.contains("100 50 150"), "{t}");
        // One round: the rows come back unchanged.
        let one = medians(vec![vec![with("a", 10), with("b", 20)]]);
        assert_eq!(one.len(), 2);
        assert!(one[1].vs_first.is_none() && one[1].rounds.is_empty());
    }

    #[test]
    fn rounds_that_only_rise_or_dip_far_below_the_median_are_noted() {
        let with_rounds = |engine: &str, rounds: &[f64]| {
            let mut r = with(engine, 100);
            r.rounds = rounds.to_vec();
            r
        };
        let runs = [
            // Warming: never falls, and the last is 1.4x the first.
            with_rounds("warming", &[50.0, 55.0, 60.0, 66.0, 70.0]),
            // Steady, within 10% either way.
            with_rounds("steady", &[100.0, 93.0, 104.0, 98.0, 101.0]),
            // Rising, but by less than the factor.
            with_rounds("drift", &[100.0, 105.0, 110.0, 115.0, 120.0]),
            // One round at half the median.
            with_rounds("dip", &[100.0, 98.0, 50.0, 101.0, 99.0]),
            // Too few rounds to judge.
            with_rounds("short", &[10.0, 90.0]),
        ];
        let notes = unsteady(&runs);
        assert_eq!(notes.len(), 2, "{notes:?}");
        assert!(notes[0].starts_with("note: warming "), "{}", notes[0]);
        assert!(notes[0].contains("from 50 to 70"), "{}", notes[0]);
        assert!(notes[1].starts_with("note: dip "), "{}", notes[1]);
        assert!(notes[1].contains("50 a second, 51%"), "{}", notes[1]);
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
