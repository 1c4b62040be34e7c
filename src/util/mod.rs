//! Small pieces every layer shares.

pub mod cancel;
pub mod fds;
pub(crate) mod fork_locks;
#[cfg(test)]
pub(crate) mod hook;
pub(crate) mod map;
pub(crate) mod mix;
pub(crate) mod nodes;
pub(crate) mod origin;
pub(crate) mod panics;
pub mod process;
pub(crate) mod room;
pub(crate) mod size;
pub(crate) mod slab;
pub(crate) mod spread;
pub(crate) mod stream;

pub(crate) use size::human_size;

/// Size of a transparent huge page on the machines the crate runs on.
pub(crate) const HUGE_PAGE: usize = 2 << 20;
