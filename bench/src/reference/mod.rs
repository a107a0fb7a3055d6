//! The reference designs.

pub mod client;
pub mod keyed;
pub mod stream;
