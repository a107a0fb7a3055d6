//! StreamPool behaviour through the public API: R1's semantics plus exact depth under
//! cancellation. No test sleeps or times anything: the mock clock drives idle time and
//! `settle` yields until the driver tasks have caught up.

use std::pin::pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use crate::common::stream::{assert_echoed, round_trip, Req, Resp, Script};
use crate::common::{build_error, join_all, poll_once, settle, settle_until, MockTime, ReapByHand};
use slotpool::__internal::breaker::BreakerState;
use slotpool::stream::RequestError;
use slotpool::{AcquireError, ConfigError, Reach, TryAcquireError};

#[tokio::test]
async fn echo_round_trip_assigns_ids_and_counts() {
    let (script, _) = Script::echo();
    let pool = script.pool(2, 4);
    for body in 0..10 {
        round_trip(&pool, body).await;
    }
    let stats = pool.stats();
    assert_eq!(stats.acquires, 10);
    assert_eq!(stats.spin_ups, 1, "one stream serves sequential requests");
    assert_eq!(stats.table.in_flight, 0);
    assert_eq!(script.connects(), 1);
}

#[tokio::test]
async fn fills_lowest_stream_before_opening_another() {
    let (script, _) = Script::echo();
    let pool = script.pool(4, 2);
    let a = pool.try_acquire().unwrap();
    let b = pool.try_acquire().unwrap();
    let c = pool.try_acquire().unwrap();
    assert_eq!(a.stream_index(), Some(0));
    assert_eq!(b.stream_index(), Some(0));
    assert_eq!(c.stream_index(), Some(1));
    drop(a);
    // Room reappeared on stream 0: it is preferred over stream 1's spare room.
    let d = pool.try_acquire().unwrap();
    assert_eq!(d.stream_index(), Some(0));
    assert_eq!(pool.stats().spin_ups, 2);
    drop((b, c, d));
}

#[tokio::test]
async fn callers_join_a_stream_while_it_starts() {
    let (script, _) = Script::echo();
    let (script, hold) = script.held();
    let pool = script.pool(1, 4);
    let first = pool.acquire().await.unwrap();
    let second = pool.acquire().await.unwrap();
    assert_eq!(pool.stats().table.starting, 1);
    assert_eq!(
        pool.stats().spin_ups,
        1,
        "the joiner did not start another stream"
    );
    let (r1, r2, ()) = tokio::join!(first.send(Req::new(1)), second.send(Req::new(2)), async {
        tokio::task::yield_now().await;
        hold.add_permits(1);
    });
    assert_eq!(r1.unwrap().body, 1);
    assert_eq!(r2.unwrap().body, 2);
    assert_eq!(pool.stats().table.ready, 1);
    assert_eq!(script.connects(), 1);
}

#[tokio::test]
async fn concurrent_spin_ups_never_exceed_max_streams() {
    let (script, _) = Script::echo();
    let (script, hold) = script.held();
    let pool = script.pool(3, 1);
    let guards: Vec<_> = (0..3).map(|_| pool.try_acquire().unwrap()).collect();
    assert_eq!(pool.try_acquire().unwrap_err(), TryAcquireError::NoCapacity);
    let stats = pool.stats();
    assert_eq!(stats.spin_ups, 3);
    assert_eq!(stats.table.starting, 3);
    assert_eq!(stats.table.in_flight, 3);
    hold.add_permits(3);
    drop(guards);
}

#[tokio::test]
async fn total_in_flight_is_bounded_and_waiters_get_released_room() {
    let (script, _) = Script::echo();
    let pool = script.pool(2, 2);
    let mut held: Vec<_> = (0..4).map(|_| pool.try_acquire().unwrap()).collect();
    let mut waiting = pin!(pool.acquire());
    assert!(poll_once(waiting.as_mut()).is_pending());
    assert_eq!(pool.stats().table.waiting, 1);
    assert_eq!(pool.stats().table.in_flight, 4);
    let freed = held.pop().unwrap();
    let freed_index = freed.stream_index();
    drop(freed);
    let guard = match poll_once(waiting.as_mut()) {
        Poll::Ready(Ok(guard)) => guard,
        other => panic!("waiter not served: {other:?}"),
    };
    assert_eq!(guard.stream_index(), freed_index);
    assert_eq!(pool.stats().waits, 1);
    assert_eq!(pool.stats().table.in_flight, 4);
}

#[tokio::test]
async fn duplicate_in_flight_id_fails_only_that_caller() {
    let (script, mut streams) = Script::manual();
    let pool = script.pool(1, 4);
    let a = pool.acquire().await.unwrap();
    let b = pool.acquire().await.unwrap();
    let server_side = async {
        let mut server = streams.recv().await.unwrap();
        let req = server.next_request().await.unwrap();
        assert_eq!(req.id, Some(5));
        let dup = b.send(Req::with_id(5, 2)).await.unwrap_err();
        assert!(matches!(dup, RequestError::DuplicateId { id: 5 }));
        assert_eq!(dup.reach(), Reach::NotSent);
        server.respond(5, 10);
        server
    };
    let (first, _server) = tokio::join!(a.send(Req::with_id(5, 1)), server_side);
    assert_eq!(first.unwrap(), Resp { id: 5, body: 10 });
    settle(|| pool.stats().table.in_flight == 0).await;
}

#[tokio::test]
async fn unknown_response_id_is_counted_and_dropped() {
    let (script, mut streams) = Script::manual();
    let pool = script.pool(None, 2);
    let guard = pool.acquire().await.unwrap();
    let mut send = pin!(guard.send(Req::new(3)));
    assert!(poll_once(send.as_mut()).is_pending());
    let mut server = streams.recv().await.unwrap();
    let req = server.next_request().await.unwrap();
    server.respond(req.id.unwrap() + 1000, 0);
    settle(|| pool.stats().unknown_responses == 1).await;
    server.respond(req.id.unwrap(), 3);
    assert_eq!(send.await.unwrap().body, 3);
}

#[tokio::test]
async fn stream_failure_fails_its_callers_with_reach_and_spares_other_streams() {
    let (script, mut streams) = Script::manual();
    let pool = script.pool(2, 2);
    // Stream 0: two requests in flight. Stream 1: one request.
    let g0a = pool.try_acquire().unwrap();
    let g0b = pool.try_acquire().unwrap();
    let g1 = pool.try_acquire().unwrap();
    assert_eq!((g0a.stream_index(), g1.stream_index()), (Some(0), Some(1)));
    let mut s0a = pin!(g0a.send(Req::new(1)));
    let mut s1 = pin!(g1.send(Req::new(3)));
    assert!(poll_once(s0a.as_mut()).is_pending());
    assert!(poll_once(s1.as_mut()).is_pending());
    let mut server0 = streams.recv().await.unwrap();
    let mut server1 = streams.recv().await.unwrap();
    // Which ServerStream is which depends on connect order; find stream 0 by its request.
    let r0 = server0.next_request().await.unwrap();
    let r1 = server1.next_request().await.unwrap();
    if r0.body != 1 {
        std::mem::swap(&mut server0, &mut server1);
    }
    let (r0, r1) = if r0.body == 1 { (r0, r1) } else { (r1, r0) };
    // g0b holds room but has not sent; the stream fails now.
    server0.fail("reset");
    let err = s0a.await.unwrap_err();
    assert!(matches!(err, RequestError::StreamEnded { .. }));
    assert_eq!(err.reach(), Reach::MaybeApplied);
    let late = g0b.send(Req::new(2)).await.unwrap_err();
    assert_eq!(late.reach(), Reach::NotSent, "{late:?}");
    assert_eq!(pool.stats().stream_failures, 1);
    // The other stream is untouched.
    server1.respond(r1.id.unwrap(), 33);
    assert_eq!(s1.await.unwrap().body, 33);
    let _ = r0;
    // The failed slot is Empty again and the next acquire opens a fresh stream there.
    settle(|| pool.stats().table.empty == 1).await;
    let again = pool.try_acquire().unwrap();
    assert_eq!(
        again.stream_index(),
        Some(1),
        "stream 1 has room and is preferred"
    );
    let full = pool.try_acquire().unwrap();
    assert_eq!(full.stream_index(), Some(1));
    let fresh = pool.try_acquire().unwrap();
    assert_eq!(fresh.stream_index(), Some(0));
    assert_eq!(pool.stats().spin_ups, 3);
}

#[tokio::test]
async fn connect_failure_fails_joined_callers_as_not_sent_and_recovers() {
    let (script, _) = Script::echo();
    script.fail_next_connects(1);
    let pool = script.pool(1, 4);
    let a = pool.acquire().await.unwrap();
    let b = pool.acquire().await.unwrap();
    let (ra, rb) = tokio::join!(a.send(Req::new(1)), b.send(Req::new(2)));
    for err in [ra.unwrap_err(), rb.unwrap_err()] {
        // Queued before the failure or arriving after it, the caller learns the connect
        // error itself.
        assert!(matches!(err, RequestError::Connect { .. }), "{err:?}");
        assert_eq!(err.reach(), Reach::NotSent);
    }
    assert_eq!(pool.stats().connect_failures, 1);
    settle(|| pool.stats().table.empty == 1).await;
    round_trip(&pool, 9).await;
}

#[tokio::test]
async fn depth_stays_taken_until_the_response_when_the_caller_cancels() {
    let (script, mut streams) = Script::manual();
    let pool = script.pool(1, 1);
    let guard = pool.acquire().await.unwrap();
    let mut send = Box::pin(guard.send(Req::new(1)));
    assert!(poll_once(send.as_mut()).is_pending());
    let mut server = streams.recv().await.unwrap();
    let req = server.next_request().await.unwrap();
    drop(send); // the caller gives up after its request went on the wire
    assert_eq!(
        pool.stats().table.in_flight,
        1,
        "depth is held by the request on the wire"
    );
    assert_eq!(pool.try_acquire().unwrap_err(), TryAcquireError::NoCapacity);
    server.respond(req.id.unwrap(), 1);
    settle(|| pool.stats().late_responses == 1).await;
    assert_eq!(pool.stats().table.in_flight, 0);
    assert!(pool.try_acquire().is_ok());
}

#[tokio::test]
async fn dropping_an_unsent_guard_gives_room_back() {
    let (script, _) = Script::echo();
    let pool = script.pool(1, 1);
    let guard = pool.try_acquire().unwrap();
    assert_eq!(pool.try_acquire().unwrap_err(), TryAcquireError::NoCapacity);
    drop(guard);
    assert!(pool.try_acquire().is_ok());
}

#[tokio::test]
async fn idle_streams_are_reaped_on_the_mock_clock_and_busy_ones_are_not() {
    let time = MockTime::new();
    let (script, _) = Script::echo();
    let pool = script
        .sized(2, 1)
        .idle_timeout(Duration::from_secs(10))
        .reaped_by_hand(&time)
        .build()
        .unwrap();
    let a = pool.acquire().await.unwrap();
    let b = pool.acquire().await.unwrap();
    a.send(Req::new(1)).await.unwrap();
    settle(|| pool.stats().table.ready == 2).await;
    // Stream 1 stays busy (b is held); stream 0 goes idle.
    assert_eq!(
        pool.reap(time.now()),
        0,
        "first pass only notes the idle stream"
    );
    time.advance(Duration::from_secs(9));
    assert_eq!(pool.reap(time.now()), 0, "not idle long enough");
    time.advance(Duration::from_secs(2));
    assert_eq!(pool.reap(time.now()), 1);
    // The reaped slot counts (draining) until its driver has let go of the stream.
    settle(|| pool.stats().table.empty == 1).await;
    let stats = pool.stats();
    assert_eq!(
        (stats.reaps, stats.table.empty, stats.table.ready),
        (1, 1, 1)
    );
    // A stream used between passes is not reaped.
    drop(b);
    assert_eq!(pool.reap(time.now()), 0);
    let c = pool.try_acquire().unwrap();
    assert_eq!(c.stream_index(), Some(1));
    drop(c);
    time.advance(Duration::from_secs(11));
    assert_eq!(
        pool.reap(time.now()),
        0,
        "used since the last pass: idle time restarts"
    );
    time.advance(Duration::from_secs(11));
    assert_eq!(pool.reap(time.now()), 1);
    settle(|| pool.stats().table.empty == 2).await;
    // A reaped stream's driver ends; the next acquire opens a new one.
    round_trip(&pool, 4).await;
    assert_eq!(pool.stats().spin_ups, 3);
}

#[tokio::test]
async fn acquire_timeout_and_close_resolve_waiters_with_typed_errors() {
    let (script, _) = Script::echo();
    let pool = script.pool(1, 1);
    let held = pool.try_acquire().unwrap();
    tokio::time::pause();
    let err = pool
        .acquire_timeout(Duration::from_millis(50))
        .await
        .unwrap_err();
    assert!(matches!(err, AcquireError::Timeout { .. }));
    assert_eq!(err.reach(), Reach::NotSent);
    assert_eq!(
        pool.stats().table.waiting,
        0,
        "the timed-out waiter left the queue"
    );
    let mut waiting = pin!(pool.acquire());
    assert!(poll_once(waiting.as_mut()).is_pending());
    pool.close();
    assert!(matches!(
        poll_once(waiting.as_mut()),
        Poll::Ready(Err(AcquireError::Closed))
    ));
    assert_eq!(pool.try_acquire().unwrap_err(), TryAcquireError::Closed);
    drop(held);
}

#[tokio::test]
async fn dropping_the_pool_ends_its_driver_tasks() {
    let (script, mut streams) = Script::manual();
    let pool = script.pool(None, 2);
    let guard = pool.acquire().await.unwrap();
    let mut send = Box::pin(guard.send(Req::new(1)));
    assert!(poll_once(send.as_mut()).is_pending());
    let mut server = streams.recv().await.unwrap();
    server.next_request().await.unwrap();
    drop(send);
    drop(pool);
    // The driver dropped its outbound half: the server sees the stream end.
    assert_eq!(server.next_request().await, None);
}

#[tokio::test]
async fn bad_configuration_is_a_typed_error() {
    let (script, _) = Script::echo();
    let err = |b: slotpool::stream::StreamPoolBuilder<_>| build_error(b.build());
    assert_eq!(
        err(script.builder().max_queue_depth(0)),
        ConfigError::Zero("max_queue_depth")
    );
    assert_eq!(
        err(script.builder().max_streams(0)),
        ConfigError::Zero("max_streams")
    );
    assert_eq!(
        err(script.builder().reap_interval(Some(Duration::ZERO))),
        ConfigError::Zero("reap_interval")
    );
    assert!(matches!(
        err(script.builder().max_queue_depth(usize::MAX)),
        ConfigError::TooLarge {
            name: "max_queue_depth",
            ..
        }
    ));
}

#[test]
fn building_outside_a_runtime_is_a_typed_error() {
    let (script, _) = Script::echo();
    assert_eq!(
        build_error(script.builder().build()),
        ConfigError::Missing("tokio runtime")
    );
}

/// What the stress tasks saw.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Seen {
    acquired: u64,
    unsent: u64,
    answered: u64,
    /// Contained panics, by reach.
    panicked_not_sent: u64,
    panicked_maybe_applied: u64,
}

/// 16 tasks × 200 rounds on 3 streams of depth 2: acquire (never more than the bound in
/// flight), then drop the guard unsent or send and check the echo. A request may only fail
/// as a contained panic (the storm injects them); anything else fails the test.
async fn stress(pool: &Arc<crate::common::stream::Pool>) -> Seen {
    let mut tasks = Vec::new();
    for t in 0..16u32 {
        tasks.push(crate::common::spawn_with(pool, move |pool| async move {
            let mut seen = Seen::default();
            for i in 0..200u32 {
                let guard = pool.acquire().await.unwrap();
                seen.acquired += 1;
                let in_flight = pool.stats().table.in_flight;
                assert!(in_flight <= 6, "overshoot: {in_flight}");
                if i % 3 == 0 {
                    drop(guard);
                    seen.unsent += 1;
                    continue;
                }
                let body = t * 1000 + i;
                match guard.send(Req::new(body)).await {
                    Ok(response) => {
                        assert_eq!(response.body, body);
                        seen.answered += 1;
                    }
                    Err(RequestError::Panicked { reach, .. }) => match reach {
                        Reach::NotSent => seen.panicked_not_sent += 1,
                        Reach::MaybeApplied => seen.panicked_maybe_applied += 1,
                    },
                    Err(other) => panic!("only injected panics fail requests: {other:?}"),
                }
            }
            seen
        }));
    }
    join_all(tasks)
        .await
        .into_iter()
        .fold(Seen::default(), |a, b| Seen {
            acquired: a.acquired + b.acquired,
            unsent: a.unsent + b.unsent,
            answered: a.answered + b.answered,
            panicked_not_sent: a.panicked_not_sent + b.panicked_not_sent,
            panicked_maybe_applied: a.panicked_maybe_applied + b.panicked_maybe_applied,
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_tasks_never_overshoot_and_account_exactly() {
    let (script, _) = Script::echo();
    let pool = Arc::new(script.pool(3, 2));
    let seen = stress(&pool).await;
    assert_eq!(seen.answered + seen.unsent, 16 * 200, "{seen:?}");
    let stats = pool.stats();
    assert_eq!(stats.table.in_flight, 0);
    assert_eq!(stats.acquires, 16 * 200);
    assert_eq!(
        (stats.completed, stats.failed, stats.cancelled),
        (seen.answered, 0, 0)
    );
    assert!(stats.spin_ups <= 3);
    assert_eq!(stats.table.waiting, 0);
}

/// The stress test with random panics mixed in (5% of connects, 2% of responses): every
/// failure is a contained panic with the right reach, every unit of depth comes back, the
/// counters balance exactly, and no slot is left stuck: afterwards every stream slot can be
/// filled and serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_storm_of_panics_in_user_code_leaves_exact_accounting() {
    crate::common::stream::quiet_injected_panics();
    let (script, _) = Script::echo();
    let faults = script.faults();
    faults.connect_rate.store(50, Ordering::SeqCst);
    faults.inbound_rate.store(20, Ordering::SeqCst);
    let pool = Arc::new(script.pool(3, 2));
    let seen = stress(&pool).await;
    faults.connect_rate.store(0, Ordering::SeqCst);
    faults.inbound_rate.store(0, Ordering::SeqCst);
    let failed = seen.panicked_not_sent + seen.panicked_maybe_applied;
    assert!(
        failed > 0 && seen.answered > 0,
        "a storm happened: {seen:?}"
    );
    assert_eq!(seen.acquired, 16 * 200);
    assert_eq!(seen.answered + failed + seen.unsent, seen.acquired);
    settle_until("every stream settles", || {
        let t = pool.stats().table;
        t.in_flight == 0 && t.starting == 0 && t.draining == 0
    })
    .await;
    let stats = pool.stats();
    assert_eq!(stats.acquires, seen.acquired);
    assert_eq!(stats.completed, seen.answered);
    assert_eq!(stats.failed, failed);
    assert_eq!(stats.cancelled, 0);
    assert_eq!(stats.table.waiting, 0);
    // Each injected panic ended exactly one stream, counted once.
    let injected = faults.injected() as u64;
    assert_eq!(stats.panics, injected);
    assert_eq!(stats.connect_failures + stats.stream_failures, injected);
    assert!(stats.spin_ups <= 3 + injected);
    // No slot stuck: the full bound is there to take, and each stream answers.
    let guards: Vec<_> = (0..6).map(|_| pool.try_acquire().unwrap()).collect();
    assert_eq!(pool.try_acquire().unwrap_err(), TryAcquireError::NoCapacity);
    for (body, guard) in guards.into_iter().enumerate() {
        assert_echoed(guard, body as u32).await;
    }
    settle(|| pool.stats().table.in_flight == 0).await;
}

#[tokio::test]
async fn breaker_opens_fails_fast_then_half_opens_one_probe() {
    let time = MockTime::new();
    let (script, _) = Script::echo();
    script.fail_next_connects(3);
    let pool = script
        .sized(2, 1)
        .breaker(2, Duration::from_secs(5))
        .reaped_by_hand(&time)
        .build()
        .unwrap();
    for _ in 0..2 {
        let guard = pool.acquire().await.unwrap();
        let err = guard.send(Req::new(1)).await.unwrap_err();
        assert_eq!(err.reach(), Reach::NotSent);
        settle(|| pool.stats().table.empty == 2).await;
    }
    assert_eq!(pool.stats().breaker, BreakerState::Open);
    // Open: fail fast, no connect attempted.
    let connects = script.connects();
    match pool.try_acquire() {
        Err(TryAcquireError::Unavailable { retry_after }) => {
            assert_eq!(retry_after, Duration::from_secs(5))
        }
        other => panic!("expected fail-fast, got {other:?}"),
    }
    assert!(matches!(
        pool.acquire().await,
        Err(AcquireError::Unavailable { .. })
    ));
    assert_eq!(script.connects(), connects);
    assert_eq!(pool.stats().table.empty, 2, "refused claims were undone");
    // After the backoff one probe goes through; it fails (third scripted failure): open again.
    time.advance(Duration::from_secs(5));
    let probe = pool.try_acquire().unwrap();
    assert_eq!(pool.stats().breaker, BreakerState::HalfOpen);
    assert!(matches!(
        pool.try_acquire(),
        Err(TryAcquireError::Unavailable { .. })
    ));
    assert!(probe.send(Req::new(2)).await.is_err());
    settle(|| pool.stats().breaker == BreakerState::Open).await;
    // Next probe succeeds: closed, and the pool serves again.
    time.advance(Duration::from_secs(5));
    let probe = pool.try_acquire().unwrap();
    assert_echoed(probe, 3).await;
    assert_eq!(pool.stats().breaker, BreakerState::Closed);
    round_trip(&pool, 4).await;
    assert!(pool.stats().breaker_rejections >= 3);
}

#[tokio::test]
async fn min_streams_are_prewarmed_and_kept_through_reaping() {
    let time = MockTime::new();
    let (script, _) = Script::echo();
    let pool = script
        .sized(4, 1)
        .min_streams(2)
        .idle_timeout(Duration::from_secs(1))
        .reaped_by_hand(&time)
        .build()
        .unwrap();
    settle(|| pool.stats().table.ready == 2).await;
    assert_eq!(
        pool.stats().table.in_flight,
        0,
        "prewarmed streams hold no load"
    );
    assert_eq!(script.connects(), 2);
    // A third stream opened under load is reaped when idle; the first two stay.
    let guards: Vec<_> = (0..3).map(|_| pool.try_acquire().unwrap()).collect();
    assert_eq!(guards[2].stream_index(), Some(2));
    drop(guards);
    settle(|| pool.stats().table.ready == 3).await;
    for _ in 0..3 {
        time.advance(Duration::from_secs(2));
        pool.reap(time.now());
    }
    let stats = pool.stats();
    assert_eq!((stats.table.ready, stats.reaps), (2, 1));
    let bad = build_error(script.builder().max_streams(1).min_streams(2).build());
    assert!(matches!(bad, ConfigError::Inverted { .. }));
}

/// A pool in an `Arc` hands out `'static` guards that move into spawned tasks; an owned guard
/// outliving the pool fails its send as not sent and releases nothing twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owned_guards_move_into_spawned_tasks() {
    let (script, _) = Script::echo();
    let pool = Arc::new(script.pool(2, 2));
    let tasks: Vec<_> = (0..8u32)
        .map(|body| {
            let pool = Arc::clone(&pool);
            tokio::spawn(async move {
                let guard = pool.acquire_owned().await.unwrap();
                assert!(guard.stream_index().is_some());
                guard.send(Req::new(body)).await.unwrap().body
            })
        })
        .collect();
    let bodies = join_all(tasks).await;
    assert_eq!(bodies, (0..8).collect::<Vec<_>>());
    let owned = pool.try_acquire_owned().unwrap();
    assert_eq!(pool.stats().table.in_flight, 1);
    drop(owned);
    assert_eq!(pool.stats().table.in_flight, 0);
    // Outliving the pool.
    let owned = pool.try_acquire_owned().unwrap();
    assert_eq!(
        Arc::strong_count(&pool),
        1,
        "the last handle: this drops the pool"
    );
    drop(pool);
    let err = tokio::spawn(owned.send(Req::new(9)))
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(err.reach(), Reach::NotSent, "{err:?}");
}

/// An owned guard holds no reference count: its room keeps the pool's state alive. Once the
/// pool is dropped and its drivers have ended, the state (its connector with it) lives until
/// the last owned guard returns its room, and goes with that return.
#[tokio::test]
async fn the_last_owned_guard_of_a_dropped_pool_frees_its_state() {
    let (script, _) = Script::echo();
    let pool = script.pool(1, 2);
    let first = pool.try_acquire_owned().unwrap();
    let second = pool.try_acquire_owned().unwrap();
    assert_eq!(
        script.clones(),
        2,
        "the test's script and the pool's connector"
    );
    drop(pool);
    let metrics = tokio::runtime::Handle::current().metrics();
    settle_until("the driver ended with the pool", || {
        metrics.num_alive_tasks() == 0
    })
    .await;
    assert_eq!(script.clones(), 2, "the guards keep the state");
    drop(first);
    assert_eq!(script.clones(), 2, "one guard is still out");
    drop(second);
    assert_eq!(script.clones(), 1, "the last return freed the state");
}

/// Sixteen threads return owned guards at once after the pool was dropped: more threads than
/// there are release windows, so some return inside their thread's window and the others under
/// a reference count of their own. The state goes with the last of them (or with its driver,
/// if that ends after), once, whoever it is.
#[test]
fn owned_guards_of_a_dropped_pool_returned_on_many_threads_at_once() {
    const THREADS: usize = 16;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (script, _) = Script::echo();
    // Room for twice the guards: each thread's own acquire below finds some.
    let pool = Arc::new(runtime.block_on(async { script.pool(4, 8) }));
    let guards: Vec<_> = (0..THREADS)
        .map(|_| pool.try_acquire_owned().unwrap())
        .collect();
    assert_eq!(pool.stats().table.in_flight, THREADS as u64);
    let claimed = Arc::new(std::sync::Barrier::new(THREADS + 1));
    let dropped = Arc::new(std::sync::Barrier::new(THREADS + 1));
    let threads: Vec<_> = guards
        .into_iter()
        .map(|guard| {
            let (pool, claimed, dropped) = (
                Arc::clone(&pool),
                Arc::clone(&claimed),
                Arc::clone(&dropped),
            );
            std::thread::spawn(move || {
                // A count on this thread claims its counter stripe (and so its release
                // window) if one is free; the pool's handle goes before the guard does.
                drop(pool.try_acquire().expect("room"));
                drop(pool);
                claimed.wait();
                dropped.wait();
                drop(guard);
            })
        })
        .collect();
    claimed.wait();
    assert_eq!(
        Arc::strong_count(&pool),
        1,
        "the last handle: this drops the pool"
    );
    drop(pool);
    dropped.wait();
    for thread in threads {
        thread.join().unwrap();
    }
    runtime.block_on(settle_until(
        "the state was freed once every guard was back",
        || script.clones() == 1,
    ));
}

/// A dropped pool with no owned guard out frees its state once its drivers end; owned
/// guards returned before the drop leave nothing behind.
#[tokio::test]
async fn a_dropped_pool_without_owned_guards_frees_its_state() {
    let (script, _) = Script::echo();
    let pool = script.pool(1, 2);
    drop(pool.try_acquire_owned().unwrap());
    drop(pool);
    settle_until("the state went with the pool and its driver", || {
        script.clones() == 1
    })
    .await;
    assert_eq!(
        tokio::runtime::Handle::current()
            .metrics()
            .num_alive_tasks(),
        0
    );
}

/// `acquire_owned` borrows the pool only for the wait: a pool that is not in an `Arc` hands
/// out owned guards too, the guard's send runs in a spawned task after the borrow ended, and
/// its room comes back when the send's response does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owned_guards_need_no_arc_around_the_pool() {
    let (script, _) = Script::echo();
    let pool = script.pool(1, 2);
    let first = pool.acquire_owned().await.unwrap();
    let second = pool.try_acquire_owned().unwrap();
    assert_eq!(pool.stats().table.in_flight, 2);
    assert!(
        matches!(pool.try_acquire_owned(), Err(TryAcquireError::NoCapacity)),
        "one stream of depth 2 holds two owned guards"
    );
    let sends = [first, second].map(|guard| tokio::spawn(guard.send(Req::new(5))));
    for send in sends {
        assert_eq!(send.await.unwrap().unwrap().body, 5);
    }
    assert_eq!(pool.stats().table.in_flight, 0);
    assert!(pool.try_acquire_owned().is_ok());
}

/// Every send ends as exactly one of completed, failed or cancelled; a guard dropped unsent
/// is none of them.
#[tokio::test]
async fn stats_count_completed_failed_and_cancelled_requests() {
    let (script, mut streams) = Script::manual();
    let pool = script.pool(1, 4);
    let guards: Vec<_> = (0..4).map(|_| pool.try_acquire().unwrap()).collect();
    let mut guards = guards.into_iter();
    drop(guards.next());
    let (answered, cancelled, failed) = (
        guards.next().unwrap(),
        guards.next().unwrap(),
        guards.next().unwrap(),
    );
    let mut answered = pin!(answered.send(Req::new(1)));
    let mut cancelled = Box::pin(cancelled.send(Req::new(2)));
    assert!(poll_once(answered.as_mut()).is_pending());
    assert!(poll_once(cancelled.as_mut()).is_pending());
    let mut server = streams.recv().await.unwrap();
    let first = server.next_request().await.unwrap();
    let second = server.next_request().await.unwrap();
    drop(cancelled);
    server.respond(first.id.unwrap(), 1);
    assert_eq!(answered.await.unwrap().body, 1);
    server.respond(second.id.unwrap(), 2);
    let dup = failed.send(Req::with_id(7, 3));
    let mut dup = pin!(dup);
    assert!(poll_once(dup.as_mut()).is_pending());
    let third = server.next_request().await.unwrap();
    server.fail("reset");
    assert!(dup.await.is_err());
    let _ = third;
    settle(|| pool.stats().table.in_flight == 0).await;
    let stats = pool.stats();
    assert_eq!(stats.acquires, 4);
    assert_eq!(
        (stats.completed, stats.failed, stats.cancelled),
        (1, 1, 1),
        "{stats:?}"
    );
    assert_eq!(stats.late_responses, 1);
}

/// The connector learns which of the pool's streams it opens (for its logs) from the
/// outbound half, without a change to the `Connector` trait.
#[tokio::test]
async fn the_connector_learns_which_stream_it_opens() {
    let (script, mut streams) = Script::manual();
    let pool = script.pool(2, 1);
    let a = pool.try_acquire().unwrap();
    let b = pool.try_acquire().unwrap();
    assert_eq!((a.stream_index(), b.stream_index()), (Some(0), Some(1)));
    let mut seen = Vec::new();
    for _ in 0..2 {
        seen.push(streams.recv().await.unwrap().requests.stream_index());
    }
    seen.sort();
    assert_eq!(seen, [Some(0), Some(1)]);
    // One made by hand names no stream.
    let (_, rx) = tokio::sync::mpsc::unbounded_channel::<Req>();
    assert_eq!(slotpool::stream::Outbound::new(rx).stream_index(), None);
    drop((a, b));
}

/// What the public signatures use is reachable from the crate: the clock (and its mock), the
/// instant `reap` takes, and the parts of a stats snapshot.
#[tokio::test]
async fn the_clock_and_the_stats_parts_are_reexported() {
    let (clock, mock) = slotpool::Clock::mock();
    let (script, _) = Script::echo();
    let pool = script
        .builder()
        .clock(clock)
        .reap_interval(None)
        .build()
        .unwrap();
    mock.advance(Duration::from_secs(1));
    let now: slotpool::Instant = pool.clock().now();
    assert_eq!(pool.reap(now), 0);
    let stats = pool.stats();
    let _: slotpool::stream::TableStats = stats.table;
    assert_eq!(stats.breaker, slotpool::stream::BreakerState::Closed);
}

/// A burst of responses larger than what one driver poll handles (the driver yields after a
/// batch and carries on when polled again): every caller is answered, none lost or failed.
#[tokio::test]
async fn a_burst_of_responses_beyond_one_batch_reaches_every_caller() {
    const BURST: u32 = 600;
    let (script, mut streams) = Script::manual();
    let pool = Arc::new(script.pool(1, BURST as usize));
    let sends: Vec<_> = (0..BURST)
        .map(|body| {
            let pool = Arc::clone(&pool);
            tokio::spawn(async move {
                let guard = pool.acquire().await.expect("room for the whole burst");
                guard.send(Req::new(body)).await
            })
        })
        .collect();
    let server = async {
        let mut server = streams.recv().await.expect("the stream");
        let mut asked = Vec::new();
        while asked.len() < BURST as usize {
            let request = server.next_request().await.expect("a request");
            asked.push((request.id.expect("an id"), request.body));
        }
        // Every answer at once: the driver finds them all ready in one poll.
        for (id, body) in asked {
            server.respond(id, body);
        }
        server
    };
    let (answers, _server) = tokio::join!(join_all(sends), server);
    let mut bodies: Vec<u32> = answers
        .into_iter()
        .map(|answer| answer.expect("answered").body)
        .collect();
    bodies.sort_unstable();
    assert_eq!(bodies, (0..BURST).collect::<Vec<_>>());
    assert_eq!(pool.stats().completed, u64::from(BURST));
}

/// Owned guards say which stream they hold room on, lowest first, as borrowed ones do; the
/// guards and a waiting acquire print what they hold.
#[tokio::test]
async fn owned_guards_name_their_stream_and_print_what_they_hold() {
    let (script, _) = Script::echo();
    let pool = Arc::new(script.pool(2, 1));
    let first = pool.try_acquire_owned().unwrap();
    let second = pool.try_acquire_owned().unwrap();
    assert_eq!(
        (first.stream_index(), second.stream_index()),
        (Some(0), Some(1))
    );
    let printed = format!("{second:?}");
    assert!(
        printed.starts_with("OwnedStreamGuard") && printed.contains("reservation: Some("),
        "{printed}"
    );
    let mut waiting = pin!(pool.acquire());
    assert!(poll_once(waiting.as_mut()).is_pending());
    let printed = format!("{waiting:?}");
    assert!(
        printed.starts_with("Acquire") && printed.contains("waiting_since: Some("),
        "{printed}"
    );
    drop(first);
    let guard = waiting.await.unwrap();
    assert_eq!(guard.stream_index(), Some(0));
}
