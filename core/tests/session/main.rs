//! The session pool: establishment, bounds, reaping on a mock and a real clock, and the pinned
//! sentences.
//!
//! One test binary per area (each module below was a test binary of its own): the
//! workspace builds a few binaries instead of dozens.

#[path = "../common/mod.rs"]
mod common;

mod session;
mod session_bound;
mod session_pinned;
mod session_real_clock;
