//! Replays the `keyed_ops` fuzz target's logic under `cargo test`: every checked-in corpus
//! file, then a few hundred seeded pseudo-random op sequences. The driver and byte reader are
//! the fuzz crate's own files, included by path, so this is the same code the fuzzer runs.

/// Seeded sequences replayed besides the corpus.
const SEEDED_RUNS: u64 = 400;

#[test]
fn corpus_replays() {
    crate::replay_corpus("keyed_ops", crate::keyed_model::run);
}

#[test]
fn seeded_sequences_replay() {
    crate::replay_seeded(SEEDED_RUNS, crate::keyed_model::run);
}

/// Found by the model, now fixed: the panic of a closure whose caller stopped waiting was not
/// counted in its key's `KeyStats::panics` (nor logged). The module docs: "A closure's panic is
/// caught on the blocking thread, where it happened: ... the caller key's panic count
/// (`KeyStats::panics`) goes up". One share `a` of one slot: a `mutate` whose closure will
/// panic is admitted, its caller's task is aborted while the closure runs, then the closure is
/// let go and panics: `a`'s panics must read 1.
const ABANDONED_PANIC: &[u8] = &[0, 0, 0, 0, 39, 0, 11, 0, 9, 0];

#[test]
fn an_abandoned_calls_panic_is_counted_for_its_key() {
    crate::keyed_model::run(ABANDONED_PANIC);
}
