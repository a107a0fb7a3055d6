//! A bb8-postgres program ported to `slotpool::managed`, line by line.
//!
//! `before` is a small service's database layer as bb8 0.9 + bb8-postgres 0.9 users write it:
//! a manager from a connection string (`new_from_stringlike`), a pool that keeps its four
//! connections open (`min_idle` = `max_size`), checks each one with a query at check-out
//! (`test_on_check_out`), bounds every `get` (`connection_timeout`) and connects before it
//! answers (the async `build`); a write in a transaction, reads, a connection a handler holds
//! on its own (`get_owned`, as an axum extractor does), errors matched by `RunError`'s two
//! variants, and the pool's numbers read from `pool.state()` for the service's metrics. `after`
//! is the same program on `slotpool::managed` and `slotpool::managed::postgres`; a `// port:`
//! comment stands above every line that changed and says what changed, and every other line is
//! the same text (`diff` the two modules). Both compile with the workspace (so the port cannot
//! rot), and `main` runs both against a server and checks that they agree:
//!
//! ```sh
//! bench/postgres/start.sh && . target/postgres/env
//! cargo run -p slotpool-bench --example bb8_postgres_port
//! bench/postgres/stop.sh
//! ```
//!
//! Without `SLOTPOOL_PG` it says so and exits (with `SLOTPOOL_PG_REQUIRED` set, it fails).
//!
//! The port changes 9 lines:
//!
//! * 2 of imports: the pool, its object, its error and the recycle policy from
//!   `slotpool::managed`; the manager from `managed::postgres`, renamed to bb8-postgres's
//!   `PostgresConnectionManager` (its `new_from_stringlike(params, NoTls)` keeps its name and
//!   arguments);
//! * 1 of the owned connection: `PooledConnection<'static, M>` is `Object<M>` (every `Object`
//!   is owned; `get_owned` is there by bb8's name);
//! * 4 of the builder: the manager goes to `Pool::builder(..)` (with bb8-postgres's check-out
//!   query as the manager's `Recycling::Verified`), `min_idle(Some(n))` is `min_idle(n)`,
//!   `test_on_check_out(true)` is `recycle(Recycle::Always)` (with `Verified`: both
//!   settings), and the async `build(manager)` is `build_eager()`; `connection_timeout(d)`
//!   keeps its meaning (one deadline over the whole `get`) and its argument;
//! * 2 of the error match: `RunError::TimedOut` is `PoolError::Timeout { .. }`, and the
//!   `RunError::User(e)` arm becomes a catch-all (bb8's `User(e)` is
//!   `PoolError::Create(PgError::Connect(e))`; slotpool's error has more variants: closed,
//!   creations paused after failures, a panic).
//!
//! `pool.state()` answers bb8's `State { connections, idle_connections, statistics }` field
//! for field; `get`, `get_owned`, the queries, `transaction` and `commit` are the same calls.

use std::error::Error;
use std::time::Duration;

type BoxError = Box<dyn Error + Send + Sync>;

/// What the service exports about its pool (its `/metrics`), by bb8's names.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PoolReport {
    pub connections: u64,
    pub idle_connections: u64,
    pub get_direct: u64,
    pub get_waited: u64,
    pub get_timed_out: u64,
    pub connections_created: u64,
}

/// The bb8-postgres version.
mod before {
    use std::time::Duration;

    use bb8::{Pool, PooledConnection, RunError};
    use bb8_postgres::PostgresConnectionManager;
    use tokio_postgres::NoTls;

    use super::{BoxError, PoolReport};

    /// The pool's manager: tokio-postgres connections, without TLS.
    pub type Manager = PostgresConnectionManager<NoTls>;

    /// A connection a handler holds on its own, across its awaits.
    pub struct DbConn(pub PooledConnection<'static, Manager>);

    impl DbConn {
        /// The server process behind the connection.
        pub async fn backend_pid(&self) -> Result<i32, BoxError> {
            let row = self.0.query_one("SELECT pg_backend_pid()", &[]).await?;
            Ok(row.get(0))
        }
    }

    /// Four connections, all opened before the pool answers, each checked at check-out;
    /// a `get` gives up after `timeout`.
    pub async fn make_pool(params: &str, timeout: Duration) -> Result<Pool<Manager>, BoxError> {
        let manager = PostgresConnectionManager::new_from_stringlike(params, NoTls)?;
        let pool = Pool::builder()
            .max_size(4)
            .min_idle(Some(4))
            .connection_timeout(timeout)
            .test_on_check_out(true)
            .build(manager)
            .await?;
        Ok(pool)
    }

    pub async fn setup(pool: &Pool<Manager>) -> Result<(), BoxError> {
        let client = pool.get().await?;
        client
            .batch_execute(
                "CREATE TABLE IF NOT EXISTS bb8_port_items (id bigserial, name text, source text)",
            )
            .await?;
        Ok(())
    }

    /// Adds the items in one transaction; their ids.
    pub async fn add_items(
        pool: &Pool<Manager>,
        source: &str,
        names: &[&str],
    ) -> Result<Vec<i64>, BoxError> {
        let mut client = pool.get().await?;
        let transaction = client.transaction().await?;
        let insert = transaction
            .prepare("INSERT INTO bb8_port_items (name, source) VALUES ($1, $2) RETURNING id")
            .await?;
        let mut ids = Vec::with_capacity(names.len());
        for name in names {
            let row = transaction.query_one(&insert, &[name, &source]).await?;
            ids.push(row.get(0));
        }
        transaction.commit().await?;
        Ok(ids)
    }

    /// The names of the items with these ids, in id order.
    pub async fn item_names(pool: &Pool<Manager>, ids: &[i64]) -> Result<Vec<String>, BoxError> {
        let client = pool.get().await?;
        let rows = client
            .query(
                "SELECT name FROM bb8_port_items WHERE id = ANY($1) ORDER BY id",
                &[&ids],
            )
            .await?;
        Ok(rows.iter().map(|row| row.get(0)).collect())
    }

    /// The number of items `source` added, or `None` when no connection came in time.
    pub async fn count_items(pool: &Pool<Manager>, source: &str) -> Result<Option<i64>, BoxError> {
        let client = match pool.get().await {
            Ok(client) => client,
            Err(RunError::TimedOut) => return Ok(None),
            Err(RunError::User(error)) => return Err(error.into()),
        };
        let row = client
            .query_one(
                "SELECT count(*) FROM bb8_port_items WHERE source = $1",
                &[&source],
            )
            .await?;
        Ok(Some(row.get(0)))
    }

    /// A connection for a handler to keep.
    pub async fn checkout(pool: &Pool<Manager>) -> Result<DbConn, BoxError> {
        Ok(DbConn(pool.get_owned().await?))
    }

    /// The pool's numbers, for the service's metrics.
    pub fn pool_report(pool: &Pool<Manager>) -> PoolReport {
        let state = pool.state();
        PoolReport {
            connections: state.connections.into(),
            idle_connections: state.idle_connections.into(),
            get_direct: state.statistics.get_direct,
            get_waited: state.statistics.get_waited,
            get_timed_out: state.statistics.get_timed_out,
            connections_created: state.statistics.connections_created,
        }
    }
}

/// The slotpool version.
mod after {
    use std::time::Duration;

    // port: the pool, its (owned) object, its error and the recycle policy come from slotpool
    use slotpool::managed::{Object, Pool, PoolError, Recycle};
    // port: the manager (by bb8-postgres's name) and its recycling method
    use slotpool::managed::postgres::{PgManager as PostgresConnectionManager, Recycling};
    use tokio_postgres::NoTls;

    use super::{BoxError, PoolReport};

    /// The pool's manager: tokio-postgres connections, without TLS.
    pub type Manager = PostgresConnectionManager<NoTls>;

    /// A connection a handler holds on its own, across its awaits.
    // port: every `Object` is owned (`'static`): no lifetime to name
    pub struct DbConn(pub Object<Manager>);

    impl DbConn {
        /// The server process behind the connection.
        pub async fn backend_pid(&self) -> Result<i32, BoxError> {
            let row = self.0.query_one("SELECT pg_backend_pid()", &[]).await?;
            Ok(row.get(0))
        }
    }

    /// Four connections, all opened before the pool answers, each checked at check-out;
    /// a `get` gives up after `timeout`.
    pub async fn make_pool(params: &str, timeout: Duration) -> Result<Pool<Manager>, BoxError> {
        let manager = PostgresConnectionManager::new_from_stringlike(params, NoTls)?;
        // port: the manager up front, with bb8-postgres's check-out query (`is_valid`, an empty
        // query) as its recycling method: half of `test_on_check_out(true)`
        let pool = Pool::builder(manager.recycling(Recycling::Verified))
            .max_size(4)
            // port: a count, not an `Option`
            .min_idle(4)
            .connection_timeout(timeout)
            // port: recycle at every check-out (the default, spelled out): the other half of
            // `test_on_check_out(true)`
            .recycle(Recycle::Always)
            // port: connects `min_idle` connections before it answers, as bb8's async `build`
            .build_eager()
            .await?;
        Ok(pool)
    }

    pub async fn setup(pool: &Pool<Manager>) -> Result<(), BoxError> {
        let client = pool.get().await?;
        client
            .batch_execute(
                "CREATE TABLE IF NOT EXISTS bb8_port_items (id bigserial, name text, source text)",
            )
            .await?;
        Ok(())
    }

    /// Adds the items in one transaction; their ids.
    pub async fn add_items(
        pool: &Pool<Manager>,
        source: &str,
        names: &[&str],
    ) -> Result<Vec<i64>, BoxError> {
        let mut client = pool.get().await?;
        let transaction = client.transaction().await?;
        let insert = transaction
            .prepare("INSERT INTO bb8_port_items (name, source) VALUES ($1, $2) RETURNING id")
            .await?;
        let mut ids = Vec::with_capacity(names.len());
        for name in names {
            let row = transaction.query_one(&insert, &[name, &source]).await?;
            ids.push(row.get(0));
        }
        transaction.commit().await?;
        Ok(ids)
    }

    /// The names of the items with these ids, in id order.
    pub async fn item_names(pool: &Pool<Manager>, ids: &[i64]) -> Result<Vec<String>, BoxError> {
        let client = pool.get().await?;
        let rows = client
            .query(
                "SELECT name FROM bb8_port_items WHERE id = ANY($1) ORDER BY id",
                &[&ids],
            )
            .await?;
        Ok(rows.iter().map(|row| row.get(0)).collect())
    }

    /// The number of items `source` added, or `None` when no connection came in time.
    pub async fn count_items(pool: &Pool<Manager>, source: &str) -> Result<Option<i64>, BoxError> {
        let client = match pool.get().await {
            Ok(client) => client,
            // port: a struct variant, which also says in which step (wait, create, recycle)
            Err(PoolError::Timeout { .. }) => return Ok(None),
            // port: bb8's `User(e)` is `PoolError::Create(PgError::Connect(e))`; this arm also
            // takes slotpool's other errors (closed, creations paused after failures, a panic)
            Err(error) => return Err(error.into()),
        };
        let row = client
            .query_one(
                "SELECT count(*) FROM bb8_port_items WHERE source = $1",
                &[&source],
            )
            .await?;
        Ok(Some(row.get(0)))
    }

    /// A connection for a handler to keep.
    pub async fn checkout(pool: &Pool<Manager>) -> Result<DbConn, BoxError> {
        Ok(DbConn(pool.get_owned().await?))
    }

    /// The pool's numbers, for the service's metrics.
    pub fn pool_report(pool: &Pool<Manager>) -> PoolReport {
        let state = pool.state();
        PoolReport {
            connections: state.connections.into(),
            idle_connections: state.idle_connections.into(),
            get_direct: state.statistics.get_direct,
            get_waited: state.statistics.get_waited,
            get_timed_out: state.statistics.get_timed_out,
            connections_created: state.statistics.connections_created,
        }
    }
}

/// Gives the last of `held` back after `delay`.
async fn release_last<T>(held: &mut Vec<T>, delay: Duration) {
    tokio::time::sleep(delay).await;
    drop(held.pop());
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), BoxError> {
    let Ok(settings) = std::env::var("SLOTPOOL_PG") else {
        if std::env::var_os("SLOTPOOL_PG_REQUIRED").is_some() {
            return Err("SLOTPOOL_PG_REQUIRED is set but SLOTPOOL_PG is not".into());
        }
        println!("skipped: SLOTPOOL_PG is not set (bench/postgres/start.sh starts a server)");
        return Ok(());
    };
    let timeout = Duration::from_secs(1);
    let names = ["a", "b", "c"];

    // Both pools open their four connections before they answer. With min_idle = max_size no
    // `get` below connects (bb8 counts a `get` that waits for a connection it asked for as
    // waited, slotpool one that connects itself as direct), so both count each `get` alike.
    let old = before::make_pool(&settings, timeout).await?;
    let new = after::make_pool(&settings, timeout).await?;
    let built = PoolReport {
        connections: 4,
        idle_connections: 4,
        connections_created: 4,
        ..PoolReport::default()
    };
    assert_eq!(before::pool_report(&old), built, "bb8 connected eagerly");
    assert_eq!(
        after::pool_report(&new),
        built,
        "slotpool connected eagerly"
    );

    // Rows written in a transaction and read back.
    before::setup(&old).await?;
    after::setup(&new).await?;
    let (old_start, new_start) = (
        before::count_items(&old, "bb8").await?,
        after::count_items(&new, "slotpool").await?,
    );
    let old_ids = before::add_items(&old, "bb8", &names).await?;
    let new_ids = after::add_items(&new, "slotpool", &names).await?;
    assert_eq!(before::item_names(&old, &old_ids).await?, names);
    assert_eq!(after::item_names(&new, &new_ids).await?, names);
    let added = |from: Option<i64>, to: Option<i64>| to.zip(from).map(|(to, from)| to - from);
    assert_eq!(
        added(old_start, before::count_items(&old, "bb8").await?),
        Some(3),
        "bb8-postgres added three"
    );
    assert_eq!(
        added(new_start, after::count_items(&new, "slotpool").await?),
        Some(3),
        "slotpool added three"
    );

    // Handlers hold all four connections: four server processes.
    let mut old_held = Vec::new();
    let mut new_held = Vec::new();
    let (mut old_pids, mut new_pids) = (Vec::new(), Vec::new());
    for _ in 0..4 {
        let conn = before::checkout(&old).await?;
        old_pids.push(conn.backend_pid().await?);
        old_held.push(conn);
        let conn = after::checkout(&new).await?;
        new_pids.push(conn.backend_pid().await?);
        new_held.push(conn);
    }
    for pids in [&mut old_pids, &mut new_pids] {
        pids.sort_unstable();
        pids.dedup();
        assert_eq!(pids.len(), 4, "four connections, four backends");
    }

    // A `get` with none free times out after `timeout`: a timeout in both.
    assert_eq!(
        before::count_items(&old, "bb8").await?,
        None,
        "bb8 timed out"
    );
    assert_eq!(
        after::count_items(&new, "slotpool").await?,
        None,
        "slotpool timed out"
    );

    // One connection comes back while a `get` waits: it is served.
    let delay = Duration::from_millis(100);
    let (_, old_count) = tokio::join!(
        release_last(&mut old_held, delay),
        before::count_items(&old, "bb8")
    );
    let (_, new_count) = tokio::join!(
        release_last(&mut new_held, delay),
        after::count_items(&new, "slotpool")
    );
    assert!(old_count?.is_some(), "bb8 served the waiting get");
    assert!(new_count?.is_some(), "slotpool served the waiting get");
    drop((old_held, new_held));

    // The statistics that mean the same thing agree: 9 gets served at once (the setup, the
    // write, 3 reads, 4 checkouts), 1 after a wait, 1 timed out; 4 connections made, all idle.
    let (old_report, new_report) = (before::pool_report(&old), after::pool_report(&new));
    let expected = PoolReport {
        get_direct: 9,
        get_waited: 1,
        get_timed_out: 1,
        ..built
    };
    assert_eq!(old_report, expected, "bb8's state");
    assert_eq!(new_report, expected, "slotpool's stats");
    println!(
        "both versions wrote and read back 3 items in a transaction, timed out a get with all \
         4 connections held, served one that waited, and report the same: {new_report:?}"
    );
    Ok(())
}
