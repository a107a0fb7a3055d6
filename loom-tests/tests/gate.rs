//! Loom models of the wait gate, driven through the `Limit` built on it (one permit keeps
//! every interleaving about a single unit of capacity).
//!
//! Run: `RUSTFLAGS="--cfg slotpool_loom" LOOM_MAX_PREEMPTIONS=2 cargo test --release -p
//! slotpool-loom-tests --target-dir target/loom`.
#![cfg(slotpool_loom)]

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll};

use loom::future::block_on;
use loom::sync::Arc;
use loom::thread;
use slotpool::{Closed, Limit};

fn poll_once<F: Future>(fut: std::pin::Pin<&mut F>) -> Poll<F::Output> {
    fut.poll(&mut Context::from_waker(std::task::Waker::noop()))
}

/// Release racing registration: a waiter that enqueues while the only permit is being
/// returned must not sleep through it (the Dekker pairing of `WAITING` and the permit count).
/// loom reports a deadlock if the waiter can be left blocked.
#[test]
fn release_vs_registration() {
    loom::model(|| {
        let limit = Arc::new(Limit::new(1).unwrap());
        let held = Limit::try_acquire_owned(&limit).unwrap();
        let waiter = {
            let limit = Arc::clone(&limit);
            thread::spawn(move || {
                let permit = block_on(limit.acquire()).unwrap();
                drop(permit);
            })
        };
        drop(held);
        waiter.join().unwrap();
        assert_eq!(limit.available(), 1);
        assert_eq!(limit.waiting(), 0);
    });
}

/// A waiter notified and then dropped passes the wake-up on: the second waiter still gets
/// the permit. loom reports a deadlock if the notification is swallowed.
#[test]
fn notified_waiter_dropped_passes_the_wakeup_on() {
    loom::model(|| {
        let limit = Arc::new(Limit::new(1).unwrap());
        let held = Limit::try_acquire_owned(&limit).unwrap();
        let second = {
            let limit = Arc::clone(&limit);
            thread::spawn(move || {
                drop(block_on(limit.acquire()).unwrap());
            })
        };
        {
            let mut first = pin!(limit.acquire());
            let polled = poll_once(first.as_mut());
            let releaser = thread::spawn(move || drop(held));
            releaser.join().unwrap();
            if let Poll::Ready(permit) = polled {
                drop(permit.unwrap());
            }
            // `first` is dropped here, possibly holding an unused notification.
        }
        second.join().unwrap();
        assert_eq!(limit.available(), 1);
        assert_eq!(limit.waiting(), 0);
    });
}

/// Close racing a wait: the waiter resolves (with the permit if it won, else `Closed`), never
/// hangs, and a close leaves nobody queued.
#[test]
fn close_vs_wait() {
    loom::model(|| {
        let limit = Arc::new(Limit::new(1).unwrap());
        let held = Limit::try_acquire_owned(&limit).unwrap();
        let waiter = {
            let limit = Arc::clone(&limit);
            thread::spawn(move || block_on(limit.acquire()).map(drop))
        };
        limit.close();
        let outcome = waiter.join().unwrap();
        assert_eq!(outcome, Err(Closed));
        drop(held);
        assert_eq!(limit.waiting(), 0);
        assert_eq!(limit.available(), 1);
    });
}

/// Timeout racing a notify: the waiter gives up (its future is dropped, as a deadline does)
/// while a release notifies it. Whatever the order, the permit ends up free, the queue empty,
/// and a later acquire succeeds at once.
#[test]
fn timeout_vs_notify() {
    loom::model(|| {
        let limit = Arc::new(Limit::new(1).unwrap());
        let held = Limit::try_acquire_owned(&limit).unwrap();
        let waiter = {
            let limit = Arc::clone(&limit);
            thread::spawn(move || {
                let mut fut = pin!(limit.acquire());
                if let Poll::Ready(permit) = poll_once(fut.as_mut()) {
                    drop(permit.unwrap());
                }
                // Deadline passes: the future is dropped here.
            })
        };
        drop(held);
        waiter.join().unwrap();
        assert_eq!(limit.waiting(), 0);
        assert_eq!(limit.available(), 1);
        assert!(limit.try_acquire().is_ok());
    });
}

/// Two waiters and two releases: both waiters are served (the waiter that finds more
/// capacity left wakes the next one), in any interleaving.
#[test]
fn two_waiters_two_releases() {
    loom::model(|| {
        let limit = Arc::new(Limit::new(2).unwrap());
        let a = Limit::try_acquire_owned(&limit).unwrap();
        let b = Limit::try_acquire_owned(&limit).unwrap();
        let waiters: Vec<_> = (0..2)
            .map(|_| {
                let limit = Arc::clone(&limit);
                thread::spawn(move || drop(block_on(limit.acquire()).unwrap()))
            })
            .collect();
        drop(a);
        drop(b);
        for w in waiters {
            w.join().unwrap();
        }
        assert_eq!(limit.available(), 2);
    });
}
