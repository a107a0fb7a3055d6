//! The PostgreSQL cases: a prepared `SELECT 1` per checkout against a real server, through
//! slotpool's managed pool and the pools its users come from, side by side in one process
//! against the same server; and the same pools' checkout and return of a real connection with
//! no query at all (`postgres/pool-only-*`), where what is timed is the pool carrying a
//! `tokio_postgres::Client` rather than a number.
//!
//! The `select-1` cases:
//!
//! | impl | what |
//! |---|---|
//! | `slotpool` | `slotpool::managed::Pool` of [`PgManager`] at its defaults (`Recycling::Fast`: the closed check; lowest idle connection first; FIFO waiters), `max_size = 16`, `prepare_cached` |
//! | `deadpool-postgres` | deadpool-postgres 0.14 at its defaults (`Manager::new(config, NoTls)`: `RecyclingMethod::Fast`; FIFO reuse), `max_size = 16`, `prepare_cached` |
//! | `bb8-postgres` | bb8 0.9 with bb8-postgres 0.9 at their defaults (`test_on_check_out`: an empty query on every checkout; FIFO reuse), `max_size = 16`; bb8-postgres has no statement cache, so its manager is wrapped to prepare the statement once when it connects ([`Bb8Prepared`]) |
//! | `slotpool-fifo` | at concurrency 1 only: the same pool with `queue_mode(QueueMode::Fifo)`, every idle connection in turn (deadpool's and bb8's order), so that the reuse order's effect is measured with everything else equal |
//! | `no-pool` | one dedicated connection per task, its statement prepared once: no pool at all, the limit |
//! | `no-pool-rotating` | at concurrency 1 only: no pool, each query on the next of 16 such connections in turn (what FIFO reuse does at one task, without a pool): tells the pool's cost apart from the effect of which backend answers |
//!
//! The `pool-only` cases, each pool of its own 16 connections (none of them shared with the
//! `select-1` pools), nothing prepared:
//!
//! | impl | what |
//! |---|---|
//! | `slotpool` | `slotpool::managed::Pool` of [`PgManager`] at its defaults, as above (`Recycling::Fast`: every checkout checks `is_closed`, in `Manager::recycle_now`, with no await), `max_size = 16` |
//! | `deadpool-postgres` | deadpool-postgres 0.14 at its defaults, as above: `RecyclingMethod::Fast`, which checks `is_closed` and runs no query, kept; `max_size = 16` |
//! | `bb8-postgres` | bb8 0.9 with bb8-postgres 0.9, `max_size = 16`, at their defaults except **`test_on_check_out(false)`**: bb8-postgres's check on checkout runs an empty query, a round trip the case is there to leave out (it measures the pool alone); bb8 still checks `is_closed` when the connection comes back |
//! | `asyncband` | asyncband 0.7's bounded pool (`pool::bounded::Pool`, `PoolConfig::new(16)`, its defaults otherwise: FIFO reuse, `is_recyclable` on every checkout) over [`AsyncbandPg`], whose `is_recyclable` checks `is_closed` (the check deadpool's and slotpool's fast recycling make) |
//! | `semaphore-mutex` | the pool a user writes by hand ([`SemaphoreMutex`]): a `tokio::sync::Semaphore` of 16 permits and the idle clients in a `std::sync::Mutex<Vec<Client>>`; get acquires a permit and pops a client (the last returned), the guard's drop pushes it back and then releases the permit; no health check |
//!
//! | case | what it measures |
//! |---|---|
//! | `postgres/select-1-concurrency-{1,16,64}` | that many tasks on a 2-worker runtime, each looping get → execute the prepared `SELECT 1` → return; ns per query (wall time over all queries: the inverse of throughput) and per-query latency percentiles (p50/p99/p999) and the longest |
//! | `postgres/pool-only-1-task` | one task on the same 2-worker runtime looping get → touch the `Client` → return, no query: ns per checkout and return |
//! | `postgres/pool-only-8-tasks` | 8 tasks on that runtime doing the same (16 connections: nobody waits, they contend); wall time over all checkouts |
//!
//! Every `select-1` pool has its 16 connections open, each with the statement prepared, before
//! timing; the no-pool side has 64; every `pool-only` pool has its 16 open (each opened through
//! its own get, `semaphore-mutex`'s connected directly). The server is a throwaway cluster that
//! [`Server::start`] starts through `bench/postgres/start.sh` (and stops through `stop.sh`
//! when dropped); where that script cannot start one (no server binaries on the machine),
//! [`compare`] says why and the cases are reported as skipped.
//!
//! What to expect: the pool's own work is about a percent of a `SELECT 1` round trip; which
//! connection comes back matters more. FIFO reuse (deadpool's and bb8's default) hands each
//! query to the connection that has been idle longest, whose backend has gone cold; slotpool
//! reuses the lowest idle connection, the one used last at concurrency 1. bb8's check on
//! checkout costs a round trip of its own.
//!
//! The runners are public so that the criterion bench (`benches/managed.rs`) times the same
//! code.

use std::future::Future;
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use asyncband::pool::{bounded, ManageObject, ObjectStatus};
use bb8_postgres::PostgresConnectionManager;
use hdrhistogram::Histogram;
use slotpool::managed::postgres::PgManager;
use slotpool::managed::{Pool, QueueMode};
use tokio::runtime::Runtime;
use tokio::sync::{Semaphore, SemaphorePermit};
use tokio_postgres::{Client, Config, NoTls, Row, Statement};

use crate::cases::client::{checkouts_spread, Checkout};
use crate::fixtures::{join_all, multi_thread, nanos};
use crate::report::{
    interleave, merge_waits, split, wait_histogram, Record, Runner, Sample, Settings,
};

/// Concurrency levels measured.
pub const CONCURRENCY: [usize; 3] = [1, 16, 64];
/// Connections in every pool.
pub const POOL_SIZE: usize = 16;
/// Worker threads of the callers' runtime.
pub const WORKERS: usize = 2;
/// The query every checkout runs, prepared once per connection.
pub const QUERY: &str = "SELECT 1";

/// The case name for `concurrency` callers.
pub fn case_name(concurrency: usize) -> String {
    format!("postgres/select-1-concurrency-{concurrency}")
}

/// Case name: one task, get and return a connection, no query.
pub const POOL_ONLY_1_TASK: &str = "postgres/pool-only-1-task";
/// Case name: 8 tasks, get and return a connection, no query.
pub const POOL_ONLY_8_TASKS: &str = "postgres/pool-only-8-tasks";
/// The `pool-only` cases as (name, tasks), in the order the comparison runs them.
pub const POOL_ONLY: [(&str, usize); 2] = [(POOL_ONLY_1_TASK, 1), (POOL_ONLY_8_TASKS, 8)];

/// Full-run checkouts per repeat of a `pool-only` case (all tasks together), scaled by
/// [`Settings::ops`].
pub const POOL_ONLY_OPS: u64 = 500_000;

/// Full-run queries per repeat (all tasks together), scaled by [`Settings::ops`]. Chosen so
/// the full comparison of the postgres cases takes about half a minute on the 2-core dev
/// machine.
pub fn full_ops(concurrency: usize) -> u64 {
    if concurrency == 1 {
        3_000
    } else {
        8_000
    }
}

// ---------------------------------------------------------------------------------------------
// The server
// ---------------------------------------------------------------------------------------------

/// A throwaway PostgreSQL cluster started through `bench/postgres/start.sh`; dropping it runs
/// `stop.sh`, which stops the server and removes its directory.
#[derive(Debug)]
pub struct Server {
    settings: String,
    state: PathBuf,
}

impl Server {
    /// `target/slotpool-bench/postgres` of the workspace: the benchmarks' own cluster, apart
    /// from one a test run started.
    pub fn default_state() -> PathBuf {
        let bench = Path::new(env!("CARGO_MANIFEST_DIR"));
        bench
            .parent()
            .unwrap_or(bench)
            .join("target")
            .join("slotpool-bench")
            .join("postgres")
    }

    /// Starts a cluster whose state lives in `state` (or finds the one running there).
    ///
    /// # Errors
    /// Why none could be started, in the script's words (no server binaries, say).
    pub fn start(state: &Path) -> Result<Self, String> {
        let script = Self::script("start.sh");
        let output = Command::new("bash")
            .arg(&script)
            .arg("--state")
            .arg(state)
            .output()
            .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
        let stderr = String::from_utf8_lossy(&output.stderr);
        if !output.status.success() {
            let reason = stderr.lines().last().unwrap_or("no message").trim();
            return Err(format!("{} failed: {reason}", script.display()));
        }
        let stdout = String::from_utf8_lossy(&output.stdout);
        let settings = stdout
            .lines()
            .find_map(|line| line.strip_prefix("SLOTPOOL_PG="))
            .ok_or_else(|| format!("{} printed no SLOTPOOL_PG line", script.display()))?
            .to_string();
        Ok(Self {
            settings,
            state: state.to_path_buf(),
        })
    }

    fn script(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("postgres")
            .join(name)
    }

    /// The connection string (`host=127.0.0.1 port=... user=... dbname=...`).
    pub fn settings(&self) -> &str {
        &self.settings
    }

    /// The connection settings, with `application_name` set to `name`.
    ///
    /// # Panics
    /// If the script printed a string tokio-postgres cannot parse.
    pub fn config(&self, name: &str) -> Config {
        let mut config: Config = self
            .settings
            .parse()
            .expect("start.sh prints a tokio-postgres connection string");
        config.application_name(name);
        config
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let script = Self::script("stop.sh");
        let stopped = Command::new("bash")
            .arg(&script)
            .arg("--state")
            .arg(&self.state)
            .output();
        match stopped {
            Ok(output) if output.status.success() => {}
            Ok(output) => eprintln!(
                "slotpool-bench: {} failed: {}",
                script.display(),
                String::from_utf8_lossy(&output.stderr).trim()
            ),
            Err(error) => eprintln!("slotpool-bench: cannot run {}: {error}", script.display()),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The implementations
// ---------------------------------------------------------------------------------------------

/// One query: get a connection, run the prepared `SELECT 1`, return the connection.
pub trait Select: Send + Sync + 'static {
    /// Runs one query for the caller numbered `task`.
    fn select(&self, task: usize) -> impl Future<Output = ()> + Send;
}

fn check(row: &Row) {
    debug_assert_eq!(row.get::<_, i32>(0), 1);
}

/// slotpool's managed pool of [`PgManager`] connections.
#[derive(Debug)]
pub struct Slotpool(pub Pool<PgManager>);

impl Select for Slotpool {
    async fn select(&self, _: usize) {
        let client = self
            .0
            .get()
            .await
            .expect("the bench server accepts connections");
        let statement = client.prepare_cached(QUERY).await.expect("prepares");
        check(&client.query_one(&statement, &[]).await.expect("answers"));
    }
}

/// deadpool-postgres's pool.
pub struct Deadpool(pub deadpool_postgres::Pool);

impl std::fmt::Debug for Deadpool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Deadpool").finish_non_exhaustive()
    }
}

impl Select for Deadpool {
    async fn select(&self, _: usize) {
        let client = self
            .0
            .get()
            .await
            .expect("the bench server accepts connections");
        let statement = client.prepare_cached(QUERY).await.expect("prepares");
        check(&client.query_one(&statement, &[]).await.expect("answers"));
    }
}

/// bb8-postgres's manager, preparing [`QUERY`] once when it connects (bb8-postgres keeps no
/// statement cache); its checks are bb8-postgres's own.
#[derive(Debug)]
pub struct Bb8Prepared(pub PostgresConnectionManager<NoTls>);

/// A bb8 connection with its prepared statement.
#[derive(Debug)]
pub struct Bb8Conn {
    /// The connection.
    pub client: Client,
    /// [`QUERY`], prepared on it.
    pub select: Statement,
}

impl bb8::ManageConnection for Bb8Prepared {
    type Connection = Bb8Conn;
    type Error = tokio_postgres::Error;

    async fn connect(&self) -> Result<Bb8Conn, tokio_postgres::Error> {
        let client = self.0.connect().await?;
        let select = client.prepare(QUERY).await?;
        Ok(Bb8Conn { client, select })
    }

    async fn is_valid(&self, conn: &mut Bb8Conn) -> Result<(), tokio_postgres::Error> {
        self.0.is_valid(&mut conn.client).await
    }

    fn has_broken(&self, conn: &mut Bb8Conn) -> bool {
        self.0.has_broken(&mut conn.client)
    }
}

/// bb8's pool over [`Bb8Prepared`].
pub struct Bb8(pub bb8::Pool<Bb8Prepared>);

impl std::fmt::Debug for Bb8 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bb8").finish_non_exhaustive()
    }
}

impl Select for Bb8 {
    async fn select(&self, _: usize) {
        let conn = self
            .0
            .get()
            .await
            .expect("the bench server accepts connections");
        check(
            &conn
                .client
                .query_one(&conn.select, &[])
                .await
                .expect("answers"),
        );
    }
}

/// One connection per task, each with [`QUERY`] prepared: no pool.
#[derive(Debug)]
pub struct NoPool(pub Vec<(Client, Statement)>);

impl Select for NoPool {
    async fn select(&self, task: usize) {
        let (client, statement) = &self.0[task % self.0.len()];
        check(&client.query_one(statement, &[]).await.expect("answers"));
    }
}

/// One caller's queries on [`POOL_SIZE`] dedicated connections in turn (the first ones of a
/// [`NoPool`]): FIFO reuse at concurrency 1, without a pool.
#[derive(Debug)]
pub struct Rotating {
    connections: Arc<NoPool>,
    next: std::sync::atomic::AtomicUsize,
}

impl Rotating {
    /// Turns over the first [`POOL_SIZE`] connections of `connections`.
    pub fn new(connections: Arc<NoPool>) -> Self {
        Rotating {
            connections,
            next: std::sync::atomic::AtomicUsize::new(0),
        }
    }
}

impl Select for Rotating {
    async fn select(&self, _: usize) {
        let turn = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let in_use = self.connections.0.len().clamp(1, POOL_SIZE);
        self.connections.select(turn % in_use).await;
    }
}

// ---------------------------------------------------------------------------------------------
// The pool-only implementations: get, touch the client, return it
// ---------------------------------------------------------------------------------------------

impl Checkout for Slotpool {
    async fn checkout(&self) {
        let client = self
            .0
            .get()
            .await
            .expect("the bench server accepts connections");
        black_box::<&Client>(&client);
    }
}

impl Checkout for Deadpool {
    async fn checkout(&self) {
        let client = self
            .0
            .get()
            .await
            .expect("the bench server accepts connections");
        black_box::<&Client>(&client);
    }
}

/// bb8-postgres's pool of plain clients, without the check on checkout.
pub struct Bb8Plain(pub bb8::Pool<PostgresConnectionManager<NoTls>>);

impl std::fmt::Debug for Bb8Plain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bb8Plain").finish_non_exhaustive()
    }
}

impl Checkout for Bb8Plain {
    async fn checkout(&self) {
        let client = self
            .0
            .get()
            .await
            .expect("the bench server accepts connections");
        black_box::<&Client>(&client);
    }
}

/// Why [`AsyncbandPg`] could not hand out a connection.
#[derive(Debug)]
pub enum AsyncbandPgError {
    /// Connecting failed.
    Connect(tokio_postgres::Error),
    /// The connection is closed: not recyclable.
    Closed,
}

/// An asyncband manager of tokio-postgres connections, as its users write one: connect and
/// spawn the connection's task; an idle connection is recyclable unless it is closed.
#[derive(Debug)]
pub struct AsyncbandPgManager(pub Config);

impl ManageObject for AsyncbandPgManager {
    type Object = Client;
    type Error = AsyncbandPgError;

    async fn create(&self) -> Result<Client, AsyncbandPgError> {
        let (client, connection) = self
            .0
            .connect(NoTls)
            .await
            .map_err(AsyncbandPgError::Connect)?;
        tokio::spawn(connection);
        Ok(client)
    }

    async fn is_recyclable(
        &self,
        client: &mut Client,
        _: &ObjectStatus,
    ) -> Result<(), AsyncbandPgError> {
        if client.is_closed() {
            Err(AsyncbandPgError::Closed)
        } else {
            Ok(())
        }
    }
}

/// asyncband 0.7's bounded pool of [`AsyncbandPgManager`] connections.
pub struct AsyncbandPg(pub Arc<bounded::Pool<AsyncbandPgManager>>);

impl std::fmt::Debug for AsyncbandPg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncbandPg").finish_non_exhaustive()
    }
}

impl Checkout for AsyncbandPg {
    async fn checkout(&self) {
        let client = self
            .0
            .get()
            .await
            .expect("the bench server accepts connections");
        black_box::<&Client>(&client);
    }
}

/// The pool a user writes by hand: a semaphore with a permit per connection and the idle
/// connections in a locked `Vec`. Holding a permit means a connection is idle for its holder.
#[derive(Debug)]
pub struct SemaphoreMutex {
    permits: Semaphore,
    idle: Mutex<Vec<Client>>,
}

/// A connection out of a [`SemaphoreMutex`]: pushed back, then its permit released, on drop.
#[derive(Debug)]
pub struct Borrowed<'a> {
    client: Option<Client>,
    idle: &'a Mutex<Vec<Client>>,
    _permit: SemaphorePermit<'a>,
}

impl SemaphoreMutex {
    /// A pool of `clients`, all idle.
    pub fn new(clients: Vec<Client>) -> Self {
        SemaphoreMutex {
            permits: Semaphore::new(clients.len()),
            idle: Mutex::new(clients),
        }
    }

    /// Waits for a permit, then takes the connection returned last.
    pub async fn get(&self) -> Borrowed<'_> {
        let permit = self.permits.acquire().await.expect("never closed");
        let client = self
            .idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop()
            .expect("a permit stands for an idle connection");
        Borrowed {
            client: Some(client),
            idle: &self.idle,
            _permit: permit,
        }
    }

    /// Connections idle now.
    pub fn idle(&self) -> usize {
        self.idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

impl std::ops::Deref for Borrowed<'_> {
    type Target = Client;
    fn deref(&self) -> &Client {
        self.client.as_ref().expect("present until dropped")
    }
}

impl Drop for Borrowed<'_> {
    fn drop(&mut self) {
        if let Some(client) = self.client.take() {
            self.idle
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(client);
        }
        // `_permit` is released after this, when the fields drop: the connection is back first.
    }
}

impl Checkout for SemaphoreMutex {
    async fn checkout(&self) {
        let client = self.get().await;
        black_box::<&Client>(&client);
    }
}

/// The `pool-only` cases' pools, each with its own 16 connections open and idle.
#[derive(Debug)]
pub struct PoolOnly {
    /// slotpool's pool at its defaults.
    pub slotpool: Arc<Slotpool>,
    /// deadpool-postgres at its defaults.
    pub deadpool: Arc<Deadpool>,
    /// bb8-postgres without the check on checkout.
    pub bb8: Arc<Bb8Plain>,
    /// asyncband's bounded pool at its defaults.
    pub asyncband: Arc<AsyncbandPg>,
    /// The hand-rolled semaphore and mutex.
    pub semaphore_mutex: Arc<SemaphoreMutex>,
}

impl PoolOnly {
    /// Opens every pool's 16 connections (call within the callers' runtime: the connections'
    /// tasks run on it).
    ///
    /// # Panics
    /// If the server refuses a connection.
    pub async fn open(server: &Server) -> Self {
        PoolOnly {
            slotpool: Arc::new(pool_only_slotpool(server).await),
            deadpool: Arc::new(pool_only_deadpool(server).await),
            bb8: Arc::new(pool_only_bb8(server).await),
            asyncband: Arc::new(pool_only_asyncband(server).await),
            semaphore_mutex: Arc::new(semaphore_mutex(server).await),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Building blocks
// ---------------------------------------------------------------------------------------------

/// The server, the four implementations and the callers' runtime. Fields drop in order: the
/// pools and connections, the runtime (their connection tasks), then the server.
#[derive(Debug)]
pub struct Pg {
    /// slotpool's pool.
    pub slotpool: Arc<Slotpool>,
    /// slotpool's pool taking each idle connection in turn.
    pub slotpool_fifo: Arc<Slotpool>,
    /// deadpool-postgres.
    pub deadpool: Arc<Deadpool>,
    /// bb8-postgres.
    pub bb8: Arc<Bb8>,
    /// One connection per task, for the largest concurrency.
    pub no_pool: Arc<NoPool>,
    /// The first [`POOL_SIZE`] of those in turn, for one caller.
    pub rotating: Arc<Rotating>,
    /// The `pool-only` cases' pools, 16 connections each of their own.
    pub pool_only: PoolOnly,
    /// The callers' runtime ([`WORKERS`] workers); the connections' tasks run on it too.
    pub rt: Runtime,
    /// The server.
    pub server: Server,
}

impl Pg {
    /// Starts a server (see [`Server::start`]) and opens every implementation's connections:
    /// the `select-1` ones each with the statement prepared, then the `pool-only` ones.
    ///
    /// # Errors
    /// Why no server could be started.
    ///
    /// # Panics
    /// If the server, once started, refuses a connection or a statement.
    pub fn start(state: &Path) -> Result<Self, String> {
        let server = Server::start(state)?;
        let rt = multi_thread(WORKERS);
        let (slotpool, slotpool_fifo, deadpool, bb8, no_pool, pool_only) = rt.block_on(async {
            (
                slotpool(&server).await,
                slotpool_in_order(&server, "slotpool-bench-slotpool-fifo", QueueMode::Fifo).await,
                deadpool(&server).await,
                bb8(&server).await,
                no_pool(&server, max_concurrency()).await,
                PoolOnly::open(&server).await,
            )
        });
        let no_pool = Arc::new(no_pool);
        Ok(Self {
            slotpool: Arc::new(slotpool),
            slotpool_fifo: Arc::new(slotpool_fifo),
            deadpool: Arc::new(deadpool),
            bb8: Arc::new(bb8),
            rotating: Arc::new(Rotating::new(Arc::clone(&no_pool))),
            no_pool,
            pool_only,
            rt,
            server,
        })
    }
}

fn max_concurrency() -> usize {
    CONCURRENCY.into_iter().max().unwrap_or(1)
}

/// slotpool's pool with its 16 connections open and the statement prepared on each.
pub async fn slotpool(server: &Server) -> Slotpool {
    slotpool_in_order(server, "slotpool-bench-slotpool", QueueMode::default()).await
}

/// [`slotpool`] with the given reuse order, its connections named `name` on the server.
pub async fn slotpool_in_order(server: &Server, name: &str, queue_mode: QueueMode) -> Slotpool {
    let manager = PgManager::new(server.config(name));
    let pool = Pool::builder(manager)
        .max_size(POOL_SIZE)
        .queue_mode(queue_mode)
        .build()
        .expect("valid bench configuration");
    let mut held = Vec::new();
    for _ in 0..POOL_SIZE {
        let client = pool
            .get()
            .await
            .expect("the bench server accepts connections");
        client.prepare_cached(QUERY).await.expect("prepares");
        held.push(client);
    }
    drop(held);
    assert_eq!(pool.status().available, POOL_SIZE);
    Slotpool(pool)
}

/// deadpool-postgres's pool with its 16 connections open and the statement prepared on each.
pub async fn deadpool(server: &Server) -> Deadpool {
    let manager = deadpool_postgres::Manager::new(server.config("slotpool-bench-deadpool"), NoTls);
    let pool = deadpool_postgres::Pool::builder(manager)
        .max_size(POOL_SIZE)
        .build()
        .expect("valid bench configuration");
    let mut held = Vec::new();
    for _ in 0..POOL_SIZE {
        let client = pool
            .get()
            .await
            .expect("the bench server accepts connections");
        client.prepare_cached(QUERY).await.expect("prepares");
        held.push(client);
    }
    drop(held);
    assert_eq!(pool.status().available, POOL_SIZE);
    Deadpool(pool)
}

/// bb8's pool with its 16 connections open, each with the statement prepared.
pub async fn bb8(server: &Server) -> Bb8 {
    let manager = Bb8Prepared(PostgresConnectionManager::new(
        server.config("slotpool-bench-bb8"),
        NoTls,
    ));
    let pool = bb8::Pool::builder()
        .max_size(POOL_SIZE as u32)
        .build(manager)
        .await
        .expect("the bench server accepts connections");
    let mut held = Vec::new();
    for _ in 0..POOL_SIZE {
        held.push(
            pool.get()
                .await
                .expect("the bench server accepts connections"),
        );
    }
    drop(held);
    assert_eq!(pool.state().idle_connections, POOL_SIZE as u32);
    Bb8(pool)
}

/// `connections` connections, each with the statement prepared.
pub async fn no_pool(server: &Server, connections: usize) -> NoPool {
    let config = server.config("slotpool-bench-no-pool");
    let mut all = Vec::with_capacity(connections);
    for _ in 0..connections {
        let (client, connection) = config
            .connect(NoTls)
            .await
            .expect("the bench server accepts connections");
        tokio::spawn(connection);
        let statement = client.prepare(QUERY).await.expect("prepares");
        all.push((client, statement));
    }
    NoPool(all)
}

/// slotpool's pool at its defaults with its 16 connections open, nothing prepared.
pub async fn pool_only_slotpool(server: &Server) -> Slotpool {
    let manager = PgManager::new(server.config("slotpool-bench-pool-only-slotpool"));
    let pool = Pool::builder(manager)
        .max_size(POOL_SIZE)
        .build()
        .expect("valid bench configuration");
    let mut held = Vec::new();
    for _ in 0..POOL_SIZE {
        held.push(
            pool.get()
                .await
                .expect("the bench server accepts connections"),
        );
    }
    drop(held);
    assert_eq!(pool.status().available, POOL_SIZE);
    Slotpool(pool)
}

/// deadpool-postgres's pool at its defaults (`RecyclingMethod::Fast`) with its 16 connections
/// open, nothing prepared.
pub async fn pool_only_deadpool(server: &Server) -> Deadpool {
    let manager =
        deadpool_postgres::Manager::new(server.config("slotpool-bench-pool-only-deadpool"), NoTls);
    let pool = deadpool_postgres::Pool::builder(manager)
        .max_size(POOL_SIZE)
        .build()
        .expect("valid bench configuration");
    let mut held = Vec::new();
    for _ in 0..POOL_SIZE {
        held.push(
            pool.get()
                .await
                .expect("the bench server accepts connections"),
        );
    }
    drop(held);
    assert_eq!(pool.status().available, POOL_SIZE);
    Deadpool(pool)
}

/// bb8-postgres's pool without the check on checkout (an empty query), its 16 connections
/// open.
pub async fn pool_only_bb8(server: &Server) -> Bb8Plain {
    let manager =
        PostgresConnectionManager::new(server.config("slotpool-bench-pool-only-bb8"), NoTls);
    let pool = bb8::Pool::builder()
        .max_size(POOL_SIZE as u32)
        .test_on_check_out(false)
        .build(manager)
        .await
        .expect("the bench server accepts connections");
    let mut held = Vec::new();
    for _ in 0..POOL_SIZE {
        held.push(
            pool.get()
                .await
                .expect("the bench server accepts connections"),
        );
    }
    drop(held);
    assert_eq!(pool.state().idle_connections, POOL_SIZE as u32);
    Bb8Plain(pool)
}

/// asyncband's bounded pool at its defaults with its 16 connections open.
pub async fn pool_only_asyncband(server: &Server) -> AsyncbandPg {
    let manager = AsyncbandPgManager(server.config("slotpool-bench-pool-only-asyncband"));
    let pool = bounded::Pool::new(bounded::PoolConfig::new(POOL_SIZE), manager);
    let mut held = Vec::new();
    for _ in 0..POOL_SIZE {
        held.push(
            pool.get()
                .await
                .expect("the bench server accepts connections"),
        );
    }
    drop(held);
    let status = pool.status();
    assert_eq!(
        (status.current_size, status.idle_count),
        (POOL_SIZE, POOL_SIZE)
    );
    AsyncbandPg(pool)
}

/// The hand-rolled pool with its 16 connections open.
pub async fn semaphore_mutex(server: &Server) -> SemaphoreMutex {
    let config = server.config("slotpool-bench-pool-only-semaphore-mutex");
    let mut clients = Vec::with_capacity(POOL_SIZE);
    for _ in 0..POOL_SIZE {
        let (client, connection) = config
            .connect(NoTls)
            .await
            .expect("the bench server accepts connections");
        tokio::spawn(connection);
        clients.push(client);
    }
    let pool = SemaphoreMutex::new(clients);
    assert_eq!(pool.idle(), POOL_SIZE);
    pool
}

// ---------------------------------------------------------------------------------------------
// Runners
// ---------------------------------------------------------------------------------------------

/// `tasks` tasks (task `i` is caller `i`), each running `per_task` queries back to back through
/// `pool`; wall time for all and every query's latency (get, execute, return). Call within the
/// callers' runtime.
pub async fn run<P: Select>(
    pool: &Arc<P>,
    tasks: usize,
    per_task: u64,
) -> (Duration, Histogram<u64>) {
    // Made before the clock starts, merged after it stops: work of the bench, not the pools.
    let histograms: Vec<_> = (0..tasks).map(|_| wait_histogram()).collect();
    let start = Instant::now();
    let handles = histograms
        .into_iter()
        .enumerate()
        .map(|(task, mut latencies)| {
            let pool = Arc::clone(pool);
            tokio::spawn(async move {
                for _ in 0..per_task {
                    let asked = Instant::now();
                    pool.select(task).await;
                    latencies.saturating_record(nanos(asked.elapsed()));
                }
                latencies
            })
        })
        .collect();
    let histograms = join_all(handles).await;
    let elapsed = start.elapsed();
    (elapsed, merge_waits(histograms))
}

/// `tasks` tasks on the callers' runtime sharing about `ops` checkouts through `pool`: the
/// checkouts done and the wall time for all.
pub fn checkouts_on(
    rt: &Runtime,
    pool: &Arc<impl Checkout>,
    tasks: usize,
    ops: u64,
) -> (u64, Duration) {
    let (per, done) = split(ops, tasks);
    (done, rt.block_on(checkouts_spread(pool, tasks, per)))
}

/// Runs [`checkouts_on`] on `pool` with `tasks` tasks.
fn checkout_runner<'a, P: Checkout>(
    rt: &'a Runtime,
    pool: &'a Arc<P>,
    tasks: usize,
) -> Box<dyn FnMut(u64) -> Sample + 'a> {
    Box::new(move |ops| {
        let (done, elapsed) = checkouts_on(rt, pool, tasks, ops);
        Sample::timed(done, elapsed)
    })
}

/// Runs [`run`] on `pool` with `tasks` tasks sharing about `ops` queries.
fn runner<'a, P: Select>(
    rt: &'a Runtime,
    pool: &'a Arc<P>,
    tasks: usize,
) -> Box<dyn FnMut(u64) -> Sample + 'a> {
    Box::new(move |ops| {
        let per = (ops / tasks as u64).max(1);
        let (elapsed, latencies) = rt.block_on(run(pool, tasks, per));
        Sample {
            ops: per * tasks as u64,
            elapsed,
            waits: Some(latencies),
        }
    })
}

// ---------------------------------------------------------------------------------------------
// The comparison
// ---------------------------------------------------------------------------------------------

/// Every postgres case against a server of its own (started in [`Server::default_state`],
/// stopped at the end).
///
/// # Errors
/// Why no server could be started: the cases are skipped.
pub fn compare(settings: &Settings) -> Result<Vec<Record>, String> {
    compare_only(settings, |_| true)
}

/// The postgres cases whose name `want` accepts (none: no server is started).
///
/// # Errors
/// Why no server could be started: the cases are skipped.
pub fn compare_only(
    settings: &Settings,
    want: impl Fn(&str) -> bool,
) -> Result<Vec<Record>, String> {
    let wanted: Vec<usize> = CONCURRENCY
        .into_iter()
        .filter(|&c| want(&case_name(c)))
        .collect();
    let pool_only: Vec<(&str, usize)> = POOL_ONLY
        .into_iter()
        .filter(|(name, _)| want(name))
        .collect();
    if wanted.is_empty() && pool_only.is_empty() {
        return Ok(Vec::new());
    }
    let pg = Pg::start(&Server::default_state())?;
    let mut records: Vec<Record> = wanted
        .into_iter()
        .flat_map(|concurrency| case(&pg, concurrency, settings))
        .collect();
    for (name, tasks) in pool_only {
        records.extend(pool_only_case(&pg, name, tasks, settings));
    }
    Ok(records)
}

fn case(pg: &Pg, concurrency: usize, settings: &Settings) -> Vec<Record> {
    let tasks = concurrency;
    let per_task = (settings.ops(full_ops(concurrency), 1) / tasks as u64).max(2);
    let ops = per_task * tasks as u64;
    let rt = &pg.rt;
    let mut impls: Vec<Runner<'_>> = vec![
        ("slotpool", runner(rt, &pg.slotpool, tasks)),
        ("deadpool-postgres", runner(rt, &pg.deadpool, tasks)),
        ("bb8-postgres", runner(rt, &pg.bb8, tasks)),
        ("no-pool", runner(rt, &pg.no_pool, tasks)),
    ];
    if concurrency == 1 {
        impls.push(("slotpool-fifo", runner(rt, &pg.slotpool_fifo, tasks)));
        impls.push(("no-pool-rotating", runner(rt, &pg.rotating, tasks)));
    }
    interleave(&case_name(concurrency), ops, settings, impls)
}

fn pool_only_case(pg: &Pg, name: &str, tasks: usize, settings: &Settings) -> Vec<Record> {
    let ops = split(settings.ops(POOL_ONLY_OPS, 1_000), tasks).1;
    let (rt, p) = (&pg.rt, &pg.pool_only);
    let impls: Vec<Runner<'_>> = vec![
        ("slotpool", checkout_runner(rt, &p.slotpool, tasks)),
        ("deadpool-postgres", checkout_runner(rt, &p.deadpool, tasks)),
        ("bb8-postgres", checkout_runner(rt, &p.bb8, tasks)),
        ("asyncband", checkout_runner(rt, &p.asyncband, tasks)),
        (
            "semaphore-mutex",
            checkout_runner(rt, &p.semaphore_mutex, tasks),
        ),
    ];
    interleave(name, ops, settings, impls)
}
