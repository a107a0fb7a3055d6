//! Replays the `slots_ops` fuzz corpus and seeded random op sequences through the same
//! differential driver the fuzz target runs (the driver's source is shared with `#[path]`),
//! and checks that both reach stale releases (the generation checks), into reused slots too.

use std::path::Path;

#[test]
fn checked_in_corpus_replays_clean() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/slots_ops");
    let mut replayed = 0;
    let mut total = crate::slots_model::Coverage::default();
    for entry in std::fs::read_dir(&dir).expect("corpus directory exists") {
        let path = entry.expect("readable entry").path();
        let data = std::fs::read(&path).expect("readable corpus file");
        add(&mut total, crate::slots_model::run(&data));
        replayed += 1;
    }
    assert!(replayed > 0, "no corpus files in {}", dir.display());
    assert_reaches_stale_releases(total);
}

fn add(total: &mut crate::slots_model::Coverage, run: crate::slots_model::Coverage) {
    total.ops += run.ops;
    total.stale_releases += run.stale_releases;
    total.stale_into_reuse += run.stale_into_reuse;
}

#[track_caller]
fn assert_reaches_stale_releases(total: crate::slots_model::Coverage) {
    assert!(
        total.stale_releases > 0 && total.stale_into_reuse > 0,
        "no stale release (into a reused slot) was exercised: {total:?}"
    );
}

#[test]
fn seeded_random_sequences_match_the_model() {
    // xorshift64*: deterministic, no dependency.
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        state.wrapping_mul(0x2545_F491_4F6C_DD1D)
    };
    let mut total = crate::slots_model::Coverage::default();
    for _ in 0..2_000 {
        let len = 8 + (next() % 400) as usize;
        let data: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        add(&mut total, crate::slots_model::run(&data));
    }
    assert_reaches_stale_releases(total);
}
