//! Documented behaviours of `slotpool::keyed` that no other test pinned (see
//! `docs/pinned.md`, section "Keyed"): the builder's defaults, the panic event's fields, a
//! lookup of an unknown key that inserts nothing, and the per-key panic counter of the
//! `metrics` feature. Deadlines run on tokio's paused clock; nothing sleeps.

use crate::common::keyed::{one_slot_journal, LONG};
use crate::common::logs::capture_logs;
use crate::common::panics::inject;
use slotpool::keyed::{BuildError, Keyed, KeyedError};
use slotpool::Reach;

/// Builder docs: "The share of keys registered without a size (default `DEFAULT_SHARE`)"
/// (8, R2's), "The blocking pool's thread limit ... (default
/// `TOKIO_DEFAULT_MAX_BLOCKING_THREADS`)" (512, tokio's), "Threads kept free ...; default 0".
/// Checked by what they do: 64 default shares of 8 fill 512 threads exactly, a 65th does not
/// fit.
#[test]
fn the_defaults_are_shares_of_8_in_512_threads_with_none_reserved() {
    let keyed = Keyed::<String>::builder()
        .family("journal".to_string())
        .build()
        .unwrap();
    assert_eq!(keyed.default_share(), 8);
    assert_eq!(keyed.max_blocking_threads(), 512);
    assert_eq!(keyed.reserved_threads(), 0);
    let journal = keyed.stats_for(&"journal".to_string()).unwrap();
    assert_eq!(journal.capacity, 8, "a family without a size gets 8 slots");

    let mut builder = Keyed::<String>::builder();
    for i in 0..64 {
        builder = builder.family(format!("family-{i}"));
    }
    let keyed = builder.build().unwrap();
    assert_eq!(keyed.total_shares(), 512);
    assert_eq!(
        keyed.register_default("family-64".to_string()),
        Err(BuildError::DoesNotFit {
            shares: 520,
            reserved: 0,
            max_blocking_threads: 512,
        })
    );
}

/// Module docs, failure model: a closure's panic is logged as "a `tracing` error event [that]
/// names the key, the reach and the message (never the request)".
#[tokio::test]
async fn the_panic_event_names_the_key_the_reach_and_the_message_only() {
    let keyed = one_slot_journal();
    let (logs, _guard) = capture_logs();
    let secret = String::from("SECRET-PAYLOAD-9b2e");
    let span = tracing::info_span!("request", body = %secret);
    let result = keyed
        .mutate_in(&"ledger", LONG, span, move || -> usize {
            let _ = secret.len();
            inject("mid-commit")
        })
        .await;
    assert!(matches!(result, Err(KeyedError::Panicked { .. })));
    let text = logs.text();
    let event = text
        .lines()
        .find(|line| line.contains("ERROR") && line.contains("panicked"));
    let event = event.unwrap_or_else(|| panic!("no panic event in {text:?}"));
    assert!(event.contains("key=\"ledger\""), "{event}");
    assert!(event.contains("reach=MaybeApplied"), "{event}");
    assert!(event.contains("mid-commit exploded"), "{event}");
    assert!(!text.contains("SECRET"), "request contents leaked: {text}");
}

/// Module docs, the algorithm: "A request can only *look up* a key, and a lookup of an
/// unknown key is refused without inserting anything."
#[tokio::test]
async fn a_lookup_of_an_unknown_key_inserts_nothing() {
    let keyed = one_slot_journal();
    let before = keyed.stats().len();
    for _ in 0..3 {
        let refused = keyed.admit(&"jornal", LONG).await.map(drop);
        assert_eq!(
            refused,
            Err(KeyedError::Unregistered {
                key: "jornal",
                reach: Reach::NotSent
            })
        );
    }
    assert!(keyed.stats_for(&"jornal").is_none());
    assert_eq!(keyed.share_of(&"jornal"), None);
    assert_eq!(keyed.stats().len(), before);
    assert_eq!(keyed.total_shares(), 1);
    assert_eq!(keyed.register("jornal", 1), Ok(()), "not there to clash");
}

#[cfg(feature = "metrics")]
mod metrics_export {
    use super::*;
    use crate::capture::Capture;

    /// Module docs, statistics and metrics: each caller key exports
    /// `slotpool_keyed_panics_total`, labelled `key` and `share`.
    #[tokio::test]
    async fn panics_are_counted_per_caller_key_with_its_share() {
        let capture = Capture::default();
        let keyed = metrics::with_local_recorder(&capture, one_slot_journal);
        let _listening = crate::common::panics::listen_across_threads();
        let panicked = keyed
            .read(&"ledger", LONG, || -> u8 { inject("read") })
            .await;
        assert!(matches!(panicked, Err(KeyedError::Panicked { .. })));
        assert_eq!(
            capture.counter("slotpool_keyed_panics_total{key=ledger,share=journal}"),
            1
        );
        assert_eq!(
            capture.counter("slotpool_keyed_panics_total{key=journal,share=journal}"),
            0
        );
    }
}
