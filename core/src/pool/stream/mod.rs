//! `StreamPool`: multiplexed request streams with a per-stream queue depth.
//!
//! # What it does
//!
//! Many callers share a few bidirectional streams (a gRPC bidi call, say). Each stream carries
//! up to `max_queue_depth` requests at once; the pool optionally bounds the number of streams.
//! A caller never sees a stream: [`StreamPool::acquire`] returns a [`StreamGuard`] good for
//! one request, and [`StreamGuard::send`] returns that request's response.
//!
//! # How
//!
//! Streams live in a [`SlotTable`] whose load is the stream's queue depth. Acquiring is one
//! bitmap load and one CAS on the lowest-index stream with room, so existing streams fill
//! before new ones open and high-index streams drain and can be reaped. When every stream is
//! full, the acquire claims an Empty slot (Empty → Starting, one CAS: concurrent spin-ups can
//! never exceed `max_streams`) and spawns the stream's **driver task**; the acquire returns at
//! once and other callers may join the stream while it connects (their requests queue until it
//! is ready). No lock is held anywhere on this path. With a bounded pool and every stream full,
//! the acquire waits on the table's gate (FIFO, cancel-safe).
//!
//! The driver owns the stream: it connects through the user's [`Connector`], forwards queued
//! requests, and routes each response to its caller by request id. A request's unit of load
//! is released **by the driver**, when the response arrives or the stream ends, not when the
//! caller's future is dropped: queue depth is exact under cancellation (the reference design
//! freed depth early there). Responses to cancelled callers are discarded and counted.
//!
//! # Failure model
//!
//! * A connect failure fails every caller that joined the stream with
//!   [`RequestError::Connect`]: nothing was sent ([`Reach::NotSent`]), a retry is safe.
//! * A stream error or end fails every request in flight on it with
//!   [`RequestError::StreamEnded`] and [`Reach::MaybeApplied`] (the peer may have applied it),
//!   and every request still queued with [`Reach::NotSent`].
//! * Either way the slot drains and returns to Empty when its last unit of load is released;
//!   the next acquire opens a new stream. Other streams are not disturbed.
//! * Per-request failures belong inside the response type (a status field), so one bad
//!   request never tears a stream down.
//!
//! # Idle reaping
//!
//! [`StreamPool::reap`] retires streams that have had no request in flight for at least the
//! idle timeout (the slot table's `used`-bit scheme: no clock read on the hot path). A
//! background task calls it every `reap_interval`; tests call it directly with a
//! `quanta::Clock::mock()` clock. A reap racing an acquire never closes a stream that was just
//! reserved.
//!
//! # Lifetimes
//!
//! Guards borrow the pool, so they cannot outlive it. Dropping the pool closes its table
//! (waiters get [`AcquireError::Closed`]) and stops every driver and the reaper; no task keeps
//! a dropped pool alive.
//!
//! This module owns stream lifecycles and the acquire path; `driver.rs` owns a stream's task
//! and request routing, `builder.rs` the settings. Capacity accounting is the slot table's,
//! waiting is the gate's.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_core::Stream;
use tokio::runtime::Handle;
use tokio::sync::{mpsc, oneshot, watch};

use crate::breaker::{Admission, Breaker, BreakerState};
use crate::error::{AcquireError, Reach, TryAcquireError};
use crate::gate::WaitState;
use crate::pool::reap::nanos;
use crate::slots::{Generation, Reservation, SlotTable, TableStats};
use crate::sync::{spin, Arc, AtomicBool, Counter, Mutex, Ordering, Published};

mod builder;
mod driver;

pub use builder::StreamPoolBuilder;
use driver::Driver;

/// Opens one bidirectional stream of requests and responses.
///
/// The shape follows a gRPC bidi call: the pool hands the connector the **outbound** half (a
/// [`Stream`] of requests it will feed) and gets back the **inbound** half (a [`Stream`] of
/// responses). With tonic that is `client.method(outbound).await?.into_inner()`.
pub trait Connector: Send + Sync + 'static {
    /// A request; carries a request id (see [`StreamRequest`]).
    type Request: StreamRequest;
    /// A response; names the request it answers (see [`StreamResponse`]).
    type Response: StreamResponse;
    /// Why a connect or a stream failed.
    type Error: std::error::Error + Send + Sync + 'static;
    /// The inbound half of an open stream.
    type Inbound: Stream<Item = Result<Self::Response, Self::Error>> + Send + Unpin + 'static;

    /// Opens a stream that sends what `outbound` yields. Called on the stream's driver task.
    fn connect(
        &self,
        outbound: Outbound<Self::Request>,
    ) -> impl Future<Output = Result<Self::Inbound, Self::Error>> + Send;
}

/// A request that carries an id its response will echo.
pub trait StreamRequest: Send + 'static {
    /// The caller-supplied id, or `None` to let the pool assign one.
    fn request_id(&self) -> Option<u64>;
    /// Sets the id (called by the pool when [`StreamRequest::request_id`] is `None`).
    fn set_request_id(&mut self, id: u64);
}

/// A response that names the request it answers.
pub trait StreamResponse: Send + 'static {
    /// The id of the request this answers.
    fn request_id(&self) -> u64;
}

/// The outbound half of a stream: the requests the pool forwards, as a [`Stream`].
pub struct Outbound<R> {
    rx: mpsc::UnboundedReceiver<R>,
}

impl<R> Outbound<R> {
    /// Wraps a receiver (for connectors tested or driven outside a pool).
    pub fn new(rx: mpsc::UnboundedReceiver<R>) -> Self {
        Self { rx }
    }
}

impl<R> Stream for Outbound<R> {
    type Item = R;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<R>> {
        self.rx.poll_recv(cx)
    }
}

impl<R> fmt::Debug for Outbound<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Outbound").finish_non_exhaustive()
    }
}

/// Why a request got no response. [`RequestError::reach`] says whether a retry is safe.
#[derive(Debug, thiserror::Error)]
pub enum RequestError<E: std::error::Error + 'static> {
    /// The stream this request joined failed to open. Nothing was sent.
    #[error("stream failed to open: {source}")]
    Connect {
        /// The connector's error (shared by every caller on that stream).
        #[source]
        source: Arc<E>,
    },
    /// The stream ended or failed before this request's response arrived.
    #[error("stream ended before the response ({reach})")]
    StreamEnded {
        /// Whether the request had been handed to the stream.
        reach: Reach,
        /// The stream's error, if it ended with one (a clean end carries none).
        #[source]
        source: Option<Arc<E>>,
    },
    /// Another request with the same caller-supplied id is in flight on this stream.
    #[error("request id {id} is already in flight on this stream")]
    DuplicateId {
        /// The id.
        id: u64,
    },
    /// The pool was closed or dropped.
    #[error("pool closed")]
    Closed,
}

impl<E: std::error::Error + 'static> RequestError<E> {
    /// Whether the request can have been applied.
    pub fn reach(&self) -> Reach {
        match self {
            RequestError::StreamEnded { reach, .. } => *reach,
            RequestError::Connect { .. }
            | RequestError::DuplicateId { .. }
            | RequestError::Closed => Reach::NotSent,
        }
    }
}

/// A snapshot of a pool's state and counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StreamStats {
    /// Streams by phase, requests in flight (reserved or sent), tasks waiting.
    pub table: TableStats,
    /// Acquires that returned a guard.
    pub acquires: u64,
    /// Acquires that had to wait for capacity.
    pub waits: u64,
    /// Streams started.
    pub spin_ups: u64,
    /// Streams that failed to open.
    pub connect_failures: u64,
    /// Open streams that failed or ended.
    pub stream_failures: u64,
    /// Streams closed by the reaper.
    pub reaps: u64,
    /// Responses whose caller had gone (cancelled); discarded.
    pub late_responses: u64,
    /// Responses with an id no caller was waiting for; discarded.
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
/// # Ok(()) }
/// ```
pub struct StreamPool<C: Connector> {
    shared: Arc<Shared<C>>,
    reaper: Option<tokio::task::AbortHandle>,
}

/// State shared by the pool handle, its drivers and its reaper.
struct Shared<C: Connector> {
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
    counters: Counters,
    /// Consulted only when a reservation claims a slot (a spin-up).
    breaker: Breaker,
    /// Streams kept open however idle (prewarm).
    min_streams: usize,
}

#[derive(Debug)]
struct Counters {
    acquires: Counter,
    waits: Counter,
    spin_ups: Counter,
    connect_failures: Counter,
    stream_failures: Counter,
    reaps: Counter,
    late_responses: Counter,
    unknown_responses: Counter,
    breaker_rejections: Counter,
}

impl Default for Counters {
    fn default() -> Self {
        Self {
            acquires: Counter::new(),
            waits: Counter::new(),
            spin_ups: Counter::new(),
            connect_failures: Counter::new(),
            stream_failures: Counter::new(),
            reaps: Counter::new(),
            late_responses: Counter::new(),
            unknown_responses: Counter::new(),
            breaker_rejections: Counter::new(),
        }
    }
}

/// Per-slot data: the current incarnation's request queue.
struct StreamCell<C: Connector> {
    /// INVARIANT: while a slot is Starting, Ready or Draining with generation `g`, this holds
    /// the incarnation of generation `g`, except in the instant between the claiming CAS and
    /// the claimer's store (joiners spin through that window, see `StreamGuard::send`).
    current: Published<Option<Arc<Incarnation<C>>>>,
}

impl<C: Connector> Default for StreamCell<C> {
    fn default() -> Self {
        Self {
            current: Published::new(None),
        }
    }
}

impl<C: Connector> fmt::Debug for StreamCell<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StreamCell").finish_non_exhaustive()
    }
}

/// One stream's lifetime in one slot.
struct Incarnation<C: Connector> {
    generation: Generation,
    /// Requests for the driver. Closed by the driver when the stream ends, after which a send
    /// fails as not sent.
    requests: mpsc::UnboundedSender<Pending<C>>,
    /// Tells the driver the reaper retired its slot: see [`Incarnation::request_stop`].
    stop: tokio::sync::Notify,
    /// Set (before `stop` is notified) when the reaper retired the slot, so that the driver
    /// can tell with one load, on every wake-up, whether it must stop, and poll `stop`'s
    /// future (which takes the Notify's lock) only to register its waker.
    stop_requested: AtomicBool,
    /// Why the stream failed to open, for callers whose request arrives after the driver
    /// stopped taking requests. Written once, on the connect-failure path.
    connect_error: Mutex<Option<Arc<C::Error>>>,
}

impl<C: Connector> Incarnation<C> {
    /// Asks the driver to stop (the reaper retired the slot).
    fn request_stop(&self) {
        // Release: pairs with the driver's Acquire load; the Notify wakes it.
        self.stop_requested.store(true, Ordering::Release);
        self.stop.notify_one();
    }

    fn stop_requested(&self) -> bool {
        self.stop_requested.load(Ordering::Acquire)
    }
}

/// A request handed to a driver, with its caller's reply channel and unit of load.
struct Pending<C: Connector> {
    request: C::Request,
    reply: oneshot::Sender<Result<C::Response, RequestError<C::Error>>>,
    reservation: Reservation,
}

impl<C: Connector> StreamPool<C> {
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
            waited: false,
        }
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
        self.shared.counters.acquires.incr();
        Ok(StreamGuard {
            shared: &self.shared,
            reservation: Some(reservation),
        })
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

    /// One reaper pass at `now` on the pool's clock: closes streams idle for at least the idle
    /// timeout. Returns how many it closed.
    pub fn reap(&self, now: quanta::Instant) -> usize {
        self.shared.reap(now)
    }

    /// A snapshot of the pool's state and counters.
    pub fn stats(&self) -> StreamStats {
        let c = &self.shared.counters;
        StreamStats {
            table: self.shared.table.stats(),
            acquires: c.acquires.get(),
            waits: c.waits.get(),
            spin_ups: c.spin_ups.get(),
            connect_failures: c.connect_failures.get(),
            stream_failures: c.stream_failures.get(),
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

    /// The clock the pool measures idle time with.
    pub fn clock(&self) -> &quanta::Clock {
        &self.shared.clock
    }
}

impl<C: Connector> Drop for StreamPool<C> {
    fn drop(&mut self) {
        self.shared.table.close();
        self.shared.shutdown.send_replace(true);
        if let Some(reaper) = &self.reaper {
            reaper.abort();
        }
    }
}

impl<C: Connector> fmt::Debug for StreamPool<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StreamPool")
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl<C: Connector> Shared<C> {
    /// The claimer's half of spin-up: publish the incarnation, then spawn its driver. Runs in
    /// the acquiring caller's poll with no lock held.
    fn spin_up(self: &Arc<Self>, reservation: Reservation, probe: bool) {
        let (tx, rx) = mpsc::unbounded_channel();
        let incarnation = Arc::new(Incarnation {
            generation: reservation.generation(),
            requests: tx,
            stop: tokio::sync::Notify::new(),
            stop_requested: AtomicBool::new(false),
            connect_error: Mutex::new(None),
        });
        self.table.with_slot(reservation.index(), |slot| {
            slot.data()
                .current
                .store(Arc::new(Some(Arc::clone(&incarnation))));
        });
        self.counters.spin_ups.incr();
        tracing::debug!(slot = reservation.index(), "stream spin-up");
        Driver::spawn(self, reservation, incarnation, rx, probe);
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
        self.table
            .reap_idle_keeping(now_nanos, timeout, self.min_streams, |retired, cell| {
                reaped += 1;
                cell.current.with(|current| {
                    if let Some(incarnation) = current {
                        if incarnation.generation == retired.generation {
                            incarnation.request_stop();
                        }
                    }
                });
            });
        if reaped > 0 {
            self.counters.reaps.add(reaped as u64);
            tracing::debug!(reaped, "reaped idle streams");
        }
        self.top_up();
        reaped
    }
}

/// Future of [`StreamPool::acquire`]. `!Unpin`: its place in the wait queue lives inside it.
#[must_use = "futures do nothing unless polled"]
pub struct Acquire<'a, C: Connector> {
    pool: &'a StreamPool<C>,
    /// Structurally pinned: never moved out of the future.
    wait: WaitState<'a>,
    waited: bool,
}

impl<'a, C: Connector> Future for Acquire<'a, C> {
    type Output = Result<StreamGuard<'a, C>, AcquireError>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // SAFETY: `wait` is structurally pinned: `poll_full` re-pins it and nothing moves it.
        let this = unsafe { self.get_unchecked_mut() };
        // The uncontended case, inlined and kept apart from the rest so that it needs no
        // spills: a future that is not queued joins the lowest stream with room (what
        // `poll_reserve` would try first; a join never claims, so there is nothing to start).
        if !this.wait.is_queued() {
            if let Some(reservation) = this.pool.shared.table.reserve_fast() {
                return Poll::Ready(this.resolve(reservation));
            }
        }
        this.poll_full(cx)
    }
}

impl<'a, C: Connector> Acquire<'a, C> {
    /// Everything but the uncontended case: the full scan, waiting, handoffs, closing.
    /// `self` is pinned (it comes from `poll`).
    #[inline(never)]
    fn poll_full(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<StreamGuard<'a, C>, AcquireError>> {
        // SAFETY: `self` is the pinned future (see `poll`); `wait` is structurally pinned.
        let wait = unsafe { Pin::new_unchecked(&mut self.wait) };
        match self.pool.shared.table.poll_reserve_slow(wait, cx) {
            Poll::Ready(Ok(reservation)) => Poll::Ready(self.resolve(reservation)),
            Poll::Ready(Err(_closed)) => Poll::Ready(Err(AcquireError::Closed)),
            Poll::Pending => {
                self.waited = true;
                Poll::Pending
            }
        }
    }

    /// Turns the reservation this future resolved with into its output.
    #[inline]
    fn resolve(&self, reservation: Reservation) -> Result<StreamGuard<'a, C>, AcquireError> {
        let pool = self.pool;
        if self.waited {
            pool.shared.counters.waits.incr();
        }
        pool.admit(reservation)
            .map_err(|retry_after| AcquireError::Unavailable { retry_after })
    }
}

impl<C: Connector> Drop for Acquire<'_, C> {
    fn drop(&mut self) {
        // SAFETY: a pinned future is dropped in place; `wait` has not moved.
        let wait = unsafe { Pin::new_unchecked(&mut self.wait) };
        self.pool.shared.table.cancel_reserve(wait);
    }
}

impl<C: Connector> fmt::Debug for Acquire<'_, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Acquire").field("wait", &self.wait).finish()
    }
}

/// Room for one request on one stream. Send the request with [`StreamGuard::send`]; dropping
/// the guard unsent gives the room back at once.
#[must_use = "dropping the guard gives its room back at once"]
pub struct StreamGuard<'a, C: Connector> {
    /// The pool's shared state (not the pool handle: one pointer less to follow on release).
    shared: &'a Shared<C>,
    /// `None` once handed to a driver or released.
    reservation: Option<Reservation>,
}

impl<C: Connector> StreamGuard<'_, C> {
    /// The slot index of the stream this guard has room on (lower is older and busier).
    pub fn stream_index(&self) -> Option<usize> {
        self.reservation.map(|r| r.index())
    }

    /// Sends `request` on the guard's stream and waits for its response.
    ///
    /// Cancel-safety: dropping the future before the request reaches the stream's driver gives
    /// the room back and sends nothing. Dropping it afterwards does **not** cancel the request:
    /// it is sent, its room stays taken until the response arrives (or the stream ends), and
    /// the response is discarded and counted as late.
    ///
    /// # Errors
    /// See [`RequestError`]; each variant's [`reach`](RequestError::reach) says whether a retry
    /// is safe.
    pub async fn send(
        mut self,
        request: C::Request,
    ) -> Result<C::Response, RequestError<C::Error>> {
        let Some(reservation) = self.reservation else {
            return Err(RequestError::Closed);
        };
        let shared = self.shared;
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
                // `self.reservation`, and dropping the guard gives it back.
                Offer::Refused(Some(source)) => return Err(RequestError::Connect { source }),
                Offer::Refused(None) | Offer::Gone => {
                    return Err(RequestError::StreamEnded {
                        reach: Reach::NotSent,
                        source: None,
                    })
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
                    return Err(RequestError::StreamEnded {
                        reach: Reach::NotSent,
                        source: None,
                    })
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
        self.reservation = None;
        match response.await {
            Ok(result) => result,
            // The driver was stopped (pool dropped) with our request in its hands.
            Err(_) => Err(RequestError::StreamEnded {
                reach: Reach::MaybeApplied,
                source: None,
            }),
        }
    }
}

/// What became of a request offered to a reservation's incarnation.
enum Offer<C: Connector> {
    /// Queued for the driver, which owns its unit of load from now on.
    Sent,
    /// The driver stopped taking requests (with the connect error, if that is why).
    Refused(Option<Arc<C::Error>>),
    /// The incarnation is not published yet: the request comes back to be offered again.
    Unpublished(Pending<C>),
    /// The slot is gone (the request was dropped with nothing sent).
    Gone,
}

/// Hands `pending` to the driver of the incarnation `reservation` belongs to, reading the slot
/// cell in place: no reference count is taken on the incarnation, which every caller on the
/// stream would otherwise bump and drop (one contended cache line per request).
fn offer<C: Connector>(
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
                        Err(_) => Offer::Refused(incarnation.connect_error.lock().clone()),
                    }
                }
                _ => Offer::Unpublished(pending),
            })
        })
        .unwrap_or(Offer::Gone)
}

impl<C: Connector> Drop for StreamGuard<'_, C> {
    fn drop(&mut self) {
        if let Some(reservation) = self.reservation.take() {
            self.shared.table.release(reservation);
        }
    }
}

impl<C: Connector> fmt::Debug for StreamGuard<'_, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StreamGuard")
            .field("reservation", &self.reservation)
            .finish()
    }
}
