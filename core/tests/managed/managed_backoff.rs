//! The managed pool's create back-off (`CreateBackoff`): after failed creations in a row,
//! creations pause, so that a server that is down meets about one connection attempt per
//! pause however many callers ask; callers wait the pause out within their deadline, or fail
//! at once with `PoolError::Unavailable` when they cannot or are told not to; idle objects
//! are still handed out; the probe reports its outcome whatever ends it.
//!
//! Tokio's clock is paused and the pool's mock clock follows it a millisecond at a time
//! ([`follow`]), so the pauses (on the pool's clock) and the callers' sleeps and deadlines
//! (on tokio's) agree, and nothing depends on the machine's speed.

use std::pin::pin;
use std::time::Duration;

use crate::common::managed::{Act, Fixture, Injected, Scripted};
use crate::common::{poll_once, settle_until, MockTime};
use slotpool::managed::{CreateBackoff, Pool, PoolError, Step};
use slotpool::ConfigError;
use tokio::task::JoinHandle;
use tokio::time::Instant;

const MS: Duration = Duration::from_millis(1);
const SECOND: Duration = Duration::from_secs(1);

/// Moves the pool's mock clock with tokio's paused one, a millisecond at a time, until
/// aborted.
fn follow(time: &MockTime) -> JoinHandle<()> {
    let time = time.clone();
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(MS).await;
            time.advance(MS);
        }
    })
}

/// A pool of `max_size` whose back-off opens after 3 failures for up to `backoff`, every
/// pause as long (no growth).
fn fixture(max_size: usize, backoff: Duration, fail_fast: bool) -> Fixture {
    Fixture::with(max_size, |b| {
        b.create_backoff(CreateBackoff {
            after_failures: 3,
            first: backoff,
            backoff,
            fail_fast,
        })
    })
}

/// Creation attempts the pool made: those that made an object and those that failed.
fn attempts(pool: &Pool<Scripted>) -> u64 {
    let stats = pool.stats();
    stats.created + stats.create_failures
}

/// Three `get`s whose creations fail: the third opens the back-off.
async fn three_failures(f: &Fixture) {
    let before = attempts(&f.pool);
    f.script.creates(&[Act::Fail, Act::Fail, Act::Fail]);
    for _ in 0..3 {
        let error = f.pool.get().await.expect_err("the creation fails");
        assert!(matches!(error, PoolError::Create(Injected)), "{error}");
    }
    assert_eq!(attempts(&f.pool), before + 3);
}

/// Eight callers during an outage: the pool tries once per pause (a failed probe, then one
/// that succeeds), not once per caller; the caller whose creation was the failed probe gets
/// its error, and the seven others are served once the server is back, after the two
/// pauses.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn an_outage_meets_one_attempt_per_pause_and_waiters_are_served_after_it() {
    let f = std::sync::Arc::new(fixture(4, SECOND, false));
    let clock = follow(&f.time);
    three_failures(&f).await;
    f.script.creates(&[Act::Fail]); // the first probe
    let start = Instant::now();
    let callers: Vec<_> = (0..8)
        .map(|_| {
            let f = std::sync::Arc::clone(&f);
            tokio::spawn(async move {
                let object = f.pool.get().await.map_err(|e| e.to_string())?;
                tokio::time::sleep(10 * MS).await;
                drop(object);
                Ok::<_, String>(())
            })
        })
        .collect();
    let mut failed = Vec::new();
    for caller in callers {
        if let Err(error) = caller.await.expect("no panic") {
            failed.push(error);
        }
    }
    assert_eq!(
        failed,
        ["creating an object failed: injected failure"],
        "only the failed probe's caller"
    );
    let took = start.elapsed();
    // Two pauses of between half a second and a second each, then the work.
    assert!(took >= SECOND && took <= 2 * SECOND + 100 * MS, "{took:?}");
    let stats = f.pool.stats();
    assert_eq!(
        stats.create_failures, 4,
        "one failed attempt in the outage: {stats:?}"
    );
    assert!(stats.created >= 1 && stats.created <= 4, "{stats:?}");
    assert!(stats.paused >= 8, "every caller met the pause: {stats:?}");
    assert_eq!(attempts(&f.pool), 4 + stats.created);
    clock.abort();
    f.assert_balanced();
}

/// With `fail_fast`, a `get` that needs a creation during a pause fails at once with how long
/// the pause has left, without an attempt; `try_get` does so whatever the setting. Once the
/// pause is over the probe's success ends it and creations run as before.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn fail_fast_answers_unavailable_at_once_and_the_probe_ends_the_pause() {
    let f = fixture(4, SECOND, true);
    let clock = follow(&f.time);
    three_failures(&f).await;
    let start = Instant::now();
    let retry_after = match f.pool.get().await {
        Err(PoolError::Unavailable { retry_after }) => retry_after,
        other => panic!("unavailable, got {:?}", other.map(|o| o.id)),
    };
    assert_eq!(start.elapsed(), Duration::ZERO, "at once");
    assert!(
        retry_after >= SECOND / 2 && retry_after <= SECOND,
        "{retry_after:?}"
    );
    assert!(matches!(
        f.pool.try_get().await,
        Err(PoolError::Unavailable { .. })
    ));
    assert_eq!(attempts(&f.pool), 3, "no attempt during the pause");

    tokio::time::sleep(retry_after + 2 * MS).await;
    let probe = f.pool.get().await.expect("the probe succeeds");
    let next = f.pool.get().await.expect("creations run again");
    assert_eq!((probe.id, next.id), (0, 1));
    drop((probe, next));
    clock.abort();
    f.assert_balanced();
}

/// A pause longer than what is left of the caller's wait deadline fails the `get` at once
/// with `Unavailable` rather than letting it wait its deadline out for nothing.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_pause_past_the_wait_deadline_fails_at_once() {
    let f = Fixture::with(4, |b| {
        b.wait_timeout(Some(100 * MS))
            .create_backoff(CreateBackoff {
                after_failures: 3,
                first: SECOND,
                backoff: SECOND,
                fail_fast: false,
            })
    });
    let clock = follow(&f.time);
    three_failures(&f).await;
    let start = Instant::now();
    let error = f
        .pool
        .get()
        .await
        .expect_err("the pause outlasts the deadline");
    assert!(matches!(error, PoolError::Unavailable { .. }), "{error}");
    assert_eq!(start.elapsed(), Duration::ZERO);
    // A pause shorter than the deadline is waited out: a `get_timeouts` with a long wait.
    let timeouts = slotpool::managed::Timeouts {
        wait: Some(5 * SECOND),
        ..f.pool.timeouts()
    };
    let object = f.pool.get_timeouts(&timeouts).await.expect("waited out");
    assert!(start.elapsed() >= SECOND / 2 && start.elapsed() <= SECOND + 5 * MS);
    drop(object);
    clock.abort();
    f.assert_balanced();
}

/// Only creations pause: an idle object is handed out during a pause at once.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn idle_objects_are_handed_out_during_a_pause() {
    let f = fixture(4, SECOND, true);
    let clock = follow(&f.time);
    let held = f.pool.get().await.unwrap();
    three_failures(&f).await;
    drop(held);
    let start = Instant::now();
    let again = f.pool.get().await.expect("the idle object");
    assert_eq!((again.id, start.elapsed()), (0, Duration::ZERO));
    drop(again);
    clock.abort();
    f.assert_balanced();
}

/// The probe's caller gives up while the probe's creation hangs: the creation is finished
/// on the pool's task and still reports, so its success ends the pause (a probe that never
/// reported would hold creations back for good).
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_cancelled_probe_still_ends_the_pause() {
    let f = fixture(4, SECOND, true);
    let clock = follow(&f.time);
    three_failures(&f).await;
    tokio::time::sleep(SECOND + 2 * MS).await;
    f.script.creates(&[Act::Hang]);
    {
        let mut probe = pin!(f.pool.get());
        assert!(
            poll_once(probe.as_mut()).is_pending(),
            "the probe's creation hangs"
        );
    } // the caller gives up; the creation goes on off it
    assert!(
        matches!(f.pool.try_get().await, Err(PoolError::Unavailable { .. })),
        "while the probe is out, others fail fast"
    );
    f.script.create_gate.add_permits(1);
    settle_until("the probe's object is idle", || {
        f.pool.status().available == 1
    })
    .await;
    let (first, second) = (f.pool.get().await.unwrap(), f.pool.get().await.unwrap());
    assert_eq!((first.id, second.id), (0, 1), "the pause is over");
    assert_eq!(f.pool.stats().created_off_caller, 1);
    drop((first, second));
    clock.abort();
    f.assert_balanced();
}

/// `CreateBackoff::off()`: every `get` that finds room creates, however many failed before.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn off_never_pauses() {
    let f = Fixture::with(4, |b| b.create_backoff(CreateBackoff::off()));
    f.script.creates(&[Act::Fail; 10]);
    for _ in 0..10 {
        let error = f.pool.get().await.expect_err("fails");
        assert!(matches!(error, PoolError::Create(Injected)), "{error}");
    }
    assert_eq!((attempts(&f.pool), f.pool.stats().paused), (10, 0));
    drop(f.pool.get().await.expect("and the eleventh creates"));
    f.assert_balanced();
}

/// The default is on (3 failures, pauses from 10 ms doubling to 80 ms, callers wait), and a
/// zero first pause or one longer than the longest is refused by its name.
#[test]
fn the_default_is_on_and_bad_pauses_are_refused_by_name() {
    let default = CreateBackoff::default();
    assert_eq!(
        default,
        CreateBackoff {
            after_failures: 3,
            first: Duration::from_millis(10),
            backoff: Duration::from_millis(80),
            fail_fast: false,
        }
    );
    assert!(default.is_on() && !CreateBackoff::off().is_on());
    let zero = Pool::builder(Scripted::new())
        .create_backoff(CreateBackoff {
            first: Duration::ZERO,
            ..CreateBackoff::default()
        })
        .build();
    assert!(matches!(
        crate::common::build_error(zero),
        ConfigError::Zero("create_backoff.first")
    ));
    let inverted = Pool::builder(Scripted::new())
        .create_backoff(CreateBackoff {
            first: SECOND,
            backoff: SECOND / 2,
            ..CreateBackoff::default()
        })
        .build();
    assert!(matches!(
        crate::common::build_error(inverted),
        ConfigError::Inverted {
            low: "create_backoff.first",
            high: "create_backoff.backoff",
            ..
        }
    ));
    // Off, the pauses are not checked.
    assert!(Pool::builder(Scripted::new())
        .create_backoff(CreateBackoff::off())
        .build()
        .is_ok());
}

/// Each failed probe doubles the pause, up to the longest; a success starts over at the
/// first. With `fail_fast`, `retry_after` says each pause's length.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn pauses_double_after_failed_probes_and_start_over_after_a_success() {
    let f = Fixture::with(4, |b| {
        b.create_backoff(CreateBackoff {
            after_failures: 3,
            first: 100 * MS,
            backoff: 400 * MS,
            fail_fast: true,
        })
    });
    let clock = follow(&f.time);
    let pause = || async {
        match f.pool.get().await {
            Err(PoolError::Unavailable { retry_after }) => retry_after,
            other => panic!("paused, got {:?}", other.map(|o| o.id)),
        }
    };
    three_failures(&f).await;
    let mut lengths = Vec::new();
    for _ in 0..4 {
        let length = pause().await;
        lengths.push(length);
        tokio::time::sleep(length + 2 * MS).await;
        f.script.creates(&[Act::Fail]);
        assert!(
            matches!(f.pool.get().await, Err(PoolError::Create(Injected))),
            "the probe fails"
        );
    }
    // Each pause is between half its length and all of it: 100, 200, 400, 400.
    for (length, full) in lengths.iter().zip([100, 200, 400, 400]) {
        let full = full * MS;
        assert!(
            *length > full / 2 - 2 * MS && *length <= full,
            "{lengths:?}"
        );
    }
    let length = pause().await;
    tokio::time::sleep(length + 2 * MS).await;
    let held = f.pool.get().await.expect("the probe succeeds");
    three_failures(&f).await; // beside the object held: each creates
    let length = pause().await;
    assert!(length <= 100 * MS, "started over: {length:?}");
    drop(held);
    clock.abort();
    f.assert_balanced();
}

/// What a `get` that must create meets by default: the third failure in a row pauses
/// creations for the first pause (10 ms, jittered down to no less than half), and the fourth
/// `get` waits it out (it does not fail).
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn by_default_callers_wait_the_first_short_pause_out() {
    let f = Fixture::with(2, |b| b.create_backoff(CreateBackoff::default()));
    let clock = follow(&f.time);
    three_failures(&f).await;
    let start = Instant::now();
    let object = f.pool.get().await.expect("waited out");
    let took = start.elapsed();
    assert!(took >= 5 * MS && took <= 10 * MS + 5 * MS, "{took:?}");
    // Paused at least once (again, briefly, if the pool's clock had not quite reached the
    // pause's end when the sleep did).
    assert!(f.pool.stats().paused >= 1);
    drop(object);
    clock.abort();
    f.assert_balanced();
}

/// A probe whose creation is dropped with nowhere to finish it (no runtime: the pool was
/// built and is used outside one) reports a failure, so the next pause ends with a new
/// probe; a probe that never reported would hold creations back for good. The pool's mock
/// clock is moved by hand: nothing here sleeps.
#[test]
fn a_probe_dropped_without_a_runtime_reports_and_the_next_pause_ends() {
    let f = fixture(4, SECOND, true);
    let get_now = |f: &Fixture| match poll_once(pin!(f.pool.try_get())) {
        std::task::Poll::Ready(result) => result,
        std::task::Poll::Pending => panic!("an unscripted step waited"),
    };
    f.script.creates(&[Act::Fail, Act::Fail, Act::Fail]);
    for _ in 0..3 {
        assert!(matches!(get_now(&f), Err(PoolError::Create(Injected))));
    }
    assert!(matches!(get_now(&f), Err(PoolError::Unavailable { .. })));
    f.time.advance(SECOND);
    f.script.creates(&[Act::Hang]);
    {
        let mut probe = pin!(f.pool.get());
        assert!(
            poll_once(probe.as_mut()).is_pending(),
            "the probe's creation hangs"
        );
    } // dropped outside any runtime: the creation is dropped, its room given back
    assert_eq!(f.pool.status().size, 0);
    assert!(
        matches!(get_now(&f), Err(PoolError::Unavailable { .. })),
        "the dropped probe counted as a failure: paused again"
    );
    f.time.advance(SECOND);
    let object = get_now(&f).expect("the next pause ended with a probe that succeeds");
    assert_eq!(object.id, 0);
    drop(object);
    f.assert_balanced();
}

/// A `min_idle` top-up that finds the pool full asks the back-off nothing: had it been
/// admitted as the probe first, it would never create, never report, and creations would stay
/// held back for good.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_top_up_with_no_room_takes_no_probe() {
    let f = Fixture::with(2, |b| {
        b.min_idle(1)
            .reap_interval(None)
            .create_backoff(CreateBackoff {
                after_failures: 3,
                first: SECOND,
                backoff: SECOND,
                fail_fast: true,
            })
    });
    settle_until("prewarmed", || f.pool.status().available == 1).await;
    let held = f.pool.get().await.unwrap();
    settle_until("topped up", || f.pool.status().available == 1).await;
    let idle = f.pool.get().await.unwrap();
    three_failures_with_objects_out(&f).await;
    f.time.advance(SECOND); // the pause is over: the next creation is the probe
    drop(idle);
    f.pool.resize(1).unwrap(); // full with `held` alone
    assert_eq!(f.pool.status().size, 1);
    assert_eq!(f.pool.prewarm().await, 0, "no room: nothing to create");
    f.pool.resize(2).unwrap();
    let probe = f.pool.try_get().await.expect("the probe was not taken");
    drop((held, probe));
    f.assert_balanced();
}

/// [`three_failures`] for a pool that holds objects already (its `get`s find room beside
/// them).
async fn three_failures_with_objects_out(f: &Fixture) {
    f.script.creates(&[Act::Fail, Act::Fail, Act::Fail]);
    let before = attempts(&f.pool);
    for _ in 0..3 {
        // Room for one more beside the two out? Not with max 2: resize for the failures.
        f.pool.resize(3).unwrap();
        let error = f.pool.get().await.expect_err("the creation fails");
        assert!(matches!(error, PoolError::Create(Injected)), "{error}");
        f.pool.resize(2).unwrap();
    }
    assert_eq!(attempts(&f.pool), before + 3);
}

/// `PoolError::Unavailable`'s sentence about deadlines: a `get_timeout` shorter than the pause
/// waits the pause out and its own deadline ends it, as a timeout in step `wait` (not
/// `Unavailable` at once); the pool's `connection_timeout` is a wait deadline like
/// `wait_timeout`, so a pause past what is left of it is `Unavailable` at once.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_get_timeout_waits_a_pause_until_its_own_deadline() {
    let backoff = CreateBackoff {
        after_failures: 3,
        first: SECOND,
        backoff: SECOND,
        fail_fast: false,
    };
    let f = Fixture::with(4, |b| b.create_backoff(backoff));
    let clock = follow(&f.time);
    three_failures(&f).await;
    let start = Instant::now();
    let error = f
        .pool
        .get_timeout(100 * MS)
        .await
        .expect_err("the deadline passes during the pause");
    assert!(
        matches!(error, PoolError::Timeout { step: Step::Wait, after } if after == 100 * MS),
        "{error}"
    );
    assert_eq!(start.elapsed(), 100 * MS);
    clock.abort();

    let f = Fixture::with(4, |b| {
        b.create_backoff(backoff).connection_timeout(Some(100 * MS))
    });
    let clock = follow(&f.time);
    three_failures(&f).await;
    let start = Instant::now();
    let error = f
        .pool
        .get()
        .await
        .expect_err("the pause outlasts the deadline");
    assert!(matches!(error, PoolError::Unavailable { .. }), "{error}");
    assert_eq!(start.elapsed(), Duration::ZERO);
    clock.abort();
}
