//! Pinned behaviours of `StreamPool` that no other test fails on if they change: the builder's
//! defaults (queue depth 8, unbounded, idle timeout 10 s, reaper every second, open timeout
//! 10 s, stall timeout 60 s), a stream idle exactly the idle timeout being reaped, what the
//! circuit breaker counts (an open timeout is a connect failure, a stall is not), and the
//! stats of a guard dropped unsent. Each is listed in `docs/pinned.md`. Time is a mock clock
//! for the pool and, where the background reaper runs, tokio's paused clock; the deadlines
//! fire through the reaper's pass on the mock clock (the drivers' own timers are seconds of
//! tokio time away where tokio's clock is real).

use std::pin::pin;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::common::stream::{outcome, round_trip, Req, Script};
use crate::common::{poll_once, run_spawned, settle, settle_until, MockTime, ReapByHand};
use slotpool::__internal::breaker::BreakerState;
use slotpool::stream::{RequestError, StreamStats};
use slotpool::Reach;

const SECOND: Duration = Duration::from_secs(1);
const NS: Duration = Duration::from_nanos(1);

/// Builder table: `max_queue_depth` defaults to 8 and `max_streams` to unbounded: eight
/// guards share stream 0, the ninth opens stream 1, and a pool with every stream full still
/// opens another instead of refusing.
#[tokio::test(flavor = "current_thread")]
async fn defaults_are_8_requests_a_stream_and_no_bound_on_streams() {
    let (script, _) = Script::echo();
    let pool = script.builder().reap_interval(None).build().unwrap();
    let first: Vec<_> = (0..8).map(|_| pool.try_acquire().unwrap()).collect();
    for guard in &first {
        assert_eq!(
            guard.stream_index(),
            Some(0),
            "eight requests fit on stream 0"
        );
    }
    let ninth = pool.try_acquire().unwrap();
    assert_eq!(ninth.stream_index(), Some(1), "the ninth opens stream 1");
    let more: Vec<_> = (0..8 * 40)
        .map(|_| {
            pool.try_acquire()
                .expect("unbounded by default: never refused")
        })
        .collect();
    assert_eq!(pool.stats().spin_ups, 42);
    drop((first, ninth, more));
}

/// Builder: "`idle_timeout` ... Default: 10 s"; module docs: a stream with no request in
/// flight for *at least* the idle timeout is closed, by a pass at least `idle_timeout` after
/// the pass that noted it idle: 1 ns short of 10 s it stays, at exactly 10 s it goes.
#[tokio::test(flavor = "current_thread")]
async fn the_default_idle_timeout_is_10_seconds_and_exactly_that_is_reaped() {
    let time = MockTime::new();
    let (script, _) = Script::echo();
    let pool = script.builder().reaped_by_hand(&time).build().unwrap();
    round_trip(&pool, 1).await;
    settle(|| pool.stats().table.in_flight == 0).await;
    assert_eq!(
        pool.reap(time.now()),
        0,
        "the first pass only notes the idle stream"
    );
    time.advance(10 * SECOND - NS);
    assert_eq!(pool.reap(time.now()), 0, "1 ns short of 10 s");
    time.advance(NS);
    assert_eq!(pool.reap(time.now()), 1, "idle exactly 10 s");
    settle(|| pool.stats().table.in_flight == 0).await;
    assert_eq!(pool.stats().table.ready, 0);
    assert_eq!(pool.stats().reaps, 1);
}

/// Moves tokio's paused clock by `by` and lets the reaper run.
async fn tick(by: Duration) {
    tokio::time::advance(by).await;
    run_spawned().await;
}

/// Builder: `reap_interval` "Default: every second" (inside a runtime): the background
/// reaper's passes come at 1 s, 2 s, ... of tokio's time, each on the pool's clock. The mock
/// clock moves 2 s (more than the 1 s idle timeout) between passes, so the pass at 1 s notes
/// the idle stream and the pass at 2 s closes it; a shorter period would close it by 1 s, a
/// longer one not by 2 s.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn the_default_reaper_runs_every_second() {
    let time = MockTime::new();
    let (script, _) = Script::echo();
    let pool = script
        .builder()
        .idle_timeout(SECOND)
        .clock(time.clock())
        .build()
        .unwrap();
    round_trip(&pool, 1).await;
    settle(|| pool.stats().table.in_flight == 0).await;
    let ms = Duration::from_millis(1);
    time.advance(2 * SECOND);
    tick(SECOND - ms).await;
    time.advance(2 * SECOND);
    tick(ms).await;
    assert_eq!(
        pool.stats().reaps,
        0,
        "the pass at 1 s only notes the idle stream"
    );
    time.advance(2 * SECOND);
    tick(SECOND - ms).await;
    assert_eq!(pool.stats().reaps, 0, "no pass between 1 s and 2 s");
    tick(ms).await;
    assert_eq!(pool.stats().reaps, 1, "the pass at 2 s closes it");
}

/// Builder: `open_timeout` "Default: 10 s": a connect still running 10 s after its stream
/// started fails its callers with `OpenTimeout { timeout: 10 s }`, not sent; 1 ns earlier
/// it does not (here through the reaper's pass on the mock clock).
#[tokio::test(flavor = "current_thread")]
async fn the_default_open_timeout_is_10_seconds() {
    let time = MockTime::new();
    let (script, _) = Script::echo();
    let (script, _hold) = script.held();
    let pool = script.builder().reaped_by_hand(&time).build().unwrap();
    let guard = pool.acquire().await.unwrap();
    let mut send = pin!(guard.send(Req::new(1)));
    assert!(poll_once(send.as_mut()).is_pending());
    time.advance(10 * SECOND - NS);
    pool.reap(time.now());
    run_spawned().await;
    assert!(poll_once(send.as_mut()).is_pending(), "not before 10 s");
    time.advance(NS);
    pool.reap(time.now());
    match outcome("the default open timeout fails the caller", send).await {
        Err(error @ RequestError::OpenTimeout { timeout }) => {
            assert_eq!(timeout, 10 * SECOND);
            assert_eq!(error.reach(), Reach::NotSent);
        }
        other => panic!("expected an open timeout, got {other:?}"),
    }
}

/// Builder: `stall_timeout` "Default: 60 s": a stream busy and silent for 60 s (noted by one
/// pass, declared by a pass 60 s later) fails its sent request with `Stalled { timeout: 60 s }`,
/// maybe applied; 1 ns earlier it does not.
#[tokio::test(flavor = "current_thread")]
async fn the_default_stall_timeout_is_60_seconds() {
    let time = MockTime::new();
    let (script, _) = Script::echo();
    script.faults().mute.store(true, Ordering::SeqCst);
    let pool = script.builder().reaped_by_hand(&time).build().unwrap();
    let guard = pool.acquire().await.unwrap();
    let mut send = pin!(guard.send(Req::new(1)));
    assert!(poll_once(send.as_mut()).is_pending());
    settle(|| pool.stats().table.ready == 1).await;
    run_spawned().await;
    pool.reap(time.now());
    time.advance(60 * SECOND - NS);
    pool.reap(time.now());
    run_spawned().await;
    assert!(poll_once(send.as_mut()).is_pending(), "not before 60 s");
    time.advance(NS);
    pool.reap(time.now());
    match outcome("the default stall timeout fails the caller", send).await {
        Err(error @ RequestError::Stalled { timeout, .. }) => {
            assert_eq!(timeout, 60 * SECOND);
            assert_eq!(error.reach(), Reach::MaybeApplied);
        }
        other => panic!("expected a stall, got {other:?}"),
    }
}

/// Failure model: "An open timeout counts as a connect failure for the circuit breaker":
/// with a threshold of 1, one open timeout opens the breaker.
#[tokio::test(flavor = "current_thread")]
async fn an_open_timeout_counts_toward_the_breaker() {
    let time = MockTime::new();
    let (script, _) = Script::echo();
    let (script, _hold) = script.held();
    let pool = script
        .sized(2, 1)
        .open_timeout(Some(5 * SECOND))
        .breaker(1, 5 * SECOND)
        .reaped_by_hand(&time)
        .build()
        .unwrap();
    let guard = pool.acquire().await.unwrap();
    let mut send = pin!(guard.send(Req::new(1)));
    assert!(poll_once(send.as_mut()).is_pending());
    time.advance(5 * SECOND);
    pool.reap(time.now());
    assert!(matches!(
        outcome("the open timeout fails the caller", send).await,
        Err(RequestError::OpenTimeout { .. })
    ));
    settle(|| pool.stats().table.empty == 2).await;
    let stats = pool.stats();
    assert_eq!((stats.open_timeouts, stats.connect_failures), (1, 1));
    assert_eq!(
        stats.breaker,
        BreakerState::Open,
        "an open timeout is a connect failure"
    );
    assert!(pool.try_acquire().is_err(), "the open breaker fails fast");
}

/// Failure model: "... a stall as a stream failure": a stalled stream is counted in
/// `stream_failures` and `stalls`, not as a connect failure, and does not open a breaker with
/// a threshold of 1; the next acquire opens a new stream.
#[tokio::test(flavor = "current_thread")]
async fn a_stall_is_a_stream_failure_and_leaves_the_breaker_closed() {
    let time = MockTime::new();
    let (script, _) = Script::echo();
    script.faults().mute.store(true, Ordering::SeqCst);
    let pool = script
        .sized(2, 1)
        .stall_timeout(Some(5 * SECOND))
        .breaker(1, 5 * SECOND)
        .reaped_by_hand(&time)
        .build()
        .unwrap();
    let guard = pool.acquire().await.unwrap();
    let mut send = pin!(guard.send(Req::new(1)));
    assert!(poll_once(send.as_mut()).is_pending());
    settle(|| pool.stats().table.ready == 1).await;
    run_spawned().await;
    pool.reap(time.now());
    time.advance(5 * SECOND);
    pool.reap(time.now());
    assert!(matches!(
        outcome("the stall fails the caller", send).await,
        Err(RequestError::Stalled { .. })
    ));
    settle(|| pool.stats().table.empty == 2).await;
    let stats = pool.stats();
    assert_eq!(
        (stats.stalls, stats.stream_failures, stats.connect_failures),
        (1, 1, 0)
    );
    assert_eq!(
        stats.breaker,
        BreakerState::Closed,
        "a stall is not a connect failure"
    );
    script.faults().mute.store(false, Ordering::SeqCst);
    round_trip(&pool, 2).await;
    assert_eq!(pool.stats().spin_ups, 2);
}

/// `StreamStats`: "Every `send` ends as exactly one of `completed`, `failed` or `cancelled`;
/// a guard dropped unsent is none of them (its room goes back at once)": a borrowed guard and
/// an owned one (each has its own `Drop`).
#[tokio::test(flavor = "current_thread")]
async fn a_guard_dropped_unsent_is_counted_as_none_of_the_outcomes() {
    let (script, _) = Script::echo();
    let pool = std::sync::Arc::new(script.pool(1, 1));
    let guard = pool.acquire().await.unwrap();
    drop(guard);
    assert_eq!(
        pool.stats().table.in_flight,
        0,
        "its room went back at once"
    );
    let owned = pool.try_acquire_owned().unwrap();
    drop(owned);
    assert_eq!(pool.stats().table.in_flight, 0, "the owned guard's too");
    round_trip(&pool, 1).await;
    settle(|| pool.stats().table.in_flight == 0).await;
    let StreamStats {
        acquires,
        completed,
        failed,
        cancelled,
        ..
    } = pool.stats();
    assert_eq!((acquires, completed, failed, cancelled), (3, 1, 0, 0));
}

/// Builder: `min_streams` "keeps at least `n` open: the reaper ... reopens any that failed";
/// module docs: a pass "then reopens streams up to `min_streams`". A kept stream that the peer
/// ends is replaced by the next pass, not by the next acquire.
#[tokio::test(flavor = "current_thread")]
async fn the_reaper_reopens_a_failed_min_stream() {
    let time = MockTime::new();
    let (script, mut streams) = Script::manual();
    let pool = script
        .sized(2, 1)
        .min_streams(1)
        .reaped_by_hand(&time)
        .build()
        .unwrap();
    let first = streams.recv().await.expect("the prewarmed stream");
    settle(|| pool.stats().table.ready == 1).await;
    first.fail("peer ended it");
    settle(|| pool.stats().table.empty == 2).await;
    assert_eq!(pool.stats().stream_failures, 1);
    assert_eq!(script.connects(), 1, "nothing reopens it before a pass");
    pool.reap(time.now());
    settle_until("the pass reopened it", || pool.stats().table.ready == 1).await;
    assert_eq!(
        (
            script.connects(),
            pool.stats().spin_ups,
            pool.stats().table.in_flight
        ),
        (2, 2, 0)
    );
}

/// Builder: "`unbounded`: No bound on the number of streams (the default)": it undoes an
/// earlier `max_streams`, so a full stream opens another instead of refusing.
#[tokio::test(flavor = "current_thread")]
async fn unbounded_undoes_an_earlier_max_streams() {
    let (script, _) = Script::echo();
    let pool = script
        .sized(1, 1)
        .unbounded()
        .reap_interval(None)
        .build()
        .unwrap();
    let first = pool.try_acquire().unwrap();
    let second = pool.try_acquire().expect("no bound after unbounded()");
    assert_eq!(second.stream_index(), Some(1));
    drop((first, second));
}

/// Builder: `open_timeout` and `stall_timeout` "`None`: wait for ever" / "never": a connect
/// that never finishes and a peer that never answers are left alone by every pass, however
/// late (a year on the pool's clock).
#[tokio::test(flavor = "current_thread")]
async fn without_timeouts_a_hung_peer_is_waited_for() {
    let year = 365 * 24 * 3600 * SECOND;
    let time = MockTime::new();
    let (opening, _hold) = Script::echo().0.held();
    let pool = opening
        .builder()
        .open_timeout(None)
        .reaped_by_hand(&time)
        .build()
        .unwrap();
    let guard = pool.acquire().await.unwrap();
    let mut send = pin!(guard.send(Req::new(1)));
    assert!(poll_once(send.as_mut()).is_pending());
    for _ in 0..3 {
        time.advance(year);
        pool.reap(time.now());
        run_spawned().await;
    }
    assert!(poll_once(send.as_mut()).is_pending(), "still opening");
    assert_eq!(pool.stats().open_timeouts, 0);

    let (silent, _) = Script::echo();
    silent.faults().mute.store(true, Ordering::SeqCst);
    let pool = silent
        .builder()
        .stall_timeout(None)
        .reaped_by_hand(&time)
        .build()
        .unwrap();
    let guard = pool.acquire().await.unwrap();
    let mut send = pin!(guard.send(Req::new(2)));
    assert!(poll_once(send.as_mut()).is_pending());
    settle(|| pool.stats().table.ready == 1).await;
    for _ in 0..3 {
        time.advance(year);
        pool.reap(time.now());
        run_spawned().await;
    }
    assert!(
        poll_once(send.as_mut()).is_pending(),
        "still waiting for the answer"
    );
    assert_eq!(pool.stats().stalls, 0);
}

/// `reap_interval(Some(d))`: the background reaper runs every `d` (here 3 s of tokio's paused
/// time; the mock clock moves 2 s, past the 1 s idle timeout, before each check).
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn an_explicit_reap_interval_is_the_reapers_period() {
    let time = MockTime::new();
    let (script, _) = Script::echo();
    let pool = script
        .builder()
        .idle_timeout(SECOND)
        .reap_interval(Some(3 * SECOND))
        .clock(time.clock())
        .build()
        .unwrap();
    round_trip(&pool, 1).await;
    settle(|| pool.stats().table.in_flight == 0).await;
    let ms = Duration::from_millis(1);
    time.advance(2 * SECOND);
    tick(3 * SECOND).await; // the pass at 3 s notes the idle stream
    time.advance(2 * SECOND);
    tick(3 * SECOND - ms).await;
    assert_eq!(pool.stats().reaps, 0, "no pass between 3 s and 6 s");
    tick(ms).await;
    assert_eq!(pool.stats().reaps, 1, "the pass at 6 s closes it");
}
