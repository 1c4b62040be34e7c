//! Helpers shared by the integration tests.
#![allow(dead_code, unreachable_pub)]

use std::path::{Path, PathBuf};

use setcache::{CacheOptions, EngineKind, PolicyKind, SimConfig, Store, StoreOptions};

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
/// The engine variants every suite test runs on: io_uring with queues driving
/// their own rings (eagerly or in batches) and with queues going through the
/// devices' I/O threads, psync, and the simulator.
pub fn engines() -> Vec<(&'static str, StoreOptions)> {
    let uring = |queue_rings, eager_submit| StoreOptions {
        engine: EngineKind::Uring,
        queue_rings,
        eager_submit,
        ..StoreOptions::default()
    };
    let plain = |engine| StoreOptions {
        engine,
        ..StoreOptions::default()
    };
    vec![
        ("uring", uring(true, true)),
        ("uring-batched", uring(true, false)),
        ("uring-threads", uring(false, false)),
        ("psync", plain(EngineKind::Psync)),
        ("sim", plain(EngineKind::Sim(SimConfig::default()))),
    ]
}

/// A store on `roots` with the engine settings of `opts` and this stripe unit.
pub fn open(roots: &[PathBuf], opts: StoreOptions, block_pages: u32) -> Store {
    let opts = StoreOptions {
        block_pages,
        ..opts
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

/// The partitions the tests' caches divide their sets into:
/// `SETCACHE_TEST_PARTITIONS` (1 when unset), so that the suites of the
/// cached interfaces can run again over a partitioned table.
pub fn partitions() -> usize {
    match std::env::var("SETCACHE_TEST_PARTITIONS") {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("SETCACHE_TEST_PARTITIONS={v:?} is not a number")),
        Err(_) => 1,
    }
}

/// [`partitions`], but no more than a cache of `sets` sets can have (a test
/// built on one set keeps its one set).
pub fn partitions_upto(sets: usize) -> usize {
    partitions().clamp(1, sets.max(1))
}

/// A small cache of `pages` 4 KiB pages, 4-way, CLOCK, with a 5 s pin wait: far
/// smaller than the test files, so pages are evicted and written back all the time.
pub fn small_cache(pages: usize) -> CacheOptions {
    CacheOptions {
        partitions: partitions_upto(pages / 4),
        size: pages * 4096,
        page_size: 4096,
        assoc: 4,
        policy: PolicyKind::Clock,
        pin_wait: std::time::Duration::from_secs(5),
        ..CacheOptions::default()
    }
}

/// A store of two devices in `tmp` with one file `data` of `len` bytes
/// holding `pattern(1, ..)`, written past any cache, behind a cache of
/// `pages` 4 KiB pages (`assoc`-way, CLOCK) with this pin wait.
pub fn cached_rig(
    tmp: &TempDir,
    len: usize,
    pages: usize,
    assoc: usize,
    pin_wait: std::time::Duration,
) -> setcache::CachedStore {
    cached_rig_on(tmp, len, pages, assoc, pin_wait, StoreOptions::default())
}

/// Store options of simulated devices that answer each operation in
/// `lo_us` to `hi_us` microseconds: a test that needs I/O still in flight
/// after a submit gets it however fast the disk under the test answers.
pub fn sim_devices(lo_us: u64, hi_us: u64) -> StoreOptions {
    StoreOptions {
        engine: EngineKind::Sim(SimConfig {
            latency_us: (lo_us, hi_us),
            ..SimConfig::default()
        }),
        ..StoreOptions::default()
    }
}

/// [`cached_rig`] over a store opened with `opts`.
pub fn cached_rig_on(
    tmp: &TempDir,
    len: usize,
    pages: usize,
    assoc: usize,
    pin_wait: std::time::Duration,
    opts: StoreOptions,
) -> setcache::CachedStore {
    const PS: usize = 4096;
    let store = Store::open(&tmp.devices(2), opts).unwrap();
    let f = store
        .create("data", len as u64, setcache::LayoutKind::Stripe)
        .unwrap();
    let mut b = setcache::AlignedBuf::new(len.div_ceil(PS) * PS);
    b[..len].copy_from_slice(&pattern(1, 0, len));
    f.write_at(0, &b[..len.div_ceil(512) * 512]).unwrap();
    drop(f);
    setcache::CachedStore::new(
        store,
        CacheOptions {
            size: pages * PS,
            page_size: PS,
            assoc,
            policy: PolicyKind::Clock,
            pin_wait,
            partitions: partitions_upto(pages / assoc),
            ..CacheOptions::default()
        },
    )
    .unwrap()
}

/// A child process of a kill loop, killed and reaped if the parent fails
/// half-way.
pub struct Killer(pub std::process::Child);

impl Drop for Killer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Cycles of a kill loop: `SETCACHE_KILL_CYCLES`, or `default`.
pub fn kill_cycles(default: u32) -> u32 {
    std::env::var("SETCACHE_KILL_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A scratch directory on tmpfs (`/dev/shm`) where there is one, else under the
/// target directory; removed on drop.
pub enum FastDir {
    Shm(PathBuf),
    Temp(TempDir),
}

impl FastDir {
    pub fn new(tag: &str) -> FastDir {
        let shm = Path::new("/dev/shm");
        if shm.is_dir() {
            let d = shm.join(format!("setcache-{tag}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&d);
            std::fs::create_dir_all(&d).unwrap();
            FastDir::Shm(d)
        } else {
            FastDir::Temp(TempDir::new(tag))
        }
    }

    pub fn path(&self) -> &Path {
        match self {
            FastDir::Shm(d) => d,
            FastDir::Temp(t) => t.path(),
        }
    }
}

impl Drop for FastDir {
    fn drop(&mut self) {
        if let FastDir::Shm(d) = self {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

/// In a kill loop's child (its directory in env `dir_var`): the directory, the
/// seed (env `seed_var`) and whether to use O_DIRECT (env `direct_var` = 1).
pub fn child_env(dir_var: &str, seed_var: &str, direct_var: &str) -> Option<(PathBuf, u64, bool)> {
    let dir = std::env::var(dir_var).ok()?;
    let seed = std::env::var(seed_var).unwrap().parse().unwrap();
    let direct = std::env::var(direct_var).is_ok_and(|v| v == "1");
    Some((PathBuf::from(dir), seed, direct))
}

/// A tmpfs mounted for one test, unmounted when dropped.
pub struct Tmpfs(pub PathBuf);

impl Tmpfs {
    /// A tmpfs of `mib` MiB at `dir`; `None` (and why) where this process may
    /// not mount, which fails the test instead when `CI` is set.
    pub fn mount(dir: &Path, mib: u64) -> Option<Tmpfs> {
        std::fs::create_dir_all(dir).unwrap();
        let out = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mib}m"), "tmpfs"])
            .arg(dir)
            .output()
            .ok()?;
        if !out.status.success() {
            let why = String::from_utf8_lossy(&out.stderr).trim().to_string();
            // Under CI (which runs as root) a test must not pass by skipping.
            let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
            assert!(
                !ci,
                "CI is set, but a small tmpfs cannot be mounted ({why})"
            );
            eprintln!("skipped: cannot mount a small tmpfs ({why})");
            return None;
        }
        Some(Tmpfs(dir.to_path_buf()))
    }
}

/// A store of one device on a tmpfs of `mib` MiB mounted for one test,
/// through io_uring without direct I/O (which tmpfs refuses); `None` as
/// [`Tmpfs::mount`].
pub fn tmpfs_store(tmp: &TempDir, mib: u64) -> Option<(Tmpfs, Store)> {
    let fs = Tmpfs::mount(&tmp.path().join("mnt"), mib)?;
    let root = fs.0.join("dev0");
    std::fs::create_dir_all(&root).unwrap();
    let opts = StoreOptions {
        engine: EngineKind::Uring,
        direct_io: false,
        ..StoreOptions::default()
    };
    let store = Store::open(&[&root], opts).unwrap();
    Some((fs, store))
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        unmount(&self.0);
    }
}

/// Unmount `dir`. A descriptor closed late (a store's thread ending) keeps
/// the mount busy for a moment: try again, then detach it, so that no test
/// leaves a file system mounted.
fn unmount(dir: &Path) {
    for _ in 0..50 {
        let done = std::process::Command::new("umount")
            .arg(dir)
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if done {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let _ = std::process::Command::new("umount")
        .arg("-l")
        .arg(dir)
        .status();
}

/// An ext4 file system on a loop device of `sector`-byte logical sectors,
/// mounted for one test and taken down when dropped.
pub struct LoopFs {
    pub dir: PathBuf,
    dev: String,
    image: PathBuf,
}

impl LoopFs {
    /// A file system of `mib` MiB at `dir` over an image beside it; `None`
    /// (and why) where this process may not make one, which fails the test
    /// instead when `CI` is set.
    pub fn mount(dir: &Path, mib: u64, sector: u32) -> Option<LoopFs> {
        let image = dir.with_extension("img");
        let run = |cmd: &str, args: &[&str]| -> Result<String, String> {
            let out = std::process::Command::new(cmd)
                .args(args)
                .output()
                .map_err(|e| format!("{cmd}: {e}"))?;
            if out.status.success() {
                Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
            } else {
                Err(format!(
                    "{cmd}: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                ))
            }
        };
        let made = (|| {
            std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
            let f = std::fs::File::create(&image).map_err(|e| e.to_string())?;
            f.set_len(mib << 20).map_err(|e| e.to_string())?;
            let img = image.to_str().unwrap();
            let dev = run(
                "losetup",
                &["--sector-size", &sector.to_string(), "-f", "--show", img],
            )?;
            let fs = LoopFs {
                dir: dir.to_path_buf(),
                dev: dev.clone(),
                image: image.clone(),
            };
            run("mkfs.ext4", &["-q", &dev])?;
            run("mount", &[&dev, dir.to_str().unwrap()])?;
            Ok::<_, String>(fs)
        })();
        match made {
            Ok(fs) => Some(fs),
            Err(why) => {
                let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
                assert!(
                    !ci,
                    "CI is set, but a loop file system cannot be made ({why})"
                );
                eprintln!("skipped: cannot make a loop file system ({why})");
                let _ = std::fs::remove_file(&image);
                None
            }
        }
    }
}

impl Drop for LoopFs {
    fn drop(&mut self) {
        unmount(&self.dir);
        let _ = std::process::Command::new("losetup")
            .args(["-d", &self.dev])
            .stderr(std::process::Stdio::null())
            .status();
        let _ = std::fs::remove_file(&self.image);
    }
}

/// Wait for child `pid` (made by `fork`) to end, up to 30 s: a child still
/// running then is killed and the test fails with "`what` hung". The child
/// must have ended by `_exit(0)`.
pub fn child_ends_well(pid: libc::pid_t, what: &str) {
    let t0 = std::time::Instant::now();
    let mut status = 0;
    loop {
        // SAFETY: waits for this test's child.
        if unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) } == pid {
            break;
        }
        if t0.elapsed() > std::time::Duration::from_secs(30) {
            // SAFETY: this test's child.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            panic!("{what} hung");
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "{what}: status {status}"
    );
}

/// Fill the file system holding directory `dir` (a file `ballast` in it).
pub fn take_the_rest(dir: &Path) {
    use std::io::Write;
    let mut b = std::fs::File::create(dir.join("ballast")).unwrap();
    for chunk in [1usize << 20, 4096] {
        while b.write_all(&vec![1u8; chunk]).is_ok() {}
    }
}
