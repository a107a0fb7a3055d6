//! Panics the tests inject into user code on purpose: a marker that keeps them quiet, and a
//! record of every panic message seen in the process (to check that none the pool should have
//! prevented happened).

use parking_lot::{Mutex, Once};

/// Every injected panic message carries this marker; the hook does not print those.
pub const INJECTED: &str = "(injected)";

/// Every panic message seen. parking_lot's lock, compiled with the tests, so ThreadSanitizer
/// sees two panicking threads take turns (std's is not instrumented).
static SEEN: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Installs (once per test process) a panic hook that records every panic's message and
/// prints those that are not injected, as the default hook would.
pub fn watch_panics() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let payload = info.payload();
            let message = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            let injected = message.contains(INJECTED);
            SEEN.lock().push(message);
            if !injected {
                previous(info);
            }
        }));
    });
}

/// How many panics seen so far (in any test of this process) said something containing `text`.
pub fn panics_saying(text: &str) -> usize {
    SEEN.lock()
        .iter()
        .filter(|message| message.contains(text))
        .count()
}

/// Panics with `what` and the marker (the injected panic of a fake).
pub fn inject(what: &str) -> ! {
    watch_panics();
    panic!("{what} exploded {INJECTED}")
}

/// A second dispatcher, held for a test: while it lives tracing-core decides every callsite's
/// interest by asking all registered dispatchers, not the registering thread's default alone.
/// A log capture needs none of its own: `logs::capture_logs` keeps one for the whole process
/// (its module docs tell why).
pub fn listen_across_threads() -> tracing::Dispatch {
    tracing::Dispatch::new(tracing::subscriber::NoSubscriber::default())
}
