//! slotpool: a lock-free pooling core for async services.
#![warn(missing_docs)]

mod sync;

pub mod error;
#[cfg(not(slotpool_loom))]
mod integration;
mod pool;
mod protocol;

pub use protocol::{breaker, flight, gate, limit, slots};

// The pools need tokio and the clock; loom builds check the protocols alone.
#[cfg(not(slotpool_loom))]
pub use pool::{channel, client, keyed, session, stream};
// `channel` and `client` hold protocols that loom checks; they leave the pool files next.
#[cfg(slotpool_loom)]
pub use pool::{channel, client};

#[cfg(all(feature = "metrics", not(slotpool_loom)))]
pub use integration::metrics;
#[cfg(all(feature = "tonic", not(slotpool_loom)))]
pub use integration::tonic;

pub use error::{AcquireError, Closed, ConfigError, Reach, TryAcquireError};
pub use gate::{Gate, WaitState, Waiter};
pub use limit::{Limit, OwnedPermit, Permit};
pub use slots::{Capacity, Phase, Reservation, SlotTable};
