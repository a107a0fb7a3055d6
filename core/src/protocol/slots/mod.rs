//! The atomic slot table: where capacity lives.
//!
//! # What a slot is
//!
//! A slot stands for one expensive resource (a multiplexed stream, a channel, an exclusive
//! client) and its **load**: how many units of it are in use (requests in flight on a stream,
//! clients on a channel, 0 or 1 for an exclusive client). Each slot is one cache-padded
//! `AtomicU64`, the [`SlotWord`], packing
//!
//! ```text
//!  63            35   34   33 32  31                              0
//! +----------------+------+------+---------------------------------+
//! |   generation   | used | phase|              load               |
//! +----------------+------+------+---------------------------------+
//! ```
//!
//! and moving through the [`Phase`]s
//!
//! ```text
//!          claim (CAS, load 1)        mark_ready
//!   Empty ---------------------> Starting --------> Ready
//!     ^                              |                |  \
//!     |                    begin_drain (fail)  begin_drain  retire_idle (load 0, CAS)
//!     |                              v                v     |
//!     +---- last release (load 0) - Draining <--------+     |
//!     +-----------------------------------------------------+
//!            every return to Empty bumps the generation
//! ```
//!
//! The slot word is the **truth**. Every change to a slot is one CAS on that word, so a
//! reservation (`load < max` checked and incremented together) can never overshoot, a
//! spin-up claim (Empty → Starting with load 1) can never be made twice, and a reap
//! (Ready with load 0 → Empty) can never take a slot that was just reserved: the reservation
//! changed the word and the reaper's CAS fails.
//!
//! # Finding capacity: two bitmap hints
//!
//! Each segment of 64·k slots has two bitmaps of one `AtomicU64` per 64 slots:
//!
//! * **room**: the slot is Starting or Ready with `load < max` (callers may join it);
//! * **vacant**: the slot is Empty (a caller may claim it and spin up a resource).
//!
//! A reservation loads a room word, takes `trailing_zeros` for the **lowest-index** candidate
//! and CASes that slot's word; only when no slot has room does it claim the lowest vacant slot.
//! So existing resources fill before new ones start, low slots stay busy and high slots drain
//! and can be reaped.
//!
//! The bitmaps are **hints**: a set bit may be stale (the reserver finds the slot full and
//! moves on), but a clear bit must never hide capacity from a reserver or from a waiter. Two
//! rules give that:
//!
//! 1. Whoever makes a slot gain capacity (any release that leaves it with room, a claim that
//!    leaves room, a return to Empty) changes the slot word first, then makes sure the bit is
//!    set, then calls [`Gate::notify_one`], all `SeqCst`. *Making sure* is one load when the
//!    bit is set already, and an RMW that sets it otherwise. A release from below `max` must
//!    make sure too: the release that took the slot from `max` may still be between its RMW
//!    and its hint (preempted), and the room both add would stay hidden until it resumes
//!    (reservers would open streams or report no capacity beside a slot with room).
//! 2. Whoever clears a bit (a reserver that found the hint stale: the slot full, draining or
//!    Empty; a drain; a claimer clearing the vacancy it took) re-reads the slot word
//!    afterwards and, if the slot has capacity after all, sets the bit again and notifies.
//!
//! Finding the bit set is as good as setting it because of rule 2: the bit can only be
//! cleared after that load by a clearer whose re-read follows its clear in the single
//! `SeqCst` order (a store-load pair: both sides write one word, then read the other's), so
//! the re-read sees the new capacity and sets the bit again. Without the re-read the clearer
//! would hide that capacity for good (the loom model `lazy_room_bit_vs_stale_scan` fails so).
//!
//! With both, in the single `SeqCst` order every bit that is clear while its slot has
//! capacity is about to be set by someone who then notifies the gate; a waiter enqueues
//! (`SeqCst` RMW on the gate) and then rescans, so it either sees the bit or is notified. The
//! loom models in `slotpool-loom-tests` check exactly this.
//!
//! A join that fills its slot does **not** clear the room bit: the bit stays set, stale,
//! until a reserver finds the slot full and clears it (rule 2). Where slots fill and empty in
//! turn (a queue depth of 1: every reservation fills its slot, every release frees it), the
//! release then finds the bit still set and neither side writes the bitmap: a reservation and
//! its release cost the two RMWs on the slot word and nothing more.
//!
//! A waiter that reserves and leaves room behind while others still wait notifies the next
//! one, so a slot that gains several units at once (a fresh claim) is shared out in turn.
//!
//! The first segment's room bitmap, when it has more than one word, also keeps a **summary**
//! word: bit `w` says room word `w` may be non-zero. A reservation that finds the first room
//! word empty goes straight to the lowest flagged word, so a table whose low slots are all
//! full costs it one load more, not a load per full word. The summary is kept by the same two
//! rules one level up (whoever turns a word non-zero flags it afterwards; whoever turns it to
//! zero clears the flag and then re-reads the word), and only the fast path reads it: the
//! full scan reads every word, so a stale summary can cost time, never capacity.
//!
//! # Releasing a held unit
//!
//! [`SlotTable::release`] checks the reservation against the slot word (a stale or repeated
//! release changes nothing), so it loads the word and CASes it. A caller that holds its unit
//! for sure (a pool's guard, which keeps its reservation to itself) releases with
//! [`SlotTable::release_held`] instead: a held unit keeps its slot's incarnation alive, so the
//! release is one `fetch_sub`, and the old word it returns says what else to do (make sure
//! the room of a slot that accepts is published, retire a Draining slot whose last unit this
//! was).
//!
//! # Units that keep their table alive
//!
//! An owned guard (the stream pool's) is `'static`: it must keep the table, and the pool
//! state around it, alive by itself. An `Arc` clone per guard costs two locked RMWs beside the
//! slot's two. The unit the guard holds could stand in for that count (nothing frees the
//! table while a unit is out), but a held release does not end at its RMW: after the
//! `fetch_sub` it makes sure of the slot's room bit and reads the gate (rule 1), and a
//! Draining slot's last release retires it. The slot word says "released" while the releaser
//! still reads the table, and whoever dropped the last reference then would free it under the
//! releaser. Two halves close that gap.
//!
//! **Who frees: the orphan bit.** While the table's owner (the pool handle) lives, it keeps
//! the table alive. When it lets go ([`SlotTable::orphan`]) it sets the orphan bit
//! ([`SlotWord::orphaned`]) on every slot word, one `fetch_or` each, under the lock of the
//! table's parked reference; the old words say whether any unit was out. If none was, the
//! owner drops its reference itself; otherwise it parks it. Each release whose RMW returns an
//! orphaned word (its unit was out when the owner let go) then takes the lock and reads every
//! slot word, and the one that finds no orphaned slot with load takes the parked reference
//! and hands it to its caller ([`SlotTable::release_owned`]), to drop after its last access.
//! The lock keeps those reads after the owner's last flag (a release that read before it
//! would miss the units on the slots not flagged yet) and puts the last releases one after
//! the other, so the later one sees the earlier one's RMW: one of them finds the end. The bit
//! survives a retire, so a unit taken on a later incarnation of an orphaned slot is counted
//! the same way. A unit on a slot never flagged (a segment grown after the owner let go)
//! belongs to a holder with a reference of its own (a driver, the reaper): with the handle
//! gone, nobody else reserves.
//!
//! **When: release windows.** A release whose RMW came before the owner's `fetch_or` does not
//! see the bit, and may still be inside the table when the last reference goes. So an owned
//! release opens a [`Window`] before its RMW and closes it after its last access
//! ([`Windows::release_owned`]): a mark per thread (one of the counters' owned stripes),
//! bumped to odd with a plain store and back to even with a `Release` store, so the release
//! costs no locked instruction more. Whoever frees the table first waits
//! ([`Windows::wait_closed`]) until every mark is even. The opening store needs no fence of
//! its own: the release's RMW after it is at least `Release`, and whoever frees the table read
//! every slot word after that RMW (the owner's `fetch_or`, or a last releaser's reads, with
//! the `Arc`'s release and acquire between them and the drop), so its `Acquire` load of the
//! mark sees it odd, or even again once closed, and then every access before the close
//! happened before the free. A thread with no owned stripe (more threads than stripes) takes a
//! reference count for its release instead, which the unit it holds makes safe to take. As for
//! the exclusive table's settling return, a waker that such a release wakes (a hand-over to a
//! waiter) must not drop or run its task inline inside `wake` (tokio's never do): a task that
//! let go of the pool's last handle there would wait, on the releasing thread, for that
//! thread's own window.
//!
//! The loom models in `orphan` check both halves: a release racing the owner's drop, two
//! releases racing it, the last of two orphaned units, a release that retires its slot, and
//! one that hands its unit to a waiter just before the owner lets go;
//! the models mark the table freed after the wait, and loom reports any release access not
//! ordered before that mark.
//!
//! # Growth
//!
//! Memory follows what is used, not the bound. Every table starts with one segment (a
//! bounded table of at most [`FIRST_BOUNDED_SEGMENT`] slots has them all there) and, when a
//! reserver finds neither room nor a vacant slot, grows by a segment as large as all before it
//! (so the number of segments stays logarithmic); a bounded table's last segment is cut to
//! its capacity, and a reserver that finds a bounded table full at its capacity gets nothing
//! (a waiter waits), exactly as if every slot had been there from the start. Growth is
//! serialised by a lock that only growers take; the check that the table is already at its
//! capacity reads the published segments without it, so a full bounded table costs its
//! reservers no lock. Segments are published whole through `arc-swap` and never freed before
//! the table: **a live slot never moves**. The first segment is stored inline, so a table that
//! never grew reads no published pointer on its hot path; nor does its full scan (a reserver
//! that finds every slot full), which checks a flag the first growth sets before it
//! publishes. A reservation packs the slot index in 32 bits, so an unbounded table stops at
//! [`MAX_GROWN_SLOTS`] (2³² slots, far more memory than any machine has): a growth beyond it
//! panics rather than hand out an index that would not fit.
//!
//! # Idle tracking without a clock on the hot path
//!
//! Every reservation sets the `used` bit in the same CAS that raises the load. A reaper pass
//! ([`SlotTable::reap_idle`]) clears `used` on idle slots and stamps the time it did so; a slot
//! found idle with `used` still clear and a stamp older than the timeout is retired. So a slot
//! is reaped after being idle at least the timeout and at most the timeout plus one reap
//! interval, and no reservation or release reads a clock.
//!
//! This module owns the table's algorithm (reserve, claim, release, drain, reap); `word.rs`
//! packs the slot word and the reservation, `segment.rs` holds the segments, their hint
//! bitmaps and growth. It knows nothing of what a resource is, how it is opened or closed
//! (the pools do that), or of any executor.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::error::{Closed, ConfigError, TryAcquireError};
use crate::protocol::gate::{Gate, WaitState};
use crate::sync::{spin, trace_transition, Mutex, Ordering};

mod handover;
mod orphan;
mod segment;
mod word;

pub use handover::Handover;
pub use orphan::{Keep, Window, Windows, WINDOWS};
pub use segment::Slot;
use segment::{Bitmap, Grown, Segment};
pub use word::{Generation, Phase, Reservation, SlotWord};

/// The largest per-slot load (`max_load`) a table accepts.
pub const MAX_LOAD: u32 = (1 << 31) - 1;

/// The largest number of slots a bounded table accepts.
pub const MAX_SLOTS: usize = 1 << 24;

/// The most slots an unbounded table grows to (a reservation packs the index in 32 bits).
pub const MAX_GROWN_SLOTS: usize = (u32::MAX as usize).saturating_add(1);

/// Slots per bitmap word (one under loom, so that the models' two-slot segments span two words
/// and reach the words after the first and their summary; the code paths are the same).
#[cfg(not(slotpool_loom))]
const WORD_BITS: usize = 64;
#[cfg(slotpool_loom)]
const WORD_BITS: usize = 1;

/// Size of an unbounded table's first segment (smaller under loom, to keep models small; the
/// code paths are the same).
#[cfg(not(slotpool_loom))]
const FIRST_SEGMENT: usize = 64;
#[cfg(slotpool_loom)]
const FIRST_SEGMENT: usize = 2;

/// The most slots a bounded table allocates at creation; a larger one grows in segments as it
/// fills (128 KiB of slots, so the hot path of any pool up to a thousand resources never
/// leaves the inline segment; 2 under loom, so the models reach growth).
#[cfg(not(slotpool_loom))]
pub const FIRST_BOUNDED_SEGMENT: usize = 1024;
/// The most slots a bounded table allocates at creation (loom build: 2).
#[cfg(slotpool_loom)]
pub const FIRST_BOUNDED_SEGMENT: usize = 2;

/// How many times a non-waiting reservation rescans after crossing another caller's
/// transition before it reports no capacity.
const MAX_PASSES: usize = 8;

/// What one scan noticed.
#[derive(Default)]
struct Scan {
    /// A hint was overtaken by another caller's transition during this pass.
    raced: bool,
    /// A slot seen Empty through a stale room hint: claimed if no vacancy is published.
    empty: Option<usize>,
    /// A slot the joins pass over.
    skip: Option<usize>,
    /// The lowest slot the joins consider (0: every slot).
    from: usize,
}

// ---------------------------------------------------------------------------------------------
// The table
// ---------------------------------------------------------------------------------------------

/// What a reaper pass or a drain did to one slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retired {
    /// The slot's global index.
    pub index: usize,
    /// The incarnation that ended.
    pub generation: Generation,
}

/// A snapshot of a table, for statistics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TableStats {
    /// Slots allocated so far (a bounded table allocates in segments as it fills, up to its
    /// capacity).
    pub slots: usize,
    /// Slots in each phase.
    pub empty: usize,
    /// Slots whose resource is being opened.
    pub starting: usize,
    /// Slots whose resource is serving.
    pub ready: usize,
    /// Slots whose resource failed or is closing.
    pub draining: usize,
    /// Sum of all loads.
    pub in_flight: u64,
    /// Tasks waiting for capacity.
    pub waiting: usize,
}

/// The atomic slot table. See the [module documentation](self).
///
/// `T` is per-slot data the owner keeps next to each slot (a `Default` value per slot, made
/// when the slot's segment is allocated and kept across incarnations).
pub struct SlotTable<T = ()> {
    /// Per-slot cap on load. INVARIANT: every slot word's load is `<= max_load`.
    max_load: u32,
    /// `Some(n)`: at most `n` slots. `None`: unbounded. Either way slots are allocated in
    /// segments as the table fills.
    capacity: Option<usize>,
    /// The first segment (all slots, for a bounded table of at most
    /// [`FIRST_BOUNDED_SEGMENT`]).
    base: Segment<T>,
    /// Later segments; `None` for a table that can never grow (bounded, all in `base`).
    grown: Option<Grown<T>>,
    /// Waiters for capacity.
    gate: Gate,
    /// The owner's reference, parked when it let go with units out (see [`orphan`]).
    parked: Mutex<Option<Keep>>,
    /// Read by every release of an owned unit after its last access, written when the table
    /// is freed (loom build: see [`SlotTable::bury`]).
    #[cfg(slotpool_loom)]
    tomb: orphan::Tomb,
}

/// How a [`SlotTable`] is sized.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Capacity {
    /// At most this many slots (allocated as they are needed); reservers wait when all are
    /// full.
    Bounded(usize),
    /// Grows by segments whenever every slot is full; reservers never wait.
    Unbounded,
}

impl<T: Default> SlotTable<T> {
    /// Creates a table whose slots each carry at most `max_load` units.
    ///
    /// # Errors
    /// [`ConfigError`] for a zero `max_load` or slot count, or values above [`MAX_LOAD`] /
    /// [`MAX_SLOTS`].
    pub fn new(capacity: Capacity, max_load: u32) -> Result<Self, ConfigError> {
        if max_load == 0 {
            return Err(ConfigError::Zero("max_load"));
        }
        if max_load > MAX_LOAD {
            return Err(ConfigError::TooLarge {
                name: "max_load",
                value: max_load.into(),
                max: MAX_LOAD.into(),
            });
        }
        let (base_len, capacity, grown) = match capacity {
            Capacity::Bounded(0) => return Err(ConfigError::Zero("slots")),
            Capacity::Bounded(n) if n > MAX_SLOTS => {
                return Err(ConfigError::TooLarge {
                    name: "slots",
                    value: n as u64,
                    max: MAX_SLOTS as u64,
                })
            }
            Capacity::Bounded(n) => {
                let first = n.min(FIRST_BOUNDED_SEGMENT);
                (first, Some(n), (n > first).then(Grown::new))
            }
            Capacity::Unbounded => (FIRST_SEGMENT, None, Some(Grown::new())),
        };
        Ok(Self {
            max_load,
            capacity,
            base: Segment::new(0, base_len),
            grown,
            gate: Gate::new(),
            parked: Mutex::new(None),
            #[cfg(slotpool_loom)]
            tomb: orphan::Tomb::default(),
        })
    }
}

impl<T> SlotTable<T> {
    /// The per-slot cap on load.
    pub fn max_load(&self) -> u32 {
        self.max_load
    }

    /// `Some(slots)` for a bounded table, `None` for an unbounded one.
    pub fn capacity(&self) -> Option<usize> {
        self.capacity
    }

    /// The gate reservers wait on (exposed so owners can report waiters).
    pub fn gate(&self) -> &Gate {
        &self.gate
    }

    // --- reserving ---------------------------------------------------------------------------

    /// Takes one unit of load without waiting: on the lowest-index slot with room, else by
    /// claiming the lowest Empty slot, else (unbounded) by growing the table.
    ///
    /// # Errors
    /// [`TryAcquireError::NoCapacity`] when a bounded table is full,
    /// [`TryAcquireError::Closed`] after [`SlotTable::close`].
    #[inline]
    pub fn try_reserve(&self) -> Result<Reservation, TryAcquireError>
    where
        T: Default,
    {
        if let Some(reservation) = self.reserve_fast() {
            return Ok(reservation);
        }
        self.try_reserve_slow()
    }

    #[inline(never)]
    pub(crate) fn try_reserve_slow(&self) -> Result<Reservation, TryAcquireError>
    where
        T: Default,
    {
        if self.gate.is_closed() {
            return Err(TryAcquireError::Closed);
        }
        self.reserve_or_grow().ok_or(TryAcquireError::NoCapacity)
    }

    /// The common case of a reservation, inlined into every caller: the lowest slot flagged
    /// with room in the first segment really has room, and one checked CAS takes it.
    ///
    /// Anything else (no room bit set, a stale hint, a closed table) returns `None` without
    /// side effects, and the caller takes the full path ([`SlotTable::reserve_or_grow`]),
    /// which rescans everything and repairs stale hints. A success is exactly a successful
    /// [`SlotTable::try_join`] (both take [`SlotTable::join_word`]). It must not repair a
    /// stale hint itself (and so cannot simply call `try_join`): the full path learns from
    /// that very hint that the slot was retired under it and claims it directly, before the
    /// retirer publishes its vacancy (the loom model `retire_vs_reserve_with_stale_release`
    /// fails otherwise).
    #[inline(always)]
    pub(crate) fn reserve_fast(&self) -> Option<Reservation> {
        self.reserve_fast_at().map(|(reservation, _)| reservation)
    }

    /// [`SlotTable::reserve_fast`], with the joined slot: for an owner that reads the slot's
    /// data next, so that it does not look the slot up again.
    #[inline(always)]
    pub(crate) fn reserve_fast_at(&self) -> Option<(Reservation, &Slot<T>)> {
        if self.gate.is_closed() {
            return None;
        }
        let base = &self.base;
        // The first room word (a segment has at least one), then the others out of line.
        let bits = base.room.words.first()?.load(Ordering::SeqCst);
        let local = if bits != 0 {
            bits.trailing_zeros() as usize
        } else {
            base.room.first_after_word0()?
        };
        let slot = base.slots.get(local)?;
        let next = self.join_word(slot).ok()?;
        trace_transition!("slots: fast join {} -> {:?}", local, next);
        // No `joined`: a caller that never waited owes no waiter a turn (see `joined`).
        Some((Reservation::new(local, next.generation(), false), slot))
    }

    /// After a join on the full path raised a slot to `next`: if room remains, pass the turn
    /// to a waiter.
    ///
    /// This is how a wake-up that stood for several units (a fresh claim's room) reaches as
    /// many waiters: each woken waiter that takes a unit and leaves room wakes the next. The
    /// fast path, which only callers that never waited take, skips it: such a caller only
    /// takes capacity, and capacity that exists while callers wait has a woken waiter in
    /// flight already (whoever made it notified, rule 1, and each waiter passes the turn on,
    /// here or, if it gives up, through the gate), which finds what is left when it polls.
    ///
    /// A join that fills its slot leaves the room bit set. The bit is stale from then on, and
    /// the next reserver that finds the slot full clears it (rule 2); but where slots fill
    /// and empty in turn (a queue depth of 1: every reservation fills its slot and every
    /// release frees it), the release finds the bit still set and neither side writes the
    /// bitmap (rule 1).
    #[inline]
    fn joined(&self, next: SlotWord) {
        if next.load() != self.max_load {
            // One load of the gate's state when nobody waits.
            self.gate.notify_one();
        }
    }

    /// Joins the lowest-index slot with room without claiming an Empty slot or growing: for
    /// owners that bound the number of live resources themselves (the exclusive cell with its
    /// live count) and open a new one only within that bound. `None` when no slot has room or
    /// the table is closed. Like [`SlotTable::try_reserve`], a scan that crossed another
    /// caller's transition is repeated (a bounded number of times), and the stale hints it met
    /// are repaired.
    #[inline]
    pub(crate) fn join_only(&self) -> Option<Reservation> {
        if let Some(reservation) = self.reserve_fast() {
            return Some(reservation);
        }
        self.join_scanning(None)
    }

    /// [`SlotTable::join_only`] past slot `skip`: the lowest other slot with room (for an
    /// owner that just lost `skip` to its reaper, which is about to drain it). Like the full
    /// path it repairs the stale hints it meets, but leaves `skip`'s alone.
    pub(crate) fn join_only_skipping(&self, skip: usize) -> Option<Reservation> {
        self.join_scanning(Some(skip))
    }

    /// The full join-only scan, past `skip` if given. No back-off between passes: with lazy
    /// room bits a pass that only cleared the stale bits of full slots counts as raced too,
    /// and the next pass is then cheap.
    #[inline(never)]
    fn join_scanning(&self, skip: Option<usize>) -> Option<Reservation> {
        for _ in 0..MAX_PASSES {
            if self.gate.is_closed() {
                return None;
            }
            let mut scan = Scan {
                skip,
                ..Scan::default()
            };
            if let Some(reservation) = self.join_anywhere(&mut scan) {
                return Some(reservation);
            }
            if !scan.raced {
                return None;
            }
        }
        None
    }

    /// Joins the lowest slot at or after `start` that has room, without claiming an Empty
    /// slot or growing: the search of a rotating reuse order (from a cursor the caller keeps
    /// one past its last join, so that values are used in turn). `None` when no slot from
    /// `start` on has room: the caller wraps around with [`SlotTable::join_only`]. Like that
    /// scan, a pass that crossed another caller's transition is repeated (a bounded number of
    /// times), and the stale hints it met are repaired.
    pub(crate) fn join_from(&self, start: usize) -> Option<Reservation> {
        for _ in 0..MAX_PASSES {
            if self.gate.is_closed() {
                return None;
            }
            let mut scan = Scan {
                from: start,
                ..Scan::default()
            };
            if let Some(reservation) = self.join_anywhere(&mut scan) {
                return Some(reservation);
            }
            if !scan.raced {
                return None;
            }
        }
        None
    }

    /// Joins slot `index` itself if it has room (one checked CAS), as a reservation there
    /// would: for owners that act on one particular resource (retiring the highest idle
    /// exclusive value first). `None` if it has no room, is not live, or the table is closed;
    /// no hint is touched then (a stale one is repaired by the next scan that meets it).
    pub(crate) fn try_join_at(&self, index: usize) -> Option<Reservation> {
        if self.gate.is_closed() {
            return None;
        }
        self.with_segment(index, |segment, local| {
            let slot = &segment.slots[local];
            let next = self.join_word(slot).ok()?;
            trace_transition!("slots: join at {} -> {:?}", index, next);
            self.joined(next);
            Some(Reservation::new(index, next.generation(), false))
        })
        .flatten()
    }

    /// Claims the lowest Empty slot (Empty → Starting, load 1) without joining any slot that
    /// has room, growing the table if every allocated slot is live: for owners that keep a
    /// minimum number of resources open. `None` when the table is closed or every slot up to
    /// its capacity is live.
    pub fn try_claim_vacant(&self) -> Option<Reservation>
    where
        T: Default,
    {
        loop {
            if self.gate.is_closed() {
                return None;
            }
            let mut scan = Scan::default();
            if let Some(r) = self.claim_in(&self.base, &mut scan, false) {
                return Some(r);
            }
            let grown = self.grown.as_ref()?;
            let claimed = grown.with_segments(|segments| {
                segments
                    .iter()
                    .find_map(|s| self.claim_in(s, &mut scan, false))
            });
            if claimed.is_some() {
                return claimed;
            }
            if !self.grow(grown) {
                return None;
            }
        }
    }

    /// Waits for one unit of load (see [`SlotTable::try_reserve`] for where it comes from).
    ///
    /// Cancel-safe: dropping the future before it resolves reserves nothing, and a wake-up it
    /// had received passes to the next waiter. Once it resolves, the caller owns the
    /// [`Reservation`].
    pub fn reserve(&self) -> Reserve<'_, T>
    where
        T: Default,
    {
        Reserve {
            table: self,
            wait: WaitState::new(),
        }
    }

    /// Polls for a reservation, waiting in `wait`'s place in the queue. For owners that build
    /// their own futures (the caller must [`SlotTable::cancel_reserve`] when it gives up).
    #[inline]
    pub fn poll_reserve<'g>(
        &'g self,
        wait: Pin<&mut WaitState<'g>>,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Reservation, Closed>>
    where
        T: Default,
    {
        if !wait.is_queued() {
            if let Some(reservation) = self.reserve_fast() {
                return Poll::Ready(Ok(reservation));
            }
        }
        self.poll_reserve_slow(wait, cx)
    }

    #[inline(never)]
    pub(crate) fn poll_reserve_slow<'g>(
        &'g self,
        wait: Pin<&mut WaitState<'g>>,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Reservation, Closed>>
    where
        T: Default,
    {
        wait.poll_until_handoff(
            &self.gate,
            cx,
            || self.reserve_or_grow(),
            Reservation::from_token,
            |token| {
                self.release(Reservation::from_token(token));
            },
        )
    }

    /// Gives up a wait started with [`SlotTable::poll_reserve`]: leaves the queue, and frees a
    /// unit that was handed to the waiter but not used (which may hand it to the next one).
    #[inline]
    pub fn cancel_reserve(&self, wait: Pin<&mut WaitState<'_>>) {
        if wait.is_queued() {
            self.cancel_reserve_slow(wait);
        }
    }

    #[cold]
    fn cancel_reserve_slow(&self, wait: Pin<&mut WaitState<'_>>) {
        if let Some(token) = wait.cancel_handoff() {
            self.release(Reservation::from_token(token));
        }
    }

    fn reserve_or_grow(&self) -> Option<Reservation>
    where
        T: Default,
    {
        loop {
            if let Some(reservation) = self.reserve_existing() {
                return Some(reservation);
            }
            let grown = self.grown.as_ref()?;
            if !self.grow(grown) {
                // A bounded table at its capacity with every slot full.
                return None;
            }
        }
    }

    /// Scans for room, then vacancy. A pass that found a hint overtaken by another caller
    /// (a slot claimed, filled or retired under it) is repeated, so a non-waiting reserver
    /// does not report "no capacity" merely because it crossed a transition in flight; after
    /// [`MAX_PASSES`] such passes it gives up (a waiter would be notified instead).
    fn reserve_existing(&self) -> Option<Reservation> {
        for _ in 0..MAX_PASSES {
            let mut scan = Scan::default();
            if let Some(reservation) = self.pass(&mut scan) {
                return Some(reservation);
            }
            if !scan.raced {
                return None;
            }
            spin();
        }
        None
    }

    /// One pass over every segment: room first (join), then vacancy (claim).
    fn pass(&self, scan: &mut Scan) -> Option<Reservation> {
        if let Some(r) = self.join_in(&self.base, scan) {
            return Some(r);
        }
        if let Some(grown) = &self.grown {
            let found =
                grown.with_segments(|segments| segments.iter().find_map(|s| self.join_in(s, scan)));
            if found.is_some() {
                return found;
            }
        }
        if let Some(r) = self.claim_in(&self.base, scan, true) {
            return Some(r);
        }
        if let Some(grown) = &self.grown {
            let found = grown.with_segments(|segments| {
                segments.iter().find_map(|s| self.claim_in(s, scan, true))
            });
            if found.is_some() {
                return found;
            }
        }
        // No vacancy published: a slot retired under this scan, whose retirer has not
        // published its vacancy yet, is still Empty and ours to claim. After the published
        // ones, so that a lower slot retired earlier is claimed first (lowest Empty slot).
        if let Some(index) = scan.empty.take() {
            let claimed = self
                .with_segment(index, |segment, local| self.try_claim(segment, local, scan))
                .flatten();
            if claimed.is_some() {
                return claimed;
            }
        }
        // Nothing found. A claimer publishes room before it clears the vacancy we may have
        // read as clear, so room that appeared during this pass is visible now: look again.
        if self.any_room_hint() {
            scan.raced = true;
        }
        None
    }

    /// Joins the lowest-index slot with room in any segment.
    fn join_anywhere(&self, scan: &mut Scan) -> Option<Reservation> {
        if let Some(r) = self.join_in(&self.base, scan) {
            return Some(r);
        }
        let grown = self.grown.as_ref()?;
        grown.with_segments(|segments| segments.iter().find_map(|s| self.join_in(s, scan)))
    }

    fn any_room_hint(&self) -> bool {
        self.base.room.any()
            || self
                .grown
                .as_ref()
                .is_some_and(|g| g.with_segments(|segments| segments.iter().any(|s| s.room.any())))
    }

    /// Joins the lowest-index slot in `segment` whose room bit is set and that really has room.
    fn join_in(&self, segment: &Segment<T>, scan: &mut Scan) -> Option<Reservation> {
        // The first slot of this segment the scan considers.
        let lowest = scan.from.saturating_sub(segment.start);
        for (w, word) in segment.room.words.iter().enumerate() {
            let first = w * WORD_BITS;
            if first + WORD_BITS <= lowest {
                continue;
            }
            let mut candidates = word.load(Ordering::SeqCst);
            if first < lowest {
                // Only the bits at or above `lowest` (a shift below the word's width).
                candidates &= u64::MAX << (lowest - first);
            }
            while candidates != 0 {
                let bit = candidates.trailing_zeros() as usize;
                candidates &= candidates - 1;
                let local = w * WORD_BITS + bit;
                if scan.skip == Some(segment.start + local) {
                    continue;
                }
                if let Some(reservation) = self.try_join(segment, local, scan) {
                    return Some(reservation);
                }
            }
        }
        None
    }

    /// The checked CAS on one slot: `load < max` and accepting, then `load + 1`.
    fn try_join(&self, segment: &Segment<T>, local: usize, scan: &mut Scan) -> Option<Reservation> {
        let slot = &segment.slots[local];
        match self.join_word(slot) {
            Ok(next) => {
                trace_transition!("slots: join {} -> {:?}", segment.start + local, next);
                self.joined(next);
                Some(Reservation::new(
                    segment.start + local,
                    next.generation(),
                    false,
                ))
            }
            Err(current) => {
                // Stale hint: someone changed the slot since the bit was set. Clear it, then
                // recheck (rule 2). A slot found Empty this way (retired under us, its vacancy
                // perhaps not yet published) is remembered as a claim candidate.
                scan.raced = true;
                if current.phase() == Phase::Empty {
                    scan.empty.get_or_insert(segment.start + local);
                }
                self.clear_hint(&segment.room, local, slot, |w| w.has_room(self.max_load));
                None
            }
        }
    }

    /// The join CAS alone, shared by [`SlotTable::try_join`] and the fast path: raises the
    /// load by one (and sets `used`) while the word has room, retrying a lost CAS against the
    /// word that beat it (contention on the lowest slot is the common case under load).
    /// Returns the new word, or the word found without room. No hint is touched.
    #[inline]
    fn join_word(&self, slot: &Slot<T>) -> Result<SlotWord, SlotWord> {
        let mut current = SlotWord(slot.word.load(Ordering::SeqCst));
        loop {
            if !current.has_room(self.max_load) {
                return Err(current);
            }
            // `load < max_load <= MAX_LOAD`, so the increment cannot carry out of the load.
            let next = SlotWord((current.0 + 1) | SlotWord::USED_BIT);
            match slot.word.compare_exchange_weak(
                current.0,
                next.0,
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => return Ok(next),
                // Another reserver, a releaser, a drain or a reaper changed the word (or a
                // spurious failure): re-evaluate with what is there now.
                Err(actual) => current = SlotWord(actual),
            }
        }
    }

    /// Claims the lowest-index Empty slot in `segment`: Empty → Starting with load 1.
    ///
    /// With `rejoin`, every vacancy word that offers a candidate is followed by one more look
    /// for room anywhere before claiming. A claimer publishes room before it clears its
    /// vacancy bit, so a claim whose bit we read as clear has its room visible to that look:
    /// we join the resource it is starting instead of starting another one, as a caller that
    /// came a moment later would. (`try_claim_vacant`, which opens resources on purpose,
    /// passes `false`.)
    fn claim_in(&self, segment: &Segment<T>, scan: &mut Scan, rejoin: bool) -> Option<Reservation> {
        for (w, word) in segment.vacant.words.iter().enumerate() {
            let mut candidates = word.load(Ordering::SeqCst);
            if rejoin && candidates != 0 {
                if let Some(reservation) = self.join_anywhere(scan) {
                    return Some(reservation);
                }
            }
            while candidates != 0 {
                let bit = candidates.trailing_zeros() as usize;
                candidates &= candidates - 1;
                let local = w * WORD_BITS + bit;
                if let Some(reservation) = self.try_claim(segment, local, scan) {
                    return Some(reservation);
                }
            }
        }
        None
    }

    fn try_claim(
        &self,
        segment: &Segment<T>,
        local: usize,
        scan: &mut Scan,
    ) -> Option<Reservation> {
        let slot = &segment.slots[local];
        let current = SlotWord(slot.word.load(Ordering::SeqCst));
        if current.phase() != Phase::Empty {
            // Claimed since the bit was read. The claimer may have left room: join it
            // directly (its room hint may not be published yet).
            scan.raced = true;
            self.clear_hint(&segment.vacant, local, slot, |w| w.phase() == Phase::Empty);
            if current.has_room(self.max_load) {
                return self.try_join(segment, local, scan);
            }
            return None;
        }
        let next = current
            .with_phase(Phase::Starting)
            .with_load(1)
            .with_used(true);
        if let Err(actual) =
            slot.word
                .compare_exchange(current.0, next.0, Ordering::SeqCst, Ordering::SeqCst)
        {
            // Another claimer won this slot. Join the resource it is starting if it has room
            // (its room hint may not be published yet); otherwise try the next candidate, and
            // rescan for room the winner may leave.
            scan.raced = true;
            if SlotWord(actual).has_room(self.max_load) {
                return self.try_join(segment, local, scan);
            }
            return None;
        }
        trace_transition!("slots: claim {} -> {:?}", segment.start + local, next);
        // Room first, then vacancy: a scanner that misses the room bit still finds the stale
        // vacancy bit, sees the Starting slot and joins it directly.
        if next.has_room(self.max_load) {
            // Joiners may ride along while the resource starts (rule 1).
            self.set_hint(&segment.room, local);
        }
        // The vacancy hint is now stale; clear it (with the usual recheck, although nobody
        // but us can return this incarnation to Empty before we start or drain it).
        self.clear_hint(&segment.vacant, local, slot, |w| w.phase() == Phase::Empty);
        Some(Reservation::new(
            segment.start + local,
            next.generation(),
            true,
        ))
    }

    // --- transitions of a reserved slot ------------------------------------------------------

    /// Hands back one unit of load. Returns `false` (and changes nothing) if the reservation's
    /// generation is stale or the slot has no load to release.
    ///
    /// The release that drops a Draining slot to load 0 retires it to Empty (next generation).
    #[inline]
    pub fn release(&self, reservation: Reservation) -> bool {
        // The common case, inlined: a live, accepting slot of the first segment (so nothing
        // retires) with nobody waiting (so nothing to hand over) drops its load with one CAS,
        // and publishes its room if it was full (rule 1). The checks are those of the full
        // path below, which handles everything else.
        if let Some(slot) = self.base.slots.get(reservation.index()) {
            let mut current = SlotWord(slot.word.load(Ordering::SeqCst));
            let generation = reservation.generation_in_word();
            while current.same_generation(generation)
                && current.load() > 0
                && current.accepting()
                && !self.gate.has_waiters()
            {
                // `load > 0`, so the decrement cannot borrow out of the load.
                let next = SlotWord(current.0 - 1);
                match slot.word.compare_exchange_weak(
                    current.0,
                    next.0,
                    Ordering::SeqCst,
                    Ordering::SeqCst,
                ) {
                    Ok(_) => {
                        trace_transition!(
                            "slots: fast release {} -> {:?}",
                            reservation.index(),
                            next
                        );
                        // The slot has room now (it accepts): make sure its bit says so
                        // (rule 1), whether or not it was full.
                        self.set_base_room_hint(reservation.index());
                        if current.orphaned() {
                            // The caller keeps the table alive by other means (only an owned
                            // unit's release defers this drop).
                            drop(self.orphan_released());
                        }
                        return true;
                    }
                    // Moved by another caller: recheck against the new word and retry.
                    Err(actual) => current = SlotWord(actual),
                }
            }
        }
        self.release_slow(reservation)
    }

    #[inline(never)]
    fn release_slow(&self, reservation: Reservation) -> bool {
        let (released, keep) = self.release_slow_keep(reservation);
        drop(keep);
        released
    }

    /// [`SlotTable::release_slow`], handing back a parked reference that the release freed
    /// (see [`orphan`]) instead of dropping it.
    #[inline(never)]
    fn release_slow_keep(&self, reservation: Reservation) -> (bool, Option<Keep>) {
        let mut keep = None;
        let released = self
            .with_segment(reservation.index(), |segment, local| {
                self.release_in(segment, local, reservation.generation(), &mut keep)
            })
            .unwrap_or(false);
        (released, keep)
    }

    /// [`SlotTable::release`] for a caller that **holds** the unit: `reservation` came from
    /// this table and has not been released (nor handed over) since. The pools' guards, which
    /// keep their reservation to themselves, release this way.
    ///
    /// A held unit keeps its slot's incarnation alive (nothing retires a slot with load), so
    /// the generation needs no check, and the common case (first segment, nobody waiting) is
    /// a single `fetch_sub` on the slot word, as the floor's release is, with no load before
    /// it and no retry. What the old word says then decides the rest: the release that takes
    /// a Draining slot to load 0 retires it (out of line: Draining with load 0 admits no other
    /// transition, so that CAS cannot fail), and any other makes sure the slot's room is
    /// published (rule 1: one load of the room word when its bit is set, as it nearly always
    /// is, also after a release from full at a queue depth of 1). With waiters it takes the
    /// checked path, which hands the unit over.
    ///
    /// Unlike [`SlotTable::release`], a release of a unit not held is not detected (debug
    /// builds assert): it would take a unit someone else holds, or corrupt an idle slot's
    /// word. Hand back reservations of uncertain standing with [`SlotTable::release`].
    ///
    /// The caller's unit must not have been out when the table's owner let go of it
    /// ([`SlotTable::orphan`]): such a unit is released with [`SlotTable::release_owned`]
    /// (debug builds assert).
    #[inline(always)]
    pub fn release_held(&self, reservation: Reservation) {
        // No orphan check on this path: the borrowed guards and the exclusive table that
        // release this way hold units only while the owner lives.
        drop(self.release_held_keep::<false>(reservation));
    }

    /// [`SlotTable::release_held`]; `OWNED`: the unit may be orphaned, and a parked
    /// reference that the release frees (see [`orphan`]) is handed back, not dropped.
    #[inline(always)]
    fn release_held_keep<const OWNED: bool>(&self, reservation: Reservation) -> Option<Keep> {
        if let Some(slot) = self.base.slots.get(reservation.index()) {
            if !self.gate.has_waiters() {
                let old = SlotWord(slot.word.fetch_sub(1, Ordering::SeqCst));
                debug_assert!(
                    old.same_generation(reservation.generation_in_word()) && old.load() > 0,
                    "release_held of a unit not held: {reservation:?}, slot {old:?}"
                );
                trace_transition!("slots: held release {} from {:?}", reservation.index(), old);
                if old.phase() == Phase::Draining {
                    self.released_held_draining(reservation.index(), old);
                } else {
                    // The slot has more room now: its bit must be set (rule 1). A release
                    // from full sets it; one below full usually finds it set (one load), but
                    // the release that took the slot from full may not have set it yet
                    // (preempted between its RMW and its hint), and without this the room we
                    // add stays hidden until it does.
                    self.set_base_room_hint(reservation.index());
                }
                if OWNED && old.orphaned() {
                    return self.orphan_released();
                }
                debug_assert!(
                    OWNED || !old.orphaned(),
                    "release_held of an orphaned unit: {reservation:?}"
                );
                return None;
            }
        }
        let (released, keep) = self.release_slow_keep(reservation);
        debug_assert!(released, "release_held of a unit not held: {reservation:?}");
        keep
    }

    #[cold]
    #[inline(never)]
    fn released_held_draining(&self, local: usize, old: SlotWord) {
        if old.load() != 1 {
            return;
        }
        let segment = &self.base;
        let slot = &segment.slots[local];
        let drained = old.with_load(0);
        let retired = slot
            .word
            .compare_exchange(
                drained.0,
                drained.retired().0,
                Ordering::SeqCst,
                Ordering::SeqCst,
            )
            .is_ok();
        debug_assert!(
            retired,
            "a Draining slot at load 0 changed under its last release"
        );
        if retired {
            trace_transition!("slots: held release retired {}", local);
            self.publish_vacancy(segment, local, slot);
        }
    }

    /// The checked release in `segment`; a parked reference it frees (see [`orphan`]) goes to
    /// `keep`.
    fn release_in(
        &self,
        segment: &Segment<T>,
        local: usize,
        generation: Generation,
        keep: &mut Option<Keep>,
    ) -> bool {
        let slot = &segment.slots[local];
        let mut current = SlotWord(slot.word.load(Ordering::SeqCst));
        if current.generation() == generation
            && current.load() > 0
            && current.phase().accepts_reservations()
        {
            // Someone is queued: hand the unit over instead of freeing it, so a caller that
            // never waited cannot take it first (FIFO). The load stays on the slot. One load
            // of the gate's state when nobody waits.
            let reservation = Reservation::new(segment.start + local, generation, false);
            if self.gate.handoff(reservation.token()) {
                return true;
            }
        }
        loop {
            if current.generation() != generation || current.load() == 0 {
                trace_transition!("slots: stale release on {}", segment.start + local);
                return false;
            }
            let lowered = current.with_load(current.load() - 1);
            let next = if lowered.phase() == Phase::Draining && lowered.load() == 0 {
                lowered.retired()
            } else {
                lowered
            };
            match slot.word.compare_exchange_weak(
                current.0,
                next.0,
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => {
                    trace_transition!("slots: release {} -> {:?}", segment.start + local, next);
                    if next.phase() == Phase::Empty {
                        self.publish_vacancy(segment, local, slot);
                    } else if next.has_room(self.max_load) {
                        // Gained room: make sure the hint shows it (rule 1), also when the
                        // slot was not full (its bit may still be clear: the release from
                        // full may not have set it yet).
                        self.set_hint(&segment.room, local);
                    }
                    if current.orphaned() {
                        *keep = self.orphan_released();
                    }
                    return true;
                }
                // A reserver, another releaser, a drain or the reaper moved the word: retry
                // against the new value (the generation check above still guards us).
                Err(actual) => current = SlotWord(actual),
            }
        }
    }

    /// Starting → Ready for incarnation `generation` of slot `index` (the claimer's, once its
    /// resource is open). Returns `false` if that incarnation is over or no longer Starting.
    pub fn mark_ready(&self, index: usize, generation: Generation) -> bool {
        self.with_segment(index, |segment, local| {
            let slot = &segment.slots[local];
            let mut current = SlotWord(slot.word.load(Ordering::SeqCst));
            loop {
                if current.generation() != generation || current.phase() != Phase::Starting {
                    return false;
                }
                let next = current.with_phase(Phase::Ready);
                match slot.word.compare_exchange_weak(
                    current.0,
                    next.0,
                    Ordering::SeqCst,
                    Ordering::SeqCst,
                ) {
                    Ok(_) => return true,
                    // Joiners and releasers change the load concurrently; keep it.
                    Err(actual) => current = SlotWord(actual),
                }
            }
        })
        .unwrap_or(false)
    }

    /// Starting/Ready → Draining for the incarnation `generation` of slot `index`: no new
    /// reservations; the slot returns to Empty when its load reaches zero (at once if it is
    /// zero now). Returns the phase the slot had, or `None` if that incarnation is over or
    /// already draining.
    pub fn begin_drain(&self, index: usize, generation: Generation) -> Option<Phase> {
        self.with_segment(index, |segment, local| {
            let slot = &segment.slots[local];
            let mut current = SlotWord(slot.word.load(Ordering::SeqCst));
            loop {
                if current.generation() != generation || !current.phase().accepts_reservations() {
                    return None;
                }
                let draining = current.with_phase(Phase::Draining);
                let next = if draining.load() == 0 {
                    draining.retired()
                } else {
                    draining
                };
                match slot.word.compare_exchange_weak(
                    current.0,
                    next.0,
                    Ordering::SeqCst,
                    Ordering::SeqCst,
                ) {
                    Ok(_) => {
                        trace_transition!("slots: drain {} -> {:?}", index, next);
                        if next.phase() == Phase::Empty {
                            self.publish_vacancy(segment, local, slot);
                        } else {
                            // The room hint is now stale; clear it so scans skip the slot.
                            self.clear_hint(&segment.room, local, slot, |w| {
                                w.has_room(self.max_load)
                            });
                        }
                        return Some(current.phase());
                    }
                    // Loads move under us; retry with the current word.
                    Err(actual) => current = SlotWord(actual),
                }
            }
        })
        .flatten()
    }

    /// One reaper pass at time `now` (nanoseconds in the caller's time base): retires every
    /// Ready slot that has been idle (load 0, not reserved) for at least `idle_timeout`
    /// nanoseconds, and calls `on_retire` for each with its slot data so the owner can close
    /// the resource. A reservation racing the pass wins: the retiring CAS expects the exact
    /// idle word and fails if anything changed.
    pub fn reap_idle(&self, now: u64, idle_timeout: u64, on_retire: impl FnMut(Retired, &T)) {
        self.reap_idle_keeping(now, idle_timeout, 0, on_retire);
    }

    /// [`SlotTable::reap_idle`] that keeps the lowest `keep` live (non-Empty) slots open
    /// however idle they are (a pool's prewarmed minimum).
    pub fn reap_idle_keeping(
        &self,
        now: u64,
        idle_timeout: u64,
        keep: usize,
        on_retire: impl FnMut(Retired, &T),
    ) {
        self.reap_pass(now, idle_timeout, keep, false, on_retire);
    }

    /// [`SlotTable::reap_idle_keeping`] for an owner whose resource must count against the
    /// table's capacity until it is closed. A retired slot goes to Draining with one unit of
    /// load rather than straight to Empty, and `on_retire` gets that unit as a reservation of
    /// the ended incarnation: no claim can take the slot while the owner closes the resource,
    /// and the owner's [`release`](SlotTable::release) of the unit, once the resource is
    /// closed, empties the slot and publishes its vacancy (waking a waiter), as the last
    /// release of any draining slot does. Until then the slot counts as draining, its unit as
    /// load ([`TableStats::in_flight`]).
    pub fn reap_idle_holding(
        &self,
        now: u64,
        idle_timeout: u64,
        keep: usize,
        mut on_retire: impl FnMut(Reservation, &T),
    ) {
        self.reap_pass(now, idle_timeout, keep, true, |retired, data| {
            on_retire(
                Reservation::new(retired.index, retired.generation, false),
                data,
            )
        });
    }

    /// One reaper pass (see [`SlotTable::reap_idle`]); `hold`: retire to Draining with one
    /// unit of load for the owner ([`SlotTable::reap_idle_holding`]) instead of to Empty.
    fn reap_pass(
        &self,
        now: u64,
        idle_timeout: u64,
        keep: usize,
        hold: bool,
        mut on_retire: impl FnMut(Retired, &T),
    ) {
        let mut live_seen = 0usize;
        let mut pass = |segment: &Segment<T>| {
            for (local, slot) in segment.slots.iter().enumerate() {
                let current = SlotWord(slot.word.load(Ordering::SeqCst));
                if current.phase() != Phase::Empty {
                    live_seen += 1;
                }
                if current.phase() != Phase::Ready || current.load() != 0 || live_seen <= keep {
                    continue;
                }
                if current.used() {
                    // Used since the last pass: idle time starts now.
                    if slot
                        .word
                        .compare_exchange(
                            current.0,
                            current.with_used(false).0,
                            Ordering::SeqCst,
                            Ordering::SeqCst,
                        )
                        .is_ok()
                    {
                        slot.idle_since.store(now, Ordering::Relaxed);
                    }
                    continue;
                }
                let since = slot.idle_since.load(Ordering::Relaxed);
                if now.saturating_sub(since) < idle_timeout {
                    continue;
                }
                let next = if hold {
                    // Load 0 here, so the unit cannot overflow the load field.
                    current.with_phase(Phase::Draining).with_load(1)
                } else {
                    current.retired()
                };
                if slot
                    .word
                    .compare_exchange(current.0, next.0, Ordering::SeqCst, Ordering::SeqCst)
                    .is_ok()
                {
                    trace_transition!("slots: reaped {} -> {:?}", segment.start + local, next);
                    if hold {
                        // As a drain does: the room hint is stale, so scans skip the slot.
                        self.clear_hint(&segment.room, local, slot, |w| w.has_room(self.max_load));
                    } else {
                        self.publish_vacancy(segment, local, slot);
                    }
                    on_retire(
                        Retired {
                            index: segment.start + local,
                            generation: current.generation(),
                        },
                        &slot.data,
                    );
                }
            }
        };
        pass(&self.base);
        if let Some(grown) = &self.grown {
            grown.with_segments(|segments| segments.iter().for_each(|s| pass(s)));
        }
    }

    /// A snapshot of phases and loads (scans every slot; for statistics, not hot paths).
    pub fn stats(&self) -> TableStats {
        let mut stats = TableStats {
            waiting: self.gate.waiting(),
            ..TableStats::default()
        };
        self.for_each_slot(|_, slot| {
            let word = slot.word();
            stats.slots += 1;
            stats.in_flight += u64::from(word.load());
            match word.phase() {
                Phase::Empty => stats.empty += 1,
                Phase::Starting => stats.starting += 1,
                Phase::Ready => stats.ready += 1,
                Phase::Draining => stats.draining += 1,
            }
        });
        stats
    }

    /// Whether the hints say what they must once no caller is in flight: every slot with room
    /// has its room bit, every Empty slot its vacancy bit, and every room word with a bit set
    /// its summary bit. (A bit set over a slot that no longer qualifies is allowed: a hint may
    /// be stale that way.) For tests and model checks, called once their threads are done; a
    /// snapshot, meaningless while callers are in flight.
    pub fn hints_settled(&self) -> bool {
        let settled = |segment: &Segment<T>| {
            segment.room.summary_agrees()
                && segment.slots.iter().enumerate().all(|(local, slot)| {
                    let word = slot.word();
                    let flagged = |bitmap: &Bitmap| {
                        bitmap.word(local).load(Ordering::SeqCst) & Bitmap::bit(local) != 0
                    };
                    (!word.has_room(self.max_load) || flagged(&segment.room))
                        && (word.phase() != Phase::Empty || flagged(&segment.vacant))
                })
        };
        settled(&self.base)
            && self.grown.as_ref().is_none_or(|grown| {
                grown.with_segments(|segments| segments.iter().all(|s| settled(s)))
            })
    }

    /// Closes the table: waiters and later reservations get [`Closed`]. Reservations already
    /// out stay valid and release as usual.
    pub fn close(&self) {
        self.gate.close();
    }

    /// Whether [`SlotTable::close`] was called.
    pub fn is_closed(&self) -> bool {
        self.gate.is_closed()
    }

    /// Wraps a reservation in a guard that releases it on drop.
    pub fn guard(&self, reservation: Reservation) -> SlotGuard<'_, T> {
        SlotGuard {
            table: self,
            reservation: Some(reservation),
        }
    }
}

impl<T> fmt::Debug for SlotTable<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SlotTable")
            .field("max_load", &self.max_load)
            .field("capacity", &self.capacity)
            .field("stats", &self.stats())
            .finish()
    }
}

pin_project_lite::pin_project! {
    /// Future of [`SlotTable::reserve`]. `!Unpin`: its place in the queue lives inside it.
    #[must_use = "futures do nothing unless polled"]
    pub struct Reserve<'a, T> {
        table: &'a SlotTable<T>,
        // Structurally pinned: never moved out of the future.
        #[pin]
        wait: WaitState<'a>,
    }

    impl<'a, T> PinnedDrop for Reserve<'a, T> {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            this.table.cancel_reserve(this.wait);
        }
    }
}

impl<T: Default> Future for Reserve<'_, T> {
    type Output = Result<Reservation, Closed>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        this.table.poll_reserve(this.wait, cx)
    }
}

impl<T> fmt::Debug for Reserve<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reserve").field("wait", &self.wait).finish()
    }
}

/// A [`Reservation`] that releases itself on drop.
#[must_use = "dropping the guard releases the reservation at once"]
pub struct SlotGuard<'a, T> {
    table: &'a SlotTable<T>,
    /// `None` once released or taken.
    reservation: Option<Reservation>,
}

impl<T> SlotGuard<'_, T> {
    /// The reservation held.
    pub fn reservation(&self) -> Option<Reservation> {
        self.reservation
    }

    /// Takes the reservation out; the caller now must release it.
    pub fn into_reservation(mut self) -> Option<Reservation> {
        self.reservation.take()
    }
}

impl<T> Drop for SlotGuard<'_, T> {
    fn drop(&mut self) {
        if let Some(reservation) = self.reservation.take() {
            self.table.release(reservation);
        }
    }
}

impl<T> fmt::Debug for SlotGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SlotGuard")
            .field("reservation", &self.reservation)
            .finish()
    }
}
