//! Typed errors shared by every pool.
//!
//! Every error that concerns a request says whether that request can have had an effect
//! ([`Reach`]): a caller may retry a [`Reach::NotSent`] failure without risking a duplicate,
//! and must treat [`Reach::MaybeApplied`] as "it may have happened".

use std::time::Duration;

/// The pool (or gate, or limiter) was closed; nothing more will be handed out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("closed")]
pub struct Closed;

/// How far a failed request got, which decides whether a retry is safe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reach {
    /// The request never left the caller's side: no effect is possible, a retry is safe.
    NotSent,
    /// The request was handed to the peer (or to work that may have run): it may have been
    /// applied, and a retry may duplicate its effect.
    MaybeApplied,
}

impl Reach {
    /// Whether a retry is safe (nothing can have been applied).
    pub fn retry_is_safe(self) -> bool {
        matches!(self, Reach::NotSent)
    }
}

impl std::fmt::Display for Reach {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Reach::NotSent => "not sent, safe to retry",
            Reach::MaybeApplied => "may have been applied",
        })
    }
}

/// Why an acquire did not return capacity. No request was sent in any of these cases.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AcquireError {
    /// The pool was closed (or dropped) before capacity was found.
    #[error("pool closed")]
    Closed,
    /// No capacity freed up within the caller's deadline.
    #[error("no capacity within {waited:?}")]
    Timeout {
        /// How long the caller waited.
        waited: Duration,
    },
    /// The circuit breaker is open after repeated connect failures: the pool fails fast
    /// instead of opening another connection that would likely fail too.
    #[error("unavailable (circuit breaker open, retry after {retry_after:?})")]
    Unavailable {
        /// How long until the breaker lets a probe through.
        retry_after: Duration,
    },
}

impl AcquireError {
    /// Always [`Reach::NotSent`]: an acquire never sends anything.
    pub fn reach(&self) -> Reach {
        Reach::NotSent
    }
}

impl From<Closed> for AcquireError {
    fn from(_: Closed) -> Self {
        AcquireError::Closed
    }
}

/// Why a non-waiting acquire returned nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TryAcquireError {
    /// Every unit of capacity is in use right now.
    #[error("no capacity available")]
    NoCapacity,
    /// The pool was closed.
    #[error("pool closed")]
    Closed,
    /// The circuit breaker is open (see [`AcquireError::Unavailable`]).
    #[error("unavailable (circuit breaker open, retry after {retry_after:?})")]
    Unavailable {
        /// How long until the breaker lets a probe through.
        retry_after: Duration,
    },
}

impl From<Closed> for TryAcquireError {
    fn from(_: Closed) -> Self {
        TryAcquireError::Closed
    }
}

/// A builder was given values that cannot work. Returned by `build()`, never a panic.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A setting that must be at least one was zero.
    #[error("`{0}` must be at least 1")]
    Zero(&'static str),
    /// A setting exceeded what the pool can represent.
    #[error("`{name}` is {value}, above the maximum {max}")]
    TooLarge {
        /// The setting's name.
        name: &'static str,
        /// The value given.
        value: u64,
        /// The largest supported value.
        max: u64,
    },
    /// A lower bound was above its upper bound.
    #[error("`{low}` ({low_value}) is above `{high}` ({high_value})")]
    Inverted {
        /// The lower bound's name.
        low: &'static str,
        /// Its value.
        low_value: u64,
        /// The upper bound's name.
        high: &'static str,
        /// Its value.
        high_value: u64,
    },
    /// A required part (connector, factory) was not supplied.
    #[error("missing `{0}`")]
    Missing(&'static str),
}

#[cfg(all(test, not(slotpool_loom)))]
mod tests {
    use std::time::Duration;

    use super::{AcquireError, Closed, ConfigError, Reach, TryAcquireError};

    #[test]
    fn only_a_request_that_was_not_sent_is_safe_to_retry() {
        assert!(Reach::NotSent.retry_is_safe());
        assert!(!Reach::MaybeApplied.retry_is_safe());
    }

    #[test]
    fn reach_says_what_it_means_for_a_retry() {
        assert_eq!(Reach::NotSent.to_string(), "not sent, safe to retry");
        assert_eq!(Reach::MaybeApplied.to_string(), "may have been applied");
    }

    #[test]
    fn an_acquire_never_sends_anything() {
        let waited = Duration::from_millis(5);
        for error in [
            AcquireError::Closed,
            AcquireError::Timeout { waited },
            AcquireError::Unavailable {
                retry_after: waited,
            },
        ] {
            assert_eq!(error.reach(), Reach::NotSent, "{error}");
        }
    }

    #[test]
    fn closed_converts_to_the_closed_variants() {
        assert_eq!(AcquireError::from(Closed), AcquireError::Closed);
        assert_eq!(TryAcquireError::from(Closed), TryAcquireError::Closed);
    }

    #[test]
    fn config_errors_name_the_setting() {
        assert_eq!(
            ConfigError::Zero("max_size").to_string(),
            "`max_size` must be at least 1"
        );
        assert_eq!(
            ConfigError::TooLarge {
                name: "resize",
                value: 9,
                max: 8
            }
            .to_string(),
            "`resize` is 9, above the maximum 8"
        );
    }
}
