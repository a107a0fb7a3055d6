//! A stream's deadlines on tokio's timer: the open timeout, counted from the stream's start,
//! and the stall timeout, counted from the start of the current silence. The driver keeps
//! both in its own task, so each fires when its setting says (to the timer's millisecond),
//! whatever the reaper's interval; the acquire and send paths read no clock and touch no
//! timer for them.
//!
//! # The open deadline
//!
//! Fixed when the stream is started (`spin_up`, in the claiming caller's poll, which already
//! reads the pool's clock there): `started + open_timeout` on tokio's clock. The driver polls
//! a [`Sleep`] for it beside the connect, so the connect's callers fail at the deadline even
//! if the driver first ran later.
//!
//! # The stall deadline: a timer moved lazily
//!
//! A stream is silent while it has requests outstanding and receives nothing. The silence
//! starts when the stream last received something or last went busy, whichever is later; a
//! request sent while others are outstanding does not restart it (a peer that takes requests
//! and never answers is hung however many it takes). [`StallWatch::note`] keeps that start,
//! with one clock read per driver wake-up that received something or went busy, and none
//! while the stream is idle.
//!
//! Resetting a timer on every response would cost a timer-wheel update per wake-up; the watch
//! instead leaves the timer where it is while the deadline only moves later, and looks when it
//! fires: a timer whose deadline is at or past `start + stall_timeout` has seen the whole
//! silence (the stream is stalled), an earlier one is moved to that deadline. The timer
//! therefore fires at most once per `stall_timeout` of a busy stream and at most once more
//! after the stream went idle (ignored then). Between firings the driver only loads the
//! timer's state ([`Sleep::is_elapsed`]); it polls the timer, to register its waker, when it
//! sets the timer and when the task's waker changed, outside tokio's cooperative budget (a
//! poll refused by the budget would register nothing, and a silent stream would never be
//! woken).
//!
//! # Without the time driver
//!
//! A runtime built without tokio's time driver (`enable_time`) has no timers: the builder
//! finds out once ([`timers_available`]) and the drivers then arm none. The reaper's pass
//! checks both deadlines on the pool's clock as well (see the parent module), which is what
//! fires them there, and where the pool's time is driven by hand (`reap(now)` on a mock clock).
//!
//! This file owns the deadlines' arithmetic and the timer's handling; what a fired deadline
//! does to the stream is the driver's.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::{Instant, Sleep};

use crate::panic;

/// Whether the current runtime has tokio's time driver. Called once, by the builder, inside
/// the runtime the drivers will run on. A runtime without one panics when a timer is made
/// (tokio's backwards-compatible behaviour); the panic is caught here, and its message goes
/// through the panic hook once.
pub(super) fn timers_available() -> bool {
    panic::catch(|| drop(tokio::time::sleep(Duration::ZERO))).is_ok()
}

/// The open deadline of a stream started now, if it has one: `None` with no `open_timeout`,
/// no timers, or a deadline past the clock's range (which never comes).
pub(super) fn open_deadline(timeout: Option<Duration>, timers: bool) -> Option<Instant> {
    let timeout = timeout.filter(|_| timers)?;
    Instant::now().checked_add(timeout)
}

/// Polls `sleep` once outside tokio's cooperative budget, so that the poll registers this
/// task's waker even when the task's budget is spent.
fn poll_registering(sleep: Pin<&mut Sleep>, cx: &mut Context<'_>) -> Poll<()> {
    Pin::new(&mut tokio::task::unconstrained(sleep)).poll(cx)
}

/// The stall deadline of a serving stream (see the [module documentation](self)). Owned by
/// the driver; the timer it moves lives in the driver's `serve` future.
#[derive(Debug)]
pub(super) struct StallWatch {
    /// The `stall_timeout` setting.
    timeout: Duration,
    /// The start of the current silence: when the stream last received something or last went
    /// busy, whichever is later. INVARIANT: `None` exactly while nothing is outstanding.
    since: Option<Instant>,
    /// The timer holds a deadline this watch set and has not been seen to fire.
    /// INVARIANT: while `since` is `Some`, an armed timer's deadline is at most
    /// `since + timeout` (the start only moves later), so it never fires late.
    armed: bool,
}

impl StallWatch {
    pub(super) fn new(timeout: Duration) -> Self {
        StallWatch {
            timeout,
            since: None,
            armed: false,
        }
    }

    /// After a wake-up's work: `busy` says requests are outstanding now, `received` that
    /// something arrived in this wake-up. Reads the clock only when a silence starts.
    #[inline]
    pub(super) fn note(&mut self, busy: bool, received: bool) {
        if !busy {
            self.since = None;
        } else if received || self.since.is_none() {
            self.since = Some(Instant::now());
        }
    }

    /// Whether the current silence has lasted `stall_timeout`, as `timer` (this watch's)
    /// tells; arms or moves the timer as needed and registers this task's waker with it when
    /// it was set or `new_waker` says the task's waker changed.
    pub(super) fn stalled(
        &mut self,
        mut timer: Pin<&mut Sleep>,
        cx: &mut Context<'_>,
        new_waker: bool,
    ) -> bool {
        let fired = |timer: Pin<&mut Sleep>, cx: &mut Context<'_>, register: bool| {
            if register {
                poll_registering(timer, cx).is_ready()
            } else {
                timer.is_elapsed()
            }
        };
        let Some(deadline) = self.since.and_then(|since| since.checked_add(self.timeout)) else {
            // Idle (or a deadline that never comes): a timer left from a busy spell is
            // ignored when it fires; the next busy spell sets it again.
            if self.armed && fired(timer, cx, new_waker) {
                self.armed = false;
            }
            return false;
        };
        let mut register = new_waker;
        if !self.armed || timer.deadline() > deadline {
            timer.as_mut().reset(deadline);
            self.armed = true;
            register = true;
        }
        while fired(timer.as_mut(), cx, register) {
            if timer.deadline() >= deadline {
                return true;
            }
            // It fired for an earlier start: the silence is younger; wait for the rest.
            timer.as_mut().reset(deadline);
            register = true;
        }
        false
    }
}
