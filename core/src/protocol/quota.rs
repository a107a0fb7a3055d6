//! Quotas: a counting limiter whose permits hold no reference to it, for keyed admission.
//!
//! # Why not a [`Limit`](crate::protocol::limit::Limit)
//!
//! A permit that must outlive the caller's borrow (keyed admission moves it into a blocking
//! closure) has to keep its limiter's memory alive. An [`OwnedPermit`](crate::protocol::limit::OwnedPermit)
//! holds an `Arc`, so every admission pays a reference-count increment and every release a
//! decrement: two more locked read-modify-writes beside the two the permit itself costs. The
//! count of permits out cannot stand in for that reference count on a `Limit`: its release is a
//! `fetch_add` on the count **followed by** a load of the gate's `WAITING` bit (the Dekker
//! pairing that keeps a wake-up from being lost), so the count says "returned" while the
//! releaser still reads the limiter.
//!
//! A [`Quota`] folds what the release must check into the word it changes, so a release with
//! nobody waiting is **one CAS and nothing after it**, and the permits out can be the quota's
//! lifetime.
//!
//! # The word
//!
//! One `AtomicU64`, cache-padded:
//!
//! | bits | field | meaning |
//! | --- | --- | --- |
//! | 0..20 | `free` | permits not out (`<= capacity <=` [`MAX_QUOTA`]) |
//! | 20..40 | `slow` | releases on the slow path still touching the quota (each holds a permit, so `<= capacity`) |
//! | 40..62 | `waiters` | wait futures that may be queued on the gate |
//! | 62 | `CLOSED` | no permit is handed out again |
//! | 63 | `GONE` | the owner ([`QuotaHandle`]) let go |
//!
//! * **Take** ([`Quota::try_acquire`]): a CAS that decrements `free` if it is not zero and
//!   `CLOSED` is clear.
//! * **Release, fast** ([`QuotaPermit`]'s drop): a CAS that increments `free`, made only while
//!   `waiters` is zero. That is the release's last access to the quota.
//! * **Wait** ([`Quota::acquire`]): after a failed take, the future adds itself to `waiters`
//!   (one RMW on the word) and only then queues on the [`Gate`], retrying the take after it
//!   queued, as [`crate::protocol::gate`] describes. Since the waiter's increment and the fast release's
//!   CAS are RMWs of one word, one is ordered before the other: either the release's CAS sees
//!   `waiters` and takes the slow path, or the waiter's later take sees the freed permit.
//! * **Release, slow** (`waiters` not zero): the releaser first adds itself to `slow`, then
//!   does what a [`Limit`](crate::protocol::limit::Limit) release does (hand the permit to the oldest
//!   waiter, or free it and notify the gate), and last takes itself out of `slow`.
//! * **Close** ([`Quota::close`]): set `CLOSED`, then close the gate (every waiter resolves).
//!
//! # Lifetime
//!
//! A quota lives in its own allocation, reached by its owner's [`QuotaHandle`] and by raw
//! pointers in the permits and wait futures. The handle's drop sets `GONE`. The allocation is
//! freed by the one RMW that leaves the word at **`GONE`, every permit free, no waiter and no
//! slow releaser**: the handle's `fetch_or`, a fast release's CAS or a slow release's final
//! `fetch_sub`. Whoever makes that move is the last party that can reach the quota (nobody
//! can take a permit from a quota whose handle is gone, a wait future borrows the handle, a
//! fast releaser's CAS was its last access, and a slow releaser is counted until its last),
//! so no access can follow the free. Exactly one RMW makes that move, because no RMW changes
//! the word after it.
//!
//! # Orderings
//!
//! The fast take and release are `AcqRel` CASes (a permit's holder must see the previous
//! holder's writes, as with a mutex). The waiter's increment, the take it retries after
//! queueing and the slow release's free are `SeqCst`: they take part in the gate's Dekker
//! pairing on the gate's own word. The RMW that frees the allocation reads the value the
//! others released (every RMW of the word is at least `Release`, and an RMW continues the
//! release sequence), so it sees all their accesses before it frees.
//!
//! This module owns the word and the allocation; the wait queue is [`crate::protocol::gate`]'s.

use std::fmt;
use std::future::Future;
use std::num::NonZeroU64;
use std::pin::Pin;
use std::ptr::NonNull;
use std::task::{Context, Poll};

use crate::error::{Closed, ConfigError, TryAcquireError};
use crate::protocol::gate::{Gate, WaitState};
use crate::sync::{trace_transition, AtomicU64, CachePadded, Ordering};

/// Bits of the `free` field (and of `slow`, which never exceeds the capacity).
const COUNT_BITS: u32 = 20;
/// The largest capacity of a [`Quota`]: about a million permits.
pub const MAX_QUOTA: usize = (1 << COUNT_BITS) - 1;

const FREE_ONE: u64 = 1;
const FREE_MASK: u64 = (1 << COUNT_BITS) - 1;
const SLOW_ONE: u64 = 1 << COUNT_BITS;
const SLOW_MASK: u64 = FREE_MASK << COUNT_BITS;
const WAITER_SHIFT: u32 = 2 * COUNT_BITS;
const WAITER_ONE: u64 = 1 << WAITER_SHIFT;
const WAITERS_MASK: u64 = ((1 << 22) - 1) << WAITER_SHIFT;
const CLOSED: u64 = 1 << 62;
const GONE: u64 = 1 << 63;

/// The token a slow release hands to a waiter with its permit (the gate wants a non-zero one).
const HANDOFF: NonZeroU64 = NonZeroU64::MIN;

/// One value of the word, read through typed accessors.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Word(u64);

impl Word {
    fn free(self) -> usize {
        (self.0 & FREE_MASK) as usize
    }

    fn slow(self) -> u64 {
        (self.0 & SLOW_MASK) >> COUNT_BITS
    }

    fn waiters(self) -> u64 {
        (self.0 & WAITERS_MASK) >> WAITER_SHIFT
    }

    fn closed(self) -> bool {
        self.0 & CLOSED != 0
    }

    /// Whether this value leaves nobody who can reach the quota (see the module docs,
    /// *Lifetime*).
    fn done(self, capacity: usize) -> bool {
        self.0 & GONE != 0 && self.free() == capacity && self.0 & (SLOW_MASK | WAITERS_MASK) == 0
    }
}

impl fmt::Debug for Word {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Word")
            .field("free", &self.free())
            .field("slow", &self.slow())
            .field("waiters", &self.waiters())
            .field("closed", &self.closed())
            .field("gone", &(self.0 & GONE != 0))
            .finish()
    }
}

/// A counting limiter whose permits hold no reference to it. See the [module documentation](self).
///
/// Created and owned through a [`QuotaHandle`]; permits and waits reach it by pointer.
pub struct Quota {
    /// INVARIANT: `free + permits out == capacity`; `slow <= permits out`; `waiters` counts
    /// the wait futures between their increment and their decrement.
    word: CachePadded<AtomicU64>,
    /// The configured number of permits (fixed).
    capacity: usize,
    gate: Gate,
    /// Under loom the allocation is never given back, so that a use after the free is caught
    /// (by this mark) rather than undefined: 0 while live, then which party freed it
    /// ([`Freer`] as a number).
    #[cfg(slotpool_loom)]
    freed: crate::sync::AtomicUsize,
}

/// Which party freed a quota's allocation (the one whose RMW left its word done).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Freer {
    /// The owner's handle, dropped after every permit was back.
    Owner = 1,
    /// A release on the fast path, the last permit back after the owner was gone.
    FastRelease = 2,
    /// A release on the slow path, at its final RMW.
    SlowRelease = 3,
}

/// The owner's handle on a [`Quota`]: it creates the quota, lends it out, and lets go of it on
/// drop (the quota's allocation is then freed as soon as no permit, wait or release can reach
/// it).
pub struct QuotaHandle {
    /// INVARIANT: points at a live quota whose `GONE` bit is clear while this handle lives.
    quota: NonNull<Quota>,
}

// SAFETY: the handle only lends out `&Quota` (which is `Sync`: atomics, a mutex-guarded gate)
// and its drop is one atomic RMW plus, for the last party, freeing an allocation that nothing
// else can reach; none of it depends on the thread.
unsafe impl Send for QuotaHandle {}
// SAFETY: as above; `&QuotaHandle` only gives `&Quota`.
unsafe impl Sync for QuotaHandle {}

impl QuotaHandle {
    /// A quota of `capacity` permits.
    ///
    /// # Errors
    /// [`ConfigError::Zero`] for zero, [`ConfigError::TooLarge`] above [`MAX_QUOTA`].
    pub fn new(capacity: usize) -> Result<Self, ConfigError> {
        if capacity == 0 {
            return Err(ConfigError::Zero("capacity"));
        }
        if capacity > MAX_QUOTA {
            return Err(ConfigError::TooLarge {
                name: "capacity",
                value: capacity as u64,
                max: MAX_QUOTA as u64,
            });
        }
        let quota = Box::new(Quota {
            word: CachePadded::new(AtomicU64::new(capacity as u64)),
            capacity,
            gate: Gate::new(),
            #[cfg(slotpool_loom)]
            freed: crate::sync::AtomicUsize::new(0),
        });
        Ok(Self {
            quota: NonNull::from(Box::leak(quota)),
        })
    }
}

impl std::ops::Deref for QuotaHandle {
    type Target = Quota;

    fn deref(&self) -> &Quota {
        // SAFETY: the handle's invariant: `GONE` is clear while it lives, and the allocation is
        // freed only once `GONE` is set.
        unsafe { self.quota.as_ref() }
    }
}

impl Drop for QuotaHandle {
    fn drop(&mut self) {
        let quota: &Quota = self;
        quota.assert_live();
        let after = Word(quota.word.fetch_or(GONE, Ordering::AcqRel) | GONE);
        trace_transition!("quota: owner gone ({:?})", after);
        if after.done(quota.capacity) {
            // SAFETY: this RMW left the word done: no permit, wait or release can reach it.
            unsafe { Quota::free(self.quota, Freer::Owner) };
        }
    }
}

impl fmt::Debug for QuotaHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

impl Quota {
    /// The configured number of permits.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Free permits right now (a snapshot).
    pub fn available(&self) -> usize {
        self.load().free()
    }

    /// Permits out right now (a snapshot).
    pub fn in_use(&self) -> usize {
        self.capacity.saturating_sub(self.available())
    }

    /// Tasks waiting in the gate's queue right now (a snapshot).
    pub fn waiting(&self) -> usize {
        self.gate.waiting()
    }

    /// Whether [`Quota::close`] was called.
    pub fn is_closed(&self) -> bool {
        self.load().closed()
    }

    fn load(&self) -> Word {
        Word(self.word.load(Ordering::Acquire))
    }

    /// Closes the quota: waiters and later acquires get [`Closed`]. Permits already out stay
    /// valid and are returned as usual. Idempotent.
    pub fn close(&self) {
        self.word.fetch_or(CLOSED, Ordering::AcqRel);
        self.gate.close();
    }

    /// Takes a permit if one is free, without waiting: one CAS.
    ///
    /// The first CAS expects the quota idle (every permit free, nothing else set) rather than
    /// loading the word first: when it is, the take is the CAS alone, and when it is not the
    /// failed CAS returns the word to decide on, so a word another core wrote moves to this
    /// core once, not twice (a load, then the CAS).
    #[inline]
    pub fn try_acquire(&self) -> Result<QuotaPermit, TryAcquireError> {
        self.try_acquire_with(self.capacity)
    }

    /// [`Quota::try_acquire`] given the quota's capacity by a caller that keeps a copy of it
    /// beside its pointer to the quota (a route table's slot), so the CAS waits for no load of
    /// the quota's own fields. The capacity must be the quota's (checked in debug builds): it
    /// seeds the first CAS, which is made without looking at its guess because the quota's
    /// capacity (1 to [`MAX_QUOTA`]) is an open word with permits free, and the permit hands it
    /// on to its release, whose first guess it is too.
    #[inline]
    pub(crate) fn try_acquire_with(&self, capacity: usize) -> Result<QuotaPermit, TryAcquireError> {
        debug_assert_eq!(capacity, self.capacity, "a stale copy of the capacity");
        // The first guess, the idle word, is open with every permit free (a capacity is at
        // least 1), so its CAS needs no check before it: only a word it did not expect is
        // decided on.
        let mut seen = capacity as u64;
        loop {
            match self.word.compare_exchange_weak(
                seen,
                seen - FREE_ONE,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Ok(self.permit_with(capacity)),
                // Another taker or a releaser moved the word: decide again on its value.
                Err(actual) => seen = actual,
            }
            let word = Word(seen);
            if word.closed() {
                return Err(TryAcquireError::Closed);
            }
            if word.free() == 0 {
                return Err(TryAcquireError::NoCapacity);
            }
        }
    }

    /// Waits for a permit. Cancel-safe: dropping the future before it resolves takes no
    /// permit, and a wake-up (or a permit) handed to it passes to the next waiter.
    pub fn acquire(&self) -> QuotaWait<'_> {
        QuotaWait {
            quota: self,
            wait: WaitState::new(),
            counted: false,
        }
    }

    /// A permit for a unit this caller has just taken.
    fn permit(&self) -> QuotaPermit {
        self.permit_with(self.capacity)
    }

    /// [`Quota::permit`] given the capacity by a caller that has it at hand.
    #[inline(always)]
    fn permit_with(&self, capacity: usize) -> QuotaPermit {
        QuotaPermit {
            quota: NonNull::from(self),
            capacity,
        }
    }

    /// A waiter's take: `SeqCst`, for the gate's Dekker pairing. If permits remain and others
    /// still wait, the next one is woken (as [`Limit`](crate::protocol::limit::Limit) does).
    fn take_for_waiter(&self) -> Option<()> {
        let mut seen = self.word.load(Ordering::SeqCst);
        loop {
            if Word(seen).free() == 0 {
                return None;
            }
            match self.word.compare_exchange_weak(
                seen,
                seen - FREE_ONE,
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => break,
                Err(actual) => seen = actual,
            }
        }
        if Word(seen - FREE_ONE).free() > 0 {
            self.gate.notify_one();
        }
        Some(())
    }

    /// Returns one permit. See the module docs: one CAS with nobody waiting; otherwise the
    /// slow path, counted in `slow` until its last access.
    ///
    /// # Safety
    /// `quota` points at a live quota and the caller gives up a permit it holds (which keeps
    /// the quota live until this call's release of it).
    #[inline]
    unsafe fn release(quota: NonNull<Quota>) {
        // SAFETY: as for this function.
        let capacity = unsafe { quota.as_ref() }.capacity;
        // SAFETY: as for this function.
        unsafe { Self::release_with(quota, capacity) }
    }

    /// [`Quota::release`] given the quota's capacity (a permit carries it), so the CAS's first
    /// guess needs no load of the quota's fields.
    ///
    /// # Safety
    /// As [`Quota::release`]; `capacity` is the quota's.
    #[inline]
    unsafe fn release_with(quota: NonNull<Quota>, capacity: usize) {
        // SAFETY: the caller holds a permit: the word is not done, so the allocation is live.
        let this = unsafe { quota.as_ref() };
        this.assert_live();
        // Expect this permit to be the only one out (as `try_acquire` expects an idle quota):
        // the common case costs the CAS alone. That guess has no waiter, so the first CAS
        // needs no check: `waiters` is looked at in each word the CAS did not expect.
        let mut seen = capacity as u64 - FREE_ONE;
        loop {
            let next = seen + FREE_ONE;
            match this
                .word
                .compare_exchange_weak(seen, next, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => {
                    // The CAS was this release's last access to the quota: from here on only
                    // the copy of its capacity is read (another party may free the quota now,
                    // unless this CAS left it done).
                    debug_assert!(Word(next).free() <= capacity, "released too many");
                    if Word(next).done(capacity) {
                        // SAFETY: this CAS left the word done; nobody else can reach it.
                        unsafe { Self::free(quota, Freer::FastRelease) };
                    }
                    return;
                }
                // A taker, another releaser, a waiter or the owner moved the word: decide again.
                Err(actual) => seen = actual,
            }
            if Word(seen).waiters() != 0 {
                // SAFETY: as for this function; the permit is still held.
                return unsafe { Self::release_slow(quota) };
            }
        }
    }

    /// The release with waiters about: hand the permit to the oldest waiter, or free it and
    /// notify, while counted in `slow` so the quota outlives this call.
    ///
    /// # Safety
    /// As [`Quota::release`].
    #[cold]
    #[inline(never)]
    unsafe fn release_slow(quota: NonNull<Quota>) {
        // SAFETY: the caller holds a permit, and once counted in `slow` this call keeps the
        // quota live by itself until its final RMW.
        let this = unsafe { quota.as_ref() };
        this.word.fetch_add(SLOW_ONE, Ordering::AcqRel);
        if !this.gate.handoff(HANDOFF) {
            this.word.fetch_add(FREE_ONE, Ordering::SeqCst);
            this.gate.notify_one();
        }
        this.assert_live();
        let after = Word(this.word.fetch_sub(SLOW_ONE, Ordering::AcqRel) - SLOW_ONE);
        trace_transition!("quota: slow release done ({:?})", after);
        if after.done(this.capacity) {
            // SAFETY: this RMW left the word done; nobody else can reach it.
            unsafe { Self::free(quota, Freer::SlowRelease) };
        }
    }

    /// Frees the allocation.
    ///
    /// # Safety
    /// Called once, by the party whose RMW left the word done; nobody can reach the quota.
    unsafe fn free(quota: NonNull<Quota>, by: Freer) {
        trace_transition!("quota: freed by {:?}", by);
        #[cfg(not(slotpool_loom))]
        {
            let _ = by;
            // SAFETY: allocated by `QuotaHandle::new` through `Box::leak`; the caller is the
            // last party (see above), so no reference outlives this.
            drop(unsafe { Box::from_raw(quota.as_ptr()) });
        }
        #[cfg(slotpool_loom)]
        {
            // SAFETY: as above; under loom the allocation is kept and only marked freed.
            let this = unsafe { quota.as_ref() };
            assert_eq!(
                this.freed.swap(by as usize, Ordering::SeqCst),
                0,
                "a quota freed twice"
            );
        }
    }

    /// Under loom: fails if the quota was freed already (a use after the free).
    #[inline(always)]
    fn assert_live(&self) {
        #[cfg(slotpool_loom)]
        assert_eq!(
            self.freed.load(Ordering::SeqCst),
            0,
            "a quota used after it was freed"
        );
    }

    /// Under loom, which party gave the quota's allocation up, if any (for the models).
    #[cfg(slotpool_loom)]
    pub fn freed_by(&self) -> Option<Freer> {
        match self.freed.load(Ordering::SeqCst) {
            0 => None,
            1 => Some(Freer::Owner),
            2 => Some(Freer::FastRelease),
            _ => Some(Freer::SlowRelease),
        }
    }
}

impl fmt::Debug for Quota {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Quota")
            .field("capacity", &self.capacity)
            .field("word", &self.load())
            .field("waiting", &self.waiting())
            .finish()
    }
}

/// A permit of a [`Quota`]: `Send + 'static`, it holds no reference count; the quota stays
/// allocated while any permit is out. Returns itself on drop (also during a panic's unwind).
#[must_use = "dropping the permit returns it at once"]
pub struct QuotaPermit {
    /// INVARIANT: a live quota, of which this permit is one out (so it stays live).
    quota: NonNull<Quota>,
    /// The quota's capacity, the release's first guess of the word (see [`Quota::release`]).
    capacity: usize,
}

// SAFETY: a permit is a claim on an atomic count; returning it from any thread is an atomic
// RMW (and the slow path locks the gate's mutex), and the quota it points to is `Sync`.
unsafe impl Send for QuotaPermit {}
// SAFETY: `&QuotaPermit` gives access to nothing but the quota's `Sync` state.
unsafe impl Sync for QuotaPermit {}

impl QuotaPermit {
    /// The quota this permit belongs to.
    pub fn quota(&self) -> &Quota {
        // SAFETY: the permit's invariant keeps the quota live while it exists.
        unsafe { self.quota.as_ref() }
    }
}

impl Drop for QuotaPermit {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: the permit's invariant; this is its one release.
        unsafe { Quota::release_with(self.quota, self.capacity) }
    }
}

impl fmt::Debug for QuotaPermit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QuotaPermit").finish_non_exhaustive()
    }
}

pin_project_lite::pin_project! {
    /// Future of [`Quota::acquire`]. `!Unpin`: its place in the gate's queue lives inside it.
    #[must_use = "futures do nothing unless polled"]
    pub struct QuotaWait<'a> {
        quota: &'a Quota,
        // Structurally pinned: never moved out of the future.
        #[pin]
        wait: WaitState<'a>,
        // Whether this future is counted in the quota's `waiters`.
        counted: bool,
    }

    impl<'a> PinnedDrop for QuotaWait<'a> {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            if this.wait.cancel_handoff().is_some() {
                // SAFETY: a permit was handed to this waiter and not used: give it back.
                unsafe { Quota::release(NonNull::from(*this.quota)) };
            }
            uncount(this.quota, this.counted);
        }
    }
}

impl Future for QuotaWait<'_> {
    type Output = Result<QuotaPermit, Closed>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let quota = *this.quota;
        if !*this.counted {
            match quota.try_acquire() {
                Ok(permit) => return Poll::Ready(Ok(permit)),
                Err(TryAcquireError::Closed) => return Poll::Ready(Err(Closed)),
                Err(_) => {}
            }
            // Counted before it queues: from here on, a release cannot take the fast path
            // without this waiter's retried take seeing the permit it frees.
            let before = quota.word.fetch_add(WAITER_ONE, Ordering::SeqCst);
            debug_assert!(
                Word(before).waiters() < WAITERS_MASK >> WAITER_SHIFT,
                "too many waiters on one quota"
            );
            *this.counted = true;
        }
        let polled = this.wait.poll_until_handoff(
            &quota.gate,
            cx,
            || quota.take_for_waiter(),
            |_| (),
            // SAFETY: the unit handed over is a permit out of this quota, now given back.
            |_| unsafe { Quota::release(NonNull::from(quota)) },
        );
        match polled {
            Poll::Pending => Poll::Pending,
            Poll::Ready(result) => {
                uncount(quota, this.counted);
                Poll::Ready(result.map(|()| quota.permit()))
            }
        }
    }
}

/// Takes a waiter out of `quota`'s count of waiters, if it is `counted` there.
fn uncount(quota: &Quota, counted: &mut bool) {
    if std::mem::take(counted) {
        // The quota is borrowed, so its owner is live: this can never leave it done.
        quota.word.fetch_sub(WAITER_ONE, Ordering::AcqRel);
    }
}

impl fmt::Debug for QuotaWait<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QuotaWait")
            .field("wait", &self.wait)
            .field("counted", &self.counted)
            .finish()
    }
}
