//! Soak: 200 tasks send a random mix through slotpool's stack over real tonic, with random
//! cancellations and about 1% injected stream ends. At the end nothing is in flight, no load,
//! client or permit is leaked, every caller got a response or a typed error, and once the mock
//! clock passes the idle timeout everything is reaped.
//!
//! Bounded for CI: `SLOTPOOL_SOAK_OPS` (default 50) operations per task. No sleeps: waits are
//! for events, idle time is on `slotpool::Clock::mock()`, and [`HANG_GUARD`] only turns a hang
//! into a failure.

use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use slotpool::stream::RequestError;
use slotpool::Reach;
use slotpool_bench::grpc::server::TestServer;
use slotpool_bench::grpc::stack::{Open, PageError, SlotStack, StackConfig};
use slotpool_bench::grpc::{
    end_stream_request, page_request, page_stamp, GetPageResponse, StatusCode,
};
use tokio::runtime::Handle;

const TASKS: usize = 200;
const HANG_GUARD: Duration = Duration::from_secs(120);
const IDLE: Duration = Duration::from_secs(1);
/// Blocks at or above this are missing on the server (NOT_FOUND in the response).
const MISSING_FROM: u32 = 1_000_000;

#[derive(Debug, Default)]
struct Tally {
    ok: AtomicU64,
    not_found: AtomicU64,
    /// Requests that failed with a typed error, by reach.
    not_sent: AtomicU64,
    maybe_applied: AtomicU64,
    /// Requests whose caller gave up (dropped the future) before an outcome.
    cancelled: AtomicU64,
    /// Injected stream ends sent.
    injected: AtomicU64,
    /// Operations started; each ends in exactly one of the above (injected ends count in
    /// `maybe_applied`/`not_sent` too).
    started: AtomicU64,
}

fn ops_per_task() -> usize {
    std::env::var("SLOTPOOL_SOAK_OPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50)
}

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

/// Resolves after being polled `polls` times (yielding in between): the point at which a
/// caller racing it gives up.
async fn give_up_after(polls: usize) {
    for _ in 0..polls {
        tokio::task::yield_now().await;
    }
}

fn record(tally: &Tally, block: u32, lsn: u64, outcome: Result<GetPageResponse, PageError>) {
    match outcome {
        Ok(response) => match StatusCode::try_from(response.status) {
            Ok(StatusCode::Ok) => {
                assert_eq!(
                    page_stamp(&response),
                    Some((block, lsn)),
                    "misrouted response"
                );
                tally.ok.fetch_add(1, Ordering::Relaxed);
            }
            Ok(StatusCode::NotFound) => {
                assert!(block >= MISSING_FROM);
                tally.not_found.fetch_add(1, Ordering::Relaxed);
            }
            other => panic!("unexpected status {other:?}"),
        },
        Err(error) => {
            match &error {
                PageError::Request(RequestError::StreamEnded { .. }) => {}
                other => panic!("the server is up: only stream ends are expected, got {other:?}"),
            }
            match error.reach() {
                Reach::NotSent => tally.not_sent.fetch_add(1, Ordering::Relaxed),
                Reach::MaybeApplied => tally.maybe_applied.fetch_add(1, Ordering::Relaxed),
            };
        }
    }
}

async fn caller(stack: Arc<SlotStack>, tally: Arc<Tally>, seed: u64, ops: usize) {
    let mut rng = SmallRng::seed_from_u64(seed);
    for op in 0..ops {
        tally.started.fetch_add(1, Ordering::Relaxed);
        let roll: u32 = rng.random_range(0..100);
        let lsn = seed * 1_000 + op as u64;
        if roll == 0 {
            // ~1%: ask the server to end the stream this request rides on.
            tally.injected.fetch_add(1, Ordering::Relaxed);
            match stack.get_page(end_stream_request()).await {
                Err(error) => match error.reach() {
                    Reach::NotSent => tally.not_sent.fetch_add(1, Ordering::Relaxed),
                    Reach::MaybeApplied => tally.maybe_applied.fetch_add(1, Ordering::Relaxed),
                },
                Ok(response) => panic!("an end request got a response: {response:?}"),
            };
            continue;
        }
        let block = if roll < 10 {
            MISSING_FROM + rng.random_range(0..1000)
        } else {
            rng.random_range(0..100_000)
        };
        let request = page_request(block, lsn);
        if roll < 25 {
            // Give up after a random number of polls.
            let polls = rng.random_range(1..8);
            // Give up after a random number of polls: the call is dropped wherever it is
            // (waiting for room, queued, or sent with its response pending).
            let mut call = pin!(stack.get_page(request));
            tokio::select! {
                biased;
                outcome = &mut call => record(&tally, block, lsn, outcome),
                () = give_up_after(polls) => {
                    tally.cancelled.fetch_add(1, Ordering::Relaxed);
                }
            }
        } else {
            record(&tally, block, lsn, stack.get_page(request).await);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn soak_random_mix_with_cancellations_and_stream_ends() {
    let server = TestServer::start(Handle::current()).await.expect("bind");
    server.knobs().set_missing_from_block(MISSING_FROM);
    let (clock, mock) = slotpool::Clock::mock();
    let stack = Arc::new(
        SlotStack::build(
            &server.uri(),
            &StackConfig {
                clock,
                idle_timeout: IDLE,
                reap_interval: None,
                max_streams: Some(16),
                max_queue_depth: 8,
                max_clients_per_channel: 4,
                max_clients: Some(32),
                ..StackConfig::default()
            },
        )
        .expect("valid config"),
    );
    let tally = Arc::new(Tally::default());
    let ops = ops_per_task();
    let tasks: Vec<_> = (0..TASKS)
        .map(|i| {
            tokio::spawn(caller(
                Arc::clone(&stack),
                Arc::clone(&tally),
                i as u64 + 1,
                ops,
            ))
        })
        .collect();
    for task in tasks {
        guarded("a soak task", task)
            .await
            .expect("no caller panicked");
    }

    // Every operation ended in exactly one outcome.
    let t = |c: &AtomicU64| c.load(Ordering::Relaxed);
    let outcomes = t(&tally.ok)
        + t(&tally.not_found)
        + t(&tally.not_sent)
        + t(&tally.maybe_applied)
        + t(&tally.cancelled);
    assert_eq!(t(&tally.started), (TASKS * ops) as u64);
    assert_eq!(
        outcomes,
        t(&tally.started),
        "every caller got a response or a typed error: {tally:?}"
    );
    assert!(t(&tally.ok) > 0 && t(&tally.not_found) > 0, "{tally:?}");

    // Cancelled requests already sent still hold their load until their (late) responses
    // arrive; the server answers everything it did not end, so it all drains.
    eventually("nothing in flight", || {
        let stats = stack.streams.stats();
        stats.table.in_flight == 0 && stats.table.waiting == 0
    })
    .await;
    let stats = stack.streams.stats();
    assert_eq!(stats.connect_failures, 0, "the server stayed up");
    assert!(stats.table.starting + stats.table.ready + stats.table.draining <= 16);
    if t(&tally.injected) > 0 {
        assert!(stats.stream_failures > 0, "injected ends ended streams");
    }
    assert!(guarded("clients settle", stack.settle(usize::MAX)).await);
    let clients = stack.clients.stats();
    assert_eq!(clients.waiting, 0);
    assert_eq!(
        clients.in_use,
        stack.open().streams,
        "only open streams hold clients"
    );
    let channels = stack.channels.stats();
    assert_eq!(
        channels.clients, clients.clients as u64,
        "every live client holds one channel share"
    );

    // Everything idle. A first pass notes the idle streams (the stream pool stamps idleness
    // in reaper passes, not on the hot path); one timeout later they are reaped, freeing their
    // clients; one more and the clients and their channels go.
    stack.reap(stack.streams.clock().now());
    mock.advance(IDLE);
    stack.reap(stack.streams.clock().now());
    assert!(guarded("clients back", stack.settle(usize::MAX)).await);
    assert_eq!(stack.open().streams, 0);
    mock.advance(IDLE);
    stack.reap(stack.streams.clock().now());
    assert_eq!(
        stack.open(),
        Open {
            streams: 0,
            clients: 0,
            channels: 0
        }
    );
    assert_eq!(stack.clients.stats().in_use, 0);
    eventually("the server saw every stream close", || {
        server.counts().open_streams == 0
    })
    .await;
    eprintln!("soak: {tally:?}, streams {stats:?}");
}
