//! The reference channel and client pools: R1's `ChannelPool` and `ClientPool` (SEEDS.md),
//! re-implemented faithfully so slotpool is measured against the design it replaces, not a
//! strawman.
//!
//! * **Channel pool**: a `std::sync::Mutex<BTreeMap<ChannelId, ChannelEntry>>`. `get()` locks
//!   it, walks the channels in ascending id order and takes the first with
//!   `clients < max_clients_per_channel`; if none has room it inserts a new lazily connected
//!   channel (under the lock: `connect_lazy` never blocks). The guard locks again on drop,
//!   decrements the count and stamps the idle time when it reaches zero.
//! * **Client pool**: idle clients in a `Mutex<BTreeMap<(ChannelId, ClientId), IdleClient>>`;
//!   `get()` first takes an optional `tokio::sync::Semaphore` permit (`max_clients`), then
//!   locks the map and pops the first entry (lowest channel, then lowest client id). If none is
//!   idle it gets a channel from the channel pool and builds a client (no lock held across the
//!   build). The guard derefs to the client and, on drop, locks the map again and inserts the
//!   client with an idle timestamp; the permit is released after (which locks the semaphore's
//!   waiter list).
//! * **Reaper**: `reap(threshold)` removes idle entries older than the threshold; nested pools
//!   reap in sequence (an idle client's removal drops its channel guard).
//! * Guards and tasks hold only `Weak` references, so dropping a pool ends everything.
//!
//! The channel and client traits are slotpool's ([`ChannelConnector`], [`ClientFactory`]), so
//! both pools run over the same fixtures.

use std::collections::BTreeMap;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use slotpool::channel::ChannelConnector;
use slotpool::client::ClientFactory;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// A channel's id: creation order.
pub type ChannelId = u64;
/// A client's id: creation order.
pub type ClientId = u64;

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

// ---------------------------------------------------------------------------------------------
// Channels
// ---------------------------------------------------------------------------------------------

struct ChannelEntry<Ch> {
    channel: Ch,
    clients: usize,
    /// INVARIANT: `Some` exactly when `clients == 0`.
    idle_since: Option<Instant>,
}

/// R1's channel pool.
pub struct RefChannelPool<C: ChannelConnector> {
    connector: C,
    max_clients_per_channel: usize,
    channels: Mutex<BTreeMap<ChannelId, ChannelEntry<C::Channel>>>,
    next_id: AtomicU64,
}

impl<C: ChannelConnector> std::fmt::Debug for RefChannelPool<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RefChannelPool")
            .field("load", &self.load())
            .finish_non_exhaustive()
    }
}

impl<C: ChannelConnector> RefChannelPool<C> {
    pub fn new(connector: C, max_clients_per_channel: usize) -> Arc<Self> {
        Arc::new(Self {
            connector,
            max_clients_per_channel,
            channels: Mutex::new(BTreeMap::new()),
            next_id: AtomicU64::new(0),
        })
    }

    /// The first channel in id order with room, else a new lazy channel.
    pub fn get(self: &Arc<Self>) -> RefChannelGuard<C> {
        let mut channels = lock(&self.channels);
        for (&id, entry) in channels.iter_mut() {
            if entry.clients < self.max_clients_per_channel {
                entry.clients += 1;
                entry.idle_since = None;
                return RefChannelGuard {
                    pool: Arc::downgrade(self),
                    id,
                    channel: entry.channel.clone(),
                };
            }
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let channel = self.connector.connect_lazy(id);
        channels.insert(
            id,
            ChannelEntry {
                channel: channel.clone(),
                clients: 1,
                idle_since: None,
            },
        );
        RefChannelGuard {
            pool: Arc::downgrade(self),
            id,
            channel,
        }
    }

    /// Removes channels idle for at least `threshold`. Returns how many.
    pub fn reap(&self, threshold: Duration) -> usize {
        let now = Instant::now();
        let mut channels = lock(&self.channels);
        let before = channels.len();
        channels.retain(|_, e| {
            e.idle_since
                .is_none_or(|t| now.duration_since(t) < threshold)
        });
        before - channels.len()
    }

    /// (channels, clients on them).
    pub fn load(&self) -> (usize, usize) {
        let channels = lock(&self.channels);
        (channels.len(), channels.values().map(|e| e.clients).sum())
    }
}

/// A client's share of a reference channel.
pub struct RefChannelGuard<C: ChannelConnector> {
    pool: Weak<RefChannelPool<C>>,
    id: ChannelId,
    channel: C::Channel,
}

impl<C: ChannelConnector> std::fmt::Debug for RefChannelGuard<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RefChannelGuard")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl<C: ChannelConnector> RefChannelGuard<C> {
    pub fn id(&self) -> ChannelId {
        self.id
    }

    pub fn channel(&self) -> &C::Channel {
        &self.channel
    }
}

impl<C: ChannelConnector> Drop for RefChannelGuard<C> {
    fn drop(&mut self) {
        let Some(pool) = self.pool.upgrade() else {
            return;
        };
        let mut channels = lock(&pool.channels);
        if let Some(entry) = channels.get_mut(&self.id) {
            entry.clients -= 1;
            if entry.clients == 0 {
                entry.idle_since = Some(Instant::now());
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Clients
// ---------------------------------------------------------------------------------------------

struct IdleClient<C: ChannelConnector, Cl> {
    client: Cl,
    channel: RefChannelGuard<C>,
    idle_since: Instant,
}

/// Idle clients by (channel, client) id: `pop_first` takes the lowest channel.
type IdleMap<C, Cl> = BTreeMap<(ChannelId, ClientId), IdleClient<C, Cl>>;

/// R1's client pool.
pub struct RefClientPool<C: ChannelConnector, F: ClientFactory<C::Channel>> {
    channels: Arc<RefChannelPool<C>>,
    factory: F,
    idle: Mutex<IdleMap<C, F::Client>>,
    limiter: Option<Arc<Semaphore>>,
    next_client_id: AtomicU64,
}

impl<C: ChannelConnector, F: ClientFactory<C::Channel>> std::fmt::Debug for RefClientPool<C, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RefClientPool")
            .field("idle", &self.idle())
            .finish_non_exhaustive()
    }
}

impl<C: ChannelConnector, F: ClientFactory<C::Channel>> RefClientPool<C, F> {
    pub fn new(
        channels: Arc<RefChannelPool<C>>,
        factory: F,
        max_clients: Option<usize>,
    ) -> Arc<Self> {
        Arc::new(Self {
            channels,
            factory,
            idle: Mutex::new(BTreeMap::new()),
            limiter: max_clients.map(|n| Arc::new(Semaphore::new(n))),
            next_client_id: AtomicU64::new(0),
        })
    }

    /// A permit (if bounded), then the first idle client, else a new one.
    pub async fn get(self: &Arc<Self>) -> Result<RefClientGuard<C, F>, F::Error> {
        let permit = match &self.limiter {
            Some(limiter) => Some(
                Arc::clone(limiter)
                    .acquire_owned()
                    .await
                    .expect("the reference never closes its semaphore"),
            ),
            None => None,
        };
        let popped = lock(&self.idle).pop_first();
        let (id, client, channel) = match popped {
            Some(((_, id), idle)) => (id, idle.client, idle.channel),
            None => {
                let channel = self.channels.get();
                let client = self.factory.make(channel.channel()).await?;
                let id = self.next_client_id.fetch_add(1, Ordering::Relaxed);
                (id, client, channel)
            }
        };
        Ok(RefClientGuard {
            pool: Arc::downgrade(self),
            id,
            inner: Some((client, channel)),
            _permit: permit,
        })
    }

    /// Removes clients idle for at least `threshold` (their channel guards drop). Returns how
    /// many.
    pub fn reap(&self, threshold: Duration) -> usize {
        let now = Instant::now();
        let removed: Vec<_> = {
            let mut idle = lock(&self.idle);
            let expired: Vec<_> = idle
                .iter()
                .filter(|(_, c)| now.duration_since(c.idle_since) >= threshold)
                .map(|(k, _)| *k)
                .collect();
            expired
                .into_iter()
                .filter_map(|k| idle.remove(&k))
                .collect()
        };
        removed.len()
    }

    /// Idle clients.
    pub fn idle(&self) -> usize {
        lock(&self.idle).len()
    }
}

/// Exclusive use of a reference client.
pub struct RefClientGuard<C: ChannelConnector, F: ClientFactory<C::Channel>> {
    pool: Weak<RefClientPool<C, F>>,
    id: ClientId,
    inner: Option<(F::Client, RefChannelGuard<C>)>,
    /// Released after the client is back in the map (field order: dropped last).
    _permit: Option<OwnedSemaphorePermit>,
}

impl<C: ChannelConnector, F: ClientFactory<C::Channel>> std::fmt::Debug for RefClientGuard<C, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RefClientGuard")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl<C: ChannelConnector, F: ClientFactory<C::Channel>> RefClientGuard<C, F> {
    pub fn channel_id(&self) -> ChannelId {
        self.inner.as_ref().map_or(u64::MAX, |(_, ch)| ch.id())
    }
}

impl<C: ChannelConnector, F: ClientFactory<C::Channel>> Deref for RefClientGuard<C, F> {
    type Target = F::Client;
    fn deref(&self) -> &F::Client {
        &self.inner.as_ref().expect("held until drop").0
    }
}

impl<C: ChannelConnector, F: ClientFactory<C::Channel>> DerefMut for RefClientGuard<C, F> {
    fn deref_mut(&mut self) -> &mut F::Client {
        &mut self.inner.as_mut().expect("held until drop").0
    }
}

impl<C: ChannelConnector, F: ClientFactory<C::Channel>> Drop for RefClientGuard<C, F> {
    fn drop(&mut self) {
        let (Some(pool), Some((client, channel))) = (self.pool.upgrade(), self.inner.take()) else {
            return;
        };
        let key = (channel.id(), self.id);
        lock(&pool.idle).insert(
            key,
            IdleClient {
                client,
                channel,
                idle_since: Instant::now(),
            },
        );
    }
}
