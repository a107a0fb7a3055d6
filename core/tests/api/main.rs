//! What every pool shares: the compile-time Send/Sync promise, the settings, wait times, the
//! metrics export and its names, and log capture.
//!
//! One test binary per area (each module below was a test binary of its own): the
//! workspace builds a few binaries instead of dozens.

#[cfg(feature = "metrics")]
#[path = "../capture/mod.rs"]
mod capture;
#[path = "../common/mod.rs"]
mod common;

mod log_capture;
mod metrics;
mod metrics_names;
mod send_sync;
mod settings;
mod wait_time;
