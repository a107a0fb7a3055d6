//! One live connection per session id, established once however many callers ask at once,
//! bounded without waiting (R3, with its races removed).
//!
//! # What it does
//!
//! A [`SessionPool`] maps application sessions to long-lived daemon connections. For
//! [`SessionPool::acquire`]`(session, ctx)`:
//!
//! 1. **Hot path.** If the session has a live, fresh connection it is returned at once: one
//!    map read under its shard's read lock (shared with other readers, never with a network
//!    wait), a liveness check, and one CAS that refreshes its last-use stamp. Nothing is
//!    awaited.
//! 2. A **dead** connection (the connector says it is down, or its event reader ended) or a
//!    **stale** one (idle past `max_idle_time`) is retired (closed, capacity returned) and
//!    rebuilt.
//! 3. Otherwise the caller **claims** the session. Exactly one claimant becomes the leader and
//!    takes capacity **without waiting** ([`Limit::try_acquire_owned`]); none left is
//!    [`SessionError::Exhausted`]. Everyone else who asks for the session meanwhile joins the
//!    leader's flight and gets the same connection, or the same error (**single flight**).
//! 4. The leader **drives** the establishment inside its own `acquire` (no task spawn, no
//!    cross-task wake-up when nobody cancels; see *Cancellation*): connect (or take a prewarmed
//!    connection), ask the [`SessionStore`] for the session's loop id, **reattach** to it if
//!    there is a usable one, falling back to a fresh **bootstrap** if that fails (or if there is
//!    none), persist a new loop id (or touch the record after a reattach), and install the
//!    connection as the session's active one. Installing queues the session's **event reader**
//!    (see *Event readers*).
//!
//! A caller that finds no entry spends a unit of tokio's cooperative budget before it claims
//! (as tokio's own resources do), so a loop of establishments against a connector that
//! answers at once still yields to the runtime now and then.
//!
//! [`SessionPool::release`] (and [`SessionPool::reset_session`], which is the same as in R3)
//! retires the session's connection: reader aborted, connection closed, capacity returned.
//! [`SessionPool::stop`] retires everything, and every later acquire gets
//! [`SessionError::Closed`]. [`SessionPool::reap`] retires sessions idle past
//! `max_idle_time`, with time from the injected `quanta::Clock`; a background task calls it
//! every `reap_every`, and tests call it directly with `Clock::mock()`.
//!
//! Connections are created lazily. [`SessionPoolBuilder::prewarm`] keeps up to that many
//! connected-but-unassigned connections (filled by [`SessionPool::prewarm`]), so an
//! establishment can skip its connect; they do not count against `pool_size`, which bounds
//! sessions.
//!
//! # Event readers
//!
//! Each active session has a reader task that forwards its connection's events into a
//! bounded channel of [`EVENT_BUFFER`] (the caller takes the receiver with
//! [`Session::take_events`]; until then events wait in the channel) and marks the session
//! dead when the stream ends. Two things are lazy, because a session that is released soon
//! after it is established (or whose events nobody takes) would otherwise pay for them for
//! nothing:
//!
//! * the **reader task** is started by a one-shot *starter* task that serves every session
//!   installed since it was scheduled: the first install schedules it, later ones only queue.
//!   It spawns the readers of the sessions still active when it runs (normally at the
//!   installing task's next yield), so a session released before then costs no task;
//! * the **channel** is opened by whichever comes first, the reader's first event or
//!   `take_events`; a receiver taken after the reader ended sees the stream's end at once.
//!
//! # The map: sharded, read-locked, hashed once
//!
//! Sessions live in a [`Registry`]: a power-of-two number of shards,
//! each a hash table behind a reader-writer lock, keyed by the session id with its hash stored
//! beside it. An acquire hashes the id once for all its registry calls. Hot acquires of
//! different sessions share no lock word unless their shards collide, and hot acquires of one
//! session only share a read lock. A mutex (R3) serialises every acquire; copy-on-write maps
//! (arc-swap), this module's first design, made every new session and every release copy a
//! shard and allocate, which cost establishment churn far more than the read lock costs
//! the hot path. Writes (a claim, an install, a release) change one shard in place.
//!
//! # Exact accounting
//!
//! Capacity is an [`OwnedPermit`] and every connection has one owner at a time, so "returned
//! exactly once" follows from ownership rather than from bookkeeping on each path:
//!
//! * during establishment the permit and the open connection belong to the establishment
//!   future (a guard closes the connection on any early return, a drop, or a panic's unwind;
//!   the permit drops with the future's state), so connect, bootstrap, reattach-then-bootstrap
//!   and store failures all return it once;
//! * once established, both move into the session's `Live` record, whose resources (the
//!   connection, the permit, and its reader if one was started) are freed by whoever wins its
//!   use stamp's move to `RETIRED` ([`UseStamp`]):
//!   a release, a reap, a rebuild of a dead or stale session, or `stop`. That is one CAS, so
//!   exactly one of them frees, and a release racing an acquire either retires the old
//!   connection (the acquire then rebuilds) or runs after the acquire refreshed it (and closes
//!   it under the caller, who sees [`Session::is_open`] go false);
//! * a release or stop that lands while a session is still being established removes its
//!   flight from the map; the leader's install is then refused and the leader retires the
//!   connection itself, failing the flight with [`SessionError::Released`] or
//!   [`SessionError::Closed`].
//!
//! # Cancellation
//!
//! The establishment is one heap-pinned future that owns everything it needs (permit, key,
//! context, the flight's completion). The leader polls it inline; if the leader's `acquire` is
//! dropped before it finishes, the driver's `Drop` hands **the same pinned future** to the
//! runtime as a task (`Handle::spawn`), so it carries on from where it was. Either way:
//!
//! * the establishment finishes, its result is installed and cached, and every follower gets
//!   it: **a cancelled leader does not fail its followers**, and a connection it was opening
//!   is not wasted (it stays installed as the session's active one, counting against
//!   `pool_size` until released or reaped);
//! * a follower dropped at its wait only removes its own waker.
//!
//! This is the behaviour of an establishment spawned from the start, paid for (one spawn)
//! only when a leader is actually cancelled. If the establishment is dropped without finishing
//! (the runtime shut down) or the connector panics, its guard closes any open connection,
//! returns the permit, removes the flight and fails the waiters with
//! [`SessionError::Aborted`].
//!
//! # Errors and retry safety
//!
//! Each [`SessionError`] says how far the request got ([`Reach`]): a failed connect, a failed
//! store lookup, `Exhausted` and `Closed` are [`Reach::NotSent`] (nothing happened on the
//! daemon); a failed bootstrap, a failed save of a new loop id, `Released` and an abort after
//! bootstrap began are [`Reach::MaybeApplied`] (a loop may exist on the daemon).
//!
//! # Example
//!
//! ```
//! use std::convert::Infallible;
//! use std::future::{pending, ready, Future};
//! use slotpool::session::{Connector, LoopId, SessionContext, SessionPool};
//!
//! /// A connector to an imaginary daemon: every connection is up, never sends events.
//! struct Daemon;
//!
//! impl Connector for Daemon {
//!     type Conn = ();
//!     type Event = String;
//!     type Error = Infallible;
//!
//!     fn connect(&self) -> impl Future<Output = Result<(), Infallible>> + Send {
//!         ready(Ok(()))
//!     }
//!     fn bootstrap(
//!         &self,
//!         _: &(),
//!         session: &str,
//!         _: &SessionContext,
//!     ) -> impl Future<Output = Result<LoopId, Infallible>> + Send {
//!         ready(Ok(LoopId::new(format!("loop-{session}"))))
//!     }
//!     fn reattach(&self, _: &(), _: &LoopId) -> impl Future<Output = Result<(), Infallible>> + Send {
//!         ready(Ok(()))
//!     }
//!     fn is_alive(&self, _: &()) -> bool {
//!         true
//!     }
//!     fn next_event(&self, _: &()) -> impl Future<Output = Option<String>> + Send {
//!         pending()
//!     }
//!     fn close(&self, _: &()) {}
//! }
//!
//! #[tokio::main(flavor = "current_thread")]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let pool = SessionPool::builder(Daemon).pool_size(100).build()?;
//!     let ctx = SessionContext::new("workspace-1", "alice");
//!
//!     let first = pool.acquire("session-a", &ctx).await?;
//!     assert_eq!(first.loop_id().as_str(), "loop-session-a");
//!     let _events = first.take_events(); // a bounded receiver of the daemon's events
//!
//!     // The same session again: the same connection, straight from the hot path.
//!     let again = pool.acquire("session-a", &ctx).await?;
//!     assert!(first.same_connection(&again));
//!
//!     assert!(pool.release("session-a"));
//!     assert!(!first.is_open());
//!     assert_eq!(pool.stats().in_use, 0);
//!     pool.stop();
//!     Ok(())
//! }
//! ```
//!
//! This module owns sessions, their connections and the establishments; the claim and
//! retire protocol itself lives in [`crate::flight`] (executor-agnostic, loom-checked).

use std::collections::HashMap;
use std::convert::Infallible;
use std::fmt;
use std::future::Future;
use std::ops::Deref;
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use quanta::Clock;
use tokio::sync::mpsc;
use tokio::task::AbortHandle;

use crate::error::{ConfigError, Reach, TryAcquireError};
use crate::flight::{Batch, Claim, Entry, Flight, Hashed, KeyHash, Registry, Touch, UseStamp};
use crate::limit::{Limit, OwnedPermit};
use crate::pool::reap::nanos as duration_ns;
use crate::sync::{Arc, AtomicBool, AtomicU64, Counter, Mutex, Ordering, Weak};

/// Capacity of each session's event channel (R3's 256). The reader waits when it is full.
pub const EVENT_BUFFER: usize = 256;

/// `pool_size` when the builder is not told one (R3's default).
pub const DEFAULT_POOL_SIZE: usize = 1000;

/// `max_idle_time` when the builder is not told one (R3's default: ten minutes).
pub const DEFAULT_MAX_IDLE_TIME: Duration = Duration::from_secs(600);

/// Most shards the session map is split into; fewer for small pools (about 8 sessions each).
const MAX_SHARDS: usize = 64;

// ---------------------------------------------------------------------------------------
// Injected parts
// ---------------------------------------------------------------------------------------

/// Opens, prepares, watches and closes daemon connections. Injectable, as R3's client factory
/// and bootstrap function are: wrap a real client, or count calls in a test fake.
///
/// The futures must be `Send`; an `async fn` in the impl satisfies these signatures.
pub trait Connector: Send + Sync + 'static {
    /// One open connection.
    type Conn: Send + Sync + 'static;
    /// What the connection's event stream yields.
    type Event: Send + 'static;
    /// Why an operation failed.
    type Error: std::error::Error + Send + Sync + 'static;

    /// Opens a connection.
    fn connect(&self) -> impl Future<Output = Result<Self::Conn, Self::Error>> + Send;

    /// Creates a new loop for `session` on the daemon and returns its id.
    fn bootstrap(
        &self,
        conn: &Self::Conn,
        session: &str,
        ctx: &SessionContext,
    ) -> impl Future<Output = Result<LoopId, Self::Error>> + Send;

    /// Attaches the connection to an existing loop.
    fn reattach(
        &self,
        conn: &Self::Conn,
        loop_id: &LoopId,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send;

    /// Whether the connection is still up. Called on every hot acquire: keep it a load.
    fn is_alive(&self, conn: &Self::Conn) -> bool;

    /// The connection's next event; `None` when the stream has ended (the session is then
    /// considered dead and is rebuilt on its next acquire).
    fn next_event(&self, conn: &Self::Conn) -> impl Future<Output = Option<Self::Event>> + Send;

    /// Closes the connection. Called exactly once per opened connection.
    fn close(&self, conn: &Self::Conn);
}

/// Where sessions' loop ids persist between connections (R3's session store).
pub trait SessionStore: Send + Sync + 'static {
    /// Why an operation failed.
    type Error: std::error::Error + Send + Sync + 'static;

    /// The loop id recorded for `session`, if any.
    fn loop_id(
        &self,
        session: &str,
    ) -> impl Future<Output = Result<Option<LoopId>, Self::Error>> + Send;

    /// Creates or updates the session's record (called after a bootstrap).
    fn save(&self, record: SessionRecord) -> impl Future<Output = Result<(), Self::Error>> + Send;

    /// Marks the session used now (called after a reattach; advisory, a failure is logged).
    fn touch(&self, session: &str) -> impl Future<Output = Result<(), Self::Error>> + Send;
}

/// Who the session is for: passed to [`Connector::bootstrap`] and saved in the record.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SessionContext {
    /// The workspace the session belongs to.
    pub workspace: String,
    /// The user the session acts for.
    pub user: String,
}

impl SessionContext {
    /// A context for `user` in `workspace`.
    pub fn new(workspace: impl Into<String>, user: impl Into<String>) -> Self {
        Self {
            workspace: workspace.into(),
            user: user.into(),
        }
    }
}

/// A daemon loop's id.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct LoopId(Arc<str>);

impl LoopId {
    /// Wraps an id.
    pub fn new(id: impl Into<Arc<str>>) -> Self {
        Self(id.into())
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether the id names a loop one can reattach to. Empty ids and R3's `pending-…`
    /// placeholders do not: a session recorded with one is bootstrapped afresh.
    pub fn is_attachable(&self) -> bool {
        !self.0.is_empty() && !self.0.starts_with("pending-")
    }
}

impl fmt::Debug for LoopId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("LoopId").field(&&*self.0).finish()
    }
}

impl fmt::Display for LoopId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What a [`SessionStore`] keeps per session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionRecord {
    /// The session id.
    pub session: String,
    /// Its daemon loop.
    pub loop_id: LoopId,
    /// The workspace from the acquire that created the loop.
    pub workspace: String,
    /// The user from the acquire that created the loop.
    pub user: String,
}

/// An in-memory [`SessionStore`] (a mutex-guarded map; touched only on establishment).
#[derive(Default)]
pub struct MemoryStore {
    records: Mutex<HashMap<String, SessionRecord>>,
    touches: AtomicU64,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// The record for `session`, if any.
    pub fn record(&self, session: &str) -> Option<SessionRecord> {
        self.records.lock().get(session).cloned()
    }

    /// Creates or replaces a record (to seed the store).
    pub fn insert(&self, record: SessionRecord) {
        self.records.lock().insert(record.session.clone(), record);
    }

    /// Removes `session`'s record, so its next establishment bootstraps afresh.
    pub fn remove(&self, session: &str) -> Option<SessionRecord> {
        self.records.lock().remove(session)
    }

    /// Number of records.
    pub fn len(&self) -> usize {
        self.records.lock().len()
    }

    /// Whether the store holds no record.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many times [`SessionStore::touch`] was called.
    pub fn touches(&self) -> u64 {
        self.touches.load(Ordering::Relaxed)
    }
}

impl fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryStore")
            .field("records", &self.len())
            .finish()
    }
}

impl SessionStore for MemoryStore {
    type Error = Infallible;

    fn loop_id(
        &self,
        session: &str,
    ) -> impl Future<Output = Result<Option<LoopId>, Infallible>> + Send {
        let found = self.records.lock().get(session).map(|r| r.loop_id.clone());
        std::future::ready(Ok(found))
    }

    fn save(&self, record: SessionRecord) -> impl Future<Output = Result<(), Infallible>> + Send {
        self.insert(record);
        std::future::ready(Ok(()))
    }

    fn touch(&self, _session: &str) -> impl Future<Output = Result<(), Infallible>> + Send {
        self.touches.fetch_add(1, Ordering::Relaxed);
        std::future::ready(Ok(()))
    }
}

// ---------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------

/// A connector's or store's error, shared by every caller of one flight.
pub type SourceError = Arc<dyn std::error::Error + Send + Sync + 'static>;

/// Which store operation failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreOp {
    /// Looking up the session's loop id (before anything was sent to the daemon).
    Lookup,
    /// Saving a freshly bootstrapped loop id.
    Save,
}

impl fmt::Display for StoreOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            StoreOp::Lookup => "lookup",
            StoreOp::Save => "save",
        })
    }
}

/// Why [`SessionPool::acquire`] returned no session. Every caller of one flight receives the
/// same error. [`SessionError::reach`] says whether a retry is safe.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum SessionError {
    /// The pool was stopped (or dropped). Nothing was sent.
    #[error("session pool stopped")]
    Closed,
    /// Every one of the pool's `capacity` sessions is in use; no waiting is done. Nothing was
    /// sent.
    #[error("all {capacity} session slots are in use")]
    Exhausted {
        /// The pool's `pool_size`.
        capacity: usize,
    },
    /// Opening a connection failed.
    #[error("connect failed ({reach})")]
    Connect {
        /// The connector's error.
        source: SourceError,
        /// [`Reach::NotSent`]: no loop was touched.
        reach: Reach,
    },
    /// Bootstrapping a new loop failed.
    #[error("bootstrap of a new loop failed ({reach})")]
    Bootstrap {
        /// The connector's error.
        source: SourceError,
        /// [`Reach::MaybeApplied`]: the daemon may have created the loop.
        reach: Reach,
    },
    /// Reattaching to the stored loop failed, and so did the fallback bootstrap.
    #[error("reattach to loop `{loop_id}` failed ({reattach}), then bootstrap failed ({reach})")]
    Reattach {
        /// The stored loop that could not be reattached.
        loop_id: LoopId,
        /// Why the reattach failed.
        reattach: SourceError,
        /// Why the fallback bootstrap failed.
        #[source]
        bootstrap: SourceError,
        /// [`Reach::MaybeApplied`]: the bootstrap may have created a loop.
        reach: Reach,
    },
    /// The session store failed.
    #[error("session store {op} failed ({reach})")]
    Store {
        /// Which operation.
        op: StoreOp,
        /// The store's error.
        source: SourceError,
        /// `NotSent` for a lookup; `MaybeApplied` for a save (the loop exists, unrecorded).
        reach: Reach,
    },
    /// The session was released (or reset) while it was being established; the new
    /// connection was closed.
    #[error("session released while being established ({reach})")]
    Released {
        /// [`Reach::MaybeApplied`]: the loop may have been created and recorded.
        reach: Reach,
    },
    /// The establishment ended without a result: it was dropped (runtime shutdown) or
    /// the connector or store panicked.
    #[error("session establishment aborted ({reach})")]
    Aborted {
        /// `NotSent` if it ended before bootstrap or reattach began.
        reach: Reach,
    },
    /// `acquire` was polled outside a tokio runtime, so nothing could be spawned. Nothing was
    /// sent.
    #[error("no tokio runtime to run the session's establishment on")]
    NoRuntime,
}

impl SessionError {
    /// How far the request got; [`Reach::retry_is_safe`] tells whether to retry blindly.
    pub fn reach(&self) -> Reach {
        match self {
            SessionError::Closed | SessionError::Exhausted { .. } | SessionError::NoRuntime => {
                Reach::NotSent
            }
            SessionError::Connect { reach, .. }
            | SessionError::Bootstrap { reach, .. }
            | SessionError::Reattach { reach, .. }
            | SessionError::Store { reach, .. }
            | SessionError::Released { reach }
            | SessionError::Aborted { reach } => *reach,
        }
    }
}

fn source<E: std::error::Error + Send + Sync + 'static>(error: E) -> SourceError {
    Arc::new(error)
}

// ---------------------------------------------------------------------------------------
// Builder
// ---------------------------------------------------------------------------------------

/// Configures a [`SessionPool`]; [`SessionPoolBuilder::build`] checks the values.
pub struct SessionPoolBuilder<C, S = MemoryStore> {
    connector: C,
    store: S,
    pool_size: usize,
    max_idle_time: Duration,
    clock: Option<Clock>,
    prewarm: usize,
    /// `None`: the default (every half `max_idle_time`, within 1 s and 60 s, if built inside a
    /// runtime). `Some(None)`: no background reaper.
    reap_every: Option<Option<Duration>>,
}

impl<C: Connector> SessionPoolBuilder<C, MemoryStore> {
    fn new(connector: C) -> Self {
        Self {
            connector,
            store: MemoryStore::new(),
            pool_size: DEFAULT_POOL_SIZE,
            max_idle_time: DEFAULT_MAX_IDLE_TIME,
            clock: None,
            prewarm: 0,
            reap_every: None,
        }
    }
}

impl<C: Connector, S: SessionStore> SessionPoolBuilder<C, S> {
    /// Uses `store` for loop ids instead of a fresh [`MemoryStore`].
    pub fn store<S2: SessionStore>(self, store: S2) -> SessionPoolBuilder<C, S2> {
        SessionPoolBuilder {
            connector: self.connector,
            store,
            pool_size: self.pool_size,
            max_idle_time: self.max_idle_time,
            clock: self.clock,
            prewarm: self.prewarm,
            reap_every: self.reap_every,
        }
    }

    /// Most sessions active (or being established) at once. Default
    /// [`DEFAULT_POOL_SIZE`]; zero is a [`ConfigError`] (R3 read it as "default").
    pub fn pool_size(mut self, pool_size: usize) -> Self {
        self.pool_size = pool_size;
        self
    }

    /// How long a session may sit unused before it is stale (rebuilt on acquire, closed by
    /// the reaper). Default [`DEFAULT_MAX_IDLE_TIME`]; zero is a [`ConfigError`].
    pub fn max_idle_time(mut self, max_idle_time: Duration) -> Self {
        self.max_idle_time = max_idle_time;
        self
    }

    /// The clock for last-use stamps and reaping (tests pass `Clock::mock()`).
    pub fn clock(mut self, clock: Clock) -> Self {
        self.clock = Some(clock);
        self
    }

    /// Keeps up to `count` connected, unassigned connections, filled by
    /// [`SessionPool::prewarm`]. Default 0; above `pool_size` is a [`ConfigError`].
    pub fn prewarm(mut self, count: usize) -> Self {
        self.prewarm = count;
        self
    }

    /// How often the background reaper runs; `None` disables it (call
    /// [`SessionPool::reap`] yourself). Asking for one outside a tokio runtime, or for a zero
    /// interval, is a [`ConfigError`].
    pub fn reap_every(mut self, every: Option<Duration>) -> Self {
        self.reap_every = Some(every);
        self
    }

    /// Checks the settings and builds the pool. Opens no connection.
    ///
    /// # Errors
    /// [`ConfigError::Zero`] for a zero `pool_size`, `max_idle_time` or reap interval;
    /// [`ConfigError::TooLarge`] for a `pool_size` above [`MAX_PERMITS`](crate::limit::MAX_PERMITS);
    /// [`ConfigError::Inverted`] for `prewarm > pool_size`; [`ConfigError::Missing`] for an
    /// explicit reaper without a tokio runtime.
    pub fn build(self) -> Result<SessionPool<C, S>, ConfigError> {
        if self.max_idle_time.is_zero() {
            return Err(ConfigError::Zero("max_idle_time"));
        }
        let limit = Arc::new(Limit::new(self.pool_size).map_err(|error| match error {
            ConfigError::Zero(_) => ConfigError::Zero("pool_size"),
            ConfigError::TooLarge { value, max, .. } => ConfigError::TooLarge {
                name: "pool_size",
                value,
                max,
            },
            other => other,
        })?);
        if self.prewarm > self.pool_size {
            return Err(ConfigError::Inverted {
                low: "prewarm",
                low_value: self.prewarm as u64,
                high: "pool_size",
                high_value: self.pool_size as u64,
            });
        }
        let runtime = tokio::runtime::Handle::try_current().ok();
        let reap_every = match self.reap_every {
            Some(Some(every)) if every.is_zero() => return Err(ConfigError::Zero("reap_every")),
            Some(Some(every)) => {
                if runtime.is_none() {
                    return Err(ConfigError::Missing("tokio runtime (for the reaper)"));
                }
                Some(every)
            }
            Some(None) => None,
            None => Some(
                (self.max_idle_time / 2).clamp(Duration::from_secs(1), Duration::from_secs(60)),
            ),
        };
        let clock = self.clock.unwrap_or_default();
        let base = clock.now();
        let shards = (self.pool_size / 8).clamp(1, MAX_SHARDS);
        let shared = Arc::new(Shared {
            registry: Registry::new(shards),
            limit,
            connector: Arc::new(self.connector),
            store: self.store,
            max_idle_ns: duration_ns(self.max_idle_time),
            clock,
            base,
            prewarm: self.prewarm,
            idle: Mutex::new(Vec::new()),
            unstarted: Batch::new(),
            counters: Arc::new(Counters::new()),
        });
        let reaper = match (reap_every, runtime) {
            (Some(every), Some(runtime)) => Some(crate::pool::reap::spawn_reaper(
                &runtime,
                Arc::downgrade(&shared),
                every,
                |shared| {
                    shared.reap(shared.clock.now());
                },
            )),
            _ => None,
        };
        Ok(SessionPool { shared, reaper })
    }
}

impl<C, S> fmt::Debug for SessionPoolBuilder<C, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SessionPoolBuilder")
            .field("pool_size", &self.pool_size)
            .field("max_idle_time", &self.max_idle_time)
            .field("prewarm", &self.prewarm)
            .field("reap_every", &self.reap_every)
            .finish_non_exhaustive()
    }
}

// ---------------------------------------------------------------------------------------
// The pool
// ---------------------------------------------------------------------------------------

/// A snapshot of a pool's state and counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct SessionStats {
    /// `pool_size`.
    pub capacity: usize,
    /// Capacity taken: `active + establishing` (up to the moment each is freed).
    pub in_use: usize,
    /// Sessions with an installed connection.
    pub active: usize,
    /// Establishments in progress.
    pub establishing: usize,
    /// Prewarmed connections not yet assigned to a session.
    pub idle: usize,
    /// Connections the pool opened ([`Connector::connect`] calls).
    pub connects: u64,
    /// Sessions established by bootstrap (including after a failed reattach).
    pub bootstraps: u64,
    /// Sessions established by reattaching to a stored loop.
    pub reattaches: u64,
    /// Establishments that failed (any error but `Exhausted`).
    pub failures: u64,
    /// Acquires refused with `Exhausted`.
    pub exhausted: u64,
    /// Sessions removed by `release` / `reset_session`.
    pub released: u64,
    /// Sessions retired by the reaper.
    pub reaped: u64,
    /// Dead or stale sessions retired by an acquire that then rebuilt them.
    pub rebuilt: u64,
}

/// The pool's statistics. Every establishment and release bumps several of them, from
/// whichever worker runs it, so each is striped per thread ([`Counter`]): a shared word would
/// move between cores on every session opened or closed.
struct Counters {
    /// INVARIANT: number of `Live` records whose `installed` flag is set (once quiescent).
    active: Gauge,
    establishing: Gauge,
    connects: Counter,
    bootstraps: Counter,
    reattaches: Counter,
    failures: Counter,
    exhausted: Counter,
    released: Counter,
    reaped: Counter,
    rebuilt: Counter,
}

impl Counters {
    fn new() -> Self {
        Self {
            active: Gauge::new(),
            establishing: Gauge::new(),
            connects: Counter::new(),
            bootstraps: Counter::new(),
            reattaches: Counter::new(),
            failures: Counter::new(),
            exhausted: Counter::new(),
            released: Counter::new(),
            reaped: Counter::new(),
            rebuilt: Counter::new(),
        }
    }
}

/// A count that goes up and down, as two striped counters (ups and downs).
struct Gauge {
    up: Counter,
    down: Counter,
}

impl Gauge {
    fn new() -> Self {
        Self {
            up: Counter::new(),
            down: Counter::new(),
        }
    }

    fn incr(&self) {
        self.up.incr();
    }

    fn decr(&self) {
        self.down.incr();
    }

    /// A snapshot: exact once the pool is quiescent. Downs are read first, so a decrement
    /// racing the read is never counted without its increment (the difference is clamped
    /// at zero for the same reason across stripes).
    fn get(&self) -> usize {
        let down = self.down.get();
        let up = self.up.get();
        usize::try_from(up.saturating_sub(down)).unwrap_or(usize::MAX)
    }
}

fn bump(counter: &Counter) {
    counter.incr();
}

type Outcome<C> = Result<Arc<Live<C>>, SessionError>;
type SessionMap<C> = Registry<Arc<str>, Arc<Live<C>>, Outcome<C>>;

/// What the pool, its establishments and its reaper share.
struct Shared<C: Connector, S> {
    /// Session id → live connection or establishment in flight.
    registry: SessionMap<C>,
    /// `pool_size` permits. INVARIANT: every permit out is owned by exactly one establishment
    /// or one un-retired `Live`.
    limit: Arc<Limit>,
    connector: Arc<C>,
    store: S,
    clock: Clock,
    /// Stamps are nanoseconds since this instant.
    base: quanta::Instant,
    max_idle_ns: u64,
    /// Target count of prewarmed connections.
    prewarm: usize,
    /// Prewarmed connections. INVARIANT: each is open and owned by no session.
    idle: Mutex<Vec<C::Conn>>,
    /// Installed sessions whose event reader is yet to start, drained by a [`Starter`].
    /// INVARIANT: while it is not empty, a starter is scheduled (or its push is scheduling one).
    unstarted: Batch<Weak<Live<C>>>,
    counters: Arc<Counters>,
}

/// A pool of daemon connections, one per session id. See the [module documentation](self).
///
/// Share it with `Arc<SessionPool>`; dropping it stops it (every connection closed).
pub struct SessionPool<C: Connector, S: SessionStore = MemoryStore> {
    shared: Arc<Shared<C, S>>,
    reaper: Option<AbortHandle>,
}

impl<C: Connector> SessionPool<C, MemoryStore> {
    /// Starts configuring a pool over `connector` (with a [`MemoryStore`] unless
    /// [`SessionPoolBuilder::store`] says otherwise).
    pub fn builder(connector: C) -> SessionPoolBuilder<C, MemoryStore> {
        SessionPoolBuilder::new(connector)
    }
}

impl<C: Connector, S: SessionStore> SessionPool<C, S> {
    /// Returns `session`'s connection, establishing it if it has none (or a dead or stale
    /// one). See the [module documentation](self) for every step.
    ///
    /// Cancel-safe. A follower's only await is the wait on the flight: dropping it there
    /// removes its waker. A leader first drives the establishment: dropping it there moves
    /// the establishment to a spawned task, which finishes it for the followers and the cache
    /// (see the module docs, *Cancellation*).
    ///
    /// # Errors
    /// [`SessionError::Exhausted`] when `pool_size` sessions are taken (no waiting),
    /// [`SessionError::Closed`] after [`SessionPool::stop`], or the establishment's error,
    /// which every concurrent caller for the session shares.
    pub async fn acquire(
        &self,
        session: &str,
        ctx: &SessionContext,
    ) -> Result<Session<C>, SessionError> {
        let shared = &*self.shared;
        // Hashed once for every registry call this acquire makes.
        let key = shared.registry.hashed(session);
        loop {
            let flight = match shared.registry.get(key) {
                Some(Entry::Ready(live)) => match shared.check(key, live) {
                    Some(ready) => return Ok(ready),
                    None => continue,
                },
                Some(Entry::Flying(flight)) => flight,
                None => {
                    // An establishment spawns a task (the event reader) and, with connectors
                    // that answer at once, awaits nothing that yields: spend tokio's coop
                    // budget here, as tokio's own resources do, so a loop of establishments
                    // lets the runtime run (or, once released, drop) the readers it spawned
                    // instead of piling them up. Cancel-safe: nothing is held yet.
                    tokio::task::coop::consume_budget().await;
                    // The owned key the claim inserts, kept for the establishment too.
                    let mut owned = None;
                    let claim = shared.registry.claim(key, || {
                        let made: Arc<str> = Arc::from(session);
                        owned = Some(Arc::clone(&made));
                        made
                    });
                    match claim {
                        Claim::Ready(live) => match shared.check(key, live) {
                            Some(ready) => return Ok(ready),
                            None => continue,
                        },
                        Claim::Join(flight) => flight,
                        Claim::Lead(flight) => {
                            let owned = owned.unwrap_or_else(|| Arc::from(session));
                            match self.lead(key, owned, ctx, &flight) {
                                // Cancel-safe: dropped here, the driver spawns the
                                // establishment so it still completes (see `Drive`). Its
                                // outcome is the flight's, so the leader need not wait on it.
                                Some(establishment) => {
                                    return establishment.await.map(|live| Session { live })
                                }
                                None => flight,
                            }
                        }
                        Claim::Closed => return Err(SessionError::Closed),
                    }
                }
            };
            // Cancel-safe: dropping here only deregisters this caller's waker.
            return flight.wait().await.map(|live| Session { live });
        }
    }

    /// Takes capacity for a flight this caller leads and returns its establishment for the
    /// caller to drive, or ends the flight with the reason it cannot start (`None`).
    fn lead(
        &self,
        key: Hashed<'_, str>,
        owned: Arc<str>,
        ctx: &SessionContext,
        flight: &Arc<Flight<Outcome<C>>>,
    ) -> Option<Drive<C>> {
        let shared = &self.shared;
        let refuse = |error: SessionError| {
            shared.registry.abandon(key, flight);
            flight.complete(Err(error));
        };
        let permit = match shared.limit.try_acquire_owned() {
            Ok(permit) => permit,
            Err(TryAcquireError::NoCapacity) => {
                bump(&shared.counters.exhausted);
                refuse(SessionError::Exhausted {
                    capacity: shared.limit.capacity(),
                });
                return None;
            }
            Err(TryAcquireError::Closed | TryAcquireError::Unavailable { .. }) => {
                refuse(SessionError::Closed);
                return None;
            }
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            drop(permit);
            refuse(SessionError::NoRuntime);
            return None;
        };
        shared.counters.establishing.incr();
        let lead = Lead {
            shared: Arc::clone(shared),
            key: owned,
            hash: key.hash(),
            flight: Arc::clone(flight),
            permit: Some(permit),
            reach: Reach::NotSent,
            finished: false,
        };
        // The establishment owns the permit and the flight's completion: it finishes (and
        // cleans up) whatever happens to the caller.
        Some(Drive {
            establishment: Some(Box::pin(lead.run(ctx.clone()))),
            runtime,
        })
    }

    /// Retires `session`'s connection (reader aborted, connection closed, capacity returned)
    /// and forgets it, so the next acquire establishes it again. A session still being
    /// established is removed too: its connection is closed when establishment ends, and its
    /// waiters get [`SessionError::Released`]. Returns whether the session was there.
    pub fn release(&self, session: &str) -> bool {
        let shared = &self.shared;
        let key = shared.registry.hashed(session);
        match shared.registry.get(key) {
            None => return false,
            Some(Entry::Ready(live)) => {
                // Retire first, then remove: the capacity is back before the entry leaves
                // the map. Whoever won the stamp frees it; an acquire that saw `Retired`
                // may have removed the entry already, which is fine.
                live.retire();
                shared.registry.remove_if(
                    key,
                    |entry| matches!(entry, Entry::Ready(l) if Arc::ptr_eq(l, &live)),
                );
            }
            Some(Entry::Flying(flight)) => {
                // Its leader finds its entry gone, closes what it built and fails the flight.
                shared.registry.remove_if(
                    key,
                    |entry| matches!(entry, Entry::Flying(f) if Arc::ptr_eq(f, &flight)),
                );
            }
        }
        bump(&shared.counters.released);
        true
    }

    /// The same as [`SessionPool::release`], as in R3: the session's connection is closed and
    /// the next acquire establishes a new one (reattaching to the stored loop if the store
    /// still has one; remove the record from the store to force a fresh bootstrap).
    pub fn reset_session(&self, session: &str) -> bool {
        self.release(session)
    }

    /// Stops the pool: every session and prewarmed connection is closed, establishments in
    /// flight close theirs when they end (their callers get [`SessionError::Closed`]), the
    /// reaper ends, and every later acquire gets [`SessionError::Closed`]. Idempotent.
    pub fn stop(&self) {
        let shared = &self.shared;
        shared.limit.close();
        if let Some(reaper) = &self.reaper {
            reaper.abort();
        }
        for entry in shared.registry.close() {
            if let Entry::Ready(live) = entry {
                live.retire();
            }
        }
        let idle = std::mem::take(&mut *shared.idle.lock());
        for conn in idle {
            shared.connector.close(&conn);
        }
    }

    /// Whether [`SessionPool::stop`] was called.
    pub fn is_stopped(&self) -> bool {
        self.shared.registry.is_closed()
    }

    /// Retires every session idle past `max_idle_time` at `now` (from the pool's clock) and
    /// returns how many. The background reaper calls this; tests call it with a mock clock.
    pub fn reap(&self, now: quanta::Instant) -> usize {
        self.shared.reap(now)
    }

    /// The pool's clock (to compute `now` for [`SessionPool::reap`]).
    pub fn clock(&self) -> &Clock {
        &self.shared.clock
    }

    /// Opens connections until `prewarm` of them wait unassigned; returns how many it opened.
    ///
    /// Cancel-safe: a connection whose connect completed is kept; dropping the future at a
    /// connect drops that connect's future.
    ///
    /// # Errors
    /// [`SessionError::Connect`] on the first failed connect (those opened before it are
    /// kept), [`SessionError::Closed`] once stopped.
    pub async fn prewarm(&self) -> Result<usize, SessionError> {
        let shared = &self.shared;
        let mut opened = 0;
        while shared.idle.lock().len() < shared.prewarm {
            if self.is_stopped() {
                return Err(SessionError::Closed);
            }
            bump(&shared.counters.connects);
            let conn = shared
                .connector
                .connect()
                .await
                .map_err(|error| SessionError::Connect {
                    source: source(error),
                    reach: Reach::NotSent,
                })?;
            opened += 1;
            let mut idle = shared.idle.lock();
            if self.is_stopped() || idle.len() >= shared.prewarm {
                drop(idle);
                shared.connector.close(&conn);
            } else {
                idle.push(conn);
            }
        }
        Ok(opened)
    }

    /// A snapshot of the pool's state and counters.
    pub fn stats(&self) -> SessionStats {
        let shared = &self.shared;
        let counters = &shared.counters;
        SessionStats {
            capacity: shared.limit.capacity(),
            in_use: shared.limit.in_use(),
            active: counters.active.get(),
            establishing: counters.establishing.get(),
            idle: shared.idle.lock().len(),
            connects: counters.connects.get(),
            bootstraps: counters.bootstraps.get(),
            reattaches: counters.reattaches.get(),
            failures: counters.failures.get(),
            exhausted: counters.exhausted.get(),
            released: counters.released.get(),
            reaped: counters.reaped.get(),
            rebuilt: counters.rebuilt.get(),
        }
    }
}

impl<C: Connector, S: SessionStore> Drop for SessionPool<C, S> {
    fn drop(&mut self) {
        self.stop();
    }
}

impl<C: Connector, S: SessionStore> fmt::Debug for SessionPool<C, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SessionPool")
            .field("stats", &self.stats())
            .field("stopped", &self.is_stopped())
            .finish()
    }
}

impl<C: Connector, S> Shared<C, S> {
    /// Nanoseconds from the base instant to `at`.
    fn ns(&self, at: quanta::Instant) -> u64 {
        duration_ns(at.saturating_duration_since(self.base))
    }

    /// The hot path's check of an installed connection: returns it if it is alive and fresh
    /// (refreshing its stamp), otherwise retires it, removes it and returns `None`.
    #[inline]
    fn check(&self, key: Hashed<'_, str>, live: Arc<Live<C>>) -> Option<Session<C>> {
        let now = self.ns(self.clock.now());
        let alive = live.is_alive();
        match live.stamp.touch(now, self.max_idle_ns) {
            Touch::Fresh if alive => return Some(Session { live }),
            Touch::Fresh => {
                if live.retire() {
                    bump(&self.counters.rebuilt);
                }
            }
            Touch::Stale => {
                // Loses to a concurrent touch (then the next lookup finds it fresh again).
                if live.retire_if_idle(now, self.max_idle_ns) {
                    bump(&self.counters.rebuilt);
                }
            }
            Touch::Retired => {}
        }
        if live.stamp.is_retired() {
            self.registry.remove_if(
                key,
                |entry| matches!(entry, Entry::Ready(l) if Arc::ptr_eq(l, &live)),
            );
        }
        None
    }

    fn reap(&self, now: quanta::Instant) -> usize {
        let now = self.ns(now);
        let mut reaped = 0;
        for (key, live) in self.registry.ready() {
            let retired_here = live.retire_if_idle(now, self.max_idle_ns);
            if retired_here || live.stamp.is_retired() {
                self.registry.remove_if(
                    self.registry.hashed(&*key),
                    |entry| matches!(entry, Entry::Ready(l) if Arc::ptr_eq(l, &live)),
                );
            }
            if retired_here {
                reaped += 1;
            }
        }
        self.counters.reaped.add(reaped as u64);
        reaped
    }
}

// ---------------------------------------------------------------------------------------
// Starting event readers
// ---------------------------------------------------------------------------------------

impl<C: Connector, S: Send + Sync + 'static> Shared<C, S> {
    /// Queues a just-installed session for its event reader and makes sure a [`Starter`] is
    /// scheduled (on the current runtime: establishments always run inside one).
    fn queue_reader(self: &Arc<Self>, live: &Arc<Live<C>>) {
        if self.unstarted.push(Arc::downgrade(live)) {
            let starter = Starter {
                shared: Arc::downgrade(self),
                ran: false,
            };
            drop(tokio::spawn(async move { starter.run() }));
        }
    }

    /// Starts the reader of every queued session that is still live.
    fn start_readers(&self) {
        for live in self.unstarted.take() {
            if let Some(live) = live.upgrade() {
                live.start_reader();
            }
        }
    }
}

/// A one-shot task that starts the event readers of the sessions installed since it was
/// scheduled. One starter serves a whole batch, so a session released before the runtime got
/// round to it costs no task at all, and a loop of establishments spawns one task per batch
/// rather than one per session. Holds no strong reference to the pool.
struct Starter<C: Connector, S> {
    shared: Weak<Shared<C, S>>,
    ran: bool,
}

impl<C: Connector, S: Send + Sync + 'static> Starter<C, S> {
    fn run(mut self) {
        self.ran = true;
        if let Some(shared) = self.shared.upgrade() {
            shared.start_readers();
        }
    }
}

impl<C: Connector, S> Drop for Starter<C, S> {
    fn drop(&mut self) {
        if !self.ran {
            // Dropped unrun (its runtime shut down): let the next install schedule another.
            if let Some(shared) = self.shared.upgrade() {
                shared.unstarted.unschedule();
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Establishment
// ---------------------------------------------------------------------------------------

/// How a session's connection was established.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// A new loop was bootstrapped (the store had no usable loop id).
    Bootstrapped,
    /// Reattached to the stored loop.
    Reattached,
    /// Reattaching failed; a new loop was bootstrapped instead.
    BootstrappedAfterReattach,
}

/// A leader's establishment, owned by its future ([`Drive`]). Its `Drop` ends the flight if the future
/// is dropped or unwinds before [`Lead::finish`].
struct Lead<C: Connector, S> {
    shared: Arc<Shared<C, S>>,
    key: Arc<str>,
    /// `key`'s hash in the registry (computed by the acquire that claimed it).
    hash: KeyHash,
    flight: Arc<Flight<Outcome<C>>>,
    /// INVARIANT: `Some` until moved into the `Live` or dropped before the flight completes.
    permit: Option<OwnedPermit>,
    /// `MaybeApplied` once a bootstrap or reattach has been started.
    reach: Reach,
    finished: bool,
}

/// An open connection not yet owned by a `Live`: closed on drop unless taken.
struct Opened<'a, C: Connector> {
    conn: Option<C::Conn>,
    connector: &'a C,
}

impl<C: Connector> Opened<'_, C> {
    fn get(&self) -> Option<&C::Conn> {
        self.conn.as_ref()
    }

    fn take(mut self) -> Option<C::Conn> {
        self.conn.take()
    }
}

impl<C: Connector> Drop for Opened<'_, C> {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            self.connector.close(&conn);
        }
    }
}

impl<C: Connector, S> Lead<C, S> {
    /// The session key with its registry hash.
    fn hashed(&self) -> Hashed<'_, str> {
        Hashed::new(&self.key, self.hash)
    }
}

impl<C: Connector, S: SessionStore> Lead<C, S> {
    /// The establishment future's body: its output is the flight's outcome.
    async fn run(mut self, ctx: SessionContext) -> Outcome<C> {
        let result = self.establish(ctx).await;
        self.finish(result)
    }

    /// Connect, look up, reattach or bootstrap, persist. On error the connection is closed
    /// (by `Opened`'s drop) before this returns.
    async fn establish(
        &mut self,
        ctx: SessionContext,
    ) -> Result<(C::Conn, LoopId, Origin), SessionError> {
        let shared = Arc::clone(&self.shared);
        let connector = &*shared.connector;
        let prewarmed = shared.idle.lock().pop();
        let conn = match prewarmed {
            Some(conn) => conn,
            None => {
                bump(&shared.counters.connects);
                connector
                    .connect()
                    .await
                    .map_err(|error| SessionError::Connect {
                        source: source(error),
                        reach: Reach::NotSent,
                    })?
            }
        };
        let opened = Opened {
            conn: Some(conn),
            connector,
        };
        let Some(conn) = opened.get() else {
            unreachable!("`opened` was just built with a connection")
        };
        let stored =
            shared
                .store
                .loop_id(&self.key)
                .await
                .map_err(|error| SessionError::Store {
                    op: StoreOp::Lookup,
                    source: source(error),
                    reach: Reach::NotSent,
                })?;
        self.reach = Reach::MaybeApplied;
        let (loop_id, origin) = match stored.filter(LoopId::is_attachable) {
            Some(stored) => match connector.reattach(conn, &stored).await {
                Ok(()) => (stored, Origin::Reattached),
                Err(reattach) => match connector.bootstrap(conn, &self.key, &ctx).await {
                    Ok(fresh) => (fresh, Origin::BootstrappedAfterReattach),
                    Err(bootstrap) => {
                        return Err(SessionError::Reattach {
                            loop_id: stored,
                            reattach: source(reattach),
                            bootstrap: source(bootstrap),
                            reach: Reach::MaybeApplied,
                        })
                    }
                },
            },
            None => match connector.bootstrap(conn, &self.key, &ctx).await {
                Ok(fresh) => (fresh, Origin::Bootstrapped),
                Err(error) => {
                    return Err(SessionError::Bootstrap {
                        source: source(error),
                        reach: Reach::MaybeApplied,
                    })
                }
            },
        };
        if origin == Origin::Reattached {
            if let Err(error) = shared.store.touch(&self.key).await {
                tracing::warn!(session = %self.key, %error, "session store touch failed");
            }
        } else {
            // The context is the establishment's own copy: its strings move into the record.
            let record = SessionRecord {
                session: String::from(&*self.key),
                loop_id: loop_id.clone(),
                workspace: ctx.workspace,
                user: ctx.user,
            };
            shared
                .store
                .save(record)
                .await
                .map_err(|error| SessionError::Store {
                    op: StoreOp::Save,
                    source: source(error),
                    reach: Reach::MaybeApplied,
                })?;
        }
        match opened.take() {
            Some(conn) => Ok((conn, loop_id, origin)),
            None => unreachable!("the connection is taken only here"),
        }
    }

    /// Installs the connection (or disposes of it), completes the flight and returns its
    /// outcome.
    fn finish(&mut self, result: Result<(C::Conn, LoopId, Origin), SessionError>) -> Outcome<C> {
        self.finished = true;
        let shared = Arc::clone(&self.shared);
        let counters = &shared.counters;
        let outcome = match result {
            Ok((conn, loop_id, origin)) => {
                let now = shared.ns(shared.clock.now());
                let live = Live::start(
                    conn,
                    Arc::clone(&self.key),
                    loop_id,
                    origin,
                    now,
                    self.permit.take(),
                    Arc::clone(&shared.connector),
                    Arc::clone(counters),
                );
                match shared
                    .registry
                    .install(self.hashed(), &self.flight, Arc::clone(&live))
                {
                    Ok(()) => {
                        shared.queue_reader(&live);
                        bump(match origin {
                            Origin::Reattached => &counters.reattaches,
                            Origin::Bootstrapped | Origin::BootstrappedAfterReattach => {
                                &counters.bootstraps
                            }
                        });
                        Ok(live)
                    }
                    Err(live) => {
                        // Released or stopped while we worked: the connection is ours to close.
                        live.retire();
                        bump(&counters.failures);
                        Err(if shared.registry.is_closed() {
                            SessionError::Closed
                        } else {
                            SessionError::Released {
                                reach: Reach::MaybeApplied,
                            }
                        })
                    }
                }
            }
            Err(error) => {
                drop(self.permit.take());
                shared.registry.abandon(self.hashed(), &self.flight);
                bump(&counters.failures);
                Err(error)
            }
        };
        counters.establishing.decr();
        self.flight.complete(outcome.clone());
        outcome
    }
}

/// The leader's establishment, driven inside the leader's own `acquire` (no task spawn, no
/// cross-task wake-up on the common path). If the leader is dropped before it finishes,
/// `Drop` hands the same pinned future to the runtime as a task, so the establishment still
/// completes, is cached, and reaches the followers: exactly what a spawned-from-the-start
/// establishment would do, paid for only when a leader is cancelled.
struct Drive<C: Connector> {
    /// `None` once finished.
    establishment: Option<Pin<Box<dyn Future<Output = Outcome<C>> + Send + 'static>>>,
    /// Where to finish it if the leader goes away.
    runtime: tokio::runtime::Handle,
}

impl<C: Connector> Future for Drive<C> {
    type Output = Outcome<C>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<Outcome<C>> {
        let Some(establishment) = self.establishment.as_mut() else {
            // Polled again after it finished: `acquire` never does.
            return Poll::Ready(Err(SessionError::Aborted {
                reach: Reach::MaybeApplied,
            }));
        };
        match establishment.as_mut().poll(cx) {
            Poll::Ready(outcome) => {
                self.establishment = None;
                Poll::Ready(outcome)
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<C: Connector> Drop for Drive<C> {
    fn drop(&mut self) {
        if let Some(establishment) = self.establishment.take() {
            // A runtime that is shutting down drops it instead; `Lead`'s drop then fails the
            // flight with `Aborted` and returns the capacity.
            drop(self.runtime.spawn(establishment));
        }
    }
}

impl<C: Connector, S> Drop for Lead<C, S> {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        // Dropped mid-establishment (runtime shutdown) or unwinding from a panic: the open
        // connection, if any, was closed by `Opened`'s drop already.
        drop(self.permit.take());
        let shared = &self.shared;
        shared.registry.abandon(self.hashed(), &self.flight);
        bump(&shared.counters.failures);
        shared.counters.establishing.decr();
        self.flight
            .complete(Err(SessionError::Aborted { reach: self.reach }));
    }
}

// ---------------------------------------------------------------------------------------
// Live connections
// ---------------------------------------------------------------------------------------

/// An established session's connection and what it owns.
struct Live<C: Connector> {
    conn: C::Conn,
    session: Arc<str>,
    loop_id: LoopId,
    origin: Origin,
    /// Last use, or retired. INVARIANT: resources in `owned` are freed exactly by the caller
    /// that moved this to `RETIRED`.
    stamp: UseStamp,
    /// Set when the event reader ends (stream over or aborted): the session is dead.
    reader_done: AtomicBool,
    /// INVARIANT: set exactly while this record is counted in `Counters::active`.
    installed: AtomicBool,
    /// The capacity and reader this record owns until retired.
    owned: Mutex<Owned>,
    /// The event channel, opened by whichever comes first: the reader's first event or the
    /// caller's [`Session::take_events`].
    events: Mutex<Events<C::Event>>,
    connector: Arc<C>,
    counters: Arc<Counters>,
}

#[derive(Default)]
struct Owned {
    permit: Option<OwnedPermit>,
    reader: Option<AbortHandle>,
}

/// A session's event channel, opened on first need: most sessions' events are never taken,
/// and many connections never send one, so a channel (two allocations, one cache-aligned) per
/// establishment would be paid for nothing. Seen from outside it behaves as a channel opened
/// with the reader: events are buffered (up to [`EVENT_BUFFER`]) until the caller takes the
/// receiver, and the receiver sees the end of the stream once the reader has ended.
struct Events<E> {
    /// Whether the channel exists. INVARIANT: once set, `sender` and `receiver` have each been
    /// `Some` and are each taken at most once.
    opened: bool,
    /// The sending end, waiting for the reader to take it at its first event. INVARIANT:
    /// `None` once the reader has ended (so a receiver sees the stream's end).
    sender: Option<mpsc::Sender<E>>,
    /// The receiving end, until the caller takes it.
    receiver: Option<mpsc::Receiver<E>>,
    /// Set when the reader ends (stream over or aborted).
    reader_ended: bool,
}

impl<E> Events<E> {
    fn new() -> Self {
        Self {
            opened: false,
            sender: None,
            receiver: None,
            reader_ended: false,
        }
    }

    /// Opens the channel if it is not open yet.
    fn open(&mut self) {
        if !self.opened {
            let (sender, receiver) = mpsc::channel(EVENT_BUFFER);
            self.opened = true;
            // A reader that has ended already never sends: dropping the sender closes the
            // channel, so the receiver sees the end of the stream at once.
            self.sender = (!self.reader_ended).then_some(sender);
            self.receiver = Some(receiver);
        }
    }
}

impl<C: Connector> Live<C> {
    /// Builds the record and counts it active. Its event reader is started later, by a
    /// [`Starter`], if the record is still live by then.
    #[allow(clippy::too_many_arguments)]
    fn start(
        conn: C::Conn,
        session: Arc<str>,
        loop_id: LoopId,
        origin: Origin,
        now: u64,
        permit: Option<OwnedPermit>,
        connector: Arc<C>,
        counters: Arc<Counters>,
    ) -> Arc<Self> {
        counters.active.incr();
        Arc::new(Live {
            conn,
            session,
            loop_id,
            origin,
            stamp: UseStamp::new(now),
            reader_done: AtomicBool::new(false),
            installed: AtomicBool::new(true),
            owned: Mutex::new(Owned {
                permit,
                reader: None,
            }),
            events: Mutex::new(Events::new()),
            connector,
            counters,
        })
    }

    /// Spawns the event reader (on the current runtime), unless the record was retired
    /// first. Called once per record, by a [`Starter`].
    fn start_reader(self: &Arc<Self>) {
        let mut owned = self.owned.lock();
        // `free` runs after the stamp is retired and takes `owned` under this lock: either it
        // finds the reader here (and aborts it) or we see the stamp retired (and spawn none).
        if self.stamp.is_retired() || owned.reader.is_some() {
            return;
        }
        let reader = tokio::spawn(read_events(Arc::clone(self)));
        owned.reader = Some(reader.abort_handle());
    }

    fn is_alive(&self) -> bool {
        !self.reader_done.load(Ordering::Acquire) && self.connector.is_alive(&self.conn)
    }

    /// Retires unconditionally; returns whether this call freed the resources.
    fn retire(&self) -> bool {
        let won = self.stamp.retire();
        if won {
            self.free();
        }
        won
    }

    /// Retires only if idle past `max_idle` at `now`; returns whether this call did.
    fn retire_if_idle(&self, now: u64, max_idle: u64) -> bool {
        let won = self.stamp.retire_if_idle(now, max_idle);
        if won {
            self.free();
        }
        won
    }

    /// Closes the connection, stops the reader and returns the capacity (last, so a new
    /// session never overlaps a connection still open). Called once, by the stamp's retirer.
    fn free(&self) {
        let owned = std::mem::take(&mut *self.owned.lock());
        self.connector.close(&self.conn);
        if let Some(reader) = owned.reader {
            reader.abort();
        }
        if self.installed.swap(false, Ordering::AcqRel) {
            self.counters.active.decr();
        }
        drop(owned.permit);
    }
}

impl<C: Connector> Drop for Live<C> {
    fn drop(&mut self) {
        // Every path retires a record before letting go of it; this is the safety net for a
        // runtime torn down around a live pool.
        self.retire();
    }
}

/// Marks the reader ended however its task ends (stream over, or aborted).
struct ReaderDone<C: Connector>(Arc<Live<C>>);

impl<C: Connector> Drop for ReaderDone<C> {
    fn drop(&mut self) {
        let live = &self.0;
        {
            let mut events = live.events.lock();
            events.reader_ended = true;
            // Not taken yet (no event came): drop it so a receiver sees the end.
            events.sender = None;
        }
        live.reader_done.store(true, Ordering::Release);
    }
}

/// The event reader: forwards events until the stream ends, opening the channel at the first
/// one. If the caller dropped its receiver the events are drained and discarded, so the
/// connection never stalls on us.
async fn read_events<C: Connector>(live: Arc<Live<C>>) {
    let done = ReaderDone(live);
    let live = &done.0;
    let mut sender: Option<mpsc::Sender<C::Event>> = None;
    while let Some(event) = live.connector.next_event(&live.conn).await {
        let events = match &sender {
            Some(events) => events,
            None => {
                let mut slot = live.events.lock();
                slot.open();
                match slot.sender.take() {
                    Some(taken) => sender.insert(taken),
                    // Unreachable (only this reader takes it, and it has not ended): discard.
                    None => continue,
                }
            }
        };
        // Cancel-safe: aborting here drops the event, which nobody would read anyway.
        if events.send(event).await.is_err() {
            continue;
        }
    }
}

/// A session's connection, as handed out by [`SessionPool::acquire`]. Cheap to clone; every
/// caller of one session shares the one connection. It derefs to the connection.
///
/// Holding it does not keep the session active: after a release, reap or stop the
/// connection is closed and [`Session::is_open`] is false.
pub struct Session<C: Connector> {
    live: Arc<Live<C>>,
}

impl<C: Connector> Session<C> {
    /// The connection.
    pub fn connection(&self) -> &C::Conn {
        &self.live.conn
    }

    /// The session id.
    pub fn id(&self) -> &str {
        &self.live.session
    }

    /// The daemon loop the connection is attached to.
    pub fn loop_id(&self) -> &LoopId {
        &self.live.loop_id
    }

    /// How the connection was established.
    pub fn origin(&self) -> Origin {
        self.live.origin
    }

    /// The receiving end of the session's event channel ([`EVENT_BUFFER`] events). The first
    /// call gets it; later calls (from any handle of this connection) get `None`.
    pub fn take_events(&self) -> Option<mpsc::Receiver<C::Event>> {
        let mut events = self.live.events.lock();
        events.open();
        events.receiver.take()
    }

    /// Whether the connection is still the session's: not retired, reader running, and the
    /// connector says it is up.
    pub fn is_open(&self) -> bool {
        !self.live.stamp.is_retired() && self.live.is_alive()
    }

    /// Whether two handles share one connection.
    pub fn same_connection(&self, other: &Session<C>) -> bool {
        Arc::ptr_eq(&self.live, &other.live)
    }
}

impl<C: Connector> Clone for Session<C> {
    fn clone(&self) -> Self {
        Self {
            live: Arc::clone(&self.live),
        }
    }
}

impl<C: Connector> Deref for Session<C> {
    type Target = C::Conn;

    fn deref(&self) -> &C::Conn {
        &self.live.conn
    }
}

impl<C: Connector> fmt::Debug for Session<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Session")
            .field("id", &self.id())
            .field("loop_id", self.loop_id())
            .field("origin", &self.origin())
            .field("open", &self.is_open())
            .finish()
    }
}

impl<C: Connector> fmt::Debug for Live<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Live")
            .field("session", &self.session)
            .field("loop_id", &self.loop_id)
            .field("stamp", &self.stamp)
            .finish_non_exhaustive()
    }
}
