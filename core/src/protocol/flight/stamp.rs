//! Use stamps: one word that says when a value was last used, or that it is retired.
//!
//! The protocol is told on the type.

use std::fmt;

use crate::sync::{trace_transition, AtomicU64, Ordering};

/// The stamp word's value once retired; never a real time (that would be 584 years).
const RETIRED: u64 = u64::MAX;

/// The fraction of the idle bound within which a touch writes nothing: a stamp less than
/// `max_idle / TOUCH_SLACK` old is fresh enough as it stands.
///
/// This is what a hot acquire's stamp costs: one load, and a CAS only about once per
/// `max_idle / TOUCH_SLACK` of use, not on every acquire. The price is precision: a stamp may
/// say a value was last used up to `max_idle / TOUCH_SLACK` before its last use, so the
/// reaper may retire a value that has been idle for only `max_idle - max_idle / TOUCH_SLACK`
/// (with the default ten minutes: after 9 min 41.25 s of idleness at the earliest, never
/// later than 10 min). A bound below `TOUCH_SLACK` nanoseconds has no slack (every touch
/// writes, as before).
pub const TOUCH_SLACK: u64 = 32;

/// What [`UseStamp::touch`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Touch {
    /// Used within the idle bound; the stamp now says `now`.
    Fresh,
    /// Idle past the bound; the stamp was left as it was.
    Stale,
    /// Retired already.
    Retired,
}

/// Last use of a value, or `RETIRED`, in one atomic word.
///
/// A [`UseStamp`] is one `AtomicU64`: the time of last use (nanoseconds since the pool's base
/// instant) or `RETIRED`. Three operations race on it, and each is a single CAS, so exactly one
/// outcome wins:
///
/// * [`UseStamp::touch`] (an acquire): refresh the time if the value is fresh, fail if stale
///   or retired; a time recent enough ([`TOUCH_SLACK`]) is left as it is, so most touches are
///   a load;
/// * [`UseStamp::retire_if_idle`] (the reaper, or an acquire that found it stale): move a stale
///   time to `RETIRED`;
/// * [`UseStamp::retire`] (a release, a dead connection, stop): move anything to `RETIRED`.
///
/// So a reap and a concurrent hot acquire cannot both succeed: either the acquire refreshed
/// the stamp (and the reaper's CAS fails on the new value), or the reaper retired it (and the
/// acquire's CAS fails, sees `RETIRED` and rebuilds). Whoever moves the word to `RETIRED` is the
/// one party that frees the value's resources, which is what makes "capacity returned exactly
/// once" structural. Orderings are `AcqRel` on the CAS and `Acquire` on loads: the winner of
/// `RETIRED` must see every earlier toucher's writes, nothing more.
pub struct UseStamp {
    /// Nanoseconds since the owner's base instant of the last use, or `RETIRED`.
    /// INVARIANT: once `RETIRED`, never changes again; otherwise only grows.
    word: AtomicU64,
}

impl UseStamp {
    /// A stamp last used at `now` (nanoseconds).
    pub fn new(now: u64) -> Self {
        Self {
            word: AtomicU64::new(now.min(RETIRED - 1)),
        }
    }

    /// Refreshes the stamp to `now` if it was used within `max_idle` nanoseconds of `now`.
    /// A stamp within `max_idle / TOUCH_SLACK` of `now` (or later) is fresh and left as it is:
    /// no write (see [`TOUCH_SLACK`] for what that costs the reaper's precision).
    ///
    /// Skipping the write is safe against a racing retirement: a stamp this call saw fresh
    /// without writing can only be retired by a `retire_if_idle` whose `now` is more than
    /// `max_idle` past the stamp, that is at least `max_idle - max_idle / TOUCH_SLACK` after
    /// this use; and an unconditional `retire` wins over a touch anyway.
    #[inline]
    pub fn touch(&self, now: u64, max_idle: u64) -> Touch {
        let slack = max_idle / TOUCH_SLACK;
        let mut seen = self.word.load(Ordering::Acquire);
        loop {
            if seen == RETIRED {
                return Touch::Retired;
            }
            let idle = now.saturating_sub(seen);
            if idle > max_idle {
                return Touch::Stale;
            }
            if idle <= slack {
                // Within the slack, the stamp stands (see `TOUCH_SLACK`); in particular:
                // Someone stamped this instant (or later) already: nothing to write.
                return Touch::Fresh;
            }
            // Never `RETIRED` itself (a time of 584 years, one nanosecond or tick short).
            let stamp = now.min(RETIRED - 1);
            match self
                .word
                .compare_exchange_weak(seen, stamp, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return Touch::Fresh,
                // Another toucher refreshed it, or a retirer won: decide again on its value.
                Err(actual) => seen = actual,
            }
        }
    }

    /// Moves the stamp to `RETIRED`. Returns whether this call did it (exactly one caller
    /// ever gets `true`, and that caller frees the value's resources).
    pub fn retire(&self) -> bool {
        let won = self.word.swap(RETIRED, Ordering::AcqRel) != RETIRED;
        trace_transition!("stamp: retire (won: {})", won);
        won
    }

    /// Retires the stamp only if it is idle past `max_idle` at `now`. Returns whether this
    /// call retired it; `false` when it was fresh (a concurrent touch wins) or retired already.
    pub fn retire_if_idle(&self, now: u64, max_idle: u64) -> bool {
        let mut seen = self.word.load(Ordering::Acquire);
        loop {
            if seen == RETIRED || now.saturating_sub(seen) <= max_idle {
                return false;
            }
            match self.word.compare_exchange_weak(
                seen,
                RETIRED,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    trace_transition!("stamp: retired idle");
                    return true;
                }
                // A touch refreshed it (then it is fresh) or a retirer won: decide again.
                Err(actual) => seen = actual,
            }
        }
    }

    /// Whether the stamp is retired.
    #[inline]
    pub fn is_retired(&self) -> bool {
        self.word.load(Ordering::Acquire) == RETIRED
    }

    /// The last use in nanoseconds, or `None` once retired.
    pub fn last_used(&self) -> Option<u64> {
        match self.word.load(Ordering::Acquire) {
            RETIRED => None,
            at => Some(at),
        }
    }
}

impl fmt::Debug for UseStamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.last_used() {
            Some(at) => f.debug_tuple("UseStamp").field(&at).finish(),
            None => f.write_str("UseStamp(retired)"),
        }
    }
}

#[cfg(all(test, not(slotpool_loom)))]
mod tests {
    use super::*;

    /// A touch at the last representable time writes one short of `RETIRED`: the value stays
    /// usable (and retirable once, by its retirer), never retired by a touch.
    #[test]
    fn a_touch_at_the_end_of_time_never_writes_retired() {
        let stamp = UseStamp::new(0);
        assert_eq!(stamp.touch(u64::MAX, u64::MAX), Touch::Fresh);
        assert_eq!(stamp.last_used(), Some(u64::MAX - 1));
        assert!(!stamp.is_retired());
        assert_eq!(
            stamp.touch(u64::MAX, u64::MAX),
            Touch::Fresh,
            "fresh, no write"
        );
        assert_eq!(stamp.last_used(), Some(u64::MAX - 1));
        assert!(stamp.retire(), "its retirer still wins once");
        assert_eq!(stamp.touch(u64::MAX, u64::MAX), Touch::Retired);
    }
}
