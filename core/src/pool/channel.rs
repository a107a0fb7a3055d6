//! `ChannelPool`: shared channels (connections), each carrying up to `max_clients_per_channel`
//! clients, lowest channel first, reaped when idle.
//!
//! # What it does
//!
//! A channel is one connection (an HTTP/2 connection under a gRPC `Channel`) that several
//! clients share by multiplexing. [`ChannelPool::get`] returns a [`ChannelGuard`] that counts
//! as one client on the **lowest-numbered channel with room**, or on a new channel when every
//! channel is full. Channels connect lazily ([`ChannelConnector::connect_lazy`]), so `get`
//! never blocks and never waits: the channel count is unbounded. Because low channels fill
//! first, high channels drain as load falls, and a channel with no clients for the idle
//! timeout is closed by [`ChannelPool::reap`].
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
//! # Idle time and nested reaping
//!
//! The stamp is in milliseconds of the pool's injected `quanta::Clock`, rounded up on release
//! and down on reap, so a channel is never reaped before it has been idle for the full
//! timeout. A client pool that reaps an idle client releases the client's channel with the
//! client's own idle-since time ([`ChannelGuard`] is held by the client for its whole life),
//! so after a client reap, a channel reap at the same instant closes the channels that only
//! idle clients were using: **nested reaping** needs no second wait.
//!
//! # Lifetimes
//!
//! Guards hold an `Arc` of the pool's shared state (not of the [`ChannelPool`] handle), and the
//! background reaper a `Weak`; dropping the last handle stops the reaper even while guards
//! live.
//!
//! This module owns channel lifecycles and the share word; capacity search is the slot table's.

use std::fmt;

use crate::error::ConfigError;
use crate::slots::{Capacity, Generation, Phase, Reservation, SlotTable, TableStats};
use crate::sync::{spin, trace_transition, Arc, AtomicU64, Ordering, Published};

#[cfg(not(slotpool_loom))]
pub use pool::*;

/// The most clients one channel can carry (the width of the share word's holder count).
pub const MAX_HOLDERS: u32 = (1 << 22) - 1;

/// The largest stamp the share word holds (40 bits; in milliseconds that is 34 years).
pub const MAX_STAMP: u64 = (1 << 40) - 1;

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

/// The shared-resource protocol the [`ChannelPool`] is built on: an unbounded slot table for
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
    pub fn leave(&self, share: Share<T>, stamp: u64) {
        let Share {
            reservation,
            incarnation,
        } = share;
        // Drop our reference first, so the reaper's is normally the last one.
        drop(incarnation);
        self.unregister(reservation.index(), stamp.min(MAX_STAMP));
        self.table.release(reservation);
    }

    fn unregister(&self, index: usize, stamp: u64) {
        self.table.with_slot(index, |slot| {
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
                    Ok(_) => return,
                    // Other holders register and leave concurrently (a reaper cannot win while
                    // we hold): retry with their word.
                    Err(actual) => current = ShareWord(actual),
                }
            }
        });
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

// ---------------------------------------------------------------------------------------------
// The pool
// ---------------------------------------------------------------------------------------------

#[cfg(not(slotpool_loom))]
mod pool {
    use std::fmt;
    use std::time::Duration;

    use tokio::runtime::Handle;

    use super::{Joined, Share, SharedSlots, MAX_HOLDERS, MAX_STAMP};
    use crate::error::ConfigError;
    use crate::sync::{Arc, Counter};

    /// Creates channels. Implement it over your transport; the `tonic` integration implements
    /// it over `Endpoint::connect_lazy`.
    pub trait ChannelConnector: Send + Sync + 'static {
        /// A cheap-to-clone handle to one connection.
        type Channel: Clone + Send + Sync + 'static;
        /// Creates a channel that connects lazily (never blocks), e.g. tonic
        /// `Endpoint::connect_lazy`. `id` is the channel's slot index (lower ids are older and
        /// busier), for logs and metrics.
        fn connect_lazy(&self, id: u64) -> Self::Channel;
    }

    /// A snapshot of a [`ChannelPool`]'s state and counters.
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
    pub struct ChannelStats {
        /// Open channels.
        pub channels: usize,
        /// Clients (guards) on them.
        pub clients: u64,
        /// `get` calls that returned a guard.
        pub gets: u64,
        /// Channels created.
        pub opened: u64,
        /// Channels closed by the reaper.
        pub reaps: u64,
    }

    /// Builder for a [`ChannelPool`]; see [`ChannelPool::builder`].
    pub struct ChannelPoolBuilder<C> {
        connector: C,
        max_clients_per_channel: usize,
        idle_timeout: Duration,
        reap_interval: Option<Duration>,
        clock: quanta::Clock,
    }

    impl<C: ChannelConnector> ChannelPoolBuilder<C> {
        /// Clients one channel carries at most. Default: 16.
        pub fn max_clients_per_channel(mut self, max: usize) -> Self {
            self.max_clients_per_channel = max;
            self
        }

        /// How long a channel may have no clients before the reaper closes it. Default: 180 s.
        pub fn idle_timeout(mut self, timeout: Duration) -> Self {
            self.idle_timeout = timeout;
            self
        }

        /// How often the background reaper runs; `None` disables it (call
        /// [`ChannelPool::reap`] yourself). Default: every 10 s.
        pub fn reap_interval(mut self, interval: Option<Duration>) -> Self {
            self.reap_interval = interval;
            self
        }

        /// The clock idle time is measured with. Default: `quanta::Clock::new()`; tests pass
        /// `quanta::Clock::mock()`. Give nested pools the same clock.
        pub fn clock(mut self, clock: quanta::Clock) -> Self {
            self.clock = clock;
            self
        }

        /// Builds the pool. Needs a tokio runtime only when a reap interval is set (the reaper
        /// task is spawned on it).
        ///
        /// # Errors
        /// [`ConfigError`] for zero clients per channel or a zero reap interval, more than
        /// [`MAX_HOLDERS`] clients per channel, or a reap interval without a tokio runtime.
        pub fn build(self) -> Result<Arc<ChannelPool<C>>, ConfigError> {
            if self.max_clients_per_channel == 0 {
                return Err(ConfigError::Zero("max_clients_per_channel"));
            }
            let max = u32::try_from(self.max_clients_per_channel)
                .ok()
                .filter(|&m| m <= MAX_HOLDERS)
                .ok_or(ConfigError::TooLarge {
                    name: "max_clients_per_channel",
                    value: self.max_clients_per_channel as u64,
                    max: MAX_HOLDERS.into(),
                })?;
            if self.reap_interval == Some(Duration::ZERO) {
                return Err(ConfigError::Zero("reap_interval"));
            }
            let runtime = match self.reap_interval {
                Some(_) => {
                    Some(Handle::try_current().map_err(|_| ConfigError::Missing("tokio runtime"))?)
                }
                None => None,
            };
            let base = self.clock.now();
            let shared = Arc::new(ChannelShared {
                slots: SharedSlots::new(max)?,
                connector: self.connector,
                timeout_ms: ceil_ms(self.idle_timeout),
                clock: self.clock,
                base,
                counters: Counters::default(),
            });
            let reaper = runtime.zip(self.reap_interval).map(|(runtime, interval)| {
                let weak = Arc::downgrade(&shared);
                crate::pool::reap::spawn_reaper(&runtime, weak, interval, |shared| {
                    shared.reap(shared.clock.now());
                })
            });
            Ok(Arc::new(ChannelPool { shared, reaper }))
        }
    }

    impl<C> fmt::Debug for ChannelPoolBuilder<C> {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.debug_struct("ChannelPoolBuilder")
                .field("max_clients_per_channel", &self.max_clients_per_channel)
                .field("idle_timeout", &self.idle_timeout)
                .field("reap_interval", &self.reap_interval)
                .finish_non_exhaustive()
        }
    }

    /// A pool of lazily connected channels shared by up to `max_clients_per_channel` clients
    /// each. See the [module documentation](super).
    ///
    /// ```
    /// use std::time::Duration;
    /// use slotpool::channel::{ChannelConnector, ChannelPool};
    ///
    /// /// A stand-in channel: tonic's `Channel` in real use.
    /// struct Lazy;
    /// impl ChannelConnector for Lazy {
    ///     type Channel = u64;
    ///     fn connect_lazy(&self, id: u64) -> u64 { id }
    /// }
    ///
    /// # fn main() -> Result<(), slotpool::ConfigError> {
    /// let (clock, mock) = quanta::Clock::mock();
    /// let pool = ChannelPool::builder(Lazy)
    ///     .max_clients_per_channel(2)
    ///     .idle_timeout(Duration::from_secs(60))
    ///     .reap_interval(None)
    ///     .clock(clock.clone())
    ///     .build()?;
    /// let (a, b, c) = (pool.get(), pool.get(), pool.get());
    /// assert_eq!((a.id(), b.id(), c.id()), (0, 0, 1)); // channel 0 is full, so 1 opens
    /// drop((a, b, c));
    /// mock.increment(Duration::from_secs(61));
    /// assert_eq!(pool.reap(clock.now()), 2);
    /// assert_eq!(pool.stats().channels, 0);
    /// # Ok(()) }
    /// ```
    pub struct ChannelPool<C: ChannelConnector> {
        shared: Arc<ChannelShared<C>>,
        /// The background reaper, aborted on drop.
        reaper: Option<tokio::task::AbortHandle>,
    }

    /// State shared by the pool handle, its guards and its reaper.
    struct ChannelShared<C: ChannelConnector> {
        slots: SharedSlots<C::Channel>,
        connector: C,
        clock: quanta::Clock,
        /// Time zero of the share words' millisecond stamps.
        base: quanta::Instant,
        /// The idle timeout in whole milliseconds, rounded up.
        timeout_ms: u64,
        counters: Counters,
    }

    struct Counters {
        gets: Counter,
        opened: Counter,
        reaps: Counter,
    }

    impl Default for Counters {
        fn default() -> Self {
            Self {
                gets: Counter::new(),
                opened: Counter::new(),
                reaps: Counter::new(),
            }
        }
    }

    fn ceil_ms(d: Duration) -> u64 {
        u64::try_from(d.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX)
    }

    impl<C: ChannelConnector> ChannelShared<C> {
        /// A release stamp: milliseconds since `base`, rounded **up** (never early).
        fn stamp(&self, at: quanta::Instant) -> u64 {
            ceil_ms(at.saturating_duration_since(self.base)).min(MAX_STAMP)
        }

        fn reap(&self, now: quanta::Instant) -> usize {
            // Rounded **down**: with the stamp rounded up, `now_ms - stamp_ms >= timeout_ms`
            // implies at least the timeout really passed.
            let now_ms = u64::try_from(now.saturating_duration_since(self.base).as_millis())
                .unwrap_or(u64::MAX);
            let timeout = self.timeout_ms;
            let reaped = self
                .slots
                .reap(|stamp| now_ms.saturating_sub(stamp) >= timeout);
            let count = reaped.len();
            if count > 0 {
                self.counters.reaps.add(count as u64);
                tracing::debug!(reaped = count, "reaped idle channels");
            }
            // The channels close here, outside any slot operation.
            drop(reaped);
            count
        }
    }

    impl<C: ChannelConnector> ChannelPool<C> {
        /// Starts configuring a pool over `connector`.
        pub fn builder(connector: C) -> ChannelPoolBuilder<C> {
            ChannelPoolBuilder {
                connector,
                max_clients_per_channel: 16,
                idle_timeout: Duration::from_secs(180),
                reap_interval: Some(Duration::from_secs(10)),
                clock: quanta::Clock::new(),
            }
        }

        /// Counts one client on the lowest-id channel with room, or on a new lazily connected
        /// channel when all are full. Never waits and takes no lock.
        pub fn get(self: &Arc<Self>) -> ChannelGuard<C> {
            Self::get_shared(&self.shared)
        }

        fn get_shared(shared: &Arc<ChannelShared<C>>) -> ChannelGuard<C> {
            let share = match shared.slots.join() {
                Joined::Shared(share) => share,
                Joined::Vacant(lease) => {
                    let id = lease.index() as u64;
                    let channel = shared.connector.connect_lazy(id);
                    shared.counters.opened.incr();
                    tracing::debug!(channel = id, "channel opened (lazy)");
                    shared.slots.open(lease, channel)
                }
            };
            shared.counters.gets.incr();
            ChannelGuard {
                shared: Arc::clone(shared),
                share: Some(share),
            }
        }

        /// One reaper pass at `now` on the pool's clock: closes (drops) every channel that has
        /// had no clients for at least the idle timeout. Returns how many it closed. A channel
        /// taken concurrently is never closed.
        pub fn reap(&self, now: quanta::Instant) -> usize {
            self.shared.reap(now)
        }

        /// A snapshot of the pool's state and counters.
        pub fn stats(&self) -> ChannelStats {
            let counts = self.shared.slots.counts();
            let c = &self.shared.counters;
            ChannelStats {
                channels: counts.open,
                clients: counts.holders,
                gets: c.gets.get(),
                opened: c.opened.get(),
                reaps: c.reaps.get(),
            }
        }

        /// The clock the pool measures idle time with.
        pub fn clock(&self) -> &quanta::Clock {
            &self.shared.clock
        }
    }

    impl<C: ChannelConnector> Drop for ChannelPool<C> {
        fn drop(&mut self) {
            if let Some(reaper) = &self.reaper {
                reaper.abort();
            }
        }
    }

    impl<C: ChannelConnector> fmt::Debug for ChannelPool<C> {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.debug_struct("ChannelPool")
                .field("stats", &self.stats())
                .finish_non_exhaustive()
        }
    }

    /// One client's share of a channel. Owned (`'static`): it keeps the pool's shared state,
    /// not the pool handle, alive. Dropping it releases the client count; the release time
    /// becomes the channel's last use.
    #[must_use = "dropping the guard releases its share of the channel at once"]
    pub struct ChannelGuard<C: ChannelConnector> {
        shared: Arc<ChannelShared<C>>,
        /// `None` only once released.
        share: Option<Share<C::Channel>>,
    }

    impl<C: ChannelConnector> ChannelGuard<C> {
        /// The channel.
        pub fn channel(&self) -> &C::Channel {
            match &self.share {
                Some(share) => share.value(),
                None => unreachable!("a channel guard holds its share until dropped"),
            }
        }

        /// The channel's id (its slot index; lower is older and busier).
        pub fn id(&self) -> u64 {
            self.share.as_ref().map_or(u64::MAX, |s| s.index() as u64)
        }

        /// Releases the share recording `last_used` as its last use (the client pool passes an
        /// idle client's idle-since time, so nested reaping needs no second wait).
        pub(crate) fn release_last_used(mut self, last_used: quanta::Instant) {
            if let Some(share) = self.share.take() {
                let stamp = self.shared.stamp(last_used);
                self.shared.slots.leave(share, stamp);
            }
        }
    }

    impl<C: ChannelConnector> Drop for ChannelGuard<C> {
        fn drop(&mut self) {
            if let Some(share) = self.share.take() {
                let stamp = self.shared.stamp(self.shared.clock.now());
                self.shared.slots.leave(share, stamp);
            }
        }
    }

    impl<C: ChannelConnector> fmt::Debug for ChannelGuard<C> {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.debug_struct("ChannelGuard")
                .field("id", &self.id())
                .finish_non_exhaustive()
        }
    }
}
