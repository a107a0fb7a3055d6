//! Wait-time statistics, for every pool whose callers can wait: how long a caller waited, on
//! the pool's injected clock, added to the pool's total and, with the `metrics` feature,
//! recorded as one sample of the pool's wait histogram.
//!
//! # Only a caller that waits pays
//!
//! A [`WaitClock`] is started the first time its caller finds that it must wait (a failed
//! try, a pending poll) and stops when it is dropped, whatever ended the wait: served, timed
//! out, cancelled, closed. A caller that never waits never starts one, so the uncontended path
//! reads no clock, touches no counter and records no sample; a wait costs two clock reads,
//! one addition to the total and, with `metrics`, one histogram lookup and record. A pool
//! whose waiting future must stay small (the stream pool's `Acquire`) keeps only the start
//! instant and ends the wait with [`WaitSink::end`] itself.
//!
//! # Where a wait goes
//!
//! A [`WaitSink`] takes each finished wait. [`WaitTotal`] is the sink of a whole pool: a
//! striped total of nanoseconds (what `stats().wait_time` reads) and the histogram's name and
//! `pool` label. The keyed admission pool keeps one sink per caller key instead, beside the
//! key's other counters, with a histogram handle registered with the key.
//!
//! # The histogram
//!
//! With the `metrics` feature, every finished wait records its length in seconds as
//! `histogram!("slotpool_<pool>_wait_seconds", "pool" => name)`, `name` being what the
//! builder's `name` setting says, or [`DEFAULT_NAME`] (`"default"`) without one. The sample is
//! recorded through the recorder installed *when the wait ends* (a lookup by name and label
//! each time: the slow path only), so a pool built before the application installed its
//! recorder still records. Give the pool the name its exporter uses
//! (`slotpool::metrics::spawn_exporter`'s), so that the histogram and the pool's counters
//! share their label.
//!
//! This module owns the timing of a wait and where its length goes; each pool decides when
//! its callers start and stop waiting, and counts the waits itself.

use std::borrow::Cow;
use std::time::Duration;

use crate::pool::reap::nanos;
use crate::sync::Counter;

/// The `pool` label of a pool built without a name: its wait histogram is still recorded,
/// under this label (pools of one kind left unnamed share one series).
pub(crate) const DEFAULT_NAME: &str = "default";

/// Takes the waits a [`WaitClock`] times.
pub(crate) trait WaitSink {
    /// Adds one finished wait that lasted `waited`.
    fn add(&self, waited: Duration);

    /// Ends a wait that started at `start` (on `clock`): one clock read, then [`WaitSink::add`].
    fn end(&self, clock: &quanta::Clock, start: quanta::Instant) {
        self.add(clock.now().saturating_duration_since(start));
    }
}

/// A pool's wait total and its histogram's name and label. See the
/// [module documentation](self).
pub(crate) struct WaitTotal {
    /// Nanoseconds waited, in all (cold path; striped, see `crate::sync::Counter`).
    nanos: Counter,
    /// The histogram each wait is recorded in.
    #[cfg(feature = "metrics")]
    histogram: WaitHistogram,
}

impl WaitTotal {
    /// A zero total whose waits are recorded in histogram `histogram` (such as
    /// `slotpool_stream_wait_seconds`) labelled `pool = name`.
    pub(crate) fn new(histogram: &'static str, name: Cow<'static, str>) -> Self {
        #[cfg(not(feature = "metrics"))]
        let _ = (histogram, name);
        WaitTotal {
            nanos: Counter::new(),
            #[cfg(feature = "metrics")]
            histogram: WaitHistogram {
                name: histogram,
                pool: label(name),
            },
        }
    }

    /// The nanoseconds waited so far (a snapshot).
    pub(crate) fn get(&self) -> u64 {
        self.nanos.get()
    }

    /// The time waited so far (a snapshot).
    pub(crate) fn time(&self) -> Duration {
        Duration::from_nanos(self.get())
    }
}

impl WaitSink for WaitTotal {
    fn add(&self, waited: Duration) {
        self.nanos.add(nanos(waited));
        #[cfg(feature = "metrics")]
        self.histogram.record(waited);
    }
}

impl std::fmt::Debug for WaitTotal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WaitTotal")
            .field("nanos", &self.get())
            .finish_non_exhaustive()
    }
}

/// A histogram's name and `pool` label, looked up at each record (see the module docs for
/// why not a handle).
#[cfg(feature = "metrics")]
struct WaitHistogram {
    name: &'static str,
    /// Shared, so that each record clones a pointer, not the text.
    pool: metrics::SharedString,
}

#[cfg(feature = "metrics")]
impl WaitHistogram {
    fn record(&self, waited: Duration) {
        metrics::histogram!(self.name, "pool" => self.pool.clone()).record(waited.as_secs_f64());
    }
}

/// A label value that clones without copying its text.
#[cfg(feature = "metrics")]
pub(crate) fn label(name: Cow<'static, str>) -> metrics::SharedString {
    match name {
        Cow::Borrowed(name) => metrics::SharedString::const_str(name),
        Cow::Owned(name) => metrics::SharedString::from_shared(std::sync::Arc::<str>::from(name)),
    }
}

/// Times one caller's wait into a [`WaitSink`]: from [`WaitClock::start`] (the first time the
/// caller finds it must wait) to the drop (served, timed out or cancelled). A caller that
/// never starts it reads no clock and adds nothing.
pub(crate) struct WaitClock<'a, S: WaitSink + ?Sized = WaitTotal> {
    clock: &'a quanta::Clock,
    sink: &'a S,
    start: Option<quanta::Instant>,
}

impl<'a, S: WaitSink + ?Sized> WaitClock<'a, S> {
    /// Not started.
    pub(crate) fn new(clock: &'a quanta::Clock, sink: &'a S) -> Self {
        WaitClock {
            clock,
            sink,
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

impl<S: WaitSink + ?Sized> Drop for WaitClock<'_, S> {
    fn drop(&mut self) {
        if let Some(start) = self.start {
            self.sink.end(self.clock, start);
        }
    }
}

#[cfg(all(test, not(any(slotpool_loom, slotpool_shuttle))))]
mod tests {
    use super::*;

    #[test]
    fn a_clock_never_started_reads_nothing_and_adds_nothing() {
        let (clock, mock) = quanta::Clock::mock();
        let total = WaitTotal::new("slotpool_test_wait_seconds", Cow::Borrowed("t"));
        {
            let clock = WaitClock::new(&clock, &total);
            mock.increment(Duration::from_millis(5));
            assert!(!clock.waited());
        }
        assert_eq!(total.time(), Duration::ZERO);
    }

    #[test]
    fn a_started_clock_adds_the_time_from_its_first_start_to_its_drop() {
        let (clock, mock) = quanta::Clock::mock();
        let total = WaitTotal::new("slotpool_test_wait_seconds", Cow::Borrowed("t"));
        for _ in 0..2 {
            let mut wait = WaitClock::new(&clock, &total);
            wait.start();
            mock.increment(Duration::from_millis(3));
            wait.start(); // a second start keeps the first instant
            mock.increment(Duration::from_millis(4));
        }
        assert_eq!(total.time(), Duration::from_millis(14));
    }
}
