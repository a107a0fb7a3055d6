//! Pinned behaviours of the tonic integration (`slotpool::tonic`) that no other test fails on
//! if they change, over the bench's nested stack and in-process GetPage server on 127.0.0.1
//! (the fixtures of `tests/grpc.rs`, used as they are). Each is listed in `docs/pinned.md`.
//!
//! No test sleeps or asserts on time: waits are for events, polled with `yield_now`, under a
//! deadline that only turns a hang into a failure.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use slotpool::stream::RequestError;
use slotpool::tonic::TonicStreamError;
use slotpool::Reach;
use slotpool_bench::grpc::page_request;
use slotpool_bench::grpc::server::TestServer;
use slotpool_bench::grpc::stack::{PageError, SlotStack, StackConfig};
use tokio::runtime::Handle;

const HANG_GUARD: Duration = Duration::from_secs(60);

async fn guarded<F: Future>(what: &str, future: F) -> F::Output {
    match tokio::time::timeout(HANG_GUARD, future).await {
        Ok(output) => output,
        Err(_) => panic!("hung: {what}"),
    }
}

async fn eventually(what: &str, mut condition: impl FnMut() -> bool) {
    guarded(what, async {
        while !condition() {
            tokio::task::yield_now().await;
        }
    })
    .await;
}

async fn server() -> Arc<TestServer> {
    TestServer::start(Handle::current())
        .await
        .expect("bind 127.0.0.1:0")
}

/// A stack on a mock clock with no background reaper: nothing is reaped unless a test asks.
fn stack(server: &TestServer, max_queue_depth: usize) -> Arc<SlotStack> {
    let (clock, _mock) = slotpool::Clock::mock();
    let config = StackConfig {
        clock,
        idle_timeout: Duration::from_secs(1),
        reap_interval: None,
        max_streams: Some(1),
        max_queue_depth,
        ..StackConfig::default()
    };
    Arc::new(SlotStack::build(&server.uri(), &config).expect("valid stack config"))
}

/// tonic.rs, Failure model: "The stream breaks or the server ends it: ... The client goes back
/// to the pool: a tonic client is a handle over the channel, which redials by itself, so a
/// broken stream does not make the client unusable." A stream the server breaks with a
/// request in flight returns its client idle, not discarded, and the next stream reuses it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_streams_client_goes_back_to_the_pool_and_is_reused() {
    let server = server().await;
    let stack = stack(&server, 1);
    server.stall();
    let call = {
        let stack = Arc::clone(&stack);
        tokio::spawn(async move { stack.get_page(page_request(0, 9)).await })
    };
    guarded("the request held", server.wait_held(1)).await;
    assert_eq!(
        stack.clients.stats().in_use,
        1,
        "the stream holds one client"
    );
    server
        .end_stream_holding(0, true)
        .expect("a stream holds block 0");
    match guarded("the caller", call).await.expect("no panic") {
        Err(PageError::Request(e @ RequestError::StreamEnded { .. })) => {
            assert_eq!(e.reach(), Reach::MaybeApplied)
        }
        other => panic!("expected StreamEnded, got {other:?}"),
    }
    eventually("the client is back", || stack.clients.stats().in_use == 0).await;
    let clients = stack.clients.stats();
    assert_eq!(
        (clients.idle, clients.discards, clients.created),
        (1, 0, 1),
        "given back idle, not discarded"
    );
    server.release();
    stack
        .get_page(page_request(1, 9))
        .await
        .expect("a new stream serves");
    let clients = stack.clients.stats();
    assert_eq!(
        (clients.created, clients.discards),
        (1, 0),
        "the new stream reused the client"
    );
    assert_eq!(stack.streams.stats().spin_ups, 2);
}

/// tonic.rs, Failure model: "No client (the client pool is closed, ...): the connect fails
/// with `TonicStreamError::Client`; nothing was sent." Every caller that joined the stream
/// gets `RequestError::Connect` carrying that error, not sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_client_fails_the_connect_with_a_client_error_not_sent() {
    let server = server().await;
    let stack = stack(&server, 4);
    stack.clients.close();
    match guarded("the caller", stack.get_page(page_request(0, 9))).await {
        Err(PageError::Request(e @ RequestError::Connect { .. })) => {
            assert_eq!(e.reach(), Reach::NotSent);
            let RequestError::Connect { source } = e else {
                unreachable!()
            };
            assert!(
                matches!(*source, TonicStreamError::Client(_)),
                "expected a client error, got {source:?}"
            );
            assert_eq!(source.code(), None, "not a gRPC status");
        }
        other => panic!("expected a connect failure, got {other:?}"),
    }
    assert_eq!(server.counts().streams, 0, "nothing reached the server");
    let streams = stack.streams.stats();
    assert_eq!((streams.connect_failures, streams.completed), (1, 0));
}

/// `MessageIds`: a request that carries its own id keeps it (the pool assigns one only to a
/// request without), and its response is routed by it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_that_carries_its_id_keeps_it() {
    let server = server().await;
    let stack = stack(&server, 4);
    let mut request = page_request(3, 9);
    request.request_id = Some(777);
    let response = guarded("the request", stack.get_page(request))
        .await
        .expect("answered");
    assert_eq!(response.request_id, 777, "the server saw the caller's id");
    let response = guarded(
        "a request without an id",
        stack.get_page(page_request(4, 9)),
    )
    .await
    .expect("answered");
    assert_ne!(response.request_id, 777);
}
