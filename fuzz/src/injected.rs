//! The panics the drivers inject into user code (a connector, a factory, a manager, a
//! closure), which the pools must contain: each driver's message starts with [`PREFIX`].

use std::sync::Once;

/// How every injected panic's message begins (`injected by client_ops`, ...).
pub const PREFIX: &str = "injected by ";

/// Lets the injected panics through the process's panic hook quietly; every other panic goes
/// to the hook that was there (under cargo-fuzz, libFuzzer's, which aborts: a panic a pool
/// failed to contain still ends the run as a crash). Installs once per process, whichever
/// driver runs first.
pub fn pass_injected_panics() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let payload = info.payload();
            let message = payload
                .downcast_ref::<&str>()
                .copied()
                .or_else(|| payload.downcast_ref::<String>().map(String::as_str));
            if !message.is_some_and(|m| m.starts_with(PREFIX)) {
                previous(info);
            }
        }));
    });
}
