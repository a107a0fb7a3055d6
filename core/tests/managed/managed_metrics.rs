//! The managed pool's statistics through the `metrics` facade (feature `metrics`).
#![cfg(feature = "metrics")]

use crate::capture::Capture;
use crate::common::managed::{Act, Fixture};
use slotpool::metrics::Export;

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn managed_stats_become_gauges_and_counters() {
    let f = Fixture::new(4);
    let held = f.pool.get().await.unwrap();
    drop(f.pool.get().await.unwrap());
    let recycled = f.pool.get().await.unwrap(); // the idle one
    f.script.creates(&[Act::Fail]);
    assert!(
        f.pool.get().await.is_err(),
        "a third object: its create fails"
    );
    let capture = Capture::default();
    metrics::with_local_recorder(&capture, || f.pool.stats().export("db"));
    assert_eq!(capture.gauge("slotpool_managed_max_size{pool=db}"), 4.0);
    assert_eq!(capture.gauge("slotpool_managed_size{pool=db}"), 2.0);
    assert_eq!(capture.gauge("slotpool_managed_available{pool=db}"), 0.0);
    assert_eq!(capture.gauge("slotpool_managed_in_use{pool=db}"), 2.0);
    assert_eq!(
        capture.counter("slotpool_managed_created_total{pool=db}"),
        2
    );
    assert_eq!(
        capture.counter("slotpool_managed_recycled_total{pool=db}"),
        1
    );
    assert_eq!(
        capture.counter("slotpool_managed_create_failures_total{pool=db}"),
        1
    );
    assert_eq!(capture.counter("slotpool_managed_panics_total{pool=db}"), 0);
    drop((held, recycled));
}

/// The total wait time is exported in nanoseconds.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn the_wait_time_is_exported() {
    let f = Fixture::new(1);
    let held = f.pool.get().await.unwrap();
    let mut waiter = std::pin::pin!(f.pool.get());
    assert!(crate::common::poll_once(waiter.as_mut()).is_pending());
    f.time.advance(std::time::Duration::from_millis(1500));
    drop(held);
    drop(waiter.await.unwrap());
    let capture = Capture::default();
    metrics::with_local_recorder(&capture, || f.pool.stats().export("db"));
    assert_eq!(
        capture.counter("slotpool_managed_wait_nanoseconds_total{pool=db}"),
        1_500_000_000
    );
    assert_eq!(capture.counter("slotpool_managed_waits_total{pool=db}"), 1);
}

/// Creations held back by the create back-off are exported as `paused`.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn creations_held_back_are_exported_as_paused() {
    use slotpool::managed::{CreateBackoff, PoolError};
    let f = Fixture::with(2, |b| {
        b.create_backoff(CreateBackoff {
            fail_fast: true,
            ..CreateBackoff::default()
        })
    });
    f.script.creates(&[Act::Fail, Act::Fail, Act::Fail]);
    for _ in 0..3 {
        assert!(f.pool.get().await.is_err());
    }
    for _ in 0..2 {
        assert!(matches!(
            f.pool.get().await,
            Err(PoolError::Unavailable { .. })
        ));
    }
    let capture = Capture::default();
    metrics::with_local_recorder(&capture, || f.pool.stats().export("db"));
    assert_eq!(capture.counter("slotpool_managed_paused_total{pool=db}"), 2);
    assert_eq!(
        capture.counter("slotpool_managed_create_failures_total{pool=db}"),
        3
    );
}
