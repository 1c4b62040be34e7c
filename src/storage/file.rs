//! A named file striped over the devices: synchronous and batched I/O.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};

use crate::error::{Error, Result};
use crate::storage::buf::AlignedBuf;
use crate::storage::header::HEADER_BYTES;
use crate::storage::io::{Backing, DevOp, DevOpKind, Iovs, Joiner, Sink};
use crate::storage::layout::Layout;
use crate::storage::store::StoreInner;

/// Read or write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpKind {
    /// Read from the file into the buffer.
    Read,
    /// Write the buffer to the file.
    Write,
}

/// Alignment of offset, length and buffer address of uncached I/O.
pub const DIRECT_ALIGN: u64 = 512;
/// At most this many memory pieces in one device operation (well under IOV_MAX).
const MAX_IOV: usize = 64;

/// The most bytes one request may move: Linux's limit on one read or write
/// (`MAX_RW_COUNT`, 2 GiB less a page); a device operation of more would
/// come back short every time.
pub const MAX_REQUEST: usize = 0x7fff_f000;

/// The next [`FileInner::serial`].
static NEXT_SERIAL: AtomicU64 = AtomicU64::new(1);

/// A serial number for a new open file, unique in the process.
pub(crate) fn next_serial() -> u64 {
    NEXT_SERIAL.fetch_add(1, Ordering::Relaxed)
}

pub(crate) struct FileInner {
    pub(crate) name: RwLock<Arc<str>>,
    /// Changes of `name` (bumped under its write lock, after the change), so
    /// that a holder of a copy of the name knows when it is stale.
    pub(crate) renames: AtomicU64,
    /// Unique in the process among open files (a key for copies of the name).
    pub(crate) serial: u64,
    pub(crate) layout: Layout,
    pub(crate) len: AtomicU64,
    pub(crate) uid: u64,
    pub(crate) backings: Vec<Arc<Backing>>,
    pub(crate) store: Arc<StoreInner>,
    /// The file is open through a page cache, whose pages a length change
    /// must keep right: only `CachedFile::set_len` may change it.
    /// (A count: the caches that hold it.)
    pub(crate) cached: AtomicUsize,
    /// A lazy growth ([`File::grow_lazily`]) changed the length since the
    /// headers were last written: the next [`File::sync`] writes them.
    pub(crate) header_stale: std::sync::atomic::AtomicBool,
    /// The first failed fsync through [`File::sync`]: the kernel may have
    /// dropped the pages it could not write and reports that once, so every
    /// later sync of this handle fails too.
    pub(crate) sync_lost: std::sync::Mutex<Option<Error>>,
    /// Failed fsyncs of the backing files other than a page cache's own
    /// syncs': those of metadata steps (a `set_len`, a lazy growth's
    /// headers) and of [`File::sync`] calls. Each may have taken the
    /// kernel's one report of dropped pages, which the file's next fsync will
    /// not repeat. The last one's error beside the count.
    pub(crate) meta_fsync_failures: AtomicU64,
    pub(crate) meta_fsync_error: std::sync::Mutex<Option<Error>>,
    /// Held shared by each fsync counted in `meta_fsync_failures`, from
    /// before the fsync until its failure is counted; a page cache's sync
    /// takes it exclusively once its own fsync has returned, so that an
    /// fsync that took the kernel's report first is counted before the sync
    /// looks at the count.
    pub(crate) fsyncs_counting: RwLock<()>,
}

impl FileInner {
    /// Count a failed fsync of the backing files that a page cache's sync
    /// did not make (see `meta_fsync_failures`).
    pub(crate) fn count_fsync_failure(&self, e: &Error) {
        *self
            .meta_fsync_error
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(e.clone());
        self.meta_fsync_failures.fetch_add(1, Ordering::AcqRel);
    }

    /// Hold across an fsync whose failure `count_fsync_failure` counts, and
    /// the counting. Never taken while held (a waiting
    /// `wait_fsyncs_counted` would block the second taking).
    pub(crate) fn fsync_counted(&self) -> std::sync::RwLockReadGuard<'_, ()> {
        self.fsyncs_counting
            .read()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// Wait until every fsync that `fsync_counted` covers and that began
    /// before this call has had its failure, if any, counted.
    pub(crate) fn wait_fsyncs_counted(&self) {
        drop(
            self.fsyncs_counting
                .write()
                .unwrap_or_else(|p| p.into_inner()),
        );
    }
}

/// Called by a sync of the file whose `FileInner` is at this address once
/// its devices' states are checked, before its fsyncs (tests run another
/// thread's failing step there).
#[cfg(test)]
pub(crate) static BEFORE_FSYNCS: crate::util::hook::TestHook<usize, Box<dyn FnOnce() + Send>> =
    crate::util::hook::TestHook::new();

/// Called by a counted fsync (`File::sync`'s) that failed, before its
/// failure is counted (tests hold it there).
#[cfg(test)]
pub(crate) static FAILED_BEFORE_COUNTED: crate::util::hook::TestHook<
    usize,
    Box<dyn FnOnce() + Send>,
> = crate::util::hook::TestHook::new();

/// An open file of a store. Cheap to clone; `Send + Sync`: threads share one handle.
///
/// Reads and writes go straight to the devices (O_DIRECT by default), so
/// offsets, lengths and buffer addresses are multiples of 512 bytes
/// ([`DIRECT_ALIGN`]); [`AlignedBuf`](crate::AlignedBuf) gives such buffers.
///
/// ```
/// use setcache::{AlignedBuf, LayoutKind, Store, StoreOptions};
///
/// let dir = std::env::temp_dir().join(format!("setcache-doc-file-{}", std::process::id()));
/// std::fs::create_dir_all(&dir)?;
/// let store = Store::open(&[&dir], StoreOptions::default())?;
/// let file = store.create("log", 64 << 10, LayoutKind::Stripe)?;
/// let mut buf = AlignedBuf::new(4096);
/// buf[..5].copy_from_slice(b"hello");
/// file.write_at(4096, &buf)?;
/// file.sync()?; // durable on every device
/// file.set_len(16 << 10)?; // exact to the byte
/// assert_eq!(file.len(), 16 << 10);
/// let mut back = AlignedBuf::new(4096);
/// file.read_at(4096, &mut back)?;
/// assert_eq!(&back[..5], b"hello");
/// drop((file, store));
/// std::fs::remove_dir_all(&dir)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct File {
    pub(crate) inner: Arc<FileInner>,
}

impl std::fmt::Debug for File {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("File")
            .field("name", &self.name())
            .field("len", &self.len())
            .field("layout", &self.inner.layout)
            .finish()
    }
}

impl File {
    /// The file's name.
    pub fn name(&self) -> String {
        self.name_arc().to_string()
    }

    pub(crate) fn name_arc(&self) -> Arc<str> {
        self.inner
            .name
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Length in bytes.
    pub fn len(&self) -> u64 {
        self.inner.len.load(Ordering::Acquire)
    }

    /// Whether the file has length zero.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The placement of the file's blocks.
    pub fn layout(&self) -> Layout {
        self.inner.layout
    }

    /// Change the length, to any number of bytes. Rewrites the header on every
    /// device; all of it happens, or (after an error or a crash) it is finished later.
    /// The bytes past the new length, to the end of its sector, read as zeros, and so
    /// does anything the file holds past the shorter of the old and new lengths.
    ///
    /// A file open through a [`crate::CachedStore`] is refused: change its length
    /// with [`crate::CachedFile::set_len`], which keeps the cached pages right.
    pub fn set_len(&self, len: u64) -> Result<()> {
        if self.inner.cached.load(Ordering::Acquire) > 0 {
            return Err(Error::InvalidArgument(format!(
                "file {:?} is open through a page cache: change its length with CachedFile::set_len",
                self.name()
            )));
        }
        self.inner.store.set_len(&self.inner, len)
    }

    /// Reserve space on the devices for bytes `offset..offset + len`, inside
    /// the file or past its end, so that writes there cannot fail later for
    /// want of space: each backing file's part of the range is allocated
    /// (`fallocate` keeping its size). The file's length and bytes do not
    /// change (a hole still reads as zeros), and a later growth over the range
    /// keeps its space. A length that cuts the range off frees its space (on
    /// file systems that drop a file's preallocation at a cut, ext4 among
    /// them). The reservation is durable when this returns (one fsync per
    /// device).
    ///
    /// Errors: a zero `len` or a range past the largest file length
    /// ([`Error::InvalidArgument`]); a device out of space ([`Error::Os`]
    /// with `ENOSPC`, naming the device and its backing file, some devices'
    /// parts perhaps taken); a backing file system without `fallocate`
    /// (`EOPNOTSUPP`); a failed device ([`Error::DeviceFailed`]).
    pub fn reserve(&self, offset: u64, len: u64) -> Result<()> {
        self.inner.store.reserve(&self.inner, offset, len, true)
    }

    /// [`File::reserve`] without its fsync: the space is taken (or `ENOSPC`
    /// is the answer now), but a crash before the next sync of the file may
    /// give it back. For a writer that wants a full device to fail its
    /// write rather than the write-back, whose sync makes both durable.
    pub(crate) fn reserve_unsynced(&self, offset: u64, len: u64) -> Result<()> {
        self.inner.store.reserve(&self.inner, offset, len, false)
    }

    /// Whether the devices hold space for every byte of `offset..offset +
    /// len` (see `Store::allocated`).
    pub(crate) fn allocated(&self, offset: u64, len: u64) -> Result<bool> {
        self.inner.store.allocated(&self.inner, offset, len)
    }

    /// Free the space reserved past each backing file's end (see
    /// `CachedFile::trim_reservations`).
    pub(crate) fn trim_past_end(&self) -> Result<()> {
        self.inner.store.trim_past_end(&self.inner)
    }

    /// Change the length under the cache that holds the file's pages:
    /// `before_cut(old length)` runs once the change is committed and I/O past
    /// a shorter end is refused, before any device changes.
    /// Grow the file to `len` bytes (nothing if it is that long already)
    /// without a metadata operation: the backing files are extended (the new
    /// bytes read as zeros) and the length changes at once; the headers, which
    /// hold the length on the devices, are written by the next [`File::sync`],
    /// which makes the growth durable. A crash before that finds the file at
    /// its last durable length. For a page cache's writes past the end.
    /// Returns the length it grew the file from (`None`: long enough).
    pub(crate) fn grow_lazily(&self, len: u64) -> Result<Option<u64>> {
        self.inner.store.grow_lazily(&self.inner, len)
    }

    /// The checks `sync` ends with, without its fsync: no device of the
    /// file failed, and each backing file is still the one at its path.
    pub(crate) fn check_live(&self) -> Result<()> {
        for b in &self.inner.backings {
            b.state.check()?;
        }
        self.check_backings()
    }

    /// Whether a lazy growth waits for its headers to be written.
    pub(crate) fn header_stale(&self) -> bool {
        self.inner
            .header_stale
            .load(std::sync::atomic::Ordering::Acquire)
    }

    pub(crate) fn set_len_cached(
        &self,
        len: u64,
        before_cut: &mut dyn FnMut(u64) -> Result<()>,
    ) -> Result<()> {
        self.inner.store.set_len_with(&self.inner, len, before_cut)
    }

    /// Read `buf.len()` bytes at `offset`. Offset, length and buffer address must be
    /// multiples of 512 bytes. The request may cover the file's last sector whole,
    /// up to the length rounded up to 512; past the length, that sector reads as
    /// zeros after `create` or `set_len` (and as whatever a write put there since).
    pub fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.sync_io(OpKind::Read, offset, buf.as_mut_ptr(), buf.len())
    }

    /// Write all of `buf` at `offset`, with the alignment rules of [`File::read_at`].
    ///
    /// A file open through a [`crate::CachedStore`] is refused: write it
    /// with [`crate::CachedFile::write_at`], which keeps the cached pages
    /// right (a write around the cache would leave them stale, and a
    /// read-only handle's file would take writes).
    pub fn write_at(&self, offset: u64, buf: &[u8]) -> Result<()> {
        if self.inner.cached.load(Ordering::Acquire) > 0 {
            return Err(Error::InvalidArgument(format!(
                "file {:?} is open through a page cache: write it with CachedFile::write_at",
                self.name()
            )));
        }
        self.write_at_raw(offset, buf)
    }

    /// [`File::write_at`] for the cache that holds the file's pages (its
    /// write-backs).
    pub(crate) fn write_at_raw(&self, offset: u64, buf: &[u8]) -> Result<()> {
        self.sync_io(OpKind::Write, offset, buf.as_ptr().cast_mut(), buf.len())
    }

    /// Make every completed write durable on every device. Then checks that each
    /// backing file is still the one at the file's path (not removed, nor replaced):
    /// if not, the data is not in the store, and the error
    /// ([`Error::BackingGone`]) names the file and the device.
    ///
    /// A failed fsync after writes through this handle may have cost them
    /// (the kernel can drop the pages it could not write, and reports that
    /// once): this handle's later syncs fail with [`Error::SyncLost`] until
    /// the file is opened again. (A failure the device does not survive, as
    /// `EIO`, fails the device instead.)
    pub fn sync(&self) -> Result<()> {
        if let Some(e) = self.lost() {
            return Err(e);
        }
        // Failures of the file's counted fsyncs so far: one counted while
        // this sync runs took the kernel's report of what it may have cost.
        let before = self.meta_fsync_failures();
        // Writes that completed since the last sync began (each backing
        // file's flag taken, none left set by a short cut).
        let written = self
            .inner
            .backings
            .iter()
            .fold(false, |w, b| b.written.swap(false, Ordering::AcqRel) | w);
        // (A failure of the fsyncs is counted: a page cache over this file,
        // whose own next fsync will not hear of what this one may have cost,
        // must write again what it wrote since its last good one.)
        let (r, covered) = self.sync_as(true, written);
        let r = r.map_err(|(e, _)| e);
        // (A failure the device does not survive fails it, and every later
        // request with it; one it survives, out of space say, sticks here.)
        if let Err(e) = &r {
            if covered {
                self.stick(e);
            }
            return r;
        }
        // This fsync passed, but another of the file's that ran beside it
        // and failed may have taken the kernel's one report of pages both
        // were to cover (its stick, if it had writes to cover, is made
        // before its count; this waits for both). The writes this sync took
        // may be gone then too.
        self.inner.wait_fsyncs_counted();
        if let Some(e) = self.lost() {
            return Err(e);
        }
        if covered
            && self.meta_fsync_failures() != before
            && let Some(e) = self.meta_fsync_error()
        {
            self.stick(&e);
            // One the device did not survive failed the device instead:
            // this sync fails with it, as its own fsync's failure would.
            return Err(self.lost().unwrap_or(e));
        }
        Ok(())
    }

    /// The loss a failed fsync left on this handle, as its syncs report it.
    fn lost(&self) -> Option<Error> {
        let lost = self
            .inner
            .sync_lost
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        lost.as_ref().map(|first| Error::SyncLost {
            file: self.name(),
            first: Box::new(first.clone()),
        })
    }

    /// A failed fsync `e` may have cost writes: this handle's later syncs
    /// fail with it, if it is one the device survives (one it does not
    /// fails the device, and every later request with it).
    fn stick(&self, e: &Error) {
        if e.can_pass() || e.errno().is_some_and(crate::error::error_can_pass) {
            self.inner
                .sync_lost
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get_or_insert_with(|| e.clone());
        }
    }

    /// How many fsyncs of metadata steps failed on this handle, and the last
    /// one's error.
    pub(crate) fn meta_fsync_failures(&self) -> u64 {
        self.inner.meta_fsync_failures.load(Ordering::Acquire)
    }

    pub(crate) fn meta_fsync_error(&self) -> Option<Error> {
        self.inner
            .meta_fsync_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// As [`File::sync`], for a caller that writes again whatever a failed
    /// fsync may have cost (the page cache's `sync`): no failure sticks.
    /// Tells of a failure whether the fsyncs ran
    /// (true: the kernel may have dropped what they were to cover) or the
    /// sync failed before them, writing a lazy growth's headers (false:
    /// nothing written was dropped).
    ///
    /// Returns only once every other fsync of the file that may have taken
    /// the kernel's report before this one has counted its failure
    /// (`meta_fsync_failures`): a count read after this holds it.
    pub(crate) fn sync_again_told(&self) -> std::result::Result<(), (Error, bool)> {
        let (r, _) = self.sync_as(false, false);
        self.inner.wait_fsyncs_counted();
        r
    }

    /// `File::sync`'s work (`counted`: a failure of the fsyncs is counted
    /// in `meta_fsync_failures`), or a page cache's. Also returns whether
    /// the fsyncs were to cover writes (`written`, the flags the caller took,
    /// or those taken here after the headers); a counted failure that covered
    /// some sticks before it is counted.
    #[allow(clippy::type_complexity)]
    fn sync_as(
        &self,
        counted: bool,
        written: bool,
    ) -> (std::result::Result<(), (Error, bool)>, bool) {
        // A length grown lazily becomes durable with this fsync: one header
        // write per device first (a failure of the sizes' fsync there is
        // one of the fsyncs).
        let before = self.meta_fsync_failures();
        let headers = match self.inner.store.write_stale_headers(&self.inner) {
            Ok(h) => h,
            Err(e) => return (Err((e, self.meta_fsync_failures() != before)), written),
        };
        // Writes this fsync covers, as `File::sync` takes them (which has
        // taken them already when it is the caller): they count again for
        // the next sync should this one fail. (Taken after the headers, so
        // that a failed fsync of their sizes finds them.)
        let taken: Vec<bool> = self
            .inner
            .backings
            .iter()
            .map(|b| b.written.swap(false, Ordering::AcqRel))
            .collect();
        let put_back = || {
            for (b, &w) in self.inner.backings.iter().zip(&taken) {
                if w {
                    b.written.store(true, Ordering::Release);
                }
            }
        };
        let covered = written || taken.contains(&true);
        let r = if counted {
            let _counting = self.inner.fsync_counted();
            let r = self.fsync_all();
            if let Err((e, true)) = &r {
                #[cfg(test)]
                if let Some(hook) = FAILED_BEFORE_COUNTED.take(Arc::as_ptr(&self.inner) as usize) {
                    hook();
                }
                // Stuck before the count, and both before the counting
                // ends: a sync that waits for the counting finds the loss.
                if covered {
                    self.stick(e);
                }
                self.inner.count_fsync_failure(e);
            }
            r
        } else {
            self.fsync_all()
        };
        if r.is_err() {
            put_back();
        }
        if r.is_err() && headers {
            // The headers may not be durable: the next sync writes them again.
            self.inner
                .header_stale
                .store(true, std::sync::atomic::Ordering::Release);
        }
        (r, covered)
    }

    /// An fsync of every backing file, then the check that each is still the
    /// file at its path. The error says whether the fsyncs may have failed
    /// (`true`: they failed, or a failed device stopped them); a failed look
    /// at the paths after good fsyncs is `false` (nothing the kernel held
    /// was dropped; the next sync looks again).
    fn fsync_all(&self) -> std::result::Result<(), (Error, bool)> {
        let joiner = Joiner::new(self.name_arc(), 0, Sink::Thread(std::thread::current()));
        for b in &self.inner.backings {
            b.state.check().map_err(|e| (e, true))?;
        }
        #[cfg(test)]
        if let Some(hook) = BEFORE_FSYNCS.take(Arc::as_ptr(&self.inner) as usize) {
            hook();
        }
        joiner.expect(self.inner.backings.len());
        // One device: the caller syncs it itself, as `sync_io` reads (no
        // hand-off to the device thread); several: the engines sync them in
        // parallel.
        let here = self.inner.backings.len() == 1;
        for b in &self.inner.backings {
            let op = DevOp {
                kind: DevOpKind::Fsync,
                backing: b.clone(),
                offset: 0,
                iov: Iovs::none(),
                len: 0,
                fixed: None,
                done: joiner.clone(),
            };
            if here && b.engine.blocking_in_caller() {
                let res = crate::storage::io::psync::execute(&op);
                op.finish(res);
            } else {
                b.engine.submit(vec![op]);
            }
        }
        joiner.wait_sync().map_err(|e| (e, true))?;
        self.check_backings().map_err(|e| (e, false))
    }

    /// Whether every backing file is still linked and still the file at its path.
    /// Holds the name's read lock, so a rename (which holds its write lock while
    /// it renames the backing files) is seen whole or not at all.
    ///
    /// The store's watch of its directories says which backing files may have
    /// left their paths since they were last found there: only those are
    /// looked up (all of them where the roots are not watched).
    fn check_backings(&self) -> Result<()> {
        use std::sync::atomic::Ordering;
        let name = self.inner.name.read().unwrap_or_else(|p| p.into_inner());
        let entry = std::ffi::OsString::from(crate::storage::store::backing_name(&name));
        let mut unchanged = Vec::new();
        let now = self.inner.store.watch.unchanged(
            self.inner
                .backings
                .iter()
                .map(|b| (b.device, entry.as_os_str(), b.seen.load(Ordering::Acquire))),
            &mut unchanged,
        );
        for (i, b) in self.inner.backings.iter().enumerate() {
            if unchanged.get(i) == Some(&true) {
                continue;
            }
            #[cfg(test)]
            self.inner.store.lookups.fetch_add(1, Ordering::Relaxed);
            let path = self.inner.store.backing_path(b.device, &name);
            let gone = |problem: &str| Error::BackingGone {
                file: name.to_string(),
                device: b.device,
                path: path.clone(),
                problem: problem.to_string(),
            };
            let at_path = match std::fs::metadata(&path) {
                Ok(m) => {
                    use std::os::unix::fs::MetadataExt;
                    if (m.dev(), m.ino()) != b.fs_id {
                        return Err(gone("was replaced: another file now has its path"));
                    }
                    true
                }
                Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENOTDIR)) => false,
                Err(e) => {
                    return Err(Error::os(format!("device {}: examine", b.device), path, e));
                }
            };
            if !at_path {
                // SAFETY: `stat` is plain data; zeroed is a valid value to overwrite.
                let mut st: libc::stat = unsafe { std::mem::zeroed() };
                // SAFETY: plain system call on an open descriptor and a valid out pointer.
                let linked = unsafe { libc::fstat(b.raw_fd(), &mut st) } != 0 || st.st_nlink > 0;
                return Err(gone(if linked {
                    "is no longer at its path (was it or its directory moved?)"
                } else {
                    "was removed (it is linked in no directory)"
                }));
            }
            if let Some(now) = now {
                // Found at its path after the watch's drain at `now`.
                b.seen.fetch_max(now, Ordering::AcqRel);
            }
        }
        Ok(())
    }

    fn sync_io(&self, kind: OpKind, offset: u64, ptr: *mut u8, len: usize) -> Result<()> {
        let joiner = Joiner::new(
            self.name_arc(),
            offset,
            Sink::Thread(std::thread::current()),
        );
        let mut batches = Vec::new();
        let n = self.prepare(kind, offset, ptr, len, None, &joiner, &mut batches)?;
        if n == 0 {
            return Ok(());
        }
        if n == 1 {
            // One device operation: on an engine over real files the caller
            // performs it itself and waits in the kernel.
            let op = batches.into_iter().flatten().next().expect("one operation");
            if op.backing.engine.blocking_in_caller() {
                let res = crate::storage::io::psync::execute(&op);
                op.finish(res);
            } else {
                let engine = op.backing.engine.clone();
                engine.submit(vec![op]);
            }
            return joiner.wait_sync();
        }
        for ops in batches {
            if let Some(first) = ops.first() {
                let engine = first.backing.engine.clone();
                engine.submit(ops);
            }
        }
        // The caller's buffer is borrowed until this returns, which is after the last
        // device operation finished.
        joiner.wait_sync()
    }

    /// Check a request and cut it into device operations appended to `batches`
    /// (indexed by device). Returns the number of operations; the joiner expects them.
    /// On error nothing was appended.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn prepare(
        &self,
        kind: OpKind,
        offset: u64,
        ptr: *mut u8,
        len: usize,
        buf: Option<&AlignedBuf>,
        joiner: &Arc<Joiner>,
        batches: &mut Vec<Vec<DevOp>>,
    ) -> Result<usize> {
        self.prepare_mem(kind, offset, Mem::One(ptr), len, buf, joiner, batches)
    }

    /// As [`File::prepare`], for memory in equal pieces that need not be
    /// contiguous (cache frames): byte `i` of the request is at
    /// `pieces[i / piece] + i % piece`. Each device operation carries one
    /// iovec per piece it covers (vectored I/O), and is cut only where the
    /// layout cuts the request or at 64 iovecs.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn prepare_mem(
        &self,
        kind: OpKind,
        offset: u64,
        mem: Mem<'_>,
        len: usize,
        buf: Option<&AlignedBuf>,
        joiner: &Arc<Joiner>,
        batches: &mut Vec<Vec<DevOp>>,
    ) -> Result<usize> {
        self.check_request(offset, mem, len)?;
        if len == 0 {
            return Ok(0);
        }
        let inner = &*self.inner;
        self.check_devices(offset, len)?;
        let devices = inner.backings.len();
        if batches.len() < devices {
            batches.resize_with(devices, Vec::new);
        }
        // Operations of this request start at these positions of each batch
        // (with more devices than this, no operation is merged).
        let mut start = [0usize; 64];
        let small = devices <= start.len();
        if small {
            for (d, b) in batches.iter().enumerate().take(devices) {
                start[d] = b.len();
            }
        }
        let dkind = match kind {
            OpKind::Read => DevOpKind::Read,
            OpKind::Write => DevOpKind::Write,
        };
        if dkind == DevOpKind::Write {
            self.note_tail(offset, mem, len);
        }
        let mut count = 0usize;
        inner.layout.split(offset, len, |s| {
            let backing = &inner.backings[s.device];
            if dkind == DevOpKind::Write && !backing.written.load(Ordering::Relaxed) {
                // Marked when prepared too: a completion handled only when
                // its queue is next polled may come after a sync began whose
                // fsync covered the write.
                backing.written.store(true, Ordering::Release);
            }
            let batch = &mut batches[s.device];
            if let Some(first) = batch.first() {
                // A queue may mix files of different stores: never mix their engines.
                if !Arc::ptr_eq(&first.backing.engine, &backing.engine) {
                    let engine = first.backing.engine.clone();
                    engine.submit(std::mem::take(batch));
                    if small {
                        start[s.device] = 0;
                    }
                }
            }
            let mut phys = HEADER_BYTES + s.dev_offset;
            for_each_segment(mem, s.buf_offset, s.len, |base, n| {
                let ours = small && batch.len() > start[s.device];
                if !(ours && extend_last(batch, backing, phys, base, n)) {
                    batch.push(DevOp {
                        kind: dkind,
                        backing: backing.clone(),
                        offset: phys,
                        iov: Iovs::One(libc::iovec {
                            iov_base: base.cast(),
                            iov_len: n,
                        }),
                        len: n,
                        fixed: buf.and_then(|b| b.fixed_index(s.device, &backing.engine)),
                        done: joiner.clone(),
                    });
                    count += 1;
                }
                phys += n as u64;
            });
        });
        joiner.expect(count);
        Ok(count)
    }

    /// Refuse a request whose offset, length or memory is not sector-aligned,
    /// whose pieces cannot hold it, or which reaches past the file's last
    /// sector.
    fn check_request(&self, offset: u64, mem: Mem<'_>, len: usize) -> Result<()> {
        let ptr = match mem {
            Mem::One(p) => p,
            Mem::Pieces(ps, piece) => {
                if piece == 0
                    || !(piece as u64).is_multiple_of(DIRECT_ALIGN)
                    || ps.len() * piece < len
                {
                    return Err(Error::InvalidArgument(format!(
                        "file {:?}: {} pieces of {piece} bytes cannot hold {len} bytes of whole sectors",
                        self.name(),
                        ps.len()
                    )));
                }
                if let Some(&bad) = ps
                    .iter()
                    .find(|&&p| !(p as u64).is_multiple_of(DIRECT_ALIGN))
                {
                    bad
                } else {
                    ps.first().copied().unwrap_or(std::ptr::null_mut())
                }
            }
        };
        let misaligned = |what, value: u64| Error::Misaligned {
            file: self.name(),
            what,
            value,
            align: DIRECT_ALIGN,
        };
        if len > MAX_REQUEST {
            return Err(Error::InvalidArgument(format!(
                "file {:?}: a request of {len} bytes is longer than the {MAX_REQUEST} bytes \
                 the kernel moves in one read or write: split it",
                self.name()
            )));
        }
        if !offset.is_multiple_of(DIRECT_ALIGN) {
            return Err(misaligned("offset", offset));
        }
        if !(len as u64).is_multiple_of(DIRECT_ALIGN) {
            return Err(misaligned("length", len as u64));
        }
        // (An empty slice's address is a dangling one: nothing is moved.)
        if len > 0 && !(ptr as u64).is_multiple_of(DIRECT_ALIGN) {
            return Err(misaligned("buffer address", ptr as u64));
        }
        let file_len = self.len();
        // The last sector may be covered whole (lengths are at most MAX_LEN, so
        // this cannot overflow).
        let limit = file_len.next_multiple_of(DIRECT_ALIGN);
        if offset.checked_add(len as u64).is_none_or(|end| end > limit) {
            return Err(Error::OutOfRange {
                file: self.name(),
                offset,
                len: len as u64,
                file_len,
            });
        }
        Ok(())
    }

    /// A write covering the last sector whole puts its bytes past the file's
    /// end on the device too: if any is not zero, the next growth must clear
    /// them (see `Backing::tail_clear`). Looked at before the write is
    /// queued.
    fn note_tail(&self, offset: u64, mem: Mem<'_>, len: usize) {
        let file_len = self.len();
        let end = offset + len as u64;
        if end <= file_len {
            return;
        }
        let from = file_len.saturating_sub(offset) as usize;
        let mut bytes = false;
        for_each_segment(mem, from, len - from, |base, n| {
            // SAFETY: the segment lies inside the request's memory, which the caller lends for the call.
            bytes |= unsafe { std::slice::from_raw_parts(base, n) }
                .iter()
                .any(|&x| x != 0);
        });
        if bytes {
            for b in &self.inner.backings {
                b.tail_clear.store(false, Ordering::Release);
            }
        }
    }

    /// Refuse, before anything is queued, a request that touches a device
    /// that failed earlier.
    fn check_devices(&self, offset: u64, len: usize) -> Result<()> {
        let inner = &*self.inner;
        let mut check = Ok(());
        inner.layout.split(offset, len, |s| {
            if check.is_ok() {
                check = inner.backings[s.device].state.check();
            }
        });
        check
    }
}

/// Call `f(address, bytes)` for each contiguous stretch of memory that holds
/// bytes `from..from + len` of a request: one for a single buffer, one per
/// piece (cache frame) covered otherwise.
#[inline]
fn for_each_segment(mem: Mem<'_>, from: usize, len: usize, mut f: impl FnMut(*mut u8, usize)) {
    match mem {
        // SAFETY: `from + len` is within the caller's buffer (a split covers exactly the request).
        Mem::One(p) => f(unsafe { p.add(from) }, len),
        Mem::Pieces(ps, piece) => {
            let (mut at, end) = (from, from + len);
            while at < end {
                let n = (piece - at % piece).min(end - at);
                // SAFETY: `at < len <= ps.len() * piece`, inside piece `at / piece`.
                f(unsafe { ps[at / piece].add(at % piece) }, n);
                at += n;
            }
        }
    }
}

/// Extend the last operation of `batch` with `n` bytes at `base` if it goes to
/// the same backing file and ends at `phys` (one more piece, or a longer last
/// piece when the memory is contiguous too); false if it cannot.
#[inline]
fn extend_last(
    batch: &mut [DevOp],
    backing: &Arc<Backing>,
    phys: u64,
    base: *mut u8,
    n: usize,
) -> bool {
    let Some(last) = batch.last_mut() else {
        return false;
    };
    if !Arc::ptr_eq(&last.backing, backing)
        || last.offset + last.len as u64 != phys
        || last.iov.len() >= MAX_IOV
    {
        return false;
    }
    let tail = last.iov.last_mut().expect("operations have a piece");
    // SAFETY: pointer arithmetic inside the caller's memory.
    if unsafe { tail.iov_base.cast::<u8>().add(tail.iov_len) } == base {
        tail.iov_len += n; // contiguous in memory too: one piece
    } else {
        last.iov.push(libc::iovec {
            iov_base: base.cast(),
            iov_len: n,
        });
    }
    last.len += n;
    true
}

/// Where the bytes of a request live in memory.
#[derive(Clone, Copy)]
pub(crate) enum Mem<'a> {
    /// One contiguous buffer.
    One(*mut u8),
    /// Equal pieces of this many bytes (cache frames), in request order.
    Pieces(&'a [*mut u8], usize),
}

impl<'a> Mem<'a> {
    /// The frames of a run of pages of `piece` bytes: one buffer, or pieces.
    pub(crate) fn frames(frames: &'a [*mut u8], piece: usize) -> Mem<'a> {
        match frames {
            [one] => Mem::One(*one),
            _ => Mem::Pieces(frames, piece),
        }
    }
}
