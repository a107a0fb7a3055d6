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
use crate::pool::reap::{nanos as duration_ns, ticks_within};
use crate::pool::settings::{self, Names, Reap, Settings};
use crate::protocol::flight::{Batch, Directory, KeyHashing};
use crate::protocol::limit::Limit;
use crate::sync::{Arc, Mutex};

/// Configures a [`SessionPool`]; [`SessionPoolBuilder::build`] checks the values.
pub struct SessionPoolBuilder<C, S = MemoryStore> {
    connector: C,
    store: S,
    pool_size: usize,
    prewarm: usize,
    key_hashing: KeyHashing,
    /// The shared settings. The default reap interval is half the idle time, within 1 s and
    /// 60 s (worked out at build, after `max_idle_time` is known).
    settings: Settings,
}

impl<C: Connector> SessionPoolBuilder<C, MemoryStore> {
    pub(super) fn new(connector: C) -> Self {
        Self {
            connector,
            store: MemoryStore::new(),
            pool_size: DEFAULT_POOL_SIZE,
            prewarm: 0,
            key_hashing: KeyHashing::Fast,
            settings: Settings::new(DEFAULT_MAX_IDLE_TIME, default_reap(DEFAULT_MAX_IDLE_TIME)),
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
            prewarm: self.prewarm,
            key_hashing: self.key_hashing,
            settings: self.settings,
        }
    }

    /// Most sessions active (or being established) at once. Default
    /// [`DEFAULT_POOL_SIZE`]; zero is a [`ConfigError`] (R3 read it as "default").
    pub fn pool_size(mut self, pool_size: usize) -> Self {
        self.pool_size = pool_size;
        self
    }

    settings::setters! {
        max_idle_time: "How long a session may sit unused before it is stale (rebuilt on \
                        acquire, closed by the reaper); R3's name for the idle timeout. \
                        Default [`DEFAULT_MAX_IDLE_TIME`].";
        clock: "The clock for last-use stamps, reaping and followers' waits \
                ([`SessionStats::wait_time`](super::SessionStats::wait_time)). Default: \
                `Clock::new()`.";
        name: "The pool's name: the `pool` label of its wait histogram, \
               `slotpool_session_wait_seconds` (one sample per acquire that waited for another \
               caller's establishment of its session, the waits \
               [`SessionStats::wait_time`](super::SessionStats::wait_time) adds up).";
    }

    /// Keeps up to `count` connected, unassigned connections, filled by
    /// [`SessionPool::prewarm`]. Default 0; above `pool_size` is a [`ConfigError`].
    pub fn prewarm(mut self, count: usize) -> Self {
        self.prewarm = count;
        self
    }

    /// How session ids are hashed into the pool's map. Default [`KeyHashing::Fast`]
    /// (foldhash, seeded randomly per pool: a few instructions per acquire).
    ///
    /// Choose [`KeyHashing::SipHash`] (std's `RandomState`, about 150 instructions more per
    /// acquire) when untrusted clients choose the session ids and can send many of them:
    /// foldhash's per-pool seed spreads ids that were not aimed at it, but it is not a
    /// cryptographic pseudo-random function, so a client that can craft ids and time the
    /// pool's answers may find many that share one bucket (hash flooding), slowing every
    /// acquire of that shard. Ids the service mints itself cannot be aimed. See
    /// [`KeyHashing`] and the [module documentation](super#the-map-sharded-read-locked-hashed-once).
    pub fn key_hashing(mut self, hashing: KeyHashing) -> Self {
        self.key_hashing = hashing;
        self
    }

    settings::setters! {
        reap_every: "How often the background reaper runs [`SessionPool::reap`]; R3's name for \
                     the reap interval. Default: half of `max_idle_time`, within 1 s and 60 s.";
    }

    /// Checks the settings and builds the pool. Opens no connection.
    ///
    /// # Errors
    /// [`ConfigError::Zero`] for a zero `pool_size`, `max_idle_time` or reap interval;
    /// [`ConfigError::TooLarge`] for a `pool_size` above `usize::MAX >> 4`;
    /// [`ConfigError::Inverted`] for `prewarm > pool_size`; [`ConfigError::Missing`] for an
    /// explicit reaper without a tokio runtime.
    pub fn build(mut self) -> Result<SessionPool<C, S>, ConfigError> {
        if let Reap::Default(_) = self.settings.reap {
            self.settings.reap = Reap::Default(default_reap(self.settings.idle_timeout));
        }
        self.settings.check(NAMES)?;
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
        self.settings.reap_interval(runtime.as_ref())?;
        let clock = self.settings.clock_or(Clock::new);
        // One reading, both ways: the instant and the clock's raw count at it.
        let base_raw = clock.raw();
        let base = clock.scaled(base_raw);
        let shards = (self.pool_size / 8).clamp(1, MAX_SHARDS);
        let shared = Arc::new(Shared {
            directory: Directory::with_hashing(shards, limit, self.key_hashing),
            connector: Arc::new(self.connector),
            store: self.store,
            max_idle: ticks_within(&clock, duration_ns(self.settings.idle_timeout)),
            clock,
            base,
            base_raw,
            prewarm: self.prewarm,
            idle: Mutex::new(Vec::new()),
            unstarted: Batch::new(),
            counters: Arc::new(Counters::new(self.settings.name.clone())),
        });
        let reaper = self
            .settings
            .start_reaper(runtime.as_ref(), &shared, |shared| {
                shared.reap(shared.now());
            })?;
        Ok(SessionPool { shared, reaper })
    }
}

impl<C, S> fmt::Debug for SessionPoolBuilder<C, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SessionPoolBuilder")
            .field("pool_size", &self.pool_size)
            .field("prewarm", &self.prewarm)
            .field("key_hashing", &self.key_hashing)
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

/// The setter names R3's users know.
const NAMES: Names = Names {
    idle_timeout: "max_idle_time",
    reap_interval: "reap_every",
};

/// The default reap interval for an idle time: half of it, within 1 s and 60 s.
fn default_reap(max_idle_time: Duration) -> Duration {
    (max_idle_time / 2).clamp(Duration::from_secs(1), Duration::from_secs(60))
}
