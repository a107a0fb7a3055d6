//! The session cases: slotpool's `SessionPool` and the R3 reference ([`RefSessionPool`],
//! [`crate::reference::session`]) side by side, over the same no-op connector and the same
//! no-op store ([`crate::fixtures`]).
//!
//! | case | what it measures |
//! |---|---|
//! | `session/hot-acquire-8-tasks` | 1000 active sessions; 8 tasks on a 2-worker runtime each re-acquire random live sessions (xorshift), dropping the handle at once |
//! | `session/churn` | 8 tasks on a 2-worker runtime, each looping acquire → release over its own fresh session ids, so every acquire establishes (connect, store lookup, bootstrap, save, reader task) and every release closes |
//!
//! In `session/churn`, slotpool opens no event channel (it is opened at the first event or
//! `take_events`) and spawns no reader for a session released before its task yields: readers
//! are started by one starter task per batch of installs (see `slotpool::session`, *Event
//! readers*), and each acquire that establishes spends a unit of tokio's coop budget, so the
//! loop yields (and the starter runs) about once per 128 cycles. The reference spawns a reader
//! and creates a channel per session, as R3 does.
//!
//! There is no floor here: an acquire of a keyed session has no pool-free equivalent that is
//! a lower bound in the same sense as one CAS below a limit.
//!
//! Runtimes and pools are built once per case, not per repeat; the runners are public so the
//! criterion bench times the same code.

use std::sync::Arc;
use std::time::{Duration, Instant};

use slotpool::session::{SessionContext, SessionPool};
use tokio::runtime::Runtime;

use crate::fixtures::{join_all, multi_thread, NoopSessionConnector, NoopStore};
use crate::reference::session::RefSessionPool;
use crate::report::{interleave, Case, Record, Runner, Sample, Settings};

/// Case name: hot re-acquires of live sessions from 8 tasks.
pub const HOT: &str = "session/hot-acquire-8-tasks";
/// Case name: acquire → release of fresh sessions.
pub const CHURN: &str = "session/churn";

/// Active sessions in the hot case (R3's default `pool_size`).
pub const SESSIONS: usize = 1000;
/// Tasks in both cases.
pub const TASK_COUNT: usize = 8;
/// Worker threads of the runtime.
pub const WORKERS: usize = 2;
/// Session ids each churn task cycles through (each released before it is reused).
pub const CHURN_IDS_PER_TASK: usize = 256;

/// Full-run operation counts (scaled by [`Settings::ops`]).
pub mod ops {
    /// Hot acquires per repeat, over all tasks.
    pub const HOT: u64 = 1_600_000;
    /// Acquire → release cycles per repeat, over all tasks.
    pub const CHURN: u64 = 160_000;
}

// ---------------------------------------------------------------------------------------
// Pools, fills and runners
// ---------------------------------------------------------------------------------------

/// slotpool's pool as the cases use it.
pub type SlotSessions = SessionPool<NoopSessionConnector, NoopStore>;
/// The reference as the cases use it.
pub type RefSessions = RefSessionPool<NoopSessionConnector, NoopStore>;

/// The 2-worker runtime both cases run on.
pub fn runtime() -> Runtime {
    multi_thread(WORKERS)
}

/// The context every acquire passes.
pub fn context() -> SessionContext {
    SessionContext::new("bench", "bench")
}

/// A slotpool pool of `SESSIONS` capacity (built inside `rt`, no background reaper).
pub fn slotpool_pool(rt: &Runtime) -> Arc<SlotSessions> {
    let _enter = rt.enter();
    let pool = SessionPool::builder(NoopSessionConnector::default())
        .store(NoopStore)
        .pool_size(SESSIONS)
        .reap_every(None)
        .build()
        .unwrap_or_else(|e| panic!("valid configuration refused: {e}"));
    Arc::new(pool)
}

/// The reference with `SESSIONS` idle slots created up front.
pub fn reference_pool(rt: &Runtime) -> Arc<RefSessions> {
    let pool = rt
        .block_on(RefSessionPool::new(
            NoopSessionConnector::default(),
            NoopStore,
            SESSIONS,
        ))
        .unwrap_or_else(|e| panic!("reference start failed: {e:?}"));
    Arc::new(pool)
}

/// The hot case's session ids.
pub fn hot_ids() -> Arc<Vec<String>> {
    Arc::new((0..SESSIONS).map(|i| format!("hot-{i}")).collect())
}

/// Task `t`'s churn ids.
pub fn churn_ids(task: usize) -> Vec<String> {
    (0..CHURN_IDS_PER_TASK)
        .map(|i| format!("churn-{task}-{i}"))
        .collect()
}

/// Makes every hot id an active session in slotpool.
pub fn fill_slotpool(rt: &Runtime, pool: &SlotSessions, ids: &[String]) {
    rt.block_on(async {
        let ctx = context();
        for id in ids {
            if let Err(e) = pool.acquire(id, &ctx).await {
                panic!("fill failed: {e}");
            }
        }
    });
}

/// Makes every hot id an active session in the reference.
pub fn fill_reference(rt: &Runtime, pool: &RefSessions, ids: &[String]) {
    rt.block_on(async {
        let ctx = context();
        for id in ids {
            if let Err(e) = pool.acquire(id, &ctx).await {
                panic!("fill failed: {e:?}");
            }
        }
    });
}

/// xorshift64: picks the next session in a hot loop without shared state.
fn next(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

/// `tasks` tasks each re-acquire `ops_per_task` random live sessions (call inside
/// `Runtime::block_on` of a multi-thread runtime). Returns the wall time.
pub async fn slotpool_hot(
    pool: &Arc<SlotSessions>,
    ids: &Arc<Vec<String>>,
    tasks: usize,
    ops_per_task: u64,
) -> Duration {
    let start = Instant::now();
    let handles = (0..tasks)
        .map(|t| {
            let (pool, ids) = (Arc::clone(pool), Arc::clone(ids));
            tokio::spawn(async move {
                let ctx = context();
                let mut rng = 0x9e37_79b9_7f4a_7c15_u64 ^ (t as u64 + 1);
                for _ in 0..ops_per_task {
                    let id = &ids[(next(&mut rng) % ids.len() as u64) as usize];
                    match pool.acquire(id, &ctx).await {
                        Ok(session) => drop(std::hint::black_box(session)),
                        Err(e) => panic!("hot acquire failed: {e}"),
                    }
                }
            })
        })
        .collect();
    join_all(handles).await;
    start.elapsed()
}

/// The reference's side of [`slotpool_hot`].
pub async fn reference_hot(
    pool: &Arc<RefSessions>,
    ids: &Arc<Vec<String>>,
    tasks: usize,
    ops_per_task: u64,
) -> Duration {
    let start = Instant::now();
    let handles = (0..tasks)
        .map(|t| {
            let (pool, ids) = (Arc::clone(pool), Arc::clone(ids));
            tokio::spawn(async move {
                let ctx = context();
                let mut rng = 0x9e37_79b9_7f4a_7c15_u64 ^ (t as u64 + 1);
                for _ in 0..ops_per_task {
                    let id = &ids[(next(&mut rng) % ids.len() as u64) as usize];
                    match pool.acquire(id, &ctx).await {
                        Ok(session) => drop(std::hint::black_box(session)),
                        Err(e) => panic!("hot acquire failed: {e:?}"),
                    }
                }
            })
        })
        .collect();
    join_all(handles).await;
    start.elapsed()
}

/// `tasks` tasks each run `ops_per_task` acquire → release cycles over their own fresh ids.
pub async fn slotpool_churn(pool: &Arc<SlotSessions>, tasks: usize, ops_per_task: u64) -> Duration {
    let start = Instant::now();
    let handles = (0..tasks)
        .map(|t| {
            let pool = Arc::clone(pool);
            tokio::spawn(async move {
                let (ctx, ids) = (context(), churn_ids(t));
                for i in 0..ops_per_task as usize {
                    let id = &ids[i % ids.len()];
                    match pool.acquire(id, &ctx).await {
                        Ok(session) => drop(std::hint::black_box(session)),
                        Err(e) => panic!("churn acquire failed: {e}"),
                    }
                    pool.release(id);
                }
            })
        })
        .collect();
    join_all(handles).await;
    start.elapsed()
}

/// The reference's side of [`slotpool_churn`].
pub async fn reference_churn(pool: &Arc<RefSessions>, tasks: usize, ops_per_task: u64) -> Duration {
    let start = Instant::now();
    let handles = (0..tasks)
        .map(|t| {
            let pool = Arc::clone(pool);
            tokio::spawn(async move {
                let (ctx, ids) = (context(), churn_ids(t));
                for i in 0..ops_per_task as usize {
                    let id = &ids[i % ids.len()];
                    match pool.acquire(id, &ctx).await {
                        Ok(session) => drop(std::hint::black_box(session)),
                        Err(e) => panic!("churn acquire failed: {e:?}"),
                    }
                    pool.release(id).await;
                }
            })
        })
        .collect();
    join_all(handles).await;
    start.elapsed()
}

// ---------------------------------------------------------------------------------------
// The comparison
// ---------------------------------------------------------------------------------------

/// The session cases, in the order the comparison runs them.
pub const CASES: &[Case] = &[(HOT, hot), (CHURN, churn)];

fn hot(settings: &Settings) -> Vec<Record> {
    let rt = runtime();
    let ids = hot_ids();
    let pool = slotpool_pool(&rt);
    fill_slotpool(&rt, &pool, &ids);
    let reference = reference_pool(&rt);
    fill_reference(&rt, &reference, &ids);
    let ops = settings.ops(ops::HOT, TASK_COUNT as u64 * 100);
    let per = (ops / TASK_COUNT as u64).max(1);
    let impls: Vec<Runner<'_>> = vec![
        (
            "slotpool",
            Box::new(|ops| {
                let per = (ops / TASK_COUNT as u64).max(1);
                Sample::timed(
                    per * TASK_COUNT as u64,
                    rt.block_on(slotpool_hot(&pool, &ids, TASK_COUNT, per)),
                )
            }),
        ),
        (
            "reference",
            Box::new(|ops| {
                let per = (ops / TASK_COUNT as u64).max(1);
                Sample::timed(
                    per * TASK_COUNT as u64,
                    rt.block_on(reference_hot(&reference, &ids, TASK_COUNT, per)),
                )
            }),
        ),
    ];
    let records = interleave(HOT, per * TASK_COUNT as u64, settings, impls);
    pool.close();
    rt.block_on(reference.stop());
    records
}

fn churn(settings: &Settings) -> Vec<Record> {
    let rt = runtime();
    let pool = slotpool_pool(&rt);
    let reference = reference_pool(&rt);
    let ops = settings.ops(ops::CHURN, TASK_COUNT as u64 * 10);
    let per = (ops / TASK_COUNT as u64).max(1);
    let impls: Vec<Runner<'_>> = vec![
        (
            "slotpool",
            Box::new(|ops| {
                let per = (ops / TASK_COUNT as u64).max(1);
                Sample::timed(
                    per * TASK_COUNT as u64,
                    rt.block_on(slotpool_churn(&pool, TASK_COUNT, per)),
                )
            }),
        ),
        (
            "reference",
            Box::new(|ops| {
                let per = (ops / TASK_COUNT as u64).max(1);
                Sample::timed(
                    per * TASK_COUNT as u64,
                    rt.block_on(reference_churn(&reference, TASK_COUNT, per)),
                )
            }),
        ),
    ];
    let records = interleave(CHURN, per * TASK_COUNT as u64, settings, impls);
    pool.close();
    rt.block_on(reference.stop());
    records
}
