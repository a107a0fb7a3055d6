//! [`SessionPoolBuilder`]: the settings of a [`SessionPool`], checked by
//! [`SessionPoolBuilder::build`].

use std::fmt;
use std::time::Duration;

use quanta::Clock;

use super::{
    Connector, Counters, MemoryStore, SessionPool, SessionStore, Shared, DEFAULT_MAX_IDLE_TIME,
    DEFAULT_POOL_SIZE, MAX_SHARDS,
};
use crate::error::ConfigError;
use crate::flight::{Batch, Registry};
use crate::limit::Limit;
use crate::pool::reap::nanos as duration_ns;
use crate::sync::{Arc, Mutex};

/// Configures a [`SessionPool`]; [`SessionPoolBuilder::build`] checks the values.
pub struct SessionPoolBuilder<C, S = MemoryStore> {
    connector: C,
    store: S,
    pool_size: usize,
    max_idle_time: Duration,
    clock: Option<Clock>,
    prewarm: usize,
    /// `None`: the default (every half `max_idle_time`, within 1 s and 60 s, if built inside a
    /// runtime). `Some(None)`: no background reaper.
    reap_every: Option<Option<Duration>>,
}

impl<C: Connector> SessionPoolBuilder<C, MemoryStore> {
    pub(super) fn new(connector: C) -> Self {
        Self {
            connector,
            store: MemoryStore::new(),
            pool_size: DEFAULT_POOL_SIZE,
            max_idle_time: DEFAULT_MAX_IDLE_TIME,
            clock: None,
            prewarm: 0,
            reap_every: None,
        }
    }
}

impl<C: Connector, S: SessionStore> SessionPoolBuilder<C, S> {
    /// Uses `store` for loop ids instead of a fresh [`MemoryStore`].
    pub fn store<S2: SessionStore>(self, store: S2) -> SessionPoolBuilder<C, S2> {
        SessionPoolBuilder {
            connector: self.connector,
            store,
            pool_size: self.pool_size,
            max_idle_time: self.max_idle_time,
            clock: self.clock,
            prewarm: self.prewarm,
            reap_every: self.reap_every,
        }
    }

    /// Most sessions active (or being established) at once. Default
    /// [`DEFAULT_POOL_SIZE`]; zero is a [`ConfigError`] (R3 read it as "default").
    pub fn pool_size(mut self, pool_size: usize) -> Self {
        self.pool_size = pool_size;
        self
    }

    /// How long a session may sit unused before it is stale (rebuilt on acquire, closed by
    /// the reaper). Default [`DEFAULT_MAX_IDLE_TIME`]; zero is a [`ConfigError`].
    pub fn max_idle_time(mut self, max_idle_time: Duration) -> Self {
        self.max_idle_time = max_idle_time;
        self
    }

    /// The clock for last-use stamps and reaping (tests pass `Clock::mock()`).
    pub fn clock(mut self, clock: Clock) -> Self {
        self.clock = Some(clock);
        self
    }

    /// Keeps up to `count` connected, unassigned connections, filled by
    /// [`SessionPool::prewarm`]. Default 0; above `pool_size` is a [`ConfigError`].
    pub fn prewarm(mut self, count: usize) -> Self {
        self.prewarm = count;
        self
    }

    /// How often the background reaper runs; `None` disables it (call
    /// [`SessionPool::reap`] yourself). Asking for one outside a tokio runtime, or for a zero
    /// interval, is a [`ConfigError`].
    pub fn reap_every(mut self, every: Option<Duration>) -> Self {
        self.reap_every = Some(every);
        self
    }

    /// Checks the settings and builds the pool. Opens no connection.
    ///
    /// # Errors
    /// [`ConfigError::Zero`] for a zero `pool_size`, `max_idle_time` or reap interval;
    /// [`ConfigError::TooLarge`] for a `pool_size` above [`MAX_PERMITS`](crate::limit::MAX_PERMITS);
    /// [`ConfigError::Inverted`] for `prewarm > pool_size`; [`ConfigError::Missing`] for an
    /// explicit reaper without a tokio runtime.
    pub fn build(self) -> Result<SessionPool<C, S>, ConfigError> {
        if self.max_idle_time.is_zero() {
            return Err(ConfigError::Zero("max_idle_time"));
        }
        let limit = Arc::new(Limit::new(self.pool_size).map_err(|error| match error {
            ConfigError::Zero(_) => ConfigError::Zero("pool_size"),
            ConfigError::TooLarge { value, max, .. } => ConfigError::TooLarge {
                name: "pool_size",
                value,
                max,
            },
            other => other,
        })?);
        if self.prewarm > self.pool_size {
            return Err(ConfigError::Inverted {
                low: "prewarm",
                low_value: self.prewarm as u64,
                high: "pool_size",
                high_value: self.pool_size as u64,
            });
        }
        let runtime = tokio::runtime::Handle::try_current().ok();
        let reap_every = match self.reap_every {
            Some(Some(every)) if every.is_zero() => return Err(ConfigError::Zero("reap_every")),
            Some(Some(every)) => {
                if runtime.is_none() {
                    return Err(ConfigError::Missing("tokio runtime (for the reaper)"));
                }
                Some(every)
            }
            Some(None) => None,
            None => Some(
                (self.max_idle_time / 2).clamp(Duration::from_secs(1), Duration::from_secs(60)),
            ),
        };
        let clock = self.clock.unwrap_or_default();
        let base = clock.now();
        let shards = (self.pool_size / 8).clamp(1, MAX_SHARDS);
        let shared = Arc::new(Shared {
            registry: Registry::new(shards),
            limit,
            connector: Arc::new(self.connector),
            store: self.store,
            max_idle_ns: duration_ns(self.max_idle_time),
            clock,
            base,
            prewarm: self.prewarm,
            idle: Mutex::new(Vec::new()),
            unstarted: Batch::new(),
            counters: Arc::new(Counters::new()),
        });
        let reaper = match (reap_every, runtime) {
            (Some(every), Some(runtime)) => Some(crate::pool::reap::spawn_reaper(
                &runtime,
                Arc::downgrade(&shared),
                every,
                |shared| {
                    shared.reap(shared.clock.now());
                },
            )),
            _ => None,
        };
        Ok(SessionPool { shared, reaper })
    }
}

impl<C, S> fmt::Debug for SessionPoolBuilder<C, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SessionPoolBuilder")
            .field("pool_size", &self.pool_size)
            .field("max_idle_time", &self.max_idle_time)
            .field("prewarm", &self.prewarm)
            .field("reap_every", &self.reap_every)
            .finish_non_exhaustive()
    }
}
