//! Fixtures for the `Keyed` tests: a one-slot share with an alias, and blocking closures the
//! test holds open.

use std::sync::Arc;
use std::time::Duration;

use slotpool::keyed::{Keyed, KeyedError};
use tokio::sync::oneshot;

use super::built;

/// A wait bound no test reaches.
pub const LONG: Duration = Duration::from_secs(3600);

/// One share, "journal", of one slot, and "ledger" aliased onto it.
pub fn one_slot_journal() -> Arc<Keyed<&'static str>> {
    let keyed = Keyed::builder()
        .share("journal", 1)
        .alias("ledger", "journal")
        .build();
    Arc::new(built(keyed))
}

/// A read of `key` that makes a single attempt (no wait) and whose closure returns `value`.
pub async fn read_now<T: Send + 'static>(
    keyed: &Keyed<&'static str>,
    key: &'static str,
    value: T,
) -> Result<T, KeyedError<&'static str>> {
    let work = move || value;
    keyed.read(&key, Duration::ZERO, work).await
}

/// A blocking closure that reports when it starts and then holds its slot until released.
///
/// Both ends are tokio's channels (the closure waits with `blocking_recv` on its blocking-pool
/// thread): compiled with the tests, so ThreadSanitizer sees the release, which a std channel
/// would hide from it.
pub struct Hold {
    pub started: oneshot::Receiver<()>,
    pub release: oneshot::Sender<()>,
}

pub fn hold() -> (Hold, impl FnOnce() + Send + 'static) {
    let (started_tx, started_rx) = oneshot::channel();
    let (release_tx, release_rx) = oneshot::channel::<()>();
    let work = move || {
        let _ = started_tx.send(());
        // Returns when released or when the test drops the sender.
        let _ = release_rx.blocking_recv();
    };
    (
        Hold {
            started: started_rx,
            release: release_tx,
        },
        work,
    )
}
