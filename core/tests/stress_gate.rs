//! Stress tests of the wait gate on its own, on a multi-threaded runtime, with a minimal owner
//! around it: a counter of free units taken by a checked CAS and freed by `fetch_add` followed
//! by `notify_one`, exactly the contract the gate's docs give owners. Many tasks wait, cancel
//! (a waiter notified and then dropped passes the wake-up on), hold and free units; an
//! occupancy count checks the bound at every step; at the end every unit is free and nobody
//! is queued. A lost wake-up shows as a task that never finishes. Bounded in operations,
//! never in time.

mod common;
mod stress_common;

use std::future::poll_fn;
use std::pin::pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::Poll;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use slotpool::blocks::Gate;
use slotpool::Closed;

use common::join_all;
use stress_common::{assert_served_in_queue_order, signal_queued, Occupancy};

/// The owner: free units and the gate its waiters queue on.
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

    /// The checked decrement (a `SeqCst` RMW, as the gate requires of an attempt).
    fn take(&self) -> Option<()> {
        self.free
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .ok()
            .map(drop)
    }

    fn free_one(&self) {
        self.free.fetch_add(1, Ordering::SeqCst);
        self.gate.notify_one();
    }

    async fn wait(&self) -> Result<(), Closed> {
        let mut waiter = pin!(self.gate.waiter());
        poll_fn(|cx| waiter.as_mut().poll_until(cx, || self.take())).await
    }
}

async fn worker(units: Arc<Units>, occupancy: Arc<Occupancy>, seed: u64, rounds: usize) -> usize {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut cancelled = 0;
    for _ in 0..rounds {
        match rng.random_range(0..10) {
            0..=4 => {
                units.wait().await.expect("gate not closed");
                occupancy.enter();
                tokio::task::yield_now().await;
                occupancy.leave();
                units.free_one();
            }
            5..=6 => {
                if units.take().is_some() {
                    occupancy.enter();
                    occupancy.leave();
                    units.free_one();
                }
            }
            7..=8 => {
                // Queue, let others run (a notification may arrive), then give up: a wake-up
                // received and not used passes to the next waiter.
                let mut waiter = Box::pin(units.gate.waiter());
                let polled =
                    poll_fn(|cx| Poll::Ready(waiter.as_mut().poll_until(cx, || units.take())));
                match pin!(polled).await {
                    Poll::Ready(taken) => {
                        taken.expect("gate not closed");
                        occupancy.enter();
                        occupancy.leave();
                        units.free_one();
                    }
                    Poll::Pending => {
                        tokio::task::yield_now().await;
                        drop(waiter);
                        cancelled += 1;
                    }
                }
            }
            _ => tokio::task::yield_now().await,
        }
    }
    cancelled
}

/// 48 tasks on 3 units through the gate alone: waits, tries, cancellations with wake-ups in
/// flight.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn no_wakeup_is_lost_and_every_unit_comes_back() {
    const UNITS: usize = 3;
    let units = Units::new(UNITS);
    let occupancy = Arc::new(Occupancy::new(UNITS));
    let tasks = (0..48)
        .map(|seed| {
            tokio::spawn(worker(
                Arc::clone(&units),
                Arc::clone(&occupancy),
                seed,
                1000,
            ))
        })
        .collect();
    let cancelled: usize = join_all(tasks).await.into_iter().sum();
    assert!(cancelled > 0, "no waiter was cancelled while queued");
    assert!(occupancy.entries() > 48 * 300, "{}", occupancy.entries());
    assert_eq!(occupancy.held(), 0);
    assert_eq!(units.free.load(Ordering::SeqCst), UNITS);
    assert_eq!(units.gate.waiting(), 0, "a waiter left in the queue");
    assert!(!units.gate.has_waiters());
}

/// Notified waiters are woken in the order they queued, cancelled ones skipped.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn waiters_are_woken_first_in_first_out() {
    let units = Units::new(0);
    let waiting_units = Arc::clone(&units);
    assert_served_in_queue_order(
        32,
        13,
        move |id, served| {
            let units = Arc::clone(&waiting_units);
            async move {
                units.wait().await.expect("gate not closed");
                served.lock().push(id);
                units.free_one();
            }
        },
        || units.gate.waiting(),
        || units.free_one(),
    )
    .await;
    assert_eq!(units.free.load(Ordering::SeqCst), 1);
}

/// A close while many tasks wait resolves every one of them with `Closed`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn close_resolves_every_waiter() {
    const WAITERS: usize = 32;
    let units = Units::new(0);
    let mut tasks = Vec::new();
    for _ in 0..WAITERS {
        let (queued, on_queue) = tokio::sync::oneshot::channel();
        let units = Arc::clone(&units);
        tasks.push(tokio::spawn(async move {
            signal_queued(units.wait(), queued).await
        }));
        on_queue.await.expect("the waiter queued");
    }
    assert_eq!(units.gate.waiting(), WAITERS);
    units.gate.close();
    for result in join_all(tasks).await {
        assert_eq!(result, Err(Closed));
    }
    assert_eq!(units.gate.waiting(), 0);
    assert!(!units.gate.has_waiters());
}
