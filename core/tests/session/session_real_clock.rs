//! The session pool's sentences about `max_idle_time`, on a real clock (`slotpool::Clock::new()`,
//! real sleeps of a few hundred milliseconds, generous bounds; nothing asserts a speed).
//!
//! The pool stamps sessions in raw counts of its clock (ticks: on most machines the TSC), not
//! nanoseconds, and turns `max_idle_time` into ticks once, at build. These tests check that
//! the conversion keeps the promise in real time: "[`SessionPool::reap`] retires sessions idle
//! past `max_idle_time`", and a session idle past it is rebuilt on its next acquire, while one
//! used within it is kept.

use std::time::Duration;

use crate::common::session::{ctx, fake};
use slotpool::session::SessionPool;

const MAX_IDLE: Duration = Duration::from_millis(300);

fn real_clock_pool() -> (SessionPool<crate::common::session::Fake>, slotpool::Clock) {
    let clock = slotpool::Clock::new();
    let (fake, _counts) = fake();
    let pool = SessionPool::builder(fake)
        .pool_size(4)
        .max_idle_time(MAX_IDLE)
        .reap_every(None)
        .clock(clock.clone())
        .build()
        .expect("valid configuration");
    (pool, clock)
}

#[tokio::test]
async fn a_reap_on_a_real_clock_keeps_a_session_within_max_idle_time_and_retires_one_past_it() {
    let (pool, clock) = real_clock_pool();
    drop(pool.acquire("s", &ctx()).await.unwrap());
    let used = clock.now();
    // Two thirds of the bound: a bound in the wrong unit (nanoseconds read as ticks of a
    // clock faster than 1.5 GHz) would reap here. The check is on the clock, not on the sleep:
    // a loaded machine that overslept skips it.
    tokio::time::sleep(MAX_IDLE * 2 / 3).await;
    let now = clock.now();
    if now.duration_since(used) < MAX_IDLE * 9 / 10 {
        assert_eq!(pool.reap(now), 0, "idle {:?}", now.duration_since(used));
        assert_eq!(pool.stats().active, 1);
    }
    // Past it by half: a bound more than 1.5 times too long would keep the session.
    tokio::time::sleep(MAX_IDLE * 5 / 6).await;
    let now = clock.now();
    assert!(now.duration_since(used) > MAX_IDLE);
    assert_eq!(pool.reap(now), 1, "idle {:?}", now.duration_since(used));
    assert_eq!(pool.stats().active, 0);
}

#[tokio::test]
async fn a_hot_acquire_on_a_real_clock_rebuilds_a_session_idle_past_max_idle_time() {
    let (pool, clock) = real_clock_pool();
    let first = pool.acquire("s", &ctx()).await.unwrap();
    let used = clock.now();
    // As above: two thirds of the bound, kept; then past it by half, rebuilt.
    tokio::time::sleep(MAX_IDLE * 2 / 3).await;
    let again = pool.acquire("s", &ctx()).await.unwrap();
    let now = clock.now();
    let kept = again.same_connection(&first);
    if now.duration_since(used) < MAX_IDLE * 9 / 10 {
        assert!(kept, "used within the bound: kept");
    }
    let used = clock.now();
    tokio::time::sleep(MAX_IDLE * 3 / 2).await;
    let rebuilt = pool.acquire("s", &ctx()).await.unwrap();
    assert!(
        !rebuilt.same_connection(&again),
        "idle {:?}: rebuilt",
        clock.now().duration_since(used)
    );
    assert_eq!(pool.stats().rebuilt, 1 + u64::from(!kept));
}
