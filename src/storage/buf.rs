//! Page-aligned I/O buffers.
//!
//! O_DIRECT needs buffers aligned to the logical block size of the device; we align
//! to 4096 bytes, which satisfies every device in use. A buffer either owns its own
//! allocation or is a slice of an [`Arena`] that was registered with the I/O engines
//! (io_uring fixed buffers), which saves the kernel from pinning pages per request.

use std::alloc::{self, Layout as AllocLayout};
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;
use std::sync::{Arc, Weak};

use crate::error::{Error, Result};
use crate::storage::io::DeviceEngine;
use crate::util::HUGE_PAGE;
use crate::util::map::map_anon;

/// Alignment of every buffer, in bytes.
pub const BUF_ALIGN: usize = 4096;

/// From this length on, [`AlignedBuf::try_new`] checks the memory the
/// machine and the process's memory cgroup can give before it maps any.
const TRY_CHECKED: usize = 64 << 20;

/// One allocation shared by registered buffers.
pub(crate) struct Arena {
    ptr: NonNull<u8>,
    layout: AllocLayout,
    /// A mapping of its own (a huge arena), unmapped on drop; else the
    /// global allocator's.
    mapped: bool,
    /// Per device: the engine and the fixed-buffer index it gave this arena.
    regs: Vec<(Weak<dyn DeviceEngine>, Option<u16>)>,
}

// SAFETY: the arena is a plain heap allocation; the pointer is only used to address
// that allocation, and slices of it are handed out to at most one `AlignedBuf` each.
unsafe impl Send for Arena {}
// SAFETY: as above; the arena itself is never written through a shared reference.
unsafe impl Sync for Arena {}

impl Arena {
    /// Allocate `len` zeroed bytes aligned to `BUF_ALIGN` (to a huge page from
    /// one huge page on).
    ///
    /// An arena of a huge page or more lies on huge pages, as the cache's
    /// frames do: fewer pages for the kernel to map and pin, and for the
    /// device to write into.
    pub(crate) fn new(len: usize) -> Arena {
        match Arena::try_new(len) {
            Ok(a) => a,
            // As a `Vec` that cannot grow: the allocator's own failure path.
            Err(None) => panic!("buffer size {len} overflows the address space"),
            Err(Some(layout)) => alloc::handle_alloc_error(layout),
        }
    }

    /// The layout of an arena of `len` bytes, if the address space holds it.
    pub(crate) fn layout(len: usize) -> Option<AllocLayout> {
        let align = if len >= HUGE_PAGE {
            HUGE_PAGE
        } else {
            BUF_ALIGN
        };
        AllocLayout::from_size_align(len.max(1), align).ok()
    }

    /// As [`Arena::new`], or `Err(None)` when `len` bytes cannot be laid out
    /// in the address space, `Err(Some(layout))` when the memory is refused.
    pub(crate) fn try_new(len: usize) -> std::result::Result<Arena, Option<AllocLayout>> {
        let layout = Arena::layout(len).ok_or(None)?;
        let huge = len >= HUGE_PAGE;
        let mapped = if huge { map_huge(len) } else { None };
        let raw = match mapped {
            Some(raw) => raw,
            // SAFETY: the layout has a non-zero size.
            None => unsafe { alloc::alloc_zeroed(layout) },
        };
        let ptr = NonNull::new(raw).ok_or(Some(layout))?;
        Ok(Arena {
            ptr,
            layout,
            mapped: mapped.is_some(),
            regs: Vec::new(),
        })
    }

    pub(crate) fn ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    pub(crate) fn len(&self) -> usize {
        self.layout.size()
    }

    /// Register the arena with each device engine (index = device).
    pub(crate) fn register(&mut self, engines: &[Arc<dyn DeviceEngine>]) {
        for e in engines {
            let idx = e.register_buffer(self.ptr(), self.len());
            self.regs.push((Arc::downgrade(e), idx));
        }
    }

    /// The index `engine`, the engine of device `device` of the store a
    /// request goes to, gave this arena: none if the arena was registered
    /// with another store's engines (an index is the engine's own).
    pub(crate) fn fixed_index(&self, device: usize, engine: &Arc<dyn DeviceEngine>) -> Option<u16> {
        let (e, idx) = self.regs.get(device)?;
        std::ptr::addr_eq(e.as_ptr(), Arc::as_ptr(engine)).then_some(*idx)?
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        for (engine, idx) in &self.regs {
            if let (Some(e), Some(i)) = (engine.upgrade(), idx) {
                e.unregister_buffer(*i);
            }
        }
        if self.mapped {
            // SAFETY: `ptr` is the mapping of `layout.size()` bytes `map_huge` made, and no buffer that points into it is alive (each holds an `Arc` to the arena).
            unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.layout.size()) };
            return;
        }
        // SAFETY: `ptr` was allocated with `layout` in `Arena::new` and no buffer that
        // points into it is alive (each holds an `Arc` to the arena).
        unsafe { alloc::dealloc(self.ptr.as_ptr(), self.layout) };
    }
}

/// `len` zeroed bytes in a mapping of their own, aligned to a huge page and
/// advised onto huge pages before the zeroing faults them in: `None` if the
/// system refuses the mapping. Not from the global allocator, which may
/// hand back memory already faulted in as small pages (a large block freed
/// before raises its threshold for mapping blocks of their own).
fn map_huge(len: usize) -> Option<*mut u8> {
    let ptr = map_anon(len.div_ceil(BUF_ALIGN) * BUF_ALIGN, false).ok()?;
    // SAFETY: `ptr` holds at least `len` writable bytes that nothing else refers to (advised onto huge pages before this first write).
    unsafe { ptr.write_bytes(0, len) };
    Some(ptr)
}

/// A buffer aligned to 4096 bytes, usable for O_DIRECT I/O.
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
    arena: Arc<Arena>,
}

// SAFETY: an `AlignedBuf` is the only handle to its bytes; moving it between threads
// moves that exclusive access.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared references only give `&[u8]` access.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// A zeroed buffer of `len` bytes. As `Vec`'s constructors do, panics
    /// if `len` bytes overflow the address space and aborts if the memory is
    /// refused: see [`AlignedBuf::try_new`] for a length that is input.
    pub fn new(len: usize) -> AlignedBuf {
        let arena = Arc::new(Arena::new(len));
        AlignedBuf {
            ptr: arena.ptr,
            len,
            arena,
        }
    }

    /// A zeroed buffer of `len` bytes, or an error instead of a panic or an
    /// abort: [`Error::InvalidArgument`] for a length the address space
    /// cannot hold, [`Error::NotEnoughMemory`] for more than the machine (or
    /// the process's memory cgroup) can give now, or than the allocator gave.
    pub fn try_new(len: usize) -> Result<AlignedBuf> {
        let what = || format!("a buffer of {len} bytes");
        if Arena::layout(len).is_none() {
            return Err(Error::InvalidArgument(format!(
                "{} overflows the address space",
                what()
            )));
        }
        // Reading the figures costs a few microseconds: only for buffers
        // large enough for that not to count.
        if len >= TRY_CHECKED {
            crate::util::room::check_memory(len as u64, what)?;
        }
        let arena = Arena::try_new(len).map_err(|_| Error::NotEnoughMemory {
            what: what(),
            needed: len as u64,
            available: 0,
            sources: "the allocator refused it".into(),
        })?;
        let arena = Arc::new(arena);
        Ok(AlignedBuf {
            ptr: arena.ptr,
            len,
            arena,
        })
    }

    /// Cut an arena into `count` buffers of `len` bytes each (`len` rounded up to the
    /// alignment for the stride).
    pub(crate) fn carve(arena: Arc<Arena>, count: usize, len: usize) -> Vec<AlignedBuf> {
        let stride = len
            .checked_next_multiple_of(BUF_ALIGN)
            .expect("a buffer length within the address space");
        assert!(stride.checked_mul(count).is_some_and(|t| t <= arena.len()));
        (0..count)
            .map(|i| AlignedBuf {
                // SAFETY: `i * stride + len <= arena.len()`, checked above.
                ptr: unsafe { NonNull::new_unchecked(arena.ptr().add(i * stride)) },
                len,
                arena: arena.clone(),
            })
            .collect()
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The fixed-buffer index of this buffer's arena on `device`, whose
    /// engine is `engine`, if registered with that engine.
    pub(crate) fn fixed_index(&self, device: usize, engine: &Arc<dyn DeviceEngine>) -> Option<u16> {
        self.arena.fixed_index(device, engine)
    }

    pub(crate) fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// The address of the bytes, for a holder that hands out access to them
    /// under rules of its own (a cache guard over a frame of its own).
    pub(crate) fn raw(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }
}

impl Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `ptr..ptr+len` lies inside the live arena and is owned by this buffer.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`, and `&mut self` makes the access exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl std::fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AlignedBuf({} bytes)", self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_aligned_and_zeroed() {
        let b = AlignedBuf::new(8192);
        assert_eq!(b.as_ptr() as usize % BUF_ALIGN, 0);
        assert!(b.iter().all(|&x| x == 0));
        let parts = AlignedBuf::carve(Arc::new(Arena::new(3 * 8192)), 3, 5000);
        for p in &parts {
            assert_eq!(p.as_ptr() as usize % BUF_ALIGN, 0);
            assert_eq!(p.len(), 5000);
        }
    }

    /// Kilobytes of the mapping holding `addr` that lie on huge pages, from
    /// `/proc/self/smaps`.
    fn huge_kib_at(addr: usize) -> Option<u64> {
        let smaps = crate::util::fds::read_text("/proc/self/smaps")?;
        let mut inside = false;
        for line in smaps.lines() {
            let first = line.split_whitespace().next().unwrap_or("");
            if let Some((lo, hi)) = first.split_once('-')
                && let (Ok(lo), Ok(hi)) =
                    (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
            {
                inside = (lo..hi).contains(&addr);
            } else if inside && let Some(v) = line.strip_prefix("AnonHugePages:") {
                return v.trim().trim_end_matches("kB").trim().parse().ok();
            }
        }
        None
    }

    #[test]
    fn a_large_arena_lies_on_huge_pages_and_reads_as_zeros() {
        // A large block freed raises the C library's threshold for giving a
        // block a mapping of its own: the next large blocks then come from
        // memory this thread wrote before, on small pages.
        drop(std::hint::black_box(vec![1u8; 24 << 20]));
        drop(std::hint::black_box(vec![1u8; 20 << 20]));
        let len = 4 * HUGE_PAGE;
        let arena = Arena::new(len);
        assert_eq!(arena.ptr() as usize % HUGE_PAGE, 0);
        // SAFETY: the arena holds `len` bytes and nothing else refers to them.
        let bytes = unsafe { std::slice::from_raw_parts(arena.ptr(), len) };
        assert!(bytes.iter().all(|&x| x == 0));
        // Where the machine gives huge pages only on advice (or always),
        // the arena has them; with none at all there is nothing to check.
        let thp = crate::util::fds::read_text("/sys/kernel/mm/transparent_hugepage/enabled")
            .unwrap_or_default();
        if thp.contains("[never]") || thp.is_empty() {
            return;
        }
        let huge = huge_kib_at(arena.ptr() as usize).expect("the arena's mapping is listed");
        assert!(
            huge >= (HUGE_PAGE / 1024) as u64,
            "{huge} KiB of the arena on huge pages"
        );
    }
}
