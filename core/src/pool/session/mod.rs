//! One live connection per session id, established once however many callers ask at once,
//! bounded without waiting (R3, with its races removed).
//!
//! # What it does
//!
//! A [`SessionPool`] maps application sessions to long-lived daemon connections. For
//! [`SessionPool::acquire`]`(session, ctx)`:
//!
//! 1. **Hot path.** If the session has a live, fresh connection it is returned at once: one
//!    CAS on the session's hint word takes a reference paid for in advance (no lock, no
//!    shard-wide write; a session without a hint reads its shard under the read lock), a
//!    liveness check, and a load of its last-use stamp (a CAS only when the stamp is more than
//!    `max_idle_time / 32` old, `TOUCH_SLACK`). Dropping the
//!    [`Session`] gives the reference back with one `fetch_sub`. Nothing is awaited.
//! 2. A **dead** connection (the connector says it is down, or its event reader ended) or a
//!    **stale** one (idle past `max_idle_time`) is retired (closed, capacity returned) and
//!    rebuilt.
//! 3. Otherwise the caller **claims** the session. Exactly one claimant becomes the leader and
//!    takes capacity **without waiting** ([`Limit::try_acquire_owned`](crate::protocol::limit::Limit::try_acquire_owned)); none left is
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
//! [`SessionPool::close`] retires everything, and every later acquire gets
//! [`SessionError::Closed`]. [`SessionPool::reap`] retires sessions idle past
//! `max_idle_time`, with time from the injected `Clock`; a background task calls it
//! every `reap_every`, and tests call it directly with `Clock::mock()`. Since a hot acquire
//! leaves a stamp that is less than `max_idle_time / 32` old as it is, a session can be reaped
//! up to that much early (after 9 min 41.25 s of idleness with the default ten minutes), never
//! late.
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
//! # The map: sharded, hinted, hashed once
//!
//! Sessions live in a `Directory`'s registry: a power-of-two number of shards,
//! each a hash table behind a reader-writer lock, keyed by the session id with its hash stored
//! beside it, with an array of hint words in front (four per session a shard holds when the
//! pool is full). An acquire hashes the id once for all its registry calls. A hot acquire
//! takes no lock: it takes one of the references its session's hint word holds in advance
//! (see `flight`'s `hint.rs`), so hot acquires of different sessions share no written word
//! (at most a cache line of hint words), and those of one session share its hint word and
//! reference count, as they would share an `Arc`. A session whose two candidate words are
//! both taken when it is installed moves one of their sessions to that session's other word,
//! if it is free; one for which no word can be freed reads under the shard's read lock. A
//! mutex (R3) serialises every acquire; copy-on-write maps
//! (arc-swap), this module's first design, made every new session and every release copy a
//! shard and allocate, which cost establishment churn far more than the read lock costs
//! the hot path. Writes (a claim, an install, a release) change one shard in place.
//!
//! Ids are hashed with foldhash by default, seeded randomly per pool: a few instructions for a
//! short id, where SipHash (std's `HashMap` hasher) takes about 150, most of a hot acquire.
//! The seed keeps ids that were not aimed at it spread over shards and buckets, but foldhash
//! is not a cryptographic pseudo-random function: a client that chooses session ids, can send
//! many, and can time the pool's answers may learn enough to craft ids that share one bucket
//! (hash flooding), which slows every acquire of that shard. A service whose session ids come
//! from untrusted clients should choose SipHash with
//! [`SessionPoolBuilder::key_hashing`]`(`[`KeyHashing::SipHash`]`)`; ids the service mints
//! itself (random tokens, sequence numbers, ids of authenticated users) cannot be aimed and
//! lose nothing with the default.
//!
//! # Exact accounting
//!
//! Capacity is an [`OwnedPermit`](crate::protocol::limit::OwnedPermit) and every connection has one owner at a time, so "returned
//! exactly once" follows from ownership rather than from bookkeeping on each path:
//!
//! * during establishment the permit and the open connection belong to the establishment
//!   future (a guard closes the connection on any early return, a drop, or a panic's unwind;
//!   the permit drops with the future's state), so connect, bootstrap, reattach-then-bootstrap
//!   and store failures all return it once;
//! * once established, both move into the session's `Live` record, whose resources (the
//!   connection, the permit, and its reader if one was started) are freed by whoever wins its
//!   use stamp's move to `RETIRED` (its use stamp):
//!   a release, a reap, a rebuild of a dead or stale session, or `close`. That is one CAS, so
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
//! (the runtime shut down), its guard closes any open connection, returns the permit, removes
//! the flight and fails the waiters with [`SessionError::Aborted`].
//!
//! # Panics of user code
//!
//! The connector and the store are user code, and may panic. The pool calls each of their
//! methods, and polls each future they return, inside a guard, so a panic
//! never unwinds through the pool, never poisons it and is never resumed:
//!
//! * in an establishment (`connect_for`, `loop_id`, `reattach`, `bootstrap`, `save`) it fails
//!   the flight: every caller gets [`SessionError::Panicked`] with the [`Stage`] it hit and
//!   its reach (`NotSent` for a connect or a lookup, `MaybeApplied` from the reattach or
//!   bootstrap on), the connection opened so far is closed, and the permit goes back;
//! * a store `touch` after a reattach is advisory: the session is still established;
//! * `is_alive` takes the connection for dead (the session is retired and rebuilt);
//! * `next_event` ends the event reader, which marks the session dead;
//! * `close` counts as closed (the capacity is returned as usual);
//! * prewarming's `connect` ends [`SessionPool::prewarm`] with `Panicked`.
//!
//! Each caught panic bumps [`SessionStats::panics`] and logs its message as a `tracing` error
//! event (the place, never the request's contents).
//!
//! # Errors and retry safety
//!
//! Each [`SessionError`] says how far the request got ([`Reach`]): a failed connect, a failed
//! store lookup, `Exhausted` and `Closed` are [`Reach::NotSent`] (nothing happened on the
//! daemon); a failed bootstrap, a failed save of a new loop id, `Released` and an abort after
//! bootstrap began are [`Reach::MaybeApplied`] (a loop may exist on the daemon); a
//! [`SessionError::Panicked`] carries the reach of its [`Stage`].
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
//!     pool.close();
//!     Ok(())
//! }
//! ```
//!
//! This module owns sessions and the acquire path; `establish.rs` the leader's establishment,
//! `live.rs` an installed connection and its event reader, `store.rs` the session store,
//! `error.rs` the errors and `builder.rs` the settings. Every decision on the map (what an
//! acquire does with what it finds, who frees a connection, what a leader may install, what a
//! release, the reaper and `close` retire) is `Directory`'s, in `crate::protocol::flight`
//! (executor-agnostic); the loom models drive that same code.

use std::fmt;
use std::future::{poll_fn, Future};
use std::ops::ControlFlow;
use std::pin::pin;
use std::time::Duration;

use quanta::Clock;
use tokio::task::AbortHandle;

use crate::error::Reach;
use crate::panic::{catch, report, Panic};
use crate::pool::first::FirstPoll;
use crate::pool::reap::{nanos as duration_ns, ticks_within};
use crate::pool::wait::{WaitClock, WaitTotal};
use crate::protocol::flight::{self, Batch, Directory, Flight, Hashed, NotFresh, Refusal, Step};
use crate::protocol::limit::OwnedPermit;
use crate::sync::{Arc, Counter, Mutex, Weak};

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

mod builder;
mod error;
mod establish;
mod key;
mod live;
mod store;

pub use builder::SessionPoolBuilder;
pub use error::{SessionError, SourceError, StoreOp};
pub use establish::Origin;
pub use live::Session;
pub use store::{LoopId, MemoryStore, SessionContext, SessionRecord, SessionStore};

/// How session ids are hashed: see [`SessionPoolBuilder::key_hashing`].
pub use crate::protocol::flight::KeyHashing;

use error::source;
use establish::{Drive, Lead};
use key::{Id, Key};
use live::Live;

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

    /// Opens a connection for `session` (to name it in logs, or route it). The pool calls
    /// this, not [`Connector::connect`], when it establishes a session; prewarmed connections
    /// ([`SessionPool::prewarm`]) are opened for no session yet and use `connect`. The
    /// provided method calls `connect`.
    fn connect_for(
        &self,
        session: &str,
    ) -> impl Future<Output = Result<Self::Conn, Self::Error>> + Send {
        let _ = session;
        self.connect()
    }

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

/// Which part of an establishment ran when user code panicked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// [`Connector::connect_for`] (or `connect`, prewarming): nothing was sent.
    Connect,
    /// [`SessionStore::loop_id`]: nothing was sent.
    Lookup,
    /// [`Connector::reattach`]: the daemon may have attached.
    Reattach,
    /// [`Connector::bootstrap`]: the daemon may have created a loop.
    Bootstrap,
    /// [`SessionStore::save`]: a loop exists, its record may or may not.
    Save,
}

impl Stage {
    /// How far a request had got when this stage panicked.
    pub fn reach(self) -> Reach {
        match self {
            Stage::Connect | Stage::Lookup => Reach::NotSent,
            Stage::Reattach | Stage::Bootstrap | Stage::Save => Reach::MaybeApplied,
        }
    }

    /// The error of an establishment whose user code panicked in this stage.
    fn panicked(self, panic: Panic) -> SessionError {
        SessionError::Panicked {
            stage: self,
            reach: self.reach(),
            panic,
        }
    }

    /// The user code that runs in this stage, for the log.
    fn place(self) -> &'static str {
        match self {
            Stage::Connect => "session connector (connect)",
            Stage::Lookup => "session store (loop_id)",
            Stage::Reattach => "session connector (reattach)",
            Stage::Bootstrap => "session connector (bootstrap)",
            Stage::Save => "session store (save)",
        }
    }
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Stage::Connect => "connect",
            Stage::Lookup => "store lookup",
            Stage::Reattach => "reattach",
            Stage::Bootstrap => "bootstrap",
            Stage::Save => "store save",
        })
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
    /// Acquires that waited: the session was being established by another caller, and this
    /// one joined its flight and waited for the outcome (including those dropped while
    /// waiting). Capacity is never waited for (a full pool is `Exhausted` at once), and a
    /// leader's own establishment is work, not a wait: neither counts.
    pub waits: u64,
    /// The time those acquires spent waiting, in all, on the pool's clock: from the first
    /// poll that found the establishment unfinished to its outcome, or to the caller giving
    /// up (bb8's `get_wait_time`, for followers). A hot acquire, or a leader's, reads no
    /// clock for it. With the `metrics` feature each wait is also a sample of the histogram
    /// `slotpool_session_wait_seconds`, labelled with the pool's
    /// [`name`](SessionPoolBuilder::name).
    pub wait_time: Duration,
    /// Sessions removed by `release` / `reset_session`.
    pub released: u64,
    /// Sessions retired by the reaper.
    pub reaped: u64,
    /// Dead or stale sessions retired by an acquire that then rebuilt them.
    pub rebuilt: u64,
    /// Panics of user code (connector, store) that the pool caught; each is also logged.
    pub panics: u64,
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
    /// Followers that waited on another caller's establishment.
    waits: Counter,
    /// The time they waited, and the `slotpool_session_wait_seconds` histogram.
    wait_nanos: WaitTotal,
    released: Counter,
    reaped: Counter,
    rebuilt: Counter,
    panics: Counter,
}

impl Counters {
    /// Zero counters of the pool called `name` (the wait histogram's label).
    fn new(name: std::borrow::Cow<'static, str>) -> Self {
        Self {
            active: Gauge::new(),
            establishing: Gauge::new(),
            connects: Counter::new(),
            bootstraps: Counter::new(),
            reattaches: Counter::new(),
            failures: Counter::new(),
            exhausted: Counter::new(),
            waits: Counter::new(),
            wait_nanos: WaitTotal::new("slotpool_session_wait_seconds", name),
            released: Counter::new(),
            reaped: Counter::new(),
            rebuilt: Counter::new(),
            panics: Counter::new(),
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

impl Counters {
    /// Counts and logs a caught panic of user code (`place` names it).
    fn contained(&self, place: &'static str, panic: &Panic) {
        bump(&self.panics);
        report(place, panic);
    }
}

type Outcome<C> = flight::Outcome<Live<C>, SessionError>;
type SessionMap<C> = Directory<Key, Live<C>, SessionError>;

impl Refusal for SessionError {
    fn exhausted(capacity: usize) -> Self {
        SessionError::Exhausted { capacity }
    }

    fn closed() -> Self {
        SessionError::Closed
    }

    fn released() -> Self {
        SessionError::Released {
            reach: Reach::MaybeApplied,
        }
    }
}

/// What the pool, its establishments and its reaper share.
struct Shared<C: Connector, S> {
    /// Session id → live connection or establishment in flight, and the `pool_size` permits
    /// (INVARIANT: every permit out is owned by exactly one establishment or one un-retired
    /// `Live`).
    directory: SessionMap<C>,
    connector: Arc<C>,
    store: S,
    clock: Clock,
    /// The instant the stamps count from.
    base: quanta::Instant,
    /// The clock's raw count at `base` (`Clock::raw`). Stamps are raw counts (ticks) since
    /// it, so a hot acquire reads the clock without scaling ([`Shared::now`]).
    base_raw: u64,
    /// `max_idle_time` in ticks: the last count that scales within it
    /// ([`ticks_within`](crate::pool::reap::ticks_within)), so a stamp is stale exactly when
    /// its idle time in nanoseconds passes `max_idle_time` (to a tick's rounding).
    max_idle: u64,
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
    /// [`SessionError::Closed`] after [`SessionPool::close`], or the establishment's error,
    /// which every concurrent caller for the session shares.
    #[inline]
    pub fn acquire<'a>(
        &'a self,
        session: &'a str,
        ctx: &'a SessionContext,
    ) -> impl Future<Output = Result<Session<C>, SessionError>> + 'a {
        FirstPoll::new(
            // The hot path: a live, fresh session, with no await.
            move || {
                let shared = &*self.shared;
                let directory = &shared.directory;
                // Hashed once for every registry call this acquire makes.
                let key = directory.hashed(Id::new(session));
                match directory.lookup_fresh(key, || shared.now(), shared.max_idle) {
                    Ok(live) => ControlFlow::Break(Ok(Session { live })),
                    // Hashed again on the general path: nothing kept across the hot one.
                    Err(not_fresh) => ControlFlow::Continue(not_fresh),
                }
            },
            move |not_fresh| self.acquire_from(session, ctx, not_fresh),
        )
    }

    /// The rest of an acquire whose hinted lookup found no live, fresh session (see
    /// [`FirstPoll`]; `not_fresh` says why): full lookups, claims, establishments and
    /// flights to join.
    async fn acquire_from(
        &self,
        session: &str,
        ctx: &SessionContext,
        not_fresh: NotFresh,
    ) -> Result<Session<C>, SessionError> {
        let shared = &*self.shared;
        let directory = &shared.directory;
        let key = directory.hashed(Id::new(session));
        if not_fresh == (NotFresh::Unusable { rebuilt: true }) {
            bump(&shared.counters.rebuilt);
        }
        loop {
            let mut step = directory.lookup(key, || shared.now(), shared.max_idle);
            // The owned key a claim inserts, kept for the establishment too.
            let mut owned = None;
            if let Step::Vacant = step {
                // An establishment spawns a task (the event reader) and, with connectors that
                // answer at once, awaits nothing that yields: spend tokio's coop budget here,
                // as tokio's own resources do, so a loop of establishments lets the runtime
                // run (or, once released, drop) the readers it spawned instead of piling them
                // up. Cancel-safe: nothing is held yet.
                tokio::task::coop::consume_budget().await;
                step = directory.claim(
                    key,
                    || shared.now(),
                    shared.max_idle,
                    || {
                        let made: Arc<str> = Arc::from(session);
                        owned = Some(Arc::clone(&made));
                        Key(made)
                    },
                );
            }
            let flight = match step {
                Step::Ready(live) => return Ok(Session { live }),
                Step::Join(flight) => flight,
                Step::Vacant => continue,
                Step::Again { rebuilt } => {
                    if rebuilt {
                        bump(&shared.counters.rebuilt);
                    }
                    continue;
                }
                Step::Lead { flight, permit } => {
                    let owned = owned.unwrap_or_else(|| Arc::from(session));
                    // Cancel-safe: dropped here, the driver spawns the establishment so it
                    // still completes (see `Drive`). Its outcome is the flight's, so the
                    // leader need not wait on it.
                    let establishment = self.lead(key, owned, ctx, flight, permit)?;
                    return establishment
                        .await
                        .map(|live| Session { live: live.into() });
                }
                Step::Exhausted => {
                    bump(&shared.counters.exhausted);
                    return Err(directory.exhausted());
                }
                Step::Closed => return Err(SessionError::Closed),
            };
            // Cancel-safe: dropping here only deregisters this caller's waker. Boxed: a
            // follower's wait (and its timing) is the rare path, kept out of this future so
            // that the hot path's stays as small as it was.
            return Box::pin(self.follow(flight)).await;
        }
    }

    /// A follower's wait for the outcome of the flight it joined, counted and timed as a
    /// wait from its first pending poll (a wait cut short counts too; a flight already done
    /// reads no clock).
    ///
    /// Cancel-safe: dropping it only deregisters this caller's waker (and ends the wait).
    async fn follow(&self, flight: Arc<Flight<Outcome<C>>>) -> Result<Session<C>, SessionError> {
        let counters = &*self.shared.counters;
        let mut clock = WaitClock::new(&self.shared.clock, &counters.wait_nanos);
        let mut wait = pin!(flight.wait());
        let outcome = poll_fn(|cx| {
            let poll = wait.as_mut().poll(cx);
            if poll.is_pending() && !clock.waited() {
                clock.start();
                bump(&counters.waits);
            }
            poll
        })
        .await;
        drop(clock);
        outcome.map(|live| Session { live: live.into() })
    }

    /// Returns the establishment of a flight this caller leads, for the caller to drive, or
    /// ends the flight with the reason it cannot start.
    fn lead(
        &self,
        key: Hashed<'_, Id>,
        owned: Arc<str>,
        ctx: &SessionContext,
        flight: Arc<Flight<Outcome<C>>>,
        permit: OwnedPermit,
    ) -> Result<Drive<C>, SessionError> {
        let shared = &self.shared;
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            drop(permit);
            shared.directory.abandon(key, &flight);
            flight.complete(Err(SessionError::NoRuntime));
            return Err(SessionError::NoRuntime);
        };
        shared.counters.establishing.incr();
        let lead = Lead {
            shared: Arc::clone(shared),
            key: owned,
            hash: key.hash(),
            flight,
            permit: Some(permit),
            reach: Reach::NotSent,
            finished: false,
        };
        // The establishment owns the permit and the flight's completion: it finishes (and
        // cleans up) whatever happens to the caller.
        Ok(Drive {
            establishment: Some(Box::pin(lead.run(ctx.clone()))),
            runtime,
        })
    }

    /// Retires `session`'s connection (reader aborted, connection closed, capacity returned)
    /// and forgets it, so the next acquire establishes it again. A session still being
    /// established is removed too: its connection is closed when establishment ends, and its
    /// waiters get [`SessionError::Released`]. Returns whether the session was there.
    pub fn release(&self, session: &str) -> bool {
        let directory = &self.shared.directory;
        let found = directory.release(directory.hashed(Id::new(session)));
        if found {
            bump(&self.shared.counters.released);
        }
        found
    }

    /// The same as [`SessionPool::release`], as in R3: the session's connection is closed and
    /// the next acquire establishes a new one (reattaching to the stored loop if the store
    /// still has one; remove the record from the store to force a fresh bootstrap).
    pub fn reset_session(&self, session: &str) -> bool {
        self.release(session)
    }

    /// Closes the pool: every session and prewarmed connection is closed, establishments in
    /// flight close theirs when they end (their callers get [`SessionError::Closed`]), the
    /// reaper ends, and every later acquire gets [`SessionError::Closed`]. Idempotent.
    pub fn close(&self) {
        let shared = &self.shared;
        if let Some(reaper) = &self.reaper {
            reaper.abort();
        }
        shared.directory.close();
        let idle = std::mem::take(&mut *shared.idle.lock());
        for conn in idle {
            shared.close(&conn);
        }
    }

    /// Whether [`SessionPool::close`] was called.
    pub fn is_closed(&self) -> bool {
        self.shared.directory.is_closed()
    }

    /// Retires every session idle past `max_idle_time` at `now` (from the pool's clock) and
    /// returns how many. The background reaper calls this; tests call it with a mock clock.
    pub fn reap(&self, now: crate::Instant) -> usize {
        self.shared.reap(self.shared.ticks(now.0))
    }

    /// The pool's clock (to compute `now` for [`SessionPool::reap`]).
    pub fn clock(&self) -> crate::Clock {
        crate::Clock::from_quanta(self.shared.clock.clone())
    }

    /// How the pool hashes session ids ([`SessionPoolBuilder::key_hashing`]).
    pub fn key_hashing(&self) -> KeyHashing {
        self.shared.directory.registry().hashing()
    }

    /// The session store the pool was built with (to read or seed records while it runs).
    pub fn store(&self) -> &S {
        &self.shared.store
    }

    /// Opens connections until `prewarm` of them wait unassigned; returns how many it opened.
    ///
    /// Cancel-safe: a connection whose connect completed is kept; dropping the future at a
    /// connect drops that connect's future.
    ///
    /// # Errors
    /// [`SessionError::Connect`] on the first failed connect, [`SessionError::Panicked`] on
    /// the first that panicked (those opened before either are kept), [`SessionError::Closed`]
    /// once stopped.
    pub async fn prewarm(&self) -> Result<usize, SessionError> {
        let shared = &self.shared;
        let mut opened = 0;
        while shared.idle.lock().len() < shared.prewarm {
            if self.is_closed() {
                return Err(SessionError::Closed);
            }
            bump(&shared.counters.connects);
            let connector = &*shared.connector;
            let conn = establish::call(&shared.counters, Stage::Connect.place(), || {
                connector.connect()
            })
            .await
            .map_err(|panic| Stage::Connect.panicked(panic))?
            .map_err(|error| SessionError::Connect {
                source: source(error),
                reach: Reach::NotSent,
            })?;
            opened += 1;
            let mut idle = shared.idle.lock();
            if self.is_closed() || idle.len() >= shared.prewarm {
                drop(idle);
                shared.close(&conn);
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
        let limit = shared.directory.limit();
        SessionStats {
            capacity: limit.capacity(),
            in_use: limit.in_use(),
            active: counters.active.get(),
            establishing: counters.establishing.get(),
            idle: shared.idle.lock().len(),
            connects: counters.connects.get(),
            bootstraps: counters.bootstraps.get(),
            reattaches: counters.reattaches.get(),
            failures: counters.failures.get(),
            exhausted: counters.exhausted.get(),
            waits: counters.waits.get(),
            wait_time: counters.wait_nanos.time(),
            released: counters.released.get(),
            reaped: counters.reaped.get(),
            rebuilt: counters.rebuilt.get(),
            panics: counters.panics.get(),
        }
    }
}

impl<C: Connector, S: SessionStore> Drop for SessionPool<C, S> {
    fn drop(&mut self) {
        self.close();
    }
}

impl<C: Connector, S: SessionStore> fmt::Debug for SessionPool<C, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SessionPool")
            .field("stats", &self.stats())
            .field("stopped", &self.is_closed())
            .finish()
    }
}

impl<C: Connector, S> Shared<C, S> {
    /// Ticks from the base instant to `at`: the last count that scales within its
    /// nanoseconds.
    fn ticks(&self, at: quanta::Instant) -> u64 {
        ticks_within(
            &self.clock,
            duration_ns(at.saturating_duration_since(self.base)),
        )
    }

    /// Ticks from the base instant to now: the clock's raw count less the base's, with no
    /// scaling (what `ticks(clock.now())` gives, to a tick's rounding, for fewer instructions
    /// on the hot acquire).
    #[inline]
    fn now(&self) -> u64 {
        self.clock.raw().saturating_sub(self.base_raw)
    }

    /// Closes a connection that no session owns, containing a panic of the connector.
    fn close(&self, conn: &C::Conn) {
        close_contained(&*self.connector, &self.counters, conn);
    }

    /// Retires the sessions idle past `max_idle_time` at `now`, in ticks.
    fn reap(&self, now: u64) -> usize {
        let reaped = self.directory.reap(now, self.max_idle);
        self.counters.reaped.add(reaped as u64);
        reaped
    }
}

/// `connector.close(conn)`, with a panic counted and logged rather than unwound.
fn close_contained<C: Connector>(connector: &C, counters: &Counters, conn: &C::Conn) {
    if let Err(panic) = catch(|| connector.close(conn)) {
        counters.contained("session connector (close)", &panic);
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
