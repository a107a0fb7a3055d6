//! A PostgreSQL pool (`slotpool::managed::postgres`, feature `postgres`): tokio-postgres
//! connections in a managed pool, with a statement cache per connection.
//!
//! The server comes from `SLOTPOOL_PG` (a tokio-postgres connection string). Without one, or
//! when none answers, it says it skipped and exits successfully, unless `SLOTPOOL_PG_REQUIRED`
//! is set. A throwaway server:
//!
//! ```sh
//! bench/postgres/start.sh && . target/postgres/env
//! cargo run -p slotpool --features postgres --example postgres
//! bench/postgres/stop.sh
//! ```

use std::time::Duration;

use slotpool::managed::postgres::{PgManager, Recycling};
use slotpool::managed::{Pool, PoolError};

type BoxError = Box<dyn std::error::Error>;

/// Says why nothing ran, and whether that is a failure (`SLOTPOOL_PG_REQUIRED`).
fn skip(why: String) -> Result<(), BoxError> {
    if std::env::var_os("SLOTPOOL_PG_REQUIRED").is_some() {
        return Err(format!("SLOTPOOL_PG_REQUIRED is set: {why}").into());
    }
    println!("skipped: {why} (bench/postgres/start.sh starts a server)");
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), BoxError> {
    let Ok(settings) = std::env::var("SLOTPOOL_PG") else {
        return skip("SLOTPOOL_PG is not set".into());
    };
    let mut config: tokio_postgres::Config = settings.parse()?;
    config.application_name("slotpool-example");

    let pool = Pool::builder(PgManager::new(config).recycling(Recycling::Fast))
        .max_size(4)
        .create_timeout(Some(Duration::from_secs(2))) // a server that never answers
        .build()?;

    // The first `get` connects; a server that is not there fails it with a typed error.
    let mut client = match pool.get().await {
        Ok(client) => client,
        Err(e @ (PoolError::Create(_) | PoolError::Timeout { .. })) => {
            return skip(format!("no server answered at SLOTPOOL_PG: {e}"));
        }
        Err(e) => return Err(e.into()),
    };

    // `prepare_cached` prepares once per connection; the object derefs to the client.
    let statement = client.prepare_cached("SELECT $1::int + 1").await?;
    let row = client.query_one(&statement, &[&41i32]).await?;
    println!("the server says 41 + 1 = {}", row.get::<_, i32>(0));

    // A transaction shares the connection's statement cache; dropped uncommitted, it rolls back.
    let transaction = client.transaction().await?;
    let statement = transaction.prepare_cached("SELECT $1::int + 1").await?;
    let row = transaction.query_one(&statement, &[&1i32]).await?;
    assert_eq!(row.get::<_, i32>(0), 2);
    transaction.commit().await?;
    drop(client); // back to the pool

    // The same (lowest idle) connection comes back, its statement still cached.
    let client = pool.get().await?;
    println!(
        "{} statement(s) cached on this connection",
        client.statement_cache().len()
    );

    let stats = pool.stats();
    println!("created {}, in use {}", stats.created, stats.status.in_use);
    Ok(())
}
