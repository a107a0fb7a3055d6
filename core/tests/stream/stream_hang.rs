//! Hung peers: a stream whose connect never finishes fails after `open_timeout`, a stream
//! that takes requests and never answers is declared hung after `stall_timeout`, callers that
//! give up on an opening stream give their room back, and the pool neither grows without
//! bound nor stays full while the peer hangs, and recovers when it answers again. Time is the
//! mock clock for the pool and tokio's paused clock for the callers' own timeouts, so the
//! deadlines here fire through the reaper's pass on the mock clock: the backstop of the
//! drivers' timers, whose own timing `stream_deadline.rs` checks. (Those run on tokio's clock:
//! where a test moves it in step with the mock they may fire a deadline as well, and what is
//! checked holds either way; elsewhere they are seconds away.)

use std::pin::pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crate::common::stream::{answer_on_new_stream, outcome, round_trip, Req, Script};
use crate::common::{poll_once, settle, settle_until, MockTime, ReapByHand};
use slotpool::stream::RequestError;
use slotpool::{Reach, TryAcquireError};

const SECOND: Duration = Duration::from_secs(1);

/// A connect that has not finished `open_timeout` after its stream started: the pass that
/// finds it past the deadline fails its callers with `OpenTimeout`, not sent; the slot is
/// freed; once the peer answers, a new stream serves.
#[tokio::test(flavor = "current_thread")]
async fn a_stream_still_opening_after_open_timeout_fails_its_callers_not_sent() {
    let time = MockTime::new();
    let (script, _) = Script::echo();
    let (script, hold) = script.held();
    let pool = script
        .sized(1, 4)
        .open_timeout(Some(5 * SECOND))
        .reaped_by_hand(&time)
        .build()
        .unwrap();
    let guard = pool.acquire().await.unwrap();
    let mut send = pin!(guard.send(Req::new(1)));
    assert!(poll_once(send.as_mut()).is_pending());
    time.advance(5 * SECOND - Duration::from_nanos(1));
    pool.reap(time.now());
    crate::common::run_spawned().await;
    assert!(poll_once(send.as_mut()).is_pending(), "not yet");
    time.advance(Duration::from_nanos(1));
    pool.reap(time.now());
    match outcome("the open timeout fails the caller", send).await {
        Err(RequestError::OpenTimeout { timeout }) => assert_eq!(timeout, 5 * SECOND),
        other => panic!("expected an open timeout, got {other:?}"),
    }
    settle(|| pool.stats().table.empty == 1).await;
    let stats = pool.stats();
    assert_eq!((stats.open_timeouts, stats.connect_failures), (1, 1));
    assert_eq!(stats.table.in_flight, 0);
    hold.add_permits(1);
    round_trip(&pool, 2).await;
    // A stream that opened is never timed out later.
    time.advance(60 * SECOND);
    pool.reap(time.now());
    round_trip(&pool, 3).await;
    assert_eq!(pool.stats().open_timeouts, 1);
}

/// A caller that gives up while its request waits for its stream to open gets its room back
/// at once (nothing was sent): a one-stream pool of depth 1 has room again while the stream
/// is still opening.
#[tokio::test(flavor = "current_thread")]
async fn a_caller_that_gives_up_on_an_opening_stream_gives_its_room_back() {
    let (script, _) = Script::echo();
    let (script, hold) = script.held();
    let pool = script.pool(1, 1);
    let guard = pool.acquire().await.unwrap();
    let mut send = Box::pin(guard.send(Req::new(1)));
    assert!(poll_once(send.as_mut()).is_pending());
    crate::common::run_spawned().await;
    assert_eq!(pool.try_acquire().unwrap_err(), TryAcquireError::NoCapacity);
    drop(send);
    settle_until("the queued request's room comes back", || {
        pool.stats().table.in_flight == 0
    })
    .await;
    assert_eq!(pool.stats().table.starting, 1, "still opening");
    assert_eq!(pool.stats().cancelled, 1);
    let guard = pool.try_acquire().expect("room is back");
    hold.add_permits(1);
    crate::common::stream::assert_echoed(guard, 2).await;
    assert_eq!(pool.stats().spin_ups, 1);
}

/// 8 callers with 100 ms deadlines against a peer whose streams never open, for 2 s, on an
/// unbounded pool: callers who give up take their room with them, so the pool stays at the
/// streams its live callers need; the open timeout replaces them every second, and once the
/// peer answers the pool serves.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_connect_that_hangs_neither_grows_the_pool_nor_keeps_it_full_and_it_recovers() {
    let time = MockTime::new();
    let (script, _) = Script::echo();
    let (script, hold) = script.held();
    let pool = Arc::new(
        script
            .builder()
            .open_timeout(Some(SECOND))
            .reaped_by_hand(&time)
            .build()
            .unwrap(),
    );
    let callers: Vec<_> = (0..8)
        .map(|_| {
            crate::common::spawn_with(&pool, |pool| async move {
                let mut failures = Vec::new();
                for body in 0..20 {
                    let call = async {
                        let guard = pool.acquire().await.unwrap();
                        guard.send(Req::new(body)).await
                    };
                    if let Ok(result) = tokio::time::timeout(Duration::from_millis(100), call).await
                    {
                        failures.push(result.unwrap_err());
                    }
                }
                failures
            })
        })
        .collect();
    let mut most_live = 0;
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        time.advance(Duration::from_millis(100));
        pool.reap(time.now());
        let table = pool.stats().table;
        most_live = most_live.max(table.slots - table.empty);
    }
    for failure in crate::common::join_all(callers).await.into_iter().flatten() {
        assert!(
            matches!(failure, RequestError::OpenTimeout { .. }),
            "{failure:?}"
        );
        assert_eq!(failure.reach(), Reach::NotSent);
    }
    // A caller that gives up gets its room back when the stream's driver next runs (the
    // cancellation wakes it); a caller that acquires again before that may count its old
    // request once more, so 8 callers hold at most 16 units: two streams of depth 8, however
    // long the hang lasts (before, every 8 abandoned requests opened another stream: 20 in
    // these 2 s).
    assert!(
        most_live <= 2,
        "at most two streams at a time, saw {most_live}"
    );
    let stats = pool.stats();
    assert!(stats.open_timeouts >= 1, "{stats:?}");
    assert!(stats.spin_ups <= 2 * (1 + stats.open_timeouts), "{stats:?}");
    // The peer answers again.
    hold.add_permits(1000);
    round_trip(&pool, 7).await;
    settle(|| pool.stats().table.in_flight == 0).await;
}

/// A peer that takes requests and never answers, on a pool of 2 streams × depth 2: callers
/// that give up leave their requests (maybe applied) holding the room, so the pool fills up;
/// `stall_timeout` later the streams are declared hung (a caller still waiting gets
/// `Stalled`, maybe applied), the room comes back, and once the peer answers the pool serves.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_peer_that_never_answers_is_declared_stalled_and_the_pool_recovers() {
    let time = MockTime::new();
    let (script, _) = Script::echo();
    script.faults().mute.store(true, Ordering::SeqCst);
    let pool = Arc::new(
        script
            .sized(2, 2)
            .stall_timeout(Some(5 * SECOND))
            .reaped_by_hand(&time)
            .build()
            .unwrap(),
    );
    let waiting = pool.acquire().await.unwrap();
    let mut waiting = pin!(waiting.send(Req::new(0)));
    assert!(poll_once(waiting.as_mut()).is_pending());
    for body in 1..4 {
        let call = async { pool.acquire().await.unwrap().send(Req::new(body)).await };
        assert!(tokio::time::timeout(Duration::from_millis(100), call)
            .await
            .is_err());
    }
    settle(|| pool.stats().table.ready == 2).await;
    assert_eq!(pool.try_acquire().unwrap_err(), TryAcquireError::NoCapacity);
    pool.reap(time.now());
    time.advance(5 * SECOND - Duration::from_nanos(1));
    pool.reap(time.now());
    crate::common::run_spawned().await;
    assert!(poll_once(waiting.as_mut()).is_pending(), "not yet");
    time.advance(Duration::from_nanos(1));
    pool.reap(time.now());
    match outcome("the stall fails the waiting caller", waiting).await {
        Err(error @ RequestError::Stalled { .. }) => {
            assert_eq!(error.reach(), Reach::MaybeApplied)
        }
        other => panic!("expected a stall, got {other:?}"),
    }
    settle(|| pool.stats().table.in_flight == 0).await;
    let stats = pool.stats();
    assert_eq!((stats.stalls, stats.stream_failures), (2, 2));
    assert_eq!((stats.spin_ups, stats.cancelled, stats.failed), (2, 3, 1));
    assert!(pool.try_acquire().is_ok(), "the pool has room again");
    script.faults().mute.store(false, Ordering::SeqCst);
    round_trip(&pool, 9).await;
}

/// Anything received restarts the stall count, and a stream with nothing outstanding is never
/// stalled, however long it stays quiet.
#[tokio::test(flavor = "current_thread")]
async fn a_response_restarts_the_stall_count_and_an_idle_stream_never_stalls() {
    let time = MockTime::new();
    let (script, mut streams) = Script::manual();
    let pool = script
        .sized(1, 2)
        .stall_timeout(Some(5 * SECOND))
        .idle_timeout(Duration::from_secs(1000))
        .reaped_by_hand(&time)
        .build()
        .unwrap();
    let (a, b) = (pool.acquire().await.unwrap(), pool.acquire().await.unwrap());
    let mut a = pin!(a.send(Req::new(1)));
    let mut b = pin!(b.send(Req::new(2)));
    assert!(poll_once(a.as_mut()).is_pending() && poll_once(b.as_mut()).is_pending());
    let mut server = streams.recv().await.unwrap();
    let first = server.next_request().await.unwrap();
    let second = server.next_request().await.unwrap();
    pool.reap(time.now());
    time.advance(4 * SECOND);
    server.respond(first.id.unwrap(), 1);
    assert_eq!(a.await.unwrap().body, 1);
    pool.reap(time.now());
    time.advance(4 * SECOND);
    pool.reap(time.now());
    crate::common::run_spawned().await;
    assert!(
        poll_once(b.as_mut()).is_pending(),
        "4 s since the last response"
    );
    time.advance(SECOND);
    pool.reap(time.now());
    assert!(matches!(
        outcome("5 s of silence is a stall", b).await.unwrap_err(),
        RequestError::Stalled {
            reach: Reach::MaybeApplied,
            ..
        }
    ));
    settle(|| pool.stats().table.empty == 1).await;
    let _ = second;
    // A new, idle stream: quiet for a long time with nothing outstanding.
    let (_server, _) = answer_on_new_stream(&pool, &mut streams, 3).await;
    for _ in 0..10 {
        pool.reap(time.now());
        time.advance(100 * SECOND);
        // Let a driver told to stop do so before looking.
        crate::common::run_spawned().await;
    }
    assert_eq!(pool.stats().stalls, 1);
    assert_eq!(pool.stats().table.ready, 1);
}
