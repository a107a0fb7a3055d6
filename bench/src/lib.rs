//! Reference designs (R1-R3 of the seed systems), peers and the side-by-side comparison.
#![allow(missing_docs)]

pub mod chart;
pub mod client_cases;
pub mod client_ref;
pub mod e2e_cases;
pub mod fixtures;
pub mod grpc;
pub mod keyed;
pub mod report;
pub mod scaling;
pub mod session;
pub mod stream_cases;
pub mod stream_ref;
