//! Hints: a lock-free way to the finished values of a registry shard, paid for in advance.
//!
//! # What a hint is
//!
//! Each registry shard keeps a small array of hint words beside its locked table. A key may
//! sit in one of two candidate words (picked from its hash). A word is empty (`0`) or names a
//! [`Lease`]: a reference-counted box the crate owns, holding the key and a clone of the
//! value, and packs
//!
//! ```text
//!  63                                 20 19    16 15            0
//! +-------------------------------------+--------+---------------+
//! | lease address >> 4 (44 bits)        | tag(4) | taken (16)    |
//! +-------------------------------------+--------+---------------+
//! ```
//!
//! `taken` counts the references readers took through this word since it was set up, and the
//! tag (four bits of the key's hash) lets a reader skip the other candidate's key without
//! touching it. A lease is 16-byte aligned, so its address loses nothing to the shift; one
//! whose address does not fit 48 bits is simply never published.
//!
//! # Prepaid references
//!
//! When a writer (holding the shard's write lock) **sets up** a word, it creates the lease
//! with `PREPAID + 1` references: `PREPAID` for readers to take, one the word itself keeps so
//! that the lease outlives its publication. Then it publishes `(lease, tag, 0)` with a
//! `Release` store. The order matters: a reader may take a reference as soon as the word is
//! visible, so the references must exist first.
//!
//! A **hit** loads the word and, if it names a lease with the right tag and `taken < PREPAID`,
//! CASes `taken` to `taken + 1` (`Acquire`, so it sees the lease's contents). Success means
//! the reader owns one of the prepaid references: it may read the lease, and it gives the
//! reference back with one `fetch_sub` when it is done, exactly like an `Arc` clone. Before
//! the CAS succeeds the reader never dereferences the address; so a word that was withdrawn,
//! or reused for another lease at the same address, costs it only a failed CAS or a key that
//! does not match (then it gives the reference back). A hit is therefore one CAS on a word
//! only this key's readers (and the keys that share its cache line) write, and one
//! `fetch_sub` on the lease when the handle drops: no shard-wide write.
//!
//! A word whose `taken` reached `PREPAID` is **spent**: readers take the locked path, and ask
//! a writer to **refill** it: under the write lock, swap the word empty (its final `taken`
//! is then exact, since every reader's CAS is ordered before or after the swap), add back
//! the `taken` references the readers consumed (the lease again has `PREPAID + 1` of its
//! own), and publish `(lease, tag, 0)`. A reader holding an old load that finds the count
//! equal again succeeds, and owns a reference counted by the new word: sound either way.
//!
//! **Withdrawing** (the key's value removed, or the registry closed) swaps the word empty and
//! gives back the references it still owns, `PREPAID - taken + 1`, once the shard's lock is
//! released (the last one frees the lease, which drops its value clone).
//!
//! **Placing** a key takes the first of its candidates that is empty. When both are taken, a
//! writer first **moves** an occupant (of the first candidate, else of the second) to the
//! occupant's own other candidate if that one is empty, and takes the word it left: a key
//! without a word would take the shard's read lock on every hit. A move is a refill whose
//! last store goes to the other word: swap the word empty (`taken` final), add back the
//! references readers took, publish `(lease, tag, 0)` in the other word. Between the swap
//! and the store the occupant's readers miss both words and take the locked path; a reader
//! holding a load of the old word fails its CAS, or wins a word set up since for another
//! lease and finds its key does not match, as after a withdrawal. A lease records its key's
//! hash for this.
//!
//! Only writers, under the shard's write lock, move a word between empty and full or a lease
//! between words; readers only ever raise `taken`. A writer may dereference a published word's
//! lease because the word owns a reference to it.

use std::borrow::Borrow;
use std::fmt;
use std::ops::Deref;
use std::ptr::NonNull;

use crate::sync::{trace_transition, Arc, AtomicU64, AtomicUsize, Ordering};

/// References a set-up lease holds for readers to take. Small under loom, so a model reaches
/// a spent word in a few hits.
#[cfg(not(slotpool_loom))]
pub(crate) const PREPAID: u64 = 1 << 15;
/// References a set-up lease holds for readers to take (loom: spent after two hits).
#[cfg(slotpool_loom)]
pub(crate) const PREPAID: u64 = 2;

const TAKEN_BITS: u32 = 16;
const TAKEN_MASK: u64 = (1 << TAKEN_BITS) - 1;
const TAG_SHIFT: u32 = TAKEN_BITS;
const TAG_MASK: u64 = 0xf;
/// The low bits of a lease's address that its alignment keeps zero.
const ALIGN_BITS: u32 = 4;
/// Where the shifted address starts in the word.
const ADDR_SHIFT: u32 = TAKEN_BITS + 4 - ALIGN_BITS;
/// The highest address (exclusive) a word can name.
const ADDR_LIMIT: u64 = 1 << 48;

const _: () = assert!(PREPAID <= TAKEN_MASK, "the taken count must fit its field");

/// One hint word's fields. `0` is the empty word (no lease has address zero).
#[derive(Clone, Copy, PartialEq, Eq)]
struct Word(u64);

impl Word {
    fn new(head: NonNull<u8>, tag: u64, taken: u64) -> Option<Word> {
        let addr = head.as_ptr().expose_provenance() as u64;
        if addr >= ADDR_LIMIT || addr & ((1 << ALIGN_BITS) - 1) != 0 {
            return None;
        }
        Some(Word(
            (addr << ADDR_SHIFT) | ((tag & TAG_MASK) << TAG_SHIFT) | taken,
        ))
    }

    fn is_empty(self) -> bool {
        self.0 == 0
    }

    fn taken(self) -> u64 {
        self.0 & TAKEN_MASK
    }

    fn tag(self) -> u64 {
        (self.0 >> TAG_SHIFT) & TAG_MASK
    }

    fn with_taken(self, taken: u64) -> Word {
        Word((self.0 & !TAKEN_MASK) | taken)
    }

    /// The lease address. Only dereference it while owning a reference to the lease.
    fn addr(self) -> *mut u8 {
        std::ptr::with_exposed_provenance_mut(
            ((self.0 >> ADDR_SHIFT) & !((1 << ALIGN_BITS) - 1)) as usize,
        )
    }
}

impl fmt::Debug for Word {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("Word(empty)");
        }
        f.debug_struct("Word")
            .field("addr", &self.addr())
            .field("tag", &self.tag())
            .field("taken", &self.taken())
            .finish()
    }
}

/// The part of a lease that does not depend on the key type: what a [`Lent`] handle reaches.
#[repr(C)]
struct Head<V> {
    /// References outstanding: readers' handles plus those the publishing word still owns.
    /// INVARIANT: the lease is freed exactly when this reaches zero.
    refs: AtomicUsize,
    /// The value this lease lends (a clone of the registry's).
    value: V,
    /// Frees the whole lease (it knows the key's type).
    free: unsafe fn(NonNull<Head<V>>),
    /// Under loom a freed lease is poisoned, not deallocated: its key and value are dropped
    /// and this is set, so a model that uses or frees it again fails on an assertion rather
    /// than on undefined behaviour. (A plain std atomic: loom runs one thread at a time.)
    #[cfg(slotpool_loom)]
    freed: std::sync::atomic::AtomicBool,
}

impl<V> Head<V> {
    /// Under loom: asserts the lease was not freed (a use after free). Nothing otherwise.
    #[inline]
    fn assert_alive(&self) {
        #[cfg(slotpool_loom)]
        assert!(
            !self.freed.load(std::sync::atomic::Ordering::SeqCst),
            "a lease used after it was freed"
        );
    }
}

/// A reference-counted box the crate owns: the key (to check a hit against) and the value.
/// `repr(C)` with the head first, so a pointer to the lease is a pointer to its head.
#[repr(C, align(16))]
struct Lease<K, V> {
    head: Head<V>,
    key: K,
    /// The key's hash, for a writer that moves the word to the key's other candidate.
    hash: u64,
}

/// Frees a lease created as `Lease<K, V>`.
///
/// # Safety
/// `head` came from `Box::into_raw` of a `Lease<K, V>`, and no reference to it remains.
unsafe fn free_lease<K, V>(head: NonNull<Head<V>>) {
    let lease = head.as_ptr().cast::<Lease<K, V>>();
    #[cfg(not(slotpool_loom))]
    // SAFETY: the caller's contract; `Head` is the first field of the `repr(C)` lease.
    drop(unsafe { Box::from_raw(lease) });
    #[cfg(slotpool_loom)]
    // SAFETY: as above; the allocation is kept (poisoned), its contents dropped once.
    unsafe {
        let freed = &(*lease).head.freed;
        assert!(
            !freed.swap(true, std::sync::atomic::Ordering::SeqCst),
            "a lease freed twice"
        );
        std::ptr::drop_in_place(&raw mut (*lease).head.value);
        std::ptr::drop_in_place(&raw mut (*lease).key);
    }
    trace_transition!("hint: lease freed");
}

/// Gives back `n` references to the lease at `head`, freeing it with the last.
///
/// # Safety
/// The caller owns `n` references to a live lease.
unsafe fn release<V>(head: NonNull<Head<V>>, n: usize) {
    // SAFETY: the caller owns references, so the lease is alive.
    let lease = unsafe { head.as_ref() };
    lease.assert_alive();
    let refs = &lease.refs;
    // `AcqRel`: `Release` orders this owner's reads of the lease before the free; `Acquire`
    // makes the freeing owner see every other owner's.
    let before = refs.fetch_sub(n, Ordering::AcqRel);
    debug_assert!(before >= n, "a lease released more references than it had");
    if before == n {
        // SAFETY: that was the last reference; `free` is the lease's own.
        unsafe { (head.as_ref().free)(head) };
    }
}

/// A reference to a lease's value, taken on a hit: dropping it gives the reference back.
pub struct LeaseRef<V> {
    head: NonNull<Head<V>>,
}

// SAFETY: a `LeaseRef` shares the lease's value like an `Arc<V>` does (the key, dropped with
// the lease on whichever thread releases last, is required `Send + Sync` at set-up).
unsafe impl<V: Send + Sync> Send for LeaseRef<V> {}
// SAFETY: as above.
unsafe impl<V: Send + Sync> Sync for LeaseRef<V> {}

impl<V> LeaseRef<V> {
    #[inline]
    pub(super) fn value(&self) -> &V {
        // SAFETY: this handle owns a reference, so the lease is alive.
        let lease = unsafe { self.head.as_ref() };
        lease.assert_alive();
        &lease.value
    }
}

impl<V: fmt::Debug> fmt::Debug for LeaseRef<V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("LeaseRef").field(self.value()).finish()
    }
}

impl<V> Clone for LeaseRef<V> {
    fn clone(&self) -> Self {
        // SAFETY: this handle owns a reference, so the lease is alive. `Relaxed`, as for an
        // `Arc` clone: the new reference comes from one the thread owns already.
        let lease = unsafe { self.head.as_ref() };
        lease.assert_alive();
        lease.refs.fetch_add(1, Ordering::Relaxed);
        Self { head: self.head }
    }
}

impl<V> Drop for LeaseRef<V> {
    fn drop(&mut self) {
        // SAFETY: this handle owns one reference.
        unsafe { release(self.head, 1) };
    }
}

/// A value lent out of a registry: an `Arc` clone (the locked path, a flight's outcome) or a
/// reference to a hint's lease (a hit). Derefs to the value's target.
pub enum Lent<V> {
    /// A clone of the value's `Arc`.
    Shared(Arc<V>),
    /// A prepaid reference to a lease that holds a clone of the value's `Arc`.
    Leased(LeaseRef<Arc<V>>),
}

impl<V> Lent<V> {
    /// The value's `Arc`.
    #[inline]
    pub fn arc(&self) -> &Arc<V> {
        match self {
            Lent::Shared(value) => value,
            Lent::Leased(lease) => lease.value(),
        }
    }

    /// Whether two handles lend the same value.
    pub fn ptr_eq(&self, other: &Lent<V>) -> bool {
        Arc::ptr_eq(self.arc(), other.arc())
    }

    /// The value's `Arc` (one clone when leased).
    pub fn into_arc(self) -> Arc<V> {
        match self {
            Lent::Shared(value) => value,
            Lent::Leased(lease) => Arc::clone(lease.value()),
        }
    }
}

impl<V> From<Arc<V>> for Lent<V> {
    fn from(value: Arc<V>) -> Self {
        Lent::Shared(value)
    }
}

impl<V> Clone for Lent<V> {
    fn clone(&self) -> Self {
        match self {
            Lent::Shared(value) => Lent::Shared(Arc::clone(value)),
            Lent::Leased(lease) => Lent::Leased(lease.clone()),
        }
    }
}

impl<V> Deref for Lent<V> {
    type Target = V;

    #[inline]
    fn deref(&self) -> &V {
        self.arc()
    }
}

impl<V: fmt::Debug> fmt::Debug for Lent<V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

/// What a reader's [`Hints::take`] found.
pub(super) enum Taken<V> {
    /// A reference to the key's lease.
    Hit(LeaseRef<V>),
    /// The key's word is spent: refill it (under the write lock), then read the table.
    Spent,
    /// No word names the key: read the table.
    Miss,
}

/// References a writer took out of the hints under the lock, given back by its drop (after
/// the lock is released, since the last one may free a value).
pub(super) struct Withdrawn<V> {
    leases: Vec<(NonNull<Head<V>>, usize)>,
}

impl<V> Withdrawn<V> {
    pub(super) fn new() -> Self {
        Self { leases: Vec::new() }
    }
}

impl<V> Drop for Withdrawn<V> {
    fn drop(&mut self) {
        for (head, n) in self.leases.drain(..) {
            // SAFETY: the word that owned these `n` references was swapped out by the writer
            // that pushed them, so they are this value's to give back.
            unsafe { release(head, n) };
        }
    }
}

/// One shard's hint words. See the [module documentation](self).
pub(super) struct Hints {
    /// INVARIANT: `words.len()` is a power of two (or zero: no hints). A non-empty word owns
    /// `PREPAID - taken + 1` references to its lease; only writers holding the shard's write
    /// lock move a word between empty and full; readers only raise `taken`.
    words: Box<[AtomicU64]>,
}

impl Hints {
    pub(super) fn new(len: usize) -> Self {
        let len = if len == 0 { 0 } else { len.next_power_of_two() };
        Self {
            words: (0..len).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// The two candidate words of a hash, and its tag.
    #[inline]
    fn candidates(&self, hash: u64) -> Option<([usize; 2], u64)> {
        let first = self.first(hash)?;
        Some(([first, self.second(hash, first)], Self::tag(hash)))
    }

    /// Under loom: the two candidate words of a hash, for a model to pick keys that collide.
    #[cfg(slotpool_loom)]
    pub(super) fn words_of(&self, hash: u64) -> Option<[usize; 2]> {
        self.candidates(hash).map(|(words, _)| words)
    }

    /// The first candidate word of a hash (`None`: this shard has no hints).
    #[inline(always)]
    fn first(&self, hash: u64) -> Option<usize> {
        let mask = self.words.len().checked_sub(1)?;
        Some((hash >> 8) as usize & mask)
    }

    /// The second candidate word of a hash whose first is `first`: another word when the
    /// shard has two or more.
    #[inline(always)]
    fn second(&self, hash: u64, first: usize) -> usize {
        let mask = self.words.len() - 1;
        let second = (hash >> 20) as usize & mask;
        if second == first {
            (second ^ 1) & mask
        } else {
            second
        }
    }

    /// The four bits of a hash a word is tagged with.
    #[inline(always)]
    fn tag(hash: u64) -> u64 {
        hash >> 60
    }

    /// A reader's lock-free look for the key: a reference to its lease, or why not.
    ///
    /// The first candidate is looked at inline: `publish` fills it whenever it is free, so it
    /// holds nearly every key's word. The second one is looked at out of line.
    #[inline(always)]
    pub(super) fn take<K, V, Q>(&self, hash: u64, key: &Q) -> Taken<V>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        let Some(first) = self.first(hash) else {
            return Taken::Miss;
        };
        match self.take_at::<K, V, Q>(first, Self::tag(hash), key) {
            Taken::Hit(lease) => Taken::Hit(lease),
            Taken::Spent => self.take_second::<K, V, Q>(hash, first, key, true),
            Taken::Miss => self.take_second::<K, V, Q>(hash, first, key, false),
        }
    }

    /// [`Hints::take`]'s look at the second candidate, given whether the first was the key's
    /// and spent.
    #[cold]
    #[inline(never)]
    fn take_second<K, V, Q>(&self, hash: u64, first: usize, key: &Q, spent: bool) -> Taken<V>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        let second = self.second(hash, first);
        match self.take_at::<K, V, Q>(second, Self::tag(hash), key) {
            Taken::Miss if spent => Taken::Spent,
            taken => taken,
        }
    }

    /// One candidate word's answer: a reference to the key's lease, [`Taken::Spent`] (a
    /// spent word with the key's tag) or [`Taken::Miss`].
    #[inline(always)]
    fn take_at<K, V, Q>(&self, index: usize, tag: u64, key: &Q) -> Taken<V>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        let word = &self.words[index];
        let mut seen = Word(word.load(Ordering::Relaxed));
        let won = loop {
            if seen.is_empty() || seen.tag() != tag {
                return Taken::Miss;
            }
            if seen.taken() >= PREPAID {
                return Taken::Spent;
            }
            match word.compare_exchange_weak(
                seen.0,
                seen.with_taken(seen.taken() + 1).0,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => break seen,
                // Another reader took a reference, or a writer withdrew, refilled or replaced
                // the word: decide again on what it holds now.
                Err(actual) => seen = Word(actual),
            }
        };
        let Some(head) = NonNull::new(won.addr().cast::<Head<V>>()) else {
            return Taken::Miss;
        };
        // The CAS on the word that named this lease with `taken` below `PREPAID` handed this
        // caller one of the word's references.
        let lease = LeaseRef { head };
        // SAFETY: `lease` owns a reference.
        unsafe { head.as_ref() }.assert_alive();
        // SAFETY: the lease is alive while `lease` owns its reference, and every lease a word
        // of this shard names was created as `Lease<K, V>` by `publish`.
        let lease_key = unsafe { &(*head.as_ptr().cast::<Lease<K, V>>()).key };
        if lease_key.borrow() == key {
            trace_transition!("hint: hit");
            return Taken::Hit(lease);
        }
        // Another key with the same tag (or a lease set up at this address since the load):
        // give the reference back (dropping `lease`); the caller tries the other candidate.
        Taken::Miss
    }

    /// Sets up a word for `key` lending `value`, if one of its candidates is empty. The
    /// caller holds the shard's write lock and has withdrawn any word of the key before.
    pub(super) fn publish<K, V>(&self, hash: u64, key: &K, value: &V)
    where
        K: Clone + Send + Sync + 'static,
        V: Clone + Send + Sync + 'static,
    {
        let Some((candidates, tag)) = self.candidates(hash) else {
            return;
        };
        // A free candidate, the first if both are; else one an occupant moves out of.
        let Some(index) = candidates
            .into_iter()
            .find(|&index| Word(self.words[index].load(Ordering::Relaxed)).is_empty())
            .or_else(|| {
                candidates
                    .into_iter()
                    .find(|&index| self.move_out::<K, V>(index))
            })
        else {
            return;
        };
        let word = &self.words[index];
        // Prepaid before the word is visible: a reader may take one the moment it is.
        let lease = Box::new(Lease {
            head: Head {
                refs: AtomicUsize::new(PREPAID as usize + 1),
                value: value.clone(),
                free: free_lease::<K, V>,
                #[cfg(slotpool_loom)]
                freed: std::sync::atomic::AtomicBool::new(false),
            },
            key: key.clone(),
            hash,
        });
        let head = NonNull::from(Box::leak(lease)).cast::<u8>();
        match Word::new(head, tag, 0) {
            Some(published) => {
                word.store(published.0, Ordering::Release);
                trace_transition!("hint: set up");
            }
            // SAFETY: never published, so this is the only reference holder.
            None => unsafe { free_lease::<K, V>(head.cast()) },
        }
    }

    /// The word of `key` (found by its lease's key), if any. Writers only.
    fn find<K, V, Q>(&self, hash: u64, key: &Q) -> Option<&AtomicU64>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        let (candidates, tag) = self.candidates(hash)?;
        candidates
            .iter()
            .map(|&index| &self.words[index])
            .find(|word| {
                let seen = Word(word.load(Ordering::Relaxed));
                // SAFETY: a published word owns a reference to its lease, and only writers (this
                // caller holds the write lock) unpublish one, so the lease is alive.
                !seen.is_empty()
                    && seen.tag() == tag
                    && unsafe { (*seen.addr().cast::<Lease<K, V>>()).key.borrow() == key }
            })
    }

    /// Withdraws `key`'s word, if it has one, into `out` (whose drop gives back what the word
    /// still owned). The caller holds the shard's write lock.
    pub(super) fn withdraw<K, V, Q>(&self, hash: u64, key: &Q, out: &mut Withdrawn<V>)
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        if let Some(word) = self.find::<K, V, Q>(hash, key) {
            Self::settle(word, out);
        }
    }

    /// Withdraws every word into `out`. The caller holds the shard's write lock.
    pub(super) fn withdraw_all<V>(&self, out: &mut Withdrawn<V>) {
        for word in self.words.iter() {
            Self::settle(word, out);
        }
    }

    fn settle<V>(word: &AtomicU64, out: &mut Withdrawn<V>) {
        // The swap orders this against every reader's CAS: `taken` is final.
        let last = Word(word.swap(0, Ordering::AcqRel));
        if let Some(head) = NonNull::new(last.addr().cast::<Head<V>>()) {
            let owned = PREPAID - last.taken() + 1;
            out.leases.push((head, owned as usize));
            trace_transition!("hint: withdrawn after {} taken", last.taken());
        }
    }

    /// Refills `key`'s spent word (if it still has one): empties it, restores the references
    /// readers took, and publishes it again. The caller holds the shard's write lock.
    pub(super) fn refill<K, V, Q>(&self, hash: u64, key: &Q)
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        let Some(word) = self.find::<K, V, Q>(hash, key) else {
            return;
        };
        Self::republish::<V>(word, word);
        trace_transition!("hint: refilled");
    }

    /// Moves the lease that word `index` names to its key's other candidate, if that word is
    /// empty, so that another key can have this one (a key whose candidates are both taken
    /// would otherwise have no word, and each of its hits would take the shard's read lock).
    /// Returns whether the word is empty now. The caller holds the shard's write lock.
    fn move_out<K, V>(&self, index: usize) -> bool {
        let seen = Word(self.words[index].load(Ordering::Relaxed));
        if seen.is_empty() {
            return true;
        }
        // SAFETY: a published word owns a reference to its lease, only writers (this caller
        // holds the write lock) unpublish one, and every lease of this shard's words was
        // created as `Lease<K, V>` by `publish`.
        let occupant = unsafe { (*seen.addr().cast::<Lease<K, V>>()).hash };
        let Some(([first, second], _)) = self.candidates(occupant) else {
            return false;
        };
        let other = if index == first { second } else { first };
        if other == index || !Word(self.words[other].load(Ordering::Relaxed)).is_empty() {
            return false;
        }
        Self::republish::<V>(&self.words[index], &self.words[other]);
        trace_transition!("hint: moved {} -> {}", index, other);
        true
    }

    /// Empties `from` and publishes its lease, prepaid again, in `to` (the same word for a
    /// refill, the key's other candidate for a move). The caller holds the shard's write lock;
    /// `from` is published and `to` is empty unless it is `from`.
    fn republish<V>(from: &AtomicU64, to: &AtomicU64) {
        // Empty first, so `taken` is final (readers meanwhile miss the key's words and take
        // the locked path).
        let last = Word(from.swap(0, Ordering::AcqRel));
        let head = last.addr().cast::<Head<V>>();
        // SAFETY: the word owned `PREPAID - taken + 1 >= 1` references, now this caller's.
        let lease = unsafe { &*head };
        lease.assert_alive();
        let refs = &lease.refs;
        // Prepaid again before the word is visible again.
        refs.fetch_add(last.taken() as usize, Ordering::Relaxed);
        to.store(last.with_taken(0).0, Ordering::Release);
        trace_transition!("hint: republished after {} taken", last.taken());
    }
}

impl fmt::Debug for Hints {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hints")
            .field("words", &self.words.len())
            .finish()
    }
}

#[cfg(all(test, not(slotpool_loom)))]
mod tests {
    use super::*;

    /// A hash whose first candidate (of four words) is `first`, second `second` and tag `tag`.
    fn hash(first: u64, second: u64, tag: u64) -> u64 {
        (tag << 60) | (second << 20) | (first << 8)
    }

    fn publish(hints: &Hints, hash: u64, key: &str, value: u32) {
        hints.publish::<String, u32>(hash, &key.to_owned(), &value);
    }

    fn take(hints: &Hints, hash: u64, key: &str) -> Taken<u32> {
        hints.take::<String, u32, str>(hash, key)
    }

    fn hit(taken: Taken<u32>) -> Option<u32> {
        match taken {
            Taken::Hit(lease) => Some(*lease.value()),
            Taken::Spent | Taken::Miss => None,
        }
    }

    /// Gives back every word's references (freeing the leases).
    fn withdraw_all(hints: &Hints) {
        let mut out = Withdrawn::<u32>::new();
        hints.withdraw_all(&mut out);
    }

    #[test]
    fn a_key_whose_first_word_is_taken_is_lent_through_its_second() {
        let hints = Hints::new(4);
        let (a, b) = (hash(0, 1, 5), hash(0, 2, 5));
        publish(&hints, a, "a", 1);
        publish(&hints, b, "b", 2);
        // Same first word and tag: `b`'s look passes over `a`'s lease (its key differs).
        assert_eq!(hit(take(&hints, b, "b")), Some(2));
        assert_eq!(hit(take(&hints, a, "a")), Some(1));
        // A first word with another tag is passed over without reading its lease.
        let c = hash(2, 3, 6);
        publish(&hints, c, "c", 3);
        assert_eq!(
            hit(take(&hints, c, "c")),
            Some(3),
            "`b` holds word 2, `c` is in word 3"
        );
        withdraw_all(&hints);
        assert!(matches!(take(&hints, b, "b"), Taken::Miss));
    }

    #[test]
    fn keys_whose_first_candidates_differ_each_get_a_word() {
        let hints = Hints::new(4);
        // Two keys share each second candidate: only the first ones fit all four.
        let keys = [
            ("a", hash(0, 2, 1)),
            ("b", hash(1, 2, 2)),
            ("c", hash(2, 1, 3)),
            ("d", hash(3, 1, 4)),
        ];
        for (value, (key, hash)) in (0..).zip(keys) {
            publish(&hints, hash, key, value);
        }
        for (value, (key, hash)) in (0..).zip(keys) {
            assert_eq!(hit(take(&hints, hash, key)), Some(value), "{key}");
        }
        withdraw_all(&hints);
    }

    #[test]
    fn a_spent_first_word_is_reported_spent_when_the_second_has_nothing() {
        let hints = Hints::new(4);
        let a = hash(1, 2, 7);
        publish(&hints, a, "a", 1);
        for _ in 0..PREPAID {
            assert_eq!(hit(take(&hints, a, "a")), Some(1));
        }
        assert!(matches!(take(&hints, a, "a"), Taken::Spent));
        // Another key with the same candidates and tag reads `Spent` too (the word's tag is
        // its own, and a spent word is not read further); with another tag, `Miss`.
        assert!(
            matches!(take(&hints, a, "b"), Taken::Spent),
            "its tag matches the spent word"
        );
        assert!(matches!(take(&hints, hash(1, 2, 8), "b"), Taken::Miss));
        hints.refill::<String, u32, str>(a, "a");
        assert_eq!(hit(take(&hints, a, "a")), Some(1));
        withdraw_all(&hints);
    }

    #[test]
    fn a_hash_whose_candidates_coincide_gets_the_neighbouring_word() {
        let hints = Hints::new(4);
        let x = hash(1, 1, 9);
        publish(&hints, x, "x", 1);
        publish(&hints, x, "y", 2);
        publish(&hints, x, "z", 3);
        assert_eq!(hit(take(&hints, x, "x")), Some(1));
        assert_eq!(
            hit(take(&hints, x, "y")),
            Some(2),
            "in word 0, beside word 1"
        );
        assert!(
            matches!(take(&hints, x, "z"), Taken::Miss),
            "both words were taken"
        );
        // Words 2 and 3 are free for two keys that have only those two.
        let (p, q) = (hash(3, 2, 10), hash(2, 3, 11));
        publish(&hints, p, "p", 4);
        publish(&hints, q, "q", 5);
        assert_eq!(hit(take(&hints, p, "p")), Some(4));
        assert_eq!(hit(take(&hints, q, "q")), Some(5));
        withdraw_all(&hints);
    }

    #[test]
    fn a_key_whose_first_word_is_taken_gets_its_own_second() {
        let hints = Hints::new(4);
        publish(&hints, hash(0, 2, 1), "x", 1);
        publish(&hints, hash(1, 2, 2), "y", 2);
        // Words 0 and 1 are taken: `c` fits only in its second, word 3.
        let c = hash(0, 3, 3);
        publish(&hints, c, "c", 3);
        assert_eq!(hit(take(&hints, c, "c")), Some(3));
        withdraw_all(&hints);
    }

    #[test]
    fn a_key_whose_words_are_both_taken_moves_an_occupant_to_its_other_word() {
        let hints = Hints::new(4);
        let (a, b) = (hash(0, 2, 1), hash(1, 3, 2));
        publish(&hints, a, "a", 1);
        publish(&hints, b, "b", 2);
        // A hit on `a` before the move: the move gives back what readers took.
        let before = take(&hints, a, "a");
        assert_eq!(hit(take(&hints, a, "a")), Some(1));
        // `c` has words 0 and 1, both taken: `a` (in its first) moves to its second, 2.
        let c = hash(0, 1, 3);
        publish(&hints, c, "c", 3);
        assert_eq!(
            hit(take(&hints, c, "c")),
            Some(3),
            "in word 0, `a`'s old word"
        );
        assert_eq!(
            hit(take(&hints, a, "a")),
            Some(1),
            "through its second word"
        );
        assert_eq!(hit(take(&hints, b, "b")), Some(2), "not moved");
        assert_eq!(
            hit(before),
            Some(1),
            "a reference taken before the move still reads"
        );
        // `d` has words 0 and 1 too, but their occupants' other words are taken (`c`'s is 1,
        // `b`'s is 3, empty: `b` moves).
        let d = hash(0, 1, 4);
        publish(&hints, d, "d", 4);
        assert_eq!(
            hit(take(&hints, d, "d")),
            Some(4),
            "in word 1, `b`'s old word"
        );
        assert_eq!(hit(take(&hints, b, "b")), Some(2), "through word 3");
        // Now every word is taken and no occupant can move: `e` gets none.
        let e = hash(0, 1, 5);
        publish(&hints, e, "e", 5);
        assert!(matches!(take(&hints, e, "e"), Taken::Miss));
        for (key, hash, value) in [("a", a, 1), ("b", b, 2), ("c", c, 3), ("d", d, 4)] {
            assert_eq!(hit(take(&hints, hash, key)), Some(value), "{key}");
        }
        withdraw_all(&hints);
    }

    #[test]
    fn a_moved_word_is_prepaid_again() {
        let hints = Hints::new(4);
        let a = hash(0, 2, 1);
        publish(&hints, a, "a", 1);
        publish(&hints, hash(1, 3, 2), "b", 2);
        // Spend part of `a`'s word, keeping the references.
        let held: Vec<_> = (0..3).map(|_| take(&hints, a, "a")).collect();
        publish(&hints, hash(0, 1, 3), "c", 3);
        // The moved word lends a full `PREPAID` again (the three taken were added back).
        let again: Vec<_> = (0..PREPAID).map(|_| hit(take(&hints, a, "a"))).collect();
        assert!(again.iter().all(|&value| value == Some(1)));
        assert!(matches!(take(&hints, a, "a"), Taken::Spent));
        drop(held);
        withdraw_all(&hints);
    }

    #[test]
    fn no_words_lend_nothing() {
        let hints = Hints::new(0);
        publish(&hints, 0, "a", 1);
        assert!(matches!(take(&hints, 0, "a"), Taken::Miss));
    }
}
