//! Exporting pool statistics through the `metrics` facade (feature `metrics`).
#![cfg(feature = "metrics")]

mod capture;
mod common;

use std::sync::Arc;
use std::time::Duration;

use slotpool::channel::ChannelPool;
use slotpool::client::ClientStats;
use slotpool::metrics::{spawn_exporter, Export};
use slotpool::session::SessionStats;

use capture::Capture;
use common::channel::Lazy;
use common::stream::{round_trip, Script};

#[tokio::test]
async fn stream_pool_stats_become_gauges_and_counters() {
    let (script, _) = Script::echo();
    let pool = script.pool(2, 4);
    for body in 0..3 {
        round_trip(&pool, body).await;
    }
    let held = pool.acquire().await.unwrap();
    let capture = Capture::default();
    metrics::with_local_recorder(&capture, || pool.stats().export("pages"));

    assert_eq!(
        capture.counter("slotpool_stream_acquires_total{pool=pages}"),
        4
    );
    assert_eq!(
        capture.counter("slotpool_stream_spin_ups_total{pool=pages}"),
        1
    );
    assert_eq!(
        capture.counter("slotpool_stream_stream_failures_total{pool=pages}"),
        0
    );
    assert_eq!(
        capture.gauge("slotpool_stream_slots{phase=ready,pool=pages}"),
        1.0
    );
    assert_eq!(
        capture.gauge("slotpool_stream_slots{phase=empty,pool=pages}"),
        1.0
    );
    assert_eq!(capture.gauge("slotpool_stream_in_flight{pool=pages}"), 1.0);
    assert_eq!(capture.gauge("slotpool_stream_waiting{pool=pages}"), 0.0);
    assert_eq!(
        capture.gauge("slotpool_stream_breaker_state{pool=pages}"),
        0.0
    );
    drop(held);
}

#[test]
fn client_and_session_snapshots_map_field_by_field() {
    let client = ClientStats {
        capacity: Some(16),
        clients: 5,
        idle: 3,
        in_use: 2,
        waiting: 1,
        acquires: 40,
        waits: 7,
        created: 5,
        make_failures: 2,
        discards: 1,
        reaps: 4,
    };
    let session = SessionStats::default();
    let capture = Capture::default();
    metrics::with_local_recorder(&capture, || {
        client.export("clients");
        session.export("sessions");
    });
    assert_eq!(
        capture.gauge("slotpool_client_capacity{pool=clients}"),
        16.0
    );
    assert_eq!(capture.gauge("slotpool_client_idle{pool=clients}"), 3.0);
    assert_eq!(capture.gauge("slotpool_client_in_use{pool=clients}"), 2.0);
    assert_eq!(capture.gauge("slotpool_client_waiting{pool=clients}"), 1.0);
    assert_eq!(
        capture.counter("slotpool_client_acquires_total{pool=clients}"),
        40
    );
    assert_eq!(
        capture.counter("slotpool_client_make_failures_total{pool=clients}"),
        2
    );
    assert_eq!(
        capture.counter("slotpool_client_reaps_total{pool=clients}"),
        4
    );
    assert_eq!(capture.gauge("slotpool_session_in_use{pool=sessions}"), 0.0);
    assert_eq!(
        capture.counter("slotpool_session_connects_total{pool=sessions}"),
        0
    );
}

/// The exporter records on every tick while the pool lives, and its task ends by itself once
/// the pool is dropped (it holds only a `Weak`).
#[test]
fn exporter_follows_the_pool_and_ends_with_it() {
    let capture = Capture::default();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    metrics::with_local_recorder(&capture, || {
        runtime.block_on(async {
            let channels = ChannelPool::builder(Lazy::default()).build().unwrap();
            let weak = Arc::downgrade(&channels);
            let exporter = spawn_exporter("lazy", Duration::from_secs(10), move || {
                weak.upgrade().map(|pool| pool.stats())
            });
            let guards: Vec<_> = (0..3).map(|_| channels.get().unwrap()).collect();
            tokio::time::sleep(Duration::from_secs(11)).await;
            assert_eq!(capture.gauge("slotpool_channel_clients{pool=lazy}"), 3.0);
            assert_eq!(capture.counter("slotpool_channel_gets_total{pool=lazy}"), 3);
            drop(guards);
            tokio::time::sleep(Duration::from_secs(10)).await;
            assert_eq!(capture.gauge("slotpool_channel_clients{pool=lazy}"), 0.0);
            drop(channels);
            tokio::time::timeout(Duration::from_secs(60), exporter)
                .await
                .expect("the exporter stops once the pool is gone")
                .expect("the exporter did not panic");
        });
    });
}
