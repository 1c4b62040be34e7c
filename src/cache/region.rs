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
            Error::InvalidArgument(format!(
                "cannot reserve {len} bytes for the cache's {what}: {e}"
            ))
        })?;
        Ok(Region { ptr, len })
    }

    #[inline]
    pub(crate) fn ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// Give the pages of `[off, off + len)` back to the kernel (they read as
    /// zeros afterwards). Whole pages inside the range only.
    pub(crate) fn release(&self, off: usize, len: usize) {
        let page = 4096;
        let start = off.div_ceil(page) * page;
        let end = ((off + len).min(self.len) / page) * page;
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
        let page = 4096;
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

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: the mapping was created by `new` with this length and nothing
        // refers to it once its owner drops.
        unsafe {
            libc::munmap(self.ptr.cast(), self.len);
        }
    }
}
