//! Criterion groups for the session cases: `slotpool` and `reference` (R3) side by side.
//!
//! The runners are `slotpool_bench::cases::session`'s, so these time the same code as the
//! `slotpool-bench` comparison. Both cases run 8 tasks on a 2-worker runtime, so they use
//! `iter_custom` with the wall time of all tasks; criterion's per-iteration time is per
//! acquire (hot) or per acquire → release cycle (churn), over all tasks.

use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use slotpool_bench::cases::session::{
    fill_reference, fill_slotpool, hot_ids, reference_churn, reference_hot, reference_pool,
    runtime, slotpool_churn, slotpool_hot, slotpool_pool, CHURN, HOT, TASK_COUNT,
};

/// Splits criterion's iteration count over the tasks (at least one each).
fn per_task(iters: u64) -> u64 {
    iters.div_ceil(TASK_COUNT as u64).max(1)
}

/// Scales a run's wall time back to `iters` operations when rounding gave each task more.
fn scaled(elapsed: Duration, iters: u64) -> Duration {
    let ran = per_task(iters) * TASK_COUNT as u64;
    elapsed.mul_f64(iters.max(1) as f64 / ran as f64)
}

fn hot(c: &mut Criterion) {
    let rt = runtime();
    let ids = hot_ids();
    let pool = slotpool_pool(&rt);
    fill_slotpool(&rt, &pool, &ids);
    let reference = reference_pool(&rt);
    fill_reference(&rt, &reference, &ids);

    let mut group = c.benchmark_group(HOT);
    group.throughput(Throughput::Elements(1));
    group.bench_function(BenchmarkId::from_parameter("slotpool"), |b| {
        b.iter_custom(|iters| {
            scaled(
                rt.block_on(slotpool_hot(&pool, &ids, TASK_COUNT, per_task(iters))),
                iters,
            )
        });
    });
    group.bench_function(BenchmarkId::from_parameter("reference"), |b| {
        b.iter_custom(|iters| {
            scaled(
                rt.block_on(reference_hot(&reference, &ids, TASK_COUNT, per_task(iters))),
                iters,
            )
        });
    });
    group.finish();
    pool.close();
    rt.block_on(reference.stop());
}

fn churn(c: &mut Criterion) {
    let rt = runtime();
    let pool = slotpool_pool(&rt);
    let reference = reference_pool(&rt);

    let mut group = c.benchmark_group(CHURN);
    group.throughput(Throughput::Elements(1));
    group.bench_function(BenchmarkId::from_parameter("slotpool"), |b| {
        b.iter_custom(|iters| {
            scaled(
                rt.block_on(slotpool_churn(&pool, TASK_COUNT, per_task(iters))),
                iters,
            )
        });
    });
    group.bench_function(BenchmarkId::from_parameter("reference"), |b| {
        b.iter_custom(|iters| {
            scaled(
                rt.block_on(reference_churn(&reference, TASK_COUNT, per_task(iters))),
                iters,
            )
        });
    });
    group.finish();
    pool.close();
    rt.block_on(reference.stop());
}

criterion_group!(benches, hot, churn);
criterion_main!(benches);
