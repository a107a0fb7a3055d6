//! Fixtures for the `Keyed` tests: a one-slot share with an alias, and blocking closures the
//! test holds open.

use std::sync::{mpsc, Arc};
use std::time::Duration;

use slotpool::keyed::{Keyed, KeyedError};

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
pub struct Hold {
    pub started: tokio::sync::oneshot::Receiver<()>,
    pub release: mpsc::Sender<()>,
}

pub fn hold() -> (Hold, impl FnOnce() + Send + 'static) {
    let (started_tx, started_rx) = tokio::sync::oneshot::channel();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let work = move || {
        let _ = started_tx.send(());
        // Returns when released or when the test drops the sender.
        let _ = release_rx.recv();
    };
    (
        Hold {
            started: started_rx,
            release: release_tx,
        },
        work,
    )
}
