//! Test connectors shared by the stream benchmarks: one type each, used by slotpool's
//! [`StreamPool`](slotpool::stream::StreamPool) and by the R1 reference
//! ([`crate::reference::stream`]), so that only the pool differs between them.
//!
//! * [`NoopConnector`]: a stream that opens at once and never answers. The acquire/release
//!   cases never send, so the stream only has to exist.
//! * [`EchoConnector`]: an in-process "server" whose inbound half is the outbound half mapped
//!   to `Ok` responses: every request comes straight back as its own response, so a round trip
//!   costs exactly the pool's forwarding and routing.
//!
//! Each connector implements both [`Connector`] (slotpool's trait, which hands it an
//! [`Outbound`]) and [`RefConnector`] (the reference's, which hands it a [`RefOutbound`]).
//! Two traits only because `slotpool::stream::Outbound` has no public constructor, so code
//! outside `slotpool` cannot call `Connector::connect`; the stream each one builds is the
//! same generic type in both cases ([`Never`] or [`Echo`]).

use std::convert::Infallible;
use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Context, Poll};

use futures_core::Stream;
use slotpool::session::{self, LoopId, SessionContext, SessionRecord, SessionStore};
use slotpool::stream::{Connector, Outbound, StreamRequest, StreamResponse};

use crate::reference::stream::{RefConnector, RefOutbound};

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
