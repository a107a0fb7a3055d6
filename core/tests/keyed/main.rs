//! Keyed admission: shares, aliases, deadlines, refusals, panics and the pinned sentences.
//!
//! One test binary per area (each module below was a test binary of its own): the
//! workspace builds a few binaries instead of dozens.

#[cfg(feature = "metrics")]
#[path = "../capture/mod.rs"]
mod capture;
#[path = "../common/mod.rs"]
mod common;

mod keyed;
mod keyed_pinned;
