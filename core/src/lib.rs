//! slotpool: a lock-free pooling core for async services.
#![warn(missing_docs)]

mod sync;

pub mod breaker;
pub mod channel;
pub mod client;
pub mod error;
pub mod flight;
pub mod gate;
#[cfg(not(slotpool_loom))]
pub mod keyed;
pub mod limit;
#[cfg(all(feature = "metrics", not(slotpool_loom)))]
pub mod metrics;
#[cfg(not(slotpool_loom))]
mod reap;
#[cfg(not(slotpool_loom))]
pub mod session;
pub mod slots;
#[cfg(not(slotpool_loom))]
pub mod stream;
#[cfg(all(feature = "tonic", not(slotpool_loom)))]
pub mod tonic;

pub use error::{AcquireError, Closed, ConfigError, Reach, TryAcquireError};
pub use gate::{Gate, WaitState, Waiter};
pub use limit::{Limit, OwnedPermit, Permit};
pub use slots::{Capacity, Phase, Reservation, SlotTable};
