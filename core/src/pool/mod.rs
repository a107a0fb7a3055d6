//! The pools: what users hold. Each stands on the protocols, runs its background tasks on
//! tokio, and ends them when it is dropped; guards hold no strong reference that keeps a
//! dropped pool alive.

pub mod channel;
pub mod client;
pub(crate) mod first;
pub(crate) mod hold;
pub mod keyed;
pub mod managed;
pub(crate) mod reap;
pub mod session;
pub(crate) mod settings;
pub mod stream;
pub(crate) mod wait;
