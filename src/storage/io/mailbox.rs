//! The bounded message queue in front of one device.
//!
//! Application threads push a whole batch for the device under one lock acquisition
//! (requests of one batch travel in one message, as in the paper's rendezvous queue).
//! The queue holds at most `cap` operations; a sender blocks while it is full, so a
//! fast producer cannot grow memory without bound. A batch larger than `cap` is
//! accepted into an empty queue so that it cannot wait forever.
//!
//! The consumer is either threads waiting on a condition variable (psync, sim) or an
//! io_uring thread sleeping in the kernel, woken through an eventfd only when it said
//! it was about to sleep: a busy ring is never interrupted by wake-ups.

use std::collections::VecDeque;
use std::os::fd::AsRawFd;

use crate::util::fds::Fd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};

use super::{DevOp, OpResult};

/// Control messages, applied by the consumer before the operations queued after them.
#[derive(Debug, Clone)]
pub(crate) enum Ctrl {
    RegisterFile {
        slot: u32,
        fd: i32,
    },
    UnregisterFile {
        slot: u32,
    },
    RegisterBuf {
        index: u16,
        addr: usize,
        len: usize,
    },
    UnregisterBuf {
        index: u16,
    },
    /// Answered once every control message before it is applied.
    Fence(std::sync::mpsc::SyncSender<()>),
}

pub(crate) struct Inner {
    pub(crate) ops: VecDeque<DevOp>,
    pub(crate) ctrl: Vec<Ctrl>,
    pub(crate) closed: bool,
    /// Producers blocked on `space` (notifying a condvar nobody waits on still costs
    /// a system call).
    blocked: usize,
    /// Consumers waiting on `work`.
    idle: usize,
}

pub(crate) struct Mailbox {
    inner: Mutex<Inner>,
    space: Condvar,
    work: Condvar,
    cap: usize,
    /// An eventfd the consumer polls in its ring, if it sleeps in io_uring.
    wake_fd: Option<Fd>,
    /// The ring consumer is about to sleep or sleeping in the kernel.
    sleeping: AtomicBool,
}

impl Mailbox {
    pub(crate) fn new(cap: usize, wake_fd: Option<Fd>) -> Mailbox {
        Mailbox {
            inner: Mutex::new(Inner {
                ops: VecDeque::with_capacity(cap),
                ctrl: Vec::new(),
                closed: false,
                blocked: 0,
                idle: 0,
            }),
            space: Condvar::new(),
            work: Condvar::new(),
            cap: cap.max(1),
            wake_fd,
            sleeping: AtomicBool::new(false),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding this lock leaves only plain queues behind; keep going.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Send one batch. Blocks while the queue is full.
    pub(crate) fn push(&self, ops: Vec<DevOp>) {
        if ops.is_empty() {
            return;
        }
        let mut g = self.lock();
        while !g.closed && !g.ops.is_empty() && g.ops.len() + ops.len() > self.cap {
            g.blocked += 1;
            g = self.space.wait(g).unwrap_or_else(|p| p.into_inner());
            g.blocked -= 1;
        }
        if g.closed {
            drop(g);
            for op in ops {
                op.finish(OpResult::Errno(libc::ESHUTDOWN));
            }
            return;
        }
        g.ops.extend(ops);
        let idle = g.idle > 0;
        drop(g);
        self.wake(idle);
    }

    pub(crate) fn push_ctrl(&self, c: Ctrl) {
        let mut g = self.lock();
        g.ctrl.push(c);
        let idle = g.idle > 0;
        drop(g);
        self.wake(idle);
    }

    pub(crate) fn close(&self) {
        self.lock().closed = true;
        self.space.notify_all();
        self.wake_all();
    }

    /// Wake the consumer: the ring thread if it announced sleep, or one idle
    /// condition-variable consumer if `idle`.
    fn wake(&self, idle: bool) {
        match &self.wake_fd {
            // SeqCst pairs with the SeqCst store in `prepare_sleep`: either the
            // consumer sees our batch when it re-checks under the lock, or we see
            // that it sleeps and write the eventfd.
            Some(fd) if self.sleeping.load(Ordering::SeqCst) => {
                let one: u64 = 1;
                // SAFETY: writes 8 bytes from a live u64 to an eventfd we own.
                let _ = unsafe { libc::write(fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
            }
            Some(_) => {}
            None if idle => self.work.notify_one(),
            None => {}
        }
    }

    fn wake_all(&self) {
        if self.wake_fd.is_some() {
            self.sleeping.store(true, Ordering::SeqCst);
            self.wake(true);
        } else {
            self.work.notify_all();
        }
    }

    pub(crate) fn wake_fd(&self) -> Option<i32> {
        self.wake_fd.as_ref().map(|f| f.as_raw_fd())
    }

    /// Take control messages and up to `max` operations. Returns whether the
    /// mailbox is closed.
    pub(crate) fn take(&self, max: usize, ctrl: &mut Vec<Ctrl>, ops: &mut VecDeque<DevOp>) -> bool {
        let mut g = self.lock();
        ctrl.append(&mut g.ctrl);
        let n = max.min(g.ops.len());
        ops.extend(g.ops.drain(..n));
        let closed = g.closed;
        let blocked = g.blocked > 0;
        drop(g);
        if n > 0 && blocked {
            self.space.notify_all();
        }
        closed
    }

    /// Ring consumer: announce sleep; returns false (and cancels) if work arrived.
    pub(crate) fn prepare_sleep(&self) -> bool {
        self.sleeping.store(true, Ordering::SeqCst);
        let g = self.lock();
        let idle = g.ops.is_empty() && g.ctrl.is_empty() && !g.closed;
        drop(g);
        if !idle {
            self.sleeping.store(false, Ordering::SeqCst);
        }
        idle
    }

    pub(crate) fn woke(&self) {
        self.sleeping.store(false, Ordering::SeqCst);
    }

    /// Condition-variable consumer: wait up to `timeout` (forever if `None`) for work,
    /// then take control messages and up to `max` operations. Returns whether closed.
    pub(crate) fn take_wait(
        &self,
        max: usize,
        timeout: Option<std::time::Duration>,
        ctrl: &mut Vec<Ctrl>,
        ops: &mut VecDeque<DevOp>,
    ) -> bool {
        let mut g = self.lock();
        if g.ops.is_empty() && g.ctrl.is_empty() && !g.closed {
            g.idle += 1;
            g = match timeout {
                None => self.work.wait(g).unwrap_or_else(|p| p.into_inner()),
                Some(t) => {
                    self.work
                        .wait_timeout(g, t)
                        .unwrap_or_else(|p| p.into_inner())
                        .0
                }
            };
            g.idle -= 1;
        }
        drop(g);
        self.take(max, ctrl, ops)
    }

    /// Condition-variable consumer: wait until there is work or the mailbox closes,
    /// then take one operation (and all control messages).
    pub(crate) fn wait_one(&self, ctrl: &mut Vec<Ctrl>) -> Option<DevOp> {
        let mut g = self.lock();
        loop {
            ctrl.append(&mut g.ctrl);
            if let Some(op) = g.ops.pop_front() {
                let blocked = g.blocked > 0;
                // A batch wakes one consumer (`push`); each one that takes an
                // operation wakes the next while operations and idle
                // consumers are left, so that the batch spreads over them.
                let more = !g.ops.is_empty() && g.idle > 0;
                drop(g);
                if blocked {
                    self.space.notify_one();
                }
                if more {
                    self.work.notify_one();
                }
                return Some(op);
            }
            if g.closed {
                return None;
            }
            g.idle += 1;
            g = self.work.wait(g).unwrap_or_else(|p| p.into_inner());
            g.idle -= 1;
        }
    }
}
