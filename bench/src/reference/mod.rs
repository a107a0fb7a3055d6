//! The reference designs.

pub mod client;
pub mod keyed;
pub mod session;
pub mod stream;
pub mod stream_depth1;
