//! The depth-1 stream cases: slotpool's `StreamPool` at `max_queue_depth(1)`, R1's depth-1
//! design ([`RefDepth1Pool`], [`crate::reference::stream_depth1`], named `reference-depth1`)
//! and the floor ([`Floor`]) side by side, over the same no-op connector. They ask R1's own
//! open question: is one mutex around an ordered map of exclusive streams fast enough?
//!
//! | case | what it measures |
//! |---|---|
//! | `stream-depth1/uncontended` | one task, acquire then drop the guard; 64 streams × depth 1, one open |
//! | `stream-depth1/8-tasks-2-workers` | 8 tasks looping acquire → drop on a 2-worker runtime, 64 × 1, 8 streams open |
//! | `stream-depth1/256-streams-240-busy` | 256 streams open and the lowest 240 checked out, each pool brought there through its own acquire: the acquire and release of the rest |
//!
//! They are built as the `stream/*` cases are ([`crate::cases::stream`]): the same runners,
//! runtimes, repeats and operation scaling; only the depth and the reference differ. The floor
//! is one CAS below a limit and one `fetch_sub`, as there.
//!
//! In the busy case both pools hold 240 guards taken through their own acquire: slotpool's
//! lowest-first policy puts them on slots 0-239 (the next acquire lands on 240), the
//! reference's `pop_first` on ids 0-239 (its map then holds 240-255, and the next `get` pops
//! 240). Each measured round takes stream 240 and gives it back.

use std::future::Future;
use std::sync::Arc;

use tokio::runtime::Runtime;

use crate::cases::stream::{
    many_task_runners, one_task_runners, prewarm_slotpool, slotpool_pool, NoopPool, Reference,
    SCAN_FULL, SCAN_STREAMS, STREAMS, TASK_COUNT, WORKERS,
};
use crate::fixtures::{current_thread, multi_thread, yield_to_tasks, Floor, NoopConnector};
use crate::reference::stream_depth1::{RefDepth1Guard, RefDepth1Pool};
use crate::report::{interleave, split, Case, Record, Settings};

/// Case name: one task, acquire then release.
pub const UNCONTENDED: &str = "stream-depth1/uncontended";
/// Case name: 8 tasks on 2 workers.
pub const TASKS: &str = "stream-depth1/8-tasks-2-workers";
/// Case name: 256 streams, the lowest 240 checked out.
pub const BUSY: &str = "stream-depth1/256-streams-240-busy";

/// The implementation name of the depth-1 reference in the records.
pub const REFERENCE: &str = "reference-depth1";
/// Queue depth per stream.
pub const DEPTH: usize = 1;
/// Streams open in the busy case.
pub const BUSY_STREAMS: usize = SCAN_STREAMS;
/// Streams checked out in the busy case (the lowest ones).
pub const BUSY_HELD: usize = SCAN_FULL;

/// Full-run operation counts per repeat (scaled by [`Settings::ops`]). Chosen so the three
/// cases add about 7 s to the full comparison on the 2-core dev machine.
pub mod ops {
    /// `stream-depth1/uncontended`.
    pub const UNCONTENDED: u64 = 2_000_000;
    /// `stream-depth1/8-tasks-2-workers` (all tasks together).
    pub const TASKS: u64 = 1_000_000;
    /// `stream-depth1/256-streams-240-busy`.
    pub const BUSY: u64 = 2_000_000;
}

/// The depth-1 reference over the no-op connector.
pub type NoopDepth1Ref = RefDepth1Pool<NoopConnector>;

impl Reference for NoopDepth1Ref {
    type Guard = RefDepth1Guard<NoopConnector>;
    fn get(&self) -> impl Future<Output = Self::Guard> + Send {
        RefDepth1Pool::get(self)
    }
}

// ---------------------------------------------------------------------------------------------
// Building blocks
// ---------------------------------------------------------------------------------------------

/// A depth-1 reference of at most `streams` checked-out streams, built on `rt`.
pub fn reference_pool(rt: &Runtime, streams: usize) -> NoopDepth1Ref {
    let _enter = rt.enter();
    RefDepth1Pool::new(NoopConnector, Some(streams))
}

/// Opens `streams` streams on the reference (checks out `streams` guards at once, each opening
/// a stream, and drops them) and lets their tasks connect.
pub fn prewarm_reference(rt: &Runtime, pool: &NoopDepth1Ref, streams: usize) {
    rt.block_on(async {
        let mut guards = Vec::with_capacity(streams);
        for _ in 0..streams {
            guards.push(pool.get().await);
        }
        drop(guards);
        yield_to_tasks().await;
        assert_eq!(pool.idle(), streams, "every stream idle and open");
    });
}

/// Opens 256 streams on a slotpool pool at depth 1 and keeps the lowest 240 checked out:
/// returns their guards (see [`crate::cases::stream::fill_slotpool`], which also checks that
/// the next acquire lands on stream 240).
pub fn fill_slotpool<'p>(
    rt: &Runtime,
    pool: &'p NoopPool,
) -> Vec<slotpool::stream::StreamGuard<'p, NoopConnector>> {
    let guards = crate::cases::stream::fill_slotpool(rt, pool, DEPTH);
    let stats = pool.stats().table;
    assert_eq!(
        (stats.ready, stats.in_flight),
        (BUSY_STREAMS, BUSY_HELD as u64),
        "256 streams open, 240 busy"
    );
    guards
}

/// Opens 256 streams on the reference, then checks out 240 through its own `get()`: returns
/// their guards. Its `pop_first` hands out ids 0-239 and leaves 240-255 idle.
pub fn fill_reference(rt: &Runtime, pool: &NoopDepth1Ref) -> Vec<RefDepth1Guard<NoopConnector>> {
    prewarm_reference(rt, pool, BUSY_STREAMS);
    rt.block_on(async {
        let mut guards = Vec::with_capacity(BUSY_HELD);
        for _ in 0..BUSY_HELD {
            guards.push(pool.get().await);
        }
        let held: Vec<_> = guards.iter().map(RefDepth1Guard::stream_id).collect();
        assert_eq!(held, (0..BUSY_HELD).collect::<Vec<_>>(), "lowest ids first");
        assert_eq!(
            pool.idle_ids(),
            (BUSY_HELD..BUSY_STREAMS).collect::<Vec<_>>(),
            "the top 16 streams idle"
        );
        guards
    })
}

// ---------------------------------------------------------------------------------------------
// The comparison
// ---------------------------------------------------------------------------------------------

/// The depth-1 stream cases, in the order the comparison runs them.
pub const CASES: &[Case] = &[(UNCONTENDED, uncontended), (TASKS, tasks), (BUSY, busy)];

fn uncontended(settings: &Settings) -> Vec<Record> {
    let rt = current_thread();
    let pool = slotpool_pool(&rt, NoopConnector, STREAMS, DEPTH);
    prewarm_slotpool(&rt, &pool, 1, DEPTH);
    let reference = reference_pool(&rt, STREAMS);
    prewarm_reference(&rt, &reference, 1);
    let floor = Floor::new(STREAMS * DEPTH);
    let ops = settings.ops(ops::UNCONTENDED, 1_000);
    let impls = one_task_runners(&rt, &pool, (REFERENCE, &reference), &floor);
    interleave(UNCONTENDED, ops, settings, impls)
}

fn tasks(settings: &Settings) -> Vec<Record> {
    let rt = multi_thread(WORKERS);
    let pool = Arc::new(slotpool_pool(&rt, NoopConnector, STREAMS, DEPTH));
    prewarm_slotpool(&rt, &pool, TASK_COUNT, DEPTH);
    let reference = Arc::new(reference_pool(&rt, STREAMS));
    prewarm_reference(&rt, &reference, TASK_COUNT);
    let floor = Arc::new(Floor::new(STREAMS * DEPTH));
    let ops = settings.ops(ops::TASKS, 1_000);
    let impls = many_task_runners(&rt, &pool, (REFERENCE, &reference), &floor, TASK_COUNT);
    interleave(TASKS, split(ops, TASK_COUNT).1, settings, impls)
}

fn busy(settings: &Settings) -> Vec<Record> {
    let rt = current_thread();
    let pool = slotpool_pool(&rt, NoopConnector, BUSY_STREAMS, DEPTH);
    let held = fill_slotpool(&rt, &pool);
    let reference = reference_pool(&rt, BUSY_STREAMS);
    let ref_held = fill_reference(&rt, &reference);
    let floor = Floor::new(BUSY_STREAMS * DEPTH);
    let ops = settings.ops(ops::BUSY, 1_000);
    let impls = one_task_runners(&rt, &pool, (REFERENCE, &reference), &floor);
    let records = interleave(BUSY, ops, settings, impls);
    drop(held);
    drop(ref_held);
    records
}
