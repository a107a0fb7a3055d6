//! Exporting pool statistics through the `metrics` facade (feature `metrics`).
#![cfg(feature = "metrics")]

use std::sync::Arc;
use std::time::Duration;

use slotpool::channel::ChannelPool;
use slotpool::client::ClientStats;
use slotpool::metrics::{spawn_exporter, Export};
use slotpool::session::SessionStats;
use slotpool::stream::StreamStats;

use crate::capture::Capture;
use crate::common::channel::Lazy;
use crate::common::logs::capture_logs;
use crate::common::panics::inject;
use crate::common::stream::{round_trip, Script};

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
        capture.counter("slotpool_stream_completed_total{pool=pages}"),
        3
    );
    assert_eq!(
        capture.counter("slotpool_stream_panics_total{pool=pages}"),
        0
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
    let mut client = ClientStats::default();
    client.capacity = Some(16);
    client.clients = 5;
    client.idle = 3;
    client.in_use = 2;
    client.waiting = 1;
    client.acquires = 40;
    client.waits = 7;
    client.wait_time = std::time::Duration::from_millis(250);
    client.created = 5;
    client.make_failures = 2;
    client.discards = 1;
    client.reaps = 4;
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
    assert_eq!(
        capture.counter("slotpool_client_wait_nanoseconds_total{pool=clients}"),
        250_000_000
    );
    assert_eq!(capture.gauge("slotpool_session_in_use{pool=sessions}"), 0.0);
    assert_eq!(
        capture.counter("slotpool_session_connects_total{pool=sessions}"),
        0
    );
}

/// The wait totals of the stream and session pools become `waits` and `wait_nanoseconds`
/// counters, as the managed and client pools' do.
#[test]
fn wait_totals_become_counters() {
    let mut stream = StreamStats::default();
    stream.waits = 3;
    stream.wait_time = Duration::from_millis(12);
    let mut session = SessionStats::default();
    session.waits = 2;
    session.wait_time = Duration::from_micros(1500);
    let capture = Capture::default();
    metrics::with_local_recorder(&capture, || {
        stream.export("pages");
        session.export("sessions");
    });
    assert_eq!(
        capture.counter("slotpool_stream_waits_total{pool=pages}"),
        3
    );
    assert_eq!(
        capture.counter("slotpool_stream_wait_nanoseconds_total{pool=pages}"),
        12_000_000
    );
    assert_eq!(
        capture.counter("slotpool_session_waits_total{pool=sessions}"),
        2
    );
    assert_eq!(
        capture.counter("slotpool_session_wait_nanoseconds_total{pool=sessions}"),
        1_500_000
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

/// A stats callback that panics is contained: the tick's export is skipped, the panic's message
/// is logged, and the exporter goes on (the next tick exports) and still ends with the pool.
#[test]
fn a_panicking_stats_callback_does_not_kill_the_exporter() {
    let capture = Capture::default();
    let (logs, _guard) = capture_logs();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    metrics::with_local_recorder(&capture, || {
        runtime.block_on(async {
            let channels = ChannelPool::builder(Lazy::default()).build().unwrap();
            let guards: Vec<_> = (0..2).map(|_| channels.get()).collect();
            let weak = Arc::downgrade(&channels);
            let mut calls = 0;
            let exporter = spawn_exporter("flaky", Duration::from_secs(10), move || {
                calls += 1;
                if calls == 1 {
                    inject("stats callback");
                }
                weak.upgrade().map(|pool| pool.stats())
            });
            // The first tick (at once) panics: nothing exported, the panic logged.
            tokio::time::sleep(Duration::from_secs(1)).await;
            assert!(
                capture
                    .gauge("slotpool_channel_clients{pool=flaky}")
                    .is_nan(),
                "nothing exported yet"
            );
            assert!(
                logs.text().contains("stats callback exploded"),
                "the panic's message is logged: {}",
                logs.text()
            );
            assert!(!exporter.is_finished(), "the exporter goes on");
            // The second tick exports.
            tokio::time::sleep(Duration::from_secs(10)).await;
            assert_eq!(capture.gauge("slotpool_channel_clients{pool=flaky}"), 2.0);
            drop(guards);
            drop(channels);
            tokio::time::timeout(Duration::from_secs(60), exporter)
                .await
                .expect("the exporter stops once the pool is gone")
                .expect("the exporter did not panic");
        });
    });
}

/// The channel pool's counters, `broken` (channels closed because a client left them
/// broken) among them, each under its exported name.
#[test]
fn channel_counters_are_exported_by_name() {
    let mut stats = slotpool::channel::ChannelStats::default();
    stats.channels = 2;
    stats.clients = 5;
    stats.gets = 11;
    stats.opened = 4;
    stats.reaps = 1;
    stats.broken = 3;
    stats.panics = 0;
    let capture = Capture::default();
    metrics::with_local_recorder(&capture, || stats.export("edge"));
    assert_eq!(capture.gauge("slotpool_channel_channels{pool=edge}"), 2.0);
    assert_eq!(
        capture.counter("slotpool_channel_opened_total{pool=edge}"),
        4
    );
    assert_eq!(
        capture.counter("slotpool_channel_reaps_total{pool=edge}"),
        1
    );
    assert_eq!(
        capture.counter("slotpool_channel_broken_total{pool=edge}"),
        3
    );
}
