//! `SessionPool`: documented behaviours that no other test pinned (see `docs/pinned.md`): the
//! builder's defaults and the background reaper's interval, the cooperative budget an
//! establishment spends, `connect_for` against `connect`, the lazy event reader and the
//! bounded event channel, `NoRuntime`, `Aborted` and its reach, and `prewarm`'s bound and
//! `Closed`. Time is `slotpool::Clock::mock()`; the background reaper ticks on a paused tokio
//! clock the test moves by hand; nothing sleeps.

use std::future::{pending, Future};
use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::Duration;

use crate::common::session::{
    assert_balanced, ctx, fake, held_pool, pool, ConnState, Fake, FakeError,
};
use crate::common::{poll_once, run_spawned, MockTime, ReapByHand};
use slotpool::session::{
    Connector, LoopId, SessionContext, SessionError, SessionPool, SessionRecord, SessionStore,
    DEFAULT_MAX_IDLE_TIME, DEFAULT_POOL_SIZE, EVENT_BUFFER,
};
use slotpool::Reach;

const MS: Duration = Duration::from_millis(1);

/// Moves tokio's paused clock by `by` and lets the reaper task run its tick.
async fn tick(by: Duration) {
    run_spawned().await;
    tokio::time::advance(by).await;
    run_spawned().await;
}

/// Module docs: "A caller that finds no entry spends a unit of tokio's cooperative budget
/// before it claims, ... so a loop of establishments against a connector that answers at once
/// still yields to the runtime now and then."
#[tokio::test]
async fn a_loop_of_establishments_yields_to_the_runtime() {
    let (pool, _counts, _time) = pool(4);
    let ran = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&ran);
    tokio::spawn(async move { flag.store(true, Ordering::SeqCst) });
    for n in 0..2_000 {
        if ran.load(Ordering::SeqCst) {
            return;
        }
        let id = format!("s{n}");
        drop(pool.acquire(&id, &ctx()).await.unwrap());
        assert!(pool.release(&id));
    }
    panic!("2000 establishments never yielded to the runtime");
}

/// Builder: `reap_every` "Default: half of `max_idle_time`, within 1 s and 60 s".
#[tokio::test(start_paused = true)]
async fn the_default_reap_every_is_half_the_idle_time_within_1_and_60_seconds() {
    for (max_idle, every) in [
        (Duration::from_secs(10), Duration::from_secs(5)),
        (Duration::from_secs(1), Duration::from_secs(1)),
        (Duration::from_secs(600), Duration::from_secs(60)),
    ] {
        let time = MockTime::new();
        let (connector, _counts) = fake();
        let pool = SessionPool::builder(connector)
            .max_idle_time(max_idle)
            .clock(time.clock())
            .build()
            .unwrap();
        drop(pool.acquire("s", &ctx()).await.unwrap());
        time.advance(max_idle * 2);
        tick(every - MS).await;
        assert_eq!(
            pool.stats().active,
            1,
            "{max_idle:?}: no tick before {every:?}"
        );
        tick(MS).await;
        assert_eq!(pool.stats().reaped, 1, "{max_idle:?}: reaped at {every:?}");
    }
}

/// Builder: an explicit `reap_every` is the reaper's period.
#[tokio::test(start_paused = true)]
async fn an_explicit_reap_every_is_the_reapers_period() {
    let time = MockTime::new();
    let (connector, _counts) = fake();
    let pool = SessionPool::builder(connector)
        .max_idle_time(Duration::from_secs(10))
        .reap_every(Some(Duration::from_secs(2)))
        .clock(time.clock())
        .build()
        .unwrap();
    drop(pool.acquire("s", &ctx()).await.unwrap());
    time.advance(Duration::from_secs(20));
    tick(Duration::from_secs(2) - MS).await;
    assert_eq!(pool.stats().active, 1, "no tick before 2 s");
    tick(MS).await;
    assert_eq!(pool.stats().reaped, 1, "reaped at the 2 s tick");
}

/// Builder defaults: `pool_size` is `DEFAULT_POOL_SIZE` (1000) and `max_idle_time` is
/// `DEFAULT_MAX_IDLE_TIME` (ten minutes): a session idle exactly that long is still hot, one
/// idle a nanosecond longer is rebuilt.
#[tokio::test]
async fn defaults_are_1000_sessions_idle_for_ten_minutes() {
    assert_eq!(DEFAULT_POOL_SIZE, 1000);
    assert_eq!(DEFAULT_MAX_IDLE_TIME, Duration::from_secs(600));
    let time = MockTime::new();
    let (connector, counts) = fake();
    let pool = SessionPool::builder(connector)
        .reaped_by_hand(&time)
        .build()
        .unwrap();
    assert_eq!(pool.stats().capacity, 1000);
    let first = pool.acquire("s", &ctx()).await.unwrap();
    time.advance(Duration::from_secs(600));
    let again = pool.acquire("s", &ctx()).await.unwrap();
    assert!(
        again.same_connection(&first),
        "idle exactly ten minutes: hot"
    );
    time.advance(Duration::from_secs(600) + Duration::from_nanos(1));
    let rebuilt = pool.acquire("s", &ctx()).await.unwrap();
    assert!(
        !rebuilt.same_connection(&first),
        "idle past ten minutes: rebuilt"
    );
    assert_eq!(pool.stats().rebuilt, 1);
    assert_balanced(&pool, &counts);
}

/// A connector that records which of `connect` and `connect_for` the pool called.
#[derive(Clone, Default)]
struct Named {
    inner: Fake,
    calls: Arc<Mutex<Vec<String>>>,
    /// The `connect` call (counting from 1) that fails; 0: none.
    fail_connect_call: Arc<std::sync::atomic::AtomicUsize>,
}

impl Connector for Named {
    type Conn = Arc<ConnState>;
    type Event = String;
    type Error = FakeError;

    fn connect(&self) -> impl Future<Output = Result<Arc<ConnState>, FakeError>> + Send {
        let call = {
            let mut calls = self.calls.lock().unwrap();
            calls.push("connect".into());
            calls.iter().filter(|c| *c == "connect").count()
        };
        let fail = call == self.fail_connect_call.load(Ordering::SeqCst);
        if fail {
            self.inner.0.fail_connect.fetch_add(1, Ordering::SeqCst);
        }
        self.inner.connect()
    }

    fn connect_for(
        &self,
        session: &str,
    ) -> impl Future<Output = Result<Arc<ConnState>, FakeError>> + Send {
        self.calls
            .lock()
            .unwrap()
            .push(format!("connect_for {session}"));
        self.inner.connect()
    }

    fn bootstrap(
        &self,
        conn: &Arc<ConnState>,
        session: &str,
        ctx: &SessionContext,
    ) -> impl Future<Output = Result<LoopId, FakeError>> + Send {
        self.inner.bootstrap(conn, session, ctx)
    }

    fn reattach(
        &self,
        conn: &Arc<ConnState>,
        loop_id: &LoopId,
    ) -> impl Future<Output = Result<(), FakeError>> + Send {
        self.inner.reattach(conn, loop_id)
    }

    fn is_alive(&self, conn: &Arc<ConnState>) -> bool {
        self.inner.is_alive(conn)
    }

    fn next_event(&self, conn: &Arc<ConnState>) -> impl Future<Output = Option<String>> + Send {
        self.inner.next_event(conn)
    }

    fn close(&self, conn: &Arc<ConnState>) {
        self.inner.close(conn)
    }
}

/// `Connector::connect_for`: "The pool calls this, not `Connector::connect`, when it
/// establishes a session; prewarmed connections ... are opened for no session yet and use
/// `connect`."
#[tokio::test]
async fn sessions_connect_for_their_id_and_prewarming_connects() {
    let connector = Named::default();
    let calls = Arc::clone(&connector.calls);
    let pool = SessionPool::builder(connector)
        .pool_size(4)
        .prewarm(1)
        .reap_every(None)
        .build()
        .unwrap();
    drop(pool.acquire("alpha", &ctx()).await.unwrap());
    assert_eq!(pool.prewarm().await.unwrap(), 1);
    assert_eq!(*calls.lock().unwrap(), ["connect_for alpha", "connect"]);
}

/// *Event readers*: the reader is started by a starter task at the installing task's next
/// yield, "so a session released before then costs no task": its connection's events are
/// never read.
#[tokio::test]
async fn a_session_released_before_its_reader_starts_never_reads_events() {
    let (pool, counts, _time) = pool(2);
    counts.panic_next_event.store(1, Ordering::SeqCst);
    let session = pool.acquire("s", &ctx()).await.unwrap();
    assert!(pool.release("s"));
    run_spawned().await;
    assert_eq!(
        counts.panic_next_event.load(Ordering::SeqCst),
        1,
        "next_event was called for a session released before its reader started"
    );
    assert_eq!(pool.stats().panics, 0);
    assert!(!session.is_open());
    assert_balanced(&pool, &counts);
}

/// *Event readers*: a bounded channel of `EVENT_BUFFER` events; "the reader waits when it is
/// full": no event is dropped.
#[tokio::test]
async fn the_event_channel_holds_event_buffer_and_the_reader_waits() {
    let (pool, counts, _time) = pool(2);
    let session = pool.acquire("s", &ctx()).await.unwrap();
    let sender = counts.events_sender(session.connection().id);
    let total = EVENT_BUFFER + 8;
    for n in 0..total {
        sender.send(format!("e{n}")).unwrap();
    }
    run_spawned().await;
    let mut events = session.take_events().expect("the receiver");
    assert_eq!(events.max_capacity(), EVENT_BUFFER);
    assert_eq!(events.len(), EVENT_BUFFER, "full, the reader waiting");
    for n in 0..total {
        if events.is_empty() {
            run_spawned().await; // the reader forwards the events it was holding back
        }
        assert_eq!(events.try_recv().ok(), Some(format!("e{n}")), "event {n}");
    }
    assert!(session.is_open());
}

/// The reader: "If the caller dropped its receiver the events are drained and discarded, so
/// the connection never stalls on us"; the session stays alive.
#[tokio::test]
async fn events_for_a_dropped_receiver_are_drained_and_the_session_lives() {
    let (pool, counts, _time) = pool(2);
    let session = pool.acquire("s", &ctx()).await.unwrap();
    drop(session.take_events().expect("the receiver"));
    let id = session.connection().id;
    let sender = counts.events_sender(id);
    for n in 0..EVENT_BUFFER * 2 {
        sender.send(format!("e{n}")).unwrap();
    }
    crate::common::yield_times(200).await;
    // Drained: the fake's `next_event` holds its connection's queue while it waits for the
    // next event, which it does only once the queue is empty.
    let conn = counts.conn(id);
    assert!(
        conn.events_out.try_lock().is_err(),
        "the reader stopped reading: {} events left",
        conn.events_out.try_lock().map_or(0, |events| events.len())
    );
    assert!(session.is_open(), "the session is still alive");
    let again = pool.acquire("s", &ctx()).await.unwrap();
    assert!(again.same_connection(&session));
}

/// `SessionError::NoRuntime`: "`acquire` was polled outside a tokio runtime ... Nothing was
/// sent"; the claim is given up, so the session can be established from a runtime later.
#[test]
fn an_acquire_outside_a_runtime_is_no_runtime_and_takes_nothing() {
    let (fake, counts) = fake();
    let pool = SessionPool::builder(fake)
        .pool_size(1)
        .reap_every(None)
        .build()
        .unwrap();
    let error = match poll_once(pin!(pool.acquire("s", &ctx()))) {
        Poll::Ready(Err(error)) => error,
        Poll::Ready(Ok(_)) => panic!("established outside a runtime"),
        Poll::Pending => panic!("pending outside a runtime"),
    };
    assert!(matches!(error, SessionError::NoRuntime), "{error:?}");
    assert_eq!(error.reach(), Reach::NotSent);
    let stats = pool.stats();
    assert_eq!((stats.in_use, stats.establishing), (0, 0), "{stats:?}");
    assert_eq!(counts.connects(), 0);
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let session = rt.block_on(pool.acquire("s", &ctx()));
    assert!(session.is_ok(), "{session:?}");
}

/// A store whose lookups never answer: an establishment stays before its bootstrap.
struct Silent;

impl SessionStore for Silent {
    type Error = FakeError;

    fn loop_id(
        &self,
        _session: &str,
    ) -> impl Future<Output = Result<Option<LoopId>, FakeError>> + Send {
        pending()
    }

    fn save(&self, _record: SessionRecord) -> impl Future<Output = Result<(), FakeError>> + Send {
        std::future::ready(Ok(()))
    }

    fn touch(&self, _session: &str) -> impl Future<Output = Result<(), FakeError>> + Send {
        std::future::ready(Ok(()))
    }
}

/// The error a follower polled by hand gets once its leader's runtime is gone.
fn followers_error<C: Connector, S: SessionStore>(
    pool: &SessionPool<C, S>,
    runtime: tokio::runtime::Runtime,
) -> SessionError {
    let ctx = ctx();
    let mut follower = pin!(pool.acquire("s", &ctx));
    assert!(
        poll_once(follower.as_mut()).is_pending(),
        "joined the flight"
    );
    drop(runtime);
    match poll_once(follower.as_mut()) {
        Poll::Ready(Err(error)) => error,
        Poll::Ready(Ok(_)) => panic!("established without its runtime"),
        Poll::Pending => panic!("the flight never ended"),
    }
}

/// *Cancellation*: an establishment dropped unfinished (its runtime shut down) "fails the
/// waiters with `SessionError::Aborted`", whose reach is `MaybeApplied` once the bootstrap
/// began and `NotSent` before.
#[test]
fn a_runtime_shutdown_fails_waiters_with_aborted_and_its_reach() {
    // Mid-bootstrap.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let (pool, counts) = {
        let _guard = runtime.enter();
        let (pool, counts) = held_pool(1);
        crate::common::session::spawn_acquire(&pool, "s");
        (pool, counts)
    };
    runtime.block_on(counts.bootstrap_entered());
    let error = followers_error(&pool, runtime);
    assert!(
        matches!(
            error,
            SessionError::Aborted {
                reach: Reach::MaybeApplied
            }
        ),
        "{error:?}"
    );
    assert_eq!(pool.stats().in_use, 0);

    // Mid-lookup: nothing was sent.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let (connector, counts) = fake();
    let pool = Arc::new(
        SessionPool::builder(connector)
            .store(Silent)
            .reap_every(None)
            .build()
            .unwrap(),
    );
    {
        let pool = Arc::clone(&pool);
        runtime.spawn(async move { pool.acquire("s", &ctx()).await });
    }
    runtime.block_on(run_spawned());
    assert_eq!((counts.connects(), counts.bootstraps()), (1, 0));
    let error = followers_error(&pool, runtime);
    assert!(
        matches!(
            error,
            SessionError::Aborted {
                reach: Reach::NotSent
            }
        ),
        "{error:?}"
    );
    assert_eq!(pool.stats().in_use, 0);
    assert_eq!(counts.opened(), counts.closed());
}

/// Builder: `prewarm` "above `pool_size` is a `ConfigError`", so `prewarm == pool_size` is
/// accepted; and prewarmed connections "do not count against `pool_size`".
#[tokio::test]
async fn prewarm_up_to_pool_size_takes_no_capacity() {
    let (fake, counts) = fake();
    let pool = SessionPool::builder(fake)
        .pool_size(2)
        .prewarm(2)
        .reap_every(None)
        .build()
        .unwrap();
    assert_eq!(pool.prewarm().await.unwrap(), 2);
    let stats = pool.stats();
    assert_eq!((stats.idle, stats.in_use), (2, 0), "{stats:?}");
    pool.acquire("a", &ctx()).await.unwrap();
    pool.acquire("b", &ctx()).await.unwrap();
    assert_eq!(
        counts.connects(),
        2,
        "both sessions took a prewarmed connection"
    );
    assert_balanced(&pool, &counts);
}

/// `prewarm`: "`SessionError::Closed` once stopped" (which is `NotSent`), before any connect.
#[tokio::test]
async fn prewarm_after_stop_is_closed() {
    let (fake, counts) = fake();
    let pool = SessionPool::builder(fake)
        .pool_size(2)
        .prewarm(2)
        .reap_every(None)
        .build()
        .unwrap();
    pool.close();
    counts.fail_connect.store(1, Ordering::SeqCst);
    let error = pool.prewarm().await.unwrap_err();
    assert!(matches!(error, SessionError::Closed), "{error:?}");
    assert_eq!(error.reach(), Reach::NotSent);
    assert_eq!(counts.connects(), 0);
}

/// `prewarm`: "`SessionError::Connect` on the first failed connect ... (those opened before
/// either are kept)".
#[tokio::test]
async fn prewarm_keeps_the_connections_opened_before_a_failed_connect() {
    let connector = Named::default();
    connector.fail_connect_call.store(3, Ordering::SeqCst);
    let counts = Arc::clone(&connector.inner.0);
    let pool = SessionPool::builder(connector)
        .pool_size(4)
        .prewarm(4)
        .reap_every(None)
        .build()
        .unwrap();
    let error = pool.prewarm().await.unwrap_err();
    assert!(matches!(error, SessionError::Connect { .. }), "{error:?}");
    assert_eq!(
        pool.stats().idle,
        2,
        "the two opened before the failure are kept"
    );
    assert_eq!(counts.closed(), 0);
    assert_eq!(
        pool.prewarm().await.unwrap(),
        2,
        "and only the rest is opened next"
    );
}

/// *Cancellation*: "a follower dropped at its wait only removes its own waker": the other
/// followers of the flight still get its outcome.
#[tokio::test]
async fn a_dropped_follower_leaves_the_other_followers_waiting() {
    let (pool, counts) = held_pool(2);
    let leader = crate::common::session::spawn_acquire(&pool, "s");
    counts.bootstrap_entered().await;
    let follower = crate::common::session::spawn_acquire(&pool, "s");
    run_spawned().await;
    {
        let ctx = ctx();
        let mut dropped = pin!(pool.acquire("s", &ctx));
        assert!(
            poll_once(dropped.as_mut()).is_pending(),
            "joined the flight"
        );
    }
    counts.let_bootstrap_proceed();
    crate::common::settle_until("the other follower was never woken", || {
        follower.is_finished()
    })
    .await;
    let session = follower.await.unwrap().expect("the follower's session");
    assert!(session.same_connection(&leader.await.unwrap().unwrap()));
}

/// *Panics of user code*: each caught panic "logs its message as a `tracing` error event (the
/// place, never the request's contents)".
#[tokio::test]
async fn a_caught_panic_logs_the_place_and_not_the_request() {
    let (pool, counts, _time) = pool(2);
    let (logs, _guard) = crate::common::logs::capture_logs();
    counts.panic_bootstrap.store(1, Ordering::SeqCst);
    let request = SessionContext::new("secret-workspace", "secret-user");
    let error = pool.acquire("secret-session", &request).await.unwrap_err();
    assert!(matches!(error, SessionError::Panicked { .. }), "{error:?}");
    let text = logs.text();
    assert!(text.contains("ERROR"), "{text}");
    assert!(text.contains("session connector (bootstrap)"), "{text}");
    assert!(text.contains("bootstrap exploded"), "{text}");
    assert!(
        !text.contains("secret"),
        "the request's contents were logged: {text}"
    );
}
