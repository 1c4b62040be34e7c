//! One application thread's link to one partition's worker, and the two
//! sides of the bundling protocol over it: requests go one way in bundles
//! (one message per thread and partition per batch), replies come back the
//! same way.
//!
//! Neither side ever blocks on the other while holding what the other needs:
//! the application thread, finding the request ring full, takes its replies
//! while it waits (so a worker whose reply ring was full can go on); a worker
//! finding the reply ring full keeps the bundle in its [`Outbox`] and serves
//! its other links. With rings at least as deep as the requests a thread may
//! have outstanding, neither ring ever fills (every bundle holds at least one
//! request or reply); the full paths are for smaller rings.
//!
//! Written over the cache's synchronisation [`Model`], so that the model check
//! below runs this code.

use std::collections::VecDeque;
use std::sync::atomic::Ordering::{Acquire, Release};

use super::ring::Ring;
use crate::cache::sync::{Model, Os, Word};

/// See the module's comment.
pub(crate) struct Link<B, R, M: Model = Os> {
    /// Bundles of requests, application to worker.
    pub(crate) requests: Ring<B, M>,
    /// Bundles of replies, worker to application.
    pub(crate) replies: Ring<R, M>,
    /// 1 once the application side has left (nothing outstanding): the worker
    /// drops the link.
    closed: M::W,
}

impl<B, R, M: Model> Link<B, R, M> {
    /// A link whose rings hold `bundles` bundles each (a power of two, at least 2).
    pub(crate) fn new(bundles: usize) -> Link<B, R, M> {
        Link {
            requests: Ring::new(bundles),
            replies: Ring::new(bundles),
            closed: M::W::new(0),
        }
    }

    /// The application side leaves (after its last reply).
    pub(crate) fn close(&self) {
        self.closed.store(1, Release);
    }

    /// Whether the application side has left.
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Acquire) == 1
    }

    /// Application side: send `bundle`. While the ring is full, hand the
    /// replies that came back to `take`, and `pause` when there were none.
    pub(crate) fn send(&self, mut bundle: B, mut take: impl FnMut(R), mut pause: impl FnMut()) {
        loop {
            match self.requests.push(bundle) {
                Ok(()) => return,
                Err(b) => bundle = b,
            }
            let mut got = false;
            while let Some(r) = self.replies.pop() {
                take(r);
                got = true;
            }
            if !got {
                pause();
            }
        }
    }
}

/// Worker side: the reply bundles of one link that did not fit its ring yet,
/// oldest first.
pub(crate) struct Outbox<R> {
    waiting: VecDeque<R>,
}

impl<R> Outbox<R> {
    pub(crate) fn new() -> Outbox<R> {
        Outbox {
            waiting: VecDeque::new(),
        }
    }

    /// Send `bundle` after those waiting, as far as the ring takes them;
    /// whether anything went into the ring.
    pub(crate) fn send<B, M: Model>(&mut self, link: &Link<B, R, M>, bundle: R) -> bool {
        self.waiting.push_back(bundle);
        self.retry(link)
    }

    /// Push what is waiting, as far as the ring takes it; whether anything
    /// went into the ring.
    pub(crate) fn retry<B, M: Model>(&mut self, link: &Link<B, R, M>) -> bool {
        let mut sent = false;
        while let Some(b) = self.waiting.pop_front() {
            match link.replies.push(b) {
                Ok(()) => sent = true,
                Err(b) => {
                    self.waiting.push_front(b);
                    break;
                }
            }
        }
        sent
    }

    /// Whether nothing waits.
    pub(crate) fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::sync::shuttle_model::Shuttle;
    use std::sync::Arc;

    /// A bundle of up to three numbers, plain data (so that the broken ring's
    /// repeated reads stay sound and only the numbers show it).
    #[derive(Clone, Copy, Default)]
    struct Three {
        n: usize,
        v: [u64; 3],
    }

    impl Three {
        fn push(&mut self, x: u64) {
            self.v[self.n] = x;
            self.n += 1;
        }
        fn iter(self) -> impl Iterator<Item = u64> {
            self.v.into_iter().take(self.n)
        }
    }

    /// One application thread sends requests `0..n` in bundles of up to 2 to
    /// two workers (request `i` to worker `i % 2`) over rings of two
    /// bundles; each worker answers each bundle with a bundle of its numbers.
    /// Every request must be answered exactly once.
    fn bundles(n: u64, broken: bool) {
        let links: Vec<Arc<Link<Three, Three, Shuttle>>> = (0..2)
            .map(|_| {
                let mut l = Link::new(2);
                l.requests.skip_full_check = broken;
                l.replies.skip_full_check = broken;
                Arc::new(l)
            })
            .collect();
        let workers: Vec<_> = (0..2u64)
            .map(|w| {
                let l = links[w as usize].clone();
                let mine = (0..n).filter(|i| i % 2 == w).count();
                shuttle::thread::spawn(move || {
                    let mut out = Outbox::new();
                    let mut served = 0;
                    let mut idle = 0;
                    while (served < mine || !out.is_empty()) && idle < 5000 {
                        idle += 1;
                        let mut any = false;
                        while let Some(b) = l.requests.pop() {
                            served += b.n;
                            out.send(&*l, b);
                            any = true;
                        }
                        if !any {
                            out.retry(&*l);
                        }
                        shuttle::thread::yield_now();
                    }
                })
            })
            .collect();
        let mut answered = vec![0u32; n as usize];
        let mut got = 0;
        let take = |b: Three, answered: &mut Vec<u32>, got: &mut usize| {
            for i in b.iter() {
                answered[i as usize] += 1;
                *got += 1;
            }
        };
        let mut bundle = [Three::default(); 2];
        for i in 0..n {
            let w = (i % 2) as usize;
            bundle[w].push(i);
            if bundle[w].n == 2 || i + 2 >= n {
                let b = std::mem::take(&mut bundle[w]);
                links[w].send(
                    b,
                    |r| take(r, &mut answered, &mut got),
                    shuttle::thread::yield_now,
                );
            }
        }
        let mut idle = 0;
        while got < n as usize && answered.iter().all(|&a| a <= 1) {
            idle += 1;
            assert!(idle < 5000, "a request lost: {answered:?}");
            let mut any = false;
            for l in &links {
                while let Some(r) = l.replies.pop() {
                    take(r, &mut answered, &mut got);
                    any = true;
                }
            }
            if !any {
                shuttle::thread::yield_now();
            }
        }
        assert!(
            answered.iter().all(|&a| a == 1),
            "a request lost or answered twice: {answered:?}"
        );
        for w in workers {
            w.join().unwrap();
        }
        for l in &links {
            assert!(l.replies.pop().is_none(), "a request answered twice");
        }
        assert!(
            answered.iter().all(|&a| a == 1),
            "a request lost or answered twice: {answered:?}"
        );
    }

    #[test]
    fn shuttle_bundles_answer_every_request_once() {
        shuttle::check_random(|| bundles(16, false), 2000);
        shuttle::check_pct(|| bundles(16, false), 1000, 3);
    }

    /// A ring that pushes when full loses bundles: the check finds it.
    #[test]
    #[should_panic(expected = "lost")]
    fn shuttle_catches_bundles_over_a_ring_without_its_full_check() {
        shuttle::check_random(|| bundles(16, true), 2000);
    }
}
