//! What every case runs over, so that only the pool differs between the implementations of
//! a case: the connectors each pool opens its resources with, the runtimes, the task helpers,
//! and the floor.
//!
//! | section | what |
//! |---|---|
//! | streams | [`Msg`], [`NoopConnector`] (a stream that opens at once and never answers: the acquire/release cases never send) and [`EchoConnector`] (an in-process "server" that answers every request with itself, so a round trip costs exactly the pool's forwarding and routing) |
//! | sessions | [`NoopSessionConnector`] and [`NoopStore`]: connect, bootstrap and save at once, never an event |
//! | channels and clients | [`IdChannels`], [`TrivialFactory`] (slotpool's and the reference's client pools) and [`NoopManager`] (bb8's) |
//! | runtimes and tasks | [`current_thread`], [`multi_thread`], [`settle`], [`yield_to_tasks`], [`join_all`], [`nanos`] |
//! | the floor | [`Floor`]: one CAS below a limit and one `fetch_sub`, the least any reservation can cost |
//!
//! Each stream connector implements both [`Connector`] (slotpool's trait, which hands it an
//! [`Outbound`]) and [`RefConnector`] (the R1 references', which hands it a [`RefOutbound`]).
//! The stream each one builds is the same generic type in both cases ([`Never`] or [`Echo`]).

use std::convert::Infallible;
use std::fmt;
use std::future::Future;
use std::hint::black_box;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures_core::Stream;
use slotpool::channel::ChannelConnector;
use slotpool::client::ClientFactory;
use slotpool::session::{self, LoopId, SessionContext, SessionRecord, SessionStore};
use slotpool::stream::{Connector, Outbound, StreamRequest, StreamResponse};
use tokio::runtime::Runtime;
use tokio::task::JoinHandle;

use crate::reference::stream::{RefConnector, RefOutbound};

// ---------------------------------------------------------------------------------------------
// Streams
// ---------------------------------------------------------------------------------------------

/// A request (and, echoed, a response): an id and a small payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Msg {
    /// The request id; `None` lets the pool assign one.
    pub id: Option<u64>,
    /// Payload, carried through unchanged.
    pub body: u64,
}

impl Msg {
    /// A request with a caller-chosen id.
    pub fn new(id: u64, body: u64) -> Self {
        Self { id: Some(id), body }
    }
}

impl StreamRequest for Msg {
    fn request_id(&self) -> Option<u64> {
        self.id
    }

    fn set_request_id(&mut self, id: u64) {
        self.id = Some(id);
    }
}

impl StreamResponse for Msg {
    fn request_id(&self) -> u64 {
        self.id.unwrap_or(u64::MAX)
    }
}

/// Inbound half of a stream that never answers; holds the outbound half so the stream stays
/// open (requests, if any, are accepted and ignored).
pub struct Never<O> {
    _outbound: O,
}

impl<O> fmt::Debug for Never<O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Never").finish_non_exhaustive()
    }
}

impl<O: Unpin> Stream for Never<O> {
    type Item = Result<Msg, Infallible>;

    fn poll_next(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        Poll::Pending
    }
}

/// Inbound half of the echo stream: the outbound requests, each as an `Ok` response.
pub struct Echo<O> {
    outbound: O,
    _msg: PhantomData<fn() -> Msg>,
}

impl<O> fmt::Debug for Echo<O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Echo").finish_non_exhaustive()
    }
}

impl<O: Stream<Item = Msg> + Unpin> Stream for Echo<O> {
    type Item = Result<Msg, Infallible>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        Pin::new(&mut self.outbound)
            .poll_next(cx)
            .map(|m| m.map(Ok))
    }
}

/// Opens streams that never answer (for the acquire/release cases).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoopConnector;

impl Connector for NoopConnector {
    type Request = Msg;
    type Response = Msg;
    type Error = Infallible;
    type Inbound = Never<Outbound<Msg>>;

    fn connect(
        &self,
        outbound: Outbound<Msg>,
    ) -> impl Future<Output = Result<Never<Outbound<Msg>>, Infallible>> + Send {
        std::future::ready(Ok(Never {
            _outbound: outbound,
        }))
    }
}

impl RefConnector for NoopConnector {
    type RefInbound = Never<RefOutbound<Msg>>;

    fn connect_ref(
        &self,
        outbound: RefOutbound<Msg>,
    ) -> impl Future<Output = Result<Never<RefOutbound<Msg>>, Infallible>> + Send {
        std::future::ready(Ok(Never {
            _outbound: outbound,
        }))
    }
}

/// Opens in-process echo streams (for the round-trip case).
#[derive(Debug, Clone, Copy, Default)]
pub struct EchoConnector;

impl Connector for EchoConnector {
    type Request = Msg;
    type Response = Msg;
    type Error = Infallible;
    type Inbound = Echo<Outbound<Msg>>;

    fn connect(
        &self,
        outbound: Outbound<Msg>,
    ) -> impl Future<Output = Result<Echo<Outbound<Msg>>, Infallible>> + Send {
        std::future::ready(Ok(Echo {
            outbound,
            _msg: PhantomData,
        }))
    }
}

impl RefConnector for EchoConnector {
    type RefInbound = Echo<RefOutbound<Msg>>;

    fn connect_ref(
        &self,
        outbound: RefOutbound<Msg>,
    ) -> impl Future<Output = Result<Echo<RefOutbound<Msg>>, Infallible>> + Send {
        std::future::ready(Ok(Echo {
            outbound,
            _msg: PhantomData,
        }))
    }
}

// ---------------------------------------------------------------------------------------------
// Sessions: a no-op connector and store
// ---------------------------------------------------------------------------------------------

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

impl session::Connector for NoopSessionConnector {
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

// ---------------------------------------------------------------------------------------------
// Channels and clients
// ---------------------------------------------------------------------------------------------

/// Channels that are just their id.
#[derive(Debug, Clone, Copy, Default)]
pub struct IdChannels;

impl ChannelConnector for IdChannels {
    type Channel = u64;
    fn connect_lazy(&self, id: u64) -> u64 {
        id
    }
}

/// A trivial client: a counter.
#[derive(Debug, Default)]
pub struct Trivial(pub u64);

/// Builds [`Trivial`] clients, never fails.
#[derive(Debug, Clone, Copy, Default)]
pub struct TrivialFactory;

impl ClientFactory<u64> for TrivialFactory {
    type Client = Trivial;
    type Error = Infallible;
    async fn make(&self, channel: &u64) -> Result<Trivial, Infallible> {
        Ok(Trivial(*channel))
    }
}

/// bb8's no-op manager.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoopManager;

impl bb8::ManageConnection for NoopManager {
    type Connection = Trivial;
    type Error = Infallible;
    async fn connect(&self) -> Result<Trivial, Infallible> {
        Ok(Trivial(0))
    }
    async fn is_valid(&self, _conn: &mut Trivial) -> Result<(), Infallible> {
        Ok(())
    }
    fn has_broken(&self, _conn: &mut Trivial) -> bool {
        false
    }
}

// ---------------------------------------------------------------------------------------------
// Runtimes and tasks
// ---------------------------------------------------------------------------------------------

/// A current-thread runtime (the single-task cases).
pub fn current_thread() -> Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a current-thread runtime builds")
}

/// A multi-thread runtime with `workers` workers.
pub fn multi_thread(workers: usize) -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .expect("a multi-thread runtime builds")
}

/// Yields (then sleeps briefly) until `done()` holds, so spawned stream tasks get to run.
///
/// # Panics
/// If it does not hold within about two seconds.
pub async fn settle(done: impl Fn() -> bool) {
    for round in 0..2_000u32 {
        if done() {
            return;
        }
        if round < 100 {
            tokio::task::yield_now().await;
        } else {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    panic!("stream tasks did not settle");
}

/// Yields a hundred times, so that the stream tasks a reference spawned on this runtime get to
/// run (the references offer no state to wait for, as [`settle`] does for slotpool).
pub async fn yield_to_tasks() {
    for _ in 0..100 {
        tokio::task::yield_now().await;
    }
}

/// Waits for every bench task, in order, and returns their outputs.
///
/// # Panics
/// If a task panicked.
pub async fn join_all<T: Send + 'static>(handles: Vec<JoinHandle<T>>) -> Vec<T> {
    let mut out = Vec::with_capacity(handles.len());
    for handle in handles {
        out.push(handle.await.expect("bench task panicked"));
    }
    out
}

/// A duration in whole nanoseconds (saturating), for the wait histograms.
pub fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

// ---------------------------------------------------------------------------------------------
// The floor
// ---------------------------------------------------------------------------------------------

/// The least any reservation can cost: one CAS-below-limit to take a unit, one `fetch_sub` to
/// give it back, on one shared, cache-padded counter. Measured in the same process as the
/// pools, as `floor`.
#[derive(Debug)]
pub struct Floor {
    /// Units taken. INVARIANT: `<= limit`.
    used: crossbeam_utils::CachePadded<AtomicUsize>,
    limit: usize,
}

impl Floor {
    /// A counter of `limit` units.
    pub fn new(limit: usize) -> Self {
        Self {
            used: crossbeam_utils::CachePadded::new(AtomicUsize::new(0)),
            limit,
        }
    }

    /// Takes one unit if fewer than `limit` are taken.
    #[inline]
    pub fn try_acquire(&self) -> bool {
        let mut current = self.used.load(Ordering::Relaxed);
        loop {
            if current >= self.limit {
                return false;
            }
            match self.used.compare_exchange_weak(
                current,
                current + 1,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                // Another taker or releaser moved the counter: retry against its value.
                Err(actual) => current = actual,
            }
        }
    }

    /// Gives one unit back.
    #[inline]
    pub fn release(&self) {
        self.used.fetch_sub(1, Ordering::Release);
    }

    /// Units taken now.
    pub fn in_use(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }
}

/// `ops` × (CAS below the limit, `fetch_sub`) on one task.
pub fn floor_acquire_release(floor: &Floor, ops: u64) -> Duration {
    let start = Instant::now();
    for _ in 0..ops {
        let taken = floor.try_acquire();
        black_box(taken);
        if taken {
            floor.release();
        }
    }
    start.elapsed()
}
