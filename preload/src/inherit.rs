//! Descriptors of store files across an `exec`. The image that runs next
//! has a store of its own (this one's threads end with the `exec`, and its
//! locks are let go), and finds only the bare placeholders at those numbers:
//! a shell's child that opened `cmd > file` for `cmd`, or a program that
//! runs another on a file it opened. So the `exec` stand-ins name them in the
//! new image's environment (`SETCACHE_INHERITED_FDS`: number, status flags,
//! position and the file's name, for each store descriptor not close-on-exec,
//! after the store's sync), and the library, loaded into the new image, takes
//! the list out of the environment at load. It opens its store only when the
//! program first uses one of those numbers (a program that never does opens
//! none); standard streams at 0, 1 and 2 are turned to this library's at
//! load (see `stdio`), since the C library writes them past it. A number the
//! program closes or reuses first is forgotten; one whose file is gone, or
//! whose store the new image cannot open (another process holds it), stays a
//! bare placeholder (`EBADF`), and stderr says why.

use std::cell::Cell;
use std::ffi::{CString, c_char, c_int};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, TryLockError};

use crate::state::{self, Desc};
use crate::{calls, real};

/// The environment variable the list travels in.
const VAR: &str = "SETCACHE_INHERITED_FDS";

/// One descriptor inherited and not yet used.
struct Entry {
    fd: c_int,
    /// The open file description in the process that named it: numbers
    /// with one id share one description here too (`cmd > f 2>&1`).
    id: u64,
    status: c_int,
    pos: u64,
    name: String,
}

/// The descriptors inherited and not yet used.
static PENDING: Mutex<Vec<Entry>> = Mutex::new(Vec::new());
/// Whether `PENDING` holds any (one load on every look-up otherwise).
static ANY: AtomicBool = AtomicBool::new(false);
/// Held while one is taken up, so that a second thread's call on the same
/// number waits for it rather than finding nothing.
static ADOPTING: Mutex<()> = Mutex::new(());
/// The process the list was taken in: a child it forks does not pass the
/// descriptors it has not used on (see [`list_now`]).
static LOAD_PID: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

thread_local! {
    /// This thread is taking one up: the store's open meanwhile looks up
    /// its own descriptors, which are none of these.
    static IN_ADOPT: Cell<bool> = const { Cell::new(false) };
}

fn pending() -> std::sync::MutexGuard<'static, Vec<Entry>> {
    PENDING.lock().unwrap_or_else(|p| p.into_inner())
}

#[used]
#[unsafe(link_section = ".init_array")]
static AT_LOAD: extern "C" fn() = at_load;

/// At load: the list out of the environment; the standard streams at
/// numbers it holds turned to this library's.
extern "C" fn at_load() {
    let Some(v) = std::env::var_os(VAR) else {
        return;
    };
    // SAFETY: at load, before the program's code runs: no other thread reads the environment yet.
    unsafe { std::env::remove_var(VAR) };
    let Some(cfg) = state::config() else {
        return;
    };
    let mut list: Vec<Entry> = v
        .to_str()
        .unwrap_or_default()
        .split(',')
        .filter_map(parse)
        .filter(|e| is_placeholder(cfg.dev_ino, e.fd))
        .collect();
    list.dedup_by_key(|e| e.fd);
    let std: Vec<c_int> = list.iter().map(|e| e.fd).filter(|&fd| fd < 3).collect();
    if list.is_empty() {
        return;
    }
    // SAFETY: a plain getter.
    LOAD_PID.store(unsafe { libc::getpid() }, Ordering::Relaxed);
    *pending() = list;
    ANY.store(true, Ordering::Release);
    if !std.is_empty() {
        // The stand-ins buffer as the C library's streams do; what they hold
        // at the exit is flushed by this handler, registered before any of
        // the program's and so run after them (the store, opened then for
        // the flush, registers its own exit sync, which the C library runs
        // next).
        // SAFETY: registers a plain function with no arguments.
        unsafe { libc::atexit(flush_at_exit) };
    }
    for fd in std {
        crate::stdio::after_std_copy(fd, true);
    }
}

extern "C" fn flush_at_exit() {
    crate::stdio::flush_stand_ins();
}

/// `fd:id:status:pos:name-in-hex`.
fn parse(item: &str) -> Option<Entry> {
    let mut it = item.splitn(5, ':');
    let fd = it.next()?.parse().ok()?;
    let id = it.next()?.parse().ok()?;
    let status = it.next()?.parse().ok()?;
    let pos = it.next()?.parse().ok()?;
    let hex = it.next()?.as_bytes();
    if hex.is_empty() || hex.len() % 2 != 0 {
        return None;
    }
    let bytes: Option<Vec<u8>> = hex
        .chunks(2)
        .map(|p| u8::from_str_radix(std::str::from_utf8(p).ok()?, 16).ok())
        .collect();
    let name = String::from_utf8(bytes?).ok()?;
    Some(Entry {
        fd,
        id,
        status,
        pos,
        name,
    })
}

/// Whether `fd` is a placeholder: the store's directory (by device and
/// inode), opened `O_PATH`.
fn is_placeholder(dev_ino: (u64, u64), fd: c_int) -> bool {
    // SAFETY: reads the status flags of a descriptor number (the C library's call).
    let fl = unsafe { real::fcntl64()(fd, libc::F_GETFL) };
    if fl < 0 || fl & libc::O_PATH == 0 {
        return false;
    }
    // SAFETY: a zeroed stat64 is valid, and the call fills it.
    let mut st: libc::stat64 = unsafe { std::mem::zeroed() };
    // SAFETY: an empty C string and a buffer of ours (the C library's call, not ours).
    let rc = unsafe { real::fstatat64()(fd, c"".as_ptr(), &mut st, libc::AT_EMPTY_PATH) };
    rc == 0 && st.st_mode & libc::S_IFMT == libc::S_IFDIR && (st.st_dev, st.st_ino) == dev_ino
}

/// The description of inherited `fd`, taken up now (its first use); `None`
/// if it is not one.
#[inline]
pub(crate) fn adopt(fd: c_int) -> Option<Arc<Desc>> {
    if !ANY.load(Ordering::Acquire) {
        return None;
    }
    adopt_now(fd)
}

#[cold]
fn adopt_now(fd: c_int) -> Option<Arc<Desc>> {
    if state::forked() || IN_ADOPT.with(Cell::get) {
        return None;
    }
    // Not one of them (the store's own threads look up their descriptors
    // while another thread opens the store for one): no wait.
    if !pending().iter().any(|e| e.fd == fd) {
        return None;
    }
    let _g = ADOPTING.lock().unwrap_or_else(|p| p.into_inner());
    // Another thread may have taken it up meanwhile.
    if let Some(d) = state::in_table(fd) {
        return Some(d);
    }
    let e = {
        let mut p = pending();
        let i = p.iter().position(|e| e.fd == fd)?;
        let e = p.swap_remove(i);
        ANY.store(!p.is_empty(), Ordering::Release);
        e
    };
    IN_ADOPT.with(|a| a.set(true));
    let r = take_up(&e);
    IN_ADOPT.with(|a| a.set(false));
    match r {
        Ok(d) => Some(d),
        Err(libc::EBUSY) => {
            // Another process holds the store now: the next use of the
            // number tries again (the store's own refusal said why, once).
            let mut p = pending();
            p.push(e);
            ANY.store(true, Ordering::Release);
            None
        }
        Err(errno) => {
            crate::warn_once(
                "inherited",
                &format!(
                    "descriptor {} of {:?}, inherited across exec, cannot be used here ({}): it stays a placeholder (EBADF)",
                    fd,
                    e.name,
                    std::io::Error::from_raw_os_error(errno)
                ),
            );
            None
        }
    }
}

/// Take `e` up, and with it every other number of its description.
fn take_up(e: &Entry) -> Result<Arc<Desc>, i32> {
    let s = state::state()?;
    let flags = e.status & !(libc::O_CREAT | libc::O_EXCL | libc::O_TRUNC | libc::O_CLOEXEC);
    calls::open_as(&s, &e.name, flags, e.fd)?;
    let d = state::in_table(e.fd).ok_or(libc::EBADF)?;
    *d.pos.lock().unwrap_or_else(|p| p.into_inner()) = e.pos;
    let same: Vec<c_int> = {
        let mut p = pending();
        let fds = p.iter().filter(|o| o.id == e.id).map(|o| o.fd).collect();
        p.retain(|o| o.id != e.id);
        ANY.store(!p.is_empty(), Ordering::Release);
        fds
    };
    for fd in same {
        // Numbers the kernel still has as placeholders (checked at load).
        let _ = state::insert(fd, Arc::clone(&d));
    }
    Ok(d)
}

/// `fd` is closed or reused before its first use: not to be taken up.
pub(crate) fn forget(first: c_int, last: c_int) {
    if !ANY.load(Ordering::Acquire) || IN_ADOPT.with(Cell::get) {
        return;
    }
    let mut p = pending();
    p.retain(|e| e.fd < first || e.fd > last);
    ANY.store(!p.is_empty(), Ordering::Release);
}

/// Whether `fd` is closed across an `exec` (or not open).
fn closes_at_exec(fd: c_int) -> bool {
    // SAFETY: reads a descriptor number's flags (the C library's call).
    let f = unsafe { real::fcntl64()(fd, libc::F_GETFD) };
    f < 0 || f & libc::FD_CLOEXEC != 0
}

fn entry_text(fd: c_int, id: u64, status: c_int, pos: u64, name: &str) -> String {
    let hex: String = name.bytes().map(|b| format!("{b:02x}")).collect();
    format!("{fd}:{id}:{status}:{pos}:{hex}")
}

/// The list for the next image: every store descriptor that stays open
/// across the `exec` (none of a file deleted since), and those inherited
/// and not yet used, but only in the process that inherited them: a child
/// it forked passes none of them on. The store keeps no file position
/// between processes, so of the processes that inherit one description only
/// one may use it (a shell's `sh -c "a; b" > f` would have `b` write over
/// what `a` wrote); the others find the bare placeholder (`EBADF`), as
/// every program did before. Locks other threads hold are not waited for
/// (in a child made by `fork` they may be held for good): such a
/// descriptor is left out.
fn list_now() -> String {
    let mut out = Vec::new();
    for (fd, d) in state::held_now() {
        if d.node.forgotten.load(Ordering::Acquire) || closes_at_exec(fd) {
            continue;
        }
        let pos = match d.pos.try_lock() {
            Ok(g) => *g,
            Err(TryLockError::Poisoned(p)) => *p.into_inner(),
            Err(TryLockError::WouldBlock) => continue,
        };
        let name = match d.node.name.try_lock() {
            Ok(g) => g.clone(),
            Err(TryLockError::Poisoned(p)) => p.into_inner().clone(),
            Err(TryLockError::WouldBlock) => continue,
        };
        let id = Arc::as_ptr(&d) as u64;
        out.push(entry_text(
            fd,
            id,
            d.status.load(Ordering::Relaxed),
            pos,
            &name,
        ));
    }
    // SAFETY: a plain getter.
    let me = unsafe { libc::getpid() };
    if ANY.load(Ordering::Acquire)
        && LOAD_PID.load(Ordering::Relaxed) == me
        && let Ok(p) = PENDING.try_lock()
    {
        for e in p.iter().filter(|e| !closes_at_exec(e.fd)) {
            out.push(entry_text(e.fd, e.id, e.status, e.pos, &e.name));
        }
    }
    out.join(",")
}

/// An environment for the next image: `envp` without any earlier list,
/// with this process's (see [`list_now`]).
pub(crate) struct NewEnv {
    _strings: Vec<CString>,
    ptrs: Vec<*const c_char>,
}

impl NewEnv {
    pub(crate) fn as_ptr(&self) -> *const *const c_char {
        self.ptrs.as_ptr()
    }
}

/// `envp` with the list of inherited descriptors, or `None` when it needs
/// no change (no descriptor to name, no earlier list in it).
///
/// # Safety
/// `envp` is null or a null-ended array of C strings, as `execve` takes.
pub(crate) unsafe fn env_for(envp: *const *const c_char) -> Option<NewEnv> {
    let list = list_now();
    let prefix = format!("{VAR}=");
    let mut kept = Vec::new();
    let mut dropped = false;
    if !envp.is_null() {
        let mut i = 0;
        loop {
            // SAFETY: the caller's array, read up to its null end.
            let p = unsafe { *envp.add(i) };
            if p.is_null() {
                break;
            }
            // SAFETY: each entry is a C string.
            if unsafe { std::ffi::CStr::from_ptr(p) }
                .to_bytes()
                .starts_with(prefix.as_bytes())
            {
                dropped = true;
            } else {
                kept.push(p);
            }
            i += 1;
        }
    }
    if list.is_empty() && !dropped {
        return None;
    }
    let mut strings = Vec::new();
    if !list.is_empty() {
        let c = CString::new(format!("{prefix}{list}")).ok()?;
        kept.push(c.as_ptr());
        strings.push(c);
    }
    kept.push(std::ptr::null());
    Some(NewEnv {
        _strings: strings,
        ptrs: kept,
    })
}
