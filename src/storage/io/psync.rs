//! The portable engine: a few threads per device doing `preadv`/`pwritev`/`fsync`.
//!
//! Used where io_uring is refused (old kernels, seccomp, containers). Each thread
//! takes one operation at a time from the device's mailbox, so the device sees up to
//! `psync_threads` requests at once.

use crate::util::origin::Origin;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use super::mailbox::Mailbox;
use super::{DevOp, DevOpKind, DeviceEngine, EngineParams, OpResult, last_errno};
use crate::error::{Error, Result};

pub(crate) struct PsyncEngine {
    mailbox: Arc<Mailbox>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    /// The process that started it: in a child made by `fork` the threads
    /// are the parent's, neither stopped nor joined there.
    origin: Origin,
}

impl PsyncEngine {
    pub(crate) fn start(p: &EngineParams) -> Result<Arc<dyn DeviceEngine>> {
        let n = p.psync_threads.clamp(1, 64);
        let mailbox = Arc::new(Mailbox::new(p.io_depth.max(1) as usize * 4, None));
        let mut threads = Vec::with_capacity(n);
        for i in 0..n {
            let mb = mailbox.clone();
            let cpu = p.cpu;
            let dev = p.device;
            let h = crate::util::fork_locks::spawn(
                std::thread::Builder::new().name(format!("setcache-psync-{dev}.{i}")),
                move || {
                    if let Some(c) = cpu {
                        let _ = super::pin_to_cpu(c);
                    }
                    let mut ctrl = Vec::new();
                    while let Some(op) = mb.wait_one(&mut ctrl) {
                        ctrl.clear(); // nothing to register for plain system calls
                        let r = execute(&op);
                        op.finish(r);
                    }
                },
            )
            .map_err(|e| {
                Error::os_call(format!("cannot start a psync thread for device {dev}"), e)
            })?;
            threads.push(h);
        }
        Ok(Arc::new(PsyncEngine {
            mailbox,
            threads: Mutex::new(threads),
            origin: Origin::here(),
        }))
    }
}

// `execute` passes a file offset in one register (64-bit Linux).
const _: () = assert!(
    std::mem::size_of::<libc::c_long>() == 8,
    "setcache needs 64-bit Linux"
);

/// Run one operation with blocking system calls. Interrupted calls are retried;
/// a partial transfer is reported as such.
pub(crate) fn execute(op: &DevOp) -> OpResult {
    let fd: std::os::fd::RawFd = op.backing.raw_fd();
    loop {
        // The system calls themselves, not the C library's wrappers: those are
        // thread cancellation points, and this runs on application threads too
        // (a synchronous request in place), where a cancellation must not
        // unwind through an operation in flight. The offset goes as the low
        // word, the high word 0 (64-bit Linux).
        let call = match op.kind {
            DevOpKind::Read => Some(libc::SYS_preadv),
            DevOpKind::Write => Some(libc::SYS_pwritev),
            DevOpKind::Fsync => None,
        };
        // The iovecs describe memory the request owner keeps alive and
        // exclusive until completion; `fd` is open for the life of `op.backing`.
        // SAFETY: the memory and the descriptor are valid for the call (above).
        let rc = unsafe {
            match call {
                Some(nr) => libc::syscall(
                    nr,
                    fd,
                    op.iov.as_ptr(),
                    op.iov.len() as libc::c_long,
                    op.offset as libc::c_long,
                    0 as libc::c_long,
                ),
                None => libc::syscall(libc::SYS_fdatasync, fd),
            }
        } as isize;
        if rc >= 0 {
            return OpResult::Done(rc as usize);
        }
        let e = last_errno();
        if e != libc::EINTR {
            return OpResult::Errno(e);
        }
    }
}

impl DeviceEngine for PsyncEngine {
    fn blocking_in_caller(&self) -> bool {
        true
    }
    fn submit(&self, ops: Vec<DevOp>) {
        self.mailbox.push(ops);
    }
    fn shutdown(&self) {
        if !self.origin.is_here() {
            // A child made by `fork` (the drop keeps the threads' handles).
            return;
        }
        self.mailbox.close();
        let hs: Vec<_> = self
            .threads
            .lock()
            .map(|mut g| g.drain(..).collect())
            .unwrap_or_default();
        for h in hs {
            let _ = h.join();
        }
    }
}

impl Drop for PsyncEngine {
    fn drop(&mut self) {
        if !self.origin.is_here() {
            // A child made by `fork`: the threads' handles are not let go
            // of (detaches of threads the child does not have).
            let hs = self.threads.get_mut().map(std::mem::take);
            std::mem::forget(hs.unwrap_or_else(|p| std::mem::take(p.into_inner())));
            return;
        }
        self.shutdown();
    }
}
