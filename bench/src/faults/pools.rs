//! The three pools of the fault bench, each over a [`Counted`] manager, and one caller's
//! operation on each: a get under the caller's deadline, then the prepared `SELECT 1` (or the
//! slow query) under a timeout. Only the deadlines differ from each pool's defaults; see the
//! table in the [parent module](super).

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bb8_postgres::PostgresConnectionManager;
use slotpool::managed::postgres::PgManager;
use tokio_postgres::{Config, NoTls};

use super::counted::{Counted, Counts};
use super::{GET_DEADLINE, QUERY_DEADLINE, SLOW_QUERY};
use crate::cases::postgres::{Bb8Prepared, POOL_SIZE, QUERY};

/// The deadline of each get of the capacity check.
const HOLD_DEADLINE: Duration = Duration::from_secs(2);

/// A pool under test, and the counts of its manager.
pub struct FaultPool {
    pool: Inner,
    counts: Arc<Counts>,
}

enum Inner {
    /// slotpool's managed pool.
    Slotpool(slotpool::managed::Pool<Counted<PgManager>>),
    /// deadpool-postgres's pool (deadpool's generic pool over its manager).
    Deadpool(deadpool::managed::Pool<Counted<deadpool_postgres::Manager>>),
    /// bb8's pool over bb8-postgres's manager.
    Bb8(bb8::Pool<Counted<Bb8Prepared>>),
}

impl std::fmt::Debug for FaultPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultPool")
            .field("gauges", &self.gauges())
            .field("counts", &self.counts)
            .finish()
    }
}

/// How one operation went.
#[derive(Debug, Clone, Copy)]
pub struct Outcome {
    /// The get and the query succeeded.
    pub ok: bool,
    /// The get failed.
    pub failed_get: bool,
    /// How long the get took.
    pub got: Duration,
    /// How long the query took (zero without a connection).
    pub queried: Duration,
}

/// What a pool says it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gauges {
    /// Connections the pool counts as existing.
    pub size: usize,
    /// Of them, in use (out with a caller, or being made).
    pub in_use: usize,
}

/// Runs `query` under [`QUERY_DEADLINE`]: whether it answered in time.
async fn within<T, E>(query: impl Future<Output = Result<T, E>>) -> bool {
    matches!(tokio::time::timeout(QUERY_DEADLINE, query).await, Ok(Ok(_)))
}

impl FaultPool {
    /// `which` over `config`, with its [`POOL_SIZE`] connections open (and the statement
    /// prepared on each) before it is returned.
    ///
    /// # Panics
    /// If the server refuses them.
    pub async fn build(which: super::Impl, config: Config) -> Self {
        let counts = Arc::new(Counts::default());
        let pool = match which {
            super::Impl::Slotpool => Inner::Slotpool(
                slotpool::managed::Pool::builder(Counted::new(PgManager::new(config), &counts))
                    .max_size(POOL_SIZE)
                    .build()
                    .expect("valid bench configuration"),
            ),
            super::Impl::Deadpool => Inner::Deadpool(
                deadpool::managed::Pool::builder(Counted::new(
                    deadpool_postgres::Manager::new(config, NoTls),
                    &counts,
                ))
                .max_size(POOL_SIZE)
                .runtime(deadpool::Runtime::Tokio1)
                .build()
                .expect("valid bench configuration"),
            ),
            super::Impl::Bb8 => Inner::Bb8(
                bb8::Pool::builder()
                    .max_size(POOL_SIZE as u32)
                    .connection_timeout(GET_DEADLINE)
                    .build(Counted::new(
                        Bb8Prepared(PostgresConnectionManager::new(config, NoTls)),
                        &counts,
                    ))
                    .await
                    .expect("the bench server accepts connections"),
            ),
        };
        let pool = FaultPool { pool, counts };
        let opened = pool.hold_all().await;
        assert_eq!(
            opened, POOL_SIZE,
            "the bench server accepts the pool's connections"
        );
        pool
    }

    /// The counts of the pool's manager.
    pub fn counts(&self) -> &Arc<Counts> {
        &self.counts
    }

    /// What the pool says it holds now.
    pub fn gauges(&self) -> Gauges {
        match &self.pool {
            Inner::Slotpool(pool) => {
                let status = pool.status();
                Gauges {
                    size: status.size,
                    in_use: status.in_use,
                }
            }
            Inner::Deadpool(pool) => {
                let status = pool.status();
                Gauges {
                    size: status.size,
                    in_use: status.size.saturating_sub(status.available),
                }
            }
            Inner::Bb8(pool) => {
                let state = pool.state();
                Gauges {
                    size: state.connections as usize,
                    in_use: state.connections.saturating_sub(state.idle_connections) as usize,
                }
            }
        }
    }

    /// One caller's operation: get (under [`GET_DEADLINE`]), query (under
    /// [`QUERY_DEADLINE`]; [`SLOW_QUERY`] when `slow`), return.
    pub async fn op(&self, slow: bool) -> Outcome {
        let asked = Instant::now();
        let (got, ok) = match &self.pool {
            Inner::Slotpool(pool) => match pool.get_timeout(GET_DEADLINE).await {
                Err(_) => (asked.elapsed(), None),
                Ok(client) => {
                    let got = asked.elapsed();
                    let ok = if slow {
                        within(client.simple_query(SLOW_QUERY)).await
                    } else {
                        within(async {
                            let statement = client.prepare_cached(QUERY).await?;
                            client.query_one(&statement, &[]).await
                        })
                        .await
                    };
                    (got, Some(ok))
                }
            },
            Inner::Deadpool(pool) => {
                let timeouts = deadpool::managed::Timeouts {
                    wait: Some(GET_DEADLINE),
                    create: Some(GET_DEADLINE),
                    recycle: Some(GET_DEADLINE),
                };
                match pool.timeout_get(&timeouts).await {
                    Err(_) => (asked.elapsed(), None),
                    Ok(client) => {
                        let got = asked.elapsed();
                        let ok = if slow {
                            within(client.simple_query(SLOW_QUERY)).await
                        } else {
                            within(async {
                                let statement = client.prepare_cached(QUERY).await?;
                                client.query_one(&statement, &[]).await
                            })
                            .await
                        };
                        (got, Some(ok))
                    }
                }
            }
            Inner::Bb8(pool) => match pool.get().await {
                Err(_) => (asked.elapsed(), None),
                Ok(conn) => {
                    let got = asked.elapsed();
                    let ok = if slow {
                        within(conn.client.simple_query(SLOW_QUERY)).await
                    } else {
                        within(conn.client.query_one(&conn.select, &[])).await
                    };
                    (got, Some(ok))
                }
            },
        };
        Outcome {
            ok: ok == Some(true),
            failed_get: ok.is_none(),
            got,
            queried: asked.elapsed().saturating_sub(got),
        }
    }

    /// Checks out [`POOL_SIZE`] objects at once (each get under a deadline of its own),
    /// holds them, then returns them all: how many the pool could give. A unit of capacity
    /// the pool lost shows as one fewer.
    pub async fn hold_all(&self) -> usize {
        match &self.pool {
            Inner::Slotpool(pool) => {
                hold(|| async { pool.get_timeout(HOLD_DEADLINE).await.ok() }).await
            }
            Inner::Deadpool(pool) => {
                let timeouts = deadpool::managed::Timeouts {
                    wait: Some(HOLD_DEADLINE),
                    create: Some(HOLD_DEADLINE),
                    recycle: Some(HOLD_DEADLINE),
                };
                hold(|| async { pool.timeout_get(&timeouts).await.ok() }).await
            }
            Inner::Bb8(pool) => {
                hold(|| async {
                    tokio::time::timeout(HOLD_DEADLINE, pool.get())
                        .await
                        .ok()
                        .and_then(Result::ok)
                })
                .await
            }
        }
    }
}

/// Gets up to [`POOL_SIZE`] objects with `get`, holding each, until one fails; how many.
async fn hold<T, F, Fut>(get: F) -> usize
where
    F: Fn() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let mut held = Vec::with_capacity(POOL_SIZE);
    while held.len() < POOL_SIZE {
        match get().await {
            Some(object) => held.push(object),
            None => break,
        }
    }
    held.len()
}
