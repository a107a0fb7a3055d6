//! The exclusive cell: slots whose load is 0 or 1, each holding one value (a client, a
//! database connection) that exactly one holder owns at a time, reused lowest index first,
//! bounded by a live count that can be resized at run time, and reaped through a Dekker
//! handshake on an idle word.
//!
//! [`crate::client::ClientPool`] and [`crate::managed::Pool`] stand on this protocol; it
//! imports no pool, reads no clock (stamps are the caller's numbers) and runs on plain
//! `Waker`s, so the loom models in `slotpool-loom-tests` (`channel_client.rs`, `managed.rs`)
//! check this very code.
//!
//! # The parts
//!
//! * A [`SlotTable`] with `max_load = 1` that grows by segments. **The slot word is the truth
//!   about who owns a value**: load 1 while a holder (a guard, or a builder) owns it, load 0
//!   while it sits idle in the slot. The table finds the **lowest-index** idle value (one
//!   bitmap load, one CAS), so hot values stay hot and high slots go idle and are reaped.
//!   As in every slot table, room hints are **lazy**: a checkout leaves the
//!   slot's room bit set and a return finds it set, so neither touches the bitmap unless a
//!   caller tripped over the stale bit in between (the slot table's module docs tell why no
//!   waiter can miss a release that way).
//! * The **bound**, one cache line with two words: the **counts** word, which packs `live`
//!   (the values in slots: claimed for building, built, idle or in use, until retired) and
//!   `closing` (the values retired from their slots that their owner is still closing: a
//!   database connection being detached and dropped), and `size`, the most values that may
//!   exist. Opening a new slot first takes a unit of `live` with a CAS on the counts word that
//!   finds `live + closing` below `size`; retiring a slot's value moves its unit from `live`
//!   to `closing` with one RMW of that word, and the owner gives it back once the value is
//!   closed (dropping the [`Retired`] the table handed it), so **a value counts against the
//!   bound until it is gone**, not until it left its slot. The two counts share a word
//!   because the bound is their sum: an opener that read them as two words could check a sum
//!   that never existed (its CAS on `live` alone cannot see `live` rise and fall back while a
//!   retirement moved a unit to `closing`), and a third value would be built beside two.
//!   Checkouts and returns of existing values never write the bound.
//! * Next to each slot (on the slot's own cache line, which the table's CAS has just brought
//!   to the owner's core) an [`ExclusiveCell`] holds the idle value in an `UnsafeCell`
//!   (**whoever holds the slot's unit of load has exclusive access to it**: the checked CAS
//!   `load < 1` admits one holder at a time, and every hand-over is a `SeqCst` RMW on the
//!   slot word, so each holder's writes happen before the next holder's reads), the **idle
//!   word** (`stamp << 2 | state`, for the reaper's handshake below), the value's birth stamp
//!   (for lifetime caps) and the slot's checkout count (bumped by the holder with a plain
//!   load and store).
//!
//! # Checkout
//!
//! **Fast path** ([`ExclusiveSlots::try_checkout`], and the first poll of
//! [`ExclusiveSlots::checkout`]): join the lowest slot whose room bit is set (the table's one
//! CAS), then load the idle word on the same line: `Idle` means the value is ours to take.
//! No other read-modify-write, no lock.
//!
//! **No idle value**: take a unit of `live` (CAS `live < size`), then reserve in the table,
//! which claims the lowest Empty slot (or grows) and answers [`Checkout::Vacant`]: the
//! caller builds a value and calls [`ExclusiveSlots::occupy`] (or [`ExclusiveSlots::retire`]
//! on failure). Should the reservation join a value returned meanwhile instead, the unit of
//! `live` goes back.
//!
//! **Waiting** (`live == size` and nothing idle): the table's gate, FIFO. A wait tries once
//! before it queues and once after; a pool that has just tried
//! ([`ExclusiveSlots::try_checkout`] failed) waits with
//! [`ExclusiveSlots::checkout_after_try`], which skips the first. A return that finds
//! waiters **hands its slot over** to the oldest one without freeing it (the load stays 1, the
//! value is in the cell): a caller that never waited cannot take it first. A waiter dropped
//! just as a slot was handed to it passes the slot to the next waiter (or frees it); a waiter
//! dropped after a plain wake-up passes the wake-up on. Retiring an empty slot (a failed
//! build) frees a unit of `live` at once and wakes the oldest waiter to build; retiring a
//! value frees its unit once the owner has closed the value.
//!
//! **Rotating reuse** ([`ExclusiveSlots::with_reuse`]`(`[`Reuse::Rotate`]`)`): the join starts
//! at a cursor one past the last slot a checkout took and wraps around to the lowest, so the
//! values are used in turn. The cursor is a hint (a relaxed load before the join, a relaxed
//! store after it): two checkouts that read the same cursor race for the same slot with the
//! same CAS as any two joins, and the loser takes the next one. Everything else (the bound,
//! the hand-over to waiters, the reaper's handshake) is the same.
//!
//! # Return, shrinking and closing
//!
//! [`ExclusiveSlots::check_in`] first compares `live` with `size` (two loads of one line). Over
//! the bound (the table was shrunk by [`ExclusiveSlots::resize`], or closed, which sets `size`
//! to 0), it takes one unit of `live` back with a CAS while `live > size` and retires its
//! slot: the value comes back as [`CheckIn::Surplus`] to be dropped. Otherwise it puts the
//! value in the cell, stores the idle word, releases the slot, and loads the bound again:
//! a resize stores `size` and then scans the slot words, a return releases its slot word and
//! then loads `size`, all `SeqCst`, so one of them sees the other (the Dekker pattern of
//! [`crate::protocol::gate`]); a return that sees it was overtaken runs the trimming pass itself
//! ([`CheckIn::Trimmed`]). **Shrinking retires idle values at once, highest slot first, and
//! busy ones as they come back; every retirement is one CAS on `live` that succeeds only
//! while `live > size`, so a shrink never retires more than it must.** A trimming pass takes
//! an idle value by joining its very slot (a checkout of that slot); the value it cannot
//! retire any more (the bound was met meanwhile) goes back with its old stamp.
//!
//! [`ExclusiveSlots::retain`] takes each idle value the same way, asks the caller's predicate
//! and puts the value back or retires its slot.
//!
//! # Reaping: a Dekker handshake on the idle word
//!
//! ```text
//!                    release: store Idle(stamp)         reaper wins (3)
//!   Empty ---------------------------------------> Idle ---------------> Empty
//!     ^                                            |  ^    ^
//!     |  retire (discard, failed build)     (1)    |  |    | (restore) reaper saw a holder,
//!     +------ store Empty -------       reaper CAS v  |    | or an acquirer aborted the reap
//!                                              Reaping ---+
//! ```
//!
//! A reaper pass ([`ExclusiveSlots::reap`]), for a slot that is Ready with load 0 and whose
//! idle word says `Idle(stamp)` with a stamp (or a birth stamp) the caller calls expired:
//!
//! 1. CAS the idle word `Idle(stamp) → Reaping(stamp)`, then
//! 2. load the slot word. Load 0 (same incarnation): nobody holds the value. Otherwise a
//!    holder got in first: CAS `Reaping → Idle` back and move on.
//! 3. CAS `Reaping(stamp) → Empty`. Won: the value is the reaper's; it takes it from the cell,
//!    drains the slot (Empty at once, or when a joiner that lost gives its unit back) and
//!    gives the slot's unit of `live` back.
//!
//! An **acquirer** joins the slot (the table's CAS, load 0 → 1), then loads the idle word:
//! `Idle` means the value is its own; `Empty` means a reaper won (give the unit back and
//! look again); `Reaping` means a reaper is between steps 1 and 3, and the acquirer cannot
//! tell whether the reaper's step 2 saw its unit, so it **aborts the reap** with its own CAS
//! `Reaping(stamp) → Idle(stamp)`: exactly one of that CAS and the reaper's step 3 succeeds,
//! and whoever wins owns the value.
//!
//! Why nobody else can be between the acquirer's two steps and the reaper's: the acquirer
//! writes the slot word then reads the idle word; the reaper writes the idle word then reads
//! the slot word; all four are `SeqCst`, so in the single total order one of them sees the
//! other's write (`dekker_fence` states it for loom). If the reaper sees load 0, the
//! acquirer's join comes later and its load sees `Reaping` or `Empty`; if the acquirer sees
//! `Idle`, the reaper's step 1 comes later and its step 2 sees the acquirer's unit. A
//! returning holder stores a fresh `Idle` before its table release, so a reaper that read the
//! old word fails its step 3 (or its step 1). **A reap never takes a value that was just
//! acquired, and a returned value goes to exactly one caller.**
//!
//! The idle word is not touched on checkout, so while a value is in use its word still shows
//! the previous `Idle(stamp)`; the reaper's pre-check of the slot word (load 0) skips such
//! slots, and step 2 catches the rest. Reaper passes (and closing passes) are serialised by a
//! mutex (they are cold), so step 3 cannot be confused by a second reaper's `Reaping` of the
//! same stamp.
//!
//! INVARIANT: the cell holds a value exactly while the slot is Ready with load 0 and its idle
//! word is not `Empty` (outside the few instructions of a hand-over); it is `None` while a
//! holder or a builder owns the value, and after a reap, retirement or failed build.
//! INVARIANT: `live` counts the slots claimed for a value and not yet retired, `closing` the
//! retired values not yet closed by their owner; both live in one word, `live` only ever
//! rises by a CAS of that word that finds `live + closing` below `size`, and a retirement
//! moves its unit from one to the other in one RMW, so the sum never reads low: **values
//! that exist never outnumber `size`** (except just after a shrink, until the surplus is
//! retired).
//!
//! # Returning without a reference count
//!
//! A pool's guard is owned (`'static`): it must keep the table (and the pool state around it)
//! alive by itself. Holding a reference count for that costs two locked RMWs per checkout
//! beside the slot's two. But a value that is idle in its slot, or out with a holder, keeps
//! the pool alive already when it carries the pool's reference itself (the managed pool's
//! objects each hold one). The gap is the return: once the value is back in its cell and the
//! slot released, a closing pass may take the value and drop it (and with it, perhaps, the
//! last reference to the table) while the return still reads the bound and the gate.
//!
//! [`ExclusiveSlots::check_in_unpinned`] closes that gap with a flag per cell, `settling`:
//!
//! 1. The returning holder loads the flag; set means the slot's previous holder is still in
//!    its own return, and this return takes the pinned path below. Otherwise it stores the
//!    flag set (a plain store: only the slot's holder writes it while it is clear), then puts
//!    the value in and releases the slot as [`ExclusiveSlots::check_in`] does.
//! 2. After the release and the loads that follow it, the caller clears the flag with a
//!    `Release` store ([`Settling::done`]), its last access.
//! 3. Whoever takes a value out of the table for good (a reap's winner, a trim, `retain`, a
//!    holder that retires its slot) first waits (`Acquire` loads, spinning) until the flag is
//!    clear. A holder that merely checks the value out does not wait: it can only drop the
//!    value by retiring its slot, which waits.
//!
//! So the value (and whatever it keeps alive) outlives every access of the return, and the
//! flag's two stores are plain `mov`s: the return costs the table's one release RMW. The
//! flag was stored before the value was published (the idle word's `Release` store, the
//! release RMW), so anyone who reaches the value sees it set unless it was cleared.
//!
//! The **pinned path** is the cold one: the value is surplus, the release found the table
//! over its bound (it runs the trimming pass, which may take its own value and would wait on
//! its own flag), or the previous holder still settles. There the caller's `keep` closure
//! takes a reference of its own (while the value still guarantees the table) and the flag is
//! cleared at once, or never set.
//!
//! A settling return is a bounded number of steps with no lock but the gate's, whose holder
//! waits on no flag, so the spins end. One requirement follows for executors: a waker that
//! a return wakes must not run the woken task inline inside `wake` (tokio's never do), or a
//! task that retires the handed-over value would spin on the flag of the return that woke it.
//!
//! # Holder notes: how long a value has been out
//!
//! A pool that watches for values held too long (a connection leaked by its caller) has each
//! holder note, right after its checkout, the stamp it took the value at and an opaque tag (a
//! call site) in the slot's cell ([`ExclusiveSlots::note_hold`]), and end the note just before
//! it gives the value back ([`ExclusiveSlots::end_hold`]). A watchdog pass
//! ([`ExclusiveSlots::report_holds`]) reads the notes of every slot and reports each hold
//! older than its bound **once, while it is still held**: it CASes the note's REPORTED bit on,
//! and only the pass whose CAS succeeds reports; the holder's end swaps the note out and so
//! learns whether it was reported (to say so again as the value comes back). The note is two
//! words: the holder stores the tag, then the stamp (`Release`); the watchdog loads the stamp
//! (`Acquire`), then the tag, then CASes the stamp it loaded. A tag read in between could
//! belong to a later holder only if that holder took the slot at the very same stamp; a real
//! clock never gives two checkouts of one slot the same nanosecond.
//!
//! The notes are the pool's to use or not: a pool that does not watch never writes them.
//!
//! # Closing values: the owner's half
//!
//! Every path that takes a value out of the table for good ([`ExclusiveSlots::retire_value`],
//! [`CheckIn::Surplus`] and [`CheckIn::Trimmed`], [`ExclusiveSlots::trim`],
//! [`ExclusiveSlots::resize`], [`ExclusiveSlots::retain`], [`ExclusiveSlots::reap`]) hands
//! the values over in a [`Retired`], which holds their units of `closing`. Dropping it drops
//! the values still in it first, then gives the units back (waking a waiter per unit);
//! iterating it by value hands the values out and gives the units back when the iterator is
//! dropped, after the loop that closed them. An opener that finds the bound full meanwhile
//! waits for that wake-up like any other.
//!
//! # Closing
//!
//! [`ExclusiveSlots::close`] sets `size` to 0 and closes the gate: waiters and later checkouts
//! get [`Closed`]. Values in use stay valid; each comes back as [`CheckIn::Surplus`] (or is
//! taken by the trimming pass of the return that raced the close), and the caller's closing
//! pass (`reap(|_| true)`) takes the idle ones.
//!
//! This module owns the cells, the idle word and the bound; capacity search and waiting are
//! the slot table's and the gate's.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::ptr::NonNull;
use std::task::{Context, Poll};

use crate::error::{Closed, ConfigError, TryAcquireError};
use crate::protocol::gate::WaitState;
use crate::protocol::slots::{
    Capacity, Generation, Phase, Reservation, SlotTable, SlotWord, TableStats, MAX_SLOTS,
};
use crate::sync::{
    dekker_fence, spin, trace_transition, AtomicBool, AtomicU64, AtomicUsize, CachePadded, Mutex,
    Ordering, UnsafeCell,
};

/// The largest stamp an idle word holds (62 bits).
pub const MAX_STAMP: u64 = (1 << 62) - 1;

/// How many times an acquirer that lost a slot to the reaper looks again before it waits (a
/// waiter is woken when the reaper's drain frees the slot).
const LOST_RETRIES: usize = 64;

/// Which idle value a checkout takes ([`ExclusiveSlots::with_reuse`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Reuse {
    /// The lowest-index idle value (one bitmap load, one CAS): the values at the bottom stay
    /// hot and the ones above them go idle, so the idle ones can be reaped.
    #[default]
    Lowest,
    /// The idle value at or after a cursor one past the last checkout's slot, wrapping
    /// around: every value is used in turn (a FIFO of idle values, for a single caller). One
    /// more load and store of the cursor per checkout; idle values are seldom idle long
    /// enough to be reaped.
    Rotate,
}

// ---------------------------------------------------------------------------------------------
// The idle word
// ---------------------------------------------------------------------------------------------

/// Where an exclusive slot's value is, as [`ExclusiveSlots::state`] reports it (from the slot
/// word and the idle word together). See the [module documentation](self).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CellState {
    /// No value (never built, or gone).
    Empty,
    /// A holder (or a builder) owns the value.
    Busy,
    /// The value sits in the cell, idle.
    Idle,
    /// A reaper is deciding whether it takes the idle value.
    Reaping,
}

/// What the idle word itself says (the reaper's handshake; see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum IdleState {
    /// No value to reap (none built yet, or retired, or reaped).
    Empty,
    /// The last holder returned the value at the stamp (it may be in use again since).
    Idle,
    /// A reaper is between its first and last step.
    Reaping,
}

/// `stamp << 2 | state` in one `u64`.
#[derive(Clone, Copy, PartialEq, Eq)]
struct IdleWord(u64);

impl IdleWord {
    const STATE_MASK: u64 = 0b11;
    const EMPTY: IdleWord = IdleWord(0);

    const fn idle(stamp: u64) -> Self {
        IdleWord((stamp << 2) | 1)
    }

    /// The same stamp, Reaping.
    const fn reaping(self) -> Self {
        IdleWord((self.0 & !Self::STATE_MASK) | 2)
    }

    /// The same stamp, Idle.
    const fn restored(self) -> Self {
        IdleWord((self.0 & !Self::STATE_MASK) | 1)
    }

    const fn state(self) -> IdleState {
        match self.0 & Self::STATE_MASK {
            0 => IdleState::Empty,
            1 => IdleState::Idle,
            _ => IdleState::Reaping,
        }
    }

    const fn stamp(self) -> u64 {
        self.0 >> 2
    }
}

impl fmt::Debug for IdleWord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IdleWord")
            .field("state", &self.state())
            .field("stamp", &self.stamp())
            .finish()
    }
}

// ---------------------------------------------------------------------------------------------
// The protocol: exclusive slots
// ---------------------------------------------------------------------------------------------

/// The most values a bounded [`ExclusiveSlots`] table may hold ([`ExclusiveSlots::new`],
/// [`ExclusiveSlots::resize`]).
pub const MAX_SIZE: usize = MAX_SLOTS;

/// Per-slot data of an [`ExclusiveSlots`] table: the idle value, the idle word, the value's
/// birth stamp and the checkout count. See the [module documentation](self).
pub struct ExclusiveCell<T> {
    /// The idle word. Written by the holder (release, retire), read by acquirers, CASed by the
    /// reaper and by an acquirer that aborts a reap.
    idle: AtomicU64,
    /// The caller's stamp for when the slot's value was built ([`ExclusiveSlots::occupy_born`]),
    /// for the reaper's lifetime checks. Written by the builder before the value is first
    /// released (which publishes it).
    born: AtomicU64,
    /// Checkouts of this slot, all incarnations. Written only by the slot's current holder
    /// (plain load and store: the hand-over CAS orders holders), read by statistics.
    checkouts: AtomicU64,
    /// Set while a holder that returned the value without a reference to the table of its own
    /// is still inside the return ([`ExclusiveSlots::check_in_unpinned`]); cleared by it, with
    /// `Release`, as its last access. Whoever takes the value out of the table for good waits
    /// for it to clear first (module docs, "Returning without a reference count").
    settling: AtomicBool,
    /// The holder's note (module docs, "Holder notes"): `NOTED | stamp` while a holder has
    /// noted its hold, with `REPORTED` once a watchdog reported it; 0 otherwise. Written by
    /// the holder (store, swap), CASed by a watchdog.
    held: AtomicU64,
    /// The holder's tag beside `held`, stored before it.
    held_tag: AtomicUsize,
    /// The idle value. INVARIANT: accessed only by the holder of the slot's unit of load, or by
    /// the reaper that won the idle word (step 3); `Some` exactly while idle (module docs).
    value: UnsafeCell<Option<T>>,
}

// SAFETY: the value in the cell is only ever accessed by one thread at a time: the holder of
// the slot's single unit of load (the table's checked CAS admits one) or the reaper that won
// the idle word while no unit was held, and each hand-over between them is a `SeqCst` RMW on
// the slot word or the idle word, which orders the previous accessor's writes before the next
// accessor's reads (module docs; the loom models check it). The value moves between threads,
// hence `T: Send`; it is never shared, so `T: Sync` is not needed.
unsafe impl<T: Send> Sync for ExclusiveCell<T> {}

impl<T> Default for ExclusiveCell<T> {
    fn default() -> Self {
        Self {
            idle: AtomicU64::new(IdleWord::EMPTY.0),
            born: AtomicU64::new(0),
            checkouts: AtomicU64::new(0),
            settling: AtomicBool::new(false),
            held: AtomicU64::new(0),
            held_tag: AtomicUsize::new(0),
            value: UnsafeCell::new(None),
        }
    }
}

impl<T> ExclusiveCell<T> {
    fn idle_word(&self) -> IdleWord {
        IdleWord(self.idle.load(Ordering::SeqCst))
    }

    /// Counts one checkout. Only the slot's holder calls it, so a plain load and store do.
    fn count_checkout(&self) {
        let n = self.checkouts.load(Ordering::Relaxed);
        self.checkouts.store(n.wrapping_add(1), Ordering::Relaxed);
    }

    /// Takes the idle value out.
    ///
    /// # Safety
    /// The caller holds the slot's unit of load and saw the idle word `Idle` after joining (or
    /// won `Reaping → Idle`), or is the reaper that won `Reaping → Empty`.
    unsafe fn take(&self) -> Option<T> {
        // SAFETY: exclusive by the caller's contract.
        self.value.with_mut(|value| unsafe { (*value).take() })
    }

    /// Puts the value in and stamps the idle word (`Release`: the value is written before the
    /// word; the table release that follows is the hand-over that orders both before the next
    /// holder or the reaper).
    ///
    /// # Safety
    /// The caller holds the slot's unit of load and owns the value (the cell is empty).
    unsafe fn put(&self, value: T, stamp: u64) {
        // SAFETY: exclusive by the caller's contract.
        self.value.with_mut(|cell| unsafe {
            debug_assert!((*cell).is_none(), "a returned value overwrote an idle one");
            // Empty by the contract: nothing to drop in its place.
            cell.write(Some(value));
        });
        let word = IdleWord::idle(stamp.min(MAX_STAMP)).0;
        // loom 0.7 can order a plain store between the read and the write of a concurrent
        // RMW (tokio-rs/loom#254), which no real atomic allows: it then lets a reaper's
        // step 3 win over this stamp. The model stores with a swap, whose effect on the word
        // is the same and which loom keeps atomic with the reaper's CAS.
        #[cfg(slotpool_loom)]
        let _ = self.idle.swap(word, Ordering::Release);
        #[cfg(not(slotpool_loom))]
        self.idle.store(word, Ordering::Release);
    }
}

impl<T> fmt::Debug for ExclusiveCell<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExclusiveCell")
            .field("idle", &self.idle_word())
            .field("born", &self.born.load(Ordering::Relaxed))
            .field("checkouts", &self.checkouts.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// Exclusive ownership of one slot (its unit of load). Hand it back with
/// [`ExclusiveSlots::check_in`] or [`ExclusiveSlots::retire`].
#[derive(Debug)]
#[must_use = "a lease owns its slot until checked in or retired"]
pub struct Lease {
    reservation: Reservation,
}

impl Lease {
    /// The slot's index.
    pub fn index(&self) -> usize {
        self.reservation.index()
    }

    /// The slot's incarnation.
    pub fn generation(&self) -> Generation {
        self.reservation.generation()
    }
}

/// What a checkout got.
#[derive(Debug)]
pub enum Checkout<T> {
    /// An idle value, now owned by the caller.
    Idle {
        /// The slot.
        lease: Lease,
        /// The value.
        value: T,
    },
    /// A claimed Empty slot, with a unit of the live count: build a value, then
    /// [`ExclusiveSlots::occupy`] (or [`ExclusiveSlots::retire`] on failure).
    Vacant {
        /// The slot.
        lease: Lease,
    },
}

/// What became of a value handed to [`ExclusiveSlots::check_in`].
#[derive(Debug)]
#[must_use = "values that come back must be closed by the caller"]
pub enum CheckIn<'a, T> {
    /// Back in its slot, idle (or handed to the oldest waiter).
    Kept,
    /// Not kept: the table holds more values than its size (it was shrunk, or closed), so
    /// the slot was retired. The value (the one [`Retired`] holds) counts against the bound
    /// until the caller has closed it and dropped the `Retired`.
    Surplus(Retired<'a, T>),
    /// Kept, but the table was shrunk or closed while the value went back, and this return
    /// ran the trimming pass itself: these idle values (this one among them, perhaps) were
    /// retired and are the caller's to close.
    Trimmed(Retired<'a, T>),
}

/// What became of a value handed to [`ExclusiveSlots::check_in_unpinned`].
#[must_use = "a settling return must end with `Settling::done`, and values that come back must be closed"]
pub enum Unpinned<'a, T, K> {
    /// Back in its slot (or handed to the oldest waiter), and nothing more to do but end the
    /// return: the caller must call [`Settling::done`] once it holds no reference into the
    /// table any more. Until then the value cannot leave the table for good, so whatever it
    /// keeps alive (the table's owner) stays alive.
    Settling(Settling),
    /// The return needed more than the fast path: the previous holder of the slot was still
    /// ending its own return, or the table was shrunk or closed. `keep` was called (while the
    /// caller's value still kept the table alive) and what it returned is here, to be held
    /// until the [`CheckIn`] beside it has been dealt with: from here on it is what keeps the
    /// table alive.
    Pinned(K, CheckIn<'a, T>),
}

impl<T, K> fmt::Debug for Unpinned<'_, T, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unpinned::Settling(_) => f.write_str("Settling"),
            Unpinned::Pinned(_, check_in) => {
                f.debug_tuple("Pinned").field(&check_in.is_kept()).finish()
            }
        }
    }
}

/// How a return made by [`ExclusiveSlots::check_in_unpinned`] ends, for the pools that pass
/// it up to the frame that holds no reference into the pool any more: the settling flag to
/// clear, or the reference `keep` took, to drop.
#[must_use = "a return ends with `Ending::end`"]
pub enum Ending<K> {
    /// Clear the slot's flag ([`Settling::done`]).
    Settling(Settling),
    /// Drop the caller's own reference.
    Pinned(K),
}

impl<K> Ending<K> {
    /// Ends the return: the last access to the table (which may be freed as this runs).
    ///
    /// # Safety
    /// As for [`Settling::done`]: the caller holds no reference into the table or its owner
    /// that it uses after this call.
    #[inline]
    pub unsafe fn end(self) {
        match self {
            // SAFETY: the caller's contract.
            Ending::Settling(settling) => unsafe { settling.done() },
            Ending::Pinned(kept) => drop(kept),
        }
    }
}

impl<K> fmt::Debug for Ending<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ending::Settling(_) => f.write_str("Settling"),
            Ending::Pinned(_) => f.write_str("Pinned"),
        }
    }
}

/// The end of a return made by [`ExclusiveSlots::check_in_unpinned`]: the slot's `settling`
/// flag, cleared by [`Settling::done`]. Not tied to the table's lifetime on purpose (the
/// table may be gone once it is done); dropping it without `done` leaves the flag set, and
/// whoever then takes the value out for good would wait forever, so it panics in debug
/// builds.
pub struct Settling {
    flag: NonNull<AtomicBool>,
}

impl Settling {
    /// Ends the return: clears the slot's `settling` flag (`Release`, so that every access
    /// the return made happens before whatever a waiting closer does next). This is the
    /// return's last access to the table; the table may be freed before this call returns.
    ///
    /// # Safety
    /// The table this came from has not been freed (it cannot be before this call: the value
    /// the return put back keeps it alive until the flag clears), and the caller holds no
    /// reference into the table or its owner that it uses after this call.
    #[inline]
    pub unsafe fn done(self) {
        let flag = self.flag;
        std::mem::forget(self);
        // SAFETY: the flag lives in the table, which the caller's contract keeps alive up to
        // this store (module docs, "Returning without a reference count").
        unsafe { flag.as_ref() }.store(false, Ordering::Release);
    }
}

impl Drop for Settling {
    fn drop(&mut self) {
        debug_assert!(
            std::thread::panicking(),
            "a settling return was dropped without `Settling::done`"
        );
    }
}

impl fmt::Debug for Settling {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Settling")
    }
}

impl<T> CheckIn<'_, T> {
    /// Whether the value stayed in the table.
    pub fn is_kept(&self) -> bool {
        !matches!(self, CheckIn::Surplus(_))
    }
}

/// Values a table retired, each still counted against its bound (a unit of `closing`, see
/// the [module documentation](self#closing-values-the-owners-half)) until the caller is done
/// with it: dropping a `Retired` drops the values still in it, then gives their units back;
/// iterating it by value hands them out and gives the units back when the iterator is
/// dropped. Derefs to the values.
#[must_use = "retired values count against the bound until this is dropped"]
pub struct Retired<'a, T, V = T> {
    /// Dropped before `closing` (field order): the values are gone before their units.
    values: Vec<V>,
    closing: Closing<'a, T>,
}

/// Units of `closing` held for retired values; given back on drop.
struct Closing<'a, T> {
    slots: &'a ExclusiveSlots<T>,
    units: usize,
}

impl<T> Drop for Closing<'_, T> {
    fn drop(&mut self) {
        self.slots.end_closing(self.units);
    }
}

impl<'a, T, V> Retired<'a, T, V> {
    fn new(slots: &'a ExclusiveSlots<T>) -> Self {
        Retired {
            values: Vec::new(),
            closing: Closing { slots, units: 0 },
        }
    }

    /// Adds a value whose unit was moved to `closing`.
    fn push(&mut self, value: V) {
        self.values.push(value);
        self.closing.units += 1;
    }

    /// The values.
    pub fn as_slice(&self) -> &[V] {
        &self.values
    }

    /// The units of the bound these values still hold.
    pub fn units(&self) -> usize {
        self.closing.units
    }

    /// The same values (and units) through `f`.
    pub fn map_values<W>(self, f: impl FnMut(V) -> W) -> Retired<'a, T, W> {
        let Retired { values, closing } = self;
        Retired {
            values: values.into_iter().map(f).collect(),
            closing,
        }
    }
}

impl<T, V> std::ops::Deref for Retired<'_, T, V> {
    type Target = [V];

    fn deref(&self) -> &[V] {
        &self.values
    }
}

impl<'a, T, V> IntoIterator for Retired<'a, T, V> {
    type Item = V;
    type IntoIter = RetiredIter<'a, T, V>;

    fn into_iter(self) -> RetiredIter<'a, T, V> {
        RetiredIter {
            values: self.values.into_iter(),
            closing: self.closing,
        }
    }
}

impl<T, V: fmt::Debug> fmt::Debug for Retired<'_, T, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Retired")
            .field("values", &self.values)
            .field("units", &self.closing.units)
            .finish()
    }
}

/// The values of a [`Retired`], by value; their units of the bound go back when this is
/// dropped (after the loop that closed them).
pub struct RetiredIter<'a, T, V = T> {
    /// Dropped before `closing` (field order).
    values: std::vec::IntoIter<V>,
    closing: Closing<'a, T>,
}

impl<T, V> Iterator for RetiredIter<'_, T, V> {
    type Item = V;

    fn next(&mut self) -> Option<V> {
        self.values.next()
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.values.size_hint()
    }
}

impl<T, V> ExactSizeIterator for RetiredIter<'_, T, V> {}

impl<T, V> fmt::Debug for RetiredIter<'_, T, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetiredIter")
            .field("left", &self.values.len())
            .field("units", &self.closing.units)
            .finish()
    }
}

/// What a reaper's predicate sees of an idle value ([`ExclusiveSlots::reap_by`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdleStamps {
    /// The slot.
    pub index: usize,
    /// The stamp of the value's last return.
    pub idle_since: u64,
    /// The stamp it was built at ([`ExclusiveSlots::occupy_born`]; 0 if not given).
    pub born: u64,
}

/// A holder's note as it ended ([`ExclusiveSlots::end_hold`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HoldNote {
    /// The stamp the holder noted it took the value at.
    pub since: u64,
    /// The tag it noted.
    pub tag: usize,
    /// Whether a watchdog reported the hold while it lasted.
    pub reported: bool,
}

/// A noted hold, in the word `ExclusiveCell::held`.
const HOLD_NOTED: u64 = 1 << 63;
/// A noted hold a watchdog reported.
const HOLD_REPORTED: u64 = 1 << 62;

/// Counts of an [`ExclusiveSlots`] table (a snapshot; scans every slot).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ExclusiveCounts {
    /// Slots with a value, in use or idle (or being built).
    pub live: usize,
    /// Idle values.
    pub idle: usize,
    /// Values handed out (idle ones taken, built ones occupied but not with
    /// [`ExclusiveSlots::occupy_idle`]), all slots and incarnations.
    pub checkouts: u64,
    /// The live count's bound, `None` when unbounded ([`ExclusiveSlots::resize`]; 0 once
    /// closed).
    pub size: Option<usize>,
    /// The slot table's own counts.
    pub table: TableStats,
}

/// The live and closing counts and their bound (module docs, "The parts"). One cache line: a
/// return reads the counts and the size, and only opening or retiring a slot writes the
/// counts.
struct Bound {
    /// `live` and `closing`, one word ([`Counts`]): the bound is their sum, so they are read
    /// and changed together. INVARIANT: `live` rises only by a CAS that finds `live +
    /// closing` below `size`; a retirement moves a unit from `live` to `closing` in one RMW;
    /// `closing` falls only when the owner is done with the value.
    counts: AtomicU64,
    /// The most values that may exist; `usize::MAX` when unbounded, 0 once closed.
    size: AtomicUsize,
}

/// The counts word of [`Bound`]: `closing << 32 | live`. Both counts are at most
/// [`MAX_SIZE`] (plus the surplus a shrink leaves), far below 2³², so neither half carries
/// into the other.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Counts(u64);

impl Counts {
    /// One unit of `live`.
    const LIVE: u64 = 1;
    /// One unit of `closing`.
    const CLOSING: u64 = 1 << 32;
    /// What a retirement adds to the word: one unit of `closing`, less one of `live` (no
    /// borrow crosses the halves while `live` is at least 1).
    const LIVE_TO_CLOSING: u64 = Self::CLOSING - Self::LIVE;

    /// Values in slots, not yet retired.
    fn live(self) -> usize {
        (self.0 & 0xFFFF_FFFF) as usize
    }

    /// Retired values still being closed by their owner.
    fn closing(self) -> usize {
        (self.0 >> 32) as usize
    }

    /// Values that exist: the sum the bound limits.
    fn existing(self) -> usize {
        self.live() + self.closing()
    }
}

impl fmt::Debug for Counts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Counts")
            .field("live", &self.live())
            .field("closing", &self.closing())
            .finish()
    }
}

/// The exclusive-value protocol the [`ClientPool`] and the managed [`Pool`] are built on: a
/// slot table with `max_load = 1` plus a cell per slot and a resizable live count. See the
/// [module documentation](self). Executor-free, so loom checks it directly.
///
/// [`ClientPool`]: crate::client::ClientPool
/// [`Pool`]: crate::managed::Pool
pub struct ExclusiveSlots<T> {
    table: SlotTable<ExclusiveCell<T>>,
    bound: CachePadded<Bound>,
    /// Serialises reaper and closing passes (cold), so a pass's step 3 sees only its own
    /// `Reaping`.
    reaping: Mutex<()>,
    /// [`Reuse::Rotate`]'s cursor: one past the slot of the last checkout (a hint; see the
    /// module docs). `None` for [`Reuse::Lowest`].
    cursor: Option<CachePadded<AtomicUsize>>,
}

impl<T> ExclusiveSlots<T> {
    /// An empty table for at most `n` values (`Capacity::Bounded(n)`), or any number.
    ///
    /// # Errors
    /// [`ConfigError::Zero`]`("slots")` for a bound of 0, [`ConfigError::TooLarge`] above
    /// [`MAX_SIZE`].
    pub fn new(capacity: Capacity) -> Result<Self, ConfigError> {
        Self::with_reuse(capacity, Reuse::Lowest)
    }

    /// [`ExclusiveSlots::new`] with the given reuse order.
    ///
    /// # Errors
    /// As [`ExclusiveSlots::new`].
    pub fn with_reuse(capacity: Capacity, reuse: Reuse) -> Result<Self, ConfigError> {
        let size = match capacity {
            Capacity::Bounded(n) => Self::check_size("slots", n)?,
            Capacity::Unbounded => usize::MAX,
        };
        if size == 0 {
            return Err(ConfigError::Zero("slots"));
        }
        Ok(Self {
            table: SlotTable::new(Capacity::Unbounded, 1)?,
            bound: CachePadded::new(Bound {
                counts: AtomicU64::new(0),
                size: AtomicUsize::new(size),
            }),
            reaping: Mutex::new(()),
            cursor: match reuse {
                Reuse::Lowest => None,
                Reuse::Rotate => Some(CachePadded::new(AtomicUsize::new(0))),
            },
        })
    }

    fn check_size(name: &'static str, size: usize) -> Result<usize, ConfigError> {
        if size > MAX_SIZE {
            return Err(ConfigError::TooLarge {
                name,
                value: size as u64,
                max: MAX_SIZE as u64,
            });
        }
        Ok(size)
    }

    // --- checkout ----------------------------------------------------------------------------

    /// Takes the lowest-index idle value, or claims the lowest Empty slot within the bound,
    /// without waiting.
    ///
    /// # Errors
    /// [`TryAcquireError::NoCapacity`] when the bound is reached and nothing is idle,
    /// [`TryAcquireError::Closed`] after [`ExclusiveSlots::close`].
    #[inline]
    pub fn try_checkout(&self) -> Result<Checkout<T>, TryAcquireError> {
        match self.attempt() {
            Some(checkout) => Ok(checkout),
            None if self.table.is_closed() => Err(TryAcquireError::Closed),
            None => Err(TryAcquireError::NoCapacity),
        }
    }

    /// Waits for an idle value or room to build one (FIFO among waiters; a returned value is
    /// handed to the oldest waiter).
    ///
    /// Cancel-safe: dropping the future before it resolves takes nothing; a value handed to it
    /// passes to the next waiter, and a wake-up it had received passes on too.
    pub fn checkout(&self) -> CheckoutWait<'_, T> {
        CheckoutWait {
            slots: self,
            wait: WaitState::new(),
            tried: false,
        }
    }

    /// [`ExclusiveSlots::checkout`] for a caller whose [`ExclusiveSlots::try_checkout`] has
    /// just failed: the first poll queues at once, skipping the try a wait makes before it
    /// queues (the caller's was that try), and tries once after queueing, as every wait does
    /// (that second try is what keeps a return that ran before the queueing from being
    /// missed). A pool whose `get` tries first and then waits scans the table twice on its
    /// way to the queue instead of three times.
    ///
    /// Cancel-safe as [`ExclusiveSlots::checkout`].
    pub fn checkout_after_try(&self) -> CheckoutWait<'_, T> {
        CheckoutWait {
            slots: self,
            wait: WaitState::new(),
            tried: true,
        }
    }

    /// One try. The common case inline: the lowest slot flagged with room is idle and ours
    /// (one CAS and one load of its idle word); everything else out of line.
    #[inline]
    fn attempt(&self) -> Option<Checkout<T>> {
        if let Some(cursor) = &self.cursor {
            return self.attempt_rotating(cursor);
        }
        if let Some((reservation, slot)) = self.table.reserve_fast_at() {
            // SAFETY: the fast path joins `slot` (it never claims).
            let taken = unsafe { Self::take_idle(slot.data(), true) };
            match self.admitted(Lease { reservation }, taken) {
                Some(checkout) => return Some(checkout),
                None => return self.attempt_slow(Some(reservation.index())),
            }
        }
        self.attempt_slow(None)
    }

    /// [`ExclusiveSlots::attempt`] in [`Reuse::Rotate`] order: the first idle value at or
    /// after the cursor, else the lowest (the wrap-around), and the cursor moved past it. A
    /// slot lost to the reaper, and no idle value at all, go the lowest-first way.
    #[inline(never)]
    fn attempt_rotating(&self, cursor: &AtomicUsize) -> Option<Checkout<T>> {
        let start = cursor.load(Ordering::Relaxed);
        let joined = match start {
            0 => None,
            _ => self.table.join_from(start),
        };
        if let Some(reservation) = joined.or_else(|| self.table.join_only()) {
            let index = reservation.index();
            return match self.admit(reservation, true) {
                Some(checkout) => {
                    cursor.store(index + 1, Ordering::Relaxed);
                    Some(checkout)
                }
                None => self.attempt_slow(Some(index)),
            };
        }
        self.attempt_slow(None)
    }

    /// Joins any slot with room, else opens one within the bound. A slot lost to a reaper is
    /// given back and the table searched again, a bounded number of times, past that slot:
    /// until the reaper drains it (its next step, unless it is preempted just there) the slot
    /// stays the lowest with room, and a search that met it each time would give up with
    /// other values idle beside it.
    #[inline(never)]
    fn attempt_slow(&self, mut lost: Option<usize>) -> Option<Checkout<T>> {
        for _ in 0..LOST_RETRIES {
            let joined = match lost {
                Some(index) => self.table.join_only_skipping(index),
                None => self.table.join_only(),
            };
            if let Some(reservation) = joined {
                match self.admit(reservation, true) {
                    Some(checkout) => return Some(checkout),
                    None => {
                        lost = Some(reservation.index());
                        spin();
                        continue;
                    }
                }
            }
            // Nothing idle: a new value, if the bound allows one.
            if !self.take_live() {
                return None;
            }
            // Past a lost slot, an Empty one first: a reservation would join the lost slot.
            if lost.is_some() {
                if let Some(reservation) = self.table.try_claim_vacant() {
                    trace_transition!("exclusive: claim {}", reservation.index());
                    return Some(Checkout::Vacant {
                        lease: Lease { reservation },
                    });
                }
            }
            match self.table.try_reserve() {
                Ok(reservation) if reservation.claimed() => {
                    trace_transition!("exclusive: claim {}", reservation.index());
                    return Some(Checkout::Vacant {
                        lease: Lease { reservation },
                    });
                }
                Ok(reservation) => {
                    // A value came back meanwhile and the reservation joined it: no new one.
                    self.give_live_back();
                    if let Some(checkout) = self.admit(reservation, true) {
                        return Some(checkout);
                    }
                    lost = Some(reservation.index());
                }
                Err(_) => {
                    // Closed (an unbounded table never runs out).
                    self.give_live_back();
                    return None;
                }
            }
            spin();
        }
        None
    }

    /// Claims the lowest Empty slot for a new value, within the bound, without taking an idle
    /// one and without waiting (for owners that keep a minimum of values idle): build the
    /// value, then [`ExclusiveSlots::occupy`] or [`ExclusiveSlots::retire`]. `None` when the
    /// bound is reached or the table is closed.
    pub fn try_open(&self) -> Option<Lease> {
        if !self.take_live() {
            return None;
        }
        let claimed = self.table.try_claim_vacant().or_else(|| {
            // No Empty slot in the segments so far: a reservation grows the table (or joins a
            // value returned meanwhile, which we leave where it is).
            match self.table.try_reserve() {
                Ok(reservation) if reservation.claimed() => Some(reservation),
                Ok(reservation) => {
                    self.table.release(reservation);
                    None
                }
                Err(_) => None,
            }
        });
        match claimed {
            Some(reservation) => Some(Lease { reservation }),
            None => {
                self.give_live_back();
                None
            }
        }
    }

    /// The live and closing counts (one load).
    #[inline]
    fn counts_now(&self) -> Counts {
        Counts(self.bound.counts.load(Ordering::SeqCst))
    }

    /// Takes a unit of `live` if that keeps the values that exist (`live + closing`) within
    /// `size`. One CAS of the counts word: the sum it checks is the sum it changes.
    fn take_live(&self) -> bool {
        let bound = &self.bound;
        let mut counts = self.counts_now();
        loop {
            if counts.existing() >= bound.size.load(Ordering::SeqCst) {
                return false;
            }
            match bound.counts.compare_exchange_weak(
                counts.0,
                counts.0 + Counts::LIVE,
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => return true,
                // Another opener, a retirement or a close moved a count: recheck the sum.
                Err(actual) => counts = Counts(actual),
            }
        }
    }

    /// Gives a unit of `live` back and wakes the oldest waiter to use it (our RMW, then the
    /// gate's load: Dekker with a waiter's enqueue and recheck).
    fn give_live_back(&self) {
        let before = Counts(self.bound.counts.fetch_sub(Counts::LIVE, Ordering::SeqCst));
        debug_assert!(before.live() > 0, "the live count went below zero");
        self.table.gate().notify_one();
    }

    /// Moves a retired slot's unit from `live` to `closing` (one RMW: the sum does not move).
    fn live_to_closing(&self) {
        let before = Counts(
            self.bound
                .counts
                .fetch_add(Counts::LIVE_TO_CLOSING, Ordering::SeqCst),
        );
        debug_assert!(before.live() > 0, "the live count went below zero");
    }

    /// Moves a unit from `live` to `closing` only while `live` is above `size` (a retirement
    /// the bound asks for): true if this caller is to retire one value, whose [`Retired`]
    /// then holds the unit.
    #[cold]
    fn claim_surplus_closing(&self) -> bool {
        let bound = &self.bound;
        let mut counts = self.counts_now();
        loop {
            if counts.live() <= bound.size.load(Ordering::SeqCst) {
                return false;
            }
            match bound.counts.compare_exchange_weak(
                counts.0,
                counts.0 + Counts::LIVE_TO_CLOSING,
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => return true,
                // Another retirement or an opener moved it: recheck against the bound.
                Err(actual) => counts = Counts(actual),
            }
        }
    }

    /// Takes back a claim of [`ExclusiveSlots::claim_surplus_closing`] whose value could not
    /// be taken after all: the unit returns from `closing` to `live` (over the bound, where
    /// openers find no room; the sum does not move, so nobody is woken).
    #[cold]
    fn unclaim_surplus_closing(&self) {
        let before = Counts(
            self.bound
                .counts
                .fetch_sub(Counts::LIVE_TO_CLOSING, Ordering::SeqCst),
        );
        debug_assert!(before.closing() > 0, "the closing count went below zero");
    }

    /// The owner closed `units` retired values: their units of `closing` go back, each
    /// waking the oldest waiter to build (our RMW, then the gate's load, as in
    /// [`ExclusiveSlots::give_live_back`]).
    fn end_closing(&self, units: usize) {
        if units == 0 {
            return;
        }
        let before = Counts(
            self.bound
                .counts
                .fetch_sub(units as u64 * Counts::CLOSING, Ordering::SeqCst),
        );
        debug_assert!(
            before.closing() >= units,
            "the closing count went below zero"
        );
        for _ in 0..units {
            self.table.gate().notify_one();
        }
    }

    /// Whether more values are in slots than the bound allows (two loads of one line).
    #[inline]
    fn over_bound(&self) -> bool {
        self.counts_now().live() > self.bound.size.load(Ordering::SeqCst)
    }

    /// Checks the idle word after joining a Ready slot and takes the value (counting a
    /// checkout if `count`). `None` (the unit given back) if a reaper won the value.
    #[inline]
    fn admit(&self, reservation: Reservation, count: bool) -> Option<Checkout<T>> {
        let lease = Lease { reservation };
        if reservation.claimed() {
            // `try_reserve` claims only in `attempt_slow`, which takes a unit of `live` first;
            // the fast path and the join-only scans never claim.
            return Some(Checkout::Vacant { lease });
        }
        let taken = self
            .table
            // SAFETY: the reservation is a join of this slot (not a claim: checked above).
            .with_slot(reservation.index(), |slot| unsafe {
                Self::take_idle(slot.data(), count)
            })
            .flatten();
        self.admitted(lease, taken)
    }

    /// The value of a joined slot, checked against the reaper: `None` if a reaper won it
    /// (Empty), `Some(None)` for an Idle word over an empty cell, which the INVARIANT rules
    /// out. Counts a checkout if `count`.
    ///
    /// # Safety
    /// The caller has just joined the cell's slot (it holds a unit of its load, not a claim).
    #[inline(always)]
    unsafe fn take_idle(cell: &ExclusiveCell<T>, count: bool) -> Option<Option<T>> {
        // Our join (a SeqCst RMW on the slot word) before this load: Dekker with the reaper's
        // steps 1 and 2.
        dekker_fence();
        let mut current = cell.idle_word();
        loop {
            match current.state() {
                IdleState::Idle => break,
                IdleState::Reaping => {
                    // A reaper is between its steps; abort its reap. Exactly one of this CAS
                    // and its step 3 succeeds.
                    match cell.idle.compare_exchange(
                        current.0,
                        current.restored().0,
                        Ordering::SeqCst,
                        Ordering::SeqCst,
                    ) {
                        Ok(_) => break,
                        // The reaper finished (Empty: it won; Idle: it backed off).
                        Err(actual) => current = IdleWord(actual),
                    }
                }
                // A reaper won this value: the slot is about to be drained.
                IdleState::Empty => return None,
            }
        }
        if count {
            cell.count_checkout();
        }
        // SAFETY: the caller holds the slot's unit and the idle word said Idle after its join
        // (or we won Reaping → Idle): no reaper can take the value any more, and no other
        // holder exists.
        Some(unsafe { cell.take() })
    }

    /// What [`ExclusiveSlots::admit`] makes of what [`ExclusiveSlots::take_idle`] found.
    #[inline(always)]
    fn admitted(&self, lease: Lease, taken: Option<Option<T>>) -> Option<Checkout<T>> {
        match taken {
            Some(Some(value)) => {
                trace_transition!("exclusive: reuse {}", lease.index());
                Some(Checkout::Idle { lease, value })
            }
            Some(None) => self.admit_empty(lease),
            None => {
                trace_transition!("exclusive: lost {} to the reaper", lease.index());
                self.table.release(lease.reservation);
                None
            }
        }
    }

    /// An Idle word over an empty cell, which the INVARIANT rules out: rather than lose the
    /// slot, the caller builds a fresh value in it (it holds the unit of `live` the slot had).
    #[cold]
    fn admit_empty(&self, lease: Lease) -> Option<Checkout<T>> {
        debug_assert!(false, "idle cell without a value");
        Some(Checkout::Vacant { lease })
    }

    /// The waiter's side of a hand-over: a returned slot, its unit still held.
    fn admit_handoff(&self, reservation: Reservation) -> Option<Checkout<T>> {
        trace_transition!("exclusive: handed {}", reservation.index());
        self.admit(reservation, true)
    }

    // --- building, returning, retiring -------------------------------------------------------

    /// The builder's half: the value for a [`Checkout::Vacant`] slot is built; the caller owns
    /// it and the slot is Ready.
    pub fn occupy(&self, lease: &Lease) {
        self.occupy_born(lease, 0);
    }

    /// [`ExclusiveSlots::occupy`], recording when the value was built (the caller's stamp,
    /// shown to [`ExclusiveSlots::reap_by`]'s predicate for lifetime caps).
    pub fn occupy_born(&self, lease: &Lease, born: u64) {
        self.occupy_counting(lease, born, true);
    }

    /// [`ExclusiveSlots::occupy_born`] for a value built to go idle, not handed out (an
    /// owner's minimum of idle values, a value handed in from outside): not counted as a
    /// checkout.
    pub fn occupy_idle(&self, lease: &Lease, born: u64) {
        self.occupy_counting(lease, born, false);
    }

    fn occupy_counting(&self, lease: &Lease, born: u64, count: bool) {
        self.table.with_slot(lease.index(), |slot| {
            let cell = slot.data();
            // Published to the reaper by the release that first makes the value idle.
            cell.born.store(born, Ordering::Release);
            if count {
                cell.count_checkout();
            }
        });
        // `false` if the slot was Ready already (a rebuilt value): nothing to do then.
        let _ = self.table.mark_ready(lease.index(), lease.generation());
    }

    // --- holder notes ---------------------------------------------------------------------

    /// Notes that `lease`'s holder has held its value since `since` (clamped to
    /// [`MAX_STAMP`]), with the opaque `tag`, for a watchdog (module docs, "Holder notes").
    /// Only the holder calls it, once per checkout, and ends it with
    /// [`ExclusiveSlots::end_hold`] before giving the value back.
    pub fn note_hold(&self, lease: &Lease, since: u64, tag: usize) {
        self.table.with_slot(lease.index(), |slot| {
            let cell = slot.data();
            cell.held_tag.store(tag, Ordering::Relaxed);
            // The tag before the stamp: a watchdog that sees the stamp sees the tag.
            cell.held
                .store(HOLD_NOTED | since.min(MAX_STAMP), Ordering::Release);
        });
    }

    /// Ends the note of `lease`'s holder: what it noted and whether a watchdog reported it;
    /// `None` if it noted nothing.
    pub fn end_hold(&self, lease: &Lease) -> Option<HoldNote> {
        self.end_hold_at(lease.index())
    }

    /// [`ExclusiveSlots::end_hold`] by the slot's index (the caller holds its lease).
    pub(crate) fn end_hold_at(&self, index: usize) -> Option<HoldNote> {
        let (held, tag) = self.table.with_slot(index, |slot| {
            let cell = slot.data();
            // The holder wrote the tag itself: a plain load sees it.
            let tag = cell.held_tag.load(Ordering::Relaxed);
            (cell.held.swap(0, Ordering::AcqRel), tag)
        })?;
        (held & HOLD_NOTED != 0).then_some(HoldNote {
            since: held & MAX_STAMP,
            tag,
            reported: held & HOLD_REPORTED != 0,
        })
    }

    /// A watchdog pass: calls `report(index, since, tag)` once for each noted hold that began
    /// at or before `before` and was not reported yet, marking it reported (a pass whose mark
    /// loses to the holder's end, or to another pass, reports nothing). Scans every slot.
    pub fn report_holds(&self, before: u64, mut report: impl FnMut(usize, u64, usize)) {
        self.table.for_each_slot(|index, slot| {
            let cell = slot.data();
            let held = cell.held.load(Ordering::Acquire);
            if held & HOLD_NOTED == 0 || held & HOLD_REPORTED != 0 || held & MAX_STAMP > before {
                return;
            }
            let tag = cell.held_tag.load(Ordering::Relaxed);
            // Ours to report only if the note is still the one we read: the holder may have
            // ended it (or another pass marked it) since.
            if cell
                .held
                .compare_exchange(
                    held,
                    held | HOLD_REPORTED,
                    Ordering::AcqRel,
                    Ordering::Relaxed,
                )
                .is_ok()
            {
                report(index, held & MAX_STAMP, tag);
            }
        });
    }

    /// Returns `value` to its slot, idle since `stamp` (clamped to [`MAX_STAMP`]), and
    /// releases the lease, or retires the slot if the table holds more values than its size.
    /// See [`CheckIn`] for what the caller must do with values that come back.
    #[inline]
    pub fn check_in(&self, lease: Lease, value: T, stamp: u64) -> CheckIn<'_, T> {
        if self.over_bound() && self.claim_surplus_closing() {
            trace_transition!("exclusive: surplus {}", lease.index());
            self.retire_slot(lease);
            let mut retired = Retired::new(self);
            retired.push(value);
            return CheckIn::Surplus(retired);
        }
        self.put_back(lease, value, stamp);
        // Our release (SeqCst RMW) before these loads; `resize` and `close` store `size`
        // (SeqCst RMW) before their passes read the slot words: one of us sees the other.
        dekker_fence();
        if self.over_bound() {
            return CheckIn::Trimmed(self.trim());
        }
        CheckIn::Kept
    }

    /// [`ExclusiveSlots::check_in`] for a caller whose only reference to the table (or to what
    /// owns it) is the value it returns: the value keeps the table alive until it is back in
    /// its slot, and after that the slot's `settling` flag does, until the caller ends the
    /// return with [`Settling::done`]. So a return with nobody waiting takes the table's one
    /// release RMW and no reference count (module docs, "Returning without a reference
    /// count").
    ///
    /// `keep` is called only where the return needs the table past that point on another
    /// footing: the value is surplus (the table was shrunk or closed), the return found the
    /// table over its bound after its release (it runs the trimming pass), or the slot's
    /// previous holder is still ending its own return. Its result comes back with the
    /// [`CheckIn`] in [`Unpinned::Pinned`].
    #[inline]
    pub fn check_in_unpinned<K>(
        &self,
        lease: Lease,
        value: T,
        stamp: u64,
        keep: impl FnOnce() -> K,
    ) -> Unpinned<'_, T, K> {
        if self.over_bound() {
            return self.check_in_pinned(lease, value, stamp, keep);
        }
        let cell = self
            .table
            .with_slot(lease.index(), |slot| NonNull::from(slot.data()))
            .expect("a lease's slot exists while it is held");
        // SAFETY: slots never move or go before the table, which our value keeps alive.
        let cell = unsafe { cell.as_ref() };
        let settling = &cell.settling;
        if settling.load(Ordering::Acquire) {
            // The previous holder is still between its release and its `done`: the flag is
            // its. Return under the caller's own reference instead.
            return self.check_in_pinned(lease, value, stamp, keep);
        }
        // Before the value is published (the idle word's `Release` store and the release RMW
        // that follow), so whoever reaches the value through either sees the flag set.
        settling.store(true, Ordering::Relaxed);
        self.put_back_in(cell, lease, value, stamp);
        // Our release (SeqCst RMW) before these loads (see `check_in`).
        dekker_fence();
        if self.over_bound() {
            // Overtaken by a shrink or a close: this return runs the trimming pass, which may
            // take our own value and would wait for our flag. Pin the table first (our flag
            // still keeps the value, and so the table, alive), then end the settling.
            let kept = keep();
            settling.store(false, Ordering::Release);
            return Unpinned::Pinned(kept, CheckIn::Trimmed(self.trim()));
        }
        Unpinned::Settling(Settling {
            flag: NonNull::from(settling),
        })
    }

    /// [`ExclusiveSlots::check_in_unpinned`]'s cold case: the return runs under the
    /// reference `keep` takes (module docs, "Returning without a reference count").
    #[cold]
    #[inline(never)]
    fn check_in_pinned<K>(
        &self,
        lease: Lease,
        value: T,
        stamp: u64,
        keep: impl FnOnce() -> K,
    ) -> Unpinned<'_, T, K> {
        Unpinned::Pinned(keep(), self.check_in(lease, value, stamp))
    }

    /// Waits until no return of slot `index` is still settling (a spin: a settling return is
    /// a few loads from its end). Called by whoever takes a value out of the table for good,
    /// before handing it over to be dropped.
    fn await_settled(&self, index: usize) {
        self.table.with_slot(index, |slot| {
            let settling = &slot.data().settling;
            while settling.load(Ordering::Acquire) {
                spin();
            }
        });
    }

    /// Puts `value` in the leased slot with `stamp` and releases the lease (which hands the
    /// slot to the oldest waiter, if any).
    #[inline]
    fn put_back(&self, lease: Lease, value: T, stamp: u64) {
        let cell = self
            .table
            .with_slot(lease.index(), |slot| NonNull::from(slot.data()))
            .expect("a lease's slot exists while it is held");
        // SAFETY: slots never move or go before the table, which the caller's `&self` keeps.
        self.put_back_in(unsafe { cell.as_ref() }, lease, value, stamp);
    }

    /// [`ExclusiveSlots::put_back`] into `cell`, the leased slot's (looked up by the caller).
    #[inline]
    fn put_back_in(&self, cell: &ExclusiveCell<T>, lease: Lease, value: T, stamp: u64) {
        // SAFETY: we hold the slot's unit (the lease) and own the value: the cell is empty
        // and nobody else may touch it until our release below.
        unsafe { cell.put(value, stamp) };
        trace_transition!("exclusive: check in {}", lease.index());
        // A lease is a held unit (a reaper takes only slots at load 0): one `fetch_sub`.
        self.table.release_held(lease.reservation);
    }

    /// Gives the slot up without a value (failed to build, or a value the caller no longer
    /// has): the slot drains and returns to Empty, and its unit of the live count goes back
    /// at once (waking a waiter to build).
    pub fn retire(&self, lease: Lease) {
        self.retire_slot(lease);
        self.give_live_back();
    }

    /// Gives the slot up with the caller's `value` (discarded, expired): the slot drains and
    /// returns to Empty, and the value counts against the bound until the caller has closed
    /// it and dropped the returned [`Retired`].
    pub fn retire_value(&self, lease: Lease, value: T) -> Retired<'_, T> {
        let mut retired = Retired::new(self);
        self.live_to_closing();
        self.retire_slot(lease);
        retired.push(value);
        retired
    }

    /// Retires the leased slot; its unit of `live` is the caller's to account for.
    fn retire_slot(&self, lease: Lease) {
        // The value leaves for good: not while the slot's previous holder still settles.
        self.await_settled(lease.index());
        self.table.with_slot(lease.index(), |slot| {
            let cell = slot.data();
            // No value to reap: a reaper that read the old Idle word fails its next CAS.
            cell.idle.store(IdleWord::EMPTY.0, Ordering::SeqCst);
            // A holder's note ends with its value (module docs, "Holder notes").
            if cell.held.load(Ordering::Relaxed) != 0 {
                cell.held.store(0, Ordering::Release);
            }
        });
        self.table.begin_drain(lease.index(), lease.generation());
        self.table.release(lease.reservation);
    }

    // --- resizing, trimming, retaining -------------------------------------------------------

    /// Sets the most values that may exist to `size`. Growing wakes as many waiters as it
    /// adds room for; shrinking retires idle values beyond the bound now (highest slot first)
    /// and returns them to be dropped; values in use beyond it are retired as they come back
    /// ([`CheckIn::Surplus`]). A closed table stays closed (and empty).
    ///
    /// # Errors
    /// [`ConfigError::TooLarge`]`("resize")` above [`MAX_SIZE`].
    pub fn resize(&self, size: usize) -> Result<Retired<'_, T>, ConfigError> {
        let size = Self::check_size("resize", size)?;
        let _serialised = self.reaping.lock();
        if self.table.is_closed() {
            return Ok(Retired::new(self));
        }
        let old = self.bound.size.swap(size, Ordering::SeqCst);
        trace_transition!("exclusive: resize {} -> {}", old, size);
        if size > old {
            // New room: wake the waiters that can use it (each rechecks the bound).
            for _ in 0..size - old {
                if !self.table.gate().has_waiters() {
                    break;
                }
                self.table.gate().notify_one();
            }
            return Ok(Retired::new(self));
        }
        // Our store (SeqCst RMW) before the pass's loads of the slot words: Dekker with
        // `check_in`, which releases its slot and then loads the bound.
        dekker_fence();
        Ok(self.trim_serialised())
    }

    /// The bound on values (`None` when unbounded; 0 once closed).
    pub fn size(&self) -> Option<usize> {
        match self.bound.size.load(Ordering::SeqCst) {
            usize::MAX => None,
            size => Some(size),
        }
    }

    /// Values that exist now (built, being built, idle or in use, or retired and still
    /// being closed by their owner): the live count plus the closing count.
    pub fn live(&self) -> usize {
        self.counts_now().existing()
    }

    /// Retired values their owners are still closing (held by a [`Retired`]).
    pub fn closing(&self) -> usize {
        self.counts_now().closing()
    }

    /// Retires idle values while more exist than the bound allows, highest slot first (all of
    /// them once closed); returns them to be closed.
    pub fn trim(&self) -> Retired<'_, T> {
        let _serialised = self.reaping.lock();
        self.trim_serialised()
    }

    fn trim_serialised(&self) -> Retired<'_, T> {
        if self.table.is_closed() {
            return self
                .reap_serialised(|_| true)
                .map_values(|(value, _)| value);
        }
        let mut retired = Retired::new(self);
        for index in self.idle_indices().into_iter().rev() {
            // The unit first, then the value: the value stays idle (a checkout may still take
            // it) until the surplus is ours. Taking the value first and putting it back when a
            // return met the bound meanwhile left a moment with the value out and no room, in
            // which a try reported no capacity beside a value that was idle before and after.
            if !self.claim_surplus_closing() {
                // The bound is met (a return may have retired its own value).
                break;
            }
            let Some((lease, value)) = self.take_at(index) else {
                // Checked out (or gone) since the snapshot: the unit stays with its value.
                self.unclaim_surplus_closing();
                continue;
            };
            trace_transition!("exclusive: trimmed {}", index);
            self.retire_slot(lease);
            retired.push(value);
        }
        retired
    }

    /// Asks `keep` about every idle value (each taken from its slot as a checkout would take
    /// it, so no caller can have it meanwhile): values it keeps go back with their old stamps,
    /// the others' slots are retired and the values returned to be dropped. Values in use are
    /// not visited.
    ///
    /// If `keep` panics, the value it was asked about is dropped with the unwinding and then
    /// its slot retired (pools catch their users' panics before they reach here).
    pub fn retain(&self, mut keep: impl FnMut(&mut T) -> bool) -> Retired<'_, T> {
        let mut removed = Retired::new(self);
        for index in self.idle_indices() {
            let Some((lease, value)) = self.take_at(index) else {
                continue;
            };
            let mut held = Held {
                slots: self,
                held: Some((lease, value)),
            };
            let Some((_, value)) = held.held.as_mut() else {
                continue;
            };
            let kept = keep(value);
            let Some((lease, value)) = held.held.take() else {
                continue;
            };
            if kept {
                self.restore(lease, value);
            } else {
                removed.push(value);
                self.live_to_closing();
                self.retire_slot(lease);
            }
        }
        removed
    }

    /// The indices of the slots that show an idle value now (a snapshot).
    fn idle_indices(&self) -> Vec<usize> {
        let mut indices = Vec::new();
        self.table.for_each_slot(|index, slot| {
            if Self::state_of(slot.word(), slot.data().idle_word()) == CellState::Idle {
                indices.push(index);
            }
        });
        indices
    }

    /// Takes slot `index`'s idle value by joining that very slot (without counting a
    /// checkout). `None` if it is not idle any more.
    fn take_at(&self, index: usize) -> Option<(Lease, T)> {
        let reservation = self.table.try_join_at(index)?;
        match self.admit(reservation, false)? {
            Checkout::Idle { lease, value } => {
                // Trimming and `retain` may drop the value: not while its last holder settles.
                self.await_settled(lease.index());
                Some((lease, value))
            }
            // Built again by the joiner: nothing was idle after all.
            Checkout::Vacant { lease } => {
                self.retire(lease);
                None
            }
        }
    }

    /// Puts a value taken by [`ExclusiveSlots::take_at`] back with the stamp its idle word
    /// still shows (a join does not touch the idle word).
    fn restore(&self, lease: Lease, value: T) {
        let stamp = self
            .table
            .with_slot(lease.index(), |slot| slot.data().idle_word().stamp())
            .unwrap_or(0);
        self.put_back(lease, value, stamp);
    }

    // --- reaping and closing -----------------------------------------------------------------

    /// One reaper pass: removes every idle value whose stamp `expired` accepts and returns
    /// each with its stamp (for the caller to drop outside any slot operation). An acquire or a
    /// check-in racing the pass wins (module docs).
    pub fn reap(&self, mut expired: impl FnMut(u64) -> bool) -> Retired<'_, T, (T, u64)> {
        self.reap_by(|stamps| expired(stamps.idle_since))
    }

    /// [`ExclusiveSlots::reap`] whose predicate sees the slot, the idle stamp and the birth
    /// stamp of each idle value, lowest slot first.
    pub fn reap_by(&self, expired: impl FnMut(IdleStamps) -> bool) -> Retired<'_, T, (T, u64)> {
        let _serialised = self.reaping.lock();
        self.reap_serialised(expired)
    }

    fn reap_serialised(
        &self,
        mut expired: impl FnMut(IdleStamps) -> bool,
    ) -> Retired<'_, T, (T, u64)> {
        let mut reaped = Retired::new(self);
        self.table.for_each_slot(|index, slot| {
            let word = slot.word();
            if word.phase() != Phase::Ready || word.load() != 0 {
                // Held (its idle word may still show the previous stamp), or not live.
                return;
            }
            let cell = slot.data();
            let current = cell.idle_word();
            if current.state() != IdleState::Idle {
                return;
            }
            let stamps = IdleStamps {
                index,
                idle_since: current.stamp(),
                born: cell.born.load(Ordering::Acquire),
            };
            if !expired(stamps) {
                return;
            }
            // Step 1.
            if cell
                .idle
                .compare_exchange(
                    current.0,
                    current.reaping().0,
                    Ordering::SeqCst,
                    Ordering::SeqCst,
                )
                .is_err()
            {
                // Returned again (a fresh stamp) or retired since we looked.
                return;
            }
            // Step 2: our RMW on the idle word before this load (Dekker with `admit`).
            dekker_fence();
            let now = slot.word();
            let unheld = now.generation() == word.generation()
                && now.phase() == Phase::Ready
                && now.load() == 0;
            if !unheld {
                // A holder got in first: give the word back (unless it changed it already).
                let _ = cell.idle.compare_exchange(
                    current.reaping().0,
                    current.0,
                    Ordering::SeqCst,
                    Ordering::SeqCst,
                );
                return;
            }
            // Step 3.
            if cell
                .idle
                .compare_exchange(
                    current.reaping().0,
                    IdleWord::EMPTY.0,
                    Ordering::SeqCst,
                    Ordering::SeqCst,
                )
                .is_err()
            {
                // An acquirer aborted the reap (it owns the value now).
                return;
            }
            // SAFETY: we won Reaping → Empty while no unit was held: acquirers that join now
            // see Empty and leave the value alone, and nobody can claim the slot before our
            // drain below.
            let value = unsafe { cell.take() };
            // Handed out to be dropped: not while its last holder settles.
            while cell.settling.load(Ordering::Acquire) {
                spin();
            }
            // INVARIANT: only the winner of the idle word retires an idle value's slot, so
            // the generation is the one we read.
            trace_transition!("exclusive: reaped {}", index);
            match value {
                Some(value) => {
                    // The unit stays with the value until its owner has closed it.
                    self.live_to_closing();
                    self.table.begin_drain(index, word.generation());
                    reaped.push((value, current.stamp()));
                }
                None => {
                    self.table.begin_drain(index, word.generation());
                    self.give_live_back();
                }
            }
        });
        reaped
    }

    /// Closes the table: the bound drops to 0, waiters and later checkouts get [`Closed`].
    /// Leases already out stay valid; their values come back as [`CheckIn::Surplus`]. The
    /// caller takes the idle values out with a closing pass (`reap(|_| true)`).
    pub fn close(&self) {
        // Serialised with `resize`, which could otherwise store a size over our 0.
        let _serialised = self.reaping.lock();
        self.bound.size.store(0, Ordering::SeqCst);
        self.table.close();
        // Our close (SeqCst RMWs on the bound and the gate) before the closing pass's loads
        // of the slot words: Dekker with `check_in`, which releases and then loads the bound.
        dekker_fence();
    }

    /// Whether [`ExclusiveSlots::close`] was called.
    pub fn is_closed(&self) -> bool {
        self.table.is_closed()
    }

    /// `Some(size)` for a bounded table (see [`ExclusiveSlots::size`]).
    pub fn capacity(&self) -> Option<usize> {
        self.size()
    }

    /// Tasks waiting for a value (a snapshot).
    pub fn waiting(&self) -> usize {
        self.table.gate().waiting()
    }

    /// Counts live and idle values and checkouts (scans every slot; for statistics).
    pub fn counts(&self) -> ExclusiveCounts {
        let mut counts = ExclusiveCounts {
            table: self.table.stats(),
            size: self.size(),
            ..ExclusiveCounts::default()
        };
        self.table.for_each_slot(|_, slot| {
            counts.checkouts = counts
                .checkouts
                .wrapping_add(slot.data().checkouts.load(Ordering::Relaxed));
            match Self::state_of(slot.word(), slot.data().idle_word()) {
                CellState::Idle | CellState::Reaping => {
                    counts.idle += 1;
                    counts.live += 1;
                }
                CellState::Busy => counts.live += 1,
                CellState::Empty => {}
            }
        });
        counts
    }

    /// The state of slot `index`'s value (for tests and models).
    pub fn state(&self, index: usize) -> Option<CellState> {
        self.table.with_slot(index, |slot| {
            Self::state_of(slot.word(), slot.data().idle_word())
        })
    }

    fn state_of(word: SlotWord, idle: IdleWord) -> CellState {
        match (word.phase(), word.load(), idle.state()) {
            // Being built (claimed, not yet occupied).
            (Phase::Starting, _, _) => CellState::Busy,
            (Phase::Ready, 0, IdleState::Idle) => CellState::Idle,
            (Phase::Ready, 0, IdleState::Reaping) => CellState::Reaping,
            (Phase::Ready, 0, IdleState::Empty) => CellState::Empty,
            (Phase::Ready, _, _) => CellState::Busy,
            (Phase::Empty | Phase::Draining, _, _) => CellState::Empty,
        }
    }
}

impl<T> fmt::Debug for ExclusiveSlots<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExclusiveSlots")
            .field("counts", &self.counts())
            .finish()
    }
}

/// A slot and its value taken by [`ExclusiveSlots::retain`] while the caller's predicate
/// runs: if the predicate unwinds, the value is dropped and then its slot retired.
struct Held<'a, T> {
    slots: &'a ExclusiveSlots<T>,
    held: Option<(Lease, T)>,
}

impl<T> Drop for Held<'_, T> {
    fn drop(&mut self) {
        if let Some((lease, value)) = self.held.take() {
            drop(value);
            self.slots.retire(lease);
        }
    }
}

pin_project_lite::pin_project! {
    /// Future of [`ExclusiveSlots::checkout`]. `!Unpin`: its place in the queue lives inside it.
    #[must_use = "futures do nothing unless polled"]
    pub struct CheckoutWait<'a, T> {
        slots: &'a ExclusiveSlots<T>,
        // Structurally pinned: never moved out of the future. It leaves the queue (passing
        // an unused wake-up on) when it drops.
        #[pin]
        wait: WaitState<'a>,
        // The caller has just tried (`ExclusiveSlots::checkout_after_try`): the first poll
        // skips its try before queueing. Cleared by that poll.
        tried: bool,
    }

    impl<'a, T> PinnedDrop for CheckoutWait<'a, T> {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            // Leaves the queue; a slot handed to us and not taken goes to the next waiter.
            this.slots.table.cancel_reserve(this.wait);
        }
    }
}

impl<T> Future for CheckoutWait<'_, T> {
    type Output = Result<Checkout<T>, Closed>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        let slots = *this.slots;
        // Only the first poll's first try is skipped: the one after queueing always runs.
        let mut skip = std::mem::take(this.tried);
        loop {
            let polled = this.wait.as_mut().poll_until_handoff(
                slots.table.gate(),
                cx,
                || {
                    if std::mem::take(&mut skip) {
                        return None;
                    }
                    slots.attempt().map(Some)
                },
                |token| slots.admit_handoff(Reservation::from_token(token)),
                |token| {
                    slots.table.release(Reservation::from_token(token));
                },
            );
            return match polled {
                Poll::Ready(Ok(Some(checkout))) => Poll::Ready(Ok(checkout)),
                // A handed-over slot whose value a reaper had won (the reaper takes only
                // unheld slots, so this does not happen): wait again, at the front.
                Poll::Ready(Ok(None)) => continue,
                Poll::Ready(Err(closed)) => Poll::Ready(Err(closed)),
                Poll::Pending => Poll::Pending,
            };
        }
    }
}

impl<T> fmt::Debug for CheckoutWait<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CheckoutWait")
            .field("wait", &self.wait)
            .finish()
    }
}
