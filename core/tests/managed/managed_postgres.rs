//! `slotpool::managed::postgres` against a real PostgreSQL server: get, query and return;
//! transactions share the connection's statement cache; a backend terminated by the server is rejected at recycle and replaced; `Fast` recycling decides in `recycle_now`; `Clean` recycling
//! resets session state and keeps prepared statements; `max_size` bounds the server's
//! connections; a `get` cancelled while connecting leaves its connection to the next caller;
//! a failed connect is a typed error.
//!
//! The server comes from `SLOTPOOL_PG` (a tokio-postgres connection string), as
//! `bench/postgres/start.sh` prints it and writes it to `target/postgres/env`:
//!
//! ```sh
//! bench/postgres/start.sh && . target/postgres/env
//! cargo test -p slotpool --features postgres --test managed managed_postgres::
//! bench/postgres/stop.sh
//! ```
//!
//! Without `SLOTPOOL_PG` every test prints that it is skipped and passes, unless
//! `SLOTPOOL_PG_REQUIRED=1` (CI sets it), which makes a missing server a failure. Each test
//! names its connections (`application_name`) to count them on the server; tests run in
//! parallel against one server without seeing each other's connections.
#![cfg(feature = "postgres")]

use std::collections::BTreeSet;
use std::pin::pin;
use std::task::Poll;

use crate::common::poll_once;
use slotpool::managed::postgres::{PgClient, PgError, PgManager, Recycling};
use slotpool::managed::{Manager, Pool, PoolError};
use slotpool::Reach;
use tokio_postgres::error::SqlState;
use tokio_postgres::{Config, NoTls};

/// The server's settings with `application_name` set to `name`, or `None` (after saying why)
/// when no server was given and none is required.
fn server(name: &str) -> Option<Config> {
    let Ok(settings) = std::env::var("SLOTPOOL_PG") else {
        assert!(
            std::env::var_os("SLOTPOOL_PG_REQUIRED").is_none(),
            "SLOTPOOL_PG_REQUIRED is set but SLOTPOOL_PG is not: start a server with \
             bench/postgres/start.sh and source target/postgres/env"
        );
        eprintln!(
            "skipped {name}: SLOTPOOL_PG is not set (bench/postgres/start.sh starts a server and \
             writes it to target/postgres/env)"
        );
        return None;
    };
    let mut config: Config = settings
        .parse()
        .unwrap_or_else(|e| panic!("SLOTPOOL_PG={settings:?} is not a connection string: {e}"));
    config.application_name(name);
    Some(config)
}

/// A connection outside any pool, for looking at the server.
async fn admin(config: &Config) -> tokio_postgres::Client {
    let mut config = config.clone();
    config.application_name("slotpool-test-admin");
    let (client, connection) = config.connect(NoTls).await.expect("admin connection");
    tokio::spawn(connection);
    client
}

/// Connections the server has open for `config`'s application name.
async fn backends(admin: &tokio_postgres::Client, config: &Config) -> i64 {
    admin
        .query_one(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1",
            &[&config.get_application_name().unwrap_or_default()],
        )
        .await
        .expect("pg_stat_activity")
        .get(0)
}

/// Terminates a backend and waits (on the server, up to 10 s) until its process is gone.
async fn terminate(admin: &tokio_postgres::Client, pid: i32) {
    let done: bool = admin
        .query_one("SELECT pg_terminate_backend($1, 10000)", &[&pid])
        .await
        .expect("pg_terminate_backend")
        .get(0);
    assert!(done, "backend {pid} did not exit");
}

/// Statements with this text prepared on the client's connection, as the server counts them
/// (asked with a simple query, which prepares nothing itself).
async fn prepared(client: &PgClient, query: &str) -> usize {
    let sql = format!(
        "SELECT count(*) FROM pg_prepared_statements WHERE statement = '{}'",
        query.replace('\'', "''")
    );
    let rows = client
        .simple_query(&sql)
        .await
        .expect("pg_prepared_statements");
    rows.iter()
        .find_map(|message| match message {
            tokio_postgres::SimpleQueryMessage::Row(row) => row.get(0)?.parse().ok(),
            _ => None,
        })
        .expect("one count")
}

async fn pid(client: &PgClient) -> i32 {
    client
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .expect("a live connection")
        .get(0)
}

fn pool(config: Config, recycling: Recycling, max_size: usize) -> Pool<PgManager> {
    Pool::builder(PgManager::new(config).recycling(recycling))
        .max_size(max_size)
        .build()
        .expect("valid configuration")
}

macro_rules! server_or_skip {
    ($name:expr) => {
        match server($name) {
            Some(config) => config,
            None => return,
        }
    };
}

#[tokio::test]
async fn get_query_return_reuses_the_connection_and_its_statements() {
    let config = server_or_skip!("slotpool-get-query-return");
    let pool = pool(config, Recycling::Fast, 4);

    let client = pool.get().await.unwrap();
    let first_pid = pid(&client).await;
    let statement = client.prepare_cached("SELECT $1::int + 1").await.unwrap();
    let row = client.query_one(&statement, &[&41i32]).await.unwrap();
    assert_eq!(row.get::<_, i32>(0), 42);
    assert_eq!(client.statement_cache().len(), 1);
    drop(client);

    // The same connection comes back (the lowest idle slot), with its statement prepared.
    let client = pool.get().await.unwrap();
    assert_eq!(pid(&client).await, first_pid);
    let again = client.prepare_cached("SELECT $1::int + 1").await.unwrap();
    assert_eq!(client.statement_cache().len(), 1);
    assert_eq!(
        prepared(&client, "SELECT $1::int + 1").await,
        1,
        "served from the cache: the server has one statement, not a second"
    );
    let row = client.query_one(&again, &[&1i32]).await.unwrap();
    assert_eq!(row.get::<_, i32>(0), 2);
    let printed = format!("{:?}", &*client);
    assert!(
        printed.contains("PgClient") && printed.contains("statements: 1"),
        "{printed}"
    );
    // Forgetting the statement empties the cache; forgetting it twice finds nothing.
    let cache = client.statement_cache();
    assert!(!cache.is_empty());
    assert!(cache.remove("SELECT $1::int + 1", &[]));
    assert!(cache.is_empty());
    assert!(!cache.remove("SELECT $1::int + 1", &[]));
    drop(client);

    let stats = pool.stats();
    assert_eq!((stats.created, stats.recycled, stats.discarded), (1, 1, 0));
}

/// A transaction's `prepare_cached` fills the connection's cache; a transaction dropped
/// without commit rolls back.
#[tokio::test]
async fn transactions_prepare_through_the_connection_cache() {
    let config = server_or_skip!("slotpool-transaction");
    let pool = pool(config, Recycling::Fast, 1);
    let mut client = pool.get().await.unwrap();
    client
        .batch_execute("CREATE TEMP TABLE kept (x int)")
        .await
        .unwrap();
    let insert = "INSERT INTO kept VALUES ($1)";

    let transaction = client.transaction().await.unwrap();
    let statement = transaction.prepare_cached(insert).await.unwrap();
    transaction.execute(&statement, &[&1i32]).await.unwrap();
    transaction.commit().await.unwrap();

    let transaction = client.transaction().await.unwrap();
    let statement = transaction.prepare_cached(insert).await.unwrap();
    transaction.execute(&statement, &[&2i32]).await.unwrap();
    drop(transaction);

    assert_eq!(client.statement_cache().len(), 1);
    assert_eq!(prepared(&client, insert).await, 1, "prepared once");
    let rows: Vec<i32> = client
        .query("SELECT x FROM kept ORDER BY x", &[])
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_eq!(
        rows,
        [1],
        "the committed row stays, the dropped one rolled back"
    );
}

/// `Verified`: the recycle's round trip finds a backend the server terminated while the
/// connection sat idle; the `get` gets a new connection instead.
#[tokio::test]
async fn a_terminated_backend_is_rejected_at_recycle_and_replaced() {
    let config = server_or_skip!("slotpool-terminated-verified");
    let admin = admin(&config).await;
    let pool = pool(config.clone(), Recycling::Verified, 2);

    let client = pool.get().await.unwrap();
    let old = pid(&client).await;
    drop(client);
    terminate(&admin, old).await;

    let client = pool.get().await.unwrap();
    let new = pid(&client).await;
    assert_ne!(new, old, "a new backend");
    let stats = pool.stats();
    assert_eq!((stats.created, stats.discarded), (2, 1));
    assert_eq!(
        stats.status.size, 1,
        "the dead connection's room was reused"
    );
    assert_eq!(backends(&admin, &config).await, 1);
}

/// A connection whose query found it closed is dropped as it comes back, by the manager's
/// `has_broken` (its closed check, no round trip): counted as broken, not as a rejected
/// recycle, and never handed out again.
#[tokio::test]
async fn a_connection_found_closed_is_dropped_as_broken_when_it_comes_back() {
    let config = server_or_skip!("slotpool-terminated-fast");
    let admin = admin(&config).await;
    let pool = pool(config, Recycling::Fast, 2);

    let client = pool.get().await.unwrap();
    let old = pid(&client).await;
    terminate(&admin, old).await;
    assert!(client.simple_query("SELECT 1").await.is_err());
    assert!(client.is_closed(), "the failed query ended the connection");
    drop(client);

    let client = pool.get().await.unwrap();
    assert_ne!(pid(&client).await, old);
    let stats = pool.stats();
    assert_eq!(
        (stats.created, stats.broken, stats.discarded),
        (2, 1, 0),
        "{stats:?}"
    );
}

/// `Fast` decides in `recycle_now` (no await: open or closed); every other method leaves
/// an open connection to `recycle` (its query), and rejects a closed one there already.
#[tokio::test]
async fn fast_recycling_decides_with_no_await_and_the_others_leave_it_to_recycle() {
    let config = server_or_skip!("slotpool-recycle-now");
    let admin = admin(&config).await;
    let pool = pool(config.clone(), Recycling::Fast, 1);
    let mut client = pool.get().await.unwrap();
    let meta = slotpool::managed::Object::meta(&client);
    let decide = |manager: &PgManager, client: &mut PgClient| {
        manager
            .recycle_now(client, &meta)
            .map(|result| result.is_ok())
    };
    let methods = [
        Recycling::Verified,
        Recycling::Clean,
        Recycling::Custom("SELECT 1".into()),
    ];
    assert_eq!(decide(pool.manager(), &mut client), Some(true));
    for method in methods.clone() {
        let manager = PgManager::new(config.clone()).recycling(method.clone());
        assert_eq!(decide(&manager, &mut client), None, "{method:?}");
    }
    terminate(&admin, pid(&client).await).await;
    assert!(client.simple_query("SELECT 1").await.is_err());
    assert_eq!(decide(pool.manager(), &mut client), Some(false));
    for method in methods {
        let manager = PgManager::new(config.clone()).recycling(method.clone());
        assert_eq!(decide(&manager, &mut client), Some(false), "{method:?}");
    }
}

/// `Clean`: a parameter set, a temporary table and an open transaction do not reach the next
/// user of the connection; the connection itself is reused and its prepared statement stays.
#[tokio::test]
async fn clean_recycling_resets_session_state_and_keeps_statements() {
    let config = server_or_skip!("slotpool-clean");
    let pool = pool(config, Recycling::Clean, 1);
    let query = "SELECT $1::int * 2";

    let client = pool.get().await.unwrap();
    let first_pid = pid(&client).await;
    let statement = client.prepare_cached(query).await.unwrap();
    assert_eq!(prepared(&client, query).await, 1);
    client
        .batch_execute("SET statement_timeout = '4s'")
        .await
        .unwrap();
    client
        .batch_execute("CREATE TEMP TABLE scratch (x int)")
        .await
        .unwrap();
    client.batch_execute("BEGIN").await.unwrap();
    client
        .batch_execute("INSERT INTO scratch VALUES (1)")
        .await
        .unwrap();
    let in_transaction: bool = client
        .query_one("SELECT pg_current_xact_id_if_assigned() IS NOT NULL", &[])
        .await
        .unwrap()
        .get(0);
    assert!(in_transaction, "the test left a transaction open");
    drop(client);

    let client = pool.get().await.unwrap();
    assert_eq!(pid(&client).await, first_pid, "the same connection, reset");
    let row = client
        .query_one(
            "SELECT current_setting('statement_timeout'), \
                    to_regclass('scratch') IS NULL, \
                    pg_current_xact_id_if_assigned() IS NULL",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "0", "SET was reset");
    assert!(row.get::<_, bool>(1), "the temporary table was dropped");
    assert!(row.get::<_, bool>(2), "the transaction was rolled back");
    let row = client.query_one(&statement, &[&21i32]).await.unwrap();
    assert_eq!(row.get::<_, i32>(0), 42, "the prepared statement survived");
    client.prepare_cached(query).await.unwrap();
    assert_eq!(prepared(&client, query).await, 1, "served from the cache");
    drop(client);

    let stats = pool.stats();
    assert_eq!((stats.created, stats.discarded), (1, 0));
}

/// `Fast` leaves session state alone (the documented trade-off that `Clean` exists for).
#[tokio::test]
async fn fast_recycling_keeps_session_state() {
    let config = server_or_skip!("slotpool-fast-state");
    let pool = pool(config, Recycling::Fast, 1);
    let client = pool.get().await.unwrap();
    client
        .batch_execute("SET statement_timeout = '4s'")
        .await
        .unwrap();
    drop(client);
    let client = pool.get().await.unwrap();
    let row = client
        .query_one("SELECT current_setting('statement_timeout')", &[])
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "4s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_size_bounds_the_connections_to_the_server() {
    let config = server_or_skip!("slotpool-max-size");
    let admin = admin(&config).await;
    let pool = pool(config.clone(), Recycling::Fast, 3);

    let held = [
        pool.get().await.unwrap(),
        pool.get().await.unwrap(),
        pool.get().await.unwrap(),
    ];
    assert!(matches!(pool.try_get().await, Err(PoolError::NoCapacity)));
    assert_eq!(backends(&admin, &config).await, 3);
    let mut pids = BTreeSet::new();
    for client in &held {
        pids.insert(pid(client).await);
    }
    drop(held);

    // Sixteen tasks, each checking out five times: they share the three connections.
    let tasks: Vec<_> = (0..16)
        .map(|_| {
            let pool = pool.clone();
            tokio::spawn(async move {
                let mut seen = BTreeSet::new();
                for _ in 0..5 {
                    let client = pool.get().await.unwrap();
                    seen.insert(pid(&client).await);
                }
                seen
            })
        })
        .collect();
    let mut seen = BTreeSet::new();
    for task in tasks {
        seen.extend(task.await.unwrap());
    }
    assert!(seen.is_subset(&pids), "{seen:?} not within {pids:?}");
    assert_eq!(backends(&admin, &config).await, 3);
    let stats = pool.stats();
    assert_eq!((stats.created, stats.status.size), (3, 3));
}

/// A `get` dropped while its connection is being made: the pool finishes the connect on its
/// own task and the connection goes to the next caller; nothing is lost or made twice.
#[tokio::test]
async fn a_get_cancelled_while_connecting_leaves_the_connection_to_the_next_caller() {
    let config = server_or_skip!("slotpool-cancel-create");
    let admin = admin(&config).await;
    let pool = pool(config.clone(), Recycling::Fast, 1);

    {
        let get = pin!(pool.get());
        // One poll starts the connect; the server's answer cannot have come yet.
        assert!(matches!(poll_once(get), Poll::Pending));
    }
    // The only room is taken by that creation: this `get` waits for it and gets its result.
    let client = pool.get().await.unwrap();
    assert!(pid(&client).await > 0);
    let stats = pool.stats();
    assert_eq!((stats.created, stats.created_off_caller), (1, 1));
    assert_eq!(backends(&admin, &config).await, 1);
}

#[tokio::test]
async fn a_failed_connect_is_a_typed_create_error() {
    let mut config = server_or_skip!("slotpool-connect-fails");
    config.dbname("slotpool_no_such_database");
    let pool = pool(config, Recycling::Fast, 1);
    match pool.get().await {
        Err(PoolError::Create(error @ PgError::Connect(_))) => {
            assert_eq!(error.reach(), Reach::NotSent);
            let code = error.driver_error().and_then(|e| e.code());
            assert_eq!(code, Some(&SqlState::INVALID_CATALOG_NAME), "{error}");
        }
        other => panic!("expected a connect error, got {other:?}"),
    }
    let stats = pool.stats();
    assert_eq!((stats.create_failures, stats.status.size), (1, 0));
}

/// `Recycling`'s names (in errors and logs) and the manager's `Debug`, which shows its
/// settings (no server needed).
#[test]
fn recycling_methods_and_the_manager_print_their_names() {
    let names: Vec<&str> = [
        Recycling::Fast,
        Recycling::Verified,
        Recycling::Clean,
        Recycling::Custom("SELECT 1".into()),
    ]
    .iter()
    .map(Recycling::name)
    .collect();
    assert_eq!(names, ["fast", "verified", "clean", "custom"]);
    let mut config = Config::new();
    config.host("localhost").user("slotpool");
    let printed = format!("{:?}", PgManager::new(config).recycling(Recycling::Clean));
    assert!(
        printed.starts_with("PgManager") && printed.contains("recycling: Clean"),
        "{printed}"
    );
}
