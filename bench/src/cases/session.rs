//! The session cases: slotpool's `SessionPool` and the R3 reference ([`RefSessionPool`]) side
//! by side, over the same no-op connector and the same no-op store.
//!
//! | case | what it measures |
//! |---|---|
//! | `session/hot-acquire-8-tasks` | 1000 active sessions; 8 tasks on a 2-worker runtime each re-acquire random live sessions (xorshift), dropping the handle at once |
//! | `session/churn` | 8 tasks on a 2-worker runtime, each looping acquire → release over its own fresh session ids, so every acquire establishes (connect, store lookup, bootstrap, save, reader task) and every release closes |
//!
//! In `session/churn`, slotpool opens no event channel (it is opened at the first event or
//! `take_events`) and spawns no reader for a session released before its task yields: readers
//! are started by one starter task per batch of installs (see `slotpool::session`, *Event
//! readers*), and each acquire that establishes spends a unit of tokio's coop budget, so the
//! loop yields (and the starter runs) about once per 128 cycles. The reference spawns a reader
//! and creates a channel per session, as R3 does.
//!
//! There is no floor here: an acquire of a keyed session has no pool-free equivalent that is
//! a lower bound in the same sense as one CAS below a limit.
//!
//! # The reference (R3, from SEEDS.md)
//!
//! One `tokio::sync::Mutex` guards all state: the map of active slots and the list of idle
//! ones. `pool_size` idle slots, each holding a client from the factory (a connect), are
//! created at start. `acquire` takes the mutex to look the session up (hot path: check
//! connected, reader alive, used within `max_idle_time`, refresh `last_used` under the lock,
//! clone, return — one lock); otherwise it releases a dead or stale slot (the mutex again),
//! takes an idle slot **without waiting** (the mutex again; none is `Exhausted`), asks the
//! store for the loop id, reattaches or bootstraps, saves, starts the reader task with a
//! 256-event channel, and records the slot as active (the mutex a fourth time, replacing any
//! slot a concurrent acquire recorded: R3's leak). `release` takes the mutex, removes the
//! slot, aborts its reader, closes its client and puts a fresh idle slot back (a new client
//! from the factory, under the lock). The hot path takes the lock once, which is the most
//! favourable reading of R3 for the reference.
//!
//! Runtimes and pools are built once per case, not per repeat; the runners are public so the
//! criterion bench times the same code.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use slotpool::session::{
    Connector, LoopId, SessionContext, SessionPool, SessionRecord, SessionStore,
    DEFAULT_MAX_IDLE_TIME, EVENT_BUFFER,
};
use tokio::runtime::Runtime;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::report::{interleave, Record, Runner, Sample, Settings};

/// Case name: hot re-acquires of live sessions from 8 tasks.
pub const HOT: &str = "session/hot-acquire-8-tasks";
/// Case name: acquire → release of fresh sessions.
pub const CHURN: &str = "session/churn";
/// Every session case, in the order they run.
pub const CASES: [&str; 2] = [HOT, CHURN];

/// Active sessions in the hot case (R3's default `pool_size`).
pub const SESSIONS: usize = 1000;
/// Tasks in both cases.
pub const TASK_COUNT: usize = 8;
/// Worker threads of the runtime.
pub const WORKERS: usize = 2;
/// Session ids each churn task cycles through (each released before it is reused).
pub const CHURN_IDS_PER_TASK: usize = 256;

/// Full-run operation counts (scaled by [`Settings::ops`]).
pub mod ops {
    /// Hot acquires per repeat, over all tasks.
    pub const HOT: u64 = 1_600_000;
    /// Acquire → release cycles per repeat, over all tasks.
    pub const CHURN: u64 = 160_000;
}

// ---------------------------------------------------------------------------------------
// Shared fixtures: the no-op connector and store
// ---------------------------------------------------------------------------------------

/// A connection that is always up and never sends an event.
#[derive(Debug)]
pub struct NoopConn {
    alive: AtomicBool,
}

/// Connects, bootstraps and reattaches at once; every connection stays alive.
#[derive(Debug, Clone)]
pub struct NoopSessionConnector {
    loop_id: LoopId,
}

impl Default for NoopSessionConnector {
    fn default() -> Self {
        Self {
            loop_id: LoopId::new("loop-bench"),
        }
    }
}

impl Connector for NoopSessionConnector {
    type Conn = NoopConn;
    type Event = ();
    type Error = Infallible;

    fn connect(&self) -> impl Future<Output = Result<NoopConn, Infallible>> + Send {
        std::future::ready(Ok(NoopConn {
            alive: AtomicBool::new(true),
        }))
    }

    fn bootstrap(
        &self,
        _conn: &NoopConn,
        _session: &str,
        _ctx: &SessionContext,
    ) -> impl Future<Output = Result<LoopId, Infallible>> + Send {
        std::future::ready(Ok(self.loop_id.clone()))
    }

    fn reattach(
        &self,
        _conn: &NoopConn,
        _loop_id: &LoopId,
    ) -> impl Future<Output = Result<(), Infallible>> + Send {
        std::future::ready(Ok(()))
    }

    fn is_alive(&self, conn: &NoopConn) -> bool {
        conn.alive.load(Ordering::Relaxed)
    }

    fn next_event(&self, _conn: &NoopConn) -> impl Future<Output = Option<()>> + Send {
        std::future::pending()
    }

    fn close(&self, conn: &NoopConn) {
        conn.alive.store(false, Ordering::Relaxed);
    }
}

/// A store that records nothing (every session bootstraps), so the cases time the pools.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoopStore;

impl SessionStore for NoopStore {
    type Error = Infallible;

    fn loop_id(
        &self,
        _session: &str,
    ) -> impl Future<Output = Result<Option<LoopId>, Infallible>> + Send {
        std::future::ready(Ok(None))
    }

    fn save(&self, _record: SessionRecord) -> impl Future<Output = Result<(), Infallible>> + Send {
        std::future::ready(Ok(()))
    }

    fn touch(&self, _session: &str) -> impl Future<Output = Result<(), Infallible>> + Send {
        std::future::ready(Ok(()))
    }
}

// ---------------------------------------------------------------------------------------
// The R3 reference
// ---------------------------------------------------------------------------------------

/// Why the reference's acquire failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RefError {
    /// No idle slot (R3's `ErrPoolExhausted`).
    Exhausted,
    /// The connector or store failed.
    Failed(String),
}

/// An idle slot: a client created by the factory, not yet bound to a session.
struct RefIdle<C: Connector> {
    client: Arc<C::Conn>,
}

/// An active slot.
struct RefSlot<C: Connector> {
    client: Arc<C::Conn>,
    loop_id: LoopId,
    last_used: Instant,
    reader: JoinHandle<()>,
    reader_alive: Arc<AtomicBool>,
    /// The event channel's receiving end, kept with the slot (R3 hands it out with it).
    _events: Option<mpsc::Receiver<C::Event>>,
}

struct RefState<C: Connector> {
    active: HashMap<String, RefSlot<C>>,
    idle: Vec<RefIdle<C>>,
}

/// What the reference's acquire returns: the slot's client and loop id.
pub struct RefSession<C: Connector> {
    /// The connection.
    pub client: Arc<C::Conn>,
    /// Its loop.
    pub loop_id: LoopId,
}

impl<C: Connector> std::fmt::Debug for RefSession<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RefSession")
            .field("loop_id", &self.loop_id)
            .finish()
    }
}

/// R3's session pool: one async mutex over all state. See the module docs.
pub struct RefSessionPool<C: Connector, S: SessionStore> {
    state: tokio::sync::Mutex<RefState<C>>,
    connector: Arc<C>,
    store: S,
    max_idle_time: Duration,
}

impl<C: Connector, S: SessionStore> std::fmt::Debug for RefSessionPool<C, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RefSessionPool").finish_non_exhaustive()
    }
}

impl<C: Connector, S: SessionStore> RefSessionPool<C, S> {
    /// Creates the pool with `pool_size` idle slots, each with a client from the factory
    /// (R3's eager start; 0 means the default of 1000).
    pub async fn new(connector: C, store: S, pool_size: usize) -> Result<Self, RefError> {
        let pool_size = if pool_size == 0 { 1000 } else { pool_size };
        let mut idle = Vec::with_capacity(pool_size);
        for _ in 0..pool_size {
            let client = connector
                .connect()
                .await
                .map_err(|e| RefError::Failed(e.to_string()))?;
            idle.push(RefIdle {
                client: Arc::new(client),
            });
        }
        Ok(Self {
            state: tokio::sync::Mutex::new(RefState {
                active: HashMap::new(),
                idle,
            }),
            connector: Arc::new(connector),
            store,
            max_idle_time: DEFAULT_MAX_IDLE_TIME,
        })
    }

    /// R3's `acquire(session, workspace, user)`.
    pub async fn acquire(
        &self,
        session: &str,
        ctx: &SessionContext,
    ) -> Result<RefSession<C>, RefError> {
        // Lock 1: is there a live, fresh active slot?
        let stale = {
            let mut state = self.state.lock().await;
            match state.active.get_mut(session) {
                Some(slot) => {
                    if self.connector.is_alive(&slot.client)
                        && slot.reader_alive.load(Ordering::Acquire)
                        && slot.last_used.elapsed() <= self.max_idle_time
                    {
                        slot.last_used = Instant::now();
                        return Ok(RefSession {
                            client: Arc::clone(&slot.client),
                            loop_id: slot.loop_id.clone(),
                        });
                    }
                    true
                }
                None => false,
            }
        };
        // Lock 2: release the dead or stale slot and start over.
        if stale {
            self.release(session).await;
        }
        // Lock 3: take an idle slot without waiting.
        let slot = {
            let mut state = self.state.lock().await;
            match state.idle.pop() {
                Some(slot) => slot,
                None => return Err(RefError::Exhausted),
            }
        };
        let client = slot.client;
        let stored = match self.store.loop_id(session).await {
            Ok(stored) => stored,
            Err(e) => {
                self.put_back(client).await;
                return Err(RefError::Failed(e.to_string()));
            }
        };
        let stored = stored.filter(LoopId::is_attachable);
        let loop_id = match stored {
            Some(id) => match self.connector.reattach(&client, &id).await {
                Ok(()) => id,
                Err(_) => match self.connector.bootstrap(&client, session, ctx).await {
                    Ok(id) => id,
                    Err(e) => {
                        self.put_back(client).await;
                        return Err(RefError::Failed(e.to_string()));
                    }
                },
            },
            None => match self.connector.bootstrap(&client, session, ctx).await {
                Ok(id) => id,
                Err(e) => {
                    self.put_back(client).await;
                    return Err(RefError::Failed(e.to_string()));
                }
            },
        };
        let record = SessionRecord {
            session: session.to_string(),
            loop_id: loop_id.clone(),
            workspace: ctx.workspace.clone(),
            user: ctx.user.clone(),
        };
        if let Err(e) = self.store.save(record).await {
            self.put_back(client).await;
            return Err(RefError::Failed(e.to_string()));
        }
        // The reader task forwards events into a 256-event channel.
        let (events_in, events_out) = mpsc::channel(EVENT_BUFFER);
        let reader_alive = Arc::new(AtomicBool::new(true));
        let reader = {
            let (connector, client, alive) = (
                Arc::clone(&self.connector),
                Arc::clone(&client),
                Arc::clone(&reader_alive),
            );
            tokio::spawn(async move {
                while let Some(event) = connector.next_event(&client).await {
                    if events_in.send(event).await.is_err() {
                        break;
                    }
                }
                alive.store(false, Ordering::Release);
            })
        };
        let handle = RefSession {
            client: Arc::clone(&client),
            loop_id: loop_id.clone(),
        };
        // Lock 4: record the slot as active (replacing whatever a concurrent acquire put
        // there: R3's race, kept as it is).
        let mut state = self.state.lock().await;
        state.active.insert(
            session.to_string(),
            RefSlot {
                client,
                loop_id,
                last_used: Instant::now(),
                reader,
                reader_alive,
                _events: Some(events_out),
            },
        );
        Ok(handle)
    }

    async fn put_back(&self, client: Arc<C::Conn>) {
        self.state.lock().await.idle.push(RefIdle { client });
    }

    /// R3's `release(session)`: remove the active slot, abort its reader, close its client,
    /// and put a fresh idle slot (a new client from the factory) back, all under the lock.
    pub async fn release(&self, session: &str) -> bool {
        let mut state = self.state.lock().await;
        let Some(slot) = state.active.remove(session) else {
            return false;
        };
        slot.reader.abort();
        self.connector.close(&slot.client);
        if let Ok(client) = self.connector.connect().await {
            state.idle.push(RefIdle {
                client: Arc::new(client),
            });
        }
        true
    }

    /// R3's `stats()`: active and idle counts.
    pub async fn stats(&self) -> (usize, usize) {
        let state = self.state.lock().await;
        (state.active.len(), state.idle.len())
    }

    /// R3's `stop()`: closes every active and idle client.
    pub async fn stop(&self) {
        let mut state = self.state.lock().await;
        for (_, slot) in state.active.drain() {
            slot.reader.abort();
            self.connector.close(&slot.client);
        }
        for slot in state.idle.drain(..) {
            self.connector.close(&slot.client);
        }
    }
}

// ---------------------------------------------------------------------------------------
// Pools, fills and runners
// ---------------------------------------------------------------------------------------

/// slotpool's pool as the cases use it.
pub type SlotSessions = SessionPool<NoopSessionConnector, NoopStore>;
/// The reference as the cases use it.
pub type RefSessions = RefSessionPool<NoopSessionConnector, NoopStore>;

/// The 2-worker runtime both cases run on.
pub fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(WORKERS)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("cannot build the bench runtime: {e}"))
}

/// The context every acquire passes.
pub fn context() -> SessionContext {
    SessionContext::new("bench", "bench")
}

/// A slotpool pool of `SESSIONS` capacity (built inside `rt`, no background reaper).
pub fn slotpool_pool(rt: &Runtime) -> Arc<SlotSessions> {
    let _enter = rt.enter();
    let pool = SessionPool::builder(NoopSessionConnector::default())
        .store(NoopStore)
        .pool_size(SESSIONS)
        .reap_every(None)
        .build()
        .unwrap_or_else(|e| panic!("valid configuration refused: {e}"));
    Arc::new(pool)
}

/// The reference with `SESSIONS` idle slots created up front.
pub fn reference_pool(rt: &Runtime) -> Arc<RefSessions> {
    let pool = rt
        .block_on(RefSessionPool::new(
            NoopSessionConnector::default(),
            NoopStore,
            SESSIONS,
        ))
        .unwrap_or_else(|e| panic!("reference start failed: {e:?}"));
    Arc::new(pool)
}

/// The hot case's session ids.
pub fn hot_ids() -> Arc<Vec<String>> {
    Arc::new((0..SESSIONS).map(|i| format!("hot-{i}")).collect())
}

/// Task `t`'s churn ids.
pub fn churn_ids(task: usize) -> Vec<String> {
    (0..CHURN_IDS_PER_TASK)
        .map(|i| format!("churn-{task}-{i}"))
        .collect()
}

/// Makes every hot id an active session in slotpool.
pub fn fill_slotpool(rt: &Runtime, pool: &SlotSessions, ids: &[String]) {
    rt.block_on(async {
        let ctx = context();
        for id in ids {
            if let Err(e) = pool.acquire(id, &ctx).await {
                panic!("fill failed: {e}");
            }
        }
    });
}

/// Makes every hot id an active session in the reference.
pub fn fill_reference(rt: &Runtime, pool: &RefSessions, ids: &[String]) {
    rt.block_on(async {
        let ctx = context();
        for id in ids {
            if let Err(e) = pool.acquire(id, &ctx).await {
                panic!("fill failed: {e:?}");
            }
        }
    });
}

/// xorshift64: picks the next session in a hot loop without shared state.
fn next(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

async fn join_all(handles: Vec<JoinHandle<()>>) {
    for handle in handles {
        if let Err(e) = handle.await {
            panic!("bench task failed: {e}");
        }
    }
}

/// `tasks` tasks each re-acquire `ops_per_task` random live sessions (call inside
/// `Runtime::block_on` of a multi-thread runtime). Returns the wall time.
pub async fn slotpool_hot(
    pool: &Arc<SlotSessions>,
    ids: &Arc<Vec<String>>,
    tasks: usize,
    ops_per_task: u64,
) -> Duration {
    let start = Instant::now();
    let handles = (0..tasks)
        .map(|t| {
            let (pool, ids) = (Arc::clone(pool), Arc::clone(ids));
            tokio::spawn(async move {
                let ctx = context();
                let mut rng = 0x9e37_79b9_7f4a_7c15_u64 ^ (t as u64 + 1);
                for _ in 0..ops_per_task {
                    let id = &ids[(next(&mut rng) % ids.len() as u64) as usize];
                    match pool.acquire(id, &ctx).await {
                        Ok(session) => drop(std::hint::black_box(session)),
                        Err(e) => panic!("hot acquire failed: {e}"),
                    }
                }
            })
        })
        .collect();
    join_all(handles).await;
    start.elapsed()
}

/// The reference's side of [`slotpool_hot`].
pub async fn reference_hot(
    pool: &Arc<RefSessions>,
    ids: &Arc<Vec<String>>,
    tasks: usize,
    ops_per_task: u64,
) -> Duration {
    let start = Instant::now();
    let handles = (0..tasks)
        .map(|t| {
            let (pool, ids) = (Arc::clone(pool), Arc::clone(ids));
            tokio::spawn(async move {
                let ctx = context();
                let mut rng = 0x9e37_79b9_7f4a_7c15_u64 ^ (t as u64 + 1);
                for _ in 0..ops_per_task {
                    let id = &ids[(next(&mut rng) % ids.len() as u64) as usize];
                    match pool.acquire(id, &ctx).await {
                        Ok(session) => drop(std::hint::black_box(session)),
                        Err(e) => panic!("hot acquire failed: {e:?}"),
                    }
                }
            })
        })
        .collect();
    join_all(handles).await;
    start.elapsed()
}

/// `tasks` tasks each run `ops_per_task` acquire → release cycles over their own fresh ids.
pub async fn slotpool_churn(pool: &Arc<SlotSessions>, tasks: usize, ops_per_task: u64) -> Duration {
    let start = Instant::now();
    let handles = (0..tasks)
        .map(|t| {
            let pool = Arc::clone(pool);
            tokio::spawn(async move {
                let (ctx, ids) = (context(), churn_ids(t));
                for i in 0..ops_per_task as usize {
                    let id = &ids[i % ids.len()];
                    match pool.acquire(id, &ctx).await {
                        Ok(session) => drop(std::hint::black_box(session)),
                        Err(e) => panic!("churn acquire failed: {e}"),
                    }
                    pool.release(id);
                }
            })
        })
        .collect();
    join_all(handles).await;
    start.elapsed()
}

/// The reference's side of [`slotpool_churn`].
pub async fn reference_churn(pool: &Arc<RefSessions>, tasks: usize, ops_per_task: u64) -> Duration {
    let start = Instant::now();
    let handles = (0..tasks)
        .map(|t| {
            let pool = Arc::clone(pool);
            tokio::spawn(async move {
                let (ctx, ids) = (context(), churn_ids(t));
                for i in 0..ops_per_task as usize {
                    let id = &ids[i % ids.len()];
                    match pool.acquire(id, &ctx).await {
                        Ok(session) => drop(std::hint::black_box(session)),
                        Err(e) => panic!("churn acquire failed: {e:?}"),
                    }
                    pool.release(id).await;
                }
            })
        })
        .collect();
    join_all(handles).await;
    start.elapsed()
}

// ---------------------------------------------------------------------------------------
// The comparison
// ---------------------------------------------------------------------------------------

/// Runs both session cases for `slotpool` and `reference`, interleaved.
pub fn compare(settings: &Settings) -> Vec<Record> {
    let mut records = hot(settings);
    records.extend(churn(settings));
    records
}

fn hot(settings: &Settings) -> Vec<Record> {
    let rt = runtime();
    let ids = hot_ids();
    let pool = slotpool_pool(&rt);
    fill_slotpool(&rt, &pool, &ids);
    let reference = reference_pool(&rt);
    fill_reference(&rt, &reference, &ids);
    let ops = settings.ops(ops::HOT, TASK_COUNT as u64 * 100);
    let per = (ops / TASK_COUNT as u64).max(1);
    let impls: Vec<Runner<'_>> = vec![
        (
            "slotpool",
            Box::new(|ops| {
                let per = (ops / TASK_COUNT as u64).max(1);
                Sample::timed(
                    per * TASK_COUNT as u64,
                    rt.block_on(slotpool_hot(&pool, &ids, TASK_COUNT, per)),
                )
            }),
        ),
        (
            "reference",
            Box::new(|ops| {
                let per = (ops / TASK_COUNT as u64).max(1);
                Sample::timed(
                    per * TASK_COUNT as u64,
                    rt.block_on(reference_hot(&reference, &ids, TASK_COUNT, per)),
                )
            }),
        ),
    ];
    let records = interleave(HOT, per * TASK_COUNT as u64, settings, impls);
    pool.stop();
    rt.block_on(reference.stop());
    records
}

fn churn(settings: &Settings) -> Vec<Record> {
    let rt = runtime();
    let pool = slotpool_pool(&rt);
    let reference = reference_pool(&rt);
    let ops = settings.ops(ops::CHURN, TASK_COUNT as u64 * 10);
    let per = (ops / TASK_COUNT as u64).max(1);
    let impls: Vec<Runner<'_>> = vec![
        (
            "slotpool",
            Box::new(|ops| {
                let per = (ops / TASK_COUNT as u64).max(1);
                Sample::timed(
                    per * TASK_COUNT as u64,
                    rt.block_on(slotpool_churn(&pool, TASK_COUNT, per)),
                )
            }),
        ),
        (
            "reference",
            Box::new(|ops| {
                let per = (ops / TASK_COUNT as u64).max(1);
                Sample::timed(
                    per * TASK_COUNT as u64,
                    rt.block_on(reference_churn(&reference, TASK_COUNT, per)),
                )
            }),
        ),
    ];
    let records = interleave(CHURN, per * TASK_COUNT as u64, settings, impls);
    pool.stop();
    rt.block_on(reference.stop());
    records
}
