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
//! # How
//!
//! Clients live in the exclusive cells of `crate::protocol::exclusive`: a slot table with
//! `max_load = 1` whose **slot word is the truth about who owns a client**, reused lowest
//! index first (new clients take the lowest channel with room, so low client slots sit on low
//! channels and high ones, with their channels, go idle and are reaped). Checking out an idle
//! client is the table's CAS plus one load on the same cache line; a check-in is one store
//! and the table's release. No lock, and no lock to wait on when nobody waits. That module
//! tells the protocol, including the reaper's handshake with acquirers.
//!
//! # Idle time
//!
//! A returning guard stamps the idle word with the pool's **recent time**: the later of the
//! injected clock's cheap `recent()` reading (exact for `Clock::mock()`, the time of
//! quanta's upkeep thread if the application runs one) and the time of the pool's last reap
//! pass. Neither is a clock read. [`ClientPool::reap`] closes clients idle for at least the
//! idle timeout **plus the stamp's staleness bound** (the background reap interval), so a
//! client is never reaped early under a background reaper. A pool without one (manual `reap`
//! calls) has nothing to bound that staleness, so its returns read the clock instead: a
//! client's idle time counts from its release, on a real clock as on a mock one. Reaped clients release their channels with
//! that idle-since time, so a [`ChannelPool::reap`] at the same instant closes the channels
//! they leave idle (nested reaping).
//!
//! # Failure model
//!
//! Acquiring never sends a request: every [`ClientError`] is [`Reach::NotSent`] and safe to
//! retry. A failed [`ClientFactory::make`] frees the slot (and the channel share) before the
//! error is returned. The factory and the channel connector are user code: a panic in either
//! (in `make` itself or while its future is polled, or in `connect_lazy`) is caught where the
//! pool calls it, logged once, and becomes [`ClientError::Panicked`] or
//! [`ClientError::Channel`] for the caller that ran it; the slot and the channel share are
//! freed as for a failed build, and the pool carries on.
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
//! This module owns client lifecycles; the cells and the idle word are
//! `crate::protocol::exclusive`'s, capacity search and waiting the slot table's and the gate's,
//! channels [`crate::channel`]'s.
//!
//! [`ChannelPool`]: crate::channel::ChannelPool
//! [`ChannelPool::reap`]: crate::channel::ChannelPool::reap
//! [`ChannelGuard`]: crate::channel::ChannelGuard
//! [`Reach::NotSent`]: crate::Reach::NotSent

use std::fmt;
use std::future::{poll_fn, Future};
use std::mem::ManuallyDrop;
use std::ops::{ControlFlow, Deref, DerefMut};
use std::panic::Location;
use std::pin::pin;
use std::time::Duration;

use tokio::runtime::Handle;

use crate::channel::{ChannelConnector, ChannelError, ChannelGuard, ChannelPool};
use crate::error::{ConfigError, Reach, TryAcquireError};
use crate::panic::{catch, report, CatchUnwind, Panic};
use crate::pool::first::FirstPoll;
use crate::pool::hold::HoldWatch;
use crate::pool::managed::time::RecentClock;
use crate::pool::reap::nanos;
use crate::pool::settings::{self, Names, Settings};
use crate::pool::wait::{WaitClock, WaitTotal};
use crate::protocol::exclusive::{CheckIn, Checkout, Ending, ExclusiveSlots, Lease, Unpinned};
use crate::protocol::slots::Capacity;
use crate::sync::{Arc, CachePadded, Counter};

/// Builds a client on a channel.
pub trait ClientFactory<Ch>: Send + Sync + 'static {
    /// The client (exclusive to one caller at a time).
    type Client: Send + 'static;
    /// Why a client could not be built.
    type Error: std::error::Error + Send + Sync + 'static;
    /// Builds a client on `channel`. No lock is held while this runs, and other callers
    /// are not blocked by it.
    fn make(&self, channel: &Ch) -> impl Future<Output = Result<Self::Client, Self::Error>> + Send;
}

/// Why an acquire returned no client. Nothing was sent in any case
/// ([`ClientError::reach`] is always [`Reach::NotSent`]): a retry is safe.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
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
    /// The factory panicked building a client (the panic was caught and logged); its slot and
    /// channel share were freed.
    #[error("the client factory {0}")]
    Panicked(Panic),
    /// No channel to build the client on (the channel connector panicked); the slot was
    /// freed.
    #[error("no channel for a new client: {0}")]
    Channel(#[source] ChannelError),
}

impl<E: std::error::Error + 'static> ClientError<E> {
    /// Always [`Reach::NotSent`]: acquiring a client sends nothing.
    pub fn reach(&self) -> Reach {
        Reach::NotSent
    }
}

/// A snapshot of a [`ClientPool`]'s state and counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
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
    /// Acquires that had to wait (including those that timed out or were dropped while
    /// waiting).
    pub waits: u64,
    /// The time those acquires spent waiting, in all, on the pool's clock (a caller that
    /// gives up counts too). Only a caller that waits reads the clock. With the `metrics`
    /// feature each wait is also a sample of the histogram `slotpool_client_wait_seconds`,
    /// labelled with the pool's [`name`](ClientPoolBuilder::name).
    pub wait_time: Duration,
    /// Clients built.
    pub created: u64,
    /// Builds that failed (the factory's errors and panics, and channels that could not be
    /// opened).
    pub make_failures: u64,
    /// Clients discarded by their guard (or returned to a closed pool).
    pub discards: u64,
    /// Clients closed by the reaper.
    pub reaps: u64,
    /// Checkouts reported while held past the
    /// [`held_too_long`](ClientPoolBuilder::held_too_long) threshold (0 with it off).
    pub held_too_long: u64,
    /// How long clients were held, in all, while the held-too-long detection is on (zero with
    /// it off). With the `metrics` feature each hold is also a sample of the histogram
    /// `slotpool_client_hold_seconds`.
    pub hold_time: Duration,
}

/// Builder for a [`ClientPool`]; see [`ClientPool::builder`].
pub struct ClientPoolBuilder<C: ChannelConnector, F> {
    channels: Arc<ChannelPool<C>>,
    factory: F,
    max_clients: Option<usize>,
    held_too_long: Option<Duration>,
    settings: Settings,
}

impl<C: ChannelConnector, F: ClientFactory<C::Channel>> ClientPoolBuilder<C, F> {
    /// Bounds live clients; acquires wait when all are in use. Default: `None`
    /// (unbounded).
    pub fn max_clients(mut self, max: Option<usize>) -> Self {
        self.max_clients = max;
        self
    }

    /// Reports a checkout held longer than `threshold`, as the managed pool's
    /// [`held_too_long`](crate::managed::PoolBuilder::held_too_long) does: once while held (a
    /// `tracing` warning with the call site of its `acquire` and its age, counted in
    /// [`ClientStats::held_too_long`]), again when it comes back; hold times add up in
    /// [`ClientStats::hold_time`]. The background reaper looks every quarter threshold (or
    /// its reap interval, if shorter), and [`ClientPool::reap`] looks too. Off (the default),
    /// a checkout and a return read no clock for it.
    pub fn held_too_long(mut self, threshold: Option<Duration>) -> Self {
        self.held_too_long = threshold;
        self
    }

    settings::setters! {
        idle_timeout: "How long a client may sit idle before the reaper closes it. Default: \
                       180 s.";
        reap_interval: "How often the background reaper runs [`ClientPool::reap`]. Default: \
                        every 10 s.";
        clock: "The clock idle time and waits ([`ClientStats::wait_time`]) are measured with. \
                Default: the channel pool's clock (give nested pools the same clock).";
        name: "The pool's name: the `pool` label of its wait histogram, \
               `slotpool_client_wait_seconds` (one sample per acquire that waited for a client, \
               the waits [`ClientStats::wait_time`] adds up).";
    }

    /// Builds the pool. Needs a tokio runtime only for the background reaper (without one
    /// the default reaper is off).
    ///
    /// # Errors
    /// [`ConfigError`] for a zero or too large `max_clients`, a zero idle timeout or reap
    /// interval, or a reap interval asked for without a tokio runtime.
    pub fn build(self) -> Result<Arc<ClientPool<C, F>>, ConfigError> {
        if self.held_too_long.is_some_and(|d| d.is_zero()) {
            return Err(ConfigError::Zero("held_too_long"));
        }
        let capacity = match self.max_clients {
            Some(0) => return Err(ConfigError::Zero("max_clients")),
            Some(n) => Capacity::Bounded(n),
            None => Capacity::Unbounded,
        };
        self.settings.check(Names::PLAIN)?;
        let slots = ExclusiveSlots::new(capacity).map_err(|e| match e {
            ConfigError::TooLarge { value, max, .. } => ConfigError::TooLarge {
                name: "max_clients",
                value,
                max,
            },
            other => other,
        })?;
        let runtime = Handle::try_current().ok();
        let hold = self.held_too_long.map(|threshold| {
            HoldWatch::new(
                threshold,
                "client",
                "slotpool_client_hold_seconds",
                self.settings.name.clone(),
            )
        });
        let reap_interval = self.settings.reap_interval(runtime.as_ref())?;
        let clock = self
            .settings
            .clock_or(|| self.channels.clock().quanta().clone());
        let time = RecentClock::new(clock, reap_interval);
        let return_work = time.staleness == 0 || hold.is_some();
        let shared = Arc::new(ClientShared {
            slots,
            channels: self.channels,
            factory: self.factory,
            time,
            idle_timeout: self.settings.idle_timeout,
            max_clients: self.max_clients,
            counters: Counters::new(self.settings.name.clone()),
            hold,
            return_work,
        });
        let scan = shared.hold.as_ref().map(HoldWatch::scan_every);
        let reaper =
            self.settings
                .start_reaper_within(runtime.as_ref(), &shared, scan, |shared| {
                    shared.reap(shared.time.clock.now());
                })?;
        Ok(Arc::new(ClientPool { shared, reaper }))
    }
}

impl<C: ChannelConnector, F> fmt::Debug for ClientPoolBuilder<C, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientPoolBuilder")
            .field("max_clients", &self.max_clients)
            .field("held_too_long", &self.held_too_long)
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

/// A pool of exclusive clients over a [`ChannelPool`]. See the
/// [module documentation](self).
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
/// let (clock, mock) = slotpool::Clock::mock();
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
/// mock.advance(Duration::from_secs(61));
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

/// What an idle slot holds: one pointer to the client with its channel share and anchor.
/// Checkouts and returns move this through the cell, the acquire future and the guard; with
/// the parts inline each move copied them all (five words and more, and a client inline, a
/// tonic client of a few hundred bytes, whole).
type Pooled<C, F> = Box<PooledClient<C, F>>;

/// A live client and what it holds (see [`Pooled`]).
struct PooledClient<C: ChannelConnector, F: ClientFactory<C::Channel>> {
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
/// moves it out of the cell with the client (no count change), and a return takes no count
/// either: the table's release touches the shared state after the client is back in the
/// cell, where a concurrent `close` may drop it, so the return marks its slot `settling`
/// until its last access and a close waits for the mark before it drops a client
/// ([`crate::protocol::exclusive`], "Returning without a reference count"). Its line is written only by
/// whoever holds the client.
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
    /// The clock, the stamps' time zero and the recent time returns are stamped with
    /// (module docs, "Idle time").
    time: RecentClock,
    idle_timeout: Duration,
    /// `max_clients` as built, for the stats (the table's own bound drops to 0 at close).
    max_clients: Option<usize>,
    counters: Counters,
    /// Held-too-long detection ([`ClientPoolBuilder::held_too_long`]), if on.
    hold: Option<HoldWatch>,
    /// Whether a return does more than take a stale stamp: it reads the clock (no background
    /// reaper, so stamps are exact) or ends a watched hold.
    return_work: bool,
}

/// Counters of the cold paths (acquires are counted per slot by their holders).
struct Counters {
    waits: Counter,
    /// The time acquires waited, and the `slotpool_client_wait_seconds` histogram.
    wait_nanos: WaitTotal,
    created: Counter,
    make_failures: Counter,
    discards: Counter,
    reaps: Counter,
}

impl Counters {
    /// Zero counters of the pool called `name` (the wait histogram's label).
    fn new(name: std::borrow::Cow<'static, str>) -> Self {
        Self {
            waits: Counter::new(),
            wait_nanos: WaitTotal::new("slotpool_client_wait_seconds", name),
            created: Counter::new(),
            make_failures: Counter::new(),
            discards: Counter::new(),
            reaps: Counter::new(),
        }
    }
}

impl<C: ChannelConnector, F: ClientFactory<C::Channel>> ClientShared<C, F> {
    /// Puts a returned client back (a guard's drop). The caller ends the return
    /// ([`Ending::end`]) once it holds no reference into the pool: in the common case that
    /// clears the slot's `settling` flag; on the cold paths (closed, over the bound, the
    /// slot's previous return still ending) it drops the reference `keep` took.
    fn check_in(
        &self,
        lease: Lease,
        pooled: Pooled<C, F>,
        keep: impl FnOnce() -> Arc<ClientShared<C, F>>,
    ) -> Ending<Arc<ClientShared<C, F>>> {
        // One test on the common path: a background reaper's stale stamp and no hold watch.
        let stamp = if self.return_work {
            self.returned_slow(lease.index())
        } else {
            self.time.recent_stale()
        };
        match self.slots.check_in_unpinned(lease, pooled, stamp, keep) {
            Unpinned::Settling(settling) => Ending::Settling(settling),
            Unpinned::Pinned(kept, check_in) => {
                match check_in {
                    CheckIn::Kept => {}
                    // Closed (or over the bound) before or while we returned it: the clients
                    // that came back are dropped here (module docs, Lifetimes).
                    CheckIn::Surplus(clients) | CheckIn::Trimmed(clients) => {
                        self.dispose(clients, false)
                    }
                }
                Ending::Pinned(kept)
            }
        }
    }

    /// The return's stamp where it reads the clock or ends a hold ([`ClientShared::return_work`]):
    /// the hold of slot `slot` ended first, if holds are watched.
    #[cold]
    #[inline(never)]
    fn returned_slow(&self, slot: usize) -> u64 {
        if let Some(watch) = &self.hold {
            watch.ended(&self.slots, slot, self.time.now());
        }
        self.time.recent()
    }

    /// Drops every idle client (a closed pool's pass), releasing their channels now.
    fn drain_closed(&self) {
        self.dispose(
            self.slots.reap(|_| true).map_values(|(pooled, _)| pooled),
            false,
        );
    }

    /// Drops clients the pool does not keep (closed or over its bound), releasing their
    /// channels now. A client's destructor is user code: a panic in it is contained. Each
    /// client counts against the pool's bound until it is dropped (a retired one's room goes
    /// back when `clients`, a [`Retired`](crate::protocol::exclusive::Retired), is dropped after the
    /// loop).
    fn dispose(&self, clients: impl IntoIterator<Item = Pooled<C, F>>, broken: bool) {
        let now = self.time.clock.now();
        for pooled in clients {
            let PooledClient {
                client, channel, ..
            } = *pooled;
            crate::panic::drop_guarded(client);
            if broken {
                channel.release_broken();
            } else {
                channel.release_last_used(now);
            }
            self.counters.discards.incr();
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
        site: &'static Location<'static>,
    ) -> Result<ClientGuard<C, F>, ClientError<F::Error>> {
        match checkout {
            Checkout::Idle { lease, value } => Ok(self.guard(lease, value, site)),
            Checkout::Vacant { lease } => self.build(lease, site).await,
        }
    }

    /// The guard of a checkout by an `acquire` called at `site` (its hold noted, if the pool
    /// watches holds).
    #[inline]
    fn guard(
        &self,
        lease: Lease,
        pooled: Pooled<C, F>,
        site: &'static Location<'static>,
    ) -> ClientGuard<C, F> {
        if let Some(watch) = &self.hold {
            watch.noted(&self.slots, &lease, self.time.now(), site);
        }
        ClientGuard {
            lease: ManuallyDrop::new(Some(lease)),
            pooled: ManuallyDrop::new(Some(pooled)),
        }
    }

    /// Builds a client in a claimed slot. Cancel-safe as [`ClientShared::finish`].
    async fn build(
        self: &Arc<Self>,
        lease: Lease,
        site: &'static Location<'static>,
    ) -> Result<ClientGuard<C, F>, ClientError<F::Error>> {
        let building = Building {
            shared: self,
            lease: Some(lease),
        };
        // Declared after `building`, so dropped before it: the channel share goes first,
        // then the slot.
        let channel = match ChannelPool::get(&self.channels) {
            Ok(channel) => channel,
            Err(error) => {
                drop(building);
                self.counters.make_failures.incr();
                return Err(ClientError::Channel(error));
            }
        };
        let made = match catch(|| self.factory.make(channel.channel())) {
            Ok(make) => CatchUnwind::new(std::pin::pin!(make)).await,
            Err(panic) => Err(panic),
        };
        match made {
            Ok(Ok(client)) => {
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
                Ok(self.guard(
                    lease,
                    Box::new(PooledClient {
                        client,
                        channel,
                        anchor,
                    }),
                    site,
                ))
            }
            Ok(Err(source)) => {
                drop(channel);
                drop(building);
                self.counters.make_failures.incr();
                tracing::warn!(error = %source, "building a client failed");
                Err(ClientError::Make { source })
            }
            Err(panic) => {
                drop(channel);
                drop(building);
                self.counters.make_failures.incr();
                report("client factory", &panic);
                Err(ClientError::Panicked(panic))
            }
        }
    }

    /// Waits on the table's gate for a checkout (after a failed try), counting the wait.
    async fn wait(&self) -> Result<Checkout<Pooled<C, F>>, ClientError<F::Error>> {
        // Counted and timed from the first pending poll (a wait cut short counts too).
        let mut clock = WaitClock::new(&self.time.clock, &self.counters.wait_nanos);
        let checkout = {
            let mut wait = pin!(self.slots.checkout_after_try());
            poll_fn(|cx| {
                let poll = wait.as_mut().poll(cx);
                if poll.is_pending() && !clock.waited() {
                    clock.start();
                    self.counters.waits.incr();
                }
                poll
            })
            .await
        };
        drop(clock);
        checkout.map_err(|_| ClientError::Closed)
    }

    fn reap(&self, now: quanta::Instant) -> usize {
        let now_ns = self.time.stamp(now);
        if let Some(watch) = &self.hold {
            watch.report(&self.slots, now_ns);
        }
        // Releases from now on are stamped at least `now`.
        self.time.passed(now_ns);
        let timeout = nanos(self.idle_timeout).saturating_add(self.time.staleness);
        let reaped = self
            .slots
            .reap(|stamp| now_ns.saturating_sub(stamp) >= timeout);
        let count = reaped.len();
        for (pooled, stamp) in reaped {
            let PooledClient {
                client, channel, ..
            } = *pooled;
            crate::panic::drop_guarded(client);
            // The channel was last used when the client was: nested reaping (module docs).
            channel.release_last_used(self.time.latest(stamp, now_ns));
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
        ClientPoolBuilder {
            channels,
            factory,
            max_clients: None,
            held_too_long: None,
            settings: Settings::new(Duration::from_secs(180), Duration::from_secs(10)),
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
    /// failed, [`ClientError::Panicked`] if the factory panicked building it, and
    /// [`ClientError::Channel`] if no channel could be had for it (the channel connector
    /// panicked); in each failure the slot and channel share are freed first.
    #[inline]
    #[track_caller]
    pub fn acquire<'a>(
        self: &'a Arc<Self>,
    ) -> impl Future<Output = Result<ClientGuard<C, F>, ClientError<F::Error>>> + 'a {
        let pool = &**self;
        let site = Location::caller();
        FirstPoll::new(
            // A plain try, as the wait's first poll would make, without its machinery.
            move || match pool.shared.slots.try_checkout() {
                Ok(Checkout::Idle { lease, value }) => {
                    ControlFlow::Break(Ok(pool.shared.guard(lease, value, site)))
                }
                Err(TryAcquireError::Closed) => ControlFlow::Break(Err(ClientError::Closed)),
                other => ControlFlow::Continue(other),
            },
            move |first| pool.acquire_from(first, site),
        )
    }

    /// The rest of an acquire, from its first try (see [`FirstPoll`]): waiting for capacity
    /// (the try found none), or building a client in the slot it claimed.
    async fn acquire_from(
        &self,
        first: Result<Checkout<Pooled<C, F>>, TryAcquireError>,
        site: &'static Location<'static>,
    ) -> Result<ClientGuard<C, F>, ClientError<F::Error>> {
        let shared = &self.shared;
        let checkout = match first {
            Ok(checkout) => checkout,
            Err(_) => shared.wait().await?,
        };
        shared.finish(checkout, site).await
    }

    /// Like [`ClientPool::acquire`] but never waits for capacity: returns an idle client,
    /// or builds one if `max_clients` allows (awaiting only the factory, with the same
    /// cancel-safety as `acquire`).
    ///
    /// # Errors
    /// [`ClientError::NoCapacity`] when `max_clients` clients are in use, otherwise as
    /// [`ClientPool::acquire`].
    #[track_caller]
    pub fn try_acquire(
        self: &Arc<Self>,
    ) -> impl Future<Output = Result<ClientGuard<C, F>, ClientError<F::Error>>> + '_ {
        let site = Location::caller();
        async move {
            let checkout = self.shared.slots.try_checkout().map_err(|e| match e {
                TryAcquireError::Closed => ClientError::Closed,
                // The slot table has no breaker: anything else means no capacity.
                TryAcquireError::NoCapacity | TryAcquireError::Unavailable { .. } => {
                    ClientError::NoCapacity
                }
            })?;
            self.shared.finish(checkout, site).await
        }
    }

    /// [`ClientPool::acquire`] with a deadline `timeout` from now (covering the wait and
    /// the build).
    ///
    /// # Errors
    /// [`ClientError::Timeout`] if none came in time (nothing is held; a client being built
    /// is dropped with its slot), otherwise as [`ClientPool::acquire`].
    #[track_caller]
    pub fn acquire_timeout(
        self: &Arc<Self>,
        timeout: Duration,
    ) -> impl Future<Output = Result<ClientGuard<C, F>, ClientError<F::Error>>> + '_ {
        let acquire = self.acquire();
        async move {
            match tokio::time::timeout(timeout, acquire).await {
                Ok(result) => result,
                Err(_) => Err(ClientError::Timeout { waited: timeout }),
            }
        }
    }

    /// One reaper pass at `now` on the pool's clock: closes every client idle for at least
    /// the idle timeout (plus the background reap interval, if the pool runs one: see the
    /// [module documentation](self), "Idle time") and releases its channel share,
    /// recording the client's idle-since time as the channel's last use. Returns how many it
    /// closed. A client acquired concurrently is never closed.
    pub fn reap(&self, now: crate::Instant) -> usize {
        self.shared.reap(now.0)
    }

    /// A snapshot of the pool's state and counters.
    pub fn stats(&self) -> ClientStats {
        let counts = self.shared.slots.counts();
        let c = &self.shared.counters;
        ClientStats {
            capacity: self.shared.max_clients,
            clients: counts.live,
            idle: counts.idle,
            in_use: counts.live.saturating_sub(counts.idle),
            waiting: counts.table.waiting,
            acquires: counts.checkouts,
            waits: c.waits.get(),
            wait_time: c.wait_nanos.time(),
            created: c.created.get(),
            make_failures: c.make_failures.get(),
            discards: c.discards.get(),
            reaps: c.reaps.get(),
            held_too_long: self.shared.hold.as_ref().map_or(0, HoldWatch::reported),
            hold_time: self
                .shared
                .hold
                .as_ref()
                .map_or(Duration::ZERO, HoldWatch::held),
        }
    }

    /// Closes the pool: waiters and later acquires get [`ClientError::Closed`], idle
    /// clients are dropped now, and clients in use are dropped when their guards are.
    pub fn close(&self) {
        self.shared.slots.close();
        self.shared.drain_closed();
    }

    /// Whether [`ClientPool::close`] was called.
    pub fn is_closed(&self) -> bool {
        self.shared.slots.is_closed()
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
    /// `None` only once returned or discarded. `ManuallyDrop`, as `pooled`: the drop below
    /// always empties both, so neither field has a drop of its own to run (and test) after
    /// it.
    lease: ManuallyDrop<Option<Lease>>,
    /// `None` only once returned or discarded.
    pooled: ManuallyDrop<Option<Pooled<C, F>>>,
}

impl<C: ChannelConnector, F: ClientFactory<C::Channel>> ClientGuard<C, F> {
    fn pooled(&self) -> &Pooled<C, F> {
        match &*self.pooled {
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
    /// share are freed, and the next acquire builds a new client. The channel is released as
    /// broken: if this was its last client, it is closed at once rather than kept for the
    /// idle timeout (see [`ChannelPool`](crate::channel::ChannelPool), "Broken channels close
    /// at once").
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
        anchor.shared.dispose([pooled], true);
        anchor.shared.slots.retire(lease);
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
        match &mut *self.pooled {
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
        // No reference count of our own: the client keeps the pool alive until the return
        // ends (the slot's `settling` flag; see `Anchor`).
        let anchor: *const CachePadded<Anchor<C, F>> = Arc::as_ptr(&pooled.anchor);
        let keep = move || {
            // SAFETY: the anchor is ours until the client is in its cell, and stays alive
            // while our `settling` flag is set; `keep` runs only then.
            let anchor: &Anchor<C, F> = unsafe { &*anchor };
            Arc::clone(&anchor.shared)
        };
        let shared: *const ClientShared<C, F> = Arc::as_ptr(&pooled.anchor.shared);
        // SAFETY: the client's anchor keeps the pool alive until the return ends; `ending`
        // holds no reference into the pool.
        let ending = unsafe { &*shared }.check_in(lease, pooled, keep);
        // SAFETY: `check_in` has returned; nothing here touches the pool after this.
        unsafe { ending.end() };
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
