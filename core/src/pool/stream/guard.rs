//! The caller's side of an acquire: the [`Acquire`] future (its place in the wait queue lives
//! inside it) and the guards it yields, [`StreamGuard`] borrowing the pool and
//! [`OwnedStreamGuard`] holding it, each good for one request.

use std::fmt;
use std::future::Future;
use std::mem::ManuallyDrop;
use std::pin::Pin;
use std::ptr::NonNull;
use std::task::{Context, Poll};

use super::{send_on, RequestError, Shared, StreamConnector, StreamPool};
use crate::error::AcquireError;
use crate::pool::wait::WaitSink;
use crate::protocol::gate::WaitState;
use crate::protocol::slots::{Reservation, Windows};
use crate::sync::owned_stripe;
use crate::sync::Arc;

/// Future of [`StreamPool::acquire`]. `!Unpin`: its place in the wait queue lives inside it.
#[must_use = "futures do nothing unless polled"]
pub struct Acquire<'a, C: StreamConnector> {
    pub(super) pool: &'a StreamPool<C>,
    /// Structurally pinned: never moved out of the future.
    pub(super) wait: WaitState<'a>,
    /// When this future first found no room, on the pool's clock; `None` until then (an
    /// acquire that never waits reads no clock). INVARIANT: `Some` only while `wait` is
    /// queued: the wait ends, and is added to the pool's wait time, when the future resolves
    /// or is dropped queued.
    pub(super) waiting_since: Option<quanta::Instant>,
}

impl<'a, C: StreamConnector> Future for Acquire<'a, C> {
    type Output = Result<StreamGuard<'a, C>, AcquireError>;

    /// Always inlined, so the uncontended case costs no call wherever the future is awaited.
    #[inline(always)]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // SAFETY: `wait` is structurally pinned: `poll_full` re-pins it and nothing moves it.
        let this = unsafe { self.get_unchecked_mut() };
        // The uncontended case, inlined and kept apart from the rest so that it needs no
        // spills: a future that is not queued joins the lowest stream with room (what
        // `poll_reserve` would try first; a join never claims, so there is nothing to start).
        // Such a future has not waited: one that returned `Pending` stays queued until a
        // poll (through `poll_full`) takes its notification, so no wait is counted here.
        if !this.wait.is_queued() {
            if let Some(reservation) = this.pool.shared.table.reserve_fast() {
                debug_assert!(
                    this.waiting_since.is_none(),
                    "a future that waited is queued"
                );
                return Poll::Ready(Ok(this.pool.guard(reservation)));
            }
        }
        this.poll_full(cx)
    }
}

impl<'a, C: StreamConnector> Acquire<'a, C> {
    /// Everything but the uncontended case: the full scan, waiting, handoffs, closing.
    /// `self` is pinned (it comes from `poll`).
    #[inline(never)]
    fn poll_full(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<StreamGuard<'a, C>, AcquireError>> {
        // SAFETY: `self` is the pinned future (see `poll`); `wait` is structurally pinned.
        let wait = unsafe { Pin::new_unchecked(&mut self.wait) };
        match self.pool.shared.table.poll_reserve_slow(wait, cx) {
            Poll::Ready(Ok(reservation)) => {
                self.end_wait();
                Poll::Ready(self.resolve(reservation))
            }
            Poll::Ready(Err(_closed)) => {
                self.end_wait();
                Poll::Ready(Err(AcquireError::Closed))
            }
            Poll::Pending => {
                if self.waiting_since.is_none() {
                    // The first poll that found no room: the wait starts (two clock reads in
                    // all, only for an acquire that waits).
                    let shared = &self.pool.shared;
                    self.waiting_since = Some(shared.clock.now());
                    shared.counters.waits.incr();
                }
                Poll::Pending
            }
        }
    }

    /// Turns the reservation this future resolved with into its output.
    #[inline]
    fn resolve(&self, reservation: Reservation) -> Result<StreamGuard<'a, C>, AcquireError> {
        self.pool
            .admit(reservation)
            .map_err(|retry_after| AcquireError::Unavailable { retry_after })
    }

    /// Ends this future's wait, if it waited: adds its length to the pool's wait time (and
    /// records it in the wait histogram).
    fn end_wait(&mut self) {
        if let Some(since) = self.waiting_since.take() {
            let shared = &self.pool.shared;
            shared.counters.wait_nanos.end(&shared.clock, since);
        }
    }

    /// The drop of a queued future: it gives its place up (and a unit handed to it), and its
    /// wait, cut short, is added to the pool's wait time.
    #[cold]
    fn give_up(&mut self) {
        // SAFETY: a pinned future is dropped in place; `wait` has not moved.
        let wait = unsafe { Pin::new_unchecked(&mut self.wait) };
        self.pool.shared.table.cancel_reserve(wait);
        self.end_wait();
    }
}

impl<C: StreamConnector> Drop for Acquire<'_, C> {
    /// An acquire that resolved, or never waited, is not queued: one check.
    #[inline]
    fn drop(&mut self) {
        if self.wait.is_queued() {
            self.give_up();
        } else {
            debug_assert!(
                self.waiting_since.is_none(),
                "a wait that ended is not queued"
            );
        }
    }
}

impl<C: StreamConnector> fmt::Debug for Acquire<'_, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Acquire")
            .field("wait", &self.wait)
            .field("waiting_since", &self.waiting_since)
            .finish()
    }
}

/// Room for one request on one stream. Send the request with [`StreamGuard::send`]; dropping
/// the guard unsent gives the room back at once.
#[must_use = "dropping the guard gives its room back at once"]
pub struct StreamGuard<'a, C: StreamConnector> {
    /// The pool's shared state (not the pool handle: one pointer less to follow on release).
    pub(super) shared: &'a Shared<C>,
    /// `None` once handed to a driver or released.
    pub(super) reservation: Option<Reservation>,
}

impl<C: StreamConnector> StreamGuard<'_, C> {
    /// The slot index of the stream this guard has room on (lower is older and busier).
    pub fn stream_index(&self) -> Option<usize> {
        self.reservation.map(|r| r.index())
    }

    /// Sends `request` on the guard's stream and waits for its response.
    ///
    /// Cancel-safety, by the await the future is dropped at:
    /// * while waiting for its stream to be published (a claimer's next step, a few spins or
    ///   yields): the room goes back at once and nothing is sent;
    /// * while waiting for the response, with the request still queued because its stream is
    ///   connecting: the request is never sent, and its room goes back as soon as the stream's
    ///   driver runs (the drop wakes it);
    /// * while waiting for the response, once the request was sent: the request is **not**
    ///   cancelled; its room stays taken until the response arrives (or the stream ends), and
    ///   the response is discarded and counted as late.
    ///
    /// Every call is counted in [`StreamStats`](super::StreamStats) as completed, failed or cancelled.
    ///
    /// # Errors
    /// See [`RequestError`]; each variant's [`reach`](RequestError::reach) says whether a retry
    /// is safe.
    pub async fn send(
        mut self,
        request: C::Request,
    ) -> Result<C::Response, RequestError<C::Error>> {
        send_on(self.shared, &mut self.reservation, request).await
    }

    /// Moves the guard's room into an owned guard on the same pool.
    pub(super) fn into_owned(self, shared: &Arc<Shared<C>>) -> OwnedStreamGuard<C> {
        // Not dropped: its room moves, and no drop of a guard is left on the owned path.
        let this = ManuallyDrop::new(self);
        OwnedStreamGuard {
            shared: NonNull::from(&**shared),
            reservation: this.reservation,
        }
    }
}

impl<C: StreamConnector> Drop for StreamGuard<'_, C> {
    #[inline]
    fn drop(&mut self) {
        // The guard's unit is its own until it hands it to a driver (and then this is `None`).
        if let Some(reservation) = self.reservation.take() {
            self.shared.table.release_held(reservation);
        }
    }
}

impl<C: StreamConnector> fmt::Debug for StreamGuard<'_, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StreamGuard")
            .field("reservation", &self.reservation)
            .finish()
    }
}

/// [`StreamGuard`] that keeps the pool's shared state alive instead of borrowing the pool, so
/// it is `'static` (from [`StreamPool::acquire_owned`]). It does not keep the pool running:
/// once the pool is dropped, its send fails as not sent.
///
/// It holds no reference count: the room it holds keeps the state alive (the pool's drop
/// leaves its reference to the release of the last such room), so taking and returning one
/// costs the slot's two locked instructions, as a borrowed guard does.
#[must_use = "dropping the guard gives its room back at once"]
pub struct OwnedStreamGuard<C: StreamConnector> {
    /// The pool's shared state. INVARIANT: alive while `reservation` is `Some` (its unit keeps
    /// it so; see `slots`, "Units that keep their table alive").
    shared: NonNull<Shared<C>>,
    /// `None` once handed to a driver or released.
    reservation: Option<Reservation>,
}

// SAFETY: the guard stands for an `Arc<Shared<C>>` (the state is `Send + Sync` for any
// connector) and a reservation, a plain value.
unsafe impl<C: StreamConnector> Send for OwnedStreamGuard<C> {}
// SAFETY: as above; `&self` only reads the reservation.
unsafe impl<C: StreamConnector> Sync for OwnedStreamGuard<C> {}

impl<C: StreamConnector> OwnedStreamGuard<C> {
    /// The slot index of the stream this guard has room on (lower is older and busier).
    pub fn stream_index(&self) -> Option<usize> {
        self.reservation.map(|r| r.index())
    }

    /// Sends `request` on the guard's stream and waits for its response; as
    /// [`StreamGuard::send`], cancel-safety included.
    ///
    /// # Errors
    /// See [`RequestError`].
    pub async fn send(
        mut self,
        request: C::Request,
    ) -> Result<C::Response, RequestError<C::Error>> {
        // A reference of the send's own: the unit goes to the stream's driver, and the wait
        // for the response outlives it. SAFETY: the unit held keeps the state alive (the
        // type's invariant; a guard that has sent is consumed).
        let shared = unsafe { counted(self.shared) };
        send_on(&shared, &mut self.reservation, request).await
    }
}

impl<C: StreamConnector> Drop for OwnedStreamGuard<C> {
    #[inline]
    fn drop(&mut self) {
        // As `StreamGuard`'s: the unit is the guard's own while it has it.
        if let Some(reservation) = self.reservation.take() {
            // SAFETY: the unit keeps the state alive until it is released (the type's
            // invariant), and nothing of it is used after the release.
            unsafe { release_owned(self.shared, reservation) };
        }
    }
}

/// Releases an owned guard's unit, the last use of `shared` (see `slots`, "Units that keep
/// their table alive"): inside this thread's release window, or, for a thread that has no
/// window of its own, holding a reference count for the release.
///
/// # Safety
/// `reservation` is held, it keeps `shared` alive, and the caller uses `shared` no more.
#[inline(always)]
unsafe fn release_owned<C: StreamConnector>(shared: NonNull<Shared<C>>, reservation: Reservation) {
    let state = shared.as_ptr();
    match owned_stripe() {
        Some(window) => {
            // SAFETY: the caller's contract; the windows and the table are the state's.
            let keep = unsafe {
                Windows::release_owned(
                    &raw const (*state).windows,
                    window,
                    &raw const (*state).table,
                    reservation,
                )
            };
            // After the window closed: this may free the state.
            drop(keep);
        }
        None => {
            // SAFETY: the unit keeps the state alive while the count is taken.
            let shared = unsafe { counted(shared) };
            drop(shared.table.release_owned(reservation));
        }
    }
}

/// A reference count of its own on the state an owned guard points to.
///
/// # Safety
/// The state is alive (the guard's unit keeps it so) while this runs.
#[inline]
unsafe fn counted<C: StreamConnector>(shared: NonNull<Shared<C>>) -> Arc<Shared<C>> {
    // SAFETY: the pointer came from an `Arc` of the state (`into_owned`), which the caller's
    // contract keeps alive.
    unsafe {
        Arc::increment_strong_count(shared.as_ptr());
        Arc::from_raw(shared.as_ptr())
    }
}

impl<C: StreamConnector> fmt::Debug for OwnedStreamGuard<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OwnedStreamGuard")
            .field("reservation", &self.reservation)
            .finish()
    }
}
