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

use crate::cases::client::{self as client_cases, checkouts_spread};
use crate::cases::session;
use crate::cases::stream as stream_cases;
use crate::fixtures::multi_thread;
use crate::report::{interleave, split, Record, Runner, Sample, Settings};

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

fn stream(settings: &Settings, rt: &Runtime, workers: usize) -> Vec<Record> {
    let case = format!("scaling/stream-{workers}w");
    let ops = settings.ops(ops::STREAM, 1_000);
    stream_cases::tasks_on(&case, rt, workers * TASKS_PER_WORKER, ops, settings)
}

fn saturated(settings: &Settings, rt: &Runtime, workers: usize) -> Vec<Record> {
    let case = format!("scaling/stream-saturated-{workers}w");
    stream_cases::saturated_on(&case, rt, settings.ops(ops::SATURATED, 1_000), settings)
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
    pool.close();
    rt.block_on(reference.stop());
    records
}
