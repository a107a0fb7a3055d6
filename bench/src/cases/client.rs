//! The client cases: exclusive checkout (get a client, then drop the guard) from a pool of 16
//! trivial, prewarmed clients, side by side:
//!
//! | impl | what |
//! |---|---|
//! | `slotpool` | `slotpool::client::ClientPool` (`max_clients = 16`) over a `ChannelPool` |
//! | `reference` | R1's client pool ([`crate::reference::client`]): semaphore + `Mutex<BTreeMap>` |
//! | `deadpool` | deadpool 0.13 **unmanaged** `deadpool::unmanaged::Pool` holding 16 objects |
//! | `bb8` | bb8 0.9 with a no-op `ManageConnection`, `max_size = min_idle = 16`, no check-out test |
//! | `tokio-semaphore` | a bare `tokio::sync::Semaphore` of 16: acquire, drop (the floor of an async bound) |
//!
//! | case | what it measures |
//! |---|---|
//! | `client/uncontended` | one task on a current-thread runtime, acquire then drop |
//! | `client/8-tasks-2-workers` | 8 tasks looping acquire → drop on a 2-worker runtime |
//!
//! Every pool is built and prewarmed once per case (all 16 clients exist before timing); the
//! runners are public so the criterion benches (`benches/client.rs`) time the same code.

use std::future::Future;
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use slotpool::channel::ChannelPool;
use slotpool::client::ClientPool;
use tokio::runtime::Runtime;
use tokio::sync::Semaphore;

use crate::fixtures::{
    current_thread, multi_thread, IdChannels, NoopManager, Trivial, TrivialFactory,
};
use crate::reference::client::{RefChannelPool, RefClientPool};
use crate::report::{interleave, Case, Record, Runner, Sample, Settings};

/// Case name: one task, acquire then drop.
pub const UNCONTENDED: &str = "client/uncontended";
/// Case name: 8 tasks on 2 workers.
pub const TASKS: &str = "client/8-tasks-2-workers";

/// Clients in every pool.
pub const CLIENTS: usize = 16;
/// Clients per channel (slotpool and reference): 16 clients on 4 channels.
pub const PER_CHANNEL: usize = 4;
/// Tasks in the multi-task case.
pub const TASK_COUNT: usize = 8;
/// Worker threads in the multi-task case.
pub const WORKERS: usize = 2;

/// Full-run operation counts per repeat (scaled by [`Settings::ops`]).
pub mod ops {
    /// `client/uncontended`.
    pub const UNCONTENDED: u64 = 2_000_000;
    /// `client/8-tasks-2-workers` (all tasks together).
    pub const TASKS: u64 = 1_000_000;
}

/// slotpool's client pool over the fixtures.
pub type SlotpoolClients = ClientPool<IdChannels, TrivialFactory>;
/// The reference client pool over the fixtures.
pub type RefClients = RefClientPool<IdChannels, TrivialFactory>;

/// One checkout: get a client, touch it, drop the guard.
pub trait Checkout: Send + Sync + 'static {
    /// Acquires one client and releases it.
    fn checkout(&self) -> impl Future<Output = ()> + Send;
}

/// slotpool (no background reapers: nothing else runs during timing).
#[derive(Debug)]
pub struct Slotpool(pub Arc<SlotpoolClients>);

impl Checkout for Slotpool {
    async fn checkout(&self) {
        let guard = self.0.acquire().await.expect("pool is open");
        black_box(&guard.0);
    }
}

/// The R1 reference.
pub struct Reference(pub Arc<RefClients>);

impl std::fmt::Debug for Reference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reference").finish_non_exhaustive()
    }
}

impl Checkout for Reference {
    async fn checkout(&self) {
        let guard = self.0.get().await.expect("infallible factory");
        black_box(&guard.0);
    }
}

/// deadpool 0.13, unmanaged.
pub struct Deadpool(pub deadpool::unmanaged::Pool<Trivial>);

impl std::fmt::Debug for Deadpool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Deadpool").finish_non_exhaustive()
    }
}

impl Checkout for Deadpool {
    async fn checkout(&self) {
        let object = self.0.get().await.expect("pool is open");
        black_box(&object.0);
    }
}

/// bb8 0.9 with a no-op manager.
pub struct Bb8(pub bb8::Pool<NoopManager>);

impl std::fmt::Debug for Bb8 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bb8").finish_non_exhaustive()
    }
}

impl Checkout for Bb8 {
    async fn checkout(&self) {
        let conn = self.0.get().await.expect("no-op manager never fails");
        black_box(&conn.0);
    }
}

/// A bare semaphore: the least an async bound costs.
pub struct TokioSemaphore(pub Semaphore);

impl std::fmt::Debug for TokioSemaphore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokioSemaphore").finish_non_exhaustive()
    }
}

impl Checkout for TokioSemaphore {
    async fn checkout(&self) {
        let permit = self.0.acquire().await.expect("never closed");
        black_box(&permit);
    }
}

// ---------------------------------------------------------------------------------------------
// Building blocks
// ---------------------------------------------------------------------------------------------

/// slotpool with all 16 clients built and idle.
pub fn slotpool(rt: &Runtime) -> Slotpool {
    rt.block_on(async {
        let channels = ChannelPool::builder(IdChannels)
            .max_clients_per_channel(PER_CHANNEL)
            .reap_interval(None)
            .build()
            .expect("valid bench configuration");
        // A background reaper, as by default (returns are stamped without a clock read),
        // with passes an hour apart: nothing else runs during timing.
        let clients = ClientPool::builder(channels, TrivialFactory)
            .max_clients(Some(CLIENTS))
            .reap_interval(Some(crate::cases::managed::IDLE_PASSES))
            .build()
            .expect("valid bench configuration");
        let mut held = Vec::new();
        for _ in 0..CLIENTS {
            held.push(clients.acquire().await.expect("room while prewarming"));
        }
        drop(held);
        let stats = clients.stats();
        assert_eq!((stats.clients, stats.idle), (CLIENTS, CLIENTS));
        Slotpool(clients)
    })
}

/// The reference with all 16 clients built and idle.
pub fn reference(rt: &Runtime) -> Reference {
    rt.block_on(async {
        let channels = RefChannelPool::new(IdChannels, PER_CHANNEL);
        let clients = RefClientPool::new(channels, TrivialFactory, Some(CLIENTS));
        let mut held = Vec::new();
        for _ in 0..CLIENTS {
            held.push(clients.get().await.expect("infallible"));
        }
        drop(held);
        assert_eq!(clients.idle(), CLIENTS);
        Reference(clients)
    })
}

/// deadpool's unmanaged pool holding 16 objects.
pub fn deadpool(rt: &Runtime) -> Deadpool {
    let _enter = rt.enter();
    let pool =
        deadpool::unmanaged::Pool::from((0..CLIENTS as u64).map(Trivial).collect::<Vec<_>>());
    assert_eq!(pool.status().size, CLIENTS);
    Deadpool(pool)
}

/// bb8 with 16 connections open and idle.
pub fn bb8(rt: &Runtime) -> Bb8 {
    rt.block_on(async {
        let pool = bb8::Pool::builder()
            .max_size(CLIENTS as u32)
            .min_idle(Some(CLIENTS as u32))
            .test_on_check_out(false)
            .build(NoopManager)
            .await
            .expect("no-op manager never fails");
        let mut held = Vec::new();
        for _ in 0..CLIENTS {
            held.push(pool.get().await.expect("room while prewarming"));
        }
        drop(held);
        assert_eq!(pool.state().connections, CLIENTS as u32);
        Bb8(pool)
    })
}

/// A semaphore of 16 permits.
pub fn tokio_semaphore() -> TokioSemaphore {
    TokioSemaphore(Semaphore::new(CLIENTS))
}

// ---------------------------------------------------------------------------------------------
// Runners
// ---------------------------------------------------------------------------------------------

/// `ops` checkouts on the current task; wall time.
pub async fn checkouts<P: Checkout>(pool: &P, ops: u64) -> Duration {
    let start = Instant::now();
    for _ in 0..ops {
        pool.checkout().await;
    }
    start.elapsed()
}

/// [`TASK_COUNT`] tasks sharing `ops` checkouts on `rt`; wall time for all.
pub fn checkouts_on_tasks<P: Checkout>(rt: &Runtime, pool: &Arc<P>, ops: u64) -> Duration {
    let per_task = (ops / TASK_COUNT as u64).max(1);
    rt.block_on(checkouts_spread(pool, TASK_COUNT, per_task))
}

/// `tasks` tasks, each doing `per_task` checkouts (call inside `Runtime::block_on`); wall
/// time for all.
pub async fn checkouts_spread<P: Checkout>(pool: &Arc<P>, tasks: usize, per_task: u64) -> Duration {
    let start = Instant::now();
    let handles: Vec<_> = (0..tasks)
        .map(|_| {
            let pool = Arc::clone(pool);
            tokio::spawn(async move { checkouts(&*pool, per_task).await })
        })
        .collect();
    for handle in handles {
        handle.await.expect("bench task panicked");
    }
    start.elapsed()
}

// ---------------------------------------------------------------------------------------------
// The comparison
// ---------------------------------------------------------------------------------------------

/// The client cases, in the order the comparison runs them.
pub const CASES: &[Case] = &[(UNCONTENDED, uncontended), (TASKS, tasks)];

fn uncontended(settings: &Settings) -> Vec<Record> {
    let rt = current_thread();
    let (s, r, d, b, t) = (
        slotpool(&rt),
        reference(&rt),
        deadpool(&rt),
        bb8(&rt),
        tokio_semaphore(),
    );
    let ops = settings.ops(ops::UNCONTENDED, 1_000);
    let run = |f: Duration, ops: u64| Sample::timed(ops, f);
    let impls: Vec<Runner<'_>> = vec![
        (
            "slotpool",
            Box::new(|ops| run(rt.block_on(checkouts(&s, ops)), ops)),
        ),
        (
            "reference",
            Box::new(|ops| run(rt.block_on(checkouts(&r, ops)), ops)),
        ),
        (
            "deadpool",
            Box::new(|ops| run(rt.block_on(checkouts(&d, ops)), ops)),
        ),
        (
            "bb8",
            Box::new(|ops| run(rt.block_on(checkouts(&b, ops)), ops)),
        ),
        (
            "tokio-semaphore",
            Box::new(|ops| run(rt.block_on(checkouts(&t, ops)), ops)),
        ),
    ];
    interleave(UNCONTENDED, ops, settings, impls)
}

fn tasks(settings: &Settings) -> Vec<Record> {
    let rt = multi_thread(WORKERS);
    let s = Arc::new(slotpool(&rt));
    let r = Arc::new(reference(&rt));
    let d = Arc::new(deadpool(&rt));
    let b = Arc::new(bb8(&rt));
    let t = Arc::new(tokio_semaphore());
    let ops = settings.ops(ops::TASKS, 8_000);
    // Each task runs `ops / TASK_COUNT`; report per checkout actually done.
    let done = (ops / TASK_COUNT as u64).max(1) * TASK_COUNT as u64;
    let impls: Vec<Runner<'_>> = vec![
        (
            "slotpool",
            Box::new(|ops| Sample::timed(done_for(ops), checkouts_on_tasks(&rt, &s, ops))),
        ),
        (
            "reference",
            Box::new(|ops| Sample::timed(done_for(ops), checkouts_on_tasks(&rt, &r, ops))),
        ),
        (
            "deadpool",
            Box::new(|ops| Sample::timed(done_for(ops), checkouts_on_tasks(&rt, &d, ops))),
        ),
        (
            "bb8",
            Box::new(|ops| Sample::timed(done_for(ops), checkouts_on_tasks(&rt, &b, ops))),
        ),
        (
            "tokio-semaphore",
            Box::new(|ops| Sample::timed(done_for(ops), checkouts_on_tasks(&rt, &t, ops))),
        ),
    ];
    let records = interleave(TASKS, ops, settings, impls);
    debug_assert!(records.iter().all(|r| r.ops == done));
    records
}

/// Checkouts [`checkouts_on_tasks`] really does for `ops`.
fn done_for(ops: u64) -> u64 {
    (ops / TASK_COUNT as u64).max(1) * TASK_COUNT as u64
}
