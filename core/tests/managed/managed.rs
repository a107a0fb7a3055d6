//! The managed pool's contract, through its public API: create and reuse (lowest slot
//! first), waiting (FIFO, hand-over), timeouts per step, recycling and its policy, rejection,
//! hooks, detaching, lifetimes, idle reaping, `min_idle`, resizing, `retain`, closing, typed
//! configuration errors and contained panics. Time is tokio's paused clock and a mock
//! clock (`slotpool::Clock::mock`); nothing sleeps.

use std::pin::pin;
use std::sync::atomic::Ordering;
use std::task::Poll;
use std::time::Duration;

use crate::common::managed::{Act, Conn, Fixture, Scripted, IDLE};
use crate::common::{build_error, poll_once, run_spawned, settle_until};
use slotpool::managed::{Hook, HookError, Meta, Object, Pool, PoolError, Recycle, Step};
use slotpool::ConfigError;

fn id(object: &Object<Scripted>) -> u64 {
    object.id
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn objects_are_created_on_demand_and_reused_lowest_slot_first() {
    let f = Fixture::new(4);
    let (a, b, c) = (
        f.pool.get().await.unwrap(),
        f.pool.get().await.unwrap(),
        f.pool.get().await.unwrap(),
    );
    assert_eq!((id(&a), id(&b), id(&c)), (0, 1, 2));
    assert_eq!(
        (Object::slot(&a), Object::slot(&b), Object::slot(&c)),
        (0, 1, 2)
    );
    drop((c, a, b));
    // The lowest slot's object comes back first, whatever the order of return.
    let again = f.pool.get().await.unwrap();
    assert_eq!(id(&again), 0);
    assert_eq!(again.uses, 1, "recycled once (the default policy: always)");
    let status = f.pool.status();
    assert_eq!(
        (
            status.max_size,
            status.size,
            status.available,
            status.in_use
        ),
        (4, 3, 2, 1)
    );
    drop(again);
    assert_eq!(f.ledger.made(), 3);
    f.assert_balanced();
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn try_get_never_waits() {
    let f = Fixture::new(1);
    let held = f.pool.try_get().await.unwrap();
    assert!(matches!(f.pool.try_get().await, Err(PoolError::NoCapacity)));
    drop(held);
    assert_eq!(id(&f.pool.try_get().await.unwrap()), 0);
    f.pool.close();
    assert!(matches!(f.pool.try_get().await, Err(PoolError::Closed)));
}

/// Waiters are served in the order they came, each by a hand-over of the returned object.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn waiters_are_served_first_come_first_served() {
    let f = Fixture::new(1);
    let held = f.pool.get().await.unwrap();
    let order = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for n in 0..3 {
        let (pool, order) = (f.pool.clone(), std::sync::Arc::clone(&order));
        tasks.push(tokio::spawn(async move {
            let object = pool.get().await.unwrap();
            order.lock().unwrap().push(n);
            drop(object);
        }));
        run_spawned().await;
    }
    assert_eq!(f.pool.status().waiting, 3);
    drop(held);
    crate::common::join_all(tasks).await;
    assert_eq!(*order.lock().unwrap(), [0, 1, 2]);
    assert_eq!(f.pool.stats().waits, 3);
    assert_eq!(f.ledger.made(), 1, "one object served everyone");
    f.assert_balanced();
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn wait_timeout_fails_in_step_wait() {
    let f = Fixture::with(1, |b| b.wait_timeout(Some(Duration::from_secs(2))));
    let held = f.pool.get().await.unwrap();
    let error = f.pool.get().await.unwrap_err();
    assert!(
        matches!(error, PoolError::Timeout { step: Step::Wait, after } if after == Duration::from_secs(2)),
        "{error}"
    );
    assert!(error.reach().retry_is_safe());
    assert_eq!(
        f.pool.status().waiting,
        0,
        "the timed-out waiter left the queue"
    );
    drop(held);
    assert!(f.pool.try_get().await.is_ok());
}

/// `get_timeout` says which step was running when its deadline passed.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn get_timeout_names_the_step_it_expired_in() {
    let f = Fixture::with(1, |b| b.recycle_timeout(None).create_timeout(None));
    let second = Duration::from_secs(1);

    f.script.creates(&[Act::Hang]);
    let error = f.pool.get_timeout(second).await.unwrap_err();
    assert_eq!(error.timed_out_in(), Some(Step::Create), "{error}");
    // The creation goes on off the caller; release it and it lands idle.
    f.script.create_gate.add_permits(1);
    settle_until("the creation finished off its caller", || {
        f.pool.status().available == 1
    })
    .await;
    assert_eq!(f.pool.stats().created_off_caller, 1);

    let held = f.pool.get().await.unwrap();
    let error = f.pool.get_timeout(second).await.unwrap_err();
    assert_eq!(error.timed_out_in(), Some(Step::Wait), "{error}");
    drop(held);

    f.script.recycles(&[Act::Hang]);
    let error = f.pool.get_timeout(second).await.unwrap_err();
    assert_eq!(error.timed_out_in(), Some(Step::Recycle), "{error}");
    // A recycle cut short drops its object (its state is unknown) and frees its room.
    assert_eq!(f.pool.stats().discarded, 1);
    assert_eq!(f.pool.status().size, 0);
    f.assert_balanced();
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_failed_create_gives_its_room_back() {
    let f = Fixture::new(1);
    f.script.creates(&[Act::Fail]);
    let error = f.pool.get().await.unwrap_err();
    assert!(matches!(error, PoolError::Create(_)), "{error}");
    assert!(error.reach().retry_is_safe());
    assert_eq!(f.pool.status().size, 0);
    assert_eq!(f.pool.stats().create_failures, 1);
    assert_eq!(id(&f.pool.get().await.unwrap()), 0, "the retry creates");
    f.assert_balanced();
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn create_timeout_fails_in_step_create() {
    let f = Fixture::with(1, |b| b.create_timeout(Some(Duration::from_secs(5))));
    f.script.creates(&[Act::Hang]);
    let error = f.pool.get().await.unwrap_err();
    assert!(
        matches!(error, PoolError::Timeout { step: Step::Create, after } if after == Duration::from_secs(5)),
        "{error}"
    );
    assert_eq!(f.pool.status().size, 0, "the room came back");
    assert!(f.pool.get().await.is_ok());
}

/// A rejected or failed recycle drops that object and hands out the next one (or a new one);
/// the caller never sees it.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn rejected_objects_are_dropped_and_the_get_goes_on() {
    let f = Fixture::new(3);
    let objects: Vec<_> = vec![f.pool.get().await.unwrap(), f.pool.get().await.unwrap()];
    drop(objects);
    f.script.recycles(&[Act::Reject, Act::Fail]);
    let object = f.pool.get().await.unwrap();
    assert_eq!(
        id(&object),
        2,
        "both idle objects were rejected; a new one was created"
    );
    assert!(f.ledger.was_dropped(0) && f.ledger.was_dropped(1));
    assert_eq!(
        f.ledger.detaches.load(Ordering::SeqCst),
        2,
        "detached as they left"
    );
    let stats = f.pool.stats();
    assert_eq!((stats.discarded, stats.recycled), (2, 0));
    drop(object);
    f.assert_balanced();
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_recycle_past_its_timeout_drops_the_object() {
    let f = Fixture::with(2, |b| b.recycle_timeout(Some(Duration::from_secs(3))));
    drop(f.pool.get().await.unwrap());
    f.script.recycles(&[Act::Hang]);
    let object = f.pool.get().await.unwrap();
    assert_eq!(
        id(&object),
        1,
        "the hung recycle was given up; a new object came"
    );
    assert_eq!(f.pool.stats().discarded, 1);
    drop(object);
    f.assert_balanced();
}

/// `Recycle::IdleLongerThan` checks only objects that sat idle long enough (idle time on the
/// pool's mock clock).
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn recycling_only_after_an_idle_threshold() {
    let f = Fixture::with(1, |b| {
        b.recycle(Recycle::IdleLongerThan(Duration::from_secs(5)))
    });
    drop(f.pool.get().await.unwrap());
    f.time.advance(Duration::from_secs(1));
    drop(f.pool.get().await.unwrap());
    assert_eq!(f.ledger.recycles.load(Ordering::SeqCst), 0, "hot: no check");
    f.time.advance(Duration::from_secs(6));
    let object = f.pool.get().await.unwrap();
    assert_eq!(
        f.ledger.recycles.load(Ordering::SeqCst),
        1,
        "idle 6 s: checked"
    );
    assert_eq!(Object::meta(&object).recycle_count(), 1);
    drop(object);

    let never = Fixture::with(1, |b| b.recycle(Recycle::Never));
    drop(never.pool.get().await.unwrap());
    drop(never.pool.get().await.unwrap());
    assert_eq!(never.ledger.recycles.load(Ordering::SeqCst), 0);
}

/// `IdleLongerThan` measures idleness from the object's last return, not its creation: an
/// object held for 10 s and returned 1 s ago is hot (`Meta::returned` says when it came back).
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn the_idle_threshold_counts_from_the_last_return() {
    let f = Fixture::with(1, |b| {
        b.recycle(Recycle::IdleLongerThan(Duration::from_secs(5)))
    });
    let object = f.pool.get().await.unwrap();
    assert_eq!(Object::meta(&object).returned(), None, "never returned yet");
    f.time.advance(Duration::from_secs(10));
    let returned_at = f.time.now();
    drop(object);
    f.time.advance(Duration::from_secs(1));
    let object = f.pool.get().await.unwrap();
    assert_eq!(
        f.ledger.recycles.load(Ordering::SeqCst),
        0,
        "returned 1 s ago: hot, not checked"
    );
    let meta = Object::meta(&object);
    assert_eq!(meta.returned(), Some(returned_at));
    assert_eq!(meta.idle(f.time.now()), Duration::from_secs(1));
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn hooks_run_in_order_and_may_reject() {
    let f = Fixture::with(2, |b| {
        b.post_create(Hook::sync_fn(|conn: &mut Conn, _: &Meta| {
            conn.uses = 100;
            Ok(())
        }))
        .pre_recycle(Hook::sync_fn(|conn: &mut Conn, _: &Meta| {
            if conn.uses == 101 {
                return Err(HookError::message("pre_recycle says no"));
            }
            Ok(())
        }))
        .post_recycle(Hook::async_fn(|conn: &mut Conn, meta: &Meta| {
            let count = meta.recycle_count();
            Box::pin(async move {
                if conn.id == 1 && count == 0 {
                    return Err(HookError::message("post_recycle says no"));
                }
                Ok(())
            })
        }))
    });
    let object = f.pool.get().await.unwrap();
    assert_eq!(object.uses, 100, "post_create ran");
    drop(object);
    // Recycled once (101), then pre_recycle rejects it on the next checkout.
    let object = f.pool.get().await.unwrap();
    assert_eq!((id(&object), object.uses), (0, 101));
    drop(object);
    let object = f.pool.get().await.unwrap();
    assert_eq!(id(&object), 1, "object 0 was rejected before its recycle");
    drop(object);
    // Object 1's first recycle is rejected after it ran.
    let object = f.pool.get().await.unwrap();
    assert_eq!(id(&object), 2);
    drop(object);
    assert_eq!(f.pool.stats().discarded, 2);
    f.assert_balanced();

    let rejecting = Fixture::with(1, |b| {
        b.post_create(Hook::sync_fn(|_: &mut Conn, _: &Meta| {
            Err(HookError::message("no"))
        }))
    });
    let error = rejecting.pool.get().await.unwrap_err();
    assert!(matches!(error, PoolError::PostCreateHook(_)), "{error}");
    assert_eq!(rejecting.pool.status().size, 0, "the room came back");
    assert!(rejecting.ledger.was_dropped(0));
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn take_detaches_an_object_and_frees_its_room() {
    let f = Fixture::new(1);
    let object = f.pool.get().await.unwrap();
    let conn = Object::take(object);
    assert_eq!(conn.id, 0);
    assert_eq!(f.ledger.detaches.load(Ordering::SeqCst), 1);
    assert_eq!(f.pool.status().size, 0);
    assert_eq!(
        id(&f.pool.get().await.unwrap()),
        1,
        "its room is free for a new one"
    );
    assert!(
        !f.ledger.was_dropped(0),
        "the taken connection is the caller's"
    );
    drop(conn);
    assert_eq!(f.pool.stats().detached, 1);
    f.assert_balanced();
}

/// `max_lifetime` is enforced at checkout (the object is replaced), at return, and by the
/// reaper (on the mock clock).
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn objects_past_their_lifetime_are_replaced() {
    let f = Fixture::with(2, |b| b.max_lifetime(Some(Duration::from_secs(30))));
    drop(f.pool.get().await.unwrap());
    f.time.advance(Duration::from_secs(31));
    let object = f.pool.get().await.unwrap();
    assert_eq!(id(&object), 1, "the old object was replaced at checkout");
    f.time.advance(Duration::from_secs(31));
    drop(object);
    assert!(f.ledger.was_dropped(1), "dropped at return");
    drop(f.pool.get().await.unwrap());
    f.time.advance(Duration::from_secs(31));
    assert_eq!(
        f.pool.reap(f.time.now()),
        1,
        "the reaper drops it while idle"
    );
    let stats = f.pool.stats();
    assert_eq!((stats.expired, stats.reaped), (3, 0));
    f.assert_balanced();
}

/// The reaper drops objects idle past the timeout, highest slots, keeping `min_idle`.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn idle_objects_are_reaped_keeping_min_idle() {
    let f = Fixture::with(4, |b| b.min_idle(1));
    f.pool.prewarm().await;
    let objects = vec![
        f.pool.get().await.unwrap(),
        f.pool.get().await.unwrap(),
        f.pool.get().await.unwrap(),
    ];
    drop(objects);
    f.time.advance(IDLE - Duration::from_secs(1));
    assert_eq!(f.pool.reap(f.time.now()), 0, "not idle long enough");
    let hot = f.pool.get().await.unwrap();
    f.time.advance(Duration::from_secs(2));
    assert_eq!(
        f.pool.reap(f.time.now()),
        1,
        "two idle, one kept for min_idle"
    );
    assert_eq!(id(&hot), 0, "the lowest slot stayed hot");
    assert!(f.ledger.was_dropped(2) && !f.ledger.was_dropped(1));
    drop(hot);
    assert_eq!(f.pool.stats().reaped, 1);
    f.assert_balanced();
}

/// `min_idle` is filled in the background at build and topped up after objects are dropped.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn min_idle_is_kept_up_in_the_background() {
    let f = Fixture::with(4, |b| b.min_idle(2));
    settle_until("prewarmed", || f.pool.status().available == 2).await;
    let object = f.pool.get().await.unwrap();
    let _ = Object::take(object);
    settle_until("topped up", || f.pool.status().available == 2).await;
    assert_eq!(f.ledger.made(), 3);
    let error = build_error(
        Pool::builder(Scripted::new())
            .max_size(2)
            .min_idle(3)
            .build(),
    );
    assert!(matches!(
        error,
        ConfigError::Inverted {
            low: "min_idle",
            high: "max_size",
            ..
        }
    ));
}

/// The pool reports the clock it was given (the one its ages and idle times are on) and
/// shows its gauges in `Debug`.
#[test]
fn the_pool_shows_its_clock_and_its_gauges() {
    let f = Fixture::new(2);
    f.time.advance(Duration::from_secs(42));
    assert_eq!(f.pool.clock().now(), f.time.now(), "the injected clock");
    let shown = format!("{:?}", f.pool);
    assert!(
        shown.starts_with("Pool") && shown.contains("max_size: 2"),
        "{shown}"
    );
}

/// `prewarm` creates objects until `min_idle` are idle and says how many it created; it stops
/// at a failed creation. (Built outside a runtime, the pool starts its background task in the
/// first `prewarm`; on this one-thread runtime the task runs only when the test awaits
/// something that is not ready, which these creations never are not.)
#[test]
fn prewarm_creates_up_to_min_idle_and_counts_them() {
    let f = Fixture::with(4, |b| b.min_idle(3));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    rt.block_on(async {
        assert_eq!(f.pool.prewarm().await, 3);
        assert_eq!(f.pool.prewarm().await, 0, "already min_idle idle");
        let object = f.pool.get().await.unwrap();
        f.script.creates(&[Act::Fail]);
        assert_eq!(f.pool.prewarm().await, 0, "the failed creation stops it");
        assert_eq!(f.pool.prewarm().await, 1, "tops up the one in use");
        assert_eq!(f.pool.status().available, 3);
        drop(object);
    });
    assert_eq!(f.ledger.made(), 4);
}

/// Shrinking drops idle objects now (highest slots first) and objects in use as they come
/// back, never more than needed; growing wakes a waiter.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn resize_shrinks_now_and_on_return_and_grows() {
    let f = Fixture::new(4);
    let mut objects = Vec::new();
    for _ in 0..4 {
        objects.push(f.pool.get().await.unwrap());
    }
    let busy = objects.split_off(2); // slots 2 and 3 stay in use
    drop(objects); // slots 0 and 1 idle
    f.pool.resize(1).unwrap();
    assert_eq!(f.pool.status().max_size, 1);
    assert!(
        f.ledger.was_dropped(1) && f.ledger.was_dropped(0),
        "idle ones dropped now"
    );
    assert_eq!(f.pool.status().size, 2, "two in use remain, over the size");
    let mut busy = busy.into_iter();
    drop(busy.next());
    assert!(
        f.ledger.was_dropped(2),
        "dropped on return while over the size"
    );
    drop(busy.next());
    assert!(!f.ledger.was_dropped(3), "kept: the pool is at its size");
    assert_eq!(f.pool.status().size, 1);

    let held = f.pool.get().await.unwrap();
    let waiter = {
        let pool = f.pool.clone();
        tokio::spawn(async move { pool.get().await.map(|o| o.id) })
    };
    run_spawned().await;
    assert_eq!(f.pool.status().waiting, 1);
    f.pool.resize(2).unwrap();
    assert_eq!(
        waiter.await.unwrap().unwrap(),
        4,
        "the waiter created in the new room"
    );
    drop(held);
    assert_eq!(f.pool.stats().surplus, 3);
    f.assert_balanced();
    assert!(matches!(
        f.pool.resize(usize::MAX),
        Err(ConfigError::TooLarge { name: "resize", .. })
    ));
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn retain_drops_rejected_idle_objects_only() {
    let f = Fixture::new(3);
    let objects = vec![
        f.pool.get().await.unwrap(),
        f.pool.get().await.unwrap(),
        f.pool.get().await.unwrap(),
    ];
    let mut objects = objects.into_iter();
    let in_use = objects.next().unwrap();
    drop(objects);
    let retained = f.pool.retain(|conn, _| conn.id != 2);
    assert_eq!(
        (retained.kept, retained.dropped, retained.panics),
        (1, 1, 0)
    );
    assert!(f.ledger.was_dropped(2));
    let retained = f.pool.retain(|_, _| false);
    assert_eq!(retained.dropped, 1, "the object in use is not visited");
    assert!(!f.ledger.was_dropped(0));
    drop(in_use);
    assert_eq!(f.pool.stats().retained_out, 2);
    f.assert_balanced();
}

/// Closing fails waiters with `Closed`, drops idle objects now and objects in use on return.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn close_fails_waiters_and_drops_everything() {
    let f = Fixture::new(2);
    let idle = f.pool.get().await.unwrap();
    let held = f.pool.get().await.unwrap();
    drop(idle);
    let _busy = f.pool.get().await.unwrap();
    let waiter = {
        let pool = f.pool.clone();
        tokio::spawn(async move { pool.get().await.map(|o| o.id) })
    };
    run_spawned().await;
    assert!(!f.pool.is_closed());
    f.pool.close();
    assert!(matches!(waiter.await.unwrap(), Err(PoolError::Closed)));
    assert!(f.pool.is_closed());
    drop(held);
    assert!(
        f.ledger.was_dropped(1),
        "returned to a closed pool: dropped"
    );
    assert!(matches!(f.pool.get().await, Err(PoolError::Closed)));
    assert_eq!(f.pool.status().max_size, 2, "the size as built, kept");
}

/// Dropping the last handle closes the pool; objects still out are dropped as they come back.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn the_last_handle_closes_the_pool() {
    let f = Fixture::new(2);
    let (ledger, pool) = (std::sync::Arc::clone(&f.ledger), f.pool);
    let out = pool.get().await.unwrap();
    drop(pool.get().await.unwrap());
    let spawned = tokio::spawn(async move {
        // Objects are owned: they move into tasks and outlive the handle.
        out.id
    });
    assert_eq!(spawned.await.unwrap(), 0);
    drop(pool);
    assert_eq!(ledger.dropped(), 2);
    ledger.assert_no_double_drop();
}

#[test]
fn every_config_error_names_its_setter() {
    let build = |configure: fn(
        slotpool::managed::PoolBuilder<Scripted>,
    ) -> slotpool::managed::PoolBuilder<Scripted>| {
        build_error(configure(Pool::builder(Scripted::new())).build())
    };
    assert_eq!(build(|b| b.max_size(0)), ConfigError::Zero("max_size"));
    assert!(matches!(
        build(|b| b.max_size(usize::MAX)),
        ConfigError::TooLarge {
            name: "max_size",
            ..
        }
    ));
    assert!(matches!(
        build(|b| b.max_size(1).min_idle(2)),
        ConfigError::Inverted {
            low: "min_idle",
            ..
        }
    ));
    assert_eq!(
        build(|b| b.max_lifetime(Some(Duration::ZERO))),
        ConfigError::Zero("max_lifetime")
    );
    assert_eq!(
        build(|b| b.wait_timeout(Some(Duration::ZERO))),
        ConfigError::Zero("wait_timeout")
    );
    assert_eq!(
        build(|b| b.create_timeout(Some(Duration::ZERO))),
        ConfigError::Zero("create_timeout")
    );
    assert_eq!(
        build(|b| b.recycle_timeout(Some(Duration::ZERO))),
        ConfigError::Zero("recycle_timeout")
    );
    assert_eq!(
        build(|b| b.idle_timeout(Duration::ZERO)),
        ConfigError::Zero("idle_timeout")
    );
    assert_eq!(
        build(|b| b.reap_interval(Some(Duration::ZERO))),
        ConfigError::Zero("reap_interval")
    );
    // Outside a runtime a background reaper is no error: it starts on first use inside one
    // (`managed_dropin.rs`).
    assert!(Pool::builder(Scripted::new())
        .reap_interval(Some(Duration::from_secs(1)))
        .build()
        .is_ok());
}

/// Panics in the manager, the hooks, `detach`, a destructor and `retain`'s predicate are
/// contained: typed errors for the callers they touched, room given back, no second panic.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn panics_of_user_code_are_contained() {
    let f = Fixture::new(2);
    f.script.creates(&[Act::Panic]);
    let error = f.pool.get().await.unwrap_err();
    assert!(
        matches!(&error, PoolError::Panicked { step: Step::Create, panic } if panic.message() == "create panics"),
        "{error}"
    );
    assert_eq!(f.pool.status().size, 0, "the room came back");

    drop(f.pool.get().await.unwrap());
    f.script.recycles(&[Act::Panic]);
    let error = f.pool.get().await.unwrap_err();
    assert!(
        matches!(
            error,
            PoolError::Panicked {
                step: Step::Recycle,
                ..
            }
        ),
        "{error}"
    );
    assert!(
        f.ledger.was_dropped(0),
        "the object whose recycle panicked is dropped"
    );

    // A destructor that panics, on an object dropped by `retain`'s panicking predicate.
    drop(f.pool.get().await.unwrap());
    f.ledger.panic_on_drop(1);
    let retained = f.pool.retain(|_, _| panic!("predicate panics"));
    assert_eq!((retained.dropped, retained.panics), (1, 1));
    assert!(f.ledger.was_dropped(1));
    assert_eq!(
        f.pool.stats().panics,
        4,
        "create, recycle, predicate, destructor"
    );
    assert_eq!(f.pool.get().await.unwrap().id, 2, "the pool carries on");

    let hooked = Fixture::with(1, |b| {
        b.post_create(Hook::sync_fn(|_: &mut Conn, _: &Meta| {
            panic!("hook panics")
        }))
    });
    let error = hooked.pool.get().await.unwrap_err();
    assert!(
        matches!(
            error,
            PoolError::Panicked {
                step: Step::PostCreate,
                ..
            }
        ),
        "{error}"
    );
    assert_eq!(hooked.pool.status().size, 0);
}

/// A panic in `detach` or a destructor of an object on its way out fails no caller: the `get`
/// that rejected the object goes on to a new one, the panic is counted, the books balance
/// (the module docs' failure model).
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_panic_closing_a_rejected_object_fails_no_caller() {
    let f = Fixture::new(1);
    drop(f.pool.get().await.unwrap());
    f.ledger.panic_on_detach(0);
    f.ledger.panic_on_drop(0);
    f.script.recycles(&[Act::Reject]);
    let object = f
        .pool
        .get()
        .await
        .expect("the get goes on past the rejected object");
    assert_eq!(object.id, 1, "a new object replaced the rejected one");
    assert!(f.ledger.was_dropped(0), "dropped all the same");
    let stats = f.pool.stats();
    assert_eq!((stats.panics, stats.discarded), (2, 1), "{stats:?}");
    drop(object);
    f.assert_balanced();
}

/// An object is `'static` and `Send`: it moves into a spawned task and comes back from there.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn objects_move_into_tasks() {
    let f = Fixture::new(1);
    let object = f.pool.get().await.unwrap();
    tokio::spawn(async move {
        let mut object = object;
        object.uses += 10;
    })
    .await
    .unwrap();
    let object = f.pool.get().await.unwrap();
    assert_eq!(object.uses, 11, "recycled once after the task's ten");
    let mut get = pin!(f.pool.get());
    assert!(matches!(poll_once(get.as_mut()), Poll::Pending));
    drop(object);
    assert!(matches!(poll_once(get.as_mut()), Poll::Ready(Ok(_))));
}
