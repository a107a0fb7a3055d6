//! What a managed pool reports: [`Status`] (deadpool's gauges, by their names) and [`Stats`]
//! (those gauges and every counter), and the counters behind them.

use std::borrow::Cow;

use crate::pool::wait::WaitTotal;
use crate::sync::Counter;

/// The pool's gauges now (a snapshot; deadpool's `Status`, field for field).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Status {
    /// The most objects that may exist: `max_size` as built or last set by
    /// [`Pool::resize`](super::Pool::resize); kept after `close` (deadpool's `close` resizes
    /// to 0, so its status reports 0 then).
    pub max_size: usize,
    /// Objects that exist: idle, in use, being created, or being closed (an object the pool
    /// dropped counts until its `detach` and its destructor are done).
    pub size: usize,
    /// Idle objects.
    pub available: usize,
    /// Objects in use (or being created).
    pub in_use: usize,
    /// Callers waiting for an object.
    pub waiting: usize,
}

/// A snapshot of a managed pool's gauges and counters. Counters only grow.
///
/// Accounting: every object created is, at any moment, idle, in use, or gone, and each gone
/// object is counted once in exactly one of `discarded`, `broken`, `expired`, `reaped`,
/// `surplus`, `retained_out` or `detached`:
/// `created == size + discarded + broken + expired + reaped + surplus + retained_out +
/// detached`
/// once nothing is being created or closed (objects being created count in `size` before
/// `created`; an object being closed counts in `size` until its close ends, and in its
/// counter from just before).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// The gauges.
    pub status: Status,
    /// `get`s started (bb8's `get_started`): every `get`, `try_get`, `get_timeout` and
    /// `get_timeouts`, counted once it waits, creates an object or recycles one that does not
    /// answer at once, or when it ends, whichever comes first. `gets - gets_direct - gets_waited - gets_timed_out` are the `get`s under
    /// way or that ended otherwise (failed, or cancelled by their caller).
    pub gets: u64,
    /// `get`s that handed out an object without waiting for another caller (bb8's
    /// `get_direct`): an idle one, or a new one.
    pub gets_direct: u64,
    /// `get`s that handed out an object after waiting for another caller's object or room
    /// (bb8's `get_waited`).
    pub gets_waited: u64,
    /// `get`s that failed with [`PoolError::Timeout`](super::PoolError::Timeout), in any step
    /// (bb8's `get_timed_out`).
    pub gets_timed_out: u64,
    /// Objects taken from their slots by `get`s: new ones, and idle ones (including those a
    /// recycle then rejected, or found past their lifetime). Not the objects the pool creates
    /// to keep idle (`min_idle`, `build_eager`) nor those handed in with
    /// [`Pool::add`](super::Pool::add).
    pub checkouts: u64,
    /// `get`s that had to wait, whatever came of it (served, timed out, closed, cancelled).
    pub waits: u64,
    /// The time those `get`s spent waiting, in all (bb8's `get_wait_time`; the mean wait is
    /// `wait_time / waits`), on the pool's clock: from the failed try to an object or room,
    /// a deadline, or the caller giving up. Only a caller that waits reads the clock. With the
    /// `metrics` feature each wait is also a sample of the histogram
    /// `slotpool_managed_wait_seconds`, labelled with the pool's
    /// [`name`](super::PoolBuilder::name).
    pub wait_time: std::time::Duration,
    /// Objects created (including those finished off a cancelled caller, by `min_idle`, and
    /// those handed in with [`Pool::add`](super::Pool::add); not
    /// [`Pool::dedicated`](super::Pool::dedicated) ones, which the pool never holds).
    pub created: u64,
    /// Creations finished on the pool's own task after their caller stopped waiting.
    pub created_off_caller: u64,
    /// Creations that failed: the manager's errors, create timeouts, `post_create`
    /// rejections, panics in either.
    pub create_failures: u64,
    /// Idle objects recycled and handed out.
    pub recycled: u64,
    /// Objects dropped because recycling rejected them (the manager's or a hook's `Err`, a
    /// recycle timeout, a panic, or a caller cancelled during the recycle; bb8's
    /// `connections_closed_invalid`).
    pub discarded: u64,
    /// Objects dropped as they came back because
    /// [`Manager::has_broken`](super::Manager::has_broken) said so (or panicked; bb8's
    /// `connections_closed_broken`).
    pub broken: u64,
    /// Objects dropped for their age (`max_lifetime`; bb8's
    /// `connections_closed_max_lifetime`).
    pub expired: u64,
    /// Idle objects dropped by the reaper (`idle_timeout`; bb8's
    /// `connections_closed_idle_timeout`).
    pub reaped: u64,
    /// Objects dropped because the pool was over its size (shrunk or closed).
    pub surplus: u64,
    /// Idle objects dropped by [`Pool::retain`](super::Pool::retain).
    pub retained_out: u64,
    /// Objects taken out of the pool with [`Object::take`](super::Object::take) or
    /// [`Pool::retain_and_take`](super::Pool::retain_and_take).
    pub detached: u64,
    /// Panics of user code caught by the pool.
    pub panics: u64,
    /// Checkouts reported while held past the [`held_too_long`](super::PoolBuilder::held_too_long)
    /// threshold (0 with the detection off).
    pub held_too_long: u64,
    /// How long objects were held, in all, while the held-too-long detection is on (zero
    /// with it off: a return then reads no clock). With the `metrics` feature each hold is
    /// also a sample of the histogram `slotpool_managed_hold_seconds`.
    pub hold_time: std::time::Duration,
    /// Times a creation was held back because creations are paused after failures (the
    /// [`CreateBackoff`](super::CreateBackoff)): a `get` that then waited for the pause or
    /// failed with [`PoolError::Unavailable`](super::PoolError::Unavailable), or a `min_idle`
    /// top-up that stopped.
    pub paused: u64,
}

/// The pool's state by bb8's names and shape (bb8's `State`, from [`Pool::state`]): a port
/// from bb8 reads it unchanged. [`Stats`] has the same numbers and more.
///
/// [`Pool::state`]: super::Pool::state
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct State {
    /// Objects that exist ([`Status::size`]).
    pub connections: u32,
    /// Idle objects ([`Status::available`]).
    pub idle_connections: u32,
    /// The counters, by bb8's names.
    pub statistics: Statistics,
}

/// The pool's counters by bb8's names (bb8's `Statistics`; see [`Stats`] for each).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Statistics {
    /// [`Stats::gets`].
    pub get_started: u64,
    /// [`Stats::gets_direct`].
    pub get_direct: u64,
    /// [`Stats::gets_waited`].
    pub get_waited: u64,
    /// [`Stats::gets_timed_out`].
    pub get_timed_out: u64,
    /// [`Stats::wait_time`].
    pub get_wait_time: std::time::Duration,
    /// [`Stats::created`].
    pub connections_created: u64,
    /// [`Stats::broken`].
    pub connections_closed_broken: u64,
    /// [`Stats::discarded`].
    pub connections_closed_invalid: u64,
    /// [`Stats::expired`].
    pub connections_closed_max_lifetime: u64,
    /// [`Stats::reaped`].
    pub connections_closed_idle_timeout: u64,
}

impl Statistics {
    /// `get`s started and not yet ended as direct, waited or timed out (bb8's
    /// `pending_gets`): those under way, and those that failed otherwise or were cancelled.
    pub fn pending_gets(&self) -> u64 {
        self.get_started.saturating_sub(self.completed_gets())
    }

    /// `get`s that ended direct, waited or timed out (bb8's `completed_gets`).
    pub fn completed_gets(&self) -> u64 {
        self.get_direct + self.get_waited + self.get_timed_out
    }
}

impl From<Stats> for State {
    fn from(stats: Stats) -> Self {
        let clamp = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        State {
            connections: clamp(stats.status.size),
            idle_connections: clamp(stats.status.available),
            statistics: Statistics {
                get_started: stats.gets,
                get_direct: stats.gets_direct,
                get_waited: stats.gets_waited,
                get_timed_out: stats.gets_timed_out,
                get_wait_time: stats.wait_time,
                connections_created: stats.created,
                connections_closed_broken: stats.broken,
                connections_closed_invalid: stats.discarded,
                connections_closed_max_lifetime: stats.expired,
                connections_closed_idle_timeout: stats.reaped,
            },
        }
    }
}

/// The counters (cold paths; striped, see `crate::sync::Counter`).
pub(super) struct Counters {
    /// `get`s served without waiting or creating (the one count on the fast path).
    pub(super) gets_fast: Counter,
    /// `get`s counted as started when they first waited or created, or failed first.
    pub(super) gets_slow: Counter,
    /// `get`s served without waiting after they created (or waited out a pause).
    pub(super) gets_slow_direct: Counter,
    pub(super) gets_waited: Counter,
    pub(super) gets_timed_out: Counter,
    pub(super) waits: Counter,
    /// The time `get`s waited, and the `slotpool_managed_wait_seconds` histogram.
    pub(super) wait_nanos: WaitTotal,
    pub(super) created: Counter,
    pub(super) created_off_caller: Counter,
    pub(super) create_failures: Counter,
    pub(super) recycled: Counter,
    pub(super) discarded: Counter,
    pub(super) broken: Counter,
    pub(super) expired: Counter,
    pub(super) reaped: Counter,
    pub(super) surplus: Counter,
    pub(super) retained_out: Counter,
    pub(super) detached: Counter,
    pub(super) panics: Counter,
    pub(super) paused: Counter,
}

impl Counters {
    /// Zero counters of the pool called `name` (the wait histogram's label).
    pub(super) fn new(name: Cow<'static, str>) -> Self {
        Counters {
            gets_fast: Counter::new(),
            gets_slow: Counter::new(),
            gets_slow_direct: Counter::new(),
            gets_waited: Counter::new(),
            gets_timed_out: Counter::new(),
            waits: Counter::new(),
            wait_nanos: WaitTotal::new("slotpool_managed_wait_seconds", name),
            created: Counter::new(),
            created_off_caller: Counter::new(),
            create_failures: Counter::new(),
            recycled: Counter::new(),
            discarded: Counter::new(),
            broken: Counter::new(),
            expired: Counter::new(),
            reaped: Counter::new(),
            surplus: Counter::new(),
            retained_out: Counter::new(),
            detached: Counter::new(),
            panics: Counter::new(),
            paused: Counter::new(),
        }
    }
}

impl std::fmt::Debug for Counters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Counters").finish_non_exhaustive()
    }
}
