//! The session store: where loop ids persist between connections ([`SessionStore`]), the
//! records it keeps, and [`MemoryStore`], the in-memory store the pool uses by default.

use std::collections::HashMap;
use std::convert::Infallible;
use std::fmt;
use std::future::Future;

use crate::sync::{Arc, AtomicU64, Mutex, Ordering};

/// Where sessions' loop ids persist between connections (R3's session store).
pub trait SessionStore: Send + Sync + 'static {
    /// Why an operation failed.
    type Error: std::error::Error + Send + Sync + 'static;

    /// The loop id recorded for `session`, if any.
    fn loop_id(
        &self,
        session: &str,
    ) -> impl Future<Output = Result<Option<LoopId>, Self::Error>> + Send;

    /// Creates or updates the session's record (called after a bootstrap).
    fn save(&self, record: SessionRecord) -> impl Future<Output = Result<(), Self::Error>> + Send;

    /// Marks the session used now (called after a reattach; advisory, a failure is logged).
    fn touch(&self, session: &str) -> impl Future<Output = Result<(), Self::Error>> + Send;
}

/// A shared store: the pool holds one handle, the application others (to read records, seed
/// them, or remove one to force a fresh bootstrap). [`SessionPool::store`](super::SessionPool::store)
/// reaches the pool's own handle too.
impl<S: SessionStore> SessionStore for Arc<S> {
    type Error = S::Error;

    fn loop_id(
        &self,
        session: &str,
    ) -> impl Future<Output = Result<Option<LoopId>, Self::Error>> + Send {
        (**self).loop_id(session)
    }

    fn save(&self, record: SessionRecord) -> impl Future<Output = Result<(), Self::Error>> + Send {
        (**self).save(record)
    }

    fn touch(&self, session: &str) -> impl Future<Output = Result<(), Self::Error>> + Send {
        (**self).touch(session)
    }
}

/// Who the session is for: passed to [`Connector::bootstrap`](super::Connector::bootstrap) and saved in the record.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SessionContext {
    /// The workspace the session belongs to.
    pub workspace: String,
    /// The user the session acts for.
    pub user: String,
}

impl SessionContext {
    /// A context for `user` in `workspace`.
    pub fn new(workspace: impl Into<String>, user: impl Into<String>) -> Self {
        Self {
            workspace: workspace.into(),
            user: user.into(),
        }
    }
}

/// A daemon loop's id.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct LoopId(Arc<str>);

impl LoopId {
    /// Wraps an id.
    pub fn new(id: impl Into<Arc<str>>) -> Self {
        Self(id.into())
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether the id names a loop one can reattach to. Empty ids and R3's `pending-…`
    /// placeholders do not: a session recorded with one is bootstrapped afresh.
    pub fn is_attachable(&self) -> bool {
        !self.0.is_empty() && !self.0.starts_with("pending-")
    }
}

impl fmt::Debug for LoopId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("LoopId").field(&&*self.0).finish()
    }
}

impl fmt::Display for LoopId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What a [`SessionStore`] keeps per session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionRecord {
    /// The session id.
    pub session: String,
    /// Its daemon loop.
    pub loop_id: LoopId,
    /// The workspace from the acquire that created the loop.
    pub workspace: String,
    /// The user from the acquire that created the loop.
    pub user: String,
}

/// An in-memory [`SessionStore`] (a mutex-guarded map; touched only on establishment).
#[derive(Default)]
pub struct MemoryStore {
    records: Mutex<HashMap<String, SessionRecord>>,
    touches: AtomicU64,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// The record for `session`, if any.
    pub fn record(&self, session: &str) -> Option<SessionRecord> {
        self.records.lock().get(session).cloned()
    }

    /// Creates or replaces a record (to seed the store).
    pub fn insert(&self, record: SessionRecord) {
        self.records.lock().insert(record.session.clone(), record);
    }

    /// Removes `session`'s record, so its next establishment bootstraps afresh.
    pub fn remove(&self, session: &str) -> Option<SessionRecord> {
        self.records.lock().remove(session)
    }

    /// Number of records.
    pub fn len(&self) -> usize {
        self.records.lock().len()
    }

    /// Whether the store holds no record.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many times [`SessionStore::touch`] was called.
    pub fn touches(&self) -> u64 {
        self.touches.load(Ordering::Relaxed)
    }
}

impl fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryStore")
            .field("records", &self.len())
            .finish()
    }
}

impl SessionStore for MemoryStore {
    type Error = Infallible;

    fn loop_id(
        &self,
        session: &str,
    ) -> impl Future<Output = Result<Option<LoopId>, Infallible>> + Send {
        let found = self.records.lock().get(session).map(|r| r.loop_id.clone());
        std::future::ready(Ok(found))
    }

    fn save(&self, record: SessionRecord) -> impl Future<Output = Result<(), Infallible>> + Send {
        self.insert(record);
        std::future::ready(Ok(()))
    }

    fn touch(&self, _session: &str) -> impl Future<Output = Result<(), Infallible>> + Send {
        self.touches.fetch_add(1, Ordering::Relaxed);
        std::future::ready(Ok(()))
    }
}
