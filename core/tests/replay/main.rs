//! The fuzz targets' corpora and seeded sequences, replayed against their sequential models under
//! `cargo test`.
//!
//! One test binary per area (each module below was a test binary of its own): the
//! workspace builds a few binaries instead of dozens.

#[allow(dead_code)]
#[path = "../../../fuzz/src/bytes.rs"]
mod bytes;
#[cfg(feature = "metrics")]
#[path = "../capture/mod.rs"]
mod capture;
#[path = "../../../fuzz/src/client_model.rs"]
mod client_model;
#[path = "../../../fuzz/src/injected.rs"]
mod injected;
#[path = "../../../fuzz/src/keyed_model.rs"]
mod keyed_model;
#[path = "../../../fuzz/src/managed_model.rs"]
mod managed_model;
#[path = "../../../fuzz/src/session_model.rs"]
mod session_model;
#[allow(dead_code)]
#[path = "../../../fuzz/src/slots_model.rs"]
mod slots_model;
#[path = "../../../fuzz/src/stream_model.rs"]
mod stream_model;

mod client_fuzz_replay;
mod keyed_fuzz_replay;
mod managed_fuzz_replay;
mod session_fuzz_replay;
mod slots_fuzz_replay;
mod stream_fuzz_replay;

/// Runs every checked-in corpus file of fuzz target `target` through `run` (its driver), in
/// name order; a divergence names the file.
fn replay_corpus(target: &str, run: fn(&[u8])) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(target);
    let mut files: Vec<std::path::PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("the {target} corpus is checked in ({dir:?}: {e})"))
        .map(|entry| entry.expect("readable corpus entry").path())
        .filter(|path| path.is_file())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no corpus files in {dir:?}");
    for file in &files {
        let data = std::fs::read(file).expect("readable corpus file");
        let result = std::panic::catch_unwind(|| run(&data));
        assert!(result.is_ok(), "corpus file {file:?} diverged");
    }
}

/// Runs `runs` seeded pseudo-random inputs (16 to 415 bytes) through `run`; a divergence names
/// its seed and input, so it reproduces from the seed alone.
fn replay_seeded(runs: u64, run: fn(&[u8])) {
    for seed in 1..=runs {
        let mut rng = XorShift(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        let len = 16 + (rng.next() % 400) as usize;
        let data: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        let result = std::panic::catch_unwind(|| run(&data));
        assert!(result.is_ok(), "seed {seed} diverged; input: {data:?}");
    }
}

/// xorshift64*: a tiny deterministic generator.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}
