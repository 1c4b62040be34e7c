//! The live progress line on a terminal (stderr, `\r`, about once a second).

use std::time::{Duration, Instant};

/// The live `\r` line on a terminal, about once a second.
pub(crate) struct Progress {
    label: String,
    runtime: f64,
    bs: u64,
    last: Option<Instant>,
}

impl Progress {
    /// A line labelled `label` for a run of `runtime` seconds of `bs`-byte requests.
    pub(crate) fn new(label: &str, runtime: f64, bs: u64) -> Progress {
        Progress {
            label: label.to_string(),
            runtime,
            bs,
            last: None,
        }
    }

    /// Hold the next update for a second from `t`.
    pub(crate) fn restart(&mut self, t: Instant) {
        self.last = Some(t);
    }

    /// Redraw the line if a second has passed; `total_ops` counts the requests
    /// done so far (asked only then).
    pub(crate) fn update(
        &mut self,
        total_ops: impl FnOnce() -> u64,
        measuring_since: Option<Instant>,
    ) {
        if self
            .last
            .is_some_and(|l| l.elapsed() < Duration::from_secs(1))
        {
            return;
        }
        self.last = Some(Instant::now());
        let line = match measuring_since {
            None => format!("{}: ramping up", self.label),
            Some(t0) => {
                let secs = t0.elapsed().as_secs_f64().max(1e-3);
                let ops = total_ops();
                let iops = ops as f64 / secs;
                let mib = if self.bs > 0 {
                    format!("  {:>9.1} MiB/s", iops * self.bs as f64 / (1 << 20) as f64)
                } else {
                    String::new()
                };
                format!(
                    "{}: {:>3.0}/{} s  {:>10.0} IOPS{mib}",
                    self.label, secs, self.runtime, iops
                )
            }
        };
        say_raw!("\r\x1b[K{line}");
    }
}
