//! The tonic scenarios of the fault bench: the stream pool over real tonic, HTTP/2 over
//! loopback, to the bench's in-process GetPage server ([`TestServer`]), when that peer is
//! killed, silenced or slowed; slotpool's stack beside R1's.
//!
//! 16 tasks send GetPage requests back to back, as the `e2e/*` cases do (acquire room on a
//! stream, send, await the 8 KiB page), each under a caller deadline of [`DEADLINE`] (a
//! `tokio::time::timeout` around the acquire and the request together). The stacks reach the
//! server through the blackhole proxy ([`Proxy`]) in every scenario, so that every connection
//! attempt is counted where tonic makes it (its channels reconnect inside tonic, out of both
//! pools' sight); while the server is down, the proxy accepts an attempt and closes it at
//! once, as the refused upstream connect tells it to.
//!
//! | case | the fault | it ends when |
//! |---|---|---|
//! | `faults/tonic-kill` | the server stopped ([`TestServer::stop`]: listener closed, every connection broken as if the process died) for [`Timing::peer_down`], then serving again on the same port | it listens again |
//! | `faults/tonic-blackhole` | the proxy holds every byte both ways for [`Timing::peer_down`], closing nothing | it forwards again |
//! | `faults/tonic-slow` | for [`Timing::slow_for`], one request in [`SLOW_EVERY`] (5%) is answered [`SLOW_RESPONSE`] late by the server | the window ends |
//!
//! | impl | stack |
//! |---|---|
//! | `slotpool` | [`SlotStack`]: slotpool's `StreamPool` over its client and channel pools and the `tonic` integration, configured as the `e2e/*` cases configure it |
//! | `r1-reference` | [`RefStack`]: R1's stream, client and channel pools over the same connector and client factory, as the `e2e/*` cases build it |
//!
//! Both: at most [`MAX_STREAMS`] streams of [`DEPTH`] requests, [`CLIENTS_PER_CHANNEL`]
//! clients per channel, the same endpoint settings; slotpool's stack keeps its defaults
//! beyond that (open timeout 10 s, stall timeout 60 s, no breaker), as in `e2e/*`.
//!
//! # What a record says
//!
//! `failed`, `late`, `recovery_ns` and `full_ns` as in the PostgreSQL scenarios (see the
//! [parent module](super)); a late operation is one that ended more than [`GRACE`] past
//! [`DEADLINE`], and the failures at the get are those that ended before the caller had room
//! on a stream. The rest:
//!
//! * `leaked`: once the load stops and the pool settles (up to [`SETTLE`]): requests the pool
//!   still counts in flight and callers it counts waiting, plus the difference between the
//!   streams it counts open and those the server has open, plus the difference between the
//!   clients it counts in use and its open streams (each open stream holds one client), plus
//!   units of capacity not returned (the pool is then asked for all `MAX_STREAMS × DEPTH`
//!   units at once, each acquire under a deadline; each one it cannot give is a unit lost),
//!   plus the same differences again after that. Must be 0.
//! * `connects`: TCP connections the proxy accepted from the fault's start to its end, or to
//!   the first success after it if that is later.
//! * `peak_backends`: the most streams the server had open (sampled every [`SAMPLE_EVERY`]):
//!   a stream is the server-side resource here, as a backend is in PostgreSQL.
//! * `pool_size_end`: the streams the pool counts open at the end; `live_end`: the streams
//!   the server has open then; `backends_end`: the connections the proxy carries then.
//!
//! This file owns the tonic scenarios, the two stacks' operation and their accounting; the
//! load and the timeline are `measure.rs`'s, the server and the stacks `crate::grpc`'s.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::runtime::Runtime;
use tonic::transport::Endpoint;

use super::measure::{self, Done};
use super::{FaultRecord, Proxy, Timing, GRACE, SAMPLE_EVERY, SETTLE, SLOW_EVERY};
use crate::cases::e2e::{CLIENTS_PER_CHANNEL, DEPTH, MAX_STREAMS, SERVER_WORKERS, WORKERS};
use crate::fixtures::multi_thread;
use crate::grpc::reference::RefStack;
use crate::grpc::server::TestServer;
use crate::grpc::stack::{SlotStack, StackConfig};
use crate::grpc::{page_request, GetPageRequest, GetPageResponse, StatusCode};

/// Each caller's deadline for one request: the acquire and the request together.
pub const DEADLINE: Duration = Duration::from_secs(1);
/// How much later than the others a slow request is answered in `faults/tonic-slow`.
pub const SLOW_RESPONSE: Duration = Duration::from_millis(200);
/// Units of capacity of either stack: `MAX_STREAMS × DEPTH` requests in flight.
pub const CAPACITY: usize = MAX_STREAMS * DEPTH;
/// The deadline of each acquire of the capacity check.
const HOLD_DEADLINE: Duration = Duration::from_secs(2);

/// A fault of the peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    /// The server stopped for [`Timing::peer_down`], then serving again on its port.
    Kill,
    /// The proxy holds everything for [`Timing::peer_down`].
    Blackhole,
    /// 5% of requests answered [`SLOW_RESPONSE`] late, for [`Timing::slow_for`].
    Slow,
}

impl Scenario {
    /// Every scenario, in the order the bench runs them.
    pub const ALL: [Scenario; 3] = [Scenario::Kill, Scenario::Blackhole, Scenario::Slow];

    /// The case name, `faults/tonic-...`.
    pub fn case(self) -> &'static str {
        match self {
            Scenario::Kill => "faults/tonic-kill",
            Scenario::Blackhole => "faults/tonic-blackhole",
            Scenario::Slow => "faults/tonic-slow",
        }
    }
}

/// A stack under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Impl {
    /// slotpool's stack.
    Slotpool,
    /// R1's stack.
    Reference,
}

impl Impl {
    /// Every implementation, in the order the bench runs them.
    pub const ALL: [Impl; 2] = [Impl::Slotpool, Impl::Reference];

    /// The name in the records.
    pub fn name(self) -> &'static str {
        match self {
            Impl::Slotpool => "slotpool",
            Impl::Reference => "r1-reference",
        }
    }
}

/// One of the two stacks.
enum Stack {
    Slotpool(SlotStack),
    Reference(RefStack),
}

/// What a stack says it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Gauges {
    /// Streams it counts open (starting, ready or draining; R1: entries in its map).
    streams: usize,
    /// Requests it counts in flight (R1: the sum of its queue depths).
    in_flight: u64,
    /// Callers it counts waiting for room (R1 cannot say: 0).
    waiting: usize,
    /// Clients it counts in use (R1: clients on its channels less the idle ones).
    clients_in_use: usize,
}

impl Stack {
    /// `which` to `uri`, as `E2e::new` builds it. Call within the callers' runtime.
    fn build(which: Impl, uri: &str) -> Result<Self, String> {
        let config = StackConfig {
            max_clients_per_channel: CLIENTS_PER_CHANNEL,
            max_clients: None,
            max_streams: Some(MAX_STREAMS),
            max_queue_depth: DEPTH,
            idle_timeout: Duration::from_secs(3600),
            reap_interval: None,
            ..StackConfig::default()
        };
        Ok(match which {
            Impl::Slotpool => Stack::Slotpool(
                SlotStack::build(uri, &config).map_err(|e| format!("slotpool's stack: {e}"))?,
            ),
            Impl::Reference => {
                let endpoint = Endpoint::from_shared(uri.to_string())
                    .map_err(|e| format!("endpoint: {e}"))?
                    .connect_timeout(config.connect_timeout)
                    .tcp_nodelay(true);
                Stack::Reference(RefStack::new(
                    endpoint,
                    CLIENTS_PER_CHANNEL,
                    None,
                    Some(MAX_STREAMS),
                    DEPTH,
                ))
            }
        })
    }

    /// One caller's request: acquire, send, await the response, all under [`DEADLINE`].
    async fn op(&self, request: GetPageRequest) -> Done {
        let asked = Instant::now();
        let mut acquired = false;
        let answered: Option<GetPageResponse> = match self {
            Stack::Slotpool(stack) => {
                tokio::time::timeout(DEADLINE, async {
                    let guard = stack.streams.acquire().await.ok()?;
                    acquired = true;
                    guard.send(request).await.ok()
                })
                .await
            }
            Stack::Reference(stack) => {
                tokio::time::timeout(DEADLINE, async {
                    let guard = stack.streams.get().await;
                    acquired = true;
                    guard.send(request).await.ok()
                })
                .await
            }
        }
        .ok()
        .flatten();
        let ok = answered.is_some_and(|response| response.status == StatusCode::Ok as i32);
        Done {
            ok,
            failed_get: !ok && !acquired,
            late: asked.elapsed() > DEADLINE + GRACE,
        }
    }

    fn gauges(&self) -> Gauges {
        match self {
            Stack::Slotpool(stack) => {
                let table = stack.streams.stats().table;
                Gauges {
                    streams: stack.open().streams,
                    in_flight: table.in_flight,
                    waiting: table.waiting,
                    clients_in_use: stack.clients.stats().in_use,
                }
            }
            Stack::Reference(stack) => {
                let (streams, in_flight) = stack.streams.load();
                let (_, clients) = stack.channels.load();
                Gauges {
                    streams,
                    in_flight: in_flight as u64,
                    waiting: 0,
                    clients_in_use: clients.saturating_sub(stack.clients.idle()),
                }
            }
        }
    }

    /// Acquires [`CAPACITY`] units at once (each under a deadline of its own), holds them,
    /// then drops them all unsent: how many the stack could give.
    async fn hold_all(&self) -> usize {
        match self {
            Stack::Slotpool(stack) => {
                let mut held = Vec::with_capacity(CAPACITY);
                while held.len() < CAPACITY {
                    match stack.streams.acquire_timeout(HOLD_DEADLINE).await {
                        Ok(guard) => held.push(guard),
                        Err(_) => break,
                    }
                }
                held.len()
            }
            Stack::Reference(stack) => {
                let mut held = Vec::with_capacity(CAPACITY);
                while held.len() < CAPACITY {
                    match tokio::time::timeout(HOLD_DEADLINE, stack.streams.get()).await {
                        Ok(guard) => held.push(guard),
                        Err(_) => break,
                    }
                }
                held.len()
            }
        }
    }
}

/// What differs between the stack's counts and the server's, and what it still counts out.
fn gap(gauges: Gauges, server_streams: u64) -> u64 {
    (gauges.streams as u64).abs_diff(server_streams)
        + (gauges.clients_in_use as u64).abs_diff(gauges.streams as u64)
        + gauges.in_flight
        + gauges.waiting as u64
}

/// Waits (up to [`SETTLE`]) until the stack counts nothing out and agrees with the server;
/// its gauges and the server's open streams then.
async fn settle(stack: &Stack, server: &TestServer) -> (Gauges, u64) {
    let deadline = Instant::now() + SETTLE;
    loop {
        let gauges = stack.gauges();
        let server_streams = server.counts().open_streams;
        if gap(gauges, server_streams) == 0 || Instant::now() >= deadline {
            return (gauges, server_streams);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// What the accounting found once the load stopped.
#[derive(Debug, Clone, Copy)]
struct Leaks {
    leaked: u64,
    streams: usize,
    server_streams: u64,
}

/// The accounting (see the module docs on `leaked`).
async fn account(stack: &Stack, server: &TestServer) -> Leaks {
    let (before, server_before) = settle(stack, server).await;
    let mut leaked = gap(before, server_before);
    let held = stack.hold_all().await;
    leaked += (CAPACITY - held) as u64;
    let (after, server_after) = settle(stack, server).await;
    leaked += gap(after, server_after);
    Leaks {
        leaked,
        streams: after.streams,
        server_streams: server_after,
    }
}

/// Counts the server's open streams every [`SAMPLE_EVERY`] until `stop`; the most seen.
async fn sample_streams(server: Arc<TestServer>, stop: Arc<AtomicBool>) -> u64 {
    let mut peak = 0;
    while !stop.load(Ordering::Relaxed) {
        peak = peak.max(server.counts().open_streams);
        tokio::time::sleep(SAMPLE_EVERY).await;
    }
    peak
}

/// Every caller's first request, at once: whether all were answered.
async fn warm(stack: &Arc<Stack>) -> bool {
    let tasks: Vec<_> = (0..super::TASKS)
        .map(|t| {
            let stack = Arc::clone(stack);
            tokio::spawn(async move { stack.op(page_request(t as u32, 0)).await.ok })
        })
        .collect();
    let mut all = true;
    for task in tasks {
        all &= task.await.unwrap_or(false);
    }
    all
}

/// Runs `scenario` on `which`: starts the server (on a runtime of its own, a stand-in for
/// another process) and the proxy, builds the stack through the proxy, has every caller's
/// first request answered, loads it, injects the fault, loads it on, stops, settles and
/// checks the accounting.
///
/// # Errors
/// When the server, the proxy or the stack cannot be had, the stack does not answer before
/// the fault, or the server cannot listen again after the kill.
pub fn run(scenario: Scenario, which: Impl, timing: &Timing) -> Result<FaultRecord, String> {
    // The proxy and the sampler run apart from the callers, as the network and a monitoring
    // agent would; the server on a runtime of its own, as in `e2e/*`.
    let control = multi_thread(1);
    let server_rt = multi_thread(SERVER_WORKERS);
    let rt = multi_thread(WORKERS);
    let server = server_rt
        .block_on(TestServer::start(server_rt.handle().clone()))
        .map_err(|e| format!("no server: {e}"))?;
    let proxy = control
        .block_on(Proxy::start(server.addr()))
        .map_err(|e| format!("no proxy: {e}"))?;
    let uri = format!("http://{}", proxy.addr());
    let stack = Arc::new({
        let _enter = rt.enter();
        Stack::build(which, &uri)?
    });
    if !rt.block_on(warm(&stack)) {
        return Err(format!(
            "{} {}: the stack got no answer before the fault",
            scenario.case(),
            which.name()
        ));
    }

    let stop_sampling = Arc::new(AtomicBool::new(false));
    let sampler = control.spawn(sample_streams(
        Arc::clone(&server),
        Arc::clone(&stop_sampling),
    ));
    let mut task = 0u32;
    let loaded = measure::drive(
        &rt,
        timing,
        |start, stop| {
            let stack = Arc::clone(&stack);
            let block = task;
            task += 1;
            let mut lsn = 0;
            measure::caller(start, stop, move || {
                let stack = Arc::clone(&stack);
                lsn += 1;
                async move { stack.op(page_request(block, lsn)).await }
            })
        },
        || inject(scenario, &server, &server_rt, &control, &proxy, timing),
    );
    stop_sampling.store(true, Ordering::Relaxed);
    let peak_streams = control.block_on(sampler).unwrap_or(0);
    let loaded = loaded?;
    let connects_after_fault = proxy
        .counts()
        .attempts_between(loaded.at(loaded.span.start), Instant::now());

    let leaks = rt.block_on(account(&stack, &server));

    let mut record = loaded.record(scenario.case(), which.name());
    record.leaked = leaks.leaked;
    record.connects = proxy
        .counts()
        .attempts_between(loaded.at(loaded.span.start), loaded.connects_until());
    record.peak_backends = i64::try_from(peak_streams).unwrap_or(i64::MAX);
    record.connects_after_fault = connects_after_fault;
    record.pool_size_end = leaks.streams;
    record.live_end = i64::try_from(leaks.server_streams).unwrap_or(i64::MAX);
    record.backends_end = proxy.counts().live();
    // The stack first (its drivers and connections live on the callers' runtime), then the
    // proxy and the server, then the runtimes.
    {
        let _enter = rt.enter();
        drop(stack);
    }
    drop(proxy);
    drop(server);
    drop(rt);
    drop(server_rt);
    drop(control);
    Ok(record)
}

/// Injects `scenario`'s fault and returns when it is over.
fn inject(
    scenario: Scenario,
    server: &TestServer,
    server_rt: &Runtime,
    control: &Runtime,
    proxy: &Proxy,
    timing: &Timing,
) -> Result<(), String> {
    match scenario {
        Scenario::Kill => {
            control.block_on(server.stop());
            std::thread::sleep(timing.peer_down);
            // The listener registers with the server's runtime, where it was first bound.
            let _enter = server_rt.enter();
            server
                .restart()
                .map_err(|e| format!("the server cannot listen again: {e}"))
        }
        Scenario::Blackhole => {
            proxy.pause();
            std::thread::sleep(timing.peer_down);
            proxy.resume();
            Ok(())
        }
        Scenario::Slow => {
            server.knobs().set_slow_every(SLOW_EVERY, SLOW_RESPONSE);
            std::thread::sleep(timing.slow_for);
            server.knobs().set_slow_every(0, Duration::ZERO);
            Ok(())
        }
    }
}
