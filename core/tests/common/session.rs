//! A counting fake session connector and fake stores for the `SessionPool` tests.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use slotpool::session::{
    Connector, LoopId, MemoryStore, Session, SessionContext, SessionError, SessionPool,
    SessionPoolBuilder, SessionRecord, SessionStore,
};
use tokio::sync::{mpsc, Notify, Semaphore};
use tokio::task::JoinHandle;

use super::panics::inject;
use super::{MockTime, ReapByHand};

// ----------------------------------------------------------------------------------------
// Fakes
// ----------------------------------------------------------------------------------------

#[derive(Debug, thiserror::Error)]
#[error("fake failure: {0}")]
pub struct FakeError(pub &'static str);

/// One fake connection: can be killed, fed events, and detects a double close.
#[derive(Debug)]
pub struct ConnState {
    pub id: u64,
    pub alive: AtomicBool,
    pub closed: AtomicBool,
    pub events_in: Mutex<Option<mpsc::UnboundedSender<String>>>,
    pub events_out: tokio::sync::Mutex<mpsc::UnboundedReceiver<String>>,
}

/// Permits for held bootstraps to proceed (none at first).
pub struct Gate(pub Semaphore);

impl Default for Gate {
    fn default() -> Self {
        Gate(Semaphore::new(0))
    }
}

#[derive(Default)]
pub struct Counts {
    pub opened: AtomicU64,
    pub closed: AtomicU64,
    pub connect_calls: AtomicU64,
    pub bootstrap_calls: AtomicU64,
    pub reattach_calls: AtomicU64,
    /// Upcoming calls that fail, per operation.
    pub fail_connect: AtomicU64,
    pub fail_bootstrap: AtomicU64,
    pub fail_reattach: AtomicU64,
    /// When set, bootstrap announces itself on `entered` and waits for a `proceed` permit.
    pub hold_bootstrap: AtomicBool,
    pub entered: Notify,
    pub proceed: Gate,
    pub next_loop: AtomicU64,
    pub conns: Mutex<Vec<Arc<ConnState>>>,
    /// Upcoming calls that panic, per operation (each counted in `panics`).
    pub panic_connect: AtomicU64,
    pub panic_bootstrap: AtomicU64,
    pub panic_reattach: AtomicU64,
    pub panic_is_alive: AtomicU64,
    pub panic_next_event: AtomicU64,
    pub panic_close: AtomicU64,
    /// For storms: one call in this many panics, at any of those places (0: never).
    pub panic_one_in: AtomicU64,
    /// Calls that consulted `panic_one_in`.
    pub calls: AtomicU64,
    /// Panics injected so far.
    pub panics: AtomicU64,
    /// Connections closed a second time (a pool bug; every test's accounting checks it is 0).
    pub double_closes: AtomicU64,
    /// When set, `close` blocks its thread on `close_hold`.
    pub hold_close: AtomicBool,
    pub close_hold: super::Hold,
}

impl Counts {
    pub fn take_failure(counter: &AtomicU64) -> bool {
        counter
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
    }

    /// Panics (counted) if `knob` has an upcoming panic or the storm picks this call.
    pub fn maybe_panic(&self, knob: &AtomicU64, what: &str) {
        if Self::take_failure(knob) || self.storm_picks() {
            self.panics.fetch_add(1, Ordering::SeqCst);
            inject(what);
        }
    }

    fn storm_picks(&self) -> bool {
        let one_in = self.panic_one_in.load(Ordering::SeqCst);
        if one_in == 0 {
            return false;
        }
        let call = self.calls.fetch_add(1, Ordering::SeqCst);
        // A fixed mix of the call number: reproducible, and spread over every place.
        call.wrapping_mul(0x9e37_79b9_7f4a_7c15)
            .rotate_left(29)
            .is_multiple_of(one_in)
    }

    pub fn panics(&self) -> u64 {
        self.panics.load(Ordering::SeqCst)
    }

    pub fn opened(&self) -> u64 {
        self.opened.load(Ordering::SeqCst)
    }

    pub fn closed(&self) -> u64 {
        assert_eq!(
            self.double_closes.load(Ordering::SeqCst),
            0,
            "a connection was closed twice"
        );
        self.closed.load(Ordering::SeqCst)
    }

    pub fn conn(&self, id: u64) -> Arc<ConnState> {
        let conns = self.conns.lock();
        conns
            .iter()
            .find(|c| c.id == id)
            .cloned()
            .expect("test asked for a connection it opened")
    }

    pub fn connects(&self) -> u64 {
        self.connect_calls.load(Ordering::SeqCst)
    }

    pub fn bootstraps(&self) -> u64 {
        self.bootstrap_calls.load(Ordering::SeqCst)
    }

    pub fn reattaches(&self) -> u64 {
        self.reattach_calls.load(Ordering::SeqCst)
    }

    /// Waits until a held bootstrap has started (see [`held_pool`]).
    pub async fn bootstrap_entered(&self) {
        self.entered.notified().await;
    }

    /// Lets one held bootstrap go on.
    pub fn let_bootstrap_proceed(&self) {
        self.proceed.0.add_permits(1);
    }

    /// The sender that feeds connection `id`'s events.
    pub fn events_sender(&self, id: u64) -> mpsc::UnboundedSender<String> {
        let sender = self.conn(id).events_in.lock().clone();
        sender.expect("the event stream has not ended")
    }

    /// Sends `last` on connection `id`'s events, then ends them: its reader sees the end.
    pub fn end_events(&self, id: u64, last: &[&str]) {
        let sender = self.conn(id).events_in.lock().take();
        let sender = sender.expect("the event stream has not ended");
        for event in last {
            sender.send(event.to_string()).unwrap();
        }
    }
}

#[derive(Clone, Default)]
pub struct Fake(pub Arc<Counts>);

impl Connector for Fake {
    type Conn = Arc<ConnState>;
    type Event = String;
    type Error = FakeError;

    fn connect(&self) -> impl Future<Output = Result<Arc<ConnState>, FakeError>> + Send {
        let counts = Arc::clone(&self.0);
        async move {
            counts.connect_calls.fetch_add(1, Ordering::SeqCst);
            counts.maybe_panic(&counts.panic_connect, "connect");
            if Counts::take_failure(&counts.fail_connect) {
                return Err(FakeError("connect"));
            }
            let id = counts.opened.fetch_add(1, Ordering::SeqCst);
            let (tx, rx) = mpsc::unbounded_channel();
            let conn = Arc::new(ConnState {
                id,
                alive: AtomicBool::new(true),
                closed: AtomicBool::new(false),
                events_in: Mutex::new(Some(tx)),
                events_out: tokio::sync::Mutex::new(rx),
            });
            counts.conns.lock().push(Arc::clone(&conn));
            Ok(conn)
        }
    }

    fn bootstrap(
        &self,
        _conn: &Arc<ConnState>,
        session: &str,
        _ctx: &SessionContext,
    ) -> impl Future<Output = Result<LoopId, FakeError>> + Send {
        let counts = Arc::clone(&self.0);
        let session = session.to_string();
        async move {
            counts.bootstrap_calls.fetch_add(1, Ordering::SeqCst);
            if counts.hold_bootstrap.load(Ordering::SeqCst) {
                counts.entered.notify_one();
                counts
                    .proceed
                    .0
                    .acquire()
                    .await
                    .expect("never closed")
                    .forget();
            }
            counts.maybe_panic(&counts.panic_bootstrap, "bootstrap");
            if Counts::take_failure(&counts.fail_bootstrap) {
                return Err(FakeError("bootstrap"));
            }
            let n = counts.next_loop.fetch_add(1, Ordering::SeqCst);
            Ok(LoopId::new(format!("loop-{session}-{n}")))
        }
    }

    fn reattach(
        &self,
        _conn: &Arc<ConnState>,
        _loop_id: &LoopId,
    ) -> impl Future<Output = Result<(), FakeError>> + Send {
        let counts = Arc::clone(&self.0);
        async move {
            counts.reattach_calls.fetch_add(1, Ordering::SeqCst);
            counts.maybe_panic(&counts.panic_reattach, "reattach");
            if Counts::take_failure(&counts.fail_reattach) {
                return Err(FakeError("reattach"));
            }
            Ok(())
        }
    }

    fn is_alive(&self, conn: &Arc<ConnState>) -> bool {
        self.0.maybe_panic(&self.0.panic_is_alive, "is_alive");
        conn.alive.load(Ordering::SeqCst)
    }

    fn next_event(&self, conn: &Arc<ConnState>) -> impl Future<Output = Option<String>> + Send {
        let conn = Arc::clone(conn);
        let counts = Arc::clone(&self.0);
        async move {
            counts.maybe_panic(&counts.panic_next_event, "next_event");
            conn.events_out.lock().await.recv().await
        }
    }

    fn close(&self, conn: &Arc<ConnState>) {
        // A second close is a pool bug the test must see: it is recorded in `double_closes`
        // (a panic here would be contained by the pool, and counted as the connector's).
        if conn.closed.swap(true, Ordering::SeqCst) {
            self.0.double_closes.fetch_add(1, Ordering::SeqCst);
        }
        if self.0.hold_close.load(Ordering::SeqCst) {
            self.0.close_hold.block();
        }
        self.0.closed.fetch_add(1, Ordering::SeqCst);
        // Closed first, then (maybe) the panic: the pool called close exactly once either way.
        self.0.maybe_panic(&self.0.panic_close, "close");
    }
}

/// A store that fails or panics on demand, in front of a `MemoryStore`.
#[derive(Default)]
pub struct FlakyStore {
    pub inner: MemoryStore,
    pub fail_lookup: AtomicU64,
    pub fail_save: AtomicU64,
    /// Upcoming calls that panic: a lookup in the call itself, a save and a touch when polled.
    pub panic_lookup: AtomicU64,
    pub panic_save: AtomicU64,
    pub panic_touch: AtomicU64,
    pub touches: AtomicU64,
}

/// The pool's handle on a shared `FlakyStore`.
pub struct Flaky(pub Arc<FlakyStore>);

impl SessionStore for Flaky {
    type Error = FakeError;

    fn loop_id(
        &self,
        session: &str,
    ) -> impl Future<Output = Result<Option<LoopId>, FakeError>> + Send {
        if Counts::take_failure(&self.0.panic_lookup) {
            inject("store lookup");
        }
        let result = if Counts::take_failure(&self.0.fail_lookup) {
            Err(FakeError("lookup"))
        } else {
            Ok(self.0.inner.record(session).map(|r| r.loop_id))
        };
        std::future::ready(result)
    }

    fn save(&self, record: SessionRecord) -> impl Future<Output = Result<(), FakeError>> + Send {
        let store = Arc::clone(&self.0);
        async move {
            if Counts::take_failure(&store.panic_save) {
                inject("store save");
            }
            if Counts::take_failure(&store.fail_save) {
                return Err(FakeError("save"));
            }
            store.inner.insert(record);
            Ok(())
        }
    }

    fn touch(&self, _session: &str) -> impl Future<Output = Result<(), FakeError>> + Send {
        let store = Arc::clone(&self.0);
        async move {
            store.touches.fetch_add(1, Ordering::SeqCst);
            if Counts::take_failure(&store.panic_touch) {
                inject("store touch");
            }
            Ok(())
        }
    }
}

// ----------------------------------------------------------------------------------------
// Helpers
// ----------------------------------------------------------------------------------------

pub fn ctx() -> SessionContext {
    SessionContext::new("ws", "user")
}

/// A fake connector and the counts it keeps.
pub fn fake() -> (Fake, Arc<Counts>) {
    let fake = Fake::default();
    let counts = Arc::clone(&fake.0);
    (fake, counts)
}

impl<C: Connector, S: SessionStore> ReapByHand for SessionPoolBuilder<C, S> {
    fn reaped_by_hand(self, time: &MockTime) -> Self {
        self.reap_every(None).clock(time.clock())
    }
}

/// A pool of `size` sessions idle for at most 10 s on a mock clock, with no background
/// reaper.
pub fn pool(size: usize) -> (SessionPool<Fake>, Arc<Counts>, MockTime) {
    let (fake, counts) = fake();
    let time = MockTime::new();
    let pool = SessionPool::builder(fake)
        .pool_size(size)
        .max_idle_time(Duration::from_secs(10))
        .reaped_by_hand(&time)
        .build()
        .expect("valid configuration");
    (pool, counts, time)
}

/// Acquires `session` in a task of its own.
pub fn spawn_acquire(
    pool: &Arc<SessionPool<Fake>>,
    session: &str,
) -> JoinHandle<Result<Session<Fake>, SessionError>> {
    let (pool, session) = (Arc::clone(pool), session.to_string());
    tokio::spawn(async move { pool.acquire(&session, &ctx()).await })
}

/// Acquires session "s" of a [`held_pool`] in a task that is aborted once its bootstrap has
/// started; then lets the bootstrap go on and the establishment finish.
pub async fn cancel_the_only_caller_mid_bootstrap(pool: &Arc<SessionPool<Fake>>, counts: &Counts) {
    let caller = spawn_acquire(pool, "s");
    counts.bootstrap_entered().await;
    caller.abort();
    let _ = caller.await;
    counts.let_bootstrap_proceed();
    settle_establishments(pool).await;
}

/// Lets spawned tasks run until no establishment is in flight (current-thread runtime).
pub async fn settle_establishments<C: Connector, S: SessionStore>(pool: &SessionPool<C, S>) {
    for _ in 0..10_000 {
        if pool.stats().establishing == 0 {
            // One more round so tasks woken by the last completion reach their end.
            for _ in 0..8 {
                tokio::task::yield_now().await;
            }
            return;
        }
        tokio::task::yield_now().await;
    }
    panic!("establishments did not settle: {:?}", pool.stats());
}

/// The accounting every test ends with: capacity held exactly by active sessions, and every
/// connection opened is either closed or live.
pub fn assert_balanced<C: Connector, S: SessionStore>(pool: &SessionPool<C, S>, counts: &Counts) {
    let stats = pool.stats();
    assert_eq!(stats.establishing, 0, "{stats:?}");
    assert_eq!(
        stats.in_use, stats.active,
        "capacity held by exactly the active sessions: {stats:?}"
    );
    assert_eq!(
        counts.opened(),
        counts.closed() + stats.active as u64 + stats.idle as u64,
        "opened == closed + live: {stats:?}"
    );
}

/// All `opened` connections the fake opened are closed again, and no capacity is held.
pub fn assert_all_closed<C: Connector, S: SessionStore>(
    pool: &SessionPool<C, S>,
    counts: &Counts,
    opened: u64,
) {
    assert_eq!((counts.opened(), counts.closed()), (opened, opened));
    assert_eq!(pool.stats().in_use, 0);
}

/// A [`pool`] whose bootstraps wait, once started, until the test lets them proceed.
pub fn held_pool(size: usize) -> (Arc<SessionPool<Fake>>, Arc<Counts>) {
    let (pool, counts, _time) = pool(size);
    counts.hold_bootstrap.store(true, Ordering::SeqCst);
    (Arc::new(pool), counts)
}

/// A pool of 4 whose store already records session "s" on `loop_id`.
pub fn seeded(
    loop_id: &str,
) -> (
    SessionPool<Fake, Arc<MemoryStore>>,
    Arc<Counts>,
    Arc<MemoryStore>,
) {
    let store = Arc::new(MemoryStore::new());
    store.insert(SessionRecord {
        session: "s".into(),
        loop_id: LoopId::new(loop_id),
        workspace: "ws".into(),
        user: "user".into(),
    });
    let (pool, counts) = pool_on(4, Arc::clone(&store));
    (pool, counts, store)
}

/// A pool of `size` sessions (`None`: the default) over `store`, with no background reaper.
pub fn pool_on<S: SessionStore>(
    size: impl Into<Option<usize>>,
    store: S,
) -> (SessionPool<Fake, S>, Arc<Counts>) {
    let (fake, counts) = fake();
    let builder = match size.into() {
        Some(size) => SessionPool::builder(fake).pool_size(size),
        None => SessionPool::builder(fake),
    };
    let pool = builder.store(store).reap_every(None).build();
    (pool.expect("valid configuration"), counts)
}
