//! A storm on the managed pool: many tasks on several workers get, hold, return and take
//! objects while the manager fails, rejects and panics at random, callers are cancelled at
//! random awaits, and a chaos task resizes, retains and reaps. At the end every object is
//! idle or dropped exactly once, the pool's counters balance with the manager's, and closing
//! drops the rest. Cancellation is by yields (a `select!` against a few `yield_now`s), never by
//! time.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::common::join_all;
use crate::common::managed::Fixture;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use slotpool::managed::{Object, PoolError, QueueMode};

const TASKS: u64 = 24;
const ROUNDS: u64 = 250;
const MAX: usize = 6;

async fn yields(n: u32) {
    for _ in 0..n {
        tokio::task::yield_now().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn storm_with_cancellations_failures_and_panics_balances_exactly() {
    storm(QueueMode::Lowest).await;
}

/// The same storm with every idle object taken in turn (the rotating search and its cursor).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn storm_in_fifo_order_balances_exactly() {
    storm(QueueMode::Fifo).await;
}

async fn storm(queue_mode: QueueMode) {
    let f = Arc::new(Fixture::with(MAX, |b| {
        b.create_timeout(None)
            .recycle_timeout(None)
            .max_lifetime(Some(Duration::from_secs(120)))
            .queue_mode(queue_mode)
    }));
    f.script.random(0x5107_9001);
    let outcomes = Arc::new(Outcomes::default());
    let mut tasks = Vec::new();
    for task in 0..TASKS {
        let (f, outcomes) = (Arc::clone(&f), Arc::clone(&outcomes));
        tasks.push(tokio::spawn(async move {
            let mut rng = SmallRng::seed_from_u64(task);
            for _ in 0..ROUNDS {
                let patience = rng.random_range(0..6);
                let result = tokio::select! {
                    result = f.pool.get() => Some(result),
                    () = yields(patience) => None,
                };
                let Some(result) = result else {
                    outcomes.cancelled.fetch_add(1, Ordering::Relaxed);
                    continue;
                };
                match result {
                    Ok(mut object) => {
                        outcomes.got.fetch_add(1, Ordering::Relaxed);
                        object.uses += 1;
                        yields(rng.random_range(0..3)).await;
                        if rng.random_ratio(1, 40) {
                            drop(Object::take(object));
                        } else {
                            drop(object);
                        }
                    }
                    Err(PoolError::Create(_) | PoolError::Panicked { .. }) => {
                        outcomes.failed.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(other) => panic!("unexpected error: {other}"),
                }
            }
        }));
    }
    let chaos = {
        let f = Arc::clone(&f);
        tokio::spawn(async move {
            let mut rng = SmallRng::seed_from_u64(0xC4A0);
            for round in 0..400u32 {
                match round % 4 {
                    0 => f.pool.resize(rng.random_range(2..=MAX)).unwrap(),
                    1 => {
                        let _ = f.pool.retain(|conn, _| conn.id % 11 != 0);
                    }
                    2 => {
                        f.time.advance(Duration::from_secs(rng.random_range(0..50)));
                        f.pool.reap(f.time.now());
                    }
                    _ => {
                        let _ = f.pool.try_get().await;
                    }
                }
                yields(rng.random_range(1..4)).await;
            }
            f.pool.resize(MAX).unwrap();
        })
    };
    join_all(tasks).await;
    chaos.await.expect("the chaos task did not panic");

    // Creations cut off from their callers finish on their own; let them land.
    crate::common::settle_until("creations settled", || {
        let status = f.pool.status();
        status.in_use == 0 && status.waiting == 0
    })
    .await;
    let stats = f.pool.stats();
    let outcomes = &*outcomes;
    assert!(
        outcomes.cancelled.load(Ordering::Relaxed) > 0,
        "no cancellation"
    );
    assert!(outcomes.failed.load(Ordering::Relaxed) > 0, "no failure");
    assert!(stats.panics > 0 && stats.discarded > 0, "{stats:?}");
    assert!(
        stats.checkouts >= outcomes.got.load(Ordering::Relaxed),
        "{stats:?}"
    );
    f.assert_balanced();

    f.pool.close();
    let stats = f.pool.stats();
    assert_eq!(stats.status.size, 0, "{stats:?}");
    assert_eq!(f.ledger.alive(), 0, "closing dropped every object");
    f.assert_balanced();
}

#[derive(Default)]
struct Outcomes {
    got: AtomicU64,
    cancelled: AtomicU64,
    failed: AtomicU64,
}
