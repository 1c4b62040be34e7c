//! Errors of the storage layer.
//!
//! Every variant says what was asked and what was wrong, and names the file, the
//! offset and the device involved wherever there is one. Errors are `Clone` so that
//! the first failure of a device can be remembered and reported again by later calls.

use std::fmt;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;

/// Result alias of the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// An error of the storage layer.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Error {
    /// A store was opened on an empty list of device roots.
    NoDevices,
    /// A device root cannot be used (missing, not a directory, read-only, duplicate...).
    BadDevice {
        /// Index of the device in the list given to `Store::open`.
        device: usize,
        /// The root directory.
        root: PathBuf,
        /// What is wrong with it.
        problem: String,
        /// The error number of a write the check tried in it (`EROFS` on a
        /// read-only file system, `EACCES` where writes are not allowed), if
        /// that is what was wrong.
        errno: Option<i32>,
    },
    /// The header of a backing file is missing, corrupt or disagrees with its siblings.
    BadHeader {
        /// Index of the device that holds the bad header.
        device: usize,
        /// The backing file.
        path: PathBuf,
        /// What is wrong with it.
        problem: String,
    },
    /// A file name is not acceptable.
    InvalidName {
        /// The name given.
        name: String,
        /// Why it was refused.
        problem: &'static str,
    },
    /// `create` or `rename` would replace an existing file.
    FileExists(String),
    /// No file of that name exists.
    FileNotFound(String),
    /// An argument is out of its allowed range.
    InvalidArgument(String),
    /// Uncached I/O needs offset, length and buffer address aligned.
    Misaligned {
        /// The file.
        file: String,
        /// Which quantity is misaligned: "offset", "length" or "buffer address".
        what: &'static str,
        /// Its value.
        value: u64,
        /// The required alignment in bytes.
        align: u64,
    },
    /// A write to a file opened read-only.
    ReadOnly(String),
    /// The call would wait for something only the calling thread can end:
    /// a page guard it holds, or I/O its request queues started and only it
    /// finishes by polling (it would wait for itself for ever, directly or
    /// through another thread waiting for it).
    HeldByCaller(String),
    /// The calling thread holds as many page guards as a thread may.
    TooManyPins {
        /// Guards the thread holds.
        held: usize,
    },
    /// A page stayed busy (filled, written, or its set pinned by others) for
    /// longer than the cache's pin wait.
    Busy(String),
    /// A request reaches past the end of the file.
    OutOfRange {
        /// The file.
        file: String,
        /// Offset of the request.
        offset: u64,
        /// Length of the request.
        len: u64,
        /// Length of the file.
        file_len: u64,
    },
    /// A data read or write failed on a device.
    Io {
        /// The operation: "read", "write" or "sync".
        op: &'static str,
        /// The file.
        file: String,
        /// Logical offset of the failed request in the file.
        offset: u64,
        /// The device that failed.
        device: usize,
        /// The OS error number.
        errno: i32,
    },
    /// A device transferred fewer bytes than asked (and no error number).
    ShortTransfer {
        /// The operation: "read" or "write".
        op: &'static str,
        /// The file.
        file: String,
        /// Logical offset of the request.
        offset: u64,
        /// The device.
        device: usize,
        /// Bytes asked of the device.
        expected: usize,
        /// Bytes transferred.
        got: usize,
    },
    /// The device failed earlier; this call was refused without touching it.
    DeviceFailed {
        /// The device.
        device: usize,
        /// The first failure seen on it.
        first: Box<Error>,
    },
    /// A metadata operation on the backing files failed.
    Os {
        /// What was being done.
        what: String,
        /// The path involved.
        path: PathBuf,
        /// The OS error.
        source: Arc<io::Error>,
    },
    /// The engine could not be started.
    Engine(String),
    /// The store is shutting down.
    Closed,
    /// A thread of the store's own ended after an internal fault (a panic,
    /// reported when it happened); what it served is refused from then on.
    ThreadEnded(String),
    /// A task sent to run on a cached page panicked; the partition that ran it
    /// goes on serving.
    TaskPanicked {
        /// The file.
        file: String,
        /// The offset the task was sent for.
        offset: u64,
        /// The panic's message.
        message: String,
    },
    /// Every page of a cache set stayed pinned (or under I/O) for the whole
    /// bounded wait, so no frame could be found for a new page.
    AllPinned {
        /// The set.
        set: usize,
        /// How long the request backed off before giving up, in milliseconds.
        waited_ms: u64,
    },
    /// A cache resize could not finish: pages that had to move stayed pinned, or
    /// dirty pages left no room (write them back and retry).
    ResizeBusy(String),
    /// A cached file was deleted, or replaced by a new file of its name,
    /// through its store: handles made before that no longer read or write it.
    FileGone(String),
    /// An fsync of a cached file failed, and some pages written before it had
    /// already left the cache, so they cannot be written again: the file's
    /// syncs keep failing until a handle accepts the loss (an open for
    /// writing after a sync reported it, or `CachedFile::accept_loss`).
    SyncLost {
        /// The file.
        file: String,
        /// The failed fsync's error.
        first: Box<Error>,
    },
    /// A cache (or a cache's growth) needs more memory than the machine, or the
    /// memory cgroup the process runs in, can give.
    NotEnoughMemory {
        /// What needs the memory, e.g. "cache of 100 GiB (100.4 GiB with its
        /// set metadata)".
        what: String,
        /// Bytes it needs.
        needed: u64,
        /// Bytes the machine or the cgroup can give now.
        available: u64,
        /// Where `available` comes from (MemAvailable, SwapFree, cgroup limit
        /// and usage).
        sources: String,
    },
    /// A device root is in use by another open store (in this or another process).
    StoreLocked {
        /// Index of the device in the list given to `Store::open`.
        device: usize,
        /// The root directory.
        root: PathBuf,
        /// The process that holds it, when its lock file says.
        holder: Option<u32>,
    },
    /// A backing file of an open file is no longer the file at its path: it was
    /// removed, or its directory was, or another file took its name. Data written
    /// through the handle is not where the store will look for it.
    BackingGone {
        /// The file.
        file: String,
        /// The device.
        device: usize,
        /// The path the backing file should be at.
        path: PathBuf,
        /// What happened to it.
        problem: String,
    },
    /// A metadata operation interrupted by a crash (or an earlier failure) could not
    /// be finished; its intent record is kept and replayed again later.
    Recovery {
        /// The intent record.
        path: PathBuf,
        /// The interrupted operation, e.g. `rename of "a" to "b"`.
        op: String,
        /// Why it could not be finished.
        problem: String,
        /// The OS error behind `problem`, if there is one (out of
        /// descriptors, say: passed on as the call's `errno`).
        errno: Option<i32>,
    },
}

impl Error {
    /// An operating-system error of a call that involves no path (a thread
    /// that could not be started, memory that could not be mapped): its
    /// errno passes through ([`Error::posix_errno`]).
    pub(crate) fn os_call(what: impl Into<String>, source: io::Error) -> Self {
        Error::os(what, PathBuf::new(), source)
    }

    pub(crate) fn os(what: impl Into<String>, path: impl Into<PathBuf>, source: io::Error) -> Self {
        Error::Os {
            what: what.into(),
            path: path.into(),
            source: Arc::new(source),
        }
    }

    /// Whether the failure can pass without anything being wrong with the
    /// device (out of space, over a quota or the file-size limit, interrupted,
    /// told to retry, or a write cut short): the operation may succeed when
    /// tried again. Other I/O errors fail their device for good.
    pub fn can_pass(&self) -> bool {
        match self {
            Error::Io { errno, .. } => error_can_pass(*errno),
            Error::ShortTransfer { op, .. } => *op == "write",
            _ => false,
        }
    }

    /// The `errno` value that best names this error for a POSIX caller (the C
    /// interface and the preload library return it negated or set it): the
    /// OS error number when there is one, else the nearest standard one, e.g.
    /// `ENOENT` for [`Error::FileNotFound`], `EEXIST` for
    /// [`Error::FileExists`], `EBUSY` for [`Error::StoreLocked`], `ESTALE`
    /// for [`Error::FileGone`], `ENOMEM` for [`Error::NotEnoughMemory`],
    /// `ENOSPC` for a write cut short ([`Error::ShortTransfer`]).
    pub fn posix_errno(&self) -> i32 {
        if let Some(e) = self.errno() {
            return e;
        }
        match self {
            Error::NoDevices | Error::InvalidArgument(_) | Error::Misaligned { .. } => libc::EINVAL,
            Error::InvalidName { name, .. } if name.len() > 200 => libc::ENAMETOOLONG,
            Error::InvalidName { .. } => libc::EINVAL,
            Error::BadDevice { .. } => libc::ENOTDIR,
            Error::BadHeader { .. } => libc::EUCLEAN,
            Error::FileExists(_) => libc::EEXIST,
            Error::FileNotFound(_) => libc::ENOENT,
            Error::ReadOnly(_) => libc::EBADF,
            Error::HeldByCaller(_) => libc::EDEADLK,
            Error::TooManyPins { .. } => libc::EMFILE,
            Error::Busy(_) | Error::AllPinned { .. } | Error::ResizeBusy(_) => libc::EBUSY,
            Error::OutOfRange { .. } => libc::EFBIG,
            // A write to a regular file is cut short by the file system
            // running out of space part way (as `write(2)` answers a count,
            // and `ENOSPC` to the next call).
            Error::ShortTransfer { op: "write", .. } => libc::ENOSPC,
            Error::StoreLocked { .. } => libc::EBUSY,
            Error::FileGone(_) | Error::BackingGone { .. } => libc::ESTALE,
            Error::Closed => libc::ESHUTDOWN,
            Error::NotEnoughMemory { .. } => libc::ENOMEM,
            Error::Engine(_) => libc::ENOSYS,
            _ => libc::EIO,
        }
    }

    /// The OS error number behind this error, if there is one.
    pub fn errno(&self) -> Option<i32> {
        match self {
            Error::Io { errno, .. } => Some(*errno),
            Error::BadDevice { errno, .. } => *errno,
            Error::Os { source, .. } => source.raw_os_error(),
            Error::DeviceFailed { first, .. } => first.errno(),
            Error::SyncLost { first, .. } => first.errno(),
            Error::Recovery { errno, .. } => *errno,
            _ => None,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NoDevices => write!(f, "no devices: a store needs at least one device root"),
            Error::BadDevice {
                device,
                root,
                problem,
                ..
            } => write!(f, "device {device} ({}): {problem}", root.display()),
            Error::BadHeader {
                device,
                path,
                problem,
            } => write!(
                f,
                "device {device}: bad header in {}: {problem}",
                path.display()
            ),
            Error::InvalidName { name, problem } => {
                write!(f, "invalid file name {name:?}: {problem}")
            }
            Error::FileExists(n) => write!(f, "file {n:?} already exists"),
            Error::FileNotFound(n) => write!(f, "file {n:?} not found"),
            Error::InvalidArgument(s) => write!(f, "invalid argument: {s}"),
            Error::Busy(s) => write!(f, "busy: {s}"),
            Error::ReadOnly(n) => write!(f, "file {n:?} was opened read-only: writes are refused"),
            Error::Misaligned {
                file,
                what,
                value,
                align,
            } => write!(
                f,
                "file {file:?}: {what} {value} is not a multiple of {align} (uncached I/O needs {align}-byte alignment)"
            ),
            Error::OutOfRange {
                file,
                offset,
                len,
                file_len,
            } => write!(
                f,
                "file {file:?}: request of {len} bytes at offset {offset} reaches past the end of the file ({file_len} bytes)"
            ),
            Error::Io {
                op,
                file,
                offset,
                device,
                errno,
            } => write!(
                f,
                "file {file:?}: {op} at offset {offset} failed on device {device}: {}",
                io::Error::from_raw_os_error(*errno)
            ),
            Error::ShortTransfer {
                op,
                file,
                offset,
                device,
                expected,
                got,
            } => write!(
                f,
                "file {file:?}: short {op} at offset {offset} on device {device}: {got} of {expected} bytes"
            ),
            Error::DeviceFailed { device, first } => {
                write!(f, "device {device} failed earlier and is refused: {first}")
            }
            Error::Os { what, path, source } if path.as_os_str().is_empty() => {
                write!(f, "{what}: {source}")
            }
            Error::Os { what, path, source } => {
                write!(f, "{what} {}: {source}", path.display())
            }
            Error::Engine(s) => write!(f, "I/O engine: {s}"),
            Error::ThreadEnded(s) => write!(f, "{s} ended after an internal fault"),
            Error::Closed => write!(f, "the store is closed"),
            Error::TaskPanicked {
                file,
                offset,
                message,
            } => write!(
                f,
                "a task on file {file:?} at offset {offset} panicked in the cache: {message}"
            ),
            Error::HeldByCaller(s) => write!(
                f,
                "{s}: the call would wait for something only this thread can end (a page \
                 guard it holds, or I/O its request queues started)"
            ),
            Error::TooManyPins { held } => write!(
                f,
                "this thread already holds {held} page guards, the most a thread may: drop some first"
            ),
            Error::AllPinned { set, waited_ms } => write!(
                f,
                "every page of cache set {set} stayed pinned or under I/O for {waited_ms} ms; release page guards or enlarge the cache"
            ),
            Error::ResizeBusy(s) => write!(f, "cache resize could not finish: {s}"),
            Error::FileGone(n) => write!(
                f,
                "file {n:?} was deleted or replaced through its store: this handle no longer reads or writes it"
            ),
            Error::SyncLost { file, first } => write!(
                f,
                "file {file:?}: an earlier fsync failed ({first}), so the kernel may have dropped data written before it that cannot be written again from here; its syncs fail until the loss is accepted (the file opened again for writing after this report, or the loss accepted through a handle)"
            ),
            Error::NotEnoughMemory {
                what,
                available,
                sources,
                ..
            } => write!(
                f,
                "{what} is more than the {} this machine can give ({sources})",
                crate::util::human_size(*available)
            ),
            Error::StoreLocked {
                device,
                root,
                holder,
            } => {
                write!(
                    f,
                    "device {device} ({}) is in use by another open store",
                    root.display()
                )?;
                match holder {
                    Some(pid) if *pid == std::process::id() => {
                        write!(f, " in this process (pid {pid})")
                    }
                    Some(pid) => write!(f, " (process {pid})"),
                    None => Ok(()),
                }
            }
            Error::BackingGone {
                file,
                device,
                path,
                problem,
            } => write!(
                f,
                "file {file:?}: its backing file on device {device} ({}) {problem}; data written through this handle is not in the store",
                path.display()
            ),
            Error::Recovery {
                path, op, problem, ..
            } => write!(
                f,
                "cannot finish the interrupted {op} recorded in {}: {problem} (the record is kept and replayed again)",
                path.display()
            ),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Os { source, .. } => Some(&**source),
            Error::DeviceFailed { first, .. } => Some(&**first),
            Error::SyncLost { first, .. } => Some(&**first),
            _ => None,
        }
    }
}

/// Whether an operation that failed with `errno` may succeed when tried again
/// later without anything being wrong with the device: out of space (ENOSPC),
/// over a quota (EDQUOT), past the process's file-size limit (EFBIG),
/// interrupted (EINTR), told to retry (EAGAIN), the kernel out of memory for
/// it (ENOMEM) or the operation cancelled (ECANCELED: io_uring could not
/// start a thread to run it). Every other error (EIO above all) fails the
/// device for good.
pub(crate) fn error_can_pass(errno: i32) -> bool {
    matches!(
        errno,
        libc::ENOSPC
            | libc::EDQUOT
            | libc::EFBIG
            | libc::EINTR
            | libc::EAGAIN
            | libc::ENOMEM
            | libc::ECANCELED
    )
}
