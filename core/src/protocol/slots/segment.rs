//! Where the slots live: segments of cache-padded slots with their two hint bitmaps (room, with
//! its summary word, and vacancy), the segment list an unbounded table grows, and the table's
//! access to both.
//!
//! A table starts with one segment and grows by a segment as large as all before it (a bounded
//! table's last one cut to its capacity), published whole, so a live slot never moves.
//! The hint rules (set after gaining capacity, re-check after clearing) are told in the parent
//! module; the functions that apply them are here.

use std::fmt;

use super::{Phase, Reservation, SlotTable, SlotWord, MAX_GROWN_SLOTS, WORD_BITS};
use crate::sync::{
    dekker_fence, trace_transition, Arc, AtomicBool, AtomicU64, CachePadded, Mutex, Ordering,
    Published,
};

// ---------------------------------------------------------------------------------------------
// Slots and segments
// ---------------------------------------------------------------------------------------------

/// One slot: its word, the reaper's idle stamp, and the owner's per-slot data.
pub struct Slot<T> {
    /// The truth about this slot (see [`SlotWord`]).
    pub(super) word: AtomicU64,
    /// Reaper-only: when a reaper pass last found this slot idle with `used` set, in the
    /// caller's nanosecond time base. Meaningful only while the slot is Ready with load 0.
    pub(super) idle_since: AtomicU64,
    /// Whatever the pool keeps per slot (a stream's handle, a channel).
    pub(super) data: T,
}

impl<T> Slot<T> {
    /// The owner's per-slot data.
    pub fn data(&self) -> &T {
        &self.data
    }

    /// The slot's current word (a `SeqCst` snapshot).
    pub fn word(&self) -> SlotWord {
        SlotWord(self.word.load(Ordering::SeqCst))
    }
}

impl<T: fmt::Debug> fmt::Debug for Slot<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Slot")
            .field("word", &self.word())
            .field("data", &self.data)
            .finish()
    }
}

/// A run of slots with their two bitmaps. Never freed before the table.
pub(super) struct Segment<T> {
    /// Global index of `slots[0]`.
    pub(super) start: usize,
    pub(super) slots: Box<[CachePadded<Slot<T>>]>,
    /// Hint: slot has room (see module docs), with a summary of its words.
    pub(super) room: Bitmap,
    /// Hint: slot is Empty.
    pub(super) vacant: Bitmap,
}

impl<T: Default> Segment<T> {
    pub(super) fn new(start: usize, len: usize) -> Self {
        let words = len.div_ceil(WORD_BITS);
        // Every slot of a word, and only those of the segment: the last word may be partial.
        let all_slots = |w: usize| u64::MAX >> (64 - (len - w * WORD_BITS).min(WORD_BITS));
        Self {
            start,
            slots: (0..len)
                .map(|_| {
                    CachePadded::new(Slot {
                        word: AtomicU64::new(SlotWord::EMPTY.0),
                        idle_since: AtomicU64::new(0),
                        data: T::default(),
                    })
                })
                .collect(),
            room: Bitmap::new((0..words).map(|_| 0), true),
            vacant: Bitmap::new((0..words).map(all_slots), false),
        }
    }
}

impl<T> Segment<T> {
    pub(super) fn len(&self) -> usize {
        self.slots.len()
    }

    pub(super) fn contains(&self, index: usize) -> bool {
        index >= self.start && index < self.start + self.len()
    }
}

/// One hint bitmap of a segment: a word per [`WORD_BITS`] slots and, for a room bitmap of at
/// most 64 words (the first segment's, which the fast path reads), a summary of those words.
///
/// The summary lets a reservation that finds the first word empty go straight to the lowest
/// word with a bit set, so a table whose low slots are all full costs no more than one with
/// room in its first word. It is a hint of the hints: only the fast path reads it, and it
/// falls back to the full scan (which reads every word) when it finds nothing, so a stale
/// summary costs speed, never capacity. Its rule mirrors the bitmaps' own: whoever turns a
/// word from zero to non-zero sets its summary bit afterwards; whoever turns it to zero (or
/// finds a summary bit whose word is zero) clears the summary bit and then re-reads the word,
/// setting the bit again if the word is non-zero after all. So once the callers in flight are
/// done, every non-zero word has its summary bit ([`Bitmap::summary_agrees`]).
pub(super) struct Bitmap {
    /// Bit `local % WORD_BITS` of word `local / WORD_BITS` is slot `local`'s hint.
    pub(super) words: Box<[CachePadded<AtomicU64>]>,
    /// Bit `w`, for `1 <= w < 64`: word `w` may be non-zero (word 0 is always read directly).
    /// Kept only when `summarised`, and zero otherwise.
    summary: CachePadded<AtomicU64>,
    /// Whether `summary` is kept: for a room bitmap of two to 64 words (not for a vacancy
    /// bitmap, which no fast path reads, nor for one of more than 64 words: a grown segment,
    /// which the fast path never reads either).
    summarised: bool,
}

impl Bitmap {
    fn new(words: impl Iterator<Item = u64>, room: bool) -> Self {
        let words: Box<[CachePadded<AtomicU64>]> =
            words.map(|w| CachePadded::new(AtomicU64::new(w))).collect();
        let summarised = room && words.len() > 1 && words.len() <= 64;
        Bitmap {
            words,
            summary: CachePadded::new(AtomicU64::new(0)),
            summarised,
        }
    }

    /// The word that holds slot `local`'s bit.
    pub(super) fn word(&self, local: usize) -> &AtomicU64 {
        &self.words[local / WORD_BITS]
    }

    /// Slot `local`'s bit within its word.
    #[cfg_attr(slotpool_loom, allow(clippy::modulo_one))] // one slot per word under loom
    pub(super) fn bit(local: usize) -> u64 {
        1 << (local % WORD_BITS)
    }

    /// Makes sure slot `local`'s bit is set: one load when it is (rule 1: finding it set is
    /// as good as setting it, since a clearer re-reads the slot afterwards), otherwise one
    /// RMW, and one more on the summary when the word was empty.
    #[inline]
    pub(super) fn set(&self, local: usize) {
        let (w, bit) = (local / WORD_BITS, Self::bit(local));
        let word = &self.words[w];
        // Store-load with a clearer's RMW on this word and its re-read of the slot (rule 1).
        dekker_fence();
        if word.load(Ordering::SeqCst) & bit != 0 {
            return;
        }
        if word.fetch_or(bit, Ordering::SeqCst) == 0 {
            self.summarise(w);
        }
    }

    /// Clears slot `local`'s bit, and the word's summary bit if the word is now empty.
    /// Returns `false` without writing when the bit is clear already (whoever cleared it runs
    /// the re-check). A `true` obliges the caller to re-read the slot (rule 2).
    pub(super) fn clear(&self, local: usize) -> bool {
        let (w, bit) = (local / WORD_BITS, Self::bit(local));
        let word = &self.words[w];
        if word.load(Ordering::SeqCst) & bit == 0 {
            return false;
        }
        if word.fetch_and(!bit, Ordering::SeqCst) == bit {
            self.unsummarise(w);
        }
        // Store-load with a setter's change of the slot and its read of this bit (rule 2).
        dekker_fence();
        true
    }

    /// The word `w` went from zero to non-zero: flag it in the summary.
    #[cold]
    fn summarise(&self, w: usize) {
        if self.summarised && w > 0 {
            self.summary.fetch_or(1 << w, Ordering::SeqCst);
        }
    }

    /// The word `w` is (or was seen) empty: clear its summary bit, then re-read the word and
    /// flag it again if a setter filled it meanwhile.
    fn unsummarise(&self, w: usize) {
        if self.summarised && w > 0 {
            self.summary.fetch_and(!(1 << w), Ordering::SeqCst);
            if self.words[w].load(Ordering::SeqCst) != 0 {
                self.summary.fetch_or(1 << w, Ordering::SeqCst);
            }
        }
    }

    /// The lowest slot flagged in the words after the first, through the summary: inline
    /// when its lowest flagged word has a bit set (a table whose low slots are all full), out
    /// of line otherwise.
    #[inline]
    pub(super) fn first_after_word0(&self) -> Option<usize> {
        let flagged = self.summary.load(Ordering::SeqCst);
        if flagged != 0 {
            let w = flagged.trailing_zeros() as usize;
            let bits = self.words.get(w)?.load(Ordering::SeqCst);
            if bits != 0 {
                return Some(w * WORD_BITS + bits.trailing_zeros() as usize);
            }
        } else if self.words.len() == 1 || self.summarised {
            // Nothing after the first word, or nothing flagged there: every slot is full (a
            // saturated pool's reservers all come this way), no call out of line.
            return None;
        }
        self.first_after_word0_slow(flagged)
    }

    /// The rest of [`Bitmap::first_after_word0`]: clears the summary bits of words it finds
    /// empty (with the re-read) and goes on to the next flagged word; a bitmap without a
    /// summary is read word by word.
    #[cold]
    #[inline(never)]
    fn first_after_word0_slow(&self, mut flagged: u64) -> Option<usize> {
        let first_bit = |w: usize, bits: u64| w * WORD_BITS + bits.trailing_zeros() as usize;
        if !self.summarised {
            return self.words.iter().enumerate().skip(1).find_map(|(w, word)| {
                let bits = word.load(Ordering::SeqCst);
                (bits != 0).then(|| first_bit(w, bits))
            });
        }
        while flagged != 0 {
            let w = flagged.trailing_zeros() as usize;
            let bits = self.words.get(w)?.load(Ordering::SeqCst);
            if bits != 0 {
                return Some(first_bit(w, bits));
            }
            self.unsummarise(w);
            flagged &= flagged - 1;
        }
        None
    }

    /// Whether any bit is set.
    pub(super) fn any(&self) -> bool {
        self.words.iter().any(|w| w.load(Ordering::SeqCst) != 0)
    }

    /// Whether every non-zero word after the first has its summary bit (true for a bitmap
    /// without a summary). Holds whenever no caller is between its two steps; model checks
    /// assert it once their threads are done.
    pub(super) fn summary_agrees(&self) -> bool {
        if !self.summarised {
            return true;
        }
        let flagged = self.summary.load(Ordering::SeqCst);
        self.words
            .iter()
            .enumerate()
            .skip(1)
            .all(|(w, word)| word.load(Ordering::SeqCst) == 0 || flagged & (1 << w) != 0)
    }
}

/// The segments a table grew, published whole.
pub(super) struct Grown<T> {
    /// Segments after the inline first one, in index order. Only ever appended to. Read
    /// through [`Grown::with_segments`].
    segments: Published<Vec<Arc<Segment<T>>>>,
    /// Set (for good) just before the first segment is published. Until then a reader needs
    /// no load of `segments`, which costs a scan that found the first segment full more than
    /// the scan itself (a table that never grew: an exclusive table within its first
    /// segment, every pool of up to 64 values).
    grew: AtomicBool,
    /// Serialises growth, so two reservers that both find the table full add one segment.
    pub(super) lock: Mutex<()>,
}

impl<T> Grown<T> {
    pub(super) fn new() -> Self {
        Grown {
            segments: Published::new(Vec::new()),
            grew: AtomicBool::new(false),
            lock: Mutex::new(()),
        }
    }

    /// Runs `f` on the segments published so far (none before the first growth).
    ///
    /// A reader that finds `grew` clear reads as one whose load of `segments` came before
    /// the first store: the flag is set first, so the load it skipped would have found the
    /// list empty or could have come that early. What such a reader misses is the new
    /// segment's vacancy, and a grower notifies the gate after it publishes (rule 1), so a
    /// waiter that enqueued before its scan is woken; a reserver that does not wait finds the
    /// vacancy when it takes the growth lock itself.
    #[inline]
    pub(super) fn with_segments<R>(&self, f: impl FnOnce(&[Arc<Segment<T>>]) -> R) -> R {
        if !self.grew.load(Ordering::SeqCst) {
            return f(&[]);
        }
        self.segments.with(|segments| f(segments))
    }
}

impl<T> SlotTable<T> {
    /// Slots allocated in `segments` and the inline first segment.
    fn allocated(&self, segments: &[Arc<Segment<T>>]) -> usize {
        self.base.len() + segments.iter().map(|s| s.len()).sum::<usize>()
    }

    /// Adds a segment as large as the table so far (a bounded table's cut to its capacity),
    /// unless someone else already added room. Returns `false`, adding nothing, when a bounded
    /// table already has all its slots: the caller found them full and gives up (or waits).
    ///
    /// # Panics
    /// If an unbounded table would grow past [`MAX_GROWN_SLOTS`].
    pub(super) fn grow(&self, grown: &Grown<T>) -> bool
    where
        T: Default,
    {
        let limit = self.capacity.unwrap_or(MAX_GROWN_SLOTS);
        // A full bounded table is the common case here (every reserver of a saturated pool
        // comes by): answer it without the lock. The segment list only grows, so a table seen
        // at its capacity stays there.
        if self.capacity.is_some() && grown.with_segments(|s| self.allocated(s)) >= limit {
            return false;
        }
        let _serialised = grown.lock.lock();
        let current = grown.segments.load_full();
        let total = self.allocated(&current);
        // Another grower may have added room while we waited for the lock; growing again is
        // harmless (the new slots stay Empty and vacant) but wasteful, so look first.
        let has_vacancy = std::iter::once(&self.base)
            .chain(current.iter().map(|s| &**s))
            .any(|s| s.vacant.any());
        if has_vacancy {
            return true;
        }
        if total >= limit {
            assert!(
                self.capacity.is_some(),
                "slot table cannot grow past {MAX_GROWN_SLOTS} slots"
            );
            return false;
        }
        let len = total.min(limit - total);
        let mut next: Vec<Arc<Segment<T>>> = current.iter().cloned().collect();
        next.push(Arc::new(Segment::new(total, len)));
        grown.grew.store(true, Ordering::SeqCst);
        grown.segments.store(Arc::new(next));
        trace_transition!("slots: grew to {} slots", total + len);
        // New vacancy (rule 1): a waiter of a bounded table may be asleep on a full one.
        self.gate.notify_one();
        true
    }

    /// [`SlotTable::set_hint`] on the first segment's room bitmap, for the fast releases:
    /// every release that leaves room makes sure of its bit (one load when it is set).
    #[inline]
    pub(super) fn set_base_room_hint(&self, local: usize) {
        self.set_hint(&self.base.room, local);
    }

    // --- hints -------------------------------------------------------------------------------

    /// Rule 1: after the slot word gained capacity, make sure its bit is set, then wake a
    /// waiter.
    #[inline]
    pub(super) fn set_hint(&self, bitmap: &Bitmap, local: usize) {
        bitmap.set(local);
        self.gate.notify_one();
    }

    /// Rule 2: clear a bit, then re-read the slot; if it qualifies after all, set it again.
    pub(super) fn clear_hint(
        &self,
        bitmap: &Bitmap,
        local: usize,
        slot: &Slot<T>,
        qualifies: impl Fn(SlotWord) -> bool,
    ) {
        if bitmap.clear(local) && qualifies(SlotWord(slot.word.load(Ordering::SeqCst))) {
            self.set_hint(bitmap, local);
        }
    }

    /// Vacancy first, then the stale room bit: a scanner that sees neither cannot exist
    /// (and one that sees the stale room bit finds the Empty slot and claims it directly).
    pub(super) fn publish_vacancy(&self, segment: &Segment<T>, local: usize, slot: &Slot<T>) {
        self.set_hint(&segment.vacant, local);
        self.clear_hint(&segment.room, local, slot, |w| w.has_room(self.max_load));
    }

    // --- access ------------------------------------------------------------------------------

    #[inline]
    pub(super) fn with_segment<R>(
        &self,
        index: usize,
        f: impl FnOnce(&Segment<T>, usize) -> R,
    ) -> Option<R> {
        if index < self.base.len() {
            return Some(f(&self.base, index));
        }
        self.with_grown_segment(index, f)
    }

    pub(super) fn with_grown_segment<R>(
        &self,
        index: usize,
        f: impl FnOnce(&Segment<T>, usize) -> R,
    ) -> Option<R> {
        let grown = self.grown.as_ref()?;
        grown.with_segments(|segments| {
            segments
                .iter()
                .find(|s| s.contains(index))
                .map(|s| f(s, index - s.start))
        })
    }

    /// Runs `f` on slot `index`, or returns `None` if the table has no such slot.
    #[inline]
    pub fn with_slot<R>(&self, index: usize, f: impl FnOnce(&Slot<T>) -> R) -> Option<R> {
        self.with_segment(index, |segment, local| f(&segment.slots[local]))
    }

    /// The current word of slot `index`.
    pub fn word(&self, index: usize) -> Option<SlotWord> {
        self.with_slot(index, Slot::word)
    }

    /// Whether `reservation`'s incarnation is still the slot's current one.
    pub fn is_current(&self, reservation: &Reservation) -> bool {
        self.word(reservation.index()).is_some_and(|w| {
            w.generation() == reservation.generation() && w.phase() != Phase::Empty
        })
    }

    /// Calls `f` for every allocated slot in index order.
    pub fn for_each_slot(&self, mut f: impl FnMut(usize, &Slot<T>)) {
        for (local, slot) in self.base.slots.iter().enumerate() {
            f(local, slot);
        }
        if let Some(grown) = &self.grown {
            grown.with_segments(|segments| {
                for segment in segments {
                    for (local, slot) in segment.slots.iter().enumerate() {
                        f(segment.start + local, slot);
                    }
                }
            });
        }
    }
}

#[cfg(all(test, not(slotpool_loom)))]
mod tests {
    use super::super::{Capacity, SlotTable, FIRST_BOUNDED_SEGMENT};
    use crate::error::TryAcquireError;
    use crate::sync::Ordering;

    /// A bounded table allocates its first segment, then doubles as it fills, the last
    /// segment cut to its capacity; a full table at its capacity refuses, and a retired slot
    /// is claimed again before anything grows.
    #[test]
    fn a_bounded_table_grows_to_its_capacity_as_it_fills() {
        let capacity = FIRST_BOUNDED_SEGMENT * 2 + 5;
        let table = SlotTable::<()>::new(Capacity::Bounded(capacity), 1).unwrap();
        assert_eq!(table.stats().slots, FIRST_BOUNDED_SEGMENT);
        let mut held: Vec<_> = (0..FIRST_BOUNDED_SEGMENT)
            .map(|_| table.try_reserve().unwrap())
            .collect();
        assert_eq!(table.stats().slots, FIRST_BOUNDED_SEGMENT);
        held.push(table.try_reserve().unwrap());
        assert_eq!(table.stats().slots, FIRST_BOUNDED_SEGMENT * 2);
        while held.len() < capacity {
            held.push(table.try_reserve().unwrap());
        }
        assert_eq!(table.stats().slots, capacity, "the last segment is cut");
        assert_eq!(table.try_reserve(), Err(TryAcquireError::NoCapacity));
        let indices: std::collections::BTreeSet<usize> = held.iter().map(|r| r.index()).collect();
        assert_eq!(indices.len(), capacity, "every slot once");
        assert_eq!(indices.last(), Some(&(capacity - 1)));
        let last = held.pop().unwrap();
        assert!(table.begin_drain(last.index(), last.generation()).is_some());
        assert!(table.release(last));
        let again = table.try_reserve().unwrap();
        assert_eq!((again.index(), again.claimed()), (capacity - 1, true));
        assert_eq!(table.stats().slots, capacity);
    }

    /// A table that never grew reads no list of grown segments (its flag is clear); the first
    /// growth sets the flag before it publishes, and from then on every reader finds the new
    /// segment: by index, in a walk of every slot, and in a reservation's scan.
    #[test]
    fn the_grown_segments_are_read_once_the_first_growth_set_its_flag() {
        let table = SlotTable::<()>::new(Capacity::Unbounded, 1).unwrap();
        let first = table.stats().slots;
        let grown = table.grown.as_ref().expect("an unbounded table can grow");
        let _held: Vec<_> = (0..first).map(|_| table.try_reserve().unwrap()).collect();
        assert!(!grown.grew.load(Ordering::SeqCst), "full, but never grown");
        assert!(table.with_slot(first, |_| ()).is_none());
        assert!(table.grow(grown));
        assert!(grown.grew.load(Ordering::SeqCst));
        assert!(table.with_slot(first, |_| ()).is_some(), "found by index");
        let mut walked = 0;
        table.for_each_slot(|_, _| walked += 1);
        assert_eq!(walked, 2 * first, "found by the walk");
        let next = table.try_reserve().unwrap();
        assert_eq!(
            (next.index(), next.claimed()),
            (first, true),
            "found by the scan"
        );
        assert_eq!(table.stats().slots, 2 * first, "and not grown again");
    }

    /// The fast path finds room past the first bitmap word through the summary: with the
    /// first 64 slots full, it joins the one slot with room in the second word. (Answering
    /// `None` would be correct but slow, as the full path would then scan: this pins that it
    /// does not, and that it names no slot of the full first word.)
    #[test]
    fn the_fast_path_finds_room_past_a_full_first_word() {
        let table = SlotTable::<()>::new(Capacity::Bounded(128), 1).unwrap();
        let held: Vec<_> = (0..66).map(|_| table.try_reserve().unwrap()).collect();
        for r in &held {
            assert!(r.claimed());
            assert!(table.mark_ready(r.index(), r.generation()));
        }
        assert!(table.reserve_fast().is_none(), "every slot is full");
        assert!(table.release(held[65]));
        let joined = table.reserve_fast().expect("room in the second word");
        assert_eq!((joined.index(), joined.claimed()), (65, false));
        assert!(table.reserve_fast().is_none(), "full again");
    }

    /// The inlined fast path joins the lowest Ready slot with room and hands back that very
    /// slot; it never claims an Empty slot or joins a full one, leaving those to the full
    /// path. (Returning `None` always would be correct but slow, as every caller then takes
    /// the full path: this pins that it does not.)
    #[test]
    fn the_fast_path_joins_the_lowest_ready_slot_with_room() {
        let table = SlotTable::<()>::new(Capacity::Bounded(4), 2).unwrap();
        assert!(
            table.reserve_fast().is_none(),
            "no Ready slot: nothing to join"
        );
        let claim = table.try_reserve().unwrap();
        assert!(claim.claimed());
        assert!(table.mark_ready(claim.index(), claim.generation()));
        let (joined, slot) = table.reserve_fast_at().expect("room on a Ready slot");
        assert_eq!((joined.index(), joined.claimed()), (claim.index(), false));
        assert_eq!(slot.word().load(), 2, "the join is on the slot handed back");
        assert_eq!(
            table.with_slot(claim.index(), |s| std::ptr::eq(s, slot)),
            Some(true)
        );
        assert!(
            table.reserve_fast().is_none(),
            "the slot is full at its depth of 2, and the fast path claims no Empty slot"
        );
        let second = table.try_reserve().unwrap();
        assert!(second.claimed() && second.index() != claim.index());
        assert!(table.mark_ready(second.index(), second.generation()));
        assert!(table.release(joined));
        // Both slots have room now: the lower one is joined.
        let again = table.reserve_fast().expect("room again after a release");
        assert_eq!((again.index(), again.claimed()), (claim.index(), false));
        assert!(claim.index() < second.index());
        assert_eq!(table.word(claim.index()).map(|w| w.load()), Some(2));
        assert_eq!(table.word(second.index()).map(|w| w.load()), Some(1));
    }

    /// A small bounded table is all in its first segment and never grows.
    #[test]
    fn a_small_bounded_table_is_allocated_whole() {
        let table = SlotTable::<()>::new(Capacity::Bounded(3), 2).unwrap();
        assert_eq!(table.stats().slots, 3);
        let held: Vec<_> = (0..6).map(|_| table.try_reserve().unwrap()).collect();
        assert_eq!(table.try_reserve(), Err(TryAcquireError::NoCapacity));
        assert_eq!(table.stats().slots, 3);
        drop(held);
    }

    /// Claiming vacancies on purpose (a pool's minimum) grows the table too, up to its
    /// capacity.
    #[test]
    fn claiming_vacancies_grows_up_to_the_capacity() {
        let capacity = FIRST_BOUNDED_SEGMENT + 3;
        let table = SlotTable::<()>::new(Capacity::Bounded(capacity), 4).unwrap();
        let claimed: Vec<_> = std::iter::from_fn(|| table.try_claim_vacant()).collect();
        assert_eq!(claimed.len(), capacity);
        assert!(claimed.iter().all(|r| r.claimed()));
        assert_eq!(table.stats().slots, capacity);
        let unbounded = SlotTable::<()>::new(Capacity::Unbounded, 4).unwrap();
        let opened: Vec<_> = (0..100).map(|_| unbounded.try_claim_vacant()).collect();
        assert!(
            opened.iter().all(Option::is_some),
            "an unbounded table grows"
        );
    }
}
