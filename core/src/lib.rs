//! slotpool: a lock-free pooling core for async services.
//!
//! Capacity lives in an **atomic slot table with per-slot load counters**: finding room is one
//! bitmap load and one CAS on the lowest-index slot with room, and a release with nobody
//! waiting takes no lock. The pools built on it share streams, channels, clients, blocking
//! threads and sessions among many callers; every protocol under them is checked with loom.
//!
//! # Quick start
//!
//! A managed pool, for what services pool with deadpool or bb8 (database connections,
//! clients): a [`Manager`](managed::Manager) says how to create an object (and, optionally, how
//! to check one before reuse); the pool hands out objects that go back on drop.
//!
//! ```
//! use std::convert::Infallible;
//! use std::time::Duration;
//! use slotpool::managed::{Manager, Pool, PoolError};
//!
//! /// A stand-in for a database client.
//! struct Conn { queries: u64 }
//!
//! struct Connector;
//! impl Manager for Connector {
//!     type Type = Conn;
//!     type Error = Infallible;
//!     async fn create(&self) -> Result<Conn, Infallible> {
//!         Ok(Conn { queries: 0 })
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let pool = Pool::builder(Connector).max_size(16).build()?;
//!
//! let mut conn = pool.get().await?;   // or try_get(), get_timeout(d)
//! conn.queries += 1;                  // derefs to your object
//! drop(conn);                         // back to the pool
//!
//! match pool.get_timeout(Duration::from_millis(50)).await {
//!     Ok(conn) => assert_eq!(conn.queries, 1, "the same connection came back"),
//!     Err(PoolError::Timeout { step, .. }) => println!("timed out in {step}"),
//!     Err(e) => return Err(e.into()),
//! }
//! # Ok(())
//! # }
//! ```
//!
//! Every pool, and the example in the repository's `core/examples/` that runs it:
//!
//! | you share | pool | example |
//! | --- | --- | --- |
//! | objects checked out alone: connections, clients | [`managed::Pool`] (and, with the `postgres` feature, a manager for tokio-postgres in `managed::postgres`) | `managed`, `postgres` |
//! | bidirectional streams carrying many requests at once | [`stream::StreamPool`] | `stream` |
//! | blocking-pool threads, a share per operation family | [`keyed::Keyed`] | `keyed` |
//! | one live connection per session id | [`session::SessionPool`] | `session` |
//! | HTTP/2 channels and exclusive clients over them | [`channel::ChannelPool`], [`client::ClientPool`] | their module docs |
//!
//! Run one with `cargo run -p slotpool --example stream` (`--features postgres` for
//! `postgres`). The features: `metrics` (every pool's stats through the `metrics` facade),
//! `tonic` (lazy tonic channels and a bidi stream connector), `postgres`.
//!
//! # What else is here
//!
//! * Errors ([`error`]) say whether a failed request can have had an effect ([`Reach`]), so a
//!   caller knows whether a retry is safe; a panic of user code the pools caught is a [`Panic`].
//! * [`blocks`]: the limiter and the wait queue the pools stand on, for a pool of your own.
//! * The pools run on tokio. They measure time with a [`Clock`] you can replace with a mock
//!   in tests (`Clock::mock()`); no test of theirs sleeps.
//!
//! How the slot table, its wait queue and every pool work, and how their protocols are
//! checked (loom models, fuzzing, planted bugs), is told in the repository's `docs/`.

#![warn(missing_docs)]

mod sync;

#[cfg(not(slotpool_loom))]
mod clock;

pub mod error;
mod panic;
// Some protocol items serve only the crate's own loom models, fuzz targets and tests, which
// reach them through `__internal`: without that feature they look unused.
#[cfg_attr(not(feature = "__internal"), allow(dead_code, unused_imports))]
mod protocol;
// The pools and integrations need tokio and the clock; loom builds check the protocols alone.
#[cfg(not(slotpool_loom))]
mod integration;
#[cfg(not(slotpool_loom))]
mod pool;

#[cfg(not(slotpool_loom))]
pub use pool::{channel, client, keyed, managed, session, stream};

#[cfg(all(feature = "metrics", not(slotpool_loom)))]
pub use integration::metrics;
#[cfg(all(feature = "tonic", not(slotpool_loom)))]
pub use integration::tonic;

pub use error::{AcquireError, Closed, ConfigError, Reach, TryAcquireError};
pub use panic::Panic;

/// Building blocks for a pool of your own: a counting limiter whose release takes no lock
/// while nobody waits ([`Limit`](blocks::Limit), with borrowed and owned permits), and the
/// wait queue under it and under every pool here ([`Gate`](blocks::Gate): FIFO, cancel-safe,
/// allocation-free waits). The repository's `core/examples/blocks.rs` builds a small pool on
/// them.
pub mod blocks {
    pub use crate::protocol::gate::{Gate, Waiter};
    pub use crate::protocol::limit::{Acquire, AcquireOwned, Limit, OwnedPermit, Permit};
}

#[cfg(not(slotpool_loom))]
pub use clock::{Clock, Instant, MockClock};

/// The crate's internals, for its own loom models, fuzz targets and tests: **not part of the
/// API**, no semver promise, and absent unless the `__internal` feature is on (which no user
/// should turn on).
#[cfg(feature = "__internal")]
#[doc(hidden)]
pub mod __internal {
    pub use crate::protocol::{
        breaker, exclusive, flight, gate, limit, quota, routes, shared, slots,
    };
}
