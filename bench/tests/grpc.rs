//! slotpool's nested stack (StreamPool → ClientPool → ChannelPool) over real tonic on
//! 127.0.0.1, against the in-process test server (`slotpool_bench::grpc::server`).
//!
//! No test sleeps or asserts on time: waits are for events (the server's held counts, the
//! pools' stats, polled with `yield_now`), idle time and the breaker's backoff run on
//! `slotpool::Clock::mock()`, and every wait sits under [`HANG_GUARD`], a deadline that only
//! turns a hang into a failure.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use slotpool::stream::BreakerState;
use slotpool::stream::RequestError;
use slotpool::tonic::TonicStreamError;
use slotpool::{AcquireError, Reach, TryAcquireError};
use slotpool_bench::grpc::server::TestServer;
use slotpool_bench::grpc::stack::{Open, PageError, SlotStack, StackConfig};
use slotpool_bench::grpc::{page_request, page_stamp, GetPageResponse, StatusCode};
use tokio::runtime::Handle;
use tokio::task::JoinHandle;

/// Turns a hang into a test failure. Never reached when things work.
const HANG_GUARD: Duration = Duration::from_secs(60);
/// A caller's deadline for one request while the server is down.
const CALLER_DEADLINE: Duration = Duration::from_secs(20);
const IDLE: Duration = Duration::from_secs(1);

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

async fn server() -> Arc<TestServer> {
    TestServer::start(Handle::current())
        .await
        .expect("bind 127.0.0.1:0")
}

fn stack(server: &TestServer, config: StackConfig) -> Arc<SlotStack> {
    Arc::new(SlotStack::build(&server.uri(), &config).expect("valid stack config"))
}

fn mock_config() -> (StackConfig, slotpool::MockClock) {
    let (clock, mock) = slotpool::Clock::mock();
    let config = StackConfig {
        clock,
        idle_timeout: IDLE,
        reap_interval: None,
        ..StackConfig::default()
    };
    (config, mock)
}

fn status(response: &GetPageResponse) -> StatusCode {
    StatusCode::try_from(response.status).expect("a known status code")
}

fn spawn_get(
    stack: &Arc<SlotStack>,
    block: u32,
    lsn: u64,
) -> JoinHandle<Result<GetPageResponse, PageError>> {
    let stack = Arc::clone(stack);
    tokio::spawn(async move { stack.get_page(page_request(block, lsn)).await })
}

async fn join<T>(handle: JoinHandle<T>) -> T {
    guarded("a caller task", handle)
        .await
        .expect("caller task panicked")
}

/// A request on a stream whose connect failed: `Connect` (or, when the connect failed before
/// the request reached the stream's driver, `StreamEnded` as not sent). Either way nothing was
/// sent.
fn assert_connect_failure(result: Result<GetPageResponse, PageError>) {
    match result {
        Err(PageError::Request(e @ RequestError::Connect { .. }))
        | Err(PageError::Request(
            e @ RequestError::StreamEnded {
                reach: Reach::NotSent,
                ..
            },
        )) => assert_eq!(e.reach(), Reach::NotSent),
        other => panic!("expected a connect failure, got {other:?}"),
    }
}

/// Per-request failures travel in the response's status; the stream stays up through them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_request_errors_travel_in_the_response_and_keep_the_stream() {
    let server = server().await;
    server.knobs().set_missing_from_block(1000);
    let (config, _mock) = mock_config();
    let stack = stack(
        &server,
        StackConfig {
            max_streams: Some(1),
            ..config
        },
    );

    // Concurrent: half the blocks are missing.
    let calls: Vec<_> = (0..64u32)
        .map(|i| {
            let block = if i % 2 == 0 { i } else { 1000 + i };
            (block, spawn_get(&stack, block, 42))
        })
        .collect();
    for (block, call) in calls {
        let response = join(call)
            .await
            .expect("no request fails at the stream level");
        if block >= 1000 {
            assert_eq!(status(&response), StatusCode::NotFound);
            assert!(response.page.is_empty());
        } else {
            assert_eq!(status(&response), StatusCode::Ok);
            assert_eq!(
                page_stamp(&response),
                Some((block, 42)),
                "routed to its caller"
            );
        }
    }

    // Sequential, every second request the server sees fails with INTERNAL.
    server.knobs().set_internal_every(2);
    let mut internal = 0;
    for block in 0..16 {
        let response = guarded("request", stack.get_page(page_request(block, 7)))
            .await
            .expect("INTERNAL travels in the response");
        if status(&response) == StatusCode::Internal {
            internal += 1;
        }
    }
    assert_eq!(internal, 8);

    let stats = stack.streams.stats();
    assert_eq!(stats.spin_ups, 1, "one stream carried everything");
    assert_eq!(stats.stream_failures, 0);
    assert_eq!(server.counts().streams, 1);
    assert_eq!(server.counts().responses, 80);
}

/// The server ends one stream with requests in flight: exactly its callers fail, as maybe
/// applied; the other stream's callers get their pages; the next request opens a new stream.
async fn stream_ended_mid_flight(error: bool) {
    let server = server().await;
    let (config, _mock) = mock_config();
    let stack = stack(
        &server,
        StackConfig {
            max_queue_depth: 4,
            ..config
        },
    );
    server.stall();
    let mut calls: HashMap<u32, _> = (0..8u32).map(|b| (b, spawn_get(&stack, b, 9))).collect();
    guarded("8 requests held", server.wait_held(8)).await;
    assert_eq!(stack.streams.stats().spin_ups, 2, "4 + 4 on two streams");

    let lost = server
        .end_stream_holding(0, error)
        .expect("a stream holds block 0");
    assert_eq!(lost.len(), 4, "the ended stream held 4 requests");
    for block in &lost {
        let call = calls.remove(block).expect("each block once");
        match join(call).await {
            Err(PageError::Request(e @ RequestError::StreamEnded { .. })) => {
                assert_eq!(e.reach(), Reach::MaybeApplied, "it was on the wire");
                let RequestError::StreamEnded { source, .. } = e else {
                    unreachable!()
                };
                match (error, source) {
                    (true, Some(source)) => {
                        assert_eq!(source.code(), Some(tonic::Code::Unavailable));
                    }
                    (false, None) => {}
                    (_, source) => panic!("unexpected source {source:?} (error end: {error})"),
                }
            }
            other => panic!("block {block}: expected StreamEnded, got {other:?}"),
        }
    }

    // The other stream is still full (stalled), so this request needs a new stream, which
    // the pool opens without any caller action.
    calls.insert(99, spawn_get(&stack, 99, 9));
    guarded("the new request held", server.wait_held(5)).await;
    assert_eq!(server.counts().streams, 3);
    server.release();
    for (block, call) in calls {
        let response = join(call)
            .await
            .expect("callers on other streams are unaffected");
        assert_eq!(status(&response), StatusCode::Ok);
        assert_eq!(page_stamp(&response), Some((block, 9)));
    }
    let stats = stack.streams.stats();
    assert_eq!(stats.stream_failures, 1);
    assert_eq!(stats.connect_failures, 0);
    eventually("all load released", || {
        stack.streams.stats().table.in_flight == 0
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_ended_cleanly_mid_flight_fails_only_its_callers() {
    stream_ended_mid_flight(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_broken_mid_flight_fails_only_its_callers() {
    stream_ended_mid_flight(true).await;
}

/// A request that asks the server to end its stream (the soak's injected fault) fails as
/// maybe applied, and the stream pool carries on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn injected_stream_end_is_a_typed_error() {
    let server = server().await;
    let (config, _mock) = mock_config();
    let stack = stack(&server, config);
    let ok = guarded("request", stack.get_page(page_request(1, 1))).await;
    assert_eq!(status(&ok.expect("server up")), StatusCode::Ok);
    let ended = guarded(
        "end request",
        stack.get_page(slotpool_bench::grpc::end_stream_request()),
    )
    .await;
    match ended {
        Err(PageError::Request(e)) => assert_eq!(e.reach(), Reach::MaybeApplied),
        other => panic!("expected a stream end, got {other:?}"),
    }
    let ok = guarded("request", stack.get_page(page_request(2, 1))).await;
    assert_eq!(page_stamp(&ok.expect("a new stream")), Some((2, 1)));
    assert_eq!(stack.streams.stats().stream_failures, 1);
}

/// Server down: every request ends in a typed error within the caller's deadline, a connect
/// failure among them (not sent, safe to retry); server back: the pool recovers by itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_down_fails_typed_within_deadline_and_recovers() {
    let server = server().await;
    let (config, _mock) = mock_config();
    let stack = stack(&server, config);
    let ok = guarded("request", stack.get_page(page_request(1, 1))).await;
    assert!(ok.is_ok());

    server.stop().await;
    let mut connect_failure = None;
    for _ in 0..50 {
        let attempt = tokio::time::timeout(
            CALLER_DEADLINE,
            stack.get_page_within(page_request(2, 1), CALLER_DEADLINE),
        )
        .await
        .expect("the caller's deadline holds: nothing hangs");
        match attempt {
            Ok(response) => panic!("the server is down, yet {response:?}"),
            Err(PageError::Request(e @ RequestError::Connect { .. })) => {
                connect_failure = Some(e);
                break;
            }
            // The old stream breaking under a request: also typed.
            Err(PageError::Request(RequestError::StreamEnded { .. })) => {}
            Err(other) => panic!("unexpected error {other:?}"),
        }
    }
    let e = connect_failure.expect("a connect failure surfaced");
    assert_eq!(e.reach(), Reach::NotSent);
    let RequestError::Connect { source } = &e else {
        unreachable!()
    };
    // A refused connection is UNAVAILABLE. If the stream was opened on the old connection
    // while it was still being torn down, hyper reports that connection closing under it
    // (CANCELLED, or UNKNOWN for a broken pipe): a transport failure all the same.
    assert!(
        matches!(
            **source,
            TonicStreamError::Status(ref s) if matches!(
                s.code(),
                tonic::Code::Unavailable | tonic::Code::Cancelled | tonic::Code::Unknown
            ) && std::error::Error::source(s).is_some()
        ),
        "tonic reports a transport failure: {source:?}"
    );
    assert!(stack.streams.stats().connect_failures >= 1);

    server.restart().expect("rebind the same port");
    let mut recovered = false;
    for _ in 0..50 {
        let attempt = tokio::time::timeout(CALLER_DEADLINE, stack.get_page(page_request(3, 1)))
            .await
            .expect("the caller's deadline holds: nothing hangs");
        if let Ok(response) = attempt {
            assert_eq!(page_stamp(&response), Some((3, 1)));
            recovered = true;
            break;
        }
    }
    assert!(recovered, "the pool recovered once the server was back");
    eventually("all load released", || {
        stack.streams.stats().table.in_flight == 0
    })
    .await;
}

/// The circuit breaker: opens after N consecutive connect failures, fails fast (no connect
/// attempted), half-opens after the backoff on the mock clock with exactly one probe; a failed
/// probe reopens it, a successful one closes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn breaker_opens_fails_fast_and_half_opens_after_backoff() {
    const FAILURES: u32 = 3;
    const BACKOFF: Duration = Duration::from_secs(10);
    let server = server().await;
    let (config, mock) = mock_config();
    let stack = stack(
        &server,
        StackConfig {
            max_queue_depth: 1,
            breaker: Some((FAILURES, BACKOFF)),
            ..config
        },
    );
    assert!(guarded("request", stack.get_page(page_request(1, 1)))
        .await
        .is_ok());
    server.stop().await;
    eventually("the open stream breaks", || {
        let stats = stack.streams.stats();
        stats.stream_failures == 1 && stats.table.in_flight == 0
    })
    .await;

    for _ in 0..FAILURES {
        let failure = guarded("connect", stack.get_page(page_request(2, 1))).await;
        assert_connect_failure(failure);
    }
    let stats = stack.streams.stats();
    assert_eq!(stats.connect_failures, u64::from(FAILURES));
    assert_eq!(stats.breaker, BreakerState::Open);

    // Open: fail fast, without a connect attempt.
    let spin_ups = stats.spin_ups;
    match stack.streams.try_acquire() {
        Err(TryAcquireError::Unavailable { retry_after }) => assert!(retry_after <= BACKOFF),
        other => panic!("expected Unavailable, got {other:?}"),
    }
    match guarded("fail fast", stack.get_page(page_request(3, 1))).await {
        Err(PageError::Acquire(AcquireError::Unavailable { retry_after })) => {
            assert!(retry_after <= BACKOFF);
        }
        other => panic!("expected Unavailable, got {other:?}"),
    }
    assert_eq!(
        stack.streams.stats().spin_ups,
        spin_ups,
        "no connect while open"
    );

    // After the backoff, one probe; the server is still down, so the breaker reopens.
    mock.advance(BACKOFF);
    assert_connect_failure(guarded("probe", stack.get_page(page_request(4, 1))).await);
    assert_eq!(
        stack.streams.stats().spin_ups,
        spin_ups + 1,
        "exactly one probe"
    );
    assert_eq!(stack.streams.stats().breaker, BreakerState::Open);
    assert!(matches!(
        stack.streams.try_acquire(),
        Err(TryAcquireError::Unavailable { .. })
    ));

    // Server back (holding stream opens, so the probe stays in flight); after the backoff the
    // probe goes through, others still fail fast while it is out, and its success closes it.
    server.restart().expect("rebind");
    server.hold_opens();
    mock.advance(BACKOFF);
    let probe = spawn_get(&stack, 5, 1);
    guarded("the probe reaches the server", server.wait_held_opens(1)).await;
    assert_eq!(stack.streams.stats().breaker, BreakerState::HalfOpen);
    assert!(
        matches!(
            stack.streams.try_acquire(),
            Err(TryAcquireError::Unavailable { .. })
        ),
        "one probe at a time"
    );
    server.release_opens();
    let response = join(probe).await.expect("the probe succeeds");
    assert_eq!(page_stamp(&response), Some((5, 1)));
    assert_eq!(stack.streams.stats().breaker, BreakerState::Closed);
    assert!(guarded("request", stack.get_page(page_request(6, 1)))
        .await
        .is_ok());
}

/// Prewarm: `min_streams` streams open at build, survive idle reaping, and are reopened by the
/// reaper after the server ends them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prewarm_opens_and_keeps_min_streams() {
    let server = server().await;
    let (config, mock) = mock_config();
    let stack = stack(
        &server,
        StackConfig {
            min_streams: 2,
            ..config
        },
    );
    eventually("two streams open at build", || {
        server.counts().open_streams == 2 && stack.streams.stats().table.ready == 2
    })
    .await;
    assert_eq!(
        stack.streams.stats().acquires,
        0,
        "opened by the pool, not by callers"
    );

    mock.advance(IDLE * 5);
    assert_eq!(
        stack.streams.reap(stack.streams.clock().now()),
        0,
        "kept through reaping"
    );
    assert_eq!(stack.streams.stats().table.ready, 2);

    // A request uses a prewarmed stream.
    assert!(guarded("request", stack.get_page(page_request(1, 1)))
        .await
        .is_ok());
    assert_eq!(server.counts().streams, 2);

    // The server ends both; the next reaper pass tops the pool up again.
    server.end_all_streams(false);
    eventually("both streams ended", || {
        let stats = stack.streams.stats();
        stats.stream_failures == 2 && stats.table.ready == 0 && stats.table.in_flight == 0
    })
    .await;
    stack.streams.reap(stack.streams.clock().now());
    eventually("two new streams", || {
        server.counts().streams == 4 && stack.streams.stats().table.ready == 2
    })
    .await;
}

/// Nested reaping over tonic: after every guard is gone and the idle timeout passes, an idle
/// stream frees its client and an idle client frees its channel: 0 streams, 0 clients, 0
/// channels.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_reaping_closes_streams_then_clients_then_channels() {
    let server = server().await;
    let (config, mock) = mock_config();
    let stack = stack(
        &server,
        StackConfig {
            max_queue_depth: 4,
            max_clients_per_channel: 4,
            ..config
        },
    );
    server.stall();
    let calls: Vec<_> = (0..32u32).map(|b| spawn_get(&stack, b, 3)).collect();
    guarded("32 requests held", server.wait_held(32)).await;
    // 32 requests at depth 4 fill exactly 8 streams, even under 32-way contention: a caller
    // that crosses another's spin-up joins it rather than opening one more (the loom model
    // `crossing_a_claim_joins_it`). Each stream holds one client, 4 clients share a channel.
    let opened = stack.open();
    assert_eq!(opened.streams, 8, "{opened:?}");
    assert_eq!(
        opened.clients, opened.streams,
        "one client per stream: {opened:?}"
    );
    assert_eq!(
        opened.channels,
        opened.clients.div_ceil(4),
        "4 clients per channel: {opened:?}"
    );
    server.release();
    for call in calls {
        assert!(join(call).await.is_ok());
    }
    eventually("all load released", || {
        stack.streams.stats().table.in_flight == 0
    })
    .await;

    // Not idle long enough yet: nothing goes.
    let now = stack.streams.clock().now();
    assert_eq!(
        stack.reap(now),
        Open {
            streams: 0,
            clients: 0,
            channels: 0
        }
    );

    // Streams idle past the timeout are reaped; their drivers return the clients.
    mock.advance(IDLE);
    let now = stack.streams.clock().now();
    let reaped = stack.reap(now);
    assert_eq!(reaped.streams, opened.streams);
    assert!(guarded("clients back", stack.settle(usize::MAX)).await);
    assert_eq!(stack.open().streams, 0);
    assert_eq!(
        stack.clients.stats().idle,
        opened.clients,
        "each reaped stream freed its client"
    );

    // The clients went idle when their streams closed; one more timeout reaps them, and
    // their channels (idle since the same instant) in the same pass.
    mock.advance(IDLE);
    let now = stack.streams.clock().now();
    let reaped = stack.reap(now);
    assert_eq!(
        (reaped.clients, reaped.channels),
        (opened.clients, opened.channels)
    );
    assert_eq!(
        stack.open(),
        Open {
            streams: 0,
            clients: 0,
            channels: 0
        }
    );
    eventually("the server saw every stream close", || {
        server.counts().open_streams == 0
    })
    .await;
}

/// A stream the stream pool retires as hung discards its client at once instead of giving it
/// back: after a stall, and after an open that never finishes, the client pool holds no client
/// (none idle, waiting for its reaper with a share of the connection to the hung peer) and
/// counts each as discarded; then the stack serves again on a new client. The timeouts are
/// 200 ms on tokio's real clock (no background reaper: the streams' own timers fire them);
/// nothing here asserts on time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_retired_as_hung_discards_its_client_at_once() {
    let server = server().await;
    let (config, _mock) = mock_config();
    let stack = stack(
        &server,
        StackConfig {
            max_queue_depth: 1,
            open_timeout: Some(Duration::from_millis(200)),
            stall_timeout: Some(Duration::from_millis(200)),
            ..config
        },
    );
    server.stall();
    let call = spawn_get(&stack, 1, 3);
    guarded("the request is held", server.wait_held(1)).await;
    match join(call).await {
        Err(PageError::Request(RequestError::Stalled { .. })) => {}
        other => panic!("expected a stall, got {other:?}"),
    }
    eventually("the stream lets go of its client", || {
        stack.clients.stats().in_use == 0
    })
    .await;
    let clients = stack.clients.stats();
    assert_eq!(
        clients.discards, 1,
        "the stalled stream's client is discarded: {clients:?}"
    );
    assert_eq!((clients.clients, clients.idle), (0, 0), "{clients:?}");
    server.release();

    server.hold_opens();
    let call = spawn_get(&stack, 2, 3);
    guarded("the open is held", server.wait_held_opens(1)).await;
    match join(call).await {
        Err(PageError::Request(RequestError::OpenTimeout { .. })) => {}
        other => panic!("expected an open timeout, got {other:?}"),
    }
    eventually("the stream lets go of its client", || {
        stack.clients.stats().in_use == 0
    })
    .await;
    let clients = stack.clients.stats();
    assert_eq!(
        clients.discards, 2,
        "the unopened stream's client is discarded: {clients:?}"
    );
    assert_eq!((clients.clients, clients.idle), (0, 0), "{clients:?}");
    server.release_opens();

    let response = join(spawn_get(&stack, 3, 3)).await.expect("served again");
    assert_eq!(status(&response), StatusCode::Ok);
    assert_eq!(
        stack.clients.stats().discards,
        2,
        "a healthy stream keeps its client"
    );
}
