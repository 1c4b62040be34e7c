//! The I/O pattern (`--rw`) and the offset distribution (`--dist`).

use std::fmt;

/// The I/O pattern, named as fio names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pattern {
    RandRead,
    RandWrite,
    RandRw,
    Read,
    Write,
    /// Small reads of a graph database's records along a walk (see
    /// `workload::Walk`).
    GraphWalk,
}

impl Pattern {
    pub(crate) fn parse(s: &str) -> Result<Pattern, String> {
        Ok(match s {
            "randread" => Pattern::RandRead,
            "randwrite" => Pattern::RandWrite,
            "randrw" => Pattern::RandRw,
            "read" => Pattern::Read,
            "write" => Pattern::Write,
            "graphwalk" => Pattern::GraphWalk,
            _ => {
                return Err(format!(
                    "unknown --rw {s:?}: expected randread, randwrite, randrw, read, write or graphwalk"
                ));
            }
        })
    }

    pub(crate) fn is_random(self) -> bool {
        matches!(
            self,
            Pattern::RandRead | Pattern::RandWrite | Pattern::RandRw
        )
    }

    pub(crate) fn writes(self) -> bool {
        !matches!(self, Pattern::RandRead | Pattern::Read | Pattern::GraphWalk)
    }

    #[cfg(test)]
    pub(crate) fn reads(self) -> bool {
        !matches!(self, Pattern::RandWrite | Pattern::Write)
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Pattern::RandRead => "randread",
            Pattern::RandWrite => "randwrite",
            Pattern::RandRw => "randrw",
            Pattern::Read => "read",
            Pattern::Write => "write",
            Pattern::GraphWalk => "graphwalk",
        })
    }
}

/// How random offsets are drawn.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Dist {
    Uniform,
    Zipf(f64),
}

impl Dist {
    pub(crate) fn parse(s: &str) -> Result<Dist, String> {
        if s == "uniform" {
            return Ok(Dist::Uniform);
        }
        let Some(theta) = s.strip_prefix("zipf:") else {
            return Err(format!(
                "unknown --dist {s:?}: expected uniform or zipf:THETA (e.g. zipf:0.99)"
            ));
        };
        match theta.parse::<f64>() {
            Ok(t) if t.is_finite() && t > 0.0 && t <= 100.0 => Ok(Dist::Zipf(t)),
            _ => Err(format!(
                "bad zipf theta {theta:?} in --dist {s:?}: it must be a number above 0 and at most 100 (e.g. 0.99 or 1.2)"
            )),
        }
    }
}

impl fmt::Display for Dist {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dist::Uniform => f.write_str("uniform"),
            Dist::Zipf(t) => write!(f, "zipf:{t}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parsers_reject_bad_values() {
        assert_eq!(Dist::parse("zipf:0.99"), Ok(Dist::Zipf(0.99)));
        assert_eq!(Dist::parse("uniform"), Ok(Dist::Uniform));
        for bad in [
            "zipf:0", "zipf:-1", "zipf:", "zipf:x", "zipf", "pareto", "zipf:nan",
        ] {
            assert!(Dist::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(Pattern::parse("randrw"), Ok(Pattern::RandRw));
        assert!(Pattern::parse("trim").is_err());
    }

    use crate::test_alloc::{input_bound, largest_alloc};
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// `--rw` and `--dist` take any text to a value that prints back to itself, or an error.
        #[test]
        fn patterns_and_distributions_parse_or_are_refused(
            text in prop_oneof![
                ".{0,16}",
                "(zipf:)?[-+]?[0-9]{0,4}(\\.[0-9]{0,3})?(e[-+]?[0-9]{1,3})?",
                "(rand)?(read|write|rw)|uniform|zipf:(nan|inf|1e-320)",
            ],
        ) {
            let ((pattern, dist), largest) =
                largest_alloc(|| (Pattern::parse(&text), Dist::parse(&text)));
            prop_assert!(largest <= input_bound(text.len()));
            if let Ok(p) = pattern {
                prop_assert_eq!(Pattern::parse(&p.to_string()), Ok(p));
            }
            if let Ok(d) = dist {
                if let Dist::Zipf(t) = d {
                    prop_assert!(t > 0.0 && t <= 100.0);
                }
                prop_assert_eq!(Dist::parse(&d.to_string()), Ok(d));
            }
        }
    }
}
