//! What a deadpool user reaches for, by deadpool's names, in the managed pool: `Timeouts`
//! (per pool and per call), `Pool::timeouts`, `Object::pool`, a `Status.max_size` that
//! stays put when the pool closes, and a pool that can be built outside a runtime. Time is
//! tokio's paused clock and a mock clock (`slotpool::Clock::mock`); nothing sleeps.

use std::time::Duration;

use crate::common::managed::{Act, Fixture, Injected, Scripted};
use crate::common::{build_error, settle_until};
use slotpool::managed::{Object, Pool, PoolError, Step, Timeouts};
use slotpool::ConfigError;
use tokio::time::Instant;

const SECOND: Duration = Duration::from_secs(1);

/// The error of a `get` that failed (within two minutes), and how long it took on the paused
/// clock.
async fn timed_failure(
    get: impl std::future::Future<Output = Result<Object<Scripted>, PoolError<Injected>>>,
) -> (PoolError<Injected>, Duration) {
    let start = Instant::now();
    let outcome = tokio::time::timeout(120 * SECOND, get).await;
    let error = outcome
        .expect("no deadline fired")
        .expect_err("the get failed");
    (error, start.elapsed())
}

/// `PoolBuilder::timeouts` sets the three deadlines at once, `Pool::timeouts` reads them
/// back, and each fires in its own step at its own setting.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn timeouts_set_each_steps_deadline_and_read_back() {
    let timeouts = Timeouts {
        wait: Some(2 * SECOND),
        create: Some(5 * SECOND),
        recycle: Some(3 * SECOND),
    };
    let f = Fixture::with(1, |b| b.timeouts(timeouts));
    assert_eq!(f.pool.timeouts(), timeouts);

    f.script.creates(&[Act::Hang]);
    let (error, took) = timed_failure(f.pool.get()).await;
    assert!(
        matches!(error, PoolError::Timeout { step: Step::Create, after } if after == 5 * SECOND),
        "{error}"
    );
    assert_eq!(took, 5 * SECOND);
    assert_eq!(f.pool.status().size, 0, "the creation's room came back");

    let held = f.pool.get().await.unwrap();
    let (error, took) = timed_failure(f.pool.get()).await;
    assert_eq!(error.timed_out_in(), Some(Step::Wait), "{error}");
    assert_eq!(took, 2 * SECOND);
    drop(held);

    // A recycle past its deadline drops the object; the `get` goes on with a new one.
    f.script.recycles(&[Act::Hang]);
    let start = Instant::now();
    let object = f.pool.get().await.unwrap();
    assert_eq!(start.elapsed(), 3 * SECOND);
    assert_eq!((object.id, f.pool.stats().discarded), (1, 1));
    drop(object);
    f.assert_balanced();
}

/// A single `timeouts` field replaces the defaults for all three: `None` is no deadline,
/// even for `create` (whose default is 30 s).
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn timeouts_replace_the_defaults_whole() {
    let f = Fixture::with(1, |b| b.timeouts(Timeouts::wait_millis(250)));
    assert_eq!(
        f.pool.timeouts(),
        Timeouts {
            wait: Some(Duration::from_millis(250)),
            create: None,
            recycle: None,
        }
    );
    let defaults = Fixture::new(1);
    assert_eq!(
        defaults.pool.timeouts(),
        Timeouts {
            wait: None,
            create: Some(30 * SECOND),
            recycle: Some(30 * SECOND),
        },
        "the documented defaults"
    );
    f.script.creates(&[Act::Hang]);
    let get = f.pool.get();
    assert!(
        tokio::time::timeout(60 * SECOND, get).await.is_err(),
        "a creation without a deadline was cut short"
    );
}

/// `get_timeouts` runs one `get` under the caller's deadlines instead of the pool's, step by
/// step; the pool's own are untouched for the next call.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn get_timeouts_overrides_the_pools_deadlines_for_one_call() {
    let f = Fixture::with(1, |b| b.timeouts(Timeouts::wait_millis(100)));

    // Create: the pool has none; the call's fires.
    f.script.creates(&[Act::Hang]);
    let create = Timeouts {
        create: Some(SECOND),
        ..Timeouts::new()
    };
    let (error, took) = timed_failure(f.pool.get_timeouts(&create)).await;
    assert!(
        matches!(error, PoolError::Timeout { step: Step::Create, after } if after == SECOND),
        "{error}"
    );
    assert_eq!(took, SECOND);

    // Wait: the call's (longer) deadline, not the pool's 100 ms; then the pool's again.
    let held = f.pool.get().await.unwrap();
    let first = held.id;
    let (error, took) = timed_failure(f.pool.get_timeouts(&Timeouts::wait_millis(700))).await;
    assert_eq!(error.timed_out_in(), Some(Step::Wait), "{error}");
    assert_eq!(took, Duration::from_millis(700));
    let (_, took) = timed_failure(f.pool.get()).await;
    assert_eq!(took, Duration::from_millis(100), "the pool's own deadline");
    // No wait deadline in the call: it waits past the pool's, and gets the object back.
    let waiter = {
        let pool = f.pool.clone();
        tokio::spawn(async move { pool.get_timeouts(&Timeouts::new()).await.map(|o| o.id) })
    };
    tokio::time::sleep(10 * SECOND).await;
    assert!(
        !waiter.is_finished(),
        "a call without a wait deadline gave up"
    );
    drop(held);
    assert_eq!(
        waiter.await.unwrap().unwrap(),
        first,
        "handed the returned object"
    );

    // Recycle: the call's deadline drops the hung object and creates another.
    f.script.recycles(&[Act::Hang]);
    let recycle = Timeouts {
        recycle: Some(2 * SECOND),
        ..Timeouts::new()
    };
    let start = Instant::now();
    let object = f.pool.get_timeouts(&recycle).await.unwrap();
    assert_eq!(start.elapsed(), 2 * SECOND);
    assert_eq!((object.id, f.pool.stats().discarded), (first + 1, 1));
    drop(object);
    f.assert_balanced();
}

/// A zero field of `timeouts` is refused at build, naming the field.
#[test]
fn a_zero_timeout_field_is_named() {
    for (timeouts, name) in [
        (
            Timeouts {
                wait: Some(Duration::ZERO),
                ..Timeouts::new()
            },
            "timeouts.wait",
        ),
        (
            Timeouts {
                create: Some(Duration::ZERO),
                ..Timeouts::new()
            },
            "timeouts.create",
        ),
        (
            Timeouts {
                recycle: Some(Duration::ZERO),
                ..Timeouts::new()
            },
            "timeouts.recycle",
        ),
    ] {
        let built = Pool::builder(Scripted::new()).timeouts(timeouts).build();
        assert_eq!(build_error(built), ConfigError::Zero(name));
    }
    // The last setter names it.
    let built = Pool::builder(Scripted::new())
        .timeouts(Timeouts::new())
        .create_timeout(Some(Duration::ZERO))
        .build();
    assert_eq!(build_error(built), ConfigError::Zero("create_timeout"));
}

/// `Object::pool` hands out a handle of the object's pool while one exists, and `None` once
/// the last handle is gone (the pool closed).
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn an_object_knows_its_pool_while_the_pool_lives() {
    let f = Fixture::new(2);
    let object = f.pool.get().await.unwrap();
    let pool = Object::pool(&object).expect("the pool is alive");
    // The same pool: its status sees the object out.
    assert_eq!(pool.status().in_use, 1);
    let second = pool.get().await.unwrap();
    assert_eq!(f.pool.status().in_use, 2);
    drop((pool, second));
    assert!(
        !f.pool.is_closed(),
        "the object's handle was one of several"
    );
    drop(f.pool);
    assert!(
        Object::pool(&object).is_none(),
        "a handle after the last one was dropped"
    );
    drop(object);
    settle_until("the returned object was dropped", || {
        f.ledger.dropped() == 2
    })
    .await;
}

/// `Status.max_size` is the size as built or last resized, and stays so after `close`.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn max_size_stays_after_close() {
    let f = Fixture::new(3);
    assert_eq!(f.pool.status().max_size, 3);
    f.pool.resize(5).unwrap();
    assert_eq!(f.pool.status().max_size, 5);
    f.pool.close();
    assert_eq!(f.pool.status().max_size, 5);
    f.pool.resize(7).unwrap();
    assert_eq!(f.pool.status().max_size, 5, "a closed pool stays closed");
}

/// A runtime for a pool built outside one: one thread, paused clock.
fn paused_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("a runtime")
}

/// Built outside a runtime (as a `static` would be), the pool starts its background task at
/// the first creation inside one: `min_idle` is topped up and idle objects are reaped every
/// `reap_interval`, without anyone calling `prewarm` or `reap`.
#[test]
fn a_pool_built_outside_a_runtime_starts_its_task_on_first_use() {
    let every = SECOND;
    let f = Fixture::with(4, |b| b.min_idle(1).reap_interval(Some(every)));
    paused_runtime().block_on(async {
        assert_eq!(f.pool.status().size, 0, "nothing before first use");
        let first = f.pool.get().await.unwrap();
        settle_until("min_idle topped up in the background", || {
            f.pool.status().available == 1
        })
        .await;
        let second = f.pool.get().await.unwrap();
        drop((first, second));
        // Past the idle timeout (on the pool's clock), the next tick reaps one of the two
        // idle objects and keeps `min_idle`.
        f.time.advance(crate::common::managed::IDLE + 2 * every);
        tokio::time::sleep(2 * every).await;
        settle_until("reaped in the background", || f.pool.stats().reaped == 1).await;
        assert_eq!(f.pool.status().available, 1);
    });
    f.assert_balanced();
}

/// The same with `prewarm` as the first use; and a pool that runs no background task
/// (no `min_idle`, no reap interval) starts none.
#[test]
fn prewarm_starts_the_task_of_a_pool_built_outside_a_runtime() {
    let f = Fixture::with(4, |b| b.min_idle(2).reap_interval(None));
    paused_runtime().block_on(async {
        assert_eq!(f.pool.prewarm().await, 2);
        let object = f.pool.get().await.unwrap();
        let _taken = Object::take(object);
        settle_until("topped up in the background", || {
            f.pool.status().available == 2
        })
        .await;
    });
    let idle = Fixture::with(4, |b| b.reap_interval(None));
    paused_runtime().block_on(async {
        drop(idle.pool.get().await.unwrap());
        idle.time.advance(crate::common::managed::IDLE * 10);
        tokio::time::sleep(crate::common::managed::IDLE * 10).await;
        assert_eq!(idle.pool.stats().reaped, 0, "no reaper was asked for");
    });
}

/// A checkout that leaves fewer than `min_idle` idle wakes the background task at once (bb8
/// refills after checkouts too), not at the next reap interval: here there is none.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn min_idle_is_topped_up_right_after_checkouts() {
    let f = Fixture::with(4, |b| b.min_idle(2).reap_interval(None));
    settle_until("prewarmed", || f.pool.status().available == 2).await;
    let first = f.pool.get().await.unwrap();
    settle_until("topped up after the first checkout", || {
        f.pool.status().available == 2
    })
    .await;
    let second = f.pool.get().await.unwrap();
    settle_until("topped up after the second", || {
        f.pool.status().available == 2
    })
    .await;
    assert_eq!((first.id, second.id), (0, 1), "lowest slots first");
    assert_eq!(f.ledger.made(), 4);
    drop((first, second));
    f.assert_balanced();
}

/// `add` puts an object made elsewhere into the pool, idle in the lowest empty slot and
/// counted as created, within `max_size`; a full or closed pool hands it back.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn add_puts_an_object_in_within_the_size() {
    use slotpool::managed::{AddError, Manager};
    let f = Fixture::new(2);
    let made = f.pool.manager().create().await.unwrap();
    let id = made.id;
    f.pool.add(made).unwrap();
    let status = f.pool.status();
    assert_eq!((status.size, status.available), (1, 1));
    assert_eq!(f.pool.stats().created, 1);
    let object = f.pool.get().await.unwrap();
    assert_eq!(
        (object.id, Object::slot(&object)),
        (id, 0),
        "the added one, slot 0"
    );
    f.pool
        .add(f.pool.manager().create().await.unwrap())
        .unwrap();
    let third = f.pool.manager().create().await.unwrap();
    let third_id = third.id;
    let refused = f.pool.add(third).unwrap_err();
    assert!(matches!(refused, AddError::NoCapacity(_)), "{refused}");
    assert_eq!(
        refused.to_string(),
        "no room in the pool for the added object"
    );
    let back = refused.into_inner();
    assert_eq!(back.id, third_id, "handed back");
    drop(back);
    drop(object);
    f.pool.close();
    let refused = f.pool.add(f.pool.manager().create().await.unwrap());
    assert!(matches!(refused, Err(AddError::Closed(_))));
    let error: Box<dyn std::error::Error> = Box::new(refused.unwrap_err());
    assert_eq!(error.to_string(), "the pool is closed");
    // The two handed back were the manager's, dropped by the test: counted made, not created.
    assert_eq!(f.ledger.made(), f.pool.stats().created + 2);
}

/// `dedicated` makes an object as a `get` would (create under its deadline, then the
/// `post_create` hooks) and hands it over without the pool ever holding it.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn dedicated_makes_an_object_the_pool_never_holds() {
    use slotpool::managed::{Hook, HookError, Meta};
    let f = Fixture::with(1, |b| {
        b.create_timeout(Some(SECOND)).post_create(Hook::sync_fn(
            |conn: &mut crate::common::managed::Conn, _: &Meta| {
                conn.uses += 1;
                if conn.id == 2 {
                    return Err(HookError::message("no third"));
                }
                Ok(())
            },
        ))
    });
    let held = f.pool.get().await.unwrap();
    let own = f.pool.dedicated().await.expect("made beside a full pool");
    assert_eq!((own.id, own.uses), (1, 1), "created, then the hook ran");
    let status = f.pool.status();
    assert_eq!((status.size, status.in_use), (1, 1), "not the pool's");
    assert_eq!(f.pool.stats().created, 1);
    let error = f.pool.dedicated().await.unwrap_err();
    assert!(matches!(error, PoolError::PostCreateHook(_)), "{error}");
    f.script.creates(&[Act::Hang]);
    let (error, took) = timed_failure(async {
        f.pool
            .dedicated()
            .await
            .map(|_| unreachable!("a hung create returned"))
    })
    .await;
    assert_eq!((error.timed_out_in(), took), (Some(Step::Create), SECOND));
    // Not in the stats, but for a panic of its user code, counted as every caught panic.
    f.script.creates(&[Act::Panic]);
    let error = f.pool.dedicated().await.unwrap_err();
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
    let stats = f.pool.stats();
    assert_eq!(
        (stats.created, stats.create_failures, stats.panics),
        (1, 0, 1),
        "{stats:?}"
    );
    drop((held, own));
    f.pool.close();
    assert!(matches!(f.pool.dedicated().await, Err(PoolError::Closed)));
}

/// The error sink hears the failures nobody waits for: a `min_idle` creation, and a creation
/// finished after its caller left; a sink that panics is counted, and the pool goes on.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn the_error_sink_hears_background_failures() {
    use std::sync::{Arc, Mutex};
    let heard = Arc::new(Mutex::new(Vec::new()));
    let sink = {
        let heard = Arc::clone(&heard);
        move |error: &PoolError<Injected>| {
            let step = error.timed_out_in();
            heard.lock().unwrap().push((error.to_string(), step));
            if heard.lock().unwrap().len() == 2 {
                panic!("the sink panics on the second");
            }
        }
    };
    let f = Fixture::with(2, |b| {
        b.min_idle(1)
            .reap_interval(None)
            .create_timeout(Some(SECOND))
            .error_sink(sink)
    });
    f.script.creates(&[Act::Fail]);
    settle_until("the min_idle failure heard", || {
        heard.lock().unwrap().len() == 1
    })
    .await;
    assert!(
        matches!(heard.lock().unwrap()[0], (_, None)),
        "a create error"
    );
    // A `get` that gives up while its creation hangs: the creation goes on off the caller and
    // times out there.
    f.script.creates(&[Act::Hang]);
    {
        let mut get = std::pin::pin!(f.pool.get());
        assert!(crate::common::poll_once(get.as_mut()).is_pending());
    }
    tokio::time::sleep(2 * SECOND).await;
    settle_until("the orphan's failure heard", || {
        heard.lock().unwrap().len() == 2
    })
    .await;
    assert_eq!(heard.lock().unwrap()[1].1, Some(Step::Create));
    assert_eq!(f.pool.stats().panics, 1, "the sink's panic, contained");
    assert!(f.pool.get().await.is_ok(), "the pool goes on");
}

/// `retain_and_take` hands the rejected idle objects to the caller, detached, and frees
/// their room; objects in use are not visited.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn retain_and_take_hands_back_what_it_removed() {
    let f = Fixture::new(3);
    let objects = vec![
        f.pool.get().await.unwrap(),
        f.pool.get().await.unwrap(),
        f.pool.get().await.unwrap(),
    ];
    let mut objects = objects.into_iter();
    let busy = objects.next().unwrap();
    drop(objects);
    let taken = f.pool.retain_and_take(|conn, _| conn.id == 1);
    assert_eq!((taken.kept, taken.panics), (1, 0));
    let ids: Vec<u64> = taken.removed.iter().map(|conn| conn.id).collect();
    assert_eq!(ids, vec![2], "the rejected idle one, not the one in use");
    assert_eq!(
        f.ledger.detaches.load(std::sync::atomic::Ordering::SeqCst),
        1
    );
    assert!(!f.ledger.was_dropped(2), "handed over, not dropped");
    let status = f.pool.status();
    assert_eq!((status.size, status.available, status.in_use), (2, 1, 1));
    assert_eq!(f.pool.stats().detached, 1);
    // Its room is free: a third object can be created beside the two.
    let kept = f.pool.get().await.unwrap();
    let new = f.pool.get().await.unwrap();
    assert_eq!((kept.id, new.id), (1, 3));
    drop((busy, kept, new, taken));
    f.assert_balanced();
}

/// `stats().wait_time` adds up the time `get`s spent waiting, on the pool's clock (here a
/// mock): a wait that got an object, one cut by its deadline, and one whose caller gave up;
/// `get`s that did not wait add nothing.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn wait_time_adds_up_the_waits_on_the_pools_clock() {
    let f = Fixture::new(1);
    let held = f.pool.get().await.unwrap();
    drop(f.pool.try_get().await.unwrap_err());
    assert_eq!(
        f.pool.stats().wait_time,
        Duration::ZERO,
        "a try does not wait"
    );

    // A waiter served after 3 s.
    let mut waiter = std::pin::pin!(f.pool.get());
    assert!(crate::common::poll_once(waiter.as_mut()).is_pending());
    f.time.advance(3 * SECOND);
    drop(held);
    let held = waiter.await.unwrap();
    assert_eq!(f.pool.stats().wait_time, 3 * SECOND);

    // A caller that gives up after 2 s counts its 2 s.
    {
        let mut gives_up = std::pin::pin!(f.pool.get());
        assert!(crate::common::poll_once(gives_up.as_mut()).is_pending());
        f.time.advance(2 * SECOND);
    }
    // A deadline: the wait ends when tokio's timer fires; the pool's mock clock moved 1 s.
    let timed = async {
        let deadline = Timeouts::wait_millis(500);
        let get = f.pool.get_timeouts(&deadline);
        let mut get = std::pin::pin!(get);
        assert!(crate::common::poll_once(get.as_mut()).is_pending());
        f.time.advance(SECOND);
        get.await
    };
    assert_eq!(timed.await.unwrap_err().timed_out_in(), Some(Step::Wait));
    let stats = f.pool.stats();
    assert_eq!((stats.waits, stats.wait_time), (3, 6 * SECOND));
    drop(held);
}

/// Objects `retain_and_take` took out are replaced up to `min_idle` in the background at
/// once (no reap interval here to do it later).
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn retain_and_take_wakes_the_min_idle_top_up() {
    let f = Fixture::with(4, |b| b.min_idle(2).reap_interval(None));
    settle_until("prewarmed", || f.pool.status().available == 2).await;
    let taken = f.pool.retain_and_take(|_, _| false);
    assert_eq!(taken.removed.len(), 2);
    settle_until("topped up again", || f.pool.status().available == 2).await;
    assert_eq!(f.ledger.made(), 4);
}

/// Three objects out at once, then returned, then taken one at a time `rounds * 3` times:
/// the ids a single caller gets, in order.
async fn one_caller_sequence(pool: &Pool<Scripted>, rounds: usize) -> Vec<u64> {
    let all = [
        pool.get().await.unwrap(),
        pool.get().await.unwrap(),
        pool.get().await.unwrap(),
    ];
    drop(all);
    let mut seen = Vec::new();
    for _ in 0..rounds * 3 {
        seen.push(pool.get().await.unwrap().id);
    }
    seen
}

/// `QueueMode::Fifo` uses every idle object in turn, and `QueueMode::Lowest` (the default,
/// and what `QueueMode::Lifo` names) keeps taking the lowest: the object just returned.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn queue_mode_fifo_takes_each_idle_object_in_turn() {
    use slotpool::managed::QueueMode;
    let fifo = Fixture::with(3, |b| b.queue_mode(QueueMode::Fifo));
    assert_eq!(
        one_caller_sequence(&fifo.pool, 3).await,
        [0, 1, 2, 0, 1, 2, 0, 1, 2]
    );
    fifo.assert_balanced();

    for lowest in [
        Fixture::new(3),
        Fixture::with(3, |b| b.queue_mode(QueueMode::Lifo)),
    ] {
        assert_eq!(one_caller_sequence(&lowest.pool, 2).await, [0; 6]);
        lowest.assert_balanced();
    }
    assert_eq!(QueueMode::default(), QueueMode::Lowest);
    assert_eq!(QueueMode::Lifo, QueueMode::Lowest);
}

/// In turn also past objects in use: the search starts after the last checkout and skips
/// what is taken, wrapping around; a new object goes in the lowest empty slot.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn queue_mode_fifo_skips_objects_in_use_and_wraps() {
    use slotpool::managed::QueueMode;
    let f = Fixture::with(4, |b| b.queue_mode(QueueMode::Fifo));
    let made: Vec<_> = [
        f.pool.get().await.unwrap(),
        f.pool.get().await.unwrap(),
        f.pool.get().await.unwrap(),
    ]
    .into();
    drop(made);
    let first = f.pool.get().await.unwrap(); // 0
    let second = f.pool.get().await.unwrap(); // 1
    drop(first);
    let third = f.pool.get().await.unwrap(); // 2 (after 1), not the 0 just returned
    let fourth = f.pool.get().await.unwrap(); // wraps to 0
    let fifth = f.pool.get().await.unwrap(); // none idle: a new one, slot 3
    assert_eq!(
        (second.id, third.id, fourth.id, fifth.id),
        (1, 2, 0, 3),
        "in turn, skipping the one in use"
    );
    drop((second, third, fourth, fifth));
    // The cursor stands after slot 0's checkout: slots 1, 2, 3 and 0 again.
    let ids: Vec<u64> = {
        let mut ids = Vec::new();
        for _ in 0..4 {
            ids.push(f.pool.get().await.unwrap().id);
        }
        ids
    };
    assert_eq!(ids, [1, 2, 3, 0]);
    f.assert_balanced();
}

/// With `QueueMode::Fifo` the idle objects are not the ones above the last one taken, so a
/// checkout counts them to decide whether `min_idle` needs a top-up, and tops up at once even
/// after the cursor wrapped around to a low slot with objects in use above it.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn min_idle_is_topped_up_after_checkouts_in_fifo_order() {
    use slotpool::managed::QueueMode;
    let f = Fixture::with(6, |b| {
        b.min_idle(2)
            .reap_interval(None)
            .queue_mode(QueueMode::Fifo)
    });
    let pool = &f.pool;
    let available = |n: usize| move || pool.status().available == n;
    settle_until("prewarmed", available(2)).await;
    let mut held = Vec::new();
    for made in [3, 4, 5] {
        held.push(f.pool.get().await.unwrap());
        settle_until("topped up after a checkout", available(2)).await;
        assert_eq!(f.ledger.made(), made);
    }
    assert_eq!(held.iter().map(|o| o.id).collect::<Vec<_>>(), [0, 1, 2]);
    held.drain(..2); // Idle now: 0, 1, 3, 4; the cursor stands at slot 3.
    let d = f.pool.get().await.unwrap();
    let e = f.pool.get().await.unwrap();
    tokio::task::yield_now().await;
    assert_eq!((f.pool.status().available, f.ledger.made()), (2, 5));
    // Wraps to slot 0 with 1 above it idle (slot 1) and 3 in use (2, 3, 4).
    let wrapped = f.pool.get().await.unwrap();
    assert_eq!((d.id, e.id, wrapped.id), (3, 4, 0));
    settle_until("topped up after the wrap", available(2)).await;
    assert_eq!(f.ledger.made(), 6);
    drop((held, d, e, wrapped));
    f.assert_balanced();
}

/// bb8's async `build`: `build_eager` creates `min_idle` objects (at least one) before it
/// answers, and they sit idle in the pool.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn build_eager_creates_the_first_objects_before_answering() {
    for (min_idle, created) in [(0, 1), (1, 1), (3, 3)] {
        let manager = Scripted::new();
        let ledger = std::sync::Arc::clone(&manager.ledger);
        let pool = Pool::builder(manager)
            .max_size(4)
            .min_idle(min_idle)
            .build_eager()
            .await
            .expect("every creation succeeds");
        assert_eq!(
            (pool.status().available, ledger.made(), pool.stats().created),
            (created, created as u64, created as u64),
            "min_idle {min_idle}"
        );
    }
}

/// The first failure of `build_eager` is the answer: the manager's error (as bb8 returns it),
/// a create timeout, or a refused setting; the objects created before it are dropped with
/// the closed pool, and nothing is created after it.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn build_eager_answers_the_first_failure_and_keeps_nothing() {
    use slotpool::managed::BuildError;

    let manager = Scripted::new();
    let (ledger, script) = (
        std::sync::Arc::clone(&manager.ledger),
        std::sync::Arc::clone(&manager.script),
    );
    script.creates(&[Act::Ok, Act::Fail, Act::Ok]);
    let error = Pool::builder(manager)
        .max_size(4)
        .min_idle(3)
        .build_eager()
        .await
        .expect_err("the second creation fails");
    assert!(
        matches!(error, BuildError::Create(PoolError::Create(Injected))),
        "{error}"
    );
    assert!(error.manager_error().is_some());
    assert_eq!(
        (ledger.made(), ledger.alive()),
        (1, 0),
        "one made, dropped with the pool"
    );

    let manager = Scripted::new();
    manager.script.creates(&[Act::Hang]);
    let start = Instant::now();
    let error = Pool::builder(manager)
        .timeouts(Timeouts {
            create: Some(2 * SECOND),
            ..Timeouts::new()
        })
        .build_eager()
        .await
        .expect_err("the creation hangs past its deadline");
    assert!(
        matches!(&error, BuildError::Create(e) if e.timed_out_in() == Some(Step::Create)),
        "{error}"
    );
    assert!(error.manager_error().is_none());
    assert_eq!(start.elapsed(), 2 * SECOND);

    let error = Pool::builder(Scripted::new())
        .max_size(0)
        .build_eager()
        .await
        .expect_err("a zero size is refused");
    assert!(
        matches!(error, BuildError::Config(ConfigError::Zero("max_size"))),
        "{error}"
    );
}

/// A manager that never reaches its server: every creation fails.
struct Unreachable;

impl slotpool::managed::Manager for Unreachable {
    type Type = ();
    type Error = Injected;

    async fn create(&self) -> Result<(), Injected> {
        tokio::task::yield_now().await;
        Err(Injected)
    }
}

/// A one-object pool (`min_idle == max_size`, bb8's common case) built eagerly answers only
/// once its object exists, and never `Ok` when the server cannot be reached: the background
/// task that keeps `min_idle` (which `build` starts inside a runtime) must not take the only
/// room first and leave `build_eager` with nothing to create and nothing to report. Run many
/// times on a runtime with idle workers, where that task would start at once on another
/// thread (a race a few instructions wide, seldom lost on two cores: the paused-clock test
/// below pins the order deterministically).
#[test]
fn build_eager_of_a_one_object_pool_answers_only_for_its_object() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    for round in 0..1_000 {
        let built = runtime.block_on(
            Pool::builder(Unreachable)
                .max_size(1)
                .min_idle(1)
                .build_eager(),
        );
        assert!(
            built.is_err(),
            "round {round}: Ok with an unreachable server"
        );
        let pool = runtime
            .block_on(
                Pool::builder(Scripted::new())
                    .max_size(1)
                    .min_idle(1)
                    .build_eager(),
            )
            .expect("every creation succeeds");
        let status = pool.status();
        assert_eq!(
            (status.size, status.available),
            (1, 1),
            "round {round}: answered before its object was idle"
        );
    }
}

/// A manager whose creations take a while (on tokio's clock), counting how many run at once.
#[derive(Default)]
struct SlowCreate {
    running: std::sync::atomic::AtomicUsize,
    peak: std::sync::atomic::AtomicUsize,
}

impl slotpool::managed::Manager for SlowCreate {
    type Type = ();
    type Error = Injected;

    async fn create(&self) -> Result<(), Injected> {
        use std::sync::atomic::Ordering::SeqCst;
        let running = self.running.fetch_add(1, SeqCst) + 1;
        self.peak.fetch_max(running, SeqCst);
        tokio::time::sleep(Duration::from_millis(10)).await;
        self.running.fetch_sub(1, SeqCst);
        Ok(())
    }
}

/// `build_eager` answers once all of its `min_idle` objects exist and are idle, one creation
/// at a time: the background task that keeps `min_idle` starts only after them, so it cannot
/// take the room of one of them while the first is still being created (the build then
/// found no room for the second and answered with one object idle and one still being made).
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn build_eager_answers_once_every_first_object_is_idle() {
    use std::sync::atomic::Ordering::SeqCst;
    let pool = Pool::builder(SlowCreate::default())
        .max_size(2)
        .min_idle(2)
        .build_eager()
        .await
        .expect("every creation succeeds");
    let status = pool.status();
    assert_eq!((status.size, status.available), (2, 2), "{status:?}");
    assert_eq!(
        pool.manager().peak.load(SeqCst),
        1,
        "one creation at a time"
    );
    assert_eq!(pool.stats().created, 2);
}

/// A manager of numbers that counts its creations.
#[derive(Default)]
struct Numbers(std::sync::atomic::AtomicU64);

impl slotpool::managed::Manager for Numbers {
    type Type = u64;
    type Error = Injected;

    async fn create(&self) -> Result<u64, Injected> {
        Ok(self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst))
    }
}

/// `Stats::checkouts` counts what `get`s took from their slots, not the objects the pool made
/// to keep idle: `build_eager`'s, `min_idle`'s top-up (here through `prewarm`), and those
/// handed in with `add`.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn checkouts_count_gets_not_the_pools_own_creations() {
    let pool = Pool::builder(Numbers::default())
        .max_size(8)
        .min_idle(2)
        .reap_interval(None)
        .build_eager()
        .await
        .unwrap();
    assert_eq!(pool.stats().checkouts, 0, "build_eager's objects");
    pool.add(100).unwrap();
    assert_eq!(pool.stats().checkouts, 0, "an added object");
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(pool.get().await.unwrap());
    }
    assert_eq!(pool.stats().checkouts, 3, "three gets");
    assert!(pool.prewarm().await > 0, "min_idle was topped up");
    let stats = pool.stats();
    assert_eq!(
        (stats.checkouts, stats.status.available),
        (3, 2),
        "the top-up: {stats:?}"
    );
    drop(held);
}

/// Growing the pool wakes a waiter but does not hand it the new room: a caller that never
/// waited may take the room first (`Pool::resize` says so), and the woken waiter then queues
/// again, at the front. Between its wake-up and its next try it is counted in neither
/// `waiting` nor `size`: it holds nothing and is not queued.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn room_from_a_resize_goes_to_whoever_tries_first() {
    use std::pin::pin;
    use std::task::Poll;

    use crate::common::poll_once;

    let pool = Pool::builder(Numbers::default())
        .max_size(1)
        .reap_interval(None)
        .build()
        .unwrap();
    let held = pool.get().await.unwrap();
    let mut waiter = pin!(pool.get());
    assert!(poll_once(waiter.as_mut()).is_pending());
    let mut second = pin!(pool.get());
    assert!(poll_once(second.as_mut()).is_pending());
    assert_eq!(pool.status().waiting, 2);
    pool.resize(2).unwrap();
    // The oldest waiter was woken (it left the queue) and has not run yet.
    assert_eq!((pool.status().waiting, pool.status().size), (1, 1));
    let barged = pool
        .try_get()
        .await
        .expect("the new room, to a caller that never waited");
    assert_eq!((pool.status().waiting, pool.status().size), (1, 2));
    // The woken waiter finds nothing and queues again, ahead of the second.
    assert!(poll_once(waiter.as_mut()).is_pending());
    assert_eq!(pool.status().waiting, 2);
    drop(barged);
    match poll_once(waiter.as_mut()) {
        Poll::Ready(Ok(object)) => drop(object),
        other => panic!("the first waiter is served first: {other:?}"),
    }
    drop(held);
    assert!(matches!(poll_once(second.as_mut()), Poll::Ready(Ok(_))));
}
