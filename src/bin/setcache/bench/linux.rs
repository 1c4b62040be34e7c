//! The Linux engines, run inside the bench's child process: buffered pread/pwrite,
//! O_DIRECT pread/pwrite, and a shared mapping. They address exactly the bytes the
//! store does: each logical offset goes through the file's layout to a device and
//! an offset in that device's backing file (after its header); a request that
//! crosses a stripe unit is split at the unit's boundary.

use std::fs::{File as FsFile, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Instant;

use setcache::layout::Layout;
use setcache::{AlignedBuf, HEADER_BYTES};

use super::driver::{Ctl, ThreadStats, Timing, run_threads};
use super::engine::Engine;
use super::mmap::Mapping;
use super::outcome::{Outcome, hit_from_read_bytes};
use super::workload::{OpGen, Pattern, Rng, Workload, fill_block, mix64};

/// A run of a Linux engine, as the child receives it.
#[derive(Clone, Debug)]
pub(crate) struct LinuxJob {
    pub(crate) engine: Engine,
    pub(crate) workload: Workload,
    pub(crate) threads: usize,
    pub(crate) timing: Timing,
    pub(crate) layout: Layout,
    /// Backing files, one per device, in device order.
    pub(crate) paths: Vec<PathBuf>,
    /// With the mmap engine, bytes read at the start of each block instead
    /// of the whole block (`--access ref --touch`).
    pub(crate) touch: Option<u64>,
}

/// Where the data of the run lives, per device.
enum Target {
    Files(Vec<FsFile>),
    Maps(Vec<Mapping>),
}

fn open_target(job: &LinuxJob) -> Result<Target, String> {
    let writes = job.workload.rw.writes();
    let random = job.workload.rw.is_random();
    let mut files = Vec::with_capacity(job.paths.len());
    for p in &job.paths {
        let mut o = OpenOptions::new();
        o.read(true).write(writes);
        if job.engine == Engine::LinuxDirect {
            o.custom_flags(libc::O_DIRECT);
        }
        let f = o
            .open(p)
            .map_err(|e| format!("{}: cannot open {}: {e}", job.engine, p.display()))?;
        if job.engine != Engine::LinuxDirect {
            let advice = if random {
                libc::POSIX_FADV_RANDOM
            } else {
                libc::POSIX_FADV_SEQUENTIAL
            };
            // SAFETY: plain syscall on an open descriptor.
            unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, advice) };
        }
        files.push(f);
    }
    if job.engine == Engine::Mmap {
        let maps = files
            .iter()
            .map(|f| Mapping::new(f, writes, random))
            .collect::<Result<Vec<_>, _>>()?;
        return Ok(Target::Maps(maps));
    }
    Ok(Target::Files(files))
}

/// Split `[offset, offset + len)` at stripe-unit boundaries and call `f(device,
/// offset in the backing file, range of the buffer)` for each piece.
pub(crate) fn for_each_piece(
    layout: &Layout,
    offset: u64,
    len: usize,
    mut f: impl FnMut(usize, u64, std::ops::Range<usize>) -> Result<(), String>,
) -> Result<(), String> {
    let unit = layout.block_bytes();
    let mut done = 0usize;
    while done < len {
        let off = offset + done as u64;
        let take = ((unit - off % unit) as usize).min(len - done);
        let at = layout.map(off);
        f(at.device, HEADER_BYTES + at.offset, done..done + take)?;
        done += take;
    }
    Ok(())
}

impl Target {
    /// Make the written data durable: fdatasync each file, or msync each mapping.
    fn sync(&self) -> Result<(), String> {
        match self {
            Target::Files(files) => files
                .iter()
                .try_for_each(|f| f.sync_data())
                .map_err(|e| format!("fdatasync: {e}")),
            Target::Maps(maps) => maps.iter().try_for_each(Mapping::sync),
        }
    }

    #[inline]
    fn access(&self, read: bool, dev: usize, pos: u64, buf: &mut [u8]) -> Result<(), String> {
        match self {
            Target::Files(files) => {
                let r = if read {
                    files[dev].read_exact_at(buf, pos)
                } else {
                    files[dev].write_all_at(buf, pos)
                };
                r.map_err(|e| {
                    format!(
                        "{} at {pos} on device {dev}: {e}",
                        if read { "read" } else { "write" }
                    )
                })
            }
            Target::Maps(maps) if read => maps[dev].read_into(pos, buf),
            Target::Maps(maps) => maps[dev].write_from(pos, buf),
        }
    }
}

/// What a thread owns, allocated (and touched) before the run so that the memory
/// the process needs is in place when the parent measures it.
struct ThreadState {
    ops: OpGen,
    buf: AlignedBuf,
    stats: ThreadStats,
}

/// A job with its files open and its threads' state allocated, ready to run.
pub(crate) struct Prepared<'a> {
    job: &'a LinuxJob,
    target: Target,
    states: Vec<Mutex<Option<ThreadState>>>,
}

/// Open the files and allocate every thread's state; no data is touched yet.
pub(crate) fn prepare(job: &LinuxJob) -> Result<Prepared<'_>, String> {
    let target = open_target(job)?;
    let w = &job.workload;
    let states = (0..job.threads)
        .map(|t| {
            let mut buf = AlignedBuf::new(w.bs as usize);
            if w.rw.writes() {
                Rng::new(w.seed ^ mix64(t as u64 + 1)).fill_nonzero(&mut buf);
            } else {
                buf.fill(1);
            }
            Mutex::new(Some(ThreadState {
                ops: OpGen::new(w, t, job.threads),
                buf,
                stats: ThreadStats::new(),
            }))
        })
        .collect();
    Ok(Prepared {
        job,
        target,
        states,
    })
}

fn thread_body(p: &Prepared, t: usize, ctl: &Ctl) -> Result<ThreadStats, String> {
    let job = p.job;
    let state = p.states[t].lock().ok().and_then(|mut s| s.take());
    let ThreadState {
        mut ops,
        mut buf,
        mut stats,
    } = state.ok_or("thread state missing")?;
    let len = match job.touch {
        Some(n) if job.engine == Engine::Mmap => (n as usize).min(buf.len()),
        _ => buf.len(),
    };
    while !ctl.stopped() {
        let Some(op) = ops.next_op() else {
            break;
        };
        let start = Instant::now();
        let len = len.min(op.len as usize);
        if !op.read && job.workload.replay.is_some() {
            fill_block(op.offset / job.workload.bs, &mut buf[..len]);
        }
        for_each_piece(&job.layout, op.offset, len, |dev, pos, range| {
            p.target.access(op.read, dev, pos, &mut buf[range])
        })
        .map_err(|e| format!("{}: {e}", job.engine))?;
        let lat = start.elapsed();
        if ctl.measuring() {
            stats.record(lat, op.read);
            ctl.publish(t, stats.ops);
        }
    }
    Ok(stats)
}

impl Prepared<'_> {
    /// Run the job in this process (the child).
    pub(crate) fn run(&self) -> Result<Outcome, String> {
        let job = self.job;
        let mut m = run_threads(job.threads, &job.timing, |t, ctl| thread_body(self, t, ctl))?;
        if job.workload.rw.writes() {
            // As for every engine with a cache: making the writes durable is
            // part of the work, and its time counts.
            let t0 = Instant::now();
            self.target
                .sync()
                .map_err(|e| format!("{}: {e}", job.engine))?;
            m.secs += t0.elapsed().as_secs_f64();
        }
        // Accesses that need their page in memory: every read, and the writes that
        // must fetch the page first (stores through a mapping fault it in; a buffered
        // write of less than a page reads the rest of it).
        // A graph walk's reads are records inside a page or two: counted
        // as reads of a page.
        let bs = if job.workload.rw == Pattern::GraphWalk {
            4096
        } else {
            job.workload.bs
        };
        let writes_fetch =
            job.engine == Engine::Mmap || (job.engine == Engine::LinuxBuffered && bs < 4096);
        let demand = if writes_fetch {
            m.stats.ops
        } else {
            m.stats.reads
        };
        let hit = m
            .read_bytes
            .and_then(|rb| hit_from_read_bytes(rb, demand.max(m.stats.reads), bs));
        Ok(Outcome::from_measured(&m, hit))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use setcache::{EngineKind, LayoutKind, Store, StoreOptions};

    #[test]
    fn backing_files_hold_what_the_store_wrote() {
        let dir = std::env::temp_dir().join(format!("setcache-linux-test-{}", std::process::id()));
        let roots: Vec<PathBuf> = (0..3).map(|i| dir.join(format!("dev{i}"))).collect();
        for r in &roots {
            std::fs::create_dir_all(r).unwrap();
        }
        let opts = StoreOptions {
            engine: EngineKind::Psync,
            block_pages: 2,
            ..StoreOptions::default()
        };
        let store = Store::open(&roots, opts).unwrap();
        let file = store.create("t", 1 << 20, LayoutKind::Hash).unwrap();
        let mut data = AlignedBuf::new(1 << 20);
        Rng::new(5).fill_nonzero(&mut data);
        file.write_at(0, &data).unwrap();
        file.sync().unwrap();
        let files: Vec<FsFile> = store
            .backing_paths("t")
            .unwrap()
            .iter()
            .map(|p| FsFile::open(p).unwrap())
            .collect();
        let target = Target::Files(files);
        // Requests of 12 KiB cross the 8 KiB stripe units.
        for off in (0..(1u64 << 20) - 12288).step_by(4096 * 7) {
            let mut buf = vec![0u8; 12288];
            for_each_piece(&file.layout(), off, buf.len(), |dev, pos, range| {
                target.access(true, dev, pos, &mut buf[range])
            })
            .unwrap();
            assert_eq!(
                buf[..],
                data[off as usize..off as usize + 12288],
                "offset {off}"
            );
        }
        drop(file);
        drop(store);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn pieces_cover_the_request_within_units() {
        let layout = Layout::new(LayoutKind::Rotated, 3, 8192).unwrap();
        let mut next = 0usize;
        for_each_piece(&layout, 4096, 20480, |dev, pos, range| {
            assert!(dev < 3);
            assert_eq!(range.start, next);
            assert!(pos >= HEADER_BYTES);
            let at = layout.map(4096 + range.start as u64);
            assert_eq!((at.device, HEADER_BYTES + at.offset), (dev, pos));
            assert!((pos - HEADER_BYTES) % 8192 + range.len() as u64 <= 8192);
            next = range.end;
            Ok(())
        })
        .unwrap();
        assert_eq!(next, 20480);
    }
}
