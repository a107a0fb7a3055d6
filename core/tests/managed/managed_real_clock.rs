//! The managed pool's sentences about time, on a real clock (`slotpool::Clock::new()`, real
//! sleeps of a few hundred milliseconds, generous bounds; nothing asserts a speed).
//!
//! `Meta::returned`: "Returns read no clock: this is the pool's recent time, at most one reap
//! interval early; idle times computed from it are never too short." With a real clock the
//! stamp comes from the background reaper's passes, so it is checked here against real time:
//! never after the return, and well after the object's creation (an object held 600 ms and
//! returned is not stamped with its creation time). Without a background reaper a return reads
//! the clock, and its stamp is exact.

use std::time::Duration;

use slotpool::managed::{Manager, Object, Pool};

struct Counter;

impl Manager for Counter {
    type Type = u32;
    type Error = std::convert::Infallible;

    async fn create(&self) -> Result<u32, Self::Error> {
        Ok(7)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_return_is_stamped_on_a_real_clock_at_most_a_reap_interval_early() {
    let interval = Duration::from_millis(50);
    let clock = slotpool::Clock::new();
    let pool = Pool::builder(Counter)
        .max_size(1)
        .reap_interval(Some(interval))
        .clock(clock.clone())
        .build()
        .unwrap();
    let object = pool.get().await.unwrap();
    let created = Object::meta(&object).created();
    tokio::time::sleep(Duration::from_millis(600)).await;
    let before_return = clock.now();
    drop(object);
    let after_return = clock.now();
    let object = pool.get().await.unwrap();
    let returned = Object::meta(&object)
        .returned()
        .expect("stamped when it came back");
    assert!(returned <= after_return, "a stamp is never late");
    // One reap interval early at most when the reaper runs on time; a loaded machine may
    // delay its passes, hence the slack, which still rules out the creation time (600 ms
    // before the return).
    let slack = Duration::from_millis(300);
    assert!(
        returned + interval + slack >= before_return,
        "stamped {:?} before the return, created {:?} before it",
        before_return.duration_since(returned),
        before_return.duration_since(created)
    );
    assert!(returned > created, "the return, not the creation");
}

/// Without a background reaper a return reads the clock: the stamp is exact on a real clock
/// (without quanta's upkeep thread the cheap recent time reads 0 for ever, and nothing else
/// would bound how early it is), so an object used for 300 ms and returned is not taken as
/// idle since its creation by a manual pass right after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_reaper_a_return_is_stamped_when_it_happens() {
    let clock = slotpool::Clock::new();
    let pool = Pool::builder(Counter)
        .max_size(1)
        .idle_timeout(Duration::from_millis(200))
        .reap_interval(None)
        .clock(clock.clone())
        .build()
        .unwrap();
    let object = pool.get().await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before_return = clock.now();
    drop(object);
    let after_return = clock.now();
    assert_eq!(
        pool.reap(clock.now()),
        0,
        "returned a moment ago: not idle for 200 ms"
    );
    let object = pool.get().await.unwrap();
    let returned = Object::meta(&object).returned().expect("stamped");
    assert!(before_return <= returned && returned <= after_return);
}

/// `max_lifetime` is checked at return on a real clock under the default background reaper
/// (every 30 s): an object returned past its lifetime is dropped then, counted in `expired`,
/// although the return's stamp (the reaper's recent time) may be far behind. The check costs
/// a clock read only when the stamp cannot rule the lifetime out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_returned_past_its_lifetime_is_dropped_under_the_default_reaper() {
    let pool = Pool::builder(Counter)
        .max_size(1)
        .max_lifetime(Some(Duration::from_millis(100)))
        .build()
        .unwrap();
    let object = pool.get().await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    drop(object);
    let stats = pool.stats();
    assert_eq!(
        (stats.expired, stats.status.size),
        (1, 0),
        "dropped at its return: {stats:?}"
    );
}
