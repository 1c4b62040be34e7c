//! `setcache syncbench`: what a `sync` of a cached file costs, against the
//! pages it finds dirty and the size of the cache. For each cache size a
//! store is made in `--dir` (one device) with a cache of that size and no
//! flusher (so the pages written stay dirty until the sync); then, for each
//! count of dirty pages, `--rounds` times: write that many distinct random
//! 4 KiB pages of a file, and time `CachedFile::sync`. A sync of 0 dirty
//! pages is a sync of a clean file.

use std::time::Instant;

use clap::Args;
use setcache::{CacheOptions, CachedStore, FlushOptions, LayoutKind, Store, StoreOptions};

use crate::bench::rng::Rng;
use crate::bench::size::{format_size, parse_size};
use crate::bench::{install_sigint, interrupted};

/// Time `sync` of a cached file against its dirty pages and the cache size.
#[derive(Args, Debug)]
pub(crate) struct SyncArgs {
    /// Directory for the store (one device); emptied of the bench's file after.
    #[arg(long)]
    dir: std::path::PathBuf,
    /// Cache sizes (comma-separated).
    #[arg(long, default_value = "64M,6G", value_delimiter = ',')]
    cache_size: Vec<String>,
    /// Dirty pages before each sync (comma-separated), each at most 65536.
    #[arg(long, default_value = "0,1,16,256,4096", value_delimiter = ',')]
    dirty: Vec<usize>,
    /// The file's size; it must hold the largest dirty count in pages.
    #[arg(long, default_value = "1G")]
    file_size: String,
    /// Syncs timed per row (1 to 100000); the median and the 90th percentile
    /// are reported.
    #[arg(long, default_value_t = 21)]
    rounds: usize,
}

pub(crate) fn run(a: SyncArgs) -> Result<(), String> {
    let file_size = parse_size(&a.file_size).map_err(|e| format!("--file-size: {e}"))?;
    let pages = file_size / 4096;
    // The dirty pages are whole pages of the file: a file of none has
    // nothing to sync.
    if pages == 0 {
        return Err(format!(
            "--file-size {}: give the file one 4 KiB page at least",
            a.file_size
        ));
    }
    if !(1..=100_000).contains(&a.rounds) {
        return Err(format!("--rounds {} is outside 1..=100000", a.rounds));
    }
    if let Some(&d) = a.dirty.iter().find(|&&d| d > 65536) {
        return Err(format!("--dirty {d} is above 65536"));
    }
    if let Some(&d) = a.dirty.iter().find(|&&d| d as u64 > pages) {
        return Err(format!(
            "--dirty {d} is above the file's {pages} pages (--file-size {}): give a larger \
             --file-size",
            a.file_size
        ));
    }
    let mut sizes = Vec::new();
    for c in &a.cache_size {
        let size = parse_size(c).map_err(|e| format!("--cache-size: {e}"))?;
        // Each size is checked now, not once the sizes before it have run.
        let opts = CacheOptions {
            size: usize::try_from(size).map_err(|_| format!("--cache-size {c}: too large"))?,
            ..CacheOptions::default()
        };
        <setcache::PageCache>::check(&opts).map_err(|e| format!("--cache-size {c}: {e}"))?;
        setcache::cache::check_memory(size, || format!("--cache-size {c}"))
            .map_err(|e| e.to_string())?;
        sizes.push(size);
    }
    // The dirty pages must stay in the cache until the sync (there is no
    // flusher): a count past half the cache's pages would have many of them
    // written back as victims first, and the row would name a count the
    // sync never saw.
    let most = a.dirty.iter().copied().max().unwrap_or(0) as u64;
    if let Some(&small) = sizes.iter().find(|&&s| most > s / 4096 / 2) {
        return Err(format!(
            "--dirty {most} is more than half the pages of --cache-size {} ({} pages): \
             most would be written back before the sync; give a larger cache or fewer \
             dirty pages",
            format_size(small),
            small / 4096
        ));
    }
    if !a.dir.is_dir() {
        return Err(format!("--dir {} is not a directory", a.dir.display()));
    }
    // Ctrl-C ends the run between syncs; the file is deleted as after any
    // other ending. The store's lock file goes too if this run made it.
    install_sigint();
    let made_lock = !a.dir.join(".setcache-lock").exists();
    let result = sizes_rows(&a, &sizes, file_size, pages);
    if made_lock {
        // The store is closed: its lock file goes, unless a store opened
        // meanwhile holds it.
        let _ = Store::remove_lock_file(&a.dir);
    }
    result
}

/// Every cache size's rows, each size's store opened and closed in turn.
fn sizes_rows(a: &SyncArgs, sizes: &[u64], file_size: u64, pages: u64) -> Result<(), String> {
    out!("| cache | dirty pages | median sync | p90 sync | per dirty page |");
    out!("|---|---|---|---|---|");
    let mut rng = Rng::new(1);
    let page = vec![0x5au8; 4096];
    for &size in sizes {
        if interrupted() {
            return Err(STOPPED.into());
        }
        let store = Store::open(std::slice::from_ref(&a.dir), StoreOptions::default())
            .map_err(|e| e.to_string())?;
        let opts = CacheOptions {
            size: usize::try_from(size).map_err(|_| "cache size too large")?,
            ..CacheOptions::default()
        };
        let cs = CachedStore::with_flusher(store, opts, None::<FlushOptions>)
            .map_err(|e| e.to_string())?;
        let name = "syncbench";
        // Each size's file is deleted after its rows, whatever their outcome:
        // one found here is not this run's, and not one to delete.
        if cs.store().info(name).is_ok() {
            return Err(format!(
                "--dir {}: its store holds a file named {name:?} (left by a run that was \
                 killed, or not the bench's): the bench will not delete it; remove it \
                 yourself (its backing file is {name}.scf) or choose another --dir",
                a.dir.display()
            ));
        }
        let f = cs
            .create(name, file_size, LayoutKind::Stripe)
            .map_err(|e| e.to_string())?;
        let rows = rows(a, size, pages, &f, &mut rng, &page);
        drop(f);
        let deleted = cs.delete(name).map_err(|e| e.to_string());
        rows.and(deleted)?;
    }
    Ok(())
}

/// What a run stopped by Ctrl-C returns.
const STOPPED: &str = "interrupted";

/// The rows of one cache size: each dirty count's syncs timed.
fn rows(
    a: &SyncArgs,
    size: u64,
    pages: u64,
    f: &setcache::CachedFile,
    rng: &mut Rng,
    page: &[u8],
) -> Result<(), String> {
    f.sync().map_err(|e| e.to_string())?;
    {
        for &d in &a.dirty {
            let mut times = Vec::with_capacity(a.rounds);
            for _ in 0..a.rounds {
                if interrupted() {
                    return Err(STOPPED.into());
                }
                let mut chosen = std::collections::HashSet::new();
                while chosen.len() < d {
                    chosen.insert(rng.below(pages));
                }
                for p in chosen {
                    f.write_at(p * 4096, page).map_err(|e| e.to_string())?;
                }
                let t = Instant::now();
                f.sync().map_err(|e| e.to_string())?;
                times.push(t.elapsed().as_secs_f64());
            }
            let med = crate::bench::median(&mut times).unwrap_or(0.0);
            let p90 = times[(times.len() * 9 / 10).min(times.len() - 1)];
            let per = if d == 0 {
                "-".to_string()
            } else {
                format!("{:.1} us", med * 1e6 / d as f64)
            };
            out!(
                "| {} | {d} | {:.1} us | {:.1} us | {per} |",
                format_size(size),
                med * 1e6,
                p90 * 1e6
            );
        }
    }
    Ok(())
}
