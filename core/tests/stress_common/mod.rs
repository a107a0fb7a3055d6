//! Helpers the `stress_*` tests share: an occupancy count that fails the test the moment a
//! bound is overshot, a future that tells when it has queued, and the first-in-first-out check
//! every waiting protocol runs. Nothing here waits on time: every wait is for an event.
#![allow(dead_code)] // each stress test uses part of it

use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// How many units are held right now, checked against a bound at every entry: raised after a
/// unit is taken and lowered before it is given back, so it never exceeds what the protocol
/// itself counts as taken.
#[derive(Debug)]
pub struct Occupancy {
    bound: usize,
    now: AtomicUsize,
    entries: AtomicUsize,
}

impl Occupancy {
    pub fn new(bound: usize) -> Self {
        Self {
            bound,
            now: AtomicUsize::new(0),
            entries: AtomicUsize::new(0),
        }
    }

    /// One unit taken; fails the test if more than the bound are held.
    #[track_caller]
    pub fn enter(&self) {
        let before = self.now.fetch_add(1, Ordering::SeqCst);
        assert!(
            before < self.bound,
            "{} units held at once, the bound is {}",
            before + 1,
            self.bound
        );
        self.entries.fetch_add(1, Ordering::Relaxed);
    }

    /// One unit about to be given back.
    pub fn leave(&self) {
        let before = self.now.fetch_sub(1, Ordering::SeqCst);
        assert!(before > 0, "left more often than entered");
    }

    /// Units held right now.
    pub fn held(&self) -> usize {
        self.now.load(Ordering::SeqCst)
    }

    /// Units taken so far.
    pub fn entries(&self) -> usize {
        self.entries.load(Ordering::Relaxed)
    }
}

/// Resolves like `fut`, and sends on `queued` the first time `fut` returns `Pending` (so a
/// waiter built on the gate is in its queue by then).
pub async fn signal_queued<F: Future>(
    fut: F,
    queued: tokio::sync::oneshot::Sender<()>,
) -> F::Output {
    let mut fut = pin!(fut);
    let mut queued = Some(queued);
    std::future::poll_fn(|cx| {
        let poll = fut.as_mut().poll(cx);
        if poll.is_pending() {
            if let Some(queued) = queued.take() {
                let _ = queued.send(());
            }
        }
        poll
    })
    .await
}

/// The order in which waiters were served (each pushes its id when it gets its unit).
pub type Served = Arc<parking_lot::Mutex<Vec<usize>>>;

/// Checks that waiters are served first in, first out. With capacity exhausted, `waiters`
/// tasks queue one after another (each has returned `Pending` before the next starts), and
/// about one in four is cancelled (dropped while queued); `waiting()` must count exactly the
/// ones still queued. Then `free_one()` frees a single unit. `wait(id, served)` must wait for a
/// unit, push `id` to `served`, and give the unit back, which passes it to the next waiter:
/// one unit travels down the queue, and the ids must come out in queueing order.
pub async fn assert_served_in_queue_order<W, Fut>(
    waiters: usize,
    seed: u64,
    wait: W,
    waiting: impl Fn() -> usize,
    free_one: impl FnOnce(),
) where
    W: Fn(usize, Served) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let mut rng = SmallRng::seed_from_u64(seed);
    let served = Served::default();
    let mut queued = Vec::new();
    let mut stops = Vec::new();
    let mut expected = Vec::new();
    let mut cancelled = 0;
    for id in 0..waiters {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (is_queued, on_queue) = tokio::sync::oneshot::channel();
        let waiter = wait(id, Arc::clone(&served));
        let task = tokio::spawn(async move {
            tokio::select! {
                () = signal_queued(waiter, is_queued) => true,
                _ = stopped => false,
            }
        });
        on_queue.await.expect("the waiter queued");
        if rng.random_ratio(1, 4) {
            drop(stop);
            assert!(!task.await.expect("the waiter did not panic"));
            cancelled += 1;
        } else {
            stops.push(stop);
            expected.push(id);
            queued.push(task);
        }
        assert_eq!(waiting(), expected.len(), "the queue's count is off");
    }
    assert!(cancelled > 0, "no waiter was cancelled");
    free_one();
    for task in queued {
        assert!(task.await.expect("the waiter did not panic"));
    }
    assert_eq!(*served.lock(), expected, "served out of queueing order");
    assert_eq!(waiting(), 0);
    drop(stops);
}
