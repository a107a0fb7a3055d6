//! Loom models of the wait gate and its intrusive queue.
//!
//! Two owners drive the real gate: [`Limit`] (whose releases hand a unit straight to the oldest
//! waiter, `Gate::handoff`), and `Units` below, a bare owner that frees capacity and calls
//! `Gate::notify_one`, so the plain-notification paths (a wake-up passed on by a cancelled
//! waiter) are reached too. Waiters on the bare gate are the crate's pinned `Waiter`s.
//!
//! Every model counts its executions and, per branch it is named for, the executions that
//! reached it (read from the gate's own branch counters, `Gate::probes`, or from what the model
//! saw), and fails unless it explored more than one execution and reached every such branch.
//!
//! Run: `RUSTFLAGS="--cfg slotpool_loom" LOOM_MAX_PREEMPTIONS=3 cargo test --release -p
//! slotpool-loom-tests --target-dir target/loom --test gate`.
#![cfg(slotpool_loom)]

use std::future::{poll_fn, Future};
use std::pin::{pin, Pin};
use std::task::{Context, Poll, Waker};

use loom::future::block_on;
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;
use slotpool::__internal::gate::{Gate, LeftQueue, Waiter};
use slotpool::__internal::limit::Limit;
use slotpool::Closed;
use slotpool_loom_tests::{model, Reach};

/// Runs `body` under loom ([`model`]) and asserts that it explored more than one execution
/// and reached each of `branches` in at least one.
fn check(branches: &[&'static str], body: impl Fn(&Reach) + Sync + Send + 'static) {
    model(body).explored(2).reached_all(branches);
}

fn limit_of(permits: usize) -> Arc<Limit> {
    match Limit::new(permits) {
        Ok(limit) => Arc::new(limit),
        Err(error) => panic!("limit of {permits} refused: {error}"),
    }
}

fn poll_once<F: Future>(fut: Pin<&mut F>) -> Poll<F::Output> {
    fut.poll(&mut Context::from_waker(Waker::noop()))
}

/// Joins a model thread, re-raising its panic so a failed assertion fails the model.
fn join<T>(handle: thread::JoinHandle<T>) -> T {
    match handle.join() {
        Ok(value) => value,
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

/// A bare owner of units of capacity on a gate, as the crate's owners do it: a unit is taken
/// with a `SeqCst` CAS and freed with a `SeqCst` RMW followed by `notify_one` (no handoff).
struct Units {
    free: AtomicUsize,
    gate: Gate,
}

impl Units {
    fn new(free: usize) -> Arc<Self> {
        Arc::new(Self {
            free: AtomicUsize::new(free),
            gate: Gate::new(),
        })
    }

    fn take(&self) -> Option<()> {
        let mut free = self.free.load(Ordering::SeqCst);
        loop {
            if free == 0 {
                return None;
            }
            match self
                .free
                .compare_exchange(free, free - 1, Ordering::SeqCst, Ordering::SeqCst)
            {
                Ok(_) => return Some(()),
                Err(actual) => free = actual,
            }
        }
    }

    fn put(&self) {
        self.free.fetch_add(1, Ordering::SeqCst);
        self.gate.notify_one();
    }

    /// Polls `waiter` once for a unit, with a waker that does nothing.
    fn poll_once(&self, waiter: Pin<&mut Waiter<'_>>) -> Poll<Result<(), Closed>> {
        waiter.poll_until(&mut Context::from_waker(Waker::noop()), || self.take())
    }

    /// Waits for a unit in `waiter` (first polled elsewhere, or fresh).
    fn wait_in(&self, mut waiter: Pin<&mut Waiter<'_>>) -> Result<(), Closed> {
        block_on(poll_fn(|cx| waiter.as_mut().poll_until(cx, || self.take())))
    }

    /// Waits for a unit in a fresh waiter.
    fn wait(&self) -> Result<(), Closed> {
        self.wait_in(pin!(self.gate.waiter()))
    }

    fn free(&self) -> usize {
        self.free.load(Ordering::SeqCst)
    }
}

/// A thread that waits for a unit in a fresh waiter.
fn spawn_wait(units: &Arc<Units>) -> thread::JoinHandle<Result<(), Closed>> {
    let units = Arc::clone(units);
    thread::spawn(move || units.wait())
}

/// A thread that frees `n` units, one after the other.
fn spawn_puts(units: &Arc<Units>, n: usize) -> thread::JoinHandle<()> {
    let units = Arc::clone(units);
    thread::spawn(move || (0..n).for_each(|_| units.put()))
}

/// A thread that waits for a permit and returns it at once.
fn spawn_acquire(limit: &Arc<Limit>) -> thread::JoinHandle<()> {
    let limit = Arc::clone(limit);
    thread::spawn(move || drop(block_on(limit.acquire()).unwrap()))
}

/// Records how the one waiter that gave up was placed when it left: still `linked`, or
/// woken (notified, or holding a handed-off unit).
fn hit_how_it_left(cov: &Reach, left: LeftQueue, linked: &'static str, woken: &'static str) {
    assert_eq!(
        left.linked + left.notified + left.holding_unit,
        1,
        "{left:?}"
    );
    cov.hit(if left.linked == 1 { linked } else { woken });
}

/// Release racing registration: a waiter that enqueues while the only permit is being
/// returned must not sleep through it (the Dekker pairing of `WAITING` and the permit count).
/// loom reports a deadlock if the waiter can be left blocked. Reaches both sides of the race:
/// the waiter queued when the permit came back (the release wakes it), and the waiter's retry
/// after enqueueing finding the permit (it leaves the queue by itself).
#[test]
fn release_vs_registration() {
    check(&["woken by the release", "found by the retry"], |cov| {
        let limit = limit_of(1);
        let held = Limit::try_acquire_owned(&limit).unwrap();
        let waiter = spawn_acquire(&limit);
        drop(held);
        join(waiter);
        assert_eq!(limit.available(), 1);
        assert_eq!(limit.waiting(), 0);
        let probes = limit.gate_probes();
        if probes.handed_off + probes.notified > 0 {
            cov.hit("woken by the release");
        }
        if probes.resolved.linked == 1 {
            cov.hit("found by the retry");
        }
    });
}

/// The pass-on of a plain notification: the oldest waiter is notified by a release and then
/// dropped without using it; the wake-up must go to the waiter behind it. The release is
/// joined before the drop, so the first waiter is always the one notified; the branch counted
/// is the pass-on finding the second waiter queued (a second pop). loom reports a deadlock if
/// the wake-up is swallowed.
#[test]
fn notified_waiter_dropped_passes_the_wakeup_on() {
    check(&["passed on to a queued waiter"], |cov| {
        let units = Units::new(0);
        let second;
        {
            let mut first = pin!(units.gate.waiter());
            assert!(units.poll_once(first.as_mut()).is_pending());
            second = spawn_wait(&units);
            let releaser = spawn_puts(&units, 1);
            join(releaser);
            assert!(first.is_queued());
            // `first` is dropped here holding an unused notification.
        }
        assert_eq!(join(second), Ok(()));
        assert_eq!(units.free(), 0);
        assert_eq!(units.gate.waiting(), 0);
        let probes = units.gate.probes();
        assert_eq!(probes.cancelled.notified, 1, "{probes:?}");
        if probes.notified == 2 {
            cov.hit("passed on to a queued waiter");
        }
    });
}

/// The pass-on of a handed-off unit: the oldest waiter is handed the permit and then dropped
/// without using it; the permit must go to the waiter behind it (or back to the limit).
#[test]
fn handed_off_unit_dropped_is_handed_on() {
    check(&["handed on to a queued waiter"], |cov| {
        let limit = limit_of(1);
        let held = Limit::try_acquire_owned(&limit).unwrap();
        let second;
        {
            let mut first = pin!(limit.acquire());
            assert!(poll_once(first.as_mut()).is_pending());
            second = spawn_acquire(&limit);
            let releaser = thread::spawn(move || drop(held));
            join(releaser);
            // `first` is dropped here holding the permit.
        }
        join(second);
        assert_eq!(limit.available(), 1);
        assert_eq!(limit.waiting(), 0);
        let probes = limit.gate_probes();
        assert_eq!(probes.cancelled.holding_unit, 1, "{probes:?}");
        if probes.handed_off == 2 {
            cov.hit("handed on to a queued waiter");
        }
    });
}

/// Cancel after one poll, from the middle of the queue: two waiters polled once, the second
/// dropped while a third enqueues behind it and two units are freed. The dropped waiter leaves
/// either while still linked (unlinked between its neighbours) or after being notified (it
/// passes the wake-up on); the others are served either way and the queue ends empty.
#[test]
fn cancel_after_one_poll() {
    check(
        &["cancelled while queued", "cancelled after its notification"],
        |cov| {
            let units = Units::new(0);
            let mut first = pin!(units.gate.waiter());
            assert!(units.poll_once(first.as_mut()).is_pending());
            let third;
            let releaser;
            {
                let mut second = pin!(units.gate.waiter());
                assert!(units.poll_once(second.as_mut()).is_pending());
                third = spawn_wait(&units);
                releaser = spawn_puts(&units, 2);
                assert!(second.is_queued());
                // `second` is dropped here, queued: linked, or notified.
            }
            assert_eq!(units.wait_in(first), Ok(()));
            assert_eq!(join(third), Ok(()));
            join(releaser);
            assert_eq!(units.free(), 0);
            assert_eq!(units.gate.waiting(), 0);
            hit_how_it_left(
                cov,
                units.gate.probes().cancelled,
                "cancelled while queued",
                "cancelled after its notification",
            );
        },
    );
}

/// Notify racing a drop, at the head of the queue: the oldest waiter is dropped while a
/// release notifies, with a second waiter behind it. Whichever comes first, the second waiter
/// is served and the unit is not lost.
#[test]
fn notify_vs_drop() {
    check(
        &["dropped while queued", "dropped after its notification"],
        |cov| {
            let units = Units::new(0);
            let second;
            let releaser;
            {
                let mut first = pin!(units.gate.waiter());
                assert!(units.poll_once(first.as_mut()).is_pending());
                second = spawn_wait(&units);
                releaser = spawn_puts(&units, 1);
                // `first` is dropped here, racing the release.
            }
            assert_eq!(join(second), Ok(()));
            join(releaser);
            assert_eq!(units.free(), 0);
            assert_eq!(units.gate.waiting(), 0);
            hit_how_it_left(
                cov,
                units.gate.probes().cancelled,
                "dropped while queued",
                "dropped after its notification",
            );
        },
    );
}

/// Handoff racing a drop: the oldest waiter is dropped while a release hands it the permit,
/// with a second waiter behind it. Either it leaves before the handoff (the permit goes to the
/// second waiter) or it returns the unit it was handed (which is handed on). The dropped
/// waiter is the owned future (`AcquireOwned`, keyed admission's), whose `Drop` is its own.
#[test]
fn handoff_vs_drop() {
    check(
        &["dropped while queued", "dropped holding a handed-off unit"],
        |cov| {
            let limit = limit_of(1);
            let held = Limit::try_acquire_owned(&limit).unwrap();
            let second;
            let releaser;
            {
                let mut first = pin!(Limit::acquire_owned(Arc::clone(&limit)));
                assert!(poll_once(first.as_mut()).is_pending());
                second = spawn_acquire(&limit);
                releaser = thread::spawn(move || drop(held));
                // `first` is dropped here, racing the release.
            }
            join(second);
            join(releaser);
            assert_eq!(limit.available(), 1);
            assert_eq!(limit.waiting(), 0);
            hit_how_it_left(
                cov,
                limit.gate_probes().cancelled,
                "dropped while queued",
                "dropped holding a handed-off unit",
            );
        },
    );
}

/// Close racing waits: one waiter queued before the close, one enqueueing concurrently with
/// it. Both resolve with `Closed`, never hang, and the close leaves nobody queued. The branch
/// counted is the close finding both queued (it must wake every one, not just the oldest).
#[test]
fn close_vs_wait() {
    check(&["close woke two queued waiters"], |cov| {
        let limit = limit_of(1);
        let held = Limit::try_acquire_owned(&limit).unwrap();
        let mut first = pin!(limit.acquire());
        assert!(poll_once(first.as_mut()).is_pending());
        let second = {
            let limit = Arc::clone(&limit);
            thread::spawn(move || block_on(limit.acquire()).map(drop))
        };
        let closer = {
            let limit = Arc::clone(&limit);
            thread::spawn(move || limit.close())
        };
        assert_eq!(block_on(first).map(drop), Err(Closed));
        assert_eq!(join(second), Err(Closed));
        join(closer);
        drop(held);
        assert_eq!(limit.waiting(), 0);
        assert_eq!(limit.available(), 1);
        if limit.gate_probes().closed == 2 {
            cov.hit("close woke two queued waiters");
        }
    });
}

/// Timeout racing a notify: the waiter gives up (its future is dropped, as a deadline does)
/// while a release wakes it. Whatever the order, the permit ends up free, the queue empty, and
/// a later acquire succeeds at once. (The release's handoff check is not ordered after a
/// concurrent enqueue, so here the waiter is woken by the release's plain notification; the
/// handed-off case is `handoff_vs_drop`.)
#[test]
fn timeout_vs_notify() {
    check(
        &["timed out while queued", "timed out after its wake-up"],
        |cov| {
            let limit = limit_of(1);
            let held = Limit::try_acquire_owned(&limit).unwrap();
            let waiter = {
                let limit = Arc::clone(&limit);
                thread::spawn(move || {
                    let mut fut = pin!(limit.acquire());
                    match poll_once(fut.as_mut()) {
                        Poll::Ready(permit) => {
                            drop(permit.unwrap());
                            false
                        }
                        // The deadline passes: the future is dropped here.
                        Poll::Pending => true,
                    }
                })
            };
            drop(held);
            let timed_out = join(waiter);
            assert_eq!(limit.waiting(), 0);
            assert_eq!(limit.available(), 1);
            assert!(limit.try_acquire().is_ok());
            if timed_out {
                hit_how_it_left(
                    cov,
                    limit.gate_probes().cancelled,
                    "timed out while queued",
                    "timed out after its wake-up",
                );
            }
        },
    );
}

/// FIFO: the permit released while two waiters are queued goes to the one that queued first.
/// The first waiter is polled before the second exists; the releaser notes whether both were
/// queued when it released (neither can leave the queue by itself then).
#[test]
fn fifo_order() {
    check(&["both queued at the release"], |cov| {
        let limit = limit_of(1);
        let held = Limit::try_acquire_owned(&limit).unwrap();
        let mut first = pin!(limit.acquire());
        assert!(poll_once(first.as_mut()).is_pending());
        let second = spawn_acquire(&limit);
        let releaser = {
            let limit = Arc::clone(&limit);
            thread::spawn(move || {
                let both = limit.waiting() == 2;
                drop(held);
                both
            })
        };
        let both_queued = join(releaser);
        // The first waiter was the oldest at the release, whatever the second did.
        match poll_once(first.as_mut()) {
            Poll::Ready(permit) => drop(permit.unwrap()),
            Poll::Pending => panic!("the permit skipped the oldest waiter"),
        }
        join(second);
        assert_eq!(limit.available(), 1);
        assert_eq!(limit.waiting(), 0);
        if both_queued {
            cov.hit("both queued at the release");
        }
    });
}

/// A waker that counts its wake-ups (std's atomic: it orders nothing the model checks).
#[derive(Default)]
struct Wakes(std::sync::atomic::AtomicUsize);

impl std::task::Wake for Wakes {
    fn wake(self: std::sync::Arc<Self>) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// FIFO after a lost race: the oldest waiter is notified, a caller that never waited takes the
/// unit first, and the waiter re-enqueues at the front, so the next unit wakes it again and not
/// the waiter queued behind it. The branch counted is the second waiter being queued when the
/// next unit is freed (it cannot leave the queue by itself then: nothing is free).
#[test]
fn requeued_waiter_keeps_its_place() {
    check(&["requeued ahead of a queued waiter"], |cov| {
        let units = Units::new(0);
        let wakes = std::sync::Arc::new(Wakes::default());
        let waker = Waker::from(std::sync::Arc::clone(&wakes));
        let woken = || wakes.0.load(std::sync::atomic::Ordering::Relaxed);
        let mut cx = Context::from_waker(&waker);
        let mut first = pin!(units.gate.waiter());
        assert!(first
            .as_mut()
            .poll_until(&mut cx, || units.take())
            .is_pending());
        let second = spawn_wait(&units);
        units.put();
        assert_eq!(woken(), 1, "the oldest waiter is the one notified");
        // A caller that never waited takes the unit (unless the second waiter, registering,
        // found it first).
        let barged = units.take().is_some();
        assert!(first
            .as_mut()
            .poll_until(&mut cx, || units.take())
            .is_pending());
        let both_queued = units.gate.waiting() == 2;
        units.put();
        assert_eq!(woken(), 2, "the requeued waiter lost its place");
        // Notified is not served: the second waiter may take this unit in a poll of its own.
        let served = first
            .as_mut()
            .poll_until(&mut cx, || units.take())
            .is_ready();
        if !served {
            units.put();
            assert_eq!(
                first.as_mut().poll_until(&mut cx, || units.take()),
                Poll::Ready(Ok(()))
            );
        }
        // The second waiter took the first unit (no barge) or the second (first not served).
        if barged && served {
            units.put();
        }
        assert_eq!(join(second), Ok(()));
        assert_eq!(units.free(), 0);
        assert_eq!(units.gate.waiting(), 0);
        if both_queued && units.gate.probes().requeued_front == 1 {
            cov.hit("requeued ahead of a queued waiter");
        }
    });
}

/// Two waiters and two releases: both waiters are served, in any interleaving. The branch
/// counted is both permits being handed straight to queued waiters.
#[test]
fn two_waiters_two_releases() {
    check(&["both handed over"], |cov| {
        let limit = limit_of(2);
        let a = Limit::try_acquire_owned(&limit).unwrap();
        let b = Limit::try_acquire_owned(&limit).unwrap();
        let waiters: Vec<_> = (0..2).map(|_| spawn_acquire(&limit)).collect();
        drop(a);
        drop(b);
        for w in waiters {
            join(w);
        }
        assert_eq!(limit.available(), 2);
        assert_eq!(limit.waiting(), 0);
        if limit.gate_probes().handed_off == 2 {
            cov.hit("both handed over");
        }
    });
}
