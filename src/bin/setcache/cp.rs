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
    /// Replace the destination if it exists
    #[arg(long)]
    force: bool,
    /// Page cache size for the copy
    #[arg(long, default_value = "64M", value_parser = size_arg)]
    cache_size: u64,
    /// What to copy: a plain path, or store:NAME
    src: String,
    /// Where to: a plain path, or store:NAME
    dst: String,
}

/// One side of a copy.
enum Side {
    Plain(PathBuf),
    Stored(String),
}

fn side(s: &str) -> Side {
    match s.strip_prefix("store:") {
        Some(name) => Side::Stored(name.to_string()),
        None => Side::Plain(PathBuf::from(s)),
    }
}

/// Create store file `name` of `len` bytes (replacing it with `force`).
fn create(cs: &CachedStore, name: &str, len: u64, force: bool) -> Result<CachedFile, String> {
    match cs.create(name, len, LayoutKind::Stripe) {
        Err(Error::FileExists(_)) if force => {
            cs.delete(name).map_err(|e| e.to_string())?;
            cs.create(name, len, LayoutKind::Stripe)
                .map_err(|e| e.to_string())
        }
        Err(Error::FileExists(_)) => {
            Err(format!("store:{name} exists (give --force to replace it)"))
        }
        r => r.map_err(|e| e.to_string()),
    }
}

pub(crate) fn run(a: CpArgs) -> Result<(), String> {
    let (src, dst) = (side(&a.src), side(&a.dst));
    if let (Side::Plain(_), Side::Plain(_)) = (&src, &dst) {
        return Err("one side of the copy must be a file of the store, written store:NAME".into());
    }
    let store = Store::open(&a.devices, StoreOptions::default()).map_err(|e| e.to_string())?;
    let cache = CacheOptions {
        size: usize::try_from(a.cache_size).map_err(|_| "--cache-size is too large")?,
        ..CacheOptions::default()
    };
    let cs = CachedStore::new(store, cache).map_err(|e| e.to_string())?;
    let start = Instant::now();
    let mut buf = vec![0u8; CHUNK];
    let copied = match (&src, &dst) {
        (Side::Plain(from), Side::Stored(to)) => {
            let mut f = std::fs::File::open(from)
                .map_err(|e| format!("cannot open {}: {e}", from.display()))?;
            let len = f
                .metadata()
                .map_err(|e| format!("cannot stat {}: {e}", from.display()))?
                .len();
            let out = create(&cs, to, len, a.force)?;
            let mut at = 0u64;
            while at < len {
                let n = f
                    .read(&mut buf)
                    .map_err(|e| format!("read {} at {at}: {e}", from.display()))?;
                if n == 0 {
                    return Err(format!(
                        "{} ended at {at} bytes, short of the {len} it had when the copy began",
                        from.display()
                    ));
                }
                let n = n.min((len - at) as usize);
                out.write_at(at, &buf[..n]).map_err(|e| e.to_string())?;
                at += n as u64;
            }
            out.sync().map_err(|e| e.to_string())?;
            len
        }
        (Side::Stored(from), Side::Plain(to)) => {
            let f = cs.open_file_read_only(from).map_err(|e| e.to_string())?;
            let mut opts = OpenOptions::new();
            opts.write(true);
            if a.force {
                opts.create(true).truncate(true);
            } else {
                opts.create_new(true);
            }
            let mut out = opts.open(to).map_err(|e| match e.kind() {
                std::io::ErrorKind::AlreadyExists => {
                    format!("{} exists (give --force to replace it)", to.display())
                }
                _ => format!("cannot create {}: {e}", to.display()),
            })?;
            let len = f.len();
            let mut at = 0u64;
            while at < len {
                let n = f.read_at(at, &mut buf).map_err(|e| e.to_string())?;
                out.write_all(&buf[..n])
                    .map_err(|e| format!("write {}: {e}", to.display()))?;
                at += n as u64;
            }
            out.sync_all()
                .map_err(|e| format!("sync {}: {e}", to.display()))?;
            len
        }
        (Side::Stored(from), Side::Stored(to)) => {
            if from == to {
                return Err(format!("store:{from} is both source and destination"));
            }
            let f = cs.open_file_read_only(from).map_err(|e| e.to_string())?;
            let len = f.len();
            let out = create(&cs, to, len, a.force)?;
            let mut at = 0u64;
            while at < len {
                let n = f.read_at(at, &mut buf).map_err(|e| e.to_string())?;
                out.write_at(at, &buf[..n]).map_err(|e| e.to_string())?;
                at += n as u64;
            }
            out.sync().map_err(|e| e.to_string())?;
            len
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
