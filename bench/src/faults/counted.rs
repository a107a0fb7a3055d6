//! A counting manager: wraps a pool's own manager (slotpool's, deadpool's or bb8's, one
//! wrapper implementing all three traits) and counts what the pool cannot misreport: every
//! connection attempt (with when it began), every success, and the connections that exist
//! right now, as the objects themselves count them (each [`Tracked`] connection decrements
//! the count when it is dropped, whoever drops it).
//!
//! The fault bench compares [`Counts::live`] with what the pool says it holds: a pool that
//! counts a connection that no longer exists (or forgets one that does) has leaked.
//!
//! The blackhole proxy ([`super::proxy`]) counts the connections it carries in a [`Counts`]
//! too (an attempt per accepted connection, a live one per connection it forwards): the
//! tonic scenarios, whose channels reconnect inside tonic where no manager sees them, count
//! their connection attempts there.
//!
//! This file owns the counting; the checks before reuse stay the wrapped manager's.

use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;

/// What a [`Counted`] manager saw. Shared by the manager and every connection it made.
#[derive(Debug, Default)]
pub struct Counts {
    /// When each connection attempt began, in order (cold: one push per attempt).
    attempts: Mutex<Vec<Instant>>,
    /// Attempts that returned a connection.
    connected: AtomicU64,
    /// Connections that exist: made and not yet dropped.
    /// INVARIANT: `live == connected - (Tracked values dropped)`, never below 0.
    live: AtomicI64,
}

impl Counts {
    /// Connection attempts so far.
    pub fn attempts(&self) -> u64 {
        self.attempts.lock().len() as u64
    }

    /// Connection attempts that began in `[from, to]`.
    pub fn attempts_between(&self, from: Instant, to: Instant) -> u64 {
        let attempts = self.attempts.lock();
        attempts
            .iter()
            .filter(|&&at| at >= from && at <= to)
            .count() as u64
    }

    /// Attempts that returned a connection.
    pub fn connected(&self) -> u64 {
        self.connected.load(Ordering::SeqCst)
    }

    /// Connections that exist now.
    pub fn live(&self) -> i64 {
        self.live.load(Ordering::SeqCst)
    }

    /// Notes a connection attempt beginning now.
    pub(crate) fn attempt(&self) {
        self.attempts.lock().push(Instant::now());
    }

    /// Counts `inner` as a connection made, and as one that exists until the returned value
    /// is dropped.
    pub(crate) fn track<T>(self: &Arc<Self>, inner: T) -> Tracked<T> {
        self.connected.fetch_add(1, Ordering::SeqCst);
        self.live.fetch_add(1, Ordering::SeqCst);
        Tracked {
            inner,
            counts: Arc::clone(self),
        }
    }
}

/// A connection counted in its manager's [`Counts::live`] until it is dropped. Derefs to the
/// wrapped manager's connection.
#[derive(Debug)]
pub struct Tracked<T> {
    inner: T,
    counts: Arc<Counts>,
}

impl<T> Deref for Tracked<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.inner
    }
}

impl<T> DerefMut for Tracked<T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.inner
    }
}

impl<T> Drop for Tracked<T> {
    fn drop(&mut self) {
        let before = self.counts.live.fetch_sub(1, Ordering::SeqCst);
        debug_assert!(before > 0, "a tracked connection dropped twice");
    }
}

/// A manager `M` whose connections are [`Tracked`] in its [`Counts`].
#[derive(Debug)]
pub struct Counted<M> {
    inner: M,
    counts: Arc<Counts>,
}

impl<M> Counted<M> {
    /// Wraps `inner`, counting in `counts`.
    pub fn new(inner: M, counts: &Arc<Counts>) -> Self {
        Self {
            inner,
            counts: Arc::clone(counts),
        }
    }

    /// The counts, shared with the connections.
    pub fn counts(&self) -> &Arc<Counts> {
        &self.counts
    }

    /// Runs one connection attempt, counting it and, on success, the connection.
    async fn connect<T, E>(
        &self,
        attempt: impl std::future::Future<Output = Result<T, E>>,
    ) -> Result<Tracked<T>, E> {
        self.counts.attempt();
        let inner = attempt.await?;
        Ok(self.counts.track(inner))
    }
}

impl<M: slotpool::managed::Manager> slotpool::managed::Manager for Counted<M> {
    type Type = Tracked<M::Type>;
    type Error = M::Error;

    async fn create(&self) -> Result<Self::Type, Self::Error> {
        self.connect(self.inner.create()).await
    }

    async fn recycle(
        &self,
        object: &mut Self::Type,
        meta: &slotpool::managed::Meta,
    ) -> slotpool::managed::RecycleResult<Self::Error> {
        self.inner.recycle(&mut object.inner, meta).await
    }

    fn detach(&self, object: &mut Self::Type) {
        self.inner.detach(&mut object.inner);
    }
}

impl<M: deadpool::managed::Manager> deadpool::managed::Manager for Counted<M> {
    type Type = Tracked<M::Type>;
    type Error = M::Error;

    async fn create(&self) -> Result<Self::Type, Self::Error> {
        self.connect(self.inner.create()).await
    }

    async fn recycle(
        &self,
        object: &mut Self::Type,
        metrics: &deadpool::managed::Metrics,
    ) -> deadpool::managed::RecycleResult<Self::Error> {
        self.inner.recycle(&mut object.inner, metrics).await
    }

    fn detach(&self, object: &mut Self::Type) {
        self.inner.detach(&mut object.inner);
    }
}

impl<M: bb8::ManageConnection> bb8::ManageConnection for Counted<M> {
    type Connection = Tracked<M::Connection>;
    type Error = M::Error;

    async fn connect(&self) -> Result<Self::Connection, Self::Error> {
        Counted::connect(self, self.inner.connect()).await
    }

    async fn is_valid(&self, conn: &mut Self::Connection) -> Result<(), Self::Error> {
        self.inner.is_valid(&mut conn.inner).await
    }

    fn has_broken(&self, conn: &mut Self::Connection) -> bool {
        self.inner.has_broken(&mut conn.inner)
    }
}
