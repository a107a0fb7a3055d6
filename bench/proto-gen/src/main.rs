//! Generates `bench/src/grpc/getpage.rs` from `bench/proto/getpage.proto` with no system
//! `protoc`: `protox` parses the file into a descriptor set in pure Rust and
//! `tonic-prost-build` generates the messages, the client and the server from it.
//!
//! The output is committed, so building the bench crate compiles no protobuf compiler; CI
//! checks that it is what this generator makes of the `.proto` file.
//!
//! ```text
//! cargo run --manifest-path bench/proto-gen/Cargo.toml -- --check   # fails if stale
//! cargo run --manifest-path bench/proto-gen/Cargo.toml -- --write   # regenerates it
//! ```

use std::error::Error;
use std::path::Path;
use std::process::ExitCode;

/// The first line of the committed file, before the generator's own output.
const HEADER: &str = "// Generated from bench/proto/getpage.proto by bench/proto-gen \
                      (`cargo run --manifest-path bench/proto-gen/Cargo.toml -- --write`); \
                      do not edit.\n";

fn generate(bench: &Path) -> Result<String, Box<dyn Error>> {
    let proto_dir = bench.join("proto");
    let descriptors = protox::compile([proto_dir.join("getpage.proto")], [&proto_dir])?;
    let out = std::env::temp_dir().join(format!("slotpool-proto-gen-{}", std::process::id()));
    std::fs::create_dir_all(&out)?;
    tonic_prost_build::configure()
        .bytes(".getpage.GetPageResponse.page")
        .out_dir(&out)
        .compile_fds(descriptors)?;
    let code = std::fs::read_to_string(out.join("getpage.rs"))?;
    std::fs::remove_dir_all(&out)?;
    Ok(format!("{HEADER}{code}"))
}

fn main() -> ExitCode {
    let mode = std::env::args().nth(1).unwrap_or_default();
    let bench = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let target = bench.join("src/grpc/getpage.rs");
    let code = match generate(&bench) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: generating the gRPC code failed: {error}");
            return ExitCode::FAILURE;
        }
    };
    match mode.as_str() {
        "--write" => match std::fs::write(&target, code) {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                eprintln!("error: writing {}: {error}", target.display());
                ExitCode::FAILURE
            }
        },
        "--check" => {
            if std::fs::read_to_string(&target).ok().as_deref() == Some(code.as_str()) {
                ExitCode::SUCCESS
            } else {
                eprintln!(
                    "error: {} is not what bench/proto/getpage.proto generates: run \
                     `cargo run --manifest-path bench/proto-gen/Cargo.toml -- --write`",
                    target.display()
                );
                ExitCode::FAILURE
            }
        }
        _ => {
            eprintln!("usage: slotpool-proto-gen --check | --write");
            ExitCode::from(2)
        }
    }
}
