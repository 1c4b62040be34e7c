//! # setcache
//!
//! A user-space, set-associative, parallel page cache over an array of SSDs.
//!
//! Random small I/O at millions of operations per second breaks the Linux page cache
//! on lock contention and page churn, while O_DIRECT gives up caching altogether.
//! setcache keeps both: this crate's storage layer presents named files striped over
//! several devices (one directory per SSD), each device driven by one dedicated I/O
//! thread with its own io_uring, and (in the layers to come) a page cache made of many
//! small, independently locked page sets on top.
//!
//! ```no_run
//! use setcache::{AlignedBuf, LayoutKind, Queue, Request, Store, StoreOptions};
//!
//! let store = Store::open(&["/ssd0", "/ssd1"], StoreOptions::default())?;
//! let file = store.create("graph", 1 << 30, LayoutKind::Stripe)?;
//! let mut page = AlignedBuf::new(4096);
//! file.read_at(8192, &mut page)?; // synchronous
//!
//! let mut q = Queue::new(32); // asynchronous, 32 in flight
//! q.submit(vec![Request::read(&file, 0, AlignedBuf::new(4096), |c| {
//!     c.result.expect("read failed");
//! })]);
//! q.drain();
//! # Ok::<(), setcache::Error>(())
//! ```

#![warn(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

// Layers, lowest first (a layer imports only from the ones above it in this
// list; `tests/layering.rs` checks it): shared pieces; the storage layer; the
// set-associative page cache; cached files joining the two; the hit-ratio
// simulator.
mod error;
mod util;

mod storage;

pub mod cache;

mod cached;

pub mod hitsim;

#[cfg(test)]
mod test_alloc;

pub use cache::{
    CacheOptions, CacheStats, CachedPage, Fill, FillMut, Lookup, LookupMut, PageCache, PageMut,
    PageRef, PolicyKind, SetMetadataBytes, WriteBack,
};
pub use cached::{
    CachedCompletion, CachedFile, CachedQueue, CachedRequest, CachedStore, FlushOptions,
    FlusherCounts,
};
pub use error::{Error, Result};
pub use storage::layout;
pub use storage::{
    AlignedBuf, BUF_ALIGN, Completion, DEFAULT_POLL, DIRECT_ALIGN, EngineKind, File, FileInfo,
    HEADER_BYTES, Layout, LayoutKind, OpKind, PowerCut, Queue, Request, SimConfig, SimMedia,
    SimSwitches, Store, StoreOptions,
};
