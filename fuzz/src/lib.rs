//! Differential drivers shared by the fuzz targets and by `cargo test` (the workspace's tests
//! include these files with `#[path]`, so the corpus replays under the README's test command).
pub mod bytes;
#[cfg(feature = "metrics")]
#[path = "../../core/tests/capture/mod.rs"]
pub mod capture;
pub mod client_model;
pub mod injected;
pub mod keyed_model;
pub mod managed_model;
pub mod session_model;
pub mod slots_model;
pub mod stream_model;
