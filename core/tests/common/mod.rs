//! Helpers shared by the behaviour tests. Each `tests/*.rs` file is its own crate and uses
//! only part of this module, hence the `dead_code` allowance.
#![allow(dead_code)]

pub mod stream;
