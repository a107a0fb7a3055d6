//! Helpers shared by the behaviour tests: polling and yielding without timing anything, task
//! plumbing, a mock clock, and typed build errors. The per-pool fakes and fixtures live in the
//! submodules. Each test binary (`tests/*.rs`, or an area's `tests/AREA/main.rs`) is its own
//! crate and uses only part of this module, hence the `dead_code` allowance.
//!
//! What the fixtures share between threads sits behind parking_lot's locks or passes through
//! tokio's channels, never std's: those are compiled with the tests, so ThreadSanitizer sees the
//! hand-overs they make (`.ci/sanitizers`; std is not built with the sanitizer).
#![allow(dead_code)]

pub mod channel;
pub mod keyed;
pub mod logs;
pub mod managed;
pub mod panics;
pub mod session;
pub mod stream;

/// Holds user code (a connection's close, a destructor, a `detach`) on its own thread until
/// the test lets it go, counting the calls that reached it: how the bound tests keep a
/// resource closing while they ask the pool for another.
///
/// parking_lot's mutex and condition variable rather than std's: they are compiled with the
/// tests, so ThreadSanitizer sees the hand-over they make (std's are not instrumented, and a
/// wait on them reads as a race on everything the held code touched; see `.ci/sanitizers`).
#[derive(Debug, Default)]
pub struct Hold {
    /// Calls that reached the hold, and whether it is open.
    state: parking_lot::Mutex<(usize, bool)>,
    moved: parking_lot::Condvar,
}

impl Hold {
    /// Called by the held code: counts itself, then blocks its thread until [`Hold::open`].
    pub fn block(&self) {
        let mut state = self.state.lock();
        state.0 += 1;
        self.moved.notify_all();
        while !state.1 {
            self.moved.wait(&mut state);
        }
    }

    /// Blocks until `n` calls have reached the hold.
    pub fn wait_entered(&self, n: usize) {
        let mut state = self.state.lock();
        while state.0 < n {
            self.moved.wait(&mut state);
        }
    }

    /// Lets every held call (now and later) go on.
    pub fn open(&self) {
        self.state.lock().1 = true;
        self.moved.notify_all();
    }
}

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::task::JoinHandle;

/// Polls `fut` once with a waker that does nothing.
pub fn poll_once<F: Future>(fut: Pin<&mut F>) -> Poll<F::Output> {
    fut.poll(&mut Context::from_waker(std::task::Waker::noop()))
}

/// Yields to the runtime until `done` holds (bounded by iterations, never by time).
pub async fn settle(done: impl FnMut() -> bool) {
    settle_until("condition never held", done).await;
}

/// [`settle`], failing the test with `what` if `done` never holds.
///
/// On a current-thread runtime every task runs on this thread, so a bounded number of yields
/// decides. On a multi-thread runtime the work happens on worker threads that a loaded machine
/// may not schedule for a while: after the yields, this waits for them (sleeping this thread a
/// millisecond at a time, a minute at most) rather than failing a test on a scheduler's whim.
pub async fn settle_until(what: &str, mut done: impl FnMut() -> bool) {
    for _ in 0..10_000 {
        if done() {
            return;
        }
        tokio::task::yield_now().await;
    }
    if tokio::runtime::Handle::current().runtime_flavor()
        == tokio::runtime::RuntimeFlavor::MultiThread
    {
        for _ in 0..60_000 {
            if done() {
                return;
            }
            std::thread::sleep(Duration::from_millis(1));
            tokio::task::yield_now().await;
        }
    }
    panic!("{what}");
}

/// Lets every spawned task run up to its next await (on a current-thread runtime: until it
/// blocks, registers as a waiter or reaches a timer).
pub async fn run_spawned() {
    yield_times(16).await;
}

/// Yields to the runtime `n` times.
pub async fn yield_times(n: usize) {
    for _ in 0..n {
        tokio::task::yield_now().await;
    }
}

/// Spawns `task` on its own clone of `shared`.
pub fn spawn_with<T, F, Fut>(shared: &Arc<T>, task: F) -> JoinHandle<Fut::Output>
where
    F: FnOnce(Arc<T>) -> Fut,
    Fut: Future + Send + 'static,
    Fut::Output: Send + 'static,
{
    tokio::spawn(task(Arc::clone(shared)))
}

/// Awaits every task in order; a task that panicked fails the test.
pub async fn join_all<T>(tasks: Vec<JoinHandle<T>>) -> Vec<T> {
    let mut out = Vec::with_capacity(tasks.len());
    for task in tasks {
        out.push(task.await.expect("task did not panic"));
    }
    out
}

/// A mock clock (`slotpool::Clock::mock`) for the pools, and the handle that moves it.
#[derive(Clone)]
pub struct MockTime {
    clock: slotpool::Clock,
    mock: slotpool::MockClock,
}

impl MockTime {
    pub fn new() -> Self {
        let (clock, mock) = slotpool::Clock::mock();
        Self { clock, mock }
    }

    /// The clock to give a pool builder.
    pub fn clock(&self) -> slotpool::Clock {
        self.clock.clone()
    }

    pub fn now(&self) -> slotpool::Instant {
        self.clock.now()
    }

    pub fn advance(&self, by: Duration) {
        self.mock.advance(by);
    }
}

/// Pool builders set up to run on a [`MockTime`] with no background reaper: the test moves the
/// clock and calls `reap` itself.
pub trait ReapByHand {
    fn reaped_by_hand(self, time: &MockTime) -> Self;
}

/// What a build returned; a refused configuration fails the test.
pub fn built<T, E: std::fmt::Display>(built: Result<T, E>) -> T {
    match built {
        Ok(value) => value,
        Err(error) => panic!("valid configuration refused: {error}"),
    }
}

/// The error a build returned (pools are not `Debug`, so `unwrap_err` is not at hand); a build
/// that succeeded fails the test.
pub fn build_error<T, E>(built: Result<T, E>) -> E {
    match built {
        Ok(_) => panic!("the build succeeded"),
        Err(error) => error,
    }
}
