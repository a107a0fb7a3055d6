//! Replays the `client_ops` fuzz target's logic under `cargo test`: every checked-in corpus
//! file, then a few hundred seeded pseudo-random op sequences. The driver and byte reader are
//! the fuzz crate's own files, included by path, so this is the same code the fuzzer runs.

/// Seeded sequences replayed besides the corpus.
const SEEDED_RUNS: u64 = 400;

#[test]
fn corpus_replays() {
    crate::replay_corpus("client_ops", crate::client_model::run);
}

#[test]
fn seeded_sequences_replay() {
    crate::replay_seeded(SEEDED_RUNS, crate::client_model::run);
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
