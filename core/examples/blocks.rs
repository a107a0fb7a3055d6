//! A pool of your own on slotpool's building blocks (`slotpool::blocks`).
//!
//! `BufferPool` lends out reusable byte buffers, at most `max` at once: a [`Limit`] bounds
//! the loans (an owned permit travels with each buffer, and its release takes no lock while
//! nobody waits), and a plain list keeps the idle buffers. A [`Gate`] then builds something
//! the limiter does not offer: a latch that tasks wait on until the pool has been warmed up,
//! FIFO and cancel-safe, with no allocation per wait.
//!
//! Run: `cargo run -p slotpool --example blocks`.

use std::future::poll_fn;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use slotpool::blocks::{Gate, Limit, OwnedPermit};

/// Reusable buffers, at most `max` lent out at once.
struct BufferPool {
    loans: Arc<Limit>,
    idle: Mutex<Vec<Vec<u8>>>,
    warmed: AtomicBool,
    warm_gate: Gate,
}

/// A lent buffer: back to the pool on drop, then its permit goes (waking the oldest waiter).
struct Buffer<'p> {
    bytes: Option<Vec<u8>>,
    pool: &'p BufferPool,
    _permit: OwnedPermit,
}

impl BufferPool {
    fn new(max: usize) -> Result<Self, slotpool::ConfigError> {
        Ok(BufferPool {
            loans: Arc::new(Limit::new(max)?),
            idle: Mutex::new(Vec::new()),
            warmed: AtomicBool::new(false),
            warm_gate: Gate::new(),
        })
    }

    /// A buffer, once one of the `max` loans is free (FIFO among waiters).
    async fn get(&self) -> Result<Buffer<'_>, slotpool::Closed> {
        let permit = Arc::clone(&self.loans).acquire_owned().await?;
        let bytes = self.idle.lock().unwrap().pop().unwrap_or_default();
        Ok(Buffer {
            bytes: Some(bytes),
            pool: self,
            _permit: permit,
        })
    }

    /// Fills the idle list, then opens the latch: every task waiting in `warmed` goes on.
    fn warm_up(&self, buffers: usize) {
        self.idle
            .lock()
            .unwrap()
            .extend((0..buffers).map(|_| Vec::with_capacity(4096)));
        // The flag with a `SeqCst` write, then the wake-ups: a waiter that queued after our
        // store sees the flag on its recheck, one that queued before is woken.
        self.warmed.store(true, Ordering::SeqCst);
        while self.warm_gate.has_waiters() {
            self.warm_gate.notify_one();
        }
    }

    /// Waits until `warm_up` has run (at once if it has).
    async fn warmed(&self) {
        let mut waiter = pin!(self.warm_gate.waiter());
        let ready = poll_fn(|cx| {
            waiter
                .as_mut()
                .poll_until(cx, || self.warmed.load(Ordering::SeqCst).then_some(()))
        })
        .await;
        ready.expect("the latch is never closed");
        // A woken waiter passes nothing on: each one was woken by its own notify.
    }
}

impl Drop for Buffer<'_> {
    fn drop(&mut self) {
        if let Some(mut bytes) = self.bytes.take() {
            bytes.clear();
            self.pool.idle.lock().unwrap().push(bytes);
        }
    }
}

impl std::ops::Deref for Buffer<'_> {
    type Target = Vec<u8>;
    fn deref(&self) -> &Vec<u8> {
        self.bytes.as_ref().expect("held until dropped")
    }
}

impl std::ops::DerefMut for Buffer<'_> {
    fn deref_mut(&mut self) -> &mut Vec<u8> {
        self.bytes.as_mut().expect("held until dropped")
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let pool = Arc::new(BufferPool::new(2)?);

    // Three tasks wait for the warm-up, then each writes into a buffer.
    let mut tasks = Vec::new();
    for n in 0..3u8 {
        let pool = Arc::clone(&pool);
        tasks.push(tokio::spawn(async move {
            pool.warmed().await;
            let mut buffer = pool.get().await.expect("the limit is never closed");
            buffer.extend_from_slice(&[n; 16]);
            buffer.len()
        }));
    }
    tokio::task::yield_now().await;
    assert_eq!(
        pool.warm_gate.waiting(),
        3,
        "all three wait for the warm-up"
    );
    pool.warm_up(2);
    for task in tasks {
        assert_eq!(task.await?, 16);
    }

    // Two loans at most: a third waits until one comes back.
    let first = pool.get().await?;
    let second = pool.get().await?;
    assert_eq!((pool.loans.in_use(), pool.loans.available()), (2, 0));
    assert!(pool.loans.try_acquire().is_err(), "no third loan");
    drop(first);
    let third = pool.get().await?;
    assert!(third.is_empty(), "a returned buffer comes back cleared");
    drop((second, third));
    assert_eq!(
        pool.idle.lock().unwrap().len(),
        2,
        "every buffer is back, none was lost"
    );
    println!("blocks: 3 tasks waited for the warm-up, 2 buffers served every loan");
    Ok(())
}
