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
//! A table is an open-addressed array of slots, one cache line each, at most half full; a
//! slot holds what a lookup compares (the key's hash and, for a short string key, its bytes
//! as two words), the key, its route, and a copy of the route's quota pointer and capacity,
//! so the first CAS of an admission needs no load beyond the slot's line.
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
//! permit holds no reference count ([`crate::protocol::quota`]), so the common case is the lookup and one
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
//! This module owns the tables and the route lookup; the permits are [`crate::protocol::quota`]'s.

use std::any::Any;
use std::fmt;
use std::hash::{BuildHasher, BuildHasherDefault, Hash, Hasher};
use std::ptr::NonNull;

use crate::error::{ConfigError, TryAcquireError};
use crate::protocol::quota::{Quota, QuotaHandle, QuotaPermit};
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
    /// A share's size is invalid (zero, or above [`crate::protocol::quota::MAX_QUOTA`]).
    InvalidShare {
        /// The share key.
        key: K,
        /// What is wrong with its size.
        error: ConfigError,
    },
}

/// One table of routes: the fixed one (never written once a [`Routes`] holds it) or a
/// published one (immutable once published; writers publish a modified copy).
///
/// Open addressing with linear probing over a power-of-two array of slots, at most half
/// full, so a registered key is nearly always found in its first slot and an unknown key ends
/// at a free slot within a few. A slot carries what a lookup compares (the key's hash and, for
/// a string key, its first and last words) beside the route, so a probe reads one slot and,
/// for a string key of at most 16 bytes, never the key's own bytes.
pub struct Table<K, X> {
    /// INVARIANT: a power-of-two number of slots (at least [`MIN_SLOTS`]), at most half of
    /// them used, so every probe sequence reaches a free slot; each key at most once, in the
    /// first free slot from its home slot (`hash >> shift`) on.
    slots: Box<[Slot<K, X>]>,
    /// `64 - log2(slots.len())`: a hash's top bits index the slots.
    shift: u32,
    /// Caller keys in registration order, for stable statistics. INVARIANT: exactly the keys
    /// of the used slots.
    order: Vec<K>,
    /// Distinct share keys with their capacities, in registration order.
    shares: Vec<(K, usize)>,
}

/// The fewest slots of a table (a table of no key still probes a free slot).
const MIN_SLOTS: usize = 8;

/// One slot of a [`Table`]: 64 bytes for a string key, on a cache line of its own, so a lookup
/// that finds its key in its home slot reads one line of the table.
#[repr(align(64))]
struct Slot<K, X> {
    /// The key's [`Probe::hash`] (0 while the slot is free).
    hash: u64,
    /// The key's [`Probe::words`] (zero while the slot is free).
    words: [u64; 2],
    /// The key and its route; `None` for a free slot.
    entry: Option<Entry<K, X>>,
}

/// What a used [`Slot`] holds.
struct Entry<K, X> {
    /// The route's quota and its capacity, copied out of the route so that an admission
    /// reaches the quota's word from the slot, with no hop through the route. INVARIANT: the
    /// quota of `route`, which keeps it live, and that quota's capacity.
    quota: NonNull<Quota>,
    capacity: usize,
    /// The caller key.
    key: K,
    /// INVARIANT: a share key's route has the key itself as `share`; an alias's route holds
    /// its share route's quota handle.
    route: Arc<Route<K, X>>,
}

// SAFETY: `quota` is a shared reference in all but name (to a `Sync` quota kept live by
// `route`, whose `Route` is `Send` for these bounds); the rest is ordinary fields.
unsafe impl<K: Send + Sync, X: Send + Sync> Send for Entry<K, X> {}
// SAFETY: as above; `&Entry` only hands out `&Quota`, `&K` and `&Arc<Route>`.
unsafe impl<K: Send + Sync, X: Send + Sync> Sync for Entry<K, X> {}

impl<K, X> Entry<K, X> {
    fn new(key: K, route: Arc<Route<K, X>>) -> Self {
        Self {
            quota: route.quota,
            capacity: route.quota().capacity(),
            key,
            route,
        }
    }

    /// One try of the route's quota, with the capacity this entry holds as the CAS's first
    /// guess of the quota's word: no load of the quota stands between the slot and the CAS.
    #[inline(always)]
    fn try_acquire(&self) -> Result<QuotaPermit, TryAcquireError> {
        // SAFETY: the entry's invariant: its route keeps the quota live while the entry lives.
        let quota = unsafe { self.quota.as_ref() };
        quota.try_acquire_with(self.capacity)
    }
}

impl<K: Clone, X> Clone for Entry<K, X> {
    fn clone(&self) -> Self {
        Self {
            quota: self.quota,
            capacity: self.capacity,
            key: self.key.clone(),
            route: Arc::clone(&self.route),
        }
    }
}

impl<K: Clone, X> Clone for Slot<K, X> {
    fn clone(&self) -> Self {
        Self {
            hash: self.hash,
            words: self.words,
            entry: self.entry.clone(),
        }
    }
}

impl<K, X> Slot<K, X> {
    const FREE: Self = Self {
        hash: 0,
        words: [0; 2],
        entry: None,
    };
}

/// String keys of at most this many bytes are recognised by their words and length alone.
const SHORT_TEXT: usize = 16;

/// What a lookup compares, computed once per key (once per lookup, whichever tables it
/// visits, and once when the key is added).
///
/// A string key (`&'static str`, `String`, `Box<str>`, told apart by type at compile time,
/// so other key types pay nothing for it) is hashed from its first and last words and its
/// length when it has at most [`SHORT_TEXT`] bytes: the words and the length determine every
/// byte, so a slot whose hash, words and key length match holds this very key, and the lookup
/// needs no byte comparison (nor a call to `memcmp`). A longer string key is hashed whole with
/// [`KeyHasher`] and compared byte by byte after its words match; any other key type is hashed
/// with [`KeyHasher`] and compared with its `Eq` after its hash matches.
struct Probe<'k> {
    hash: u64,
    /// A string key's first and last words (see [`text_words`]); zero for other key types.
    words: [u64; 2],
    /// A string key's bytes; `None` for other key types.
    text: Option<&'k [u8]>,
}

impl<'k> Probe<'k> {
    #[inline(always)]
    fn new<K: Hash + 'static>(key: &'k K) -> Self {
        match text_of(key) {
            Some(text) => {
                let words = text_words(text);
                let hash = if text.len() <= SHORT_TEXT {
                    // Odd constants with well-spread bits; the length keeps texts whose words
                    // read alike (overlapping reads of a repeated byte) apart.
                    fold_multiply(
                        words[0] ^ 0x243f_6a88_85a3_08d3,
                        words[1] ^ 0x1319_8a2e_0370_7344 ^ text.len() as u64,
                    )
                } else {
                    let mut hasher = KeyHasher::default();
                    hasher.write(text);
                    hasher.finish()
                };
                Self {
                    hash,
                    words,
                    text: Some(text),
                }
            }
            None => Self {
                hash: KeyHash::default().hash_one(key),
                words: [0; 2],
                text: None,
            },
        }
    }

    /// Whether `stored`, in a slot whose hash and words match this probe's, is `key`.
    #[inline(always)]
    fn is<K: Eq + 'static>(&self, stored: &K, key: &K) -> bool {
        match (self.text, text_of(stored)) {
            // Matching words and length are the whole text up to `SHORT_TEXT` bytes.
            (Some(text), Some(stored)) => {
                text.len() == stored.len() && (text.len() <= SHORT_TEXT || text == stored)
            }
            _ => stored == key,
        }
    }
}

/// The bytes of a string key. The `TypeId` comparisons behind `downcast_ref` are constants
/// per key type, so this folds to the answer at compile time.
#[inline(always)]
fn text_of<K: 'static>(key: &K) -> Option<&[u8]> {
    let key: &dyn Any = key;
    if let Some(text) = key.downcast_ref::<&'static str>() {
        Some(text.as_bytes())
    } else if let Some(text) = key.downcast_ref::<String>() {
        Some(text.as_bytes())
    } else if let Some(text) = key.downcast_ref::<Box<str>>() {
        Some(text.as_bytes())
    } else {
        None
    }
}

/// The first and last 8 bytes of `text` (overlapping below 16 bytes), its first and last 4
/// below 8 bytes, its bytes packed below 4: with the length, every byte of a text of at most
/// [`SHORT_TEXT`] bytes, in two unaligned loads.
#[inline(always)]
fn text_words(text: &[u8]) -> [u64; 2] {
    if let (Some(head), Some(tail)) = (text.first_chunk::<8>(), text.last_chunk::<8>()) {
        [u64::from_le_bytes(*head), u64::from_le_bytes(*tail)]
    } else if let (Some(head), Some(tail)) = (text.first_chunk::<4>(), text.last_chunk::<4>()) {
        [
            u64::from(u32::from_le_bytes(*head)),
            u64::from(u32::from_le_bytes(*tail)),
        ]
    } else {
        let packed = match *text {
            [a] => u64::from(a),
            [a, b] => u64::from(a) | u64::from(b) << 8,
            [a, b, c] => u64::from(a) | u64::from(b) << 8 | u64::from(c) << 16,
            _ => 0,
        };
        [packed, 0]
    }
}

/// The 128-bit product of `a` and `b`, its halves added by xor: one multiplication that mixes
/// every bit of both into the high bits the table indexes with.
#[inline(always)]
fn fold_multiply(a: u64, b: u64) -> u64 {
    let product = u128::from(a) * u128::from(b);
    (product as u64) ^ ((product >> 64) as u64)
}

impl<K: Eq + Hash + Clone + 'static, X> Table<K, X> {
    /// A table with no key.
    pub fn new() -> Self {
        Self::with_slots(MIN_SLOTS)
    }

    fn with_slots(slots: usize) -> Self {
        debug_assert!(slots.is_power_of_two() && slots >= MIN_SLOTS);
        Self {
            slots: (0..slots).map(|_| Slot::FREE).collect(),
            shift: 64 - slots.trailing_zeros(),
            order: Vec::new(),
            shares: Vec::new(),
        }
    }

    /// The route of `key` in this table.
    #[inline]
    pub fn get(&self, key: &K) -> Option<&Arc<Route<K, X>>> {
        self.probe(&Probe::new(key), key).map(|entry| &entry.route)
    }

    /// The lookup: from the key's home slot on, the first slot that holds it, or `None` at
    /// the first free slot.
    #[inline(always)]
    fn probe(&self, probe: &Probe<'_>, key: &K) -> Option<&Entry<K, X>> {
        let mask = self.slots.len() - 1;
        let mut index = (probe.hash >> self.shift) as usize;
        loop {
            // Never `None`: the index is masked to the power-of-two length.
            let slot = self.slots.get(index & mask)?;
            // A free slot ends the probe: the key would have been placed here or before.
            let entry = slot.entry.as_ref()?;
            if slot.hash == probe.hash && slot.words == probe.words && probe.is(&entry.key, key) {
                return Some(entry);
            }
            index += 1;
        }
    }

    /// Puts a key that is in no slot yet into the table, doubling the slots first if it would
    /// be more than half full.
    fn insert(&mut self, key: K, route: Arc<Route<K, X>>) {
        if (self.order.len() + 1) * 2 > self.slots.len() {
            let mut grown = Self::with_slots(self.slots.len() * 2);
            for slot in std::mem::take(&mut self.slots).into_vec() {
                if slot.entry.is_some() {
                    grown.place(slot);
                }
            }
            self.slots = grown.slots;
            self.shift = grown.shift;
        }
        let Probe { hash, words, .. } = Probe::new(&key);
        self.order.push(key.clone());
        self.place(Slot {
            hash,
            words,
            entry: Some(Entry::new(key, route)),
        });
    }

    /// Puts a used slot into the first free slot from its home slot on.
    fn place(&mut self, slot: Slot<K, X>) {
        let mask = self.slots.len() - 1;
        let mut index = (slot.hash >> self.shift) as usize & mask;
        while self.slots[index].entry.is_some() {
            index = (index + 1) & mask;
        }
        self.slots[index] = slot;
    }

    /// The caller keys with their routes, in registration order.
    pub fn routes(&self) -> impl Iterator<Item = (&K, &Arc<Route<K, X>>)> {
        self.order
            .iter()
            .filter_map(|key| self.get(key).map(|route| (key, route)))
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
        self.get(key)
            .or_else(|| base.and_then(|base| base.get(key)))
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
        self.shares.push((key.clone(), capacity));
        self.insert(key, Arc::new(route));
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
        self.insert(alias, Arc::new(route));
        Ok(())
    }

    /// A copy that shares every route with this table.
    fn copy(&self) -> Self {
        Self {
            slots: self.slots.clone(),
            shift: self.shift,
            order: self.order.clone(),
            shares: self.shares.clone(),
        }
    }

    fn close(&self) {
        for entry in self.slots.iter().filter_map(|slot| slot.entry.as_ref()) {
            entry.route.quota().close();
        }
    }
}

impl<K: Eq + Hash + Clone + 'static, X> Default for Table<K, X> {
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

impl<K: Eq + Hash + Clone + 'static, X> Routes<K, X> {
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
        self.with_entry(key, |entry| f(entry.map(|entry| &entry.route)))
    }

    /// Runs `f` on `key`'s entry, found as [`Routes::with_route`] finds its route.
    #[inline(always)]
    fn with_entry<R>(&self, key: &K, f: impl FnOnce(Option<&Entry<K, X>>) -> R) -> R {
        let probe = Probe::new(key);
        match self.fixed.probe(&probe, key) {
            Some(slot) => f(Some(slot)),
            None => self.added.with(|added| f(added.probe(&probe, key))),
        }
    }

    /// The first attempt of an admission: `key`'s route, and one try of its quota. A permit is
    /// handed with the route to `admitted`, which makes the caller's admission of it.
    #[inline]
    pub fn admit<A>(
        &self,
        key: &K,
        admitted: impl FnOnce(QuotaPermit, &Arc<Route<K, X>>) -> A,
    ) -> First<A, K, X> {
        self.with_entry(key, |entry| match entry {
            None => First::Unregistered,
            Some(entry) => match entry.try_acquire() {
                Ok(permit) => First::Admitted(admitted(permit, &entry.route)),
                Err(TryAcquireError::NoCapacity) => First::Wait(Arc::clone(&entry.route)),
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
    use std::hash::{BuildHasher, Hash, Hasher};

    use super::{KeyHash, Table};

    /// Adds `present` as shares, then checks that each finds its own route and that none of
    /// `absent` is found; and the same through a copy (a published table's start).
    fn finds_exactly<K: Eq + Hash + Clone + std::fmt::Debug + 'static>(
        present: &[K],
        absent: &[K],
    ) {
        let mut table: Table<K, ()> = Table::new();
        for key in present {
            table
                .add_share(None, key.clone(), 1, |_, _| ())
                .unwrap_or_else(|_| panic!("{key:?} added once"));
        }
        for table in [&table, &table.copy()] {
            for key in present {
                let route = table.get(key).unwrap_or_else(|| panic!("{key:?} is found"));
                assert_eq!(route.share(), key);
            }
            for key in absent {
                assert!(table.get(key).is_none(), "{key:?} is not registered");
            }
            let order: Vec<&K> = table.routes().map(|(key, _)| key).collect();
            assert_eq!(order, present.iter().collect::<Vec<_>>());
        }
    }

    /// Texts of every length up to 40 bytes, and for each the texts a lookup by words could
    /// confuse with it: one byte changed at the start, the middle and the end, one byte more
    /// or less of the same letter (equal words below 16 bytes), and an embedded NUL.
    fn texts() -> (Vec<String>, Vec<String>) {
        let mut present = Vec::new();
        let mut absent = Vec::new();
        for len in 0..=40_usize {
            let text: String = (0..len)
                .map(|i| char::from(b'a' + (i * 7 % 26) as u8))
                .collect();
            for at in [0, len / 2, len.saturating_sub(1)] {
                if len > 0 {
                    let mut near = text.clone().into_bytes();
                    near[at] = b'Z';
                    absent.push(String::from_utf8(near).expect("ascii"));
                }
            }
            present.push(text);
            present.push("q".repeat(len + 41));
            absent.push("q".repeat(len + 42 + 41));
            absent.push(format!("{}\0", "r".repeat(len)));
        }
        for len in 0..=40 {
            absent.push("r".repeat(len));
            // Runs of one letter: equal words at every length from 4 to 16.
            match len % 2 {
                0 => present.push("s".repeat(len)),
                _ => absent.push("s".repeat(len)),
            }
        }
        present.sort();
        present.dedup();
        absent.retain(|key| !present.contains(key));
        (present, absent)
    }

    /// String keys of every length, short ones told apart by their words and length alone:
    /// every registered key is found, no near miss is (as `&'static str`, `String` and
    /// `Box<str>`), through growth from the smallest table.
    #[test]
    fn table_finds_every_text_key_and_no_near_miss() {
        let (present, absent) = texts();
        assert!(present.len() > 64, "the table grows several times");
        let leak = |keys: &[String]| -> Vec<&'static str> {
            keys.iter()
                .map(|key| &*Box::leak(key.clone().into_boxed_str()))
                .collect()
        };
        finds_exactly(&leak(&present), &leak(&absent));
        finds_exactly(&present, &absent);
        let boxed = |keys: &[String]| -> Vec<Box<str>> {
            keys.iter()
                .map(|key| key.clone().into_boxed_str())
                .collect()
        };
        finds_exactly(&boxed(&present), &boxed(&absent));
    }

    /// A key whose hash is the same for every value: every lookup probes past the others,
    /// and `Eq` decides.
    #[derive(Debug, Clone, PartialEq, Eq)]
    struct Colliding(u32);

    impl Hash for Colliding {
        fn hash<H: Hasher>(&self, state: &mut H) {
            state.write_u8(1);
        }
    }

    /// Keys of other types are hashed and compared as themselves, through collisions too.
    #[test]
    fn table_finds_other_keys_through_collisions() {
        let present: Vec<u64> = (0..100).map(|n| n * 3).collect();
        let absent: Vec<u64> = (0..100).map(|n| n * 3 + 1).collect();
        finds_exactly(&present, &absent);
        let present: Vec<Colliding> = (0..40).map(Colliding).collect();
        let absent: Vec<Colliding> = (40..50).map(Colliding).collect();
        finds_exactly(&present, &absent);
        let present: Vec<(u8, &'static str)> = vec![(1, "journal"), (2, "journal"), (1, "ledger")];
        finds_exactly(&present, &[(2, "ledger"), (1, "journa")]);
    }

    /// An alias's entry reaches its share's quota: one permit of a share of one is taken
    /// through either key.
    #[test]
    fn alias_entry_reaches_the_share_quota() {
        let mut table: Table<&'static str, ()> = Table::new();
        assert!(table.add_share(None, "journal", 1, |_, _| ()).is_ok());
        assert!(table
            .add_alias(None, "ledger", "journal", |_, _| ())
            .is_ok());
        let routes = super::Routes::new(table);
        let held = match routes.admit(&"ledger", |permit, route| (permit, *route.share())) {
            super::First::Admitted(held) => held,
            other => panic!("admitted, not {other:?}"),
        };
        assert_eq!(held.1, "journal");
        assert!(matches!(
            routes.admit(&"journal", |p, _| p),
            super::First::Wait(_)
        ));
        drop(held);
        assert!(matches!(
            routes.admit(&"journal", |p, _| p),
            super::First::Admitted(_)
        ));
        assert!(matches!(
            routes.admit(&"gc", |p, _| p),
            super::First::Unregistered
        ));
    }

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
