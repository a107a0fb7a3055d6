//! [`SessionError`]: why an acquire returned no session, with the operation that failed and
//! whether a retry is safe.

use std::fmt;

use super::{LoopId, Stage};
use crate::error::Reach;
use crate::panic::Panic;
use crate::sync::Arc;

/// A connector's or store's error, shared by every caller of one flight.
pub type SourceError = Arc<dyn std::error::Error + Send + Sync + 'static>;

/// Which store operation failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreOp {
    /// Looking up the session's loop id (before anything was sent to the daemon).
    Lookup,
    /// Saving a freshly bootstrapped loop id.
    Save,
}

impl fmt::Display for StoreOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            StoreOp::Lookup => "lookup",
            StoreOp::Save => "save",
        })
    }
}

/// Why [`SessionPool::acquire`](super::SessionPool::acquire) returned no session. Every caller of one flight receives the
/// same error. [`SessionError::reach`] says whether a retry is safe.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum SessionError {
    /// The pool was stopped (or dropped). Nothing was sent.
    #[error("session pool stopped")]
    Closed,
    /// Every one of the pool's `capacity` sessions is in use; no waiting is done. Nothing was
    /// sent.
    #[error("all {capacity} session slots are in use")]
    Exhausted {
        /// The pool's `pool_size`.
        capacity: usize,
    },
    /// Opening a connection failed.
    #[error("connect failed ({reach})")]
    Connect {
        /// The connector's error.
        source: SourceError,
        /// [`Reach::NotSent`]: no loop was touched.
        reach: Reach,
    },
    /// Bootstrapping a new loop failed.
    #[error("bootstrap of a new loop failed ({reach})")]
    Bootstrap {
        /// The connector's error.
        source: SourceError,
        /// [`Reach::MaybeApplied`]: the daemon may have created the loop.
        reach: Reach,
    },
    /// Reattaching to the stored loop failed, and so did the fallback bootstrap.
    #[error("reattach to loop `{loop_id}` failed ({reattach}), then bootstrap failed ({reach})")]
    Reattach {
        /// The stored loop that could not be reattached.
        loop_id: LoopId,
        /// Why the reattach failed.
        reattach: SourceError,
        /// Why the fallback bootstrap failed.
        #[source]
        bootstrap: SourceError,
        /// [`Reach::MaybeApplied`]: the bootstrap may have created a loop.
        reach: Reach,
    },
    /// The session store failed.
    #[error("session store {op} failed ({reach})")]
    Store {
        /// Which operation.
        op: StoreOp,
        /// The store's error.
        source: SourceError,
        /// `NotSent` for a lookup; `MaybeApplied` for a save (the loop exists, unrecorded).
        reach: Reach,
    },
    /// The session was released (or reset) while it was being established; the new
    /// connection was closed.
    #[error("session released while being established ({reach})")]
    Released {
        /// [`Reach::MaybeApplied`]: the loop may have been created and recorded.
        reach: Reach,
    },
    /// The connector or the store panicked during the establishment. The panic was caught
    /// (and logged); the connection opened so far was closed and the capacity returned.
    #[error("session {stage} panicked ({reach}): {}", panic.message())]
    Panicked {
        /// Which stage's user code panicked.
        stage: Stage,
        /// What it said.
        panic: Panic,
        /// [`Stage::reach`]: `NotSent` for a connect or a store lookup, `MaybeApplied` from the
        /// reattach or bootstrap on.
        reach: Reach,
    },
    /// The establishment ended without a result: it was dropped (runtime shutdown) before it
    /// finished.
    #[error("session establishment aborted ({reach})")]
    Aborted {
        /// `NotSent` if it ended before bootstrap or reattach began.
        reach: Reach,
    },
    /// `acquire` was polled outside a tokio runtime, so nothing could be spawned. Nothing was
    /// sent.
    #[error("no tokio runtime to run the session's establishment on")]
    NoRuntime,
}

impl SessionError {
    /// How far the request got; [`Reach::retry_is_safe`] tells whether to retry blindly.
    pub fn reach(&self) -> Reach {
        match self {
            SessionError::Closed | SessionError::Exhausted { .. } | SessionError::NoRuntime => {
                Reach::NotSent
            }
            SessionError::Connect { reach, .. }
            | SessionError::Bootstrap { reach, .. }
            | SessionError::Reattach { reach, .. }
            | SessionError::Store { reach, .. }
            | SessionError::Released { reach }
            | SessionError::Panicked { reach, .. }
            | SessionError::Aborted { reach } => *reach,
        }
    }
}

pub(super) fn source<E: std::error::Error + Send + Sync + 'static>(error: E) -> SourceError {
    Arc::new(error)
}
