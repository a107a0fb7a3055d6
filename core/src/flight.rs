//! Single-flight registration: one shared establishment per key, lock-free lookups of the
//! finished ones, and a use stamp that decides "fresh, stale or retired" with one word.
//!
//! This is the executor-agnostic core of [`crate::session`]. It uses no tokio, reads no clock
//! (callers pass times in as nanoseconds) and wakes plain [`Waker`]s, so the loom models in
//! `slotpool-loom-tests` drive exactly this code.
//!
//! # The registry
//!
//! A [`Registry`] maps a key to an [`Entry`]: either [`Entry::Ready`] (a finished value, for
//! the session pool a live connection) or [`Entry::Flying`] (an establishment in progress,
//! shared through an `Arc<`[`Flight`]`>`). The keys are spread over a power-of-two number of
//! shards. Each shard's map is **published** (arc-swap; a mutex around an `Arc` under loom) and
//! replaced whole by writers, copy-on-write:
//!
//! * **Read path** ([`Registry::get`]): hash, pick the shard, load its published map, look the
//!   key up, clone the entry. No lock, no RMW on shared state other than the entry's reference
//!   count; readers of different keys never write a common cache line.
//! * **Write path** (claim, install, abandon, remove, close): take the shard's writer mutex,
//!   re-read the map, copy it, change the copy, publish it. Writes are the slow path (a new
//!   session, a finished establishment, a release); a shard holds `len / shards` entries, so
//!   the copy is short.
//!
//! Why not a single mutex-guarded map (R3) or a read-write lock? A mutex serialises every hot
//! acquire; a read-write lock makes every reader write the lock word, so readers on different
//! cores bounce one cache line. Why not one published map? A copy of the whole map on every
//! new session is O(sessions); sharding makes it O(sessions / shards).
//!
//! # Single flight
//!
//! [`Registry::claim`] runs under the shard's writer mutex: if the key is present the caller
//! gets it ([`Claim::Ready`] or [`Claim::Join`]); otherwise it inserts a fresh
//! [`Entry::Flying`] and becomes the **leader** ([`Claim::Lead`]). Since claims of one key are
//! serialised by that mutex and each re-reads the current map, at most one flight per key is
//! ever in the map. Readers that saw a `Flying` entry in an older published map join the same
//! `Arc<Flight>`, so they too share the one establishment.
//!
//! The leader ends its flight in one of two ways:
//!
//! * success: [`Registry::install`] replaces *its own* `Flying` entry (compared by pointer)
//!   with `Ready(value)`, then [`Flight::complete`] hands the value to every joiner. If the
//!   entry is no longer its own (released, or the registry closed, while it was working),
//!   `install` hands the value back and the leader must dispose of it;
//! * failure: [`Registry::abandon`] removes its own `Flying` entry, then `complete` hands the
//!   error to every joiner. The next claim starts a new flight.
//!
//! Installing before completing means that a caller either finds `Ready` in the map or is
//! (or will be) registered with the flight, which completes after the value is reachable.
//!
//! # Flights
//!
//! A [`Flight`] is a mutex-guarded state, `Pending(waiters)` or `Done(result)`. Waiting
//! ([`Flight::wait`]) registers a waker under the mutex only while pending, and completion
//! moves to `Done` and drains the wakers under the same mutex, so a waiter either sees `Done`
//! or is woken: no lost wake-up. This mutex is only ever taken by callers that are waiting for
//! an establishment anyway (milliseconds of network), never on the read path.
//!
//! # Use stamps
//!
//! A [`UseStamp`] is one `AtomicU64`: the time of last use (nanoseconds since the pool's base
//! instant) or `RETIRED`. Three operations race on it, and each is a single CAS, so exactly one
//! outcome wins:
//!
//! * [`UseStamp::touch`] (an acquire): refresh the time if the value is fresh, fail if stale
//!   or retired;
//! * [`UseStamp::retire_if_idle`] (the reaper, or an acquire that found it stale): move a stale
//!   time to `RETIRED`;
//! * [`UseStamp::retire`] (a release, a dead connection, stop): move anything to `RETIRED`.
//!
//! So a reap and a concurrent hot acquire cannot both succeed: either the acquire refreshed
//! the stamp (and the reaper's CAS fails on the new value), or the reaper retired it (and the
//! acquire's CAS fails, sees `RETIRED` and rebuilds). Whoever moves the word to `RETIRED` is the
//! one party that frees the value's resources, which is what makes "capacity returned exactly
//! once" structural. Orderings are `AcqRel` on the CAS and `Acquire` on loads: the winner of
//! `RETIRED` must see every earlier toucher's writes, nothing more.
//!
//! This module owns the maps, flights and stamps; it never frees capacity or closes
//! connections itself (its callers do, after winning a stamp).

use std::borrow::Borrow;
use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::hash::{BuildHasher, Hash};
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use crate::sync::{
    trace_transition, Arc, AtomicBool, AtomicU64, CachePadded, Mutex, Ordering, Published,
};

/// The hasher used to pick a shard and inside each shard's map (randomly keyed per process,
/// so callers that choose keys cannot aim them at one shard).
type Hasher = std::collections::hash_map::RandomState;

/// A registry's entry for one key.
pub enum Entry<V, T> {
    /// A finished value.
    Ready(V),
    /// An establishment in progress; join it to get its result.
    Flying(Arc<Flight<T>>),
}

impl<V: Clone, T> Clone for Entry<V, T> {
    fn clone(&self) -> Self {
        match self {
            Entry::Ready(value) => Entry::Ready(value.clone()),
            Entry::Flying(flight) => Entry::Flying(Arc::clone(flight)),
        }
    }
}

impl<V: fmt::Debug, T> fmt::Debug for Entry<V, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Entry::Ready(value) => f.debug_tuple("Ready").field(value).finish(),
            Entry::Flying(_) => f.write_str("Flying"),
        }
    }
}

/// What [`Registry::claim`] found or did.
pub enum Claim<V, T> {
    /// The key holds a finished value.
    Ready(V),
    /// Another caller leads an establishment for the key: wait on its flight.
    Join(Arc<Flight<T>>),
    /// The caller inserted this flight and must end it with [`Registry::install`] or
    /// [`Registry::abandon`] and then [`Flight::complete`].
    Lead(Arc<Flight<T>>),
    /// The registry is closed; nothing new is registered.
    Closed,
}

impl<V: fmt::Debug, T> fmt::Debug for Claim<V, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Claim::Ready(value) => f.debug_tuple("Ready").field(value).finish(),
            Claim::Join(_) => f.write_str("Join"),
            Claim::Lead(_) => f.write_str("Lead"),
            Claim::Closed => f.write_str("Closed"),
        }
    }
}

/// One shard: a published map and the mutex its writers take.
struct Shard<K, V, T> {
    /// INVARIANT: replaced only by a holder of `write`, so no update is lost; at most one
    /// `Flying` entry per key.
    map: Published<HashMap<K, Entry<V, T>, Hasher>>,
    /// Serialises writers of `map`. Never taken on the read path.
    write: Mutex<()>,
}

/// A sharded key → [`Entry`] map with lock-free reads and single-flight claims.
///
/// See the [module documentation](self) for the protocol.
pub struct Registry<K, V, T> {
    /// INVARIANT: `shards.len()` is a power of two.
    shards: Box<[CachePadded<Shard<K, V, T>>]>,
    /// Picks the shard of a key.
    hasher: Hasher,
    /// Set once by [`Registry::close`] (before it drains any shard). Read under a shard's
    /// writer mutex, so a writer that runs after the drain of its shard always sees it.
    closed: AtomicBool,
}

impl<K, V, T> Registry<K, V, T>
where
    K: Hash + Eq + Clone,
    V: Clone,
{
    /// A registry with `shards` shards (rounded up to a power of two, at least one).
    pub fn new(shards: usize) -> Self {
        let count = shards.max(1).next_power_of_two();
        let shards = (0..count)
            .map(|_| {
                CachePadded::new(Shard {
                    map: Published::new(HashMap::with_hasher(Hasher::new())),
                    write: Mutex::new(()),
                })
            })
            .collect();
        Self {
            shards,
            hasher: Hasher::new(),
            closed: AtomicBool::new(false),
        }
    }

    fn shard<Q>(&self, key: &Q) -> &Shard<K, V, T>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        // The mask keeps the index in range because the length is a power of two; the high
        // bits of the hash are used so the shard choice is independent of the map's buckets.
        let hash = self.hasher.hash_one(key);
        let index = (hash >> 32) as usize & (self.shards.len() - 1);
        &self.shards[index]
    }

    /// The entry for `key`, read without a lock.
    #[inline]
    pub fn get<Q>(&self, key: &Q) -> Option<Entry<V, T>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.shard(key).map.with(|map| map.get(key).cloned())
    }

    /// Returns what `key` holds, or registers a new flight for it with the caller as leader.
    /// `make_key` builds the owned key only when one is inserted.
    pub fn claim<Q>(&self, key: &Q, make_key: impl FnOnce() -> K) -> Claim<V, T>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let shard = self.shard(key);
        let _writer = shard.write.lock();
        if self.closed.load(Ordering::Acquire) {
            return Claim::Closed;
        }
        let current = shard.map.load_full();
        match current.get(key) {
            Some(Entry::Ready(value)) => Claim::Ready(value.clone()),
            Some(Entry::Flying(flight)) => Claim::Join(Arc::clone(flight)),
            None => {
                let flight = Arc::new(Flight::new());
                let mut next = (*current).clone();
                next.insert(make_key(), Entry::Flying(Arc::clone(&flight)));
                shard.map.store(Arc::new(next));
                trace_transition!("registry: claimed, leading a new flight");
                Claim::Lead(flight)
            }
        }
    }

    /// Replaces the leader's own `Flying` entry with `Ready(value)`.
    ///
    /// # Errors
    /// Hands `value` back when the entry is no longer this flight's (it was removed by a
    /// release, or the registry was closed): the caller must dispose of it.
    pub fn install<Q>(&self, key: &Q, flight: &Arc<Flight<T>>, value: V) -> Result<(), V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let shard = self.shard(key);
        let _writer = shard.write.lock();
        if self.closed.load(Ordering::Acquire) {
            return Err(value);
        }
        let current = shard.map.load_full();
        let own = matches!(current.get(key), Some(Entry::Flying(f)) if Arc::ptr_eq(f, flight));
        if !own {
            trace_transition!("registry: install refused, entry gone");
            return Err(value);
        }
        let mut next = (*current).clone();
        if let Some(slot) = next.get_mut(key) {
            *slot = Entry::Ready(value);
        }
        shard.map.store(Arc::new(next));
        trace_transition!("registry: installed");
        Ok(())
    }

    /// Removes the leader's own `Flying` entry (after a failed establishment). Returns whether
    /// it was still there.
    pub fn abandon<Q>(&self, key: &Q, flight: &Arc<Flight<T>>) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.remove_if(
            key,
            |entry| matches!(entry, Entry::Flying(f) if Arc::ptr_eq(f, flight)),
        )
        .is_some()
    }

    /// Removes `key`'s entry if `pred` accepts it, and returns it.
    pub fn remove_if<Q>(
        &self,
        key: &Q,
        pred: impl FnOnce(&Entry<V, T>) -> bool,
    ) -> Option<Entry<V, T>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let shard = self.shard(key);
        let _writer = shard.write.lock();
        let current = shard.map.load_full();
        match current.get(key) {
            Some(entry) if pred(entry) => {}
            _ => return None,
        }
        let mut next = (*current).clone();
        let removed = next.remove(key);
        shard.map.store(Arc::new(next));
        trace_transition!("registry: removed");
        removed
    }

    /// Closes the registry and returns every entry it held. Later claims get
    /// [`Claim::Closed`], later installs are refused. Idempotent.
    pub fn close(&self) -> Vec<Entry<V, T>> {
        self.closed.store(true, Ordering::Release);
        let mut drained = Vec::new();
        for shard in self.shards.iter() {
            let _writer = shard.write.lock();
            let current = shard.map.load_full();
            if current.is_empty() {
                continue;
            }
            drained.extend(current.values().cloned());
            shard
                .map
                .store(Arc::new(HashMap::with_hasher(current.hasher().clone())));
        }
        trace_transition!("registry: closed, drained {}", drained.len());
        drained
    }

    /// Whether [`Registry::close`] was called.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// A snapshot of every `Ready` entry (read without locks, shard by shard).
    pub fn ready(&self) -> Vec<(K, V)> {
        let mut out = Vec::new();
        for shard in self.shards.iter() {
            shard.map.with(|map| {
                out.extend(map.iter().filter_map(|(key, entry)| match entry {
                    Entry::Ready(value) => Some((key.clone(), value.clone())),
                    Entry::Flying(_) => None,
                }));
            });
        }
        out
    }

    /// Number of entries (both kinds), a snapshot.
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|shard| shard.map.with(|map| map.len()))
            .sum()
    }

    /// Whether the registry holds no entry (a snapshot).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<K, V, T> fmt::Debug for Registry<K, V, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registry")
            .field("shards", &self.shards.len())
            .field("closed", &self.closed.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// The shared result of one establishment: pending with waiters, then done with a value that
/// every waiter receives a clone of.
pub struct Flight<T> {
    /// INVARIANT: moves from `Pending` to `Done` once and never back; `waiters` is empty once
    /// done (drained by the completer, who wakes them after unlocking).
    state: Mutex<FlightState<T>>,
}

enum FlightState<T> {
    Pending {
        /// Registered waiters by ticket; a waiter dropped before completion removes its own.
        waiters: Vec<(u64, Waker)>,
        /// Next ticket to hand out.
        next: u64,
    },
    Done(T),
}

impl<T> Flight<T> {
    /// A pending flight with no waiters.
    pub fn new() -> Self {
        Self {
            state: Mutex::new(FlightState::Pending {
                waiters: Vec::new(),
                next: 0,
            }),
        }
    }

    /// Ends the flight with `value` and wakes every waiter. Only the first call has an
    /// effect; it returns whether this call was it.
    pub fn complete(&self, value: T) -> bool {
        let waiters = {
            let mut state = self.state.lock();
            match &mut *state {
                FlightState::Done(_) => return false,
                FlightState::Pending { waiters, .. } => {
                    let waiters = std::mem::take(waiters);
                    *state = FlightState::Done(value);
                    waiters
                }
            }
        };
        trace_transition!("flight: completed, waking {}", waiters.len());
        for (_, waker) in waiters {
            waker.wake();
        }
        true
    }

    /// Whether the flight is done.
    pub fn is_done(&self) -> bool {
        matches!(&*self.state.lock(), FlightState::Done(_))
    }

    /// Number of registered waiters (a snapshot; zero once done).
    pub fn waiters(&self) -> usize {
        match &*self.state.lock() {
            FlightState::Pending { waiters, .. } => waiters.len(),
            FlightState::Done(_) => 0,
        }
    }

    fn deregister(&self, ticket: u64) {
        if let FlightState::Pending { waiters, .. } = &mut *self.state.lock() {
            waiters.retain(|(t, _)| *t != ticket);
        }
    }
}

impl<T: Clone> Flight<T> {
    /// The result, if the flight is done.
    pub fn result(&self) -> Option<T> {
        match &*self.state.lock() {
            FlightState::Done(value) => Some(value.clone()),
            FlightState::Pending { .. } => None,
        }
    }

    /// Waits for the result.
    ///
    /// Cancel-safe: dropping the future removes its waker; the flight itself is unaffected
    /// (it is not the waiter's to cancel).
    ///
    /// Under loom (whose `Arc` cannot be a method receiver) call it as `Flight::wait(flight)`,
    /// which also compiles in normal builds.
    #[cfg(not(slotpool_loom))]
    pub fn wait(self: Arc<Self>) -> FlightWait<T> {
        Self::wait_arc(self)
    }

    /// See the non-loom `wait`.
    #[cfg(slotpool_loom)]
    pub fn wait(this: Arc<Self>) -> FlightWait<T> {
        Self::wait_arc(this)
    }

    fn wait_arc(this: Arc<Self>) -> FlightWait<T> {
        FlightWait {
            flight: this,
            ticket: None,
        }
    }

    fn poll_wait(&self, ticket: &mut Option<u64>, cx: &mut Context<'_>) -> Poll<T> {
        let mut state = self.state.lock();
        match &mut *state {
            FlightState::Done(value) => {
                *ticket = None;
                Poll::Ready(value.clone())
            }
            FlightState::Pending { waiters, next } => {
                match ticket {
                    Some(id) => {
                        if let Some((_, waker)) = waiters.iter_mut().find(|(t, _)| t == id) {
                            if !waker.will_wake(cx.waker()) {
                                *waker = cx.waker().clone();
                            }
                        }
                    }
                    None => {
                        let id = *next;
                        *next += 1;
                        waiters.push((id, cx.waker().clone()));
                        *ticket = Some(id);
                    }
                }
                Poll::Pending
            }
        }
    }
}

impl<T> Default for Flight<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> fmt::Debug for Flight<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let done = matches!(&*self.state.lock(), FlightState::Done(_));
        f.debug_struct("Flight").field("done", &done).finish()
    }
}

/// Future of [`Flight::wait`].
#[must_use = "futures do nothing unless polled"]
pub struct FlightWait<T: Clone> {
    flight: Arc<Flight<T>>,
    /// `Some` while registered with the pending flight.
    ticket: Option<u64>,
}

impl<T: Clone> Future for FlightWait<T> {
    type Output = T;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        let this = self.get_mut();
        this.flight.poll_wait(&mut this.ticket, cx)
    }
}

impl<T: Clone> Drop for FlightWait<T> {
    fn drop(&mut self) {
        if let Some(ticket) = self.ticket.take() {
            self.flight.deregister(ticket);
        }
    }
}

impl<T: Clone> fmt::Debug for FlightWait<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FlightWait")
            .field("registered", &self.ticket.is_some())
            .finish()
    }
}

/// The stamp word's value once retired; never a real time (that would be 584 years).
const RETIRED: u64 = u64::MAX;

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

/// Last use of a value, or `RETIRED`, in one atomic word. See the module docs.
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
    #[inline]
    pub fn touch(&self, now: u64, max_idle: u64) -> Touch {
        let now = now.min(RETIRED - 1);
        let mut seen = self.word.load(Ordering::Acquire);
        loop {
            if seen == RETIRED {
                return Touch::Retired;
            }
            if now.saturating_sub(seen) > max_idle {
                return Touch::Stale;
            }
            if seen >= now {
                // Someone stamped this instant (or later) already: nothing to write.
                return Touch::Fresh;
            }
            match self
                .word
                .compare_exchange_weak(seen, now, Ordering::AcqRel, Ordering::Acquire)
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
