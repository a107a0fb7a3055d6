//! The stream cases: slotpool's `StreamPool`, the R1 reference ([`crate::reference::stream`])
//! and the floor ([`Floor`]) side by side, over the same connectors ([`crate::fixtures`]).
//!
//! | case | what it measures |
//! |---|---|
//! | `stream/uncontended` | one task, acquire then drop the guard; 64 streams × depth 8, one open |
//! | `stream/256-streams-240-full` | as above with 256 open streams and 240 × 8 requests held, each pool filled by its own policy: the scan cost |
//! | `stream/8-tasks-2-workers` | 8 tasks looping acquire → drop on a 2-worker runtime, 64 × 8 |
//! | `stream/saturated` | 64 tasks for 16 slots (4 × 4), each holding its guard across one yield: throughput and wait percentiles |
//! | `stream/round-trip` | acquire, send one request through a stream task to an in-process echo, await the response |
//!
//! The floor is measured where it means something: the acquire/release cases. In
//! `stream/saturated` a caller must *wait*, and the floor has no waiting (a yield loop would
//! measure the scheduler, not a lower bound), so it is left out there; instead a bare tokio
//! `Semaphore` of 16 permits (`tokio-semaphore`) runs the same loop: no pool at all, only the
//! async wait and the task switches every design pays. In `stream/round-trip` there is no
//! pool-free equivalent of routing a response, so it has no floor either.
//!
//! Each runtime and pool is built once per case, not per repeat; the runners below (one per
//! implementation and case) are public so that the criterion benches time the same code.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use slotpool::stream::{StreamGuard, StreamPool};
use tokio::runtime::Runtime;

use crate::fixtures::{
    current_thread, floor_acquire_release, join_all, multi_thread, nanos, settle, yield_to_tasks,
    EchoConnector, Floor, Msg, NoopConnector,
};
use crate::reference::stream::{RefStreamGuard, RefStreamPool};
use crate::report::{
    interleave, merge_waits, split, wait_histogram, Case, Record, Runner, Sample, Settings,
};

/// Case name: one task, acquire then release.
pub const UNCONTENDED: &str = "stream/uncontended";
/// Case name: 256 streams, the lowest 240 full.
pub const SCAN: &str = "stream/256-streams-240-full";
/// Case name: 8 tasks on 2 workers.
pub const TASKS: &str = "stream/8-tasks-2-workers";
/// Case name: 64 tasks for 16 slots.
pub const SATURATED: &str = "stream/saturated";
/// Case name: a request through a stream task and back.
pub const ROUND_TRIP: &str = "stream/round-trip";

/// Queue depth per stream (all cases but `stream/saturated`).
pub const DEPTH: usize = 8;
/// Stream bound (uncontended, multi-task and round-trip cases).
pub const STREAMS: usize = 64;
/// Streams open in the scan case.
pub const SCAN_STREAMS: usize = 256;
/// Streams held full in the scan case (the lowest ones).
pub const SCAN_FULL: usize = 240;
/// Tasks in the multi-task case.
pub const TASK_COUNT: usize = 8;
/// Worker threads of the multi-thread runtimes.
pub const WORKERS: usize = 2;
/// Tasks in the saturated case.
pub const SAT_TASKS: usize = 64;
/// Streams in the saturated case.
pub const SAT_STREAMS: usize = 4;
/// Queue depth in the saturated case (`SAT_STREAMS × SAT_DEPTH` = 16 slots).
pub const SAT_DEPTH: usize = 4;

/// Full-run operation counts per repeat (scaled by [`Settings::ops`]). Chosen so the full
/// comparison of the stream cases takes about two minutes on the 2-core dev machine and
/// `--quick` about 20 s.
pub mod ops {
    /// `stream/uncontended`.
    pub const UNCONTENDED: u64 = 6_000_000;
    /// `stream/256-streams-240-full`.
    pub const SCAN: u64 = 6_000_000;
    /// `stream/8-tasks-2-workers` (all tasks together).
    pub const TASKS: u64 = 6_000_000;
    /// `stream/saturated` (all tasks together).
    pub const SATURATED: u64 = 1_600_000;
    /// `stream/round-trip`.
    pub const ROUND_TRIP: u64 = 800_000;
}

/// slotpool over the no-op connector.
pub type NoopPool = StreamPool<NoopConnector>;
/// The reference over the no-op connector.
pub type NoopRef = RefStreamPool<NoopConnector>;
/// slotpool over the echo connector.
pub type EchoPool = StreamPool<EchoConnector>;
/// The reference over the echo connector.
pub type EchoRef = RefStreamPool<EchoConnector>;

// ---------------------------------------------------------------------------------------------
// Building blocks
// ---------------------------------------------------------------------------------------------

/// A bounded slotpool pool on `rt` (no background reaper).
pub fn slotpool_pool<C: slotpool::stream::Connector>(
    rt: &Runtime,
    connector: C,
    streams: usize,
    depth: usize,
) -> StreamPool<C> {
    let _enter = rt.enter();
    StreamPool::builder(connector)
        .max_streams(streams)
        .max_queue_depth(depth)
        .reap_interval(None)
        .build()
        .expect("valid bench configuration")
}

/// Opens `streams` streams on a slotpool pool (acquires `streams × depth` guards, drops them)
/// and waits until they are all Ready.
pub fn prewarm_slotpool<C: slotpool::stream::Connector>(
    rt: &Runtime,
    pool: &StreamPool<C>,
    streams: usize,
    depth: usize,
) {
    rt.block_on(async {
        let guards: Vec<_> = (0..streams * depth)
            .map(|_| pool.try_acquire().expect("room while prewarming"))
            .collect();
        drop(guards);
        settle(|| pool.stats().table.ready >= streams).await;
    });
}

/// Opens `streams` streams on a reference pool (as [`prewarm_slotpool`]).
pub fn prewarm_reference<C: crate::reference::stream::RefConnector>(
    rt: &Runtime,
    pool: &RefStreamPool<C>,
    streams: usize,
    depth: usize,
) {
    rt.block_on(async {
        let mut guards = Vec::with_capacity(streams * depth);
        for _ in 0..streams * depth {
            guards.push(pool.get().await);
        }
        drop(guards);
        yield_to_tasks().await;
        assert_eq!(pool.load(), (streams, 0));
    });
}

/// Fills a 256-stream slotpool pool of queue depth `depth` and keeps the lowest 240 streams
/// full: returns the guards that hold them. Checks that the next acquire lands on stream 240.
pub fn fill_slotpool<'p>(
    rt: &Runtime,
    pool: &'p NoopPool,
    depth: usize,
) -> Vec<StreamGuard<'p, NoopConnector>> {
    let mut guards: Vec<_> = (0..SCAN_STREAMS * depth)
        .map(|_| pool.try_acquire().expect("room while filling"))
        .collect();
    guards.retain(|g| g.stream_index().is_some_and(|i| i < SCAN_FULL));
    assert_eq!(
        guards.len(),
        SCAN_FULL * depth,
        "slotpool fills lowest first"
    );
    rt.block_on(settle(|| pool.stats().table.ready == SCAN_STREAMS));
    let probe = pool.try_acquire().expect("room on the top streams");
    assert_eq!(probe.stream_index(), Some(SCAN_FULL));
    guards
}

/// Opens 256 streams on a reference pool, then holds 240 × 8 requests through its own `get()`:
/// returns the guards that hold them.
///
/// R1 takes "the first entry with room" in its `HashMap`'s iteration order, so at this load
/// its own policy leaves the first 240 entries of that order full, and each further `get()`
/// walks past them, the linear scan SEEDS.md names as R1's flaw. This is the reference's
/// counterpart of slotpool's state in [`fill_slotpool`] (its own policy fills the lowest 240
/// slots). Each pool is measured in the state its policy reaches at the same load.
pub fn fill_reference(rt: &Runtime, pool: &NoopRef) -> Vec<RefStreamGuard<NoopConnector>> {
    rt.block_on(async {
        let mut guards = Vec::with_capacity(SCAN_STREAMS * DEPTH);
        for _ in 0..SCAN_STREAMS * DEPTH {
            guards.push(pool.get().await);
        }
        assert_eq!(pool.load(), (SCAN_STREAMS, SCAN_STREAMS * DEPTH));
        guards.clear();
        yield_to_tasks().await;
        assert_eq!(pool.load(), (SCAN_STREAMS, 0), "every stream idle and open");
        for _ in 0..SCAN_FULL * DEPTH {
            guards.push(pool.get().await);
        }
        let mut full: Vec<_> = guards.iter().map(|g| g.stream_id()).collect();
        full.sort_unstable();
        full.dedup();
        assert_eq!(
            full.len(),
            SCAN_FULL,
            "the reference fills one stream at a time"
        );
        assert_eq!(pool.load(), (SCAN_STREAMS, SCAN_FULL * DEPTH));
        guards
    })
}

// ---------------------------------------------------------------------------------------------
// Runners: one task
// ---------------------------------------------------------------------------------------------

/// `ops` × (acquire, drop) on one task.
pub async fn slotpool_acquire_release(pool: &NoopPool, ops: u64) -> Duration {
    let start = Instant::now();
    for _ in 0..ops {
        let guard = pool.acquire().await.expect("pool is open");
        black_box(&guard);
        drop(guard);
    }
    start.elapsed()
}

/// A reference pool's `get`: the future of its own `get()`, handed back as it is, so a runner
/// generic over the reference runs exactly the code a runner written for it would.
pub trait Reference: Send + Sync + 'static {
    /// The reference's guard.
    type Guard: Send;
    /// The reference's `get()`.
    fn get(&self) -> impl std::future::Future<Output = Self::Guard> + Send;
}

impl Reference for NoopRef {
    type Guard = RefStreamGuard<NoopConnector>;
    fn get(&self) -> impl std::future::Future<Output = Self::Guard> + Send {
        RefStreamPool::get(self)
    }
}

/// `ops` × (get, drop) on one task.
pub async fn reference_acquire_release<P: Reference>(pool: &P, ops: u64) -> Duration {
    let start = Instant::now();
    for _ in 0..ops {
        let guard = pool.get().await;
        black_box(&guard);
        drop(guard);
    }
    start.elapsed()
}

/// `ops` × (acquire, send one request to the echo, await its response).
pub async fn slotpool_round_trip(pool: &EchoPool, ops: u64) -> Duration {
    let start = Instant::now();
    for i in 0..ops {
        let guard = pool.acquire().await.expect("pool is open");
        let response = guard.send(Msg::new(i, i)).await.expect("echo answers");
        debug_assert_eq!(response.body, i);
        black_box(response);
    }
    start.elapsed()
}

/// `ops` × (get, send one request to the echo, await its response, drop the guard).
pub async fn reference_round_trip(pool: &EchoRef, ops: u64) -> Duration {
    let start = Instant::now();
    for i in 0..ops {
        let guard = pool.get().await;
        let response = guard.send(Msg::new(i, i)).await.expect("echo answers");
        debug_assert_eq!(response.body, i);
        black_box(response);
        drop(guard);
    }
    start.elapsed()
}

// ---------------------------------------------------------------------------------------------
// Runners: many tasks (call within `Runtime::block_on` of a multi-thread runtime)
// ---------------------------------------------------------------------------------------------

/// `tasks` tasks, each `ops_per_task` × (acquire, drop); wall time for all.
pub async fn slotpool_tasks(pool: &Arc<NoopPool>, tasks: usize, ops_per_task: u64) -> Duration {
    let start = Instant::now();
    let handles = (0..tasks)
        .map(|_| {
            let pool = Arc::clone(pool);
            tokio::spawn(async move { slotpool_acquire_release(&pool, ops_per_task).await })
        })
        .collect();
    join_all(handles).await;
    start.elapsed()
}

/// `tasks` tasks, each `ops_per_task` × (get, drop); wall time for all.
pub async fn reference_tasks<P: Reference>(
    pool: &Arc<P>,
    tasks: usize,
    ops_per_task: u64,
) -> Duration {
    let start = Instant::now();
    let handles = (0..tasks)
        .map(|_| {
            let pool = Arc::clone(pool);
            tokio::spawn(async move { reference_acquire_release(&*pool, ops_per_task).await })
        })
        .collect();
    join_all(handles).await;
    start.elapsed()
}

/// `tasks` tasks, each `ops_per_task` × (CAS below the limit, `fetch_sub`) on one counter.
pub async fn floor_tasks(floor: &Arc<Floor>, tasks: usize, ops_per_task: u64) -> Duration {
    let start = Instant::now();
    let handles = (0..tasks)
        .map(|_| {
            let floor = Arc::clone(floor);
            tokio::spawn(async move { floor_acquire_release(&floor, ops_per_task) })
        })
        .collect();
    join_all(handles).await;
    start.elapsed()
}

/// Something the saturated loop takes a unit of capacity from and holds across a yield.
pub trait Hold: Send + Sync + 'static {
    /// What holds the unit until dropped.
    type Guard<'a>: Send
    where
        Self: 'a;
    /// Waits for a unit.
    fn hold(&self) -> impl std::future::Future<Output = Self::Guard<'_>> + Send;
}

impl Hold for NoopPool {
    type Guard<'a> = StreamGuard<'a, NoopConnector>;
    async fn hold(&self) -> Self::Guard<'_> {
        self.acquire().await.expect("pool is open")
    }
}

impl Hold for NoopRef {
    type Guard<'a> = RefStreamGuard<NoopConnector>;
    async fn hold(&self) -> Self::Guard<'_> {
        self.get().await
    }
}

impl Hold for tokio::sync::Semaphore {
    type Guard<'a> = tokio::sync::SemaphorePermit<'a>;
    async fn hold(&self) -> Self::Guard<'_> {
        self.acquire().await.expect("never closed")
    }
}

/// `tasks` tasks, each `ops_per_task` × (time the acquire, hold the guard across one yield,
/// drop); wall time for all and every acquire's wait. Runs on slotpool's pool, the reference
/// or a bare tokio `Semaphore` (the async-wait bound of the case).
pub async fn saturated_tasks<P: Hold>(
    pool: &Arc<P>,
    tasks: usize,
    ops_per_task: u64,
) -> (Duration, Histogram<u64>) {
    let start = Instant::now();
    let handles = (0..tasks)
        .map(|_| {
            let pool = Arc::clone(pool);
            tokio::spawn(async move {
                let mut waits = wait_histogram();
                for _ in 0..ops_per_task {
                    let asked = Instant::now();
                    let guard = pool.hold().await;
                    waits.saturating_record(nanos(asked.elapsed()));
                    tokio::task::yield_now().await;
                    drop(guard);
                }
                waits
            })
        })
        .collect();
    let waits = join_all(handles).await;
    (start.elapsed(), merge_waits(waits))
}

// ---------------------------------------------------------------------------------------------
// The comparison
// ---------------------------------------------------------------------------------------------

/// The stream cases, in the order the comparison runs them.
pub const CASES: &[Case] = &[
    (UNCONTENDED, uncontended),
    (SCAN, scan),
    (TASKS, tasks),
    (SATURATED, saturated),
    (ROUND_TRIP, round_trip),
];

/// The three implementations of a one-task acquire/release case on `rt`: slotpool's `pool`,
/// a reference (with its name in the records) and the floor.
pub fn one_task_runners<'a, R: Reference>(
    rt: &'a Runtime,
    pool: &'a NoopPool,
    (name, reference): (&'a str, &'a R),
    floor: &'a Floor,
) -> Vec<Runner<'a>> {
    vec![
        (
            "slotpool",
            Box::new(move |ops| {
                Sample::timed(ops, rt.block_on(slotpool_acquire_release(pool, ops)))
            }),
        ),
        (
            name,
            Box::new(move |ops| {
                Sample::timed(ops, rt.block_on(reference_acquire_release(reference, ops)))
            }),
        ),
        (
            "floor",
            Box::new(move |ops| {
                Sample::timed(
                    ops,
                    rt.block_on(async { floor_acquire_release(floor, ops) }),
                )
            }),
        ),
    ]
}

/// The three implementations of a multi-task acquire/release case: `tasks` tasks on `rt`
/// share each run's operations.
pub fn many_task_runners<'a, R: Reference>(
    rt: &'a Runtime,
    pool: &'a Arc<NoopPool>,
    (name, reference): (&'a str, &'a Arc<R>),
    floor: &'a Arc<Floor>,
    tasks: usize,
) -> Vec<Runner<'a>> {
    vec![
        (
            "slotpool",
            Box::new(move |ops| {
                let (per, done) = split(ops, tasks);
                Sample::timed(done, rt.block_on(slotpool_tasks(pool, tasks, per)))
            }),
        ),
        (
            name,
            Box::new(move |ops| {
                let (per, done) = split(ops, tasks);
                Sample::timed(done, rt.block_on(reference_tasks(reference, tasks, per)))
            }),
        ),
        (
            "floor",
            Box::new(move |ops| {
                let (per, done) = split(ops, tasks);
                Sample::timed(done, rt.block_on(floor_tasks(floor, tasks, per)))
            }),
        ),
    ]
}

fn uncontended(settings: &Settings) -> Vec<Record> {
    let rt = current_thread();
    let pool = slotpool_pool(&rt, NoopConnector, STREAMS, DEPTH);
    prewarm_slotpool(&rt, &pool, 1, 1);
    let reference = NoopRef::new(NoopConnector, Some(STREAMS), DEPTH);
    prewarm_reference(&rt, &reference, 1, 1);
    let floor = Floor::new(STREAMS * DEPTH);
    let ops = settings.ops(ops::UNCONTENDED, 1_000);
    let impls = one_task_runners(&rt, &pool, ("reference", &reference), &floor);
    interleave(UNCONTENDED, ops, settings, impls)
}

fn scan(settings: &Settings) -> Vec<Record> {
    let rt = current_thread();
    let pool = slotpool_pool(&rt, NoopConnector, SCAN_STREAMS, DEPTH);
    let held = fill_slotpool(&rt, &pool, DEPTH);
    let reference = NoopRef::new(NoopConnector, Some(SCAN_STREAMS), DEPTH);
    let ref_held = fill_reference(&rt, &reference);
    let floor = Floor::new(SCAN_STREAMS * DEPTH);
    let ops = settings.ops(ops::SCAN, 1_000);
    let impls = one_task_runners(&rt, &pool, ("reference", &reference), &floor);
    let records = interleave(SCAN, ops, settings, impls);
    drop(held);
    drop(ref_held);
    records
}

fn tasks(settings: &Settings) -> Vec<Record> {
    let rt = multi_thread(WORKERS);
    tasks_on(
        TASKS,
        &rt,
        TASK_COUNT,
        settings.ops(ops::TASKS, 1_000),
        settings,
    )
}

/// The multi-task case on `rt` with `tasks` tasks and about `ops` operations in all, reported
/// as `case` (also the scaling runs' stream case).
pub fn tasks_on(
    case: &str,
    rt: &Runtime,
    tasks: usize,
    ops: u64,
    settings: &Settings,
) -> Vec<Record> {
    let pool = Arc::new(slotpool_pool(rt, NoopConnector, STREAMS, DEPTH));
    prewarm_slotpool(rt, &pool, 1, 1);
    let reference = Arc::new(NoopRef::new(NoopConnector, Some(STREAMS), DEPTH));
    prewarm_reference(rt, &reference, 1, 1);
    let floor = Arc::new(Floor::new(STREAMS * DEPTH));
    let impls = many_task_runners(rt, &pool, ("reference", &reference), &floor, tasks);
    interleave(case, split(ops, tasks).1, settings, impls)
}

fn saturated(settings: &Settings) -> Vec<Record> {
    let rt = multi_thread(WORKERS);
    saturated_on(
        SATURATED,
        &rt,
        settings.ops(ops::SATURATED, 1_000),
        settings,
    )
}

/// The saturated case on `rt` with about `ops` operations in all, reported as `case` (also
/// the scaling runs' saturated case).
pub fn saturated_on(case: &str, rt: &Runtime, ops: u64, settings: &Settings) -> Vec<Record> {
    let pool = Arc::new(slotpool_pool(rt, NoopConnector, SAT_STREAMS, SAT_DEPTH));
    prewarm_slotpool(rt, &pool, SAT_STREAMS, SAT_DEPTH);
    let reference = Arc::new(NoopRef::new(NoopConnector, Some(SAT_STREAMS), SAT_DEPTH));
    prewarm_reference(rt, &reference, SAT_STREAMS, SAT_DEPTH);
    let permits = Arc::new(tokio::sync::Semaphore::new(SAT_STREAMS * SAT_DEPTH));
    // No floor: see the module documentation.
    let impls: Vec<Runner<'_>> = vec![
        ("slotpool", saturated_runner(rt, &pool)),
        ("reference", saturated_runner(rt, &reference)),
        ("tokio-semaphore", saturated_runner(rt, &permits)),
    ];
    interleave(case, split(ops, SAT_TASKS).1, settings, impls)
}

/// Runs [`saturated_tasks`] on `pool`, about `ops` operations over [`SAT_TASKS`] tasks.
pub fn saturated_runner<'a, P: Hold>(
    rt: &'a Runtime,
    pool: &'a Arc<P>,
) -> Box<dyn FnMut(u64) -> Sample + 'a> {
    Box::new(move |ops| {
        let (per, done) = split(ops, SAT_TASKS);
        let (elapsed, waits) = rt.block_on(saturated_tasks(pool, SAT_TASKS, per));
        Sample {
            ops: done,
            elapsed,
            waits: Some(waits),
        }
    })
}

fn round_trip(settings: &Settings) -> Vec<Record> {
    let rt = current_thread();
    let pool = slotpool_pool(&rt, EchoConnector, STREAMS, DEPTH);
    prewarm_slotpool(&rt, &pool, 1, 1);
    let reference = EchoRef::new(EchoConnector, Some(STREAMS), DEPTH);
    prewarm_reference(&rt, &reference, 1, 1);
    let ops = settings.ops(ops::ROUND_TRIP, 200);
    // No floor: see the module documentation.
    let impls: Vec<Runner<'_>> = vec![
        (
            "slotpool",
            Box::new(|ops| Sample::timed(ops, rt.block_on(slotpool_round_trip(&pool, ops)))),
        ),
        (
            "reference",
            Box::new(|ops| Sample::timed(ops, rt.block_on(reference_round_trip(&reference, ops)))),
        ),
    ];
    interleave(ROUND_TRIP, ops, settings, impls)
}
