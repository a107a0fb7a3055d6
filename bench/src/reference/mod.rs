//! The reference designs.

pub mod client;
pub mod stream;
