//! Time for the pools that stamp returns without reading a clock (the managed pool and the
//! client pool): nanosecond stamps since the pool's start on its injected clock, and a cheap
//! "recent" time for returns.
//!
//! A return is stamped with the **recent time**: the later of the clock's cheap `recent()`
//! reading (exact for `quanta::Clock::mock()`, the time of quanta's upkeep thread if the
//! application runs one, 0 otherwise) and the time of the pool's last reap pass. Neither is a
//! clock read, so a stamp can be early by up to the background reap interval (its
//! *staleness*), never late: idle times computed from it are never too short, and a reaper
//! adds the staleness to its timeout so nothing is reaped early.

use std::time::Duration;

use crate::exclusive::MAX_STAMP;
use crate::pool::reap::nanos;
use crate::sync::{AtomicU64, Counter, Ordering};

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

    /// A return stamp without a clock read (module docs).
    #[inline]
    pub(crate) fn recent(&self) -> u64 {
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

/// Times a wait for a pool's statistics: from [`WaitClock::start`] (the first time the caller
/// finds it must wait) to the drop (served, timed out or cancelled), added to `total` in
/// nanoseconds. A caller that never waits reads no clock.
pub(crate) struct WaitClock<'a> {
    clock: &'a quanta::Clock,
    total: &'a Counter,
    start: Option<quanta::Instant>,
}

impl<'a> WaitClock<'a> {
    /// Not started.
    pub(crate) fn new(clock: &'a quanta::Clock, total: &'a Counter) -> Self {
        WaitClock {
            clock,
            total,
            start: None,
        }
    }

    /// Started now, unless it was already.
    pub(crate) fn start(&mut self) {
        if self.start.is_none() {
            self.start = Some(self.clock.now());
        }
    }

    /// Whether the caller waited.
    pub(crate) fn waited(&self) -> bool {
        self.start.is_some()
    }
}

impl Drop for WaitClock<'_> {
    fn drop(&mut self) {
        if let Some(start) = self.start {
            let waited = self.clock.now().saturating_duration_since(start);
            self.total.add(nanos(waited));
        }
    }
}
