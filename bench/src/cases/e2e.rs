//! The end-to-end cases: GetPage requests through the whole nested stack — stream pool, client
//! pool, channel pool, tonic, HTTP/2 over loopback — to the in-process test server
//! ([`crate::grpc::server`]), slotpool's stack ([`SlotStack`]) against R1's
//! ([`RefStack`]), side by side.
//!
//! | case | what it measures |
//! |---|---|
//! | `e2e/concurrency-{1,16,64,256}` | that many tasks each sending requests back to back (acquire, send, await the 8 KiB page); ns per request (wall time over all requests: the inverse of throughput) and per-request latency percentiles |
//!
//! Both stacks have the same shape: at most [`MAX_STREAMS`] streams of [`DEPTH`] requests each
//! (so 256 requests in flight at most), [`CLIENTS_PER_CHANNEL`] clients per channel, one
//! client per stream, connections made with the same endpoint settings. The server runs on its
//! own runtime (a stand-in for another process); the callers on a [`WORKERS`]-worker runtime.
//! Both stacks are built once, before the first case, and stay warm across cases; the first
//! (untimed) warm-up round of each case opens whatever streams it needs.
//!
//! The timed window holds the requests only: each task's latency histogram is made before the
//! clock starts and the histograms are merged after it stops (making and merging 64 or 256
//! histograms of a few hundred KiB each was once timed too, the same for both stacks, and
//! added allocation and page faults to both sides' noise).
//!
//! Most of a request's cost here is tonic, HTTP/2 and the loopback, the same for both stacks;
//! the difference is the pools' share of it, and how each behaves under many concurrent
//! callers (R1 takes its stream mutex twice and a semaphore permit per request).
//!
//! The runners are public so that the criterion bench (`benches/e2e.rs`) times the same code.

use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use tokio::runtime::Runtime;
use tonic::transport::Endpoint;

use crate::fixtures::{join_all, multi_thread, nanos};
use crate::grpc::reference::RefStack;
use crate::grpc::server::TestServer;
use crate::grpc::stack::{SlotStack, StackConfig};
use crate::grpc::{page_request, GetPageResponse};
use crate::report::{interleave, merge_waits, wait_histogram, Record, Runner, Sample, Settings};

/// Concurrency levels measured.
pub const CONCURRENCY: [usize; 4] = [1, 16, 64, 256];
/// Stream bound of both stacks.
pub const MAX_STREAMS: usize = 32;
/// Requests in flight per stream (`MAX_STREAMS × DEPTH` = 256).
pub const DEPTH: usize = 8;
/// Clients per channel.
pub const CLIENTS_PER_CHANNEL: usize = 16;
/// Worker threads of the callers' runtime.
pub const WORKERS: usize = 2;
/// Worker threads of the server's runtime.
pub const SERVER_WORKERS: usize = 2;

/// The case name for `concurrency` callers.
pub fn case_name(concurrency: usize) -> String {
    format!("e2e/concurrency-{concurrency}")
}

/// Full-run requests per repeat (all tasks together), scaled by [`Settings::ops`]. Chosen so
/// the full comparison of the e2e cases takes about a minute on the 2-core dev machine.
pub fn full_ops(concurrency: usize) -> u64 {
    if concurrency == 1 {
        4_000
    } else {
        16_000
    }
}

/// The server, both stacks and their runtimes. Fields drop in order: stacks, server, then the
/// runtimes.
#[derive(Debug)]
pub struct E2e {
    /// slotpool's stack.
    pub slotpool: Arc<SlotStack>,
    /// R1's stack.
    pub reference: Arc<RefStack>,
    /// The test server.
    pub server: Arc<TestServer>,
    /// The callers' runtime (`WORKERS` workers).
    pub rt: Runtime,
    /// The server's runtime.
    pub server_rt: Runtime,
}

impl E2e {
    /// Starts the server and builds both stacks (no requests yet).
    ///
    /// # Panics
    /// If the loopback port cannot be bound or a runtime cannot start.
    pub fn new() -> Self {
        let server_rt = multi_thread(SERVER_WORKERS);
        let server = server_rt
            .block_on(TestServer::start(server_rt.handle().clone()))
            .expect("bind 127.0.0.1:0");
        let rt = multi_thread(WORKERS);
        let config = StackConfig {
            max_clients_per_channel: CLIENTS_PER_CHANNEL,
            max_clients: None,
            max_streams: Some(MAX_STREAMS),
            max_queue_depth: DEPTH,
            idle_timeout: Duration::from_secs(3600),
            reap_interval: None,
            ..StackConfig::default()
        };
        let (slotpool, reference) = {
            let _enter = rt.enter();
            let slotpool =
                SlotStack::build(&server.uri(), &config).expect("valid bench configuration");
            let endpoint = Endpoint::from_shared(server.uri())
                .expect("a valid URI")
                .connect_timeout(config.connect_timeout)
                .tcp_nodelay(true);
            let reference = RefStack::new(
                endpoint,
                CLIENTS_PER_CHANNEL,
                None,
                Some(MAX_STREAMS),
                DEPTH,
            );
            (Arc::new(slotpool), Arc::new(reference))
        };
        Self {
            slotpool,
            reference,
            server,
            rt,
            server_rt,
        }
    }
}

impl Default for E2e {
    fn default() -> Self {
        Self::new()
    }
}

fn check(response: &GetPageResponse) {
    assert_eq!(response.status, 0, "the bench server answers OK");
}

/// One latency histogram per task, made before the clock starts: each is a few hundred KiB
/// (1 ns to 100 s at 3 digits), and making (zeroing) 64 or 256 of them, and merging them, is
/// work of the bench, not of either stack, so it stays outside the timed window.
fn task_histograms(tasks: usize) -> Vec<Histogram<u64>> {
    (0..tasks).map(|_| wait_histogram()).collect()
}

/// `tasks` tasks, each sending `per_task` requests back to back through slotpool's stack; wall
/// time for all and every request's latency. Call within the callers' runtime.
///
/// # Panics
/// If a request fails (the bench server never fails one).
pub async fn slotpool_run(
    stack: &Arc<SlotStack>,
    tasks: usize,
    per_task: u64,
) -> (Duration, Histogram<u64>) {
    let histograms = task_histograms(tasks);
    let start = Instant::now();
    let handles = histograms
        .into_iter()
        .enumerate()
        .map(|(t, mut latencies)| {
            let stack = Arc::clone(stack);
            tokio::spawn(async move {
                for i in 0..per_task {
                    let asked = Instant::now();
                    let response = stack
                        .get_page(page_request(t as u32, i))
                        .await
                        .expect("the bench server answers every request");
                    latencies.saturating_record(nanos(asked.elapsed()));
                    check(&response);
                }
                latencies
            })
        })
        .collect();
    let histograms = join_all(handles).await;
    let elapsed = start.elapsed();
    (elapsed, merge_waits(histograms))
}

/// The reference's [`slotpool_run`].
///
/// # Panics
/// If a request fails (the bench server never fails one).
pub async fn reference_run(
    stack: &Arc<RefStack>,
    tasks: usize,
    per_task: u64,
) -> (Duration, Histogram<u64>) {
    let histograms = task_histograms(tasks);
    let start = Instant::now();
    let handles = histograms
        .into_iter()
        .enumerate()
        .map(|(t, mut latencies)| {
            let stack = Arc::clone(stack);
            tokio::spawn(async move {
                for i in 0..per_task {
                    let asked = Instant::now();
                    let response = stack
                        .get_page(page_request(t as u32, i))
                        .await
                        .expect("the bench server answers every request");
                    latencies.saturating_record(nanos(asked.elapsed()));
                    check(&response);
                }
                latencies
            })
        })
        .collect();
    let histograms = join_all(handles).await;
    let elapsed = start.elapsed();
    (elapsed, merge_waits(histograms))
}

/// Every e2e case: slotpool and the reference, interleaved, one [`Record`] each per case.
pub fn compare(settings: &Settings) -> Vec<Record> {
    let e2e = E2e::new();
    let mut records = Vec::new();
    for concurrency in CONCURRENCY {
        records.extend(case(&e2e, concurrency, settings));
    }
    records
}

fn case(e2e: &E2e, concurrency: usize, settings: &Settings) -> Vec<Record> {
    let tasks = concurrency;
    let per_task = (settings.ops(full_ops(concurrency), 1) / tasks as u64).max(2);
    let ops = per_task * tasks as u64;
    let run = |per: u64| (per / tasks as u64).max(1);
    let impls: Vec<Runner<'_>> = vec![
        (
            "slotpool",
            Box::new(|ops| {
                let per = run(ops);
                let (elapsed, latencies) = e2e.rt.block_on(slotpool_run(&e2e.slotpool, tasks, per));
                Sample {
                    ops: per * tasks as u64,
                    elapsed,
                    waits: Some(latencies),
                }
            }),
        ),
        (
            "reference",
            Box::new(|ops| {
                let per = run(ops);
                let (elapsed, latencies) =
                    e2e.rt.block_on(reference_run(&e2e.reference, tasks, per));
                Sample {
                    ops: per * tasks as u64,
                    elapsed,
                    waits: Some(latencies),
                }
            }),
        ),
    ];
    interleave(&case_name(concurrency), ops, settings, impls)
}
