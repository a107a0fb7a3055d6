//! Loom models of the limiter as keyed admission uses it (`slotpool::keyed`).
//!
//! `keyed` itself is compiled out under `cfg(slotpool_loom)` (it needs tokio's timer and
//! blocking pool), so these models drive the same [`Limit`] calls it makes, in the same order:
//!
//! * the fast path: `try_acquire_owned` on the share's limiter;
//! * the slow path: `acquire_owned` polled until a permit comes (loom's `block_on`), or polled
//!   and then **dropped** — which is exactly what `tokio::time::timeout` does to it when the
//!   wait bound elapses, and what a caller dropping its future mid-wait does;
//! * the `OwnedPermit` **moved into another thread** (the blocking closure) and released there,
//!   possibly while the caller's side is gone;
//! * `close` racing a waiter (`Keyed::close`).
//!
//! Which interleavings `tests/gate.rs` (the gate's own models, driven through `Limit` too)
//! already covers, and so are not repeated here:
//!
//! * `release_vs_registration`: the Dekker pairing of the waiter's `WAITING` enqueue with the
//!   releaser's check (no lost wake-up), for a release on the holder's thread;
//! * `notified_waiter_dropped_passes_the_wakeup_on` and `timeout_vs_notify`: a waiter dropped
//!   after (or while) being notified passes the wake-up on and leaves the queue empty; both use
//!   the borrowing `Limit::acquire` future;
//! * `close_vs_wait`: `close` against a parked waiter with no release;
//! * `two_waiters_two_releases`: the hand-off when a waiter wins a permit while another
//!   remains (a share of two emptied at once), so no model for that here.
//!
//! What only these models check is keyed's own usage: the **owned** future
//! (`AcquireOwned`, whose `Drop` is a different code path from `Acquire`'s) reached after a
//! failed `try_acquire_owned`, mutual exclusion on a share of one (the gate models count
//! permits, not who is inside), a permit released from the thread it was **moved into** while
//! the caller waits again (and never before the work finished), and `close` racing a release.
//!
//! Run: `RUSTFLAGS="--cfg slotpool_loom" LOOM_MAX_PREEMPTIONS=2 cargo test --release
//! -p slotpool-loom-tests --test keyed --target-dir target/loom`.
#![cfg(slotpool_loom)]

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
// Under loom the crate's `Arc` is loom's, which cannot be a method receiver: the owned
// acquires are called as associated functions (`Limit::acquire_owned(limit)`), which also
// compiles in normal builds.
use loom::sync::Arc;
use loom::thread;
use slotpool::{Limit, OwnedPermit};

fn share(slots: usize) -> Arc<Limit> {
    match Limit::new(slots) {
        Ok(limit) => Arc::new(limit),
        Err(error) => panic!("share of {slots} refused: {error}"),
    }
}

/// Joins a model thread, re-raising its panic so a failed assertion fails the model.
fn join(handle: thread::JoinHandle<()>) {
    if let Err(panic) = handle.join() {
        std::panic::resume_unwind(panic);
    }
}

/// Keyed's admission: the lock-free attempt, then the wait (without a deadline).
fn admit(limit: &Arc<Limit>) -> OwnedPermit {
    if let Ok(permit) = Limit::try_acquire_owned(&limit) {
        return permit;
    }
    match loom::future::block_on(Limit::acquire_owned(Arc::clone(limit))) {
        Ok(permit) => permit,
        Err(closed) => panic!("limit closed unexpectedly: {closed}"),
    }
}

/// Two callers contend for a share of one, each through the fast path and, failing that, the
/// wait. Both get in, never at the same time, and the permit is back afterwards.
#[test]
fn share_of_one_admits_one_at_a_time() {
    loom::model(|| {
        let limit = share(1);
        let inside = Arc::new(AtomicUsize::new(0));
        let callers: Vec<_> = (0..2)
            .map(|_| {
                let limit = Arc::clone(&limit);
                let inside = Arc::clone(&inside);
                thread::spawn(move || {
                    let permit = admit(&limit);
                    assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "share overshot");
                    inside.fetch_sub(1, Ordering::SeqCst);
                    drop(permit);
                })
            })
            .collect();
        for caller in callers {
            join(caller);
        }
        assert_eq!(limit.available(), 1);
        assert_eq!(limit.waiting(), 0);
    });
}

/// A waiter polled once and then dropped (its timeout fired) while the holder releases: the
/// release's wake-up, if it went to the dropped waiter, passes to the other waiter, which must
/// get in (loom reports a deadlock otherwise), and no permit leaks.
#[test]
fn timed_out_waiter_passes_its_wake_up_on() {
    loom::model(|| {
        let limit = share(1);
        let held = match Limit::try_acquire_owned(&limit) {
            Ok(permit) => permit,
            Err(error) => panic!("fresh share empty: {error}"),
        };

        let timed_out = {
            let limit = Arc::clone(&limit);
            thread::spawn(move || {
                let mut wait = pin!(Limit::acquire_owned(Arc::clone(&limit)));
                let mut cx = Context::from_waker(Waker::noop());
                // One poll, then the deadline: `timeout` drops the inner future.
                if let Poll::Ready(Ok(permit)) = wait.as_mut().poll(&mut cx) {
                    drop(permit);
                }
            })
        };
        let patient = {
            let limit = Arc::clone(&limit);
            thread::spawn(move || drop(admit(&limit)))
        };

        drop(held);
        join(timed_out);
        join(patient);
        assert_eq!(limit.available(), 1);
        assert_eq!(limit.waiting(), 0);
    });
}

/// The permit moves into the blocking closure's thread and is released there when the work
/// ends; the caller's side has already gone. A second caller waiting on the share gets in only
/// after the work finished (no overlap), and does get in (the release from the other thread
/// wakes it).
#[test]
fn permit_moved_into_the_closure_holds_until_the_work_ends() {
    loom::model(|| {
        let limit = share(1);
        let work_done = Arc::new(AtomicBool::new(false));

        let permit = admit(&limit);
        let blocking = {
            let work_done = Arc::clone(&work_done);
            thread::spawn(move || {
                let _permit = permit; // moved in: held until the work ends
                work_done.store(true, Ordering::SeqCst);
            })
        };
        // The first caller's future is gone; the second call waits on the share.
        let second = admit(&limit);
        assert!(
            work_done.load(Ordering::SeqCst),
            "admitted while the work still held the slot"
        );
        drop(second);
        join(blocking);
        assert_eq!(limit.available(), 1);
    });
}

/// `close` races a parked waiter and a release: the waiter ends (with a permit or with
/// `Closed`), never sleeps through the close, and the permit count is whole afterwards.
#[test]
fn close_races_a_waiter_and_a_release() {
    loom::model(|| {
        let limit = share(1);
        let held = match Limit::try_acquire_owned(&limit) {
            Ok(permit) => permit,
            Err(error) => panic!("fresh share empty: {error}"),
        };
        let waiter = {
            let limit = Arc::clone(&limit);
            thread::spawn(move || {
                // Ok (got the released permit first) or Err(Closed); either ends the wait.
                let _ = loom::future::block_on(Limit::acquire_owned(Arc::clone(&limit)));
            })
        };
        limit.close();
        drop(held);
        join(waiter);
        assert!(limit.is_closed());
        assert_eq!(limit.available(), 1);
    });
}
