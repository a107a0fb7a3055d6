//! The background reaper every pool runs, and the time arithmetic the reapers share.
//!
//! Reaping itself is each pool's plain `reap(now)` (tests call it directly with a mock
//! clock). This module only runs it every interval on the pool's runtime, holding a `Weak`
//! between ticks so a dropped pool ends its reaper, and converts durations to the nanosecond
//! stamps the slot table and the pools compare.

use std::time::Duration;

use tokio::runtime::Handle;
use tokio::task::AbortHandle;

use crate::sync::{Arc, Weak};

/// Spawns a task on `runtime` that calls `tick` with the pool's shared state every
/// `interval` (the first, immediate tick is skipped: nothing can be idle yet). It ends when
/// the state is dropped; the pool also aborts it through the returned handle on drop.
pub(crate) fn spawn_reaper<S: Send + Sync + 'static>(
    runtime: &Handle,
    shared: Weak<S>,
    interval: Duration,
    tick: impl Fn(&Arc<S>) + Send + 'static,
) -> AbortHandle {
    runtime
        .spawn(async move {
            let mut ticker = tokio::time::interval(interval);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            ticker.tick().await;
            loop {
                ticker.tick().await;
                // No strong reference is held between ticks.
                let Some(shared) = shared.upgrade() else {
                    return;
                };
                tick(&shared);
            }
        })
        .abort_handle()
}

/// A duration in nanoseconds, saturating at `u64::MAX` (about 584 years).
pub(crate) fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}
