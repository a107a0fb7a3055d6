//! A counting lazy channel connector and a client factory that fails or hangs on demand, for
//! the `ChannelPool` and `ClientPool` tests.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use slotpool::channel::{ChannelConnector, ChannelPool, ChannelPoolBuilder};
use slotpool::client::{ClientFactory, ClientPool, ClientPoolBuilder};

use super::{MockTime, ReapByHand};

/// Counts live channels: a channel is an `Arc<Token>`, and the last clone's drop is the close.
/// Panics on connects when told to (see [`Panics`]).
#[derive(Default)]
pub struct Lazy {
    pub live: Arc<AtomicUsize>,
    pub panics: Arc<Panics>,
}

/// When user code panics: the next `next` calls, and every `every`-th call (0: never).
#[derive(Default)]
pub struct Panics {
    pub next: AtomicUsize,
    pub every: AtomicUsize,
    calls: AtomicUsize,
}

impl Panics {
    /// Whether this call panics (counts the call).
    pub fn now(&self) -> bool {
        let call = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        let every = self.every.load(Ordering::SeqCst);
        let next = self
            .next
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        next || (every > 0 && call.is_multiple_of(every))
    }
}

pub struct Token {
    pub id: u64,
    pub live: Arc<AtomicUsize>,
}

impl Drop for Token {
    fn drop(&mut self) {
        self.live.fetch_sub(1, Ordering::SeqCst);
    }
}

impl ChannelConnector for Lazy {
    type Channel = Arc<Token>;
    fn connect_lazy(&self, id: u64) -> Arc<Token> {
        if self.panics.now() {
            panic!("connect_lazy panics");
        }
        self.live.fetch_add(1, Ordering::SeqCst);
        Arc::new(Token {
            id,
            live: Arc::clone(&self.live),
        })
    }
}

#[derive(Debug, thiserror::Error)]
#[error("injected build failure")]
pub struct MakeFailed;

/// Builds `Client`s; can be told to fail the next builds or to hang.
#[derive(Default)]
pub struct Factory {
    pub knobs: Arc<Knobs>,
}

#[derive(Default)]
pub struct Knobs {
    pub live: AtomicUsize,
    pub fail_next: AtomicUsize,
    pub hang: AtomicBool,
    /// `make` panics while its future is polled.
    pub panics: Panics,
    /// `make` panics in the call itself, before it returns a future.
    pub panic_in_call: AtomicBool,
    /// When set, a client's destructor blocks its thread on `drop_hold`.
    pub hold_drop: AtomicBool,
    pub drop_hold: super::Hold,
    /// When set, a client's destructor panics (an injected panic, after it counted itself
    /// gone).
    pub panic_on_drop: AtomicBool,
}

pub struct Client {
    pub channel: u64,
    /// Set while a caller uses the client: two callers at once would see it set.
    pub in_use: AtomicBool,
    pub uses: u64,
    pub knobs: Arc<Knobs>,
}

impl Drop for Client {
    fn drop(&mut self) {
        if self.knobs.hold_drop.load(Ordering::SeqCst) {
            self.knobs.drop_hold.block();
        }
        self.knobs.live.fetch_sub(1, Ordering::SeqCst);
        if self.knobs.panic_on_drop.load(Ordering::SeqCst) {
            super::panics::inject("a client's destructor");
        }
    }
}

impl ClientFactory<Arc<Token>> for Factory {
    type Client = Client;
    type Error = MakeFailed;
    fn make(
        &self,
        channel: &Arc<Token>,
    ) -> impl std::future::Future<Output = Result<Client, MakeFailed>> + Send {
        if self.knobs.panic_in_call.swap(false, Ordering::SeqCst) {
            panic!("make panics before returning its future");
        }
        self.make_async(channel)
    }
}

impl Factory {
    async fn make_async(&self, channel: &Arc<Token>) -> Result<Client, MakeFailed> {
        if self.knobs.hang.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
        if self.knobs.panics.now() {
            panic!("make panics");
        }
        let failing = self
            .knobs
            .fail_next
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if failing {
            return Err(MakeFailed);
        }
        self.knobs.live.fetch_add(1, Ordering::SeqCst);
        Ok(Client {
            channel: channel.id,
            in_use: AtomicBool::new(false),
            uses: 0,
            knobs: Arc::clone(&self.knobs),
        })
    }
}

pub type Channels = ChannelPool<Lazy>;
pub type Clients = ClientPool<Lazy, Factory>;

/// The idle timeout of every fixture pool.
pub const IDLE: Duration = Duration::from_secs(10);

impl Lazy {
    /// A connector and its count of live channels.
    pub fn counted() -> (Self, Arc<AtomicUsize>) {
        let connector = Self::default();
        let live = Arc::clone(&connector.live);
        (connector, live)
    }
}

impl Factory {
    /// A factory and the knobs that steer it (and count its live clients).
    pub fn steered() -> (Self, Arc<Knobs>) {
        let factory = Self::default();
        let knobs = Arc::clone(&factory.knobs);
        (factory, knobs)
    }
}

impl<C: ChannelConnector> ReapByHand for ChannelPoolBuilder<C> {
    fn reaped_by_hand(self, time: &MockTime) -> Self {
        self.reap_interval(None).clock(time.clock())
    }
}

impl ReapByHand for ClientPoolBuilder<Lazy, Factory> {
    fn reaped_by_hand(self, time: &MockTime) -> Self {
        self.reap_interval(None).clock(time.clock())
    }
}

/// A channel pool of `per_channel` clients per channel, idle after [`IDLE`] on a mock clock and
/// reaped by hand, with its count of live channels.
pub fn channel_pool(per_channel: usize) -> (MockTime, Arc<Channels>, Arc<AtomicUsize>) {
    let (time, pool, live, _) = steered_channel_pool(per_channel);
    (time, pool, live)
}

/// [`channel_pool`], with the knob that makes its connector panic.
pub fn steered_channel_pool(
    per_channel: usize,
) -> (MockTime, Arc<Channels>, Arc<AtomicUsize>, Arc<Panics>) {
    let time = MockTime::new();
    let (connector, live) = Lazy::counted();
    let panics = Arc::clone(&connector.panics);
    let pool = ChannelPool::builder(connector)
        .max_clients_per_channel(per_channel)
        .idle_timeout(IDLE)
        .reaped_by_hand(&time)
        .build()
        .expect("valid configuration");
    (time, pool, live, panics)
}

/// A client pool over a [`channel_pool`], on the same clock and reaped by hand too.
pub struct Fixture {
    pub time: MockTime,
    pub channels: Arc<Channels>,
    pub clients: Arc<Clients>,
    pub live_channels: Arc<AtomicUsize>,
    pub knobs: Arc<Knobs>,
    /// When the channel connector panics.
    pub connector_panics: Arc<Panics>,
}

impl Fixture {
    pub fn new(per_channel: usize, max_clients: Option<usize>) -> Self {
        let (time, channels, live_channels, connector_panics) = steered_channel_pool(per_channel);
        let (factory, knobs) = Factory::steered();
        let clients = ClientPool::builder(Arc::clone(&channels), factory)
            .max_clients(max_clients)
            .idle_timeout(IDLE)
            .reaped_by_hand(&time)
            .build()
            .expect("valid configuration");
        Self {
            time,
            channels,
            clients,
            live_channels,
            knobs,
            connector_panics,
        }
    }

    /// Asserts the whole stack is empty: no clients, no channels, nothing alive.
    pub fn assert_all_reaped(&self) {
        let (clients, channels) = (self.clients.stats(), self.channels.stats());
        assert_eq!(
            (clients.clients, clients.idle, clients.in_use),
            (0, 0, 0),
            "{clients:?}"
        );
        assert_eq!(
            (channels.channels, channels.clients),
            (0, 0),
            "{channels:?}"
        );
        assert_eq!(self.knobs.live.load(Ordering::SeqCst), 0, "clients dropped");
        assert_eq!(
            self.live_channels.load(Ordering::SeqCst),
            0,
            "channels dropped"
        );
    }
}
