//! The pools: what users hold. Each stands on the protocols, runs its background tasks on
//! tokio, and ends them when it is dropped; guards hold no strong reference that keeps a
//! dropped pool alive.

pub mod channel;
pub mod client;
#[cfg(not(slotpool_loom))]
pub mod keyed;
#[cfg(not(slotpool_loom))]
pub(crate) mod reap;
#[cfg(not(slotpool_loom))]
pub mod session;
#[cfg(not(slotpool_loom))]
pub mod stream;
