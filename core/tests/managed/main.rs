//! The managed pool and its PostgreSQL manager: the contract, deadpool's and bb8's names, bounds,
//! cancellation, deadlines, back-off, storms, metrics, real-clock runs and the pinned sentences.
//!
//! One test binary per area (each module below was a test binary of its own): the
//! workspace builds a few binaries instead of dozens.

#[cfg(feature = "metrics")]
#[path = "../capture/mod.rs"]
mod capture;
#[path = "../common/mod.rs"]
mod common;

mod managed;
mod managed_backoff;
mod managed_bb8;
mod managed_bound;
mod managed_cancel;
mod managed_deadline;
mod managed_dropin;
mod managed_metrics;
mod managed_pinned;
mod managed_postgres;
mod managed_real_clock;
mod managed_recycle_now;
mod managed_storm;
mod postgres_dropin;
