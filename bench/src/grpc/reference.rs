//! R1's whole nested gRPC stack, rebuilt faithfully from SEEDS.md so that slotpool's stack
//! can be measured against it end to end (`e2e/*`). The pools are the reference designs of
//! `bench/`: [`RefChannelPool`] and [`RefClientPool`] ([`crate::reference::client`], R1's
//! `Mutex<BTreeMap>` pools with a semaphore) and [`RefStreamPool`]
//! ([`crate::reference::stream`], R1's linear scan under a mutex). This module adds what nests
//! them over tonic:
//!
//! * the same channel connector and client factory as slotpool's stack
//!   ([`EndpointConnector`] over `Endpoint::connect_lazy`, `PageServiceClient::new`), so both
//!   stacks make identical connections and clients;
//! * [`RefGrpcConnector`]: opens a stream by taking a client from the client pool and calling
//!   `GetPages`; the stream task holds the client (inside the inbound stream, [`RefInbound`])
//!   for the stream's life, so an idle stream reaped frees its client and an idle client reaped
//!   frees its channel, as in R1.

use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures_core::Stream;
use slotpool::stream::{Connector, Outbound};
use slotpool::tonic::{ClientFn, EndpointConnector};
use tonic::transport::Endpoint;
use tonic::{Status, Streaming};

use super::stack::Factory;
use super::{GetPageRequest, GetPageResponse, PageServiceClient};
use crate::reference::client::{RefChannelPool, RefClientGuard, RefClientPool};
use crate::reference::stream::{RefConnector, RefError, RefOutbound, RefStreamPool};

/// The reference channel pool over tonic.
pub type RefChannels = RefChannelPool<EndpointConnector>;
/// The reference client pool over tonic.
pub type RefClients = RefClientPool<EndpointConnector, Factory>;

// ---------------------------------------------------------------------------------------------
// Stream connector
// ---------------------------------------------------------------------------------------------

/// Opens GetPage streams for [`RefStreamPool`] on clients from a [`RefClientPool`].
#[derive(Clone)]
pub struct RefGrpcConnector {
    clients: Arc<RefClients>,
}

impl fmt::Debug for RefGrpcConnector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RefGrpcConnector").finish_non_exhaustive()
    }
}

impl RefGrpcConnector {
    /// A connector taking its clients from `clients`.
    pub fn new(clients: Arc<RefClients>) -> Self {
        Self { clients }
    }

    async fn open<S>(&self, outbound: S) -> Result<RefInbound, Status>
    where
        S: Stream<Item = GetPageRequest> + Send + 'static,
    {
        let mut client = match self.clients.get().await {
            Ok(client) => client,
            Err(never) => match never {},
        };
        let inbound = client.get_pages(outbound).await?.into_inner();
        Ok(RefInbound {
            inbound,
            _client: client,
        })
    }
}

/// The response stream of a reference stream; holds the stream's client for its life.
pub struct RefInbound {
    inbound: Streaming<GetPageResponse>,
    _client: RefClientGuard<EndpointConnector, Factory>,
}

impl fmt::Debug for RefInbound {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RefInbound").finish_non_exhaustive()
    }
}

impl Stream for RefInbound {
    type Item = Result<GetPageResponse, Status>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        Pin::new(&mut self.get_mut().inbound).poll_next(cx)
    }
}

impl Connector for RefGrpcConnector {
    type Request = GetPageRequest;
    type Response = GetPageResponse;
    type Error = Status;
    type Inbound = RefInbound;

    async fn connect(&self, outbound: Outbound<GetPageRequest>) -> Result<RefInbound, Status> {
        self.open(outbound).await
    }
}

impl RefConnector for RefGrpcConnector {
    type RefInbound = RefInbound;

    async fn connect_ref(
        &self,
        outbound: RefOutbound<GetPageRequest>,
    ) -> Result<RefInbound, Status> {
        self.open(outbound).await
    }
}

/// R1's three pools, nested: streams on clients on channels to one endpoint.
pub struct RefStack {
    /// The channel pool.
    pub channels: Arc<RefChannels>,
    /// The client pool.
    pub clients: Arc<RefClients>,
    /// The stream pool.
    pub streams: RefStreamPool<RefGrpcConnector>,
}

impl RefStack {
    /// R1's stack to `endpoint`: `max_clients_per_channel` clients per channel, at most
    /// `max_clients` clients, at most `max_streams` streams of `max_queue_depth` requests.
    /// Must be called within a tokio runtime.
    pub fn new(
        endpoint: Endpoint,
        max_clients_per_channel: usize,
        max_clients: Option<usize>,
        max_streams: Option<usize>,
        max_queue_depth: usize,
    ) -> Self {
        let channels =
            RefChannelPool::new(EndpointConnector::new(endpoint), max_clients_per_channel);
        let factory: Factory = ClientFn::new(PageServiceClient::new);
        let clients = RefClientPool::new(Arc::clone(&channels), factory, max_clients);
        let streams = RefStreamPool::new(
            RefGrpcConnector::new(Arc::clone(&clients)),
            max_streams,
            max_queue_depth,
        );
        Self {
            channels,
            clients,
            streams,
        }
    }

    /// One request through the whole stack.
    ///
    /// # Errors
    /// The reference stream's error.
    pub async fn get_page(
        &self,
        request: GetPageRequest,
    ) -> Result<GetPageResponse, RefError<Status>> {
        let guard = self.streams.get().await;
        guard.send(request).await
    }
}

impl fmt::Debug for RefStack {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RefStack")
            .field("streams", &self.streams)
            .finish_non_exhaustive()
    }
}
