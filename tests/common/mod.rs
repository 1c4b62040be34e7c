//! Helpers shared by the integration tests.
#![allow(dead_code, unreachable_pub)]

use std::path::{Path, PathBuf};

use setcache::{EngineKind, SimConfig, Store, StoreOptions};

/// A temporary directory removed on drop. Lives under the target directory, which is
/// on the same (O_DIRECT-capable) file system as the checkout.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let base = Path::new(env!("CARGO_TARGET_TMPDIR"));
        let p = base.join(format!(
            "{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    /// Make `n` device roots inside.
    pub fn devices(&self, n: usize) -> Vec<PathBuf> {
        (0..n)
            .map(|i| {
                let d = self.0.join(format!("dev{i}"));
                std::fs::create_dir_all(&d).unwrap();
                d
            })
            .collect()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The engines every shared test runs against.
pub fn engines() -> Vec<(&'static str, EngineKind)> {
    vec![
        ("uring", EngineKind::Uring),
        ("psync", EngineKind::Psync),
        ("sim", EngineKind::Sim(SimConfig::default())),
    ]
}

pub fn open(roots: &[PathBuf], engine: EngineKind, block_pages: u32) -> Store {
    let opts = StoreOptions {
        engine,
        block_pages,
        ..StoreOptions::default()
    };
    Store::open(roots, opts).unwrap()
}

/// Deterministic bytes for position `i` under seed `s`.
pub fn pattern(seed: u64, off: u64, len: usize) -> Vec<u8> {
    (0..len as u64)
        .map(|i| {
            let x = (off + i).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ seed;
            (x >> 29) as u8
        })
        .collect()
}

/// A tiny deterministic generator for test workloads.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        setcache::layout::mix64(self.0)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}
