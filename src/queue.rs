//! Asynchronous batches with callbacks.
//!
//! A [`Queue`] belongs to one thread. Requests own their buffers while in flight and
//! get them back in their [`Completion`]. Callbacks run on the queue's own thread,
//! inside [`Queue::submit`], [`Queue::wait`] or [`Queue::poll`], never on an I/O
//! thread: a slow callback cannot stall a device, and callbacks need not be `Send`.
//! At most `depth` requests are in flight; `submit` runs callbacks of finished
//! requests to make room before it sends more.

use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::Thread;

use crate::buf::AlignedBuf;
use crate::error::{Error, Result};
use crate::file::File;
use crate::io::{DevOp, Joiner, Sink};

/// Read or write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpKind {
    /// Read from the file into the buffer.
    Read,
    /// Write the buffer to the file.
    Write,
}

/// The outcome of a request, with its buffer.
#[derive(Debug)]
pub struct Completion {
    /// What the request did.
    pub kind: OpKind,
    /// The file offset of the request.
    pub offset: u64,
    /// The request's buffer (for a read, filled on success).
    pub buf: AlignedBuf,
    /// `Ok` or the error, naming file, offset and device.
    pub result: Result<()>,
}

type Callback = Box<dyn FnOnce(Completion)>;

/// One read or write of a whole buffer at a file offset, with its callback.
pub struct Request {
    kind: OpKind,
    file: File,
    offset: u64,
    buf: AlignedBuf,
    callback: Callback,
}

impl Request {
    /// Read `buf.len()` bytes at `offset` into `buf`.
    pub fn read(
        file: &File,
        offset: u64,
        buf: AlignedBuf,
        callback: impl FnOnce(Completion) + 'static,
    ) -> Request {
        Request {
            kind: OpKind::Read,
            file: file.clone(),
            offset,
            buf,
            callback: Box::new(callback),
        }
    }

    /// Write all of `buf` at `offset`.
    pub fn write(
        file: &File,
        offset: u64,
        buf: AlignedBuf,
        callback: impl FnOnce(Completion) + 'static,
    ) -> Request {
        Request {
            kind: OpKind::Write,
            file: file.clone(),
            offset,
            buf,
            callback: Box::new(callback),
        }
    }
}

/// The part of a queue that I/O threads touch: finished tokens and the owner to wake.
pub(crate) struct QueueShared {
    done: Mutex<Vec<(u32, Option<Error>)>>,
    owner: Thread,
    /// The owner is parked (or about to park) waiting for completions.
    waiting: AtomicBool,
}

impl QueueShared {
    pub(crate) fn complete(&self, token: u32, err: Option<Error>) {
        self.done
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((token, err));
        // SeqCst pairs with the owner's store before its re-check: either it sees our
        // entry or we see it waiting and unpark it.
        if self.waiting.load(Ordering::SeqCst) {
            self.owner.unpark();
        }
    }
}

struct Pending {
    kind: OpKind,
    offset: u64,
    buf: AlignedBuf,
    callback: Callback,
    /// Keeps the file (and its backing descriptors) alive while in flight.
    _file: File,
}

/// A per-thread asynchronous request queue with a bound on requests in flight.
pub struct Queue {
    depth: usize,
    slots: Vec<Option<Pending>>,
    free: Vec<u32>,
    shared: Arc<QueueShared>,
    in_flight: usize,
    ready: Vec<(u32, Option<Error>)>,
    /// Per-device batches being assembled.
    batches: Vec<Vec<DevOp>>,
    /// The queue belongs to the thread that made it (callbacks are not `Send`).
    _not_send: PhantomData<*const ()>,
}

impl Queue {
    /// A queue allowing `depth` requests in flight (at least 1).
    pub fn new(depth: usize) -> Queue {
        let depth = depth.max(1);
        Queue {
            depth,
            slots: (0..depth).map(|_| None).collect(),
            free: (0..depth as u32).rev().collect(),
            shared: Arc::new(QueueShared {
                done: Mutex::new(Vec::with_capacity(depth)),
                owner: std::thread::current(),
                waiting: AtomicBool::new(false),
            }),
            in_flight: 0,
            ready: Vec::with_capacity(depth),
            batches: Vec::new(),
            _not_send: PhantomData,
        }
    }

    /// The most requests this queue keeps in flight.
    pub fn depth(&self) -> usize {
        self.depth
    }

    /// Requests sent and not yet completed.
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// Send a batch. Requests for one device travel in one message per device. Blocks,
    /// running callbacks, while `depth` requests are in flight. A request that is
    /// invalid (misaligned, past the end, on a failed device) completes at once with
    /// its error through its callback.
    pub fn submit(&mut self, reqs: Vec<Request>) {
        for r in reqs {
            if self.free.is_empty() {
                self.flush();
                self.wait(1);
            }
            let token = self.free.pop().expect("a slot is free after waiting");
            let Request {
                kind,
                file,
                offset,
                mut buf,
                callback,
            } = r;
            let joiner = Joiner::new(
                file.name_arc(),
                offset,
                Sink::Queue(self.shared.clone(), token),
            );
            let ptr = buf.as_mut_ptr();
            let len = buf.len();
            let fixed = &buf;
            let sent = file.prepare(
                kind,
                offset,
                ptr,
                len,
                Some(fixed),
                &joiner,
                &mut self.batches,
            );
            self.slots[token as usize] = Some(Pending {
                kind,
                offset,
                buf,
                callback,
                _file: file,
            });
            self.in_flight += 1;
            match sent {
                Ok(0) => joiner.deliver_now(None),
                Ok(_) => {}
                Err(e) => joiner.deliver_now(Some(e)),
            }
        }
        self.flush();
    }

    /// Send the assembled per-device batches.
    fn flush(&mut self) {
        for ops in self.batches.iter_mut() {
            if let Some(first) = ops.first() {
                let engine = first.backing.engine.clone();
                engine.submit(std::mem::take(ops));
            }
        }
    }

    /// Run callbacks of finished requests without blocking; returns how many ran.
    pub fn poll(&mut self) -> usize {
        self.run_ready()
    }

    /// Block until `n` callbacks have run (or nothing is left in flight); returns how
    /// many ran, which may exceed `n` when more were ready.
    pub fn wait(&mut self, n: usize) -> usize {
        self.flush();
        let mut ran = self.run_ready();
        while ran < n && self.in_flight > 0 {
            self.shared.waiting.store(true, Ordering::SeqCst);
            let empty = self
                .shared
                .done
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .is_empty();
            if empty {
                std::thread::park();
            }
            self.shared.waiting.store(false, Ordering::SeqCst);
            ran += self.run_ready();
        }
        ran
    }

    /// Wait for every request in flight.
    pub fn drain(&mut self) {
        while self.in_flight > 0 {
            self.wait(self.in_flight);
        }
    }

    fn run_ready(&mut self) -> usize {
        {
            let mut g = self.shared.done.lock().unwrap_or_else(|p| p.into_inner());
            if g.is_empty() {
                return 0;
            }
            std::mem::swap(&mut *g, &mut self.ready);
        }
        let mut ran = 0;
        let mut ready = std::mem::take(&mut self.ready);
        for (token, err) in ready.drain(..) {
            let p = self.slots[token as usize]
                .take()
                .expect("completion of a live request");
            self.free.push(token);
            self.in_flight -= 1;
            let result = match err {
                None => Ok(()),
                Some(e) => Err(e),
            };
            (p.callback)(Completion {
                kind: p.kind,
                offset: p.offset,
                buf: p.buf,
                result,
            });
            ran += 1;
        }
        self.ready = ready;
        ran
    }
}

impl Drop for Queue {
    fn drop(&mut self) {
        // Buffers of requests in flight are owned here: they must outlive the I/O.
        self.flush();
        self.drain();
    }
}
