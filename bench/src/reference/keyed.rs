//! R2, the keyed admission of a blocking pool (SEEDS.md), rebuilt faithfully so that
//! slotpool's `Keyed` is measured against the design it replaces, with R2's census: 19 caller
//! families aliased onto 9 shares ([`FAMILIES`], [`SHARES`], [`alias`]).
//!
//! Every call locks one global `std::sync::Mutex<BTreeMap<Key, Arc<tokio::sync::Semaphore>>>`
//! to find (or lazily create) its share's semaphore after resolving its family through the
//! [`alias`] function, then waits in `tokio::time::timeout(wait, sem.clone().acquire_owned())`.
//! A refusal is `Unavailable { family, reach: NoDurableEffect }`, counted per family; the permit
//! moves into the `spawn_blocking` closure, which enters the span inside; a lost join is
//! `PossiblyApplied` for a mutation and `NoDurableEffect` for a read. Every permit drop locks
//! the semaphore's waiter mutex (tokio's `Semaphore` release). R2's "global" registry is held
//! here by one [`RefKeyed`] value that every task shares: the same one lock for all callers,
//! but a fresh one per case.
//!
//! The cases that run it beside slotpool are in `crate::cases::keyed`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// R2's share per family (`MAX_FAMILY_BLOCKING_SLOTS`).
pub const FAMILY_SLOTS: usize = 8;
/// R2's share for the replay family.
pub const REPLAY_SLOTS: usize = 4;
/// R2's blocking-thread bound: the sum of the shares (`8 × 8 + 4 = 68`) stays below it.
pub const BLOCKING_THREADS: usize = 128;

/// An operation family (R2's key type).
pub type Family = &'static str;

/// The nine share keys, each the family that owns the lock the others serialize on.
pub const SHARES: [Family; 9] = [
    "journal",
    "snapshot",
    "replay",
    "index",
    "lease",
    "membership",
    "blob",
    "config",
    "audit",
];

/// R2's 19 caller families: the nine share keys and ten more aliased onto them.
pub const FAMILIES: [Family; 19] = [
    "journal",
    "ledger",
    "append",
    "truncate",
    "snapshot",
    "restore",
    "replay",
    "catch-up",
    "index",
    "reindex",
    "lease",
    "renew",
    "revoke",
    "membership",
    "blob",
    "gc",
    "config",
    "audit",
    "audit-query",
];

/// R2's alias function: the share key a family draws from.
pub fn alias(family: Family) -> Family {
    match family {
        "ledger" | "append" | "truncate" => "journal",
        "restore" => "snapshot",
        "catch-up" => "replay",
        "reindex" => "index",
        "renew" | "revoke" => "lease",
        "gc" => "blob",
        "audit-query" => "audit",
        other => other,
    }
}

/// R2's share size of a share key.
pub fn slots_for(key: Family) -> usize {
    if key == "replay" {
        REPLAY_SLOTS
    } else {
        FAMILY_SLOTS
    }
}

/// How far a failed reference call got (R2's names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefReach {
    /// Nothing ran: a retry is safe.
    NoDurableEffect,
    /// The work may have committed.
    PossiblyApplied,
}

/// A failed reference call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RefError {
    /// No permit within the wait, or the semaphore closed.
    Unavailable {
        /// The caller's family.
        family: Family,
        /// Always `NoDurableEffect`.
        reach: RefReach,
    },
    /// The blocking task panicked or its join was lost.
    Lost {
        /// The caller's family.
        family: Family,
        /// `PossiblyApplied` for a mutation, `NoDurableEffect` for a read.
        reach: RefReach,
    },
}

/// R2's admission: one global mutex around the family → semaphore map, taken on every call.
#[derive(Debug, Default)]
pub struct RefKeyed {
    /// Share key → semaphore, created on first use.
    semaphores: Mutex<BTreeMap<Family, Arc<Semaphore>>>,
    /// Refusals per caller family (written on the refusal path only).
    refusals: Mutex<BTreeMap<Family, u64>>,
}

impl RefKeyed {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Locks the map, resolves the alias, returns (creating if needed) the share's semaphore.
    fn semaphore(&self, family: Family) -> Arc<Semaphore> {
        let key = alias(family);
        let mut map = self
            .semaphores
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        Arc::clone(
            map.entry(key)
                .or_insert_with(|| Arc::new(Semaphore::new(slots_for(key)))),
        )
    }

    /// Waits at most `wait` for a permit of `family`'s share.
    ///
    /// # Errors
    /// `Unavailable` when no permit freed in time (counted) or the semaphore closed.
    pub async fn admit(
        &self,
        family: Family,
        wait: Duration,
    ) -> Result<OwnedSemaphorePermit, RefError> {
        let sem = self.semaphore(family);
        match tokio::time::timeout(wait, sem.clone().acquire_owned()).await {
            Ok(Ok(permit)) => Ok(permit),
            Ok(Err(_closed)) => Err(RefError::Unavailable {
                family,
                reach: RefReach::NoDurableEffect,
            }),
            Err(_elapsed) => {
                *self
                    .refusals
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .entry(family)
                    .or_default() += 1;
                Err(RefError::Unavailable {
                    family,
                    reach: RefReach::NoDurableEffect,
                })
            }
        }
    }

    /// Admits, then runs `work` on the blocking pool with the permit moved in and the span
    /// entered inside.
    ///
    /// # Errors
    /// As [`RefKeyed::admit`]; `Lost` when the join fails.
    pub async fn run<F, T>(
        &self,
        family: Family,
        wait: Duration,
        span: tracing::Span,
        mutation: bool,
        work: F,
    ) -> Result<T, RefError>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        let permit = self.admit(family, wait).await?;
        let handle = tokio::task::spawn_blocking(move || {
            let _permit = permit;
            let _entered = span.enter();
            work()
        });
        handle.await.map_err(|_| RefError::Lost {
            family,
            reach: if mutation {
                RefReach::PossiblyApplied
            } else {
                RefReach::NoDurableEffect
            },
        })
    }

    /// Refusals counted for `family`.
    pub fn refusals(&self, family: Family) -> u64 {
        self.refusals
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(family)
            .copied()
            .unwrap_or(0)
    }
}
