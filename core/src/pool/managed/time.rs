//! Time for the pools that stamp returns without reading a clock (the managed pool and the
//! client pool): nanosecond stamps since the pool's start on its injected clock, and a cheap
//! "recent" time for returns.
//!
//! A return is stamped with the **recent time**: the later of the clock's cheap `recent()`
//! reading (exact for `quanta::Clock::mock()`, the time of quanta's upkeep thread if the
//! application runs one, 0 otherwise) and the time of the pool's last reap pass. Neither is a
//! clock read, so a stamp can be early by up to the background reap interval (its
//! *staleness*), never late: idle times computed from it are never too short, and a reaper
//! adds the staleness to its timeout so nothing is reaped early. A pool without a background
//! reaper has no pass to bound how stale that reading is (without quanta's upkeep thread,
//! `recent()` reads 0 for ever, and manual passes may be far apart), so it reads the clock
//! on each return instead: its stamps are exact.

use std::time::Duration;

use crate::pool::reap::nanos;
use crate::protocol::exclusive::MAX_STAMP;
use crate::sync::{AtomicU64, Ordering};

// The managed pool's `get` times its waits with this; it lives with the other pools' wait
// statistics now.
pub(crate) use crate::pool::wait::WaitClock;

/// A pool's clock, its time zero and its recent time. See the [module documentation](self).
#[derive(Debug)]
pub(crate) struct RecentClock {
    /// The injected clock.
    pub(crate) clock: quanta::Clock,
    /// Time zero of the stamps.
    base: quanta::Instant,
    /// The time of the last reap pass (a stamp): a floor for return stamps.
    recent: AtomicU64,
    /// How early a return stamp can be (nanoseconds): the background reap interval, or 0
    /// without a background reaper.
    pub(crate) staleness: u64,
}

impl RecentClock {
    pub(crate) fn new(clock: quanta::Clock, reap_interval: Option<Duration>) -> Self {
        let base = clock.now();
        RecentClock {
            clock,
            base,
            recent: AtomicU64::new(0),
            staleness: reap_interval.map_or(0, nanos),
        }
    }

    /// The stamp of `at`.
    #[inline]
    pub(crate) fn stamp(&self, at: quanta::Instant) -> u64 {
        nanos(at.saturating_duration_since(self.base)).min(MAX_STAMP)
    }

    /// The stamp of now: one clock read.
    pub(crate) fn now(&self) -> u64 {
        self.stamp(self.clock.now())
    }

    /// A return stamp: without a clock read under a background reaper, exact (one clock
    /// read) without one (module docs).
    #[inline]
    pub(crate) fn recent(&self) -> u64 {
        if self.staleness == 0 {
            return self.now();
        }
        self.recent_stale()
    }

    /// [`RecentClock::recent`] for a caller that knows the stamps may be stale (a background
    /// reaper runs: `staleness > 0`), which skips that test.
    #[inline]
    pub(crate) fn recent_stale(&self) -> u64 {
        debug_assert!(
            self.staleness > 0,
            "stale stamps without a background reaper"
        );
        let recent = self.recent.load(Ordering::Relaxed);
        self.stamp(self.clock.recent()).max(recent)
    }

    /// Whether `span` nanoseconds have passed since the stamp `since`, given a return stamp
    /// `recent` taken just now ([`RecentClock::recent`], at most `staleness` early): decided
    /// from the stamp where it can be (the span is surely over, or surely not even at the
    /// latest the stamp stands for), else by one clock read.
    #[inline]
    pub(crate) fn passed_since(&self, recent: u64, since: u64, span: u64) -> bool {
        if recent.saturating_sub(since) >= span {
            return true;
        }
        if recent.saturating_add(self.staleness).saturating_sub(since) < span {
            return false;
        }
        self.read_passed_since(since, span)
    }

    #[cold]
    #[inline(never)]
    fn read_passed_since(&self, since: u64, span: u64) -> bool {
        self.now().saturating_sub(since) >= span
    }

    /// Records a reap pass at `now` (a stamp): returns from now on are stamped at least that.
    pub(crate) fn passed(&self, now: u64) {
        self.recent.fetch_max(now, Ordering::Relaxed);
    }

    /// The stamps' time zero.
    pub(crate) fn base(&self) -> quanta::Instant {
        self.base
    }

    /// The instant a stamp stands for.
    pub(crate) fn instant(&self, stamp: u64) -> quanta::Instant {
        self.base + Duration::from_nanos(stamp)
    }

    /// The instant a return stamp stands for at its latest (stamp plus staleness), capped at
    /// `now` (a stamp).
    pub(crate) fn latest(&self, stamp: u64, now: u64) -> quanta::Instant {
        self.instant(stamp.saturating_add(self.staleness).min(now))
    }
}

#[cfg(all(test, not(slotpool_loom)))]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    /// A clock whose stamps may be 30 ms early, read at 100 ms.
    fn at_100_ms() -> (RecentClock, std::sync::Arc<quanta::Mock>) {
        let (clock, mock) = quanta::Clock::mock();
        let time = RecentClock::new(clock, Some(Duration::from_millis(30)));
        mock.increment(Duration::from_millis(100));
        (time, mock)
    }

    #[test]
    fn a_stamp_that_shows_the_span_over_decides_without_the_clock() {
        let (time, _) = at_100_ms();
        // Stamped at 60 ms, since 10 ms, a span of 50 ms: over even if the stamp is exact.
        assert!(time.passed_since(60 * MS, 10 * MS, 50 * MS));
    }

    #[test]
    fn a_stamp_too_early_even_at_its_latest_decides_without_the_clock() {
        let (time, _) = at_100_ms();
        // Stamped at 20 ms (at the latest 50 ms), since 10 ms, a span of 50 ms: not over,
        // although the clock (100 ms) says it is: the stamp is trusted where it can tell.
        assert!(!time.passed_since(20 * MS, 10 * MS, 50 * MS));
    }

    #[test]
    fn a_stamp_that_cannot_tell_reads_the_clock() {
        let (time, mock) = at_100_ms();
        // Stamped at 75 ms (at the latest 105 ms), since 40 ms, a span of 50 ms: the stamp
        // says 35 to 65 ms, so the clock decides: 60 ms, over.
        assert!(time.passed_since(75 * MS, 40 * MS, 50 * MS));
        // Since 55 ms: 20 to 50 ms by the stamp, 45 ms by the clock.
        assert!(!time.passed_since(75 * MS, 55 * MS, 50 * MS));
        mock.increment(Duration::from_millis(5));
        assert!(time.passed_since(75 * MS, 55 * MS, 50 * MS));
    }
}
