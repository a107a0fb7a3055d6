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
///
/// In `u64` with saturation, which gives what the `u128` of `Duration::as_nanos` capped at
/// `u64::MAX` would: for a duration made from `u64` nanoseconds (the difference of two quanta
/// instants, on every return stamp), the compiler folds the seconds and the sub-second part
/// back into those nanoseconds instead of multiplying in 128 bits.
#[inline]
pub(crate) fn nanos(duration: Duration) -> u64 {
    duration
        .as_secs()
        .saturating_mul(1_000_000_000)
        .saturating_add(u64::from(duration.subsec_nanos()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `nanos` must equal: the exact count, capped at `u64::MAX`.
    fn capped(duration: Duration) -> u64 {
        u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
    }

    #[test]
    fn nanos_is_the_exact_count_capped_at_u64_max() {
        let max_secs = u64::MAX / 1_000_000_000;
        let cases = [
            Duration::ZERO,
            Duration::from_nanos(1),
            Duration::from_nanos(999_999_999),
            Duration::from_secs(1),
            Duration::new(3, 7),
            Duration::from_nanos(u64::MAX - 1),
            Duration::from_nanos(u64::MAX),
            Duration::from_nanos(u64::MAX) + Duration::from_nanos(1),
            // The seconds fit after the multiplication; the sub-second part tips the sum over.
            Duration::new(max_secs, 999_999_999),
            // The multiplication itself overflows.
            Duration::from_secs(max_secs + 1),
            Duration::MAX,
        ];
        for duration in cases {
            assert_eq!(nanos(duration), capped(duration), "{duration:?}");
        }
        assert_eq!(nanos(Duration::from_nanos(u64::MAX)), u64::MAX);
        assert_eq!(nanos(Duration::MAX), u64::MAX);
        assert_eq!(nanos(Duration::new(3, 7)), 3_000_000_007);
    }
}
