//! A counting limiter (semaphore) on the [`Gate`], for bounds that are not slots.
//!
//! # The protocol
//!
//! One `SeqCst` atomic counts the free permits. [`Limit::try_acquire`] is a CAS loop that
//! decrements it only while it is above zero, so the bound can never be overshot. A release is
//! a `fetch_add` followed by [`Gate::notify_one`], which is a single load when nobody waits:
//! **one RMW and no lock** on the common path (a tokio `Semaphore` release locks its waiter
//! queue every time).
//!
//! Waiting goes through the gate: the waiter enqueues and then retries `try_acquire`; since
//! both the enqueue and the release are `SeqCst` RMWs, one of them sees the other (see
//! [`crate::protocol::gate`]). A waiter that succeeds while permits remain and others still wait wakes
//! the next one, so a release of several permits (or a close of a lease) never leaves a waiter
//! asleep next to a free permit.
//!
//! Permits are RAII: [`Permit`] borrows the limit, [`OwnedPermit`] holds an `Arc` and can move
//! into a spawned closure (keyed admission moves it into blocking work so the slot stays taken
//! until the work ends, even if the caller stops waiting).
//!
//! This module owns the permit counter; it does not know what the permits stand for.

use std::fmt;
use std::future::Future;
use std::num::NonZeroU64;
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::error::{Closed, ConfigError, TryAcquireError};
use crate::protocol::gate::{Gate, WaitState};
use crate::sync::{Arc, AtomicUsize, CachePadded, Ordering};

/// The largest number of permits a [`Limit`] can hold.
pub const MAX_PERMITS: usize = usize::MAX >> 4;

/// A counting limiter: at most `capacity` permits are out at once.
pub struct Limit {
    /// Free permits. INVARIANT: `free + permits held == capacity`, and `free <= capacity`.
    free: CachePadded<AtomicUsize>,
    /// The configured bound (fixed).
    capacity: usize,
    gate: Gate,
}

impl Limit {
    /// Creates a limiter with `capacity` permits.
    ///
    /// # Errors
    /// [`ConfigError::Zero`] for zero, [`ConfigError::TooLarge`] above `MAX_PERMITS`.
    pub fn new(capacity: usize) -> Result<Self, ConfigError> {
        if capacity == 0 {
            return Err(ConfigError::Zero("capacity"));
        }
        if capacity > MAX_PERMITS {
            return Err(ConfigError::TooLarge {
                name: "capacity",
                value: capacity as u64,
                max: MAX_PERMITS as u64,
            });
        }
        Ok(Self {
            free: CachePadded::new(AtomicUsize::new(capacity)),
            capacity,
            gate: Gate::new(),
        })
    }

    /// The configured number of permits.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Free permits right now (a snapshot).
    pub fn available(&self) -> usize {
        self.free.load(Ordering::Relaxed)
    }

    /// Permits held right now (a snapshot).
    pub fn in_use(&self) -> usize {
        self.capacity.saturating_sub(self.available())
    }

    /// Tasks waiting right now (a snapshot).
    pub fn waiting(&self) -> usize {
        self.gate.waiting()
    }

    /// Takes a permit if one is free, without waiting.
    pub fn try_acquire(&self) -> Result<Permit<'_>, TryAcquireError> {
        if self.gate.is_closed() {
            return Err(TryAcquireError::Closed);
        }
        if self.take() {
            Ok(Permit { limit: self })
        } else {
            Err(TryAcquireError::NoCapacity)
        }
    }

    /// Like [`Limit::try_acquire`], returning a permit that owns a reference to the limit.
    #[cfg(not(slotpool_loom))]
    pub fn try_acquire_owned(self: &Arc<Self>) -> Result<OwnedPermit, TryAcquireError> {
        Self::try_acquire_arc(self)
    }

    /// Under loom (whose `Arc` cannot be a method receiver) call it as
    /// `Limit::try_acquire_owned(&limit)`, which also compiles in normal builds.
    #[cfg(slotpool_loom)]
    pub fn try_acquire_owned(this: &Arc<Self>) -> Result<OwnedPermit, TryAcquireError> {
        Self::try_acquire_arc(this)
    }

    fn try_acquire_arc(this: &Arc<Self>) -> Result<OwnedPermit, TryAcquireError> {
        this.try_acquire().map(|permit| {
            std::mem::forget(permit);
            OwnedPermit {
                limit: Arc::clone(this),
            }
        })
    }

    /// Waits for a permit.
    ///
    /// Cancel-safe: dropping the future before it resolves takes no permit, and a wake-up it
    /// had received passes to the next waiter.
    pub fn acquire(&self) -> Acquire<'_> {
        Acquire {
            limit: self,
            wait: WaitState::new(),
        }
    }

    /// Waits for a permit that owns a reference to the limit. Cancel-safe like
    /// [`Limit::acquire`].
    #[cfg(not(slotpool_loom))]
    pub fn acquire_owned(self: Arc<Self>) -> AcquireOwned {
        Self::acquire_arc(self)
    }

    /// Under loom call it as `Limit::acquire_owned(limit)` (also fine in normal builds).
    #[cfg(slotpool_loom)]
    pub fn acquire_owned(this: Arc<Self>) -> AcquireOwned {
        Self::acquire_arc(this)
    }

    fn acquire_arc(this: Arc<Self>) -> AcquireOwned {
        AcquireOwned {
            wait: WaitState::new(),
            limit: Some(this),
        }
    }

    /// Closes the limiter: waiters and later acquires get [`Closed`]. Permits already out stay
    /// valid and are returned as usual.
    pub fn close(&self) {
        self.gate.close();
    }

    /// Whether [`Limit::close`] was called.
    pub fn is_closed(&self) -> bool {
        self.gate.is_closed()
    }

    /// How often each rare branch of the limit's gate ran (loom builds only).
    #[cfg(slotpool_loom)]
    pub fn gate_probes(&self) -> crate::protocol::gate::GateProbes {
        self.gate.probes()
    }

    /// One checked decrement: never below zero.
    #[inline]
    fn take(&self) -> bool {
        let mut free = self.free.load(Ordering::SeqCst);
        loop {
            if free == 0 {
                return false;
            }
            match self.free.compare_exchange_weak(
                free,
                free - 1,
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => return true,
                // Another acquirer or a releaser moved the count; retry with what we saw.
                Err(actual) => free = actual,
            }
        }
    }

    /// A waiter's attempt: take a permit and, if more remain while others wait, wake the next.
    fn take_for_waiter(&self) -> Option<()> {
        if !self.take() {
            return None;
        }
        if self.free.load(Ordering::SeqCst) > 0 {
            self.gate.notify_one();
        }
        Some(())
    }

    #[inline]
    fn release(&self) {
        // A queued waiter gets the permit directly (FIFO: a caller that never waited cannot
        // take it first). One load when nobody waits.
        if self.gate.handoff(NonZeroU64::MIN) {
            return;
        }
        let before = self.free.fetch_add(1, Ordering::SeqCst);
        debug_assert!(
            before < self.capacity,
            "released more permits than acquired"
        );
        self.gate.notify_one();
    }

    fn poll_wait<'g>(
        &'g self,
        wait: Pin<&mut WaitState<'g>>,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(), Closed>> {
        wait.poll_until_handoff(
            &self.gate,
            cx,
            || self.take_for_waiter(),
            |_| (),
            |_| self.release(),
        )
    }
}

impl fmt::Debug for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Limit")
            .field("capacity", &self.capacity)
            .field("available", &self.available())
            .field("waiting", &self.waiting())
            .finish()
    }
}

/// A permit borrowed from a [`Limit`]; returns itself on drop.
#[must_use = "dropping the permit returns it at once"]
pub struct Permit<'a> {
    limit: &'a Limit,
}

impl Permit<'_> {
    /// Keeps the permit taken for good (the limit's capacity shrinks by one).
    pub fn forget(self) {
        std::mem::forget(self);
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        self.limit.release();
    }
}

impl fmt::Debug for Permit<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Permit").finish_non_exhaustive()
    }
}

/// A permit that owns a reference to its [`Limit`]; `Send + 'static`, so it can move into a
/// spawned task or blocking closure. Returns itself on drop (also during a panic's unwind).
#[must_use = "dropping the permit returns it at once"]
pub struct OwnedPermit {
    limit: Arc<Limit>,
}

impl OwnedPermit {
    /// The limit this permit came from.
    pub fn limit(&self) -> &Arc<Limit> {
        &self.limit
    }
}

impl Drop for OwnedPermit {
    fn drop(&mut self) {
        self.limit.release();
    }
}

impl fmt::Debug for OwnedPermit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OwnedPermit").finish_non_exhaustive()
    }
}

pin_project_lite::pin_project! {
    /// Future of [`Limit::acquire`]. `!Unpin`: its place in the queue lives inside it.
    #[must_use = "futures do nothing unless polled"]
    pub struct Acquire<'a> {
        limit: &'a Limit,
        // Structurally pinned: never moved out of the future.
        #[pin]
        wait: WaitState<'a>,
    }

    impl<'a> PinnedDrop for Acquire<'a> {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            if this.wait.cancel_handoff().is_some() {
                this.limit.release();
            }
        }
    }
}

impl<'a> Future for Acquire<'a> {
    type Output = Result<Permit<'a>, Closed>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let limit: &'a Limit = this.limit;
        limit.poll_wait(this.wait, cx).map_ok(|()| Permit { limit })
    }
}

impl fmt::Debug for Acquire<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Acquire").field("wait", &self.wait).finish()
    }
}

pin_project_lite::pin_project! {
    /// Future of [`Limit::acquire_owned`]. `!Unpin`: its place in the queue lives inside it.
    #[must_use = "futures do nothing unless polled"]
    pub struct AcquireOwned {
        // Structurally pinned: never moved out of the future. Its gate borrow is stretched to
        // `'static` (see `poll`); declared before `limit` so that it drops first.
        #[pin]
        wait: WaitState<'static>,
        // `None` once resolved. INVARIANT: `Some` whenever `wait` is queued.
        limit: Option<Arc<Limit>>,
    }

    impl PinnedDrop for AcquireOwned {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            if this.wait.cancel_handoff().is_some() {
                if let Some(limit) = this.limit.as_ref() {
                    limit.release();
                }
            }
        }
    }
}

impl Future for AcquireOwned {
    type Output = Result<OwnedPermit, Closed>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let Some(limit) = this.limit.as_ref() else {
            panic!("AcquireOwned polled after completion");
        };
        // SAFETY: the limit lives in the `Arc` this future holds, and the wait holds the
        // borrow only while queued: the `Arc` is taken out only once the wait has resolved
        // (and so left the queue), the drop leaves the queue before the `Arc` goes, and the
        // field order drops `wait` before `limit` should that unwind. So the borrow never
        // outlives the limit, though its type says `'static`.
        let stretched: &'static Limit = unsafe { &*Arc::as_ptr(limit) };
        match stretched.poll_wait(this.wait, cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(result) => {
                let limit = this.limit.take();
                Poll::Ready(result.map(|()| OwnedPermit {
                    limit: limit.unwrap_or_else(|| unreachable!("checked above")),
                }))
            }
        }
    }
}

impl fmt::Debug for AcquireOwned {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AcquireOwned")
            .field("wait", &self.wait)
            .finish()
    }
}
