//! The engines a bench can compare.
//!
//! In-process engines run in the bench's own threads against the store; Linux
//! engines run in a child process (in a memory cgroup) against the store's backing
//! files. A new engine is a new variant here, a branch in `Engine::available`, and
//! a dispatch arm in `bench::run_one`.

use std::fmt;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Engine {
    /// The storage layer without a cache: a `Queue` per thread, `--iodepth` in flight.
    Direct,
    /// `Direct` reading into a pool of frames the size of `--cache-size` and
    /// copying each read out into the caller's buffer: the floor of a copying
    /// cache's miss path (no lookup, no eviction, no sharing).
    DirectCopy,
    /// pread/pwrite through the kernel page cache.
    LinuxBuffered,
    /// O_DIRECT pread/pwrite, one request at a time per thread.
    LinuxDirect,
    /// Loads and stores through a shared mapping of the backing files.
    Mmap,
    /// The set-associative page cache over the store.
    Setcache,
    /// The same cache divided among partitions, each served by a worker
    /// thread that the bench threads send bundles of requests to.
    SetcacheNuma,
}

/// Every engine name, in the order `--help` lists them.
pub(crate) const ALL: [Engine; 7] = [
    Engine::Direct,
    Engine::DirectCopy,
    Engine::LinuxBuffered,
    Engine::LinuxDirect,
    Engine::Mmap,
    Engine::Setcache,
    Engine::SetcacheNuma,
];

impl Engine {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Engine::Direct => "direct",
            Engine::DirectCopy => "direct-copy",
            Engine::LinuxBuffered => "linux-buffered",
            Engine::LinuxDirect => "linux-direct",
            Engine::Mmap => "mmap",
            Engine::Setcache => "setcache",
            Engine::SetcacheNuma => "setcache-numa",
        }
    }

    pub(crate) fn from_name(s: &str) -> Option<Engine> {
        ALL.into_iter().find(|e| e.name() == s)
    }

    /// Whether the engine runs in the Linux-engine child process.
    pub(crate) fn is_linux(self) -> bool {
        matches!(
            self,
            Engine::LinuxBuffered | Engine::LinuxDirect | Engine::Mmap
        )
    }

    /// Whether it keeps `--iodepth` requests in flight per thread (else one).
    /// Whether the engine reads and writes through a cache, so that any
    /// request size and offset works (the others need whole sectors).
    pub(crate) fn is_cached(self) -> bool {
        matches!(
            self,
            Engine::Setcache | Engine::SetcacheNuma | Engine::LinuxBuffered | Engine::Mmap
        )
    }

    pub(crate) fn is_async(self) -> bool {
        matches!(
            self,
            Engine::Direct | Engine::DirectCopy | Engine::Setcache | Engine::SetcacheNuma
        )
    }

    /// Whether the engine can run in this build.
    pub(crate) fn available(self) -> Result<(), String> {
        Ok(())
    }
}

impl fmt::Display for Engine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// clap value parser for one item of `--engine`.
pub(crate) fn engine_arg(s: &str) -> Result<Engine, String> {
    let engine = Engine::from_name(s.trim()).ok_or_else(|| {
        let names: Vec<&str> = ALL.iter().map(|e| e.name()).collect();
        format!("unknown engine {s:?}: expected one of {}", names.join(", "))
    })?;
    engine.available()?;
    Ok(engine)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for e in ALL {
            assert_eq!(Engine::from_name(e.name()), Some(e));
        }
        assert_eq!(engine_arg("mmap"), Ok(Engine::Mmap));
        assert_eq!(engine_arg("setcache"), Ok(Engine::Setcache));
        assert!(engine_arg("libaio").unwrap_err().contains("unknown engine"));
    }

    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        /// Any text names an engine or is refused with the list of names.
        #[test]
        fn engine_names_parse_or_are_refused(
            text in prop_oneof![
                ".{0,16}",
                "[ ]?(direct|direct-copy|linux-buffered|linux-direct|mmap|setcache|Mmap)[ ]?",
            ],
        ) {
            match engine_arg(&text) {
                Ok(e) => prop_assert_eq!(engine_arg(e.name()), Ok(e)),
                Err(msg) => prop_assert!(msg.contains("unknown engine"), "{msg}"),
            }
        }
    }
}
