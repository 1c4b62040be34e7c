//! Serving a partition's requests on a [`CachedQueue`] of one's own: what a
//! partition's worker does with the bundles of every application thread, and
//! what an application thread does with the requests for its home partition
//! (the partition of its own node, whose pages it reaches without messages).

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use super::{Reply, Req, Task, What};
use crate::cache::RawPin;
use crate::cached::readahead;
use crate::cached::shared::Shared;
use crate::cached::{CachedCompletion, CachedFile, CachedQueue, CachedRequest};
use crate::error::{Error, Result};
use crate::storage::file::OpKind;
use crate::util::slab::Slab;

/// A request in flight on a server's queue, for the `K` it came from.
struct Flight<K> {
    from: K,
    tag: u64,
    what: What,
    offset: u64,
    /// A task's file, for its error.
    file: Option<CachedFile>,
}

/// See the module's comment. `K` names where a request came from (the
/// application, for a worker); each reply goes back with it.
pub(super) struct Server<'a, K> {
    sh: &'a Arc<Shared>,
    pub(super) q: CachedQueue<'a>,
    ps: u64,
    flights: Slab<Flight<K>>,
    /// Replies ready before their queue saw them (tasks on cached pages).
    quick: Vec<(K, Reply)>,
    done: Vec<(u64, CachedCompletion)>,
    pins: Vec<(u64, Result<RawPin>)>,
}

impl<'a, K: Copy> Server<'a, K> {
    /// A server keeping up to `depth` device operations in flight.
    pub(super) fn new(sh: &'a Arc<Shared>, depth: usize) -> Server<'a, K> {
        Server {
            sh,
            q: CachedQueue::on(sh, depth),
            ps: sh.cache.page_size() as u64,
            flights: Slab::new(),
            quick: Vec::new(),
            done: Vec::new(),
            pins: Vec::new(),
        }
    }

    /// Start the requests of `batch` (left empty), whose file numbers
    /// `file_of` resolves. A task on a cached page runs at once; the rest go
    /// to the queue (a hit is copied before this returns). Either way the
    /// queue's finished device operations are taken. Replies come out of
    /// [`Server::finish`].
    pub(super) fn start<'f>(
        &mut self,
        batch: &mut Vec<(K, Req)>,
        file_of: impl Fn(K, u32) -> &'f CachedFile,
    ) {
        let (sh, ps) = (self.sh, self.ps);
        // Hints for the tasks first, as the queue gives its batches: the
        // sets' metadata of every page, then the first lines of the frames of
        // those cached, so that the memory misses overlap.
        for frame in [false, true] {
            for (k, r) in batch
                .iter()
                .filter(|(_, r)| matches!(r.what, What::Task(..)))
            {
                sh.cache
                    .prefetch(file_of(*k, r.file).id, r.offset / ps, frame);
            }
        }
        let mut reqs = Vec::with_capacity(batch.len());
        let mut it = batch.drain(..).peekable();
        while let Some((k, mut r)) = it.next() {
            let file = file_of(k, r.file);
            if let What::Task(task, arg) = r.what {
                // While this task runs, the rest of the next one's page
                // streams in (the hints above asked for its first lines).
                if let Some((nk, nr)) = it.peek().filter(|(_, n)| matches!(n.what, What::Task(..)))
                {
                    let id = file_of(*nk, nr.file).id;
                    sh.cache
                        .prefetch_bytes(id, nr.offset / ps, 512, ps as usize);
                }
                // A cached page: run the task at once, no queue.
                if let Some((value, result)) =
                    task_on_present(sh, file, r.offset, ps, task, arg, r.stream)
                {
                    let reply = Reply {
                        tag: r.tag,
                        buf: Vec::new(),
                        value,
                        result,
                    };
                    self.quick.push((k, reply));
                    continue;
                }
            }
            let task = matches!(r.what, What::Task(..));
            let f = self.flights.insert(Flight {
                from: k,
                tag: r.tag,
                what: r.what,
                offset: r.offset,
                file: task.then(|| file.clone()),
            });
            reqs.push(match r.what {
                What::Read => CachedRequest::tagged(
                    OpKind::Read,
                    file,
                    r.offset,
                    std::mem::take(&mut r.buf),
                    f as u64,
                )
                .noted(r.stream),
                What::Write => CachedRequest::tagged(
                    OpKind::Write,
                    file,
                    r.offset,
                    std::mem::take(&mut r.buf),
                    f as u64,
                ),
                What::Task(..) => CachedRequest::pin(file, r.offset, f as u64).noted(r.stream),
            });
        }
        if !reqs.is_empty() {
            self.q.submit_from(&mut reqs);
        } else if self.q.outstanding() > 0 {
            // Submitting drives the devices; a round of tasks that all ran
            // at once submits nothing, and a worker whose rings never empty
            // never reaches its wait: its misses are taken here.
            self.q.poll();
        }
    }

    /// Hand every finished request's reply to `out`, with where it came from;
    /// how many. A task whose page arrived runs here.
    pub(super) fn finish(&mut self, mut out: impl FnMut(K, Reply)) -> usize {
        let mut n = self.quick.len();
        for (k, reply) in self.quick.drain(..) {
            out(k, reply);
        }
        self.q.take_completions(&mut self.done);
        n += self.done.len();
        for (f, c) in self.done.drain(..) {
            let fl = self
                .flights
                .remove(f as usize)
                .expect("a request in flight");
            let reply = Reply {
                tag: fl.tag,
                buf: c.buf,
                value: 0,
                result: c.result,
            };
            out(fl.from, reply);
        }
        self.q.take_pins(&mut self.pins);
        n += self.pins.len();
        for (f, p) in self.pins.drain(..) {
            let fl = self
                .flights
                .remove(f as usize)
                .expect("a request in flight");
            let (value, result) = match (p, fl.what) {
                (Ok(pin), What::Task(task, arg)) => {
                    // SAFETY: the pin came from this cache's queue, once.
                    let page = unsafe { self.sh.cache.restore_pin(pin) };
                    let file = fl.file.as_ref().expect("a task's file");
                    let at = (fl.offset % self.ps) as usize;
                    // Pinned: now the check that no array stores into the
                    // page in place while the task reads it.
                    match file.entry.refs_allowed() {
                        Ok(()) => run_task(file, fl.offset, &page, at, task, arg),
                        Err(e) => (0, Err(e)),
                    }
                }
                (Err(e), _) => (0, Err(e)),
                (Ok(pin), _) => {
                    // SAFETY: as above; only tasks ask for pins.
                    drop(unsafe { self.sh.cache.restore_pin(pin) });
                    (0, Ok(()))
                }
            };
            let reply = Reply {
                tag: fl.tag,
                buf: Vec::new(),
                value,
                result,
            };
            out(fl.from, reply);
        }
        n
    }
}

/// Run `task` on `page` (holding byte `offset` of `file`, at `at`), catching
/// a panic as the request's error.
fn run_task(
    file: &CachedFile,
    offset: u64,
    page: &[u8],
    at: usize,
    task: Task,
    arg: u64,
) -> (u64, Result<()>) {
    match std::panic::catch_unwind(AssertUnwindSafe(|| task(page, at, arg))) {
        Ok(v) => (v, Ok(())),
        Err(e) => {
            let message = e
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| e.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "(no message)".into());
            let err = Error::TaskPanicked {
                file: file.entry.file.name(),
                offset,
                message,
            };
            // The payload's own drop may panic too (a `panic_any` value whose
            // `Drop` panics): caught, and that second payload leaked, so that
            // nothing unwinds into the worker, which holds pins and requests.
            crate::util::panics::drop_payload(e);
            (0, Err(err))
        }
    }
}

/// A task on a page that is cached now, run at once: `None` when the page
/// is not cached (or the request must take the queue's way, which reports
/// its errors: out of range, file gone, page references refused).
fn task_on_present(
    sh: &Shared,
    file: &CachedFile,
    offset: u64,
    ps: u64,
    task: Task,
    arg: u64,
    stream: bool,
) -> Option<(u64, Result<()>)> {
    if offset >= file.len() || file.entry.check().is_err() {
        return None;
    }
    let page = sh
        .cache
        .try_pin_present(file.id, offset / ps, stream)
        .ok()??;
    if stream && page.is_cold() {
        readahead::note_used(sh, file.id, offset / ps);
    }
    // After the pin, as the queue's page requests check.
    file.entry.refs_allowed().ok()?;
    Some(run_task(
        file,
        offset,
        &page,
        (offset % ps) as usize,
        task,
        arg,
    ))
}
