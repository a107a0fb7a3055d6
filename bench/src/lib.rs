//! Reference designs (R1-R3 of the seed systems), peers and the side-by-side comparison.
#![allow(missing_docs)]

pub mod cases;
pub mod fixtures;
pub mod grpc;
pub mod reference;
pub mod report;
