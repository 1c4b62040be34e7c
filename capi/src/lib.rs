//! The C interface of setcache (`include/setcache.h`): opaque handles over
//! [`setcache::CachedStore`], [`setcache::CachedFile`], a
//! [`setcache::CachedQueue`] and page guards, every call returning 0 or a
//! negative errno and leaving its message for `setcache_last_error`.
//!
//! Each function's contract is the one its declaration in the header states:
//! pointers are valid for what they describe, handles come from this library
//! and are not used after being freed.

#![allow(clippy::missing_safety_doc)]
// The types carry the names the header gives them.
#![allow(non_camel_case_types)]

use std::cell::RefCell;
use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::os::unix::ffi::OsStrExt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::thread::ThreadId;

use setcache::{
    CacheOptions, CachedFile, CachedQueue, CachedRequest, CachedStore, Error, LayoutKind, OpKind,
    PageGuard, PageGuardMut, Store, StoreOptions,
};

thread_local! {
    static LAST: RefCell<CString> = RefCell::new(CString::default());
}

fn set_message(msg: &str) {
    let c = CString::new(msg.replace('\0', " ")).unwrap_or_default();
    let _ = LAST.try_with(|l| *l.borrow_mut() = c);
}

/// A failure: its errno and its message.
struct Fail(i32, String);

impl From<Error> for Fail {
    fn from(e: Error) -> Fail {
        Fail(e.posix_errno(), e.to_string())
    }
}

fn einval(msg: impl Into<String>) -> Fail {
    Fail(libc::EINVAL, msg.into())
}

/// `v`, an offset or file length, if it fits an `off_t`: a larger one is a
/// negative `off_t` cast to the header's `uint64_t`, which the kernel refuses
/// `EINVAL` (a read there would otherwise read nothing, as past the end).
fn position(v: u64, what: &str) -> Result<u64, Fail> {
    if v > i64::MAX as u64 {
        return Err(einval(format!(
            "{what} {v} is above INT64_MAX (a negative off_t is {})",
            v as i64
        )));
    }
    Ok(v)
}

/// `Ok` if a file may be `end` bytes long (at most `most`, the store's
/// largest file): past it is `EFBIG`, as the kernel's past a file system's
/// largest file.
fn within_largest(end: u64, most: u64, what: &str) -> Result<(), Fail> {
    if end > most {
        return Err(Fail(
            libc::EFBIG,
            format!("{what} {end} is past the store's largest file, {most} bytes"),
        ));
    }
    Ok(())
}

/// Run `f`; its error (or panic) becomes a negative errno and this thread's message.
fn call(f: impl FnOnce() -> Result<i64, Fail>) -> i64 {
    // The crate's blocking calls are cancellation points of the C library:
    // a thread cancelled in one would abort the process (see
    // `setcache::cancel`). A cancel waits for the thread's next cancellation
    // point outside this library.
    let _off = setcache::cancel::off();
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => v,
        Ok(Err(Fail(errno, msg))) => {
            set_message(&msg);
            // An error is never read as success (nor as a count).
            -(if errno > 0 { errno } else { libc::EIO } as i64)
        }
        Err(_) => {
            set_message("internal error: a panic in the setcache library (a bug)");
            -(libc::EIO as i64)
        }
    }
}

fn call_int(f: impl FnOnce() -> Result<i64, Fail>) -> c_int {
    call(f) as c_int
}

/// The longest name looked for: far above the store's longest (a bad
/// pointer or a string with no NUL near it fails here, not by a read
/// running on through memory).
const TEXT_MAX: usize = 4096;

unsafe fn text<'a>(p: *const c_char, what: &str) -> Result<&'a str, Fail> {
    if p.is_null() {
        return Err(einval(format!("{what} is NULL")));
    }
    // SAFETY: the caller passes a C string; at most `TEXT_MAX` bytes are read.
    let n = unsafe { libc::strnlen(p, TEXT_MAX) };
    if n == TEXT_MAX {
        return Err(Fail(
            libc::ENAMETOOLONG,
            format!("{what} has no end in its first {TEXT_MAX} bytes"),
        ));
    }
    // SAFETY: `n` bytes, then the NUL, all readable (found just above).
    let bytes = unsafe { std::slice::from_raw_parts(p.cast::<u8>(), n) };
    std::str::from_utf8(bytes).map_err(|_| einval(format!("{what} is not UTF-8")))
}

/// A handle's kind, in the word each handle begins with: a handle of
/// another kind, or one whose free overwrote the word, is refused `EBADF`
/// instead of being read as this kind.
trait Tagged {
    const TAG: u64;
    const KIND: &'static str;
}

/// The word a freed handle's tag is set to before its memory goes back.
const FREED: u64 = 0x6465_6572_6600_0000;

impl Tagged for setcache_store {
    const TAG: u64 = 0x5343_5354_4f52_4531;
    const KIND: &'static str = "store";
}
impl Tagged for setcache_file {
    const TAG: u64 = 0x5343_4649_4c45_3031;
    const KIND: &'static str = "file";
}
impl Tagged for setcache_queue {
    const TAG: u64 = 0x5343_5155_4555_4531;
    const KIND: &'static str = "queue";
}
impl Tagged for setcache_page {
    const TAG: u64 = 0x5343_5041_4745_3031;
    const KIND: &'static str = "pin";
}

/// A new handle's tag.
fn tag_of<T: Tagged>() -> AtomicU64 {
    AtomicU64::new(T::TAG)
}

/// The forks this library's `atfork` handler saw in this process's line
/// (a child inherits its parent's count and adds one).
static FORKS: AtomicU64 = AtomicU64::new(0);

extern "C" fn after_fork_child() {
    FORKS.fetch_add(1, Ordering::Relaxed);
}

/// The count of [`FORKS`] and the process when a handle was made, in the
/// words after its tag: a handle made before a `fork` is the parent's in the
/// child. Its store's threads, rings and dirty pages are the parent's, so
/// the child neither uses it (`EBADF`) nor runs any of its drop (a free
/// there lets it go unread). A child made by a call that runs no `atfork`
/// handler (the raw system call, `_Fork`, `vfork`) is told apart only by the
/// frees, by its process id.
#[repr(C)]
struct Born {
    forks: u64,
    pid: libc::pid_t,
}

/// Whether [`after_fork_child`] is registered: set by the loader's call of
/// [`WATCH_FORKS`] before any handle can be made, so that no thread makes one
/// while another is still registering (a `fork` in that gap would leave the
/// child's count unchanged). A program that links the static library without
/// running the library's constructors registers at its first handle instead.
static WATCHING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

extern "C" fn watch_forks() {
    // (Not a `Once`: a child forked while another thread ran it would wait
    // for it for ever.)
    if !WATCHING.swap(true, Ordering::AcqRel) {
        // SAFETY: registers a plain `extern "C"` function with no arguments.
        unsafe { libc::pthread_atfork(None, None, Some(after_fork_child)) };
    }
}

/// Run by the dynamic loader when the library is loaded (and by the C
/// runtime's start for a static link that keeps this object), before `main`
/// or `dlopen` returns.
#[used]
#[unsafe(link_section = ".init_array")]
static WATCH_FORKS: extern "C" fn() = watch_forks;

/// After a store's open: if the main thread has ended by `pthread_exit`
/// already, the store's threads must not keep the process alive. (What the
/// store holds dirty when the process exits is written and synced by the
/// exit handler the crate registers at its first store.)
fn note_open() {
    if let Err(e) = setcache::process::store_opened() {
        eprintln!(
            "setcache: no thread to end the process after the main thread's pthread_exit: {e}"
        );
    }
}

/// `pthread_exit`, passed on to the C library's: from the main thread of a
/// process with a store open, the process would otherwise never end (the
/// store's threads live on after the program's last thread); a thread of the
/// store's then ends it with `exit(0)` (which syncs the stores) once only
/// the store's threads are left, as the program's last thread ending would.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_exit(retval: *mut c_void) -> ! {
    // SAFETY: plain getters.
    if unsafe { libc::gettid() == libc::getpid() }
        && let Err(e) = setcache::process::main_thread_ends(CachedStore::any_open_in_this_process)
    {
        eprintln!(
            "setcache: no thread to end the process after the main thread's pthread_exit: {e}"
        );
    }
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let mut f = NEXT.load(Ordering::Relaxed);
    if f == 0 {
        // SAFETY: a NUL-terminated name; RTLD_NEXT asks for the next definition (the C library's).
        f = unsafe { libc::dlsym(libc::RTLD_NEXT, c"pthread_exit".as_ptr()) } as usize;
        NEXT.store(f, Ordering::Relaxed);
    }
    if f == 0 {
        // No C library behind this one to pass the call to (a fully static
        // program): the thread is cancelled instead, which runs its cleanup
        // handlers and destructors as `pthread_exit` would (a join gets
        // PTHREAD_CANCELED, not `retval`).
        unsafe extern "C" {
            fn pthread_testcancel();
            fn pthread_setcancelstate(state: c_int, old: *mut c_int) -> c_int;
        }
        /// `PTHREAD_CANCEL_ENABLE` (`pthread.h`).
        const CANCEL_ENABLE: c_int = 0;
        // SAFETY: this thread's own cancellation, as pthread_exit ends it.
        unsafe {
            pthread_setcancelstate(CANCEL_ENABLE, std::ptr::null_mut());
            libc::pthread_cancel(libc::pthread_self());
            loop {
                pthread_testcancel();
            }
        }
    }
    // SAFETY: the C library's `pthread_exit`, which has this signature and does not return.
    let next = unsafe { std::mem::transmute::<usize, unsafe extern "C" fn(*mut c_void) -> !>(f) };
    // SAFETY: the caller's argument, passed on.
    unsafe { next(retval) }
}

fn born() -> Born {
    watch_forks();
    Born {
        forks: FORKS.load(Ordering::Relaxed),
        // SAFETY: plain getter.
        pid: unsafe { libc::getpid() },
    }
}

/// A handle of kind `T` by its tag, made in this process or not.
unsafe fn tagged<'a, T: Tagged>(p: *mut T, what: &str) -> Result<&'a T, Fail> {
    if p.is_null() {
        return Err(einval(format!("{what} is NULL")));
    }
    // SAFETY: a non-null handle comes from this library (the header's contract), and every handle begins with its tag (`repr(C)`, 8-aligned in its Box).
    let word = unsafe { &*p.cast::<AtomicU64>() }.load(Ordering::Relaxed);
    if word != T::TAG {
        let why = if word == FREED {
            "it was freed"
        } else {
            "freed, or a handle of another kind"
        };
        return Err(Fail(
            libc::EBADF,
            format!("{what} is not a live {} handle ({why})", T::KIND),
        ));
    }
    // SAFETY: a live handle of this kind (its tag, above).
    Ok(unsafe { &*p })
}

/// A handle's [`Born`].
fn born_of<T: Tagged>(h: &T) -> &Born {
    // SAFETY: every handle is `repr(C)` with its tag (8 bytes) first and its `Born` (8-aligned) second.
    unsafe { &*(h as *const T).cast::<u8>().add(8).cast::<Born>() }
}

/// Whether handle `h` was made in this process, not before a `fork` by its
/// parent (see [`Born`]).
fn made_here<T: Tagged>(h: &T) -> bool {
    born_of(h).forks == FORKS.load(Ordering::Relaxed)
}

/// A shared reference to a handle: calls on one handle may come from several
/// threads at once, so no `&mut` is made of a store, file or page handle.
unsafe fn handle<'a, T: Tagged>(p: *mut T, what: &str) -> Result<&'a T, Fail> {
    // SAFETY: NULL or the caller's handle.
    let h = unsafe { tagged(p, what) }?;
    if !made_here(h) {
        return Err(Fail(
            libc::EBADF,
            format!(
                "{what} was made before a fork, by the parent process: a child cannot use it \
                 (freeing it there only lets it go, writing nothing)"
            ),
        ));
    }
    Ok(h)
}

/// For the calls that free a handle: in a child made by `fork`, a handle
/// made before the fork is let go of without its drop (which would use the
/// parent's threads, rings and dirty pages), and `true` is returned; `false`
/// for a handle of this process, which the caller frees as usual.
unsafe fn let_go_in_child<T: Tagged>(p: *mut T, what: &str) -> Result<bool, Fail> {
    // SAFETY: NULL or the caller's handle.
    let h = unsafe { tagged(p, what) }?;
    if made_here(h) {
        // SAFETY: plain getter.
        if born_of(h).pid == unsafe { libc::getpid() } {
            return Ok(false);
        }
        // A child made without the handler (`_Fork`, `vfork`): it may share
        // the parent's memory (`vfork`), where the handle must stay the
        // parent's: let go of without a mark.
        return Ok(true);
    }
    // Its memory stays, unread: the child's copy of the parent's.
    h_tag(h).store(FREED, Ordering::Relaxed);
    Ok(true)
}

/// A handle's tag word.
fn h_tag<T: Tagged>(h: &T) -> &AtomicU64 {
    // SAFETY: every handle is `repr(C)` with its tag first.
    unsafe { &*(h as *const T).cast::<AtomicU64>() }
}

/// Free a handle made by `out`: its tag is cleared first, so that a later
/// call with it finds no handle there while the memory is not reused (which
/// the header still calls undefined).
unsafe fn free<T: Tagged>(p: *mut T) {
    // SAFETY: a live handle of this kind (checked by the caller), not used after this.
    unsafe {
        (*p.cast::<AtomicU64>()).store(FREED, Ordering::Relaxed);
        drop(Box::from_raw(p));
    }
}

/// The queue behind `p`, mutably, once its owner is this thread: only the
/// owner ever makes a `&mut` of its state (another thread reads only the
/// owner, beside it, through a shared reference).
unsafe fn own_queue<'a>(p: *mut setcache_queue) -> Result<&'a mut QueueState, Fail> {
    // SAFETY: NULL or a live queue handle, only ever shared.
    let h = unsafe { handle(p, "the queue") }?;
    mine(h.owner, "the queue")?;
    // Only the owner gets past the check above, and it makes one reference at a time.
    // SAFETY: a live handle owned by this thread; no other reference to its state exists.
    Ok(unsafe { &mut *h.state.get() })
}

fn out<T>(o: *mut *mut T, v: T) -> Result<i64, Fail> {
    if o.is_null() {
        return Err(einval("the output pointer is NULL"));
    }
    // SAFETY: the caller passes a place for the handle.
    unsafe { *o = Box::into_raw(Box::new(v)) };
    Ok(0)
}

/// Options as the header describes them.
#[repr(C)]
pub struct setcache_options {
    pub cache_bytes: u64,
    pub page_size: u32,
    pub set_pages: u32,
    pub readahead_bytes: u64,
    pub partitions: u32,
    pub reserved: u32,
}

#[repr(C)]
pub struct setcache_completion {
    pub tag: u64,
    pub result: i64,
}

#[repr(C)]
pub struct setcache_stats {
    pub hits: u64,
    pub misses: u64,
    pub evictions: u64,
    pub dirty_evictions: u64,
    pub readahead_pages: u64,
    pub dirty_pages: u64,
    pub cached_pages: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
}

#[repr(C)]
pub struct setcache_store {
    /// First: see [`Tagged`].
    tag: AtomicU64,
    /// Second: see [`Born`].
    born: Born,
    cs: Arc<CachedStore>,
    /// Files and queues open on it.
    users: Arc<AtomicUsize>,
}

/// A handle's count in its store's users, given back when the handle's
/// other fields are gone: declared last in the handle, it drops last, so a
/// `setcache_store_close` that finds no user left finds nothing of the
/// handle left either.
struct Use(Arc<AtomicUsize>);

impl Use {
    fn of(users: &Arc<AtomicUsize>) -> Use {
        users.fetch_add(1, Ordering::Relaxed);
        Use(users.clone())
    }
}

impl Drop for Use {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Release);
    }
}

#[repr(C)]
pub struct setcache_file {
    /// First: see [`Tagged`].
    tag: AtomicU64,
    /// Second: see [`Born`].
    born: Born,
    file: Arc<CachedFile>,
    /// Last: see [`Use`].
    _use: Use,
}

#[repr(C)]
pub struct setcache_queue {
    /// First: see [`Tagged`].
    tag: AtomicU64,
    /// Second: see [`Born`].
    born: Born,
    owner: ThreadId,
    /// Made `&mut` by its owner thread only (`own_queue`).
    state: std::cell::UnsafeCell<QueueState>,
}

/// A queue handle's state.
struct QueueState {
    /// Declared first: dropped (drained) before the store it borrows.
    q: CachedQueue<'static>,
    /// Live requests by internal tag: the caller's tag, its buffer and length.
    slots: Vec<Slot>,
    free: Vec<u64>,
    /// Finished, not yet handed to the caller.
    pending: std::collections::VecDeque<(u64, setcache::CachedCompletion)>,
    _cs: Arc<CachedStore>,
    /// Last: see [`Use`].
    _use: Use,
}

impl Drop for QueueState {
    fn drop(&mut self) {
        self.q.drain();
    }
}

/// The guard a pin holds (never read: it is held, then dropped).
#[allow(dead_code)]
enum Guard {
    Shared(PageGuard<'static>),
    Mut(PageGuardMut<'static>),
}

#[repr(C)]
pub struct setcache_page {
    /// First: see [`Tagged`].
    tag: AtomicU64,
    /// Second: see [`Born`].
    born: Born,
    /// Before the file: the page goes before the file it borrows.
    #[allow(dead_code)]
    g: Guard,
    owner: ThreadId,
    _file: Arc<CachedFile>,
}

fn mine(owner: ThreadId, what: &str) -> Result<(), Fail> {
    if owner != std::thread::current().id() {
        return Err(Fail(
            libc::EPERM,
            format!("{what} belongs to another thread (it was made there)"),
        ));
    }
    Ok(())
}

#[unsafe(no_mangle)]
pub extern "C" fn setcache_last_error() -> *const c_char {
    LAST.try_with(|l| l.borrow().as_ptr())
        .unwrap_or(c"".as_ptr())
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn setcache_store_open(
    devices: *const *const c_char,
    ndevices: usize,
    opts: *const setcache_options,
    out_store: *mut *mut setcache_store,
) -> c_int {
    call_int(|| {
        if devices.is_null() || ndevices == 0 {
            return Err(einval("no device directories given"));
        }
        if ndevices > setcache::layout::MAX_DEVICES {
            return Err(einval(format!(
                "{ndevices} device directories given; at most {} are supported",
                setcache::layout::MAX_DEVICES
            )));
        }
        // Before the store is opened (its lock taken, its recovery run).
        if out_store.is_null() {
            return Err(einval("out_store is NULL"));
        }
        let mut roots = Vec::with_capacity(ndevices);
        for i in 0..ndevices {
            // SAFETY: the caller passes `ndevices` C strings.
            let p = unsafe { *devices.add(i) };
            if p.is_null() {
                return Err(einval(format!("device {i} is NULL")));
            }
            // A path, any bytes but NUL (not only UTF-8).
            // SAFETY: as above, a C string.
            let bytes = unsafe { CStr::from_ptr(p) }.to_bytes();
            roots.push(std::path::PathBuf::from(std::ffi::OsStr::from_bytes(bytes)));
        }
        // SAFETY: NULL or the caller's options.
        let o = unsafe { opts.as_ref() };
        let page = o.map_or(0, |o| o.page_size);
        let page = if page == 0 { 4096 } else { page };
        let mut copts = CacheOptions {
            page_size: page as usize,
            size: 256 << 20,
            ..CacheOptions::default()
        };
        if let Some(o) = o {
            if o.cache_bytes != 0 {
                copts.size = usize::try_from(o.cache_bytes)
                    .map_err(|_| einval("cache_bytes is too large"))?;
            }
            if o.set_pages != 0 {
                copts.assoc = o.set_pages as usize;
            }
            copts.partitions = match o.partitions {
                0 => 1,
                u32::MAX => 0,
                n if n as usize > setcache::MAX_PARTITIONS => {
                    return Err(einval(format!(
                        "{n} partitions: give 0 or 1 (no partitions), 2 to {}, or \
                         SETCACHE_PARTITIONS_PER_NODE (one per NUMA node)",
                        setcache::MAX_PARTITIONS
                    )));
                }
                n => n as usize,
            };
            if o.reserved != 0 {
                return Err(einval("reserved must be zero"));
            }
        }
        // The cache's options too, before the store is opened.
        <setcache::PageCache>::check(&copts)?;
        let store = Store::open(
            &roots,
            StoreOptions {
                page_size: page,
                ..StoreOptions::default()
            },
        )?;
        let cs = CachedStore::new(store, copts)?;
        if let Some(o) = o {
            match o.readahead_bytes {
                0 => {}
                u64::MAX => cs.set_readahead(0),
                n => cs.set_readahead(usize::try_from(n).unwrap_or(usize::MAX)),
            }
        }
        let cs = Arc::new(cs);
        note_open();
        out(
            out_store,
            setcache_store {
                tag: tag_of::<setcache_store>(),
                born: born(),
                cs,
                users: Arc::new(AtomicUsize::new(0)),
            },
        )
    })
}

/// `EBUSY` while files or queues of the store are open.
fn no_users(s: &setcache_store) -> Result<(), Fail> {
    match s.users.load(Ordering::Acquire) {
        0 => Ok(()),
        open => Err(Fail(
            libc::EBUSY,
            format!("{open} files or queues of the store are still open: close them first"),
        )),
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn setcache_store_close(store: *mut setcache_store) -> c_int {
    call_int(|| {
        // SAFETY: NULL or the caller's handle.
        if unsafe { let_go_in_child(store, "the store") }? {
            return Ok(0);
        }
        // SAFETY: the caller's live handle.
        let s = unsafe { handle(store, "the store") }?;
        no_users(s)?;
        // A failed write keeps the handle: the caller may free space and
        // close again, or give the pages up with `setcache_store_discard`.
        s.cs.sync()?;
        // SAFETY: made by Box::into_raw in setcache_store_open; not used after this.
        unsafe { free(store) };
        Ok(0)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn setcache_store_discard(store: *mut setcache_store) -> c_int {
    call_int(|| {
        // SAFETY: NULL or the caller's handle.
        if unsafe { let_go_in_child(store, "the store") }? {
            return Ok(0);
        }
        // SAFETY: the caller's live handle.
        let s = unsafe { handle(store, "the store") }?;
        no_users(s)?;
        // The pages still dirty are given up, not written back at the drop.
        s.cs.discard_at_close();
        // SAFETY: made by Box::into_raw in setcache_store_open; not used after this.
        unsafe { free(store) };
        Ok(0)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn setcache_store_sync(store: *mut setcache_store) -> c_int {
    call_int(|| {
        // SAFETY: the caller's live handle.
        let s = unsafe { handle(store, "the store") }?;
        s.cs.sync()?;
        Ok(0)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn setcache_stats_get(
    store: *mut setcache_store,
    out_stats: *mut setcache_stats,
) -> c_int {
    call_int(|| {
        // SAFETY: the caller's live handle.
        let s = unsafe { handle(store, "the store") }?;
        if out_stats.is_null() {
            return Err(einval("the stats buffer is NULL"));
        }
        let c = s.cs.cache().stats();
        let moved = s.cs.store().device_bytes();
        let st = setcache_stats {
            hits: c.hits,
            misses: c.misses,
            evictions: c.evictions,
            dirty_evictions: c.dirty_evictions,
            readahead_pages: c.readahead,
            dirty_pages: s.cs.cache().dirty_pages().len() as u64,
            cached_pages: s.cs.cache().capacity_pages() as u64,
            bytes_read: moved.read,
            bytes_written: moved.written,
        };
        // SAFETY: the caller's stats buffer.
        unsafe { out_stats.write(st) };
        Ok(0)
    })
}

fn new_file(s: &setcache_store, f: CachedFile, o: *mut *mut setcache_file) -> Result<i64, Fail> {
    out(
        o,
        setcache_file {
            tag: tag_of::<setcache_file>(),
            born: born(),
            file: Arc::new(f),
            _use: Use::of(&s.users),
        },
    )
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn setcache_create(
    store: *mut setcache_store,
    name: *const c_char,
    len: u64,
    out_file: *mut *mut setcache_file,
) -> c_int {
    call_int(|| {
        // SAFETY: the caller's live handle and C string.
        let (s, name) = unsafe { (handle(store, "the store")?, text(name, "the name")?) };
        if out_file.is_null() {
            return Err(einval("the output pointer is NULL"));
        }
        let len = position(len, "the length")?;
        within_largest(len, s.cs.max_file_len(), "the length")?;
        let f = s.cs.create(name, len, LayoutKind::Stripe)?;
        new_file(s, f, out_file)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn setcache_open(
    store: *mut setcache_store,
    name: *const c_char,
    out_file: *mut *mut setcache_file,
) -> c_int {
    call_int(|| {
        // SAFETY: the caller's live handle and C string.
        let (s, name) = unsafe { (handle(store, "the store")?, text(name, "the name")?) };
        if out_file.is_null() {
            return Err(einval("the output pointer is NULL"));
        }
        // A loss an earlier failed fsync left stays, for the handles that
        // have not been told (`setcache_accept_loss` takes it).
        let f = s.cs.open_file_keeping_loss(name)?;
        new_file(s, f, out_file)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn setcache_accept_loss(file: *mut setcache_file) -> c_int {
    call_int(|| {
        // SAFETY: the caller's live handle.
        let had = unsafe { handle(file, "the file") }?.file.accept_loss()?;
        Ok(had as i64)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn setcache_loss_pending(file: *mut setcache_file) -> c_int {
    call_int(|| {
        // SAFETY: the caller's live handle.
        let f = unsafe { handle(file, "the file") }?;
        Ok(f.file.loss_pending()? as i64)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn setcache_close(file: *mut setcache_file) -> c_int {
    call_int(|| {
        // SAFETY: NULL or the caller's handle.
        if unsafe { let_go_in_child(file, "the file") }? {
            return Ok(0);
        }
        // SAFETY: the caller's live handle.
        let f = unsafe { handle(file, "the file") }?;
        let pins = Arc::strong_count(&f.file) - 1;
        if pins != 0 {
            return Err(Fail(
                libc::EBUSY,
                format!("{pins} pins of the file are held: unpin them first"),
            ));
        }
        // SAFETY: made by Box::into_raw in new_file; not used after this.
        unsafe { free(file) };
        Ok(0)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn setcache_delete(store: *mut setcache_store, name: *const c_char) -> c_int {
    call_int(|| {
        // SAFETY: the caller's live handle and C string.
        let (s, name) = unsafe { (handle(store, "the store")?, text(name, "the name")?) };
        s.cs.delete(name)?;
        Ok(0)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn setcache_rename(
    store: *mut setcache_store,
    from: *const c_char,
    to: *const c_char,
) -> c_int {
    call_int(|| {
        // SAFETY: the caller's live handle and C strings.
        let (s, from, to) = unsafe {
            (
                handle(store, "the store")?,
                text(from, "the old name")?,
                text(to, "the new name")?,
            )
        };
        s.cs.rename(from, to)?;
        Ok(0)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn setcache_list(
    store: *mut setcache_store,
    each: Option<unsafe extern "C-unwind" fn(*const c_char, *mut c_void) -> c_int>,
    ctx: *mut c_void,
) -> c_int {
    call_int(|| {
        // SAFETY: the caller's live handle.
        let s = unsafe { handle(store, "the store") }?;
        let each = each.ok_or_else(|| einval("the callback is NULL"))?;
        let names = s.cs.store().list()?;
        for n in &names {
            let c = CString::new(n.as_str()).map_err(|_| einval("a name holds NUL"))?;
            // A callback may unwind ("C-unwind"): a Rust panic becomes this
            // call's error; a foreign exception (C++) ends the process at
            // the catch, rather than running on through frames it cannot
            // know (undefined behaviour through an `extern "C"` pointer).
            // SAFETY: the caller's callback, given a C string valid for the call.
            let r = catch_unwind(AssertUnwindSafe(|| unsafe { each(c.as_ptr(), ctx) }))
                .map_err(|_| Fail(libc::EIO, format!("the list's callback panicked at {n:?}")))?;
            if r != 0 {
                return Ok(r as i64);
            }
        }
        Ok(names.len().min(c_int::MAX as usize) as i64)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn setcache_pread(
    file: *mut setcache_file,
    buf: *mut c_void,
    len: usize,
    offset: u64,
) -> i64 {
    call(|| {
        // SAFETY: the caller's live handle.
        let f = unsafe { handle(file, "the file") }?;
        let offset = position(offset, "the offset")?;
        if buf.is_null() && len > 0 {
            return Err(einval("the buffer is NULL"));
        }
        if len > isize::MAX as usize {
            return Err(einval("the length is above the largest a buffer can have"));
        }
        let mut none = [0u8; 0];
        let b = if len == 0 {
            &mut none[..]
        } else {
            // SAFETY: the caller's buffer of `len` bytes.
            unsafe { std::slice::from_raw_parts_mut(buf.cast::<u8>(), len) }
        };
        match f.file.read_at(offset, b) {
            Ok(n) => Ok(n as i64),
            // At or past the end, as pread: nothing read.
            Err(Error::OutOfRange { .. }) => Ok(0),
            Err(e) => Err(e.into()),
        }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn setcache_pwrite(
    file: *mut setcache_file,
    buf: *const c_void,
    len: usize,
    offset: u64,
) -> i64 {
    call(|| {
        // SAFETY: the caller's live handle.
        let f = unsafe { handle(file, "the file") }?;
        if len == 0 {
            // Nothing moves, but a deleted file's handle still fails.
            f.file
                .write_extending(position(offset, "the offset")?, &[])?;
            return Ok(0);
        }
        if buf.is_null() {
            return Err(einval("the buffer is NULL"));
        }
        if len > isize::MAX as usize {
            return Err(einval("the length is above the largest a buffer can have"));
        }
        offset
            .checked_add(len as u64)
            .ok_or_else(|| Fail(libc::EFBIG, "offset + length overflows".into()))?;
        let offset = position(offset, "the offset")?;
        position(offset + len as u64, "the write's end")?;
        // As the kernel's: a write from the largest file's end on fails, one
        // that only ends past it writes the part before it (a short count).
        let most = f.file.max_len();
        if offset >= most {
            return Err(Fail(
                libc::EFBIG,
                format!("the offset {offset} is at or past the store's largest file, {most} bytes"),
            ));
        }
        let len = len.min((most - offset).try_into().unwrap_or(usize::MAX));
        // SAFETY: the caller's buffer of at least `len` bytes.
        let b = unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), len) };
        // Past the end: the file grows (durable with the next sync, as the
        // bytes are), and readers see its new length only with the bytes in.
        f.file.write_extending(offset, b)?;
        Ok(len as i64)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn setcache_len(file: *mut setcache_file) -> i64 {
    call(|| {
        // SAFETY: the caller's live handle.
        let f = unsafe { handle(file, "the file") }?;
        // A read of nothing fails on a deleted file's handle, as the header
        // says every call then does.
        f.file.read_at(0, &mut [])?;
        Ok(f.file.len() as i64)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn setcache_set_len(file: *mut setcache_file, len: u64) -> c_int {
    call_int(|| {
        // SAFETY: the caller's live handle.
        let f = unsafe { handle(file, "the file") }?;
        let len = position(len, "the length")?;
        within_largest(len, f.file.max_len(), "the length")?;
        f.file.set_len(len)?;
        Ok(0)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn setcache_reserve(
    file: *mut setcache_file,
    offset: u64,
    len: u64,
) -> c_int {
    call_int(|| {
        // SAFETY: the caller's live handle.
        let f = unsafe { handle(file, "the file") }?;
        let offset = position(offset, "the offset")?;
        let len = position(len, "the length")?;
        if len == 0 {
            return Err(einval(
                "a reservation of 0 bytes (the length must be positive)",
            ));
        }
        within_largest(
            offset.saturating_add(len),
            f.file.max_len(),
            "the range's end",
        )?;
        f.file.reserve(offset, len)?;
        Ok(0)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn setcache_sync(file: *mut setcache_file) -> c_int {
    call_int(|| {
        // SAFETY: the caller's live handle.
        unsafe { handle(file, "the file") }?.file.sync()?;
        Ok(0)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn setcache_queue_new(
    store: *mut setcache_store,
    depth: u32,
    out_queue: *mut *mut setcache_queue,
) -> c_int {
    call_int(|| {
        // SAFETY: the caller's live handle.
        let s = unsafe { handle(store, "the store") }?;
        if depth == 0 || depth > 65536 {
            return Err(einval(format!("queue depth {depth} is outside 1..=65536")));
        }
        if out_queue.is_null() {
            return Err(einval("the output pointer is NULL"));
        }
        let cs = s.cs.clone();
        // The queue borrows the store, which `_cs` keeps alive (at a fixed
        // address, in its Arc) for longer than the queue: the queue is
        // declared first in the handle and so dropped first.
        // SAFETY: the borrowed store outlives the queue (above).
        let q: CachedQueue<'static> = unsafe { std::mem::transmute(cs.try_queue(depth as usize)?) };
        out(
            out_queue,
            setcache_queue {
                tag: tag_of::<setcache_queue>(),
                born: born(),
                owner: std::thread::current().id(),
                state: std::cell::UnsafeCell::new(QueueState {
                    q,
                    slots: Vec::new(),
                    free: Vec::new(),
                    pending: std::collections::VecDeque::new(),
                    _cs: cs,
                    _use: Use::of(&s.users),
                }),
            },
        )
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn setcache_queue_free(queue: *mut setcache_queue) -> c_int {
    call_int(|| {
        // SAFETY: NULL or the caller's handle.
        if unsafe { let_go_in_child(queue, "the queue") }? {
            return Ok(0);
        }
        // SAFETY: the caller's live handle.
        unsafe { own_queue(queue) }?;
        // SAFETY: made by Box::into_raw in setcache_queue_new; not used after this.
        unsafe { free(queue) };
        Ok(0)
    })
}

fn submit(
    q: &mut QueueState,
    f: &setcache_file,
    kind: OpKind,
    buf: *mut u8,
    len: usize,
    offset: u64,
    tag: u64,
) -> Result<i64, Fail> {
    let offset = position(offset, "the offset")?;
    if buf.is_null() || len == 0 {
        return Err(einval("the buffer is NULL or empty"));
    }
    let file_len = f.file.len();
    if offset.checked_add(len as u64).is_none_or(|e| e > file_len) {
        return Err(Fail(
            libc::EINVAL,
            format!(
                "a request of {len} bytes at {offset} reaches past the end of the file ({file_len} bytes)"
            ),
        ));
    }
    // The request's own buffer: a length the machine cannot allocate is
    // ENOMEM, not the end of the process. Past Linux's limit of one read or
    // write it is refused before the allocation, which the kernel may grant
    // lazily and then kill the process for touching.
    if len > setcache::MAX_REQUEST {
        return Err(Fail(
            libc::ENOMEM,
            format!(
                "no memory for a request buffer of {len} bytes: one request moves at most {} bytes",
                setcache::MAX_REQUEST
            ),
        ));
    }
    let mut data = Vec::new();
    data.try_reserve_exact(len).map_err(|_| {
        Fail(
            libc::ENOMEM,
            format!("no memory for a request buffer of {len} bytes"),
        )
    })?;
    match kind {
        OpKind::Read => data.resize(len, 0),
        // SAFETY: the caller's buffer of `len` bytes.
        _ => data.extend_from_slice(unsafe { std::slice::from_raw_parts(buf, len) }),
    }
    let queue = &mut q.q;
    start_in_slot(&mut q.slots, &mut q.free, (tag, buf, len), |slot| {
        queue.submit(vec![CachedRequest::tagged(
            kind, &f.file, offset, data, slot,
        )])
    });
    Ok(0)
}

/// A request's slot: its caller's tag, buffer and length.
type Slot = Option<(u64, *mut u8, usize)>;

/// Keep `entry` in a free slot and start its request with `go(slot)`. A
/// panic in `go` may come after the request started: its slot is emptied
/// and never given back, so a completion that still comes for it finds no
/// caller's buffer to write into (the caller was told the submit failed,
/// and may have freed it); the panic goes on.
fn start_in_slot(
    slots: &mut Vec<Slot>,
    free: &mut Vec<u64>,
    entry: (u64, *mut u8, usize),
    go: impl FnOnce(u64),
) {
    let slot = match free.pop() {
        Some(i) => i,
        None => {
            slots.push(None);
            (slots.len() - 1) as u64
        }
    };
    slots[slot as usize] = Some(entry);
    if let Err(e) = catch_unwind(AssertUnwindSafe(|| go(slot))) {
        slots[slot as usize] = None;
        std::panic::resume_unwind(e);
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn setcache_submit_read(
    queue: *mut setcache_queue,
    file: *mut setcache_file,
    buf: *mut c_void,
    len: usize,
    offset: u64,
    tag: u64,
) -> c_int {
    call_int(|| {
        // SAFETY: the caller's live handles.
        let (q, f) = unsafe { (own_queue(queue)?, handle(file, "the file")?) };
        submit(q, f, OpKind::Read, buf.cast(), len, offset, tag)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn setcache_submit_write(
    queue: *mut setcache_queue,
    file: *mut setcache_file,
    buf: *const c_void,
    len: usize,
    offset: u64,
    tag: u64,
) -> c_int {
    call_int(|| {
        // SAFETY: the caller's live handles.
        let (q, f) = unsafe { (own_queue(queue)?, handle(file, "the file")?) };
        submit(q, f, OpKind::Write, buf.cast_mut().cast(), len, offset, tag)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn setcache_poll(
    queue: *mut setcache_queue,
    out_done: *mut setcache_completion,
    max: usize,
    min: usize,
) -> c_int {
    call_int(|| {
        // SAFETY: the caller's live handle.
        let q = unsafe { own_queue(queue) }?;
        if out_done.is_null() && max > 0 {
            return Err(einval("the completion array is NULL"));
        }
        if min > max {
            return Err(einval(format!("min {min} is above max {max}")));
        }
        let mut done = Vec::new();
        q.q.poll();
        q.q.take_completions(&mut done);
        q.pending.extend(done.drain(..));
        while q.pending.len() < min && q.q.outstanding() > 0 {
            let ran = q.q.wait(1);
            q.q.take_completions(&mut done);
            if ran == 0 && done.is_empty() {
                // Nothing ended, though requests count as in flight (as
                // only an internal fault leaves them): what is here goes
                // back, instead of a wait for ever.
                break;
            }
            q.pending.extend(done.drain(..));
        }
        let mut n = 0usize;
        let mut last_err = None;
        while n < max {
            let Some((slot, c)) = q.pending.pop_front() else {
                break;
            };
            // Every pending completion has its slot; were one missing, the
            // completions already written here must still be returned, not
            // lost to a panic.
            let Some((tag, buf, len)) = q.slots.get_mut(slot as usize).and_then(Option::take)
            else {
                continue;
            };
            q.free.push(slot);
            let result = match &c.result {
                Ok(()) => {
                    if c.kind == OpKind::Read {
                        // SAFETY: the caller keeps the read's buffer of `len` bytes valid until now.
                        unsafe {
                            std::ptr::copy_nonoverlapping(c.buf.as_ptr(), buf, len.min(c.buf.len()))
                        };
                    }
                    len as i64
                }
                Err(e) => {
                    last_err = Some(e.to_string());
                    -(e.posix_errno() as i64)
                }
            };
            // SAFETY: `out_done` holds `max` completions and `n < max`.
            unsafe { out_done.add(n).write(setcache_completion { tag, result }) };
            n += 1;
        }
        if let Some(e) = last_err {
            set_message(&e);
        }
        Ok(n as i64)
    })
}

fn pin_common(
    file: *mut setcache_file,
    offset: u64,
    mutable: bool,
    data: *mut *mut u8,
    len: *mut usize,
    out_pin: *mut *mut setcache_page,
) -> Result<i64, Fail> {
    // SAFETY: the caller's live handle.
    let f = unsafe { handle(file, "the file") }?;
    let offset = position(offset, "the offset")?;
    if data.is_null() || len.is_null() || out_pin.is_null() {
        return Err(einval("an output pointer is NULL"));
    }
    let file = f.file.clone();
    // The guard borrows the file that `_file` keeps alive (at a fixed
    // address, in its Arc) for longer than the guard: the guard is declared
    // first in the pin and so dropped first.
    // SAFETY: the borrowed file outlives the guard (above).
    let fref: &'static CachedFile = unsafe { &*Arc::as_ptr(&file) };
    let (g, p, n) = if mutable {
        let mut g = fref.page_mut(offset)?;
        let (p, n) = (g.as_mut_ptr(), g.len());
        (Guard::Mut(g), p, n)
    } else {
        let g = fref.page(offset)?;
        let (p, n) = (g.as_ptr().cast_mut(), g.len());
        (Guard::Shared(g), p, n)
    };
    // SAFETY: the caller's output places.
    unsafe {
        *data = p;
        *len = n;
    }
    out(
        out_pin,
        setcache_page {
            tag: tag_of::<setcache_page>(),
            born: born(),
            g,
            owner: std::thread::current().id(),
            _file: file,
        },
    )
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn setcache_pin(
    file: *mut setcache_file,
    offset: u64,
    data: *mut *const c_void,
    len: *mut usize,
    out_pin: *mut *mut setcache_page,
) -> c_int {
    call_int(|| pin_common(file, offset, false, data.cast(), len, out_pin))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn setcache_pin_mut(
    file: *mut setcache_file,
    offset: u64,
    data: *mut *mut c_void,
    len: *mut usize,
    out_pin: *mut *mut setcache_page,
) -> c_int {
    call_int(|| pin_common(file, offset, true, data.cast(), len, out_pin))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn setcache_unpin(pin: *mut setcache_page) -> c_int {
    call_int(|| {
        // SAFETY: NULL or the caller's handle.
        if unsafe { let_go_in_child(pin, "the pin") }? {
            return Ok(0);
        }
        // SAFETY: the caller's live handle.
        let p = unsafe { handle(pin, "the pin") }?;
        mine(p.owner, "the pin")?;
        let _ = p;
        // SAFETY: made by Box::into_raw in pin_common; not used after this.
        unsafe { free(pin) };
        Ok(0)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use setcache::{
        CacheOptions, EngineKind, SimConfig, SimMedia, SimSwitches, Store, StoreOptions,
    };

    /// A loss a failed fsync left (pages written back, then the fsync
    /// failed) is not cleared by another `setcache_open` of the file: the
    /// first handle's sync still reports it, until `setcache_accept_loss`.
    /// Cache options the cache refuses are refused before the store is
    /// opened: no lock file is left in the device directory.
    #[test]
    fn bad_cache_options_are_refused_before_the_store_opens() {
        let dir = std::env::temp_dir().join(format!("setcache-capi-opts-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let dev = CString::new(dir.to_str().unwrap()).unwrap();
        let devs = [dev.as_ptr()];
        let opts = setcache_options {
            cache_bytes: 1 << 20,
            page_size: 0,
            set_pages: u32::MAX,
            readahead_bytes: 0,
            partitions: 0,
            reserved: 0,
        };
        let mut s = std::ptr::null_mut();
        // SAFETY: live values of this test.
        let r = unsafe { setcache_store_open(devs.as_ptr(), 1, &opts, &mut s) };
        assert_eq!(r, -libc::EINVAL);
        assert!(s.is_null());
        let left: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert!(left.is_empty(), "the store was opened first: {left:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A child made by `fork` cannot use its parent's handles (they are the
    /// parent's store: its threads, rings and dirty pages): each call fails
    /// `EBADF`, and the calls that free handles let them go there without
    /// writing anything. The parent's pages stay as the parent wrote them.
    #[test]
    fn a_child_made_by_fork_cannot_use_its_parents_handles() {
        let dir = std::env::temp_dir().join(format!("setcache-capi-fork-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let dev = CString::new(dir.to_str().unwrap()).unwrap();
        let devs = [dev.as_ptr()];
        let open = || {
            let mut s = std::ptr::null_mut();
            // SAFETY: live values of this test.
            let r = unsafe { setcache_store_open(devs.as_ptr(), 1, std::ptr::null(), &mut s) };
            assert_eq!(r, 0);
            s
        };
        let s = open();
        let mut f = std::ptr::null_mut();
        // SAFETY: live handles and values of this test.
        unsafe {
            assert_eq!(setcache_create(s, c"f".as_ptr(), 8192, &mut f), 0);
            assert_eq!(setcache_pwrite(f, b"A".as_ptr().cast(), 1, 10), 1);
        }
        // SAFETY: the child makes only calls into this library, then `_exit`.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
        if pid == 0 {
            // SAFETY: the parent's handles, in the child.
            let code = unsafe {
                let mut b = [0u8; 1];
                let mut q = std::ptr::null_mut();
                if setcache_pwrite(f, b"B".as_ptr().cast(), 1, 10) != -(libc::EBADF as i64) {
                    1
                } else if setcache_pread(f, b.as_mut_ptr().cast(), 1, 10) != -(libc::EBADF as i64) {
                    2
                } else if setcache_sync(f) != -libc::EBADF || setcache_store_sync(s) != -libc::EBADF
                {
                    3
                } else if setcache_queue_new(s, 4, &mut q) != -libc::EBADF {
                    4
                } else if setcache_close(f) != 0 || setcache_store_close(s) != 0 {
                    5
                } else if setcache_close(f) != -libc::EBADF {
                    6
                } else {
                    0
                }
            };
            // SAFETY: ends the child at once.
            unsafe { libc::_exit(code) };
        }
        let t0 = std::time::Instant::now();
        let mut status = 0;
        loop {
            // SAFETY: waits for this test's child.
            let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
            if r == pid {
                break;
            }
            if t0.elapsed() > std::time::Duration::from_secs(60) {
                // SAFETY: this test's child.
                unsafe { libc::kill(pid, libc::SIGKILL) };
                panic!("the child hung in the library");
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(libc::WIFEXITED(status), "the child died: status {status}");
        assert_eq!(
            libc::WEXITSTATUS(status),
            0,
            "the child's first unexpected call"
        );
        let mut b = [0u8; 1];
        // SAFETY: live handles of this test.
        unsafe {
            assert_eq!(setcache_pread(f, b.as_mut_ptr().cast(), 1, 10), 1);
            assert_eq!(&b, b"A");
            assert_eq!(setcache_close(f), 0);
            assert_eq!(setcache_store_close(s), 0);
        }
        let s = open();
        // SAFETY: live handles of this test.
        unsafe {
            assert_eq!(setcache_open(s, c"f".as_ptr(), &mut f), 0);
            assert_eq!(setcache_pread(f, b.as_mut_ptr().cast(), 1, 10), 1);
            assert_eq!(&b, b"A", "what the parent wrote, written back by its close");
            assert_eq!(setcache_close(f), 0);
            assert_eq!(setcache_store_close(s), 0);
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A store of one simulated device under a new directory, whose fsyncs
    /// fail with `ENOSPC` as `sw` says, with a cache of 16 pages.
    fn sim_store(tag: &str, sw: &Arc<SimSwitches>) -> (std::path::PathBuf, *mut setcache_store) {
        let dir = std::env::temp_dir().join(format!("setcache-capi-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
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
        let store = Store::open(&[&dir], opts).unwrap();
        let cache = CacheOptions {
            size: 16 * 4096,
            assoc: 4,
            ..CacheOptions::default()
        };
        let s = Box::into_raw(Box::new(setcache_store {
            tag: tag_of::<setcache_store>(),
            born: born(),
            cs: Arc::new(CachedStore::with_flusher(store, cache, None).unwrap()),
            users: Arc::new(AtomicUsize::new(0)),
        }));
        (dir, s)
    }

    /// A request whose start panics (perhaps after it was sent) leaves no
    /// caller's buffer in its slot, and the slot is not handed out again: a
    /// completion still coming for it finds nothing to write into.
    #[test]
    fn a_panic_starting_a_request_leaves_no_buffer_in_its_slot() {
        let (mut slots, mut free) = (Vec::new(), Vec::new());
        let mut b = [0u8; 8];
        start_in_slot(&mut slots, &mut free, (7, b.as_mut_ptr(), 8), |s| {
            assert_eq!(s, 0)
        });
        let r = catch_unwind(AssertUnwindSafe(|| {
            start_in_slot(&mut slots, &mut free, (8, b.as_mut_ptr(), 8), |s| {
                assert_eq!(s, 1);
                panic!("a fault after the request went out");
            })
        }));
        assert!(r.is_err(), "the panic went on");
        assert!(slots[0].is_some(), "the first request's slot");
        assert!(slots[1].is_none(), "the panicked request left its buffer");
        assert!(
            free.is_empty(),
            "the panicked request's slot was given back"
        );
        start_in_slot(&mut slots, &mut free, (9, b.as_mut_ptr(), 8), |s| {
            assert_eq!(s, 2, "a slot a late completion may name was reused")
        });
    }

    /// A handle of another kind, or one already freed (its memory kept
    /// here, so that reading it is defined), is refused `EBADF`, naming
    /// the kind it is not.
    #[test]
    fn a_handle_of_another_kind_or_freed_is_refused() {
        let sw = Arc::new(SimSwitches::default());
        let (dir, s) = sim_store("tags", &sw);
        let name = CString::new("t").unwrap();
        let mut f = std::ptr::null_mut();
        // SAFETY: live handles of this test; the mistyped ones point at handles of this library.
        unsafe {
            assert_eq!(setcache_create(s, name.as_ptr(), 4096, &mut f), 0);
            let as_file = s.cast::<setcache_file>();
            assert_eq!(setcache_len(as_file), -(libc::EBADF as i64));
            let msg = CStr::from_ptr(setcache_last_error()).to_string_lossy();
            assert!(msg.contains("not a live file handle"), "{msg}");
            assert_eq!(setcache_store_sync(f.cast()), -libc::EBADF);
            let mut q = std::ptr::null_mut();
            assert_eq!(setcache_queue_new(f.cast(), 4, &mut q), -libc::EBADF);
            assert_eq!(setcache_unpin(f.cast()), -libc::EBADF);
            assert_eq!(setcache_queue_free(s.cast()), -libc::EBADF);
            assert_eq!(setcache_len(f), 4096);
            // A freed handle, its memory kept by a second owner here.
            let mut kept = std::ptr::null_mut();
            assert_eq!(setcache_open(s, name.as_ptr(), &mut kept), 0);
            let boxed = Box::from_raw(kept);
            let copy = Box::into_raw(Box::new(setcache_file {
                tag: tag_of::<setcache_file>(),
                born: born(),
                file: boxed.file.clone(),
                _use: Use::of(&(*s).users),
            }));
            drop(boxed);
            (*copy).tag.store(FREED, Ordering::Relaxed);
            assert_eq!(setcache_close(copy), -libc::EBADF);
            let msg = CStr::from_ptr(setcache_last_error()).to_string_lossy();
            assert!(msg.contains("freed"), "{msg}");
            (*copy)
                .tag
                .store(tag_of::<setcache_file>().into_inner(), Ordering::Relaxed);
            assert_eq!(setcache_close(copy), 0);
            assert_eq!(setcache_close(f), 0);
            assert_eq!(setcache_store_close(s), 0);
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A queued read the device fails completes with its errno, and the
    /// poll that hands it over leaves its message; a read beside it that
    /// succeeded is handed over too, its bytes in the caller's buffer.
    #[test]
    fn a_failed_completion_gives_its_errno_and_message() {
        let sw = Arc::new(SimSwitches::default());
        let (dir, s) = sim_store("failed", &sw);
        let name = CString::new("r").unwrap();
        let mut f = std::ptr::null_mut();
        let mut q = std::ptr::null_mut();
        let (mut good, mut bad) = ([0u8; 64], [0u8; 64]);
        // SAFETY: live handles and buffers of this test, the buffers kept until polled.
        unsafe {
            assert_eq!(setcache_create(s, name.as_ptr(), 8 * 4096, &mut f), 0);
            assert_eq!(setcache_pwrite(f, [3u8; 64].as_ptr().cast(), 64, 0), 64);
            assert_eq!(setcache_queue_new(s, 4, &mut q), 0);
            sw.read_errno.store(libc::EIO, Ordering::Release);
            let good_p = good.as_mut_ptr().cast();
            assert_eq!(setcache_submit_read(q, f, good_p, 64, 0, 1), 0);
            assert_eq!(
                setcache_submit_read(q, f, bad.as_mut_ptr().cast(), 64, 5 * 4096, 2),
                0
            );
            let mut done = [
                setcache_completion { tag: 0, result: 0 },
                setcache_completion { tag: 0, result: 0 },
            ];
            let mut n = 0;
            while n < 2 {
                let r = setcache_poll(q, done.as_mut_ptr().add(n), 2 - n, 1);
                assert!(r > 0, "poll: {r}");
                n += r as usize;
            }
            sw.read_errno.store(0, Ordering::Release);
            done.sort_by_key(|c| c.tag);
            assert_eq!((done[0].tag, done[0].result), (1, 64));
            assert_eq!(good, [3u8; 64]);
            assert_eq!((done[1].tag, done[1].result), (2, -(libc::EIO as i64)));
            let msg = CStr::from_ptr(setcache_last_error()).to_string_lossy();
            assert!(msg.contains("\"r\""), "the message names no file: {msg}");
            assert_eq!(bad, [0u8; 64], "a failed read wrote its buffer");
            assert_eq!(setcache_queue_free(q), 0);
            assert_eq!(setcache_close(f), 0);
            // The device is failed now: the page written before cannot go
            // out, the close says so and keeps the store, which a discard
            // then gives up.
            assert_eq!(setcache_store_close(s), -libc::EIO);
            let msg = CStr::from_ptr(setcache_last_error()).to_string_lossy();
            assert!(msg.contains("failed earlier"), "{msg}");
            assert_eq!(setcache_store_discard(s), 0);
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A list callback that panics (a Rust caller's) fails the call with
    /// `EIO`, naming the callback and the file it was given; the store
    /// goes on.
    #[test]
    fn a_panicking_list_callback_fails_the_list() {
        unsafe extern "C-unwind" fn boom(_: *const c_char, _: *mut c_void) -> c_int {
            panic!("a callback's own panic");
        }
        unsafe extern "C-unwind" fn count(_: *const c_char, ctx: *mut c_void) -> c_int {
            // SAFETY: the test passes a `usize` as the context.
            unsafe { *ctx.cast::<usize>() += 1 };
            0
        }
        let sw = Arc::new(SimSwitches::default());
        let (dir, s) = sim_store("listpanic", &sw);
        let name = CString::new("l").unwrap();
        let mut f = std::ptr::null_mut();
        let mut n = 0usize;
        // SAFETY: live handles of this test.
        unsafe {
            assert_eq!(setcache_create(s, name.as_ptr(), 10, &mut f), 0);
            assert_eq!(
                setcache_list(s, Some(boom), std::ptr::null_mut()),
                -libc::EIO
            );
            let msg = CStr::from_ptr(setcache_last_error()).to_string_lossy();
            assert!(msg.contains("callback panicked at \"l\""), "{msg}");
            assert_eq!(setcache_list(s, Some(count), (&raw mut n).cast()), 1);
            assert_eq!(n, 1);
            assert_eq!(setcache_close(f), 0);
            assert_eq!(setcache_store_close(s), 0);
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A device directory whose name is not UTF-8 is a path like any other.
    #[test]
    fn a_device_path_of_any_bytes_opens() {
        use std::os::unix::ffi::OsStrExt;
        let base = std::env::temp_dir().join(format!("setcache-capi-bytes-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let dir = base.join(std::ffi::OsStr::from_bytes(b"dev-\xff"));
        std::fs::create_dir_all(&dir).unwrap();
        let dev = CString::new(dir.as_os_str().as_bytes()).unwrap();
        let devs = [dev.as_ptr()];
        let mut s = std::ptr::null_mut();
        // SAFETY: live values of this test.
        unsafe {
            let r = setcache_store_open(devs.as_ptr(), 1, std::ptr::null(), &mut s);
            assert_eq!(
                r,
                0,
                "{}",
                CStr::from_ptr(setcache_last_error()).to_string_lossy()
            );
            assert_eq!(setcache_store_close(s), 0);
        }
        let _ = std::fs::remove_dir_all(&base);
    }

    /// A close of the store whose last write fails keeps the handle (the
    /// pages are not dropped): a close once the fault is gone writes them;
    /// `setcache_store_discard` gives them up.
    #[test]
    fn a_store_close_that_fails_keeps_the_store() {
        let sw = Arc::new(SimSwitches::default());
        for give_up in [false, true] {
            let (dir, s) = sim_store("close", &sw);
            let name = CString::new("k").unwrap();
            let mut f = std::ptr::null_mut();
            // SAFETY: live handles and buffers of this test.
            unsafe {
                assert_eq!(setcache_create(s, name.as_ptr(), 4096, &mut f), 0);
                assert_eq!(setcache_pwrite(f, [7u8; 100].as_ptr().cast(), 100, 0), 100);
                assert_eq!(setcache_close(f), 0);
                sw.fsync_failures.store(1, Ordering::Release);
                assert_eq!(setcache_store_close(s), -libc::ENOSPC);
                // Still open: its counters answer.
                let mut st = std::mem::zeroed();
                assert_eq!(setcache_stats_get(s, &mut st), 0);
                if give_up {
                    assert_eq!(setcache_store_discard(s), 0);
                } else {
                    assert_eq!(setcache_store_close(s), 0);
                }
            }
            let _ = std::fs::remove_dir_all(&dir);
        }
    }

    /// A store close that fails on a loss (pages written before a failed
    /// fsync had left the cache) fails again on every retry while the loss
    /// stands; once a handle of the file accepts it, the store closes, as
    /// the header says.
    #[test]
    fn a_store_close_failing_on_a_loss_closes_once_it_is_accepted() {
        let sw = Arc::new(SimSwitches::default());
        let (dir, s) = sim_store("close-loss", &sw);
        let name = CString::new("k").unwrap();
        let (mut f, mut b) = (std::ptr::null_mut(), std::ptr::null_mut());
        // SAFETY: live handles and buffers of this test.
        unsafe {
            assert_eq!(setcache_create(s, name.as_ptr(), 64 * 4096, &mut f), 0);
            let page = [0x6Bu8; 4096];
            for p in 0..64u64 {
                assert_eq!(
                    setcache_pwrite(f, page.as_ptr().cast(), 4096, p * 4096),
                    4096
                );
            }
            assert_eq!(setcache_close(f), 0);
            sw.fsync_failures.store(1, Ordering::Release);
            assert_eq!(setcache_store_close(s), -libc::ENOSPC);
            assert_eq!(
                setcache_store_close(s),
                -libc::ENOSPC,
                "a retry while the loss stands"
            );
            let msg = CStr::from_ptr(setcache_last_error())
                .to_string_lossy()
                .into_owned();
            assert!(msg.contains("\"k\""), "the message names the file: {msg}");
            assert_eq!(setcache_open(s, name.as_ptr(), &mut b), 0);
            assert_eq!(setcache_accept_loss(b), 1);
            assert_eq!(setcache_close(b), 0);
            assert_eq!(
                setcache_store_close(s),
                0,
                "{}",
                CStr::from_ptr(setcache_last_error()).to_string_lossy()
            );
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn an_open_leaves_a_loss_for_the_handles_not_told() {
        let sw = Arc::new(SimSwitches::default());
        let (dir, s) = sim_store("loss", &sw);
        let name = CString::new("j").unwrap();
        let (mut a, mut b) = (std::ptr::null_mut(), std::ptr::null_mut());
        // SAFETY: live handles and buffers of this test.
        unsafe {
            assert_eq!(setcache_create(s, name.as_ptr(), 64 * 4096, &mut a), 0);
            let page = [0x5Eu8; 4096];
            for p in 0..64u64 {
                assert_eq!(
                    setcache_pwrite(a, page.as_ptr().cast(), 4096, p * 4096),
                    4096
                );
            }
            // The pages went out through the small cache; the fsync fails.
            sw.fsync_failures.store(1, Ordering::Release);
            assert!((*a).file.file().sync().is_err());
            assert_eq!(setcache_sync(a), -libc::ENOSPC, "the loss, to begin with");
            assert_eq!(setcache_loss_pending(a), 1, "a loss a sync reported");
            assert_eq!(setcache_open(s, name.as_ptr(), &mut b), 0);
            let r = setcache_sync(a);
            assert!(
                r < 0,
                "the first handle's sync passed after another open: {r}"
            );
            assert!(setcache_sync(b) < 0, "the second handle's sync passed");
            assert_eq!(setcache_accept_loss(b), 1);
            assert_eq!(setcache_loss_pending(b), 0, "an accepted loss");
            assert_eq!(setcache_loss_pending(a), 0, "a loss told and accepted");
            assert_eq!(
                setcache_sync(a),
                0,
                "{}",
                CStr::from_ptr(setcache_last_error()).to_string_lossy()
            );
            assert_eq!(setcache_accept_loss(b), 0);
            assert_eq!(setcache_accept_loss(std::ptr::null_mut()), -libc::EINVAL);
            assert_eq!(setcache_loss_pending(std::ptr::null_mut()), -libc::EINVAL);
            assert_eq!(setcache_close(b), 0);
            assert_eq!(setcache_close(a), 0);
            assert_eq!(setcache_store_close(s), 0);
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
