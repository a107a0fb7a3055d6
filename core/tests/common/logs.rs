//! Log capture: a buffer a `tracing_subscriber::fmt` subscriber writes into.
//!
//! # Why a capture also keeps a second dispatcher alive
//!
//! tracing caches each callsite's interest process-wide: when a callsite is first hit, tracing-
//! core asks the registered dispatchers whether they care, and later events from it skip every
//! subscriber if the answer was `never` (until some dispatcher registers and the cache is
//! rebuilt). While **only one** dispatcher is registered in the process, it does not ask the
//! registered ones: it asks the default dispatcher of the thread that hit the callsite first,
//! and it does so without its lock. A capture is a thread-local default, so a callsite first hit
//! on another thread (another test's, a pool's worker or blocking thread) with no subscriber was
//! cached as `never`, and the capturing thread's events from it were dropped before its
//! subscriber saw them: the capture came back empty. A second dispatcher (the one-off
//! `listen_across_threads` some tests took after their capture) makes tracing-core ask every
//! registered dispatcher instead, under its lock; taken after the capture, it left a window in
//! which the first hit still decided alone, and a thread preempted in that unlocked decision
//! could store `never` after the rebuild the second dispatcher made.
//!
//! So every capture now registers, before its own subscriber, one dispatcher that listens
//! nowhere and lives for the whole process: from the first capture on, every interest is
//! decided by asking all registered dispatchers under tracing-core's lock (never by one thread's
//! default alone), and each capture's registration rebuilds the whole cache with itself
//! included. The rebuild after `set_default` re-asks once more, covering a decision that began,
//! unlocked, before the first capture of the process.

use std::io;
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;

use tracing::subscriber::{DefaultGuard, NoSubscriber};
use tracing::Dispatch;

/// Captures every event (all levels) logged on this thread while the guard lives, whichever
/// thread hit the event's callsite first (see the module docs).
pub fn capture_logs() -> (Captured, DefaultGuard) {
    keep_two_dispatchers();
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_max_level(tracing::Level::TRACE)
        .finish();
    let guard = tracing::subscriber::set_default(subscriber);
    tracing::callsite::rebuild_interest_cache();
    (captured, guard)
}

/// Registers, once per process, a dispatcher that listens nowhere and is never dropped, so
/// that tracing-core never again decides a callsite's interest from one thread's default alone.
fn keep_two_dispatchers() {
    static LISTENER: OnceLock<Dispatch> = OnceLock::new();
    LISTENER.get_or_init(|| Dispatch::new(NoSubscriber::default()));
}

/// A buffer the fmt subscriber writes into.
#[derive(Clone, Default)]
pub struct Captured(Arc<Mutex<Vec<u8>>>);

impl Captured {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock()).into_owned()
    }
}

impl io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.lock().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
