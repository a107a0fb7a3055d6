//! R3, the per-session connection pool (SEEDS.md), rebuilt faithfully so that slotpool's
//! `SessionPool` is measured against the design it replaces. It runs over slotpool's session
//! traits (`Connector`, `SessionStore`), so both pools use the same fixtures.
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
//! The cases that run it beside slotpool are in `crate::cases::session`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use slotpool::session::{
    Connector, LoopId, SessionContext, SessionRecord, SessionStore, DEFAULT_MAX_IDLE_TIME,
    EVENT_BUFFER,
};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

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
