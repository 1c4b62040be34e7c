//! Which paths belong to the store: those under `SETCACHE_DIR`.

use std::ffi::{CStr, c_char, c_int};

use crate::state::{self, Config};

/// Where a path points.
pub(crate) enum Place {
    /// Anywhere else: the kernel serves it.
    Outside,
    /// `SETCACHE_DIR` itself.
    Root,
    /// A file of the store, by name (which may still be one the store refuses).
    Inside(String),
    /// Refused with this errno: a name that is not UTF-8 (the store's names
    /// are), or a path relative to a descriptor of a file of the store.
    Bad(i32),
}

/// `path` made absolute on `base` (when relative) and cleaned lexically:
/// no `.`, `..` or repeated `/`, no trailing `/`.
pub(crate) fn normalise(base: &[u8], path: &[u8]) -> Vec<u8> {
    let mut parts: Vec<&[u8]> = Vec::new();
    let joined = if path.first() == Some(&b'/') {
        [path].to_vec()
    } else {
        vec![base, path]
    };
    for piece in joined {
        for c in piece.split(|&b| b == b'/') {
            match c {
                b"" | b"." => {}
                b".." => {
                    parts.pop();
                }
                c => parts.push(c),
            }
        }
    }
    let mut out = Vec::with_capacity(path.len() + base.len() + 1);
    for p in parts {
        out.push(b'/');
        out.extend_from_slice(p);
    }
    if out.is_empty() {
        out.push(b'/');
    }
    out
}

/// Whether normalised `path` is `dir` or under it.
pub(crate) fn under(path: &[u8], dir: &[u8]) -> bool {
    path.starts_with(dir) && (path.len() == dir.len() || dir == b"/" || path[dir.len()] == b'/')
}

fn relative_to(path: &[u8], dir: &[u8]) -> Option<Place> {
    if !under(path, dir) {
        return None;
    }
    if path.len() == dir.len() {
        return Some(Place::Root);
    }
    let rest = &path[dir.len() + 1..];
    Some(match std::str::from_utf8(rest) {
        Ok(name) => Place::Inside(name.to_string()),
        Err(_) => Place::Bad(libc::EINVAL),
    })
}

/// The directory `dirfd` names, for a path relative to it.
fn base_of(dirfd: c_int) -> Option<Vec<u8>> {
    if dirfd == libc::AT_FDCWD {
        // `getcwd` into a buffer grown on ERANGE leaves that errno behind
        // on success (a working directory longer than its first buffer):
        // the caller's call must not show it.
        // SAFETY: __errno_location returns this thread's errno.
        let saved = unsafe { *libc::__errno_location() };
        let cwd = std::env::current_dir().ok();
        crate::set_errno(saved);
        return cwd.map(|p| p.into_os_string().into_encoded_bytes());
    }
    if state::desc(dirfd).is_some() {
        // A file of the store is no directory (its placeholder is the
        // store's directory, so the kernel would not refuse it: refuse here).
        return Some(b"\0".to_vec());
    }
    if let Ok(p) = std::fs::read_link(format!("/proc/self/fd/{dirfd}")) {
        return Some(p.into_os_string().into_encoded_bytes());
    }
    // No `/proc` (a sandbox, a chroot): the store's directory is still
    // known by its device and inode, so a path relative to it is not
    // passed to the kernel, which would make it a real file there.
    let cfg = state::config()?;
    // SAFETY: a zeroed stat64 is valid, and fstat fills it.
    let mut st: libc::stat64 = unsafe { std::mem::zeroed() };
    // SAFETY: the caller's descriptor and a buffer of ours.
    let ok = unsafe { crate::real::fstat64()(dirfd, &mut st) } == 0;
    (ok && st.st_mode & libc::S_IFMT == libc::S_IFDIR && (st.st_dev, st.st_ino) == cfg.dev_ino)
        .then(|| cfg.dir.clone())
}

/// Whether `path`'s last component is empty, `.` or `..` (`f/`, `f/.`):
/// the path then names a directory, and no file of the store is one.
pub(crate) fn names_a_directory(path: &[u8]) -> bool {
    let last = path.rsplit(|&b| b == b'/').next().unwrap_or_default();
    path.len() > 1 && matches!(last, b"" | b"." | b"..")
}

/// Where `path` (relative to `dirfd` when it is relative) points, for a
/// call that acts on a link it ends in, not on what the link names
/// (`unlink`, `rename`, `lstat`, `readlink`).
pub(crate) fn classify(dirfd: c_int, path: *const c_char) -> Place {
    classify_as(dirfd, path, false)
}

/// [`classify`] for a call that follows a link the path ends in (`open`
/// without `O_NOFOLLOW`, `stat`, `truncate`, `access`) when `follow`: a
/// link outside the store that names a file of the store (`/tmp/l` to
/// `SETCACHE_DIR/f`) is that file. Passed to the kernel, such a call made
/// or read a file in the store's directory on disk, which no call of the
/// store sees.
pub(crate) fn classify_as(dirfd: c_int, path: *const c_char, follow: bool) -> Place {
    let Some(cfg) = state::config() else {
        return Place::Outside;
    };
    if path.is_null() || state::in_setup() {
        return Place::Outside;
    }
    // SAFETY: the caller passes a C string, as the function it stands in for requires.
    let p = unsafe { CStr::from_ptr(path) }.to_bytes();
    if let Some((d, rest)) = descriptor_link(p) {
        return descriptor_place(&d, rest.is_some() || names_a_directory(p), follow);
    }
    let place = place_of(cfg, dirfd, p);
    if !follow || !matches!(place, Place::Outside) {
        return place;
    }
    match followed(cfg, dirfd, p) {
        // `l/` where `l` links to a file: as the kernel says of a file so
        // named.
        Place::Inside(_) if names_a_directory(p) => Place::Bad(libc::ENOTDIR),
        place => place,
    }
}

/// Where a descriptor link of store descriptor `d` points (see
/// [`descriptor_link`]): `below` when the path goes on past the number (or
/// ends in `/`), for a call that follows the link when `follow`.
fn descriptor_place(d: &state::Desc, below: bool, follow: bool) -> Place {
    if below {
        // `/proc/self/fd/N/x`, `/proc/self/fd/N/`: below a file, which the
        // kernel refuses (its link names the placeholder's directory, the
        // store's, where `x` would be a file of it).
        return Place::Bad(libc::ENOTDIR);
    }
    if !follow {
        return Place::Outside;
    }
    if d.node.forgotten.load(std::sync::atomic::Ordering::Acquire) {
        // A file deleted or replaced since: its descriptors fail so (the
        // store cannot open it again by any name).
        return Place::Bad(libc::ESTALE);
    }
    Place::Inside(
        d.node
            .name
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone(),
    )
}

/// What `readlink` of a store descriptor's link (`/proc/self/fd/N` and the
/// other forms [`descriptor_link`] knows) says: the file's path in the
/// store's directory (resolved), as the kernel's link of a file gives it,
/// with ` (deleted)` after it once the file was deleted or replaced, as the
/// kernel's; `None` for any other path (the kernel's link of a store
/// descriptor names the placeholder's directory).
pub(crate) fn descriptor_link_text(path: *const c_char) -> Option<Vec<u8>> {
    let cfg = state::config()?;
    if path.is_null() || state::in_setup() {
        return None;
    }
    // SAFETY: the caller passes a C string, as the function it stands in for requires.
    let p = unsafe { CStr::from_ptr(path) }.to_bytes();
    let (d, rest) = descriptor_link(p)?;
    if rest.is_some() || names_a_directory(p) {
        // Below a file: `classify` refuses it.
        return None;
    }
    let mut t = cfg.canonical.clone().unwrap_or_else(|| cfg.dir.clone());
    t.push(b'/');
    t.extend_from_slice(
        d.node
            .name
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_bytes(),
    );
    if d.node.forgotten.load(std::sync::atomic::Ordering::Acquire) {
        t.extend_from_slice(b" (deleted)");
    }
    Some(t)
}

/// The store descriptor behind a descriptor's link: `/proc/self/fd/N`,
/// `/dev/fd/N`, `/proc/thread-self/fd/N`, `/proc/<this process or one of
/// its threads>/fd/N`, `/proc/self/task/<thread>/fd/N`,
/// `/proc/<this process>/task/<thread>/fd/N`; and whether the path goes on
/// below it (`Some` of the rest). Only a descriptor of the store's: its
/// kernel link names the placeholder's directory, the store's.
fn descriptor_link(p: &[u8]) -> Option<(state::Held, Option<Vec<u8>>)> {
    if !(p.starts_with(b"/proc/") || p.starts_with(b"/dev/")) {
        return None;
    }
    // Repeated `/` go, but not `.` nor `..`: below the number, any name is
    // below a file.
    let parts: Vec<&[u8]> = p.split(|&b| b == b'/').filter(|c| !c.is_empty()).collect();
    // As `/proc` reads a number: digits only, no leading zero.
    let number = |c: &[u8]| -> Option<u64> {
        if c.is_empty() || !c.iter().all(u8::is_ascii_digit) || (c.len() > 1 && c[0] == b'0') {
            return None;
        }
        std::str::from_utf8(c).ok()?.parse().ok()
    };
    let pid = u64::from(std::process::id());
    let ours = |c: &[u8]| {
        number(c).is_some_and(|n| {
            // SAFETY: gettid takes no argument and cannot fail.
            n == pid || n == unsafe { libc::gettid() } as u64
        })
    };
    let rest = match parts.as_slice() {
        [b"dev", b"fd", rest @ ..] => rest,
        [b"proc", b"self" | b"thread-self", b"fd", rest @ ..] => rest,
        [b"proc", b"self", b"task", t, b"fd", rest @ ..] if number(t).is_some() => rest,
        [b"proc", p, b"task", t, b"fd", rest @ ..]
            if number(p) == Some(pid) && number(t).is_some() =>
        {
            rest
        }
        [b"proc", p, b"fd", rest @ ..] if ours(p) => rest,
        _ => return None,
    };
    let (n, below) = rest.split_first()?;
    let fd = c_int::try_from(number(n)?).ok()?;
    let below = (!below.is_empty()).then(|| below.join(&b'/'));
    Some((state::desc(fd)?, below))
}

/// Links the kernel follows for one path at most before `ELOOP`.
const MAX_LINKS: usize = 40;

/// Where outside path `p` (relative to `dirfd`) points once the links it
/// ends in are followed, as the kernel follows them; a link of its
/// directories is looked through by [`place_of`] at each step.
fn followed(cfg: &Config, dirfd: c_int, p: &[u8]) -> Place {
    // The link itself, not what a trailing `/` would follow it to.
    let mut at = p.to_vec();
    while at.len() > 1 && at.last() == Some(&b'/') {
        at.pop();
    }
    for _ in 0..MAX_LINKS {
        let Some(target) = link_target(dirfd, &at) else {
            return Place::Outside;
        };
        at = if target.first() == Some(&b'/') {
            target
        } else {
            // Relative to the link's directory (`dirfd` itself for a bare name).
            match at.iter().rposition(|&b| b == b'/') {
                Some(i) => [&at[..=i], &target[..]].concat(),
                None => target,
            }
        };
        // A descriptor's link on the way (`/dev/stdin` to `/proc/self/fd/0`).
        if let Some((d, rest)) = descriptor_link(&at) {
            return descriptor_place(&d, rest.is_some(), true);
        }
        match place_of(cfg, dirfd, &at) {
            Place::Outside => {}
            place => return place,
        }
    }
    // A link past the kernel's bound: the kernel answers `ELOOP`, whatever
    // the chain names.
    Place::Outside
}

/// What the link at `path` (relative to `dirfd`) holds, if it is one. A
/// system call of its own, not the C library's `readlinkat`, which this
/// library stands in for. The caller's `errno` is kept.
fn link_target(dirfd: c_int, path: &[u8]) -> Option<Vec<u8>> {
    if path.is_empty() || path.contains(&0) {
        return None;
    }
    let mut c = Vec::with_capacity(path.len() + 1);
    c.extend_from_slice(path);
    c.push(0);
    let mut buf = [0u8; libc::PATH_MAX as usize];
    // SAFETY: this thread's errno.
    let saved = unsafe { *libc::__errno_location() };
    // SAFETY: a NUL-terminated path and a buffer of ours of the length given.
    let n = unsafe {
        libc::syscall(
            libc::SYS_readlinkat,
            dirfd,
            c.as_ptr(),
            buf.as_mut_ptr(),
            buf.len(),
        )
    };
    // SAFETY: this thread's errno.
    unsafe { *libc::__errno_location() = saved };
    if n <= 0 {
        return None;
    }
    Some(buf[..n as usize].to_vec())
}

fn place_of(cfg: &Config, dirfd: c_int, p: &[u8]) -> Place {
    let base = if p.first() == Some(&b'/') {
        Vec::new()
    } else {
        match base_of(dirfd) {
            // An empty path names nothing (the kernel's answer without
            // `AT_EMPTY_PATH`, which callers look for before this).
            Some(b) if b == b"\0" && p.is_empty() => return Place::Bad(libc::ENOENT),
            Some(b) if b == b"\0" => return Place::Bad(libc::ENOTDIR),
            Some(b) => b,
            None => return Place::Outside,
        }
    };
    let full = normalise(&base, p);
    if let Some(at) = first_dot_dot(p) {
        // `$DIR/f/..` where `f` is a file of the store: the kernel stops at
        // `f`, which is not a directory (on disk, the store's directory has
        // no `f`: its look would say nothing is there).
        // The name before the `..` may be the store's by its path, or
        // through a link to the store's directory (`$OUT/l/f/..` where `l`
        // names it), which one `stat` of its directory tells.
        let before = normalise(&base, &p[..at]);
        if let Some(Place::Inside(n)) = relative_to(&before, &cfg.dir)
            .or_else(|| cfg.canonical.as_ref().and_then(|c| relative_to(&before, c)))
            .or_else(|| through_a_link(cfg, &before))
        {
            if below_a_name(&n) == libc::ENOTDIR {
                return Place::Bad(libc::ENOTDIR);
            }
            // `$DIR/nx/..` where the store has no `nx`, nor the directory on
            // disk: the kernel stops at `nx` (a rename or link to such a path
            // must not be taken for one that leaves the store).
            if !on_disk(&before) {
                return Place::Bad(libc::ENOENT);
            }
        }
        return match by_the_kernel(cfg, dirfd, p) {
            Place::Inside(_) if names_a_directory(p) => Place::Bad(libc::ENOTDIR),
            place => place,
        };
    }
    let place = relative_to(&full, &cfg.dir)
        .or_else(|| cfg.canonical.as_ref().and_then(|c| relative_to(&full, c)))
        .or_else(|| through_a_link(cfg, &full));
    match place {
        // `$DIR/f/` or `$DIR/f/.`: as the kernel says of a file so named,
        // or of nothing (an unlink, a truncating open or a rename must not
        // act on `f`).
        Some(Place::Inside(n)) if names_a_directory(p) => Place::Bad(below_a_name(&n)),
        Some(Place::Inside(n)) if n.contains('/') => Place::Bad(below_a_name(&n)),
        Some(place) => place,
        None => Place::Outside,
    }
}

/// Whether something (a link not followed) is at the absolute `path` on
/// disk. The caller's `errno` is kept.
fn on_disk(path: &[u8]) -> bool {
    if path.contains(&0) {
        return true;
    }
    let mut c = Vec::with_capacity(path.len() + 1);
    c.extend_from_slice(path);
    c.push(0);
    // SAFETY: `stat` is plain data, for which all zeros is a valid value.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: this thread's errno.
    let saved = unsafe { *libc::__errno_location() };
    // SAFETY: a NUL-terminated path and a `stat` of ours; a system call of
    // its own, not the C library's `fstatat`, which this library stands in for.
    let r = unsafe {
        libc::syscall(
            libc::SYS_newfstatat,
            libc::AT_FDCWD,
            c.as_ptr(),
            &mut st as *mut libc::stat,
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    // SAFETY: this thread's errno.
    unsafe { *libc::__errno_location() = saved };
    r == 0
}

/// Where the first `..` component of `p` starts, if it has one.
fn first_dot_dot(p: &[u8]) -> Option<usize> {
    let mut at = 0;
    for c in p.split(|&b| b == b'/') {
        if c == b".." {
            return Some(at);
        }
        at += c.len() + 1;
    }
    None
}

/// The kernel's answer for a path below a name of the store (`$DIR/f/x`),
/// which has no directories: `ENOTDIR` when `f` is a file of it (a path
/// through a file), `ENOENT` when it is nothing.
/// What the kernel says of a file of the store named where a directory is
/// wanted (`opendir`, `O_DIRECTORY`, `rmdir`): `ENOTDIR` when the store has
/// it, `ENOENT` when not.
pub(crate) fn not_a_directory(name: &str) -> i32 {
    below_a_name(name)
}

fn below_a_name(name: &str) -> i32 {
    let first = name.split('/').next().unwrap_or_default();
    match state::state() {
        Ok(s) if s.cs.store().info(first).is_ok() => libc::ENOTDIR,
        _ => libc::ENOENT,
    }
}

/// A file of the store reached through another name of its directory: a
/// path whose directory is the store's by device and inode once the kernel
/// follows its links (`/srv/db/f` where `/srv/db` links to `SETCACHE_DIR`),
/// which the lexical look above does not see. Without it such a path went to
/// the kernel, which made a file in the store's directory on disk that no
/// call of the store sees. One `stat` of the path's directory, for paths
/// outside the store only.
fn through_a_link(cfg: &Config, full: &[u8]) -> Option<Place> {
    match by_the_kernel(cfg, libc::AT_FDCWD, full) {
        Place::Outside => None,
        place => Some(place),
    }
}

/// Where a path holding a `..` points, as the kernel resolves it: the links
/// before a `..` are followed first (`q/..` is the parent of `q`'s target),
/// which a lexical cleaning does not do. Its directory, looked at by device
/// and inode, decides.
fn by_the_kernel(cfg: &Config, dirfd: c_int, p: &[u8]) -> Place {
    let (dir, name): (&[u8], &[u8]) = match p.iter().rposition(|&b| b == b'/') {
        Some(0) => (b"/", &p[1..]),
        Some(i) => (&p[..i], &p[i + 1..]),
        None => (b".", p),
    };
    if matches!(name, b"" | b"." | b"..") {
        // The path names a directory: the store's own, or another.
        return if is_store_dir(cfg, dirfd, p) {
            Place::Root
        } else {
            Place::Outside
        };
    }
    if is_store_dir(cfg, dirfd, dir) {
        inside(name)
    } else if names_the_store(cfg, name) && is_store_dir(cfg, dirfd, p) {
        // The directory itself by its own name in its parent, reached
        // through a `..` or a link (`../st` from inside it): a `rmdir` or
        // `rename` of it must not go to the kernel, whose copy is empty.
        Place::Root
    } else {
        Place::Outside
    }
}

/// Whether `name` is the store's directory's own name (its last component,
/// as given or resolved): only a path ending so can name the directory
/// itself rather than a link to it, which is what one more `stat` decides.
fn names_the_store(cfg: &Config, name: &[u8]) -> bool {
    let last = |d: &[u8]| d.rsplit(|&b| b == b'/').next().map(<[u8]>::to_vec);
    last(&cfg.dir).as_deref() == Some(name)
        || cfg.canonical.as_deref().and_then(last).as_deref() == Some(name)
}

fn inside(name: &[u8]) -> Place {
    match std::str::from_utf8(name) {
        Ok(n) => Place::Inside(n.to_string()),
        Err(_) => Place::Bad(libc::EINVAL),
    }
}

/// Whether `path` (relative to `dirfd`), its links followed, is the store's
/// directory. The caller's `errno` is kept.
fn is_store_dir(cfg: &Config, dirfd: c_int, path: &[u8]) -> bool {
    if path.contains(&0) {
        return false;
    }
    let mut c = Vec::with_capacity(path.len() + 1);
    c.extend_from_slice(path);
    c.push(0);
    // SAFETY: this thread's errno.
    let saved = unsafe { *libc::__errno_location() };
    // SAFETY: a zeroed stat64 is valid, and the call fills it.
    let mut st: libc::stat64 = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a buffer of ours (the C library's call, not ours).
    let rc = unsafe { crate::real::fstatat64()(dirfd, c.as_ptr().cast(), &mut st, 0) };
    if rc != 0 {
        // SAFETY: this thread's errno.
        unsafe { *libc::__errno_location() = saved };
        return false;
    }
    st.st_mode & libc::S_IFMT == libc::S_IFDIR && (st.st_dev, st.st_ino) == cfg.dev_ino
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_cleaned_lexically() {
        assert_eq!(normalise(b"", b"/a//b/./c/"), b"/a/b/c");
        assert_eq!(normalise(b"/x/y", b"../z"), b"/x/z");
        assert_eq!(normalise(b"/x", b"/../.."), b"/");
        assert!(under(b"/d/f", b"/d"));
        assert!(under(b"/d", b"/d"));
        assert!(!under(b"/dd/f", b"/d"));
        assert!(under(b"/anything", b"/"));
    }
}
