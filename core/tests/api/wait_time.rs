//! Wait-time statistics in every pool whose callers wait (managed, client, stream, keyed,
//! session): a caller that waits adds exactly its wait, on the pool's mock clock, to
//! `wait_time` and one to `waits`, whether it was served, timed out or gave up; a caller that
//! finds room at once adds nothing. With the `metrics` feature each wait is also one sample of
//! the pool's `slotpool_<pool>_wait_seconds` histogram, labelled with the pool's name
//! (`"default"` without one), and an uncontended caller records none.
//!
//! Every wait here is timed on a `slotpool::Clock::mock()` the test moves by hand, while tokio's
//! clock is paused (it only moves when the runtime is idle, to fire a deadline): nothing sleeps
//! on a real clock.

use std::future::Future;
use std::pin::pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use slotpool::client::ClientPool;
use slotpool::keyed::{Keyed, KeyedError};
use slotpool::managed::{Step, Timeouts};
use slotpool::session::SessionPool;
use slotpool::{AcquireError, Reach};

use crate::common::channel::{steered_channel_pool, Factory};
use crate::common::keyed::LONG;
use crate::common::managed::Fixture;
use crate::common::session::{ctx, fake, settle_establishments, spawn_acquire};
use crate::common::stream::Script;
use crate::common::{poll_once, MockTime, ReapByHand};

const MS: Duration = Duration::from_millis(1);

/// The waits every scenario makes, in order: served after 7 ms, given up after 2 ms, cut by a
/// deadline after 3 ms (of the pool's clock).
const SERVED: Duration = Duration::from_millis(7);
const GAVE_UP: Duration = Duration::from_millis(2);
const TIMED_OUT: Duration = Duration::from_millis(3);

/// The samples a histogram should hold for `waits`, in seconds.
#[cfg(feature = "metrics")]
fn seconds(waits: &[Duration]) -> Vec<f64> {
    waits.iter().map(Duration::as_secs_f64).collect()
}

/// Runs `test` on a current-thread runtime with tokio's clock paused, with (feature
/// `metrics`) a capturing recorder installed on this thread, which it returns.
fn run<F: Future<Output = ()>>(test: impl FnOnce() -> F) -> Recorded {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a runtime");
    #[cfg(feature = "metrics")]
    {
        let capture = crate::capture::Capture::default();
        metrics::with_local_recorder(&capture, || runtime.block_on(test()));
        Recorded(capture)
    }
    #[cfg(not(feature = "metrics"))]
    {
        runtime.block_on(test());
        Recorded
    }
}

/// What the pools recorded through the `metrics` facade (nothing without the feature).
#[cfg(feature = "metrics")]
struct Recorded(crate::capture::Capture);
#[cfg(not(feature = "metrics"))]
struct Recorded;

impl Recorded {
    /// Asserts that the histograms recorded are exactly `expected` (`name{labels}`, samples).
    #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
    fn assert_histograms(&self, expected: &[(&str, &[Duration])]) {
        #[cfg(feature = "metrics")]
        {
            let mut names: Vec<String> = expected.iter().map(|(n, _)| n.to_string()).collect();
            names.sort();
            assert_eq!(self.0.histograms(), names, "the histograms recorded");
            for (name, waits) in expected {
                assert_eq!(self.0.samples(name), seconds(waits), "{name}");
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// managed
// ---------------------------------------------------------------------------------------

#[test]
fn managed_waits_are_timed_and_recorded_under_the_pools_name() {
    let recorded = run(|| async {
        let f = Fixture::with(1, |b| b.name("orders"));
        for _ in 0..3 {
            drop(f.pool.get().await.unwrap());
        }
        let stats = f.pool.stats();
        assert_eq!((stats.waits, stats.wait_time), (0, Duration::ZERO));

        let held = f.pool.get().await.unwrap();
        let mut served = pin!(f.pool.get());
        assert!(poll_once(served.as_mut()).is_pending());
        f.time.advance(SERVED);
        drop(held);
        let held = served.await.unwrap();
        {
            let mut gives_up = pin!(f.pool.get());
            assert!(poll_once(gives_up.as_mut()).is_pending());
            f.time.advance(GAVE_UP);
        }
        let deadline = Timeouts::wait_millis(50);
        let mut timed = pin!(f.pool.get_timeouts(&deadline));
        assert!(poll_once(timed.as_mut()).is_pending());
        f.time.advance(TIMED_OUT);
        assert_eq!(timed.await.unwrap_err().timed_out_in(), Some(Step::Wait));
        let stats = f.pool.stats();
        assert_eq!(
            (stats.waits, stats.wait_time),
            (3, SERVED + GAVE_UP + TIMED_OUT)
        );
        drop(held);
    });
    recorded.assert_histograms(&[(
        "slotpool_managed_wait_seconds{pool=orders}",
        &[SERVED, GAVE_UP, TIMED_OUT],
    )]);
}

/// Without a name, the histogram is recorded all the same, labelled `pool = "default"`.
#[test]
fn an_unnamed_pool_records_its_waits_as_default() {
    let recorded = run(|| async {
        let f = Fixture::new(1);
        let held = f.pool.get().await.unwrap();
        let mut served = pin!(f.pool.get());
        assert!(poll_once(served.as_mut()).is_pending());
        f.time.advance(SERVED);
        drop(held);
        drop(served.await.unwrap());
        assert_eq!(f.pool.stats().wait_time, SERVED);
    });
    recorded.assert_histograms(&[("slotpool_managed_wait_seconds{pool=default}", &[SERVED])]);
}

// ---------------------------------------------------------------------------------------
// client
// ---------------------------------------------------------------------------------------

#[test]
fn client_waits_are_timed_and_recorded_under_the_pools_name() {
    let recorded = run(|| async {
        let (time, channels, _live, _panics) = steered_channel_pool(4);
        let clients = ClientPool::builder(channels, Factory::default())
            .max_clients(Some(1))
            .reaped_by_hand(&time)
            .name(String::from("grpc-clients"))
            .build()
            .unwrap();
        for _ in 0..3 {
            drop(clients.acquire().await.unwrap());
        }
        let stats = clients.stats();
        assert_eq!((stats.waits, stats.wait_time), (0, Duration::ZERO));

        let held = clients.acquire().await.unwrap();
        let mut served = pin!(clients.acquire());
        assert!(poll_once(served.as_mut()).is_pending());
        time.advance(SERVED);
        drop(held);
        let held = served.await.unwrap();
        {
            let mut gives_up = pin!(clients.acquire());
            assert!(poll_once(gives_up.as_mut()).is_pending());
            time.advance(GAVE_UP);
        }
        let mut timed = pin!(clients.acquire_timeout(50 * MS));
        assert!(poll_once(timed.as_mut()).is_pending());
        time.advance(TIMED_OUT);
        assert!(timed.await.is_err(), "the deadline passed");
        let stats = clients.stats();
        assert_eq!(
            (stats.waits, stats.wait_time),
            (3, SERVED + GAVE_UP + TIMED_OUT)
        );
        drop(held);
    });
    recorded.assert_histograms(&[(
        "slotpool_client_wait_seconds{pool=grpc-clients}",
        &[SERVED, GAVE_UP, TIMED_OUT],
    )]);
}

// ---------------------------------------------------------------------------------------
// stream
// ---------------------------------------------------------------------------------------

#[test]
fn stream_waits_are_timed_and_recorded_under_the_pools_name() {
    let recorded = run(|| async {
        let time = MockTime::new();
        let (script, _streams) = Script::echo();
        let pool = script
            .sized(1, 1)
            .reaped_by_hand(&time)
            .name("pages")
            .build()
            .unwrap();
        // The first acquire opens the stream (the slow path, without a wait), the others join
        // it on the fast path.
        for _ in 0..3 {
            drop(pool.acquire().await.unwrap());
            drop(pool.try_acquire().unwrap());
        }
        let stats = pool.stats();
        assert_eq!((stats.waits, stats.wait_time), (0, Duration::ZERO));

        let held = pool.acquire().await.unwrap();
        let mut served = pin!(pool.acquire());
        assert!(poll_once(served.as_mut()).is_pending());
        time.advance(SERVED);
        drop(held);
        let held = served.await.unwrap();
        {
            let mut gives_up = pin!(pool.acquire());
            assert!(poll_once(gives_up.as_mut()).is_pending());
            time.advance(GAVE_UP);
        }
        let mut timed = pin!(pool.acquire_timeout(50 * MS));
        assert!(poll_once(timed.as_mut()).is_pending());
        time.advance(TIMED_OUT);
        assert!(matches!(
            timed.await.map(drop),
            Err(AcquireError::Timeout { .. })
        ));
        let stats = pool.stats();
        assert_eq!(
            (stats.waits, stats.wait_time),
            (3, SERVED + GAVE_UP + TIMED_OUT)
        );
        assert_eq!(stats.acquires, 8, "six uncontended, one served, one held");
        drop(held);
    });
    recorded.assert_histograms(&[(
        "slotpool_stream_wait_seconds{pool=pages}",
        &[SERVED, GAVE_UP, TIMED_OUT],
    )]);
}

/// A wait the pool's close ends counts too, as long as it lasted.
#[test]
fn a_stream_wait_ended_by_close_counts() {
    let recorded = run(|| async {
        let time = MockTime::new();
        let (script, _streams) = Script::echo();
        let pool = script.sized(1, 1).reaped_by_hand(&time).build().unwrap();
        let held = pool.acquire().await.unwrap();
        let mut closed = pin!(pool.acquire());
        assert!(poll_once(closed.as_mut()).is_pending());
        time.advance(SERVED);
        pool.close();
        assert!(matches!(closed.await.map(drop), Err(AcquireError::Closed)));
        time.advance(GAVE_UP); // after the wait ended: not counted
        let stats = pool.stats();
        assert_eq!((stats.waits, stats.wait_time), (1, SERVED));
        drop(held);
    });
    recorded.assert_histograms(&[("slotpool_stream_wait_seconds{pool=default}", &[SERVED])]);
}

// ---------------------------------------------------------------------------------------
// keyed
// ---------------------------------------------------------------------------------------

#[test]
fn keyed_waits_are_timed_per_caller_key_and_recorded_with_the_registry_name() {
    let recorded = run(|| async {
        let time = MockTime::new();
        let keyed = Keyed::builder()
            .share("journal", 1)
            .alias("ledger", "journal")
            .clock(time.clock())
            .name("storage")
            .build()
            .unwrap();
        for _ in 0..3 {
            drop(keyed.admit(&"journal", LONG).await.unwrap());
            drop(keyed.admit(&"ledger", LONG).await.unwrap());
        }
        let waits = |key| {
            let stats = keyed.stats_for(&key).unwrap();
            (stats.waits, stats.wait_time)
        };
        assert_eq!(waits("journal"), (0, Duration::ZERO));

        let held = keyed.admit(&"journal", LONG).await.unwrap();
        let mut served = pin!(keyed.admit(&"ledger", LONG));
        assert!(poll_once(served.as_mut()).is_pending());
        time.advance(SERVED);
        drop(held);
        let held = served.await.unwrap();
        {
            let mut gives_up = pin!(keyed.admit(&"journal", LONG));
            assert!(poll_once(gives_up.as_mut()).is_pending());
            time.advance(GAVE_UP);
        }
        let mut refused = pin!(keyed.admit(&"journal", 50 * MS));
        assert!(poll_once(refused.as_mut()).is_pending());
        time.advance(TIMED_OUT);
        let error = refused.await.map(drop).unwrap_err();
        assert!(matches!(error, KeyedError::Refused { .. }));
        assert_eq!(error.reach(), Reach::NotSent);

        assert_eq!(waits("ledger"), (1, SERVED), "the caller key's own");
        assert_eq!(waits("journal"), (2, GAVE_UP + TIMED_OUT));
        drop(held);
    });
    recorded.assert_histograms(&[
        (
            "slotpool_keyed_wait_seconds{key=journal,pool=storage,share=journal}",
            &[GAVE_UP, TIMED_OUT],
        ),
        (
            "slotpool_keyed_wait_seconds{key=ledger,pool=storage,share=journal}",
            &[SERVED],
        ),
    ]);
}

/// Keys registered at run time get the registry's name too; an unnamed registry is
/// `"default"`.
#[test]
fn keyed_keys_registered_later_record_under_the_same_name() {
    let recorded = run(|| async {
        let time = MockTime::new();
        let keyed = Keyed::builder().clock(time.clock()).build().unwrap();
        keyed.register("index", 1).unwrap();
        let held = keyed.admit(&"index", LONG).await.unwrap();
        let mut served = pin!(keyed.admit(&"index", LONG));
        assert!(poll_once(served.as_mut()).is_pending());
        time.advance(SERVED);
        drop(held);
        drop(served.await.unwrap());
        assert_eq!(keyed.stats_for(&"index").unwrap().wait_time, SERVED);
    });
    recorded.assert_histograms(&[(
        "slotpool_keyed_wait_seconds{key=index,pool=default,share=index}",
        &[SERVED],
    )]);
}

// ---------------------------------------------------------------------------------------
// session
// ---------------------------------------------------------------------------------------

/// The session pool never waits for capacity (a full pool is `Exhausted` at once): what an
/// acquire can wait for is another caller's establishment of its session. The followers'
/// waits count; the leader's establishment and hot acquires do not.
#[test]
fn session_followers_waits_are_timed_and_recorded_under_the_pools_name() {
    let recorded = run(|| async {
        let time = MockTime::new();
        let (fake, counts) = fake();
        let pool = SessionPool::builder(fake)
            .pool_size(4)
            .reaped_by_hand(&time)
            .name("daemon")
            .build()
            .unwrap();
        let pool = Arc::new(pool);
        let ctx = ctx();
        // Established by one caller (a leader, no wait), then hot.
        let first = pool.acquire("s", &ctx).await.unwrap();
        for _ in 0..3 {
            drop(pool.acquire("s", &ctx).await.unwrap());
        }
        let stats = pool.stats();
        assert_eq!((stats.waits, stats.wait_time), (0, Duration::ZERO));
        drop(first);

        counts.hold_bootstrap.store(true, Ordering::SeqCst);
        // Served: joins "a" while its leader bootstraps.
        let leader = spawn_acquire(&pool, "a");
        counts.bootstrap_entered().await;
        let mut served = pin!(pool.acquire("a", &ctx));
        assert!(poll_once(served.as_mut()).is_pending());
        time.advance(SERVED);
        counts.let_bootstrap_proceed();
        let session = served.await.unwrap();
        assert!(session.same_connection(&leader.await.unwrap().unwrap()));

        // Gives up while "b" is being established.
        let leader = spawn_acquire(&pool, "b");
        counts.bootstrap_entered().await;
        {
            let mut gives_up = pin!(pool.acquire("b", &ctx));
            assert!(poll_once(gives_up.as_mut()).is_pending());
            time.advance(GAVE_UP);
        }
        counts.let_bootstrap_proceed();
        leader.await.unwrap().unwrap();

        // Cut by the caller's deadline while "c" is being established.
        let leader = spawn_acquire(&pool, "c");
        counts.bootstrap_entered().await;
        {
            // The wait ends when the caller drops the acquire, here with the timeout.
            let mut timed = pin!(tokio::time::timeout(50 * MS, pool.acquire("c", &ctx)));
            assert!(poll_once(timed.as_mut()).is_pending());
            time.advance(TIMED_OUT);
            assert!(timed.await.is_err(), "the deadline passed");
        }
        counts.let_bootstrap_proceed();
        leader.await.unwrap().unwrap();
        settle_establishments(&pool).await;

        let stats = pool.stats();
        assert_eq!(
            (stats.waits, stats.wait_time),
            (3, SERVED + GAVE_UP + TIMED_OUT)
        );
        drop(session);
        pool.close();
    });
    recorded.assert_histograms(&[(
        "slotpool_session_wait_seconds{pool=daemon}",
        &[SERVED, GAVE_UP, TIMED_OUT],
    )]);
}
