//! Memory that queue rings register as fixed buffers lazily, one chunk at a time.
//!
//! Registering memory with io_uring pins every page of it, and pinning faults
//! the pages in. A page cache's frames are reserved for its largest size and
//! touched only as pages are filled, so registering them whole would allocate
//! the whole cache when the first queue makes its ring (a 6 GiB cache took 15 s
//! and 6.3 GB of resident memory there). Instead the region is cut into chunks
//! ([`CHUNK_BYTES`], more for regions so large that the kernel's table of
//! 16,384 buffers would not hold them); a ring reserves a sparse table with one
//! slot per chunk when it is made, which pins nothing, and registers a chunk
//! the first time it reads or writes memory inside it. Until then, or if the
//! kernel refuses, that memory is read and written at plain addresses.
//!
//! The region's owner may give pages back to the kernel (`MADV_DONTNEED`) only
//! through [`FixedChunks::release`], which leaves alone every chunk that a live
//! ring holds registered: the ring would go on reading into the pages it
//! pinned, which the process no longer maps.

use std::sync::atomic::{AtomicU32, Ordering};

/// Bytes of one chunk of a region (a multiple of every page size the cache
/// allows, so that no frame straddles two chunks).
pub(crate) const CHUNK_BYTES: usize = 64 << 20;
/// Fixed buffers one ring may have (`IORING_MAX_REG_BUFFERS`).
const MAX_CHUNKS: usize = 1 << 14;
/// The largest buffer the kernel registers.
const MAX_CHUNK_BYTES: usize = 1 << 30;
/// `users` value while the owner gives pages of the chunk back.
const RELEASING: u32 = u32::MAX;

/// A region cut into chunks that rings register on first use.
#[derive(Debug)]
pub(crate) struct FixedChunks {
    start: usize,
    len: usize,
    /// log2 of the chunk size.
    shift: u32,
    /// Per chunk: how many rings hold it registered, or `RELEASING`.
    users: Box<[AtomicU32]>,
}

impl FixedChunks {
    /// Chunks over the `len` bytes at `start` (which should be at least
    /// page-aligned). Memory past the 16,384th chunk, in regions above 16 TiB,
    /// is never registered.
    pub(crate) fn new(start: *mut u8, len: usize) -> FixedChunks {
        let mut chunk = CHUNK_BYTES;
        while len.div_ceil(chunk) > MAX_CHUNKS && chunk < MAX_CHUNK_BYTES {
            chunk *= 2;
        }
        let count = len.div_ceil(chunk).min(MAX_CHUNKS);
        FixedChunks {
            start: start as usize,
            len,
            shift: chunk.trailing_zeros(),
            users: (0..count).map(|_| AtomicU32::new(0)).collect(),
        }
    }

    /// Number of chunks: the size of a ring's sparse buffer table.
    pub(crate) fn count(&self) -> usize {
        self.users.len()
    }

    /// Bytes per chunk (the last one may be shorter).
    #[cfg(test)]
    pub(crate) fn chunk_bytes(&self) -> usize {
        1 << self.shift
    }

    /// The chunk that holds all of `[addr, addr + len)`, if one does.
    #[inline]
    pub(crate) fn chunk_of(&self, addr: usize, len: usize) -> Option<usize> {
        let off = addr.wrapping_sub(self.start);
        if off >= self.len || len == 0 || len > self.len - off {
            return None;
        }
        let c = off >> self.shift;
        (c < self.users.len() && (off + len - 1) >> self.shift == c).then_some(c)
    }

    /// Start address and length of chunk `c`.
    pub(crate) fn bounds(&self, c: usize) -> (usize, usize) {
        let off = c << self.shift;
        (self.start + off, (self.len - off).min(1 << self.shift))
    }

    /// A ring is about to register chunk `c`: from now on the owner leaves its
    /// pages mapped. False while the owner is giving pages of it back (try
    /// again later, use plain addresses meanwhile).
    pub(crate) fn hold(&self, c: usize) -> bool {
        self.users[c]
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| {
                (v < RELEASING - 1).then(|| v + 1)
            })
            .is_ok()
    }

    /// A ring that held chunk `c` is gone (no operation of it is in flight).
    pub(crate) fn unhold(&self, c: usize) {
        let old = self.users[c].fetch_sub(1, Ordering::AcqRel);
        debug_assert!(old > 0 && old != RELEASING, "unhold of a chunk not held");
    }

    /// Whether some ring holds chunk `c` registered now (a snapshot).
    #[cfg(test)]
    pub(crate) fn held(&self, c: usize) -> bool {
        let v = self.users[c].load(Ordering::Acquire);
        v > 0 && v != RELEASING
    }

    /// Give back the pages of bytes `[off, off + len)` of the region through
    /// `give_back(off, len)`, piece by piece, skipping the pieces whose chunk
    /// a ring holds (those stay mapped, and in memory, until the cache goes).
    pub(crate) fn release(&self, off: usize, len: usize, mut give_back: impl FnMut(usize, usize)) {
        let end = (off + len).min(self.len);
        let mut at = off;
        while at < end {
            let c = at >> self.shift;
            let piece_end = end.min((c + 1) << self.shift);
            match self.users.get(c) {
                None => give_back(at, piece_end - at),
                Some(u) => {
                    if u.compare_exchange(0, RELEASING, Ordering::Acquire, Ordering::Relaxed)
                        .is_ok()
                    {
                        give_back(at, piece_end - at);
                        u.store(0, Ordering::Release);
                    }
                }
            }
            at = piece_end;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_cover_the_region_and_no_frame_straddles_two() {
        let base = 1usize << 40;
        let c = FixedChunks::new(base as *mut u8, 200 << 20);
        assert_eq!(c.count(), 4);
        assert_eq!(c.chunk_bytes(), CHUNK_BYTES);
        assert_eq!(c.bounds(0), (base, 64 << 20));
        assert_eq!(c.bounds(3), (base + (192 << 20), 8 << 20));
        assert_eq!(c.chunk_of(base, 4096), Some(0));
        assert_eq!(c.chunk_of(base + (64 << 20) - 4096, 4096), Some(0));
        assert_eq!(c.chunk_of(base + (64 << 20), 4096), Some(1));
        // Straddling, outside, empty, past the end.
        assert_eq!(c.chunk_of(base + (64 << 20) - 4096, 8192), None);
        assert_eq!(c.chunk_of(base - 4096, 4096), None);
        assert_eq!(c.chunk_of(base, 0), None);
        assert_eq!(c.chunk_of(base + (200 << 20) - 4096, 8192), None);
        assert_eq!(c.chunk_of(base + (200 << 20) - 4096, 4096), Some(3));
    }

    #[test]
    fn huge_regions_use_larger_chunks_up_to_the_kernel_limits() {
        let c = FixedChunks::new(4096 as *mut u8, 2 << 40);
        assert_eq!(c.count(), MAX_CHUNKS);
        assert_eq!(c.chunk_bytes(), 128 << 20);
        let c = FixedChunks::new(4096 as *mut u8, 64 << 40);
        assert_eq!(c.chunk_bytes(), MAX_CHUNK_BYTES);
        assert_eq!(c.count(), MAX_CHUNKS);
        // Beyond the last chunk nothing is registered, and all is released.
        assert_eq!(c.chunk_of(4096 + (16 << 40), 4096), None);
        let mut given = Vec::new();
        c.release((16 << 40) - 4096, 8192, |o, l| given.push((o, l)));
        assert_eq!(given, vec![((16 << 40) - 4096, 4096), (16 << 40, 4096)]);
    }

    #[test]
    fn held_chunks_are_not_released() {
        let c = FixedChunks::new((1usize << 30) as *mut u8, 256 << 20);
        assert!(c.hold(1));
        assert!(c.hold(1));
        let mut given = Vec::new();
        // From the middle of chunk 0 to the middle of chunk 2.
        c.release(32 << 20, 128 << 20, |o, l| given.push((o, l)));
        assert_eq!(given, vec![(32 << 20, 32 << 20), (128 << 20, 32 << 20)]);
        c.unhold(1);
        assert!(c.held(1));
        c.unhold(1);
        assert!(!c.held(1));
        given.clear();
        c.release(64 << 20, 4096, |o, l| given.push((o, l)));
        assert_eq!(given, vec![(64 << 20, 4096)]);
        // A chunk being released cannot be held meanwhile.
        c.release(0, 4096, |_, _| assert!(!c.hold(0)));
        assert!(c.hold(0));
    }
}
