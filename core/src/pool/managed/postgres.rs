//! `slotpool::managed::postgres` (feature `postgres`): a [`Manager`] for
//! [tokio-postgres](tokio_postgres) connections, for what services use deadpool-postgres or
//! bb8-postgres for.
//!
//! ```no_run
//! use slotpool::managed::postgres::{PgManager, Recycling};
//! use slotpool::managed::Pool;
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let config: tokio_postgres::Config = "host=127.0.0.1 user=app dbname=app".parse()?;
//! let pool = Pool::builder(PgManager::new(config).recycling(Recycling::Fast))
//!     .max_size(16)
//!     .build()?;
//!
//! let client = pool.get().await?;                         // an `Object<PgManager>`
//! let statement = client.prepare_cached("SELECT $1::int + 1").await?;
//! let row = client.query_one(&statement, &[&41i32]).await?;
//! assert_eq!(row.get::<_, i32>(0), 42);
//! # Ok(()) }
//! ```
//!
//! # What a connection is
//!
//! [`PgManager::create`](Manager::create) connects with the [`tokio_postgres::Config`] it
//! was given (without TLS by default; [`PgManager::with_tls`] takes any tokio-postgres TLS
//! connector) and spawns the connection's task on the current tokio runtime. The pool holds a
//! [`PgClient`]: the [`tokio_postgres::Client`] (it derefs to it, so `query`, `execute` and
//! the rest are there) and the connection's [`StatementCache`], so that
//! [`PgClient::prepare_cached`] prepares a statement once per connection;
//! [`PgClient::transaction`] gives a [`PgTransaction`] whose `prepare_cached` uses the same
//! cache. Dropping a
//! `PgClient` (the pool drops connections it rejects, reaps or retires) closes the
//! connection: its task sends the server `Terminate` and ends.
//!
//! # Recycling: what a connection goes through before it is handed out again
//!
//! The pool calls [`Manager::recycle`] on an idle connection before a `get` returns it (every
//! time by default; the pool's [`Recycle`](super::Recycle) policy can limit it to
//! connections idle longer than some time). What the check does is the manager's
//! [`Recycling`] method; each one first rejects a connection whose client is closed (its task
//! ended: the server closed it, the socket broke, a query found it dead), which costs no round
//! trip:
//!
//! | method | round trips | also |
//! |---|---|---|
//! | [`Recycling::Fast`] (the default, as deadpool-postgres's) | 0 | nothing: a connection whose peer vanished without a word is found by its next query |
//! | [`Recycling::Verified`] | 1 | an empty query: the connection answers |
//! | [`Recycling::Clean`] | 1 | resets the session: rolls back an open or failed transaction, closes cursors, resets the session user and every `SET`, unlistens, releases advisory locks, drops temporary tables and resets sequences; prepared statements stay (the statement cache stays valid) |
//! | [`Recycling::Custom`] | 1 | your SQL (a simple query: several statements may be `;`-separated) |
//!
//! A rejected connection is dropped and the `get` goes on with the next idle one, or
//! connects a new one; it never fails the `get` by itself. `Clean` differs from
//! deadpool-postgres's method of that name in one point: it starts with `ROLLBACK`, so a
//! connection that comes back inside a transaction (a `BEGIN` sent as a simple query, a
//! `Transaction` that was leaked) is not handed to the next caller still in it. (With no
//! transaction open, the server answers that `ROLLBACK` with a warning, which tokio-postgres
//! logs at `info` level.)
//!
//! `Fast` assumes what most applications do: session state is not changed outside a
//! transaction, and a [`tokio_postgres::Transaction`] dropped without a commit rolls back
//! (tokio-postgres queues the `ROLLBACK` ahead of anything the next user sends). Use `Clean`
//! when callers `SET` session parameters, create temporary tables or `LISTEN`.
//!
//! # Errors
//!
//! [`PgError`] says which step failed; none of them has sent a caller's statement, so each
//! is [`Reach::NotSent`]. Through the pool they arrive as
//! [`PoolError::Create`](super::PoolError::Create) (connecting failed) or are counted as
//! discarded connections (a failed recycle).
//!
//! # Porting from deadpool-postgres
//!
//! `bench/examples/deadpool_postgres_port.rs` in the repository is a deadpool-postgres program
//! and its port, one after the other, with every changed line marked; it is compiled with the
//! workspace and run against a real server in CI. In short: `deadpool_postgres::Manager` is
//! [`PgManager`], `ManagerConfig { recycling_method }` is [`PgManager::recycling`],
//! `Pool::builder(manager).max_size(n).build()` keeps its shape, `deadpool::managed::Object`
//! is [`Object`](super::Object), and `prepare_cached` is the same call.
//!
//! deadpool-postgres's other names are here too, as the same items or aliases:
//!
//! * [`Config`] (its fields and serde encoding, with the `serde` feature), [`ManagerConfig`],
//!   [`RecyclingMethod`] (= [`Recycling`]), [`ConfigError`], [`CreatePoolError`], and
//!   [`PoolConfig`](super::PoolConfig): a configuration file or environment written for
//!   deadpool-postgres loads unchanged, and `cfg.create_pool(tls)` makes the pool (no runtime
//!   argument). `bench/examples/deadpool_postgres_config_port.rs` ports a program that loads
//!   its settings with the `config` crate.
//! * [`Client`] (the pooled connection), [`Pool`], [`PoolBuilder`], [`PoolError`]: aliases with
//!   the TLS connector as their parameter, [`NoTls`] by default.
//! * [`GenericClient`], over a pooled connection, a [`PgClient`] and a [`PgTransaction`]
//!   ([`Transaction`]); [`PgClient::build_transaction`] gives a [`PgTransactionBuilder`]
//!   ([`TransactionBuilder`]) whose transaction keeps the statement cache.

use std::collections::HashMap;
use std::fmt;

use tokio_postgres::tls::{MakeTlsConnect, TlsConnect};
use tokio_postgres::types::Type;
use tokio_postgres::{NoTls, Socket, Statement};

/// The driver, re-exported so that the `Config`, `Error` and types you use match this
/// module's.
pub use tokio_postgres;

use super::{Manager, Meta, RecycleError, RecycleResult};
use crate::error::Reach;
use crate::sync::Mutex;

mod config;
mod generic_client;

pub use config::{
    ChannelBinding, Config, ConfigError, CreatePoolError, LoadBalanceHosts, ManagerConfig,
    RecyclingMethod, SslMode, TargetSessionAttrs,
};
pub use generic_client::GenericClient;

/// A pooled connection, by deadpool-postgres's name: an [`Object`] of a [`PgManager`] (it
/// derefs to [`PgClient`], which derefs to [`tokio_postgres::Client`]).
pub type Client<T = NoTls> = super::Object<PgManager<T>>;

/// A pool of PostgreSQL connections, by deadpool-postgres's name.
pub type Pool<T = NoTls> = super::Pool<PgManager<T>>;

/// The builder of a [`Pool`], by deadpool-postgres's name.
pub type PoolBuilder<T = NoTls> = super::PoolBuilder<PgManager<T>>;

/// A failed `get` of a [`Pool`], by deadpool-postgres's name. deadpool's
/// `PoolError::Backend(e)` (the driver's error from connecting) is
/// `PoolError::Create(PgError::Connect(e))` here.
pub type PoolError = super::PoolError<PgError>;

/// A pooled connection, by deadpool-postgres's other name for it (the same as [`Client`]).
pub type Object<T = NoTls> = super::Object<PgManager<T>>;

/// A hook of a [`Pool`], by deadpool-postgres's name.
pub type Hook<T = NoTls> = super::Hook<PgManager<T>>;

/// Why a hook rejected a connection, by deadpool-postgres's name.
pub type HookError = super::HookError<PgError>;

/// The step a `get` timed out in, by deadpool's name (`TimeoutType`): [`Step::Wait`],
/// [`Step::Create`] or [`Step::Recycle`] in [`PoolError::Timeout`](super::PoolError::Timeout).
///
/// [`Step::Wait`]: super::Step::Wait
/// [`Step::Create`]: super::Step::Create
/// [`Step::Recycle`]: super::Step::Recycle
pub type TimeoutType = super::Step;

/// The rest of what a `deadpool_postgres` import names, from the managed pool.
pub use super::{PoolConfig, QueueMode, Status, Timeouts};

/// A transaction whose prepares use the connection's statement cache, by deadpool-postgres's
/// name.
pub type Transaction<'a> = PgTransaction<'a>;

/// The builder of a [`Transaction`], by deadpool-postgres's name.
pub type TransactionBuilder<'a> = PgTransactionBuilder<'a>;

/// What [`Recycling::Clean`] sends, as one simple query. `ROLLBACK` first: it ends an open or
/// failed transaction, so the statements after it run outside it (in a failed transaction
/// every one of them would fail, and in an open one the next caller would inherit it).
/// Then, statement by statement: close cursors, drop a `SET SESSION AUTHORIZATION`, reset every
/// run-time parameter, stop listening, release advisory locks, drop temporary tables, reset
/// sequence state. Not `DISCARD ALL`: that would deallocate the prepared statements the cache
/// holds (and it cannot run in the implicit transaction of a multi-statement query).
const CLEAN_SQL: &str = "ROLLBACK; CLOSE ALL; SET SESSION AUTHORIZATION DEFAULT; RESET ALL; \
                         UNLISTEN *; SELECT pg_advisory_unlock_all(); DISCARD TEMP; \
                         DISCARD SEQUENCES";

/// How [`PgManager`] checks an idle connection before it goes out again; see the
/// [module documentation](self#recycling-what-a-connection-goes-through-before-it-is-handed-out-again).
/// Every method first rejects a connection whose client is closed.
///
/// deadpool-postgres calls it [`RecyclingMethod`] (an alias of this type); with the `serde`
/// feature it reads and writes as deadpool-postgres's does: `"Fast"`, `"Verified"`, `"Clean"`,
/// `{ "Custom": "SQL" }`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Deserialize, serde::Serialize))]
pub enum Recycling {
    /// Only that check: no round trip. The default (as deadpool-postgres's).
    #[default]
    Fast,
    /// Also an empty query: one round trip, and the connection is known to answer.
    Verified,
    /// Also reset the session (one round trip): roll back a transaction, reset parameters,
    /// drop temporary tables and the rest; prepared statements stay.
    Clean,
    /// Also this SQL, as one simple query (one round trip). It must not deallocate prepared
    /// statements (`DISCARD ALL`, `DEALLOCATE`): the connection's [`StatementCache`] would
    /// then name statements the server no longer has.
    Custom(String),
}

impl Recycling {
    /// The SQL the method sends, if any.
    pub fn sql(&self) -> Option<&str> {
        match self {
            Recycling::Fast => None,
            Recycling::Verified => Some(""),
            Recycling::Clean => Some(CLEAN_SQL),
            Recycling::Custom(sql) => Some(sql),
        }
    }

    /// The method's name, for errors and logs.
    pub fn name(&self) -> &'static str {
        match self {
            Recycling::Fast => "fast",
            Recycling::Verified => "verified",
            Recycling::Clean => "clean",
            Recycling::Custom(_) => "custom",
        }
    }
}

/// Why [`PgManager`] could not make or keep a connection.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PgError {
    /// Connecting failed: the server could not be reached, refused the connection or the
    /// login, or the database does not exist (the source says which).
    #[error("connecting to PostgreSQL failed: {0}")]
    Connect(#[source] tokio_postgres::Error),
    /// The connection is closed (its task ended: the server closed it or the socket broke).
    #[error("the connection is closed")]
    Closed,
    /// The query of the manager's [`Recycling`] method failed (`method` names it).
    #[error("the `{method}` recycling query failed: {source}")]
    Recycle {
        /// [`Recycling::name`] of the method.
        method: &'static str,
        /// The driver's error.
        #[source]
        source: tokio_postgres::Error,
    },
}

impl PgError {
    /// Always [`Reach::NotSent`]: connecting and recycling send none of a caller's statements.
    pub fn reach(&self) -> Reach {
        Reach::NotSent
    }

    /// The driver's error, if there is one (`None` for [`PgError::Closed`]).
    pub fn driver_error(&self) -> Option<&tokio_postgres::Error> {
        match self {
            PgError::Connect(error) | PgError::Recycle { source: error, .. } => Some(error),
            PgError::Closed => None,
        }
    }
}

/// A [`Manager`] of tokio-postgres connections: connects with a [`tokio_postgres::Config`]
/// and a TLS connector (`T`, [`NoTls`] by default), and recycles as its [`Recycling`] method
/// says. See the [module documentation](self).
pub struct PgManager<T = NoTls> {
    config: tokio_postgres::Config,
    tls: T,
    recycling: Recycling,
}

impl PgManager<NoTls> {
    /// A manager that connects with `config`, without TLS, and recycles with
    /// [`Recycling::Fast`].
    pub fn new(config: tokio_postgres::Config) -> Self {
        Self::with_tls(config, NoTls)
    }
}

impl<T> PgManager<T> {
    /// A manager that connects with the parameters in `params` (a libpq connection string or
    /// URL: `host=localhost user=postgres`, `postgresql://...`) through `tls`, by
    /// bb8-postgres's name.
    ///
    /// # Errors
    /// The driver's error when `params` does not parse.
    pub fn new_from_stringlike(
        params: impl ToString,
        tls: T,
    ) -> Result<Self, tokio_postgres::Error> {
        let config = params.to_string().parse::<tokio_postgres::Config>()?;
        Ok(Self::with_tls(config, tls))
    }
}

impl<T> PgManager<T> {
    /// A manager that connects with `config` through the TLS connector `tls` (e.g.
    /// `postgres-native-tls` or `tokio-postgres-rustls`), recycling with [`Recycling::Fast`].
    pub fn with_tls(config: tokio_postgres::Config, tls: T) -> Self {
        Self {
            config,
            tls,
            recycling: Recycling::Fast,
        }
    }

    /// Sets how idle connections are checked before they go out again. Default:
    /// [`Recycling::Fast`].
    pub fn recycling(mut self, recycling: Recycling) -> Self {
        self.recycling = recycling;
        self
    }

    /// The connection settings.
    pub fn config(&self) -> &tokio_postgres::Config {
        &self.config
    }

    /// The recycling method.
    pub fn recycling_method(&self) -> &Recycling {
        &self.recycling
    }
}

impl<T> fmt::Debug for PgManager<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // `Config`'s Debug redacts the password.
        f.debug_struct("PgManager")
            .field("config", &self.config)
            .field("recycling", &self.recycling)
            .finish_non_exhaustive()
    }
}

impl<T> Manager for PgManager<T>
where
    T: MakeTlsConnect<Socket> + Clone + Send + Sync + 'static,
    T::Stream: Send + 'static,
    T::TlsConnect: Send,
    <T::TlsConnect as TlsConnect<Socket>>::Future: Send,
{
    type Type = PgClient;
    type Error = PgError;

    async fn create(&self) -> Result<PgClient, PgError> {
        let (client, connection) = self
            .config
            .connect(self.tls.clone())
            .await
            .map_err(PgError::Connect)?;
        // The connection's task ends by itself once the client is dropped (or the server
        // closes the connection); its error is the only thing it has to say.
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%error, "postgres connection ended with an error");
            }
        });
        Ok(PgClient::new(client))
    }

    /// [`Recycling::Fast`] decides here, with no await: the connection is closed or not.
    fn recycle_now(&self, client: &mut PgClient, _: &Meta) -> Option<RecycleResult<PgError>> {
        if client.client.is_closed() {
            return Some(Err(RecycleError::Backend(PgError::Closed)));
        }
        match self.recycling.sql() {
            None => Some(Ok(())),
            // The query is `recycle`'s.
            Some(_) => None,
        }
    }

    /// A connection the server (or the network) closed is dropped as it comes back, not
    /// kept idle until its next checkout (bb8-postgres's `has_broken`).
    fn has_broken(&self, client: &mut PgClient) -> bool {
        client.client.is_closed()
    }

    async fn recycle(&self, client: &mut PgClient, meta: &Meta) -> RecycleResult<PgError> {
        // The closed check and `Fast` are `recycle_now`'s (the pool calls it first; this
        // stands alone for a caller that calls `recycle` by itself).
        if let Some(decided) = self.recycle_now(client, meta) {
            return decided;
        }
        let Some(sql) = self.recycling.sql() else {
            return Ok(());
        };
        match client.client.simple_query(sql).await {
            Ok(_) => Ok(()),
            Err(source) => Err(RecycleError::Backend(PgError::Recycle {
                method: self.recycling.name(),
                source,
            })),
        }
    }
}

/// A pooled connection: a [`tokio_postgres::Client`] (it derefs to it) with its
/// [`StatementCache`].
pub struct PgClient {
    client: tokio_postgres::Client,
    statements: StatementCache,
}

impl PgClient {
    /// Wraps a connected client (with an empty statement cache).
    pub fn new(client: tokio_postgres::Client) -> Self {
        Self {
            client,
            statements: StatementCache::default(),
        }
    }

    /// [`tokio_postgres::Client::prepare`], once per connection: the statement prepared for
    /// `query` earlier on this connection, or a new one (then kept).
    ///
    /// # Errors
    /// The driver's error when preparing fails (nothing is cached then).
    pub async fn prepare_cached(&self, query: &str) -> Result<Statement, tokio_postgres::Error> {
        self.prepare_typed_cached(query, &[]).await
    }

    /// [`tokio_postgres::Client::prepare_typed`], once per connection and parameter types.
    ///
    /// # Errors
    /// The driver's error when preparing fails (nothing is cached then).
    pub async fn prepare_typed_cached(
        &self,
        query: &str,
        types: &[Type],
    ) -> Result<Statement, tokio_postgres::Error> {
        self.statements
            .get_or_prepare(query, types, || self.client.prepare_typed(query, types))
            .await
    }

    /// [`tokio_postgres::Client::transaction`], as a [`PgTransaction`] whose `prepare_cached`
    /// uses (and fills) this connection's statement cache.
    ///
    /// # Errors
    /// The driver's error when `BEGIN` fails.
    pub async fn transaction(&mut self) -> Result<PgTransaction<'_>, tokio_postgres::Error> {
        let transaction = self.client.transaction().await?;
        Ok(PgTransaction {
            transaction,
            statements: &self.statements,
        })
    }

    /// A [`PgTransactionBuilder`]: [`tokio_postgres::Client::build_transaction`] (isolation
    /// level, read only, deferrable), whose transaction's `prepare_cached` uses this
    /// connection's statement cache.
    ///
    /// ```no_run
    /// use slotpool::managed::postgres::{Config, GenericClient};
    /// use tokio_postgres::IsolationLevel;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let pool = Config { dbname: Some("app".into()), ..Config::new() }.create_pool(tokio_postgres::NoTls)?;
    /// let mut client = pool.get().await?;
    /// let transaction = client
    ///     .build_transaction()
    ///     .isolation_level(IsolationLevel::Serializable)
    ///     .read_only(true)
    ///     .start()
    ///     .await?;
    /// let total = transaction.prepare_cached("SELECT sum(amount) FROM ledger").await?;
    /// let row = transaction.query_one(&total, &[]).await?;
    /// transaction.commit().await?;
    /// # let _ = row;
    /// # Ok(()) }
    /// ```
    pub fn build_transaction(&mut self) -> PgTransactionBuilder<'_> {
        PgTransactionBuilder {
            builder: self.client.build_transaction(),
            statements: &self.statements,
        }
    }

    /// This connection's statement cache.
    pub fn statement_cache(&self) -> &StatementCache {
        &self.statements
    }

    /// The client, for APIs that take a `tokio_postgres::Client` itself.
    pub fn client(&self) -> &tokio_postgres::Client {
        &self.client
    }

    /// The client, mutably (`transaction` needs it; `DerefMut` gives it too).
    pub fn client_mut(&mut self) -> &mut tokio_postgres::Client {
        &mut self.client
    }

    /// The client, taking it out of the wrapper (its statement cache is dropped).
    pub fn into_client(self) -> tokio_postgres::Client {
        self.client
    }
}

impl std::ops::Deref for PgClient {
    type Target = tokio_postgres::Client;

    fn deref(&self) -> &tokio_postgres::Client {
        &self.client
    }
}

impl std::ops::DerefMut for PgClient {
    fn deref_mut(&mut self) -> &mut tokio_postgres::Client {
        &mut self.client
    }
}

impl fmt::Debug for PgClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgClient")
            .field("closed", &self.client.is_closed())
            .field("statements", &self.statements.len())
            .finish()
    }
}

/// A transaction on a [`PgClient`] (from [`PgClient::transaction`]): derefs to the
/// [`tokio_postgres::Transaction`], and prepares through the connection's statement cache.
/// Dropped without [`commit`](PgTransaction::commit), it rolls back (as tokio-postgres's does).
pub struct PgTransaction<'a> {
    transaction: tokio_postgres::Transaction<'a>,
    statements: &'a StatementCache,
}

impl PgTransaction<'_> {
    /// [`PgClient::prepare_cached`] within the transaction (the statement outlives it, as
    /// every prepared statement of the session does).
    ///
    /// # Errors
    /// The driver's error when preparing fails (nothing is cached then).
    pub async fn prepare_cached(&self, query: &str) -> Result<Statement, tokio_postgres::Error> {
        self.prepare_typed_cached(query, &[]).await
    }

    /// [`PgClient::prepare_typed_cached`] within the transaction.
    ///
    /// # Errors
    /// The driver's error when preparing fails (nothing is cached then).
    pub async fn prepare_typed_cached(
        &self,
        query: &str,
        types: &[Type],
    ) -> Result<Statement, tokio_postgres::Error> {
        self.statements
            .get_or_prepare(query, types, || {
                self.transaction.prepare_typed(query, types)
            })
            .await
    }

    /// Commits.
    ///
    /// # Errors
    /// The driver's error when `COMMIT` fails.
    pub async fn commit(self) -> Result<(), tokio_postgres::Error> {
        self.transaction.commit().await
    }

    /// Rolls back (dropping the transaction does too, without waiting for the answer).
    ///
    /// # Errors
    /// The driver's error when `ROLLBACK` fails.
    pub async fn rollback(self) -> Result<(), tokio_postgres::Error> {
        self.transaction.rollback().await
    }

    /// A nested transaction (a savepoint with a generated name,
    /// [`tokio_postgres::Transaction::transaction`]), preparing through the same cache.
    ///
    /// # Errors
    /// The driver's error when `SAVEPOINT` fails.
    pub async fn transaction(&mut self) -> Result<PgTransaction<'_>, tokio_postgres::Error> {
        let transaction = self.transaction.transaction().await?;
        Ok(PgTransaction {
            transaction,
            statements: self.statements,
        })
    }

    /// A nested transaction as a savepoint named `name`
    /// ([`tokio_postgres::Transaction::savepoint`]), preparing through the same cache.
    ///
    /// # Errors
    /// The driver's error when `SAVEPOINT` fails.
    pub async fn savepoint(
        &mut self,
        name: impl Into<String>,
    ) -> Result<PgTransaction<'_>, tokio_postgres::Error> {
        let transaction = self.transaction.savepoint(name).await?;
        Ok(PgTransaction {
            transaction,
            statements: self.statements,
        })
    }
}

impl<'a> std::ops::Deref for PgTransaction<'a> {
    type Target = tokio_postgres::Transaction<'a>;

    fn deref(&self) -> &Self::Target {
        &self.transaction
    }
}

impl std::ops::DerefMut for PgTransaction<'_> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.transaction
    }
}

impl fmt::Debug for PgTransaction<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgTransaction").finish_non_exhaustive()
    }
}

/// The settings of a transaction about to start (from [`PgClient::build_transaction`]):
/// tokio-postgres's [`TransactionBuilder`](tokio_postgres::TransactionBuilder), whose
/// [`start`](PgTransactionBuilder::start) gives a [`PgTransaction`] that prepares through the
/// connection's statement cache. Each setting goes into the `BEGIN` (or `START TRANSACTION`)
/// statement; unset, the server's session defaults hold.
#[must_use = "a transaction builder starts nothing until `start` is awaited"]
pub struct PgTransactionBuilder<'a> {
    builder: tokio_postgres::TransactionBuilder<'a>,
    statements: &'a StatementCache,
}

impl<'a> PgTransactionBuilder<'a> {
    /// The transaction's isolation level.
    pub fn isolation_level(mut self, level: tokio_postgres::IsolationLevel) -> Self {
        self.builder = self.builder.isolation_level(level);
        self
    }

    /// Whether the transaction may only read.
    pub fn read_only(mut self, read_only: bool) -> Self {
        self.builder = self.builder.read_only(read_only);
        self
    }

    /// Whether the transaction is deferrable (for a serializable read-only one: it waits for
    /// a snapshot that cannot fail with a serialization error).
    pub fn deferrable(mut self, deferrable: bool) -> Self {
        self.builder = self.builder.deferrable(deferrable);
        self
    }

    /// Begins the transaction. Dropped without a commit, it rolls back.
    ///
    /// # Errors
    /// The driver's error when the `BEGIN` fails.
    pub async fn start(self) -> Result<PgTransaction<'a>, tokio_postgres::Error> {
        let transaction = self.builder.start().await?;
        Ok(PgTransaction {
            transaction,
            statements: self.statements,
        })
    }
}

impl fmt::Debug for PgTransactionBuilder<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgTransactionBuilder")
            .finish_non_exhaustive()
    }
}

/// The statements prepared for one query text: (parameter types, statement), almost always
/// one entry.
type ByTypes = Vec<(Box<[Type]>, Statement)>;

/// One connection's prepared statements, by query text and parameter types. A lookup takes a
/// short lock (never held across an await) and allocates nothing on a hit.
#[derive(Default)]
pub struct StatementCache {
    /// Query text → its statements by parameter types.
    by_query: Mutex<HashMap<Box<str>, ByTypes>>,
}

impl StatementCache {
    /// The cached statement for `query` with parameter types `types`.
    pub fn get(&self, query: &str, types: &[Type]) -> Option<Statement> {
        let map = self.by_query.lock();
        map.get(query)?
            .iter()
            .find(|(t, _)| **t == *types)
            .map(|(_, statement)| statement.clone())
    }

    /// The cached statement, or the one `prepare` makes (then cached).
    async fn get_or_prepare<F, Fut>(
        &self,
        query: &str,
        types: &[Type],
        prepare: F,
    ) -> Result<Statement, tokio_postgres::Error>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<Statement, tokio_postgres::Error>>,
    {
        if let Some(statement) = self.get(query, types) {
            return Ok(statement);
        }
        // Two users of one connection may both miss and both prepare; the second insert
        // replaces the first statement, which the server closes once its last holder drops it.
        let statement = prepare().await?;
        self.insert(query, types, statement.clone());
        Ok(statement)
    }

    fn insert(&self, query: &str, types: &[Type], statement: Statement) {
        let replaced = {
            let mut map = self.by_query.lock();
            let entries = map.entry(Box::from(query)).or_default();
            match entries.iter_mut().find(|(t, _)| **t == *types) {
                Some(entry) => Some(std::mem::replace(&mut entry.1, statement)),
                None => {
                    entries.push((Box::from(types), statement));
                    None
                }
            }
        };
        // Dropped outside the lock: the last drop of a statement queues its `Close`.
        drop(replaced);
    }

    /// Forgets the statement for `query` with `types` (the server closes it once no one holds
    /// it); returns whether there was one.
    pub fn remove(&self, query: &str, types: &[Type]) -> bool {
        let mut map = self.by_query.lock();
        let Some(entries) = map.get_mut(query) else {
            return false;
        };
        let before = entries.len();
        entries.retain(|(t, _)| **t != *types);
        let removed = entries.len() < before;
        if entries.is_empty() {
            map.remove(query);
        }
        removed
    }

    /// Forgets every statement (after a schema change, say).
    pub fn clear(&self) {
        self.by_query.lock().clear();
    }

    /// How many statements are cached.
    pub fn len(&self) -> usize {
        self.by_query.lock().values().map(Vec::len).sum()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl fmt::Debug for StatementCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StatementCache")
            .field("len", &self.len())
            .finish()
    }
}
