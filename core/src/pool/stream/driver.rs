//! The driver: the task that owns one stream incarnation. It connects through the user's
//! [`StreamConnector`], forwards queued requests, hands each request it sends and each response
//! it receives to its [`Routing`] (by id or in order: `routing.rs`), which releases each
//! request's unit of depth when its response arrives, and fails whatever is left when the
//! stream ends.
//!
//! # User code and its failures
//!
//! The driver is where the pool runs the user's code for a stream: the connector's `connect`
//! (the call and each poll of its future), the inbound half (each `poll_next` and its drop),
//! and the request and response id accessors. Each is called inside a guard
//! ([`crate::panic`]): a panic becomes a [`Refusal::Panicked`] that fails exactly the callers
//! it touched (not sent while connecting or still queued, maybe applied once sent), the
//! panicked future or stream is never polled again, and its destructor runs inside a guard
//! too. As a last resort the whole task runs inside a guard as well, and a driver that is
//! dropped without having finished (its task dropped by the runtime, or a panic in code the
//! guards above do not cover) fails and releases whatever it still holds from its `Drop`: no
//! unit of depth is ever lost with a driver.
//!
//! # Hung peers
//!
//! The driver keeps the stream's two deadlines on tokio's timer (`deadline.rs`): while
//! connecting it polls an open timer fixed at the stream's start beside the connect, and while
//! serving a [`StallWatch`] moves a stall timer with the stream's activity; either fails the
//! stream when it fires, whatever the reaper's interval. The reaper's pass (in the parent
//! module) is the backstop: it sets a bit in the incarnation's `stop_reasons` and wakes the
//! driver, which fails the stream the same way: `OPEN_TIMED_OUT` while connecting (decided
//! against the driver's own `OPENED` bit by whichever is set first), `STALLED` while serving.
//! For the backstop's stall check the driver publishes its `activity` once per wake-up that
//! changed it.
//!
//! # Cancelled requests while connecting
//!
//! While the stream connects the driver takes queued requests off its channel into `queued`
//! and registers to hear when each caller gives up (`oneshot::Sender::poll_closed`). A request
//! whose caller is gone before the stream opened was never sent, so its unit goes back when the
//! driver next runs (the caller's drop wakes it): callers that give up on a hung connect do not
//! fill the stream and make the pool open more. (A caller that acquires again before the driver
//! ran may still find its old unit taken: at most one unit per caller, not one per attempt.)

use std::collections::VecDeque;
use std::future::{poll_fn, Future};
use std::pin::{pin, Pin};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use futures_core::Stream;

use super::deadline::StallWatch;
use super::routing::Routing;
use super::{Incarnation, Outbound, Pending, RequestError, Shared, Stop, StreamConnector, BUSY};
use crate::error::Reach;
use crate::panic::{self, CatchUnwind, Panic};
use crate::protocol::slots::{Generation, Reservation};
use crate::sync::{Arc, Ordering};

/// Owns one stream incarnation: connects, forwards, routes, and fails what is left at the end.
pub(super) struct Driver<C: StreamConnector> {
    shared: Arc<Shared<C>>,
    index: usize,
    generation: Generation,
    incarnation: Arc<Incarnation<C>>,
    requests: mpsc::UnboundedReceiver<Pending<C>>,
    /// Requests taken off `requests` while the stream connects, in arrival order; each holds
    /// its unit of load. Empty once the stream is open.
    queued: VecDeque<Pending<C>>,
    /// Requests sent and awaiting a response, and how responses find them; each holds its
    /// unit of load.
    routing: Routing<C>,
    /// This connect is the circuit breaker's half-open probe.
    probe: bool,
    /// What the driver last stored in the incarnation's `activity` (see there).
    activity: u64,
    /// When the stream must have opened, on tokio's clock (`deadline.rs`); `None`: no timer.
    open_deadline: Option<Instant>,
    /// The stall deadline, when the stream has a `stall_timeout` and the runtime timers.
    stall: Option<StallWatch>,
    /// Set once [`Driver::finish`] ran: everything held has been failed and released.
    finished: bool,
}

/// Most responses and requests one driver poll handles before it yields to the other tasks on
/// its worker (a burst is at most a few streams' depth, so this rarely binds).
const DRIVER_BATCH: usize = 256;

/// Why a stream stopped taking requests: what its callers are told. Kept in the incarnation
/// for callers whose request arrives after the driver stopped taking them.
pub(super) enum Refusal<E> {
    /// The connector returned an error.
    Connect(Arc<E>),
    /// User code panicked (the connector, or the inbound half).
    Panicked(Panic),
    /// The stream had not opened within `open_timeout`.
    OpenTimedOut(Duration),
    /// The peer ended or broke the stream (with its error, if any).
    Ended(Option<Arc<E>>),
    /// The stream was declared hung after `stall_timeout`.
    Stalled(Duration),
    /// The reaper retired the slot, or the pool is gone.
    Closed,
}

impl<E> Clone for Refusal<E> {
    fn clone(&self) -> Self {
        match self {
            Refusal::Connect(error) => Refusal::Connect(Arc::clone(error)),
            Refusal::Panicked(panic) => Refusal::Panicked(panic.clone()),
            Refusal::OpenTimedOut(timeout) => Refusal::OpenTimedOut(*timeout),
            Refusal::Ended(source) => Refusal::Ended(source.clone()),
            Refusal::Stalled(timeout) => Refusal::Stalled(*timeout),
            Refusal::Closed => Refusal::Closed,
        }
    }
}

impl<E: std::error::Error + 'static> Refusal<E> {
    /// The error for a request that got as far as `reach` (queued: `NotSent`, on the wire:
    /// `MaybeApplied`).
    pub(super) fn error(&self, reach: Reach) -> RequestError<E> {
        match self {
            Refusal::Connect(source) => RequestError::Connect {
                source: Arc::clone(source),
            },
            Refusal::Panicked(panic) => RequestError::Panicked {
                reach,
                panic: panic.clone(),
            },
            Refusal::OpenTimedOut(timeout) => RequestError::OpenTimeout { timeout: *timeout },
            Refusal::Ended(source) => RequestError::StreamEnded {
                reach,
                source: source.clone(),
            },
            Refusal::Stalled(timeout) => RequestError::Stalled {
                reach,
                timeout: *timeout,
            },
            Refusal::Closed => match reach {
                Reach::NotSent => RequestError::Closed,
                Reach::MaybeApplied => RequestError::StreamEnded {
                    reach,
                    source: None,
                },
            },
        }
    }
}

/// How the opening of a stream ended.
enum Opening<C: StreamConnector> {
    Opened(C::Inbound),
    Failed(C::Error),
    Panicked(Panic),
    TimedOut,
    /// The pool was dropped.
    Stopped,
}

/// How a stream's serving ended.
enum End<E> {
    /// The peer ended or broke the stream.
    Failed(Option<Arc<E>>),
    /// The inbound half panicked.
    Panicked(Panic),
    /// Requests were outstanding and nothing arrived for `stall_timeout` (the driver's timer
    /// said so, or the reaper's pass).
    Stalled,
    /// The reaper retired the slot, or the pool was dropped.
    Stopped,
}

/// A value of user code the driver owns (the connect future, the inbound half): dropped inside
/// a guard, wherever the driver lets go of it (its task dropped included), so a destructor
/// that panics is contained.
struct Contained<T>(Option<T>);

impl<T> Contained<T> {
    fn new(value: T) -> Self {
        Contained(Some(value))
    }

    /// Drops the value now, returning its destructor's panic, if any.
    fn dispose(mut self) -> Result<(), Panic> {
        match self.0.take() {
            Some(value) => panic::catch(move || drop(value)),
            None => Ok(()),
        }
    }
}

impl<T> Drop for Contained<T> {
    fn drop(&mut self) {
        if let Some(value) = self.0.take() {
            panic::drop_guarded(value);
        }
    }
}

impl<C: StreamConnector> Driver<C> {
    /// Spawns the driver of a freshly claimed incarnation on the pool's runtime.
    pub(super) fn spawn(
        shared: &Arc<Shared<C>>,
        reservation: Reservation,
        incarnation: Arc<Incarnation<C>>,
        requests: mpsc::UnboundedReceiver<Pending<C>>,
        probe: bool,
        open_deadline: Option<Instant>,
    ) {
        let shutdown = shared.shutdown.subscribe();
        let stall = shared
            .stall_timeout
            .filter(|_| shared.timers)
            .map(StallWatch::new);
        let driver = Driver {
            shared: Arc::clone(shared),
            index: reservation.index(),
            generation: reservation.generation(),
            incarnation,
            requests,
            queued: VecDeque::new(),
            routing: Routing::new(),
            probe,
            activity: 0,
            open_deadline,
            stall,
            finished: false,
        };
        let owner = Arc::clone(shared);
        shared.runtime.spawn(async move {
            // The last resort (see the module docs): a panic that escaped the guards around
            // user code ends this task here, and the driver's `Drop` fails what it held.
            if let Err(panic) = CatchUnwind::new(Box::pin(driver.run(shutdown))).await {
                owner.counters.panics.incr();
                panic::report("stream driver", &panic);
            }
        });
    }

    async fn run(mut self, mut shutdown: watch::Receiver<bool>) {
        let (out_tx, out_rx) = mpsc::unbounded_channel();
        let retirement = super::Retirement::default();
        let outbound = Outbound {
            rx: out_rx,
            stream_index: Some(self.index),
            retirement: retirement.clone(),
        };
        let Some(mut inbound) = self.open(outbound, &retirement, &mut shutdown).await else {
            return;
        };
        let end = match inbound.0.as_mut() {
            Some(stream) => self.serve(stream, &out_tx, shutdown).await,
            None => End::Stopped,
        };
        if matches!(end, End::Stalled) {
            // Before the halves go, so that what they hold for the stream can tell.
            retirement.set_hung();
        }
        drop(out_tx);
        if let Err(panic) = inbound.dispose() {
            self.shared.counters.panics.incr();
            panic::report("stream inbound (drop)", &panic);
        }
        let refusal = match end {
            End::Failed(source) => {
                self.shared.counters.stream_failures.incr();
                tracing::warn!(
                    slot = self.index,
                    error = ?source.as_ref().map(|e| e.to_string()),
                    "stream ended"
                );
                Refusal::Ended(source)
            }
            End::Panicked(panic) => {
                self.shared.counters.stream_failures.incr();
                self.shared.counters.panics.incr();
                panic::report("stream inbound", &panic);
                Refusal::Panicked(panic)
            }
            End::Stalled => {
                let timeout = self.shared.stall_timeout.unwrap_or_default();
                self.shared.counters.stream_failures.incr();
                self.shared.counters.stalls.incr();
                tracing::warn!(
                    slot = self.index,
                    outstanding = self.routing.len(),
                    ?timeout,
                    "stream stalled: nothing received while requests were outstanding"
                );
                Refusal::Stalled(timeout)
            }
            // Reaped (nothing in flight) or the pool is gone.
            End::Stopped => Refusal::Closed,
        };
        self.finish(refusal);
    }

    /// Connects, while taking queued requests off the channel and giving back the units of
    /// those whose callers give up. Returns the inbound half once the stream may serve (the
    /// slot is Ready and the queued requests are forwarded); on any other end it has failed
    /// the stream's callers and returns `None`.
    async fn open(
        &mut self,
        outbound: Outbound<C::Request>,
        retirement: &super::Retirement,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Option<Contained<C::Inbound>> {
        // The connect future borrows the connector: from a handle of its own, so that the
        // driver stays free to take queued requests while it runs.
        let shared = Arc::clone(&self.shared);
        let opening: Opening<C> = match panic::catch(|| shared.connector.connect(outbound)) {
            Ok(future) => {
                let mut connecting = Contained::new(CatchUnwind::new(Box::pin(future)));
                let incarnation = Arc::clone(&self.incarnation);
                let mut stopped = pin!(incarnation.stop.notified());
                let mut shutting_down = pin!(shutdown.wait_for(|stop| *stop));
                // Fixed at the stream's start, so a driver that first ran late still fails
                // its callers at the deadline.
                let mut open_timer = pin!(self.open_deadline.map(tokio::time::sleep_until));
                let opening = poll_fn(|cx| {
                    if incarnation.stop_reasons() & Stop::OPEN_TIMED_OUT != 0 {
                        return Poll::Ready(Opening::TimedOut);
                    }
                    if shutting_down.as_mut().poll(cx).is_ready() {
                        return Poll::Ready(Opening::Stopped);
                    }
                    // Only the open timeout notifies while connecting; the bit is set first.
                    if stopped.as_mut().poll(cx).is_ready() {
                        return Poll::Ready(Opening::TimedOut);
                    }
                    if let Some(connect) = connecting.0.as_mut() {
                        match Pin::new(connect).poll(cx) {
                            Poll::Ready(Ok(Ok(inbound))) => {
                                return Poll::Ready(Opening::Opened(inbound))
                            }
                            Poll::Ready(Ok(Err(error))) => {
                                return Poll::Ready(Opening::Failed(error))
                            }
                            Poll::Ready(Err(panic)) => {
                                return Poll::Ready(Opening::Panicked(panic))
                            }
                            Poll::Pending => {}
                        }
                    }
                    self.poll_queued(cx);
                    // Polled on every wake-up while connecting (a rare state): a poll that
                    // tokio's budget refuses wakes the task again.
                    if let Some(timer) = open_timer.as_mut().as_pin_mut() {
                        if timer.poll(cx).is_ready() {
                            return Poll::Ready(Opening::TimedOut);
                        }
                    }
                    Poll::Pending
                })
                .await;
                if matches!(opening, Opening::TimedOut) {
                    // Before the connect future goes (at the end of this block), so that what
                    // it holds for the stream can tell.
                    retirement.set_hung();
                }
                opening
            }
            Err(panic) => Opening::Panicked(panic),
        };
        match opening {
            Opening::Opened(inbound) => {
                let inbound = Contained::new(inbound);
                if !self.incarnation.opened() {
                    // The reaper's pass (the backstop) timed the opening out just before the
                    // connect finished.
                    retirement.set_hung();
                    if let Err(panic) = inbound.dispose() {
                        self.shared.counters.panics.incr();
                        panic::report("stream inbound (drop)", &panic);
                    }
                    self.open_timed_out();
                    return None;
                }
                self.shared.breaker.on_success();
                self.shared.table.mark_ready(self.index, self.generation);
                Some(inbound)
            }
            Opening::Failed(error) => {
                tracing::warn!(slot = self.index, %error, "stream connect failed");
                self.fail_to_open(Refusal::Connect(Arc::new(error)));
                None
            }
            Opening::Panicked(panic) => {
                self.shared.counters.panics.incr();
                panic::report("stream connector", &panic);
                self.fail_to_open(Refusal::Panicked(panic));
                None
            }
            Opening::TimedOut => {
                self.open_timed_out();
                None
            }
            Opening::Stopped => {
                self.finish(Refusal::Closed);
                None
            }
        }
    }

    /// The opening failed: counts it, tells the breaker, and fails every caller that joined.
    fn fail_to_open(&mut self, refusal: Refusal<C::Error>) {
        self.shared.counters.connect_failures.incr();
        let now = self.shared.now_nanos(self.shared.clock.now());
        self.shared.breaker.on_failure(now, self.probe);
        self.finish(refusal);
    }

    fn open_timed_out(&mut self) {
        let timeout = self.shared.open_timeout.unwrap_or_default();
        self.shared.counters.open_timeouts.incr();
        tracing::warn!(slot = self.index, ?timeout, "stream open timed out");
        self.fail_to_open(Refusal::OpenTimedOut(timeout));
    }

    /// While connecting: takes newly queued requests off the channel (registering this task
    /// to hear when their callers give up), and gives back the unit of every queued request
    /// whose caller is gone: nothing was sent, so its room is free at once.
    fn poll_queued(&mut self, cx: &mut Context<'_>) {
        let table = &self.shared.table;
        let mut gone = false;
        while let Poll::Ready(Some(mut pending)) = self.requests.poll_recv(cx) {
            if pending.reply.poll_closed(cx).is_ready() {
                table.release(pending.reservation);
            } else {
                self.queued.push_back(pending);
            }
        }
        self.queued.retain(|pending| {
            let closed = pending.reply.is_closed();
            if closed {
                table.release(pending.reservation);
                gone = true;
            }
            !closed
        });
        if gone {
            tracing::trace!(
                slot = self.index,
                "cancelled requests left the queue unsent"
            );
        }
    }

    /// Serves an open stream until it ends: routes responses, forwards requests, and watches
    /// its stall timer, the reaper's stop and the pool's shutdown.
    async fn serve(
        &mut self,
        inbound: &mut C::Inbound,
        out_tx: &mpsc::UnboundedSender<C::Request>,
        mut shutdown: watch::Receiver<bool>,
    ) -> End<C::Error> {
        // What queued while the stream connected goes first, in order; the buffer goes with
        // it (it is only for connecting).
        for pending in std::mem::take(&mut self.queued) {
            self.routing.forward(&self.shared, pending, out_tx);
        }
        self.note_activity(false);
        // Built once and kept across wake-ups. Polling a pending `Notified` (or the watch's)
        // takes its Notify's lock, so they are polled only to register this task's waker (the
        // first time, and if the waker ever changes); on every other wake-up two atomic loads
        // say whether either has fired (`stop_reasons`, and the watch's version via
        // `shutdown_probe`). No stop is missed: one that lands before the registering poll is
        // seen by it (`notify_one` leaves a permit; `wait_for` checks the value first), and one
        // that lands after it wakes this task, whose next poll sees the bits or the version.
        // While serving, only the reaper's stop and stall notify (the open timeout is over:
        // `OPENED` is set), so a fired `Notified` means one of their bits is set. The stall
        // timer follows the same rule (`StallWatch::stalled`): polled to register, otherwise
        // one load of its state.
        let incarnation = Arc::clone(&self.incarnation);
        let stopped = incarnation.stop.notified();
        let shutdown_probe = shutdown.clone();
        let shutting_down = shutdown.wait_for(|stop| *stop);
        tokio::pin!(stopped, shutting_down);
        // The stall timer (`deadline.rs`): made once, unset until the watch sets it.
        let mut stall_timer = pin!(self
            .stall
            .is_some()
            .then(|| tokio::time::sleep_until(Instant::now())));
        let mut registered: Option<std::task::Waker> = None;
        poll_fn(|cx| {
            let reasons = incarnation.stop_reasons();
            if reasons & Stop::STALLED != 0 {
                return Poll::Ready(End::Stalled);
            }
            if reasons & Stop::REAPED != 0 || shutdown_probe.has_changed().unwrap_or(true) {
                return Poll::Ready(End::Stopped);
            }
            let new_waker = !registered.as_ref().is_some_and(|w| w.will_wake(cx.waker()));
            if new_waker {
                if stopped.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(if incarnation.stop_reasons() & Stop::STALLED != 0 {
                        End::Stalled
                    } else {
                        End::Stopped
                    });
                }
                if shutting_down.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(End::Stopped);
                }
                registered = Some(cx.waker().clone());
            }
            if let Poll::Ready(end) = self.poll_serve(cx, inbound, out_tx) {
                return Poll::Ready(end);
            }
            // After the wake-up's work, so that what just arrived counts as activity.
            if let (Some(watch), Some(timer)) =
                (self.stall.as_mut(), stall_timer.as_mut().as_pin_mut())
            {
                if watch.stalled(timer, cx, new_waker) {
                    return Poll::Ready(End::Stalled);
                }
            }
            Poll::Pending
        })
        .await
    }

    /// One wake-up's work: routes every response that is ready, then forwards every request
    /// that is queued (a burst costs one poll, and the requests reach the outbound half
    /// together, so the transport can put them in one write). At most [`DRIVER_BATCH`] items
    /// per poll, then it yields so that other tasks on the worker run.
    ///
    /// It does not poll the inbound half again after forwarding: a response to what it just
    /// sent cannot be there yet over a network, and an in-process peer that answers at once
    /// wakes this task when it reads the request. Returning `Pending` is safe because both
    /// halves were last polled to `Pending` in this poll, which registered this task's waker.
    fn poll_serve(
        &mut self,
        cx: &mut Context<'_>,
        inbound: &mut C::Inbound,
        out: &mpsc::UnboundedSender<C::Request>,
    ) -> Poll<End<C::Error>> {
        let mut received = false;
        let mut budget = DRIVER_BATCH;
        while budget > 0 {
            // User code: a panic ends the stream, and it is never polled again.
            match panic::catch(|| Pin::new(&mut *inbound).poll_next(cx)) {
                Ok(Poll::Ready(Some(Ok(response)))) => {
                    budget -= 1;
                    received = true;
                    // The response's id accessor and destructor are user code too; `route`
                    // leaves the routing consistent wherever they panic.
                    match panic::catch(|| self.routing.route(&self.shared, self.index, response)) {
                        Ok(Ok(())) => {}
                        // An in-order peer answered more than it was asked.
                        Ok(Err(_out_of_step)) => return Poll::Ready(End::Failed(None)),
                        Err(panic) => return Poll::Ready(End::Panicked(panic)),
                    }
                }
                Ok(Poll::Ready(Some(Err(error)))) => {
                    return Poll::Ready(End::Failed(Some(Arc::new(error))))
                }
                Ok(Poll::Ready(None)) => return Poll::Ready(End::Failed(None)),
                Ok(Poll::Pending) => break,
                Err(panic) => return Poll::Ready(End::Panicked(panic)),
            }
        }
        let mut drained = false;
        while budget > 0 {
            match self.requests.poll_recv(cx) {
                Poll::Ready(Some(pending)) => {
                    budget -= 1;
                    self.routing.forward(&self.shared, pending, out);
                }
                // Every sender is gone: the cell moved on to a new incarnation.
                Poll::Ready(None) => return Poll::Ready(End::Stopped),
                Poll::Pending => {
                    drained = true;
                    break;
                }
            }
        }
        self.note_activity(received);
        if !drained {
            // Out of budget with more, perhaps, on either half: come back after the other
            // tasks on this worker.
            cx.waker().wake_by_ref();
        }
        Poll::Pending
    }

    /// After a wake-up's work: tells the stall watch (the driver's timer) and the reaper's
    /// backstop whether requests are outstanding and whether anything was `received`.
    fn note_activity(&mut self, received: bool) {
        if let Some(stall) = self.stall.as_mut() {
            stall.note(!self.routing.is_empty(), received);
        }
        self.publish_activity(received);
    }

    /// Publishes the view of this stream that the reaper's stall check (the backstop) reads:
    /// whether requests are outstanding, and a count bumped when anything was `received` (see
    /// [`Incarnation::activity`](super::Incarnation)); one store, and only on a change.
    fn publish_activity(&mut self, received: bool) {
        let busy = u64::from(!self.routing.is_empty());
        let mut progress = self.activity >> 1;
        if received {
            progress = progress.wrapping_add(1) & (u64::MAX >> 1);
        }
        let activity = (progress << 1) | (busy * BUSY);
        if activity != self.activity {
            self.activity = activity;
            self.incarnation.activity.store(activity, Ordering::Release);
        }
    }

    /// Fails and releases everything the driver holds, once: drains the slot first (so that
    /// no caller woken here can join this stream), then fails the requests on the wire as
    /// maybe applied and the queued ones as not sent, and stops taking requests.
    fn finish(&mut self, refusal: Refusal<C::Error>) {
        if self.finished {
            return;
        }
        self.finished = true;
        self.shared.table.begin_drain(self.index, self.generation);
        for (reply, reservation) in self.routing.drain() {
            self.shared.table.release(reservation);
            let _ = reply.send(Err(refusal.error(Reach::MaybeApplied)));
        }
        // Later callers learn why from the incarnation: stored before the channel closes.
        *self.incarnation.refusal.lock() = Some(refusal.clone());
        self.requests.close();
        let queued = std::mem::take(&mut self.queued);
        for pending in queued
            .into_iter()
            .chain(std::iter::from_fn(|| next_late(&mut self.requests)))
        {
            self.shared.table.release(pending.reservation);
            let _ = pending.reply.send(Err(refusal.error(Reach::NotSent)));
        }
        // Last: a reaper's unit keeps the slot from every claim until the stream's halves are
        // gone (every caller of `finish` has dropped them); with it released the slot empties.
        if let Some(unit) = self.incarnation.reaped_unit.let_go() {
            self.shared.table.release(unit);
        }
    }
}

/// After `close`: the next request still to come out of a driver's channel, until it is
/// disconnected. A send that got in before the close may not have pushed its request yet
/// (`Empty` while such a send is in progress, not `Disconnected`): it is waited for, or its
/// request would be left in the channel after the driver is gone, its unit of load never
/// released (its slot stuck Draining) and its caller, whose send succeeded, waiting for a reply
/// that never comes. No new send can start once the channel is closed, so this ends as soon as
/// those in progress have pushed.
fn next_late<T>(requests: &mut mpsc::UnboundedReceiver<T>) -> Option<T> {
    loop {
        match requests.try_recv() {
            Ok(pending) => return Some(pending),
            Err(mpsc::error::TryRecvError::Disconnected) => return None,
            Err(mpsc::error::TryRecvError::Empty) => std::thread::yield_now(),
        }
    }
}

impl<C: StreamConnector> Drop for Driver<C> {
    /// A driver dropped before it finished (its task dropped by the runtime, or ended by a
    /// panic the guards did not cover) still fails and releases what it holds.
    fn drop(&mut self) {
        self.finish(Refusal::Closed);
    }
}
