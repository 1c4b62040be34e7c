//! What one run measured, in whatever process it ran, and its JSON form (the
//! Linux-engine child sends it to the bench this way).

use hdrhistogram::Histogram;
use serde_json::{Value, json};

use super::driver::Measured;
use super::workload::Pattern;

/// Latency percentiles in microseconds.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Lat {
    pub(crate) p50: f64,
    pub(crate) p99: f64,
    pub(crate) p999: f64,
    pub(crate) p9999: f64,
    pub(crate) max: f64,
}

impl Lat {
    /// From a histogram of nanoseconds.
    pub(crate) fn from_hist(h: &Histogram<u64>) -> Lat {
        if h.is_empty() {
            return Lat::default();
        }
        let us = |ns: u64| ns as f64 / 1000.0;
        Lat {
            p50: us(h.value_at_quantile(0.5)),
            p99: us(h.value_at_quantile(0.99)),
            p999: us(h.value_at_quantile(0.999)),
            p9999: us(h.value_at_quantile(0.9999)),
            max: us(h.max()),
        }
    }

    pub(crate) fn to_json(&self) -> Value {
        json!({"p50": self.p50, "p99": self.p99, "p999": self.p999, "p9999": self.p9999, "max": self.max})
    }

    pub(crate) fn from_json(v: &Value) -> Option<Lat> {
        let f = |k: &str| v.get(k).and_then(Value::as_f64);
        Some(Lat {
            p50: f("p50")?,
            p99: f("p99")?,
            p999: f("p999")?,
            p9999: f("p9999")?,
            max: f("max")?,
        })
    }
}

/// What one run measured, whatever the engine (and whichever process ran it).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Outcome {
    pub(crate) ops: u64,
    pub(crate) reads: u64,
    pub(crate) secs: f64,
    pub(crate) lat: Lat,
    pub(crate) cpu_user_s: f64,
    pub(crate) cpu_sys_s: f64,
    /// Measured hit ratio of reads; `None` when the run made no reads.
    pub(crate) hit_ratio: Option<f64>,
    pub(crate) interrupted: bool,
}

/// Hit ratio from the bytes the block layer read for `reads` reads of `bs`
/// bytes: a miss reads at least a whole 4 KiB page, so a read of less counts
/// as one of a page.
pub(crate) fn hit_from_read_bytes(read_bytes: u64, reads: u64, bs: u64) -> Option<f64> {
    if reads == 0 {
        return None;
    }
    let asked = reads as f64 * bs.max(4096) as f64;
    Some((1.0 - read_bytes as f64 / asked).clamp(0.0, 1.0))
}

impl Outcome {
    pub(crate) fn from_measured(m: &Measured, hit_ratio: Option<f64>) -> Outcome {
        Outcome {
            ops: m.stats.ops,
            reads: m.stats.reads,
            secs: m.secs,
            lat: Lat::from_hist(&m.stats.hist),
            cpu_user_s: m.cpu_user_s,
            cpu_sys_s: m.cpu_sys_s,
            hit_ratio: if m.stats.reads == 0 { None } else { hit_ratio },
            interrupted: m.interrupted,
        }
    }

    pub(crate) fn to_json(&self) -> Value {
        json!({
            "ops": self.ops, "reads": self.reads, "secs": self.secs, "lat_us": self.lat.to_json(),
            "cpu_user_s": self.cpu_user_s, "cpu_sys_s": self.cpu_sys_s,
            "hit_ratio": self.hit_ratio, "interrupted": self.interrupted,
        })
    }

    pub(crate) fn from_json(v: &Value) -> Option<Outcome> {
        Some(Outcome {
            ops: v.get("ops")?.as_u64()?,
            reads: v.get("reads")?.as_u64()?,
            secs: v.get("secs")?.as_f64()?,
            lat: Lat::from_json(v.get("lat_us")?)?,
            cpu_user_s: v.get("cpu_user_s")?.as_f64()?,
            cpu_sys_s: v.get("cpu_sys_s")?.as_f64()?,
            hit_ratio: v.get("hit_ratio").and_then(Value::as_f64),
            interrupted: v.get("interrupted")?.as_bool()?,
        })
    }
}

#[cfg(test)]
pub(in crate::bench) mod tests {
    use super::*;

    #[test]
    fn outcome_round_trips_through_json() {
        let o = Outcome {
            ops: 10,
            reads: 7,
            secs: 1.5,
            lat: Lat {
                p50: 1.0,
                p99: 2.0,
                p999: 3.0,
                p9999: 4.0,
                max: 5.0,
            },
            cpu_user_s: 0.25,
            cpu_sys_s: 0.5,
            hit_ratio: Some(0.75),
            interrupted: true,
        };
        assert_eq!(Outcome::from_json(&o.to_json()), Some(o.clone()));
        let none = Outcome {
            hit_ratio: None,
            ..o
        };
        assert_eq!(Outcome::from_json(&none.to_json()), Some(none));
    }

    #[test]
    fn hit_ratio_from_io_counters() {
        assert_eq!(hit_from_read_bytes(0, 0, 4096), None);
        assert_eq!(hit_from_read_bytes(0, 10, 4096), Some(1.0));
        assert_eq!(hit_from_read_bytes(20 * 4096, 40, 4096), Some(0.5));
        assert_eq!(hit_from_read_bytes(100 * 4096, 40, 4096), Some(0.0));
        // Reads of 512 bytes, a tenth of them misses of a page each.
        assert_eq!(hit_from_read_bytes(4 * 4096, 40, 512), Some(0.9));
    }

    use crate::test_alloc::{input_bound, largest_alloc};
    use proptest::prelude::*;

    /// Any JSON value, a few levels deep: numbers at their limits (past 2^64,
    /// negative, fractional, huge), strings, nulls, arrays, objects.
    pub(in crate::bench) fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            any::<f64>()
                .prop_filter("JSON has no NaN or infinity", |f| f.is_finite())
                .prop_map(Value::from),
            prop_oneof![Just(u64::MAX), Just(0), Just(1 << 53)].prop_map(Value::from),
            ".{0,8}".prop_map(Value::from),
        ];
        leaf.prop_recursive(3, 24, 6, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                proptest::collection::btree_map("[a-z_0-9.]{0,8}", inner, 0..6)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// `v` with some of its top-level fields (among `keys` and others)
    /// replaced by any value or removed.
    pub(in crate::bench) fn mutated(
        v: Value,
        keys: &'static [&'static str],
    ) -> impl Strategy<Value = Value> {
        let key = prop_oneof![
            4 => proptest::sample::select(keys).prop_map(str::to_string),
            1 => "[a-z_]{0,6}",
        ];
        let change = (key, proptest::option::of(json_value()));
        proptest::collection::vec(change, 0..4).prop_map(move |changes| {
            let mut v = v.clone();
            if let Value::Object(m) = &mut v {
                for (k, new) in changes {
                    match new {
                        Some(x) => m.insert(k, x),
                        None => m.remove(&k),
                    };
                }
            }
            v
        })
    }

    fn sample() -> Outcome {
        Outcome {
            ops: 10,
            reads: 7,
            secs: 1.5,
            lat: Lat {
                p50: 1.0,
                p99: 2.0,
                p999: 3.0,
                p9999: 4.0,
                max: 5.0,
            },
            cpu_user_s: 0.25,
            cpu_sys_s: 0.5,
            hit_ratio: Some(0.75),
            interrupted: false,
        }
    }

    const KEYS: &[&str] = &[
        "ops",
        "reads",
        "secs",
        "lat_us",
        "cpu_user_s",
        "cpu_sys_s",
        "hit_ratio",
        "interrupted",
    ];

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// The child's answer with any fields is an outcome that survives a round trip, or none.
        #[test]
        fn any_answer_is_an_outcome_or_none(v in mutated(sample().to_json(), KEYS)) {
            let text = v.to_string();
            let (o, largest) = largest_alloc(|| {
                serde_json::from_str::<Value>(&text)
                    .ok()
                    .and_then(|v| Outcome::from_json(&v))
            });
            prop_assert!(largest <= input_bound(text.len()));
            if let Some(o) = o {
                prop_assert_eq!(Outcome::from_json(&o.to_json()), Some(o));
            }
        }
    }
}

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
    /// With `--repeat`: the IOPS of every round, in order (this row is the median one).
    pub(crate) rounds: Vec<f64>,
    /// With `--repeat`: the median over rounds of this engine's IOPS divided by
    /// the first engine's IOPS in the same round.
    pub(crate) vs_first: Option<f64>,
    /// The setcache engine's readahead during the measured period: pages
    /// read ahead, and of them those a sequential reader then read.
    pub(crate) readahead: Option<(u64, u64)>,
}

impl RunResult {
    pub(crate) fn iops(&self) -> f64 {
        if self.out.secs > 0.0 {
            self.out.ops as f64 / self.out.secs
        } else {
            0.0
        }
    }

    /// Bytes a second as `--bs` blocks; none for a graph walk, whose reads
    /// are records of 16 to 640 bytes (not counted one by one).
    pub(crate) fn mib_s(&self) -> Option<f64> {
        (self.rw != Pattern::GraphWalk).then(|| self.iops() * self.bs as f64 / (1u64 << 20) as f64)
    }

    /// The run as JSON; a setcache run adds `readahead_pages` and
    /// `readahead_used`.
    pub(crate) fn to_json(&self) -> Value {
        let mut v = json!({
            "engine": self.engine, "rw": self.rw.to_string(), "bs": self.bs,
            "threads": self.threads, "iodepth": self.iodepth, "cache_size": self.cache_size,
            "hit_ratio_target": self.hit_target, "hit_ratio": self.out.hit_ratio,
            "iops": self.iops(), "mib_s": self.mib_s(), "lat_us": self.out.lat.to_json(),
            "cpu_user_s": self.out.cpu_user_s, "cpu_sys_s": self.out.cpu_sys_s, "ops": self.out.ops,
            "rounds_iops": self.rounds, "vs_first_engine": self.vs_first,
        });
        if let (Some((pages, used)), Some(o)) = (self.readahead, v.as_object_mut()) {
            o.insert("readahead_pages".into(), pages.into());
            o.insert("readahead_used".into(), used.into());
        }
        v
    }
}
