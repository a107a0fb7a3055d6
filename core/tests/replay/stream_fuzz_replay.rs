//! Replays the `stream_ops` fuzz target's logic under `cargo test`: every checked-in corpus
//! file, then a few hundred seeded pseudo-random op sequences. The driver and byte reader are
//! the fuzz crate's own files, included by path, so this is the same code the fuzzer runs.

/// Seeded sequences replayed besides the corpus.
const SEEDED_RUNS: u64 = 400;

#[test]
fn corpus_replays() {
    crate::replay_corpus("stream_ops", crate::stream_model::run);
}

#[test]
fn seeded_sequences_replay() {
    crate::replay_seeded(SEEDED_RUNS, crate::stream_model::run);
}
