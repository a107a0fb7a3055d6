//! Waiting for capacity: a wake-up gate whose release side takes no lock when nobody waits.
//!
//! # The protocol
//!
//! A [`Gate`] does not own capacity; it connects whoever frees capacity (a slot table, a
//! limiter) with whoever is waiting for it. Its state is one atomic word with two bits:
//!
//! * `WAITING`: the wait queue is not empty. Set and cleared only while the queue's mutex is
//!   held, so it is exact whenever the mutex is free.
//! * `CLOSED`: the gate is closed for good; every waiter resolves with [`Closed`].
//!
//! **Release side.** After freeing capacity with a `SeqCst` read-modify-write on its own word,
//! the owner calls [`Gate::notify_one`]. That is one `SeqCst` load of the state: if `WAITING` is
//! clear it returns at once, taking no lock (tokio's `Notify` fast path; tokio's `Semaphore`
//! takes its waiter mutex on every release, which is one of the costs this removes). Only with
//! waiters does it lock the queue, pop the oldest waiter, mark it notified and wake it after
//! unlocking.
//!
//! **Wait side.** [`Waiter::poll_until`] tries the owner's `attempt` closure; if that fails it
//! enqueues itself (setting `WAITING` with a `SeqCst` RMW) and then tries **again** before
//! returning `Pending`. That second try closes the lost-wake-up window: the waiter's RMW on
//! the gate and the owner's RMW on its capacity word are both `SeqCst`, so in the single total
//! order either the owner's later load of the gate sees `WAITING` (and notifies), or the
//! waiter's later attempt sees the freed capacity. This is the Dekker pattern; it is why the
//! loads on both sides are `SeqCst` rather than `Acquire`. (`sync::dekker_fence` marks the
//! two places; it is free in normal builds and a real `SeqCst` fence under loom, whose model
//! of `SeqCst` accesses is weaker than Rust's.)
//!
//! **Fairness.** Waiters queue in FIFO order. A notified waiter that loses the freed capacity
//! to a caller that never waited re-enqueues at the **front**, so it keeps its place.
//!
//! **Cancellation.** A [`Waiter`] dropped (or [`Waiter::cancel`]led) while queued removes
//! itself. One dropped after it was notified but before it used the notification passes the
//! notification on to the next waiter, so a wake-up is never swallowed by a cancelled future.
//!
//! **Closing.** [`Gate::close`] sets `CLOSED` and then wakes every queued waiter. A waiter
//! checks `CLOSED` after enqueueing, under the same `SeqCst` argument, so none sleeps through
//! a close.
//!
//! The gate is executor-agnostic: it stores and wakes plain [`Waker`]s, so
//! `loom::future::block_on` drives the same code the tokio pools run.
//!
//! This module owns the wait queue and the state word; it never touches an owner's capacity.

use std::collections::VecDeque;
use std::fmt;
use std::num::NonZeroU64;
use std::task::{Context, Poll, Waker};

use crate::error::Closed;
use crate::sync::{
    dekker_fence, trace_transition, Arc, AtomicBool, AtomicU64, AtomicUsize, CachePadded, Mutex,
    Ordering,
};

/// The queue is not empty.
const WAITING: usize = 0b01;
/// The gate is closed; nothing will be handed out again.
const CLOSED: usize = 0b10;

/// A wake-up gate between owners that free capacity and tasks that wait for it.
///
/// See the [module documentation](self) for the protocol.
pub struct Gate {
    /// `WAITING | CLOSED`. INVARIANT: `WAITING` is set exactly when `queue` is non-empty,
    /// whenever the queue's mutex is not held.
    state: CachePadded<AtomicUsize>,
    /// FIFO of waiters not yet notified. Touched only on the slow path.
    queue: Mutex<VecDeque<Entry>>,
    /// Length of `queue`, written under its mutex, read lock-free by [`Gate::waiting`].
    queued: AtomicUsize,
}

/// One queued waiter.
struct Entry {
    node: Arc<Node>,
    waker: Waker,
    /// The waiter can take a unit of capacity handed to it directly ([`Gate::handoff`]).
    accepts_handoff: bool,
}

/// The part of a waiter that the notifier writes.
struct Node {
    /// Set (under the queue's mutex) when the entry is popped by a notification or a close.
    /// INVARIANT: a node is in the queue exactly when `notified` is false and its waiter
    /// still holds it.
    notified: AtomicBool,
    /// A unit of capacity handed over with the notification (0: none). Written before
    /// `notified`, under the queue's mutex.
    handoff: AtomicU64,
}

impl Gate {
    /// Creates an open gate with no waiters.
    pub fn new() -> Self {
        Self {
            state: CachePadded::new(AtomicUsize::new(0)),
            queue: Mutex::new(VecDeque::new()),
            queued: AtomicUsize::new(0),
        }
    }

    /// Returns a waiter that is not queued yet; it enqueues on its first unsuccessful poll.
    pub fn waiter(&self) -> Waiter<'_> {
        Waiter {
            gate: self,
            state: WaitState::new(),
        }
    }

    /// Wakes the oldest waiter, if any. Call it after freeing capacity with a `SeqCst` RMW.
    ///
    /// With nobody waiting this is one load and takes no lock.
    #[inline]
    pub fn notify_one(&self) {
        dekker_fence();
        if self.state.load(Ordering::SeqCst) & WAITING == 0 {
            return;
        }
        self.notify_one_slow();
    }

    #[cold]
    fn notify_one_slow(&self) {
        let waker = {
            let mut queue = self.queue.lock();
            let Some(entry) = queue.pop_front() else {
                return;
            };
            entry.node.notified.store(true, Ordering::Release);
            self.after_pop(&queue);
            entry.waker
        };
        trace_transition!("gate: notified one waiter");
        waker.wake();
    }

    /// Hands a unit of capacity (an owner-defined non-zero token) straight to the oldest
    /// waiter, if it is one that accepts handoffs, and wakes it. Returns `false` (and keeps
    /// nothing) when there is no such waiter; the owner then frees the unit as usual.
    ///
    /// Handing off instead of freeing is what makes waiting fair: a caller that never waited
    /// cannot take a unit a queued waiter was woken for. With nobody waiting this is one load.
    #[inline]
    pub fn handoff(&self, token: NonZeroU64) -> bool {
        dekker_fence();
        if self.state.load(Ordering::SeqCst) & WAITING == 0 {
            return false;
        }
        self.handoff_slow(token)
    }

    #[cold]
    fn handoff_slow(&self, token: NonZeroU64) -> bool {
        let waker = {
            let mut queue = self.queue.lock();
            if !queue.front().is_some_and(|e| e.accepts_handoff) {
                return false;
            }
            let Some(entry) = queue.pop_front() else {
                return false;
            };
            entry.node.handoff.store(token.get(), Ordering::Relaxed);
            entry.node.notified.store(true, Ordering::Release);
            self.after_pop(&queue);
            entry.waker
        };
        trace_transition!("gate: handed a unit to a waiter");
        waker.wake();
        true
    }

    /// Keeps `WAITING` and the queue length in step with the queue. Called under its mutex.
    fn after_pop(&self, queue: &VecDeque<Entry>) {
        self.queued.store(queue.len(), Ordering::Relaxed);
        if queue.is_empty() {
            self.state.fetch_and(!WAITING, Ordering::SeqCst);
        }
    }

    /// Whether any waiter is queued (a `SeqCst` load, for the Dekker pairing).
    #[inline]
    pub fn has_waiters(&self) -> bool {
        dekker_fence();
        self.state.load(Ordering::SeqCst) & WAITING != 0
    }

    /// How many waiters are queued right now (a snapshot for statistics).
    pub fn waiting(&self) -> usize {
        self.queued.load(Ordering::Relaxed)
    }

    /// Closes the gate and wakes every waiter; they resolve with [`Closed`]. Idempotent.
    pub fn close(&self) {
        self.state.fetch_or(CLOSED, Ordering::SeqCst);
        let wakers: Vec<Waker> = {
            let mut queue = self.queue.lock();
            let drained = queue
                .drain(..)
                .map(|entry| {
                    entry.node.notified.store(true, Ordering::Release);
                    entry.waker
                })
                .collect();
            self.after_pop(&queue);
            drained
        };
        trace_transition!("gate: closed, waking {}", wakers.len());
        for waker in wakers {
            waker.wake();
        }
    }

    /// Whether [`Gate::close`] has been called.
    #[inline]
    pub fn is_closed(&self) -> bool {
        self.state.load(Ordering::SeqCst) & CLOSED != 0
    }
}

impl Default for Gate {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for Gate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Gate")
            .field("closed", &self.is_closed())
            .field("waiting", &self.waiting())
            .finish()
    }
}

/// A task's place in a [`Gate`]'s queue, borrowing the gate. Create one per wait with
/// [`Gate::waiter`], poll it with [`Waiter::poll_until`], and let it drop (or
/// [`cancel`](Waiter::cancel) it) when done.
///
/// Dropping a waiter at any point is safe: a queued waiter leaves the queue, and one that was
/// notified but had not used the notification passes it on.
#[derive(Debug)]
pub struct Waiter<'g> {
    gate: &'g Gate,
    state: WaitState,
}

impl Waiter<'_> {
    /// See [`WaitState::poll_until`].
    pub fn poll_until<T>(
        &mut self,
        cx: &mut Context<'_>,
        attempt: impl FnMut() -> Option<T>,
    ) -> Poll<Result<T, Closed>> {
        self.state.poll_until(self.gate, cx, attempt)
    }

    /// See [`WaitState::cancel`].
    pub fn cancel(&mut self) {
        self.state.cancel(self.gate);
    }

    /// Whether this waiter is queued (or notified and not yet polled).
    pub fn is_queued(&self) -> bool {
        self.state.is_queued()
    }
}

impl Drop for Waiter<'_> {
    fn drop(&mut self) {
        self.state.cancel(self.gate);
    }
}

/// The gate-independent part of a waiter, for futures that own their gate through an `Arc`
/// (and so cannot hold a `Waiter<'_>` borrowing it).
///
/// Whoever holds a `WaitState` must call [`WaitState::cancel`] with the same gate before
/// dropping it (typically in its own `Drop`); dropping a queued `WaitState` without that
/// leaves a stale entry that swallows one notification.
#[derive(Default)]
pub struct WaitState {
    /// `Some` while queued or notified-but-not-yet-observed.
    node: Option<Arc<Node>>,
    /// This waiter was woken once already; if it has to wait again it goes to the front.
    was_notified: bool,
}

impl WaitState {
    /// A waiter that is not queued yet.
    #[inline]
    pub fn new() -> Self {
        Self::default()
    }

    /// Tries `attempt`; on failure waits (registering `cx`'s waker) until a notification, then
    /// tries again on the next poll. Resolves with the first `Some` that `attempt` returns, or
    /// with [`Closed`] once the gate is closed.
    ///
    /// `attempt` must take capacity with a `SeqCst` RMW (or fail after a `SeqCst` load) so the
    /// recheck after enqueueing cannot miss a concurrent release.
    pub fn poll_until<T>(
        &mut self,
        gate: &Gate,
        cx: &mut Context<'_>,
        attempt: impl FnMut() -> Option<T>,
    ) -> Poll<Result<T, Closed>> {
        self.poll_inner(gate, cx, attempt, None)
    }

    /// [`WaitState::poll_until`] for owners that hand units over ([`Gate::handoff`]): a unit
    /// handed to this waiter resolves it through `accept`. If the waiter ends up with a unit
    /// it does not need (it found capacity itself just as one was handed over, or the gate
    /// closed), `give_back` returns that unit to the owner. Such a waiter must be cancelled
    /// with [`WaitState::cancel_handoff`].
    pub fn poll_until_handoff<T>(
        &mut self,
        gate: &Gate,
        cx: &mut Context<'_>,
        attempt: impl FnMut() -> Option<T>,
        accept: impl Fn(NonZeroU64) -> T,
        give_back: impl Fn(NonZeroU64),
    ) -> Poll<Result<T, Closed>> {
        self.poll_inner(gate, cx, attempt, Some((&accept, &give_back)))
    }

    #[allow(clippy::type_complexity)]
    fn poll_inner<T>(
        &mut self,
        gate: &Gate,
        cx: &mut Context<'_>,
        mut attempt: impl FnMut() -> Option<T>,
        handoff: Option<(&dyn Fn(NonZeroU64) -> T, &dyn Fn(NonZeroU64))>,
    ) -> Poll<Result<T, Closed>> {
        if let Some(node) = &self.node {
            if node.notified.load(Ordering::Acquire) {
                // The notifier popped us; the notification is ours to use now.
                let token = NonZeroU64::new(node.handoff.load(Ordering::Relaxed));
                self.node = None;
                self.was_notified = true;
                if let (Some(token), Some((accept, _))) = (token, handoff) {
                    return Poll::Ready(Ok(accept(token)));
                }
            }
        }
        let finish = |this: &mut Self| {
            if let Some(token) = this.cancel_handoff(gate) {
                if let Some((_, give_back)) = handoff {
                    give_back(token);
                }
            }
        };
        if gate.is_closed() {
            finish(self);
            return Poll::Ready(Err(Closed));
        }
        if let Some(value) = attempt() {
            finish(self);
            return Poll::Ready(Ok(value));
        }
        self.register(gate, cx.waker(), handoff.is_some());
        // Second try: a release that ran before our `WAITING` became visible freed capacity
        // we must now see (module docs, "Wait side").
        if gate.is_closed() {
            finish(self);
            return Poll::Ready(Err(Closed));
        }
        if let Some(value) = attempt() {
            finish(self);
            return Poll::Ready(Ok(value));
        }
        Poll::Pending
    }

    /// Enqueues this waiter, or refreshes its waker if it is queued already.
    fn register(&mut self, gate: &Gate, waker: &Waker, accepts_handoff: bool) {
        let mut queue = gate.queue.lock();
        match &self.node {
            Some(node) => {
                if node.notified.load(Ordering::Acquire) {
                    // Notified between the check at the top of `poll_until` and now: wake
                    // ourselves so the next poll consumes it.
                    drop(queue);
                    waker.wake_by_ref();
                    return;
                }
                if let Some(entry) = queue.iter_mut().find(|e| Arc::ptr_eq(&e.node, node)) {
                    if !entry.waker.will_wake(waker) {
                        entry.waker = waker.clone();
                    }
                }
            }
            None => {
                let node = Arc::new(Node {
                    notified: AtomicBool::new(false),
                    handoff: AtomicU64::new(0),
                });
                let entry = Entry {
                    node: Arc::clone(&node),
                    waker: waker.clone(),
                    accepts_handoff,
                };
                if self.was_notified {
                    queue.push_front(entry);
                } else {
                    queue.push_back(entry);
                }
                gate.queued.store(queue.len(), Ordering::Relaxed);
                gate.state.fetch_or(WAITING, Ordering::SeqCst);
                // The retry that follows reads the owner's capacity: Dekker with notify_one.
                dekker_fence();
                self.node = Some(node);
                trace_transition!("gate: waiter enqueued (front: {})", self.was_notified);
            }
        }
    }

    /// Leaves `gate`'s queue. If a notification had been delivered to this waiter and not
    /// used, it is passed to the next waiter. Idempotent. (A waiter polled with
    /// [`WaitState::poll_until_handoff`] must use [`WaitState::cancel_handoff`] instead.)
    pub fn cancel(&mut self, gate: &Gate) {
        let unused = self.cancel_handoff(gate);
        debug_assert!(
            unused.is_none(),
            "a handed-off unit was dropped by cancel()"
        );
    }

    /// Leaves `gate`'s queue like [`WaitState::cancel`], and returns a unit that was handed to
    /// this waiter and not used: the owner must free it (which may hand it to the next waiter).
    #[must_use = "a returned unit must be given back to its owner"]
    pub fn cancel_handoff(&mut self, gate: &Gate) -> Option<NonZeroU64> {
        let node = self.node.take()?;
        let mut queue = gate.queue.lock();
        if node.notified.load(Ordering::Acquire) {
            drop(queue);
            if let Some(token) = NonZeroU64::new(node.handoff.load(Ordering::Relaxed)) {
                trace_transition!("gate: waiter cancelled holding a handed-off unit");
                return Some(token);
            }
            trace_transition!("gate: notified waiter cancelled, passing on");
            // The notification stood for freed capacity someone else can use.
            if !gate.is_closed() {
                gate.notify_one();
            }
            return None;
        }
        if let Some(pos) = queue.iter().position(|e| Arc::ptr_eq(&e.node, &node)) {
            queue.remove(pos);
        }
        gate.after_pop(&queue);
        None
    }

    /// Whether this waiter is queued (or notified and not yet polled).
    #[inline]
    pub fn is_queued(&self) -> bool {
        self.node.is_some()
    }
}

impl fmt::Debug for WaitState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WaitState")
            .field("queued", &self.node.is_some())
            .field("was_notified", &self.was_notified)
            .finish()
    }
}
