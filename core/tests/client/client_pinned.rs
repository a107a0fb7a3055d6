//! `ClientPool`: documented behaviours that no other test pinned (see `docs/pinned.md`): the
//! builder's defaults, the background reaper's interval and the staleness it adds to the idle
//! timeout, FIFO waiters and the wake-up a dropped waiter passes on, what `close` and the last
//! handle's drop do with idle clients, and the single log line of a contained panic. Time is
//! `slotpool::Clock::mock()`; the background reaper ticks on a paused tokio clock the test moves
//! by hand. One real-clock test sleeps to let real time pass, never to wait for a condition.

use std::pin::pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crate::common::channel::{channel_pool, Factory, Fixture, Lazy, IDLE};
use crate::common::logs::capture_logs;
use crate::common::{poll_once, run_spawned, settle, spawn_with};
use slotpool::channel::ChannelPool;
use slotpool::client::{ClientError, ClientPool};
use slotpool::Reach;

const MS: Duration = Duration::from_millis(1);

/// Moves tokio's paused clock by `by` and lets the reaper task run its tick.
async fn tick(by: Duration) {
    run_spawned().await;
    tokio::time::advance(by).await;
    run_spawned().await;
}

/// Module docs: with `max_clients` reached "callers wait for one (FIFO ...)": the first to
/// wait is served first.
#[tokio::test]
async fn waiters_are_served_in_fifo_order() {
    let f = Fixture::new(4, Some(1));
    let held = f.clients.acquire().await.unwrap();
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for n in 0..3 {
        let order = Arc::clone(&order);
        waiters.push(spawn_with(&f.clients, move |clients| async move {
            let guard = clients.acquire().await.unwrap();
            order.lock().unwrap().push(n);
            tokio::task::yield_now().await;
            drop(guard);
        }));
        settle(|| f.clients.stats().waiting == n + 1).await;
    }
    drop(held);
    for waiter in waiters {
        waiter.await.unwrap();
    }
    assert_eq!(*order.lock().unwrap(), [0, 1, 2]);
}

/// `acquire`'s cancel-safety: "dropping the future while it waits for capacity takes nothing
/// (a wake-up it had received passes to the next waiter)".
#[tokio::test]
async fn a_waiter_dropped_after_its_wake_up_passes_it_on() {
    let f = Fixture::new(4, Some(1));
    let held = f.clients.acquire().await.unwrap();
    let slot = held.slot();
    let second = {
        let mut first = pin!(f.clients.acquire());
        assert!(poll_once(first.as_mut()).is_pending());
        let second = spawn_with(&f.clients, |clients| async move {
            clients.acquire().await.map(|g| g.slot())
        });
        settle(|| f.clients.stats().waiting == 2).await;
        drop(held); // wakes `first`, dropped at the end of this block without another poll
        second
    };
    crate::common::settle_until("the second waiter was never served", || {
        second.is_finished()
    })
    .await;
    assert_eq!(
        second.await.unwrap().unwrap(),
        slot,
        "the wake-up passed on"
    );
    let stats = f.clients.stats();
    assert_eq!((stats.waiting, stats.in_use, stats.clients), (0, 0, 1));
}

/// *Idle time*: under a background reaper a client is reaped after the idle timeout **plus
/// the reap interval** (the stamp's staleness bound), and the channel it leaves idle is closed
/// by a channel reap at the same instant (nested reaping).
#[tokio::test(start_paused = true)]
async fn a_background_reaper_adds_its_interval_to_the_idle_timeout() {
    let (time, channels, live_channels) = channel_pool(1);
    let (factory, knobs) = Factory::steered();
    let clients = ClientPool::builder(Arc::clone(&channels), factory)
        .idle_timeout(IDLE)
        .reap_interval(Some(Duration::from_secs(5)))
        .clock(time.clock())
        .build()
        .unwrap();
    drop(clients.acquire().await.unwrap());
    time.advance(IDLE);
    assert_eq!(
        clients.reap(time.now()),
        0,
        "the timeout alone is not enough"
    );
    time.advance(Duration::from_secs(5) - MS);
    assert_eq!(clients.reap(time.now()), 0);
    time.advance(MS);
    let now = time.now();
    assert_eq!(clients.reap(now), 1, "timeout plus the reap interval");
    assert_eq!(knobs.live.load(Ordering::SeqCst), 0);
    assert_eq!(
        channels.reap(now),
        1,
        "its channel goes in the same instant"
    );
    assert_eq!(live_channels.load(Ordering::SeqCst), 0);
}

/// Builder defaults: `max_clients` unbounded, idle timeout 180 s, and the clock is the
/// channel pool's ("Default: the channel pool's clock").
#[tokio::test]
async fn defaults_are_unbounded_180_seconds_on_the_channel_pools_clock() {
    let (time, channels, _live) = channel_pool(4);
    let (factory, knobs) = Factory::steered();
    let clients = ClientPool::builder(channels, factory)
        .reap_interval(None)
        .build()
        .unwrap();
    let held: Vec<_> = {
        let mut held = Vec::new();
        for _ in 0..64 {
            held.push(clients.try_acquire().await.unwrap());
        }
        held
    };
    assert_eq!(clients.stats().capacity, None);
    drop(held);
    time.advance(Duration::from_secs(180) - MS);
    assert_eq!(clients.reap(time.now()), 0, "idle 1 ms short of 180 s");
    time.advance(MS);
    assert_eq!(
        clients.reap(time.now()),
        64,
        "idle 180 s on the channels' mock clock"
    );
    assert_eq!(knobs.live.load(Ordering::SeqCst), 0);
}

/// Builder: "How often the background reaper runs `ClientPool::reap`. Default: every 10 s."
#[tokio::test(start_paused = true)]
async fn the_default_reaper_runs_every_10_seconds() {
    let (time, channels, _live) = channel_pool(4);
    let (factory, knobs) = Factory::steered();
    let clients = ClientPool::builder(channels, factory)
        .idle_timeout(Duration::from_secs(1))
        .clock(time.clock())
        .build()
        .unwrap();
    drop(clients.acquire().await.unwrap());
    // Idle long past the timeout plus the (default) reap interval's staleness.
    time.advance(Duration::from_secs(30));
    tick(Duration::from_secs(10) - MS).await;
    assert_eq!(clients.stats().clients, 1, "no tick before 10 s");
    tick(MS).await;
    assert_eq!(clients.stats().reaps, 1, "reaped at the 10 s tick");
    assert_eq!(knobs.live.load(Ordering::SeqCst), 0);
}

/// `close`: "idle clients are dropped now"; later acquires get `Closed`, which is `NotSent`.
#[tokio::test]
async fn close_drops_idle_clients_at_once() {
    let f = Fixture::new(4, None);
    let (a, b) = (
        f.clients.acquire().await.unwrap(),
        f.clients.acquire().await.unwrap(),
    );
    drop((a, b));
    assert_eq!(f.knobs.live.load(Ordering::SeqCst), 2);
    f.clients.close();
    assert_eq!(
        f.knobs.live.load(Ordering::SeqCst),
        0,
        "idle clients dropped"
    );
    assert_eq!(
        f.channels.stats().clients,
        0,
        "their channel shares released"
    );
    let error = f.clients.acquire().await.map(|_| ()).unwrap_err();
    assert!(matches!(error, ClientError::Closed), "{error}");
    assert_eq!(error.reach(), Reach::NotSent);
}

/// `ClientStats::discards`: "Clients discarded by their guard (or returned to a closed
/// pool)".
#[tokio::test]
async fn a_client_returned_to_a_closed_pool_counts_as_a_discard() {
    let f = Fixture::new(4, None);
    let held = f.clients.acquire().await.unwrap();
    f.clients.close();
    assert_eq!(f.clients.stats().discards, 0);
    drop(held);
    let stats = f.clients.stats();
    assert_eq!((stats.discards, stats.clients), (1, 0), "{stats:?}");
    assert_eq!(f.knobs.live.load(Ordering::SeqCst), 0);
}

/// *Lifetimes*: "dropping the last handle closes the pool (... idle clients are dropped ...)",
/// breaking the cycle their anchors make through the shared state.
#[tokio::test]
async fn dropping_the_last_handle_drops_idle_clients() {
    let (connector, live_channels) = Lazy::counted();
    let channels = ChannelPool::builder(connector)
        .reap_interval(None)
        .build()
        .unwrap();
    let (factory, knobs) = Factory::steered();
    let clients = ClientPool::builder(Arc::clone(&channels), factory)
        .reap_interval(None)
        .build()
        .unwrap();
    let (a, b) = (
        clients.acquire().await.unwrap(),
        clients.acquire().await.unwrap(),
    );
    drop((a, b));
    drop(clients);
    assert_eq!(knobs.live.load(Ordering::SeqCst), 0, "idle clients dropped");
    assert_eq!(channels.stats().clients, 0, "their channel shares released");
    drop(channels);
    assert_eq!(live_channels.load(Ordering::SeqCst), 0);
}

/// *Failure model*: a panic of the factory or of the channel connector under it is "logged
/// once".
#[tokio::test]
async fn a_contained_panic_is_logged_once() {
    let f = Fixture::new(4, None);
    let (logs, _guard) = capture_logs();
    f.connector_panics.next.store(1, Ordering::SeqCst);
    assert!(f.clients.acquire().await.is_err());
    f.knobs.panics.next.store(1, Ordering::SeqCst);
    assert!(f.clients.acquire().await.is_err());
    let text = logs.text();
    assert_eq!(text.matches("connect_lazy panics").count(), 1, "{text}");
    assert_eq!(text.matches("make panics").count(), 1, "{text}");
}

/// *Idle time*: "with manual `reap` calls its idle time counts from its release or from the
/// last reap pass before it, whichever is later", as the docs said then; they now say a pool
/// without a background reaper reads the clock on each return. On the default clock
/// (`slotpool::Clock::new()`, no upkeep thread) `recent()` reads 0, so a return was stamped with
/// the last reap pass (or the pool's start) alone: a client held for 400 ms and reaped right
/// after its return was taken as idle for 400 ms.
#[test]
fn manual_reaps_count_idle_time_from_the_release_on_a_real_clock() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let channels = ChannelPool::builder(Lazy::default())
        .reap_interval(None)
        .build()
        .unwrap();
    let clients = ClientPool::builder(Arc::clone(&channels), Factory::default())
        .idle_timeout(Duration::from_millis(200))
        .reap_interval(None)
        .build()
        .unwrap();
    let guard = rt.block_on(clients.acquire()).unwrap();
    // Real time passes while the client is in use (not idle).
    std::thread::sleep(Duration::from_millis(400));
    drop(guard);
    let now = clients.channels().clock().now();
    assert_eq!(
        clients.reap(now),
        0,
        "a client returned a moment ago was reaped as if idle since the pool started"
    );
}
