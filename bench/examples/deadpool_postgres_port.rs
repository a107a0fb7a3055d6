//! A deadpool-postgres program ported to `slotpool::managed`, line by line.
//!
//! `before` is a small service's database layer as deadpool-postgres 0.14 users write it:
//! a pool built from a `tokio_postgres::Config`, recycling with `Clean` because handlers set
//! session parameters, a write in a transaction with a cached statement, a read with a
//! bounded wait, and errors matched by kind. `after` is the same program on
//! `slotpool::managed::postgres`; a `// port:` comment stands above every line that changed
//! and says what changed, and every other line is the same text (`diff` the two modules). Both compile with the workspace
//! (so the port cannot rot), and `main` runs both against a server and checks that they agree:
//!
//! ```sh
//! bench/postgres/start.sh && . target/postgres/env
//! cargo run -p slotpool-bench --example deadpool_postgres_port
//! bench/postgres/stop.sh
//! ```
//!
//! Without `SLOTPOOL_PG` it says so and exits (with `SLOTPOOL_PG_REQUIRED` set, it fails).

use std::error::Error;
use std::time::Duration;

type BoxError = Box<dyn Error + Send + Sync>;

/// The deadpool-postgres version.
mod before {
    use std::time::Duration;

    use deadpool_postgres::{
        Manager, ManagerConfig, Pool, PoolError, RecyclingMethod, Runtime, Timeouts,
    };
    use tokio_postgres::{Config, NoTls};

    use super::BoxError;

    pub fn make_pool(config: Config) -> Result<Pool, BoxError> {
        let manager = Manager::from_config(
            config,
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Clean,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(16)
            .runtime(Runtime::Tokio1)
            .build()?;
        Ok(pool)
    }

    pub async fn setup(pool: &Pool) -> Result<(), BoxError> {
        let client = pool.get().await?;
        client
            .batch_execute(
                "CREATE TABLE IF NOT EXISTS port_items (id bigserial, name text, source text)",
            )
            .await?;
        Ok(())
    }

    pub async fn add_item(pool: &Pool, name: &str) -> Result<i64, BoxError> {
        let mut client = pool.get().await?;
        client
            .batch_execute("SET application_name = 'writer'")
            .await?;
        let transaction = client.transaction().await?;
        let insert = transaction
            .prepare_cached("INSERT INTO port_items (name, source) VALUES ($1, $2) RETURNING id")
            .await?;
        let row = transaction.query_one(&insert, &[&name, &"before"]).await?;
        transaction.commit().await?;
        Ok(row.get(0))
    }

    /// The number of items `source` added, or `None` when no connection came within `wait`.
    pub async fn count_items(
        pool: &Pool,
        source: &str,
        wait: Duration,
    ) -> Result<Option<i64>, BoxError> {
        let timeouts = Timeouts {
            wait: Some(wait),
            ..Timeouts::default()
        };
        let client = match pool.timeout_get(&timeouts).await {
            Ok(client) => client,
            Err(PoolError::Timeout(_)) => return Ok(None),
            Err(error) => return Err(error.into()),
        };
        let count = client
            .prepare_cached("SELECT count(*) FROM port_items WHERE source = $1")
            .await?;
        let row = client.query_one(&count, &[&source]).await?;
        Ok(Some(row.get(0)))
    }

    /// What a handler sees of the session after another handler's `SET`.
    pub async fn application_name(pool: &Pool) -> Result<String, BoxError> {
        let client = pool.get().await?;
        let row = client
            .query_one("SELECT current_setting('application_name')", &[])
            .await?;
        Ok(row.get(0))
    }
}

/// The slotpool version.
mod after {
    use std::time::Duration;

    // port: the manager, its recycling method and the pool's error come from slotpool
    use slotpool::managed::postgres::{PgManager, Recycling};
    use slotpool::managed::{PoolError, Timeouts};
    // port: no TLS argument to import (`PgManager::new` connects without TLS; `with_tls` takes one)
    use tokio_postgres::Config;

    use super::BoxError;

    // port: one alias, and every signature that names `Pool` stays as it was
    type Pool = slotpool::managed::Pool<PgManager>;

    pub fn make_pool(config: Config) -> Result<Pool, BoxError> {
        // port: the recycling method is a builder call
        let manager = PgManager::new(config).recycling(Recycling::Clean);
        // port: no runtime to name (the pool uses the tokio runtime it is built in)
        let pool = Pool::builder(manager).max_size(16).build()?;
        Ok(pool)
    }

    pub async fn setup(pool: &Pool) -> Result<(), BoxError> {
        let client = pool.get().await?;
        client
            .batch_execute(
                "CREATE TABLE IF NOT EXISTS port_items (id bigserial, name text, source text)",
            )
            .await?;
        Ok(())
    }

    pub async fn add_item(pool: &Pool, name: &str) -> Result<i64, BoxError> {
        let mut client = pool.get().await?;
        client
            .batch_execute("SET application_name = 'writer'")
            .await?;
        let transaction = client.transaction().await?;
        let insert = transaction
            .prepare_cached("INSERT INTO port_items (name, source) VALUES ($1, $2) RETURNING id")
            .await?;
        // port: the data only, so that the two runs can be told apart
        let row = transaction.query_one(&insert, &[&name, &"after"]).await?;
        transaction.commit().await?;
        Ok(row.get(0))
    }

    /// The number of items `source` added, or `None` when no connection came within `wait`.
    pub async fn count_items(
        pool: &Pool,
        source: &str,
        wait: Duration,
    ) -> Result<Option<i64>, BoxError> {
        let timeouts = Timeouts {
            wait: Some(wait),
            ..Timeouts::default()
        };
        // port: deadpool's `timeout_get` is `get_timeouts`
        let client = match pool.get_timeouts(&timeouts).await {
            Ok(client) => client,
            // port: a struct variant, which also says in which step (wait, create, recycle)
            Err(PoolError::Timeout { .. }) => return Ok(None),
            Err(error) => return Err(error.into()),
        };
        let count = client
            .prepare_cached("SELECT count(*) FROM port_items WHERE source = $1")
            .await?;
        let row = client.query_one(&count, &[&source]).await?;
        Ok(Some(row.get(0)))
    }

    /// What a handler sees of the session after another handler's `SET`.
    pub async fn application_name(pool: &Pool) -> Result<String, BoxError> {
        let client = pool.get().await?;
        let row = client
            .query_one("SELECT current_setting('application_name')", &[])
            .await?;
        Ok(row.get(0))
    }
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
    let mut config: tokio_postgres::Config = settings.parse()?;
    config.application_name("port-example");
    let wait = Duration::from_secs(5);

    let old = before::make_pool(config.clone())?;
    before::setup(&old).await?;
    let new = after::make_pool(config)?;
    after::setup(&new).await?;

    let (old_before, new_before) = (
        before::count_items(&old, "before", wait).await?,
        after::count_items(&new, "after", wait).await?,
    );
    for name in ["a", "b", "c"] {
        before::add_item(&old, name).await?;
        after::add_item(&new, name).await?;
    }
    let (old_after, new_after) = (
        before::count_items(&old, "before", wait).await?,
        after::count_items(&new, "after", wait).await?,
    );
    let added = |from: Option<i64>, to: Option<i64>| to.zip(from).map(|(to, from)| to - from);
    assert_eq!(
        added(old_before, old_after),
        Some(3),
        "deadpool-postgres added three"
    );
    assert_eq!(
        added(new_before, new_after),
        Some(3),
        "slotpool added three"
    );
    // Both pools were built with Clean recycling: the writer's SET did not stay.
    assert_eq!(before::application_name(&old).await?, "port-example");
    assert_eq!(after::application_name(&new).await?, "port-example");
    println!("both versions added 3 items and reset the session between handlers");
    Ok(())
}
