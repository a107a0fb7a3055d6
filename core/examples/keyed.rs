//! Keyed admission (`slotpool::keyed`): blocking work (a call that takes a lock and may wait on
//! `fsync`) runs on tokio's blocking pool within a share per operation family, so one family
//! stuck behind a slow disk parks at most its own share of the threads.
//!
//! ```sh
//! cargo run -p slotpool --example keyed
//! ```

use std::time::Duration;

use slotpool::keyed::{Keyed, KeyedError};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let keyed = Keyed::builder()
        .default_share(8)
        .family("journal") // a family with the default share
        .share("replay", 1) // a family with one slot
        .alias("ledger", "journal") // serializes on the journal's lock: same budget
        .max_blocking_threads(128) // what the runtime was built with
        .reserved_threads(16) // kept free for other blocking work
        .build()?; // shares that do not fit the blocking pool are an error here

    // A mutation: waits at most 50 ms for a slot, then runs on a blocking thread, inside the
    // given span there (and only there: the pool's own log lines stay outside it).
    let span = tracing::info_span!("commit", family = "ledger");
    let written = keyed
        .mutate_in(&"ledger", Duration::from_millis(50), span, || {
            // take the journal's mutex, write, fsync ...
            42
        })
        .await?;
    println!("ledger wrote {written} bytes");

    // "replay" has one slot. Hold it (as a call still running would), and the next call is
    // refused when its wait bound passes: it never ran, so a retry is safe.
    let held = keyed.admit(&"replay", Duration::from_millis(50)).await?;
    let refused = keyed.read(&"replay", Duration::from_millis(10), || 0).await;
    match refused {
        Err(e @ KeyedError::Refused { .. }) => {
            assert!(e.reach().retry_is_safe());
            println!("refused: {e}");
        }
        other => return Err(format!("expected a refusal, got {other:?}").into()),
    }
    drop(held);

    // The slot is back: the same call runs now.
    let found = keyed
        .read(&"replay", Duration::from_millis(10), || Some(7))
        .await?;
    assert_eq!(found, Some(7));

    // A key nobody registered is refused without running anything.
    let unknown = keyed.read(&"audit", Duration::ZERO, || ()).await;
    assert!(matches!(unknown, Err(KeyedError::Unregistered { .. })));

    for stats in keyed.stats() {
        println!(
            "{:>8} -> {:<8} {}/{} in use, {} refused",
            stats.key, stats.share, stats.in_use, stats.capacity, stats.refusals
        );
    }
    Ok(())
}
