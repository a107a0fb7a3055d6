//! The packed words of the slot table: a slot's [`SlotWord`] (generation, phase, used bit and
//! load in one `u64`) and a [`Reservation`] (index, generation and claim in one non-zero
//! `u64`), read and written through small typed accessors so the algorithm in the parent
//! module never shows a raw shift or mask.

use std::fmt;
use std::num::NonZeroU64;

// ---------------------------------------------------------------------------------------------
// The packed word
// ---------------------------------------------------------------------------------------------

/// Where a slot is in its lifecycle. See the [module documentation](super).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Phase {
    /// No resource. A reserver may claim the slot to start one.
    Empty,
    /// A resource is being opened. Callers may join it; their work waits until it is ready.
    Starting,
    /// The resource is open and serving.
    Ready,
    /// The resource failed or is closing: no new reservations; it returns to Empty when the
    /// last holder releases.
    Draining,
}

impl Phase {
    pub(super) const fn from_bits(bits: u64) -> Phase {
        match bits & 0b11 {
            0 => Phase::Empty,
            1 => Phase::Starting,
            2 => Phase::Ready,
            _ => Phase::Draining,
        }
    }

    pub(super) const fn bits(self) -> u64 {
        match self {
            Phase::Empty => 0,
            Phase::Starting => 1,
            Phase::Ready => 2,
            Phase::Draining => 3,
        }
    }

    /// Whether callers may reserve load on a slot in this phase.
    pub const fn accepts_reservations(self) -> bool {
        matches!(self, Phase::Starting | Phase::Ready)
    }
}

/// A slot's incarnation number: it changes every time the slot returns to Empty, so a
/// reservation taken on one incarnation can never release into the next. 29 bits, wrapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Generation(u32);

impl Generation {
    pub(super) const BITS: u32 = 29;
    pub(super) const MASK: u64 = (1 << Self::BITS) - 1;

    /// The generation after this one (wrapping).
    pub const fn next(self) -> Generation {
        Generation(((self.0 as u64 + 1) & Self::MASK) as u32)
    }

    /// The raw number.
    pub const fn get(self) -> u32 {
        self.0
    }
}

/// One slot's whole state, read and written as a single `u64` through typed accessors (the
/// algorithm never shows a shift or a mask).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct SlotWord(pub(super) u64);

impl SlotWord {
    pub(super) const LOAD_MASK: u64 = 0x7FFF_FFFF;
    /// The table's owner let go while this slot had load ([`SlotTable::orphan`]): every release
    /// here checks whether it was the table's last unit. Above every load (`MAX_LOAD` is
    /// `2³¹ − 1`), kept by every transition, the retire included.
    ///
    /// [`SlotTable::orphan`]: super::SlotTable::orphan
    pub(super) const ORPHAN_BIT: u64 = 1 << 31;
    pub(super) const PHASE_SHIFT: u32 = 32;
    pub(super) const USED_BIT: u64 = 1 << 34;
    pub(super) const GEN_SHIFT: u32 = 35;

    /// An Empty slot of generation zero.
    pub const EMPTY: SlotWord = SlotWord(0);

    /// Reassembles a word from its raw bits.
    pub const fn from_raw(raw: u64) -> Self {
        SlotWord(raw)
    }

    /// The raw bits.
    pub const fn raw(self) -> u64 {
        self.0
    }

    /// In-flight units on the slot.
    pub const fn load(self) -> u32 {
        (self.0 & Self::LOAD_MASK) as u32
    }

    /// The lifecycle phase.
    pub const fn phase(self) -> Phase {
        Phase::from_bits(self.0 >> Self::PHASE_SHIFT)
    }

    /// Whether the slot was reserved since the last reaper pass cleared the bit.
    pub const fn used(self) -> bool {
        self.0 & Self::USED_BIT != 0
    }

    /// Whether the table's owner let go while the slot had load (see
    /// [`SlotTable::orphan`](super::SlotTable::orphan)).
    pub const fn orphaned(self) -> bool {
        self.0 & Self::ORPHAN_BIT != 0
    }

    /// The incarnation.
    pub const fn generation(self) -> Generation {
        Generation(((self.0 >> Self::GEN_SHIFT) & Generation::MASK) as u32)
    }

    pub(super) const fn with_load(self, load: u32) -> Self {
        SlotWord((self.0 & !Self::LOAD_MASK) | load as u64)
    }

    pub(super) const fn with_phase(self, phase: Phase) -> Self {
        SlotWord((self.0 & !(0b11 << Self::PHASE_SHIFT)) | (phase.bits() << Self::PHASE_SHIFT))
    }

    pub(super) const fn with_used(self, used: bool) -> Self {
        if used {
            SlotWord(self.0 | Self::USED_BIT)
        } else {
            SlotWord(self.0 & !Self::USED_BIT)
        }
    }

    /// The Empty word of the next generation: load 0, not used, still orphaned if it was (a
    /// unit taken on the next incarnation must be counted as this one's were).
    pub(super) const fn retired(self) -> Self {
        SlotWord(
            ((self.generation().next().0 as u64) << Self::GEN_SHIFT) | (self.0 & Self::ORPHAN_BIT),
        )
    }

    /// Whether the phase is Starting or Ready ([`Phase::accepts_reservations`]), tested on
    /// the bits: phase 1 or 2 is `phase - 1 < 2`, that is, the high phase bit of
    /// `word - (1 << PHASE_SHIFT)` is clear (Empty borrows into it, Draining keeps it; the
    /// borrow out of the phase field only reaches bits above it).
    #[inline]
    pub(super) const fn accepting(self) -> bool {
        self.0.wrapping_sub(1 << Self::PHASE_SHIFT) & (0b10 << Self::PHASE_SHIFT) == 0
    }

    /// Whether this word's generation is the one in `generation` (from
    /// [`Reservation::generation_in_word`]).
    #[inline]
    pub(super) const fn same_generation(self, generation: u64) -> bool {
        (self.0 ^ generation) >> Self::GEN_SHIFT == 0
    }

    /// Whether a reserver may take one more unit here, under a per-slot cap of `max`: the
    /// phase accepts reservations and `load < max`, in one comparison. In
    /// `word - (1 << PHASE_SHIFT)` masked to the load and the phase's high bit, that bit is
    /// set exactly when the phase does not accept ([`SlotWord::accepting`]), which makes the
    /// value at least `2 << PHASE_SHIFT`, above any `max`; otherwise the value is the load
    /// (plus [`SlotWord::ORPHAN_BIT`], also above any `max`: an orphaned slot takes no more).
    #[inline]
    pub(super) const fn has_room(self, max: u32) -> bool {
        const MASK: u64 =
            (0b10 << SlotWord::PHASE_SHIFT) | SlotWord::ORPHAN_BIT | SlotWord::LOAD_MASK;
        self.0.wrapping_sub(1 << Self::PHASE_SHIFT) & MASK < max as u64
    }
}

impl fmt::Debug for SlotWord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SlotWord")
            .field("generation", &self.generation().0)
            .field("phase", &self.phase())
            .field("used", &self.used())
            .field("orphaned", &self.orphaned())
            .field("load", &self.load())
            .finish()
    }
}

/// A reservation of one unit of load on one slot.
///
/// It is a plain value: whoever holds it must eventually hand it back with
/// [`SlotTable::release`] (or wrap it in a [`SlotGuard`]). If [`Reservation::claimed`] is true,
/// the holder also claimed the slot from Empty and must start the resource and then call
/// [`SlotTable::mark_ready`] or [`SlotTable::begin_drain`].
///
/// [`SlotTable::release`]: super::SlotTable::release
/// [`SlotTable::mark_ready`]: super::SlotTable::mark_ready
/// [`SlotTable::begin_drain`]: super::SlotTable::begin_drain
/// [`SlotGuard`]: super::SlotGuard
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
#[must_use = "a reservation holds load until it is released"]
pub struct Reservation {
    /// Packed into one non-zero word, so that a reservation (and an `Option` of one, and a
    /// guard holding one) travels in a register:
    ///
    /// ```text
    ///  63           32   31     30        1   0
    /// +---------------+-------+-------------+---+
    /// |     index     |claimed| generation  | 1 |
    /// +---------------+-------+-------------+---+
    /// ```
    ///
    /// The low bit is always set (the word is never 0). Slot indices fit in 32 bits: a bounded
    /// table has at most [`MAX_SLOTS`], an unbounded one at most [`MAX_GROWN_SLOTS`].
    pub(super) raw: NonZeroU64,
}

impl Reservation {
    pub(super) const CLAIMED: u64 = 1 << 31;
    pub(super) const INDEX_SHIFT: u32 = 32;

    #[inline]
    pub(super) fn new(index: usize, generation: Generation, claimed: bool) -> Self {
        debug_assert!(
            (index as u64) < (1 << 32),
            "slot index {index} does not fit a reservation"
        );
        let bits = ((index as u64) << Self::INDEX_SHIFT)
            | (u64::from(claimed) << 31)
            | (u64::from(generation.0) << 1);
        Reservation {
            raw: NonZeroU64::MIN | bits,
        }
    }

    /// The slot's global index.
    #[inline]
    pub fn index(&self) -> usize {
        (self.raw.get() >> Self::INDEX_SHIFT) as usize
    }

    /// The slot's incarnation when reserved.
    #[inline]
    pub fn generation(&self) -> Generation {
        Generation(((self.raw.get() >> 1) & Generation::MASK) as u32)
    }

    /// Whether this reservation claimed an Empty slot (the holder must start the resource).
    #[inline]
    pub fn claimed(&self) -> bool {
        self.raw.get() & Self::CLAIMED != 0
    }

    /// The generation in a slot word's position (other bits of the result are noise that
    /// [`SlotWord::same_generation`] shifts out): one shift of the packed word.
    #[inline]
    pub(super) fn generation_in_word(&self) -> u64 {
        const _: () = assert!(SlotWord::GEN_SHIFT - 1 + 1 + Generation::BITS == 64);
        self.raw.get() << (SlotWord::GEN_SHIFT - 1)
    }

    /// The gate token a release hands to a waiter: the packed word without the claim, never 0.
    pub(super) fn token(&self) -> NonZeroU64 {
        NonZeroU64::MIN | (self.raw.get() & !Self::CLAIMED)
    }

    /// The reservation a handed-over token stands for (a join: the slot was already live).
    pub(crate) fn from_token(token: NonZeroU64) -> Reservation {
        Reservation {
            raw: NonZeroU64::MIN | (token.get() & !Self::CLAIMED),
        }
    }
}

impl fmt::Debug for Reservation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reservation")
            .field("index", &self.index())
            .field("generation", &self.generation())
            .field("claimed", &self.claimed())
            .finish()
    }
}

#[cfg(all(test, not(slotpool_loom)))]
mod tests {
    use super::{Generation, Phase, Reservation, SlotWord};

    #[test]
    pub(super) fn reservations_pack_and_unpack() {
        for index in [0usize, 1, 63, 64, (1 << 24) - 1, u32::MAX as usize] {
            for generation in [0u32, 1, 7, (1 << 29) - 1] {
                for claimed in [false, true] {
                    let r = Reservation::new(index, Generation(generation), claimed);
                    assert_eq!(r.index(), index);
                    assert_eq!(r.generation(), Generation(generation));
                    assert_eq!(r.claimed(), claimed);
                    let back = Reservation::from_token(r.token());
                    assert_eq!(back.index(), index);
                    assert_eq!(back.generation(), Generation(generation));
                    assert!(!back.claimed());
                    let word = SlotWord(u64::from(generation) << SlotWord::GEN_SHIFT)
                        .with_phase(Phase::Ready)
                        .with_load(3)
                        .with_used(true);
                    assert!(word.same_generation(r.generation_in_word()));
                    let other =
                        SlotWord(u64::from(Generation(generation).next().0) << SlotWord::GEN_SHIFT);
                    assert!(!other.same_generation(r.generation_in_word()));
                }
            }
        }
    }

    #[test]
    pub(super) fn bit_tests_agree_with_the_phase() {
        const MAX_LOAD: u32 = super::super::MAX_LOAD;
        for phase in [Phase::Empty, Phase::Starting, Phase::Ready, Phase::Draining] {
            for generation in [0u32, 1, (1 << Generation::BITS) - 1] {
                for (used, orphaned) in [(false, false), (true, false), (false, true), (true, true)]
                {
                    for load in [0, 1, 7, 8, 9, MAX_LOAD - 1, MAX_LOAD] {
                        let bits = if orphaned { SlotWord::ORPHAN_BIT } else { 0 };
                        let word = SlotWord((u64::from(generation) << SlotWord::GEN_SHIFT) | bits)
                            .with_phase(phase)
                            .with_load(load)
                            .with_used(used);
                        assert_eq!(word.phase(), phase);
                        assert_eq!(word.load(), load);
                        assert_eq!(word.used(), used);
                        assert_eq!(word.orphaned(), orphaned);
                        assert_eq!(word.accepting(), phase.accepts_reservations(), "{phase:?}");
                        for max in [1, 8, MAX_LOAD] {
                            assert_eq!(
                                word.has_room(max),
                                phase.accepts_reservations() && load < max && !orphaned,
                                "{word:?} under {max}"
                            );
                        }
                        if load > 0 {
                            // A held release's `fetch_sub` keeps everything but the load.
                            let lowered = SlotWord(word.0 - 1);
                            assert_eq!(lowered, word.with_load(load - 1));
                            assert_eq!(lowered.orphaned(), orphaned);
                        }
                        assert_eq!(word.retired().phase(), Phase::Empty);
                        assert_eq!(word.retired().load(), 0);
                        assert_eq!(word.retired().orphaned(), orphaned, "the retire keeps it");
                        assert_eq!(
                            word.retired().generation(),
                            Generation(generation).next(),
                            "the retire starts the next incarnation"
                        );
                        assert!(!word.retired().used());
                        let shown = format!("{word:?}");
                        assert!(
                            shown.contains(&format!("orphaned: {orphaned}"))
                                && shown.contains(&format!("load: {load}")),
                            "{shown}"
                        );
                    }
                }
            }
        }
    }
}
