//! A fixed number of uncontended acquire → release rounds on one task, for instruction
//! counting: `valgrind --tool=callgrind target/release/examples/hot_path stream 100000`.
//!
//! Which path: `stream` (slotpool's `StreamPool`), `reference` (R1's), `floor` (one CAS below
//! the limit and one `fetch_sub`); `saturated-stream` and `saturated-reference` run the
//! `stream/saturated` case (64 tasks for 16 slots on 2 workers; count those with
//! `--toggle-collect='*saturated*'`, which takes the tasks' polls); `client` and
//! `client-deadpool` run `client/uncontended` for slotpool's `ClientPool` and deadpool;
//! `managed`, `managed-deadpool` and `managed-bb8` run `managed/uncontended` for slotpool's
//! managed pool, deadpool's and bb8;
//! `stream-depth1` and `reference-depth1` run `stream-depth1/uncontended`, and
//! `stream-depth1-busy` and `reference-depth1-busy` `stream-depth1/256-streams-240-busy`;
//! `keyed` and `keyed-reference` run `keyed/uncontended` (admit over R2's 19 aliased families,
//! then release) for slotpool's `Keyed` and R2's design, and print their wall time per round;
//! `stream-try` (a plain loop of `try_acquire` and drop) and `stream-async` (the
//! `acquire().await` loop) also print their wall time per round, to separate the atomic path
//! from the future. The timed rounds run inside [`timed`], so
//! `--toggle-collect='hot_path::timed*'` counts them alone; divide by the rounds.

use std::sync::Arc;

use slotpool_bench::cases::client as client_cases;
use slotpool_bench::cases::keyed as keyed_cases;
use slotpool_bench::cases::managed;
use slotpool_bench::cases::stream::{
    prewarm_reference, prewarm_slotpool, reference_acquire_release, saturated_tasks,
    slotpool_acquire_release, slotpool_pool, DEPTH, SAT_DEPTH, SAT_STREAMS, SAT_TASKS, STREAMS,
    WORKERS,
};
use slotpool_bench::cases::stream_depth1 as depth1;
use slotpool_bench::fixtures::{
    current_thread, floor_acquire_release, multi_thread, Floor, NoopConnector,
};
use slotpool_bench::reference::stream::RefStreamPool;

fn main() {
    let mut args = std::env::args().skip(1);
    let which = args.next().unwrap_or_else(|| "stream".into());
    let rounds: u64 = args.next().map_or(100_000, |n| n.parse().expect("rounds"));
    let rt = current_thread();
    match which.as_str() {
        "stream" => {
            let pool = slotpool_pool(&rt, NoopConnector, STREAMS, DEPTH);
            prewarm_slotpool(&rt, &pool, 1, 1);
            timed(|| rt.block_on(slotpool_acquire_release(&pool, rounds)));
        }
        "stream-try" => {
            let pool = slotpool_pool(&rt, NoopConnector, STREAMS, DEPTH);
            prewarm_slotpool(&rt, &pool, 1, 1);
            let start = std::time::Instant::now();
            timed(|| {
                for _ in 0..rounds {
                    let guard = pool.try_acquire().expect("room");
                    std::hint::black_box(&guard);
                }
            });
            println!(
                "{:.1} ns/op",
                start.elapsed().as_nanos() as f64 / rounds as f64
            );
        }
        "stream-async" => {
            let pool = slotpool_pool(&rt, NoopConnector, STREAMS, DEPTH);
            prewarm_slotpool(&rt, &pool, 1, 1);
            let elapsed = timed(|| rt.block_on(slotpool_acquire_release(&pool, rounds)));
            println!("{:.1} ns/op", elapsed.as_nanos() as f64 / rounds as f64);
        }
        "reference" => {
            let pool = {
                let _enter = rt.enter();
                RefStreamPool::new(NoopConnector, Some(STREAMS), DEPTH)
            };
            prewarm_reference(&rt, &pool, 1, 1);
            timed(|| rt.block_on(reference_acquire_release(&pool, rounds)));
        }
        "stream-depth1" => {
            let pool = slotpool_pool(&rt, NoopConnector, STREAMS, depth1::DEPTH);
            prewarm_slotpool(&rt, &pool, 1, depth1::DEPTH);
            timed(|| rt.block_on(slotpool_acquire_release(&pool, rounds)));
        }
        "reference-depth1" => {
            let pool = depth1::reference_pool(&rt, STREAMS);
            depth1::prewarm_reference(&rt, &pool, 1);
            timed(|| rt.block_on(reference_acquire_release(&pool, rounds)));
        }
        "stream-depth1-busy" => {
            let pool = slotpool_pool(&rt, NoopConnector, depth1::BUSY_STREAMS, depth1::DEPTH);
            let _held = depth1::fill_slotpool(&rt, &pool);
            timed(|| rt.block_on(slotpool_acquire_release(&pool, rounds)));
        }
        "reference-depth1-busy" => {
            let pool = depth1::reference_pool(&rt, depth1::BUSY_STREAMS);
            let _held = depth1::fill_reference(&rt, &pool);
            timed(|| rt.block_on(reference_acquire_release(&pool, rounds)));
        }
        "floor" => {
            let floor = Floor::new(STREAMS * DEPTH);
            let elapsed = timed(|| floor_acquire_release(&floor, rounds));
            println!("{:.1} ns/op", elapsed.as_nanos() as f64 / rounds as f64);
        }
        "saturated-stream" => {
            let rt = multi_thread(WORKERS);
            let pool = Arc::new(slotpool_pool(&rt, NoopConnector, SAT_STREAMS, SAT_DEPTH));
            prewarm_slotpool(&rt, &pool, SAT_STREAMS, SAT_DEPTH);
            let per_task = rounds / SAT_TASKS as u64;
            timed(|| rt.block_on(saturated_tasks(&pool, SAT_TASKS, per_task)));
        }
        "saturated-reference" => {
            let rt = multi_thread(WORKERS);
            let pool = Arc::new(RefStreamPool::new(
                NoopConnector,
                Some(SAT_STREAMS),
                SAT_DEPTH,
            ));
            prewarm_reference(&rt, &pool, SAT_STREAMS, SAT_DEPTH);
            let per_task = rounds / SAT_TASKS as u64;
            timed(|| rt.block_on(saturated_tasks(&pool, SAT_TASKS, per_task)));
        }
        "client" => {
            let pool = client_cases::slotpool(&rt);
            timed(|| rt.block_on(client_cases::checkouts(&pool, rounds)));
        }
        "client-deadpool" => {
            let pool = client_cases::deadpool(&rt);
            timed(|| rt.block_on(client_cases::checkouts(&pool, rounds)));
        }
        "keyed" => {
            let keyed = keyed_cases::slotpool_keyed();
            let elapsed =
                timed(|| rt.block_on(keyed_cases::slotpool_admit_release(&keyed, 0, rounds)));
            println!("{:.1} ns/op", elapsed.as_nanos() as f64 / rounds as f64);
        }
        "keyed-reference" => {
            let reference = slotpool_bench::reference::keyed::RefKeyed::new();
            let elapsed =
                timed(|| rt.block_on(keyed_cases::reference_admit_release(&reference, 0, rounds)));
            println!("{:.1} ns/op", elapsed.as_nanos() as f64 / rounds as f64);
        }
        "managed" => {
            let pool = managed::slotpool(&rt);
            timed(|| rt.block_on(client_cases::checkouts(&pool, rounds)));
        }
        "managed-deadpool" => {
            let pool = managed::deadpool(&rt);
            timed(|| rt.block_on(client_cases::checkouts(&pool, rounds)));
        }
        "managed-bb8" => {
            let pool = client_cases::bb8(&rt);
            timed(|| rt.block_on(client_cases::checkouts(&pool, rounds)));
        }
        other => panic!("unknown path `{other}` (see the module docs)"),
    }
}

/// Runs the timed rounds (a named frame for callgrind's `--toggle-collect`).
#[inline(never)]
fn timed<R>(run: impl FnOnce() -> R) -> R {
    std::hint::black_box(run())
}
