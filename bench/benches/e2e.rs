//! Criterion groups for the end-to-end cases: GetPage requests through slotpool's whole stack
//! and R1's (`reference`) over tonic on loopback, timing the very runners `slotpool-bench`
//! uses (`slotpool_bench::cases::e2e`).
//!
//! `cargo bench -p slotpool-bench --bench e2e` measures; `-- --test` runs each benchmark once
//! (the CI smoke). With `SLOTPOOL_E2E_COMPARE=quick` (or `full`, `smoke`) it first prints the
//! `slotpool-bench` comparison table of the e2e cases (ns per request and latency
//! percentiles, medians of interleaved repeats).

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use slotpool_bench::cases::e2e::{
    case_name, compare, reference_run, slotpool_run, E2e, CONCURRENCY,
};
use slotpool_bench::report::{self, Settings};

/// Runs at least `iters` requests as `per_task × tasks` and scales the time back to `iters`.
fn per_task(iters: u64, tasks: usize) -> (u64, impl Fn(Duration) -> Duration) {
    let per = iters.div_ceil(tasks as u64).max(1);
    let ran = per * tasks as u64;
    (per, move |d: Duration| d.mul_f64(iters as f64 / ran as f64))
}

fn e2e(c: &mut Criterion) {
    if let Ok(mode) = std::env::var("SLOTPOOL_E2E_COMPARE") {
        let settings = match mode.as_str() {
            "full" => Settings::full(),
            "smoke" => Settings::smoke(),
            _ => Settings::quick(),
        };
        println!("{}", report::table(&compare(&settings)));
    }
    let e2e = E2e::new();
    for concurrency in CONCURRENCY {
        let mut group = c.benchmark_group(case_name(concurrency));
        group
            .sample_size(10)
            .warm_up_time(Duration::from_millis(500))
            .measurement_time(Duration::from_secs(3));
        group.bench_function("slotpool", |b| {
            b.iter_custom(|iters| {
                let (per, scale) = per_task(iters, concurrency);
                scale(
                    e2e.rt
                        .block_on(slotpool_run(&e2e.slotpool, concurrency, per))
                        .0,
                )
            })
        });
        group.bench_function("reference", |b| {
            b.iter_custom(|iters| {
                let (per, scale) = per_task(iters, concurrency);
                scale(
                    e2e.rt
                        .block_on(reference_run(&e2e.reference, concurrency, per))
                        .0,
                )
            })
        });
        group.finish();
    }
}

criterion_group!(benches, e2e);
criterion_main!(benches);
