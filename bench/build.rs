//! Compiles `proto/getpage.proto` into the tonic client and server used by the gRPC tests and
//! the `e2e/*` benchmarks, with no system `protoc`: `protox` parses the file into a descriptor
//! set in pure Rust and `tonic-prost-build` generates code from that.

use std::error::Error;

fn main() -> Result<(), Box<dyn Error>> {
    let proto = "proto/getpage.proto";
    println!("cargo:rerun-if-changed={proto}");
    let descriptors = protox::compile([proto], ["proto"])?;
    tonic_prost_build::configure()
        .bytes(".getpage.GetPageResponse.page")
        .compile_fds(descriptors)?;
    Ok(())
}
