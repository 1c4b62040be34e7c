//! Reassembly of a request that was split over devices.
//!
//! A request becomes one or more device operations. Each holds an `Arc<Joiner>`;
//! the joiner keeps the first error and, when the last operation finishes, delivers
//! the request's one result to its sink: a parked synchronous caller or the
//! completion list of an asynchronous queue.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::Thread;

use super::DevOpKind;
use crate::error::{Error, Result};

/// Where the result of a request goes.
pub(crate) enum Sink {
    /// A thread blocked in a synchronous call, waiting on `Joiner::finished`.
    Thread(Thread),
    /// An asynchronous queue, with the request's token in it.
    Queue(Arc<QueueShared>, u32),
}

pub(crate) struct Joiner {
    remaining: AtomicUsize,
    finished: AtomicBool,
    error: OnceLock<Error>,
    file: Arc<str>,
    /// Logical offset of the request, for error reports.
    offset: u64,
    sink: Sink,
}

impl Joiner {
    pub(crate) fn new(file: Arc<str>, offset: u64, sink: Sink) -> Arc<Joiner> {
        Arc::new(Joiner {
            remaining: AtomicUsize::new(0),
            finished: AtomicBool::new(false),
            error: OnceLock::new(),
            file,
            offset,
            sink,
        })
    }

    /// Make a joiner whose request has ended, and which nothing else holds,
    /// ready for the next request at `offset`, of the file named `file` if
    /// given (else of the same name as before). Its sink stays.
    pub(crate) fn reuse(&mut self, file: Option<Arc<str>>, offset: u64) {
        *self.remaining.get_mut() = 0;
        *self.finished.get_mut() = false;
        self.error.take();
        if let Some(f) = file {
            self.file = f;
        }
        self.offset = offset;
    }

    /// Set the number of device operations. Called before any of them is sent, so the
    /// Relaxed store is published to the engines by the mailbox lock that sends them.
    pub(crate) fn expect(&self, pieces: usize) {
        self.remaining.store(pieces, Ordering::Relaxed);
    }

    pub(crate) fn io_error(&self, kind: DevOpKind, device: usize, errno: i32) -> Error {
        Error::Io {
            op: kind.name(),
            file: self.file.to_string(),
            offset: self.offset,
            device,
            errno,
        }
    }

    pub(crate) fn short_error(
        &self,
        kind: DevOpKind,
        device: usize,
        expected: usize,
        got: usize,
    ) -> Error {
        Error::ShortTransfer {
            op: kind.name(),
            file: self.file.to_string(),
            offset: self.offset,
            device,
            expected,
            got,
        }
    }

    /// One device operation finished; the last one delivers the result.
    pub(crate) fn piece_done(&self, err: Option<Error>) {
        if let Some(e) = err {
            // Only the first error is kept; later ones are usually its consequences.
            let _ = self.error.set(e);
        }
        // AcqRel: the last finisher must see every other finisher's error and data
        // writes (Acquire), and its own must be visible to whoever it wakes (Release).
        if self.remaining.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.deliver();
        }
    }

    /// Deliver the result now, when a request ends before any I/O is sent (it was
    /// invalid, or empty).
    pub(crate) fn deliver_now(&self, err: Option<Error>) {
        if let Some(e) = err {
            let _ = self.error.set(e);
        }
        self.deliver();
    }

    fn deliver(&self) {
        match &self.sink {
            Sink::Thread(t) => {
                // Release pairs with the Acquire load in `wait_sync`.
                self.finished.store(true, Ordering::Release);
                t.unpark();
            }
            Sink::Queue(q, token) => q.complete(*token, self.error.get().cloned()),
        }
    }

    /// Park the calling thread (the one named in `Sink::Thread`) until the request is done.
    pub(crate) fn wait_sync(&self) -> Result<()> {
        while !self.finished.load(Ordering::Acquire) {
            std::thread::park();
        }
        match self.error.get() {
            None => Ok(()),
            Some(e) => Err(e.clone()),
        }
    }
}

/// The part of a queue that I/O threads touch: finished tokens and the owner to wake.
pub(crate) struct QueueShared {
    pub(crate) done: Mutex<Vec<(u32, Option<Error>)>>,
    pub(crate) owner: Thread,
    /// The owner is parked (or about to park) waiting for completions.
    pub(crate) waiting: AtomicBool,
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
