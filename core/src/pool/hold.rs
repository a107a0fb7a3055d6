//! Held-too-long detection, for the pools whose callers hold an object alone (the managed
//! pool, the client pool): a checkout held past a threshold is reported once while it is
//! still held, with the call site of the `get` that took it and its age, and again when it
//! comes back (HikariCP's leak detection; deadpool, bb8 and asyncband have none).
//!
//! # What it costs
//!
//! Off (the default), nothing on the checkout path but one test of the pool's setting: no
//! clock read, no store. On, a checkout reads the clock and notes its stamp and its call site
//! in the slot's cell (two stores; `exclusive`, "Holder notes"), and a return swaps the note
//! out and reads the clock again to add the hold time to the pool's total (and, with the
//! `metrics` feature, to the `slotpool_<pool>_hold_seconds` histogram).
//!
//! # When a report comes
//!
//! The pool's watchdog pass ([`HoldWatch::report`]) reports every hold that began at least the
//! threshold ago: a `tracing` warning with the call site and the age, and one count in the
//! pool's `held_too_long`. The background reaper runs the pass at a quarter of the threshold
//! (or its reap interval, if shorter), so a hold is reported between one and one and a quarter
//! thresholds after its checkout; `Pool::reap` runs it too. A reported hold is reported again,
//! as an `info` event with its whole length, when it comes back.
//!
//! This module owns the threshold, the counts and the reports; the notes are the exclusive
//! table's.

use std::borrow::Cow;
use std::panic::Location;
use std::time::Duration;

use crate::pool::reap::nanos;
use crate::pool::wait::{WaitSink, WaitTotal};
use crate::protocol::exclusive::{ExclusiveSlots, Lease};
use crate::sync::Counter;

/// A pool's held-too-long watch: its threshold, the holds it reported and the time objects
/// were held. See the [module documentation](self).
pub(crate) struct HoldWatch {
    /// Nanoseconds a checkout may be held before it is reported.
    threshold: u64,
    /// The pool's kind, for the reports (`"managed"`, `"client"`).
    kind: &'static str,
    /// Holds reported while held.
    reported: Counter,
    /// The time objects were held, in all, and the hold histogram.
    held: WaitTotal,
}

impl HoldWatch {
    /// A watch that reports holds past `threshold`, for a pool of `kind` called `name` (the
    /// `pool` label of its histogram `slotpool_<kind>_hold_seconds`).
    pub(crate) fn new(
        threshold: Duration,
        kind: &'static str,
        histogram: &'static str,
        name: Cow<'static, str>,
    ) -> Self {
        HoldWatch {
            threshold: nanos(threshold),
            kind,
            reported: Counter::new(),
            held: WaitTotal::new(histogram, name),
        }
    }

    /// How often the background reaper must run for reports to come within a quarter of the
    /// threshold late.
    pub(crate) fn scan_every(&self) -> Duration {
        Duration::from_nanos((self.threshold / 4).max(1_000_000))
    }

    /// A holder took `lease`'s value at the stamp `now`, from a `get` called at `site`.
    #[cold]
    #[inline(never)]
    pub(crate) fn noted<T>(
        &self,
        slots: &ExclusiveSlots<T>,
        lease: &Lease,
        now: u64,
        site: &'static Location<'static>,
    ) {
        slots.note_hold(lease, now, tag_of(site));
    }

    /// `lease`'s holder gives its value back at the stamp `now`: the hold time is added to the
    /// total, and a reported hold is reported again with its length.
    #[cold]
    #[inline(never)]
    pub(crate) fn ended<T>(&self, slots: &ExclusiveSlots<T>, slot: usize, now: u64) {
        let Some(note) = slots.end_hold_at(slot) else {
            return;
        };
        let held = Duration::from_nanos(now.saturating_sub(note.since));
        self.held.add(held);
        if note.reported {
            let site = site_of(note.tag);
            tracing::info!(
                pool = self.kind,
                slot,
                held_for = ?held,
                at = %site,
                "a checkout reported as held too long came back"
            );
        }
    }

    /// The watchdog pass at the stamp `now`: reports every hold older than the threshold not
    /// reported yet. Returns how many it reported.
    pub(crate) fn report<T>(&self, slots: &ExclusiveSlots<T>, now: u64) -> usize {
        let Some(before) = now.checked_sub(self.threshold) else {
            return 0;
        };
        let mut reported = 0;
        slots.report_holds(before, |slot, since, tag| {
            reported += 1;
            self.reported.incr();
            let site = site_of(tag);
            tracing::warn!(
                pool = self.kind,
                slot,
                held_for = ?Duration::from_nanos(now.saturating_sub(since)),
                at = %site,
                "a checkout is held too long (taken by the `get` at {site}, still not back)"
            );
        });
        reported
    }

    /// Holds reported while held.
    pub(crate) fn reported(&self) -> u64 {
        self.reported.get()
    }

    /// The time objects were held, in all (while the watch was on).
    pub(crate) fn held(&self) -> Duration {
        self.held.time()
    }
}

impl std::fmt::Debug for HoldWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HoldWatch")
            .field("threshold", &Duration::from_nanos(self.threshold))
            .finish_non_exhaustive()
    }
}

/// A call site as a note's tag.
fn tag_of(site: &'static Location<'static>) -> usize {
    std::ptr::from_ref(site) as usize
}

/// The call site a note's tag stands for.
fn site_of(tag: usize) -> &'static Location<'static> {
    // SAFETY: every tag a `HoldWatch` reads was written by `HoldWatch::noted` from a
    // `&'static Location<'static>` (`tag_of`): the notes of a table are written by its pool
    // alone, and a pool with a watch notes nothing else. The location lives for the program.
    unsafe { &*(tag as *const Location<'static>) }
}
