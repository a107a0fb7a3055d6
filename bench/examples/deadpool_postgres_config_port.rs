//! A deadpool-postgres program that loads its settings with the `config` crate, ported to
//! `slotpool::managed::postgres`.
//!
//! `before` is how deadpool-postgres 0.14's README sets a pool up: a `Settings` struct with a
//! `pg: deadpool_postgres::Config` field, read from the environment by
//! `config::Environment` (`PORTCFG__PG__HOST`, `PORTCFG__PG__POOL__MAX_SIZE`,
//! `PORTCFG__PG__POOL__TIMEOUTS__WAIT__SECS`, ...), then `create_pool`; its handlers are
//! written once over `GenericClient` and run on a pooled `Client` and inside a transaction
//! from `build_transaction`. `after` is the same program on slotpool. The same environment
//! loads into both: the field names and their encoding are deadpool-postgres's.
//!
//! A `// port:` comment stands above every line that changed and says what changed; every
//! other line is the same text (`diff` the two modules). The changed lines:
//!
//! 1. `use deadpool_postgres::{Client, GenericClient, Pool, Runtime};` becomes
//!    `use slotpool::managed::postgres::{Client, GenericClient, Pool};` (no `Runtime`).
//! 2. `pub pg: deadpool_postgres::Config,` becomes
//!    `pub pg: slotpool::managed::postgres::Config,`.
//! 3. `settings.pg.create_pool(Some(Runtime::Tokio1), NoTls)` becomes
//!    `settings.pg.create_pool(NoTls)`: the pool needs no runtime named, nor one running.
//!
//! `main` plays the deployment: it writes the server's settings into the environment (as a
//! container's would), makes both pools before any runtime exists, then runs both versions
//! against the server and checks that they agree:
//!
//! ```sh
//! bench/postgres/start.sh && . target/postgres/env
//! cargo run -p slotpool-bench --example deadpool_postgres_config_port
//! bench/postgres/stop.sh
//! ```
//!
//! Without `SLOTPOOL_PG` it says so and exits (with `SLOTPOOL_PG_REQUIRED` set, it fails).

use std::error::Error;
use std::time::Duration;

type BoxError = Box<dyn Error + Send + Sync>;

/// The environment prefix both versions read their settings under.
const PREFIX: &str = "PORTCFG";

/// The deadpool-postgres version.
mod before {
    use std::time::Duration;

    use deadpool_postgres::{Client, GenericClient, Pool, Runtime};
    use tokio_postgres::{IsolationLevel, NoTls};

    use super::BoxError;

    #[derive(Debug, serde::Deserialize)]
    pub struct Settings {
        pub pg: deadpool_postgres::Config,
    }

    impl Settings {
        pub fn from_env(prefix: &str) -> Result<Self, config::ConfigError> {
            config::Config::builder()
                .add_source(config::Environment::with_prefix(prefix).separator("__"))
                .build()?
                .try_deserialize()
        }
    }

    pub fn make_pool(settings: &Settings) -> Result<Pool, BoxError> {
        let pool = settings.pg.create_pool(Some(Runtime::Tokio1), NoTls)?;
        Ok(pool)
    }

    /// The pool's size and wait deadline, as the settings gave them.
    pub fn limits(pool: &Pool) -> (usize, Option<Duration>) {
        (pool.status().max_size, pool.timeouts().wait)
    }

    pub async fn setup(pool: &Pool) -> Result<(), BoxError> {
        let client = pool.get().await?;
        client
            .batch_execute(
                "CREATE TABLE IF NOT EXISTS config_port_items (id bigserial, name text, source text)",
            )
            .await?;
        Ok(())
    }

    /// A handler written once: on a connection, or inside a transaction.
    async fn add<C: GenericClient>(db: &C, name: &str, source: &str) -> Result<i64, BoxError> {
        let insert = db
            .prepare_cached(
                "INSERT INTO config_port_items (name, source) VALUES ($1, $2) RETURNING id",
            )
            .await?;
        let row = db.query_one(&insert, &[&name, &source]).await?;
        Ok(row.get(0))
    }

    /// The first item on its own, the rest in one serializable transaction.
    pub async fn add_items(pool: &Pool, names: &[&str], source: &str) -> Result<(), BoxError> {
        let mut client: Client = pool.get().await?;
        let Some((first, rest)) = names.split_first() else {
            return Ok(());
        };
        add(&client, first, source).await?;
        let transaction = client
            .build_transaction()
            .isolation_level(IsolationLevel::Serializable)
            .start()
            .await?;
        for name in rest {
            add(&transaction, name, source).await?;
        }
        transaction.commit().await?;
        Ok(())
    }

    pub async fn count_items(pool: &Pool, source: &str) -> Result<i64, BoxError> {
        let client = pool.get().await?;
        let row = client
            .query_one(
                "SELECT count(*) FROM config_port_items WHERE source = $1",
                &[&source],
            )
            .await?;
        Ok(row.get(0))
    }

    /// The session's `application_name`, which the settings set.
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

    // port: the names come from slotpool; there is no `Runtime` to import
    use slotpool::managed::postgres::{Client, GenericClient, Pool};
    use tokio_postgres::{IsolationLevel, NoTls};

    use super::BoxError;

    #[derive(Debug, serde::Deserialize)]
    pub struct Settings {
        // port: slotpool's `Config`, which reads the same fields from the same environment
        pub pg: slotpool::managed::postgres::Config,
    }

    impl Settings {
        pub fn from_env(prefix: &str) -> Result<Self, config::ConfigError> {
            config::Config::builder()
                .add_source(config::Environment::with_prefix(prefix).separator("__"))
                .build()?
                .try_deserialize()
        }
    }

    pub fn make_pool(settings: &Settings) -> Result<Pool, BoxError> {
        // port: no runtime argument (the pool uses the runtime of its first `get`)
        let pool = settings.pg.create_pool(NoTls)?;
        Ok(pool)
    }

    /// The pool's size and wait deadline, as the settings gave them.
    pub fn limits(pool: &Pool) -> (usize, Option<Duration>) {
        (pool.status().max_size, pool.timeouts().wait)
    }

    pub async fn setup(pool: &Pool) -> Result<(), BoxError> {
        let client = pool.get().await?;
        client
            .batch_execute(
                "CREATE TABLE IF NOT EXISTS config_port_items (id bigserial, name text, source text)",
            )
            .await?;
        Ok(())
    }

    /// A handler written once: on a connection, or inside a transaction.
    async fn add<C: GenericClient>(db: &C, name: &str, source: &str) -> Result<i64, BoxError> {
        let insert = db
            .prepare_cached(
                "INSERT INTO config_port_items (name, source) VALUES ($1, $2) RETURNING id",
            )
            .await?;
        let row = db.query_one(&insert, &[&name, &source]).await?;
        Ok(row.get(0))
    }

    /// The first item on its own, the rest in one serializable transaction.
    pub async fn add_items(pool: &Pool, names: &[&str], source: &str) -> Result<(), BoxError> {
        let mut client: Client = pool.get().await?;
        let Some((first, rest)) = names.split_first() else {
            return Ok(());
        };
        add(&client, first, source).await?;
        let transaction = client
            .build_transaction()
            .isolation_level(IsolationLevel::Serializable)
            .start()
            .await?;
        for name in rest {
            add(&transaction, name, source).await?;
        }
        transaction.commit().await?;
        Ok(())
    }

    pub async fn count_items(pool: &Pool, source: &str) -> Result<i64, BoxError> {
        let client = pool.get().await?;
        let row = client
            .query_one(
                "SELECT count(*) FROM config_port_items WHERE source = $1",
                &[&source],
            )
            .await?;
        Ok(row.get(0))
    }

    /// The session's `application_name`, which the settings set.
    pub async fn application_name(pool: &Pool) -> Result<String, BoxError> {
        let client = pool.get().await?;
        let row = client
            .query_one("SELECT current_setting('application_name')", &[])
            .await?;
        Ok(row.get(0))
    }
}

/// Writes the server's settings into the environment under [`PREFIX`], as a deployment's
/// environment would carry them, with the pool's and the manager's sections.
fn export_settings(server: &tokio_postgres::Config) -> Result<(), BoxError> {
    let host = match server.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(host)) => host.clone(),
        Some(tokio_postgres::config::Host::Unix(path)) => path.display().to_string(),
        None => return Err("SLOTPOOL_PG names no host".into()),
    };
    let mut vars = vec![
        ("PG__HOST", host),
        ("PG__APPLICATION_NAME", "config-port-example".to_owned()),
        ("PG__MANAGER__RECYCLING_METHOD", "Clean".to_owned()),
        ("PG__POOL__MAX_SIZE", "4".to_owned()),
        ("PG__POOL__TIMEOUTS__WAIT__SECS", "5".to_owned()),
        ("PG__POOL__TIMEOUTS__WAIT__NANOS", "0".to_owned()),
        ("PG__POOL__QUEUE_MODE", "Lifo".to_owned()),
    ];
    if let Some(port) = server.get_ports().first() {
        vars.push(("PG__PORT", port.to_string()));
    }
    if let Some(user) = server.get_user() {
        vars.push(("PG__USER", user.to_owned()));
    }
    if let Some(dbname) = server.get_dbname() {
        vars.push(("PG__DBNAME", dbname.to_owned()));
    }
    if let Some(password) = server.get_password() {
        vars.push(("PG__PASSWORD", String::from_utf8(password.to_vec())?));
    }
    for (name, value) in vars {
        // Before any runtime or other thread exists.
        std::env::set_var(format!("{PREFIX}__{name}"), value);
    }
    Ok(())
}

fn main() -> Result<(), BoxError> {
    let Ok(settings) = std::env::var("SLOTPOOL_PG") else {
        if std::env::var_os("SLOTPOOL_PG_REQUIRED").is_some() {
            return Err("SLOTPOOL_PG_REQUIRED is set but SLOTPOOL_PG is not".into());
        }
        println!("skipped: SLOTPOOL_PG is not set (bench/postgres/start.sh starts a server)");
        return Ok(());
    };
    export_settings(&settings.parse()?)?;

    // Both pools from the same environment, before any runtime exists.
    let old = before::make_pool(&before::Settings::from_env(PREFIX)?)?;
    let new = after::make_pool(&after::Settings::from_env(PREFIX)?)?;
    let limits = (4, Some(Duration::from_secs(5)));
    assert_eq!(
        before::limits(&old),
        limits,
        "deadpool-postgres read the pool section"
    );
    assert_eq!(
        after::limits(&new),
        limits,
        "slotpool read the pool section"
    );

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        before::setup(&old).await?;
        after::setup(&new).await?;
        let names = ["a", "b", "c"];
        let (old_before, new_before) = (
            before::count_items(&old, "before").await?,
            after::count_items(&new, "after").await?,
        );
        before::add_items(&old, &names, "before").await?;
        after::add_items(&new, &names, "after").await?;
        assert_eq!(before::count_items(&old, "before").await? - old_before, 3);
        assert_eq!(after::count_items(&new, "after").await? - new_before, 3);
        assert_eq!(before::application_name(&old).await?, "config-port-example");
        assert_eq!(after::application_name(&new).await?, "config-port-example");
        println!(
            "both versions loaded the same environment, added 3 items each (one in a \
             serializable transaction) and named their sessions as configured"
        );
        Ok(())
    })
}
