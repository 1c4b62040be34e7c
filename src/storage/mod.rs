//! The storage layer: named files striped over device directories, each
//! device driven by an engine (io_uring, a pread/pwrite pool, or simulated
//! media), with synchronous calls and per-thread asynchronous queues.

pub(crate) mod buf;
pub(crate) mod file;
pub(crate) mod header;
pub(crate) mod io;
pub mod layout;
pub(crate) mod queue;
pub(crate) mod store;
pub(crate) mod watch;

pub use buf::{AlignedBuf, BUF_ALIGN};
pub use file::{DIRECT_ALIGN, File, MAX_REQUEST, OpKind};
pub use header::HEADER_BYTES;
pub use io::{EngineKind, PowerCut, SimConfig, SimMedia, SimSwitches};
pub use layout::{DeviceBlock, DeviceOffset, Layout, LayoutKind};
pub use queue::{Completion, DEFAULT_POLL, MAX_POLL, MAX_QUEUE_DEPTH, Queue, Request};
pub use store::{DeviceBytes, FileInfo, Store, StoreOptions};

/// A store of one io_uring device in a fresh directory of the system's
/// temporary directory named by `tag` and the process (for unit tests; the
/// caller removes the directory).
#[cfg(test)]
pub(crate) fn uring_store_for_tests(tag: &str) -> (std::path::PathBuf, Store) {
    let dir = std::env::temp_dir().join(format!("setcache-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let opts = StoreOptions {
        engine: EngineKind::Uring,
        ..StoreOptions::default()
    };
    let store = Store::open(std::slice::from_ref(&dir), opts).unwrap();
    (dir, store)
}
