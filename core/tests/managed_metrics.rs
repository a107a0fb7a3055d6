//! The managed pool's statistics through the `metrics` facade (feature `metrics`).
#![cfg(feature = "metrics")]

mod capture;
mod common;

use capture::Capture;
use common::managed::{Act, Fixture};
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
