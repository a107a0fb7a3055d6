//! The shared cell: slots whose load counts the holders of one shared value (a channel that
//! several clients multiplex), taken lowest index first, each with a share word that is the
//! truth about the value's life, so a reaper never takes a value that was just joined.
//!
//! [`crate::channel::ChannelPool`] stands on this protocol; it imports no pool.
//!
//! # How: two words per channel
//!
//! Channels live in an unbounded [`SlotTable`] whose load is the number of clients on the
//! channel (`max_load = max_clients_per_channel`). The table finds the lowest slot with room
//! (one bitmap load and one CAS) or claims the lowest Empty slot for a new channel; it is the
//! truth about **capacity**. Next to each slot sits a [`ShareCell`] whose one `AtomicU64`, the
//! share word, is the truth about **the channel's life**:
//!
//! ```text
//!  63                         24 23                    2 1   0
//! +-----------------------------+-----------------------+-----+
//! |   stamp (last release, ms)  |   holders (clients)   |state|    state: Vacant | Open | Reaping
//! +-----------------------------+-----------------------+-----+
//! ```
//!
//! * **get** = reserve a unit in the table, then *register* in the share word: a CAS that
//!   raises `holders` while the state is Open. A claimer (the table gave it an Empty slot)
//!   instead creates the channel, publishes it in the cell, stores `Open, holders 1` and
//!   marks the slot Ready. A joiner that finds the cell not Open while its slot is still
//!   Starting waits (spins) for the claimer's publication, which follows at once
//!   (`connect_lazy` never blocks); one that finds it Reaping on a Ready or Draining slot lost
//!   to the reaper: it gives its unit back and looks again.
//! * **release** = one CAS that lowers `holders` and raises the stamp to the release time
//!   (so the stamp is the channel's last use), then the table release.
//! * **reap** = one CAS from the exact word `Open, holders 0, stamp old` to Reaping. A register
//!   or a release changes the word, so the reaper's CAS fails: **a reap never takes a channel
//!   that was just acquired**. Having won, the reaper alone can retire the slot, so it reads
//!   the slot's generation, unpublishes the channel, drains the slot (Empty now, or when the
//!   joiners that lost give their units back), and finally CASes Reaping → Vacant (unless a
//!   new claimer has already opened the slot again).
//!
//! INVARIANT: `holders > 0` implies the slot's table load is at least `holders` (register
//! follows the reserve, unregister precedes the release), so a slot with clients is never
//! Empty; the state is Reaping only between a reaper's winning CAS and its final one.
//!
//! All share-word accesses are `SeqCst` to agree with the table's words; nothing here is on a
//! hot path (a channel is taken once per client creation). The loom models in
//! `slotpool-loom-tests/tests/channel_client.rs` check the reap/register race on
//! [`SharedSlots`], the protocol type the pool is built on.
//!
//! This module owns the share word and the cells; capacity search is the slot table's.

use std::fmt;

use crate::error::ConfigError;
use crate::protocol::slots::{Capacity, Generation, Phase, Reservation, SlotTable, TableStats};
use crate::sync::{spin, trace_transition, Arc, AtomicU64, Ordering, Published};

/// The most clients one channel can carry (the width of the share word's holder count).
pub const MAX_HOLDERS: u32 = (1 << 22) - 1;

/// The largest stamp the share word holds (40 bits; in milliseconds that is 34 years).
pub const MAX_STAMP: u64 = (1 << 40) - 1;

/// What a [`SharedSlots::leave`] left behind: the holders still registered on the resource
/// and the stamp recorded (the latest of its holders' last uses).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Left {
    /// Holders still registered.
    pub holders: u32,
    /// The stamp now recorded.
    pub stamp: u64,
}

// ---------------------------------------------------------------------------------------------
// The share word
// ---------------------------------------------------------------------------------------------

/// A shared resource's life, as the share word sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShareState {
    /// No resource published (never opened, or reaped).
    Vacant,
    /// Published; holders may register.
    Open,
    /// A reaper won the resource; nobody may register.
    Reaping,
}

/// `stamp | holders | state` in one `u64` (see the [module documentation](self)).
#[derive(Clone, Copy, PartialEq, Eq)]
struct ShareWord(u64);

impl ShareWord {
    const STATE_MASK: u64 = 0b11;
    const HOLDERS_SHIFT: u32 = 2;
    const HOLDERS_MASK: u64 = MAX_HOLDERS as u64;
    const STAMP_SHIFT: u32 = 24;

    const VACANT: ShareWord = ShareWord(0);

    const fn state(self) -> ShareState {
        match self.0 & Self::STATE_MASK {
            0 => ShareState::Vacant,
            1 => ShareState::Open,
            _ => ShareState::Reaping,
        }
    }

    const fn holders(self) -> u32 {
        ((self.0 >> Self::HOLDERS_SHIFT) & Self::HOLDERS_MASK) as u32
    }

    const fn stamp(self) -> u64 {
        self.0 >> Self::STAMP_SHIFT
    }

    const fn open(holders: u32, stamp: u64) -> Self {
        ShareWord((stamp << Self::STAMP_SHIFT) | ((holders as u64) << Self::HOLDERS_SHIFT) | 1)
    }

    /// The same stamp, no holders, Reaping.
    const fn reaping(self) -> Self {
        ShareWord((self.stamp() << Self::STAMP_SHIFT) | 2)
    }
}

impl fmt::Debug for ShareWord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ShareWord")
            .field("state", &self.state())
            .field("holders", &self.holders())
            .field("stamp", &self.stamp())
            .finish()
    }
}

// ---------------------------------------------------------------------------------------------
// The protocol: shared slots
// ---------------------------------------------------------------------------------------------

/// One incarnation of a shared resource: the value and the slot generation it lives in.
#[derive(Debug)]
pub struct Incarnation<T> {
    generation: Generation,
    value: T,
}

impl<T> Incarnation<T> {
    /// The resource.
    pub fn value(&self) -> &T {
        &self.value
    }
}

/// Per-slot data of a [`SharedSlots`] table.
pub struct ShareCell<T> {
    /// The share word. INVARIANT: `holders <= ` the slot's table load; state Open exactly
    /// while `value` holds the incarnation of the slot's current generation.
    word: AtomicU64,
    /// The open resource, published for lock-free readers. Written only by the claimer (before
    /// it stores Open) and by the reaper that won the word (before it drains the slot).
    value: Published<Option<Arc<Incarnation<T>>>>,
}

impl<T> Default for ShareCell<T> {
    fn default() -> Self {
        Self {
            word: AtomicU64::new(ShareWord::VACANT.0),
            value: Published::new(None),
        }
    }
}

impl<T> fmt::Debug for ShareCell<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ShareCell")
            .field("word", &ShareWord(self.word.load(Ordering::SeqCst)))
            .finish_non_exhaustive()
    }
}

/// A claimed Empty slot: the holder must create the resource and [`SharedSlots::open`] it
/// (or [`SharedSlots::abandon`] the slot).
#[derive(Debug)]
#[must_use = "a vacant lease holds a claimed slot until opened or abandoned"]
pub struct VacantLease {
    reservation: Reservation,
}

impl VacantLease {
    /// The slot's index (the resource's id).
    pub fn index(&self) -> usize {
        self.reservation.index()
    }
}

/// One holder's registration on an open resource. Hand it back with [`SharedSlots::leave`].
#[must_use = "a share counts as a holder until it is left"]
pub struct Share<T> {
    reservation: Reservation,
    incarnation: Arc<Incarnation<T>>,
}

impl<T> Share<T> {
    /// The slot's index (the resource's id).
    pub fn index(&self) -> usize {
        self.reservation.index()
    }

    /// The shared resource.
    pub fn value(&self) -> &T {
        &self.incarnation.value
    }
}

impl<T> fmt::Debug for Share<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Share")
            .field("reservation", &self.reservation)
            .finish_non_exhaustive()
    }
}

/// What [`SharedSlots::join`] found.
#[derive(Debug)]
pub enum Joined<T> {
    /// Registered on an open resource with room.
    Shared(Share<T>),
    /// No resource had room: the caller claimed an Empty slot and must open one there.
    Vacant(VacantLease),
}

/// Counts of a [`SharedSlots`] table (a snapshot; scans every slot).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ShareCounts {
    /// Open resources.
    pub open: usize,
    /// Holders registered on them.
    pub holders: u64,
    /// The slot table's own counts.
    pub table: TableStats,
}

/// The shared-resource protocol the [`ChannelPool`](crate::channel::ChannelPool) is built on: an unbounded slot table for
/// capacity plus a share word per slot for the resource's life. See the
/// [module documentation](self). Executor-free, so loom checks it directly.
pub struct SharedSlots<T> {
    /// Load = holders reserved (registered or about to be). Unbounded, never closed.
    table: SlotTable<ShareCell<T>>,
}

/// How many times a joiner that lost a slot to the reaper, or waits for a claimer's
/// publication, spins before it yields the thread.
const SPINS_BEFORE_YIELD: u32 = 64;

impl<T> SharedSlots<T> {
    /// An empty table whose resources carry at most `max_holders` holders each.
    ///
    /// # Errors
    /// [`ConfigError::Zero`] for zero, [`ConfigError::TooLarge`] above [`MAX_HOLDERS`].
    pub fn new(max_holders: u32) -> Result<Self, ConfigError> {
        if max_holders > MAX_HOLDERS {
            return Err(ConfigError::TooLarge {
                name: "max_holders",
                value: max_holders.into(),
                max: MAX_HOLDERS.into(),
            });
        }
        Ok(Self {
            table: SlotTable::new(Capacity::Unbounded, max_holders).map_err(|e| match e {
                ConfigError::Zero(_) => ConfigError::Zero("max_holders"),
                other => other,
            })?,
        })
    }

    /// Registers on the lowest-index open resource with room, or claims the lowest Empty slot
    /// for a new one. Never waits for capacity (the table is unbounded); lock-free except for
    /// the brief spin while a claimer publishes a resource it just claimed, or while a reaper
    /// that won a slot drains it.
    pub fn join(&self) -> Joined<T> {
        let mut spins = 0u32;
        loop {
            match self.table.try_reserve() {
                Ok(reservation) if reservation.claimed() => {
                    return Joined::Vacant(VacantLease { reservation });
                }
                Ok(reservation) => {
                    if let Some(share) = self.register(reservation) {
                        return Joined::Shared(share);
                    }
                }
                // INVARIANT: the table is unbounded and never closed, so `try_reserve` always
                // succeeds; this arm exists only to keep `join` total.
                Err(_) => {}
            }
            backoff(&mut spins);
        }
    }

    /// The joiner's half: raise `holders` on the share word of the slot we hold a unit of.
    /// Returns `None` (with the unit given back) if a reaper won the slot first.
    fn register(&self, reservation: Reservation) -> Option<Share<T>> {
        // `Some(published)` once registered; `None` if a reaper won the slot first.
        let registered = self
            .table
            .with_slot(reservation.index(), |slot| {
                let cell = slot.data();
                let mut spins = 0u32;
                let mut current = ShareWord(cell.word.load(Ordering::SeqCst));
                loop {
                    match current.state() {
                        ShareState::Open => {
                            debug_assert!(current.holders() < MAX_HOLDERS);
                            let next = ShareWord::open(current.holders() + 1, current.stamp());
                            match cell.word.compare_exchange(
                                current.0,
                                next.0,
                                Ordering::SeqCst,
                                Ordering::SeqCst,
                            ) {
                                Ok(_) => break,
                                // Another holder registered or left, or a reaper won: look
                                // again at what is there now.
                                Err(actual) => current = ShareWord(actual),
                            }
                        }
                        ShareState::Vacant | ShareState::Reaping => {
                            let word = slot.word();
                            if word.generation() == reservation.generation()
                                && word.phase() == Phase::Starting
                            {
                                // Our claimer has not published yet (the Reaping we may see is
                                // the previous incarnation's reaper finishing). It will at once.
                                backoff(&mut spins);
                                current = ShareWord(cell.word.load(Ordering::SeqCst));
                                continue;
                            }
                            // A reaper won this incarnation: it is closing, not for us.
                            trace_transition!(
                                "channel: lost slot {} to the reaper",
                                reservation.index()
                            );
                            return None;
                        }
                    }
                }
                // Open implies the value of this generation is published (the claimer stores
                // the value first), and our registration keeps it there.
                Some(cell.value.with(|value| value.clone()))
            })
            .flatten();
        match registered {
            Some(Some(incarnation)) if incarnation.generation == reservation.generation() => {
                Some(Share {
                    reservation,
                    incarnation,
                })
            }
            Some(_) => {
                // Registered, but the publication does not match: impossible by the invariant
                // above; undo rather than hand out the wrong resource.
                debug_assert!(false, "open share word without its incarnation");
                self.unregister(reservation.index(), 0);
                self.table.release(reservation);
                None
            }
            None => {
                self.table.release(reservation);
                None
            }
        }
    }

    fn word(&self, index: usize) -> Option<ShareWord> {
        self.table.with_slot(index, |slot| {
            ShareWord(slot.data().word.load(Ordering::SeqCst))
        })
    }

    /// The claimer's half: publish `value` in the claimed slot, open it with the claimer as its
    /// first holder, and mark the slot Ready.
    pub fn open(&self, lease: VacantLease, value: T) -> Share<T> {
        let reservation = lease.reservation;
        let incarnation = Arc::new(Incarnation {
            generation: reservation.generation(),
            value,
        });
        self.table.with_slot(reservation.index(), |slot| {
            let cell = slot.data();
            cell.value.store(Arc::new(Some(Arc::clone(&incarnation))));
            // A reaper of the previous incarnation may still be about to CAS Reaping → Vacant;
            // an RMW (not a plain store) puts our word after its read or makes its CAS fail,
            // either way we win.
            let before = ShareWord(cell.word.swap(ShareWord::open(1, 0).0, Ordering::SeqCst));
            debug_assert!(
                before.state() != ShareState::Open,
                "opened an open slot: {before:?}"
            );
        });
        self.table
            .mark_ready(reservation.index(), reservation.generation());
        trace_transition!("channel: opened {}", reservation.index());
        Share {
            reservation,
            incarnation,
        }
    }

    /// Gives up a claimed slot without opening it (the slot returns to Empty).
    pub fn abandon(&self, lease: VacantLease) {
        let reservation = lease.reservation;
        self.table
            .begin_drain(reservation.index(), reservation.generation());
        self.table.release(reservation);
    }

    /// Unregisters one holder, recording `stamp` (the caller's time of last use; clamped to
    /// [`MAX_STAMP`]) if it is later than the one recorded, then gives the table unit back.
    /// Returns what this leave left behind: the holders still registered and the stamp now
    /// recorded (a snapshot: others may join right after).
    pub fn leave(&self, share: Share<T>, stamp: u64) -> Left {
        let Share {
            reservation,
            incarnation,
        } = share;
        // Drop our reference first, so the reaper's is normally the last one.
        drop(incarnation);
        let left = self.unregister(reservation.index(), stamp.min(MAX_STAMP));
        self.table.release(reservation);
        left
    }

    fn unregister(&self, index: usize, stamp: u64) -> Left {
        let left = self.table.with_slot(index, |slot| {
            let cell = slot.data();
            let mut current = ShareWord(cell.word.load(Ordering::SeqCst));
            loop {
                debug_assert!(
                    current.state() == ShareState::Open && current.holders() > 0,
                    "leave without a registration: {current:?}"
                );
                let next = ShareWord::open(
                    current.holders().saturating_sub(1),
                    current.stamp().max(stamp),
                );
                match cell.word.compare_exchange(
                    current.0,
                    next.0,
                    Ordering::SeqCst,
                    Ordering::SeqCst,
                ) {
                    Ok(_) => {
                        return Left {
                            holders: next.holders(),
                            stamp: next.stamp(),
                        }
                    }
                    // Other holders register and leave concurrently (a reaper cannot win while
                    // we hold): retry with their word.
                    Err(actual) => current = ShareWord(actual),
                }
            }
        });
        // No such slot: a leave without a registration (a bug the debug assertion names).
        left.unwrap_or_default()
    }

    /// One reaper pass: retires every open resource with no holders whose stamp `expired`
    /// accepts, returning each retired slot's index and resource (to be dropped by the caller,
    /// outside any slot operation). A register or release racing the pass wins: the reaper's
    /// CAS expects the exact idle word.
    pub fn reap(&self, mut expired: impl FnMut(u64) -> bool) -> Vec<(usize, Arc<Incarnation<T>>)> {
        let mut reaped = Vec::new();
        self.table.for_each_slot(|index, slot| {
            let cell = slot.data();
            let current = ShareWord(cell.word.load(Ordering::SeqCst));
            if current.state() != ShareState::Open
                || current.holders() != 0
                || !expired(current.stamp())
            {
                return;
            }
            let reaping = current.reaping();
            if cell
                .word
                .compare_exchange(current.0, reaping.0, Ordering::SeqCst, Ordering::SeqCst)
                .is_err()
            {
                // Someone registered or left since we looked: the channel is in use.
                return;
            }
            // INVARIANT: only the reaper that won the share word retires the slot (joiners that
            // lose give their units back without draining), so the generation is stable now.
            let generation = slot.word().generation();
            let value = cell.value.with(|value| value.clone());
            cell.value.store(Arc::new(None));
            self.table.begin_drain(index, generation);
            // A claimer of the next incarnation may already have opened: then leave its word.
            let _ = cell.word.compare_exchange(
                reaping.0,
                ShareWord::VACANT.0,
                Ordering::SeqCst,
                Ordering::SeqCst,
            );
            trace_transition!("channel: reaped {}", index);
            if let Some(value) = value {
                reaped.push((index, value));
            }
        });
        reaped
    }

    /// Counts open resources and holders (scans every slot; for statistics).
    pub fn counts(&self) -> ShareCounts {
        let mut counts = ShareCounts {
            table: self.table.stats(),
            ..ShareCounts::default()
        };
        self.table.for_each_slot(|_, slot| {
            let word = ShareWord(slot.data().word.load(Ordering::SeqCst));
            if word.state() == ShareState::Open {
                counts.open += 1;
                counts.holders += u64::from(word.holders());
            }
        });
        counts
    }

    /// The share word's state and holder count of slot `index` (for tests and models).
    pub fn state(&self, index: usize) -> Option<(ShareState, u32)> {
        self.word(index).map(|w| (w.state(), w.holders()))
    }
}

impl<T> fmt::Debug for SharedSlots<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedSlots")
            .field("counts", &self.counts())
            .finish()
    }
}

/// Spins a little, then yields the thread (under loom every spin yields).
fn backoff(spins: &mut u32) {
    *spins += 1;
    if *spins < SPINS_BEFORE_YIELD {
        spin();
    } else {
        #[cfg(not(slotpool_loom))]
        std::thread::yield_now();
        #[cfg(slotpool_loom)]
        spin();
    }
}
