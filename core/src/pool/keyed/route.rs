//! The route tables: how a caller key finds its share with no lock. The fixed table is built
//! once and never written; keys registered later go to a published table that writers replace
//! whole. [`KeyHasher`] hashes keys for both.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

#[cfg(feature = "metrics")]
use super::metrics_export;
use super::{Admission, Key, KeyStats, KeyedConfigError};
use crate::limit::Limit;
use crate::sync::{Arc, AtomicU64, Ordering};

/// One caller key's route to its share.
pub(super) struct Route<K> {
    /// The share key this caller key draws from.
    pub(super) share: K,
    /// The share's limiter. INVARIANT: every route whose `share` is equal holds the same
    /// `Arc` (aliases are resolved to the share's own route at registration), so aliased keys
    /// draw from one budget.
    pub(super) limit: Arc<Limit>,
    /// Refusals of this caller key. Written only on the refusal path.
    pub(super) refusals: AtomicU64,
    #[cfg(feature = "metrics")]
    pub(super) metrics: metrics_export::RouteMetrics,
}

/// One table of routes: the fixed one (never written after build) or the published one
/// (immutable once published; writers publish a modified copy).
pub(super) struct Table<K> {
    /// Caller key → route. INVARIANT: a key that is a share maps to a route whose `share`
    /// is the key itself; an alias maps to a route sharing that share route's `limit`. No key
    /// is in both the fixed and the published table.
    pub(super) routes: HashMap<K, Arc<Route<K>>, KeyHash>,
    /// Caller keys in registration order (shares of the builder first), for stable stats.
    pub(super) order: Vec<K>,
    /// Distinct share keys with their capacities, in registration order.
    /// INVARIANT: the sum over both tables `+ reserved <= max_blocking_threads`.
    pub(super) shares: Vec<(K, usize)>,
}

/// Builds [`KeyHasher`]s for the route tables.
type KeyHash = BuildHasherDefault<KeyHasher>;

/// The route tables' hasher: each word is added to the state, which is then multiplied by an
/// odd constant (FxHash's family, as in `rustc-hash`); `finish` rotates so the well-mixed high
/// bits reach the low bits the table indexes with. Fast, and deliberately not keyed: see the
/// [module documentation](super) for why chosen collisions cannot hurt here.
#[derive(Debug, Default, Clone, Copy)]
pub struct KeyHasher {
    hash: u64,
}

impl KeyHasher {
    /// An odd constant with well-spread bits (`rustc-hash`'s).
    const K: u64 = 0xf135_7aea_2e62_a9c5;

    #[inline]
    pub(super) fn add(&mut self, word: u64) {
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

impl<K: Key> Table<K> {
    pub(super) fn empty() -> Self {
        Self {
            routes: HashMap::default(),
            order: Vec::new(),
            shares: Vec::new(),
        }
    }

    pub(super) fn total(&self) -> usize {
        self.shares
            .iter()
            .fold(0usize, |sum, (_, capacity)| sum.saturating_add(*capacity))
    }

    /// A route of this table or, failing that, of `base` (the fixed table, for additions to
    /// the published one).
    pub(super) fn find<'t>(
        &'t self,
        base: Option<&'t Table<K>>,
        key: &K,
    ) -> Option<&'t Arc<Route<K>>> {
        self.routes
            .get(key)
            .or_else(|| base.and_then(|base| base.routes.get(key)))
    }

    /// Adds a share key with its own limiter. Checks duplicates (here and in `base`) and the
    /// share's size only; the caller checks the fit once all additions are made.
    pub(super) fn add_share(
        &mut self,
        base: Option<&Table<K>>,
        key: K,
        capacity: usize,
    ) -> Result<(), KeyedConfigError<K>> {
        if self.find(base, &key).is_some() {
            return Err(KeyedConfigError::Duplicate { key });
        }
        let limit = match Limit::new(capacity) {
            Ok(limit) => Arc::new(limit),
            Err(error) => return Err(KeyedConfigError::InvalidShare { key, error }),
        };
        let route = Route::new(&key, key.clone(), limit);
        self.routes.insert(key.clone(), Arc::new(route));
        self.order.push(key.clone());
        self.shares.push((key, capacity));
        Ok(())
    }

    /// Adds `alias`, drawing from the share registered as `share` (here or in `base`).
    pub(super) fn add_alias(
        &mut self,
        base: Option<&Table<K>>,
        alias: K,
        share: K,
    ) -> Result<(), KeyedConfigError<K>> {
        if self.find(base, &alias).is_some() {
            return Err(KeyedConfigError::Duplicate { key: alias });
        }
        let limit = match self.find(base, &share) {
            Some(target) if target.share == share => Arc::clone(&target.limit),
            _ => return Err(KeyedConfigError::UnknownShare { alias, share }),
        };
        let route = Route::new(&alias, share, limit);
        self.routes.insert(alias.clone(), Arc::new(route));
        self.order.push(alias);
        Ok(())
    }
}

impl<K: Key> Route<K> {
    pub(super) fn new(key: &K, share: K, limit: Arc<Limit>) -> Self {
        #[cfg(feature = "metrics")]
        let metrics = metrics_export::RouteMetrics::new(key, &share);
        #[cfg(not(feature = "metrics"))]
        let _ = key;
        Self {
            share,
            limit,
            refusals: AtomicU64::new(0),
            #[cfg(feature = "metrics")]
            metrics,
        }
    }

    pub(super) fn stats(&self, key: &K) -> KeyStats<K> {
        KeyStats {
            key: key.clone(),
            share: self.share.clone(),
            in_use: self.limit.in_use(),
            capacity: self.limit.capacity(),
            waiting: self.limit.waiting(),
            refusals: self.refusals.load(Ordering::Relaxed),
        }
    }
}

/// The outcome of the lock-free first attempt, decided while the table is borrowed.
pub(super) enum First<K> {
    Admitted(Admission),
    /// The share is full: wait on this route's limiter.
    Wait(Arc<Route<K>>),
    Closed,
    Unregistered,
}

#[cfg(test)]
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
