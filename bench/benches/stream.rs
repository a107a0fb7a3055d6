//! Criterion groups for the stream cases: `slotpool`, `reference` (R1) and `floor` side by
//! side, timing the very runners `slotpool-bench` uses (`slotpool_bench::cases::stream` and
//! `slotpool_bench::cases::stream_depth1`).
//!
//! `cargo bench -p slotpool-bench --bench stream` measures; `-- --test` runs each benchmark
//! once (the CI smoke). The floor is left out of `stream/saturated` (it cannot wait; a bare
//! tokio `Semaphore` runs that loop instead) and `stream/round-trip` (it routes nothing); see
//! the module documentation of `slotpool_bench::cases::stream`. The `stream-depth1/*` groups
//! put slotpool at `max_queue_depth(1)` beside R1's depth-1 design (`reference-depth1`) and
//! the floor.

use std::sync::Arc;
use std::time::Duration;

use criterion::measurement::WallTime;
use criterion::{criterion_group, criterion_main, BenchmarkGroup, Criterion};
use slotpool_bench::cases::stream::*;
use slotpool_bench::cases::stream_depth1 as depth1;
use slotpool_bench::fixtures::{
    current_thread, floor_acquire_release, multi_thread, EchoConnector, Floor, NoopConnector,
};
use tokio::runtime::Runtime;

fn configure<'a>(c: &'a mut Criterion, name: &str) -> BenchmarkGroup<'a, WallTime> {
    let mut group = c.benchmark_group(name);
    group
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    group
}

/// Runs at least `iters` operations as `per_task × tasks` and scales the time back to `iters`.
fn per_task(iters: u64, tasks: usize) -> (u64, impl Fn(Duration) -> Duration) {
    let per = iters.div_ceil(tasks as u64).max(1);
    let ran = per * tasks as u64;
    (per, move |d: Duration| d.mul_f64(iters as f64 / ran as f64))
}

fn uncontended(c: &mut Criterion) {
    let rt = current_thread();
    let pool = slotpool_pool(&rt, NoopConnector, STREAMS, DEPTH);
    prewarm_slotpool(&rt, &pool, 1, 1);
    let reference = NoopRef::new(NoopConnector, Some(STREAMS), DEPTH);
    prewarm_reference(&rt, &reference, 1, 1);
    let floor = Floor::new(STREAMS * DEPTH);
    one_task_group(
        c,
        UNCONTENDED,
        &rt,
        &pool,
        ("reference", &reference),
        &floor,
    );
}

fn scan(c: &mut Criterion) {
    let rt = current_thread();
    let pool = slotpool_pool(&rt, NoopConnector, SCAN_STREAMS, DEPTH);
    let held = fill_slotpool(&rt, &pool, DEPTH);
    let reference = NoopRef::new(NoopConnector, Some(SCAN_STREAMS), DEPTH);
    let ref_held = fill_reference(&rt, &reference);
    let floor = Floor::new(SCAN_STREAMS * DEPTH);
    one_task_group(c, SCAN, &rt, &pool, ("reference", &reference), &floor);
    drop(held);
    drop(ref_held);
}

fn tasks(c: &mut Criterion) {
    let rt = multi_thread(WORKERS);
    let pool = Arc::new(slotpool_pool(&rt, NoopConnector, STREAMS, DEPTH));
    prewarm_slotpool(&rt, &pool, 1, 1);
    let reference = Arc::new(NoopRef::new(NoopConnector, Some(STREAMS), DEPTH));
    prewarm_reference(&rt, &reference, 1, 1);
    let floor = Arc::new(Floor::new(STREAMS * DEPTH));
    many_task_group(c, TASKS, &rt, &pool, ("reference", &reference), &floor);
}

/// The `stream-depth1/*` cases: slotpool at `max_queue_depth(1)`, R1's depth-1 design
/// (`reference-depth1`) and the floor.
fn depth1(c: &mut Criterion) {
    let rt = current_thread();
    let pool = slotpool_pool(&rt, NoopConnector, STREAMS, depth1::DEPTH);
    prewarm_slotpool(&rt, &pool, 1, depth1::DEPTH);
    let reference = depth1::reference_pool(&rt, STREAMS);
    depth1::prewarm_reference(&rt, &reference, 1);
    let floor = Floor::new(STREAMS);
    let named = (depth1::REFERENCE, &reference);
    one_task_group(c, depth1::UNCONTENDED, &rt, &pool, named, &floor);

    let busy = slotpool_pool(&rt, NoopConnector, depth1::BUSY_STREAMS, depth1::DEPTH);
    let held = depth1::fill_slotpool(&rt, &busy);
    let busy_ref = depth1::reference_pool(&rt, depth1::BUSY_STREAMS);
    let ref_held = depth1::fill_reference(&rt, &busy_ref);
    let floor = Floor::new(depth1::BUSY_STREAMS);
    let named = (depth1::REFERENCE, &busy_ref);
    one_task_group(c, depth1::BUSY, &rt, &busy, named, &floor);
    drop(held);
    drop(ref_held);

    let rt = multi_thread(WORKERS);
    let pool = Arc::new(slotpool_pool(&rt, NoopConnector, STREAMS, depth1::DEPTH));
    prewarm_slotpool(&rt, &pool, TASK_COUNT, depth1::DEPTH);
    let reference = Arc::new(depth1::reference_pool(&rt, STREAMS));
    depth1::prewarm_reference(&rt, &reference, TASK_COUNT);
    let floor = Arc::new(Floor::new(STREAMS));
    let named = (depth1::REFERENCE, &reference);
    many_task_group(c, depth1::TASKS, &rt, &pool, named, &floor);
}

/// One group of a one-task acquire/release case: slotpool, a reference (with its name) and
/// the floor.
fn one_task_group<R: Reference>(
    c: &mut Criterion,
    case: &str,
    rt: &Runtime,
    pool: &NoopPool,
    (name, reference): (&str, &R),
    floor: &Floor,
) {
    let mut group = configure(c, case);
    group.bench_function("slotpool", |b| {
        b.iter_custom(|iters| rt.block_on(slotpool_acquire_release(pool, iters)))
    });
    group.bench_function(name, |b| {
        b.iter_custom(|iters| rt.block_on(reference_acquire_release(reference, iters)))
    });
    group.bench_function("floor", |b| {
        b.iter_custom(|iters| floor_acquire_release(floor, iters))
    });
    group.finish();
}

/// One group of a multi-task acquire/release case ([`TASK_COUNT`] tasks share the
/// iterations): slotpool, a reference (with its name) and the floor.
fn many_task_group<R: Reference>(
    c: &mut Criterion,
    case: &str,
    rt: &Runtime,
    pool: &Arc<NoopPool>,
    (name, reference): (&str, &Arc<R>),
    floor: &Arc<Floor>,
) {
    let mut group = configure(c, case);
    group.bench_function("slotpool", |b| {
        b.iter_custom(|iters| {
            let (per, scale) = per_task(iters, TASK_COUNT);
            scale(rt.block_on(slotpool_tasks(pool, TASK_COUNT, per)))
        })
    });
    group.bench_function(name, |b| {
        b.iter_custom(|iters| {
            let (per, scale) = per_task(iters, TASK_COUNT);
            scale(rt.block_on(reference_tasks(reference, TASK_COUNT, per)))
        })
    });
    group.bench_function("floor", |b| {
        b.iter_custom(|iters| {
            let (per, scale) = per_task(iters, TASK_COUNT);
            scale(rt.block_on(floor_tasks(floor, TASK_COUNT, per)))
        })
    });
    group.finish();
}

fn saturated(c: &mut Criterion) {
    let rt = multi_thread(WORKERS);
    let pool = Arc::new(slotpool_pool(&rt, NoopConnector, SAT_STREAMS, SAT_DEPTH));
    prewarm_slotpool(&rt, &pool, SAT_STREAMS, SAT_DEPTH);
    let reference = Arc::new(NoopRef::new(NoopConnector, Some(SAT_STREAMS), SAT_DEPTH));
    prewarm_reference(&rt, &reference, SAT_STREAMS, SAT_DEPTH);
    let mut group = configure(c, SATURATED);
    group.bench_function("slotpool", |b| {
        b.iter_custom(|iters| {
            let (per, scale) = per_task(iters, SAT_TASKS);
            scale(rt.block_on(saturated_tasks(&pool, SAT_TASKS, per)).0)
        })
    });
    group.bench_function("reference", |b| {
        b.iter_custom(|iters| {
            let (per, scale) = per_task(iters, SAT_TASKS);
            scale(rt.block_on(saturated_tasks(&reference, SAT_TASKS, per)).0)
        })
    });
    let permits = Arc::new(tokio::sync::Semaphore::new(SAT_STREAMS * SAT_DEPTH));
    group.bench_function("tokio-semaphore", |b| {
        b.iter_custom(|iters| {
            let (per, scale) = per_task(iters, SAT_TASKS);
            scale(rt.block_on(saturated_tasks(&permits, SAT_TASKS, per)).0)
        })
    });
    group.finish();
}

fn round_trip(c: &mut Criterion) {
    let rt = current_thread();
    let pool = slotpool_pool(&rt, EchoConnector, STREAMS, DEPTH);
    prewarm_slotpool(&rt, &pool, 1, 1);
    let reference = EchoRef::new(EchoConnector, Some(STREAMS), DEPTH);
    prewarm_reference(&rt, &reference, 1, 1);
    let mut group = configure(c, ROUND_TRIP);
    group.bench_function("slotpool", |b| {
        b.iter_custom(|iters| rt.block_on(slotpool_round_trip(&pool, iters)))
    });
    group.bench_function("reference", |b| {
        b.iter_custom(|iters| rt.block_on(reference_round_trip(&reference, iters)))
    });
    group.finish();
}

criterion_group!(
    benches,
    uncontended,
    scan,
    tasks,
    saturated,
    round_trip,
    depth1
);
criterion_main!(benches);
