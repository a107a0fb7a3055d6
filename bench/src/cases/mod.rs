//! The cases the comparison runs.

pub mod client;
pub mod e2e;
pub mod keyed;
pub mod scaling;
pub mod session;
pub mod stream;
pub mod stream_depth1;
