//! Keyed admission for blocking work: per-family shares of tokio's blocking pool, aliasing,
//! deadlines, and refusals that say whether a retry is safe (R2 in the seed systems).
//!
//! # The algorithm
//!
//! Blocking work (a call that takes a mutex and may wait on `fsync`) runs on tokio's blocking
//! pool. Each **operation family** (a key `K`) draws from a **share**: a
//! quota with a fixed number of slots, so one family stuck behind a
//! slow disk parks at most its own share of the pool's threads. Families that serialize on the
//! same lock are **aliased** to one share key and draw from one budget; refusals, logs,
//! statistics and metrics still name the caller's own key.
//!
//! The registry maps a caller key to a **route**: the share key, the share's quota, the key's
//! counters (`crate::protocol::routes`, where the protocol is told). It is two tables. The keys given
//! to the builder live in a table that is **fixed at build time** and never written again, so
//! looking one up is a plain hash lookup: no lock, not even an atomic. Keys registered at run
//! time live in a second table **published** through arc-swap. A call:
//!
//! 1. looks its key up in the fixed table, and only if it is not there in the published one
//!    (one lock-free load); R2 takes a global `Mutex<BTreeMap>` here on every call;
//! 2. tries the share's quota without waiting, one CAS (the common case ends here: no clock
//!    read, no timer, no reference count);
//! 3. only if the share is full, waits asynchronously (holding no thread) in
//!    `tokio::time::timeout(max_wait, quota.acquire())`, timed on the registry's clock for the
//!    key's wait statistics; if the wait elapses the call is **refused**: a per-key counter goes
//!    up and a warning names the key, its share and the wait bound, never the request;
//! 4. moves the [`Admission`] **into** the closure it hands to
//!    [`tokio::task::spawn_blocking`], enters the caller's span **inside** that closure, runs
//!    the work inside a panic guard, and releases the slot when the closure ends. A release
//!    with nobody waiting is one CAS and no lock (R2's tokio `Semaphore` locks its waiter queue
//!    on every permit drop).
//!
//! The admission is `'static` yet holds **no reference count**: a share's quota stays
//! allocated as long as any of its slots is out, because its word counts the slots out beside
//! the waiters, and the one atomic step that leaves it with its owner gone and nothing out
//! frees it (`crate::protocol::quota`). Admission and release are therefore two locked instructions,
//! the two the slot itself costs, where an `Arc`'d permit costs four.
//!
//! Registering a key at run time takes a writer mutex, copies the published table, adds the
//! route and publishes the copy. Lookups never take that mutex: they see the old table or the
//! new one, whole. Existing routes are shared between the copies (`Arc`), so a key keeps its one
//! quota whichever table a caller read. A run-time alias may name a share of either table.
//!
//! Both tables are open-addressed arrays of one cache line per key (`crate::protocol::routes::Table`).
//! A string key of at most 16 bytes (`&'static str`, `String`, `Box<str>`) is hashed from its
//! first and last eight bytes and its length, which are also what a lookup compares: no call
//! to `memcmp`, no hashing byte by byte. Other keys are hashed with [`KeyHasher`], a
//! multiply-rotate hash (FxHash's family) rather than std's SipHash, which cost more than the
//! rest of a lookup. The slot a key is found in also holds its share's quota pointer and
//! capacity, so the admission's CAS follows the lookup with no load in between. Neither hash
//! resists chosen collisions; that is sound here because only the service's own configuration
//! inserts keys. A request can only *look up* a key, and a lookup of an unknown key is refused
//! without inserting anything.
//!
//! # The failure model
//!
//! Every [`KeyedError`] carries the caller's key and a [`Reach`] that says whether a retry is
//! safe:
//!
//! * **Refused** ([`KeyedError::Refused`], also [`KeyedError::Closed`] and
//!   [`KeyedError::Unregistered`]): the closure **never ran** and never will. Nothing can have
//!   been applied, so a retry cannot duplicate a durable effect: [`Reach::NotSent`].
//! * **Lost outcome** ([`KeyedError::Panicked`], [`KeyedError::Lost`]): the closure was handed
//!   to the blocking pool and its result did not come back. A **mutation** may have committed
//!   before the panic, so it reports [`Reach::MaybeApplied`] and a retry may duplicate it. A
//!   **read** has no durable effect, so it reports [`Reach::NotSent`]: retrying is safe.
//!
//! A closure's panic is caught on the blocking thread, where it happened: the error carries
//! it ([`KeyedError::Panicked`]'s `panic`, with its message), the caller key's panic count
//! ([`KeyStats::panics`]) goes up, and a `tracing` error event names the key, the reach and
//! the message (never the request), sent to the subscriber that was the caller's default when
//! it called. Both happen there, before the slot is freed, so a panic is counted and logged
//! even when its caller stopped waiting. Nothing unwinds into the runtime or the caller.
//!
//! The slot is freed in every case: the admission lives inside the closure, so it is released
//! when the closure returns or its panic is caught, and never earlier. A caller that stops waiting (its future is
//! dropped mid-run) therefore keeps its slot taken until the work ends, and a second call in the
//! same share cannot overlap durable work that is still running.
//!
//! # Fitting the blocking pool
//!
//! The sum of all shares (each distinct share counted once, however many keys alias it) plus
//! the threads reserved for other blocking work must not exceed the blocking pool's thread
//! limit, or the families could together park every thread. [`KeyedBuilder::build`] and the
//! run-time registrations check it and return [`BuildError::DoesNotFit`]. This module
//! cannot read the runtime's limit: pass the value given to
//! `tokio::runtime::Builder::max_blocking_threads` (tokio's default is
//! [`TOKIO_DEFAULT_MAX_BLOCKING_THREADS`]).
//!
//! # Statistics and metrics
//!
//! [`Keyed::stats`] reports, per caller key, its share, the share's slots in use and capacity,
//! the calls waiting, the key's refusals and panics, and how many of its calls waited for a
//! slot and for how long in all ([`KeyStats::waits`], [`KeyStats::wait_time`], on the clock
//! set with [`KeyedBuilder::clock`]; a call admitted at once reads no clock). With the
//! `metrics` feature each caller key also exports a gauge `slotpool_keyed_in_use` (its calls
//! holding a slot now) and counters `slotpool_keyed_refusals_total` and
//! `slotpool_keyed_panics_total`, all labelled `key` and `share`, and records each wait (served,
//! refused or given up) in seconds in the histogram `slotpool_keyed_wait_seconds`, labelled
//! `pool` (the registry's [`name`](KeyedBuilder::name), `"default"` without one), `key` and
//! `share`; the handles are registered once per key, with whatever recorder is installed when
//! the key is registered. (The in-use gauge's handle is cloned into each admission, a
//! reference count the feature adds to the hot path.)
//!
//! [`Keyed::admit`] is the admission alone, for callers that run their work elsewhere; it is
//! also what the benchmarks measure against R2's admission.
//!
//! This module owns admission, the blocking pool and the per-key counters; `builder.rs` the
//! configuration, `error.rs` the errors. The route tables are `crate::protocol::routes`'s, the slots
//! `crate::protocol::quota`'s, and the wait queue `crate::protocol::gate`'s; the loom models drive those.
//!
//! # Example
//!
//! ```
//! use std::time::Duration;
//! use slotpool::keyed::Keyed;
//! use tracing::Instrument;
//!
//! let keyed = Keyed::builder()
//!     .default_share(8)
//!     .family("journal")
//!     .share("replay", 4)
//!     .alias("ledger", "journal") // serializes on the journal's lock: same budget
//!     .max_blocking_threads(128)
//!     .reserved_threads(16)
//!     .build()?;
//!
//! let rt = tokio::runtime::Builder::new_current_thread().enable_time().build()?;
//! rt.block_on(async {
//!     let result = keyed
//!         .mutate(&"ledger", Duration::from_millis(50), || {
//!             // blocking work: take the journal's mutex, write, fsync ...
//!             42
//!         })
//!         .instrument(tracing::info_span!("commit", family = "ledger"))
//!         .await;
//!     match result {
//!         Ok(value) => assert_eq!(value, 42),
//!         Err(error) if error.reach().retry_is_safe() => { /* not run: safe to retry */ }
//!         Err(_maybe_applied) => { /* may have committed: reconcile before retrying */ }
//!     }
//! });
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::borrow::Cow;
use std::fmt;
use std::hash::Hash;
use std::time::Duration;

use crate::error::Reach;
use crate::panic::{catch, Panic};
use crate::pool::reap::nanos;
use crate::pool::wait::{WaitClock, WaitSink};
use crate::protocol::quota::QuotaPermit;
use crate::protocol::routes::{First, Route, Routes, Table};
use crate::sync::{Arc, AtomicU64, Ordering};

/// The share a family gets unless overridden (R2's `MAX_FAMILY_BLOCKING_SLOTS`).
///
/// Arithmetic it takes part in: `sum(shares) + reserved_threads <= max_blocking_threads`.
/// With R2's nine shares (eight at 8, the replay share at 4) the sum is `8 * 8 + 4 = 68`,
/// which fits R2's bound of 128 threads; the census test in `tests/keyed.rs` checks it.
pub const DEFAULT_SHARE: usize = 8;

/// tokio's default for `runtime::Builder::max_blocking_threads`, and the default bound here.
pub const TOKIO_DEFAULT_MAX_BLOCKING_THREADS: usize = 512;

/// The most slots one share can have (about a million; a share is a slice of the blocking
/// pool's threads, so the fit check refuses far smaller shares first in practice).
pub const MAX_SHARE: usize = crate::protocol::quota::MAX_QUOTA;

mod builder;
mod error;

pub use crate::protocol::routes::KeyHasher;
pub use builder::KeyedBuilder;
pub use error::{BuildError, KeyedError};

/// What a key type must provide: compared and hashed on every call, cloned only into errors,
/// statistics and registrations, printed (`Debug`) in logs and errors.
pub trait Key: Eq + Hash + Clone + fmt::Debug + Send + Sync + 'static {}

impl<T: Eq + Hash + Clone + fmt::Debug + Send + Sync + 'static> Key for T {}

/// A point-in-time view of one caller key.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct KeyStats<K> {
    /// The caller's key.
    pub key: K,
    /// The share key it draws from (equal to `key` for a share key).
    pub share: K,
    /// Slots of the share in use now, by this key and every key aliased to the same share.
    pub in_use: usize,
    /// The share's number of slots.
    pub capacity: usize,
    /// Calls waiting for a slot of the share now.
    pub waiting: usize,
    /// Calls with this caller key refused so far.
    pub refusals: u64,
    /// Calls with this caller key whose closure panicked so far.
    pub panics: u64,
    /// Calls with this caller key that found the share full and waited for a slot so far:
    /// those admitted after the wait, those refused at `max_wait`, and those dropped while
    /// waiting.
    pub waits: u64,
    /// The time those calls spent waiting, in all, on the registry's clock
    /// ([`KeyedBuilder::clock`]; bb8's `get_wait_time`, per key). A call admitted at once
    /// reads no clock and adds nothing.
    pub wait_time: Duration,
}

/// Whether a call's closure can have a durable effect; decides the [`Reach`] of a lost outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Effect {
    Mutation,
    Read,
}

impl Effect {
    fn lost_reach(self) -> Reach {
        match self {
            Effect::Mutation => Reach::MaybeApplied,
            Effect::Read => Reach::NotSent,
        }
    }
}

/// A caller key's own state beside its route: its counters and metric handles. Shared by
/// every table that holds the key's route.
struct KeyState<K> {
    /// The caller key, for the panic log written where the panic is caught.
    key: K,
    /// Refusals of this caller key. Written only on the refusal path.
    refusals: AtomicU64,
    /// Panics of this caller key's closures. Written only on the panic path.
    panics: AtomicU64,
    /// Calls of this caller key that waited for a slot. Written only on the wait path.
    waits: AtomicU64,
    /// Nanoseconds they waited, in all. Written only on the wait path (a [`WaitSink`]).
    wait_nanos: AtomicU64,
    #[cfg(feature = "metrics")]
    metrics: metrics_export::RouteMetrics,
}

impl<K: Key> KeyState<K> {
    /// The state of caller key `key`, drawing from `share`, in the registry called `pool`.
    fn new(key: &K, share: &K, pool: Cow<'static, str>) -> Self {
        #[cfg(not(feature = "metrics"))]
        let _ = (share, pool);
        Self {
            key: key.clone(),
            refusals: AtomicU64::new(0),
            panics: AtomicU64::new(0),
            waits: AtomicU64::new(0),
            wait_nanos: AtomicU64::new(0),
            #[cfg(feature = "metrics")]
            metrics: metrics_export::RouteMetrics::new(key, share, pool),
        }
    }
}

impl<K> WaitSink for KeyState<K> {
    fn add(&self, waited: Duration) {
        self.wait_nanos.fetch_add(nanos(waited), Ordering::Relaxed);
        #[cfg(feature = "metrics")]
        self.metrics.wait_seconds.record(waited.as_secs_f64());
    }
}

/// Counts a closure's panic against its caller key and logs the key, the reach and the
/// message (never the request's contents).
#[cold]
fn note_panic<K: Key>(state: &KeyState<K>, effect: Effect, panic: &Panic) {
    state.panics.fetch_add(1, Ordering::Relaxed);
    #[cfg(feature = "metrics")]
    state.metrics.panics.increment(1);
    tracing::error!(
        key = ?state.key,
        reach = ?effect.lost_reach(),
        message = panic.message(),
        "keyed blocking work panicked; contained"
    );
}

type KeyRoute<K> = Route<K, KeyState<K>>;
type KeyTable<K> = Table<K, KeyState<K>>;

fn stats_of<K: Key>(key: &K, route: &KeyRoute<K>) -> KeyStats<K> {
    let quota = route.quota();
    let state = route.extra();
    KeyStats {
        key: key.clone(),
        share: route.share().clone(),
        in_use: quota.in_use(),
        capacity: quota.capacity(),
        waiting: quota.waiting(),
        refusals: state.refusals.load(Ordering::Relaxed),
        panics: state.panics.load(Ordering::Relaxed),
        waits: state.waits.load(Ordering::Relaxed),
        wait_time: Duration::from_nanos(state.wait_nanos.load(Ordering::Relaxed)),
    }
}

/// A registry of per-key shares of tokio's blocking pool. Build one with [`Keyed::builder`].
///
/// See the [module documentation](self) for the algorithm and the failure model.
pub struct Keyed<K: Key> {
    /// The builder's keys in a fixed table, run-time keys in a published one, and the close.
    routes: Routes<K, KeyState<K>>,
    /// Share of keys registered without an explicit size. INVARIANT: at least 1.
    default_share: usize,
    /// The blocking pool's thread limit the shares must fit. INVARIANT: at least 1.
    max_blocking_threads: usize,
    /// Threads kept free for other blocking work.
    reserved_threads: usize,
    /// The clock waits are timed on (read only by a call that waits).
    clock: quanta::Clock,
    /// The registry's name: the `pool` label of its keys' wait histograms.
    name: Cow<'static, str>,
}

impl<K: Key> Keyed<K> {
    /// Starts a configuration: default share [`DEFAULT_SHARE`], thread limit
    /// [`TOKIO_DEFAULT_MAX_BLOCKING_THREADS`], no reserved threads, no keys.
    pub fn builder() -> KeyedBuilder<K> {
        KeyedBuilder::new()
    }

    /// Runs a **mutation** on the blocking pool within `key`'s share.
    ///
    /// Waits asynchronously, holding no thread, at most `max_wait` for a slot (pass the tighter
    /// of the transport deadline and the call's own budget); then runs `work` on
    /// [`tokio::task::spawn_blocking`] with the slot's permit moved into the closure and the
    /// caller's span (the current one at the first poll: instrument the call, `.instrument
    /// (span)`, or see [`Keyed::mutate_in`]) entered inside it, on the blocking thread. A
    /// refusal is logged with the key, its share and the wait bound, never anything of the
    /// work.
    ///
    /// # Errors
    /// [`KeyedError::Refused`], [`KeyedError::Closed`], [`KeyedError::Unregistered`]: not run,
    /// [`Reach::NotSent`]. [`KeyedError::Panicked`], [`KeyedError::Lost`]: the work may have
    /// applied, [`Reach::MaybeApplied`]. The slot is freed in every case.
    ///
    /// # Cancel safety
    /// Dropping the future while it waits for a slot takes no slot and runs nothing. Dropping it
    /// after the slot was granted does not stop the closure: it runs to its end and holds its
    /// slot until then; only its outcome is lost to this caller.
    ///
    /// # Panics
    /// Outside a tokio runtime, or, when the share is full, in a runtime built without the
    /// time driver (`enable_time`), as [`tokio::time::timeout`] does.
    ///
    /// # Example
    /// ```
    /// # use std::time::Duration;
    /// # use slotpool::keyed::Keyed;
    /// let keyed = Keyed::builder().family("journal").build()?;
    /// # let rt = tokio::runtime::Builder::new_current_thread().enable_time().build()?;
    /// # rt.block_on(async {
    /// let written = keyed
    ///     .mutate(&"journal", Duration::from_millis(20), || 3 /* bytes */)
    ///     .await?;
    /// assert_eq!(written, 3);
    /// # Ok::<(), slotpool::keyed::KeyedError<&str>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub async fn mutate<F, T>(
        &self,
        key: &K,
        max_wait: Duration,
        work: F,
    ) -> Result<T, KeyedError<K>>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        let span = tracing::Span::current();
        self.run(key, max_wait, span, work, Effect::Mutation).await
    }

    /// [`Keyed::mutate`] with `work` run in `span`, entered only on the blocking thread: the
    /// call's own events (a refusal, a panic report) stay outside it, so a span that carries
    /// a request's fields never reaches the pool's log lines.
    ///
    /// # Errors
    /// As [`Keyed::mutate`].
    pub async fn mutate_in<F, T>(
        &self,
        key: &K,
        max_wait: Duration,
        span: tracing::Span,
        work: F,
    ) -> Result<T, KeyedError<K>>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        self.run(key, max_wait, span, work, Effect::Mutation).await
    }

    /// Runs a **read** on the blocking pool within `key`'s share. Identical to
    /// [`Keyed::mutate`] except that a lost outcome (panic, lost join) reports
    /// [`Reach::NotSent`]: a read has no durable effect, so a retry is safe.
    ///
    /// # Errors
    /// As [`Keyed::mutate`], every variant with [`Reach::NotSent`].
    ///
    /// # Cancel safety
    /// As [`Keyed::mutate`].
    ///
    /// # Panics
    /// As [`Keyed::mutate`].
    ///
    /// # Example
    /// ```
    /// # use std::time::Duration;
    /// # use slotpool::keyed::Keyed;
    /// let keyed = Keyed::builder().share("index", 2).build()?;
    /// # let rt = tokio::runtime::Builder::new_current_thread().enable_time().build()?;
    /// # rt.block_on(async {
    /// let found = keyed
    ///     .read(&"index", Duration::from_millis(20), || Some(7))
    ///     .await?;
    /// assert_eq!(found, Some(7));
    /// # Ok::<(), slotpool::keyed::KeyedError<&str>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub async fn read<F, T>(&self, key: &K, max_wait: Duration, work: F) -> Result<T, KeyedError<K>>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        let span = tracing::Span::current();
        self.run(key, max_wait, span, work, Effect::Read).await
    }

    /// [`Keyed::read`] with `work` run in `span`, entered only on the blocking thread (see
    /// [`Keyed::mutate_in`]).
    ///
    /// # Errors
    /// As [`Keyed::read`].
    pub async fn read_in<F, T>(
        &self,
        key: &K,
        max_wait: Duration,
        span: tracing::Span,
        work: F,
    ) -> Result<T, KeyedError<K>>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        self.run(key, max_wait, span, work, Effect::Read).await
    }

    async fn run<F, T>(
        &self,
        key: &K,
        max_wait: Duration,
        span: tracing::Span,
        work: F,
        effect: Effect,
    ) -> Result<T, KeyedError<K>>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        // Await 1 (cancel-safe): a drop here takes no slot and runs nothing.
        // The route rides with the closure, so its panic is counted where it is caught.
        let (admission, route) = self
            .admit_as(key, max_wait, |permit, route| {
                (Admission::new(permit, route), Arc::clone(route))
            })
            .await?;
        // The caller's dispatcher, for the panic log written on the blocking thread (a
        // subscriber the caller set as its thread's default would not see it otherwise).
        let dispatch = tracing::dispatcher::get_default(tracing::Dispatch::clone);
        let handle = tokio::task::spawn_blocking(move || {
            let outcome = {
                // The span is entered on the blocking thread, so the work's events nest under it.
                let _entered = span.enter();
                // A panic of `work` (or of a drop of what it captured) ends here, on the
                // blocking thread: its message is kept for the caller.
                catch(work)
            };
            if let Err(panic) = &outcome {
                // Counted and logged here, before the slot is freed, whether or not the caller
                // is still waiting for the outcome; outside the work's span, whose fields may
                // hold the request.
                tracing::dispatcher::with_default(&dispatch, || {
                    note_panic(route.extra(), effect, panic);
                });
            }
            // Held until `work` returns or unwinds, whatever the caller does meanwhile.
            drop(admission);
            outcome
        });
        // Await 2: a drop here detaches the closure; it keeps its slot until it ends.
        match handle.await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(panic)) => Err(KeyedError::Panicked {
                key: key.clone(),
                reach: effect.lost_reach(),
                panic,
            }),
            // The closure catches its own panics: a join error that reports one is a panic
            // outside it (in entering the span), still the caller's call that went wrong.
            Err(error) if error.is_panic() => {
                let panic = Panic::from_payload(error.into_panic());
                Err(self.panicked(key, effect, panic))
            }
            Err(_cancelled) => {
                let key = key.clone();
                let reach = effect.lost_reach();
                tracing::error!(key = ?key, ?reach, "keyed blocking work lost");
                Err(KeyedError::Lost { key, reach })
            }
        }
    }

    /// The panic path of a panic outside the closure: count it against the caller's key, log
    /// its message (never the request's contents) and build the error.
    #[cold]
    fn panicked(&self, key: &K, effect: Effect, panic: Panic) -> KeyedError<K> {
        self.routes.with_route(key, |route| {
            if let Some(route) = route {
                note_panic(route.extra(), effect, &panic);
            }
        });
        KeyedError::Panicked {
            key: key.clone(),
            reach: effect.lost_reach(),
            panic,
        }
    }

    /// Waits at most `max_wait` for a slot of `key`'s share and returns it, without running
    /// anything: for callers that run their work elsewhere (their own thread, a test). The slot
    /// is released when the [`Admission`] drops; move it into the work so it is held exactly as
    /// long as the work runs.
    ///
    /// The common case (a slot is free) is one lock-free lookup and one CAS; no clock is read
    /// and no reference count is touched (the slot's permit holds none, see `crate::protocol::quota`).
    ///
    /// # Errors
    /// [`KeyedError::Refused`] (no slot within `max_wait`; counted and logged),
    /// [`KeyedError::Closed`], [`KeyedError::Unregistered`]; all [`Reach::NotSent`].
    ///
    /// # Cancel safety
    /// Dropping the future before it resolves takes no slot, and a wake-up it had received
    /// passes to the next waiter of the share.
    ///
    /// # Panics
    /// When the share is full and the current runtime has no time driver, as
    /// [`tokio::time::timeout`] does.
    pub fn admit<'a>(
        &'a self,
        key: &'a K,
        max_wait: Duration,
    ) -> impl std::future::Future<Output = Result<Admission, KeyedError<K>>> + 'a {
        // Returned, not awaited: a wrapping `async fn` would nest one more state machine.
        self.admit_as(key, max_wait, |permit, route| Admission::new(permit, route))
    }

    /// [`Keyed::admit`], making of the permit and the route it came from what `make` makes.
    async fn admit_as<A>(
        &self,
        key: &K,
        max_wait: Duration,
        make: impl FnOnce(QuotaPermit, &Arc<KeyRoute<K>>) -> A + Copy,
    ) -> Result<A, KeyedError<K>> {
        // The first attempt's outcome is consumed before the await: held across it (as a
        // `match` scrutinee is), it would be stored in this future's state and read back.
        let route = match self.routes.admit(key, make) {
            First::Admitted(admission) => return Ok(admission),
            First::Wait(route) => route,
            First::Closed => return Err(self.closed(key)),
            First::Unregistered => return Err(self.unregistered(key)),
        };
        // Boxed: the wait (and its timer) is the rare path, and keeping it out of line keeps
        // this future, and every future that awaits it, small to move.
        Box::pin(self.wait_for_slot(key, route, max_wait, make)).await
    }

    /// The slow path of [`Keyed::admit`]: the share was full on the first attempt.
    ///
    /// Cancel-safe: dropping it drops the quota's wait future inside the timeout, which leaves
    /// the share's queue and passes on a wake-up (or a slot) it had received.
    async fn wait_for_slot<A>(
        &self,
        key: &K,
        route: Arc<KeyRoute<K>>,
        max_wait: Duration,
        make: impl FnOnce(QuotaPermit, &Arc<KeyRoute<K>>) -> A,
    ) -> Result<A, KeyedError<K>> {
        // The first attempt found the share full: the wait starts, counted and timed (two clock
        // reads, only here); it ends however the timeout below ends, or with this future.
        let state = route.extra();
        state.waits.fetch_add(1, Ordering::Relaxed);
        let mut clock = WaitClock::new(&self.clock, state);
        clock.start();
        let waited = tokio::time::timeout(max_wait, route.quota().acquire()).await;
        drop(clock);
        match waited {
            Ok(Ok(permit)) => Ok(make(permit, &route)),
            Ok(Err(_closed)) => Err(self.closed(key)),
            Err(_elapsed) => Err(self.refuse(key, &route, max_wait)),
        }
    }

    /// The refusal path: count, log the key and the bound (never the request), build the error.
    #[cold]
    fn refuse(&self, key: &K, route: &KeyRoute<K>, max_wait: Duration) -> KeyedError<K> {
        route.extra().refusals.fetch_add(1, Ordering::Relaxed);
        #[cfg(feature = "metrics")]
        route.extra().metrics.refusals.increment(1);
        tracing::warn!(
            key = ?key,
            share = ?route.share(),
            max_wait = ?max_wait,
            "keyed admission refused: no blocking slot freed within the wait bound (not run, safe to retry)"
        );
        KeyedError::Refused {
            key: key.clone(),
            waited: max_wait,
            reach: Reach::NotSent,
        }
    }

    #[cold]
    fn unregistered(&self, key: &K) -> KeyedError<K> {
        KeyedError::Unregistered {
            key: key.clone(),
            reach: Reach::NotSent,
        }
    }

    #[cold]
    fn closed(&self, key: &K) -> KeyedError<K> {
        KeyedError::Closed {
            key: key.clone(),
            reach: Reach::NotSent,
        }
    }

    /// Registers a new share key with `share` slots at run time. Safe under concurrent calls:
    /// they see the registry before or after, never a mix.
    ///
    /// # Errors
    /// [`BuildError::Duplicate`], [`BuildError::InvalidShare`],
    /// [`BuildError::DoesNotFit`] (the registry is unchanged).
    pub fn register(&self, key: K, share: usize) -> Result<(), BuildError<K>> {
        let new_key = key.clone();
        self.publish(&new_key, share, |table, fixed| {
            table.add_share(Some(fixed), key, share, |key, share| {
                KeyState::new(key, share, self.name.clone())
            })
        })
    }

    /// Registers a new share key with the default share at run time; see [`Keyed::register`].
    ///
    /// # Errors
    /// As [`Keyed::register`].
    pub fn register_default(&self, key: K) -> Result<(), BuildError<K>> {
        self.register(key, self.default_share)
    }

    /// Registers `alias` at run time, drawing from the registered share `share`.
    ///
    /// # Errors
    /// [`BuildError::Duplicate`], [`BuildError::UnknownShare`] (the registry is
    /// unchanged).
    pub fn register_alias(&self, alias: K, share: K) -> Result<(), BuildError<K>> {
        let new_key = alias.clone();
        self.publish(&new_key, 0, |table, fixed| {
            table.add_alias(Some(fixed), alias, share, |alias, share| {
                KeyState::new(alias, share, self.name.clone())
            })
        })
    }

    /// Copy-on-write publication ([`Routes::publish`]): readers never wait for it. The change
    /// adds `new_key` and `slots` to the sum of shares; both are checked before anything (a
    /// quota, metric handles) is created, so a refused registration leaves no trace.
    fn publish(
        &self,
        new_key: &K,
        slots: usize,
        change: impl FnOnce(
            &mut KeyTable<K>,
            &KeyTable<K>,
        ) -> Result<(), crate::protocol::routes::TableError<K>>,
    ) -> Result<(), BuildError<K>> {
        self.routes.publish(|next, fixed| {
            if next.contains(Some(fixed), new_key) {
                return Err(BuildError::Duplicate {
                    key: new_key.clone(),
                });
            }
            check_fit(
                fixed
                    .total()
                    .saturating_add(next.total())
                    .saturating_add(slots),
                self.reserved_threads,
                self.max_blocking_threads,
            )?;
            change(next, fixed).map_err(BuildError::from)
        })
    }

    /// Closes every share: waiting calls and later calls get [`KeyedError::Closed`]; work
    /// already running finishes and frees its slot as usual. Idempotent.
    pub fn close(&self) {
        self.routes.close();
    }

    /// Whether [`Keyed::close`] was called.
    pub fn is_closed(&self) -> bool {
        self.routes.is_closed()
    }

    /// A snapshot of `key`'s statistics, or `None` for an unregistered key.
    pub fn stats_for(&self, key: &K) -> Option<KeyStats<K>> {
        self.routes
            .with_route(key, |route| route.map(|route| stats_of(key, route)))
    }

    /// A snapshot of every registered key's statistics, in registration order.
    pub fn stats(&self) -> Vec<KeyStats<K>> {
        self.routes.with_tables(|fixed, added| {
            [fixed, added]
                .into_iter()
                .flat_map(|table| table.routes().map(|(key, route)| stats_of(key, route)))
                .collect()
        })
    }

    /// The census: each distinct share key (after aliasing) with its number of slots, in
    /// registration order.
    pub fn shares(&self) -> Vec<(K, usize)> {
        self.routes.with_tables(|fixed, added| {
            let mut shares = fixed.shares().to_vec();
            shares.extend(added.shares().iter().cloned());
            shares
        })
    }

    /// The sum of all distinct shares. INVARIANT (checked at every registration):
    /// `total_shares() + reserved_threads() <= max_blocking_threads()`.
    pub fn total_shares(&self) -> usize {
        self.routes
            .with_tables(|fixed, added| fixed.total().saturating_add(added.total()))
    }

    /// The share key `key` draws from (itself for a share key), or `None` if unregistered.
    pub fn share_of(&self, key: &K) -> Option<K> {
        self.routes
            .with_route(key, |route| route.map(|route| route.share().clone()))
    }

    /// The share given to keys registered without an explicit size.
    pub fn default_share(&self) -> usize {
        self.default_share
    }

    /// The blocking pool's thread limit the shares must fit.
    pub fn max_blocking_threads(&self) -> usize {
        self.max_blocking_threads
    }

    /// Threads kept free for other blocking work.
    pub fn reserved_threads(&self) -> usize {
        self.reserved_threads
    }

    /// The clock waits are timed on ([`KeyedBuilder::clock`]).
    pub fn clock(&self) -> crate::Clock {
        crate::Clock::from_quanta(self.clock.clone())
    }
}

impl<K: Key> fmt::Debug for Keyed<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Keyed")
            .field("routes", &self.routes)
            .field("max_blocking_threads", &self.max_blocking_threads)
            .field("reserved_threads", &self.reserved_threads)
            .field("name", &self.name)
            .finish()
    }
}

/// `shares + reserved <= max_blocking_threads`, overflow counting as not fitting.
fn check_fit<K: fmt::Debug>(
    shares: usize,
    reserved: usize,
    max_blocking_threads: usize,
) -> Result<(), BuildError<K>> {
    match shares.checked_add(reserved) {
        Some(needed) if needed <= max_blocking_threads => Ok(()),
        _ => Err(BuildError::DoesNotFit {
            shares,
            reserved,
            max_blocking_threads,
        }),
    }
}

/// A granted slot of a key's share. Releases it on drop (also during a panic's unwind).
///
/// `Send + 'static`: move it into the work so the slot is held exactly as long as the work
/// runs, not as long as the caller waits. It holds no reference count on the share (the
/// share's memory lives as long as any of its slots is out, see `crate::protocol::quota`); with the
/// `metrics` feature it holds a handle on its key's in-use gauge.
#[must_use = "dropping the admission releases the slot at once"]
pub struct Admission {
    /// The share's permit; released when this drops.
    permit: QuotaPermit,
    /// The caller key's in-use gauge, incremented on admission, decremented on drop.
    #[cfg(feature = "metrics")]
    in_use: metrics::Gauge,
}

impl Admission {
    #[inline]
    fn new<K>(permit: QuotaPermit, route: &KeyRoute<K>) -> Self {
        #[cfg(feature = "metrics")]
        {
            let in_use = &route.extra().metrics.in_use;
            in_use.increment(1.0);
            Self {
                permit,
                in_use: in_use.clone(),
            }
        }
        #[cfg(not(feature = "metrics"))]
        {
            let _ = route;
            Self { permit }
        }
    }

    /// The share's number of slots.
    pub fn capacity(&self) -> usize {
        self.permit.quota().capacity()
    }

    /// Slots of the share in use now, this one included (a snapshot).
    pub fn in_use(&self) -> usize {
        self.permit.quota().in_use()
    }
}

#[cfg(feature = "metrics")]
impl Drop for Admission {
    fn drop(&mut self) {
        self.in_use.decrement(1.0);
    }
}

impl fmt::Debug for Admission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Admission")
            .field("permit", &self.permit)
            .finish()
    }
}

/// Export through the `metrics` facade: per caller key, a gauge of its calls holding a slot
/// now and a counter of its refusals, both labelled with the key and its share.
#[cfg(feature = "metrics")]
mod metrics_export {
    use std::borrow::Cow;

    use super::Key;

    /// Name of the per-key gauge of slots in use by that key's running calls.
    pub(super) const IN_USE: &str = "slotpool_keyed_in_use";
    /// Name of the per-key counter of refusals.
    pub(super) const REFUSALS: &str = "slotpool_keyed_refusals_total";
    /// Name of the per-key counter of closures that panicked.
    pub(super) const PANICS: &str = "slotpool_keyed_panics_total";
    /// Name of the per-key histogram of waits for a slot, in seconds.
    pub(super) const WAIT_SECONDS: &str = "slotpool_keyed_wait_seconds";

    /// The handles of one caller key, registered once when the key is.
    pub(super) struct RouteMetrics {
        pub(super) in_use: metrics::Gauge,
        pub(super) refusals: metrics::Counter,
        pub(super) panics: metrics::Counter,
        /// One sample per wait for a slot, labelled with the registry's name too.
        pub(super) wait_seconds: metrics::Histogram,
    }

    impl RouteMetrics {
        pub(super) fn new<K: Key>(key: &K, share: &K, pool: Cow<'static, str>) -> Self {
            let key = label(key);
            let share = label(share);
            let pool = crate::pool::wait::label(pool);
            Self {
                in_use: metrics::gauge!(IN_USE, "key" => key.clone(), "share" => share.clone()),
                refusals: metrics::counter!(REFUSALS, "key" => key.clone(), "share" => share.clone()),
                panics: metrics::counter!(PANICS, "key" => key.clone(), "share" => share.clone()),
                wait_seconds: metrics::histogram!(
                    WAIT_SECONDS,
                    "pool" => pool,
                    "key" => key,
                    "share" => share
                ),
            }
        }
    }

    /// A key's label value: its `Debug` form, without the quotes of a string key.
    fn label<K: Key>(key: &K) -> String {
        let text = format!("{key:?}");
        match text.strip_prefix('"').and_then(|t| t.strip_suffix('"')) {
            Some(inner) => inner.to_string(),
            None => text,
        }
    }
}
