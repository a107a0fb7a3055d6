//! The background reaper every pool runs, and the time arithmetic the reapers share.
//!
//! Reaping itself is each pool's plain `reap(now)` (tests call it directly with a mock
//! clock). This module only runs it every interval on the pool's runtime, holding a `Weak`
//! between ticks so a dropped pool ends its reaper, and converts durations to the nanosecond
//! stamps the slot table and the pools compare.

use std::time::Duration;

use quanta::Clock;
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

/// The most ticks of `clock`'s raw count that scale to at most `ns` nanoseconds, or
/// `u64::MAX` if every count below the point where scaling overflows does: a bound in
/// nanoseconds as a bound on raw counts, so a hot path compares raw counts without scaling
/// them. For a clock whose raw count is in nanoseconds (a mock, or the OS's monotonic clock)
/// that is `ns` itself (`u64::MAX` within about four seconds of 584 years).
///
/// `clock.delta_as_nanos(0, ticks)` grows with `ticks` until the scaled count passes
/// `u64::MAX` (then it truncates); the search stays below that point, found from the rate
/// over a probe of 2^32 ticks. A binary search: a build or a reap pass calls this, not a hot
/// path.
pub(crate) fn ticks_within(clock: &Clock, ns: u64) -> u64 {
    const PROBE: u64 = 1 << 32;
    let scale = |ticks| clock.delta_as_nanos(0, ticks);
    let per_probe = scale(PROBE);
    // The scaled rate is under (per_probe + 1) / PROBE nanoseconds a tick, so no count below
    // `top` scales past u64::MAX; under a nanosecond a tick, none at all.
    let top = if per_probe < PROBE {
        u64::MAX
    } else {
        u64::try_from((u128::from(PROBE) << 64) / (u128::from(per_probe) + 1)).unwrap_or(u64::MAX)
    };
    if scale(top) <= ns {
        return u64::MAX;
    }
    // INVARIANT: scale(low) <= ns < scale(high).
    let (mut low, mut high) = (0u64, top);
    while high - low > 1 {
        let mid = low + (high - low) / 2;
        if scale(mid) <= ns {
            low = mid;
        } else {
            high = mid;
        }
    }
    low
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On the machine's clock (the TSC where quanta calibrates one) and on a mock: the bound
    /// is the last count within `ns`, and a huge `ns` leaves no bound.
    #[test]
    fn ticks_within_is_the_last_count_that_scales_within_the_bound() {
        let real = Clock::new();
        let (mock, _handle) = Clock::mock();
        for clock in [&real, &mock] {
            let scale = |ticks| clock.delta_as_nanos(0, ticks);
            for ns in [
                0,
                1,
                2,
                999,
                1_000_000,
                600_000_000_000,
                1 << 50,
                u64::MAX / 4,
            ] {
                let ticks = ticks_within(clock, ns);
                assert!(scale(ticks) <= ns, "{ns} ns: {ticks} ticks scale past it");
                assert!(
                    scale(ticks + 1) > ns,
                    "{ns} ns: {} ticks fit too",
                    ticks + 1
                );
            }
            assert_eq!(ticks_within(clock, u64::MAX), u64::MAX);
        }
        assert_eq!(ticks_within(&mock, 600_000_000_000), 600_000_000_000);
        // A clock whose count is nanoseconds scales by exactly one, which the probe cannot
        // tell from a rate a hair above one that would overflow at the top: the search
        // stops short of the last four seconds or so, and a bound within them is no bound.
        let short_of_the_end = u64::MAX - (1 << 33);
        assert_eq!(ticks_within(&mock, short_of_the_end), short_of_the_end);
        assert_eq!(ticks_within(&mock, u64::MAX - 1), u64::MAX);
    }

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
