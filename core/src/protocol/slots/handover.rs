//! The hand-over of a reaped slot's unit from the reaper to the resource's owner.
//!
//! [`SlotTable::reap_idle_holding`](super::SlotTable::reap_idle_holding) retires an idle slot
//! to Draining with one unit of load, so the slot stays out of every claim while its resource
//! closes. That unit must be released once the resource is closed, by whoever learns last of
//! the two events: the reaper's retirement, and the owner's close. The owner may close at any
//! time (its resource failed, the pool stopped) and cannot wait for the reaper; the reaper
//! cannot wait for the owner. A [`Handover`] settles it with one word:
//!
//! * [`Handover::hold`] (the reaper, at most once per incarnation) parks the unit, unless the
//!   owner has let go already: then the reaper gets the unit back and releases it itself (the
//!   resource is closed, the slot may empty at once);
//! * [`Handover::let_go`] (the owner, once, after closing the resource) marks the incarnation
//!   closed and takes a parked unit, if any, for the owner to release.
//!
//! Whichever comes second releases: exactly one release, never before the close. The word is
//! `0` (serving), [`LET_GO`] or a parked reservation's raw word, which is odd and so never
//! either of the other two. The loom model `loom-tests/tests/handover.rs` races the two.

use std::fmt;
use std::num::NonZeroU64;

use super::Reservation;
use crate::sync::{AtomicU64, Ordering};

/// The owner has let go (an even word, so never a reservation's).
const LET_GO: u64 = 2;

/// The unit of a reaped slot, on its way from the reaper to the resource's owner (see the
/// module docs).
pub struct Handover {
    word: AtomicU64,
}

impl Handover {
    /// A resource still serving: nothing parked, not let go.
    pub fn new() -> Self {
        Handover {
            word: AtomicU64::new(0),
        }
    }

    /// The reaper's half: parks `unit` for the owner. Returns it back if the owner has let go
    /// already (the caller then releases it). Call at most once per incarnation.
    pub fn hold(&self, unit: Reservation) -> Option<Reservation> {
        // AcqRel: the owner that takes the unit sees it whole (Release); a reaper that finds
        // the owner gone sees its close (Acquire).
        match self
            .word
            .compare_exchange(0, unit.raw.get(), Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => None,
            Err(actual) => {
                debug_assert_eq!(actual, LET_GO, "a second unit parked for one incarnation");
                Some(unit)
            }
        }
    }

    /// The owner's half, once its resource is closed: returns the parked unit, if the reaper
    /// parked one, for the owner to release; a later [`hold`](Handover::hold) returns its unit
    /// to the reaper. Idempotent: a second call returns `None`.
    pub fn let_go(&self) -> Option<Reservation> {
        // AcqRel: publishes the close to a later `hold` (Release) and sees a parked unit
        // whole (Acquire).
        match self.word.swap(LET_GO, Ordering::AcqRel) {
            0 | LET_GO => None,
            raw => Some(Reservation {
                raw: NonZeroU64::new(raw).expect("a parked unit is never 0"),
            }),
        }
    }

    /// Whether the owner has let go.
    pub fn is_let_go(&self) -> bool {
        self.word.load(Ordering::Acquire) == LET_GO
    }
}

impl Default for Handover {
    fn default() -> Self {
        Handover::new()
    }
}

impl fmt::Debug for Handover {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match self.word.load(Ordering::Acquire) {
            0 => "serving",
            LET_GO => "let go",
            _ => "unit parked",
        };
        f.debug_tuple("Handover").field(&state).finish()
    }
}

#[cfg(all(test, not(any(slotpool_loom, slotpool_shuttle))))]
mod tests {
    use super::*;
    use crate::protocol::slots::{Capacity, SlotTable};

    fn unit() -> Reservation {
        let table = SlotTable::<()>::new(Capacity::Bounded(4), 1).unwrap();
        let unit = table.try_reserve().unwrap();
        assert!(table.mark_ready(unit.index(), unit.generation()));
        unit
    }

    #[test]
    fn a_unit_parked_before_the_close_goes_to_the_owner() {
        let handover = Handover::new();
        assert!(!handover.is_let_go());
        assert_eq!(format!("{handover:?}"), "Handover(\"serving\")");
        assert_eq!(handover.hold(unit()), None);
        assert!(!handover.is_let_go());
        assert_eq!(format!("{handover:?}"), "Handover(\"unit parked\")");
        assert_eq!(handover.let_go(), Some(unit()));
        assert_eq!(handover.let_go(), None, "taken once");
        assert!(handover.is_let_go());
        assert_eq!(format!("{handover:?}"), "Handover(\"let go\")");
    }

    #[test]
    fn a_unit_parked_after_the_close_goes_back_to_the_reaper() {
        let handover = Handover::new();
        assert_eq!(handover.let_go(), None);
        assert_eq!(handover.hold(unit()), Some(unit()));
        assert!(handover.is_let_go());
    }
}
