//! The fuzz targets' corpora and seeded sequences, replayed against their sequential models under
//! `cargo test`.
//!
//! One test binary per area (each module below was a test binary of its own): the
//! workspace builds a few binaries instead of dozens.

#[allow(dead_code)]
#[path = "../../../fuzz/src/bytes.rs"]
mod bytes;
#[path = "../../../fuzz/src/client_model.rs"]
mod client_model;
#[path = "../../../fuzz/src/keyed_model.rs"]
mod keyed_model;
#[path = "../../../fuzz/src/managed_model.rs"]
mod managed_model;
#[path = "../../../fuzz/src/session_model.rs"]
mod session_model;
#[allow(dead_code)]
#[path = "../../../fuzz/src/slots_model.rs"]
mod slots_model;

mod client_fuzz_replay;
mod keyed_fuzz_replay;
mod managed_fuzz_replay;
mod session_fuzz_replay;
mod slots_fuzz_replay;
