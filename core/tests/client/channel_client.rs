//! ChannelPool and ClientPool through the public API: lowest-first placement, bounds, discard,
//! build failures and cancellation, nested reaping on a mock clock, and a multi-thread run
//! with exact accounting. No sleeps: time is `slotpool::Clock::mock()`, and tokio timeouts run
//! on a paused runtime clock.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::common::channel::{channel_pool, steered_channel_pool, Factory, Fixture, Lazy, IDLE};
use crate::common::{build_error, join_all, settle, spawn_with};
use slotpool::channel::{ChannelError, ChannelPool, ChannelPoolBuilder};
use slotpool::client::{ClientError, ClientPool, ClientPoolBuilder};
use slotpool::{ConfigError, Reach};

// ---------------------------------------------------------------------------------------------
// Channels
// ---------------------------------------------------------------------------------------------

/// Channels fill lowest id first, a full pool opens a new lazy channel, and room that frees up
/// on a low channel is preferred over a higher one.
#[test]
fn channels_fill_lowest_first_and_open_lazily_when_full() {
    let (_time, pool, live) = channel_pool(2);
    let guards: Vec<_> = (0..5).map(|_| pool.get().unwrap()).collect();
    let ids: Vec<u64> = guards.iter().map(|g| g.id()).collect();
    assert_eq!(
        ids,
        [0, 0, 1, 1, 2],
        "max_clients_per_channel = 2 respected"
    );
    assert_eq!(guards[4].channel().id, 2, "connect_lazy got the slot index");
    assert_eq!(live.load(Ordering::SeqCst), 3);
    let stats = pool.stats();
    assert_eq!(
        (stats.channels, stats.clients, stats.opened, stats.gets),
        (3, 5, 3, 5)
    );
    let mut guards = guards;
    // Free one unit on channel 0 and one on channel 1: the next get takes channel 0.
    drop(guards.remove(2));
    drop(guards.remove(0));
    assert_eq!(pool.get().unwrap().id(), 0);
    let again = pool.get().unwrap();
    assert_eq!(again.id(), 0);
    assert_eq!(pool.get().unwrap().id(), 1);
    assert_eq!(pool.stats().opened, 3, "no new channel while one has room");
}

/// Idle channels are reaped after the timeout (and not before); a held channel never is.
#[test]
fn idle_channels_are_reaped_and_held_ones_are_not() {
    let (time, pool, live) = channel_pool(1);
    let held = pool.get().unwrap();
    let idle = pool.get().unwrap();
    assert_eq!((held.id(), idle.id()), (0, 1));
    drop(idle);
    time.advance(IDLE - Duration::from_millis(5));
    assert_eq!(pool.reap(time.now()), 0, "not idle long enough");
    time.advance(Duration::from_millis(10));
    assert_eq!(pool.reap(time.now()), 1);
    assert_eq!(
        live.load(Ordering::SeqCst),
        1,
        "the reaped channel was dropped"
    );
    let stats = pool.stats();
    assert_eq!((stats.channels, stats.clients, stats.reaps), (1, 1, 1));
    // The held channel stays however long it is held.
    time.advance(IDLE * 10);
    assert_eq!(pool.reap(time.now()), 0);
    // A reaped slot is reused for the next new channel.
    let next = pool.get().unwrap();
    assert_eq!(next.id(), 1);
    assert_eq!(pool.stats().opened, 3);
    drop((held, next));
    time.advance(IDLE);
    assert_eq!(pool.reap(time.now()), 2);
    assert_eq!(live.load(Ordering::SeqCst), 0);
}

/// A channel taken again just before a reap pass is not reaped: its release restamps it.
#[test]
fn a_channel_used_since_it_went_idle_is_not_reaped() {
    let (time, pool, _live) = channel_pool(1);
    drop(pool.get().unwrap());
    time.advance(IDLE * 2);
    let taken = pool.get().unwrap();
    assert_eq!(taken.id(), 0, "the old channel is reused");
    assert_eq!(pool.reap(time.now()), 0, "held: never reaped");
    drop(taken);
    assert_eq!(
        pool.reap(time.now()),
        0,
        "just released: idle time restarts"
    );
    time.advance(IDLE);
    assert_eq!(pool.reap(time.now()), 1);
}

/// The channel pool is lock-free and never waits, so it builds without a runtime when no
/// background reaper is asked for, and with one it needs a runtime.
#[test]
fn channel_config_errors_are_typed() {
    let builder = || ChannelPool::builder(Lazy::default());
    let err = |b: ChannelPoolBuilder<Lazy>| build_error(b.build());
    assert_eq!(
        err(builder().max_clients_per_channel(0).reap_interval(None)),
        ConfigError::Zero("max_clients_per_channel")
    );
    assert!(matches!(
        err(builder()
            .max_clients_per_channel(1 << 30)
            .reap_interval(None)),
        ConfigError::TooLarge {
            name: "max_clients_per_channel",
            ..
        }
    ));
    assert_eq!(
        err(builder().reap_interval(Some(Duration::ZERO))),
        ConfigError::Zero("reap_interval")
    );
    assert_eq!(
        err(builder().reap_interval(Some(Duration::from_secs(1)))),
        ConfigError::Missing("tokio runtime")
    );
    assert!(builder().reap_interval(None).build().is_ok());
}

// ---------------------------------------------------------------------------------------------
// Clients
// ---------------------------------------------------------------------------------------------

/// Idle clients are reused lowest channel first, so high channels drain.
#[tokio::test]
async fn idle_clients_are_reused_lowest_channel_first() {
    let f = Fixture::new(2, None);
    let mut held = Vec::new();
    for _ in 0..6 {
        held.push(f.clients.acquire().await.unwrap());
    }
    let channels: Vec<u64> = held.iter().map(|g| g.channel_id()).collect();
    assert_eq!(channels, [0, 0, 1, 1, 2, 2]);
    assert_eq!(f.channels.stats().channels, 3);
    // Return them all in reverse order: reuse still starts from channel 0.
    while let Some(guard) = held.pop() {
        drop(guard);
    }
    let a = f.clients.acquire().await.unwrap();
    let b = f.clients.acquire().await.unwrap();
    let c = f.clients.acquire().await.unwrap();
    assert_eq!((a.channel_id(), b.channel_id(), c.channel_id()), (0, 0, 1));
    assert_eq!(f.clients.stats().created, 6, "all reused, none built");
    // Clients on channel 2 stay idle: after the timeout they and channel 2 are reaped while
    // channels 0 and 1 carry the load.
    drop(c);
    let c = f.clients.acquire().await.unwrap();
    assert_eq!(c.channel_id(), 1);
    f.time.advance(IDLE);
    let now = f.time.now();
    // Clients reused since (a, b, c) are held; the idle ones are the other client on channel 1
    // and both on channel 2.
    assert_eq!(f.clients.reap(now), 3);
    assert_eq!(f.channels.reap(now), 1, "channel 2 had only idle clients");
    assert_eq!(f.channels.stats().channels, 2);
    drop((a, b, c));
}

/// A guard derefs mutably to the client, and the same client comes back.
#[tokio::test]
async fn the_guard_derefs_to_the_client_and_returns_it() {
    let f = Fixture::new(4, Some(1));
    let mut guard = f.clients.acquire().await.unwrap();
    guard.uses += 1;
    assert_eq!(guard.channel().id, 0);
    assert_eq!(
        guard.channel,
        guard.channel_id(),
        "built on the channel it reports"
    );
    drop(guard);
    let guard = f.clients.acquire().await.unwrap();
    assert_eq!(guard.uses, 1);
    let stats = f.clients.stats();
    assert_eq!(
        (
            stats.acquires,
            stats.created,
            stats.clients,
            stats.in_use,
            stats.idle
        ),
        (2, 1, 1, 1, 0)
    );
}

/// With `max_clients` reached: `try_acquire` refuses, `acquire_timeout` times out, and
/// `acquire` waits and gets the client that is returned.
#[tokio::test(start_paused = true)]
async fn max_clients_waits_refuses_and_times_out() {
    let f = Fixture::new(4, Some(2));
    let a = f.clients.acquire().await.unwrap();
    let b = f.clients.acquire().await.unwrap();
    let err = f.clients.try_acquire().await.map(|_| ()).unwrap_err();
    assert!(matches!(err, ClientError::NoCapacity));
    assert_eq!(err.reach(), Reach::NotSent);
    // The paused runtime clock auto-advances to the deadline: no real waiting.
    let err = f
        .clients
        .acquire_timeout(Duration::from_secs(1))
        .await
        .map(|_| ())
        .unwrap_err();
    assert!(matches!(err, ClientError::Timeout { waited } if waited == Duration::from_secs(1)));
    let waiter = spawn_with(&f.clients, |clients| async move {
        clients.acquire().await.map(|g| g.slot())
    });
    settle(|| f.clients.stats().waiting > 0).await;
    // The pool's (mock) clock: the waiter waits 3 s on it; the timed-out wait took none of it.
    f.time.advance(Duration::from_secs(3));
    let slot_b = b.slot();
    drop(b);
    assert_eq!(
        waiter.await.unwrap().unwrap(),
        slot_b,
        "the waiter got the returned client"
    );
    let stats = f.clients.stats();
    assert_eq!(
        (stats.created, stats.waits, stats.clients, stats.waiting),
        (2, 2, 2, 0),
        "the timed-out acquire waited too"
    );
    assert_eq!(stats.wait_time, Duration::from_secs(3));
    assert_eq!(stats.capacity, Some(2));
    drop(a);
}

/// `discard` drops the client and frees its slot and its channel share.
#[tokio::test]
async fn discard_frees_the_slot_and_the_channel() {
    let f = Fixture::new(1, Some(1));
    let guard = f.clients.acquire().await.unwrap();
    assert_eq!(f.channels.stats().clients, 1);
    guard.discard();
    let stats = f.clients.stats();
    assert_eq!((stats.clients, stats.discards), (0, 1));
    assert_eq!(f.knobs.live.load(Ordering::SeqCst), 0);
    assert_eq!(
        f.channels.stats().clients,
        0,
        "the channel share was released"
    );
    // Its last client left it broken: the channel closed at once, not after the idle
    // timeout, and the next client opens a new one (in the same, lowest, slot).
    let channels = f.channels.stats();
    assert_eq!(
        (channels.channels, channels.broken, channels.reaps),
        (0, 1, 0)
    );
    let next = f.clients.try_acquire().await.unwrap();
    assert_eq!(next.channel_id(), 0);
    assert_eq!(
        (f.clients.stats().created, f.channels.stats().opened),
        (2, 2)
    );
}

/// A broken client's channel stays open while other clients use it (new ones may join it);
/// the release that leaves it empty closes it, without waiting for the idle timeout. A
/// client returned (not discarded) never marks its channel.
#[tokio::test]
async fn a_broken_clients_channel_closes_when_its_last_client_leaves() {
    let f = Fixture::new(3, None);
    let broken = f.clients.acquire().await.unwrap();
    let healthy = f.clients.acquire().await.unwrap();
    assert_eq!((broken.channel_id(), healthy.channel_id()), (0, 0));
    broken.discard();
    assert_eq!(
        f.channels.stats().channels,
        1,
        "the other client still uses it"
    );
    let joined = f.clients.acquire().await.unwrap();
    assert_eq!(
        joined.channel_id(),
        0,
        "a marked channel still takes clients"
    );
    drop(healthy); // idle in the client pool: its share of channel 0 stays
    assert_eq!(f.channels.stats().channels, 1);
    joined.discard();
    // The idle client still holds its share: the channel stays until that client goes.
    assert_eq!(f.channels.stats().channels, 1);
    f.time.advance(IDLE);
    assert_eq!(f.clients.reap(f.time.now()), 1);
    let channels = f.channels.stats();
    assert_eq!(
        (channels.channels, channels.broken, channels.reaps),
        (0, 1, 0),
        "closed by the idle client's release, not by a channel reap"
    );

    // Healthy clients only: the channel is an ordinary idle one, kept for the timeout.
    let a = f.clients.acquire().await.unwrap();
    let b = f.clients.acquire().await.unwrap();
    drop((a, b));
    f.time.advance(IDLE);
    assert_eq!(f.clients.reap(f.time.now()), 2);
    assert_eq!(f.channels.stats().channels, 1, "not marked: kept");
    assert_eq!(
        f.channels.reap(f.time.now()),
        1,
        "closed by the idle timeout"
    );
    assert_eq!(f.channels.stats().broken, 1);
}

/// Only a broken release marks a channel: an ordinary release at the end of the stamps'
/// range (2^40 ms of the pool's clock, some 35 years) is clamped below the mark, so the
/// channel stays.
#[tokio::test]
async fn a_release_at_the_end_of_the_stamps_range_does_not_mark_the_channel() {
    let f = Fixture::new(2, None);
    f.time.advance(Duration::from_millis(1 << 40));
    let guard = f.channels.get().unwrap();
    drop(guard);
    let stats = f.channels.stats();
    assert_eq!(
        (stats.channels, stats.broken),
        (1, 0),
        "kept: not marked broken"
    );
}

/// A failed build returns a typed, retry-safe error and frees the slot and the channel share.
#[tokio::test]
async fn make_failure_frees_capacity() {
    let f = Fixture::new(1, Some(1));
    f.knobs.fail_next.store(1, Ordering::SeqCst);
    let err = f.clients.acquire().await.map(|_| ()).unwrap_err();
    assert!(matches!(err, ClientError::Make { .. }), "{err}");
    assert!(err.reach().retry_is_safe());
    let stats = f.clients.stats();
    assert_eq!(
        (stats.clients, stats.in_use, stats.make_failures),
        (0, 0, 1)
    );
    assert_eq!(f.channels.stats().clients, 0);
    let guard = f.clients.try_acquire().await.unwrap();
    assert_eq!(guard.channel_id(), 0);
}

/// A build cancelled by the caller's deadline frees its slot and channel share; no lock is held
/// across a build, so another caller takes an idle client meanwhile.
#[tokio::test(start_paused = true)]
async fn a_cancelled_build_frees_capacity_and_blocks_nobody() {
    let f = Fixture::new(1, Some(2));
    let first = f.clients.acquire().await.unwrap();
    f.knobs.hang.store(true, Ordering::SeqCst);
    let building = spawn_with(&f.clients, |clients| async move {
        clients
            .acquire_timeout(Duration::from_secs(5))
            .await
            .map(|_| ())
    });
    settle(|| f.channels.stats().clients >= 2).await;
    // A build is in flight; returning and re-taking the idle client is not held up by it.
    drop(first);
    let again = f.clients.try_acquire().await.unwrap();
    assert_eq!(again.channel_id(), 0);
    assert!(matches!(
        building.await.unwrap(),
        Err(ClientError::Timeout { .. })
    ));
    assert_eq!(
        f.clients.stats().clients,
        1,
        "the cancelled build's slot is free"
    );
    assert_eq!(f.channels.stats().clients, 1, "its channel share too");
    f.knobs.hang.store(false, Ordering::SeqCst);
    let second = f.clients.try_acquire().await.unwrap();
    assert_eq!(second.channel_id(), 1);
}

/// Nested reaping: once every guard is dropped and the mock clock passes the idle timeout,
/// one client reap and then one channel reap at the same instant leave nothing.
#[tokio::test]
async fn nested_reaping_leaves_nothing() {
    let f = Fixture::new(2, None);
    let mut held = Vec::new();
    for _ in 0..5 {
        held.push(f.clients.acquire().await.unwrap());
    }
    assert_eq!(f.channels.stats().channels, 3);
    drop(held);
    let stats = f.clients.stats();
    assert_eq!((stats.clients, stats.idle, stats.in_use), (5, 5, 0));
    let now = f.time.now();
    assert_eq!(
        (f.clients.reap(now), f.channels.reap(now)),
        (0, 0),
        "nothing idle long enough"
    );
    f.time.advance(IDLE + Duration::from_millis(1));
    let now = f.time.now();
    assert_eq!(f.clients.reap(now), 5);
    assert_eq!(f.channels.reap(now), 3);
    f.assert_all_reaped();
    assert_eq!((f.clients.stats().reaps, f.channels.stats().reaps), (5, 3));
}

/// A reap never takes a client or channel that was just acquired, nor one used since.
#[tokio::test]
async fn a_reap_never_takes_a_just_acquired_client_or_its_channel() {
    let f = Fixture::new(1, None);
    let a = f.clients.acquire().await.unwrap();
    let b = f.clients.acquire().await.unwrap();
    drop((a, b));
    f.time.advance(IDLE * 3);
    // Both are long idle; one is taken right before the pass.
    let taken = f.clients.acquire().await.unwrap();
    assert_eq!(taken.channel_id(), 0);
    let now = f.time.now();
    assert_eq!(f.clients.reap(now), 1, "only the other one");
    assert_eq!(f.channels.reap(now), 1, "only the other one's channel");
    assert_eq!(f.channels.stats().channels, 1);
    drop(taken);
    // Just returned: idle time restarts now.
    assert_eq!(f.clients.reap(f.time.now()), 0);
    f.time.advance(IDLE);
    let now = f.time.now();
    assert_eq!((f.clients.reap(now), f.channels.reap(now)), (1, 1));
    f.assert_all_reaped();
}

/// `close` wakes waiters with `Closed`, drops idle clients, and clients returned later are
/// dropped too; everything is released.
#[tokio::test]
async fn close_wakes_waiters_and_drops_clients() {
    let f = Fixture::new(4, Some(1));
    let held = f.clients.acquire().await.unwrap();
    let waiter = spawn_with(&f.clients, |clients| async move {
        clients.acquire().await.map(|_| ())
    });
    settle(|| f.clients.stats().waiting > 0).await;
    f.clients.close();
    assert!(matches!(waiter.await.unwrap(), Err(ClientError::Closed)));
    assert!(matches!(
        f.clients.try_acquire().await.map(|_| ()),
        Err(ClientError::Closed)
    ));
    drop(held);
    assert_eq!(f.clients.stats().clients, 0);
    assert_eq!(f.knobs.live.load(Ordering::SeqCst), 0);
    assert_eq!(f.channels.stats().clients, 0);
}

/// Dropping the pool handles ends the reaper tasks even while guards live: the tasks hold only
/// `Weak`s, and a guard returned afterwards drops its client and releases its channel.
#[tokio::test]
async fn dropping_the_pools_ends_their_tasks() {
    let (connector, live_channels) = Lazy::counted();
    let channels = ChannelPool::builder(connector)
        .reap_interval(Some(Duration::from_secs(3600)))
        .build()
        .unwrap();
    let (factory, knobs) = Factory::steered();
    let clients = ClientPool::builder(Arc::clone(&channels), factory)
        .reap_interval(Some(Duration::from_secs(3600)))
        .build()
        .unwrap();
    let guard = clients.acquire().await.unwrap();
    let weak_clients = Arc::downgrade(&clients);
    drop(clients);
    assert!(
        weak_clients.upgrade().is_none(),
        "the guard does not keep the pool handle alive"
    );
    drop(guard);
    assert_eq!(
        knobs.live.load(Ordering::SeqCst),
        0,
        "returned to a dropped pool: dropped"
    );
    let weak_channels = Arc::downgrade(&channels);
    drop(channels);
    assert!(weak_channels.upgrade().is_none());
    assert_eq!(live_channels.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn client_config_errors_are_typed() {
    let (_, channels, _) = channel_pool(1);
    let builder = || ClientPool::builder(Arc::clone(&channels), Factory::default());
    let err = |b: ClientPoolBuilder<Lazy, Factory>| build_error(b.build());
    assert_eq!(
        err(builder().max_clients(Some(0)).reap_interval(None)),
        ConfigError::Zero("max_clients")
    );
    assert!(matches!(
        err(builder().max_clients(Some(usize::MAX)).reap_interval(None)),
        ConfigError::TooLarge {
            name: "max_clients",
            ..
        }
    ));
    assert_eq!(
        err(builder().reap_interval(Some(Duration::ZERO))),
        ConfigError::Zero("reap_interval")
    );
}

// ---------------------------------------------------------------------------------------------
// User code that panics
// ---------------------------------------------------------------------------------------------

/// A connector that panics is contained: the get that ran it gets `ChannelError::Panicked`
/// (nothing sent), the slot it was opening is reused at once (before, the panic unwound
/// through the pool and left the slot claimed for good), and no second panic follows.
#[test]
fn a_panicking_channel_connector_is_contained() {
    let (_, pool, live, panics) = steered_channel_pool(2);
    panics.next.store(1, Ordering::SeqCst);
    let error = pool.get().unwrap_err();
    let ChannelError::Panicked(panic) = &error else {
        panic!("a panicking connector is `Panicked`, got {error}");
    };
    assert_eq!(panic.message(), "connect_lazy panics");
    assert!(error.reach().retry_is_safe());
    assert_eq!(pool.stats().panics, 1);
    assert_eq!(pool.stats().channels, 0, "nothing was opened");
    let guard = pool.get().unwrap();
    assert_eq!(guard.id(), 0, "the slot of the panicked connect is reused");
    assert_eq!(live.load(Ordering::SeqCst), 1);
}

/// A client whose destructor panics is contained wherever the pool drops it (the reaper, a
/// discard): no panic leaves the pool, and the client's room and channel share come back.
#[test]
fn a_panicking_client_destructor_is_contained() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let f = rt.block_on(async { Fixture::new(4, Some(1)) });
    drop(rt.block_on(f.clients.acquire()).unwrap());
    f.knobs.panic_on_drop.store(true, Ordering::SeqCst);
    f.time.advance(IDLE * 2);
    assert_eq!(
        f.clients.reap(f.time.now()),
        1,
        "reaped, the panic contained"
    );
    let guard = rt.block_on(f.clients.acquire()).unwrap();
    guard.discard();
    assert_eq!(f.knobs.live.load(Ordering::SeqCst), 0);
    assert_eq!(
        f.channels.stats().clients,
        0,
        "the channel shares came back"
    );
    let again = rt.block_on(f.clients.try_acquire());
    assert!(again.is_ok(), "the room came back: {:?}", again.err());
}

/// A client factory that panics, in the call or while its future is polled, is contained:
/// `ClientError::Panicked` for that caller, the slot and its channel share freed (a pool of
/// one client is not dead), and a connector panic under it is `ClientError::Channel`.
#[tokio::test]
async fn a_panicking_client_factory_is_contained() {
    let f = Fixture::new(4, Some(1));
    // No channel yet: the first build connects one, and the connector panics.
    f.connector_panics.next.store(1, Ordering::SeqCst);
    let error = f.clients.acquire().await.unwrap_err();
    assert!(
        matches!(error, ClientError::Channel(ChannelError::Panicked(_))),
        "{error}"
    );
    f.knobs.panics.next.store(1, Ordering::SeqCst);
    let error = f.clients.acquire().await.unwrap_err();
    assert!(
        matches!(&error, ClientError::Panicked(panic) if panic.message() == "make panics"),
        "{error}"
    );
    assert!(error.reach().retry_is_safe());
    f.knobs.panic_in_call.store(true, Ordering::SeqCst);
    let error = f.clients.acquire().await.unwrap_err();
    assert!(
        matches!(&error, ClientError::Panicked(panic) if panic.message().contains("before")),
        "{error}"
    );
    let (clients, channels) = (f.clients.stats(), f.channels.stats());
    assert_eq!(
        (clients.clients, clients.make_failures),
        (0, 3),
        "{clients:?}"
    );
    assert_eq!(channels.clients, 0, "every channel share was released");
    let guard = f.clients.acquire().await.unwrap();
    assert_eq!(guard.uses, 0, "the one-client pool builds again");
    drop(guard);
    f.time.advance(IDLE * 2);
    let now = f.time.now();
    f.clients.reap(now);
    f.channels.reap(now);
    f.assert_all_reaped();
}

// ---------------------------------------------------------------------------------------------
// Concurrency
// ---------------------------------------------------------------------------------------------

/// 32 tasks on 4 workers hammer a pool of 8 clients over channels of 3, with discards and
/// reaps racing them, and the factory and the channel connector panicking now and then: no
/// client is ever used by two tasks at once, `max_clients` is never overshot, every panic
/// reaches exactly the caller that ran it, and at the end the books balance exactly and
/// everything can be reaped.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_acquire_release_discard_and_reap_balance_exactly() {
    const TASKS: usize = 32;
    const ROUNDS: usize = 300;
    const MAX: usize = 8;
    let f = Fixture::new(3, Some(MAX));
    f.knobs.panics.every.store(7, Ordering::SeqCst);
    f.connector_panics.every.store(5, Ordering::SeqCst);
    let peak = Arc::new(AtomicUsize::new(0));
    let in_use = Arc::new(AtomicUsize::new(0));
    let panicked = Arc::new(AtomicUsize::new(0));
    let mut handles = Vec::new();
    for task in 0..TASKS {
        let (peak, in_use, panicked) = (
            Arc::clone(&peak),
            Arc::clone(&in_use),
            Arc::clone(&panicked),
        );
        handles.push(spawn_with(&f.clients, move |clients| async move {
            for round in 0..ROUNDS {
                let mut guard = match clients.acquire().await {
                    Ok(guard) => guard,
                    Err(ClientError::Panicked(_) | ClientError::Channel(_)) => {
                        panicked.fetch_add(1, Ordering::SeqCst);
                        continue;
                    }
                    Err(other) => panic!("unexpected {other}"),
                };
                let now = in_use.fetch_add(1, Ordering::SeqCst) + 1;
                peak.fetch_max(now, Ordering::SeqCst);
                assert!(
                    !guard.in_use.swap(true, Ordering::SeqCst),
                    "a client handed to two callers"
                );
                guard.uses += 1;
                if round % 4 == 0 {
                    tokio::task::yield_now().await;
                }
                guard.in_use.store(false, Ordering::SeqCst);
                in_use.fetch_sub(1, Ordering::SeqCst);
                if (task + round) % 37 == 0 {
                    guard.discard();
                }
            }
        }));
    }
    // A reaper racing the tasks with a clock that says everything idle is long idle.
    let reaper = {
        let (channels, time) = (Arc::clone(&f.channels), f.time.clone());
        spawn_with(&f.clients, move |clients| async move {
            for _ in 0..200 {
                time.advance(IDLE);
                let now = time.now();
                clients.reap(now);
                channels.reap(now);
                tokio::task::yield_now().await;
            }
        })
    };
    join_all(handles).await;
    reaper.await.unwrap();
    assert!(peak.load(Ordering::SeqCst) <= MAX, "max_clients overshot");
    let stats = f.clients.stats();
    assert_eq!((stats.in_use, stats.waiting), (0, 0), "{stats:?}");
    assert!(stats.clients <= MAX);
    let panicked = panicked.load(Ordering::SeqCst) as u64;
    assert!(panicked > 0, "the storm had no panics");
    assert_eq!(stats.make_failures, panicked, "{stats:?}");
    assert_eq!(stats.acquires, (TASKS * ROUNDS) as u64 - panicked);
    // Every client built is live, discarded or reaped, exactly once.
    assert_eq!(
        stats.created,
        stats.clients as u64 + stats.discards + stats.reaps,
        "{stats:?}"
    );
    assert_eq!(f.knobs.live.load(Ordering::SeqCst), stats.clients);
    // Every live client holds one channel share, and nothing else does.
    let channels = f.channels.stats();
    assert_eq!(channels.clients, stats.clients as u64, "{channels:?}");
    assert_eq!(f.live_channels.load(Ordering::SeqCst), channels.channels);
    f.time.advance(IDLE * 2);
    let now = f.time.now();
    f.clients.reap(now);
    f.channels.reap(now);
    f.assert_all_reaped();
}

/// The pool measures idle time on the clock it was given (`ChannelPool::clock` is that clock),
/// and its builder prints the settings it was given.
#[test]
fn the_pool_keeps_its_clock_and_the_builder_prints_its_settings() {
    let (time, pool, _) = channel_pool(3);
    let start = pool.clock().now();
    time.advance(Duration::from_secs(42));
    assert_eq!(
        pool.clock().now().duration_since(start),
        Duration::from_secs(42),
        "the injected mock clock"
    );
    let builder = ChannelPool::builder(Lazy::default()).max_clients_per_channel(5);
    let printed = format!("{builder:?}");
    assert!(
        printed.starts_with("ChannelPoolBuilder") && printed.contains("max_clients_per_channel: 5"),
        "{printed}"
    );
}

/// Each held client names its own slot, lowest first: two clients held at once are in slots 0
/// and 1, and the one returned last is the one taken next (the lowest idle slot).
#[tokio::test]
async fn held_clients_name_their_slots_lowest_first() {
    let f = Fixture::new(2, Some(2));
    let a = f.clients.acquire().await.unwrap();
    let b = f.clients.acquire().await.unwrap();
    assert_eq!((a.slot(), b.slot()), (0, 1));
    drop(a);
    let again = f.clients.acquire().await.unwrap();
    assert_eq!(again.slot(), 0);
}

/// The client pool's held-too-long watch, as the managed pool's: a client held past the
/// threshold is reported once while held, with the call site of its `acquire`, and again as
/// it comes back; hold times add up. On the mock clock, looked at by `reap`.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_client_held_too_long_is_reported_with_its_call_site() {
    use crate::common::ReapByHand;
    let (logs, _guard) = crate::common::logs::capture_logs();
    let (time, channels, _, _) = crate::common::channel::steered_channel_pool(4);
    let (factory, _) = Factory::steered();
    let clients = ClientPool::builder(Arc::clone(&channels), factory)
        .held_too_long(Some(Duration::from_secs(10)))
        .reaped_by_hand(&time)
        .build()
        .unwrap();
    let line = line!() + 1;
    let held = clients.acquire().await.unwrap();
    let site = format!("{}:{line}", file!());
    let brief = clients.try_acquire().await.unwrap();
    time.advance(Duration::from_secs(4));
    drop(brief);
    time.advance(Duration::from_secs(7));
    clients.reap(time.now());
    assert_eq!(clients.stats().held_too_long, 1, "reported while held");
    let text = logs.text();
    assert!(
        text.contains("held too long") && text.contains(&site),
        "{text}"
    );
    clients.reap(time.now());
    assert_eq!(clients.stats().held_too_long, 1, "once");
    drop(held);
    assert!(logs.text().contains("came back"), "{}", logs.text());
    assert_eq!(
        clients.stats().hold_time,
        Duration::from_secs(15),
        "4 s and 11 s"
    );
    let error = ClientPool::builder(channels, Factory::steered().0)
        .held_too_long(Some(Duration::ZERO))
        .build()
        .unwrap_err();
    assert!(
        matches!(error, ConfigError::Zero("held_too_long")),
        "{error}"
    );
}

/// `ChannelPool::close`: later gets fail with `Closed` (retry-safe), channels without
/// clients close at once, and a channel with clients closes at the first reap pass after its
/// last client leaves, however short its idle time.
#[test]
fn a_closed_channel_pool_refuses_gets_and_closes_its_channels() {
    let (time, pool, live) = channel_pool(1);
    let (held, idle) = (pool.get().unwrap(), pool.get().unwrap());
    drop(idle);
    assert_eq!(live.load(Ordering::SeqCst), 2);
    assert!(!pool.is_closed());
    pool.close();
    assert!(pool.is_closed());
    assert_eq!(
        live.load(Ordering::SeqCst),
        1,
        "the idle channel closed at once"
    );
    let error = pool.get().unwrap_err();
    assert!(matches!(error, ChannelError::Closed), "{error}");
    assert_eq!(error.reach(), Reach::NotSent);
    drop(held);
    assert_eq!(
        pool.reap(time.now()),
        1,
        "closed: no idle timeout to wait for"
    );
    assert_eq!((live.load(Ordering::SeqCst), pool.stats().channels), (0, 0));
    pool.close();
    assert!(pool.is_closed(), "idempotent");
}
