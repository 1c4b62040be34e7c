//! Shared mappings of backing files, for the `mmap` engine.

use std::fs::File;
use std::os::fd::AsRawFd;

/// A read-only or read-write `MAP_SHARED` mapping of a whole file.
pub(crate) struct Mapping {
    ptr: *mut u8,
    len: usize,
}

// Threads only copy bytes in and out; concurrent stores to one block race as they
// would through pwrite, which is what a benchmark of a shared file does.
// SAFETY: the mapping is plain shared memory, valid until drop, owned by no thread.
unsafe impl Send for Mapping {}
// SAFETY: as for Send: shared access only copies bytes, bounds-checked.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Map all of `f`; `random` disables readahead on faults.
    pub(crate) fn new(f: &File, writable: bool, random: bool) -> Result<Mapping, String> {
        let len = f.metadata().map_err(|e| format!("mmap: stat: {e}"))?.len() as usize;
        let prot = libc::PROT_READ | if writable { libc::PROT_WRITE } else { 0 };
        let (null, fd) = (std::ptr::null_mut(), f.as_raw_fd());
        // SAFETY: a fresh shared mapping of an open file at an address the kernel picks.
        let ptr = unsafe { libc::mmap(null, len, prot, libc::MAP_SHARED, fd, 0) };
        if ptr == libc::MAP_FAILED {
            return Err(format!("mmap: {}", std::io::Error::last_os_error()));
        }
        let advice = if random {
            libc::MADV_RANDOM
        } else {
            libc::MADV_SEQUENTIAL
        };
        // SAFETY: `ptr..ptr+len` is the mapping just made; advice changes no contents.
        unsafe { libc::madvise(ptr, len, advice) };
        Ok(Mapping {
            ptr: ptr.cast(),
            len,
        })
    }

    /// Give the kernel `advice` (`MADV_NORMAL`, `MADV_RANDOM`, ...) for the
    /// whole mapping.
    pub(crate) fn advise(&self, advice: libc::c_int) -> Result<(), String> {
        // SAFETY: the range is exactly the live mapping; advice changes no contents.
        if unsafe { libc::madvise(self.ptr.cast(), self.len, advice) } != 0 {
            return Err(format!("madvise: {}", std::io::Error::last_os_error()));
        }
        Ok(())
    }

    /// The mapping's first byte and its length.
    pub(crate) fn span(&self) -> (*const u8, usize) {
        (self.ptr, self.len)
    }

    fn check(&self, pos: u64, len: usize) -> Result<usize, String> {
        let start = usize::try_from(pos).map_err(|_| "mmap offset overflows".to_string())?;
        match start.checked_add(len) {
            Some(end) if end <= self.len => Ok(start),
            _ => Err(format!(
                "mmap access of {len} bytes at {pos} past the end ({} bytes)",
                self.len
            )),
        }
    }

    /// Copy `buf.len()` bytes at `pos` of the file into `buf` (loads from the mapping).
    #[inline]
    pub(crate) fn read_into(&self, pos: u64, buf: &mut [u8]) -> Result<(), String> {
        let start = self.check(pos, buf.len())?;
        let (src, dst, n) = (self.ptr.wrapping_add(start), buf.as_mut_ptr(), buf.len());
        // SAFETY: `start..start+n` is inside the mapping (checked); `buf` is a distinct slice.
        unsafe { std::ptr::copy_nonoverlapping(src, dst, n) };
        std::hint::black_box(&*buf);
        Ok(())
    }

    /// Copy `buf` to `pos` of the file (stores to a writable mapping).
    #[inline]
    pub(crate) fn write_from(&self, pos: u64, buf: &[u8]) -> Result<(), String> {
        let start = self.check(pos, buf.len())?;
        let (src, dst, n) = (buf.as_ptr(), self.ptr.wrapping_add(start), buf.len());
        // SAFETY: as in read_into; write workloads map the file writable.
        unsafe { std::ptr::copy_nonoverlapping(src, dst, n) };
        Ok(())
    }
}

impl Mapping {
    /// Write the mapping's dirty pages to the file and wait (msync MS_SYNC).
    pub(crate) fn sync(&self) -> Result<(), String> {
        // SAFETY: the range is exactly the live mapping.
        let r = unsafe { libc::msync(self.ptr.cast(), self.len, libc::MS_SYNC) };
        if r != 0 {
            return Err(format!("msync: {}", std::io::Error::last_os_error()));
        }
        Ok(())
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the region `new` mapped; no borrow of it outlives us.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn reads_and_writes_through_the_mapping() {
        let path = std::env::temp_dir().join(format!("setcache-mmap-test-{}", std::process::id()));
        let mut f = std::fs::File::create(&path).unwrap();
        f.write_all(&[7u8; 8192]).unwrap();
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        let m = Mapping::new(&f, true, true).unwrap();
        let mut buf = [0u8; 100];
        m.read_into(4000, &mut buf).unwrap();
        assert!(buf.iter().all(|&b| b == 7));
        m.write_from(8092, &[9u8; 100]).unwrap();
        m.read_into(8092, &mut buf).unwrap();
        assert!(buf.iter().all(|&b| b == 9));
        assert!(m.read_into(8093, &mut buf).is_err());
        assert!(m.write_from(u64::MAX, &[1]).is_err());
        drop(m);
        std::fs::remove_file(&path).unwrap();
    }
}
