//! The directory: one live value per key under a capacity limit, with every decision the
//! session pool makes about what it finds, who frees a value and what a leader may install.
//!
//! The protocol is told on [`Directory`].

use std::borrow::Borrow;
use std::fmt;
use std::hash::Hash;

use super::{Claim, Entry, Flight, Hashed, KeyHashing, Lent, Registry, Taken, Touch, UseStamp};
use crate::error::TryAcquireError;
use crate::protocol::limit::{Limit, OwnedPermit};
use crate::sync::{trace_transition, Arc};

/// A value a [`Directory`] hands out: it carries a [`UseStamp`] and owns resources (for the
/// session pool a connection, its event reader and a permit of the directory's limit) that
/// whoever retires the stamp frees, once.
pub trait Tenant {
    /// The value's use stamp.
    fn stamp(&self) -> &UseStamp;

    /// Whether the value is still usable (for a session: its connection is up and its event
    /// reader runs). Asked on every lookup that finds the value; keep it a load.
    fn is_alive(&self) -> bool;

    /// Frees the value's resources. Called exactly once, by the caller whose retirement of the
    /// stamp won ([`retire`], [`retire_if_idle`]); never call it directly.
    fn free(&self);
}

/// Retires `value` whatever its stamp says; returns whether this call did it (and so freed it).
pub fn retire<V: Tenant + ?Sized>(value: &V) -> bool {
    let won = value.stamp().retire();
    if won {
        value.free();
    }
    won
}

/// Retires `value` only if idle past `max_idle` at `now`; returns whether this call did it (and
/// so freed it). `false` when a touch refreshed it first or someone else retired it.
pub fn retire_if_idle<V: Tenant + ?Sized>(value: &V, now: u64, max_idle: u64) -> bool {
    let won = value.stamp().retire_if_idle(now, max_idle);
    if won {
        value.free();
    }
    won
}

/// The errors a [`Directory`] makes up itself, for a flight it cannot let run or install.
pub trait Refusal: Clone {
    /// Every permit of the limit is out.
    fn exhausted(capacity: usize) -> Self;
    /// The directory (or its limit) is closed.
    fn closed() -> Self;
    /// The key was released while its value was being established.
    fn released() -> Self;
}

/// Most hint words a directory gives one registry shard (32 KiB of words).
const MAX_HINTS: usize = 4096;

/// Why [`Directory::lookup_fresh`] handed nothing out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotFresh {
    /// No hint lends the key's value (none, a spent one, or no value): nothing was done.
    NotLent,
    /// The lent value was dead, stale or retired, and was dealt with as
    /// [`Directory::lookup`]'s [`Step::Again`] says.
    Unusable {
        /// This call retired it for being dead (a rebuild, as `Step::Again` counts one).
        rebuilt: bool,
    },
}

/// What every caller of one flight receives.
pub type Outcome<V, E> = Result<Arc<V>, E>;

/// What a [`Directory::lookup`] or [`Directory::claim`] found or did: the next step of an
/// acquire. (A lookup returns only `Ready`, `Join`, `Vacant` and `Again`; a claim never
/// returns `Vacant`.)
pub enum Step<V, E> {
    /// A live, fresh value; its stamp now says `now` (within [`super::TOUCH_SLACK`]).
    Ready(Lent<V>),
    /// Another caller leads an establishment for the key: wait on its flight.
    Join(Arc<Flight<Outcome<V, E>>>),
    /// ([`Directory::lookup`] only.) Nothing is registered for the key: claim it next.
    Vacant,
    /// A value was there but is not usable (dead, stale or retired already); it has been
    /// retired and removed, so look again. `rebuilt` says whether this caller retired it.
    Again {
        /// Whether this caller's retirement won (and freed the value).
        rebuilt: bool,
    },
    /// ([`Directory::claim`] only.) The caller leads a new flight and holds the capacity for
    /// it: establish a value that owns `permit`, then [`Directory::install`] it (or
    /// [`Directory::abandon`] the flight), and complete the flight with the outcome.
    Lead {
        /// The flight to complete.
        flight: Arc<Flight<Outcome<V, E>>>,
        /// The capacity the new value will own.
        permit: OwnedPermit,
    },
    /// ([`Directory::claim`] only.) The caller would have led, but every permit is out; the
    /// flight was abandoned and completed with [`Refusal::exhausted`] (its joiners have that;
    /// [`Directory::exhausted`] makes the same error for the caller). No payload, so a step
    /// stays small to move on the hot path.
    Exhausted,
    /// The directory is closed.
    Closed,
}

impl<V: fmt::Debug, E> fmt::Debug for Step<V, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Step::Ready(value) => f.debug_tuple("Ready").field(value).finish(),
            Step::Join(_) => f.write_str("Join"),
            Step::Vacant => f.write_str("Vacant"),
            Step::Again { rebuilt } => f.debug_struct("Again").field("rebuilt", rebuilt).finish(),
            Step::Lead { .. } => f.write_str("Lead"),
            Step::Exhausted => f.write_str("Exhausted"),
            Step::Closed => f.write_str("Closed"),
        }
    }
}

/// One live value per key, established once however many callers ask at once, bounded by a
/// [`Limit`] that is never waited on.
///
/// # The protocol
///
/// A directory is a [`Registry`] of `Arc<V>` values (`V:` [`Tenant`]) beside the limit whose
/// permits the values own. Every decision an acquire, a release, the reaper or a stop makes is
/// a method here, so the session pool and the loom models run the same code:
///
/// * **Lookup** ([`Directory::lookup`]): take a prepaid reference to the key's value through
///   its hint (one CAS, no lock; see `hint.rs`); failing that (no hint, or a spent one, which
///   the lookup refills under the write lock first), find the key under the shard's read
///   lock. A `Flying` entry is joined. A `Ready` value, however found, is **checked**:
///   [`UseStamp::touch`] at `now` refreshes a fresh stamp (a load, and a CAS once per
///   [`super::TOUCH_SLACK`]th of the idle bound) and the value is returned if it is also
///   alive. Otherwise it is
///   retired: a fresh but dead value unconditionally ([`retire`]), a stale one only if it is
///   *still* idle when the retirement lands ([`retire_if_idle`]: a concurrent touch that
///   refreshed it wins, and the caller simply looks again and finds it fresh). Whoever wins
///   the stamp frees the value, so of two callers that both found it stale, exactly one frees
///   it and counts a rebuild. A retired value is then removed from the map **by identity**
///   (never a successor installed meanwhile), and the caller looks again.
///   [`Directory::lookup_fresh`] is the first part alone, the hint's answer checked the same
///   way, with a small result for a hot path to return in registers; its caller goes on with
///   `lookup` when it hands nothing out.
/// * **Claim** ([`Directory::claim`]): under the shard's write lock, find the key (checked as
///   above) or become the leader of a new flight. The leader takes a permit without waiting;
///   none left abandons the flight and completes it with [`Refusal::exhausted`], so the
///   joiners that came meanwhile learn it too.
/// * **Install** ([`Directory::install`]): the leader replaces its own flight with the value.
///   If the flight is no longer in the map (released or closed meanwhile) the leader retires
///   the value itself and the outcome is [`Refusal::released`] or [`Refusal::closed`]: the
///   value it built is freed exactly once, by it.
/// * **Release** ([`Directory::release`]): retire a `Ready` value (then remove it by identity),
///   or remove a `Flying` entry so its leader's install is refused.
/// * **Reap** ([`Directory::reap`]): [`retire_if_idle`] every value, and remove the retired.
/// * **Close** ([`Directory::close`]): close the limit and the registry and retire every value
///   that was drained.
///
/// The invariant all of them keep: a permit is owned by exactly one leader or one un-retired
/// value, and a value is freed by exactly the caller that moved its stamp to `RETIRED`.
///
/// Completing a flight is its leader's job (with the outcome [`Directory::install`] returned,
/// or an error after [`Directory::abandon`]), so the leader can count what it did before its
/// joiners wake.
pub struct Directory<K, V, E> {
    registry: Registry<K, Arc<V>, Outcome<V, E>>,
    /// INVARIANT: every permit out is owned by exactly one leader or one un-retired value.
    limit: Arc<Limit>,
}

impl<K, V, E> Directory<K, V, E>
where
    K: Hash + Eq,
    V: Tenant,
    E: Refusal,
{
    /// A directory of `shards` registry shards whose values own permits of `limit`, hashing
    /// keys with [`KeyHashing::Fast`].
    pub fn new(shards: usize, limit: Arc<Limit>) -> Self {
        Self::with_hashing(shards, limit, KeyHashing::default())
    }

    /// A directory of `shards` registry shards whose values own permits of `limit`, hashing
    /// keys as `hashing` says, with
    /// hint words per shard: four per value a shard holds when the limit is full (at least
    /// four, at most 4096).
    pub fn with_hashing(shards: usize, limit: Arc<Limit>, hashing: KeyHashing) -> Self {
        let count = shards.max(1).next_power_of_two();
        let hints = limit
            .capacity()
            .div_ceil(count)
            .saturating_mul(4)
            .clamp(4, MAX_HINTS);
        Self {
            registry: Registry::with_hints(shards, hashing, hints),
            limit,
        }
    }

    /// The registry (to hash keys, count entries, or join flights).
    pub fn registry(&self) -> &Registry<K, Arc<V>, Outcome<V, E>> {
        &self.registry
    }

    /// The limit whose permits the values own.
    pub fn limit(&self) -> &Arc<Limit> {
        &self.limit
    }

    /// The error of a [`Step::Exhausted`] claim.
    pub fn exhausted(&self) -> E {
        E::exhausted(self.limit.capacity())
    }

    /// Hashes `key` for the operations that follow.
    #[inline]
    pub fn hashed<'a, Q>(&self, key: &'a Q) -> Hashed<'a, Q>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.registry.hashed(key)
    }

    /// Under loom: the two hint words of its shard that `key` may sit in (`None`: the shard
    /// has none), so that a model can pick keys whose words collide.
    #[cfg(slotpool_loom)]
    #[doc(hidden)]
    pub fn hint_words<Q>(&self, key: Hashed<'_, Q>) -> Option<[usize; 2]>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.registry.shard(key).hints.words_of(key.hash.0)
    }

    /// The first step of an acquire: a ready value, a flight to join, nothing, or a value that
    /// had to be retired. A value with a hint takes no lock; otherwise only the shard's read
    /// lock (and its write lock to refill a spent hint or to remove a retired value). `now`
    /// (the time, in the stamps' nanoseconds) is read only if a value is found and checked.
    #[inline]
    pub fn lookup<Q>(
        &self,
        key: Hashed<'_, Q>,
        now: impl FnOnce() -> u64,
        max_idle: u64,
    ) -> Step<V, E>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        match self.registry.lend(key) {
            Taken::Hit(lease) => return self.check(key, Lent::Leased(lease), now(), max_idle),
            Taken::Spent => self.registry.refill(key),
            Taken::Miss => {}
        }
        match self.registry.get(key) {
            Some(Entry::Ready(value)) => self.check(key, Lent::Shared(value), now(), max_idle),
            Some(Entry::Flying(flight)) => Step::Join(flight),
            None => Step::Vacant,
        }
    }

    /// The hot case of [`Directory::lookup`], in registers: the value the key's hint lends,
    /// if it is alive and fresh (its stamp touched as `lookup` would). Otherwise why not
    /// ([`NotFresh`]): a value the hint lent that is dead, stale or retired has been dealt
    /// with as `lookup` deals with one (retired, if this call won, and removed); a key
    /// without a lent value (no hint, or a spent one) is left as it was. Either way the
    /// caller goes on with `lookup`. `now` is read only if a value is lent.
    #[inline(always)]
    pub fn lookup_fresh<Q>(
        &self,
        key: Hashed<'_, Q>,
        now: impl FnOnce() -> u64,
        max_idle: u64,
    ) -> Result<Lent<V>, NotFresh>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let Taken::Hit(lease) = self.registry.lend(key) else {
            return Err(NotFresh::NotLent);
        };
        // Read through the lease itself: it is known to be one here.
        let lent: &V = lease.value();
        let alive = lent.is_alive();
        let now = now();
        let touch = lent.stamp().touch(now, max_idle);
        if alive && touch == Touch::Fresh {
            return Ok(Lent::Leased(lease));
        }
        Err(NotFresh::Unusable {
            rebuilt: match self.unusable(key, Lent::Leased(lease), alive, touch, now, max_idle) {
                Step::Again { rebuilt } => rebuilt,
                // (`unusable` hands out only what `check` would have: not reached.)
                _ => false,
            },
        })
    }

    /// The step after a [`Step::Vacant`] lookup: what the key holds now, or a new flight led by
    /// the caller with its permit taken. `make_key` builds the owned key only if one is
    /// inserted; `now` is read only if a value is found and checked.
    pub fn claim<Q>(
        &self,
        key: Hashed<'_, Q>,
        now: impl FnOnce() -> u64,
        max_idle: u64,
        make_key: impl FnOnce() -> K,
    ) -> Step<V, E>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        match self.registry.claim(key, make_key) {
            Claim::Ready(value) => self.check(key, Lent::Shared(value), now(), max_idle),
            Claim::Join(flight) => Step::Join(flight),
            Claim::Closed => Step::Closed,
            Claim::Lead(flight) => match Limit::try_acquire_owned(&self.limit) {
                Ok(permit) => Step::Lead { flight, permit },
                Err(refused) => {
                    let (error, step) = match refused {
                        TryAcquireError::NoCapacity => (self.exhausted(), Step::Exhausted),
                        // A bare `Limit` has no breaker: `Unavailable` cannot come from it.
                        TryAcquireError::Closed | TryAcquireError::Unavailable { .. } => {
                            (E::closed(), Step::Closed)
                        }
                    };
                    self.registry.abandon(key, &flight);
                    flight.complete(Err(error));
                    trace_transition!("directory: no permit for a new flight");
                    step
                }
            },
        }
    }

    /// Checks a `Ready` value found for `key` (see the type's docs, *Lookup*).
    #[inline(always)]
    fn check<Q>(&self, key: Hashed<'_, Q>, value: Lent<V>, now: u64, max_idle: u64) -> Step<V, E>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let alive = value.is_alive();
        let touch = value.stamp().touch(now, max_idle);
        if alive && touch == Touch::Fresh {
            return Step::Ready(value);
        }
        self.unusable(key, value, alive, touch, now, max_idle)
    }

    /// The rest of [`Directory::check`], for a value that is dead, stale or retired: retire
    /// it (if this caller wins), remove it by identity, and look again.
    #[cold]
    #[inline(never)]
    fn unusable<Q>(
        &self,
        key: Hashed<'_, Q>,
        value: Lent<V>,
        alive: bool,
        touch: Touch,
        now: u64,
        max_idle: u64,
    ) -> Step<V, E>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let rebuilt = match touch {
            // (Not reached from `check`, which hands a fresh, live value out itself.)
            Touch::Fresh if alive => return Step::Ready(value),
            Touch::Fresh => retire(&*value),
            // Loses to a concurrent touch (then the next lookup finds it fresh again).
            Touch::Stale => retire_if_idle(&*value, now, max_idle),
            Touch::Retired => false,
        };
        if value.stamp().is_retired() {
            self.remove_value(key, value.arc());
        }
        trace_transition!("directory: checked, not usable (rebuilt here: {})", rebuilt);
        Step::Again { rebuilt }
    }

    /// Removes `key`'s entry if it is `value` itself.
    fn remove_value<Q>(&self, key: Hashed<'_, Q>, value: &Arc<V>)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.registry.remove_if(
            key,
            |entry| matches!(entry, Entry::Ready(v) if Arc::ptr_eq(v, value)),
        );
    }

    /// Installs the leader's `value` in place of its own `flight`, and returns the outcome to
    /// complete the flight with: the value, or, if the flight was released or closed while the
    /// leader worked, an error after the leader retired (and so freed) the value itself.
    pub fn install<Q>(
        &self,
        key: Hashed<'_, Q>,
        flight: &Arc<Flight<Outcome<V, E>>>,
        value: Arc<V>,
    ) -> Outcome<V, E>
    where
        K: Borrow<Q> + Clone + Send + Sync + 'static,
        V: Send + Sync + 'static,
        Q: Hash + Eq + ?Sized,
    {
        match self.registry.install(key, flight, Arc::clone(&value)) {
            Ok(()) => Ok(value),
            Err(value) => {
                retire(&*value);
                Err(if self.registry.is_closed() {
                    E::closed()
                } else {
                    E::released()
                })
            }
        }
    }

    /// Removes the leader's own `flight` after a failed establishment (its permit dropped
    /// first); the leader then completes it with the error. Returns whether it was still there.
    pub fn abandon<Q>(&self, key: Hashed<'_, Q>, flight: &Arc<Flight<Outcome<V, E>>>) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.registry.abandon(key, flight)
    }

    /// Retires `key`'s value (then removes it), or removes its flight in progress so that the
    /// leader's install is refused. Returns whether the key had either.
    pub fn release<Q>(&self, key: Hashed<'_, Q>) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        match self.registry.get(key) {
            None => false,
            Some(Entry::Ready(value)) => {
                // Retire first, then remove: the capacity is back before the entry leaves the
                // map. Whoever won the stamp freed it; a lookup that found it retired may have
                // removed the entry already, which is fine.
                retire(&*value);
                self.remove_value(key, &value);
                true
            }
            Some(Entry::Flying(flight)) => {
                // Its leader finds its entry gone, frees what it built and fails the flight.
                self.registry.remove_if(
                    key,
                    |entry| matches!(entry, Entry::Flying(f) if Arc::ptr_eq(f, &flight)),
                );
                true
            }
        }
    }

    /// Retires every value idle past `max_idle` at `now` and removes the retired; returns how
    /// many this call retired.
    pub fn reap(&self, now: u64, max_idle: u64) -> usize
    where
        K: Clone,
    {
        let mut reaped = 0;
        for (key, value) in self.registry.ready() {
            let won = retire_if_idle(&*value, now, max_idle);
            if won || value.stamp().is_retired() {
                self.remove_value(self.registry.hashed(&key), &value);
            }
            reaped += usize::from(won);
        }
        reaped
    }

    /// Closes the limit and the registry and retires every value the registry held. Later
    /// claims get [`Step::Closed`], later installs are refused. Idempotent.
    pub fn close(&self) {
        self.limit.close();
        for entry in self.registry.close() {
            if let Entry::Ready(value) = entry {
                retire(&*value);
            }
        }
    }

    /// Whether [`Directory::close`] was called.
    pub fn is_closed(&self) -> bool {
        self.registry.is_closed()
    }
}

impl<K, V, E> fmt::Debug for Directory<K, V, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Directory")
            .field("registry", &self.registry)
            .field("limit", &self.limit)
            .finish()
    }
}
