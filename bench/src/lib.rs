//! Reference designs (R1-R3 of the seed systems), peers and the side-by-side comparison.
#![allow(missing_docs)]

pub mod report;
