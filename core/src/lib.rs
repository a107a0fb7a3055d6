//! slotpool: a lock-free pooling core for async services.
#![warn(missing_docs)]

mod sync;

pub mod error;
pub mod gate;
pub mod limit;

pub use error::{AcquireError, Closed, ConfigError, Reach, TryAcquireError};
pub use gate::{Gate, WaitState, Waiter};
pub use limit::{Limit, OwnedPermit, Permit};
