//! The stream pool: acquire and send, bounds, deadlines, hung and in-order peers, panics and the
//! pinned sentences.
//!
//! One test binary per area (each module below was a test binary of its own): the
//! workspace builds a few binaries instead of dozens.

#[path = "../common/mod.rs"]
mod common;

mod stream;
mod stream_bound;
mod stream_deadline;
mod stream_hang;
mod stream_inorder;
mod stream_panic;
mod stream_pinned;
