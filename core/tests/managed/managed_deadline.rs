//! The managed pool's deadlines fire on time whatever the reap interval: `wait_timeout`,
//! `create_timeout`, `recycle_timeout` and a call's own `get_timeout` are tokio timers armed
//! by the `get` itself, so each fails (or, for a recycle, gives up on its object) within a
//! few milliseconds of its setting with a background reaper every hour, at the managed
//! default (30 s), or none at all. Nothing rides the reaper's tick.
//!
//! Every test runs on tokio's paused clock, which moves only when every task waits, straight
//! to the next timer, so "when" below is exact and nothing depends on the machine's speed; the
//! pool's own clock is a mock that is never advanced.

use std::future::Future;
use std::time::Duration;

use crate::common::managed::{Act, Fixture, Injected, Scripted};
use slotpool::managed::{Object, PoolBuilder, PoolError, Step};
use tokio::time::Instant;

const MS: Duration = Duration::from_millis(1);

/// How late past its setting a deadline may fire: tokio's timer rounds a deadline up to its
/// next millisecond tick.
const SLACK: Duration = Duration::from_millis(5);

/// The background reap intervals every deadline is checked under: hourly, the managed
/// pool's default (30 s), and none.
const REAPINGS: [Option<Duration>; 3] = [
    Some(Duration::from_secs(3600)),
    Some(Duration::from_secs(30)),
    None,
];

/// A fixture of `max_size` reaped in the background every `reaping` (or never), configured
/// further by `configure`.
fn fixture(
    max_size: usize,
    reaping: Option<Duration>,
    configure: impl FnOnce(PoolBuilder<Scripted>) -> PoolBuilder<Scripted>,
) -> Fixture {
    Fixture::with(max_size, |b| configure(b.reap_interval(reaping)))
}

/// Awaits a `get` that must fail; its error and how much (paused) time it took. Still pending
/// after two minutes fails the test (a deadline that never fired).
async fn failed_after(
    get: impl Future<Output = Result<Object<Scripted>, PoolError<Injected>>>,
) -> (PoolError<Injected>, Duration) {
    let start = Instant::now();
    let outcome = tokio::time::timeout(Duration::from_secs(120), get)
        .await
        .expect("the deadline fired");
    (outcome.expect_err("the get failed"), start.elapsed())
}

fn assert_on_time(took: Duration, setting: Duration, what: &str) {
    assert!(
        took >= setting && took <= setting + SLACK,
        "{what} fired after {took:?}, set to {setting:?}"
    );
}

/// `wait_timeout`: a `get` that finds the pool full fails in step `wait` at its setting.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn wait_timeout_fires_on_time_whatever_the_reap_interval() {
    for reaping in REAPINGS {
        let setting = 250 * MS;
        let f = fixture(1, reaping, |b| b.wait_timeout(Some(setting)));
        let held = f.pool.get().await.unwrap();
        let (error, took) = failed_after(f.pool.get()).await;
        assert_eq!(error.timed_out_in(), Some(Step::Wait), "{error}");
        assert_on_time(took, setting, &format!("wait_timeout, reaping {reaping:?}"));
        drop(held);
        f.assert_balanced();
    }
}

/// `create_timeout`: a creation that hangs fails its `get` in step `create` at its setting,
/// and the room comes back.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn create_timeout_fires_on_time_whatever_the_reap_interval() {
    for reaping in REAPINGS {
        let setting = 300 * MS;
        let f = fixture(1, reaping, |b| b.create_timeout(Some(setting)));
        f.script.creates(&[Act::Hang]);
        let (error, took) = failed_after(f.pool.get()).await;
        assert_eq!(error.timed_out_in(), Some(Step::Create), "{error}");
        assert_on_time(
            took,
            setting,
            &format!("create_timeout, reaping {reaping:?}"),
        );
        assert_eq!(f.pool.status().size, 0, "the creation's room came back");
    }
}

/// `recycle_timeout`: a recycle that hangs costs its `get` exactly the setting, then the
/// object is dropped and the `get` goes on with a new one.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn recycle_timeout_fires_on_time_whatever_the_reap_interval() {
    for reaping in REAPINGS {
        let setting = 200 * MS;
        let f = fixture(1, reaping, |b| b.recycle_timeout(Some(setting)));
        drop(f.pool.get().await.unwrap());
        f.script.recycles(&[Act::Hang]);
        let start = Instant::now();
        let object = f
            .pool
            .get()
            .await
            .expect("a new object after the hung recycle");
        assert_on_time(
            start.elapsed(),
            setting,
            &format!("recycle_timeout, reaping {reaping:?}"),
        );
        assert_eq!((object.id, f.pool.stats().discarded), (1, 1));
        drop(object);
        f.assert_balanced();
    }
}

/// A call's own `get_timeout` over the whole `get`: in the wait, and in a creation.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn get_timeout_fires_on_time_whatever_the_reap_interval() {
    for reaping in REAPINGS {
        let setting = 150 * MS;
        let f = fixture(1, reaping, |b| b);
        let held = f.pool.get().await.unwrap();
        let (error, took) = failed_after(f.pool.get_timeout(setting)).await;
        assert_eq!(error.timed_out_in(), Some(Step::Wait), "{error}");
        assert_on_time(
            took,
            setting,
            &format!("get_timeout waiting, reaping {reaping:?}"),
        );
        drop(held);

        let f = fixture(1, reaping, |b| b);
        f.script.creates(&[Act::Hang]);
        let (error, took) = failed_after(f.pool.get_timeout(setting)).await;
        assert_eq!(error.timed_out_in(), Some(Step::Create), "{error}");
        assert_on_time(
            took,
            setting,
            &format!("get_timeout creating, reaping {reaping:?}"),
        );
    }
}
