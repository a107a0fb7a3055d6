//! What a bb8 user reads and relies on in the managed pool: the statistics bb8 0.9 keeps
//! (`get_started`, `get_direct`, `get_waited`, `get_timed_out`, `get_wait_time`,
//! `connections_created`, `connections_closed_{broken,invalid,max_lifetime,idle_timeout}`),
//! under slotpool's names, and `has_broken` asked as an object comes back. Time is tokio's
//! paused clock and a mock clock (`slotpool::Clock::mock`); nothing sleeps.

use std::time::Duration;

use tokio::time::Instant;

use crate::common::managed::{Act, Fixture, IDLE};
use crate::common::{run_spawned, settle_until};
use slotpool::managed::{PoolError, Step};

const SECOND: Duration = Duration::from_secs(1);

/// `gets` counts every kind of `get`; `gets_direct` those served without waiting (idle or
/// new); `gets_waited` those served after a wait; `gets_timed_out` those a deadline ended.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn gets_are_counted_by_how_they_ended() {
    let f = Fixture::with(1, |b| b.wait_timeout(Some(Duration::from_secs(2))));
    let first = f.pool.get().await.unwrap(); // direct, new
    drop(first);
    let held = f.pool.get().await.unwrap(); // direct, idle
    let stats = f.pool.stats();
    assert_eq!(
        (
            stats.gets,
            stats.gets_direct,
            stats.gets_waited,
            stats.gets_timed_out
        ),
        (2, 2, 0, 0),
        "{stats:?}"
    );
    // A waiter served by the return, one timed out, a try refused, a `get_timeout` expired.
    let waiter = {
        let pool = f.pool.clone();
        tokio::spawn(async move { drop(pool.get().await.unwrap()) })
    };
    run_spawned().await;
    assert_eq!(f.pool.stats().gets, 3, "counted once it waits");
    drop(held);
    waiter.await.unwrap();
    let held = f.pool.get().await.unwrap(); // direct
    let error = f.pool.get().await.unwrap_err();
    assert!(
        matches!(
            error,
            PoolError::Timeout {
                step: Step::Wait,
                ..
            }
        ),
        "{error}"
    );
    assert!(matches!(f.pool.try_get().await, Err(PoolError::NoCapacity)));
    let error = f
        .pool
        .get_timeout(Duration::from_secs(1))
        .await
        .unwrap_err();
    assert!(
        matches!(
            error,
            PoolError::Timeout {
                step: Step::Wait,
                ..
            }
        ),
        "{error}"
    );
    let stats = f.pool.stats();
    assert_eq!(
        (
            stats.gets,
            stats.gets_direct,
            stats.gets_waited,
            stats.gets_timed_out
        ),
        (7, 3, 1, 2),
        "{stats:?}"
    );
    assert_eq!(
        stats.waits, 3,
        "the waiter, the timed-out get and the get_timeout"
    );
    drop(held);
    f.assert_balanced();
}

/// A `get` that creates counts as started while it creates (it is under way), and as direct
/// once it hands the new object out; one whose creation fails is started and not completed.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_get_that_creates_is_started_while_it_creates() {
    let f = Fixture::new(2);
    f.script.creates(&[Act::Hang, Act::Fail]);
    let creating = {
        let pool = f.pool.clone();
        tokio::spawn(async move { pool.get().await.map(drop) })
    };
    run_spawned().await;
    let stats = f.pool.stats();
    assert_eq!((stats.gets, stats.gets_direct), (1, 0), "{stats:?}");
    f.script.create_gate.add_permits(1);
    creating.await.unwrap().unwrap();
    let stats = f.pool.stats();
    assert_eq!((stats.gets, stats.gets_direct), (1, 1), "{stats:?}");
    // The idle object is taken by the first get; the second creates and fails.
    let held = f.pool.get().await.unwrap();
    assert!(matches!(f.pool.get().await, Err(PoolError::Create(_))));
    let stats = f.pool.stats();
    assert_eq!(
        (
            stats.gets,
            stats.gets_direct,
            stats.gets_waited,
            stats.gets_timed_out
        ),
        (3, 2, 0, 0),
        "{stats:?}"
    );
    drop(held);
    f.assert_balanced();
}

/// `has_broken` is asked as an object comes back: a broken one is dropped then (counted in
/// `broken`, its room given back), not kept idle until its next checkout; a panic in it
/// counts as broken and is contained.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn an_object_broken_at_return_is_dropped_then() {
    let f = Fixture::new(2);
    f.script.returns(&[Act::Reject, Act::Panic]);
    let a = f.pool.get().await.unwrap();
    let a_id = a.id;
    drop(a);
    let stats = f.pool.stats();
    assert_eq!(
        (stats.broken, stats.status.size, stats.status.available),
        (1, 0, 0),
        "dropped as it came back: {stats:?}"
    );
    assert!(f.ledger.was_dropped(a_id));
    let b = f.pool.get().await.unwrap();
    assert_ne!(b.id, a_id, "a new object");
    drop(b);
    let stats = f.pool.stats();
    assert_eq!(
        (stats.broken, stats.panics, stats.status.size),
        (2, 1, 0),
        "{stats:?}"
    );
    // Not broken: kept idle.
    drop(f.pool.get().await.unwrap());
    assert_eq!(f.pool.status().available, 1);
    f.assert_balanced();
}

/// bb8's `connections_closed_*` are `discarded` (a recycle rejected it: `invalid`), `broken`,
/// `expired` (`max_lifetime`) and `reaped` (`idle_timeout`).
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn objects_closed_are_counted_by_why() {
    let f = Fixture::with(4, |b| b.max_lifetime(Some(Duration::from_secs(600))));
    f.script.returns(&[Act::Reject]);
    let mut objects = Vec::new();
    for _ in 0..4 {
        objects.push(f.pool.get().await.unwrap());
    }
    drop(objects); // The first (A) comes back broken; B, C, D go idle.
    f.time.advance(IDLE / 2);
    // B is recycled at checkout and rejected (invalid); C is handed out and comes back.
    f.script.recycles(&[Act::Reject]);
    drop(f.pool.get().await.unwrap());
    f.time.advance(IDLE / 2 + Duration::from_secs(1));
    assert_eq!(f.pool.reap(f.time.now()), 1, "D, idle past its timeout");
    f.time.advance(Duration::from_secs(600));
    // C is past its lifetime: dropped at checkout, and a new object made.
    drop(f.pool.get().await.unwrap());
    let stats = f.pool.stats();
    assert_eq!(
        (
            stats.created,
            stats.discarded,
            stats.broken,
            stats.reaped,
            stats.expired
        ),
        (5, 1, 1, 1, 1),
        "{stats:?}"
    );
    settle_until("balanced", || f.pool.status().in_use == 0).await;
    f.assert_balanced();
}

/// bb8's `connection_timeout`: one deadline over the whole `get`, waiting and creating
/// together. A `get` that waits 1.5 s for room and then creates is cut short at 2 s in all,
/// in step `create`; its creation goes on off the caller and the object goes idle. The
/// pool's `wait_timeout` (10 s) is not what bounds it.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn connection_timeout_bounds_waiting_and_creating_together() {
    let f = Fixture::with(1, |b| {
        b.connection_timeout(Some(2 * SECOND))
            .wait_timeout(Some(10 * SECOND))
    });
    let held = f.pool.get().await.unwrap();
    f.script.creates(&[Act::Hang]);
    let start = Instant::now();
    let get = {
        let pool = f.pool.clone();
        tokio::spawn(async move { pool.get().await.map(drop) })
    };
    tokio::time::sleep(SECOND + SECOND / 2).await;
    // The holder takes the object out of the pool: the waiter gets its room and creates.
    slotpool::managed::Object::take(held);
    let error = get.await.unwrap().unwrap_err();
    assert!(
        matches!(error, PoolError::Timeout { step: Step::Create, after } if after == 2 * SECOND),
        "{error}"
    );
    assert_eq!(start.elapsed(), 2 * SECOND);
    assert_eq!(f.pool.stats().gets_timed_out, 1);
    // The creation goes on off the caller.
    f.script.create_gate.add_permits(1);
    settle_until("created off the caller", || {
        f.pool.stats().created_off_caller == 1
    })
    .await;
    assert_eq!(f.pool.status().available, 1);
}

/// A `get` under `connection_timeout` that only waits fails at the deadline in step `wait`,
/// with the whole-get deadline as `after`; one that finds an idle object arms nothing.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn connection_timeout_bounds_a_wait() {
    let f = Fixture::with(1, |b| b.connection_timeout(Some(2 * SECOND)));
    drop(f.pool.get().await.unwrap());
    let held = f.pool.get().await.unwrap(); // idle, no timer
    let start = Instant::now();
    let error = f.pool.get().await.unwrap_err();
    assert!(
        matches!(error, PoolError::Timeout { step: Step::Wait, after } if after == 2 * SECOND),
        "{error}"
    );
    assert_eq!(start.elapsed(), 2 * SECOND);
    drop(held);
    f.assert_balanced();
}

/// A recycle that has to wait runs within the whole-get deadline too: past it the object is
/// dropped (half-recycled) and the `get` fails in step `recycle`, even though the recycle's
/// own deadline (30 s) is far off.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn connection_timeout_bounds_a_recycle() {
    let f = Fixture::with(1, |b| b.connection_timeout(Some(2 * SECOND)));
    drop(f.pool.get().await.unwrap());
    f.script.recycles(&[Act::Hang]);
    let start = Instant::now();
    let error = f.pool.get().await.unwrap_err();
    assert!(
        matches!(error, PoolError::Timeout { step: Step::Recycle, after } if after == 2 * SECOND),
        "{error}"
    );
    assert_eq!(start.elapsed(), 2 * SECOND);
    let stats = f.pool.stats();
    assert_eq!(
        (stats.discarded, stats.status.size, stats.gets_timed_out),
        (1, 0, 1),
        "{stats:?}"
    );
    f.assert_balanced();
}

/// A zero `connection_timeout` is refused by name.
#[test]
fn a_zero_connection_timeout_is_refused() {
    let error = slotpool::managed::Pool::builder(crate::common::managed::Scripted::new())
        .connection_timeout(Some(Duration::ZERO))
        .build()
        .unwrap_err();
    assert!(
        matches!(error, slotpool::ConfigError::Zero("connection_timeout")),
        "{error}"
    );
}

// --- held too long ------------------------------------------------------------------------

/// A checkout held past `held_too_long` is reported once while still held, with the call
/// site of its `get` and its age (a `tracing` warning, counted in `held_too_long`), and again
/// when it comes back; its hold time adds up in `hold_time`. On the mock clock, looked at by
/// `reap` (no background reaper here).
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_checkout_held_too_long_is_reported_with_its_call_site() {
    let (logs, _guard) = crate::common::logs::capture_logs();
    let f = Fixture::with(2, |b| b.held_too_long(Some(10 * SECOND)));
    let short = f.pool.get().await.unwrap();
    let line = line!() + 1;
    let long = f.pool.get().await.unwrap();
    let site = format!("{}:{line}", file!());
    f.time.advance(5 * SECOND);
    drop(short); // held 5 s: under the threshold, never reported
    f.pool.reap(f.time.now());
    assert_eq!(f.pool.stats().held_too_long, 0);
    f.time.advance(6 * SECOND);
    f.pool.reap(f.time.now());
    assert_eq!(f.pool.stats().held_too_long, 1, "reported while held");
    let text = logs.text();
    assert!(
        text.contains("held too long") && text.contains(&site),
        "{text}"
    );
    assert!(text.contains("held_for=11s"), "its age: {text}");
    f.time.advance(10 * SECOND);
    f.pool.reap(f.time.now());
    assert_eq!(f.pool.stats().held_too_long, 1, "reported once");
    drop(long);
    let text = logs.text();
    assert!(
        text.contains("came back") && text.contains("held_for=21s"),
        "reported again as it comes back: {text}"
    );
    let stats = f.pool.stats();
    assert_eq!(stats.hold_time, 26 * SECOND, "5 s and 21 s: {stats:?}");
    f.assert_balanced();
}

/// Every way a checkout ends ends its hold: a take, a broken return, a return past the
/// lifetime; none is reported afterwards, whatever slot it left.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn every_end_of_a_checkout_ends_its_hold() {
    let f = Fixture::with(3, |b| {
        b.held_too_long(Some(10 * SECOND))
            .max_lifetime(Some(30 * SECOND))
    });
    f.script.returns(&[Act::Reject]);
    let taken = f.pool.get().await.unwrap();
    let broken = f.pool.get().await.unwrap();
    let old = f.pool.get().await.unwrap();
    f.time.advance(16 * SECOND);
    drop(slotpool::managed::Object::take(taken));
    drop(broken);
    f.time.advance(20 * SECOND);
    drop(old);
    f.pool.reap(f.time.now());
    let stats = f.pool.stats();
    assert_eq!(
        (
            stats.held_too_long,
            stats.detached,
            stats.broken,
            stats.expired
        ),
        (0, 1, 1, 1),
        "{stats:?}"
    );
    assert_eq!(
        stats.hold_time,
        68 * SECOND,
        "16 s, 16 s and 36 s: {stats:?}"
    );
}

/// A hold runs from the checkout: an idle object that its recycle then rejects leaves the
/// pool without a hold behind it (its slot, retired, forgets the note), and only the object
/// the `get` hands out is watched.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn an_object_discarded_at_checkout_leaves_no_hold() {
    let f = Fixture::with(2, |b| b.held_too_long(Some(10 * SECOND)));
    let (a, b) = (f.pool.get().await.unwrap(), f.pool.get().await.unwrap());
    drop((a, b)); // slots 0 and 1 idle
    f.script.recycles(&[Act::Reject]);
    let held = f.pool.get().await.unwrap(); // slot 0 rejected, slot 1 handed out
    assert_eq!(slotpool::managed::Object::slot(&held), 1);
    f.time.advance(11 * SECOND);
    f.pool.reap(f.time.now());
    let stats = f.pool.stats();
    assert_eq!((stats.held_too_long, stats.discarded), (1, 1), "{stats:?}");
    drop(held);
}

/// Off by default: nothing is reported and no hold time is kept.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn holds_are_not_watched_by_default() {
    let f = Fixture::new(1);
    let held = f.pool.get().await.unwrap();
    f.time.advance(3_600 * SECOND);
    f.pool.reap(f.time.now());
    drop(held);
    let stats = f.pool.stats();
    assert_eq!((stats.held_too_long, stats.hold_time), (0, Duration::ZERO));
}

/// The background reaper looks at a quarter of the threshold: a hold is reported between one
/// and one and a quarter thresholds after its checkout (here on tokio's paused clock, which
/// the pool's clock follows).
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn the_background_reaper_reports_within_a_quarter_threshold() {
    let time = crate::common::MockTime::new();
    let pool = slotpool::managed::Pool::builder(crate::common::managed::Scripted::new())
        .held_too_long(Some(8 * SECOND))
        .clock(time.clock())
        .build()
        .unwrap();
    let held = pool.get().await.unwrap();
    let mut waited = Duration::ZERO;
    while pool.stats().held_too_long == 0 {
        tokio::time::sleep(SECOND / 2).await;
        time.advance(SECOND / 2);
        waited += SECOND / 2;
        assert!(waited <= 10 * SECOND, "not reported after {waited:?}");
    }
    assert!(waited >= 8 * SECOND, "reported early, after {waited:?}");
    drop(held);
}

/// bb8's `State` and `Statistics`, field for field, from `Pool::state`: the numbers of
/// `Pool::stats` under bb8's names; `get_owned` is `get`; `connection_timeout` takes bb8's
/// `Duration` as well as an `Option`.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn state_is_bb8s_shape_of_the_stats() {
    let f = Fixture::with(2, |b| {
        b.wait_timeout(Some(SECOND))
            .connection_timeout(Duration::from_secs(5))
    });
    f.script.returns(&[Act::Reject]);
    let a = f.pool.get_owned().await.unwrap();
    let b = f.pool.get().await.unwrap();
    drop(a); // broken
    let _ = f.pool.get_timeout(SECOND).await.unwrap(); // a new object, direct
    drop(b);
    let (state, stats) = (f.pool.state(), f.pool.stats());
    assert_eq!(
        (state.connections, state.idle_connections),
        (stats.status.size as u32, stats.status.available as u32)
    );
    let s = state.statistics;
    assert_eq!(
        (s.get_started, s.get_direct, s.get_waited, s.get_timed_out),
        (
            stats.gets,
            stats.gets_direct,
            stats.gets_waited,
            stats.gets_timed_out
        )
    );
    assert_eq!((s.get_started, s.get_direct), (3, 3));
    assert_eq!(s.get_wait_time, stats.wait_time);
    assert_eq!(
        (
            s.connections_created,
            s.connections_closed_broken,
            s.connections_closed_invalid,
            s.connections_closed_max_lifetime,
            s.connections_closed_idle_timeout
        ),
        (
            stats.created,
            stats.broken,
            stats.discarded,
            stats.expired,
            stats.reaped
        )
    );
    assert_eq!((s.connections_created, s.connections_closed_broken), (3, 1));
    assert_eq!((s.completed_gets(), s.pending_gets()), (3, 0));
}
