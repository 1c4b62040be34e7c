//! The set-associative page cache.

pub mod policy;
