//! Replays the `managed_ops` fuzz target's logic under `cargo test`: every checked-in corpus
//! file, then a few hundred seeded pseudo-random op sequences. The driver and byte reader are
//! the fuzz crate's own files, included by path, so this is the same code the fuzzer runs.

/// Seeded sequences replayed besides the corpus.
const SEEDED_RUNS: u64 = 400;

#[test]
fn corpus_replays() {
    crate::replay_corpus("managed_ops", crate::managed_model::run);
}

#[test]
fn seeded_sequences_replay() {
    crate::replay_seeded(SEEDED_RUNS, crate::managed_model::run);
}

/// Found by the model (fixed): in `QueueMode::Lowest` a checkout that left fewer than
/// `min_idle` idle did not wake the top-up when objects were in use above the slot it took.
/// The docs of `PoolBuilder::min_idle`: "creating them in the background (at build, whenever
/// objects are dropped, and after a checkout that may leave fewer idle: at once, not at the
/// next reap interval)". `max_size` 3, `min_idle` 1, by hand reaping: two gets (the top-up
/// fills slots 1 and 2 behind them), slot 0 comes back, `retain` drops slot 2's object (a
/// top-up finds one idle: enough), then a get takes slot 0: none idle, room for one.
const LOWEST_CHECKOUT_LEAVES_MIN_IDLE_UNFILLED: &[u8] =
    &[2, 0, 0, 0, 1, 0, 0, 0, 0, 0, 4, 0, 15, 1, 0, 0, 0];

/// Found by the model (fixed): a `get_timeout` whose deadline passed while it recycled an
/// idle object (it never waited nor created) counted in `gets_timed_out` but not in `gets`.
/// The docs of `Stats::gets`: `gets - gets_direct - gets_waited - gets_timed_out` are "the
/// gets under way or that ended otherwise": it was 1 - 1 - 0 - 1. `max_size` 1: a get and its
/// return, then a recycle that takes 35 ms under `get_timeout(13 ms)`.
const DEADLINE_IN_RECYCLE_UNCOUNTED: &[u8] = &[0, 1, 0, 0, 0, 0, 0, 0, 4, 0, 9, 30, 0, 3];

#[test]
fn a_lowest_checkout_that_leaves_fewer_than_min_idle_wakes_the_top_up() {
    crate::managed_model::run(LOWEST_CHECKOUT_LEAVES_MIN_IDLE_UNFILLED);
}

#[test]
fn a_get_timeout_cut_short_in_its_recycle_counts_in_gets() {
    crate::managed_model::run(DEADLINE_IN_RECYCLE_UNCOUNTED);
}
