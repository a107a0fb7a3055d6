//! Log capture: a buffer a `tracing_subscriber::fmt` subscriber writes into.

use std::io;
use std::sync::Arc;

use parking_lot::Mutex;
use tracing::subscriber::DefaultGuard;

/// Captures every event (all levels) logged on this thread while the guard lives.
pub fn capture_logs() -> (Captured, DefaultGuard) {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_max_level(tracing::Level::TRACE)
        .finish();
    (captured, tracing::subscriber::set_default(subscriber))
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
