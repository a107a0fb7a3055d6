//! Panics in user code never poison a `StreamPool`: a connector that panics (in the call or in
//! its future), an inbound half that panics (in `poll_next` or when dropped), a request whose
//! id accessor panics. Each is caught where the driver calls it; the callers it touched get
//! `RequestError::Panicked` with the right `Reach`; the slot retires and is reused; the
//! message is logged once and counted; nothing panics a second time.

use std::pin::pin;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::common::logs::capture_logs;
use crate::common::stream::{
    answer_on_new_stream, quiet_injected_panics, round_trip, Req, Script, INJECTED,
};
use crate::common::{poll_once, settle, settle_until, MockTime, ReapByHand};
use slotpool::stream::BreakerState;
use slotpool::stream::RequestError;
use slotpool::Reach;

/// Every test here starts with this: injected panics stay off stderr, and a global subscriber
/// that writes nowhere is installed once. tracing caches per callsite whether anyone listens;
/// without a global subscriber, a callsite first reached on another test's thread can be
/// cached as unheard while this test's thread-local capture is being set up, and its events
/// then never reach the capture.
fn setup() {
    static GLOBAL: parking_lot::Once = parking_lot::Once::new();
    quiet_injected_panics();
    GLOBAL.call_once(|| {
        let sink = tracing_subscriber::fmt()
            .with_writer(std::io::sink)
            .with_max_level(tracing::Level::TRACE)
            .finish();
        let _ = tracing::subscriber::set_global_default(sink);
    });
}

/// The error is a contained panic with `reach`, carrying the injected message.
fn assert_panicked(error: &RequestError<crate::common::stream::TestError>, reach: Reach) {
    match error {
        RequestError::Panicked { reach: got, panic } => {
            assert_eq!(*got, reach, "{error:?}");
            assert!(panic.message().contains(INJECTED), "{panic:?}");
        }
        other => panic!("expected a contained panic, got {other:?}"),
    }
    assert_eq!(error.reach(), reach);
}

/// A connect that panics in its future: both callers that joined the stream get `Panicked`,
/// not sent; the slot of a one-stream pool retires and the next acquire opens a new stream
/// that works.
#[tokio::test(flavor = "current_thread")]
async fn a_connect_future_that_panics_fails_its_callers_not_sent_and_the_slot_is_reused() {
    setup();
    let (logs, _logging) = capture_logs();
    let (script, _) = Script::echo();
    script.faults().panic_connects.store(1, Ordering::SeqCst);
    let pool = script.pool(1, 4);
    let a = pool.acquire().await.unwrap();
    let b = pool.acquire().await.unwrap();
    assert_eq!((a.stream_index(), b.stream_index()), (Some(0), Some(0)));
    let (ra, rb) = tokio::join!(a.send(Req::new(1)), b.send(Req::new(2)));
    assert_panicked(&ra.unwrap_err(), Reach::NotSent);
    assert_panicked(&rb.unwrap_err(), Reach::NotSent);
    settle_until("the slot retires", || pool.stats().table.empty == 1).await;
    let stats = pool.stats();
    assert_eq!((stats.panics, stats.connect_failures), (1, 1));
    assert_eq!((stats.failed, stats.completed), (2, 0));
    assert_eq!(stats.table.in_flight, 0);
    round_trip(&pool, 3).await;
    assert_eq!(pool.stats().spin_ups, 2);
    let text = logs.text();
    assert!(text.contains("stream connector"), "{text}");
    assert!(text.contains("injected panic: connect future"), "{text}");
}

/// A connect that panics in the call itself, before any future exists: the same containment.
#[tokio::test(flavor = "current_thread")]
async fn a_connect_call_that_panics_is_contained_too() {
    setup();
    let (script, _) = Script::echo();
    script.faults().panic_calls.store(1, Ordering::SeqCst);
    let pool = script.pool(1, 2);
    let err = pool
        .acquire()
        .await
        .unwrap()
        .send(Req::new(1))
        .await
        .unwrap_err();
    assert_panicked(&err, Reach::NotSent);
    settle(|| pool.stats().table.empty == 1).await;
    round_trip(&pool, 2).await;
    let stats = pool.stats();
    assert_eq!(
        (stats.panics, stats.connect_failures, stats.spin_ups),
        (1, 1, 2)
    );
}

/// An inbound half that panics while yielding a response: the request already sent gets
/// `Panicked` and `MaybeApplied`, the one still queued for the driver `NotSent`; the stream
/// is never polled again, the slot retires and a new stream serves.
#[tokio::test(flavor = "current_thread")]
async fn an_inbound_half_that_panics_fails_sent_requests_maybe_applied_and_queued_ones_not_sent() {
    setup();
    let (logs, _logging) = capture_logs();
    let (script, mut streams) = Script::manual();
    let pool = script.pool(1, 4);
    let sent = pool.acquire().await.unwrap();
    let queued = pool.acquire().await.unwrap();
    let mut sent = pin!(sent.send(Req::new(1)));
    assert!(poll_once(sent.as_mut()).is_pending());
    let mut server = streams.recv().await.unwrap();
    let request = server.next_request().await.unwrap();
    // The next response makes the inbound half panic; a second request is queued for the
    // driver before it runs again.
    script.faults().panic_inbound.store(1, Ordering::SeqCst);
    server.respond(request.id.unwrap(), 1);
    let mut queued = pin!(queued.send(Req::new(2)));
    assert!(poll_once(queued.as_mut()).is_pending());
    assert_panicked(&sent.await.unwrap_err(), Reach::MaybeApplied);
    assert_panicked(&queued.await.unwrap_err(), Reach::NotSent);
    settle(|| pool.stats().table.empty == 1).await;
    let stats = pool.stats();
    assert_eq!((stats.panics, stats.stream_failures), (1, 1));
    assert_eq!(stats.table.in_flight, 0);
    assert!(logs.text().contains("stream inbound"));
    // A new stream opens in the same slot and serves.
    let (_server, index) = answer_on_new_stream(&pool, &mut streams, 3).await;
    assert_eq!(index, Some(0));
}

/// An inbound half whose destructor panics, dropped when its stream ends and when the reaper
/// closes it: contained, logged and counted each time; the pool goes on serving.
#[tokio::test(flavor = "current_thread")]
async fn an_inbound_half_whose_drop_panics_is_contained() {
    setup();
    let time = MockTime::new();
    let (logs, _logging) = capture_logs();
    let (script, mut streams) = Script::manual();
    script
        .faults()
        .panic_inbound_drops
        .store(true, Ordering::SeqCst);
    let pool = script
        .sized(1, 2)
        .idle_timeout(Duration::from_secs(1))
        .reaped_by_hand(&time)
        .build()
        .unwrap();
    // The peer ends the stream: the driver drops the inbound half.
    let guard = pool.acquire().await.unwrap();
    let mut send = pin!(guard.send(Req::new(1)));
    assert!(poll_once(send.as_mut()).is_pending());
    let server = streams.recv().await.unwrap();
    drop(server);
    let err = send.await.unwrap_err();
    assert!(matches!(err, RequestError::StreamEnded { .. }), "{err:?}");
    settle(|| pool.stats().table.empty == 1).await;
    assert_eq!(script.faults().injected(), 1);
    // The reaper closes the next stream: dropped again.
    let (_server, _) = answer_on_new_stream(&pool, &mut streams, 2).await;
    settle(|| pool.stats().table.ready == 1).await;
    pool.reap(time.now());
    time.advance(Duration::from_secs(2));
    assert_eq!(pool.reap(time.now()), 1);
    settle(|| script.faults().injected() == 2).await;
    let stats = pool.stats();
    assert_eq!(stats.panics, 2);
    assert_eq!(stats.table.in_flight, 0);
    assert!(logs.text().contains("stream inbound (drop)"));
}

/// A request whose id accessor panics fails alone, not sent; the stream goes on serving.
#[tokio::test(flavor = "current_thread")]
async fn a_request_id_accessor_that_panics_fails_only_that_request() {
    setup();
    let (script, _) = Script::echo();
    let pool = script.pool(1, 4);
    round_trip(&pool, 1).await;
    let err = pool
        .acquire()
        .await
        .unwrap()
        .send(Req::panicking(2))
        .await
        .unwrap_err();
    assert_panicked(&err, Reach::NotSent);
    round_trip(&pool, 3).await;
    let stats = pool.stats();
    assert_eq!(
        (stats.panics, stats.spin_ups, stats.stream_failures),
        (1, 1, 0)
    );
    assert_eq!(stats.table.in_flight, 0);
}

/// A breaker probe whose connect panics counts as a failed probe: the breaker opens again
/// instead of staying half-open for ever, and a later probe closes it.
#[tokio::test(flavor = "current_thread")]
async fn a_panicking_probe_reopens_the_breaker() {
    setup();
    let time = MockTime::new();
    let (script, _) = Script::echo();
    script.faults().panic_connects.store(2, Ordering::SeqCst);
    let pool = script
        .sized(1, 1)
        .breaker(1, Duration::from_secs(5))
        .reaped_by_hand(&time)
        .build()
        .unwrap();
    let err = pool.acquire().await.unwrap().send(Req::new(1)).await;
    assert_panicked(&err.unwrap_err(), Reach::NotSent);
    settle(|| pool.stats().breaker == BreakerState::Open).await;
    time.advance(Duration::from_secs(5));
    let probe = pool.try_acquire().unwrap();
    assert_eq!(pool.stats().breaker, BreakerState::HalfOpen);
    assert_panicked(&probe.send(Req::new(2)).await.unwrap_err(), Reach::NotSent);
    settle(|| pool.stats().breaker == BreakerState::Open).await;
    time.advance(Duration::from_secs(5));
    round_trip(&pool, 3).await;
    assert_eq!(pool.stats().breaker, BreakerState::Closed);
}

/// A driver whose task is dropped before it finished (here its runtime shuts down with a
/// request on the wire) still fails and releases what it held, from its `Drop`: no unit of
/// depth is ever lost with a driver, however its task ends.
#[test]
fn a_driver_dropped_with_its_task_releases_what_it_held() {
    setup();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (script, mut streams) = Script::manual();
    let pool = runtime.block_on(async { script.pool(1, 2) });
    let (mut send, _server) = runtime.block_on(async {
        let guard = pool.acquire().await.unwrap();
        let mut send = Box::pin(guard.send(Req::new(1)));
        assert!(poll_once(send.as_mut()).is_pending());
        let mut server = streams.recv().await.unwrap();
        server.next_request().await.unwrap();
        (send, server)
    });
    assert_eq!(pool.stats().table.in_flight, 1);
    drop(runtime);
    let table = pool.stats().table;
    assert_eq!((table.in_flight, table.empty), (0, 1), "{table:?}");
    match poll_once(send.as_mut()) {
        std::task::Poll::Ready(Err(error)) => assert_eq!(error.reach(), Reach::MaybeApplied),
        other => panic!("the request on the wire was not failed: {other:?}"),
    }
}
