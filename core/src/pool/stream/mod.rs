//! `StreamPool`: multiplexed request streams with a per-stream queue depth.
//!
//! # What it does
//!
//! Many callers share a few bidirectional streams (a gRPC bidi call, say). Each stream carries
//! up to `max_queue_depth` requests at once; the pool optionally bounds the number of streams.
//! A caller never sees a stream: [`StreamPool::acquire`] returns a [`StreamGuard`] good for
//! one request, and [`StreamGuard::send`] returns that request's response. A guard that must
//! move into a spawned task comes from [`StreamPool::acquire_owned`]: it is `'static`.
//!
//! # How
//!
//! Streams live in a `SlotTable` whose load is the stream's queue depth. Acquiring is one
//! bitmap load and one CAS on the lowest-index stream with room, so existing streams fill
//! before new ones open and high-index streams drain and can be reaped. When every stream is
//! full, the acquire claims an Empty slot (Empty → Starting, one CAS: concurrent spin-ups can
//! never exceed `max_streams`) and spawns the stream's **driver task**; the acquire returns at
//! once and other callers may join the stream while it connects (their requests queue until it
//! is ready). No lock is held anywhere on this path. With a bounded pool and every stream full,
//! the acquire waits on the table's gate (FIFO, cancel-safe).
//!
//! The driver owns the stream: it connects through the user's [`StreamConnector`], forwards
//! queued requests, and routes each response to its caller, by request id or in order as the
//! connector's [`Correlation`] says (a [`Connector`], whose messages carry ids, routes by id).
//! A request's unit of load is released **by the driver**, when the response arrives or the
//! stream ends, not when the caller's future is dropped: queue depth is exact under
//! cancellation (the reference design freed depth early there). Responses to cancelled callers
//! are discarded and counted; in order, a cancelled request keeps its place in the queue, so
//! its response is consumed in turn and never reaches the next caller. The one
//! exception is a request that was never sent: one still queued while its stream connects
//! gives its room back when its caller gives up (the driver, woken by the cancellation, frees
//! it when it next runs), so callers that give up on a stream that never opens do not make
//! the pool open more.
//!
//! # Failure model
//!
//! Every failure is a [`RequestError`] whose [`reach`](RequestError::reach) says whether the
//! request can have been applied: [`Reach::NotSent`] (a retry is safe) or
//! [`Reach::MaybeApplied`].
//!
//! * A connect failure fails every caller that joined the stream with
//!   [`RequestError::Connect`]: nothing was sent, a retry is safe.
//! * A stream error or end fails every request in flight on it with
//!   [`RequestError::StreamEnded`] and [`Reach::MaybeApplied`] (the peer may have applied it),
//!   and every request still queued with [`Reach::NotSent`].
//! * **Panics in user code.** The connector's `connect` (the call and every poll of its
//!   future), the inbound half's `poll_next` and destructor, and the request and response id
//!   accessors are called inside a guard where the driver calls them. A connect that panics
//!   fails the stream's callers with [`RequestError::Panicked`] and [`Reach::NotSent`]; an
//!   inbound half that panics fails the requests already sent with
//!   [`Reach::MaybeApplied`] and the queued ones with [`Reach::NotSent`]; a request whose id
//!   accessor panics fails alone, not sent. The panicked future or stream is never polled
//!   again, its message goes to a `tracing` error event (`place` says which user code) and
//!   to the error, and [`StreamStats::panics`] counts it. Nothing panics a second time.
//! * **Hung peers.** A stream still connecting `open_timeout` after it was started (default
//!   10 s) fails its callers with [`RequestError::OpenTimeout`] (not sent). A stream with
//!   requests outstanding that has received nothing for `stall_timeout` (default 60 s: counted
//!   from the last thing it received, or from when it went busy if later) is declared hung:
//!   its requests fail with [`RequestError::Stalled`], [`Reach::MaybeApplied`] for those sent.
//!   Both fire when their setting says, to the millisecond of tokio's timer, whatever
//!   `reap_interval` is: each stream's driver keeps its two deadlines on a timer of its own
//!   (`deadline.rs`), so no timer is armed per request and the acquire and send paths read no
//!   clock. An open timeout counts as a connect failure for the circuit breaker, a stall as a
//!   stream failure. A stream retired by either lets go at once of what it held (the connect
//!   future, or both halves of the stream), not at idle reaping, and marks itself hung first
//!   ([`Retirement`]), so that what its connector keeps for it (the `tonic` integration's
//!   client) is closed rather than reused.
//! * Whatever the failure, the slot drains and returns to Empty when its last unit of load is
//!   released; the next acquire opens a new stream there. Other streams are not disturbed.
//! * Per-request failures belong inside the response type (a status field), so one bad
//!   request never tears a stream down.
//!
//! What to configure against a hung peer: keep `open_timeout` (a peer that accepts the
//! connection and never answers the stream's opening would otherwise hold its callers until
//! they give up), set `stall_timeout` to a few times your slowest response, and bound
//! `max_streams` so that a peer that takes requests and never answers cannot make the pool
//! open a stream per `max_queue_depth` abandoned requests while the stall timeout runs. With
//! the `tonic` integration, HTTP/2 keep-alive on the endpoint also finds a dead connection.
//!
//! # Reaping, and the hung-peer backstop
//!
//! [`StreamPool::reap`] is one pass at a time `now` on the pool's clock. It retires streams
//! that have had no request in flight for at least the idle timeout (the slot table's
//! `used`-bit scheme: no clock read on the hot path), which takes **two** passes: the first
//! pass that finds a stream idle notes the time, a pass at least `idle_timeout` later closes
//! it (so a stream closes between `idle_timeout` and `idle_timeout + reap_interval` after it
//! went idle). The same pass checks the hung-peer deadlines again on the pool's clock (streams
//! past their `open_timeout`, and stalled ones: noted by one pass and declared by a later
//! one), then reopens streams up to `min_streams`. A background task calls it every
//! `reap_interval`; tests call it directly with a `Clock::mock()` clock. A reap racing
//! an acquire never closes a stream that was just reserved. A reaped stream counts against
//! `max_streams` until its driver has dropped the stream's halves: its slot stays draining,
//! with one unit of load (counted in [`TableStats::in_flight`]) held for the driver, which
//! releases it once the halves are gone; only then can another stream open in its place. Every
//! other retirement (a failure, a stall, an open timeout) is the driver's own, and it too
//! empties the slot only after the halves.
//!
//! The drivers' timers fire the hung-peer deadlines first wherever tokio's time driver runs;
//! the pass is their backstop, for what has no such timer: a runtime built without the time
//! driver (the drivers then arm none, and the deadlines fire at the first pass past them, as
//! the idle timeout does) and time driven by hand (`reap(now)` on a mock clock fires them on
//! that clock). It never fires one early: it declares a deadline only once the pool's clock
//! shows it passed.
//!
//! # Lifetimes
//!
//! [`StreamGuard`]s borrow the pool, so they cannot outlive it; [`OwnedStreamGuard`]s keep
//! only the pool's shared state, not the pool, and with no reference count of their own: the
//! room a guard holds keeps the state alive (see `crate::protocol::slots`, "Units that keep their
//! table alive"), and the state goes with the return of the last owned guard's room once the
//! pool and its drivers are gone. Dropping the pool closes its table (waiters get
//! [`AcquireError::Closed`]) and stops every driver and the reaper; no task or guard keeps a
//! dropped pool running (an owned guard's send then fails, not sent).
//!
//! This module owns stream lifecycles and the acquire path; `driver.rs` owns a stream's task
//! and its failures, `routing.rs` where its responses go (by id or in order), `builder.rs` the
//! settings. Capacity accounting is the
//! slot table's, waiting is the gate's.

use std::fmt;
use std::mem::ManuallyDrop;
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::sync::{mpsc, oneshot, watch};

use crate::error::{AcquireError, Reach, TryAcquireError};
use crate::pool::reap::nanos;
use crate::pool::wait::WaitTotal;
use crate::protocol::breaker::{Admission, Breaker};
use crate::protocol::gate::WaitState;
use crate::protocol::slots::{Generation, Handover, Phase, Reservation, SlotTable, Windows};
use crate::sync::{spin, Arc, AtomicU64, AtomicUsize, Counter, Mutex, Ordering, Published};

mod builder;
mod connector;
mod deadline;
mod driver;
mod guard;
mod routing;

/// The parts of [`StreamStats`]: the slot table's counts, and the breaker's state.
pub use crate::protocol::breaker::BreakerState;
pub use crate::protocol::slots::TableStats;
pub use builder::{StreamPoolBuilder, MAX_MIN_STREAMS};
pub use connector::*;
use driver::{Driver, Refusal};
pub use guard::*;

/// A snapshot of a pool's state and counters.
///
/// Every [`StreamGuard::send`] ends as exactly one of `completed`, `failed` or `cancelled`;
/// a guard dropped unsent is none of them (its room goes back at once).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct StreamStats {
    /// Streams by phase, requests in flight (reserved or sent), tasks waiting.
    pub table: TableStats,
    /// Acquires that returned a guard.
    pub acquires: u64,
    /// Acquires that had to wait for capacity (including those that timed out or were
    /// dropped while waiting).
    pub waits: u64,
    /// The time those acquires spent waiting, in all, on the pool's clock: from their first
    /// poll that found no room to room, the pool's close, or the caller giving up (bb8's
    /// `get_wait_time`; the mean wait is `wait_time / waits`). An acquire that finds room at
    /// once reads no clock and adds nothing. With the `metrics` feature each wait is also a
    /// sample of the histogram `slotpool_stream_wait_seconds`, labelled with the pool's
    /// [`name`](StreamPoolBuilder::name).
    pub wait_time: Duration,
    /// Requests answered: the caller got its response.
    pub completed: u64,
    /// Requests that ended with a [`RequestError`] returned to the caller.
    pub failed: u64,
    /// Requests whose caller stopped waiting (dropped the `send` future) before the outcome.
    pub cancelled: u64,
    /// Streams started.
    pub spin_ups: u64,
    /// Streams that failed to open: a connect error, a connect that panicked, or one past its
    /// `open_timeout`.
    pub connect_failures: u64,
    /// Open streams that failed or ended: an error, an end, an inbound half that panicked, or
    /// a stall.
    pub stream_failures: u64,
    /// Panics of user code contained (connector, inbound half and its destructor, request and
    /// response id accessors).
    pub panics: u64,
    /// Streams failed because they had not opened within `open_timeout` (also counted in
    /// `connect_failures`).
    pub open_timeouts: u64,
    /// Streams declared hung after `stall_timeout` without a response (also counted in
    /// `stream_failures`).
    pub stalls: u64,
    /// Streams closed by the reaper.
    pub reaps: u64,
    /// Responses whose caller had gone (cancelled); discarded.
    pub late_responses: u64,
    /// Responses no request was waiting for; discarded. By id: an id no request on the stream
    /// carries. In order: a response with nothing outstanding, which also closes the stream
    /// (see [`Correlation::InOrder`]).
    pub unknown_responses: u64,
    /// Acquires refused because the circuit breaker was open.
    pub breaker_rejections: u64,
    /// The circuit breaker's state.
    pub breaker: BreakerState,
}

/// A pool of multiplexed request streams. See the [module documentation](self).
///
/// ```
/// # use std::{convert::Infallible, pin::Pin, task::{Context, Poll}};
/// # use slotpool::stream::*;
/// # use futures_core::Stream;
/// // An in-process echo "server": every request comes straight back as its response.
/// #[derive(Debug)]
/// struct Echo { id: Option<u64>, body: u32 }
/// impl StreamRequest for Echo {
///     fn request_id(&self) -> Option<u64> { self.id }
///     fn set_request_id(&mut self, id: u64) { self.id = Some(id) }
/// }
/// impl StreamResponse for Echo {
///     fn request_id(&self) -> u64 { self.id.unwrap_or(0) }
/// }
/// struct EchoInbound(Outbound<Echo>);
/// impl Stream for EchoInbound {
///     type Item = Result<Echo, Infallible>;
///     fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
///         Pin::new(&mut self.0).poll_next(cx).map(|r| r.map(Ok))
///     }
/// }
/// struct EchoConnector;
/// impl Connector for EchoConnector {
///     type Request = Echo;
///     type Response = Echo;
///     type Error = Infallible;
///     type Inbound = EchoInbound;
///     async fn connect(&self, outbound: Outbound<Echo>) -> Result<EchoInbound, Infallible> {
///         Ok(EchoInbound(outbound))
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let pool = StreamPool::builder(EchoConnector).max_streams(4).max_queue_depth(8).build()?;
/// let guard = pool.acquire().await?;
/// let response = guard.send(Echo { id: None, body: 7 }).await?;
/// assert_eq!(response.body, 7);
///
/// // Shared by spawned tasks: an `Arc` and owned guards.
/// let pool = std::sync::Arc::new(pool);
/// let tasks: Vec<_> = (0..4)
///     .map(|body| {
///         let pool = std::sync::Arc::clone(&pool);
///         tokio::spawn(async move {
///             let guard = pool.acquire_owned().await?;
///             let response = guard.send(Echo { id: None, body }).await?;
///             Ok::<u32, Box<dyn std::error::Error + Send + Sync>>(response.body)
///         })
///     })
///     .collect();
/// for (body, task) in tasks.into_iter().enumerate() {
///     assert_eq!(task.await?.map_err(|e| e.to_string())?, body as u32);
/// }
/// # Ok(()) }
/// ```
pub struct StreamPool<C: StreamConnector> {
    /// Taken by the drop, which parks it in the table while owned guards are out.
    shared: ManuallyDrop<Arc<Shared<C>>>,
    reaper: Option<tokio::task::AbortHandle>,
}

/// State shared by the pool handle, its drivers and its reaper.
struct Shared<C: StreamConnector> {
    /// Streams: load = requests reserved or in flight on the stream.
    table: SlotTable<StreamCell<C>>,
    connector: C,
    runtime: Handle,
    /// Set to `true` when the pool is dropped; every driver watches it.
    shutdown: watch::Sender<bool>,
    clock: quanta::Clock,
    /// Time zero for the table's nanosecond idle stamps.
    base: quanta::Instant,
    idle_timeout: Duration,
    /// How long a stream may take to open; `None`: for ever.
    open_timeout: Option<Duration>,
    /// How long a stream with requests outstanding may receive nothing; `None`: for ever.
    stall_timeout: Option<Duration>,
    /// The runtime has tokio's time driver: each driver arms its own open and stall timers
    /// (`deadline.rs`). Without it only the reaper's pass checks them.
    timers: bool,
    counters: Counters,
    /// Consulted only when a reservation claims a slot (a spin-up).
    breaker: Breaker,
    /// Streams kept open however idle (prewarm).
    min_streams: usize,
    /// The owned guards' release windows: the last reference's drop waits for them (see
    /// `slots`, "Units that keep their table alive").
    windows: Windows,
}

impl<C: StreamConnector> Drop for Shared<C> {
    fn drop(&mut self) {
        // Nothing can open a window now (no unit is out that keeps this state alive), but a
        // release that did not see the orphan bit may still be inside the table.
        self.windows.wait_closed();
    }
}

/// The pool's counters (see [`StreamStats`]). Only `acquires` is bumped on the acquire path
/// (and, for an acquire that waits, `waits` and `wait_nanos`); the request outcomes are counted
/// by `send`, the rest by drivers and the reaper.
#[derive(Debug)]
struct Counters {
    acquires: Counter,
    waits: Counter,
    /// The time acquires waited, and the `slotpool_stream_wait_seconds` histogram.
    wait_nanos: WaitTotal,
    completed: Counter,
    failed: Counter,
    cancelled: Counter,
    spin_ups: Counter,
    connect_failures: Counter,
    stream_failures: Counter,
    panics: Counter,
    open_timeouts: Counter,
    stalls: Counter,
    reaps: Counter,
    late_responses: Counter,
    unknown_responses: Counter,
    breaker_rejections: Counter,
}

impl Counters {
    /// Zero counters of the pool called `name` (the wait histogram's label).
    fn new(name: std::borrow::Cow<'static, str>) -> Self {
        Self {
            acquires: Counter::new(),
            waits: Counter::new(),
            wait_nanos: WaitTotal::new("slotpool_stream_wait_seconds", name),
            completed: Counter::new(),
            failed: Counter::new(),
            cancelled: Counter::new(),
            spin_ups: Counter::new(),
            connect_failures: Counter::new(),
            stream_failures: Counter::new(),
            panics: Counter::new(),
            open_timeouts: Counter::new(),
            stalls: Counter::new(),
            reaps: Counter::new(),
            late_responses: Counter::new(),
            unknown_responses: Counter::new(),
            breaker_rejections: Counter::new(),
        }
    }
}

/// Per-slot data: the current incarnation's request queue.
struct StreamCell<C: StreamConnector> {
    /// INVARIANT: while a slot is Starting, Ready or Draining with generation `g`, this holds
    /// the incarnation of generation `g`, except in the instant between the claiming CAS and
    /// the claimer's store (joiners spin through that window, see `StreamGuard::send`).
    current: Published<Option<Arc<Incarnation<C>>>>,
}

impl<C: StreamConnector> Default for StreamCell<C> {
    fn default() -> Self {
        Self {
            current: Published::new(None),
        }
    }
}

/// One stream's lifetime in one slot.
struct Incarnation<C: StreamConnector> {
    generation: Generation,
    /// Requests for the driver. Closed by the driver when the stream ends, after which a send
    /// fails as not sent.
    requests: mpsc::UnboundedSender<Pending<C>>,
    /// Wakes the driver when a reason to stop is set in `stop_reasons`.
    stop: tokio::sync::Notify,
    /// Why the driver must stop, as bits ([`Stop`]); set before `stop` is notified, so that the
    /// driver can tell with one load, on every wake-up, whether it must stop, and poll `stop`'s
    /// future (which takes the Notify's lock) only to register its waker. `OPENED` and
    /// `OPEN_TIMED_OUT` exclude each other: whichever of the driver (connect done) and the
    /// reaper's backstop (deadline passed on the pool's clock) sets its bit first decides how
    /// the opening ended. (The driver's own open timer needs no bit: the driver decides.)
    stop_reasons: AtomicUsize,
    /// Why the driver stopped taking requests, for callers whose request arrives after it did.
    /// Written once, before the request channel closes.
    refusal: Mutex<Option<Refusal<C::Error>>>,
    /// When the stream was started, in the pool's nanoseconds (for the reaper's `open_timeout`
    /// backstop; the driver's timer has its own deadline on tokio's clock).
    started: u64,
    /// Driver-written: `progress << 1 | busy`, where `busy` says requests are outstanding on
    /// the wire and `progress` counts wake-ups that received something. Read by the reaper's
    /// stall check (the backstop).
    activity: AtomicU64,
    /// Reaper-only: the `activity` the last pass saw, and since when (pool nanoseconds) it
    /// has been seen unchanged and busy.
    stall_seen: AtomicU64,
    stall_since: AtomicU64,
    /// The unit a reaper's pass keeps on the slot while the stream closes (the slot counts
    /// against `max_streams` until the driver has let go of the stream's halves): parked here
    /// by the reaper, released by the driver's [`finish`](Driver), or by the reaper if the
    /// driver finished first.
    reaped_unit: Handover,
}

/// The bits of [`Incarnation::stop_reasons`].
struct Stop;

impl Stop {
    /// The driver's connect finished first (set by the driver).
    const OPENED: usize = 1;
    /// The reaper found the stream still opening past `open_timeout` first.
    const OPEN_TIMED_OUT: usize = 2;
    /// The reaper retired the idle slot.
    const REAPED: usize = 4;
    /// The reaper found the stream stalled.
    const STALLED: usize = 8;
}

/// The `busy` bit of [`Incarnation::activity`].
const BUSY: u64 = 1;

impl<C: StreamConnector> Incarnation<C> {
    fn new(generation: Generation, requests: mpsc::UnboundedSender<Pending<C>>, now: u64) -> Self {
        Incarnation {
            generation,
            requests,
            stop: tokio::sync::Notify::new(),
            stop_reasons: AtomicUsize::new(0),
            refusal: Mutex::new(None),
            started: now,
            activity: AtomicU64::new(0),
            stall_seen: AtomicU64::new(u64::MAX),
            stall_since: AtomicU64::new(0),
            reaped_unit: Handover::new(),
        }
    }

    /// Asks the driver to stop (the reaper retired the slot, or found it stalled).
    fn request_stop(&self, reason: usize) {
        // Release: pairs with the driver's Acquire load; the Notify wakes it.
        self.stop_reasons.fetch_or(reason, Ordering::AcqRel);
        self.stop.notify_one();
    }

    fn stop_reasons(&self) -> usize {
        self.stop_reasons.load(Ordering::Acquire)
    }

    /// The reaper's half of the opening race: marks the stream timed out unless its connect
    /// already finished. Returns whether it did (and then wakes the driver).
    fn time_out_open(&self) -> bool {
        let won = self
            .stop_reasons
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |reasons| {
                (reasons & (Stop::OPENED | Stop::OPEN_TIMED_OUT) == 0)
                    .then_some(reasons | Stop::OPEN_TIMED_OUT)
            })
            .is_ok();
        if won {
            self.stop.notify_one();
        }
        won
    }

    /// The driver's half: marks the connect finished. Returns `false` if the reaper timed the
    /// opening out first (the stream must not serve).
    fn opened(&self) -> bool {
        self.stop_reasons.fetch_or(Stop::OPENED, Ordering::AcqRel) & Stop::OPEN_TIMED_OUT == 0
    }

    /// The reaper's stall check at `now`: returns whether the stream has been busy with
    /// nothing received since a pass at least `timeout` ago (and then tells the driver).
    ///
    /// A pass that finds the stream idle, or finds its `activity` changed, restarts the count
    /// from `now`. An unchanged busy `activity` across passes means the stream was busy and
    /// silent for the whole time between them: nothing received (that bumps `progress`), and
    /// never idle in between (requests leave the wire only by a response, which is received,
    /// or with the stream itself).
    fn check_stall(&self, now: u64, timeout: u64) -> bool {
        let activity = self.activity.load(Ordering::Acquire);
        let seen = self.stall_seen.swap(activity, Ordering::Relaxed);
        if activity & BUSY == 0 || activity != seen {
            self.stall_since.store(now, Ordering::Relaxed);
            return false;
        }
        if now.saturating_sub(self.stall_since.load(Ordering::Relaxed)) < timeout {
            return false;
        }
        self.request_stop(Stop::STALLED);
        true
    }
}

/// A request handed to a driver, with its caller's reply channel and unit of load.
struct Pending<C: StreamConnector> {
    request: C::Request,
    reply: oneshot::Sender<Result<C::Response, RequestError<C::Error>>>,
    reservation: Reservation,
}

impl<C: StreamConnector> StreamPool<C> {
    /// Starts configuring a pool over `connector`.
    pub fn builder(connector: C) -> StreamPoolBuilder<C> {
        StreamPoolBuilder::new(connector)
    }

    /// Waits for room on a stream and returns a guard good for one request.
    ///
    /// Cancel-safe: dropping the future before it resolves takes nothing (a wake-up it had
    /// received passes on). A stream it started on the way keeps starting for other callers.
    pub fn acquire(&self) -> Acquire<'_, C> {
        Acquire {
            pool: self,
            wait: WaitState::new(),
            waiting_since: None,
        }
    }

    /// [`StreamPool::acquire`] returning a guard that keeps the pool's shared state alive
    /// instead of borrowing the pool, so it is `'static` and can move into a spawned task
    /// (its room keeps the state: no reference count per guard). Only the guard is `'static`: the future borrows the pool, as
    /// [`StreamPool::acquire`]'s does, so a caller holds no handle of its own for the wait (no
    /// `Arc` clone per call; to spawn the wait itself, move an `Arc` of the pool into the task
    /// and call this there).
    ///
    /// Cancel-safe: dropping the future before it resolves takes nothing (it has a single
    /// await, the acquire's).
    ///
    /// # Errors
    /// As [`StreamPool::acquire`].
    pub async fn acquire_owned(&self) -> Result<OwnedStreamGuard<C>, AcquireError> {
        let guard = self.acquire().await?;
        Ok(guard.into_owned(&self.shared))
    }

    /// [`StreamPool::try_acquire`] returning an owned guard (see
    /// [`StreamPool::acquire_owned`]).
    ///
    /// # Errors
    /// As [`StreamPool::try_acquire`].
    pub fn try_acquire_owned(&self) -> Result<OwnedStreamGuard<C>, TryAcquireError> {
        Ok(self.try_acquire()?.into_owned(&self.shared))
    }

    /// Returns a guard if a stream has room now (or a new stream can be started), without
    /// waiting.
    ///
    /// # Errors
    /// [`TryAcquireError::NoCapacity`] when every stream of a bounded pool is full,
    /// [`TryAcquireError::Closed`] once the pool is closed, [`TryAcquireError::Unavailable`]
    /// when a new stream is needed and the circuit breaker is open.
    #[inline(always)]
    pub fn try_acquire(&self) -> Result<StreamGuard<'_, C>, TryAcquireError> {
        // The uncontended case inlined (as in `Acquire::poll`), the rest out of line.
        if let Some(reservation) = self.shared.table.reserve_fast() {
            return self
                .admit(reservation)
                .map_err(|retry_after| TryAcquireError::Unavailable { retry_after });
        }
        self.try_acquire_full()
    }

    #[inline(never)]
    fn try_acquire_full(&self) -> Result<StreamGuard<'_, C>, TryAcquireError> {
        let reservation = self.shared.table.try_reserve_slow()?;
        self.admit(reservation)
            .map_err(|retry_after| TryAcquireError::Unavailable { retry_after })
    }

    /// [`StreamPool::acquire`] with a deadline `timeout` from now.
    ///
    /// Cancel-safe as [`StreamPool::acquire`]: a drop at its one await takes nothing.
    ///
    /// # Errors
    /// [`AcquireError::Timeout`] if no room appears in time (nothing was reserved),
    /// [`AcquireError::Closed`] if the pool closes first.
    pub async fn acquire_timeout(
        &self,
        timeout: Duration,
    ) -> Result<StreamGuard<'_, C>, AcquireError> {
        match tokio::time::timeout(timeout, self.acquire()).await {
            Ok(result) => result,
            Err(_) => Err(AcquireError::Timeout { waited: timeout }),
        }
    }

    /// [`StreamPool::acquire`] with an absolute deadline.
    ///
    /// Cancel-safe as [`StreamPool::acquire`]: a drop at its one await takes nothing.
    ///
    /// # Errors
    /// As [`StreamPool::acquire_timeout`].
    pub async fn acquire_until(
        &self,
        deadline: tokio::time::Instant,
    ) -> Result<StreamGuard<'_, C>, AcquireError> {
        let waited = deadline.saturating_duration_since(tokio::time::Instant::now());
        match tokio::time::timeout_at(deadline, self.acquire()).await {
            Ok(result) => result,
            Err(_) => Err(AcquireError::Timeout { waited }),
        }
    }

    /// Turns a reservation into a guard, starting the stream if the reservation claimed a
    /// slot and the breaker allows it; otherwise undoes the claim and reports how long until
    /// the breaker lets a probe through.
    #[inline]
    fn admit(&self, reservation: Reservation) -> Result<StreamGuard<'_, C>, Duration> {
        if reservation.claimed() {
            self.admit_claimed(reservation)?;
        }
        Ok(self.guard(reservation))
    }

    /// The guard of a reservation that claimed nothing (or whose claim was admitted), counted
    /// as an acquire.
    #[inline(always)]
    fn guard(&self, reservation: Reservation) -> StreamGuard<'_, C> {
        self.shared.counters.acquires.incr();
        StreamGuard {
            shared: &self.shared,
            reservation: Some(reservation),
        }
    }

    /// The spin-up half of [`StreamPool::admit`], kept out of the hot path.
    #[inline(never)]
    fn admit_claimed(&self, reservation: Reservation) -> Result<(), Duration> {
        let shared = &self.shared;
        match shared
            .breaker
            .admit(|| shared.now_nanos(shared.clock.now()))
        {
            Ok(admission) => {
                shared.spin_up(reservation, admission == Admission::Probe);
                Ok(())
            }
            Err(retry_after) => {
                // Nobody may use this incarnation: drain it (joiners see Draining and fail as
                // not sent) and give back our unit, which empties it.
                shared
                    .table
                    .begin_drain(reservation.index(), reservation.generation());
                shared.table.release(reservation);
                shared.counters.breaker_rejections.incr();
                Err(Duration::from_nanos(retry_after))
            }
        }
    }

    /// One reaper pass at `now` on the pool's clock (what the background reaper runs every
    /// `reap_interval`). Returns how many idle streams it closed.
    ///
    /// One pass:
    /// * closes every stream that a **previous** pass found idle (nothing in flight, no
    ///   acquire since) at least `idle_timeout` before `now`, and notes the time for streams
    ///   it finds newly idle. Idle time is tracked without a clock on the acquire path, so a
    ///   single pass never closes a stream it had not seen idle before: after
    ///   `reap(t0)`, `reap(t0 + idle_timeout)` closes what was idle at `t0`, while a lone
    ///   `reap(t0 + idle_timeout + 1 s)` only notes it (the background reaper's passes follow
    ///   one another, so a stream closes between `idle_timeout` and `idle_timeout +
    ///   reap_interval` after it went idle);
    /// * fails every stream still opening `open_timeout` after it was started (its callers get
    ///   [`RequestError::OpenTimeout`]);
    /// * declares hung every stream that has had requests outstanding and received nothing
    ///   since a previous pass at least `stall_timeout` before `now` (its requests fail with
    ///   [`RequestError::Stalled`]);
    /// * reopens streams up to `min_streams`.
    ///
    /// The two hung-peer checks are a backstop: each stream's driver fires the same deadlines
    /// on tokio's timer when they pass (see the [module documentation](self)), so a pass finds
    /// them to do only where there is no such timer (a runtime without tokio's time driver) or
    /// where the pool's clock is driven by hand, ahead of tokio's.
    ///
    /// Failing a stream is done by its driver task, so its callers see the error once that
    /// task runs.
    pub fn reap(&self, now: crate::Instant) -> usize {
        self.shared.reap(now.0)
    }

    /// A snapshot of the pool's state and counters.
    pub fn stats(&self) -> StreamStats {
        let c = &self.shared.counters;
        StreamStats {
            table: self.shared.table.stats(),
            acquires: c.acquires.get(),
            waits: c.waits.get(),
            wait_time: c.wait_nanos.time(),
            completed: c.completed.get(),
            failed: c.failed.get(),
            cancelled: c.cancelled.get(),
            spin_ups: c.spin_ups.get(),
            connect_failures: c.connect_failures.get(),
            stream_failures: c.stream_failures.get(),
            panics: c.panics.get(),
            open_timeouts: c.open_timeouts.get(),
            stalls: c.stalls.get(),
            reaps: c.reaps.get(),
            late_responses: c.late_responses.get(),
            unknown_responses: c.unknown_responses.get(),
            breaker_rejections: c.breaker_rejections.get(),
            breaker: self.shared.breaker.state(),
        }
    }

    /// Closes the pool: waiters and later acquires get `Closed`; requests already in flight
    /// complete. Streams close as they go idle and are reaped, or when the pool is dropped.
    pub fn close(&self) {
        self.shared.table.close();
    }

    /// Whether [`StreamPool::close`] was called.
    pub fn is_closed(&self) -> bool {
        self.shared.table.is_closed()
    }

    /// The clock the pool measures idle time with.
    pub fn clock(&self) -> crate::Clock {
        crate::Clock::from_quanta(self.shared.clock.clone())
    }
}

impl<C: StreamConnector> Drop for StreamPool<C> {
    fn drop(&mut self) {
        self.shared.table.close();
        self.shared.shutdown.send_replace(true);
        if let Some(reaper) = &self.reaper {
            reaper.abort();
        }
        // SAFETY: taken once, here; the field is not used again.
        let shared = unsafe { ManuallyDrop::take(&mut self.shared) };
        let table: *const SlotTable<StreamCell<C>> = &shared.table;
        // Owned guards hold no reference count: their units keep the state alive, and the
        // release of the last one drops this reference (or it is dropped here if none is
        // out). SAFETY: `shared` is alive until `orphan` parks it, and parked until
        // `orphan` has returned (the lock keeps every release from taking it before).
        drop(unsafe { &*table }.orphan(Box::new(shared)));
    }
}

impl<C: StreamConnector> fmt::Debug for StreamPool<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StreamPool")
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl<C: StreamConnector> Shared<C> {
    /// The claimer's half of spin-up: publish the incarnation, then spawn its driver. Runs in
    /// the acquiring caller's poll with no lock held.
    fn spin_up(self: &Arc<Self>, reservation: Reservation, probe: bool) {
        let (tx, rx) = mpsc::unbounded_channel();
        let started = self.now_nanos(self.clock.now());
        let open_deadline = deadline::open_deadline(self.open_timeout, self.timers);
        let incarnation = Arc::new(Incarnation::new(reservation.generation(), tx, started));
        self.table.with_slot(reservation.index(), |slot| {
            let current = &slot.data().current;
            // The slot was Empty, so the incarnation it held before has ended and its driver
            // has let go (a reaped slot empties only when its driver releases the unit the
            // reaper kept). Asking it to stop again costs nothing and keeps a driver from
            // idling forever should a slot ever empty under a live one. Only a slot's claimer
            // stores here, so nothing comes between this read and the store.
            current.with(|previous| {
                if let Some(previous) = previous {
                    previous.request_stop(Stop::REAPED);
                }
            });
            current.store(Arc::new(Some(Arc::clone(&incarnation))));
        });
        self.counters.spin_ups.incr();
        tracing::debug!(slot = reservation.index(), "stream spin-up");
        Driver::spawn(self, reservation, incarnation, rx, probe, open_deadline);
    }

    fn now_nanos(&self, now: quanta::Instant) -> u64 {
        nanos(now.saturating_duration_since(self.base))
    }

    /// Opens streams until `min_streams` are live (prewarm, and replacing failed ones). A
    /// prewarmed stream holds no load: the claim's unit is given back at once.
    fn top_up(self: &Arc<Self>) {
        if self.min_streams == 0 {
            return;
        }
        let stats = self.table.stats();
        let live = stats.slots - stats.empty;
        for _ in live..self.min_streams {
            let Some(reservation) = self.table.try_claim_vacant() else {
                return;
            };
            if !reservation.claimed() {
                self.table.release(reservation);
                return;
            }
            match self.breaker.admit(|| self.now_nanos(self.clock.now())) {
                Ok(admission) => self.spin_up(reservation, admission == Admission::Probe),
                Err(_) => {
                    self.table
                        .begin_drain(reservation.index(), reservation.generation());
                    self.table.release(reservation);
                    return;
                }
            }
            self.table.release(reservation);
        }
    }

    fn reap(self: &Arc<Self>, now: quanta::Instant) -> usize {
        let now_nanos = self.now_nanos(now);
        let timeout = nanos(self.idle_timeout);
        let mut reaped = 0;
        // The retired slot keeps one unit until the driver has let go of the stream (no
        // claim can open another stream in its place while this one closes); the unit goes
        // to the driver, which releases it once the halves are dropped.
        let mut orphans = Vec::new();
        self.table
            .reap_idle_holding(now_nanos, timeout, self.min_streams, |unit, cell| {
                reaped += 1;
                let orphan = cell.current.with(|current| match current {
                    // A Ready slot's cell holds its incarnation: the claimer stored it before
                    // the driver marked the slot Ready, and no claim comes in before the unit
                    // is released.
                    Some(incarnation) if incarnation.generation == unit.generation() => {
                        let back = incarnation.reaped_unit.hold(unit);
                        incarnation.request_stop(Stop::REAPED);
                        back
                    }
                    _ => Some(unit),
                });
                orphans.extend(orphan);
            });
        // Units whose driver had let go already: nothing is left open, the slot may empty.
        for unit in orphans {
            self.table.release(unit);
        }
        if reaped > 0 {
            self.counters.reaps.add(reaped as u64);
            tracing::debug!(reaped, "reaped idle streams");
        }
        self.check_hung(now_nanos);
        self.top_up();
        reaped
    }

    /// The hung-peer backstop of a reaper pass at `now` (pool nanoseconds): tells the driver
    /// of every stream still opening past `open_timeout`, and of every stream stalled past
    /// `stall_timeout`, to fail it (the drivers' own timers usually have: module docs). Reads each live slot's word and incarnation; takes no
    /// lock and changes no slot (the drivers do).
    fn check_hung(&self, now: u64) {
        let open = self.open_timeout.map(nanos);
        let stall = self.stall_timeout.map(nanos);
        if open.is_none() && stall.is_none() {
            return;
        }
        self.table.for_each_slot(|_, slot| {
            let word = slot.word();
            let (phase, generation) = (word.phase(), word.generation());
            if !phase.accepts_reservations() {
                return;
            }
            slot.data().current.with(|current| {
                let Some(incarnation) = current.as_ref() else {
                    return;
                };
                if incarnation.generation != generation {
                    return;
                }
                // The driver logs and counts what it then does.
                match (phase, open, stall) {
                    (Phase::Starting, Some(timeout), _)
                        if now.saturating_sub(incarnation.started) >= timeout =>
                    {
                        incarnation.time_out_open();
                    }
                    (Phase::Ready, _, Some(timeout)) => {
                        incarnation.check_stall(now, timeout);
                    }
                    _ => {}
                }
            });
        });
    }
}

/// Counts how a send ended: completed, failed, or (dropped before either) cancelled.
struct Tally<'a> {
    counters: &'a Counters,
    settled: bool,
}

impl<'a> Tally<'a> {
    fn new(counters: &'a Counters) -> Self {
        Tally {
            counters,
            settled: false,
        }
    }

    fn settle<T, E>(mut self, result: Result<T, E>) -> Result<T, E> {
        self.settled = true;
        match &result {
            Ok(_) => self.counters.completed.incr(),
            Err(_) => self.counters.failed.incr(),
        }
        result
    }
}

impl Drop for Tally<'_> {
    fn drop(&mut self) {
        if !self.settled {
            self.counters.cancelled.incr();
        }
    }
}

/// The send of both guards: hands `request` with the unit in `held` to its stream's driver and
/// waits for the answer. `held` stays the guard's until the driver has the request, so a drop
/// before that gives the room back through the guard's `Drop`.
async fn send_on<C: StreamConnector>(
    shared: &Shared<C>,
    held: &mut Option<Reservation>,
    request: C::Request,
) -> Result<C::Response, RequestError<C::Error>> {
    let tally = Tally::new(&shared.counters);
    let Some(reservation) = *held else {
        return tally.settle(Err(RequestError::Closed));
    };
    let (reply, response) = oneshot::channel();
    let mut pending = Pending {
        request,
        reply,
        reservation,
    };
    let mut spins = 0u32;
    loop {
        match offer(shared, reservation, pending) {
            Offer::Sent => break,
            // The driver has stopped taking requests: the stream failed to open, or ended,
            // before we got in. Nothing was sent either way; our unit of load is still in
            // `held`, and dropping the guard gives it back.
            Offer::Refused(refusal) => {
                return tally.settle(Err(refusal.map_or(
                    RequestError::StreamEnded {
                        reach: Reach::NotSent,
                        source: None,
                    },
                    |refusal| refusal.error(Reach::NotSent),
                )))
            }
            Offer::Gone => {
                return tally.settle(Err(RequestError::StreamEnded {
                    reach: Reach::NotSent,
                    source: None,
                }))
            }
            Offer::Unpublished(returned) => pending = returned,
        }
        // Our unit of load keeps the incarnation alive, so it can only be unpublished yet
        // (a claimer's CAS comes just before its publication), unless its claimer was
        // refused by the breaker and drained it unpublished.
        match shared.table.word(reservation.index()) {
            Some(word)
                if word.generation() == reservation.generation()
                    && word.phase().accepts_reservations() => {}
            _ => {
                return tally.settle(Err(RequestError::StreamEnded {
                    reach: Reach::NotSent,
                    source: None,
                }))
            }
        }
        spins += 1;
        if spins < 64 {
            spin();
        } else {
            tokio::task::yield_now().await;
        }
    }
    // The driver owns the unit of load now. No await since the send.
    *held = None;
    tally.settle(match response.await {
        Ok(result) => result,
        // The driver was stopped (pool dropped) with our request in its hands.
        Err(_) => Err(RequestError::StreamEnded {
            reach: Reach::MaybeApplied,
            source: None,
        }),
    })
}

/// What became of a request offered to a reservation's incarnation.
enum Offer<C: StreamConnector> {
    /// Queued for the driver, which owns its unit of load from now on.
    Sent,
    /// The driver stopped taking requests (with why, if it said).
    Refused(Option<Refusal<C::Error>>),
    /// The incarnation is not published yet: the request comes back to be offered again.
    Unpublished(Pending<C>),
    /// The slot is gone (the request was dropped with nothing sent).
    Gone,
}

/// Hands `pending` to the driver of the incarnation `reservation` belongs to, reading the slot
/// cell in place: no reference count is taken on the incarnation, which every caller on the
/// stream would otherwise bump and drop (one contended cache line per request).
fn offer<C: StreamConnector>(
    shared: &Shared<C>,
    reservation: Reservation,
    pending: Pending<C>,
) -> Offer<C> {
    shared
        .table
        .with_slot(reservation.index(), move |slot| {
            slot.data().current.with(move |current| match current {
                Some(incarnation) if incarnation.generation == reservation.generation() => {
                    match incarnation.requests.send(pending) {
                        Ok(()) => Offer::Sent,
                        Err(_) => Offer::Refused(incarnation.refusal.lock().clone()),
                    }
                }
                _ => Offer::Unpublished(pending),
            })
        })
        .unwrap_or(Offer::Gone)
}
