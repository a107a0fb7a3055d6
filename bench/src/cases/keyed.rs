//! The keyed cases: slotpool's `keyed` admission, the R2 reference ([`RefKeyed`],
//! [`crate::reference::keyed`]) and the
//! floor ([`Floor`]) side by side, over R2's families: 19 caller keys aliased onto 9 shares
//! ([`FAMILIES`], [`alias`]).
//!
//! | case | what it measures |
//! |---|---|
//! | `keyed/uncontended` | one task: admit (lookup, alias, slot) then release, cycling the 19 keys |
//! | `keyed/8-tasks-2-workers` | 8 tasks looping admit → release on a 2-worker runtime |
//! | `keyed/spawn-blocking` | 8 tasks on 2 workers, the whole path: admit, `spawn_blocking` with the permit moved in and the span entered, join (reported, no bar) |
//!
//! The floor (one CAS below a limit, one `fetch_sub`) is measured in the two admission cases;
//! there is no pool-free equivalent of a trip through the blocking pool, so it is left out of
//! `keyed/spawn-blocking`.
//!
//! Runtimes, registries and the reference are built once per case, not per repeat; the runners
//! are public so that the criterion benches (`benches/keyed.rs`) time the same code.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use slotpool::keyed::{Keyed, KeyedError};
use tokio::runtime::Runtime;

use crate::fixtures::{current_thread, floor_acquire_release, multi_thread, Floor};
use crate::reference::keyed::{
    alias, slots_for, Family, RefKeyed, BLOCKING_THREADS, FAMILIES, FAMILY_SLOTS, SHARES,
};
use crate::report::{interleave, Case, Record, Runner, Sample, Settings};

/// Case name: one task, admit then release.
pub const UNCONTENDED: &str = "keyed/uncontended";
/// Case name: 8 tasks on 2 workers, admit then release.
pub const TASKS: &str = "keyed/8-tasks-2-workers";
/// Case name: the whole path through `spawn_blocking`.
pub const SPAWN_BLOCKING: &str = "keyed/spawn-blocking";

/// Tasks in the multi-task cases.
pub const TASK_COUNT: usize = 8;
/// Worker threads of the multi-thread runtimes.
pub const WORKERS: usize = 2;
/// The wait bound every call is given. Long enough never to elapse here: these cases measure
/// admission, not refusal.
pub const WAIT: Duration = Duration::from_secs(5);
/// Full-run operation counts per repeat (scaled by [`Settings::ops`]).
pub mod ops {
    /// `keyed/uncontended`.
    pub const UNCONTENDED: u64 = 2_000_000;
    /// `keyed/8-tasks-2-workers` (all tasks together).
    pub const TASKS: u64 = 2_000_000;
    /// `keyed/spawn-blocking` (all tasks together).
    pub const SPAWN_BLOCKING: u64 = 100_000;
}

// ---------------------------------------------------------------------------------------------
// Building blocks
// ---------------------------------------------------------------------------------------------

/// slotpool configured as R2: nine shares (replay at 4), ten aliases, 128 threads with one
/// reserved (R2's `sum < 128`).
pub fn slotpool_keyed() -> Keyed<Family> {
    let mut builder = Keyed::builder()
        .default_share(FAMILY_SLOTS)
        .max_blocking_threads(BLOCKING_THREADS)
        .reserved_threads(1);
    for share in SHARES {
        builder = builder.share(share, slots_for(share));
    }
    for family in FAMILIES {
        if alias(family) != family {
            builder = builder.alias(family, alias(family));
        }
    }
    builder.build().expect("R2's configuration fits")
}

/// The families task `task` cycles through: all 19, from its own offset.
#[derive(Debug, Clone)]
pub struct Cycle {
    next: usize,
}

impl Cycle {
    /// Task `task`'s cycle.
    pub fn new(task: usize) -> Self {
        Self {
            next: (task * 7) % FAMILIES.len(),
        }
    }

    /// The next family.
    #[inline]
    pub fn next_family(&mut self) -> Family {
        let family = FAMILIES[self.next];
        self.next += 1;
        if self.next == FAMILIES.len() {
            self.next = 0;
        }
        family
    }
}

// ---------------------------------------------------------------------------------------------
// Runners: admission and release
// ---------------------------------------------------------------------------------------------

/// `ops` × (admit, release) on one task, as task `task` of a multi-task case.
pub async fn slotpool_admit_release(keyed: &Keyed<Family>, task: usize, ops: u64) -> Duration {
    let mut cycle = Cycle::new(task);
    let start = Instant::now();
    for _ in 0..ops {
        let admission = keyed.admit(&cycle.next_family(), WAIT).await;
        black_box(&admission);
        drop(admission.expect("a slot frees long before the bound"));
    }
    start.elapsed()
}

/// `ops` × (admit, release) on one task through the reference.
pub async fn reference_admit_release(reference: &RefKeyed, task: usize, ops: u64) -> Duration {
    let mut cycle = Cycle::new(task);
    let start = Instant::now();
    for _ in 0..ops {
        let permit = reference.admit(cycle.next_family(), WAIT).await;
        black_box(&permit);
        drop(permit.expect("a permit frees long before the bound"));
    }
    start.elapsed()
}

/// Runs [`TASK_COUNT`] tasks on `rt` that share `ops` operations between them (exactly `ops`
/// in all), each made by `task(index, its_ops)`, and returns the wall time from the first spawn
/// to the last join.
pub fn spawn_tasks<F, Fut>(rt: &Runtime, ops: u64, task: F) -> Duration
where
    F: Fn(usize, u64) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let tasks = TASK_COUNT as u64;
    let share = |t: usize| ops / tasks + u64::from((t as u64) < ops % tasks);
    rt.block_on(async {
        let start = Instant::now();
        let handles: Vec<_> = (0..TASK_COUNT)
            .filter(|&t| share(t) > 0)
            .map(|t| tokio::spawn(task(t, share(t))))
            .collect();
        for handle in handles {
            handle.await.expect("bench task completes");
        }
        start.elapsed()
    })
}

/// `keyed/8-tasks-2-workers` for slotpool: `ops` admissions in all, over [`TASK_COUNT`] tasks.
pub fn slotpool_tasks(rt: &Runtime, keyed: &Arc<Keyed<Family>>, ops: u64) -> Duration {
    spawn_tasks(rt, ops, |t, n| {
        let keyed = Arc::clone(keyed);
        async move {
            black_box(slotpool_admit_release(&keyed, t, n).await);
        }
    })
}

/// `keyed/8-tasks-2-workers` for the reference.
pub fn reference_tasks(rt: &Runtime, reference: &Arc<RefKeyed>, ops: u64) -> Duration {
    spawn_tasks(rt, ops, |t, n| {
        let reference = Arc::clone(reference);
        async move {
            black_box(reference_admit_release(&reference, t, n).await);
        }
    })
}

/// `keyed/8-tasks-2-workers` for the floor: the same tasks around one shared counter.
pub fn floor_tasks(rt: &Runtime, floor: &Arc<Floor>, ops: u64) -> Duration {
    spawn_tasks(rt, ops, |_, n| {
        let floor = Arc::clone(floor);
        async move {
            black_box(floor_acquire_release(&floor, n));
        }
    })
}

// ---------------------------------------------------------------------------------------------
// Runners: the whole path through spawn_blocking
// ---------------------------------------------------------------------------------------------

/// The blocking work: trivial, so the case measures the path around it.
fn work(i: u64) -> u64 {
    black_box(i).wrapping_mul(31)
}

/// `keyed/spawn-blocking` for slotpool: mutations through `Keyed::mutate`.
pub fn slotpool_spawn_blocking(rt: &Runtime, keyed: &Arc<Keyed<Family>>, ops: u64) -> Duration {
    spawn_tasks(rt, ops, |t, n| {
        let keyed = Arc::clone(keyed);
        async move {
            let mut cycle = Cycle::new(t);
            for i in 0..n {
                let result = keyed
                    .mutate(&cycle.next_family(), WAIT, move || work(i))
                    .await;
                let value: Result<u64, KeyedError<Family>> = result;
                black_box(value.expect("admitted and run"));
            }
        }
    })
}

/// `keyed/spawn-blocking` for the reference.
pub fn reference_spawn_blocking(rt: &Runtime, reference: &Arc<RefKeyed>, ops: u64) -> Duration {
    spawn_tasks(rt, ops, |t, n| {
        let reference = Arc::clone(reference);
        async move {
            let mut cycle = Cycle::new(t);
            for i in 0..n {
                let result = reference
                    .run(
                        cycle.next_family(),
                        WAIT,
                        tracing::Span::none(),
                        true,
                        move || work(i),
                    )
                    .await;
                black_box(result.expect("admitted and run"));
            }
        }
    })
}

// ---------------------------------------------------------------------------------------------
// The comparison
// ---------------------------------------------------------------------------------------------

/// The keyed cases, in the order the comparison runs them.
pub const CASES: &[Case] = &[
    (UNCONTENDED, uncontended),
    (TASKS, tasks),
    (SPAWN_BLOCKING, spawn_blocking),
];

fn uncontended(settings: &Settings) -> Vec<Record> {
    let rt = current_thread();
    let keyed = slotpool_keyed();
    let reference = RefKeyed::new();
    let floor = Floor::new(FAMILY_SLOTS);
    let ops = settings.ops(ops::UNCONTENDED, 1_000);
    let impls: Vec<Runner<'_>> = vec![
        (
            "slotpool",
            Box::new(|ops| Sample::timed(ops, rt.block_on(slotpool_admit_release(&keyed, 0, ops)))),
        ),
        (
            "reference",
            Box::new(|ops| {
                Sample::timed(
                    ops,
                    rt.block_on(reference_admit_release(&reference, 0, ops)),
                )
            }),
        ),
        (
            "floor",
            Box::new(|ops| Sample::timed(ops, floor_acquire_release(&floor, ops))),
        ),
    ];
    interleave(UNCONTENDED, ops, settings, impls)
}

fn tasks(settings: &Settings) -> Vec<Record> {
    let rt = multi_thread(WORKERS);
    let keyed = Arc::new(slotpool_keyed());
    let reference = Arc::new(RefKeyed::new());
    let floor = Arc::new(Floor::new(FAMILY_SLOTS));
    let ops = settings.ops(ops::TASKS, 1_000);
    let impls: Vec<Runner<'_>> = vec![
        (
            "slotpool",
            Box::new(|ops| Sample::timed(ops, slotpool_tasks(&rt, &keyed, ops))),
        ),
        (
            "reference",
            Box::new(|ops| Sample::timed(ops, reference_tasks(&rt, &reference, ops))),
        ),
        (
            "floor",
            Box::new(|ops| Sample::timed(ops, floor_tasks(&rt, &floor, ops))),
        ),
    ];
    interleave(TASKS, ops, settings, impls)
}

fn spawn_blocking(settings: &Settings) -> Vec<Record> {
    let rt = multi_thread(WORKERS);
    let keyed = Arc::new(slotpool_keyed());
    let reference = Arc::new(RefKeyed::new());
    let ops = settings.ops(ops::SPAWN_BLOCKING, 200);
    let impls: Vec<Runner<'_>> = vec![
        (
            "slotpool",
            Box::new(|ops| Sample::timed(ops, slotpool_spawn_blocking(&rt, &keyed, ops))),
        ),
        (
            "reference",
            Box::new(|ops| Sample::timed(ops, reference_spawn_blocking(&rt, &reference, ops))),
        ),
    ];
    interleave(SPAWN_BLOCKING, ops, settings, impls)
}
