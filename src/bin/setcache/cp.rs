//! `setcache cp`: copy a file from a plain path into a store, out of a store
//! to a plain path, or between two names of one store. A store side is
//! written `store:NAME`; the store's device directories are `--devices`.

use std::fs::OpenOptions;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::time::Instant;

use setcache::{CacheOptions, CachedFile, CachedStore, Error, LayoutKind, Store, StoreOptions};

use crate::bench::size::size_arg;

/// Bytes moved per call.
const CHUNK: usize = 1 << 20;

#[derive(clap::Args, Debug)]
pub(crate) struct CpArgs {
    /// The store's device directories, comma separated (each must exist)
    #[arg(long, value_delimiter = ',', required = true)]
    devices: Vec<PathBuf>,
    /// Replace the destination if it exists (a plain file is replaced by a
    /// new one with its mode and owner: other hard links to it keep the old
    /// contents; a symbolic link is followed to its file)
    #[arg(long)]
    force: bool,
    /// Page cache size for the copy
    #[arg(long, default_value = "64M", value_parser = size_arg)]
    cache_size: u64,
    /// What to copy: a plain path (any bytes), or store:NAME
    src: std::ffi::OsString,
    /// Where to: a plain path (any bytes), or store:NAME
    dst: std::ffi::OsString,
}

/// One side of a copy.
enum Side {
    Plain(PathBuf),
    Stored(String),
}

/// A plain path may be any bytes, as the system's; a store name is UTF-8.
fn side(s: &std::ffi::OsStr) -> Result<Side, String> {
    use std::os::unix::ffi::OsStrExt;
    match s.as_bytes().strip_prefix(b"store:") {
        Some(name) => match std::str::from_utf8(name) {
            Ok(name) => Ok(Side::Stored(name.to_string())),
            Err(_) => Err(format!(
                "store name {:?} is not UTF-8: the store's names are text",
                String::from_utf8_lossy(name)
            )),
        },
        None => Ok(Side::Plain(PathBuf::from(s))),
    }
}

/// A copy into the store is written under a name of its own and renamed to
/// `name` (over it, with `force`) only once it is whole and synced: a copy
/// that fails or is stopped part way leaves no file under `name`, and an old
/// file under it as it was. Returns the temporary name and its file.
fn start_copy(
    cs: &CachedStore,
    name: &str,
    len: u64,
    force: bool,
) -> Result<(String, CachedFile), String> {
    // A bad name is named as given, not as the temporary name made of it.
    match cs.store().info(name) {
        Ok(_) | Err(Error::FileNotFound(_)) => {}
        Err(e) => return Err(format!("store:{name}: {e}")),
    }
    if !force && cs.store().info(name).is_ok() {
        return Err(format!("store:{name} exists (give --force to replace it)"));
    }
    // The name's start, cut so that the temporary name stays within the
    // store's 200 bytes however long the name given is.
    let suffix = format!(".cp-{}", std::process::id());
    let mut keep = name.len().min(200 - suffix.len());
    while !name.is_char_boundary(keep) {
        keep -= 1;
    }
    let tmp = format!("{}{suffix}", &name[..keep]);
    if cs.store().info(&tmp).is_ok() {
        return Err(format!(
            "store:{tmp}, the copy's temporary name, exists (left by a copy stopped part \
             way?): remove it first"
        ));
    }
    let f = cs
        .create(&tmp, len, LayoutKind::Stripe)
        .map_err(|e| e.to_string())?;
    Ok((tmp, f))
}

/// Finish a copy begun by `start_copy`: on success the temporary file,
/// synced, takes `name`; on failure it is deleted.
fn end_copy(
    cs: &CachedStore,
    tmp: &str,
    f: CachedFile,
    name: &str,
    force: bool,
    r: Result<u64, String>,
) -> Result<u64, String> {
    let r = r.and_then(|n| f.sync().map(|()| n).map_err(|e| e.to_string()));
    drop(f);
    let r = r.and_then(|n| {
        let moved = if force {
            cs.replace(tmp, name)
        } else {
            cs.rename(tmp, name)
        };
        moved.map(|()| n).map_err(|e| match e {
            Error::FileExists(_) => format!("store:{name} exists (give --force to replace it)"),
            e => e.to_string(),
        })
    });
    if r.is_err() {
        let _ = cs.delete(tmp);
    }
    r
}

/// An error if Ctrl-C came.
fn go_on() -> Result<(), String> {
    if crate::bench::interrupted() {
        return Err("interrupted".into());
    }
    Ok(())
}

/// Write all of store file `f` to `out` (at `path`), chunk by chunk. With
/// `sparse` (`out` a new, empty regular file), chunks of zeros are skipped
/// and the length set at the end, so that holes stay holes.
fn write_out(
    f: &CachedFile,
    out: &mut std::fs::File,
    path: &std::path::Path,
    buf: &mut [u8],
    sparse: bool,
) -> Result<u64, String> {
    use std::io::{Seek, SeekFrom};
    let len = f.len();
    let mut at = 0u64;
    let failed = |e: std::io::Error| format!("write {}: {e}", path.display());
    while at < len {
        go_on()?;
        let n = f.read_at(at, buf).map_err(|e| e.to_string())?;
        if sparse {
            for r in data_runs(&buf[..n]) {
                out.seek(SeekFrom::Start(at + r.start as u64))
                    .map_err(failed)?;
                out.write_all(&buf[r]).map_err(failed)?;
            }
        } else {
            out.write_all(&buf[..n]).map_err(failed)?;
        }
        at += n as u64;
    }
    if sparse {
        out.set_len(len).map_err(failed)?;
    }
    Ok(len)
}

/// The runs of `b` (as ranges) that hold anything but zeros, in pieces of
/// `HOLE` bytes: what a sparse copy writes, leaving the rest holes.
fn data_runs(b: &[u8]) -> Vec<std::ops::Range<usize>> {
    let mut runs: Vec<std::ops::Range<usize>> = Vec::new();
    for (k, piece) in b.chunks(HOLE).enumerate() {
        if piece.iter().all(|&x| x == 0) {
            continue;
        }
        let (from, to) = (k * HOLE, k * HOLE + piece.len());
        match runs.last_mut() {
            Some(r) if r.end == from => r.end = to,
            _ => runs.push(from..to),
        }
    }
    runs
}

/// The smallest hole a copy keeps: a page.
const HOLE: usize = 4096;

/// Copy store file `f` to the plain path `to`: into a new file beside it,
/// synced, then renamed to `to` (over it only with `force`), so that a copy
/// that fails or is stopped leaves `to` as it was. A device or a pipe is
/// written into. Refused onto one of the store file's own backing files,
/// which the copy would destroy, and anywhere inside a device directory of
/// the store (`devices`), where it would overwrite another file's or make a
/// name the store takes for one of its own (a directory below one is left
/// alone: the store makes nothing there).
fn copy_out(
    cs: &CachedStore,
    devices: &[PathBuf],
    from: &str,
    to: &std::path::Path,
    force: bool,
    buf: &mut [u8],
) -> Result<u64, String> {
    use std::os::unix::fs::MetadataExt;
    let f = cs.open_file_read_only(from).map_err(|e| e.to_string())?;
    // A symbolic link is written through, to the file it names (as cp(1)
    // does); one that names nothing is refused, as cp(1) refuses it. A
    // link the kernel follows to no path (`/dev/stdout` on a pipe) names a
    // pipe or a device, written into.
    let resolved;
    let to = if std::fs::symlink_metadata(to).is_ok_and(|m| m.file_type().is_symlink()) {
        match std::fs::canonicalize(to) {
            Ok(p) => {
                resolved = p;
                resolved.as_path()
            }
            Err(e) => match std::fs::metadata(to) {
                Ok(m) if !m.is_file() && !m.is_dir() => {
                    let mut out = open_to_write(to, &m)?;
                    return write_out(&f, &mut out, to, buf, false);
                }
                _ => {
                    return Err(format!(
                        "{} is a symbolic link to no file ({e}): not writing through it",
                        to.display()
                    ));
                }
            },
        }
    } else {
        to
    };
    let existing = std::fs::metadata(to).ok();
    if let Some(m) = &existing {
        if m.is_dir() {
            return Err(format!("{} is a directory", to.display()));
        }
        let own = cs
            .store()
            .backing_paths(from)
            .map_err(|e| e.to_string())?
            .into_iter()
            .any(|p| std::fs::metadata(p).is_ok_and(|b| (b.dev(), b.ino()) == (m.dev(), m.ino())));
        if own {
            return Err(format!(
                "{} is a backing file of store:{from}: the copy would destroy its source",
                to.display()
            ));
        }
    }
    // Another file's backing file, or a new name the store would take for
    // one of its own.
    if let Some(root) = in_device_dir(to, devices) {
        return Err(format!(
            "{} is inside the store's device directory {}: writing there would damage the \
             store, whose files' backing files live there",
            to.display(),
            root.display()
        ));
    }
    let mut replaced = None;
    if let Some(m) = existing {
        if !m.is_file() {
            // A device or a pipe is written into, as cp(1) does: nothing is
            // replaced.
            let mut out = open_to_write(to, &m)?;
            return write_out(&f, &mut out, to, buf, false);
        }
        if !force {
            return Err(format!(
                "{} exists (give --force to replace it)",
                to.display()
            ));
        }
        replaced = Some(m);
    }
    let name = to.file_name().map(|n| n.to_string_lossy().into_owned());
    let name = name.ok_or_else(|| format!("{} names no file", to.display()))?;
    let pid = std::process::id();
    let mut tmp_name = format!(".{name}.cp-{pid}");
    if tmp_name.len() > NAME_MAX {
        // A name near the longest a directory takes: a short one of its own.
        use std::hash::{Hash, Hasher};
        let mut h = std::hash::DefaultHasher::new();
        name.hash(&mut h);
        tmp_name = format!(".cp-{pid}-{:016x}", h.finish());
    }
    let tmp = to.with_file_name(tmp_name);
    let mut out = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&tmp)
        .map_err(|e| format!("cannot create {}: {e}", tmp.display()))?;
    let mut copy = || -> Result<u64, String> {
        if let Some(m) = &replaced {
            // The file replaced keeps its mode (not the umask's, which may
            // open it to others) and, where this process may set it, its
            // owner.
            let _ = std::os::unix::fs::fchown(&out, Some(m.uid()), Some(m.gid()));
            out.set_permissions(m.permissions())
                .map_err(|e| format!("cannot set the mode of {}: {e}", tmp.display()))?;
        }
        let len = write_out(&f, &mut out, &tmp, buf, true)?;
        out.sync_all()
            .map_err(|e| format!("sync {}: {e}", tmp.display()))?;
        // Without --force, a file that appeared at `to` meanwhile stays: a
        // link fails if the name exists, where a rename would replace it.
        let placed = if force {
            std::fs::rename(&tmp, to)
        } else {
            std::fs::hard_link(&tmp, to).or_else(|e| {
                // A file system without hard links: a rename, if the name
                // is still free.
                if e.kind() == std::io::ErrorKind::AlreadyExists || to.exists() {
                    Err(std::io::Error::from(std::io::ErrorKind::AlreadyExists))
                } else {
                    std::fs::rename(&tmp, to)
                }
            })
        };
        placed.map_err(|e| match e.kind() {
            std::io::ErrorKind::AlreadyExists => {
                format!("{} exists (give --force to replace it)", to.display())
            }
            _ => format!("cannot name the copy {}: {e}", to.display()),
        })?;
        Ok(len)
    };
    let r = copy();
    // Renamed: gone already; linked: its first name goes; failed: all of it.
    let _ = std::fs::remove_file(&tmp);
    r
}

/// The longest name a directory entry takes (Linux's `NAME_MAX`).
const NAME_MAX: usize = 255;

/// The device directory of the store (one of `devices`) that plain path `to`
/// would be made in, if any: its directory is one of them (the same
/// directory, however reached: a symbolic link, `..`, a bind mount).
fn in_device_dir(to: &std::path::Path, devices: &[PathBuf]) -> Option<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let parent = match to.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => std::path::Path::new("."),
    };
    let dir = std::fs::metadata(parent).ok()?;
    devices
        .iter()
        .find(|d| std::fs::metadata(d).is_ok_and(|m| (m.dev(), m.ino()) == (dir.dev(), dir.ino())))
        .cloned()
}

/// Open `path` (a device or a FIFO, `m` its metadata) to write into. A
/// FIFO's open waits for a reader: it is tried without waiting, a fifth of
/// a second apart, so that Ctrl-C stops the wait.
fn open_to_write(path: &std::path::Path, m: &std::fs::Metadata) -> Result<std::fs::File, String> {
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let cannot = |e: std::io::Error| format!("cannot open {}: {e}", path.display());
    if !m.file_type().is_fifo() {
        return OpenOptions::new().write(true).open(path).map_err(cannot);
    }
    loop {
        go_on()?;
        match OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(path)
        {
            Ok(f) => return blocking(f).map_err(cannot),
            Err(e) if e.raw_os_error() == Some(libc::ENXIO) => {
                std::thread::sleep(std::time::Duration::from_millis(200));
            }
            Err(e) => return Err(cannot(e)),
        }
    }
}

/// Open `path` to read from; a FIFO without waiting for a writer (its
/// reads then wait in `copy_in`'s poll, which Ctrl-C stops).
fn open_to_read(path: &std::path::Path) -> Result<std::fs::File, String> {
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let cannot = |e: std::io::Error| format!("cannot open {}: {e}", path.display());
    let fifo = std::fs::metadata(path).is_ok_and(|m| m.file_type().is_fifo());
    if !fifo {
        return std::fs::File::open(path).map_err(cannot);
    }
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(cannot)?;
    blocking(f).map_err(cannot)
}

/// `f` with `O_NONBLOCK` cleared.
fn blocking(f: std::fs::File) -> std::io::Result<std::fs::File> {
    use std::os::fd::AsRawFd;
    // SAFETY: reads the status flags of a descriptor this function owns.
    let flags = unsafe { libc::fcntl(f.as_raw_fd(), libc::F_GETFL) };
    if flags < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: sets the status flags of the same descriptor.
    let r = unsafe { libc::fcntl(f.as_raw_fd(), libc::F_SETFL, flags & !libc::O_NONBLOCK) };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(f)
}

pub(crate) fn run(a: CpArgs) -> Result<(), String> {
    let (src, dst) = (side(&a.src)?, side(&a.dst)?);
    if let (Side::Plain(_), Side::Plain(_)) = (&src, &dst) {
        return Err("one side of the copy must be a file of the store, written store:NAME".into());
    }
    // Ctrl-C stops the copy at its next chunk; what it made goes.
    crate::bench::install_sigint();
    // The device directories' lock files that this run makes go with it.
    let made_locks: Vec<&PathBuf> = a
        .devices
        .iter()
        .filter(|d| d.is_dir() && !d.join(".setcache-lock").exists())
        .collect();
    let r = copy(&a, &src, &dst);
    for d in made_locks {
        let _ = Store::remove_lock_file(d);
    }
    r
}

/// Copy `f` to its end into `out`, made `len` bytes long (0 when the
/// source's length is not known: a pipe's, a device's, a /proc file's); the
/// store file grows as bytes come past it, so a source that grows while it
/// is copied is copied whole, as far as its end when the copy reaches it.
/// A source found shorter than `len` is an error (it was cut meanwhile).
/// The bytes copied.
/// `waits`: the source's descriptor when it is not a regular file (a pipe, a
/// FIFO, a terminal), whose reads may wait for ever: each read then waits
/// first in `poll`, a fifth of a second at a time, so that a signal that
/// came meanwhile is seen (a read interrupted by the handler is restarted).
fn copy_in(
    f: &mut impl Read,
    waits: Option<std::os::fd::RawFd>,
    name: &str,
    len: u64,
    out: &CachedFile,
    buf: &mut [u8],
) -> Result<u64, String> {
    let mut at = 0u64;
    loop {
        go_on()?;
        if let Some(fd) = waits {
            let mut p = libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one pollfd, on the stack, for the call's length.
            let r = unsafe { libc::poll(&mut p, 1, 200) };
            let eintr = || std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR);
            if r == 0 || (r < 0 && eintr()) {
                continue;
            }
            // Ready, ended, or an error (which the read then reports).
        }
        let n = f
            .read(buf)
            .map_err(|e| format!("read {name} at {at}: {e}"))?;
        if n == 0 {
            break;
        }
        if at + n as u64 > len {
            out.grow(at + n as u64).map_err(|e| e.to_string())?;
        }
        // The store file is new, zeros throughout: a hole stays one.
        for r in data_runs(&buf[..n]) {
            out.write_at(at + r.start as u64, &buf[r])
                .map_err(|e| e.to_string())?;
        }
        at += n as u64;
    }
    if at < len {
        return Err(format!(
            "{name} ended at {at} bytes, short of the {len} it had when the copy began"
        ));
    }
    Ok(at)
}

fn copy(a: &CpArgs, src: &Side, dst: &Side) -> Result<(), String> {
    let cache = CacheOptions {
        size: usize::try_from(a.cache_size).map_err(|_| "--cache-size is too large")?,
        ..CacheOptions::default()
    };
    <setcache::PageCache>::check(&cache)
        .map_err(|e| format!("--cache-size {}: {e}", a.cache_size))?;
    let store = Store::open(&a.devices, StoreOptions::default()).map_err(|e| e.to_string())?;
    let cs = CachedStore::new(store, cache).map_err(|e| e.to_string())?;
    let start = Instant::now();
    let mut buf = vec![0u8; CHUNK];
    let copied = match (src, dst) {
        (Side::Plain(from), Side::Stored(to)) => {
            let mut f = open_to_read(from)?;
            let meta = f
                .metadata()
                .map_err(|e| format!("cannot stat {}: {e}", from.display()))?;
            if meta.is_dir() {
                return Err(format!("{} is a directory", from.display()));
            }
            // A backing file of the store file the copy replaces.
            if cs.store().info(to).is_ok() {
                use std::os::unix::fs::MetadataExt;
                let own = cs
                    .store()
                    .backing_paths(to)
                    .map_err(|e| e.to_string())?
                    .into_iter()
                    .any(|p| {
                        std::fs::metadata(p)
                            .is_ok_and(|b| (b.dev(), b.ino()) == (meta.dev(), meta.ino()))
                    });
                if own {
                    return Err(format!(
                        "{} is a backing file of store:{to}: the copy would destroy its source",
                        from.display()
                    ));
                }
            }
            // A regular file's length is known (the store file is made that
            // long; one that grows meanwhile is copied to its end all the
            // same); a pipe's, a device's or a /proc file's is not (their
            // length reads 0): the store file grows as bytes come.
            let regular = meta.is_file() && meta.len() > 0;
            let len = if regular { meta.len() } else { 0 };
            let (tmp, out) = start_copy(&cs, to, len, a.force)?;
            use std::os::fd::AsRawFd;
            let waits = (!meta.is_file()).then(|| f.as_raw_fd());
            let r = copy_in(
                &mut f,
                waits,
                &from.display().to_string(),
                len,
                &out,
                &mut buf,
            );
            end_copy(&cs, &tmp, out, to, a.force, r)?
        }
        (Side::Stored(from), Side::Plain(to)) => {
            copy_out(&cs, &a.devices, from, to, a.force, &mut buf)?
        }
        (Side::Stored(from), Side::Stored(to)) => {
            if from == to {
                return Err(format!("store:{from} is both source and destination"));
            }
            let f = cs.open_file_read_only(from).map_err(|e| e.to_string())?;
            let len = f.len();
            let (tmp, out) = start_copy(&cs, to, len, a.force)?;
            let mut copy = || -> Result<u64, String> {
                let mut at = 0u64;
                while at < len {
                    go_on()?;
                    let n = f.read_at(at, &mut buf).map_err(|e| e.to_string())?;
                    for r in data_runs(&buf[..n]) {
                        out.write_at(at + r.start as u64, &buf[r])
                            .map_err(|e| e.to_string())?;
                    }
                    at += n as u64;
                }
                Ok(len)
            };
            let r = copy();
            end_copy(&cs, &tmp, out, to, a.force, r)?
        }
        (Side::Plain(_), Side::Plain(_)) => unreachable!("refused above"),
    };
    let secs = start.elapsed().as_secs_f64();
    let mib = copied as f64 / (1 << 20) as f64;
    say!(
        "copied {mib:.1} MiB ({copied} bytes) in {secs:.2} s ({:.0} MiB/s)",
        mib / secs.max(1e-9)
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A source that holds more bytes than its length said when the copy
    /// began (a file appended to meanwhile) is copied to its end, not cut
    /// at that length; one that holds fewer is an error.
    #[test]
    fn a_source_that_grows_while_copied_is_copied_whole() {
        let dir = std::env::temp_dir().join(format!("setcache-cp-grow-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let store = Store::open(&[&dir], StoreOptions::default()).unwrap();
        let cs = CachedStore::new(
            store,
            CacheOptions {
                size: 4 << 20,
                ..CacheOptions::default()
            },
        )
        .unwrap();
        let src: Vec<u8> = (0..(3 << 20) + 123).map(|i: u32| (i % 251) as u8).collect();
        let said = 1u64 << 20;
        let out = cs.create("grown", said, LayoutKind::Stripe).unwrap();
        let mut buf = vec![0u8; 1 << 16];
        let n = copy_in(&mut &src[..], None, "src", said, &out, &mut buf).unwrap();
        assert_eq!(
            n,
            src.len() as u64,
            "the copy stopped at the length it began with"
        );
        assert_eq!(out.len(), src.len() as u64);
        let mut back = vec![0u8; src.len()];
        out.read_at(0, &mut back).unwrap();
        assert!(back == src, "the bytes copied differ");
        let short = cs.create("short", said, LayoutKind::Stripe).unwrap();
        let e = copy_in(&mut &src[..1000], None, "src", said, &short, &mut buf).unwrap_err();
        assert!(e.contains("ended at 1000 bytes"), "{e}");
        drop((out, short, cs));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
