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
pub use file::{DIRECT_ALIGN, File, OpKind};
pub use header::HEADER_BYTES;
pub use io::{EngineKind, PowerCut, SimConfig, SimMedia, SimSwitches};
pub use layout::{DeviceBlock, DeviceOffset, Layout, LayoutKind};
pub use queue::{Completion, DEFAULT_POLL, Queue, Request};
pub use store::{DeviceBytes, FileInfo, Store, StoreOptions};
