//! Memory cgroups that cap the Linux engines' page cache at `--cache-size`.
//!
//! For each run the bench makes a child cgroup `setcache-bench-<pid>-<n>` under its
//! own memory cgroup (v1: `memory.limit_in_bytes`; v2: `memory.max`, when the
//! unified hierarchy offers the memory controller), moves the engine's child
//! process into it before the child opens a data file, and removes it when the run
//! ends (also on error: `Drop`). The limit is set once the child has allocated what
//! it needs and before it touches data: the cgroup's usage at that moment (the
//! process itself) plus the cache size plus [`slack`] for what the process still
//! grows by (thread stacks, histogram pages). The page cache then gets the cache
//! size, give or take the slack.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

pub(crate) use setcache::cache::{mount_of, own_cgroup};

/// Where the bench's own memory cgroup is.
#[derive(Clone, Debug)]
pub(crate) struct Hierarchy {
    dir: PathBuf,
    v1: bool,
}

/// Memory the child may still grow by once it is ready: 256 KiB plus 64 KiB per
/// thread (stack and histogram pages touched during the run). Too little only
/// shrinks the cache a bit (page cache is reclaimed before anything is killed).
pub(crate) fn slack(threads: usize) -> u64 {
    (256 << 10) + threads as u64 * (64 << 10)
}

fn join_cgroup(mount: &str, root: &str, path: &str) -> PathBuf {
    let rel = if root != "/" {
        path.strip_prefix(root).unwrap_or(path)
    } else {
        path
    };
    Path::new(mount).join(rel.trim_start_matches('/'))
}

/// Find a memory cgroup hierarchy the bench may create children in, or say why not.
pub(crate) fn detect() -> Result<Hierarchy, String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err("not running as root".to_string());
    }
    let cg =
        fs::read_to_string("/proc/self/cgroup").map_err(|e| format!("/proc/self/cgroup: {e}"))?;
    let mi = fs::read_to_string("/proc/self/mountinfo")
        .map_err(|e| format!("/proc/self/mountinfo: {e}"))?;
    if let (Some(path), Some((mount, root))) =
        (own_cgroup(&cg, Some("memory")), mount_of(&mi, true))
    {
        let dir = join_cgroup(&mount, &root, &path);
        if dir.join("memory.limit_in_bytes").exists() {
            return Ok(Hierarchy { dir, v1: true });
        }
    }
    if let (Some(path), Some((mount, root))) = (own_cgroup(&cg, None), mount_of(&mi, false)) {
        let top =
            fs::read_to_string(Path::new(&mount).join("cgroup.controllers")).unwrap_or_default();
        if top.split_whitespace().any(|c| c == "memory") {
            let dir = join_cgroup(&mount, &root, &path);
            let sub = dir.join("cgroup.subtree_control");
            let enabled = fs::read_to_string(&sub).unwrap_or_default();
            if !enabled.split_whitespace().any(|c| c == "memory") {
                fs::write(&sub, "+memory").map_err(|e| {
                    format!(
                        "cannot enable the memory controller in {}: {e}",
                        dir.display()
                    )
                })?;
            }
            return Ok(Hierarchy { dir, v1: false });
        }
    }
    Err("no memory cgroup controller available".to_string())
}

/// One run's cgroup; removed on drop.
pub(crate) struct MemCgroup {
    dir: PathBuf,
    v1: bool,
}

impl MemCgroup {
    /// Make a child cgroup, not limited yet (see [`MemCgroup::set_limit`]).
    pub(crate) fn create(h: &Hierarchy) -> Result<MemCgroup, String> {
        static SEQ: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "setcache-bench-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        );
        let dir = h.dir.join(name);
        fs::create_dir(&dir).map_err(|e| format!("cannot create cgroup {}: {e}", dir.display()))?;
        let cg = MemCgroup { dir, v1: h.v1 };
        if !cg.v1 {
            // Page cache must not escape to swap.
            let _ = fs::write(cg.dir.join("memory.swap.max"), "0");
        }
        Ok(cg)
    }

    /// Cap the memory of the cgroup's processes (page cache included).
    pub(crate) fn set_limit(&self, bytes: u64) -> Result<(), String> {
        let knob = if self.v1 {
            "memory.limit_in_bytes"
        } else {
            "memory.max"
        };
        self.write(knob, &bytes.to_string())
    }

    /// Memory charged to the cgroup now.
    pub(crate) fn usage(&self) -> Result<u64, String> {
        let knob = if self.v1 {
            "memory.usage_in_bytes"
        } else {
            "memory.current"
        };
        let p = self.dir.join(knob);
        fs::read_to_string(&p)
            .ok()
            .and_then(|t| t.trim().parse().ok())
            .ok_or_else(|| format!("cannot read {}", p.display()))
    }

    fn write(&self, knob: &str, value: &str) -> Result<(), String> {
        let p = self.dir.join(knob);
        fs::write(&p, value).map_err(|e| format!("cannot write {value} to {}: {e}", p.display()))
    }

    /// Move process `pid` into the cgroup.
    pub(crate) fn add_pid(&self, pid: u32) -> Result<(), String> {
        self.write("cgroup.procs", &pid.to_string())
    }

    pub(crate) fn path(&self) -> &Path {
        &self.dir
    }
}

impl Drop for MemCgroup {
    fn drop(&mut self) {
        if self.v1 {
            // Reclaim what the run cached, so the next run starts cold.
            let _ = fs::write(self.dir.join("memory.force_empty"), "0");
        }
        // The cgroup is busy until its exited process is fully reaped; retry a while.
        for _ in 0..100 {
            match fs::remove_dir(&self.dir) {
                Ok(()) => return,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
        say!("warning: could not remove cgroup {}", self.dir.display());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const V1: &str = "9:name=systemd:/\n4:memory:/process_api/abc\n1:cpu,cpuacct:/x\n0::/\n";
    const V2: &str = "0::/user.slice/session-1.scope\n";
    const MOUNTS: &str = "\
25 30 0:22 / /sys/fs/cgroup/unified rw,nosuid - cgroup2 cgroup2 rw,nsdelegate
31 30 0:27 / /sys/fs/cgroup/memory rw,nosuid shared:14 - cgroup cgroup rw,memory
32 30 0:28 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct
";

    #[test]
    fn finds_own_cgroups() {
        assert_eq!(
            own_cgroup(V1, Some("memory")).as_deref(),
            Some("/process_api/abc")
        );
        assert_eq!(own_cgroup(V1, Some("cpuacct")).as_deref(), Some("/x"));
        assert_eq!(own_cgroup(V1, None).as_deref(), Some("/"));
        assert_eq!(own_cgroup(V2, Some("memory")), None);
        assert_eq!(
            own_cgroup(V2, None).as_deref(),
            Some("/user.slice/session-1.scope")
        );
    }

    #[test]
    fn finds_mounts_and_joins_paths() {
        let (m, r) = mount_of(MOUNTS, true).unwrap();
        assert_eq!((m.as_str(), r.as_str()), ("/sys/fs/cgroup/memory", "/"));
        let (m2, _) = mount_of(MOUNTS, false).unwrap();
        assert_eq!(m2, "/sys/fs/cgroup/unified");
        assert_eq!(
            join_cgroup(&m, &r, "/process_api/abc"),
            PathBuf::from("/sys/fs/cgroup/memory/process_api/abc")
        );
        assert_eq!(join_cgroup("/cg", "/a", "/a/b"), PathBuf::from("/cg/b"));
        assert_eq!(join_cgroup("/cg", "/", "/"), PathBuf::from("/cg/"));
    }

    #[test]
    fn slack_grows_with_threads() {
        assert_eq!(slack(0), 256 << 10);
        assert!(slack(4) > slack(1));
    }
}
