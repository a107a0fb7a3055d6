//! Documented behaviours of the managed pool that no other test pinned (see
//! `docs/pinned.md`, section "managed::Pool"): the builder's defaults, the panic log, the
//! hand-over a caller that never waited cannot overtake, and the reaper's treatment of
//! `min_idle` objects past their lifetime. Time is tokio's paused clock and a mock `quanta`
//! clock; nothing sleeps.

use std::time::Duration;

use crate::common::logs::capture_logs;
use crate::common::managed::{Act, Fixture, Scripted};
use crate::common::{run_spawned, settle_until, MockTime};
use slotpool::managed::{Pool, PoolError, Step, Timeouts};

const MS: Duration = Duration::from_millis(1);
const SECOND: Duration = Duration::from_secs(1);

/// Lets the pool's task run, moves tokio's paused clock by `by`, and lets it run again.
async fn tick(by: Duration) {
    run_spawned().await;
    tokio::time::advance(by).await;
    run_spawned().await;
}

/// Builder, `max_size`: "Default: four per CPU core (as deadpool)".
#[test]
fn the_default_size_is_four_per_cpu_core() {
    let pool = Pool::builder(Scripted::new())
        .reap_interval(None)
        .build()
        .unwrap();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    assert_eq!(pool.status().max_size, 4 * cores);
}

/// Builder, `wait_timeout`, `create_timeout`, `recycle_timeout`: "Default: none", "30 s",
/// "30 s".
#[test]
fn the_default_deadlines_are_no_wait_bound_and_30_s_to_create_or_recycle() {
    let pool = Pool::builder(Scripted::new())
        .reap_interval(None)
        .build()
        .unwrap();
    assert_eq!(
        pool.timeouts(),
        Timeouts {
            wait: None,
            create: Some(30 * SECOND),
            recycle: Some(30 * SECOND),
        }
    );
}

/// Builder, `idle_timeout`: "Default: 10 min" (on the injected clock; without a background
/// reaper the return stamp is exact).
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn the_default_idle_timeout_is_10_minutes() {
    let time = MockTime::new();
    let pool = Pool::builder(Scripted::new())
        .max_size(2)
        .reap_interval(None)
        .clock(time.clock())
        .build()
        .unwrap();
    drop(pool.get().await.unwrap());
    time.advance(10 * 60 * SECOND - MS);
    assert_eq!(pool.reap(time.now()), 0, "not idle 10 min yet");
    time.advance(MS);
    assert_eq!(pool.reap(time.now()), 1, "idle 10 min");
    assert_eq!(pool.stats().reaped, 1);
}

/// Builder, `reap_interval`: "How often the background reaper runs `Pool::reap`. Default:
/// every 30 s".
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn the_default_reaper_runs_every_30_seconds() {
    let time = MockTime::new();
    let pool = Pool::builder(Scripted::new())
        .max_size(2)
        .idle_timeout(SECOND)
        .clock(time.clock())
        .build()
        .unwrap();
    drop(pool.get().await.unwrap());
    run_spawned().await;
    // Idle far longer than the timeout plus a stamp's staleness (one reap interval).
    time.advance(120 * SECOND);
    tick(30 * SECOND - MS).await;
    assert_eq!(pool.status().size, 1, "no reaper pass before 30 s");
    tick(MS).await;
    assert_eq!(pool.status().size, 0, "reaped at the 30 s pass");
    assert_eq!(pool.stats().reaped, 1);
}

/// Builder, `min_idle` "Default: 0" and `max_lifetime` "Default: none": a pool built with
/// the defaults creates nothing on its own, and an object however old is handed out again.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn by_default_nothing_is_kept_idle_and_nothing_expires() {
    let time = MockTime::new();
    let pool = Pool::builder(Scripted::new())
        .max_size(2)
        .clock(time.clock())
        .build()
        .unwrap();
    tick(60 * SECOND).await;
    assert_eq!(pool.status().size, 0, "min_idle 0: nothing created");
    let first = pool.get().await.unwrap().id;
    time.advance(Duration::from_secs(10 * 365 * 24 * 3600));
    let again = pool.get().await.unwrap();
    assert_eq!(
        again.id, first,
        "no lifetime: the old object goes out again"
    );
    assert_eq!(pool.stats().expired, 0);
}

/// Module docs, failure model: a panic of user code is "logged once": one `ERROR` event that
/// names where (the manager's `create`) and what it said, counted in `Stats::panics`.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_panic_of_user_code_is_logged_once_as_an_error() {
    let f = Fixture::new(2);
    let (logs, _guard) = capture_logs();
    f.script.creates(&[Act::Panic]);
    let error = f.pool.get().await.map(drop).unwrap_err();
    assert!(
        matches!(
            error,
            PoolError::Panicked {
                step: Step::Create,
                ..
            }
        ),
        "{error}"
    );
    let text = logs.text();
    let errors: Vec<&str> = text
        .lines()
        .filter(|line| line.contains("ERROR") && line.contains("create panics"))
        .collect();
    assert_eq!(errors.len(), 1, "{text}");
    assert!(errors[0].contains("manager create"), "{text}");
    assert_eq!(f.pool.stats().panics, 1);
    f.assert_balanced();
}

/// The same sentence read strictly: the panic's message appears in one log event only. (It
/// appeared in two: the `ERROR` above and the `WARN` "creating an object failed" that every
/// other failed creation logs with its error, whose `Display` carries the panic's message.)
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_panic_in_create_appears_in_one_log_event_only() {
    let f = Fixture::new(2);
    let (logs, _guard) = capture_logs();
    f.script.creates(&[Act::Panic]);
    assert!(f.pool.get().await.is_err());
    let text = logs.text();
    assert_eq!(text.matches("create panics").count(), 1, "{text}");
}

/// Module docs, slow path: "A return that finds waiters hands its slot (with the object in
/// it) straight to the oldest one; a caller that never waited cannot take it first."
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_caller_that_never_waited_cannot_take_a_returned_object_first() {
    let f = Fixture::new(1);
    let held = f.pool.get().await.unwrap();
    let waiter = tokio::spawn({
        let pool = f.pool.clone();
        async move { pool.get().await.map(|object| object.id) }
    });
    run_spawned().await;
    assert_eq!(f.pool.status().waiting, 1);
    drop(held);
    // The waiter has not run since: the object is its own already.
    assert!(
        matches!(f.pool.try_get().await, Err(PoolError::NoCapacity)),
        "a caller that never waited took the returned object"
    );
    assert_eq!(waiter.await.unwrap().unwrap(), 0);
    assert_eq!(f.ledger.made(), 1);
    f.assert_balanced();
}

/// Builder, `min_idle`: "the reaper does not close idle objects below it (objects past
/// `max_lifetime` are still replaced)".
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn the_reaper_replaces_a_min_idle_object_past_its_lifetime() {
    let f = Fixture::with(2, |b| b.min_idle(1).max_lifetime(Some(30 * SECOND)));
    assert_eq!(f.pool.prewarm().await, 1);
    f.time.advance(31 * SECOND);
    assert_eq!(f.pool.reap(f.time.now()), 1, "expired, min_idle or not");
    assert!(f.ledger.was_dropped(0));
    settle_until("replaced", || f.pool.status().available == 1).await;
    let stats = f.pool.stats();
    assert_eq!((stats.expired, stats.reaped, stats.created), (1, 0, 2));
    f.assert_balanced();
}

/// Module docs, failure model: a panic in `detach` or an object's destructor "fails no caller
/// (... a reaper pass ... carries on)": every idle object past the timeout is still dropped,
/// each panic counted.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_reaper_pass_carries_on_past_panics_in_detach_and_destructors() {
    let f = Fixture::new(3);
    let objects = [
        f.pool.get().await.unwrap(),
        f.pool.get().await.unwrap(),
        f.pool.get().await.unwrap(),
    ];
    drop(objects);
    f.ledger.panic_on_detach(0);
    f.ledger.panic_on_drop(1);
    f.time.advance(crate::common::managed::IDLE);
    assert_eq!(f.pool.reap(f.time.now()), 3);
    assert!((0..3).all(|id| f.ledger.was_dropped(id)));
    let stats = f.pool.stats();
    assert_eq!((stats.reaped, stats.panics), (3, 2), "{stats:?}");
    f.assert_balanced();
}

/// Builder, `CreateBackoff`: "A `get` that needs a new object while creations are paused
/// gives its room back (to a waiter, or for an object that comes back) and sleeps until the
/// pause ends, then tries again". Here the room is taken by an object added during the pause,
/// which the sleeping `get` is then served with, creating nothing.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_get_paused_by_the_backoff_gives_its_room_back_while_it_sleeps() {
    use slotpool::managed::{CreateBackoff, Manager};
    use std::pin::pin;

    let f = Fixture::with(1, |b| {
        b.create_backoff(CreateBackoff {
            after_failures: 3,
            first: SECOND,
            backoff: SECOND,
            fail_fast: false,
        })
    });
    // The mock clock follows tokio's paused one.
    let follow = tokio::spawn({
        let time = f.time.clone();
        async move {
            loop {
                tokio::time::sleep(MS).await;
                time.advance(MS);
            }
        }
    });
    let spare = f.pool.manager().create().await.unwrap();
    f.script.creates(&[Act::Fail, Act::Fail, Act::Fail]);
    for _ in 0..3 {
        assert!(matches!(f.pool.get().await, Err(PoolError::Create(_))));
    }
    let attempts = f.pool.stats().create_failures;

    let mut paused = pin!(f.pool.get());
    assert!(crate::common::poll_once(paused.as_mut()).is_pending());
    assert_eq!(f.pool.status().size, 0, "the sleeping get holds no room");
    assert!(f.pool.add(spare).is_ok(), "the room is there for an object");

    let object = paused.await.unwrap();
    assert_eq!(object.id, 0, "served with the object that took the room");
    let stats = f.pool.stats();
    assert_eq!((stats.create_failures, stats.created), (attempts, 1));
    drop(object);
    follow.abort();
    f.assert_balanced();
}

/// Builder, `error_sink`: "a panic in it is counted and logged".
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_panic_in_the_error_sink_is_counted_and_logged() {
    let (logs, _guard) = capture_logs();
    let f = Fixture::with(2, |b| {
        b.min_idle(1)
            .error_sink(|_: &PoolError<crate::common::managed::Injected>| {
                crate::common::panics::inject("the error sink")
            })
    });
    f.script.creates(&[Act::Fail]);
    settle_until("the sink's panic counted", || f.pool.stats().panics == 1).await;
    let text = logs.text();
    let errors: Vec<&str> = text
        .lines()
        .filter(|line| line.contains("ERROR") && line.contains("the error sink exploded"))
        .collect();
    assert_eq!(errors.len(), 1, "{text}");
    assert!(errors[0].contains("place=\"error sink\""), "{text}");
}
