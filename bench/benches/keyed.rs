//! Criterion benches of keyed admission: slotpool and the R2 reference side by side in each
//! group, timing the same runners as the `compare` run (`slotpool_bench::cases::keyed`).
//!
//! Groups: `keyed/uncontended`, `keyed/8-tasks-2-workers` and `keyed/spawn-blocking` (see the
//! case table in `bench/src/cases/keyed.rs`). Smoke run:
//! `cargo bench -p slotpool-bench --bench keyed -- --test`.

use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use slotpool_bench::cases::keyed::{
    reference_admit_release, reference_spawn_blocking, reference_tasks, slotpool_admit_release,
    slotpool_keyed, slotpool_spawn_blocking, slotpool_tasks, SPAWN_BLOCKING, TASKS, UNCONTENDED,
    WORKERS,
};
use slotpool_bench::fixtures::{current_thread, multi_thread};
use slotpool_bench::reference::keyed::RefKeyed;

fn uncontended(c: &mut Criterion) {
    let rt = current_thread();
    let keyed = slotpool_keyed();
    let reference = RefKeyed::new();
    let mut group = c.benchmark_group(UNCONTENDED);
    group.bench_function("slotpool", |b| {
        b.iter_custom(|iters| rt.block_on(slotpool_admit_release(&keyed, 0, iters)));
    });
    group.bench_function("reference", |b| {
        b.iter_custom(|iters| rt.block_on(reference_admit_release(&reference, 0, iters)));
    });
    group.finish();
}

fn tasks(c: &mut Criterion) {
    let rt = multi_thread(WORKERS);
    let keyed = Arc::new(slotpool_keyed());
    let reference = Arc::new(RefKeyed::new());
    let mut group = c.benchmark_group(TASKS);
    // One iteration is one admission; the tasks split the iterations between them.
    group.bench_function("slotpool", |b| {
        b.iter_custom(|iters| slotpool_tasks(&rt, &keyed, iters));
    });
    group.bench_function("reference", |b| {
        b.iter_custom(|iters| reference_tasks(&rt, &reference, iters));
    });
    group.finish();
}

fn spawn_blocking(c: &mut Criterion) {
    let rt = multi_thread(WORKERS);
    let keyed = Arc::new(slotpool_keyed());
    let reference = Arc::new(RefKeyed::new());
    let mut group = c.benchmark_group(SPAWN_BLOCKING);
    group.sample_size(20);
    group.measurement_time(Duration::from_secs(3));
    group.bench_function("slotpool", |b| {
        b.iter_custom(|iters| slotpool_spawn_blocking(&rt, &keyed, iters));
    });
    group.bench_function("reference", |b| {
        b.iter_custom(|iters| reference_spawn_blocking(&rt, &reference, iters));
    });
    group.finish();
}

criterion_group!(benches, uncontended, tasks, spawn_blocking);
criterion_main!(benches);
