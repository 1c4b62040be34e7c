//! `--plot FILE.svg`: IOPS against threads (or against hit ratio), one line per
//! engine, as a self-contained hand-written SVG.
//!
//! Color tells engines apart, the dash pattern thread counts (in a hit-ratio chart)
//! or hit targets (in a threads chart). Runs without an x value (fio in a hit-ratio
//! chart) are dotted horizontal reference lines.

use super::outcome::RunResult;
use super::size::format_size;
use super::svg::{Doc, nice_step, short_num, trim};

const W: f64 = 820.0;
const H: f64 = 500.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 210.0;
const TOP: f64 = 50.0;
const BOTTOM: f64 = 60.0;
const COLORS: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
];
const DASHES: [&str; 4] = ["", "8 4", "3 3", "10 3 2 3"];
const REFERENCE_DASH: &str = "2 4";

/// One line of the chart.
#[derive(Debug)]
struct Series {
    name: String,
    /// Index of the engine (the color).
    color: usize,
    /// Index of the thread count or hit target (the dash pattern).
    dash: usize,
    /// (x, IOPS), sorted by x.
    points: Vec<(f64, f64)>,
    /// No x value: drawn as a horizontal line at the mean.
    reference: bool,
}

/// Index of `item` in `list`, appending it if new.
fn index_of<T: PartialEq>(list: &mut Vec<T>, item: T) -> usize {
    list.iter().position(|e| *e == item).unwrap_or_else(|| {
        list.push(item);
        list.len() - 1
    })
}

/// Group runs into lines.
fn series(runs: &[RunResult], by_hit: bool) -> Vec<Series> {
    let multi_threads = runs.iter().any(|r| r.threads != runs[0].threads);
    let multi_hits = runs.iter().any(|r| r.hit_target != runs[0].hit_target);
    let (mut engines, mut groups): (Vec<&str>, Vec<String>) = (Vec::new(), Vec::new());
    let mut out: Vec<Series> = Vec::new();
    for r in runs {
        let group = match (by_hit, multi_threads, multi_hits) {
            (true, true, _) => format!("{} thr", r.threads),
            (false, _, true) => r
                .hit_target
                .map_or("no target".into(), |h| format!("hit {:.0}%", h * 100.0)),
            _ => String::new(),
        };
        let name = match group.as_str() {
            "" => r.engine.clone(),
            g => format!("{} ({g})", r.engine),
        };
        let (x, reference) = match (by_hit, r.hit_target) {
            (true, Some(h)) => (h * 100.0, false),
            (true, None) => (0.0, true),
            (false, _) => (r.threads as f64, false),
        };
        if let Some(s) = out.iter_mut().find(|s| s.name == name) {
            s.points.push((x, r.iops()));
            continue;
        }
        out.push(Series {
            name,
            color: index_of(&mut engines, r.engine.as_str()),
            dash: index_of(&mut groups, group),
            points: vec![(x, r.iops())],
            reference,
        });
    }
    for s in &mut out {
        s.points.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    out
}

/// The chart of `runs`; by hit ratio when `by_hit`, else by threads.
pub(crate) fn svg(runs: &[RunResult], by_hit: bool) -> String {
    let lines = series(runs, by_hit);
    let mut xs: Vec<f64> = lines
        .iter()
        .filter(|s| !s.reference)
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .collect();
    xs.sort_by(f64::total_cmp);
    xs.dedup();
    let top_value = lines
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .fold(0.0, f64::max);
    let step = nice_step(top_value, 5.0);
    let ymax = ((top_value / step).ceil() * step).max(step);
    let (pw, ph) = (W - LEFT - RIGHT, H - TOP - BOTTOM);
    let bottom = TOP + ph;
    // Distinct x values are spaced evenly (thread counts are usually 1, 2, 4, 8...).
    let xpos = |x: f64| match xs.iter().position(|&v| v == x) {
        Some(i) if xs.len() > 1 => LEFT + pw * i as f64 / (xs.len() - 1) as f64,
        _ => LEFT + pw / 2.0,
    };
    let ypos = |y: f64| TOP + ph * (1.0 - y / ymax);
    let x_label = if by_hit {
        "target hit ratio (%)"
    } else {
        "threads"
    };
    let mut d = Doc::new(W, H);
    if let Some(r) = runs.first() {
        let title = format!("IOPS vs {x_label}: {} {}", r.rw, format_size(r.bs));
        d.text(
            (LEFT + pw / 2.0, 28.0),
            "middle",
            r#" font-size="16""#,
            &title,
        );
    }
    // Grid, ticks and axes.
    let mut y = 0.0;
    while y <= ymax + step / 2.0 {
        d.line((LEFT, ypos(y)), (LEFT + pw, ypos(y)), "#ddd", 1.0, "");
        d.text((LEFT - 8.0, ypos(y) + 4.0), "end", "", &short_num(y));
        y += step;
    }
    for &x in &xs {
        d.line((xpos(x), bottom), (xpos(x), bottom + 6.0), "black", 1.0, "");
        d.text((xpos(x), bottom + 20.0), "middle", "", &trim(x));
    }
    d.line((LEFT, TOP), (LEFT, bottom), "black", 1.0, "");
    d.line((LEFT, bottom), (LEFT + pw, bottom), "black", 1.0, "");
    d.text((LEFT + pw / 2.0, H - 15.0), "middle", "", x_label);
    let rotate = format!(r#" transform="rotate(-90 20 {:.1})""#, TOP + ph / 2.0);
    d.text((20.0, TOP + ph / 2.0), "middle", &rotate, "IOPS");
    // Lines, markers and the legend.
    for (i, s) in lines.iter().enumerate() {
        let color = COLORS[s.color % COLORS.len()];
        let dash = if s.reference {
            REFERENCE_DASH
        } else {
            DASHES[s.dash % DASHES.len()]
        };
        if s.reference {
            let mean = s.points.iter().map(|p| p.1).sum::<f64>() / s.points.len() as f64;
            d.polyline(&[(LEFT, ypos(mean)), (LEFT + pw, ypos(mean))], color, dash);
        } else {
            let pts: Vec<(f64, f64)> = s.points.iter().map(|&(x, y)| (xpos(x), ypos(y))).collect();
            d.polyline(&pts, color, dash);
            for (&p, &(_, iops)) in pts.iter().zip(&s.points) {
                d.circle(p, color, &format!("{}: {iops:.0} IOPS", s.name));
            }
        }
        let (lx, ly) = (W - RIGHT + 20.0, TOP + 10.0 + 22.0 * i as f64);
        d.line((lx, ly), (lx + 24.0, ly), color, 3.0, dash);
        d.text((lx + 32.0, ly + 4.0), "start", "", &s.name);
    }
    d.finish()
}

#[cfg(test)]
mod tests {
    use super::super::outcome::{Lat, Outcome};
    use super::super::svg::assert_well_formed;
    use super::super::workload::Pattern;
    use super::*;

    fn run(engine: &str, threads: usize, hit: Option<f64>, iops: u64) -> RunResult {
        RunResult {
            engine: engine.into(),
            rw: Pattern::RandRead,
            bs: 4096,
            threads,
            iodepth: 1,
            cache_size: None,
            hit_target: hit,
            out: Outcome {
                ops: iops,
                reads: iops,
                secs: 1.0,
                lat: Lat::default(),
                cpu_user_s: 0.0,
                cpu_sys_s: 0.0,
                hit_ratio: None,
                interrupted: false,
            },
            rounds: Vec::new(),
            vs_first: None,
            readahead: None,
        }
    }

    #[test]
    fn draws_one_line_per_engine() {
        let runs = vec![
            run("direct", 1, None, 50_000),
            run("direct", 2, None, 90_000),
            run("mmap<&>", 1, None, 20_000),
            run("mmap<&>", 2, None, 30_000),
        ];
        let s = svg(&runs, false);
        assert_well_formed(&s);
        assert_eq!(s.matches("<polyline").count(), 2);
        assert_eq!(s.matches("<circle").count(), 4);
        assert!(s.contains("mmap&lt;&amp;&gt;"));
        assert!(s.contains(">100k<"), "y ticks reach past the top value");
    }

    #[test]
    fn plots_by_hit_ratio_with_reference_lines() {
        let mut runs = vec![
            run("linux-buffered", 1, Some(0.5), 10),
            run("linux-buffered", 1, Some(0.9), 30),
        ];
        let s = svg(&runs, true);
        assert_well_formed(&s);
        assert!(s.contains("target hit ratio"));
        assert_well_formed(&svg(&[run("direct", 4, None, 0)], false));
        // A run without a target (fio) is a dotted reference line, not a point at 0.
        runs.push(run("fio", 1, None, 20));
        let s = svg(&runs, true);
        assert_well_formed(&s);
        assert_eq!(s.matches("<circle").count(), 2);
        assert!(s.contains(r#"stroke-dasharray="2 4""#));
        let x_tick = |v: &str| format!(r#"y="{:.1}" text-anchor="middle">{v}<"#, H - BOTTOM + 20.0);
        assert!(s.contains(&x_tick("50")) && s.contains(&x_tick("90")));
        assert!(!s.contains(&x_tick("0")), "no x tick at 0");
    }

    #[test]
    fn colors_follow_engines_and_dashes_thread_counts() {
        let runs = vec![
            run("direct", 1, Some(0.5), 10),
            run("direct", 2, Some(0.5), 20),
            run("mmap", 1, Some(0.5), 5),
        ];
        let lines = series(&runs, true);
        assert_eq!(lines.len(), 3);
        assert_eq!((lines[0].color, lines[0].dash), (0, 0));
        assert_eq!((lines[1].color, lines[1].dash), (0, 1));
        assert_eq!((lines[2].color, lines[2].dash), (1, 0));
        assert_eq!(lines[1].name, "direct (2 thr)");
    }
}
