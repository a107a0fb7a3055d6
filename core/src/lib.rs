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
//! # The map
//!
//! The crate is in layers, and imports only run downward: the ground, the protocols (no
//! tokio, no clock reads, plain `Waker`s, so loom drives them), the pools (tokio, clocks,
//! user code), and the integrations behind features. The public paths are flat
//! (`slotpool::stream`, `slotpool::slots`, ...); the folders below are where each lives.
//!
//! | layer | file | what it owns |
//! | --- | --- | --- |
//! | ground | `sync.rs` | the one place that names atomics, locks, `Arc`, `UnsafeCell` and spins; loom's under `--cfg slotpool_loom` |
//! | ground | `panic.rs` | [`panic`](mod@panic): containing panics of user code where a pool calls or polls it |
//! | ground | `error.rs` | [`ConfigError`], [`AcquireError`], [`Reach`]: typed errors that say whether a retry is safe |
//! | protocol | `protocol/slots/` | [`slots`]: the slot table. `mod.rs` the algorithm (reserve, claim, release, drain, reap), `word.rs` the packed slot word and reservation, `segment.rs` segments, hint bitmaps with their summary word, and growth |
//! | protocol | `protocol/gate.rs` | [`gate`]: waiting for capacity, a WAITING bit beside the state and a FIFO slow path whose nodes live in the waiting futures |
//! | protocol | `protocol/limit.rs` | [`limit`]: a counting limiter (semaphore) on the gate |
//! | protocol | `protocol/exclusive.rs` | [`exclusive`]: slots of load 0 or 1 that own one value each, a resizable live count, hand-overs to waiters, and the reaper's handshake |
//! | protocol | `protocol/shared.rs` | [`shared`]: slots whose load counts the holders of one shared value, and its share word |
//! | protocol | `protocol/quota.rs` | [`quota`]: a counting limiter whose permits hold no reference count (keyed admission's shares) |
//! | protocol | `protocol/routes.rs` | [`routes`]: keyed admission's route tables (fixed and published), aliases, registration and close |
//! | protocol | `protocol/flight/` | [`flight`]: single-flight registry (`mod.rs`), the session pool's decisions (`directory.rs`), use stamps (`stamp.rs`), batches (`batch.rs`) |
//! | protocol | `protocol/breaker.rs` | [`breaker`]: a consecutive-failure circuit breaker with one half-open probe |
//! | pool | `pool/settings.rs` | the settings every pool shares (idle timeout, reaping, clock, breaker) and their setters |
//! | pool | `pool/reap.rs` | the background reaper task every pool runs around its plain `reap(now)` |
//! | pool | `pool/wait.rs` | wait-time statistics: timing a caller's wait on the pool's clock (only when it waits), the pool's total and its `metrics` histogram |
//! | pool | `pool/stream/` | [`stream`]: multiplexed request streams (R1). `mod.rs` the pool, its acquire and send paths and the reaper's hung-peer checks, `connector.rs` what it asks of its user (the connector traits, correlation, the outbound half, request errors), `guard.rs` the acquire future and the guards, `driver.rs` a stream's task and its failures (panics of user code, timeouts), `routing.rs` where its responses go (by id or in order), `builder.rs` the settings |
//! | pool | `pool/managed/` | [`managed`]: the general object pool for deadpool and bb8 users (`Manager`, `Pool`, `Object`). `mod.rs` the get path and the protocol told once, `create.rs` creation (finished off a cancelled caller), `object.rs`, `builder.rs`, `manager.rs` the trait and hooks, `maintain.rs` reaping and `min_idle`, `stats.rs`, `error.rs`, `contain.rs` guarded user futures, `time.rs` return stamps without a clock read, `config.rs` `PoolConfig` (deadpool's, with its defaults), `postgres.rs` a `Manager` for tokio-postgres (feature `postgres`) with `postgres/config.rs` (deadpool-postgres's `Config` and its checks) and `postgres/generic_client.rs` (`GenericClient`) |
//! | pool | `pool/channel.rs` | [`channel`]: shared lazy channels (R1), on the shared cell |
//! | pool | `pool/client.rs` | [`client`]: exclusive clients over channels (R1), on the exclusive cell |
//! | pool | `pool/keyed/` | [`keyed`]: per-family admission for blocking work (R2). `mod.rs` admission and the blocking pool, `builder.rs`, `error.rs` |
//! | pool | `pool/session/` | [`session`]: one live connection per session (R3). `mod.rs` the acquire path, `establish.rs`, `live.rs`, `store.rs`, `builder.rs`, `error.rs` |
//! | integration | `integration/tonic.rs` | `tonic` (feature): lazy tonic channels and a bidi stream connector |
//! | integration | `integration/metrics.rs` | `metrics` (feature): every pool's stats through the `metrics` facade |
#![warn(missing_docs)]

mod sync;

pub mod error;
pub mod panic;
mod protocol;
// The pools and integrations need tokio and the clock; loom builds check the protocols alone.
#[cfg(not(slotpool_loom))]
mod integration;
#[cfg(not(slotpool_loom))]
mod pool;

pub use protocol::{breaker, exclusive, flight, gate, limit, quota, routes, shared, slots};

#[cfg(not(slotpool_loom))]
pub use pool::{channel, client, keyed, managed, session, stream};

#[cfg(all(feature = "metrics", not(slotpool_loom)))]
pub use integration::metrics;
#[cfg(all(feature = "tonic", not(slotpool_loom)))]
pub use integration::tonic;

pub use error::{AcquireError, Closed, ConfigError, Reach, TryAcquireError};
pub use gate::{Gate, WaitState, Waiter};
pub use limit::{Limit, OwnedPermit, Permit};
pub use slots::{Capacity, Phase, Reservation, SlotTable};

// What the pools' public signatures use, so no user needs a matching version of their crates:
// the clock the pools measure time with (`Clock::mock()` and its `Mock` for tests), and the
// parts of every `stats()` snapshot.
pub use breaker::BreakerState;
pub use quanta::{Clock, Instant, Mock};
pub use slots::TableStats;
