//! Stress tests of the counting limiter on a multi-threaded runtime: many tasks acquire
//! (waiting, trying, owned, or polling once and cancelling), hold across yields and release,
//! while an occupancy count checks at every step that no more permits than the bound are out.
//! At the end every permit is back and nobody waits; waiters are served first in, first out;
//! a close resolves every waiter. Bounded in operations, never in time.

mod common;
mod stress_common;

use std::pin::pin;
use std::sync::Arc;
use std::task::Poll;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use slotpool::blocks::Limit;
use slotpool::{Closed, TryAcquireError};

use common::{join_all, poll_once};
use stress_common::{assert_served_in_queue_order, signal_queued, Occupancy};

const PERMITS: usize = 4;

async fn worker(limit: Arc<Limit>, occupancy: Arc<Occupancy>, seed: u64, rounds: usize) -> usize {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut cancelled = 0;
    for _ in 0..rounds {
        match rng.random_range(0..10) {
            0..=2 => {
                let permit = limit.acquire().await.expect("limit not closed");
                occupancy.enter();
                tokio::task::yield_now().await;
                occupancy.leave();
                drop(permit);
            }
            3..=4 => {
                let permit = Limit::acquire_owned(Arc::clone(&limit))
                    .await
                    .expect("limit not closed");
                occupancy.enter();
                // An owned permit travels into another task, as keyed admission moves it
                // into blocking work.
                let occupancy = Arc::clone(&occupancy);
                tokio::spawn(async move {
                    tokio::task::yield_now().await;
                    occupancy.leave();
                    drop(permit);
                })
                .await
                .expect("the holder did not panic");
            }
            5..=6 => match limit.try_acquire() {
                Ok(permit) => {
                    occupancy.enter();
                    let second = limit.try_acquire().ok();
                    if second.is_some() {
                        occupancy.enter();
                    }
                    tokio::task::yield_now().await;
                    if let Some(second) = second {
                        occupancy.leave();
                        drop(second);
                    }
                    occupancy.leave();
                    drop(permit);
                }
                Err(e) => assert_eq!(e, TryAcquireError::NoCapacity),
            },
            7..=8 => {
                let mut acquire = pin!(limit.acquire());
                match poll_once(acquire.as_mut()) {
                    Poll::Ready(permit) => {
                        occupancy.enter();
                        occupancy.leave();
                        drop(permit.expect("limit not closed"));
                    }
                    Poll::Pending => {
                        tokio::task::yield_now().await;
                        cancelled += 1;
                    }
                }
            }
            _ => tokio::task::yield_now().await,
        }
    }
    cancelled
}

/// 48 tasks on 4 permits: waits, owned permits released from other tasks, cancellations.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn permits_never_overshoot_and_all_come_back() {
    let limit = Arc::new(Limit::new(PERMITS).expect("valid limit"));
    let occupancy = Arc::new(Occupancy::new(PERMITS));
    let tasks = (0..48)
        .map(|seed| {
            tokio::spawn(worker(
                Arc::clone(&limit),
                Arc::clone(&occupancy),
                seed,
                1000,
            ))
        })
        .collect();
    let cancelled: usize = join_all(tasks).await.into_iter().sum();
    assert_eq!(occupancy.held(), 0);
    assert!(occupancy.entries() > 48 * 300, "{}", occupancy.entries());
    assert!(cancelled > 0, "no acquire was cancelled while queued");
    assert_eq!(limit.available(), PERMITS, "a permit was lost or doubled");
    assert_eq!((limit.in_use(), limit.waiting()), (0, 0));
    // Every permit can be taken once more, and no more.
    let again: Vec<_> = (0..PERMITS)
        .map(|_| limit.try_acquire().expect("a permit"))
        .collect();
    assert_eq!(limit.try_acquire().err(), Some(TryAcquireError::NoCapacity));
    drop(again);
    assert_eq!(limit.available(), PERMITS);
}

/// Waiters are served in the order they queued, cancelled ones skipped: a released permit is
/// handed to the oldest waiter still queued.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn waiters_are_served_first_in_first_out() {
    let limit = Arc::new(Limit::new(1).expect("valid limit"));
    let held = Limit::try_acquire_owned(&limit).expect("a free permit");
    let waiting_limit = Arc::clone(&limit);
    assert_served_in_queue_order(
        32,
        11,
        move |id, served| {
            let limit = Arc::clone(&waiting_limit);
            async move {
                let permit = Limit::acquire_owned(limit).await.expect("limit not closed");
                served.lock().push(id);
                drop(permit);
            }
        },
        || limit.waiting(),
        move || drop(held),
    )
    .await;
    assert_eq!(limit.available(), 1);
}

/// A close while many tasks wait resolves every one of them with `Closed`; permits out stay
/// valid and come back.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn close_resolves_every_waiter() {
    const WAITERS: usize = 32;
    let limit = Arc::new(Limit::new(2).expect("valid limit"));
    let held: Vec<_> = (0..2)
        .map(|_| Limit::try_acquire_owned(&limit).expect("a free permit"))
        .collect();
    let mut tasks = Vec::new();
    for _ in 0..WAITERS {
        let (queued, on_queue) = tokio::sync::oneshot::channel();
        let limit = Arc::clone(&limit);
        tasks.push(tokio::spawn(async move {
            signal_queued(Limit::acquire_owned(limit), queued)
                .await
                .map(drop)
        }));
        on_queue.await.expect("the waiter queued");
    }
    assert_eq!(limit.waiting(), WAITERS);
    limit.close();
    for result in join_all(tasks).await {
        assert_eq!(result, Err(Closed));
    }
    assert_eq!(limit.waiting(), 0);
    drop(held);
    assert_eq!(limit.available(), 2);
    assert!(limit.try_acquire().is_err());
}
