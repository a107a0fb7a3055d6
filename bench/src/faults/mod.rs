//! The fault bench (`slotpool-bench --faults`): what each PostgreSQL pool does to its callers
//! when the server misbehaves under load, and whether it accounts for every connection
//! afterwards; then the same for the stream pool over tonic when its peer is killed,
//! blackholed or slowed, beside R1's ([`tonic`], `faults/tonic-*`).
//!
//! 16 tasks run `SELECT 1` back to back through a pool of 16, one implementation at a time,
//! against a throwaway server of the bench's own ([`Cluster::start`]); a fault is injected
//! after a steady stretch ([`Timing::pre`]), and the load goes on for [`Timing::post`] after
//! the fault ends.
//!
//! | case | the fault | it ends when |
//! |---|---|---|
//! | `faults/postgres-restart` | the server restarted (`pg_ctl restart -m fast`: every backend terminated, the server down for the restart) | the server accepts connections again |
//! | `faults/postgres-terminate` | every backend of the pool terminated with `pg_terminate_backend` | their processes are gone |
//! | `faults/postgres-outage` | the server stopped (fast), then after [`OUTAGE`] started again on its port | the server accepts connections again |
//! | `faults/postgres-blackhole` | the pool reaches the server through an in-process TCP proxy ([`proxy`]) that stops forwarding for [`BLACKHOLE`], closing nothing | forwarding resumes |
//! | `faults/postgres-slow` | for [`Timing::slow_for`], one query in [`SLOW_EVERY`] (5%) is `SELECT pg_sleep(0.2)` | the window ends |
//!
//! | impl | pool |
//! |---|---|
//! | `slotpool` | `slotpool::managed::Pool` of `PgManager` at its defaults, `max_size = 16`; each get is `get_timeout(1 s)` |
//! | `deadpool-postgres` | deadpool-postgres 0.14 at its defaults, `max_size = 16`, each get `timeout_get` with `wait`, `create` and `recycle` all 1 s (deadpool's deadlines are per step) |
//! | `bb8-postgres` | bb8 0.9 / bb8-postgres 0.9 at their defaults (`test_on_check_out`, `retry_connection`), `max_size = 16`, `connection_timeout(1 s)` (bb8's deadline on `get`) |
//!
//! Every pool's manager is wrapped in a [`Counted`] one, which counts connection attempts
//! and the connections that exist. Each caller gives the get [`GET_DEADLINE`] and the query
//! [`QUERY_DEADLINE`] (a `tokio::time::timeout` around it); after a failed operation it
//! pauses [`ERROR_PAUSE`] (a service answering an error does not get the next request in the
//! same microsecond), after a success it goes straight on.
//!
//! # What a record says ([`FaultRecord`])
//!
//! * `failed`: operations that returned an error (the get or the query).
//! * `late`: operations that ended past their caller's deadline: a get that took longer than
//!   [`GET_DEADLINE`], or a query longer than [`QUERY_DEADLINE`], by more than [`GRACE`]
//!   (the timers' and the 2-core machine's scheduling slack).
//! * `leaked`: once the load stops and every object is back (the pool settles: nothing in use,
//!   up to [`SETTLE`]): connections the pool counts beyond those its manager holds open (or
//!   the other way round), plus objects it still counts in use, plus units of capacity not
//!   returned (the pool is then asked for all 16 objects at once; each one it cannot give is
//!   a unit lost), plus the first difference again after that. Must be 0.
//! * `recovery_ns`: from the fault's end to the end of the first successful operation after it.
//! * `full_ns`: from the fault's end to the start of the first [`WINDOW`] whose successes
//!   reach 90% of the pre-fault rate (measured over the steady stretch, less its first
//!   [`WARMUP`]).
//! * `connects`: connection attempts from the fault's start to its end, or to the first
//!   success after it if that is later (for the instant faults, the reconnection).
//! * `peak_backends`: the most backends the server showed for the pool's `application_name`
//!   (sampled every [`SAMPLE_EVERY`] on a connection of its own).
//!
//! The tonic scenarios fill in the same record, with their own accounting, connection count
//! and peak (see [`tonic`]).
//!
//! The bench checks slotpool's records: a `leaked` above 0 fails the run. The tests
//! (`tests/faults.rs`) run the scenarios that take seconds through the same [`run`] and
//! [`tonic::run`].
//!
//! | file | owns |
//! |---|---|
//! | `mod.rs` | the PostgreSQL scenarios and their accounting, the records, the bench and its table |
//! | `measure.rs` | what every scenario measures: the callers, the fault between two stretches of load, and the timeline (failures, late callers, recovery, return to full throughput) |
//! | `tonic.rs` | the tonic scenarios: the two stream pool stacks, their operation and accounting |
//! | `proxy.rs` | the blackhole proxy (also the tonic scenarios' connection counter) |
//! | `counted.rs` | the counting manager wrapper |
//! | `pools.rs` | the three pools, built over [`Counted`] managers, and one operation on each |

pub mod counted;
mod measure;
mod pools;
pub mod proxy;
pub mod tonic;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::runtime::Runtime;
use tokio_postgres::{Config, NoTls};

use crate::cases::postgres::{Server, POOL_SIZE, WORKERS};
use crate::fixtures::multi_thread;

pub use counted::{Counted, Counts, Tracked};
pub use pools::{FaultPool, Gauges, Outcome};
pub use proxy::Proxy;

use measure::Done;

/// Tasks running queries.
pub const TASKS: usize = 16;
/// Each caller's deadline for a get.
pub const GET_DEADLINE: Duration = Duration::from_secs(1);
/// Each caller's deadline for its query (a timeout around it).
pub const QUERY_DEADLINE: Duration = Duration::from_secs(1);
/// Slack past a deadline before an operation counts as late: timer granularity and the
/// scheduling of 2 workers that share the machine with the server.
pub const GRACE: Duration = Duration::from_millis(100);
/// A caller's pause after a failed operation.
pub const ERROR_PAUSE: Duration = Duration::from_millis(10);
/// How long the server is down in `faults/postgres-outage`.
pub const OUTAGE: Duration = Duration::from_secs(3);
/// How long the proxy holds everything in `faults/postgres-blackhole`.
pub const BLACKHOLE: Duration = Duration::from_secs(2);
/// In `faults/postgres-slow`, one query in this many is [`SLOW_QUERY`] (5%).
pub const SLOW_EVERY: u64 = 20;
/// The slow query: 200 ms on the server.
pub const SLOW_QUERY: &str = "SELECT pg_sleep(0.2)";
/// The longest the pool may take, after the load stops, to have every object back.
pub const SETTLE: Duration = Duration::from_secs(5);
/// The throughput window of `full_ns`.
pub const WINDOW: Duration = Duration::from_millis(250);
/// The start of the steady stretch left out of the pre-fault rate.
pub const WARMUP: Duration = Duration::from_millis(300);
/// How often the server's backends are counted.
pub const SAMPLE_EVERY: Duration = Duration::from_millis(50);

// ---------------------------------------------------------------------------------------------
// Scenarios, implementations, timing
// ---------------------------------------------------------------------------------------------

/// A fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    /// The server restarted.
    Restart,
    /// Every pooled backend terminated.
    Terminate,
    /// The server stopped for [`OUTAGE`], then started.
    Outage,
    /// The proxy holds everything for [`BLACKHOLE`].
    Blackhole,
    /// 5% of queries take 200 ms, for [`Timing::slow_for`].
    Slow,
}

impl Scenario {
    /// Every scenario, in the order the bench runs them.
    pub const ALL: [Scenario; 5] = [
        Scenario::Restart,
        Scenario::Terminate,
        Scenario::Outage,
        Scenario::Blackhole,
        Scenario::Slow,
    ];

    /// The case name, `faults/postgres-...`.
    pub fn case(self) -> &'static str {
        match self {
            Scenario::Restart => "faults/postgres-restart",
            Scenario::Terminate => "faults/postgres-terminate",
            Scenario::Outage => "faults/postgres-outage",
            Scenario::Blackhole => "faults/postgres-blackhole",
            Scenario::Slow => "faults/postgres-slow",
        }
    }

    fn short(self) -> &'static str {
        self.case().trim_start_matches("faults/postgres-")
    }

    /// Whether it stops the server: it needs a [`Cluster`] of its own.
    pub fn stops_server(self) -> bool {
        matches!(self, Scenario::Restart | Scenario::Outage)
    }
}

/// A pool under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Impl {
    /// slotpool's managed pool of `PgManager`.
    Slotpool,
    /// deadpool-postgres.
    Deadpool,
    /// bb8-postgres.
    Bb8,
}

impl Impl {
    /// Every implementation, in the order the bench runs them.
    pub const ALL: [Impl; 3] = [Impl::Slotpool, Impl::Deadpool, Impl::Bb8];

    /// The name in the records.
    pub fn name(self) -> &'static str {
        match self {
            Impl::Slotpool => "slotpool",
            Impl::Deadpool => "deadpool-postgres",
            Impl::Bb8 => "bb8-postgres",
        }
    }
}

/// How long each stretch of a run lasts.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// Steady load before the fault (the pre-fault rate is measured here, after [`WARMUP`]).
    pub pre: Duration,
    /// Load after the fault ends.
    pub post: Duration,
    /// How long `faults/postgres-slow` slows queries, and `faults/tonic-slow` requests.
    pub slow_for: Duration,
    /// How long the tonic peer is down in `faults/tonic-kill` and silenced in
    /// `faults/tonic-blackhole` (the PostgreSQL scenarios keep [`OUTAGE`] and [`BLACKHOLE`]).
    pub peer_down: Duration,
}

impl Timing {
    /// The bench's default: all 21 runs in about two and a half minutes.
    pub fn full() -> Self {
        Self {
            pre: Duration::from_millis(1500),
            post: Duration::from_secs(3),
            slow_for: Duration::from_secs(3),
            peer_down: Duration::from_secs(2),
        }
    }

    /// `--quick`, and the tests.
    pub fn quick() -> Self {
        Self {
            pre: Duration::from_secs(1),
            post: Duration::from_millis(1500),
            slow_for: Duration::from_secs(1),
            peer_down: Duration::from_secs(2),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The server
// ---------------------------------------------------------------------------------------------

/// The server a run goes against: one of the bench's own (it may be stopped and restarted),
/// or one given by its settings (only the faults that leave the server up may run there).
#[derive(Debug)]
pub struct Cluster {
    settings: String,
    /// The state directory of a server started here; `None` for one given.
    state: Option<PathBuf>,
    /// Stops the server started here when the cluster is dropped.
    _server: Option<Server>,
}

impl Cluster {
    /// `target/slotpool-bench/postgres-faults` of the workspace: apart from the `postgres/`
    /// cases' server, since these runs stop theirs.
    pub fn default_state() -> PathBuf {
        let bench = Path::new(env!("CARGO_MANIFEST_DIR"));
        bench
            .parent()
            .unwrap_or(bench)
            .join("target")
            .join("slotpool-bench")
            .join("postgres-faults")
    }

    /// Starts a server whose state lives in `state` (`bench/postgres/start.sh`); it is
    /// stopped and removed when the cluster is dropped.
    ///
    /// # Errors
    /// Why none could be started.
    pub fn start(state: &Path) -> Result<Self, String> {
        let server = Server::start(state)?;
        Ok(Self {
            settings: server.settings().to_string(),
            state: Some(state.to_path_buf()),
            _server: Some(server),
        })
    }

    /// A server someone else runs (`SLOTPOOL_PG`): never stopped from here.
    pub fn given(settings: &str) -> Self {
        Self {
            settings: settings.to_string(),
            state: None,
            _server: None,
        }
    }

    /// The connection settings with `application_name` set to `name`.
    ///
    /// # Panics
    /// If the settings do not parse.
    pub fn config(&self, name: &str) -> Config {
        let mut config: Config = self
            .settings
            .parse()
            .expect("a tokio-postgres connection string");
        config.application_name(name);
        config
    }

    /// The same settings with the port replaced by `addr`'s (the proxy's).
    fn config_via(&self, addr: SocketAddr, name: &str) -> Config {
        let settings: Vec<String> = self
            .settings
            .split_whitespace()
            .map(|kv| match kv.split_once('=') {
                Some(("port", _)) => format!("port={}", addr.port()),
                Some(("host", _)) => format!("host={}", addr.ip()),
                _ => kv.to_string(),
            })
            .collect();
        let mut config: Config = settings
            .join(" ")
            .parse()
            .expect("a tokio-postgres connection string");
        config.application_name(name);
        config
    }

    /// The server's address, for the proxy.
    fn addr(&self) -> SocketAddr {
        let config = self.config("slotpool-faults-admin");
        let host = match config.get_hosts().first() {
            Some(tokio_postgres::config::Host::Tcp(host)) => host.clone(),
            _ => "127.0.0.1".to_string(),
        };
        let port = config.get_ports().first().copied().unwrap_or(5432);
        format!("{host}:{port}")
            .parse()
            .expect("the bench server's host is an IP address")
    }

    /// Runs `bench/postgres/ctl.sh action` on this cluster.
    fn ctl(&self, action: &str) -> Result<(), String> {
        let state = self
            .state
            .as_ref()
            .ok_or_else(|| format!("{action}: a given server is never stopped from here"))?;
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("postgres/ctl.sh");
        let output = Command::new("bash")
            .arg(&script)
            .arg(action)
            .arg("--state")
            .arg(state)
            .output()
            .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
        if output.status.success() {
            Ok(())
        } else {
            Err(format!(
                "ctl.sh {action} failed: {}",
                String::from_utf8_lossy(&output.stderr).trim()
            ))
        }
    }
}

/// A connection outside every pool, for looking at (and terminating) backends.
async fn admin(cluster: &Cluster) -> Result<tokio_postgres::Client, tokio_postgres::Error> {
    let (client, connection) = cluster
        .config("slotpool-faults-admin")
        .connect(NoTls)
        .await?;
    tokio::spawn(connection);
    Ok(client)
}

/// Backends the server has open for `name`.
async fn backends(
    admin: &tokio_postgres::Client,
    name: &str,
) -> Result<i64, tokio_postgres::Error> {
    admin
        .query_one(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1",
            &[&name],
        )
        .await
        .map(|row| row.get(0))
}

/// Counts `name`'s backends every [`SAMPLE_EVERY`] until `stop`; the most seen. Reconnects
/// when the server went away.
async fn sample_backends(cluster: Arc<Cluster>, name: String, stop: Arc<AtomicBool>) -> i64 {
    let mut peak = 0;
    let mut client = None;
    while !stop.load(Ordering::Relaxed) {
        if client.is_none() {
            client = tokio::time::timeout(Duration::from_millis(500), admin(&cluster))
                .await
                .ok()
                .and_then(Result::ok);
        }
        if let Some(admin) = &client {
            match tokio::time::timeout(Duration::from_millis(500), backends(admin, &name)).await {
                Ok(Ok(count)) => peak = peak.max(count),
                _ => client = None,
            }
        }
        tokio::time::sleep(SAMPLE_EVERY).await;
    }
    peak
}

// ---------------------------------------------------------------------------------------------
// One run
// ---------------------------------------------------------------------------------------------

/// One implementation's result in one scenario.
#[derive(Debug, Clone, Serialize)]
pub struct FaultRecord {
    /// `faults/postgres-...` or `faults/tonic-...`.
    pub case: String,
    /// The implementation.
    #[serde(rename = "impl")]
    pub impl_name: String,
    /// Operations that returned an error.
    pub failed: u64,
    /// ... of them, at the get.
    pub failed_get: u64,
    /// Operations that ended past their caller's deadline (see the module docs).
    pub late: u64,
    /// Connections (tonic: streams and clients) and units of capacity unaccounted for once
    /// the load stopped; must be 0.
    pub leaked: u64,
    /// From the fault's end to the first success; `None`: none came.
    pub recovery_ns: Option<u64>,
    /// From the fault's end to 90% of the pre-fault throughput; `None`: not within the run.
    pub full_ns: Option<u64>,
    /// Connection attempts during the fault (see the module docs).
    pub connects: u64,
    /// The most backends the server had open for the pool (tonic: the most streams).
    pub peak_backends: i64,
    /// All operations of the run.
    pub ops: u64,
    /// Successful operations per second before the fault.
    pub pre_ops_per_s: f64,
    /// How long the fault lasted.
    pub fault_ns: u64,
    /// Connection attempts from the fault's start to the end of the load.
    pub connects_after_fault: u64,
    /// What the pool counted at the end (its size), after every check (tonic: the streams it
    /// counts open).
    pub pool_size_end: usize,
    /// What the manager counted as open at the end (tonic: the streams the server has open).
    pub live_end: i64,
    /// What the server showed at the end, once it agreed with the manager (or [`SETTLE`]
    /// passed) (tonic: the connections the proxy carries).
    pub backends_end: i64,
}

/// The switch of the slow scenario and its turn counter, shared by the callers.
#[derive(Debug, Default)]
struct Slowdown {
    on: AtomicBool,
    turn: AtomicU64,
}

impl Slowdown {
    /// Whether this operation is one of the slow ones.
    fn this_one(&self) -> bool {
        self.on.load(Ordering::Relaxed)
            && self
                .turn
                .fetch_add(1, Ordering::Relaxed)
                .is_multiple_of(SLOW_EVERY)
    }
}

/// Runs `scenario` on `which` against `cluster`: builds the pool (16 connections open),
/// loads it, injects the fault, loads it on, stops, settles and checks the accounting.
///
/// # Errors
/// When the fault cannot be injected (a scenario that stops the server on a given one, the
/// server's scripts failing, no proxy port).
///
/// # Panics
/// If the server refuses the pool's first connections.
pub fn run(
    cluster: &Arc<Cluster>,
    scenario: Scenario,
    which: Impl,
    timing: &Timing,
) -> Result<FaultRecord, String> {
    if scenario.stops_server() && cluster.state.is_none() {
        return Err(format!(
            "{}: needs a server of its own (it stops it)",
            scenario.case()
        ));
    }
    let name = format!("slotpool-faults-{}-{}", scenario.short(), which.name());
    // The proxy and the sampler run apart from the callers, as the network and a monitoring
    // agent would.
    let control = multi_thread(1);
    let rt = multi_thread(WORKERS);
    let proxy = match scenario {
        Scenario::Blackhole => Some(
            control
                .block_on(Proxy::start(cluster.addr()))
                .map_err(|e| format!("no proxy: {e}"))?,
        ),
        _ => None,
    };
    let config = match &proxy {
        Some(proxy) => cluster.config_via(proxy.addr(), &name),
        None => cluster.config(&name),
    };
    let pool = Arc::new(rt.block_on(FaultPool::build(which, config)));
    let counts = Arc::clone(pool.counts());

    let stop_sampling = Arc::new(AtomicBool::new(false));
    let sampler = control.spawn(sample_backends(
        Arc::clone(cluster),
        name.clone(),
        Arc::clone(&stop_sampling),
    ));
    let slowdown = Arc::new(Slowdown::default());
    let loaded = measure::drive(
        &rt,
        timing,
        |start, stop| {
            let pool = Arc::clone(&pool);
            let slowdown = Arc::clone(&slowdown);
            measure::caller(start, stop, move || {
                let pool = Arc::clone(&pool);
                let slow = slowdown.this_one();
                async move {
                    let outcome = pool.op(slow).await;
                    Done {
                        ok: outcome.ok,
                        failed_get: outcome.failed_get,
                        late: outcome.got > GET_DEADLINE + GRACE
                            || outcome.queried > QUERY_DEADLINE + GRACE,
                    }
                }
            })
        },
        || {
            inject(
                scenario,
                cluster,
                &control,
                proxy.as_ref(),
                &slowdown,
                &name,
                timing,
            )
        },
    );
    stop_sampling.store(true, Ordering::Relaxed);
    let peak_backends = control.block_on(sampler).unwrap_or(0);
    let loaded = loaded?;

    let leaks = rt.block_on(account(&pool));
    let backends_end = control.block_on(server_agrees(cluster, &name, &counts));

    let mut record = loaded.record(scenario.case(), which.name());
    record.leaked = leaks.leaked;
    record.connects =
        counts.attempts_between(loaded.at(loaded.span.start), loaded.connects_until());
    record.peak_backends = peak_backends;
    record.connects_after_fault =
        counts.attempts_between(loaded.at(loaded.span.start), Instant::now());
    record.pool_size_end = leaks.pool_size;
    record.live_end = counts.live();
    record.backends_end = backends_end;
    // The pool first (its connections close on the runtime), then the runtimes.
    drop(pool);
    drop(proxy);
    drop(rt);
    drop(control);
    Ok(record)
}

/// Injects `scenario`'s fault and returns when it is over.
fn inject(
    scenario: Scenario,
    cluster: &Cluster,
    control: &Runtime,
    proxy: Option<&Proxy>,
    slowdown: &Slowdown,
    name: &str,
    timing: &Timing,
) -> Result<(), String> {
    match scenario {
        Scenario::Restart => cluster.ctl("restart"),
        Scenario::Terminate => control.block_on(terminate(cluster, name)),
        Scenario::Outage => {
            cluster.ctl("stop-server")?;
            std::thread::sleep(OUTAGE);
            cluster.ctl("start-server")
        }
        Scenario::Blackhole => {
            let proxy = proxy.ok_or("the blackhole needs the proxy")?;
            proxy.pause();
            std::thread::sleep(BLACKHOLE);
            proxy.resume();
            Ok(())
        }
        Scenario::Slow => {
            slowdown.on.store(true, Ordering::Relaxed);
            std::thread::sleep(timing.slow_for);
            slowdown.on.store(false, Ordering::Relaxed);
            Ok(())
        }
    }
}

/// Terminates every backend of `name` and waits until their processes are gone (the signal
/// is sent at once; a backend takes a moment to exit, and until then it still answers).
async fn terminate(cluster: &Cluster, name: &str) -> Result<(), String> {
    let admin = admin(cluster).await.map_err(|e| format!("admin: {e}"))?;
    let pids: Vec<i32> = admin
        .query(
            // In the select list, not the `WHERE`: the filter must come first (a qual may be
            // evaluated in any order, and this connection is a backend too).
            "SELECT pid, pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE application_name = $1",
            &[&name],
        )
        .await
        .map_err(|e| format!("pg_terminate_backend: {}", db_message(&e)))?
        .iter()
        .map(|row| row.get(0))
        .collect();
    let deadline = Instant::now() + SETTLE;
    loop {
        let left: i64 = admin
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE pid = ANY($1)",
                &[&pids],
            )
            .await
            .map_err(|e| format!("pg_stat_activity: {}", db_message(&e)))?
            .get(0);
        if left == 0 {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "{left} terminated backends still there after {SETTLE:?}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// What the accounting found once the load stopped.
#[derive(Debug, Clone, Copy)]
struct Leaks {
    leaked: u64,
    pool_size: usize,
}

/// Waits (up to [`SETTLE`]) until the pool has every object back and counts what its manager
/// holds open; the gauges then.
async fn settle(pool: &FaultPool) -> Gauges {
    let deadline = Instant::now() + SETTLE;
    loop {
        let gauges = pool.gauges();
        let live = pool.counts().live();
        if (gauges.in_use == 0 && gauges.size as i64 == live) || Instant::now() >= deadline {
            return gauges;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The accounting (see the module docs on `leaked`).
async fn account(pool: &FaultPool) -> Leaks {
    let gap = |gauges: Gauges, live: i64| (gauges.size as i64 - live).unsigned_abs();
    let before = settle(pool).await;
    let mut leaked = gap(before, pool.counts().live()) + before.in_use as u64;
    let held = pool.hold_all().await;
    leaked += (POOL_SIZE - held) as u64;
    let after = settle(pool).await;
    leaked += gap(after, pool.counts().live()) + after.in_use as u64;
    Leaks {
        leaked,
        pool_size: after.size,
    }
}

/// The server's count of `name`'s backends once it equals what the manager holds open (a
/// terminated backend takes a moment to leave `pg_stat_activity`), or after [`SETTLE`].
async fn server_agrees(cluster: &Cluster, name: &str, counts: &Counts) -> i64 {
    let deadline = Instant::now() + SETTLE;
    let mut seen = -1;
    while Instant::now() < deadline {
        if let Ok(Ok(admin)) = tokio::time::timeout(Duration::from_secs(1), admin(cluster)).await {
            while Instant::now() < deadline {
                match backends(&admin, name).await {
                    Ok(count) if count == counts.live() => return count,
                    Ok(count) => seen = count,
                    Err(_) => break,
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    seen
}

// ---------------------------------------------------------------------------------------------
// The bench
// ---------------------------------------------------------------------------------------------

/// Every scenario the `want` filter accepts (by case name), on every implementation: the
/// PostgreSQL ones against a server of the bench's own ([`Cluster::default_state`]), then the
/// tonic ones ([`tonic::run`], which need nothing outside the process). Prints a line per run
/// as it goes. Where no PostgreSQL server can be started its scenarios are skipped (with a
/// line saying why) and the tonic ones still run.
///
/// # Errors
/// Why no PostgreSQL server could be started, when no tonic scenario was wanted either: the
/// fault bench is skipped.
pub fn compare(timing: &Timing, want: impl Fn(&str) -> bool) -> Result<Vec<FaultRecord>, String> {
    let scenarios: Vec<Scenario> = Scenario::ALL
        .into_iter()
        .filter(|s| want(s.case()))
        .collect();
    let peer_faults: Vec<tonic::Scenario> = tonic::Scenario::ALL
        .into_iter()
        .filter(|s| want(s.case()))
        .collect();
    let mut records = Vec::new();
    if !scenarios.is_empty() {
        match Cluster::start(&Cluster::default_state()) {
            Ok(cluster) => {
                let cluster = Arc::new(cluster);
                for scenario in scenarios {
                    for which in Impl::ALL {
                        report(
                            scenario.case(),
                            which.name(),
                            run(&cluster, scenario, which, timing),
                            &mut records,
                        );
                    }
                }
            }
            Err(reason) if peer_faults.is_empty() => return Err(reason),
            Err(reason) => println!("faults/postgres-*: skipped: {reason}"),
        }
    }
    for scenario in peer_faults {
        for which in tonic::Impl::ALL {
            report(
                scenario.case(),
                which.name(),
                tonic::run(scenario, which, timing),
                &mut records,
            );
        }
    }
    Ok(records)
}

/// Prints one run's row (or why it failed) and keeps its record.
fn report(
    case: &str,
    impl_name: &str,
    result: Result<FaultRecord, String>,
    records: &mut Vec<FaultRecord>,
) {
    match result {
        Ok(record) => {
            println!("{}", row(&record));
            records.push(record);
        }
        Err(error) => println!("{case} {impl_name}: failed: {error}"),
    }
}

const HEADER: &str = "case                        impl               failed (get)  late leaked  recovery ms   full ms connects  peak";

fn millis(ns: Option<u64>) -> String {
    ns.map_or_else(|| "-".to_string(), |ns| format!("{:.1}", ns as f64 / 1e6))
}

fn row(r: &FaultRecord) -> String {
    format!(
        "{:<27} {:<18} {:>6} {:>5} {:>5} {:>6} {:>12} {:>9} {:>8} {:>5}",
        r.case,
        r.impl_name,
        r.failed,
        format!("({})", r.failed_get),
        r.late,
        r.leaked,
        millis(r.recovery_ns),
        millis(r.full_ns),
        r.connects,
        r.peak_backends,
    )
}

/// The records as a plain-text table, a row per scenario and implementation.
pub fn table(records: &[FaultRecord]) -> String {
    let mut out = format!("{HEADER}\n");
    for record in records {
        out.push_str(&row(record));
        out.push('\n');
    }
    out
}

/// Writes `records` as a pretty JSON array to `path`, creating its directory.
///
/// # Errors
/// Any I/O or serialization error.
pub fn write_json(path: &Path, records: &[FaultRecord]) -> std::io::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let json = serde_json::to_string_pretty(records).map_err(std::io::Error::other)?;
    std::fs::write(path, json + "\n")
}

/// The server's message where there is one (a driver error's `Display` is only "db error").
fn db_message(error: &tokio_postgres::Error) -> String {
    error
        .as_db_error()
        .map_or_else(|| error.to_string(), |db| db.message().to_string())
}
