//! `TonicStreamConnector::from_call` end to end over real tonic on 127.0.0.1: any generated
//! client plugged into slotpool's nested stack (StreamPool → ClientPool → ChannelPool) as it
//! is, with no wrapper type and no trait implemented on its messages.
//!
//! * Against a service this project did not write: `tonic-reflection`'s `ServerReflectionInfo`,
//!   a bidi stream that answers requests in order and carries no request id, through the
//!   crate's own generated `ServerReflectionClient`, in order. Each response echoes the request
//!   it answers (`original_request`), so every test checks that each caller got its own.
//! * Against our GetPage server, by id, the ids read and set by closures.
//!
//! No test sleeps or asserts on time: waits are for events (the pools' stats, polled with
//! `yield_now`), idle time runs on `slotpool::Clock::mock()`, and every wait sits under
//! [`HANG_GUARD`], a deadline that only turns a hang into a failure.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use slotpool::channel::ChannelPool;
use slotpool::client::ClientPool;
use slotpool::stream::{RequestError, StreamConnector, StreamPool};
use slotpool::tonic::{
    BoxedCallConnector, ClientFn, EndpointConnector, TonicStreamConnector, TonicStreamError,
};
use slotpool::Reach;
use slotpool_bench::grpc::server::TestServer;
use slotpool_bench::grpc::{page_request, page_stamp, PageServiceClient};
use tokio::runtime::Handle;
use tonic::transport::{Channel, Endpoint};
use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
use tonic_reflection::pb::v1::{ServerReflectionRequest, ServerReflectionResponse};

/// Turns a hang into a test failure. Never reached when things work.
const HANG_GUARD: Duration = Duration::from_secs(60);
/// A caller's deadline for one request while the server is down.
const CALLER_DEADLINE: Duration = Duration::from_secs(20);
const IDLE: Duration = Duration::from_secs(1);
/// The one service a bare reflection server lists: itself.
const REFLECTION: &str = "grpc.reflection.v1.ServerReflection";

async fn guarded<F: Future>(what: &str, future: F) -> F::Output {
    match tokio::time::timeout(HANG_GUARD, future).await {
        Ok(output) => output,
        Err(_) => panic!("hung: {what}"),
    }
}

/// Waits (yielding, never sleeping) until `condition` holds.
async fn eventually(what: &str, mut condition: impl FnMut() -> bool) {
    guarded(what, async {
        while !condition() {
            tokio::task::yield_now().await;
        }
    })
    .await;
}

/// A `tonic-reflection` server on 127.0.0.1, in a runtime of its own: killing it shuts that
/// runtime down, which drops every task and socket of the server at once, as if its process
/// had died; restarting binds the same port again.
struct ReflectionServer {
    addr: SocketAddr,
    runtime: Option<tokio::runtime::Runtime>,
}

impl ReflectionServer {
    fn start() -> io::Result<Self> {
        let mut server = Self {
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            runtime: None,
        };
        server.serve()?;
        Ok(server)
    }

    fn uri(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Binds `self.addr` (`SO_REUSEADDR`, so a restart can take the same port) and serves.
    fn serve(&mut self) -> io::Result<()> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()?;
        let listener = {
            let _entered = runtime.enter();
            let socket = tokio::net::TcpSocket::new_v4()?;
            socket.set_reuseaddr(true)?;
            socket.bind(self.addr)?;
            socket.listen(1024)?
        };
        self.addr = listener.local_addr()?;
        let service = tonic_reflection::server::Builder::configure()
            .build_v1()
            .map_err(io::Error::other)?;
        runtime.spawn(async move {
            let _ = tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener))
                .await;
        });
        self.runtime = Some(runtime);
        Ok(())
    }

    /// Kills the server: returns once every task of its runtime is gone and its sockets are
    /// closed.
    async fn kill(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            let stopped = tokio::task::spawn_blocking(move || runtime.shutdown_timeout(HANG_GUARD));
            guarded("the server's runtime stops", stopped)
                .await
                .expect("shutdown did not panic");
        }
    }

    fn restart(&mut self) -> io::Result<()> {
        self.serve()
    }
}

impl Drop for ReflectionServer {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// The channel pool.
type Channels = Arc<ChannelPool<EndpointConnector>>;
/// The client pool of a generated client `Cl`, made by its `new`.
type Clients<Cl> = Arc<ClientPool<EndpointConnector, ClientFn<fn(Channel) -> Cl>>>;
type ReflectionError = RequestError<TonicStreamError<Infallible>>;

/// The reflection stream's connector (a `from_call` closure type, which cannot be named).
trait Reflection:
    StreamConnector<
    Request = ServerReflectionRequest,
    Response = ServerReflectionResponse,
    Error = TonicStreamError<Infallible>,
>
{
}

impl<S> Reflection for S where
    S: StreamConnector<
        Request = ServerReflectionRequest,
        Response = ServerReflectionResponse,
        Error = TonicStreamError<Infallible>,
    >
{
}

/// slotpool's three pools, nested, over any generated client: the stream pool's connector is
/// `from_call` over the client pool.
struct Stack<Cl: Send + 'static, S: StreamConnector> {
    channels: Channels,
    clients: Clients<Cl>,
    streams: Arc<StreamPool<S>>,
}

/// Open resources at each level: streams not Empty, live clients, open channels.
fn open<Cl: Send + 'static, S: StreamConnector>(stack: &Stack<Cl, S>) -> (usize, usize, usize) {
    let table = stack.streams.stats().table;
    (
        table.starting + table.ready + table.draining,
        stack.clients.stats().clients,
        stack.channels.stats().channels,
    )
}

/// Reaps the three pools in nesting order at `now`; how many of each it closed.
fn reap<Cl: Send + 'static, S: StreamConnector>(
    stack: &Stack<Cl, S>,
    now: slotpool::Instant,
) -> (usize, usize, usize) {
    (
        stack.streams.reap(now),
        stack.clients.reap(now),
        stack.channels.reap(now),
    )
}

/// The channel and client pools to `uri` on `clock` (no background reaper: tests reap by
/// hand), clients made by the generated `new`.
fn pools<Cl: Send + 'static>(
    uri: &str,
    clock: &slotpool::Clock,
    new_client: fn(Channel) -> Cl,
) -> (Channels, Clients<Cl>) {
    let endpoint = Endpoint::from_shared(uri.to_string())
        .expect("a valid uri")
        .connect_timeout(Duration::from_secs(5))
        .tcp_nodelay(true);
    let channels = ChannelPool::builder(EndpointConnector::new(endpoint))
        .max_clients_per_channel(4)
        .idle_timeout(IDLE)
        .reap_interval(None)
        .clock(clock.clone())
        .build()
        .expect("valid channel pool");
    let clients = ClientPool::builder(Arc::clone(&channels), ClientFn::new(new_client))
        .idle_timeout(IDLE)
        .reap_interval(None)
        .clock(clock.clone())
        .build()
        .expect("valid client pool");
    (channels, clients)
}

/// The reflection stack: `ServerReflectionInfo` of the generated client, in order, at `depth`
/// on at most `max_streams` streams.
fn reflection_stack(
    server: &ReflectionServer,
    clock: &slotpool::Clock,
    max_streams: usize,
    depth: usize,
) -> Stack<ServerReflectionClient<Channel>, impl Reflection> {
    let (channels, clients) = pools(&server.uri(), clock, ServerReflectionClient::new);
    let connector =
        TonicStreamConnector::from_call(Arc::clone(&clients), |mut client, outbound| async move {
            client.server_reflection_info(outbound).await
        });
    let streams = StreamPool::builder(connector)
        .max_streams(max_streams)
        .max_queue_depth(depth)
        .idle_timeout(IDLE)
        .reap_interval(None)
        .clock(clock.clone())
        .build()
        .expect("valid stream pool");
    Stack {
        channels,
        clients,
        streams: Arc::new(streams),
    }
}

/// A reflection request tagged `tag` (the server echoes it back in `original_request` and
/// `valid_host`): even `kind`s list the services, odd ones ask for the file defining one, so
/// a response that reached the wrong caller differs in kind as well as in tag.
fn ask(tag: String, kind: u32) -> ServerReflectionRequest {
    let message_request = if kind.is_multiple_of(2) {
        MessageRequest::ListServices(String::new())
    } else {
        MessageRequest::FileContainingSymbol(REFLECTION.to_string())
    };
    ServerReflectionRequest {
        host: tag,
        message_request: Some(message_request),
    }
}

/// Asserts that `response` answers `request`.
fn assert_answers(request: &ServerReflectionRequest, response: &ServerReflectionResponse) {
    assert_eq!(
        response.original_request.as_ref(),
        Some(request),
        "a caller got the response to another's request"
    );
    assert_eq!(response.valid_host, request.host);
    match (&request.message_request, &response.message_response) {
        (
            Some(MessageRequest::ListServices(_)),
            Some(MessageResponse::ListServicesResponse(list)),
        ) => assert!(list
            .service
            .iter()
            .any(|service| service.name == REFLECTION)),
        (
            Some(MessageRequest::FileContainingSymbol(_)),
            Some(MessageResponse::FileDescriptorResponse(files)),
        ) => assert!(!files.file_descriptor_proto.is_empty()),
        (asked, answered) => panic!("{asked:?} answered with {answered:?}"),
    }
}

/// One request through the stack, checked against its response.
async fn round_trip<S>(streams: &Arc<StreamPool<S>>, tag: String, kind: u32)
where
    S: Reflection,
{
    let request = ask(tag, kind);
    let guard = streams.acquire().await.expect("room on a stream");
    let response = guard.send(request.clone()).await.expect("answered");
    assert_answers(&request, &response);
}

/// Sends on `count` guards acquired before any is sent, so that all `count` requests are on
/// one stream's wire together; checks each caller's response.
async fn burst<S>(streams: &Arc<StreamPool<S>>, round: u32, count: u32)
where
    S: Reflection,
{
    let mut guards = Vec::new();
    for _ in 0..count {
        let guard = Arc::clone(streams)
            .acquire_owned()
            .await
            .expect("room on a stream");
        assert_eq!(guard.stream_index(), Some(0), "all on the first stream");
        guards.push(guard);
    }
    let sends: Vec<_> = guards
        .into_iter()
        .zip(0..)
        .map(|(guard, i)| {
            let request = ask(format!("burst{round}-{i}"), i);
            tokio::spawn(async move {
                let response = guard.send(request.clone()).await;
                (request, response)
            })
        })
        .collect();
    for send in sends {
        let (request, response) = guarded("a burst request", send).await.expect("no panic");
        assert_answers(&request, &response.expect("answered"));
    }
}

/// Throughput, in order: a burst of 8 requests on one stream's wire at once, then 16 callers
/// × 50 requests at depth 8 on up to 4 streams, mixing two kinds of request. Every response
/// echoes the request it answers, so each caller is checked to get its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reflection_in_order_at_depth_every_caller_gets_its_own_response() {
    let server = ReflectionServer::start().expect("bind 127.0.0.1:0");
    let stack = reflection_stack(&server, &slotpool::Clock::new(), 4, 8);
    burst(&stack.streams, 0, 8).await;
    let tasks: Vec<_> = (0..16u32)
        .map(|task| {
            let streams = Arc::clone(&stack.streams);
            tokio::spawn(async move {
                for round in 0..50u32 {
                    round_trip(&streams, format!("t{task}-r{round}"), task + round).await;
                }
            })
        })
        .collect();
    for task in tasks {
        guarded("a caller task", task).await.expect("no panic");
    }
    let stats = stack.streams.stats();
    assert_eq!(
        (stats.completed, stats.failed, stats.cancelled),
        (808, 0, 0)
    );
    assert_eq!(
        (stats.late_responses, stats.unknown_responses),
        (0, 0),
        "{stats:?}"
    );
    assert_eq!(stats.stream_failures, 0);
    assert!(stats.spin_ups <= 4);
    eventually("all load released", || {
        stack.streams.stats().table.in_flight == 0
    })
    .await;
}

/// The reflection stream pool by a type one can write: what `from_boxed_call` is for.
type NamedReflectionPool = StreamPool<
    BoxedCallConnector<
        EndpointConnector,
        ClientFn<fn(Channel) -> ServerReflectionClient<Channel>>,
        ServerReflectionRequest,
        ServerReflectionResponse,
    >,
>;

/// A service's state, holding the pool in a plain field (no `impl Trait`, no trait alias).
struct ReflectionService {
    streams: Arc<NamedReflectionPool>,
}

/// `from_boxed_call`: the same closure as `from_call`, a connector type that can be named,
/// and a pool that handlers use from tasks of their own; requests go through in order, each
/// caller getting its own answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_boxed_call_connector_has_a_name_and_works_the_same() {
    let server = ReflectionServer::start().expect("bind 127.0.0.1:0");
    let clock = slotpool::Clock::new();
    let (_channels, clients) = pools(&server.uri(), &clock, ServerReflectionClient::new);
    let connector =
        TonicStreamConnector::from_boxed_call(clients, |mut client, outbound| async move {
            client.server_reflection_info(outbound).await
        });
    let service = ReflectionService {
        streams: Arc::new(
            StreamPool::builder(connector)
                .max_streams(2)
                .max_queue_depth(4)
                .reap_interval(None)
                .build()
                .expect("valid stream pool"),
        ),
    };
    let tasks: Vec<_> = (0..4u32)
        .map(|task| {
            let streams = Arc::clone(&service.streams);
            // What a handler does, in a task of its own.
            tokio::spawn(async move {
                for round in 0..10u32 {
                    let request = ask(format!("b{task}-r{round}"), task + round);
                    let guard = streams.acquire().await.expect("room on a stream");
                    let response = guard.send(request.clone()).await.expect("answered");
                    assert_answers(&request, &response);
                }
            })
        })
        .collect();
    for task in tasks {
        guarded("a caller task", task).await.expect("no panic");
    }
    let stats = service.streams.stats();
    assert_eq!((stats.completed, stats.failed), (40, 0), "{stats:?}");
    assert_eq!((stats.late_responses, stats.unknown_responses), (0, 0));
}

/// Server killed: every request ends in a typed error within the caller's deadline, a
/// connect failure among them (not sent, safe to retry); server back on the same port: the
/// pool recovers by itself, in order at depth as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reflection_server_killed_fails_typed_and_recovers_on_restart() {
    let mut server = ReflectionServer::start().expect("bind 127.0.0.1:0");
    let stack = reflection_stack(&server, &slotpool::Clock::new(), 4, 8);
    burst(&stack.streams, 0, 8).await;

    server.kill().await;
    let mut connect_failure = None;
    for attempt in 0..50u32 {
        let request = ask(format!("down{attempt}"), attempt);
        let sent = async {
            let guard = stack.streams.acquire_timeout(CALLER_DEADLINE).await?;
            Ok::<_, Box<dyn std::error::Error>>(guard.send(request).await)
        };
        let outcome = tokio::time::timeout(CALLER_DEADLINE, sent)
            .await
            .expect("the caller's deadline holds: nothing hangs")
            .expect("room on a stream");
        match outcome {
            Ok(response) => panic!("the server is dead, yet {response:?}"),
            Err(e @ RequestError::Connect { .. }) => {
                connect_failure = Some(e);
                break;
            }
            // The old stream breaking under a request: typed too.
            Err(RequestError::StreamEnded { .. }) => {}
            Err(other) => panic!("unexpected error {other:?}"),
        }
    }
    let e: ReflectionError = connect_failure.expect("a connect failure surfaced");
    assert_eq!(e.reach(), Reach::NotSent);
    let RequestError::Connect { source } = &e else {
        unreachable!()
    };
    // A refused connection is UNAVAILABLE; a stream opened on the old connection while it
    // was being torn down sees it close under it (CANCELLED, or UNKNOWN for a broken pipe).
    assert!(
        matches!(
            **source,
            TonicStreamError::Status(ref s) if matches!(
                s.code(),
                tonic::Code::Unavailable | tonic::Code::Cancelled | tonic::Code::Unknown
            )
        ),
        "tonic reports a transport failure: {source:?}"
    );
    assert!(stack.streams.stats().connect_failures >= 1);

    server.restart().expect("rebind the same port");
    let mut recovered = false;
    for attempt in 0..50u32 {
        let request = ask(format!("up{attempt}"), attempt);
        let sent = async {
            let guard = stack.streams.acquire().await.ok()?;
            guard.send(request.clone()).await.ok()
        };
        let outcome = tokio::time::timeout(CALLER_DEADLINE, sent)
            .await
            .expect("the caller's deadline holds: nothing hangs");
        if let Some(response) = outcome {
            assert_answers(&request, &response);
            recovered = true;
            break;
        }
    }
    assert!(recovered, "the pool recovered once the server was back");
    eventually("all load released", || {
        stack.streams.stats().table.in_flight == 0
    })
    .await;
    burst(&stack.streams, 1, 8).await;
}

/// Nested reaping with the reflection client, on a mock clock: 12 requests at depth 4 on 3
/// streams; once idle, one timeout closes the streams (their clients come back), one more
/// closes the clients and their channels: 0 streams, 0 clients, 0 channels.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reflection_stack_reaps_to_zero_when_idle() {
    let server = ReflectionServer::start().expect("bind 127.0.0.1:0");
    let (clock, mock) = slotpool::Clock::mock();
    let stack = reflection_stack(&server, &clock, 8, 4);
    let mut guards = Vec::new();
    for _ in 0..12 {
        guards.push(
            Arc::clone(&stack.streams)
                .acquire_owned()
                .await
                .expect("room"),
        );
    }
    let sends: Vec<_> = guards
        .into_iter()
        .zip(0..)
        .map(|(guard, i)| {
            let request = ask(format!("reap{i}"), i);
            tokio::spawn(async move { (request.clone(), guard.send(request).await) })
        })
        .collect();
    for send in sends {
        let (request, response) = guarded("a request", send).await.expect("no panic");
        assert_answers(&request, &response.expect("answered"));
    }
    eventually("all load released", || {
        stack.streams.stats().table.in_flight == 0
    })
    .await;
    let (streams, clients, channels) = open(&stack);
    assert_eq!(
        (streams, clients),
        (3, 3),
        "12 at depth 4: 3 streams, a client each"
    );
    assert_eq!(channels, 1, "3 clients share a channel of 4");

    assert_eq!(reap(&stack, clock.now()), (0, 0, 0), "not idle long enough");
    mock.advance(IDLE);
    assert_eq!(reap(&stack, clock.now()).0, 3, "idle streams are reaped");
    // A reaped stream's slot drains until its driver has let go of the stream (and so of its
    // client): wait for both.
    eventually(
        "the reaped streams close and their clients come back",
        || stack.clients.stats().idle == 3 && open(&stack).0 == 0,
    )
    .await;
    mock.advance(IDLE);
    let (_, clients, channels) = reap(&stack, clock.now());
    assert_eq!((clients, channels), (3, 1));
    assert_eq!(open(&stack), (0, 0, 0));
}

/// By id, against our GetPage server: the ids are set and read by closures on the generated
/// messages (not through the messages' `StreamRequest`/`StreamResponse`); 32 requests held by
/// the server at depth 8 are released together and each reaches its caller, and a second
/// request with a caller-chosen id already in flight is refused as a duplicate (the
/// `request_id` closure read it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_page_by_id_with_id_closures() {
    let server = TestServer::start(Handle::current())
        .await
        .expect("bind 127.0.0.1:0");
    let clock = slotpool::Clock::new();
    let (_channels, clients) = pools(&server.uri(), &clock, PageServiceClient::new);
    let connector = TonicStreamConnector::from_call(clients, |mut client, outbound| async move {
        client.get_pages(outbound).await
    })
    .set_request_id(|request, id| request.request_id = Some(id))
    .response_id(|response| response.request_id)
    .request_id(|request| request.request_id);
    let streams = Arc::new(
        StreamPool::builder(connector)
            .max_queue_depth(8)
            .build()
            .expect("valid stream pool"),
    );
    server.stall();
    let calls: Vec<_> = (0..32u32)
        .map(|block| {
            let streams = Arc::clone(&streams);
            tokio::spawn(async move {
                let guard = streams.acquire().await.expect("room");
                (block, guard.send(page_request(block, 5)).await)
            })
        })
        .collect();
    guarded("32 requests held", server.wait_held(32)).await;
    assert_eq!(streams.stats().spin_ups, 4, "32 at depth 8: 4 streams");

    let mut chosen = page_request(100, 5);
    chosen.request_id = Some(7_000);
    let chosen_call = {
        let streams = Arc::clone(&streams);
        tokio::spawn(async move { streams.acquire().await.expect("room").send(chosen).await })
    };
    guarded("the chosen id held", server.wait_held(33)).await;
    // The pool puts the 34th request on the lowest stream with room: the chosen id's, the
    // only stream that has any. That id is in flight there.
    let guard = streams.acquire().await.expect("room");
    let index = guard.stream_index();
    match guard.send(chosen).await {
        Err(RequestError::DuplicateId { id: 7_000 }) => {}
        other => panic!("expected a duplicate id on stream {index:?}, got {other:?}"),
    }

    server.release();
    for call in calls {
        let (block, response) = guarded("a held request", call).await.expect("no panic");
        let response = response.expect("answered");
        assert_eq!(page_stamp(&response), Some((block, 5)), "its own page");
    }
    let response = guarded("the chosen id", chosen_call)
        .await
        .expect("no panic")
        .expect("answered");
    assert_eq!(
        response.request_id, 7_000,
        "the caller's id went on the wire"
    );
    assert_eq!(page_stamp(&response), Some((100, 5)));
    let stats = streams.stats();
    assert_eq!((stats.unknown_responses, stats.late_responses), (0, 0));
    eventually("all load released", || streams.stats().table.in_flight == 0).await;
}

/// With id closures to set and read back ids but none to read a caller's id, the pool assigns
/// every id: requests in flight together on one stream each get their own page.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_request_id_reader_the_pool_assigns_every_id() {
    let server = TestServer::start(Handle::current())
        .await
        .expect("bind 127.0.0.1:0");
    let clock = slotpool::Clock::new();
    let (_channels, clients) = pools(&server.uri(), &clock, PageServiceClient::new);
    let connector = TonicStreamConnector::from_call(clients, |mut client, outbound| async move {
        client.get_pages(outbound).await
    })
    .set_request_id(|request, id| request.request_id = Some(id))
    .response_id(|response| response.request_id);
    let streams = Arc::new(
        StreamPool::builder(connector)
            .max_queue_depth(8)
            .max_streams(1)
            .build()
            .expect("valid stream pool"),
    );
    server.stall();
    let calls: Vec<_> = (0..8u32)
        .map(|block| {
            let streams = Arc::clone(&streams);
            tokio::spawn(async move {
                let guard = streams.acquire().await.expect("room");
                (block, guard.send(page_request(block, 5)).await)
            })
        })
        .collect();
    guarded("8 requests held", server.wait_held(8)).await;
    server.release();
    for call in calls {
        let (block, response) = guarded("a held request", call).await.expect("no panic");
        let response = response.expect("answered");
        assert_eq!(page_stamp(&response), Some((block, 5)), "its own page");
    }
}
