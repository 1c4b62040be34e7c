//! Anonymous memory reserved once and touched on demand.

use crate::error::{Error, Result};

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
        let len = len.max(1);
        // SAFETY: an anonymous private mapping with no address hint has no
        // preconditions; the result is checked below.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(Error::InvalidArgument(format!(
                "cannot reserve {len} bytes for the cache's {what}: {}",
                std::io::Error::last_os_error()
            )));
        }
        Ok(Region {
            ptr: ptr.cast(),
            len,
        })
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

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: the mapping was created by `new` with this length and nothing
        // refers to it once its owner drops.
        unsafe {
            libc::munmap(self.ptr.cast(), self.len);
        }
    }
}
