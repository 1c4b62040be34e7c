//! The bench's working directory, store and prefilled data file.

use std::ffi::CString;
use std::fs;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use setcache::{AlignedBuf, Error, File, HEADER_BYTES, Layout, Store, StoreOptions};

use super::config::Config;
use super::driver::interrupted;
use super::fsize;
use super::size::format_size;
use super::workload::{Rng, mix64};

/// Name of the bench file in the store.
pub(crate) const FILE_NAME: &str = "bench";
// The marker of a completely prefilled bench file, beside the device roots.
use super::config::MARKER;
/// The marker's text while the bench file is being made and filled.
const FILLING: &str = "being filled\n";
/// Prefill write size.
const CHUNK: usize = 1 << 20;

/// The directory the bench works in; removed at the end only if the bench made it
/// as a temporary directory.
pub(crate) struct Workspace {
    pub(crate) dir: PathBuf,
    temporary: bool,
}

impl Workspace {
    pub(crate) fn new(dir: Option<&Path>) -> Result<Workspace, String> {
        let Some(dir) = dir else {
            let nanos = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos());
            let dir =
                std::env::temp_dir().join(format!("setcache-bench-{}-{nanos}", std::process::id()));
            fs::create_dir(&dir)
                .map_err(|e| format!("cannot create temporary directory {}: {e}", dir.display()))?;
            return Ok(Workspace {
                dir,
                temporary: true,
            });
        };
        match fs::metadata(dir) {
            Ok(m) if !m.is_dir() => {
                return Err(format!("--dir {} is not a directory", dir.display()));
            }
            Ok(_) if !writable(dir) => {
                return Err(format!(
                    "--dir {} is read-only (this process may not write in it)",
                    dir.display()
                ));
            }
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                fs::create_dir_all(dir)
                    .map_err(|e| format!("cannot create --dir {}: {e}", dir.display()))?;
            }
            Err(e) => return Err(format!("--dir {}: {e}", dir.display())),
        }
        // Root ignores permission bits; a probe also catches read-only mounts.
        let probe = dir.join(format!(".setcache-probe-{}", std::process::id()));
        fs::write(&probe, b"")
            .map_err(|e| format!("--dir {} is not writable: {e}", dir.display()))?;
        let _ = fs::remove_file(&probe);
        Ok(Workspace {
            dir: dir.to_path_buf(),
            temporary: false,
        })
    }
}

impl Drop for Workspace {
    fn drop(&mut self) {
        if self.temporary
            && let Err(e) = fs::remove_dir_all(&self.dir)
        {
            say!("warning: could not remove {}: {e}", self.dir.display());
        }
    }
}

/// `DIR/dev0 .. DIR/devN-1`, created if missing.
pub(crate) fn device_roots(dir: &Path, devices: u32) -> Result<Vec<PathBuf>, String> {
    (0..devices)
        .map(|i| {
            let root = dir.join(format!("dev{i}"));
            fs::create_dir_all(&root)
                .map_err(|e| format!("cannot create {}: {e}", root.display()))?;
            Ok(root)
        })
        .collect()
}

pub(crate) fn open_store(cfg: &Config, roots: &[PathBuf]) -> Result<Store, String> {
    let in_flight = cfg.a.iodepth as usize * cfg.max_threads();
    let opts = StoreOptions {
        engine: cfg.io_engine(),
        block_pages: cfg.a.block_pages,
        io_depth: in_flight.next_power_of_two().clamp(32, 4096) as u32,
        psync_threads: in_flight.clamp(1, 64),
        ..StoreOptions::default()
    };
    Store::open(roots, opts).map_err(|e| format!("cannot open the store: {e}"))
}

fn marker_text(cfg: &Config, block_bytes: u64) -> String {
    format!(
        "size={} layout={} devices={} block_bytes={block_bytes}\n",
        cfg.a.file_size, cfg.a.layout, cfg.a.devices
    )
}

/// Refuse a bench file whose backing files would reach past the file-size
/// limit (`ulimit -f`): the prefill, and any write, past it would fail.
fn check_file_size_limit(store: &Store, cfg: &Config) -> Result<(), String> {
    let Some(limit) = fsize::limit() else {
        return Ok(());
    };
    let devices = cfg.a.devices as usize;
    let layout = Layout::new(cfg.a.layout, devices, store.block_bytes())
        .map_err(|e| format!("--layout {}: {e}", cfg.a.layout))?;
    let need = HEADER_BYTES.saturating_add(layout.device_bytes(cfg.a.file_size));
    if need > limit {
        let biggest = store
            .backing_paths(FILE_NAME)
            .into_iter()
            .flatten()
            .next()
            .map_or(String::new(), |p| format!(" such as {}", p.display()));
        return Err(format!(
            "--file-size {} needs backing files{biggest} of up to {need} bytes \
             (the data over {devices} device(s) plus a {HEADER_BYTES}-byte header), above the \
             file-size limit of {limit} bytes (`ulimit -f`): raise the limit or choose a smaller \
             --file-size",
            format_size(cfg.a.file_size)
        ));
    }
    Ok(())
}

/// Bytes free to unprivileged users on the file system of `path` (`statvfs`),
/// and its block size.
fn free_space(path: &Path) -> std::io::Result<(u64, u64)> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    // SAFETY: `statvfs` is plain data; zeroed is a valid value to overwrite.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a NUL-terminated path and `st` a struct statvfs fills.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let block = (st.f_frsize as u64).max(1);
    Ok(((st.f_bavail as u64).saturating_mul(block), block))
}

/// Refuse a bench file that the file systems of the device roots have no
/// room for, before anything is written or deleted: the prefill would
/// otherwise write until the disk is full. The backing files of an old bench
/// file, deleted before the new one is made, count as free.
fn check_free_space(store: &Store, cfg: &Config) -> Result<(), String> {
    let layout = Layout::new(cfg.a.layout, cfg.a.devices as usize, store.block_bytes())
        .map_err(|e| format!("--layout {}: {e}", cfg.a.layout))?;
    // Per file system: its device roots, the size of each backing file to
    // write, the bytes the old backing files hold.
    let mut on: Vec<(u64, Vec<PathBuf>, Vec<u64>, u64)> = Vec::new();
    let paths = store.backing_paths(FILE_NAME).map_err(|e| e.to_string())?;
    for (i, path) in paths.into_iter().enumerate() {
        let root = path.parent().unwrap_or(Path::new(".")).to_path_buf();
        let dev = fs::metadata(&root)
            .map_err(|e| format!("cannot examine {}: {e}", root.display()))?
            .dev();
        let size = HEADER_BYTES.saturating_add(layout.device_end(i, cfg.a.file_size));
        let old = fs::metadata(&path).map_or(0, |m| m.blocks().saturating_mul(512));
        match on.iter_mut().find(|g| g.0 == dev) {
            Some(g) => {
                g.1.push(root);
                g.2.push(size);
                g.3 = g.3.saturating_add(old);
            }
            None => on.push((dev, vec![root], vec![size], old)),
        }
    }
    for (_, roots, sizes, old) in on {
        let (free, block) = match free_space(&roots[0]) {
            Ok(f) => f,
            Err(e) => {
                say!(
                    "note: cannot check the free space in {}: {e}",
                    roots[0].display()
                );
                continue;
            }
        };
        // Each backing file takes whole blocks.
        let need = sizes.iter().fold(0u64, |sum, &s| {
            sum.saturating_add(s.div_ceil(block).saturating_mul(block))
        });
        let have = free.saturating_add(old);
        if need > have {
            let dirs = match &roots[..] {
                [first, .., last] => format!("{} .. {}", first.display(), last.display()),
                _ => roots[0].display().to_string(),
            };
            let counted = if old > 0 {
                format!(" (counting the {old} bytes of the old bench file, deleted first)")
            } else {
                String::new()
            };
            return Err(format!(
                "--file-size {} needs {need} bytes of backing files in {dirs}, but its file \
                 system has {have} bytes free{counted}: free some space or choose a smaller \
                 --file-size",
                format_size(cfg.a.file_size)
            ));
        }
    }
    Ok(())
}

/// The prefilled bench file: reused when it matches, else (re)created and filled.
pub(crate) fn bench_file(store: &Store, cfg: &Config, dir: &Path) -> Result<File, String> {
    let marker = dir.join(MARKER);
    let want = marker_text(cfg, store.block_bytes());
    let stale = match store.info(FILE_NAME) {
        Ok(info) => {
            let matches = info.len == cfg.a.file_size
                && info.layout == cfg.a.layout
                && info.devices == cfg.a.devices as usize
                && info.block_bytes == store.block_bytes()
                && fs::read_to_string(&marker).is_ok_and(|m| m == want);
            if matches {
                // Reads of a file already filled pass the limit; writes do not.
                if cfg.a.rw.writes() {
                    check_file_size_limit(store, cfg)?;
                }
                say!("reusing the prefilled bench file in {}", dir.display());
                return store.open_file(FILE_NAME).map_err(|e| e.to_string());
            }
            Some("it does not match".to_string())
        }
        Err(Error::FileNotFound(_)) => None,
        // E.g. made for another number of devices.
        Err(e) => Some(format!("it cannot be opened: {e}")),
    };
    if let Some(why) = &stale
        && !marker.exists()
    {
        // No marker: not a file this bench made (it writes the marker before
        // it creates the file), so not one to delete.
        return Err(format!(
            "--dir {}: its store holds a file named {FILE_NAME:?} that the bench did not make \
             (no {MARKER} beside it; {why}): the bench will not delete it; remove it yourself \
             (its backing files are {FILE_NAME}.scf in the device directories) or choose \
             another --dir",
            dir.display()
        ));
    }
    check_free_space(store, cfg)?;
    check_file_size_limit(store, cfg)?;
    if let Some(why) = stale {
        say!("the bench file in {} is recreated: {why}", dir.display());
        let _ = fs::remove_file(&marker);
        store
            .delete(FILE_NAME)
            .map_err(|e| format!("cannot delete the old bench file: {e}"))?;
    }
    // The marker first, saying the file is being filled: a run stopped
    // before the end leaves a file the next run knows as its own.
    fs::write(&marker, FILLING).map_err(|e| format!("cannot write {}: {e}", marker.display()))?;
    let file = store
        .create(FILE_NAME, cfg.a.file_size, cfg.a.layout)
        .map_err(|e| format!("cannot create the bench file: {e}"))?;
    prefill(&file, cfg.a.seed)?;
    fs::write(&marker, want).map_err(|e| format!("cannot write {}: {e}", marker.display()))?;
    Ok(file)
}

/// Fill the file with nonzero pseudo-random bytes, 1 MiB writes from a few threads.
fn prefill(file: &File, seed: u64) -> Result<(), String> {
    let len = file.len();
    let chunks = len.div_ceil(CHUNK as u64);
    let threads = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .clamp(2, 4) as u64;
    say!(
        "prefilling {} bench file ({threads} threads)...",
        format_size(len)
    );
    let start = Instant::now();
    let gate = crate::threads::Gate::default();
    std::thread::scope(|s| {
        let handles = crate::threads::spawn_all(&gate, s, threads as usize, |t| {
            let t = t as u64;
            move || -> Result<(), String> {
                let mut buf = AlignedBuf::new(CHUNK);
                let mut c = t;
                while c < chunks {
                    if interrupted() {
                        return Err("interrupted during prefill".to_string());
                    }
                    let off = c * CHUNK as u64;
                    let n = (len - off).min(CHUNK as u64) as usize;
                    Rng::new(seed ^ mix64(c)).fill_nonzero(&mut buf[..n]);
                    file.write_at(off, &buf[..n])
                        .map_err(|e| format!("prefill: {e}"))?;
                    c += threads;
                }
                Ok(())
            }
        })?;
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .map(crate::threads::ran)
                    .unwrap_or_else(|_| Err("prefill thread panicked".to_string()))
            })
            .collect::<Result<Vec<()>, String>>()
    })?;
    file.sync().map_err(|e| format!("prefill: {e}"))?;
    let secs = start.elapsed().as_secs_f64();
    say!(
        "prefilled in {secs:.1} s ({:.0} MiB/s)",
        len as f64 / (1u64 << 20) as f64 / secs.max(1e-9)
    );
    Ok(())
}

/// Start cold: write back and drop the kernel's cached pages of the backing files.
pub(crate) fn cold(paths: &[PathBuf]) -> Result<(), String> {
    for p in paths {
        let f = fs::File::open(p).map_err(|e| format!("cannot open {}: {e}", p.display()))?;
        f.sync_data()
            .map_err(|e| format!("cannot sync {}: {e}", p.display()))?;
        // SAFETY: plain syscall on an open descriptor.
        let rc = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        if rc != 0 {
            return Err(format!(
                "cannot drop cached pages of {}: {}",
                p.display(),
                std::io::Error::from_raw_os_error(rc)
            ));
        }
    }
    Ok(())
}

/// Whether this process may make files in directory `dir` (`access(W_OK)`:
/// its user and groups, root's override, a read-only mount).
fn writable(dir: &Path) -> bool {
    let Ok(c) = CString::new(dir.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: `c` is a valid C string for the call's length.
    unsafe { libc::access(c.as_ptr(), libc::W_OK) == 0 }
}
