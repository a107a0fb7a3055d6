//! Replays the `client_ops` fuzz target's logic under `cargo test`: every checked-in corpus
//! file, then a few hundred seeded pseudo-random op sequences. The driver and byte reader are
//! the fuzz crate's own files, included by path, so this is the same code the fuzzer runs.

use std::path::PathBuf;

/// Seeded sequences replayed besides the corpus.
const SEEDED_RUNS: u64 = 400;

fn corpus_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/client_ops")
}

#[test]
fn corpus_replays() {
    let mut files: Vec<PathBuf> = std::fs::read_dir(corpus_dir())
        .expect("the client_ops corpus is checked in")
        .map(|entry| entry.expect("readable corpus entry").path())
        .filter(|path| path.is_file())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no corpus files in {:?}", corpus_dir());
    for file in &files {
        let data = std::fs::read(file).expect("readable corpus file");
        let result = std::panic::catch_unwind(|| crate::client_model::run(&data));
        assert!(result.is_ok(), "corpus file {file:?} diverged");
    }
}

/// xorshift64*: a tiny deterministic generator, so failures reproduce from the seed alone.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

#[test]
fn seeded_sequences_replay() {
    for seed in 1..=SEEDED_RUNS {
        let mut rng = XorShift(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        let len = 16 + (rng.next() % 400) as usize;
        let data: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        let result = std::panic::catch_unwind(|| crate::client_model::run(&data));
        assert!(result.is_ok(), "seed {seed} diverged; input: {data:?}");
    }
}

/// Found by the model (fixed since): a closed pool's `ClientStats::capacity` read `Some(0)`.
/// Its docs: "`max_clients`, if bounded". An unbounded pool (`max_clients(None)`), closed at
/// once: the model says `None`.
const CLOSED_UNBOUNDED_CAPACITY: &[u8] = &[0, 0, 0, 255];

/// The same for a pool bounded at one client: the model says `Some(1)`.
const CLOSED_BOUNDED_CAPACITY: &[u8] = &[0, 1, 0, 255];

#[test]
fn a_closed_pools_capacity_is_its_max_clients() {
    crate::client_model::run(CLOSED_UNBOUNDED_CAPACITY);
    crate::client_model::run(CLOSED_BOUNDED_CAPACITY);
}
