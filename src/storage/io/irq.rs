//! Which CPUs take a device's completion interrupts.
//!
//! A directory's file system names its block device (`st_dev`); sysfs leads
//! from it to the disk (`/sys/dev/block/MAJ:MIN`, the whole disk for a
//! partition, the disks under it for a device-mapper or md device) and from
//! the disk up its device path to the first device with interrupts (a PCI
//! function's `msi_irqs`, else a legacy `irq`). Of those interrupts, the busy
//! ones (at least 1% of the device's count in `/proc/interrupts`: not a
//! virtio device's configuration vector) are looked up in
//! `/proc/irq/N/effective_affinity_list`, the CPUs the kernel delivers each
//! to now. A directory on a file system without a block device (tmpfs) or
//! whose device has no interrupts of its own (a loop device, virtio over MMIO
//! without a per-device path) gives none. Everything is read once, when
//! asked: a later move of the interrupts (irqbalance) is not followed.

use std::collections::BTreeSet;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The CPUs that take the completion interrupts of the block devices under
/// `dirs`, ascending; empty when none can be found.
pub(crate) fn interrupt_cpus(dirs: &[PathBuf]) -> Vec<usize> {
    interrupt_cpus_in(dirs, Path::new("/sys"), Path::new("/proc"))
}

/// [`interrupt_cpus`] over sysfs at `sys` and procfs at `proc` (tests give
/// trees of their own).
pub(crate) fn interrupt_cpus_in(dirs: &[PathBuf], sys: &Path, proc: &Path) -> Vec<usize> {
    let counts = std::fs::read_to_string(proc.join("interrupts"))
        .map(|t| interrupt_counts(&t))
        .unwrap_or_default();
    let mut cpus = BTreeSet::new();
    for d in dirs {
        let Ok(m) = std::fs::metadata(d) else {
            continue;
        };
        let dev = m.dev();
        let (major, minor) = (libc::major(dev), libc::minor(dev));
        let link = sys.join(format!("dev/block/{major}:{minor}"));
        let mut irqs = BTreeSet::new();
        disk_irqs(&link, 0, &mut irqs);
        let total: u64 = irqs.iter().map(|i| counts_of(&counts, *i)).sum();
        for irq in irqs {
            // A vector with under 1% of the device's interrupts (a virtio
            // configuration vector, a queue nobody uses) does not count.
            if total > 0 && counts_of(&counts, irq) * 100 < total {
                continue;
            }
            let p = proc.join(format!("irq/{irq}/effective_affinity_list"));
            let list = std::fs::read_to_string(&p).or_else(|_| {
                std::fs::read_to_string(proc.join(format!("irq/{irq}/smp_affinity_list")))
            });
            if let Ok(l) = list {
                cpus.extend(crate::util::nodes::parse_cpulist(&l).unwrap_or_default());
            }
        }
    }
    cpus.into_iter().collect()
}

fn counts_of(counts: &[(u32, u64)], irq: u32) -> u64 {
    counts
        .binary_search_by_key(&irq, |c| c.0)
        .map_or(0, |i| counts[i].1)
}

/// Most levels of stacked block devices followed (dm over md over disks).
const MAX_STACK: usize = 4;

/// The interrupts of the block device whose sysfs directory `link` leads to,
/// into `out`: its whole disk's, or the disks' it is stacked on.
fn disk_irqs(link: &Path, depth: usize, out: &mut BTreeSet<u32>) {
    let Ok(mut dir) = std::fs::canonicalize(link) else {
        return;
    };
    if dir.join("partition").exists() {
        match dir.parent() {
            Some(p) => dir = p.to_path_buf(),
            None => return,
        }
    }
    let slaves: Vec<PathBuf> = std::fs::read_dir(dir.join("slaves"))
        .map(|r| r.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    if !slaves.is_empty() {
        if depth < MAX_STACK {
            for s in slaves {
                disk_irqs(&s, depth + 1, out);
            }
        }
        return;
    }
    let Ok(mut dev) = std::fs::canonicalize(dir.join("device")) else {
        return;
    };
    // Up the device path to the first device with interrupts of its own.
    loop {
        let msi: Vec<u32> = std::fs::read_dir(dev.join("msi_irqs"))
            .map(|r| {
                r.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                    .collect()
            })
            .unwrap_or_default();
        if !msi.is_empty() {
            out.extend(msi);
            return;
        }
        if let Some(irq) = std::fs::read_to_string(dev.join("irq"))
            .ok()
            .and_then(|t| t.trim().parse::<u32>().ok())
            .filter(|&i| i != 0)
        {
            out.insert(irq);
            return;
        }
        if !dev.pop() || dev.parent().is_none() {
            return;
        }
    }
}

/// Each numbered interrupt of `/proc/interrupts` with its count summed over
/// the CPUs, sorted by number.
pub(crate) fn interrupt_counts(text: &str) -> Vec<(u32, u64)> {
    let mut lines = text.lines();
    let ncpu = lines.next().map_or(0, |h| h.split_whitespace().count());
    let mut out: Vec<(u32, u64)> = lines
        .filter_map(|l| {
            let (n, rest) = l.trim_start().split_once(':')?;
            let n: u32 = n.parse().ok()?;
            let sum = rest
                .split_whitespace()
                .take(ncpu)
                .map_while(|c| c.parse::<u64>().ok())
                .sum();
            Some((n, sum))
        })
        .collect();
    out.sort_unstable();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_parse_as_the_kernel_writes_them() {
        assert_eq!(crate::util::nodes::parse_cpulist("1\n"), Some(vec![1]));
        assert_eq!(
            crate::util::nodes::parse_cpulist("0-3,8,10-11"),
            Some(vec![0, 1, 2, 3, 8, 10, 11])
        );
        assert_eq!(crate::util::nodes::parse_cpulist(""), Some(vec![]));
        assert_eq!(crate::util::nodes::parse_cpulist("3-1"), None);
        assert_eq!(crate::util::nodes::parse_cpulist("x"), None);
    }

    #[test]
    fn interrupt_counts_sum_the_cpus_columns_only() {
        let t = "           CPU0       CPU1       \n\
                 \x20 35:          0          1 PCI-MSIX-0000:00:02.0   0-edge      virtio1-config\n\
                 \x20 36:          7      30598 PCI-MSIX-0000:00:02.0   1-edge      virtio1-req.0\n\
                 NMI:          0          0   Non-maskable interrupts\n";
        assert_eq!(interrupt_counts(t), vec![(35, 1), (36, 30605)]);
    }

    /// A made-up sysfs and procfs: a partition of a disk on a PCI function
    /// with two vectors, the busy one delivered to CPU 1 and 3.
    #[test]
    fn a_partitions_disk_leads_to_its_busy_vectors_cpus() {
        let root = std::env::temp_dir().join(format!("setcache-irq-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let (sys, proc) = (root.join("sys"), root.join("proc"));
        let pci = sys.join("devices/pci0000:00/0000:00:02.0");
        let disk = pci.join("virtio1/block/vda");
        std::fs::create_dir_all(disk.join("vda1")).unwrap();
        std::fs::write(disk.join("vda1/partition"), "1\n").unwrap();
        std::os::unix::fs::symlink(pci.join("virtio1"), disk.join("device")).unwrap();
        std::fs::create_dir_all(pci.join("msi_irqs")).unwrap();
        for i in ["35", "36"] {
            std::fs::write(pci.join("msi_irqs").join(i), "msix\n").unwrap();
        }
        std::fs::write(pci.join("irq"), "0\n").unwrap();
        let here = std::env::temp_dir();
        let dev = std::fs::metadata(&here).unwrap().dev();
        std::fs::create_dir_all(sys.join("dev/block")).unwrap();
        std::os::unix::fs::symlink(
            disk.join("vda1"),
            sys.join(format!(
                "dev/block/{}:{}",
                libc::major(dev),
                libc::minor(dev)
            )),
        )
        .unwrap();
        std::fs::create_dir_all(proc.join("irq/35")).unwrap();
        std::fs::create_dir_all(proc.join("irq/36")).unwrap();
        std::fs::write(proc.join("irq/35/effective_affinity_list"), "0\n").unwrap();
        std::fs::write(proc.join("irq/36/effective_affinity_list"), "1,3\n").unwrap();
        std::fs::write(
            proc.join("interrupts"),
            "  CPU0 CPU1\n 35: 0 1 x virtio1-config\n 36: 5 900 x virtio1-req.0\n",
        )
        .unwrap();
        assert_eq!(
            interrupt_cpus_in(std::slice::from_ref(&here), &sys, &proc),
            vec![1, 3]
        );
        // With no counts to weigh them by, every vector counts.
        std::fs::write(proc.join("interrupts"), "  CPU0 CPU1\n").unwrap();
        assert_eq!(
            interrupt_cpus_in(std::slice::from_ref(&here), &sys, &proc),
            vec![0, 1, 3]
        );
        // A missing directory, or a device sysfs does not know, gives none.
        assert!(interrupt_cpus_in(&[root.join("nowhere")], &sys, &proc).is_empty());
        assert!(interrupt_cpus_in(&[here], &root.join("nosys"), &proc).is_empty());
        std::fs::remove_dir_all(&root).unwrap();
    }
}
