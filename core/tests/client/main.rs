//! The channel and client pools: placement, bounds, nested reaping, broken channels, holds kept too
//! long and the pinned sentences.
//!
//! One test binary per area (each module below was a test binary of its own): the
//! workspace builds a few binaries instead of dozens.

#[path = "../common/mod.rs"]
mod common;

mod channel_client;
mod channel_pinned;
mod client_bound;
mod client_pinned;
