//! The protocols: lock-free building blocks with no tokio, no clock reads and no allocation on
//! their fast paths, driven by plain `Waker`s so that loom can check them.
//!
//! Each file here owns one protocol and imports only [`crate::sync`], [`crate::error`] and the
//! protocols below it; none imports a pool.

pub mod breaker;
pub mod exclusive;
pub mod flight;
pub mod gate;
pub mod limit;
pub mod quota;
pub mod routes;
pub mod shared;
pub mod slots;
