//! The live progress line on a terminal (stderr, `\r`, about once a second).

use std::time::{Duration, Instant};

use super::driver::{Ctl, Timing};

/// The live `\r` line on a terminal, about once a second.
pub(crate) struct Progress {
    label: String,
    runtime: f64,
    bs: u64,
    last: Option<Instant>,
}

impl Progress {
    pub(crate) fn new(label: &str, timing: &Timing) -> Progress {
        Progress {
            label: label.to_string(),
            runtime: timing.runtime,
            bs: timing.bs,
            last: None,
        }
    }

    /// Hold the next update for a second from `t`.
    pub(crate) fn restart(&mut self, t: Instant) {
        self.last = Some(t);
    }

    pub(crate) fn update(&mut self, ctl: &Ctl, measuring_since: Option<Instant>) {
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
                let ops = ctl.total_ops();
                let iops = ops as f64 / secs;
                format!(
                    "{}: {:>3.0}/{} s  {:>10.0} IOPS  {:>9.1} MiB/s",
                    self.label,
                    secs,
                    self.runtime,
                    iops,
                    iops * self.bs as f64 / (1 << 20) as f64
                )
            }
        };
        say_raw!("\r\x1b[K{line}");
    }
}
