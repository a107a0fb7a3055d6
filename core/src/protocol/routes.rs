//! Route tables: how a caller key finds its share's [`Quota`] with no lock, how aliases draw
//! from one quota, how keys are registered while others look them up, and how every quota is
//! closed at once. The executor-free core of [`crate::keyed`].
//!
//! # The tables
//!
//! A [`Routes`] maps a caller key to a [`Route`]: the share key it draws from, that share's
//! quota, and the caller key's own state `X` (the keyed pool's counters and metric handles).
//! It is two [`Table`]s:
//!
//! * the **fixed** table, built before the `Routes` exists and never written again: a lookup
//!   there is a plain hash lookup, with no lock and not even an atomic;
//! * the **published** table of keys registered at run time, replaced whole by writers
//!   (copy-on-write through the facade's `Published`, arc-swap in normal builds): a lookup
//!   there is one lock-free load, and sees the table before or after a registration, never a
//!   mix.
//!
//! A key is in at most one of them ([`Routes::publish`] refuses a key of either).
//!
//! # Aliases
//!
//! A share key's route owns a new quota; an alias's route is built from the share key's route
//! (found in either table) and points at **the same quota**, so every key aliased to a share
//! draws from one budget. Routes are `Arc`s: a published copy shares them with the table it
//! was copied from, so a key keeps its quota and its `X` whichever table a caller read.
//!
//! # Admission
//!
//! [`Routes::admit`] looks the key up and tries its quota once, without waiting, while the
//! table is borrowed: a permit, "closed", "full: wait on this route", or "unregistered". The
//! permit holds no reference count ([`crate::quota`]), so the common case is the lookup and one
//! CAS; a caller that must wait takes an `Arc` of the route (the rare path) and waits on its
//! quota.
//!
//! # Registration and close
//!
//! Writers ([`Routes::publish`], [`Routes::close`]) serialize on one mutex that also holds the
//! closed flag. Close sets the flag and closes every quota of both tables; a publication under
//! the same mutex closes the new table's quotas if the flag is set before it publishes them. So
//! a key registered concurrently with a close is closed either way, and no caller can be
//! admitted by a quota that was published after the close.
//!
//! This module owns the tables and the route lookup; the permits are [`crate::quota`]'s.

use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasherDefault, Hash, Hasher};
use std::ptr::NonNull;

use crate::error::{ConfigError, TryAcquireError};
use crate::quota::{Quota, QuotaHandle, QuotaPermit};
use crate::sync::{Arc, Mutex, Published};

/// One caller key's route to its share.
pub struct Route<K, X> {
    /// The share key this caller key draws from.
    share: K,
    /// The share's quota, for the hot path (no hop through the handle). INVARIANT: the quota
    /// of `owner`, which this route keeps live.
    quota: NonNull<Quota>,
    /// The share's quota. INVARIANT: every route whose `share` is equal holds the same handle.
    owner: Arc<QuotaHandle>,
    /// The caller key's own state (counters, metric handles).
    extra: X,
}

// SAFETY: `quota` is a shared reference in all but name (to a `Sync` quota kept live by
// `owner`, which is `Send + Sync`); the rest is ordinary fields.
unsafe impl<K: Send, X: Send> Send for Route<K, X> {}
// SAFETY: as above; `&Route` only hands out `&Quota`.
unsafe impl<K: Sync, X: Sync> Sync for Route<K, X> {}

impl<K, X> Route<K, X> {
    /// The share key this caller key draws from.
    pub fn share(&self) -> &K {
        &self.share
    }

    /// The share's quota.
    #[inline]
    pub fn quota(&self) -> &Quota {
        // SAFETY: the route's invariant: `owner` keeps the quota live while the route lives.
        unsafe { self.quota.as_ref() }
    }

    /// The caller key's own state.
    #[inline]
    pub fn extra(&self) -> &X {
        &self.extra
    }

    fn new(share: K, owner: Arc<QuotaHandle>, extra: X) -> Self {
        Self {
            share,
            quota: NonNull::from(&**owner),
            owner,
            extra,
        }
    }
}

impl<K: fmt::Debug, X> fmt::Debug for Route<K, X> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Route")
            .field("share", &self.share)
            .field("quota", self.quota())
            .finish_non_exhaustive()
    }
}

/// Builds [`KeyHasher`]s for the route tables.
pub type KeyHash = BuildHasherDefault<KeyHasher>;

/// The route tables' hasher: each word is added to the state, which is then multiplied by an
/// odd constant (FxHash's family, as in `rustc-hash`); `finish` rotates so the well-mixed high
/// bits reach the low bits the table indexes with. Fast, and deliberately not keyed: only the
/// service's own configuration inserts keys, and a lookup of an unknown key inserts nothing,
/// so chosen collisions cannot hurt.
#[derive(Debug, Default, Clone, Copy)]
pub struct KeyHasher {
    hash: u64,
}

impl KeyHasher {
    /// An odd constant with well-spread bits (`rustc-hash`'s).
    const K: u64 = 0xf135_7aea_2e62_a9c5;

    #[inline]
    fn add(&mut self, word: u64) {
        self.hash = self.hash.wrapping_add(word).wrapping_mul(Self::K);
    }
}

impl Hasher for KeyHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
        let rest = chunks.remainder();
        let len = rest.len();
        // The tail (1 to 7 bytes) in one word without a variable-length copy: two overlapping
        // 4-byte reads, or first / middle / last byte (as `rustc-hash` does).
        let word = match rest {
            [] => return,
            [a, b, c, d, ..] => {
                let [w, x, y, z] = [rest[len - 4], rest[len - 3], rest[len - 2], rest[len - 1]];
                u64::from(u32::from_le_bytes([*a, *b, *c, *d]))
                    | (u64::from(u32::from_le_bytes([w, x, y, z])) << 32)
            }
            _ => {
                u64::from(rest[0])
                    | (u64::from(rest[len / 2]) << 8)
                    | (u64::from(rest[len - 1]) << 16)
            }
        };
        // The length goes in the top byte, so tails that read alike (overlaps) still differ.
        self.add(word ^ ((len as u64) << 56));
    }

    #[inline]
    fn write_u8(&mut self, value: u8) {
        self.add(u64::from(value));
    }

    #[inline]
    fn write_u16(&mut self, value: u16) {
        self.add(u64::from(value));
    }

    #[inline]
    fn write_u32(&mut self, value: u32) {
        self.add(u64::from(value));
    }

    #[inline]
    fn write_u64(&mut self, value: u64) {
        self.add(value);
    }

    #[inline]
    fn write_usize(&mut self, value: usize) {
        self.add(value as u64);
    }

    #[inline]
    fn finish(&self) -> u64 {
        self.hash.rotate_left(26)
    }
}

/// Why a key could not be added to a [`Table`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TableError<K> {
    /// The key is registered already (as a share or an alias).
    Duplicate {
        /// The key given twice.
        key: K,
    },
    /// An alias names a key that is not registered as a share.
    UnknownShare {
        /// The aliased caller key.
        alias: K,
        /// The key it names.
        share: K,
    },
    /// A share's size is invalid (zero, or above [`crate::quota::MAX_QUOTA`]).
    InvalidShare {
        /// The share key.
        key: K,
        /// What is wrong with its size.
        error: ConfigError,
    },
}

/// One table of routes: the fixed one (never written once a [`Routes`] holds it) or a
/// published one (immutable once published; writers publish a modified copy).
pub struct Table<K, X> {
    /// Caller key → route. INVARIANT: a share key maps to a route whose `share` is the key
    /// itself; an alias maps to a route holding that share route's quota handle.
    routes: HashMap<K, Arc<Route<K, X>>, KeyHash>,
    /// Caller keys in registration order, for stable statistics.
    order: Vec<K>,
    /// Distinct share keys with their capacities, in registration order.
    shares: Vec<(K, usize)>,
}

impl<K: Eq + Hash + Clone, X> Table<K, X> {
    /// A table with no key.
    pub fn new() -> Self {
        Self {
            routes: HashMap::default(),
            order: Vec::new(),
            shares: Vec::new(),
        }
    }

    /// The route of `key` in this table.
    #[inline]
    pub fn get(&self, key: &K) -> Option<&Arc<Route<K, X>>> {
        self.routes.get(key)
    }

    /// The caller keys with their routes, in registration order.
    pub fn routes(&self) -> impl Iterator<Item = (&K, &Arc<Route<K, X>>)> {
        self.order
            .iter()
            .filter_map(|key| self.routes.get_key_value(key))
    }

    /// The distinct share keys with their capacities, in registration order.
    pub fn shares(&self) -> &[(K, usize)] {
        &self.shares
    }

    /// The sum of this table's shares (saturating).
    pub fn total(&self) -> usize {
        self.shares
            .iter()
            .fold(0usize, |sum, (_, capacity)| sum.saturating_add(*capacity))
    }

    /// A route of this table or, failing that, of `base` (the fixed table, for additions to a
    /// published one).
    fn find<'t>(&'t self, base: Option<&'t Self>, key: &K) -> Option<&'t Arc<Route<K, X>>> {
        self.routes
            .get(key)
            .or_else(|| base.and_then(|base| base.routes.get(key)))
    }

    /// Whether `key` is in this table or in `base`.
    pub fn contains(&self, base: Option<&Self>, key: &K) -> bool {
        self.find(base, key).is_some()
    }

    /// Adds a share key with a new quota of `capacity`; `extra` makes the key's own state
    /// (given the caller key and its share). Checks for a duplicate here and in `base`.
    ///
    /// # Errors
    /// [`TableError::Duplicate`], [`TableError::InvalidShare`]; the table is unchanged.
    pub fn add_share(
        &mut self,
        base: Option<&Self>,
        key: K,
        capacity: usize,
        extra: impl FnOnce(&K, &K) -> X,
    ) -> Result<(), TableError<K>> {
        if self.contains(base, &key) {
            return Err(TableError::Duplicate { key });
        }
        let owner = match QuotaHandle::new(capacity) {
            Ok(quota) => Arc::new(quota),
            Err(error) => return Err(TableError::InvalidShare { key, error }),
        };
        let extra = extra(&key, &key);
        let route = Route::new(key.clone(), owner, extra);
        self.routes.insert(key.clone(), Arc::new(route));
        self.order.push(key.clone());
        self.shares.push((key, capacity));
        Ok(())
    }

    /// Adds `alias`, drawing from the quota of the share registered as `share` (here or in
    /// `base`).
    ///
    /// # Errors
    /// [`TableError::Duplicate`], [`TableError::UnknownShare`]; the table is unchanged.
    pub fn add_alias(
        &mut self,
        base: Option<&Self>,
        alias: K,
        share: K,
        extra: impl FnOnce(&K, &K) -> X,
    ) -> Result<(), TableError<K>> {
        if self.contains(base, &alias) {
            return Err(TableError::Duplicate { key: alias });
        }
        let owner = match self.find(base, &share) {
            Some(target) if target.share == share => Arc::clone(&target.owner),
            _ => return Err(TableError::UnknownShare { alias, share }),
        };
        let extra = extra(&alias, &share);
        let route = Route::new(share, owner, extra);
        self.routes.insert(alias.clone(), Arc::new(route));
        self.order.push(alias);
        Ok(())
    }

    /// A copy that shares every route with this table.
    fn copy(&self) -> Self {
        Self {
            routes: self.routes.clone(),
            order: self.order.clone(),
            shares: self.shares.clone(),
        }
    }

    fn close(&self) {
        for route in self.routes.values() {
            route.quota().close();
        }
    }
}

impl<K: Eq + Hash + Clone, X> Default for Table<K, X> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: fmt::Debug, X> fmt::Debug for Table<K, X> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Table")
            .field("shares", &self.shares)
            .field("keys", &self.order)
            .finish()
    }
}

/// The outcome of [`Routes::admit`]: the first, lock-free attempt.
pub enum First<A, K, X> {
    /// A permit, made into what the caller asked for.
    Admitted(A),
    /// The share is full: wait on this route's quota.
    Wait(Arc<Route<K, X>>),
    /// The share is closed.
    Closed,
    /// The key is neither a share nor an alias.
    Unregistered,
}

impl<A, K: fmt::Debug, X> fmt::Debug for First<A, K, X> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            First::Admitted(_) => f.write_str("Admitted"),
            First::Wait(route) => f.debug_tuple("Wait").field(route).finish(),
            First::Closed => f.write_str("Closed"),
            First::Unregistered => f.write_str("Unregistered"),
        }
    }
}

/// The fixed and the published route tables, and the writers' mutex. See the
/// [module documentation](self).
pub struct Routes<K, X> {
    /// INVARIANT: never written after construction, so readers need no synchronisation.
    fixed: Table<K, X>,
    /// Keys registered later. Lock-free for readers; replaced whole by writers.
    added: Published<Table<K, X>>,
    /// Serializes writers; `true` once [`Routes::close`] ran. INVARIANT: `added` is stored
    /// only while this is held, and once it is `true` every quota of both tables is closed.
    writer: Mutex<bool>,
}

impl<K: Eq + Hash + Clone, X> Routes<K, X> {
    /// Routes over a fixed table, with nothing published yet.
    pub fn new(fixed: Table<K, X>) -> Self {
        Self {
            fixed,
            added: Published::new(Table::new()),
            writer: Mutex::new(false),
        }
    }

    /// Runs `f` on `key`'s route: from the fixed table with no synchronisation, else from the
    /// published table with one lock-free load.
    #[inline]
    pub fn with_route<R>(&self, key: &K, f: impl FnOnce(Option<&Arc<Route<K, X>>>) -> R) -> R {
        match self.fixed.routes.get(key) {
            Some(route) => f(Some(route)),
            None => self.added.with(|added| f(added.routes.get(key))),
        }
    }

    /// The first attempt of an admission: `key`'s route, and one try of its quota. A permit is
    /// handed with the route to `admitted`, which makes the caller's admission of it.
    #[inline]
    pub fn admit<A>(
        &self,
        key: &K,
        admitted: impl FnOnce(QuotaPermit, &Route<K, X>) -> A,
    ) -> First<A, K, X> {
        self.with_route(key, |route| match route {
            None => First::Unregistered,
            Some(route) => match route.quota().try_acquire() {
                Ok(permit) => First::Admitted(admitted(permit, route)),
                Err(TryAcquireError::NoCapacity) => First::Wait(Arc::clone(route)),
                // A bare quota has no breaker: `Unavailable` cannot come from it.
                Err(TryAcquireError::Closed | TryAcquireError::Unavailable { .. }) => First::Closed,
            },
        })
    }

    /// The fixed table.
    pub fn fixed(&self) -> &Table<K, X> {
        &self.fixed
    }

    /// Runs `f` on the fixed and the current published table.
    pub fn with_tables<R>(&self, f: impl FnOnce(&Table<K, X>, &Table<K, X>) -> R) -> R {
        self.added.with(|added| f(&self.fixed, added))
    }

    /// Publishes a change: under the writers' mutex, `change` gets a copy of the published
    /// table (sharing its routes) and the fixed table, and may add keys to the copy; if it
    /// succeeds the copy is published, its quotas closed first if the routes are closed.
    /// Readers never wait for this. `change` should check everything before it adds anything,
    /// so a refused change creates nothing (its copy is dropped either way).
    ///
    /// # Errors
    /// `change`'s error; nothing is published.
    pub fn publish<E>(
        &self,
        change: impl FnOnce(&mut Table<K, X>, &Table<K, X>) -> Result<(), E>,
    ) -> Result<(), E> {
        let closed = self.writer.lock();
        let mut next = self.added.with(Table::copy);
        change(&mut next, &self.fixed)?;
        if *closed {
            next.close();
        }
        self.added.store(Arc::new(next));
        Ok(())
    }

    /// Closes every quota of both tables (waiting and later admissions see "closed"; permits
    /// out are returned as usual), and every quota published later. Idempotent.
    pub fn close(&self) {
        let mut closed = self.writer.lock();
        *closed = true;
        self.fixed.close();
        self.added.with(Table::close);
    }

    /// Whether [`Routes::close`] was called.
    pub fn is_closed(&self) -> bool {
        *self.writer.lock()
    }
}

impl<K: fmt::Debug, X> fmt::Debug for Routes<K, X> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Routes")
            .field("fixed", &self.fixed)
            .field("added", &self.added)
            .finish()
    }
}

#[cfg(all(test, not(slotpool_loom)))]
mod tests {
    use std::collections::HashSet;
    use std::hash::BuildHasher;

    use super::KeyHash;

    /// Every tail length takes its own branch; keys that differ anywhere (and prefixes of one
    /// another) hash apart, equal keys alike.
    #[test]
    fn key_hasher_separates_short_and_long_keys() {
        let build = KeyHash::default();
        let text = "journal.append/replay:catch-up";
        let mut keys: Vec<String> = (0..=text.len()).map(|n| text[..n].to_string()).collect();
        keys.extend(
            [
                "jOurnal", "journaL", "ledger", "regdel", "ab", "ba", "abc", "acb",
            ]
            .map(String::from),
        );
        let hashes: HashSet<u64> = keys.iter().map(|k| build.hash_one(k)).collect();
        assert_eq!(hashes.len(), keys.len());
        assert_eq!(
            build.hash_one("journal"),
            build.hash_one(String::from("journal"))
        );
        assert_eq!(build.hash_one(7_u32), build.hash_one(7_u32));
        assert_ne!(build.hash_one(7_u32), build.hash_one(8_u32));
    }
}
