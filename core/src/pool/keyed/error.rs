//! [`KeyedError`] (why a call did not return its closure's value, and whether it may have run)
//! and [`BuildError`] (a configuration that cannot work).

use std::fmt;
use std::time::Duration;

use crate::error::{ConfigError, Reach};
use crate::panic::Panic;
use crate::protocol::routes::TableError;

/// Why a keyed call did not return the closure's value. Every variant names the **caller's**
/// key (not the share it is aliased to) and says, through [`Reach`], whether a retry is safe.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyedError<K: fmt::Debug> {
    /// No slot of the key's share freed within the wait bound. The closure never ran.
    #[error("{key:?}: refused, no blocking slot freed within {waited:?} (not run; {reach})")]
    Refused {
        /// The caller's key.
        key: K,
        /// The wait bound the call was given.
        waited: Duration,
        /// Always [`Reach::NotSent`].
        reach: Reach,
    },
    /// The registry was closed ([`Keyed::close`](super::Keyed::close)) before a slot was found. The closure never
    /// ran.
    #[error("{key:?}: keyed admission closed (not run; {reach})")]
    Closed {
        /// The caller's key.
        key: K,
        /// Always [`Reach::NotSent`].
        reach: Reach,
    },
    /// The key is neither a share nor an alias. The closure never ran.
    #[error("{key:?}: key not registered (not run; {reach})")]
    Unregistered {
        /// The caller's key.
        key: K,
        /// Always [`Reach::NotSent`].
        reach: Reach,
    },
    /// The closure panicked. The panic was caught on the blocking thread (and logged); its
    /// slot was released right after.
    #[error("{key:?}: blocking work panicked ({reach}): {}", panic.message())]
    Panicked {
        /// The caller's key.
        key: K,
        /// [`Reach::MaybeApplied`] for a mutation (it may have committed before it panicked),
        /// [`Reach::NotSent`] for a read (it has no durable effect: a retry is safe).
        reach: Reach,
        /// What the closure's panic said.
        panic: Panic,
    },
    /// The blocking task's outcome was lost (the runtime cancelled it, e.g. while shutting
    /// down). Whether it ran is unknown, so a mutation is treated as possibly applied.
    #[error("{key:?}: outcome of blocking work lost ({reach})")]
    Lost {
        /// The caller's key.
        key: K,
        /// [`Reach::MaybeApplied`] for a mutation, [`Reach::NotSent`] for a read.
        reach: Reach,
    },
}

impl<K: fmt::Debug> KeyedError<K> {
    /// Whether the work can have had an effect, which decides whether a retry is safe.
    pub fn reach(&self) -> Reach {
        match self {
            KeyedError::Refused { reach, .. }
            | KeyedError::Closed { reach, .. }
            | KeyedError::Unregistered { reach, .. }
            | KeyedError::Panicked { reach, .. }
            | KeyedError::Lost { reach, .. } => *reach,
        }
    }

    /// The caller's key (never the share key it is aliased to).
    pub fn key(&self) -> &K {
        match self {
            KeyedError::Refused { key, .. }
            | KeyedError::Closed { key, .. }
            | KeyedError::Unregistered { key, .. }
            | KeyedError::Panicked { key, .. }
            | KeyedError::Lost { key, .. } => key,
        }
    }
}

/// A keyed configuration that cannot work. Returned by [`KeyedBuilder::build`],
/// [`Keyed::register`] and [`Keyed::register_alias`], never a panic.
///
/// [`KeyedBuilder::build`]: super::KeyedBuilder::build
/// [`Keyed::register`]: super::Keyed::register
/// [`Keyed::register_alias`]: super::Keyed::register_alias
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError<K: fmt::Debug> {
    /// A global setting is invalid (zero default share, zero thread limit).
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// One key's share is invalid (zero, or above [`MAX_SHARE`](super::MAX_SHARE)).
    #[error("share of {key:?}: {error}")]
    InvalidShare {
        /// The share key.
        key: K,
        /// What is wrong with its size.
        error: ConfigError,
    },
    /// The shares together with the reserved threads exceed the blocking pool.
    #[error(
        "shares total {shares} plus {reserved} reserved threads exceed the blocking pool's \
         {max_blocking_threads} threads"
    )]
    DoesNotFit {
        /// Sum of all distinct shares, saturating.
        shares: usize,
        /// Threads reserved for other blocking work.
        reserved: usize,
        /// The blocking pool's thread limit.
        max_blocking_threads: usize,
    },
    /// An alias names a share key that is not registered as a share.
    #[error("alias {alias:?} names {share:?}, which is not a registered share")]
    UnknownShare {
        /// The aliased caller key.
        alias: K,
        /// The share key it names.
        share: K,
    },
    /// The key is registered already (as a share or an alias).
    #[error("{key:?} is registered already")]
    Duplicate {
        /// The key given twice.
        key: K,
    },
}

impl<K: fmt::Debug> From<TableError<K>> for BuildError<K> {
    fn from(error: TableError<K>) -> Self {
        match error {
            TableError::Duplicate { key } => BuildError::Duplicate { key },
            TableError::UnknownShare { alias, share } => BuildError::UnknownShare { alias, share },
            TableError::InvalidShare { key, error } => BuildError::InvalidShare { key, error },
        }
    }
}
