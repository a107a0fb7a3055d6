//! The tonic integration (feature `tonic`): R1's nested stack — streams on clients on
//! channels — over real gRPC.
//!
//! # The pieces
//!
//! * [`EndpointConnector`]: a [`ChannelConnector`] over `tonic::transport::Endpoint`. Each
//!   channel is one HTTP/2 connection made with [`Endpoint::connect_lazy`], so
//!   [`ChannelPool::get`](crate::channel::ChannelPool::get) never blocks; the connection is
//!   dialled on the first call and redialled by tonic after it breaks.
//! * [`ClientFn`]: a [`ClientFactory`] from a plain function of the channel, typically the
//!   generated `FooClient::new`.
//! * [`TonicStreamConnector`]: a [`StreamConnector`] that opens each stream of a
//!   [`StreamPool`](crate::stream::StreamPool) as one bidirectional call, on a client checked
//!   out of a [`ClientPool`]. You give it the call as a closure,
//!   `|mut client, outbound| async move { client.method(outbound).await }`, or as a
//!   [`StreamCall`] implementation, whose type can be named.
//!   - [`TonicStreamConnector::from_call`] takes **any generated client** as it is, messages
//!     and all: responses are matched to requests in order, or by ids that closures read and
//!     set ([`request_id`](TonicStreamConnector::request_id),
//!     [`set_request_id`](TonicStreamConnector::set_request_id),
//!     [`response_id`](TonicStreamConnector::response_id)). No wrapper types, no trait impls
//!     on the generated messages (which the orphan rule would forbid).
//!   - [`TonicStreamConnector::from_fn`] and [`TonicStreamConnector::new`] match by the ids
//!     of messages that implement [`StreamRequest`] and [`StreamResponse`] (your own types).
//!
//! # How resources nest
//!
//! The stream's driver holds the [`ClientGuard`] inside the inbound half ([`TonicInbound`]) for
//! the stream's whole life, and the client holds its channel share. So, as in R1:
//!
//! * an idle stream that the stream pool reaps drops its inbound half, which returns the client
//!   to the client pool, idle from that moment;
//! * a stream the stream pool retires as hung (its `open_timeout` or `stall_timeout` fired)
//!   **discards** its client instead, at once: the client pool drops it and frees its channel
//!   share, so nothing idles in the pools with a share of the connection to the hung peer, and
//!   the next stream gets a new client;
//! * an idle client that the client pool reaps releases its channel share;
//! * a channel with no clients that the channel pool reaps closes its connection.
//!
//! Give the three pools the same `Clock` and reap them in that order (streams, clients,
//! channels). The stream pool notes idleness in its reaper passes, and a client's idle time
//! starts when its stream closes, so after every guard is gone it takes a pass to note the idle
//! streams, one idle timeout to close them (their clients come back as their drivers stop), and
//! one more to close the clients and, in the same pass, the channels they leave empty.
//!
//! Each open stream holds one client: with a bounded client pool, allow at least
//! `max_streams` clients (plus whatever else you check out), or a stream's connect waits for a
//! client that only another stream's end can free.
//!
//! # Failure model
//!
//! * No client (the client pool is closed, `max_clients` in use and the stream pool's acquire
//!   timed out, or the factory failed): the connect fails with [`TonicStreamError::Client`];
//!   nothing was sent.
//! * The call fails before the stream opens (server down: tonic reports `UNAVAILABLE` with the
//!   transport error): [`TonicStreamError::Status`] from the connect; every caller that joined
//!   the stream gets `RequestError::Connect` (not sent, safe to retry), and it counts toward the
//!   stream pool's circuit breaker.
//! * The stream breaks or the server ends it: the stream pool fails the requests in flight on
//!   it as maybe applied and the queued ones as not sent (see [`crate::stream`]). The client
//!   goes back to the pool: a tonic client is a handle over the channel, which redials by
//!   itself, so a broken stream does not make the client unusable.
//! * The server hangs (the call never returns, or the stream takes requests and answers
//!   nothing): the stream pool's `open_timeout` or `stall_timeout` fails the callers
//!   (`OpenTimeout`, not sent; `Stalled`) when it fires, and the stream's client is discarded
//!   (counted in the client pool's `discards`), not given back.
//! * Per-request failures belong in the response message (a status field), never in the gRPC
//!   status of the stream, so one bad request does not tear the stream down.
//!
//! * In order, a peer that answers one request twice is out of step: the surplus response is
//!   found when it arrives with nothing outstanding, and closes the stream (see
//!   [`Correlation::InOrder`]).
//!
//! This module owns only the glue; pooling is [`crate::channel`]'s, [`crate::client`]'s and
//! [`crate::stream`]'s.
//!
//! # Example
//!
//! A GetPage-like service with a generated client `PageServiceClient` (a stand-in is defined
//! in the hidden lines; `slotpool-bench` has the real generated one, and its `tests/grpc.rs`
//! runs this wiring against a tonic server):
//!
//! ```no_run
//! # mod generated {
//! #     use slotpool::stream::{StreamRequest, StreamResponse};
//! #     pub struct GetPageRequest { pub request_id: Option<u64>, pub block: u32 }
//! #     pub struct GetPageResponse { pub request_id: u64, pub status: i32, pub page: Vec<u8> }
//! #     impl StreamRequest for GetPageRequest {
//! #         fn request_id(&self) -> Option<u64> { self.request_id }
//! #         fn set_request_id(&mut self, id: u64) { self.request_id = Some(id) }
//! #     }
//! #     impl StreamResponse for GetPageResponse {
//! #         fn request_id(&self) -> u64 { self.request_id }
//! #     }
//! #     #[derive(Clone)]
//! #     pub struct PageServiceClient<T>(T);
//! #     impl PageServiceClient<tonic::transport::Channel> {
//! #         pub fn new(channel: tonic::transport::Channel) -> Self { Self(channel) }
//! #         pub async fn get_pages(
//! #             &mut self,
//! #             _requests: impl futures_core::Stream<Item = GetPageRequest> + Send + 'static,
//! #         ) -> Result<tonic::Response<tonic::Streaming<GetPageResponse>>, tonic::Status> {
//! #             Err(tonic::Status::unimplemented("a stand-in for generated code"))
//! #         }
//! #     }
//! # }
//! use std::time::Duration;
//!
//! use generated::{GetPageRequest, PageServiceClient};
//! use slotpool::channel::ChannelPool;
//! use slotpool::client::ClientPool;
//! use slotpool::stream::StreamPool;
//! use slotpool::tonic::{ClientFn, EndpointConnector, TonicStreamConnector};
//! use tonic::transport::Endpoint;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let endpoint = Endpoint::from_static("http://127.0.0.1:50051")
//!     .connect_timeout(Duration::from_secs(1));
//! let channels = ChannelPool::builder(EndpointConnector::new(endpoint))
//!     .max_clients_per_channel(16)
//!     .build()?;
//! let clients = ClientPool::builder(channels, ClientFn::new(PageServiceClient::new))
//!     .max_clients(Some(64))
//!     .build()?;
//! let connector = TonicStreamConnector::from_fn(
//!     clients,
//!     |mut client: PageServiceClient<_>, outbound| async move {
//!         Ok(client.get_pages(outbound).await?.into_inner())
//!     },
//! );
//! let streams = StreamPool::builder(connector)
//!     .max_streams(64)
//!     .max_queue_depth(8)
//!     .breaker(5, Duration::from_secs(1))
//!     .build()?;
//!
//! let guard = streams.acquire_timeout(Duration::from_millis(100)).await?;
//! match guard.send(GetPageRequest { request_id: None, block: 7 }).await {
//!     Ok(response) => println!("{} bytes, status {}", response.page.len(), response.status),
//!     // `reach()` says whether the request may have been applied (a retry is safe if not).
//!     Err(error) => println!("{error} ({})", error.reach()),
//! }
//! # Ok(()) }
//! ```
//!
//! # Any generated client: `from_call`
//!
//! A client generated by another crate, with message types that implement nothing of
//! slotpool's: here a stand-in for `tonic-reflection`'s `ServerReflectionClient`, whose
//! `ServerReflectionInfo` stream answers requests in order and carries no id (the crate's
//! `slotpool-bench` tests run this against the real one), and a service that echoes a
//! `request_id`, matched by id through closures:
//!
//! ```no_run
//! # mod generated {
//! #     type Call<Resp> = Result<tonic::Response<tonic::Streaming<Resp>>, tonic::Status>;
//! #     pub struct InfoRequest { pub host: String }
//! #     pub struct InfoResponse { pub valid_host: String }
//! #     pub struct PageRequest { pub request_id: Option<u64>, pub block: u32 }
//! #     pub struct PageResponse { pub request_id: u64, pub page: Vec<u8> }
//! #     #[derive(Clone)]
//! #     pub struct ServerReflectionClient<T>(T);
//! #     impl ServerReflectionClient<tonic::transport::Channel> {
//! #         pub fn new(channel: tonic::transport::Channel) -> Self { Self(channel) }
//! #         pub async fn server_reflection_info(
//! #             &mut self,
//! #             _requests: impl tonic::IntoStreamingRequest<Message = InfoRequest>,
//! #         ) -> Call<InfoResponse> {
//! #             Err(tonic::Status::unimplemented("a stand-in for generated code"))
//! #         }
//! #     }
//! #     #[derive(Clone)]
//! #     pub struct PageServiceClient<T>(T);
//! #     impl PageServiceClient<tonic::transport::Channel> {
//! #         pub fn new(channel: tonic::transport::Channel) -> Self { Self(channel) }
//! #         pub async fn get_pages(
//! #             &mut self,
//! #             _requests: impl tonic::IntoStreamingRequest<Message = PageRequest>,
//! #         ) -> Call<PageResponse> {
//! #             Err(tonic::Status::unimplemented("a stand-in for generated code"))
//! #         }
//! #     }
//! # }
//! use generated::{InfoRequest, PageRequest, PageServiceClient, ServerReflectionClient};
//! use slotpool::channel::ChannelPool;
//! use slotpool::client::ClientPool;
//! use slotpool::stream::StreamPool;
//! use slotpool::tonic::{ClientFn, EndpointConnector, TonicStreamConnector};
//! use tonic::transport::Endpoint;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let endpoint = Endpoint::from_static("http://127.0.0.1:50051");
//! let channels = ChannelPool::builder(EndpointConnector::new(endpoint)).build()?;
//!
//! // In order: the generated method as it is.
//! let clients = ClientPool::builder(channels.clone(), ClientFn::new(ServerReflectionClient::new))
//!     .build()?;
//! let reflection = StreamPool::builder(TonicStreamConnector::from_call(
//!     clients,
//!     |mut client, outbound| async move { client.server_reflection_info(outbound).await },
//! ))
//! .max_queue_depth(8)
//! .build()?;
//! let guard = reflection.acquire().await?;
//! let response = guard.send(InfoRequest { host: "a".into() }).await?;
//! println!("answered for {}", response.valid_host);
//!
//! // By id: say how to set a request's id and read a response's.
//! let clients = ClientPool::builder(channels, ClientFn::new(PageServiceClient::new)).build()?;
//! let pages = StreamPool::builder(
//!     TonicStreamConnector::from_call(
//!         clients,
//!         |mut client, outbound| async move { client.get_pages(outbound).await },
//!     )
//!     .set_request_id(|request, id| request.request_id = Some(id))
//!     .response_id(|response| response.request_id)
//!     // Optional: a caller may choose the id itself.
//!     .request_id(|request| request.request_id),
//! )
//! .build()?;
//! let response = pages.acquire().await?.send(PageRequest { request_id: None, block: 7 }).await?;
//! println!("{} bytes", response.page.len());
//! # Ok(()) }
//! ```

use std::convert::Infallible;
use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::task::{Context, Poll};

use ::tonic::transport::{Channel, Endpoint};
use ::tonic::{Status, Streaming};
use futures_core::Stream;

use crate::channel::ChannelConnector;
use crate::client::{ClientError, ClientFactory, ClientGuard, ClientPool};
use crate::stream::{
    Correlation, Outbound, Retirement, StreamConnector, StreamRequest, StreamResponse,
};
use crate::sync::Arc;

/// Creates tonic channels with [`Endpoint::connect_lazy`]: one HTTP/2 connection each, dialled
/// on first use. Configure timeouts, keep-alive and the like on the [`Endpoint`].
#[derive(Debug, Clone)]
pub struct EndpointConnector {
    endpoint: Endpoint,
}

impl EndpointConnector {
    /// Channels to `endpoint`.
    pub fn new(endpoint: Endpoint) -> Self {
        Self { endpoint }
    }

    /// The endpoint channels are made from.
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }
}

impl From<Endpoint> for EndpointConnector {
    fn from(endpoint: Endpoint) -> Self {
        Self::new(endpoint)
    }
}

impl ChannelConnector for EndpointConnector {
    type Channel = Channel;

    fn connect_lazy(&self, id: u64) -> Channel {
        tracing::debug!(channel = id, uri = %self.endpoint.uri(), "tonic channel created (lazy)");
        self.endpoint.connect_lazy()
    }
}

/// A [`ClientFactory`] from a function of the channel that cannot fail, such as a generated
/// `FooClient::new`.
#[derive(Clone, Copy)]
pub struct ClientFn<F> {
    make: F,
}

impl<F> ClientFn<F> {
    /// A factory calling `make` with a clone of the channel.
    pub fn new(make: F) -> Self {
        Self { make }
    }
}

impl<F> fmt::Debug for ClientFn<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientFn").finish_non_exhaustive()
    }
}

impl<Ch, F, Cl> ClientFactory<Ch> for ClientFn<F>
where
    Ch: Clone + Send + Sync + 'static,
    F: Fn(Ch) -> Cl + Send + Sync + 'static,
    Cl: Send + 'static,
{
    type Client = Cl;
    type Error = Infallible;

    fn make(&self, channel: &Ch) -> impl Future<Output = Result<Cl, Infallible>> + Send {
        let client = (self.make)(channel.clone());
        std::future::ready(Ok(client))
    }
}

/// Why a tonic stream failed to open, or failed once open.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TonicStreamError<E: std::error::Error + 'static> {
    /// No client could be checked out for the stream; nothing was sent.
    #[error("no client for the stream: {0}")]
    Client(#[source] ClientError<E>),
    /// The call failed to open, or the open stream failed, with this gRPC status.
    #[error("gRPC stream failed: {0}")]
    Status(#[source] Status),
}

impl<E: std::error::Error + 'static> TonicStreamError<E> {
    /// The gRPC status code, when the error is a status.
    pub fn code(&self) -> Option<::tonic::Code> {
        match self {
            TonicStreamError::Status(status) => Some(status.code()),
            TonicStreamError::Client(_) => None,
        }
    }
}

/// The bidirectional call that opens one stream: given a client (a clone of the pooled one;
/// tonic clients are cheap handles over their channel) and the outbound half, perform the call
/// and return the inbound `Streaming`.
///
/// Implement it on a unit struct when the connector's type must be named (to keep the pool in
/// a struct field, say); otherwise [`TonicStreamConnector::from_fn`] takes a closure.
///
/// ```no_run
/// # use slotpool::stream::{Outbound, StreamRequest, StreamResponse};
/// # use slotpool::tonic::StreamCall;
/// # pub struct Req(Option<u64>);
/// # pub struct Resp(u64);
/// # impl StreamRequest for Req {
/// #     fn request_id(&self) -> Option<u64> { self.0 }
/// #     fn set_request_id(&mut self, id: u64) { self.0 = Some(id) }
/// # }
/// # impl StreamResponse for Resp { fn request_id(&self) -> u64 { self.0 } }
/// # #[derive(Clone)]
/// # pub struct PageServiceClient;
/// # impl PageServiceClient {
/// #     pub async fn get_pages(
/// #         &mut self,
/// #         _requests: impl futures_core::Stream<Item = Req> + Send + 'static,
/// #     ) -> Result<tonic::Response<tonic::Streaming<Resp>>, tonic::Status> {
/// #         Err(tonic::Status::unimplemented("a stand-in for generated code"))
/// #     }
/// # }
/// /// `PageService.GetPages`.
/// struct GetPages;
///
/// impl StreamCall<PageServiceClient> for GetPages {
///     type Request = Req;
///     type Response = Resp;
///
///     async fn call(
///         &self,
///         mut client: PageServiceClient,
///         outbound: Outbound<Req>,
///     ) -> Result<tonic::Streaming<Resp>, tonic::Status> {
///         Ok(client.get_pages(outbound).await?.into_inner())
///     }
/// }
/// ```
pub trait StreamCall<Client>: Send + Sync + 'static {
    /// The request message (for [`TonicStreamConnector::new`], a [`StreamRequest`]).
    type Request: Send + 'static;
    /// The response message (for [`TonicStreamConnector::new`], a [`StreamResponse`]).
    type Response: Send + 'static;

    /// Performs the call. Runs on the stream's driver task.
    fn call(
        &self,
        client: Client,
        outbound: Outbound<Self::Request>,
    ) -> impl Future<Output = Result<Streaming<Self::Response>, Status>> + Send;
}

/// A [`StreamCall`] from a closure; see [`TonicStreamConnector::from_fn`].
pub struct CallFn<F, Req, Resp> {
    call: F,
    _messages: PhantomData<fn(Req) -> Resp>,
}

impl<F, Req, Resp> CallFn<F, Req, Resp> {
    /// Wraps `call`.
    pub fn new(call: F) -> Self {
        Self {
            call,
            _messages: PhantomData,
        }
    }
}

impl<F, Req, Resp> fmt::Debug for CallFn<F, Req, Resp> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CallFn").finish_non_exhaustive()
    }
}

impl<Client, F, Fut, Out, Req, Resp> StreamCall<Client> for CallFn<F, Req, Resp>
where
    F: Fn(Client, Outbound<Req>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Out, Status>> + Send,
    Out: IntoStreaming<Message = Resp>,
    Req: Send + 'static,
    Resp: Send + 'static,
{
    type Request = Req;
    type Response = Resp;

    fn call(
        &self,
        client: Client,
        outbound: Outbound<Req>,
    ) -> impl Future<Output = Result<Streaming<Resp>, Status>> + Send {
        let call = (self.call)(client, outbound);
        async move { call.await.map(IntoStreaming::into_streaming) }
    }
}

/// The future a [`BoxedCall`] returns.
pub type BoxedCallFuture<Resp> =
    Pin<Box<dyn Future<Output = Result<Streaming<Resp>, Status>> + Send>>;

/// A [`StreamCall`] from a closure, boxed behind a type that can be written (the closure's
/// own type cannot): see [`TonicStreamConnector::from_boxed_call`] and
/// [`BoxedCallConnector`]. One allocation per stream opened, none per request.
pub struct BoxedCall<Client, Req, Resp> {
    call: Box<dyn Fn(Client, Outbound<Req>) -> BoxedCallFuture<Resp> + Send + Sync>,
}

impl<Client, Req, Resp> BoxedCall<Client, Req, Resp> {
    /// Boxes `call`: `|mut client, outbound| async move { client.method(outbound).await }`.
    pub fn new<Call, Fut, Out>(call: Call) -> Self
    where
        Call: Fn(Client, Outbound<Req>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Out, Status>> + Send + 'static,
        Out: IntoStreaming<Message = Resp>,
    {
        Self {
            call: Box::new(move |client, outbound| {
                let call = call(client, outbound);
                Box::pin(async move { call.await.map(IntoStreaming::into_streaming) })
            }),
        }
    }
}

impl<Client, Req, Resp> fmt::Debug for BoxedCall<Client, Req, Resp> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BoxedCall").finish_non_exhaustive()
    }
}

impl<Client, Req, Resp> StreamCall<Client> for BoxedCall<Client, Req, Resp>
where
    Client: 'static,
    Req: Send + 'static,
    Resp: Send + 'static,
{
    type Request = Req;
    type Response = Resp;

    fn call(
        &self,
        client: Client,
        outbound: Outbound<Req>,
    ) -> impl Future<Output = Result<Streaming<Resp>, Status>> + Send {
        (self.call)(client, outbound)
    }
}

/// The connector [`TonicStreamConnector::from_boxed_call`] builds, by a name users can write
/// (a struct field holding a `StreamPool<BoxedCallConnector<..>>`, a type alias): the channel
/// connector `C`, the client factory `F`, the request and response messages. Responses are
/// matched in order, as [`TonicStreamConnector::from_call`]'s are until ids are set.
pub type BoxedCallConnector<C, F, Req, Resp> = TonicStreamConnector<
    C,
    F,
    BoxedCall<<F as ClientFactory<<C as ChannelConnector>::Channel>>::Client, Req, Resp>,
    Ids<Unset, Unset, Unset>,
>;

/// What a bidirectional call returns that holds the inbound [`Streaming`]: the generated
/// method's own `tonic::Response<Streaming<_>>`, or the `Streaming` itself.
pub trait IntoStreaming: Send {
    /// The response message.
    type Message;

    /// The inbound half.
    fn into_streaming(self) -> Streaming<Self::Message>;
}

impl<M: Send> IntoStreaming for Streaming<M> {
    type Message = M;

    fn into_streaming(self) -> Streaming<M> {
        self
    }
}

impl<M: Send> IntoStreaming for ::tonic::Response<Streaming<M>> {
    type Message = M;

    fn into_streaming(self) -> Streaming<M> {
        self.into_inner()
    }
}

/// How a [`TonicStreamConnector`] matches responses to requests: its last type parameter.
///
/// * [`MessageIds`] ([`TonicStreamConnector::new`] and [`TonicStreamConnector::from_fn`]):
///   by id, through the messages' [`StreamRequest`] and [`StreamResponse`].
/// * [`Ids`] ([`TonicStreamConnector::from_call`]): in order while no id closure is given
///   (`Ids<Unset, Unset, Unset>`), by id once [`set_request_id`] and [`response_id`] are
///   (and, optionally, [`request_id`]); no trait of slotpool's on the messages either way.
///
/// [`set_request_id`]: TonicStreamConnector::set_request_id
/// [`response_id`]: TonicStreamConnector::response_id
/// [`request_id`]: TonicStreamConnector::request_id
pub trait Correlate<Req, Resp>: Send + Sync + 'static {
    /// By id or in order.
    const CORRELATION: Correlation;
    /// See [`StreamConnector::request_id`].
    fn request_id(&self, request: &Req) -> Option<u64>;
    /// See [`StreamConnector::set_request_id`].
    fn set_request_id(&self, request: &mut Req, id: u64);
    /// See [`StreamConnector::response_id`].
    fn response_id(&self, response: &Resp) -> Option<u64>;
}

/// The messages carry their ids: [`StreamRequest`] and [`StreamResponse`]. See [`Correlate`].
#[derive(Debug, Clone, Copy, Default)]
pub struct MessageIds;

impl<Req: StreamRequest, Resp: StreamResponse> Correlate<Req, Resp> for MessageIds {
    const CORRELATION: Correlation = Correlation::ById;

    #[inline]
    fn request_id(&self, request: &Req) -> Option<u64> {
        request.request_id()
    }

    #[inline]
    fn set_request_id(&self, request: &mut Req, id: u64) {
        request.set_request_id(id);
    }

    #[inline]
    fn response_id(&self, response: &Resp) -> Option<u64> {
        Some(response.request_id())
    }
}

/// Ids read and set by closures, or none (in order) while none is given. See [`Correlate`].
#[derive(Clone, Copy)]
pub struct Ids<ReadRequest, SetRequest, ReadResponse> {
    request_id: ReadRequest,
    set_request_id: SetRequest,
    response_id: ReadResponse,
}

/// An id closure not given (see [`Ids`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct Unset;

impl<R, S, G> fmt::Debug for Ids<R, S, G> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ids").finish_non_exhaustive()
    }
}

impl<Req, Resp> Correlate<Req, Resp> for Ids<Unset, Unset, Unset> {
    const CORRELATION: Correlation = Correlation::InOrder;

    fn request_id(&self, _request: &Req) -> Option<u64> {
        None
    }

    fn set_request_id(&self, _request: &mut Req, _id: u64) {}

    fn response_id(&self, _response: &Resp) -> Option<u64> {
        None
    }
}

impl<Req, Resp, R, S, G> Correlate<Req, Resp> for Ids<R, S, G>
where
    R: ReadRequestId<Req>,
    S: Fn(&mut Req, u64) + Send + Sync + 'static,
    G: Fn(&Resp) -> u64 + Send + Sync + 'static,
{
    const CORRELATION: Correlation = Correlation::ById;

    #[inline]
    fn request_id(&self, request: &Req) -> Option<u64> {
        self.request_id.read(request)
    }

    #[inline]
    fn set_request_id(&self, request: &mut Req, id: u64) {
        (self.set_request_id)(request, id);
    }

    #[inline]
    fn response_id(&self, response: &Resp) -> Option<u64> {
        Some((self.response_id)(response))
    }
}

/// Reads a caller-supplied request id: a closure, or [`Unset`] (the pool assigns every id).
pub trait ReadRequestId<Req>: Send + Sync + 'static {
    /// The id `request` carries, if any.
    fn read(&self, request: &Req) -> Option<u64>;
}

impl<Req> ReadRequestId<Req> for Unset {
    fn read(&self, _request: &Req) -> Option<u64> {
        None
    }
}

impl<Req, F> ReadRequestId<Req> for F
where
    F: Fn(&Req) -> Option<u64> + Send + Sync + 'static,
{
    #[inline]
    fn read(&self, request: &Req) -> Option<u64> {
        self(request)
    }
}

/// Opens each stream of a [`StreamPool`](crate::stream::StreamPool) as one bidirectional tonic
/// call on a client from a [`ClientPool`]. See the [module documentation](self).
///
/// The [`StreamCall`] gets a clone of the pooled client and the outbound half. The checked-out
/// [`ClientGuard`] stays with the stream (inside [`TonicInbound`]) until the stream ends or is
/// reaped, so the client is exclusive to that stream meanwhile; a stream retired as hung
/// discards it (see [`Retirement`]).
///
/// How responses find their requests is the last type parameter (see [`Correlate`]):
/// [`TonicStreamConnector::new`] and [`TonicStreamConnector::from_fn`] read the ids through the
/// messages' [`StreamRequest`] and [`StreamResponse`]; [`TonicStreamConnector::from_call`]
/// takes any generated client's messages as they are, in order unless you give id closures.
pub struct TonicStreamConnector<C, F, Call, M = MessageIds>
where
    C: ChannelConnector,
    F: ClientFactory<C::Channel>,
{
    clients: Arc<ClientPool<C, F>>,
    call: Call,
    ids: M,
}

impl<C, F, Call> TonicStreamConnector<C, F, Call>
where
    C: ChannelConnector,
    F: ClientFactory<C::Channel>,
    F::Client: Clone,
    Call: StreamCall<F::Client>,
{
    /// A connector opening streams with `call` on clients from `clients`; the messages carry
    /// their ids ([`StreamRequest`], [`StreamResponse`]).
    pub fn new(clients: Arc<ClientPool<C, F>>, call: Call) -> Self {
        Self {
            clients,
            call,
            ids: MessageIds,
        }
    }
}

impl<C, F, Fn_, Fut, Out, Req, Resp> TonicStreamConnector<C, F, CallFn<Fn_, Req, Resp>>
where
    C: ChannelConnector,
    F: ClientFactory<C::Channel>,
    F::Client: Clone,
    Fn_: Fn(F::Client, Outbound<Req>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Out, Status>> + Send,
    Out: IntoStreaming<Message = Resp>,
    Req: StreamRequest,
    Resp: StreamResponse,
{
    /// A connector opening streams with the closure `call` on clients from `clients`:
    /// `|mut client, outbound| async move { client.method(outbound).await }`. The messages carry
    /// their ids ([`StreamRequest`], [`StreamResponse`]); for messages of another crate, see
    /// [`TonicStreamConnector::from_call`].
    pub fn from_fn(clients: Arc<ClientPool<C, F>>, call: Fn_) -> Self {
        Self::new(clients, CallFn::new(call))
    }
}

impl<C, F, Fn_, Fut, Out, Req, Resp>
    TonicStreamConnector<C, F, CallFn<Fn_, Req, Resp>, Ids<Unset, Unset, Unset>>
where
    C: ChannelConnector,
    F: ClientFactory<C::Channel>,
    F::Client: Clone,
    Fn_: Fn(F::Client, Outbound<Req>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Out, Status>> + Send,
    Out: IntoStreaming<Message = Resp>,
    Req: Send + 'static,
    Resp: Send + 'static,
{
    /// A connector opening streams with the closure `call`, on clients from `clients`, of any
    /// generated client as it is: `|mut client, outbound| async move {
    /// client.method(outbound).await }`. Its messages need no trait of slotpool's.
    ///
    /// Responses are matched to requests **in order** ([`Correlation::InOrder`]: the peer
    /// answers each request once, in the order received) unless you say how to read and set
    /// ids: [`set_request_id`](TonicStreamConnector::set_request_id) and
    /// [`response_id`](TonicStreamConnector::response_id) together make it match **by id**
    /// ([`Correlation::ById`]), and [`request_id`](TonicStreamConnector::request_id) lets a
    /// caller choose a request's id.
    pub fn from_call(clients: Arc<ClientPool<C, F>>, call: Fn_) -> Self {
        Self {
            clients,
            call: CallFn::new(call),
            ids: Ids {
                request_id: Unset,
                set_request_id: Unset,
                response_id: Unset,
            },
        }
    }
}

impl<C, F, Req, Resp> BoxedCallConnector<C, F, Req, Resp>
where
    C: ChannelConnector,
    F: ClientFactory<C::Channel>,
    F::Client: Clone,
    Req: Send + 'static,
    Resp: Send + 'static,
{
    /// [`TonicStreamConnector::from_call`] with the call boxed ([`BoxedCall`]), so that the
    /// connector's type has a name, [`BoxedCallConnector<C, F, Req, Resp>`](BoxedCallConnector),
    /// for a pool kept in a struct field. The closure is the same, and so is the matching (in
    /// order).
    pub fn from_boxed_call<Call, Fut, Out>(clients: Arc<ClientPool<C, F>>, call: Call) -> Self
    where
        Call: Fn(F::Client, Outbound<Req>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Out, Status>> + Send + 'static,
        Out: IntoStreaming<Message = Resp>,
    {
        Self {
            clients,
            call: BoxedCall::new(call),
            ids: Ids {
                request_id: Unset,
                set_request_id: Unset,
                response_id: Unset,
            },
        }
    }
}

impl<C, F, Call, R, S, G> TonicStreamConnector<C, F, Call, Ids<R, S, G>>
where
    C: ChannelConnector,
    F: ClientFactory<C::Channel>,
    Call: StreamCall<F::Client>,
{
    /// By id: how to read the id a caller put on a request (`None`: let the pool assign one
    /// with [`set_request_id`](TonicStreamConnector::set_request_id)). Optional; without it
    /// the pool assigns every id.
    pub fn request_id<R2>(self, read: R2) -> TonicStreamConnector<C, F, Call, Ids<R2, S, G>>
    where
        R2: Fn(&Call::Request) -> Option<u64> + Send + Sync + 'static,
    {
        let Ids {
            set_request_id,
            response_id,
            ..
        } = self.ids;
        TonicStreamConnector {
            clients: self.clients,
            call: self.call,
            ids: Ids {
                request_id: read,
                set_request_id,
                response_id,
            },
        }
    }

    /// By id: how to stamp the id the pool assigned on a request. Needed, with
    /// [`response_id`](TonicStreamConnector::response_id), to match by id.
    pub fn set_request_id<S2>(self, set: S2) -> TonicStreamConnector<C, F, Call, Ids<R, S2, G>>
    where
        S2: Fn(&mut Call::Request, u64) + Send + Sync + 'static,
    {
        let Ids {
            request_id,
            response_id,
            ..
        } = self.ids;
        TonicStreamConnector {
            clients: self.clients,
            call: self.call,
            ids: Ids {
                request_id,
                set_request_id: set,
                response_id,
            },
        }
    }

    /// By id: how to read the id of the request a response answers. Needed, with
    /// [`set_request_id`](TonicStreamConnector::set_request_id), to match by id.
    pub fn response_id<G2>(self, read: G2) -> TonicStreamConnector<C, F, Call, Ids<R, S, G2>>
    where
        G2: Fn(&Call::Response) -> u64 + Send + Sync + 'static,
    {
        let Ids {
            request_id,
            set_request_id,
            ..
        } = self.ids;
        TonicStreamConnector {
            clients: self.clients,
            call: self.call,
            ids: Ids {
                request_id,
                set_request_id,
                response_id: read,
            },
        }
    }
}

impl<C, F, Call, M> TonicStreamConnector<C, F, Call, M>
where
    C: ChannelConnector,
    F: ClientFactory<C::Channel>,
{
    /// The client pool streams take their clients from.
    pub fn clients(&self) -> &Arc<ClientPool<C, F>> {
        &self.clients
    }
}

impl<C, F, Call, M> TonicStreamConnector<C, F, Call, M>
where
    C: ChannelConnector,
    F: ClientFactory<C::Channel>,
    F::Client: Clone,
    Call: StreamCall<F::Client>,
{
    /// Checks out a client, then performs the call on a clone of it.
    ///
    /// Cancel-safety (the stream pool drops this future only when it shuts down or the open
    /// times out): dropping it while it waits for a client takes nothing; dropping it during
    /// the call returns the client to the pool and abandons the call.
    async fn open(
        &self,
        outbound: Outbound<Call::Request>,
    ) -> Result<TonicInbound<C, F, Call::Response>, TonicStreamError<F::Error>> {
        let retirement = outbound.retirement();
        let guard = self
            .clients
            .acquire()
            .await
            .map_err(TonicStreamError::Client)?;
        let client = StreamClient {
            guard: Some(guard),
            retirement,
        };
        let streaming = self
            .call
            .call(client.get().clone(), outbound)
            .await
            .map_err(TonicStreamError::Status)?;
        Ok(TonicInbound {
            streaming,
            _client: Box::new(client),
        })
    }
}

impl<C, F, Call, M> fmt::Debug for TonicStreamConnector<C, F, Call, M>
where
    C: ChannelConnector,
    F: ClientFactory<C::Channel>,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TonicStreamConnector")
            .field("clients", &self.clients)
            .finish_non_exhaustive()
    }
}

impl<C, F, Call, M> StreamConnector for TonicStreamConnector<C, F, Call, M>
where
    C: ChannelConnector,
    F: ClientFactory<C::Channel>,
    F::Client: Clone,
    Call: StreamCall<F::Client>,
    M: Correlate<Call::Request, Call::Response>,
{
    type Request = Call::Request;
    type Response = Call::Response;
    type Error = TonicStreamError<F::Error>;
    type Inbound = TonicInbound<C, F, Call::Response>;

    const CORRELATION: Correlation = M::CORRELATION;

    /// Checks out a client, then performs the call on a clone of it (see
    /// [`TonicStreamConnector`]).
    fn connect(
        &self,
        outbound: Outbound<Call::Request>,
    ) -> impl Future<Output = Result<Self::Inbound, TonicStreamError<F::Error>>> + Send {
        self.open(outbound)
    }

    #[inline]
    fn request_id(&self, request: &Call::Request) -> Option<u64> {
        self.ids.request_id(request)
    }

    #[inline]
    fn set_request_id(&self, request: &mut Call::Request, id: u64) {
        self.ids.set_request_id(request, id);
    }

    #[inline]
    fn response_id(&self, response: &Call::Response) -> Option<u64> {
        self.ids.response_id(response)
    }
}

/// The inbound half of a tonic stream: the call's `Streaming`, with the stream's client checked
/// out until this is dropped (see [`TonicStreamConnector`]).
pub struct TonicInbound<C, F, Resp>
where
    C: ChannelConnector,
    F: ClientFactory<C::Channel>,
{
    streaming: Streaming<Resp>,
    /// Held, never read: keeps the client (and its channel share) in use by this stream.
    /// Boxed so that the inbound half is `Unpin` whatever the client type. Dropped after
    /// `streaming` (field order).
    _client: Box<StreamClient<C, F>>,
}

/// A stream's client, checked out for the stream's whole life (from the connect on): given
/// back to the client pool when the stream ends, or **discarded** when the stream pool retired
/// the stream as hung (its `open_timeout` or `stall_timeout` fired, see [`Retirement`]), so
/// that a client, and its share of the connection, to a peer that hangs goes at once instead
/// of waiting idle for the client pool's reaper.
struct StreamClient<C, F>
where
    C: ChannelConnector,
    F: ClientFactory<C::Channel>,
{
    /// `Some` until dropped.
    guard: Option<ClientGuard<C, F>>,
    retirement: Retirement,
}

impl<C, F> StreamClient<C, F>
where
    C: ChannelConnector,
    F: ClientFactory<C::Channel>,
{
    fn get(&self) -> &F::Client {
        match &self.guard {
            Some(guard) => guard,
            None => unreachable!("a stream's client is held until it is dropped"),
        }
    }
}

impl<C, F> Drop for StreamClient<C, F>
where
    C: ChannelConnector,
    F: ClientFactory<C::Channel>,
{
    fn drop(&mut self) {
        if let Some(guard) = self.guard.take() {
            if self.retirement.hung() {
                guard.discard();
            }
        }
    }
}

impl<C, F> fmt::Debug for StreamClient<C, F>
where
    C: ChannelConnector,
    F: ClientFactory<C::Channel>,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StreamClient")
            .field("guard", &self.guard)
            .field("retirement", &self.retirement)
            .finish()
    }
}

impl<C, F, Resp> fmt::Debug for TonicInbound<C, F, Resp>
where
    C: ChannelConnector,
    F: ClientFactory<C::Channel>,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TonicInbound")
            .field("client", &self._client)
            .finish_non_exhaustive()
    }
}

impl<C, F, Resp> Stream for TonicInbound<C, F, Resp>
where
    C: ChannelConnector,
    F: ClientFactory<C::Channel>,
    Resp: Send + 'static,
{
    type Item = Result<Resp, TonicStreamError<F::Error>>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        Pin::new(&mut this.streaming)
            .poll_next(cx)
            .map(|item| item.map(|result| result.map_err(TonicStreamError::Status)))
    }
}
