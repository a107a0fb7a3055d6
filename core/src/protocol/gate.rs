//! Waiting for capacity: a wake-up gate whose release side takes no lock when nobody waits,
//! and whose waits allocate nothing.
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
//! **Wait side.** [`WaitState::poll_until`] tries the owner's `attempt` closure; if that fails
//! it enqueues itself (setting `WAITING` with a `SeqCst` RMW) and then tries **again** before
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
//! **Cancellation.** A [`WaitState`] dropped (or [`cancel`](WaitState::cancel)led) while queued
//! removes itself. One dropped after it was notified but before it used the notification
//! passes the notification on to the next waiter, so a wake-up is never swallowed by a
//! cancelled future.
//!
//! **Closing.** [`Gate::close`] sets `CLOSED` and then wakes every queued waiter. A waiter
//! checks `CLOSED` after enqueueing, under the same `SeqCst` argument, so none sleeps through
//! a close.
//!
//! # The queue: nodes that live in the waiting futures
//!
//! A wait allocates nothing. Each [`WaitState`] embeds its queue node (the links to its
//! neighbours, the waker, a handed-over unit and a `notified` flag); the gate's queue is an
//! intrusive doubly linked list of those nodes, head and tail under the gate's mutex. A node
//! is linked only through `Pin<&mut WaitState>`, so it does not move while linked, and a
//! `WaitState`'s `Drop` unlinks it under the mutex before its memory can go. The
//! [`WaitState`]'s lifetime `'g` borrows the gate, so the gate outlives every node in it.
//!
//! A node is in one of three states, and who may touch it follows from the state:
//!
//! | state | `WaitState::gate` | `notified` | in the list | who touches the node |
//! | --- | --- | --- | --- | --- |
//! | idle | `None` | false | no | its owner only |
//! | linked | `Some(gate)` | false | yes | anyone holding the gate's mutex |
//! | notified | `Some(gate)` | true | no | its owner only |
//!
//! * idle → linked: the owner links it under the mutex ([`WaitState::poll_until`]).
//! * linked → notified: a notifier ([`Gate::notify_one`], `Gate::handoff`, [`Gate::close`])
//!   unlinks it, takes its waker and writes a handed-over unit, all under the mutex, and then
//!   stores `notified = true` with `Release` as its **last** access to the node. It wakes the
//!   taken waker after unlocking, touching the node no more.
//! * linked → idle: the owner unlinks it under the mutex (cancel or drop).
//! * notified → idle: the owner sees `notified` with `Acquire` (without the mutex) and from
//!   then on is the node's only user: it reads the unit and resets the node.
//!
//! The `Release`/`Acquire` pair on `notified` is what hands the node back to its owner; the
//! unit of capacity a hand-off carries is read through it, so weakening it lets the owner read
//! a half-written node.
//!
//! The gate is executor-agnostic: it stores and wakes plain [`Waker`]s, so
//! `loom::future::block_on` drives the same code the tokio pools run.
//!
//! This module owns the wait queue and the state word; it never touches an owner's capacity.

use std::fmt;
use std::marker::PhantomPinned;
use std::mem::MaybeUninit;
use std::num::NonZeroU64;
use std::pin::Pin;
use std::ptr::{self, NonNull};
use std::task::{Context, Poll, Waker};

use crate::error::Closed;
#[cfg(slotpool_loom)]
use crate::sync::Probe;
use crate::sync::{
    dekker_fence, probe, trace_transition, AtomicBool, AtomicUsize, CachePadded, Mutex, Ordering,
    UnsafeCell,
};

/// The queue is not empty.
const WAITING: usize = 0b01;
/// The gate is closed; nothing will be handed out again.
const CLOSED: usize = 0b10;

/// A wake-up gate between owners that free capacity and tasks that wait for it.
///
/// See the module documentation for the protocol.
pub struct Gate {
    /// `WAITING | CLOSED`. INVARIANT: `WAITING` is set exactly when `queue` is non-empty,
    /// whenever the queue's mutex is not held.
    state: CachePadded<AtomicUsize>,
    /// FIFO of linked waiter nodes. Touched only on the slow path.
    queue: Mutex<Queue>,
    /// Length of `queue`, written under its mutex, read lock-free by [`Gate::waiting`].
    queued: AtomicUsize,
    /// How often the rare branches ran (loom builds only).
    #[cfg(slotpool_loom)]
    probes: Probes,
}

/// The intrusive FIFO of linked nodes. Reached only through the gate's mutex.
///
/// INVARIANT: `head`..`tail` through `next` (and back through `prev`) are exactly the linked
/// nodes, `len` of them; every one is pinned inside a live [`WaitState`] whose `gate` is this
/// queue's gate.
struct Queue {
    head: Option<NonNull<Node>>,
    tail: Option<NonNull<Node>>,
    len: usize,
}

// SAFETY: the queue holds the addresses of nodes pinned inside waiting futures, which may live
// on other threads. It is only reached through the gate's mutex, and each node it points to
// stays valid while linked (a `WaitState` unlinks its node under that mutex before its memory
// can go), so handing the queue to another thread hands over nothing but addresses that are
// valid wherever the mutex is held.
unsafe impl Send for Queue {}

/// A waiter's queue node, embedded in its [`WaitState`]. `repr(C)`, `notified` first: with
/// the `WaitState`'s own flags before it, everything a new waiter must initialise sits in
/// its first bytes (the links are written only when it enqueues).
#[repr(C)]
struct Node {
    /// The notifier's last write to the node: the node left the queue and its `links` are
    /// the owner's again. Stored `true` with `Release` under the gate's mutex, read with
    /// `Acquire` by the owner, reset by the owner.
    notified: AtomicBool,
    /// Links, waker and handed-over unit. Accessed by the rules of the module docs: under the
    /// gate's mutex while linked, by the owner alone while idle or notified. Written whole
    /// when the node is first linked, and not read before (a wait that never enqueues, the
    /// common case, pays for no more than the flags). INVARIANT: `waker` is `None` whenever the
    /// node is not linked (whoever unlinks it takes the waker), so nothing is left to drop.
    links: UnsafeCell<MaybeUninit<Links>>,
    /// In a queue (loom builds only: checked when the node's memory goes). Accessed under the
    /// gate's mutex, or by the owner when the node is not linked.
    #[cfg(slotpool_loom)]
    linked: UnsafeCell<bool>,
    /// The node's address is in the queue while linked: it must not move, and `&mut` to its
    /// owner must not be assumed unique while another thread follows a link to it.
    _pinned: PhantomPinned,
}

/// The part of a node the queue's users write.
struct Links {
    prev: Option<NonNull<Node>>,
    next: Option<NonNull<Node>>,
    /// Woken by the notifier (taken out under the mutex, woken after unlocking).
    waker: Option<Waker>,
    /// A unit of capacity handed over with the notification (0: none).
    handoff: u64,
    /// The waiter can take a unit of capacity handed to it directly (`Gate::handoff`).
    accepts_handoff: bool,
}

impl Node {
    fn new() -> Self {
        Self {
            notified: AtomicBool::new(false),
            links: UnsafeCell::new(MaybeUninit::uninit()),
            #[cfg(slotpool_loom)]
            linked: UnsafeCell::new(false),
            _pinned: PhantomPinned,
        }
    }

    /// Runs `f` on the node's links.
    ///
    /// # Safety
    /// The node has been linked at least once (its links are written), and the caller has the
    /// right to touch the links by the rules of the module docs: it holds the mutex of the
    /// gate the node is linked in, or it is the node's owner and the node is idle or notified
    /// (seen with `Acquire`). `f` must not reach this node's links again.
    #[inline]
    unsafe fn with_links<R>(&self, f: impl FnOnce(&mut Links) -> R) -> R {
        // SAFETY: written and exclusive by the caller's contract; loom checks that no two
        // accesses overlap without a happens-before edge between them.
        self.links
            .with_mut(|links| f(unsafe { (*links).assume_init_mut() }))
    }

    /// Writes the node's links whole, before it is linked.
    ///
    /// # Safety
    /// The caller is the node's owner and the node is idle.
    #[inline]
    unsafe fn init_links(&self, links: Links) {
        // SAFETY: idle: ours alone. Overwriting drops nothing: an idle node holds no waker
        // (see `links`), and the rest is plain data.
        self.links.with_mut(|slot| unsafe {
            (*slot).write(links);
        });
    }

    /// Marks the node linked or not (loom builds only).
    ///
    /// # Safety
    /// As for [`Node::with_links`], without the need for written links.
    #[cfg(slotpool_loom)]
    unsafe fn set_linked(&self, linked: bool) {
        // SAFETY: exclusive by the caller's contract.
        self.linked.with_mut(|slot| unsafe { *slot = linked });
    }
}

impl Queue {
    const fn new() -> Self {
        Self {
            head: None,
            tail: None,
            len: 0,
        }
    }

    /// Links `node` after the tail.
    ///
    /// # Safety
    /// The gate's mutex is held, `node` is pinned, idle and stays valid until it is unlinked.
    unsafe fn push_back(&mut self, node: NonNull<Node>) {
        // SAFETY: idle and pinned by the caller's contract; the tail is linked, so its links
        // are ours under the mutex.
        unsafe {
            node.as_ref().with_links(|links| {
                links.prev = self.tail;
                links.next = None;
            });
            #[cfg(slotpool_loom)]
            node.as_ref().set_linked(true);
            match self.tail {
                Some(tail) => tail.as_ref().with_links(|links| links.next = Some(node)),
                None => self.head = Some(node),
            }
        }
        self.tail = Some(node);
        self.len += 1;
    }

    /// Links `node` before the head.
    ///
    /// # Safety
    /// As for [`Queue::push_back`].
    unsafe fn push_front(&mut self, node: NonNull<Node>) {
        // SAFETY: as in `push_back`, with the head for the tail.
        unsafe {
            node.as_ref().with_links(|links| {
                links.prev = None;
                links.next = self.head;
            });
            #[cfg(slotpool_loom)]
            node.as_ref().set_linked(true);
            match self.head {
                Some(head) => head.as_ref().with_links(|links| links.prev = Some(node)),
                None => self.tail = Some(node),
            }
        }
        self.head = Some(node);
        self.len += 1;
    }

    /// Unlinks the oldest node and returns it; the caller now owns its links (under the mutex)
    /// until it stores `notified`.
    ///
    /// # Safety
    /// The gate's mutex is held.
    unsafe fn pop_front(&mut self) -> Option<NonNull<Node>> {
        let head = self.head?;
        // SAFETY: `head` is linked, so valid (queue invariant), and the mutex is held.
        unsafe { self.unlink(head) };
        Some(head)
    }

    /// Unlinks `node`.
    ///
    /// # Safety
    /// The gate's mutex is held and `node` is linked in this queue.
    unsafe fn unlink(&mut self, node: NonNull<Node>) {
        // SAFETY: `node` and its neighbours are linked, so valid and ours under the mutex.
        unsafe {
            let (prev, next) = node.as_ref().with_links(|links| {
                let both = (links.prev, links.next);
                links.prev = None;
                links.next = None;
                both
            });
            #[cfg(slotpool_loom)]
            node.as_ref().set_linked(false);
            match prev {
                Some(prev) => prev.as_ref().with_links(|links| links.next = next),
                None => self.head = next,
            }
            match next {
                Some(next) => next.as_ref().with_links(|links| links.prev = prev),
                None => self.tail = prev,
            }
        }
        self.len -= 1;
    }
}

impl Gate {
    /// Creates an open gate with no waiters.
    pub fn new() -> Self {
        Self {
            state: CachePadded::new(AtomicUsize::new(0)),
            queue: Mutex::new(Queue::new()),
            queued: AtomicUsize::new(0),
            #[cfg(slotpool_loom)]
            probes: Probes::default(),
        }
    }

    /// Returns a waiter that is not queued yet; it enqueues on its first unsuccessful poll.
    /// Pin it (`std::pin::pin!`) to poll it.
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
            // SAFETY: the mutex is held.
            let Some(node) = (unsafe { queue.pop_front() }) else {
                return;
            };
            probe!(self.probes.notified);
            // SAFETY: just unlinked under the mutex: valid, and ours until `notified` is
            // stored, which is the last access.
            let waker = unsafe { Self::deliver(node, None) };
            self.after_pop(&queue);
            waker
        };
        trace_transition!("gate: notified one waiter");
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    /// Hands a unit of capacity (an owner-defined non-zero token) straight to the oldest
    /// waiter, if it is one that accepts handoffs, and wakes it. Returns `false` (and keeps
    /// nothing) when there is no such waiter; the owner then frees the unit as usual.
    ///
    /// Handing off instead of freeing is what makes waiting fair: a caller that never waited
    /// cannot take a unit a queued waiter was woken for. With nobody waiting this is one load.
    #[inline]
    pub(crate) fn handoff(&self, token: NonZeroU64) -> bool {
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
            let Some(head) = queue.head else {
                return false;
            };
            // SAFETY: the head is linked and the mutex is held.
            if !unsafe { head.as_ref().with_links(|links| links.accepts_handoff) } {
                return false;
            }
            // SAFETY: the mutex is held; the queue is not empty.
            let Some(node) = (unsafe { queue.pop_front() }) else {
                return false;
            };
            probe!(self.probes.handed_off);
            // SAFETY: as in `notify_one_slow`.
            let waker = unsafe { Self::deliver(node, Some(token)) };
            self.after_pop(&queue);
            waker
        };
        trace_transition!("gate: handed a unit to a waiter");
        if let Some(waker) = waker {
            waker.wake();
        }
        true
    }

    /// Completes a notification of a node just popped: writes the unit, takes the waker, and
    /// stores `notified` (`Release`): after that the node is its owner's again and must not be
    /// touched. Returns the waker to wake once the mutex is released.
    ///
    /// # Safety
    /// The gate's mutex is held and `node` was unlinked from its queue under it just now.
    unsafe fn deliver(node: NonNull<Node>, token: Option<NonZeroU64>) -> Option<Waker> {
        // SAFETY: by the caller's contract the node is valid and its links are ours.
        let node = unsafe { node.as_ref() };
        // SAFETY: as above.
        let waker = unsafe {
            node.with_links(|links| {
                links.handoff = token.map_or(0, NonZeroU64::get);
                links.waker.take()
            })
        };
        // The last access: from here on the owner may read the links and free the node.
        node.notified.store(true, Ordering::Release);
        waker
    }

    /// Keeps `WAITING` and the queue length in step with the queue. Called under its mutex.
    fn after_pop(&self, queue: &Queue) {
        self.queued.store(queue.len, Ordering::Relaxed);
        if queue.len == 0 {
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
            let mut wakers = Vec::with_capacity(queue.len);
            // SAFETY: the mutex is held.
            while let Some(node) = unsafe { queue.pop_front() } {
                probe!(self.probes.closed);
                // SAFETY: as in `notify_one_slow`.
                wakers.extend(unsafe { Self::deliver(node, None) });
            }
            self.after_pop(&queue);
            wakers
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

    /// How often each rare branch of this gate ran, for the loom models' reachability checks.
    #[cfg(slotpool_loom)]
    pub fn probes(&self) -> GateProbes {
        self.probes.snapshot()
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

pin_project_lite::pin_project! {
    /// A task's place in a [`Gate`]'s queue, borrowing the gate. Create one per wait with
    /// [`Gate::waiter`], pin it, poll it with [`Waiter::poll_until`], and let it drop (or
    /// [`cancel`](Waiter::cancel) it) when done.
    ///
    /// Dropping a waiter at any point is safe: a queued waiter leaves the queue, and one that was
    /// notified but had not used the notification passes it on.
    #[derive(Debug)]
    pub struct Waiter<'g> {
        gate: &'g Gate,
        // Structurally pinned (never moved out; `Waiter` is `!Unpin` because it is).
        #[pin]
        state: WaitState<'g>,
    }
}

impl<'g> Waiter<'g> {
    /// Tries `attempt`; on failure queues (registering `cx`'s waker) until a notification,
    /// then tries again on the next poll. Resolves with the first `Some` that `attempt`
    /// returns, or with [`Closed`] once the gate is closed.
    ///
    /// `attempt` must take capacity with a `SeqCst` read-modify-write (or fail after a
    /// `SeqCst` load), and whoever frees capacity must call [`Gate::notify_one`] after its own
    /// `SeqCst` write: then the recheck after queueing cannot miss a release.
    pub fn poll_until<T>(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        attempt: impl FnMut() -> Option<T>,
    ) -> Poll<Result<T, Closed>> {
        let this = self.project();
        this.state.poll_until(this.gate, cx, attempt)
    }

    /// Leaves the queue. If a notification had been delivered to this waiter and not used, it
    /// is passed to the next waiter. Idempotent; dropping the waiter does the same.
    pub fn cancel(self: Pin<&mut Self>) {
        self.project().state.cancel();
    }

    /// Whether this waiter is queued (or notified and not yet polled).
    pub fn is_queued(&self) -> bool {
        self.state.is_queued()
    }
}

/// A waiter's place in a gate's queue, with its queue node inside, for futures that hold the
/// gate through something else than a plain borrow (a slot table, a pool).
///
/// It must be pinned to be polled: its node is linked into the gate's queue by address. It
/// is not queued until its first unsuccessful poll, and leaves the queue when it resolves,
/// when it is [cancelled](WaitState::cancel) and, at the latest, when it is dropped. One
/// `WaitState` waits on one gate at a time: polling it with another gate while it is queued
/// panics.
///
/// A waiter polled with [`WaitState::poll_until_handoff`] may be holding a unit of capacity
/// when it gives up; its owner must take it with [`WaitState::cancel_handoff`] (typically in
/// its own `Drop`) and free it. Dropping it unclaimed loses the unit (and is a debug
/// assertion).
#[repr(C)]
pub struct WaitState<'g> {
    /// The gate this waiter is queued on (linked or notified). INVARIANT: `Some` exactly while
    /// the node is linked or notified (module docs). Written only through `Pin<&mut Self>`.
    gate: Option<&'g Gate>,
    /// This waiter was woken once already; if it has to wait again it goes to the front.
    was_notified: bool,
    node: Node,
}

// SAFETY: a `&WaitState` reads only `gate` and `was_notified` (plain fields written through
// `Pin<&mut Self>`) and `node.notified` (an atomic); the node's links are reached only under
// the gate's mutex or through `Pin<&mut Self>`, by the rules of the module docs. Sharing a
// `&WaitState` between threads therefore gives no unsynchronised access.
unsafe impl Sync for WaitState<'_> {}

// SAFETY: the node's links hold `NonNull` neighbour pointers, which are only followed under
// the gate's mutex (see `Queue`), and a `Waker` (which is `Send`); nothing in a `WaitState`
// is tied to the thread that created it.
unsafe impl Send for WaitState<'_> {}

impl Default for WaitState<'_> {
    fn default() -> Self {
        Self::new()
    }
}

impl<'g> WaitState<'g> {
    /// A waiter that is not queued yet.
    #[inline]
    pub fn new() -> Self {
        Self {
            gate: None,
            was_notified: false,
            node: Node::new(),
        }
    }

    /// Tries `attempt`; on failure waits (registering `cx`'s waker) until a notification, then
    /// tries again on the next poll. Resolves with the first `Some` that `attempt` returns, or
    /// with [`Closed`] once the gate is closed.
    ///
    /// `attempt` must take capacity with a `SeqCst` RMW (or fail after a `SeqCst` load) so the
    /// recheck after enqueueing cannot miss a concurrent release.
    ///
    /// # Panics
    /// If this waiter is queued on a gate other than `gate`.
    pub fn poll_until<T>(
        self: Pin<&mut Self>,
        gate: &'g Gate,
        cx: &mut Context<'_>,
        attempt: impl FnMut() -> Option<T>,
    ) -> Poll<Result<T, Closed>> {
        self.poll_inner(gate, cx, attempt, None)
    }

    /// [`WaitState::poll_until`] for owners that hand units over (`Gate::handoff`): a unit
    /// handed to this waiter resolves it through `accept`. If the waiter ends up with a unit
    /// it does not need (it found capacity itself just as one was handed over, or the gate
    /// closed), `give_back` returns that unit to the owner. Such a waiter must be cancelled
    /// with [`WaitState::cancel_handoff`].
    ///
    /// # Panics
    /// If this waiter is queued on a gate other than `gate`.
    pub fn poll_until_handoff<T>(
        self: Pin<&mut Self>,
        gate: &'g Gate,
        cx: &mut Context<'_>,
        attempt: impl FnMut() -> Option<T>,
        accept: impl Fn(NonZeroU64) -> T,
        give_back: impl Fn(NonZeroU64),
    ) -> Poll<Result<T, Closed>> {
        self.poll_inner(gate, cx, attempt, Some((&accept, &give_back)))
    }

    #[allow(clippy::type_complexity)]
    fn poll_inner<T>(
        self: Pin<&mut Self>,
        gate: &'g Gate,
        cx: &mut Context<'_>,
        mut attempt: impl FnMut() -> Option<T>,
        handoff: Option<(&dyn Fn(NonZeroU64) -> T, &dyn Fn(NonZeroU64))>,
    ) -> Poll<Result<T, Closed>> {
        // SAFETY: nothing below moves the state; the node's address stays where it was pinned.
        let this = unsafe { self.get_unchecked_mut() };
        if let Some(queued_on) = this.gate {
            assert!(
                ptr::eq(queued_on, gate),
                "a WaitState polled with a gate other than the one it waits on"
            );
            if this.node.notified.load(Ordering::Acquire) {
                // The notifier popped us; the notification is ours to use now.
                let token = this.take_notification();
                this.was_notified = true;
                if let (Some(token), Some((accept, _))) = (token, handoff) {
                    return Poll::Ready(Ok(accept(token)));
                }
            }
        }
        let finish = |this: &mut Self| {
            if let Some(token) = this.leave(Leaving::Resolved) {
                if let Some((_, give_back)) = handoff {
                    give_back(token);
                }
            }
        };
        if gate.is_closed() {
            finish(this);
            return Poll::Ready(Err(Closed));
        }
        if let Some(value) = attempt() {
            finish(this);
            return Poll::Ready(Ok(value));
        }
        this.register(gate, cx.waker(), handoff.is_some());
        // Second try: a release that ran before our `WAITING` became visible freed capacity
        // we must now see (module docs, "Wait side").
        if gate.is_closed() {
            finish(this);
            return Poll::Ready(Err(Closed));
        }
        if let Some(value) = attempt() {
            finish(this);
            return Poll::Ready(Ok(value));
        }
        Poll::Pending
    }

    /// Takes the notification of a node seen notified with `Acquire`: returns the unit handed
    /// over with it, and makes the node idle.
    fn take_notification(&mut self) -> Option<NonZeroU64> {
        // SAFETY: notified, seen with `Acquire` (by our caller, or under the mutex that the
        // notifier stored it under): the notifier is done with the node and it is ours alone.
        let token = unsafe {
            self.node.with_links(|links| {
                let token = links.handoff;
                links.handoff = 0;
                token
            })
        };
        // Relaxed: nobody else reads `notified` until we link the node again, under the mutex.
        self.node.notified.store(false, Ordering::Relaxed);
        self.gate = None;
        NonZeroU64::new(token)
    }

    /// Links the node, or refreshes its waker if it is linked already. The caller holds the
    /// node pinned (it came through `Pin<&mut Self>`).
    fn register(&mut self, gate: &'g Gate, waker: &Waker, accepts_handoff: bool) {
        if self.gate.is_some() {
            let queue = gate.queue.lock();
            if self.node.notified.load(Ordering::Acquire) {
                // Notified between the check at the top of `poll_until` and now: wake
                // ourselves so the next poll consumes it.
                drop(queue);
                waker.wake_by_ref();
                probe!(gate.probes.self_woken);
                return;
            }
            // SAFETY: linked (queued and not notified, checked under the mutex), mutex held.
            let stale = unsafe {
                self.node.with_links(|links| match &links.waker {
                    Some(current) if current.will_wake(waker) => None,
                    _ => links.waker.replace(waker.clone()),
                })
            };
            drop(queue);
            drop(stale);
            return;
        }
        // The waker's clone is user code: run it before touching the queue.
        let waker = waker.clone();
        let node = NonNull::from(&self.node);
        let mut queue = gate.queue.lock();
        // SAFETY: idle: the node is in no queue and ours alone.
        unsafe {
            self.node.init_links(Links {
                prev: None,
                next: None,
                waker: Some(waker),
                handoff: 0,
                accepts_handoff,
            });
        }
        // SAFETY: the mutex is held; the node is idle, and pinned (we came through
        // `Pin<&mut Self>`), and our `Drop` unlinks it under the mutex before it can move or go.
        unsafe {
            if self.was_notified {
                queue.push_front(node);
            } else {
                queue.push_back(node);
            }
        }
        self.gate = Some(gate);
        gate.queued.store(queue.len, Ordering::Relaxed);
        gate.state.fetch_or(WAITING, Ordering::SeqCst);
        // The retry that follows reads the owner's capacity: Dekker with notify_one.
        dekker_fence();
        drop(queue);
        if self.was_notified {
            probe!(gate.probes.requeued_front);
        }
        trace_transition!("gate: waiter enqueued (front: {})", self.was_notified);
    }

    /// Leaves the queue. If a notification had been delivered to this waiter and not used, it
    /// is passed to the next waiter. Idempotent. (A waiter polled with
    /// [`WaitState::poll_until_handoff`] must use [`WaitState::cancel_handoff`] instead.)
    pub fn cancel(self: Pin<&mut Self>) {
        let unused = self.cancel_handoff();
        debug_assert!(
            unused.is_none(),
            "a handed-off unit was dropped by cancel()"
        );
    }

    /// Leaves the queue like [`WaitState::cancel`], and returns a unit that was handed to this
    /// waiter and not used: the owner must free it (which may hand it to the next waiter).
    #[must_use = "a returned unit must be given back to its owner"]
    pub fn cancel_handoff(self: Pin<&mut Self>) -> Option<NonZeroU64> {
        // SAFETY: `leave` moves nothing.
        unsafe { self.get_unchecked_mut() }.leave(Leaving::Cancelled)
    }

    /// Leaves the queue, passing an unused plain notification on and returning an unused
    /// handed-off unit: [`WaitState::cancel_handoff`] on the unpinned state (it moves nothing;
    /// the node only leaves the queue), also run when a wait resolves while queued.
    #[cfg_attr(not(slotpool_loom), allow(unused_variables))]
    fn leave(&mut self, why: Leaving) -> Option<NonZeroU64> {
        let gate = self.gate?;
        if !self.node.notified.load(Ordering::Acquire) {
            let mut queue = gate.queue.lock();
            // Exact under the mutex: notifiers store it under the mutex.
            if !self.node.notified.load(Ordering::Acquire) {
                // SAFETY: queued and not notified: linked in `gate`'s queue (module docs);
                // the mutex is held.
                let waker = unsafe {
                    queue.unlink(NonNull::from(&self.node));
                    self.node.with_links(|links| links.waker.take())
                };
                self.gate = None;
                gate.after_pop(&queue);
                drop(queue);
                probe!(gate.probes.leaving(why).linked);
                trace_transition!("gate: queued waiter left");
                drop(waker);
                return None;
            }
        }
        if let Some(token) = self.take_notification() {
            probe!(gate.probes.leaving(why).holding_unit);
            trace_transition!("gate: waiter left holding a handed-off unit");
            return Some(token);
        }
        // The notification stood for freed capacity someone else can use.
        probe!(gate.probes.leaving(why).notified);
        if !gate.is_closed() {
            trace_transition!("gate: notified waiter left, passing on");
            gate.notify_one();
        }
        None
    }

    /// Whether this waiter is queued (or notified and not yet polled).
    #[inline]
    pub fn is_queued(&self) -> bool {
        self.gate.is_some()
    }
}

/// Why a waiter leaves the queue (the loom builds count each case apart).
#[derive(Clone, Copy)]
enum Leaving {
    /// It gave up: cancelled or dropped.
    Cancelled,
    /// Its wait resolved (it found capacity itself, or the gate closed) while it was queued.
    Resolved,
}

impl Drop for WaitState<'_> {
    /// Leaves the queue if queued; a wait that never enqueued (the common case) only checks.
    #[inline]
    fn drop(&mut self) {
        if self.gate.is_some() {
            self.drop_queued();
        }
    }
}

impl WaitState<'_> {
    /// [`Drop`] of a queued waiter.
    #[cold]
    #[inline(never)]
    fn drop_queued(&mut self) {
        // A loom model that failed unwinds through its waiters with loom's state torn; touching
        // it again would abort the whole run and hide which model failed.
        #[cfg(slotpool_loom)]
        if std::thread::panicking() {
            return;
        }
        // A pinned value is dropped in place: the node has not moved since it was linked.
        let unused = self.leave(Leaving::Cancelled);
        debug_assert!(
            unused.is_none(),
            "a handed-off unit was dropped with its WaitState"
        );
    }
}

/// Loom builds check, as a node's memory goes, that no queue links it any more.
#[cfg(slotpool_loom)]
impl Drop for Node {
    fn drop(&mut self) {
        if std::thread::panicking() {
            return;
        }
        // SAFETY: a node that is idle or notified is its owner's alone; one still linked is
        // the bug this looks for (loom then also reports the unsynchronised access).
        let linked = self.linked.with(|linked| unsafe { *linked });
        assert!(!linked, "a waiter's node is freed while still linked");
    }
}

impl fmt::Debug for WaitState<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WaitState")
            .field("queued", &self.is_queued())
            .field("was_notified", &self.was_notified)
            .finish()
    }
}

/// The gate's branch counters (loom builds only).
#[cfg(slotpool_loom)]
#[derive(Debug, Default)]
struct Probes {
    notified: Probe,
    handed_off: Probe,
    closed: Probe,
    requeued_front: Probe,
    self_woken: Probe,
    cancelled: LeaveProbes,
    resolved: LeaveProbes,
}

/// How waiters that left the queue for one reason were placed when they left.
#[cfg(slotpool_loom)]
#[derive(Debug, Default)]
struct LeaveProbes {
    /// Still linked: it unlinked itself.
    linked: Probe,
    /// Notified, without a unit: it passed the wake-up on (unless the gate was closed).
    notified: Probe,
    /// Handed a unit it had not used: it returned the unit to the owner.
    holding_unit: Probe,
}

#[cfg(slotpool_loom)]
impl LeaveProbes {
    fn snapshot(&self) -> LeftQueue {
        LeftQueue {
            linked: self.linked.get(),
            notified: self.notified.get(),
            holding_unit: self.holding_unit.get(),
        }
    }
}

#[cfg(slotpool_loom)]
impl Probes {
    fn leaving(&self, why: Leaving) -> &LeaveProbes {
        match why {
            Leaving::Cancelled => &self.cancelled,
            Leaving::Resolved => &self.resolved,
        }
    }

    fn snapshot(&self) -> GateProbes {
        GateProbes {
            notified: self.notified.get(),
            handed_off: self.handed_off.get(),
            closed: self.closed.get(),
            requeued_front: self.requeued_front.get(),
            self_woken: self.self_woken.get(),
            cancelled: self.cancelled.snapshot(),
            resolved: self.resolved.snapshot(),
        }
    }
}

/// How often each rare branch of a [`Gate`] ran (loom builds only): the models assert that
/// the branch they are named for ran in at least one execution.
#[cfg(slotpool_loom)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GateProbes {
    /// Waiters popped by [`Gate::notify_one`].
    pub notified: usize,
    /// Waiters popped by `Gate::handoff`, a unit handed to each.
    pub handed_off: usize,
    /// Waiters popped by [`Gate::close`].
    pub closed: usize,
    /// Notified waiters that lost the capacity and re-enqueued at the front.
    pub requeued_front: usize,
    /// Waiters that found their notification while refreshing their waker, and woke themselves.
    pub self_woken: usize,
    /// Queued waiters that gave up (cancelled or dropped), by how they were placed.
    pub cancelled: LeftQueue,
    /// Queued waiters whose wait resolved by itself (capacity found, or the gate closed).
    pub resolved: LeftQueue,
}

/// Counts of waiters that left a [`Gate`]'s queue for one reason, by how they were placed
/// (loom builds only).
#[cfg(slotpool_loom)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LeftQueue {
    /// Still linked: they unlinked themselves.
    pub linked: usize,
    /// Notified without a unit: they passed the wake-up on (unless the gate was closed).
    pub notified: usize,
    /// Holding a handed-off unit: they returned it to the owner.
    pub holding_unit: usize,
}

#[cfg(all(test, not(slotpool_loom)))]
mod tests {
    //! The queue's order and surgery, step by step on one thread (the races are the loom
    //! models' part): which waiter each notification reaches, read from the wakers it woke.

    use std::pin::{pin, Pin};
    use std::task::{Context, Poll, Wake, Waker};

    use super::{Gate, Waiter};
    use crate::error::Closed;
    use crate::sync::{Arc, AtomicUsize, Ordering};

    /// A waker that counts its wake-ups.
    #[derive(Default)]
    struct Wakes(AtomicUsize);

    impl Wake for Wakes {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Units of capacity on a gate, taken and freed as the crate's owners do.
    struct Owner {
        free: AtomicUsize,
        gate: Gate,
    }

    impl Owner {
        fn new() -> Self {
            Self {
                free: AtomicUsize::new(0),
                gate: Gate::new(),
            }
        }

        fn take(&self) -> Option<()> {
            self.free
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .ok()
                .map(drop)
        }

        fn put(&self) {
            self.free.fetch_add(1, Ordering::SeqCst);
            self.gate.notify_one();
        }

        fn poll(
            &self,
            waiter: Pin<&mut Waiter<'_>>,
            wakes: &Arc<Wakes>,
        ) -> Poll<Result<(), Closed>> {
            let waker = Waker::from(Arc::clone(wakes));
            waiter.poll_until(&mut Context::from_waker(&waker), || self.take())
        }
    }

    fn wakes() -> Arc<Wakes> {
        Arc::new(Wakes::default())
    }

    fn woken(wakes: &Arc<Wakes>) -> usize {
        wakes.0.load(Ordering::Relaxed)
    }

    #[test]
    fn waiters_are_woken_oldest_first_and_a_cancel_unlinks_from_the_middle() {
        let owner = Owner::new();
        let (a_wakes, b_wakes, c_wakes) = (wakes(), wakes(), wakes());
        let mut a = pin!(owner.gate.waiter());
        let mut b = pin!(owner.gate.waiter());
        let mut c = pin!(owner.gate.waiter());
        assert!(owner.poll(a.as_mut(), &a_wakes).is_pending());
        assert!(owner.poll(b.as_mut(), &b_wakes).is_pending());
        assert!(owner.poll(c.as_mut(), &c_wakes).is_pending());
        assert_eq!(owner.gate.waiting(), 3);

        b.as_mut().cancel();
        assert!(!b.is_queued());
        assert_eq!(owner.gate.waiting(), 2);

        owner.put();
        assert_eq!((woken(&a_wakes), woken(&c_wakes)), (1, 0));
        assert_eq!(owner.poll(a.as_mut(), &a_wakes), Poll::Ready(Ok(())));
        owner.put();
        assert_eq!(woken(&c_wakes), 1);
        assert_eq!(owner.poll(c.as_mut(), &c_wakes), Poll::Ready(Ok(())));
        assert_eq!(woken(&b_wakes), 0);
        assert_eq!(owner.gate.waiting(), 0);
        assert!(!owner.gate.has_waiters());
    }

    #[test]
    fn a_notified_waiter_that_loses_the_unit_keeps_its_place() {
        let owner = Owner::new();
        let (a_wakes, b_wakes) = (wakes(), wakes());
        let mut a = pin!(owner.gate.waiter());
        let mut b = pin!(owner.gate.waiter());
        assert!(owner.poll(a.as_mut(), &a_wakes).is_pending());
        assert!(owner.poll(b.as_mut(), &b_wakes).is_pending());

        owner.put();
        assert_eq!(woken(&a_wakes), 1);
        // A caller that never waited takes the unit before `a` runs.
        assert_eq!(owner.take(), Some(()));
        assert!(owner.poll(a.as_mut(), &a_wakes).is_pending());
        assert_eq!(owner.gate.waiting(), 2);

        // `a` went back to the front: the next unit wakes it, not `b`.
        owner.put();
        assert_eq!((woken(&a_wakes), woken(&b_wakes)), (2, 0));
        assert_eq!(owner.poll(a.as_mut(), &a_wakes), Poll::Ready(Ok(())));
        assert_eq!(owner.gate.waiting(), 1);
    }

    #[test]
    fn a_dropped_notified_waiter_passes_the_wakeup_on() {
        let owner = Owner::new();
        let b_wakes = wakes();
        let mut b = pin!(owner.gate.waiter());
        {
            let mut a = pin!(owner.gate.waiter());
            assert!(owner.poll(a.as_mut(), &wakes()).is_pending());
            assert!(owner.poll(b.as_mut(), &b_wakes).is_pending());
            owner.put();
            assert_eq!(woken(&b_wakes), 0);
        }
        assert_eq!(woken(&b_wakes), 1);
        assert_eq!(owner.poll(b.as_mut(), &b_wakes), Poll::Ready(Ok(())));
        assert_eq!(owner.gate.waiting(), 0);
    }

    #[test]
    fn close_wakes_every_waiter_with_closed() {
        let owner = Owner::new();
        let all = [wakes(), wakes(), wakes()];
        let mut waiters = [
            Box::pin(owner.gate.waiter()),
            Box::pin(owner.gate.waiter()),
            Box::pin(owner.gate.waiter()),
        ];
        for (waiter, wakes) in waiters.iter_mut().zip(&all) {
            assert!(owner.poll(waiter.as_mut(), wakes).is_pending());
        }
        owner.gate.close();
        assert_eq!(owner.gate.waiting(), 0);
        for (waiter, wakes) in waiters.iter_mut().zip(&all) {
            assert_eq!(woken(wakes), 1);
            assert_eq!(owner.poll(waiter.as_mut(), wakes), Poll::Ready(Err(Closed)));
            assert!(!waiter.is_queued());
        }
    }
}
