//! The clock the pools measure time with: idle times, lifetimes, waits, holds. Every pool
//! takes one in its builder (`.clock(..)`), so a test can hand it a mock and move time by hand
//! instead of sleeping.
//!
//! A [`Clock`] reads the machine's monotonic time cheaply (quanta's calibrated counter);
//! [`Clock::mock`] makes one whose time moves only when its [`MockClock`] says. An [`Instant`]
//! is a point on a clock, compared and subtracted as `std::time::Instant` is.
//!
//! ```
//! use std::time::Duration;
//! use slotpool::Clock;
//!
//! let (clock, mock) = Clock::mock();
//! let start = clock.now();
//! mock.advance(Duration::from_secs(30));
//! assert_eq!(clock.now() - start, Duration::from_secs(30));
//! ```
//!
//! This module owns the public face of time; the pools keep their own stamps on it.

use std::fmt;
use std::ops::{Add, AddAssign, Sub, SubAssign};
use std::time::Duration;

/// A monotonic clock: the machine's, or a mock that moves when told ([`Clock::mock`]). Cheap
/// to clone; clones read the same time.
#[derive(Clone)]
pub struct Clock {
    inner: quanta::Clock,
}

impl Clock {
    /// The machine's monotonic clock.
    pub fn new() -> Self {
        Clock {
            inner: quanta::Clock::new(),
        }
    }

    /// A clock that stands still until its [`MockClock`] moves it: for tests.
    pub fn mock() -> (Clock, MockClock) {
        let (inner, mock) = quanta::Clock::mock();
        (Clock { inner }, MockClock { inner: mock })
    }

    /// The time now.
    pub fn now(&self) -> Instant {
        Instant(self.inner.now())
    }

    /// The clock inside, for the pools' own stamps.
    pub(crate) fn quanta(&self) -> &quanta::Clock {
        &self.inner
    }

    /// A clock around a quanta clock (the pools keep theirs that way).
    pub(crate) fn from_quanta(inner: quanta::Clock) -> Self {
        Clock { inner }
    }
}

impl Default for Clock {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for Clock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Clock").finish_non_exhaustive()
    }
}

/// The hand of a mock [`Clock`]: moves its time forward.
#[derive(Clone)]
pub struct MockClock {
    /// quanta's handle, as quanta hands it out (its own `Arc`, not one of our synchronising
    /// primitives: nothing of ours waits on it).
    inner: std::sync::Arc<quanta::Mock>,
}

impl MockClock {
    /// Moves the clock's time forward by `by`.
    pub fn advance(&self, by: Duration) {
        self.inner.increment(by);
    }
}

impl fmt::Debug for MockClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MockClock").finish_non_exhaustive()
    }
}

/// A point in time on a [`Clock`]. Instants of different clocks do not compare meaningfully.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Instant(pub(crate) quanta::Instant);

impl Instant {
    /// The time from `earlier` to this instant, or zero if `earlier` is later (as
    /// `std::time::Instant::duration_since` does since Rust 1.60).
    pub fn duration_since(&self, earlier: Instant) -> Duration {
        self.saturating_duration_since(earlier)
    }

    /// The time from `earlier` to this instant, or zero if `earlier` is later.
    pub fn saturating_duration_since(&self, earlier: Instant) -> Duration {
        self.0.saturating_duration_since(earlier.0)
    }

    /// The time from `earlier` to this instant, or `None` if `earlier` is later.
    pub fn checked_duration_since(&self, earlier: Instant) -> Option<Duration> {
        self.0.checked_duration_since(earlier.0)
    }

    /// This instant moved forward by `by`, or `None` on overflow.
    pub fn checked_add(&self, by: Duration) -> Option<Instant> {
        self.0.checked_add(by).map(Instant)
    }

    /// This instant moved back by `by`, or `None` on overflow.
    pub fn checked_sub(&self, by: Duration) -> Option<Instant> {
        self.0.checked_sub(by).map(Instant)
    }
}

impl Add<Duration> for Instant {
    type Output = Instant;

    /// # Panics
    /// On overflow, as `std::time::Instant` does.
    fn add(self, by: Duration) -> Instant {
        Instant(self.0 + by)
    }
}

impl AddAssign<Duration> for Instant {
    fn add_assign(&mut self, by: Duration) {
        self.0 += by;
    }
}

impl Sub<Duration> for Instant {
    type Output = Instant;

    /// # Panics
    /// On overflow, as `std::time::Instant` does.
    fn sub(self, by: Duration) -> Instant {
        Instant(self.0 - by)
    }
}

impl SubAssign<Duration> for Instant {
    fn sub_assign(&mut self, by: Duration) {
        self.0 -= by;
    }
}

impl Sub<Instant> for Instant {
    type Output = Duration;

    /// The time from `earlier` to this instant, zero if `earlier` is later (as
    /// `std::time::Instant` does).
    fn sub(self, earlier: Instant) -> Duration {
        self.saturating_duration_since(earlier)
    }
}

impl fmt::Debug for Instant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

#[cfg(all(test, not(slotpool_loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_mock_clock_moves_only_when_told() {
        let (clock, mock) = Clock::mock();
        let start = clock.now();
        assert_eq!(clock.now(), start);
        mock.advance(Duration::from_millis(1500));
        let later = clock.now();
        assert_eq!(later - start, Duration::from_millis(1500));
        assert_eq!(start - later, Duration::ZERO, "saturating, as std's");
        assert_eq!(start.checked_duration_since(later), None);
        assert_eq!(start + Duration::from_millis(1500), later);
        assert_eq!(later - Duration::from_millis(1500), start);
        let mut moved = start;
        moved += Duration::from_secs(1);
        moved -= Duration::from_millis(500);
        assert_eq!(
            moved.saturating_duration_since(start),
            Duration::from_millis(500)
        );
        assert_eq!(
            start.checked_add(Duration::from_secs(2)).unwrap() - start,
            Duration::from_secs(2)
        );
        assert!(later.checked_sub(Duration::from_secs(1)).unwrap() > start);
        let clone = clock.clone();
        mock.advance(Duration::from_secs(1));
        assert_eq!(clone.now(), clock.now(), "clones read the same time");
    }

    #[test]
    fn the_machine_clock_does_not_go_back() {
        let clock = Clock::default();
        let (a, b) = (clock.now(), clock.now());
        assert!(b >= a);
    }
}
