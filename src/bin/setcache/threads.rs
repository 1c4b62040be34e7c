//! Starting a command's threads all or none.
//!
//! A command's threads often meet at barriers, with each other and with the
//! thread that started them. If the system refuses a thread (a limit on
//! processes or on address space), the ones already started would wait
//! there for ever for one that never came. Threads started through a
//! [`Gate`] run their bodies only once every one of them exists; when one
//! cannot be started, the others return without running theirs, and the
//! command gets an error that says why.

use std::sync::{Condvar, Mutex};
use std::thread::{Scope, ScopedJoinHandle};

/// Where a command's threads wait until all of them are started.
#[derive(Default)]
pub(crate) struct Gate {
    /// `None` while threads are being started; then whether they run.
    state: Mutex<Option<bool>>,
    changed: Condvar,
}

impl Gate {
    /// Begin starting threads; see [`Starting`].
    pub(crate) fn starting(&self) -> Starting<'_> {
        Starting { gate: self }
    }

    /// Wait until the gate is opened (true) or shut (false).
    fn wait(&self) -> bool {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            match *s {
                Some(go) => return go,
                None => s = self.changed.wait(s).unwrap_or_else(|p| p.into_inner()),
            }
        }
    }

    /// Open (`go`) or shut the gate, if it is neither yet.
    fn settle(&self, go: bool) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if s.is_none() {
            *s = Some(go);
            self.changed.notify_all();
        }
    }
}

/// Threads being started at a [`Gate`]: [`Starting::open`] lets them run;
/// dropped without it (an early return, a panic), it shuts the gate, and
/// they return `None` without running their bodies.
pub(crate) struct Starting<'g> {
    gate: &'g Gate,
}

impl<'g> Starting<'g> {
    /// Start a thread in scope `s` that runs `f` once the gate opens. If the
    /// system refuses it, the gate is shut and the error says so.
    pub(crate) fn spawn<'scope, 'env, T, F>(
        &self,
        s: &'scope Scope<'scope, 'env>,
        f: F,
    ) -> Result<ScopedJoinHandle<'scope, Option<T>>, String>
    where
        'g: 'scope,
        F: FnOnce() -> T + Send + 'scope,
        T: Send + 'scope,
    {
        self.try_spawn(s, f)
            .map_err(|e| format!("the system refused to start a thread: {e}"))
    }

    /// As [`Starting::spawn`], with the system's error.
    fn try_spawn<'scope, 'env, T, F>(
        &self,
        s: &'scope Scope<'scope, 'env>,
        f: F,
    ) -> std::io::Result<ScopedJoinHandle<'scope, Option<T>>>
    where
        'g: 'scope,
        F: FnOnce() -> T + Send + 'scope,
        T: Send + 'scope,
    {
        let gate: &'scope Gate = self.gate;
        let r = std::thread::Builder::new().spawn_scoped(s, move || gate.wait().then(f));
        if r.is_err() {
            gate.settle(false);
        }
        r
    }

    /// Let every thread started run.
    pub(crate) fn open(self) {
        self.gate.settle(true);
    }
}

impl Drop for Starting<'_> {
    fn drop(&mut self) {
        // After `open`, this changes nothing.
        self.gate.settle(false);
    }
}

/// Start `n` threads in scope `s`, thread `k` running `f(k)`, all or none
/// (see [`Gate`]); the handles in thread order.
pub(crate) fn spawn_all<'scope, 'env, T, F>(
    gate: &'scope Gate,
    s: &'scope Scope<'scope, 'env>,
    n: usize,
    f: impl Fn(usize) -> F,
) -> Result<Vec<ScopedJoinHandle<'scope, Option<T>>>, String>
where
    F: FnOnce() -> T + Send + 'scope,
    T: Send + 'scope,
{
    let start = gate.starting();
    let handles = (0..n)
        .map(|k| {
            start.try_spawn(s, f(k)).map_err(|e| {
                format!(
                    "the system refused to start thread {} of {n}: {e} (fewer threads, or \
                     higher limits on processes and address space, would do)",
                    k + 1
                )
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    start.open();
    Ok(handles)
}

/// The value of a thread started at an opened gate.
pub(crate) fn ran<T>(v: Option<T>) -> T {
    v.expect("the gate was opened")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Barrier;

    #[test]
    fn threads_run_once_all_are_started() {
        let gate = Gate::default();
        let barrier = Barrier::new(4);
        let sum: usize = std::thread::scope(|s| {
            let hs = spawn_all(&gate, s, 4, |k| {
                let b = &barrier;
                move || {
                    b.wait();
                    k
                }
            })
            .unwrap();
            hs.into_iter().map(|h| ran(h.join().unwrap())).sum()
        });
        assert_eq!(sum, 6);
    }

    #[test]
    fn a_shut_gate_lets_started_threads_return_without_running() {
        // The threads wait at a barrier that a fourth thread would complete:
        // with the gate shut before it exists, none of them runs its body.
        let gate = Gate::default();
        let barrier = Barrier::new(4);
        let got: Vec<Option<()>> = std::thread::scope(|s| {
            let start = gate.starting();
            let hs: Vec<_> = (0..3)
                .map(|_| {
                    start.spawn(s, || {
                        barrier.wait();
                    })
                })
                .collect::<Result<_, _>>()
                .unwrap();
            drop(start);
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(got, [None, None, None]);
    }
}
