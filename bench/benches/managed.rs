//! Criterion benches of the managed pool: slotpool's `managed::Pool`, deadpool 0.13 (managed),
//! bb8 0.9, asyncband 0.7's bounded pool and a bare tokio `Semaphore` over a no-op manager,
//! and the PostgreSQL cases (slotpool, deadpool-postgres, bb8-postgres, one connection per
//! task; for the checkout alone, asyncband and a hand-rolled semaphore + `Mutex<Vec>`) against
//! a throwaway server, timing the same runners as the `compare` run
//! (`slotpool_bench::cases::managed` and `slotpool_bench::cases::postgres`).
//!
//! Groups: `managed/uncontended`, `managed/8-tasks-2-workers`, `managed/saturated`, and
//! `postgres/select-1-concurrency-{1,16,64}` and `postgres/pool-only-{1-task,8-tasks}` when
//! `bench/postgres/start.sh` can start a server (otherwise they are skipped, with the reason
//! printed). Smoke run:
//! `cargo bench -p slotpool-bench --bench managed -- --test`.

use std::sync::Arc;
use std::time::Duration;

use criterion::measurement::WallTime;
use criterion::{criterion_group, criterion_main, BenchmarkGroup, Criterion};
use slotpool_bench::cases::client::Checkout;
use slotpool_bench::cases::client::{self, checkouts, checkouts_on_tasks};
use slotpool_bench::cases::managed::{
    asyncband, deadpool, slotpool, SATURATED, SAT_TASKS, TASKS, UNCONTENDED, WORKERS,
};
use slotpool_bench::cases::postgres::{self, Pg, Select, Server};
use slotpool_bench::cases::stream::{saturated_tasks, Hold};
use slotpool_bench::fixtures::{current_thread, multi_thread};
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
    let (s, d, b, a, t) = (
        slotpool(&rt),
        deadpool(&rt),
        client::bb8(&rt),
        asyncband(&rt),
        client::tokio_semaphore(),
    );
    let mut group = configure(c, UNCONTENDED);
    group.bench_function("slotpool", |bench| {
        bench.iter_custom(|iters| rt.block_on(checkouts(&s, iters)))
    });
    group.bench_function("deadpool", |bench| {
        bench.iter_custom(|iters| rt.block_on(checkouts(&d, iters)))
    });
    group.bench_function("bb8", |bench| {
        bench.iter_custom(|iters| rt.block_on(checkouts(&b, iters)))
    });
    group.bench_function("asyncband", |bench| {
        bench.iter_custom(|iters| rt.block_on(checkouts(&a, iters)))
    });
    group.bench_function("tokio-semaphore", |bench| {
        bench.iter_custom(|iters| rt.block_on(checkouts(&t, iters)))
    });
    group.finish();
}

fn tasks(c: &mut Criterion) {
    let rt = multi_thread(WORKERS);
    let s = Arc::new(slotpool(&rt));
    let d = Arc::new(deadpool(&rt));
    let b = Arc::new(client::bb8(&rt));
    let a = Arc::new(asyncband(&rt));
    let t = Arc::new(client::tokio_semaphore());
    let mut group = configure(c, TASKS);
    // One iteration is one checkout; the 8 tasks split the iterations between them.
    group.bench_function("slotpool", |bench| {
        bench.iter_custom(|iters| checkouts_on_tasks(&rt, &s, iters))
    });
    group.bench_function("deadpool", |bench| {
        bench.iter_custom(|iters| checkouts_on_tasks(&rt, &d, iters))
    });
    group.bench_function("bb8", |bench| {
        bench.iter_custom(|iters| checkouts_on_tasks(&rt, &b, iters))
    });
    group.bench_function("asyncband", |bench| {
        bench.iter_custom(|iters| checkouts_on_tasks(&rt, &a, iters))
    });
    group.bench_function("tokio-semaphore", |bench| {
        bench.iter_custom(|iters| checkouts_on_tasks(&rt, &t, iters))
    });
    group.finish();
}

/// One saturated benchmark: [`SAT_TASKS`] tasks share the iterations.
fn saturated_on<P: Hold>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    rt: &Runtime,
    pool: &Arc<P>,
) {
    group.bench_function(name, |b| {
        b.iter_custom(|iters| {
            let (per, scale) = per_task(iters, SAT_TASKS);
            scale(rt.block_on(saturated_tasks(pool, SAT_TASKS, per)).0)
        })
    });
}

fn saturated(c: &mut Criterion) {
    let rt = multi_thread(WORKERS);
    let s = Arc::new(slotpool(&rt));
    let d = Arc::new(deadpool(&rt));
    let b = Arc::new(client::bb8(&rt));
    let a = Arc::new(asyncband(&rt));
    let t = Arc::new(tokio::sync::Semaphore::new(client::CLIENTS));
    let mut group = configure(c, SATURATED);
    saturated_on(&mut group, "slotpool", &rt, &s);
    saturated_on(&mut group, "deadpool", &rt, &d);
    saturated_on(&mut group, "bb8", &rt, &b);
    saturated_on(&mut group, "asyncband", &rt, &a);
    saturated_on(&mut group, "tokio-semaphore", &rt, &t);
    group.finish();
}

/// One PostgreSQL benchmark: `tasks` tasks share the iterations.
fn select_on<P: Select>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    rt: &Runtime,
    pool: &Arc<P>,
    tasks: usize,
) {
    group.bench_function(name, |b| {
        b.iter_custom(|iters| {
            let (per, scale) = per_task(iters, tasks);
            scale(rt.block_on(postgres::run(pool, tasks, per)).0)
        })
    });
}

/// One pool-only benchmark: `tasks` tasks share the iterations.
fn pool_only_on<P: Checkout>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    rt: &Runtime,
    pool: &Arc<P>,
    tasks: usize,
) {
    group.bench_function(name, |b| {
        b.iter_custom(|iters| {
            let (per, scale) = per_task(iters, tasks);
            scale(postgres::checkouts_on(rt, pool, tasks, per * tasks as u64).1)
        })
    });
}

fn postgres_cases(c: &mut Criterion) {
    let pg = match Pg::start(&Server::default_state()) {
        Ok(pg) => pg,
        Err(reason) => {
            println!("postgres/*: skipped: {reason}");
            return;
        }
    };
    select_1(c, &pg);
    pool_only(c, &pg);
}

fn pool_only(c: &mut Criterion, pg: &Pg) {
    let (rt, p) = (&pg.rt, &pg.pool_only);
    for (name, tasks) in postgres::POOL_ONLY {
        let mut group = configure(c, name);
        pool_only_on(&mut group, "slotpool", rt, &p.slotpool, tasks);
        pool_only_on(&mut group, "deadpool-postgres", rt, &p.deadpool, tasks);
        pool_only_on(&mut group, "bb8-postgres", rt, &p.bb8, tasks);
        pool_only_on(&mut group, "asyncband", rt, &p.asyncband, tasks);
        pool_only_on(&mut group, "semaphore-mutex", rt, &p.semaphore_mutex, tasks);
        group.finish();
    }
}

fn select_1(c: &mut Criterion, pg: &Pg) {
    for concurrency in postgres::CONCURRENCY {
        let mut group = c.benchmark_group(postgres::case_name(concurrency));
        group
            .sample_size(10)
            .warm_up_time(Duration::from_millis(300))
            .measurement_time(Duration::from_secs(1));
        select_on(&mut group, "slotpool", &pg.rt, &pg.slotpool, concurrency);
        select_on(
            &mut group,
            "deadpool-postgres",
            &pg.rt,
            &pg.deadpool,
            concurrency,
        );
        select_on(&mut group, "bb8-postgres", &pg.rt, &pg.bb8, concurrency);
        select_on(&mut group, "no-pool", &pg.rt, &pg.no_pool, concurrency);
        group.finish();
    }
}

criterion_group!(benches, uncontended, tasks, saturated, postgres_cases);
criterion_main!(benches);
