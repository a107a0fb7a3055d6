//! A session pool (`slotpool::session`): one live connection per session id, established
//! once however many callers ask at once, and reattached to its daemon loop after a release.
//! The daemon here is in-process: connections are numbers, and it counts what it is asked.
//!
//! ```sh
//! cargo run -p slotpool --example session
//! ```

use std::convert::Infallible;
use std::future::pending;
use std::sync::atomic::{AtomicU32, Ordering};

use slotpool::session::{Connector, LoopId, Origin, SessionContext, SessionPool};

#[derive(Default)]
struct Daemon {
    connects: AtomicU32,
}

impl Connector for Daemon {
    type Conn = u32;
    type Event = String;
    type Error = Infallible;

    async fn connect(&self) -> Result<u32, Infallible> {
        Ok(self.connects.fetch_add(1, Ordering::Relaxed))
    }
    // Creates the session's loop on the daemon; its id goes to the session store.
    async fn bootstrap(
        &self,
        _: &u32,
        session: &str,
        ctx: &SessionContext,
    ) -> Result<LoopId, Infallible> {
        Ok(LoopId::new(format!("loop-{}-{session}", ctx.workspace)))
    }
    async fn reattach(&self, _: &u32, _: &LoopId) -> Result<(), Infallible> {
        Ok(())
    }
    fn is_alive(&self, _: &u32) -> bool {
        true // called on every hot acquire: keep it a load
    }
    async fn next_event(&self, _: &u32) -> Option<String> {
        pending().await // this daemon sends no events
    }
    fn close(&self, _: &u32) {}
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let pool = SessionPool::builder(Daemon::default())
        .pool_size(100)
        .build()?;
    let ctx = SessionContext::new("workspace-1", "alice");

    // Three callers ask for a new session at once: one connect and one bootstrap (single
    // flight), and all three get the same connection.
    let (a, b, c) = tokio::join!(
        pool.acquire("s-1", &ctx),
        pool.acquire("s-1", &ctx),
        pool.acquire("s-1", &ctx)
    );
    let (first, b, c) = (a?, b?, c?);
    assert!(first.same_connection(&b) && first.same_connection(&c));
    assert_eq!(pool.stats().connects, 1);
    println!("{:?} on connection {}", first.loop_id(), first.connection());

    // Again: the hot path, same connection, nothing awaited on the network.
    let again = pool.acquire("s-1", &ctx).await?;
    assert!(first.same_connection(&again));

    // Released: the connection closes and its capacity returns. The store kept the loop id,
    // so the next acquire opens a new connection and reattaches to the same loop.
    assert!(pool.release("s-1"));
    assert!(!first.is_open());
    let back = pool.acquire("s-1", &ctx).await?;
    assert_eq!(back.origin(), Origin::Reattached);
    assert_eq!(back.loop_id(), first.loop_id());

    let stats = pool.stats();
    println!(
        "{} connects, {} bootstrap, {} reattach, {} of {} in use",
        stats.connects, stats.bootstraps, stats.reattaches, stats.in_use, stats.capacity
    );
    pool.close();
    Ok(())
}
