//! Criterion benches of exclusive client checkout: slotpool, the R1 reference, deadpool 0.13
//! (unmanaged), bb8 0.9 (no-op manager) and a bare tokio `Semaphore` side by side in each
//! group, timing the same runners as the `compare` run (`slotpool_bench::cases::client`).
//!
//! Groups: `client/uncontended` and `client/8-tasks-2-workers`. Smoke run:
//! `cargo bench -p slotpool-bench --bench client -- --test`.

use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion};
use slotpool_bench::cases::client::{
    bb8, checkouts, checkouts_on_tasks, deadpool, reference, slotpool, tokio_semaphore, TASKS,
    UNCONTENDED, WORKERS,
};
use slotpool_bench::fixtures::{current_thread, multi_thread};

fn uncontended(c: &mut Criterion) {
    let rt = current_thread();
    let (s, r, d, b, t) = (
        slotpool(&rt),
        reference(&rt),
        deadpool(&rt),
        bb8(&rt),
        tokio_semaphore(),
    );
    let mut group = c.benchmark_group(UNCONTENDED);
    group.bench_function("slotpool", |bench| {
        bench.iter_custom(|iters| rt.block_on(checkouts(&s, iters)))
    });
    group.bench_function("reference", |bench| {
        bench.iter_custom(|iters| rt.block_on(checkouts(&r, iters)))
    });
    group.bench_function("deadpool", |bench| {
        bench.iter_custom(|iters| rt.block_on(checkouts(&d, iters)))
    });
    group.bench_function("bb8", |bench| {
        bench.iter_custom(|iters| rt.block_on(checkouts(&b, iters)))
    });
    group.bench_function("tokio-semaphore", |bench| {
        bench.iter_custom(|iters| rt.block_on(checkouts(&t, iters)))
    });
    group.finish();
}

fn tasks(c: &mut Criterion) {
    let rt = multi_thread(WORKERS);
    let s = Arc::new(slotpool(&rt));
    let r = Arc::new(reference(&rt));
    let d = Arc::new(deadpool(&rt));
    let b = Arc::new(bb8(&rt));
    let t = Arc::new(tokio_semaphore());
    let mut group = c.benchmark_group(TASKS);
    // One iteration is one checkout; the 8 tasks split the iterations between them.
    group.bench_function("slotpool", |bench| {
        bench.iter_custom(|iters| checkouts_on_tasks(&rt, &s, iters))
    });
    group.bench_function("reference", |bench| {
        bench.iter_custom(|iters| checkouts_on_tasks(&rt, &r, iters))
    });
    group.bench_function("deadpool", |bench| {
        bench.iter_custom(|iters| checkouts_on_tasks(&rt, &d, iters))
    });
    group.bench_function("bb8", |bench| {
        bench.iter_custom(|iters| checkouts_on_tasks(&rt, &b, iters))
    });
    group.bench_function("tokio-semaphore", |bench| {
        bench.iter_custom(|iters| checkouts_on_tasks(&rt, &t, iters))
    });
    group.finish();
}

criterion_group!(benches, uncontended, tasks);
criterion_main!(benches);
