//! Anonymous mappings laid on huge pages.

use super::HUGE_PAGE;

/// A private anonymous mapping of `len` bytes (a whole number of 4 KiB
/// pages), zero-filled; with `reserve_only`, made without commitment
/// (`MAP_NORESERVE`), so that it costs memory only for what is touched.
/// From one huge page on it starts on a huge-page boundary (one huge page
/// more is reserved, and the slack on either side given back) and is advised
/// onto transparent huge pages, so that it maps with 2 MiB pages when first
/// touched: fewer TLB misses, and fewer pages for the kernel to pin for I/O.
pub(crate) fn map_anon(len: usize, reserve_only: bool) -> std::io::Result<*mut u8> {
    debug_assert!(len > 0 && len.is_multiple_of(4096));
    let extra = if len >= HUGE_PAGE { HUGE_PAGE } else { 0 };
    let flags = libc::MAP_PRIVATE
        | libc::MAP_ANONYMOUS
        | if reserve_only { libc::MAP_NORESERVE } else { 0 };
    // SAFETY: an anonymous private mapping with no address hint has no preconditions; the result is checked below.
    let raw = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len + extra,
            libc::PROT_READ | libc::PROT_WRITE,
            flags,
            -1,
            0,
        )
    };
    if raw == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error());
    }
    let raw = raw.cast::<u8>();
    let head = raw.align_offset(HUGE_PAGE).min(extra);
    // SAFETY: `head <= extra`, so both trimmed pieces lie inside the mapping just made, and nothing refers to them.
    unsafe {
        if head > 0 {
            libc::munmap(raw.cast(), head);
        }
        if extra > head {
            libc::munmap(raw.add(head + len).cast(), extra - head);
        }
    }
    // SAFETY: `head` is inside the mapping.
    let ptr = unsafe { raw.add(head) };
    if extra > 0 {
        // SAFETY: advice on our own mapping; failure only means small pages.
        unsafe { libc::madvise(ptr.cast(), len, libc::MADV_HUGEPAGE) };
    }
    Ok(ptr)
}
