//! A managed pool (`slotpool::managed`) over a toy manager: what services pool with deadpool
//! or bb8 (database connections, clients), here a stand-in connection that counts its queries.
//!
//! ```sh
//! cargo run -p slotpool --example managed
//! ```

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use slotpool::managed::{Manager, Meta, Pool, PoolError, Recycle, RecycleError};

/// A stand-in for a database connection.
struct Conn {
    id: u32,
    queries: u64,
    broken: bool,
}

/// Creates connections and checks them before reuse.
#[derive(Default)]
struct Connector {
    opened: AtomicU32,
}

impl Manager for Connector {
    type Type = Conn;
    type Error = std::io::Error;

    async fn create(&self) -> Result<Conn, std::io::Error> {
        let id = self.opened.fetch_add(1, Ordering::Relaxed);
        Ok(Conn {
            id,
            queries: 0,
            broken: false,
        })
    }

    // Optional (the default accepts every object): a rejected connection is dropped and the
    // caller gets another one; a failed recycle never fails a `get`.
    async fn recycle(&self, conn: &mut Conn, _: &Meta) -> Result<(), RecycleError<Self::Error>> {
        if conn.broken {
            return Err(RecycleError::message("connection broken"));
        }
        Ok(())
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let pool = Pool::builder(Connector::default())
        .max_size(2)
        .recycle(Recycle::Always) // check every connection on its way out (the default)
        .build()?;

    // Check out, use, return (on drop). The lowest idle connection comes back next time.
    let mut conn = pool.get().await?;
    conn.queries += 1;
    let first = conn.id;
    drop(conn);
    let conn = pool.get().await?;
    println!(
        "connection {} again, {} query so far",
        conn.id, conn.queries
    );
    assert_eq!(conn.id, first);

    // Both connections out: `try_get` never waits, `get_timeout` says which step expired.
    let other = pool.get().await?;
    assert!(matches!(pool.try_get().await, Err(PoolError::NoCapacity)));
    match pool.get_timeout(Duration::from_millis(20)).await {
        Err(PoolError::Timeout { step, .. }) => {
            println!("no connection came back: timed out in {step}")
        }
        other => return Err(format!("expected a timeout, got {:?}", other.map(|c| c.id)).into()),
    }

    // A broken connection is rejected by `recycle` on its next checkout and replaced.
    let mut broken = other;
    broken.broken = true;
    drop(broken);
    drop(conn);
    let a = pool.get().await?;
    let b = pool.get().await?;
    println!("now holding connections {} and {}", a.id, b.id);
    assert!(!a.broken && !b.broken);

    let stats = pool.stats();
    println!(
        "created {}, discarded {}, in use {}, idle {}",
        stats.created, stats.discarded, stats.status.in_use, stats.status.available
    );
    assert_eq!(stats.discarded, 1);
    Ok(())
}
