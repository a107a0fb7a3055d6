//! What every fault scenario measures, whatever the pool and the peer: [`TASKS`] callers
//! running operations back to back, the fault injected between a steady stretch and the load
//! after it ([`drive`]), and what the callers saw, read off their operations ([`Loaded`]):
//! failures, late callers, the recovery and the return to full throughput. The PostgreSQL
//! scenarios ([`super::run`]) and the tonic ones ([`super::tonic::run`]) both run through it;
//! each adds its own accounting and connection counts to the [`FaultRecord`].
//!
//! This file owns the load and the timeline; it knows nothing of the pools.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::runtime::Runtime;

use super::{FaultRecord, Timing, ERROR_PAUSE, TASKS, WARMUP, WINDOW};
use crate::fixtures::{join_all, nanos};

/// How one operation went, as its caller saw it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Done {
    /// It succeeded.
    pub ok: bool,
    /// It failed before the caller had an object (the get, or the acquire).
    pub failed_get: bool,
    /// It ended past the caller's deadline by more than [`super::GRACE`].
    pub late: bool,
}

/// One operation as a caller saw it, in time since the run began.
#[derive(Debug, Clone, Copy)]
pub(super) struct Op {
    ended: Duration,
    ok: bool,
    failed_get: bool,
    late: bool,
}

/// One caller: `op` back to back until `stop`, pausing [`ERROR_PAUSE`] after a failure.
pub(super) async fn caller<F, Fut>(start: Instant, stop: Arc<AtomicBool>, mut op: F) -> Vec<Op>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Done>,
{
    let mut ops = Vec::with_capacity(16 * 1024);
    while !stop.load(Ordering::Relaxed) {
        let done = op().await;
        ops.push(Op {
            ended: start.elapsed(),
            ok: done.ok,
            failed_get: done.failed_get,
            late: done.late,
        });
        if !done.ok {
            tokio::time::sleep(ERROR_PAUSE).await;
        }
    }
    ops
}

/// When the fault began and ended, in time since the run began.
#[derive(Debug, Clone, Copy)]
pub(super) struct FaultSpan {
    pub start: Duration,
    pub end: Duration,
}

/// A loaded run: every operation, in the order they ended, and when the fault was.
#[derive(Debug)]
pub(super) struct Loaded {
    /// When the load began.
    pub start: Instant,
    ops: Vec<Op>,
    /// The fault.
    pub span: FaultSpan,
    /// When the load was told to stop.
    load_end: Duration,
}

/// Runs [`TASKS`] callers on `rt` (`task(start, stop)` makes each one's future, usually a
/// [`caller`]), lets them run for [`Timing::pre`], runs `inject` (which returns when the
/// fault is over), lets them run for [`Timing::post`] more, stops them and collects their
/// operations.
///
/// # Errors
/// `inject`'s error (the callers are stopped first).
pub(super) fn drive<T, Fut>(
    rt: &Runtime,
    timing: &Timing,
    mut task: T,
    inject: impl FnOnce() -> Result<(), String>,
) -> Result<Loaded, String>
where
    T: FnMut(Instant, Arc<AtomicBool>) -> Fut,
    Fut: Future<Output = Vec<Op>> + Send + 'static,
{
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let callers: Vec<_> = (0..TASKS)
        .map(|_| rt.spawn(task(start, Arc::clone(&stop))))
        .collect();
    std::thread::sleep(timing.pre);
    let fault_start = start.elapsed();
    let injected = inject();
    let span = FaultSpan {
        start: fault_start,
        end: start.elapsed(),
    };
    if let Err(error) = injected {
        stop.store(true, Ordering::Relaxed);
        let _ = rt.block_on(join_all(callers));
        return Err(error);
    }
    std::thread::sleep(timing.post);
    stop.store(true, Ordering::Relaxed);
    let load_end = start.elapsed();
    let mut ops: Vec<Op> = rt
        .block_on(join_all(callers))
        .into_iter()
        .flatten()
        .collect();
    ops.sort_by_key(|op| op.ended);
    Ok(Loaded {
        start,
        ops,
        span,
        load_end,
    })
}

impl Loaded {
    /// The instant `offset` after the load began.
    pub fn at(&self, offset: Duration) -> Instant {
        self.start + offset
    }

    /// From the fault's end to the end of the first success after it.
    pub fn recovery(&self) -> Option<Duration> {
        self.ops
            .iter()
            .find(|op| op.ok && op.ended >= self.span.end)
            .map(|op| op.ended - self.span.end)
    }

    /// The end of the window the connection attempts are counted in: the fault's end, or the
    /// first success after it if that is later.
    pub fn connects_until(&self) -> Instant {
        self.at(self.span.end + self.recovery().unwrap_or_default())
    }

    /// The record of `case` on `impl_name` with what the callers saw filled in: failures,
    /// late callers, recovery, the return to full throughput, the operations, the pre-fault
    /// rate and the fault's length. The accounting, the connection counts and the peak are
    /// the scenario's to fill in (0 here).
    pub fn record(&self, case: &str, impl_name: &str) -> FaultRecord {
        let pre_rate = pre_rate(&self.ops, self.span.start);
        let full = full_after(&self.ops, self.span.end, self.load_end, pre_rate);
        FaultRecord {
            case: case.to_string(),
            impl_name: impl_name.to_string(),
            failed: self.ops.iter().filter(|op| !op.ok).count() as u64,
            failed_get: self.ops.iter().filter(|op| op.failed_get).count() as u64,
            late: self.ops.iter().filter(|op| op.late).count() as u64,
            leaked: 0,
            recovery_ns: self.recovery().map(nanos),
            full_ns: full.map(nanos),
            connects: 0,
            peak_backends: 0,
            ops: self.ops.len() as u64,
            pre_ops_per_s: pre_rate,
            fault_ns: nanos(self.span.end - self.span.start),
            connects_after_fault: 0,
            pool_size_end: 0,
            live_end: 0,
            backends_end: 0,
        }
    }
}

/// Successful operations per second over the steady stretch (after [`WARMUP`]).
fn pre_rate(ops: &[Op], fault_start: Duration) -> f64 {
    let Some(span) = fault_start.checked_sub(WARMUP).filter(|s| !s.is_zero()) else {
        return 0.0;
    };
    let done = ops
        .iter()
        .filter(|op| op.ok && op.ended >= WARMUP && op.ended < fault_start)
        .count();
    done as f64 / span.as_secs_f64()
}

/// From `fault_end` to the start of the first [`WINDOW`] (in 10 ms steps) whose successes
/// reach 90% of `pre_rate`; `None` when none does before `load_end`.
fn full_after(
    ops: &[Op],
    fault_end: Duration,
    load_end: Duration,
    pre_rate: f64,
) -> Option<Duration> {
    if pre_rate <= 0.0 {
        return None;
    }
    let wanted = 0.9 * pre_rate * WINDOW.as_secs_f64();
    let step = Duration::from_millis(10);
    let ended: Vec<Duration> = ops.iter().filter(|op| op.ok).map(|op| op.ended).collect();
    let mut from = fault_end;
    while from + WINDOW <= load_end {
        let first = ended.partition_point(|&t| t < from);
        let last = ended.partition_point(|&t| t < from + WINDOW);
        if (last - first) as f64 >= wanted {
            return Some(from - fault_end);
        }
        from += step;
    }
    None
}
