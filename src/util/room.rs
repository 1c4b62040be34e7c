//! How much memory this process could still get, so that a cache (or a
//! store's registered buffers) too large to fit is refused when it is made
//! rather than killed by the kernel once full.
//!
//! Two limits apply, and the smaller counts:
//!
//! * the machine's: `MemAvailable` plus `SwapFree` from `/proc/meminfo`;
//! * the memory cgroup's, if the process's cgroup or one of its ancestors has
//!   a limit: the limit minus what is charged to it, not counting the file
//!   pages on its LRU lists, which the kernel reclaims before it kills
//!   anything (as `MemAvailable` counts the machine's page cache). Version 1
//!   reads `memory.limit_in_bytes`, `memory.usage_in_bytes` and
//!   `memory.stat`; version 2 `memory.max`, `memory.current` and
//!   `memory.stat`, for the cgroup named in `/proc/self/cgroup`, found
//!   through `/proc/self/mountinfo`.
//!
//! Whatever cannot be read is left out; when nothing can, nothing is refused.

use crate::util::human_size;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// Memory this process could still get, and where the figure comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryRoom {
    /// Bytes: the smaller of the machine's room and its memory cgroups'.
    pub bytes: u64,
    /// How it was found, for messages: e.g. "MemAvailable 22.8 GiB + SwapFree
    /// 0 B; memory cgroup: no limit".
    pub sources: String,
}

/// What the machine and the process's memory cgroup can give now, or `None`
/// when none of it can be read.
pub fn memory_room() -> Option<MemoryRoom> {
    room_from(&|p: &Path| crate::util::fds::read_text(p))
}

/// `Ok` if `needed` bytes fit in [`memory_room`] (or it cannot be read),
/// else [`Error::NotEnoughMemory`] naming `what()` and both figures.
pub fn check_memory(needed: u64, what: impl FnOnce() -> String) -> Result<()> {
    match memory_room() {
        Some(room) if needed > room.bytes => Err(Error::NotEnoughMemory {
            what: what(),
            needed,
            available: room.bytes,
            sources: room.sources,
        }),
        _ => Ok(()),
    }
}

/// The reader of a file's text (the real file system, or a test's table).
type Read<'a> = &'a dyn Fn(&Path) -> Option<String>;

/// [`memory_room`] over the files `read` returns.
fn room_from(read: Read<'_>) -> Option<MemoryRoom> {
    let mut bytes: Option<u64> = None;
    let mut sources = Vec::new();
    if let Some((avail, swap)) = read(Path::new("/proc/meminfo")).and_then(|t| meminfo(&t)) {
        bytes = Some(avail.saturating_add(swap));
        sources.push(format!(
            "MemAvailable {} + SwapFree {}",
            human_size(avail),
            human_size(swap)
        ));
    }
    match cgroup_room(read) {
        Some(CgroupRoom::Limited {
            room,
            limit,
            charged,
            file,
            dir,
        }) => {
            bytes = Some(bytes.map_or(room, |b| b.min(room)));
            sources.push(format!(
                "memory cgroup limit {} with {} charged, {} of it reclaimable file pages ({})",
                human_size(limit),
                human_size(charged),
                human_size(file),
                dir.display()
            ));
        }
        Some(CgroupRoom::Unlimited) => sources.push("memory cgroup: no limit".to_string()),
        None => {}
    }
    bytes.map(|bytes| MemoryRoom {
        bytes,
        sources: sources.join("; "),
    })
}

/// `(MemAvailable, SwapFree)` in bytes from `/proc/meminfo` text (SwapFree 0
/// when absent).
fn meminfo(text: &str) -> Option<(u64, u64)> {
    let field = |name: &str| {
        text.lines().find_map(|l| {
            let rest = l.strip_prefix(name)?.strip_prefix(':')?;
            let mut it = rest.split_whitespace();
            let n: u64 = it.next()?.parse().ok()?;
            let unit = match it.next() {
                None => 1,
                Some(u) if u.eq_ignore_ascii_case("kb") => 1024,
                Some(_) => return None,
            };
            n.checked_mul(unit)
        })
    };
    Some((field("MemAvailable")?, field("SwapFree").unwrap_or(0)))
}

/// What the memory cgroups say.
#[derive(Debug, PartialEq, Eq)]
enum CgroupRoom {
    /// The tightest limited level: its room, limit, charge, file pages, directory.
    Limited {
        room: u64,
        limit: u64,
        charged: u64,
        file: u64,
        dir: PathBuf,
    },
    /// A memory cgroup was found and no level of it has a limit.
    Unlimited,
}

/// A v1 limit at or above this is "no limit" (the kernel shows 2^63 rounded
/// down to a page).
const V1_UNLIMITED: u64 = 1 << 62;

fn cgroup_room(read: Read<'_>) -> Option<CgroupRoom> {
    let own = read(Path::new("/proc/self/cgroup"))?;
    let mounts = read(Path::new("/proc/self/mountinfo")).unwrap_or_default();
    let mut found = false;
    let mut best: Option<CgroupRoom> = None;
    let mut consider = |dir: &Path, limit: u64, charged: u64, file: u64| {
        let room = limit.saturating_sub(charged.saturating_sub(file));
        if !matches!(&best, Some(CgroupRoom::Limited { room: r, .. }) if *r <= room) {
            best = Some(CgroupRoom::Limited {
                room,
                limit,
                charged,
                file,
                dir: dir.to_path_buf(),
            });
        }
    };
    let num = |dir: &Path, name: &str| read(&dir.join(name))?.trim().parse::<u64>().ok();
    if let Some(path) = own_cgroup(&own, Some("memory")) {
        let (mount, root) = mount_of(&mounts, true)
            .unwrap_or_else(|| ("/sys/fs/cgroup/memory".to_string(), "/".to_string()));
        for dir in levels(&mount, &root, &path) {
            let Some(limit) = num(&dir, "memory.limit_in_bytes") else {
                continue;
            };
            found = true;
            let Some(usage) = num(&dir, "memory.usage_in_bytes") else {
                continue;
            };
            if limit < V1_UNLIMITED {
                let stat = read(&dir.join("memory.stat")).unwrap_or_default();
                let file = stat_sum(&stat, &["total_active_file", "total_inactive_file"])
                    .or_else(|| stat_sum(&stat, &["active_file", "inactive_file"]))
                    .unwrap_or(0);
                consider(&dir, limit, usage, file);
            }
        }
    }
    if let Some(path) = own_cgroup(&own, None) {
        let (mount, root) = mount_of(&mounts, false)
            .unwrap_or_else(|| ("/sys/fs/cgroup".to_string(), "/".to_string()));
        for dir in levels(&mount, &root, &path) {
            let Some(max) = read(&dir.join("memory.max")) else {
                continue;
            };
            found = true;
            let (Ok(limit), Some(current)) =
                (max.trim().parse::<u64>(), num(&dir, "memory.current"))
            else {
                continue; // "max": no limit here
            };
            let stat = read(&dir.join("memory.stat")).unwrap_or_default();
            let file = stat_sum(&stat, &["active_file", "inactive_file"]).unwrap_or(0);
            consider(&dir, limit, current, file);
        }
    }
    best.or(found.then_some(CgroupRoom::Unlimited))
}

/// The sum of `keys` in `memory.stat` text, if all are there.
fn stat_sum(stat: &str, keys: &[&str]) -> Option<u64> {
    keys.iter().try_fold(0u64, |sum, k| {
        let v = stat.lines().find_map(|l| {
            let (name, v) = l.split_once(' ')?;
            (name == *k).then(|| v.trim().parse::<u64>().ok())?
        })?;
        Some(sum.saturating_add(v))
    })
}

/// This process's cgroup path for `controller` (v1), or in the unified
/// hierarchy (`controller` = None), from `/proc/self/cgroup` text. (Also
/// used by the bench, which makes memory cgroups of its own.)
pub fn own_cgroup(proc_cgroup: &str, controller: Option<&str>) -> Option<String> {
    proc_cgroup.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let (id, ctrls, path) = (parts.next()?, parts.next()?, parts.next()?);
        let hit = match controller {
            Some(c) => ctrls.split(',').any(|x| x == c),
            None => id == "0" && ctrls.is_empty(),
        };
        hit.then(|| path.to_string())
    })
}

/// Mount point and mount root of the v1 memory hierarchy (`v1`) or of the
/// unified one, from `/proc/self/mountinfo` text.
pub fn mount_of(mountinfo: &str, v1: bool) -> Option<(String, String)> {
    mountinfo.lines().find_map(|line| {
        let (pre, post) = line.split_once(" - ")?;
        let pre: Vec<&str> = pre.split(' ').collect();
        let post: Vec<&str> = post.split(' ').collect();
        let (root, mount) = (*pre.get(3)?, *pre.get(4)?);
        let fstype = *post.first()?;
        let opts = post.get(2).copied().unwrap_or("");
        let hit = if v1 {
            fstype == "cgroup" && opts.split(',').any(|o| o == "memory")
        } else {
            fstype == "cgroup2"
        };
        hit.then(|| (unescape(mount), unescape(root)))
    })
}

/// A path field of mountinfo with its octal escapes (`\040` for a space,
/// `\011`, `\012`, `\134`) turned back into bytes.
fn unescape(field: &str) -> String {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match (b[i], octal) {
            (b'\\', Some(d)) => {
                let v = d.iter().fold(0u32, |v, c| v * 8 + u32::from(c - b'0'));
                out.push(v as u8);
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The directories of cgroup `path` and of each ancestor up to the mount
/// point, innermost first.
fn levels(mount: &str, root: &str, path: &str) -> Vec<PathBuf> {
    // By whole components: root /lxc/c1 is no prefix of /lxc/c10.
    let rel = if root != "/" {
        Path::new(path)
            .strip_prefix(root)
            .ok()
            .and_then(Path::to_str)
            .unwrap_or(path)
    } else {
        path
    };
    let mut dir = Path::new(mount).to_path_buf();
    let mut out = vec![dir.clone()];
    for part in rel.split('/').filter(|p| !p.is_empty() && *p != "..") {
        dir.push(part);
        out.push(dir.clone());
    }
    out.reverse();
    out
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    const GIB: u64 = 1 << 30;

    fn room(files: &[(&str, String)]) -> Option<MemoryRoom> {
        let map: HashMap<PathBuf, String> = files
            .iter()
            .map(|(p, t)| (PathBuf::from(p), t.clone()))
            .collect();
        room_from(&|p: &Path| map.get(p).cloned())
    }

    fn meminfo_text(avail_kb: u64, swap_kb: u64) -> String {
        format!(
            "MemTotal:       24684084 kB\nMemFree:         1000000 kB\nMemAvailable:   {avail_kb} kB\nSwapTotal:       0 kB\nSwapFree:       {swap_kb} kB\n"
        )
    }

    const V1_MOUNTS: &str = "30 25 0:26 / /sys/fs/cgroup/memory rw,relatime shared:11 - cgroup cgroup rw,memory\n\
                             31 25 0:27 / /sys/fs/cgroup/unified rw,relatime shared:12 - cgroup2 cgroup2 rw\n";

    #[test]
    fn machine_room_is_mem_available_plus_swap_free() {
        let r = room(&[("/proc/meminfo", meminfo_text(23_907_044, 1024))]).unwrap();
        assert_eq!(r.bytes, (23_907_044 + 1024) * 1024);
        assert_eq!(r.sources, "MemAvailable 22.8 GiB + SwapFree 1 MiB");
        assert_eq!(room(&[]), None, "nothing readable: no figure, no refusal");
        assert_eq!(room(&[("/proc/meminfo", "MemTotal: 5 kB\n".into())]), None);
    }

    #[test]
    fn v1_limit_counts_and_file_pages_are_reclaimable() {
        let dir = "/sys/fs/cgroup/memory/jobs/one";
        let files = [
            ("/proc/meminfo", meminfo_text(20 << 20, 0)),
            (
                "/proc/self/cgroup",
                "5:devices:/\n4:memory:/jobs/one\n0::/\n".into(),
            ),
            ("/proc/self/mountinfo", V1_MOUNTS.into()),
            (
                "/sys/fs/cgroup/memory/jobs/one/memory.limit_in_bytes",
                format!("{}\n", 8 * GIB),
            ),
            (
                "/sys/fs/cgroup/memory/jobs/one/memory.usage_in_bytes",
                format!("{}\n", 5 * GIB),
            ),
            (
                "/sys/fs/cgroup/memory/jobs/one/memory.stat",
                format!(
                    "cache 1\nactive_file 7\ntotal_active_file {}\ntotal_inactive_file {}\n",
                    GIB,
                    GIB / 2
                ),
            ),
            // An unlimited parent and root.
            (
                "/sys/fs/cgroup/memory/jobs/memory.limit_in_bytes",
                "9223372036854771712\n".into(),
            ),
            (
                "/sys/fs/cgroup/memory/jobs/memory.usage_in_bytes",
                format!("{}\n", 6 * GIB),
            ),
            (
                "/sys/fs/cgroup/memory/memory.limit_in_bytes",
                "9223372036854771712\n".into(),
            ),
        ];
        let r = room(&files).unwrap();
        assert_eq!(r.bytes, 8 * GIB - (5 * GIB - GIB - GIB / 2));
        assert!(
            r.sources
                .starts_with("MemAvailable 20 GiB + SwapFree 0 B; ")
        );
        assert!(
            r.sources
                .contains("memory cgroup limit 8 GiB with 5 GiB charged, 1.5 GiB of it")
        );
        assert!(r.sources.contains(dir), "{}", r.sources);
        // The machine is the tighter one.
        let mut tight = files.clone();
        tight[0].1 = meminfo_text(1 << 20, 0);
        assert_eq!(room(&tight).unwrap().bytes, GIB);
    }

    #[test]
    fn v1_without_limit_is_said_and_does_not_count() {
        let files = [
            ("/proc/meminfo", meminfo_text(4 << 20, 0)),
            ("/proc/self/cgroup", "4:memory:/a\n0::/\n".into()),
            ("/proc/self/mountinfo", V1_MOUNTS.into()),
            (
                "/sys/fs/cgroup/memory/a/memory.limit_in_bytes",
                "9223372036854771712".into(),
            ),
            ("/sys/fs/cgroup/memory/a/memory.usage_in_bytes", "5".into()),
        ];
        let r = room(&files).unwrap();
        assert_eq!(r.bytes, 4 * GIB);
        assert_eq!(
            r.sources,
            "MemAvailable 4 GiB + SwapFree 0 B; memory cgroup: no limit"
        );
    }

    #[test]
    fn v2_takes_the_tightest_level_and_reads_max_as_no_limit() {
        let mounts = "25 1 0:22 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw\n";
        let files = [
            ("/proc/self/cgroup", "0::/user.slice/job\n".into()),
            ("/proc/self/mountinfo", mounts.into()),
            (
                "/sys/fs/cgroup/user.slice/job/memory.max",
                "max\n".to_string(),
            ),
            (
                "/sys/fs/cgroup/user.slice/job/memory.current",
                format!("{}\n", GIB),
            ),
            (
                "/sys/fs/cgroup/user.slice/memory.max",
                format!("{}\n", 4 * GIB),
            ),
            (
                "/sys/fs/cgroup/user.slice/memory.current",
                format!("{}\n", 3 * GIB),
            ),
            (
                "/sys/fs/cgroup/user.slice/memory.stat",
                format!("anon 5\nactive_file {}\ninactive_file 0\n", GIB),
            ),
        ];
        // No /proc/meminfo: the cgroup alone gives the figure.
        let r = room(&files).unwrap();
        assert_eq!(r.bytes, 2 * GIB);
        assert!(
            r.sources
                .starts_with("memory cgroup limit 4 GiB with 3 GiB charged, 1 GiB of it"),
            "{}",
            r.sources
        );
        // Charged beyond the limit: no room at all.
        let mut over = files.clone();
        over[5].1 = format!("{}\n", 9 * GIB);
        assert_eq!(room(&over).unwrap().bytes, 0);
    }

    #[test]
    fn a_cgroup_namespace_root_is_followed_through_the_mount_root() {
        let mounts = "40 30 0:26 /docker/abc /sys/fs/cgroup/memory ro - cgroup cgroup rw,memory\n";
        let files = [
            ("/proc/self/cgroup", "4:memory:/docker/abc\n".into()),
            ("/proc/self/mountinfo", mounts.into()),
            (
                "/sys/fs/cgroup/memory/memory.limit_in_bytes",
                format!("{}", 2 * GIB),
            ),
            (
                "/sys/fs/cgroup/memory/memory.usage_in_bytes",
                format!("{}", GIB),
            ),
        ];
        assert_eq!(room(&files).unwrap().bytes, GIB);
    }

    #[test]
    fn sizes_read_well() {
        assert_eq!(human_size(0), "0 B");
        assert_eq!(human_size(1023), "1023 B");
        assert_eq!(human_size(4096), "4 KiB");
        assert_eq!(human_size(100 << 30), "100 GiB");
        assert_eq!(human_size(23_907_044 * 1024), "22.8 GiB");
        assert_eq!(human_size(1 << 50), "1 PiB");
        assert_eq!(human_size(u64::MAX), "16 EiB");
        // The unit the printed value rounds to.
        assert_eq!(human_size(1_048_575), "1 MiB");
        assert_eq!(human_size((1 << 40) - (1 << 20)), "1 TiB");
        assert_eq!(human_size(1536), "1.5 KiB");
    }

    /// A mount root as mountinfo writes it (a space is `\040`): the cgroup
    /// below it is found, and its limit counts.
    #[test]
    fn an_escaped_mount_root_is_read_back() {
        let mounts = "40 30 0:26 /my\\040job /sys/fs/cgroup/memory ro - cgroup cgroup rw,memory\n";
        let files = [
            ("/proc/self/cgroup", "4:memory:/my job/inner\n".to_string()),
            ("/proc/self/mountinfo", mounts.into()),
            (
                "/sys/fs/cgroup/memory/inner/memory.limit_in_bytes",
                format!("{}", 2 * GIB),
            ),
            (
                "/sys/fs/cgroup/memory/inner/memory.usage_in_bytes",
                format!("{}", GIB),
            ),
        ];
        assert_eq!(room(&files).map(|r| r.bytes), Some(GIB));
    }

    #[test]
    fn the_real_machine_is_readable_here() {
        // Linux only crate: /proc/meminfo is always there.
        let r = memory_room().expect("/proc/meminfo readable");
        assert!(r.bytes > 0);
        assert!(r.sources.contains("MemAvailable"), "{}", r.sources);
        assert!(check_memory(u64::MAX, || "everything".into()).is_err());
        assert!(check_memory(1 << 20, || "a little".into()).is_ok());
    }

    use crate::test_alloc::{input_bound, largest_alloc};
    use proptest::prelude::*;

    /// A number as the kernel writes it, or not: small, huge, `max`, with a
    /// unit, negative, empty, any bytes as text.
    fn kernel_number() -> impl Strategy<Value = String> {
        prop_oneof![
            4 => (0u64..1 << 40).prop_map(|v| v.to_string()),
            1 => any::<u64>().prop_map(|v| v.to_string()),
            1 => prop_oneof![
                Just("max"),
                Just("18446744073709551616"),
                Just("-1"),
                Just(""),
                Just("9223372036854771712"),
            ]
            .prop_map(str::to_string),
            1 => ".{0,12}",
        ]
    }

    /// Lines of a `/proc` or cgroup file: `label` lines with kernel numbers,
    /// `templates` with `{}` filled by a path-like word, and any text.
    fn kernel_text(
        labels: &'static [&'static str],
        templates: &'static [&'static str],
    ) -> impl Strategy<Value = String> {
        let line = prop_oneof![
            3 => (
                proptest::sample::select(labels),
                kernel_number(),
                proptest::sample::select(&["", " kB", " KB", " MB"][..]),
            )
                .prop_map(|(l, n, unit)| format!("{l}{n}{unit}")),
            3 => (proptest::sample::select(templates), "(/[a-z.]{0,6}){0,4}|/|/\\.\\.|")
                .prop_map(|(t, path)| t.replace("{}", &path)),
            1 => ".{0,30}",
        ];
        proptest::collection::vec(line, 0..8).prop_map(|l| l.join("\n"))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        /// Any /proc and cgroup text gives a memory figure or none, and no level above the mount.
        #[test]
        fn any_kernel_text_gives_a_figure_or_none(
            meminfo in kernel_text(
                &["MemAvailable:", "SwapFree:", "MemAvailable:\t", "MemTotal:"],
                &["{}"],
            ),
            cgroup in kernel_text(
                &["0::/", "7:memory:/"],
                &["0::{}", "4:memory:{}", "3:cpu,memory:{}", "1:name=x:{}", "0:memory:{}"],
            ),
            mounts in kernel_text(&["25 1 0:22 / /sys/fs/cgroup/", "1 - cgroup2 "], &[
                "25 1 0:22 / {} rw - cgroup2 cgroup2 rw",
                "30 25 0:26 {} /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory",
                "40 30 0:26 /docker {} ro - cgroup cgroup rw,memory",
                "1 2 3 {} - cgroup",
                "{} - ",
            ]),
            limit in kernel_number(),
            usage in kernel_number(),
            stat in kernel_text(
                &[
                    "active_file ",
                    "inactive_file ",
                    "total_active_file ",
                    "total_inactive_file ",
                    "anon ",
                ],
                &["{}"],
            ),
        ) {
            let n = [&meminfo, &cgroup, &mounts, &limit, &usage, &stat]
                .iter()
                .map(|t| t.len())
                .sum();
            // Each cgroup file reads the same at every level.
            let read = |p: &Path| -> Option<String> {
                match p.to_str()? {
                    "/proc/meminfo" => Some(meminfo.clone()),
                    "/proc/self/cgroup" => Some(cgroup.clone()),
                    "/proc/self/mountinfo" => Some(mounts.clone()),
                    _ => match p.file_name()?.to_str()? {
                        "memory.max" | "memory.limit_in_bytes" => Some(limit.clone()),
                        "memory.current" | "memory.usage_in_bytes" => Some(usage.clone()),
                        "memory.stat" => Some(stat.clone()),
                        _ => None,
                    },
                }
            };
            let (room, largest) = largest_alloc(|| room_from(&read));
            prop_assert!(largest <= input_bound(n), "{largest} bytes at once for {n} bytes");
            if let Some(r) = room {
                prop_assert!(!r.sources.is_empty());
            }
            // The pieces on their own, on the same text.
            let _ = super::meminfo(&meminfo);
            let _ = stat_sum(&stat, &["active_file", "inactive_file"]);
            for c in [None, Some("memory")] {
                if let Some(path) = own_cgroup(&cgroup, c) {
                    prop_assert!(cgroup.contains(&path));
                    for v1 in [true, false] {
                        if let Some((mount, root)) = mount_of(&mounts, v1) {
                            let dirs = levels(&mount, &root, &path);
                            prop_assert!(!dirs.is_empty());
                            // Innermost first, each below the mount, never above it.
                            prop_assert!(dirs.iter().all(|d| d.starts_with(&mount)));
                        }
                    }
                }
            }
        }
    }
}
