//! A compile-time promise: every public type, and every future a public method returns, is
//! `Send`, `Sync`, `'static` and `Unpin` where users need it to be (tokio's
//! `async_send_sync` is the model). A change that loses one of these fails to compile here
//! instead of reaching a user. Nothing runs: the closures below are type-checked, never called.

#![allow(dead_code, clippy::let_underscore_future)]

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::common::channel::{Factory, Lazy};
use crate::common::managed::Scripted;
use crate::common::session::Fake;
use crate::common::stream::TestConnector;
use slotpool::channel::ChannelPool;
use slotpool::client::ClientPool;
use slotpool::keyed::Keyed;
use slotpool::session::{SessionContext, SessionPool};
use slotpool::stream::StreamPool;

fn send<T: Send>() {}
fn sync<T: Sync>() {}
fn unpin<T: Unpin>() {}
fn owned<T: 'static>() {}

/// `Send + Sync + 'static`: what a handle shared between tasks needs.
fn shareable<T: Send + Sync + 'static>() {}

/// A future that can be spawned on a multi-thread runtime.
fn spawnable<F: Future + Send>(_: F) {}

/// A future that borrows nothing: it can be spawned as it is (`'static`).
fn spawnable_owned<F: Future + Send + 'static>(_: F) {}

#[test]
fn the_pools_and_their_builders() {
    shareable::<slotpool::managed::Pool<Scripted>>();
    shareable::<slotpool::managed::PoolBuilder<Scripted>>();
    shareable::<ChannelPool<Lazy>>();
    shareable::<ClientPool<Lazy, Factory>>();
    shareable::<Keyed<&'static str>>();
    shareable::<slotpool::keyed::KeyedBuilder<&'static str>>();
    shareable::<SessionPool<Fake>>();
    shareable::<StreamPool<TestConnector>>();
    shareable::<slotpool::stream::StreamPoolBuilder<TestConnector>>();
    shareable::<slotpool::Clock>();
    shareable::<slotpool::MockClock>();
    shareable::<slotpool::Instant>();
    unpin::<slotpool::managed::Pool<Scripted>>();
    unpin::<SessionPool<Fake>>();
    unpin::<StreamPool<TestConnector>>();
}

#[test]
fn the_guards_are_owned_and_move_between_threads() {
    // Owned guards: `'static`, `Send`, and `Unpin` (they can be held across awaits and moved
    // into spawned tasks).
    shareable::<slotpool::managed::Object<Scripted>>();
    unpin::<slotpool::managed::Object<Scripted>>();
    send::<slotpool::client::ClientGuard<Lazy, Factory>>();
    owned::<slotpool::client::ClientGuard<Lazy, Factory>>();
    unpin::<slotpool::client::ClientGuard<Lazy, Factory>>();
    send::<slotpool::channel::ChannelGuard<Lazy>>();
    owned::<slotpool::channel::ChannelGuard<Lazy>>();
    send::<slotpool::stream::OwnedStreamGuard<TestConnector>>();
    owned::<slotpool::stream::OwnedStreamGuard<TestConnector>>();
    send::<slotpool::stream::StreamGuard<'static, TestConnector>>();
    send::<slotpool::keyed::Admission>();
    owned::<slotpool::keyed::Admission>();
    send::<slotpool::session::Session<Fake>>();
    owned::<slotpool::session::Session<Fake>>();
    send::<slotpool::blocks::OwnedPermit>();
    owned::<slotpool::blocks::OwnedPermit>();
    send::<slotpool::blocks::Permit<'static>>();
    sync::<slotpool::blocks::Limit>();
    sync::<slotpool::blocks::Gate>();
}

#[test]
fn the_errors_and_stats_cross_threads() {
    shareable::<slotpool::ConfigError>();
    shareable::<slotpool::AcquireError>();
    shareable::<slotpool::TryAcquireError>();
    shareable::<slotpool::Closed>();
    shareable::<slotpool::Reach>();
    shareable::<slotpool::Panic>();
    shareable::<slotpool::managed::PoolError<crate::common::managed::Injected>>();
    shareable::<slotpool::managed::BuildError<crate::common::managed::Injected>>();
    shareable::<slotpool::managed::Stats>();
    shareable::<slotpool::managed::State>();
    shareable::<slotpool::client::ClientError<std::convert::Infallible>>();
    shareable::<slotpool::client::ClientStats>();
    shareable::<slotpool::channel::ChannelError>();
    shareable::<slotpool::channel::ChannelStats>();
    shareable::<slotpool::keyed::KeyedError<&'static str>>();
    shareable::<slotpool::keyed::BuildError<&'static str>>();
    shareable::<slotpool::keyed::KeyStats<&'static str>>();
    shareable::<slotpool::session::SessionError>();
    shareable::<slotpool::session::SessionStats>();
    shareable::<slotpool::stream::StreamStats>();
    shareable::<slotpool::stream::RequestError<crate::common::stream::TestError>>();
    // Errors are `std::error::Error` (boxable into `Box<dyn Error + Send + Sync>`).
    fn error<E: std::error::Error + Send + Sync + 'static>() {}
    error::<slotpool::ConfigError>();
    error::<slotpool::managed::PoolError<crate::common::managed::Injected>>();
    error::<slotpool::client::ClientError<std::convert::Infallible>>();
    error::<slotpool::channel::ChannelError>();
    error::<slotpool::keyed::KeyedError<&'static str>>();
    error::<slotpool::keyed::BuildError<&'static str>>();
    error::<slotpool::session::SessionError>();
    error::<slotpool::stream::RequestError<crate::common::stream::TestError>>();
}

#[test]
fn every_future_a_pool_returns_is_send() {
    let _ = |pool: &slotpool::managed::Pool<Scripted>, timeouts: &slotpool::managed::Timeouts| {
        spawnable(pool.get());
        spawnable(pool.get_owned());
        spawnable(pool.try_get());
        spawnable(pool.get_timeout(Duration::ZERO));
        spawnable(pool.get_timeouts(timeouts));
        spawnable(pool.prewarm());
        spawnable(pool.dedicated());
        spawnable_owned(slotpool::managed::Pool::builder(Scripted::new()).build_eager());
    };
    let _ = |pool: &Arc<ClientPool<Lazy, Factory>>| {
        spawnable(pool.acquire());
        spawnable(pool.try_acquire());
        spawnable(pool.acquire_timeout(Duration::ZERO));
    };
    let _ = |pool: &Keyed<&'static str>| {
        spawnable(pool.admit(&"k", Duration::ZERO));
        spawnable(pool.mutate(&"k", Duration::ZERO, || 1));
        spawnable(pool.read(&"k", Duration::ZERO, || 1));
        spawnable(pool.mutate_in(&"k", Duration::ZERO, tracing::Span::none(), || 1));
        spawnable(pool.read_in(&"k", Duration::ZERO, tracing::Span::none(), || 1));
    };
    let _ = |pool: &SessionPool<Fake>, context: &SessionContext| {
        spawnable(pool.acquire("s", context));
    };
    let _ = |pool: &StreamPool<TestConnector>| {
        spawnable(pool.acquire());
        spawnable(pool.acquire_owned());
        spawnable(pool.acquire_timeout(Duration::ZERO));
    };
    let _ = |limit: Arc<slotpool::blocks::Limit>| {
        spawnable(limit.acquire());
        spawnable_owned(limit.acquire_owned());
    };
}

#[cfg(feature = "postgres")]
#[test]
fn the_postgres_manager_and_its_client() {
    use slotpool::managed::postgres::{Client, PgClient, PgError, PgManager, Pool};
    shareable::<PgManager>();
    shareable::<Pool>();
    send::<Client>();
    owned::<Client>();
    send::<PgClient>();
    shareable::<PgError>();
    let _ = |pool: &Pool| spawnable(pool.get());
}

/// Every pool has the same way out: `close` (idempotent) and `is_closed`, and a closed pool
/// refuses what it hands out with its `Closed` error.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn every_pool_closes_and_says_so() {
    let managed = slotpool::managed::Pool::builder(Scripted::new())
        .reap_interval(None)
        .build()
        .unwrap();
    let (script, _servers) = crate::common::stream::Script::echo();
    let stream = script.pool(4, 2);
    let (time, channels, _, _) = crate::common::channel::steered_channel_pool(2);
    let clients = {
        use crate::common::ReapByHand;
        ClientPool::builder(Arc::clone(&channels), Factory::steered().0)
            .reaped_by_hand(&time)
            .build()
            .unwrap()
    };
    let keyed = Keyed::<&'static str>::builder()
        .family("k")
        .build()
        .unwrap();
    let (sessions, _, _) = crate::common::session::pool(2);
    assert!(!managed.is_closed() && !stream.is_closed() && !channels.is_closed());
    assert!(!clients.is_closed() && !keyed.is_closed() && !sessions.is_closed());
    for _ in 0..2 {
        managed.close();
        stream.close();
        clients.close();
        channels.close();
        keyed.close();
        sessions.close();
    }
    assert!(managed.is_closed() && stream.is_closed() && channels.is_closed());
    assert!(clients.is_closed() && keyed.is_closed() && sessions.is_closed());
    assert!(matches!(
        managed.get().await,
        Err(slotpool::managed::PoolError::Closed)
    ));
    assert!(matches!(
        stream.acquire().await,
        Err(slotpool::AcquireError::Closed)
    ));
    assert!(matches!(
        clients.acquire().await,
        Err(slotpool::client::ClientError::Closed)
    ));
    assert!(matches!(
        channels.get(),
        Err(slotpool::channel::ChannelError::Closed)
    ));
    assert!(matches!(
        keyed.read(&"k", Duration::ZERO, || ()).await,
        Err(slotpool::keyed::KeyedError::Closed { .. })
    ));
    assert!(matches!(
        sessions.acquire("s", &SessionContext::new("w", "u")).await,
        Err(slotpool::session::SessionError::Closed)
    ));
}
