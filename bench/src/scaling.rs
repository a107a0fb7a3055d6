//! Scaling: the contended cases again at 1, 2, 4, 8 and 16 runtime workers, with four tasks per
//! worker, every implementation interleaved in one process as in the main comparison.
//!
//! | case | what it measures |
//! |---|---|
//! | `scaling/stream-{w}w` | `4w` tasks looping `StreamPool` acquire → drop, 64 streams × depth 8 (slotpool, reference, floor) |
//! | `scaling/stream-saturated-{w}w` | 64 tasks for 16 slots (4 × 4), each guard held across one yield; wait percentiles (slotpool, reference, tokio-semaphore) |
//! | `scaling/client-{w}w` | `4w` tasks looping exclusive checkout from 16 clients (slotpool, reference, deadpool, bb8, tokio-semaphore) |
//! | `scaling/session-hot-{w}w` | `4w` tasks re-acquiring random live sessions out of 1000 (slotpool, reference) |
//!
//! A 2-core machine cannot show scaling: run `slotpool-bench --scaling` where there are at
//! least 16 cores. Throughput per operation is wall time over all tasks' operations, so a
//! design that scales shows ns/op falling as workers are added, and one that serialises
//! shows it flat or rising.

use std::sync::Arc;
use std::time::Duration;

use tokio::runtime::Runtime;

use crate::client_cases::{self, checkouts_spread};
use crate::fixtures::NoopConnector;
use crate::report::{interleave, Floor, Record, Runner, Sample, Settings};
use crate::session;
use crate::stream_cases::{
    floor_tasks, multi_thread, prewarm_reference, prewarm_slotpool, reference_tasks,
    saturated_tasks, slotpool_pool, slotpool_tasks, NoopRef, DEPTH, SAT_DEPTH, SAT_STREAMS,
    SAT_TASKS, STREAMS,
};

/// Worker counts measured by default.
pub const WORKERS: [usize; 5] = [1, 2, 4, 8, 16];
/// Tasks per worker in the acquire → drop cases.
pub const TASKS_PER_WORKER: usize = 4;

/// Full-run operation counts per repeat, all tasks together (scaled by [`Settings::ops`]).
pub mod ops {
    /// `scaling/stream-{w}w`.
    pub const STREAM: u64 = 2_000_000;
    /// `scaling/stream-saturated-{w}w`.
    pub const SATURATED: u64 = 400_000;
    /// `scaling/client-{w}w`.
    pub const CLIENT: u64 = 600_000;
    /// `scaling/session-hot-{w}w`.
    pub const SESSION: u64 = 400_000;
}

/// Runs every scaling case at each of `workers`.
pub fn compare(settings: &Settings, workers: &[usize]) -> Vec<Record> {
    let mut records = Vec::new();
    for &w in workers {
        let rt = multi_thread(w);
        records.extend(stream(settings, &rt, w));
        records.extend(saturated(settings, &rt, w));
        records.extend(client(settings, &rt, w));
        records.extend(session_hot(settings, &rt, w));
    }
    records
}

/// Splits `ops` over `tasks`, returning (per task, total actually done).
fn split(ops: u64, tasks: usize) -> (u64, u64) {
    let per = (ops / tasks as u64).max(1);
    (per, per * tasks as u64)
}

fn stream(settings: &Settings, rt: &Runtime, workers: usize) -> Vec<Record> {
    let tasks = workers * TASKS_PER_WORKER;
    let pool = Arc::new(slotpool_pool(rt, NoopConnector, STREAMS, DEPTH));
    prewarm_slotpool(rt, &pool, 1, 1);
    let reference = Arc::new({
        let _enter = rt.enter();
        NoopRef::new(NoopConnector, Some(STREAMS), DEPTH)
    });
    prewarm_reference(rt, &reference, 1, 1);
    let floor = Arc::new(Floor::new(STREAMS * DEPTH));
    let (_, ops) = split(settings.ops(ops::STREAM, 1_000), tasks);
    let impls: Vec<Runner<'_>> = vec![
        (
            "slotpool",
            Box::new(|ops| {
                let (per, done) = split(ops, tasks);
                Sample::timed(done, rt.block_on(slotpool_tasks(&pool, tasks, per)))
            }),
        ),
        (
            "reference",
            Box::new(|ops| {
                let (per, done) = split(ops, tasks);
                Sample::timed(done, rt.block_on(reference_tasks(&reference, tasks, per)))
            }),
        ),
        (
            "floor",
            Box::new(|ops| {
                let (per, done) = split(ops, tasks);
                Sample::timed(done, rt.block_on(floor_tasks(&floor, tasks, per)))
            }),
        ),
    ];
    interleave(&format!("scaling/stream-{workers}w"), ops, settings, impls)
}

fn saturated(settings: &Settings, rt: &Runtime, workers: usize) -> Vec<Record> {
    let pool = Arc::new(slotpool_pool(rt, NoopConnector, SAT_STREAMS, SAT_DEPTH));
    prewarm_slotpool(rt, &pool, SAT_STREAMS, SAT_DEPTH);
    let reference = Arc::new({
        let _enter = rt.enter();
        NoopRef::new(NoopConnector, Some(SAT_STREAMS), SAT_DEPTH)
    });
    prewarm_reference(rt, &reference, SAT_STREAMS, SAT_DEPTH);
    let permits = Arc::new(tokio::sync::Semaphore::new(SAT_STREAMS * SAT_DEPTH));
    let (_, ops) = split(settings.ops(ops::SATURATED, 1_000), SAT_TASKS);
    let impls: Vec<Runner<'_>> = vec![
        (
            "slotpool",
            Box::new(|ops| {
                let (per, done) = split(ops, SAT_TASKS);
                let (d, waits) = rt.block_on(saturated_tasks(&pool, SAT_TASKS, per));
                Sample {
                    ops: done,
                    elapsed: d,
                    waits: Some(waits),
                }
            }),
        ),
        (
            "reference",
            Box::new(|ops| {
                let (per, done) = split(ops, SAT_TASKS);
                let (d, waits) = rt.block_on(saturated_tasks(&reference, SAT_TASKS, per));
                Sample {
                    ops: done,
                    elapsed: d,
                    waits: Some(waits),
                }
            }),
        ),
        (
            "tokio-semaphore",
            Box::new(|ops| {
                let (per, done) = split(ops, SAT_TASKS);
                let (d, waits) = rt.block_on(saturated_tasks(&permits, SAT_TASKS, per));
                Sample {
                    ops: done,
                    elapsed: d,
                    waits: Some(waits),
                }
            }),
        ),
    ];
    let case = format!("scaling/stream-saturated-{workers}w");
    interleave(&case, ops, settings, impls)
}

fn client(settings: &Settings, rt: &Runtime, workers: usize) -> Vec<Record> {
    let tasks = workers * TASKS_PER_WORKER;
    let s = Arc::new(client_cases::slotpool(rt));
    let r = Arc::new(client_cases::reference(rt));
    let d = Arc::new(client_cases::deadpool(rt));
    let b = Arc::new(client_cases::bb8(rt));
    let t = Arc::new(client_cases::tokio_semaphore());
    let (_, ops) = split(settings.ops(ops::CLIENT, 1_000), tasks);
    let timed = |elapsed: Duration, ops: u64| Sample::timed(split(ops, tasks).1, elapsed);
    let per = |ops: u64| split(ops, tasks).0;
    let impls: Vec<Runner<'_>> = vec![
        (
            "slotpool",
            Box::new(|ops| timed(rt.block_on(checkouts_spread(&s, tasks, per(ops))), ops)),
        ),
        (
            "reference",
            Box::new(|ops| timed(rt.block_on(checkouts_spread(&r, tasks, per(ops))), ops)),
        ),
        (
            "deadpool",
            Box::new(|ops| timed(rt.block_on(checkouts_spread(&d, tasks, per(ops))), ops)),
        ),
        (
            "bb8",
            Box::new(|ops| timed(rt.block_on(checkouts_spread(&b, tasks, per(ops))), ops)),
        ),
        (
            "tokio-semaphore",
            Box::new(|ops| timed(rt.block_on(checkouts_spread(&t, tasks, per(ops))), ops)),
        ),
    ];
    interleave(&format!("scaling/client-{workers}w"), ops, settings, impls)
}

fn session_hot(settings: &Settings, rt: &Runtime, workers: usize) -> Vec<Record> {
    let tasks = workers * TASKS_PER_WORKER;
    let ids = session::hot_ids();
    let pool = session::slotpool_pool(rt);
    session::fill_slotpool(rt, &pool, &ids);
    let reference = session::reference_pool(rt);
    session::fill_reference(rt, &reference, &ids);
    let (_, ops) = split(settings.ops(ops::SESSION, 1_000), tasks);
    let impls: Vec<Runner<'_>> = vec![
        (
            "slotpool",
            Box::new(|ops| {
                let (per, done) = split(ops, tasks);
                let d = rt.block_on(session::slotpool_hot(&pool, &ids, tasks, per));
                Sample::timed(done, d)
            }),
        ),
        (
            "reference",
            Box::new(|ops| {
                let (per, done) = split(ops, tasks);
                let d = rt.block_on(session::reference_hot(&reference, &ids, tasks, per));
                Sample::timed(done, d)
            }),
        ),
    ];
    let records = interleave(
        &format!("scaling/session-hot-{workers}w"),
        ops,
        settings,
        impls,
    );
    pool.stop();
    rt.block_on(reference.stop());
    records
}

/// One line per case family and worker count: each implementation's ns/op and how many
/// times slower than slotpool it is.
pub fn summary(records: &[Record]) -> String {
    use std::fmt::Write as _;
    let mut out =
        String::from("scaling summary (ns/op; in brackets: that impl's ns/op over slotpool's)\n");
    for case in crate::report::cases(records) {
        let Some(slot) = crate::report::find(records, case, "slotpool") else {
            continue;
        };
        let _ = write!(out, "  {case:<34} slotpool {:>8.1}", slot.ns_per_op);
        for r in records
            .iter()
            .filter(|r| r.case == case && r.impl_name != "slotpool")
        {
            let _ = write!(
                out,
                "  {} {:.1} ({:.2}×)",
                r.impl_name,
                r.ns_per_op,
                r.ns_per_op / slot.ns_per_op
            );
        }
        out.push('\n');
    }
    out
}
