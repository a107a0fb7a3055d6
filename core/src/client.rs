//! `ClientPool`: exclusive clients over shared channels, reused lowest slot first, optionally
//! bounded, reaped when idle.
//!
//! # What it does
//!
//! A client (a gRPC client stub with its per-client state) is used by one caller at a time.
//! [`ClientPool::acquire`] hands out an idle client if there is one, else builds a new one
//! with the user's [`ClientFactory`] on a channel from the [`ChannelPool`]
//! (lowest channel with room). The [`ClientGuard`] derefs to the client and returns it to the
//! idle set on drop, idle since that moment; [`ClientGuard::discard`] drops a broken client
//! instead. An optional `max_clients` bounds live clients; callers wait for one (FIFO,
//! cancel-safe), or use [`ClientPool::try_acquire`] / [`ClientPool::acquire_timeout`]. Each
//! client holds its [`ChannelGuard`] for its whole life, so dropping a client (discarded or
//! reaped) releases its channel.
//!
//! # How: a slot per client, and a cell word that says who owns it
//!
//! Clients live in a [`SlotTable`] with `max_load = 1` (bounded by `max_clients`, or
//! unbounded): a client slot's load is 1 while someone owns it and 0 while it is idle. The
//! table finds the **lowest-index** idle client (one bitmap load, one CAS) or claims the
//! lowest Empty slot for a new one; since new clients take the lowest channel with room,
//! low client slots sit on low channels, and reusing low slots first lets high slots (and
//! their channels) go idle and be reaped. Waiting for a slot is the table's gate: a release
//! with nobody waiting takes no lock.
//!
//! Next to each slot, an [`ExclusiveCell`] holds the idle client and one `AtomicU64`, the
//! **cell word** (`stamp << 2 | state`), that says who owns the client:
//!
//! ```text
//!            claim (table: Empty → Starting)       occupy (built)
//!   Empty ------------------------------------------------------> Busy
//!     ^  ^                                                        |  ^
//!     |  |  retire (discard, make failed, close)                 |  | acquire: CAS Idle → Busy
//!     |  +-------------------------------------------------------+  |  (after the table join)
//!     |                                      check_in: store Idle(now) then table release
//!     |                                                           v  |
//!     +------ reaper: take client, Empty, drain slot ---- Reaping <-- Idle(stamp)
//!                                                     CAS Idle(stamp) → Reaping
//! ```
//!
//! * **acquire** joins an idle slot in the table (load 0 → 1), then CASes the cell word
//!   `Idle → Busy`. The table's CAS makes it the only acquirer; the cell CAS orders it against
//!   the **reaper**, the only other party that moves an Idle word. If the reaper won, the
//!   acquirer gives its unit back and looks again (the slot is being emptied).
//! * **reap** CASes the exact word `Idle(stamp)` (stamp old enough) to Reaping. An acquirer's
//!   CAS or a check-in changes the word, so the reaper's CAS fails: **a reap never takes a
//!   client that was just acquired**, and an acquirer never gets a client being reaped.
//! * **release** (guard drop) stores the client in the cell, stores `Idle(now)`, then releases
//!   the table unit, in that order, so whoever joins the slot next finds the client there.
//!
//! The idle client sits in a `Mutex<Option<_>>`, which is **never contended**: it is locked
//! only by the party the cell word names as owner (the checker-in while Busy, the acquirer
//! that won `Idle → Busy`, the reaper that won `Idle → Reaping`), and the word moves to a new
//! owner only after the previous one unlocked. So the lock is one uncontended CAS and one
//! store, kept for the memory-safety it gives without `unsafe`. (Safe Rust needs *some* cell
//! here; an `UnsafeCell` would save two uncontended atomics per acquire/release cycle.)
//!
//! INVARIANT: the cell word is Idle exactly while the cell holds the client of the slot's
//! current incarnation and the slot is Ready; Busy exactly while a guard (or a builder that
//! has occupied the slot) owns it; Reaping only inside a reaper pass. All cell-word accesses
//! are `SeqCst` to agree with the table's words (the Dekker argument of [`crate::gate`] needs
//! the table's, not ours, but mixing orders here would buy nothing measurable).
//!
//! The loom models in `slotpool-loom-tests/tests/channel_client.rs` check [`ExclusiveSlots`],
//! the protocol type the pool is built on: a reap racing an acquire, and two callers racing
//! for one client.
//!
//! # Idle time
//!
//! A check-in stamps the cell with nanoseconds of the pool's injected `quanta::Clock` (one
//! clock read per release; the mock clock in tests). [`ClientPool::reap`] closes clients idle
//! for at least the idle timeout and releases their channels **with the client's idle-since
//! time**, so a [`ChannelPool::reap`] at the same instant closes the channels they leave idle.
//!
//! # Failure model
//!
//! Acquiring never sends a request: every [`ClientError`] is [`Reach::NotSent`] and safe to
//! retry. A failed [`ClientFactory::make`] frees the slot (and the channel share) before the
//! error is returned.
//!
//! # Lifetimes
//!
//! Guards hold an `Arc` of the pool's shared state, not of the [`ClientPool`] handle: dropping
//! the last handle closes the pool (waiters get [`ClientError::Closed`], idle clients are
//! dropped, clients returned later are dropped too) and stops the reaper task even while
//! guards live.
//!
//! This module owns client lifecycles and the cell word; capacity search and waiting are the
//! slot table's and the gate's, channels are [`crate::channel`]'s.
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
use crate::slots::{Capacity, Generation, Reservation, SlotTable, TableStats};
use crate::sync::{spin, trace_transition, AtomicU64, Mutex, Ordering};

#[cfg(not(slotpool_loom))]
pub use pool::*;

/// The largest stamp a cell word holds (62 bits).
pub const MAX_STAMP: u64 = (1 << 62) - 1;

/// How many times an acquirer that lost a slot to the reaper looks again before it waits (a
/// waiter is woken when the reaper's drain frees the slot).
const LOST_RETRIES: usize = 64;

// ---------------------------------------------------------------------------------------------
// The cell word
// ---------------------------------------------------------------------------------------------

/// Who owns an exclusive slot's client, as the cell word says. See the
/// [module documentation](self).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CellState {
    /// No client (never built, being built, or gone).
    Empty,
    /// A guard owns the client.
    Busy,
    /// The client sits in the cell, idle since the stamp.
    Idle,
    /// A reaper won the idle client and is removing it.
    Reaping,
}

#[derive(Clone, Copy, PartialEq, Eq)]
struct CellWord(u64);

impl CellWord {
    const EMPTY: CellWord = CellWord(0);
    const BUSY: CellWord = CellWord(1);

    const fn idle(stamp: u64) -> Self {
        CellWord((stamp << 2) | 2)
    }

    /// The same stamp, Reaping.
    const fn reaping(self) -> Self {
        CellWord((self.0 & !0b11) | 3)
    }

    const fn state(self) -> CellState {
        match self.0 & 0b11 {
            0 => CellState::Empty,
            1 => CellState::Busy,
            2 => CellState::Idle,
            _ => CellState::Reaping,
        }
    }

    const fn stamp(self) -> u64 {
        self.0 >> 2
    }
}

impl fmt::Debug for CellWord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CellWord")
            .field("state", &self.state())
            .field("stamp", &self.stamp())
            .finish()
    }
}

// ---------------------------------------------------------------------------------------------
// The protocol: exclusive slots
// ---------------------------------------------------------------------------------------------

/// Per-slot data of an [`ExclusiveSlots`] table: the idle value and the word that says who
/// owns it.
pub struct ExclusiveCell<T> {
    /// The cell word. INVARIANT: see the [module documentation](self).
    word: AtomicU64,
    /// The idle value. Locked only by the owner the cell word names, so never contended.
    value: Mutex<Option<T>>,
}

impl<T> Default for ExclusiveCell<T> {
    fn default() -> Self {
        Self {
            word: AtomicU64::new(CellWord::EMPTY.0),
            value: Mutex::new(None),
        }
    }
}

impl<T> fmt::Debug for ExclusiveCell<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExclusiveCell")
            .field("word", &CellWord(self.word.load(Ordering::SeqCst)))
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
    /// The slot table's own counts.
    pub table: TableStats,
}

/// The exclusive-resource protocol the [`ClientPool`] is built on: a slot table with
/// `max_load = 1` plus a cell word per slot. See the [module documentation](self).
/// Executor-free, so loom checks it directly.
///
/// [`ClientPool`]: crate::client::ClientPool
pub struct ExclusiveSlots<T> {
    table: SlotTable<ExclusiveCell<T>>,
}

impl<T> ExclusiveSlots<T> {
    /// An empty table of `capacity` slots.
    ///
    /// # Errors
    /// As [`SlotTable::new`] (zero or too many slots).
    pub fn new(capacity: Capacity) -> Result<Self, ConfigError> {
        Ok(Self {
            table: SlotTable::new(capacity, 1)?,
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

    /// One try: join or claim in the table, then win the cell. A cell lost to a reaper is
    /// given back and the table searched again, a bounded number of times.
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
            return Some(Checkout::Vacant { lease });
        }
        let taken = self
            .table
            .with_slot(reservation.index(), |slot| {
                let cell = slot.data();
                let mut current = CellWord(cell.word.load(Ordering::SeqCst));
                loop {
                    if current.state() != CellState::Idle {
                        // A reaper won this client (Reaping, or Empty once it took it): the
                        // slot is about to be drained.
                        return None;
                    }
                    match cell.word.compare_exchange(
                        current.0,
                        CellWord::BUSY.0,
                        Ordering::SeqCst,
                        Ordering::SeqCst,
                    ) {
                        Ok(_) => break,
                        // Only a reaper moves an Idle word we hold the unit of: re-check.
                        Err(actual) => current = CellWord(actual),
                    }
                }
                // We own the cell now (Busy): the lock is uncontended.
                Some(cell.value.lock().take())
            })
            .flatten();
        match taken {
            Some(Some(value)) => {
                trace_transition!("client: reuse {}", lease.index());
                Some(Checkout::Idle { lease, value })
            }
            // INVARIANT says Idle implies a value; if it were ever missing, the caller builds
            // a fresh one in this (Busy, Ready) slot rather than losing it.
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
    /// it (Busy) and the slot is Ready.
    pub fn occupy(&self, lease: &Lease) {
        self.table.with_slot(lease.index(), |slot| {
            slot.data().word.store(CellWord::BUSY.0, Ordering::SeqCst);
        });
        // `false` if the slot was Ready already (a rebuilt value): nothing to do then.
        let _ = self.table.mark_ready(lease.index(), lease.generation());
    }

    /// Returns `value` to the slot, idle since `stamp` (clamped to [`MAX_STAMP`]), and
    /// releases the lease. The value is in the cell before the slot shows room.
    pub fn check_in(&self, lease: Lease, value: T, stamp: u64) {
        self.table.with_slot(lease.index(), |slot| {
            let cell = slot.data();
            debug_assert_eq!(
                CellWord(cell.word.load(Ordering::SeqCst)).state(),
                CellState::Busy
            );
            // We own the cell (Busy): the lock is uncontended.
            *cell.value.lock() = Some(value);
            cell.word
                .store(CellWord::idle(stamp.min(MAX_STAMP)).0, Ordering::SeqCst);
        });
        trace_transition!("client: check in {}", lease.index());
        self.table.release(lease.reservation);
    }

    /// Gives the slot up without a value (discarded, failed to build, pool closed): the slot
    /// drains and returns to Empty.
    pub fn retire(&self, lease: Lease) {
        self.table.with_slot(lease.index(), |slot| {
            slot.data().word.store(CellWord::EMPTY.0, Ordering::SeqCst);
        });
        self.table.begin_drain(lease.index(), lease.generation());
        self.table.release(lease.reservation);
    }

    /// One reaper pass: removes every idle value whose stamp `expired` accepts and returns
    /// each with its stamp (for the caller to drop outside any slot operation). An acquire
    /// racing the pass wins: the reaper's CAS expects the exact idle word.
    pub fn reap(&self, mut expired: impl FnMut(u64) -> bool) -> Vec<(T, u64)> {
        let mut reaped = Vec::new();
        self.table.for_each_slot(|index, slot| {
            let cell = slot.data();
            let current = CellWord(cell.word.load(Ordering::SeqCst));
            if current.state() != CellState::Idle || !expired(current.stamp()) {
                return;
            }
            if cell
                .word
                .compare_exchange(
                    current.0,
                    current.reaping().0,
                    Ordering::SeqCst,
                    Ordering::SeqCst,
                )
                .is_err()
            {
                // An acquirer took it (or a check-in restamped it) since we looked.
                return;
            }
            // We own the cell now (Reaping): the lock is uncontended.
            let value = cell.value.lock().take();
            // INVARIANT: only the winner of the cell word retires an idle client's slot
            // (acquirers that lose give their unit back without draining), so the generation
            // is stable here.
            let generation = slot.word().generation();
            cell.word.store(CellWord::EMPTY.0, Ordering::SeqCst);
            self.table.begin_drain(index, generation);
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
    }

    /// Whether [`ExclusiveSlots::close`] was called.
    pub fn is_closed(&self) -> bool {
        self.table.is_closed()
    }

    /// `Some(slots)` for a bounded table.
    pub fn capacity(&self) -> Option<usize> {
        self.table.capacity()
    }

    /// Counts live and idle values (scans every slot; for statistics).
    pub fn counts(&self) -> ExclusiveCounts {
        let mut counts = ExclusiveCounts {
            table: self.table.stats(),
            ..ExclusiveCounts::default()
        };
        self.table.for_each_slot(|_, slot| {
            let word = CellWord(slot.data().word.load(Ordering::SeqCst));
            match word.state() {
                CellState::Idle => {
                    counts.idle += 1;
                    counts.live += 1;
                }
                CellState::Busy => counts.live += 1,
                // A slot being built is live too (its cell says Empty until occupied).
                CellState::Empty if slot.word().phase() == crate::slots::Phase::Starting => {
                    counts.live += 1;
                }
                CellState::Empty | CellState::Reaping => {}
            }
        });
        counts
    }

    /// The cell state of slot `index` (for tests and models).
    pub fn state(&self, index: usize) -> Option<CellState> {
        self.table.with_slot(index, |slot| {
            CellWord(slot.data().word.load(Ordering::SeqCst)).state()
        })
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
    use crate::reap::nanos;
    use crate::slots::Capacity;
    use crate::sync::{Arc, Counter};

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
            let shared = Arc::new(ClientShared {
                slots,
                channels: self.channels,
                factory: self.factory,
                clock: self.clock,
                base,
                idle_timeout: self.idle_timeout,
                counters: Counters::default(),
            });
            let reaper = runtime.zip(self.reap_interval).map(|(runtime, interval)| {
                let weak = Arc::downgrade(&shared);
                crate::reap::spawn_reaper(&runtime, weak, interval, |shared| {
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
    struct Pooled<C: ChannelConnector, Cl> {
        client: Cl,
        /// Held for the client's whole life (R1): dropping the client releases it.
        channel: ChannelGuard<C>,
    }

    /// State shared by the pool handle, its guards and its reaper.
    struct ClientShared<C: ChannelConnector, F: ClientFactory<C::Channel>> {
        slots: ExclusiveSlots<Pooled<C, F::Client>>,
        channels: Arc<ChannelPool<C>>,
        factory: F,
        clock: quanta::Clock,
        /// Time zero of the cells' nanosecond stamps.
        base: quanta::Instant,
        idle_timeout: Duration,
        counters: Counters,
    }

    struct Counters {
        acquires: Counter,
        waits: Counter,
        created: Counter,
        make_failures: Counter,
        discards: Counter,
        reaps: Counter,
    }

    impl Default for Counters {
        fn default() -> Self {
            Self {
                acquires: Counter::new(),
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

        /// Turns a checkout into a guard, building a client on a fresh channel share for a
        /// vacant slot.
        ///
        /// Cancel-safety: the only await is the factory's `make`. Dropping the future there
        /// drops the half-built client's channel share and retires the slot (see
        /// [`Building`]); nothing leaks and no capacity stays taken.
        async fn finish(
            self: &Arc<Self>,
            checkout: Checkout<Pooled<C, F::Client>>,
        ) -> Result<ClientGuard<C, F>, ClientError<F::Error>> {
            let (lease, pooled) = match checkout {
                Checkout::Idle { lease, value } => (lease, value),
                Checkout::Vacant { lease } => {
                    let building = Building {
                        shared: self,
                        lease: Some(lease),
                    };
                    // Declared after `building`, so dropped before it: the channel share goes
                    // first, then the slot.
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
                            (lease, Pooled { client, channel })
                        }
                        Err(source) => {
                            drop(channel);
                            drop(building);
                            self.counters.make_failures.incr();
                            tracing::warn!(error = %source, "building a client failed");
                            return Err(ClientError::Make { source });
                        }
                    }
                }
            };
            self.counters.acquires.incr();
            Ok(ClientGuard {
                shared: Arc::clone(self),
                lease: Some(lease),
                pooled: Some(pooled),
            })
        }

        fn reap(&self, now: quanta::Instant) -> usize {
            let now_ns = self.stamp(now);
            let timeout = nanos(self.idle_timeout);
            let reaped = self
                .slots
                .reap(|stamp| now_ns.saturating_sub(stamp) >= timeout);
            let count = reaped.len();
            for (pooled, stamp) in reaped {
                let Pooled { client, channel } = pooled;
                drop(client);
                // The channel was last used when the client was: nested reaping (module docs).
                channel.release_last_used(self.base + Duration::from_nanos(stamp));
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
            let mut waited = false;
            let checkout = {
                let mut wait = shared.slots.checkout();
                poll_fn(|cx| {
                    let poll = Pin::new(&mut wait).poll(cx);
                    waited |= poll.is_pending();
                    poll
                })
                .await
            };
            let checkout = checkout.map_err(|_| ClientError::Closed)?;
            if waited {
                shared.counters.waits.incr();
            }
            shared.finish(checkout).await
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
        /// the idle timeout and releases its channel share, recording the client's idle-since
        /// time as the channel's last use. Returns how many it closed. A client acquired
        /// concurrently is never closed.
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
                acquires: c.acquires.get(),
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
            let now = self.shared.clock.now();
            for (pooled, _) in self.shared.slots.reap(|_| true) {
                drop(pooled.client);
                pooled.channel.release_last_used(now);
            }
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
    /// set (idle since then), or is dropped if the pool was closed.
    #[must_use = "dropping the guard returns the client at once"]
    pub struct ClientGuard<C: ChannelConnector, F: ClientFactory<C::Channel>> {
        shared: Arc<ClientShared<C, F>>,
        /// `None` only once returned or discarded.
        lease: Option<Lease>,
        /// `None` only once returned or discarded.
        pooled: Option<Pooled<C, F::Client>>,
    }

    impl<C: ChannelConnector, F: ClientFactory<C::Channel>> ClientGuard<C, F> {
        fn pooled(&self) -> &Pooled<C, F::Client> {
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
                drop(pooled);
                self.shared.slots.retire(lease);
                self.shared.counters.discards.incr();
            }
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
            if self.shared.slots.is_closed() {
                self.discard_now();
                return;
            }
            if let (Some(lease), Some(pooled)) = (self.lease.take(), self.pooled.take()) {
                let stamp = self.shared.stamp(self.shared.clock.now());
                self.shared.slots.check_in(lease, pooled, stamp);
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
