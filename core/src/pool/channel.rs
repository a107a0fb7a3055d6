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
//! # How
//!
//! Channels live in the shared cells of `crate::protocol::shared`: an unbounded slot table whose
//! load is the number of clients on the channel, the truth about **capacity**, and beside each
//! slot a share word, the truth about **the channel's life**. A get is one reserve and one
//! register CAS; a reap takes only a channel whose word shows no holders and an old stamp, so
//! **a reap never takes a channel that was just acquired**. That module tells the protocol.
//!
//! # Idle time and nested reaping
//!
//! The stamp is in milliseconds of the pool's injected `Clock`, rounded up on release
//! and down on reap, so a channel is never reaped before it has been idle for the full
//! timeout. A client pool that reaps an idle client releases the client's channel with the
//! client's own idle-since time ([`ChannelGuard`] is held by the client for its whole life),
//! so after a client reap, a channel reap at the same instant closes the channels that only
//! idle clients were using: **nested reaping** needs no second wait.
//!
//! # Broken channels close at once
//!
//! A client pool that discards a broken client (its peer hung or failed: the tonic stream
//! connector discards the client of a stream retired by a timeout) releases the client's
//! channel as broken, which marks it: a marked channel is closed as soon as no client is on
//! it, by the release that leaves it empty, not after the idle timeout, so a connection to a
//! hung peer is not kept for reuse. Clients that still use it keep it (and new ones may
//! join it) until then. The mark is the share word's stamp set to its reserved maximum
//! (`MAX_STAMP`: the stamp only grows, so the mark stays until the channel closes); the
//! close is an ordinary reap pass that takes marked channels, so a channel joined meanwhile
//! is never closed under its new client.
//!
//! # Failure model
//!
//! [`ChannelConnector::connect_lazy`] is user code. A panic in it is caught where the pool
//! calls it and logged once; the slot it was opening is abandoned (reused by the next get),
//! the panic is counted ([`ChannelStats::panics`]), and the caller gets
//! [`ChannelError::Panicked`]. Nothing was sent: a retry is safe.
//!
//! # Lifetimes
//!
//! Guards hold an `Arc` of the pool's shared state (not of the [`ChannelPool`] handle), and the
//! background reaper a `Weak`; dropping the last handle stops the reaper even while guards
//! live.
//!
//! This module owns channel lifecycles; the share word is `crate::protocol::shared`'s and capacity
//! search the slot table's.
//!
use std::fmt;
use std::time::Duration;

use tokio::runtime::Handle;

use crate::error::{ConfigError, Reach};
use crate::panic::{catch, report, Panic};
use crate::pool::settings::{self, Names, Settings};
use crate::protocol::shared::{Joined, Left, Share, SharedSlots, MAX_HOLDERS, MAX_STAMP};
use crate::sync::{Arc, AtomicBool, Counter, Ordering};

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

/// Why [`ChannelPool::get`] returned no channel. Nothing was sent ([`ChannelError::reach`]):
/// a retry is safe.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ChannelError {
    /// The connector panicked creating a channel (caught and logged; its slot was freed).
    #[error("the channel connector {0}")]
    Panicked(Panic),
    /// The pool was closed ([`ChannelPool::close`]).
    #[error("channel pool closed")]
    Closed,
}

impl ChannelError {
    /// Always [`Reach::NotSent`]: getting a channel sends nothing.
    pub fn reach(&self) -> Reach {
        Reach::NotSent
    }
}

/// A snapshot of a [`ChannelPool`]'s state and counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
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
    /// Channels closed at once because a client left them broken (see the module docs,
    /// "Broken channels close at once"); not counted in `reaps`.
    pub broken: u64,
    /// Connector calls that panicked.
    pub panics: u64,
}

/// Builder for a [`ChannelPool`]; see [`ChannelPool::builder`].
pub struct ChannelPoolBuilder<C> {
    connector: C,
    max_clients_per_channel: usize,
    settings: Settings,
}

impl<C: ChannelConnector> ChannelPoolBuilder<C> {
    /// Clients one channel carries at most. Default: 16.
    pub fn max_clients_per_channel(mut self, max: usize) -> Self {
        self.max_clients_per_channel = max;
        self
    }

    settings::setters! {
        idle_timeout: "How long a channel may have no clients before the reaper closes it. \
                       Default: 180 s.";
        reap_interval: "How often the background reaper runs [`ChannelPool::reap`]. Default: \
                        every 10 s.";
        clock: "The clock idle time is measured with. Default: `Clock::new()`. Give \
                nested pools the same clock.";
    }

    /// Builds the pool. Needs a tokio runtime only for the background reaper (without one
    /// the default reaper is off).
    ///
    /// # Errors
    /// [`ConfigError`] for zero clients per channel, a zero idle timeout or reap interval,
    /// more than `MAX_HOLDERS` clients per channel, or a reap interval asked for without a
    /// tokio runtime.
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
        self.settings.check(Names::PLAIN)?;
        let runtime = Handle::try_current().ok();
        self.settings.reap_interval(runtime.as_ref())?;
        let clock = self.settings.clock_or(quanta::Clock::new);
        let base = clock.now();
        let shared = Arc::new(ChannelShared {
            slots: SharedSlots::new(max)?,
            connector: self.connector,
            timeout_ms: ceil_ms(self.settings.idle_timeout),
            clock,
            base,
            counters: Counters::default(),
            closed: AtomicBool::new(false),
        });
        let reaper = self
            .settings
            .start_reaper(runtime.as_ref(), &shared, |shared| {
                shared.reap(shared.clock.now());
            })?;
        Ok(Arc::new(ChannelPool { shared, reaper }))
    }
}

impl<C> fmt::Debug for ChannelPoolBuilder<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChannelPoolBuilder")
            .field("max_clients_per_channel", &self.max_clients_per_channel)
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

/// A pool of lazily connected channels shared by up to `max_clients_per_channel` clients
/// each. See the [module documentation](self).
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
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let (clock, mock) = slotpool::Clock::mock();
/// let pool = ChannelPool::builder(Lazy)
///     .max_clients_per_channel(2)
///     .idle_timeout(Duration::from_secs(60))
///     .reap_interval(None)
///     .clock(clock.clone())
///     .build()?;
/// let (a, b, c) = (pool.get()?, pool.get()?, pool.get()?);
/// assert_eq!((a.id(), b.id(), c.id()), (0, 0, 1)); // channel 0 is full, so 1 opens
/// drop((a, b, c));
/// mock.advance(Duration::from_secs(61));
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
    /// Set by [`ChannelPool::close`]: gets fail, and reap passes close every idle channel.
    closed: AtomicBool,
}

struct Counters {
    gets: Counter,
    opened: Counter,
    reaps: Counter,
    broken: Counter,
    panics: Counter,
}

impl Default for Counters {
    fn default() -> Self {
        Self {
            gets: Counter::new(),
            opened: Counter::new(),
            reaps: Counter::new(),
            broken: Counter::new(),
            panics: Counter::new(),
        }
    }
}

/// The stamp of a channel a client left broken (the largest: stamps only grow, so the mark
/// stays until the channel closes); every reap takes such a channel once no client is on it.
const BROKEN: u64 = MAX_STAMP;

fn ceil_ms(d: Duration) -> u64 {
    u64::try_from(d.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX)
}

impl<C: ChannelConnector> ChannelShared<C> {
    /// A release stamp: milliseconds since `base`, rounded **up** (never early), and never
    /// [`BROKEN`].
    fn stamp(&self, at: quanta::Instant) -> u64 {
        ceil_ms(at.saturating_duration_since(self.base)).min(BROKEN - 1)
    }

    /// After a release that left `left`: a channel marked broken with no client left is
    /// closed now.
    fn released(&self, left: Left) {
        if left.holders == 0 && left.stamp == BROKEN {
            self.reap_broken();
        }
    }

    /// Closes the channels marked broken (stamp [`BROKEN`]) that no client holds.
    fn reap_broken(&self) -> usize {
        let reaped = self.slots.reap(|stamp| stamp == BROKEN);
        let count = reaped.len();
        if count > 0 {
            self.counters.broken.add(count as u64);
            tracing::debug!(
                closed = count,
                "closed channels their last client left broken"
            );
        }
        crate::panic::drop_each_guarded(reaped);
        count
    }

    fn reap(&self, now: quanta::Instant) -> usize {
        // Rounded **down**: with the stamp rounded up, `now_ms - stamp_ms >= timeout_ms`
        // implies at least the timeout really passed.
        let now_ms =
            u64::try_from(now.saturating_duration_since(self.base).as_millis()).unwrap_or(u64::MAX);
        let timeout = self.timeout_ms;
        // Closed: every channel without clients goes, whatever its idle time.
        let closed = self.closed.load(Ordering::SeqCst);
        let reaped = self
            .slots
            .reap(|stamp| closed || stamp == BROKEN || now_ms.saturating_sub(stamp) >= timeout);
        let count = reaped.len();
        if count > 0 {
            self.counters.reaps.add(count as u64);
            tracing::debug!(reaped = count, "reaped idle channels");
        }
        // The channels close here, outside any slot operation; a channel's destructor is the
        // connector's code, so a panic in it is contained (the reaper carries on), one
        // channel at a time (a second panic while the first unwinds would abort).
        crate::panic::drop_each_guarded(reaped);
        count
    }
}

impl<C: ChannelConnector> ChannelPool<C> {
    /// Starts configuring a pool over `connector`.
    pub fn builder(connector: C) -> ChannelPoolBuilder<C> {
        ChannelPoolBuilder {
            connector,
            max_clients_per_channel: 16,
            settings: Settings::new(Duration::from_secs(180), Duration::from_secs(10)),
        }
    }

    /// Counts one client on the lowest-id channel with room, or on a new lazily connected
    /// channel when all are full. Never waits and takes no lock.
    ///
    /// # Errors
    /// [`ChannelError::Panicked`] if a new channel was needed and the connector panicked
    /// (its slot is freed; the next get tries again); [`ChannelError::Closed`] once the pool
    /// is closed.
    pub fn get(self: &Arc<Self>) -> Result<ChannelGuard<C>, ChannelError> {
        Self::get_shared(&self.shared)
    }

    fn get_shared(shared: &Arc<ChannelShared<C>>) -> Result<ChannelGuard<C>, ChannelError> {
        if shared.closed.load(Ordering::Acquire) {
            return Err(ChannelError::Closed);
        }
        let share = match shared.slots.join() {
            Joined::Shared(share) => share,
            Joined::Vacant(lease) => {
                let id = lease.index() as u64;
                let channel = match catch(|| shared.connector.connect_lazy(id)) {
                    Ok(channel) => channel,
                    Err(panic) => {
                        shared.slots.abandon(lease);
                        shared.counters.panics.incr();
                        report("channel connector", &panic);
                        return Err(ChannelError::Panicked(panic));
                    }
                };
                shared.counters.opened.incr();
                tracing::debug!(channel = id, "channel opened (lazy)");
                shared.slots.open(lease, channel)
            }
        };
        shared.counters.gets.incr();
        Ok(ChannelGuard {
            shared: Arc::clone(shared),
            share: Some(share),
        })
    }

    /// One reaper pass at `now` on the pool's clock: closes (drops) every channel that has
    /// had no clients for at least the idle timeout. Returns how many it closed. A channel
    /// taken concurrently is never closed.
    pub fn reap(&self, now: crate::Instant) -> usize {
        self.shared.reap(now.0)
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
            broken: c.broken.get(),
            panics: c.panics.get(),
        }
    }

    /// The clock the pool measures idle time with.
    pub fn clock(&self) -> crate::Clock {
        crate::Clock::from_quanta(self.shared.clock.clone())
    }

    /// Closes the pool: later gets fail with [`ChannelError::Closed`] (a get racing the
    /// close may still be served), channels without clients are closed now, and channels
    /// with clients by the first reap pass after their last client leaves (whatever the idle
    /// timeout). Idempotent.
    pub fn close(&self) {
        self.shared.closed.store(true, Ordering::SeqCst);
        self.shared.reap(self.shared.clock.now());
    }

    /// Whether [`ChannelPool::close`] was called.
    pub fn is_closed(&self) -> bool {
        self.shared.closed.load(Ordering::Acquire)
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
            let left = self.shared.slots.leave(share, stamp);
            self.shared.released(left);
        }
    }

    /// Releases the share of a client that was found broken, marking the channel: it closes
    /// as soon as no client is on it, now if this was the last (see the module docs, "Broken
    /// channels close at once").
    pub(crate) fn release_broken(mut self) {
        if let Some(share) = self.share.take() {
            let left = self.shared.slots.leave(share, BROKEN);
            self.shared.released(left);
        }
    }
}

impl<C: ChannelConnector> Drop for ChannelGuard<C> {
    fn drop(&mut self) {
        if let Some(share) = self.share.take() {
            let stamp = self.shared.stamp(self.shared.clock.now());
            let left = self.shared.slots.leave(share, stamp);
            self.shared.released(left);
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
