//! Where the slots live: segments of cache-padded slots with their two hint bitmaps (room and
//! vacancy), the segment list an unbounded table grows, and the table's access to both.
//!
//! A bounded table is one segment allocated at build; an unbounded one starts with one and
//! grows by a segment as large as all before it, published whole, so a live slot never moves.
//! The hint rules (set after gaining capacity, re-check after clearing) are told in the parent
//! module; the functions that apply them are here.

use std::fmt;

use super::{Phase, Reservation, SlotTable, SlotWord, MAX_GROWN_SLOTS, WORD_BITS};
use crate::sync::{trace_transition, Arc, AtomicU64, CachePadded, Mutex, Ordering, Published};

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
    /// Hint: slot has room (see module docs). One word per 64 slots.
    pub(super) room: Box<[CachePadded<AtomicU64>]>,
    /// Hint: slot is Empty. One word per 64 slots.
    pub(super) vacant: Box<[CachePadded<AtomicU64>]>,
}

impl<T: Default> Segment<T> {
    pub(super) fn new(start: usize, len: usize) -> Self {
        let words = len.div_ceil(WORD_BITS);
        let vacant_word = |w: usize| {
            let bits_here = (len - w * WORD_BITS).min(WORD_BITS);
            let mask = if bits_here == WORD_BITS {
                u64::MAX
            } else {
                (1u64 << bits_here) - 1
            };
            CachePadded::new(AtomicU64::new(mask))
        };
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
            room: (0..words)
                .map(|_| CachePadded::new(AtomicU64::new(0)))
                .collect(),
            vacant: (0..words).map(vacant_word).collect(),
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

/// The segments an unbounded table grew, published whole.
pub(super) struct Grown<T> {
    /// Segments after the inline first one, in index order. Only ever appended to.
    pub(super) segments: Published<Vec<Arc<Segment<T>>>>,
    /// Serialises growth, so two reservers that both find the table full add one segment.
    pub(super) lock: Mutex<()>,
}

impl<T> SlotTable<T> {
    /// Adds a segment as large as the table so far, unless someone else already did.
    ///
    /// # Panics
    /// If the table would grow past [`MAX_GROWN_SLOTS`].
    pub(super) fn grow(&self, grown: &Grown<T>)
    where
        T: Default,
    {
        let _serialised = grown.lock.lock();
        let current = grown.segments.load_full();
        let total: usize = self.base.len() + current.iter().map(|s| s.len()).sum::<usize>();
        // Another grower may have added room while we waited for the lock; growing again is
        // harmless (the new slots stay Empty and vacant) but wasteful, so look first.
        let has_vacancy = std::iter::once(&self.base)
            .chain(current.iter().map(|s| &**s))
            .any(|s| s.vacant.iter().any(|w| w.load(Ordering::SeqCst) != 0));
        if has_vacancy {
            return;
        }
        assert!(
            total * 2 <= MAX_GROWN_SLOTS,
            "slot table cannot grow past {MAX_GROWN_SLOTS} slots"
        );
        let mut next: Vec<Arc<Segment<T>>> = current.iter().cloned().collect();
        next.push(Arc::new(Segment::new(total, total)));
        grown.segments.store(Arc::new(next));
        trace_transition!("slots: grew to {} slots", total * 2);
        // New vacancy: a waiter cannot exist on an unbounded table, but keep the rule.
        self.gate.notify_one();
    }

    /// [`SlotTable::clear_hint`] on the room bitmap, out of line: the hot paths only reach it
    /// when a join fills a slot.
    #[inline(never)]
    pub(super) fn clear_room_hint(&self, segment: &Segment<T>, local: usize, slot: &Slot<T>) {
        self.clear_hint(&segment.room, local, slot, |w| w.has_room(self.max_load));
    }

    /// Rule 1 for a release that took slot `local` of `segment` from full to not full.
    ///
    /// With lazy room hints ([`SlotTable::with_lazy_room_hints`]) a bit found set is left
    /// alone, and nobody is notified: our release (a `SeqCst` RMW on the slot word) comes
    /// before this load, and whoever clears the bit (a reserver that found the slot full)
    /// re-reads the slot word after its clear, so in the single `SeqCst` order either we see
    /// its clear (and set the bit and notify below) or its re-read sees our release (and it
    /// sets the bit again and notifies). A waiter's scan clears every stale bit it tries,
    /// so a bit still set is one no waiter has tripped over since it was set.
    #[inline]
    pub(super) fn room_freed(&self, segment: &Segment<T>, local: usize) {
        if self.lazy_room
            && Self::bitmap_word(&segment.room, local).load(Ordering::SeqCst) & Self::bit(local)
                != 0
        {
            return;
        }
        self.set_room_hint(segment, local);
    }

    /// [`SlotTable::set_hint`] on a room bitmap, out of line: the hot paths reach it only when
    /// a release frees a full slot whose bit is clear.
    #[inline(never)]
    fn set_room_hint(&self, segment: &Segment<T>, local: usize) {
        self.set_hint(&segment.room, local);
    }

    // --- hints -------------------------------------------------------------------------------

    pub(super) fn bitmap_word(bitmap: &[CachePadded<AtomicU64>], local: usize) -> &AtomicU64 {
        &bitmap[local / WORD_BITS]
    }

    pub(super) fn bit(local: usize) -> u64 {
        1 << (local % WORD_BITS)
    }

    /// Rule 1: after the slot word gained capacity, set its bit and wake a waiter.
    pub(super) fn set_hint(&self, bitmap: &[CachePadded<AtomicU64>], local: usize) {
        Self::bitmap_word(bitmap, local).fetch_or(Self::bit(local), Ordering::SeqCst);
        self.gate.notify_one();
    }

    /// Rule 2: clear a bit, then re-read the slot; if it qualifies after all, set it again.
    pub(super) fn clear_hint(
        &self,
        bitmap: &[CachePadded<AtomicU64>],
        local: usize,
        slot: &Slot<T>,
        qualifies: impl Fn(SlotWord) -> bool,
    ) {
        let word = Self::bitmap_word(bitmap, local);
        let bit = Self::bit(local);
        if word.load(Ordering::SeqCst) & bit == 0 {
            // Already clear: whoever cleared it runs the recheck.
            return;
        }
        word.fetch_and(!bit, Ordering::SeqCst);
        if qualifies(SlotWord(slot.word.load(Ordering::SeqCst))) {
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
        grown.segments.with(|segments| {
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
            grown.segments.with(|segments| {
                for segment in segments {
                    for (local, slot) in segment.slots.iter().enumerate() {
                        f(segment.start + local, slot);
                    }
                }
            });
        }
    }
}
