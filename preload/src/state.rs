//! The process's store, the files open through it, and the table from
//! placeholder descriptors to them.

use std::collections::HashMap;
use std::ffi::{CString, c_int};
use std::path::PathBuf;
use std::sync::atomic::{
    AtomicBool, AtomicI32, AtomicPtr, AtomicU8, AtomicU64, AtomicUsize, Ordering,
};
use std::sync::{Arc, Mutex, OnceLock, RwLock, TryLockError, Weak};

use setcache::{CacheOptions, CachedFile, CachedStore, Error, LayoutKind, Store, StoreOptions};

/// What the environment asks for, read once.
pub(crate) struct Config {
    /// `SETCACHE_DIR`, normalised (absolute, no `.`, `..` or repeated `/`).
    pub(crate) dir: Vec<u8>,
    /// The same directory resolved through symbolic links, when it differs.
    pub(crate) canonical: Option<Vec<u8>>,
    /// `dir` as a C string, for the placeholders.
    pub(crate) dir_c: CString,
    /// Device number and inode of the directory.
    pub(crate) dev_ino: (u64, u64),
}

/// The store and what is open in it.
pub(crate) struct State {
    pub(crate) cs: CachedStore,
    /// Open files by name: every descriptor of a name shares one node.
    pub(crate) nodes: Mutex<HashMap<String, Weak<Node>>>,
    /// When the store was opened (seconds since the epoch): the times `stat` reports.
    pub(crate) opened: i64,
    /// The owner `stat` reports: this process's effective ids.
    pub(crate) owner: (u32, u32),
    /// Files whose last descriptor closed lately, kept open: a program that
    /// opens the same few files again and again (a database's journal) finds
    /// them without opening their backing files again.
    pub(crate) kept: Mutex<std::collections::VecDeque<Arc<Node>>>,
    /// How many `kept` holds at most ([`kept_most`], at the store's open).
    kept_most: usize,
}

/// Files kept open after their last close, at most.
const KEPT: usize = 32;

/// Files kept open after their last close for a store of `devices` devices:
/// [`KEPT`], or fewer where each one's descriptors (one per device) would
/// take more than an eighth of what the process may open (16 files of 32
/// devices are half of 1,024; the cache keeps idle files of its own too).
fn kept_most(devices: usize) -> usize {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the limit into `lim`, which outlives the call.
    let nofile = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 {
        lim.rlim_cur.min(1 << 20) as usize
    } else {
        1024
    };
    (nofile / 8 / devices.max(1)).clamp(1, KEPT)
}

/// Out of descriptors: let go of every file kept after its last close (its
/// descriptors go once the cache retires it), so that an open can be tried
/// again.
fn shed_kept(s: &State) {
    let all: Vec<Arc<Node>> = s
        .kept
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .drain(..)
        .collect();
    // Outside the list's lock, as in `keep`.
    drop(all);
}

/// Whether `e` says the process (or the system) is out of descriptors.
fn out_of_descriptors(e: &Error) -> bool {
    matches!(e.errno(), Some(libc::EMFILE | libc::ENFILE))
}

/// Keep `n` open for a while after its last descriptor closed, if it is
/// still the file its name opens: a file deleted or replaced while open
/// goes with its last holder, as the kernel frees a file's space at its
/// last close (kept, it held its backing files open, and their space).
pub(crate) fn keep(s: &State, n: Arc<Node>) {
    let out = {
        // Looked at under the list's lock: `forget` marks the node before it
        // takes that lock to take the node out, so it comes wholly before
        // this look or after the push.
        let mut k = s.kept.lock().unwrap_or_else(|p| p.into_inner());
        if n.forgotten.load(Ordering::Acquire) {
            Some(n)
        } else {
            k.retain(|x| !Arc::ptr_eq(x, &n));
            k.push_back(n);
            if k.len() > s.kept_most {
                k.pop_front()
            } else {
                None
            }
        }
    };
    // Dropped outside the lock: the last reference syncs the file, and other
    // threads' closes and `stat`s wait on this lock.
    drop(out);
}

/// Set once the exit handler has synced the store: exit handlers that run
/// after it (registered before the store opened) and the C library's last
/// flush of its streams may still write, and each such write syncs itself.
static EXITED: AtomicBool = AtomicBool::new(false);

/// Whether the exit handler has run (see [`EXITED`]).
pub(crate) fn exited() -> bool {
    EXITED.load(Ordering::Acquire)
}

/// One file of the store, open through one or more descriptors.
pub(crate) struct Node {
    pub(crate) file: CachedFile,
    /// Its name now (a rename changes it).
    pub(crate) name: Mutex<String>,
    /// Held while the file's length changes, so that two writers past the end
    /// grow it once each, in order.
    pub(crate) grow: Mutex<()>,
    /// Written (or its length changed) through this node since the last sync
    /// its last close made: the next last close (or the drop) syncs.
    pub(crate) written: AtomicBool,
    /// Deleted, or replaced by a rename, while open: not kept after its
    /// last close.
    pub(crate) forgotten: AtomicBool,
    /// Its open file descriptions alive: the drop of the last one is the
    /// file's last close (a thread's lookup by name holds the node a while,
    /// but no description).
    descs: AtomicUsize,
    /// The `flock` locks of its descriptions.
    pub(crate) flocks: crate::lock::Flocks,
    /// The length reads, `fstat` and `lseek` see. A write past the end makes
    /// the file longer first (its pages must lie inside it) and moves this
    /// only once its bytes are in, as a local file system moves a file's
    /// size: a reader never sees zeros where a write in flight puts bytes,
    /// and a write that fails makes the file no longer. Changed under `grow`,
    /// after the file's length; at most the file's length, but for a shrink's
    /// moment, where a read of the cut part reads nothing.
    size: AtomicU64,
    /// The write-lifetime hint `fcntl(F_SET_RW_HINT)` gave (0: none), which
    /// the kernel keeps with the file and `F_GET_RW_HINT` reads back.
    pub(crate) rw_hint: AtomicU64,
    /// Its inode number (`calls::ino_of`), taken when it was opened: a
    /// rename keeps it, and so does a delete or a replacement of its name.
    ino: u64,
    /// Where the devices' space writes past the end reserved reaches (whole
    /// pages; under `grow`): a write that grows the file no further than
    /// this takes none. A cut gives the space past the new end back, and
    /// brings this down with the length (`publish_len`).
    pub(crate) reserved: AtomicU64,
    /// Bytes below this (whole pages; under `grow`) have their devices'
    /// space: an in-file write that ends below it takes no look for holes. A
    /// cut brings it down with the length (`publish_len`).
    pub(crate) whole: AtomicU64,
    /// The part of the file from `whole` on was seen to have a hole (under
    /// `grow`): an in-file write past `whole` looks at its own pages only,
    /// not again at the rest of the file. A change of length clears it.
    pub(crate) holey: AtomicBool,
    /// The program reserved space past the end itself (`fallocate` with
    /// `FALLOC_FL_KEEP_SIZE`): the last close leaves what lies past the end,
    /// which a local file system keeps too.
    pub(crate) kept_past: AtomicBool,
}

impl Node {
    /// Its inode number.
    pub(crate) fn ino(&self) -> u64 {
        self.ino
    }

    /// The file's length as this process's readers see it (see `size`).
    pub(crate) fn len(&self) -> u64 {
        self.size.load(Ordering::Acquire)
    }

    /// Make the length readers see the file's own, after a change made
    /// under `grow`.
    pub(crate) fn publish_len(&self) {
        let len = self.file.len();
        self.reserved.fetch_min(len, Ordering::AcqRel);
        self.whole.fetch_min(len, Ordering::AcqRel);
        self.holey.store(false, Ordering::Release);
        self.size.store(len, Ordering::Release);
    }

    /// After a write's bytes are in: readers see the file `end` bytes long,
    /// if it was shorter (under `grow`).
    pub(crate) fn publish_end(&self, end: u64) {
        self.size.fetch_max(end, Ordering::Release);
    }

    /// Note a change; read first, so that only the first write of many writes
    /// the shared flag.
    pub(crate) fn note_written(&self) {
        if !self.written.load(Ordering::Relaxed) {
            self.written.store(true, Ordering::Relaxed);
        }
    }
}

impl Drop for Node {
    /// The last descriptor is gone (closed, or replaced by `dup2`): the
    /// file's data goes to the devices now, so that it outlives a process
    /// that ends with `_exit`, as it would on a local file system.
    fn drop(&mut self) {
        if !self.written.load(Ordering::Relaxed) || forked() {
            return;
        }
        // No program hears of it (stderr only): a loss it meets stays for
        // the next sync that reaches one.
        if let Err(e) = self.file.sync_unheard()
            && !matches!(e, Error::FileGone(_))
        {
            crate::fail("writing a closed file's data", &e);
        }
    }
}

thread_local! {
    /// What the drop of a file's last description on this thread gave: its
    /// sync's errno, for the `close` that dropped it to return.
    static RELEASED: std::cell::Cell<Option<Result<(), i32>>> = const { std::cell::Cell::new(None) };
}

/// Drop `d`, a description just taken from the table by a close; the errno
/// of the sync its drop made, if it was its file's last description.
pub(crate) fn drop_closed(d: Arc<Desc>) -> Result<(), i32> {
    let _ = RELEASED.try_with(|c| c.set(None));
    drop(d);
    RELEASED
        .try_with(|c| c.take())
        .ok()
        .flatten()
        .unwrap_or(Ok(()))
}

/// An open file description: what `open` made and `dup` shares.
pub(crate) struct Desc {
    pub(crate) node: Arc<Node>,
    pub(crate) readable: bool,
    pub(crate) writable: bool,
    /// The status flags `F_GETFL` reports and `F_SETFL` changes (O_APPEND,
    /// O_NONBLOCK, O_DIRECT, ...), with the access mode.
    pub(crate) status: AtomicI32,
    /// The file position of `read`, `write` and `lseek`.
    pub(crate) pos: Mutex<u64>,
    /// The owner `F_SETOWN` or `F_SETOWN_EX` set (its `F_OWNER_*` type and
    /// id; none is 0), and the signal `F_SETSIG` set: kept and read back,
    /// used for nothing (a regular file has no I/O events to signal).
    pub(crate) owner: Mutex<(c_int, libc::pid_t)>,
    pub(crate) signal: AtomicI32,
}

impl Drop for Desc {
    /// The file's last description gone (by its close, or by the thread that
    /// still used it when the close came): its data goes to the devices now
    /// (close-to-open: another process that opens it next reads what was
    /// written, even if this one ends with `_exit`), and the file is kept
    /// open a while for the next open.
    fn drop(&mut self) {
        // The file's sync below makes blocking calls (see [`StateRef`]).
        let _off = setcache::cancel::off();
        // Its `flock` lock goes with it.
        self.node.flocks.release(crate::lock::holder(self));
        if self.node.descs.fetch_sub(1, Ordering::AcqRel) != 1 || forked() {
            return;
        }
        let node = &self.node;
        let mut r = Ok(());
        // Unheard: a `close` may pass the error on, but a descriptor closed
        // as a side effect (`dup2` over it, `close_range`), or a description
        // whose last holder was another thread, passes it to no one; a loss
        // stays for the next `fsync` (or synchronous write) to report.
        if node.written.swap(false, Ordering::Relaxed)
            && let Err(e) = node.file.sync_unheard()
            && !matches!(e, Error::FileGone(_))
        {
            node.written.store(true, Ordering::Relaxed);
            r = Err(crate::fail("close (writing the file's data)", &e));
        }
        // The space writes reserved past the end goes back (under `grow`:
        // no write past the end takes more meanwhile; a writer holding it
        // now keeps it). Best effort: what stays is given back by the next
        // cut.
        if r.is_ok()
            && node.reserved.load(Ordering::Acquire) > node.file.len()
            && !node.kept_past.load(Ordering::Acquire)
            && let Ok(_g) = node.grow.try_lock()
            && node.file.trim_reservations().is_ok()
        {
            node.reserved.fetch_min(node.file.len(), Ordering::AcqRel);
        }
        if r.is_ok()
            && let Ok(s) = state()
        {
            keep(&s, Arc::clone(node));
        }
        let _ = RELEASED.try_with(|c| c.set(Some(r)));
    }
}

impl Desc {
    /// A description of `node`, counted among its descriptions.
    pub(crate) fn new(node: Arc<Node>, readable: bool, writable: bool, status: c_int) -> Desc {
        node.descs.fetch_add(1, Ordering::AcqRel);
        Desc {
            node,
            readable,
            writable,
            status: AtomicI32::new(status),
            pos: Mutex::new(0),
            // None yet, of the kind `F_GETOWN_EX` reports then (a thread's).
            owner: Mutex::new((0, 0)),
            signal: AtomicI32::new(0),
        }
    }

    /// Opened with `O_PATH`: no reads, writes, seeks or syncs.
    pub(crate) fn path_only(&self) -> bool {
        self.status.load(Ordering::Relaxed) & libc::O_PATH != 0
    }

    pub(crate) fn append(&self) -> bool {
        self.status.load(Ordering::Relaxed) & libc::O_APPEND != 0
    }

    pub(crate) fn direct(&self) -> bool {
        self.status.load(Ordering::Relaxed) & libc::O_DIRECT != 0
    }
}

thread_local! {
    /// This thread is opening the store or reading the configuration: every
    /// call it makes meanwhile goes to the kernel.
    static INSIDE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether this thread is inside the library's own set-up.
pub(crate) fn in_setup() -> bool {
    INSIDE.with(|c| c.get())
}

struct SetupGuard;

impl SetupGuard {
    fn enter() -> SetupGuard {
        INSIDE.with(|c| c.set(true));
        SetupGuard
    }
}

impl Drop for SetupGuard {
    fn drop(&mut self) {
        INSIDE.with(|c| c.set(false));
    }
}

static CONFIG: OnceLock<Option<Config>> = OnceLock::new();

/// The configuration, or `None` when `SETCACHE_DIR` is unset (then the
/// library passes everything through).
pub(crate) fn config() -> Option<&'static Config> {
    if let Some(c) = CONFIG.get() {
        return c.as_ref();
    }
    if in_setup() {
        return None;
    }
    let _g = SetupGuard::enter();
    CONFIG.get_or_init(read_config).as_ref()
}

fn read_config() -> Option<Config> {
    let raw = std::env::var_os("SETCACHE_DIR")?;
    let raw = raw.as_encoded_bytes();
    if raw.is_empty() {
        return None;
    }
    let mut base = Vec::new();
    if raw[0] != b'/' {
        base = std::env::current_dir()
            .map(|p| p.into_os_string().into_encoded_bytes())
            .unwrap_or_default();
    }
    let dir = crate::path::normalise(&base, raw);
    let Ok(dir_c) = CString::new(dir.clone()) else {
        crate::fatal("SETCACHE_DIR contains a NUL byte");
    };
    let canonical =
        std::fs::canonicalize(<std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(&dir))
            .ok()
            .map(|p| p.into_os_string().into_encoded_bytes())
            .filter(|c| *c != dir);
    // SAFETY: a zeroed stat is a valid out-parameter.
    let mut st: libc::stat64 = unsafe { std::mem::zeroed() };
    // SAFETY: `dir_c` is a C string and `st` a stat buffer.
    let rc = unsafe { crate::real::stat64()(dir_c.as_ptr(), &mut st) };
    if rc != 0 || st.st_mode & libc::S_IFMT != libc::S_IFDIR {
        // A relative path is taken from each process's own working
        // directory: a program started elsewhere finds none there.
        let relative = if raw[0] == b'/' {
            String::new()
        } else {
            format!(
                " (SETCACHE_DIR={:?} is relative: each process takes it from its own working directory; give an absolute path)",
                String::from_utf8_lossy(raw)
            )
        };
        crate::fatal(&format!(
            "SETCACHE_DIR {} is not a directory: create it first (it stays empty: its files live in the store){relative}",
            String::from_utf8_lossy(&dir)
        ));
    }
    Some(Config {
        dir,
        canonical,
        dir_c,
        dev_ino: (st.st_dev, st.st_ino),
    })
}

/// The store, opened on first use; `Err` (an errno and why) when it cannot
/// be. A store another process holds is not kept as an answer (see
/// [`Refusal`]).
static STATE: OnceLock<Result<State, (i32, String)>> = OnceLock::new();

/// Held while a thread tries to open the store, so that one tries at a time.
static OPENING: Mutex<()> = Mutex::new(());

/// Why the store could not be opened.
enum Refusal {
    /// For good (the environment's settings, the devices): every later call
    /// gets the same answer.
    Final(i32, String),
    /// Another process holds the store now: tried again at the next call,
    /// so that a program that outlives the holder can go on.
    Busy(i32, String),
}

impl From<(i32, String)> for Refusal {
    fn from((errno, why): (i32, String)) -> Refusal {
        Refusal::Final(errno, why)
    }
}

/// Set in a child process after `fork`: the store belongs to the parent.
static FORKED: AtomicBool = AtomicBool::new(false);

/// A page the kernel clears in a child (`MADV_WIPEONFORK`), holding 1 in
/// the process that opened the store: a child made by the raw system call,
/// which runs no `atfork` handler (nor passes through `_Fork`), finds it
/// cleared. Null where the kernel cannot (before Linux 4.14): there such a
/// child is not told apart.
static WIPED_IN_CHILD: AtomicPtr<AtomicU8> = AtomicPtr::new(std::ptr::null_mut());

pub(crate) fn forked() -> bool {
    if FORKED.load(Ordering::Relaxed) {
        return true;
    }
    // Acquire: the page's 1 is seen with its address (a parent must never
    // read the page unset).
    let p = WIPED_IN_CHILD.load(Ordering::Acquire);
    // SAFETY: the page is mapped for the life of the process.
    if !p.is_null() && unsafe { &*p }.load(Ordering::Relaxed) == 0 {
        mark_forked();
        return true;
    }
    false
}

/// Lock `m`; in a child made by `fork`, where a thread the child does not
/// have may have held it at the fork, without waiting (`None` then).
pub(crate) fn lock_unless_held_at_fork<T>(m: &Mutex<T>) -> Option<std::sync::MutexGuard<'_, T>> {
    if !forked() {
        return Some(m.lock().unwrap_or_else(|p| p.into_inner()));
    }
    match m.try_lock() {
        Ok(g) => Some(g),
        Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
        Err(TryLockError::WouldBlock) => None,
    }
}

/// Whether this process opened the store (and is not a child made by
/// `fork`).
pub(crate) fn store_opened() -> bool {
    !forked() && matches!(STATE.get(), Some(Ok(_)))
}

/// Map the page of [`WIPED_IN_CHILD`] and set it.
fn watch_for_a_fork() {
    // SAFETY: a fresh anonymous private mapping of one page.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return;
    }
    // SAFETY: advice on the page just mapped.
    if unsafe { libc::madvise(p, 4096, libc::MADV_WIPEONFORK) } != 0 {
        // SAFETY: unmaps the page just mapped, used by nothing.
        unsafe { libc::munmap(p, 4096) };
        return;
    }
    let flag = p.cast::<AtomicU8>();
    // SAFETY: the page is mapped, writable, and aligned for a byte.
    unsafe { &*flag }.store(1, Ordering::Relaxed);
    WIPED_IN_CHILD.store(flag, Ordering::Release);
}

/// The store, with cancellation held off on the calling thread while this
/// lives: the crate's blocking calls are cancellation points of the C
/// library, and a cancel acted on inside one would abort the process (see
/// `setcache::cancel`). A stand-in for a cancellation point acts on a
/// pending cancel at its end ([`cancel_point`]).
pub(crate) struct StateRef {
    s: &'static State,
    _off: setcache::cancel::Off,
}

impl std::ops::Deref for StateRef {
    type Target = State;
    fn deref(&self) -> &State {
        self.s
    }
}

/// A descriptor's open file description, with cancellation held off on the
/// calling thread while this lives (as [`StateRef`]).
pub(crate) struct Held {
    d: Arc<Desc>,
    _off: setcache::cancel::Off,
}

impl Held {
    /// Another handle of the description (cancellation stays off while
    /// `self` lives, not with the copy).
    pub(crate) fn arc(&self) -> Arc<Desc> {
        self.d.clone()
    }
}

impl std::ops::Deref for Held {
    type Target = Arc<Desc>;
    fn deref(&self) -> &Arc<Desc> {
        &self.d
    }
}

/// The end of a stand-in for a function that is a cancellation point, once
/// nothing of the call is left to drop: a cancel sent while the store held
/// cancellation off is acted on here, as the C library's function would
/// have (the stand-in is of the `"C-unwind"` ABI, so the unwind passes it).
pub(crate) fn cancel_point() {
    setcache::cancel::point();
}

/// The store, opened from the environment at the first call that needs it.
pub(crate) fn state() -> Result<StateRef, i32> {
    let _off = setcache::cancel::off();
    state_raw().map(|s| StateRef { s, _off })
}

fn state_raw() -> Result<&'static State, i32> {
    if forked() {
        crate::warn_once(
            "fork",
            "the store belongs to the parent process: a child made by fork cannot use it (run the program's workers as threads: fio's --thread, for one)",
        );
        return Err(libc::EBADF);
    }
    let r = match STATE.get() {
        Some(r) => r,
        None => {
            let r = {
                let _g = SetupGuard::enter();
                let _one = OPENING.lock().unwrap_or_else(|p| p.into_inner());
                match STATE.get() {
                    Some(r) => r,
                    None => match open_state() {
                        Ok(s) => STATE.get_or_init(|| Ok(s)),
                        Err(Refusal::Final(errno, why)) => STATE.get_or_init(|| Err((errno, why))),
                        Err(Refusal::Busy(errno, why)) => {
                            // Not kept: another process holds the store
                            // now, and this one's next call tries again.
                            crate::warn_once(
                                "busy",
                                &format!("{why} (tried again at the next call)"),
                            );
                            return Err(errno);
                        }
                    },
                }
            };
            // The main thread may have ended before the store was opened:
            // its threads must not keep the process alive either.
            if r.is_ok()
                && let Err(e) = setcache::process::store_opened()
            {
                crate::say(&format!(
                    "no thread to end the process after the main thread's pthread_exit: {e}"
                ));
            }
            r
        }
    };
    match r {
        Ok(s) => Ok(s),
        Err((errno, why)) => {
            crate::warn_once("open", why);
            Err(*errno)
        }
    }
}

/// The longest a store file may be (`CachedStore::max_file_len`): offsets
/// and lengths past it are the kernel's past a file system's largest file
/// (`EFBIG`, or `EINVAL` from `lseek`). `i64::MAX` before the store is open.
pub(crate) fn largest() -> u64 {
    match STATE.get() {
        Some(Ok(s)) => s.cs.max_file_len(),
        _ => i64::MAX as u64,
    }
}

/// Bytes from a size like `512M`, `4G`, `65536`.
pub(crate) fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let (num, mult) = match s.char_indices().last()? {
        (i, 'k' | 'K') => (&s[..i], 1u64 << 10),
        (i, 'm' | 'M') => (&s[..i], 1 << 20),
        (i, 'g' | 'G') => (&s[..i], 1 << 30),
        (i, 't' | 'T') => (&s[..i], 1 << 40),
        _ => (s, 1),
    };
    num.trim().parse::<u64>().ok()?.checked_mul(mult)
}

fn env_size(name: &str, default: u64) -> Result<u64, (i32, String)> {
    match std::env::var(name) {
        Err(_) => Ok(default),
        Ok(v) => match parse_size(&v) {
            Some(0) => Err((
                libc::EINVAL,
                format!("{name}={v:?}: the size must be above 0"),
            )),
            Some(n) => Ok(n),
            None => Err((
                libc::EINVAL,
                format!("{name}={v:?} is not a size (bytes, or a number with K, M, G or T)"),
            )),
        },
    }
}

fn open_state() -> Result<State, Refusal> {
    let cfg = config().ok_or((libc::EINVAL, "SETCACHE_DIR is not set".to_string()))?;
    let devices = std::env::var("SETCACHE_DEVICES").map_err(|_| {
        (
            libc::EINVAL,
            "SETCACHE_DEVICES is not set: give the store's device directories, separated by commas"
                .to_string(),
        )
    })?;
    let roots: Vec<PathBuf> = devices
        .split(',')
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .collect();
    // Absolute: the program may change its working directory later.
    let roots: Vec<PathBuf> = roots
        .iter()
        .map(|r| std::path::absolute(r).unwrap_or_else(|_| r.clone()))
        .collect();
    for r in &roots {
        let n = crate::path::normalise(b"", r.as_os_str().as_encoded_bytes());
        if crate::path::under(&n, &cfg.dir) || crate::path::under(&cfg.dir, &n) {
            return Err(Refusal::Final(
                libc::EINVAL,
                format!(
                    "device directory {} and SETCACHE_DIR {} must not contain one another",
                    r.display(),
                    String::from_utf8_lossy(&cfg.dir)
                ),
            ));
        }
    }
    let cache = env_size("SETCACHE_CACHE_SIZE", 256 << 20)?;
    let page = env_size("SETCACHE_PAGE_SIZE", 4096)?;
    // Checked whole before it is narrowed (4G would read as 0).
    let page = u32::try_from(page).map_err(|_| {
        (
            libc::EINVAL,
            format!("SETCACHE_PAGE_SIZE={page} is larger than the largest page (1 MiB)"),
        )
    })?;
    let fail = |e: Error| (e.posix_errno(), format!("cannot open the store: {e}"));
    let store_opts = StoreOptions {
        page_size: page,
        ..StoreOptions::default()
    };
    // Before the store takes its roots' locks and starts its threads: a
    // child forked from now on is known as one (once, however many tries).
    static WATCHING: std::sync::Once = std::sync::Once::new();
    WATCHING.call_once(|| {
        watch_for_a_fork();
        // SAFETY: registers a plain `extern "C"` function with no arguments.
        unsafe { libc::pthread_atfork(None, None, Some(after_fork_child)) };
    });
    let store = match Store::open(&roots, store_opts) {
        Ok(s) => s,
        Err(e @ Error::StoreLocked { .. }) => {
            let (errno, why) = fail(e);
            return Err(Refusal::Busy(errno, why));
        }
        Err(e) => return Err(fail(e).into()),
    };
    let partitions = match std::env::var("SETCACHE_PARTITIONS") {
        Err(_) => 1,
        Ok(v) => v.parse::<usize>().map_err(|_| {
            (
                libc::EINVAL,
                format!(
                    "SETCACHE_PARTITIONS={v:?} is not a number (0 for one per NUMA node, 1 to 64)"
                ),
            )
        })?,
    };
    let opts = CacheOptions {
        size: cache as usize,
        page_size: page as usize,
        partitions,
        ..CacheOptions::default()
    };
    let cs = CachedStore::new(store, opts).map_err(fail)?;
    // The limit as it is at the open (a shell's `ulimit -n` comes first).
    let kept_most = kept_most(cs.store().devices());
    // SAFETY: registers a plain `extern "C"` function with no arguments.
    unsafe { libc::atexit(sync_at_exit) };
    let opened = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    // SAFETY: plain getters.
    let owner = unsafe { (libc::geteuid(), libc::getegid()) };
    Ok(State {
        cs,
        nodes: Mutex::new(HashMap::new()),
        opened,
        owner,
        kept: Mutex::new(std::collections::VecDeque::new()),
        kept_most,
    })
}

extern "C" fn after_fork_child() {
    mark_forked();
}

/// This process is a child made by a fork (from `_Fork` too, which runs no
/// `atfork` handler): the store is the parent's. Its copies of the roots'
/// lock files are closed (the locks are the parent's, and a child that
/// outlived it would keep them).
pub(crate) fn mark_forked() {
    if !FORKED.swap(true, Ordering::Relaxed) {
        setcache::fds::close_locks_in_child();
    }
}

/// What a program wrote and did not sync survives its exit on a local file
/// system (the kernel keeps it): here the store's dirty pages are written and
/// synced when the process exits normally.
extern "C" fn sync_at_exit() {
    if forked() {
        return;
    }
    // From here on every write syncs itself: a write that comes after the
    // sync below (from an exit handler that runs after this one) is not lost.
    EXITED.store(true, Ordering::Release);
    // The C library flushes its streams after the exit handlers: flush them
    // first, so that what a stream of a store file buffered is synced too.
    // SAFETY: fflush(NULL) flushes every output stream.
    unsafe { libc::fflush(std::ptr::null_mut()) };
    if let Some(Ok(s)) = STATE.get()
        && let Err(e) = s.cs.sync_unheard()
    {
        crate::say(&format!(
            "writing the store's dirty pages at exit failed: {e}"
        ));
    }
}

/// The process ends by `_exit`: if the store is open in this process (not
/// a child made by `fork`), it is written and synced as at an exit, on the
/// crate's exit thread (so a call from a signal handler that interrupted
/// one of the store's holds gives up after a minute instead of waiting for
/// itself), and any write another thread makes meanwhile syncs itself.
pub(crate) fn sync_before_exit() {
    if forked() || !matches!(STATE.get(), Some(Ok(_))) {
        return;
    }
    EXITED.store(true, Ordering::Release);
    setcache::CachedStore::sync_all_open_in_this_process();
}

/// The main thread is ending by `pthread_exit`: if the store is open in
/// this process, a thread (named as the store's are) ends the process with
/// `exit(0)` once no thread but the store's is left, as the kernel would end
/// it after the program's last thread (the exit handlers then sync the
/// store, as at any exit).
pub(crate) fn end_with_the_program() {
    let open = || !forked() && matches!(STATE.get(), Some(Ok(_)));
    if let Err(e) = setcache::process::main_thread_ends(open) {
        crate::say(&format!(
            "no thread to end the process after the main thread's pthread_exit: {e}"
        ));
    }
}

/// Write and sync the store's dirty pages and lengths if it is open in this
/// process (not a child made by `fork`): before an `exec` replaces the
/// process, and for `sync` and `syncfs`. What the sync could not write is
/// reported on stderr, naming `why`; `Err` holds its errno. A loss it
/// meets is not counted as heard: no program's descriptor of the file was
/// told (as a file system's `syncfs` error does not mark a file's error
/// seen), so the file's next writable open does not accept it.
pub(crate) fn sync_store(why: &str) -> Result<(), i32> {
    if forked() {
        return Ok(());
    }
    match STATE.get() {
        Some(Ok(s)) => s.cs.sync_unheard().map_err(|e| crate::fail(why, &e)),
        _ => Ok(()),
    }
}

/// The layout of files the library creates.
pub(crate) const LAYOUT: LayoutKind = LayoutKind::Stripe;

// The descriptor table: placeholders (real O_PATH descriptors) to their
// descriptions, in chunks allocated as descriptor numbers grow.

const CHUNK: usize = 1024;
const CHUNKS: usize = 1024;
/// The largest descriptor number the library can stand in for, plus one.
pub(crate) const MAX_FD: usize = CHUNK * CHUNKS;

type Slot = RwLock<Option<Arc<Desc>>>;

static TABLE: [AtomicPtr<[Slot; CHUNK]>; CHUNKS] =
    [const { AtomicPtr::new(std::ptr::null_mut()) }; CHUNKS];
/// Descriptors in the table: none, and every descriptor call passes through
/// at the cost of one load.
static LIVE: AtomicUsize = AtomicUsize::new(0);

fn slot(fd: c_int, make: bool) -> Option<&'static Slot> {
    let fd = usize::try_from(fd).ok().filter(|&f| f < MAX_FD)?;
    let chunk = &TABLE[fd / CHUNK];
    let mut p = chunk.load(Ordering::Acquire);
    if p.is_null() {
        if !make {
            return None;
        }
        let fresh: Box<[Slot; CHUNK]> = Box::new(std::array::from_fn(|_| RwLock::new(None)));
        let fresh = Box::into_raw(fresh);
        match chunk.compare_exchange(
            std::ptr::null_mut(),
            fresh,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => p = fresh,
            Err(other) => {
                // SAFETY: `fresh` came from Box::into_raw above and was not published.
                drop(unsafe { Box::from_raw(fresh) });
                p = other;
            }
        }
    }
    // SAFETY: a published chunk is never freed.
    Some(unsafe { &(*p)[fd % CHUNK] })
}

/// The description behind placeholder `fd`, if it is one.
#[inline]
pub(crate) fn desc(fd: c_int) -> Option<Held> {
    let d = desc_raw(fd)?;
    Some(Held {
        d,
        _off: setcache::cancel::off(),
    })
}

#[inline]
fn desc_raw(fd: c_int) -> Option<Arc<Desc>> {
    if LIVE.load(Ordering::Relaxed) == 0 {
        // A descriptor inherited across `exec`, at its first use.
        return crate::inherit::adopt(fd);
    }
    let Some(slot) = slot(fd, false) else {
        return crate::inherit::adopt(fd);
    };
    if forked() {
        // The kernel refuses the placeholder itself (EBADF) for reads and
        // writes; the calls it answers on a placeholder look at
        // `parents_placeholder` first.
        parents_placeholder(fd);
        return None;
    }
    let d = slot.read().unwrap_or_else(|p| p.into_inner()).clone();
    d.or_else(|| crate::inherit::adopt(fd))
}

/// What `fd` stands for in the table now (no descriptor is taken up).
pub(crate) fn in_table(fd: c_int) -> Option<Arc<Desc>> {
    slot(fd, false)?
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .clone()
}

/// Every number the table holds a description at, with it; a slot another
/// thread holds locked is left out (in a child made by `fork` its lock may
/// be held for good).
pub(crate) fn held_now() -> Vec<(c_int, Arc<Desc>)> {
    let mut held = Vec::new();
    if LIVE.load(Ordering::Relaxed) == 0 {
        return held;
    }
    for (k, chunk) in TABLE.iter().enumerate() {
        let p = chunk.load(Ordering::Acquire);
        if p.is_null() {
            continue;
        }
        // SAFETY: a published chunk is never freed.
        for (i, s) in unsafe { &*p }.iter().enumerate() {
            let d = match s.try_read() {
                Ok(g) => g.clone(),
                Err(TryLockError::Poisoned(p)) => p.into_inner().clone(),
                Err(TryLockError::WouldBlock) => None,
            };
            if let Some(d) = d {
                held.push(((k * CHUNK + i) as c_int, d));
            }
        }
    }
    held
}

/// In a child made by `fork`: whether `fd` is a placeholder of the parent's
/// store, which fails here with `EBADF` (the store is the parent's) where
/// the kernel would answer for the placeholder (`fstat`, `fchdir`,
/// `fcntl(F_GETFL)`); stderr says so once.
pub(crate) fn parents_placeholder(fd: c_int) -> bool {
    if LIVE.load(Ordering::Relaxed) == 0 || !forked() {
        return false;
    }
    let Some(slot) = slot(fd, false) else {
        return false;
    };
    // The parent's table, copied at the fork: a lock one of its other
    // threads held then stays held here, so none is waited for (a slot
    // held then was most likely a descriptor of the store).
    let store = match slot.try_read() {
        Ok(g) => g.is_some(),
        Err(TryLockError::Poisoned(p)) => p.into_inner().is_some(),
        Err(TryLockError::WouldBlock) => true,
    };
    if store {
        crate::warn_once(
            "fork",
            "the store belongs to the parent process: a child made by fork cannot use it (run the program's workers as threads: fio's --thread, for one)",
        );
    }
    store
}

/// Make `fd` stand for `d` (replacing what it stood for).
pub(crate) fn insert(fd: c_int, d: Arc<Desc>) -> Result<(), i32> {
    insert_replacing(fd, d).map(drop)
}

/// [`insert`], returning what `fd` stood for: in one step, so that another
/// thread's call on `fd` finds the old file or the new one, never nothing
/// (a `dup2` from one file of the store over another's descriptor).
pub(crate) fn insert_replacing(fd: c_int, d: Arc<Desc>) -> Result<Option<Arc<Desc>>, i32> {
    crate::inherit::forget(fd, fd);
    let s = slot(fd, true).ok_or(libc::EMFILE)?;
    let old = s.write().unwrap_or_else(|p| p.into_inner()).replace(d);
    if old.is_none() {
        LIVE.fetch_add(1, Ordering::Relaxed);
    }
    Ok(old)
}

/// `fd` no longer stands for anything; what it stood for.
/// `remove` of every number of `first..=last` (below `MAX_FD`), looking
/// only at the table's chunks that exist.
pub(crate) fn remove_range(first: usize, last: usize) -> Vec<Arc<Desc>> {
    crate::inherit::forget(
        c_int::try_from(first).unwrap_or(c_int::MAX),
        c_int::try_from(last).unwrap_or(c_int::MAX),
    );
    let mut gone = Vec::new();
    let last = last.min(MAX_FD - 1);
    let mut fd = first;
    while fd <= last && LIVE.load(Ordering::Relaxed) != 0 {
        if TABLE[fd / CHUNK].load(Ordering::Acquire).is_null() {
            fd = (fd / CHUNK + 1) * CHUNK;
            continue;
        }
        gone.extend(remove(fd as c_int));
        fd += 1;
    }
    gone
}

pub(crate) fn remove(fd: c_int) -> Option<Arc<Desc>> {
    crate::inherit::forget(fd, fd);
    if LIVE.load(Ordering::Relaxed) == 0 {
        return None;
    }
    let slot = slot(fd, false)?;
    if forked() {
        // As in `desc`: no lock is waited for in a child; and the child runs
        // no destructor of the parent's store (whose locks may be held as
        // well): what the slot held is forgotten.
        let g = match slot.try_write() {
            Ok(g) => Some(g),
            Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        };
        if let Some(d) = g.and_then(|mut g| g.take()) {
            std::mem::forget(d);
            LIVE.fetch_sub(1, Ordering::Relaxed);
        }
        return None;
    }
    let old = slot.write().unwrap_or_else(|p| p.into_inner()).take();
    if old.is_some() {
        LIVE.fetch_sub(1, Ordering::Relaxed);
    }
    old
}

/// The node of `name`, opening the file (or, with `create`, creating it
/// empty) when no descriptor has it open. `excl` refuses an existing file.
///
/// `writer`: for a writable open. A loss an earlier failed fsync left (the
/// cache's `SyncLost`, which a last close may have reported on stderr only)
/// stays the file's until a writer opens it while no other description has
/// it open, as a local file system's error stays with the descriptions open
/// when it came: a length asked for, a reader's open or a `truncate` by
/// name keep it, so that a later `fsync` still fails.
pub(crate) fn node(
    s: &State,
    name: &str,
    create: bool,
    excl: bool,
    writer: bool,
) -> Result<Arc<Node>, Error> {
    let mut nodes = s.nodes.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(n) = nodes.get(name).and_then(Weak::upgrade) {
        let r = if create && excl {
            Err(Error::FileExists(name.to_string()))
        } else if writer && n.descs.load(Ordering::Acquire) == 0 {
            n.file.accept_reported_loss().map(drop)
        } else {
            Ok(())
        };
        // A node refused goes after the table's lock: if its last holder
        // closed meanwhile, its drop syncs the file.
        drop(nodes);
        return r.map(|()| n);
    }
    let open = || {
        if writer {
            s.cs.open_file(name)
        } else {
            s.cs.open_file_keeping_loss(name)
        }
    };
    // Out of descriptors: the files kept after their last close let go of
    // theirs, and the open (or create) is tried again.
    let opened = match open() {
        Err(e) if out_of_descriptors(&e) => {
            shed_kept(s);
            open()
        }
        r => r,
    };
    let file = match opened {
        Ok(_) if create && excl => return Err(Error::FileExists(name.to_string())),
        Ok(f) => f,
        Err(Error::FileNotFound(_)) if create => match s.cs.create(name, 0, LAYOUT) {
            Err(e) if out_of_descriptors(&e) => {
                shed_kept(s);
                s.cs.create(name, 0, LAYOUT)?
            }
            r => r?,
        },
        Err(e) => return Err(e),
    };
    let n = Arc::new(Node {
        size: AtomicU64::new(file.len()),
        file,
        name: Mutex::new(name.to_string()),
        grow: Mutex::new(()),
        written: AtomicBool::new(false),
        forgotten: AtomicBool::new(false),
        descs: AtomicUsize::new(0),
        flocks: crate::lock::Flocks::default(),
        rw_hint: AtomicU64::new(0),
        // Taken at the open, from the file it opened: a later look by
        // name could find another file (the name replaced meanwhile).
        ino: crate::calls::ino_of(s, name),
        reserved: AtomicU64::new(0),
        whole: AtomicU64::new(0),
        holey: AtomicBool::new(false),
        kept_past: AtomicBool::new(false),
    });
    nodes.retain(|_, w| w.strong_count() > 0);
    nodes.insert(name.to_string(), Arc::downgrade(&n));
    Ok(n)
}

/// The length of `name`: from its node when it is open, else by opening it
/// and keeping it open (as after a last close). A program that asks again
/// and again about a file it does not open (a database checking for a hot
/// journal before every read) then costs no header read from the device
/// each time.
pub(crate) fn len_of(s: &State, name: &str) -> Result<u64, Error> {
    let open = s
        .nodes
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(name)
        .and_then(Weak::upgrade);
    match open {
        Some(n) => Ok(n.len()),
        None => {
            let n = node(s, name, false, false, false)?;
            let len = n.len();
            keep(s, n);
            Ok(len)
        }
    }
}

/// The open nodes by name, locked. A store operation on names (a delete, a
/// rename) runs under this lock together with the change it makes to the
/// nodes, as `node` opens or creates under it: an open of either name finds
/// the nodes as they were before the operation or as they are after it,
/// never a node of the old file under the new name (two nodes of one file
/// would each keep their own length).
pub(crate) fn lock_nodes(s: &State) -> std::sync::MutexGuard<'_, HashMap<String, Weak<Node>>> {
    s.nodes.lock().unwrap_or_else(|p| p.into_inner())
}

/// `name` was deleted: a later open finds the store's file, not the node.
/// The node, and a kept hold of it, go into `gone`, for the caller to drop
/// after the table's lock: a last holder's drop syncs the file.
pub(crate) fn forget(
    s: &State,
    nodes: &mut HashMap<String, Weak<Node>>,
    gone: &mut Vec<Arc<Node>>,
    name: &str,
) {
    if let Some(n) = nodes.remove(name).and_then(|w| w.upgrade()) {
        n.forgotten.store(true, Ordering::Release);
        let mut k = s.kept.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(i) = k.iter().position(|x| Arc::ptr_eq(x, &n)) {
            gone.extend(k.remove(i));
        }
        drop(k);
        gone.push(n);
    }
}

/// `from` is now `to`: the open node follows.
pub(crate) fn renamed(nodes: &mut HashMap<String, Weak<Node>>, from: &str, to: &str) {
    if let Some(w) = nodes.remove(from) {
        if let Some(n) = w.upgrade() {
            *n.name.lock().unwrap_or_else(|p| p.into_inner()) = to.to_string();
        }
        nodes.insert(to.to_string(), w);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use setcache::{CacheOptions, StoreOptions};

    /// Asking for the length of a file no descriptor has open opens it once
    /// and keeps it: the next ask finds it open (no header read from the
    /// devices again), and a missing name is still not found.
    #[test]
    fn the_length_of_an_unopened_file_keeps_it_open() {
        let (dir, s) = two_devices("len");
        s.cs.store().create("j", 8720, LAYOUT).unwrap();
        assert_eq!(len_of(&s, "j").unwrap(), 8720);
        let open = s.nodes.lock().unwrap().get("j").and_then(Weak::upgrade);
        assert!(open.is_some(), "open after the first ask");
        assert_eq!(s.kept.lock().unwrap().len(), 1, "and kept");
        assert_eq!(len_of(&s, "j").unwrap(), 8720);
        assert_eq!(s.kept.lock().unwrap().len(), 1, "kept once");
        assert!(matches!(len_of(&s, "none"), Err(Error::FileNotFound(_))));
        drop(open);
        drop(s);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A file deleted, or replaced by a rename, while open is not kept after
    /// its last close (kept, it held its backing files, and so their space,
    /// until 32 more closes); a file still under its name is.
    #[test]
    fn a_file_deleted_or_replaced_while_open_is_not_kept() {
        let (dir, s) = two_devices("gone");
        let d = node(&s, "d", true, false, true).unwrap();
        crate::calls::unlink_in(&s, "d").unwrap();
        keep(&s, d);
        assert_eq!(s.kept.lock().unwrap().len(), 0, "a deleted file was kept");
        let t = node(&s, "t", true, false, true).unwrap();
        drop(node(&s, "u", true, false, true).unwrap());
        crate::calls::rename_in(&s, "u", "t", true).unwrap();
        let kept_as = |n: &Arc<Node>| s.kept.lock().unwrap().iter().any(|k| Arc::ptr_eq(k, n));
        let replaced = Arc::clone(&t);
        keep(&s, t);
        assert!(!kept_as(&replaced), "a replaced file was kept");
        let u = node(&s, "t", false, false, false).unwrap();
        keep(&s, Arc::clone(&u));
        assert!(kept_as(&u), "the file under its name was not kept");
        drop(s);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A loss a failed fsync left (pages written back, pushed out of the
    /// cache, then the fsync failing) stays the file's through a length
    /// asked for and a reader's open; a writer's open
    /// while another description is open keeps it too; a writer's open with
    /// none open accepts it.
    #[test]
    fn a_loss_stays_until_a_writer_opens_the_file_alone() {
        use setcache::{EngineKind, SimConfig, SimMedia, SimSwitches};
        let dir =
            std::env::temp_dir().join(format!("setcache-preload-loss-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let roots = [dir.join("d0"), dir.join("d1")];
        for r in &roots {
            std::fs::create_dir_all(r).unwrap();
        }
        let sw = Arc::new(SimSwitches::default());
        sw.fsync_errno.store(libc::ENOSPC, Ordering::Release);
        let opts = StoreOptions {
            engine: EngineKind::Sim(SimConfig {
                media: SimMedia::new(),
                switches: sw.clone(),
                ..SimConfig::default()
            }),
            block_pages: 1,
            ..StoreOptions::default()
        };
        let store = Store::open(&roots, opts).unwrap();
        let cache = CacheOptions {
            size: 16 * 4096,
            assoc: 4,
            ..CacheOptions::default()
        };
        let s = State {
            cs: CachedStore::with_flusher(store, cache, None).unwrap(),
            nodes: Mutex::new(HashMap::new()),
            opened: 0,
            owner: (0, 0),
            kept: Mutex::new(std::collections::VecDeque::new()),
            kept_most: KEPT,
        };
        let lost = |n: &Node| matches!(n.file.sync(), Err(Error::SyncLost { .. }));
        {
            let n = node(&s, "j", true, false, true).unwrap();
            n.file.set_len(64 * 4096).unwrap();
            for p in 0..64u64 {
                n.file.write_at(p * 4096, &[0x5E; 4096]).unwrap();
            }
            sw.fsync_failures.store(1, Ordering::Release);
            assert!(n.file.file().sync().is_err());
            let r = n.file.sync();
            assert!(
                matches!(r, Err(Error::SyncLost { .. })),
                "the loss, to begin with: {r:?}"
            );
        }
        // The node went with its last holder (as after a last close that
        // reported the loss on stderr only).
        assert!(
            s.nodes
                .lock()
                .unwrap()
                .get("j")
                .and_then(Weak::upgrade)
                .is_none()
        );
        assert_eq!(len_of(&s, "j").unwrap(), 64 * 4096);
        let n = node(&s, "j", false, false, false).unwrap();
        assert!(lost(&n), "after a length asked for and a reader's open");
        s.kept.lock().unwrap().clear();
        drop(n);
        let n = node(&s, "j", false, false, false).unwrap();
        assert!(lost(&n), "after a reader's open that made the node");
        // A reader's description open (counted as `Desc::new` counts it;
        // a description's drop would reach for the process's own store).
        n.descs.fetch_add(1, Ordering::AcqRel);
        let w = node(&s, "j", false, false, true).unwrap();
        assert!(lost(&w), "after a writer's open beside a reader's");
        n.descs.fetch_sub(1, Ordering::AcqRel);
        let w = node(&s, "j", false, false, true).unwrap();
        w.file.sync().unwrap();
        // A loss the store's sync met for no program (`sync`, `syncfs`, an
        // `exec`, the exit) is not heard: a writer's open alone of the node
        // still held keeps it for the writer's first sync.
        for p in 0..64u64 {
            w.file.write_at(p * 4096, &[0x5F; 4096]).unwrap();
        }
        sw.fsync_failures.store(1, Ordering::Release);
        assert!(w.file.file().sync().is_err());
        assert!(s.cs.sync_unheard().is_err(), "the store's sync passed");
        let w2 = node(&s, "j", false, false, true).unwrap();
        let r = w2.file.sync();
        assert!(
            matches!(r, Err(Error::SyncLost { .. })),
            "a loss no program heard of was accepted by a writer's open: {r:?}"
        );
        let w3 = node(&s, "j", false, false, true).unwrap();
        w3.file.sync().unwrap();
        // A loss met only by the last description's drop (a `close`, or a
        // descriptor closed by `dup2` over it) and by the node's own drop
        // (stderr only) is not heard either: the next writer's open keeps it.
        for p in 0..64u64 {
            w3.file.write_at(p * 4096, &[0x60; 4096]).unwrap();
        }
        sw.fsync_failures.store(1, Ordering::Release);
        assert!(w3.file.file().sync().is_err());
        let d = Desc::new(w3.clone(), true, true, libc::O_RDWR);
        w3.note_written();
        drop(d);
        assert!(
            w3.written.load(Ordering::Relaxed),
            "the close's sync passed"
        );
        drop((n, w, w2, w3));
        let w4 = node(&s, "j", false, false, true).unwrap();
        let r = w4.file.sync();
        assert!(
            matches!(r, Err(Error::SyncLost { .. })),
            "a loss only a close and a node's drop met was accepted by the next writer's open: {r:?}"
        );
        let w5 = node(&s, "j", false, false, true).unwrap();
        w5.file.sync().unwrap();
        drop((w4, w5));
        drop(s);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A `rename` the store begins and cannot finish (the second device's
    /// rename failing: a directory where its piece of the target goes)
    /// fails, and the table of names no longer sends the old name to the
    /// moved file: once the store finishes the rename, an `open` of the old
    /// name with `O_CREAT | O_TRUNC` makes a new file and truncates nothing
    /// of the moved one.
    #[test]
    fn a_rename_begun_and_failed_leaves_no_node_under_the_old_name() {
        let (dir, s) = two_devices("mv");
        let blocker = s.cs.store().backing_paths("b").unwrap()[1].clone();
        // `a`, open (its description holds the node) and written.
        let n = node(&s, "a", true, false, true).unwrap();
        n.file.set_len(3 * 4096).unwrap();
        n.file.write_at(0, &[0xAB; 3 * 4096]).unwrap();
        n.file.sync().unwrap();
        std::fs::create_dir_all(blocker.join("x")).unwrap();
        assert!(crate::calls::rename_in(&s, "a", "b", true).is_err());
        std::fs::remove_dir_all(&blocker).unwrap();
        // The retry's open of the old name, as `open(O_CREAT | O_TRUNC)`.
        let again = node(&s, "a", true, false, true).unwrap();
        again.file.set_len(0).unwrap();
        drop(again);
        let b = node(&s, "b", false, false, false).unwrap();
        assert_eq!(b.file.len(), 3 * 4096, "the moved file's length");
        let mut got = vec![0u8; 3 * 4096];
        b.file.read_at(0, &mut got).unwrap();
        assert!(got.iter().all(|&x| x == 0xAB), "the moved file's bytes");
        drop((n, b));
        drop(s);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// An `unlink` the store begins and cannot finish (the second device's
    /// piece a directory) fails, and the table of names no longer sends the
    /// name to the deleted file: once the store finishes the delete, an
    /// `open` with `O_CREAT` makes a new file, not one whose writes go
    /// nowhere.
    #[test]
    fn an_unlink_begun_and_failed_leaves_no_node_under_the_name() {
        let (dir, s) = two_devices("rm");
        let n = node(&s, "c", true, false, true).unwrap();
        n.file.set_len(4096).unwrap();
        let piece = s.cs.store().backing_paths("c").unwrap()[1].clone();
        let aside = dir.join("aside");
        std::fs::rename(&piece, &aside).unwrap();
        std::fs::create_dir_all(piece.join("x")).unwrap();
        assert!(crate::calls::unlink_in(&s, "c").is_err());
        std::fs::remove_dir_all(&piece).unwrap();
        let again = node(&s, "c", true, false, true).unwrap();
        assert!(!Arc::ptr_eq(&again, &n), "the deleted file's node");
        assert_eq!(again.file.len(), 0, "a new file");
        drop((n, again));
        drop(s);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A state over a store of two devices (buffered) under a temporary
    /// directory named after `tag`, which the caller removes.
    fn two_devices(tag: &str) -> (PathBuf, State) {
        let dir =
            std::env::temp_dir().join(format!("setcache-preload-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let roots = [dir.join("d0"), dir.join("d1")];
        for r in &roots {
            std::fs::create_dir_all(r).unwrap();
        }
        let opts = StoreOptions {
            direct_io: false,
            ..StoreOptions::default()
        };
        let store = Store::open(&roots, opts).unwrap();
        let cache = CacheOptions {
            size: 1 << 20,
            ..CacheOptions::default()
        };
        let s = State {
            cs: CachedStore::new(store, cache).unwrap(),
            nodes: Mutex::new(HashMap::new()),
            opened: 0,
            owner: (0, 0),
            kept: Mutex::new(std::collections::VecDeque::new()),
            kept_most: KEPT,
        };
        (dir, s)
    }
}
