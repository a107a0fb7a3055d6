//! `slotpool::managed`: a general object pool (database connections, clients) for what
//! services pool with deadpool or bb8, on a lock-free, loom-checked core.
//!
//! You write a [`Manager`] (how to create an object, and optionally how to check one before
//! reuse); the [`Pool`] hands out [`Object`]s that deref to yours and go back on drop.
//!
//! ```
//! use std::convert::Infallible;
//! use std::time::Duration;
//! use slotpool::managed::{Manager, Pool, PoolError};
//!
//! /// A stand-in for a database client.
//! struct Conn { queries: u64 }
//!
//! struct Connector;
//! impl Manager for Connector {
//!     type Type = Conn;
//!     type Error = Infallible;
//!     async fn create(&self) -> Result<Conn, Infallible> {
//!         Ok(Conn { queries: 0 })
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let pool = Pool::builder(Connector)
//!     .max_size(16)
//!     .max_lifetime(Some(Duration::from_secs(30 * 60)))
//!     .build()?;
//!
//! let mut conn = pool.get().await?;          // or try_get(), get_timeout(d)
//! conn.queries += 1;                          // DerefMut to your object
//! drop(conn);                                 // back to the pool
//!
//! // Owned objects move into spawned tasks; the pool handle is a cheap clone.
//! let task = tokio::spawn({
//!     let pool = pool.clone();
//!     async move { pool.get().await.map(|conn| conn.queries) }
//! });
//! assert_eq!(task.await??, 1, "the same connection came back");
//!
//! match pool.get_timeout(Duration::from_millis(100)).await {
//!     Ok(_conn) => {}
//!     Err(PoolError::Timeout { step, .. }) => println!("timed out in {step}"),
//!     Err(e) => return Err(e.into()),
//! }
//! # Ok(()) }
//! ```
//!
//! # The protocol
//!
//! Objects live in the exclusive cells of `crate::protocol::exclusive` (read its module docs for the
//! proofs): a slot table whose slots each hold one object, plus a live count bounded by the
//! pool's size.
//!
//! * **States.** A slot is Empty, Starting (claimed: its object is being created), Ready
//!   with load 1 (in use, or being recycled) or Ready with load 0 (idle: the object sits in
//!   the slot's cell, with the time it came back in the slot's idle word), or Draining.
//! * **Fast path.** `get` joins the **lowest** idle slot (or, with [`QueueMode::Fifo`], the
//!   first one after the last checkout's, wrapping around): one bitmap load, one CAS on the
//!   slot word, one load of the idle word on the same cache line; the object moves out of
//!   the cell. A return moves it back, stores the idle word and releases the slot with one
//!   CAS; the room bit of a slot stays set across a checkout (lazy hints), so neither side
//!   touches the bitmap, and with nobody waiting neither takes a lock. Hot objects stay hot;
//!   high slots go idle and are reaped.
//! * **Slow path.** Nothing idle: take a unit of the live count (a CAS below the size) and
//!   claim the lowest Empty slot, then create. No room either: wait on the table's gate,
//!   FIFO. A return that finds waiters hands its slot (with the object in it) straight to the
//!   oldest one; a caller that never waited cannot take it first.
//! * **Orderings.** Every step on a slot word, the live count, the bound and the gate's state
//!   is `SeqCst`; the four store-then-load pairs the protocol relies on (return vs waiter,
//!   return vs resize or close, checkout vs reaper, retirement vs waiter) are the Dekker
//!   pattern, each told where it is used and each a loom model in
//!   `loom-tests/tests/managed.rs`.
//!
//! An object checked out holds its slot's unit and a reference that keeps the pool's state
//! alive (moved in and out of the cell with the object, so a checkout writes no shared
//! reference count). A return takes no count either: once the object is back in its cell a
//! concurrent close may take it and drop that reference, so the return marks its slot
//! `settling` (a plain store) and clears it as its last access, and whoever takes an object
//! out of the pool for good waits for the mark first (`crate::protocol::exclusive`, "Returning without a
//! reference count"; loom models in `loom-tests/tests/unpinned.rs`). Checkout plus return is
//! two locked instructions on an uncontended pool, the slot's RMW each way; deadpool's is over
//! ten, through a mutex and a semaphore.
//!
//! # The failure model
//!
//! Getting an object sends nothing, so every [`PoolError`] is `Reach::NotSent`: a retry is
//! safe. The error says what failed: a timeout and in which [`Step`] (waiting, creating,
//! recycling), the manager's create error, a `post_create` hook's rejection, the pool closed,
//! or a panic of user code and where.
//!
//! * A failed or rejected **recycle** (the manager's `Err` from [`Manager::recycle_now`] or
//!   [`Manager::recycle`], a hook's `Err`, a `recycle_timeout`) drops that object and the
//!   `get` goes on with the next idle one, or creates: it never fails the `get` by itself (a
//!   panic does: the caller learns of the bug).
//! * A failed **create** gives its room back at once and fails the `get` that ran it. After
//!   3 in a row (the default [`CreateBackoff`]), creations **pause**, first for 10 ms,
//!   doubling with each failed probe up to 80 ms (jittered): a `get` that needs one waits
//!   the pause out within its wait deadline, then one `get` tries (the probe) while the
//!   others keep waiting; the probe's success ends the pause, its failure starts a longer
//!   one. A server that is down meets one attempt per pause, not one per caller. A `get` fails with [`PoolError::Unavailable`] `{ retry_after
//!   }` instead of waiting when the pause outlasts its deadline, for `try_get`, or when the
//!   back-off is set to fail fast. Idle objects are handed out as ever.
//! * **Panics** of user code are caught where the pool calls it (never a second panic),
//!   logged once and counted in [`Stats::panics`]. A panic in `create`, `recycle` (or
//!   `recycle_now`) or a hook becomes [`PoolError::Panicked`] for the `get` that ran it; the
//!   object is dropped and its room given back. A panic in [`Manager::detach`], an object's destructor or a
//!   `retain` predicate comes while the object is on its way out: that object is dropped
//!   all the same and the panic fails no caller (a `get` that rejected the object goes on
//!   with the next one, a reaper pass or `retain` carries on).
//! * Every object is accounted for: idle, in use, or dropped exactly once ([`Stats`] says
//!   why).
//! * **`max_size` is a hard limit on objects that exist**, for a database its
//!   `max_connections`: an object the pool drops (rejected, expired, reaped, retained out,
//!   surplus) counts against it until its [`Manager::detach`] and its destructor are done.
//!   Only then does its room go back and wake a waiter to create.
//!   [`Object::take`] is the exception the caller asks for: the object leaves the pool after
//!   its `detach`, and the caller owns it from then on.
//!
//! # Cancellation, at each await of a `get`
//!
//! * **Waiting** for an object: dropping the future takes nothing. An object handed to it at
//!   that moment goes to the next waiter (or back to idle); a wake-up it had received passes
//!   on.
//! * **Recycling**: the recycle future is dropped with the caller and the object, whose state
//!   is then unknown, is dropped and its room given back (cleanly aborted, counted in
//!   `discarded`). [`Manager::recycle_now`] has no await: a `get` whose idle object it
//!   decides (with no hooks) ends without suspending.
//! * **Creating**: the creation runs to its end on the pool's own task (spawned on the
//!   runtime the pool was built in, or the current one), with its `create_timeout` and
//!   hooks; the object then goes idle, to the oldest waiter if there is one (counted in
//!   `created_off_caller`). Without a runtime it is dropped and its room given back.
//!
//! # Sizing, lifetimes, reaping
//!
//! [`Pool::resize`] changes the size at run time: growing wakes waiters; shrinking drops idle
//! objects at once (highest slots first) and objects in use as they come back, never more
//! than needed. [`Pool::retain`] drops idle objects a predicate rejects
//! ([`Pool::retain_and_take`] hands them to the caller). `max_lifetime` is checked at
//! checkout, at return and by the reaper; `idle_timeout` by the reaper, which keeps
//! `min_idle` objects; `min_idle` is topped up in the background, after objects are dropped
//! and after checkouts that may leave fewer idle. The background task starts at build inside
//! a tokio runtime, or at the first creation inside one (a pool built in a `static`).
//! [`Pool::close`] (or dropping the last handle) fails waiters with `Closed`, drops idle
//! objects, and drops the objects in use as they come back.
//!
//! # By deadpool's and bb8's names
//!
//! [`Timeouts`] and [`Pool::get_timeouts`] (deadpool's `timeout_get`), [`Pool::timeouts`],
//! [`Object::pool`]; [`Pool::add`], [`Pool::dedicated`] (bb8's `dedicated_connection`) and
//! [`PoolBuilder::error_sink`]; [`Stats::wait_time`] (bb8's `get_wait_time`);
//! [`PoolBuilder::queue_mode`] ([`QueueMode::Fifo`] takes each idle object in turn, as
//! deadpool does by default); [`PoolBuilder::build_eager`] (bb8's async `build`). The porting
//! guide (`docs/porting.md`) has the whole table.
//!
//! This module owns the objects' lifecycle; slots, the live count and waiting are
//! `crate::protocol::exclusive`'s and the gate's.

mod builder;
mod config;
mod contain;
mod create;
mod error;
mod maintain;
mod manager;
mod object;
#[cfg(feature = "postgres")]
pub mod postgres;
mod stats;
pub(crate) mod time;

use std::fmt;
use std::future::Future;
use std::ops::Deref;
use std::panic::Location;
use std::pin::{pin, Pin};
use std::ptr::NonNull;
use std::task::{Context, Poll};
use std::time::Duration;

pub use builder::{CreateBackoff, PoolBuilder, QueueMode, Recycle, Timeouts};
pub use config::PoolConfig;
pub use error::{AddError, BuildError, PoolError, Step};
pub use manager::{
    ErrorSink, Hook, HookError, HookFuture, HookResult, Manager, Meta, RecycleError, RecycleResult,
};
pub use object::Object;
pub use stats::{State, Statistics, Stats, Status};

use contain::{within, Contained};
use create::Creating;
use manager::{run_hooks, Hooks};
use stats::Counters;
use time::{RecentClock, WaitClock};

use crate::error::TryAcquireError;
use crate::panic::{catch, report, Panic};
use crate::pool::hold::HoldWatch;
use crate::protocol::breaker::{Admission, Breaker};
use crate::protocol::exclusive::{
    CheckIn, Checkout, Ending, ExclusiveSlots, Lease, Retired, Unpinned,
};
use crate::sync::{Arc, AtomicU64, AtomicUsize, Ordering, Weak};

/// The managed object pool. See the [module documentation](self).
///
/// A cheap handle: clones share one pool. Dropping the last handle closes the pool (as
/// [`Pool::close`]) even while objects are out; they are dropped as they come back.
pub struct Pool<M: Manager> {
    handle: Arc<PoolHandle<M>>,
}

/// What the handles share: the state, whose background task ends with the last handle.
struct PoolHandle<M: Manager> {
    shared: Arc<Shared<M>>,
}

impl<M: Manager> Drop for PoolHandle<M> {
    fn drop(&mut self) {
        self.shared.close();
        if let Some(maintainer) = self.shared.maintainer.get() {
            maintainer.abort();
        }
    }
}

/// The pool's state, shared by the handles, the objects (through their anchors) and the
/// background task (through a `Weak`).
struct Shared<M: Manager> {
    slots: ExclusiveSlots<Pooled<M>>,
    manager: M,
    hooks: Hooks<M>,
    config: Config,
    time: RecentClock,
    counters: Counters,
    /// The runtime the pool was built in: where creations whose caller left are finished.
    runtime: Option<tokio::runtime::Handle>,
    /// Wakes the background task to top `min_idle` up (after objects were dropped).
    maintain: Arc<tokio::sync::Notify>,
    /// The handles' common part, for [`Object::pool`] (gone once the last handle is).
    handle: Weak<PoolHandle<M>>,
    /// The size as last set (at build or by `resize`), for [`Status::max_size`]: the table's
    /// reads 0 once closed.
    max_size: AtomicUsize,
    /// The background task (reaping, `min_idle`), once started: at build inside a tokio
    /// runtime, or else at the first creation inside one.
    maintainer: std::sync::OnceLock<tokio::task::AbortHandle>,
    /// The create back-off: after consecutive failed creations, new ones wait (a breaker on
    /// the pool's clock; threshold 0 when the back-off is off).
    backoff: Breaker,
    /// Held-too-long detection ([`PoolBuilder::held_too_long`]), if on.
    hold: Option<HoldWatch>,
}

/// The checked settings (see the builder for each).
#[derive(Debug)]
struct Config {
    min_idle: usize,
    /// Nanoseconds.
    max_lifetime: Option<u64>,
    /// Nanoseconds.
    idle_timeout: u64,
    timeouts: Timeouts,
    /// A deadline over every whole `get` ([`PoolBuilder::connection_timeout`]).
    get_timeout: Option<Duration>,
    recycle: Recycle,
    /// Whether a checkout reads the clock (a lifetime cap, or recycling by idle time).
    reads_clock: bool,
    /// Whether a return has more to do than put the object back with a stale stamp (a
    /// lifetime cap, a watch of holds, or no background reaper: exact stamps read the clock).
    return_checks: bool,
    /// Whether a checkout has more to do than take the object (`min_idle`, or a watch of
    /// holds).
    checkout_work: bool,
    /// Whether there is a `pre_recycle` or `post_recycle` hook (the hooks never change after
    /// the build: one flag instead of two lengths on every recycle).
    recycle_hooks: bool,
    /// The background reap interval, if any.
    reap_interval: Option<Duration>,
    /// Whether the pool runs a background task (a reap interval, or `min_idle`).
    maintained: bool,
    /// Which idle object a checkout takes.
    queue_mode: QueueMode,
    /// Whether the create back-off is on.
    backoff: bool,
    /// Whether a `get` that finds creations paused fails at once.
    backoff_fails_fast: bool,
}

/// What a slot holds: one pointer to the object and its anchor, allocated together once,
/// when the object is created. One word whatever the object's size: a checkout and a return
/// move it in and out of the cell and through the `get` future. An object held inline (a
/// database client is a few hundred bytes) was copied whole on each of those moves
/// (`managed-216` in the hot-path example: a 216-byte object inline cost 1036 instructions
/// per checkout and return against 474 for a word), and an object and its anchor in two
/// allocations moved two words each time.
///
/// It owns the allocation through a raw pointer, not a `Box`, and hands out the object
/// mutably only as a field (`object_mut`), never the whole entry: a return reads its anchor
/// through a pointer taken before the entry goes back into its cell, and may do so after
/// another `get` has taken the entry out again and is using the object (see
/// [`Shared::check_in`]). Moving a `Box`, or a `&mut` to the entry, would claim the anchor
/// too; this claims only what its holder writes.
struct Pooled<M: Manager> {
    /// INVARIANT: a leaked `Box` (`Pooled::new`), owned by this value alone, freed by its
    /// drop or `into_parts`.
    entry: NonNull<Entry<M>>,
}

// SAFETY: a `Pooled` owns its entry as a `Box` would: it is `Send` or `Sync` when the entry
// is.
unsafe impl<M: Manager> Send for Pooled<M> where Entry<M>: Send {}
// SAFETY: as above.
unsafe impl<M: Manager> Sync for Pooled<M> where Entry<M>: Sync {}

/// The object and its anchor (see [`Pooled`]); on cache lines of its own (aligned as
/// `CachePadded` aligns, without its `Deref`, so a field is reached with no reference to the
/// whole), written only by the object's holder.
#[repr(align(128))]
struct Entry<M: Manager> {
    /// First, so an entry dropped whole drops the object before the anchor's reference to
    /// the pool (as `into_parts`'s callers do).
    object: M::Type,
    /// The object's own reference to the pool's state and what the pool knows of the object:
    /// moves with the object, so a checkout writes no shared count (see the module docs, "The
    /// protocol"). Read-only but for its atomics.
    anchor: Anchor<M>,
}

impl<M: Manager> Deref for Pooled<M> {
    type Target = Entry<M>;

    #[inline]
    fn deref(&self) -> &Entry<M> {
        // SAFETY: the entry is alive while owned; nothing holds a `&mut` to the whole entry.
        unsafe { self.entry.as_ref() }
    }
}

impl<M: Manager> Drop for Pooled<M> {
    fn drop(&mut self) {
        // SAFETY: the invariant: ours, a leaked `Box`, and not freed yet.
        drop(unsafe { Box::from_raw(self.entry.as_ptr()) });
    }
}

impl<M: Manager> Pooled<M> {
    /// A new object's entry, created at `created` (a stamp).
    fn new(object: M::Type, shared: Arc<Shared<M>>, created: u64) -> Self {
        let entry = Box::new(Entry {
            object,
            anchor: Anchor {
                shared,
                created,
                returned: AtomicU64::new(Stamps::NEVER),
                recycle_count: AtomicU64::new(0),
            },
        });
        Pooled {
            entry: NonNull::from(Box::leak(entry)),
        }
    }

    /// The object, mutably: a reference to that field alone (see [`Pooled`]).
    #[inline]
    fn object_mut(&mut self) -> &mut M::Type {
        // SAFETY: the entry is alive and ours; the reference covers the object only, which
        // only its holder (us, through `&mut self`) touches.
        unsafe { &mut (*self.entry.as_ptr()).object }
    }

    /// Where the anchor is: stays put, and readable, until the entry is freed.
    #[inline]
    fn anchor_ptr(&self) -> *const Anchor<M> {
        // SAFETY: in bounds of the live entry; no reference is made.
        unsafe { &raw const (*self.entry.as_ptr()).anchor }
    }

    /// The object and its anchor, apart (the object leaves the pool, or is dropped before
    /// the anchor's reference to the pool).
    fn into_parts(self) -> (M::Type, Anchor<M>) {
        let this = std::mem::ManuallyDrop::new(self);
        // SAFETY: the invariant; `this` is not dropped, so the entry is freed once, here.
        let entry = unsafe { Box::from_raw(this.entry.as_ptr()) };
        let Entry { object, anchor } = *entry;
        (object, anchor)
    }

    /// What the pool knows of the object now.
    #[inline]
    fn stamps(&self) -> Stamps {
        let anchor = &self.anchor;
        Stamps {
            created: anchor.created,
            returned: anchor.returned.load(Ordering::Relaxed),
            recycle_count: anchor.recycle_count.load(Ordering::Relaxed),
        }
    }
}

/// One per object: what keeps the pool's state alive while the object is out, and the
/// object's stamps (here rather than beside the object, so they stay put while the object
/// moves). The stamps are written only by the object's holder: relaxed loads and stores
/// (plain moves), ordered between holders by the slot's CAS that hands the object over.
struct Anchor<M: Manager> {
    shared: Arc<Shared<M>>,
    /// See [`Stamps`].
    created: u64,
    returned: AtomicU64,
    recycle_count: AtomicU64,
}

/// [`Meta`] as stamps (nanoseconds on the pool's clock): a snapshot of an object's
/// [`Anchor`].
#[derive(Debug, Clone, Copy)]
struct Stamps {
    created: u64,
    /// The last return, or [`Stamps::NEVER`] (a plain word, not an `Option`: one atomic in
    /// the anchor).
    returned: u64,
    recycle_count: u64,
}

impl Stamps {
    /// `returned` before the first return (no stamp reaches it: stamps end at
    /// [`MAX_STAMP`](crate::protocol::exclusive::MAX_STAMP)).
    const NEVER: u64 = u64::MAX;

    /// The last return, if any.
    fn returned(self) -> Option<u64> {
        (self.returned != Self::NEVER).then_some(self.returned)
    }
}

/// Why an object left the pool (for the counters and the log).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Gone {
    Discarded,
    Broken,
    Expired,
    Reaped,
    Surplus,
    RetainedOut,
}

/// What becomes of an idle object just checked out ([`Shared::recycle_due`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Due {
    /// It goes out as it is.
    No,
    /// It is recycled first.
    Yes,
    /// It is past its lifetime: dropped.
    Expired,
}

/// How far a `get` went, for the statistics ([`Stats::gets`] and the counts beside it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pace {
    /// Neither waited nor created yet: not counted as started until it ends.
    Fast,
    /// Created (or waited out a create pause) without waiting for another caller: counted as
    /// started.
    Slow,
    /// Waited for another caller's object or room: counted as started.
    Waited,
}

/// How a `get` waits for another caller's object, and whether it records its step.
#[derive(Clone, Copy)]
enum Mode<'a> {
    /// [`Pool::get`]: waits up to the pool's `wait_timeout`.
    Wait,
    /// [`Pool::try_get`]: never waits.
    NoWait,
    /// [`Pool::get_timeout`]: waits (the caller's deadline bounds it) and records the step it
    /// is in for the timeout's error (an atomic on the caller's stack, so the `get` future
    /// stays `Send`).
    Tracked(&'a AtomicUsize),
    /// [`Pool::get_timeouts`]: waits, with the caller's deadlines for each step instead of the
    /// pool's.
    Given(&'a Timeouts),
    /// [`Pool::get`] under the pool's whole-get deadline
    /// ([`PoolBuilder::connection_timeout`]), armed when the `get` first has to wait, create
    /// or recycle asynchronously: every await from there runs within what is left of it.
    Until(Deadline),
}

/// A whole-get deadline ([`Mode::Until`]): when it passes, and how long it was.
#[derive(Clone, Copy)]
struct Deadline {
    at: tokio::time::Instant,
    total: Duration,
}

impl Deadline {
    /// What is left of it now.
    fn left(self) -> Duration {
        self.at
            .saturating_duration_since(tokio::time::Instant::now())
    }

    /// The error of a `get` whose deadline passed in `step`.
    fn passed<E: std::error::Error + 'static>(self, step: Step) -> PoolError<E> {
        PoolError::Timeout {
            step,
            after: self.total,
        }
    }
}

impl<'a> Mode<'a> {
    const STEPS: [Step; 3] = [Step::Wait, Step::Create, Step::Recycle];

    #[inline]
    fn enter(self, step: Step) {
        if let Mode::Tracked(cell) = self {
            let index = Self::STEPS.iter().position(|&s| s == step).unwrap_or(0);
            cell.store(index, Ordering::Relaxed);
        }
    }

    /// A `get` is about to await: under the pool's whole-get deadline (a plain `get` of a pool
    /// with one), it starts now. Out of line: the fast path never awaits.
    #[cold]
    #[inline(never)]
    fn arm(&mut self, get_timeout: Option<Duration>) {
        if let (Mode::Wait, Some(total)) = (*self, get_timeout) {
            *self = Mode::Until(Deadline {
                at: tokio::time::Instant::now() + total,
                total,
            });
        }
    }

    /// The timeout error of a `get` whose whole-get deadline has passed, in `step`.
    #[cold]
    fn past<E: std::error::Error + 'static>(self, step: Step) -> Option<PoolError<E>> {
        match self {
            Mode::Until(deadline) if deadline.left().is_zero() => Some(deadline.passed(step)),
            _ => None,
        }
    }

    fn step(cell: &AtomicUsize) -> Step {
        Self::STEPS[cell.load(Ordering::Relaxed) % Self::STEPS.len()]
    }

    /// The deadlines this `get` runs under: the caller's, or the pool's.
    #[inline]
    fn timeouts<'t>(self, pool: &'t Timeouts) -> &'t Timeouts
    where
        'a: 't,
    {
        match self {
            Mode::Given(timeouts) => timeouts,
            _ => pool,
        }
    }
}

impl<M: Manager> Pool<M> {
    /// Starts configuring a pool of objects made by `manager`.
    pub fn builder(manager: M) -> PoolBuilder<M> {
        PoolBuilder::new(manager)
    }

    fn shared(&self) -> &Arc<Shared<M>> {
        &self.handle.shared
    }

    /// Returns an idle object (lowest slot first, recycled as the policy says), or creates
    /// one if the pool has room, or waits (FIFO) for one to come back.
    ///
    /// Cancel-safe at every await; see the [module documentation](self#cancellation-at-each-await-of-a-get).
    ///
    /// # Errors
    /// See [`PoolError`]: `Closed`, a `Timeout` (the pool's `wait_timeout` or
    /// `create_timeout`), `Create`, `PostCreateHook`, `Panicked`.
    #[track_caller]
    pub fn get(&self) -> impl Future<Output = Result<Object<M>, PoolError<M::Error>>> + Send + '_ {
        self.shared().get(Mode::Wait, Location::caller())
    }

    /// [`Pool::get`] by bb8's name for an owned checkout: every [`Object`] is owned
    /// (`'static`) already.
    ///
    /// # Errors
    /// As [`Pool::get`].
    #[track_caller]
    pub fn get_owned(
        &self,
    ) -> impl Future<Output = Result<Object<M>, PoolError<M::Error>>> + Send + '_ {
        self.shared().get(Mode::Wait, Location::caller())
    }

    /// Like [`Pool::get`] but never waits for another caller: an idle object, or a new one if
    /// the pool has room (the creation and a recycle are awaited).
    ///
    /// # Errors
    /// [`PoolError::NoCapacity`] when every object is in use and the pool is full; otherwise
    /// as [`Pool::get`].
    #[track_caller]
    pub fn try_get(
        &self,
    ) -> impl Future<Output = Result<Object<M>, PoolError<M::Error>>> + Send + '_ {
        self.shared().get(Mode::NoWait, Location::caller())
    }

    /// [`Pool::get`] with a deadline `timeout` from now over all its steps (instead of the
    /// pool's `wait_timeout`). When it passes, the error says which step was running; the
    /// step is cancelled as the module docs say (a creation goes on off this caller).
    ///
    /// # Errors
    /// [`PoolError::Timeout`] with the step, otherwise as [`Pool::get`].
    #[track_caller]
    pub fn get_timeout(
        &self,
        timeout: Duration,
    ) -> impl Future<Output = Result<Object<M>, PoolError<M::Error>>> + Send + '_ {
        let site = Location::caller();
        async move {
            let step = AtomicUsize::new(0);
            let get = self.shared().get(Mode::Tracked(&step), site);
            match within(Some(timeout), get).await {
                Ok(result) => result,
                Err(after) => {
                    // The `get` inside was started (it awaited) and is dropped uncounted.
                    self.shared().counters.gets_timed_out.incr();
                    Err(PoolError::Timeout {
                        step: Mode::step(&step),
                        after,
                    })
                }
            }
        }
    }

    /// [`Pool::get`] under the caller's deadlines for each step instead of the pool's
    /// (deadpool's `timeout_get`): a `None` field is no deadline for that step.
    ///
    /// # Errors
    /// [`PoolError::Timeout`] in step `wait` or `create` past that step's deadline (a recycle
    /// past its deadline drops the object and the `get` goes on); otherwise as [`Pool::get`].
    #[track_caller]
    pub fn get_timeouts<'a>(
        &'a self,
        timeouts: &'a Timeouts,
    ) -> impl Future<Output = Result<Object<M>, PoolError<M::Error>>> + Send + 'a {
        self.shared().get(Mode::Given(timeouts), Location::caller())
    }

    /// Puts an object made elsewhere into the pool (bb8's `add`): idle in the lowest empty
    /// slot (or straight to the oldest waiter), counted in `created`, within `max_size`. No
    /// hook runs on it; it is recycled at its first checkout as any idle object is.
    ///
    /// # Errors
    /// [`AddError::NoCapacity`] when the pool is full, [`AddError::Closed`] when it is closed;
    /// either hands the object back.
    pub fn add(&self, object: M::Type) -> Result<(), AddError<M::Type>> {
        let shared = self.shared();
        let Some(lease) = shared.slots.try_open() else {
            return Err(if shared.slots.is_closed() {
                AddError::Closed(object)
            } else {
                AddError::NoCapacity(object)
            });
        };
        let pooled = Pooled::new(object, Arc::clone(shared), shared.time.now());
        shared.slots.occupy_idle(&lease, pooled.anchor.created);
        shared.counters.created.incr();
        // Returned at once: idle in its slot, or to the oldest waiter.
        drop(Object::new(lease, pooled));
        Ok(())
    }

    /// A new object for the caller alone (bb8's `dedicated_connection`): made as a `get`
    /// makes one (`create` within the create deadline, then the `post_create` hooks) but never
    /// in the pool: not counted against `max_size` nor in the stats (but for a panic of its
    /// `create` or hooks, counted in `panics` as any caught panic), never recycled or reaped
    /// (a connection kept for `LISTEN`, say). Dropping it is the caller's affair.
    ///
    /// # Errors
    /// As creating in [`Pool::get`]: `Timeout` in step `create`, `Create`, `PostCreateHook`,
    /// `Panicked`; `Closed` once the pool is closed.
    pub async fn dedicated(&self) -> Result<M::Type, PoolError<M::Error>> {
        let shared = self.shared();
        if shared.slots.is_closed() {
            return Err(PoolError::Closed);
        }
        let built = Contained::new(create::build(
            Arc::clone(shared),
            shared.config.timeouts.create,
        ))
        .await
        .unwrap_or_else(|panic| {
            Err(PoolError::Panicked {
                step: Step::Create,
                panic,
            })
        })?;
        let (object, anchor) = built.into_parts();
        drop(anchor);
        Ok(object)
    }

    /// The pool's deadlines for each step of a `get` (as built).
    pub fn timeouts(&self) -> Timeouts {
        self.shared().config.timeouts
    }

    /// Sets the pool's size (its `max_size`) at run time. Growing wakes as many callers
    /// waiting for room as it adds room for; the room is not handed to them (as a returned
    /// object is), so a caller that never waited may take it first, and the woken waiter then
    /// queues again at the front (between its wake-up and its next try it is counted in
    /// neither `waiting` nor `size`). Shrinking drops idle objects beyond the new size now
    /// (highest slots first) and objects in use beyond it as they come back. A closed pool
    /// stays closed.
    ///
    /// # Errors
    /// [`ConfigError::TooLarge`](crate::ConfigError::TooLarge) naming `resize` above
    /// 2²⁴ (the most objects a pool holds). (Zero is allowed: it drains the pool until
    /// it is resized again.)
    pub fn resize(&self, max_size: usize) -> Result<(), crate::ConfigError> {
        let shared = self.shared();
        let dropped = shared.slots.resize(max_size)?;
        if !shared.slots.is_closed() {
            shared.max_size.store(max_size, Ordering::Relaxed);
        }
        shared.dispose(dropped, Gone::Surplus);
        shared.maintain.notify_one();
        Ok(())
    }

    /// Drops every idle object `keep` rejects (after [`Manager::detach`]) and returns how
    /// many it kept and dropped. Each object is taken from its slot while `keep` looks at it,
    /// as a checkout would take it, so nobody else can have it meanwhile; objects in use are
    /// not visited. A `keep` that panics drops that object (the panic is logged and counted).
    pub fn retain(&self, keep: impl FnMut(&M::Type, Meta) -> bool) -> Retained {
        let shared = self.shared();
        let (removed, kept, panics) = shared.retain(keep);
        let dropped = removed.len();
        shared.dispose(removed, Gone::RetainedOut);
        Retained {
            kept,
            dropped,
            panics,
        }
    }

    /// [`Pool::retain`], handing the objects `keep` rejects to the caller instead of dropping
    /// them (deadpool's `RetainResult::removed`): each is detached ([`Manager::detach`]) and
    /// leaves the pool as [`Object::take`] does (counted in `detached`); its room comes back
    /// once all are handed over.
    pub fn retain_and_take(
        &self,
        keep: impl FnMut(&M::Type, Meta) -> bool,
    ) -> RetainTaken<M::Type> {
        let shared = self.shared();
        let (removed, kept, panics) = shared.retain(keep);
        let mut taken = Vec::with_capacity(removed.len());
        // The iterator gives the units back when dropped, after the loop.
        for pooled in removed {
            let (mut object, anchor) = pooled.into_parts();
            if let Err(panic) = catch(|| shared.manager.detach(&mut object)) {
                shared.panicked(Step::Detach, &panic);
            }
            drop(anchor);
            shared.counters.detached.incr();
            taken.push(object);
        }
        if shared.config.min_idle > 0 && !taken.is_empty() {
            shared.maintain.notify_one();
        }
        RetainTaken {
            kept,
            removed: taken,
            panics,
        }
    }

    /// One reaper pass at `now` on the pool's clock: drops idle objects past `max_lifetime`,
    /// and idle ones past `idle_timeout` (plus the background reap interval, if the pool runs
    /// one: returns are stamped without a clock read and may be that early) beyond the
    /// lowest `min_idle`. Returns how many it dropped. An object checked out concurrently is
    /// never dropped.
    pub fn reap(&self, now: crate::Instant) -> usize {
        self.shared().reap(now.0)
    }

    /// Creates objects until `min_idle` are idle (or the pool is full, closed, or a creation
    /// fails); returns how many it created. The background task does the same on its own;
    /// a pool built outside a runtime starts it here (see [`PoolBuilder::build`]).
    pub async fn prewarm(&self) -> usize {
        let shared = self.shared();
        shared.ensure_maintainer();
        shared.top_up().await
    }

    /// [`PoolBuilder::build_eager`]'s second half: creates `wanted` idle objects, closing
    /// the pool at the first failure, then starts the background task (not before: it would
    /// race these creations for their room).
    pub(super) async fn fill_or_close(&self, wanted: usize) -> Result<(), PoolError<M::Error>> {
        let shared = self.shared();
        match shared.fill(wanted).await {
            Ok(_) => {
                shared.ensure_maintainer();
                Ok(())
            }
            Err((_, error)) => {
                shared.close();
                Err(error)
            }
        }
    }

    /// Closes the pool: waiters and later `get`s get [`PoolError::Closed`], idle objects are
    /// dropped now, objects in use when they come back. Idempotent.
    pub fn close(&self) {
        self.shared().close();
    }

    /// Whether the pool was closed.
    pub fn is_closed(&self) -> bool {
        self.shared().slots.is_closed()
    }

    /// The gauges now (scans the slots).
    pub fn status(&self) -> Status {
        self.shared().status()
    }

    /// The gauges and the counters by bb8's names and shape (bb8's `Pool::state`): the same
    /// numbers as [`Pool::stats`].
    pub fn state(&self) -> State {
        self.stats().into()
    }

    /// The gauges and the counters (scans the slots).
    pub fn stats(&self) -> Stats {
        let shared = self.shared();
        let c = &shared.counters;
        let fast = c.gets_fast.get();
        Stats {
            status: shared.status(),
            gets: fast + c.gets_slow.get(),
            gets_direct: fast + c.gets_slow_direct.get(),
            gets_waited: c.gets_waited.get(),
            gets_timed_out: c.gets_timed_out.get(),
            checkouts: shared.slots.counts().checkouts,
            waits: c.waits.get(),
            wait_time: Duration::from_nanos(c.wait_nanos.get()),
            created: c.created.get(),
            created_off_caller: c.created_off_caller.get(),
            create_failures: c.create_failures.get(),
            recycled: c.recycled.get(),
            discarded: c.discarded.get(),
            broken: c.broken.get(),
            expired: c.expired.get(),
            reaped: c.reaped.get(),
            surplus: c.surplus.get(),
            retained_out: c.retained_out.get(),
            detached: c.detached.get(),
            panics: c.panics.get(),
            paused: c.paused.get(),
            held_too_long: shared.hold.as_ref().map_or(0, HoldWatch::reported),
            hold_time: shared.hold.as_ref().map_or(Duration::ZERO, HoldWatch::held),
        }
    }

    /// The manager.
    pub fn manager(&self) -> &M {
        &self.shared().manager
    }

    /// The clock the pool measures ages and idle times with.
    pub fn clock(&self) -> crate::Clock {
        crate::Clock::from_quanta((self.shared().time.clock).clone())
    }
}

impl<M: Manager> Clone for Pool<M> {
    fn clone(&self) -> Self {
        Pool {
            handle: Arc::clone(&self.handle),
        }
    }
}

impl<M: Manager> fmt::Debug for Pool<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pool")
            .field("status", &self.status())
            .finish_non_exhaustive()
    }
}

/// What [`Pool::retain_and_take`] did, and the objects it took out.
#[derive(Debug)]
pub struct RetainTaken<T> {
    /// Idle objects kept.
    pub kept: usize,
    /// The idle objects rejected (or whose predicate panicked), detached, now the caller's.
    pub removed: Vec<T>,
    /// Predicate calls that panicked.
    pub panics: usize,
}

/// What [`Pool::retain`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Retained {
    /// Idle objects kept.
    pub kept: usize,
    /// Idle objects dropped (rejected, or their predicate panicked).
    pub dropped: usize,
    /// Predicate calls that panicked.
    pub panics: usize,
}

impl<M: Manager> Shared<M> {
    /// Takes out the idle objects `keep` rejects (a panicking `keep` rejects): them, and how
    /// many were kept and how many calls panicked.
    fn retain(
        &self,
        mut keep: impl FnMut(&M::Type, Meta) -> bool,
    ) -> (Retired<'_, Pooled<M>>, usize, usize) {
        let mut kept = 0;
        let mut panics = 0;
        let removed = self.slots.retain(|pooled| {
            let meta = self.meta(pooled.stamps());
            match catch(|| keep(&pooled.object, meta)) {
                Ok(true) => {
                    kept += 1;
                    true
                }
                Ok(false) => false,
                Err(panic) => {
                    panics += 1;
                    self.panicked(Step::Retain, &panic);
                    false
                }
            }
        });
        (removed, kept, panics)
    }

    /// The whole `get`: a plain try first (the common case never builds the wait), then
    /// waiting (unless the mode says not to), then readying the object.
    async fn get(
        self: &Arc<Self>,
        mode: Mode<'_>,
        site: &'static Location<'static>,
    ) -> Result<Object<M>, PoolError<M::Error>> {
        // When this `get` first found creations paused (its wait deadline runs from there).
        let mut paused_since = None;
        let mut pace = Pace::Fast;
        // Becomes `Mode::Until` at the first await of a plain `get` under a whole-get deadline.
        let mut mode = mode;
        loop {
            let checkout = match self.slots.try_checkout() {
                Ok(checkout) => checkout,
                Err(error) => {
                    mode.arm(self.config.get_timeout);
                    match self.wait(error, mode, &mut pace).await {
                        Ok(checkout) => checkout,
                        Err(error) => return Err(self.get_failed(pace, error)),
                    }
                }
            };
            match checkout {
                Checkout::Idle { lease, value } => {
                    if self.config.checkout_work {
                        self.checked_out(&lease, site, true);
                    }
                    match self.recycle_due(&value) {
                        Due::No => {
                            let object = Object::new(lease, value);
                            self.served(pace);
                            return Ok(object);
                        }
                        Due::Expired => {
                            self.discard(lease, value, Gone::Expired);
                            continue;
                        }
                        Due::Yes => {}
                    }
                    mode.enter(Step::Recycle);
                    let mut object = Object::new(lease, value);
                    // The fast path: no hooks, and the manager decides with no await. Nothing
                    // here awaits, so the object never enters this future's state.
                    let hooks = self.config.recycle_hooks;
                    if !hooks {
                        if let Some(recycled) = object.pooled_mut().and_then(|pooled| {
                            let meta = self.meta(pooled.stamps());
                            self.recycle_now(pooled.object_mut(), &meta)
                        }) {
                            let outcome = match recycled {
                                Ok(Ok(())) => Ok(()),
                                failed => self.recycle_outcome(failed),
                            };
                            match self.recycled(&mut object, outcome) {
                                Ok(()) => {
                                    self.served_recycled(pace);
                                    return Ok(object);
                                }
                                Err(Some(error)) => return Err(self.get_failed(pace, error)),
                                // Rejected and dropped (`object` is empty): try the next.
                                Err(None) => continue,
                            }
                        }
                    }
                    // Built before the recycle, so the object moves no more; dropped with the
                    // caller mid-recycle, the guard drops what it holds (not a return).
                    let mut guard = Recycling {
                        shared: self,
                        object: Some(&mut object),
                    };
                    let outcome = match guard.object.as_deref_mut().and_then(Object::pooled_mut) {
                        Some(pooled) => {
                            // Without hooks, `recycle_now` has had its say.
                            self.recycle_all(pooled, !hooks, &mut mode, &mut pace).await
                        }
                        None => Ok(()),
                    };
                    // Disarmed: the outcome decides.
                    guard.object = None;
                    drop(guard);
                    match self.recycled(&mut object, outcome) {
                        Ok(()) => {
                            self.served_recycled(pace);
                            return Ok(object);
                        }
                        Err(Some(error)) => return Err(self.get_failed(pace, error)),
                        // Rejected and dropped (`object` is empty): try the next, unless a
                        // whole-get deadline ended the recycle.
                        Err(None) => {
                            if let Some(error) = mode.past(Step::Recycle) {
                                return Err(self.get_failed(pace, error));
                            }
                        }
                    }
                }
                Checkout::Vacant { lease } => {
                    mode.enter(Step::Create);
                    mode.arm(self.config.get_timeout);
                    self.slowed(&mut pace);
                    self.ensure_maintainer();
                    let probe = match self.admit_create() {
                        Ok(probe) => probe,
                        Err(retry_after) => {
                            // Paused: the room goes back (to a waiter, or idle) and this
                            // caller waits out the pause, or fails as the settings say.
                            self.slots.retire(lease);
                            if let Err(error) =
                                self.pause(retry_after, mode, &mut paused_since).await
                            {
                                return Err(self.get_failed(pace, error));
                            }
                            continue;
                        }
                    };
                    let timeout = mode.timeouts(&self.config.timeouts).create;
                    let creating = Creating::new(Arc::clone(self), lease, timeout, probe, true);
                    let created = match mode {
                        // Cut short, the creation goes on off this caller (`Creating`'s drop).
                        Mode::Until(deadline) => within(Some(deadline.left()), creating)
                            .await
                            .unwrap_or_else(|_| Err(deadline.passed(Step::Create))),
                        _ => creating.await,
                    };
                    return match created {
                        Ok(object) => {
                            self.served(pace);
                            if let Some(lease) = object.lease().filter(|_| self.hold.is_some()) {
                                self.checked_out(lease, site, false);
                            }
                            Ok(object)
                        }
                        Err(error) => Err(self.get_failed(pace, error)),
                    };
                }
            }
        }
    }

    /// The deadline of a recycle that has to wait: the step's own (the pool's, or the
    /// caller's for `get_timeouts`), or what is left of the `get`'s whole-get deadline if
    /// that is sooner (armed now, if the `get` has not awaited before). The `get` counts as
    /// started from here.
    #[cold]
    #[inline(never)]
    fn recycle_limit(&self, mode: &mut Mode<'_>, pace: &mut Pace) -> Option<Duration> {
        // A `get` under way from here: counted as started, if it was not yet.
        self.slowed(pace);
        let step = mode.timeouts(&self.config.timeouts).recycle;
        mode.arm(self.config.get_timeout);
        match *mode {
            Mode::Until(deadline) => {
                let left = deadline.left();
                Some(step.map_or(left, |step| step.min(left)))
            }
            _ => step,
        }
    }

    /// A `get` is about to wait or create: counted as started, if it was not yet.
    #[cold]
    #[inline(never)]
    fn slowed(&self, pace: &mut Pace) {
        if *pace == Pace::Fast {
            self.counters.gets_slow.incr();
            *pace = Pace::Slow;
        }
    }

    /// A `get` hands its object out: the one count of the fast path, the others out of line.
    #[inline]
    fn served(&self, pace: Pace) {
        if pace == Pace::Fast {
            self.counters.gets_fast.incr();
        } else {
            self.served_slow(pace);
        }
    }

    /// [`Shared::served`] for a `get` whose object was recycled: counted in `recycled` too, in
    /// one stripe look-up with `gets_fast` on the fast path.
    #[inline]
    fn served_recycled(&self, pace: Pace) {
        if pace == Pace::Fast {
            self.counters.gets_fast.incr_with(&self.counters.recycled);
        } else {
            self.counters.recycled.incr();
            self.served_slow(pace);
        }
    }

    /// What a checkout (of an idle object, or of a new one) asks beyond taking it, for pools
    /// with `min_idle` or a watch of holds: the `min_idle` top-up, and the hold noted (the
    /// hold runs from here; a slot retired before the object goes out clears its note).
    #[cold]
    #[inline(never)]
    fn checked_out(&self, lease: &Lease, site: &'static Location<'static>, idle: bool) {
        if idle && self.config.min_idle > 0 {
            self.idle_taken(lease.index());
        }
        if let Some(watch) = &self.hold {
            watch.noted(&self.slots, lease, self.time.now(), site);
        }
    }

    #[cold]
    #[inline(never)]
    fn served_slow(&self, pace: Pace) {
        match pace {
            Pace::Waited => self.counters.gets_waited.incr(),
            _ => self.counters.gets_slow_direct.incr(),
        }
    }

    /// A `get` fails with `error`: counted as started if it was not yet, and as timed out if
    /// a deadline ended it.
    #[cold]
    #[inline(never)]
    fn get_failed(&self, pace: Pace, error: PoolError<M::Error>) -> PoolError<M::Error> {
        if pace == Pace::Fast {
            self.counters.gets_slow.incr();
        }
        if matches!(error, PoolError::Timeout { .. }) {
            self.counters.gets_timed_out.incr();
        }
        error
    }

    /// Asks the create back-off whether a creation may start now: `Ok(true)` for its probe
    /// (the first attempt after a pause), `Err(retry_after)` while creations are paused. One
    /// load when the back-off is closed (no clock read); nothing when it is off.
    fn admit_create(&self) -> Result<bool, Duration> {
        if !self.config.backoff {
            return Ok(false);
        }
        match self.backoff.admit(|| self.time.now()) {
            Ok(admission) => Ok(admission == Admission::Probe),
            Err(nanos) => {
                self.counters.paused.incr();
                Err(Duration::from_nanos(nanos))
            }
        }
    }

    /// A `get` found creations paused for `retry_after`: it fails with
    /// [`PoolError::Unavailable`] when it may not wait (`try_get`, a back-off set to fail
    /// fast) or when the pause outlasts what is left of its wait deadline (counted from
    /// `since`, the first pause this `get` met); otherwise it sleeps until the pause ends and
    /// tries again.
    async fn pause(
        &self,
        retry_after: Duration,
        mode: Mode<'_>,
        since: &mut Option<tokio::time::Instant>,
    ) -> Result<(), PoolError<M::Error>> {
        let unavailable = PoolError::Unavailable { retry_after };
        let wait = match mode {
            Mode::NoWait => return Err(unavailable),
            _ if self.config.backoff_fails_fast => return Err(unavailable),
            Mode::Wait => self.config.timeouts.wait,
            Mode::Given(timeouts) => timeouts.wait,
            // The caller's own deadline (`get_timeout`) is kept around the whole `get`.
            Mode::Tracked(_) => None,
            Mode::Until(deadline) => Some(deadline.left()),
        };
        let since = *since.get_or_insert_with(tokio::time::Instant::now);
        if wait.is_some_and(|wait| wait.saturating_sub(since.elapsed()) < retry_after) {
            return Err(unavailable);
        }
        mode.enter(Step::Wait);
        tokio::time::sleep(retry_after).await;
        Ok(())
    }

    /// A creation ended (`error` is why it failed, if it did): the create back-off hears it.
    /// A creation whose `create` succeeded counts as a success even if a `post_create` hook
    /// then rejected the object (the server answered).
    fn creation_ended(&self, error: Option<&PoolError<M::Error>>, probe: bool) {
        if !self.config.backoff {
            return;
        }
        match error {
            None
            | Some(PoolError::PostCreateHook(_))
            | Some(PoolError::Panicked {
                step: Step::PostCreate,
                ..
            }) => self.backoff.on_success(),
            Some(_) => self.backoff.on_failure(self.time.now(), probe),
        }
    }

    /// A creation was dropped before it ended (no runtime to finish it on, or the runtime
    /// shut down): a probe reports a failure, so that the back-off's next probe can start.
    fn creation_abandoned(&self, probe: bool) {
        if self.config.backoff && probe {
            self.backoff.on_failure(self.time.now(), true);
        }
    }

    /// After a failed try: fails at once (closed, or a `try_get`), or waits on the table's
    /// gate, counting the wait.
    async fn wait(
        &self,
        error: TryAcquireError,
        mode: Mode<'_>,
        pace: &mut Pace,
    ) -> Result<Checkout<Pooled<M>>, PoolError<M::Error>> {
        let timeout = match (error, mode) {
            (TryAcquireError::Closed, _) => return Err(PoolError::Closed),
            (_, Mode::NoWait) => return Err(PoolError::NoCapacity),
            (_, Mode::Wait) => self.config.timeouts.wait,
            (_, Mode::Given(timeouts)) => timeouts.wait,
            (_, Mode::Tracked(_)) => None,
            (_, Mode::Until(deadline)) => Some(deadline.left()),
        };
        mode.enter(Step::Wait);
        self.slowed(pace);
        *pace = Pace::Waited;
        self.counters.waits.incr();
        // Two clock reads, only for a caller that waits; a cancelled wait counts too.
        let mut clock = WaitClock::new(&self.time.clock, &self.counters.wait_nanos);
        clock.start();
        match within(timeout, self.slots.checkout_after_try()).await {
            Ok(checkout) => checkout.map_err(|_| PoolError::Closed),
            Err(after) => Err(match mode {
                Mode::Until(deadline) => deadline.passed(Step::Wait),
                _ => PoolError::Timeout {
                    step: Step::Wait,
                    after,
                },
            }),
        }
    }

    /// Whether an idle object just checked out is recycled before it goes out,
    /// or dropped for its age. Reads the clock only if the pool's settings need it.
    #[inline]
    fn recycle_due(&self, pooled: &Pooled<M>) -> Due {
        let config = &self.config;
        if !config.reads_clock {
            return if config.recycle == Recycle::Always {
                Due::Yes
            } else {
                Due::No
            };
        }
        let stamps = pooled.stamps();
        let now = self.time.now();
        if self.expired(stamps, now) {
            return Due::Expired;
        }
        let due = match config.recycle {
            Recycle::Always => true,
            Recycle::Never => false,
            Recycle::IdleLongerThan(idle) => {
                let since = stamps.returned().unwrap_or(stamps.created);
                now.saturating_sub(since) > crate::pool::reap::nanos(idle)
            }
        };
        if due {
            Due::Yes
        } else {
            Due::No
        }
    }

    /// Recycles an object: the `pre_recycle` hooks, [`Manager::recycle_now`] (unless
    /// `checked`: it has run and left the object to `recycle`), [`Manager::recycle`] (its
    /// first poll inline, a timer only for a recycle that has to wait), the `post_recycle`
    /// hooks. One `async fn` for all of them, so the common case (no hooks, a recycle ready at
    /// once) runs no nested state machine. `Err(None)`: rejected or timed out (logged); `Err(Some(..))`:
    /// user code panicked (logged). A recycle that has to wait arms the `get`'s whole-get
    /// deadline (`mode`), if it has one, and runs within what is left of it.
    #[inline]
    async fn recycle_all(
        &self,
        pooled: &mut Pooled<M>,
        checked: bool,
        mode: &mut Mode<'_>,
        pace: &mut Pace,
    ) -> Result<(), Option<(Step, Panic)>> {
        let meta = self.meta(pooled.stamps());
        let object = pooled.object_mut();
        if !self.hooks.pre_recycle.is_empty() {
            self.hooks_ok(Step::PreRecycle, &self.hooks.pre_recycle, object, &meta)
                .await?;
        }
        let decided = if checked {
            None
        } else {
            self.recycle_now(object, &meta)
        };
        let recycled = match decided {
            Some(recycled) => recycled,
            None => match catch(|| self.manager.recycle(object, &meta)) {
                Ok(recycle) => {
                    let mut recycle = pin!(Contained::new(recycle));
                    match FirstPoll(recycle.as_mut()).await {
                        Poll::Ready(done) => done,
                        Poll::Pending => {
                            match within(self.recycle_limit(mode, pace), recycle).await {
                                Ok(done) => done,
                                Err(after) => {
                                    tracing::warn!(?after, "recycle timed out; object dropped");
                                    return Err(None);
                                }
                            }
                        }
                    }
                }
                Err(panic) => Err(panic),
            },
        };
        if !matches!(recycled, Ok(Ok(()))) {
            self.recycle_outcome(recycled)?;
        }
        if !self.hooks.post_recycle.is_empty() {
            self.hooks_ok(Step::PostRecycle, &self.hooks.post_recycle, object, &meta)
                .await?;
        }
        Ok(())
    }

    /// Runs [`Manager::recycle_now`] under a panic guard: `None` if it leaves the object to
    /// [`Manager::recycle`].
    #[inline]
    fn recycle_now(
        &self,
        object: &mut M::Type,
        meta: &Meta,
    ) -> Option<Result<RecycleResult<M::Error>, Panic>> {
        match catch(|| self.manager.recycle_now(object, meta)) {
            Ok(None) => None,
            Ok(Some(result)) => Some(Ok(result)),
            Err(panic) => Some(Err(panic)),
        }
    }

    /// What the end of a recycle that did not accept means (logged): `Ok` if it did after
    /// all, `Err(None)` rejected, `Err(Some(..))` the manager panicked.
    #[cold]
    #[inline(never)]
    fn recycle_outcome(
        &self,
        recycled: Result<RecycleResult<M::Error>, Panic>,
    ) -> Result<(), Option<(Step, Panic)>> {
        match recycled {
            Ok(Ok(())) => Ok(()),
            Ok(Err(error)) => {
                tracing::debug!(%error, "recycle rejected an object");
                Err(None)
            }
            Err(panic) => {
                self.panicked(Step::Recycle, &panic);
                Err(Some((Step::Recycle, panic)))
            }
        }
    }

    /// After a recycle: the object goes out (`Ok`), or it is dropped and its room given back
    /// (`Err(None)`: rejected, try the next; `Err(Some(..))`: the `get` fails).
    #[inline]
    fn recycled(
        &self,
        object: &mut Object<M>,
        outcome: Result<(), Option<(Step, Panic)>>,
    ) -> Result<(), Option<PoolError<M::Error>>> {
        let failure = match outcome {
            Ok(()) => {
                if let Some(pooled) = object.pooled_mut() {
                    let count = &pooled.anchor.recycle_count;
                    count.store(count.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
                }
                // Counted in `recycled` by the caller, with the `get` it serves.
                return Ok(());
            }
            Err(None) => None,
            Err(Some((step, panic))) => Some(PoolError::Panicked { step, panic }),
        };
        if let Some((lease, pooled)) = object.take_held() {
            self.discard(lease, pooled, Gone::Discarded);
        }
        Err(failure)
    }

    /// Runs recycle hooks under a panic guard.
    async fn hooks_ok(
        &self,
        step: Step,
        hooks: &[manager::Hook<M>],
        object: &mut M::Type,
        meta: &Meta,
    ) -> Result<(), Option<(Step, Panic)>> {
        match Contained::new(run_hooks(hooks, object, meta)).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(error)) => {
                tracing::debug!(%error, %step, "a hook rejected an object");
                Err(None)
            }
            Err(panic) => {
                self.panicked(step, &panic);
                Err(Some((step, panic)))
            }
        }
    }

    /// Whether an object created at `stamps.created` is past `max_lifetime` at `now`.
    fn expired(&self, stamps: Stamps, now: u64) -> bool {
        self.config
            .max_lifetime
            .is_some_and(|lifetime| now.saturating_sub(stamps.created) >= lifetime)
    }

    fn meta(&self, stamps: Stamps) -> Meta {
        Meta::new(
            self.time.base(),
            stamps.created,
            stamps.returned(),
            stamps.recycle_count,
        )
    }

    /// Counts and logs a caught panic of user code.
    fn panicked(&self, step: Step, panic: &Panic) {
        self.counters.panics.incr();
        report(
            match step {
                Step::Wait => "managed pool",
                Step::Create => "manager create",
                Step::PostCreate => "post_create hook",
                Step::PreRecycle => "pre_recycle hook",
                Step::Recycle => "manager recycle",
                Step::PostRecycle => "post_recycle hook",
                Step::Detach => "manager detach or a destructor",
                Step::Retain => "retain predicate",
                Step::ErrorSink => "error sink",
                Step::HasBroken => "manager has_broken",
            },
            panic,
        );
    }

    /// Drops an object the caller holds (rejected or expired). It counts against `max_size`
    /// until it is closed: its room goes back after its detach and its drop.
    fn discard(&self, lease: Lease, pooled: Pooled<M>, why: Gone) {
        self.dispose(self.slots.retire_value(lease, pooled), why);
    }

    /// Closes objects that left the pool (their slots retired, their room still held by
    /// `objects`): detach, then drop, each under a panic guard, and count each; the room goes
    /// back once all are closed (when `objects` is dropped at the end of the loop). Wakes
    /// the background task to top `min_idle` up.
    fn dispose(&self, objects: Retired<'_, Pooled<M>>, why: Gone) {
        self.dispose_each(objects, |_| why);
    }

    /// [`Shared::dispose`], with the reason told for each object.
    fn dispose_each(&self, objects: Retired<'_, Pooled<M>>, why: impl Fn(&Pooled<M>) -> Gone) {
        if objects.is_empty() {
            return;
        }
        for pooled in objects {
            let gone = why(&pooled);
            self.close_object(pooled);
            let counter = match gone {
                Gone::Discarded => &self.counters.discarded,
                Gone::Broken => &self.counters.broken,
                Gone::Expired => &self.counters.expired,
                Gone::Reaped => &self.counters.reaped,
                Gone::Surplus => &self.counters.surplus,
                Gone::RetainedOut => &self.counters.retained_out,
            };
            counter.incr();
            tracing::debug!(why = ?gone, "object dropped");
        }
        if self.config.min_idle > 0 {
            self.maintain.notify_one();
        }
    }

    /// Detaches and drops one object, each step under a panic guard (a panic is counted and
    /// logged, and fails no caller: the object was on its way out).
    ///
    /// Dropping the anchor may drop the last `Arc` to this state while a `Retired` still
    /// borrows the slots: every caller must reach `self` through a pool handle, an upgraded
    /// `Weak`, or a reference of its own (`check_in` takes one on every path that disposes).
    fn close_object(&self, pooled: Pooled<M>) {
        let (object, anchor) = pooled.into_parts();
        self.drop_object(object);
        drop(anchor);
    }

    /// Takes an object back from its holder: into its slot idle (or to the oldest waiter),
    /// or dropped if it is past its lifetime or the pool is over its size or closed.
    #[inline]
    fn check_in(&self, lease: Lease, mut pooled: Pooled<M>) -> Ending<Arc<Shared<M>>> {
        // The object's anchor: its memory stays put while the object's entry moves into its
        // cell, and this pointer claims nothing of it (see `Pooled`).
        let anchor: *const Anchor<M> = pooled.anchor_ptr();
        // A reference of our own, for the paths that need the pool past the moment the object
        // leaves our hands. SAFETY: called only while the object (and so its anchor) is ours,
        // or in its cell with our `settling` flag set (no one can drop it then).
        let keep = move || {
            // SAFETY: as above.
            let anchor: &Anchor<M> = unsafe { &*anchor };
            Arc::clone(&anchor.shared)
        };
        // Not before its creation (which read the clock): the recent time may lag behind.
        let created = pooled.anchor.created;
        // One test for the settings that ask more of a return (a lifetime cap, a hold watch,
        // exact stamps): the hold ends here, whatever becomes of the object.
        let (stamp, expired) = if self.config.return_checks {
            self.returned_checked(lease.index(), created)
        } else {
            (self.time.recent_stale().max(created), false)
        };
        // bb8's check at return; the default `false` compiles to nothing. Before the age: a
        // broken object is dropped as broken.
        if self.has_broken(pooled.object_mut()) {
            let kept = keep();
            self.discard(lease, pooled, Gone::Broken);
            return Ending::Pinned(kept);
        }
        if expired {
            let kept = keep();
            self.discard(lease, pooled, Gone::Expired);
            return Ending::Pinned(kept);
        }
        pooled.anchor.returned.store(stamp, Ordering::Relaxed);
        match self.slots.check_in_unpinned(lease, pooled, stamp, keep) {
            Unpinned::Settling(settling) => Ending::Settling(settling),
            Unpinned::Pinned(kept, CheckIn::Kept) => Ending::Pinned(kept),
            Unpinned::Pinned(kept, CheckIn::Surplus(objects) | CheckIn::Trimmed(objects)) => {
                self.dispose(objects, Gone::Surplus);
                Ending::Pinned(kept)
            }
        }
    }

    /// The return's extra work, for pools with a lifetime cap, a hold watch or exact stamps:
    /// the return's stamp (exact without a background reaper, else up to a reap interval
    /// early), the hold note of `slot` ended, and whether an object created at `created` is
    /// past `max_lifetime` at that stamp (where the stamp cannot tell, the clock does). Out of
    /// line: only such pools call it.
    #[inline(never)]
    fn returned_checked(&self, slot: usize, created: u64) -> (u64, bool) {
        let stamp = self.time.recent().max(created);
        if let Some(watch) = &self.hold {
            watch.ended(&self.slots, slot, self.time.now());
        }
        let expired = self
            .config
            .max_lifetime
            .is_some_and(|lifetime| self.time.passed_since(stamp, created, lifetime));
        (stamp, expired)
    }

    /// [`Manager::has_broken`] under a panic guard (a panic counts as broken).
    #[inline]
    fn has_broken(&self, object: &mut M::Type) -> bool {
        catch(|| self.manager.has_broken(object)).unwrap_or_else(|panic| {
            self.panicked(Step::HasBroken, &panic);
            true
        })
    }

    /// One reaper pass (see [`Pool::reap`]).
    fn reap(&self, now: quanta::Instant) -> usize {
        let now = self.time.stamp(now);
        self.time.passed(now);
        if let Some(watch) = &self.hold {
            watch.report(&self.slots, now);
        }
        let idle_timeout = self.config.idle_timeout.saturating_add(self.time.staleness);
        let keep = self.config.min_idle;
        let mut idle_seen = 0usize;
        let reaped = self.slots.reap_by(|stamps| {
            idle_seen += 1;
            let lifetime = self
                .config
                .max_lifetime
                .is_some_and(|lifetime| now.saturating_sub(stamps.born) >= lifetime);
            let idle = idle_seen > keep && now.saturating_sub(stamps.idle_since) >= idle_timeout;
            lifetime || idle
        });
        let count = reaped.len();
        self.dispose_each(reaped.map_values(|(pooled, _)| pooled), |pooled| {
            if self.expired(pooled.stamps(), now) {
                Gone::Expired
            } else {
                Gone::Reaped
            }
        });
        count
    }

    /// Closes the pool (see [`Pool::close`]).
    fn close(&self) {
        self.slots.close();
        let idle = self.slots.reap(|_| true).map_values(|(pooled, _)| pooled);
        self.dispose(idle, Gone::Surplus);
    }

    fn status(&self) -> Status {
        let counts = self.slots.counts();
        Status {
            max_size: self.max_size.load(Ordering::Relaxed),
            size: self.slots.live(),
            available: counts.idle,
            in_use: counts.live.saturating_sub(counts.idle),
            waiting: counts.table.waiting,
        }
    }

    /// After a checkout of the idle object in slot `index`: if fewer than `min_idle` objects
    /// may be idle now, the background task is woken to top it up (no clock read). Taken
    /// lowest slot first, at most the objects above `index` are idle (one load of the live
    /// count); taken in turn ([`QueueMode::Fifo`]), the idle ones are counted (a load of
    /// each slot's words).
    #[inline(never)]
    fn idle_taken(&self, index: usize) {
        // Lowest first, every idle object is above the slot just taken: if fewer slots than
        // `min_idle` hold objects there, the top-up is due without counting. Otherwise (and
        // in turn, where idle objects may be anywhere) the slots are counted: objects in use
        // above the slot are not idle.
        let short = match self.config.queue_mode {
            QueueMode::Lowest
                if self.slots.live().saturating_sub(index + 1) < self.config.min_idle =>
            {
                true
            }
            _ => self.slots.counts().idle < self.config.min_idle,
        };
        if short {
            self.maintain.notify_one();
        }
    }

    /// Starts the background task on `runtime`, if the pool runs one and it has not started.
    fn start_maintainer(self: &Arc<Self>, runtime: &tokio::runtime::Handle) {
        if self.config.maintained {
            self.maintainer
                .get_or_init(|| maintain::spawn(runtime, self, self.config.reap_interval));
        }
    }

    /// Starts the background task on the current runtime if it has not started (a pool built
    /// outside a runtime, at its first creation inside one). One load once started.
    #[inline(never)]
    fn ensure_maintainer(self: &Arc<Self>) {
        if self.maintainer.get().is_none() && self.config.maintained {
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                self.start_maintainer(&runtime);
            }
        }
    }

    /// Tells the error sink, if any, of a failure in the pool's own work (a panicking sink is
    /// counted and logged).
    fn sink(&self, error: &PoolError<M::Error>) {
        if let Some(sink) = &self.hooks.error_sink {
            if let Err(panic) = catch(|| sink(error)) {
                self.panicked(Step::ErrorSink, &panic);
            }
        }
    }

    /// Creates objects until `min_idle` are idle (see [`Pool::prewarm`]).
    async fn top_up(self: &Arc<Self>) -> usize {
        match self.fill(self.config.min_idle).await {
            Ok(created) => created,
            Err((created, error)) => {
                tracing::warn!(%error, "creating an object for min_idle failed");
                self.sink(&error);
                created
            }
        }
    }

    /// Creates objects, one at a time, until `wanted` are idle or the pool is full or
    /// closed: how many it created, or the first failure with that count.
    async fn fill(self: &Arc<Self>, wanted: usize) -> Result<usize, (usize, PoolError<M::Error>)> {
        let mut created = 0;
        while self.slots.counts().idle < wanted {
            let Some(lease) = self.slots.try_open() else {
                break;
            };
            // Admitted only with room in hand: a probe admitted then is sure to report.
            let Ok(probe) = self.admit_create() else {
                self.slots.retire(lease);
                // Paused after failures: the next top-up (or reap pass) tries again.
                tracing::debug!("creations paused by the create back-off; min_idle waits");
                break;
            };
            let timeout = self.config.timeouts.create;
            match Creating::new(Arc::clone(self), lease, timeout, probe, false).await {
                // Dropped at once: it goes idle.
                Ok(object) => {
                    drop(object);
                    created += 1;
                }
                Err(error) => return Err((created, error)),
            }
        }
        Ok(created)
    }
}

/// Polls a future once and resolves to what the poll said (a hand-written `poll_fn`, so the
/// first poll of a recycle inlines into the `get`).
struct FirstPoll<'a, F>(Pin<&'a mut F>);

impl<F: Future> Future for FirstPoll<'_, F> {
    type Output = Poll<F::Output>;

    #[inline]
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Poll::Ready(self.0.as_mut().poll(cx))
    }
}

/// An object being recycled: dropped (its room given back) if the `get` is cancelled before
/// the recycle ends; `object` is `None` once the recycle is over (disarmed).
struct Recycling<'a, 'o, M: Manager> {
    shared: &'a Shared<M>,
    object: Option<&'o mut Object<M>>,
}

impl<M: Manager> Recycling<'_, '_, M> {
    #[cold]
    #[inline(never)]
    fn cancelled(&self, lease: Lease, pooled: Pooled<M>) {
        tracing::debug!("get cancelled while recycling; object dropped");
        self.shared.discard(lease, pooled, Gone::Discarded);
    }
}

impl<M: Manager> Drop for Recycling<'_, '_, M> {
    // Inline: on the common path the guard was disarmed and this is one test.
    #[inline]
    fn drop(&mut self) {
        if let Some((lease, pooled)) = self.object.take().and_then(Object::take_held) {
            self.cancelled(lease, pooled);
        }
    }
}

#[cfg(all(test, not(slotpool_loom)))]
mod tests {
    use std::convert::Infallible;

    use super::*;
    use crate::sync::Mutex;

    /// An object that records, when dropped, how many references its pool's state still has.
    struct Probe {
        shared: Weak<Shared<Probes>>,
        seen: Arc<Mutex<Option<usize>>>,
    }

    impl Drop for Probe {
        fn drop(&mut self) {
            *self.seen.lock() = Some(self.shared.strong_count());
        }
    }

    struct Probes;

    impl Manager for Probes {
        type Type = Probe;
        type Error = Infallible;

        async fn create(&self) -> Result<Probe, Infallible> {
            unreachable!("the test builds its entry by hand")
        }
    }

    /// An entry dropped whole (not taken apart by `into_parts`) frees its object and its
    /// reference to the pool, the object first (`Entry`'s field order).
    #[tokio::test(flavor = "current_thread")]
    async fn an_entry_dropped_whole_drops_the_object_then_its_pool_reference() {
        let pool = Pool::builder(Probes)
            .max_size(1)
            .reap_interval(None)
            .build()
            .unwrap();
        let shared = pool.shared();
        let before = Arc::strong_count(shared);
        let seen = Arc::new(Mutex::new(None));
        let probe = Probe {
            shared: Arc::downgrade(shared),
            seen: Arc::clone(&seen),
        };
        let entry = Pooled::new(probe, Arc::clone(shared), 0);
        assert_eq!(Arc::strong_count(shared), before + 1);
        drop(entry);
        assert_eq!(
            *seen.lock(),
            Some(before + 1),
            "the object was dropped while its entry still held the pool"
        );
        assert_eq!(
            Arc::strong_count(shared),
            before,
            "the entry's reference went"
        );
    }
}
