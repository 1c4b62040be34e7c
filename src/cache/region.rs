//! Anonymous memory reserved once and touched on demand.

use crate::error::{Error, Result};
use crate::util::map::map_anon;

/// A private anonymous mapping: page-aligned, zero-filled, reserved without
/// commitment (`MAP_NORESERVE`) so that a cache sized for growth costs memory
/// only for what it touches.
#[derive(Debug)]
pub(crate) struct Region {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is plain memory; who may touch which bytes is decided by
// the set protocol of the cache that owns the region.
unsafe impl Send for Region {}
// SAFETY: as above.
unsafe impl Sync for Region {}

impl Region {
    pub(crate) fn new(len: usize, what: &str) -> Result<Region> {
        let len = len.max(1).div_ceil(4096) * 4096;
        // From 2 MiB on, aligned to and advised onto huge pages: the frames
        // and the set table then map with 2 MiB pages, which spares a TLB miss
        // on most lookups of a large cache.
        let ptr = map_anon(len, true).map_err(|e| {
            Error::os_call(
                format!("cannot reserve {len} bytes for the cache's {what}"),
                e,
            )
        })?;
        Ok(Region { ptr, len })
    }

    #[inline]
    pub(crate) fn ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// Give the pages of `[off, off + len)` back to the kernel (they read as
    /// zeros afterwards). Whole pages of the system's size inside the range
    /// only: on a kernel of 16 or 64 KiB pages, rounding by 4 KiB would have
    /// the kernel round the length up and clear live bytes past the range.
    pub(crate) fn release(&self, off: usize, len: usize) {
        let (start, end) = inward(off, len, self.len, system_page());
        if end > start {
            // SAFETY: the range lies inside the mapping; the caller no longer
            // needs its contents.
            unsafe {
                libc::madvise(self.ptr.add(start).cast(), end - start, libc::MADV_DONTNEED);
            }
        }
    }
}

impl Region {
    /// Prefer NUMA node `node` for the pages of `[off, off + len)`, widened
    /// to whole pages (`mbind` with `MPOL_PREFERRED` and `MPOL_MF_MOVE`:
    /// pages not yet in memory come from the node, and those already
    /// touched move there).
    pub(crate) fn prefer_node(&self, off: usize, len: usize, node: usize) -> Result<()> {
        let page = system_page();
        let start = off / page * page;
        let end = (off + len).min(self.len).div_ceil(page) * page;
        if end <= start {
            return Ok(());
        }
        let mut mask = [0u64; 16];
        if node >= mask.len() * 64 {
            return Err(Error::InvalidArgument(format!(
                "NUMA node {node} is beyond the {} this build can name",
                mask.len() * 64
            )));
        }
        mask[node / 64] |= 1 << (node % 64);
        const MPOL_PREFERRED: libc::c_long = 1;
        // The pages already touched move too: the set table is written
        // whole when the cache is made, on the maker's node, before any
        // partition prefers its own.
        const MPOL_MF_MOVE: libc::c_uint = 1 << 1;
        // SAFETY: the range lies inside our own mapping and the mask holds `16 * 64` bits, the count passed; mbind changes the policy and may move pages to another node, keeping their addresses and bytes.
        let r = unsafe {
            libc::syscall(
                libc::SYS_mbind,
                self.ptr.add(start),
                end - start,
                MPOL_PREFERRED,
                mask.as_ptr(),
                (mask.len() * 64) as libc::c_ulong,
                MPOL_MF_MOVE,
            )
        };
        if r != 0 {
            return Err(Error::InvalidArgument(format!(
                "cannot prefer NUMA node {node} for {} bytes of the cache: {}",
                end - start,
                std::io::Error::last_os_error()
            )));
        }
        Ok(())
    }
}

/// The system's page size (`sysconf`), read once; 4 KiB if it cannot be read.
fn system_page() -> usize {
    static PAGE: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *PAGE.get_or_init(|| {
        // SAFETY: sysconf has no preconditions.
        let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        if n > 0 && (n as usize).is_power_of_two() {
            n as usize
        } else {
            4096
        }
    })
}

/// The whole pages of `page` bytes inside `[off, off + len)`, cut at `limit`:
/// `(start, end)`, empty when `end <= start`.
fn inward(off: usize, len: usize, limit: usize, page: usize) -> (usize, usize) {
    let start = off.div_ceil(page) * page;
    let end = (off.saturating_add(len).min(limit) / page) * page;
    (start, end)
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: the mapping was created by `new` with this length and nothing
        // refers to it once its owner drops.
        unsafe {
            libc::munmap(self.ptr.cast(), self.len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_given_back_lie_inside_the_range_for_every_page_size() {
        // A set of 12 frames of 4 KiB (48 KiB) starting at 192 KiB: on a
        // kernel of 64 KiB pages no whole page lies inside it, and rounding
        // by 4 KiB gave the kernel [192K, 240K), whose length it rounds up
        // to 64 KiB, clearing 16 KiB of the next set.
        assert_eq!(
            inward(192 << 10, 48 << 10, 1 << 30, 4096),
            (192 << 10, 240 << 10)
        );
        let (s, e) = inward(192 << 10, 48 << 10, 1 << 30, 64 << 10);
        assert!(
            e <= s,
            "a 64 KiB page given back from a 48 KiB set: {s}..{e}"
        );
        for page in [4096usize, 16 << 10, 64 << 10] {
            for (off, len) in [(0, 1 << 20), (4096, 200 << 10), (100 << 10, 300 << 10)] {
                let (s, e) = inward(off, len, 1 << 30, page);
                if e > s {
                    assert!(
                        s >= off && e <= off + len,
                        "{page}: {s}..{e} outside {off}+{len}"
                    );
                    assert!(s.is_multiple_of(page) && (e - s).is_multiple_of(page));
                }
            }
        }
        // Cut at the region's end.
        assert_eq!(inward(0, 1 << 20, 100 << 10, 4096), (0, 100 << 10));
        assert!(system_page().is_power_of_two() && system_page() >= 4096);
    }
}
