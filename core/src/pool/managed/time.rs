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

use crate::exclusive::MAX_STAMP;
use crate::pool::reap::nanos;
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
        let recent = self.recent.load(Ordering::Relaxed);
        self.stamp(self.clock.recent()).max(recent)
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
