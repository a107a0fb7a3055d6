//! Why a `get` returned no object: [`PoolError`], which says which step failed and whether a
//! retry is safe.

use std::fmt;
use std::time::Duration;

use super::manager::HookError;
use crate::error::Reach;
use crate::panic::Panic;

/// The step of a `get` (or of the pool's own work) that ran user code or waited.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Step {
    /// Waiting for an object or for room to create one.
    Wait,
    /// [`Manager::create`](super::Manager::create).
    Create,
    /// The `post_create` hooks.
    PostCreate,
    /// The `pre_recycle` hooks.
    PreRecycle,
    /// [`Manager::recycle`](super::Manager::recycle).
    Recycle,
    /// The `post_recycle` hooks.
    PostRecycle,
    /// [`Manager::detach`](super::Manager::detach), or an object's destructor.
    Detach,
    /// The predicate of [`Pool::retain`](super::Pool::retain).
    Retain,
    /// The [`error_sink`](super::PoolBuilder::error_sink) the pool tells its own failures to.
    ErrorSink,
    /// [`Manager::has_broken`](super::Manager::has_broken), as an object comes back.
    HasBroken,
}

impl Step {
    /// The step's name, as the builder and the docs spell it.
    pub fn name(self) -> &'static str {
        match self {
            Step::Wait => "wait",
            Step::Create => "create",
            Step::PostCreate => "post_create",
            Step::PreRecycle => "pre_recycle",
            Step::Recycle => "recycle",
            Step::PostRecycle => "post_recycle",
            Step::Detach => "detach",
            Step::Retain => "retain",
            Step::ErrorSink => "error_sink",
            Step::HasBroken => "has_broken",
        }
    }
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why [`Pool::add`](super::Pool::add) handed the object back (bb8's `AddError`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum AddError<T> {
    /// The pool is full (every unit of `max_size` in use).
    NoCapacity(T),
    /// The pool is closed.
    Closed(T),
}

impl<T> AddError<T> {
    /// The object handed back.
    pub fn into_inner(self) -> T {
        match self {
            AddError::NoCapacity(object) | AddError::Closed(object) => object,
        }
    }
}

impl<T> fmt::Display for AddError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AddError::NoCapacity(_) => "no room in the pool for the added object",
            AddError::Closed(_) => "the pool is closed",
        })
    }
}

impl<T: fmt::Debug> std::error::Error for AddError<T> {}

/// Why [`Pool::get`](super::Pool::get) (or `try_get`, `get_timeout`) returned no object.
///
/// Getting an object sends nothing to anyone: every variant is [`Reach::NotSent`] and a retry
/// is safe ([`PoolError::reach`]). Whether a retry can succeed is another matter:
/// [`PoolError::is_closed`] says when it cannot.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PoolError<E: std::error::Error + 'static> {
    /// A deadline passed: the pool's `wait_timeout` while waiting, its `create_timeout`
    /// while creating, or the caller's [`get_timeout`](super::Pool::get_timeout) in whichever
    /// step the `get` was (`step`). A recycle that outlives `recycle_timeout` does not fail
    /// the `get`: that object is dropped and the `get` goes on.
    #[error("timed out after {after:?} in step `{step}`")]
    Timeout {
        /// The step that was running when the deadline passed.
        step: Step,
        /// The deadline that passed.
        after: Duration,
    },
    /// [`Manager::create`](super::Manager::create) failed; its room was given back.
    #[error("creating an object failed: {0}")]
    Create(#[source] E),
    /// A `post_create` hook rejected the new object; it was dropped and its room given back.
    #[error("the post_create hook rejected the new object: {0}")]
    PostCreateHook(#[source] HookError<E>),
    /// The pool was closed.
    #[error("pool closed")]
    Closed,
    /// Nothing idle and no room to create ([`Pool::try_get`](super::Pool::try_get) only).
    #[error("no object available without waiting")]
    NoCapacity,
    /// Nothing idle, and creations are paused: the last ones failed (the server is down or
    /// refusing) and the pool's [`CreateBackoff`](super::CreateBackoff) holds new attempts
    /// back for `retry_after` more. A `get` answers this at once when the back-off is set to
    /// fail fast, when it cannot wait (`try_get`), or when the pause outlasts its wait
    /// deadline (the pool's `wait_timeout`, the `wait` of `get_timeouts`, or what is left of
    /// the pool's `connection_timeout`); waiting past `retry_after` could help (an attempt is
    /// due then), waiting less cannot, unless an object comes back meanwhile. A
    /// [`get_timeout`](super::Pool::get_timeout) waits the pause out instead, and its own
    /// deadline ends it as [`PoolError::Timeout`] in step `wait` if it passes first.
    #[error("creating objects is paused after failures; the next attempt in {retry_after:?}")]
    Unavailable {
        /// How long until the next creation may be tried.
        retry_after: Duration,
    },
    /// User code panicked in `step` (caught and logged); the object involved was dropped and
    /// its room given back.
    #[error("user code panicked in step `{step}`: {panic}")]
    Panicked {
        /// Where.
        step: Step,
        /// What it said.
        panic: Panic,
    },
}

impl<E: std::error::Error + 'static> PoolError<E> {
    /// Always [`Reach::NotSent`]: getting an object sends nothing.
    pub fn reach(&self) -> Reach {
        Reach::NotSent
    }

    /// Whether the pool was closed (no retry can succeed).
    pub fn is_closed(&self) -> bool {
        matches!(self, PoolError::Closed)
    }

    /// The step whose deadline passed, for a [`PoolError::Timeout`].
    pub fn timed_out_in(&self) -> Option<Step> {
        match self {
            PoolError::Timeout { step, .. } => Some(*step),
            _ => None,
        }
    }
}

/// Why [`PoolBuilder::build_eager`](super::PoolBuilder::build_eager) returned no pool (bb8's
/// async `build` answers the manager's error; this says which half failed).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError<E: std::error::Error + 'static> {
    /// A setting was refused, as [`PoolBuilder::build`](super::PoolBuilder::build) refuses it.
    #[error(transparent)]
    Config(#[from] crate::ConfigError),
    /// Creating the first objects failed (the first failure; the objects created before it
    /// were dropped with the pool).
    #[error("creating the pool's first objects failed: {0}")]
    Create(#[source] PoolError<E>),
}

impl<E: std::error::Error + 'static> BuildError<E> {
    /// The manager's own error, if a creation failed with one (bb8's `build` answers it).
    pub fn manager_error(&self) -> Option<&E> {
        match self {
            BuildError::Create(PoolError::Create(error)) => Some(error),
            _ => None,
        }
    }
}
