//! The store: a set of device roots, its engines, and the named files on them.
//!
//! Metadata operations (create, open, delete, rename, set_len) are rare and go
//! straight to the file systems with ordinary system calls, serialised by one lock;
//! data I/O never takes that lock.
//!
//! Each root holds a lock file ([`LOCK_FILE`]) locked with `flock` for the life of
//! the store, so a second store on the same roots, in this process or another, is
//! refused. Create, delete, rename and set_len first write an intent record (see
//! [`intent`]) to device 0's root and make it durable; the operation then changes the
//! devices, makes that durable, and removes the record. `Store::open` finishes any
//! operation whose record it finds before it does anything else: create is rolled
//! back, the others are rolled forward. Every step of that is idempotent, so a crash
//! during recovery is recovered the same way.

mod intent;

#[cfg(test)]
mod crash_tests;
#[cfg(test)]
mod prop_tests;

use crate::util::origin::Origin;
use std::collections::{BTreeSet, HashMap};
use std::fs;
use std::os::fd::AsRawFd;

use crate::util::fds::Fd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, Weak};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::storage::buf::{AlignedBuf, Arena};
use crate::storage::file::{DIRECT_ALIGN, File, FileInner};
use crate::storage::header::{HEADER_BYTES, Header, MAX_LEN, V1};
use crate::storage::io::{
    Backing, DeviceEngine, DeviceState, EngineKind, EngineParams, cut_if_unnamed, start_engines,
};
use crate::storage::layout::{Layout, LayoutKind, MAX_DEVICES, mix64};
use intent::{Decoded, INTENT_FILE, Intent, Op};

/// The entry of `name`'s backing file in each device root.
pub(crate) fn backing_name(name: &str) -> String {
    format!("{name}{SUFFIX}")
}

/// Suffix of backing files in a device root.
const SUFFIX: &str = ".scf";
/// Suffix of a backing file being made by `create`, before it gets its name. The
/// name starts with a dot, like no file name, so it is never listed.
const NEW_SUFFIX: &str = ".scf.new";
/// The lock file in every root.
pub(crate) const LOCK_FILE: &str = ".setcache-lock";

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
    /// Threads per device of the psync engine, from 1 to 64.
    pub psync_threads: usize,
    /// Pin the I/O thread of device `i` to CPU `cpu_affinity[i % len]`. Every CPU
    /// must be one the process may run on (`sched_getaffinity`); `Store::open`
    /// refuses others. An empty list pins nothing.
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
    /// Open files by name and the operation left unfinished; also serialises
    /// metadata operations.
    meta: Mutex<Meta>,
    /// The lock file of each root, locked (`flock`) for as long as this lives.
    _locks: Vec<RootLock>,
    /// A page cache (`CachedStore`) holds this store's files: a second one would
    /// cache pages the first one changes.
    cached: std::sync::atomic::AtomicBool,
    /// Tells `sync` which backing files may have left their paths.
    pub(crate) watch: crate::storage::watch::PathWatch,
    /// Operations that failed part-way and were finished by a later one
    /// (`begin_meta`), counted: a page cache then looks for its files that
    /// a finished delete or replace took the name from.
    finished_later: AtomicU64,
    /// The process that opened it (see `Drop`).
    origin: Origin,
    /// Path lookups of backing files by `sync` (tests count them).
    #[cfg(test)]
    pub(crate) lookups: AtomicU64,
}

/// What the metadata lock protects.
struct Meta {
    /// Open files by name.
    files: HashMap<String, Weak<FileInner>>,
    /// An operation that failed part-way in this process and whose intent record is
    /// still on disk: finished (or undone) before the next metadata operation.
    pending: Option<Intent>,
    /// An operation that failed before it began, or was undone (a growth rolled
    /// back, a rename put back), whose intent record could not be withdrawn:
    /// withdrawn before the next metadata operation (which fails while it cannot
    /// be), so that no later open carries out what the caller was told failed.
    withdraw: Option<Intent>,
}

impl Meta {
    /// Leave a length change that failed part-way (`intent`, whose record is
    /// on disk) to the next metadata operation. A shrink is finished then (the
    /// bytes past its end may be gone already). A growth, which the caller is
    /// told failed, is undone instead, every piece shrunk back to the old
    /// length, so that the file does not grow after all while the store is
    /// open; a store closed (or a crash) before that leaves the growth to the
    /// next open, which finishes it, as after any crash.
    fn leave_pending(&mut self, intent: Intent, growth: bool) {
        if growth {
            self.pending = Some(undo_of_growth(intent));
        } else {
            self.pending = Some(intent);
        }
    }
}

impl Drop for StoreInner {
    fn drop(&mut self) {
        if !self.origin.is_here() {
            // A child made by `fork` dropping its copy: the metadata steps
            // and the engines' threads are the parent's (the engines let
            // theirs be), and a lock a parent's thread held at the fork
            // stays held here: the root locks' list is not touched either.
            std::mem::forget(std::mem::take(&mut self._locks));
            return;
        }
        // A failed operation's record still whole on disk would be carried
        // out by the next open: a last try to withdraw it.
        let withdraw = self.meta.get_mut().map_or_else(
            |p| p.into_inner().withdraw.is_some(),
            |m| m.withdraw.is_some(),
        );
        if withdraw {
            let _ = self.cancel_intent();
        }
        // An operation left to the next one whose record is gone (its
        // removal failed after the unlink, at the directory's sync): the
        // next open would not see it, so it is finished now, as the next
        // operation would have (a create undone, a growth rolled back).
        // With its record still there, the next open finishes it.
        // (Not in the crash tests' model of a process that died.)
        #[cfg(test)]
        let dead = AS_IF_DEAD.get();
        #[cfg(not(test))]
        let dead = false;
        let pending = self.lock_meta().pending.clone();
        if let Some(intent) = pending
            && !dead
            && !exists(&self.intent_path())
        {
            let mut meta = self.lock_meta();
            let _ = self
                .finish(&mut meta, &intent)
                .and_then(|()| sync_dir(0, &self.roots[0]));
        }
        for e in &self.engines {
            e.shutdown();
        }
    }
}

/// A store over a list of device roots. Cheap to clone; `Send + Sync`.
///
/// Its named files are striped over the roots, one directory per device, and
/// outlive the store: a file written and synced is there when the roots are
/// opened again.
///
/// ```
/// use setcache::{AlignedBuf, LayoutKind, Store, StoreOptions};
///
/// let dir = std::env::temp_dir().join(format!("setcache-doc-store-{}", std::process::id()));
/// let roots = [dir.join("ssd0"), dir.join("ssd1")]; // one directory per device
/// for r in &roots {
///     std::fs::create_dir_all(r)?;
/// }
/// let store = Store::open(&roots, StoreOptions::default())?;
/// let file = store.create("data", 1 << 20, LayoutKind::Stripe)?; // 1 MiB over both
/// let mut page = AlignedBuf::new(4096);
/// page.fill(7);
/// file.write_at(8192, &page)?;
/// file.sync()?;
/// drop((file, store)); // closes the store and unlocks its roots
///
/// let store = Store::open(&roots, StoreOptions::default())?;
/// assert_eq!(store.list()?, ["data"]);
/// let mut back = AlignedBuf::new(4096);
/// store.open_file("data")?.read_at(8192, &mut back)?;
/// assert_eq!(back[..], page[..]);
/// drop(store);
/// std::fs::remove_dir_all(&dir)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
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

pub(crate) fn validate_name(name: &str) -> Result<()> {
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
    let bad_with = |problem: String, errno: Option<i32>| Error::BadDevice {
        device,
        root: root.to_path_buf(),
        problem,
        errno,
    };
    let bad = |problem: String| bad_with(problem, None);
    let md = fs::metadata(root).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => bad("does not exist".into()),
        _ => bad(format!("cannot be examined: {e}")),
    })?;
    if !md.is_dir() {
        return Err(bad("is not a directory".into()));
    }
    if md.mode() & 0o222 == 0 {
        return Err(bad_with(
            format!("is read-only (mode {:o})", md.mode() & 0o7777),
            Some(libc::EACCES),
        ));
    }
    let probe = root.join(format!(".setcache-probe-{}", std::process::id()));
    let flags = if direct { libc::O_DIRECT } else { 0 };
    match open_raw(&probe, libc::O_RDWR | libc::O_CREAT | libc::O_TRUNC | flags) {
        Ok(fd) => {
            let aligned = if direct {
                direct_alignment(&fd)
            } else {
                Ok(())
            };
            drop(fd);
            let _ = fs::remove_file(&probe);
            aligned.map_err(bad)?;
            remove_stale_probes(root);
        }
        Err(e) => {
            let _ = fs::remove_file(&probe);
            return Err(match e.raw_os_error() {
                Some(libc::EROFS) => {
                    bad_with("is on a read-only file system".into(), Some(libc::EROFS))
                }
                Some(libc::EINVAL) if direct => bad(
                    "its file system does not support O_DIRECT (open the store with direct_io = false)".into(),
                ),
                _ => bad_with(format!("is not writable: {e}"), e.raw_os_error()),
            });
        }
    }
    Ok((md.dev(), md.ino()))
}

/// Remove the probe files of openers killed part way (`.setcache-probe-PID`
/// in `root`, PID no longer running): nothing else makes such names, and a
/// live opener's is left alone (its own removal would only fail quietly).
fn remove_stale_probes(root: &Path) {
    let Ok(entries) = fs::read_dir(root) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(".setcache-probe-"))
            .and_then(|p| p.parse::<libc::pid_t>().ok())
        else {
            continue;
        };
        // SAFETY: signal 0 only asks whether the process exists.
        let gone = pid > 0
            && unsafe { libc::kill(pid, 0) } != 0
            && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
        if gone {
            let _ = fs::remove_file(e.path());
        }
    }
}

/// Whether direct I/O on `fd` (a file opened with `O_DIRECT`) takes the
/// alignment setcache uses: [`DIRECT_ALIGN`] bytes in the file and in memory.
/// A file system over a device of larger logical sectors refuses such I/O with
/// `EINVAL`, which in use would fail the device at the first request of a
/// partial sector; found here, it is refused at open, naming the alignment the
/// file system asks for where it reports it (`statx`).
fn direct_alignment(fd: &Fd) -> std::result::Result<(), String> {
    let a = DIRECT_ALIGN as usize;
    let mut buf = AlignedBuf::new(2 * crate::storage::buf::BUF_ALIGN);
    let probe = |buf: &mut AlignedBuf| -> std::io::Result<()> {
        pwrite_all(fd, &buf[..crate::storage::buf::BUF_ALIGN], 0)?;
        // A sector of the file's second, into memory aligned to a sector only.
        pread_exact(fd, &mut buf[a..2 * a], a as u64)?;
        Ok(())
    };
    match probe(&mut buf) {
        Ok(()) => Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            let (file, mem) = dio_alignment(fd).unwrap_or((0, 0));
            let asks = if file > 0 {
                format!("{file} bytes in the file and {mem} in memory")
            } else {
                format!("more than {a} bytes")
            };
            Err(format!(
                "its file system takes direct I/O aligned to {asks}, and setcache aligns it to {a} bytes (open the store with direct_io = false)"
            ))
        }
        // Any other failure (no space left, a quota) tells nothing of the
        // alignment, and the store may still be of use (reads, deletes):
        // it opens, as before the probe.
        Err(_) => Ok(()),
    }
}

/// The direct-I/O alignment `statx` reports for `fd` (in the file, in
/// memory), if the kernel and file system report it.
fn dio_alignment(fd: &Fd) -> Option<(u32, u32)> {
    // SAFETY: `statx` is plain old data; all zeros is a valid value.
    let mut st: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: an empty path with `AT_EMPTY_PATH` names `fd`, a live descriptor; `st` is valid for writes.
    let r = unsafe {
        libc::statx(
            fd.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            libc::STATX_DIOALIGN,
            &mut st,
        )
    };
    (r == 0 && st.stx_mask & libc::STATX_DIOALIGN != 0)
        .then_some((st.stx_dio_offset_align, st.stx_dio_mem_align))
}

fn open_raw(path: &Path, flags: i32) -> std::io::Result<Fd> {
    open_as(path, flags, Fd::make)
}

/// As [`open_raw`], a root's lock file (closed in a child made by `fork`).
fn open_lock_file(path: &Path, flags: i32) -> std::io::Result<Fd> {
    open_as(path, flags, Fd::make_lock)
}

fn open_as(
    path: &Path,
    flags: i32,
    make: fn(&mut dyn FnMut() -> i32) -> std::io::Result<Fd>,
) -> std::io::Result<Fd> {
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: `c` is a valid NUL-terminated path; the mode is used only with O_CREAT.
    make(&mut || unsafe { libc::open(c.as_ptr(), flags | libc::O_CLOEXEC, 0o644 as libc::c_uint) })
}

fn pread_exact(fd: &Fd, buf: &mut [u8], off: u64) -> std::io::Result<usize> {
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

fn pwrite_all(fd: &Fd, buf: &[u8], off: u64) -> std::io::Result<()> {
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

#[cfg(test)]
thread_local! {
    /// While nonzero, this thread's `fsync_fd` calls fail with this error
    /// number (a test's failed fsync in a metadata path).
    pub(crate) static FSYNC_FD_ERRNO: std::cell::Cell<i32> = const { std::cell::Cell::new(0) };
    /// This thread's `fsync_fd` calls so far.
    pub(crate) static FSYNC_FD_CALLS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

fn fsync_fd(fd: &Fd) -> std::io::Result<()> {
    #[cfg(test)]
    {
        FSYNC_FD_CALLS.set(FSYNC_FD_CALLS.get() + 1);
        if FSYNC_FD_ERRNO.get() != 0 {
            return Err(std::io::Error::from_raw_os_error(FSYNC_FD_ERRNO.get()));
        }
    }
    fsync_plain(fd)
}

/// `fsync`, with no test's failure put in (the intent record's and
/// directories').
fn fsync_plain(fd: &Fd) -> std::io::Result<()> {
    // SAFETY: plain system call on an open descriptor.
    if unsafe { libc::fsync(fd.as_raw_fd()) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// A metadata path's fsync of backing file `i` of the open file `f` failed.
/// In buffered mode that fsync took the kernel's one report of a failed
/// background write-back of the file's data, which the file's own next
/// fsync will not see again: the failure counts as the data path's would. One
/// the device does not survive fails it; one that can pass makes the file's
/// later `File::sync` calls fail (`SyncLost`) if it was written since its last
/// sync began; a page cache over the file writes again at its next sync what
/// it wrote since its last good fsync (`File::meta_fsync_failures`).
///
/// The device's failure or the stick comes before the count (as in
/// `File::sync`'s own counted fsync): a `File::sync` that took the written
/// flags between the two would otherwise find the count it began with, no
/// stick, and pass.
fn fsync_failed(f: &FileInner, i: usize, e: &Error) {
    if !e.errno().is_some_and(crate::error::error_can_pass) {
        f.backings[i].state.fail(e);
    } else if f.backings.iter().any(|b| b.written.load(Ordering::Acquire)) {
        f.sync_lost
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_or_insert_with(|| e.clone());
    }
    f.count_fsync_failure(e);
    #[cfg(test)]
    if let Some(hook) = META_FSYNC_COUNTED.take(f as *const FileInner as usize) {
        hook();
    }
}

/// In unit tests: run by a metadata step's failed fsync of the open file
/// whose `FileInner` is at this address, once the failure is counted (the
/// step still holds its share of the counting lock).
#[cfg(test)]
pub(crate) static META_FSYNC_COUNTED: crate::util::hook::TestHook<usize, Box<dyn FnOnce() + Send>> =
    crate::util::hook::TestHook::new();

/// Allocate `len` bytes at `from` without changing the file's size.
fn allocate_keep_size(fd: &Fd, from: u64, len: u64) -> std::io::Result<()> {
    fallocate(fd, libc::FALLOC_FL_KEEP_SIZE, from, len)
}

/// `fallocate(2)` in `mode` of `len` bytes at `from`, again if interrupted.
fn fallocate(fd: &Fd, mode: libc::c_int, from: u64, len: u64) -> std::io::Result<()> {
    loop {
        // SAFETY: plain system call on an open descriptor.
        if unsafe { libc::fallocate(fd.as_raw_fd(), mode, from as i64, len as i64) } == 0 {
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINTR) {
            return Err(e);
        }
    }
}

fn truncate(fd: &Fd, len: u64) -> std::io::Result<()> {
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

#[cfg(test)]
thread_local! {
    /// Whether this thread's hole punches fail as on a file system that
    /// cannot punch holes (unit tests).
    pub(crate) static NO_PUNCH: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// In unit tests, run on the thread that clears a tail sector without hole
/// punching, between its read of the sector and its check of the bytes.
#[cfg(test)]
pub(crate) static TAIL_SECTOR_READ: crate::util::hook::TestHook<(), Box<dyn FnOnce() + Send>> =
    crate::util::hook::TestHook::new();

#[cfg(test)]
thread_local! {
    /// Steps left before a simulated crash of this thread (unit tests).
    static CRASH_AFTER: std::cell::Cell<Option<u32>> = const { std::cell::Cell::new(None) };
}

#[cfg(test)]
thread_local! {
    /// Whether this thread's intent records find device 0 full (unit tests).
    static INTENT_NO_SPACE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// In unit tests, make this thread's intent records fail for want of space
/// (`ENOSPC`), as on a full device 0.
#[cfg(test)]
pub(crate) fn intent_no_space(on: bool) {
    INTENT_NO_SPACE.with(|c| c.set(on));
}

#[cfg(test)]
thread_local! {
    /// While set, a store dropped on this thread skips what its close does
    /// for an operation left unfinished (unit tests: a process that died).
    static AS_IF_DEAD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Drop `store` as a process that died would leave it (unit tests).
#[cfg(test)]
pub(crate) fn drop_as_if_dead(store: Store) {
    AS_IF_DEAD.set(true);
    drop(store);
    AS_IF_DEAD.set(false);
}

/// In unit tests, make the thread "crash" after `steps` more steps that change the
/// disk: that step and every later one fail, as if the process had died there.
#[cfg(test)]
pub(crate) fn crash_after(steps: Option<u32>) {
    CRASH_AFTER.with(|c| c.set(steps));
}

/// In unit tests, the next thread to write the stale headers of the file
/// whose `FileInner` is at this address tells this sender when it starts and
/// waits 300 ms there (the headers not yet written).
#[cfg(test)]
pub(crate) static HEADERS_PAUSE: crate::util::hook::TestHook<usize, std::sync::mpsc::Sender<()>> =
    crate::util::hook::TestHook::new();

#[cfg(test)]
fn pause_in_headers(file: usize) {
    if let Some(tx) = HEADERS_PAUSE.take(file) {
        let _ = tx.send(());
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// Called before every step of a metadata operation that changes the disk.
fn crash_point() -> Result<()> {
    #[cfg(test)]
    {
        let dead = CRASH_AFTER.with(|c| match c.get() {
            Some(0) => true,
            Some(n) => {
                c.set(Some(n - 1));
                false
            }
            None => false,
        });
        if dead {
            return Err(Error::os(
                "simulated crash before a step on",
                "",
                std::io::Error::other("simulated crash"),
            ));
        }
    }
    Ok(())
}

fn exists(p: &Path) -> bool {
    fs::symlink_metadata(p).is_ok()
}

fn fstat(fd: &Fd) -> std::io::Result<libc::stat> {
    // SAFETY: `stat` is plain data; zeroed is a valid value to be overwritten.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: plain system call on an open descriptor and a valid out pointer.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } == 0 {
        Ok(st)
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Make a directory's entries durable.
fn sync_dir(device: usize, dir: &Path) -> Result<()> {
    crash_point()?;
    let f = open_raw(dir, libc::O_RDONLY | libc::O_DIRECTORY)
        .map_err(|e| Error::os(format!("device {device}: open directory"), dir, e))?;
    match fsync_plain(&f) {
        // Some file systems cannot fsync a directory; their entries are durable
        // by other means or not at all.
        Err(e) if e.raw_os_error() != Some(libc::EINVAL) => Err(Error::os(
            format!("device {device}: fsync directory"),
            dir,
            e,
        )),
        _ => Ok(()),
    }
}

/// Remove a file if it is there; true if it was.
fn remove_if_present(device: usize, path: &Path) -> Result<bool> {
    crash_point()?;
    match fs::remove_file(path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(Error::os(format!("device {device}: remove"), path, e)),
    }
}

/// Read and decode the header of an open backing file.
fn read_header(fd: &Fd) -> std::io::Result<std::result::Result<(Header, u32), String>> {
    let mut hb = AlignedBuf::new(HEADER_BYTES as usize);
    let n = pread_exact(fd, &mut hb, 0)?;
    Ok(Header::decode(&hb[..n]))
}

fn write_header(fd: &Fd, h: &Header) -> std::io::Result<()> {
    let mut b = AlignedBuf::new(HEADER_BYTES as usize);
    b.copy_from_slice(&h.encode());
    pwrite_all(fd, &b, 0)
}

/// Punch bytes `from..to` of a backing file, taking again the space of every
/// piece that had some (see `zero_range`). The first punch's error (the file
/// system cannot punch) comes back before anything changed.
fn punch_keeping(fd: &Fd, from: u64, to: u64) -> std::io::Result<()> {
    let piece = ((to - from) / 64).next_multiple_of(4096).max(4096);
    let mut at = from;
    while at < to {
        let end = (at / piece + 1).saturating_mul(piece).min(to);
        let before = fstat(fd)?.st_blocks;
        punch_hole(fd, at, end - at)?;
        if fstat(fd)?.st_blocks != before {
            allocate_keep_size(fd, at, end - at)?;
        }
        at = end;
    }
    Ok(())
}

/// Make bytes `from..to` of a backing file read as zeros. Punches a hole where the
/// file system can (atomic with respect to direct I/O, and frees the space); else
/// zeroes the partial sector at `from` and, with `may_cut`, cuts the file at the
/// next sector boundary, which the caller then extends again (an operation with an
/// intent record, which recovery finishes should it stop in between); without
/// `may_cut`, writes zeros over the rest, so that the file is never shorter than
/// its header needs (a lazy growth, which has no record).
///
/// With `keep` (a growth), the space the range had stays taken: a reservation
/// made ahead by `reserve` past the old end (a write's pages, before it grows
/// the file) must outlive the growth, or the write-back of those pages may
/// find the device full. The range is punched in pieces (a page each, for a
/// range of up to 256 KiB; at most 64 pieces), and a piece whose punch freed
/// space (or during which the file's allocation changed otherwise) is
/// allocated again: exactly what it held, for pieces of a page. An error of
/// that allocation is the growth's.
fn zero_range(fd: &Fd, from: u64, to: u64, may_cut: bool, keep: bool) -> std::io::Result<()> {
    if from >= to {
        return Ok(());
    }
    let punched = if keep {
        punch_keeping(fd, from, to)
    } else {
        punch_hole(fd, from, to - from)
    };
    let e = match punched {
        Ok(()) => return Ok(()),
        Err(e) => e,
    };
    if !matches!(
        e.raw_os_error(),
        Some(libc::EOPNOTSUPP | libc::ENOSYS | libc::EINVAL)
    ) {
        return Err(e);
    }
    let sector = from / DIRECT_ALIGN * DIRECT_ALIGN;
    if sector < from {
        // Read, clear the tail, write back: a write of the sector's bytes
        // below `from` landing in between would be undone, so the sector is
        // written only when its tail holds something (bytes a crash left
        // past the durable length, or a write of the whole last sector that
        // put them there); a tail that reads as zeros, as these paths leave
        // it, is left alone.
        let mut b = AlignedBuf::new(DIRECT_ALIGN as usize);
        let n = pread_exact(fd, &mut b, sector)?;
        #[cfg(test)]
        if let Some(f) = TAIL_SECTOR_READ.take(()) {
            f();
        }
        let tail = (from - sector) as usize;
        if n > tail && b[tail..n].iter().any(|&x| x != 0) {
            b[tail..].fill(0);
            pwrite_all(fd, &b[..DIRECT_ALIGN as usize], sector)?;
        }
    }
    let cut = from.next_multiple_of(DIRECT_ALIGN);
    if cut < to {
        if may_cut {
            truncate(fd, cut)?;
        } else {
            // Aligned, since the descriptor may be a direct-I/O one (both ends
            // are sector multiples: sizes of backing files are).
            let zeros = AlignedBuf::new((to - cut).min(1 << 20) as usize);
            let mut at = cut;
            while at < to {
                let n = (to - at).min(zeros.len() as u64) as usize;
                pwrite_all(fd, &zeros[..n], at)?;
                at += n as u64;
            }
        }
    }
    Ok(())
}

/// Punch a hole of `len` bytes at `from`, keeping the file's size.
fn punch_hole(fd: &Fd, from: u64, len: u64) -> std::io::Result<()> {
    #[cfg(test)]
    if NO_PUNCH.get() {
        return Err(std::io::Error::from_raw_os_error(libc::EOPNOTSUPP));
    }
    fallocate(
        fd,
        libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
        from,
        len,
    )
}

/// The record that undoes the length change `intent` records: the same file
/// taken from the new length back to the old.
fn undo_of_growth(mut intent: Intent) -> Intent {
    if let Op::SetLen {
        old_len, new_len, ..
    } = &mut intent.op
    {
        std::mem::swap(old_len, new_len);
    }
    intent
}

fn check_len(what: &str, len: u64) -> Result<()> {
    if len > MAX_LEN {
        return Err(Error::InvalidArgument(format!(
            "{what} {len} is larger than the largest supported ({MAX_LEN} bytes)"
        )));
    }
    Ok(())
}

/// The process id a lock file holds (its first bytes, as `lock_root` writes
/// them: decimal and a newline), if they read as one.
fn lock_holder(b: &[u8]) -> Option<u32> {
    std::str::from_utf8(b).ok()?.trim().parse().ok()
}

/// The name of the file whose backing file a directory entry is, if it is one:
/// `<name>.scf` with a valid name (temporary files, the lock file and the
/// intent record are not).
fn listed_name(entry: &std::ffi::OsStr) -> Option<&str> {
    let n = entry.to_str()?.strip_suffix(SUFFIX)?;
    validate_name(n).ok().map(|()| n)
}

/// The bytes of an intent record file, read up to one byte more than the
/// longest record: a longer file is not a whole record whatever its size (it
/// decodes as torn), and is not read into memory.
fn read_intent(path: &Path) -> std::io::Result<Vec<u8>> {
    let fd = open_regular(path)?;
    let mut b = vec![0u8; intent::MAX_RECORD + 1];
    let mut got = 0;
    while got < b.len() {
        match pread_exact(&fd, &mut b[got..], got as u64)? {
            0 => break,
            n => got += n,
        }
    }
    b.truncate(got);
    Ok(b)
}

/// Open `path` to read it, refusing (rather than waiting on) anything but a
/// regular file: a FIFO under the name would block the open until a writer
/// came.
/// The regular file at `path` (not through a symbolic link), opened to be cut
/// once its name is gone ([`cut_if_unnamed`]); `None` when there is none or
/// it cannot be opened for writing (its space then comes back with its last
/// reference).
fn hold_for_cut(path: &Path) -> Option<Fd> {
    let fd = open_raw(path, libc::O_RDWR | libc::O_NONBLOCK | libc::O_NOFOLLOW).ok()?;
    let st = fstat(&fd).ok()?;
    (st.st_mode & libc::S_IFMT == libc::S_IFREG).then_some(fd)
}

fn open_regular(path: &Path) -> std::io::Result<Fd> {
    let fd = open_raw(path, libc::O_RDONLY | libc::O_NONBLOCK)?;
    if fstat(&fd)?.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "not a regular file",
        ));
    }
    Ok(fd)
}

/// The lock files this process holds through open stores, by (device, inode).
/// Free in a child made by `fork` ([`crate::util::fork_locks`]).
static HELD: Mutex<Vec<(u64, u64)>> = Mutex::new(Vec::new());

/// [`HELD`] locked: each path of this file takes it here.
fn held() -> std::sync::MutexGuard<'static, Vec<(u64, u64)>> {
    static LISTED: std::sync::Once = std::sync::Once::new();
    LISTED.call_once(|| {
        crate::util::fork_locks::list(|| {
            crate::util::fork_locks::take_within(|| match HELD.try_lock() {
                Ok(g) => Some(g),
                Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
                Err(std::sync::TryLockError::WouldBlock) => None,
            })
            .map(|g| Box::new(g) as Box<dyn std::any::Any>)
        })
    });
    HELD.lock().unwrap_or_else(|p| p.into_inner())
}

/// How long a lock that this process let go of may still look held: a child
/// another thread made by `clone`, `vfork` or `posix_spawn` (which run no
/// `atfork` handler) keeps copies of every descriptor, close-on-exec or not,
/// until it calls exec.
/// (A child of `fork` closes its copies of lock files at once: `util::fds`.)
const RELEASE_WAIT: Duration = Duration::from_secs(2);

/// A device root's lock, held while this lives.
pub(crate) struct RootLock {
    /// The lock file (its `flock` is the lock).
    fd: Fd,
    /// Its (device, inode), listed in [`HELD`].
    id: (u64, u64),
    /// The process that took it.
    origin: Origin,
}

impl Drop for RootLock {
    fn drop(&mut self) {
        // Unlisted before the lock goes (the field drops after this): another
        // opener that fails to lock it meanwhile sees it unlisted and waits
        // for the release rather than reporting it held.
        let mut held = held();
        if let Some(i) = held.iter().position(|&x| x == self.id) {
            held.swap_remove(i);
        }
        drop(held);
        // Let go of the lock itself, not only of this descriptor: a child
        // another thread made meanwhile may hold a copy until it execs, and
        // the lock, the open file's, would stay with it (another process's
        // open of the roots was refused for that while). Only by the process
        // that took it: a forked child dropping its copy of the store must
        // not free its parent's roots.
        if self.origin.is_here() {
            // SAFETY: plain system call on an open descriptor.
            unsafe { libc::flock(self.fd.as_raw_fd(), libc::LOCK_UN) };
        }
    }
}

/// Lock a device root for this store: `flock` on its lock file, which then says
/// which process holds it. A lock held by another open store is refused at
/// once; one that names this process although no store of it holds it is being
/// let go (a forked child still has the descriptor) and is waited for, up to
/// [`RELEASE_WAIT`].
fn lock_root(device: usize, root: &Path) -> Result<RootLock> {
    let path = root.join(LOCK_FILE);
    let open = || -> Result<(Fd, (u64, u64))> {
        let fd = open_lock_file(&path, libc::O_RDWR | libc::O_CREAT)
            .map_err(|e| Error::os(format!("device {device}: open lock file"), &path, e))?;
        let id = fstat(&fd)
            .map(|st| (st.st_dev, st.st_ino))
            .map_err(|e| Error::os(format!("device {device}: examine"), &path, e))?;
        Ok((fd, id))
    };
    let (mut fd, mut id) = open()?;
    let start = Instant::now();
    let mut pause = Duration::from_micros(200);
    loop {
        // Listed before the lock is taken: a store of this process that
        // holds the lock is always listed.
        let mut held = held();
        // SAFETY: plain system call on an open descriptor.
        if unsafe { libc::flock(fd.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            // The lock file may have been removed (or replaced) between the
            // open and the lock by its last holder: a lock on a file no
            // longer in the directory locks nothing. Open it again.
            let current = fs::metadata(&path).map(|m| (m.dev(), m.ino())).ok();
            if current != Some(id) {
                drop(held);
                (fd, id) = open()?;
                continue;
            }
            held.push(id);
            drop(held);
            let lock = RootLock {
                fd,
                id,
                origin: Origin::here(),
            };
            let pid = format!("{}\n", std::process::id());
            truncate(&lock.fd, 0)
                .and_then(|()| pwrite_all(&lock.fd, pid.as_bytes(), 0))
                .map_err(|e| Error::os(format!("device {device}: write lock file"), &path, e))?;
            return Ok(lock);
        }
        let e = std::io::Error::last_os_error();
        let ours = held.contains(&id);
        drop(held);
        if e.raw_os_error() != Some(libc::EWOULDBLOCK) {
            return Err(Error::os(format!("device {device}: lock"), &path, e));
        }
        let mut b = [0u8; 32];
        let holder = pread_exact(&fd, &mut b, 0)
            .ok()
            .and_then(|n| lock_holder(&b[..n]));
        let releasing = !ours && holder == Some(std::process::id());
        if !releasing || start.elapsed() >= RELEASE_WAIT {
            return Err(Error::StoreLocked {
                device,
                root: root.to_path_buf(),
                holder,
            });
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(20));
    }
}

/// Most threads per device of the psync engine.
const MAX_PSYNC_THREADS: usize = 64;

/// Refuse a CPU of `cpus` (the setting `what`) that this process may not run on.
pub(crate) fn check_cpus(what: &str, cpus: &[usize]) -> Result<()> {
    let allowed = crate::storage::io::allowed_cpus().map_err(|e| {
        Error::InvalidArgument(format!(
            "{what} given, but the CPUs this process may use cannot be read: {e}"
        ))
    })?;
    if let Some(&bad) = cpus.iter().find(|c| allowed.binary_search(c).is_err()) {
        return Err(Error::InvalidArgument(format!(
            "{what} names CPU {bad}, which this process may not use (it may use CPUs {})",
            crate::storage::io::cpu_list(&allowed)
        )));
    }
    Ok(())
}

/// Bytes of files' data moved to and from a store's devices, and the device
/// operations that moved them ([`Store::device_bytes`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceBytes {
    /// Bytes read from the devices.
    pub read: u64,
    /// Bytes written to the devices.
    pub written: u64,
    /// Read operations that ended well (one system call or ring entry each).
    pub reads: u64,
    /// Write operations that ended well.
    pub writes: u64,
    /// Fsyncs of files' backing files that ended well: a file's sync sends
    /// one to each device it spans (the store's metadata and headers are
    /// synced apart, uncounted).
    pub fsyncs: u64,
}

impl Store {
    /// Remove the lock file a store leaves in a device root, if no store (of
    /// this process or another) holds it: for a tool that made a store's
    /// directory for a while and leaves it as it found it. Returns whether it
    /// removed one. Safe against a store opening meanwhile: the file is
    /// removed under its lock, and an opener that finds its lock file gone
    /// from the directory once it holds it opens the new one (an opener in
    /// another process at the very moment the lock is held here is refused,
    /// as if the store that made the file were still open).
    pub fn remove_lock_file(root: &Path) -> Result<bool> {
        let path = root.join(LOCK_FILE);
        let fd = match open_lock_file(&path, libc::O_RDWR) {
            Ok(fd) => fd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(Error::os("open lock file", &path, e)),
        };
        // SAFETY: plain system call on an open descriptor.
        if unsafe { libc::flock(fd.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
                return Ok(false);
            }
            return Err(Error::os("lock", &path, e));
        }
        let id = fstat(&fd)
            .map(|st| (st.st_dev, st.st_ino))
            .map_err(|e| Error::os("examine", &path, e))?;
        if fs::metadata(&path).map(|m| (m.dev(), m.ino())).ok() != Some(id) {
            return Ok(false);
        }
        fs::remove_file(&path).map_err(|e| Error::os("remove lock file", &path, e))?;
        Ok(true)
    }

    /// Open a store on `roots`, one directory per device.
    ///
    /// Locks every root for this store (a root in use by another open store, in
    /// this process or another, is refused at once with [`Error::StoreLocked`]),
    /// then finishes a metadata operation that a crash interrupted, if any.
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
        if !(1..=MAX_PSYNC_THREADS).contains(&opts.psync_threads) {
            return Err(Error::InvalidArgument(format!(
                "psync_threads {} is outside 1..={MAX_PSYNC_THREADS} (threads per device of the psync engine)",
                opts.psync_threads
            )));
        }
        if let Some(cpus) = &opts.cpu_affinity {
            check_cpus("cpu_affinity", cpus)?;
        }
        let mut seen: HashMap<(u64, u64), usize> = HashMap::new();
        let mut paths = Vec::with_capacity(roots.len());
        for (i, r) in roots.iter().enumerate() {
            let r = r.as_ref();
            let id = check_root(i, r, opts.direct_io)?;
            if let Some(j) = seen.insert(id, i) {
                // A list given wrong, not a bad directory (`EINVAL`).
                return Err(Error::InvalidArgument(format!(
                    "device {i} ({}): is the same directory as device {j}",
                    r.display()
                )));
            }
            paths.push(r.to_path_buf());
        }
        let locks = paths
            .iter()
            .enumerate()
            .map(|(i, r)| lock_root(i, r))
            .collect::<Result<Vec<_>>>()?;
        let params: Vec<EngineParams> = (0..paths.len())
            .map(|i| EngineParams {
                device: i,
                io_depth: opts.io_depth,
                queue_rings: opts.queue_rings.then_some(crate::storage::io::QueueRings {
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
        let watch = crate::storage::watch::PathWatch::new(&paths);
        let store = Store {
            inner: Arc::new(StoreInner {
                roots: paths,
                block_bytes: opts.block_pages as u64 * opts.page_size as u64,
                direct_io: opts.direct_io,
                engines,
                states: (0..roots.len())
                    .map(|i| Arc::new(DeviceState::new(i)))
                    .collect(),
                engine_name,
                meta: Mutex::new(Meta {
                    files: HashMap::new(),
                    pending: None,
                    withdraw: None,
                }),
                _locks: locks,
                cached: std::sync::atomic::AtomicBool::new(false),
                watch,
                finished_later: AtomicU64::new(0),
                origin: Origin::here(),
                #[cfg(test)]
                lookups: AtomicU64::new(0),
            }),
        };
        store.inner.recover()?;
        Ok(store)
    }

    pub(crate) fn inner(&self) -> &Arc<StoreInner> {
        &self.inner
    }

    /// Mark the store as cached by one `CachedStore`; `Err` naming the roots if
    /// another one has it.
    pub(crate) fn claim_for_cache(&self) -> Result<()> {
        if self.inner.cached.swap(true, Ordering::AcqRel) {
            return Err(Error::InvalidArgument(format!(
                "the store on {} already has a page cache (a CachedStore) in this process: \
                 open its files through that one (two caches of one store would each cache \
                 pages the other changes)",
                self.inner
                    .roots
                    .iter()
                    .map(|r| r.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        Ok(())
    }

    /// The cache that claimed the store is gone.
    pub(crate) fn release_from_cache(&self) {
        self.inner.cached.store(false, Ordering::Release);
    }

    /// The engine in use: "uring", "psync" or "sim".
    pub fn engine_name(&self) -> &'static str {
        self.inner.engine_name
    }

    /// Bytes read from and written to all devices since the store opened
    /// by reads and writes of files' data (not headers or metadata), and the
    /// device operations that did it, counted as they end.
    pub fn device_bytes(&self) -> DeviceBytes {
        self.inner
            .states
            .iter()
            .fold(DeviceBytes::default(), |t, s| DeviceBytes {
                read: t.read + s.counts.sum(crate::storage::io::COUNT_READ_BYTES),
                written: t.written + s.counts.sum(crate::storage::io::COUNT_WRITTEN_BYTES),
                reads: t.reads + s.counts.sum(crate::storage::io::COUNT_READS),
                writes: t.writes + s.counts.sum(crate::storage::io::COUNT_WRITES),
                fsyncs: t.fsyncs + s.counts.sum(crate::storage::io::COUNT_FSYNCS),
            })
    }

    /// The CPUs that take the completion interrupts of the store's devices,
    /// ascending: found through sysfs from each directory's block device
    /// (the whole disk of a partition, the disks under a device-mapper or
    /// md device) and `/proc/irq/N/effective_affinity_list` of its busy
    /// vectors. Empty for directories without a block device of their own
    /// (tmpfs) or whose interrupts cannot be found. Read afresh on each call.
    pub fn interrupt_cpus(&self) -> Vec<usize> {
        crate::storage::io::irq::interrupt_cpus(&self.inner.roots)
    }

    /// Number of devices.
    pub fn devices(&self) -> usize {
        self.inner.roots.len()
    }

    /// The stripe unit of new files, in bytes.
    pub fn block_bytes(&self) -> u64 {
        self.inner.block_bytes
    }

    /// The backing file of `name` on each device, in device order (whether
    /// or not the file exists). [`Error::InvalidName`] for a name the store
    /// would refuse, as [`Store::create`] does.
    pub fn backing_paths(&self, name: &str) -> Result<Vec<PathBuf>> {
        validate_name(name)?;
        Ok(self.inner.backing_paths(name))
    }

    /// The first failure of each device, if any.
    pub fn device_errors(&self) -> Vec<Option<Error>> {
        self.inner.states.iter().map(|s| s.check().err()).collect()
    }

    /// Create a file of `size` bytes (any length), zero-filled, and open it. Either
    /// the file is made on every device or, after an error or a crash, on none.
    pub fn create(&self, name: &str, size: u64, layout: LayoutKind) -> Result<File> {
        validate_name(name)?;
        check_len("file size", size)?;
        let inner = &self.inner;
        let l = Layout::new(layout, inner.roots.len(), inner.block_bytes)?;
        let mut meta = inner.begin_meta()?;
        if inner.backing_paths(name).iter().any(|p| exists(p)) {
            return Err(Error::FileExists(name.to_string()));
        }
        let uid = new_uid();
        let intent = inner.intent(Op::Create {
            name: name.to_string(),
            uid,
        });
        inner.write_intent(&mut meta, &intent)?;
        let made = inner
            .make_backings(name, &l, size, uid)
            .and_then(|fds| inner.sync_dirs().map(|()| fds));
        let fds = match made {
            Ok(fds) => fds,
            Err(e) => {
                // Remove what was made; should that fail too, the next operation (or
                // the next open) tries again.
                let undone = inner
                    .undo_create(name, uid)
                    .and_then(|()| inner.remove_intent());
                if undone.is_err() {
                    meta.pending = Some(intent);
                }
                return Err(e);
            }
        };
        if let Err(e) = inner.remove_intent() {
            // The record may still be there: the create will be rolled back.
            meta.pending = Some(intent);
            return Err(e);
        }
        let file = self.wrap(name, l, size, uid, fds)?;
        meta.files
            .insert(name.to_string(), Arc::downgrade(&file.inner));
        Ok(file)
    }

    fn wrap(&self, name: &str, layout: Layout, len: u64, uid: u64, fds: Vec<Fd>) -> Result<File> {
        let inner = &self.inner;
        let mut backings = Vec::with_capacity(fds.len());
        for (i, fd) in fds.into_iter().enumerate() {
            let st = fstat(&fd).map_err(|e| {
                Error::os(
                    format!("device {i}: examine"),
                    inner.backing_path(i, name),
                    e,
                )
            })?;
            backings.push(Arc::new(Backing::new(
                fd,
                uid,
                (st.st_dev, st.st_ino),
                inner.states[i].clone(),
                &inner.engines[i],
            )));
        }
        Ok(File {
            inner: Arc::new(FileInner {
                name: RwLock::new(Arc::from(name)),
                renames: AtomicU64::new(0),
                serial: crate::storage::file::next_serial(),
                layout,
                len: AtomicU64::new(len),
                uid,
                backings,
                store: inner.clone(),
                cached: AtomicUsize::new(0),
                header_stale: std::sync::atomic::AtomicBool::new(false),
                sync_lost: std::sync::Mutex::new(None),
                meta_fsync_failures: AtomicU64::new(0),
                meta_fsync_error: std::sync::Mutex::new(None),
                fsyncs_counting: RwLock::new(()),
            }),
        })
    }

    /// Open an existing file, checking its header on every device. A header of the
    /// previous format version is rewritten in the current one.
    pub fn open_file(&self, name: &str) -> Result<File> {
        validate_name(name)?;
        let inner = &self.inner;
        let mut meta = inner.begin_meta()?;
        if let Some(f) = meta.files.get(name).and_then(Weak::upgrade) {
            return Ok(File { inner: f });
        }
        let paths = inner.backing_paths(name);
        if paths.iter().all(|p| !exists(p)) {
            return Err(Error::FileNotFound(name.to_string()));
        }
        let mut fds = Vec::with_capacity(paths.len());
        let mut first: Option<Header> = None;
        let mut old = Vec::new();
        let mut lens = Vec::with_capacity(paths.len());
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
            let (h, version) = read_header(&fd)
                .map_err(|e| Error::os(format!("device {i}: read header of"), p, e))?
                .map_err(bad)?;
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
            let have = fstat(&fd).map(|m| m.st_size as u64).unwrap_or(0);
            if have < need {
                return Err(bad(format!(
                    "backing file is truncated: {have} bytes, need {need}"
                )));
            }
            if version == V1 {
                old.push(i);
            }
            lens.push(h.len);
            first.get_or_insert(h);
            fds.push(fd);
        }
        let mut h = first.expect("at least one device");
        // Headers that disagree on the length alone: a lazy growth was writing
        // them when the process died, before the fdatasync that would have
        // confirmed it (a logged length change is finished or undone by the
        // recovery before any file opens). The growth never happened: the
        // shortest length stands, and the other headers are put back to it.
        let shortest = lens.iter().copied().min().unwrap_or(h.len);
        h.len = shortest;
        for (i, &len) in lens.iter().enumerate() {
            if len != shortest && !old.contains(&i) {
                old.push(i);
            }
        }
        // Migrate: the fields mean the same in both versions (a version 1 length is
        // whole sectors), so only the version changes. Pieces of mixed versions are
        // fine should this be interrupted. Headers ahead of the shortest length are
        // rewritten the same way.
        for &i in &old {
            let io = |e| {
                Error::os(
                    format!("device {i}: rewrite the version 1 header of"),
                    &paths[i],
                    e,
                )
            };
            let piece = Header {
                device_index: i as u32,
                ..h
            };
            crash_point()?;
            write_header(&fds[i], &piece).map_err(io)?;
            crash_point()?;
            fsync_fd(&fds[i]).map_err(io)?;
        }
        let l = Layout::new(h.layout, paths.len(), h.block_bytes)?;
        let file = self.wrap(name, l, h.len, h.file_uid, fds)?;
        meta.files
            .insert(name.to_string(), Arc::downgrade(&file.inner));
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

    /// Names of the files present on any device, sorted. A name in the middle of a
    /// metadata operation of this store is not seen half-made.
    pub fn list(&self) -> Result<Vec<String>> {
        let _meta = self.inner.begin_meta()?;
        let mut names = BTreeSet::new();
        for (i, r) in self.inner.roots.iter().enumerate() {
            // (Through a descriptor a program's wholesale close leaves.)
            let listed = crate::util::fds::dir_names(r)
                .map_err(|e| Error::os(format!("device {i}: list"), r, e))?;
            for name in listed {
                if let Some(n) = listed_name(&name) {
                    names.insert(n.to_string());
                }
            }
        }
        Ok(names.into_iter().collect())
    }

    /// Delete a file from every device. Open handles keep reading and writing until
    /// dropped, but their `sync` reports that the file is gone. After an error or a
    /// crash part-way, the delete is finished by the next metadata operation or open.
    pub fn delete(&self, name: &str) -> Result<()> {
        validate_name(name)?;
        let inner = &self.inner;
        let mut meta = inner.begin_meta()?;
        if inner.backing_paths(name).iter().all(|p| !exists(p)) {
            return Err(Error::FileNotFound(name.to_string()));
        }
        let intent = inner.intent(Op::Delete {
            name: name.to_string(),
        });
        if let Err(e) = inner.write_intent(&mut meta, &intent) {
            // A device 0 too full for the record is what a delete makes room
            // on: the pieces go without one. A crash may then leave some of
            // them: the file is still listed, opens as damaged (a piece
            // missing), and a second delete finishes it.
            if !matches!(e.posix_errno(), libc::ENOSPC | libc::EDQUOT) {
                return Err(e);
            }
            let cut = meta.forget(name);
            // Part-way, it is finished by the next metadata operation, as
            // a delete with its record is.
            return inner
                .redo_delete(name, cut)
                .inspect_err(|_| meta.pending = Some(intent));
        }
        let cut = meta.forget(name);
        let done = inner
            .redo_delete(name, cut)
            .and_then(|()| inner.remove_intent());
        if let Err(e) = done {
            meta.pending = Some(intent);
            return Err(e);
        }
        Ok(())
    }

    /// Rename a file on every device; `to` must not exist. Either every device
    /// renames it or, after an error or a crash, none or (finishing it) all.
    pub fn rename(&self, from: &str, to: &str) -> Result<()> {
        validate_name(from)?;
        validate_name(to)?;
        let inner = &self.inner;
        let mut meta = inner.begin_meta()?;
        let src = inner.backing_paths(from);
        let dst = inner.backing_paths(to);
        if src.iter().all(|p| !exists(p)) {
            return Err(Error::FileNotFound(from.to_string()));
        }
        if dst.iter().any(|p| exists(p)) {
            return Err(Error::FileExists(to.to_string()));
        }
        let intent = inner.intent(Op::Rename {
            from: from.to_string(),
            to: to.to_string(),
        });
        inner.write_intent(&mut meta, &intent)?;
        let open = meta.files.get(from).and_then(Weak::upgrade);
        if let Err(e) = inner.move_backings(from, to, open.as_deref()) {
            // Put back what moved; should that fail, the rename is finished
            // later. Put back, its record is withdrawn (later, if not now):
            // finishing it would rename the file after all.
            let back = inner
                .move_backings(to, from, open.as_deref())
                .and_then(|()| inner.sync_dirs());
            if back.is_err() {
                meta.pending = Some(intent);
            } else if inner.cancel_intent().is_err() {
                meta.withdraw = Some(intent);
            }
            return Err(e);
        }
        meta.rename_open(from, to);
        if let Err(e) = inner.sync_dirs().and_then(|()| inner.remove_intent()) {
            meta.pending = Some(intent);
            return Err(e);
        }
        Ok(())
    }

    /// Rename a file on every device, replacing the file `to` if there is one
    /// (as POSIX `rename` does): at every moment, and after an error or a
    /// crash, `to` names either the old file or the new one, whole, and the
    /// replacement, once begun, is finished. Handles open on the replaced file
    /// see it as deleted.
    pub fn replace(&self, from: &str, to: &str) -> Result<()> {
        validate_name(from)?;
        validate_name(to)?;
        let inner = &self.inner;
        let mut meta = inner.begin_meta()?;
        let src = inner.backing_paths(from);
        if src.iter().all(|p| !exists(p)) {
            return Err(Error::FileNotFound(from.to_string()));
        }
        if from == to {
            return Ok(());
        }
        let uid = inner.uid_of(from)?;
        let intent = inner.intent(Op::Replace {
            from: from.to_string(),
            to: to.to_string(),
            uid,
        });
        inner.write_intent(&mut meta, &intent)?;
        let cut = meta.files.get(to).is_none_or(|w| w.strong_count() == 0);
        if let Err(e) = inner.redo_replace(&mut meta, from, to, uid, cut) {
            // Begun: it is finished later (at the next operation or open).
            meta.pending = Some(intent);
            return Err(e);
        }
        inner.settle_engines();
        if let Err(e) = inner.remove_intent() {
            meta.pending = Some(intent);
            return Err(e);
        }
        Ok(())
    }

    /// Allocate `count` buffers of `len` bytes from one arena registered with the
    /// engines (io_uring fixed buffers) where the engine supports it. More
    /// than the address space holds is refused with
    /// [`Error::InvalidArgument`], more than the machine or the memory cgroup
    /// can give now with [`Error::NotEnoughMemory`] (the arena is zeroed, so
    /// every byte of it is touched at once).
    pub fn alloc_registered(&self, count: usize, len: usize) -> Result<Vec<AlignedBuf>> {
        if count == 0 || len == 0 {
            return Ok(Vec::new());
        }
        let total = len
            .checked_next_multiple_of(crate::storage::buf::BUF_ALIGN)
            .and_then(|stride| stride.checked_mul(count))
            .ok_or_else(|| {
                Error::InvalidArgument(format!("{count} buffers of {len} bytes overflow"))
            })?;
        let what = || format!("{count} registered buffers of {len} bytes");
        if Arena::layout(total).is_none() {
            return Err(Error::InvalidArgument(format!(
                "{}: {total} bytes in all, more than the address space holds",
                what()
            )));
        }
        // The arena is zeroed, so all of it is touched at once: refused here
        // rather than by the kernel's out-of-memory killer.
        crate::util::room::check_memory(total as u64, what)?;
        let mut arena = Arena::try_new(total).map_err(|_| {
            Error::InvalidArgument(format!(
                "{}: the system refused {total} bytes of memory",
                what()
            ))
        })?;
        arena.register(&self.inner.engines);
        Ok(AlignedBuf::carve(Arc::new(arena), count, len))
    }
}

/// One backing file of a file whose length changes.
struct Piece<'a> {
    /// The open file whose backing file this is, if it is open (not in a
    /// recovery at open): a failed fsync counts against it.
    file: Option<&'a FileInner>,
    device: usize,
    path: &'a Path,
    fd: &'a Fd,
    engine: &'a dyn DeviceEngine,
    /// The file's identity in the engine's media (the sim engine's).
    media: u64,
}

/// How a length change ended.
enum Resized {
    /// At the new length.
    Done,
    /// A growth failed and was undone: at the old length, with the error.
    RolledBack(Error),
}

impl Meta {
    /// Forget the open file `name` (being deleted); whether no handle holds it.
    fn forget(&mut self, name: &str) -> bool {
        self.files
            .remove(name)
            .is_none_or(|w| w.strong_count() == 0)
    }

    /// After `from` was renamed to `to` on the devices: the open file follows.
    fn rename_open(&mut self, from: &str, to: &str) {
        if let Some(w) = self.files.remove(from)
            && w.strong_count() > 0
        {
            self.files.insert(to.to_string(), w);
        }
    }
}

impl StoreInner {
    /// Run `f` with the metadata lock held, giving it a test of whether a file
    /// is the one the store has open under a name now (not one deleted or
    /// replaced since it was opened). No metadata operation runs meanwhile.
    pub(crate) fn with_current<R>(
        &self,
        f: impl FnOnce(&dyn Fn(&str, &Arc<FileInner>) -> bool) -> R,
    ) -> R {
        let meta = self.lock_meta();
        let current = |name: &str, file: &Arc<FileInner>| {
            meta.files
                .get(name)
                .and_then(Weak::upgrade)
                .is_some_and(|g| Arc::ptr_eq(&g, file))
        };
        f(&current)
    }

    fn lock_meta(&self) -> MutexGuard<'_, Meta> {
        self.meta.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Take the metadata lock for an operation, first finishing one that failed
    /// part-way earlier.
    fn begin_meta(&self) -> Result<MutexGuard<'_, Meta>> {
        let mut meta = self.lock_meta();
        if let Some(intent) = meta.withdraw.clone() {
            self.cancel_intent().map_err(|e| Error::Recovery {
                path: self.intent_path(),
                op: format!("withdrawal of the failed {}", intent.op),
                errno: e.errno(),
                problem: e.to_string(),
            })?;
            meta.withdraw = None;
        }
        if let Some(intent) = meta.pending.clone() {
            self.finish(&mut meta, &intent)
                .and_then(|()| self.remove_intent())
                .map_err(|e| Error::Recovery {
                    path: self.intent_path(),
                    op: intent.op.to_string(),
                    errno: e.errno(),
                    problem: e.to_string(),
                })?;
            meta.pending = None;
            self.finished_later.fetch_add(1, Ordering::AcqRel);
        }
        Ok(meta)
    }

    /// How many operations that failed part-way a later one has finished.
    pub(crate) fn finished_later(&self) -> u64 {
        self.finished_later.load(Ordering::Acquire)
    }

    /// Whether the backing files are opened with `O_DIRECT`.
    pub(crate) fn direct_io(&self) -> bool {
        self.direct_io
    }

    fn direct_flag(&self) -> i32 {
        if self.direct_io { libc::O_DIRECT } else { 0 }
    }

    /// The backing file of `name` on each device, in device order.
    pub(crate) fn backing_paths(&self, name: &str) -> Vec<PathBuf> {
        (0..self.roots.len())
            .map(|i| self.backing_path(i, name))
            .collect()
    }

    /// The backing file of `name` on device `device`.
    pub(crate) fn backing_path(&self, device: usize, name: &str) -> PathBuf {
        self.roots[device].join(backing_name(name))
    }

    fn new_path(&self, device: usize, name: &str) -> PathBuf {
        self.roots[device].join(format!(".{name}{NEW_SUFFIX}"))
    }

    fn intent_path(&self) -> PathBuf {
        self.roots[0].join(INTENT_FILE)
    }

    fn intent(&self, op: Op) -> Intent {
        Intent {
            devices: self.roots.len() as u32,
            op,
        }
    }

    fn sync_dirs(&self) -> Result<()> {
        for (i, r) in self.roots.iter().enumerate() {
            sync_dir(i, r)?;
        }
        Ok(())
    }

    /// Write the intent record and make it durable (file and directory).
    fn write_intent(&self, meta: &mut Meta, intent: &Intent) -> Result<()> {
        let path = self.intent_path();
        let io = |e| Error::os("device 0: write intent record", &path, e);
        let write = || -> Result<()> {
            crash_point()?;
            #[cfg(test)]
            if INTENT_NO_SPACE.with(std::cell::Cell::get) {
                return Err(io(std::io::Error::from_raw_os_error(libc::ENOSPC)));
            }
            let f = open_raw(&path, libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC).map_err(io)?;
            crash_point()?;
            pwrite_all(&f, &intent.encode(), 0).map_err(io)?;
            crash_point()?;
            fsync_plain(&f).map_err(io)?;
            sync_dir(0, &self.roots[0])
        };
        write().inspect_err(|_| {
            // The operation has not started: its record must not stay whole.
            if self.cancel_intent().is_err() {
                meta.withdraw = Some(intent.clone());
            }
        })
    }

    /// Withdraw the intent record of an operation that did not happen (it failed
    /// before changing anything, or was undone): the record is first made to read
    /// as torn (emptied, which its own fsync makes durable without the directory's),
    /// so that no crash can bring it back whole, then removed.
    fn cancel_intent(&self) -> Result<()> {
        let path = self.intent_path();
        crash_point()?;
        let f = match open_raw(&path, libc::O_WRONLY) {
            Ok(f) => f,
            // Never made (its creation failed), or already removed.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(Error::os("device 0: withdraw intent record", &path, e)),
        };
        truncate(&f, 0)
            .and_then(|()| fsync_plain(&f))
            .map_err(|e| Error::os("device 0: withdraw intent record", &path, e))?;
        let _ = remove_if_present(0, &path);
        let _ = sync_dir(0, &self.roots[0]);
        Ok(())
    }

    /// Remove the intent record once its operation is durable, durably.
    fn remove_intent(&self) -> Result<()> {
        remove_if_present(0, &self.intent_path())?;
        sync_dir(0, &self.roots[0])
    }

    /// Finish the operations interrupted by a crash (at open, before anything else).
    fn recover(&self) -> Result<()> {
        let mut meta = self.lock_meta();
        for (i, root) in self.roots.iter().enumerate() {
            // Normally only device 0 has one; another root may if the roots were
            // given in a different order.
            let path = root.join(INTENT_FILE);
            let bytes = match read_intent(&path) {
                Ok(b) => b,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(Error::os(format!("device {i}: read"), &path, e)),
            };
            match Intent::decode(&bytes) {
                // Written in part: the operation never started.
                Decoded::Torn => {}
                Decoded::Unknown(problem) => {
                    return Err(Error::Recovery {
                        path,
                        op: "operation".into(),
                        problem,
                        errno: None,
                    });
                }
                Decoded::Whole(intent) => {
                    self.finish(&mut meta, &intent)
                        .map_err(|e| Error::Recovery {
                            path: path.clone(),
                            op: intent.op.to_string(),
                            errno: e.errno(),
                            problem: e.to_string(),
                        })?;
                }
            }
            remove_if_present(i, &path)?;
            sync_dir(i, root)?;
        }
        Ok(())
    }

    /// Bring an interrupted operation to its end: roll a create back, roll the
    /// others forward. Idempotent: it may be interrupted and run again.
    fn finish(&self, meta: &mut Meta, intent: &Intent) -> Result<()> {
        if intent.devices as usize != self.roots.len() {
            return Err(Error::InvalidArgument(format!(
                "it spans {} devices but the store was opened with {}; open the store with the same device roots",
                intent.devices,
                self.roots.len()
            )));
        }
        match &intent.op {
            Op::Create { name, uid } => self.undo_create(name, *uid),
            Op::Delete { name } => {
                // Not cut: a handle a first pass forgot may still read it.
                meta.files.remove(name);
                self.redo_delete(name, false)
            }
            Op::Rename { from, to } => {
                let open = meta.files.get(from).and_then(Weak::upgrade);
                self.move_backings(from, to, open.as_deref())?;
                meta.rename_open(from, to);
                self.sync_dirs()
            }
            // Not cut: a handle a first pass forgot may still read `to`.
            Op::Replace { from, to, uid } => self.redo_replace(meta, from, to, *uid, false),
            Op::SetLen {
                name,
                uid,
                layout,
                block_bytes,
                old_len,
                new_len,
            } => {
                let l = Layout::new(*layout, self.roots.len(), *block_bytes)?;
                let paths = self.backing_paths(name);
                let mut fds = Vec::with_capacity(paths.len());
                for (i, p) in paths.iter().enumerate() {
                    let fd = match open_raw(p, libc::O_RDWR) {
                        Ok(fd) => fd,
                        // Nothing of the file on this device to change.
                        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => continue,
                        Err(e) => return Err(Error::os(format!("device {i}: open"), p, e)),
                    };
                    let bad = |problem: String| Error::BadHeader {
                        device: i,
                        path: p.clone(),
                        problem,
                    };
                    let (h, _) = read_header(&fd)
                        .map_err(|e| Error::os(format!("device {i}: read header of"), p, e))?
                        .map_err(bad)?;
                    if h.file_uid != *uid {
                        continue; // another file took the name: not ours to change
                    }
                    if h.device_index as usize != i {
                        return Err(bad(format!(
                            "this piece belongs to device {} (device roots given in a different order?)",
                            h.device_index
                        )));
                    }
                    // The record's geometry is the one the change is redone
                    // with: a record that disagrees with the file it names
                    // (damage its checksum missed) would lay the file out
                    // anew. Refused, the record kept.
                    if h.layout != *layout
                        || h.block_bytes != *block_bytes
                        || h.devices as usize != self.roots.len()
                    {
                        return Err(bad(format!(
                            "the logged length change says {:?} in blocks of {} bytes over {} devices, \
                             but this piece is {:?} in blocks of {} bytes over {} devices",
                            layout,
                            block_bytes,
                            self.roots.len(),
                            h.layout,
                            h.block_bytes,
                            h.devices
                        )));
                    }
                    fds.push((i, fd));
                }
                let pieces: Vec<Piece<'_>> = fds
                    .iter()
                    .map(|(i, fd)| Piece {
                        file: None,
                        device: *i,
                        path: &paths[*i],
                        fd,
                        engine: &*self.engines[*i],
                        media: *uid,
                    })
                    .collect();
                let len = match self.resize_all(&pieces, &l, *uid, *old_len, *new_len)? {
                    Resized::Done => *new_len,
                    Resized::RolledBack(_) => *old_len,
                };
                if let Some(f) = meta.files.get(name).and_then(Weak::upgrade)
                    && f.uid == *uid
                {
                    f.len.store(len, Ordering::Release);
                }
                Ok(())
            }
        }
    }

    /// Make the backing files of a new file: each under a temporary name, complete
    /// (header, size, fsync) before it is linked under its name, so a backing file
    /// under a file's name always has a whole header.
    fn make_backings(&self, name: &str, l: &Layout, size: u64, uid: u64) -> Result<Vec<Fd>> {
        let mut fds = Vec::with_capacity(self.roots.len());
        for i in 0..self.roots.len() {
            let (tmp, path) = (self.new_path(i, name), self.backing_path(i, name));
            let io = |what: &str, e| Error::os(format!("device {i}: {what}"), &path, e);
            crash_point()?;
            let fd = open_raw(
                &tmp,
                libc::O_RDWR | libc::O_CREAT | libc::O_TRUNC | self.direct_flag(),
            )
            .map_err(|e| io("create", e))?;
            let h = Header {
                layout: l.kind(),
                block_bytes: l.block_bytes(),
                len: size,
                devices: self.roots.len() as u32,
                device_index: i as u32,
                file_uid: uid,
            };
            crash_point()?;
            write_header(&fd, &h).map_err(|e| io("write header of", e))?;
            crash_point()?;
            truncate(&fd, HEADER_BYTES + l.device_bytes(size)).map_err(|e| io("size", e))?;
            crash_point()?;
            fsync_fd(&fd).map_err(|e| io("fsync", e))?;
            crash_point()?;
            fs::hard_link(&tmp, &path).map_err(|e| {
                if e.kind() == std::io::ErrorKind::AlreadyExists {
                    Error::FileExists(name.to_string())
                } else {
                    io("link", e)
                }
            })?;
            remove_if_present(i, &tmp)?;
            fds.push(fd);
        }
        Ok(fds)
    }

    /// Roll a create back: remove its temporary files, and the backing files under
    /// its name that carry its uid (a file of that name that is not its own stays).
    fn undo_create(&self, name: &str, uid: u64) -> Result<()> {
        for i in 0..self.roots.len() {
            remove_if_present(i, &self.new_path(i, name))?;
            let path = self.backing_path(i, name);
            let ours = match open_regular(&path) {
                Ok(fd) => read_header(&fd)
                    .map_err(|e| Error::os(format!("device {i}: read header of"), &path, e))?
                    .is_ok_and(|(h, _)| h.file_uid == uid),
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => false,
                // Not a regular file: not the create's, and left alone.
                Err(e) if e.kind() == std::io::ErrorKind::InvalidData => false,
                Err(e) => return Err(Error::os(format!("device {i}: open"), &path, e)),
            };
            if ours {
                remove_if_present(i, &path)?;
            }
        }
        self.sync_dirs()
    }

    /// Roll a delete forward: remove the backing file on every device that has
    /// it. With `cut` (no handle reads the file), each piece no name leads to
    /// any more is cut to length 0 first, so that its space is back when this
    /// returns, whatever else still holds it (see [`cut_if_unnamed`]).
    fn redo_delete(&self, name: &str, cut: bool) -> Result<()> {
        for i in 0..self.roots.len() {
            let path = self.backing_path(i, name);
            let held = if cut { hold_for_cut(&path) } else { None };
            remove_if_present(i, &path)?;
            if let Some(fd) = held {
                cut_if_unnamed(fd.as_raw_fd());
            }
        }
        self.settle_engines();
        self.sync_dirs()
    }

    /// Wait, up to a bound, for each device's ring to apply the updates sent
    /// to it so far: a registration that a closed file's last handle let go
    /// of just before its delete is then gone, and with it the deleted
    /// file's last hold on its space (one round trip to each ring's thread).
    fn settle_engines(&self) {
        for e in &self.engines {
            e.settle(std::time::Duration::from_secs(5));
        }
    }

    /// The identity in the header of the piece at `p` on device `i`; `None`
    /// when there is no piece.
    fn piece_uid(&self, i: usize, p: &Path) -> Result<Option<u64>> {
        let fd = match open_regular(p) {
            Ok(fd) => fd,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(None),
            Err(e) => return Err(Error::os(format!("device {i}: open"), p, e)),
        };
        let (h, _) = read_header(&fd)
            .map_err(|e| Error::os(format!("device {i}: read header of"), p, e))?
            .map_err(|problem| Error::BadHeader {
                device: i,
                path: p.to_path_buf(),
                problem,
            })?;
        Ok(Some(h.file_uid))
    }

    /// The identity of file `name`, from the header of its first piece.
    fn uid_of(&self, name: &str) -> Result<u64> {
        for (i, p) in self.backing_paths(name).iter().enumerate() {
            if let Some(uid) = self.piece_uid(i, p)? {
                return Ok(uid);
            }
        }
        Err(Error::FileNotFound(name.to_string()))
    }

    /// Move `from`'s pieces (identity `uid`) over `to`'s, device by device
    /// (each rename replaces atomically on its device), and remove the pieces
    /// of the replaced file on devices where `from` has none; the replaced
    /// file's open handles are forgotten, `from`'s follow the name.
    /// Idempotent: a device already done has no piece of `from` and its piece
    /// of `to` carries `uid`. With `cut` (no handle reads the replaced file),
    /// its pieces are cut to length 0 once no name leads to them, as a
    /// delete's are.
    fn redo_replace(
        &self,
        meta: &mut Meta,
        from: &str,
        to: &str,
        uid: u64,
        cut: bool,
    ) -> Result<()> {
        let open = meta.files.get(from).and_then(Weak::upgrade);
        let mut name = open
            .as_deref()
            .map(|f| f.name.write().unwrap_or_else(|p| p.into_inner()));
        for i in 0..self.roots.len() {
            let (src, dst) = (self.backing_path(i, from), self.backing_path(i, to));
            // (An earlier pass's moved piece has a name: it is not cut.)
            let held = if cut { hold_for_cut(&dst) } else { None };
            if exists(&src) {
                crash_point()?;
                fs::rename(&src, &dst)
                    .map_err(|e| Error::os(format!("device {i}: rename"), &src, e))?;
            } else {
                // A piece of the replaced file (or one too damaged to tell,
                // which no file of `uid` left there): not the new file's.
                match self.piece_uid(i, &dst) {
                    Ok(None) => {}
                    Ok(Some(theirs)) if theirs == uid => {}
                    Ok(Some(_)) | Err(Error::BadHeader { .. }) => {
                        remove_if_present(i, &dst)?;
                    }
                    Err(e) => return Err(e),
                }
            }
            if let Some(fd) = held {
                cut_if_unnamed(fd.as_raw_fd());
            }
        }
        if let Some(n) = name.as_mut() {
            **n = Arc::from(to);
        }
        if let Some(f) = open.as_deref() {
            f.renames.fetch_add(1, Ordering::Release);
        }
        drop(name);
        // The replaced file's handle goes; the moved file's, if an earlier
        // pass of this replace already put it under `to`, stays.
        let moved = meta
            .files
            .get(to)
            .and_then(Weak::upgrade)
            .is_some_and(|f| f.uid == uid);
        if !moved {
            meta.files.remove(to);
        }
        meta.rename_open(from, to);
        self.sync_dirs()
    }

    /// Rename the backing files of `from` that are still there to `to`; an open
    /// file's name changes with them, under its name lock (which `File::sync`
    /// holds while it looks the paths up).
    fn move_backings(&self, from: &str, to: &str, open: Option<&FileInner>) -> Result<()> {
        let mut name = open.map(|f| f.name.write().unwrap_or_else(|p| p.into_inner()));
        for i in 0..self.roots.len() {
            let (src, dst) = (self.backing_path(i, from), self.backing_path(i, to));
            if !exists(&src) {
                continue;
            }
            crash_point()?;
            fs::rename(&src, &dst)
                .map_err(|e| Error::os(format!("device {i}: rename"), &src, e))?;
        }
        if let Some(n) = name.as_mut() {
            **n = Arc::from(to);
        }
        if let Some(f) = open {
            f.renames.fetch_add(1, Ordering::Release);
        }
        Ok(())
    }

    /// Give every piece of a file the length `new`. Should that fail part-way while
    /// growing the file (say the file system cannot hold that size), give them back
    /// the length `old`: a growth is finished or undone, whichever can be done. A
    /// failed shrink is not undone (the bytes past its new length may be gone).
    fn resize_all(
        &self,
        pieces: &[Piece<'_>],
        l: &Layout,
        uid: u64,
        old: u64,
        new: u64,
    ) -> Result<Resized> {
        let set = |from: u64, to: u64| {
            pieces
                .iter()
                .try_for_each(|p| self.resize_backing(p, l, uid, from, to))
        };
        match set(old, new) {
            Ok(()) => Ok(Resized::Done),
            Err(e) if new > old => match set(new, old) {
                Ok(()) => Ok(Resized::RolledBack(e)),
                Err(_) => Err(e),
            },
            Err(e) => Err(e),
        }
    }

    /// Give one backing file the size and header of length `new`, with every byte
    /// of the device's data past the shorter of `old` and `new` reading as zeros:
    /// the rest of the tail sector, and whatever an earlier, longer length left.
    fn resize_backing(
        &self,
        p: &Piece<'_>,
        l: &Layout,
        uid: u64,
        old: u64,
        new: u64,
    ) -> Result<()> {
        let (i, fd) = (p.device, p.fd);
        let io = |e| Error::os(format!("device {i}: set length of"), p.path, e);
        let end = HEADER_BYTES + l.device_end(i, old.min(new));
        let size = HEADER_BYTES + l.device_bytes(new);
        let have = fstat(fd).map_err(io)?.st_size as u64;
        if end < have.min(size) {
            crash_point()?;
            zero_range(fd, end, have.min(size), true, new > old).map_err(io)?;
        }
        p.engine.discard(p.media, end - HEADER_BYTES);
        // A cut truncates even to the same size, which frees space reserved
        // past the end (ext4 drops a file's preallocation there).
        if new < old || fstat(fd).map_err(io)?.st_size as u64 != size {
            crash_point()?;
            truncate(fd, size).map_err(io)?;
        }
        self.write_length(p, l, uid, new)?;
        // Past the end, cleared and fsynced: clear for a later lazy growth,
        // unless this was a cut, which a write still in flight from before
        // it may land past.
        if let Some(f) = p.file {
            f.backings[i].tail_clear.store(new > old, Ordering::Release);
        }
        Ok(())
    }

    /// Reserve device space for bytes `offset..offset + len` of `f` (see
    /// `File::reserve`): each backing file's part of the range, taken with
    /// `FALLOC_FL_KEEP_SIZE`, so that no size changes; with `durable`, made
    /// durable before this returns.
    pub(crate) fn reserve(
        &self,
        f: &FileInner,
        offset: u64,
        len: u64,
        durable: bool,
    ) -> Result<()> {
        if len == 0 {
            return Err(Error::InvalidArgument(
                "a reservation of 0 bytes (the length must be positive)".to_string(),
            ));
        }
        let end = offset
            .checked_add(len)
            .filter(|&e| e <= MAX_LEN)
            .ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "a reservation of {len} bytes at {offset} ends past the largest file \
                     length ({MAX_LEN} bytes)"
                ))
            })?;
        // Under the metadata lock: no length change cuts a backing file while
        // its range is being taken.
        let meta = self.begin_meta()?;
        let name = f.name.read().unwrap_or_else(|p| p.into_inner()).clone();
        let paths = self.backing_paths(&name);
        let io = |i: usize, e| Error::os(format!("device {i}: reserve"), &paths[i], e);
        let mut taken = Vec::new();
        for (i, b) in f.backings.iter().enumerate() {
            b.state.check()?;
            // A device's bytes of a file are its blocks in the file's order,
            // so the range's part on it is one run.
            let from = f.layout.device_end(i, offset);
            let to = f.layout.device_end(i, end);
            if to > from {
                allocate_keep_size(&b.fd, HEADER_BYTES + from, to - from).map_err(|e| io(i, e))?;
                taken.push(i);
            }
        }
        drop(meta);
        if !durable {
            return Ok(());
        }
        // Durable when this returns (a later sync with nothing to write would
        // not fsync); outside the lock, which other files' operations wait on.
        for i in taken {
            let _counting = f.fsync_counted();
            fsync_fd(&f.backings[i].fd).map_err(|e| {
                let e = io(i, e);
                fsync_failed(f, i, &e);
                e
            })?;
        }
        Ok(())
    }

    /// Whether every byte of the devices' runs that hold bytes
    /// `offset..offset + len` of `f` has its space (no hole in a backing
    /// file, as `SEEK_HOLE` tells). A file system may tell space reserved
    /// (`FALLOC_FL_KEEP_SIZE`) but never written as a hole; one that cannot
    /// look for holes tells none.
    pub(crate) fn allocated(&self, f: &FileInner, offset: u64, len: u64) -> Result<bool> {
        let end = offset.saturating_add(len).min(MAX_LEN);
        for (i, b) in f.backings.iter().enumerate() {
            b.state.check()?;
            let from = HEADER_BYTES + f.layout.device_end(i, offset);
            let to = HEADER_BYTES + f.layout.device_end(i, end);
            if to <= from {
                continue;
            }
            // SAFETY: plain system call on an open descriptor; the offset it
            // moves is used by no read or write (they give their offsets).
            let hole = unsafe { libc::lseek(b.fd.as_raw_fd(), from as i64, libc::SEEK_HOLE) };
            if hole < 0 {
                let e = std::io::Error::last_os_error();
                // At or past the backing file's end: nothing there yet.
                if e.raw_os_error() == Some(libc::ENXIO) {
                    return Ok(false);
                }
                let name = f.name.read().unwrap_or_else(|p| p.into_inner()).clone();
                let paths = self.backing_paths(&name);
                return Err(Error::os(
                    format!("device {i}: look for holes in"),
                    &paths[i],
                    e,
                ));
            }
            if (hole as u64) < to {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Cut each backing file of `f` to its own size: the space reserved past
    /// it (`FALLOC_FL_KEEP_SIZE`) is freed, every byte kept. Under the
    /// metadata lock, so that no length change comes between the size read
    /// and the cut.
    pub(crate) fn trim_past_end(&self, f: &FileInner) -> Result<()> {
        let _meta = self.begin_meta()?;
        let name = f.name.read().unwrap_or_else(|p| p.into_inner()).clone();
        let paths = self.backing_paths(&name);
        for (i, b) in f.backings.iter().enumerate() {
            b.state.check()?;
            let io = |e| {
                Error::os(
                    format!("device {i}: give back reserved space of"),
                    &paths[i],
                    e,
                )
            };
            let size = fstat(&b.fd).map_err(io)?.st_size as u64;
            truncate(&b.fd, size).map_err(io)?;
        }
        Ok(())
    }

    /// Grow `f` to `len` bytes lazily (see `File::grow_lazily`): each backing
    /// file given the size of the new length, with the bytes past the old
    /// length reading as zeros (a longer backing file left by a crash is
    /// cleared there), and the length in memory changed; the headers are left
    /// to `write_stale_headers`. Returns the length it grew from, read under
    /// the metadata lock (after any unfinished operation was finished), or
    /// `None` if the file was `len` bytes long already.
    pub(crate) fn grow_lazily(&self, f: &FileInner, len: u64) -> Result<Option<u64>> {
        check_len("file length", len)?;
        let _meta = self.begin_meta()?;
        let old = f.len.load(Ordering::Acquire);
        if len <= old {
            return Ok(None);
        }
        let name = f.name.read().unwrap_or_else(|p| p.into_inner()).clone();
        let paths = self.backing_paths(&name);
        for (i, b) in f.backings.iter().enumerate() {
            let io = |e| Error::os(format!("device {i}: grow"), &paths[i], e);
            let end = HEADER_BYTES + f.layout.device_end(i, old);
            let size = HEADER_BYTES + f.layout.device_bytes(len);
            let have = fstat(&b.fd).map_err(io)?.st_size as u64;
            // Bytes a crash left past the durable length (or a write of the
            // last sector whole) are cleared, and a backing file longer than
            // the new size is cut, then both made durable by one fsync
            // before any header (a sync's, or a `set_len` whose record a
            // recovery rolls forward from this length) takes the range into
            // the file. Once per backing file opened, then only after such a
            // write (`tail_clear`): appends pay nothing here.
            let unclear = end < have && !b.tail_clear.load(Ordering::Acquire);
            let mut now = have;
            if unclear && end < have.min(size) {
                zero_range(&b.fd, end, have.min(size), false, true).map_err(io)?;
                // (Where holes cannot be punched, the last sector is written
                // whole, which may lengthen the file.)
                now = fstat(&b.fd).map_err(io)?.st_size as u64;
            }
            b.engine.discard(b.ino, end - HEADER_BYTES);
            if now != size {
                truncate(&b.fd, size).map_err(io)?;
            }
            if unclear {
                let _counting = f.fsync_counted();
                fsync_fd(&b.fd).map_err(|e| {
                    let e = io(e);
                    fsync_failed(f, i, &e);
                    e
                })?;
            }
            // Past the new end: what was past the old one, clear, or the
            // zeros of the longer size. (Before the length is shown: a write
            // that then puts bytes past the new end clears the flag after.)
            b.tail_clear.store(true, Ordering::Release);
        }
        // The flag before the length: a thread that sees the new length (and
        // may write past the old one, then sync) sees the headers stale.
        f.header_stale.store(true, Ordering::Release);
        f.len.store(len, Ordering::Release);
        Ok(Some(old))
    }

    /// If a lazy growth left `f`'s headers behind its length, write them (the
    /// caller's fsync follows). Under the metadata lock, so that no length
    /// change writes its header in between. The flag is cleared only once
    /// every header is written: a sync that comes meanwhile finds it set and
    /// waits for the lock, so that no sync returns before the headers its
    /// writes need are written (its own fsync then makes them durable).
    /// Returns whether it wrote them.
    pub(crate) fn write_stale_headers(&self, f: &FileInner) -> Result<bool> {
        if !f.header_stale.load(Ordering::Acquire) {
            return Ok(false);
        }
        let _meta = self.begin_meta()?;
        if !f.header_stale.load(Ordering::Acquire) {
            return Ok(false);
        }
        #[cfg(test)]
        pause_in_headers(f as *const FileInner as usize);
        let len = f.len.load(Ordering::Acquire);
        let name = f.name.read().unwrap_or_else(|p| p.into_inner()).clone();
        // The backing files' new sizes first: a header must never be durable
        // ahead of the size it needs (the store would find the file truncated).
        for (i, b) in f.backings.iter().enumerate() {
            crash_point()?;
            let _counting = f.fsync_counted();
            if let Err(e) = fsync_fd(&b.fd) {
                let e = Error::os(
                    format!("device {i}: sync the size of"),
                    self.backing_path(i, &name),
                    e,
                );
                fsync_failed(f, i, &e);
                return Err(e);
            }
        }
        for (i, b) in f.backings.iter().enumerate() {
            let h = Header {
                layout: f.layout.kind(),
                block_bytes: f.layout.block_bytes(),
                len,
                devices: self.roots.len() as u32,
                device_index: i as u32,
                file_uid: f.uid,
            };
            crash_point()?;
            write_header(&b.fd, &h).map_err(|e| {
                Error::os(
                    format!("device {i}: write the header of"),
                    self.backing_path(i, &name),
                    e,
                )
            })?;
        }
        f.header_stale.store(false, Ordering::Release);
        Ok(true)
    }

    /// Change a file's length (any number of bytes): headers and backing sizes on
    /// every device, all or (finishing it after an error or a crash) nothing.
    pub(crate) fn set_len(&self, f: &FileInner, len: u64) -> Result<()> {
        self.set_len_with(f, len, &mut |_| Ok(()))
    }

    /// As `set_len`, running `before_cut(old length)` once the change is
    /// committed (its intent record is durable and, for a shrink, I/O past the
    /// new end is refused) and before any device changes: a page cache drops and
    /// zeroes its pages there. The change goes on if `before_cut` fails; its
    /// error is returned after.
    pub(crate) fn set_len_with(
        &self,
        f: &FileInner,
        len: u64,
        before_cut: &mut dyn FnMut(u64) -> Result<()>,
    ) -> Result<()> {
        check_len("file length", len)?;
        let mut meta = self.begin_meta()?;
        let old = f.len.load(Ordering::Acquire);
        let name = f.name.read().unwrap_or_else(|p| p.into_inner()).clone();
        let intent = self.intent(Op::SetLen {
            name: name.to_string(),
            uid: f.uid,
            layout: f.layout.kind(),
            block_bytes: f.layout.block_bytes(),
            old_len: old,
            new_len: len,
        });
        let recorded = match self.write_intent(&mut meta, &intent) {
            Ok(()) => true,
            // A device 0 too full for the record: a cut, which makes room,
            // goes without one (a program's rollback of a write that found
            // the devices full is such a cut). Each device's header takes
            // the new length before its backing file is cut, so that after a
            // crash at any step no backing file is shorter than its header
            // says, and the headers' shortest length (the new one, once any
            // header has it) stands at the next open, as after a crash inside
            // a lazy growth: the file is as it was, or as it is after.
            Err(e) if len < old && matches!(e.posix_errno(), libc::ENOSPC | libc::EDQUOT) => false,
            Err(e) => return Err(e),
        };
        if len < old {
            // Refuse new I/O past the new end before the space goes.
            f.len.store(len, Ordering::Release);
        }
        let hooked = before_cut(old);
        let paths = self.backing_paths(&name);
        let pieces: Vec<Piece<'_>> = f
            .backings
            .iter()
            .enumerate()
            .map(|(i, b)| Piece {
                file: Some(f),
                device: i,
                path: &paths[i],
                fd: &b.fd,
                engine: &*b.engine,
                media: b.ino,
            })
            .collect();
        if !recorded {
            let headed = pieces
                .iter()
                .try_for_each(|p| self.write_length(p, &f.layout, f.uid, len));
            if let Err(e) = headed {
                // Finished by the next metadata operation (a cut again),
                // which needs no record either.
                meta.pending = Some(intent);
                return Err(e);
            }
        }
        match self.resize_all(&pieces, &f.layout, f.uid, old, len) {
            Ok(Resized::Done) => {}
            Ok(Resized::RolledBack(e)) => {
                // The file is back at its old length: the record must not
                // come back and grow it after all (withdrawn later, not
                // finished, if it cannot be withdrawn now).
                if self.cancel_intent().is_err() {
                    meta.withdraw = Some(intent);
                }
                return Err(e);
            }
            Err(e) => {
                meta.leave_pending(intent, len > old);
                return Err(e);
            }
        }
        if recorded && let Err(e) = self.remove_intent() {
            meta.leave_pending(intent, len > old);
            return Err(e);
        }
        f.len.store(len, Ordering::Release);
        hooked
    }

    /// Write and fsync the header of one backing file with length `len`,
    /// changing nothing else: the last step of `resize_backing`, and the
    /// first of a cut without an intent record.
    fn write_length(&self, p: &Piece<'_>, l: &Layout, uid: u64, len: u64) -> Result<()> {
        let i = p.device;
        let io = |e| Error::os(format!("device {i}: set length of"), p.path, e);
        let h = Header {
            layout: l.kind(),
            block_bytes: l.block_bytes(),
            len,
            devices: self.roots.len() as u32,
            device_index: i as u32,
            file_uid: uid,
        };
        crash_point()?;
        write_header(p.fd, &h).map_err(io)?;
        crash_point()?;
        let _counting = p.file.map(FileInner::fsync_counted);
        fsync_fd(p.fd).map_err(|e| {
            let e = io(e);
            if let Some(f) = p.file {
                fsync_failed(f, i, &e);
            }
            e
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A child forked while another thread of its parent holds the list of
    /// locked roots (as an open of another store does, for a few steps)
    /// locks a root of its own instead of waiting for ever.
    #[test]
    fn a_child_forked_while_the_roots_list_is_held_locks_its_own_root() {
        let dir = std::env::temp_dir().join(format!("setcache-held-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        drop(held());
        let code = crate::util::fork_locks::in_child_while_held(held, || {
            i32::from(lock_root(0, &dir).is_err())
        });
        let _ = fs::remove_dir_all(&dir);
        assert_eq!(code, Some(0), "the child's lock of its root failed or hung");
    }
}
