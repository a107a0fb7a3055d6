//! The managed-pool cases: `slotpool::managed::Pool` beside the pools its users come from,
//! each over a manager that does nothing (objects are numbers; create and recycle succeed at
//! once), so what is timed is the pool:
//!
//! | impl | what |
//! |---|---|
//! | `slotpool` | `slotpool::managed::Pool` over [`NoopObjects`], `max_size = 16`, its default recycle policy (every checkout recycles: the manager's `recycle_now` accepts at once, with no await, as asyncband's `is_recyclable`), no background reaper |
//! | `deadpool` | deadpool 0.13 **managed** `deadpool::managed::Pool` over [`NoopDeadpool`] (`recycle` accepts at once), `max_size = 16`, its defaults otherwise (FIFO) |
//! | `bb8` | bb8 0.9 as in the `client/*` cases ([`client::bb8`]): the no-op `ManageConnection`, `max_size = min_idle = 16`, no check-out test |
//! | `asyncband` | asyncband 0.7 `pool::bounded::Pool` (feature `pool`; fastpool's successor) over [`NoopAsyncband`] (`is_recyclable` accepts at once), `PoolConfig::new(16)` and its defaults otherwise: FIFO reuse (`QueueStrategy::Fifo`), `is_recyclable` on every checkout, a cancelled check detaches the object; each checkout takes an owned permit of asyncband's own semaphore (an atomic count, waiters in a locked list), then pops the idle `Mutex<VecDeque>`; each return stamps `Instant::now()` on the object and pushes it back; no background task |
//! | `tokio-semaphore` | a bare `tokio::sync::Semaphore` of 16 permits in the same loop: the bound, the least an async limit costs |
//!
//! | case | what it measures |
//! |---|---|
//! | `managed/uncontended` | one task on a current-thread runtime: get, touch the object, drop it |
//! | `managed/8-tasks-2-workers` | 8 tasks looping get → drop on a 2-worker runtime (16 objects: nobody waits, they contend) |
//! | `managed/saturated` | 64 tasks for 16 objects on 2 workers, each holding its object across one yield: throughput and the wait percentiles (p50/p99/p999/max) |
//!
//! Every pool holds all 16 objects before timing (each is prewarmed through its own `get`).
//! The loops are the `client/*` cases' ([`client::checkouts`], [`client::checkouts_on_tasks`])
//! and `stream/saturated`'s ([`stream::saturated_tasks`]), so each implementation here runs
//! the code a `client/*` or `stream/*` runner would; the runners are public so the criterion
//! bench (`benches/managed.rs`) times the same code.

use std::convert::Infallible;
use std::hint::black_box;
use std::sync::Arc;

use asyncband::pool::{bounded, ManageObject, ObjectStatus};
use slotpool::managed::{Manager, Meta, Object, Pool, RecycleResult};
use tokio::runtime::Runtime;

use crate::cases::client::{self, Bb8, Checkout};
use crate::cases::stream::{self, Hold};
use crate::fixtures::{current_thread, multi_thread, NoopManager, Trivial};
use crate::report::{interleave, split, Case, Record, Runner, Sample, Settings};

/// Case name: one task, get then drop.
pub const UNCONTENDED: &str = "managed/uncontended";
/// Case name: 8 tasks on 2 workers, 16 objects.
pub const TASKS: &str = "managed/8-tasks-2-workers";
/// Case name: 64 tasks for 16 objects.
pub const SATURATED: &str = "managed/saturated";

/// Objects in every pool (and permits of the semaphore).
pub const OBJECTS: usize = client::CLIENTS;
/// Tasks in the multi-task case.
pub const TASK_COUNT: usize = client::TASK_COUNT;
/// Worker threads of the multi-thread runtimes.
pub const WORKERS: usize = 2;
/// Tasks in the saturated case.
pub const SAT_TASKS: usize = stream::SAT_TASKS;

/// Full-run operation counts per repeat (scaled by [`Settings::ops`]).
pub mod ops {
    /// `managed/uncontended`.
    pub const UNCONTENDED: u64 = 2_000_000;
    /// `managed/8-tasks-2-workers` (all tasks together).
    pub const TASKS: u64 = 1_000_000;
    /// `managed/saturated` (all tasks together).
    pub const SATURATED: u64 = 640_000;
}

/// slotpool's manager of numbers: creates at once; its recycle accepts every object in
/// `recycle_now` (synchronous, as asyncband's `is_recyclable`), so a `get` of an idle object
/// takes the pool's fast path.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoopObjects;

impl Manager for NoopObjects {
    type Type = Trivial;
    type Error = Infallible;

    async fn create(&self) -> Result<Trivial, Infallible> {
        Ok(Trivial(0))
    }

    fn recycle_now(&self, _: &mut Trivial, _: &Meta) -> Option<RecycleResult<Infallible>> {
        Some(Ok(()))
    }
}

/// [`NoopObjects`] with the async recycle instead (the trait's default `recycle`, which is
/// ready at once): what a manager that checks its objects in `recycle` costs (the
/// `managed-async` row of the hot-path budgets).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoopAsyncObjects;

impl Manager for NoopAsyncObjects {
    type Type = Trivial;
    type Error = Infallible;

    async fn create(&self) -> Result<Trivial, Infallible> {
        Ok(Trivial(0))
    }
}

/// deadpool's manager of numbers: creates at once, recycling accepts every object.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoopDeadpool;

impl deadpool::managed::Manager for NoopDeadpool {
    type Type = Trivial;
    type Error = Infallible;

    async fn create(&self) -> Result<Trivial, Infallible> {
        Ok(Trivial(0))
    }

    async fn recycle(
        &self,
        _: &mut Trivial,
        _: &deadpool::managed::Metrics,
    ) -> deadpool::managed::RecycleResult<Infallible> {
        Ok(())
    }
}

/// slotpool's managed pool.
#[derive(Debug, Clone)]
pub struct Slotpool(pub Pool<NoopObjects>);

impl Checkout for Slotpool {
    async fn checkout(&self) {
        let object = self.0.get().await.expect("no-op manager never fails");
        black_box(&object.0);
    }
}

impl Hold for Slotpool {
    type Guard<'a> = Object<NoopObjects>;
    async fn hold(&self) -> Object<NoopObjects> {
        self.0.get().await.expect("no-op manager never fails")
    }
}

/// deadpool 0.13, managed.
pub struct Deadpool(pub deadpool::managed::Pool<NoopDeadpool>);

impl std::fmt::Debug for Deadpool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Deadpool").finish_non_exhaustive()
    }
}

impl Checkout for Deadpool {
    async fn checkout(&self) {
        let object = self.0.get().await.expect("no-op manager never fails");
        black_box(&object.0);
    }
}

impl Hold for Deadpool {
    type Guard<'a> = deadpool::managed::Object<NoopDeadpool>;
    async fn hold(&self) -> Self::Guard<'_> {
        self.0.get().await.expect("no-op manager never fails")
    }
}

/// asyncband's manager of numbers: creates at once, every object is recyclable.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoopAsyncband;

impl ManageObject for NoopAsyncband {
    type Object = Trivial;
    type Error = Infallible;

    async fn create(&self) -> Result<Trivial, Infallible> {
        Ok(Trivial(0))
    }

    async fn is_recyclable(&self, _: &mut Trivial, _: &ObjectStatus) -> Result<(), Infallible> {
        Ok(())
    }
}

/// asyncband 0.7's bounded pool (`Pool::new` hands it out in an `Arc`; `get` takes the `Arc`).
pub struct Asyncband(pub Arc<bounded::Pool<NoopAsyncband>>);

impl std::fmt::Debug for Asyncband {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Asyncband").finish_non_exhaustive()
    }
}

impl Checkout for Asyncband {
    async fn checkout(&self) {
        let object = self.0.get().await.expect("no-op manager never fails");
        black_box(&object.0);
    }
}

impl Hold for Asyncband {
    type Guard<'a> = bounded::Object<NoopAsyncband>;
    async fn hold(&self) -> Self::Guard<'_> {
        self.0.get().await.expect("no-op manager never fails")
    }
}

impl Hold for Bb8 {
    type Guard<'a> = bb8::PooledConnection<'a, NoopManager>;
    async fn hold(&self) -> Self::Guard<'_> {
        self.0.get().await.expect("no-op manager never fails")
    }
}

// ---------------------------------------------------------------------------------------------
// Building blocks
// ---------------------------------------------------------------------------------------------

/// The background reaper's interval in the slotpool pools timed here: an hour, so no pass
/// runs while a case is timed (the pools still stamp returns as under the default reaper).
pub const IDLE_PASSES: std::time::Duration = std::time::Duration::from_secs(3600);

/// slotpool's managed pool with all 16 objects created and idle. A background reaper, as by
/// default (returns are stamped without a clock read), with passes an hour apart: nothing
/// else runs during timing.
pub fn slotpool(rt: &Runtime) -> Slotpool {
    Slotpool(prewarmed(rt, NoopObjects))
}

/// A slotpool managed pool over `manager`, configured as [`slotpool`]'s, with all 16 objects
/// created and idle.
pub fn prewarmed<M: Manager>(rt: &Runtime, manager: M) -> Pool<M> {
    rt.block_on(async {
        let pool = Pool::builder(manager)
            .max_size(OBJECTS)
            .reap_interval(Some(IDLE_PASSES))
            .build()
            .expect("valid bench configuration");
        let mut held = Vec::new();
        for _ in 0..OBJECTS {
            held.push(pool.get().await.expect("room while prewarming"));
        }
        drop(held);
        let status = pool.status();
        assert_eq!((status.size, status.available), (OBJECTS, OBJECTS));
        pool
    })
}

/// deadpool's managed pool with all 16 objects created and idle.
pub fn deadpool(rt: &Runtime) -> Deadpool {
    rt.block_on(async {
        let pool = deadpool::managed::Pool::builder(NoopDeadpool)
            .max_size(OBJECTS)
            .build()
            .expect("valid bench configuration");
        let mut held = Vec::new();
        for _ in 0..OBJECTS {
            held.push(pool.get().await.expect("room while prewarming"));
        }
        drop(held);
        let status = pool.status();
        assert_eq!((status.size, status.available), (OBJECTS, OBJECTS));
        Deadpool(pool)
    })
}

/// asyncband's bounded pool of 16 at its defaults, with all 16 objects created and idle.
pub fn asyncband(rt: &Runtime) -> Asyncband {
    rt.block_on(async {
        let pool = bounded::Pool::new(bounded::PoolConfig::new(OBJECTS), NoopAsyncband);
        let mut held = Vec::new();
        for _ in 0..OBJECTS {
            held.push(pool.get().await.expect("room while prewarming"));
        }
        drop(held);
        let status = pool.status();
        assert_eq!((status.current_size, status.idle_count), (OBJECTS, OBJECTS));
        Asyncband(pool)
    })
}

// ---------------------------------------------------------------------------------------------
// The comparison
// ---------------------------------------------------------------------------------------------

/// The managed cases, in the order the comparison runs them.
pub const CASES: &[Case] = &[
    (UNCONTENDED, uncontended),
    (TASKS, tasks),
    (SATURATED, saturated),
];

fn uncontended(settings: &Settings) -> Vec<Record> {
    let rt = current_thread();
    let (s, d, b, a, t) = (
        slotpool(&rt),
        deadpool(&rt),
        client::bb8(&rt),
        asyncband(&rt),
        client::tokio_semaphore(),
    );
    let ops = settings.ops(ops::UNCONTENDED, 1_000);
    let run = |ops: u64, elapsed| Sample::timed(ops, elapsed);
    let impls: Vec<Runner<'_>> = vec![
        (
            "slotpool",
            Box::new(|ops| run(ops, rt.block_on(client::checkouts(&s, ops)))),
        ),
        (
            "deadpool",
            Box::new(|ops| run(ops, rt.block_on(client::checkouts(&d, ops)))),
        ),
        (
            "bb8",
            Box::new(|ops| run(ops, rt.block_on(client::checkouts(&b, ops)))),
        ),
        (
            "asyncband",
            Box::new(|ops| run(ops, rt.block_on(client::checkouts(&a, ops)))),
        ),
        (
            "tokio-semaphore",
            Box::new(|ops| run(ops, rt.block_on(client::checkouts(&t, ops)))),
        ),
    ];
    interleave(UNCONTENDED, ops, settings, impls)
}

fn tasks(settings: &Settings) -> Vec<Record> {
    let rt = multi_thread(WORKERS);
    let s = Arc::new(slotpool(&rt));
    let d = Arc::new(deadpool(&rt));
    let b = Arc::new(client::bb8(&rt));
    let a = Arc::new(asyncband(&rt));
    let t = Arc::new(client::tokio_semaphore());
    let ops = split(settings.ops(ops::TASKS, 8_000), TASK_COUNT).1;
    let run = |ops: u64, elapsed| Sample::timed(split(ops, TASK_COUNT).1, elapsed);
    let impls: Vec<Runner<'_>> = vec![
        (
            "slotpool",
            Box::new(|ops| run(ops, client::checkouts_on_tasks(&rt, &s, ops))),
        ),
        (
            "deadpool",
            Box::new(|ops| run(ops, client::checkouts_on_tasks(&rt, &d, ops))),
        ),
        (
            "bb8",
            Box::new(|ops| run(ops, client::checkouts_on_tasks(&rt, &b, ops))),
        ),
        (
            "asyncband",
            Box::new(|ops| run(ops, client::checkouts_on_tasks(&rt, &a, ops))),
        ),
        (
            "tokio-semaphore",
            Box::new(|ops| run(ops, client::checkouts_on_tasks(&rt, &t, ops))),
        ),
    ];
    interleave(TASKS, ops, settings, impls)
}

fn saturated(settings: &Settings) -> Vec<Record> {
    let rt = multi_thread(WORKERS);
    let s = Arc::new(slotpool(&rt));
    let d = Arc::new(deadpool(&rt));
    let b = Arc::new(client::bb8(&rt));
    let a = Arc::new(asyncband(&rt));
    let t = Arc::new(tokio::sync::Semaphore::new(OBJECTS));
    let ops = split(settings.ops(ops::SATURATED, 1_000), SAT_TASKS).1;
    let impls: Vec<Runner<'_>> = vec![
        ("slotpool", stream::saturated_runner(&rt, &s)),
        ("deadpool", stream::saturated_runner(&rt, &d)),
        ("bb8", stream::saturated_runner(&rt, &b)),
        ("asyncband", stream::saturated_runner(&rt, &a)),
        ("tokio-semaphore", stream::saturated_runner(&rt, &t)),
    ];
    interleave(SATURATED, ops, settings, impls)
}
