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
//! cache-padded shards, each a hash table behind a reader-writer lock (the facade's, so loom
//! swaps it). A key is hashed **once** per operation ([`Registry::hashed`]): the hash picks the
//! shard (from its high half) and is stored beside the key in the table, so lookups, inserts and
//! rehashes never hash it again.
//!
//! * **Hinted read path** (a [`Directory::lookup`] of a finished value): pick the shard, and
//!   take a prepaid reference to the value through one of the key's two **hint words** with
//!   one CAS; no lock, no write any other key's readers share (but a cache line of hint
//!   words). See `hint.rs` for the protocol. A hint is set up when a value is installed
//!   (if a candidate word is free), refilled after `2^15` hits, and withdrawn whenever the
//!   entry leaves the table, all under the shard's write lock.
//! * **Read path** ([`Registry::get`]): pick the shard, take its read lock, look the key up,
//!   clone the entry, unlock. Readers of one shard never exclude each other; readers of
//!   different shards share no cache line. No allocation. Flights, keys without a hint and
//!   spent hints take it.
//! * **Write path** (claim, install, abandon, remove, close): take the shard's write lock and
//!   change the table in place. Nothing is copied and nothing is allocated beyond the table's
//!   own growth; entries that leave the table are dropped (or handed back) after the lock is
//!   released, so no value's destructor runs under it.
//!
//! Why not a single mutex-guarded map (R3)? It serialises every acquire, hot or not. Why not
//! copy-on-write maps published with arc-swap (this module's first design)? Their reads take
//! no lock, but every write copies a shard and allocates two blocks, and a new session writes
//! three times (claim, install, release): establishment churn paid for the hot path's lock
//! freedom several times over. A shard's read lock costs about what an arc-swap load does (two
//! RMWs on a line that only that shard's readers touch).
//!
//! # Single flight
//!
//! [`Registry::claim`] runs under the shard's write lock: if the key is present the caller
//! gets it ([`Claim::Ready`] or [`Claim::Join`]); otherwise it inserts a fresh
//! [`Entry::Flying`] and becomes the **leader** ([`Claim::Lead`]). Since claims of one key are
//! serialised by that lock, at most one flight per key is ever in the table. Readers that saw
//! a `Flying` entry before it was replaced join the same `Arc<Flight>`, so they too share the
//! one establishment.
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
//! # Use stamps, the directory and batches
//!
//! Three smaller protocols serve the session pool beside the registry: a [`UseStamp`] decides
//! "fresh, stale or retired" with one word (`stamp.rs`); a [`Directory`] makes every decision
//! of the pool's acquire, release, reap and stop on a registry of stamped values and the
//! limit their capacity comes from (`directory.rs`); and a [`Batch`] hands items to one bulk
//! task at a time (`batch.rs`). Each type's documentation tells its protocol.
//!
//! This module owns the maps and flights, `hint.rs` the hint words and their leases,
//! `stamp.rs` the stamps, `directory.rs` the decisions on them, `batch.rs` the batches. None closes a connection itself: a directory frees a value
//! through its [`Tenant::free`], called once by whoever won the value's stamp.
//!

use std::borrow::Borrow;
use std::fmt;
use std::future::Future;
use std::hash::{BuildHasher, Hash};
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use hashbrown::HashTable;

use crate::sync::{trace_transition, Arc, AtomicBool, CachePadded, Mutex, Ordering, RwLock};

mod batch;
mod directory;
mod hint;
mod stamp;

pub use batch::Batch;
pub use directory::{retire, retire_if_idle, Directory, NotFresh, Outcome, Refusal, Step, Tenant};
pub use hint::{LeaseRef, Lent};
pub use stamp::{Touch, UseStamp, TOUCH_SLACK};

use hint::{Hints, Taken, Withdrawn};

/// How a `Registry` hashes its keys: the choice between speed and resistance to keys chosen
/// by an adversary.
///
/// Both are seeded randomly per registry (per pool), so the same key hashes differently in two
/// pools and in two runs. They differ in what an attacker who can choose many keys, and watch
/// how fast the service answers, can do:
///
/// * [`KeyHashing::Fast`] (the default) is foldhash: a few instructions for a short id (the
///   session pool's hot acquire spends about 150 on SipHash otherwise). Its seed keeps keys
///   written without knowledge of it spread out, but it is not a cryptographic pseudo-random
///   function: an attacker who can submit crafted keys and time the answers may learn enough
///   to build many keys that land in one shard's bucket (hash flooding), making that shard's
///   lookups and inserts slow for everyone.
/// * [`KeyHashing::SipHash`] is std's `RandomState` (SipHash-1-3 with a random key), which is
///   designed to be such a function: choose it when untrusted clients pick the keys (session
///   ids that come from the request, unauthenticated) and can make many of them.
///
/// Keys the service mints itself (random or sequential ids, ids from an authenticated
/// directory) cannot be aimed, and lose nothing with the fast hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum KeyHashing {
    /// foldhash, randomly seeded per registry: fast, not a cryptographic PRF.
    #[default]
    Fast,
    /// SipHash-1-3 with a random key per registry (std's `RandomState`): about 150
    /// instructions for a short key, built to resist hash flooding.
    SipHash,
}

/// The hasher of keys, seeded per registry (so keys are aimed at neither one shard nor one
/// bucket except, for [`KeyHashing::Fast`], by an adversary who can learn its seed).
#[derive(Clone)]
#[cfg_attr(slotpool_loom, allow(dead_code))]
enum Hasher {
    Fast(foldhash::fast::RandomState),
    SipHash(std::collections::hash_map::RandomState),
    /// Under loom: one fixed seed whatever was asked (which hint words a key uses must not
    /// change between a model's executions), remembering the kind asked for.
    #[cfg(slotpool_loom)]
    Fixed(foldhash::fast::FixedState, KeyHashing),
}

impl Hasher {
    #[cfg(not(slotpool_loom))]
    fn new(hashing: KeyHashing) -> Self {
        match hashing {
            KeyHashing::Fast => Hasher::Fast(foldhash::fast::RandomState::default()),
            KeyHashing::SipHash => Hasher::SipHash(std::collections::hash_map::RandomState::new()),
        }
    }

    #[cfg(slotpool_loom)]
    fn new(hashing: KeyHashing) -> Self {
        Hasher::Fixed(foldhash::fast::FixedState::with_seed(0), hashing)
    }

    /// Inline always for [`KeyHashing::Fast`] (a few instructions, on every hot lookup: left
    /// to the inliner, it became a call once the general path hashed too), through
    /// [`Hasher::hash_one_other`] otherwise.
    #[inline(always)]
    fn hash_one<Q: Hash + ?Sized>(&self, key: &Q) -> u64 {
        match self {
            // What `hash_one` does, spelled out so that foldhash's inline parts inline here
            // (its `hash_one` stayed a call of its own on the hot acquire).
            Hasher::Fast(state) => {
                let mut hasher = state.build_hasher();
                key.hash(&mut hasher);
                std::hash::Hasher::finish(&hasher)
            }
            other => other.hash_one_other(key),
        }
    }

    /// [`Hasher::hash_one`] for the hashers that are not [`Hasher::Fast`].
    #[inline(never)]
    fn hash_one_other<Q: Hash + ?Sized>(&self, key: &Q) -> u64 {
        match self {
            Hasher::Fast(state) => state.hash_one(key),
            Hasher::SipHash(state) => state.hash_one(key),
            #[cfg(slotpool_loom)]
            Hasher::Fixed(state, _) => state.hash_one(key),
        }
    }

    fn kind(&self) -> KeyHashing {
        match self {
            Hasher::Fast(_) => KeyHashing::Fast,
            Hasher::SipHash(_) => KeyHashing::SipHash,
            #[cfg(slotpool_loom)]
            Hasher::Fixed(_, kind) => *kind,
        }
    }
}

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

/// A key's hash, computed once per operation by [`Registry::hashed`].
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct KeyHash(u64);

impl fmt::Debug for KeyHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "KeyHash({:#018x})", self.0)
    }
}

/// A borrowed key with its hash: what every keyed [`Registry`] operation takes, so one
/// operation (or several on one key, like a lookup then a claim) hashes the key once.
///
/// INVARIANT: `hash` is the registry's hash of `key`. [`Registry::hashed`] builds it so;
/// [`Hashed::new`] trusts its caller (a mismatched pair finds nothing, or the wrong shard,
/// and is checked in debug builds).
pub struct Hashed<'a, Q: ?Sized> {
    key: &'a Q,
    hash: KeyHash,
}

impl<'a, Q: ?Sized> Hashed<'a, Q> {
    /// Pairs `key` with a hash that [`Registry::hashed`] computed for an equal key earlier
    /// (to keep the hash beside an owned key and borrow the pair again later).
    pub fn new(key: &'a Q, hash: KeyHash) -> Self {
        Self { key, hash }
    }

    /// The key.
    pub fn key(&self) -> &'a Q {
        self.key
    }

    /// The hash.
    pub fn hash(&self) -> KeyHash {
        self.hash
    }
}

impl<Q: ?Sized> Clone for Hashed<'_, Q> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<Q: ?Sized> Copy for Hashed<'_, Q> {}

impl<Q: fmt::Debug + ?Sized> fmt::Debug for Hashed<'_, Q> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hashed")
            .field("key", &self.key)
            .field("hash", &self.hash)
            .finish()
    }
}

/// One table slot: the key's hash (so a rehash never hashes again), the key, its entry.
struct Slot<K, V, T> {
    hash: u64,
    key: K,
    entry: Entry<V, T>,
}

/// One shard's table. INVARIANT: at most one slot per key (so at most one `Flying` entry per
/// key); written only under the shard's write lock.
type Table<K, V, T> = HashTable<Slot<K, V, T>>;

/// One shard: its table behind the lock its readers share and its writers take, and the hint
/// words in front of it (`hint.rs`), padded so shards never share a cache line.
struct Shard<K, V, T> {
    /// The table. Its write lock also guards every change of a hint word between empty and
    /// full, and every move of a lease from one word to another.
    table: RwLock<Table<K, V, T>>,
    /// INVARIANT: a word names a lease for key `k` only while `table` holds `Ready(v)` for
    /// `k`, and the lease lends a clone of that `v` (set up at install, withdrawn whenever the
    /// entry leaves the table).
    hints: Hints,
}

/// A sharded key → [`Entry`] map with single-flight claims; reads share a shard's lock.
///
/// See the [module documentation](self) for the protocol.
pub struct Registry<K, V, T> {
    /// INVARIANT: `shards.len()` is a power of two.
    shards: Box<[CachePadded<Shard<K, V, T>>]>,
    /// `shards.len() - 1`. INVARIANT: never changes (nor does `shards.len()`).
    shard_mask: usize,
    /// Hashes keys, once per operation (seeded for this registry).
    hasher: Hasher,
    /// Set once by [`Registry::close`] (before it drains any shard). Read under a shard's
    /// write lock, so a writer that runs after the drain of its shard always sees it.
    closed: AtomicBool,
}

/// Whether `slot` holds the key that `key` names.
#[inline]
fn same_key<K, V, T, Q>(key: Hashed<'_, Q>) -> impl Fn(&Slot<K, V, T>) -> bool + '_
where
    K: Borrow<Q>,
    Q: Eq + ?Sized,
{
    move |slot| slot.hash == key.hash.0 && slot.key.borrow() == key.key
}

/// The hash a rehash of the table uses: the stored one.
fn stored_hash<K, V, T>(slot: &Slot<K, V, T>) -> u64 {
    slot.hash
}

impl<K, V, T> Registry<K, V, T>
where
    K: Hash + Eq,
    V: Clone,
{
    /// A registry with `shards` shards (rounded up to a power of two, at least one), hashing
    /// keys with [`KeyHashing::Fast`].
    pub fn new(shards: usize) -> Self {
        Self::with_hashing(shards, KeyHashing::default())
    }

    /// A registry with `shards` shards (rounded up to a power of two, at least one), hashing
    /// keys as `hashing` says (seeded afresh for this registry).
    pub fn with_hashing(shards: usize, hashing: KeyHashing) -> Self {
        Self::with_hints(shards, hashing, 0)
    }

    /// A registry with `shards` shards (rounded up to a power of two, at least one), hashing
    /// keys as `hashing` says, with `hints` hint words per shard (rounded up to a power of
    /// two; zero: none, every read takes the shard's read lock). A hint lets a read of a
    /// finished value skip the lock ([`Directory::lookup`]); a key whose two candidate words
    /// are both taken by other keys reads under the lock. Four words per key a shard holds
    /// leave few such keys.
    pub fn with_hints(shards: usize, hashing: KeyHashing, hints: usize) -> Self {
        let count = shards.max(1).next_power_of_two();
        let shards = (0..count)
            .map(|_| {
                CachePadded::new(Shard {
                    table: RwLock::new(HashTable::new()),
                    hints: Hints::new(hints),
                })
            })
            .collect();
        Self {
            shards,
            shard_mask: count - 1,
            hasher: Hasher::new(hashing),
            closed: AtomicBool::new(false),
        }
    }

    /// How this registry hashes its keys.
    pub fn hashing(&self) -> KeyHashing {
        self.hasher.kind()
    }

    /// Hashes `key` for the operations that follow.
    #[inline]
    pub fn hashed<'a, Q>(&self, key: &'a Q) -> Hashed<'a, Q>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        Hashed {
            key,
            hash: KeyHash(self.hasher.hash_one(key)),
        }
    }

    #[inline]
    fn shard<Q>(&self, key: Hashed<'_, Q>) -> &Shard<K, V, T>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        debug_assert!(
            self.hasher.hash_one(key.key) == key.hash.0,
            "a `Hashed` paired with another key's hash"
        );
        // The mask keeps the index in range because the length is a power of two. The high
        // half picks the shard; the table uses the low bits (bucket) and the top seven (tag),
        // so the shard choice does not thin out either.
        let index = (key.hash.0 >> 32) as usize & self.shard_mask;
        debug_assert!(index < self.shards.len());
        // SAFETY: `index <= shard_mask = shards.len() - 1` (the fields' invariants), so it is
        // in bounds. Unchecked, as this is every lookup's first step and the bound is known.
        unsafe { self.shards.get_unchecked(index) }
    }

    /// `key`'s finished value through its hint, without the lock: a prepaid reference to it,
    /// [`Taken::Spent`] (call [`Registry::refill`], then read with [`Registry::get`]) or
    /// [`Taken::Miss`] (read with `get`).
    #[inline(always)]
    fn lend<Q>(&self, key: Hashed<'_, Q>) -> Taken<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.shard(key).hints.take::<K, V, Q>(key.hash.0, key.key)
    }

    /// Refills `key`'s spent hint, under its shard's write lock.
    fn refill<Q>(&self, key: Hashed<'_, Q>)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let shard = self.shard(key);
        let _table = shard.table.write();
        shard.hints.refill::<K, V, Q>(key.hash.0, key.key);
    }

    /// The entry for `key`, read under its shard's read lock.
    #[inline]
    pub fn get<Q>(&self, key: Hashed<'_, Q>) -> Option<Entry<V, T>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let table = self.shard(key).table.read();
        table
            .find(key.hash.0, same_key(key))
            .map(|slot| slot.entry.clone())
    }

    /// Returns what `key` holds, or registers a new flight for it with the caller as leader.
    /// `make_key` builds the owned key only when one is inserted.
    pub fn claim<Q>(&self, key: Hashed<'_, Q>, make_key: impl FnOnce() -> K) -> Claim<V, T>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let mut table = self.shard(key).table.write();
        if self.closed.load(Ordering::Acquire) {
            return Claim::Closed;
        }
        if let Some(slot) = table.find(key.hash.0, same_key(key)) {
            return match &slot.entry {
                Entry::Ready(value) => Claim::Ready(value.clone()),
                Entry::Flying(flight) => Claim::Join(Arc::clone(flight)),
            };
        }
        let flight = Arc::new(Flight::new());
        table.insert_unique(
            key.hash.0,
            Slot {
                hash: key.hash.0,
                key: make_key(),
                entry: Entry::Flying(Arc::clone(&flight)),
            },
            stored_hash,
        );
        trace_transition!("registry: claimed, leading a new flight");
        Claim::Lead(flight)
    }

    /// Replaces the leader's own `Flying` entry with `Ready(value)`, and sets up a hint for
    /// it if one of the key's candidate words is free.
    ///
    /// # Errors
    /// Hands `value` back when the entry is no longer this flight's (it was removed by a
    /// release, or the registry was closed): the caller must dispose of it.
    pub fn install<Q>(&self, key: Hashed<'_, Q>, flight: &Arc<Flight<T>>, value: V) -> Result<(), V>
    where
        K: Borrow<Q> + Clone + Send + Sync + 'static,
        V: Send + Sync + 'static,
        Q: Hash + Eq + ?Sized,
    {
        let shard = self.shard(key);
        let mut table = shard.table.write();
        if self.closed.load(Ordering::Acquire) {
            return Err(value);
        }
        let own = table
            .find_mut(key.hash.0, same_key(key))
            .filter(|slot| matches!(&slot.entry, Entry::Flying(f) if Arc::ptr_eq(f, flight)));
        let Some(slot) = own else {
            trace_transition!("registry: install refused, entry gone");
            return Err(value);
        };
        shard.hints.publish(key.hash.0, &slot.key, &value);
        let replaced = std::mem::replace(&mut slot.entry, Entry::Ready(value));
        drop(table);
        drop(replaced);
        trace_transition!("registry: installed");
        Ok(())
    }

    /// Removes the leader's own `Flying` entry (after a failed establishment). Returns whether
    /// it was still there.
    pub fn abandon<Q>(&self, key: Hashed<'_, Q>, flight: &Arc<Flight<T>>) -> bool
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

    /// Removes `key`'s entry if `pred` accepts it, and returns it (dropped, if the caller
    /// drops it, after the shard's lock is released).
    pub fn remove_if<Q>(
        &self,
        key: Hashed<'_, Q>,
        pred: impl FnOnce(&Entry<V, T>) -> bool,
    ) -> Option<Entry<V, T>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let shard = self.shard(key);
        let mut table = shard.table.write();
        let found = table.find_entry(key.hash.0, same_key(key)).ok()?;
        if !pred(&found.get().entry) {
            return None;
        }
        let (slot, _) = found.remove();
        // The entry's hint goes with it; its references are given back after the unlock.
        let mut withdrawn = Withdrawn::new();
        if let Entry::Ready(_) = &slot.entry {
            shard
                .hints
                .withdraw::<K, V, Q>(key.hash.0, key.key, &mut withdrawn);
        }
        drop(table);
        drop(withdrawn);
        trace_transition!("registry: removed");
        Some(slot.entry)
    }

    /// Closes the registry and returns every entry it held. Later claims get
    /// [`Claim::Closed`], later installs are refused. Idempotent.
    pub fn close(&self) -> Vec<Entry<V, T>> {
        self.closed.store(true, Ordering::Release);
        let mut drained = Vec::new();
        let mut withdrawn = Withdrawn::<V>::new();
        for shard in self.shards.iter() {
            let mut table = shard.table.write();
            shard.hints.withdraw_all(&mut withdrawn);
            drained.extend(table.drain().map(|slot| slot.entry));
        }
        drop(withdrawn);
        trace_transition!("registry: closed, drained {}", drained.len());
        drained
    }

    /// Whether [`Registry::close`] was called.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// A snapshot of every `Ready` entry (shard by shard, each under its read lock).
    pub fn ready(&self) -> Vec<(K, V)>
    where
        K: Clone,
    {
        let mut out = Vec::new();
        for shard in self.shards.iter() {
            out.extend(
                shard
                    .table
                    .read()
                    .iter()
                    .filter_map(|slot| match &slot.entry {
                        Entry::Ready(value) => Some((slot.key.clone(), value.clone())),
                        Entry::Flying(_) => None,
                    }),
            );
        }
        out
    }

    /// Number of entries (both kinds), a snapshot.
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|shard| shard.table.read().len())
            .sum()
    }

    /// Whether the registry holds no entry (a snapshot).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<K, V, T> Drop for Registry<K, V, T> {
    fn drop(&mut self) {
        // Words still published (a registry dropped without `close`) own references to their
        // leases: give them back.
        let mut withdrawn = Withdrawn::<V>::new();
        for shard in self.shards.iter() {
            shard.hints.withdraw_all(&mut withdrawn);
        }
    }
}

impl<K, V, T> fmt::Debug for Registry<K, V, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registry")
            .field("shards", &self.shards.len())
            .field("hashing", &self.hasher.kind())
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

#[cfg(all(test, not(slotpool_loom)))]
mod tests {
    use super::*;

    type Map = Registry<String, u32, ()>;

    fn hash(registry: &Map, key: &str) -> KeyHash {
        registry.hashed(key).hash()
    }

    /// Every key's shard is one of the registry's (the index is masked, then read unchecked),
    /// and the keys spread over all of them, whatever the shard count asked for.
    #[test]
    fn every_key_picks_one_of_the_registrys_shards_and_all_are_used() {
        for asked in [1, 2, 3, 8, 64] {
            let registry = Map::with_hashing(asked, KeyHashing::Fast);
            let range = registry.shards.as_ptr_range();
            let mut used = std::collections::HashSet::new();
            for i in 0..4000 {
                let key = format!("session-{i}");
                let shard: *const Shard<String, u32, ()> = registry.shard(registry.hashed(&*key));
                let padded = shard.cast::<CachePadded<Shard<String, u32, ()>>>();
                assert!(
                    range.contains(&padded),
                    "{asked} shards asked: key {i} outside"
                );
                used.insert(padded);
            }
            assert_eq!(
                used.len(),
                asked.next_power_of_two(),
                "{asked} shards asked"
            );
        }
    }

    /// Either hashing is a function of the key within a registry, tells keys apart, and is
    /// seeded afresh for each registry (so ids aimed at one pool do not collide in another).
    #[test]
    fn keys_hash_apart_and_each_registry_seeds_its_own() {
        for hashing in [KeyHashing::Fast, KeyHashing::SipHash] {
            let (one, two) = (Map::with_hashing(4, hashing), Map::with_hashing(4, hashing));
            assert_eq!(
                hash(&one, "session-1"),
                hash(&one, "session-1"),
                "{hashing:?}"
            );
            assert_ne!(
                hash(&one, "session-1"),
                hash(&one, "session-2"),
                "{hashing:?}"
            );
            assert_ne!(
                hash(&one, "session-1"),
                hash(&two, "session-1"),
                "{hashing:?}"
            );
        }
    }
}
