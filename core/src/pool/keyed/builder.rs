//! [`KeyedBuilder`]: the families, shares and aliases of a [`Keyed`] registry, checked against
//! the blocking pool's size by [`KeyedBuilder::build`].

use std::borrow::Cow;

use super::{
    check_fit, BuildError, Key, KeyState, KeyTable, Keyed, DEFAULT_SHARE,
    TOKIO_DEFAULT_MAX_BLOCKING_THREADS,
};
use crate::error::ConfigError;
use crate::pool::wait::DEFAULT_NAME;
use crate::protocol::routes::Routes;

/// Builder of a [`Keyed`] registry; see [`Keyed::builder`].
#[derive(Debug, Clone)]
pub struct KeyedBuilder<K> {
    default_share: usize,
    max_blocking_threads: usize,
    reserved_threads: usize,
    /// Share keys with an explicit size, or `None` for the default share.
    shares: Vec<(K, Option<usize>)>,
    /// (caller key, share key).
    aliases: Vec<(K, K)>,
    /// The clock waits are timed on; `None`: `Clock::new()` at build.
    clock: Option<quanta::Clock>,
    /// The `pool` label of the keys' wait histograms.
    name: Cow<'static, str>,
}

impl<K: Key> KeyedBuilder<K> {
    /// The defaults; see [`Keyed::builder`].
    pub(super) fn new() -> Self {
        KeyedBuilder {
            default_share: DEFAULT_SHARE,
            max_blocking_threads: TOKIO_DEFAULT_MAX_BLOCKING_THREADS,
            reserved_threads: 0,
            shares: Vec::new(),
            aliases: Vec::new(),
            clock: None,
            name: Cow::Borrowed(DEFAULT_NAME),
        }
    }

    /// The share of keys registered without a size (default [`DEFAULT_SHARE`]).
    pub fn default_share(mut self, slots: usize) -> Self {
        self.default_share = slots;
        self
    }

    /// Registers `key` as a share with the default size.
    pub fn family(mut self, key: K) -> Self {
        self.shares.push((key, None));
        self
    }

    /// Registers `key` as a share with `slots` slots (a per-key override).
    pub fn share(mut self, key: K, slots: usize) -> Self {
        self.shares.push((key, Some(slots)));
        self
    }

    /// Makes `alias` draw from the share registered as `share`. Refusals, logs, statistics and
    /// metrics of calls made with `alias` still name `alias`.
    pub fn alias(mut self, alias: K, share: K) -> Self {
        self.aliases.push((alias, share));
        self
    }

    /// The blocking pool's thread limit the shares must fit (default
    /// [`TOKIO_DEFAULT_MAX_BLOCKING_THREADS`]); pass what the runtime was built with.
    pub fn max_blocking_threads(mut self, threads: usize) -> Self {
        self.max_blocking_threads = threads;
        self
    }

    /// Threads kept free for other blocking work (`tokio::fs`, DNS, ...); default 0.
    pub fn reserved_threads(mut self, threads: usize) -> Self {
        self.reserved_threads = threads;
        self
    }

    /// The clock a call's wait for a slot is timed on ([`KeyStats::wait_time`]); only a call
    /// that finds its share full reads it (the wait bound itself, `max_wait`, runs on tokio's
    /// timer). Tests pass a [`Clock::mock`](crate::Clock::mock). Default: the machine's
    /// clock.
    ///
    /// [`KeyStats::wait_time`]: super::KeyStats::wait_time
    pub fn clock(mut self, clock: crate::Clock) -> Self {
        self.clock = Some(clock.quanta().clone());
        self
    }

    /// The registry's name: with the `metrics` feature, each wait for a slot (admitted,
    /// refused or given up) is recorded in seconds in the histogram
    /// `slotpool_keyed_wait_seconds`, labelled `pool = name` beside the caller's `key` and its
    /// `share`. Default: `"default"`. A call admitted at once records nothing.
    ///
    /// ```
    /// use slotpool::keyed::Keyed;
    ///
    /// let keyed = Keyed::builder().name("storage").family("journal").build()?;
    /// # let _ = keyed;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn name(mut self, name: impl Into<Cow<'static, str>>) -> Self {
        self.name = name.into();
        self
    }

    /// Validates the configuration and builds the registry.
    ///
    /// # Errors
    /// [`BuildError::Config`] for a zero default share or thread limit;
    /// [`BuildError::InvalidShare`], [`BuildError::Duplicate`],
    /// [`BuildError::UnknownShare`] for a bad key; [`BuildError::DoesNotFit`] when
    /// the shares plus the reserved threads exceed the thread limit.
    pub fn build(self) -> Result<Keyed<K>, BuildError<K>> {
        if self.default_share == 0 {
            return Err(ConfigError::Zero("default_share").into());
        }
        if self.max_blocking_threads == 0 {
            return Err(ConfigError::Zero("max_blocking_threads").into());
        }
        let name = self.name;
        let state = |key: &K, share: &K| KeyState::new(key, share, name.clone());
        let mut table = KeyTable::new();
        for (key, slots) in self.shares {
            let slots = slots.unwrap_or(self.default_share);
            table.add_share(None, key, slots, state)?;
        }
        for (alias, share) in self.aliases {
            table.add_alias(None, alias, share, state)?;
        }
        check_fit(
            table.total(),
            self.reserved_threads,
            self.max_blocking_threads,
        )?;
        Ok(Keyed {
            routes: Routes::new(table),
            default_share: self.default_share,
            max_blocking_threads: self.max_blocking_threads,
            reserved_threads: self.reserved_threads,
            clock: self.clock.unwrap_or_default(),
            name,
        })
    }
}
