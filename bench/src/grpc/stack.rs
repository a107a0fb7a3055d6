//! slotpool's stack for the GetPage service, nested as R1 nests its pools: a [`StreamPool`]
//! whose streams are bidi calls ([`TonicStreamConnector`]) on clients from a [`ClientPool`],
//! built on channels from a [`ChannelPool`] over [`EndpointConnector`]. The tests, the soak and
//! the `e2e/*` benchmarks all use it.

use std::convert::Infallible;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use slotpool::channel::ChannelPool;
use slotpool::client::ClientPool;
use slotpool::stream::{Outbound, RequestError, StreamPool};
use slotpool::tonic::{
    ClientFn, EndpointConnector, StreamCall, TonicStreamConnector, TonicStreamError,
};
use slotpool::{AcquireError, ConfigError, Reach};
use tonic::transport::{Channel, Endpoint};
use tonic::{Status, Streaming};

use super::{GetPageRequest, GetPageResponse, PageServiceClient};

/// The client type.
pub type Client = PageServiceClient<Channel>;
/// The client factory: `PageServiceClient::new`.
pub type Factory = ClientFn<fn(Channel) -> Client>;
/// The channel pool.
pub type Channels = ChannelPool<EndpointConnector>;
/// The client pool.
pub type Clients = ClientPool<EndpointConnector, Factory>;
/// The stream connector.
pub type Connector = TonicStreamConnector<EndpointConnector, Factory, GetPages>;
/// The stream pool.
pub type Streams = StreamPool<Connector>;
/// Why a request through the stream pool got no response.
pub type RequestFailure = RequestError<TonicStreamError<Infallible>>;

/// `PageService.GetPages`, the call that opens a stream.
#[derive(Debug, Clone, Copy)]
pub struct GetPages;

impl StreamCall<Client> for GetPages {
    type Request = GetPageRequest;
    type Response = GetPageResponse;

    async fn call(
        &self,
        mut client: Client,
        outbound: Outbound<GetPageRequest>,
    ) -> Result<Streaming<GetPageResponse>, Status> {
        Ok(client.get_pages(outbound).await?.into_inner())
    }
}

/// How to build a [`SlotStack`].
#[derive(Debug, Clone)]
pub struct StackConfig {
    /// Clients per channel.
    pub max_clients_per_channel: usize,
    /// Bound on live clients.
    pub max_clients: Option<usize>,
    /// Bound on streams.
    pub max_streams: Option<usize>,
    /// Requests in flight per stream.
    pub max_queue_depth: usize,
    /// Idle timeout of all three pools.
    pub idle_timeout: Duration,
    /// Background reaping of all three pools (`None`: call [`SlotStack::reap`]).
    pub reap_interval: Option<Duration>,
    /// The clock of all three pools.
    pub clock: slotpool::Clock,
    /// The stream pool's circuit breaker: consecutive failures and backoff.
    pub breaker: Option<(u32, Duration)>,
    /// Streams opened at build and kept open.
    pub min_streams: usize,
    /// The endpoint's connect timeout.
    pub connect_timeout: Duration,
    /// The stream pool's `open_timeout` (its default: 10 s).
    pub open_timeout: Option<Duration>,
    /// The stream pool's `stall_timeout` (its default: 60 s).
    pub stall_timeout: Option<Duration>,
}

impl Default for StackConfig {
    fn default() -> Self {
        Self {
            max_clients_per_channel: 16,
            max_clients: None,
            max_streams: None,
            max_queue_depth: 8,
            idle_timeout: Duration::from_secs(10),
            reap_interval: None,
            clock: slotpool::Clock::new(),
            breaker: None,
            min_streams: 0,
            connect_timeout: Duration::from_secs(5),
            open_timeout: Some(Duration::from_secs(10)),
            stall_timeout: Some(Duration::from_secs(60)),
        }
    }
}

/// Why [`SlotStack::get_page`] got no response.
#[derive(Debug)]
pub enum PageError {
    /// No room on a stream (timeout, closed, breaker open).
    Acquire(AcquireError),
    /// The request failed on its stream.
    Request(RequestFailure),
}

impl fmt::Display for PageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PageError::Acquire(e) => e.fmt(f),
            PageError::Request(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for PageError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            PageError::Acquire(e) => Some(e),
            PageError::Request(e) => Some(e),
        }
    }
}

impl From<AcquireError> for PageError {
    fn from(e: AcquireError) -> Self {
        PageError::Acquire(e)
    }
}

impl From<RequestFailure> for PageError {
    fn from(e: RequestFailure) -> Self {
        PageError::Request(e)
    }
}

impl PageError {
    /// Whether the request may have been applied.
    pub fn reach(&self) -> Reach {
        match self {
            PageError::Acquire(e) => e.reach(),
            PageError::Request(e) => e.reach(),
        }
    }
}

/// slotpool's three pools, nested, to one endpoint.
pub struct SlotStack {
    /// The channel pool.
    pub channels: Arc<Channels>,
    /// The client pool.
    pub clients: Arc<Clients>,
    /// The stream pool.
    pub streams: Streams,
}

impl fmt::Debug for SlotStack {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SlotStack")
            .field("channels", &self.channels.stats())
            .field("clients", &self.clients.stats())
            .field("streams", &self.streams.stats())
            .finish()
    }
}

/// Open resources at each level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Open {
    /// Streams not Empty (starting, ready or draining).
    pub streams: usize,
    /// Live clients.
    pub clients: usize,
    /// Open channels.
    pub channels: usize,
}

impl SlotStack {
    /// Builds the stack to `uri` (e.g. [`super::server::TestServer::uri`]). Must be called
    /// within a tokio runtime.
    ///
    /// # Errors
    /// A bad URI or a bad setting.
    pub fn build(uri: &str, config: &StackConfig) -> Result<Self, Box<dyn std::error::Error>> {
        let endpoint = Endpoint::from_shared(uri.to_string())?
            .connect_timeout(config.connect_timeout)
            .tcp_nodelay(true);
        let channels = ChannelPool::builder(EndpointConnector::new(endpoint))
            .max_clients_per_channel(config.max_clients_per_channel)
            .idle_timeout(config.idle_timeout)
            .reap_interval(config.reap_interval)
            .clock(config.clock.clone())
            .build()?;
        let factory: Factory = ClientFn::new(PageServiceClient::new);
        let clients = ClientPool::builder(Arc::clone(&channels), factory)
            .max_clients(config.max_clients)
            .idle_timeout(config.idle_timeout)
            .reap_interval(config.reap_interval)
            .clock(config.clock.clone())
            .build()?;
        let connector: Connector = TonicStreamConnector::new(Arc::clone(&clients), GetPages);
        let mut streams = StreamPool::builder(connector)
            .max_queue_depth(config.max_queue_depth)
            .idle_timeout(config.idle_timeout)
            .reap_interval(config.reap_interval)
            .clock(config.clock.clone())
            .open_timeout(config.open_timeout)
            .stall_timeout(config.stall_timeout)
            .min_streams(config.min_streams);
        if let Some(max) = config.max_streams {
            streams = streams.max_streams(max);
        }
        if let Some((failures, backoff)) = config.breaker {
            streams = streams.breaker(failures, backoff);
        }
        let streams = streams
            .build()
            .map_err(|e: ConfigError| Box::new(e) as Box<_>)?;
        Ok(Self {
            channels,
            clients,
            streams,
        })
    }

    /// One request through the whole stack: acquire room on a stream, send, await.
    ///
    /// # Errors
    /// See [`PageError`].
    pub async fn get_page(&self, request: GetPageRequest) -> Result<GetPageResponse, PageError> {
        let guard = self.streams.acquire().await?;
        Ok(guard.send(request).await?)
    }

    /// [`SlotStack::get_page`] with a deadline on the acquire.
    ///
    /// # Errors
    /// See [`PageError`].
    pub async fn get_page_within(
        &self,
        request: GetPageRequest,
        timeout: Duration,
    ) -> Result<GetPageResponse, PageError> {
        let guard = self.streams.acquire_timeout(timeout).await?;
        Ok(guard.send(request).await?)
    }

    /// Reaps the three pools in nesting order at `now`: streams, clients, channels. Returns
    /// how many of each it closed. A reaped stream returns its client only when its driver has
    /// stopped (see [`SlotStack::settle`]).
    pub fn reap(&self, now: slotpool::Instant) -> Open {
        Open {
            streams: self.streams.reap(now),
            clients: self.clients.reap(now),
            channels: self.channels.reap(now),
        }
    }

    /// What is open now.
    pub fn open(&self) -> Open {
        let table = self.streams.stats().table;
        Open {
            streams: table.starting + table.ready + table.draining,
            clients: self.clients.stats().clients,
            channels: self.channels.stats().channels,
        }
    }

    /// Waits (yielding, never sleeping) until no stream is still closing and every client is
    /// back from the stream drivers that no longer hold one: no slot draining (a reaped
    /// stream's slot stays draining until its driver has let go of the stream, and so of its
    /// client) and clients in use at most the open streams; gives up after `max_yields`
    /// yields and returns whether it settled.
    pub async fn settle(&self, max_yields: usize) -> bool {
        for _ in 0..max_yields {
            let open = self.open();
            let closing = self.streams.stats().table.draining;
            if closing == 0 && self.clients.stats().in_use <= open.streams {
                return true;
            }
            tokio::task::yield_now().await;
        }
        false
    }
}
