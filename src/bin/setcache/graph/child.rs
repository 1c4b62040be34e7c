//! The mmap runs, each in a child process inside a memory cgroup.
//!
//! The parent drops the kernel's cached pages of the graph's backing files,
//! starts `/proc/self/exe` with the hidden subcommand [`CHILD_SUBCOMMAND`],
//! moves it into a fresh memory cgroup and writes the job (one line of
//! JSON). The child maps the two files (the data starts after the store's
//! header, a page in), answers `ready`; the parent limits the cgroup to the
//! child's memory at that moment plus the budget, and writes `go`. The
//! child then allocates its per-vertex arrays (inside the budget), runs,
//! checks, writes the ranks to a file beside the graph and answers one line
//! of JSON, as the bench's Linux-engine child does.

use std::fs::File;
use std::io::Write;
use std::path::PathBuf;

use serde_json::{Value, json};
use setcache::{HEADER_BYTES, Store, StoreOptions};

use super::algo::{BfsCheck, Measured, run_algo};
use super::csr::{Graph, Slices};
use crate::bench::cgroup::{self, MemCgroup};
use crate::bench::child::{converse, field, serve};
use crate::bench::mmap::Mapping;

/// The hidden subcommand of the child.
pub(crate) const CHILD_SUBCOMMAND: &str = "__graph-child";

/// One mmap run.
pub(crate) struct Job {
    pub(crate) dir: PathBuf,
    pub(crate) name: String,
    pub(crate) n: u64,
    pub(crate) entries: u64,
    pub(crate) algo: String,
    pub(crate) roots: Vec<u32>,
    pub(crate) iterations: usize,
    pub(crate) threads: usize,
    /// `MADV_RANDOM` instead of the default readahead.
    pub(crate) random: bool,
    /// Read everything once before the timed part.
    pub(crate) warm: bool,
}

/// Run `job` in a child process, in a cgroup of `budget` bytes if given.
pub(crate) fn run(job: &Job, budget: Option<u64>) -> Result<Measured, String> {
    let store =
        Store::open(&[&job.dir], StoreOptions::default()).map_err(|e| format!("graph: {e}"))?;
    if store.devices() != 1 {
        return Err("the mmap backing needs a store of one device directory".into());
    }
    let path = |ext: &str| -> Result<std::path::PathBuf, String> {
        let name = format!("{}.{ext}", job.name);
        Ok(store
            .backing_paths(&name)
            .map_err(|e| format!("graph: {e}"))?
            .remove(0))
    };
    let (offsets, targets) = (path("offsets")?, path("targets")?);
    drop(store);
    crate::bench::prep::cold(&[offsets.clone(), targets.clone()])?;
    let ranks = job.dir.join(format!(".graph-ranks-{}", std::process::id()));
    let text = json!({
        "offsets": offsets.to_str(), "targets": targets.to_str(), "n": job.n,
        "entries": job.entries, "algo": job.algo, "roots": job.roots,
        "iterations": job.iterations, "threads": job.threads, "random": job.random,
        "warm": job.warm, "ranks": ranks.to_str(),
    })
    .to_string();
    let cg = match budget {
        None => None,
        Some(_) => {
            let h = cgroup::detect().map_err(|why| {
                format!("mmap needs a memory cgroup to hold its page cache to the budget: {why}")
            })?;
            Some(MemCgroup::create(&h)?)
        }
    };
    let cap = cg
        .as_ref()
        .zip(budget)
        .map(|(cg, b)| (cg, b + cgroup::slack(job.threads)));
    let result = converse(CHILD_SUBCOMMAND, &text, cap, "mmap")
        .and_then(|ok| from_json(&ok).ok_or("mmap child process: malformed result".to_string()));
    let result = result.and_then(|mut m| {
        if job.algo == "pagerank" {
            let bytes = std::fs::read(&ranks).map_err(|e| format!("mmap child's ranks: {e}"))?;
            m.ranks = bytes
                .chunks_exact(8)
                .map(|b| f64::from_le_bytes(b.try_into().unwrap()))
                .collect();
        }
        Ok(m)
    });
    let _ = std::fs::remove_file(&ranks);
    drop(cg);
    result
}

fn to_json(m: &Measured) -> Value {
    json!({
        "secs": m.secs,
        "checks": m.checks.iter().map(|c| [c.depth_hash, c.reached, c.entries]).collect::<Vec<_>>(),
        "device_bytes": m.device_bytes,
    })
}

fn from_json(v: &Value) -> Option<Measured> {
    let secs = v
        .get("secs")?
        .as_array()?
        .iter()
        .map(Value::as_f64)
        .collect::<Option<Vec<_>>>()?;
    let checks = v
        .get("checks")?
        .as_array()?
        .iter()
        .map(|c| {
            let c = c.as_array()?;
            Some(BfsCheck {
                depth_hash: c.first()?.as_u64()?,
                reached: c.get(1)?.as_u64()?,
                entries: c.get(2)?.as_u64()?,
            })
        })
        .collect::<Option<Vec<_>>>()?;
    Some(Measured {
        secs,
        checks,
        device_bytes: v.get("device_bytes").and_then(Value::as_u64),
        ..Measured::default()
    })
}

/// Bytes this process has had read from storage (`/proc/self/io`).
fn read_bytes() -> u64 {
    let text = std::fs::read_to_string("/proc/self/io").unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix("read_bytes:"))
        .and_then(|r| r.trim().parse().ok())
        .unwrap_or(0)
}

/// The child's mappings of the two files, and the graph's size.
struct Mapped {
    offsets: Mapping,
    targets: Mapping,
    n: u64,
    entries: u64,
}

/// Entry point of the child; returns the exit code.
pub(crate) fn child_main() -> i32 {
    let job = std::cell::OnceCell::new();
    serve(
        |v| map_files(job.get_or_init(|| v.clone())),
        |m| run_mapped(job.get().unwrap_or(&Value::Null), m),
    )
}

fn map_files(v: &Value) -> Result<Mapped, String> {
    let random = field(v, "random", Value::as_bool)?;
    let advice = if random {
        libc::MADV_RANDOM
    } else {
        libc::MADV_NORMAL
    };
    let map = |path: &str, bytes: u64| -> Result<Mapping, String> {
        let f = File::open(path).map_err(|e| format!("{path}: {e}"))?;
        let m = Mapping::new(&f, false, false)?;
        m.advise(advice)?;
        if (m.span().1 as u64) < HEADER_BYTES + bytes {
            return Err(format!(
                "{path} is shorter than its header and {bytes} bytes"
            ));
        }
        Ok(m)
    };
    let (n, entries) = (
        field(v, "n", Value::as_u64)?,
        field(v, "entries", Value::as_u64)?,
    );
    Ok(Mapped {
        offsets: map(field(v, "offsets", Value::as_str)?, (n + 1) * 8)?,
        targets: map(field(v, "targets", Value::as_str)?, entries * 4)?,
        n,
        entries,
    })
}

fn run_mapped(v: &Value, m: Mapped) -> Result<Value, String> {
    let roots = field(v, "roots", Value::as_array)
        .ok()
        .and_then(|r| {
            r.iter()
                .map(|x| x.as_u64().map(|x| x as u32))
                .collect::<Option<Vec<_>>>()
        })
        .ok_or("job: missing roots")?;
    let warm = field(v, "warm", Value::as_bool)?;
    let (n, entries) = (m.n, m.entries);
    // The mappings are read-only and outlive `g` (`m` is dropped at the end
    // of this function); nothing in this process writes the files.
    // SAFETY: each mapping holds the page-sized header (so the data is aligned) and then at least these elements (checked in `map_files`), and stays mapped while `g` lives.
    let g = unsafe {
        let at = |map: &Mapping| map.span().0.add(HEADER_BYTES as usize);
        Slices {
            offsets: std::slice::from_raw_parts(at(&m.offsets).cast(), n as usize + 1),
            targets: std::slice::from_raw_parts(at(&m.targets).cast(), entries as usize),
        }
    };
    if warm {
        g.warm()?;
    }
    let mut read = 0u64;
    let algo = field(v, "algo", Value::as_str)?;
    let (iterations, threads) = (
        field(v, "iterations", Value::as_u64)? as usize,
        field(v, "threads", Value::as_u64)? as usize,
    );
    let mut out = run_algo(
        &g,
        algo,
        &roots,
        iterations,
        threads,
        |from| read += read_bytes() - from,
        read_bytes,
    )?;
    out.device_bytes = Some(read);
    if algo == "pagerank" {
        let err = |e: std::io::Error| format!("writing the ranks: {e}");
        let mut w =
            std::io::BufWriter::new(File::create(field(v, "ranks", Value::as_str)?).map_err(err)?);
        for r in &out.ranks {
            w.write_all(&r.to_le_bytes()).map_err(err)?;
        }
        w.flush().map_err(err)?;
    }
    Ok(to_json(&out))
}
