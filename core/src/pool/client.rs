//! `ClientPool`: exclusive clients over shared channels, reused lowest slot first, optionally
//! bounded, reaped when idle.
//!
//! # What it does
//!
//! A client (a gRPC client stub with its per-client state) is used by one caller at a time.
//! [`ClientPool::acquire`] hands out an idle client if there is one, else builds a new one
//! with the user's [`ClientFactory`] on a channel from the [`ChannelPool`]
//! (lowest channel with room). The [`ClientGuard`] derefs to the client and returns it to the
//! idle set on drop; [`ClientGuard::discard`] drops a broken client instead. An optional
//! `max_clients` bounds live clients; callers wait for one (FIFO, cancel-safe), or use
//! [`ClientPool::try_acquire`] / [`ClientPool::acquire_timeout`]. Each client holds its
//! [`ChannelGuard`] for its whole life, so dropping a client (discarded or reaped) releases its
//! channel.
//!
//! # How: the slot word owns the client
//!
//! Clients live in a [`SlotTable`] with `max_load = 1` (bounded by `max_clients`, or
//! unbounded). **The slot word is the truth about who owns a client**: load 1 while a guard
//! (or a builder) owns it, load 0 while it sits idle in the slot. The table finds the
//! **lowest-index** idle client (one bitmap load, one CAS) or claims the lowest Empty slot for
//! a new one; since new clients take the lowest channel with room, low client slots sit on
//! low channels, and reusing low slots first lets high slots (and their channels) go idle and
//! be reaped. Waiting for a slot is the table's gate: a release with nobody waiting takes no
//! lock.
//!
//! Next to each slot (on the slot's own cache line, which the table's CAS has just brought to
//! the owner's core) an [`ExclusiveCell`] holds
//!
//! * the idle client, in an `UnsafeCell`: **whoever holds the slot's unit of load has
//!   exclusive access to it** (the checked CAS `load < 1` admits one holder at a time, and
//!   every hand-over is a `SeqCst` RMW on the slot word, so each holder's writes happen before
//!   the next holder's reads);
//! * the **idle word** (`stamp << 2 | state`), written by a returning guard with one plain
//!   store and *only read* by an acquirer. It exists for the reaper alone, which is the one
//!   party that takes a client without holding a unit; the slot table offers no "retire this
//!   slot if it is still idle" step that would let it do so through the slot word (see
//!   "Reaping" below);
//! * the slot's checkout count, bumped by the owner with a plain load and store (only the
//!   owner writes it), summed by [`ExclusiveSlots::counts`].
//!
//! So an acquire of an idle client is the table's CAS plus one load of the idle word on the
//! same line; a release is one store on that line plus the table's release. No lock, no other
//! read-modify-write, and no clock read (see "Idle time").
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
//! A reaper pass, for a slot that is Ready with load 0 and whose idle word says
//! `Idle(stamp)` with an expired stamp:
//!
//! 1. CAS the idle word `Idle(stamp) → Reaping(stamp)`, then
//! 2. load the slot word. Load 0 (same incarnation): nobody holds the client. Otherwise a
//!    holder got in first: CAS `Reaping → Idle` back and move on.
//! 3. CAS `Reaping(stamp) → Empty`. Won: the client is the reaper's; it takes it from the cell
//!    and drains the slot (Empty at once, or when a joiner that lost gives its unit back).
//!
//! An **acquirer** joins the slot (the table's CAS, load 0 → 1), then loads the idle word:
//! `Idle` means the client is its own; `Empty` means a reaper won (give the unit back and
//! look again); `Reaping` means a reaper is between steps 1 and 3, and the acquirer cannot
//! tell whether the reaper's step 2 saw its unit, so it **aborts the reap** with its own CAS
//! `Reaping(stamp) → Idle(stamp)`: exactly one of that CAS and the reaper's step 3 succeeds,
//! and whoever wins owns the client.
//!
//! Why nobody else can be between the acquirer's two steps and the reaper's: the acquirer
//! writes the slot word then reads the idle word; the reaper writes the idle word then reads
//! the slot word; all four are `SeqCst`, so in the single total order one of them sees the
//! other's write (the Dekker pattern of [`crate::gate`]; `dekker_fence` states it for loom).
//! If the reaper sees load 0, the acquirer's join comes later and its load sees `Reaping` or
//! `Empty`; if the acquirer sees `Idle`, the reaper's step 1 comes later and its step 2 sees
//! the acquirer's unit. A returning guard stores a fresh `Idle` before its table release, so a
//! reaper that read the old word fails its step 3 (or its step 1). **A reap never takes a
//! client that was just acquired, and a released client goes to exactly one caller.**
//!
//! The idle word is not touched on acquire, so while a client is in use its word still shows
//! the previous `Idle(stamp)`; the reaper's pre-check of the slot word (load 0) skips such
//! slots, and step 2 catches the rest. Reaper passes are serialised by a mutex (they are
//! cold), so step 3 cannot be confused by a second reaper's `Reaping` of the same stamp.
//!
//! INVARIANT: the cell holds a client exactly while the slot is Ready with load 0 and its idle
//! word is not `Empty` (outside the few instructions of a hand-over); it is `None` while a
//! guard or a builder owns the client, and after a reap, discard or failed build.
//!
//! The loom models in `slotpool-loom-tests/tests/channel_client.rs` check [`ExclusiveSlots`],
//! the protocol type the pool is built on: a reap racing an acquire and a check-in, two
//! callers racing for one client, and a close racing a check-in.
//!
//! # Idle time
//!
//! A returning guard stamps the idle word with the pool's **recent time**: the later of the
//! injected clock's cheap `recent()` reading (exact for `quanta::Clock::mock()`, the time of
//! quanta's upkeep thread if the application runs one) and the time of the pool's last reap
//! pass. Neither is a clock read. [`ClientPool::reap`] closes clients idle for at least the
//! idle timeout **plus the stamp's staleness bound** (the background reap interval, when the
//! pool runs one; zero otherwise), so a client is never reaped early under a background
//! reaper, and with manual `reap` calls its idle time counts from its release or from the
//! last reap pass before it, whichever is later. Reaped clients release their channels with
//! that idle-since time, so a [`ChannelPool::reap`] at the same instant closes the channels
//! they leave idle (nested reaping).
//!
//! # Failure model
//!
//! Acquiring never sends a request: every [`ClientError`] is [`Reach::NotSent`] and safe to
//! retry. A failed [`ClientFactory::make`] frees the slot (and the channel share) before the
//! error is returned.
//!
//! # Lifetimes
//!
//! A guard keeps the pool's shared state alive through its client's **anchor** (one `Arc` per
//! live client that holds the shared state and travels with the client, so checkouts write no
//! shared reference count), not through the [`ClientPool`] handle: dropping the last handle
//! closes the pool (waiters get [`ClientError::Closed`], idle clients are dropped, clients
//! returned later are dropped too) and stops the reaper task even while guards live. The
//! anchors of idle clients form a cycle through the shared state, which that close breaks.
//!
//! This module owns client lifecycles, the cells and the idle word; capacity search and
//! waiting are the slot table's and the gate's, channels are [`crate::channel`]'s.
//!
//! [`ChannelPool`]: crate::channel::ChannelPool
//! [`ChannelPool::reap`]: crate::channel::ChannelPool::reap
//! [`ChannelGuard`]: crate::channel::ChannelGuard
//! [`Reach::NotSent`]: crate::Reach::NotSent

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::error::{Closed, ConfigError, TryAcquireError};
use crate::gate::WaitState;
use crate::slots::{Capacity, Generation, Phase, Reservation, SlotTable, SlotWord, TableStats};
use crate::sync::{dekker_fence, spin, trace_transition, AtomicU64, Mutex, Ordering, UnsafeCell};

#[cfg(not(slotpool_loom))]
pub use pool::*;

/// The largest stamp an idle word holds (62 bits).
pub const MAX_STAMP: u64 = (1 << 62) - 1;

/// How many times an acquirer that lost a slot to the reaper looks again before it waits (a
/// waiter is woken when the reaper's drain frees the slot).
const LOST_RETRIES: usize = 64;

// ---------------------------------------------------------------------------------------------
// The idle word
// ---------------------------------------------------------------------------------------------

/// Where an exclusive slot's client is, as [`ExclusiveSlots::state`] reports it (from the slot
/// word and the idle word together). See the [module documentation](self).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CellState {
    /// No client (never built, or gone).
    Empty,
    /// A guard (or a builder) owns the client.
    Busy,
    /// The client sits in the cell, idle.
    Idle,
    /// A reaper is deciding whether it takes the idle client.
    Reaping,
}

/// What the idle word itself says (the reaper's handshake; see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum IdleState {
    /// No client to reap (none built yet, or discarded, or reaped).
    Empty,
    /// The last holder returned the client at the stamp (it may be in use again since).
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

/// Per-slot data of an [`ExclusiveSlots`] table: the idle value, the idle word and the
/// checkout count. See the [module documentation](self).
pub struct ExclusiveCell<T> {
    /// The idle word. Written by the holder (release, retire), read by acquirers, CASed by the
    /// reaper and by an acquirer that aborts a reap.
    idle: AtomicU64,
    /// Checkouts of this slot, all incarnations. Written only by the slot's current holder
    /// (plain load and store: the hand-over CAS orders holders), read by statistics.
    checkouts: AtomicU64,
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
            checkouts: AtomicU64::new(0),
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

    /// Puts the value in.
    ///
    /// # Safety
    /// The caller holds the slot's unit of load and owns the client (the cell is empty).
    unsafe fn put(&self, value: T) {
        // SAFETY: exclusive by the caller's contract.
        self.value.with_mut(|cell| unsafe {
            debug_assert!((*cell).is_none(), "a returned client overwrote an idle one");
            *cell = Some(value);
        });
    }
}

impl<T> fmt::Debug for ExclusiveCell<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExclusiveCell")
            .field("idle", &self.idle_word())
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
    /// A claimed Empty slot: build a value, then [`ExclusiveSlots::occupy`] (or
    /// [`ExclusiveSlots::retire`] on failure).
    Vacant {
        /// The slot.
        lease: Lease,
    },
}

/// Counts of an [`ExclusiveSlots`] table (a snapshot; scans every slot).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ExclusiveCounts {
    /// Slots with a value, in use or idle (or being built).
    pub live: usize,
    /// Idle values.
    pub idle: usize,
    /// Values handed out (idle ones taken, built ones occupied), all slots and incarnations.
    pub checkouts: u64,
    /// The slot table's own counts.
    pub table: TableStats,
}

/// The exclusive-resource protocol the [`ClientPool`] is built on: a slot table with
/// `max_load = 1` plus a cell per slot. See the [module documentation](self). Executor-free,
/// so loom checks it directly.
///
/// [`ClientPool`]: crate::client::ClientPool
pub struct ExclusiveSlots<T> {
    table: SlotTable<ExclusiveCell<T>>,
    /// Serialises reaper passes (cold), so a pass's step 3 sees only its own `Reaping`.
    reaping: Mutex<()>,
}

impl<T> ExclusiveSlots<T> {
    /// An empty table of `capacity` slots.
    ///
    /// # Errors
    /// As [`SlotTable::new`] (zero or too many slots).
    pub fn new(capacity: Capacity) -> Result<Self, ConfigError> {
        Ok(Self {
            table: SlotTable::new(capacity, 1)?,
            reaping: Mutex::new(()),
        })
    }

    /// Takes the lowest-index idle value, or claims the lowest Empty slot, without waiting.
    ///
    /// # Errors
    /// [`TryAcquireError::NoCapacity`] when every slot of a bounded table is owned,
    /// [`TryAcquireError::Closed`] after [`ExclusiveSlots::close`].
    pub fn try_checkout(&self) -> Result<Checkout<T>, TryAcquireError> {
        if self.table.is_closed() {
            return Err(TryAcquireError::Closed);
        }
        self.attempt().ok_or(TryAcquireError::NoCapacity)
    }

    /// Waits for an idle value or an Empty slot (FIFO among waiters).
    ///
    /// Cancel-safe: dropping the future before it resolves takes nothing, and a wake-up it had
    /// received passes to the next waiter.
    pub fn checkout(&self) -> CheckoutWait<'_, T> {
        CheckoutWait {
            slots: self,
            wait: WaitState::new(),
        }
    }

    /// One try: join or claim in the table, then check the idle word. A slot lost to a reaper
    /// is given back and the table searched again, a bounded number of times.
    fn attempt(&self) -> Option<Checkout<T>> {
        for _ in 0..LOST_RETRIES {
            let reservation = self.table.try_reserve().ok()?;
            if let Some(checkout) = self.admit(reservation) {
                return Some(checkout);
            }
            spin();
        }
        None
    }

    fn admit(&self, reservation: Reservation) -> Option<Checkout<T>> {
        let lease = Lease { reservation };
        if reservation.claimed() {
            // Counted by `occupy`, once the value is built.
            return Some(Checkout::Vacant { lease });
        }
        let taken = self
            .table
            .with_slot(reservation.index(), |slot| {
                let cell = slot.data();
                // Our join (a SeqCst RMW on the slot word) before this load: Dekker with the
                // reaper's steps 1 and 2.
                dekker_fence();
                let mut current = cell.idle_word();
                loop {
                    match current.state() {
                        IdleState::Idle => break,
                        IdleState::Reaping => {
                            // A reaper is between its steps; abort its reap. Exactly one of
                            // this CAS and its step 3 succeeds.
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
                        // A reaper won this client: the slot is about to be drained.
                        IdleState::Empty => return None,
                    }
                }
                cell.count_checkout();
                // SAFETY: we hold the slot's unit and the idle word said Idle after our join
                // (or we won Reaping → Idle): no reaper can take the value any more, and no
                // other holder exists.
                Some(unsafe { cell.take() })
            })
            .flatten();
        match taken {
            Some(Some(value)) => {
                trace_transition!("client: reuse {}", lease.index());
                Some(Checkout::Idle { lease, value })
            }
            // INVARIANT says Idle and load 0 imply a value; if it were ever missing, the caller
            // builds a fresh one in this (held, Ready) slot rather than losing the slot.
            Some(None) => {
                debug_assert!(false, "idle cell without a value");
                Some(Checkout::Vacant { lease })
            }
            None => {
                trace_transition!("client: lost {} to the reaper", lease.index());
                self.table.release(lease.reservation);
                None
            }
        }
    }

    /// The builder's half: the value for a [`Checkout::Vacant`] slot is built; the caller owns
    /// it and the slot is Ready.
    pub fn occupy(&self, lease: &Lease) {
        self.table
            .with_slot(lease.index(), |slot| slot.data().count_checkout());
        // `false` if the slot was Ready already (a rebuilt value): nothing to do then.
        let _ = self.table.mark_ready(lease.index(), lease.generation());
    }

    /// Returns `value` to the slot, idle since `stamp` (clamped to [`MAX_STAMP`]), and
    /// releases the lease. The value is in the cell and the idle word stamped before the slot
    /// shows room.
    ///
    /// Returns `false` if the table was closed meanwhile: the value may then sit in a closed
    /// table, and the caller must run a closing pass (`reap(|_| true)`) to take it back out.
    #[must_use = "a value returned to a closed table must be reaped"]
    pub fn check_in(&self, lease: Lease, value: T, stamp: u64) -> bool {
        self.table.with_slot(lease.index(), |slot| {
            let cell = slot.data();
            // SAFETY: we hold the slot's unit (the lease) and own the value: the cell is empty
            // and nobody else may touch it until our release below.
            unsafe { cell.put(value) };
            // Release: the value is written before the word; the table release below is the
            // hand-over that orders both before the next holder or the reaper.
            cell.idle
                .store(IdleWord::idle(stamp.min(MAX_STAMP)).0, Ordering::Release);
        });
        trace_transition!("client: check in {}", lease.index());
        self.table.release(lease.reservation);
        // Our release (SeqCst RMW) before this load, `close` sets CLOSED (SeqCst RMW) before its
        // pass reads the slot words: one of us sees the other.
        dekker_fence();
        !self.table.is_closed()
    }

    /// Gives the slot up without a value (discarded, failed to build, pool closed): the slot
    /// drains and returns to Empty.
    pub fn retire(&self, lease: Lease) {
        self.table.with_slot(lease.index(), |slot| {
            // No value to reap: a reaper that read the old Idle word fails its next CAS.
            slot.data().idle.store(IdleWord::EMPTY.0, Ordering::SeqCst);
        });
        self.table.begin_drain(lease.index(), lease.generation());
        self.table.release(lease.reservation);
    }

    /// One reaper pass: removes every idle value whose stamp `expired` accepts and returns
    /// each with its stamp (for the caller to drop outside any slot operation). An acquire or a
    /// check-in racing the pass wins (module docs).
    pub fn reap(&self, mut expired: impl FnMut(u64) -> bool) -> Vec<(T, u64)> {
        let _serialised = self.reaping.lock();
        let mut reaped = Vec::new();
        self.table.for_each_slot(|index, slot| {
            let word = slot.word();
            if word.phase() != Phase::Ready || word.load() != 0 {
                // Held (its idle word may still show the previous stamp), or not live.
                return;
            }
            let cell = slot.data();
            let current = cell.idle_word();
            if current.state() != IdleState::Idle || !expired(current.stamp()) {
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
                // An acquirer aborted the reap (it owns the client now).
                return;
            }
            // SAFETY: we won Reaping → Empty while no unit was held: acquirers that join now
            // see Empty and leave the value alone, and nobody can claim the slot before our
            // drain below.
            let value = unsafe { cell.take() };
            // INVARIANT: only the winner of the idle word retires an idle client's slot, so
            // the generation is the one we read.
            self.table.begin_drain(index, word.generation());
            trace_transition!("client: reaped {}", index);
            if let Some(value) = value {
                reaped.push((value, current.stamp()));
            }
        });
        reaped
    }

    /// Closes the table: waiters and later checkouts get [`Closed`]. Leases already out stay
    /// valid.
    pub fn close(&self) {
        self.table.close();
        // Our close (a SeqCst RMW on the gate) before the closing pass's loads of the slot
        // words: Dekker with `check_in`, which releases and then checks for the close.
        dekker_fence();
    }

    /// Whether [`ExclusiveSlots::close`] was called.
    pub fn is_closed(&self) -> bool {
        self.table.is_closed()
    }

    /// `Some(slots)` for a bounded table.
    pub fn capacity(&self) -> Option<usize> {
        self.table.capacity()
    }

    /// Counts live and idle values and checkouts (scans every slot; for statistics).
    pub fn counts(&self) -> ExclusiveCounts {
        let mut counts = ExclusiveCounts {
            table: self.table.stats(),
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

    /// The state of slot `index`'s client (for tests and models).
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

/// Future of [`ExclusiveSlots::checkout`].
#[must_use = "futures do nothing unless polled"]
pub struct CheckoutWait<'a, T> {
    slots: &'a ExclusiveSlots<T>,
    wait: WaitState,
}

impl<T> Future for CheckoutWait<'_, T> {
    type Output = Result<Checkout<T>, Closed>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let slots = this.slots;
        this.wait
            .poll_until(slots.table.gate(), cx, || slots.attempt())
    }
}

impl<T> Drop for CheckoutWait<'_, T> {
    fn drop(&mut self) {
        self.wait.cancel(self.slots.table.gate());
    }
}

impl<T> fmt::Debug for CheckoutWait<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CheckoutWait")
            .field("wait", &self.wait)
            .finish()
    }
}

// ---------------------------------------------------------------------------------------------
// The pool
// ---------------------------------------------------------------------------------------------

#[cfg(not(slotpool_loom))]
mod pool {
    use std::fmt;
    use std::future::{poll_fn, Future};
    use std::ops::{Deref, DerefMut};
    use std::pin::Pin;
    use std::time::Duration;

    use tokio::runtime::Handle;

    use super::{Checkout, ExclusiveSlots, Lease, MAX_STAMP};
    use crate::channel::{ChannelConnector, ChannelGuard, ChannelPool};
    use crate::error::{ConfigError, Reach, TryAcquireError};
    use crate::pool::reap::nanos;
    use crate::slots::Capacity;
    use crate::sync::{Arc, AtomicU64, CachePadded, Counter, Ordering};

    /// Builds a client on a channel.
    pub trait ClientFactory<Ch>: Send + Sync + 'static {
        /// The client (exclusive to one caller at a time).
        type Client: Send + 'static;
        /// Why a client could not be built.
        type Error: std::error::Error + Send + Sync + 'static;
        /// Builds a client on `channel`. No lock is held while this runs, and other callers
        /// are not blocked by it.
        fn make(
            &self,
            channel: &Ch,
        ) -> impl Future<Output = Result<Self::Client, Self::Error>> + Send;
    }

    /// Why an acquire returned no client. Nothing was sent in any case
    /// ([`ClientError::reach`] is always [`Reach::NotSent`]): a retry is safe.
    #[derive(Debug, thiserror::Error)]
    pub enum ClientError<E: std::error::Error + 'static> {
        /// The pool was closed (or dropped).
        #[error("client pool closed")]
        Closed,
        /// `max_clients` clients are in use ([`ClientPool::try_acquire`] only).
        #[error("all clients are in use")]
        NoCapacity,
        /// No client freed up within the caller's deadline.
        #[error("no client within {waited:?}")]
        Timeout {
            /// How long the caller waited.
            waited: Duration,
        },
        /// The factory failed to build a client; its slot and channel share were freed.
        #[error("building a client failed: {source}")]
        Make {
            /// The factory's error.
            #[source]
            source: E,
        },
    }

    impl<E: std::error::Error + 'static> ClientError<E> {
        /// Always [`Reach::NotSent`]: acquiring a client sends nothing.
        pub fn reach(&self) -> Reach {
            Reach::NotSent
        }
    }

    /// A snapshot of a [`ClientPool`]'s state and counters.
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
    pub struct ClientStats {
        /// `max_clients`, if bounded.
        pub capacity: Option<usize>,
        /// Live clients: idle, in use, or being built.
        pub clients: usize,
        /// Idle clients.
        pub idle: usize,
        /// Clients in use (guards out, or being built).
        pub in_use: usize,
        /// Tasks waiting for a client.
        pub waiting: usize,
        /// Acquires that returned a guard.
        pub acquires: u64,
        /// Acquires that had to wait.
        pub waits: u64,
        /// Clients built.
        pub created: u64,
        /// Builds that failed.
        pub make_failures: u64,
        /// Clients discarded by their guard (or returned to a closed pool).
        pub discards: u64,
        /// Clients closed by the reaper.
        pub reaps: u64,
    }

    /// Builder for a [`ClientPool`]; see [`ClientPool::builder`].
    pub struct ClientPoolBuilder<C: ChannelConnector, F> {
        channels: Arc<ChannelPool<C>>,
        factory: F,
        max_clients: Option<usize>,
        idle_timeout: Duration,
        reap_interval: Option<Duration>,
        clock: quanta::Clock,
    }

    impl<C: ChannelConnector, F: ClientFactory<C::Channel>> ClientPoolBuilder<C, F> {
        /// Bounds live clients; acquires wait when all are in use. Default: `None`
        /// (unbounded).
        pub fn max_clients(mut self, max: Option<usize>) -> Self {
            self.max_clients = max;
            self
        }

        /// How long a client may sit idle before the reaper closes it. Default: 180 s.
        pub fn idle_timeout(mut self, timeout: Duration) -> Self {
            self.idle_timeout = timeout;
            self
        }

        /// How often the background reaper runs; `None` disables it (call
        /// [`ClientPool::reap`] yourself). Default: every 10 s.
        pub fn reap_interval(mut self, interval: Option<Duration>) -> Self {
            self.reap_interval = interval;
            self
        }

        /// The clock idle time is measured with. Default: the channel pool's clock; tests pass
        /// `quanta::Clock::mock()` (the same one as the channel pool's).
        pub fn clock(mut self, clock: quanta::Clock) -> Self {
            self.clock = clock;
            self
        }

        /// Builds the pool. Needs a tokio runtime only when a reap interval is set.
        ///
        /// # Errors
        /// [`ConfigError`] for a zero or too large `max_clients`, a zero reap interval, or a
        /// reap interval without a tokio runtime.
        pub fn build(self) -> Result<Arc<ClientPool<C, F>>, ConfigError> {
            let capacity = match self.max_clients {
                Some(0) => return Err(ConfigError::Zero("max_clients")),
                Some(n) => Capacity::Bounded(n),
                None => Capacity::Unbounded,
            };
            if self.reap_interval == Some(Duration::ZERO) {
                return Err(ConfigError::Zero("reap_interval"));
            }
            let slots = ExclusiveSlots::new(capacity).map_err(|e| match e {
                ConfigError::TooLarge { value, max, .. } => ConfigError::TooLarge {
                    name: "max_clients",
                    value,
                    max,
                },
                other => other,
            })?;
            let runtime = match self.reap_interval {
                Some(_) => {
                    Some(Handle::try_current().map_err(|_| ConfigError::Missing("tokio runtime"))?)
                }
                None => None,
            };
            let base = self.clock.now();
            let staleness = match runtime {
                Some(_) => self.reap_interval.map_or(0, nanos),
                None => 0,
            };
            let shared = Arc::new(ClientShared {
                slots,
                channels: self.channels,
                factory: self.factory,
                clock: self.clock,
                base,
                idle_timeout: self.idle_timeout,
                recent: AtomicU64::new(0),
                staleness,
                counters: Counters::default(),
            });
            let reaper = runtime.zip(self.reap_interval).map(|(runtime, interval)| {
                let weak = Arc::downgrade(&shared);
                crate::pool::reap::spawn_reaper(&runtime, weak, interval, |shared| {
                    shared.reap(shared.clock.now());
                })
            });
            Ok(Arc::new(ClientPool { shared, reaper }))
        }
    }

    impl<C: ChannelConnector, F> fmt::Debug for ClientPoolBuilder<C, F> {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.debug_struct("ClientPoolBuilder")
                .field("max_clients", &self.max_clients)
                .field("idle_timeout", &self.idle_timeout)
                .field("reap_interval", &self.reap_interval)
                .finish_non_exhaustive()
        }
    }

    /// A pool of exclusive clients over a [`ChannelPool`]. See the
    /// [module documentation](super).
    ///
    /// ```
    /// use std::{convert::Infallible, time::Duration};
    /// use slotpool::channel::{ChannelConnector, ChannelPool};
    /// use slotpool::client::{ClientFactory, ClientPool};
    ///
    /// struct Lazy;
    /// impl ChannelConnector for Lazy {
    ///     type Channel = u64;
    ///     fn connect_lazy(&self, id: u64) -> u64 { id }
    /// }
    /// /// A client that remembers its channel (a tonic client stub in real use).
    /// struct Stub;
    /// impl ClientFactory<u64> for Stub {
    ///     type Client = (u64, u32);
    ///     type Error = Infallible;
    ///     async fn make(&self, channel: &u64) -> Result<(u64, u32), Infallible> { Ok((*channel, 0)) }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let (clock, mock) = quanta::Clock::mock();
    /// let channels = ChannelPool::builder(Lazy)
    ///     .idle_timeout(Duration::from_secs(60))
    ///     .reap_interval(None)
    ///     .clock(clock.clone())
    ///     .build()?;
    /// let clients = ClientPool::builder(channels.clone(), Stub)
    ///     .max_clients(Some(8))
    ///     .idle_timeout(Duration::from_secs(60))
    ///     .reap_interval(None)
    ///     .clock(clock.clone())
    ///     .build()?;
    /// let mut client = clients.acquire().await?;
    /// client.1 += 1; // DerefMut to the client
    /// drop(client); // back to the idle set
    /// assert_eq!(clients.acquire().await?.1, 1, "the same client is reused");
    ///
    /// // Nested reaping: an idle client frees its channel.
    /// mock.increment(Duration::from_secs(61));
    /// let now = clock.now();
    /// assert_eq!((clients.reap(now), channels.reap(now)), (1, 1));
    /// assert_eq!((clients.stats().clients, channels.stats().channels), (0, 0));
    /// # Ok(()) }
    /// ```
    pub struct ClientPool<C: ChannelConnector, F: ClientFactory<C::Channel>> {
        shared: Arc<ClientShared<C, F>>,
        /// The background reaper, aborted on drop.
        reaper: Option<tokio::task::AbortHandle>,
    }

    /// What an idle slot holds: the client and its share of a channel.
    struct Pooled<C: ChannelConnector, F: ClientFactory<C::Channel>> {
        client: F::Client,
        /// Held for the client's whole life (R1): dropping the client releases it.
        channel: ChannelGuard<C>,
        /// The client's own handle on the pool (see [`Anchor`]).
        anchor: Arc<CachePadded<Anchor<C, F>>>,
    }

    /// One per live client: what keeps the pool's shared state alive for the client's guard.
    ///
    /// A guard that held an `Arc` of [`ClientShared`] itself would clone and drop that one
    /// count on every checkout, from every thread: a cache line all callers write. The anchor
    /// is the client's own count (on its own line), which travels with the client: a checkout
    /// moves it out of the cell with the client (no count change), and a return clones it only
    /// for the duration of the check-in (the table's release touches the shared state after the
    /// client is back in the cell, where a concurrent `close` may drop it). Its line is written
    /// only by whoever holds the client.
    ///
    /// The anchors of idle clients make a cycle (shared state → cell → anchor → shared state);
    /// `close` (run when the last [`ClientPool`] handle drops) breaks it by dropping every idle
    /// client, and a guard returned to a closed pool drops its client.
    struct Anchor<C: ChannelConnector, F: ClientFactory<C::Channel>> {
        shared: Arc<ClientShared<C, F>>,
    }

    /// State shared by the pool handle, its guards and its reaper.
    struct ClientShared<C: ChannelConnector, F: ClientFactory<C::Channel>> {
        slots: ExclusiveSlots<Pooled<C, F>>,
        channels: Arc<ChannelPool<C>>,
        factory: F,
        clock: quanta::Clock,
        /// Time zero of the idle words' nanosecond stamps.
        base: quanta::Instant,
        idle_timeout: Duration,
        /// The time of the last reap pass (nanoseconds since `base`): a floor for release
        /// stamps, which read no clock (module docs, "Idle time").
        recent: AtomicU64,
        /// How stale a release stamp can be (nanoseconds): the background reap interval, or
        /// zero without a background reaper. Added to the idle timeout, so nothing is reaped
        /// early.
        staleness: u64,
        counters: Counters,
    }

    /// Counters of the cold paths (acquires are counted per slot by their holders).
    struct Counters {
        waits: Counter,
        created: Counter,
        make_failures: Counter,
        discards: Counter,
        reaps: Counter,
    }

    impl Default for Counters {
        fn default() -> Self {
            Self {
                waits: Counter::new(),
                created: Counter::new(),
                make_failures: Counter::new(),
                discards: Counter::new(),
                reaps: Counter::new(),
            }
        }
    }

    impl<C: ChannelConnector, F: ClientFactory<C::Channel>> ClientShared<C, F> {
        fn stamp(&self, at: quanta::Instant) -> u64 {
            nanos(at.saturating_duration_since(self.base)).min(MAX_STAMP)
        }

        /// A release stamp without a clock read: the later of the clock's cheap `recent()`
        /// (a mock clock's time, or quanta's upkeep time; before `base` without upkeep) and the
        /// last reap pass.
        #[inline]
        fn release_stamp(&self) -> u64 {
            let recent = self.recent.load(Ordering::Relaxed);
            self.stamp(self.clock.recent()).max(recent)
        }

        /// The instant a stamp stands for, at its latest (stamp plus staleness), capped at
        /// `now_ns`.
        fn idle_since(&self, stamp: u64, now_ns: u64) -> quanta::Instant {
            let latest = stamp.saturating_add(self.staleness).min(now_ns);
            self.base + Duration::from_nanos(latest)
        }

        /// Drops every idle client (a closed pool's pass), releasing their channels now.
        fn drain_closed(&self) {
            let now = self.clock.now();
            for (pooled, _) in self.slots.reap(|_| true) {
                drop(pooled.client);
                pooled.channel.release_last_used(now);
            }
        }

        /// Turns a checkout into a guard, building a client on a fresh channel share for a
        /// vacant slot (an idle client needs no await: the common case never builds the
        /// factory's future).
        ///
        /// Cancel-safety: the only await is the factory's `make`. Dropping the future there
        /// drops the half-built client's channel share and retires the slot (see
        /// [`Building`]); nothing leaks and no capacity stays taken.
        async fn finish(
            self: &Arc<Self>,
            checkout: Checkout<Pooled<C, F>>,
        ) -> Result<ClientGuard<C, F>, ClientError<F::Error>> {
            match checkout {
                Checkout::Idle { lease, value } => Ok(Self::guard(lease, value)),
                Checkout::Vacant { lease } => self.build(lease).await,
            }
        }

        #[inline]
        fn guard(lease: Lease, pooled: Pooled<C, F>) -> ClientGuard<C, F> {
            ClientGuard {
                lease: Some(lease),
                pooled: Some(pooled),
            }
        }

        /// Builds a client in a claimed slot. Cancel-safe as [`ClientShared::finish`].
        async fn build(
            self: &Arc<Self>,
            lease: Lease,
        ) -> Result<ClientGuard<C, F>, ClientError<F::Error>> {
            let building = Building {
                shared: self,
                lease: Some(lease),
            };
            // Declared after `building`, so dropped before it: the channel share goes first,
            // then the slot.
            let channel = ChannelPool::get(&self.channels);
            match self.factory.make(channel.channel()).await {
                Ok(client) => {
                    let lease = building.defuse();
                    self.slots.occupy(&lease);
                    self.counters.created.incr();
                    tracing::debug!(
                        slot = lease.index(),
                        channel = channel.id(),
                        "client created"
                    );
                    let anchor = Arc::new(CachePadded::new(Anchor {
                        shared: Arc::clone(self),
                    }));
                    Ok(Self::guard(
                        lease,
                        Pooled {
                            client,
                            channel,
                            anchor,
                        },
                    ))
                }
                Err(source) => {
                    drop(channel);
                    drop(building);
                    self.counters.make_failures.incr();
                    tracing::warn!(error = %source, "building a client failed");
                    Err(ClientError::Make { source })
                }
            }
        }

        /// Waits on the table's gate for a checkout (after a failed try), counting the wait.
        async fn wait(&self) -> Result<Checkout<Pooled<C, F>>, ClientError<F::Error>> {
            let mut waited = false;
            let checkout = {
                let mut wait = self.slots.checkout();
                poll_fn(|cx| {
                    let poll = Pin::new(&mut wait).poll(cx);
                    waited |= poll.is_pending();
                    poll
                })
                .await
            };
            let checkout = checkout.map_err(|_| ClientError::Closed)?;
            if waited {
                self.counters.waits.incr();
            }
            Ok(checkout)
        }

        fn reap(&self, now: quanta::Instant) -> usize {
            let now_ns = self.stamp(now);
            // Releases from now on are stamped at least `now`.
            self.recent.fetch_max(now_ns, Ordering::Relaxed);
            let timeout = nanos(self.idle_timeout).saturating_add(self.staleness);
            let reaped = self
                .slots
                .reap(|stamp| now_ns.saturating_sub(stamp) >= timeout);
            let count = reaped.len();
            for (pooled, stamp) in reaped {
                let Pooled {
                    client, channel, ..
                } = pooled;
                drop(client);
                // The channel was last used when the client was: nested reaping (module docs).
                channel.release_last_used(self.idle_since(stamp, now_ns));
            }
            if count > 0 {
                self.counters.reaps.add(count as u64);
                tracing::debug!(reaped = count, "reaped idle clients");
            }
            count
        }
    }

    /// A slot claimed for a client being built: retires the slot unless defused.
    struct Building<'a, C: ChannelConnector, F: ClientFactory<C::Channel>> {
        shared: &'a ClientShared<C, F>,
        lease: Option<Lease>,
    }

    impl<C: ChannelConnector, F: ClientFactory<C::Channel>> Building<'_, C, F> {
        fn defuse(mut self) -> Lease {
            match self.lease.take() {
                Some(lease) => lease,
                None => unreachable!("defused once"),
            }
        }
    }

    impl<C: ChannelConnector, F: ClientFactory<C::Channel>> Drop for Building<'_, C, F> {
        fn drop(&mut self) {
            if let Some(lease) = self.lease.take() {
                self.shared.slots.retire(lease);
            }
        }
    }

    impl<C: ChannelConnector, F: ClientFactory<C::Channel>> ClientPool<C, F> {
        /// Starts configuring a pool that builds clients with `factory` on channels from
        /// `channels`.
        pub fn builder(channels: Arc<ChannelPool<C>>, factory: F) -> ClientPoolBuilder<C, F> {
            let clock = channels.clock().clone();
            ClientPoolBuilder {
                channels,
                factory,
                max_clients: None,
                idle_timeout: Duration::from_secs(180),
                reap_interval: Some(Duration::from_secs(10)),
                clock,
            }
        }

        /// Returns an idle client (lowest slot first), or builds one on a channel from the
        /// channel pool; with `max_clients` reached, waits for one to come back (FIFO).
        ///
        /// Cancel-safety, per await: dropping the future while it **waits for capacity** takes
        /// nothing (a wake-up it had received passes to the next waiter); dropping it while
        /// **the factory builds** a client drops that client's channel share and frees the
        /// slot. Once it resolves, the guard owns the client.
        ///
        /// # Errors
        /// [`ClientError::Closed`] once the pool is closed, [`ClientError::Make`] if building
        /// failed (the slot and channel share are freed first).
        pub async fn acquire(self: &Arc<Self>) -> Result<ClientGuard<C, F>, ClientError<F::Error>> {
            let shared = &self.shared;
            // First a plain try, as the wait's first poll would make, without its machinery.
            let checkout = match shared.slots.try_checkout() {
                Ok(checkout) => checkout,
                Err(TryAcquireError::Closed) => return Err(ClientError::Closed),
                Err(_) => shared.wait().await?,
            };
            match checkout {
                Checkout::Idle { lease, value } => Ok(ClientShared::guard(lease, value)),
                Checkout::Vacant { lease } => shared.build(lease).await,
            }
        }

        /// Like [`ClientPool::acquire`] but never waits for capacity: returns an idle client,
        /// or builds one if `max_clients` allows (awaiting only the factory, with the same
        /// cancel-safety as `acquire`).
        ///
        /// # Errors
        /// [`ClientError::NoCapacity`] when `max_clients` clients are in use, otherwise as
        /// [`ClientPool::acquire`].
        pub async fn try_acquire(
            self: &Arc<Self>,
        ) -> Result<ClientGuard<C, F>, ClientError<F::Error>> {
            let checkout = self.shared.slots.try_checkout().map_err(|e| match e {
                TryAcquireError::Closed => ClientError::Closed,
                // The slot table has no breaker: anything else means no capacity.
                TryAcquireError::NoCapacity | TryAcquireError::Unavailable { .. } => {
                    ClientError::NoCapacity
                }
            })?;
            self.shared.finish(checkout).await
        }

        /// [`ClientPool::acquire`] with a deadline `timeout` from now (covering the wait and
        /// the build).
        ///
        /// # Errors
        /// [`ClientError::Timeout`] if none came in time (nothing is held; a client being built
        /// is dropped with its slot), otherwise as [`ClientPool::acquire`].
        pub async fn acquire_timeout(
            self: &Arc<Self>,
            timeout: Duration,
        ) -> Result<ClientGuard<C, F>, ClientError<F::Error>> {
            match tokio::time::timeout(timeout, self.acquire()).await {
                Ok(result) => result,
                Err(_) => Err(ClientError::Timeout { waited: timeout }),
            }
        }

        /// One reaper pass at `now` on the pool's clock: closes every client idle for at least
        /// the idle timeout (plus the background reap interval, if the pool runs one: see the
        /// [module documentation](super), "Idle time") and releases its channel share,
        /// recording the client's idle-since time as the channel's last use. Returns how many it
        /// closed. A client acquired concurrently is never closed.
        pub fn reap(&self, now: quanta::Instant) -> usize {
            self.shared.reap(now)
        }

        /// A snapshot of the pool's state and counters.
        pub fn stats(&self) -> ClientStats {
            let counts = self.shared.slots.counts();
            let c = &self.shared.counters;
            ClientStats {
                capacity: self.shared.slots.capacity(),
                clients: counts.live,
                idle: counts.idle,
                in_use: counts.live.saturating_sub(counts.idle),
                waiting: counts.table.waiting,
                acquires: counts.checkouts,
                waits: c.waits.get(),
                created: c.created.get(),
                make_failures: c.make_failures.get(),
                discards: c.discards.get(),
                reaps: c.reaps.get(),
            }
        }

        /// Closes the pool: waiters and later acquires get [`ClientError::Closed`], idle
        /// clients are dropped now, and clients in use are dropped when their guards are.
        pub fn close(&self) {
            self.shared.slots.close();
            self.shared.drain_closed();
        }

        /// The channel pool clients are built on.
        pub fn channels(&self) -> &Arc<ChannelPool<C>> {
            &self.shared.channels
        }
    }

    impl<C: ChannelConnector, F: ClientFactory<C::Channel>> Drop for ClientPool<C, F> {
        fn drop(&mut self) {
            self.close();
            if let Some(reaper) = &self.reaper {
                reaper.abort();
            }
        }
    }

    impl<C: ChannelConnector, F: ClientFactory<C::Channel>> fmt::Debug for ClientPool<C, F> {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.debug_struct("ClientPool")
                .field("stats", &self.stats())
                .finish_non_exhaustive()
        }
    }

    /// Exclusive use of one client. Owned (`'static`): it keeps the pool's shared state, not
    /// the pool handle, alive. Derefs to the client; on drop the client goes back to the idle
    /// set, or is dropped if the pool was closed.
    #[must_use = "dropping the guard returns the client at once"]
    pub struct ClientGuard<C: ChannelConnector, F: ClientFactory<C::Channel>> {
        /// `None` only once returned or discarded.
        lease: Option<Lease>,
        /// `None` only once returned or discarded.
        pooled: Option<Pooled<C, F>>,
    }

    impl<C: ChannelConnector, F: ClientFactory<C::Channel>> ClientGuard<C, F> {
        fn pooled(&self) -> &Pooled<C, F> {
            match &self.pooled {
                Some(pooled) => pooled,
                None => unreachable!("a client guard holds its client until dropped"),
            }
        }

        /// The id of the channel the client was built on.
        pub fn channel_id(&self) -> u64 {
            self.pooled().channel.id()
        }

        /// The channel the client was built on.
        pub fn channel(&self) -> &C::Channel {
            self.pooled().channel.channel()
        }

        /// The client's slot index (lower slots are reused first).
        pub fn slot(&self) -> usize {
            self.lease.as_ref().map_or(usize::MAX, Lease::index)
        }

        /// Drops the client (broken, say) instead of returning it: its slot and its channel
        /// share are freed, and the next acquire builds a new client.
        pub fn discard(mut self) {
            self.discard_now();
        }

        fn discard_now(&mut self) {
            if let (Some(lease), Some(pooled)) = (self.lease.take(), self.pooled.take()) {
                Self::discard_parts(lease, pooled);
            }
        }

        fn discard_parts(lease: Lease, pooled: Pooled<C, F>) {
            let anchor = Arc::clone(&pooled.anchor);
            drop(pooled);
            anchor.shared.slots.retire(lease);
            anchor.shared.counters.discards.incr();
        }
    }

    impl<C: ChannelConnector, F: ClientFactory<C::Channel>> Deref for ClientGuard<C, F> {
        type Target = F::Client;

        fn deref(&self) -> &F::Client {
            &self.pooled().client
        }
    }

    impl<C: ChannelConnector, F: ClientFactory<C::Channel>> DerefMut for ClientGuard<C, F> {
        fn deref_mut(&mut self) -> &mut F::Client {
            match &mut self.pooled {
                Some(pooled) => &mut pooled.client,
                None => unreachable!("a client guard holds its client until dropped"),
            }
        }
    }

    impl<C: ChannelConnector, F: ClientFactory<C::Channel>> Drop for ClientGuard<C, F> {
        fn drop(&mut self) {
            let (Some(lease), Some(pooled)) = (self.lease.take(), self.pooled.take()) else {
                return;
            };
            if pooled.anchor.shared.slots.is_closed() {
                Self::discard_parts(lease, pooled);
                return;
            }
            // Our own count for the check-in: once the client is back in its cell, a `close`
            // may drop it (and its anchor) while the table release still runs (see `Anchor`).
            let anchor = Arc::clone(&pooled.anchor);
            let shared = &anchor.shared;
            let stamp = shared.release_stamp();
            if !shared.slots.check_in(lease, pooled, stamp) {
                // Closed while we returned it: take it back out (module docs, Lifetimes).
                shared.drain_closed();
            }
        }
    }

    impl<C: ChannelConnector, F: ClientFactory<C::Channel>> fmt::Debug for ClientGuard<C, F> {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.debug_struct("ClientGuard")
                .field("slot", &self.slot())
                .field("channel_id", &self.pooled.as_ref().map(|p| p.channel.id()))
                .finish_non_exhaustive()
        }
    }
}
