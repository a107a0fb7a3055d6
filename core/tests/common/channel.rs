//! A counting lazy channel connector and a client factory that fails or hangs on demand, for
//! the `ChannelPool` and `ClientPool` tests.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use slotpool::channel::{ChannelConnector, ChannelPool};
use slotpool::client::{ClientFactory, ClientPool};

// ---------------------------------------------------------------------------------------------
// Fixtures
// ---------------------------------------------------------------------------------------------

/// Counts live channels: a channel is an `Arc<Token>`, and the last clone's drop is the close.
#[derive(Default)]
pub struct Lazy {
    pub live: Arc<AtomicUsize>,
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
        self.knobs.live.fetch_sub(1, Ordering::SeqCst);
    }
}

impl ClientFactory<Arc<Token>> for Factory {
    type Client = Client;
    type Error = MakeFailed;
    async fn make(&self, channel: &Arc<Token>) -> Result<Client, MakeFailed> {
        if self.knobs.hang.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
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

pub const IDLE: Duration = Duration::from_secs(10);

pub struct Fixture {
    pub clock: quanta::Clock,
    pub mock: Arc<quanta::Mock>,
    pub channels: Arc<Channels>,
    pub clients: Arc<Clients>,
    pub live_channels: Arc<AtomicUsize>,
    pub knobs: Arc<Knobs>,
}

impl Fixture {
    pub fn new(per_channel: usize, max_clients: Option<usize>) -> Self {
        let (clock, mock) = quanta::Clock::mock();
        let connector = Lazy::default();
        let live_channels = Arc::clone(&connector.live);
        let channels = ChannelPool::builder(connector)
            .max_clients_per_channel(per_channel)
            .idle_timeout(IDLE)
            .reap_interval(None)
            .clock(clock.clone())
            .build()
            .unwrap();
        let factory = Factory::default();
        let knobs = Arc::clone(&factory.knobs);
        let clients = ClientPool::builder(Arc::clone(&channels), factory)
            .max_clients(max_clients)
            .idle_timeout(IDLE)
            .reap_interval(None)
            .clock(clock.clone())
            .build()
            .unwrap();
        Self {
            clock,
            mock,
            channels,
            clients,
            live_channels,
            knobs,
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

pub fn channel_pool(
    per_channel: usize,
) -> (
    quanta::Clock,
    Arc<quanta::Mock>,
    Arc<Channels>,
    Arc<AtomicUsize>,
) {
    let (clock, mock) = quanta::Clock::mock();
    let connector = Lazy::default();
    let live = Arc::clone(&connector.live);
    let pool = ChannelPool::builder(connector)
        .max_clients_per_channel(per_channel)
        .idle_timeout(IDLE)
        .reap_interval(None)
        .clock(clock.clone())
        .build()
        .unwrap();
    (clock, mock, pool, live)
}
