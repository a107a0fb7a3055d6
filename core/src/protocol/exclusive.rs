//! The exclusive cell: slots whose load is 0 or 1, each holding one value (a client, a
//! connection) that exactly one holder owns at a time, reused lowest index first and reaped
//! through a Dekker handshake on an idle word.
//!
//! [`crate::client::ClientPool`] stands on this protocol; it imports no pool.
//!
//! # How: the slot word owns the client
//!
//! The words below say "client" for the value, as in [`crate::client::ClientPool`], the pool
//! this protocol was built for. Clients live in a [`SlotTable`] with `max_load = 1` (bounded
//! by `max_clients`, or unbounded). **The slot word is the truth about who owns a client**: load 1 while a guard
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
//!
//! This module owns the cells and the idle word; capacity search and waiting are the slot
//! table's and the gate's.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::error::{Closed, ConfigError, TryAcquireError};
use crate::gate::WaitState;
use crate::slots::{Capacity, Generation, Phase, Reservation, SlotTable, SlotWord, TableStats};
use crate::sync::{dekker_fence, spin, trace_transition, AtomicU64, Mutex, Ordering, UnsafeCell};

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

/// Future of [`ExclusiveSlots::checkout`]. `!Unpin`: its place in the queue lives inside it.
#[must_use = "futures do nothing unless polled"]
pub struct CheckoutWait<'a, T> {
    slots: &'a ExclusiveSlots<T>,
    /// Structurally pinned: never moved out of the future. It leaves the queue (passing an
    /// unused wake-up on) when it drops.
    wait: WaitState<'a>,
}

impl<T> Future for CheckoutWait<'_, T> {
    type Output = Result<Checkout<T>, Closed>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // SAFETY: `wait` is structurally pinned (re-pinned at once, never moved out).
        let this = unsafe { self.get_unchecked_mut() };
        let slots = this.slots;
        // SAFETY: as above.
        let wait = unsafe { Pin::new_unchecked(&mut this.wait) };
        wait.poll_until(slots.table.gate(), cx, || slots.attempt())
    }
}

impl<T> fmt::Debug for CheckoutWait<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CheckoutWait")
            .field("wait", &self.wait)
            .finish()
    }
}
