//! A counting fake session connector and fake stores for the `SessionPool` tests.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use slotpool::session::{
    Connector, LoopId, MemoryStore, SessionContext, SessionPool, SessionRecord, SessionStore,
};
use tokio::sync::{mpsc, Notify, Semaphore};

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
}

impl Counts {
    pub fn take_failure(counter: &AtomicU64) -> bool {
        counter
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
    }

    pub fn opened(&self) -> u64 {
        self.opened.load(Ordering::SeqCst)
    }

    pub fn closed(&self) -> u64 {
        self.closed.load(Ordering::SeqCst)
    }

    pub fn conn(&self, id: u64) -> Arc<ConnState> {
        let conns = self.conns.lock().unwrap();
        conns
            .iter()
            .find(|c| c.id == id)
            .cloned()
            .expect("test asked for a connection it opened")
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
            counts.conns.lock().unwrap().push(Arc::clone(&conn));
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
            if Counts::take_failure(&counts.fail_reattach) {
                return Err(FakeError("reattach"));
            }
            Ok(())
        }
    }

    fn is_alive(&self, conn: &Arc<ConnState>) -> bool {
        conn.alive.load(Ordering::SeqCst)
    }

    fn next_event(&self, conn: &Arc<ConnState>) -> impl Future<Output = Option<String>> + Send {
        let conn = Arc::clone(conn);
        async move { conn.events_out.lock().await.recv().await }
    }

    fn close(&self, conn: &Arc<ConnState>) {
        assert!(
            !conn.closed.swap(true, Ordering::SeqCst),
            "connection {} closed twice",
            conn.id
        );
        self.0.closed.fetch_add(1, Ordering::SeqCst);
    }
}

/// A store that fails on demand, in front of a `MemoryStore`.
#[derive(Default)]
pub struct FlakyStore {
    pub inner: MemoryStore,
    pub fail_lookup: AtomicU64,
    pub fail_save: AtomicU64,
}

/// The pool's handle on a shared `FlakyStore`.
pub struct Flaky(pub Arc<FlakyStore>);

impl SessionStore for Flaky {
    type Error = FakeError;

    fn loop_id(
        &self,
        session: &str,
    ) -> impl Future<Output = Result<Option<LoopId>, FakeError>> + Send {
        let result = if Counts::take_failure(&self.0.fail_lookup) {
            Err(FakeError("lookup"))
        } else {
            Ok(self.0.inner.record(session).map(|r| r.loop_id))
        };
        std::future::ready(result)
    }

    fn save(&self, record: SessionRecord) -> impl Future<Output = Result<(), FakeError>> + Send {
        let result = if Counts::take_failure(&self.0.fail_save) {
            Err(FakeError("save"))
        } else {
            self.0.inner.insert(record);
            Ok(())
        };
        std::future::ready(result)
    }

    fn touch(&self, _session: &str) -> impl Future<Output = Result<(), FakeError>> + Send {
        std::future::ready(Ok(()))
    }
}

// ----------------------------------------------------------------------------------------
// Helpers
// ----------------------------------------------------------------------------------------

pub fn ctx() -> SessionContext {
    SessionContext::new("ws", "user")
}

/// A pool with a mock clock and no background reaper.
pub fn pool(size: usize) -> (SessionPool<Fake>, Arc<Counts>, Arc<quanta::Mock>) {
    let fake = Fake::default();
    let counts = Arc::clone(&fake.0);
    let (clock, mock) = quanta::Clock::mock();
    let pool = SessionPool::builder(fake)
        .pool_size(size)
        .max_idle_time(Duration::from_secs(10))
        .clock(clock)
        .reap_every(None)
        .build()
        .expect("valid configuration");
    (pool, counts, mock)
}

/// Lets spawned tasks run until no establishment is in flight (current-thread runtime).
pub async fn settle<C: Connector, S: SessionStore>(pool: &SessionPool<C, S>) {
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

pub fn held_pool(size: usize) -> (SessionPool<Fake>, Arc<Counts>) {
    let (pool, counts, _mock) = pool(size);
    counts.hold_bootstrap.store(true, Ordering::SeqCst);
    (pool, counts)
}

/// Lets a test keep a handle on the `MemoryStore` the pool uses.
pub struct ArcStore(pub Arc<MemoryStore>);

impl SessionStore for ArcStore {
    type Error = std::convert::Infallible;
    fn loop_id(
        &self,
        session: &str,
    ) -> impl Future<Output = Result<Option<LoopId>, Self::Error>> + Send {
        self.0.loop_id(session)
    }
    fn save(&self, record: SessionRecord) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.0.save(record)
    }
    fn touch(&self, session: &str) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.0.touch(session)
    }
}

pub fn seeded(loop_id: &str) -> (SessionPool<Fake, ArcStore>, Arc<Counts>, Arc<MemoryStore>) {
    let store = Arc::new(MemoryStore::new());
    store.insert(SessionRecord {
        session: "s".into(),
        loop_id: LoopId::new(loop_id),
        workspace: "ws".into(),
        user: "user".into(),
    });
    let fake = Fake::default();
    let counts = Arc::clone(&fake.0);
    let pool = SessionPool::builder(fake)
        .pool_size(4)
        .store(ArcStore(Arc::clone(&store)))
        .reap_every(None)
        .build()
        .unwrap();
    (pool, counts, store)
}
