//! Unit tests only: a global allocator that passes every call to the system
//! allocator and, on a thread that asks it to, records the largest single
//! allocation requested, so that a test can show that a parser asks for no
//! more memory than its input justifies.
//!
//! The library's and the `setcache` binary's unit tests each compile this
//! file as their own module (both crate roots are in `src/`), since a test
//! binary has one global allocator.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

thread_local! {
    /// Whether this thread records its allocations now.
    static MEASURING: Cell<bool> = const { Cell::new(false) };
    /// The largest single request, in bytes, since measuring began.
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

/// Records `bytes` if this thread measures. Both cells are const-initialised
/// and have no destructor, so reaching them allocates nothing (no recursion
/// into the allocator); `try_with` covers a thread whose locals are gone.
fn note(bytes: usize) {
    let on = MEASURING.try_with(Cell::get).unwrap_or(false);
    if on {
        let _ = LARGEST.try_with(|l| l.set(l.get().max(bytes)));
    }
}

/// [`System`], plus [`note`] on every request.
struct Probe;

// SAFETY: every method hands its arguments to `System` unchanged and returns
// what `System` returns; the only addition is `note`, which neither allocates
// nor unwinds.
unsafe impl GlobalAlloc for Probe {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: the caller's guarantees for `alloc` are passed on as they are.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: the caller's guarantees for `alloc_zeroed` are passed on as they are.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System` (every allocation here does), with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        // SAFETY: `ptr` came from `System` with `layout`; the caller's guarantees
        // for `realloc` are passed on as they are.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static PROBE: Probe = Probe;

/// Runs `f` and returns its result with the largest single allocation, in
/// bytes, that this thread requested while it ran (granted or not: a refused
/// `try_reserve` counts too). Other threads are not counted.
pub(crate) fn largest_alloc<R>(f: impl FnOnce() -> R) -> (R, usize) {
    /// Stops measuring even if `f` panics.
    struct Stop;
    impl Drop for Stop {
        fn drop(&mut self) {
            MEASURING.with(|m| m.set(false));
        }
    }
    LARGEST.with(|l| l.set(0));
    MEASURING.with(|m| m.set(true));
    let stop = Stop;
    let r = f();
    drop(stop);
    (r, LARGEST.with(Cell::get))
}

/// The most a parser may ask for at once while it reads `n` bytes of input:
/// `max(1 MiB, 64 n)`.
///
/// * 1 MiB covers the buffers that do not depend on the input: the trace
///   readers' 1 MiB `BufReader`, the gzip decoder's window and tables, the
///   4 KiB header buffer, the trace's first page-id map (1024 slots) and its
///   first room for 4096 requests, clap's command description.
/// * 64 per input byte covers what grows with the input: copies of the text
///   (a line, its fields, a message quoting it) and what it decodes to. The
///   densest trace is text, 2 bytes (`0\n`) per request: the page-id vector
///   holds 4 bytes a request and doubles (at most 8 per request, 4 per input
///   byte); the page map's key table holds 8 bytes a slot, is at most half
///   full when it doubles, so at most 4 slots a page (32 bytes a page, 16 per
///   input byte). JSON decodes to a `Value` of 32 bytes per element, at least
///   2 input bytes each, in a doubling vector (32 per input byte). 64 leaves
///   twice the largest of these.
///
/// An allocation that follows a length or a count read from the input,
/// rather than the bytes actually there, breaks this bound for short inputs.
pub(crate) fn input_bound(n: usize) -> usize {
    (1 << 20usize).max(n.saturating_mul(64))
}
