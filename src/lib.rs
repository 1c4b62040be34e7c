//! # setcache
//!
//! A user-space, set-associative, parallel page cache over an array of SSDs.
//! Linux only: it drives the devices through io_uring with O_DIRECT and
//! sleeps on futexes.
//!
//! Random small I/O at millions of operations per second breaks the Linux page cache
//! on lock contention and page churn, while O_DIRECT gives up caching altogether.
//! setcache keeps both, in three layers, each usable on its own:
//!
//! * **Storage.** A [`Store`] presents named [`File`]s striped over several
//!   devices (one directory per SSD), each device driven by one dedicated I/O
//!   thread with its own io_uring (or a pread/pwrite pool, or simulated media:
//!   [`EngineKind`]). A file is read and written synchronously at 512-byte
//!   aligned offsets, or asynchronously in batches through a per-thread
//!   [`Queue`].
//! * **Page cache.** A [`PageCache`] is made of many small sets of pages, each
//!   with its own lock and its own replacement policy ([`PolicyKind`]), so
//!   threads that touch different sets never meet. Most hits take no lock; a
//!   miss is filled by exactly one requester while the others wait for it; the
//!   cache can grow and shrink while in use. [`PageCache::get`] returns a
//!   [`Lookup`]: a pinned page, a frame to fill, or a dirty page to write back
//!   first.
//! * **Cached files.** A [`CachedStore`] puts a page cache in front of a store:
//!   its [`CachedFile`]s read and write any offset and length through the cache,
//!   synchronously or through a per-thread [`CachedQueue`]; dirty pages are
//!   written back by a background flusher ([`FlushOptions`]) or when their set
//!   needs room, and [`CachedFile::sync`] makes them durable (it writes them
//!   back, then calls `fdatasync` on the file's backing files). Sequential
//!   streams are read ahead ([`Advice`]); [`CachedFile::page`] hands out the
//!   cached page itself, and [`CachedFile::read_at_async`] a future.
//!
//! On top of cached files, a [`PagedArray`] is an array of fixed-size
//! elements far larger than memory, read through per-thread translation caches.
//! With the default `tools` feature, `hitsim` replays traces through the
//! cache's policies and global ones to compare hit ratios (the `setcache sim`
//! command); [`cache`] holds the cache's lower-level pieces (its
//! policies, memory checks and the synchronisation model). Each of the types
//! above has an example that runs as a test; the one below shows the shape of
//! a program on two SSDs.
//!
//! ```no_run
//! use setcache::{CacheOptions, CachedStore, LayoutKind, Store, StoreOptions};
//!
//! let store = Store::open(&["/ssd0", "/ssd1"], StoreOptions::default())?;
//! store.create("graph", 1 << 30, LayoutKind::Stripe)?;
//! let cache = CacheOptions { size: 256 << 20, ..CacheOptions::default() };
//! let cs = CachedStore::new(store, cache)?;
//! let f = cs.open_file("graph")?;
//! f.write_at(100, b"hello")?; // any offset and length, into the cache
//! let mut b = [0u8; 5];
//! f.read_at(100, &mut b)?;
//! f.sync()?; // written back and durable
//! # Ok::<(), setcache::Error>(())
//! ```

#![warn(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

// Layers, lowest first (a layer imports only from the ones above it in this
// list, and not from the others of its own line; `tests/layering.rs` checks
// it): shared pieces; the storage layer; the set-associative page cache;
// cached files joining the two; above them, side by side, the paged arrays,
// the partitioned mode and the hit-ratio simulator.
mod error;
mod util;

mod storage;

pub mod cache;

mod cached;

mod array;
mod numa;

#[cfg(feature = "tools")]
pub mod hitsim;

#[cfg(test)]
mod test_alloc;

/// The README's examples, compiled as doc tests so that they keep to the API.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeExamples;

pub use array::{
    ArrayIter, ArrayReader, Element, MAX_ELEMENT_BYTES, MAX_PAR_THREADS, PagedArray, Run, RunIter,
    TranslationStats, reader_table_bytes,
};
pub use cache::{
    CacheOptions, CacheStats, CachedPage, Fill, FillMut, Lookup, LookupMut, MAX_PIN_WAIT,
    PageCache, PageId, PageMut, PageRef, PolicyKind, SetMetadataBytes, WriteBack,
};
pub use cached::{
    Advice, CacheView, CachedCompletion, CachedFile, CachedQueue, CachedRequest, CachedStore,
    DEFAULT_READAHEAD_BYTES, FlushOptions, FlusherCounts, Guarded, MAX_GUARDS_PER_THREAD, PageAt,
    PageGuard, PageGuardMut, ReadAt, WorkerCpus, WriteAt,
};
pub use error::{Error, Result};
pub use numa::{
    MAX_PARTITIONS, Node, PartCompletion, PartQueue, PartitionOptions, Partitions, Task, nodes,
};
pub use storage::layout;
pub use storage::{
    AlignedBuf, BUF_ALIGN, Completion, DEFAULT_POLL, DIRECT_ALIGN, DeviceBlock, DeviceBytes,
    DeviceOffset, EngineKind, File, FileInfo, HEADER_BYTES, Layout, LayoutKind, MAX_POLL,
    MAX_QUEUE_DEPTH, MAX_REQUEST, OpKind, PowerCut, Queue, Request, SimConfig, SimMedia,
    SimSwitches, Store, StoreOptions,
};
pub use util::cancel;
pub use util::fds;
pub use util::process;
