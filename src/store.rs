//! The store: a set of device roots, its engines, and the named files on them.
//!
//! Metadata operations (create, open, delete, rename, set_len) are rare and go
//! straight to the file systems with ordinary system calls, serialised by one lock;
//! data I/O never takes that lock.

use std::collections::{BTreeSet, HashMap};
use std::fs;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, Weak};

use crate::buf::{AlignedBuf, Arena};
use crate::error::{Error, Result};
use crate::file::{DIRECT_ALIGN, File, FileInner};
use crate::header::{HEADER_BYTES, Header};
use crate::io::{Backing, DeviceEngine, DeviceState, EngineKind, EngineParams, start_engines};
use crate::layout::{Layout, LayoutKind, MAX_DEVICES, mix64};

/// Suffix of backing files in a device root.
const SUFFIX: &str = ".scf";

/// Settings of a store.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// The I/O engine.
    pub engine: EngineKind,
    /// Stripe unit in pages. 16 pages of 4 KiB, as in the SAFS paper's Table 2: large
    /// enough that a page-sized request rarely crosses devices, small enough to spread
    /// random I/O evenly.
    pub block_pages: u32,
    /// Page size in bytes, a power of two from 512 B to 1 MiB.
    pub page_size: u32,
    /// Requests in flight per device. 32 is where one NVMe or SATA SSD reaches its
    /// random-read peak (and the machine's disk its ~65k IOPS).
    pub io_depth: u32,
    /// Threads per device of the psync engine.
    pub psync_threads: usize,
    /// Pin the I/O thread of device `i` to CPU `cpu_affinity[i % len]`.
    pub cpu_affinity: Option<Vec<usize>>,
    /// Open backing files with O_DIRECT (bypass the kernel page cache).
    pub direct_io: bool,
    /// With the uring engine, let each [`crate::Queue`] drive the devices it uses
    /// through rings of its own (the application thread submits and reaps, as fio
    /// does) instead of sending its batches to the devices' I/O threads. Saves two
    /// thread hand-offs per request; synchronous calls always use the I/O threads.
    pub queue_rings: bool,
    /// With `queue_rings`, pass each operation to the kernel as soon as it is
    /// queued instead of once per batch. On the development machine's virtio disk
    /// batched submission (one kick for several requests) costs about 15% of the
    /// random-read IOPS at depth 32; on NVMe, batching saves system calls.
    pub eager_submit: bool,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            engine: EngineKind::Auto,
            block_pages: 16,
            page_size: 4096,
            io_depth: 32,
            psync_threads: 4,
            cpu_affinity: None,
            direct_io: true,
            queue_rings: true,
            eager_submit: true,
        }
    }
}

/// What `Store::info` reports about a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileInfo {
    /// Its name.
    pub name: String,
    /// Its length in bytes.
    pub len: u64,
    /// Its layout.
    pub layout: LayoutKind,
    /// Its stripe unit in bytes.
    pub block_bytes: u64,
    /// Devices it spans.
    pub devices: usize,
}

pub(crate) struct StoreInner {
    roots: Vec<PathBuf>,
    block_bytes: u64,
    direct_io: bool,
    engines: Vec<Arc<dyn DeviceEngine>>,
    states: Vec<Arc<DeviceState>>,
    engine_name: &'static str,
    /// Open files by name; also serialises metadata operations.
    meta: Mutex<HashMap<String, Weak<FileInner>>>,
}

impl Drop for StoreInner {
    fn drop(&mut self) {
        for e in &self.engines {
            e.shutdown();
        }
    }
}

/// A store over a list of device roots. Cheap to clone; `Send + Sync`.
#[derive(Clone)]
pub struct Store {
    inner: Arc<StoreInner>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("roots", &self.inner.roots)
            .field("engine", &self.inner.engine_name)
            .finish()
    }
}

fn validate_name(name: &str) -> Result<()> {
    let bad = |problem| {
        Err(Error::InvalidName {
            name: name.to_string(),
            problem,
        })
    };
    if name.is_empty() {
        return bad("empty");
    }
    if name.len() > 200 {
        return bad("longer than 200 bytes");
    }
    if name.starts_with('.') {
        return bad("starts with '.'");
    }
    if name.contains('/') || name.contains('\0') {
        return bad("contains '/' or NUL");
    }
    Ok(())
}

/// Check that a device root is a usable, writable directory.
fn check_root(device: usize, root: &Path, direct: bool) -> Result<(u64, u64)> {
    let bad = |problem: String| Error::BadDevice {
        device,
        root: root.to_path_buf(),
        problem,
    };
    let md = fs::metadata(root).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => bad("does not exist".into()),
        _ => bad(format!("cannot be examined: {e}")),
    })?;
    if !md.is_dir() {
        return Err(bad("is not a directory".into()));
    }
    if md.mode() & 0o222 == 0 {
        return Err(bad(format!("is read-only (mode {:o})", md.mode() & 0o7777)));
    }
    let probe = root.join(format!(".setcache-probe-{}", std::process::id()));
    let flags = if direct { libc::O_DIRECT } else { 0 };
    match open_raw(&probe, libc::O_RDWR | libc::O_CREAT | libc::O_TRUNC | flags) {
        Ok(_) => {
            let _ = fs::remove_file(&probe);
        }
        Err(e) => {
            let _ = fs::remove_file(&probe);
            return Err(match e.raw_os_error() {
                Some(libc::EROFS) => bad("is on a read-only file system".into()),
                Some(libc::EINVAL) if direct => bad(
                    "its file system does not support O_DIRECT (open the store with direct_io = false)".into(),
                ),
                _ => bad(format!("is not writable: {e}")),
            });
        }
    }
    Ok((md.dev(), md.ino()))
}

fn open_raw(path: &Path, flags: i32) -> std::io::Result<OwnedFd> {
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: `c` is a valid NUL-terminated path; the mode is used only with O_CREAT.
    let fd = unsafe { libc::open(c.as_ptr(), flags | libc::O_CLOEXEC, 0o644 as libc::c_uint) };
    if fd < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        // SAFETY: `fd` is a fresh descriptor owned by nobody else.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }
}

fn pread_exact(fd: &OwnedFd, buf: &mut [u8], off: u64) -> std::io::Result<usize> {
    // SAFETY: `buf` is valid for writes of its length.
    let n = unsafe {
        libc::pread(
            fd.as_raw_fd(),
            buf.as_mut_ptr().cast(),
            buf.len(),
            off as i64,
        )
    };
    if n < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

fn pwrite_all(fd: &OwnedFd, buf: &[u8], off: u64) -> std::io::Result<()> {
    // SAFETY: `buf` is valid for reads of its length.
    let n = unsafe { libc::pwrite(fd.as_raw_fd(), buf.as_ptr().cast(), buf.len(), off as i64) };
    if n < 0 {
        Err(std::io::Error::last_os_error())
    } else if (n as usize) < buf.len() {
        Err(std::io::Error::from_raw_os_error(libc::ENOSPC))
    } else {
        Ok(())
    }
}

fn fsync_fd(fd: &OwnedFd) -> std::io::Result<()> {
    // SAFETY: plain system call on an open descriptor.
    if unsafe { libc::fsync(fd.as_raw_fd()) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

fn sync_dir(dir: &Path) {
    if let Ok(f) = fs::File::open(dir) {
        let _ = f.sync_all();
    }
}

fn truncate(fd: &OwnedFd, len: u64) -> std::io::Result<()> {
    // SAFETY: plain system call on an open descriptor.
    if unsafe { libc::ftruncate(fd.as_raw_fd(), len as i64) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

fn new_uid() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    mix64(
        t ^ ((std::process::id() as u64) << 40)
            ^ COUNTER.fetch_add(1, Ordering::Relaxed).rotate_left(20),
    )
}

impl Store {
    /// Open a store on `roots`, one directory per device.
    pub fn open<P: AsRef<Path>>(roots: &[P], opts: StoreOptions) -> Result<Store> {
        if roots.is_empty() {
            return Err(Error::NoDevices);
        }
        if roots.len() > MAX_DEVICES {
            return Err(Error::InvalidArgument(format!(
                "{} devices given; at most {MAX_DEVICES} are supported",
                roots.len()
            )));
        }
        if !(512..=1 << 20).contains(&opts.page_size) || !opts.page_size.is_power_of_two() {
            return Err(Error::InvalidArgument(format!(
                "page size {} is not a power of two from 512 to 1048576 bytes",
                opts.page_size
            )));
        }
        if opts.block_pages == 0 || opts.block_pages > 1 << 16 {
            return Err(Error::InvalidArgument(format!(
                "block size of {} pages is outside 1..=65536",
                opts.block_pages
            )));
        }
        if opts.io_depth == 0 || opts.io_depth > 4096 {
            return Err(Error::InvalidArgument(format!(
                "I/O depth {} is outside 1..=4096",
                opts.io_depth
            )));
        }
        let mut seen: HashMap<(u64, u64), usize> = HashMap::new();
        let mut paths = Vec::with_capacity(roots.len());
        for (i, r) in roots.iter().enumerate() {
            let r = r.as_ref();
            let id = check_root(i, r, opts.direct_io)?;
            if let Some(j) = seen.insert(id, i) {
                return Err(Error::BadDevice {
                    device: i,
                    root: r.to_path_buf(),
                    problem: format!("is the same directory as device {j}"),
                });
            }
            paths.push(r.to_path_buf());
        }
        let params: Vec<EngineParams> = (0..paths.len())
            .map(|i| EngineParams {
                device: i,
                io_depth: opts.io_depth,
                queue_rings: opts.queue_rings.then_some(crate::io::QueueRings {
                    eager: opts.eager_submit,
                }),
                psync_threads: opts.psync_threads,
                cpu: opts
                    .cpu_affinity
                    .as_ref()
                    .filter(|c| !c.is_empty())
                    .map(|c| c[i % c.len()]),
            })
            .collect();
        let (engines, engine_name) = start_engines(&opts.engine, &params)?;
        Ok(Store {
            inner: Arc::new(StoreInner {
                roots: paths,
                block_bytes: opts.block_pages as u64 * opts.page_size as u64,
                direct_io: opts.direct_io,
                engines,
                states: (0..roots.len())
                    .map(|i| Arc::new(DeviceState::new(i)))
                    .collect(),
                engine_name,
                meta: Mutex::new(HashMap::new()),
            }),
        })
    }

    /// The engine in use: "uring", "psync" or "sim".
    pub fn engine_name(&self) -> &'static str {
        self.inner.engine_name
    }

    /// Number of devices.
    pub fn devices(&self) -> usize {
        self.inner.roots.len()
    }

    /// The stripe unit of new files, in bytes.
    pub fn block_bytes(&self) -> u64 {
        self.inner.block_bytes
    }

    /// The backing file of `name` on each device, in device order.
    pub fn backing_paths(&self, name: &str) -> Vec<PathBuf> {
        self.inner.backing_paths(name)
    }

    /// The first failure of each device, if any.
    pub fn device_errors(&self) -> Vec<Option<Error>> {
        self.inner.states.iter().map(|s| s.check().err()).collect()
    }

    /// Create a file of `size` bytes (a multiple of 512), zero-filled, and open it.
    pub fn create(&self, name: &str, size: u64, layout: LayoutKind) -> Result<File> {
        validate_name(name)?;
        if size % DIRECT_ALIGN != 0 {
            return Err(Error::InvalidArgument(format!(
                "file size {size} is not a multiple of {DIRECT_ALIGN} bytes"
            )));
        }
        let inner = &self.inner;
        let mut meta = inner.lock_meta();
        let l = Layout::new(layout, inner.roots.len(), inner.block_bytes)?;
        let uid = new_uid();
        let paths = inner.backing_paths(name);
        let mut fds: Vec<OwnedFd> = Vec::with_capacity(paths.len());
        let cleanup = |n: usize| {
            for p in &paths[..n] {
                let _ = fs::remove_file(p);
            }
        };
        for (i, p) in paths.iter().enumerate() {
            let step = (|| -> Result<OwnedFd> {
                let fd = open_raw(
                    p,
                    libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | inner.direct_flag(),
                )
                .map_err(|e| {
                    if e.raw_os_error() == Some(libc::EEXIST) {
                        Error::FileExists(name.to_string())
                    } else {
                        Error::os(format!("device {i}: create"), p, e)
                    }
                })?;
                let h = Header {
                    layout,
                    block_bytes: inner.block_bytes,
                    len: size,
                    devices: paths.len() as u32,
                    device_index: i as u32,
                    file_uid: uid,
                };
                write_header(&fd, &h)
                    .map_err(|e| Error::os(format!("device {i}: write header of"), p, e))?;
                truncate(&fd, HEADER_BYTES + l.device_bytes(size))
                    .map_err(|e| Error::os(format!("device {i}: size"), p, e))?;
                fsync_fd(&fd).map_err(|e| Error::os(format!("device {i}: fsync"), p, e))?;
                Ok(fd)
            })();
            match step {
                Ok(fd) => fds.push(fd),
                Err(e) => {
                    // Remove only what this call created (an existing file stays).
                    let created = if matches!(e, Error::FileExists(_)) {
                        i
                    } else {
                        i + 1
                    };
                    cleanup(created);
                    return Err(e);
                }
            }
        }
        for r in &inner.roots {
            sync_dir(r);
        }
        let file = self.wrap(name, l, size, uid, fds)?;
        meta.insert(name.to_string(), Arc::downgrade(&file.inner));
        Ok(file)
    }

    fn wrap(
        &self,
        name: &str,
        layout: Layout,
        len: u64,
        uid: u64,
        fds: Vec<OwnedFd>,
    ) -> Result<File> {
        let inner = &self.inner;
        let backings = fds
            .into_iter()
            .enumerate()
            .map(|(i, fd)| {
                Arc::new(Backing::new(
                    fd,
                    uid,
                    inner.states[i].clone(),
                    &inner.engines[i],
                ))
            })
            .collect();
        Ok(File {
            inner: Arc::new(FileInner {
                name: RwLock::new(Arc::from(name)),
                layout,
                len: AtomicU64::new(len),
                uid,
                backings,
                store: inner.clone(),
            }),
        })
    }

    /// Open an existing file, checking its header on every device.
    pub fn open_file(&self, name: &str) -> Result<File> {
        validate_name(name)?;
        let inner = &self.inner;
        let mut meta = inner.lock_meta();
        if let Some(f) = meta.get(name).and_then(Weak::upgrade) {
            return Ok(File { inner: f });
        }
        let paths = inner.backing_paths(name);
        if paths.iter().all(|p| !p.exists()) {
            return Err(Error::FileNotFound(name.to_string()));
        }
        let mut fds = Vec::with_capacity(paths.len());
        let mut first: Option<Header> = None;
        for (i, p) in paths.iter().enumerate() {
            let bad = |problem: String| Error::BadHeader {
                device: i,
                path: p.clone(),
                problem,
            };
            let fd = open_raw(p, libc::O_RDWR | inner.direct_flag()).map_err(|e| {
                match e.raw_os_error() {
                    Some(libc::ENOENT) => {
                        bad("backing file is missing (the device lost this file's data)".into())
                    }
                    _ => Error::os(format!("device {i}: open"), p, e),
                }
            })?;
            let mut hb = AlignedBuf::new(HEADER_BYTES as usize);
            let n = pread_exact(&fd, &mut hb, 0)
                .map_err(|e| Error::os(format!("device {i}: read header of"), p, e))?;
            let h = Header::decode(&hb[..n]).map_err(bad)?;
            if h.devices as usize != paths.len() {
                return Err(bad(format!(
                    "file spans {} devices but the store has {}",
                    h.devices,
                    paths.len()
                )));
            }
            if h.device_index as usize != i {
                return Err(bad(format!(
                    "this piece belongs to device {} (device roots given in a different order?)",
                    h.device_index
                )));
            }
            if let Some(f) = &first {
                let mut diffs = Vec::new();
                if f.file_uid != h.file_uid {
                    diffs.push("file identity");
                }
                if f.len != h.len {
                    diffs.push("length");
                }
                if f.layout != h.layout {
                    diffs.push("layout");
                }
                if f.block_bytes != h.block_bytes {
                    diffs.push("block size");
                }
                if !diffs.is_empty() {
                    return Err(bad(format!(
                        "disagrees with device 0 on {}",
                        diffs.join(", ")
                    )));
                }
            }
            let l = Layout::new(h.layout, paths.len(), h.block_bytes)
                .map_err(|e| bad(e.to_string()))?;
            let need = HEADER_BYTES + l.device_bytes(h.len);
            let have = fs::metadata(p).map(|m| m.len()).unwrap_or(0);
            if have < need {
                return Err(bad(format!(
                    "backing file is truncated: {have} bytes, need {need}"
                )));
            }
            first.get_or_insert(h);
            fds.push(fd);
        }
        let h = first.expect("at least one device");
        let l = Layout::new(h.layout, paths.len(), h.block_bytes)?;
        let file = self.wrap(name, l, h.len, h.file_uid, fds)?;
        meta.insert(name.to_string(), Arc::downgrade(&file.inner));
        Ok(file)
    }

    /// Describe a file.
    pub fn info(&self, name: &str) -> Result<FileInfo> {
        let f = self.open_file(name)?;
        Ok(FileInfo {
            name: name.to_string(),
            len: f.len(),
            layout: f.inner.layout.kind(),
            block_bytes: f.inner.layout.block_bytes(),
            devices: f.inner.layout.devices(),
        })
    }

    /// Names of the files present on any device, sorted.
    pub fn list(&self) -> Result<Vec<String>> {
        let mut names = BTreeSet::new();
        for (i, r) in self.inner.roots.iter().enumerate() {
            let rd = fs::read_dir(r).map_err(|e| Error::os(format!("device {i}: list"), r, e))?;
            for ent in rd.flatten() {
                if let Some(n) = ent
                    .file_name()
                    .to_str()
                    .and_then(|n| n.strip_suffix(SUFFIX))
                {
                    if validate_name(n).is_ok() {
                        names.insert(n.to_string());
                    }
                }
            }
        }
        Ok(names.into_iter().collect())
    }

    /// Delete a file from every device. Open handles keep working until dropped.
    pub fn delete(&self, name: &str) -> Result<()> {
        validate_name(name)?;
        let mut meta = self.inner.lock_meta();
        let paths = self.inner.backing_paths(name);
        if paths.iter().all(|p| !p.exists()) {
            return Err(Error::FileNotFound(name.to_string()));
        }
        for (i, p) in paths.iter().enumerate() {
            match fs::remove_file(p) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(Error::os(format!("device {i}: delete"), p, e)),
            }
        }
        meta.remove(name);
        for r in &self.inner.roots {
            sync_dir(r);
        }
        Ok(())
    }

    /// Rename a file on every device; `to` must not exist.
    pub fn rename(&self, from: &str, to: &str) -> Result<()> {
        validate_name(from)?;
        validate_name(to)?;
        let mut meta = self.inner.lock_meta();
        let src = self.inner.backing_paths(from);
        let dst = self.inner.backing_paths(to);
        if src.iter().all(|p| !p.exists()) {
            return Err(Error::FileNotFound(from.to_string()));
        }
        if dst.iter().any(|p| p.exists()) {
            return Err(Error::FileExists(to.to_string()));
        }
        for i in 0..src.len() {
            if let Err(e) = fs::rename(&src[i], &dst[i]) {
                for j in 0..i {
                    let _ = fs::rename(&dst[j], &src[j]);
                }
                return Err(Error::os(format!("device {i}: rename"), &src[i], e));
            }
        }
        for r in &self.inner.roots {
            sync_dir(r);
        }
        if let Some(w) = meta.remove(from) {
            if let Some(f) = w.upgrade() {
                *f.name.write().unwrap_or_else(|p| p.into_inner()) = Arc::from(to);
                meta.insert(to.to_string(), Arc::downgrade(&f));
            }
        }
        Ok(())
    }

    /// Allocate `count` buffers of `len` bytes from one arena registered with the
    /// engines (io_uring fixed buffers) where the engine supports it.
    pub fn alloc_registered(&self, count: usize, len: usize) -> Result<Vec<AlignedBuf>> {
        if count == 0 || len == 0 {
            return Ok(Vec::new());
        }
        let stride = len.div_ceil(crate::buf::BUF_ALIGN) * crate::buf::BUF_ALIGN;
        let total = stride.checked_mul(count).ok_or_else(|| {
            Error::InvalidArgument(format!("{count} buffers of {len} bytes overflow"))
        })?;
        let mut arena = Arena::new(total);
        arena.register(&self.inner.engines);
        Ok(AlignedBuf::carve(Arc::new(arena), count, len))
    }
}

fn write_header(fd: &OwnedFd, h: &Header) -> std::io::Result<()> {
    let mut b = AlignedBuf::new(HEADER_BYTES as usize);
    b.copy_from_slice(&h.encode());
    pwrite_all(fd, &b, 0)
}

impl StoreInner {
    fn lock_meta(&self) -> MutexGuard<'_, HashMap<String, Weak<FileInner>>> {
        self.meta.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn direct_flag(&self) -> i32 {
        if self.direct_io { libc::O_DIRECT } else { 0 }
    }

    fn backing_paths(&self, name: &str) -> Vec<PathBuf> {
        self.roots
            .iter()
            .map(|r| r.join(format!("{name}{SUFFIX}")))
            .collect()
    }

    /// Change a file's length: headers and backing sizes on every device.
    pub(crate) fn set_len(&self, f: &FileInner, len: u64) -> Result<()> {
        if len % DIRECT_ALIGN != 0 {
            return Err(Error::InvalidArgument(format!(
                "file length {len} is not a multiple of {DIRECT_ALIGN} bytes"
            )));
        }
        let _meta = self.lock_meta();
        let old = f.len.load(Ordering::Acquire);
        let name = f.name.read().unwrap_or_else(|p| p.into_inner()).clone();
        let paths = self.backing_paths(&name);
        if len < old {
            // Refuse new I/O past the new end before the space goes.
            f.len.store(len, Ordering::Release);
        }
        for (i, b) in f.backings.iter().enumerate() {
            let h = Header {
                layout: f.layout.kind(),
                block_bytes: f.layout.block_bytes(),
                len,
                devices: f.backings.len() as u32,
                device_index: i as u32,
                file_uid: f.uid,
            };
            let io = |e| Error::os(format!("device {i}: set length of"), &paths[i], e);
            if len > old {
                truncate(&b.fd, HEADER_BYTES + f.layout.device_bytes(len)).map_err(io)?;
            }
            write_header(&b.fd, &h).map_err(io)?;
            if len < old {
                truncate(&b.fd, HEADER_BYTES + f.layout.device_bytes(len)).map_err(io)?;
            }
            fsync_fd(&b.fd).map_err(io)?;
        }
        f.len.store(len, Ordering::Release);
        Ok(())
    }
}
