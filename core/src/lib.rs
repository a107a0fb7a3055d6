//! slotpool: a lock-free pooling core for async services.
#![warn(missing_docs)]

mod sync;

pub mod error;
mod protocol;
// The pools and integrations need tokio and the clock; loom builds check the protocols alone.
#[cfg(not(slotpool_loom))]
mod integration;
#[cfg(not(slotpool_loom))]
mod pool;

pub use protocol::{breaker, exclusive, flight, gate, limit, shared, slots};

#[cfg(not(slotpool_loom))]
pub use pool::{channel, client, keyed, session, stream};

#[cfg(all(feature = "metrics", not(slotpool_loom)))]
pub use integration::metrics;
#[cfg(all(feature = "tonic", not(slotpool_loom)))]
pub use integration::tonic;

pub use error::{AcquireError, Closed, ConfigError, Reach, TryAcquireError};
pub use gate::{Gate, WaitState, Waiter};
pub use limit::{Limit, OwnedPermit, Permit};
pub use slots::{Capacity, Phase, Reservation, SlotTable};
